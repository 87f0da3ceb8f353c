"""What runs in every rank: build the loader, iterate it as a training loop would, and keep
the sample ids of every batch, compactly.

Per rank and epoch the audit keeps one int array of ids, the size of every batch and the
DataLoader worker that collated it (:class:`RankEpoch`), never a batch itself: a batch
collated in a worker lives in shared memory, and keeping it would keep a file handle
open per batch. Memory is about 8 bytes per id (4 when every id fits in int32).

How the epochs run (:class:`Plan`):

* by default ``make_loader(rank, world_size, epoch)`` is called for every epoch;
* ``reuse_loader=True`` calls it once (``epoch=0``) and iterates the same object every
  epoch, as a training loop that builds its loader once does; ``epoch_call="sampler.set_epoch"``
  then calls ``loader.sampler.set_epoch(epoch)`` before each epoch. Nothing else is called:
  a loop that calls nothing per epoch is audited as it is;
* ``steps=N`` stops each epoch after N batches (long and infinite loaders).

How far the rank got is reported twice a second (:class:`Progress`), so a rank that does
not finish says where it was; when it has not moved for a while, the report adds the
file and line of the user's code it is waiting in.
"""

from __future__ import annotations

import threading
import time
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from torch.utils.data import DataLoader, get_worker_info

from talk_helpers.audit.sample_ids import SampleIds, UnreadableBatch
from talk_helpers.audit.where import raised_at, running_at

__all__ = ["NotALoader", "Plan", "Progress", "RankEpoch", "RankRun", "Stopped", "collect",
           "collect_batches", "collect_ids", "worker_target"]

NO_WORKER = -1
PUBLISH_EVERY_S = 0.5   # how often a rank's progress is sent
STUCK_AFTER_S = 2.0     # unchanged this long: the progress also says where the rank waits


class NotALoader(TypeError):
    """The factory returned something a training loop cannot iterate (exit status 2)."""


class Stopped(RuntimeError):
    """This rank stopped early because another rank failed."""


@dataclass(frozen=True)
class Plan:
    """How every rank runs the loader (see the module docstring). ``recorders``: the
    audit checks' rank-side recorders, built in the rank (see ``audit.checks``)."""

    epochs: int
    reader: SampleIds = field(default_factory=SampleIds)
    steps: int | None = None
    reuse_loader: bool = False
    epoch_call: str | Callable | None = None
    checks: tuple = ()


@dataclass
class RankEpoch:
    """What one rank saw in one epoch: ``ids`` of every sample in order, ``sizes`` of
    every batch, the ``workers`` that collated them (-1 unknown), ``num_workers`` (None when
    not a DataLoader), whether ``--steps`` cut the epoch short (``truncated``) and, when a
    loader has workers the audit could not count, why (``workers_note``)."""

    ids: np.ndarray
    sizes: np.ndarray
    workers: np.ndarray
    num_workers: int | None
    truncated: bool = False
    workers_note: str | None = None   # why the workers could not be counted

    @property
    def n_batches(self) -> int:
        return len(self.sizes)

    @property
    def batches(self) -> list[np.ndarray]:
        """The ids of each batch (views into ``ids``)."""
        if not len(self.sizes):
            return []
        return np.split(self.ids, np.cumsum(self.sizes[:-1]))

    def __repr__(self) -> str:
        return f"{self.n_batches} batches"


@dataclass
class RankRun:
    """Everything one rank sends back: its epochs, the text of string ids it saw
    (``names``) and what each check's recorder kept (``recordings[check][epoch]``)."""

    epochs: list[RankEpoch]
    names: dict[int, str] | None = None
    recordings: dict[str, list] = field(default_factory=dict)

    def __repr__(self) -> str:
        return repr(self.epochs)


# ------------------------------------------------------------------ worker tags


FromWorker = namedtuple("FromWorker", "worker batch")


