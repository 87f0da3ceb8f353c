"""The library audit factories, and the library behaviours notebook 10 states."""

import functools
import tarfile

import numpy as np
import pytest

import talk_helpers.libraries as la
from talk_helpers.audit import audit

in_process = functools.partial(audit, world_size=2, epochs=2, expected=la.N_SAMPLES,
                               in_process=True)


def _fixed(rank, world_size, epoch, *, batches):
    return [np.array(b) for b in batches[rank]]


def test_wds_shards_hold_every_id_once_in_order_and_are_reused():
    paths = la.write_tar_shards((3, 2))
    ids = []
    for path in paths:
        with tarfile.open(path) as tar:
            ids += [int(tar.extractfile(m).read()) for m in tar.getmembers()]
    assert ids == [0, 1, 2, 3, 4]
    assert la.write_tar_shards((3, 2)) == paths


def test_resume_verdict_tells_exact_reordered_and_lossy_runs_apart():
    base = in_process(functools.partial(_fixed, batches=[[[0, 1], [2]], [[3], [4]]]),
                      expected=5)
    same = in_process(functools.partial(_fixed, batches=[[[0, 1], [2]], [[3], [4]]]),
                      expected=5)
    other = in_process(functools.partial(_fixed, batches=[[[2, 1], [0]], [[3], [4]]]),
                       expected=5)
    lossy = in_process(functools.partial(_fixed, batches=[[[0, 1], [1]], [[3], [4]]]),
                       expected=5)
    assert la.resume_verdict(base, same) == (True, "exact")
    assert la.resume_verdict(base, other) == (False, "wrong: same samples, other order")
    assert la.resume_verdict(base, lossy) == (False, "wrong: 2 lost · 2 repeated")


def test_table_marks_each_verdict():
    report = in_process(functools.partial(_fixed, batches=[[[0, 1], [2]], [[3, 4]]]),
                        expected=5)
    text = repr(la.AuditTable([la.LibraryRow("toy", report, report)]))
    assert "toy" in text and "✔ yes" in text and "✘ 2 / 1  hang" in text
    assert "✘ repeats" in text and "✔ exact" in text
    assert "<table>" in la.AuditTable([la.LibraryRow("toy", report)])._repr_html_()


def test_a_row_never_resumed_reads_not_tried_and_a_crash_reads_crashed():
    report = in_process(functools.partial(_fixed, batches=[[[0, 1], [2]], [[3], [4]]]),
                        expected=5)
    assert "not tried" in repr(la.AuditTable([la.LibraryRow("toy", report)]))
    assert "not supported" not in repr(la.AuditTable([la.LibraryRow("toy", report)]))

    class Crashed:      # what a real world's report holds when a rank raised
        world = None
        error = "rank 1: IndexError: list index out of range"

    crashed = Crashed()
    verdict = la.resume_verdict(report, crashed)
    assert verdict == (False, "crashed: IndexError: list index out of range")


def test_the_mixing_column_carries_the_verdicts_mark():
    rng = np.random.default_rng(0)
    orders = [rng.permutation(64) for _ in range(2)]

    def shuffled(rank, world_size, epoch, *, local):
        if local:   # each rank shuffles its own half: never mixed
            ids = np.random.default_rng(epoch).permutation(32) + 32 * rank
        else:
            ids = orders[epoch][rank::2]
        return [ids[i:i + 4] for i in range(0, 32, 4)]

    good = in_process(functools.partial(shuffled, local=False), expected=64, shuffle=True)
    bad = in_process(functools.partial(shuffled, local=True), expected=64, shuffle=True)
    text = repr(la.AuditTable([la.LibraryRow("good", good), la.LibraryRow("bad", bad)]))
    good_line, bad_line = text.splitlines()[1:]
    assert f"✔ {good.shuffle.mixing:.2f}" in good_line
    assert f"✘ {bad.shuffle.mixing:.2f}" in bad_line


def test_short_error_keeps_the_innermost_exception_only():
    class Failed:
        world = None
        error = ("rank 0: IndexError: Caught IndexError in DataLoader worker process <PID>. "
                 "Original Traceback: File \"/x.py\", line 3 IndexError: list index out of range")

    assert la.short_error(Failed()) == "IndexError: list index out of range"


@pytest.mark.parametrize(("num_shards", "counts"), [(4, (7, 6)), (3, (7, 6))])
def test_datasets_split_is_exactly_once_but_unbalanced(num_shards, counts):
    report = in_process(functools.partial(la.make_hf_loader, num_shards=num_shards,
                                          num_workers=0))
    assert all(c.exactly_once.ok for c in report.checks)
    assert report.checks[0].batch_counts.counts == counts


