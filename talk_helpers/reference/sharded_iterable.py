"""A correct, resumable iterable dataset for DataLoader workers and DDP ranks.

The talk leaves it "as an exercise to the reader"; this is one solution::

    ds = ShardedIterableDataset(10_000, batch_size=32, seed=0)   # ids 0..9999
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    for epoch in range(3):
        ds.set_epoch(epoch)
        for batch in loader:
            ...

How an epoch is laid out: every process computes it from ``(seed, epoch)``, nothing is sent.

1. **Order.** A keyed bijection of the positions ``0..N-1`` (:class:`KeyedPermutation`, a
   Feistel network): any position's sample in O(1) time and memory, so ``N = 10**9`` starts
   as fast as ``N = 1000``. With :meth:`from_shards` the shard order is shuffled, the shards
   are grouped into blocks of about ``block_size`` samples and each block is shuffled alone
   (a fixed-block shuffle, like mosaicml-streaming's ``py1br``).
2. **Ranks.** Rank ``r`` takes the r-th of ``world_size`` equal, contiguous parts of that
   order (policy ``"drop"`` leaves out its last ``N % world_size`` positions, ``"pad"``
   repeats its first ones).
3. **Workers.** The rank's part is cut into items (micro-batches of ``batch_size``, or
   samples) and the items into ``num_workers`` contiguous runs whose lengths differ by at
   most one. A DataLoader takes one item from each worker in turn, so the rank's k-th item
   is item ``k // num_workers`` of worker ``k % num_workers``.

What it guarantees, whatever the number of ranks (≥ 1), workers (≥ 0) and shard sizes:

* each sample is read exactly once per epoch across all ranks and workers, except the
  ``dropped`` ones (policy ``"drop"``, fewer than ``world_size``) or plus the ``padded``
  repeats (policy ``"pad"``, fewer than ``world_size``); every rank yields ``len(ds)``
  items, so DDP cannot hang on the data;
* ``set_epoch`` reaches persistent workers too (shared memory);
* a worker reads a contiguous run of blocks: each shard is loaded once per rank and epoch,
  except the shards of the blocks that a boundary between two workers cuts (at most
  ``num_workers - 1`` blocks per rank), which both workers load;
* a micro-batch mixes the shards of one block. That is the trade: a micro-batch comes from
  one worker, so it can mix every shard only if every worker reads every shard. With data
  smaller than one block per worker (the default block holds ``2**18`` samples), the
  workers share the block: every micro-batch mixes all shards and each worker loads them;
* ``transform(item, rng)`` gets a ``torch.Generator`` private to (rank, worker, epoch);
* resume is exact at every boundary, mid-epoch or after the last batch:

  - ``torchdata.stateful_dataloader.StatefulDataLoader``: save and load the loader's
    ``state_dict()``; each worker's copy of the dataset stores its position (and rank).
  - a plain ``DataLoader``: count the items your loop took this epoch and save
    ``ds.checkpoint(batches_consumed)`` (it records the loader's workers too); on resume
    build the dataset the same way and call ``ds.load_state_dict(saved)`` before
    ``iter(loader)``. With the same ``num_workers`` the rest comes in the order it would
    have come; with another, each item still once, dealt afresh.
  - a state saved after the last batch of epoch ``e``, loaded into a new loader, then
    ``set_epoch(e + 1)`` (before or after loading) reads epoch ``e + 1`` in full: a state
    applies to its own epoch only, and never changes the epoch you set.
  - elastic: when every rank took the same ``k`` batches, ``checkpoint(k)`` from any rank
    loads on any rank of a world of any size; the new world deals what nobody read yet.

What it refuses, with an error that says why: ``DataLoader(in_order=False)`` with several
workers (the order would depend on timing, and ``checkpoint`` could not tell what was
read); a state that stops inside another epoch than the one set; a shard whose
``load`` returns another length than ``lengths`` declares; ``WORLD_SIZE > 1`` in the
environment with no rank known.

The module needs only torch and numpy: copy it into your project.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data._utils.collate import default_collate

POLICIES = ("drop", "pad")
STATE_VERSION = 3
# Samples shuffled together: the block size that mosaicml-streaming's py1br defaults to.
DEFAULT_BLOCK_SIZE = 1 << 18
FEISTEL_ROUNDS = 6


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
            sources, lengths = [None], [int(source)]
        else:
            sources, lengths = [source], [len(source)]
        self._init(sources, np.array(lengths, dtype=np.int64), None, block_size=None,
                   batch_size=batch_size, shuffle=shuffle, seed=seed, policy=policy,
                   transform=transform, rank=rank, world_size=world_size,
                   collate_fn=collate_fn)

    @classmethod
    def from_shards(cls, shards: Sequence, *, lengths: Sequence[int] | None = None,
                    load: Callable[[Any], Sequence] | None = None,
                    block_size: int | None = DEFAULT_BLOCK_SIZE,
                    **kwargs: Any) -> ShardedIterableDataset:
        """A dataset over ``shards``: ``load(shard)`` returns a shard's samples (e.g. a file
        path → array; ``np.load(path, mmap_mode="r")`` keeps it on disk); without ``load``
        a shard is its own samples (``range(0, 130)``). Global sample ids number the shards
        in order.

        ``lengths`` (one per shard) saves loading every shard up front to count it; each
        loaded shard is checked against it. ``block_size``: samples shuffled together.
        The epoch shuffles the shard order, groups the shards into blocks (the shards that
        start within each ``block_size`` samples) and shuffles each block: a worker holds
        about one block of shards, and a micro-batch mixes one block. ``None``: one block
        (a uniform shuffle of everything). The other arguments are the constructor's.
        """
        shards = list(shards)
        if lengths is None:
            lengths = [len(load(s)) if load is not None else len(s) for s in shards]
        counts = np.asarray(lengths)
        if counts.shape != (len(shards),):
            raise ValueError(f"lengths must hold one int per shard ({len(shards)}), got "
                             f"shape {counts.shape}")
        if len(shards) and (counts.dtype == bool or not np.issubdtype(counts.dtype, np.integer)
                            or counts.min() < 0):
            bad = next(i for i, n in enumerate(lengths) if isinstance(n, bool) or not
                       isinstance(n, (int, np.integer)) or n < 0)
            raise ValueError(f"lengths[{bad}] must be an int ≥ 0 (shard {bad}'s samples), "
                             f"got {lengths[bad]!r}")
        if load is None:
            for i, shard in enumerate(shards):
                if hasattr(shard, "__len__") and len(shard) != counts[i]:
                    raise ValueError(f"shard {i} ({_describe(shard)}) holds {len(shard)} "
                                     f"samples but lengths[{i}] = {counts[i]}")
        if block_size is not None and (isinstance(block_size, bool) or not isinstance(
                block_size, (int, np.integer)) or block_size < 1):
            raise ValueError("block_size must be None (one block) or an int ≥ 1 (samples "
                             f"shuffled together), got {block_size!r}")
        self = cls.__new__(cls)
        self._init(shards, counts.astype(np.int64), load,
                   block_size=None if block_size is None else int(block_size), **{
                       "batch_size": None, "shuffle": True, "seed": 0, "policy": "drop",
                       "transform": None, "rank": None, "world_size": None,
                       "collate_fn": default_collate, **kwargs})
        return self

    # -- what a training loop uses -------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (its order); reaches already running persistent workers.
        A resume point loaded for another epoch is forgotten (see :meth:`load_state_dict`)."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be an int ≥ 0, got {epoch!r}")
        epoch = int(epoch)
        if self._pending is not None and self._pending["epoch"] != epoch:
            self._pending = None
        if self._segments is not None and self._segments["epoch"] != epoch:
            self._segments = None
        self._shared[_EPOCH], self._shared[_EPOCH_SET] = epoch, 1

    @property
    def epoch(self) -> int:
        if int(self._shared[_EPOCH_SET]):
            return int(self._shared[_EPOCH])
        return self._adopted_epoch

    def __len__(self) -> int:
        """Items (batches, or samples without ``batch_size``) this rank yields per epoch."""
        return _ceil_div(self.samples_per_rank, self._unit)

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            worker, num_workers = 0, 1
        else:
            if info.num_workers > 1 and (self._out_of_order or _loader_out_of_order(self)):
                raise ValueError(
                    "DataLoader(in_order=False) hands out batches in the order workers "
                    "finish them: the order would depend on timing, and checkpoint() could "
                    "not tell which batches were read. Use in_order=True (the default).")
            worker, num_workers = info.id, info.num_workers
        self._shared[_WORKERS] = num_workers
        return self._iter_worker(worker, num_workers)

    # -- what it promises, as numbers ----------------------------------------------

    @property
    def num_samples(self) -> int:
        """Samples in the source (all shards)."""
        return self._n

    @property
    def samples_per_rank(self) -> int:
        """Samples every rank reads this epoch (the same on every rank; after a
        checkpoint resume, what is left of the epoch)."""
        return _per_rank(self._sequence(self.epoch).length, self.world_size, self.policy)

    @property
    def dropped(self) -> int:
        """Samples of the epoch that no rank reads (policy 'drop'; < world_size)."""
        return max(0, self._sequence(self.epoch).length - self.world_size * self.samples_per_rank)

    @property
    def padded(self) -> int:
        """Samples of the epoch read twice to even out the ranks (policy 'pad'; < world_size)."""
        return max(0, self.world_size * self.samples_per_rank - self._sequence(self.epoch).length)

    def dropped_ids(self, epoch: int | None = None) -> np.ndarray:
        """The ids no rank reads in ``epoch`` (policy 'drop'): the end of its order."""
        epoch = self.epoch if epoch is None else epoch
        seq = self._sequence(epoch)
        kept = self.world_size * _per_rank(seq.length, self.world_size, self.policy)
        return self._ids(epoch, seq.base(np.arange(min(kept, seq.length), seq.length)))

    def padded_ids(self, epoch: int | None = None) -> np.ndarray:
        """The ids read twice in ``epoch`` (policy 'pad'): the start of its order."""
        epoch = self.epoch if epoch is None else epoch
        seq = self._sequence(epoch)
        extra = self.world_size * _per_rank(seq.length, self.world_size, self.policy) - seq.length
        return self._ids(epoch, seq.base(np.arange(max(extra, 0)) % max(seq.length, 1)))

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The epoch's order of all sample ids, identical in every process (built in
        memory: for inspection; iterating never builds it)."""
        epoch = self.epoch if epoch is None else epoch
        return self._ids(epoch, np.arange(self._n, dtype=np.int64))

    # -- resume ----------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where this process's iteration stands (a worker's copy, or the main process)."""
        progress = dict(self._progress or {"epoch": self.epoch, "worker_id": None,
                                           "num_workers": None, "run": None, "yielded": 0,
                                           "run_items": 0, "rank_items": 0})
        rng = progress.pop("rng", None)  # the augmentation generator, saved mid-stream
        return {"version": STATE_VERSION, "config": self._config(), "rank": self.rank,
                "world_size": self.world_size, "history": self._history(progress["epoch"]),
                "finished": progress["yielded"] >= progress["run_items"],
                "rng_state": None if rng is None else rng.get_state(), **progress}

    def checkpoint(self, batches_consumed: int, num_workers: int | None = None) -> dict:
        """A resume point for a plain DataLoader: this rank took ``batches_consumed`` items
        from the loader in the current epoch. ``num_workers``: the loader's (default: the
        number the last iteration over this dataset used). Pass it to
        :meth:`load_state_dict` later, on any rank of a world of any size."""
        if isinstance(batches_consumed, bool) or not isinstance(batches_consumed, (
                int, np.integer)) or not 0 <= batches_consumed <= len(self):
            raise ValueError(f"batches_consumed must be an int in 0..len(dataset) = "
                             f"0..{len(self)}, got {batches_consumed!r}")
        if num_workers is None:
            num_workers = int(self._shared[_WORKERS])
            if num_workers == 0 and batches_consumed > 0:
                raise ValueError("checkpoint(batches_consumed, num_workers): this dataset was "
                                 "never iterated, so pass the loader's num_workers")
        elif isinstance(num_workers, bool) or not isinstance(num_workers, (
                int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers must be None or an int ≥ 0, got {num_workers!r}")
        num_workers = max(int(num_workers), 1)
        history = self._history(self.epoch)
        if self._in_place(self.epoch, num_workers):  # the loader read on from the last one
            batches_consumed += history.pop()[2]
        history.append([self.world_size, num_workers, int(batches_consumed)])
        return {"version": STATE_VERSION, "config": self._config(), "epoch": self.epoch,
                "history": history}

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`checkpoint` (any rank, any world size) or a worker's
        :meth:`state_dict` (same rank and world size), made by a dataset built with the
        same source, seed, policy, batch_size and block_size.

        A state applies to its own epoch and never moves the epoch you set. With another
        epoch set, a state saved after its epoch's last batch is ignored (the set epoch
        starts afresh), and one that stops inside its epoch is refused; ``set_epoch`` to
        another epoch after loading forgets the state. With no epoch set, the state's
        epoch becomes the dataset's."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("state was not made by ShardedIterableDataset.state_dict() "
                             f"or .checkpoint() (version {STATE_VERSION})")
        mine, theirs = self._config(), state.get("config", {})
        differ = [f"{k}: saved {theirs.get(k)!r}, now {v!r}" for k, v in mine.items()
                  if theirs.get(k) != v]
        if differ:
            raise ValueError("state comes from a different configuration: " + "; ".join(differ))
        worker_state = "worker_id" in state
        if worker_state and (state.get("rank"), state.get("world_size")) != (
                self.rank, self.world_size):
            raise ValueError(
                f"a StatefulDataLoader state resumes only the same rank of the same world: "
                f"saved by rank {state.get('rank')} of {state.get('world_size')}, loaded by "
                f"rank {self.rank} of {self.world_size}; to resume on another world size, "
                f"save ds.checkpoint(batches_consumed) instead")
        epoch = int(state["epoch"])
        if int(self._shared[_EPOCH_SET]) and int(self._shared[_EPOCH]) != epoch:
            finished = state["finished"] if worker_state else _checkpoint_finished(state, self)
            if not finished:
                raise ValueError(
                    f"this state stops inside epoch {epoch}, but epoch {self.epoch} is set: "
                    f"loading it would skip the rest of epoch {epoch} without a trace. Set "
                    f"epoch {epoch} to finish it, or start epoch {self.epoch} without the state")
            if worker_state and get_worker_info() is not None:
                # A StatefulDataLoader goes on asking the worker after the one that gave the
                # last batch: that worker reads the first run of the new epoch.
                self._rotation = (state["rank_items"] + state["worker_id"] - state["run"]) % \
                    state["num_workers"]
            return
        if get_worker_info() is None:
            self._shared[_EPOCH], self._shared[_EPOCH_SET] = epoch, 1
        else:  # a worker never moves the epoch that every process shares
            self._adopted_epoch = epoch
        history = [list(map(int, h)) for h in state.get("history", [])]
        self._segments = {"epoch": epoch, "history": history} if history else None
        self._pending = None
        if worker_state and state.get("worker_id") is not None:
            self._pending = {k: state.get(k) for k in ("epoch", "worker_id", "num_workers",
                                                       "run", "yielded", "rng_state")}

    # -- internals -------------------------------------------------------------------

    def _init(self, sources, lengths, load, *, block_size, batch_size, shuffle, seed, policy,
              transform, rank, world_size, collate_fn) -> None:
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
                batch_size, (int, np.integer)) or batch_size < 1):
            raise ValueError(f"batch_size must be None or an int ≥ 1, got {batch_size!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an int ≥ 0, got {seed!r}")
        self.rank, self.world_size = resolve_rank_and_world(rank, world_size)
        self._sources, self._load = sources, load   # shard i is load(sources[i]), or sources[i]
        self.block_size = block_size
        self.batch_size = None if batch_size is None else int(batch_size)
        self._unit = self.batch_size or 1
        self.shuffle, self.seed, self.policy = bool(shuffle), int(seed), policy
        self.transform, self.collate_fn = transform, collate_fn
        self._lengths = lengths
        self._offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self._n = int(self._offsets[-1])
        # Shared memory: persistent workers see set_epoch() made after they started, and
        # the main process sees how many workers the last iteration had.
        self._shared = torch.zeros(3, dtype=torch.int64).share_memory_()
        self._adopted_epoch = 0      # a worker's epoch, from a loaded state, when none is set
        self._progress: dict | None = None
        self._pending: dict | None = None    # a worker's saved position, for its epoch
        self._rotation = 0                   # the worker that reads run 0 (see load_state_dict)
        self._segments: dict | None = None   # the epoch's checkpoint resumes, in order
        self._orders: dict = {}              # epoch -> _EpochOrder (this process)
        self._cache: dict = {}               # shard index -> loaded samples
        self._block_of_shard = np.zeros(len(sources), dtype=np.int64)
        self._out_of_order = False

    def _config(self) -> dict:
        return {"lengths": self._lengths.tolist(), "seed": self.seed,
                "shuffle": self.shuffle, "policy": self.policy,
                "batch_size": self.batch_size, "block_size": self.block_size}

    def _order(self, epoch: int) -> _EpochOrder:
        if epoch not in self._orders:
            if len(self._orders) > 2:
                self._orders.clear()
            self._orders[epoch] = _EpochOrder(self._lengths, self._offsets, self.block_size,
                                              self.shuffle, self.seed, epoch)
        return self._orders[epoch]

    def _ids(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        return self._order(epoch).ids(np.asarray(positions, dtype=np.int64))[0]

    def _history(self, epoch: int) -> list:
        if self._segments is not None and self._segments["epoch"] == epoch:
            return [list(h) for h in self._segments["history"]]
        return []

    def _sequence(self, epoch: int, history: list | None = None) -> _Sequence:
        """The positions the ranks split this epoch: all of them, or after checkpoint
        resumes, the ones the old worlds had not read, in order."""
        seq = _Sequence.whole(self._n)
        for world, num_workers, consumed in self._history(epoch) if history is None else history:
            seq = seq.unread(world, num_workers, consumed, self._unit, self.policy)
        return seq

    def _in_place(self, epoch: int, num_workers: int) -> bool:
        """Whether the epoch's last checkpoint was saved by a loader like this one (same
        world size, same workers): then each worker resumes its own run where the loader
        stopped, and the rest comes in the order it would have come."""
        history = self._history(epoch)
        return bool(history) and history[-1][:2] == [self.world_size, max(num_workers, 1)]

    def _resume_point(self, epoch: int, worker: int, num_workers: int):
        """(run, items of it already read, saved augmentation generator state) from a
        loaded worker state; None without one."""
        pending = self._pending
        if pending is None or pending["epoch"] != epoch:
            return None
        self._pending = None
        if pending["num_workers"] != num_workers or pending["worker_id"] != worker:
            raise ValueError(
                f"state comes from a different configuration: saved by worker "
                f"{pending['worker_id']} of {pending['num_workers']}, loaded by worker "
                f"{worker} of {num_workers}")
        return int(pending["run"]), int(pending["yielded"]), pending.get("rng_state")

    def _iter_worker(self, worker: int, num_workers: int):
        """The items worker ``worker`` of ``num_workers`` yields on this rank (a function of
        the configuration, the epoch and a loaded resume point only)."""
        epoch = self.epoch
        history, run, start, rng_state = self._history(epoch), worker, 0, None
        if self._in_place(epoch, num_workers):
            # A new loader starts at worker 0: worker w reads the run that came next after
            # `consumed` items, (w + consumed) % num_workers, from where that run stopped.
            history, consumed = history[:-1], history[-1][2]
            run = (worker + consumed) % num_workers
            start = max(0, _ceil_div(consumed - run, num_workers))
        saved = self._resume_point(epoch, worker, num_workers)
        if saved is not None:
            run, start, rng_state = saved
        elif self._rotation:
            run = (worker - self._rotation) % num_workers
        self._rotation = 0
        seq = self._sequence(epoch, history)
        per = _per_rank(seq.length, self.world_size, self.policy)
        rank_items = _ceil_div(per, self._unit)
        counts, firsts = _worker_runs(rank_items, num_workers)
        count = int(counts[run])
        start = min(count, start)
        rng = None
        if self.transform is not None:
            rng = torch.Generator().manual_seed(_mix_seed(self.seed, epoch, self.rank, run, 1))
            if rng_state is not None:
                rng.set_state(rng_state)
        # Set now, not at the first next(): a state taken in between must describe this epoch.
        self._progress = {"epoch": epoch, "worker_id": worker, "num_workers": num_workers,
                          "run": run, "yielded": start, "run_items": count,
                          "rank_items": rank_items, "rng": rng}
        self._cache.clear()
        self._block_of_shard = self._order(epoch).block_of_shard
        return self._items(epoch, seq, per, int(firsts[run]), count, start, rng,
                           self._progress)

    def _items(self, epoch, seq, per, first, count, skip, rng, progress):
        unit, offset = self._unit, self.rank * per
        order = self._order(epoch)
        chunk = max(1, _CHUNK // unit)   # items whose ids are computed together
        held = set()                     # the blocks whose loaded shards are kept
        for head in range(first + skip, first + count, chunk):
            tail = min(head + chunk, first + count)
            local = np.arange(head * unit, min(tail * unit, per), dtype=np.int64)
            ids, shards, blocks = order.ids(seq.base((offset + local) % seq.length))
            for at in range(0, len(ids), unit):
                cut = slice(at, at + unit)
                needed = set(np.unique(blocks[cut]).tolist())
                if self._load is not None and needed != held:
                    self._evict(needed)
                    held = needed
                out = self._fetch(ids[cut], shards[cut]) if self.batch_size \
                    else self._fetch_one(int(ids[at]), int(shards[at]))
                if rng is not None:
                    out = self.transform(out, rng)
                progress["yielded"] += 1
                yield out

    def _fetch(self, ids: np.ndarray, shards: np.ndarray):
        if len(self._sources) == 1:  # a flat source: one vectorised read
            if self._sources[0] is None:
                return torch.from_numpy(ids.copy())
            return self._take(0, ids)
        local = ids - self._offsets[shards]
        if (shards == shards[0]).all():
            return self._take(int(shards[0]), local)
        by_shard = np.argsort(shards, kind="stable")          # one read per shard
        groups = np.split(by_shard, np.flatnonzero(np.diff(shards[by_shard])) + 1)
        parts = [self._take(int(shards[g[0]]), local[g]) for g in groups]
        if all(isinstance(p, torch.Tensor) for p in parts):
            back = np.empty_like(by_shard)
            back[by_shard] = np.arange(len(by_shard))
            return torch.cat(parts)[torch.from_numpy(back)]
        return self.collate_fn([self._shard_data(int(s))[int(i)]
                                for s, i in zip(shards, local, strict=True)])

    def _take(self, s: int, local: np.ndarray):
        data = self._shard_data(s)
        if isinstance(data, torch.Tensor):
            return data[torch.from_numpy(local)]
        if isinstance(data, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(data[local]))
        if isinstance(data, range):
            return torch.from_numpy(data.start + local * data.step)
        return self.collate_fn([data[int(i)] for i in local])

    def _fetch_one(self, gid: int, s: int):
        data = self._shard_data(s)
        return gid if data is None else data[gid - int(self._offsets[s])]

    def _evict(self, blocks: set) -> None:
        """Drop the loaded shards of blocks the worker has left: it holds about one block."""
        for s in [s for s in self._cache if int(self._block_of_shard[s]) not in blocks]:
            del self._cache[s]

    def _shard_data(self, s: int):
        """Shard ``s``'s samples; a loaded one is kept while the worker reads its block."""
        if self._load is None:
            return self._sources[s]
        if s not in self._cache:
            data, declared = self._load(self._sources[s]), int(self._lengths[s])
            if len(data) != declared:
                raise ValueError(
                    f"shard {s} ({_describe(self._sources[s])}) holds {len(data)} samples but "
                    f"lengths[{s}] = {declared}: "
                    + ("its last samples would never be read" if len(data) > declared
                       else "the missing samples cannot be read")
                    + "; pass the true lengths (or none, to count them)")
            self._cache[s] = data
        return self._cache[s]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cache"], state["_orders"] = {}, {}
        # Pickled for a spawned or forkserver worker by DataLoader(in_order=False)?
        state["_out_of_order"] = self._out_of_order or _loader_out_of_order(self)
        return state


class KeyedPermutation:
    """A bijection of ``0..n-1`` chosen by ``key`` (ints): a balanced Feistel network on
    the smallest even number of bits that holds ``n``, walked back into range (a value
    ≥ n is permuted again until it falls below n; fewer than 4 steps on average).
    O(1) memory and time per position, whatever ``n``."""

    def __init__(self, n: int, key: Sequence[int], rounds: int = FEISTEL_ROUNDS) -> None:
        self.n = int(n)
        self._half = max(1, ((self.n - 1).bit_length() + 1) // 2)
        self._mask = np.uint64((1 << self._half) - 1)
        self._keys = np.random.SeedSequence([int(k) for k in key]).generate_state(
            rounds, np.uint64)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        x = np.asarray(positions, dtype=np.int64)
        if self.n <= 1 or not x.size:
            return x.copy()
        y = self._forward(x.astype(np.uint64))
        outside = np.flatnonzero(y >= self.n)
        while outside.size:
            y[outside] = self._forward(y[outside])
            outside = outside[y[outside] >= self.n]
        return y.astype(np.int64)

    def _forward(self, x: np.ndarray) -> np.ndarray:
        half = np.uint64(self._half)
        left, right = x >> half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ (_mix64(right ^ key) & self._mask)
        return (left << half) | right


class _EpochOrder:
    """One epoch's order: position -> (sample id, shard, block), computed on demand.

    The shards are put in a shuffled order and laid end to end; block ``b`` holds the
    shards whose start falls in ``[b * block_size, (b + 1) * block_size)``; the positions of
    each block are permuted by their own :class:`KeyedPermutation`.
    """

    def __init__(self, lengths, offsets, block_size, shuffle, seed, epoch) -> None:
        count = len(lengths)
        if shuffle and count > 1:
            self.shard_order = KeyedPermutation(count, (seed, epoch, 0))(np.arange(count))
        else:
            self.shard_order = np.arange(count, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(lengths[self.shard_order])]).astype(
            np.int64)
        if not shuffle:            # storage order; each shard is a block of its own
            window = self.starts[:-1]
        elif block_size is None:   # one block: a uniform shuffle
            window = np.zeros(count, dtype=np.int64)
        else:
            window = self.starts[:-1] // block_size
        opens = np.r_[True, window[1:] != window[:-1]][:count]
        self.block_starts = np.r_[self.starts[:-1][opens], self.starts[-1]].astype(np.int64)
        self.block_of_shard = np.empty(count, dtype=np.int64)
        self.block_of_shard[self.shard_order] = np.cumsum(opens) - 1
        self._offsets = offsets
        self._shuffle, self._seed, self._epoch = shuffle, seed, epoch
        self._perms: dict = {}

    def ids(self, positions: np.ndarray):
        """(sample ids, their shards, their blocks) at ``positions`` of the order."""
        block = np.searchsorted(self.block_starts, positions, side="right") - 1
        canonical = positions.copy()
        if self._shuffle:
            for b in np.unique(block):
                where = block == b
                start = self.block_starts[b]
                canonical[where] = start + self._perm(int(b))(positions[where] - start)
        slot = np.searchsorted(self.starts, canonical, side="right") - 1
        shard = self.shard_order[slot]
        return self._offsets[shard] + canonical - self.starts[slot], shard, block

    def _perm(self, b: int) -> KeyedPermutation:
        if b not in self._perms:
            if len(self._perms) > 4:
                self._perms.clear()
            size = int(self.block_starts[b + 1] - self.block_starts[b])
            self._perms[b] = KeyedPermutation(size, (self._seed, self._epoch, 1, b))
        return self._perms[b]


class _Sequence:
    """Positions of an epoch's order read one after another: a list of intervals."""

    def __init__(self, starts: np.ndarray, lengths: np.ndarray) -> None:
        keep = lengths > 0
        self.starts, self.lengths = starts[keep], lengths[keep]
        self.cum = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.length = int(self.cum[-1])

    @classmethod
    def whole(cls, n: int) -> _Sequence:
        return cls(np.array([0], dtype=np.int64), np.array([n], dtype=np.int64))

    def base(self, v: np.ndarray) -> np.ndarray:
        """Positions of the order at places ``v`` (0 ≤ v < length) of this sequence."""
        if len(self.starts) == 1:
            return self.starts[0] + v
        i = np.searchsorted(self.cum, v, side="right") - 1
        return self.starts[i] + (v - self.cum[i])

    def piece(self, a: int, b: int) -> list[tuple[int, int]]:
        """Places ``a..b-1`` (wrapping past the end, as "pad" does) as order intervals."""
        out = []
        while a < b:
            lo, top = a % self.length, min(b - a, self.length - a % self.length)
            i = int(np.searchsorted(self.cum, lo, side="right") - 1)
            while top > 0:
                take = min(top, int(self.cum[i + 1]) - lo)
                out.append((int(self.starts[i] + lo - self.cum[i]), take))
                a, lo, top, i = a + take, lo + take, top - take, i + 1
        return out

    def unread(self, world: int, num_workers: int, consumed: int, unit: int,
               policy: str) -> _Sequence:
        """What a world of ``world`` ranks with ``num_workers`` workers each had not read
        after every rank took ``consumed`` items: each worker's rest, in (rank, worker)
        order, then the positions "drop" left out."""
        per = _per_rank(self.length, world, policy)
        counts, firsts = _worker_runs(_ceil_div(per, unit), num_workers)
        pieces = []
        for r in range(world):
            for w in range(num_workers):
                done = min(int(counts[w]), max(0, _ceil_div(consumed - w, num_workers)))
                a = r * per + (int(firsts[w]) + done) * unit
                b = r * per + min((int(firsts[w]) + int(counts[w])) * unit, per)
                pieces += self.piece(a, b)
        pieces += self.piece(world * per, self.length)
        if not pieces:
            return _Sequence(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        starts, lengths = (np.array(x, dtype=np.int64) for x in zip(*pieces, strict=True))
        return _Sequence(starts, lengths)


def resolve_rank_and_world(rank: int | None = None,
                           world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): explicit arguments, else torch.distributed when initialised,
    else the RANK / WORLD_SIZE environment variables, else (0, 1). Raises when the
    environment names a world of several ranks but not this process's rank."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    if rank is None:
        dist = torch.distributed
        env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif env_rank is not None and env_world is not None:
            rank, world_size = int(env_rank), int(env_world)
        elif env_world is not None and int(env_world) > 1 or env_rank not in (None, "0"):
            raise ValueError(
                f"the environment says WORLD_SIZE={env_world}, RANK={env_rank}, and "
                f"torch.distributed is not initialised: this rank cannot be known, and every "
                f"process would read as rank 0 of 1. Call init_process_group() before "
                f"building the dataset, or pass rank= and world_size=")
        else:
            rank, world_size = 0, 1
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be ≥ 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..world_size-1 = 0..{world_size - 1}, got {rank}")
    return int(rank), int(world_size)


_EPOCH, _EPOCH_SET, _WORKERS = 0, 1, 2   # slots of the shared-memory tensor
_CHUNK = 4096                            # sample ids computed at once, at most


def _per_rank(n: int, world: int, policy: str) -> int:
    return n // world if policy == "drop" else _ceil_div(n, world)


def _worker_runs(items: int, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """(items per worker, first item of each): contiguous runs, the first ones longer by
    one, so that taking one item from each worker in turn reads items in a fixed order."""
    num_workers = max(num_workers, 1)
    counts = np.full(num_workers, items // num_workers, dtype=np.int64)
    counts[:items % num_workers] += 1
    return counts, np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _checkpoint_finished(state: dict, dataset: ShardedIterableDataset) -> bool:
    """Whether a checkpoint() state was taken after its world's last item."""
    history = state.get("history") or [[dataset.world_size, 1, 0]]
    world, _, consumed = history[-1]
    seq = _Sequence.whole(dataset._n)
    for w, k, c in history[:-1]:
        seq = seq.unread(w, k, c, dataset._unit, dataset.policy)
    return consumed >= _ceil_div(_per_rank(seq.length, world, dataset.policy), dataset._unit)


def _loader_out_of_order(dataset) -> bool:
    """Whether a DataLoader iterator with ``in_order=False`` is starting workers for
    ``dataset``: found among the callers (the parent's frames survive in a forked
    worker; a spawned one's dataset is pickled inside them). DataLoader passes a worker
    nothing else that says so."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        try:
            if getattr(owner, "_in_order", True) is False and \
                    getattr(owner, "_dataset", None) is dataset:
                return True
        except Exception:   # an object whose attributes cannot be read: not a loader
            pass
        frame = frame.f_back
    return False


def _describe(source: Any) -> str:
    """A shard as a message shows it: a path as it is, anything else by its repr, with
    the end kept when long (a file name is at the end of its path)."""
    text = os.fspath(source) if isinstance(source, (str, os.PathLike)) else repr(source)
    return text if len(text) <= 80 else "..." + text[-77:]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: every output bit depends on every input bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _mix_seed(*values: int) -> int:
    """One 63-bit seed from several ints, so that nearby tuples give unrelated streams."""
    return int(np.random.SeedSequence([int(v) for v in values]).generate_state(1,
                                                                              np.uint64)[0]
               >> np.uint64(1))
