"""DDP figures for notebooks 05 and 06: the world in one picture, who reads which sample,
and how many batches each rank gets (from :mod:`talk_helpers.model.simulate` or a real run)."""

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from talk_helpers.diagrams import shown_once
from talk_helpers.palette import PALETTE

__all__ = ["ddp_picture", "placement_pairs", "rank_worker_grids", "batches_per_rank", "FIGURES"]


def ddp_picture(world_size: int = 2, workers: int = 2):
    """DDP in one picture: each rank holds a model copy and a DataLoader with its own
    workers; after every backward pass the ranks all-reduce their gradients."""
    fig, ax = plt.subplots(figsize=(9, 3.6), layout="constrained")
    width = 1.0 / world_size
    for r in range(world_size):
        x0 = r * width + 0.02
        colour = PALETTE[r % len(PALETTE)]
        ax.add_patch(FancyBboxPatch((x0, 0.32), width - 0.04, 0.6, boxstyle="round,pad=0.01",
                                    facecolor="white", edgecolor=colour, linewidth=2))
        ax.text(x0 + 0.01, 0.88, f"rank {r} (one process)", fontsize=10, va="top",
                color=colour, fontweight="bold")
        ax.text(x0 + (width - 0.04) / 2, 0.72, "model copy  ← forward, backward",
                ha="center", fontsize=9)
        ax.text(x0 + (width - 0.04) / 2, 0.6, "DataLoader main process", ha="center",
                fontsize=9)
        for w in range(workers):
            wx = x0 + 0.02 + w * (width - 0.08) / workers
            ax.add_patch(FancyBboxPatch((wx, 0.38), (width - 0.1) / workers, 0.12,
                                        boxstyle="round,pad=0.005", facecolor=colour,
                                        alpha=0.25, edgecolor=colour))
            ax.text(wx + (width - 0.1) / workers / 2, 0.44, f"worker {w}", ha="center",
                    va="center", fontsize=8)
    for r in range(world_size - 1):
        ax.add_patch(FancyArrowPatch(((r + 0.5) * width + 0.1, 0.2),
                                     ((r + 1.5) * width - 0.1, 0.2), arrowstyle="<->",
                                     mutation_scale=15, color="black"))
    ax.text(0.5, 0.08, "all-reduce of the gradients after every backward pass: "
            "every rank must take the same number of steps", ha="center", fontsize=9)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title("DDP: one process per rank, two levels of parallel loading, "
                 "one collective per step", loc="left", fontsize=10)
    return shown_once(fig)


def placement_pairs(sim) -> list[tuple[int, tuple[int, int]]]:
    """(sample id, (rank, worker)) pairs of a Simulation, for ``assignment_grids``."""
    return [(int(i), (r, w)) for r, per_rank in enumerate(sim.worker_samples)
            for w, ids in enumerate(per_rank) for i in ids.tolist()]


def rank_worker_grids(panels: dict, *, n_ids: int | None = None):
    """Assignment grids, one row per (rank, worker): ``panels`` maps a title to a
    Simulation (or to (sample id, (rank, worker)) pairs)."""
    from talk_helpers.diagrams.workers import assignment_grids

    pairs = {title: placement_pairs(p) if hasattr(p, "worker_samples") else p
             for title, p in panels.items()}
    return shown_once(assignment_grids(pairs, n_ids=n_ids))


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
