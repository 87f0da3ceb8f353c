import pytest
import torch.multiprocessing as mp

from talk_helpers.runtime.start_cost import time_limit_s
from talk_helpers.runtime.start_method import apply_start_method, requested_start_method


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


def test_start_forkserver_does_nothing_under_another_method(monkeypatch):
    from talk_helpers.runtime.start_method import start_forkserver

    before = mp.get_start_method()
    try:
        mp.set_start_method("spawn", force=True)
        assert start_forkserver() is False
    finally:
        mp.set_start_method(before, force=True)


def test_the_forkserver_children_start_with_torch_and_ddp_imports_already_done():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import concurrent.futures as cf, multiprocessing as m, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from world_functions import is_imported\n"
        "from talk_helpers.runtime.start_method import FORKSERVER_PRELOAD, start_forkserver\n"
        "if __name__ == '__main__':\n"
        "    m.set_start_method('forkserver', force=True)\n"
        "    assert start_forkserver()\n"
        "    with cf.ProcessPoolExecutor(1, mp_context=m.get_context()) as pool:\n"
        "        print(all(pool.map(is_imported, FORKSERVER_PRELOAD)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=time_limit_s(60, interpreters=2))
    assert out.stdout.strip() == "True", out.stderr
