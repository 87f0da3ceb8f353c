"""Uneven shards → unequal batches per rank → a DDP training loop that cannot finish.

Run it with torchrun (any number of processes ≥ 2, on one or more machines)::

    torchrun --nproc-per-node 2 -m talk_helpers.demos.hang
    torchrun --nproc-per-node 2 -m talk_helpers.demos.hang --timeout 5
    torchrun --nproc-per-node 2 -m talk_helpers.demos.hang --backend nccl   # one GPU per rank

Every rank reads the same number of samples, but from shards of different sizes, each
shard read whole by one DataLoader worker (as Hugging Face iterable datasets assign
them). Each worker ends its last shard with a partial batch, so ranks make a different
number of batches. A rank that runs out leaves the loop and joins the end-of-epoch
all-reduce of the loss, while the others are still all-reducing gradients in DDP's
backward: the collectives no longer match, and the ranks wait until the collective timeout
(``--timeout``) ends the wait with an error. Each rank prints what happened to it and the
script exits with a non-zero code. The fixed version is ``talk_helpers.demos.hang_fixed``.

``--backend nccl`` runs every rank on the GPU its ``LOCAL_RANK`` names, with its tensors
there (``collective_device``). NCCL's watchdog would tear a rank down at the timeout; the
script sets ``TORCH_NCCL_BLOCKING_WAIT=1`` (unless it is set already) so that the timeout
raises in the loop, as gloo's does, and each rank can say where it was.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch._dynamo  # noqa: F401 - see below
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.ddp import make_sharded_loader
from talk_helpers.model.sharding import stream_ids
from talk_helpers.runtime.devices import collective_device

# DistributedDataParallel imports torch._dynamo when the first model is wrapped, which
# takes seconds. Importing it here, once, means ranks forked from a notebook kernel
# (run_world under fork) inherit it and wrap their model at once.

MICRO_BATCH = 4
WORKERS = 2
BACKENDS = ("gloo", "nccl")
SHARD_PATTERN = (4, 6, 8, 6)  # every rank gets 12 samples when world size is 2


def shard_sizes(world_size: int) -> list[int]:
    """Shard sizes for ``world_size`` ranks: the pattern repeated, two shards per rank."""
    repeats = -(-world_size // 2)
    return list(SHARD_PATTERN) * repeats


def expected_batches(sizes: list[int], rank: int, world_size: int) -> int:
    """Batches rank ``rank`` makes: each worker batches its own shards (drop_last=False)."""
    return sum(-(-len(stream_ids(sizes, rank, world_size, w, WORKERS)) // MICRO_BATCH)
               for w in range(WORKERS))


def make_loader(rank: int, world_size: int) -> DataLoader:
    """Whole shards per rank, then per worker, round robin, as HF iterable datasets do."""
    return make_sharded_loader(rank, world_size, 0, shard_sizes=shard_sizes(world_size),
                               workers=WORKERS, batch_size=MICRO_BATCH)


def make_model(device: torch.device | None = None) -> nn.Module:
    """A seeded one-weight model in DDP, on ``device`` (default: the group's, see
    :func:`~talk_helpers.runtime.devices.collective_device`)."""
    torch.manual_seed(0)
    device = collective_device() if device is None else device
    return DistributedDataParallel(nn.Linear(1, 1).to(device))


def train_step(model: nn.Module, optimiser, ids: torch.Tensor) -> float:
    x = ids.to(next(model.parameters()).device).float().unsqueeze(1) / 10
    loss = nn.functional.mse_loss(model(x), 2 * x)
    optimiser.zero_grad()
    loss.backward()  # DDP all-reduces the gradients here: every rank must take part
    optimiser.step()
    return loss.item()


def world_from_env() -> tuple[int, int]:
    """RANK and WORLD_SIZE as torchrun sets them, with a clear error when they are not."""
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
               if v not in os.environ]
    if missing:
        sys.exit(f"{', '.join(missing)} not set: start this with "
                 f"torchrun --nproc-per-node 2 -m {__spec__.name if __spec__ else __name__}")
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def parse_args(argv=None, description: str = __doc__,
               fixes: tuple = ()) -> argparse.Namespace:
    """The demos' options; ``fixes``: the ways the fixed demo keeps the ranks in step."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="collective timeout in seconds (default 10)")
    if fixes:
        parser.add_argument("--fix", choices=fixes, default=fixes[0],
                            help=f"how the ranks are kept in step (default: {fixes[0]})")
    parser.add_argument("--backend", choices=BACKENDS, default="gloo",
                        help="gloo (CPUs, the default) or nccl (the GPU LOCAL_RANK names)")
    return parser.parse_args(argv)


