"""audit(): every check on a loader's output, in a real world or in process."""

import collections
import dataclasses
import functools
import json
import pickle
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, DistributedSampler

from talk_helpers.audit import AuditFailed, AuditReport, UnreadableBatch, audit, collect_ids
from talk_helpers.audit.checks import CHECKS, Check, Verdict
from talk_helpers.model.simulate import simulate

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
    report = audit(functools.partial(strided, n=48, shuffle=True), world_size=2, epochs=3,
                   expected=48, batch_size=3, in_process=True)
    assert isinstance(report, AuditReport)
    assert report.ok, report
    assert report.world is None
    assert [len(report.epochs[e]) for e in range(3)] == [2, 2, 2]
    assert all(isinstance(b, np.ndarray) for b in report.epochs[0][0])
    assert report.status == "pass"
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
    assert "rank 0, rank 1: epoch 1 read in exactly epoch 0's order" in repr(report)


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
    # Recorded inside the workers: batches of a map-style loader alternate between them.
    assert report.checks[0].worker_samples == [[4, 4], [4, 4]]


@pytest.mark.distributed
def test_an_audit_does_not_pay_for_what_ddp_needs():
    from test_distributed import run_python

    code = ("import sys\n"
            "from functools import partial\n"
            "from talk_helpers.audit import audit\n"
            "from talk_helpers.lessons.datasets.ddp import make_sharded_loader\n"
            "if __name__ == '__main__':\n"
            "    make = partial(make_sharded_loader, shard_sizes=[4, 4], workers=0)\n"
            "    report = audit(make, world_size=2, epochs=1, start_method='fork', "
            "timeout_s=120)\n"
            "    print(report.world.ok, 'torch._dynamo' in sys.modules)\n")
    out = run_python(code)
    assert out.stdout.strip() == "True False", out.stderr


@pytest.mark.distributed
def test_a_failing_rank_is_reported_not_raised():
    report = audit(raises_on_rank_1, world_size=2, epochs=1, start_method="fork",
                   timeout_s=120)
    assert not report.ok
    assert report.error == "the audit could not finish: rank 1: RuntimeError: no data for rank 1"
    assert "no data for rank 1" in repr(report)
    assert "no data for rank 1" in report._repr_html_()
    # which rank, the cause, and what to do next
    assert "call your loader factory as rank 1 did, in one process: make_loader(1, 2, 0)" \
        in repr(report)
    with pytest.raises(AuditFailed, match="nothing to show: the audit above failed"):
        report.epochs[0]


def a_failed_report():
    from talk_helpers.audit.core import failed_report
    from talk_helpers.audit.failure import Failure

    return failed_report(2, 1, Failure(kind="raised", rank=1, message="RuntimeError: boom",
                                       error="the audit could not finish: rank 1: "
                                             "RuntimeError: boom"))


# what the notebooks and graders read from an audit, one use each
LATER_CELLS = {
    "epochs": lambda r: r.epochs[0],
    "checks": lambda r: r.checks[0].exactly_once.missing,
    "every check": lambda r: [c.exactly_once for c in r.checks],
    "ids": lambda r: r.ids(0, 1),
    "global order": lambda r: r.global_order(0),
    "results": lambda r: r.results["order"],
    "shuffle": lambda r: r.shuffle.mixing,
    "order changes": lambda r: r.order_changes[0],
    "order repeats": lambda r: r.order_repeats,
    "poorly mixed": lambda r: r.poorly_mixed,
    "a simulation's compare": lambda r: simulate([4, 4], nodes=2, workers=1,
                                                 micro_batch_size=2).compare(r.epochs[0]),
}


@pytest.mark.parametrize("use", list(LATER_CELLS.values()), ids=list(LATER_CELLS))
def test_a_later_cell_reading_a_failed_audit_gets_one_clear_error_never_an_attribute_error(use):
    report = a_failed_report()
    with pytest.raises(AuditFailed) as caught:
        use(report)
    assert str(caught.value).startswith("nothing to show: the audit above failed")
    assert "rank 1: RuntimeError: boom" in str(caught.value)


def test_a_failed_audit_still_shows_its_own_report_and_json():
    report = a_failed_report()
    assert (report.ok, report.status, report.exit_status) == (False, "error", 3)
    assert repr(report).splitlines()[:2] == [
        "✘ audit of 2 ranks × 1 epoch · ✘ could not finish",
        "  ✘ the audit could not finish: rank 1: RuntimeError: boom"]
    assert "rank 1: RuntimeError: boom" in report._repr_html_()
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["status"] == "error" and doc["epochs"] == []


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


# --- order, workers, by-design trade-offs, JSON ----------------------------------------

