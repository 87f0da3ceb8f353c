"""ShardedIterableDataset in every shape a DataLoader can take, with real workers: the
DataLoader batching samples or passing micro-batches on, a collate_fn, drop_last, resumes at
random points; what it refuses; a StatefulDataLoader of another shape; a forgotten
set_epoch."""

import multiprocessing
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sharded_iterable_helpers import TIMEOUT, ids, refusal
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    SequentialSampler,
    get_worker_info,
)

from talk_helpers.reference.sharded_iterable import LoaderShape, ShardedIterableDataset


def concat(items):
    """A collate_fn: every id of the items (samples or micro-batches) in one flat tensor."""
    return torch.tensor(ids(items if isinstance(items, list) else [items]), dtype=torch.int64)


@st.composite
def loader_cases(draw):
    """A dataset (samples or micro-batches as items) and two DataLoader shapes over it."""
    item = draw(st.sampled_from([None, None, 3]))

    def shape():
        batch = draw(st.sampled_from([None, 1, 4, 5]))
        return {"num_workers": draw(st.integers(0, 3)), "batch_size": batch,
                "drop_last": batch is not None and draw(st.booleans()),
                "collate_fn": concat if item or draw(st.booleans()) else None}

    return {"n": draw(st.integers(20, 160)), "item": item, "seed": draw(st.integers(0, 99)),
            "rank": draw(st.integers(0, 2)), "world": 3, "epoch": draw(st.integers(0, 9)),
            "shards": draw(st.booleans()), "first": shape(), "second": shape(),
            "stop": draw(st.floats(0, 1))}


def build(case):
    kwargs = dict(batch_size=case["item"], seed=case["seed"], rank=case["rank"],
                  world_size=case["world"])
    if case["shards"]:
        bounds = np.linspace(0, case["n"], 5).astype(int)
        shards = [range(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        ds = ShardedIterableDataset.from_shards(shards, block_size=case["n"] // 3 + 1,
                                                **kwargs)
    else:
        ds = ShardedIterableDataset(case["n"], **kwargs)
    ds.set_epoch(case["epoch"])
    return ds


def make_loader(ds, shape):
    return ds.attach(DataLoader(ds, **shape, timeout=TIMEOUT if shape["num_workers"] else 0,
                      multiprocessing_context="fork" if shape["num_workers"] else None))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loader_cases())
def test_a_plain_dataloader_of_any_shape_resumes_at_any_batch_exactly(case):
    first, second = case["first"], case["second"]
    ds = build(case)
    full = [ids([b]) for b in make_loader(ds, first)]
    stop = int(case["stop"] * len(full))
    saved = ds.checkpoint(stop)     # of the attached loader
    again = build(case)
    again.load_state_dict(saved)
    assert full[:stop] + [ids([b]) for b in make_loader(again, first)] == full

    other = build(case)
    other.load_state_dict(saved)
    got = ids(full[:stop]) + ids([ids([b]) for b in make_loader(other, second)])
    whole = ids(list(build(case)))   # the rank's share, one item at a time
    assert len(got) == len(set(got)) and set(got) <= set(whole)
    if not first["drop_last"] and not second["drop_last"]:
        assert sorted(got) == sorted(whole)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_an_attached_loader_batching_samples_resumes_exactly_under_every_start_method(
        start_method):
    """The first loader most people write: samples as items, DataLoader(batch_size=8),
    told with ds.attach(loader). A spawned worker gets the loader's shape with the pickled
    dataset (forkserver pickles it the same way); the loader that reads on is a forked one."""
    def loader(ds, method):
        return ds.attach(DataLoader(ds, batch_size=8, num_workers=2, timeout=TIMEOUT,
                                    multiprocessing_context=method))

    full = [b.tolist() for b in loader(ShardedIterableDataset(200, seed=1), "fork")]
    assert [len(b) for b in full] == [8] * 25, "whole batches: no partial batch per worker"
    ds = ShardedIterableDataset(200, seed=1)
    for step, batch in enumerate(loader(ds, start_method)):
        assert batch.tolist() == full[step]
        if step == 2:
            break
    saved = ds.checkpoint(3)    # the attached loader's shape
    assert saved["history"] == [{"world_size": 1, "num_workers": 2, "loader_batch_size": 8,
                                 "drop_last": False, "batches": 3}]
    fresh = ShardedIterableDataset(200, seed=1)
    fresh.load_state_dict(saved)
    assert full[:3] + [b.tolist() for b in loader(fresh, "fork")] == full


def test_a_sampler_or_batch_sampler_never_reaches_the_dataset():
    ds = ShardedIterableDataset(20)
    with pytest.raises(ValueError, match="batch_sampler"):
        DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(range(20)), 4, False))
    with pytest.raises(ValueError, match="sampler"):
        DataLoader(ds, sampler=SequentialSampler(range(20)))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_workers_batching_samples_for_a_loader_not_attached_are_refused_saying_what_to_do(
        start_method):
    loader = DataLoader(ShardedIterableDataset(20), batch_size=4, num_workers=2,
                        timeout=TIMEOUT, multiprocessing_context=start_method)
    message = refusal(lambda: list(loader))
    assert "call ds.attach(loader) before iter(loader)" in message
    assert "ShardedIterableDataset(..., batch_size=B) and DataLoader(ds, batch_size=None)" \
        in message


