"""ShardedIterableDataset: exactly once, equal batches per rank whoever batches (the dataset
or the DataLoader), shuffle before shard, exact resume at every boundary and onto a grown
corpus, shards loaded once, an order in O(1) memory, refusals, a readable file."""

import ast
import copy
import json
import re
import tracemalloc
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sharded_iterable_helpers import TIMEOUT, ids, refusal, shard_ranges
from torch.utils.data import DataLoader

from talk_helpers.model.dataloader import loader_batches, round_robin
from talk_helpers.reference import sharded_iterable
from talk_helpers.reference.sharded_iterable import (
    KeyedPermutation,
    LoaderShape,
    ResumeState,
    ShardedIterableDataset,
)


def loader(num_workers=0, batch_size=None, drop_last=False):
    """What checkpoint(loader=...) reads of a DataLoader (its attributes of those names)."""
    return LoaderShape(num_workers, batch_size, drop_last, True)


def worker_stream(ds, worker, num_workers, batch_size=None, drop_last=False):
    """What worker ``worker``'s own copy of the dataset yields under such a loader."""
    shape = LoaderShape(num_workers, batch_size, drop_last, True)
    return list(copy.deepcopy(ds)._worker_items(worker, shape))


def rank_stream(ds, num_workers, batch_size=None, drop_last=False):
    """The batches a rank's DataLoader yields, computed here: each worker iterates its own
    copy of the dataset and batches its items (when the loader batches); the loader takes
    one batch from each worker in turn, skipping finished ones."""
    streams = [worker_stream(ds, w, num_workers, batch_size, drop_last)
               for w in range(max(num_workers, 1))]
    if batch_size is None:
        return round_robin(streams)
    return loader_batches(streams, batch_size, drop_last)


def make(config, rank, **overrides):
    kwargs = dict(batch_size=config["batch_size"], seed=config["seed"],
                  policy=config["policy"], rank=rank, world_size=config["world"])
    kwargs.update(overrides)
    if config["shards"] is None:
        return ShardedIterableDataset(config["n"], **kwargs)
    return ShardedIterableDataset.from_shards(shard_ranges(config["shards"]),
                                              block_size=config["block_size"], **kwargs)


@st.composite
def configs(draw):
    sharded = draw(st.booleans())
    if sharded:
        shards = draw(st.lists(st.integers(0, 600), min_size=1, max_size=10))
        n = sum(shards)
    else:
        shards, n = None, draw(st.integers(0, 4000))
    return {"n": n, "shards": shards, "world": draw(st.integers(1, 8)),
            "block_size": draw(st.one_of(st.none(), st.integers(1, 3000))),
            "workers": draw(st.integers(0, 4)),
            "batch_size": draw(st.one_of(st.none(), st.integers(1, 3), st.integers(4, 300))),
            "loader_batch": draw(st.one_of(st.none(), st.integers(1, 7))),
            "drop_last": draw(st.booleans()),
            "policy": draw(st.sampled_from(["drop", "pad"])),
            "epoch": draw(st.integers(0, 1000)), "seed": draw(st.integers(0, 2**31)),
            "resume": draw(st.floats(0, 1)), "resume_workers": draw(st.integers(0, 4))}


# -- exactly once, equal batches, exact resume -----------------------------------------

def loader_of(config, workers=None):
    """The DataLoader shape a configuration reads with: its workers, its batch size (None:
    the dataset's items pass through) and drop_last."""
    batch = config["loader_batch"]
    return loader(config["workers"] if workers is None else workers, batch,
                  config["drop_last"] and batch is not None)


def loader_len(ds, shape):
    """len(DataLoader): what it promises for an IterableDataset that has a length."""
    if shape.batch_size is None:
        return len(ds)
    whole, part = divmod(len(ds), shape.batch_size)
    return whole + (part > 0 and not shape.drop_last)