def test_a_repeating_order_fails_when_the_loader_is_meant_to_shuffle():
    report = audit(strided, world_size=2, epochs=2, expected=12, in_process=True,
                   shuffle=True)
    assert not report.ok and report.status == "fail"
    assert report.order_repeats
    assert repr(report).startswith("✘ audit of 2 ranks × 2 epochs · ✘ order repeats")


def test_a_repeating_order_is_a_warning_in_the_headline_by_default():
    report = audit(strided, world_size=2, epochs=2, expected=12, in_process=True)
    assert report.ok and report.status == "warn"
    title = repr(report).splitlines()[0]
    assert title.startswith("⚠ audit") and "✔ exactly once · ⚠ order repeats" in title
    assert "✔" not in title.split("·")[0]


def swapped_neighbours(rank, world_size, epoch, n=200, batch_size=4):
    """One shuffled order; odd epochs swap each sample with its storage neighbour."""
    order = np.random.default_rng(0).permutation(n)
    order = order ^ 1 if epoch % 2 else order
    mine = torch.from_numpy(order[rank::world_size])
    return list(mine.split(batch_size))


def test_an_order_that_changes_every_position_but_keeps_its_shape_is_named_as_such():
    report = audit(swapped_neighbours, world_size=1, epochs=2, expected=200,
                   in_process=True, shuffle=True)
    assert report.status == "fail"
    title = repr(report).splitlines()[0]
    assert "✘ similar order across epochs" in title and "order repeats" not in title


def test_order_is_not_judged_when_the_loader_is_not_meant_to_shuffle():
    report = audit(strided, world_size=2, epochs=2, expected=12, in_process=True,
                   shuffle=False)
    assert report.ok and report.status == "pass"
    assert repr(report).splitlines()[0] == "✔ audit of 2 ranks × 2 epochs"
    assert "order not judged (shuffle=False)" in repr(report)
    assert "✘" not in repr(report) and "⚠" not in repr(report)


def test_a_reshuffled_loader_passes_with_shuffle_true():
    report = audit(functools.partial(strided, n=64, batch_size=4, shuffle=True),
                   world_size=2, epochs=3, expected=64, in_process=True, shuffle=True)
    assert report.ok, report
    assert report.status == "pass"


def test_shuffle_true_with_one_epoch_cannot_pass():
    report = audit(functools.partial(strided, shuffle=True), world_size=2, epochs=1,
                   expected=12, in_process=True, shuffle=True)
    assert not report.ok
    assert "shuffle=True needs epochs ≥ 2" in repr(report)


def nested_modulo(rank, world_size, epoch, workers=4):
    from talk_helpers.lessons.datasets.ddp import make_sharded_loader

    return make_sharded_loader(rank, world_size, epoch, shard_sizes=[40], workers=workers,
                               batch_size=5, policy="nested_modulo")


def test_idle_workers_are_counted_inside_the_workers_and_flagged():
    report = audit(nested_modulo, world_size=2, epochs=1, expected=40, batch_size=5,
                   in_process=True)
    check = report.checks[0]
    assert check.worker_samples == [[10, 0, 10, 0], [0, 10, 0, 10]]
    assert check.idle_workers == [(0, 1), (0, 3), (1, 0), (1, 2)]
    assert report.ok and report.status == "warn"
    assert "⚠ 4 of 8 workers idle" in repr(report).splitlines()[0]


def test_busy_workers_are_listed_with_a_tick():
    report = audit(functools.partial(nested_modulo, workers=1), world_size=2, epochs=1,
                   expected=40, in_process=True)
    assert report.checks[0].worker_samples == [[20], [20]]
    assert report.status == "pass"
    assert "✔ samples per worker: rank 0: 20 · rank 1: 20" in repr(report)


def test_the_loader_still_yields_its_own_batches_after_the_audit():
    loader = nested_modulo(0, 2, 0, workers=2)
    audit(lambda r, w, e: loader, world_size=1, epochs=1, in_process=True)
    assert all(isinstance(b, torch.Tensor) for b in loader)


def drop_last_id(rank, world_size, epoch, n=12):
    """Every rank drops its last sample: world_size ids lost on purpose."""
    return [batch[:-1] if i == 1 else batch
            for i, batch in enumerate(strided(rank, world_size, epoch, n=n))]


def test_a_drop_declared_by_design_reads_as_the_trade_off():
    report = audit(drop_last_id, world_size=2, epochs=1, expected=12, in_process=True,
                   dropped_by_design=2)
    assert report.ok and report.status == "pass"
    assert repr(report).splitlines()[0] == ("✔ audit of 2 ranks × 1 epoch · "
                                            "2 dropped by design")
    assert "✔ every other sample once · 2 dropped by design" in repr(report)
    ids = report.checks[0].exactly_once.missing
    assert audit(drop_last_id, world_size=2, epochs=1, expected=12, in_process=True,
                 dropped_by_design=ids).ok


