"""Graders for notebook 09's exercises: the counts of a layout, and a resume point."""

from __future__ import annotations

from torch.utils.data import DataLoader

from talk_helpers.exercises import Grade, attempt, not_tried, not_yet, passes
from talk_helpers.reference.sharded_iterable import ShardedIterableDataset

__all__ = ["grade_counts", "grade_resume"]


def grade_counts(dropped, batches) -> Grade:
    """09.1: samples dropped per epoch, and batches per rank, for 1,003 samples on 8 ranks
    in micro-batches of 16 (``policy="drop"``)."""
    exercise = "09.1"
    if dropped is None or batches is None:
        return not_tried(exercise, "set my_dropped and my_batches to two ints")
    ds = ShardedIterableDataset(1003, batch_size=16, rank=0, world_size=8)
    if (dropped, batches) == (ds.dropped, len(ds)):
        return passes(exercise, f"{dropped} samples dropped per epoch, {batches} batches on "
                                f"every rank, whatever the number of workers")
    if dropped != ds.dropped:
        return not_yet(exercise, f"{dropped!r} is not the number dropped",
                       "every rank gets 1003 // 8 samples; what is left over?")
    return not_yet(exercise, f"{batches!r} is not the number of batches per rank",
                   "a rank's samples cut into micro-batches of 16, the last one partial")


def _job() -> ShardedIterableDataset:
    ds = ShardedIterableDataset(100, batch_size=8, rank=0, world_size=2)
    ds.set_epoch(5)
    return ds


def grade_resume(state) -> Grade:
    """09.2: a state from which a new dataset reads the rest of epoch 5 on rank 0 of 2,
    after the loop took 3 batches from a DataLoader with no workers."""
    exercise = "09.2"
    if state is None:
        return not_tried(exercise, "set my_state to what the new dataset should load")

    def run() -> Grade:
        whole = [b.tolist() for b in DataLoader(_job(), batch_size=None)]
        resumed = ShardedIterableDataset(100, batch_size=8, rank=0, world_size=2)
        resumed.load_state_dict(state)
        rest = [b.tolist() for b in DataLoader(resumed, batch_size=None)]
        if rest == whole[3:]:
            return passes(exercise, f"the new dataset reads the {len(rest)} batches left of "
                                    f"epoch 5, in the order the first loader had them")
        if rest == whole:
            return not_yet(exercise, "the new dataset reads epoch 5 from its start: 3 "
                                     "batches twice", "the state must say how many batches "
                                                      "your loop took")
        return not_yet(exercise, f"the new dataset reads {len(rest)} batches, not the "
                                 f"{len(whole) - 3} left of epoch 5",
                       "count the batches your loop took, from the loader it used")

    return attempt(exercise, run, hint="a state from the dataset your loop read")
