"""What a world reports: one :class:`RankOutcome` per rank, gathered in a :class:`WorldReport`
whose repr reads the same on every run (no process ids, no ports)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from talk_helpers.palette import BAD_COLOUR, OK_COLOUR, PALETTE, WARN_COLOUR

STATUSES = ("ok", "error", "timeout", "stopped")


DETAIL_WIDTH = 70  # longer errors are cut in the table and printed in full below it


@dataclass
class RankOutcome:
    """What happened in one rank.

    ``status`` is ``"ok"`` (fn returned), ``"error"`` (fn raised or the process died),
    ``"timeout"`` (still running at the deadline) or ``"stopped"`` (still running when
    another rank's failure stopped the world: killed, or a warm rank interrupted).
    """

    rank: int
    status: str
    result: Any = None
    error: str | None = None  # "ExceptionType: message", ports and pids masked
    traceback: str | None = None  # the last frames, for reading, not for comparing
    last_progress: str | None = None  # the last report_progress text
    elapsed_s: float | None = None  # time spent in fn (None when never finished)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def error_type(self) -> str | None:
        if self.error is None:
            return None
        return self.error.split(":", 1)[0]


@dataclass
class WorldReport:
    """The outcome of :func:`run_world`: one :class:`RankOutcome` per rank."""

    world_size: int
    ranks: list[RankOutcome]
    elapsed_s: float
    stopped_by: str | None = None  # None, "error" or "deadline"
    start_method: str = field(default="", repr=False)  # how the ranks were started
    warm: bool = field(default=False, repr=False)  # ranks kept from an earlier call

    @property
    def how(self) -> str:
        """How the ranks were started, e.g. ``"spawn, warm world"`` (not in the repr, which
        must read the same under every start method)."""
        return f"{self.start_method}, {'warm' if self.warm else 'fresh'} world"

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    @property
    def results(self) -> list[Any]:
        """Each rank's return value, by rank (None for a rank that did not finish)."""
        return [r.result for r in self.ranks]

    @property
    def errors(self) -> dict[int, str]:
        return {r.rank: r.error for r in self.ranks if r.error is not None}

    @property
    def failed_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if not r.ok]

    def headline(self) -> str:
        n = self.world_size
        noun = "rank" if n == 1 else "ranks"
        if self.ok:
            verdict = f"✔ world of {n} {noun}: every rank finished"
        else:
            counts = {s: sum(r.status == s for r in self.ranks) for s in STATUSES}
            parts = [f"{counts[s]} {s}" for s in STATUSES if counts[s]]
            why = {"deadline": "stopped at the deadline",
                   "error": "stopped after an error"}.get(self.stopped_by, "failed")
            verdict = f"✘ world of {n} {noun} {why} ({', '.join(parts)})"
        return f"{verdict} · {self.elapsed_s:.1f} s"

    def _rows(self) -> list[tuple[str, str, str, str]]:
        rows = []
        for r in self.ranks:
            if r.status == "ok":
                detail = _short(repr(r.result), 60)
            elif r.error is not None:
                detail = _short(r.error, DETAIL_WIDTH)
            else:
                detail = {"timeout": "still running at the deadline",
                          "stopped": "stopped because another rank failed"}.get(r.status, "")
            progress = "-" if r.last_progress is None else _short(r.last_progress, 40)
            rows.append((str(r.rank), r.status, progress, detail))
        return rows

    def __repr__(self) -> str:
        head = ("rank", "status", "last progress", "result" if self.ok else "result or error")
        rows = [head, *self._rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [self.headline()]
        for row in rows:
            cells = [row[i].ljust(widths[i]) for i in range(3)]
            lines.append(("  ".join([*cells, row[3]])).rstrip())
        for r in self.ranks:  # errors cut short in the table, in full below it
            if r.error is not None and len(" ".join(r.error.split())) > DETAIL_WIDTH:
                lines.append(f"rank {r.rank}: {_short(r.error, 400)}")
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        colour = {"ok": OK_COLOUR, "error": BAD_COLOUR, "timeout": WARN_COLOUR,
                  "stopped": PALETTE[3]}
        body = []
        for rank, status, progress, detail in self._rows():
            body.append(
                "<tr>"
                f"<td>{rank}</td>"
                f"<td style='color:{colour.get(status, '#000')};font-weight:bold'>"
                f"{html.escape(status)}</td>"
                f"<td>{html.escape(progress)}</td>"
                f"<td style='text-align:left'><code>{html.escape(detail)}</code></td>"
                "</tr>"
            )
        last = "result" if self.ok else "result or error"
        return (
            f"<div><b>{html.escape(self.headline())}</b>"
            "<table><thead><tr><th>rank</th><th>status</th><th>last progress</th>"
            f"<th style='text-align:left'>{last}</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )


class WorldFailed(RuntimeError):
    """Raised by :func:`run_ranks` when a rank failed; ``.report`` is the WorldReport."""

    def __init__(self, report: WorldReport):
        self.report = report
        super().__init__(repr(report))


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_MASKS = (
    (re.compile(r"\[[^\]]*third_party/gloo/[^\]]*\]\s*"), "gloo: "),
    (re.compile(r"\[?(127\.0\.0\.1|localhost|::1|0\.0\.0\.0)\]?:\d+"), r"\1:<PORT>"),
    (re.compile(r"\b(pid|PID|process)([ =:]+)\d+"), r"\1\2<PID>"),
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "0x<ADDR>"),
)


def mask_volatile(text: str) -> str:
    """Replace ports, process ids and addresses so that an error reads the same every run."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text
