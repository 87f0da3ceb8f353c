"""Tools for a hang you did not predict, each run on a real bounded hang (notebook 06).

Every function runs inside the ranks of ``run_world``: rank 0 waits in a collective that
rank 1 never joins (rank 1 is "saving a checkpoint" for ``hold_s`` seconds). Rank 0 catches
the error its tool raises and returns the message, so the notebook shows what a stuck
job would print:

- :func:`plain_timeout`: gloo's own timeout message, nothing more.
- :func:`with_debug_detail`: the same hang with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, which
  wraps a process group so that every collective is first checked across ranks.
- :func:`with_monitored_barrier`: ``dist.monitored_barrier`` names the first rank that
  never came (every such rank with ``wait_all_ranks=True``).
- :func:`with_py_spy`: rank 1 runs ``py-spy dump`` on rank 0 while it waits.
- :func:`with_flight_recorder`: after the timeout every rank reads its own flight recorder,
  the ring buffer of recent collectives that torch keeps in every process.
"""

import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from talk_helpers.arguments import require_int
from talk_helpers.runtime.devices import collective_device
from talk_helpers.third_party import native_stderr_silenced

__all__ = ["plain_timeout", "recorded_collectives", "stack_frames", "with_debug_detail",
           "with_flight_recorder", "with_monitored_barrier", "with_py_spy"]


def _check_hold(hold_s: float, wait_s: float) -> None:
    for name, value in (("hold_s", hold_s), ("wait_s", wait_s)):
        if not isinstance(value, int | float) or not 0 < value <= 60:
            raise ValueError(f"{name} must be a number of seconds in (0, 60], got {value!r}")


def _first_line(exc: BaseException) -> str:
    """The part of an error a person reads first: its first non-empty line, with gloo's
    source path shortened to the file name."""
    text = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return re.sub(r"\[[^\]]*/([^/\]]+:\d+)\]", r"[\1]", text)


def _rank0_all_reduce(group) -> str:
    """Rank 0's side of every hang: an all-reduce on ``group`` that the other rank never
    joins; returns the first line of the error it ends with."""
    try:
        with native_stderr_silenced():
            dist.all_reduce(torch.ones(1, device=collective_device(group)), group=group)
    except RuntimeError as exc:
        return _first_line(exc)
    return "✘ the all-reduce finished: nothing hung"


def _hang(rank: int, group, hold_s: float) -> str:
    """The bounded hang: rank 1 is busy for ``hold_s`` seconds while rank 0 waits for it
    in an all-reduce on ``group``."""
    if rank != 0:
        time.sleep(hold_s)
        return "held"
    return _rank0_all_reduce(group)


def plain_timeout(rank: int, world_size: int, hold_s: float = 3.0, wait_s: float = 1.5) -> str:
    """Rank 0 all-reduces on a group with a ``wait_s`` timeout; rank 1 never joins."""
    _check_hold(hold_s, wait_s)
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_s))
    return _hang(rank, group, hold_s)


def with_debug_detail(rank: int, world_size: int, hold_s: float = 3.0,
                      wait_s: float = 1.5) -> str:
    """The same hang on a group made with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: torch wraps
    the group and checks every collective across ranks (a monitored barrier, then a
    comparison of op type and tensor shapes) before running it."""
    _check_hold(hold_s, wait_s)
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level_from_env()
    try:
        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_s))
    finally:
        os.environ.pop("TORCH_DISTRIBUTED_DEBUG")
        dist.set_debug_level_from_env()
    return _hang(rank, group, hold_s)


def with_monitored_barrier(rank: int, world_size: int, hold_s: float = 3.0,
                           wait_s: float = 1.5, wait_all_ranks: bool = False) -> str:
    """``dist.monitored_barrier``: rank 0 waits at most ``wait_s`` and names the first rank
    that is missing (all of them with ``wait_all_ranks=True``)."""
    _check_hold(hold_s, wait_s)
    if rank != 0:
        time.sleep(hold_s)
        return "held"
    try:
        with native_stderr_silenced():
            dist.monitored_barrier(timeout=timedelta(seconds=wait_s),
                                   wait_all_ranks=wait_all_ranks)
    except RuntimeError as exc:
        return _first_line(exc)
    return "✘ every rank arrived: nothing hung"


