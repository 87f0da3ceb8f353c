"""The graders of notebooks 01 and 02: a right answer passes, an untouched stub is 'not
tried' with no hint, and each typical wrong answer gets its own hint."""

import itertools

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    get_worker_info,
)

from talk_helpers.exercises import workers
from talk_helpers.exercises.workers import grade_worker_sharding

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def _worker():
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class ModuloShards(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        worker, num_workers = _worker()
        yield from range(worker, self.size, num_workers)


class BlockShards(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        worker, num_workers = _worker()
        base, extra = divmod(self.size, num_workers)
        start = worker * base + min(worker, extra)
        yield from range(start, start + base + (worker < extra))


class StubIds(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        ...


class EveryWorkerEverything(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        yield from range(self.size)


class AsksWorkerInfoOnly(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        info = get_worker_info()
        yield from range(info.id, self.size, info.num_workers)


class LosesRemainder(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        worker, num_workers = _worker()
        per_worker = self.size // num_workers
        yield from range(worker * per_worker, (worker + 1) * per_worker)


class OverlappingShards(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        worker, num_workers = _worker()
        yield from range(worker, self.size, num_workers)
        if worker:
            yield 0


class Endless(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        yield from itertools.count()


class YieldsWords(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        yield from (f"sample {i}" for i in range(self.size))


class NoSizeArgument(IterableDataset):
    def __iter__(self):
        yield from range(3)


@pytest.mark.parametrize("right", [ModuloShards, BlockShards])
def test_a_dataset_that_shards_by_worker_passes(right):
    grade = grade_worker_sharding(right)
    assert grade.ok, grade
    assert "exactly once with 0, 1, 2, 3 workers" in grade.message


def test_an_untouched_stub_is_not_tried_and_shows_no_hint():
    grade = grade_worker_sharding(StubIds)
    assert grade.passed is None and grade.hint is None
    assert "not tried" in repr(grade) and "hint" not in repr(grade)


@pytest.mark.parametrize("wrong, hint", [
    (EveryWorkerEverything, workers.HINT_NO_SHARDING),
    (AsksWorkerInfoOnly, workers.HINT_MAIN_PROCESS),
    (LosesRemainder, workers.HINT_REMAINDER),
    (OverlappingShards, workers.HINT_OVERLAP),
    (Endless, workers.HINT_ENDLESS),
    (YieldsWords, workers.HINT_OUTSIDE),
])
def test_each_typical_wrong_answer_gets_its_own_hint(wrong, hint):
    grade = grade_worker_sharding(wrong)
    assert grade.passed is False and grade.hint == hint, grade
    assert f"hint: {hint}" in repr(grade)


def test_the_hints_never_show_code_of_an_answer():
    hints = [value for name, value in vars(workers).items() if name.startswith("HINT_")]
    for hint in hints:
        assert "range(" not in hint.replace("range(self.size)", "")
        assert "info.id" not in hint and "%" not in hint.replace("%%importable", "")


def test_a_crash_without_workers_names_the_error_and_where():
    grade = grade_worker_sharding(AsksWorkerInfoOnly)
    assert "with num_workers=0" in grade.message
    assert "AttributeError: 'NoneType' object has no attribute" in grade.message


def test_a_class_from_an_ordinary_cell_is_sent_to_importable():
    in_main = type("CellIds", (ModuloShards,), {"__module__": "__main__"})
    grade = grade_worker_sharding(in_main)
    assert grade.passed is False and grade.hint == workers.HINT_IMPORTABLE


def test_a_constructor_without_size_is_named():
    grade = grade_worker_sharding(NoSizeArgument)
    assert grade.passed is False and "MyShardedIds(23)" in grade.message


def test_an_instance_instead_of_the_class_is_refused_with_the_argument_named():
    with pytest.raises(TypeError, match="pass the class itself, e.g. MyShardedIds"):
        grade_worker_sharding(ModuloShards(4))


def test_a_grade_stops_no_worker_behind():
    import psutil

    # processes earlier tests keep on purpose (a warm world, multiprocessing's forkserver or
    # resource tracker) are not the grade's
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    grade_worker_sharding(Endless)
    grade_worker_sharding(ModuloShards)
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []


# --- 01 and 02: predictions and diagnoses -------------------------------------------------


def test_index_batches_prediction():
    assert workers.grade_index_batches(None).passed is None
    assert workers.grade_index_batches([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]).ok
    wrong = workers.grade_index_batches([[0, 1, 2, 3], [4, 5, 6, 7]])
    assert wrong.passed is False and "left over" in wrong.hint


def test_seeded_shuffle_loader_unseeded_or_in_storage_order_fails_with_its_hint():
    ids = list(range(12))
    assert workers.grade_seeded_shuffle(None).passed is None
    plain = workers.grade_seeded_shuffle(DataLoader(ids, batch_size=4))
    assert plain.passed is False and "storage order" in plain.message
    unseeded = workers.grade_seeded_shuffle(DataLoader(ids, batch_size=4, shuffle=True))
    assert unseeded.passed is False and "global torch RNG" in unseeded.message
    assert "torch.Generator" in unseeded.hint


@pytest.mark.parametrize("make", [
    lambda ids: DataLoader(ids, batch_size=4, shuffle=True,
                           generator=torch.Generator().manual_seed(0)),
    lambda ids: DataLoader(ids, batch_size=4, sampler=RandomSampler(
        ids, generator=torch.Generator().manual_seed(0))),
    lambda ids: DataLoader(ids, batch_sampler=BatchSampler(RandomSampler(
        ids, generator=torch.Generator().manual_seed(0)), 4, drop_last=False)),
    lambda ids: DataLoader(ids, batch_size=4, shuffle=True, num_workers=2,
                           generator=torch.Generator().manual_seed(0)),
], ids=["loader-generator", "seeded-random-sampler", "batch-sampler-over-a-seeded-one",
        "loader-generator-with-workers"])
def test_seeded_shuffle_passes_however_the_seed_reaches_the_order(make):
    loader = make(list(range(12)))
    before = torch.get_rng_state()
    grade = workers.grade_seeded_shuffle(loader)
    assert grade.ok, grade
    assert torch.equal(torch.get_rng_state(), before), "the global generator is left as it was"


def test_which_worker_builds_batch_4_is_answered_by_a_real_run():
    assert workers.grade_batch_worker(None).passed is None
    assert workers.grade_batch_worker(1).ok
    wrong = workers.grade_batch_worker(0)
    assert wrong.passed is False and "in turn" in wrong.hint


def test_batch_count_and_dropped_ids_predictions():
    assert workers.grade_batch_count(None).passed is None
    assert workers.grade_batch_count(16).ok
    assert "one worker's batches" in workers.grade_batch_count(8).hint
    assert workers.grade_dropped_ids(None).passed is None
    assert workers.grade_dropped_ids(14).ok
    assert "map-style" in workers.grade_dropped_ids(6).hint


@pytest.mark.parametrize("grader", [workers.grade_mystery_loader])
def test_diagnoses_pass_on_b_and_give_every_wrong_option_a_hint(grader):
    assert grader(None).passed is None and grader(None).hint is None
    assert grader("b").ok
    for wrong in ("a", "c", "d"):
        grade = grader(wrong)
        assert grade.passed is False and grade.hint, wrong
