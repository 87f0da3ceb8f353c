"""Notebook 11's machinery in real processes: worker memory, a private /dev/shm, resumes."""

import functools
import os

import production_datasets as pd
import pytest

from talk_helpers.checks import (
    batch_bytes,
    check_resume,
    check_shm_budget,
    check_worker_memory,
)
from talk_helpers.lessons.resume_run import epochs_taken
from talk_helpers.lessons.small_shm import compare_in_small_shm, run_in_small_shm
from talk_helpers.lessons.worker_memory import measure_worker_memory

MIB = 2**20


# ----------------------------------------------------------------- worker memory


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_reading_a_python_list_each_own_a_copy_of_it(method):
    dataset = pd.ListCaptions(20_000)
    measured = measure_worker_memory(dataset, multiprocessing_context=method)
    assert [m.worker for m in measured] == [0, 1]
    assert [m.samples for m in measured] == [10_000, 10_000]
    assert not check_worker_memory([m.owned for m in measured], dataset).ok


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_reading_tensors_share_them(method):
    dataset = pd.TensorCaptions(20_000)
    measured = measure_worker_memory(dataset, multiprocessing_context=method)
    assert check_worker_memory([m.owned for m in measured], dataset).ok


def test_measuring_worker_memory_names_a_bad_argument():
    with pytest.raises(ValueError, match="num_workers"):
        measure_worker_memory(pd.ListCaptions(10), num_workers=0)
    with pytest.raises(TypeError, match="dataset"):
        measure_worker_memory(3)


# ----------------------------------------------------------------- a private /dev/shm


def _private_shm_works() -> bool:
    return run_in_small_shm(pd.raising_loader, shm_bytes=64 * MIB).status != "unavailable"


needs_private_shm = pytest.mark.skipif(
    os.uname().sysname != "Linux" or not _private_shm_works(),
    reason="this machine cannot give a process a private /dev/shm (needs root or user "
           "namespaces)")


@needs_private_shm
def test_float_batches_beyond_a_small_dev_shm_fail_with_no_space_left():
    run = run_in_small_shm(pd.image_loader, shm_bytes=64 * MIB)
    assert run.status == "failed" and "No space left on device" in run.error
    assert "</torch_…>" in run.error  # the file name, which changes every run, is masked


@needs_private_shm
def test_uint8_batches_fit_and_the_peak_is_at_most_what_the_budget_predicts():
    run = run_in_small_shm(pd.uint8_image_loader, shm_bytes=256 * MIB)
    size = batch_bytes(next(iter(pd.uint8_image_loader())))
    predicted = check_shm_budget(size, num_workers=2, shm_bytes=256 * MIB)
    assert run.ok and run.batches == 8
    # 2 workers × 2 waiting and the loop's batch, and at times the one before it
    assert round(run.peak_bytes / size) in (5, 6)
    assert run.peak_bytes <= predicted.needed_bytes + size / 10


@needs_private_shm
def test_lazily_reserved_shared_memory_kills_a_worker_with_sigbus():
    run = run_in_small_shm(pd.frame_loader, shm_bytes=12 * MIB)
    assert run.status == "failed" and run.worker_signals == ("SIGBUS",)
    assert "killed by SIGBUS (Bus error)" in repr(run)


@needs_private_shm
def test_a_factory_that_raises_is_reported_not_raised():
    run = run_in_small_shm(pd.raising_loader, shm_bytes=64 * MIB)
    assert run.status == "failed" and run.error == "ValueError: no loader today"


def test_a_small_dev_shm_run_names_a_bad_argument():
    with pytest.raises(TypeError, match="make_loader"):
        run_in_small_shm(3, shm_bytes=64 * MIB)
    with pytest.raises(ValueError, match="shm_bytes"):
        run_in_small_shm(pd.image_loader, shm_bytes=10)
    with pytest.raises(ValueError, match="step_s"):
        run_in_small_shm(pd.image_loader, shm_bytes=64 * MIB, step_s=-1)


# ----------------------------------------------------------------- resume


STOPS = [(0, 5), (0, 12), (0, "end")]


@pytest.mark.parametrize("stop", STOPS)
def test_a_skip_that_names_no_epoch_loses_data_in_the_next_epoch(stop):
    make = functools.partial(pd.ResumableIds, 12)
    reference = epochs_taken(make, epochs=2, num_workers=0)
    report = check_resume(reference, epochs_taken(make, epochs=2, stop=stop, num_workers=0))
    assert not report.ok and report.epochs[1].missing


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("stop", STOPS)
def test_a_resume_point_with_its_epoch_resumes_exactly(stop, persistent):
    make = functools.partial(pd.EpochResumable, 12)
    run = functools.partial(epochs_taken, make, epochs=2, num_workers=1,
                            persistent_workers=persistent)
    assert check_resume(run(), run(stop=stop)).status == "pass"


