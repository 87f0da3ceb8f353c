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
from talk_helpers.runtime.start_cost import interpreter_start_s, time_limit_s

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

    def killed_on_rank_1(rank, world_size, epoch):
        if rank == 1:
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        return [[rank]]

    def raises_on_rank_1(rank, world_size, epoch):
        if rank == 1:
            raise RuntimeError("no data for rank 1")
        return [[rank]]

    def images(rank, world_size, epoch, n=101):
        """uint8 images and labels through DistributedSampler, which pads 101 rows to 102."""
        import torch
        from torch.utils.data import DistributedSampler

        data = [(torch.full((3, 4, 4), i % 256, dtype=torch.uint8) + (i // 256), i % 10)
                for i in range(n)]
        sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=0)
        sampler.set_epoch(epoch)
        return DataLoader(data, batch_size=8, sampler=sampler)

    def records(rank, world_size, epoch):
        return DataLoader([{"idx": i, "meta": {"key": f"k{i:03d}"}}
                           for i in range(rank, 20, world_size)], batch_size=5)

    def endless(rank, world_size, epoch):
        i = rank
        while True:
            yield [i]
            i += world_size

    not_a_function = 42
''')


def line_of(text: str) -> int:
    """The line of the factories' module that holds ``text``."""
    return next(i for i, line in enumerate(FACTORIES.splitlines(), 1) if text in line)


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
    # --standalone: torchrun takes a free port itself, where a port chosen here could be
    # taken by another test before torchrun binds it (torch/distributed/run.py)
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2",
           "-m", "talk_helpers.audit", *args]
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
        (["{m}:sharded", "--ids", "idx", "--by-content"], "not allowed with argument"),
        (["{m}:sharded", "--steps", "0"], "argument --steps: must be ≥ 1"),
        (["{m}:sharded", "--dropped-by-design", "-1"], "argument --dropped-by-design"),
        (["{m}:sharded", "--epoch-call", "set_epoch"], "--epoch-call: needs --reuse-loader"),
        (["{m}:sharded", "--expected", "1000000000000"], "--expected: expected=1000000000000 "
                                                         "is too large to hold"),
        (["{m}:sharded", "--master-port", "1234"], "--master-port: needs --nproc-per-node"),
        (["{m}:sharded", "--ids", "a..b"], "no empty part"),
        (["{m}:sharded", "--id-range", "5:3"], "--id-range: must be A:B with 0 ≤ A < B"),
        (["{m}:sharded", "--id-range", "10"], "--id-range: must be A:B"),
        (["{m}:sharded", "--expected", "5", "--id-range", "0:5"], "not allowed with argument"),
        (["{m}:sharded", "--ids-file", "no_such_ids.txt"], "--ids-file: cannot read"),
        (["{m}:sharded", "--mixing", "chunk:0"], "--mixing: must be sample or chunk:N"),
        (["{m}:sharded", "--mixing", "blocks"], "--mixing: must be sample or chunk:N"),
        (["{m}:sharded", "--dropped-by-design", "many"], "must be a count N ≥ 0 or auto"),
        (["{m}:sharded", "--repeated-by-design", "-2"], "must be a count N ≥ 0 or auto"),
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
    assert doc["schema"] == "talk_helpers.audit/2"
    assert doc["target"] == f"{project}:unsharded"
    assert (doc["ok"], doc["status"], doc["exit_status"]) == (False, "fail", 1)
    assert (doc["world_size"], doc["n_epochs"], doc["expected"]) == (2, 2, 22)
    assert doc["start_method"] == "fork" and doc["error"] is None and doc["ids"] == "default"
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
    # The command starts an interpreter and its ranks before its 3 s begin: what that costs
    # is measured now, so a busy machine is not read as a deadline that was missed.
    interpreter_start_s(refresh=True)
    limit_s = time_limit_s(3 + 10, interpreters=2)
    started = time.monotonic()
    out = run_cli(f"{project}:hangs_on_rank_1", "--timeout", "3", "--start-method", "fork",
                  env=clean_env(AUDIT_TEST_MARKER=marker))
    elapsed = time.monotonic() - started
    assert out.returncode == 3, out.stdout + out.stderr
    assert "rank 1: still running after 3 s" in out.stdout
    assert "rank 1: still running, epoch 0: building the loader" in out.stdout
    assert "--steps N" in out.stdout and "--timeout" in out.stdout
    assert elapsed < limit_s
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
    assert out.returncode == 1, out.stdout + out.stderr  # torchrun's own, for any failure
    doc = json.loads(out.stdout)
    assert (doc["status"], doc["exit_status"]) == ("error", 3)
    assert doc["error"]["message"] == ("the audit could not finish: rank 1: RuntimeError: "
                                       "no data for rank 1")
    assert doc["error"]["where"] == f"{project}.py:{line_of('no data for')} in raises_on_rank_1"
    # torchrun lists the ranks that failed: each exited 3, the healthy rank too (one that
    # torchrun stops after the first exit exits with the verdict it already knows)
    codes = re.findall(r"exitcode  : (-?\d+)", out.stderr)
    assert codes == ["3", "3"], out.stderr


@pytest.mark.distributed
def test_under_torchrun_a_hanging_rank_ends_at_the_deadline(project):
    started = time.monotonic()
    # 10 s leaves a busy machine time to start both ranks before the deadline is judged
    out = torchrun(f"{project}:hangs_on_rank_1", "--timeout", "10", "--json")
    assert out.returncode != 0
    # rank 0 prints one document with how far every rank got, then exits 3
    doc = json.loads(out.stdout)
    assert (doc["status"], doc["exit_status"], doc["error"]["kind"]) == ("error", 3, "hung")
    assert doc["error"]["progress"]["0"] == "epoch 1: gathering every rank's results"
    assert doc["error"]["progress"]["1"].startswith("epoch 0: building the loader")
    assert "--steps N" in doc["error"]["hint"]
    assert time.monotonic() - started < time_limit_s(10 + 20, interpreters=3)


@pytest.mark.distributed
def test_under_torchrun_a_world_size_that_disagrees_is_a_usage_error(project):
    out = torchrun(f"{project}:sharded", "--world-size", "4")
    assert out.returncode != 0  # torchrun's own status; the ranks' are in its listing
    codes = re.findall(r"exitcode  : (-?\d+)", out.stderr)
    assert "2" in codes and set(codes) <= {"2", "-15"}, out.stderr
    assert "--world-size: 4 disagrees with torchrun's WORLD_SIZE=2" in out.stderr


@pytest.mark.distributed
def test_the_launcher_keeps_the_exit_status_and_prints_one_line_not_torchruns_listing(project):
    out = run_cli(f"{project}:raises_on_rank_1", "--nproc-per-node", "2", "--master-addr",
                  "127.0.0.1", "--master-port", str(free_port()), timeout=150)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "ChildFailedError" not in out.stderr and "Root Cause" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "python -m talk_helpers.audit: exit status 3: the audit could not finish: rank 1: "
        f"RuntimeError: no data for rank 1 (at {project}.py:{line_of('no data for')} in "
        "raises_on_rank_1)"]


@pytest.mark.distributed
def test_the_launcher_passes_a_failed_check_as_exit_status_1(project):
    out = run_cli(f"{project}:unsharded", "--nproc-per-node", "2", "--epochs", "1", "--json",
                  timeout=150)
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert (doc["status"], doc["exit_status"]) == ("fail", 1)
    assert "ChildFailedError" not in out.stderr and out.stderr == ""


# How many runs the repeat test makes, quiet and under load (beside at least two busy
# processes: tests/busy_machine.py), AUDIT_EXIT_REPEATS=100 for the long form; each run
# starts two ranks that import torch, a few seconds apiece.
EXIT_REPEATS = int(os.environ.get("AUDIT_EXIT_REPEATS", "10"))


@pytest.mark.distributed
@pytest.mark.parametrize("loops", [0, 2], ids=["quiet", "under-load"])
def test_the_exit_status_is_the_verdict_run_after_run(project, loops):
    """torchrun stops the other ranks as soon as one exits: no rank may exit before every
    rank knows the verdict, under the command's launcher and under plain torchrun alike."""
    from busy_machine import busy

    seen = []
    with busy(loops):
        for run in range(EXIT_REPEATS):
            if run % 2:
                out = torchrun(f"{project}:unsharded", "--epochs", "1")
                codes = re.findall(r"exitcode  : (-?\d+)", out.stderr)
                seen.append((out.returncode, tuple(codes)))
            else:
                out = run_cli(f"{project}:unsharded", "--nproc-per-node", "2", "--epochs", "1",
                              timeout=150)
                seen.append((out.returncode, out.stderr))
    launcher = [s for s in seen[0::2]]
    plain = [s for s in seen[1::2]]
    assert launcher == [(1, "")] * len(launcher)
    assert plain == [(1, ("1", "1"))] * len(plain)


@pytest.mark.distributed
def test_a_rank_that_really_dies_is_exit_status_3_and_named(project):
    out = run_cli(f"{project}:killed_on_rank_1", "--nproc-per-node", "2", "--epochs", "1",
                  "--timeout", "60", timeout=150)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "rank 1 (killed by SIGKILL)" in out.stderr


# --- which sample is which, from the command line -------------------------------------------


def test_a_batch_without_ids_exits_2_with_its_structure_and_the_two_flags(project, capsys):
    status = audit_cli.main([f"{project}:images", "--start-method", "fork", "--epochs", "1"])
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert "batch: list(Tensor[8, 3, 4, 4] uint8, Tensor[8] int64)" in out
    assert "--ids PATH" in out and "--by-content" in out
    assert err.startswith("python -m talk_helpers.audit: exit status 2: rank 0, epoch 0, "
                          "batch 0: cannot tell which sample is which")


def test_by_content_with_declared_padding_passes_a_distributed_sampler(project, capsys):
    status = audit_cli.main([f"{project}:images", "--by-content", "--expected", "101",
                             "--repeated-by-design", "1", "--shuffle", "--start-method",
                             "fork"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert out.splitlines()[0] == "✔ audit of 2 ranks × 2 epochs · 1 repeated by design"


def test_by_content_without_the_declared_padding_fails(project, capsys):
    status = audit_cli.main([f"{project}:images", "--by-content", "--expected", "101",
                             "--start-method", "fork", "--epochs", "1"])
    out, _ = capsys.readouterr()
    assert status == 1
    assert out.splitlines()[0] == "✘ audit of 2 ranks × 1 epoch · ✘ 1 identical contents"


@pytest.mark.parametrize("ids", ["idx", "meta.key"])
def test_ids_point_at_integer_or_string_ids(project, capsys, ids):
    status = audit_cli.main([f"{project}:records", "--ids", ids, "--expected", "20",
                             "--no-shuffle", "--start-method", "fork", "--json"])
    out, _ = capsys.readouterr()
    doc = json.loads(out)
    assert status == 0 and doc["status"] == "pass" and doc["ids"] == f"ids {ids}"


def test_ids_declared_as_a_range_or_a_file_of_integers_or_strings(project, capsys, tmp_path):
    status = audit_cli.main([f"{project}:sharded", "--id-range", "0:20", "--no-shuffle",
                             "--start-method", "fork", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 0 and doc["expected"] == 20
    assert doc["expected_note"] == "expected: ids 0..19 (20 per epoch)"
    numbers = tmp_path / "ids.txt"
    numbers.write_text("\n".join(map(str, range(22))) + "\n")
    status = audit_cli.main([f"{project}:sharded", "--ids-file", str(numbers), "--no-shuffle",
                             "--start-method", "fork", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 1 and doc["epochs"][0]["exactly_once"]["missing"] == [20, 21]
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"k{i:03d}\n" for i in range(21)))
    status = audit_cli.main([f"{project}:records", "--ids", "meta.key", "--ids-file",
                             str(keys), "--no-shuffle", "--start-method", "fork", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 1 and doc["epochs"][0]["exactly_once"]["missing"] == ["k020"]


def test_steps_end_an_endless_loader(project, capsys):
    status = audit_cli.main([f"{project}:endless", "--steps", "4", "--start-method", "fork",
                             "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 0 and doc["steps"] == 4
    assert [e["batches_per_rank"] for e in doc["epochs"]] == [[4, 4], [4, 4]]


def test_a_raising_factory_exits_3_naming_its_rank_and_line(project, capsys):
    status = audit_cli.main([f"{project}:raises_on_rank_1", "--start-method", "fork",
                             "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert status == 3 and err == ""
    assert (doc["status"], doc["exit_status"], doc["error"]["kind"]) == ("error", 3, "raised")
    assert doc["error"]["rank"] == 1
    assert doc["error"]["where"] == f"{project}.py:{line_of('no data for')} in raises_on_rank_1"


def test_json_is_one_document_even_for_a_usage_error(project, capsys):
    status = audit_cli.main([f"{project}:missing", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert status == 2 and err.count("\n") == 1
    assert (doc["status"], doc["exit_status"], doc["error"]["kind"]) == ("usage", 2, "usage")


def test_help_states_the_batch_contract_the_exit_statuses_and_the_json_schema():
    out = subprocess.run([sys.executable, "-c",
                          "import sys\n"
                          "from talk_helpers.audit.cli import build_parser\n"
                          "print(build_parser().format_help())\n"
                          "print('torch' in sys.modules)"],
                         capture_output=True, text=True, env=clean_env(), timeout=60)
    text, torch_loaded = out.stdout.rsplit("\n", 2)[0], out.stdout.split()[-1]
    assert torch_loaded == "False"
    for needed in ("--ids PATH", "--by-content", "a dict batch is read at its \"id\" key",
                   "my_project.data:make_loader --ids idx",
                   "my_project.data:make_loader --by-content --expected 50000",
                   "exit status:", "0  every check passed", "1  a check failed",
                   "2  usage", "3  the loader raised, died or hung",
                   "schema talk_helpers.audit/2", "--steps N", "--reuse-loader",
                   "--id-range 10000:11000", "--ids __key__ --ids-file keys.txt",
                   "--with-replacement --expected 1000", "--mixing chunk:8",
                   "--dropped-by-design auto", "causes [{mark"):
        assert needed in text, needed


def test_pip_puts_the_command_on_path_beside_python_m():
    script = Path(sys.executable).with_name("talk-helpers-audit")
    out = subprocess.run([str(script), "no_such_module:f"], capture_output=True, text=True,
                         env=clean_env(), timeout=120)
    assert out.returncode == 2
    assert out.stderr.startswith("talk-helpers-audit: error: cannot import module")


# --- the README's example, as written --------------------------------------------------------


def readme_example(which: int = 1) -> tuple[str, list[list[str]]]:
    """The audit manual's ``which``-th example module (1: ``my_project/data.py``, 2:
    ``my_project/more.py``) and the audit commands shown after it that use it."""
    text = (ROOT / "docs" / "audit.md").read_text()
    section = text.split("## Check your loader before a long run")[1].split("\n## ")[0]
    code = section.split("```python\n")[which].split("```")[0]
    shell = section.split("```python\n")[which].split("```bash\n")[1].split("```")[0]
    module = "my_project.data" if which == 1 else "my_project.more"
    commands = [line.split() for line in shell.splitlines()
                if line.startswith(f".venv/bin/python -m talk_helpers.audit {module}:")]
    return code, commands


@pytest.mark.distributed
def test_the_readmes_second_example_passes_as_written_and_fails_without_its_flags(
        tmp_path, monkeypatch, capsys):
    code, commands = readme_example(2)
    assert [c[4] for c in commands] == ["--id-range", "--with-replacement", "--ids",
                                        "--expected"]
    (tmp_path / "my_project").mkdir()
    (tmp_path / "my_project" / "__init__.py").write_text("")
    (tmp_path / "my_project" / "more.py").write_text(code)
    for command in commands:
        out = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=clean_env(),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, " ".join(command) + "\n" + out.stdout + out.stderr
        assert out.stdout.startswith("✔ audit of 2 ranks × 2 epochs"), out.stdout
    # each without the flag that declares what it promises (in this process: faster)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for target, flags, headline in [
            ("make_offset_loader", ["--expected", "1000", "--shuffle"],
             "✘ 1000 missing · ✘ 1000 unexpected"),
            ("make_weighted_loader", ["--expected", "1000"], "duplicated · ✘ "),
            ("make_chunk_loader", ["--expected", "1000", "--shuffle"], "✘ poorly mixed")]:
        status = audit_cli.main([f"my_project.more:{target}", *flags, "--start-method",
                                 "fork"])
        out = capsys.readouterr().out
        assert status == 1 and headline in out.splitlines()[0], out


@pytest.mark.distributed
def test_the_readmes_example_passes_as_written(tmp_path):
    code, commands = readme_example()
    assert len(commands) == 3
    (tmp_path / "my_project").mkdir()
    (tmp_path / "my_project" / "__init__.py").write_text("")
    (tmp_path / "my_project" / "data.py").write_text(code)
    for command in commands:
        out = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=clean_env(),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, " ".join(command) + "\n" + out.stdout + out.stderr
        assert out.stdout.startswith("✔ audit of 2 ranks × 2 epochs"), out.stdout
