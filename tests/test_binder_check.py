"""`make binder-check` runs each notebook in a pod like a Binder visitor's: checked here
with a notebook that reports what it sees from inside."""

import json
import os
import pwd
import sys
import tempfile

import nbformat
import pytest

from benchmarks import binder_check

PROBE = """
import json, os, pathlib, tempfile
shm = os.statvfs("/dev/shm")
print(json.dumps({"uid": os.getuid(), "shm_mib": shm.f_blocks * shm.f_frsize // 2**20,
                  "tmp": tempfile.gettempdir(), "tmp_entries": os.listdir("/tmp"),
                  "home_is_mine": pathlib.Path.home().stat().st_uid == os.getuid()}))
"""


@pytest.fixture(scope="module")
def pod():
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the pod needs root on Linux (make binder-check says what it applied)")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' to visit the pod as (make binder-check makes its own)")
    return binder_check.prepare_pod(visitor="nobody")


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


def test_a_notebook_in_the_pod_runs_as_a_visitor_with_64_mib_of_shm_and_its_own_tmp(
        pod, tmp_path):
    assert [m for m in pod.missing if not m.startswith("a /tmp of its own")] == [], \
        pod.describe()
    probe = _notebook(tmp_path / "probe.ipynb", PROBE)
    marker = tempfile.NamedTemporaryFile(dir="/tmp", prefix="outside-the-pod-")
    run = binder_check.run_notebook(probe, pod)
    marker.close()
    assert run.ok, run.error
    seen = json.loads(run.outputs[0])
    assert seen["uid"] == pod.user.pw_uid != 0
    assert seen["shm_mib"] == 64
    assert seen["home_is_mine"]
    if pod.own_tmp_mount:  # (not when the checkout itself lives in /tmp)
        assert seen["tmp"] == "/tmp"
        assert os.path.basename(marker.name) not in seen["tmp_entries"]
    assert 0 < run.peak_bytes < binder_check.MEMORY_BYTES


def test_a_notebook_that_needs_more_than_2_gib_is_reported_as_killed(pod, tmp_path):
    hog = _notebook(tmp_path / "hog.ipynb", "block = bytearray(3 * 2**30)")
    run = binder_check.run_notebook(hog, pod)
    assert not run.ok
    assert run.oom_kills >= 1 or "MemoryError" in run.error
