"""The graders of notebooks 06–08: an untouched stub is 'not tried', a wrong answer gets a
hint without the answer, the solution passes."""

import pytest

from talk_helpers.exercises import fast_loading, parallelism_3d, uneven_batches


def test_a_shard_count_that_hangs_passes_and_one_that_does_not_gets_a_hint():
    assert uneven_batches.grade_hanging_shards(None).passed is None
    assert uneven_batches.grade_hanging_shards(10).ok
    fine = uneven_batches.grade_hanging_shards(16)
    assert fine.passed is False and "simulate" in fine.hint
    assert uneven_batches.grade_hanging_shards(7).passed is False  # odd


def test_the_fixed_count_answer_checks_steps_then_skipped_samples():
    assert uneven_batches.grade_fixed_count(None, None).passed is None
    assert uneven_batches.grade_fixed_count(4, 7).ok  # rank 0's last 4 batches: 7 samples
    assert "smallest" in uneven_batches.grade_fixed_count(8, 7).hint
    assert "beyond that step" in uneven_batches.grade_fixed_count(4, 5).hint


def test_consumed_samples_grader_runs_the_resumed_samplers():
    def steps_only(steps, mbs, n_micro, dp):
        return steps

    def samples(steps, mbs, n_micro, dp):
        return steps * mbs * n_micro * dp

    def stub(steps, mbs, n_micro, dp):
        ...

    assert parallelism_3d.grade_consumed(stub).passed is None
    assert parallelism_3d.grade_consumed(samples).ok
    assert "over all DP ranks" in parallelism_3d.grade_consumed(steps_only).hint


def test_megatron_readers_grader_checks_the_measured_world_and_other_layouts():
    measured = [{"rank": r, "bytes_read": 216 if r in (0, 2, 4, 6) else 0} for r in range(8)]

    def right(grid):
        return [r for r in range(grid.world_size)
                if grid.coords(r).tp_rank == 0 and grid.coords(r).pp_rank in (0, grid.pp - 1)]

    def first_stage_only(grid):
        return [r for r in range(grid.world_size)
                if grid.coords(r).tp_rank == 0 and grid.coords(r).pp_rank == 0]

    assert parallelism_3d.grade_megatron_readers(right, measured).ok
    wrong = parallelism_3d.grade_megatron_readers(first_stage_only, measured)
    assert wrong.passed is False and "[0, 2, 4, 6]" in wrong.message


def test_the_mystery_dp_diagnosis_is_a_choice():
    assert parallelism_3d.grade_mystery_dp(None).passed is None
    assert parallelism_3d.grade_mystery_dp("half the samples are never read").ok
    assert parallelism_3d.grade_mystery_dp("correct").passed is False


def test_drop_last_flags_need_both():
    from torch.utils.data import BatchSampler, DistributedSampler

    def batch_sizes(sampler_drop_last, loader_drop_last, rank=0):
        sampler = DistributedSampler(range(1000), num_replicas=3, rank=rank,
                                     drop_last=sampler_drop_last, shuffle=False)
        return [len(b) for b in BatchSampler(sampler, 64, drop_last=loader_drop_last)]

    assert fast_loading.grade_drop_last_flags(None, batch_sizes).passed is None
    assert fast_loading.grade_drop_last_flags((True, True), batch_sizes).ok
    assert fast_loading.grade_drop_last_flags((True, False), batch_sizes).passed is False


@pytest.mark.parametrize("bad", [[], [{"id": [0, 1]}]])
def test_a_mixed_loader_that_loses_ids_is_not_yet(bad, tmp_path):
    assert fast_loading.grade_mixed(None, tmp_path).passed is None
    assert fast_loading.grade_mixed(bad, tmp_path).passed is False
