"""The talk's set-up, ``start_talk()``: :func:`prepare_kernel` (also run by `make talk` as
every kernel starts: the talk's start method, forkserver where the platform gives spawn, and
cells whose definitions workers import, :func:`split_cell`), then what a demo would wait for:
matplotlib, the workers' server and a warm world of two ranks that started DataLoader workers
and wrapped a DDP model once (:mod:`talk_helpers.runtime.warm`). Nothing runs at import."""

from __future__ import annotations

import ast
import multiprocessing.reduction
import os
import pickle
import pickletools
import time
from dataclasses import dataclass

__all__ = ["NO_FORKSERVER_ENV", "TalkReady", "split_cell", "prepare_kernel",
           "start_talk", "talk_start_method"]

NO_FORKSERVER_ENV = "TALK_NO_FORKSERVER"  # "1": act as a platform without forkserver
WORLD_SIZE, NUM_WORKERS = 2, 2  # the warm world's ranks, and workers per loader


@dataclass(frozen=True)
class TalkReady:
    """What :func:`start_talk` prepared; its text is the same under every start method."""

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
    """The start method the talk takes where the platform's is ``platform_method`` (default:
    ``TALK_START_METHOD``, else Python's): forkserver for spawn where it exists (macOS)."""
    from talk_helpers.runtime.start_method import requested_start_method

    method = platform_method or requested_start_method() or multiprocessing.get_start_method()
    forkserver = (os.environ.get(NO_FORKSERVER_ENV, "").strip() != "1"
                  and "forkserver" in multiprocessing.get_all_start_methods())
    return "forkserver" if method == "spawn" and forkserver else method


def start_talk(seed: int = 0) -> TalkReady:
    """Set the kernel up for the talk (see the module docstring); takes a few seconds."""
    started = time.monotonic()
    method, platform_method = prepare_kernel(seed)
    _warm_up()
    return TalkReady(method, platform_method, WORLD_SIZE, time.monotonic() - started)


def prepare_kernel(seed: int = 0) -> tuple[str, str]:
    """The talk's start method and definition cells; returns it and the platform's."""
    from talk_helpers.notebook import setup_notebook
    from talk_helpers.runtime.start_method import ENV_VAR, apply_start_method, start_forkserver

    setup_notebook(seed)
    platform_method = multiprocessing.get_start_method()
    method = talk_start_method(platform_method)
    if method != platform_method:  # the ranks and their workers read the same switch
        os.environ[ENV_VAR] = method
        apply_start_method()
        start_forkserver()
    if method != "fork":  # a worker started anew imports what it unpickles
        multiprocessing.reduction.dump = _dump
    _enable_definition_cells()
    return method, platform_method


def split_cell(source: str) -> tuple[str, str] | None:
    """A cell's definitions (its imports, classes, functions and the assignments those
    use), which workers import, and the rest, which runs in the kernel alone; each on the
    cell's own lines, the other's blank. None for a cell that defines no class or function."""
    from talk_helpers.notebook.cells import used_globals

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    # True: a definition, None: an assignment (one if a definition uses it), False: rest
    kind = [isinstance(n, _DEFINITIONS) or (None if _assigned(n) else False) for n in body]
    used = set().union(*(used_globals(ast.unparse(n)) for i, n in enumerate(body) if kind[i]))
    for i in reversed(range(len(body))):  # an assignment uses only those before it
        if kind[i] is None and _assigned(body[i]) & used:
            kind[i], used = True, used | used_globals(ast.unparse(body[i].value))
    rest = {line for i, node in enumerate(body) if not kind[i] for line in _lines(node)}
    kept = {i for i, node in enumerate(body) if kind[i] and not rest.intersection(_lines(node))}
    if not any(isinstance(body[i], _DEFINES) for i in kept):
        return None
    rest |= {line for i, node in enumerate(body) if i not in kept for line in _lines(node)}
    lines = source.splitlines(keepends=True)
    return ("".join("\n" if i in rest else line for i, line in enumerate(lines)),
            "".join(line if i in rest else "\n" for i, line in enumerate(lines)))


