"""The DDP toy datasets split samples over ranks and workers as their docstrings say."""

import pytest
from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.ddp import (
    RankAskedInIter,
    RankCapturedAtBuild,
    ShardedIds,
    WorkerShardedOnly,
    make_sampler_loader,
)


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


def test_worker_sharding_alone_gives_every_rank_everything():
    assert _ids(WorkerShardedOnly(10), workers=2) == list(range(10))


def test_rank_asked_in_iter_without_a_process_group_reads_everything():
    assert _ids(RankAskedInIter(10)) == list(range(10))


def test_rank_captured_at_build_reads_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _ids(RankCapturedAtBuild(10), workers=2) == [2, 3, 6, 7]


def test_distributed_sampler_pads_with_the_first_indices_unless_drop_last():
    def everything(**kw):
        return sorted(int(x) for r in range(2)
                      for b in make_sampler_loader(r, 2, 0, size=5, shuffle=False, **kw)
                      for x in b)
    assert everything() == [0, 0, 1, 2, 3, 4]
    assert everything(drop_last=True) == [0, 1, 2, 3]
