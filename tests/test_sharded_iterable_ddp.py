"""ShardedIterableDataset in a real gloo world: DDP finishes on every rank, resume is exact."""

import functools
import random
from collections import Counter

import pytest

from talk_helpers.checks import check_exactly_once
from talk_helpers.lessons.datasets.exercise import (
    ddp_train,
    elastic_run,
    make_final_dataset,
    resume_run,
)
from talk_helpers.runtime.world import run_ranks, run_world

pytestmark = pytest.mark.distributed

UNEVEN = (26, 9, 14, 12, 1, 40)   # 102 samples
# Forked ranks are fresh processes too; fork keeps these tests fast on a busy machine.
WORLD = {"timeout_s": 240, "collective_timeout_s": 60, "start_method": "fork"}


@pytest.mark.parametrize("policy", ["drop", "pad"])
def test_a_ddp_training_loop_over_uneven_shards_with_workers_finishes_on_every_rank(policy):
    world = 3
    report = run_world(functools.partial(ddp_train, sizes=UNEVEN, batch_size=4, policy=policy),
                       world, **WORLD)
    assert report.ok, repr(report)
    ds = make_final_dataset(sizes=UNEVEN, batch_size=4, policy=policy, rank=0,
                            world_size=world)
    for epoch in range(2):
        assert len({r["steps"][epoch] for r in report.results}) == 1
        ids = [r["ids"][epoch] for r in report.results]
        ds.set_epoch(epoch)
        kept = [i for i in range(sum(UNEVEN)) if i not in set(ds.dropped_ids().tolist())]
        if policy == "drop":
            assert check_exactly_once(ids, kept).ok
        else:
            counts = check_exactly_once(ids, sum(UNEVEN))
            assert not counts.missing and sum(counts.duplicates.values()) - len(
                counts.duplicates) == ds.padded


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resuming_in_fresh_processes_at_random_points_reads_the_epoch_exactly_once(seed):
    world, epoch = 2, 3
    kwargs = dict(sizes=UNEVEN, batch_size=5, seed=seed, epoch=epoch)
    per_rank = len(make_final_dataset(sizes=UNEVEN, batch_size=5, rank=0, world_size=world))
    stop = [random.Random(seed * 10 + r).randint(0, per_rank) for r in range(world)]
    first = run_ranks(functools.partial(resume_run, stop_after=stop, **kwargs), world,
                      **WORLD)
    second = run_ranks(functools.partial(resume_run, stop_after=None,
                                         state=[r["state"] for r in first], **kwargs),
                       world, **WORLD)
    ds = make_final_dataset(sizes=UNEVEN, batch_size=5, seed=seed, rank=0, world_size=world)
    kept = sorted(set(range(sum(UNEVEN))) - set(ds.dropped_ids(epoch).tolist()))
    for rank in range(world):
        assert len(first[rank]["ids"]) == min(stop[rank], per_rank)
        assert len(first[rank]["ids"]) + len(second[rank]["ids"]) == per_rank
    report = check_exactly_once([r["ids"] for r in first + second], kept)
    assert report.ok, repr(report)


@pytest.mark.parametrize("policy", ["drop", "pad"])
def test_a_checkpoint_saved_on_two_ranks_resumes_on_three_in_fresh_processes(policy):
    kwargs = dict(sizes=UNEVEN, batch_size=4, seed=7, epoch=2, policy=policy)
    first = run_ranks(functools.partial(elastic_run, stop_after=5, **kwargs), 2, **WORLD)
    saved = first[1]["checkpoint"]                 # rank 1's point, loaded by every new rank
    second = run_ranks(functools.partial(elastic_run, checkpoint=saved, **kwargs), 3, **WORLD)
    assert [len(r["ids"]) for r in first] == [5, 5]
    assert len({len(r["ids"]) for r in second}) == 1, "the new ranks yield equal batches"
    seen = Counter(i for r in first + second for batch in r["ids"] for i in batch)
    n = sum(UNEVEN)
    if policy == "drop":
        assert max(seen.values()) == 1 and n - len(seen) <= (2 - 1) + (3 - 1)
    else:
        assert len(seen) == n and sum(seen.values()) - n <= (2 - 1) + (3 - 1)
    fresh = make_final_dataset(sizes=UNEVEN, batch_size=4, seed=7, policy=policy, rank=0,
                               world_size=3)
    assert {r["next_epoch_batches"] for r in second} == {len(fresh)}


def test_a_checkpoint_of_a_dataloader_that_batches_resumes_on_another_world_and_batch():
    """Samples as items: 2 ranks whose DataLoaders batch 6 save after 2 steps; 3 ranks whose
    DataLoaders batch 4 (the same global batch) resume, in fresh processes."""
    kwargs = dict(sizes=UNEVEN, seed=3, epoch=0)
    first = run_ranks(functools.partial(elastic_run, stop_after=2, loader_batch_size=6,
                                        **kwargs), 2, **WORLD)
    assert first[0]["checkpoint"]["history"][0]["loader_batch_size"] == 6
    second = run_ranks(functools.partial(elastic_run, checkpoint=first[0]["checkpoint"],
                                         loader_batch_size=4, **kwargs), 3, **WORLD)
    assert len({len(r["ids"]) for r in second}) == 1, "the new ranks yield equal batches"
    seen = Counter(i for r in first + second for batch in r["ids"] for i in batch)
    assert max(seen.values()) == 1 and sum(UNEVEN) - len(seen) <= (2 - 1) + (3 - 1)
