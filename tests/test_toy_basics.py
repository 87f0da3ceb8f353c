import pytest
from hypothesis import given
from hypothesis import strategies as st

from talk_helpers.lessons.datasets.basics import (
    BlockShardedIds,
    IterableIds,
    MapStyleIds,
    ModuloShardedIds,
    NaiveShardedIds,
    block_bounds,
)
from talk_helpers.lessons.trace import run_loader
from talk_helpers.widgets.dataloader_steps import render_step, replay


def test_unsharded_iterable_yields_every_sample_once_per_worker():
    run = run_loader(IterableIds(12), batch_size=3, num_workers=2)
    assert sorted(run.ids) == sorted(list(range(12)) * 2)
    assert [b.worker for b in run.batches] == [0, 1] * 4


@pytest.mark.parametrize("dataset", [ModuloShardedIds(13), BlockShardedIds(13)])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_sharded_iterables_yield_each_sample_exactly_once(dataset, num_workers):
    run = run_loader(dataset, batch_size=4, num_workers=num_workers)
    assert sorted(run.ids) == list(range(13))


def test_modulo_shard_gives_worker_w_the_ids_congruent_to_w():
    run = run_loader(ModuloShardedIds(12), batch_size=3, num_workers=2)
    assert {i % 2 for b in run.batches_of(1) for i in b.ids} == {1}


def test_naive_shard_crashes_without_workers():
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'num_workers'"):
        list(NaiveShardedIds(4))


def test_sharded_iterable_ends_with_one_partial_batch_per_worker():
    run = run_loader(ModuloShardedIds(20), batch_size=4, num_workers=2)
    assert run.sizes == [4, 4, 2, 2, 2, 2] or sorted(run.sizes) == [2, 2, 4, 4, 4, 4]


def test_map_style_records_the_index_batches_the_main_process_sent():
    run = run_loader(MapStyleIds(9), batch_size=3, num_workers=2)
    assert run.sends == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [b.worker for b in run.batches] == [0, 1, 0]


@given(st.integers(0, 200), st.integers(1, 9))
def test_blocks_cover_the_range_without_overlap(size, num_workers):
    bounds = [block_bounds(size, w, num_workers) for w in range(num_workers)]
    assert bounds[0][0] == 0 and bounds[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    lengths = [stop - start for start, stop in bounds]
    assert max(lengths) - min(lengths) <= 1


@pytest.mark.parametrize("dataset", [MapStyleIds(10), IterableIds(6), ModuloShardedIds(10)])
def test_replay_delivers_the_recorded_batches_and_ends(dataset):
    run = run_loader(dataset, batch_size=3, num_workers=2)
    steps = replay(run)
    assert [list(ids) for _, ids in steps[-1].delivered] == [list(b.ids) for b in run.batches]
    assert "epoch ends" in steps[-1].caption
    assert "training loop got" in render_step(steps, len(steps) - 1)


@given(size=st.integers(0, 40), workers=st.integers(1, 4))
def test_the_mystery_dataset_loses_exactly_the_ids_that_do_not_fill_a_worker(size, workers):
    from unittest import mock

    from talk_helpers.lessons.datasets import basics

    seen = []
    for w in range(workers):  # each worker's shard, as get_worker_info would report it
        with mock.patch.object(basics, "current_worker", return_value=(w, workers)):
            seen += list(basics._EvenBlockIds(size))
    assert sorted(seen) == list(range(size - size % workers))


def test_the_mystery_loader_misses_its_last_id_with_two_workers():
    from talk_helpers.checks import check_exactly_once
    from talk_helpers.lessons.datasets.basics import mystery_loader

    batches = list(mystery_loader(0, 1, 0))
    report = check_exactly_once(batches, expected=25)
    assert report.missing == [24] and report.duplicated_count == 0
    assert [len(b) for b in batches] == [4] * 6
