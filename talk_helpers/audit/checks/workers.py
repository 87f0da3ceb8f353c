"""Samples per DataLoader worker, counted inside the workers: a worker that reads nothing
in an epoch is flagged ⚠ idle (its share of the data went to the others, or nowhere)."""

from __future__ import annotations

import numpy as np

from talk_helpers.audit.checks.base import AuditRun, Check, Verdict
from talk_helpers.audit.collect import NO_WORKER, RankEpoch


def worker_samples(seen: RankEpoch) -> list[int] | None:
    """Samples per worker id, or None without workers or when a batch's worker is unknown."""
    if not seen.num_workers or (seen.workers == NO_WORKER).any():
        return None
    counts = np.bincount(seen.workers.astype(np.int64), weights=seen.sizes,
                         minlength=seen.num_workers)
    return [int(c) for c in counts[:seen.num_workers]]


def idle(counts: list[list[int] | None]) -> list[tuple[int, int]]:
    """(rank, worker) pairs that read no sample."""
    return [(r, w) for r, c in enumerate(counts) if c for w, n in enumerate(c) if n == 0]


class Workers(Check):
    name = "workers"

    def judge(self, run: AuditRun) -> Verdict:
        per_epoch = [[worker_samples(r) for r in run.epoch(e)] for e in range(run.n_epochs)]
        out = Verdict(detail=per_epoch, epoch_lines=[])
        for counts in per_epoch:
            known = bool(counts) and all(c is not None for c in counts)
            out.epoch_lines.append([_line(counts)] if known else [])
        # an epoch cut short by steps may end before every worker's turn
        judged = [(e, c) for e, c in enumerate(per_epoch)
                  if not any(r.truncated for r in run.epoch(e))]
        worst = max(judged, key=lambda ec: len(idle(ec[1])), default=None)
        if worst is not None and idle(worst[1]):
            total = sum(len(w) for w in worst[1] if w is not None)
            out.problems.append(("⚠", f"{len(idle(worst[1]))} of {total} workers idle"))
        out.data = {"epochs": [{"samples_per_worker": c if all(x is not None for x in c)
                                else None, "idle_workers": [list(p) for p in idle(c)]}
                               for c in per_epoch]}
        return out


def _line(counts: list[list[int]]) -> str:
    per_rank = " · ".join(f"rank {r}: {', '.join(map(str, c))}" for r, c in enumerate(counts))
    found = idle(counts)
    total = sum(len(c) for c in counts)
    if found:
        return f"⚠ samples per worker: {per_rank} — {len(found)} of {total} workers idle"
    return f"✔ samples per worker: {per_rank}"
