"""Where in the user's code something happened: the file and line an exception was raised
at, or a stuck thread is waiting in, as ``data.py:42 in make_loader``.

"The user's code" is every frame outside Python's own library, installed packages and
the audit's machinery; paths are shown relative to the current directory, or to the
``sys.path`` entry they were imported from, so they read the same on every machine.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Iterable

__all__ = ["defined_at", "display_path", "raised_at", "running_at"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_RUNTIME = os.path.join(os.path.dirname(_HERE), "runtime")
_ORIGINAL = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def raised_at(exc: BaseException) -> str | None:
    """The innermost frame of the user's code in ``exc``'s traceback (a DataLoader worker's
    traceback, carried in the message, counts as innermost), else the innermost frame."""
    frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]
    message = str(exc)
    if "Original Traceback" in message:  # re-raised from a DataLoader worker
        frames += [(path, int(line), name) for path, line, name in _ORIGINAL.findall(message)]
    return _pick(frames)


def running_at(thread_id: int) -> str | None:
    """Where the thread ``thread_id`` is now: its innermost frame in the user's code."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return None
    stack = [(f.filename, f.lineno, f.name) for f in traceback.extract_stack(frame)]
    return _pick(stack, fallback=False)


def defined_at(fn) -> str | None:
    """Where a factory (or the function a ``functools.partial`` wraps) is defined."""
    target = getattr(fn, "func", fn)
    resolve = getattr(target, "resolve", None)   # the command line's imported factory
    if callable(resolve):
        try:
            target = resolve()
        except Exception:
            return None
    try:
        path = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return None
    return f"{display_path(path)}:{line} in {getattr(target, '__name__', '?')}" if path else None


def display_path(path: str) -> str:
    """``path`` relative to the working directory, else to its ``sys.path`` entry."""
    full = os.path.abspath(path)
    cwd = os.getcwd()
    if full.startswith(cwd + os.sep):
        return os.path.relpath(full, cwd)
    roots = [os.path.abspath(p) for p in sys.path if p]
    inside = [root for root in roots if full.startswith(root + os.sep)]
    if inside:
        return os.path.relpath(full, max(inside, key=len))
    return full


def _pick(frames: Iterable[tuple[str, int, str]], fallback: bool = True) -> str | None:
    frames = list(frames)
    for path, line, name in reversed(frames):
        if _is_users(path):
            return f"{display_path(path)}:{line} in {name}"
    if fallback and frames:
        path, line, name = frames[-1]
        return f"{display_path(path)}:{line} in {name}"
    return None


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d) + (_HERE + os.sep,
                                                                     _RUNTIME + os.sep)


_LIBRARY_DIRS = _library_dirs()


def _is_users(path: str) -> bool:
    if not path or path.startswith("<"):
        return False
    full = os.path.abspath(path)
    return not full.startswith(_LIBRARY_DIRS) and "site-packages" not in full \
        and "dist-packages" not in full
