"""How notebook 09's dataset cuts one epoch into ranks, workers and micro-batches, drawn
from what a real epoch's DataLoaders yielded.

:func:`record_epoch` runs each rank's DataLoader (real workers, under the notebook's start
method) over ``make_final_dataset`` for one epoch; every micro-batch carries the id of the
worker that read it. :func:`epoch_cut` places each micro-batch where its samples sit in the
epoch's order.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle
from torch.utils.data import DataLoader, get_worker_info

from talk_helpers.diagrams import shown_once
from talk_helpers.lessons.datasets.exercise import SHARD_SIZES, make_final_dataset
from talk_helpers.palette import PALETTE

__all__ = ["epoch_cut", "record_epoch"]

SHARD_COLOURS = (PALETTE[4], PALETTE[2], PALETTE[6], PALETTE[3])   # sky blue, green, yellow, pink
WORKER_COLOURS = (PALETTE[0], PALETTE[5], PALETTE[1], PALETTE[7])  # blue, vermillion, …


def tag_worker(batch, rng):
    """A ``transform``: the micro-batch and the DataLoader worker that read it."""
    info = get_worker_info()
    return {"ids": batch, "worker": 0 if info is None else info.id}


def record_epoch(epoch: int = 0, *, world_size: int = 2, num_workers: int = 2,
                 sizes=SHARD_SIZES, batch_size: int = 5) -> dict:
    """One epoch of ``make_final_dataset`` on every rank, read by real DataLoaders: the
    epoch's order, each sample's shard, and each rank's micro-batches in the order its
    loader yielded them, with the worker that read each one."""
    ranks = []
    for rank in range(world_size):
        ds = make_final_dataset(sizes=sizes, batch_size=batch_size, rank=rank,
                                world_size=world_size, transform=tag_worker)
        ds.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=None, num_workers=num_workers)
        ranks.append([(int(b["worker"]), b["ids"].tolist()) for b in loader])
    return {"epoch": epoch, "order": ds.epoch_order(epoch).tolist(),
            "shard_of": np.repeat(np.arange(len(sizes)), sizes).tolist(),
            "ranks": ranks, "samples_per_rank": ds.samples_per_rank,
            "num_workers": num_workers, "batch_size": batch_size}


def epoch_cut(recorded: dict):
    """Three rows over the positions of the epoch's order: the order itself (each sample
    coloured by its shard), then each rank's part cut into micro-batches (coloured by the
    worker that read it, numbered by the step at which the rank's loader yielded it)."""
    order, ranks = recorded["order"], recorded["ranks"]
    where = {sample: position for position, sample in enumerate(order)}
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.75 * (len(ranks) + 1)), layout="constrained")
    _draw_order(ax, order, recorded["shard_of"])
    for row, batches in enumerate(ranks, start=1):
        for step, (worker, ids) in enumerate(batches):
            positions = sorted(where[i] for i in ids)
            _draw_batch(ax, row, positions, worker, step)
    _mark_left_out(ax, recorded, len(ranks))
    ax.set_xlim(-0.5, len(order) - 0.5)
    ax.set_ylim(len(ranks) + 0.6, -0.6)
    rows = [f"order of epoch {recorded['epoch']}"] + [f"rank {r}" for r in range(len(ranks))]
    ax.set_yticks(range(len(rows)), rows, fontsize=12)
    ax.set_xlabel("position in the epoch's order", fontsize=12)
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    ax.legend(handles=_legend(recorded), loc="upper left", bbox_to_anchor=(1.0, 1.0),
              fontsize=11, frameon=False)
    per = recorded["samples_per_rank"]
    ax.set_title(f"Each rank reads {per} consecutive positions of the order, each worker a run "
                 f"of consecutive micro-batches;\nthe rank's loader takes one micro-batch from "
                 f"each worker in turn (the number: the step it comes at)", fontsize=12,
                 loc="left")
    return shown_once(fig)


def _draw_order(ax, order, shard_of) -> None:
    for position, sample in enumerate(order):
        ax.add_patch(Rectangle((position - 0.5, -0.4), 1, 0.8, linewidth=0.3,
                               edgecolor="white",
                               facecolor=SHARD_COLOURS[shard_of[sample] % len(SHARD_COLOURS)]))


def _draw_batch(ax, row, positions, worker, step) -> None:
    """A micro-batch as one box over its positions (one box per position if they are not
    consecutive, which the picture would then show)."""
    runs = np.split(np.array(positions), np.flatnonzero(np.diff(positions) != 1) + 1)
    colour = WORKER_COLOURS[worker % len(WORKER_COLOURS)]
    for run in runs:
        ax.add_patch(Rectangle((run[0] - 0.45, row - 0.38), len(run) - 0.1, 0.76,
                               facecolor=colour, edgecolor="black", linewidth=0.6))
    middle = (positions[0] + positions[-1]) / 2
    ax.text(middle, row, str(step), ha="center", va="center", fontsize=13, color="white",
            fontweight="bold")


def _mark_left_out(ax, recorded, n_ranks) -> None:
    """Positions no rank reads (policy "drop"): hatched, under the rank rows."""
    for position in range(n_ranks * recorded["samples_per_rank"], len(recorded["order"])):
        ax.add_patch(Rectangle((position - 0.45, 0.62), 0.9, n_ranks - 0.24, hatch="///",
                               facecolor="white", edgecolor="grey", linewidth=0.6))


def _legend(recorded) -> list:
    shards = sorted(set(recorded["shard_of"]))
    return ([Patch(facecolor=SHARD_COLOURS[s % len(SHARD_COLOURS)], label=f"shard {s}")
             for s in shards]
            + [Patch(facecolor=WORKER_COLOURS[w], edgecolor="black", label=f"worker {w}")
               for w in range(recorded["num_workers"])]
            + [Patch(facecolor="white", edgecolor="grey", hatch="///", label="dropped")])
