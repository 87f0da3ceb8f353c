"""Draws with replacement: coverage and balance against uniform draws (checks.replacement)."""

import numpy as np
import pytest

from talk_helpers.checks.replacement import check_draws, never_drawn_null


def uniform_draws(rng, n, world, per_rank, epochs=2):
    return [[rng.integers(0, n, per_rank) for _ in range(world)] for _ in range(epochs)]


def test_the_occupancy_null_matches_a_simulation():
    rng = np.random.default_rng(0)
    never = [1000 - np.unique(rng.integers(0, 1000, 1500)).size for _ in range(1000)]
    mean, sd = never_drawn_null(1000, 1500)
    assert abs(np.mean(never) - mean) < 0.6 and abs(np.std(never) - sd) < 0.6


def test_uniform_draws_pass_at_almost_every_seed():
    alarms = sum(not check_draws(uniform_draws(np.random.default_rng(seed), 200, 2, 100),
                                 200).ok for seed in range(1000))
    assert alarms <= 6   # COVERAGE_ALPHA and ALIKE_ALPHA: 0.2% each, 0.4% in all


def test_ids_that_can_never_be_drawn_are_caught():
    rng = np.random.default_rng(1)
    draws = [[rng.integers(0, 400, 250) for _ in range(2)] for _ in range(2)]  # 100 unreachable
    report = check_draws(draws, 500)
    assert report.short and not report.ok
    assert report.headline.startswith("✘ ") and "ids never drawn" in report.headline


def test_ranks_seeded_alike_draw_alike_and_that_is_one_finding():
    rng = np.random.default_rng(2)
    epochs = []
    for _ in range(2):
        same = rng.integers(0, 500, 250)
        epochs.append([same, same.copy()])
    report = check_draws(epochs, 500)
    assert report.alike == [(0, 0, 1), (1, 0, 1)]
    assert not report.short   # the copies are no draws of their own
    assert report.headline == "✘ ranks draw alike"


def test_unexpected_ids_fail_and_draw_counts_are_reported_not_judged():
    report = check_draws([[np.array([0, 1, 1, 1, 7])]], 5)
    assert report.unexpected == 1 and not report.ok
    assert (report.fewest, report.most) == (0, 3)
    assert "not judged" in repr(report)


def test_whole_chunks_drawn_are_judged_as_chunks():
    rng = np.random.default_rng(3)
    epochs = [[np.concatenate([np.arange(8) + 8 * s for s in rng.integers(0, 16, 4)])
               for _ in range(2)] for _ in range(2)]
    assert check_draws(epochs, 128, unit=8).ok
    assert "chunks of 8" in repr(check_draws(epochs, 128, unit=8))


@pytest.mark.parametrize("unit", [0, -1, 1.5, True])
def test_a_bad_unit_is_refused_naming_it(unit):
    with pytest.raises(ValueError, match="unit must be an int ≥ 1"):
        check_draws([[np.array([0])]], 1, unit=unit)
