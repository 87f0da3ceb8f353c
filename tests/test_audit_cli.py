"""python -m talk_helpers.audit: exit status, plain and JSON reports, torchrun, deadlines."""

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from talk_helpers.audit import cli as audit_cli

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

FACTORIES = textwrap.dedent('''
    import os
    import time

    from torch.utils.data import DataLoader

    def sharded(rank, world_size, epoch):
        return DataLoader(list(range(rank, 20, world_size)), batch_size=5)

    def unsharded(rank, world_size, epoch):
        return DataLoader(list(range(20)), batch_size=5)

    def hangs_on_rank_1(rank, world_size, epoch):
        if rank == 1:
            time.sleep(3600)
        return [[rank]]

    def raises_on_rank_1(rank, world_size, epoch):
        if rank == 1:
            raise RuntimeError("no data for rank 1")
        return [[rank]]

    not_a_function = 42
''')


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A directory holding a user's module of loader factories; returns its name."""
    name = f"user_loaders_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_cli(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "talk_helpers.audit", *args],
                          cwd=os.getcwd(), env=env or clean_env(), capture_output=True,
                          text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args, timeout=150) -> subprocess.CompletedProcess:
    cmd = [str(TORCHRUN), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", "talk_helpers.audit", *args]
    return subprocess.run(cmd, cwd=os.getcwd(), env=clean_env(), capture_output=True,
                          text=True, timeout=timeout)


# --- exit status 2: usage errors, one line naming the bad thing -----------------------


@pytest.mark.parametrize(
    "args, named",
    [
        (["{m}"], "must be module:factory"),
        (["{m}:"], "must be module:factory"),
        (["no_such_module_xyz:f"], "cannot import module 'no_such_module_xyz'"),
        (["{m}:missing"], "has no attribute 'missing'"),
        (["{m}:not_a_function"], "is int, not a callable"),
        (["{m}:sharded", "--world-size", "two"], "argument --world-size"),
        (["{m}:sharded", "--world-size", "0"], "argument --world-size: must be ≥ 1"),
        (["{m}:sharded", "--epochs", "0"], "argument --epochs"),
        (["{m}:sharded", "--timeout", "0"], "argument --timeout"),
        (["{m}:sharded", "--start-method", "thread"], "argument --start-method"),
        (["{m}:sharded", "--shuffle", "--no-shuffle"], "not allowed with argument"),
        (["{m}:sharded", "--colour"], "unrecognized arguments: --colour"),
        ([], "the following arguments are required: target"),
    ],
)
def test_usage_errors_exit_2_with_one_line_naming_the_problem(project, capsys, args, named):
    status = audit_cli.main([a.format(m=project) for a in args])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("python -m talk_helpers.audit: error: ")
    assert named in err


@pytest.mark.distributed
def test_the_command_exits_2_on_a_bad_target(project):
    out = run_cli(f"{project}:missing")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (f"python -m talk_helpers.audit: error: module "
                                  f"{project!r} has no attribute 'missing'")


# --- exit status 0 and 1 ----------------------------------------------------------------


@pytest.mark.distributed
def test_a_correct_loader_exits_0_with_a_plain_report(project):
    out = run_cli(f"{project}:sharded", "--expected", "20", "--no-shuffle",
                  "--start-method", "fork")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0] == "✔ audit of 2 ranks × 2 epochs"
    assert "\x1b[" not in out.stdout  # no ANSI codes when piped


@pytest.mark.distributed
def test_the_command_keeps_no_warm_world_for_a_next_call_it_will_not_make(project, capsys,
                                                                           monkeypatch):
    from talk_helpers.runtime import world as distributed

    monkeypatch.setenv("TALK_WARM_WORLD", "1")
    try:
        status = audit_cli.main([f"{project}:sharded", "--expected", "20", "--epochs", "1",
                                 "--start-method", "fork"])
        assert status == 0, capsys.readouterr()
        assert distributed.warm_worlds() == []
    finally:
        distributed.shutdown_warm_worlds()


