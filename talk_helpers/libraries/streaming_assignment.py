"""mosaicml-streaming: which samples each node, rank and worker reads, from its own code."""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import DataLoader

from talk_helpers.libraries.common import (
    BATCH_SIZE,
    NUM_WORKERS,
    SHARD_SIZES,
    STOP_AFTER,
    loader_kwargs,
)


def streaming_modules():
    """mosaicml-streaming's partition and shuffle functions, the code
    ``StreamingDataset`` runs to decide which samples each node, rank and worker reads.

    ``import streaming`` imports its text, vision and multimodal packages, which need
    ``transformers`` and ``torchvision`` (the only torchvision for torch 2.13 on the
    registry is a CUDA build), and ``streaming.base`` imports ``transformers`` too. These two
    subpackages import only numpy, so they are loaded from the installed wheel under their
    own names, with empty stand-ins for the parents ``streaming`` and ``streaming.base``
    (their ``__init__`` is not run). Returns ``(get_partitions, get_shuffle)``."""
    import importlib
    import importlib.machinery
    import sys
    import types

    spec = importlib.machinery.PathFinder.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("mosaicml-streaming is not installed: "
                          "pip install --no-deps -r requirements-audit.txt")
    root = list(spec.submodule_search_locations)[0]
    for name, path in (("streaming", root), ("streaming.base", os.path.join(root, "base"))):
        if name not in sys.modules:
            stand_in = types.ModuleType(name, "stand-in: the package __init__ is not run")
            stand_in.__path__ = [path]
            sys.modules[name] = stand_in
    partition = importlib.import_module("streaming.base.partition")
    shuffle = importlib.import_module("streaming.base.shuffle")
    return partition.get_partitions, shuffle.get_shuffle


def streaming_world_source() -> list[str]:
    """Where mosaicml-streaming's ``StreamingDataset`` learns its rank and world, read from
    the installed wheel's source without importing it: what ``World.detect``
    (``streaming/base/world.py``) calls, and what those functions of
    ``streaming/base/distributed.py`` return, as ``"file: line"``."""
    import ast
    import importlib.machinery

    spec = importlib.machinery.PathFinder.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("mosaicml-streaming is not installed: "
                          "pip install --no-deps -r requirements-audit.txt")
    base = os.path.join(list(spec.submodule_search_locations)[0], "base")
    found = []
    with open(os.path.join(base, "world.py")) as f:
        world = f.read()
    for line in world.splitlines():
        if "import distributed as dist" in line or "dist.get_" in line:
            found.append(f"world.py: {line.strip()}")
    with open(os.path.join(base, "distributed.py")) as f:
        distributed = f.read()
    called = {"get_rank", "get_world_size", "get_local_world_size"}
    for node in ast.parse(distributed).body:
        if isinstance(node, ast.FunctionDef) and node.name in called:
            returned = ast.get_source_segment(distributed, node.body[-1])
            found.append(f"distributed.py: def {node.name}(): {returned}")
    return found


class _StreamingWork(torch.utils.data.IterableDataset):
    """A rank's share of one epoch as mosaicml-streaming computes it: the partition tensor
    ``(nodes, ranks per node, workers per rank, batches per worker, batch size)`` from
    ``get_partitions``, ids mapped through ``get_shuffle`` when shuffling, ``-1`` padding
    skipped, each DataLoader worker reading its own slice: what
    ``generate_work_random_batching`` and ``StreamingDataset._get_work`` do."""

    def __init__(self, rank, world_size, epoch, *, shard_sizes, shuffle, seed, batch_size,
                 num_workers, num_canonical_nodes, partition_algo, shuffle_algo,
                 shuffle_block_size, drop_first):
        self.rank, self.world_size, self.epoch = rank, world_size, epoch
        self.shard_sizes = np.asarray(shard_sizes, dtype=np.int64)
        self.shuffle, self.seed, self.batch_size = shuffle, seed, batch_size
        self.num_workers = max(1, num_workers)
        self.num_canonical_nodes = num_canonical_nodes or 1
        self.partition_algo, self.shuffle_algo = partition_algo, shuffle_algo
        self.shuffle_block_size, self.drop_first = shuffle_block_size, drop_first

    def work(self) -> np.ndarray:
        get_partitions, get_shuffle = streaming_modules()
        ids = get_partitions(self.partition_algo, int(self.shard_sizes.sum()),
                             self.num_canonical_nodes, 1, self.world_size, self.num_workers,
                             self.batch_size, self.drop_first)
        if self.shuffle:
            order = get_shuffle(self.shuffle_algo, self.shard_sizes, self.num_canonical_nodes,
                                self.seed, self.epoch, self.shuffle_block_size)
            ids = np.where(ids != -1, order[ids], -1)
        return ids[0, self.rank]

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = 0 if info is None else info.id
        mine = self.work()[worker].reshape(-1)
        yield from (int(i) for i in mine if i != -1)


def make_streaming_loader(rank: int, world_size: int, epoch: int, *, shard_sizes=SHARD_SIZES,
                          shuffle: bool = True, seed: int = 9176,
                          num_workers: int = NUM_WORKERS, batch_size: int = BATCH_SIZE,
                          num_canonical_nodes: int | None = None,
                          partition_algo: str = "relaxed", shuffle_algo: str = "py1e",
                          shuffle_block_size: int = 1 << 18, drop_first: int = 0):
    """mosaicml-streaming's sample assignment (its defaults: ``relaxed`` partition, ``py1e``
    shuffle, seed 9176) over ``shard_sizes``, in a DataLoader with ``num_workers`` workers.
    ``drop_first`` is how its ``state_dict`` resumes: the samples the whole world has seen."""
    ds = _StreamingWork(rank, world_size, epoch, shard_sizes=shard_sizes, shuffle=shuffle,
                        seed=seed, batch_size=batch_size, num_workers=num_workers,
                        num_canonical_nodes=num_canonical_nodes,
                        partition_algo=partition_algo, shuffle_algo=shuffle_algo,
                        shuffle_block_size=shuffle_block_size, drop_first=drop_first)
    return DataLoader(ds, batch_size=batch_size, **loader_kwargs(num_workers))


def make_streaming_resumed(rank: int, world_size: int, epoch: int, *,
                           stop_after: int = STOP_AFTER, **settings):
    """mosaicml-streaming's resume: after ``stop_after`` batches on every rank its
    ``state_dict`` records ``sample_in_epoch``, the samples the whole world has seen
    (``stop_after × batch_size × world_size``), and the restarted dataset passes it to
    ``get_partitions`` as ``drop_first``. Returns every batch before and after the restart."""
    batch_size = settings.get("batch_size", BATCH_SIZE)
    first = iter(make_streaming_loader(rank, world_size, epoch, **settings))
    before = [batch for _, batch in zip(range(stop_after), first, strict=False)]
    del first
    seen = stop_after * batch_size * world_size
    return before + list(make_streaming_loader(rank, world_size, epoch, drop_first=seen,
                                               **settings))
