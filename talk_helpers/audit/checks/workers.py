"""Samples per DataLoader worker, counted inside the workers: a worker that reads nothing
in an epoch is flagged ⚠ idle (its share of the data went to the others, or nowhere).

Workers are counted through the loaders built on a DataLoader
(:func:`talk_helpers.audit.collect.worker_target`); when a loader has workers the audit
cannot count, the report says so and why. An idle worker's usual cause, fewer shards than
ranks × workers, is named with the shard count when the dataset says it
(:func:`shard_count`).
"""

from __future__ import annotations

import numpy as np

from talk_helpers.audit.checks.base import AuditRun, Check, Recorder, Verdict
from talk_helpers.audit.checks.causes import idle_cause
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

    def recorder(self, plan) -> Recorder:
        return ShardRecorder()

    def judge(self, run: AuditRun) -> Verdict:
        per_epoch = [[worker_samples(r) for r in run.epoch(e)] for e in range(run.n_epochs)]
        out = Verdict(detail=per_epoch, epoch_lines=[])
        notes = [r.workers_note for r in run.epoch(0) if r.workers_note]
        for counts in per_epoch:
            known = bool(counts) and all(c is not None for c in counts)
            out.epoch_lines.append([_line(counts)] if known else [])
        if notes:
            out.rows.append(("workers", f"· samples per worker {notes[0]}"))
        # an epoch cut short by steps may end before every worker's turn
        judged = [(e, c) for e, c in enumerate(per_epoch)
                  if not any(r.truncated for r in run.epoch(e))]
        worst = max(judged, key=lambda ec: len(idle(ec[1])), default=None)
        if worst is not None and idle(worst[1]):
            total = sum(len(w) for w in worst[1] if w is not None)
            out.problems.append(("⚠", f"{len(idle(worst[1]))} of {total} workers idle"))
            shards = [rec for per_rank in run.recordings(self.name) for rec in per_rank]
            out.causes.append(idle_cause(run, len(idle(worst[1])), total, shards))
        out.data = {"epochs": [{"samples_per_worker": c if all(x is not None for x in c)
                                else None, "idle_workers": [list(p) for p in idle(c)]}
                               for c in per_epoch],
                    "workers_note": notes[0] if notes else None,
                    "causes": [c.to_dict() for c in out.causes]}
        return out


def _line(counts: list[list[int]]) -> str:
    per_rank = " · ".join(f"rank {r}: {', '.join(map(str, c))}" for r, c in enumerate(counts))
    found = idle(counts)
    total = sum(len(c) for c in counts)
    if found:
        return f"⚠ {len(found)} of {total} workers idle\nsamples per worker: {per_rank}"
    return f"✔ samples per worker: {per_rank}"


class ShardRecorder(Recorder):
    """In each rank: how many shards the dataset says it has (None when it does not)."""

    def start_epoch(self, epoch: int, loader) -> None:
        self.shards = shard_count(loader)

    def end_epoch(self, epoch: int):
        return self.shards


def shard_count(loader) -> int | None:
    """The shards a loader's dataset reads from, where the library says it: an HF
    ``IterableDataset`` (``num_shards``, ``datasets/iterable_dataset.py``), a webdataset
    pipeline whose first stage lists its shards (``urls`` of ``SimpleShardList`` or
    ``ResampledShards``, ``webdataset/shardlists.py``)."""
    from talk_helpers.audit.collect import worker_target

    target, _ = worker_target(loader)
    dataset = getattr(target if target is not None else loader, "dataset", None)
    if dataset is None:
        return None
    try:
        found = getattr(dataset, "num_shards", None)
        if isinstance(found, int) and not isinstance(found, bool):
            return found
        stages = getattr(dataset, "pipeline", None)
        if isinstance(stages, list) and stages:
            urls = getattr(stages[0], "urls", None)
            if isinstance(urls, list | tuple):
                return len(urls)
    except Exception:   # a library whose attribute raised: the count stays unknown
        return None
    return None
