"""talk_helpers.model.simulate predicts what a real DataLoader yields on every rank."""

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.ddp import ShardedIds
from talk_helpers.model.simulate import (
    POLICIES,
    equal_shards_rule,
    ranks_named,
    shard_count_rule,
    shard_sizes_for,
    simulate,
    worker_streams,
)

N_CONFIGS = 60
TOY_POLICIES = [p for p in POLICIES if p != "hf_datasets"]  # ShardedIds implements these
N_HF_LAYOUTS = 36
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def _random_configs(n: int, seed: int = 2024):
    rng = random.Random(seed)
    for _ in range(n):
        num_shards = rng.randint(1, 9)
        yield dict(
            shard_sizes=[rng.randint(0, 9) for _ in range(num_shards)],
            nodes=rng.randint(1, 3),
            workers=rng.choice([0, 1, 2, 2, 3]),
            micro_batch_size=rng.randint(1, 5),
            drop_last=rng.random() < 0.5,
            policy=rng.choice(TOY_POLICIES),
        )


def _real_batches(cfg, rank):
    dataset = ShardedIds(cfg["shard_sizes"], rank, cfg["nodes"], cfg["policy"])
    loader = DataLoader(dataset, batch_size=cfg["micro_batch_size"],
                        num_workers=cfg["workers"], drop_last=cfg["drop_last"],
                        multiprocessing_context="fork" if cfg["workers"] else None)
    return [batch.tolist() for batch in loader]


def test_simulation_matches_real_dataloader_on_random_configurations():
    torch.set_num_threads(1)
    mismatches = []
    for cfg in _random_configs(N_CONFIGS):
        sim = simulate(**cfg)
        for rank in range(cfg["nodes"]):
            real = _real_batches(cfg, rank)
            predicted = [b.tolist() for b in sim.batches[rank]]
            if real != predicted:
                mismatches.append((cfg, rank, real, predicted))
    assert not mismatches, mismatches[:3]


def test_every_sample_lands_once_without_drop_last():
    for cfg in _random_configs(40, seed=7):
        cfg["drop_last"] = False
        sim = simulate(**cfg)
        ids = np.concatenate([np.concatenate(b) for b in sim.batches if b] or [np.zeros(0)])
        assert sorted(ids.tolist()) == list(range(sum(cfg["shard_sizes"])))
        assert sim.dropped == 0


def test_uneven_shards_give_unequal_batches_per_rank():
    sim = simulate([5, 3, 3, 3], nodes=2, workers=2, micro_batch_size=4)
    assert sim.batches_per_rank == [3, 2]
    assert not sim.ok
    assert "DDP hangs" in sim.verdict


def test_drop_last_drops_each_workers_partial_batch():
    sim = simulate([6, 6], nodes=1, workers=2, micro_batch_size=4, drop_last=True)
    assert sim.batches_per_rank == [2]
    assert sim.dropped == 4
    assert sim.partial_batches == 0


def test_nested_modulo_leaves_workers_idle_when_gcd_is_above_one():
    sim = simulate(shard_sizes_for(40, 4), nodes=2, workers=4, micro_batch_size=5,
                   policy="nested_modulo")
    assert sim.idle_workers == [(0, 1), (0, 3), (1, 0), (1, 2)]
    assert simulate(shard_sizes_for(40, 4), nodes=2, workers=3, micro_batch_size=5,
                    policy="nested_modulo").idle_workers == []


def test_num_workers_zero_is_one_stream_per_rank():
    streams = worker_streams([3, 4], nodes=1, workers=0)
    assert len(streams[0]) == 1
    assert simulate([3, 4], nodes=1, workers=0, micro_batch_size=3).batches_per_rank == [3]


def test_placement_names_shard_rank_worker_and_batch_of_each_sample():
    table = simulate([2, 2], nodes=2, workers=1, micro_batch_size=1).placement()
    assert table["shard"].tolist() == [0, 0, 1, 1]
    assert table["rank"].tolist() == [0, 0, 1, 1]
    assert table["batch"].tolist() == [0, 1, 0, 1]


def test_the_hang_notes_worked_example_breaks_its_own_rule():
    rule = shard_count_rule(1024 * 100, 1024, nodes=4, workers=5, micro_batch_size=32)
    assert rule.shards_per_worker == pytest.approx(51.2)
    assert not rule.holds


def test_equal_shards_rule_needs_equal_shards_divisible_by_nodes_times_workers():
    assert equal_shards_rule([8] * 12, nodes=2, workers=3)
    assert not equal_shards_rule([8] * 10, nodes=2, workers=3)
    sim = simulate([8] * 12, nodes=2, workers=3, micro_batch_size=5)
    assert sim.ok


def test_shard_sizes_for_splits_like_contiguous_sharding():
    assert shard_sizes_for(10, 3) == [4, 3, 3]
    with pytest.raises(ValueError, match="num_shards"):
        shard_sizes_for(2, 3)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(shard_sizes=10), TypeError, "shard_sizes"),
    (dict(shard_sizes=[]), ValueError, "non-empty"),
    (dict(shard_sizes=[3, -1]), ValueError, "≥ 0"),
    (dict(shard_sizes=[1.5]), TypeError, "ints"),
    (dict(nodes=0), ValueError, "nodes"),
    (dict(workers=-1), ValueError, "workers"),
    (dict(micro_batch_size=0), ValueError, "micro_batch_size"),
    (dict(micro_batch_size=2.0), TypeError, "micro_batch_size"),
    (dict(drop_last="yes"), TypeError, "drop_last"),
    (dict(policy="random"), ValueError, "round_robin"),
])
def test_bad_arguments_get_clear_errors(kwargs, error, match):
    args = dict(shard_sizes=[3, 3], nodes=2, workers=1, micro_batch_size=2) | kwargs
    with pytest.raises(error, match=match):
        simulate(**args)


