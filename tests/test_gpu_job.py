"""What a reader copies runs on a GPU job: every collective in the notebooks' cells, the
lessons and the demos builds its tensors on the process group's device, the copyable fixes
run (on gloo here, with a "cuda:gloo" group standing in for NCCL's missing CPU backend), and
the notebooks' facts about NCCL are the installed torch's."""

import ast
import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from talk_helpers.lessons.nodes import on_nodes
from talk_helpers.runtime import run_ranks

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = [ROOT / "notebooks" / name for name in (
    "06_uneven_batches_and_hangs.ipynb", "07_3d_parallelism.ipynb", "08_fast_loading.ipynb",
    "10_auditing_real_libraries.ipynb", "11_when_it_breaks_in_production.ipynb")]
COLLECTIVES = {"all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter",
               "all_to_all", "gather", "scatter"}
BUILDERS = {"tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn"}


def _calls(tree: ast.AST, module: str, names: set[str]) -> list[ast.Call]:
    """Calls ``module.name(...)`` for ``name`` in ``names`` (``dist.all_reduce``, ...)."""
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in names and isinstance(node.func.value, ast.Name)
            and node.func.value.id == module]


def _builders_without_device(source: str) -> list[str]:
    """In every function (or cell) that runs a collective, the tensors it builds without a
    ``device=``: each one a collective might be handed."""
    tree = ast.parse(source)
    scopes = [node for node in ast.walk(tree)
              if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)] or [tree]
    found = []
    for scope in scopes:
        if not _calls(scope, "dist", COLLECTIVES):
            continue
        for call in _calls(scope, "torch", BUILDERS):
            if not any(k.arg == "device" for k in call.keywords):
                found.append(ast.get_source_segment(source, call))
    return found


def _code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    out = []
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            out.append("\n".join(line for line in source.splitlines()
                                 if not line.startswith(("%", "!"))))
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_collective_in_a_notebook_cell_gets_a_tensor_on_a_named_device(path):
    bad = [(i, built) for i, cell in enumerate(_code_cells(path))
           for built in _builders_without_device(cell)]
    assert not bad, f"{path.name}: tensors built without a device in cells with a collective: {bad}"


@pytest.mark.parametrize("folder", ["lessons", "demos", "libraries"])
def test_every_collective_in_the_package_a_reader_copies_from_gets_a_placed_tensor(folder):
    bad = []
    for path in sorted((ROOT / "talk_helpers" / folder).rglob("*.py")):
        bad += [(path.name, built) for built in _builders_without_device(path.read_text())]
    assert not bad, bad


def test_the_scan_finds_a_cpu_flag_and_passes_a_placed_one():
    assert _builders_without_device(
        "def f():\n    x = torch.tensor([0])\n    dist.all_reduce(x)\n") == ["torch.tensor([0])"]
    assert not _builders_without_device(
        "def f():\n    x = torch.tensor([0], device=d)\n    dist.all_reduce(x)\n")


def test_no_notebook_cell_calls_monitored_barrier_on_the_job_s_own_group():
    """monitored_barrier exists only for gloo: a copied call on an NCCL job's group raises."""
    for path in NOTEBOOKS:
        for cell in _code_cells(path):
            for call in _calls(ast.parse(cell), "dist", {"monitored_barrier"}):
                assert any(k.arg == "group" for k in call.keywords), (path.name, cell[:80])


def test_the_copyable_fixes_of_06_and_11_run_and_a_cpu_tensor_is_refused_without_a_cpu_backend():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "benchmarks/nccl_fixes.py", "--backend", "gloo"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines()
            if line.startswith("| ") and "---" not in line]
    assert len(rows) == 9 and all("| ✔ |" in row for row in rows[1:]), done.stdout
    assert "No backend type associated with device type cpu" in done.stdout
    assert "counts [7, 11]" in done.stdout


def test_the_nccl_script_says_it_needs_a_gpu_where_there_is_none():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, "benchmarks/nccl_fixes.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "needs a GPU" in done.stderr


def test_the_demos_say_nccl_needs_a_gpu_and_refuse_an_unknown_backend():
    from talk_helpers.demos.hang import join_world

    with pytest.raises(ValueError, match="backend must be one of gloo, nccl"):
        join_world("mpi", 5)
    if torch.cuda.is_available():
        return
    with pytest.raises(SystemExit, match="needs a GPU"):
        join_world("nccl", 5)


def test_the_timeouts_the_notebooks_state_are_the_installed_torch_s():
    from torch.distributed import constants

    stated = [line for line in dist.init_process_group.__doc__.splitlines()
              if "Default value is" in line]
    assert stated and "10 minutes for NCCL and 30 minutes for other backends" in stated[0]
    assert constants.default_pg_timeout == timedelta(minutes=30)


def test_monitored_barrier_is_refused_outside_gloo_in_the_installed_source():
    import inspect

    source = inspect.getsource(dist.monitored_barrier)
    assert re.search(r"if get_backend\(group\) != Backend\.GLOO:\s*raise ValueError", source)


def _launcher_view(rank, world_size):
    return {name: os.environ.get(name) for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                     "GROUP_RANK")}


def test_on_nodes_gives_each_rank_its_node_s_launcher_variables_and_puts_them_back():
    seen = [on_nodes(2, _launcher_view, rank, 4) for rank in range(4)]
    assert seen == [{"LOCAL_RANK": str(r % 2), "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": str(r // 2)}
                    for r in range(4)]
    before = _launcher_view(0, 1)
    on_nodes(2, _launcher_view, 3, 4)
    assert _launcher_view(0, 1) == before
    with pytest.raises(ValueError, match="whole number of nodes"):
        on_nodes(3, _launcher_view, 0, 4)
    with pytest.raises(TypeError, match="fn"):
        on_nodes(2, None, 0, 4)


@pytest.mark.distributed
def test_a_gloo_side_group_barrier_passes_where_monitored_barrier_on_the_gpu_group_is_refused():
    seen = run_ranks(_barriers, 2, start_method="fork", timeout_s=120)
    assert seen == [("ValueError", "passed")] * 2


def _barriers(rank, world_size):
    from talk_helpers.lessons.training import wait_for_every_rank

    try:
        dist.monitored_barrier(group=dist.new_group(backend="cuda:gloo"),
                               timeout=timedelta(seconds=30))
        refused = "passed"
    except ValueError:
        refused = "ValueError"
    wait_for_every_rank(timeout_s=30)
    return refused, "passed"
