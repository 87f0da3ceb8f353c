"""The shuffling datasets of notebook 03 behave as the notebook says."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from talk_helpers.checks import check_exactly_once
from talk_helpers.checks.mixing import shuffle_report
from talk_helpers.lessons.datasets.shuffling import (
    SIZE,
    BufferShuffled,
    SharedSeedShuffle,
    ShuffleAfterShard,
    ShuffleBeforeShard,
    collect,
    epoch_orders,
    labels_of,
    rebatched_orders,
    same_seed_worker_init,
    shard_ranges,
    simulate_loader,
)

LABELS = labels_of()
CTX = "fork"     # fast to start; spawn is covered by running the notebooks


def loader(dataset, **kwargs):
    kwargs.setdefault("batch_size", 20)
    kwargs.setdefault("num_workers", 2)
    return DataLoader(dataset, multiprocessing_context=CTX, **kwargs)


def test_data_is_stored_sorted_by_class_in_contiguous_shards():
    assert list(np.bincount(LABELS)) == [60] * 10
    assert (np.diff(LABELS) >= 0).all()
    assert [len(r) for r in shard_ranges(600, 4)] == [150] * 4


def test_shuffle_after_shard_is_exactly_once_but_poorly_mixed():
    orders = epoch_orders(lambda e: loader(ShuffleAfterShard()))
    assert check_exactly_once(orders[0], SIZE).ok
    report = shuffle_report(orders, groups=LABELS, batch_size=20)
    assert report.mixing < 0.6 and not report.ok


def test_shuffle_before_shard_with_default_seeds_loses_samples():
    torch.manual_seed(0)
    batches, _ = collect(loader(ShuffleBeforeShard()))
    report = check_exactly_once(batches, SIZE)
    assert not report.ok and report.missing and report.duplicates


def test_same_seed_worker_init_repeats_order_and_augmentations():
    runs = [collect(loader(ShuffleBeforeShard(), worker_init_fn=same_seed_worker_init))
            for _ in range(2)]
    orders = [np.concatenate(b) for b, _ in runs]
    assert check_exactly_once(orders[0], SIZE).ok
    assert not shuffle_report(orders, batch_size=20).order_changes
    fields = runs[0][1]
    by_worker = [fields["aug"][fields["worker"] == w] for w in (0, 1)]
    assert (by_worker[0] == by_worker[1]).all()


def test_shared_seed_shuffle_is_exactly_once_mixed_and_changes_per_epoch():
    orders = epoch_orders(lambda e: loader(SharedSeedShuffle(epoch=e)))
    assert all(check_exactly_once(o, SIZE).ok for o in orders)
    assert shuffle_report(orders, groups=LABELS, batch_size=20).ok


@pytest.mark.parametrize("worker_batch", [None, 20])
def test_simulation_matches_a_real_loader(worker_batch):
    dataset = BufferShuffled(buffer_size=32, num_shards=8, worker_batch=worker_batch)
    real, _ = collect(loader(dataset, batch_size=None if worker_batch else 20))
    simulated = simulate_loader(BufferShuffled(buffer_size=32, num_shards=8), 2, 20)
    assert len(real) == len(simulated)
    assert all((a == b).all() for a, b in zip(real, simulated, strict=True))


def test_rebatching_across_workers_improves_mixing():
    runs = [simulate_loader(BufferShuffled(buffer_size=600, num_shards=8, epoch=e), 2, 20)
            for e in range(2)]
    before = shuffle_report([np.concatenate(r) for r in runs], groups=LABELS, batch_size=20)
    after = shuffle_report(rebatched_orders(runs, 300, 20), groups=LABELS, batch_size=20)
    assert before.mixing < 0.7 < 0.9 < after.mixing


def test_explorer_redraws_when_a_slider_changes():
    from talk_helpers.widgets.buffer_shuffle import BufferExplorer

    explorer = BufferExplorer(buffer_size=8)
    first = explorer.report.mixing
    explorer.buffer.value = 600
    assert explorer.redraws == 2 and explorer.report.mixing > first
    explorer.workers.value = 1
    assert explorer.redraws == 3 and explorer.report.ok