def describe(exc: BaseException) -> str:
    """``Type: first line`` of an exception, with gloo's source path and ports masked."""
    from talk_helpers.runtime.report import mask_volatile

    lines = str(exc).strip().splitlines()
    return mask_volatile(f"{type(exc).__name__}: {lines[0] if lines else ''}")


def say(rank: int, text: str) -> None:
    print(f"[rank {rank}] {text}", flush=True)


def start_watchdog(rank: int, seconds: float) -> None:
    """Last resort: if the rank is still alive after ``seconds``, say so and exit."""
    def fire():
        say(rank, f"still stuck after {seconds:.0f} s: giving up")
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


class CollectiveFailed(RuntimeError):
    """A collective of the training loop failed; the message says where and why."""


def train_epoch(rank: int, world_size: int) -> int:
    """One epoch of the DDP loop on this rank's batches; return the number of steps.

    Needs an initialised process group (torchrun, or
    ``talk_helpers.runtime.world.run_world(train_epoch, 2)`` from a notebook). With unequal
    batches per rank it raises :class:`CollectiveFailed` at the collective timeout.
    """
    from talk_helpers.runtime.in_rank import report_progress

    torch.set_num_threads(1)
    model = make_model()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    step, total, started = 0, 0.0, time.monotonic()
    where = "before the first step"
    try:
        for ids in make_loader(rank, world_size):
            step += 1
            where = f"in step {step} (DDP's gradient all-reduce)"
            report_progress(f"step {step}")
            total += train_step(model, optimiser, ids)
        where = f"in the end-of-epoch all-reduce of the loss, after {step} steps"
        report_progress(f"out of data after {step} steps")
        dist.all_reduce(torch.tensor([total], device=collective_device()))
        where = f"in the barrier after the epoch, after {step} steps"
        dist.barrier()
    except Exception as exc:  # a collective timeout or mismatch
        raise CollectiveFailed(f"{where}: {describe(exc)} "
                               f"(after {time.monotonic() - started:.1f} s)") from None
    return step


def join_world(backend: str, timeout_s: float) -> None:
    """``init_process_group`` for ``backend``: under NCCL on the GPU ``LOCAL_RANK`` names,
    bound to it (``device_id``), with NCCL's timeout raising in the waiting call."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    timeout = timedelta(seconds=timeout_s)
    if backend == "gloo":
        dist.init_process_group("gloo", timeout=timeout)
        return
    if not torch.cuda.is_available():
        sys.exit("--backend nccl needs a GPU: torch.cuda.is_available() is False here")
    gpu = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(gpu)
    os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
    dist.init_process_group("nccl", timeout=timeout, device_id=gpu)


def start_demo(timeout_s: float, setting: str,
               backend: str = "gloo") -> tuple[int, int, list[int]]:
    """Join torchrun's world, arm the watchdog, and have rank 0 announce the plan.

    Returns (rank, world_size, batches planned per rank)."""
    rank, world_size = world_from_env()
    join_world(backend, timeout_s)
    start_watchdog(rank, 3 * timeout_s + 10)
    sizes = shard_sizes(world_size)
    planned = [expected_batches(sizes, r, world_size) for r in range(world_size)]
    if rank == 0:
        say(rank, f"shards {sizes}, {WORKERS} workers per rank, {setting}, {backend}")
        say(rank, "batches per rank: " + ", ".join(f"rank {r}: {n}"
                                                   for r, n in enumerate(planned)))
    return rank, world_size, planned


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world_size, planned = start_demo(args.timeout, f"micro-batch {MICRO_BATCH}",
                                           args.backend)
    try:
        steps = train_epoch(rank, world_size)
    except CollectiveFailed as exc:
        say(rank, f"FAILED {exc}")
        say(rank, "the ranks made different numbers of batches "
                  f"({', '.join(map(str, planned))}), so their collectives no longer match")
        os._exit(1)  # do not wait for peers that will never answer
    say(rank, f"finished {steps} steps")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
