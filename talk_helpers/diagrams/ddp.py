"""DDP figures for notebooks 05 and 06: the world in one picture, who reads which sample,
and how many batches each rank gets (from :mod:`talk_helpers.model.simulate` or a real run)."""

from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from talk_helpers.diagrams import shown_once
from talk_helpers.palette import PALETTE

__all__ = ["ddp_picture", "placement_pairs", "rank_worker_grids", "batches_per_rank", "FIGURES"]

FONT = 12


def ddp_picture(world_size: int = 2, workers: int = 2):
    """DDP in one picture: each rank holds a model copy and a DataLoader with its own
    workers; at every step the ranks meet in collectives (buffers broadcast at the forward
    when the model has any, gradients all-reduced after the backward)."""
    fig, ax = plt.subplots(figsize=(9, 4.2), layout="constrained")
    width = 1.0 / world_size
    for r in range(world_size):
        x0 = r * width + 0.02
        colour = PALETTE[r % len(PALETTE)]
        ax.add_patch(FancyBboxPatch((x0, 0.3), width - 0.04, 0.62, boxstyle="round,pad=0.01",
                                    facecolor="white", edgecolor=colour, linewidth=2))
        ax.text(x0 + 0.01, 0.9, f"rank {r} (one process)", fontsize=FONT, va="top",
                color=colour, fontweight="bold")
        ax.text(x0 + (width - 0.04) / 2, 0.73, "model copy: forward, backward",
                ha="center", fontsize=FONT)
        ax.text(x0 + (width - 0.04) / 2, 0.6, "DataLoader (main process)", ha="center",
                fontsize=FONT)
        for w in range(workers):
            wx = x0 + 0.02 + w * (width - 0.08) / workers
            ax.add_patch(FancyBboxPatch((wx, 0.36), (width - 0.1) / workers, 0.14,
                                        boxstyle="round,pad=0.005", facecolor=colour,
                                        alpha=0.25, edgecolor=colour))
            ax.text(wx + (width - 0.1) / workers / 2, 0.43, f"worker {w}", ha="center",
                    va="center", fontsize=FONT - 1)
    for r in range(world_size - 1):
        ax.add_patch(FancyArrowPatch(((r + 0.5) * width + 0.1, 0.2),
                                     ((r + 1.5) * width - 0.1, 0.2), arrowstyle="<->",
                                     mutation_scale=15, color="black"))
    ax.text(0.5, 0.1, "every step: buffers broadcast at the forward (if the model has any),\n"
            "gradients all-reduced after the backward: every rank takes the same steps",
            ha="center", va="center", fontsize=FONT)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title("DDP: one process per rank, its own DataLoader workers, collectives at "
                 "every step", loc="left", fontsize=FONT + 1)
    return shown_once(fig)


def placement_pairs(sim) -> list[tuple[int, tuple[int, int]]]:
    """(sample id, (rank, worker)) pairs of a Simulation."""
    return [(int(i), (r, w)) for r, per_rank in enumerate(sim.worker_samples)
            for w, ids in enumerate(per_rank) for i in ids.tolist()]


def rank_worker_grids(panels: dict, *, n_ids: int | None = None, epoch: int = 0):
    """Who read which sample: one row per (rank, worker), one column per sample id, a
    filled cell where that worker read that id (with a count when it read it more than
    once). ``panels`` maps a title to a Simulation, an :class:`~talk_helpers.audit.AuditReport`
    of a real run (its epoch ``epoch``), or (sample id, (rank, worker)) pairs. For a
    Simulation or an audit every worker gets its row, so a worker that read nothing is an
    empty row, labelled idle."""
    if not panels:
        raise ValueError("panels must map a title to a Simulation, an AuditReport or pairs")
    grids = {title: _placements(data, epoch) for title, data in panels.items()}
    heights = [len(rows) + 1.8 for rows, _ in grids.values()]
    fig, axes = plt.subplots(len(grids), 1, figsize=(10, 0.5 * sum(heights) + 0.4),
                             layout="constrained", height_ratios=heights, squeeze=False)
    for ax, (title, (rows, pairs)) in zip(axes[:, 0], grids.items(), strict=True):
        _grid(ax, title, rows, pairs, n_ids)
    return shown_once(fig)


