"""Two small rank functions: what a rank sees, and one collective that every rank must
join. The runtime's tests run them in real worlds; notebook 05 writes its own in an
``%%importable`` cell, where the learner can edit them."""

import torch
import torch.distributed as dist

from talk_helpers.runtime.devices import collective_device

__all__ = ["all_reduce_sum", "rank_and_world"]


def rank_and_world(rank: int, world_size: int) -> tuple[int, int]:
    """Return what this rank sees: ``(dist.get_rank(), dist.get_world_size())``."""
    return dist.get_rank(), dist.get_world_size()


def all_reduce_sum(rank: int, world_size: int, value: float | None = None) -> float:
    """All-reduce one number per rank (``rank + 1`` by default); every rank gets the sum."""
    t = torch.tensor([float(rank + 1 if value is None else value)], device=collective_device())
    dist.all_reduce(t)
    return t.item()
