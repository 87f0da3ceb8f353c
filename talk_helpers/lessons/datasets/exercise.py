"""What notebook 09 runs that is not its lesson: its shards, DataLoaders computed in this
process, the functions its real ranks run, and the block-size comparison.

The steps from the naive dataset to a correct one are defined in 09's own cells; the
finished class is :class:`~talk_helpers.reference.sharded_iterable.ShardedIterableDataset`.
A "simulated" loader runs the dataset's own ``__iter__`` once per worker, in this process,
on a copy of the dataset, with :func:`torch.utils.data.get_worker_info` answering as it
would in that worker; the batches then come in the order a DataLoader yields them
(:mod:`talk_helpers.model.dataloader`). No process starts, so every start method gives
the same answer at once.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils import worker as _worker

from talk_helpers.model.dataloader import loader_batches, round_robin
from talk_helpers.reference.sharded_iterable import ShardedIterableDataset

SHARD_SIZES = (26, 9, 14, 12)   # 61 samples in four uneven shards (think: files)
BATCH_SIZE = 5
NUM_WORKERS = 2


def shard_ranges(sizes=SHARD_SIZES) -> list[range]:
    """Shards as ranges of global sample ids, in the order they are stored."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return [range(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


@contextlib.contextmanager
def as_worker(dataset, worker: int, num_workers: int):
    """Make ``get_worker_info()`` answer as in DataLoader worker ``worker`` while the block
    runs (in this process): torch's private ``_worker_info``, tested on torch 2.13 only."""
    saved = _worker._worker_info
    _worker._worker_info = _worker.WorkerInfo(id=worker, num_workers=num_workers,
                                              seed=worker, dataset=dataset)
    try:
        yield
    finally:
        _worker._worker_info = saved


def worker_streams(dataset, num_workers: int = NUM_WORKERS) -> list[list]:
    """What each worker of a DataLoader over ``dataset`` yields: ``[worker] -> items``.
    ``num_workers=0`` is the main process: one stream, no worker info."""
    if num_workers == 0:
        return [list(copy.deepcopy(dataset))]
    streams = []
    for w in range(num_workers):
        mine = copy.deepcopy(dataset)
        with as_worker(mine, w, num_workers):
            streams.append(list(mine))
    return streams


def simulated_loader(dataset, num_workers: int = NUM_WORKERS,
                     batch_size: int | None = BATCH_SIZE) -> list:
    """What ``DataLoader(dataset, batch_size, num_workers)`` yields, computed here:
    each worker batches its own stream, the loader takes one batch from each in turn.
    ``batch_size=None``: the dataset's items pass through (it batches itself)."""
    streams = worker_streams(dataset, num_workers)
    if batch_size is None:
        return round_robin(streams)
    return [torch.as_tensor(batch) for batch in loader_batches(streams, batch_size)]


def make_simulated(rank: int, world_size: int, epoch: int, *, dataset_class, shards,
                   num_workers: int = NUM_WORKERS, batch_size: int | None = BATCH_SIZE,
                   **kwargs):
    """Audit factory: ``dataset_class(shards, ...)`` built for this rank (``rank`` and
    ``world_size`` are passed when its constructor takes them), ``set_epoch(epoch)`` if
    it has one, then its simulated loader."""
    takes = inspect.signature(dataset_class).parameters
    world = {k: v for k, v in (("rank", rank), ("world_size", world_size)) if k in takes}
    dataset = dataset_class(shards, **world, **kwargs)
    if hasattr(dataset, "set_epoch"):
        dataset.set_epoch(epoch)
    return simulated_loader(dataset, num_workers, batch_size)


def simulated(dataset_class, shards=None, **kwargs):
    """``make_simulated`` with its class and shards fixed: what ``audit`` calls."""
    return functools.partial(make_simulated, dataset_class=dataset_class,
                             shards=shard_ranges() if shards is None else shards, **kwargs)


def augmentation_draws(dataset_class, shards=None, *, world_size: int = 2,
                       num_workers: int = NUM_WORKERS, epochs: int = 2, **kwargs) -> dict:
    """Every sample's draw in every (rank, worker, epoch), for ``check_random_draws``:
    columns ``rank, worker, epoch, id, crop`` (the dataset yields ``{"id", "crop"}``)."""
    shards = shard_ranges() if shards is None else shards
    columns = {name: [] for name in ("rank", "worker", "epoch", "id", "crop")}
    for rank in range(world_size):
        for epoch in range(epochs):
            dataset = dataset_class(shards, rank=rank, world_size=world_size, **kwargs)
            dataset.set_epoch(epoch)
            for worker, stream in enumerate(worker_streams(dataset, num_workers)):
                for sample in stream:
                    for name, value in (("rank", rank), ("worker", worker), ("epoch", epoch),
                                        ("id", sample["id"]), ("crop", sample["crop"])):
                        columns[name].append(value)
    return columns


