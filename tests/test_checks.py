"""The checks every notebook ends on: exactly once, batches per rank, batch sizes."""

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from talk_helpers.checks import (
    check_batch_counts,
    check_batch_sizes,
    check_exactly_once,
    ids_of,
)

# ---------------------------------------------------------------- ids_of


def test_ids_of_flattens_every_supported_container():
    samples = [
        3,
        np.int32(4),
        torch.tensor([[5, 6], [7, 8]]),
        np.array([9, 10], dtype=np.uint16),
        {"id": torch.tensor([11]), "x": torch.zeros(1, 3)},
        [{"id": 12}, {"id": [13, 14]}],
        (15, 16),
        [],
    ]
    ids = ids_of(samples)
    assert ids.dtype == np.int64
    assert ids.tolist() == list(range(3, 17))


def test_ids_of_accepts_a_list_of_tensor_batches_of_any_integer_dtype():
    batches = [torch.tensor([0, 1], dtype=torch.int32), torch.tensor([2], dtype=torch.uint8),
               torch.tensor(3), torch.tensor([[4], [5]])]
    assert ids_of(batches).tolist() == [0, 1, 2, 3, 4, 5]


def test_ids_of_a_scalar_int_is_one_id():
    assert ids_of(7).tolist() == [7]


@pytest.mark.parametrize(
    "bad, got",
    [
        ([1.5], "float"),
        (torch.tensor([1.0]), "float"),
        (np.array([2.0]), "float"),
        ([[1], [2.0]], "float"),
        ([True, 1], "bool"),
        (torch.tensor([True]), "bool"),
        ("abc", "str"),
        ([1, "a"], "str"),
    ],
)
def test_non_integer_samples_are_rejected_naming_the_argument(bad, got):
    with pytest.raises(TypeError, match=f"samples must hold integer ids, got {got}"):
        ids_of(bad)


def test_negative_ids_are_rejected_with_an_example():
    with pytest.raises(ValueError, match="samples contains negative ids, e.g. -3"):
        ids_of([torch.tensor([1, -3]), 2])


def test_unsupported_types_are_rejected_naming_the_argument_and_position():
    with pytest.raises(TypeError, match=r"samples must hold ints.*NoneType at samples\[1\]"):
        ids_of([1, None])


def test_ids_beyond_int64_are_rejected_instead_of_wrapping_around():
    with pytest.raises(ValueError, match="samples ids must fit in int64"):
        ids_of([1, 2**70])
    with pytest.raises(ValueError, match="samples ids must fit in int64"):
        ids_of(np.array([2**63], dtype=np.uint64))


def test_a_dict_without_an_id_key_is_rejected():
    with pytest.raises(TypeError, match="samples dicts must have an 'id' key"):
        ids_of([{"x": 1}])


# ---------------------------------------------------------------- check_exactly_once


def test_every_id_once_is_ok():
    report = check_exactly_once(torch.randperm(100), 100)
    assert report.ok
    assert (report.expected_count, report.unique_count, report.seen_count) == (100, 100, 100)
    assert report.duplicates == {} and report.missing == [] and report.unexpected == []
    assert repr(report) == "✔ every sample once\n  100 expected · 100 unique · 100 read in all"


def test_duplicates_are_counted_per_id():
    report = check_exactly_once([0, 1, 1, 2, 2, 2, 3], 4)
    assert not report.ok
    assert report.duplicates == {1: 2, 2: 3}
    assert report.seen_count == 7 and report.unique_count == 4
    assert (report.duplicated_count, report.missing_count, report.unexpected_count) == (2, 0, 0)


def test_missing_ids_are_listed_sorted():
    report = check_exactly_once([4, 0, 2], 6)
    assert report.missing == [1, 3, 5]
    assert repr(report) == "✘ 3 missing\n  6 expected · 3 unique · 3 read in all"


def test_unexpected_ids_are_listed_and_shown():
    report = check_exactly_once([0, 1, 2, 9, 7], 3)
    assert report.unexpected == [7, 9]
    assert not report.ok
    assert report.headline == "✘ 2 unexpected"


def test_repr_matches_the_talk_example():
    samples = list(range(46)) + list(range(46, 67)) * 2  # 21 ids twice, 33 never
    report = check_exactly_once(samples, 100)
    assert repr(report) == ("✘ 21 duplicated · 33 missing\n"
                            "  100 expected · 67 unique · 88 read in all")


