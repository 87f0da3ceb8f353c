"""The checks of notebook 11: each flags the failure it is about and passes the fix."""

import pytest
import torch

from talk_helpers.checks import (
    batch_bytes,
    check_cache_visibility,
    check_eval_counts,
    check_preparation_time,
    check_rank_split,
    check_resume,
    check_shard_coverage,
    check_shm_budget,
    check_worker_memory,
    checklist,
    dataset_bytes,
    dataset_shm_bytes,
)

MIB = 2**20


class Captions:
    def __init__(self, n):
        self.captions = [f"caption {i:05d}" for i in range(n)]


class Packed:
    def __init__(self, n):
        self.data = torch.zeros(n * 13, dtype=torch.uint8)
        self.ends = torch.arange(1, n + 1) * 13


# ----------------------------------------------------------------- worker memory


def test_workers_that_own_about_the_payload_each_hold_a_copy():
    report = check_worker_memory([30 * MIB, 29 * MIB], 29 * MIB)
    assert not report.ok and report.copies == (0, 1)
    assert "both workers own a private copy" in repr(report)
    assert "58.0 MiB in copies" in repr(report)


def test_workers_that_own_a_small_share_of_the_payload_share_it():
    report = check_worker_memory([0.1 * MIB, 7 * MIB], 20 * MIB)
    assert report.ok and repr(report).startswith("✔ worker memory: 2 workers share")


def test_a_payload_smaller_than_a_heaps_own_movements_passes_and_says_so():
    report = check_worker_memory([3 * MIB, 2 * MIB], 2 * MIB)
    assert report.ok and "a copy would cost little" in repr(report)


def test_one_copying_worker_of_two_is_named_as_such():
    assert "1 of 2 workers own" in repr(check_worker_memory([20 * MIB, 0], 20 * MIB))


def test_the_payload_of_python_objects_and_of_tensors_is_measured_from_the_dataset():
    objects, packed = dataset_bytes(Captions(1000)), dataset_bytes(Packed(1000))
    assert objects > 1000 * 13  # every str carries a header of its own
    assert packed == 1000 * 13 + 1000 * 8


def test_worker_memory_refuses_what_is_not_a_measurement():
    with pytest.raises(TypeError, match="owned_bytes"):
        check_worker_memory([], 10)
    with pytest.raises(TypeError, match=r"owned_bytes\[1\]"):
        check_worker_memory([1, "x"], 10)
    with pytest.raises(ValueError, match="limit"):
        check_worker_memory([1], 10, limit=2)


# ----------------------------------------------------------------- shared memory


def test_batches_in_flight_beyond_dev_shm_fail():
    images = 32 * 3 * 224 * 224 * 4  # a batch of 32 float32 images
    report = check_shm_budget(images, num_workers=2, prefetch_factor=2, shm_bytes=64 * MIB)
    assert not report.ok and report.batches == 6
    assert "6 batches of 18.4 MiB in flight need 110.2 MiB, but /dev/shm holds 64.0 MiB" \
        in repr(report)


def test_uint8_batches_fit_where_float_ones_did_not():
    report = check_shm_budget(32 * 3 * 224 * 224, num_workers=2, shm_bytes=64 * MIB)
    assert report.ok and report.needed_bytes < 64 * MIB


def test_ranks_on_one_node_share_its_dev_shm():
    one = check_shm_budget(10 * MIB, num_workers=2, shm_bytes=64 * MIB)
    four = check_shm_budget(10 * MIB, num_workers=2, shm_bytes=64 * MIB, ranks_per_node=4)
    assert one.ok and not four.ok and four.needed_bytes == 4 * one.needed_bytes


def test_without_workers_no_shared_memory_is_needed():
    report = check_shm_budget(10**9, num_workers=0, shm_bytes=1)
    assert report.ok and "no workers" in repr(report)


