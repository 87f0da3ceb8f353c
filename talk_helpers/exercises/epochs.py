"""Graders of notebook 04: a shuffled dataset that knows its epoch, and a worker's seed.

:func:`grade_epochs` reads ``MyEpochIds(size, seed=0)`` as training does (``set_epoch``
before each epoch; here, with new workers, with persistent ones) and passes when every
epoch holds every id once, in a new order drawn from ``seed`` and ``epoch`` alone.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.checks import check_exactly_once, ids_of
from talk_helpers.exercises import (
    Grade,
    GradeFailure,
    announce,
    choice,
    is_stub,
    not_tried,
    not_yet,
    passes,
    raised,
)
from talk_helpers.exercises.loading import (
    HINT_GLOBAL_STREAM,
    STREAM_NAMES,
    read_loader,
    recording_loader,
    shared_streams,
    stop_workers,
)

__all__ = ["SIZE", "grade_epochs", "grade_unseeded_generator", "grade_worker_seed"]

SIZE = 48  # ids the grader asks for: 0..SIZE-1
BATCH_SIZE = 4
WORKERS = 2
EXERCISE = "04.1"

NO_WORKER_INFO = ("with num_workers=0 there is no worker: get_worker_info() returns None, "
                  "and the main process must yield the whole epoch")


def grade_epochs(dataset_class: type) -> Grade:
    """Exercise 04.1: ``MyEpochIds(size, seed=0)`` with ``set_epoch(epoch)``.

    Every epoch: ids 0..size-1 once each; a new order every epoch, from ``seed`` and
    ``epoch`` only; the same orders with new workers every epoch and with persistent ones.
    """
    if is_stub(dataset_class):
        return not_tried(EXERCISE, "write MyEpochIds's set_epoch and __iter__, run its cell, "
                                "then this one")
    if not (isinstance(dataset_class, type) and issubclass(dataset_class, IterableDataset)):
        return not_yet(EXERCISE, f"pass the class MyEpochIds, an IterableDataset; got "
                              f"{dataset_class!r}")

    try:
        _in_this_process(dataset_class)
        fresh = _with_workers(dataset_class, persistent=False)
        _with_workers(dataset_class, persistent=True, orders=fresh)
    except GradeFailure as failed:
        return failed.grade
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        return raised(EXERCISE, exc, exception_hint(exc))
    return passes(EXERCISE, f"ids 0..{SIZE - 1} once per epoch and a new order every epoch, "
                         "the same orders without workers, with new workers every epoch and "
                         "with persistent workers")


def grade_unseeded_generator(answer) -> Grade:
    """Exercise 04.2: what two new workers per epoch draw from a generator made, unseeded,
    in ``__init__``."""
    hints = {
        "a": "where is the generator's state made, and how many copies of it are there?",
        "b": "new workers copy the dataset again, from the main process: has its generator "
             "drawn anything there since?",
    }
    return choice("04.2", answer, options=("a", "b", "c"), correct="c", hints=hints,
                  explain="every worker copies the main process's generator, which never "
                          "draws: the same state in both workers, every epoch")


def grade_worker_seed(answer) -> Grade:
    """Exercise 04.2: the seed worker 1 gets on the first iterator of a loader with
    ``generator=torch.Generator().manual_seed(42)`` and 2 workers (asked of real workers)."""
    exercise = "04.2"
    if answer is None:
        return not_tried(exercise, "set worker_1_seed to an int")
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    if isinstance(answer, bool) or not isinstance(answer, int | np.integer):
        return not_yet(exercise, f"worker_1_seed must be an int, got {answer!r}")
    loader = DataLoader(_WorkerSeed(), batch_size=None, num_workers=WORKERS,
                        generator=torch.Generator().manual_seed(42))
    with announce(exercise, f"asking {WORKERS} real workers for their seeds"):
        seeds = dict(list(loader))
    if int(answer) == seeds[1]:
        return passes(exercise, f"worker 1 got {seeds[1]}")
    if int(answer) == seeds[0]:
        return not_yet(exercise, "that is worker 0's seed", "worker k adds its id k")
    return not_yet(exercise, f"worker 1 got another seed than {int(answer)}",
                   "base_seed is one int64 drawn from the loader's generator, not from the "
                   "global torch RNG, and not the generator's seed itself")


# --------------------------------------------------------------------------- the stages


def _in_this_process(dataset_class: type) -> None:
    """num_workers=0: the epochs, the seed, reproducibility."""
    dataset = dataset_class(SIZE, seed=0)
    if not callable(getattr(dataset, "set_epoch", None)):
        raise _failure("MyEpochIds has no set_epoch(epoch) method")
    orders = [_epoch_in_process(dataset, epoch) for epoch in range(2)]
    for epoch, order in enumerate(orders):
        _exactly_once(order, f"in this process (num_workers=0), epoch {epoch}")
    if np.array_equal(orders[0], np.arange(SIZE)):
        raise _failure("epoch 0 comes out in storage order, 0, 1, 2, …",
                       "shuffle every epoch, the first one too")
    if np.array_equal(orders[0], orders[1]):
        raise _failure("epochs 0 and 1 come out in the same order",
                       "set_epoch(1) changed nothing: the permutation must depend on "
                       "the epoch as well as on the seed")
    again = _epoch_in_process(dataset_class(SIZE, seed=0), 0)
    if not np.array_equal(again, orders[0]):
        raise _failure("two MyEpochIds(size, seed=0) give two different orders "
                       "in epoch 0",
                       "the permutation must come from seed and epoch alone, so that "
                       "every worker (and every rerun) draws the same one")
    other = _epoch_in_process(dataset_class(SIZE, seed=1), 0)
    if np.array_equal(other, orders[0]):
        raise _failure("seed=1 gives the same order as seed=0",
                       "the permutation ignores the seed")


def _with_workers(dataset_class: type, *, persistent: bool,
                  orders: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Two epochs through 2 workers, new ones each epoch or persistent; the orders."""
    where = "with persistent workers" if persistent else "with new workers every epoch"
    dataset = dataset_class(SIZE, seed=0)
    loader = recording_loader(dataset, batch_size=BATCH_SIZE, num_workers=WORKERS,
                              persistent_workers=persistent)
    epochs, worker_sets, runs = [], [], {}
    try:
        for epoch in range(2):
            dataset.set_epoch(epoch)
            batches, records = read_loader(EXERCISE, loader, where=f"{where}, epoch {epoch}",
                                           max_batches=4 * SIZE // BATCH_SIZE,
                                           raised_hint=_line_hint,
                                           endless_hint="does __iter__ end after its share?")
            order = np.concatenate([ids_of(b) for b in batches]) if batches else np.empty(0)
            _exactly_once(order, f"{where}, epoch {epoch}", per_worker=records)
            epochs.append(order)
            worker_sets.append(_ids_per_worker(batches, records))
            runs[f"epoch {epoch}"] = records
    finally:
        stop_workers(loader)
    if np.array_equal(epochs[0], epochs[1]):
        hint = ("persistent workers keep the copy of the dataset they started with: an "
                "attribute that set_epoch changes in the main process never reaches it"
                if persistent else
                "each epoch starts new workers, each with a fresh copy of the dataset made "
                "after set_epoch: take the epoch from set_epoch, not from counting iter() calls")
        raise _failure(f"{where}, epochs 0 and 1 come out in the same order", hint)
    if worker_sets[0] == worker_sets[1]:
        raise _failure(f"{where}, each worker reads the same ids in epochs 0 and "
                       "1, only in another order",
                       "you shuffle inside each worker's share: shuffle first, then "
                       "shard (notebook 03)")
    if orders is not None and not all(np.array_equal(a, b) for a, b in zip(orders, epochs,
                                                                            strict=True)):
        raise _failure("persistent workers and new workers give different orders "
                       "for the same epoch",
                       "the order must depend on seed and epoch only, not on how many "
                       "times a copy of the dataset was iterated")
    if not persistent:
        _streams_apart(runs)
    return epochs


