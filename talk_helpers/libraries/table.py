"""Libraries side by side: one row per audited loader, with its resume verdict.

Every cell comes from a run: the audit's own verdicts (exactly once, batches per rank, the
order and the mixing, judged only when the loader was meant to shuffle), and the resume
as **exact**, **wrong** (samples lost, repeated or reordered against the uninterrupted
run), **crashed** (the resumed run raised) or **not tried** (no resumed run was given). A
row whose audit failed has nothing to show; its own report says why.

:func:`first_batches`, :func:`same_samples_each_epoch` and :func:`dropped_each_epoch` read
one audit's ids for a cell, with the same note when the audit failed.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from talk_helpers.verdicts.audit_results import NOTHING_TO_SHOW, NothingToShow, audit_failed
from talk_helpers.verdicts.render import NOTE_MARK, table_html


def short_error(report) -> str:
    """The innermost exception of the first failed rank, as ``Type: message`` (no paths,
    no process ids): what a notebook shows when a library crashes inside a rank."""
    errors = [] if report.world is None else [
        report.world.ranks[r].error for r in report.world.failed_ranks]
    text = str(next((e for e in errors if e), report.error or "")).strip()
    found = re.findall(r"([A-Za-z_]+(?:Error|Exception): [^\n]*?)(?=\s+[A-Za-z_]+"
                       r"(?:Error|Exception): |$)", text)
    return found[-1].strip() if found else (text.splitlines() or [""])[-1]


def resume_verdict(uninterrupted, resumed) -> tuple[bool, str]:
    """Compare a resumed run with the uninterrupted one, rank by rank and epoch by epoch:
    the same ids in the same order is exact; otherwise count what was lost or repeated
    ("wrong: …"); a run that raised is "crashed: …"."""
    for run in (resumed, uninterrupted):
        if run.error is not None:
            which = "" if run is resumed else "uninterrupted run "
            return False, f"crashed: {which}{short_error(run)}"
    lost = repeated = 0
    same_order = True
    for e in range(min(uninterrupted.n_epochs, resumed.n_epochs)):
        for r in range(uninterrupted.world_size):
            a, b = uninterrupted.ids(e, r), resumed.ids(e, r)
            if not np.array_equal(a, b):
                same_order = False
            ca, cb = Counter(a.tolist()), Counter(b.tolist())
            lost += sum((ca - cb).values())
            repeated += sum((cb - ca).values())
    if lost == 0 and repeated == 0:
        return (True, "exact") if same_order else (False, "wrong: same samples, other order")
    parts = [f"{lost} lost" if lost else "", f"{repeated} repeated" if repeated else ""]
    return False, "wrong: " + " · ".join(p for p in parts if p)


@dataclass
class LibraryRow:
    """One line of the table: an audit, and optionally the same loader resumed mid-epoch
    (without it the resume reads "not tried")."""

    name: str
    report: object
    resumed: object = None

    def cells(self) -> list[tuple[bool | None, str]]:
        rep = self.report
        if audit_failed(rep):
            return [(None, f"{NOTE_MARK} {NOTHING_TO_SHOW}")] + [(None, "—")] * 4
        bad = [c.exactly_once for c in rep.checks if not c.once_ok]
        if bad:
            worst = max(bad, key=lambda x: len(x.missing) + len(x.duplicates))
            parts = []
            if worst.missing:
                parts.append(f"{len(worst.missing)} missing")
            if worst.duplicates:
                parts.append(f"{len(worst.duplicates)} duplicated")
            if worst.unexpected:
                parts.append(f"{len(worst.unexpected)} unexpected")
            once = (False, " · ".join(parts))
        else:
            notes = [c.design_note() for c in rep.checks if c.design_note()]
            once = (True, "yes" + (f" · {notes[0]}" if notes else ""))
        counts = [list(c.batch_counts.counts) for c in rep.checks]
        uneven = [c for c in counts if len(set(c)) > 1]
        shown = uneven[0] if uneven else counts[0]
        balanced = (not uneven, " / ".join(map(str, shown)) + ("" if not uneven else "  hang"))
        judged = rep.shuffle_expected is not False
        order, mixing = _order_cell(rep, judged), _mixing_cell(rep.shuffle, judged)
        resume = (None, "not tried") if self.resumed is None else resume_verdict(rep, self.resumed)
        return [once, balanced, order, mixing, resume]


def _order_cell(rep, judged: bool) -> tuple[bool | None, str]:
    """changes / repeats (some rank's order, or the shuffle report's) / similar order."""
    if not rep.order_changes:
        return None, "—"
    stale = not all(all(v) for v in rep.order_changes.values())
    finding = "repeats" if stale else getattr(rep.shuffle, "order_finding", None)
    text = {None: "changes", "repeats": "repeats", "similar": "similar order"}[finding]
    if not judged:
        return None, text + " (no shuffle asked)"
    return finding is None, text


def _mixing_cell(shuffle, judged: bool) -> tuple[bool | None, str]:
    """The score with the verdict's mark: ✔ well mixed, ✘ poorly mixed, no mark when
    unproven, not measured or not asked (the score can scatter by ± its chance)."""
    if shuffle is None or not np.isfinite(shuffle.mixing):
        return None, "—"
    text = f"{shuffle.mixing:.2f}"
    if not judged:
        return None, text
    if shuffle.too_few_samples:
        return None, text + " unproven"
    return bool(shuffle.well_mixed), text


HEADERS = ["loader", "exactly once", "batches per rank", "order across epochs",
           "mixing", "mid-epoch resume"]


class AuditTable:
    """Rows of :class:`LibraryRow`, shown as one table (text and HTML)."""

    def __init__(self, rows: list[LibraryRow]) -> None:
        self.rows = list(rows)

    def _grid(self) -> list[list[tuple[bool | None, str]]]:
        return [[(None, row.name)] + row.cells() for row in self.rows]

    def __repr__(self) -> str:
        grid = [[(None, h) for h in HEADERS]] + self._grid()
        texts = [[("✔ " if ok is True else "✘ " if ok is False else "") + t for ok, t in line]
                 for line in grid]
        widths = [max(len(line[i]) for line in texts) for i in range(len(HEADERS))]
        return "\n".join("  ".join(t.ljust(w) for t, w in zip(line, widths, strict=True)).rstrip()
                         for line in texts)

    def _repr_html_(self) -> str:
        marks = {True: "✔ ", False: "✘ ", None: ""}
        return table_html(HEADERS, [[marks[ok] + text for ok, text in line]
                                    for line in self._grid()])


def first_batches(report, *, rank: int = 0, count: int = 4):
    """The first ``count`` batches ``rank`` took in each epoch, one line per epoch."""
    if audit_failed(report):
        return NothingToShow()
    return _Lines([f"epoch {e}: {[b.tolist() for b in report.epochs[e][rank][:count]]}"
                   for e in range(report.n_epochs)])


def same_samples_each_epoch(report) -> bool | NothingToShow:
    """Whether every rank read the same set of samples in every epoch."""
    if audit_failed(report):
        return NothingToShow()
    return all(set(report.ids(e, r).tolist()) == set(report.ids(0, r).tolist())
               for e in range(report.n_epochs) for r in range(report.world_size))


def dropped_each_epoch(report, n: int) -> list[list[int]] | NothingToShow:
    """The ids of ``0..n-1`` that no rank read, per epoch."""
    if audit_failed(report):
        return NothingToShow()
    return [sorted(set(range(n)) - {int(i) for r in range(report.world_size)
                                    for i in report.ids(e, r)})
            for e in range(report.n_epochs)]


class _Lines:
    """Text lines shown as they are."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __repr__(self) -> str:
        return "\n".join(self.lines)