def test_a_batch_takes_whole_pages_once_per_storage():
    x = torch.zeros(1000, dtype=torch.uint8)
    assert batch_bytes({"x": x, "view": x[:10], "y": [torch.zeros(5000, dtype=torch.uint8)]}) \
        == 4096 + 8192


def test_shm_budget_names_a_bad_argument():
    with pytest.raises(ValueError, match="prefetch_factor"):
        check_shm_budget(1, num_workers=1, prefetch_factor=0, shm_bytes=1)
    with pytest.raises(ValueError, match="dataset_bytes"):
        check_shm_budget(1, num_workers=1, shm_bytes=1, dataset_bytes=-1)


class Mapped:
    """A dataset that keeps a path and opens its file in each worker."""

    def __init__(self, path):
        self.path = path


def test_a_tensor_dataset_puts_its_tensors_in_dev_shm_once_a_file_dataset_nothing():
    packed = Packed(1000)
    assert dataset_shm_bytes(packed) == 16384 + 8192  # 13,000 bytes and 1,000 int64s, paged
    assert dataset_shm_bytes({"a": packed.data, "view": packed.data[:10]}) == 16384
    assert dataset_shm_bytes(Mapped("/data/captions.npy")) == 0
    assert dataset_shm_bytes(Captions(10)) == 0  # Python objects are pickled, not shared


def test_the_dataset_counts_on_every_rank_of_the_node():
    alone = check_shm_budget(4 * MIB, num_workers=2, shm_bytes=64 * MIB, ranks_per_node=2)
    with_data = check_shm_budget(4 * MIB, num_workers=2, shm_bytes=64 * MIB, ranks_per_node=2,
                                 dataset_bytes=10 * MIB)
    assert alone.ok and not with_data.ok
    assert with_data.needed_bytes == alone.needed_bytes + 2 * 10 * MIB
    assert "(6 batches of 4.0 MiB in flight + the dataset's 10.0 MiB) × 2 ranks need 68.0 MiB" \
        in repr(with_data)


def test_without_workers_the_dataset_stays_out_of_dev_shm():
    assert check_shm_budget(MIB, num_workers=0, shm_bytes=1, dataset_bytes=10 * MIB).ok


# ----------------------------------------------------------------- evaluation counts


def test_padding_counts_a_sample_twice():
    report = check_eval_counts([[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9, 0]], 11)
    assert not report.ok and "counted more than once: 0 ×2" in repr(report)


def test_dropping_the_tail_never_evaluates_it():
    report = check_eval_counts([[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]], 11)
    assert not report.ok and "never evaluated: 10" in repr(report)


def test_uneven_ranks_that_evaluate_each_sample_once_pass():
    assert check_eval_counts([[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9]], 11).ok


def test_a_metric_that_divides_by_the_padded_count_fails_even_with_right_ids():
    report = check_eval_counts([[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9]], 11, counted=12)
    assert not report.ok and "divided by 12, not 11" in repr(report)


# ----------------------------------------------------------------- rank split


def test_ranks_that_read_the_same_ids_did_not_know_their_rank():
    report = check_rank_split([list(range(20)), list(range(20))])
    assert not report.ok and report.identical == ((0, 1),)
    assert "did not know its rank" in repr(report)


def test_overlapping_ranks_are_named_by_their_shared_ids():
    report = check_rank_split([[0, 1, 2], [2, 3, 4]])
    assert not report.ok and report.shared_ids == (2,) and not report.identical


def test_disjoint_ranks_pass():
    assert check_rank_split([list(range(0, 20, 2)), list(range(1, 20, 2))]).ok


# ----------------------------------------------------------------- rank-0 preparation


def test_a_projection_beyond_the_timeout_fails():
    report = check_preparation_time(0.05, fraction=0.01, timeout_s=2)
    assert not report.ok and report.status == "fail"
    assert "so all of it ≈ 5.00 s" in repr(report)


def test_a_projection_close_to_the_timeout_warns_and_a_short_one_passes():
    assert check_preparation_time(1.5, timeout_s=2).status == "warn"
    assert check_preparation_time(0.2, timeout_s=2).status == "pass"


