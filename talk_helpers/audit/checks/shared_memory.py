"""Do the batches a node's loaders keep in flight fit in ``/dev/shm``?

A DataLoader worker hands every batch to its rank through shared memory; each rank keeps
``num_workers × prefetch_factor`` batches waiting, plus those its loop holds, and the
ranks of one node share one ``/dev/shm`` (64 MiB in a default Docker container). When
they do not fit, the workers die with "No space left on device" or a bus error, hours into
a run whose first batches were fine.

Recorded in each rank: the largest batch's size in shared memory
(:func:`talk_helpers.checks.shm_budget.batch_bytes`), the loader's workers and prefetch
factor, and the size of ``/dev/shm``. Judged with
:func:`talk_helpers.checks.shm_budget.check_shm_budget` for the ranks of one node
(``LOCAL_WORLD_SIZE`` under torchrun; the audit's own world runs on one machine). It says
nothing when the batches fit, when no worker is used or where there is no ``/dev/shm``;
when they do not fit it fails the audit.
"""

from __future__ import annotations

import os

from talk_helpers.audit.checks.base import AuditRun, Check, Recorder, Verdict
from talk_helpers.checks.shm_budget import batch_bytes, check_shm_budget

SHM = "/dev/shm"


def shm_size(path: str = SHM) -> int | None:
    """The size of the shared-memory filesystem in bytes, or None where there is none."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_blocks * stats.f_frsize or None


class SharedMemoryRecorder(Recorder):
    def start_epoch(self, epoch: int, loader) -> None:
        self.workers = int(getattr(loader, "num_workers", 0) or 0)
        self.prefetch = int(getattr(loader, "prefetch_factor", None) or 2)
        self.largest = 0

    def after_batch(self, batches: int, batch=None) -> None:
        if self.workers and batch is not None:
            self.largest = max(self.largest, batch_bytes(batch))

    def end_epoch(self, epoch: int) -> dict:
        local = os.environ.get("LOCAL_WORLD_SIZE", "")
        return {"batch_bytes": self.largest, "num_workers": self.workers,
                "prefetch_factor": self.prefetch, "shm_bytes": shm_size(),
                "local_ranks": int(local) if local.isdigit() else None}


class SharedMemory(Check):
    name = "shared_memory"

    def recorder(self, plan) -> Recorder:
        return SharedMemoryRecorder()

    def judge(self, run: AuditRun) -> Verdict:
        seen = [rec for per_rank in run.recordings(self.name) for rec in per_rank if rec]
        out = Verdict()
        if not seen or any(r["shm_bytes"] is None for r in seen):
            out.data = {"judged": False}
            return out
        worst = max(seen, key=lambda r: r["batch_bytes"] * r["num_workers"] * r["prefetch_factor"])
        report = check_shm_budget(
            worst["batch_bytes"], num_workers=worst["num_workers"],
            prefetch_factor=worst["prefetch_factor"],
            shm_bytes=min(r["shm_bytes"] for r in seen),
            ranks_per_node=worst["local_ranks"] or run.world_size)
        out.data = {"judged": True, "ok": report.ok, "needed_bytes": report.needed_bytes,
                    "shm_bytes": report.shm_bytes, "verdict": repr(report)}
        out.detail = report
        if not report.ok:
            out.problems.append(("✘", "/dev/shm too small"))
            out.rows.append(("memory", repr(report)))
        return out
