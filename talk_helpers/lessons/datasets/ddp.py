"""Datasets and loader factories of DDP lessons (notebooks 05, 06 and 10, the hang demo,
the tests): every sample is its id. A ``make_*`` function, its settings bound with
``functools.partial``, is the ``make_loader(rank, world_size, epoch)`` ``audit`` expects."""

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.arguments import check_choice, require_int
from talk_helpers.model.sharding import POLICIES, stream_ids


class ShardedIds(IterableDataset):
    """Shards of ``shard_sizes`` consecutive ids, split over ranks then workers by
    ``policy`` (see :data:`talk_helpers.model.sharding.POLICIES`). Rank and world size are given
    when the dataset is built, so workers never ask torch.distributed."""

    def __init__(self, shard_sizes, rank: int, world_size: int, policy: str = "round_robin"):
        check_choice("policy", policy, POLICIES)
        require_int("rank", rank, minimum=0, maximum=world_size - 1)
        self.shard_sizes = [int(s) for s in shard_sizes]
        self.rank, self.world_size, self.policy = rank, world_size, policy

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        yield from stream_ids(self.shard_sizes, self.rank, self.world_size, worker, workers,
                              self.policy).tolist()


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
