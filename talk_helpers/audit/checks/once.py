"""One epoch read against what was expected: the exactly-once report of an epoch
(:class:`EpochOnce`), named for integer ids and counted for hashes, what each epoch is
expected to hold (:func:`expected_of`), and the declared drops and repeats
(:func:`declared_design`). Shared by the exactly-once check and the draws with
replacement (:mod:`.replacement`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from talk_helpers.arguments import is_int
from talk_helpers.audit.checks.base import AuditRun
from talk_helpers.audit.sample_ids import hash_strings
from talk_helpers.checks import check_exactly_once, ids_of
from talk_helpers.checks.exactly_once import once_headline
from talk_helpers.verdicts.render import listing

__all__ = ["AUTO", "ID_LIMIT", "SHOWN_IDS", "ContentOnceReport", "CountedOnceReport",
           "EpochOnce", "declared_design", "design_value", "epoch_report", "expected_of"]

ID_LIMIT = 20      # ids listed per problem in the JSON
SHOWN_IDS = 6      # ids named per problem in the text report
AUTO = "auto"


@dataclass
class EpochOnce:
    """One epoch's exactly-once report read against the declared design."""

    epoch: int
    report: object          # ExactlyOnceReport, or CountedOnceReport for hashed ids
    design: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Exactly once, or exactly the declared drops and repeats."""
        return self.report.ok or (bool(self.design) and self.matches_design())

    def extra_reads(self) -> int:
        once = self.report
        return int((once.duplicate_times - 1).sum()) if once.duplicate_ids.size else 0

    def matches_design(self) -> bool:
        return not self._mismatch()

    def _mismatch(self) -> list[str]:
        """How what was found differs from what was declared ([] when it matches)."""
        once = self.report
        out = []
        if once.unexpected_count:
            out.append(f"{once.unexpected_count} unexpected")
        dropped, repeated = self.design.get("dropped"), self.design.get("repeated")
        out += _differs("dropped", dropped, once.missing_count,
                        None if isinstance(dropped, int | None) else set(once.missing))
        out += _differs("repeated", repeated, self.extra_reads(),
                        None if isinstance(repeated, int | None) else set(once.duplicates))
        return out

    def design_note(self) -> str:
        """'1 dropped by design' etc., or '' when nothing was declared or nothing happened."""
        once = self.report
        parts = []
        if "dropped" in self.design and once.missing_count:
            parts.append(f"{once.missing_count} dropped")
        if "repeated" in self.design and once.duplicated_count:
            parts.append(f"{self.extra_reads()} repeated")
        return " · ".join(parts) + " by design" if parts else ""

    def line(self) -> str:
        """The finding, read against the declared design."""
        once = self.report
        if once.ok:
            return once.headline
        if self.design and self.matches_design():
            return f"✔ every other sample once · {self.design_note()}"
        head = once.headline
        if self.design:
            differs = "; ".join(self._mismatch())
            head += f" (declared by design: {_declared(self.design)}; {differs})"
        return head

    def entry(self, run: AuditRun) -> str:
        """The finding, then the counts behind it and the ids named."""
        once = self.report
        lines = [self.line(), once.statistics]
        name = run.id_text
        if once.duplicate_ids.size:
            shown = [f"{name(i)} ×{t}" for i, t in zip(once.duplicate_ids[:SHOWN_IDS].tolist(),
                                                       once.duplicate_times[:SHOWN_IDS].tolist(),
                                                       strict=True)]
            lines.append(f"{'identical' if run.options.counted else 'duplicated'}: "
                         f"{listing(shown, once.duplicate_ids.size)}")
        for what, ids in (("missing", once.missing_ids), ("unexpected", once.unexpected_ids)):
            if ids.size:
                lines.append(f"{what}: "
                             f"{listing([name(i) for i in ids[:SHOWN_IDS].tolist()], ids.size)}")
        return "\n".join(lines)

    def to_dict(self, run: AuditRun, limit: int = ID_LIMIT) -> dict:
        once = self.report
        name = run.id_text
        return {
            "ok": self.ok,
            "strict_ok": once.ok,
            "expected": once.expected_count,
            "unique": once.unique_count,
            "seen": once.seen_count,
            "duplicated_count": once.duplicated_count,
            "missing_count": once.missing_count,
            "unexpected_count": once.unexpected_count,
            "duplicated": [[name(i), int(t)] for i, t in
                           zip(once.duplicate_ids[:limit].tolist(),
                               once.duplicate_times[:limit].tolist(), strict=True)],
            "missing": [name(i) for i in once.missing_ids[:limit].tolist()],
            "unexpected": [name(i) for i in once.unexpected_ids[:limit].tolist()],
            "by_design": self.design_note() or None,
            "verdict": self.line(),
        }


def _differs(what: str, declared, found: int, found_ids: set | None) -> list[str]:
    """'found 2 dropped' when the count (or the ids) differ from the declaration."""
    if declared is None:
        return [f"{found} {what}, none declared"] if found else []
    if isinstance(declared, int):
        if found == declared:
            return []
        side = "more" if found > declared else "fewer"
        return [f"found {found} {what}, {side} than declared"]
    if found_ids == set(declared):
        return []
    return [f"the {what} ids differ from the declared ones"]


def _declared(design: dict) -> str:
    return ", ".join(f"{k} {_describe(v)}" for k, v in design.items())


@dataclass(frozen=True, eq=False)
class CountedOnceReport:
    """Exactly once when samples are known by a hash (contents, string ids) and ``expected``
    is a count: duplicates are named, a shortfall is only counted (a sample never read has
    no hash to show). Reads like :class:`talk_helpers.checks.ExactlyOnceReport`."""

    expected_count: int
    unique_count: int
    seen_count: int
    duplicate_ids: np.ndarray = field(repr=False)
    duplicate_times: np.ndarray = field(repr=False)
    missing_count: int = 0
    unexpected_count: int = 0
    contents: bool = False

    missing_ids = property(lambda self: np.empty(0, np.int64))
    unexpected_ids = property(lambda self: np.empty(0, np.int64))
    missing = property(lambda self: [])
    unexpected = property(lambda self: [])

    @property
    def ok(self) -> bool:
        return not (self.duplicate_ids.size or self.missing_count or self.unexpected_count)

    @property
    def duplicated_count(self) -> int:
        return int(self.duplicate_ids.size)

    @property
    def duplicates(self) -> dict[int, int]:
        return dict(zip(self.duplicate_ids.tolist(), self.duplicate_times.tolist(),
                        strict=True))

    @property
    def headline(self) -> str:
        return once_headline(self.ok, self.duplicated_count, self.missing_count,
                             self.unexpected_count,
                             "identical contents" if self.contents else "duplicated",
                             "more than expected")

    @property
    def statistics(self) -> str:
        distinct = "distinct contents" if self.contents else "unique"
        text = (f"{self.expected_count} expected · {self.unique_count} {distinct} · "
                f"{self.seen_count} read in all")
        if self.contents and self.duplicated_count:
            text += " (identical contents: a sample read again, or samples alike)"
        return text

    def __repr__(self) -> str:
        return f"{self.headline}\n  {self.statistics}"

    __str__ = __repr__


class ContentOnceReport:
    """An ExactlyOnceReport over content hashes, worded for contents: two reads of one
    hash are identical contents (the same sample read again, or two samples alike)."""

    def __init__(self, report):
        self._report = report

    def __getattr__(self, name):
        return getattr(self._report, name)

    @property
    def headline(self) -> str:
        once = self._report
        return once_headline(once.ok, once.duplicated_count, once.missing_count,
                             once.unexpected_count, "identical contents")

    @property
    def statistics(self) -> str:
        once = self._report
        text = (f"{once.expected_count} expected · {once.unique_count} distinct contents · "
                f"{once.seen_count} read in all")
        if once.duplicated_count:
            text += " (identical contents: a sample read again, or samples alike)"
        return text

    def __repr__(self) -> str:
        return f"{self.headline}\n  {self.statistics}"

    __str__ = __repr__


def epoch_report(run: AuditRun, ids: np.ndarray, wanted):
    """One epoch's exactly-once report: named ids, or counted for hashes and a count."""
    if isinstance(wanted, int) and run.counted:
        return _counted(ids, wanted, contents=run.options.counted)
    report = check_exactly_once(ids, wanted)
    return ContentOnceReport(report) if run.options.counted else report


