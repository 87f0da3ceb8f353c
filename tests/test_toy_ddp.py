"""The DDP toy datasets split samples over ranks and workers as their docstrings say."""

import pytest
from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.ddp import ShardedIds


def _ids(dataset, workers=0):
    loader = DataLoader(dataset, batch_size=None, num_workers=workers,
                        multiprocessing_context="fork" if workers else None)
    return sorted(int(x) for x in loader)


def test_sharded_ids_cover_every_sample_once_across_ranks():
    for policy in ("round_robin", "contiguous", "modulo_samples", "nested_modulo"):
        ids = [i for rank in range(2) for i in _ids(ShardedIds([3, 4, 2], rank, 2, policy))]
        assert sorted(ids) == list(range(9)), policy


def test_sharded_ids_reject_a_rank_outside_the_world():
    with pytest.raises(ValueError, match="rank"):
        ShardedIds([3], 2, 2)
    with pytest.raises(ValueError, match="policy"):
        ShardedIds([3], 0, 2, "random")

