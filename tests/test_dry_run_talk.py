"""`make dry-run` (scripts/dry_run_talk.py): what it judges. Times are judged only on a quiet
machine; an error always fails; the load is printed beside the times."""

import importlib.util
import os
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "dry_run_talk", Path(__file__).resolve().parents[1] / "scripts/dry_run_talk.py")
dry_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dry_run)

CORES = os.cpu_count() or 1
QUIET, LOADED = 0.0, 4.0 * CORES


def rows(load: float, *, setup_s: float = 1.0, demo_s: float = 1.0, error: bool = False):
    setup = {"cell": 1, "seconds": setup_s, "target": float("inf"), "error": False,
             "first_line": "start_talk()", "shown": True, "load": load, "setup_target": 8.0}
    demo = {"cell": 5, "seconds": demo_s, "target": 3.0, "error": error,
            "first_line": "batches = ...", "shown": True, "load": load}
    return [setup, demo]


@pytest.mark.parametrize(("load", "failures"), [(QUIET, 2), (LOADED, 0)])
def test_a_slow_demo_and_set_up_fail_only_on_a_quiet_machine(load, failures):
    text, bad = dry_run.report({"fork": rows(load, setup_s=9.0, demo_s=5.0)})
    assert bad == failures
    assert f"load {load:.1f} on {CORES} cores" in text
    assert "set-up 9.0 s > 8 s" in text and "cell 5" in text


def test_an_error_fails_even_on_a_loaded_machine():
    _, bad = dry_run.report({"fork": rows(LOADED, error=True)})
    assert bad == 1


def test_a_path_that_is_only_reported_never_fails_for_time():
    _, bad = dry_run.report({"spawn": rows(QUIET, demo_s=5.0)})
    assert bad == 0