class TagWorker:
    """A collate_fn wrapper run inside DataLoader workers: returns (worker id, batch)."""

    def __init__(self, collate_fn: Callable):
        self.collate_fn = collate_fn

    def __call__(self, samples):
        info = get_worker_info()
        return FromWorker(NO_WORKER if info is None else info.id, self.collate_fn(samples))


# ------------------------------------------------------------------ progress


class Progress:
    """Where this rank is: an epoch, a phase or a batch count; ``publish(text)`` is called
    from a thread at most every :data:`PUBLISH_EVERY_S` and when asked (:meth:`flush`)."""

    def __init__(self, publish: Callable[[str], None],
                 poll: Callable[[], bool] | None = None):
        self.publish, self.poll = publish, poll
        self.stop = False   # set when poll() says another rank failed
        self.epoch, self.batches, self.phase = 0, 0, "starting"
        self._sent: str | None = None
        self._moved = time.monotonic()
        self._stop = threading.Event()
        self._main = threading.get_ident()
        self._thread: threading.Thread | None = None

    def at(self, epoch: int, phase: str | None = None) -> None:
        self.epoch, self.phase, self.batches = epoch, phase, 0
        self._moved = time.monotonic()

    def text(self) -> str:
        if self.phase == "done":
            return f"epoch {self.epoch} done ({self.batches} batches)"
        if self.phase is not None:
            return f"epoch {self.epoch}: {self.phase}"
        return f"epoch {self.epoch}, batch {self.batches}"

    def state(self) -> dict:
        """The same as a dict, for a JSON report."""
        return {"epoch": self.epoch, "batches": self.batches,
                "phase": "iterating" if self.phase is None else self.phase}

    def flush(self) -> None:
        text = self.text()
        if text != self._sent:
            self._sent = text
            self.publish(text)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, name="audit-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()
        return False

    def _run(self) -> None:
        last = None
        while not self._stop.wait(PUBLISH_EVERY_S):
            now = time.monotonic()
            mark = (self.epoch, self.batches, self.phase)
            if mark != last:
                last, self._moved = mark, now
            text = self.text()
            if now - self._moved >= STUCK_AFTER_S and self.phase != "done":
                where = running_at(self._main)
                if where:
                    text = f"{text} (waiting at {where})"
            try:
                if text != self._sent:
                    self._sent = text
                    self.publish(text)
                if self.poll is not None and self.poll():
                    self.stop = True
            except Exception:  # progress must never break the audit
                pass


# ------------------------------------------------------------------ the epochs


def collect(rank: int, world_size: int, make_loader: Callable, plan: Plan,
            publish: Callable[[str], None] | None = None,
            progress: Progress | None = None) -> RankRun:
    """Run the plan in this rank and return what it saw. An exception from the user's
    code propagates with a note naming the file and line it came from. ``publish(text)``
    receives the progress (default: the world's ``report_progress``), or pass a
    :class:`Progress` of your own."""
    if progress is None:
        if publish is None:
            from talk_helpers.runtime.in_rank import report_progress as publish
        progress = Progress(publish)
    recorders = {check.name: rec for check in plan.checks
                 if (rec := check.recorder(plan)) is not None}
    epochs, names = [], None
    recordings: dict[str, list] = {name: [] for name in recorders}
    loader = None
    persistent: dict[int, tuple] = {}   # DataLoaders whose persistent workers were tagged
    try:
        with progress:
            for epoch in range(plan.epochs):
                if loader is None or not plan.reuse_loader:
                    while persistent:   # the last epoch's loader: stop its tagged workers
                        _untag_persistent(*persistent.popitem()[1])
                    progress.at(epoch, "building the loader")
                    loader = make_loader(rank, world_size, epoch)
                if plan.epoch_call is not None:
                    progress.at(epoch, f"calling {_call_name(plan.epoch_call)}({epoch})")
                    _call_per_epoch(loader, plan.epoch_call, epoch)
                for rec in recorders.values():
                    rec.start_epoch(epoch, loader)
                seen, found = _one_epoch(rank, world_size, epoch, loader, plan, progress,
                                         recorders, persistent)
                epochs.append(seen)
                if found:
                    names = {} if names is None else names
                    names.update(found)
                for name, rec in recorders.items():
                    recordings[name].append(rec.end_epoch(epoch))
                progress.at(epoch, "done")
                progress.batches = seen.n_batches
    except BaseException as exc:
        if not isinstance(exc, UnreadableBatch | NotALoader | Stopped) \
                and hasattr(exc, "add_note"):
            where = raised_at(exc)
            if where:
                exc.add_note(f"{WHERE_NOTE}{where}")
        raise
    finally:
        while persistent:
            _untag_persistent(*persistent.popitem()[1])
    return RankRun(epochs, names, recordings)


