"""Slow is not wrong: a grader whose workers or ranks are slow to start, or slow to give
their first sample, waits for them as long as this machine needs, and when they still do
not answer it says so (⌛ not graded, run it again), never that the learner's code raised
or is wrong."""

import functools
import time

import pytest
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.exercises import Grade, GradeFailure, attempted, loading, not_graded, start_up
from talk_helpers.exercises.ranks import grade_whole_dataset
from talk_helpers.exercises.workers import grade_worker_sharding

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def _worker():
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class SleepsBeforeFirstSample(IterableDataset):
    """A right answer to 02.3 whose workers sleep before their first sample, as a worker
    on a busy laptop may take that long to get going."""

    SLEEP_S = 2.0

    def __init__(self, size):
        self.size = size

    def __iter__(self):
        worker, workers = _worker()
        if get_worker_info() is not None:
            time.sleep(self.SLEEP_S)
        yield from range(worker, self.size, workers)


class SlowToUnpickle(IterableDataset):
    """A dataset a spawned worker takes long to receive: its interpreter is up, the worker
    not yet started."""

    def __init__(self, size, sleep_s):
        self.size, self.sleep_s = size, sleep_s

    def __setstate__(self, state):
        time.sleep(state["sleep_s"])
        self.__dict__.update(state)

    def __iter__(self):
        worker, workers = _worker()
        yield from range(worker, self.size, workers)


@pytest.fixture
def impatient(monkeypatch):
    """Allowances of about a second, so that a test sees them run out quickly."""
    monkeypatch.setattr(start_up, "START_FLOOR_S", 0.5)
    monkeypatch.setattr(start_up, "STALL_FLOOR_S", 0.5)
    monkeypatch.setattr(start_up, "START_FACTOR", 0.0)
    monkeypatch.setattr(loading, "START_FLOOR_S", 0.5)


def test_a_worker_that_sleeps_before_its_first_sample_still_passes():
    grade = grade_worker_sharding(SleepsBeforeFirstSample)
    assert grade.ok, grade


def test_when_the_allowance_runs_out_the_grade_is_not_graded_never_not_yet(impatient):
    grade = grade_worker_sharding(SleepsBeforeFirstSample)
    assert grade.passed is None and grade.late, grade
    shown = repr(grade)
    assert shown.startswith("⌛ exercise 02.3 not graded: with num_workers=2, the workers "
                            "started, then gave no batch for"), shown
    assert "run the grader again" in shown
    assert "raised" not in shown and "✘" not in shown and "timed out" not in shown
    assert attempted("02.3")  # a late grade opens the solution too


def test_workers_slow_to_start_read_as_slow_to_start(impatient):
    unpickle_s = 90  # what one worker takes to receive its dataset
    loader = loading.recording_loader(SlowToUnpickle(8, sleep_s=unpickle_s), batch_size=2,
                                      num_workers=2, multiprocessing_context="spawn")
    started = time.monotonic()
    with pytest.raises(GradeFailure) as failure:
        loading.read_loader("02.3", loader, where="with num_workers=2", max_batches=10)
    grade = failure.value.grade
    assert grade.late and grade.passed is None, grade
    assert "with num_workers=2, the workers took more than" in grade.message
    assert "to start (0 of 2 started)" in grade.message
    assert "spawn worker starts Python and imports torch, about" in grade.message
    assert "run the grader again" in grade.message
    assert time.monotonic() - started < unpickle_s, "gave up before the workers could start"


def test_the_allowance_follows_the_start_method_and_the_measured_cost(monkeypatch):
    monkeypatch.setattr(start_up, "_seen", {})
    fork = start_up.start_allowance_s("fork", 2)
    assert fork == pytest.approx(start_up.START_FLOOR_S
                                 + start_up.START_FACTOR * start_up.FORK_COST_S)
    measured = start_up.start_cost_s("spawn", wait=True)
    assert measured > start_up.FORK_COST_S  # an interpreter that imports torch, timed
    spawn = start_up.start_allowance_s("spawn", 2)
    assert spawn == pytest.approx(start_up.START_FLOOR_S + start_up.START_FACTOR * measured)
    start_up.note_start("spawn", 10 * measured)  # a slower start seen raises the cost
    assert start_up.start_allowance_s("spawn", 2) > spawn


