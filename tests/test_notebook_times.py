"""The notebook timing benchmark: which target each cell gets, and which excuses it lists."""

import nbformat
import pytest

from benchmarks import notebook_times as nt


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


def test_a_startup_bound_cell_without_a_reason_is_refused():
    with pytest.raises(ValueError, match="startup_reason"):
        nt.cell_target(_cell(["startup-bound"]))


def test_a_startup_bound_cell_may_take_the_start_up_of_its_interpreters_plus_a_second():
    cell = _cell(["startup-bound"], startup_reason="two ranks with two workers each")
    target, why = nt.cell_target(cell, interpreters=6, interpreter_cpu_s=1.0, cores=2)
    assert target == 4.0  # 6 × 1.0 CPU-s on 2 cores, + 1 s
    assert why.startswith("6 new interpreters import torch, 6 × 1.00 CPU-s on 2 cores = 3.0 s")
    assert why.endswith(": two ranks with two workers each")


def test_a_startup_bound_cell_that_starts_few_interpreters_keeps_three_seconds():
    cell = _cell(["startup-bound"], startup_reason="two ranks with two workers each")
    assert nt.cell_target(cell, interpreters=0, interpreter_cpu_s=1.0, cores=2) == (3.0, "")
    assert nt.cell_target(cell, interpreters=3, interpreter_cpu_s=1.0, cores=2) == (3.0, "")


def test_a_startup_bound_timeout_lesson_adds_its_timeout_to_the_start_up():
    cell = _cell(["timeout-lesson-2", "startup-bound"], startup_reason="the first warm world")
    target, why = nt.cell_target(cell, interpreters=4, interpreter_cpu_s=1.0, cores=2)
    assert target == 5.0  # 2 s timeout + 4 × 1.0 / 2 + 1 s
    assert "plus its 2 s timeout" in why
    assert nt.cell_target(cell)[0] == 3.0  # no interpreters: the timeout lesson's own target


def test_repeated_runs_keep_the_strictest_target_a_run_gave():
    cell = _cell(["startup-bound"], startup_reason="eight workers")
    runs = [[dict(_row(cell, 4.0), target=t, interpreters=n, processes=n)]
            for t, n in ((5.0, 8), (4.5, 7), (5.0, 8))]
    (row,) = nt.combine(runs)
    assert (row["seconds"], row["target"], row["interpreters"]) == (4.0, 4.5, 7)
    assert row["spread"] == (4.0, 4.0)


def test_the_table_counts_each_cells_new_processes_and_interpreters():
    row = dict(_row(_cell(), 1.0), processes=3, interpreters=2)
    text = nt.table("spawn", [row], {"06_x": 2.0}, {"06_x": "0.1"}, "0.2", watch_cpu_s=0.4)
    assert "| 06 | 1 | `x` | 1.00 |  | 3 | 2 | 3 |  |" in text
    assert "counting new processes took 0.4 CPU-s" in text


def test_a_measured_target_is_shown_to_a_tenth_of_a_second():
    cell = _cell(["startup-bound"], startup_reason="eight workers")
    row = _row(cell, 5.0)
    row["target"], row["why"] = nt.cell_target(cell, interpreters=8, interpreter_cpu_s=1.041,
                                               cores=2)
    text = nt.table("spawn", [row], {"06_x": 6.0}, {"06_x": "0.1"}, "0.2")
    assert "Every cell within its target." in text
    assert "| 5.2 (8 new interpreters import torch" in text
