"""Where the package writes its files: folders only this user can read or change.

The users of a lab server share one temporary folder. A folder at a fixed name there is
made by whichever user comes first, and every later user then reads what that one left
in it (tar shards, optimized chunks, a dataset cache). So every file the package writes
goes under

    <temporary folder>/talk_helpers-<uid>/<checkout>/<name>

each level made with mode 0700. ``<uid>`` keeps users apart; ``<checkout>`` (the folder
this copy of the package was imported from, as a name and a hash) keeps two clones of
different versions from reading each other's files.

A folder on that path that already exists is used only if it is a real folder (not a
link), owned by this user and writable by nobody else; else its content may not be this
user's, and it is never read. The next name (``talk_helpers-<uid>-1``, ``-2``, …) is tried
instead, in the same order by every process of this user, so that the ranks and workers of
one run still agree on one folder.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["UnsafeDirectory", "private_dir", "user_root"]

MODE = 0o700
ATTEMPTS = 100  # names tried before giving up (each one made by someone else)
_CHECKOUT = Path(__file__).resolve().parent.parent


class UnsafeDirectory(OSError):
    """No folder of this user's own could be found or made for the package's files."""


def private_dir(name: str) -> str:
    """``<this user's folder>/<this checkout>/<name>``, made with mode 0700 if missing.

    ``name`` is one folder name (``"shards"``, ``"library_audit"``); the caller writes
    under the returned path. Never a folder another user made or may write into.
    """
    if not isinstance(name, str) or not name or name in (".", "..") \
            or os.sep in name or (os.altsep and os.altsep in name):
        raise ValueError(f"name must be one folder name (no separator, not '.' or '..'), "
                         f"got {name!r}")
    checkout = _ensure_own(user_root() / _checkout_name())
    return str(_ensure_own(checkout / name))


def user_root() -> Path:
    """This user's folder in the temporary folder: the first of ``talk_helpers-<uid>``,
    ``talk_helpers-<uid>-1``, … that is missing (then made) or already this user's own."""
    base = Path(tempfile.gettempdir())
    uid = _uid()
    stem = f"talk_helpers-{uid}" if uid is not None else "talk_helpers"
    refused = []
    for attempt in range(ATTEMPTS):
        candidate = base / (stem if attempt == 0 else f"{stem}-{attempt}")
        try:
            return _ensure_own(candidate)
        except UnsafeDirectory as exc:
            refused.append(str(exc))
    raise UnsafeDirectory(
        f"no private folder for talk_helpers in {base}: {ATTEMPTS} names refused, "
        f"the first because {refused[0]}. Set TMPDIR to a folder of your own.")


def _checkout_name() -> str:
    digest = hashlib.sha256(str(_CHECKOUT).encode()).hexdigest()[:12]
    return f"{_CHECKOUT.name}-{digest}"


def _uid() -> int | None:
    geteuid = getattr(os, "geteuid", None)  # absent on Windows, whose temp folder is per user
    return geteuid() if geteuid is not None else None


def _ensure_own(path: Path) -> Path:
    """``path`` as a folder of this user's own, with mode 0700: made if missing, checked if
    not. Raises :class:`UnsafeDirectory` for a link, a file, a folder owned by someone else
    or one that others may write into."""
    try:
        os.mkdir(path, MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafeDirectory(f"{path} cannot be made ({exc.strerror})") from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{path} is not a folder (a link or a file is never followed)")
    uid = _uid()
    if uid is not None and info.st_uid != uid:
        raise UnsafeDirectory(f"{path} belongs to uid {info.st_uid}, not to this user "
                              f"(uid {uid})")
    if uid is not None and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeDirectory(f"{path} is writable by others (mode "
                              f"{stat.S_IMODE(info.st_mode):o}), so what is in it may not "
                              "be this user's")
    if uid is not None and stat.S_IMODE(info.st_mode) != MODE:
        os.chmod(path, MODE)  # this user's own, readable by others: make it private
    return path
