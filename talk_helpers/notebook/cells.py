"""Lesson code defined in a notebook cell that DataLoader workers and ranks can import.

Under spawn and forkserver a DataLoader worker (or a rank) receives its dataset pickled, and
pickle stores a class or function as ``module.qualname``: the worker imports that module.
A class defined in an ordinary cell lives in the kernel's ``__main__``, which no other
process can import. A cell whose first line is ``%%importable`` is written to a module of
its own instead, ``cell_<hash of its text>`` in a directory on ``sys.path``, and imported;
its names are bound in the notebook as if the cell had run there. Every process finds the
module by its name: a forked one among the modules it inherited, any other in its file.

The one rule: everything such a cell uses comes from its own imports or from an earlier
``%%importable`` cell. Those names are imported on the module's first line (so that its
line numbers are the cell's, the magic being line 1); a name that only an ordinary cell
defines is refused, since no worker could import it.

An edited cell is a new module (its name hashes its text), never a stale one. The
``%%importable`` cells that use its names are then updated too, as ordinary cells would
see the new names: each is run again, as a new module that imports the new definitions,
and the edited cell says which ones (:class:`Update`). A name defined again since by
another cell keeps that definition.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import hashlib
import importlib
import os
import shutil
import symtable
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType

MAGIC = "importable"  # the cell magic: %%importable
PREFIX = "cell_"  # module names are PREFIX + the first 8 hex digits of the text's sha256

__all__ = ["MAGIC", "CellError", "CellModule", "Update", "define", "directory", "enable", "plan",
           "used_globals", "last_updates"]


class CellError(Exception):
    """An ``%%importable`` cell that a worker could not import; the message says why."""


@dataclass(frozen=True)
class CellModule:
    """What an ``%%importable`` cell becomes: a module's name and the text of its file."""

    name: str
    text: str  # one header line (imports or a comment), then the cell's body
    imports: dict[str, str] = field(default_factory=dict)  # name -> module it comes from


@dataclass(frozen=True)
class Update:
    """A cell run again because a name it uses was defined anew: the names it defines
    (``defines``), the changed names it uses (``uses``), and the error if it failed."""

    defines: tuple[str, ...]
    uses: tuple[str, ...]
    error: str | None = None

    def __str__(self) -> str:
        what = ", ".join(self.defines) or "a cell"
        uses = ", ".join(self.uses)
        if self.error is None:
            return f"↻ updated {what}, which uses {uses}"
        return (f"⚠ could not update {what}, which uses {uses}: {self.error}. "
                "Run its cell again")


def enable() -> Path:
    """Make ``%%importable`` cells work in this process; return their modules' directory.

    Creates the directory (removed when this process exits), puts it first on
    ``sys.path`` and, in IPython, registers the magic. Call it before a forkserver
    starts, so that the server's children look there too. Calling it again is harmless.
    """
    global _directory
    if _directory is None:
        _directory = Path(tempfile.mkdtemp(prefix="talk-cells-"))
        atexit.register(_remove, _directory, os.getpid())
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))
    _register_magic()
    return _directory


def directory() -> Path | None:
    """Where the cells' modules are written, or None before :func:`enable`."""
    return _directory


def define(body: str, namespace: MutableMapping | None = None) -> ModuleType:
    """Do what an ``%%importable`` cell with this ``body`` does; return its module.

    ``body`` is the cell without its magic line, so its line k is the module's (and the
    cell's) line k + 1. The module's names are bound in ``namespace`` (the notebook's, in
    the magic); names there that no ``%%importable`` cell defined are refused
    (:class:`CellError`). An error in the body is raised with the body's own frames only.
    Cells that use a name this one defines anew are run again (:func:`last_updates`).
    """
    __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
    _last_updates.clear()
    return _define(body, namespace, set())


def last_updates() -> list[Update]:
    """The cells the last :func:`define` ran again, in the order it ran them."""
    return list(_last_updates)


