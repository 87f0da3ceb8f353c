"""The first cell of every notebook: ``from talk_helpers.notebook import setup_notebook``.

It applies the start-method switch (and, under forkserver, starts the server with torch
preloaded; under spawn, workers start from :mod:`talk_helpers.runtime.spawned_child`),
enables ``%%importable`` cells (lesson code that workers and ranks can import, see
:mod:`talk_helpers.notebook.cells`), a colour-blind-safe matplotlib style and seeds, and
silences one warning whose text depends on the machine's core count (so stored outputs
are the same on a 2-core CI machine and an 8-core laptop). Nothing else is hidden.
"""

import random
import warnings

import numpy as np
import torch

from talk_helpers.notebook import cells
from talk_helpers.palette import PALETTE
from talk_helpers.runtime.rank_entry import name_spawned_child_main
from talk_helpers.runtime.start_method import apply_start_method, start_forkserver

CORE_COUNT_WARNING = r"This DataLoader will create \d+ worker processes in total"


def setup_notebook(seed: int = 0) -> None:
    """Prepare a notebook kernel for deterministic, machine-independent outputs."""
    apply_start_method()
    name_spawned_child_main()
    cells.enable()  # before the forkserver starts: it keeps the sys.path it started with
    start_forkserver()
    warnings.filterwarnings("ignore", message=CORE_COUNT_WARNING, category=UserWarning)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    _use_palette()


def _use_palette() -> None:
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams["axes.prop_cycle"] = cycler(color=PALETTE)
    mpl.rcParams["figure.dpi"] = 80
    mpl.rcParams["savefig.dpi"] = 100
    mpl.rcParams["image.cmap"] = "cividis"
