"""Figures for notebook 07: the TP/DP/PP groups of a world, who reads data in it, and the
three indices of a Megatron-style indexed dataset (document, sample, shuffle)."""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch, Rectangle

from talk_helpers.diagrams import shown_once
from talk_helpers.palette import PALETTE

__all__ = ["FIGURES", "bytes_moved", "group_layout", "indexed_dataset_indices"]

ROLE_COLOURS = {"reads": PALETTE[2], "reads, broadcasts": PALETTE[2], "receives": PALETTE[4],
                "empty dataset": "#DDDDDD", "nothing": "#DDDDDD"}


def group_layout(grid, roles=None, title=None):
    """Ranks as boxes: one row per pipeline stage, DP replicas side by side, TP ranks inside.

    TP groups are framed in blue, DP groups joined by orange lines, PP groups by green
    arrows. ``roles`` (rank -> text, e.g. from a feeding run) colours each box by what
    the rank does with data.
    """
    fig, ax = plt.subplots(figsize=(8.5, 1.6 + 1.5 * grid.pp), layout="constrained")
    w, h, gap = 0.8, 0.55, 0.5

    def xy(rank):
        c = grid.coords(rank)
        return c.dp_rank * (grid.tp + gap) + c.tp_rank, grid.pp - 1 - c.pp_rank

    for group in grid.tp_groups:
        x0, y0 = xy(group[0])
        ax.add_patch(FancyBboxPatch((x0 - 0.1, y0 - 0.12), grid.tp - 1 + w + 0.2, h + 0.24,
                                    boxstyle="round,pad=0.02", facecolor="none",
                                    edgecolor=PALETTE[0], linewidth=2.2))
    for group in grid.dp_groups:
        pts = [xy(r) for r in group]
        lift = h + 0.14 + 0.09 * grid.coords(group[0]).tp_rank
        for (xa, ya), (xb, yb) in zip(pts, pts[1:], strict=False):
            ax.plot([xa + w / 2, xb + w / 2], [ya + lift, yb + lift],
                    color=PALETTE[1], linewidth=2, marker="o", markersize=4)
    for group in grid.pp_groups:
        pts = [xy(r) for r in group]
        for (xa, ya), (xb, yb) in zip(pts, pts[1:], strict=False):
            ax.annotate("", xy=(xb + w / 2 + 0.25, yb + h), xytext=(xa + w / 2 + 0.25, ya),
                        arrowprops={"arrowstyle": "->", "color": PALETTE[2], "lw": 1.5})
    for rank in range(grid.world_size):
        x, y = xy(rank)
        c = grid.coords(rank)
        role = None if roles is None else roles.get(rank)
        face = ROLE_COLOURS.get(role, "white") if role else "white"
        ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor="black", alpha=0.9))
        label = f"rank {rank}\ntp{c.tp_rank} dp{c.dp_rank}"
        if role:
            label += f"\n{role}"
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=7.5)
    width = grid.dp * (grid.tp + gap)
    ax.set_xlim(-0.3, width)
    ax.set_ylim(-0.4, grid.pp + 0.1)
    ax.set_yticks([grid.pp - 1 - s + h / 2 for s in range(grid.pp)],
                  [f"stage {s}" + (" (first)" if s == 0 else " (last)" if s == grid.pp - 1
                                   else " (middle)") for s in range(grid.pp)])
    ax.set_xticks([d * (grid.tp + gap) + (grid.tp - 1 + w) / 2 for d in range(grid.dp)],
                  [f"DP replica {d}" for d in range(grid.dp)])
    ax.set_ylabel("pipeline (PP) stage")
    ax.set_xlabel("data-parallel replica; TP ranks side by side inside it")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles = [plt.Line2D([], [], color=PALETTE[0], lw=2.2, label="TP group"),
               plt.Line2D([], [], color=PALETTE[1], lw=2, marker="o", label="DP group"),
               plt.Line2D([], [], color=PALETTE[2], lw=1.5, label="PP group (→ next stage)")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22 / grid.pp * 2),
              ncol=3, fontsize=8, frameon=False)
    ax.set_title(title or f"{grid.world_size} ranks: tp={grid.tp} × dp={grid.dp} × "
                 f"pp={grid.pp}, rank = pp·{grid.tp * grid.dp} + dp·{grid.tp} + tp",
                 loc="left", fontsize=10)
    return shown_once(fig)


