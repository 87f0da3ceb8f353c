"""Notebook 04's figure: where each worker's seed comes from, and what a worker keeps
between epochs, drawn from what real workers reported.

Each run is what the workers of one DataLoader reported, epoch by epoch: per worker its
id, the seed DataLoader gave it (``get_worker_info().seed``) and the epoch its copy of
the dataset held. A worker whose seed is the one it had the epoch before is the same
process (a new worker gets ``base_seed + id`` from a new ``base_seed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from talk_helpers.diagrams import shown_once
from talk_helpers.palette import BAD_COLOUR, INFO_COLOUR, OK_COLOUR, PALETTE

__all__ = ["worker_copies"]

FONT = 13
MAIN_COLOUR = PALETTE[0]


def worker_copies(runs: Mapping[str, Sequence[Sequence[Mapping]]]):
    """One panel per run: a column per epoch, the main process on top with the
    ``base_seed`` of that epoch's workers (last digits), a box per worker with its seed
    and the epoch its copy of the dataset held: green where
    that is the epoch the main process set, vermillion where it is not. An arrow joins
    the boxes of a worker that lived on into the next epoch.

    ``runs`` maps a title to the epochs of one loader; an epoch is the records its
    workers yielded, each a mapping with ``worker``, ``seed`` and ``epoch``.
    """
    if not runs:
        raise ValueError("runs must map a title to at least one loader's epochs")
    panels = {title: _epochs(title, epochs) for title, epochs in runs.items()}
    workers = max(len(epoch) for epochs in panels.values() for epoch in epochs)
    columns = max(len(epochs) for epochs in panels.values())
    fig, axes = plt.subplots(len(panels), 1, figsize=(3.6 * columns + 1.2,
                                                      (0.95 * (workers + 1) + 0.6) * len(panels)),
                             layout="constrained", squeeze=False)
    for ax, (title, epochs) in zip(axes[:, 0], panels.items(), strict=True):
        _panel(ax, title, epochs, workers)
    fig.suptitle("green: the worker's copy holds the epoch just set · vermillion: an older "
                 "one", x=0.01, ha="left", fontsize=FONT)
    return shown_once(fig)


def _epochs(title: str, epochs) -> list[list[dict]]:
    out = []
    for number, records in enumerate(epochs):
        rows = []
        for record in records:
            try:
                rows.append({"worker": int(record["worker"]), "seed": int(record["seed"]),
                             "epoch": int(record["epoch"])})
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"runs[{title!r}][{number}] must hold one mapping per "
                                 f"worker with int 'worker', 'seed' and 'epoch', got "
                                 f"{record!r}") from None
        out.append(sorted(rows, key=lambda r: r["worker"]))
    if not out:
        raise ValueError(f"runs[{title!r}] holds no epoch")
    return out


def _panel(ax, title: str, epochs: list[list[dict]], workers: int) -> None:
    ax.set_xlim(0, len(epochs))
    ax.set_ylim(0, workers + 1)
    ax.axis("off")
    previous: dict[int, int] = {}
    for e, records in enumerate(epochs):
        new = any(previous.get(r["worker"]) != r["seed"] for r in records)
        base = min(r["seed"] - r["worker"] for r in records)
        main = (f"set_epoch({e}) · base_seed …{base % 10_000:04d}\nnew workers, each with a copy"
                if new else f"set_epoch({e}) · no new base_seed\nsame workers, same copies")
        _box(ax, e, workers + 0.5, main, edge=MAIN_COLOUR, fill="white")
        for r in records:
            y = workers - 0.5 - r["worker"]
            right = r["epoch"] == e
            _box(ax, e, y, f"worker {r['worker']}: seed = base_seed + {r['seed'] - base}\n"
                           f"its copy: epoch {r['epoch']}",
                 edge=OK_COLOUR if right else BAD_COLOUR,
                 fill=OK_COLOUR if right else BAD_COLOUR, alpha=0.18)
            if previous.get(r["worker"]) == r["seed"]:
                ax.add_patch(FancyArrowPatch((e - 0.06, y), (e + 0.06, y), arrowstyle="-|>",
                                             mutation_scale=12, color=INFO_COLOUR,
                                             shrinkA=0, shrinkB=0))
            previous[r["worker"]] = r["seed"]
    ax.set_title(title, loc="left", fontsize=FONT + 1)


def _box(ax, column: int, y: float, text: str, *, edge: str, fill: str,
         alpha: float = 1.0) -> None:
    corner, size = (column + 0.06, y - 0.36), (0.88, 0.72)
    ax.add_patch(FancyBboxPatch(corner, *size, boxstyle="round,pad=0,rounding_size=0.05",
                                facecolor=fill, alpha=alpha, edgecolor="none"))
    ax.add_patch(FancyBboxPatch(corner, *size, boxstyle="round,pad=0,rounding_size=0.05",
                                facecolor="none", edgecolor=edge, linewidth=1.4))
    ax.text(column + 0.5, y, text, ha="center", va="center", fontsize=FONT)
