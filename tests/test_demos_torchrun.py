"""The hang demo and its fix, run the way the README shows: with torchrun."""

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from talk_helpers.audit import audit
from talk_helpers.demos import hang, hang_fixed
from talk_helpers.runtime.world import run_ranks, run_world

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def torchrun(module: str, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    # --standalone: torchrun takes a free port itself, where a port chosen here could be
    # taken by another test before torchrun binds it (torch/distributed/run.py)
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", module, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_demo_data_really_gives_ranks_unequal_batches():
    report = audit(lambda rank, world_size, epoch: hang.make_loader(rank, world_size),
                   world_size=2, epochs=1, in_process=True)
    counts = report.checks[0].batch_counts.counts
    assert counts == tuple(hang.expected_batches(hang.shard_sizes(2), r, 2) for r in range(2))
    assert counts == (3, 4)
    assert report.checks[0].exactly_once.ok  # nothing is lost: only the batching differs


def test_the_demo_says_how_to_start_it_without_torchrun():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    out = subprocess.run([sys.executable, "-m", "talk_helpers.demos.hang"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "torchrun --nproc-per-node 2 -m talk_helpers.demos.hang" in out.stderr


@pytest.mark.distributed
def test_hang_fails_at_the_collective_timeout_with_a_clear_message():
    out = torchrun("talk_helpers.demos.hang", "--timeout", "3")
    assert out.returncode != 0, out.stdout + out.stderr
    assert "batches per rank: rank 0: 3, rank 1: 4" in out.stdout
    assert out.stdout.count("FAILED") == 2, out.stdout
    assert "Timed out" in out.stdout
    assert "different numbers of batches (3, 4)" in out.stdout


@pytest.mark.distributed
def test_hang_fixed_finishes():
    out = torchrun("talk_helpers.demos.hang_fixed")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("finished: 3 steps") == 2, out.stdout
    assert "FAILED" not in out.stdout


@pytest.mark.distributed
def test_the_same_loops_run_in_a_world_from_run_world():
    broken = run_world(hang.train_epoch, 2, start_method="fork", collective_timeout_s=3)
    # Each rank times out in its own collective; the one that reports second may be
    # stopped first (0.25 s after the first error) when a busy machine keeps it from a core.
    failed = [r for r in broken.ranks if r.status == "error"]
    assert failed and all(r.status in ("error", "stopped") for r in broken.ranks)
    assert all(r.error.startswith("CollectiveFailed: ") for r in failed)
    assert all("Timed out" in r.error for r in failed)

    flag = run_ranks(hang_fixed.train_epoch, 2, start_method="fork")
    assert [r["steps"] for r in flag] == [3, 3]
    assert [r["left_over"] for r in flag] == [0, 1]

    join = run_ranks(functools.partial(hang_fixed.train_epoch, fix="join"), 2,
                     start_method="fork")
    assert [r["steps"] for r in join] == [3, 4]
    assert join[0]["loss"] == join[1]["loss"]