WHERE_NOTE = "audit: raised at "   # how the rank tells the parent where an error came from


def _one_epoch(rank, world_size, epoch, loader, plan: Plan, progress: Progress,
               recorders, persistent: dict) -> tuple[RankEpoch, dict | None]:
    num_workers, original, note = None, None, None
    # Tag each batch with the worker that collated it, through the wrappers a DataLoader
    # hides in (:func:`worker_target`).
    target, note = worker_target(loader)
    if target is not None:
        num_workers = int(target.num_workers)
        if num_workers and not target.persistent_workers:
            original = target.collate_fn
            target.collate_fn = TagWorker(original)
        elif num_workers:
            note = _tag_persistent(target, persistent)
    progress.at(epoch, "starting the loader's iterator")
    try:
        iterator = iter(loader)
    except TypeError:
        raise NotALoader(
            f"make_loader(rank={rank}, world_size={world_size}, epoch={epoch}) returned "
            f"{type(loader).__name__} {_short_repr(loader)}, which is not iterable; "
            "return what a training loop iterates (a DataLoader, a dataset, a list of "
            "batches)"
        ) from None
    except BaseException:
        if original is not None:
            target.collate_fn = original
        raise
    read, steps = plan.reader, plan.steps
    chunks, sizes, workers = [], [], []
    names: dict | None = None
    truncated = False
    progress.at(epoch)
    after = [rec.after_batch for rec in recorders.values()]
    try:
        for batch in iterator:
            if original is not None:
                # the iterator has its own reference now, also one whose __iter__ is a
                # generator that makes it at the first batch (litdata's StreamingDataLoader)
                target.collate_fn, original = original, None
            worker = NO_WORKER
            if type(batch) is FromWorker:
                worker, batch = batch
            try:
                ids, found = read(batch)
            except UnreadableBatch as exc:
                raise UnreadableBatch(f"rank {rank}, epoch {epoch}, batch {len(sizes)}: "
                                      f"{exc}") from None
            if found:
                if names is None:
                    names = {}
                names.update(found)
            chunks.append(ids)
            sizes.append(len(ids))
            workers.append(worker)
            progress.batches = len(sizes)
            for hook in after:
                hook(len(sizes), batch)
            if steps is not None and len(sizes) >= steps:
                truncated = True
                break
            if progress.stop:
                truncated = True
                raise Stopped("stopped because another rank failed")
    finally:
        if original is not None:
            target.collate_fn = original
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if truncated and callable(shutdown):
            shutdown()  # stop the workers of a loader left before its end, now
        del iterator
    ids = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
    if ids.size:
        low, high = ids.min(), ids.max()
        if low < 0:
            raise UnreadableBatch(f"rank {rank}, epoch {epoch}: the ids hold negative values "
                                  f"(e.g. {int(low)}); sample ids count from 0")
        if high <= np.iinfo(np.int32).max:
            ids = ids.astype(np.int32)
    return RankEpoch(ids=ids, sizes=np.asarray(sizes, dtype=np.int64),
                     workers=np.asarray(workers, dtype=np.int16),
                     num_workers=num_workers, truncated=truncated, workers_note=note), names


