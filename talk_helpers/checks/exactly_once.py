"""Was every expected sample read exactly once? Vectorised with numpy: ten million ids
take a fraction of a second."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from talk_helpers.arguments import is_int
from talk_helpers.checks.ids import ids_in, ids_of
from talk_helpers.verdicts.render import listing, mark, verdict_html


def check_exactly_once(samples, expected) -> ExactlyOnceReport:
    """Check that ``samples`` holds every expected id exactly once and nothing else.

    ``expected`` is an int N (ids 0..N-1), a range, or a sequence/array/tensor of unique ids.
    """
    ids = ids_of(samples)
    n_expected, expected_ids = _expected_ids(expected)
    if n_expected == 0 and ids.size:
        raise ValueError(
            f"expected is empty but samples holds {ids.size} id(s); "
            "pass the ids you expect (an int N means ids 0..N-1)"
        )
    top = max(int(ids.max(initial=-1)), n_expected - 1)
    if expected_ids is not None:
        top = max(top, int(expected_ids[-1]))
    if top + 1 <= 4 * (ids.size + n_expected) + 1024:
        parts = _dense_check(ids, n_expected, expected_ids, top + 1)
    else:
        parts = _sparse_check(ids, n_expected, expected_ids)
    return ExactlyOnceReport(expected_count=n_expected, seen_count=int(ids.size), **parts)


@dataclass(frozen=True, eq=False)
class ExactlyOnceReport:
    """Outcome of :func:`check_exactly_once`; ``duplicates`` maps id -> times seen.

    ``duplicates``, ``missing`` and ``unexpected`` are built on first use from the sorted
    int64 arrays ``duplicate_ids``/``duplicate_times``, ``missing_ids`` and ``unexpected_ids``.
    """

    expected_count: int
    unique_count: int
    seen_count: int
    duplicate_ids: np.ndarray = field(repr=False)
    duplicate_times: np.ndarray = field(repr=False)
    missing_ids: np.ndarray = field(repr=False)
    unexpected_ids: np.ndarray = field(repr=False)

    @property
    def ok(self) -> bool:
        """True when every expected id was seen once and no other id was seen."""
        return not (self.duplicate_ids.size or self.missing_ids.size or self.unexpected_ids.size)

    @property
    def duplicated_count(self) -> int:
        """How many distinct ids were seen more than once."""
        return int(self.duplicate_ids.size)

    @property
    def missing_count(self) -> int:
        """How many expected ids were never seen."""
        return int(self.missing_ids.size)

    @property
    def unexpected_count(self) -> int:
        """How many distinct ids were seen but not expected."""
        return int(self.unexpected_ids.size)

    @cached_property
    def duplicates(self) -> dict[int, int]:
        """Ids seen more than once -> how many times each was seen."""
        return dict(zip(self.duplicate_ids.tolist(), self.duplicate_times.tolist(), strict=True))

    @cached_property
    def missing(self) -> list[int]:
        """Expected ids never seen, sorted."""
        return self.missing_ids.tolist()

    @cached_property
    def unexpected(self) -> list[int]:
        """Ids seen that were not expected, sorted."""
        return self.unexpected_ids.tolist()

    @property
    def headline(self) -> str:
        """The finding: '✔ every sample once', or '✘ 25 duplicated · 25 missing'."""
        return once_headline(self.ok, self.duplicated_count, self.missing_count,
                             self.unexpected_count)

    @property
    def statistics(self) -> str:
        """The counts behind it: '100 expected · 75 unique · 125 read in all'."""
        return (f"{self.expected_count} expected · {self.unique_count} unique · "
                f"{self.seen_count} read in all")

    def __repr__(self) -> str:
        return f"{self.headline}\n  {self.statistics}"

    __str__ = __repr__

    def summary(self, limit: int = 10) -> str:
        """The verdict, its counts and up to ``limit`` example ids of each problem."""
        return "\n".join([repr(self), *(f"  {k}: {v}" for k, v in self._examples(limit))])

    def _examples(self, limit: int) -> list[tuple[str, str]]:
        rows = []
        if self.duplicate_ids.size:
            shown = [
                f"{i} ×{t}"
                for i, t in zip(
                    self.duplicate_ids[:limit].tolist(),
                    self.duplicate_times[:limit].tolist(),
                    strict=True,
                )
            ]
            rows.append(("duplicated", listing(shown, self.duplicate_ids.size)))
        for name, ids in (("missing", self.missing_ids), ("unexpected", self.unexpected_ids)):
            if ids.size:
                rows.append((name, listing(ids[:limit].tolist(), ids.size)))
        return rows

    def _repr_html_(self) -> str:
        return verdict_html(self.ok, self.headline[2:], self._examples(8),
                            statistics=[self.statistics])


def once_headline(ok: bool, duplicated: int, missing: int, unexpected: int,
                  duplicated_word: str = "duplicated",
                  unexpected_word: str = "unexpected") -> str:
    """'✔ every sample once', or the problems: '✘ 25 duplicated · 25 missing'."""
    if ok:
        return "✔ every sample once"
    parts = [f"{n} {word}" for n, word in ((duplicated, duplicated_word), (missing, "missing"),
                                           (unexpected, unexpected_word)) if n]
    return f"{mark(ok)} " + " · ".join(parts)


def _expected_ids(expected) -> tuple[int, np.ndarray | None]:
    """(number of expected ids, sorted ids or None when they are 0..N-1)."""
    if is_int(expected):
        if expected < 0:
            raise ValueError(
                f"expected must be an int N >= 0 or a sequence of ids, got {expected}"
            )
        return int(expected), None
    if isinstance(expected, range) and expected.start == 0 and expected.step == 1:
        return max(expected.stop, 0), None
    if isinstance(expected, float | np.floating):
        raise TypeError(
            f"expected must be an int N (ids 0..N-1) or a sequence of ids, got float {expected!r}"
        )
    ids = np.sort(ids_in(expected, "expected"))
    if ids.size > 1 and (repeated := ids[1:][ids[1:] == ids[:-1]]).size:
        raise ValueError(f"expected holds duplicate ids, e.g. {int(repeated[0])}")
    if ids.size == 0 or ids[-1] == ids.size - 1:
        return int(ids.size), None  # unique, non-negative and ending at N-1: exactly 0..N-1
    return int(ids.size), ids


def _dense_check(ids, n_expected, expected_ids, length) -> dict:
    """Count with bincount: linear time when ids are not much larger than their number."""
    times = np.bincount(ids, minlength=length)
    if expected_ids is None:
        missing = np.flatnonzero(times[:n_expected] == 0)
        unexpected = np.flatnonzero(times[n_expected:]) + n_expected
    else:
        wanted = np.zeros(length, dtype=bool)
        wanted[expected_ids] = True
        seen = times > 0
        missing = np.flatnonzero(wanted & ~seen)
        unexpected = np.flatnonzero(seen & ~wanted)
    duplicate_ids = np.flatnonzero(times > 1)
    return dict(
        unique_count=int(np.count_nonzero(times)),
        duplicate_ids=duplicate_ids,
        duplicate_times=times[duplicate_ids],
        missing_ids=missing.astype(np.int64, copy=False),
        unexpected_ids=unexpected.astype(np.int64, copy=False),
    )


def _sparse_check(ids, n_expected, expected_ids) -> dict:
    """Count with a sort: for a few ids spread over a huge range."""
    unique, times = np.unique(ids, return_counts=True)
    if expected_ids is None:
        expected_ids = np.arange(n_expected, dtype=np.int64)
    repeated = times > 1
    return dict(
        unique_count=int(unique.size),
        duplicate_ids=unique[repeated],
        duplicate_times=times[repeated],
        missing_ids=np.setdiff1d(expected_ids, unique, assume_unique=True),
        unexpected_ids=np.setdiff1d(unique, expected_ids, assume_unique=True),
    )
