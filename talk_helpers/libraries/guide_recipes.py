"""A course module's recipes for sharded loading (its "Pattern 2" and "Pattern 3"), as
written, and the fix for the first."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from talk_helpers.lessons.datasets.shard_files import write_tar_shards
from talk_helpers.libraries.common import (
    BATCH_SIZE,
    NUM_WORKERS,
    SHARD_SIZES,
    fork_context,
    loader_kwargs,
    quiet,
)

GUIDE_SHARDS = (12, 12, 12, 12, 13)   # the same 61 ids in five shards: an odd count for 2 ranks


class _IdRange(Dataset):
    """Map-style ids ``start..stop-1``: one shard file, loaded."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.start + index


def shard_paths(sizes=GUIDE_SHARDS) -> list[str]:
    """Stand-in shard paths ``"ids-<start>-<stop>"`` that :func:`load_shard` reads back."""
    bounds = np.cumsum((0, *sizes))
    return [f"ids-{a}-{b}" for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def load_shard(path: str) -> Dataset:
    """The shard a path names, as a map-style dataset."""
    _, start, stop = path.split("-")
    return _IdRange(int(start), int(stop))


def load_sharded_dataset(shard_paths: list[str], rank: int, world_size: int):
    """Load dataset shards specific to this rank."""
    from torch.utils.data import ConcatDataset
    # Assign shards to ranks
    shards_per_rank = len(shard_paths) // world_size
    my_shards = shard_paths[
        rank * shards_per_rank:(rank + 1) * shards_per_rank
    ]

    # Load only this rank's shards
    datasets = [load_shard(path) for path in my_shards]
    return ConcatDataset(datasets)


def load_sharded_round_robin(shard_paths: list[str], rank: int, world_size: int):
    """Every shard to exactly one rank: shard ``i`` goes to rank ``i % world_size``."""
    from torch.utils.data import ConcatDataset

    return ConcatDataset([load_shard(path) for path in shard_paths[rank::world_size]])


def make_guide_pattern2(rank: int, world_size: int, epoch: int, *, sizes=GUIDE_SHARDS,
                       load=load_sharded_dataset, num_workers: int = NUM_WORKERS,
                       batch_size: int = BATCH_SIZE):
    """The course module's "Pattern 2" (``load=load_sharded_dataset``) in a DataLoader."""
    return DataLoader(load(shard_paths(sizes), rank, world_size), batch_size=batch_size,
                      **loader_kwargs(num_workers))


def _wds_pair(sample: dict) -> tuple[int, int]:
    return int(sample["id"]), 0


def create_webdataset_loader(url, batch_size: int, rank: int, world_size: int, *,
                             nodesplitter=None, num_workers: int = NUM_WORKERS,
                             dataset_size: int = 10000):
    """The course module's "Pattern 3" as written, on tar shards holding ids: ``.decode("pil")`` and
    the image transform have nothing to decode here, so ``.map(_wds_pair)`` stands in for
    them, and the module's literal 10000 (its dataset size) is ``dataset_size``.
    ``nodesplitter`` is the argument its error message asks for."""
    import webdataset as wds

    extra = {} if nodesplitter is None else {"nodesplitter": nodesplitter}
    dataset = (
        wds.WebDataset(url, **extra)
        .shuffle(1000)
        .map(_wds_pair)
        .batched(batch_size)
    )

    # Shard across workers
    dataset = dataset.with_epoch(dataset_size // world_size)

    return wds.WebLoader(dataset, num_workers=num_workers, **fork_context())


def _first(batch) -> torch.Tensor:
    """The ids of one of the loader's batches: WebLoader's own batch of one adds a leading
    dimension of 1 over webdataset's batch."""
    return torch.as_tensor(batch[0], dtype=torch.int64).reshape(-1)


def make_guide_pattern3(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                       split_nodes: bool = False, num_workers: int = NUM_WORKERS,
                       batch_size: int = BATCH_SIZE):
    """The course module's WebDataset loader over :func:`write_tar_shards`;
    ``split_nodes=True`` passes ``nodesplitter=wds.split_by_node``, as its error message
    asks. Yields id tensors."""
    import webdataset as wds

    quiet()
    loader = create_webdataset_loader(
        write_tar_shards(sizes), batch_size, rank, world_size,
        nodesplitter=wds.split_by_node if split_nodes else None, num_workers=num_workers,
        dataset_size=sum(sizes))
    return (_first(batch) for batch in loader)
