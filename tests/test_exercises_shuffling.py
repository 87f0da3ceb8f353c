"""The graders of notebook 03: shuffle before shard passes; each typical wrong answer
(per-worker seeds, shuffle after shard, no shuffle, a seed ignored or drawn at build time,
no sharding, a crash without workers, a global generator reseeded alike in every worker)
gets its own hint."""

import random

import numpy as np
import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from talk_helpers.exercises import shuffling, workers
from talk_helpers.exercises.loading import HINT_GLOBAL_STREAM
from talk_helpers.exercises.shuffling import grade_shuffle_before_shard

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def _worker():
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class Shuffled(IterableDataset):
    def __init__(self, size, seed=0):
        self.size, self.seed = size, seed


class ShuffleThenShard(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        order = np.random.default_rng(self.seed).permutation(self.size)
        yield from order[worker::num_workers].tolist()


class ShuffleThenShardInBlocks(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        order = np.random.default_rng(self.seed).permutation(self.size)
        yield from np.array_split(order, num_workers)[worker].tolist()


class StubShuffled(Shuffled):
    def __iter__(self):
        pass


class PerWorkerSeeds(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        order = np.random.default_rng(self.seed + worker).permutation(self.size)
        yield from order[worker::num_workers].tolist()


class ShardThenShuffle(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        mine = list(range(worker, self.size, num_workers))
        random.Random(self.seed).shuffle(mine)
        yield from mine


class BlocksThenShuffle(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        mine = np.array_split(np.arange(self.size), num_workers)[worker]
        yield from np.random.default_rng(self.seed).permutation(mine).tolist()


class ShardsOnly(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        yield from range(worker, self.size, num_workers)


class IgnoresSeed(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        yield from np.random.default_rng(0).permutation(self.size)[worker::num_workers].tolist()


class SeedDrawnAtBuild(Shuffled):
    def __init__(self, size, seed=0):
        super().__init__(size, seed)
        self.drawn = random.randrange(2**32)

    def __iter__(self):
        worker, num_workers = _worker()
        order = np.random.default_rng(self.drawn).permutation(self.size)
        yield from order[worker::num_workers].tolist()


class EveryWorkerAPermutation(Shuffled):
    def __iter__(self):
        yield from np.random.default_rng(self.seed).permutation(self.size).tolist()


class ReseedsGlobalRandom(Shuffled):
    """The talk's bug in a new place: the permutation right, the global `random` left in
    the same state in every worker."""

    def __iter__(self):
        worker, num_workers = _worker()
        order = list(range(self.size))
        random.seed(self.seed)
        random.shuffle(order)
        yield from order[worker::num_workers]


class ReseedsGlobalNumpy(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        np.random.seed(self.seed)
        yield from np.random.permutation(self.size)[worker::num_workers].tolist()


class ReseedsGlobalTorch(Shuffled):
    def __iter__(self):
        worker, num_workers = _worker()
        torch.manual_seed(self.seed)
        yield from torch.randperm(self.size)[worker::num_workers].tolist()


class LocalRandom(Shuffled):
    """Right: Python's random, but a generator of its own."""

    def __iter__(self):
        worker, num_workers = _worker()
        order = list(range(self.size))
        random.Random(self.seed).shuffle(order)
        yield from order[worker::num_workers]


class AsksWorkerInfoOnly(Shuffled):
    def __iter__(self):
        info = get_worker_info()
        order = np.random.default_rng(self.seed).permutation(self.size)
        yield from order[info.id::info.num_workers].tolist()


@pytest.mark.parametrize("right", [ShuffleThenShard, ShuffleThenShardInBlocks, LocalRandom])
def test_shuffle_before_shard_with_one_seed_passes(right):
    grade = grade_shuffle_before_shard(right)
    assert grade.ok, grade


def test_an_untouched_stub_is_not_tried_and_shows_no_hint():
    grade = grade_shuffle_before_shard(StubShuffled)
    assert grade.passed is None and "hint" not in repr(grade)


@pytest.mark.parametrize("wrong, hint", [
    (PerWorkerSeeds, shuffling.HINT_PER_WORKER_SEEDS),
    (ShardThenShuffle, shuffling.HINT_AFTER_SHARD),
    (BlocksThenShuffle, shuffling.HINT_AFTER_SHARD),
    (ShardsOnly, shuffling.HINT_NO_SHUFFLE),
    (IgnoresSeed, shuffling.HINT_SEED_IGNORED),
    (SeedDrawnAtBuild, shuffling.HINT_SAME_SEED),
    (EveryWorkerAPermutation, workers.HINT_NO_SHARDING),
    (AsksWorkerInfoOnly, workers.HINT_MAIN_PROCESS),
    (ReseedsGlobalRandom, HINT_GLOBAL_STREAM),
    (ReseedsGlobalNumpy, HINT_GLOBAL_STREAM),
    (ReseedsGlobalTorch, HINT_GLOBAL_STREAM),
])
def test_each_typical_wrong_answer_gets_its_own_hint(wrong, hint):
    grade = grade_shuffle_before_shard(wrong)
    assert grade.passed is False and grade.hint == hint, grade


@pytest.mark.parametrize("wrong, generator", [
    (ReseedsGlobalRandom, "Python's global `random`"),
    (ReseedsGlobalNumpy, "numpy's global generator"),
    (ReseedsGlobalTorch, "torch's global generator"),
])
def test_reseeding_a_global_generator_fails_and_names_it(wrong, generator):
    grade = grade_shuffle_before_shard(wrong)
    assert f"{generator} is in the same state in workers 0 and 1" in grade.message, grade
    assert "augmentation" in grade.message


def test_shuffle_after_shard_is_caught_by_the_mixing_check_with_the_score_named():
    grade = grade_shuffle_before_shard(ShardThenShuffle)
    assert "every id came once, but the batches mix ids modulo 2 poorly" in grade.message
    grade = grade_shuffle_before_shard(BlocksThenShuffle)
    assert "the batches mix storage blocks poorly" in grade.message


def test_the_hints_never_show_code_of_an_answer():
    for name, hint in vars(shuffling).items():
        if name.startswith("HINT_"):
            assert "default_rng" not in hint and "[" not in hint and "::" not in hint


def test_the_mystery_diagnosis_passes_on_poorly_mixed_only():
    assert shuffling.grade_mystery_shuffle(None).passed is None
    assert shuffling.grade_mystery_shuffle("poorly mixed").ok
    for wrong in ("missing or duplicated", "order repeats", "same augmentations"):
        grade = shuffling.grade_mystery_shuffle(wrong)
        assert grade.passed is False and grade.hint, wrong
    assert "not one of" in shuffling.grade_mystery_shuffle("shuffled").message


def test_the_mystery_report_holds_its_findings_back_until_the_grader_shows_them():
    from torch.utils.data import DataLoader

    from talk_helpers.checks import shuffle_report
    from talk_helpers.lessons.datasets.handed_over import MysteryShuffle
    from talk_helpers.lessons.datasets.shuffling import collect, labels_of

    mystery = [collect(DataLoader(MysteryShuffle(epoch=epoch), batch_size=20))
               for epoch in range(2)]
    orders = [np.concatenate(batches) for batches, _ in mystery]
    held = shuffle_report(orders, groups=labels_of(), batch_size=20, hold_back=True)
    for option in ("missing", "duplicated", "repeat", "poorly mixed", "well mixed",
                   "augmentations"):
        assert option not in repr(held) and option not in held._repr_html_(), option
    assert "mixing score" in repr(held)
    assert "held back" not in shuffling.grade_mystery_shuffle(None, mystery).message
    for answer in ("poorly mixed", "order repeats"):
        assert "held back: ✘ poorly mixed" in shuffling.grade_mystery_shuffle(answer,
                                                                             mystery).message


def test_the_smallest_buffer_is_the_first_multiple_of_50_that_mixes_to_0_9():
    scores = {b: shuffling._one_shard_mixing(b) for b in range(50, 601, 50)}
    smallest = min(b for b, score in scores.items() if score >= 0.9)
    assert shuffling.grade_smallest_buffer(smallest).ok
    if smallest > 50:
        assert "try larger" in shuffling.grade_smallest_buffer(smallest - 50).hint
    if smallest < 600:
        assert "smaller" in shuffling.grade_smallest_buffer(smallest + 50).hint
    assert shuffling.grade_smallest_buffer(None).passed is None
    assert "multiple of 50" in shuffling.grade_smallest_buffer(75).message
