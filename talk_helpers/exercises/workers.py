"""Graders for notebooks 01 and 02, and the learner's first iterable dataset, sharded by
worker (02.3, the thread 03-05 continue with :func:`read_with_workers` and
:func:`exactly_once_over_workers`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch.utils.data import DataLoader

from talk_helpers.checks import check_exactly_once, ids_of
from talk_helpers.exercises import (
    Grade,
    GradeFailure,
    announce,
    attempt,
    choice,
    is_stub,
    not_tried,
    not_yet,
    passes,
)
from talk_helpers.exercises.loading import error_line, read_loader, recording_loader

__all__ = [
    "WORKER_COUNTS", "GradeFailure", "checked_class", "exactly_once_over_workers",
    "grade_batch_count", "grade_batch_worker", "grade_dropped_ids", "grade_index_batches",
    "grade_mystery_loader", "grade_seeded_shuffle", "grade_worker_sharding",
    "instance_or_failure", "main_process_hint", "read_with_workers",
]

WORKER_COUNTS = (0, 2, 3, 1)  # 0 first: it runs in this process and fails fastest

HINT_IMPORTABLE = ("a worker started with spawn or forkserver cannot import a class from an "
                   "ordinary cell: start the cell that defines it with %%importable")
HINT_MAIN_PROCESS = ("with num_workers=0 there is no worker process: the main process iterates "
                     "the dataset itself. What does get_worker_info() return there?")
HINT_NO_SHARDING = ("every worker yielded every id: each worker iterates its own copy of the "
                    "dataset. Which worker is this, and how many are there? get_worker_info() "
                    "knows")
HINT_OVERLAP = "some ids reached two workers: the workers' shares overlap"
HINT_OVERLAP_AND_GAPS = ("some ids reached two workers and others none: the workers' shares "
                         "overlap and leave gaps")
HINT_REMAINDER = ("the ids don't split evenly over the workers, and the ids left over belong "
                  "to no worker")
HINT_GAPS = "some ids belong to no worker: together the shares must cover every id"
HINT_OUTSIDE = "yield the ids of range(self.size) themselves, as plain ints, and nothing else"
HINT_ENDLESS = "does your __iter__ end once every id has been yielded?"


# --- the learner's dataset in real DataLoaders ---------------------------------------


def read_with_workers(exercise: str, dataset, num_workers: int, *, batch_size: int,
                      expected: int, raised_hint: Callable[[str], str | None] | None = None,
                      records: list | None = None) -> list[int]:
    """Every id a real ``DataLoader(dataset, batch_size, num_workers)`` yields, in order;
    :class:`GradeFailure` as :func:`~talk_helpers.exercises.loading.read_loader` raises it,
    or when the dataset yields far more than ``expected`` ids. ``raised_hint(error_line)``
    picks an error's hint; ``records`` gets every batch's record."""
    limit = expected * (max(num_workers, 1) + 1) + batch_size
    where = f"with num_workers={num_workers}"
    loader = recording_loader(dataset, batch_size=batch_size, num_workers=num_workers)
    batches, found = read_loader(exercise, loader, where=where,
                                 max_batches=limit // batch_size + 1,
                                 raised_hint=raised_hint, endless_hint=HINT_ENDLESS)
    if records is not None:
        records.extend(found)
    try:
        ids = ids_of(batches).tolist()
    except (TypeError, ValueError) as exc:
        raise GradeFailure(not_yet(exercise, f"{where}, your dataset yielded something other "
                                             f"than ids: {exc}", HINT_OUTSIDE)) from None
    if len(ids) >= limit:
        raise GradeFailure(not_yet(exercise, f"{where}, your dataset yielded more than "
                                             f"{limit} ids for {expected} expected",
                                   HINT_ENDLESS))
    return ids


def main_process_hint(line: str) -> str | None:
    """The hint for an error a dataset raised: ``None`` from get_worker_info() or none."""
    return HINT_MAIN_PROCESS if "NoneType" in line else None


def instance_or_failure(exercise: str, dataset_class, args: tuple, kwargs: dict,
                        signature: str):
    """``dataset_class(*args, **kwargs)``, or :class:`GradeFailure` naming ``signature``."""
    try:
        return dataset_class(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise GradeFailure(not_yet(exercise, f"creating {signature} raised {error_line(exc)}",
                               f"write __init__ so that {signature} works")) from None


def exactly_once_over_workers(exercise: str, make: Callable[[], object], size: int, *,
                              batch_size: int, worker_counts: Sequence[int] = WORKER_COUNTS,
                              duplicates_and_gaps_hint: str = HINT_OVERLAP_AND_GAPS,
                              records: dict | None = None) -> dict[int, list[int]]:
    """Read a fresh ``make()`` with each worker count; every id of ``range(size)`` must come
    exactly once. Returns the ids in order per worker count, or raises
    :class:`GradeFailure` with the first problem's hint (``duplicates_and_gaps_hint`` when
    ids come twice and others never). ``records`` gets each count's batch records."""
    orders = {}
    for num_workers in worker_counts:
        found: list = []
        ids = read_with_workers(exercise, make(), num_workers, batch_size=batch_size,
                                expected=size, raised_hint=main_process_hint, records=found)
        if records is not None:
            records[num_workers] = found
        report = check_exactly_once(ids, size)
        if not report.ok:
            raise GradeFailure(not_yet(exercise, f"with num_workers={num_workers}: {report!r}",
                                   _sharding_hint(report, num_workers, size,
                                                  duplicates_and_gaps_hint)))
        orders[num_workers] = ids
    return orders


