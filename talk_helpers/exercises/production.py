"""Graders for the exercises of notebook 11 (when it breaks in production)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from talk_helpers.checks import (
    batch_bytes,
    check_eval_counts,
    check_shard_coverage,
    check_shm_budget,
)
from talk_helpers.exercises import Grade, attempt, is_stub, not_tried, not_yet, passes

__all__ = ["grade_eval_indices", "grade_shard_count", "grade_shm_fit"]

SHM_BYTES = 64 * 2**20
IMAGE_BATCH = 32
SHARD_SAMPLES, SHARD_RANKS, SHARD_WORKERS, SHARD_BATCH = 96, 4, 3, 4


def grade_shm_fit(my_loader) -> Grade:
    """Exercise 11.1: ``my_loader()`` returns a DataLoader of float32 images in batches of
    32, loaded in workers, whose batches in flight fit a 64 MiB /dev/shm."""
    exercise = "11.1"
    if is_stub(my_loader):
        return not_tried(exercise, "write my_loader() so that it returns a DataLoader")

    def run() -> Grade:
        loader = my_loader()
        if not isinstance(loader, DataLoader):
            return not_yet(exercise, f"my_loader() returned {type(loader).__name__}, "
                                     "not a DataLoader")
        if loader.batch_size != IMAGE_BATCH or loader.num_workers < 1:
            return not_yet(exercise, f"keep batch_size={IMAGE_BATCH} and at least one worker "
                                     f"(got {loader.batch_size} and {loader.num_workers})")
        batch = next(iter(loader))
        if batch.dtype != torch.float32:
            return not_yet(exercise, f"the images must stay float32, got {batch.dtype}",
                           "the lesson's fix changed the images; this one may not")
        report = check_shm_budget(batch_bytes(batch), num_workers=loader.num_workers,
                                  prefetch_factor=loader.prefetch_factor,
                                  shm_bytes=SHM_BYTES)
        if report.ok:
            return passes(exercise, repr(report)[2:])
        return not_yet(exercise, repr(report)[2:],
                       "count the batches in flight: workers × prefetch_factor + 2; which "
                       "of those can you lower?")

    return attempt(exercise, run, waits_for="reading a batch through your loader's workers")


def grade_eval_indices(my_eval_indices) -> Grade:
    """Exercise 11.2: ``my_eval_indices(dataset_size, rank, world_size)`` deals every
    sample to exactly one rank, for many sizes and world sizes."""
    exercise = "11.2"
    if is_stub(my_eval_indices):
        return not_tried(exercise, "write my_eval_indices(dataset_size, rank, world_size)")

    def run() -> Grade:
        for world_size in (1, 2, 3, 4, 8):
            for size in (1, 5, 11, 12, 101):
                per_rank = [list(my_eval_indices(size, r, world_size))
                            for r in range(world_size)]
                report = check_eval_counts(per_rank, size)
                if not report.ok:
                    return not_yet(exercise, f"{size} samples on {world_size} ranks: "
                                             f"{repr(report)[2:]}",
                                   "each index in exactly one rank, with no padding")
        return passes(exercise, "every sample evaluated exactly once, for every size and "
                                "world size tried")

    return attempt(exercise, run)


def grade_shard_count(my_shards) -> Grade:
    """Exercise 11.3: the smallest count of equal shards of 96 samples that keeps all
    4 ranks × 3 workers busy with equal batches per rank (batches of 4)."""
    exercise = "11.3"
    if my_shards is None:
        return not_tried(exercise, "set my_shards to a number of shards")

    def run() -> Grade:
        if not isinstance(my_shards, int) or isinstance(my_shards, bool) or my_shards < 1 \
                or SHARD_SAMPLES % my_shards:
            return not_yet(exercise, f"{my_shards!r} does not cut {SHARD_SAMPLES} samples "
                                     "into equal shards")
        report = _shards(my_shards)
        if report.status != "pass":
            return not_yet(exercise, repr(report)[2:], "every worker of every rank needs "
                                                       "at least one shard")
        smaller = [n for n in range(1, my_shards)
                   if SHARD_SAMPLES % n == 0 and _shards(n).status == "pass"]
        if smaller:
            return not_yet(exercise, f"{my_shards} shards work, but fewer do too",
                           "count the workers of all ranks together")
        return passes(exercise, repr(report)[2:])

    return attempt(exercise, run)


def _shards(n: int):
    return check_shard_coverage([SHARD_SAMPLES // n] * n, world_size=SHARD_RANKS,
                                num_workers=SHARD_WORKERS, batch_size=SHARD_BATCH)