def _placements(data, epoch: int) -> tuple[list, list]:
    """(every row, (sample id, row) pairs) of a Simulation, an audit or pairs."""
    if hasattr(data, "worker_samples"):
        rows = [(r, w) for r, per_rank in enumerate(data.worker_samples)
                for w in range(len(per_rank))]
        return rows, placement_pairs(data)
    if hasattr(data, "world") and hasattr(type(data), "checks"):
        if data.world is None or not data.world.results:
            raise ValueError("an AuditReport panel needs a real run's results (an audit in "
                             "a world, not in_process=True or a failed one)")
        if not 0 <= epoch < data.n_epochs:
            raise ValueError(f"epoch must be in 0..{data.n_epochs - 1}, got {epoch}")
        rows, pairs = [], []
        for r, rank_run in enumerate(data.world.results):
            seen = rank_run.epochs[epoch]
            workers = seen.num_workers or 0
            rows += [(r, w) for w in range(workers)] or [(r, None)]
            for worker, batch in zip(seen.workers, seen.batches, strict=True):
                pairs += [(int(i), (r, worker)) for i in batch.tolist()]
        return rows, pairs
    pairs = [(int(i), tuple(who)) for i, who in data]
    return sorted({who for _, who in pairs}), pairs


def _grid(ax, title: str, rows: list, pairs: list, n_ids: int | None) -> None:
    counts = Counter(pairs)
    seen = Counter(i for i, _ in pairs)
    n_ids = n_ids if n_ids is not None else (max(seen) + 1 if seen else 0)
    read = {who for _, who in pairs}
    image = np.ones((len(rows), n_ids, 3))
    for (sample, who), _ in counts.items():
        if 0 <= sample < n_ids and who in rows:
            image[rows.index(who), sample] = to_rgb(PALETTE[rows.index(who) % len(PALETTE)])
    ax.imshow(image, aspect="auto", interpolation="nearest",
              extent=(-0.5, n_ids - 0.5, len(rows) - 0.5, -0.5))
    for (sample, who), times in counts.items():
        if times > 1 and who in rows and n_ids <= 40:
            ax.text(sample, rows.index(who), str(times), ha="center", va="center",
                    fontsize=FONT - 2, color="white")
    ax.set_xticks(np.arange(-0.5, n_ids, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows), 1), minor=True)
    ax.grid(which="minor", color="#d9d9d9" if n_ids <= 40 else "white", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_yticks(range(len(rows)), [_row_label(who, who in read) for who in rows],
                  fontsize=FONT - 1)
    ax.set_xticks(range(0, n_ids, 1 if n_ids <= 20 else 5 if n_ids <= 60 else 10))
    ax.tick_params(axis="x", labelsize=FONT - 1)
    missing = [i for i in range(n_ids) if seen[i] == 0]
    for sample in missing:
        ax.plot(sample, len(rows) - 0.5, marker="^", color="black", markersize=6,
                clip_on=False)
    ax.set_xlabel("sample id", fontsize=FONT - 1)
    idle = sum(1 for who in rows if who not in read)
    duplicated = sum(1 for times in seen.values() if times > 1)
    summary = (f"{len(seen)} of {n_ids} ids read · {duplicated} duplicated · "
               f"{len(missing)} missing" + (" (▲)" if missing else "")
               + (f" · {idle} of {len(rows)} workers idle" if idle else ""))
    ax.set_title(f"{title}\n{summary}", fontsize=FONT, loc="left")


def _row_label(who, reads: bool) -> str:
    rank, worker = who
    name = f"rank {rank}" if worker is None else f"rank {rank} · worker {worker}"
    return name if reads else f"{name} (idle)"


def batches_per_rank(sim, *, title: str | None = None, ax=None):
    """One stacked bar per rank: how many batches each worker contributes. Ranks whose
    bar is taller than the shortest take steps the others never join."""
    own = ax is None
    if own:
        _, ax = plt.subplots(figsize=(6, 2.8), layout="constrained")
    per_worker = sim.batches_per_worker
    bottoms = [0] * sim.nodes
    for w in range(max(len(p) for p in per_worker)):
        heights = [p[w] if w < len(p) else 0 for p in per_worker]
        label = "one stream" if sim.workers == 0 else f"worker {w}"
        ax.bar(range(sim.nodes), heights, bottom=bottoms, label=label,
               color=PALETTE[w % len(PALETTE)], edgecolor="black", linewidth=0.4)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    low = min(sim.batches_per_rank)
    ax.axhline(low, color="black", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(sim.nodes), [f"rank {r}" for r in range(sim.nodes)])
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("batches in one epoch")
    ax.set_xlabel("rank")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(title or f"batches per rank {sim.batches_per_rank} (dashed: the shortest)",
                 loc="left", fontsize=10)
    return shown_once(ax.figure) if own else ax.figure


def _ddp_picture_figure():
    return ddp_picture()


def _uneven_batches_figure():
    from talk_helpers.model.simulate import simulate

    sim = simulate([5, 3, 3, 3], nodes=2, workers=2, micro_batch_size=4)
    return batches_per_rank(sim, title="4 uneven shards, 2 ranks × 2 workers, micro-batch 4")


FIGURES = {
    "ddp_picture.png": _ddp_picture_figure,
    "uneven_batches_per_rank.png": _uneven_batches_figure,
}
