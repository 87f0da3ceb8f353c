"""The interface every audit check implements: what it is given, what it returns, and
what it may record inside the ranks. See :mod:`talk_helpers.audit.checks`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from talk_helpers.audit.collect import Plan, RankEpoch, RankRun

__all__ = ["AuditRun", "Cause", "Check", "Options", "Recorder", "Verdict"]


@dataclass(frozen=True)
class Options:
    """What the user asked the audit to judge (the arguments of ``audit()``, the flags of
    the command line). ``counted``: ids are content hashes, so ``expected`` is a count.
    ``with_replacement``: samples are drawn with replacement, judged for coverage and
    balance instead of exactly once. ``mixing``: the level mixing is judged at, "sample"
    or "chunk:N" (N consecutive ids in storage order). ``hold_back``: the report holds
    its causes back (an exercise that asks for them; its grader shows them)."""

    expected: Any = None
    batch_size: int | None = None
    shuffle: bool | None = None
    dropped_by_design: Any = None
    repeated_by_design: Any = None
    steps: int | None = None
    ids: str = "default"
    counted: bool = False
    with_replacement: bool = False
    mixing: str = "sample"
    hold_back: bool = False

    @property
    def chunk(self) -> int | None:
        """N for ``mixing="chunk:N"``, else None."""
        return int(self.mixing.split(":", 1)[1]) if self.mixing.startswith("chunk:") else None


@dataclass
class Cause:
    """The usual cause of a finding, and how the audit knows: shown under the epochs as
    ``cause  ✘ <finding>: <cause>`` with ``how the audit knows: <evidence>`` and the fix."""

    mark: str
    finding: str
    cause: str
    evidence: str
    fix: str | None = None

    def lines(self) -> list[str]:
        out = [f"{self.mark} {self.finding}: {self.cause}",
               f"how the audit knows: {self.evidence}"]
        if self.fix:
            out.append(f"what to do: {self.fix}")
        return out

    def to_dict(self) -> dict:
        return {"mark": self.mark, "finding": self.finding, "cause": self.cause,
                "evidence": self.evidence, "fix": self.fix}


@dataclass
class Verdict:
    """What one check found.

    * ``epoch_lines[e]``: entries shown under "epoch e", each starting with its mark
      (✔ pass, ✘ fail, ⚠ warn, · note); an entry's further lines (after a newline) are
      the statistics behind it, indented in text and in smaller print in HTML. The first
      entry fills the check's column of the HTML table when the check has a ``column``.
    * ``rows``: ``(label, entry)`` pairs shown after the epochs ("order", "mixing"),
      entries as above.
    * ``problems``: ``(mark, short text)`` for the headline, ✘ or ⚠. A ✘ fails the audit.
    * ``notes``: short texts shown in the headline after every problem (by design).
    * ``footnotes``: lines shown last (what was expected and why).
    * ``causes``: the usual cause of a ✘ or ⚠ finding and how the audit knows
      (:class:`Cause`), shown after the epochs.
    * ``passed``: a short text the headline shows as ✔ when the audit only warns.
    * ``data``: the JSON of this check, under ``"checks"`` in ``to_dict()``.
    * ``detail``: the check's own objects, for Python users and the older attributes.
    """

    epoch_lines: list[list[str]] = field(default_factory=list)
    rows: list[tuple[str, str]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    footnotes: list[str] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    passed: str | None = None
    data: dict = field(default_factory=dict)
    detail: Any = None
    column: str | None = None   # set from the check's ``column`` when the report is built

    def lines_of(self, epoch: int) -> list[str]:
        """The lines shown under epoch ``epoch`` (none when the check has none)."""
        return self.epoch_lines[epoch] if epoch < len(self.epoch_lines) else []

    @property
    def failed(self) -> bool:
        return any(mark == "✘" for mark, _ in self.problems)

    @property
    def warned(self) -> bool:
        return any(mark == "⚠" for mark, _ in self.problems)


class Recorder:
    """Runs inside every rank, beside the loader (optional, for checks that measure what
    ids cannot show: memory, shared memory, time). Built by :meth:`Check.recorder` in the
    rank; what :meth:`end_epoch` returns (small and picklable) reaches the check as
    ``run.recordings(check.name)[rank][epoch]``."""

    def start_epoch(self, epoch: int, loader) -> None:
        """Before the epoch's first batch (after the loader is built)."""

    def after_batch(self, batches: int, batch=None) -> None:
        """After every batch (``batches`` so far this epoch; ``batch`` as the loader
        yielded it, for a recorder that measures it): keep it cheap."""

    def end_epoch(self, epoch: int) -> Any:
        """After the epoch's last batch: what to send back."""
        return None


class Check:
    """One thing the audit judges. Subclass it in a module of its own and add an instance
    to ``CHECKS`` in :mod:`talk_helpers.audit.checks`.

    ``name`` keys its verdict (``report.results[name]``) and its JSON; ``column`` is the
    heading of its per-epoch column in the notebook's table (None: its per-epoch lines are
    listed under the table). Instances are pickled to the ranks with the plan.
    """

    name: str = ""
    column: str | None = None

    def recorder(self, plan: Plan) -> Recorder | None:
        """A :class:`Recorder` to run in each rank, or None (most checks read only ids)."""
        return None

    def judge(self, run: AuditRun) -> Verdict:
        """The verdict over everything the ranks collected."""
        raise NotImplementedError


class AuditRun:
    """What the checks judge: every rank's epochs, the options, and helpers over them."""

    def __init__(self, ranks: list[RankRun], options: Options):
        self.ranks = ranks
        self.options = options
        self.world_size = len(ranks)
        self.n_epochs = len(ranks[0].epochs) if ranks else 0

    def epoch(self, e: int) -> list[RankEpoch]:
        """Epoch ``e`` of every rank, by rank."""
        return [r.epochs[e] for r in self.ranks]

    def ids(self, e: int) -> np.ndarray:
        """Every id of epoch ``e`` over all ranks (rank 0's first), as int64."""
        parts = [r.epochs[e].ids for r in self.ranks]
        return np.concatenate(parts).astype(np.int64, copy=False) if parts \
            else np.empty(0, np.int64)

    def recordings(self, name: str) -> list[list]:
        """``[rank][epoch]``: what check ``name``'s recorder returned in each rank."""
        return [r.recordings.get(name, []) for r in self.ranks]

    @cached_property
    def names(self) -> dict[int, str]:
        """The text of string ids, by their hashed id (empty for integer ids)."""
        out: dict[int, str] = {}
        for r in self.ranks:
            if r.names:
                out.update(r.names)
        return out

    @property
    def string_ids(self) -> bool:
        return bool(self.names)

    @property
    def counted(self) -> bool:
        """Ids are hashes (contents, strings): they number no storage order and
        ``expected`` counts distinct samples instead of naming them."""
        return self.options.counted or self.string_ids

    def id_text(self, i: int):
        """How a report names sample ``i``: the int, the string id, or a content hash."""
        if self.names:
            return self.names.get(int(i), f"#{int(i):016x}")
        if self.options.counted:
            return f"#{int(i):016x}"
        return int(i)
