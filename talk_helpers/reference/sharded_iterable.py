"""A correct, resumable iterable dataset for DataLoader workers and DDP ranks.

The talk leaves it "as an exercise to the reader"; this is one solution::

    ds = ShardedIterableDataset(10_000, batch_size=32, seed=0)   # ids 0..9999
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    for epoch in range(3):
        ds.set_epoch(epoch)
        for batch in loader:
            ...

What it guarantees, whatever the number of ranks (≥ 1), workers (≥ 0) and shard sizes:

* every rank and worker draws the same permutation of the epoch (shuffle before shard),
  seeded by ``(seed, epoch)``; ``set_epoch`` reaches persistent workers too;
* each sample is read exactly once per epoch across all ranks and workers, except the
  ``dropped`` ones (policy ``"drop"``, at most ``world_size - 1``) or plus the ``padded``
  repeats (policy ``"pad"``, at most ``world_size - 1``);
* every rank yields the same number of batches, so DDP cannot hang on the data;
* a rank's loader yields its batches in the same order whatever ``num_workers`` is
  (batch ``j`` of a rank is made by worker ``j % num_workers``, the order in which a
  DataLoader collects them);
* ``transform(item, rng)`` gets a ``torch.Generator`` private to (rank, worker, epoch);
  a worker's ``state_dict`` saves it, so a StatefulDataLoader resume repeats the same
  augmentations (a plain-DataLoader resume deals the rest afresh, with fresh draws);
* with :meth:`from_shards`, each window of ``window`` shards (in the epoch's shard order)
  is shuffled as one pool, so a micro-batch draws from several shards while a worker
  holds at most ``window`` shards in memory and reads each shard sequentially once;
* mid-epoch resume, exactly once, in fresh processes:

  - with ``torchdata.stateful_dataloader.StatefulDataLoader``: save and load the loader's
    ``state_dict()``; each worker's copy of the dataset saves and restores its position;
  - with a plain ``DataLoader``: count the items your loop took from the loader this epoch
    and save ``ds.checkpoint(batches_consumed)``; on resume, build the dataset the same
    way, call ``ds.load_state_dict(saved)`` before ``iter(loader)``; the resume point holds
    until ``set_epoch`` moves to another epoch. Requires the DataLoader
    to pass items through unchanged (``batch_size=None``); ``num_workers`` may differ.
  - elastic: when every rank took the same ``k`` batches, ``checkpoint(k)`` from any rank
    loads on any rank of a world of any size. The new world deals the samples nobody
    read yet (in epoch order) into equal blocks, so the epoch is read exactly once except
    fewer than ``W1`` dropped by the old world and fewer than ``W2`` dropped or padded by
    the new one. The next epoch is the new world's normal one.

The module needs only torch and numpy: copy it into your project.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data._utils.collate import default_collate

POLICIES = ("drop", "pad")
STATE_VERSION = 2
DEFAULT_WINDOW = 4  # shards shuffled together (16 × 64 ids, batch 8: ≈ 3 shards per batch)


class ShardedIterableDataset(IterableDataset):
    """Shuffle-before-shard iterable dataset with equal batches per rank and exact resume.

    ``source`` is an int ``N`` (the samples are the ids ``0..N-1``) or a sized, indexable
    sequence (a numpy array or tensor is indexed with whole batches at once). Use
    :meth:`from_shards` for a list of shards (files, index ranges) of uneven sizes.
    """

    def __init__(self, source: int | Sequence, *, batch_size: int | None = None,
                 shuffle: bool = True, seed: int = 0, policy: str = "drop",
                 transform: Callable[[Any, torch.Generator], Any] | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 collate_fn: Callable[[list], Any] = default_collate) -> None:
        if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
            if source < 0:
                raise ValueError(f"source must be a size ≥ 0 or a sequence, got {source}")
            self._shards = [_Shard(int(source), None, None)]
        else:
            self._shards = [_Shard(len(source), source, None)]
        self.window = None  # one flat source: the whole epoch is one shuffled pool
        self._init(batch_size=batch_size, shuffle=shuffle, seed=seed, policy=policy,
                   transform=transform, rank=rank, world_size=world_size,
                   collate_fn=collate_fn, global_shuffle=True)

    @classmethod
    def from_shards(cls, shards: Sequence, *, lengths: Sequence[int] | None = None,
                    load: Callable[[Any], Sequence] | None = None,
                    **kwargs: Any) -> ShardedIterableDataset:
        """A dataset over ``shards``: ``load(shard)`` returns a shard's samples (e.g. a file
        path → array); without ``load`` a shard is its own samples (``range(0, 130)``).

        ``lengths`` (one per shard) saves loading every shard up front to count it. The
        epoch order shuffles the shard order, then cuts it into windows of ``window``
        shards and shuffles the samples of each window together: a worker holds at most
        ``window`` shards (memory) and reads each once (sequential reads), and a
        micro-batch mixes up to ``window`` shards (``window=1``: one shard at a time).
        Global sample ids number the shards in order.
        """
        shards = list(shards)
        if lengths is None:
            lengths = [len(load(s)) if load is not None else len(s) for s in shards]
        lengths = [int(n) for n in lengths]
        if len(lengths) != len(shards):
            raise ValueError(f"lengths has {len(lengths)} entries for {len(shards)} shards")
        for i, n in enumerate(lengths):
            if n < 0:
                raise ValueError(f"shard {i} has a negative length {n}; lengths must be ≥ 0")
        self = cls.__new__(cls)
        self._shards = [_Shard(n, s, load) for n, s in zip(lengths, shards, strict=True)]
        kwargs.setdefault("collate_fn", default_collate)
        window = kwargs.pop("window", DEFAULT_WINDOW)
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError("window must be an int ≥ 1 (shards shuffled together), "
                             f"got {window!r}")
        self.window = int(window)
        self._init(global_shuffle=False, **{
            "batch_size": None, "shuffle": True, "seed": 0, "policy": "drop",
            "transform": None, "rank": None, "world_size": None, **kwargs})
        return self

    # -- what a training loop uses -------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (its permutation); reaches already running persistent workers.
        A resume point loaded for another epoch is forgotten."""
        if epoch < 0:
            raise ValueError(f"epoch must be ≥ 0, got {epoch}")
        if self._pending is not None and self._pending["epoch"] != epoch:
            self._pending = None
        if self._segments is not None and self._segments["epoch"] != epoch:
            self._segments = None
        self._epoch[0] = int(epoch)

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    def __len__(self) -> int:
        """Items (batches, or samples without ``batch_size``) this rank yields per epoch."""
        return _ceil_div(self.samples_per_rank, self.batch_size or 1)

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        return self._iter_worker(worker, num_workers)

    # -- what it promises, as numbers ----------------------------------------------

    @property
    def num_samples(self) -> int:
        """Samples in the source (all shards)."""
        return self._n

    def _to_deal(self) -> int:
        return len(self.layout()) if self._resuming(self.epoch) else self._n

    @property
    def samples_per_rank(self) -> int:
        """Samples every rank reads this epoch (the same on every rank; after a
        checkpoint resume, what is left of the epoch)."""
        n = self._to_deal()
        return n // self.world_size if self.policy == "drop" else _ceil_div(n, self.world_size)

    @property
    def dropped(self) -> int:
        """Samples of the epoch that no rank reads (policy 'drop'; < world_size)."""
        return max(0, self._to_deal() - self.world_size * self.samples_per_rank)

    @property
    def padded(self) -> int:
        """Samples of the epoch read twice to even out the ranks (policy 'pad'; < world_size)."""
        return max(0, self.world_size * self.samples_per_rank - self._to_deal())

    def dropped_ids(self, epoch: int | None = None) -> np.ndarray:
        """The ids no rank reads in ``epoch`` (policy 'drop'): the end of its layout."""
        order = self.layout(epoch)
        n = len(order)
        dropped = n - self.world_size * (n // self.world_size) if self.policy == "drop" else 0
        return order[n - dropped:]

    def padded_ids(self, epoch: int | None = None) -> np.ndarray:
        """The ids read twice in ``epoch`` (policy 'pad'): the start of its layout."""
        order = self.layout(epoch)
        n = len(order)
        padded = self.world_size * _ceil_div(n, self.world_size) - n if self.policy == "pad" else 0
        return order[:padded]

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The epoch's permutation of global sample ids, identical in every process."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return np.arange(self._n, dtype=np.int64)
        gen = torch.Generator().manual_seed(_mix_seed(self.seed, epoch))
        if self._global_shuffle:
            return torch.randperm(self._n, generator=gen).numpy()
        offsets = self._offsets
        shard_order = torch.randperm(len(self._shards), generator=gen).tolist()
        pieces = []
        for w in range(0, len(shard_order), self.window):
            pool = np.concatenate([np.arange(offsets[s], offsets[s + 1], dtype=np.int64)
                                   for s in shard_order[w:w + self.window]])
            pieces.append(pool[torch.randperm(len(pool), generator=gen).numpy()])
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)

    def layout(self, epoch: int | None = None) -> np.ndarray:
        """The ids the ranks split into equal blocks this epoch: the epoch order, or after
        a :meth:`checkpoint` resume, the ids the old world(s) had not read yet."""
        epoch = self.epoch if epoch is None else epoch
        order = self.epoch_order(epoch)
        if self._segments is None or self._segments["epoch"] != epoch:
            return order
        unit = self.batch_size or 1
        for world, consumed in self._segments["history"]:
            # The old world's layout, position by position (drop: its tail no rank read;
            # pad: its repeats), minus the first `consumed` items of every rank's block.
            n = len(order)
            per = n // world if self.policy == "drop" else _ceil_div(n, world)
            left = np.ones(max(n, world * per), dtype=bool)
            for r in range(world):
                left[r * per:r * per + min(consumed * unit, per)] = False
            order = order[np.flatnonzero(left) % n] if n else order
        return order

    # -- resume ----------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where this process's iteration stands (a worker's copy, or the main process)."""
        progress = dict(self._progress or {"epoch": self.epoch, "worker_id": None,
                                           "num_workers": None, "first_item": 0,
                                           "yielded": 0})
        rng = progress.pop("rng", None)  # the augmentation generator, saved mid-stream
        progress["rng_state"] = None if rng is None else rng.get_state()
        return {"version": STATE_VERSION, "config": self._config(), "rank": self.rank,
                "world_size": self.world_size, "history": self._history(progress["epoch"]),
                **progress}

    def checkpoint(self, batches_consumed: int) -> dict:
        """A resume point for a plain DataLoader: this rank took ``batches_consumed`` items
        from the loader in the current epoch. Pass it to :meth:`load_state_dict` later."""
        if isinstance(batches_consumed, bool) or batches_consumed < 0:
            raise ValueError(f"batches_consumed must be an int ≥ 0, got {batches_consumed!r}")
        history = self._history(self.epoch) + [[self.world_size, int(batches_consumed)]]
        return {"version": STATE_VERSION, "config": self._config(), "epoch": self.epoch,
                "history": history}

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`checkpoint` (any rank, any world size) or a worker's
        :meth:`state_dict` (same rank and world size), made by a dataset built with the
        same source, seed, policy, batch_size and window."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("state was not made by ShardedIterableDataset.state_dict() "
                             f"or .checkpoint() (version {STATE_VERSION})")
        mine, theirs = self._config(), state.get("config", {})
        differ = [f"{k}: saved {theirs.get(k)!r}, now {v!r}" for k, v in mine.items()
                  if theirs.get(k) != v]
        if differ:
            raise ValueError("state comes from a different configuration: " + "; ".join(differ))
        if "worker_id" in state and (state.get("rank"), state.get("world_size")) != (
                self.rank, self.world_size):
            raise ValueError(
                f"a StatefulDataLoader state resumes only the same rank of the same world: "
                f"saved by rank {state.get('rank')} of {state.get('world_size')}, loaded by "
                f"rank {self.rank} of {self.world_size}; to resume on another world size, "
                f"save ds.checkpoint(batches_consumed) instead")
        self.set_epoch(state["epoch"])
        history = [list(map(int, h)) for h in state.get("history", [])]
        self._segments = {"epoch": state["epoch"], "history": history} if history else None
        if "worker_id" not in state:
            self._pending = None
        elif state.get("worker_id") is not None:
            self._pending = {k: state.get(k) for k in ("epoch", "worker_id", "num_workers",
                                                       "first_item", "yielded", "rng_state")}
        else:
            self._pending = None

    # -- internals -------------------------------------------------------------------

    def _init(self, *, batch_size, shuffle, seed, policy, transform, rank, world_size,
              collate_fn, global_shuffle) -> None:
        if batch_size is not None and (isinstance(batch_size, bool) or batch_size < 1):
            raise ValueError(f"batch_size must be None or an int ≥ 1, got {batch_size!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if seed < 0:
            raise ValueError(f"seed must be ≥ 0, got {seed}")
        self.rank, self.world_size = resolve_rank_and_world(rank, world_size)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle, self.seed, self.policy = bool(shuffle), int(seed), policy
        self.transform, self.collate_fn = transform, collate_fn
        self._global_shuffle = global_shuffle
        lengths = np.array([s.length for s in self._shards], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self._n = int(self._offsets[-1])
        # Shared memory: a persistent worker sees set_epoch() made after it started.
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._progress: dict | None = None
        self._pending: dict | None = None
        self._segments: dict | None = None  # the epoch's checkpoint resumes, in order
        self._cache: dict = {}

    def _config(self) -> dict:
        return {"lengths": [s.length for s in self._shards], "seed": self.seed,
                "shuffle": self.shuffle, "policy": self.policy,
                "batch_size": self.batch_size, "window": self.window}

    def _resuming(self, epoch: int) -> bool:
        return self._segments is not None and self._segments["epoch"] == epoch

    def _history(self, epoch: int) -> list:
        return [list(h) for h in self._segments["history"]] if self._resuming(epoch) else []

    def _resume_point(self, epoch: int, worker: int, num_workers: int):
        """(first item of the rank to deal out, items of this worker's stream to skip,
        saved state of the augmentation generator or None)."""
        pending = self._pending
        if pending is None or pending["epoch"] != epoch:
            return 0, 0, None
        self._pending = None
        if pending["num_workers"] != num_workers or pending["worker_id"] != worker:
            raise ValueError(
                f"state comes from a different configuration: saved by worker "
                f"{pending['worker_id']} of {pending['num_workers']}, loaded by worker "
                f"{worker} of {num_workers}")
        return pending["first_item"], pending["yielded"], pending.get("rng_state")

    def _iter_worker(self, worker: int, num_workers: int):
        """The items worker ``worker`` of ``num_workers`` yields on this rank (a function of
        the configuration, the epoch and a loaded resume point only)."""
        epoch = self.epoch
        first, skip, rng_state = self._resume_point(epoch, worker, num_workers)
        ids = worker_sample_ids(self.layout(epoch), rank=self.rank,
                                world_size=self.world_size, worker=worker,
                                num_workers=num_workers, batch_size=self.batch_size,
                                policy=self.policy, first_item=first)
        rng = None
        if self.transform is not None:
            rng = torch.Generator().manual_seed(
                _mix_seed(self.seed, epoch, self.rank, worker, 1))
            if rng_state is not None:
                rng.set_state(rng_state)
        # Set now, not at the first next(): a state taken in between must describe this epoch.
        self._progress = {"epoch": epoch, "worker_id": worker, "num_workers": num_workers,
                          "first_item": first, "yielded": skip, "rng": rng}
        return self._items(ids, skip, rng, self._progress)

    def _items(self, ids: np.ndarray, skip: int, rng, progress: dict):
        unit = self.batch_size or 1
        for start in range(skip * unit, len(ids), unit):
            item = self._fetch(ids[start:start + unit]) if self.batch_size else \
                self._fetch_one(int(ids[start]))
            if rng is not None:
                item = self.transform(item, rng)
            progress["yielded"] += 1
            yield item

    def _fetch(self, gids: np.ndarray):
        if len(self._shards) == 1:  # a flat source: one vectorised read, no shard lookup
            if self._shards[0].source is None:
                return torch.from_numpy(gids.copy())
            return self._take(0, gids)
        shard_of = np.searchsorted(self._offsets, gids, side="right") - 1
        first = shard_of[0]
        if (shard_of == first).all():
            return self._take(first, gids - self._offsets[first])
        parts = {int(s): self._take(int(s), gids[shard_of == s] - self._offsets[s])
                 for s in np.unique(shard_of)}
        if all(isinstance(p, torch.Tensor) for p in parts.values()):
            out = torch.cat(list(parts.values()))
            where = np.concatenate([np.flatnonzero(shard_of == s) for s in parts])
            return out[torch.from_numpy(np.argsort(where, kind="stable"))]
        return self.collate_fn([self._fetch_one(int(g)) for g in gids])

    def _take(self, s: int, local: np.ndarray):
        data = self._shard_data(s)
        if isinstance(data, torch.Tensor):
            return data[torch.from_numpy(local)]
        if isinstance(data, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(data[local]))
        if isinstance(data, range):
            return torch.from_numpy(data.start + local * data.step)
        return self.collate_fn([data[int(i)] for i in local])

    def _fetch_one(self, gid: int):
        s = int(np.searchsorted(self._offsets, gid, side="right") - 1)
        data = self._shard_data(s)
        if data is None:
            return gid
        return data[gid - int(self._offsets[s])]

    def _shard_data(self, s: int):
        shard = self._shards[s]
        if shard.load is None:
            return shard.source
        if s not in self._cache:
            # at most one window of loaded shards per process: the order reads window by window
            while len(self._cache) >= (self.window or 1):
                self._cache.pop(next(iter(self._cache)))
            self._cache[s] = shard.load(shard.source)
        return self._cache[s]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state


def resolve_rank_and_world(rank: int | None = None,
                           world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): explicit arguments, else torch.distributed when initialised,
    else the RANK / WORLD_SIZE environment variables, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    if rank is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        else:
            rank, world_size = 0, 1
    if world_size < 1:
        raise ValueError(f"world_size must be ≥ 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..world_size-1 = 0..{world_size - 1}, got {rank}")
    return int(rank), int(world_size)


def worker_sample_ids(order: np.ndarray, *, rank: int, world_size: int, worker: int,
                      num_workers: int, batch_size: int | None, policy: str,
                      first_item: int = 0, last_item: int | None = None) -> np.ndarray:
    """Global sample ids one (rank, worker) reads this epoch, in order, from the epoch's
    permutation ``order``. Rank r takes the r-th equal block of the (dropped or padded)
    order; its items (batches of ``batch_size``, or samples) from ``first_item`` on go
    round-robin to the workers, starting at worker 0 (the order a DataLoader reads them),
    up to but not including item ``last_item`` (default: all)."""
    n = len(order)
    per_rank = n // world_size if policy == "drop" else _ceil_div(n, world_size)
    if per_rank == 0:
        return np.zeros(0, dtype=np.int64)
    unit = batch_size or 1
    end = _ceil_div(per_rank, unit) if last_item is None else min(last_item,
                                                                   _ceil_div(per_rank, unit))
    items = np.arange(first_item + worker, end, max(num_workers, 1))
    pos = (items[:, None] * unit + np.arange(unit)[None, :]).ravel()
    pos = pos[pos < per_rank] + rank * per_rank
    return np.asarray(order, dtype=np.int64)[pos % n]


class _Shard:
    __slots__ = ("length", "source", "load")

    def __init__(self, length: int, source: Any, load: Callable | None) -> None:
        self.length, self.source, self.load = length, source, load

    def __getstate__(self):
        return (self.length, self.source, self.load)

    def __setstate__(self, state):
        self.length, self.source, self.load = state


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _mix_seed(*values: int) -> int:
    """One 63-bit seed from several ints, so that nearby tuples give unrelated streams."""
    return int(np.random.SeedSequence([int(v) for v in values]).generate_state(1,
                                                                              np.uint64)[0]
               >> np.uint64(1))
