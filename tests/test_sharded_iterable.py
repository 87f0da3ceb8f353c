"""ShardedIterableDataset: exactly once, equal batches per rank, shuffle before shard, resume."""

import copy
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from talk_helpers.reference.sharded_iterable import ShardedIterableDataset, worker_sample_ids

TIMEOUT = 120  # seconds for a DataLoader with workers on a busy 2-core machine


def ids(items) -> list[int]:
    out = []
    for item in items:
        if isinstance(item, torch.Tensor):
            out += item.reshape(-1).tolist()
        else:
            out.append(int(item))
    return out


def rank_stream(ds, num_workers):
    """The items a rank's DataLoader yields: worker streams interleaved round-robin (each
    worker iterates its own copy of the dataset, as in a DataLoader)."""
    n = max(num_workers, 1)
    streams = [list(copy.copy(ds)._iter_worker(w, n)) for w in range(n)]
    out = []
    for j in range(max((len(s) for s in streams), default=0)):
        out += [s[j] for s in streams if j < len(s)]
    return out


def make(config, rank, **overrides):
    kwargs = dict(batch_size=config["batch_size"], seed=config["seed"],
                  policy=config["policy"], rank=rank, world_size=config["world"])
    kwargs.update(overrides)
    if config["shards"] is None:
        return ShardedIterableDataset(config["n"], **kwargs)
    offsets = np.concatenate([[0], np.cumsum(config["shards"])])
    shards = [range(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    return ShardedIterableDataset.from_shards(shards, **kwargs)


@st.composite
def configs(draw):
    sharded = draw(st.booleans())
    if sharded:
        shards = draw(st.lists(st.integers(0, 1500), min_size=1, max_size=12))
        n = sum(shards)
    else:
        shards, n = None, draw(st.integers(0, 10_000))
    return {"n": n, "shards": shards, "world": draw(st.integers(1, 8)),
            "workers": draw(st.integers(0, 4)),
            "batch_size": draw(st.one_of(st.none(), st.integers(1, 3), st.integers(4, 300))),
            "policy": draw(st.sampled_from(["drop", "pad"])),
            "epoch": draw(st.integers(0, 1000)), "seed": draw(st.integers(0, 2**31)),
            "resume": draw(st.floats(0, 1)), "resume_workers": draw(st.integers(0, 4))}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_every_configuration_reads_each_sample_once_with_equal_batches_per_rank(config):
    world, workers = config["world"], config["workers"]
    per_rank, seen = [], Counter()
    for rank in range(world):
        ds = make(config, rank)
        ds.set_epoch(config["epoch"])
        items = rank_stream(ds, workers)
        assert len(items) == len(ds)
        per_rank.append(len(items))
        seen.update(ids(items))

        # plain-DataLoader resume in a "fresh process": a new object, maybe other workers
        k = int(config["resume"] * len(items))
        fresh = make(config, rank)
        fresh.load_state_dict(ds.checkpoint(k) | {"epoch": config["epoch"]})
        assert ids(items[:k]) + ids(rank_stream(fresh, config["resume_workers"])) == ids(items)

    assert len(set(per_rank)) == 1, f"batches per rank differ: {per_rank}"
    n, bound = config["n"], world - 1
    expected = Counter(range(n))
    assert not set(seen) - set(expected), "unexpected ids"
    if config["policy"] == "drop":
        assert max(seen.values(), default=1) == 1
        assert n - len(seen) == ds.dropped <= bound
    else:
        assert len(seen) == n
        assert sum(seen.values()) - n == ds.padded <= bound


@settings(max_examples=60, deadline=None)
@given(configs())
def test_worker_state_dict_resumes_each_worker_exactly_where_it_stopped(config):
    workers = max(config["workers"], 1)
    ds = make(config, rank=config["world"] - 1)
    for w in range(workers):
        stream = list(ds._iter_worker(w, workers))
        k = int(config["resume"] * len(stream))
        it = ds._iter_worker(w, workers)
        before = [next(it) for _ in range(k)]
        state = ds.state_dict()
        fresh = make(config, rank=config["world"] - 1)
        fresh.load_state_dict(state)
        assert ids(before) + ids(fresh._iter_worker(w, workers)) == ids(stream)


@settings(max_examples=100, deadline=None)
@given(configs())
def test_same_seed_gives_same_orders_and_epochs_give_different_ones(config):
    a, b = make(config, 0), make(config, 0)
    e = config["epoch"]
    assert np.array_equal(a.epoch_order(e), b.epoch_order(e))
    assert sorted(a.epoch_order(e).tolist()) == list(range(config["n"]))
    if config["n"] >= 20:
        assert not np.array_equal(a.epoch_order(e), a.epoch_order(e + 1))


def test_ranks_split_the_same_permutation_into_equal_blocks():
    order = np.arange(10)
    blocks = [worker_sample_ids(order, rank=r, world_size=3, worker=0, num_workers=1,
                                batch_size=None, policy="pad") for r in range(3)]
    assert [b.tolist() for b in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]


def test_each_bad_argument_gets_an_error_naming_it():
    cases = [(dict(source=-1), "source"), (dict(world_size=0, rank=0), "world_size"),
             (dict(rank=2, world_size=2), "rank"), (dict(batch_size=0), "batch_size"),
             (dict(policy="wrap"), "policy"), (dict(rank=1), "both")]
    for kwargs, word in cases:
        source = kwargs.pop("source", 10)
        with pytest.raises(ValueError, match=word):
            ShardedIterableDataset(source, **kwargs)
    with pytest.raises(ValueError, match="negative"):
        ShardedIterableDataset.from_shards([range(3)], lengths=[-3])


def test_a_state_from_another_configuration_is_refused():
    state = ShardedIterableDataset(100, batch_size=4, seed=1).checkpoint(3)
    for other in (dict(seed=2), dict(batch_size=8), dict(policy="pad")):
        with pytest.raises(ValueError, match="different configuration"):
            ds = ShardedIterableDataset(100, **{"batch_size": 4, "seed": 1, **other})
            ds.load_state_dict(state)
    with pytest.raises(ValueError, match="different configuration"):
        ShardedIterableDataset(99, batch_size=4, seed=1).load_state_dict(state)


def test_rank_comes_from_the_environment_at_construction(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = ShardedIterableDataset(10)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert (ds.rank, ds.world_size) == (1, 2)
    assert ids(DataLoader(ds, batch_size=None, num_workers=1, timeout=TIMEOUT,
                          multiprocessing_context="spawn")) == ids(rank_stream(ds, 1))
    assert (ShardedIterableDataset(10).rank, ShardedIterableDataset(10).world_size) == (0, 1)


def test_rank_comes_from_an_initialised_process_group(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "9")
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/store",
                                         rank=0, world_size=1)
    try:
        assert (ShardedIterableDataset(10).rank, ShardedIterableDataset(10).world_size) == (0, 1)
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_a_dataloader_yields_the_rank_stream_in_order_whatever_the_workers(num_workers):
    ds = ShardedIterableDataset(203, batch_size=8, rank=1, world_size=2, policy="pad")
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        timeout=TIMEOUT if num_workers else 0)
    assert ids(loader) == ids(rank_stream(ds, 1))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_workers(start_method):
    ds = ShardedIterableDataset(64, batch_size=4)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                        timeout=TIMEOUT, multiprocessing_context=start_method)
    orders = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        got = ids(loader)
        assert got == ids(rank_stream(ds, 2))
        orders.append(got)
    assert orders[0] != orders[1] != orders[2]