def test_datasets_set_epoch_before_the_split_is_lost():
    before = in_process(functools.partial(la.make_hf_loader, shuffle=True, num_workers=0,
                                          split_then_epoch=False))
    after = in_process(functools.partial(la.make_hf_loader, shuffle=True, num_workers=0))
    assert not any(before.order_changes[0]) and all(after.order_changes[0])


@pytest.mark.parametrize("transform", [
    lambda d: d.with_format("torch"), lambda d: d.map(lambda row: row),
    lambda d: d.shuffle(seed=1), lambda d: d.batch(2), lambda d: d.select_columns(["id"])])
def test_datasets_every_transform_returns_a_dataset_at_epoch_0(transform):
    shuffled = la.hf_iterable(num_shards=4, shuffle=True)
    shuffled.set_epoch(3)
    assert shuffled.epoch == 3 and transform(shuffled).epoch == 0


def test_datasets_set_epoch_before_a_transform_is_lost_and_last_it_holds():
    after = in_process(functools.partial(la.make_hf_loader, shuffle=True, num_workers=0,
                                         torch_format="after set_epoch"))
    before = in_process(functools.partial(la.make_hf_loader, shuffle=True, num_workers=0,
                                          torch_format="before set_epoch"))
    assert not any(after.order_changes[0]) and all(before.order_changes[0])
    with pytest.raises(ValueError, match="torch_format"):
        in_process(functools.partial(la.make_hf_loader, num_workers=0, torch_format="first"))


def test_a_fast_forward_over_a_freshly_seeded_shuffle_loses_and_repeats_samples():
    fresh = functools.partial(la.make_shuffled_iterable_stateful, seed=None)
    seeded = functools.partial(la.make_shuffled_iterable_stateful, seed=0)
    ok, verdict = la.resume_verdict(
        in_process(fresh, shuffle=True),
        in_process(functools.partial(la.make_resumed, build=fresh), shuffle=True))
    assert not ok and "lost" in verdict and "repeated" in verdict
    assert la.resume_verdict(
        in_process(seeded, shuffle=True),
        in_process(functools.partial(la.make_resumed, build=seeded), shuffle=True)) \
        == (True, "exact")
    assert la.common.job_start() == 0  # the simulated restart is over


def test_streaming_reads_its_world_from_the_environment_only():
    lines = la.streaming_world_source()
    assert "world.py: from streaming.base import distributed as dist" in lines
    assert "world.py: rank = dist.get_rank()" in lines
    assert "distributed.py: def get_rank(): return int(os.environ.get('RANK', 0))" in lines
    assert any("LOCAL_WORLD_SIZE" in line for line in lines)


def test_datasets_shuffle_keeps_its_shards_and_an_unseeded_split_does_not_raise():
    ds = la.hf_iterable(num_shards=4)
    assert ds.shuffle(seed=0, buffer_size=8).num_shards == 4
    from datasets.distributed import split_dataset_by_node

    assert list(split_dataset_by_node(ds.shuffle(buffer_size=8), rank=0, world_size=2))


def test_datasets_ranks_with_their_own_unseeded_shuffle_duplicate_and_miss_samples():
    report = in_process(functools.partial(la.make_hf_loader, shuffle=True, seed=None,
                                          num_workers=0))
    assert not report.checks[0].exactly_once.ok


@pytest.mark.timeout(600)
def test_webdataset_in_a_real_world_splits_shards_without_balance():
    report = audit(la.make_wds_loader, world_size=2, epochs=1, expected=la.N_SAMPLES,
                   timeout_s=500)
    assert report.error is None, report
    assert report.checks[0].exactly_once.ok
    assert report.checks[0].batch_counts.counts == (9, 5)


def _resume_pair(make, resumed, *, real=False, **kw):
    run = (functools.partial(audit, world_size=2, epochs=2, expected=la.N_SAMPLES,
                             timeout_s=500, **kw) if real else in_process)
    return run(make), run(resumed)


def test_torchdata_nodes_pads_one_repeat_keeps_ranks_equal_and_resumes_exactly():
    plain, resumed = _resume_pair(la.make_nodes_loader,
                                  functools.partial(la.make_resumed, build=la.make_nodes_loader))
    for check in plain.checks:
        assert len(check.exactly_once.duplicates) == 1 and not check.exactly_once.missing
        assert check.batch_counts.counts == (7, 7)
    assert all(plain.order_changes[0]) and all(plain.order_changes[1])
    assert la.resume_verdict(plain, resumed) == (True, "exact")


def test_streaming_partition_modules_load_without_the_package_init():
    import sys

    get_partitions, get_shuffle = la.streaming_modules()
    assert get_partitions.__module__ == "streaming.base.partition"
    assert "streaming.vision" not in sys.modules and "streaming.base.dataset" not in sys.modules


