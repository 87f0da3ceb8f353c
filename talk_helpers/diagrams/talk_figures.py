"""The talk's figures at slide size: drawn from real runs by the collection's own diagram
functions, with every text at least 24 px on a 1280x720 slide, as SVG (a browser, and the
decks' tests, can measure SVG text; a PNG's cannot be measured).

    from talk_helpers.diagrams.talk_figures import worker_reads, classes_per_batch

A figure shows at its natural size: :data:`WIDTH_IN` inches are ``WIDTH_IN * 96`` CSS
pixels, and :data:`FONT_PT` points are ``FONT_PT * 4 / 3`` pixels. Also the QR code of the
collection's address (:func:`qr_code`), made offline.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from talk_helpers.diagrams.shuffling import class_mix
from talk_helpers.diagrams.workers import assignment_grid

__all__ = ["FONT_PT", "SlideFigure", "classes_per_batch", "qr_code", "worker_reads"]

FONT_PT = 18        # 24 px: the talk's floor for any text on a slide
WIDTH_IN = 12.4     # 1190 px of the slide's 1248
MARKER_PT = 11      # the "missing" triangles, seen from the back of the room
_SVG = {"svg.fonttype": "none", "svg.hashsalt": "what-could-go-wrong"}  # text as text; fixed ids


class SlideFigure:
    """A matplotlib figure that shows as SVG (deterministic: the same run gives the same
    bytes), with a one-line summary as its text."""

    def __init__(self, figure: Figure, summary: str):
        self.figure = figure
        self.summary = summary

    def __repr__(self) -> str:
        return self.summary

    def _repr_svg_(self) -> str:
        out = io.StringIO()
        with mpl.rc_context(_SVG):
            self.figure.savefig(out, format="svg", metadata={"Date": None})
        return out.getvalue()


def worker_reads(data, *, n_ids: int = 100, title: str | None = None,
                 height_in: float | None = None) -> SlideFigure:
    """Which worker read which sample id: one row per worker, one column per id, a
    triangle under every id nobody read (:func:`~talk_helpers.diagrams.workers.
    assignment_grid`). ``data``: a :class:`~talk_helpers.lessons.trace.LoaderRun`, (id,
    worker) pairs, or batches of dicts with ``"id"`` and ``"worker"`` tensors."""
    pairs = _pairs(data)
    rows = len({who for _, who in pairs})
    figure = Figure(figsize=(WIDTH_IN, height_in or 0.62 * rows + 1.9), layout="constrained")
    assignment_grid(pairs, n_ids=n_ids, title=title, ax=figure.subplots())
    for marker in figure.findobj(Line2D):
        marker.set_markersize(MARKER_PT)
    summary = figure.axes[0].get_title(loc="left").splitlines()[-1]
    return SlideFigure(_for_the_slide(figure), summary)


def classes_per_batch(batches: Sequence, classes: Sequence[int], *, n_classes: int = 10,
                      max_batches: int = 10, title: str = "") -> SlideFigure:
    """How many samples of each class every batch holds (:func:`~talk_helpers.diagrams.
    shuffling.class_mix`): a uniform shuffle spreads each row over all classes; a shuffle
    within shards lights the same few columns batch after batch."""
    shown = [[int(i) for i in batch] for batch in batches[:max_batches]]
    figure = Figure(figsize=(WIDTH_IN * 0.62, 3.8), layout="constrained")
    class_mix([(title, shown)], list(classes), n_classes, max_batches=max_batches, fig=figure)
    # the colour bar's label, in lines short enough to stay inside the figure at 18 pt
    figure.axes[-1].set_ylabel("samples of the class\n(white: none)")
    seen = [len({classes[i] for i in batch}) for batch in shown]
    summary = (f"classes per batch, first {len(shown)} batches: "
               + ", ".join(map(str, seen)) + f" of {n_classes}")
    return SlideFigure(_for_the_slide(figure), summary)


def qr_code(address: str, *, scale: int = 6) -> str:
    """The QR code of ``address`` as SVG text, made here with segno (nothing online)."""
    import segno

    out = io.BytesIO()
    segno.make(address, error="m", micro=False).save(
        out, kind="svg", scale=scale, border=2, xmldecl=False, svgns=True, nl=False,
        title=address)
    return out.getvalue().decode()


# --------------------------------------------------------------------------- internals


def _pairs(data) -> list[tuple[int, object]]:
    if hasattr(data, "pairs"):
        return list(data.pairs)
    data = list(data)
    if data and isinstance(data[0], Mapping):
        return [(int(i), int(w)) for batch in data
                for i, w in zip(batch["id"].tolist(), batch["worker"].tolist(), strict=True)]
    return [(int(i), who) for i, who in data]


def _for_the_slide(figure: Figure) -> Figure:
    """Every text of ``figure`` at least :data:`FONT_PT` points."""
    for ax in figure.axes:
        ax.tick_params(labelsize=FONT_PT)
    for text in figure.findobj(Text):
        if text.get_text() and text.get_fontsize() < FONT_PT:
            text.set_fontsize(FONT_PT)
    return figure