def _sharding_hint(report, num_workers: int, size: int, duplicates_and_gaps_hint: str) -> str:
    if report.unexpected_count:
        return HINT_OUTSIDE
    if report.duplicated_count and report.missing_count:
        return duplicates_and_gaps_hint
    if report.duplicated_count:
        every_copy = (num_workers > 1 and report.duplicated_count == size
                      and set(report.duplicates.values()) == {num_workers})
        return HINT_NO_SHARDING if every_copy else HINT_OVERLAP
    if report.missing_count < max(num_workers, 1) and size % max(num_workers, 1):
        return HINT_REMAINDER
    return HINT_GAPS


def checked_class(exercise: str, dataset_class, name: str) -> Grade | None:
    """None when ``dataset_class`` can be run; else *not tried* for an untouched stub, *not
    yet* for a class no spawned worker can import (TypeError for no class at all)."""
    if not isinstance(dataset_class, type):
        raise TypeError(f"pass the class itself, e.g. {name}, not "
                        f"{type(dataset_class).__name__} {dataset_class!r}")
    if is_stub(dataset_class):
        return not_tried(exercise, f"fill in __iter__ of {name} in the cell above, run that "
                                   "cell, then run this one")
    if dataset_class.__module__ == "__main__":
        return not_yet(exercise, f"{name} is defined in an ordinary cell", HINT_IMPORTABLE)
    return None


# --- 02.3: MyShardedIds ---------------------------------------------------------------

SHARDING_SIZE = 23  # odd, and not a multiple of 3: a remainder for 2 and for 3 workers
SHARDING_BATCH = 4


def grade_worker_sharding(dataset_class) -> Grade:
    """Exercise 02.3: ``dataset_class(size)`` must yield every id of ``range(size)`` exactly
    once over the DataLoader's workers, with 0, 1, 2 and 3 workers (real DataLoaders)."""
    exercise = "02.3"
    early = checked_class(exercise, dataset_class, "MyShardedIds")
    if early is not None:
        return early
    size = SHARDING_SIZE
    try:
        instance_or_failure(exercise, dataset_class, (size,), {}, f"MyShardedIds({size})")
        exactly_once_over_workers(exercise, lambda: dataset_class(size), size,
                                  batch_size=SHARDING_BATCH)
    except GradeFailure as failure:
        return failure.grade
    counts = ", ".join(str(n) for n in sorted(WORKER_COUNTS))
    return passes(exercise, f"every id of range({size}) exactly once with {counts} workers")


# --- 01: predictions and diagnoses ------------------------------------------------------


def grade_index_batches(my_batches) -> Grade:
    """Exercise 01.1: the index batches ``DataLoader(MapStyleIds(10), batch_size=4)``'s main
    process sends, as a list of lists."""
    exercise = "01.1"
    if my_batches is None:
        return not_tried(exercise, "set my_batches to your prediction, a list of lists of ids")
    truth = list(DataLoader(range(10), batch_size=4).batch_sampler)
    try:
        mine = [list(batch) for batch in my_batches]
    except TypeError:
        return not_yet(exercise, f"my_batches must be a list of lists, got {my_batches!r}")
    if mine == truth:
        return passes(exercise, f"{truth}: the last batch holds the ids left over")
    hint = ("the batch sampler takes the sampler's indices in order and cuts them into groups "
            "of batch_size: what happens to the indices left over?")
    return not_yet(exercise, f"{mine} is not what the sampler sends", hint)


