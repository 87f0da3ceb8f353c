"""Graders for notebook 03: the learner's dataset that shuffles before it shards, a loader
to diagnose, and (Going deeper) a buffer size to find.

Exercise 03.1 continues the thread of 02.3: ``MyShuffledIds(size, seed=0)``, graded in
real DataLoaders by :func:`grade_shuffle_before_shard`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from talk_helpers.checks import shuffle_report
from talk_helpers.exercises import Grade, GradeFailure, choice, not_tried, not_yet, passes
from talk_helpers.exercises.loading import HINT_GLOBAL_STREAM, STREAM_NAMES, shared_streams
from talk_helpers.exercises.workers import (
    WORKER_COUNTS,
    checked_class,
    exactly_once_over_workers,
    instance_or_failure,
    main_process_hint,
    read_with_workers,
)

__all__ = ["grade_mystery_shuffle", "grade_shuffle_before_shard", "grade_smallest_buffer"]

SHUFFLE_SIZE = 601  # odd: a remainder for 2 and 3 workers; large enough to judge mixing
SHUFFLE_BATCH = 20

HINT_PER_WORKER_SEEDS = ("with several workers some ids came twice and others never: do all "
                         "workers draw the same permutation? Look at where each worker's "
                         "generator gets its seed")
HINT_NO_SHUFFLE = "the ids come out in storage order: nothing is shuffled"
HINT_SAME_SEED = ("the order must follow from `seed` alone: which generator draws your "
                  "permutation, and what seeds it?")
HINT_SEED_IGNORED = "does your permutation use `seed`?"
HINT_AFTER_SHARD = ("each batch holds ids from one worker's share of the dataset only: a "
                    "batch never mixes the shares. What does your permutation cover?")


def grade_shuffle_before_shard(dataset_class) -> Grade:
    """Exercise 03.1: ``dataset_class(size, seed=0)`` must yield every id of ``range(size)``
    exactly once with 0-3 workers, the same order for the same seed and another for
    another seed, and batches that mix samples from across the dataset."""
    exercise = "03.1"
    early = checked_class(exercise, dataset_class, "MyShuffledIds")
    if early is not None:
        return early
    size, batch = SHUFFLE_SIZE, SHUFFLE_BATCH
    try:
        instance_or_failure(exercise, dataset_class, (size,), {"seed": 0},
                  f"MyShuffledIds({size}, seed=0)")
        records: dict = {}
        orders = exactly_once_over_workers(exercise, lambda: dataset_class(size, seed=0), size,
                                           batch_size=batch,
                                           duplicates_and_gaps_hint=HINT_PER_WORKER_SEEDS,
                                           records=records)
        if orders[0] == sorted(orders[0]):
            return not_yet(exercise, "with num_workers=0 the ids came in order 0, 1, 2, …",
                           HINT_NO_SHUFFLE)
        other_seed = read_with_workers(exercise, dataset_class(size, seed=1), 2,
                                       batch_size=batch, expected=size,
                                       raised_hint=main_process_hint)
        poorly = _poorly_mixed([orders[2], other_seed], size, batch, num_workers=2)
        if poorly:
            return not_yet(exercise, f"with num_workers=2 every id came once, but {poorly}",
                           HINT_AFTER_SHARD)
        again = read_with_workers(exercise, dataset_class(size, seed=0), 0, batch_size=batch,
                                  expected=size)
        if again != orders[0]:
            return not_yet(exercise, "two loaders over MyShuffledIds(size, seed=0) gave two "
                                     "different orders", HINT_SAME_SEED)
        seed_1 = read_with_workers(exercise, dataset_class(size, seed=1), 0, batch_size=batch,
                                   expected=size)
        if seed_1 == orders[0]:
            return not_yet(exercise, "seed=0 and seed=1 gave the same order", HINT_SEED_IGNORED)
        shared = shared_streams({f"the loader with {n} workers": records[n] for n in (2, 3)})
        if shared is not None:
            generator, where = shared
            return not_yet(exercise, f"every id once, one order per seed, well mixed; but "
                                     f"after your __iter__ ran, {STREAM_NAMES[generator]} is "
                                     f"in the same state in {where}: an augmentation drawn "
                                     "from it there would be the same in both",
                           HINT_GLOBAL_STREAM)
    except GradeFailure as failure:
        return failure.grade
    counts = ", ".join(str(n) for n in sorted(WORKER_COUNTS))
    return passes(exercise, f"every id exactly once with {counts} workers, one order per "
                            "seed, batches that mix the whole dataset, and the global random "
                            "generators left to the augmentations")


def _poorly_mixed(orders, size: int, batch_size: int, num_workers: int) -> str | None:
    """What a shuffle that stays inside each worker's share shows, or None: batches mixed
    poorly across storage blocks (contiguous shares) or across ``id % num_workers``
    (modulo shares)."""
    labellings = {"storage blocks": None,
                  f"ids modulo {num_workers}": np.arange(size) % num_workers}
    for name, groups in labellings.items():
        report = shuffle_report(orders, groups=groups, batch_size=batch_size)
        if not report.well_mixed:
            return f"the batches mix {name} poorly (mixing {report.mixing:.2f})"
    return None


def grade_mystery_shuffle(mystery_problem, mystery=None) -> Grade:
    """Exercise 03.2: what is wrong with ``MysteryShuffle``. ``mystery``: its epochs as
    collected (``[(batches, draws), …]``); once answered, the grade shows the findings
    the exercise's ``shuffle_report(…, hold_back=True)`` held back."""
    options = ("missing or duplicated", "order repeats", "poorly mixed", "same augmentations")
    grade = choice("03.2", mystery_problem, options=options, correct="poorly mixed", hints={
        "missing or duplicated": "check_exactly_once passes for both epochs",
        "order repeats": "the order statistics say whether the order changes between epochs",
        "same augmentations": "check_random_draws compares the workers' draws",
    }, explain="it moves whole blocks of 50 neighbouring ids, so a batch holds one or two "
               "classes")
    if grade.passed is None or mystery is None:
        return grade
    from talk_helpers.lessons.datasets.shuffling import labels_of

    report = shuffle_report([np.concatenate(batches) for batches, _ in mystery],
                            groups=labels_of(), batch_size=20)
    return replace(grade, message=f"{grade.message}; the report held back: {report.headline}")