def test_transform_gets_a_generator_private_to_rank_worker_and_epoch():
    draws = {}
    for rank in range(2):
        ds = ShardedIterableDataset(40, batch_size=5, rank=rank, world_size=2,
                                    transform=lambda batch, rng: torch.rand(1, generator=rng))
        for epoch in range(2):
            ds.set_epoch(epoch)
            for w in range(2):
                draws[rank, epoch, w] = next(ds._iter_worker(w, 2)).item()
        assert next(ds._iter_worker(1, 2)).item() == draws[rank, 1, 1]
    assert len(set(draws.values())) == len(draws)


def test_shards_from_files_are_read_with_vectorised_batches(tmp_path):
    sizes = [7, 50, 0, 13]
    paths, start = [], 0
    for i, size in enumerate(sizes):
        paths.append(tmp_path / f"shard{i}.npy")
        np.save(paths[-1], np.arange(start, start + size))
        start += size
    seen = []
    for rank in range(3):
        ds = ShardedIterableDataset.from_shards(paths, lengths=sizes, load=np.load,
                                                batch_size=4, rank=rank, world_size=3)
        batches = list(DataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT))
        assert len(batches) == len(ds)
        seen += ids(batches)
    assert len(seen) == len(set(seen)) == 70 - ds.dropped


