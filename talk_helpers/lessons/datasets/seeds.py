"""The datasets of notebook 04: what DataLoader seeds in a worker, separate RNG streams,
and how an epoch number reaches (or fails to reach) the workers.

Run as a script it prints a digest of two epochs of a seeded loader, so a notebook can
check that a fresh process with the same seed sees the same orders:

    python -m talk_helpers.lessons.datasets.seeds --seed 0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.lessons.datasets.basics import MapStyleIds

MapIds = MapStyleIds  # map-style ids 0..size-1 for DistributedSampler, as in notebooks 01-02

__all__ = [
    "InitRngAugment",
    "IterRngAugment",
    "SeedProbe", "TwoStreams", "WorkerSeededAugment", "MapIds", "EpochStream", "SharedEpochStream",
    "CountingEpochStream", "predict_base_seed", "expected_draws", "run_epochs", "digest",
]


def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class SeedProbe(IterableDataset):
    """Each worker yields one record: its id, the seed DataLoader gave it, and the first
    draw of Python's ``random``, torch and numpy's global RNGs."""

    def __iter__(self):
        info = get_worker_info()
        yield {"worker": info.id, "seed": info.seed, "random": random.random(),
               "torch": torch.rand(()).item(), "numpy": float(np.random.rand())}


def predict_base_seed(generator: torch.Generator | None = None) -> int:
    """The ``base_seed`` the next DataLoader iterator will draw, without drawing it:
    one int64 from ``generator`` (or the global torch RNG), as ``dataloader.py`` does."""
    if generator is None:
        state = torch.get_rng_state()
        seed = torch.empty((), dtype=torch.int64).random_().item()
        torch.set_rng_state(state)
        return seed
    copy = torch.Generator()
    copy.set_state(generator.get_state())
    return torch.empty((), dtype=torch.int64).random_(generator=copy).item()


def expected_draws(base_seed: int, worker_id: int) -> dict:
    """What worker ``worker_id`` should draw first, by the rules of ``worker.py``:
    ``random`` and torch seeded with base_seed + worker_id, numpy with
    ``_generate_state(base_seed, worker_id)``."""
    from torch.utils.data._utils.worker import _generate_state

    seed = base_seed + worker_id
    return {"worker": worker_id, "seed": seed,
            "random": random.Random(seed).random(),
            "torch": torch.rand((), generator=torch.Generator().manual_seed(seed)).item(),
            "numpy": float(np.random.RandomState(_generate_state(base_seed, worker_id))
                           .rand())}


class TwoStreams(IterableDataset):
    """The fix: one permutation stream seeded by (seed, epoch), identical in every worker
    and rank, and one augmentation stream per (rank, worker) that differs."""

    def __init__(self, size=24, seed=0, epoch=0, rank=0, world_size=1):
        self.size, self.seed, self.epoch = size, seed, epoch
        self.rank, self.world_size = rank, world_size

    def __iter__(self):
        worker_id, num_workers = _worker()
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
        slot, slots = self.rank * num_workers + worker_id, self.world_size * num_workers
        augment = np.random.default_rng([self.seed, self.epoch, self.rank, worker_id])
        for i in order[slot::slots].tolist():
            yield {"id": i, "aug": int(augment.integers(100)), "rank": self.rank,
                   "worker": worker_id}


class WorkerSeededAugment(IterableDataset):
    """Shards correctly, augments with the per-worker seed DataLoader sets (the
    ``random`` module). Under DDP every rank seeds torch alike, so worker k of every rank
    draws the same augmentations."""

    def __init__(self, size=24, rank=0, world_size=1):
        self.size, self.rank, self.world_size = size, rank, world_size

    def __iter__(self):
        worker_id, num_workers = _worker()
        slot, slots = self.rank * num_workers + worker_id, self.world_size * num_workers
        for i in range(slot, self.size, slots):
            yield {"id": i, "aug": random.randrange(100), "rank": self.rank,
                   "worker": worker_id}


class InitRngAugment(IterableDataset):
    """Today's most common augmentation bug: a generator made in ``__init__``. Every worker
    receives a copy of the dataset, generator included, in the same state; DataLoader
    reseeds only the global ``random``, torch and numpy RNGs. So every worker draws the
    same augmentations, seeded or not."""

    def __init__(self, size=48, seed=0):
        self.size = size
        self.rng = np.random.default_rng(seed)  # made once, copied into every worker

    def __iter__(self):
        worker_id, num_workers = _worker()
        for i in range(worker_id, self.size, num_workers):
            yield {"id": i, "worker": worker_id, "aug": int(self.rng.integers(1000))}


class IterRngAugment(InitRngAugment):
    """The fix: make the generator in ``__iter__``, inside the worker, from the seed
    DataLoader gave that worker (``torch.initial_seed()``: new per worker and per epoch)."""

    def __iter__(self):
        self.rng = np.random.default_rng(torch.initial_seed())
        return super().__iter__()


class EpochStream(IterableDataset):
    """Shuffles by (seed, epoch) with ``set_epoch``, the way samplers do. Each sample
    also reports the epoch its worker saw."""

    def __init__(self, size=100, seed=0):
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def current_epoch(self):
        return self.epoch

    def __iter__(self):
        worker_id, num_workers = _worker()
        epoch = self.current_epoch()
        order = np.random.default_rng([self.seed, epoch]).permutation(self.size)
        for i in order[worker_id::num_workers].tolist():
            yield {"id": i, "epoch_seen": epoch}


class SharedEpochStream(EpochStream):
    """Fix 1: keep the epoch in shared memory, so the workers' copies read the value the
    main process wrote last (this is what HF datasets does)."""

    def __init__(self, size=100, seed=0):
        super().__init__(size, seed)
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch):
        self._epoch.fill_(epoch)

    def current_epoch(self):
        return int(self._epoch)


class CountingEpochStream(EpochStream):
    """Fix 2: the epoch travels with the iterator: every ``iter()`` on this copy starts
    the next epoch. Right for persistent workers (their copy lives on); wrong for
    non-persistent ones, which get a fresh copy, counting from the start, every epoch."""

    def __init__(self, size=100, seed=0, first_epoch=0):
        super().__init__(size, seed)
        self.epoch = first_epoch - 1

    def __iter__(self):
        self.epoch += 1
        return super().__iter__()


def run_epochs(loader, dataset=None, epochs=2, set_epoch=True):
    """Iterate ``loader`` for ``epochs`` epochs (calling ``dataset.set_epoch`` first when
    asked); return per epoch the ids and, if samples are dicts, every field."""
    out = []
    for epoch in range(epochs):
        if set_epoch and dataset is not None:
            dataset.set_epoch(epoch)
        fields: dict[str, list] = {}
        for batch in loader:
            if not isinstance(batch, dict):
                batch = {"id": batch}
            for key, value in batch.items():
                fields.setdefault(key, []).append(torch.as_tensor(value).reshape(-1))
        out.append({k: torch.cat(v).numpy() for k, v in fields.items()})
    return out


def digest(seed: int, epochs: int = 2, num_workers: int = 1) -> dict:
    """Seed torch, run ``epochs`` epochs of a loader whose order and augmentations come
    from DataLoader's worker seeding, and summarise what came out."""
    torch.manual_seed(seed)
    loader = DataLoader(WorkerSeededAugment(size=24), batch_size=4, num_workers=num_workers,
                        persistent_workers=num_workers > 0)
    runs = run_epochs(loader, epochs=epochs, set_epoch=False)
    text = json.dumps([[r["id"].tolist(), r["aug"].tolist()] for r in runs])
    return {"seed": seed, "first augmentations": [r["aug"][:6].tolist() for r in runs],
            "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-method", default=None)
    args = parser.parse_args(argv)
    if args.start_method:
        torch.multiprocessing.set_start_method(args.start_method, force=True)
    if args.start_method == "forkserver":  # as in the notebooks: workers fork with torch loaded
        torch.multiprocessing.set_forkserver_preload(["torch"])
    print(json.dumps(digest(args.seed)))


if __name__ == "__main__":
    main()
