"""Small rank functions for the tests of real worlds: they fail, hang or report on purpose.

Module-level, so that ranks started with spawn or forkserver can import them (pytest puts
this folder on ``sys.path``, and a spawned rank receives the parent's ``sys.path``).
"""

import os
import time
from unittest import mock

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from talk_helpers.runtime.in_rank import report_progress


def fail_on_rank(rank: int, world_size: int, bad_rank: int = 0,
                 message: str = "failed on purpose") -> int:
    """Raise ValueError(message) on ``bad_rank``; the other ranks wait in a barrier."""
    report_progress("before the barrier")
    if rank == bad_rank:
        raise ValueError(message)
    dist.barrier()
    return rank


def hang_on_rank(rank: int, world_size: int, stuck_rank: int = 0, steps: int = 3,
                 sleep_s: float = 3600.0) -> int:
    """Every rank all-reduces ``steps`` times, but ``stuck_rank`` sleeps before the last one."""
    for step in range(steps):
        report_progress(f"step {step}")
        if rank == stuck_rank and step == steps - 1:
            time.sleep(sleep_s)
        dist.all_reduce(torch.ones(1))
    return rank


def hang_with_workers(rank: int, world_size: int, num_workers: int = 2,
                      sleep_s: float = 3600.0) -> int:
    """Start a DataLoader with workers, take one batch, then sleep with the workers alive."""
    from torch.utils.data import DataLoader

    loader = DataLoader(list(range(64)), batch_size=4, num_workers=num_workers)
    it = iter(loader)
    next(it)
    report_progress(f"{num_workers} workers started")
    time.sleep(sleep_s)
    return rank


def rank_env(rank: int, world_size: int) -> dict[str, str]:
    """The torchrun-style variables this rank sees."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT")
    return {name: os.environ.get(name, "") for name in names}


def torch_draws(rank: int, world_size: int, n: int = 3, seed: int | None = None) -> list[float]:
    """``n`` draws from this rank's global torch RNG, seeded with ``seed`` if given."""
    if seed is not None:
        torch.manual_seed(seed)
    return torch.rand(n).tolist()


def process_id(rank: int, world_size: int) -> int:
    """This rank's process id (for tests of warm worlds; never shown in a notebook)."""
    return os.getpid()


def worker_start(rank: int, world_size: int) -> dict:
    """How this rank's DataLoader workers would start: method and forkserver preload."""
    from multiprocessing import forkserver

    method = mp.get_start_method()
    preload = forkserver._forkserver._preload_modules if method == "forkserver" else None
    return {"start_method": method, "forkserver_preload": preload}


def worker_main_module(batch) -> str:
    """A collate function that names the main module of the worker running it."""
    import sys

    return sys.modules["__main__"].__spec__.name


def is_imported(name: str) -> bool:
    """Whether module ``name`` is imported in this process (e.g. preloaded by a forkserver)."""
    import sys

    return name in sys.modules


def when_new_group_is_made_and_left(rank: int, world_size: int,
                                    slow_s: float = 1.0) -> tuple[float, float]:
    """Make a gloo group, rank 0 taking ``slow_s`` longer to make its side of it; return
    when this rank had made the group and when its new_group returned (``time.time()``)."""
    from torch.distributed import distributed_c10d

    make, made = distributed_c10d._new_process_group_helper, []

    def slow_on_rank_0(*args, **kwargs):
        group = make(*args, **kwargs)
        if rank == 0:
            time.sleep(slow_s)
        made.append(time.time())
        return group

    with mock.patch.object(distributed_c10d, "_new_process_group_helper", slow_on_rank_0):
        dist.new_group(backend="gloo")
    return made[0], time.time()


def collectives_by_group_device(rank: int, world_size: int) -> dict:
    """Where collective_device puts tensors in the world's gloo group and in a group made
    like an NCCL one (``"cuda:gloo"``: no CPU backend), and what a CPU all-reduce does there."""
    from talk_helpers.runtime.devices import collective_device, group_has_cpu_backend

    world_total = torch.ones(1, device=collective_device())
    dist.all_reduce(world_total)
    gpu_like = dist.new_group(backend="cuda:gloo")
    try:
        dist.all_reduce(torch.ones(1), group=gpu_like)
        cpu_in_gpu_like = "no error"
    except RuntimeError as error:
        cpu_in_gpu_like = str(error)
    return {"world": str(collective_device()), "world_total": world_total.item(),
            "world_has_cpu": group_has_cpu_backend(),
            "gpu_like": collective_device(gpu_like).type,
            "gpu_like_has_cpu": group_has_cpu_backend(gpu_like),
            "cpu_in_gpu_like": cpu_in_gpu_like}
