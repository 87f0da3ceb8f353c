"""Which worker (or rank and worker) produced which sample, and how big each batch was.

Both figures take what a real run recorded: (sample id, who) pairs, or a
:class:`talk_helpers.lessons.trace.LoaderRun`. "Who" is a worker id, or a (rank, worker) tuple.
"""

from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from talk_helpers.diagrams import shown_once
from talk_helpers.palette import PALETTE

__all__ = ["assignment_grid", "assignment_grids", "batch_sizes", "FIGURES"]

GRID_LINE = "#d9d9d9"


def _pairs(data):
    return list(data.pairs) if hasattr(data, "pairs") else [tuple(p) for p in data]


def _row_name(who):
    if isinstance(who, tuple):
        return f"rank {who[0]} · worker {who[1]}"
    return "main" if who == -1 else f"worker {who}"


def assignment_grid(data, *, n_ids=None, title=None, ax=None):
    """Sample id (x) × worker (y): a cell is filled when that worker produced that id,
    with a number when it produced it more than once. Missing ids are marked below."""
    pairs = _pairs(data)
    counts = Counter(pairs)
    rows = sorted({who for _, who in pairs}, key=lambda w: w if isinstance(w, tuple) else (w,))
    seen = Counter(i for i, _ in pairs)
    n_ids = n_ids if n_ids is not None else (max(seen) + 1 if seen else 0)
    own_figure = ax is None
    if own_figure:
        _, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.6), layout="constrained")
    image = np.ones((len(rows), n_ids, 3))
    for sample, who in counts:
        if 0 <= sample < n_ids:
            image[rows.index(who), sample] = to_rgb(PALETTE[rows.index(who) % len(PALETTE)])
    ax.imshow(image, aspect="auto", interpolation="nearest",
              extent=(-0.5, n_ids - 0.5, len(rows) - 0.5, -0.5))
    for (sample, who), times in counts.items():
        if times > 1 and n_ids <= 40:
            ax.text(sample, rows.index(who), str(times), ha="center", va="center", fontsize=10,
                    color="white")
    ax.set_xticks(np.arange(-0.5, n_ids, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows), 1), minor=True)
    ax.grid(which="minor", color=GRID_LINE if n_ids <= 40 else "white", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_yticks(range(len(rows)), [_row_name(w) for w in rows])
    step = 1 if n_ids <= 20 else (5 if n_ids <= 60 else 10)
    ax.set_xticks(range(0, n_ids, step))
    missing = [i for i in range(n_ids) if seen[i] == 0]
    for sample in missing:
        ax.plot(sample, len(rows) - 0.5, marker="^", color="black", markersize=5,
                clip_on=False)
    ax.set_xlabel("sample id")
    ax.set_ylabel("produced by")
    duplicated = sum(1 for t in seen.values() if t > 1)  # ids, as check_exactly_once counts
    summary = (f"{len(seen)} of {n_ids} ids received · {duplicated} duplicated · "
               f"{len(missing)} missing" + (" (▲)" if missing else ""))
    ax.set_title(f"{title}\n{summary}" if title else summary, fontsize=10, loc="left")
    return shown_once(ax.figure) if own_figure else ax.figure


def assignment_grids(panels, *, n_ids=None):
    """Several assignment grids stacked: ``panels`` maps a title to pairs or a run."""
    heights = [len({who for _, who in _pairs(d)}) + 1.6 for d in panels.values()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 0.42 * sum(heights) + 0.5),
                             layout="constrained", height_ratios=heights, squeeze=False)
    for ax, (title, data) in zip(axes[:, 0], panels.items(), strict=True):
        assignment_grid(data, n_ids=n_ids, title=title, ax=ax)
    return shown_once(fig)


def batch_sizes(runs, *, batch_size=None):
    """One bar per batch in the order the main process received it, height = batch size,
    colour = the worker that built it. ``runs`` maps a title to a LoaderRun."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.1 * len(runs) + 0.6),
                             layout="constrained", squeeze=False, sharey=True)
    workers = sorted({b.worker for run in runs.values() for b in run.batches})
    for ax, (title, run) in zip(axes[:, 0], runs.items(), strict=True):
        full = batch_size or run.batch_size
        sizes = run.sizes
        colours = [PALETTE[max(b.worker, 0) % len(PALETTE)] for b in run.batches]
        ax.bar(range(len(sizes)), sizes, color=colours, edgecolor="black", linewidth=0.4)
        ax.axhline(full, color="black", linestyle="--", linewidth=0.8)
        partial = sum(1 for s in sizes if s < full)
        ax.set_title(f"{title}\n{len(sizes)} batches · {partial} partial (smaller than "
                     f"{full}) · {sum(sizes)} samples", fontsize=10, loc="left")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("batch size")
        ax.set_xlim(-0.7, max(len(sizes), 1) - 0.3)
        ax.set_xticks(range(len(sizes)))
    axes[-1, 0].set_xlabel("batch, in the order the main process received it")
    handles = [Patch(color=PALETTE[max(w, 0) % len(PALETTE)], label=_row_name(w))
               for w in workers]
    fig.legend(handles=handles, loc="outside right upper", fontsize=10, frameon=False)
    return shown_once(fig)



# --- The committed figures (imgs/), each from a real run ----------------------------------

def _streams(size, num_workers, policy):
    """Each worker's ids under a rule of :mod:`talk_helpers.model.sharding` (one id a shard)."""
    from talk_helpers.model.sharding import stream_ids

    return [stream_ids([1] * size, 0, 1, w, num_workers, policy).tolist()
            for w in range(num_workers)]


def _sharding_figure():
    from talk_helpers.lessons.datasets.basics import WorkerStreams
    from talk_helpers.lessons.trace import run_loader

    size, kw = 40, {"batch_size": 5, "num_workers": 4}
    return assignment_grids({
        "no sharding: every worker yields every id":
            run_loader(WorkerStreams([range(size)] * 4), **kw),
        "modulo: worker w keeps the ids with id % 4 == w":
            run_loader(WorkerStreams(_streams(size, 4, "modulo_samples")), **kw),
        "blocks: worker w keeps one contiguous block":
            run_loader(WorkerStreams(_streams(size, 4, "contiguous")), **kw),
    }, n_ids=size)


def _partial_batches_figure():
    from talk_helpers.lessons.datasets.basics import MapStyleIds, WorkerStreams
    from talk_helpers.lessons.trace import run_loader

    kw = {"batch_size": 10, "num_workers": 4}
    sharded = WorkerStreams(_streams(100, 4, "modulo_samples"))
    return batch_sizes({
        "map-style, 100 ids": run_loader(MapStyleIds(100), **kw),
        "iterable sharded by worker, 100 ids": run_loader(sharded, **kw),
        "the same with drop_last=True": run_loader(sharded, drop_last=True, **kw),
    })


FIGURES = {
    "worker_sharding.png": _sharding_figure,
    "partial_batches.png": _partial_batches_figure,
}