def make_final_dataset(*, seed: int = 0, sizes=SHARD_SIZES, batch_size=BATCH_SIZE,
                       policy: str = "drop", rank=None, world_size=None,
                       **kwargs) -> ShardedIterableDataset:
    """The finished dataset over the same uneven shards (rank from the world unless
    given); ``kwargs`` go to :meth:`ShardedIterableDataset.from_shards`."""
    return ShardedIterableDataset.from_shards(shard_ranges(sizes), batch_size=batch_size,
                                              seed=seed, policy=policy, rank=rank,
                                              world_size=world_size, **kwargs)


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
        return simulated_loader(ds, num_workers, batch_size=None)
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


class CountingLoad:
    """``load(shard)`` for :meth:`ShardedIterableDataset.from_shards` over ranges, that
    counts its calls (one instance per worker, as each worker has its own copy)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shard: range) -> np.ndarray:
        self.calls += 1
        return np.arange(shard.start, shard.stop)


def block_design(block_size: int | None, *, n_shards: int = 16, shard_size: int = 64,
                 batch_size: int = 8, world_size: int = 2, num_workers: int = NUM_WORKERS,
                 epochs: int = 2, seed: int = 0) -> dict:
    """What each rank's DataLoader would yield with ``from_shards(..., block_size=...)``,
    computed in this process: ``batches[epoch][rank]`` (lists of id arrays), the shard of
    each id, and the cost: shard loads per rank per epoch (mean) and the most shards one
    worker held at once."""
    shards = [range(shard_size * i, shard_size * (i + 1)) for i in range(n_shards)]
    batches, loads, held = [], [], 0
    for epoch in range(epochs):
        batches.append([])
        for rank in range(world_size):
            ds = ShardedIterableDataset.from_shards(
                shards, lengths=[shard_size] * n_shards, load=np.load, block_size=block_size,
                batch_size=batch_size, seed=seed, rank=rank, world_size=world_size)
            ds.set_epoch(epoch)
            streams, rank_loads = [], 0
            for worker in range(num_workers):
                mine = copy.deepcopy(ds)
                counter = CountingLoad()
                mine._shards.load = counter   # counts this worker's loads
                stream = []
                with as_worker(mine, worker, num_workers):
                    for batch in mine:
                        stream.append(batch.numpy())
                        held = max(held, len(mine._shards.cache))
                streams.append(stream)
                rank_loads += counter.calls
            loads.append(rank_loads)
            batches[-1].append(round_robin(streams))
    return {"batches": batches, "shard_of": np.repeat(np.arange(n_shards), shard_size),
            "loads_per_rank": float(np.mean(loads)), "shards_held": held}


def elastic_run(rank: int, world_size: int, *, epoch: int, stop_after: int | None = None,
                checkpoint: dict | None = None, num_workers: int = NUM_WORKERS,
                loader_batch_size: int | None = None, **kwargs) -> dict:
    """One rank of a plain-DataLoader run: without ``checkpoint``, read ``stop_after``
    batches (every rank the same number, as DDP steps) and return their ids and
    ``ds.checkpoint(stop_after)``; with ``checkpoint`` (saved by any rank of a world of
    any size), resume and read to the end of the epoch, then one batch of the next.
    ``loader_batch_size``: the DataLoader batches (the dataset yields samples)."""
    if loader_batch_size is not None:
        kwargs["batch_size"] = None
    ds = make_final_dataset(**kwargs)   # rank and world size from the process group
    ds.set_epoch(epoch)
    if checkpoint is not None:
        ds.load_state_dict(checkpoint)
    loader = ds.attach(DataLoader(ds, batch_size=loader_batch_size, num_workers=num_workers))
    batches = []
    for batch in loader:
        if stop_after is not None and len(batches) == stop_after:
            break
        batches.append(batch.tolist())
    out = {"ids": batches, "rank": rank, "world_size": world_size}
    if checkpoint is None:
        out["checkpoint"] = ds.checkpoint(len(batches))   # of the attached loader
    else:
        ds.set_epoch(epoch + 1)
        out["next_epoch_batches"] = len(ds)
    return out


def ddp_train(rank: int, world_size: int, *, epochs: int = 2, num_workers: int = NUM_WORKERS,
              **kwargs) -> dict:
    """One rank of a real DDP training loop over the finished dataset: every step
    all-reduces gradients, so a rank with fewer batches would leave the others blocked."""
    from torch.nn.parallel import DistributedDataParallel

    from talk_helpers.runtime.devices import collective_device
    from talk_helpers.runtime.in_rank import report_progress
    from talk_helpers.runtime.rank_entry import load_ddp

    load_ddp()  # what DDP loads when it wraps the model, loaded before the loader starts
    ds = make_final_dataset(**kwargs)
    # Persistent workers start once; set_epoch still reaches them (shared memory).
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        persistent_workers=num_workers > 0)
    device = collective_device()  # the CPU under gloo, this rank's GPU under NCCL
    model = DistributedDataParallel(torch.nn.Linear(1, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps, seen = [], []
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        seen.append([])
        for step, batch in enumerate(loader):
            x = batch.float().reshape(-1, 1).to(device) / 100
            loss = (model(x) - x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen[-1].append(batch.tolist())
            report_progress(f"epoch {epoch}, step {step + 1}")
        steps.append(len(seen[-1]))
    return {"steps": steps, "ids": seen}
