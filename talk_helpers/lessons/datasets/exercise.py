"""The steps notebook 09 builds up, from the naive iterable dataset to the finished one.

Every step fixes one pitfall of notebooks 02–06 and keeps the previous fixes:

1. ``Naive``: every worker of every rank reads every shard (duplicates × workers × ranks);
2. ``WorkerSplit``: shard ``i`` goes to worker ``i % num_workers`` (ranks still duplicate);
3. ``RankSplit``: rank captured at construction, shards split over (rank, worker) —
   exactly once, but the same order every epoch and unequal batches per rank;
4. ``ShuffleBeforeShard``: one permutation of the samples per epoch, seeded by
   ``(seed, epoch)``, then split sample by sample — the order changes, batches still differ;
5. ``AugmentRng``: step 4 plus a generator per (rank, worker, epoch) for augmentation.

Step 6 (equal batches) and step 7 (resume) are :class:`~talk_helpers.reference.sharded_iterable.
ShardedIterableDataset` itself. Each class keeps its work in ``stream(worker, num_workers)``
so that :func:`simulated_batches` can show what a DataLoader would yield without workers.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.model.dataloader import loader_batches
from talk_helpers.reference.sharded_iterable import ShardedIterableDataset, resolve_rank_and_world

SHARD_SIZES = (26, 9, 14, 12)   # 61 samples in four uneven shards (think: files)
BATCH_SIZE = 5
NUM_WORKERS = 2


def shard_ranges(sizes=SHARD_SIZES) -> list[range]:
    """Shards as ranges of global sample ids, in the order they are stored."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return [range(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class Naive(IterableDataset):
    """Step 1: read every shard, in every worker of every rank."""

    def __init__(self, sizes=SHARD_SIZES, **_):
        self.shards = shard_ranges(sizes)

    def stream(self, worker: int, num_workers: int):
        for shard in self.shards:
            yield from shard

    def __iter__(self):
        return self.stream(*_worker())


class WorkerSplit(Naive):
    """Step 2: worker ``w`` reads shards ``w, w + num_workers, …``; ranks are ignored."""

    def stream(self, worker, num_workers):
        for shard in self.shards[worker::num_workers]:
            yield from shard


class RankSplit(Naive):
    """Step 3: rank and world size captured at construction (so workers inherit them);
    shards split over the ``world_size × num_workers`` (rank, worker) pairs."""

    def __init__(self, sizes=SHARD_SIZES, rank=None, world_size=None, **_):
        super().__init__(sizes)
        self.rank, self.world_size = resolve_rank_and_world(rank, world_size)

    def stream(self, worker, num_workers):
        me = self.rank * num_workers + worker
        for shard in self.shards[me::self.world_size * num_workers]:
            yield from shard


class ShuffleBeforeShard(RankSplit):
    """Step 4: the same permutation everywhere, from ``(seed, epoch)``; then sample ``k`` of
    it goes to (rank, worker) number ``k % (world_size × num_workers)``."""

    def __init__(self, sizes=SHARD_SIZES, rank=None, world_size=None, seed=0, epoch=0, **_):
        super().__init__(sizes, rank, world_size)
        self.seed, self.epoch = seed, epoch

    def order(self) -> np.ndarray:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return torch.randperm(sum(len(s) for s in self.shards), generator=gen).numpy()

    def stream(self, worker, num_workers):
        me = self.rank * num_workers + worker
        yield from self.order()[me::self.world_size * num_workers].tolist()


class AugmentRng(ShuffleBeforeShard):
    """Step 5: samples are ``{"id", "crop"}``; the crop comes from a generator private to
    (rank, worker, epoch), never from the shuffling generator."""

    def stream(self, worker, num_workers):
        key = [self.seed, self.epoch, self.rank, worker]
        rng = torch.Generator().manual_seed(int(np.random.SeedSequence(key).generate_state(1)[0]))
        for i in super().stream(worker, num_workers):
            yield {"id": i, "crop": int(torch.randint(0, 100, (1,), generator=rng))}


STEPS = {1: Naive, 2: WorkerSplit, 3: RankSplit, 4: ShuffleBeforeShard, 5: AugmentRng}


def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def simulated_batches(dataset, num_workers=NUM_WORKERS, batch_size=BATCH_SIZE) -> list:
    """What ``DataLoader(dataset, batch_size, num_workers)`` yields, computed here
    (:func:`talk_helpers.model.dataloader.loader_batches`)."""
    n = max(num_workers, 1)
    return loader_batches([list(dataset.stream(w, n)) for w in range(n)], batch_size)


def make_step_loader(rank: int, world_size: int, epoch: int, *, step: int, seed: int = 0,
                     sizes=SHARD_SIZES, num_workers=NUM_WORKERS, batch_size=BATCH_SIZE):
    """Audit factory for steps 1–5, simulated in this process (no worker started)."""
    dataset = STEPS[step](sizes, rank=rank, world_size=world_size, seed=seed, epoch=epoch)
    return simulated_batches(dataset, num_workers, batch_size)


def step_loader(step: int, **kwargs):
    """``make_step_loader`` with its step fixed: what ``audit`` expects."""
    return functools.partial(make_step_loader, step=step, **kwargs)


def make_final_dataset(*, seed: int = 0, sizes=SHARD_SIZES, batch_size=BATCH_SIZE,
                       policy: str = "drop", rank=None, world_size=None) -> ShardedIterableDataset:
    """Step 6: the finished dataset over the same uneven shards (rank from the world)."""
    return ShardedIterableDataset.from_shards(shard_ranges(sizes), batch_size=batch_size,
                                              seed=seed, policy=policy, rank=rank,
                                              world_size=world_size)


