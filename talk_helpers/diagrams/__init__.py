"""Figures drawn from real runs, one module per topic.

Each module draws from data a notebook (or its ``FIGURES`` entry) recorded, with the
Okabe-Ito palette (:data:`talk_helpers.notebook.PALETTE`) and labelled axes. ``FIGURES``
in a module maps a file name in ``imgs/`` to a zero-argument function returning a
matplotlib Figure; ``python -m talk_helpers.diagrams imgs/`` regenerates them all.

    from talk_helpers.diagrams.workers import assignment_grid, batch_sizes_by_worker
"""

import importlib
import pkgutil

__all__ = ["all_figures", "save_figure"]

SAVE_DPI = 100


def all_figures() -> dict:
    """Every submodule's ``FIGURES``, merged: file name -> zero-argument function."""
    figures = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, make in getattr(module, "FIGURES", {}).items():
            if name in figures:
                raise ValueError(f"two diagram modules define the figure {name!r}")
            figures[name] = make
    return dict(sorted(figures.items()))


def save_figure(fig, path) -> None:
    """Save ``fig`` as a PNG whose bytes depend only on its content (no date, no version)."""
    fig.savefig(path, dpi=SAVE_DPI, format="png", metadata={"Software": None})
