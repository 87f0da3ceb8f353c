"""The mixing scores' scale, their verdicts and errors; the buffer-shuffle helpers."""

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.mixing_false_alarms import sampler_epochs
from talk_helpers.checks.mixing import (
    GOOD_MIXING,
    STALE_ORDER,
    ShuffleReport,
    batch_mixing,
    block_counts,
    effective_groups,
    shuffle_report,
    step_report,
)
from talk_helpers.checks.uniform_null import (
    poisson_tail,
    same_pair_moments,
    upper_quantile,
    upper_tail,
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


def test_two_distant_blocks_per_batch_score_as_poorly_mixed():
    # 20 blocks of 50 ids; every batch of 20 draws from block j and block 19 - j only.
    rng = np.random.default_rng(0)
    epochs = []
    for _ in range(2):
        pairs = [rng.permutation(np.r_[j * 50:(j + 1) * 50, (19 - j) * 50:(20 - j) * 50])
                 for j in rng.permutation(10)]
        epochs.append(np.concatenate(pairs))
    report = shuffle_report(epochs, batch_size=20)
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
    assert not step_report([epochs[0], epochs[0]]).well_mixed   # one epoch alone


def test_issue_example_scored_on_the_global_step_is_poorly_mixed():
    rng = np.random.default_rng(4)
    orders = [global_order(issue_example(rng, 4)) for _ in range(2)]
    report = shuffle_report(orders, batch_size=8)          # a global step: 2 ranks × 4
    assert report.mixing < 0.5 and not report.well_mixed


@settings(max_examples=25, deadline=None, derandomize=True)
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


def false_alarms(report_of, seeds) -> int:
    """Reports of uniform shuffles that are not a clean pass (poorly mixed, mixing
    unproven, or an order that repeats or stays alike)."""
    alarms = 0
    for seed in seeds:
        report = report_of(np.random.default_rng(seed))
        alarms += not (report.well_mixed and report.order_changes)
    return alarms


# Every size the notebooks, the README and the audit's own examples use, from 40 ids
# (05's drop_last) through 61 (notebooks 09 and 10) to the README's 50,000 (fewer seeds).
SIZES = {
    "shuffle 48 ids, batches of 4": lambda g: shuffle_report(
        [g.permutation(48) for _ in range(2)], batch_size=4),
    "shuffle 61 ids, batches of 5": lambda g: shuffle_report(
        [g.permutation(61) for _ in range(2)], batch_size=5),
    "shuffle 200 ids, batches of 20": lambda g: shuffle_report(
        [g.permutation(200) for _ in range(2)], batch_size=20),
    "shuffle 1000 ids, 10 classes, batches of 32": lambda g: shuffle_report(
        [g.permutation(N) for _ in range(2)], groups=CLASSES, batch_size=BATCH),
    "2 ranks, 40 ids, micro-batches of 4": lambda g: step_report(sampler_epochs(g, 40, 2, 4)),
    "2 ranks, 48 ids, micro-batches of 4": lambda g: step_report(sampler_epochs(g, 48, 2, 4)),
    "2 ranks, 61 ids, micro-batches of 5": lambda g: step_report(sampler_epochs(g, 61, 2, 5)),
    "2 ranks, 61 ids, 3 epochs": lambda g: step_report(sampler_epochs(g, 61, 2, 5, epochs=3)),
    "2 ranks, 400 ids, micro-batches of 10": lambda g: step_report(
        sampler_epochs(g, 400, 2, 10)),
    "4 ranks, 1920 ids, micro-batches of 15": lambda g: step_report(
        sampler_epochs(g, 1920, 4, 15)),
}


QUICK = [size for size in SIZES if size.split(" ids")[0].split()[-1] in ("40", "48", "61")]


@pytest.mark.parametrize("size", list(SIZES))
def test_uniform_shuffles_pass_in_at_least_99_percent_of_seeds_at_every_size_used(size):
    # fixed seeds (300 where a report is quick, 100 above 100 ids): the verdict's
    # false-alarm rate is below 1 % (MIXING_ALPHA and ORDER_ALPHA are 0.2 % each), and
    # the test is the same on every run
    seeds = 300 if size in QUICK else 100
    assert false_alarms(SIZES[size], range(seeds)) <= seeds // 100


def test_uniform_shuffles_pass_at_the_readmes_size():
    def report_of(rng):
        return step_report(sampler_epochs(rng, 50_000, 4, 32))

    assert false_alarms(report_of, range(5)) == 0


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("micro_batch", [8, 15, 32])
def test_uniform_micro_batches_are_never_called_poorly_mixed(world, micro_batch):
    # seed 754096 with 2 ranks and micro-batches of 8 was called poorly mixed by the
    # verdict this one replaced; a fixed sweep of seeds, never a random one
    for seed in [754096, *range(12)]:
        report = step_report(sampler_epochs(np.random.default_rng(seed), 1920, world,
                                            micro_batch))
        assert report.well_mixed and "poorly mixed" not in repr(report), seed
        assert 0.5 < report.mixing < 1.5


def test_uniform_permutations_read_about_one_and_well_mixed():
    rng = np.random.default_rng(3)
    for n, batch in [(600, 16), (999, 27), (2000, 40)]:
        for _ in range(10):
            report = shuffle_report([rng.permutation(n) for _ in range(2)], batch_size=batch)
            assert 0.8 <= report.mixing < 1.3
            assert report.well_mixed and report.ok


def test_too_small_a_size_reads_unproven_whatever_the_seed():
    # 24 ids in batches of 2: a batch is one pair, and even a loader that never mixed
    # would pass by chance too often; the verdict says so, and never ✔
    for seed in range(50):
        rng = np.random.default_rng(seed)
        report = shuffle_report([rng.permutation(24) for _ in range(2)], batch_size=2)
        assert report.too_few_samples and not report.well_mixed and not report.ok
        assert "too few samples to tell" in repr(report)
        assert "poorly mixed" not in repr(report)


@pytest.mark.parametrize("buffer_size", [2, 4, 8])
@pytest.mark.parametrize(("n", "micro_batch"), [(48, 4), (61, 5)])
def test_small_buffers_are_poorly_mixed_at_every_seed(buffer_size, n, micro_batch):
    for seed in range(30):
        epochs = []
        for epoch in range(2):
            order = np.fromiter(buffer_shuffle(range(n), buffer_size,
                                               random.Random(1000 * seed + epoch)), np.int64)
            epochs.append([[order[r::2][i:i + micro_batch]
                            for i in range(0, n // 2, micro_batch)] for r in range(2)])
        report = step_report(epochs)
        assert report.poor and "poorly mixed" in repr(report), seed


@pytest.mark.parametrize(("n", "micro_batch"), [(48, 2), (48, 4), (64, 8)])
def test_shuffle_after_shard_is_poorly_mixed_at_every_seed(n, micro_batch):
    for seed in range(30):
        rng = np.random.default_rng(seed)
        epochs = [issue_example(rng, micro_batch, n=n) for _ in range(2)]
        report = step_report(epochs)
        assert report.poor and not report.well_mixed, seed


def test_a_poorly_mixed_order_is_not_called_similar_for_its_neighbours_alone():
    # each epoch: a random order of 8 blocks of 8 consecutive ids, each block in storage
    # order; epochs share no block order, but neighbours sit side by side in both
    rng = np.random.default_rng(2)
    epochs = [np.concatenate([np.arange(8 * b, 8 * b + 8) for b in rng.permutation(8)])
              for _ in range(2)]
    report = shuffle_report(epochs, batch_size=8)
    assert abs(report.spearman[0]) > 0.8      # 64 samples, but only 8 batches that moved
    assert report.poor and report.order_finding is None


def test_an_order_that_repeats_is_caught_at_every_seed():
    for seed in range(30):
        order = np.random.default_rng(seed).permutation(48)
        report = shuffle_report([order, order.copy()], batch_size=4)
        assert report.order_repeats and not report.order_changes and not report.ok
        assert report.order_problem == "order repeats"
        epochs = sampler_epochs(np.random.default_rng(seed), 48, 2, 4, epochs=1) * 2
        assert step_report(epochs).order_repeats


def test_a_uniform_shuffle_repeated_unchanged_reads_as_one_finding_not_two():
    # a DistributedSampler whose set_epoch is never called: each epoch a uniform shuffle,
    # the same one; its mixing is judged on epoch 0 alone, as a uniform shuffle's
    poor = 0
    for seed in range(300):
        epochs = sampler_epochs(np.random.default_rng(seed), 101, 2, 8, epochs=1) * 2
        report = step_report(epochs)
        assert report.order_repeats
        poor += report.poor
        flat = np.random.default_rng(seed).permutation(101)
        poor += shuffle_report([flat, flat.copy(), flat.copy()], batch_size=8).poor
    assert poor <= 2, poor   # the false-alarm rate of one epoch: MIXING_ALPHA


def test_the_first_line_is_the_finding_and_the_statistics_follow_in_words():
    rng = np.random.default_rng(0)
    good = shuffle_report([rng.permutation(400) for _ in range(2)], batch_size=20)
    first, *rest = repr(good).splitlines()
    assert first == "✔ order changes every epoch · well mixed"
    assert rest[0].startswith("  mixing score ") and "a uniform shuffle scores about 1 ± " \
        in rest[0] and rest[0].endswith("no shuffle scores 0)")
    assert "order correlation (Spearman)" in repr(good) and "rank correlation" not in repr(good)
    assert "runs of neighbours in storage order" in repr(good)
    bad = shuffle_report([np.arange(400)] * 2, batch_size=20)
    assert repr(bad).splitlines()[0] == "✘ order repeats across epochs · poorly mixed"
    # runs of 10 neighbours, each shuffled, in a new order every epoch: batches of 20 from 2
    local = shuffle_report([np.concatenate([10 * b + rng.permutation(10)
                                            for b in rng.permutation(40)]) for _ in range(2)],
                           batch_size=20)
    assert repr(local).splitlines()[0] == "✘ poorly mixed"
    assert "<small" in local._repr_html_()


def test_a_score_above_the_uniform_band_says_what_it_means():
    # stratified batches: each batch of 10 takes one id from each tenth of the data
    rng = np.random.default_rng(0)
    epochs = [rng.permuted(np.stack([rng.permutation(100) + 100 * k for k in range(10)],
                                    axis=1), axis=1).reshape(-1) for _ in range(2)]
    report = shuffle_report(epochs, batch_size=10)
    assert report.mixing > 1 + 2 * report.chance and report.well_mixed
    assert repr(report).splitlines()[0].endswith("well mixed, more evenly than chance")
    assert "more balanced than a uniform shuffle makes them" in repr(report)


def test_storage_neighbours_swapped_keep_a_similar_order():
    # epoch 1 puts id 2j + 1 where epoch 0 had 2j, and the other way round: no position
    # holds the same sample, yet every position holds the same part of the data
    order = np.random.default_rng(0).permutation(200)
    swapped = order ^ 1
    report = shuffle_report([order, swapped], batch_size=4)
    assert max(report.unchanged) == 0 and report.spearman[0] > 0.9 and report.well_mixed
    assert report.order_finding == "similar" and not report.order_changes
    assert report.order_problem == "similar order across epochs"
    assert "epochs keep a similar order" in repr(report) and not report.ok


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


@settings(max_examples=30, deadline=None, derandomize=True)
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
    assert "groups a micro-batch effectively holds, per rank: 1.0, 1.0" in repr(report)


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
    assert by_list.mixing == pytest.approx(by_dict.mixing)
    assert by_list.n_groups == 10


def test_repr_and_html_give_a_verdict():
    good = shuffle_report(uniform_epochs(3), batch_size=BATCH)
    bad = shuffle_report([np.arange(N)] * 2, batch_size=BATCH)
    assert repr(good).startswith("✔") and repr(bad).startswith("✘")
    assert "✔" in good._repr_html_() and "✘" in bad._repr_html_()
    assert "mixing" in repr(good)


def _next_epoch(kind: str, before: np.ndarray, rng) -> np.ndarray:
    n = len(before)
    if kind == "same":
        return before.copy()
    if kind == "reversed":
        return before[::-1].copy()
    if kind == "sorted":
        return np.arange(n)
    if kind == "part kept":
        keep = rng.integers(0, n)
        return np.concatenate([before[:keep], rng.permutation(before[keep:])])
    if kind == "ids nudged":   # each position holds an id near the last epoch's
        swap = np.concatenate([rng.permutation(w) for w in np.array_split(np.arange(n), n // 4)])
        return swap[before]
    return rng.permutation(n)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(8, 160), seed=st.integers(0, 2**32 - 1),
       kinds=st.lists(st.sampled_from(["new", "same", "reversed", "sorted", "part kept",
                                       "ids nudged"]), min_size=1, max_size=2),
       grouped=st.booleans())
def test_no_two_lines_of_a_shuffle_report_disagree(n, seed, kinds, grouped):
    rng = np.random.default_rng(seed)
    epochs = [rng.permutation(n) if seed % 3 else np.arange(n)]
    for kind in kinds:
        epochs.append(_next_epoch(kind, epochs[-1], rng))
    report = shuffle_report(epochs, groups=np.arange(n) % 4 if grouped else None)
    text = repr(report)
    head = text.splitlines()[0]
    assert head.startswith("✔") == report.ok
    assert ("repeat" in text) == (report.order_finding == "repeats")
    if report.order_repeats:
        assert max(report.unchanged) >= STALE_ORDER
    assert ("similar" in text) == (report.order_finding == "similar")
    if report.order_finding == "similar":
        assert max(report.spearman) > 0
    if "order changes every epoch" in text:
        assert report.order_finding is None
    assert ("poorly mixed" in head) == report.poor
    if "well mixed" in text:
        assert report.well_mixed
    if "above that band" in text:
        assert report.mixing > 1 + 2 * report.chance
    assert "stratified" not in text


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


@settings(max_examples=40, deadline=None, derandomize=True)
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


# --- the chance distribution behind the verdict --------------------------------------------


@pytest.mark.parametrize(("n", "blocks", "sizes"), [
    (48, 2, [4] * 6), (61, 4, [5] * 12), (200, 8, [20] * 10), (30, 3, [2, 5, 7, 3]),
])
def test_same_pair_moments_match_uniform_shuffles(n, blocks, sizes):
    labels = np.arange(n) * blocks // n
    moments = same_pair_moments(np.bincount(labels), sizes)
    rng = np.random.default_rng(0)
    batch = np.repeat(np.arange(len(sizes)), sizes)
    draws = []
    for _ in range(4000):
        counts = np.bincount(batch * blocks + rng.permutation(labels)[:len(batch)])
        draws.append(int((counts * (counts - 1) // 2).sum()))
    assert moments.total == sum(b * (b - 1) // 2 for b in sizes)
    assert np.mean(draws) == pytest.approx(moments.mean, rel=0.02)
    assert np.var(draws) == pytest.approx(moments.variance, rel=0.1)
    # the tail the verdict reads is no lighter than the real one at its level
    cut = upper_quantile(0.01, moments)
    assert np.mean(np.array(draws) >= cut) <= 0.015
    assert upper_tail(cut, moments) == pytest.approx(0.01, rel=1e-6)


def test_chance_tails_match_known_values():
    from talk_helpers.checks.uniform_null import PairMoments, _chi2_sf

    assert _chi2_sf(5.0, 2) == pytest.approx(np.exp(-2.5))
    assert _chi2_sf(3.841459, 1) == pytest.approx(0.05, rel=1e-5)
    assert _chi2_sf(18.307038, 10) == pytest.approx(0.05, rel=1e-5)
    below = sum(math.exp(-1) / math.factorial(k) for k in range(6))
    assert poisson_tail(6, 1.0) == pytest.approx(1 - below, rel=1e-6)
    assert poisson_tail(0, 3.0) == 1.0
    flat = PairMoments(mean=5.0, variance=0.0, dof=0.0, total=10.0)
    assert upper_tail(5.0, flat) == 1.0 and upper_tail(6.0, flat) == 0.0
