"""The data of ``talk_helpers.demos.hang``, with the ranks kept in step: the loop finishes.

Run it with torchrun (any number of processes, on one or more machines)::

    torchrun --nproc-per-node 2 -m talk_helpers.demos.hang_fixed
    torchrun --nproc-per-node 2 -m talk_helpers.demos.hang_fixed --fix join
    torchrun --nproc-per-node 2 -m talk_helpers.demos.hang_fixed --backend nccl  # GPUs

The ranks still make different numbers of batches. Two ways to keep them in step:

* ``--fix flag`` (default): before each step every rank all-reduces "I still have a
  batch" with MIN; as soon as one rank is out of data, every rank stops. The extra
  batches of the longer ranks are left for the next epoch's shuffle (here: dropped). The
  flag lives on the group's device (``collective_device``): the CPU under gloo, the rank's
  GPU under NCCL.
* ``--fix join``: ``torch.distributed.algorithms.join.Join`` with the DDP model; a rank
  that runs out shadows the others' gradient all-reduces until they finish too. It only
  covers DDP's own collectives: another collective inside the loop would hang again.

Each rank prints how many steps it trained; the script exits with code 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join

from talk_helpers.demos import hang
from talk_helpers.demos.hang import (
    CollectiveFailed,
    describe,
    make_loader,
    make_model,
    say,
    start_demo,
    train_step,
)
from talk_helpers.runtime.devices import collective_device
from talk_helpers.runtime.in_rank import report_progress

FIXES = ("flag", "join")


def parse_args(argv=None) -> argparse.Namespace:
    return hang.parse_args(argv, __doc__, FIXES)


def train_with_flag(model, optimiser, loader) -> tuple[int, float, int]:
    """Stop every rank as soon as one is out of data; return (steps, loss, left over)."""
    steps, total = 0, 0.0
    device = collective_device()
    iterator = iter(loader)
    while True:
        ids = next(iterator, None)
        has_batch = torch.tensor([0 if ids is None else 1], device=device)
        dist.all_reduce(has_batch, op=dist.ReduceOp.MIN)
        if has_batch.item() == 0:
            break
        steps += 1
        report_progress(f"step {steps}")
        total += train_step(model, optimiser, ids)
    left_over = 0 if ids is None else 1 + sum(1 for _ in iterator)
    return steps, total, left_over


def train_with_join(model, optimiser, loader) -> tuple[int, float, int]:
    """Let a finished rank shadow DDP's all-reduces until every rank is done."""
    steps, total = 0, 0.0
    with Join([model]):
        for ids in loader:
            steps += 1
            report_progress(f"step {steps}")
            total += train_step(model, optimiser, ids)
    return steps, total, 0


def train_epoch(rank: int, world_size: int, fix: str = "flag") -> dict:
    """One epoch of the DDP loop kept in step by ``fix``; needs a process group (torchrun
    or ``talk_helpers.runtime.world.run_world``). Returns steps, batches left unread and the
    epoch loss summed over ranks."""
    if fix not in FIXES:
        raise ValueError(f"fix must be one of {', '.join(FIXES)}, got {fix!r}")
    torch.set_num_threads(1)
    model = make_model()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    train = train_with_flag if fix == "flag" else train_with_join
    started = time.monotonic()
    try:
        steps, total, left_over = train(model, optimiser, make_loader(rank, world_size))
        loss = torch.tensor([total], device=collective_device())
        dist.all_reduce(loss)
        dist.barrier()
    except Exception as exc:
        raise CollectiveFailed(f"{describe(exc)} (after {time.monotonic() - started:.1f} s)"
                               ) from None
    return {"steps": steps, "left_over": left_over, "loss": round(loss.item(), 3)}


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world_size, _ = start_demo(args.timeout, f"fix: {args.fix}", args.backend)
    try:
        out = train_epoch(rank, world_size, args.fix)
    except CollectiveFailed as exc:
        say(rank, f"FAILED {exc}")
        os._exit(1)
    note = f", {out['left_over']} batch(es) left unread" if out["left_over"] else ""
    say(rank, f"finished: {out['steps']} steps{note}; epoch loss summed over ranks "
              f"{out['loss']:.3f}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