def grade_smallest_buffer(smallest_buffer) -> Grade:
    """Going deeper, exercise 03.3: the smallest worker buffer, a multiple of 50, whose
    mixing score reaches 0.9 with one worker and one shard."""
    exercise = "03.3"
    if smallest_buffer is None:
        return not_tried(exercise, "set smallest_buffer to your answer, a multiple of 50")
    if not isinstance(smallest_buffer, int) or isinstance(smallest_buffer, bool) \
            or smallest_buffer % 50 or not 50 <= smallest_buffer <= 600:
        return not_yet(exercise, f"smallest_buffer must be a multiple of 50 from 50 to 600, "
                                 f"got {smallest_buffer!r}")
    score = _one_shard_mixing(smallest_buffer)
    if score < 0.9:
        return not_yet(exercise, f"a buffer of {smallest_buffer} mixes {score:.2f}",
                       "below 0.9: try larger buffers")
    if smallest_buffer > 50 and _one_shard_mixing(smallest_buffer - 50) >= 0.9:
        return not_yet(exercise, f"a buffer of {smallest_buffer} mixes {score:.2f}",
                       "a smaller multiple of 50 reaches 0.9 too")
    return passes(exercise, f"a buffer of {smallest_buffer} mixes {score:.2f}")


def _one_shard_mixing(buffer_size: int) -> float:
    from talk_helpers.lessons.datasets.shuffling import BufferShuffled, labels_of, simulate_loader

    runs = [np.concatenate(simulate_loader(BufferShuffled(buffer_size=buffer_size, num_shards=1,
                                                          epoch=epoch), 1, 20))
            for epoch in range(2)]
    return shuffle_report(runs, groups=labels_of(), batch_size=20).mixing
