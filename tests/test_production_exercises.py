"""The graders of notebook 11: a stub is 'not tried', a wrong answer gets a hint, the
solutions pass."""

import torch
from production_datasets import Images
from torch.utils.data import DataLoader

from talk_helpers.exercises import production


def test_untouched_stubs_are_not_tried():
    def my_loader():
        ...

    def my_eval_indices(dataset_size, rank, world_size):
        ...

    assert production.grade_shm_fit(my_loader).passed is None
    assert production.grade_eval_indices(my_eval_indices).passed is None
    assert production.grade_shard_count(None).passed is None


def test_a_loader_whose_batches_overflow_dev_shm_is_not_yet_with_a_hint():
    grade = production.grade_shm_fit(
        lambda: DataLoader(Images(64, torch.float32), batch_size=32, num_workers=2))
    assert grade.passed is False and "110.2 MiB" in grade.message and grade.hint


def test_a_loader_that_changes_the_images_or_the_batches_is_refused():
    uint8 = production.grade_shm_fit(
        lambda: DataLoader(Images(64, torch.uint8), batch_size=32, num_workers=1))
    assert uint8.passed is False and "float32" in uint8.message
    no_workers = production.grade_shm_fit(
        lambda: DataLoader(Images(64, torch.float32), batch_size=32, num_workers=0))
    assert no_workers.passed is False and "at least one worker" in no_workers.message


def test_padded_evaluation_indices_are_not_yet():
    grade = production.grade_eval_indices(
        lambda n, r, w: [(r + k * w) % n for k in range(-(-n // w))])
    assert grade.passed is False and "counted more than once" in grade.message


def test_a_shard_count_that_idles_workers_or_is_not_the_smallest_is_not_yet():
    assert production.grade_shard_count(8).passed is False
    assert production.grade_shard_count(24).passed is False
    assert production.grade_shard_count(7).passed is False


def test_the_solutions_pass():
    one_worker = lambda: DataLoader(Images(64, torch.float32), batch_size=32,  # noqa: E731
                                    num_workers=1, prefetch_factor=1)
    assert production.grade_shm_fit(one_worker).ok
    assert production.grade_eval_indices(lambda n, r, w: list(range(r, n, w))).ok
    assert production.grade_shard_count(12).ok
