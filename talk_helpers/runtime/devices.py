"""Where a collective wants its tensors: the device of the process group it runs in.

A gloo group takes CPU tensors. A group made with ``"nccl"`` has no CPU backend at all:
``dist.all_reduce(torch.ones(1))`` in it raises ``No backend type associated with device
type cpu`` (``Backend.default_device_backend_map`` in ``torch/distributed/distributed_c10d.py``
maps ``cpu`` to gloo and ``cuda`` to nccl; a group has only the backends it was made with).
Every collective a reader may copy therefore builds its tensors with
``device=collective_device(group)``: ``cpu`` under gloo, this rank's GPU under NCCL.

On a machine without a GPU the NCCL case can still be shown: a group made with
``"cuda:gloo"`` has a CUDA backend and no CPU one, and fails the same way.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["collective_device", "group_has_cpu_backend"]

# The backend names a group can be made with, and the device type each one serves
# when named alone (as in ``init_process_group("nccl")``).
_DEVICE_OF_BACKEND = {"gloo": "cpu", "mpi": "cpu", "nccl": "cuda", "xccl": "xpu"}


def group_has_cpu_backend(group=None) -> bool:
    """True when collectives in ``group`` (default: the whole world) accept CPU tensors."""
    return "cpu" in _device_types(group)


def collective_device(group=None) -> torch.device:
    """The device to put a collective's tensors on in ``group`` (default: the whole world).

    ``cpu`` when the group has a CPU backend (gloo, or ``"cpu:gloo,cuda:nccl"``); else the
    group's accelerator, at this process's current device (``torch.cuda.set_device``,
    which a GPU job calls with its ``LOCAL_RANK``).
    """
    types = _device_types(group)
    if "cpu" in types:
        return torch.device("cpu")
    kind = types[0]
    accelerator = getattr(torch, kind, None)
    if accelerator is not None and accelerator.is_available():
        return torch.device(kind, accelerator.current_device())
    return torch.device(kind)


def _device_types(group) -> list[str]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("collective_device needs a process group: call "
                           "torch.distributed.init_process_group() first")
    backend = str(dist.get_backend(group))
    if ":" not in backend:
        if backend not in _DEVICE_OF_BACKEND:
            raise ValueError(f"unknown backend {backend!r}: expected one of "
                             f"{', '.join(_DEVICE_OF_BACKEND)} or 'device:backend' pairs")
        return [_DEVICE_OF_BACKEND[backend]]
    # "cpu:gloo,cuda:nccl" or "cuda:gloo": the device types named before each backend.
    return [pair.split(":", 1)[0].strip() for pair in backend.split(",")]