def test_preparation_refuses_a_fraction_outside_zero_to_one():
    with pytest.raises(ValueError, match="fraction"):
        check_preparation_time(1, timeout_s=2, fraction=0)


# ----------------------------------------------------------------- shard coverage


def test_one_shard_for_two_ranks_leaves_a_rank_without_batches():
    report = check_shard_coverage([10], world_size=2, num_workers=2, batch_size=4)
    assert not report.ok and report.empty_ranks == [1]
    assert "rank 1 gets no batch" in repr(report)


def test_fewer_shards_than_workers_leave_workers_idle_and_ranks_unequal():
    report = check_shard_coverage([10] * 3, world_size=2, num_workers=2, batch_size=4)
    assert not report.ok and report.idle_workers == [(1, 1)]


def test_enough_equal_shards_keep_every_worker_busy_and_ranks_in_step():
    report = check_shard_coverage([5] * 8, world_size=2, num_workers=2, batch_size=5)
    assert report.ok and report.status == "pass"


def test_idle_workers_alone_warn():
    report = check_shard_coverage([4] * 2, world_size=2, num_workers=2, batch_size=2)
    assert report.ok and report.status == "warn"


# ----------------------------------------------------------------- resume


def test_a_resume_that_skips_the_next_epoch_loses_it():
    report = check_resume([[0, 1, 2, 3], [0, 1, 2, 3]], [[0, 1, 2, 3], []],
                          where="end of epoch 0")
    assert not report.ok and "4 ids lost (epoch 1)" in repr(report)


def test_a_resume_that_repeats_batches_is_flagged():
    report = check_resume([[0, 1, 2, 3]], [[0, 1, 0, 1, 2, 3]])
    assert not report.ok and report.epochs[0].extra == (0, 1)


def test_the_same_ids_in_another_order_warn_and_identical_epochs_pass():
    assert check_resume([[0, 1, 2]], [[2, 1, 0]]).status == "warn"
    assert check_resume([[0, 1], [1, 0]], [[0, 1], [1, 0]]).status == "pass"


# ----------------------------------------------------------------- node-local cache


def test_ranks_of_another_node_that_find_no_cache_fail():
    report = check_cache_visibility([(0, "a"), (0, "a"), (1, None), (1, None)])
    assert not report.ok and report.missing_ranks == [2, 3]
    assert "ranks 2, 3 (node 1) found none" in repr(report)


def test_one_identical_cache_per_node_passes_and_different_ones_fail():
    assert check_cache_visibility([(0, "a"), (0, "a"), (1, "a"), (1, "a")]).ok
    assert not check_cache_visibility([(0, "a"), (1, "b")]).ok


def test_cache_visibility_refuses_a_malformed_row():
    with pytest.raises(TypeError, match=r"per_rank\[0\]"):
        check_cache_visibility([("node", "a")])


# ----------------------------------------------------------------- checklist


def test_a_checklist_fails_when_one_item_fails_and_warns_on_warnings():
    passing = check_rank_split([[0], [1]])
    failing = check_rank_split([[0], [0]])
    warning = check_resume([[0, 1]], [[1, 0]])
    assert checklist({"a": passing, "b": failing}).status == "fail"
    listed = checklist([("a", passing), ("c", warning)])
    assert listed.ok and listed.status == "warn"
    assert "2 of 2 checks pass (1 with a warning)" in repr(listed)


def test_a_checklist_refuses_an_item_that_is_not_a_report():
    with pytest.raises(TypeError, match="has no .ok"):
        checklist({"a": 3})


def test_a_dataset_counted_at_zero_says_so_and_one_not_counted_says_nothing():
    counted = check_shm_budget(MIB, num_workers=2, shm_bytes=64 * MIB, dataset_bytes=0)
    assert "(the dataset adds none)" in repr(counted)
    assert "dataset" not in repr(check_shm_budget(MIB, num_workers=2, shm_bytes=64 * MIB))
