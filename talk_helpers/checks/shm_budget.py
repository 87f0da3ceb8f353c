"""Do the batches in flight fit in ``/dev/shm``?

A DataLoader worker hands each batch to the main process through shared memory: a file
in ``/dev/shm`` per tensor, until the main process lets go of the batch. With
``num_workers`` workers and ``prefetch_factor`` batches each, up to
``num_workers × prefetch_factor`` batches wait while the training loop holds the one it
works on and, at times, for a moment while the next one arrives, the one before it
(measured in a private ``/dev/shm``: ``talk_helpers.lessons.small_shm``). The check
counts that worst case. Every rank on a node shares the node's ``/dev/shm``. A
container's is small (Docker gives 64 MiB unless told ``--shm-size``), and running out
kills or stops a worker (pytorch/pytorch#5040).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from talk_helpers.arguments import require_int
from talk_helpers.checks.sizes import page_rounded, size_text
from talk_helpers.checks.verdict import mark, verdict_html

__all__ = ["ShmBudgetReport", "batch_bytes", "check_shm_budget"]

HELD_BY_LOOP = 2  # the batch the loop works on, and the one before it while the next arrives


def batch_bytes(batch) -> int:
    """The shared memory one batch takes: every tensor's storage in whole pages, each
    storage once. Tuples, lists and dicts are walked; anything else takes none."""
    seen: set[int] = set()

    def walk(obj) -> int:
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            key = storage.data_ptr()
            if key in seen or storage.nbytes() == 0:
                return 0
            seen.add(key)
            return page_rounded(storage.nbytes())
        if isinstance(obj, Mapping):
            return sum(walk(v) for v in obj.values())
        if isinstance(obj, list | tuple):
            return sum(walk(v) for v in obj)
        return 0

    return walk(batch)


def check_shm_budget(batch_bytes: int, *, num_workers: int, prefetch_factor: int = 2,
                     shm_bytes: int, ranks_per_node: int = 1) -> ShmBudgetReport:
    """Check that the batches a node's loaders keep in flight fit in ``shm_bytes``.

    ``batch_bytes`` is what one batch takes in shared memory (:func:`batch_bytes`).
    Each rank keeps ``num_workers × prefetch_factor`` batches waiting plus the two its
    loop holds at the peak; ``ranks_per_node`` ranks share one ``/dev/shm``. Without
    workers no batch crosses a process, so nothing is needed.
    """
    require_int("batch_bytes", batch_bytes, minimum=0)
    require_int("num_workers", num_workers, minimum=0)
    require_int("prefetch_factor", prefetch_factor, minimum=1)
    require_int("shm_bytes", shm_bytes, minimum=1)
    require_int("ranks_per_node", ranks_per_node, minimum=1)
    in_flight = (num_workers * prefetch_factor + HELD_BY_LOOP) if num_workers else 0
    return ShmBudgetReport(batch_bytes=page_rounded(batch_bytes), batches=in_flight,
                           ranks_per_node=ranks_per_node, shm_bytes=int(shm_bytes))


@dataclass(frozen=True)
class ShmBudgetReport:
    """Outcome of :func:`check_shm_budget`: ``batches`` in flight per rank, each of
    ``batch_bytes``, on ``ranks_per_node`` ranks sharing ``shm_bytes``."""

    batch_bytes: int
    batches: int
    ranks_per_node: int
    shm_bytes: int

    @property
    def needed_bytes(self) -> int:
        """Shared memory the node needs at the peak."""
        return self.batches * self.batch_bytes * self.ranks_per_node

    @property
    def ok(self) -> bool:
        """True when the peak fits in /dev/shm."""
        return self.needed_bytes <= self.shm_bytes

    def _verdict(self) -> str:
        if not self.batches:
            return "shared memory: no workers, so no batch goes through /dev/shm"
        ranks = f" × {self.ranks_per_node} ranks" if self.ranks_per_node > 1 else ""
        need = (f"{self.batches} batches of {size_text(self.batch_bytes)} in flight{ranks} "
                f"need {size_text(self.needed_bytes)}")
        if self.ok:
            return f"shared memory: {need}: they fit in /dev/shm's {size_text(self.shm_bytes)}"
        return f"shared memory: {need}, but /dev/shm holds {size_text(self.shm_bytes)}"

    def __repr__(self) -> str:
        return f"{mark(self.ok)} {self._verdict()}"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return verdict_html(self.ok, self._verdict())
