"""Does every rank, and every worker, get some of the shards?

Libraries that read shards (WebDataset, HF ``datasets``' iterable datasets, litdata)
deal whole shards to ranks, then to each rank's workers. With fewer shards than
``world_size × num_workers`` some workers read nothing; with fewer than ``world_size``
a whole rank has no batch, and the ranks that have data block at their first step in a
collective that rank never joins (webdataset/webdataset#188). Predicted here, before
anything runs, with the model of DataLoader order and sharding (:mod:`talk_helpers.model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from talk_helpers.arguments import require_int
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.model.dataloader import loader_batches
from talk_helpers.model.sharding import POLICIES, worker_streams
from talk_helpers.verdicts.render import BAD_MARK, OK_MARK, WARN_MARK, listing

__all__ = ["ShardCoverageReport", "check_shard_coverage"]


def check_shard_coverage(shard_sizes: Sequence[int], *, world_size: int, num_workers: int,
                         batch_size: int, drop_last: bool = False,
                         policy: str = "round_robin") -> ShardCoverageReport:
    """Predict how shards of ``shard_sizes`` reach ``world_size`` ranks × ``num_workers``
    workers (``policy``: how shards are dealt, see :mod:`talk_helpers.model.sharding`) and
    check that no rank is empty, every rank has as many batches, and no worker idles."""
    if isinstance(shard_sizes, str) or not isinstance(shard_sizes, Sequence | np.ndarray) \
            or not len(shard_sizes):
        raise TypeError(f"shard_sizes must be a non-empty list of shard lengths, "
                        f"got {shard_sizes!r}")
    for i, size in enumerate(shard_sizes):
        require_int(f"shard_sizes[{i}]", size, minimum=0)
    require_int("world_size", world_size, minimum=1)
    require_int("num_workers", num_workers, minimum=0)
    require_int("batch_size", batch_size, minimum=1)
    if not isinstance(drop_last, bool):
        raise TypeError(f"drop_last must be True or False, got {drop_last!r}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    streams = worker_streams(list(shard_sizes), nodes=world_size, workers=num_workers,
                             policy=policy)
    return ShardCoverageReport(
        shards=len(shard_sizes), world_size=world_size, num_workers=num_workers,
        samples=tuple(tuple(len(s) for s in rank) for rank in streams),
        batches=tuple(len(loader_batches(rank, batch_size, drop_last)) for rank in streams))


@dataclass(frozen=True, repr=False)
class ShardCoverageReport(OneLineReport):
    """Outcome of :func:`check_shard_coverage`: ``samples[rank][worker]`` each worker
    reads and ``batches[rank]`` each rank's loader yields."""

    shards: int
    world_size: int
    num_workers: int
    samples: tuple[tuple[int, ...], ...]
    batches: tuple[int, ...]

    @property
    def empty_ranks(self) -> list[int]:
        """Ranks with no batch at all."""
        return [r for r, n in enumerate(self.batches) if n == 0]

    @property
    def idle_workers(self) -> list[tuple[int, int]]:
        """(rank, worker) pairs that read no sample."""
        return [(r, w) for r, rank in enumerate(self.samples)
                for w, n in enumerate(rank) if n == 0]

    @property
    def ok(self) -> bool:
        """True when every rank has the same, non-zero number of batches."""
        return len(set(self.batches)) == 1 and not self.empty_ranks

    @property
    def status(self) -> str:
        """``"fail"`` (an empty rank or unequal batches), ``"warn"`` (idle workers) or
        ``"pass"``."""
        if not self.ok:
            return "fail"
        return "warn" if self.idle_workers else "pass"

    def _mark(self) -> str:
        return {"pass": OK_MARK, "warn": WARN_MARK, "fail": BAD_MARK}[self.status]

    def _verdict(self) -> str:
        workers = max(self.num_workers, 1)
        head = (f"shards: {self.shards} for {self.world_size} ranks × {workers} "
                f"{'worker' if workers == 1 else 'workers'}")
        problems = []
        if self.empty_ranks:
            empty = self.empty_ranks
            who = f"rank {empty[0]} gets" if len(empty) == 1 else \
                f"ranks {listing(empty, len(empty), 6)} get"
            problems.append(f"{who} no batch: the others block at step 1")
        elif not self.ok:
            counts = " · ".join(map(str, self.batches))
            problems.append(f"batches per rank {counts}: DDP blocks at step "
                            f"{min(self.batches) + 1}")
        if self.idle_workers:
            total = self.world_size * workers
            problems.append(f"{len(self.idle_workers)} of {total} workers idle")
        if not problems:
            return f"{head}: every worker reads, {self.batches[0]} batches on every rank"
        return f"{head}: " + "; ".join(problems)