def test_more_losses_than_declared_still_fail():
    report = audit(drop_last_id, world_size=2, epochs=1, expected=12, in_process=True,
                   dropped_by_design=1)
    assert not report.ok
    assert "✘ 2 missing" in repr(report).splitlines()[0]
    assert "(declared by design: dropped 1; found 2 dropped, more than declared)" \
        in repr(report)


def test_fewer_losses_than_declared_say_fewer_not_more():
    report = audit(drop_last_id, world_size=2, epochs=1, expected=12, in_process=True,
                   dropped_by_design=3)
    assert not report.ok
    assert "found 2 dropped, fewer than declared" in repr(report)
    assert "more" not in repr(report).splitlines()[1]


def offset_ids(rank, world_size, epoch, n=24):
    return [torch.arange(10_000 + rank, 10_000 + n, world_size)]


def test_ids_that_start_anywhere_are_declared_as_a_range():
    assert audit(offset_ids, world_size=2, epochs=2, expected=range(10_000, 10_024),
                 in_process=True, shuffle=False).ok
    wrong = audit(offset_ids, world_size=2, epochs=1, expected=24, in_process=True)
    assert wrong.problems == [("✘", "24 missing"), ("✘", "24 unexpected")]
    cause = wrong.causes[0]
    assert cause.cause == "the ids are the expected ones shifted by +10000"
    assert "--id-range 10000:10024" in cause.fix
    short = audit(offset_ids, world_size=2, epochs=1, expected=range(10_000, 10_030),
                  in_process=True)
    assert short.problems == [("✘", "6 missing")]
    assert "missing: 10024, 10025, 10026, 10027, 10028, 10029" in repr(short)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(expected=range(5, 1)), ValueError, "expected as a range"),
    (dict(expected=range(0, 10, 2)), ValueError, "count up by 1"),
    (dict(expected=["a", "b", "a"]), ValueError, "the same string id twice"),
    (dict(with_replacement="yes"), TypeError, "with_replacement must be True or False"),
    (dict(mixing="chunks"), ValueError, "mixing must be 'sample' or 'chunk:N'"),
    (dict(dropped_by_design="some"), TypeError, "or 'auto'"),
])
def test_bad_expectations_and_modes_get_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        audit(strided, world_size=2, in_process=True, **kwargs)


def test_repeats_declared_by_design_read_as_the_trade_off():
    def padded(rank, world_size, epoch):
        return [[0, 1], [2]] if rank == 0 else [[3, 4], [0]]

    report = audit(padded, world_size=2, epochs=1, expected=5, in_process=True,
                   repeated_by_design=[0])
    assert report.ok and "1 repeated by design" in repr(report).splitlines()[0]
    assert not audit(padded, world_size=2, epochs=1, expected=5, in_process=True).ok


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), st.data())
def test_a_declared_drop_passes_only_when_it_accounts_for_every_loss(n, data):
    lost = data.draw(st.integers(0, n - 1))
    declared = data.draw(st.integers(0, n))

    def loader(rank, world_size, epoch):
        return [list(range(lost, n))]

    report = audit(loader, world_size=1, epochs=1, expected=n, in_process=True,
                   dropped_by_design=declared)
    assert report.ok == (lost == 0 or declared == lost)  # nothing lost is always fine


def test_to_dict_is_json_and_caps_the_id_lists():
    report = audit(all_ids, world_size=2, epochs=2, expected=14, in_process=True)
    doc = json.loads(json.dumps(report.to_dict(limit=5)))
    assert doc["schema"] == "talk_helpers.audit/2"
    assert doc["ok"] is False and doc["status"] == "fail"
    assert doc["world_size"] == 2 and doc["n_epochs"] == 2 and doc["expected"] == 14
    epoch = doc["epochs"][0]
    assert epoch["exactly_once"]["duplicated_count"] == 12
    assert epoch["exactly_once"]["duplicated"] == [[i, 2] for i in range(5)]
    assert epoch["exactly_once"]["missing"] == [12, 13]
    assert epoch["batches_per_rank"] == [4, 4] and epoch["samples_per_rank"] == [12, 12]
    assert {"mark": "✘", "text": "12 duplicated"} in doc["problems"]
    assert doc["headline"] == repr(report).splitlines()[0]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(shuffle="yes"), ValueError, "shuffle must be None, True or False"),
        (dict(shuffle=1), ValueError, "shuffle must be None, True or False"),
        (dict(dropped_by_design=-1), ValueError, "dropped_by_design"),
        (dict(repeated_by_design="x"), TypeError, "repeated_by_design"),
        (dict(dropped_by_design=True), TypeError, "dropped_by_design"),
    ],
)
def test_bad_order_and_design_arguments_get_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        audit(strided, world_size=2, in_process=True, **kwargs)


