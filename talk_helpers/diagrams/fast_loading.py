"""Figures for notebook 08 and the throughput benchmark, drawn from measured results."""

import matplotlib.pyplot as plt
import numpy as np

from talk_helpers.diagrams import shown_once
from talk_helpers.palette import PALETTE

# Drawn from live measurements only: nothing is committed to imgs/.
FIGURES: dict = {}

SHORT = {"map": "(a) map-style", "iterable": "(b) iterable per-sample",
         "batched": "(c) batched in workers", "reference": "(d) reference",
         "hf": "(e) HF datasets", "wds": "(e) webdataset"}


def throughput_figure(results: dict, ceiling_rate: float, *, title: str = ""):
    """Grouped bars: samples/s per loader kind, one group per worker count, one panel per
    batch size; the dashed line is the single-process ceiling. ``results`` maps
    (kind, workers, batch) to an object with ``.rate`` (or a string when unavailable)."""
    kinds = list(dict.fromkeys(k for k, _, _ in results))
    workers = sorted({w for _, w, _ in results})
    batches = sorted({b for _, _, b in results})
    fig, axes = plt.subplots(1, len(batches), figsize=(4.8 * len(batches), 3.6), sharey=True,
                             squeeze=False)
    width = 0.8 / max(len(kinds), 1)
    for ax, batch in zip(axes[0], batches, strict=True):
        for k, kind in enumerate(kinds):
            rates = [getattr(results.get((kind, w, batch)), "rate", np.nan) for w in workers]
            ax.bar(np.arange(len(workers)) + (k - (len(kinds) - 1) / 2) * width,
                   np.asarray(rates) / 1000, width, label=SHORT.get(kind, kind),
                   color=PALETTE[k % len(PALETTE)])
        ax.axhline(ceiling_rate / 1000, color="black", linestyle="--", linewidth=1,
                   label="ceiling (one process)")
        ax.set_xticks(range(len(workers)), [str(w) for w in workers])
        ax.set_xlabel("num_workers")
        ax.set_title(f"batch size {batch}")
    axes[0][0].set_ylabel("thousand samples / s")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return shown_once(fig)


def loop_figure(timings: dict):
    """Stacked bars: seconds waiting for data vs seconds in the step, one bar per setting.
    ``timings`` maps a label to a LoopTiming."""
    labels = list(timings)
    data = [sum(t.data_s) for t in timings.values()]
    step = [sum(t.step_s) for t in timings.values()]
    fig, ax = plt.subplots(figsize=(6.5, 0.9 + 0.6 * len(labels)))
    ax.barh(labels, step, color=PALETTE[0], label="in the step")
    ax.barh(labels, data, left=step, color=PALETTE[1], label="waiting for data")
    ax.set_xlabel("seconds")
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return shown_once(fig)
