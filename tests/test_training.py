"""The machinery of notebook 06's training loops: a loop over ``epoch_batches`` hangs when
ranks get unequal batches, an all-reduced flag keeps them in step, Join shrinks a lone
step's gradient unless told otherwise, and a warm rank keeps a loader's workers."""

import os
from functools import partial

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

from talk_helpers.lessons.datasets.ddp import make_sharded_loader
from talk_helpers.lessons.training import (
    epoch_batches,
    gradient_alone,
    tiny_ddp_model,
    train_step,
)
from talk_helpers.model.simulate import simulate
from talk_helpers.runtime.in_rank import report_progress
from talk_helpers.runtime.world import run_world

pytestmark = [pytest.mark.distributed,
              pytest.mark.filterwarnings("ignore:This DataLoader will create")]

UNEVEN = partial(make_sharded_loader, shard_sizes=[5, 3, 3, 3], workers=2, batch_size=4)
# fork keeps these worlds fast; the start methods themselves are tested in test_distributed.
WORLD = dict(timeout_s=180, collective_timeout_s=60, start_method="fork")


def one_epoch(rank, world_size, make_loader):
    model, optimizer = tiny_ddp_model()
    steps = 0
    for batch in epoch_batches(make_loader, rank, world_size):
        steps += 1
        report_progress(f"step {steps}")
        train_step(model, optimizer, batch)
    return steps


def until_any_exhausted(rank, world_size, make_loader):
    model, optimizer = tiny_ddp_model()
    batches, steps = epoch_batches(make_loader, rank, world_size), 0
    while True:
        batch = next(batches, None)
        exhausted = torch.tensor([batch is None], dtype=torch.int64)
        dist.all_reduce(exhausted, op=dist.ReduceOp.MAX)
        if exhausted.item():
            return steps
        train_step(model, optimizer, batch)
        steps += 1


def joined(rank, world_size, make_loader, divide_by_initial_world_size=True):
    model, optimizer = tiny_ddp_model()
    grads = []
    with model.join(divide_by_initial_world_size=divide_by_initial_world_size):
        for batch in epoch_batches(make_loader, rank, world_size):
            alone = gradient_alone(model, batch)
            train_step(model, optimizer, batch)
            grads.append((alone, round(float(model.module.weight.grad), 6)))
    return {"grads": grads, "weight": round(float(model.module.weight), 6)}


def test_a_plain_loop_fails_at_the_step_only_the_longer_rank_takes():
    assert simulate([5, 3, 3, 3], nodes=2, workers=2, micro_batch_size=4).batches_per_rank \
        == [3, 2]
    report = run_world(one_epoch, 2, args=(UNEVEN,), **(WORLD | dict(collective_timeout_s=5)))
    assert not report.ok
    assert report.ranks[0].last_progress == "step 3"


def test_equal_shards_let_the_plain_loop_finish():
    equal = partial(make_sharded_loader, shard_sizes=[4] * 4, workers=2, batch_size=4)
    report = run_world(one_epoch, 2, args=(equal,), **WORLD)
    assert report.ok, report
    assert report.results == [2, 2]


def test_an_all_reduced_exhausted_flag_stops_every_rank_at_the_same_step():
    report = run_world(until_any_exhausted, 2, args=(UNEVEN,), **WORLD)
    assert report.ok, report
    assert report.results == [2, 2]


def test_join_step_taken_by_one_rank_gets_its_gradient_divided_by_the_world():
    report = run_world(joined, 2, args=(UNEVEN,), **WORLD)
    assert report.ok, report
    long, short = report.results
    assert (len(long["grads"]), len(short["grads"])) == (3, 2)
    assert long["weight"] == short["weight"]
    alone, applied = long["grads"][-1]
    assert applied == pytest.approx(alone / 2, abs=1e-6)


def test_join_dividing_by_the_ranks_still_training_keeps_the_lone_steps_full_gradient():
    report = run_world(joined, 2, args=(UNEVEN, False), **WORLD)
    assert report.ok, report
    alone, applied = report.results[0]["grads"][-1]
    assert applied == pytest.approx(alone, abs=1e-6)


class WorkerPids(IterableDataset):
    """Each worker yields its own pid once."""

    def __iter__(self):
        yield os.getpid()


def pid_loader(rank, world_size, epoch, persistent=True):
    return DataLoader(WorkerPids(), batch_size=None, num_workers=2,
                      persistent_workers=persistent)


def worker_pids(rank, world_size, make_loader):
    return sorted(epoch_batches(make_loader, rank, world_size))


@pytest.mark.parametrize("persistent", [True, False])
def test_a_warm_rank_keeps_a_loaders_workers_for_the_next_call(persistent):
    from talk_helpers.runtime.world import shutdown_warm_worlds

    make = partial(pid_loader, persistent=persistent)
    try:
        first = run_world(worker_pids, 2, args=(make,), reuse=True, **WORLD)
        second = run_world(worker_pids, 2, args=(make,), reuse=True, **WORLD)
    finally:
        shutdown_warm_worlds()
    assert first.ok and second.ok, (first, second)
    assert first.results == second.results
    assert all(len(pids) == 2 for pids in first.results)


@pytest.mark.parametrize("options", [dict(batch_size=3, drop_last=True), dict(batch_size=None),
                                     dict(batch_size=4)])
def test_the_persistent_twin_of_a_loader_yields_the_same_batches(options):
    from torch.utils.data import TensorDataset

    from talk_helpers.lessons.training import with_persistent_workers

    class Ids(IterableDataset):
        def __iter__(self):
            yield from range(10)

    for dataset in (TensorDataset(torch.arange(10)), Ids()):
        loader = DataLoader(dataset, num_workers=1, multiprocessing_context="fork", **options)
        twin = with_persistent_workers(loader)
        assert twin.persistent_workers and twin.dataset is loader.dataset
        assert [str(b) for b in twin] == [str(b) for b in loader]


def test_a_loader_factory_that_is_not_callable_is_refused_by_name():
    with pytest.raises(TypeError, match="make_loader must be callable"):
        epoch_batches([1, 2], 0, 1)


def broadcasts_per_forward(rank, world_size):
    """Which forwards of a DDP model with buffers start with the buffers' broadcast: a plain
    step, a step under no_sync(), an evaluation under no_grad(), in a fixed order."""
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.BatchNorm1d(1)))
    calls = []
    sync = model._sync_buffers
    model._sync_buffers = lambda: (calls.append(1), sync())[1]
    x = torch.arange(4, dtype=torch.float32).unsqueeze(1)
    seen = []

    def forward(backward=True):
        before = len(calls)
        out = model(x).pow(2).mean()
        if backward:
            out.backward()
        seen.append(len(calls) - before)

    forward()
    forward()
    with model.no_sync():
        forward()
    forward()                      # follows a forward under no_sync
    with torch.no_grad():
        forward(backward=False)
    forward()                      # follows a forward under no_grad
    return seen


def test_ddp_broadcasts_buffers_only_after_a_synchronised_forward():
    seen = run_world(broadcasts_per_forward, 2, **WORLD).results
    assert seen == [[1, 1, 1, 0, 1, 0]] * 2