def test_the_talks_nested_modulo_leaves_one_worker_per_rank_idle_with_two_of_each():
    from talk_helpers.lessons.datasets.ddp import make_sharded_loader

    nested_modulo = functools.partial(make_sharded_loader, shard_sizes=[1] * 20, workers=2,
                                      batch_size=5, policy="nested_modulo")
    report = audit(nested_modulo,
                   world_size=2, epochs=1, expected=20, batch_size=5, in_process=True)
    assert report.checks[0].exactly_once.ok
    assert report.checks[0].worker_samples == [[10, 0], [0, 10]]
    assert report.status == "warn"


def test_the_mystery_loader_reads_each_id_once_per_worker_of_its_rank():
    from talk_helpers.lessons.datasets.ddp import make_mystery_loader

    report = audit(make_mystery_loader, world_size=2, epochs=1, expected=24, in_process=True)
    once = report.checks[0].exactly_once
    assert once.missing_count == 0 and set(once.duplicates.values()) == {3}
    assert report.checks[0].worker_samples == [[12, 12, 12], [12, 12, 12]]


def shard_local_shuffle(rank, world_size, epoch, n=96, batch_size=4):
    """Each rank shuffles its own contiguous block: the global step looks mixed, a rank's
    micro-batches never are."""
    block = np.arange(rank * n // world_size, (rank + 1) * n // world_size)
    order = np.random.default_rng([rank, epoch]).permutation(block)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def test_a_shard_local_shuffle_is_not_well_mixed_for_a_loader_meant_to_shuffle():
    report = audit(shard_local_shuffle, world_size=2, epochs=2, expected=96, in_process=True,
                   shuffle=True)
    assert all(all(c) for c in report.order_changes.values())
    assert report.poorly_mixed and not report.ok
    assert "✘ poorly mixed" in repr(report).splitlines()[0]


# --- which sample is which: never guessed ------------------------------------------------

Sample = collections.namedtuple("Sample", "index tokens")


@dataclasses.dataclass
class Batch:
    ids: torch.Tensor
    pixels: torch.Tensor


def uint8_images(rank, world_size, epoch, n=8):
    """(images, labels) batches: integers everywhere, and none of them ids."""
    mine = list(range(rank, n, world_size))
    images = torch.stack([torch.full((3, 4, 4), i, dtype=torch.uint8) for i in mine])
    return [(images[i:i + 2], torch.tensor(mine[i:i + 2]) % 3) for i in range(0, len(mine), 2)]


def token_batches(rank, world_size, epoch):
    return [torch.arange(8).reshape(2, 4) + 8 * rank]


def namedtuple_batches(rank, world_size, epoch, n=8):
    mine = torch.arange(rank, n, world_size)
    return [Sample(index=mine[i:i + 2], tokens=torch.zeros(2, 3, dtype=torch.long))
            for i in range(0, len(mine), 2)]


def dataclass_batches(rank, world_size, epoch, n=8):
    mine = torch.arange(rank, n, world_size)
    return [Batch(ids=mine[i:i + 2], pixels=torch.rand(2, 3)) for i in range(0, len(mine), 2)]


def nested_dict_batches(rank, world_size, epoch, n=6):
    return [{"x": torch.zeros(1, 2), "meta": {"id": [f"doc-{i:03d}"]}}
            for i in range(rank, n, world_size)]


def keyed_strings(rank, world_size, epoch, duplicate=False):
    start, step = (0, 1) if duplicate else (rank, world_size)
    keys = [f"shard0/{i:05d}" for i in range(start, 10, step)]
    return [{"__key__": keys[i:i + 2], "jpg": [b"..."] * len(keys[i:i + 2])}
            for i in range(0, len(keys), 2)]


@pytest.mark.parametrize("loader, shown", [
    (uint8_images, "tuple(Tensor[2, 3, 4, 4] uint8, Tensor[2] int64)"),
    (token_batches, "Tensor[2, 4] int64"),
    (namedtuple_batches, "Sample(index=Tensor[2] int64, tokens=Tensor[2, 3] int64)"),
])
def test_integer_batches_that_are_not_ids_are_refused_with_their_structure(loader, shown):
    with pytest.raises(UnreadableBatch) as caught:
        audit(loader, world_size=2, epochs=1, in_process=True)
    message = str(caught.value)
    assert shown in message
    assert "--ids PATH" in message and "--by-content" in message
    assert message.startswith("rank 0, epoch 0, batch 0: cannot tell which sample is which")


def test_a_refused_batch_in_a_real_world_is_a_usage_status_not_a_failed_check():
    report = audit(uint8_images, world_size=2, epochs=1, start_method="fork", timeout_s=120)
    assert (report.status, report.exit_status, report.ok) == ("usage", 2, False)
    assert report.failure.kind == "ids"
    assert report.problems == [("✘", "cannot tell the sample ids")]
    assert "Tensor[2, 3, 4, 4] uint8" in repr(report)
    assert report.to_dict()["error"]["kind"] == "ids"


@pytest.mark.parametrize("loader, ids, expected", [
    (namedtuple_batches, "index", 8),
    (namedtuple_batches, "0", 8),
    (dataclass_batches, "ids", 8),
    (nested_dict_batches, "meta.id", 6),
    (keyed_strings, "__key__", 10),
])
def test_ids_name_a_key_a_position_an_attribute_or_a_dotted_path(loader, ids, expected):
    report = audit(loader, world_size=2, epochs=1, expected=expected, ids=ids,
                   in_process=True)
    assert report.ok, report
    assert report.to_dict()["ids"] == f"ids {ids}"


def test_a_position_also_indexes_a_tensors_first_dimension():
    def batched_in_workers(rank, world_size, epoch):  # DataLoader(batch_size=1) over batches
        return [torch.arange(rank * 4, rank * 4 + 4).reshape(1, 4)]

    assert audit(batched_in_workers, world_size=2, epochs=1, expected=8, ids="0",
                 in_process=True).ok


def test_a_path_that_is_not_there_lists_what_is():
    with pytest.raises(UnreadableBatch, match=r"no key 'idx' \(keys: 'x', 'meta'\)"):
        audit(nested_dict_batches, world_size=1, epochs=1, ids="idx", in_process=True)
    with pytest.raises(UnreadableBatch, match="one id per sample needs a 1-D value"):
        audit(namedtuple_batches, world_size=1, epochs=1, ids="tokens", in_process=True)


def test_string_ids_are_counted_and_named_by_their_text():
    report = audit(functools.partial(keyed_strings, duplicate=True), world_size=2, epochs=2,
                   ids="__key__", expected=10, in_process=True)
    assert not report.ok
    assert report.problems[0] == ("✘", "10 duplicated")
    once = report.to_dict()["epochs"][0]["exactly_once"]
    assert once["duplicated"][0] == ["shard0/00000", 2]
    # string ids are put in their sorted order for the mixing, and the report says so
    assert report.shuffle is not None and "string ids in their sorted order" in repr(report)


def test_by_content_knows_samples_by_what_they_hold():
    report = audit(uint8_images, world_size=2, epochs=2, by_content=True, expected=8,
                   in_process=True)
    assert report.ok, report
    assert "8 distinct contents" in repr(report)


def test_by_content_reports_identical_contents_as_such():
    def twice(rank, world_size, epoch):  # every rank reads every image
        return uint8_images(0, 1, epoch)

    report = audit(twice, world_size=2, epochs=1, by_content=True, expected=8,
                   in_process=True)
    assert report.problems == [("✘", "8 identical contents")]
    assert "(identical contents: a sample read again, or samples alike)" in repr(report)


def test_by_content_counts_what_is_missing_when_told_how_many():
    report = audit(uint8_images, world_size=2, epochs=1, by_content=True, expected=10,
                   in_process=True)
    assert report.problems == [("✘", "2 missing")]


@pytest.mark.parametrize("batch", [
    {"text": ["a", "b"], "label": torch.tensor([0, 1])},
    (torch.rand(2, 3), torch.tensor([0, 1])),
    ["a.png", "b.png"],
    [b"\x00", b"\x01"],
    Batch(ids=torch.tensor([5, 6]), pixels=torch.rand(2, 2)),
    np.arange(4, dtype=np.float32).reshape(2, 2),
    [{"x": 1.5, "y": "u"}, {"x": 2.5, "y": "v"}],
])
def test_by_content_splits_any_collated_batch_along_its_samples(batch):
    from talk_helpers.audit.sample_ids import sample_ids

    ids, names = sample_ids(by_content=True)(batch)
    assert ids.shape == (2,) and ids[0] != ids[1] and names is None
    again, _ = sample_ids(by_content=True)(batch)
    assert ids.tolist() == again.tolist()  # stable


def test_by_content_refuses_fields_of_different_lengths():
    from talk_helpers.audit.sample_ids import sample_ids

    with pytest.raises(UnreadableBatch, match="different numbers of samples"):
        sample_ids(by_content=True)({"a": torch.zeros(2), "b": torch.zeros(3)})


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(ids="idx", by_content=True), ValueError, "at most one of ids, by_content"),
    (dict(ids=""), ValueError, "ids must be a path"),
    (dict(ids="meta..id"), ValueError, "no empty part"),
    (dict(ids=3.5), TypeError, "ids must be a path"),
    (dict(by_content="yes"), TypeError, "by_content must be True or False"),
    (dict(steps=0), ValueError, "steps"),
    (dict(epoch_call="set_epoch"), ValueError, "epoch_call needs reuse_loader=True"),
    (dict(expected=10**15), ValueError, "too large to hold"),
])
def test_bad_id_and_epoch_arguments_get_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        audit(strided, world_size=2, in_process=True, **kwargs)


