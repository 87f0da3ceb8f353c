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

The dataset can take its share too: under spawn and forkserver each worker receives the
dataset pickled, and a tensor in it moves to ``/dev/shm`` once per rank, for as long as the
loader lives (:func:`dataset_shm_bytes`). Data in a file every worker maps
(``np.load(..., mmap_mode="r")``) takes none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from talk_helpers.arguments import require_int
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.checks.sizes import page_rounded, size_text

__all__ = ["ShmBudgetReport", "batch_bytes", "check_shm_budget", "dataset_shm_bytes"]

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


def dataset_shm_bytes(dataset) -> int:
    """What ``dataset`` puts in ``/dev/shm`` when its workers start by spawn or forkserver:
    the storage of every tensor among its attributes (and in the lists, tuples and dicts
    there), in whole pages, each storage once. Under fork a worker inherits the dataset
    and it takes none; numpy arrays are copied into each worker instead, and a file the
    workers map is never sent at all."""
    seen: set[int] = set()
    storages: set[int] = set()

    def walk(obj, depth: int) -> int:
        if id(obj) in seen or depth > 8:
            return 0
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() in storages or storage.nbytes() == 0:
                return 0
            storages.add(storage.data_ptr())
            return page_rounded(storage.nbytes())
        if isinstance(obj, Mapping):
            return sum(walk(v, depth + 1) for v in obj.values())
        if isinstance(obj, list | tuple | set | frozenset):
            return sum(walk(v, depth + 1) for v in obj)
        attributes = getattr(obj, "__dict__", None)
        if attributes is None or isinstance(obj, type):
            return 0
        return sum(walk(v, depth + 1) for v in attributes.values())

    return walk(dataset, 0)


def check_shm_budget(batch_bytes: int, *, num_workers: int, prefetch_factor: int = 2,
                     shm_bytes: int, ranks_per_node: int = 1,
                     dataset_bytes: int | None = None) -> ShmBudgetReport:
    """Check that what a node's loaders keep in ``/dev/shm`` fits in ``shm_bytes``.

    ``batch_bytes`` is what one batch takes in shared memory (:func:`batch_bytes`).
    Each rank keeps ``num_workers × prefetch_factor`` batches waiting plus the two its
    loop holds at the peak, and, under spawn and forkserver, ``dataset_bytes`` for the
    dataset's own tensors (:func:`dataset_shm_bytes`; None: not counted, and the report
    does not mention it); ``ranks_per_node`` ranks share one ``/dev/shm``. Without
    workers nothing crosses a process, so nothing is needed.
    """
    require_int("batch_bytes", batch_bytes, minimum=0)
    require_int("num_workers", num_workers, minimum=0)
    require_int("prefetch_factor", prefetch_factor, minimum=1)
    require_int("shm_bytes", shm_bytes, minimum=1)
    require_int("ranks_per_node", ranks_per_node, minimum=1)
    require_int("dataset_bytes", dataset_bytes, minimum=0, allow_none=True)
    in_flight = (num_workers * prefetch_factor + HELD_BY_LOOP) if num_workers else 0
    return ShmBudgetReport(batch_bytes=page_rounded(batch_bytes), batches=in_flight,
                           ranks_per_node=ranks_per_node, shm_bytes=int(shm_bytes),
                           dataset_bytes=None if dataset_bytes is None or not num_workers
                           else page_rounded(dataset_bytes))


@dataclass(frozen=True, repr=False)
class ShmBudgetReport(OneLineReport):
    """Outcome of :func:`check_shm_budget`: ``batches`` in flight per rank, each of
    ``batch_bytes``, and the dataset's ``dataset_bytes``, on ``ranks_per_node`` ranks
    sharing ``shm_bytes``."""

    batch_bytes: int
    batches: int
    ranks_per_node: int
    shm_bytes: int
    dataset_bytes: int | None = None

    @property
    def needed_bytes(self) -> int:
        """Shared memory the node needs at the peak."""
        dataset = self.dataset_bytes or 0
        return (self.batches * self.batch_bytes + dataset) * self.ranks_per_node

    @property
    def ok(self) -> bool:
        """True when the peak fits in /dev/shm."""
        return self.needed_bytes <= self.shm_bytes

    def _verdict(self) -> str:
        if not self.batches:
            return "shared memory: no workers, so no batch goes through /dev/shm"
        ranks = f" × {self.ranks_per_node} ranks" if self.ranks_per_node > 1 else ""
        what = f"{self.batches} batches of {size_text(self.batch_bytes)} in flight"
        if self.dataset_bytes:
            what = f"({what} + the dataset's {size_text(self.dataset_bytes)})"
        need = f"{what}{ranks} need {size_text(self.needed_bytes)}"
        if self.dataset_bytes == 0:
            need += " (the dataset adds none)"
        if self.ok:
            return f"shared memory: {need}: they fit in /dev/shm's {size_text(self.shm_bytes)}"
        return f"shared memory: {need}, but /dev/shm holds {size_text(self.shm_bytes)}"
