"""Notebook 09's reference dataset over the same shards, in the loaders the libraries use."""

from __future__ import annotations

from torch.utils.data import DataLoader

from talk_helpers.libraries.common import BATCH_SIZE, NUM_WORKERS, SHARD_SIZES, loader_kwargs, quiet


def make_reference_loader(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                          seed: int = 0, num_workers: int = NUM_WORKERS,
                          batch_size: int = BATCH_SIZE):
    """Notebook 09's ``ShardedIterableDataset`` over the same shards, in a DataLoader."""
    from talk_helpers.lessons.datasets.exercise import make_final_dataset

    ds = make_final_dataset(sizes=sizes, seed=seed, batch_size=batch_size)
    ds.set_epoch(epoch)
    return DataLoader(ds, batch_size=None, **loader_kwargs(num_workers))


def make_reference_stateful(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                            seed: int = 0, num_workers: int = NUM_WORKERS,
                            batch_size: int = BATCH_SIZE):
    """The reference dataset in a ``StatefulDataLoader`` (for :func:`make_resumed`)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from talk_helpers.lessons.datasets.exercise import make_final_dataset

    quiet()
    ds = make_final_dataset(sizes=sizes, seed=seed, batch_size=batch_size)
    ds.set_epoch(epoch)
    return StatefulDataLoader(ds, batch_size=None, **loader_kwargs(num_workers))