def test_a_checkpoint_of_a_batching_loader_not_attached_is_refused_never_miscounted():
    def loader_of(ds):
        return DataLoader(ds, batch_size=3, num_workers=2, timeout=TIMEOUT,
                          multiprocessing_context="fork")

    ds = ShardedIterableDataset(40, batch_size=2, seed=1)
    loader = loader_of(ds)
    list(loader)     # each worker read items: the loader's batches of 3 were never dealt
    assert "must know the loader" in refusal(lambda: ds.checkpoint(2))
    message = refusal(lambda: ds.checkpoint(2, loader=loader))
    assert "num_workers=2, batch_size=3, drop_last=False, but this dataset was last read " \
        "for one with num_workers=2, batch_size=None" in message
    assert "ds.attach(loader) before iter(loader)" in message
    ds = ShardedIterableDataset(40, batch_size=2, seed=1)
    full = [ids([b]) for b in ds.attach(loader_of(ds))]
    again = ShardedIterableDataset(40, batch_size=2, seed=1)
    again.load_state_dict(ds.checkpoint(2))
    assert full[:2] + [ids([b]) for b in again.attach(loader_of(again))] == full


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(item=st.sampled_from([None, 3]), workers=st.integers(0, 3),
       batch=st.sampled_from([None, 1, 2, 5]), drop_last=st.booleans(), attached=st.booleans())
def test_a_checkpoint_counts_a_loader_only_as_its_workers_were_dealt(item, workers, batch,
                                                                     drop_last, attached):
    """Untold, workers deal single items: a checkpoint of a loader that batches more than
    one item is refused, never miscounted; attached, it is counted. (``_loader_shape`` is
    what ``iter()`` runs in every worker, with the worker count get_worker_info() gives.)"""
    ds = ShardedIterableDataset(60, batch_size=item, seed=1)
    loader = LoaderShape(workers, batch, drop_last and batch is not None, True)
    if attached:
        ds.attach(loader)
    if item is None and workers and not attached:
        assert "call ds.attach(loader)" in refusal(lambda: ds._loader_shape(workers))
        return
    ds._loader_shape(workers)
    if attached or (batch or 1) == 1:
        assert ds.checkpoint(1, loader=loader)["history"][0]["batches"] == 1
        assert attached or "must know the loader" in refusal(lambda: ds.checkpoint(1))
    else:
        message = refusal(lambda: ds.checkpoint(1, loader=loader))
        assert f"batch_size={batch}" in message and "ds.attach(loader)" in message


class _Wrapper(IterableDataset):
    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        yield from self.inner


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dataset_read_through_another_is_counted_once_told_the_loader(num_workers):
    def wrapped(ds):
        return DataLoader(_Wrapper(ds), batch_size=4, num_workers=num_workers,
                          timeout=TIMEOUT if num_workers else 0)

    ds = ShardedIterableDataset(40, seed=3)
    if num_workers:
        assert "ds.attach(loader)" in refusal(lambda: list(wrapped(ds)))
    else:
        assert sorted(ids(wrapped(ds))) == list(range(40))
        assert "ds.attach(loader)" in refusal(lambda: ds.checkpoint(2))
    ds = ShardedIterableDataset(40, seed=3)
    full = [ids([b]) for b in ds.attach(wrapped(ds))]
    again = ShardedIterableDataset(40, seed=3)
    again.load_state_dict(ds.checkpoint(2))
    assert full[:2] + [ids([b]) for b in again.attach(wrapped(again))] == full


# -- StatefulDataLoader ------------------------------------------------------------------

