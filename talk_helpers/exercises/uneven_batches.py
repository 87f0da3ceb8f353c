"""Graders of notebook 06 (uneven batches and hangs)."""

from __future__ import annotations

from talk_helpers.arguments import is_int
from talk_helpers.exercises import (
    Grade,
    attempt,
    choice,
    is_stub,
    not_tried,
    not_yet,
    passes,
    start_up,
)

__all__ = ["grade_even_loader", "grade_fixed_count", "grade_hanging_shards",
           "grade_mystery_hang"]

HANGING_LAYOUT = dict(dataset_size=1003, nodes=2, workers=2, micro_batch_size=8)
FIXED_COUNT_SHARDS = (7, 2, 5, 5, 3)


def grade_hanging_shards(my_shards) -> Grade:
    """06.1: an even shard count in 2..40 for which 1,003 samples on 2 ranks × 2 workers,
    micro-batch 8, hang."""
    from talk_helpers.model.simulate import shard_sizes_for, simulate

    if my_shards is None:
        return not_tried("06.1", "set my_shards to an even int between 2 and 40")
    if not is_int(my_shards) or my_shards % 2 or not 2 <= my_shards <= 40:
        return not_yet("06.1", f"{my_shards!r} is not an even int between 2 and 40")
    layout = dict(HANGING_LAYOUT)
    sim = simulate(shard_sizes_for(layout.pop("dataset_size"), my_shards), **layout)
    if sim.ok:
        return not_yet("06.1", f"{my_shards} shards: {sim.verdict[2:]}",
                       "try every even count with simulate(shard_sizes_for(1003, s), ...)")
    return passes("06.1", f"{my_shards} shards hang: batches per rank {sim.batches_per_rank}")


def grade_fixed_count(my_steps, my_skipped) -> Grade:
    """06.2: with shards [7, 2, 5, 5, 3] on 2 ranks × 2 workers, micro-batch 2, how many
    steps can every rank take with a fixed count, and how many samples does it skip?"""
    from talk_helpers.model.simulate import simulate

    if my_steps is None and my_skipped is None:
        return not_tried("06.2", "set my_steps and my_skipped to two ints")
    sim = simulate(list(FIXED_COUNT_SHARDS), nodes=2, workers=2, micro_batch_size=2)
    steps = min(sim.batches_per_rank)
    skipped = sum(FIXED_COUNT_SHARDS) - sum(len(b) for rank in sim.batches
                                            for b in rank[:steps])
    if my_steps != steps:
        return not_yet("06.2", f"{my_steps!r} steps is not what every rank can take",
                       "every rank stops at the smallest batch count per rank")
    if my_skipped != skipped:
        return not_yet("06.2", f"{steps} steps is right; {my_skipped!r} skipped is not",
                       "count the samples in the batches beyond that step, on every rank")
    return passes("06.2", f"{steps} steps on every rank, {skipped} samples left out")


def grade_mystery_hang(my_hangs, report) -> Grade:
    """06.3: does ``make_uneven_mystery_loader`` hang DDP? ``report`` is the grader's own
    audit of it."""
    hangs = len(set(report.checks[0].batch_counts.counts)) > 1
    return choice("06.3", my_hangs, options=(True, False), correct=hangs,
                  hints={not hangs: "compare the batches per rank in the audit"},
                  explain="every sample once, yet the batches per rank differ"
                  if hangs else "every rank gets the same batches")


def grade_even_loader(make_even_loader) -> Grade:
    """06.4: a loader factory for the 14 ids of shards [5, 3, 3, 3] that reads every id once
    and gives both ranks the same number of batches (audited in a real world of 2)."""
    if is_stub(make_even_loader):
        return not_tried("06.4", "write make_even_loader in its %%importable cell and run it")

    def run() -> Grade:
        report = start_up.audited("06.4", make_even_loader, world_size=2, workers=2, epochs=1,
                                  expected=14, shuffle=False)
        if report.error is not None:
            return not_yet("06.4", report.error.replace("the audit could not finish: ", ""),
                           "call make_even_loader(0, 2, 0) in a cell of its own to see the "
                           "error where it happens")
        epoch = report.checks[0]
        if not epoch.exactly_once.ok:
            return not_yet("06.4", repr(epoch.exactly_once),
                           "split the ids of every shard over ranks and workers")
        counts = epoch.batch_counts.counts
        if len(set(counts)) > 1:
            return not_yet("06.4", f"every id once, but batches per rank {list(counts)}",
                           "give every worker the same number of ids, or numbers that "
                           "make the same batches per rank")
        return passes("06.4", f"every id once and {counts[0]} batches on each rank")

    return attempt("06.4", run)
