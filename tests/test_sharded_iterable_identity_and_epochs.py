"""ShardedIterableDataset knows its corpus and its epoch: a checkpoint loads only onto the
shards it was saved on (by length, name and fingerprint) or onto more after them; a state
or an epoch set while persistent workers live reaches them or is refused; the workers of
one pass never mix two epochs."""

import copy
import multiprocessing
import os
import types
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sharded_iterable_helpers import TIMEOUT, ids, refusal, shard_ranges
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.reference.sharded_iterable import ShardedIterableDataset


def files(count, size):
    """Shards as file names, each ``size`` samples: ``load`` maps a name to its ids."""
    return [f"/data/part-{i:03d}.bin" for i in range(count)], [size] * count


def corpus(names, lengths, **kwargs):
    table = dict(zip(names, lengths, strict=True))
    offsets = {name: sum(lengths[:i]) for i, name in enumerate(names)}

    def load(name):
        return range(offsets[name], offsets[name] + table[name])

    return ShardedIterableDataset.from_shards(names, lengths=lengths, load=load, batch_size=3,
                                              seed=5, rank=0, world_size=1, **kwargs)


CHANGES = ("reorder", "rename", "replace", "insert")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(count=st.integers(2, 6), size=st.integers(1, 9), change=st.sampled_from(CHANGES),
       where=st.integers(0, 5), data=st.data())
def test_a_checkpoint_onto_shards_reordered_renamed_replaced_or_inserted_is_refused_naming_one(
        count, size, change, where, data):
    names, lengths = files(count, size)
    prints = [f"sha-{i}" for i in range(count)]
    saved = corpus(names, lengths, fingerprints=prints)
    saved.set_epoch(1)
    state = saved.checkpoint(1, num_workers=1)
    where = where % count
    new_names, new_prints = list(names), list(prints)
    if change == "reorder":
        order = data.draw(st.permutations(range(count)).filter(lambda p: list(p) != sorted(p)))
        new_names, new_prints = [names[i] for i in order], [prints[i] for i in order]
    elif change == "rename":
        new_names[where] = "/data/renamed.bin"
    elif change == "replace":
        new_prints[where] = "sha-new"
    else:
        new_names.insert(where, "/data/new.bin")
        new_prints.insert(where, "sha-new")
    grown = len(new_names) - count
    message = refusal(lambda: corpus(new_names, lengths + [size] * grown,
                                     fingerprints=new_prints).load_state_dict(state))
    assert "different corpus: shard" in message and "/data/" in message


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(count=st.integers(1, 5), sizes=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       stop=st.floats(0, 1))
def test_shards_appended_after_the_saved_ones_join_from_the_next_epoch(count, sizes, stop):
    names, lengths = files(count, 4)
    first = corpus(names, lengths)
    first.set_epoch(2)
    whole = list(DataLoader(first, batch_size=None))
    took = int(stop * len(first))
    state = first.checkpoint(took, num_workers=0)
    more = [f"/data/new-{i}.bin" for i in range(len(sizes))]
    grown = corpus(names + more, lengths + sizes)
    grown.load_state_dict(state)
    assert ids(whole[:took]) + ids(DataLoader(grown, batch_size=None)) == ids(whole)
    grown.set_epoch(3)
    assert sorted(ids(DataLoader(grown, batch_size=None))) == list(range(sum(lengths + sizes)))


def test_equal_shards_listed_in_another_order_are_refused_not_read_twice():
    names, lengths = files(4, 8)
    saved = corpus(names, lengths)
    saved.set_epoch(0)
    state = saved.checkpoint(2, num_workers=0)
    message = refusal(lambda: corpus(names[::-1], lengths).load_state_dict(state))
    assert "shard 0 (/data/part-003.bin) had the name '/data/part-000.bin'" in message
    assert "(the saved one is shard 3 now)" in message


def test_a_fingerprint_given_at_saving_must_be_given_at_loading():
    names, lengths = files(2, 5)
    state = corpus(names, lengths, fingerprints=["a", "b"]).checkpoint(0, num_workers=0)
    assert "fingerprint 'a'" in refusal(lambda: corpus(names, lengths).load_state_dict(state))
    with pytest.raises(ValueError, match="fingerprints must hold one string per shard"):
        corpus(names, lengths, fingerprints=["a"])