def _stateful(num_workers, batch_size, **kwargs):
    from torchdata.stateful_dataloader import StatefulDataLoader

    ds = ShardedIterableDataset(90, seed=2, rank=1, world_size=2)
    ds.set_epoch(1)
    return ds.attach(StatefulDataLoader(ds, batch_size=batch_size, num_workers=num_workers,
                                        timeout=TIMEOUT if num_workers else 0, **kwargs))


def _state_after(batches, num_workers, batch_size):
    loader = _stateful(num_workers, batch_size)
    it = iter(loader)
    before = [next(it).tolist() for _ in range(batches)]
    state = loader.state_dict()
    del it
    return before, state


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_stateful_dataloader_batching_samples_resumes_exactly(num_workers):
    full = [b.tolist() for b in _stateful(num_workers, 4)]
    before, state = _state_after(3, num_workers, 4)
    resumed = _stateful(num_workers, 4)
    resumed.load_state_dict(state)
    assert before + [b.tolist() for b in resumed] == full


@pytest.mark.parametrize("saved,loaded,words", [
    ((2, 4), (3, 4), "num_workers 2 then, 3 now"),
    ((2, 4), (1, 4), "num_workers 2 then, 1 now"),
    ((2, 4), (2, 8), "saved with batch_size=4, drop_last=False; loaded with batch_size=8")])
def test_a_stateful_state_into_another_loader_shape_is_refused_before_any_batch(saved, loaded,
                                                                               words):
    _, state = _state_after(2, *saved)
    resumed = _stateful(*loaded)
    resumed.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert words in refusal(lambda: iter(resumed))   # workers load states as they start



# -- a forgotten set_epoch -----------------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_second_pass_over_the_same_epoch_warns_once_naming_set_epoch(num_workers):
    ds = ShardedIterableDataset(40, batch_size=4)
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        timeout=TIMEOUT if num_workers else 0,
                        multiprocessing_context="fork" if num_workers else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        passes = [ids(loader) for _ in range(3)]
    assert passes[0] == passes[1] == passes[2]
    if num_workers == 0:   # a worker's warning goes to the worker's stderr
        repeated = [w for w in caught if "set_epoch" in str(w.message)]
        assert len(repeated) == 1 and "epoch 0 starts again" in str(repeated[0].message)
    assert ds._shared.warned == 1, "warned, once, in whichever process read"


class WorkerZeroStartsLast(IterableDataset):
    """``ds`` read by two workers, where worker 0 starts only after worker 1 has read its
    whole run: what a busy machine may do to the first pass."""

    def __init__(self, ds):
        self.ds, self.worker_one_done = ds, multiprocessing.get_context("fork").Event()

    def __iter__(self):
        if get_worker_info().id == 0 and not self.worker_one_done.wait(TIMEOUT):
            raise TimeoutError("worker 1 never finished its run")
        yield from self.ds
        if get_worker_info().id == 1:
            self.worker_one_done.set()


def test_a_worker_that_starts_after_the_other_read_its_run_is_not_a_second_pass():
    ds = ShardedIterableDataset(40, batch_size=4, strict=True)
    loader = DataLoader(WorkerZeroStartsLast(ds), batch_size=None, num_workers=2,
                        prefetch_factor=8, timeout=TIMEOUT, multiprocessing_context="fork")
    assert sorted(ids(loader)) == list(range(40))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_strict_refuses_a_second_pass_over_the_same_epoch(num_workers):
    ds = ShardedIterableDataset(40, batch_size=4, strict=True)
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        timeout=TIMEOUT if num_workers else 0,
                        multiprocessing_context="fork" if num_workers else None)
    ids(loader)
    assert "call ds.set_epoch(epoch)" in refusal(lambda: ids(loader), RuntimeError)
    ds.set_epoch(1)
    assert len(ids(loader)) == 40


def test_no_warning_when_each_epoch_is_set_a_pass_stops_early_or_nothing_is_shuffled():
    ds = ShardedIterableDataset(40, batch_size=4, strict=True)
    loader = DataLoader(ds, batch_size=None)
    next(iter(loader))                 # a peek at the first batch
    for epoch in range(3):
        ds.set_epoch(epoch)
        ids(loader)
    fixed = ShardedIterableDataset(40, batch_size=4, shuffle=False, strict=True)
    assert ids(DataLoader(fixed, batch_size=None)) == ids(DataLoader(fixed, batch_size=None))