def test_summary_shows_a_few_examples_of_each_problem():
    report = check_exactly_once([0, 0, 0, 50] + list(range(2, 40)), 40)
    text = report.summary(limit=3)
    assert "duplicated: 0 ×3" in text
    assert "missing: 1" in text
    assert "unexpected: 50" in text
    many = check_exactly_once([], 1000).summary(limit=5)
    assert "missing: 0, 1, 2, 3, 4, … (+995 more)" in many


def test_html_is_green_when_ok_and_red_with_examples_when_not():
    assert "#009E73" in check_exactly_once([0, 1], 2)._repr_html_()
    bad = check_exactly_once([0, 0], 2)._repr_html_()
    assert "#D55E00" in bad and "missing" in bad and "0 ×2" in bad
    assert "<small>2 expected · 1 unique · 2 read in all</small>" in bad


def test_empty_samples_with_nothing_expected_is_ok():
    assert check_exactly_once([], 0).ok


def test_empty_expected_with_samples_is_an_error_naming_both():
    with pytest.raises(ValueError, match="expected is empty but samples holds 2"):
        check_exactly_once([0, 1], [])


@pytest.mark.parametrize(
    "expected",
    [range(5, 10), [9, 5, 7, 6, 8], np.arange(5, 10), torch.arange(5, 10)],
)
def test_expected_can_be_any_collection_of_ids(expected):
    assert check_exactly_once([torch.tensor([5, 6]), [7, 8], 9], expected).ok
    assert check_exactly_once([5, 6, 7, 8], expected).missing == [9]
    assert check_exactly_once([0, 5, 6, 7, 8, 9], expected).unexpected == [0]


def test_expected_zero_to_n_as_a_list_behaves_like_n():
    assert repr(check_exactly_once([0, 0, 2], [2, 1, 0])) == repr(check_exactly_once([0, 0, 2], 3))


def test_lists_of_batches_from_a_loader_are_checked_as_one_stream():
    batches = [torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5]), torch.tensor([6, 3])]
    report = check_exactly_once(batches, 8)
    assert report.duplicates == {3: 2} and report.missing == [7]


def test_numpy_and_dict_batches_are_checked():
    batches = [{"id": np.array([0, 1]), "x": np.zeros(2)}, {"id": np.array([2, 3])}]
    assert check_exactly_once(batches, 4).ok


def test_sparse_large_ids_are_checked_without_a_huge_table():
    big = 10**15
    report = check_exactly_once([big, big, 3], [3, big, big + 1])
    assert report.duplicates == {big: 2}
    assert report.missing == [big + 1]


def test_ten_million_ids_are_checked_correctly():
    rng = np.random.default_rng(0)
    ids = rng.permutation(10_000_000)
    lost = np.sort(ids[:500])
    ids[:500] = ids[500:1000]  # 500 ids twice, 500 never
    report = check_exactly_once(list(torch.from_numpy(ids).split(4096)), 10_000_000)
    assert report.seen_count == 10_000_000
    assert report.duplicates == dict.fromkeys(np.sort(ids[:500]).tolist(), 2)
    assert report.missing == lost.tolist()
    assert report.unique_count == 10_000_000 - 500


@pytest.mark.parametrize(
    "expected, error, message",
    [
        (-1, ValueError, "expected must be an int N >= 0"),
        (2.5, TypeError, "expected must be an int N"),
        ([0, 1, 1], ValueError, "expected holds duplicate ids, e.g. 1"),
        ([-2, 1], ValueError, "expected contains negative ids, e.g. -2"),
        (["a"], TypeError, "expected must hold integer ids, got str"),
        (torch.tensor([0.0]), TypeError, "expected must hold integer ids, got float"),
    ],
)
def test_bad_expected_is_rejected_naming_the_argument(expected, error, message):
    with pytest.raises(error, match=message):
        check_exactly_once([0], expected)


def test_bad_samples_are_rejected_by_check_exactly_once_naming_the_argument():
    with pytest.raises(TypeError, match="samples must hold integer ids, got float"):
        check_exactly_once([0.0], 1)


def _reference(samples: list[int], n: int) -> tuple:
    seen = Counter(samples)
    return (
        {i: c for i, c in seen.items() if c > 1},
        [i for i in range(n) if i not in seen],
        sorted(i for i in seen if i >= n),
        len(seen),
    )


