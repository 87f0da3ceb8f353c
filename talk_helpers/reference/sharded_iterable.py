"""A correct, resumable iterable dataset for DataLoader workers and DDP ranks.

The talk leaves it "as an exercise to the reader"; this is one solution::

    ds = ShardedIterableDataset(10_000, batch_size=32, seed=0)   # ids 0..9999
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    for epoch in range(3):
        ds.set_epoch(epoch)
        for batch in loader:
            ...

The DataLoader may batch instead, told with :meth:`~ShardedIterableDataset.attach`
(``ds = ShardedIterableDataset(10_000)``, ``loader = ds.attach(DataLoader(ds,
batch_size=32, num_workers=2))``): the same batches come out.

How an epoch is laid out: every process computes it from ``(seed, epoch)``, nothing is sent.

1. **Order.** A keyed bijection of the positions ``0..N-1`` (:class:`KeyedPermutation`, a
   Feistel network): any position's sample in O(1) time and memory, so ``N = 10**9`` starts
   as fast as ``N = 1000``. With :meth:`~ShardedIterableDataset.from_shards` the shard order
   is shuffled, the shards are grouped into blocks of about ``block_size`` samples and each
   block is shuffled alone (:class:`EpochOrder`).
2. **Ranks.** Rank ``r`` takes the r-th of ``world_size`` equal, contiguous parts of that
   order (:func:`rank_share`: policy ``"drop"`` leaves out its last ``N % world_size``
   positions, ``"pad"`` repeats its first ones).
3. **Workers.** The rank's part is cut into the loader's batches (``batch_size`` samples
   when the dataset batches, ``B`` items when ``DataLoader(batch_size=B)`` does) and the
   batches into ``num_workers`` contiguous runs whose lengths differ by at most one, the
   longer first (:func:`worker_runs`). A DataLoader takes one batch from each worker in
   turn, so the rank's k-th batch is batch ``k // num_workers`` of worker
   ``k % num_workers``. The workers come from ``get_worker_info()``; how the loader batches
   from ``ds.attach(loader)`` (:class:`LoaderShape`), or else it passes each item on.
4. **Resume.** A resume point lists, for the epoch, how many batches every rank had taken
   from which layout (world size, workers, loader batch). The positions nobody read are
   computed from it (:func:`unread`) and dealt again, by steps 2 and 3, to the new world.

What it guarantees, whatever the number of ranks (≥ 1), workers (≥ 0) and shard sizes:

* each sample is read exactly once per epoch across all ranks and workers, except the
  ``dropped`` ones (policy ``"drop"``, fewer than ``world_size``) or plus the ``padded``
  repeats (policy ``"pad"``, fewer than ``world_size``); every rank yields ``len(ds)``
  items, so DDP cannot hang on the data. ``DataLoader(drop_last=True)`` leaves out each
  rank's last partial batch as well (the dataset does not deal it);
* ``set_epoch`` reaches persistent workers too (shared memory), and every worker of a pass
  reads the epoch set before ``iter(loader)``: one set after it waits for the next
  iterator, with a warning. A second pass over a shuffled epoch that a pass already read
  to its end, with no ``set_epoch`` between them, warns once (raises with ``strict=True``,
  an error the loop sees): it would repeat the order and the augmentations;
* a worker reads a contiguous run of blocks: each shard is loaded once per rank and epoch,
  except the shards of the blocks that a boundary between two workers cuts (at most
  ``num_workers - 1`` blocks per rank), which both workers load. It holds at most two
  blocks; ``block_bytes`` bounds them on disk (``benchmarks/results/reference_scale.md``);
* a micro-batch mixes the shards of one block. That is the trade: a micro-batch comes from
  one worker, so it can mix every shard only if every worker reads every shard. With data
  smaller than one block per worker (the default block holds ``2**18`` samples), the
  workers share the block: every micro-batch mixes all shards and each worker loads them;
* ``transform(item, rng)`` gets a ``torch.Generator`` private to (rank, worker, epoch);
* resume is exact at every boundary, mid-epoch or after the last batch, with the dataset
  batching or the DataLoader batching:

  - ``torchdata.stateful_dataloader.StatefulDataLoader``: save and load the loader's
    ``state_dict()``; each worker's copy of the dataset stores its position (and rank). It
    resumes the same rank, world size, ``num_workers`` and loader ``batch_size`` only.
  - a plain ``DataLoader``: count the batches your loop took this epoch and save
    ``ds.checkpoint(batches_consumed, loader=loader)`` (it records the loader's workers,
    batch size, ``drop_last``; ``loader=`` may go after ``ds.attach(loader)``); on resume
    build the dataset the same way and call ``ds.load_state_dict(saved)`` before
    ``iter(loader)``. With the same loader the rest comes in the order it would have come;
    with another, each sample still once, dealt afresh.
  - elastic: when every rank took the same ``k`` batches, ``checkpoint(k)`` from any rank
    loads on any rank of a world of any size; the new world deals what nobody read yet.
  - a corpus that grows: a checkpoint taken on ``n`` shards loads onto shards whose first
    ``n`` keep their lengths, paths (or ranges) and ``fingerprints``; the resumed epoch
    reads what the saved epoch had not read, and the new shards join from the next epoch.

Where the rank comes from (:func:`resolve_rank_and_world`): the arguments, else the process
group when initialised (the launchers are checked against it), else the launcher that
started the process (``LAUNCHERS``: torchrun, Open MPI, MPICH or Intel MPI, PMIx, SLURM's
srun), the innermost first, else a world of one. Sources that cannot all be right are an
error that names them.

What it refuses, with an error that says why: ``DataLoader(in_order=False)`` with several
workers, at ``attach`` or ``checkpoint`` (an order that depends on timing); workers reading
samples for a loader never attached, and ``checkpoint`` for another loader than the one that
read the dataset (the batches could not be counted); a state that stops inside another epoch
than the one set, comes from another configuration or corpus (naming the shard), is a
``StatefulDataLoader`` worker's loaded by another rank, world size, worker count or batch
size, or is loaded while persistent workers run; a shard whose ``load`` returns another
length than ``lengths`` declares.

The module needs only torch and numpy, and of torch only its public API (tested on torch
2.13, the package's range): copy it into your project.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import IterableDataset, default_collate, get_worker_info

POLICIES = ("drop", "pad")
STATE_VERSION = 5   # 5: shards known by name and fingerprint, not only by length
DEFAULT_BLOCK_SIZE = 1 << 18    # samples shuffled together (mosaicml-streaming's floor)
FEISTEL_ROUNDS = 6
# (launcher, rank variable, world size variables), innermost first. PMIx has no size variable.
LAUNCHERS = (("torchrun", "RANK", ("WORLD_SIZE",)),
             ("Open MPI", "OMPI_COMM_WORLD_RANK", ("OMPI_COMM_WORLD_SIZE",)),
             ("MPICH or Intel MPI", "PMI_RANK", ("PMI_SIZE",)),
             ("PMIx", "PMIX_RANK", ("OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")),
             ("SLURM", "SLURM_PROCID", ("SLURM_NTASKS",)))
_MARKED_WORKERS = 64   # workers whose passes are marked in shared memory (_Shared)
_CHUNK = 4096   # sample ids computed at once, at most


class ShardedIterableDataset(IterableDataset):
    """Shuffle-before-shard iterable dataset with equal batches per rank and exact resume.

    ``source`` is an int ``N`` (the samples are the ids ``0..N-1``) or a sized, indexable
    sequence (a numpy array or tensor is indexed with whole batches at once). Use
    :meth:`from_shards` for a list of shards (files, index ranges) of uneven sizes.
    ``batch_size``: the dataset yields micro-batches of that many samples (``None``:
    samples, for a DataLoader that batches). ``strict=True`` raises where it would warn.
    """

    def __init__(self, source: int | Sequence, *, batch_size: int | None = None,
                 shuffle: bool = True, seed: int = 0, policy: str = "drop",
                 transform: Callable[[Any, torch.Generator], Any] | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 collate_fn: Callable[[list], Any] = default_collate,
                 strict: bool = False) -> None:
        _check_int("batch_size", batch_size, low=1, allow_none=True)
        _check_int("seed", seed, low=0)
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.rank, self.world_size = resolve_rank_and_world(rank, world_size)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle, self.seed, self.policy = bool(shuffle), int(seed), policy
        self.transform, self.collate_fn, self.strict = transform, collate_fn, bool(strict)
        self.block_size, self.block_bytes = None, None   # from_shards sets them
        self._shards = _Shards.of_source(source)
        self._shared = _Shared()   # seen by every copy: persistent workers too
        self._passes, self._local_epoch, self._loads = 0, None, 0   # this copy's own
        self._resume: ResumeState | None = None   # a loaded state, for its epoch only
        self._adopted_epoch = 0              # a worker's epoch from a state, when none is set
        self._rotation = 0                   # the worker that reads run 0 (load_state_dict)
        self._progress: ResumeState | None = None   # where this process's iteration stands
        self._rng: torch.Generator | None = None     # its augmentation generator
        self._loader: LoaderShape | None = None   # attach()'s, pickled with the dataset
        self._orders: dict = {}

    @classmethod
    def from_shards(cls, shards: Sequence, *, lengths: Sequence[int] | None = None,
                    load: Callable[[Any], Sequence] | None = None,
                    block_size: int | None = DEFAULT_BLOCK_SIZE,
                    block_bytes: int | None = None, fingerprints: Sequence[str] | None = None,
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
        (a uniform shuffle of everything). ``block_bytes``: blocks by the shard files'
        sizes on disk instead; a worker holds at most two blocks, each under ``block_bytes``
        plus one shard. A state knows a shard by its length, its path (or range) and its
        ``fingerprints`` entry (e.g. a checksum). The other arguments are the constructor's.
        """
        shards = list(shards)
        counts = _shard_lengths(shards, lengths, load)
        if fingerprints is not None and len(fingerprints) != len(shards):
            raise ValueError(f"fingerprints must hold one string per shard ({len(shards)}), "
                             f"got {len(fingerprints)}")
        _check_int("block_size", block_size, low=1, allow_none=True,
                   meaning="None (one block) or an int ≥ 1 (samples shuffled together)")
        _check_int("block_bytes", block_bytes, low=1, allow_none=True)
        if block_bytes and not all(isinstance(s, (str, os.PathLike)) for s in shards):
            raise ValueError("block_bytes needs shards that are file paths (their sizes on "
                             "disk make the blocks); pass block_size= (samples) instead")
        self = cls(0, **kwargs)
        self._shards = _Shards(shards, counts, load, fingerprints=fingerprints)
        self.block_size = None if block_size is None else int(block_size)
        self.block_bytes = None if block_bytes is None else int(block_bytes)
        return self

    # -- what a training loop uses -------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (its order); reaches already running persistent workers.
        A resume point loaded for another epoch is forgotten (see :meth:`load_state_dict`)."""
        _check_int("epoch", epoch, low=0)
        epoch = int(epoch)
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None
        if epoch != self.epoch:
            self._shared.read_to_end.zero_()
        self._shared.epoch, self._shared.epoch_set = epoch, 1
        self._local_epoch = epoch

    @property
    def epoch(self) -> int:
        if self._shared.epoch_set:
            return self._shared.epoch
        return self._adopted_epoch

    def __len__(self) -> int:
        """Items (micro-batches, or samples without ``batch_size``) this rank yields per
        epoch; a DataLoader that batches ``B`` of them yields ``ceil(len / B)`` batches."""
        return _ceil_div(self.samples_per_rank, self._item_size)

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (0, 0) if info is None else (info.id, info.num_workers)
        again = self._passes > 0    # a persistent worker's second pass, or later
        try:
            shape = self._loader_shape(num_workers)
            epoch = self.epoch if info is None else self._pass_epoch(info)
            self._notice_a_repeated_epoch(worker, epoch)
            return self._worker_items(worker, shape, epoch)
        except Exception as exc:
            if not again:
                raise
            # Raised here, a persistent worker would die ("worker exited unexpectedly"):
            # raised by the first next(), it reaches the loop.
            return iter(lambda error=exc: (_ for _ in ()).throw(error), None)

    def _pass_epoch(self, info: Any) -> int:
        """The epoch of a worker's pass, one for all its workers: a new copy holds the one
        set before ``iter(loader)``; a persistent worker agrees with its fellows (a later
        ``set_epoch`` waits, with a warning). A state loaded since the copy is refused."""
        if self._shared.loads != self._loads:
            raise RuntimeError(
                "load_state_dict() came after this DataLoader's persistent workers started: "
                "they hold the dataset as it was and would read the epoch again. Load the "
                "state before the loader's first iter(), or build a new DataLoader after it")
        now, first, self._passes = self.epoch, not self._passes, self._passes + 1
        epoch = self._local_epoch if first and self._local_epoch is not None else now
        if info.id < _MARKED_WORKERS:
            mark = [(info.seed - info.id) % (1 << 62), self._passes]
            self._shared.passes[info.id] = torch.tensor([*mark, epoch])
            fellows = self._shared.passes[:min(info.num_workers, _MARKED_WORKERS)]
            others = set(fellows[(fellows[:, :2] == torch.tensor(mark)).all(1), 2].tolist())
            others = others - {epoch} if not first else set()   # a new copy holds its own
            if others and (epoch != now or len(others) > 1):
                raise RuntimeError(f"set_epoch({now}) came after iter(loader): the workers "
                                   f"would mix epochs. Call set_epoch before iter(loader)")
            if others:
                epoch = others.pop()
                self._shared.passes[info.id, 2] = epoch
        if epoch != now:
            warnings.warn(f"set_epoch({now}) came after iter(loader): this iterator reads "
                          f"epoch {epoch}, the next one epoch {now}", RuntimeWarning,
                          stacklevel=2)
        return epoch

    # -- what it promises, as numbers ----------------------------------------------

    @property
    def num_samples(self) -> int:
        """Samples in the source (all shards)."""
        return self._shards.total

    @property
    def samples_per_rank(self) -> int:
        """Samples every rank reads this epoch (the same on every rank; after a
        checkpoint resume, what is left of the epoch)."""
        return rank_share(self._remaining(self.epoch).length, self.world_size, self.policy)

    @property
    def dropped(self) -> int:
        """Samples of the epoch that no rank reads (policy 'drop'; < world_size)."""
        return max(0, self._remaining(self.epoch).length - self.world_size * self.samples_per_rank)

    @property
    def padded(self) -> int:
        """Samples of the epoch read twice to even out the ranks (policy 'pad'; < world_size)."""
        return max(0, self.world_size * self.samples_per_rank - self._remaining(self.epoch).length)

    def dropped_ids(self, epoch: int | None = None) -> np.ndarray:
        """The ids no rank reads in ``epoch`` (policy 'drop'): the end of its order."""
        epoch = self.epoch if epoch is None else epoch
        left = self._remaining(epoch)
        kept = self.world_size * rank_share(left.length, self.world_size, self.policy)
        return self._ids(epoch, left.at(np.arange(min(kept, left.length), left.length)))

    def padded_ids(self, epoch: int | None = None) -> np.ndarray:
        """The ids read twice in ``epoch`` (policy 'pad'): the start of its order."""
        epoch = self.epoch if epoch is None else epoch
        left = self._remaining(epoch)
        extra = self.world_size * rank_share(left.length, self.world_size, self.policy) \
            - left.length
        return self._ids(epoch, left.at(np.arange(max(extra, 0)) % max(left.length, 1)))

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The epoch's order of all sample ids, identical in every process (built in
        memory: for inspection; iterating never builds it)."""
        epoch = self.epoch if epoch is None else epoch
        return self._ids(epoch, np.arange(self._corpus(epoch).total, dtype=np.int64))

    # -- resume ----------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where this process's iteration stands (a worker's copy, or the main process):
        what a ``StatefulDataLoader`` saves for each worker."""
        progress = self._progress or ResumeState({}, self.epoch, [], worker=True)
        return dataclasses.replace(
            progress, config=self._config(progress.epoch), rank=self.rank,
            world_size=self.world_size,
            rng_state=None if self._rng is None else self._rng.get_state()).to_dict()

    def checkpoint(self, batches_consumed: int, num_workers: int | None = None, *,
                   loader: Any = None) -> dict:
        """A resume point for a plain DataLoader: this rank took ``batches_consumed``
        batches from the loader in the current epoch. The loader: ``loader=``, or
        ``num_workers=`` for one that passes each item on, or the one :meth:`attach` told;
        laid out as the one that last read this dataset. Pass the result to
        :meth:`load_state_dict` later, on any rank of a world of any size."""
        shape = self._checkpoint_loader(batches_consumed, num_workers, loader)
        batching = self._batching(shape)
        limit = batching.batches(self.samples_per_rank)
        _check_int("batches_consumed", batches_consumed, low=0, high=limit,
                   meaning=f"an int in 0..{limit} (the batches this loader yields this epoch)")
        steps = self._steps(self.epoch)
        if steps and _same_layout(steps[-1], self.world_size, batching):
            batches_consumed += steps.pop().batches   # the loader read on from there
        steps.append(Step(self.world_size, batching.workers, shape.batch_size if
                          batching.items_per_batch > 1 else None, batching.drop_last,
                          int(batches_consumed)))
        return ResumeState(self._config(self.epoch), self.epoch, steps).to_dict()

    def attach(self, loader: Any) -> Any:
        """Tell the dataset the ``DataLoader`` (or ``StatefulDataLoader``) that reads it, by
        its public ``num_workers``, ``batch_size``, ``drop_last`` and ``in_order``; returns
        ``loader``. Call it before ``iter(loader)``: the workers get it with the pickled
        dataset (under fork, forkserver and spawn) and deal whole loader batches, which
        :meth:`checkpoint` then counts without ``loader=``. Without it, workers reading
        samples (no ``batch_size``) and a checkpoint of a loader that batches are refused."""
        self._loader = _check_in_order(LoaderShape.of(loader))
        return loader

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`checkpoint` (any rank, any world size) or a worker's
        :meth:`state_dict` (same rank, world size, workers and loader batch size), made by
        a dataset built with the same shards (or more after them), seed, policy, batch_size
        and blocks. Load it before ``iter(loader)``: persistent workers refuse it later.

        A state applies to its own epoch and never moves the epoch you set. With another
        epoch set, a state saved after its epoch's last batch is ignored (the set epoch
        starts afresh), and one that stops inside its epoch is refused; ``set_epoch`` to
        another epoch after loading forgets the state. With no epoch set, the state's
        epoch becomes the dataset's."""
        saved = ResumeState.from_dict(state)
        self._check_state(saved)
        epoch = saved.epoch
        if self._shared.epoch_set and self.epoch != epoch:
            self._skip_finished_state(saved)
            return
        if get_worker_info() is None:
            self._shared.epoch, self._shared.epoch_set = epoch, 1
            self._shared.loads += 1
            self._local_epoch, self._loads = epoch, self._shared.loads
        else:   # a worker never moves the epoch that every process shares
            self._adopted_epoch = epoch
        self._resume = saved
        self._shared.read_to_end.zero_()

    # -- inside: the layout of one epoch ---------------------------------------------

    @property
    def _item_size(self) -> int:
        return self.batch_size or 1

    def _corpus(self, epoch: int) -> _Shards:
        """The shards ``epoch`` reads: all of them, or for a resumed epoch the ones its
        resume point was saved with (shards added since join from the next epoch)."""
        if self._resume is not None and self._resume.epoch == epoch:
            return self._shards.first(len(self._resume.config["lengths"]))
        return self._shards

    def _order(self, epoch: int) -> EpochOrder:
        shards = self._corpus(epoch)
        key = (len(shards.lengths), epoch)
        if key not in self._orders:
            if len(self._orders) > 2:
                self._orders.clear()
            shuffle_key = (self.seed, epoch) if self.shuffle else None
            sizes = np.array([os.path.getsize(s) for s in shards.sources]) \
                if self.block_bytes else shards.lengths   # what a block is counted in
            self._orders[key] = EpochOrder(shards.lengths, self.block_bytes or self.block_size,
                                           shuffle_key, sizes)
        return self._orders[key]

    def _ids(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        return self._order(epoch).ids(np.asarray(positions, dtype=np.int64))[0]

    def _steps(self, epoch: int) -> list[Step]:
        """The layouts the epoch went through before now, from a loaded resume point."""
        if self._resume is not None and self._resume.epoch == epoch:
            return list(self._resume.history)
        return []

    def _remaining(self, epoch: int, steps: list[Step] | None = None) -> Positions:
        """The positions of the epoch's order that the ranks split: all of them, or what
        the ``steps`` (default: the loaded resume point's) had not read, in order."""
        steps = self._steps(epoch) if steps is None else steps
        return remaining(self._corpus(epoch).total, steps, self._item_size, self.policy)

    def _batching(self, shape: LoaderShape) -> Batching:
        return Batching.of(self._item_size, shape.batch_size, shape.drop_last, shape.num_workers)

    # -- inside: one worker's items ----------------------------------------------------

    def _worker_items(self, worker: int, shape: LoaderShape, epoch: int | None = None):
        """The items worker ``worker`` yields on this rank in ``epoch`` (default: the set one):
        a function of the configuration, the epoch, the loader's shape and a resume point."""
        epoch = self.epoch if epoch is None else epoch
        run = self._worker_run(epoch, worker, shape)
        rng = None
        if self.transform is not None:
            seed = _mix_seed(self.seed, epoch, self.rank, run.index, 1)
            rng = torch.Generator().manual_seed(seed)
            if run.rng_state is not None:
                rng.set_state(run.rng_state)
        # Set now, not at the first next(): a state taken in between describes this epoch.
        self._progress = ResumeState(
            {}, epoch, run.history, worker=True, worker_id=worker, num_workers=shape.num_workers,
            run=run.index, yielded=run.start, run_items=run.count,
            rank_batches=run.rank_batches, loader_batch_size=shape.batch_size,
            drop_last=shape.drop_last)
        self._rng = rng
        return self._read_run(run, rng, worker)

    def _worker_run(self, epoch: int, worker: int, shape: LoaderShape) -> _Run:
        """Which run of the rank's batches ``worker`` reads, and from which item: run
        ``worker`` from its start; after a checkpoint of this very layout, the run that came
        next, where it stopped; after the worker's own saved state, where that stopped."""
        batching = self._batching(shape)
        saved = self._saved_worker_state(epoch, shape)
        steps = saved.history if saved else self._steps(epoch)
        last = steps[-1] if steps and not saved and \
            _same_layout(steps[-1], self.world_size, batching) else None
        steps = steps[:-1] if last else steps
        left = self._remaining(epoch, steps)
        layout = RankLayout.of(left.length, self.world_size, self.policy, batching)
        if saved:
            index, done = int(saved.run), int(saved.yielded)
        elif last:     # a new loader asks worker 0 first: it takes the run that came next
            index = (worker + last.batches) % batching.workers
            done = int(batches_taken(last.batches, layout.counts)[index]) \
                * batching.items_per_batch
        else:
            index, done = (worker - self._rotation) % batching.workers, 0
        self._rotation = 0
        first, stop = layout.run_places(self.rank, index)
        count = _ceil_div(stop - first, self._item_size)
        return _Run(epoch=epoch, history=steps, positions=left, index=index, first=first,
                    stop=stop, start=min(done, count), count=count,
                    rank_batches=layout.total_batches,
                    rng_state=saved.rng_state if saved else None)

    def _saved_worker_state(self, epoch: int, shape: LoaderShape) -> ResumeState | None:
        """The StatefulDataLoader state this worker loaded for ``epoch``, if any; refused
        when the loader batches otherwise than the one that saved it."""
        saved = self._resume
        if saved is None or saved.epoch != epoch or not saved.worker or saved.worker_id is None:
            return None
        if (saved.loader_batch_size, saved.drop_last) != (shape.batch_size, shape.drop_last):
            raise ValueError(
                f"a StatefulDataLoader state resumes only a loader that batches the same "
                f"way: saved with batch_size={saved.loader_batch_size}, drop_last="
                f"{saved.drop_last}; loaded with batch_size={shape.batch_size}, "
                f"drop_last={shape.drop_last}. Save ds.checkpoint(batches_consumed) to "
                f"change it")
        return saved

    def _read_run(self, run: _Run, rng: torch.Generator | None, worker: int):
        """Yield the items of ``run``, computing their ids a chunk at a time; a worker
        keeps the loaded shards of the blocks it is reading, and no others. At the end,
        ``worker`` marks the epoch as one it read to the end."""
        order, size = self._order(run.epoch), self._item_size
        chunk = max(1, _CHUNK // size)    # items whose ids are computed together
        for head in range(run.start, run.count, chunk):
            places = np.arange(run.first + head * size,
                               min(run.first + (head + chunk) * size, run.stop))
            ids, shards, blocks = order.ids(run.positions.at(places % run.positions.length))
            for at in range(0, len(ids), size):
                cut = slice(at, at + size)
                if self._shards.load is not None:
                    self._shards.keep_blocks(set(blocks[cut].tolist()), order.block_of_shard)
                item = self._read_item(ids[cut], shards[cut])
                self._progress.yielded += 1
                yield item if rng is None else self.transform(item, rng)
        if run.count > run.start and worker < _MARKED_WORKERS:
            self._shared.read_to_end[worker] = run.epoch + 1

    def _read_item(self, ids: np.ndarray, shards: np.ndarray):
        if self.batch_size is None:
            return self._shards.sample(int(ids[0]), int(shards[0]))
        return self._shards.batch(ids, shards, self.collate_fn)

    # -- inside: the loader, and the checks on it --------------------------------------

    def _loader_shape(self, num_workers: int) -> LoaderShape:
        """How the loader reading this copy takes its items: the one :meth:`attach` told,
        with the workers it has; untold, a loader that passes each item on. Recorded in
        shared memory, so that :meth:`checkpoint` can tell whether it counts that loader."""
        if self._loader is None and num_workers and self.batch_size is None:
            raise ValueError(
                "DataLoader workers read this dataset's samples, and the dataset was not told "
                "how the loader batches them, so checkpoint() could not count what was read: "
                "call ds.attach(loader) before iter(loader), or build "
                "ShardedIterableDataset(..., batch_size=B) and DataLoader(ds, batch_size=None)")
        shape = (self._loader or LoaderShape(0, None, False, True))._replace(
            num_workers=num_workers)
        self._shared.dealt = shape
        return shape

    def _checkpoint_loader(self, batches: int, num_workers: int | None,
                           loader: Any) -> LoaderShape:
        """The loader whose batches :meth:`checkpoint` counts: ``loader=``, a loader of
        ``num_workers=`` that passes each item on, or the attached one. Refused when it is
        not laid out like the loader whose workers last read this dataset."""
        if num_workers is not None:
            _check_int("num_workers", num_workers, low=0)
            loader = LoaderShape(int(num_workers), None, False, True)
        shape, dealt = LoaderShape.of(loader) if loader is not None else self._loader, \
            self._shared.dealt
        if shape is None and batches:
            raise ValueError("checkpoint(batches_consumed) must know the loader whose batches "
                             "it counts: call ds.attach(loader) before iter(loader), or pass "
                             "checkpoint(batches_consumed, loader=loader)")
        shape = shape or dealt or LoaderShape(0, None, False, True)
        _check_in_order(shape)
        if dealt is not None and self._batching(dealt) != self._batching(shape):
            raise ValueError(
                f"checkpoint() counts the batches of a loader with {_shape_words(shape)}, but "
                f"this dataset was last read for one with {_shape_words(dealt)}: pass the "
                f"loader that read it, and tell the dataset a loader that batches with "
                f"ds.attach(loader) before iter(loader)")
        return shape

    def _notice_a_repeated_epoch(self, worker: int, epoch: int) -> None:
        """Warn once (raise, ``strict=True``) when ``worker`` starts a pass over a shuffled
        epoch it already read to its end: the loop forgot ``set_epoch`` (unshuffled, it is
        likely an evaluation). Each worker asks only its own mark: on a busy machine, one
        may start after the others of the same pass read their runs."""
        if worker >= _MARKED_WORKERS or not self.shuffle \
                or int(self._shared.read_to_end[worker]) != epoch + 1:
            return
        message = (f"epoch {epoch} starts again on this dataset with the order and the "
                   f"augmentations of the pass before: call ds.set_epoch(epoch) before each "
                   f"epoch's loop (as DistributedSampler.set_epoch needs), or build a new "
                   f"dataset to read the same epoch twice on purpose")
        if self.strict:
            raise RuntimeError(message)
        if not self._shared.warned:
            self._shared.warned = 1
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    # -- inside: the checks on a state ---------------------------------------------------

    def _config(self, epoch: int) -> dict:
        shards = self._corpus(epoch)
        return {"lengths": shards.lengths.tolist(), "names": shards.names,
                "fingerprints": shards.fingerprints, "seed": self.seed, "shuffle": self.shuffle,
                "policy": self.policy, "batch_size": self.batch_size,
                "block_size": self.block_size, "block_bytes": self.block_bytes}

    def _check_state(self, state: ResumeState) -> None:
        """Refuse a state this dataset cannot resume, saying why."""
        saved, now = state.config, self._config(-1)
        differ = [f"{k}: saved {saved.get(k)!r}, now {v!r}" for k, v in now.items()
                  if k not in ("lengths", "names", "fingerprints") and saved.get(k) != v]
        if differ:
            raise ValueError("state comes from a different configuration: " + "; ".join(differ))
        self._shards.check_grown_from(saved)
        if state.worker:
            _check_worker_state(state, self.rank, self.world_size)

    def _skip_finished_state(self, state: ResumeState) -> None:
        """A state of another epoch than the one set: nothing to resume if it was saved
        after its epoch's last batch; refused if it stops inside its epoch."""
        epoch = state.epoch
        if state.worker:
            finished = state.finished
        else:
            *before, last = state.history
            left = remaining(int(sum(state.config["lengths"])), before, self._item_size,
                             self.policy)
            layout = RankLayout.of(left.length, last.world_size, self.policy,
                                   Batching.of_step(last, self._item_size))
            finished = last.batches >= layout.total_batches
        if not finished:
            raise ValueError(
                f"this state stops inside epoch {epoch}, but epoch {self.epoch} is set: "
                f"loading it would skip the rest of epoch {epoch} without a trace. Set "
                f"epoch {epoch} to finish it, or start epoch {self.epoch} without the state")
        if state.worker and get_worker_info() is not None:
            # A StatefulDataLoader goes on asking the worker after the one that gave the
            # last batch: that worker reads the first run of the new epoch.
            self._rotation = (state.rank_batches + state.worker_id - state.run) \
                % max(state.num_workers, 1)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_orders": {}}


def _slot(i: int) -> property:
    return property(lambda self: int(self.values[i]),
                    lambda self, value: self.values.__setitem__(i, int(value)))


class _Shared:
    """What every copy of one dataset sees, workers included (shared memory): the epoch set,
    the states loaded, whether it warned, the shape the last pass was dealt for; per worker
    the epoch + 1 it last read to its end, and its last pass (seed, pass, epoch)."""
    epoch, epoch_set, loads, warned = _slot(0), _slot(1), _slot(2), _slot(3)

    def __init__(self) -> None:
        self.values = torch.zeros(7, dtype=torch.int64).share_memory_()
        self.read_to_end = torch.zeros(_MARKED_WORKERS, dtype=torch.int64).share_memory_()
        self.passes = torch.zeros((_MARKED_WORKERS, 3), dtype=torch.int64).share_memory_()

    @property
    def dealt(self) -> LoaderShape | None:
        workers, batch, drop_last = self.values[4:].tolist()
        return LoaderShape(workers - 1, batch or None, bool(drop_last), True) if workers else None

    @dealt.setter
    def dealt(self, shape: LoaderShape) -> None:
        self.values[4:] = torch.tensor([shape.num_workers + 1, shape.batch_size or 0,
                                        int(shape.drop_last)])


# -- 1. The order --------------------------------------------------------------------------

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


class EpochOrder:
    """One epoch's order over shards of ``lengths`` samples: position → (sample id, shard,
    block), computed on demand.

    The shards are laid end to end, in an order shuffled by ``key`` (``None``: storage
    order, no shuffle); block ``b`` holds the shards whose start falls in
    ``[b * block_size, (b + 1) * block_size)``, counted in ``sizes`` (one per shard:
    samples, or bytes; ``block_size=None``: one block; no shuffle: one per shard); each block's
    positions are permuted by their own :class:`KeyedPermutation`. O(shards) memory.
    """

    def __init__(self, lengths: np.ndarray, block_size: int | None,
                 key: tuple[int, int] | None, sizes: np.ndarray) -> None:
        count = len(lengths)
        self.key = key
        self.offsets = _starts(lengths)              # each shard's first id (storage order)
        self.shard_order = np.arange(count, dtype=np.int64)
        if key is not None and count > 1:
            self.shard_order = KeyedPermutation(count, (*key, 0))(self.shard_order)
        self.starts = _starts(lengths[self.shard_order])   # each shard's first position
        if key is None:              # storage order; each shard is a block of its own
            window = self.starts[:-1]
        elif block_size is None:     # one block: a uniform shuffle
            window = np.zeros(count, dtype=np.int64)
        else:
            window = _starts(sizes[self.shard_order])[:-1] // block_size
        opens = np.r_[True, window[1:] != window[:-1]][:count]   # a shard opens a block
        self.block_starts = np.r_[self.starts[:-1][opens], self.starts[-1]].astype(np.int64)
        self.block_of_shard = np.empty(count, dtype=np.int64)
        self.block_of_shard[self.shard_order] = np.cumsum(opens) - 1
        self._perms: dict = {}

    def ids(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sample ids, their shards, their blocks) at ``positions`` of the order."""
        block = np.searchsorted(self.block_starts, positions, side="right") - 1
        unshuffled = positions.copy()    # the position each one takes its sample from
        if self.key is not None:
            for b in np.unique(block):
                where = block == b
                start = self.block_starts[b]
                unshuffled[where] = start + self._perm(int(b))(positions[where] - start)
        slot = np.searchsorted(self.starts, unshuffled, side="right") - 1
        shard = self.shard_order[slot]
        return self.offsets[shard] + unshuffled - self.starts[slot], shard, block

    def _perm(self, b: int) -> KeyedPermutation:
        if b not in self._perms:
            if len(self._perms) > 4:
                self._perms.clear()
            size = int(self.block_starts[b + 1] - self.block_starts[b])
            self._perms[b] = KeyedPermutation(size, (*self.key, 1, b))
        return self._perms[b]


# -- 2. The ranks' parts -----------------------------------------------------------------

def rank_share(samples: int, world_size: int, policy: str) -> int:
    """Samples each rank reads of ``samples``: equal parts. "drop" leaves out the last
    ``samples % world_size``, "pad" repeats the first ones to fill the last part."""
    return samples // world_size if policy == "drop" else _ceil_div(samples, world_size)


def resolve_rank_and_world(rank: int | None = None,
                           world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): the arguments when given; else the process group when it is
    initialised; else the launcher's variables (see ``LAUNCHERS``); else (0, 1).

    A launcher of as many processes as the group must give its rank; none may start more
    processes than the world holds (``srun -n 4`` around four worlds of one), fewer is fine
    (a task per node spawning a process per GPU). A world without a rank is refused."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    if rank is None:
        rank, world_size = _rank_and_world_of_this_job()
    _check_int("world_size", world_size, low=1)
    _check_int("rank", rank, low=0, high=int(world_size) - 1,
               meaning=f"an int in 0..world_size-1 = 0..{int(world_size) - 1}")
    return int(rank), int(world_size)


def _rank_and_world_of_this_job() -> tuple[int, int]:
    dist = torch.distributed
    sources = _launchers_of_this_process(incomplete_ok=dist.is_available()
                                         and dist.is_initialized())
    if dist.is_available() and dist.is_initialized():
        group = ("the process group", dist.get_rank(), dist.get_world_size())
        if sources and sources[0][2] == group[2] and sources[0][1] != group[1]:
            raise _disagreement(group, sources[0], "the group was initialised with "
                                "other ranks than the launcher's")
        sources.insert(0, group)
    if not sources:
        return 0, 1
    inner = sources[0]
    for outer in sources[1:]:
        if outer[2] > inner[2]:
            raise _disagreement(inner, outer, f"the {outer[2]} processes started by the "
                                f"outer one are not all in one world")
    return inner[1], inner[2]


def _launchers_of_this_process(incomplete_ok: bool) -> list[tuple[str, int, int]]:
    """(who, rank, world size) of each launcher whose variables are set, innermost first.
    A SLURM batch script (no ``SLURM_STEP_ID``; rank 0) is one process, not a world. A
    launcher that names a world but not the rank is refused, unless ``incomplete_ok``."""
    found = []
    for name, rank_var, world_vars in LAUNCHERS:
        world_var = next((v for v in world_vars if v in os.environ), world_vars[0])
        rank, world = os.environ.get(rank_var), os.environ.get(world_var)
        if name == "SLURM" and "SLURM_STEP_ID" not in os.environ and rank in (None, "0") \
                or name == "PMIx" and rank is None:
            continue
        if rank is None and world is None:
            continue
        who = f"{name} ({rank_var}={rank}, {world_var}={world})"
        if rank is None and world == "1" or world is None and rank == "0":
            found.append((who, 0, 1))
        elif rank is not None and world is not None:
            found.append((who, _env_int(rank_var, rank), _env_int(world_var, world)))
        elif not incomplete_ok:
            raise ValueError(
                f"the environment says {rank_var}={rank}, {world_var}={world}, and "
                f"torch.distributed is not initialised: this rank cannot be known, and every "
                f"process would read as rank 0 of 1. Call init_process_group() before "
                f"building the dataset, or pass rank= and world_size=")
    return found


def _disagreement(a: tuple, b: tuple, why: str) -> ValueError:
    return ValueError(f"{a[0]} says rank {a[1]} of {a[2]}, {b[0]} says rank {b[1]} of "
                      f"{b[2]}: {why}. Pass rank= and world_size= to say which is right")


# -- 3. The workers' runs ------------------------------------------------------------------

class LoaderShape(NamedTuple):
    """How a DataLoader takes a dataset's items: its workers, the items it batches
    together (``None``: it passes each item on), whether it drops a partial last batch,
    and whether it keeps the workers' turn (``in_order``)."""
    num_workers: int
    batch_size: int | None
    drop_last: bool
    in_order: bool

    @classmethod
    def of(cls, loader: Any) -> LoaderShape:
        return cls(int(loader.num_workers), loader.batch_size, bool(loader.drop_last),
                   bool(getattr(loader, "in_order", True)))


def _check_in_order(shape: LoaderShape) -> LoaderShape:
    if shape.num_workers > 1 and not shape.in_order:
        raise ValueError(
            "DataLoader(in_order=False) hands out batches in the order workers finish them: "
            "the order would depend on timing, and checkpoint() could not tell which "
            "batches were read. Use in_order=True (the default).")
    return shape


def _shape_words(shape: LoaderShape) -> str:
    return f"num_workers={shape.num_workers}, batch_size={shape.batch_size}, " \
        f"drop_last={shape.drop_last}"


class Batching(NamedTuple):
    """How one rank's samples become the loader's batches, dealt to its workers."""
    item_size: int          # samples per item the dataset yields (its batch_size, or 1)
    items_per_batch: int    # items per loader batch (DataLoader's batch_size, or 1)
    drop_last: bool         # the loader drops a partial last batch: it is not dealt
    workers: int            # runs to deal (num_workers, or 1 in the main process)

    @classmethod
    def of(cls, item_size: int, batch_size, drop_last: bool, num_workers: int) -> Batching:
        batch = batch_size or 1   # drop_last means nothing for batches of one item
        return cls(item_size, batch, drop_last and batch > 1, max(num_workers, 1))

    @classmethod
    def of_step(cls, step: Step, item_size: int) -> Batching:
        return cls.of(item_size, step.loader_batch_size, step.drop_last, step.num_workers)

    @property
    def samples(self) -> int:
        return self.item_size * self.items_per_batch

    def batches(self, samples: int) -> int:
        items = _ceil_div(samples, self.item_size)
        whole, partial = divmod(items, self.items_per_batch)
        return whole + (partial > 0 and not self.drop_last)


class RankLayout(NamedTuple):
    """A rank's share of the remaining positions, cut into batches and dealt to runs."""
    per_rank: int           # samples each rank reads
    total_batches: int      # batches each rank yields
    counts: np.ndarray      # batches in each worker's run
    firsts: np.ndarray      # the first batch of each run
    batching: Batching

    @classmethod
    def of(cls, samples: int, world_size: int, policy: str, batching: Batching) -> RankLayout:
        per = rank_share(samples, world_size, policy)
        total = batching.batches(per)
        return cls(per, total, *worker_runs(total, batching.workers), batching)

    def run_places(self, rank: int, run: int) -> tuple[int, int]:
        """The places of the remaining positions that ``run`` of ``rank`` reads."""
        size, base = self.batching.samples, rank * self.per_rank
        start = min(int(self.firsts[run]) * size, self.per_rank)
        stop = min((int(self.firsts[run]) + int(self.counts[run])) * size, self.per_rank)
        return base + start, base + stop


def worker_runs(batches: int, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """(batches per worker, first batch of each): contiguous runs, the first ones longer by
    one, so that taking one batch from each worker in turn reads them in a fixed order."""
    num_workers = max(num_workers, 1)
    counts = np.full(num_workers, batches // num_workers, dtype=np.int64)
    counts[:batches % num_workers] += 1
    return counts, np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def batches_taken(consumed: int, counts: np.ndarray) -> np.ndarray:
    """How many batches of each worker's run are among the first ``consumed`` that a
    loader yields, taking one from each worker in turn (longer runs first)."""
    workers = np.arange(len(counts))
    return np.minimum(counts, np.maximum(0, -(-(consumed - workers) // len(counts))))


# -- 4. The resume arithmetic --------------------------------------------------------------

class Positions:
    """Positions of an epoch's order still to be read, in reading order, as intervals
    ``(start, length)``; "places" number them ``0..length-1``."""

    def __init__(self, intervals: list[tuple[int, int]]) -> None:
        kept = [(int(s), int(n)) for s, n in intervals if n > 0]
        self.starts = np.array([s for s, _ in kept], dtype=np.int64)
        self.places = _starts(np.array([n for _, n in kept], dtype=np.int64))
        self.length = int(self.places[-1])

    def at(self, places: np.ndarray) -> np.ndarray:
        """The positions at ``places`` (each in ``0..length-1``)."""
        i = np.searchsorted(self.places, places, side="right") - 1
        return self.starts[i] + (places - self.places[i])

    def intervals(self, a: int, b: int) -> list[tuple[int, int]]:
        """Places ``a..b-1`` as order intervals; places past the end wrap around to the
        start, as policy "pad" reads them."""
        out = []
        while a < b:
            place = a % self.length
            i = int(np.searchsorted(self.places, place, side="right")) - 1
            take = min(b - a, int(self.places[i + 1]) - place)
            out.append((int(self.starts[i]) + place - int(self.places[i]), take))
            a += take
        return out


def remaining(samples: int, steps: list[Step], item_size: int, policy: str) -> Positions:
    """The positions of an epoch of ``samples`` that the layouts ``steps`` left unread."""
    positions = Positions([(0, samples)])
    for step in steps:
        positions = unread(positions, step, item_size, policy)
    return positions


def unread(positions: Positions, step: Step, item_size: int, policy: str) -> Positions:
    """What a world had not read of ``positions`` after each rank took ``step.batches``
    batches: each worker's rest of its run, rank by rank, then the part of each rank that
    no worker was dealt (``drop_last``) and the positions "drop" left out."""
    world = step.world_size
    layout = RankLayout.of(positions.length, world, policy, Batching.of_step(step, item_size))
    taken = batches_taken(step.batches, layout.counts)
    dealt = min(layout.total_batches * layout.batching.samples, layout.per_rank)
    pieces = []
    for rank in range(world):
        for run, done in enumerate(taken):
            start, stop = layout.run_places(rank, run)
            read = min(start + int(done) * layout.batching.samples, stop)
            pieces += positions.intervals(read, stop)
        pieces += positions.intervals(rank * layout.per_rank + dealt,
                                      (rank + 1) * layout.per_rank)
    pieces += positions.intervals(world * layout.per_rank, positions.length)
    return Positions(pieces)


class Step(NamedTuple):
    """One line of a resume point's history: a layout, and the batches each rank took."""
    world_size: int
    num_workers: int                 # the loader's (1 for none)
    loader_batch_size: int | None    # items per loader batch (None: passed on one by one)
    drop_last: bool
    batches: int


@dataclasses.dataclass
class ResumeState:
    """A saved state: a resume point (``checkpoint``: the layouts its epoch went through)
    or one worker's (``state_dict``, for a StatefulDataLoader: also where that worker
    stands). :meth:`to_dict` gives what is saved, plain values with a ``version``, and
    :meth:`from_dict` reads it back, refusing another version."""
    config: dict
    epoch: int
    history: list[Step]
    worker: bool = False                 # one worker's state: the fields below are its
    rank: int | None = None
    world_size: int | None = None
    worker_id: int | None = None         # None: saved before it iterated
    num_workers: int | None = None
    run: int | None = None               # the run of the rank's batches it reads
    yielded: int = 0                     # items of that run yielded
    run_items: int = 0
    rank_batches: int = 0
    loader_batch_size: int | None = None
    drop_last: bool = False
    rng_state: Any = None                # its augmentation generator's
    finished = property(lambda self: self.yielded >= self.run_items)

    def to_dict(self) -> dict:
        state = {"version": STATE_VERSION, "config": self.config, "epoch": self.epoch,
                 "history": [step._asdict() for step in self.history]}
        if self.worker:
            state.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self)[4:]},
                         finished=self.finished)
        return state

    @classmethod
    def from_dict(cls, state: Any) -> ResumeState:
        version = state.get("version") if isinstance(state, dict) else None
        if isinstance(version, int) and version < STATE_VERSION:
            raise ValueError(f"state has version {version}, from an older copy of this file "
                             f"that knew shards by length only: finish its epoch with that "
                             f"copy, or start afresh")
        if version != STATE_VERSION:
            raise ValueError(f"state was not made by ShardedIterableDataset.state_dict() or "
                             f".checkpoint() (version {STATE_VERSION})")
        names = {f.name for f in dataclasses.fields(cls)[3:]} - {"worker"}
        return cls(state["config"], int(state["epoch"]), [Step(**s) for s in state["history"]],
                   worker="worker_id" in state, **{k: state[k] for k in names & state.keys()})


def _same_layout(step: Step, world_size: int, batching: Batching) -> bool:
    """Whether ``step`` was read by a loader laid out like ``batching``: then each worker
    resumes its own run where the loader stopped, in the order it would have come."""
    return step.world_size == world_size and \
        Batching.of_step(step, batching.item_size) == batching


class _Run(NamedTuple):
    """One worker's part of a rank's epoch: items ``start..count-1`` of run ``index``,
    which covers places ``first..stop-1`` of ``positions``."""
    epoch: int
    history: list[Step]     # the layouts before the one the run belongs to
    positions: Positions
    index: int
    first: int
    stop: int
    start: int
    count: int
    rank_batches: int
    rng_state: Any


def _check_worker_state(state: ResumeState, rank: int, world_size: int) -> None:
    """A StatefulDataLoader's state resumes one worker of one rank, read by a loader with
    as many workers: anything else is refused here, before a batch is read."""
    if state.worker_id is None:   # saved before any iteration: nothing to resume
        return
    info = get_worker_info()
    now = {"rank": rank, "world_size": world_size,
           "num_workers": 0 if info is None else info.num_workers,
           "worker_id": 0 if info is None else info.id}
    differ = [f"{k} {getattr(state, k)} then, {v} now" for k, v in now.items()
              if getattr(state, k) != v]
    if differ:
        raise ValueError(
            "a StatefulDataLoader state resumes only the same rank of the same world, read "
            "with the same num_workers: " + ", ".join(differ) + ". To resume on another "
            "world size or number of workers, save ds.checkpoint(batches_consumed) instead")


# -- reading the samples --------------------------------------------------------------------

class _Shards:
    """The samples: shard ``i`` holds ``lengths[i]`` samples, ``load(sources[i])`` (or
    ``sources[i]`` itself; ``None``: its ids). A worker keeps the loaded shards of the
    block it reads, and nothing else."""

    def __init__(self, sources: list, lengths: np.ndarray, load: Callable | None,
                 *, flat: bool = False, fingerprints: Sequence | None = None) -> None:
        self.sources, self.load, self.flat = sources, load, flat
        self.fingerprints = None if fingerprints is None else [str(f) for f in fingerprints]
        self.names = [os.fspath(s) if isinstance(s, (str, os.PathLike)) else
                      repr(s) if isinstance(s, range) else None for s in sources]
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.offsets = _starts(self.lengths)
        self.total = int(self.offsets[-1])
        self.cache: dict = {}

    @classmethod
    def of_source(cls, source: Any) -> _Shards:
        if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
            if source < 0:
                raise ValueError(f"source must be a size ≥ 0 or a sequence, got {source}")
            return cls([None], [int(source)], None, flat=True)
        return cls([source], [len(source)], None, flat=True)

    def first(self, count: int) -> _Shards:
        return self if count == len(self.lengths) else _Shards(
            self.sources[:count], self.lengths[:count], self.load,
            fingerprints=self.fingerprints and self.fingerprints[:count])

    def name(self, i: int) -> str:
        return "the source" if self.flat else f"shard {i} ({_describe(self.sources[i])})"

    def check_grown_from(self, saved: dict) -> None:
        """Refuse a state saved on other shards (by length, name, fingerprint; re-ordered,
        inserted into); shards added after the saved ones are fine."""
        count = len(saved["lengths"])
        if count > len(self.lengths):
            raise ValueError(f"state comes from a corpus of {count} shards, and this "
                             f"one has {len(self.lengths)}: shards may be added after the "
                             f"saved ones, never removed")
        prints = (saved["fingerprints"] or [None] * count, self.fingerprints or [None] * count)
        for i in range(count):
            was, now = ({"samples": int(lengths[i]), "name": names[i], "fingerprint": f[i]}
                        for lengths, names, f in ((saved["lengths"], saved["names"], prints[0]),
                                                  (self.lengths, self.names, prints[1])))
            for what in [k for k in was if was[k] != now[k]][:1]:
                change = f"held {was[what]} samples when the state was saved and holds " \
                    f"{now[what]} now" if what == "samples" else f"had the {what} " \
                    f"{was[what]!r} when the state was saved and has {now[what]!r} now"
                moved = [j for j, n in enumerate(self.names) if n and n == was["name"]]
                raise ValueError(
                    f"state comes from a different corpus: {self.name(i)} {change}"
                    + (f" (the saved one is shard {moved[0]} now)" if moved else "")
                    + ". A state loads onto the same shards in the same order, or onto more "
                    "shards after them")

    def batch(self, ids: np.ndarray, shards: np.ndarray, collate_fn: Callable):
        """The samples ``ids`` (of ``shards``) as one batch, read a shard at a time."""
        if self.flat and self.sources[0] is None:   # the samples are their ids
            return torch.from_numpy(ids.copy())
        local = ids - self.offsets[shards]
        if (shards == shards[0]).all():
            return self._take(int(shards[0]), local, collate_fn)
        by_shard = np.argsort(shards, kind="stable")
        groups = np.split(by_shard, np.flatnonzero(np.diff(shards[by_shard])) + 1)
        parts = [self._take(int(shards[g[0]]), local[g], collate_fn) for g in groups]
        if all(isinstance(p, torch.Tensor) for p in parts):
            back = np.empty_like(by_shard)
            back[by_shard] = np.arange(len(by_shard))
            return torch.cat(parts)[torch.from_numpy(back)]
        return collate_fn([self.data(int(s))[int(i)] for s, i in zip(shards, local,
                                                                     strict=True)])

    def sample(self, gid: int, shard: int):
        data = self.data(shard)
        return gid if data is None else data[gid - int(self.offsets[shard])]

    def _take(self, shard: int, local: np.ndarray, collate_fn: Callable):
        data = self.data(shard)
        if isinstance(data, torch.Tensor):
            return data[torch.from_numpy(local)]
        if isinstance(data, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(data[local]))
        if isinstance(data, range):
            return torch.from_numpy(data.start + local * data.step)
        return collate_fn([data[int(i)] for i in local])

    def keep_blocks(self, needed: set, block_of_shard: np.ndarray) -> None:
        """Drop the loaded shards of the blocks the worker has left."""
        for s in [s for s in self.cache if int(block_of_shard[s]) not in needed]:
            del self.cache[s]

    def data(self, shard: int):
        """Shard ``shard``'s samples; a loaded one is checked against its length."""
        if self.load is None:
            return self.sources[shard]
        if shard not in self.cache:
            data, declared = self.load(self.sources[shard]), int(self.lengths[shard])
            if len(data) != declared:
                raise ValueError(
                    f"{self.name(shard)} holds {len(data)} samples but lengths[{shard}] = "
                    f"{declared}: "
                    + ("its last samples would never be read" if len(data) > declared
                       else "the missing samples cannot be read")
                    + "; pass the true lengths (or none, to count them)")
            self.cache[shard] = data
        return self.cache[shard]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "cache": {}}


def _shard_lengths(shards: list, lengths: Sequence[int] | None,
                   load: Callable | None) -> np.ndarray:
    """The shards' lengths, counted when not given, checked when they can be."""
    if lengths is None:
        lengths = [len(load(s)) if load is not None else len(s) for s in shards]
    counts = np.asarray(lengths)
    if counts.shape != (len(shards),):
        raise ValueError(f"lengths must hold one int per shard ({len(shards)}), got "
                         f"shape {counts.shape}")
    for i, n in enumerate(lengths):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"lengths[{i}] must be an int ≥ 0 (shard {i}'s samples), "
                             f"got {n!r}")
    if load is None:
        for i, shard in enumerate(shards):
            if hasattr(shard, "__len__") and len(shard) != counts[i]:
                raise ValueError(f"shard {i} ({_describe(shard)}) holds {len(shard)} "
                                 f"samples but lengths[{i}] = {counts[i]}")
    return counts.astype(np.int64)


# -- small helpers --------------------------------------------------------------------------


def _check_int(name: str, value: Any, *, low: int, high: int | None = None,
               allow_none: bool = False, meaning: str | None = None) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low \
            or high is not None and value > high:
        meaning = meaning or ("None or " if allow_none else "") + f"an int ≥ {low}"
        raise ValueError(f"{name} must be {meaning}, got {value!r}")


def _env_int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"the environment variable {name} must be an int, got {value!r}") \
            from None


def _describe(source: Any) -> str:
    """A shard as a message shows it: a path as it is, anything else by its repr, with
    the end kept when long (a file name is at the end of its path)."""
    text = os.fspath(source) if isinstance(source, (str, os.PathLike)) else repr(source)
    return text if len(text) <= 80 else "..." + text[-77:]


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Where each of consecutive pieces of ``lengths`` starts, and the end after them."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: every output bit depends on every input bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _mix_seed(*values: int) -> int:
    """One 63-bit seed from several ints, so that nearby tuples give unrelated streams."""
    state = np.random.SeedSequence([int(v) for v in values]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))