def test_a_sequence_of_dicts_is_collated_into_batches():
    samples = [{"id": i, "x": float(i)} for i in range(10)]
    batch = next(iter(ShardedIterableDataset(samples, batch_size=4, shuffle=False)))
    assert batch["id"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_mid_epoch_exactly_once(num_workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        ds = ShardedIterableDataset(97, batch_size=6, seed=3, rank=0, world_size=2)
        ds.set_epoch(4)
        return StatefulDataLoader(ds, batch_size=None, num_workers=num_workers,
                                  timeout=TIMEOUT if num_workers else 0)

    full = ids(loader())
    first = loader()
    it = iter(first)
    before = [next(it) for _ in range(3)]
    state = first.state_dict()
    del it, first
    resumed = loader()
    resumed.load_state_dict(state)
    assert ids(before) + ids(resumed) == full
    assert len(full) == len(set(full)) == 48


def test_plain_dataloader_resume_may_change_the_number_of_workers():
    ds = ShardedIterableDataset(100, batch_size=7, seed=5)
    ds.set_epoch(2)
    full = list(DataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT))
    saved = ds.checkpoint(batches_consumed=5)
    fresh = ShardedIterableDataset(100, batch_size=7, seed=5)
    fresh.load_state_dict(saved)
    rest = list(DataLoader(fresh, batch_size=None, num_workers=1, timeout=TIMEOUT))
    assert ids(full[:5]) + ids(rest) == ids(full) and fresh.epoch == 2
    fresh.set_epoch(3)  # the resume point belongs to epoch 2 only
    assert len(list(DataLoader(fresh, batch_size=None))) == len(full)


def test_dropped_and_padded_ids_are_the_ones_missing_or_repeated():
    for policy in ("drop", "pad"):
        seen = Counter()
        for rank in range(3):
            ds = ShardedIterableDataset(100, batch_size=7, policy=policy, rank=rank,
                                        world_size=3)
            ds.set_epoch(1)
            seen.update(ids(rank_stream(ds, 2)))
        if policy == "drop":
            assert sorted(set(range(100)) - set(seen)) == sorted(ds.dropped_ids().tolist())
        else:
            assert sorted(k for k, v in seen.items() if v == 2) == sorted(ds.padded_ids().tolist())


def _draw(batch, rng):
    return batch, torch.rand(len(batch), generator=rng)


def test_a_worker_state_resumes_the_augmentation_generator_too():
    def make():
        ds = ShardedIterableDataset(50, batch_size=4, transform=_draw, rank=1, world_size=2)
        ds.set_epoch(2)
        return ds

    ds = make()
    full = list(ds._iter_worker(1, 2))
    it = ds._iter_worker(1, 2)
    for _ in range(2):
        next(it)
    fresh = make()
    fresh.load_state_dict(ds.state_dict())
    rest = list(fresh._iter_worker(1, 2))
    assert len(rest) == len(full) - 2
    for (b1, d1), (b2, d2) in zip(rest, full[2:], strict=True):
        assert torch.equal(b1, b2) and torch.equal(d1, d2)


def test_stateful_dataloader_resume_repeats_the_same_augmentations():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        ds = ShardedIterableDataset(97, batch_size=6, seed=3, transform=_draw)
        ds.set_epoch(4)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT)

    full = list(loader())
    first = loader()
    it = iter(first)
    before = [next(it) for _ in range(3)]
    state = first.state_dict()
    del it, first
    resumed = loader()
    resumed.load_state_dict(state)
    got = before + list(resumed)
    assert len(got) == len(full)
    for (b1, d1), (b2, d2) in zip(got, full, strict=True):
        assert torch.equal(b1, b2) and torch.equal(d1, d2)


