"""How every verdict is shown: a mark (✔ passes, ✘ fails, ⚠ warns, · notes) in the
collection's colours, as a line of text for a talk and a small HTML block for a notebook.

Every report's ``_repr_html_`` is built from :func:`verdict_html` (a headline, example
rows, detail lines) and :func:`table_html` (cells coloured by their own mark), so the
same verdict looks the same in every notebook. A notebook shows the verdict line at a
glance; what stands behind it folds away in a closed ``<details>`` (:func:`folded_html`),
while plain text and JSON keep everything.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from talk_helpers.palette import BAD_COLOUR, INFO_COLOUR, OK_COLOUR, WARN_COLOUR

__all__ = ["BAD_MARK", "OK_MARK", "WARN_MARK", "colour_of", "folded_html", "listing", "mark",
           "small_html", "table_html", "verdict_html"]

OK_MARK, BAD_MARK, WARN_MARK, NOTE_MARK = "✔", "✘", "⚠", "·"
_COLOURS = {OK_MARK: OK_COLOUR, BAD_MARK: BAD_COLOUR, WARN_MARK: WARN_COLOUR}
_MONO = "font-family:monospace"


def mark(ok: bool) -> str:
    """✔ for a pass, ✘ for a failure."""
    return OK_MARK if ok else BAD_MARK


def colour_of(text: str) -> str:
    """The colour of a line by the mark it starts with (black for none)."""
    return _COLOURS.get(text.strip()[:1], INFO_COLOUR)


def listing(items: list, total: int, limit: int | None = None) -> str:
    """``items`` (at most ``limit``) joined by commas, with how many of ``total`` are left."""
    if limit is not None:
        items = items[:limit]
    text = ", ".join(map(str, items))
    if total > len(items):
        text += f", … (+{total - len(items)} more)"
    return text


def verdict_html(ok: bool | str, headline: str, rows: Sequence[tuple[str, str]] = (),
                 details: Sequence[str] = (), statistics: Sequence[str] = ()) -> str:
    """A headline after its mark (``ok`` True/False, or a mark itself), and folded away
    behind it: the ``statistics`` in smaller print, ``(label, text)`` rows (a label
    coloured by its text's mark, ✘ when it has none), then detail lines."""
    sign = mark(ok) if isinstance(ok, bool) else ok
    out = (f'<div style="{_MONO}"><span style="color:{colour_of(sign)};font-weight:bold">'
           f"{sign}</span> {html.escape(headline)}")
    behind = "".join(small_html(line.strip(), indent=True) for line in statistics)
    if rows:
        cells = "".join(
            f'<tr><td style="color:{_label_colour(text)};text-align:left">'
            f'{html.escape(label)}</td><td style="text-align:left">{html.escape(text)}</td></tr>'
            for label, text in rows)
        behind += f'<table style="margin:2px 0 0 1.5em">{cells}</table>'
    behind += "".join(f'<div style="margin-left:1.5em">{html.escape(line.strip())}</div>'
                      for line in details)
    return out + folded_html(behind) + "</div>"


def folded_html(inner: str, summary: str = "details") -> str:
    """``inner`` in a closed ``<details>`` (nothing when empty): a click away, not in the
    way of the verdict."""
    if not inner:
        return ""
    return (f'<details style="margin-left:1.5em"><summary style="color:{INFO_COLOUR}">'
            f"<small>{html.escape(summary)}</small></summary>{inner}</details>")


def small_html(text: str, indent: bool = False) -> str:
    """A line of statistics behind a verdict, in smaller print."""
    margin = "margin-left:1.5em;" if indent else ""
    return (f'<div style="{margin}color:{INFO_COLOUR}"><small>{html.escape(text)}</small>'
            "</div>")


def table_html(headers: Sequence[str], rows: Sequence[Sequence[str]], *,
               align: str = "left") -> str:
    """A table whose cells take the colour of the mark they start with. A cell's first
    line is its verdict; its further lines (the statistics behind it) fold away."""
    head = "".join(f"<th style='text-align:{align}'>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td style='text-align:{align};color:{colour_of(str(cell))}'>"
                         f"{_cell(str(cell))}</td>" for cell in row) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(text: str) -> str:
    first, *rest = text.split("\n")
    return html.escape(first) + folded_html("".join(small_html(line.strip()) for line in rest))


def _label_colour(text: str) -> str:
    found = colour_of(text)
    return BAD_COLOUR if found == INFO_COLOUR else found