def test_an_uninterrupted_run_takes_every_id_every_epoch():
    assert epochs_taken(functools.partial(pd.EpochResumable, 4), epochs=2) == \
        [[0, 1, 2, 3], [0, 1, 2, 3]]


def test_epochs_taken_names_a_bad_stop():
    make = functools.partial(pd.EpochResumable, 4)
    with pytest.raises(TypeError, match="stop"):
        epochs_taken(make, epochs=2, stop=3)
    with pytest.raises(ValueError, match=r"stop\[0\]"):
        epochs_taken(make, epochs=2, stop=(2, 1))
    with pytest.raises(ValueError, match=r"stop\[1\]"):
        epochs_taken(make, epochs=2, stop=(0, 0))




# ----------------------------------------------------------------- the dataset in /dev/shm


@needs_private_shm
def test_a_packed_tensor_fails_a_small_dev_shm_under_spawn_and_forkserver_not_fork(tmp_path):
    """About 100 MiB of captions: a 64 MiB container /dev/shm holds them only when the
    worker inherits them (fork); mapped from files they fit under every start method."""
    folder = pd.write_caption_files(190_000, tmp_path)
    n_bytes = os.path.getsize(tmp_path / "bytes.npy")
    assert n_bytes > 64 * MIB
    p = functools.partial
    table = compare_in_small_shm(
        {"packed": p(pd.caption_loader, p(pd.TensorCaptions, 190_000)),
         "mapped": p(pd.caption_loader, p(pd.MappedCaptions, folder))},
        shm_bytes=64 * MIB)
    assert table.runs[("packed", "fork")].ok
    for method in ("forkserver", "spawn"):
        run = table.runs[("packed", method)]
        assert run.status == "failed" and "No space left on device" in run.error, run
    assert all(table.runs[("mapped", m)].ok for m in ("fork", "forkserver", "spawn")), table
    assert [table.runs[("mapped", m)].batches for m in ("fork", "forkserver", "spawn")] == [4] * 3
    assert table.cell("packed", "spawn") == "✘ No space left on device"
    assert table.cell("mapped", "spawn") == "✔ 4 batches"


@needs_private_shm
def test_a_small_dev_shm_run_starts_its_own_forkserver_when_the_caller_has_one(tmp_path):
    """A forked run process used to keep its caller's fork server: its forkserver workers
    failed with ECHILD (or would have come from a server outside the small /dev/shm)."""
    from multiprocessing import forkserver

    forkserver.ensure_running()   # as an earlier forkserver loader in this process leaves it
    folder = pd.write_caption_files(20_000, tmp_path)
    loader = functools.partial(pd.caption_loader, functools.partial(pd.MappedCaptions, folder))
    table = compare_in_small_shm({"mapped": loader}, shm_bytes=64 * MIB,
                                 start_methods=("forkserver",))
    assert table.cell("mapped", "forkserver") == "✔ 4 batches", table


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_reading_mapped_files_own_no_copy(method, tmp_path):
    folder = pd.write_caption_files(20_000, tmp_path)
    payload = sum(os.path.getsize(tmp_path / name) for name in ("bytes.npy", "ends.npy"))
    measured = measure_worker_memory(pd.MappedCaptions(folder), multiprocessing_context=method)
    assert payload >= 8 * MIB  # large enough for the check to judge
    assert check_worker_memory([m.owned for m in measured], payload).ok


def test_a_comparison_in_a_small_dev_shm_names_a_bad_argument():
    with pytest.raises(TypeError, match="loaders"):
        compare_in_small_shm({}, shm_bytes=64 * MIB)
    with pytest.raises(TypeError, match=r"loaders\['a'\]"):
        compare_in_small_shm({"a": 3}, shm_bytes=64 * MIB)
    with pytest.raises(ValueError, match="start_methods"):
        compare_in_small_shm({"a": pd.image_loader}, shm_bytes=64 * MIB, start_methods=("thread",))
    with pytest.raises(ValueError, match="batches"):
        compare_in_small_shm({"a": pd.image_loader}, shm_bytes=64 * MIB, batches=0)