# --- endless loaders, reused loaders -------------------------------------------------------


def endless(rank, world_size, epoch):
    i = rank
    while True:
        yield [i]
        i += world_size


def test_steps_stop_an_endless_loader_and_judge_each_window_by_itself():
    report = audit(endless, world_size=2, epochs=2, steps=5, in_process=True)
    assert report.ok, report
    assert [c.batch_counts.counts for c in report.checks] == [(5, 5), (5, 5)]
    assert "each epoch's own distinct ids" in repr(report)


class EpochLoader:
    """Keeps its own epoch: each iteration reads one more permutation."""

    built = 0

    def __init__(self, rank, world_size, n=16):
        EpochLoader.built += 1
        self.rank, self.world_size, self.n, self.epoch, self.calls = rank, world_size, n, 0, []

    def set_epoch(self, epoch):
        self.calls.append(epoch)
        self.epoch = epoch

    def __iter__(self):
        order = np.random.default_rng(self.epoch).permutation(self.n)[self.rank::self.world_size]
        self.epoch += 1
        return iter([order[i:i + 2] for i in range(0, len(order), 2)])


def epoch_loader(rank, world_size, epoch):
    return EpochLoader(rank, world_size)


def test_a_reused_loader_is_built_once_and_keeps_its_own_epochs():
    EpochLoader.built = 0
    fresh = audit(epoch_loader, world_size=2, epochs=3, expected=16, in_process=True)
    assert EpochLoader.built == 6
    assert fresh.order_changes == {0: [False, False], 1: [False, False]}
    EpochLoader.built = 0
    reused = audit(epoch_loader, world_size=2, epochs=3, expected=16, in_process=True,
                   reuse_loader=True)
    assert EpochLoader.built == 2
    assert reused.order_changes == {0: [True, True], 1: [True, True]}


