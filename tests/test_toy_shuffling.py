"""Notebook 03's data, its buffer-shuffle model and helpers, and the seeding datasets of
notebook 04, behave as the notebooks say."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from talk_helpers.checks import check_exactly_once
from talk_helpers.checks.mixing import shuffle_report
from talk_helpers.lessons.datasets import seeds
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


def test_workers_draw_what_worker_py_says():
    base = seeds.predict_base_seed()
    records = list(DataLoader(seeds.SeedProbe(), batch_size=None, num_workers=2,
                              multiprocessing_context=CTX))
    assert records == [seeds.expected_draws(base, w) for w in (0, 1)]
    generator = torch.Generator().manual_seed(7)
    predicted = seeds.predict_base_seed(generator)
    records = list(DataLoader(seeds.SeedProbe(), batch_size=None, num_workers=2,
                              generator=generator, multiprocessing_context=CTX))
    assert records[0]["seed"] == predicted


def test_two_streams_shard_exactly_once_and_augment_differently():
    outs = [seeds.run_epochs(loader(seeds.TwoStreams(rank=r, world_size=2), batch_size=4),
                             epochs=1)[0] for r in range(2)]
    assert check_exactly_once([o["id"] for o in outs], 24).ok
    assert not (outs[0]["aug"] == outs[1]["aug"]).all()


def test_distributed_sampler_repeats_without_set_epoch():
    ds = seeds.MapIds(100)
    samplers = [DistributedSampler(ds, num_replicas=2, rank=r) for r in range(2)]
    stale = [np.array(list(samplers[0])) for _ in range(2)]
    assert not shuffle_report(stale, batch_size=10).order_changes
    fresh = []
    for epoch in range(2):
        for s in samplers:
            s.set_epoch(epoch)
        fresh.append([np.array(list(s)) for s in samplers])
        assert check_exactly_once(fresh[-1], 100).ok
    assert shuffle_report([f[0] for f in fresh], batch_size=10).order_changes


@pytest.mark.parametrize("cls, reaches", [(seeds.EpochStream, False),
                                          (seeds.SharedEpochStream, True)])
def test_set_epoch_and_persistent_workers(cls, reaches):
    ds = cls()
    runs = seeds.run_epochs(loader(ds, batch_size=10, persistent_workers=True), ds, epochs=2)
    assert (runs[1]["epoch_seen"] == 1).all() == reaches


def test_counting_epoch_stream_needs_persistent_workers():
    ds = seeds.CountingEpochStream()
    persistent = seeds.run_epochs(loader(ds, batch_size=10, persistent_workers=True),
                                  epochs=2, set_epoch=False)
    fresh = seeds.run_epochs(loader(ds, batch_size=10), epochs=2, set_epoch=False)
    assert [set(r["epoch_seen"]) for r in persistent] == [{0}, {1}]
    assert [set(r["epoch_seen"]) for r in fresh] == [{0}, {0}]


def test_digest_depends_only_on_the_seed():
    first, again, other = seeds.digest(0), seeds.digest(0), seeds.digest(1)
    assert first == again and first["sha256"] != other["sha256"]
