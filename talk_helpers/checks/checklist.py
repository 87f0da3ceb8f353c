"""Many verdicts on one loader, one line each: what to read before a long run.

Any report with ``.ok`` (and, if it has one, ``.status``: pass, warn or fail) and a repr
whose first line is its verdict can be an item, so the audit and every check fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from talk_helpers.verdicts.render import BAD_MARK, OK_MARK, WARN_MARK, verdict_html

__all__ = ["Checklist", "checklist"]

_MARKS = {"pass": OK_MARK, "warn": WARN_MARK, "fail": BAD_MARK}


def checklist(items, *, title: str = "before a long run") -> Checklist:
    """A checklist of ``items``: a dict label -> report, or a list of (label, report)."""
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    if not pairs:
        raise ValueError("items is empty: give at least one (label, report)")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise TypeError(f"items[{i}] must be a (label, report) pair, got {pair!r}")
        if not hasattr(pair[1], "ok"):
            raise TypeError(f"items[{i}] ({pair[0]!r}) has no .ok: give a check's report, "
                            f"got {type(pair[1]).__name__}")
    return Checklist(items=tuple((label, report) for label, report in pairs), title=title)


def status_of(report) -> str:
    """A report's ``status`` if it has one, else pass or fail from ``ok``."""
    status = getattr(report, "status", None)
    if status in _MARKS:
        return status
    return "pass" if report.ok else "fail"


@dataclass(frozen=True)
class Checklist:
    """Labelled reports; ``ok`` when none fails."""

    items: tuple[tuple[str, object], ...]
    title: str = "before a long run"

    @property
    def ok(self) -> bool:
        return all(status_of(r) != "fail" for _, r in self.items)

    @property
    def status(self) -> str:
        statuses = {status_of(r) for _, r in self.items}
        return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"

    def _rows(self) -> list[tuple[str, str]]:
        rows = []
        for label, report in self.items:
            line = repr(report).splitlines()[0]
            if line[:1] in (OK_MARK, BAD_MARK, WARN_MARK, "·"):
                line = line[1:].strip()
            rows.append((label, f"{_MARKS[status_of(report)]} {line}"))
        return rows

    def _headline(self) -> str:
        counts = [status_of(r) for _, r in self.items]
        passing = counts.count("pass") + counts.count("warn")
        head = f"{self.title}: {passing} of {len(counts)} checks pass"
        if counts.count("warn"):
            head += f" ({counts.count('warn')} with a warning)"
        return head

    def __repr__(self) -> str:
        width = max(len(label) for label, _ in self.items)
        lines = [f"{_MARKS[self.status]} {self._headline()}"]
        lines += [f"  {label:<{width}}  {text}" for label, text in self._rows()]
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return verdict_html(_MARKS[self.status], self._headline(), self._rows())