# -- states and epochs reach persistent workers --------------------------------------------

def persistent(ds, **kwargs):
    return DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                      timeout=TIMEOUT, multiprocessing_context="fork", **kwargs)


def test_a_state_loaded_while_persistent_workers_live_is_refused_saying_what_to_do():
    ds = ShardedIterableDataset(110, batch_size=5, seed=1)
    ds.set_epoch(0)
    loader = persistent(ds)
    it = iter(loader)
    before = [next(it) for _ in range(2)]
    state = ds.checkpoint(2, loader=loader)
    del it
    ds.load_state_dict(state)                       # a rollback in the same process
    message = refusal(lambda: ids(loader), RuntimeError)
    assert "load_state_dict() came after this DataLoader's persistent workers" in message
    assert "build a new DataLoader" in message
    rest = list(persistent(ds))
    assert len(rest) == len(ds) == 20
    assert sorted(ids(before) + ids(rest)) == list(range(110))


def test_strict_with_persistent_workers_gives_the_loop_the_error_not_a_dead_worker():
    ds = ShardedIterableDataset(40, batch_size=4, strict=True)
    loader = persistent(ds)
    ids(loader)
    message = refusal(lambda: ids(loader), RuntimeError)
    assert "call ds.set_epoch(epoch)" in message and "exited unexpectedly" not in message


class WorkerOneWaits(IterableDataset):
    """``ds`` read by 2 persistent workers; from the second pass on, worker 1 starts only
    once ``go`` is set: a busy machine, where the loop's set_epoch comes in between."""

    def __init__(self, ds):
        self.ds, self.go = ds, multiprocessing.get_context("fork").Event()
        self.passes = 0

    def __iter__(self):
        self.passes += 1
        if get_worker_info().id == 1 and self.passes > 1 and not self.go.wait(TIMEOUT):
            raise TimeoutError("never released")
        return iter(self.ds)


@pytest.mark.parametrize("persistent_workers", [False, True])
def test_set_epoch_after_iter_waits_for_the_next_iterator_and_never_mixes(persistent_workers):
    def epoch_of(epoch):
        fresh = ShardedIterableDataset(60, batch_size=3, seed=2)
        fresh.set_epoch(epoch)
        return ids(DataLoader(fresh, batch_size=None, num_workers=2, timeout=TIMEOUT,
                              multiprocessing_context="fork"))

    ds = ShardedIterableDataset(60, batch_size=3, seed=2)
    wrapped = WorkerOneWaits(ds)
    loader = DataLoader(wrapped, batch_size=None, num_workers=2, timeout=TIMEOUT,
                        persistent_workers=persistent_workers, multiprocessing_context="fork")
    ds.set_epoch(0)
    assert ids(loader) == epoch_of(0)   # persistent workers: their next pass is the second
    ds.set_epoch(1)
    it = iter(loader)
    first = next(it)                  # worker 0 reads epoch 1
    ds.set_epoch(2)                   # too late for this iterator: worker 1 has not started
    wrapped.go.set()
    assert ids([first]) + ids(it) == epoch_of(1), "epoch 1, whole, in its order"
    assert ids(loader) == epoch_of(2), "the next iterator reads epoch 2"


def test_a_new_loader_each_epoch_with_the_same_seeded_generator_reads_each_epoch():
    ds = ShardedIterableDataset(30, batch_size=3, seed=4)
    read = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT,
                            generator=torch.Generator().manual_seed(0),
                            multiprocessing_context="fork")
        read.append(ids(loader))
        fresh = ShardedIterableDataset(30, batch_size=3, seed=4)
        fresh.set_epoch(epoch)
        assert read[-1] == ids(DataLoader(fresh, batch_size=None, num_workers=2,
                                          timeout=TIMEOUT, multiprocessing_context="fork"))
    assert read[0] != read[1] != read[2]