@settings(max_examples=200, deadline=None)
@given(
    samples=st.lists(st.integers(0, 60), max_size=80),
    n=st.integers(0, 50),
    batch=st.integers(1, 7),
)
def test_check_agrees_with_a_counter_reference(samples, n, batch):
    if n == 0 and samples:
        return
    batches = [torch.tensor(samples[i:i + batch]) for i in range(0, len(samples), batch)]
    report = check_exactly_once(batches, n)
    duplicates, missing, unexpected, unique = _reference(samples, n)
    assert report.duplicates == duplicates
    assert report.missing == missing
    assert report.unexpected == unexpected
    assert report.unique_count == unique
    assert report.ok == (not duplicates and not missing and not unexpected)


@settings(max_examples=100, deadline=None)
@given(
    samples=st.lists(st.integers(0, 2**62), max_size=30),
    expected=st.sets(st.integers(0, 2**62), min_size=1, max_size=30),
)
def test_sparse_check_agrees_with_a_counter_reference(samples, expected):
    report = check_exactly_once(samples, sorted(expected))
    seen = Counter(samples)
    assert report.duplicates == {i: c for i, c in seen.items() if c > 1}
    assert report.missing == sorted(expected - set(seen))
    assert report.unexpected == sorted(set(seen) - expected)


def test_shuffle_report_is_importable_with_the_other_checks():
    from talk_helpers import checks
    from talk_helpers.checks import mixing

    assert checks.shuffle_report is mixing.shuffle_report


# ---------------------------------------------------------------- check_batch_counts


def test_equal_batch_counts_are_ok():
    report = check_batch_counts([5, 5])
    assert report.ok and report.counts == (5, 5)
    assert repr(report) == "✔ batches per rank: 5 on each of 2 ranks"
    assert check_batch_counts({1: 3, 0: 3}).ok


def test_unequal_batch_counts_name_the_step_where_ddp_blocks():
    report = check_batch_counts({0: 5, 1: 4})
    assert not report.ok
    assert (report.min, report.max, report.blocking_step) == (4, 5, 5)
    assert repr(report) == (
        "✘ batches per rank: rank 0: 5 · rank 1: 4 — DDP would block at step 5 (rank 1 has stopped)"
    )
    assert "#D55E00" in report._repr_html_()


def test_several_stopped_ranks_are_all_named():
    report = check_batch_counts([3, 2, 2, 3])
    assert report.stopped_ranks == (1, 2)
    assert "(ranks 1, 2 have stopped)" in repr(report)


@pytest.mark.parametrize(
    "counts, error, message",
    [
        ([], ValueError, "counts is empty"),
        ([3, -1], ValueError, "counts must be >= 0, got -1 for rank 1"),
        ({0: 1, 2: 1}, ValueError, "counts keys must be the ranks 0..1"),
        ([1.5], TypeError, "counts must hold integer batch counts"),
        (5, TypeError, "counts must be a sequence"),
    ],
)
def test_bad_batch_counts_are_rejected_naming_the_argument(counts, error, message):
    with pytest.raises(error, match=message):
        check_batch_counts(counts)


# ---------------------------------------------------------------- check_batch_sizes


def test_full_batches_are_ok():
    report = check_batch_sizes([torch.arange(4)] * 3, 4)
    assert report.ok and report.partial == 0 and report.sizes == Counter({4: 3})
    assert repr(report) == "✔ 3 batches of 4"


def test_partial_batches_are_counted_and_listed():
    batches = [list(range(32))] * 8 + [list(range(7)), list(range(3))]
    report = check_batch_sizes(batches, 32)
    assert not report.ok
    assert report.partial == 2 and report.oversized == 0
    assert report.sizes == Counter({32: 8, 7: 1, 3: 1})
    assert repr(report) == "✘ 10 batches: 8 of 32, 2 partial (7, 3)"


def test_oversized_batches_are_reported():
    report = check_batch_sizes([{"id": torch.arange(6)}, {"id": torch.arange(4)}], 4)
    assert report.oversized == 1
    assert repr(report) == "✘ 2 batches: 1 of 4, 1 oversized (6)"


@pytest.mark.parametrize(
    "batches, batch_size, error, message",
    [
        ([[0]], 0, ValueError, "batch_size must be at least 1, got 0"),
        ([[0]], 2.0, TypeError, "batch_size must be an int"),
        (iter([[0]]), 1, TypeError, "batches must be a list of batches"),
        ([[0], [0.5]], 1, TypeError, r"batches must hold integer ids, got float.* at batches\[1\]"),
    ],
)
def test_bad_batch_size_input_is_rejected_naming_the_argument(batches, batch_size, error, message):
    with pytest.raises(error, match=message):
        check_batch_sizes(batches, batch_size)


# ---------------------------------------------------------------- check_random_draws

from talk_helpers.checks import check_random_draws  # noqa: E402


