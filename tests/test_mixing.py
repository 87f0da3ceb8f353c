"""The mixing scores' scale, their verdicts and errors; the buffer-shuffle helpers."""

import random

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from talk_helpers.checks.mixing import (
    GOOD_MIXING,
    ShuffleReport,
    batch_mixing,
    block_counts,
    effective_groups,
    rank_mixing,
    shuffle_report,
    step_report,
)
from talk_helpers.model.buffers import buffer_shuffle, unbatch_shuffle_rebatch

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
def test_within_shard_shuffle_scores_at_most_one_shard_in_w(workers):
    epochs = within_shard_epochs(workers, seed=workers)
    blocks = shuffle_report(epochs, batch_size=BATCH)
    grouped = shuffle_report(epochs, groups=CLASSES, batch_size=BATCH)
    # Each batch comes from one of `workers` shards: at the block count `workers` it holds
    # one block, so the smallest block score is about 0.
    assert blocks.blocks[workers] < 0.05 and blocks.mixing < 0.05
    assert grouped.mixing < 0.5
    assert max(blocks.unchanged) < 0.1   # positions change: the batches *look* random
    assert not blocks.ok and not grouped.ok and not blocks.well_mixed


def test_the_old_storage_spread_is_fooled_by_two_distant_blocks_but_the_score_is_not():
    # 20 blocks of 50 ids; every batch of 20 draws from block j and block 19 - j only.
    rng = np.random.default_rng(0)
    epochs = []
    for _ in range(2):
        pairs = [rng.permutation(np.r_[j * 50:(j + 1) * 50, (19 - j) * 50:(20 - j) * 50])
                 for j in rng.permutation(10)]
        epochs.append(np.concatenate(pairs))
    report = shuffle_report(epochs, batch_size=20)
    assert np.mean(report.spread) > 0.9          # the old score: "as spread as uniform"
    assert report.mixing < 0.15 and not report.well_mixed


def issue_example(rng, micro_batch, ranks=2, workers=2, n=48):
    """Each (rank, worker) shuffles its own contiguous block; a rank's loader takes one
    micro-batch from each worker in turn. Returns rank -> micro-batches."""
    size = n // (ranks * workers)
    out = []
    for rank in range(ranks):
        per_worker = []
        for worker in range(workers):
            block = rng.permutation(np.arange(size) + size * (workers * rank + worker))
            per_worker.append([block[i:i + micro_batch] for i in range(0, size, micro_batch)])
        out.append([b for step in zip(*per_worker, strict=True) for b in step])
    return out


def global_order(rank_batches):
    return np.concatenate([b for step in zip(*rank_batches, strict=True) for b in step])


@pytest.mark.parametrize("micro_batch", [2, 3, 4, 6])
def test_shard_local_shuffle_of_the_issue_is_never_well_mixed_per_step(micro_batch):
    rng = np.random.default_rng(micro_batch)
    epochs = [issue_example(rng, micro_batch) for _ in range(2)]
    report = step_report(epochs)
    assert report.rank_scores == pytest.approx([0.0, 0.0], abs=1e-9)
    assert not report.well_mixed and not report.ok
    assert "poorly mixed" in repr(report)
    assert not rank_mixing(epochs[0]).well_mixed


def test_issue_example_scored_on_the_global_step_is_poorly_mixed():
    rng = np.random.default_rng(4)
    orders = [global_order(issue_example(rng, 4)) for _ in range(2)]
    report = shuffle_report(orders, batch_size=8)          # a global step: 2 ranks × 4
    assert report.mixing < 0.5 and not report.well_mixed


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), ranks=st.sampled_from([1, 2, 4]),
       workers=st.sampled_from([1, 2, 4]), micro_batch=st.integers(2, 8),
       block=st.sampled_from([16, 24, 32]))
def test_a_shard_local_shuffle_never_reads_well_mixed(seed, ranks, workers, micro_batch,
                                                      block):
    if ranks * workers < 2:
        workers = 2
    rng = np.random.default_rng(seed)
    n = block * ranks * workers
    epochs = [issue_example(rng, micro_batch, ranks, workers, n) for _ in range(2)]
    assert not step_report(epochs).well_mixed


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(600, 2000), batch=st.integers(16, 40))
def test_uniform_permutations_read_about_one_and_well_mixed(seed, n, batch):
    rng = np.random.default_rng(seed)
    report = shuffle_report([rng.permutation(n) for _ in range(2)], batch_size=batch)
    assert 0.8 <= report.mixing < 1.3
    assert report.well_mixed and report.ok


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), world=st.sampled_from([1, 2, 4]),
       micro_batch=st.integers(8, 32))