def test_streaming_pads_to_equal_ranks_shuffles_per_epoch_and_resumes_with_drop_first():
    plain, resumed = _resume_pair(la.make_streaming_loader, la.make_streaming_resumed)
    for check in plain.checks:
        assert len(check.exactly_once.duplicates) == 1 and not check.exactly_once.missing
        assert check.batch_counts.counts == (7, 7)
    assert all(plain.order_changes[0]) and all(plain.order_changes[1])
    assert la.resume_verdict(plain, resumed) == (True, "exact")


@pytest.mark.timeout(600)
def test_litdata_drops_the_remainder_by_default_and_resumes_exactly():
    plain, resumed = _resume_pair(
        la.make_litdata_loader, functools.partial(la.make_resumed, build=la.make_litdata_loader),
        real=True)
    assert plain.error is None, plain
    for check in plain.checks:
        assert len(check.exactly_once.missing) == 1 and not check.exactly_once.duplicates
        assert check.batch_counts.counts == (6, 6)
    assert all(plain.order_changes[0]) and all(plain.order_changes[1])
    assert la.resume_verdict(plain, resumed) == (True, "exact")


@pytest.mark.timeout(600)
def test_litdata_without_drop_last_reads_everything_but_ranks_differ():
    report = audit(functools.partial(la.make_litdata_loader, drop_last=False), world_size=2,
                   epochs=1, expected=la.N_SAMPLES, timeout_s=500)
    assert report.error is None, report
    assert report.checks[0].exactly_once.ok
    assert report.checks[0].batch_counts.counts == (6, 7)


@pytest.mark.timeout(600)
def test_litdata_shuffle_keeps_chunks_together():
    report = audit(la.make_litdata_loader, world_size=2, epochs=2, expected=la.N_SAMPLES,
                   shuffle=True, timeout_s=500)
    assert report.poorly_mixed and report.shuffle.mixing < 0.3


def test_guide_pattern2_silently_drops_the_shards_left_after_integer_division():
    report = in_process(la.make_guide_pattern2, shuffle=False)
    assert len(report.checks[0].exactly_once.missing) == la.GUIDE_SHARDS[-1]
    assert report.checks[0].batch_counts.counts == (5, 5)
    fixed = in_process(functools.partial(la.make_guide_pattern2,
                                         load=la.load_sharded_round_robin), shuffle=False)
    assert fixed.checks[0].exactly_once.ok and fixed.checks[0].batch_counts.counts == (8, 5)


@pytest.mark.timeout(600)
def test_guide_webdataset_pattern_raises_under_ddp_and_with_a_node_splitter_rereads_shards():
    raw = audit(la.make_guide_pattern3, world_size=2, epochs=1, expected=la.N_SAMPLES,
                timeout_s=500)
    assert "explicit nodesplitter" in la.short_error(raw)
    split = audit(functools.partial(la.make_guide_pattern3, split_nodes=True), world_size=2,
                  epochs=1, expected=la.N_SAMPLES, timeout_s=500)
    once = split.checks[0].exactly_once
    assert split.error is None and len(once.duplicates) == la.N_SAMPLES and not once.missing
    # with_epoch(61 // 2) counts batches per worker: 30 × 2 workers on each rank
    assert split.checks[0].batch_counts.counts == (60, 60)


@pytest.mark.timeout(600)
def test_litdata_in_a_plain_dataloader_repeats_its_order_every_epoch():
    report = audit(functools.partial(la.make_litdata_loader, plain_dataloader=True),
                   world_size=2, epochs=2, expected=la.N_SAMPLES, shuffle=True, timeout_s=500)
    assert report.error is None, report
    assert report.order_repeats and not any(report.order_changes[0])


def test_table_does_not_fault_an_unshuffled_loader_for_repeating_its_order():
    report = in_process(functools.partial(_fixed, batches=[[[0, 1], [2]], [[3], [4]]]),
                        expected=5, shuffle=False)
    text = repr(la.AuditTable([la.LibraryRow("plain", report)]))
    assert "repeats (no shuffle asked)" in text and "✘ repeats" not in text


def test_a_litdata_folder_that_optimize_left_incomplete_is_never_kept(tmp_path, monkeypatch):
    import litdata

    from talk_helpers.libraries import litdata_loaders

    def writes_only_an_index(fn, inputs, output_dir, **_):
        import json
        import os

        os.makedirs(output_dir)
        with open(os.path.join(output_dir, "index.json"), "w") as f:
            json.dump({"chunks": [{"filename": "chunk-0-0.bin", "chunk_size": 8}]}, f)

    monkeypatch.setattr(litdata_loaders, "cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(litdata, "optimize", writes_only_an_index)
    with pytest.raises(RuntimeError, match="wrote 0 of 61 ids"):
        litdata_loaders.litdata_dir(61, 8)
    assert list(tmp_path.iterdir()) == []  # nothing a later call would take as built