def worker_target(loader) -> tuple[DataLoader | None, str | None]:
    """The DataLoader whose workers the audit can count in ``loader``, or None and why not
    (None, None: a loader with no workers, such as a list or a dataset).

    A DataLoader, and every loader built on one by subclassing (torchdata's
    ``StatefulDataLoader``, litdata's ``StreamingDataLoader``), is tagged itself.
    webdataset's ``WebLoader`` holds its DataLoader as the first stage of its pipeline
    (``webdataset/compat.py``, ``WebLoader.__init__``: ``DataPipeline(DataLoader(...))``):
    tagged when nothing comes after it; a stage after it (``.unbatched()``, ``.batched()``)
    rebatches, and a batch is then no longer one worker's."""
    if isinstance(loader, DataLoader):
        return loader, None
    stages = getattr(loader, "pipeline", None)
    if isinstance(stages, list) and stages and isinstance(stages[0], DataLoader):
        if len(stages) == 1:
            return stages[0], None
        workers = stages[0].num_workers
        return None, (f"not counted: {type(loader).__name__} rebatches after its DataLoader "
                      f"of {workers} workers ({len(stages) - 1} stages after it), so a batch "
                      "is no longer one worker's") if workers else None
    workers = getattr(loader, "num_workers", None)
    if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0:
        return None, (f"not counted: {type(loader).__name__} has {workers} workers but is "
                      "no DataLoader and holds none the audit can reach")
    return None, None


def _tag_persistent(target: DataLoader, persistent: dict) -> str | None:
    """Tag a DataLoader with persistent workers before they start: they keep the
    collate_fn they start with for every epoch, and :func:`_untag_persistent` stops them
    after the audit. Workers started before the audit cannot be tagged (the note why)."""
    if id(target) in persistent:
        return None
    if getattr(target, "_iterator", None) is not None:
        return ("not counted: its persistent workers started before the audit, with the "
                "collate_fn they keep")
    persistent[id(target)] = (target, target.collate_fn)
    target.collate_fn = TagWorker(target.collate_fn)
    return None


def _untag_persistent(target: DataLoader, original) -> None:
    iterator = getattr(target, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
    target._iterator = None
    target.collate_fn = original


def _call_per_epoch(loader, call, epoch: int) -> None:
    if callable(call):
        call(loader, epoch)
        return
    target = loader
    for part in call.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise NotALoader(f"epoch_call {call!r}: {type(target).__name__} has no attribute "
                             f"{part!r}") from None
    if not callable(target):
        raise NotALoader(f"epoch_call {call!r} is {type(target).__name__}, not callable")
    target(epoch)


def _call_name(call) -> str:
    return call if isinstance(call, str) else getattr(call, "__name__", "epoch_call")


def _short_repr(obj) -> str:
    text = repr(obj)
    return text if len(text) <= 40 else text[:39] + "…"


# ------------------------------------------------------------------ the older calls


def collect_batches(rank: int, world_size: int, make_loader: Callable, epochs: int,
                    batch_ids: Callable | None = None) -> list[RankEpoch]:
    """Iterate ``make_loader(rank, world_size, epoch)`` for each epoch, recording each
    batch's ids and, for a DataLoader, the worker that collated it."""
    plan = Plan(epochs=epochs, reader=SampleIds(read=batch_ids) if batch_ids else SampleIds())
    return collect(rank, world_size, make_loader, plan).epochs


def collect_ids(rank: int, world_size: int, make_loader: Callable, epochs: int,
                batch_ids: Callable | None = None) -> list[list[np.ndarray]]:
    """The ids only: ``[epoch][batch] -> np.ndarray`` of int64 ids."""
    return [[b.astype(np.int64) for b in e.batches]
            for e in collect_batches(rank, world_size, make_loader, epochs, batch_ids)]

