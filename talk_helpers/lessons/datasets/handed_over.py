"""Loaders a colleague hands you, for the diagnosis exercises of notebooks 02 and 03.

The learner checks what each one yields before reading any code, so they live here and not
in a cell: run the checks first, then read the source.
"""

import random

import numpy as np
from torch.utils.data import DataLoader, IterableDataset

from talk_helpers.lessons.datasets.shuffling import SIZE, _worker

__all__ = ["mystery_loader", "MysteryShuffle"]


class _BlockIds(IterableDataset):
    """Each worker yields ``size // num_workers`` neighbouring ids."""

    def __init__(self, size):
        self.size = size

    def __iter__(self):
        worker, num_workers = _worker()
        per_worker = self.size // num_workers
        yield from range(worker * per_worker, (worker + 1) * per_worker)


def mystery_loader(size=25, num_workers=2, batch_size=4):
    """Notebook 02: a loader that, its author says, splits ``size`` ids between workers."""
    return DataLoader(_BlockIds(size), batch_size=batch_size, num_workers=num_workers)


class MysteryShuffle(IterableDataset):
    """Notebook 03: shuffled ids ``0..size-1`` for epoch ``epoch``, each sample a dict
    ``{"id", "aug", "worker"}`` with a random augmentation draw ``aug`` in 0-99."""

    def __init__(self, size=SIZE, seed=0, epoch=0, block=50):
        self.size, self.seed, self.epoch, self.block = size, seed, epoch, block

    def __iter__(self):
        worker, num_workers = _worker()
        starts = np.random.default_rng([self.seed, self.epoch]).permutation(
            range(0, self.size, self.block))
        ids = [i for start in starts.tolist()
               for i in range(start, min(start + self.block, self.size))]
        for i in ids[worker::num_workers]:
            yield {"id": i, "aug": random.randrange(100), "worker": worker}