def indexed_dataset_indices(samples, n_tokens: int = 64):
    """The three indices of a :class:`~talk_helpers.lessons.megatron_data.GPTSamples`.

    Top: documents laid end to end in document-index order. Middle: the samples the sample
    index cuts from that stream (seq_len + 1 tokens, one token shared with the next).
    Bottom: the shuffle index, the order in which samples are read.
    """
    sizes = samples.indexed.sequence_lengths
    doc_index = samples.document_index
    s = samples.seq_len
    fig, (top, mid, bottom) = plt.subplots(3, 1, figsize=(9, 5.6), layout="constrained",
                                           gridspec_kw={"height_ratios": [1, 1.5, 1.6]})
    start = 0
    for pos, doc in enumerate(doc_index):
        if start >= n_tokens:
            break
        length = int(sizes[doc])
        top.add_patch(Rectangle((start, 0), length, 1, facecolor=PALETTE[pos % 2 * 4],
                                edgecolor="white", alpha=0.85))
        if start + length / 2 < n_tokens:
            top.text(start + length / 2, 0.5, f"d{doc}", ha="center", va="center", fontsize=8,
                     color="white")
        start += length
    top.set_xlim(0, n_tokens)
    top.set_yticks([])
    top.set_title(f"document index: documents {doc_index[:6].tolist()}… laid end to end "
                  f"(shuffled)", loc="left", fontsize=9)
    n_show = min(len(samples), (n_tokens - 1) // s)
    for i in range(n_show):
        row = i % 2
        mid.add_patch(Rectangle((i * s, row), s + 1, 0.8, facecolor=PALETTE[1 + 2 * row],
                                edgecolor="black", alpha=0.75))
        pos, off = samples.sample_index[i]
        mid.text(i * s + (s + 1) / 2, row + 0.4, f"sample {i}\n(d{doc_index[pos]}, +{off})",
                 ha="center", va="center", fontsize=7)
    mid.set_xlim(0, n_tokens)
    mid.set_ylim(-0.1, 2)
    mid.set_yticks([])
    mid.set_title(f"sample index: {s} + 1 tokens each; sample i+1 starts on sample i's last "
                  f"token; (d, +k) = start document and offset", loc="left", fontsize=9)
    mid.set_xlabel("token position in the concatenated stream")
    order = samples.shuffle_index[:min(16, len(samples))]
    bottom.bar(np.arange(len(order)), order, color=PALETTE[0])
    for x, v in enumerate(order):
        bottom.text(x, v, str(v), ha="center", va="bottom", fontsize=7)
    bottom.set_xlabel("read position (what the sampler asks for)")
    bottom.set_ylabel("sample id")
    bottom.set_title("shuffle index: which sample each read position gets", loc="left",
                     fontsize=9)
    for ax in (top, mid, bottom):
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return shown_once(fig)


def bytes_moved(tables: dict):
    """Bars per feeding style: bytes read from the .bin file and bytes broadcast.

    ``tables`` maps a style name to the per-rank results of a feeding run.
    """
    fig, ax = plt.subplots(figsize=(6, 2.6), layout="constrained")
    names = list(tables)
    read = [sum(r["bytes_read"] for r in tables[n]) for n in names]
    sent = [sum(r["bytes_sent"] for r in tables[n]) for n in names]
    y = np.arange(len(names))
    ax.barh(y - 0.18, read, 0.36, color=PALETTE[2], label="read from the .bin file")
    ax.barh(y + 0.18, sent, 0.36, color=PALETTE[4], label="broadcast inside TP groups")
    for yy, a, b in zip(y, read, sent, strict=True):
        ax.text(a, yy - 0.18, f" {a}", va="center", fontsize=8)
        ax.text(b, yy + 0.18, f" {b}", va="center", fontsize=8)
    ax.set_yticks(y, names)
    ax.set_xlabel("bytes over the whole run (all ranks)")
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return shown_once(fig)



def _layout_figure():
    from talk_helpers.model.parallel_groups import layout

    return group_layout(layout(8, tp=2, dp=2, pp=2))


def _indices_figure():
    import tempfile

    from talk_helpers.lessons.megatron_data import GPTSamples, make_documents, write_indexed_dataset

    with tempfile.TemporaryDirectory() as d:
        write_indexed_dataset(f"{d}/corpus", make_documents([5, 11, 3, 8, 14, 6, 2, 9]))
        return indexed_dataset_indices(GPTSamples(f"{d}/corpus", seq_len=6, seed=1234))


FIGURES = {"07_group_layout.png": _layout_figure, "07_indexed_dataset.png": _indices_figure}
