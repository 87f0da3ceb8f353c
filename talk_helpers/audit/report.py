"""The outcome of an audit: every check's verdict, as text, as an HTML table and as JSON.

``report.ok`` is true when no check failed; ``report.status`` is ``"pass"``, ``"warn"``
(ok, with ⚠ beside it), ``"fail"`` (a check failed), ``"usage"`` (the batches' ids could
not be told, or the factory returned no loader) or ``"error"`` (a rank raised, died or
hung); ``report.exit_status`` is 0, 0, 1, 2 or 3. The headline lists what is wrong, so a
glance never reads a clean ✔ over a problem. ``report.to_dict()`` is the JSON form
(schema ``talk_helpers.audit/2``, described in docs/audit.md).

A report of an audit that could not judge shows why (which rank, the cause, a hint); what
a later cell reads from it (``epochs``, ``checks``, ``ids()``, ``results[name]``, the order
and mixing) raises :class:`AuditFailed`, one error that says so, never an AttributeError
on a None.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from talk_helpers.audit.checks import AuditRun, Options, Verdict
from talk_helpers.audit.failure import EXIT_FAIL, EXIT_PASS, Failure
from talk_helpers.palette import BAD_COLOUR, OK_COLOUR, WARN_COLOUR
from talk_helpers.verdicts.render import colour_of, folded_html, small_html, table_html

__all__ = ["SCHEMA", "AuditFailed", "AuditReport", "EpochAudit"]

SCHEMA = "talk_helpers.audit/2"


class AuditFailed(RuntimeError):
    """What a failed audit raises when asked for what it could not see."""


class _FailedResults(dict):
    """A failed audit's ``results``: empty, and a lookup says why."""

    def __init__(self, explain):
        super().__init__()
        self._explain = explain

    def __missing__(self, name):
        raise AuditFailed(self._explain(f"results[{name!r}]"))


@dataclass
class EpochAudit:
    """The checks of one epoch, by name: ``exactly_once`` (an ExactlyOnceReport),
    ``batch_counts``, ``batch_sizes`` (None without a batch size), ``worker_samples[rank]``
    (samples read by each worker, None when not known) and the declared ``by_design``."""

    epoch: int
    exactly_once: object
    batch_counts: object
    batch_sizes: object | None
    by_design: dict = field(default_factory=dict)
    worker_samples: list = field(default_factory=list)
    once: object = field(default=None, repr=False)

    @property
    def once_ok(self) -> bool:
        """Exactly once, or exactly the declared drops and repeats."""
        return self.once.ok

    @property
    def ok(self) -> bool:
        return (self.once_ok and self.batch_counts.ok
                and (self.batch_sizes is None or self.batch_sizes.ok))

    @property
    def idle_workers(self) -> list[tuple[int, int]]:
        """(rank, worker) pairs that read no sample this epoch."""
        return [(r, w) for r, counts in enumerate(self.worker_samples) if counts
                for w, n in enumerate(counts) if n == 0]

    def design_note(self) -> str:
        return self.once.design_note()