def _counted(ids: np.ndarray, n_expected: int, contents: bool) -> CountedOnceReport:
    unique, times = np.unique(ids, return_counts=True)
    repeated = times > 1
    return CountedOnceReport(
        expected_count=n_expected, unique_count=int(unique.size), seen_count=int(ids.size),
        duplicate_ids=unique[repeated], duplicate_times=times[repeated],
        missing_count=max(0, n_expected - int(unique.size)),
        unexpected_count=max(0, int(unique.size) - n_expected), contents=contents)


def expected_of(run: AuditRun):
    """(``expected(epoch, ids)``, the note saying what was expected)."""
    opts = run.options
    what = "samples" if opts.counted else "ids"
    if opts.expected is not None:
        wanted = opts.expected
        if is_int(wanted):
            return (lambda e, ids: int(wanted)), \
                f"expected: {int(wanted)} {'distinct samples' if run.counted else 'ids'} " \
                f"per epoch{'' if run.counted else f' (0..{int(wanted) - 1})'}"
        if isinstance(wanted, range):
            ids_wanted = np.arange(wanted.start, wanted.stop, wanted.step, dtype=np.int64)
            return (lambda e, ids: ids_wanted), \
                f"expected: ids {wanted.start}..{wanted.stop - 1} ({len(wanted)} per epoch)"
        values = list(wanted) if not isinstance(wanted, np.ndarray) else wanted
        if len(values) and all(isinstance(v, str) for v in values):
            hashed, names = hash_strings([str(v) for v in values])
            run.names.update(names)
            ids_wanted = np.unique(hashed)
        else:
            ids_wanted = np.unique(ids_of(values)) if len(values) else np.empty(0, np.int64)
        return (lambda e, ids: ids_wanted), \
            f"expected: the {ids_wanted.size} ids you listed, per epoch"
    if opts.steps is not None:
        return (lambda e, ids: np.unique(ids)), (
            f"expected: each epoch's own distinct {what} (with steps, an epoch is a window: "
            "pass expected= to also count what no rank reads)")
    first = np.unique(run.ids(0)) if run.n_epochs else np.empty(0, np.int64)
    return (lambda e, ids: first), (
        f"expected: the {first.size} distinct {what} seen in epoch 0 (pass expected= to also "
        "catch samples that no rank ever sees)")


def declared_design(dropped, repeated) -> dict:
    design = {}
    if dropped is not None:
        design["dropped"] = design_value(dropped)
    if repeated is not None:
        design["repeated"] = design_value(repeated)
    return design


def design_value(value, name: str = "by_design"):
    """An int ≥ 0 (a count), a tuple of int ids, or "auto" (the library says)."""
    if isinstance(value, str) and value == AUTO:
        return AUTO
    if isinstance(value, bool):
        raise TypeError(f"{name} must be None, an int count ≥ 0, a sequence of ids or "
                        f"'auto', got {value!r}")
    if isinstance(value, int | np.integer):
        if value < 0:
            raise ValueError(f"{name} must be None, an int count ≥ 0, a sequence of ids or "
                             f"'auto', got {value!r}")
        return int(value)
    try:
        return tuple(int(i) for i in ids_of(value).tolist())
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be None, an int count ≥ 0, a sequence of ids or "
                        f"'auto', got {value!r}") from None


def _describe(value) -> str:
    return str(value) if isinstance(value, int) else f"ids {list(value)[:8]}"