def read(ds, shape):
    return rank_stream(ds, shape.num_workers, shape.batch_size, shape.drop_last)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_every_configuration_reads_each_sample_once_with_equal_batches_per_rank(config):
    world, shape = config["world"], loader_of(config)
    per_rank, seen = [], Counter()
    for rank in range(world):
        ds = make(config, rank)
        ds.set_epoch(config["epoch"])
        batches = read(ds, shape)
        assert len(batches) == loader_len(ds, shape)
        per_rank.append(len(batches))
        seen.update(ids(batches))

        # plain-DataLoader resume in a "fresh process": a new object, maybe other workers
        k = int(config["resume"] * len(batches))
        part = ids(rank_stream(ds, 1))       # the rank's whole share, nothing dropped
        for other in (shape, loader_of(config, config["resume_workers"])):
            fresh = make(config, rank)
            fresh.load_state_dict(ds.checkpoint(k, loader=shape))
            got = ids(batches[:k]) + ids(read(fresh, other))
            if other == shape:
                assert got == ids(batches), "the same loader: the same order"
            else:
                assert len(set(got)) == len(got) and set(got) <= set(part)
                if not shape.drop_last:
                    assert sorted(got) == sorted(part)

    assert len(set(per_rank)) == 1, f"batches per rank differ: {per_rank}"
    n, bound = config["n"], world - 1
    assert set(seen) <= set(range(n)), "unexpected ids"
    if shape.drop_last:     # each rank leaves out its last partial batch as well
        assert max(seen.values(), default=1) == 1 or config["policy"] == "pad"
        assert n - len(seen) <= bound + world * (ds._item_size * shape.batch_size - 1)
    elif config["policy"] == "drop":
        assert max(seen.values(), default=1) == 1
        assert n - len(seen) == ds.dropped <= bound
        assert sorted(set(range(n)) - set(seen)) == sorted(ds.dropped_ids().tolist())
    else:
        assert len(seen) == n
        assert sum(seen.values()) - n == ds.padded <= bound
        extra_reads = sorted(k for k, v in seen.items() for _ in range(v - 1))
        assert extra_reads == sorted(ds.padded_ids().tolist())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_a_worker_state_resumes_each_worker_exactly_where_it_stopped_even_at_its_end(config):
    from talk_helpers.lessons.datasets.exercise import as_worker

    shape = loader_of(config, max(config["workers"], 1))
    ds = make(config, rank=config["world"] - 1)
    ds.set_epoch(config["epoch"])
    for w in range(shape.num_workers):
        stream = worker_stream(ds, w, *shape[:3])
        for k in {int(config["resume"] * len(stream)), len(stream)}:
            it = ds._worker_items(w, shape)
            before = [next(it) for _ in range(k)]
            state = ds.state_dict()
            assert state["finished"] == (k == len(stream))
            fresh = make(config, rank=config["world"] - 1)
            with as_worker(fresh, w, shape.num_workers):
                fresh.load_state_dict(state)
            assert ids(before) + ids(fresh._worker_items(w, shape)) == ids(stream)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.booleans(), st.booleans())
def test_a_state_saved_after_the_last_batch_resumes_into_the_next_epoch(config, worker_state,
                                                                       set_first):
    """The usual end-of-epoch checkpoint: whichever comes first, set_epoch(e + 1) or
    loading the state, the new loader reads epoch e + 1, never epoch e again."""
    from talk_helpers.lessons.datasets.exercise import as_worker

    workers, epoch = max(config["workers"], 1), config["epoch"]
    ds = make(config, rank=0)
    ds.set_epoch(epoch)
    shape = LoaderShape(workers, None, False, True)
    if worker_state:   # what a StatefulDataLoader keeps: each worker's copy, at its end
        states = []
        for w in range(workers):
            list(ds._worker_items(w, shape))
            states.append(ds.state_dict())
    else:
        states = [ds.checkpoint(len(ds), num_workers=workers)] * workers
    plain = make(config, rank=0)
    plain.set_epoch(epoch + 1)
    streams = []
    for w, state in enumerate(states):
        fresh = make(config, rank=0)
        with as_worker(fresh, w, workers):
            # A StatefulDataLoader hands its workers their states when they start, after
            # the main process set the epoch: that order is the only one a worker sees.
            if set_first or worker_state:
                fresh.set_epoch(epoch + 1)
                fresh.load_state_dict(state)
            else:
                fresh.load_state_dict(state)
                fresh.set_epoch(epoch + 1)
            assert fresh.epoch == epoch + 1
            streams.append(list(fresh._worker_items(w, shape)))
    # A StatefulDataLoader next asks the worker after the one that gave the last batch.
    first = states[0]["rank_batches"] % workers if worker_state else 0
    assert ids(round_robin(streams[first:] + streams[:first])) == ids(rank_stream(plain,
                                                                                 workers))


def test_a_state_loaded_with_no_epoch_set_resumes_its_own_epoch():
    ds = ShardedIterableDataset(50, batch_size=4, seed=2)
    ds.set_epoch(3)
    full = rank_stream(ds, 2)
    fresh = ShardedIterableDataset(50, batch_size=4, seed=2)
    fresh.load_state_dict(ds.checkpoint(5, num_workers=2))
    assert fresh.epoch == 3 and ids(full[:5]) + ids(rank_stream(fresh, 2)) == ids(full)
    done = ShardedIterableDataset(50, batch_size=4, seed=2)
    done.load_state_dict(ds.checkpoint(len(ds), num_workers=2))
    assert rank_stream(done, 2) == [], "epoch 3 was read to its end"


def test_a_mid_epoch_state_loaded_into_another_epoch_is_refused():
    ds = ShardedIterableDataset(50, batch_size=4)
    ds.set_epoch(3)
    it = ds._worker_items(0, LoaderShape(0, None, False, True))
    next(it)
    for state in (ds.checkpoint(2, num_workers=1), ds.state_dict()):
        fresh = ShardedIterableDataset(50, batch_size=4)
        fresh.set_epoch(4)
        with pytest.raises(ValueError, match="skip the rest of epoch 3"):
            fresh.load_state_dict(state)
    fresh.load_state_dict(ds.checkpoint(len(ds), num_workers=1))  # finished: epoch 4 goes on
    assert fresh.epoch == 4 and len(rank_stream(fresh, 1)) == len(ds)


