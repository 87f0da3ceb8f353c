"""Tiny DDP training loops that run inside the ranks of ``run_world`` (notebook 06).

Each one trains a one-weight model with DistributedDataParallel on gloo over a sharded
iterable dataset and returns what the notebook shows: how many steps the rank took and
the sample ids it trained on. ``train_naive`` is the loop that hangs when ranks get
unequal batch counts; the others are its fixes (and one broken fix).
"""

import copy
import itertools
import os
import time
from datetime import timedelta

import torch
import torch._dynamo  # noqa: F401 - DDP imports it when it wraps a model (a second or more
import torch.distributed as dist  # under spawn): here it happens before the ranks synchronise
from torch.nn.parallel import DistributedDataParallel

from talk_helpers.lessons.datasets.ddp import make_fixed_count_loader, make_sharded_loader
from talk_helpers.runtime.in_rank import report_progress

STARTUP_TIMEOUT_S = 300

__all__ = [
    "train_naive",
    "train_fixed_steps",
    "train_with_join",
    "train_with_join_gradients",
    "train_with_join_and_logging",
    "train_with_join_throwing",
    "train_until_any_exhausted",
]


def _started(loader):
    """Start the loader's workers (take its first batch), then wait for every rank to get
    there, with a generous timeout of its own: worker start-up under spawn on a busy
    machine must not be mistaken for the hang the short collective timeout is there for."""
    batches = iter(loader)
    first = next(batches, None)
    dist.monitored_barrier(timeout=timedelta(seconds=STARTUP_TIMEOUT_S))
    return batches if first is None else itertools.chain([first], batches)


def _model() -> DistributedDataParallel:
    torch.manual_seed(0)
    return DistributedDataParallel(torch.nn.Linear(1, 1))


def _step(model, optimizer, batch) -> torch.Tensor:
    x = batch.float().unsqueeze(1) / 100
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()  # DDP all-reduces the gradients here: every rank must be there
    optimizer.step()
    return loss.detach()


def _loop(rank, world_size, batches):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, steps = [], 0
    for batch in batches:
        report_progress(f"step {steps + 1}")
        _step(model, optimizer, batch)
        seen.extend(batch.tolist())
        steps += 1
    return {"steps": steps, "ids": seen}


def train_naive(rank: int, world_size: int, loader_kwargs: dict, linger_s: float = 0.0) -> dict:
    """One epoch over the loader, as every tutorial writes it. ``linger_s``: after its
    last step the rank keeps working that long without a collective (saving a checkpoint,
    say) before it exits."""
    loader = _started(make_sharded_loader(rank, world_size, 0, keep_workers=True, **loader_kwargs))
    result = _loop(rank, world_size, loader)
    time.sleep(linger_s)
    return result


def train_fixed_steps(rank: int, world_size: int, loader_kwargs: dict, steps: int,
                      repeat: int | None = 1) -> dict:
    """Seed 001's fix: make every rank's stream long enough (``repeat`` passes over the
    loader, its ``dsrepeat``; None repeats forever: epochless training), then stop every
    rank after exactly ``steps`` batches (its ``nbatches``; webdataset's ``with_epoch``)."""
    batches = make_fixed_count_loader(rank, world_size, 0, steps=steps, repeat=repeat,
                                      keep_workers=True, **loader_kwargs)
    return _loop(rank, world_size, _started(batches))


def train_with_join(rank: int, world_size: int, loader_kwargs: dict) -> dict:
    """``model.join()``: a rank that runs out shadows the others' gradient all-reduces."""
    loader = _started(make_sharded_loader(rank, world_size, 0, keep_workers=True, **loader_kwargs))
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, steps = [], 0
    with model.join():
        for batch in loader:
            report_progress(f"step {steps + 1}")
            _step(model, optimizer, batch)
            seen.extend(batch.tolist())
            steps += 1
    weight = round(float(model.module.weight.detach()), 6)
    return {"steps": steps, "ids": seen, "weight": weight}