@example(seed=0, world=4, micro_batch=15)  # 64 blocks on rank 0: 3.5 spreads by chance
def test_uniform_micro_batches_are_never_called_poorly_mixed(seed, world, micro_batch):
    rng = np.random.default_rng(seed)
    epochs = []
    for _ in range(2):
        order = rng.permutation(1920)
        epochs.append([[order[r::world][i:i + micro_batch]
                        for i in range(0, 1920 // world, micro_batch)] for r in range(world)])
    report = step_report(epochs)
    assert report.well_mixed or report.too_few_samples
    assert 0.5 < report.mixing < 1.5
    assert "poorly mixed" not in repr(report)


def test_a_small_uniform_sample_says_too_few_samples_rather_than_poorly_mixed():
    rng = np.random.default_rng(11)
    reports = [shuffle_report([rng.permutation(48) for _ in range(2)], batch_size=4)
               for _ in range(40)]
    assert not any("poorly mixed" in repr(r) for r in reports)
    unproven = [r for r in reports if not r.well_mixed]
    assert unproven and all(r.too_few_samples and not r.ok for r in unproven)
    assert all("too few samples" in repr(r) for r in unproven)


def k_of_m_epoch(rng, m, k, block, batch):
    """An order whose every batch draws from k of the m contiguous storage blocks."""
    blocks = rng.permutation(m).reshape(m // k, k)
    parts = []
    for group in blocks[rng.permutation(m // k)]:
        pool = rng.permutation(np.concatenate([np.arange(b * block, (b + 1) * block)
                                               for b in group]))
        parts.append(pool)
    order = np.concatenate(parts)
    assert (k * block) % batch == 0
    return order


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       mk=st.sampled_from([(2, 1), (4, 1), (4, 2), (8, 1), (8, 2), (8, 4), (16, 2),
                           (16, 4), (16, 8), (32, 4)]),
       block=st.sampled_from([32, 64]))
def test_batches_from_k_of_m_blocks_score_at_most_about_k_over_m(seed, mk, block):
    m, k = mk
    batch = 16
    rng = np.random.default_rng(seed)
    orders = [k_of_m_epoch(rng, m, k, block, batch) for _ in range(2)]
    report = shuffle_report(orders, batch_size=batch)
    assert m in report.blocks
    # At most k effective blocks per batch (a little more without replacement).
    bound = (k * (batch - 1) / (batch - k) - 1) / (m - 1)
    assert report.mixing <= bound + 0.05
    assert report.mixing <= k / m + 0.1
    if k / m < GOOD_MIXING - 0.2:
        assert not report.well_mixed


def test_a_rank_reading_one_half_is_poorly_mixed_though_the_global_order_is_not():
    rng = np.random.default_rng(7)
    epochs = []
    for _ in range(2):
        halves = [rng.permutation(np.arange(r * 480, (r + 1) * 480)) for r in range(2)]
        epochs.append([[h[i:i + 8] for i in range(0, 480, 8)] for h in halves])
    report = step_report(epochs)
    assert report.rank_scores[0] < 0.05 and report.rank_scores[1] < 0.05
    assert not report.well_mixed
    glob = shuffle_report([global_order(e) for e in epochs], batch_size=16)
    assert glob.blocks[2] > 1.0      # the interleaved steps hold both halves


def test_effective_groups_is_about_5_8_for_8_uniform_draws_from_16_shards():
    rng = np.random.default_rng(0)
    shards = np.arange(1024) // 64
    values = [effective_groups(np.split(rng.permutation(1024), 128), shards)
              for _ in range(20)]
    assert np.mean(values) == pytest.approx(5.8, abs=0.1)
    one_shard = [np.arange(s * 64, s * 64 + 8) for s in range(16)]
    assert effective_groups(one_shard, shards) == 1.0


def test_step_report_reports_effective_groups_per_rank_with_groups():
    shards = np.arange(256) // 16
    rng = np.random.default_rng(1)
    epochs = [[[rng.permutation(np.arange(s * 16, s * 16 + 16))[:8]
                for s in range(r, 16, 2)] for r in range(2)] for _ in range(2)]
    report = step_report(epochs, groups=shards)
    assert report.rank_effective == [1.0, 1.0]
    assert not report.well_mixed
    assert "effective groups per micro-batch" in repr(report)


def test_batch_mixing_matches_the_report_and_block_counts_grow_with_pairs():
    rng = np.random.default_rng(2)
    orders = [rng.permutation(600) for _ in range(2)]
    report = shuffle_report(orders, batch_size=20)
    batches = [b for o in orders for b in np.split(o, 30)]
    assert batch_mixing(batches) == pytest.approx(report.mixing)
    assert block_counts(600, 10_000) == (2, 4, 8, 16, 32, 64)
    assert block_counts(48, 100) == (2,)
    assert block_counts(1, 100) == ()


def test_a_rank_without_batches_is_not_measured_rather_than_well_mixed():
    rng = np.random.default_rng(5)
    epochs = [[[rng.permutation(400)[:8] for _ in range(20)], []] for _ in range(2)]
    report = step_report(epochs)
    assert np.isnan(report.mixing) and not report.well_mixed and not report.ok
    assert "not measured" in repr(report)


@pytest.mark.parametrize("bad, match", [
    ([[[[0, 1]]]], "at least 2 epochs"),
    ([[[[0, 1]], [[2, 3]]], [[[0, 1]]]], "same number of ranks"),
    ([[]], "non-empty list of ranks"),
])
def test_step_report_bad_input_names_the_argument(bad, match):
    with pytest.raises(ValueError, match=match):
        step_report(bad)


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
