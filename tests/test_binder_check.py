"""`make binder-check` runs each notebook in a pod like a Binder visitor's: checked here
with a notebook that reports what it sees from inside."""

import json
import multiprocessing
import os
import pwd
import sys
import tempfile
from pathlib import Path

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


WORKER_BATCHES = """
import json, tempfile, torch
from torch.utils.data import DataLoader, TensorDataset
# tensors from a worker travel through shared memory and a socket in the temporary folder
batches = list(DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=1))
print(json.dumps({"batches": len(batches), "tmp": tempfile.gettempdir()}))
"""


def _deep_checkout(outer: str, source: str) -> tuple[str, str]:
    """A checkout of binder_check alone, nested past the socket path limit, with one
    notebook of one cell: (its root, the notebook)."""
    import shutil

    deep = os.path.join(outer, "nested-checkout-" + "x" * 40, "y" * 60)
    assert len(deep) > binder_check.SOCKET_PATH_MAX
    os.makedirs(os.path.join(deep, "benchmarks"))
    os.makedirs(os.path.join(deep, "notebooks"))
    for name in ("__init__.py", "binder_check.py"):
        shutil.copy(binder_check.ROOT / "benchmarks" / name, os.path.join(deep, "benchmarks", name))
    return deep, _notebook(os.path.join(deep, "notebooks", "probe.ipynb"), source)


def _left_behind(deep: str, before: set[str], pid: int) -> list[str]:
    """Folders, cgroups the check made for run ``pid``, still there."""
    left = [n for n in set(os.listdir("/tmp")) - before if n.startswith(("bc-", "binder-check-"))]
    if os.path.exists(os.path.join(deep, "build", "binder-check")):
        left.append("build/binder-check")
    cgroups = Path("/sys/fs/cgroup")
    left += [str(p) for p in cgroups.glob(f"**/binder-check-{pid}-*")]
    return left


def test_a_checkout_nested_past_the_socket_path_limit_still_runs_its_notebooks():
    """From a checkout whose path alone is longer than an AF_UNIX socket path may be (in a
    folder closed to others, as `mktemp -d` makes), the notebook's DataLoader workers start
    and hand over their batches (nothing waits forever); nothing is left behind."""
    import shutil
    import subprocess

    from talk_helpers.runtime.start_cost import time_limit_s

    outer = tempfile.mkdtemp(prefix="binder-check-deep-")
    try:
        deep, probe = _deep_checkout(outer, WORKER_BATCHES)
        before = set(os.listdir("/tmp"))
        check = subprocess.Popen([sys.executable, "-m", "benchmarks.binder_check", probe],
                                 cwd=deep, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, env={**os.environ, "PYTHONPATH": deep})
        out, _ = check.communicate(timeout=time_limit_s(60, interpreters=4))
        assert check.returncode == 0, out
        assert "✔ probe.ipynb" in out
        assert _left_behind(deep, before, check.pid) == []
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def _cmdline(process) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:  # gone, or a zombie, meanwhile
        return []


def test_a_check_stopped_mid_notebook_leaves_no_process_cgroup_or_folder():
    import shutil
    import signal
    import subprocess
    import time

    import psutil

    from talk_helpers.runtime.start_cost import time_limit_s

    outer = tempfile.mkdtemp(prefix="binder-check-deep-")
    try:
        deep, sleeper = _deep_checkout(outer, "import time\ntime.sleep(3600)")
        before = set(os.listdir("/tmp"))
        check = subprocess.Popen([sys.executable, "-m", "benchmarks.binder_check", sleeper],
                                 cwd=deep, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": deep})
        deadline = time.monotonic() + time_limit_s(30, interpreters=3)
        kernel = []
        while not kernel and time.monotonic() < deadline and check.poll() is None:
            time.sleep(0.5)
            kernel = [p for p in psutil.Process(check.pid).children(recursive=True)
                      if "ipykernel" in " ".join(_cmdline(p))]
        assert kernel, "the notebook's kernel never started"
        tree = psutil.Process(check.pid).children(recursive=True)
        check.send_signal(signal.SIGTERM)
        check.wait(timeout=time_limit_s(30))
        gone, alive = psutil.wait_procs(tree, timeout=10)
        assert alive == []
        assert _left_behind(deep, before, check.pid) == []
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def test_a_worker_that_cannot_start_is_reported_with_its_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path / ("z" * 110)))
    (tmp_path / ("z" * 110)).mkdir()
    # as in the pod's fresh process: no folder for sockets yet (an earlier test in this
    # process may have made one under a short TMPDIR, which multiprocessing then reuses)
    monkeypatch.delitem(multiprocessing.process.current_process()._config, "tempdir",
                        raising=False)
    tempfile.tempdir = None
    try:
        why = binder_check.worker_cannot_start()
    finally:
        tempfile.tempdir = None
    assert "socket cannot be made" in why and "too long" in why
