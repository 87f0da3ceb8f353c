"""Notebook 05's graders: the whole dataset audited in a real world (a right answer passes,
each typical wrong one gets its own hint), and the small exercises' answers."""

import functools
import random

import numpy as np
import pytest
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.exercises.ranks import (
    DIAGNOSES,
    NO_WORKER_INFO,
    RANK_IN_WORKER,
    grade_diagnosis,
    grade_idle_workers,
    grade_sampler_counts,
    grade_whole_dataset,
)

SIZE, BATCH_SIZE = 4097, 32  # one id more than 2 ranks × 2 workers × 32 × 32: no even split


def _worker():
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class Whole(IterableDataset):
    """Right: one permutation from (seed, epoch), made a multiple of world_size by a drop
    or a pad, shared out by rank, then by worker."""

    def __init__(self, size, rank, world_size, seed=0, fix="drop"):
        self.size, self.rank, self.world_size, self.seed = size, rank, world_size, seed
        self.fix, self.epoch = fix, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def permutation(self):
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.size)

    def order(self):
        order = self.permutation()
        extra = len(order) % self.world_size
        if self.fix == "drop":
            return order[:len(order) - extra]
        if self.fix == "pad" and extra:
            return np.concatenate([order, order[:self.world_size - extra]])
        return order

    def rank_share(self):
        return self.order()[self.rank::self.world_size]

    def __iter__(self):
        worker, workers = _worker()
        yield from self.rank_share()[worker::workers].tolist()


class GlobalSlots(Whole):
    """Right too: one slot per (rank, worker), padded to a multiple of all the slots."""

    def __iter__(self):
        worker, workers = _worker()
        order, slots = self.permutation(), self.world_size * workers
        order = np.concatenate([order, order[:(-len(order)) % slots]])
        yield from order[self.rank * workers + worker::slots].tolist()


class NoRankSharding(Whole):
    def rank_share(self):
        return self.order()


class RankAskedInIter(Whole):
    def __iter__(self):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        return super().__iter__()


class RankAskedWithGlue(Whole):
    def __iter__(self):
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        else:
            self.rank, self.world_size = 0, 1
        return super().__iter__()


class NoWorkerSharding(Whole):
    def __iter__(self):
        yield from self.rank_share().tolist()


class PerWorkerSeed(Whole):
    def permutation(self):
        seed = [self.seed, self.epoch, _worker()[0]]
        return np.random.default_rng(seed).permutation(self.size)


class PerRankSeed(Whole):
    def permutation(self):
        seed = [self.seed, self.epoch, self.rank]
        return np.random.default_rng(seed).permutation(self.size)


class NestedModulo(Whole):
    def __iter__(self):
        worker, workers = _worker()
        for position, i in enumerate(self.order().tolist()):
            if position % self.world_size == self.rank and position % workers == worker:
                yield i


class ShardThenShuffle(Whole):
    def rank_share(self):
        mine = np.arange(self.size - self.size % self.world_size)[self.rank::self.world_size]
        return np.random.default_rng([self.seed, self.epoch]).permutation(mine)


class NeedsWorkers(Whole):
    def __iter__(self):
        info = get_worker_info()
        yield from self.rank_share()[info.id::info.num_workers].tolist()


class ReseedsGlobalRandom(Whole):
    """Every id once, a new order each epoch; the global `random` reseeded alike in every
    worker of every rank."""

    def permutation(self):
        order = list(range(self.size))
        random.seed(self.seed * 1000 + self.epoch)
        random.shuffle(order)
        return np.array(order)


class ReseedsWithoutRank(Whole):
    """The global `random` reseeded per epoch and worker, but not per rank: worker k of
    both ranks would draw the same augmentations."""

    def __iter__(self):
        random.seed(self.seed * 1000 + self.epoch * 10 + _worker()[0])
        return super().__iter__()


class StubDataset(IterableDataset):
    def __init__(self, size, rank, world_size, seed=0):
        self.size = size

    def set_epoch(self, epoch):
        ...

    def __iter__(self):
        ...


def make(rank, world_size, epoch, *, cls=Whole, workers=2, set_epoch=True, **kwargs):
    dataset = cls(SIZE, rank, world_size, **kwargs)
    if set_epoch:
        dataset.set_epoch(epoch)
    return DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=workers)


def stub_make_loader(rank, world_size, epoch):
    ...


def grade(equal_by="drop", **kwargs):
    return grade_whole_dataset(functools.partial(make, **kwargs), size=SIZE, equal_by=equal_by)


# ------------------------------------------------------------------ the whole dataset


@pytest.mark.distributed
@pytest.mark.parametrize("cls, equal_by, kwargs", [
    (Whole, "drop", {}),
    (Whole, "pad", {"fix": "pad"}),
    (GlobalSlots, "pad", {}),
], ids=["drop", "pad", "one-slot-per-rank-and-worker"])
def test_a_right_answer_passes_the_audit(cls, equal_by, kwargs):
    result = grade(equal_by, cls=cls, **kwargs)
    assert result.ok, result
    assert "audit of 2 ranks × 2 epochs" in result.message