def test_only_the_named_epoch_call_is_made():
    seen = []

    def keep(rank, world_size, epoch):
        seen.append(loader := EpochLoader(rank, world_size))
        return loader

    audit(keep, world_size=1, epochs=3, in_process=True, reuse_loader=True)
    assert seen[0].calls == []
    seen.clear()
    audit(keep, world_size=1, epochs=3, in_process=True, reuse_loader=True,
          epoch_call="set_epoch")
    assert seen[0].calls == [0, 1, 2]


# --- what is kept, where it failed ---------------------------------------------------------


def test_only_ids_are_kept_never_the_batches_themselves():
    from talk_helpers.audit.collect import Plan, collect

    run = collect(0, 2, worker_loader, Plan(epochs=1), publish=lambda text: None)
    seen = run.epochs[0]
    assert seen.ids.dtype == np.int32 and seen.ids.flags.owndata  # a copy, not a view
    assert seen.sizes.tolist() == [2, 2, 2, 2] and seen.workers.tolist() == [0, 1, 0, 1]


@pytest.mark.distributed
def test_a_raising_loader_is_an_error_with_the_file_and_line_it_came_from():
    report = audit(raises_on_rank_1, world_size=2, epochs=1, start_method="fork",
                   timeout_s=120)
    assert (report.status, report.exit_status) == ("error", 3)
    assert report.failure.rank == 1
    import inspect

    lines, first = inspect.getsourcelines(raises_on_rank_1)
    line = first + next(i for i, text in enumerate(lines) if "raise RuntimeError" in text)
    assert report.failure.where == f"tests/test_audit.py:{line} in raises_on_rank_1"
    assert f"at tests/test_audit.py:{line} in raises_on_rank_1" in repr(report)


def sleeps_on_rank_1(rank, world_size, epoch):
    if rank == 1:
        import time

        time.sleep(3600)
    return [[rank]]


@pytest.mark.distributed
def test_a_deadline_says_how_far_each_rank_got_and_which_argument_to_raise():
    report = audit(sleeps_on_rank_1, world_size=2, epochs=1, start_method="fork",
                   timeout_s=8)
    assert (report.status, report.exit_status, report.failure.kind) == ("error", 3, "hung")
    progress = report.failure.progress
    assert progress[0].startswith("finished, epoch 0 done (1 batches)")
    assert progress[1].startswith("still running, epoch 0: building the loader")
    assert "sleeps_on_rank_1" in progress[1]  # where it waits, once it waited a while
    assert "steps=N" in report.failure.hint and "timeout_s" in report.failure.hint


# --- a new check is one entry ---------------------------------------------------------------


