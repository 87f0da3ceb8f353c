"""variables_set: environment variables for one block, each put back as it was after it."""

import os

import pytest

from talk_helpers.environment import variables_set


def test_variables_are_set_in_the_block_and_put_back_or_unset_after_it(monkeypatch):
    monkeypatch.setenv("TALK_TEST_A", "before")
    monkeypatch.delenv("TALK_TEST_B", raising=False)
    with variables_set({"TALK_TEST_A": "inside", "TALK_TEST_B": "inside"}):
        assert (os.environ["TALK_TEST_A"], os.environ["TALK_TEST_B"]) == ("inside", "inside")
    assert os.environ["TALK_TEST_A"] == "before" and "TALK_TEST_B" not in os.environ


def test_keep_set_leaves_a_callers_value_and_fills_in_the_rest(monkeypatch):
    monkeypatch.setenv("TALK_TEST_A", "caller's")
    monkeypatch.delenv("TALK_TEST_B", raising=False)
    with variables_set({"TALK_TEST_A": "default", "TALK_TEST_B": "default"}, keep_set=True):
        assert (os.environ["TALK_TEST_A"], os.environ["TALK_TEST_B"]) == ("caller's", "default")
    assert os.environ["TALK_TEST_A"] == "caller's" and "TALK_TEST_B" not in os.environ


def test_the_variables_are_put_back_when_the_block_raises_and_others_it_set_stay(monkeypatch):
    monkeypatch.delenv("TALK_TEST_A", raising=False)
    monkeypatch.delenv("TALK_TEST_OTHER", raising=False)
    with pytest.raises(KeyError), variables_set({"TALK_TEST_A": "inside"}):
        os.environ["TALK_TEST_OTHER"] = "set by the block"
        raise KeyError("the block fails")
    assert "TALK_TEST_A" not in os.environ
    assert os.environ.pop("TALK_TEST_OTHER") == "set by the block"
