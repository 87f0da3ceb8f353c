"""Figures drawn from real runs, one module per topic.

Each module draws from data a notebook (or its ``FIGURES`` entry) recorded, with the
Okabe-Ito palette (:data:`talk_helpers.palette.PALETTE`) and labelled axes. ``FIGURES``
in a module maps a file name in ``imgs/`` to a zero-argument function returning a
matplotlib Figure; ``python -m talk_helpers.diagrams imgs/`` regenerates them all.

Every function that returns a figure returns it through :func:`shown_once`, so a cell
ending on the call shows the picture exactly once, whether or not pyplot was imported.

    from talk_helpers.diagrams.workers import assignment_grid, batch_sizes_by_worker
"""

import importlib
import pkgutil

__all__ = ["all_figures", "save_figure", "shown_once"]

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


def shown_once(fig):
    """Hand ``fig`` to the caller, ready to display: closed in pyplot (so the inline backend
    does not draw it a second time at the end of the cell) and, inside IPython, drawn as a
    PNG by a formatter for every matplotlib Figure (so it is never a bare ``<Figure …>``)."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    _register_png_formatter()
    return fig


def _register_png_formatter() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing displays anything
        return
    shell = get_ipython()
    if shell is None:
        return
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    png = shell.display_formatter.formatters["image/png"]
    if Figure not in png.type_printers:  # the inline backend may have registered its own
        png.for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def save_figure(fig, path) -> None:
    """Save ``fig`` as a PNG whose bytes depend only on its content (no date, no version)."""
    fig.savefig(path, dpi=SAVE_DPI, format="png", metadata={"Software": None})
