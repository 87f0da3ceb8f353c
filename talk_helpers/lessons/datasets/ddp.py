"""Datasets and loader factories of DDP lessons (notebooks 05, 06 and 10, the tests and the
audit's examples): every sample is its id.

The ``make_*`` functions have the signature ``audit`` expects, ``make_loader(rank,
world_size, epoch)``, once their settings are bound with ``functools.partial``.
"""

import os

import torch.distributed as dist
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    get_worker_info,
)

from talk_helpers.model.sharding import POLICIES, stream_ids


class ShardedIds(IterableDataset):
    """Shards of ``shard_sizes`` consecutive ids, split over ranks then workers by
    ``policy`` (see :data:`talk_helpers.model.sharding.POLICIES`). Rank and world size are given
    when the dataset is built, so workers never ask torch.distributed."""

    def __init__(self, shard_sizes, rank: int, world_size: int, policy: str = "round_robin"):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
        self.shard_sizes = [int(s) for s in shard_sizes]
        self.rank, self.world_size, self.policy = rank, world_size, policy

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        yield from stream_ids(self.shard_sizes, self.rank, self.world_size, worker, workers,
                              self.policy).tolist()


class WorkerShardedOnly(IterableDataset):
    """Shards over DataLoader workers only: each rank reads the whole dataset."""

    def __init__(self, size: int):
        self.size = size

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        yield from range(worker, self.size, workers)


class RankAskedInIter(IterableDataset):
    """Asks torch.distributed for rank and world size inside ``__iter__``, with the usual
    glue "no process group → single process". In a DataLoader worker started with spawn
    or forkserver there is no process group, so every rank reads everything."""

    def __init__(self, size: int):
        self.size = size

    def __iter__(self):
        if dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
        else:
            rank, world = 0, 1
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        yield from range(rank * workers + worker, self.size, world * workers)


class RankCapturedAtBuild(IterableDataset):
    """The fix: read rank and world size when the dataset is built (in the rank's main
    process, where the process group exists), or from the RANK / WORLD_SIZE variables
    that torchrun and run_world set; the workers get them with the pickled dataset."""

    def __init__(self, size: int):
        self.size = size
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        else:
            self.rank = int(os.environ.get("RANK", 0))
            self.world_size = int(os.environ.get("WORLD_SIZE", 1))

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        me, ways = self.rank * workers + worker, self.world_size * workers
        yield from range(me, self.size, ways)


