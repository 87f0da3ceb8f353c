"""`make test`'s scheduler (tests/stages.py): which stage starts first, how many run at once,
and that every stage runs whatever another one did. Fake stages, no Makefile target run."""

import json
import threading

import pytest
import stages


def test_the_longest_stage_starts_first_and_the_last_run_s_times_override_the_defaults(
        tmp_path):
    times = tmp_path / "times.json"
    times.write_text('{"soak": 99999}')
    expected = stages.expected_seconds(stages.STAGES, times)
    order = stages.longest_first(stages.STAGES, expected)
    assert order[0] == "soak"
    assert order[1:] == sorted((n for n in stages.STAGES if n != "soak"),
                               key=lambda n: -stages.EXPECTED_S[n])


def test_a_stage_with_no_time_yet_starts_before_every_measured_one(tmp_path):
    expected = stages.expected_seconds(("unit", "brand-new"), tmp_path / "absent.json")
    assert stages.longest_first(("unit", "brand-new"), expected) == ["brand-new", "unit"]


def test_a_full_lane_takes_the_next_stage_only_when_its_last_one_ends():
    # Two lanes: "a" and "b" must run at the same time (each waits for the other at the
    # barrier); "c" starts only after one of them ended, in the lane that freed.
    together = threading.Barrier(2, timeout=120)
    running, events = set(), []
    lock = threading.Lock()

    def run(stage):
        with lock:
            events.append(("start", stage.name, frozenset(running)))
            running.add(stage.name)
        if stage.name in ("a", "b"):
            together.wait()
        with lock:
            running.discard(stage.name)
            events.append(("end", stage.name, frozenset(running)))
        stage.status = 0

    jobs = [stages.Stage(name) for name in ("a", "b", "c")]
    stages.run_lanes(jobs, 2, run)
    starts = [e for e in events if e[0] == "start"]
    assert {e[1] for e in starts[:2]} == {"a", "b"}
    c_start = events.index(next(e for e in events if e[:2] == ("start", "c")))
    assert any(e[0] == "end" and e[1] in ("a", "b") for e in events[:c_start])
    assert len(events[c_start][2]) <= 1  # never three at once
    assert {s.lane for s in jobs} == {1, 2}


def test_every_stage_runs_after_one_fails_or_crashes():
    ran = []

    def run(stage):
        ran.append(stage.name)
        if stage.name == "crashes":
            raise RuntimeError("the stage's runner broke")
        stage.status = 1 if stage.name == "fails" else 0

    jobs = [stages.Stage(name) for name in ("fails", "crashes", "x", "y")]
    stages.run_lanes(jobs, 1, run)
    assert ran == ["fails", "crashes", "x", "y"]
    assert [s.status for s in jobs] == [1, 3, 0, 0]
    assert "FAILED" in stages.table(jobs, 0.0, 0, 1.0).splitlines()[-1]


def test_a_stage_that_needs_no_set_up_runs_beside_it_and_the_others_wait_for_it():
    setup_done = threading.Event()
    order = []

    def run(stage):
        order.append((stage.name, setup_done.is_set()))
        if stage.name == "binder-build-check":
            setup_done.set()  # the set-up ends while this stage runs
        stage.status = 0

    jobs = [stages.Stage(name) for name in ("unit", "binder-build-check", "lint")]
    stages.run_lanes(jobs, 2, run, waits_for_setup={"unit", "lint"}, setup_done=setup_done)
    assert order[0] == ("binder-build-check", False)
    assert sorted(order[1:]) == [("lint", True), ("unit", True)]


def test_the_makefile_s_stages_that_need_the_venv_wait_for_the_set_up():
    waits = stages.needs_setup(stages.makefile_rules())
    assert set(stages.STAGES) - waits == {"binder-build-check"}
    assert set(stages.STAGES) <= stages.makefile_targets()


def test_a_stage_that_needs_a_failed_set_up_fails_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "LOGS", tmp_path)
    monkeypatch.setattr(stages, "ROOT", tmp_path)
    stage = stages.Stage("unit")
    stages.run_stage(stage, 0.0, "make", lambda text: None, targets={"unit"},
                     setup_failed=True)
    assert stage.status == 4
    assert "`make setup` failed" in stage.log.read_text()


def test_test_lanes_is_a_whole_number_of_one_or_more():
    assert stages.lanes_from_env(None) == stages.LANES
    assert stages.lanes_from_env("2") == 2
    for bad in ("0", "two", "-1", "1.5"):
        with pytest.raises(SystemExit, match="TEST_LANES"):
            stages.lanes_from_env(bad)


def test_a_name_with_no_makefile_target_fails_as_its_own_stage(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "LOGS", tmp_path)
    monkeypatch.setattr(stages, "ROOT", tmp_path)
    stage = stages.Stage("no-such-target")
    stages.run_stage(stage, 0.0, "make", lambda text: None, targets={"unit"})
    assert stage.status == 2
    assert "no target 'no-such-target'" in stage.log.read_text()


@pytest.mark.subprocesses
def test_a_stage_s_cpu_time_counts_its_children(tmp_path, monkeypatch):
    makefile = tmp_path / "Makefile"
    makefile.write_text("burn:\n\tpython3 -c 'sum(range(3_000_000))'\n")
    monkeypatch.setattr(stages, "ROOT", tmp_path)
    with open(tmp_path / "log", "w") as log:
        status, cpu_s = stages.run_make("burn", log, "make")
    assert status == 0
    assert cpu_s > 0


@pytest.mark.subprocesses
def test_make_test_runs_every_stage_after_one_fails_and_ends_with_the_table(
        tmp_path, monkeypatch, capsys):
    fake_make = tmp_path / "make"
    fake_make.write_text('#!/bin/sh\necho "ran $2"\n[ "$2" != unit ]\n')
    fake_make.chmod(0o755)
    monkeypatch.setenv("MAKE", str(fake_make))
    monkeypatch.setattr(stages, "ROOT", tmp_path)
    monkeypatch.setattr(stages, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(stages, "TIMES", tmp_path / "logs" / "times.json")
    assert stages.main([]) == 1
    out = capsys.readouterr().out
    for name in stages.STAGES:
        assert (tmp_path / "logs" / f"{name}.log").read_text() == f"ran {name}\n"
        assert f"| {name} |" in out
    assert "| unit |" in out and "FAILED (1)" in out
    assert set(json.loads((tmp_path / "logs" / "times.json").read_text())) == set(stages.STAGES)
