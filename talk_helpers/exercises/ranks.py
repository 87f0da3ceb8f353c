"""Graders of notebook 05: idle workers, DistributedSampler's counts, a diagnosis, and the
talk's exercise "left to the reader": the whole dataset, audited in a real world.

:func:`grade_whole_dataset` audits the learner's ``make_loader(rank, world_size, epoch)``
in a gloo world of 2 ranks × 2 workers for 2 epochs, and passes when nothing but the
declared drop or padding is flagged. It first reads each rank's dataset here, without a
process group, so that a dataset asking ``torch.distributed`` for its rank in ``__iter__``
(which a spawned worker cannot) fails under every start method, fork included.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import replace
from itertools import islice

import numpy as np
from torch.utils.data import DataLoader, DistributedSampler

from talk_helpers.arguments import require_int
from talk_helpers.audit import audit
from talk_helpers.audit.core import build_report
from talk_helpers.checks import check_exactly_once, ids_of
from talk_helpers.exercises import (
    Grade,
    GradeFailure,
    choice,
    is_stub,
    not_tried,
    not_yet,
    passes,
    raised,
    start_up,
)
from talk_helpers.exercises.loading import (
    HINT_GLOBAL_STREAM,
    STREAM_NAMES,
    read_loader,
    recording_loader,
    shared_streams,
)
from talk_helpers.model.simulate import simulate

__all__ = ["DIAGNOSES", "EQUAL_BY", "NUM_WORKERS", "WORLD_SIZE", "grade_diagnosis",
           "grade_idle_workers", "grade_sampler_counts", "grade_whole_dataset"]

WORLD_SIZE, NUM_WORKERS, EPOCHS = 2, 2, 2
EQUAL_BY = ("drop", "pad")
DIAGNOSES = ("no rank sharding", "no worker sharding", "idle workers",
             "unequal batches per rank", "correct")
WHOLE = "05.4"

RANK_IN_WORKER = ("__iter__ runs in a DataLoader worker, and a worker started by spawn or "
                  "forkserver has no process group: use the rank and world size given to "
                  "__init__")
HINT_ENDLESS = "does __iter__ end once its share is read?"
NO_WORKER_INFO = ("with num_workers=0 get_worker_info() returns None: the dataset is then "
                  "its rank's only reader, worker 0 of 1")


# ------------------------------------------------------------------ the small exercises


def grade_idle_workers(answer) -> Grade:
    """Exercise 05.1: the (rank, worker) pairs the talk's nested modulo leaves idle with
    2 ranks and 6 workers per rank (asked of :func:`talk_helpers.model.simulate`)."""
    exercise = "05.1"
    if answer is None:
        return not_tried(exercise, "set my_idle to a list of (rank, worker) pairs")
    try:
        pairs = sorted({(int(r), int(w)) for r, w in answer})
    except (TypeError, ValueError):
        return not_yet(exercise, f"my_idle must be a list of (rank, worker) pairs, got "
                                 f"{answer!r}")
    idle = simulate([60], nodes=2, workers=6, micro_batch_size=5,
                    policy="nested_modulo").idle_workers
    if pairs == idle:
        return passes(exercise, f"{len(idle)} of 12 workers never read a sample")
    wrong = [p for p in pairs if p not in idle]
    if wrong:
        return not_yet(exercise, f"{wrong[0]} reads samples",
                       "rank r keeps only ids i with i % 2 == r: which worker ids w can "
                       "such an i match with i % 6 == w?")
    return not_yet(exercise, f"{len(pairs)} pairs named, and more are idle",
                   "look at both ranks")


def grade_sampler_counts(repeated, dropped) -> Grade:
    """Exercise 05.2: DistributedSampler over 10 samples on 4 ranks: how many indices are
    read twice with drop_last=False, how many samples are never read with drop_last=True."""
    exercise = "05.2"
    if repeated is None and dropped is None:
        return not_tried(exercise, "set my_repeated and my_dropped to two ints")

    def read(drop_last: bool) -> list[int]:
        return [int(i) for r in range(4)
                for i in DistributedSampler(list(range(10)), num_replicas=4, rank=r,
                                            shuffle=False, drop_last=drop_last)]

    right = (len(read(False)) - 10, 10 - len(set(read(True))))
    answers = (repeated, dropped)
    if any(isinstance(a, bool) or not isinstance(a, int | np.integer) for a in answers):
        return not_yet(exercise, f"both answers must be ints, got {answers!r}")
    hint = "every rank gets the same number of indices: how many is that, each way?"
    if tuple(int(a) for a in answers) == right:
        return passes(exercise, f"{right[0]} read twice with drop_last=False, "
                                f"{right[1]} never read with drop_last=True")
    which = "my_repeated" if int(repeated) != right[0] else "my_dropped"
    return not_yet(exercise, f"{which} is not it", hint)


def grade_diagnosis(answer) -> Grade:
    """Exercise 05.3: what is wrong with ``make_mystery_loader``, read from its audit (run
    with ``hold_back=True``); once answered, the grade shows the cause it held back."""
    hints = {
        "no rank sharding": "count how many times each id is read, and compare it with "
                            "world_size and with the loader's num_workers",
        "idle workers": "the audit's samples-per-worker line shows who read what",
        "unequal batches per rank": "the audit's batches-per-rank line says how many each "
                                    "rank took",
        "correct": "is every id read exactly once?",
    }
    grade = choice("05.3", answer, options=DIAGNOSES, correct="no worker sharding",
                   hints=hints, explain="each id is read once by every worker of the rank "
                                        "that holds it")
    if grade.passed is None:
        return grade
    return replace(grade, message=f"{grade.message}; the audit's cause, held back: "
                                  f"{_mystery_causes()}")


@functools.cache
def _mystery_causes() -> str:
    from talk_helpers.lessons.datasets.ddp import make_mystery_loader

    report = audit(make_mystery_loader, world_size=2, epochs=1, expected=24, in_process=True)
    return "; ".join(c.lines()[0] for c in report.causes)


# ------------------------------------------------------------------ the whole dataset


def grade_whole_dataset(make_loader: Callable, *, size: int, equal_by: str | None,
                        timeout_s: float | None = None) -> Grade:
    """Exercise 05.4: ``make_loader(rank, world_size, epoch)`` over ``MyDataset``, audited
    in a real world of 2 ranks × 2 workers for 2 epochs, shuffle expected; then rank 0's
    and rank 1's workers read again here, to see what they leave in the global random
    generators.

    ``size``: the ids one epoch holds (0..size-1). ``equal_by``: what the dataset does so
    that every rank gets as many batches: ``"drop"`` (a few ids sit out each epoch),
    ``"pad"`` (a few are read twice) or None (neither). ``timeout_s``: the audit's
    deadline (default :func:`~talk_helpers.exercises.start_up.audit_deadline_s`).
    """
    size = require_int("size", size, minimum=1)
    if is_stub(make_loader):
        return not_tried(WHOLE, "write MyDataset and make_loader, run their cell, then this one")
    if not callable(make_loader):
        return not_yet(WHOLE, f"pass your make_loader function, got {make_loader!r}")
    if equal_by is not None and equal_by not in EQUAL_BY:
        return not_yet(WHOLE, f"equal_by must be 'drop', 'pad' or None, got {equal_by!r}")
    try:
        loaders = [make_loader(rank, WORLD_SIZE, 0) for rank in range(WORLD_SIZE)]
        if any(is_stub(type(getattr(loader, "dataset", None))) for loader in loaders):
            return not_tried(WHOLE, "write MyDataset's __iter__, run its cell, then this one")
        _read_in_this_process(loaders, size)
        report = start_up.audited(WHOLE, make_loader, world_size=WORLD_SIZE,
                                  workers=NUM_WORKERS, epochs=EPOCHS, timeout_s=timeout_s,
                                  expected=size, shuffle=True)
        if report.error is not None:
            return not_yet(WHOLE, report.error.replace("the audit could not finish: ", ""),
                           _error_hint(report.error))
        grade = _judge(report, size, equal_by)
        _streams_apart(make_loader, size)
        return grade
    except GradeFailure as failed:
        return failed.grade
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        return raised(WHOLE, exc, _error_hint(str(exc)))


def _streams_apart(make_loader: Callable, size: int) -> None:
    """Rank 0's loader in epochs 0 and 1 and rank 1's in epoch 0, read here through their
    own workers: does the dataset leave a global generator in the same state in two
    workers, two epochs or two ranks? Augmentations drawn from it would agree there."""
    runs = {}
    for name, rank, epoch in (("rank 0, epoch 0", 0, 0), ("rank 1, epoch 0", 1, 0),
                              ("rank 0, epoch 1", 0, 1)):
        loader = make_loader(rank, WORLD_SIZE, epoch)
        again = recording_loader(loader.dataset, batch_size=loader.batch_size,
                                 num_workers=loader.num_workers,
                                 worker_init_fn=loader.worker_init_fn,
                                 generator=loader.generator,
                                 multiprocessing_context=loader.multiprocessing_context
                                 or _quickest_start())
        _, runs[name] = read_loader(WHOLE, again, where=f"{name}, read again here",
                                    max_batches=4 * size, raised_hint=_error_hint,
                                    endless_hint=HINT_ENDLESS)
    shared = shared_streams(runs, across=[("rank 0, epoch 0", "rank 1, epoch 0"),
                                          ("rank 0, epoch 0", "rank 0, epoch 1")])
    if shared is not None:
        generator, where = shared
        raise _failure(f"the audit passes, but after your __iter__ ran, "
                       f"{STREAM_NAMES[generator]} is in the same state in "
                       f"{where}: an augmentation drawn from it there "
                       "would be the same", HINT_GLOBAL_STREAM)


def _quickest_start() -> str | None:
    """fork on Linux, else the default. What a worker's global generators hold after the
    dataset ran does not depend on how the worker started (DataLoader seeds them the same
    way), and forked workers cost milliseconds where spawned ones cost an interpreter."""
    return "fork" if sys.platform.startswith("linux") else None


def _failure(message: str, hint: str | None = None) -> GradeFailure:
    """A *not yet* for exercise 05.4, to raise."""
    return GradeFailure(not_yet(WHOLE, message, hint))


def _read_in_this_process(loaders: list, size: int) -> None:
    """Each rank's dataset read here, without a process group or a worker: do the ranks
    share the epoch out? (What the workers do is the audit's to say.)"""
    for rank, loader in enumerate(loaders):
        if not isinstance(loader, DataLoader):
            raise _failure(f"make_loader({rank}, {WORLD_SIZE}, 0) returned "
                           f"{type(loader).__name__}: return a DataLoader")
        if loader.num_workers != NUM_WORKERS:
            raise _failure(f"make_loader's DataLoader has num_workers="
                           f"{loader.num_workers}; this exercise reads with "
                           f"{NUM_WORKERS} workers per rank")
    per_rank = []
    for rank, loader in enumerate(loaders):
        ids = list(islice(iter(loader.dataset), 2 * size + 1))
        if len(ids) > 2 * size:
            raise _failure(f"rank {rank}'s dataset, read here without "
                           f"workers, yields more than {2 * size} samples",
                           HINT_ENDLESS)
        per_rank.append(ids_of(ids))
    report = check_exactly_once(per_rank, size)
    line = _line(report)
    every_rank_all = all(np.array_equal(np.sort(per_rank[0]), np.sort(ids)) for ids in per_rank)
    if every_rank_all and report.duplicated_count:
        if _asks_torch_distributed(type(loaders[0].dataset)):
            raise _failure(f"read without a process group, every rank reads the "
                           f"same ids ({line})", RANK_IN_WORKER)
        raise _failure(f"every rank reads the same ids ({line})",
                       "shard by rank as well as by worker")
    if report.duplicated_count and report.missing_count:
        raise _failure(f"the ranks' shares overlap and leave gaps ({line})",
                       "the ranks drew different permutations: seed it with what every "
                       "rank shares, never the rank")


def _judge(report, size: int, equal_by: str | None) -> Grade:
    """The audit's verdict, the declared drop or padding allowed, plus the shuffle order."""
    limit = WORLD_SIZE * NUM_WORKERS - 1
    onces = [c.exactly_once for c in report.checks]
    worst = max(onces, key=lambda o: o.duplicated_count + o.missing_count)
    design = _declared(worst, equal_by, limit) if not worst.ok else {}
    if design is None:
        raise GradeFailure(_once_problem(report, worst, equal_by, limit))
    final = build_report(report.world.results, expected=size, shuffle=True, world=report.world,
                         **design) if design else report
    if not all(c.batch_counts.ok for c in final.checks):
        counts = next(c.batch_counts.counts for c in final.checks if not c.batch_counts.ok)
        raise _failure(f"batches per rank {list(counts)}: DDP would block at the "
                       "first step a rank no longer takes",
                       "every rank's share of an epoch must have the same length: drop "
                       "or pad, and say which in equal_by")
    if not all(c.once_ok for c in final.checks):
        raise GradeFailure(_once_problem(final, worst, equal_by, limit))
    if final.order_repeats:
        raise _failure("an epoch repeats the previous epoch's order",
                       "the permutation must change with the epoch: set_epoch, called "
                       "by make_loader")
    idle = max((c.idle_workers for c in final.checks), key=len)
    if idle:
        raise _failure(f"{len(idle)} of {WORLD_SIZE * NUM_WORKERS} workers never "
                       "read a sample",
                       "two separate modulos leave workers idle: give each "
                       "(rank, worker) pair a slot of its own")
    stale = _same_share_every_epoch(final)
    if stale:
        raise _failure(f"{stale} reads the same ids in both epochs, only in "
                       "another order",
                       "you shuffle inside a share: shuffle the whole dataset first, "
                       "then shard it (notebook 03)")
    if final.poorly_mixed:
        raise _failure(f"the audit says: {final._title()}",
                       "shuffle the whole dataset first, then shard it")
    if not final.ok or final.status != "pass":
        raise _failure(f"the audit says: {final._title()}")
    return passes(WHOLE, f"{final._title()}, and every rank and worker reads other ids each "
                         "epoch")


def _declared(once, equal_by: str | None, limit: int) -> dict | None:
    """The audit's by-design argument for what ``once`` shows, if the learner declared it
    and it is small (at most ``limit`` ids); else None."""
    if once.unexpected_count:
        return None
    dup, miss = once.duplicated_count, once.missing_count
    if equal_by == "drop" and not dup and 0 < miss <= limit:
        return {"dropped_by_design": miss}
    twice = set(once.duplicate_times.tolist()) == {2}
    if equal_by == "pad" and not miss and 0 < dup <= limit and twice:
        return {"repeated_by_design": dup}
    return None


def _once_problem(report, once, equal_by: str | None, limit: int) -> Grade:
    line = _line(once)
    dup, miss = once.duplicated_count, once.missing_count
    if once.unexpected_count:
        return not_yet(WHOLE, line, "yield sample ids from 0 to size - 1 only")
    times = set(once.duplicate_times.tolist())
    if times == {NUM_WORKERS} and dup >= once.expected_count - limit:
        return not_yet(WHOLE, f"every id is read by both workers of its rank ({line})",
                       "shard by worker as well as by rank")
    if dup and miss:
        return not_yet(WHOLE, f"the shares overlap and leave gaps ({line})",
                       "the workers drew different permutations: every worker of every "
                       "rank must draw the same one, from seed and epoch")
    word = {"drop": "drops", "pad": "pads"}
    if miss and not dup:
        if miss <= limit and equal_by != "drop":
            return not_yet(WHOLE, f"{miss} ids are never read each epoch ({line})",
                           f"if that is your drop, say so: equal_by='drop' "
                           f"(it {word.get(equal_by, 'does neither')} now)")
        return not_yet(WHOLE, line, f"drop at most {limit} ids: what makes the ranks equal")
    if dup and not miss:
        if dup <= limit and equal_by != "pad":
            return not_yet(WHOLE, f"{dup} ids are read twice each epoch ({line})",
                           f"if that is your padding, say so: equal_by='pad' "
                           f"(it {word.get(equal_by, 'does neither')} now)")
        return not_yet(WHOLE, line, f"pad with at most {limit} ids, each read twice")
    return not_yet(WHOLE, line)


def _same_share_every_epoch(report) -> str | None:
    """The first rank or (rank, worker) that read the same set of ids in every epoch."""
    per_epoch = [[report.world.results[r].epochs[e] for r in range(report.world_size)]
                 for e in range(report.n_epochs)]

    def shares(seen) -> dict:
        out = {"rank": frozenset(np.concatenate(seen.batches).tolist()) if seen.batches
               else frozenset()}
        for worker, batch in zip(seen.workers, seen.batches, strict=True):
            out.setdefault(worker, set()).update(batch.tolist())
        return out

    for rank in range(report.world_size):
        first = shares(per_epoch[0][rank])
        for key in first:
            if all(shares(per_epoch[e][rank]).get(key) == first[key]
                   for e in range(1, report.n_epochs)):
                return f"rank {rank}" if key == "rank" else f"worker {key} of rank {rank}"
    return None


def _asks_torch_distributed(cls: type) -> bool:
    for klass in cls.__mro__:  # the class and those it inherits from
        with contextlib.suppress(OSError, TypeError):
            if any(word in inspect.getsource(klass) for word in ("get_rank", "get_world_size")):
                return True
    return False


def _error_hint(text: str) -> str | None:
    if "process group" in text:
        return RANK_IN_WORKER
    if "NoneType" in text:
        return NO_WORKER_INFO
    return None


def _line(once) -> str:
    return repr(once).splitlines()[0].lstrip("✘✔ ")