class IdsMap(Dataset):
    """Map-style: item i is i."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


# --- loader factories: make_loader(rank, world_size, epoch) once partially applied ----

def make_sharded_loader(rank: int, world_size: int, epoch: int, *, shard_sizes,
                        workers: int = 2, batch_size: int = 4, drop_last: bool = False,
                        policy: str = "round_robin", persistent_workers: bool = False,
                        keep_workers: bool = False) -> DataLoader:
    """Sharded ids over ranks × workers, batched per worker like any iterable dataset.

    ``keep_workers``: in a warm world, the rank keeps this loader and its workers,
    persistent, for the next call that builds the same one
    (:func:`talk_helpers.runtime.warm.kept_loader`), as a training job keeps its loader
    between epochs: the batches are those of a new loader, without starting two
    interpreters per rank for every cell under spawn. An audit never asks for it (it tags
    each batch with the worker that made it)."""

    def build(persistent: bool) -> DataLoader:
        dataset = ShardedIds(shard_sizes, rank, world_size, policy)
        return DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                          drop_last=drop_last, persistent_workers=persistent and workers > 0)

    if not keep_workers or workers == 0:
        return build(persistent_workers)
    # Imported here: a worker that unpickles ShardedIds need not load the runtime.
    from talk_helpers.runtime import warm

    recipe = ("sharded", rank, world_size, tuple(shard_sizes), workers, batch_size,
              drop_last, policy)
    return warm.kept_loader(recipe, lambda: build(True))


def make_unsharded_loader(rank: int, world_size: int, epoch: int, *, size: int = 40,
                          workers: int = 2, batch_size: int = 5) -> DataLoader:
    """Worker sharding only: every rank reads every sample."""
    return DataLoader(WorkerShardedOnly(size), batch_size=batch_size, num_workers=workers)


def make_rank_in_iter_loader(rank: int, world_size: int, epoch: int, *, size: int = 40,
                             workers: int = 2, batch_size: int = 5,
                             context: str | None = "spawn") -> DataLoader:
    """``dist.get_rank()`` inside ``__iter__``; workers started with ``context``."""
    return DataLoader(RankAskedInIter(size), batch_size=batch_size, num_workers=workers,
                      multiprocessing_context=context)


def make_rank_at_build_loader(rank: int, world_size: int, epoch: int, *, size: int = 40,
                              workers: int = 2, batch_size: int = 5,
                              context: str | None = "spawn") -> DataLoader:
    """The fix: rank and world size captured when the dataset is built."""
    return DataLoader(RankCapturedAtBuild(size), batch_size=batch_size, num_workers=workers,
                      multiprocessing_context=context)


def make_sampler_loader(rank: int, world_size: int, epoch: int, *, size: int = 10,
                        batch_size: int = 2, drop_last: bool = False, shuffle: bool = True,
                        set_epoch: bool = True, workers: int = 0) -> DataLoader:
    """Map-style ids with DistributedSampler (``set_epoch(epoch)`` when asked)."""
    sampler = DistributedSampler(IdsMap(size), num_replicas=world_size, rank=rank,
                                 shuffle=shuffle, seed=0, drop_last=drop_last)
    if set_epoch:
        sampler.set_epoch(epoch)
    return DataLoader(IdsMap(size), batch_size=batch_size, sampler=sampler,
                      num_workers=workers)


class NestedModulo(IterableDataset):
    """The talk's two levels of sharding, as two separate modulos (rank, then worker).
    Every sample is read once, but with gcd(world_size, num_workers) > 1 some workers
    never match a sample: rank r only holds ids ≡ r (mod world_size)."""

    def __init__(self, size: int, rank: int, world_size: int):
        self.size, self.rank, self.world_size = size, rank, world_size

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for i in range(self.size):
            if i % self.world_size == self.rank:  # shard over ranks ...
                if i % workers == worker:         # ... then over workers
                    yield i


def make_nested_modulo_loader(rank: int, world_size: int, epoch: int, *, size: int = 20,
                              workers: int = 2, batch_size: int = 5) -> DataLoader:
    """The talk's nested modulo in a DataLoader with ``workers`` workers."""
    return DataLoader(NestedModulo(size, rank, world_size), batch_size=batch_size,
                      num_workers=workers)


class RankShardedOnly(IterableDataset):
    """Shards over ranks only (given at build time): every worker of a rank reads all of
    the rank's samples. The mystery loader of notebook 05's exercise."""

    def __init__(self, size: int, rank: int, world_size: int):
        self.size, self.rank, self.world_size = size, rank, world_size

    def __iter__(self):
        yield from range(self.rank, self.size, self.world_size)


def make_mystery_loader(rank: int, world_size: int, epoch: int, *, size: int = 24,
                        workers: int = 3, batch_size: int = 4) -> DataLoader:
    """A loader with one sharding bug, to diagnose with ``audit`` (notebook 05)."""
    return DataLoader(RankShardedOnly(size, rank, world_size), batch_size=batch_size,
                      num_workers=workers)


def make_uneven_mystery_loader(rank: int, world_size: int, epoch: int, *,
                               shard_sizes=(4, 3, 4, 5), workers: int = 2,
                               batch_size: int = 4) -> DataLoader:
    """A loader to diagnose with ``audit`` (notebook 06): whole shards per rank and worker,
    the same samples on every rank, and yet not the same batches."""
    return make_sharded_loader(rank, world_size, epoch, shard_sizes=list(shard_sizes),
                               workers=workers, batch_size=batch_size)
