"""Counting the processes a cell starts: new interpreters that import torch, not forks."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from benchmarks import process_starts as ps

# Waits for a line on stdin, then starts one new interpreter that imports torch, one that
# does not, and one fork; each lives long enough to be seen, and all are waited for.
_PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    sys.stdin.readline()
    torch_child = subprocess.Popen([sys.executable, "-c", "import time, torch; time.sleep(1)"])
    plain_child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    pid = os.fork()
    if pid == 0:
        time.sleep(1)
        os._exit(0)
    os.waitpid(pid, 0)
    torch_child.wait()
    plain_child.wait()
    print("done", flush=True)
""")


def test_a_watch_files_new_processes_under_the_last_mark_and_tells_interpreters_from_forks():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        with ps.ProcessWatch(parent.pid, interval_s=0.05) as watch:
            watch.mark("before")
            time.sleep(0.2)
            watch.mark("cell")
            parent.stdin.write("go\n")
            parent.stdin.flush()
            assert parent.stdout.readline().strip() == "done"
        starts = watch.by_label()
    finally:
        parent.kill()
        parent.wait()
    assert "before" not in starts
    cell = starts["cell"]
    assert len(cell) == 3
    assert sum(s.new_interpreter for s in cell) == 2
    assert sum(s.torch_interpreter for s in cell) == 1
    assert watch.thread_cpu_s > 0


def test_a_watch_needs_a_positive_interval():
    with pytest.raises(ValueError, match="interval_s must be positive"):
        ps.ProcessWatch(os.getpid(), interval_s=0)


def test_starting_an_interpreter_that_imports_torch_costs_measurable_cpu():
    assert ps.interpreter_cpu_s(runs=1) > 0.1


def test_the_interpreter_cost_needs_at_least_one_run():
    with pytest.raises(ValueError, match="runs must be at least 1"):
        ps.interpreter_cpu_s(runs=0)
