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


@pytest.mark.distributed
def test_monitored_barrier_names_every_missing_rank_only_when_asked():
    first = run_world(hang_debug.with_monitored_barrier, 3, args=(2.5, 1.0),
                      timeout_s=120, collective_timeout_s=10, start_method="fork")
    every = run_world(hang_debug.with_monitored_barrier, 3, args=(2.5, 1.0, True),
                      timeout_s=120, collective_timeout_s=10, start_method="fork")
    assert first.ok and every.ok, (first, every)
    assert first.results[0] == "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 1000 ms"
    assert every.results[0] == "[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 1000 ms"


@pytest.mark.distributed
def test_flight_recorder_shows_the_waiting_rank_one_collective_ahead():
    report = run_world(hang_debug.with_flight_recorder, 2, args=(2.5, 1.0),
                       timeout_s=120, collective_timeout_s=10, start_method="fork")
    assert report.ok, report
    assert report.results == [["#1 gloo:all_reduce", "#2 gloo:all_reduce", "#3 gloo:all_reduce"],
                              ["#1 gloo:all_reduce", "#2 gloo:all_reduce"]]


FLIGHT_RECORDER_SIZE = """
import os, pickle, torch, torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
for _ in range(2100):
    dist.all_reduce(torch.ones(1))
print(len(pickle.loads(_dump_fr_trace()).get("entries", [])))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("size, kept", [(None, 2000), ("10", 10), ("0", 0)])
def test_the_flight_recorder_is_on_by_default_with_2000_entries_and_resizable(size, kept):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")}
    if size is not None:
        env["TORCH_FR_BUFFER_SIZE"] = size
    run = subprocess.run([sys.executable, "-c", FLIGHT_RECORDER_SIZE],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) == kept