def _define(body: str, namespace: MutableMapping | None, visited: set[str],
            bind: set[str] | None = None) -> ModuleType:
    """:func:`define`; ``bind``: bind only these names (None: all), for a cell run again
    whose other names were defined again since by later cells."""
    __tracebackhide__ = True
    folder = _directory if _directory is not None else enable()
    cell = plan(body, namespace)
    path = folder / f"{cell.name}.py"
    if not path.exists():
        _write(path, cell.text)
    before = sys.modules.pop(cell.name, None)  # run again: executed again, like any cell
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(cell.name)
    except BaseException as exc:
        if before is not None:  # what its last good run made still pickles
            sys.modules[cell.name] = before
        raise exc.with_traceback(_frames_of(path, exc.__traceback__)) from None
    _imports[cell.name] = dict(cell.imports)
    _bodies[cell.name] = body
    visited.add(cell.name)
    if before is not None:
        _rebind_dependents(module)
    defined = {}
    for name, value in vars(module).items():
        if _is_dunder(name) or name in cell.imports or (bind is not None and name not in bind):
            continue
        defined[name] = value
        _latest[name] = cell.name
        if namespace is not None:
            namespace[name] = value
    _update_dependents(module.__name__, defined, namespace, visited)
    return module


def plan(body: str, namespace: Mapping | None = None) -> CellModule:
    """The module an ``%%importable`` cell with this ``body`` becomes, without writing it.

    The header imports what the body uses from earlier ``%%importable`` cells; raises
    :class:`CellError` for a name that only an ordinary cell of ``namespace`` defines.
    """
    imports: dict[str, str] = {}
    refused = []
    for name in sorted(used_globals(body)):
        module = _latest.get(name)
        defined = namespace is not None and name in namespace
        if module is not None and (not defined or _same(namespace[name], module, name)):
            imports[name] = module
        elif defined:
            refused.append(_refusal(name, namespace[name], module is not None))
    if refused:
        raise CellError("\n".join(refused))
    text = _module_text(body, imports)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return CellModule(f"{PREFIX}{digest}", text, imports)


def used_globals(body: str) -> set[str]:
    """The global names ``body`` uses but does not bind, builtins and dunders left out.

    A name counts wherever it is read as a global: at the top level, in a class body or
    inside a function. Raises SyntaxError for a body that is not Python, with the line
    numbers of a cell whose first line is the magic.
    """
    top = symtable.symtable(f"\n{body}", f"<%%{MAGIC} cell>", "exec")
    used: set[str] = set()
    bound = {symbol.get_name() for symbol in top.get_symbols() if symbol.is_local()}
    tables = [top]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            if symbol.is_referenced() and symbol.is_global():
                used.add(symbol.get_name())
            if symbol.is_declared_global() and symbol.is_assigned():
                bound.add(symbol.get_name())  # `global x; x = ...` in a function
    return {name for name in used - bound
            if not _is_dunder(name) and not hasattr(builtins, name)}


# --------------------------------------------------------------------------- internals

_directory: Path | None = None
_latest: dict[str, str] = {}  # name -> the cell module that defined it last
_imports: dict[str, dict[str, str]] = {}  # cell module -> {name: module it imported from}
_bodies: dict[str, str] = {}  # cell module -> the body it was made from
_last_updates: list[Update] = []
_last_mtime_ns = 0


_MISSING = object()


def _same(value, module: str, name: str) -> bool:
    """Whether the notebook's ``name`` is still the object that ``module`` defined."""
    return getattr(sys.modules.get(module), name, _MISSING) is value


def _refusal(name: str, value, redefined: bool) -> str:
    where = "an ordinary cell"
    if isinstance(value, ModuleType):
        return (f"`{name}` is imported in {where}, so a DataLoader worker cannot see it: "
                f"import it in this cell or in an earlier %%{MAGIC} cell")
    if redefined:
        return (f"`{name}` was last defined in {where}, so a DataLoader worker cannot "
                f"import it: define it in this cell or in an earlier %%{MAGIC} cell")
    return (f"`{name}` is defined in {where}, so a DataLoader worker cannot import it: "
            f"define it in this cell or in an earlier %%{MAGIC} cell")


def _module_text(body: str, imports: dict[str, str]) -> str:
    """The body under one header line, so that the module's line numbers stay the cell's.

    The imports go on that line, or, where the body starts with ``from __future__``
    imports (which must come first in a module), at the end of the last of them.
    """
    lines = [f"# %%{MAGIC} cell: line N of this file is line N of the cell",
             *body.split("\n")]
    if imports:
        statement = "; ".join(f"from {module} import {', '.join(sorted(names))}"
                              for module, names in sorted(_by_module(imports).items()))
        future = _last_future_import(body)
        if future is None:
            lines[0] = statement
        else:
            line = lines[future.end_lineno]
            lines[future.end_lineno] = (f"{line[:future.end_col_offset]}; {statement}"
                                        f"{line[future.end_col_offset:]}")
    text = "\n".join(lines)
    return text if text.endswith("\n") else text + "\n"


