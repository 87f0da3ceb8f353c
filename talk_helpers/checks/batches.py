"""Do the ranks stay in step, and is every batch full? Unequal batch counts per rank make
DDP block at the first step a rank no longer takes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from talk_helpers.arguments import is_int, require_int
from talk_helpers.checks.ids import ids_in
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.verdicts.render import listing


def check_batch_counts(counts) -> BatchCountReport:
    """Check that every rank got the same number of batches.

    ``counts`` is a sequence indexed by rank or a dict rank -> number of batches. With
    unequal counts DDP blocks at the first step a rank no longer takes part in.
    """
    if isinstance(counts, Mapping):
        if sorted(counts) != list(range(len(counts))):
            raise ValueError(
                f"counts keys must be the ranks 0..{len(counts) - 1}, got {sorted(counts)!r}"
            )
        counts = [counts[rank] for rank in range(len(counts))]
    elif isinstance(counts, torch.Tensor | np.ndarray):
        counts = counts.tolist()
    if not isinstance(counts, list | tuple):
        raise TypeError(
            f"counts must be a sequence indexed by rank or a dict rank -> count, "
            f"got {type(counts).__name__}"
        )
    if not counts:
        raise ValueError("counts is empty: give one batch count per rank")
    for rank, count in enumerate(counts):
        if not is_int(count):
            raise TypeError(
                f"counts must hold integer batch counts, got {type(count).__name__} "
                f"{count!r} for rank {rank}"
            )
        if count < 0:
            raise ValueError(f"counts must be >= 0, got {count} for rank {rank}")
    return BatchCountReport(counts=tuple(int(c) for c in counts))


def check_batch_sizes(batches, batch_size: int) -> BatchSizeReport:
    """Check that every batch holds exactly ``batch_size`` samples.

    ``batches`` is a list of batches, each anything :func:`ids_of` accepts.
    """
    require_int("batch_size", batch_size, minimum=1)
    if not isinstance(batches, list | tuple):
        raise TypeError(
            f"batches must be a list of batches, got {type(batches).__name__}; "
            "wrap a loader in list(...) first"
        )
    per_batch = tuple(
        int(ids_in(batch, "batches", f"batches[{i}]").size) for i, batch in enumerate(batches)
    )
    return BatchSizeReport(batch_size=int(batch_size), per_batch=per_batch)


@dataclass(frozen=True, repr=False)
class BatchCountReport(OneLineReport):
    """Outcome of :func:`check_batch_counts`; ``counts`` is indexed by rank."""

    counts: tuple[int, ...]

    @property
    def ok(self) -> bool:
        """True when every rank has the same number of batches."""
        return self.min == self.max

    @property
    def min(self) -> int:
        return min(self.counts)

    @property
    def max(self) -> int:
        return max(self.counts)

    @property
    def world_size(self) -> int:
        return len(self.counts)

    @property
    def stopped_ranks(self) -> tuple[int, ...]:
        """Ranks that run out of batches first (empty when all counts are equal)."""
        if self.ok:
            return ()
        return tuple(rank for rank, c in enumerate(self.counts) if c == self.min)

    @property
    def blocking_step(self) -> int | None:
        """The 1-based step at which DDP would block, or None when counts are equal."""
        return None if self.ok else self.min + 1

    def _verdict(self) -> str:
        if self.ok:
            ranks = "the only rank" if self.world_size == 1 else f"each of {self.world_size} ranks"
            return f"batches per rank: {self.min} on {ranks}"
        listed = " · ".join(f"rank {r}: {c}" for r, c in enumerate(self.counts[:8]))
        if self.world_size > 8:
            listed += f" · … ({self.world_size} ranks)"
        stopped = self.stopped_ranks
        who = (
            f"rank {stopped[0]} has stopped"
            if len(stopped) == 1
            else f"ranks {listing(list(stopped), len(stopped), 6)} have stopped"
        )
        return f"batches per rank: {listed} — DDP would block at step {self.blocking_step} ({who})"


@dataclass(frozen=True, repr=False)
class BatchSizeReport(OneLineReport):
    """Outcome of :func:`check_batch_sizes`; ``sizes`` counts batches by size."""

    batch_size: int
    per_batch: tuple[int, ...] = field(repr=False)

    @property
    def ok(self) -> bool:
        """True when every batch holds exactly ``batch_size`` samples."""
        return all(size == self.batch_size for size in self.per_batch)

    @property
    def sizes(self) -> Counter:
        """Batch size -> how many batches had it."""
        return Counter(self.per_batch)

    @property
    def partial(self) -> int:
        """How many batches are smaller than ``batch_size``."""
        return sum(size < self.batch_size for size in self.per_batch)

    @property
    def oversized(self) -> int:
        """How many batches are larger than ``batch_size``."""
        return sum(size > self.batch_size for size in self.per_batch)

    def _verdict(self) -> str:
        n = len(self.per_batch)
        noun = "batch" if n == 1 else "batches"
        full = sum(size == self.batch_size for size in self.per_batch)
        if self.ok:
            return f"{n} {noun} of {self.batch_size}"
        parts = [f"{full} of {self.batch_size}"]
        for name, count, small in (("partial", self.partial, True),
                                   ("oversized", self.oversized, False)):
            if count:
                odd = [s for s in self.per_batch
                       if (s < self.batch_size if small else s > self.batch_size)]
                parts.append(f"{count} {name} ({listing(odd, len(odd), 6)})")
        return f"{n} {noun}: " + ", ".join(parts)