def test_a_resumed_loader_saves_and_resumes_again_in_the_same_order():
    ds = ShardedIterableDataset(90, batch_size=4, seed=1)
    ds.set_epoch(2)
    full = ids(rank_stream(ds, 3))
    first = ShardedIterableDataset(90, batch_size=4, seed=1)
    first.load_state_dict(ds.checkpoint(4, num_workers=3))
    second_state = first.checkpoint(7, num_workers=3)    # 7 more from the resumed loader
    assert second_state["history"] == [{"world_size": 1, "num_workers": 3, "batches": 11,
                                         "loader_batch_size": None, "drop_last": False}]
    second = ShardedIterableDataset(90, batch_size=4, seed=1)
    second.load_state_dict(second_state)
    assert ids(rank_stream(ds, 3)[:11]) + ids(rank_stream(second, 3)) == full


# -- the same in real DataLoaders -------------------------------------------------------

def _epoch_one(kind, num_workers, persistent, set_first):
    """A loader saved after the last batch of epoch 0, then a new one: what it reads."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    options = dict(batch_size=None, num_workers=num_workers, persistent_workers=persistent,
                   timeout=TIMEOUT if num_workers else 0,
                   multiprocessing_context="fork" if num_workers else None)
    cls = StatefulDataLoader if kind == "stateful" else DataLoader
    ds = ShardedIterableDataset.from_shards(shard_ranges([26, 9, 14, 12]), batch_size=5,
                                            seed=4)
    ds.set_epoch(0)
    loader = cls(ds, **options)
    batches = 0
    for _ in loader:
        batches += 1
        state = loader.state_dict() if kind == "stateful" else ds.checkpoint(batches,
                                                                               loader=loader)
    fresh = ShardedIterableDataset.from_shards(shard_ranges([26, 9, 14, 12]), batch_size=5,
                                               seed=4)
    resumed = cls(fresh, **options)
    target = resumed if kind == "stateful" else fresh
    if set_first:
        fresh.set_epoch(1)
        target.load_state_dict(state)
    else:
        target.load_state_dict(state)
        fresh.set_epoch(1)
    got = ids(resumed)
    if persistent:   # the same workers go on to epoch 2
        fresh.set_epoch(2)
        got2 = ids(resumed)
    else:
        got2 = None
    return got, got2


@pytest.mark.parametrize("kind", ["stateful", "checkpoint"])
@pytest.mark.parametrize("num_workers,persistent", [(0, False), (2, False), (2, True)])
@pytest.mark.parametrize("set_first", [True, False])
def test_a_loader_saved_after_the_last_batch_reads_the_next_epoch(kind, num_workers,
                                                                  persistent, set_first):
    got, got2 = _epoch_one(kind, num_workers, persistent, set_first)
    plain = ShardedIterableDataset.from_shards(shard_ranges([26, 9, 14, 12]), batch_size=5,
                                               seed=4)
    plain.set_epoch(1)
    assert got == ids(rank_stream(plain, num_workers)), "epoch 1 in full, not epoch 0 again"
    if got2 is not None:
        plain.set_epoch(2)
        assert got2 == ids(rank_stream(plain, num_workers))


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
    full = list(ds.attach(DataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT)))
    saved = ds.checkpoint(batches_consumed=5)     # the attached loader's 2 workers
    assert saved["history"] == [{"world_size": 1, "num_workers": 2, "batches": 5,
                                 "loader_batch_size": None, "drop_last": False}]
    fresh = ShardedIterableDataset(100, batch_size=7, seed=5)
    fresh.load_state_dict(saved)
    rest = list(DataLoader(fresh, batch_size=None, num_workers=1, timeout=TIMEOUT))
    assert sorted(ids(full[:5]) + ids(rest)) == sorted(ids(full)) and fresh.epoch == 2
    again = ShardedIterableDataset(100, batch_size=7, seed=5)
    again.load_state_dict(saved)
    rest = list(DataLoader(again, batch_size=None, num_workers=2, timeout=TIMEOUT))
    assert ids(full[:5]) + ids(rest) == ids(full), "the same workers: the same order"
    fresh.set_epoch(3)  # the resume point belongs to epoch 2 only
    assert len(list(DataLoader(fresh, batch_size=None))) == len(full)


def test_checkpoint_needs_the_loader_it_counts_unless_nothing_was_read():
    ds = ShardedIterableDataset(100, batch_size=7)
    assert ds.checkpoint(0)["history"] == [{"world_size": 1, "num_workers": 1, "batches": 0,
                                            "loader_batch_size": None, "drop_last": False}]
    with pytest.raises(ValueError, match=r"must know the loader whose batches it counts: "
                                         r"call ds.attach\(loader\) before iter\(loader\)"):
        ds.checkpoint(3)
    assert ds.checkpoint(3, loader=loader(2, 4))["history"][0]["loader_batch_size"] == 4
    with pytest.raises(ValueError, match="batches_consumed"):
        ds.checkpoint(len(ds) + 1, num_workers=2)


@pytest.mark.parametrize("stateful", [False, True])
def test_a_dataloader_with_in_order_false_is_refused_when_attached_or_counted(stateful):
    from torchdata.stateful_dataloader import StatefulDataLoader

    cls = StatefulDataLoader if stateful else DataLoader
    ds = ShardedIterableDataset(40, batch_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # StatefulDataLoader's own warning about in_order
        loader = cls(ds, batch_size=None, num_workers=2, in_order=False)
    assert "in_order=False" in refusal(lambda: ds.attach(loader))
    assert "in_order=False" in refusal(lambda: ds.checkpoint(0, loader=loader))
    one = ds.attach(cls(ds, batch_size=None, num_workers=0, in_order=False))
    assert len(list(one)) == len(ds)


# -- shards: loaded once, checked on load, mixed by blocks ----------------------------------

class CountingLoad:
    """``load(shard)`` that counts its calls per shard (one instance per worker copy)."""

    def __init__(self):
        self.calls = Counter()

    def __call__(self, shard):
        self.calls[shard.start] += 1
        return np.arange(shard.start, shard.stop)


def loads_per_rank(ds, num_workers) -> Counter:
    """How often each shard is loaded by one rank's workers in one epoch (each worker a
    copy of the dataset with its own cache, as in a DataLoader)."""
    total = Counter()
    for w in range(max(num_workers, 1)):
        copy_ = copy.deepcopy(ds)
        counter = CountingLoad()
        copy_._shards.load = counter
        list(copy_._worker_items(w, LoaderShape(num_workers, None, False, True)))
        total += counter.calls
    return total


@pytest.mark.parametrize("num_workers", [1, 2, 4, 8])
def test_each_shard_is_loaded_once_per_rank_and_epoch(num_workers):
    # 64 shards of 50, 2 ranks, micro-batches of 10, blocks of one shard: each worker's
    # run ends on a shard boundary, so no shard is cut between two workers.
    shards = shard_ranges([50] * 64)
    for rank in range(2):
        ds = ShardedIterableDataset.from_shards(shards, lengths=[50] * 64, load=np.load,
                                                block_size=50, batch_size=10, rank=rank,
                                                world_size=2, seed=1)
        for epoch in range(2):
            ds.set_epoch(epoch)
            loads = loads_per_rank(ds, num_workers)
            assert set(loads.values()) == {1} and len(loads) == 32


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 200), min_size=1, max_size=40), st.integers(1, 400),
       st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 16),
       st.integers(0, 100))
def test_only_the_blocks_a_worker_boundary_cuts_are_loaded_twice(sizes, block_size,
                                                                  num_workers, world,
                                                                  batch_size, seed):
    for rank in range(world):
        ds = ShardedIterableDataset.from_shards(shard_ranges(sizes), lengths=sizes,
                                                load=np.load, block_size=block_size,
                                                batch_size=batch_size, rank=rank,
                                                world_size=world, seed=seed)
        order = ds._order(ds.epoch)
        shards_per_block = np.bincount(order.block_of_shard).max()
        loads = loads_per_rank(ds, num_workers)
        # each boundary between two workers' runs cuts at most one block
        assert sum(loads.values()) - len(loads) <= (num_workers - 1) * shards_per_block


def test_a_real_dataloader_loads_each_shard_once_per_rank():
    counts = torch.zeros(2, 16, dtype=torch.int64).share_memory_()
    ds = ShardedIterableDataset.from_shards(list(range(16)), lengths=[40] * 16,
                                            load=SharedCountingLoad(counts), block_size=40,
                                            batch_size=8, seed=3)
    got = ids(DataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT,
                         multiprocessing_context="fork"))
    assert sorted(got) == list(range(16 * 40))
    assert counts.sum(0).tolist() == [1] * 16 and counts.sum(1).tolist() == [8, 8]


class SharedCountingLoad:
    """``load(i)`` for shard ``i`` of 40 ids, counted per worker in shared memory."""

    def __init__(self, counts):
        self.counts = counts

    def __call__(self, i):
        from torch.utils.data import get_worker_info

        self.counts[get_worker_info().id, i] += 1
        return np.arange(40 * i, 40 * (i + 1))


@pytest.mark.parametrize("declared,actual,words", [(12, 16, "never be read"),
                                                   (12, 8, "cannot be read")])
def test_a_shard_of_another_length_than_declared_is_refused_naming_it(tmp_path, declared,
                                                                      actual, words):
    paths = []
    for i, size in enumerate([10, actual, 10]):
        paths.append(tmp_path / f"part-{i}.npy")
        np.save(paths[-1], np.arange(size))
    ds = ShardedIterableDataset.from_shards(paths, lengths=[10, declared, 10], load=np.load,
                                            batch_size=4, block_size=None)
    message = refusal(lambda: list(DataLoader(ds, batch_size=None, num_workers=1,
                                              timeout=TIMEOUT)))
    assert re.search(rf"shard 1 \(.*part-1\.npy\) holds {actual} samples but "
                     rf"lengths\[1\] = {declared}.*{words}", message, re.DOTALL)


def test_shards_in_memory_are_checked_against_lengths_when_built():
    with pytest.raises(ValueError, match=r"shard 1 \(range\(3, 9\)\) holds 6 samples"):
        ShardedIterableDataset.from_shards([range(3), range(3, 9)], lengths=[3, 5])


def micro_batches(n_shards, block_size=None, shard_size=64, seed=0, epochs=2, **kwargs):
    """epochs -> ranks -> micro-batches of 2 ranks × 2 workers, batch 8; and shard labels."""
    shards = shard_ranges([shard_size] * n_shards)
    kwargs = kwargs if block_size is None else {**kwargs, "block_size": block_size}
    out = []
    for epoch in range(epochs):
        out.append([])
        for rank in range(2):
            ds = ShardedIterableDataset.from_shards(shards, batch_size=8, seed=seed,
                                                    rank=rank, world_size=2, **kwargs)
            ds.set_epoch(epoch)
            out[-1].append([b.numpy() for b in rank_stream(ds, 2)])
    return out, np.repeat(np.arange(n_shards), shard_size)


@pytest.mark.parametrize("n_shards", [16, 256])
@pytest.mark.parametrize("seed", [0, 1])
def test_by_default_micro_batches_mix_well_at_16_and_256_shards(n_shards, seed):
    from talk_helpers.checks.mixing import step_report

    epochs, groups = micro_batches(n_shards, seed=seed)
    report = step_report(epochs, groups=groups)
    assert report.well_mixed and report.ok, repr(report)


def test_a_block_of_one_shard_puts_one_shard_in_each_micro_batch_and_wider_mixes_more():
    from talk_helpers.checks.mixing import effective_groups

    def effective(block_size):
        epochs, groups = micro_batches(16, block_size=block_size)
        return effective_groups([b for ranks in epochs for r in ranks for b in r], groups)

    one, four, every = effective(64), effective(4 * 64), effective(None)
    assert one == 1.0 and one < four < every


# -- the order: a keyed bijection in O(1) memory -------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5000), st.lists(st.integers(0, 2**32), min_size=1, max_size=4))
def test_the_keyed_permutation_is_a_bijection_of_any_size(n, key):
    out = KeyedPermutation(n, key)(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))


def test_the_keyed_permutation_stays_in_range_and_distinct_at_a_billion():
    n = 10**9
    positions = np.random.default_rng(0).choice(n, 200_000, replace=False)
    out = KeyedPermutation(n, (7, 3))(positions)
    assert out.min() >= 0 and out.max() < n and len(np.unique(out)) == len(out)


@pytest.mark.parametrize("n", [5, 12])
def test_the_keyed_permutation_sends_each_position_anywhere_with_equal_chance(n):
    keys = 6000
    table = np.zeros((n, n))
    for key in range(keys):
        table[np.arange(n), KeyedPermutation(n, (key,))(np.arange(n))] += 1
    expected = keys / n
    chi2 = ((table - expected) ** 2 / expected).sum()
    dof = (n - 1) ** 2
    assert chi2 < dof + 6 * np.sqrt(2 * dof), chi2   # six standard deviations


def test_the_keyed_permutation_mixes_like_torch_randperm_by_the_collections_score():
    from talk_helpers.checks.mixing import batch_mixing

    def mixing(order):   # 60 of 61 ids in batches of 5, as notebook 09's audits cut them
        return batch_mixing(list(order[:60].reshape(12, 5)))

    keys = range(200)
    keyed = [mixing(KeyedPermutation(61, (key, 3))(np.arange(61))) for key in keys]
    uniform = [mixing(torch.randperm(61, generator=torch.Generator().manual_seed(key)).numpy())
               for key in keys]
    spread = np.hypot(np.std(keyed), np.std(uniform)) / np.sqrt(len(keys))
    assert abs(np.mean(keyed) - np.mean(uniform)) < 4 * spread


def test_a_billion_samples_start_their_first_batch_without_building_the_order():
    tracemalloc.start()
    try:
        ds = ShardedIterableDataset(10**9, batch_size=256, rank=3, world_size=8, seed=1)
        ds.set_epoch(5)
        first = next(ds._worker_items(1, LoaderShape(4, None, False, True)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak} bytes"     # 1e9 int64 ids would be 8 GB
    assert len(first) == 256 and len(set(first.tolist())) == 256


@settings(max_examples=100, deadline=None)
@given(configs())
def test_same_seed_gives_same_orders_and_epochs_give_different_ones(config):
    a, b = make(config, 0), make(config, 0)
    e = config["epoch"]
    assert np.array_equal(a.epoch_order(e), b.epoch_order(e))
    assert sorted(a.epoch_order(e).tolist()) == list(range(config["n"]))
    if config["n"] >= 20 and (config["shards"] is None or config["block_size"] is None
                              or config["block_size"] >= 20):
        assert not np.array_equal(a.epoch_order(e), a.epoch_order(e + 1))


# -- the rest of the contract ---------------------------------------------------------------

def test_each_bad_argument_gets_an_error_naming_it():
    cases = [(dict(source=-1), "source"), (dict(world_size=0, rank=0), "world_size"),
             (dict(rank=2, world_size=2), "rank"), (dict(batch_size=0), "batch_size"),
             (dict(policy="wrap"), "policy"), (dict(rank=1), "both"), (dict(seed=-1), "seed")]
    for kwargs, word in cases:
        source = kwargs.pop("source", 10)
        with pytest.raises(ValueError, match=word):
            ShardedIterableDataset(source, **kwargs)
    with pytest.raises(ValueError, match="lengths"):
        ShardedIterableDataset.from_shards([range(3)], lengths=[-3])
    for block_size in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="block_size"):
            ShardedIterableDataset.from_shards([range(4)], block_size=block_size)
    with pytest.raises(ValueError, match="epoch"):
        ShardedIterableDataset(10).set_epoch(-1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_a_saved_state_is_plain_json_that_reads_back_to_itself(config):
    shape = loader_of(config, max(config["workers"], 1))
    ds = make(config, rank=config["world"] - 1)
    ds.set_epoch(config["epoch"])
    saved = ds.checkpoint(int(config["resume"] * loader_len(ds, shape)), loader=shape)
    assert json.loads(json.dumps(saved)) == saved
    assert ResumeState.from_dict(saved).to_dict() == saved
    it = ds._worker_items(shape.num_workers - 1, shape)
    for _ in range(int(config["resume"] * 3)):
        next(it, None)
    worker = ds.state_dict()           # no transform: no generator state, plain values
    assert json.loads(json.dumps(worker)) == worker
    assert ResumeState.from_dict(worker).to_dict() == worker
    assert worker["worker_id"] == shape.num_workers - 1 and worker["version"] == 5


def test_the_reference_dataset_reads_no_private_name_of_torch_or_python():
    """No call-stack walk, no private torch attribute or module: what it reads of the
    DataLoader is get_worker_info() and the attributes attach() reads."""
    tree = ast.parse(open(sharded_iterable.__file__).read())
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    own |= {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    private = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
               and n.attr.startswith("_") and not n.attr.startswith("__")} - own
    assert private <= {"_asdict", "_replace"}, "NamedTuple's public methods only"
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} - {"__future__"}
    assert not [m for m in modules if any(part.startswith("_") for part in m.split("."))]
    assert "f_locals" not in {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def test_a_state_from_another_configuration_is_refused():
    state = ShardedIterableDataset(100, batch_size=4, seed=1).checkpoint(3, num_workers=1)
    for other in (dict(seed=2), dict(batch_size=8), dict(policy="pad")):
        with pytest.raises(ValueError, match="different configuration"):
            ds = ShardedIterableDataset(100, **{"batch_size": 4, "seed": 1, **other})
            ds.load_state_dict(state)
    with pytest.raises(ValueError, match="the source held 100 samples .* holds 99 now"):
        ShardedIterableDataset(99, batch_size=4, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="version 5"):
        ShardedIterableDataset(100, batch_size=4, seed=1).load_state_dict({"epoch": 2})
    with pytest.raises(ValueError, match="state has version 4, from an older copy .* knew "
                                         "shards by length only"):
        ShardedIterableDataset(100, batch_size=4, seed=1).load_state_dict({**state, "version": 4})


def test_rank_comes_from_the_environment_at_construction(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = ShardedIterableDataset(10)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert (ds.rank, ds.world_size) == (1, 2)
    assert ids(ds.attach(DataLoader(ds, batch_size=None, num_workers=1, timeout=TIMEOUT,
                                    multiprocessing_context="spawn"))) == ids(rank_stream(ds, 1))
    assert (ShardedIterableDataset(10).rank, ShardedIterableDataset(10).world_size) == (0, 1)


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_a_dataloader_yields_the_workers_runs_in_turn(num_workers):
    ds = ShardedIterableDataset(203, batch_size=8, rank=1, world_size=2, policy="pad")
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        timeout=TIMEOUT if num_workers else 0)
    assert ids(loader) == ids(rank_stream(ds, num_workers))
    assert ds.checkpoint(0)["history"][0]["num_workers"] == max(num_workers, 1)


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
                draws[rank, epoch, w] = worker_stream(ds, w, 2)[0].item()
        assert worker_stream(ds, 1, 2)[0].item() == draws[rank, 1, 1]
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


def _draw(batch, rng):
    return batch, torch.rand(len(batch), generator=rng)


def test_a_worker_state_resumes_the_augmentation_generator_too():
    def make_ds():
        ds = ShardedIterableDataset(50, batch_size=4, transform=_draw, rank=1, world_size=2)
        ds.set_epoch(2)
        return ds

    from talk_helpers.lessons.datasets.exercise import as_worker

    ds, shape = make_ds(), LoaderShape(2, None, False, True)
    full = worker_stream(ds, 1, 2)
    it = ds._worker_items(1, shape)
    for _ in range(2):
        next(it)
    fresh = make_ds()
    with as_worker(fresh, 1, 2):
        fresh.load_state_dict(ds.state_dict())
    rest = list(fresh._worker_items(1, shape))
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


# -- a corpus that grows ------------------------------------------------------------------

SIZES, GROWN = [26, 9, 14, 12], [26, 9, 14, 12, 30, 7]


def corpus(sizes, **kwargs):
    return ShardedIterableDataset.from_shards(shard_ranges(sizes), seed=4, block_size=20,
                                              **kwargs)


@pytest.mark.parametrize("batch_size,loader_batch", [(5, None), (None, 4)])
def test_a_checkpoint_loads_onto_more_shards_and_they_join_from_the_next_epoch(batch_size,
                                                                               loader_batch):
    shape = loader(2, loader_batch)
    old = corpus(SIZES, batch_size=batch_size)
    old.set_epoch(2)
    full = read(old, shape)
    saved = old.checkpoint(3, loader=shape)
    new = corpus(GROWN, batch_size=batch_size)
    new.load_state_dict(saved)
    assert ids(full[:3]) + ids(read(new, shape)) == ids(full), "the saved epoch, as it was"
    assert new.checkpoint(0, loader=shape)["config"]["lengths"] == SIZES
    new.set_epoch(3)
    assert sorted(ids(read(new, shape))) == list(range(sum(GROWN))), "the new shards join"


def test_a_stateful_state_loads_onto_more_shards():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def stateful(sizes):
        ds = corpus(sizes, batch_size=5)
        ds.set_epoch(1)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT)

    full = [b.tolist() for b in stateful(SIZES)]
    first = stateful(SIZES)
    it = iter(first)
    before = [next(it).tolist() for _ in range(4)]
    state = first.state_dict()
    del it, first
    resumed = stateful(GROWN)
    resumed.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # StatefulDataLoader's own deprecation warning
        assert before + [b.tolist() for b in resumed] == full


@pytest.mark.parametrize("sizes,words", [
    ([26, 10, 14, 12], r"shard 1 \(range\(26, 36\)\) held 9 samples when the state was "
                       r"saved and holds 10 now"),
    ([26, 9, 14], "a corpus of 4 shards, and this one has 3"),
    ([9, 26, 14, 12], r"shard 0 \(range\(0, 9\)\) held 26 samples")])
def test_a_corpus_changed_otherwise_than_grown_is_refused_naming_the_shard(sizes, words):
    saved = corpus(SIZES, batch_size=5).checkpoint(2, num_workers=1)
    with pytest.raises(ValueError, match=words):
        corpus(sizes, batch_size=5).load_state_dict(saved)


# -- elastic resume ------------------------------------------------------------------------

@st.composite
def elastic_configs(draw):
    config = draw(configs())
    config.update(world2=draw(st.integers(1, 8)), workers2=draw(st.integers(0, 3)),
                  loader_batch2=draw(st.one_of(st.none(), st.integers(1, 7))),
                  saver=draw(st.integers(0, 7)), loader_rank=draw(st.integers(0, 7)))
    return config


def world_streams(config, world, shape, state=None):
    """Every rank's batches in a world of ``world`` ranks, after loading ``state``."""
    out = []
    for rank in range(world):
        ds = make(config, rank, world_size=world)
        ds.set_epoch(config["epoch"])
        if state is not None:
            ds.load_state_dict(state)
        out.append(read(ds, shape))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_configs())
