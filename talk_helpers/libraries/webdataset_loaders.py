"""webdataset: tar shards split by node and worker, and the maintainers' resampled recipe."""

from __future__ import annotations

from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.shard_files import write_tar_shards
from talk_helpers.libraries.common import (
    BATCH_SIZE,
    NUM_WORKERS,
    SHARD_SIZES,
    collate_ids,
    loader_kwargs,
    quiet,
)


def _wds_id(sample: dict) -> int:
    return int(sample["id"])


def make_wds_loader(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                    shardshuffle=False, detshuffle: bool = False, seed: int = 0,
                    seed_per_epoch: bool = False, split_nodes: bool = True,
                    num_workers: int = NUM_WORKERS, batch_size: int = BATCH_SIZE):
    """``WebDataset(urls, nodesplitter=split_by_node, workersplitter=split_by_worker,
    shardshuffle=…, seed=…)`` in a DataLoader. ``seed`` is what ``WebDataset`` would draw
    once at construction; passing it keeps every epoch's copy as the one built once.
    ``seed_per_epoch=True`` builds each epoch's dataset with ``seed + epoch``.
    ``split_nodes=False`` keeps WebDataset's default node splitter."""
    import webdataset as wds

    quiet()
    extra = {"nodesplitter": wds.split_by_node} if split_nodes else {}
    ds = wds.WebDataset(write_tar_shards(sizes), **extra,
                        workersplitter=wds.split_by_worker, shardshuffle=shardshuffle,
                        detshuffle=detshuffle, seed=seed + epoch if seed_per_epoch else seed,
                        empty_check=False).map(_wds_id)
    return DataLoader(ds, batch_size=batch_size, **loader_kwargs(num_workers))


def make_wds_resampled(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                       batches_per_epoch: int = 6, seed: int = 0,
                       seed_per_epoch: bool = False, num_workers: int = NUM_WORKERS,
                       batch_size: int = BATCH_SIZE):
    """The maintainers' DDP recipe: shards drawn with replacement (``ResampledShards``,
    here ``deterministic=True`` so the run is reproducible), batched in the workers, and
    ``WebLoader(...).with_epoch(batches_per_epoch)`` cutting each rank's endless stream.
    ``seed_per_epoch=True`` seeds each epoch's draw with ``seed + epoch``."""
    import webdataset as wds

    quiet()
    pipeline = wds.DataPipeline(
        wds.ResampledShards(write_tar_shards(sizes), seed=seed + epoch if seed_per_epoch else seed,
                            deterministic=True),
        wds.tarfile_to_samples(),
        wds.map(_wds_id),
        wds.batched(batch_size, collation_fn=collate_ids),
    )
    loader = wds.WebLoader(pipeline, batch_size=None, **loader_kwargs(num_workers))
    return loader.with_epoch(batches_per_epoch)