def _hf_layouts(n: int, seed: int = 5):
    rng = random.Random(seed)
    for _ in range(n):
        size = rng.randint(1, 40)
        yield dict(dataset_size=size, num_shards=rng.randint(1, min(size, 9)),
                   nodes=rng.randint(1, 4), workers=rng.choice([0, 1, 2, 3]),
                   micro_batch_size=rng.randint(1, 6), drop_last=rng.random() < 0.5)


def _real_hf_batches(layout, rank):
    from datasets import Dataset
    from datasets.distributed import split_dataset_by_node

    shards = Dataset.from_dict({"id": list(range(layout["dataset_size"]))}) \
        .to_iterable_dataset(num_shards=layout["num_shards"])
    mine = split_dataset_by_node(shards, rank=rank, world_size=layout["nodes"])
    loader = DataLoader(mine, batch_size=layout["micro_batch_size"],
                        num_workers=layout["workers"], drop_last=layout["drop_last"],
                        multiprocessing_context="fork" if layout["workers"] else None)
    return [batch["id"].tolist() for batch in loader]


def test_hf_policy_matches_real_split_dataset_by_node_for_any_shard_count():
    import datasets

    datasets.logging.set_verbosity_error()  # "too many workers" is expected in some layouts
    torch.set_num_threads(1)
    layouts = list(_hf_layouts(N_HF_LAYOUTS))
    assert any(lay["num_shards"] % lay["nodes"] for lay in layouts)  # both strategies met
    assert any(lay["num_shards"] % lay["nodes"] == 0 and lay["nodes"] > 1 for lay in layouts)
    mismatches = []
    for lay in layouts:
        sim = simulate(shard_sizes_for(lay["dataset_size"], lay["num_shards"]),
                       nodes=lay["nodes"], workers=lay["workers"],
                       micro_batch_size=lay["micro_batch_size"], drop_last=lay["drop_last"],
                       policy="hf_datasets")
        for rank in range(lay["nodes"]):
            real = _real_hf_batches(lay, rank)
            if real != [b.tolist() for b in sim.batches[rank]]:
                mismatches.append((lay, rank, real, sim.batches[rank]))
    assert not mismatches, mismatches[:2]


def test_hf_policy_keeps_every_shard_on_every_rank_when_shards_do_not_divide():
    sim = simulate([16, 15, 15, 15], nodes=3, workers=2, micro_batch_size=4,
                   policy="hf_datasets")
    shard_of = sim.placement()["shard"]
    for rank in range(3):
        ids = np.concatenate(sim.worker_samples[rank])
        assert set(shard_of[ids].tolist()) == {0, 1, 2, 3}
    assert sim.samples_per_rank == [21, 20, 20]


def test_hf_policy_is_round_robin_when_shards_divide_by_world_size():
    kwargs = dict(nodes=2, workers=2, micro_batch_size=3)
    hf = simulate([5, 4, 4, 4], policy="hf_datasets", **kwargs)
    rr = simulate([5, 4, 4, 4], policy="round_robin", **kwargs)
    assert [[b.tolist() for b in r] for r in hf.batches] == \
        [[b.tolist() for b in r] for r in rr.batches]


def test_shard_count_rule_with_drop_last_keeps_only_shards_per_worker_below_micro_batch():
    # remainder 3 is not < 2 shards per worker: broken without drop_last, fine with it
    assert not shard_count_rule(35, 8, nodes=2, workers=2, micro_batch_size=4).holds
    assert shard_count_rule(35, 8, nodes=2, workers=2, micro_batch_size=4, drop_last=True).holds
    assert not shard_count_rule(35, 8, nodes=1, workers=1, micro_batch_size=4,
                            drop_last=True).holds


def test_compare_confirms_a_matching_run_and_names_the_rank_that_differs():
    sim = simulate([4, 6, 8, 6], nodes=2, workers=2, micro_batch_size=4)
    real = [[b.tolist() for b in rank] for rank in sim.batches]
    assert sim.compare(real).ok
    assert sim.compare(real).real_samples == [12, 12]
    real[1] = real[1][:-1]
    check = sim.compare(real)
    assert not check.ok and check.same_ids == [True, False]
    assert "wrong on rank 1:" in repr(check)


@pytest.mark.parametrize("ranks, words", [([0], "rank 0"), ([0, 1], "ranks 0 and 1"),
                                          ([1, 2, 3], "ranks 1, 2 and 3")])
def test_ranks_are_named_in_plain_english(ranks, words):
    assert ranks_named(ranks) == words


def test_a_hang_verdict_names_the_waiting_rank_in_the_singular():
    sim = simulate([5, 3], nodes=2, workers=0, micro_batch_size=1)
    assert "rank 0 waits in a collective" in sim.verdict
