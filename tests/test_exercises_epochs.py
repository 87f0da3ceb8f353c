"""Exercise 04.1's grader: a right MyEpochIds passes, each typical wrong one gets its hint;
exercise 04.2's grader asks real workers for their seed."""

import random

import numpy as np
import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from talk_helpers.exercises.epochs import (
    NO_WORKER_INFO,
    grade_epochs,
    grade_unseeded_generator,
    grade_worker_seed,
)


def _worker():
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class SharedEpoch(IterableDataset):
    """Right: one permutation from (seed, epoch), the epoch in shared memory."""

    def __init__(self, size, seed=0):
        self.size, self.seed = size, seed
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch):
        self.epoch.fill_(epoch)

    def order(self):
        return np.random.default_rng([self.seed, int(self.epoch)]).permutation(self.size)

    def __iter__(self):
        worker, workers = _worker()
        yield from self.order()[worker::workers].tolist()


class PlainEpoch(SharedEpoch):
    """The epoch in a plain attribute: persistent workers never see it change."""

    def __init__(self, size, seed=0):
        super().__init__(size, seed)
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch


class EpochIgnored(SharedEpoch):
    def order(self):
        return np.random.default_rng(self.seed).permutation(self.size)


class SeedIgnored(SharedEpoch):
    def order(self):
        return np.random.default_rng(int(self.epoch)).permutation(self.size)


class Unseeded(SharedEpoch):
    def order(self):
        return np.random.default_rng().permutation(self.size)


class PerWorkerSeed(SharedEpoch):
    def order(self):
        return np.random.default_rng([self.seed, int(self.epoch), _worker()[0]]).permutation(
            self.size)


class CountsIterations(PlainEpoch):
    """The epoch counted per iter(): right only while the workers persist."""

    def __init__(self, size, seed=0):
        super().__init__(size, seed)
        self.epoch = -1

    def set_epoch(self, epoch):
        pass

    def __iter__(self):
        self.epoch += 1
        return super().__iter__()


class ReseedsGlobalRandom(SharedEpoch):
    """Every check of the order passes; the global `random` is left alike in both workers."""

    def order(self):
        order = list(range(self.size))
        random.seed(self.seed * 1000 + int(self.epoch))
        random.shuffle(order)
        return np.array(order)


class ReseedsGlobalNumpy(SharedEpoch):
    def order(self):
        np.random.seed([self.seed, int(self.epoch)])
        return np.random.permutation(self.size)


class ReseedsPerWorkerOnly(SharedEpoch):
    """The permutation from its own generator; the global `random` reseeded per worker with
    the same seed every epoch: augmentations would repeat every epoch."""

    def order(self):
        random.seed(self.seed + _worker()[0])
        return super().order()


class ShardThenShuffle(SharedEpoch):
    def __iter__(self):
        worker, workers = _worker()
        mine = np.arange(worker, self.size, workers)
        yield from np.random.default_rng([self.seed, int(self.epoch)]).permutation(mine).tolist()


class NoWorkerSharding(SharedEpoch):
    def __iter__(self):
        yield from self.order().tolist()


class NeedsWorkers(SharedEpoch):
    def __iter__(self):
        info = get_worker_info()
        yield from self.order()[info.id::info.num_workers].tolist()


class Stub(IterableDataset):
    def __init__(self, size, seed=0):
        self.size, self.seed = size, seed

    def set_epoch(self, epoch):
        ...

    def __iter__(self):
        ...


def test_a_right_answer_passes():
    grade = grade_epochs(SharedEpoch)
    assert grade.ok, grade


def test_an_untouched_stub_is_not_tried_and_shows_no_hint():
    grade = grade_epochs(Stub)
    assert grade.passed is None and "hint" not in repr(grade)


def test_something_else_than_a_dataset_class_is_named():
    grade = grade_epochs(SharedEpoch(4))
    assert grade.passed is False and "IterableDataset" in grade.message


@pytest.mark.parametrize("answer, message, hint", [
    (EpochIgnored, "same order", "must depend on the epoch"),
    (SeedIgnored, "seed=1 gives the same order", "ignores the seed"),
    (Unseeded, "two different orders", "seed and epoch alone"),
    (PerWorkerSeed, "missing", "drew different permutations"),
    (NoWorkerSharding, "duplicated", "whole permutation"),
    (ShardThenShuffle, "same ids in epochs 0 and 1", "shuffle first, then shard"),
    (CountsIterations, "new workers every epoch", "not from counting iter() calls"),
    (PlainEpoch, "persistent workers", "never reaches it"),
    (NeedsWorkers, "AttributeError", NO_WORKER_INFO),
    (ReseedsGlobalRandom, "global `random` is in the same state in workers 0 and 1",
     "reseeding a global generator"),
    (ReseedsGlobalNumpy, "numpy's global generator is in the same state", "reseeding"),
    (ReseedsPerWorkerOnly, "same state in worker 0 of epoch 0 and of epoch 1", "reseeding"),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_each_typical_wrong_answer_gets_its_own_hint(answer, message, hint):
    grade = grade_epochs(answer)
    assert grade.passed is False, grade
    assert message in grade.message and hint in (grade.hint or ""), grade


def test_the_worker_seed_is_asked_of_real_workers():
    assert grade_worker_seed(None).passed is None
    generator = torch.Generator().manual_seed(42)
    base = torch.empty((), dtype=torch.int64).random_(generator=generator).item()
    assert grade_worker_seed(base + 1).ok
    assert "worker 0's seed" in grade_worker_seed(base).message
    assert grade_worker_seed(43).passed is False and grade_worker_seed(43).hint
    assert "must be an int" in grade_worker_seed("43").message



def test_each_wrong_choice_about_an_unseeded_generator_gets_its_own_hint():
    assert grade_unseeded_generator(None).passed is None
    assert grade_unseeded_generator("c").ok
    hints = {grade_unseeded_generator(a).hint for a in ("a", "b")}
    assert len(hints) == 2 and all(hints)


SUBCLASS = "class MyEpochIds(SharedEpochIds):\n    pass\n"
WRAPPER = """\
class MyEpochIds(IterableDataset):
    def __init__(self, size, seed=0):
        self.inner = SharedEpochIds(size, seed)

    def set_epoch(self, epoch):
        self.inner.set_epoch(epoch)

    def __iter__(self):
        return iter(self.inner)
"""


@pytest.mark.parametrize("answer", [SUBCLASS, WRAPPER], ids=["pass-subclass", "wrapper"])
def test_the_notebooks_shared_epoch_dataset_subclassed_or_wrapped_is_graded_and_passes(answer):
    from notebook_code import importable_names

    from talk_helpers.notebook import cells

    namespace = importable_names("04", upto="c16")
    cells.define("from torch.utils.data import IterableDataset\n\n\n" + answer, namespace)
    grade = grade_epochs(namespace["MyEpochIds"])
    assert grade.ok, grade
