"""Notebook 03's data, its buffer-shuffle model and its helpers behave as the notebook
says."""

import numpy as np
import pytest
from torch.utils.data import DataLoader

from talk_helpers.checks.mixing import shuffle_report
from talk_helpers.lessons.datasets.shuffling import (
    BufferShuffled,
    collect,
    labels_of,
    rebatched_orders,
    shard_ranges,
    simulate_loader,
)

LABELS = labels_of()
CTX = "fork"     # fast to start; spawn is covered by running the notebooks


def loader(dataset, **kwargs):
    kwargs.setdefault("batch_size", 20)
    kwargs.setdefault("num_workers", 2)
    return DataLoader(dataset, multiprocessing_context=CTX, **kwargs)


def test_data_is_stored_sorted_by_class_in_contiguous_shards():
    assert list(np.bincount(LABELS)) == [60] * 10
    assert (np.diff(LABELS) >= 0).all()
    assert [len(r) for r in shard_ranges(600, 4)] == [150] * 4


@pytest.mark.parametrize("worker_batch", [None, 20])
def test_simulation_matches_a_real_loader(worker_batch):
    dataset = BufferShuffled(buffer_size=32, num_shards=8, worker_batch=worker_batch)
    real, _ = collect(loader(dataset, batch_size=None if worker_batch else 20))
    simulated = simulate_loader(BufferShuffled(buffer_size=32, num_shards=8), 2, 20)
    assert len(real) == len(simulated)
    assert all((a == b).all() for a, b in zip(real, simulated, strict=True))


def test_rebatching_across_workers_improves_mixing():
    runs = [simulate_loader(BufferShuffled(buffer_size=600, num_shards=8, epoch=e), 2, 20)
            for e in range(2)]
    before = shuffle_report([np.concatenate(r) for r in runs], groups=LABELS, batch_size=20)
    after = shuffle_report(rebatched_orders(runs, 300, 20), groups=LABELS, batch_size=20)
    assert before.mixing < 0.7 < 0.9 < after.mixing


def test_explorer_redraws_when_a_slider_changes():
    from talk_helpers.widgets.buffer_shuffle import BufferExplorer

    explorer = BufferExplorer(buffer_size=8)
    first = explorer.report.mixing
    explorer.buffer.value = 600
    assert explorer.redraws == 2 and explorer.report.mixing > first
    explorer.workers.value = 1
    assert explorer.redraws == 3 and explorer.report.ok


def test_shown_code_leaves_out_the_docstring_that_would_tell_the_result():
    from talk_helpers.lessons.datasets.shuffling import show_code
    from talk_helpers.model.buffers import unbatch_shuffle_rebatch

    shown = show_code(unbatch_shuffle_rebatch).data
    assert shown.startswith("def unbatch_shuffle_rebatch(") and '"""' not in shown
    assert "yield batch" in shown
    assert '"""The WebDataset pattern' in show_code(unbatch_shuffle_rebatch, docstring=True).data
