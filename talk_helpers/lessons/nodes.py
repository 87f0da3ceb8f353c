"""Ranks of one machine that stand for several nodes: what a launcher tells each rank.

A world of ``world_size`` ranks on this machine stands for ``world_size / ranks_per_node``
nodes. :func:`on_nodes` gives each rank the variables torchrun sets on a node of
``ranks_per_node`` ranks (``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and ``GROUP_RANK``, the
node's index), calls the lesson's function, which reads them as it would on a cluster, and
puts the rank's own values back afterwards (a warm rank serves later cells too).
"""

from __future__ import annotations

from talk_helpers.arguments import require_int
from talk_helpers.environment import variables_set

__all__ = ["LAUNCHER_VARIABLES", "on_nodes"]

LAUNCHER_VARIABLES = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def on_nodes(ranks_per_node: int, fn, rank: int, world_size: int, *args):
    """``fn(rank, world_size, *args)`` with the launcher's variables of a node of
    ``ranks_per_node`` ranks, ranks numbered node by node. Use it as
    ``run_world(functools.partial(on_nodes, 2, fn), 4)``."""
    require_int("ranks_per_node", ranks_per_node, minimum=1)
    if world_size % ranks_per_node:
        raise ValueError(f"world_size {world_size} is not a whole number of nodes of "
                         f"ranks_per_node={ranks_per_node} ranks")
    if not callable(fn):
        raise TypeError(f"fn must be callable as fn(rank, world_size, ...), got {fn!r}")
    node = dict(zip(LAUNCHER_VARIABLES, (str(rank % ranks_per_node), str(ranks_per_node),
                                         str(rank // ranks_per_node)), strict=True))
    with variables_set(node):
        return fn(rank, world_size, *args)
