"""How much memory does each DataLoader worker own because of the dataset? Measured in
real workers with psutil, for :func:`talk_helpers.checks.check_worker_memory`.

Each worker reads its share of the dataset, as an epoch would, and measures its *unique*
memory (USS: pages no other process maps) before and after; then it lets go of the
dataset and measures again. What it owns because of the dataset is the larger of the two
differences: under fork the copy grows while the worker reads (pages copied as reference
counts are written); under spawn and forkserver the worker unpickled its copy before its
first sample, and gets that memory back when it lets go.
"""

from __future__ import annotations

import ctypes
import gc
from dataclasses import dataclass

import psutil
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.arguments import require_int, require_seconds

__all__ = ["WorkerMemory", "measure_worker_memory"]


@dataclass(frozen=True)
class WorkerMemory:
    """What one worker measured, in bytes: unique memory before reading (``start``),
    after reading (``read``) and after letting go of the dataset (``released``), and its
    proportional share (PSS, shared pages split among the processes that map them) after
    reading."""

    worker: int
    samples: int
    start: int
    read: int
    released: int
    proportional: int

    @property
    def owned(self) -> int:
        """The unique memory the worker owned because of the dataset."""
        return max(self.read - self.start, self.read - self.released, 0)


def measure_worker_memory(dataset, *, num_workers: int = 2, multiprocessing_context=None,
                          timeout_s: float = 120.0) -> list[WorkerMemory]:
    """Read ``dataset`` in ``num_workers`` real DataLoader workers and measure each one.

    An iterable dataset is iterated as it is (it shards itself over workers, or not); a
    map-style one is read at the indices ``worker, worker + num_workers, …``. Returns one
    :class:`WorkerMemory` per worker, by worker id; ``[m.owned for m in ...]`` is what
    :func:`talk_helpers.checks.check_worker_memory` judges.
    """
    require_int("num_workers", num_workers, minimum=1)
    require_seconds("timeout_s", timeout_s)
    if not (isinstance(dataset, IterableDataset) or hasattr(dataset, "__getitem__")):
        raise TypeError(f"dataset must be an IterableDataset or a map-style dataset, "
                        f"got {type(dataset).__name__}")
    loader = DataLoader(_Probe(dataset), batch_size=None, num_workers=num_workers,
                        multiprocessing_context=multiprocessing_context, timeout=timeout_s)
    return sorted(loader, key=lambda m: m.worker)


class _Probe(IterableDataset):
    """Reads the dataset it wraps in one worker and yields that worker's measurements."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        info = get_worker_info()
        start = _unique_after_cleanup()
        samples = 0
        if isinstance(self.dataset, IterableDataset):
            for _ in self.dataset:
                samples += 1
        else:
            for index in range(info.id, len(self.dataset), info.num_workers):
                self.dataset[index]
                samples += 1
        read = _unique_after_cleanup()
        proportional = psutil.Process().memory_full_info().pss
        self.dataset = None  # this worker's reference: its copy, under spawn and forkserver
        released = _unique_after_cleanup()
        yield WorkerMemory(info.id, samples, start, read, released, proportional)


def _unique_after_cleanup() -> int:
    """This process's unique memory once garbage is collected and free heap returned."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the heap keeps what it keeps
        pass
    return psutil.Process().memory_full_info().uss
