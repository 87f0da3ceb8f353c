import pytest

from talk_helpers.lessons import hang_debug
from talk_helpers.runtime.world import run_world

DUMP = """Process 4242: python -m ipykernel
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    all_reduce (/x/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252)
    wrapper (/x/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83)
    with_py_spy (/work/main/talk_helpers/hang_debug.py:122)
    _run (/work/main/talk_helpers/distributed.py:300)
Thread 4250 (idle): "Thread-1"
    wait (threading.py:320)
"""


def test_stack_frames_keep_the_main_thread_up_to_the_calling_helper():
    assert hang_debug.stack_frames(DUMP) == [
        "all_reduce (torch/distributed/distributed_c10d.py:3252)",
        "wrapper (torch/distributed/c10d_logger.py:83)",
        "with_py_spy (talk_helpers/hang_debug.py:122)",
    ]


@pytest.mark.parametrize("bad", [0, -1, 61, "3"])
def test_hold_outside_its_range_is_refused_naming_the_argument(bad):
    with pytest.raises(ValueError, match="hold_s"):
        hang_debug.plain_timeout(0, 2, hold_s=bad)


@pytest.mark.distributed
def test_monitored_barrier_names_the_rank_that_never_arrived():
    report = run_world(hang_debug.with_monitored_barrier, 2, args=(2.5, 1.0),
                       timeout_s=120, collective_timeout_s=10, start_method="fork")
    assert report.ok, report
    assert "Rank 1 failed to pass monitoredBarrier" in report.results[0]


@pytest.mark.distributed
def test_debug_detail_turns_the_silent_wait_into_a_named_missing_rank():
    report = run_world(hang_debug.with_debug_detail, 2, args=(2.5, 1.0),
                       timeout_s=120, collective_timeout_s=10, start_method="fork")
    assert report.ok, report
    assert "Ranks 1 failed to pass monitoredBarrier" in report.results[0]


def test_stack_frames_find_the_calling_thread_even_when_it_is_not_the_main_one():
    dump = DUMP.replace('"MainThread"', '"Thread-3 (run_cell)"').replace(
        'Thread 4242 (idle)', 'Thread 4200 (idle): "MainThread"\n    select (selectors.py:468)\n'
        'Thread 4242 (idle)')
    assert hang_debug.stack_frames(dump)[-1] == "with_py_spy (talk_helpers/hang_debug.py:122)"


def test_stack_frames_of_a_dump_without_the_caller_are_empty():
    assert hang_debug.stack_frames("Thread 1 (idle): \"MainThread\"\n    f (a.py:1)\n") == []


def test_stack_frames_read_through_colour_codes():
    coloured = DUMP.replace("all_reduce", "\x1b[32mall_reduce\x1b[0m")
    assert hang_debug.stack_frames(coloured) == hang_debug.stack_frames(DUMP)
