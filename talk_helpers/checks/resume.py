"""After an interruption and a resume, does training see what it would have seen?

Compare, epoch by epoch, the ids a training loop took in an uninterrupted run with those
it took in a run that was stopped, saved its state, and resumed in a new loader. The
edges are where resumes go wrong: a state saved at the very end of an epoch
(meta-pytorch/data#1437), persistent workers that keep the resume point for every later
epoch (huggingface/datasets#7447), and batches the workers prefetched but the loop never
took.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from talk_helpers.checks.ids import ids_in
from talk_helpers.verdicts.render import BAD_MARK, OK_MARK, WARN_MARK, listing, verdict_html

__all__ = ["EpochResume", "ResumeReport", "check_resume"]


def check_resume(reference, resumed, *, where: str = "") -> ResumeReport:
    """Compare ``resumed[e]`` (the ids the loop took in epoch ``e`` of the interrupted
    run, before and after the resume together) with ``reference[e]`` (the uninterrupted
    run). ``where`` names the interruption in the report, e.g. ``"end of epoch 0"``."""
    for name, value in (("reference", reference), ("resumed", resumed)):
        if not isinstance(value, list | tuple) or not value:
            raise TypeError(f"{name} must be a non-empty list with the ids of each epoch, "
                            f"got {type(value).__name__}")
    if not isinstance(where, str):
        raise TypeError(f"where must be a string, got {where!r}")
    epochs = []
    for e in range(max(len(reference), len(resumed))):
        ref = ids_in(reference[e], "reference", f"reference[{e}]").tolist() \
            if e < len(reference) else []
        got = ids_in(resumed[e], "resumed", f"resumed[{e}]").tolist() \
            if e < len(resumed) else []
        expected, seen = Counter(ref), Counter(got)
        epochs.append(EpochResume(
            epoch=e, expected=len(ref), seen=len(got),
            missing=tuple(sorted((expected - seen).elements())),
            extra=tuple(sorted((seen - expected).elements())),
            same_order=ref == got))
    return ResumeReport(epochs=tuple(epochs), where=where)


@dataclass(frozen=True)
class EpochResume:
    """One epoch of :func:`check_resume`: ids ``missing`` (taken in the uninterrupted run,
    not after the resume), ``extra`` (taken once too often) and whether the order held."""

    epoch: int
    expected: int
    seen: int
    missing: tuple[int, ...]
    extra: tuple[int, ...]
    same_order: bool

    @property
    def status(self) -> str:
        if self.missing or self.extra:
            return "fail"
        return "pass" if self.same_order else "warn"

    def line(self) -> str:
        head = f"epoch {self.epoch}: {self.seen} of {self.expected} ids"
        if self.status == "pass":
            return f"{head}, in the same order"
        if self.status == "warn":
            return f"{head}, the same ids in another order"
        parts = []
        for word, ids in (("lost", self.missing), ("repeated", self.extra)):
            if ids:
                parts.append(f"{len(ids)} {word} ({listing(list(ids), len(ids), 6)})")
        return f"{head}: " + ", ".join(parts)


@dataclass(frozen=True)
class ResumeReport:
    """Outcome of :func:`check_resume`: one :class:`EpochResume` per epoch."""

    epochs: tuple[EpochResume, ...]
    where: str = ""

    @property
    def ok(self) -> bool:
        """True when no id was lost or repeated (the order may differ: see ``status``)."""
        return all(e.status != "fail" for e in self.epochs)

    @property
    def status(self) -> str:
        """``"fail"`` (ids lost or repeated), ``"warn"`` (same ids, another order) or
        ``"pass"`` (exactly what the uninterrupted run saw)."""
        statuses = {e.status for e in self.epochs}
        return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"

    def _mark(self) -> str:
        return {"pass": OK_MARK, "warn": WARN_MARK, "fail": BAD_MARK}[self.status]

    def _verdict(self) -> str:
        at = f" at the {self.where}" if self.where else ""
        if self.status == "pass":
            return f"resume{at}: every epoch as in the uninterrupted run"
        if self.status == "warn":
            return f"resume{at}: the same ids every epoch, in another order"
        bad = [e for e in self.epochs if e.status == "fail"]
        lost = sum(len(e.missing) for e in bad)
        extra = sum(len(e.extra) for e in bad)
        parts = [f"{lost} ids lost"] if lost else []
        parts += [f"{extra} repeated"] if extra else []
        epochs = ", ".join(str(e.epoch) for e in bad)
        return f"resume{at}: {' and '.join(parts)} (epoch{'s' if len(bad) > 1 else ''} {epochs})"

    def lines(self) -> list[str]:
        marks = {"pass": OK_MARK, "warn": WARN_MARK, "fail": BAD_MARK}
        return [f"{marks[e.status]} {e.line()}" for e in self.epochs]

    def __repr__(self) -> str:
        return "\n".join([f"{self._mark()} {self._verdict()}",
                          *(f"  {line}" for line in self.lines())])

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return verdict_html(self._mark(), self._verdict(),
                            [(f"epoch {e.epoch}", line) for e, line in
                             zip(self.epochs, self.lines(), strict=True)])
