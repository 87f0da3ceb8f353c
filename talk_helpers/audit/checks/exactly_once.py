"""Every expected sample read exactly once per epoch, over all ranks and workers, or exactly
the drops and repeats declared by design.

Expected, per epoch: ``expected=N`` (ids ``0..N-1``; with content or string ids, ``N``
distinct samples), a sequence of ids, or by default the distinct ids of epoch 0 (with
``steps``, each epoch's own: a window of an endless stream is judged by itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from talk_helpers.arguments import is_int
from talk_helpers.audit.checks.base import AuditRun, Check, Verdict
from talk_helpers.audit.sample_ids import hash_strings
from talk_helpers.checks import check_exactly_once, ids_of
from talk_helpers.checks.verdict import mark

ID_LIMIT = 20  # ids listed per problem in the JSON


class ExactlyOnce(Check):
    name = "exactly_once"
    column = "exactly once"

    def judge(self, run: AuditRun) -> Verdict:
        opts = run.options
        design = declared_design(opts.dropped_by_design, opts.repeated_by_design)
        expected, note = _expected(run)
        per_epoch = []
        for e in range(run.n_epochs):
            ids = run.ids(e)
            wanted = expected(e, ids)
            if isinstance(wanted, int) and run.counted:
                report = _counted(ids, wanted, contents=opts.counted)
            else:
                report = check_exactly_once(ids, wanted)
                if opts.counted:
                    report = ContentOnceReport(report)
            per_epoch.append(EpochOnce(e, report, design))
        out = Verdict(detail=per_epoch, footnotes=[f"· {note}"])
        out.epoch_lines = [[c.line()] for c in per_epoch]
        strict = [c for c in per_epoch if not c.ok]
        words = (("identical contents" if opts.counted else "duplicated"), "missing",
                 ("more than expected" if run.counted else "unexpected"))
        for word, count in zip(words, ("duplicated_count", "missing_count",
                                       "unexpected_count"), strict=True):
            n = max((getattr(c.report, count) for c in strict), default=0)
            if n:
                out.problems.append(("✘", f"{n} {word}"))
        notes = [c.design_note() for c in per_epoch if c.ok and c.design_note()]
        out.notes = notes[:1]
        if all(c.report.ok for c in per_epoch):
            out.passed = "exactly once"
        out.data = {"expected_note": note,
                    "epochs": [c.to_dict(run) for c in per_epoch]}
        return out


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
        once = self.report
        if once.unexpected_count:
            return False
        dropped, repeated = self.design.get("dropped"), self.design.get("repeated")
        if dropped is None:
            if once.missing_count:
                return False
        elif isinstance(dropped, int):
            if once.missing_count != dropped:
                return False
        elif set(once.missing) != set(dropped):
            return False
        if repeated is None:
            return not once.duplicated_count
        if isinstance(repeated, int):
            return self.extra_reads() == repeated
        return set(once.duplicates) == set(repeated)

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
        """The verdict, read against the declared design."""
        text = repr(self.report)
        if self.report.ok or not self.design:
            return text
        declared = ", ".join(f"{k} {_describe(v)}" for k, v in self.design.items())
        if self.matches_design():
            return f"✔ {text[2:]} ({self.design_note()})"
        return f"{text} (by design: {declared}; found more)"

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

    def __repr__(self) -> str:
        if self.contents:
            parts = [f"{self.expected_count} expected", f"{self.unique_count} distinct contents",
                     f"{self.duplicated_count} identical contents (a sample read again, "
                     "or samples alike)" if self.duplicated_count else "0 identical contents",
                     f"{self.missing_count} missing"]
        else:
            parts = [f"{self.expected_count} expected", f"{self.unique_count} unique",
                     f"{self.duplicated_count} duplicated", f"{self.missing_count} missing"]
        if self.unexpected_count:
            parts.append(f"{self.unexpected_count} more than expected")
        return f"{mark(self.ok)} " + " · ".join(parts)

    __str__ = __repr__


class ContentOnceReport:
    """An ExactlyOnceReport over content hashes, worded for contents: two reads of one
    hash are identical contents (the same sample read again, or two samples alike)."""

    def __init__(self, report):
        self._report = report

    def __getattr__(self, name):
        return getattr(self._report, name)

    def __repr__(self) -> str:
        once = self._report
        alike = once.duplicated_count
        parts = [f"{once.expected_count} expected", f"{once.unique_count} distinct contents",
                 f"{alike} identical contents (a sample read again, or samples alike)"
                 if alike else "0 identical contents", f"{once.missing_count} missing"]
        if once.unexpected_count:
            parts.append(f"{once.unexpected_count} unexpected")
        return f"{mark(once.ok)} " + " · ".join(parts)

    __str__ = __repr__


def _counted(ids: np.ndarray, n_expected: int, contents: bool) -> CountedOnceReport:
    unique, times = np.unique(ids, return_counts=True)
    repeated = times > 1
    return CountedOnceReport(
        expected_count=n_expected, unique_count=int(unique.size), seen_count=int(ids.size),
        duplicate_ids=unique[repeated], duplicate_times=times[repeated],
        missing_count=max(0, n_expected - int(unique.size)),
        unexpected_count=max(0, int(unique.size) - n_expected), contents=contents)


def _expected(run: AuditRun):
    """(``expected(epoch, ids)``, the note saying what was expected)."""
    opts = run.options
    what = "samples" if opts.counted else "ids"
    if opts.expected is not None:
        wanted = opts.expected
        if run.string_ids and not is_int(wanted):
            wanted = np.unique(hash_strings([str(v) for v in wanted])[0])
        n = wanted if is_int(wanted) else len(np.asarray(wanted).reshape(-1))
        return (lambda e, ids: int(wanted) if is_int(wanted) else wanted), \
            f"expected: {n} {'distinct samples' if opts.counted else 'ids'} per epoch"
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
    """An int ≥ 0 (a count) or a tuple of int ids."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be None, an int count ≥ 0 or a sequence of ids, "
                        f"got {value!r}")
    if isinstance(value, int | np.integer):
        if value < 0:
            raise ValueError(f"{name} must be None, an int count ≥ 0 or a sequence of ids, "
                             f"got {value!r}")
        return int(value)
    try:
        return tuple(int(i) for i in ids_of(value).tolist())
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be None, an int count ≥ 0 or a sequence of ids, "
                        f"got {value!r}") from None


def _describe(value) -> str:
    return str(value) if isinstance(value, int) else f"ids {list(value)[:8]}"