def _failure(message: str, hint: str | None = None) -> GradeFailure:
    """A *not yet* for exercise 04.1, to raise."""
    return GradeFailure(not_yet(EXERCISE, message, hint))


def _streams_apart(runs: dict) -> None:
    """Fail when the dataset leaves a global generator in the same state in both workers
    or in both epochs: augmentations drawn from it would agree, or repeat."""
    shared = shared_streams(runs, across=[("epoch 0", "epoch 1")])
    if shared is None:
        return
    generator, where = shared
    raise _failure(f"every id once and a new order every epoch, but "
                   f"after your __iter__ ran, {STREAM_NAMES[generator]} "
                   f"is in the same state in {where}: an augmentation "
                   "drawn from it there would be the same",
                   HINT_GLOBAL_STREAM)


# --------------------------------------------------------------------------- the details


def _epoch_in_process(dataset, epoch: int) -> np.ndarray:
    dataset.set_epoch(epoch)
    most = 4 * SIZE // BATCH_SIZE
    batches = list(islice(DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=0), most + 1))
    if len(batches) > most:
        raise _failure(f"in this process (num_workers=0), epoch {epoch} "
                       f"holds more than {most} batches of {BATCH_SIZE}",
                       "does __iter__ end after its share?")
    return np.concatenate([ids_of(b) for b in batches]) if batches else np.empty(0, np.int64)


def _exactly_once(order: np.ndarray, where: str, per_worker=None) -> None:
    report = check_exactly_once(order, SIZE)
    if report.ok:
        return
    line = repr(report).splitlines()[0].lstrip("✘ ")
    hint = None
    times = set(report.duplicate_times.tolist())
    if report.duplicated_count == SIZE and times == {WORKERS} and per_worker is not None:
        hint = ("each worker reads the whole permutation: each must keep only its share of "
                "it (notebook 02)")
    elif report.duplicated_count and report.missing_count and per_worker is not None:
        hint = ("the workers drew different permutations, so their shares overlap and leave "
                "gaps: every worker must draw the same permutation, from seed and epoch, "
                "never from its own seed or id")
    elif report.unexpected_count:
        hint = f"yield the ids 0..{SIZE - 1} only"
    raise _failure(f"{where}: {line}", hint)


def _ids_per_worker(batches: list, records: list) -> dict[int, frozenset]:
    ids: dict[int, set] = {}
    for batch, record in zip(batches, records, strict=True):
        ids.setdefault(record.worker, set()).update(ids_of(batch).tolist())
    return {worker: frozenset(found) for worker, found in ids.items()}


def _line_hint(line: str) -> str | None:
    return NO_WORKER_INFO if "NoneType" in line else None


def exception_hint(exc: BaseException) -> str | None:
    """A hint for the error a typical answer raises, or None."""
    if isinstance(exc, AttributeError) and "NoneType" in str(exc):
        return NO_WORKER_INFO
    return None


class _WorkerSeed(IterableDataset):
    """Each worker yields (its id, the seed DataLoader gave it)."""

    def __iter__(self):
        info = get_worker_info()
        yield info.id, info.seed