# -- v2: elastic resume ------------------------------------------------------------------

@st.composite
def elastic_configs(draw):
    config = draw(configs())
    config.update(world2=draw(st.integers(1, 8)), workers2=draw(st.integers(0, 3)),
                  saver=draw(st.integers(0, 7)), loader_rank=draw(st.integers(0, 7)))
    return config


def world_streams(config, world, workers, state=None):
    """Every rank's items in a world of ``world`` ranks, after loading ``state``."""
    out = []
    for rank in range(world):
        ds = make(config, rank, world_size=world)
        ds.set_epoch(config["epoch"])
        if state is not None:
            ds.load_state_dict(state)
        out.append(rank_stream(ds, workers))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_configs())
def test_a_checkpoint_from_any_rank_resumes_on_any_world_size_exactly_once(config):
    w1, w2 = config["world"], config["world2"]
    before = world_streams(config, w1, config["workers"])
    k = int(config["resume"] * len(before[0]))      # every rank took k batches (lockstep)
    saved = [make(config, r) for r in range(w1)]
    for ds in saved:
        ds.set_epoch(config["epoch"])
    states = [ds.checkpoint(k) for ds in saved]
    assert all(st_ == states[0] for st_ in states), "ranks of one world save the same point"
    state = states[config["saver"] % w1]
    after = world_streams(config, w2, config["workers2"], state)
    assert len({len(items) for items in after}) == 1, "new ranks yield equal batches"
    seen = Counter(ids(sum((items[:k] for items in before), [])))
    seen.update(ids(sum(after, [])))
    n = config["n"]
    assert set(seen) <= set(range(n))
    missing, extra = n - len(seen), sum(seen.values()) - len(seen)
    if config["policy"] == "drop":
        assert extra == 0 and missing <= (w1 - 1) + (w2 - 1)
    else:
        assert missing == 0 and extra <= (w1 - 1) + (w2 - 1)
    # the next epoch is the new world's normal one
    ds = make(config, config["loader_rank"] % w2, world_size=w2)
    ds.load_state_dict(state)
    ds.set_epoch(config["epoch"] + 1)
    plain = make(config, config["loader_rank"] % w2, world_size=w2)
    plain.set_epoch(config["epoch"] + 1)
    assert ids(rank_stream(ds, 1)) == ids(rank_stream(plain, 1))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_configs(), st.integers(1, 5), st.floats(0, 1))
def test_a_resumed_world_can_save_again_and_resume_on_a_third_world_size(config, w3, frac):
    w1, w2 = config["world"], config["world2"]
    before = world_streams(config, w1, 0)
    k1 = int(config["resume"] * len(before[0]))
    first = make(config, 0)
    first.set_epoch(config["epoch"])
    state1 = first.checkpoint(k1)
    middle = world_streams(config, w2, 0, state1)
    k2 = int(frac * len(middle[0]))
    second = make(config, 0, world_size=w2)
    second.load_state_dict(state1)
    state2 = second.checkpoint(k2)
    after = world_streams(config, w3, 0, state2)
    assert len({len(items) for items in after}) == 1
    seen = Counter(ids(sum((b[:k1] for b in before), []) + sum((m[:k2] for m in middle), [])
                       + sum(after, [])))
    n, slack = config["n"], (w1 - 1) + (w2 - 1) + (w3 - 1)
    if config["policy"] == "drop":
        assert max(seen.values(), default=1) == 1 and n - len(seen) <= slack
    else:
        assert len(seen) == n and sum(seen.values()) - n <= slack