def test_a_late_grade_says_so_in_text_and_html():
    grade = not_graded("03.1", "the workers took more than 40 s to start", "look again")
    assert isinstance(grade, Grade) and not grade.ok
    assert repr(grade) == ("⌛ exercise 03.1 not graded: the workers took more than 40 s to "
                           "start\n  hint: look again")
    assert "not graded" in grade._repr_html_() and "look again" in grade._repr_html_()


class SleepsInEveryRank(IterableDataset):
    def __init__(self, size, rank, world_size):
        self.size, self.rank, self.world_size = size, rank, world_size

    def set_epoch(self, epoch):
        pass

    def __iter__(self):
        worker, workers = _worker()
        if get_worker_info() is not None:
            time.sleep(30)
        slot, slots = self.rank * workers + worker, self.world_size * workers
        yield from range(slot, self.size - self.size % 4, slots)


def _sleepy_loader(rank, world_size, epoch):
    return DataLoader(SleepsInEveryRank(64, rank, world_size), batch_size=4, num_workers=2)


@pytest.mark.distributed
def test_an_audit_past_its_deadline_is_not_graded_with_where_each_rank_was():
    grade = grade_whole_dataset(functools.partial(_sleepy_loader), size=64, equal_by="drop",
                                timeout_s=4)
    assert grade.late and grade.passed is None, grade
    assert "did not finish within 4 s (rank 0: " in grade.message
    assert "run the grader again" in grade.message and "raised" not in grade.message


def test_the_audit_deadline_grows_with_the_cost_of_a_start(monkeypatch):
    monkeypatch.setattr(start_up, "_seen", {"fork": 0.1})
    monkeypatch.setenv("TALK_START_METHOD", "fork")
    quick = start_up.audit_deadline_s(2, 2, 2)  # 05.4: 2 ranks × 2 workers, 2 epochs
    start_up.note_start("fork", 5.0)
    assert start_up.audit_deadline_s(2, 2, 2) > quick + 5


@pytest.mark.distributed
def test_06_4_past_its_deadline_is_not_graded_never_not_yet(monkeypatch):
    from talk_helpers.exercises import uneven_batches

    monkeypatch.setattr(start_up, "audit_deadline_s", lambda **_: 4.0)
    grade = uneven_batches.grade_even_loader(functools.partial(_sleepy_loader))
    assert grade.late and grade.passed is None, grade
    assert "did not finish within 4 s" in grade.message and "raised" not in grade.message


def test_a_slow_grader_says_what_it_waits_for_before_its_verdict(capsys):
    grade = grade_worker_sharding(SleepsBeforeFirstSample)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("⏳")]
    assert grade.ok, grade
    with_workers = [n for n in (0, 2, 3, 1) if n]  # the grader's reads that start workers
    assert len(said) == len(with_workers), said
    for line, workers in zip(said, with_workers, strict=True):
        assert line.startswith(f"⏳ exercise 02.3: with num_workers={workers}: waiting for "
                               f"{workers} "), line
        assert line.endswith("workers to start and read your dataset…"), line


def test_in_a_notebook_the_announcement_is_emptied_so_stored_outputs_hold_none(monkeypatch):
    shown = []

    class Handle:
        def update(self, data, raw):
            shown.append(data)

    def display(data, raw, display_id):
        shown.append(data)
        return Handle()

    import IPython.display

    import talk_helpers.exercises as exercises

    monkeypatch.setattr(exercises, "in_notebook", lambda: True)
    monkeypatch.setattr(IPython.display, "display", display)
    with exercises.announce("02.3", "waiting for 2 spawn workers"):
        assert shown[-1] == {"text/plain": "⏳ exercise 02.3: waiting for 2 spawn workers…"}
    assert shown[0] == {} and shown[-1] == {}, "what nbval compares holds no trace of it"