def with_py_spy(rank: int, world_size: int, hold_s: float = 3.0, wait_s: float = 2.5) -> str:
    """Rank 0 waits in an all-reduce; rank 1 runs ``py-spy dump`` on rank 0's process and
    returns the frames of its main thread (innermost first), or why it could not."""
    _check_hold(hold_s, wait_s)
    pids = [None] * world_size
    dist.all_gather_object(pids, os.getpid())
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_s))
    if rank == 0:
        return _rank0_all_reduce(group)
    time.sleep(0.5)  # let rank 0 get into its all-reduce
    py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(py_spy):
        return "py-spy is not installed (pip install py-spy)"
    env = dict(os.environ, NO_COLOR="1")
    env.pop("FORCE_COLOR", None)
    env.pop("CLICOLOR_FORCE", None)
    run = subprocess.run([py_spy, "dump", "--pid", str(pids[0])], capture_output=True,
                         text=True, timeout=20, env=env)
    time.sleep(max(0.0, hold_s - 0.5))
    if run.returncode != 0:
        return f"py-spy could not attach: {run.stderr.strip() or run.stdout.strip()}"
    frames = stack_frames(run.stdout)
    if not frames:
        return "py-spy attached, but no thread was in talk_helpers code:\n" + run.stdout[:600]
    return "\n".join(frames)


def with_flight_recorder(rank: int, world_size: int, hold_s: float = 3.0,
                         wait_s: float = 1.5, steps: int = 2) -> list[str]:
    """``steps`` all-reduces that every rank joins, then the bounded hang; afterwards every
    rank returns the collectives its flight recorder holds for the hang's group, oldest
    first, as ``"#<sequence number> <op>"``.

    The recorder is on by default (``TORCH_FR_BUFFER_SIZE`` entries, 2,000 unless set; 0
    turns it off) and records gloo collectives too; each rank reads its own here, as the
    NCCL watchdog would dump it on a timeout."""
    _check_hold(hold_s, wait_s)
    require_int("steps", steps, minimum=0, maximum=100)
    before = _last_record_id()
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_s))
    for _ in range(steps):
        dist.all_reduce(torch.ones(1, device=collective_device(group)), group=group)
    _hang(rank, group, hold_s)
    return recorded_collectives(_flight_recorder(), group.group_name, after=before)


def recorded_collectives(dump: dict, group_name: str, after: int = -1) -> list[str]:
    """The collectives of process group ``group_name`` in a flight recorder ``dump`` (the
    unpickled ``_dump_fr_trace()``) recorded after record ``after``, as
    ``"#<sequence number> <op>"``, oldest first."""
    return [f"#{entry['collective_seq_id']} {entry['profiling_name']}"
            for entry in dump.get("entries", [])
            if entry["process_group"][0] == group_name and entry["record_id"] > after]


def _flight_recorder() -> dict:
    from torch._C._distributed_c10d import _dump_fr_trace

    return pickle.loads(_dump_fr_trace())


def _last_record_id() -> int:
    """The flight recorder is one per process: a warm rank's holds earlier calls too."""
    return max((entry["record_id"] for entry in _flight_recorder().get("entries", [])),
               default=-1)


def stack_frames(dump: str, stop_at: str = "talk_helpers") -> list[str]:
    """The frames of the thread that is running ``stop_at`` code (the code that called the
    collective; under a notebook that need not be the process's main thread) from
    ``py-spy dump`` output, as ``function (file:line)``, innermost first, up to and
    including the first ``stop_at`` frame; paths shortened to the package-relative file."""
    threads: list[list[tuple[str, str]]] = []
    dump = re.sub(r"\x1b\[[0-9;]*m", "", dump)  # py-spy colours its output when asked to
    for line in dump.splitlines():
        if line.startswith("Thread "):
            threads.append([])
            continue
        match = re.match(r"\s+(\S+) \((.+):(\d+)\)$", line)
        if match and threads:
            func, path, lineno = match.groups()
            short = re.sub(r".*/site-packages/", "", path)
            short = re.sub(r".*/(talk_helpers/)", r"\1", short)
            threads[-1].append((f"{func} ({short}:{lineno})", path))
    for frames in threads:
        names = [name for name, _ in frames]
        hits = [i for i, (_, path) in enumerate(frames) if stop_at in path]
        if hits:
            return names[:hits[0] + 1]
    return []
