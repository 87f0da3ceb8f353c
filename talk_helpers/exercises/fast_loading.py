"""Graders of notebook 08 (fast loading)."""

from __future__ import annotations

from collections.abc import Callable

from talk_helpers.exercises import Grade, attempt, not_tried, not_yet, passes

__all__ = ["grade_drop_last_flags", "grade_epoch_samples", "grade_mixed"]

SMALL_SAMPLES = 4096
EPOCH_TARGET = 48


def grade_mixed(mixed, small_path) -> Grade:
    """08.1: batches of 64 over the 4,096 ids of ``small_path``, built in 2 workers, every
    id once, and batches that mix both workers' blocks."""
    if mixed is None:
        return not_tried("08.1", "set mixed to an iterable of batches")

    def run() -> Grade:
        from talk_helpers.checks import check_exactly_once
        from talk_helpers.lessons.loading_bench import blocks_per_batch

        batches = list(mixed)
        once = check_exactly_once([b["id"] for b in batches], SMALL_SAMPLES)
        if not once.ok:
            return not_yet("08.1", repr(once), "rebatch what the workers yield, once")
        if max(blocks_per_batch(batches, SMALL_SAMPLES, 2)) < 2:
            return not_yet("08.1", "every id once, but every batch holds one worker's block",
                           "shuffle through a buffer larger than a batch before batching")
        return passes("08.1", "every id once, and batches mix both workers' blocks")

    return attempt("08.1", run, waits_for="reading your batches, built in 2 workers")


def grade_epoch_samples(epoch_samples, pipeline: Callable, shards) -> Grade:
    """08.2: the ``epoch_samples`` that makes one epoch of ``pipeline(shards, 4,
    world_size=4, epoch_samples=...)`` with 2 workers yield 48 samples."""
    if epoch_samples is None:
        return not_tried("08.2", "set epoch_samples to an int")

    def run() -> Grade:
        from torch.utils.data import DataLoader

        from talk_helpers.lessons.loading_bench import check_epoch_samples

        loader = DataLoader(pipeline(shards, 4, world_size=4, epoch_samples=epoch_samples),
                            batch_size=None, num_workers=2)
        check = check_epoch_samples(loader, EPOCH_TARGET, "one epoch")
        if not check.ok:
            return not_yet("08.2", repr(check)[2:],
                           "with_epoch counts batches, in each of the 2 workers")
        return passes("08.2", f"{check.samples} samples per epoch")

    return attempt("08.2", run, waits_for="reading one epoch of your pipeline with 2 workers")


def grade_drop_last_flags(flags, batch_sizes: Callable) -> Grade:
    """08.3: the (sampler, loader) ``drop_last`` flags that give 3 ranks the same number of
    full batches of 64 out of 1,000 samples."""
    if flags is None:
        return not_tried("08.3", "set flags to (sampler_drop_last, loader_drop_last)")

    def run() -> Grade:
        from talk_helpers.checks import check_batch_sizes

        per_rank = [batch_sizes(*flags, rank=rank) for rank in range(3)]
        full = all(check_batch_sizes([range(n) for n in sizes], 64).ok for sizes in per_rank)
        equal = len({len(sizes) for sizes in per_rank}) == 1
        if full and equal:
            return passes("08.3", f"{len(per_rank[0])} full batches on every rank")
        return not_yet("08.3", f"all full: {full}, the same count on every rank: {equal}",
                       "one flag equalises samples per rank, the other drops partial batches")

    return attempt("08.3", run)