_DEFINES = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (*_DEFINES, ast.Import, ast.ImportFrom)


def _assigned(node) -> set[str]:
    """The names a plain assignment (``x = ...``, ``x: T = ...``) binds; else none."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)):
        return set()
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {t.id for t in targets} if all(isinstance(t, ast.Name) for t in targets) else set()


def _lines(node) -> range:  # a statement's lines, 0-based (a decorator's are no other's)
    return range(node.lineno - 1, node.end_lineno)


def _as_importable(lines: list[str]) -> list[str]:
    """IPython input transformer: :func:`split_cell`'s definitions, where they start."""
    from IPython import get_ipython

    from talk_helpers.notebook.cells import MAGIC, CellError, plan

    source = "".join(lines)
    split = None if source.lstrip().startswith("%") else split_cell(source)
    if split is None:
        return lines
    try:  # definitions that use an ordinary cell's names: the cell runs as it is
        plan(split[0], getattr(get_ipython(), "user_ns", None))
    except CellError:
        return lines
    definitions, rest = split
    if not rest.strip():
        return [f"%%{MAGIC}\n", *lines]
    rest_lines = rest.splitlines(keepends=True)
    first = next(i for i, line in enumerate(definitions.splitlines())
                 if line.strip() and not line.lstrip().startswith("#"))
    rest_lines[first] = f"get_ipython().run_cell_magic({MAGIC!r}, '', {definitions!r})\n"
    return rest_lines


def _enable_definition_cells() -> None:
    from IPython import get_ipython

    transforms = getattr(get_ipython(), "input_transformers_cleanup", [_as_importable])
    if _as_importable.__name__ not in [getattr(t, "__name__", "") for t in transforms]:
        transforms.append(_as_importable)


def _dump(obj, file, protocol=None) -> None:
    """multiprocessing's ``reduction.dump``, refusing what the worker cannot import."""
    data = bytes(multiprocessing.reduction.ForkingPickler.dumps(obj, protocol))
    strings, names = [], []
    for op, arg, _ in pickletools.genops(data) if b"__main__" in data else ():
        if op.name == "STACK_GLOBAL" and strings[-2:-1] == ["__main__"]:
            names.append(strings[-1])
        elif isinstance(arg, str):
            strings.append(arg)
    if names:
        raise pickle.PicklingError(
            f"{', '.join(names)} is defined in an ordinary cell, so a worker started anew "
            "cannot import it. Define it at the top level of a cell, with the imports it "
            "uses in that cell, and run that cell again.")
    file.write(data)


def _warm_up() -> None:
    """Start now what the first demos would otherwise wait for."""
    from talk_helpers.runtime import rank_entry, run_world

    with rank_entry.loading():  # imports with the collector paused: a third less CPU
        from torch.utils.data import DataLoader

        from talk_helpers.diagrams.talk_figures import worker_reads

        if multiprocessing.get_start_method() == "fork":
            rank_entry.warm_imports()  # DDP's: forked ranks inherit them
    worker_reads([(0, 0)], n_ids=1)._repr_svg_()  # matplotlib's imports and font cache
    list(DataLoader(range(NUM_WORKERS), num_workers=NUM_WORKERS))  # the workers' server
    report = run_world(_warm_rank, WORLD_SIZE, args=(NUM_WORKERS,), reuse=True,
                       timeout_s=120, collective_timeout_s=60)
    if not report.ok:
        raise RuntimeError(f"the talk's warm world did not start:\n{report!r}")


def _warm_rank(rank: int, world_size: int, num_workers: int) -> int:
    """In each rank of the warm world: start DataLoader workers (under forkserver, the
    rank's workers' server) and wrap a DDP model (its imports), once."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    list(DataLoader(range(num_workers), num_workers=num_workers))
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    model(torch.ones(1, 1)).sum().backward()
    return rank