@pytest.mark.parametrize("policy", ["drop", "pad"])
def test_two_uneven_shards_for_two_ranks_of_three_workers_read_once_in_equal_batches(policy):
    sizes = [7, 2]  # a shard for each rank, one of them short; more workers than shards
    per_rank, read = [], []
    for rank in range(2):
        ds = ShardedIterableDataset.from_shards(shard_ranges(sizes), batch_size=2, seed=3,
                                                policy=policy, block_size=1, rank=rank,
                                                world_size=2)
        ds.set_epoch(1)
        batches = list(DataLoader(ds, batch_size=None, num_workers=3, timeout=TIMEOUT,
                                  multiprocessing_context="fork"))
        per_rank.append(len(batches))
        read += ids(batches)
    assert per_rank[0] == per_rank[1] == len(ds) > 0
    if policy == "drop":
        assert sorted(read) == sorted(set(range(9)) - set(ds.dropped_ids().tolist()))
    else:
        assert sorted(set(read)) == list(range(9)) and len(read) == 9 + ds.padded


def as_worker(ds, worker, passes, num_workers=2):
    """A persistent worker's copy of ``ds`` (sharing its memory) after ``passes`` passes."""
    copy_ = copy.copy(ds)
    copy_._passes = passes
    return copy_, types.SimpleNamespace(id=worker, num_workers=num_workers, seed=1000 + worker)


def test_a_late_worker_of_a_pass_reads_the_epoch_its_fellow_reads_with_a_warning():
    ds = ShardedIterableDataset(20)
    ds.set_epoch(1)
    zero, one = as_worker(ds, 0, 1), as_worker(ds, 1, 1)
    assert zero[0]._pass_epoch(zero[1]) == 1
    ds.set_epoch(2)
    with pytest.warns(RuntimeWarning, match=r"set_epoch\(2\) came after iter\(loader\): "
                                            r"this iterator reads epoch 1"):
        assert one[0]._pass_epoch(one[1]) == 1
    ds.set_epoch(3)
    ds._shared.passes[2] = ds._shared.passes[1]
    ds._shared.passes[2, 2] = 7          # fellows already in two epochs: nothing to agree on
    three = as_worker(ds, 0, 1, num_workers=3)
    with pytest.raises(RuntimeError, match="would mix epochs"):
        three[0]._pass_epoch(three[1])


def test_a_new_workers_copy_reads_the_epoch_set_before_iter():
    ds = ShardedIterableDataset(20)
    ds.set_epoch(4)
    fresh, info = as_worker(ds, 0, 0)
    ds.set_epoch(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fresh._pass_epoch(info) == 4
    assert "this iterator reads epoch 4, the next one epoch 5" in str(caught[0].message)


# -- a memory bound in bytes ---------------------------------------------------------------

@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
       block_bytes=st.integers(1, 2000), batch=st.integers(1, 7), seed=st.integers(0, 9))
def test_a_worker_holds_at_most_two_blocks_of_block_bytes_plus_a_shard(tmp_path, sizes,
                                                                      block_bytes, batch, seed):
    paths = []
    for i, n in enumerate(sizes):
        paths.append(tmp_path / f"{seed}-{i}-{n}.npy")
        np.save(paths[-1], np.arange(sum(sizes[:i]), sum(sizes[:i]) + n, dtype=np.int64))
    ds = ShardedIterableDataset.from_shards(paths, load=np.load, block_bytes=block_bytes,
                                            batch_size=batch, seed=seed, rank=0, world_size=1)
    on_disk = {i: os.path.getsize(p) for i, p in enumerate(paths)}
    read, held = [], 0
    for item in ds:
        read += item.tolist()
        held = max(held, sum(on_disk[s] for s in ds._shards.cache))
    assert sorted(read) == list(range(sum(sizes)))
    assert held <= 2 * (block_bytes + max(on_disk.values()))


def test_block_bytes_needs_shards_that_are_files():
    with pytest.raises(ValueError, match="block_bytes needs shards that are file paths"):
        ShardedIterableDataset.from_shards([range(3)], block_bytes=100)
