import pytest
import torch.multiprocessing as mp

from talk_helpers.start_method import apply_start_method, requested_start_method


def test_unset_variable_leaves_the_default(monkeypatch):
    monkeypatch.delenv("TALK_START_METHOD", raising=False)
    assert requested_start_method() is None


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_variable_becomes_the_default_start_method(monkeypatch, method):
    before = mp.get_start_method()
    monkeypatch.setenv("TALK_START_METHOD", method)
    try:
        assert apply_start_method() == method
        assert mp.get_start_method() == method
    finally:
        mp.set_start_method(before, force=True)


def test_unknown_method_is_rejected_with_the_allowed_values(monkeypatch):
    monkeypatch.setenv("TALK_START_METHOD", "thread")
    with pytest.raises(ValueError, match="TALK_START_METHOD='thread' is not one of fork"):
        requested_start_method()
