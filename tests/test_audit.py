"""audit(): every check on a loader's output, in a real world or in process."""

import functools
import pickle
import threading

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from talk_helpers.audit import AuditReport, audit, collect_ids

# --- make_loader functions (module level, so a rank process can unpickle them) ----------


def all_ids(rank, world_size, epoch, n=12, batch_size=3):
    """No rank sharding: every rank reads everything."""
    return [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]


def strided(rank, world_size, epoch, n=12, batch_size=3, shuffle=False):
    """Correct rank sharding; shuffled per epoch when asked."""
    order = np.random.default_rng(epoch).permutation(n) if shuffle else np.arange(n)
    mine = order[rank::world_size]
    return [torch.as_tensor(mine[i:i + batch_size]) for i in range(0, len(mine), batch_size)]


def uneven(rank, world_size, epoch):
    """Rank 0 gets two batches, the others one."""
    return [[0, 1], [2, 3]] if rank == 0 else [[4 + rank, 10 + rank]]


def dict_batches(rank, world_size, epoch, n=8):
    return [{"id": torch.tensor([i]), "x": torch.zeros(1, 2)} for i in range(rank, n, world_size)]


def sampler_loader(rank, world_size, epoch, size=10, drop_last=False):
    ds = list(range(size))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=0, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return DataLoader(ds, batch_size=2, sampler=sampler)


def worker_loader(rank, world_size, epoch, n=16):
    ds = list(range(rank, n, world_size))
    return DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context="fork")


def not_iterable(rank, world_size, epoch):
    return 42


def raises_on_rank_1(rank, world_size, epoch):
    if rank == 1:
        raise RuntimeError("no data for rank 1")
    return [[0]]


def no_id_key(rank, world_size, epoch):
    return [{"x": 1}]


# --- tests -----------------------------------------------------------------------------


def test_in_process_sharded_loader_passes_every_check():
    report = audit(functools.partial(strided, shuffle=True), world_size=2, epochs=3,
                   expected=12, batch_size=3, in_process=True)
    assert isinstance(report, AuditReport)
    assert report.ok, report
    assert report.world is None
    assert [len(report.epochs[e]) for e in range(3)] == [2, 2, 2]
    assert all(isinstance(b, np.ndarray) for b in report.epochs[0][0])
    assert report.order_changes == {0: [True, True], 1: [True, True]}
    text = repr(report)
    assert text.startswith("✔ audit of 2 ranks × 3 epochs")
    assert "✘" not in text.split("order")[0]
    assert "<table>" in report._repr_html_()


def test_no_rank_sharding_shows_every_sample_world_size_times():
    report = audit(all_ids, world_size=2, epochs=1, expected=12, in_process=True)
    assert not report.ok
    once = report.checks[0].exactly_once
    assert once.duplicated_count == 12
    assert set(once.duplicates.values()) == {2}
    assert report.shuffle is None  # one epoch: nothing to compare


def test_unequal_batches_per_rank_are_flagged_as_a_hang_risk():
    report = audit(uneven, world_size=2, epochs=1, expected=[0, 1, 2, 3, 5, 11],
                   in_process=True)
    counts = report.checks[0].batch_counts
    assert not counts.ok and counts.counts == (2, 1)
    assert "DDP would block at step 2" in repr(report)


def test_expected_defaults_to_the_ids_of_epoch_0_and_says_so():
    report = audit(strided, world_size=2, epochs=2, in_process=True)
    assert report.ok
    assert "12 distinct ids seen in epoch 0" in repr(report)
    # Without shuffling the order repeats: reported beside ok, not in it.
    assert report.order_changes == {0: [False], 1: [False]}
    assert "same order in consecutive epochs" in repr(report)


def test_partial_batches_are_counted_when_batch_size_is_given():
    report = audit(functools.partial(strided, n=10), world_size=2, epochs=1, expected=10,
                   batch_size=3, in_process=True)
    assert not report.ok
    assert report.checks[0].batch_sizes.partial == 2
    assert report.checks[0].exactly_once.ok


def test_dict_batches_are_read_by_their_id_key():
    report = audit(dict_batches, world_size=2, epochs=1, expected=8, in_process=True)
    assert report.ok, report


def test_batch_ids_reads_batches_ids_of_cannot():
    report = audit(no_id_key, world_size=1, epochs=1, expected=1, in_process=True,
                   batch_ids=functools.partial(lambda b: [0]))
    assert report.ok


def test_global_order_interleaves_ranks_step_by_step():
    report = audit(strided, world_size=2, epochs=1, in_process=True)
    assert report.global_order(0).tolist() == [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11]
    assert report.ids(0, 1).tolist() == [1, 3, 5, 7, 9, 11]


@pytest.mark.distributed
def test_a_real_world_sees_distributed_sampler_padding():
    report = audit(sampler_loader, world_size=3, epochs=2, expected=10,
                   start_method="fork", timeout_s=120)
    assert report.world is not None and report.world.ok
    once = report.checks[0].exactly_once
    # 10 samples over 3 ranks: DistributedSampler pads to 12 by repeating two indices.
    assert once.seen_count == 12 and once.duplicated_count == 2
    assert report.checks[0].batch_counts.ok
    assert all(all(changes) for changes in report.order_changes.values())


@pytest.mark.distributed
def test_a_real_world_with_dataloader_workers_in_every_rank():
    report = audit(worker_loader, world_size=2, epochs=2, expected=16, batch_size=2,
                   start_method="fork", timeout_s=120)
    assert report.ok, report


@pytest.mark.distributed
def test_a_failing_rank_is_reported_not_raised():
    report = audit(raises_on_rank_1, world_size=2, epochs=1, start_method="fork",
                   timeout_s=120)
    assert not report.ok
    assert report.error == "the audit could not finish: rank 1: RuntimeError: no data for rank 1"
    assert "no data for rank 1" in repr(report)
    assert "no data for rank 1" in report._repr_html_()


@pytest.mark.distributed
def test_a_non_iterable_loader_is_reported_as_the_ranks_error():
    report = audit(not_iterable, world_size=2, epochs=1, start_method="fork", timeout_s=120)
    assert not report.ok
    assert "returned int 42, which is not iterable" in report.error


def test_a_non_iterable_loader_in_process_raises_the_same_error():
    with pytest.raises(TypeError, match="not iterable"):
        audit(not_iterable, world_size=1, in_process=True)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(make_loader=strided, world_size=0), ValueError, "world_size"),
        (dict(make_loader=strided, world_size="2"), TypeError, "world_size"),
        (dict(make_loader=strided, world_size=2, epochs=0), ValueError, "epochs"),
        (dict(make_loader=None, world_size=2), TypeError, "make_loader must be callable"),
        (dict(make_loader=strided, world_size=2, batch_size=0), ValueError, "batch_size"),
        (dict(make_loader=strided, world_size=2, expected="abc"), TypeError, "expected"),
        (dict(make_loader=lambda r, w, e: [[0]], world_size=2), TypeError, "pickled"),
        (dict(make_loader=functools.partial(strided, n=threading.Lock()), world_size=2),
         TypeError, "pickled"),
    ],
)
def test_bad_arguments_get_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        audit(**kwargs)


def test_a_lambda_is_fine_in_process():
    report = audit(lambda r, w, e: [[r]], world_size=2, epochs=1, in_process=True)
    assert report.ok


def test_collect_ids_returns_one_array_per_batch():
    out = collect_ids(0, 2, strided, 2)
    assert len(out) == 2 and [b.tolist() for b in out[0]] == [[0, 2, 4], [6, 8, 10]]
    pickle.dumps(out)
