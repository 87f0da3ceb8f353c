"""Environment variables set for the length of a block, and put back after it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

__all__ = ["variables_set"]


@contextlib.contextmanager
def variables_set(values: Mapping[str, str], *, keep_set: bool = False) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block (``keep_set=True``: a variable already
    set keeps its value). Afterwards each of these variables has its value from before the
    block, or is unset again; variables the block itself sets under other names stay."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if not keep_set or name not in os.environ:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
