"""The talk's set-up: the one call on its first slide, ``start_talk()``.

It does what every notebook's first cell does (:func:`talk_helpers.notebook.setup_notebook`),
then readies the speaker's laptop. :func:`prepare_kernel`, which `make talk` also runs as
every kernel starts, takes the talk's start method (:func:`talk_start_method`: forkserver
where the platform gives spawn and has forkserver, as macOS does) and makes a cell's
definitions importable by workers (:func:`split_cell`: they run as an ``%%importable`` cell,
:mod:`talk_helpers.notebook.cells`, with no magic line on the slide); a worker started anew
that would need a class of an ordinary cell is refused, saying what to do. :func:`start_talk`
then starts what a demo would wait for: matplotlib (a first figure), the workers' server and
a warm world of two ranks (:mod:`talk_helpers.runtime.warm`) that have started DataLoader
workers and wrapped a DDP model once. Nothing runs at import.
"""

from __future__ import annotations

import ast
import os
import pickle
import pickletools
import time
from dataclasses import dataclass

__all__ = ["NO_FORKSERVER_ENV", "TalkReady", "split_cell", "prepare_kernel",
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
    if method != "fork":
        _refuse_ordinary_cells()
    _enable_definition_cells()
    return method, platform_method


def split_cell(source: str) -> tuple[str, str] | None:
    """A cell's definitions, which workers import, and the rest, which runs in the kernel
    alone; each keeps the cell's lines (the other's blank). Definitions are its imports,
    classes, functions and the assignments those use (or constants); a statement sharing
    a line with the rest is rest. None for a cell that defines no class or function."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    kind = [_kind(node) for node in body]  # True: definition, None: if used, False: rest
    used = set().union(*(_globals(node) for i, node in enumerate(body) if kind[i]))
    for i in reversed(range(len(body))):  # an assignment uses only those before it
        if kind[i] is None and _assigned(body[i]) & used:
            kind[i], used = True, used | _globals(body[i].value)
    rest = {line for i, node in enumerate(body) if not kind[i] for line in _lines(node)}
    kept = {i for i, node in enumerate(body) if kind[i] and not rest.intersection(_lines(node))}
    if not any(isinstance(body[i], _DEFINES) for i in kept):
        return None
    rest |= {line for i, node in enumerate(body) if i not in kept for line in _lines(node)}
    lines = source.splitlines(keepends=True)
    return ("".join("\n" if i in rest else line for i, line in enumerate(lines)),
            "".join(line if i in rest else "\n" for i, line in enumerate(lines)))


# --------------------------------------------------------------------------- internals


def _has_forkserver() -> bool:
    import multiprocessing

    return (os.environ.get(NO_FORKSERVER_ENV, "").strip() != "1"
            and "forkserver" in multiprocessing.get_all_start_methods())


_DEFINES = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _kind(node) -> bool | None:
    """A top-level statement: a definition (True), an assignment that is one if a
    definition uses it (None), or something that runs (False)."""
    if isinstance(node, (*_DEFINES, ast.Import, ast.ImportFrom)):
        return True
    return None if _assigned(node) else False


def _assigned(node) -> set[str]:
    """The names a plain assignment (``x = ...``, ``x: T = ...``) binds; else none."""
    targets = getattr(node, "targets", [getattr(node, "target", None)])
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and all(
            isinstance(t, ast.Name) for t in targets):
        return {t.id for t in targets}
    return set()


def _globals(node) -> set[str]:
    from talk_helpers.notebook.cells import used_globals

    return used_globals(ast.unparse(node))


def _lines(node) -> range:
    """The 0-based lines of a top-level statement, its decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return range(first - 1, node.end_lineno)


def _as_importable(lines: list[str]) -> list[str]:
    """IPython input transformer: a cell's definitions run as an ``%%importable`` cell
    where the first of them starts; the rest runs as written, on the same lines."""
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

    shell = get_ipython()
    if shell is None:
        return
    transforms = shell.input_transformers_cleanup
    if not any(getattr(t, "__name__", "") == _as_importable.__name__ for t in transforms):
        transforms.append(_as_importable)


def _refuse_ordinary_cells() -> None:
    from multiprocessing import reduction

    reduction.dump = _dump


def _dump(obj, file, protocol=None) -> None:
    """multiprocessing's ``reduction.dump`` for workers started anew (spawn, forkserver),
    which cannot import what an ordinary cell defined (the kernel's ``__main__``): such a
    name stops the start, saying what to do, where the worker would die."""
    from multiprocessing.reduction import ForkingPickler

    data = bytes(ForkingPickler.dumps(obj, protocol))
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
    import multiprocessing

    from talk_helpers.runtime import rank_entry, run_world

    with rank_entry.loading():  # imports with the collector paused: a third less CPU
        from torch.utils.data import DataLoader

        from talk_helpers.diagrams.talk_figures import worker_reads

        if multiprocessing.get_start_method() == "fork":  # forked ranks inherit them
            rank_entry.warm_imports()
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