def make_final_loader(rank: int, world_size: int, epoch: int, *, simulate: bool = False,
                      num_workers: int = NUM_WORKERS, **kwargs):
    """Audit factory for the finished dataset: a real DataLoader with workers, or
    (``simulate=True``) the same batches computed in this process."""
    if simulate:
        ds = make_final_dataset(rank=rank, world_size=world_size, **kwargs)
    else:
        ds = make_final_dataset(**kwargs)   # rank and world size from the process group
    ds.set_epoch(epoch)
    if simulate:
        n = max(num_workers, 1)
        streams = [list(ds._iter_worker(w, n)) for w in range(n)]
        return [s[j] for j in range(max(map(len, streams), default=0))
                for s in streams if j < len(s)]
    return DataLoader(ds, batch_size=None, num_workers=num_workers)


def resume_run(rank: int, world_size: int, *, epoch: int, stop_after, state=None,
               num_workers: int = NUM_WORKERS, **kwargs) -> dict:
    """One rank of a training run with a StatefulDataLoader: without ``state``, read
    ``stop_after[rank]`` batches and return their ids and the loader's state; with
    ``state`` (from a previous run, in fresh processes), resume and read to the end."""
    import warnings

    from torchdata.stateful_dataloader import StatefulDataLoader

    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    ds = make_final_dataset(**kwargs)
    ds.set_epoch(epoch)
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=num_workers)
    if state is not None:
        loader.load_state_dict(state[rank])
        return {"ids": [b.tolist() for b in loader]}
    iterator = iter(loader)
    batches = [next(iterator).tolist() for _ in range(stop_after[rank])]
    return {"ids": batches, "state": loader.state_dict()}


class _CountingLoad:
    """``load(shard)`` for :meth:`ShardedIterableDataset.from_shards` that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shard: range) -> np.ndarray:
        self.calls += 1
        return np.arange(shard.start, shard.stop)


def window_design(window: int, *, n_shards: int = 16, shard_size: int = 64,
                  batch_size: int = 8, world_size: int = 2, num_workers: int = 2,
                  epochs: int = 2, seed: int = 0) -> dict:
    """What each rank's DataLoader would yield with ``from_shards(..., window=window)``,
    computed in this process: ``batches[epoch][rank]`` (lists of id arrays), the shard of
    each id, and the cost: shard loads per worker per epoch, shards a worker holds."""
    shards = [range(shard_size * i, shard_size * (i + 1)) for i in range(n_shards)]
    batches, loads, held = [], [], 0
    for epoch in range(epochs):
        batches.append([])
        for rank in range(world_size):
            ds = ShardedIterableDataset.from_shards(
                shards, lengths=[shard_size] * n_shards, load=None, batch_size=batch_size,
                seed=seed, rank=rank, world_size=world_size, window=window)
            ds.set_epoch(epoch)
            streams = []
            for worker in range(num_workers):
                counter = _CountingLoad()
                for shard in ds._shards:
                    shard.load = counter
                streams.append([b.numpy() for b in ds._iter_worker(worker, num_workers)])
                loads.append(counter.calls)
                held = max(held, len(ds._cache))
                ds._cache.clear()
            batches[-1].append([s[j] for j in range(max(map(len, streams)))
                                for s in streams if j < len(s)])
    return {"batches": batches, "shard_of": np.repeat(np.arange(n_shards), shard_size),
            "loads_per_worker": float(np.mean(loads)), "shards_held": held}


def elastic_run(rank: int, world_size: int, *, epoch: int, stop_after: int | None = None,
                checkpoint: dict | None = None, num_workers: int = NUM_WORKERS,
                **kwargs) -> dict:
    """One rank of a plain-DataLoader run: without ``checkpoint``, read ``stop_after``
    batches (every rank the same number, as DDP steps) and return their ids and
    ``ds.checkpoint(stop_after)``; with ``checkpoint`` (saved by any rank of a world of
    any size), resume and read to the end of the epoch, then one batch of the next."""
    ds = make_final_dataset(**kwargs)   # rank and world size from the process group
    ds.set_epoch(epoch)
    if checkpoint is not None:
        ds.load_state_dict(checkpoint)
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers)
    batches = []
    for batch in loader:
        if stop_after is not None and len(batches) == stop_after:
            break
        batches.append(batch.tolist())
    out = {"ids": batches, "rank": rank, "world_size": world_size}
    if checkpoint is None:
        out["checkpoint"] = ds.checkpoint(len(batches))
    else:
        ds.set_epoch(epoch + 1)
        out["next_epoch_batches"] = len(ds)
    return out


def ddp_train(rank: int, world_size: int, *, epochs: int = 2, num_workers: int = NUM_WORKERS,
              **kwargs) -> dict:
    """One rank of a real DDP training loop over the finished dataset: every step
    all-reduces gradients, so a rank with fewer batches would leave the others blocked."""
    from torch.nn.parallel import DistributedDataParallel

    from talk_helpers.runtime.in_rank import report_progress
    from talk_helpers.runtime.rank_entry import load_ddp

    load_ddp()  # what DDP loads when it wraps the model, loaded before the loader starts
    ds = make_final_dataset(**kwargs)
    # Persistent workers start once; set_epoch still reaches them (shared memory).
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        persistent_workers=num_workers > 0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps, seen = [], []
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        seen.append([])
        for step, batch in enumerate(loader):
            x = batch.float().reshape(-1, 1) / 100
            loss = (model(x) - x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen[-1].append(batch.tolist())
            report_progress(f"epoch {epoch}, step {step + 1}")
        steps.append(len(seen[-1]))
    return {"steps": steps, "ids": seen}