def test_a_checkpoint_from_any_rank_resumes_on_any_world_size_exactly_once(config):
    w1, w2 = config["world"], config["world2"]
    first = loader_of(config)
    second = loader(config["workers2"], config["loader_batch2"],
                    first.drop_last and config["loader_batch2"] is not None)
    before = world_streams(config, w1, first)
    k = int(config["resume"] * len(before[0]))      # every rank took k batches (lockstep)
    saved = [make(config, r) for r in range(w1)]
    for ds in saved:
        ds.set_epoch(config["epoch"])
    states = [ds.checkpoint(k, loader=first) for ds in saved]
    assert all(st_ == states[0] for st_ in states), "ranks of one world save the same point"
    state = states[config["saver"] % w1]
    after = world_streams(config, w2, second, state)
    assert len({len(items) for items in after}) == 1, "new ranks yield equal batches"
    seen = Counter(ids(sum((items[:k] for items in before), [])))
    seen.update(ids(sum(after, [])))
    n = config["n"]
    assert set(seen) <= set(range(n))
    missing, extra = n - len(seen), sum(seen.values()) - len(seen)
    left_out = 0   # samples drop_last leaves out: less than a batch per rank
    if second.drop_last:
        left_out = w2 * (ds._item_size * second.batch_size - 1)
    if config["policy"] == "drop":
        assert extra == 0 and missing <= (w1 - 1) + (w2 - 1) + left_out
    else:
        assert missing <= left_out and extra <= (w1 - 1) + (w2 - 1)
    # the next epoch is the new world's normal one
    ds = make(config, config["loader_rank"] % w2, world_size=w2)
    ds.load_state_dict(state)
    ds.set_epoch(config["epoch"] + 1)
    plain = make(config, config["loader_rank"] % w2, world_size=w2)
    plain.set_epoch(config["epoch"] + 1)
    assert ids(rank_stream(ds, 1)) == ids(rank_stream(plain, 1))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_configs(), st.integers(1, 5), st.floats(0, 1))