def worker_draws(rng, same_stream, workers=2, per_worker=50, epoch=0):
    streams = [rng.random(per_worker) for _ in range(workers)]
    if same_stream:
        streams = [streams[0]] * workers
    return [{"worker": w, "epoch": epoch, "id": w * per_worker + k, "draw": float(v)}
            for w, stream in enumerate(streams) for k, v in enumerate(stream)]


def test_workers_that_copy_one_random_stream_are_reported_by_name():
    report = check_random_draws(worker_draws(np.random.default_rng(0), same_stream=True),
                                across="worker")
    assert not report.ok
    assert report.repeats == {"worker": 1.0}
    assert repr(report).startswith("✘ random draws (draw) repeat across workers")
    assert "worker 0 = worker 1: 50/50" in repr(report)
    assert "✘" in report._repr_html_()


def test_independent_workers_pass():
    report = check_random_draws(worker_draws(np.random.default_rng(1), same_stream=False))
    assert report.ok and repr(report).startswith("✔")
    assert [row.field for row in report.rows] == ["worker", "epoch"]


def test_the_same_augmentation_for_a_sample_every_epoch_is_found_by_id():
    rng = np.random.default_rng(2)
    values = rng.random(40)
    columns = {"id": np.tile(np.arange(40), 2), "epoch": np.repeat([0, 1], 40),
               "aug": np.tile(values, 2)}
    # In another order the second epoch: position pairing sees nothing, id pairing all.
    order = np.r_[np.arange(40), 40 + rng.permutation(40)]
    shuffled = {k: v[order] for k, v in columns.items()}
    by_id = check_random_draws(shuffled, value="aug", across="epoch", match="id")
    assert not by_id.ok and by_id.rows[0].equal == 40
    assert check_random_draws(shuffled, value="aug", across="epoch").rows[0].equal < 5


def test_discrete_draws_collide_by_chance_without_failing():
    rng = np.random.default_rng(3)
    draws = {"worker": np.repeat([0, 1, 2], 300), "draw": rng.integers(0, 4, 900)}
    report = check_random_draws(draws, across="worker")
    assert report.ok
    assert report.rows[0].chance == pytest.approx(0.25, abs=0.02)


def test_vector_draws_are_compared_whole_and_tensors_are_accepted():
    torch.manual_seed(0)
    rank0 = [torch.rand(3) for _ in range(10)]
    rank1 = [t.clone() for t in rank0[:5]] + [torch.rand(3) for _ in range(5)]
    draws = [{"rank": r, "draw": t} for r, stream in enumerate((rank0, rank1)) for t in stream]
    report = check_random_draws(draws, across="rank")
    assert report.rows[0].equal == 5 and report.rows[0].compared == 10
    assert not report.ok
    half = [{"rank": r, "draw": t[:1] if r else t} for r, t in
            [(d["rank"], d["draw"]) for d in draws]]
    assert check_random_draws(half, across="rank").rows[0].equal == 0   # shapes differ


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), workers=st.integers(2, 4), ranks=st.integers(1, 3),
       per=st.integers(1, 40), copy=st.booleans())
def test_copied_streams_always_fail_and_fresh_ones_pass(seed, workers, ranks, per, copy):
    rng = np.random.default_rng(seed)
    base = rng.random(per)
    draws = [{"worker": w, "rank": r, "draw": float(v)}
             for r in range(ranks) for w in range(workers)
             for v in (base if copy else rng.random(per))]
    report = check_random_draws(draws)
    assert report.ok is (not copy)
    assert report.repeats["worker"] == (1.0 if copy else 0.0)


@pytest.mark.parametrize("draws, kwargs, error, match", [
    ([{"worker": 0, "draw": 1.0}], {"value": "aug"}, ValueError, "value='aug' is not a field"),
    ([{"id": 0, "draw": 1.0}], {}, ValueError, "across names fields"),
    ({"worker": [0, 1], "draw": [0.5]}, {}, ValueError, "equal lengths"),
    ([{"worker": 0, "draw": 1.0}, {"draw": 2.0}], {}, ValueError, "same fields"),
    ("abc", {}, TypeError, "draws must be a list of dicts"),
    ([{"worker": 0, "draw": 1.0}], {"match": "id"}, ValueError, "match='id' is not a field"),
    ([{"worker": 0, "draw": 1.0}], {"across": 3}, TypeError, "across must be"),
])
def test_bad_draws_arguments_are_named(draws, kwargs, error, match):
    with pytest.raises(error, match=match):
        check_random_draws(draws, **kwargs)
