"""The WebDataset model of notebook 03 matches a real WebDataset, and the exercise's
mystery loader has exactly the one flaw its solution names."""

import numpy as np
import pytest
from torch.utils.data import DataLoader

from talk_helpers.checks import check_exactly_once, check_random_draws
from talk_helpers.checks.mixing import shuffle_report
from talk_helpers.lessons.datasets.shuffling import (
    SIZE,
    MysteryShuffle,
    SplitThenShuffleShards,
    collect,
    labels_of,
    shard_ranges,
    simulate_loader,
    webdataset_reads,
)

CTX = "fork"     # fast to start; spawn is covered by running notebook 03


@pytest.mark.parametrize("seed", [None, 0, 7])
def test_webdataset_splits_shards_first_and_repeats_their_order_every_epoch(seed):
    run = webdataset_reads(epochs=2, num_workers=2, num_shards=8, seed=seed,
                           multiprocessing_context=CTX)
    first, second = run["shards"]
    assert first == second                                   # same order, both epochs
    assert sorted(first[0]) == [0, 2, 4, 6] and sorted(first[1]) == [1, 3, 5, 7]
    model = SplitThenShuffleShards(num_shards=8, seed=run["seed"])
    assert first == {w: model.shard_order(w, 2) for w in range(2)}
    assert all(check_exactly_once(order, SIZE).ok for order in run["orders"])


def test_the_model_keeps_every_sample_once_and_its_shard_order_across_epochs():
    runs = [simulate_loader(SplitThenShuffleShards(num_shards=8, epoch=e), 2, 20)
            for e in range(2)]
    assert all(check_exactly_once(r, SIZE).ok for r in runs)
    shards = shard_ranges(SIZE, 8)
    model = SplitThenShuffleShards(num_shards=8)
    worker0 = model.shard_order(0, 2)
    assert sorted(worker0) == [0, 2, 4, 6]
    assert all(len(shards[s]) == 75 for s in worker0)


def test_mystery_loader_is_exactly_once_changes_order_and_augments_but_mixes_poorly():
    labels = labels_of()
    runs = [collect(DataLoader(MysteryShuffle(epoch=e), batch_size=20, num_workers=2,
                               multiprocessing_context=CTX)) for e in range(2)]
    assert all(check_exactly_once(batches, SIZE).ok for batches, _ in runs)
    report = shuffle_report([np.concatenate(b) for b, _ in runs], groups=labels, batch_size=20)
    assert report.order_changes and not report.well_mixed
    assert check_random_draws(runs[0][1], value="aug", across="worker").ok