class AuditReport:
    """What :func:`talk_helpers.audit.audit` found (see the module docstring).

    ``results[name]``: each check's :class:`~talk_helpers.audit.checks.Verdict`;
    ``checks[e]``: the :class:`EpochAudit` of epoch ``e``; ``epochs[e][rank]``: the ids of
    each batch; ``order_changes[rank]``: per epoch after the first, whether the rank's
    order changed; ``shuffle``: the mixing report (None when not measured,
    ``shuffle_note`` says why); ``world``: the real world's report (None in process);
    ``failure``: why the audit could not judge (then ``error`` says it in one line).
    """

    def __init__(self, *, world_size: int, n_epochs: int, options: Options,
                 run: AuditRun | None = None, results: dict[str, Verdict] | None = None,
                 failure: Failure | None = None, world=None):
        self.world_size, self.n_epochs = world_size, n_epochs
        self.options = options
        self.run = run
        self.results = results or ({} if failure is None else _FailedResults(self._nothing))
        self.failure = failure
        self.world = world

    def _nothing(self, what: str) -> str:
        return (f"nothing to show: the audit above failed, so it has no {what} "
                f"({self.failure.summary()}). Fix what its report names and run the audit "
                "again")

    def _require_run(self, what: str) -> None:
        if self.failure is not None:
            raise AuditFailed(self._nothing(what))

    # -- what the older attributes read

    @property
    def error(self) -> str | None:
        return None if self.failure is None else self.failure.error or self.failure.message

    @property
    def shuffle_expected(self) -> bool | None:
        return self.options.shuffle

    @cached_property
    def epochs(self) -> list[list[list[np.ndarray]]]:
        """``[epoch][rank]``: the ids of each batch, as int64 arrays."""
        self._require_run("epochs")
        if self.run is None:
            return []
        return [[[b.astype(np.int64) for b in r.batches] for r in self.run.epoch(e)]
                for e in range(self.n_epochs)]

    def ids(self, epoch: int, rank: int) -> np.ndarray:
        """Every id ``rank`` saw in ``epoch``, in order."""
        self._require_run("ids")
        return self.run.ranks[rank].epochs[epoch].ids.astype(np.int64)

    def global_order(self, epoch: int) -> np.ndarray:
        """The ids of ``epoch`` in step order: step k is rank 0's batch k, rank 1's, …"""
        self._require_run("global order")
        per_rank = self.epochs[epoch]
        steps = max((len(b) for b in per_rank), default=0)
        parts = [per_rank[r][k] for k in range(steps) for r in range(len(per_rank))
                 if k < len(per_rank[r])]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    @property
    def checks(self) -> list[EpochAudit]:
        """``checks[e]``: the :class:`EpochAudit` of epoch ``e``."""
        self._require_run("checks")
        return self._checks

    @cached_property
    def _checks(self) -> list[EpochAudit]:
        core = ("exactly_once", "batch_counts", "batch_sizes", "workers")
        if not all(name in self.results for name in core):
            return []
        once = self.results["exactly_once"].detail
        counts = self.results["batch_counts"].detail
        sizes = self.results["batch_sizes"].detail
        workers = self.results["workers"].detail
        return [EpochAudit(epoch=e, exactly_once=once[e].report, batch_counts=counts[e],
                           batch_sizes=sizes[e], by_design=once[e].design,
                           worker_samples=workers[e], once=once[e])
                for e in range(self.n_epochs)]

    @property
    def expected_note(self) -> str:
        once = self.results.get("exactly_once")
        return once.data["expected_note"] if once else ""

    @property
    def expected_count(self) -> int | None:
        if not self._checks:
            return None
        return self._checks[0].exactly_once.expected_count

    @property
    def _order(self):
        found = self.results.get("order")
        return None if found is None else found.detail

    def _order_of(self, what: str):
        self._require_run(what)
        return self._order

    @property
    def order_changes(self) -> dict[int, list[bool]]:
        order = self._order_of("order")
        return {} if order is None else order.changes

    @property
    def shuffle(self):
        order = self._order_of("shuffle report")
        return None if order is None else order.shuffle

    @property
    def shuffle_note(self) -> str | None:
        order = self._order_of("shuffle report")
        return None if order is None else order.note

    @property
    def order_repeats(self) -> bool:
        """Some rank replays an epoch's order, or the global order barely changes."""
        order = self._order_of("order")
        return order is not None and order.repeats

    @property
    def poorly_mixed(self) -> bool:
        order = self._order_of("mixing")
        return order is not None and order.poorly_mixed

    # -- verdicts

    @property
    def ok(self) -> bool:
        return self.failure is None and not any(v.failed for v in self.results.values())

    @property
    def problems(self) -> list[tuple[str, str]]:
        """(mark, short text) for the headline: ✘ failures, ⚠ warnings, · by-design notes."""
        if self.failure is not None:
            return [("✘", self.failure.problem)]
        out = [p for v in self.results.values() for p in v.problems]
        notes = [n for v in self.results.values() for n in v.notes]
        return out + [("·", n) for n in notes[:1]]

    @property
    def status(self) -> str:
        """"pass", "warn", "fail", "usage" or "error" (see the module docstring)."""
        if self.failure is not None:
            return "usage" if self.failure.exit_status == 2 else "error"
        if not self.ok:
            return "fail"
        return "warn" if any(v.warned for v in self.results.values()) else "pass"

    @property
    def exit_status(self) -> int:
        """0 pass (warnings allowed), 1 a check failed, 2 usage or unreadable ids,
        3 a rank raised, died or hung."""
        if self.failure is not None:
            return self.failure.exit_status
        return EXIT_PASS if self.ok else EXIT_FAIL

    # -- JSON

    def to_dict(self, limit: int = 20) -> dict:
        """A JSON-safe summary (ids listed up to ``limit`` per problem); see docs/audit.md."""
        epochs = []
        if self._checks:
            once = self.results["exactly_once"]
            for e, check in enumerate(self._checks):
                entry = once.detail[e].to_dict(self.run, limit)
                epochs.append({
                    "epoch": e,
                    "ok": check.ok,
                    "exactly_once": entry,
                    **self.results["batch_counts"].data["epochs"][e],
                    "batches_equal": check.batch_counts.ok,
                    "batch_sizes_ok": None if check.batch_sizes is None else check.batch_sizes.ok,
                    "partial_batches": (None if check.batch_sizes is None
                                        else check.batch_sizes.partial),
                    **self.results["workers"].data["epochs"][e],
                })
            for e in epochs:
                e.pop("equal", None)
                e["batches_per_rank"] = list(e["batches_per_rank"])
        order = self.results["order"].data if "order" in self.results else {}
        extra = {name: v.data for name, v in self.results.items()
                 if name not in ("exactly_once", "batch_counts", "batch_sizes", "order",
                                 "workers")}
        return {
            "schema": SCHEMA,
            "status": self.status,
            "exit_status": self.exit_status,
            "headline": self._title(),
            "ok": self.ok,
            "error": None if self.failure is None else self.failure.to_dict(),
            "world_size": self.world_size,
            "n_epochs": self.n_epochs,
            "steps": self.options.steps,
            "ids": self.options.ids,
            "expected": self.expected_count,
            "expected_note": self.expected_note or None,
            "shuffle_expected": self.shuffle_expected,
            "problems": [{"mark": m, "text": t} for m, t in self.problems],
            "epochs": epochs,
            "order": order.get("order", {"repeats": None, "changes_per_rank": {}}),
            "shuffle": order.get("shuffle"),
            "shuffle_note": order.get("shuffle_note"),
            "checks": extra,
            "causes": [c.to_dict() for c in self.causes],
            "with_replacement": self.options.with_replacement,
            "mixing_level": self.options.mixing,
            "start_method": None if self.world is None else self.world.start_method,
        }

    # -- text

    def _title(self) -> str:
        mark = {"pass": "✔", "warn": "⚠"}.get(self.status, "✘")
        ranks = "rank" if self.world_size == 1 else "ranks"
        epochs = "epoch" if self.n_epochs == 1 else "epochs"
        head = f"{mark} audit of {self.world_size} {ranks} × {self.n_epochs} {epochs}"
        problems = self.problems
        passed = [v.passed for v in self.results.values() if v.passed]
        if self.status == "warn" and passed:
            problems = [("✔", p) for p in passed] + problems
        return " · ".join([head, *(f"{m} {t}" if m != "·" else t for m, t in problems)])

    def _epoch_lines(self, e: int) -> list[str]:
        return [line for v in self.results.values() for line in v.lines_of(e)]

    @property
    def causes(self) -> list:
        """The usual cause of each finding that has one, and how the audit knows."""
        return [c for v in self.results.values() for c in v.causes]

    def _cause_entries(self) -> list[str]:
        """Each cause's lines, or one saying they are held back (``hold_back``)."""
        if self.options.hold_back and self.causes:
            return ["· held back until you answer: the exercise's grader shows it"]
        return ["\n".join(c.lines()) for c in self.causes]

    def _lines(self) -> list[tuple[str, str]]:
        """(label, entry) pairs; an entry starts with ✔/⚠/✘ where it is a verdict, and its
        further lines (after a newline) are the statistics behind it."""
        if self.failure is not None:
            return [("", line) for line in self.failure.lines()]
        rows = []
        for e in range(self.n_epochs):
            for i, entry in enumerate(self._epoch_lines(e)):
                rows.append((f"epoch {e}" if i == 0 else "", entry))
        rows += [row for v in self.results.values() for row in v.rows]
        rows += [("cause", entry) for entry in self._cause_entries()]
        rows += [("", note) for v in self.results.values() for note in v.footnotes]
        return rows

    def __repr__(self) -> str:
        lines = self._lines()
        width = max((len(label) for label, _ in lines), default=0)
        out = [self._title()]
        pad = "  " + (" " * width + "  " if width else "")
        for label, entry in lines:
            first, *rest = entry.split("\n")
            out.append(("  " + (f"{label.ljust(width)}  " if width else "") + first).rstrip())
            out.extend(f"{pad}  {line}".rstrip() for line in rest)
        if self.failure is not None and self.failure.kind != "ids" and self.world is not None:
            out.extend("  " + line for line in repr(self.world).splitlines())
        return "\n".join(out)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        title_colour = {"pass": OK_COLOUR, "warn": WARN_COLOUR}.get(self.status, BAD_COLOUR)
        parts = [f"<div><b style='color:{title_colour}'>{html.escape(self._title())}</b>"]
        if self.failure is not None:
            for line in self.failure.lines():
                parts.append(f"<p style='color:{BAD_COLOUR};margin:0'>{html.escape(line)}</p>")
            if self.world is not None and self.failure.kind != "ids":
                parts.append(self.world._repr_html_())
            return "".join(parts) + "</div>"
        columns = [(name, v.column) for name, v in self.results.items() if v.column]
        rows = [[str(e)] + [(self.results[name].lines_of(e) or ["-"])[0]
                            for name, _ in columns] for e in range(self.n_epochs)]
        parts.append(table_html(["epoch", *(title for _, title in columns)], rows))
        extra = _by_epoch([[line for name, v in self.results.items()
                            if name not in dict(columns) for line in v.lines_of(e)]
                           for e in range(self.n_epochs)])
        extra += _by_epoch([[line for name, _ in columns
                             for line in self.results[name].lines_of(e)[1:]]
                            for e in range(self.n_epochs)])
        extra += [_labelled(label, text) for v in self.results.values()
                  for label, text in v.rows]
        behind = []
        for text in extra:   # each check's verdict line shown, its statistics folded
            first, *rest = text.split("\n")
            parts.append(f"<div style='color:{colour_of(first)}'>{html.escape(first)}</div>")
            behind += [small_html(line) for line in rest]
        behind += [_line_html(_labelled("cause", entry)) for entry in self._cause_entries()]
        behind += [_line_html(note.removeprefix("· ")) for v in self.results.values()
                   for note in v.footnotes]
        summary = "cause and statistics" if self.causes else "statistics"
        return "".join(parts) + folded_html("".join(behind), summary) + "</div>"