class EmptyRank(Check):
    """The sketch in talk_helpers.audit.checks: every rank reads at least one batch."""

    name = "empty_rank"

    def judge(self, run):
        empty = [r for r in range(run.world_size)
                 if any(run.epoch(e)[r].n_batches == 0 for e in range(run.n_epochs))]
        out = Verdict(data={"empty_ranks": empty})
        if empty:
            out.problems.append(("✘", f"{len(empty)} empty ranks"))
            out.rows.append(("ranks", f"✘ no batch on rank {empty[0]}"))
        return out


def one_rank_empty(rank, world_size, epoch):
    return [[0, 1]] if rank == 0 else []


def test_a_new_check_is_a_class_in_the_list_the_report_runs():
    report = audit(one_rank_empty, world_size=2, epochs=1, in_process=True,
                   checks=(*CHECKS, EmptyRank()))
    assert ("✘", "1 empty ranks") in report.problems
    assert "ranks    ✘ no batch on rank 1" in repr(report)
    assert report.to_dict()["checks"]["empty_rank"] == {"empty_ranks": [1]}


# --- shared memory in flight ------------------------------------------------------------------


class HeavyIds(torch.utils.data.Dataset):
    """Ids with a 1 MiB tensor each, the kind of sample that fills /dev/shm."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"id": i, "pixels": torch.zeros(256 * 1024)}


def heavy_loader(rank, world_size, epoch, workers=2):
    return DataLoader(HeavyIds(), batch_size=2, num_workers=workers,
                      multiprocessing_context="fork" if workers else None)


def test_batches_in_flight_larger_than_dev_shm_fail_the_audit(monkeypatch):
    from talk_helpers.audit.checks import shared_memory

    monkeypatch.setattr(shared_memory, "shm_size", lambda path=shared_memory.SHM: 8 * 2**20)
    report = audit(heavy_loader, world_size=1, epochs=1, expected=8, in_process=True)
    assert report.status == "fail" and "/dev/shm too small" in repr(report).splitlines()[0]
    # 2 workers × prefetch 2 + 2 held by the loop = 6 batches of 2 MiB of pixels, and a
    # page for each batch's tensor of ids
    assert "6 batches of 2.0 MiB in flight need 12.0 MiB" in repr(report)
    assert report.to_dict()["checks"]["shared_memory"]["needed_bytes"] == 6 * (2**21 + 4096)


def test_batches_that_fit_in_dev_shm_or_use_no_worker_add_nothing_to_the_report(monkeypatch):
    from talk_helpers.audit.checks import shared_memory

    fits = audit(heavy_loader, world_size=1, epochs=1, expected=8, in_process=True)
    assert fits.ok and "shared memory" not in repr(fits) and "/dev/shm" not in repr(fits)
    monkeypatch.setattr(shared_memory, "shm_size", lambda path=shared_memory.SHM: 2**20)
    no_workers = audit(functools.partial(heavy_loader, workers=0), world_size=1, epochs=1,
                       expected=8, in_process=True)
    assert no_workers.ok and "/dev/shm" not in repr(no_workers)


# --- one story per report: headline, rows and JSON never disagree ---------------------------


def _order_kind(kind: str, previous: np.ndarray, rng) -> np.ndarray:
    n = previous.size
    if kind == "fresh":
        return rng.permutation(n)
    if kind == "same":
        return previous.copy()
    if kind == "replay":    # the first 60% of the last epoch again, the rest anew
        keep = int(0.6 * n)
        return np.concatenate([previous[:keep], rng.permutation(previous[keep:])])
    if kind == "sorted":
        return np.arange(n)
    return previous ^ 1 if n % 2 == 0 else rng.permutation(n)   # neighbours swapped


@settings(max_examples=80, deadline=None)
@given(world=st.integers(1, 3), epochs=st.integers(1, 3), n=st.integers(8, 160),
       batch=st.integers(1, 8), shuffle=st.sampled_from([None, True, False]),
       kinds=st.lists(st.sampled_from(["fresh", "same", "replay", "sorted", "swap"]),
                      min_size=3, max_size=3),
       fault=st.sampled_from(["none", "drop", "duplicate", "unsplit"]),
       seed=st.integers(0, 1000))
def test_headline_rows_and_json_tell_one_story(world, epochs, n, batch, shuffle, kinds,
                                               fault, seed):
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(n)]
    for e in range(1, epochs):
        orders.append(_order_kind(kinds[e], orders[-1], rng))

    def loader(rank, world_size, epoch):
        order = orders[epoch]
        mine = order if fault == "unsplit" else order[rank::world_size]
        if fault == "drop":
            mine = mine[:-1]
        if fault == "duplicate" and rank == 0:
            mine = np.concatenate([mine, mine[:1]])
        return [torch.as_tensor(mine[i:i + batch]) for i in range(0, len(mine), batch)]

    report = audit(loader, world_size=world, epochs=epochs, expected=n, shuffle=shuffle,
                   in_process=True)
    doc = json.loads(json.dumps(report.to_dict()))
    text = repr(report)
    headline = text.splitlines()[0]
    problems = [(p["mark"], p["text"]) for p in doc["problems"]]
    assert problems == report.problems and doc["headline"] == headline
    marks = {m for m, _ in problems}
    assert doc["status"] == ("fail" if "✘" in marks else "warn" if "⚠" in marks else "pass")
    assert doc["exit_status"] == (1 if "✘" in marks else 0)
    # exactly once: an epoch line fails exactly when a count problem is in the headline
    failed_epochs = [e["exactly_once"]["ok"] is False for e in doc["epochs"]]
    counted = [t for m, t in problems if m == "✘" and t.split()[-1] in
               ("duplicated", "missing", "unexpected")]
    assert any(failed_epochs) == bool(counted)
    rows = dict(report.results["order"].rows) if "order" in report.results else {}
    order_problems = {"order repeats", "similar order across epochs", "not shuffled"}
    in_headline = {t for _, t in problems} & order_problems
    finding = doc["order"].get("finding")
    if shuffle is False or epochs < 2:
        assert not in_headline
    else:
        order_row = rows["order"].splitlines()[0]
        assert (order_row[0] in "✘⚠") == (finding is not None) == bool(
            in_headline or "not shuffled" in {t for _, t in problems})
        if finding is None:
            assert order_row.endswith("order changes every epoch")
        assert "order changes every epoch" not in order_row or not in_headline
    mixing = doc["shuffle"]
    if mixing is not None and "mixing" in rows:
        mixing_row = rows["mixing"].splitlines()[0]
        mixing_problem = {t for _, t in problems} & {"poorly mixed", "mixing unproven",
                                                     "mixing not measured", "not shuffled"}
        if mixing_row[0] == "✔":
            assert mixing["well_mixed"] and not mixing_problem - {"not shuffled"}
        if mixing_row[0] in "✘⚠":
            assert mixing_problem
        assert mixing["order_changes"] == (finding is None)
    for cause in doc["causes"]:
        assert all(part in headline for part in cause["finding"].split(" · "))


def test_each_line_starts_with_its_finding_and_the_statistics_follow_in_words():
    report = audit(all_ids, world_size=2, epochs=2, expected=14, in_process=True,
                   shuffle=True)
    lines = repr(report).splitlines()
    at = lines.index("  epoch 0  ✘ 12 duplicated · 2 missing")
    assert lines[at + 1:at + 4] == [
        "             14 expected · 12 unique · 24 read in all",
        "             duplicated: 0 ×2, 1 ×2, 2 ×2, 3 ×2, 4 ×2, 5 ×2, … (+6 more)",
        "             missing: 12, 13"]
    assert "order correlation (Spearman)" in repr(report) and "rank correlation" not in repr(report)
    html = report._repr_html_()
    assert "✘ 12 duplicated · 2 missing<details" in html   # its statistics fold away
    assert "<small>14 expected · 12 unique · 24 read in all</small>" in html
    good = audit(functools.partial(strided, n=64, batch_size=4, shuffle=True), world_size=2,
                 epochs=3, expected=64, in_process=True, shuffle=True)
    rows = dict(good.results["order"].rows)
    assert rows["mixing"].splitlines()[0] == "✔ well mixed"
    assert rows["mixing"].splitlines()[1].startswith("mixing score ")
    assert "a uniform shuffle scores about 1 ± " in rows["mixing"]


def test_html_lines_outside_the_table_name_their_epoch_and_show_a_shared_line_once():
    from talk_helpers.audit.report import _by_epoch

    workers = "✔ samples per worker: rank 0: 30, 20 · rank 1: 30, 20"
    shown = _by_epoch([[workers, "⚠ 1 of 4 workers idle"], [workers]])
    assert shown == ["✔ every epoch · samples per worker: rank 0: 30, 20 · rank 1: 30, 20",
                     "⚠ epoch 0 · 1 of 4 workers idle"]
    assert _by_epoch([[workers]]) == [workers]  # one epoch: nothing to tell apart


def test_options_come_as_one_object_or_as_keywords_and_an_unknown_one_is_named():
    from talk_helpers.audit import AuditOptions

    options = AuditOptions(epochs=1, expected=12, in_process=True)
    by_object = audit(strided, world_size=2, options=options)
    by_keywords = audit(strided, world_size=2, epochs=1, expected=12, in_process=True)
    assert repr(by_object) == repr(by_keywords)
    assert audit(strided, world_size=2, options=options, epochs=2).n_epochs == 2
    with pytest.raises(TypeError, match="no option 'reuse'.*'warm_world'"):
        audit(strided, world_size=2, reuse=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.epochs = 3