def test_a_resumed_world_can_save_again_and_resume_on_a_third_world_size(config, w3, frac):
    w1, w2 = config["world"], config["world2"]
    plain = loader(0)
    before = world_streams(config, w1, plain)
    k1 = int(config["resume"] * len(before[0]))
    first = make(config, 0)
    first.set_epoch(config["epoch"])
    state1 = first.checkpoint(k1, num_workers=0)
    middle = world_streams(config, w2, plain, state1)
    k2 = int(frac * len(middle[0]))
    second = make(config, 0, world_size=w2)
    second.load_state_dict(state1)
    state2 = second.checkpoint(k2, num_workers=0)
    after = world_streams(config, w3, plain, state2)
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
    it = ds._worker_items(0, LoaderShape(0, None, False, True))
    next(it)
    state = ds.state_dict()
    for rank, world in ((0, 3), (1, 2)):
        with pytest.raises(ValueError, match=r"checkpoint\(batches_consumed\)"):
            ShardedIterableDataset(100, batch_size=4, rank=rank,
                                   world_size=world).load_state_dict(state)


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


def test_the_module_reads_in_small_functions_with_few_positional_parameters():
    """Item by item, what a person who copies the file reads: no function longer than 40
    lines, none with more than four positional parameters (self and cls aside)."""
    import ast
    from pathlib import Path

    import talk_helpers.reference.sharded_iterable as module

    tree = ast.parse(Path(module.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            positional = [a.arg for a in node.args.posonlyargs + node.args.args
                          if a.arg not in ("self", "cls")]
            assert node.end_lineno - node.lineno < 40, node.name
            assert len(positional) <= 4, (node.name, positional)


# -- notebook 09's machinery ------------------------------------------------------------------

class ModuloShardedIds(torch.utils.data.IterableDataset):
    """Ids 0..size-1, worker k of n keeping those equal to k modulo n."""

    def __init__(self, size):
        self.size = size

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        k, n = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(k, self.size, n))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_simulated_loader_yields_what_a_real_dataloader_yields(num_workers):
    from talk_helpers.lessons.datasets.exercise import simulated_loader

    for make_dataset, batch_size in ((lambda: ModuloShardedIds(23), 4),
                                     (lambda: ShardedIterableDataset(41, batch_size=3, seed=2),
                                      None)):
        real = DataLoader(make_dataset(), batch_size=batch_size, num_workers=num_workers,
                          timeout=TIMEOUT if num_workers else 0,
                          multiprocessing_context="fork" if num_workers else None)
        assert [b.tolist() for b in real] == [
            b.tolist() for b in simulated_loader(make_dataset(), num_workers, batch_size)]


def test_block_design_counts_the_loads_and_the_shards_a_worker_holds():
    from talk_helpers.lessons.datasets.exercise import block_design

    one, every = block_design(64), block_design(None)
    # 16 shards, 2 ranks × 2 workers: one-shard blocks read each shard once per rank
    # (8 per rank); one block of everything is read by every worker (2 × 16 per rank).
    assert (one["loads_per_rank"], every["loads_per_rank"]) == (8, 32)
    assert (one["shards_held"], every["shards_held"]) == (1, 16)
    ids_read = sorted(int(i) for rank in one["batches"][0] for batch in rank for i in batch)
    assert ids_read == list(range(16 * 64))


def test_the_graders_of_09_pass_the_solutions_and_not_the_stubs():
    from talk_helpers.exercises.reference import grade_counts, grade_resume
    from talk_helpers.notebook.solutions.nb09 import SOLUTIONS

    assert grade_counts(None, None).passed is None and grade_resume(None).passed is None
    scope = {}
    exec(SOLUTIONS[1], scope)
    assert grade_counts(scope["my_dropped"], scope["my_batches"]).ok
    assert not grade_counts(scope["my_dropped"], scope["my_batches"] - 1).ok
    job = ShardedIterableDataset(100, batch_size=8, rank=0, world_size=2)
    job.set_epoch(5)
    scope = {"job": job}
    exec(SOLUTIONS[2], scope)
    assert grade_resume(scope["my_state"]).ok
    assert not grade_resume(job.checkpoint(0, num_workers=0)).ok
