"""The id datasets the machinery uses, and the recorder of DataLoader runs: which worker
built which batch, what the main process sent, and what a dead worker said."""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from talk_helpers.lessons.datasets.basics import MapStyleIds, WorkerStreams
from talk_helpers.lessons.trace import run_loader, tag_workers
from talk_helpers.model.sharding import stream_ids
from talk_helpers.widgets.dataloader_steps import render_step, replay

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def test_every_worker_yields_its_own_stream():
    run = run_loader(WorkerStreams([range(12)] * 2), batch_size=3, num_workers=2)
    assert sorted(run.ids) == sorted(list(range(12)) * 2)
    assert [b.worker for b in run.batches] == [0, 1] * 4


def test_a_stream_per_worker_is_required():
    with pytest.raises(ValueError, match="holds 2 streams, one per worker, but the DataLoader "
                                         "runs 1 worker"):
        list(WorkerStreams([[0], [1]]))
    with pytest.raises(ValueError, match="one sequence of ids per worker"):
        WorkerStreams([])


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_a_modulo_rule_replayed_by_real_workers_yields_each_id_once(num_workers):
    streams = [stream_ids([1] * 13, 0, 1, w, num_workers, "modulo_samples")
               for w in range(num_workers)]
    run = run_loader(WorkerStreams(streams), batch_size=4, num_workers=num_workers)
    assert sorted(run.ids) == list(range(13))
    assert {i % num_workers for b in run.batches_of(num_workers - 1) for i in b.ids} == \
        {num_workers - 1}


def test_each_worker_ends_its_stream_with_its_own_partial_batch():
    run = run_loader(WorkerStreams([range(0, 20, 2), range(1, 20, 2)]), batch_size=4,
                     num_workers=2)
    assert run.sizes == [4, 4, 4, 4, 2, 2]


def test_map_style_records_the_index_batches_the_main_process_sent():
    run = run_loader(MapStyleIds(9), batch_size=3, num_workers=2)
    assert run.sends == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [b.worker for b in run.batches] == [0, 1, 0]
    assert run.kind == "map-style"


def test_the_main_process_is_tagged_minus_one():
    tagged = tag_workers(MapStyleIds(2))
    assert [tagged[i] for i in range(len(tagged))] == [{"id": 0, "worker": -1},
                                                        {"id": 1, "worker": -1}]
    assert list(tag_workers(WorkerStreams([[5]]))) == [{"id": 5, "worker": -1}]


@given(st.integers(0, 30), st.integers(1, 4))
def test_map_style_ids_are_their_own_index(size, index):
    dataset = MapStyleIds(size)
    assert len(dataset) == size and dataset[index] == index


@pytest.mark.parametrize("dataset", [MapStyleIds(10), WorkerStreams([range(6)] * 2)])
def test_replay_delivers_the_recorded_batches_and_ends(dataset):
    run = run_loader(dataset, batch_size=3, num_workers=2)
    steps = replay(run)
    assert [list(ids) for _, ids in steps[-1].delivered] == [list(b.ids) for b in run.batches]
    assert "epoch ends" in steps[-1].caption
    assert "training loop got" in render_step(steps, len(steps) - 1)


def test_a_class_from_a_notebook_main_is_reported_without_a_path_and_sent_to_importable():
    # A notebook kernel's main module has neither a file nor a spec, as `python -c` has.
    code = (
        "from torch.utils.data import DataLoader, IterableDataset\n"
        "from talk_helpers.lessons.trace import list_batches\n"
        "from talk_helpers.runtime.rank_entry import name_spawned_child_main\n"
        "name_spawned_child_main()\n"
        "class CellIds(IterableDataset):\n"
        "    def __iter__(self):\n"
        "        yield from range(4)\n"
        "try:\n"
        "    list_batches(DataLoader(CellIds(), batch_size=2, num_workers=1,\n"
        "                            multiprocessing_context='spawn'))\n"
        "except Exception as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == (
        "WorkerCrashed a DataLoader worker exited: AttributeError: Can't get attribute "
        "'CellIds' on the notebook's main module. `CellIds` was defined in an ordinary cell, "
        "which a worker started with spawn or forkserver cannot import: start that cell with "
        "%%importable"), done.stderr
    assert "/" not in done.stdout
