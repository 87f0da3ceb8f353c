"""Progress bars that leave the finished state behind, not a frozen first frame.

In a notebook, tqdm's widget bar is stored with the notebook but its state is not, so a
reader without a kernel sees it stuck at 0 %. :func:`progress` draws tqdm's own text bar
through a display handle instead, and replaces it with a one-line summary when the work
is done. In a terminal it is plain tqdm (cleared when done).

    with progress(total=1000, desc="map", unit="samples") as bar:
        bar.update(256)
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from tqdm.std import tqdm

from talk_helpers.arguments import require_int

__all__ = ["progress"]

REFRESH_S = 0.5


class _NotebookBar:
    """A text bar in one display output, redrawn at most every ``REFRESH_S`` seconds."""

    def __init__(self, total, desc: str, unit: str):
        from IPython.display import display

        self.total, self.desc, self.unit = total, desc, unit
        self.n, self.start, self.drawn_at = 0, time.perf_counter(), 0.0
        self.handle = display({"text/plain": self._frame()}, raw=True, display_id=True)

    def _frame(self) -> str:
        return tqdm.format_meter(self.n, self.total, time.perf_counter() - self.start,
                                 prefix=self.desc, unit=self.unit, unit_scale=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if now - self.drawn_at >= REFRESH_S:
            self.drawn_at = now
            self.handle.update({"text/plain": self._frame()}, raw=True)

    def close(self) -> None:
        unit = self.unit if self.n == 1 or self.unit.endswith("s") else f"{self.unit}s"
        self.handle.update({"text/plain": f"✔ {self.desc}: {self.n:,} {unit}"}, raw=True)


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (where outputs can be updated in place)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


@contextmanager
def progress(total: int | None = None, *, desc: str = "working", unit: str = "it",
             disable: bool = False):
    """A bar with ``.update(n)``: tqdm's text in a notebook output that ends as a summary,
    plain tqdm elsewhere; ``disable=True`` draws nothing."""
    require_int("total", total, minimum=0, allow_none=True)
    if disable or not in_notebook():
        with tqdm(total=total, desc=desc, unit=unit, leave=False, disable=disable,
                  mininterval=REFRESH_S) as bar:
            yield bar
        return
    bar = _NotebookBar(total, desc, unit)
    try:
        yield bar
    finally:
        bar.close()
