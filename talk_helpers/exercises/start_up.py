"""How long a grader waits for the processes it starts, and what it says when they are
late.

A forked worker starts in milliseconds; a spawned one imports torch again, seconds on a
quiet laptop and ten times that on a busy one. So a grader allows
``START_FLOOR_S + START_FACTOR × cost × waves``: ``cost`` is one interpreter's start here
(:func:`start_cost_s`, measured once, when processes still start after ``START_FLOOR_S``,
or the slowest start seen), ``waves`` the rounds of starts the cores need. When that runs
out the grade is *not graded* (:func:`late_start`), never "your code raised".
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time

import torch.multiprocessing as mp

from talk_helpers.exercises import Grade, GradeFailure, announce, not_graded
from talk_helpers.runtime.start_cost import interpreter_start_s
from talk_helpers.runtime.start_method import requested_start_method

__all__ = ["START_FACTOR", "START_FLOOR_S", "STALL_FLOOR_S", "audit_deadline_s",
           "audited", "late_start", "late_stall", "note_start",
           "start_allowance_s", "start_cost_s", "start_method", "stall_allowance_s"]

START_FLOOR_S = 30.0   # every start-up gets this long before the cost is even measured
START_FACTOR = 6.0     # then this many times what one interpreter costs here, per wave
STALL_FLOOR_S = 30.0   # workers that started: how long without a batch before giving up
FORK_COST_S = 0.2      # a forked worker's start, before any was seen
PROBE_TIMEOUT_S = 600.0  # how long a grader waits for the measure when it must


def start_method(context=None) -> str:
    """The start method a DataLoader with ``multiprocessing_context=context`` uses."""
    if context is None:
        return mp.get_start_method()
    if isinstance(context, str):
        return context
    return context.get_start_method()


def start_cost_s(method: str, *, wait: bool = False) -> float | None:
    """Seconds one worker of ``method`` takes to start here, as best known: the slowest
    start seen, and for spawn and forkserver at least an interpreter importing torch,
    measured once in a thread the first call begins (None until then, unless ``wait``)."""
    seen = max(_seen.get(method, 0.0), FORK_COST_S)
    if method == "fork":
        return seen
    measured = _probe(wait=wait)
    return None if measured is None else max(seen, measured)


def note_start(method: str, seconds: float) -> None:
    """Record that a worker of ``method`` took ``seconds`` to start."""
    if seconds >= 0:
        _seen[method] = max(_seen.get(method, 0.0), float(seconds))


def start_allowance_s(method: str, processes: int, *, wait: bool = False) -> float | None:
    """How long ``processes`` processes started together with ``method`` may take to start
    (None while the cost is being measured, unless ``wait``)."""
    cost = start_cost_s(method, wait=wait)
    if cost is None:
        return None
    waves = math.ceil(max(1, processes) / (os.cpu_count() or 1))
    return START_FLOOR_S + START_FACTOR * cost * waves


def stall_allowance_s(method: str) -> float:
    """How long started workers may go without a batch (scaled by the known cost)."""
    known = _measured if method != "fork" and _measured is not None else 0.0
    return STALL_FLOOR_S + START_FACTOR * max(known, _seen.get(method, 0.0), FORK_COST_S)


def audit_deadline_s(world_size: int, workers: int, epochs: int) -> float:
    """How long a grader's audit may take here: ``world_size`` ranks that each start
    ``workers`` workers per epoch for ``epochs`` epochs, with this machine's start method."""
    method = requested_start_method() or mp.get_start_method()
    starts = world_size * (1 + workers * epochs)
    return START_FLOOR_S + start_allowance_s(method, starts, wait=True)


def audited(exercise: str, make_loader, *, world_size: int, workers: int, epochs: int,
            timeout_s: float | None = None, **options):
    """The audit of ``make_loader`` in a real world, announced, within ``timeout_s``
    (default :func:`audit_deadline_s`). Late, :class:`GradeFailure` with *not graded*:
    where each rank was, and to run the grader again."""
    from talk_helpers.audit import audit

    with announce(exercise, f"auditing your loader in a world of {world_size} ranks × "
                            f"{workers} workers: waiting for its processes to start and read"):
        deadline = timeout_s or audit_deadline_s(world_size=world_size, workers=workers,
                                                 epochs=epochs)
        report = audit(make_loader, world_size=world_size, epochs=epochs, timeout_s=deadline,
                       **options)
    if report.failure is not None and report.failure.kind == "hung":
        where = "; ".join(f"rank {rank}: {text}"
                          for rank, text in sorted((report.failure.progress or {}).items()))
        raise GradeFailure(not_graded(
            exercise, f"the audit's {world_size} ranks and their workers did not finish "
                      f"within {deadline:.0f} s ({where}). Starting processes is slow on this "
                      "machine now: run the grader again",
            "if it happens every time, look for a loop in __iter__ that never ends"))
    return report


def late_start(exercise: str, waited_s: float, method: str, *, what: str,
               started: str | None = None) -> Grade:
    """*Not graded*: ``what`` ("with num_workers=3, the workers") took more than
    ``waited_s`` to start; ``started`` says how many did ("1 of 3 started")."""
    done = f" ({started})" if started else ""
    return not_graded(exercise, f"{what} took more than {waited_s:.0f} s to start{done}; "
                                f"{_cost_words(method)}. Slow is not wrong: run the grader "
                                "again",
                      "if it happens every time, look at what your code does before its "
                      "first sample")


def late_stall(exercise: str, waited_s: float, *, what: str) -> Grade:
    """*Not graded*: ``what`` started, then gave no batch for ``waited_s``."""
    return not_graded(exercise, f"{what} started, then gave no batch for {waited_s:.0f} s. "
                                "The machine may be busy: run the grader again",
                      "if it happens every time, look for a loop in __iter__ that never "
                      "reaches its yield")


# --------------------------------------------------------------------------- internals

_seen: dict[str, float] = {}  # start method -> slowest start a grader saw
_measured: float | None = None
_probe_thread: threading.Thread | None = None
_lock = threading.Lock()


def _probe(*, wait: bool) -> float | None:
    """Seconds an interpreter that imports torch takes to start here: measured once, in a
    thread that the first call starts; None until it is done (``wait``: wait for it)."""
    global _probe_thread
    with _lock:
        if _measured is None and _probe_thread is None:
            _probe_thread = threading.Thread(target=_run_probe, name="start-cost-probe",
                                             daemon=True)
            _probe_thread.start()
        thread = _probe_thread
    if wait and _measured is None and thread is not None:
        thread.join(PROBE_TIMEOUT_S)
    return _measured


def _run_probe() -> None:
    global _measured
    started = time.monotonic()
    try:
        _measured = interpreter_start_s()
    except (OSError, subprocess.SubprocessError):
        _measured = time.monotonic() - started


def _cost_words(method: str) -> str:
    if method == "fork":
        return "forked workers start in a fraction of a second, so this machine is very busy"
    cost = start_cost_s(method)
    if cost is None:
        return f"each {method} worker starts Python and imports torch, which takes seconds"
    return (f"each {method} worker starts Python and imports torch, about {cost:.0f} s on "
            "this machine now")
