"""The parent's side of one call: collect each rank's outcome until every rank reported,
one failed or the deadline passed, then stop what still runs."""

from __future__ import annotations

import os
import pickle
import queue as queue_module
import signal
import time
from dataclasses import dataclass, field

import psutil

from talk_helpers.runtime.processes import descendants, kill_tree
from talk_helpers.runtime.report import RankOutcome, WorldReport, mask_volatile

# After a rank raises, how long the others may take to report. A peer blocked in a
# collective with it fails within milliseconds (its connection closes: 10-25 ms here under
# every start method, also with three busy processes on two cores); one that is busy
# elsewhere (the hang lessons) would not report for minutes, and the cell waits this long.
ERROR_GRACE_S = 0.25


SILENT_DEATH_GRACE_S = 1.0  # a dead rank's last message may still be in the pipe


INTERRUPT_GRACE_S = 0.5  # a warm rank told to stop its call has this long to report


@dataclass
class Watch:
    """What the parent has heard from the ranks during one call."""

    world_size: int
    call: int = 0
    outcomes: dict[int, RankOutcome] = field(default_factory=dict)
    progress: dict[int, str] = field(default_factory=dict)
    stages: dict[int, str | None] = field(default_factory=dict)
    idle: set[int] = field(default_factory=set)
    stopped_by: str | None = None

    def drain(self, result_queue, wait: float) -> None:
        block = wait > 0
        while True:
            try:
                message = result_queue.get(block, wait) if block else result_queue.get_nowait()
            except (queue_module.Empty, EOFError, OSError):
                return
            block = False
            call, kind, rank = message[:3]
            if call != self.call and not (call == 0 and kind == "stage"):
                continue  # left over from an earlier call of a warm world
            if kind == "progress":
                self.progress[rank] = message[3]
            elif kind == "stage":
                self.stages[rank] = message[3]
            elif kind == "idle":
                self.idle.add(rank)
            elif kind == "ok":
                _, _, _, payload, elapsed = message
                self.outcomes[rank] = RankOutcome(
                    rank, "ok", result=pickle.loads(payload),
                    last_progress=self.progress.get(rank), elapsed_s=elapsed)
            elif kind == "error":
                _, _, _, error, tb, elapsed = message
                self.outcomes[rank] = RankOutcome(
                    rank, "error", error=mask_volatile(error), traceback=tb,
                    last_progress=self.progress.get(rank), elapsed_s=elapsed)

    def report(self, elapsed_s: float, method: str, warm: bool) -> WorldReport:
        for rank, outcome in self.outcomes.items():
            if outcome.last_progress is None:
                outcome.last_progress = self.progress.get(rank)
            if not outcome.ok and outcome.last_progress is None:
                stage = self.stages.get(rank, "starting the process")
                if stage is not None:
                    outcome.last_progress = f"(set-up: {stage})"
        return WorldReport(
            world_size=self.world_size,
            ranks=[self.outcomes[r] for r in range(self.world_size)],
            elapsed_s=elapsed_s,
            stopped_by=self.stopped_by,
            start_method=method,
            warm=warm,
        )


def supervise(procs, handles, result_queue, watch: Watch, deadline: float,
               interrupt: bool = False) -> dict:
    """Collect every rank's outcome until all reported, one failed or the deadline passed.

    Ranks still running at the end (and their descendants) are killed and reported as
    "timeout" or "stopped". ``interrupt`` (warm ranks): after another rank's failure, the
    ranks still running are first told to stop their call (:func:`interrupt_call`), and
    only those that have not reported within :data:`INTERRUPT_GRACE_S` are killed.
    Returns the descendants seen, by pid.
    """
    world_size = len(procs)
    known: dict[int, psutil.Process] = {}  # descendants seen so far, by pid
    first_error_at = None
    dead_since: dict[int, float] = {}
    next_scan = 0.0
    outcomes = watch.outcomes
    while True:
        watch.drain(result_queue, wait=0.05)
        now = time.monotonic()
        if now >= next_scan:
            live = [h for r, h in handles.items() if h is not None and r not in outcomes]
            for child in descendants(live):
                known.setdefault(child.pid, child)
            next_scan = now + 0.25
        for rank, p in enumerate(procs):
            if rank in outcomes or p.is_alive():
                continue
            since = dead_since.setdefault(rank, now)
            if now - since >= SILENT_DEATH_GRACE_S:
                outcomes[rank] = RankOutcome(
                    rank, "error",
                    error=f"ProcessDied: the rank process exited with code "
                          f"{p.exitcode} without reporting a result",
                )
        if first_error_at is None and any(o.status == "error" for o in outcomes.values()):
            first_error_at = now
        if len(outcomes) == world_size:
            break
        if first_error_at is not None and now >= first_error_at + ERROR_GRACE_S:
            watch.stopped_by = "error"
            break
        if now >= deadline:
            watch.stopped_by = "deadline"
            break
    running = [r for r in range(world_size) if r not in outcomes]
    interrupted = []
    if running and interrupt and watch.stopped_by == "error" and hasattr(signal, "SIGUSR1"):
        _interrupt(procs, running, result_queue, watch)
        interrupted = [r for r in running if r in outcomes]
    unreported = [r for r in running if r not in outcomes]
    if unreported:
        kill_tree([handles[r] for r in unreported], known=list(known.values()))
        watch.drain(result_queue, wait=0.0)
    for rank in running:  # an interrupted rank's own report is not its outcome
        if rank not in outcomes or rank in interrupted:
            status = "timeout" if watch.stopped_by == "deadline" else "stopped"
            outcomes[rank] = RankOutcome(rank, status, last_progress=watch.progress.get(rank))
    return known


def _interrupt(procs, ranks, result_queue, watch: Watch) -> None:
    """Tell warm ``ranks`` to stop their call; wait up to :data:`INTERRUPT_GRACE_S` for
    them to report it. A rank blocked inside a collective hears it only when that returns."""
    for rank in ranks:
        try:
            os.kill(procs[rank].pid, signal.SIGUSR1)
        except OSError:
            pass
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    while any(r not in watch.outcomes for r in ranks) and time.monotonic() < deadline:
        watch.drain(result_queue, wait=0.02)