def test_a_stateful_state_on_another_world_size_is_refused_pointing_to_checkpoint():
    ds = ShardedIterableDataset(100, batch_size=4, rank=0, world_size=2)
    it = ds._iter_worker(0, 1)
    next(it)
    state = ds.state_dict()
    for rank, world in ((0, 3), (1, 2)):
        with pytest.raises(ValueError, match=r"checkpoint\(batches_consumed\)"):
            ShardedIterableDataset(100, batch_size=4, rank=rank,
                                   world_size=world).load_state_dict(state)


# -- v2: micro-batches that mix shards ---------------------------------------------------

def effective_shards(batch, shard_of) -> float:
    """Inverse Simpson index of the shard labels in one micro-batch."""
    _, counts = np.unique(shard_of[np.asarray(batch)], return_counts=True)
    p = counts / counts.sum()
    return float(1.0 / (p ** 2).sum())


def rank_effective_shards(window, seed=0, epochs=3) -> list[float]:
    """Mean effective shards per micro-batch of each of 2 ranks (16 shards × 64, batch 8)."""
    shards = [range(64 * i, 64 * (i + 1)) for i in range(16)]
    shard_of = np.repeat(np.arange(16), 64)
    kwargs = {} if window is None else {"window": window}
    scores = []
    for rank in range(2):
        ds = ShardedIterableDataset.from_shards(shards, batch_size=8, seed=seed, rank=rank,
                                                world_size=2, **kwargs)
        per_batch = []
        for epoch in range(epochs):
            ds.set_epoch(epoch)
            per_batch += [effective_shards(b.numpy(), shard_of) for b in rank_stream(ds, 2)]
        scores.append(float(np.mean(per_batch)))
    return scores


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_by_default_each_micro_batch_mixes_at_least_two_and_a_half_shards(seed):
    assert min(rank_effective_shards(None, seed)) >= 2.5


def test_a_window_of_one_shard_puts_one_shard_in_each_micro_batch():
    assert rank_effective_shards(1) == [1.0, 1.0]


def test_a_wider_window_mixes_more_shards():
    assert min(rank_effective_shards(8)) > max(rank_effective_shards(2))


def test_a_worker_holds_at_most_one_window_and_reads_each_shard_once():
    loads = Counter()

    def load(shard):
        loads[shard.start] += 1
        return np.arange(shard.start, shard.stop)

    shards = [range(50 * i, 50 * (i + 1)) for i in range(12)]
    ds = ShardedIterableDataset.from_shards(shards, lengths=[50] * 12, load=load,
                                            batch_size=10, window=3, seed=4)
    ds.set_epoch(1)
    got = ids(ds._iter_worker(0, 1))
    assert sorted(got) == list(range(600))
    assert len(ds._cache) <= 3
    assert set(loads.values()) == {1}


def test_a_bad_window_gets_an_error_naming_it():
    for window in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="window"):
            ShardedIterableDataset.from_shards([range(4)], window=window)


def test_the_module_imports_only_torch_numpy_and_the_standard_library():
    import ast
    import sys
    from pathlib import Path

    import talk_helpers.reference.sharded_iterable as module

    tree = ast.parse(Path(module.__file__).read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert roots - set(sys.stdlib_module_names) == {"numpy", "torch"}


def test_window_design_reports_the_memory_and_reads_each_window_costs():
    from talk_helpers.lessons.datasets.exercise import window_design

    one, four, every = window_design(1), window_design(4), window_design(16)
    assert (one["shards_held"], four["shards_held"], every["shards_held"]) == (1, 4, 16)
    # a rank's 8 shards are read by both of its workers, whatever the window up to 8
    assert one["loads_per_worker"] == four["loads_per_worker"] == 8
    assert every["loads_per_worker"] == 16
    ids_read = sorted(int(i) for epoch in four["batches"][:1] for rank in epoch
                      for batch in rank for i in batch)
    assert ids_read == list(range(16 * 64))
