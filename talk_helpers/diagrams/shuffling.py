"""Figures of notebook 03: which classes each batch holds, and mixing against buffer size.

    from talk_helpers.diagrams.shuffling import class_mix, mixing_picture, mixing_vs_buffer
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from talk_helpers.diagrams import shown_once
from talk_helpers.palette import PALETTE

__all__ = ["class_counts", "class_mix", "mixing_picture", "mixing_vs_buffer", "buffer_curves",
           "FIGURES"]


def class_counts(batches, labels, n_classes) -> np.ndarray:
    """Rows: batches; columns: classes; values: how many samples of that class."""
    labels = np.asarray(labels)
    counts = np.zeros((len(batches), n_classes), dtype=int)
    for row, batch in enumerate(batches):
        counts[row] = np.bincount(labels[np.asarray(batch, dtype=np.int64)],
                                  minlength=n_classes)
    return counts


def class_mix(panels, labels, n_classes, *, max_batches=12, fig=None):
    """One heat map per panel: the class histogram of each of the first batches.

    ``panels``: list of (title, batches) or (title, batches, report). A well shuffled
    loader spreads every row over all classes; a bad one lights a few cells per row, and a
    class missing from a batch is a white cell. All panels share one colour scale (one
    colour bar), so their cells compare directly.
    """
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    counts = [class_counts(panel[1][:max_batches], labels, n_classes) for panel in panels]
    top = max([1, *(int(c.max()) for c in counts if c.size)])
    colours = colormaps["cividis"].with_extremes(under="white")
    fig = fig or Figure(figsize=(2.9 * len(panels) + 1.0, 3.6), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, panel, count in zip(axes, panels, counts, strict=True):
        title = panel[0]
        image = ax.imshow(count, cmap=colours, vmin=0.5, vmax=max(top, 1.5), aspect="auto")
        if len(panel) > 2:
            title = f"{title}\nmixing {panel[2].mixing:.2f}"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("class")
        ax.set_xticks(range(n_classes))
        ax.set_yticks(range(len(count)))
    axes[0].set_ylabel("batch")
    bar = fig.colorbar(image, ax=list(axes), shrink=0.9, extend="min", extendfrac=0.05,
                       label="samples of the class in the batch\n(white: none)")
    bar.locator = MaxNLocator(integer=True)
    bar.update_ticks()
    return shown_once(fig)


def mixing_picture(orders, labels, n_classes, *, batch_size=20, max_batches=12):
    """:func:`class_mix` of whole orders: ``orders`` maps a title to two or more epochs of
    sample ids; each panel shows the first epoch's batches, titled with the mixing score
    :func:`talk_helpers.checks.shuffle_report` gives the epochs."""
    from talk_helpers.checks.mixing import shuffle_report

    panels = []
    for title, epochs in orders.items():
        first = np.asarray(epochs[0])
        batches = [first[i:i + batch_size] for i in range(0, len(first), batch_size)]
        report = shuffle_report(list(epochs), groups=labels, batch_size=batch_size)
        panels.append((title, batches, report))
    return class_mix(panels, labels, n_classes, max_batches=max_batches)


def mixing_vs_buffer(buffer_sizes, curves, *, size=None, ax=None):
    """Mixing score against buffer size, one line per setup (label -> scores)."""
    fig = None
    if ax is None:
        fig = Figure(figsize=(6.4, 3.6), layout="constrained")
        ax = fig.subplots()
    markers = "osD^v"
    for k, (label, scores) in enumerate(curves.items()):
        ax.plot(buffer_sizes, scores, marker=markers[k % len(markers)], label=label,
                color=PALETTE[k % len(PALETTE)])
    ax.axhline(1.0, color=PALETTE[7], linestyle="--", linewidth=1)
    ax.text(buffer_sizes[0], 1.02, "uniform shuffle", fontsize=10, va="bottom")
    ax.axhline(0.0, color=PALETTE[7], linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("shuffle buffer size (samples)" + (f", dataset of {size}" if size else ""))
    ax.set_ylabel("mixing score (class groups)")
    ax.set_ylim(-0.05, 1.2)
    ax.legend(fontsize=10, loc="upper left", bbox_to_anchor=(0, 0.8))
    return shown_once(fig) if fig is not None else ax.figure


def buffer_curves(buffer_sizes, setups, *, batch_size=20, epochs=2):
    """Mixing score per buffer size for each setup (label -> dict of BufferShuffled
    arguments plus ``num_workers``), computed with the in-process loader simulation."""
    from talk_helpers.checks.mixing import shuffle_report
    from talk_helpers.lessons.datasets.shuffling import BufferShuffled, labels_of, simulate_loader

    curves = {}
    for label, setup in setups.items():
        setup = dict(setup)
        workers = setup.pop("num_workers")
        scores = []
        for buffer_size in buffer_sizes:
            orders = [np.concatenate(simulate_loader(
                BufferShuffled(buffer_size=buffer_size, epoch=epoch, **setup),
                workers, batch_size)) for epoch in range(epochs)]
            labels = labels_of(setup.get("size", 600))
            scores.append(shuffle_report(orders, groups=labels, batch_size=batch_size).mixing)
        curves[label] = scores
    return curves


BUFFER_SIZES = (1, 8, 32, 64, 128, 256, 600)
SETUPS = {
    "1 worker, 1 shard": {"num_workers": 1, "num_shards": 1},
    "2 workers, 8 shards": {"num_workers": 2, "num_shards": 8},
    "4 workers, 24 shards": {"num_workers": 4, "num_shards": 24},
}


def _mixing_vs_buffer_figure():
    return mixing_vs_buffer(BUFFER_SIZES, buffer_curves(BUFFER_SIZES, SETUPS), size=600)


def _within_shard_figure():
    from talk_helpers.checks.mixing import shuffle_report
    from talk_helpers.lessons.datasets.shuffling import CLASSES, labels_of
    from talk_helpers.model.dataloader import loader_batches

    labels = labels_of()
    rng = np.random.default_rng(0)
    within, before = [], []
    for _ in range(2):      # two epochs, 2 workers, batches of 20
        halves = np.array_split(np.arange(600), 2)   # each worker shuffles its own half
        within.append(loader_batches([rng.permutation(h) for h in halves], 20))
        order = rng.permutation(600)                 # one permutation, then every 2nd id
        before.append(loader_batches([order[0::2], order[1::2]], 20))
    panels = []
    for title, runs in (("shuffle after sharding", within), ("shuffle before sharding", before)):
        report = shuffle_report([np.concatenate(r) for r in runs], groups=labels, batch_size=20)
        panels.append((title, runs[0], report))
    return class_mix(panels, labels, CLASSES)


FIGURES = {
    "shuffle_within_shard.png": _within_shard_figure,
    "mixing_vs_buffer.png": _mixing_vs_buffer_figure,
}