def _by_module(imports: dict[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, module in imports.items():
        grouped.setdefault(module, []).append(name)
    return grouped


def _last_future_import(body: str) -> ast.ImportFrom | None:
    if "__future__" not in body:
        return None
    last = None
    for index, node in enumerate(ast.parse(body).body):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            last = node
        elif not (index == 0 and isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Constant)):  # a docstring may come first
            break
    return last


def _write(path: Path, text: str) -> None:
    """Write atomically: a process importing the module never reads half a file."""
    global _last_mtime_ns
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temporary, path)
    # Python's import caches each directory's listing until the directory's mtime
    # changes; a file made within the same clock tick as the last listing would stay
    # invisible to a process (a warm rank, a forkserver's child) that listed it then.
    _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 1_000)
    os.utime(path.parent, ns=(_last_mtime_ns, _last_mtime_ns))


def _frames_of(path: Path, tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the cell module's first frame on (None if it has none)."""
    while tb is not None and tb.tb_frame.f_code.co_filename != str(path):
        tb = tb.tb_next
    return tb


def _update_dependents(source: str, defined: dict, namespace: MutableMapping | None,
                       visited: set[str]) -> None:
    """Run again every current cell that imported one of ``defined``'s names from another
    module, with an object ``source`` now replaces. A cell is current while it still
    defines the latest version of some name; each runs at most once per :func:`define`."""
    for name, imports in list(_imports.items()):
        if name in visited or name == source:
            continue
        changed = sorted(imported for imported, origin in imports.items()
                         if imported in defined and origin != source
                         and getattr(sys.modules.get(origin), imported, _MISSING)
                         is not defined[imported])
        current = {n for n, module in _latest.items() if module == name}
        if not changed or not current:
            continue
        visited.add(name)
        shown = tuple(sorted(n for n in current
                             if _made_by(getattr(sys.modules.get(name), n, None), name)))
        index = len(_last_updates)  # before the cells that use this one's names
        try:
            _define(_bodies[name], namespace, visited, bind=current)
        except Exception as exc:  # noqa: BLE001 - the cell's own code may raise anything
            line = traceback.format_exception_only(type(exc), exc)[-1].strip()
            _last_updates.insert(index, Update(shown, tuple(changed), line))
        else:
            _last_updates.insert(index, Update(shown, tuple(changed)))


def _made_by(value, module: str) -> bool:
    """Whether ``value`` is what a cell defines, not something it imported."""
    if isinstance(value, ModuleType):
        return False
    if isinstance(value, type) or callable(value):
        return getattr(value, "__module__", None) == module
    return True


def _rebind_dependents(module: ModuleType) -> None:
    """A cell run again unchanged is the same module executed again: cells that imported
    names from it now see the new objects, as a new process importing them would."""
    for name, imports in _imports.items():
        dependent = sys.modules.get(name)
        if dependent is None:
            continue
        for imported, source in imports.items():
            if source == module.__name__ and hasattr(module, imported):
                setattr(dependent, imported, getattr(module, imported))


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _remove(folder: Path, owner: int) -> None:
    if os.getpid() == owner:  # never from a forked child that inherited the hook
        shutil.rmtree(folder, ignore_errors=True)


def _register_magic() -> None:
    if "IPython" not in sys.modules:  # no IPython imported: no shell to register with
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.register_magic_function(_importable, "cell", MAGIC)


def _importable(line: str, cell: str) -> None:
    """%%importable: run this cell as a module that DataLoader workers and ranks import."""
    __tracebackhide__ = True
    from IPython import get_ipython
    from IPython.core.error import UsageError

    if line.strip():
        raise UsageError(f"%%{MAGIC} takes no arguments, got {line.strip()!r}")
    try:
        define(cell, get_ipython().user_ns)
    except CellError as exc:
        raise UsageError(str(exc)) from None
    except SyntaxError as exc:  # IPython would show it under every frame of the magic
        raise UsageError(_syntax_message(exc)) from None
    for update in last_updates():
        print(update)


def _syntax_message(exc: SyntaxError) -> str:
    """Where in the cell, what, and the line with its caret (as Python prints them)."""
    shown = traceback.format_exception_only(SyntaxError, exc)[1:-1]
    return (f"{type(exc).__name__} in line {exc.lineno} of the cell: {exc.msg}\n"
            + "".join(shown).rstrip())
