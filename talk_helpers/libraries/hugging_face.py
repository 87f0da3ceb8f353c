"""Hugging Face ``datasets``: an iterable dataset split by node, as people write it."""

from __future__ import annotations

import numpy as np
from torch.utils.data import DataLoader

from talk_helpers.libraries.common import BATCH_SIZE, N_SAMPLES, NUM_WORKERS, loader_kwargs, quiet
from talk_helpers.third_party import hub_offline


def hf_iterable(n: int = N_SAMPLES, num_shards: int = 4, *, shuffle: bool = False,
                seed: int | None = 0, rank: int = 0, buffer_size: int = 8):
    """``Dataset.from_dict({"id": 0..n-1}).to_iterable_dataset(num_shards)``, shuffled with
    ``seed`` if asked. ``seed=None`` stands for an unseeded shuffle: a generator seeded by
    ``rank`` (each process would draw its own entropy)."""
    with hub_offline():
        import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    ds = datasets.Dataset.from_dict({"id": np.arange(n)})
    it = ds.to_iterable_dataset(num_shards=num_shards)
    if shuffle:
        if seed is None:
            it = it.shuffle(generator=np.random.default_rng(1000 + rank),
                            buffer_size=buffer_size)
        else:
            it = it.shuffle(seed=seed, buffer_size=buffer_size)
    return it


FORMAT_PLACES = (None, "before set_epoch", "after set_epoch")


def _hf_split(rank, world_size, epoch, *, n, num_shards, shuffle, seed, buffer_size,
              set_epoch, split_then_epoch=True, torch_format=None):
    from datasets.distributed import split_dataset_by_node

    if torch_format not in FORMAT_PLACES:
        raise ValueError(f"torch_format must be one of {FORMAT_PLACES}, got {torch_format!r}")
    it = hf_iterable(n, num_shards, shuffle=shuffle, seed=seed, rank=rank,
                     buffer_size=buffer_size)
    if set_epoch and not split_then_epoch:
        it.set_epoch(epoch)
    it = split_dataset_by_node(it, rank=rank, world_size=world_size)
    if torch_format == "before set_epoch":
        it = it.with_format("torch")
    if set_epoch and split_then_epoch:
        it.set_epoch(epoch)
    if torch_format == "after set_epoch":
        it = it.with_format("torch")
    return it


def make_hf_loader(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                   num_shards: int = 4, shuffle: bool = False, seed: int | None = 0,
                   buffer_size: int = 8, set_epoch: bool = True,
                   split_then_epoch: bool = True, torch_format: str | None = None,
                   num_workers: int = NUM_WORKERS, batch_size: int = BATCH_SIZE):
    """``to_iterable_dataset(num_shards)`` → (``shuffle``) → ``split_dataset_by_node`` →
    ``set_epoch(epoch)`` → DataLoader. ``split_then_epoch=False`` calls ``set_epoch``
    before the split instead; ``torch_format`` adds ``.with_format("torch")`` "before
    set_epoch" or "after set_epoch"."""
    quiet()
    it = _hf_split(rank, world_size, epoch, n=n, num_shards=num_shards, shuffle=shuffle,
                   seed=seed, buffer_size=buffer_size, set_epoch=set_epoch,
                   split_then_epoch=split_then_epoch, torch_format=torch_format)
    return DataLoader(it, batch_size=batch_size, **loader_kwargs(num_workers))


def make_hf_stateful(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                     num_shards: int = 4, shuffle: bool = False, seed: int | None = 0,
                     buffer_size: int = 8, num_workers: int = NUM_WORKERS,
                     batch_size: int = BATCH_SIZE):
    """The same pipeline in torchdata's StatefulDataLoader (for :func:`make_resumed`)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    quiet()
    it = _hf_split(rank, world_size, epoch, n=n, num_shards=num_shards, shuffle=shuffle,
                   seed=seed, buffer_size=buffer_size, set_epoch=True)
    return StatefulDataLoader(it, batch_size=batch_size, **loader_kwargs(num_workers))


def mystery_loader(rank: int, world_size: int, epoch: int):
    """A loader built with a real library, for the exercise of notebook 10: audit it before
    you read this function."""
    return make_hf_loader(rank, world_size, epoch, num_shards=6, shuffle=True,
                          split_then_epoch=False)
