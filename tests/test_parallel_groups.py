"""The TP/DP/PP group layout both nanotron and Megatron-LM use: TP fastest, PP slowest."""

import itertools

import pytest

from talk_helpers.model.parallel_groups import layout


def test_world_of_eight_matches_the_frameworks_layout():
    grid = layout(8, tp=2, dp=2, pp=2)
    assert grid.tp_groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert grid.dp_groups == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert grid.pp_groups == ((0, 4), (1, 5), (2, 6), (3, 7))


@pytest.mark.parametrize("tp,dp,pp", list(itertools.product([1, 2, 3], [1, 2, 4], [1, 2, 3])))
def test_every_kind_of_group_partitions_the_world(tp, dp, pp):
    world = tp * dp * pp
    grid = layout(world, tp, dp, pp)
    for groups, size in ((grid.tp_groups, tp), (grid.dp_groups, dp), (grid.pp_groups, pp)):
        assert sorted(r for g in groups for r in g) == list(range(world))
        assert all(len(g) == size for g in groups)
    for rank in range(world):
        c = grid.coords(rank)
        assert rank == c.pp_rank * tp * dp + c.dp_rank * tp + c.tp_rank
        assert grid.group_of(rank, "tp").index(rank) == c.tp_rank
        assert grid.group_of(rank, "dp").index(rank) == c.dp_rank
        assert grid.group_of(rank, "pp").index(rank) == c.pp_rank


def test_a_group_shares_all_coordinates_but_its_own():
    grid = layout(24, tp=2, dp=3, pp=4)
    for g in grid.dp_groups:
        coords = [grid.coords(r) for r in g]
        assert len({(c.tp_rank, c.pp_rank) for c in coords}) == 1


@pytest.mark.parametrize("args,match", [((8, 2, 2, 3), "tp\\*dp\\*pp"), ((8, 0, 2, 4), "tp"),
                                        ((8, 2, 2.0, 2), "dp")])
def test_bad_sizes_are_rejected_with_the_argument_named(args, match):
    with pytest.raises(ValueError, match=match):
        layout(*args)


def test_coords_reject_a_rank_outside_the_world():
    with pytest.raises(ValueError, match="rank must be in 0..7"):
        layout(8, 2, 2, 2).coords(8)