def _line_html(entry: str) -> str:
    first, *rest = entry.split("\n")
    return (f"<div style='color:{colour_of(first)}'>{html.escape(first)}</div>"
            + "".join(small_html(line, indent=True) for line in rest))


def _by_epoch(lines: list[list[str]]) -> list[str]:
    """Each epoch's lines (outside the table, where no row names the epoch) with their
    epoch named; a line that every epoch has alike is shown once, for every epoch."""
    if len(lines) <= 1:
        return [line for epoch in lines for line in epoch]
    alike = [line for line in lines[0] if all(line in other for other in lines[1:])]
    shown = [_in_epochs("every epoch", line) for line in alike]
    for e, epoch in enumerate(lines):
        shown += [_in_epochs(f"epoch {e}", line) for line in epoch if line not in alike]
    return shown


def _in_epochs(which: str, entry: str) -> str:
    """'✔ every epoch · samples per worker: …' from '✔ samples per worker: …'."""
    first, _, rest = entry.partition("\n")
    if first[:1] in "✔✘⚠·" and first[1:2] == " ":
        first = f"{first[:2]}{which} · {first[2:]}"
    else:
        first = f"{which} · {first}"
    return first + ("\n" + rest if rest else "")


def _labelled(label: str, entry: str) -> str:
    """'✘ order: order repeats…' from ('order', '✘ order repeats…'), its statistics kept."""
    if not label:
        return entry
    first, _, rest = entry.partition("\n")
    if first[:1] in "✔✘⚠·" and first[1:2] == " ":
        if not first[2:].startswith(label):   # not "mixing: mixing unproven"
            first = f"{first[:2]}{label}: {first[2:]}"
    elif not first.startswith(label):
        first = f"{label}: {first}"
    return first + ("\n" + rest if rest else "")