def grade_seeded_shuffle(loader) -> Grade:
    """Exercise 01.2: a loader over 12 ids, batches of 4, every id once, shuffled, in one
    order whatever ran before: two copies, read after two global torch seeds, agree."""
    exercise = "01.2"
    if loader is None:
        return not_tried(exercise, "set loader to your DataLoader")
    if not isinstance(loader, DataLoader):
        raise TypeError(f"loader must be a DataLoader, got {type(loader).__name__}")

    def run() -> Grade:
        first, second = (_order_after_global_seed(loader, seed) for seed in (1, 2))
        report = check_exactly_once(first, 12)
        if not report.ok:
            return not_yet(exercise, f"not every id exactly once: {report!r}",
                           "build the loader over MapStyleIds(12)")
        if first == sorted(first):
            return not_yet(exercise, "every id exactly once, but in storage order",
                           "which DataLoader argument swaps the sampler for a random one?")
        if first != second:
            return not_yet(exercise, "shuffled, but from the global torch RNG: the order "
                                     "changes with whatever ran before",
                           "DataLoader can take its own torch.Generator: seed one")
        return passes(exercise, "every id once, shuffled, in the same order whatever ran before")

    workers = loader.num_workers
    return attempt(exercise, run, waits_for=f"reading two copies of your loader through "
                                            f"{workers} workers each" if workers else None)


def _order_after_global_seed(loader: DataLoader, seed: int) -> list[int]:
    """The ids a copy of ``loader`` yields after the global torch seed ``seed`` (here only)."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        copied = copy.deepcopy(loader, {id(getattr(loader, "_iterator", None)): None})
        return [i for batch in copied for i in ids_of(batch).tolist()]


def grade_batch_worker(my_worker) -> Grade:
    """Exercise 01.3: which worker builds batch 4 of ``MapStyleIds(12)``, batches of 2,
    3 workers; a real run answers."""
    exercise = "01.3"
    if my_worker is None:
        return not_tried(exercise, "set my_worker to 0, 1 or 2")
    from talk_helpers.lessons.trace import run_loader

    with announce(exercise, "asking a real DataLoader with 3 workers"):
        actual = run_loader(range(12), batch_size=2, num_workers=3).batches[4].worker
    return choice(exercise, my_worker, options=(0, 1, 2), correct=actual,
                  hints={w: "the main process hands tasks out in turn, one per worker, and "
                            "batch k comes from task k" for w in (0, 1, 2)},
                  explain=f"worker {actual}: task k goes to worker k % 3")


# --- 02: predictions and a diagnosis -----------------------------------------------------


def _worker_batches(exercise: str, streams, batch_size, **kwargs) -> list:
    from talk_helpers.lessons.datasets.basics import WorkerStreams

    with announce(exercise, f"asking a real DataLoader with {len(streams)} workers"):
        return list(DataLoader(WorkerStreams(streams), batch_size=batch_size,
                               num_workers=len(streams), **kwargs))


def grade_batch_count(my_count) -> Grade:
    """Exercise 02.1: how many batches ``DataLoader(IterableIds(30), batch_size=4,
    num_workers=2)`` yields; a real run answers."""
    exercise = "02.1"
    if my_count is None:
        return not_tried(exercise, "set my_count to your prediction, an int")
    actual = len(_worker_batches(exercise, [range(30)] * 2, 4))
    if my_count == actual:
        return passes(exercise, f"{actual}: each worker yields all 30 ids, in 7 batches of 4 "
                                "and one of 2")
    hints = {8: "that is one worker's batches: how many workers yield the 30 ids?",
             15: "each worker batches its own ids, so each one ends with its own partial batch",
             7: "each worker batches its own ids, so each one ends with its own partial batch"}
    return not_yet(exercise, f"{my_count!r} is not it",
                   hints.get(my_count, "count one worker's batches first, then the workers"))


def grade_dropped_ids(my_dropped) -> Grade:
    """Exercise 02.2: how many of 30 ids, sharded by worker (modulo, 2 workers), batches of
    8, ``drop_last=True`` drops; a real run answers."""
    exercise = "02.2"
    if my_dropped is None:
        return not_tried(exercise, "set my_dropped to your prediction, an int")
    kept = _worker_batches(exercise, [range(0, 30, 2), range(1, 30, 2)], 8, drop_last=True)
    actual = 30 - check_exactly_once(kept, 30).unique_count
    if my_dropped == actual:
        return passes(exercise, f"{actual} ids dropped: each worker's 15 ids fill one batch of 8 "
                                "and drop the other 7")
    hints = {6: "that is what a map-style dataset drops, where the main process batches: "
                "who batches here?",
             7: "that is one worker's remainder: how many workers drop theirs?"}
    return not_yet(exercise, f"{my_dropped!r} is not it",
                   hints.get(my_dropped, "each worker batches, and drops, its own share"))


def grade_mystery_loader(my_cause) -> Grade:
    """Exercise 02.4: what is wrong with ``mystery_loader()``."""
    return choice("02.4", my_cause, options=("a", "b", "c", "d"), correct="b", hints={
        "a": "the check counts no duplicated id",
        "c": "this loader does not drop anything it batched: every batch is full",
        "d": "one id is missing",
    }, explain="(b): 25 // 2 = 12 ids per worker, so id 24 belongs to no worker")
