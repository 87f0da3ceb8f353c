"""The talk's set-up: the one call on its first slide, ``start_talk()``.

It does what every notebook's first cell does (:func:`talk_helpers.notebook.setup_notebook`),
then makes the demos answer at once on the speaker's laptop:

* **the start method the talk takes** (:func:`talk_start_method`): the platform's own,
  except forkserver where that is spawn and forkserver exists (macOS): its server imports
  torch once and forks every worker and rank. Without forkserver (Windows;
  ``TALK_NO_FORKSERVER=1`` here) spawn stays, and a demo with workers takes seconds;
* **definition cells that workers can import**: a cell that only defines things runs as an
  ``%%importable`` cell (:mod:`talk_helpers.notebook.cells`) without the magic line on the
  slide. These two are :func:`prepare_kernel`, which `make talk` runs as every kernel starts;
* **everything started now, not during a demo**: matplotlib (a first figure), the workers'
  server and a warm world of two ranks (:mod:`talk_helpers.runtime.warm`) that have started
  DataLoader workers and wrapped a DDP model once.

Nothing here runs at import: only :func:`start_talk` and :func:`prepare_kernel` change the
kernel.
"""

from __future__ import annotations

import ast
import os
import time
from dataclasses import dataclass

__all__ = ["NO_FORKSERVER_ENV", "TalkReady", "definitions_only", "prepare_kernel",
           "start_talk", "talk_start_method"]

NO_FORKSERVER_ENV = "TALK_NO_FORKSERVER"  # "1": act as a platform without forkserver
WORLD_SIZE = 2
NUM_WORKERS = 2


@dataclass(frozen=True)
class TalkReady:
    """What :func:`start_talk` prepared. Its text is the same under every start method
    (the stored outputs are); the details are attributes."""

    start_method: str           # the method the talk's workers and ranks start with
    platform_method: str        # the method this platform gives (TALK_START_METHOD)
    world_size: int
    seconds: float

    def __repr__(self) -> str:
        return f"✔ ready: DataLoader workers and a world of {self.world_size} ranks, started"

    def _repr_html_(self) -> str:
        from talk_helpers.verdicts.render import verdict_html

        return verdict_html(True, repr(self)[2:])


def talk_start_method(platform_method: str | None = None) -> str:
    """The start method the talk takes on a platform whose own is ``platform_method``
    (default: ``TALK_START_METHOD``, else Python's default): forkserver where that is
    spawn and forkserver exists (macOS), else the platform's own."""
    import multiprocessing

    from talk_helpers.runtime.start_method import requested_start_method

    method = platform_method or requested_start_method() or multiprocessing.get_start_method()
    return "forkserver" if method == "spawn" and _has_forkserver() else method


def start_talk(seed: int = 0) -> TalkReady:
    """Set the kernel up for the talk (see the module docstring); takes a few seconds."""
    started = time.monotonic()
    method, platform_method = prepare_kernel(seed)
    _warm_up()
    return TalkReady(method, platform_method, WORLD_SIZE, time.monotonic() - started)


def prepare_kernel(seed: int = 0) -> tuple[str, str]:
    """The talk's start method and definition cells, at once: the demos work before (or
    without) ``start_talk()`` and after a restart. Returns the method taken and the
    platform's own."""
    import torch.multiprocessing as mp

    from talk_helpers.notebook import setup_notebook
    from talk_helpers.runtime.start_method import ENV_VAR, apply_start_method, start_forkserver

    setup_notebook(seed)
    platform_method = mp.get_start_method()
    method = talk_start_method(platform_method)
    if method != platform_method:  # the ranks and their workers read the same switch
        os.environ[ENV_VAR] = method
        apply_start_method()
        start_forkserver()
    _enable_definition_cells()
    return method, platform_method


def definitions_only(source: str) -> bool:
    """Whether a cell only defines things: imports, classes, functions and constants, at
    least one class or function among them (so that importing it runs nothing else)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    defines = False
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defines = True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _constant(node.value):
            continue
        else:
            return False
    return defines


# --------------------------------------------------------------------------- internals


def _has_forkserver() -> bool:
    import multiprocessing

    return (os.environ.get(NO_FORKSERVER_ENV, "").strip() != "1"
            and "forkserver" in multiprocessing.get_all_start_methods())


def _constant(node) -> bool:
    try:
        if node is not None:
            ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _as_importable(lines: list[str]) -> list[str]:
    """IPython input transformer: a definitions-only cell runs as ``%%importable``."""
    from talk_helpers.notebook.cells import MAGIC

    source = "".join(lines)
    plain = source.lstrip().startswith("%") or not definitions_only(source)
    return lines if plain else [f"%%{MAGIC}\n", *lines]


def _enable_definition_cells() -> None:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    transforms = shell.input_transformers_cleanup
    if not any(getattr(t, "__name__", "") == _as_importable.__name__ for t in transforms):
        transforms.append(_as_importable)


def _warm_up() -> None:
    """Start now what the first demos would otherwise wait for."""
    from torch.utils.data import DataLoader

    from talk_helpers.diagrams.talk_figures import worker_reads
    from talk_helpers.runtime import run_world

    worker_reads([(0, 0)], n_ids=1)._repr_svg_()  # matplotlib's imports and font cache
    list(DataLoader(range(NUM_WORKERS), num_workers=NUM_WORKERS))  # the workers' server
    report = run_world(_warm_rank, WORLD_SIZE, args=(NUM_WORKERS,), reuse=True,
                       timeout_s=120, collective_timeout_s=60)
    if not report.ok:
        raise RuntimeError(f"the talk's warm world did not start:\n{report!r}")


def _warm_rank(rank: int, world_size: int, num_workers: int) -> int:
    """In each rank of the warm world: start DataLoader workers once (under forkserver,
    the rank's own workers' server) and wrap a DDP model once (its imports)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    list(DataLoader(range(num_workers), num_workers=num_workers))
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    model(torch.ones(1, 1)).sum().backward()
    return rank
