"""What notebook 06's DDP training loops call inside a rank, and that is not their lesson.

The loops (the one that hangs and its fixes) stand in the notebook's ``%%importable``
cells; they take ``make_loader(rank, world_size, epoch)`` and call :func:`epoch_batches`
(one epoch, started on every rank before the first step), :func:`tiny_ddp_model` (a seeded
one-weight DDP model and its optimiser, on the group's device), :func:`train_step` and
:func:`gradient_alone` (one batch's own gradient, beside the one DDP applies).
"""

import copy
import itertools
import pickle
from datetime import timedelta

import torch
import torch._dynamo  # noqa: F401 - DDP imports it when it wraps a model (a second or more
import torch.distributed as dist  # under spawn): here it happens before the ranks synchronise
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterableDataset

from talk_helpers.runtime.devices import collective_device

STARTUP_TIMEOUT_S = 300

__all__ = ["STARTUP_TIMEOUT_S", "epoch_batches", "gradient_alone", "tiny_ddp_model",
           "train_step", "wait_for_every_rank", "with_persistent_workers"]


def epoch_batches(make_loader, rank: int, world_size: int, epoch: int = 0):
    """The batches of ``make_loader(rank, world_size, epoch)``, as an iterator.

    Every rank takes its first batch, then waits for the others (:func:`wait_for_every_rank`):
    workers slow to start under spawn are no hang. In a warm world
    (:mod:`talk_helpers.runtime.warm`) a loader with workers is kept, with persistent workers,
    for the next call with the same factory and arguments, as a job keeps its loader.
    """
    if not callable(make_loader):
        raise TypeError("make_loader must be callable as make_loader(rank, world_size, epoch), "
                        f"got {make_loader!r}")
    loader = make_loader(rank, world_size, epoch)
    if isinstance(loader, DataLoader) and loader.num_workers > 0:
        from talk_helpers.runtime import warm  # a worker unpickling a dataset never needs it

        key = pickle.dumps((make_loader, rank, world_size, epoch))
        made = loader
        loader = warm.kept_loader(key, lambda: with_persistent_workers(made))
    batches = iter(loader)
    first = next(batches, None)
    wait_for_every_rank()
    return batches if first is None else itertools.chain([first], batches)


def wait_for_every_rank(timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Block until every rank of the world reaches this call, for at most ``timeout_s``.

    The barrier runs in a gloo group made for it, so that it has a timeout of its own (not
    the world's short collective timeout) and works in any job: ``monitored_barrier``
    exists only for gloo, and in an NCCL job the world's own group has no CPU backend. It
    names the ranks that never arrived. Every rank must call it, in the same order as its
    other collectives (``new_group`` is one).
    """
    wait = timedelta(seconds=timeout_s)
    group = dist.new_group(backend="gloo", timeout=wait)
    dist.monitored_barrier(group=group, timeout=wait, wait_all_ranks=True)


def with_persistent_workers(loader: DataLoader) -> DataLoader:
    """The same loader (dataset, batching, workers, collate function, start method) with
    ``persistent_workers=True``; a loader that has them, or no workers, as it is."""
    if loader.persistent_workers or loader.num_workers == 0:
        return loader
    options = dict(num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                   pin_memory=loader.pin_memory, timeout=loader.timeout,
                   worker_init_fn=loader.worker_init_fn,
                   multiprocessing_context=loader.multiprocessing_context,
                   generator=loader.generator, prefetch_factor=loader.prefetch_factor,
                   persistent_workers=True, in_order=loader.in_order)
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(loader.dataset, batch_size=loader.batch_size,
                          drop_last=loader.drop_last, **options)
    if loader.batch_sampler is None:
        return DataLoader(loader.dataset, batch_size=None, sampler=loader.sampler, **options)
    return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **options)


def tiny_ddp_model() -> tuple[DistributedDataParallel, torch.optim.Optimizer]:
    """A one-weight linear model, the same on every rank (seeded), in DDP on the group's
    device (:func:`~talk_helpers.runtime.devices.collective_device`); and its SGD."""
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1).to(collective_device()))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(model, optimizer, batch: torch.Tensor) -> torch.Tensor:
    """One step on a batch of ids; returns the loss. In DDP, ``loss.backward()`` all-reduces
    the gradients: every rank must take part."""
    loss = _loss(model, batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def gradient_alone(model: DistributedDataParallel, batch: torch.Tensor) -> float:
    """The weight gradient ``batch`` alone gives the model as it is now (a plain copy of
    the module, no DDP, no collective). Call it before :func:`train_step`."""
    alone = copy.deepcopy(model.module)
    _loss(alone, batch).backward()
    return round(float(alone.weight.grad), 6)


def _loss(model, batch: torch.Tensor) -> torch.Tensor:
    batch = batch.to(next(model.parameters()).device)
    return model(batch.float().unsqueeze(1) / 100).pow(2).mean()