def train_with_join_gradients(rank: int, world_size: int, loader_kwargs: dict,
                              divide_by_initial_world_size: bool = True) -> dict:
    """``model.join()`` again, recording per step the weight gradient this rank's batch
    alone gives (a plain copy of the model) next to the one DDP applies (the all-reduced
    average). A rank that has run out shadows with zeros, and DDP still divides by the
    whole world, so a step that only some ranks take gets a smaller gradient; with
    ``divide_by_initial_world_size=False`` DDP divides by the ranks still training."""
    loader = _started(make_sharded_loader(rank, world_size, 0, keep_workers=True, **loader_kwargs))
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    with model.join(divide_by_initial_world_size=divide_by_initial_world_size):
        for batch in loader:
            report_progress(f"step {len(steps) + 1}")
            alone = copy.deepcopy(model.module)
            alone(batch.float().unsqueeze(1) / 100).pow(2).mean().backward()
            _step(model, optimizer, batch)
            steps.append((round(float(alone.weight.grad), 6),
                          round(float(model.module.weight.grad), 6)))
    return {"steps": len(steps), "grad_alone_vs_ddp": steps}


def train_with_join_and_logging(rank: int, world_size: int, loader_kwargs: dict) -> dict:
    """``model.join()`` plus one collective of your own per step (an all-reduced loss for
    logging): Join does not shadow it, so the loop fails again.

    The logging collective runs on its own process group, so the failure is a clean
    collective timeout on the rank that keeps training. On the default group it would
    meet the collectives of Join's hooks instead, and what gloo does then depends on
    timing (often a size mismatch that aborts the process with a C++ message on stderr,
    which is silenced here so that a notebook shows only the report)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    log_group = dist.new_group(backend="gloo")
    loader = _started(make_sharded_loader(rank, world_size, 0, keep_workers=True, **loader_kwargs))
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, steps = [], 0
    with model.join():
        for batch in loader:
            report_progress(f"step {steps + 1}")
            loss = _step(model, optimizer, batch)
            dist.all_reduce(loss, group=log_group)  # not a Joinable's collective
            seen.extend(batch.tolist())
            steps += 1
    return {"steps": steps, "ids": seen}


def train_with_join_throwing(rank: int, world_size: int, loader_kwargs: dict) -> dict:
    """``model.join(throw_on_early_termination=True)``: when the first rank runs out,
    every rank raises at its next step; catch it and stop (extra batches are skipped)."""
    loader = _started(make_sharded_loader(rank, world_size, 0, keep_workers=True, **loader_kwargs))
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, steps = [], 0
    try:
        with model.join(throw_on_early_termination=True):
            for batch in loader:
                report_progress(f"step {steps + 1}")
                loss = _step(model, optimizer, batch)
                dist.all_reduce(loss)
                seen.extend(batch.tolist())
                steps += 1
    except RuntimeError as exc:
        if "exhausted" not in str(exc):  # Join's own message; anything else is a real error
            raise
    return {"steps": steps, "ids": seen}


def train_until_any_exhausted(rank: int, world_size: int, loader_kwargs: dict) -> dict:
    """An all-reduced "exhausted" flag: before each step every rank says whether it still
    has a batch; all stop as soon as one rank has none (its extra batches are skipped)."""
    loader = _started(make_sharded_loader(rank, world_size, 0, keep_workers=True, **loader_kwargs))
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, steps = [], 0
    while True:
        batch = next(loader, None)
        exhausted = torch.tensor([1 if batch is None else 0])
        dist.all_reduce(exhausted, op=dist.ReduceOp.MAX)
        if exhausted.item():
            break
        report_progress(f"step {steps + 1}")
        _step(model, optimizer, batch)
        seen.extend(batch.tolist())
        steps += 1
    return {"steps": steps, "ids": seen}
