"""The copyable fixes of notebooks 06 and 11, run in a real NCCL process group on your GPUs.

The notebooks run every world on gloo, on CPUs; the people who copy their fixes run NCCL, on
GPUs. This script takes the ``%%importable`` cells a reader copies from the notebooks
themselves (the current text of the .ipynb files, not a copy) and runs them in an NCCL
group::

    python benchmarks/nccl_fixes.py                             # one rank, the first GPU
    torchrun --nproc-per-node 2 benchmarks/nccl_fixes.py        # one rank per GPU

Rank 0 prints a table of what each check did and, under NCCL, writes it to
``benchmarks/results/nccl_fixes.md`` (``--out`` elsewhere). The exit status is 0 when every
check passed. ``--backend gloo`` runs the same checks on CPUs, with a ``"cuda:gloo"`` group
standing in for NCCL's missing CPU backend: that is how the tests run this script, on a
machine without a GPU. Nothing in the test suite needs a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from talk_helpers.lessons.training import wait_for_every_rank
from talk_helpers.notebook import cells
from talk_helpers.runtime.devices import collective_device

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {"06": ROOT / "notebooks" / "06_uneven_batches_and_hangs.ipynb",
             "11": ROOT / "notebooks" / "11_when_it_breaks_in_production.ipynb"}
RESULTS = ROOT / "benchmarks" / "results" / "nccl_fixes.md"
CPU_REFUSED = "No backend type associated with device type cpu"
BACKENDS = ("nccl", "gloo")


@dataclass
class Outcome:
    """One check on this rank: did it do what the notebook says, and what it returned."""

    name: str
    ok: bool
    detail: str


def notebook_cells(path: Path) -> dict:
    """Every ``%%importable`` cell of a notebook, defined in order, as one namespace (what a
    reader's kernel holds after running the notebook's cells); a cell that cannot be
    defined here is left out, and the checks that need its names fail saying so."""
    namespace: dict = {}
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or not source.startswith("%%importable"):
            continue
        try:
            cells.define(source.split("\n", 1)[1] if "\n" in source else "", namespace)
        except Exception:  # noqa: BLE001 - a cell these checks do not use
            continue
    return namespace


def check_cpu_tensor_refused(backend: str, nb: dict) -> Outcome:
    """A CPU tensor in a group without a CPU backend fails with NCCL's own message."""
    group = None if backend == "nccl" else dist.new_group(backend="cuda:gloo")
    try:
        dist.all_reduce(torch.tensor([0], device="cpu"), group=group)
    except RuntimeError as error:
        return Outcome("a CPU tensor is refused", CPU_REFUSED in str(error), str(error))
    return Outcome("a CPU tensor is refused", False, "the all-reduce of a CPU tensor ran")


def check_collective_device(backend: str, nb: dict) -> Outcome:
    """collective_device() is this rank's GPU under NCCL, the CPU under gloo."""
    device = collective_device()
    want = (torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            if backend == "nccl" else torch.device("cpu"))
    return Outcome("collective_device()", device == want, str(device))


def check_fix_3(backend: str, nb: dict) -> Outcome:
    """06, fix 3: the all-reduced exhausted flag, on the uneven loader."""
    uneven = partial(nb["06"]["make_sharded_loader"], shard_sizes=[5, 3, 3, 3], workers=2,
                     batch_size=4)
    out = nb["06"]["train_until_any_exhausted"](dist.get_rank(), dist.get_world_size(), uneven)
    return Outcome("06 fix 3: an all-reduced exhausted flag", True, f"{out['steps']} steps")


def check_plain_loop(backend: str, nb: dict) -> Outcome:
    """06, fix 1: the plain loop on equal shards."""
    equal = partial(nb["06"]["make_sharded_loader"], shard_sizes=[4, 4, 4, 4], workers=2,
                    batch_size=4)
    out = nb["06"]["train_one_epoch"](dist.get_rank(), dist.get_world_size(), equal)
    return Outcome("06 fix 1: the plain loop on equal shards", True, f"{out['steps']} steps")