@pytest.mark.distributed
def test_spawned_ranks_import_the_users_factory_themselves(project):
    out = run_cli(f"{project}:sharded", "--expected", "20", "--epochs", "1",
                  "--start-method", "spawn", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["start_method"] == "spawn" and doc["status"] == "pass"


@pytest.mark.distributed
def test_a_duplicating_loader_exits_1_and_says_why(project):
    out = run_cli(f"{project}:unsharded", "--world-size", "2", "--epochs", "1",
                  "--start-method", "fork")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.startswith("✘ audit of 2 ranks × 1 epoch · ✘ 20 duplicated")


@pytest.mark.distributed
def test_json_is_one_document_with_counts_ids_and_verdicts(project):
    out = run_cli(f"{project}:unsharded", "--expected", "22", "--json",
                  "--start-method", "fork")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "talk_helpers.audit/1"
    assert doc["target"] == f"{project}:unsharded"
    assert (doc["ok"], doc["status"], doc["exit_status"]) == (False, "fail", 1)
    assert (doc["world_size"], doc["n_epochs"], doc["expected"]) == (2, 2, 22)
    assert doc["start_method"] == "fork" and doc["error"] is None
    assert doc["headline"].startswith("✘ audit of 2 ranks × 2 epochs")
    assert {"mark": "✘", "text": "20 duplicated"} in doc["problems"]
    assert len(doc["epochs"]) == 2
    epoch = doc["epochs"][0]
    once = epoch["exactly_once"]
    assert (once["duplicated_count"], once["missing_count"]) == (20, 2)
    assert len(once["duplicated"]) == 20 and once["duplicated"][0] == [0, 2]  # capped at 20
    assert once["missing"] == [20, 21]
    assert epoch["batches_per_rank"] == [4, 4] and epoch["samples_per_rank"] == [20, 20]
    assert epoch["samples_per_worker"] is None  # no workers: nothing to count


@pytest.mark.distributed
def test_a_hanging_loader_ends_at_the_deadline_with_no_process_left(project):
    marker = uuid.uuid4().hex
    started = time.monotonic()
    out = run_cli(f"{project}:hangs_on_rank_1", "--timeout", "3", "--start-method", "fork",
                  env=clean_env(AUDIT_TEST_MARKER=marker))
    elapsed = time.monotonic() - started
    assert out.returncode == 1, out.stdout + out.stderr
    assert "rank 1: still running after 3 s (stuck before its first batch)" in out.stdout
    assert elapsed < 3 + 20
    time.sleep(0.5)
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AUDIT_TEST_MARKER") == marker:
                left.append(proc.pid)
        except (psutil.Error, OSError):
            pass
    assert left == []


# --- under torchrun ----------------------------------------------------------------------


@pytest.mark.distributed
def test_under_torchrun_rank_0_prints_once_and_both_ranks_pass(project):
    out = torchrun(f"{project}:sharded", "--expected", "20", "--no-shuffle")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("audit of 2 ranks × 2 epochs") == 1
    assert out.stdout.startswith("✔ audit of 2 ranks × 2 epochs")


@pytest.mark.distributed
def test_under_torchrun_every_rank_fails_when_one_rank_cannot_load(project):
    out = torchrun(f"{project}:raises_on_rank_1", "--json")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["error"] == "the audit could not finish: rank 1: RuntimeError: no data for rank 1"
    # torchrun lists the ranks that failed: each exited 1 (the healthy rank too), unless
    # torchrun had already stopped it (SIGTERM) after the first exit; none exited 0.
    codes = re.findall(r"exitcode  : (-?\d+)", out.stderr)
    assert "1" in codes and set(codes) <= {"1", "-15"}, out.stderr


@pytest.mark.distributed
def test_under_torchrun_a_hanging_rank_ends_at_the_deadline(project):
    started = time.monotonic()
    # 10 s leaves a busy machine time to start both ranks before the deadline is judged
    out = torchrun(f"{project}:hangs_on_rank_1", "--timeout", "10")
    assert out.returncode != 0
    assert "rank 1: the audit did not finish within 10 s (stuck: epoch 0: building the " \
           "loader)" in out.stderr
    # rank 0, done and waiting for rank 1, gives it time to report and so exit first:
    # torchrun then names rank 1 as the root cause and stops rank 0 before it speaks
    assert "rank 0: the audit did not finish" not in out.stderr, out.stderr
    root_cause = out.stderr.split("Root Cause")[1]
    assert re.search(r"rank\s*: 1 ", root_cause), out.stderr
    assert time.monotonic() - started < 10 + 30


@pytest.mark.distributed
def test_under_torchrun_a_world_size_that_disagrees_is_a_usage_error(project):
    out = torchrun(f"{project}:sharded", "--world-size", "4")
    assert out.returncode != 0  # torchrun's own status; the ranks' are in its listing
    codes = re.findall(r"exitcode  : (-?\d+)", out.stderr)
    assert "2" in codes and set(codes) <= {"2", "-15"}, out.stderr
    assert "--world-size: 4 disagrees with torchrun's WORLD_SIZE=2" in out.stderr
