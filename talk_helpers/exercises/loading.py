"""The learner's dataset read by a real DataLoader, as a grader needs it read.

:func:`read_loader` returns every batch and what each worker's global generators would
draw next (:class:`Record`). It polls, tells a worker still starting from one that gives
nothing, and allows each the time :mod:`~talk_helpers.exercises.start_up` gives it.
:func:`shared_streams` reads the records: a global generator left in the same state by two
workers, epochs or ranks would repeat any augmentation drawn from it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, get_worker_info
from torch.utils.data._utils import signal_handling
from torch.utils.data._utils.collate import default_collate

from talk_helpers.exercises import GradeFailure, announce, not_yet
from talk_helpers.exercises.start_up import (
    START_FLOOR_S,
    late_stall,
    late_start,
    note_start,
    stall_allowance_s,
    start_allowance_s,
    start_method,
)

__all__ = ["GENERATORS", "HINT_GLOBAL_STREAM", "POLL_S", "STREAM_NAMES", "Record", "error_line",
           "read_loader", "recording_loader", "shared_streams", "stop_workers"]

POLL_S = 0.25  # how often a grader looks at its workers while it waits for a batch
GENERATORS = ("random", "numpy", "torch")  # the global generators DataLoader seeds
NO_WORKER = -1
STREAM_NAMES = {"random": "Python's global `random`", "numpy": "numpy's global generator",
                "torch": "torch's global generator"}
HINT_GLOBAL_STREAM = ("reseeding a global generator in __iter__ reseeds it for every draw "
                      "after it, augmentations included (notebook 03's same_seed did that in "
                      "worker_init_fn): which generator could the permutation have to itself?")


@dataclass(frozen=True)
class Record:
    """Which worker made a batch, and the next draws of its global generators after it
    (``{"random": (…), "numpy": (…), "torch": (…)}``, drawn from copies)."""

    worker: int
    draws: dict


def recording_loader(dataset, *, batch_size: int | None, num_workers: int,
                     collate_fn: Callable | None = None, worker_init_fn: Callable | None = None,
                     **kwargs) -> DataLoader:
    """A DataLoader that :func:`read_loader` can watch: each worker marks when it started,
    and each batch comes with its :class:`Record`. Other keywords go to DataLoader."""
    collate = collate_fn if collate_fn is not None else (
        default_collate if batch_size is not None else _as_is)
    if num_workers:
        context = kwargs.get("multiprocessing_context")
        method = start_method(context)
        ctx = torch.multiprocessing.get_context(method) if context is None or \
            isinstance(context, str) else context
        kwargs["multiprocessing_context"] = ctx
        started = ctx.RawArray("d", num_workers)
        worker_init_fn = _MarkStarted(started, worker_init_fn)
        kwargs.setdefault("timeout", POLL_S)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                        collate_fn=_Recorded(collate), worker_init_fn=worker_init_fn, **kwargs)
    loader._grader_started = started if num_workers else None  # noqa: SLF001
    return loader


def read_loader(exercise: str, loader: DataLoader, *, where: str, max_batches: int,
                raised_hint: Callable[[str], str | None] | None = None,
                endless_hint: str | None = None) -> tuple[list, list[Record]]:
    """Every batch of one pass over ``loader`` (from :func:`recording_loader`), and its
    records; announced while workers start. :class:`GradeFailure`: *not yet* when the
    dataset raises (``raised_hint(line)``) or yields over ``max_batches`` batches
    (``endless_hint``), *not graded* when its workers are too slow. ``where`` starts every
    message ("with num_workers=3")."""
    started = getattr(loader, "_grader_started", None)
    method = start_method(loader.multiprocessing_context) if loader.num_workers else "fork"
    batches, records = [], []
    iterator, finished = None, False
    try:
        with announce(exercise, f"{where}: waiting for {loader.num_workers} {method} workers "
                                "to start and read your dataset") if started else nullcontext():
            begun = time.time()
            iterator = iter(loader)
            last = time.monotonic()
            while True:
                try:
                    recorded = next(iterator)
                except StopIteration:
                    break
                except RuntimeError as exc:
                    if started is None or not _timed_out(exc):
                        raise
                    _check_patience(exercise, started, begun, last, method, where)
                    continue
                last = time.monotonic()
                records.append(recorded[0])
                batches.append(recorded[1])
                if len(batches) > max_batches:
                    raise GradeFailure(not_yet(exercise, f"{where}, your dataset yielded more "
                                                         f"than {max_batches} batches",
                                               endless_hint))
        finished = True
    except GradeFailure as failure:
        if failure.grade.late:  # workers that did not answer are not waited on again
            _kill(iterator)
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        line = error_line(exc)
        raise GradeFailure(not_yet(exercise, f"{where}, your dataset raised {line}",
                                   raised_hint(line) if raised_hint else None)) from None
    finally:
        if not (finished and loader.persistent_workers):  # persistent: kept for the next pass
            _shutdown(iterator)
    return batches, records


def stop_workers(loader: DataLoader) -> None:
    """Stop the workers a loader with ``persistent_workers=True`` keeps."""
    _shutdown(getattr(loader, "_iterator", None))


def shared_streams(runs: dict[str, Sequence[Record]], *,
                   across: Iterable[tuple[str, str]] = ()) -> tuple[str, str] | None:
    """The first global generator whose next draws agree where they should differ, and
    where: between two workers of one run, or between the same worker of two runs named
    in ``across`` (pairs of run names: two epochs, two ranks). None when they all differ.

    ``runs``: a name per run (a loader's pass) and its records. Each worker's draws after
    its first batch are compared.
    """
    firsts = {name: _first_per_worker(records) for name, records in runs.items()}
    for name, per_worker in firsts.items():
        workers = sorted(per_worker)
        for generator in GENERATORS:
            for i, a in enumerate(workers):
                for b in workers[i + 1:]:
                    if per_worker[a][generator] == per_worker[b][generator]:
                        return generator, f"workers {a} and {b} of {name}"
    for one, other in across:
        for worker in sorted(set(firsts[one]) & set(firsts[other])):
            for generator in GENERATORS:
                if firsts[one][worker][generator] == firsts[other][worker][generator]:
                    return generator, f"worker {worker} of {one} and of {other}"
    return None


def error_line(exc: BaseException) -> str:
    """``Type: message``; for an error a worker raised, its own last line (DataLoader wraps
    it in a message that holds the worker's whole traceback)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    name = type(exc).__name__
    return last if last.startswith(f"{name}:") else f"{name}: {last}".rstrip(": ")


# --------------------------------------------------------------------------- internals


def _check_patience(exercise: str, started, begun: float, last: float, method: str,
                    where: str) -> None:
    """Called at every poll without a batch: raise *not graded* once the workers have had
    their time, to start or, once started, to give a batch."""
    now = time.time()
    marks = list(started)
    ready = [mark for mark in marks if mark > 0]
    if ready:
        note_start(method, min(ready) - begun)
    waited = now - begun
    if len(ready) < len(marks):
        if waited <= START_FLOOR_S:
            return
        allowance = start_allowance_s(method, len(marks))
        if allowance is not None and waited > allowance:
            raise GradeFailure(late_start(exercise, waited, method,
                                          what=f"{where}, the workers",
                                          started=f"{len(ready)} of {len(marks)} started"))
        return
    quiet = min(time.monotonic() - last, now - max(ready))
    if quiet > stall_allowance_s(method):
        raise GradeFailure(late_stall(exercise, quiet, what=f"{where}, the workers"))


def _shutdown(iterator) -> None:
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _kill(iterator) -> None:
    """Kill the workers now: shutting them down politely waits seconds for each one."""
    workers = getattr(iterator, "_workers", None)
    if not workers:
        return
    if getattr(iterator, "_worker_pids_set", False):  # else DataLoader's SIGCHLD handler
        signal_handling._remove_worker_pids(id(iterator))  # raises for the killed worker
        iterator._worker_pids_set = False
    for worker in workers:
        if worker.is_alive():
            worker.kill()
    for worker in workers:
        worker.join(1.0)


def _timed_out(exc: RuntimeError) -> bool:
    return str(exc).startswith("DataLoader timed out after")


def _first_per_worker(records: Sequence[Record]) -> dict[int, dict]:
    firsts: dict[int, dict] = {}
    for record in records:
        if record.worker != NO_WORKER:
            firsts.setdefault(record.worker, record.draws)
    return firsts


def _as_is(sample):
    return sample


class _MarkStarted:
    """The first thing a worker runs: mark the time it started, then the loader's own
    ``worker_init_fn``."""

    def __init__(self, started, inner: Callable | None):
        self.started, self.inner = started, inner

    def __call__(self, worker_id: int) -> None:
        self.started[worker_id] = time.time()
        if self.inner is not None:
            self.inner(worker_id)


class _Recorded:
    """Collate as ``collate`` does, and return ``(Record, batch)``."""

    def __init__(self, collate: Callable):
        self.collate = collate

    def __call__(self, samples):
        batch = self.collate(samples)
        info = get_worker_info()
        return Record(NO_WORKER if info is None else info.id, _next_draws()), batch


def _next_draws(count: int = 2) -> dict:
    """What Python's, numpy's and torch's global generators would draw next, from copies:
    the generators themselves are left as they are."""
    python = random.Random()
    python.setstate(random.getstate())
    numpy = np.random.RandomState()
    numpy.set_state(np.random.get_state())
    generator = torch.Generator().set_state(torch.get_rng_state())
    return {"random": tuple(python.random() for _ in range(count)),
            "numpy": tuple(numpy.random_sample(count).tolist()),
            "torch": tuple(torch.rand(count, generator=generator).tolist())}