def test_untouched_stubs_are_not_tried_and_show_no_hint():
    for result in (grade_whole_dataset(stub_make_loader, size=SIZE, equal_by=None),
                   grade(cls=StubDataset)):
        assert result.passed is None and "hint" not in repr(result)


@pytest.mark.parametrize("kwargs, message, hint", [
    ({"cls": NoRankSharding}, "every rank reads the same ids", "shard by rank"),
    ({"cls": RankAskedInIter}, "process group", RANK_IN_WORKER),
    ({"cls": RankAskedWithGlue}, "every rank reads the same ids", RANK_IN_WORKER),
    ({"cls": PerRankSeed}, "overlap and leave gaps", "never the rank"),
    ({"cls": NeedsWorkers}, "AttributeError", NO_WORKER_INFO),
    ({"workers": 0}, "num_workers=0", None),
], ids=["no-rank-sharding", "rank-asked-in-worker", "rank-asked-with-glue", "per-rank-seed",
        "needs-workers", "no-workers"])
def test_rank_level_mistakes_are_found_before_a_world_starts(kwargs, message, hint):
    result = grade(**kwargs)
    assert result.passed is False and message in result.message, result
    assert hint is None or hint in (result.hint or ""), result


@pytest.mark.distributed
@pytest.mark.parametrize("equal_by, kwargs, message, hint", [
    ("drop", {"cls": NoWorkerSharding}, "read by both workers", "shard by worker"),
    ("drop", {"cls": PerWorkerSeed}, "overlap and leave gaps", "same one, from seed and epoch"),
    ("drop", {"set_epoch": False}, "previous epoch's order", "set_epoch"),
    (None, {"fix": None}, "batches per rank [65, 64]", "drop or pad"),
    ("drop", {"fix": "pad"}, "read twice", "equal_by='pad'"),
    ("drop", {"cls": NestedModulo}, "2 of 4 workers never read", "slot of its own"),
    ("drop", {"cls": ShardThenShuffle}, "rank 0 reads the same ids", "shuffle the whole"),
    ("drop", {"cls": ReseedsGlobalRandom}, "global `random` is in the same state in workers "
     "0 and 1 of rank 0, epoch 0", "reseeding a global generator"),
    ("drop", {"cls": ReseedsWithoutRank}, "same state in worker 0 of rank 0, epoch 0 and of "
     "rank 1, epoch 0", "reseeding a global generator"),
], ids=["no-worker-sharding", "per-worker-seed", "no-set-epoch", "unequal-batches",
        "padded-but-said-drop", "idle-workers", "shard-then-shuffle", "reseeds-global-random",
        "reseeds-without-rank"])
def test_each_typical_wrong_answer_gets_its_own_hint(equal_by, kwargs, message, hint):
    result = grade(equal_by, **kwargs)
    assert result.passed is False and message in result.message, result
    assert hint in (result.hint or ""), result


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="size must be an int"):
        grade_whole_dataset(make, size="65", equal_by="drop")
    result = grade_whole_dataset(make, size=SIZE, equal_by="both")
    assert result.passed is False and "equal_by must be 'drop', 'pad' or None" in result.message


# ------------------------------------------------------------------ the small exercises


def test_idle_workers_are_asked_of_the_simulator():
    assert grade_idle_workers(None).passed is None
    right = [(r, w) for r in range(2) for w in range(6) if (w - r) % 2]
    assert grade_idle_workers(right).ok
    assert grade_idle_workers(right[:3]).passed is False
    wrong = grade_idle_workers([(0, 0)])
    assert wrong.passed is False and "(0, 0) reads samples" in wrong.message and wrong.hint
    assert "list of (rank, worker) pairs" in grade_idle_workers(3).message


def test_sampler_counts_are_asked_of_distributed_sampler():
    assert grade_sampler_counts(None, None).passed is None
    assert grade_sampler_counts(2, 2).ok
    assert "my_dropped" in grade_sampler_counts(2, 1).message
    assert "my_repeated" in grade_sampler_counts(1, 2).message
    assert "must be ints" in grade_sampler_counts("2", 2).message


def test_the_mystery_audit_holds_its_cause_back_until_the_grader_shows_it():
    from talk_helpers.audit import audit
    from talk_helpers.lessons.datasets.ddp import make_mystery_loader

    held = audit(make_mystery_loader, world_size=2, epochs=1, expected=24, in_process=True,
                 hold_back=True)
    cause = held.causes[0].cause
    assert "not by worker" in cause
    assert cause not in repr(held) and "not by worker" not in held._repr_html_()
    assert "held back until you answer" in repr(held)
    assert cause not in grade_diagnosis(None).message
    for answer in ("no worker sharding", "idle workers"):
        assert cause in grade_diagnosis(answer).message


def test_each_wrong_diagnosis_gets_its_own_hint_and_the_answer_is_not_in_a_hint():
    assert grade_diagnosis(None).passed is None
    wrong = [d for d in DIAGNOSES if not grade_diagnosis(d).ok]
    assert len(wrong) == len(DIAGNOSES) - 1
    hints = {grade_diagnosis(d).hint for d in wrong}
    assert len(hints) == len(wrong) and all(hints)
    right = next(d for d in DIAGNOSES if grade_diagnosis(d).ok)
    assert not any(right in hint for hint in hints)
