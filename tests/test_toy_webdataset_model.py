"""The WebDataset model of notebook 03 matches a real WebDataset."""

import pytest

from talk_helpers.checks import check_exactly_once
from talk_helpers.lessons.datasets.shuffling import (
    SIZE,
    SplitThenShuffleShards,
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
