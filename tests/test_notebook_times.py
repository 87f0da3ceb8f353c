"""The notebook timing benchmark: which target each cell gets, and which excuses it lists."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "notebook_times.py"
_spec = importlib.util.spec_from_file_location("notebook_times", _PATH)
nt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nt)


def _cell(tags=(), **metadata):
    return nbformat.v4.new_code_cell("run_world(f, 2)", metadata={"tags": list(tags), **metadata})


def _row(cell, seconds, cell_index=1):
    target, why = nt.cell_target(cell)
    return {"notebook": "06_x", "cell": cell_index, "count": 1, "first_line": "x",
            "seconds": seconds, "target": target, "why": why, "error": False}


def test_a_plain_cell_gets_three_seconds():
    assert nt.cell_target(_cell()) == (3.0, "")


def test_a_timeout_lesson_gets_its_timeout_plus_a_second():
    target, why = nt.cell_target(_cell(["timeout-lesson-2.5"]))
    assert target == 3.5
    assert "2.5 s timeout" in why


def test_a_slow_lesson_has_no_target_and_carries_its_reason():
    cell = _cell(["slow-lesson"], slow_lesson_reason="a fresh spawned world is the lesson")
    assert nt.cell_target(cell) == (float("inf"), "a fresh spawned world is the lesson")


def test_a_slow_lesson_without_a_reason_is_refused():
    with pytest.raises(ValueError, match="slow_lesson_reason"):
        nt.cell_target(_cell(["slow-lesson"]))


def test_honest_exceptions_list_excused_cells_over_three_seconds_only():
    slow = _cell(["slow-lesson"], slow_lesson_reason="spawn start-up is the lesson")
    timeout = _cell(["timeout-lesson-2.5"])
    rows = [_row(slow, 6.0, 1), _row(timeout, 2.5, 2), _row(timeout, 2.9, 3),
            _row(_cell(), 4.0, 4), _row(timeout, 3.4, 5), _row(timeout, 3.8, 6)]
    assert [r["cell"] for r in nt.honest_exceptions(rows)] == [1, 5]


def test_the_table_names_cells_over_target_and_the_honest_exceptions():
    slow = _cell(["slow-lesson"], slow_lesson_reason="spawn start-up is the lesson")
    rows = [_row(slow, 6.0, 1), _row(_cell(), 4.0, 4)]
    text = nt.table("spawn", rows, {"06_x": 11.0}, {"06_x": "0.1"}, "0.2")
    assert "Cells over target (1): 06 cell 4 (4.0 s > 3 s)" in text
    assert "- 06 cell 1 (6.0 s): spawn start-up is the lesson" in text


def test_methods_are_given_comma_separated_before_or_after_the_notebooks():
    assert nt._methods("spawn") == ["spawn"]
    assert nt._methods("fork,spawn") == ["fork", "spawn"]
    with pytest.raises(Exception, match="one or more of fork, forkserver, spawn"):
        nt._methods("fork,vfork")
