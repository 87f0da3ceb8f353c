"""The DDP training loops of notebook 06 hang or finish as the notebook says."""

import pytest

from talk_helpers.lessons import training
from talk_helpers.model.simulate import simulate
from talk_helpers.runtime.world import run_world

pytestmark = [pytest.mark.distributed,
              pytest.mark.filterwarnings("ignore:This DataLoader will create")]

UNEVEN = dict(shard_sizes=[5, 3, 3, 3], workers=2, batch_size=4)
# fork keeps these worlds fast; the start methods themselves are tested in test_distributed.
WORLD = dict(timeout_s=180, collective_timeout_s=60, start_method="fork")


def _steps(report):
    return [r["steps"] for r in report.results]


def test_naive_loop_fails_when_ranks_get_unequal_batches():
    expected = simulate(UNEVEN["shard_sizes"], nodes=2, workers=2, micro_batch_size=4)
    assert expected.batches_per_rank == [3, 2]
    report = run_world(training.train_naive, 2, args=(UNEVEN,), **WORLD)
    assert not report.ok
    assert report.ranks[0].last_progress == "step 3"


def test_all_reduced_exhausted_flag_stops_every_rank_at_the_same_step():
    report = run_world(training.train_until_any_exhausted, 2, args=(UNEVEN,), **WORLD)
    assert report.ok, report
    assert _steps(report) == [2, 2]


def test_fixed_step_count_with_repeat_gives_every_rank_the_same_steps():
    report = run_world(training.train_fixed_steps, 2, args=(UNEVEN, 3, 2), **WORLD)
    assert report.ok, report
    assert _steps(report) == [3, 3]


def test_join_lets_the_longer_rank_finish_and_keeps_models_equal():
    report = run_world(training.train_with_join, 2, args=(UNEVEN,), **WORLD)
    assert report.ok, report
    assert _steps(report) == [3, 2]
    assert report.results[0]["weight"] == report.results[1]["weight"]


def test_join_with_throw_stops_every_rank_when_the_first_runs_out():
    report = run_world(training.train_with_join_throwing, 2, args=(UNEVEN,), **WORLD)
    assert report.ok, report
    assert _steps(report) == [2, 2]


def test_epochless_training_runs_the_same_steps_on_every_rank():
    report = run_world(training.train_fixed_steps, 2, args=(UNEVEN, 5, None), **WORLD)
    assert report.ok, report
    assert _steps(report) == [5, 5]


def test_join_does_not_cover_a_collective_of_your_own():
    report = run_world(training.train_with_join_and_logging, 2, args=(UNEVEN,),
                       **(WORLD | dict(collective_timeout_s=10)))
    assert not report.ok
    assert [r.last_progress for r in report.ranks] == ["step 3", "step 2"]


def test_join_step_taken_by_one_rank_gets_its_gradient_divided_by_the_world():
    report = run_world(training.train_with_join_gradients, 2, args=(UNEVEN,), **WORLD)
    assert report.ok, report
    long_rank = max(report.results, key=lambda r: r["steps"])
    short_steps = min(r["steps"] for r in report.results)
    for alone, ddp in long_rank["grad_alone_vs_ddp"][short_steps:]:
        assert ddp == pytest.approx(alone / 2, abs=1e-6)


def test_epochless_training_reads_the_shorter_ranks_samples_more_often():
    from collections import Counter

    report = run_world(training.train_fixed_steps, 2, args=(UNEVEN, 6, None), **WORLD)
    assert report.ok, report
    reads = [set(Counter(r["ids"]).values()) for r in report.results]
    assert reads == [{2}, {3}]


def test_join_dividing_by_the_ranks_still_training_keeps_the_lone_steps_full_gradient():
    report = run_world(training.train_with_join_gradients, 2, args=(UNEVEN, False), **WORLD)
    assert report.ok, report
    long_rank = max(report.results, key=lambda r: r["steps"])
    alone, ddp = long_rank["grad_alone_vs_ddp"][-1]
    assert ddp == pytest.approx(alone, abs=1e-6)
