"""torchdata: ``StatefulDataLoader`` with a stateful sampler or a plain iterable dataset
(in a fixed order, or shuffled without a state to save), and ``torchdata.nodes`` as its
migration guide sets it up for DDP."""

from __future__ import annotations

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from talk_helpers.libraries.common import (
    BATCH_SIZE,
    N_SAMPLES,
    NUM_WORKERS,
    SHARD_SIZES,
    Ids,
    collate_ids,
    job_start,
    loader_kwargs,
    quiet,
)


def make_map_stateful(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                      seed: int = 0, num_workers: int = NUM_WORKERS,
                      batch_size: int = BATCH_SIZE):
    """A plain map-style dataset with torchdata's ``StatefulDistributedSampler``
    (``set_epoch(epoch)``) in a ``StatefulDataLoader``."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    quiet()
    sampler = StatefulDistributedSampler(Ids(n), num_replicas=world_size, rank=rank,
                                         shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return StatefulDataLoader(Ids(n), batch_size=batch_size, sampler=sampler,
                              **loader_kwargs(num_workers))


def make_plain_iterable_stateful(rank: int, world_size: int, epoch: int, *,
                                 sizes=SHARD_SIZES, num_workers: int = NUM_WORKERS,
                                 batch_size: int = BATCH_SIZE):
    """A plain iterable dataset with no ``state_dict`` (shards round-robin over ranks,
    then workers; notebook 05's ``ShardedIds``) in a ``StatefulDataLoader``."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from talk_helpers.lessons.datasets.ddp import ShardedIds

    quiet()
    return StatefulDataLoader(ShardedIds(sizes, rank, world_size), batch_size=batch_size,
                              **loader_kwargs(num_workers))


class ShuffledShardIds(IterableDataset):
    """A rank's shards (round robin over ranks, then workers, as notebook 05's
    ``ShardedIds``), each worker's ids shuffled with a generator seeded by ``seed``, the
    epoch, the rank and the worker. No ``state_dict``. ``seed=None`` stands for fresh
    entropy at every start of the job (:func:`~talk_helpers.libraries.common.job_start`):
    the same order within a run, another one after a restart."""

    def __init__(self, sizes, rank: int, world_size: int, epoch: int, seed: int | None):
        from talk_helpers.lessons.datasets.ddp import ShardedIds

        self.ids = ShardedIds(sizes, rank, world_size)
        self.rank, self.epoch = rank, epoch
        self.seed = 1000 + job_start() if seed is None else seed

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info else 0
        ids = np.array(list(self.ids))
        rng = np.random.default_rng([self.seed, self.epoch, self.rank, worker])
        yield from rng.permutation(ids).tolist()


def make_shuffled_iterable_stateful(rank: int, world_size: int, epoch: int, *,
                                    seed: int | None = None, sizes=SHARD_SIZES,
                                    num_workers: int = NUM_WORKERS,
                                    batch_size: int = BATCH_SIZE):
    """An iterable dataset that shuffles and has no ``state_dict``
    (:class:`ShuffledShardIds`), in a ``StatefulDataLoader``: a resume fast-forwards."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    quiet()
    return StatefulDataLoader(ShuffledShardIds(sizes, rank, world_size, epoch, seed),
                              batch_size=batch_size, **loader_kwargs(num_workers))


def make_nodes_loader(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                      shuffle: bool = True, seed: int = 0, num_workers: int = NUM_WORKERS,
                      batch_size: int = BATCH_SIZE, drop_last: bool = False):
    """torchdata.nodes as its "migrating from DataLoader" guide sets it up for DDP:
    ``SamplerWrapper(DistributedSampler(ds))`` → ``ParallelMapper(ds.__getitem__)`` →
    ``Batcher`` → collate → ``Loader``. ``SamplerWrapper`` calls ``set_epoch`` itself at
    every new iteration; ``initial_epoch=epoch`` is the value a loader reused for ``epoch``
    epochs holds."""
    from torch.utils.data import DistributedSampler
    from torchdata.nodes import Batcher, Loader, Mapper, ParallelMapper, SamplerWrapper

    ds = Ids(n)
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=shuffle,
                                 seed=seed)
    node = SamplerWrapper(sampler, initial_epoch=epoch)
    node = ParallelMapper(node, map_fn=ds.__getitem__, num_workers=num_workers,
                          method="thread")
    node = Batcher(node, batch_size=batch_size, drop_last=drop_last)
    node = Mapper(node, collate_ids)
    return Loader(node)
