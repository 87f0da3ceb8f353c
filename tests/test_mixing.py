"""shuffle_report's scale, its verdicts and its errors; the buffer-shuffle helpers."""

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from talk_helpers.mixing import (
    ShuffleReport,
    buffer_shuffle,
    shuffle_report,
    unbatch_shuffle_rebatch,
)

N = 1000
CLASSES = np.arange(N) // 100          # stored sorted by class, as per-class folders are
BATCH = 32


def uniform_epochs(seed, epochs=3, n=N):
    rng = np.random.default_rng(seed)
    return [rng.permutation(n) for _ in range(epochs)]


def within_shard_epochs(workers, seed, epochs=3):
    """Each worker shuffles its own contiguous shard; batches alternate between workers."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(epochs):
        shards = [rng.permutation(s) for s in np.array_split(np.arange(N), workers)]
        per_worker = [[s[i:i + BATCH] for i in range(0, len(s), BATCH)] for s in shards]
        batches = [b for step in range(max(map(len, per_worker)))
                   for w in per_worker if step < len(w) for b in [w[step]]]
        out.append(np.concatenate(batches))
    return out


def buffer_epochs(buffer_size, seed, epochs=3):
    rng = random.Random(seed)
    return [np.fromiter(buffer_shuffle(range(N), buffer_size, rng), dtype=np.int64)
            for _ in range(epochs)]


@pytest.mark.parametrize("seed", range(5))
def test_uniform_permutations_score_near_one(seed):
    report = shuffle_report(uniform_epochs(seed), batch_size=BATCH)
    assert report.mixing > 0.9
    grouped = shuffle_report(uniform_epochs(seed), groups=CLASSES, batch_size=BATCH)
    assert 0.9 < grouped.mixing < 1.1
    assert report.ok and grouped.ok


def test_identity_scores_zero_and_repeats():
    report = shuffle_report([np.arange(N)] * 3, groups=CLASSES, batch_size=BATCH)
    assert report.mixing < 0.05
    assert report.unchanged == [1.0, 1.0]
    assert report.spearman == pytest.approx([1.0, 1.0])
    assert not report.order_changes and not report.ok
    assert shuffle_report([np.arange(N)] * 2, batch_size=BATCH).mixing < 0.05


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_within_shard_shuffle_scores_low(workers):
    epochs = within_shard_epochs(workers, seed=workers)
    spread = shuffle_report(epochs, batch_size=BATCH)
    grouped = shuffle_report(epochs, groups=CLASSES, batch_size=BATCH)
    # Each batch comes from one of `workers` shards: about 1/workers of the dataset.
    assert spread.mixing == pytest.approx(1 / workers, abs=0.06)
    assert grouped.mixing < 0.5
    assert max(spread.unchanged) < 0.1   # positions change: the batches *look* random
    assert not spread.ok and not grouped.ok


def test_buffer_shuffle_mixing_rises_with_buffer_size():
    sizes = [1, 10, 50, 200, 500, 1000]
    scores = [np.mean([shuffle_report(buffer_epochs(b, seed), groups=CLASSES,
                                      batch_size=BATCH).mixing for seed in range(3)])
              for b in sizes]
    assert all(a < b for a, b in zip(scores, scores[1:], strict=False)), scores
    assert scores[0] < 0.05 and scores[-1] > 0.9


def test_same_order_every_epoch_is_not_ok_even_when_mixed():
    order = np.random.default_rng(0).permutation(N)
    report = shuffle_report([order, order.copy()], batch_size=BATCH)
    assert report.mixing > 0.9
    assert not report.order_changes and not report.ok
    assert "repeats" in repr(report)


def test_accepts_tensors_lists_and_2d_arrays():
    epochs = uniform_epochs(1, n=100)
    a = shuffle_report([torch.as_tensor(e) for e in epochs])
    b = shuffle_report([e.tolist() for e in epochs])
    c = shuffle_report(np.stack(epochs))
    d = shuffle_report(torch.as_tensor(np.stack(epochs)))
    assert a.mixing == b.mixing == c.mixing == d.mixing
    assert a.batch_size == 10                           # default about sqrt(N)


def test_groups_as_dict_equals_groups_as_sequence():
    epochs = uniform_epochs(2, n=100)
    labels = np.arange(100) // 10
    by_list = shuffle_report(epochs, groups=labels.tolist(), batch_size=10)
    by_dict = shuffle_report(epochs, groups={i: f"class{c}" for i, c in enumerate(labels)},
                             batch_size=10)
    assert by_list.group_scores == pytest.approx(by_dict.group_scores)
    assert by_list.n_groups == 10


def test_repr_and_html_give_a_verdict():
    good = shuffle_report(uniform_epochs(3), batch_size=BATCH)
    bad = shuffle_report([np.arange(N)] * 2, batch_size=BATCH)
    assert repr(good).startswith("✔") and repr(bad).startswith("✘")
    assert "✔" in good._repr_html_() and "✘" in bad._repr_html_()
    assert "mixing" in repr(good)


@pytest.mark.parametrize("bad, match", [
    (([0, 1, 2],), "at least 2 epochs"),
    (([[0, 1, 2], [2, 1]],), "same length"),
    (([[0, 1, 2], [2, 1, 0]], [0, 1]), "groups has length 2"),
    (([[0, 1, 2], [2, 1, 0]], {0: "a", 1: "b"}), "groups has no entry"),
])
def test_bad_input_names_the_argument(bad, match):
    with pytest.raises(ValueError, match=match):
        shuffle_report(*bad)


@pytest.mark.parametrize("batch_size", [0, -3])
def test_batch_size_below_one_is_rejected(batch_size):
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        shuffle_report([[0, 1, 2], [2, 1, 0]], batch_size=batch_size)


def test_non_integer_ids_are_rejected():
    with pytest.raises(TypeError, match=r"epoch_orders\[1\]"):
        shuffle_report([[0, 1], ["a", "b"]])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(20, 300), seed=st.integers(0, 2**32 - 1),
       batch_size=st.integers(2, 5))
def test_scores_are_finite_and_identity_is_never_better(n, seed, batch_size):
    rng = np.random.default_rng(seed)
    shuffled = shuffle_report([rng.permutation(n) for _ in range(2)], batch_size=batch_size)
    identity = shuffle_report([np.arange(n)] * 2, batch_size=batch_size)
    assert isinstance(shuffled, ShuffleReport)
    assert np.isfinite(shuffled.mixing) and 0 <= identity.mixing < shuffled.mixing
    assert all(0 <= u <= 1 for u in shuffled.unchanged)
    assert all(-1 - 1e-9 <= r <= 1 + 1e-9 for r in shuffled.spearman)


@settings(max_examples=40, deadline=None)
@given(items=st.lists(st.integers(), max_size=200), buffer_size=st.integers(1, 50),
       seed=st.integers(0, 1000))
def test_buffer_shuffle_is_a_permutation_and_moves_items_forward_by_less_than_buffer(
        items, buffer_size, seed):
    out = list(buffer_shuffle(list(enumerate(items)), buffer_size, random.Random(seed)))
    assert sorted(out) == sorted(enumerate(items))
    for position, (index, _) in enumerate(out):
        assert index - position < buffer_size


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 120), worker_batch=st.integers(1, 16), batch_size=st.integers(1, 16),
       buffer_size=st.integers(1, 64))
def test_unbatch_shuffle_rebatch_keeps_every_sample_once(n, worker_batch, batch_size,
                                                         buffer_size):
    batches = [list(range(i, min(i + worker_batch, n))) for i in range(0, n, worker_batch)]
    out = list(unbatch_shuffle_rebatch(batches, buffer_size, batch_size, random.Random(0)))
    assert sorted(s for b in out for s in b) == list(range(n))
    assert all(len(b) == batch_size for b in out[:-1])


def test_buffer_size_below_one_is_rejected():
    with pytest.raises(ValueError, match="buffer_size"):
        list(buffer_shuffle(range(3), 0, random.Random(0)))
