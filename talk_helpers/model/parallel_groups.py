"""Which ranks form the tensor- (TP), data- (DP) and pipeline-parallel (PP) groups.

Both nanotron (``ParallelContext._init_parallel_groups``) and Megatron-LM
(``parallel_state.initialize_model_parallel``, order "tp-...-dp-pp") number the ranks so
that the TP coordinate varies fastest and the PP coordinate slowest: the world is
``arange(world).reshape(pp, dp, tp)``. :func:`layout` is that rule as a pure function;
:func:`create_groups` builds the matching gloo subgroups inside a rank (nanotron's own
ParallelContext insists on NCCL, so a CPU world has to build them itself).
"""

from dataclasses import dataclass

import numpy as np

from talk_helpers.arguments import check_choice

__all__ = ["Coords", "GroupLayout", "RankGroups", "create_groups", "layout"]


@dataclass(frozen=True)
class Coords:
    """Where one rank sits in the 3D grid."""

    rank: int
    tp_rank: int
    dp_rank: int
    pp_rank: int

    def __repr__(self) -> str:
        return f"rank {self.rank}: tp={self.tp_rank} dp={self.dp_rank} pp={self.pp_rank}"


@dataclass(frozen=True)
class GroupLayout:
    """Every TP, DP and PP group of a world, as tuples of global ranks."""

    world_size: int
    tp: int
    dp: int
    pp: int
    tp_groups: tuple[tuple[int, ...], ...]
    dp_groups: tuple[tuple[int, ...], ...]
    pp_groups: tuple[tuple[int, ...], ...]

    def coords(self, rank: int) -> Coords:
        """The (tp, dp, pp) coordinates of a global rank."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1}, got {rank!r}")
        pp_rank, rest = divmod(rank, self.tp * self.dp)
        dp_rank, tp_rank = divmod(rest, self.tp)
        return Coords(rank, tp_rank, dp_rank, pp_rank)

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The ``kind`` ("tp", "dp" or "pp") group that contains ``rank``."""
        groups = {"tp": self.tp_groups, "dp": self.dp_groups, "pp": self.pp_groups}
        check_choice("kind", kind, tuple(groups))
        return next(g for g in groups[kind] if rank in g)

    def is_first_stage(self, rank: int) -> bool:
        return self.coords(rank).pp_rank == 0

    def is_last_stage(self, rank: int) -> bool:
        return self.coords(rank).pp_rank == self.pp - 1

    def __repr__(self) -> str:
        def show(groups):
            return " ".join("{" + ",".join(map(str, g)) + "}" for g in groups)

        return (f"world={self.world_size} (tp={self.tp} × dp={self.dp} × pp={self.pp}), "
                f"TP fastest, PP slowest\n"
                f"  TP groups: {show(self.tp_groups)}\n"
                f"  DP groups: {show(self.dp_groups)}\n"
                f"  PP groups: {show(self.pp_groups)}")


def layout(world_size: int, tp: int, dp: int, pp: int) -> GroupLayout:
    """The TP/DP/PP groups of a world with TP fastest and PP slowest (pure function)."""
    for name, value in (("world_size", world_size), ("tp", tp), ("dp", dp), ("pp", pp)):
        if not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if tp * dp * pp != world_size:
        raise ValueError(f"tp*dp*pp must equal world_size: {tp}*{dp}*{pp} = {tp * dp * pp} "
                         f"!= {world_size}")
    grid = np.arange(world_size).reshape(pp, dp, tp)

    def rows(array, size):
        return tuple(tuple(int(r) for r in row) for row in array.reshape(-1, size))

    return GroupLayout(
        world_size, tp, dp, pp,
        tp_groups=rows(grid, tp),
        dp_groups=rows(grid.transpose(0, 2, 1), dp),
        pp_groups=rows(grid.transpose(1, 2, 0), pp),
    )


@dataclass
class RankGroups:
    """What a rank needs: its coordinates and its own three process groups."""

    layout: GroupLayout
    coords: Coords
    tp_group: object
    dp_group: object
    pp_group: object

    @property
    def tp_src_rank(self) -> int:
        """Global rank of TP rank 0 in this rank's TP group (Megatron's broadcast source)."""
        return self.layout.group_of(self.coords.rank, "tp")[0]

    @property
    def is_first_stage(self) -> bool:
        return self.coords.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.coords.pp_rank == self.layout.pp - 1


def create_groups(tp: int, dp: int, pp: int, backend: str = "gloo") -> RankGroups:
    """Inside a rank of an initialised world: create every TP, DP and PP group.

    ``dist.new_group`` is collective over the whole world, so every rank creates every
    group in the same order and keeps the three that contain it.
    """
    import torch.distributed as dist

    rank, world_size = dist.get_rank(), dist.get_world_size()
    grid = layout(world_size, tp, dp, pp)
    mine = {}
    for kind, groups in (("tp", grid.tp_groups), ("dp", grid.dp_groups),
                         ("pp", grid.pp_groups)):
        for ranks in groups:
            handle = dist.new_group(list(ranks), backend=backend)
            if rank in ranks:
                mine[kind] = handle
    return RankGroups(grid, grid.coords(rank), mine["tp"], mine["dp"], mine["pp"])