def check_join(backend: str, nb: dict) -> Outcome:
    """06, Join with a logging all-reduce and throw_on_early_termination=True."""
    uneven = partial(nb["06"]["make_sharded_loader"], shard_sizes=[5, 3, 3, 3], workers=2,
                     batch_size=4)
    out = nb["06"]["train_with_join"](dist.get_rank(), dist.get_world_size(), uneven,
                                     log_loss=True, throw_on_early_termination=True)
    return Outcome("06 Join, throw_on_early_termination", True, f"{out['steps']} steps")


def check_evaluation(backend: str, nb: dict) -> Outcome:
    """11, section 3's fix: every sample evaluated once, the counts all-reduced."""
    seen, counts = nb["11"]["evaluate_each_once"](dist.get_rank(), dist.get_world_size(), 11)
    return Outcome("11 evaluation, each sample once", counts == [7, 11], f"counts {counts}")


def check_shards_loop(backend: str, nb: dict) -> Outcome:
    """11, section 6's fix: 8 shards, the training loop with its start-up barrier."""
    shards = [list(range(i, i + 2)) for i in range(0, 16, 2)]
    steps = nb["11"]["train"](dist.get_rank(), dist.get_world_size(),
                             partial(nb["11"]["make_shard_loader"], shards=shards), 0)
    return Outcome("11 section 6: a loop over 8 shards", True, f"{steps} steps")


def check_startup_barrier(backend: str, nb: dict) -> Outcome:
    """epoch_batches' start-up barrier: monitored_barrier in a gloo group beside NCCL."""
    wait_for_every_rank(timeout_s=60)
    return Outcome("a monitored barrier in a gloo side group", True, "every rank passed")


CHECKS: tuple[Callable, ...] = (check_cpu_tensor_refused, check_collective_device,
                                check_plain_loop, check_fix_3, check_join,
                                check_startup_barrier, check_evaluation, check_shards_loop)


def run_checks(backend: str) -> list[Outcome]:
    """Every check, in the same order on every rank (they are collectives); one that
    raises is a failed check, and the others still run."""
    cells.enable()
    nb = {number: notebook_cells(path) for number, path in NOTEBOOKS.items()}
    return [_guarded(check, backend, nb) for check in CHECKS]


def _guarded(check: Callable, backend: str, nb: dict) -> Outcome:
    try:
        return check(backend, nb)
    except Exception as error:  # noqa: BLE001 - the failure is the result
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return Outcome(check.__doc__.splitlines()[0], False, last)


def join_world(backend: str) -> None:
    """Join torchrun's world, or make a world of one rank when started without it."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "gloo":
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        return
    gpu = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(gpu)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60), device_id=gpu)


def table(outcomes_by_rank: list[list[Outcome]], backend: str) -> str:
    """The results as a markdown table, one row per check, every rank's outcome in it."""
    header = [f"# The notebooks' copyable fixes on {backend}", ""]
    if backend == "nccl":
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        header += [f"{torch.cuda.get_device_name()} × {len(outcomes_by_rank)} ranks · "
                   f"torch {torch.__version__} · NCCL {nccl} · {platform.platform()} · "
                   f"{datetime.date.today().isoformat()}", "",
                   "Made by `python benchmarks/nccl_fixes.py` (or under torchrun): one run.",
                   ""]
    lines = ["| check | result | rank 0 says |", "| --- | --- | --- |"]
    for i, outcome in enumerate(outcomes_by_rank[0]):
        ok = all(rank[i].ok for rank in outcomes_by_rank)
        lines.append(f"| {outcome.name} | {'✔' if ok else '✘'} | "
                     f"{outcome.detail.replace('|', '/')} |")
    return "\n".join(header + lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default="nccl",
                        help="nccl (the default: one GPU per rank) or gloo (CPUs)")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help=f"where rank 0 writes the table under NCCL (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.backend == "nccl" and not torch.cuda.is_available():
        print("--backend nccl needs a GPU: torch.cuda.is_available() is False here "
              "(run with --backend gloo to try the checks on CPUs)", file=sys.stderr)
        return 2
    join_world(args.backend)
    try:
        outcomes = run_checks(args.backend)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, outcomes)
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        text = table(everyone, args.backend)
        print(text)
        if args.backend == "nccl":
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text)
    return 0 if all(o.ok for rank in everyone for o in rank) else 1


if __name__ == "__main__":
    sys.exit(main())
