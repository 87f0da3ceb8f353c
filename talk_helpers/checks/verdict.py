"""How every check shows its verdict: ✔ or ✘, in the collection's colours, as one line of
text for a talk and a small HTML block for a notebook cell."""

from __future__ import annotations

import html

from talk_helpers.palette import BAD_COLOUR, OK_COLOUR

OK_MARK, BAD_MARK = "✔", "✘"


def mark(ok: bool) -> str:
    """✔ for a pass, ✘ for a failure."""
    return OK_MARK if ok else BAD_MARK


def listing(items: list, total: int, limit: int | None = None) -> str:
    """``items`` (at most ``limit``) joined by commas, with how many of ``total`` are left."""
    if limit is not None:
        items = items[:limit]
    text = ", ".join(map(str, items))
    if total > len(items):
        text += f", … (+{total - len(items)} more)"
    return text


def verdict_html(ok: bool, verdict: str, examples: list[tuple[str, str]]) -> str:
    """The verdict line, coloured by ``ok``, over a small table of (label, example) rows."""
    colour = OK_COLOUR if ok else BAD_COLOUR
    head = (
        f'<div style="font-family:monospace"><span style="color:{colour};font-weight:bold">'
        f"{mark(ok)}</span> {html.escape(verdict)}"
    )
    if not examples:
        return head + "</div>"
    rows = "".join(
        f'<tr><td style="color:{BAD_COLOUR};text-align:left">{html.escape(k)}</td>'
        f'<td style="text-align:left">{html.escape(v)}</td></tr>'
        for k, v in examples
    )
    return f'{head}<table style="margin:2px 0 0 1.5em">{rows}</table></div>'
