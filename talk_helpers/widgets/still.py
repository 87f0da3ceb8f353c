"""A still picture of a widget, for every place that has no live kernel.

A widget's output holds its view (drawn only by a live kernel), a line of text, and with
:class:`WithStill` also a PNG of its current state: what a slide deck, a notebook opened
without widget state, or a reader on GitHub sees instead of ``HBox(children=(…``.
"""

import base64
import io
import struct

from matplotlib.figure import Figure  # drawn without pyplot: no backend, nothing shown

__all__ = ["WithStill", "figure_png", "png_width", "short_line", "table_figure"]

TEXT_LIMIT = 110  # ipywidgets cuts a longer text/plain mid-word


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """PNG bytes of ``fig`` (which is left open for the caller)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def short_line(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` if it fits in ``limit`` characters, else cut at a word with an ellipsis."""
    if len(text) <= limit:
        return text
    return text[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def png_width(png: bytes) -> int:
    """The width in pixels written in a PNG's header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("png must be the bytes of a PNG file")
    return struct.unpack(">I", png[16:20])[0]


def table_figure(title: str, header: list[str], rows: list[list[str]], footer: str = "",
                 footer_colour: str = "black", width: float = 7.0) -> Figure:
    """A bordered table with a title line above it and a verdict line under it."""
    row_h, line_h = 0.28, 0.4
    table_h = row_h * (len(rows) + 1) if rows else 0.0
    height = line_h + table_h + (line_h if footer else 0.1)
    fig = Figure(figsize=(width, height))
    fig.text(0.01, 1 - 0.5 * line_h / height, title, va="center", fontsize=10)
    if rows:
        bottom = (line_h if footer else 0.1) / height
        ax = fig.add_axes((0.01, bottom, 0.98, table_h / height))
        ax.axis("off")
        columns = zip(header, *rows, strict=True)
        widths = [max(len(str(v)) for v in column) + 2 for column in columns]
        table = ax.table(cellText=rows, colLabels=header, bbox=(0, 0, 1, 1), cellLoc="center",
                         colWidths=[w / sum(widths) for w in widths])
        table.auto_set_font_size(False)
        table.set_fontsize(9)
        for (row, _), cell in table.get_celld().items():
            if row == 0:
                cell.set_text_props(weight="bold")
                cell.set_facecolor("#eeeeee")
    if footer:
        fig.text(0.01, 0.5 * line_h / height, footer, va="center", fontsize=10,
                 color=footer_colour, weight="bold")
    return fig


class WithStill:
    """Mixin for an ipywidgets container: its output also carries ``still_png()``."""

    def still_png(self) -> bytes:  # pragma: no cover - each widget draws its own
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["image/png"] = base64.b64encode(self.still_png()).decode("ascii")
        return bundle
