"""Every check in one call: run a loader in every rank of a real world and audit what it yields.

``audit(make_loader, world_size=2)`` calls ``make_loader(rank, world_size, epoch)`` in
each rank of a real gloo world (through :func:`talk_helpers.runtime.world.run_world`),
iterates what it returns exactly as a training loop would, reads the sample ids of every
batch and answers, per epoch:

* **exactly once** — over the union of all ranks (and so of all their workers): no
  duplicates, nothing missing (:func:`talk_helpers.checks.check_exactly_once`); ids
  dropped or repeated *by design* (``dropped_by_design=``, ``repeated_by_design=``) are
  named as the trade-off they are;
* **batches per rank** — equal on every rank, or a DDP training loop would block at the
  first step one rank no longer takes (:func:`talk_helpers.checks.check_batch_counts`);
* **batch sizes** — when ``batch_size`` is given, partial or oversized batches
  (:func:`talk_helpers.checks.check_batch_sizes`);
* **samples per worker** — for a DataLoader with workers, recorded inside the workers
  (``get_worker_info()``); a worker that reads nothing is flagged ⚠ idle;

and across epochs: whether each rank's order changes, and how well the order a training
step sees is mixed. ``shuffle=True`` (the loader is meant to shuffle) makes a repeating
or poorly mixed order a failure; ``shuffle=False`` does not judge the order; ``None``
reports it with ⚠ in the headline.

``report.ok`` is true when every check passes; ``report.status`` is ``"pass"``,
``"warn"`` (ok, with ⚠ beside it) or ``"fail"``. The headline lists what is wrong, so a
glance never reads a clean ✔ over a problem. ``report.epochs[e][rank]`` keeps the ids,
one numpy array per batch, for drawing; ``report.to_dict()`` is the JSON form.
"""

from __future__ import annotations

import html
import pickle
import sys
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, get_worker_info

from talk_helpers.arguments import require_int
from talk_helpers.checks import (
    BatchCountReport,
    BatchSizeReport,
    ExactlyOnceReport,
    check_batch_counts,
    check_batch_sizes,
    check_exactly_once,
    ids_of,
    step_report,
)
from talk_helpers.checks.verdict import colour_of, table_html
from talk_helpers.palette import BAD_COLOUR, OK_COLOUR, WARN_COLOUR
from talk_helpers.runtime import world as distributed

__all__ = ["AuditReport", "EpochAudit", "RankEpoch", "audit", "build_report",
           "collect_batches", "collect_ids"]

SHUFFLE_CHOICES = (None, True, False)
ID_LIMIT = 20  # ids listed per problem in to_dict()


# ------------------------------------------------------------------ what runs in a rank


FromWorker = namedtuple("FromWorker", "worker batch")


class TagWorker:
    """A collate_fn wrapper run inside DataLoader workers: returns (worker id, batch)."""

    def __init__(self, collate_fn: Callable):
        self.collate_fn = collate_fn

    def __call__(self, samples):
        info = get_worker_info()
        return FromWorker(None if info is None else info.id, self.collate_fn(samples))


@dataclass
class RankEpoch:
    """What one rank saw in one epoch: the ids of each batch, and the worker that made it
    (``None`` per batch when unknown); ``num_workers`` is None when not a DataLoader."""

    batches: list[np.ndarray]
    workers: list[int | None]
    num_workers: int | None

    def __repr__(self) -> str:
        return f"{len(self.batches)} batches"


def collect_batches(rank: int, world_size: int, make_loader: Callable, epochs: int,
                    batch_ids: Callable | None = None) -> list[RankEpoch]:
    """Iterate ``make_loader(rank, world_size, epoch)`` for each epoch, recording each
    batch's ids and, for a DataLoader, the worker that collated it. Runs in every rank."""
    extract = ids_of if batch_ids is None else (lambda batch: ids_of(batch_ids(batch)))
    out = []
    for epoch in range(epochs):
        loader = make_loader(rank, world_size, epoch)
        num_workers, original = None, None
        # Tag each batch with the worker that collated it. Not with persistent workers:
        # they would keep the tagging collate_fn after the audit.
        if isinstance(loader, DataLoader):
            num_workers = int(loader.num_workers)
            if num_workers and not loader.persistent_workers:
                original = loader.collate_fn
                loader.collate_fn = TagWorker(original)
        try:
            iterator = iter(loader)
        except TypeError:
            raise TypeError(
                f"make_loader(rank={rank}, world_size={world_size}, epoch={epoch}) returned "
                f"{type(loader).__name__} {_short_repr(loader)}, which is not iterable; "
                "return what a training loop iterates (a DataLoader, a dataset, a list of "
                "batches)"
            ) from None
        finally:
            if original is not None:
                loader.collate_fn = original  # the iterator has its own reference
        batches, workers = [], []
        for i, batch in enumerate(iterator):
            worker = None
            if isinstance(batch, FromWorker):
                worker, batch = batch
            try:
                batches.append(extract(batch))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"epoch {epoch}, batch {i}: cannot read the sample ids "
                                f"({exc})") from None
            workers.append(worker)
            distributed.report_progress(f"epoch {epoch}, batch {i + 1}")
        out.append(RankEpoch(batches, workers, num_workers))
        distributed.report_progress(f"epoch {epoch} done ({len(batches)} batches)")
    return out


def collect_ids(rank: int, world_size: int, make_loader: Callable, epochs: int,
                batch_ids: Callable | None = None) -> list[list[np.ndarray]]:
    """The ids only: ``[epoch][batch] -> np.ndarray`` of int64 ids."""
    return [e.batches for e in collect_batches(rank, world_size, make_loader, epochs,
                                               batch_ids)]


# ------------------------------------------------------------------ the report


@dataclass
class EpochAudit:
    """The checks of one epoch. ``by_design``: the deviation from exactly-once the caller
    declared (``{"dropped": n or ids, "repeated": n or ids}``), ``design_note`` what was
    found against it. ``worker_samples[rank]``: samples read by each worker (None when
    not known)."""

    epoch: int
    exactly_once: ExactlyOnceReport
    batch_counts: BatchCountReport
    batch_sizes: BatchSizeReport | None
    by_design: dict = field(default_factory=dict)
    worker_samples: list[list[int] | None] = field(default_factory=list)

    @property
    def once_ok(self) -> bool:
        """Exactly once, or exactly the declared drops and repeats."""
        return self.exactly_once.ok or (bool(self.by_design) and self._matches_design())

    @property
    def ok(self) -> bool:
        return (self.once_ok and self.batch_counts.ok
                and (self.batch_sizes is None or self.batch_sizes.ok))

    @property
    def idle_workers(self) -> list[tuple[int, int]]:
        """(rank, worker) pairs that read no sample this epoch."""
        return [(r, w) for r, counts in enumerate(self.worker_samples) if counts
                for w, n in enumerate(counts) if n == 0]

    @property
    def workers_known(self) -> bool:
        return bool(self.worker_samples) and all(c is not None for c in self.worker_samples)

    def _extra_reads(self) -> int:
        once = self.exactly_once
        return int((once.duplicate_times - 1).sum()) if once.duplicate_ids.size else 0

    def _matches_design(self) -> bool:
        once = self.exactly_once
        if once.unexpected_count:
            return False
        dropped = self.by_design.get("dropped")
        repeated = self.by_design.get("repeated")
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
            return self._extra_reads() == repeated
        return set(once.duplicates) == set(repeated)

    def design_note(self) -> str:
        """'1 dropped by design' etc., or '' when nothing was declared or nothing happened."""
        once = self.exactly_once
        parts = []
        if "dropped" in self.by_design and once.missing_count:
            parts.append(f"{once.missing_count} dropped")
        if "repeated" in self.by_design and once.duplicated_count:
            parts.append(f"{self._extra_reads()} repeated")
        return " · ".join(parts) + " by design" if parts else ""

    def once_line(self) -> str:
        """The exactly-once verdict, read against the declared design."""
        text = repr(self.exactly_once)
        if self.exactly_once.ok or not self.by_design:
            return text
        declared = ", ".join(f"{k} {_describe(v)}" for k, v in self.by_design.items())
        if self._matches_design():
            return f"✔ {text[2:]} ({self.design_note()})"
        return f"{text} (by design: {declared}; found more)"

    def worker_line(self) -> str | None:
        if not self.workers_known:
            return None
        per_rank = " · ".join(f"rank {r}: {', '.join(map(str, c))}"
                              for r, c in enumerate(self.worker_samples))
        idle = self.idle_workers
        total = sum(len(c) for c in self.worker_samples)
        if idle:
            return (f"⚠ samples per worker: {per_rank} — {len(idle)} of {total} workers "
                    "idle")
        return f"✔ samples per worker: {per_rank}"


@dataclass
class AuditReport:
    """The outcome of :func:`audit`.

    ``ok``: every epoch has every expected sample exactly once across ranks (or exactly
    the drops and repeats declared by design), the same number of batches on every rank,
    full batches (when ``batch_size`` was given) and, with ``shuffle=True``, an order that
    changes every epoch and is well mixed. ``status``: "pass", "warn" or "fail".
    ``epochs[e][rank]``: the ids of each batch. ``checks[e]``: the :class:`EpochAudit` of
    epoch ``e``. ``order_changes[rank]``: per epoch after the first, whether that rank's
    order differs from the previous epoch. ``shuffle``: the shuffle report (None with one
    epoch or when it cannot be made; ``shuffle_note`` says why). ``world``: the
    WorldReport of the real world (None in process); when a rank failed, the checks are
    empty and ``error`` says what happened.
    """

    world_size: int
    n_epochs: int
    epochs: list[list[list[np.ndarray]]]
    checks: list[EpochAudit]
    expected_note: str
    order_changes: dict[int, list[bool]] = field(default_factory=dict)
    shuffle: Any = None
    shuffle_note: str | None = None
    world: distributed.WorldReport | None = None
    error: str | None = None
    shuffle_expected: bool | None = None
    expected_count: int | None = None

    # -- verdicts

    @property
    def order_repeats(self) -> bool:
        """Some rank replays an epoch's order, or the global order barely changes."""
        stale = any(not all(c) for c in self.order_changes.values())
        return stale or (self.shuffle is not None and not self.shuffle.order_changes)

    @property
    def poorly_mixed(self) -> bool:
        return self.shuffle is not None and not self.shuffle.well_mixed

    @property
    def ok(self) -> bool:
        if self.error is not None or not all(c.ok for c in self.checks):
            return False
        if self.shuffle_expected:
            return not (self.order_repeats or self.poorly_mixed or self.n_epochs < 2)
        return True

    @property
    def problems(self) -> list[tuple[str, str]]:
        """(mark, short text) for the headline: ✘ failures, ⚠ warnings, · by-design notes."""
        if self.error is not None:
            return [("✘", "could not finish")]
        out = []

        def worst(values):
            return max(values, default=0)

        strict = [c for c in self.checks if not c.once_ok]
        for name, count in (("duplicated", lambda c: c.exactly_once.duplicated_count),
                            ("missing", lambda c: c.exactly_once.missing_count),
                            ("unexpected", lambda c: c.exactly_once.unexpected_count)):
            n = worst(count(c) for c in strict)
            if n:
                out.append(("✘", f"{n} {name}"))
        if any(not c.batch_counts.ok for c in self.checks):
            out.append(("✘", "unequal batches per rank"))
        partial = worst(c.batch_sizes.partial + c.batch_sizes.oversized
                        for c in self.checks if c.batch_sizes is not None)
        if partial:
            out.append(("✘", f"{partial} partial batches"))
        order_mark = {True: "✘", None: "⚠"}.get(self.shuffle_expected)
        if order_mark is not None:
            if self.order_repeats:
                out.append((order_mark, "order repeats"))
            if self.poorly_mixed:
                out.append((order_mark, self._mixing_problem()))
            if self.shuffle_expected and self.n_epochs < 2:
                out.append(("✘", "order not judged: shuffle=True needs epochs ≥ 2"))
        idle = max((c for c in self.checks), key=lambda c: len(c.idle_workers), default=None)
        if idle is not None and idle.idle_workers:
            total = sum(len(w) for w in idle.worker_samples if w is not None)
            out.append(("⚠", f"{len(idle.idle_workers)} of {total} workers idle"))
        notes = [c.design_note() for c in self.checks if c.once_ok and c.design_note()]
        if notes:
            out.append(("·", notes[0]))
        return out

    def _mixing_problem(self) -> str:
        if getattr(self.shuffle, "too_few_samples", False):
            return "mixing unproven"
        if not np.isfinite(self.shuffle.mixing):
            return "mixing not measured"
        return "poorly mixed"

    @property
    def status(self) -> str:
        """"fail" when not ok, "warn" when ok with a ⚠ beside it, else "pass"."""
        if not self.ok:
            return "fail"
        return "warn" if any(mark == "⚠" for mark, _ in self.problems) else "pass"

    # -- data

    def ids(self, epoch: int, rank: int) -> np.ndarray:
        """Every id rank ``rank`` saw in ``epoch``, in order, as one array."""
        batches = self.epochs[epoch][rank]
        return np.concatenate(batches) if batches else np.empty(0, dtype=np.int64)

    def global_order(self, epoch: int) -> np.ndarray:
        """The ids of ``epoch`` in step order: step k is rank 0's batch k, rank 1's, …"""
        per_rank = self.epochs[epoch]
        steps = max((len(b) for b in per_rank), default=0)
        parts = [per_rank[r][k] for k in range(steps) for r in range(len(per_rank))
                 if k < len(per_rank[r])]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def to_dict(self, limit: int = ID_LIMIT) -> dict:
        """A JSON-safe summary (ids listed up to ``limit`` per problem); see the README."""
        epochs = []
        for c in self.checks:
            once = c.exactly_once
            epochs.append({
                "epoch": c.epoch,
                "ok": c.ok,
                "exactly_once": {
                    "ok": c.once_ok,
                    "strict_ok": once.ok,
                    "expected": once.expected_count,
                    "unique": once.unique_count,
                    "seen": once.seen_count,
                    "duplicated_count": once.duplicated_count,
                    "missing_count": once.missing_count,
                    "unexpected_count": once.unexpected_count,
                    "duplicated": [[int(i), int(t)] for i, t in
                                   zip(once.duplicate_ids[:limit].tolist(),
                                       once.duplicate_times[:limit].tolist(), strict=True)],
                    "missing": once.missing_ids[:limit].tolist(),
                    "unexpected": once.unexpected_ids[:limit].tolist(),
                    "by_design": c.design_note() or None,
                    "verdict": c.once_line(),
                },
                "batches_per_rank": list(c.batch_counts.counts),
                "batches_equal": c.batch_counts.ok,
                "samples_per_rank": [int(sum(len(b) for b in self.epochs[c.epoch][r]))
                                     for r in range(self.world_size)],
                "batch_sizes_ok": None if c.batch_sizes is None else c.batch_sizes.ok,
                "partial_batches": None if c.batch_sizes is None else c.batch_sizes.partial,
                "samples_per_worker": (c.worker_samples if c.workers_known else None),
                "idle_workers": [list(p) for p in c.idle_workers],
            })
        shuffle = None
        if self.shuffle is not None:
            shuffle = {"order_changes": bool(self.shuffle.order_changes),
                       "well_mixed": bool(self.shuffle.well_mixed),
                       "mixing": _finite(self.shuffle.mixing),
                       "verdict": repr(self.shuffle).splitlines()[0]}
        return {
            "schema": "talk_helpers.audit/1",
            "headline": self._title(),
            "ok": self.ok,
            "status": self.status,
            "error": self.error,
            "world_size": self.world_size,
            "n_epochs": self.n_epochs,
            "expected": self.expected_count,
            "expected_note": self.expected_note,
            "shuffle_expected": self.shuffle_expected,
            "problems": [{"mark": m, "text": t} for m, t in self.problems],
            "epochs": epochs,
            "order": {"repeats": self.order_repeats if self.order_changes else None,
                      "changes_per_rank": {str(r): v for r, v in self.order_changes.items()}},
            "shuffle": shuffle,
            "shuffle_note": self.shuffle_note,
            "start_method": None if self.world is None else self.world.start_method,
        }

    # -- text

    def _title(self) -> str:
        mark = {"pass": "✔", "warn": "⚠", "fail": "✘"}[self.status]
        ranks = "rank" if self.world_size == 1 else "ranks"
        epochs = "epoch" if self.n_epochs == 1 else "epochs"
        head = f"{mark} audit of {self.world_size} {ranks} × {self.n_epochs} {epochs}"
        problems = self.problems
        if self.status == "warn" and all(c.exactly_once.ok for c in self.checks):
            problems = [("✔", "exactly once"), *problems]
        return " · ".join([head, *(f"{m} {t}" if m != "·" else t for m, t in problems)])

    def _order_rows(self) -> list[tuple[str, str]]:
        rows = []
        warn = {True: "✘", None: "⚠", False: "·"}[self.shuffle_expected]
        good = "·" if self.shuffle_expected is False else "✔"
        if self.n_epochs >= 2 and self.order_changes:
            stale = [r for r, changes in self.order_changes.items() if not all(changes)]
            if not stale:
                rows.append(("order", f"{good} every rank's order changes from epoch to epoch"))
            else:
                who = (", ".join(f"rank {r}" for r in stale[:8])
                       + (" …" if len(stale) > 8 else ""))
                rows.append(("order", f"{warn} {who}: the same order in consecutive epochs"))
        elif self.shuffle_expected and self.n_epochs < 2:
            rows.append(("order", "✘ not judged: shuffle=True needs epochs ≥ 2"))
        if self.shuffle is not None:
            text = repr(self.shuffle).splitlines()[0].replace("shuffle: ", "", 1)
            if text[0] in "✔✘":
                text = (good if self.shuffle.ok else warn) + text[1:]
            rows.append(("shuffle", text))
        elif self.shuffle_note:
            rows.append(("shuffle", f"· {self.shuffle_note}"))
        if self.shuffle_expected is False and rows:
            rows.append(("", "· order not judged (shuffle=False)"))
        return rows

    def _lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs; text starts with ✔/⚠/✘ where it is a verdict."""
        if self.error is not None:
            return [("", f"✘ {self.error}")]
        rows = []
        for c in self.checks:
            rows.append((f"epoch {c.epoch}", c.once_line()))
            rows.append(("", repr(c.batch_counts)))
            if c.batch_sizes is not None:
                rows.append(("", repr(c.batch_sizes)))
            if c.worker_line() is not None:
                rows.append(("", c.worker_line()))
        rows.extend(self._order_rows())
        rows.append(("", f"· {self.expected_note}"))
        return rows

    def __repr__(self) -> str:
        width = max((len(label) for label, _ in self._lines()), default=0)
        lines = [self._title()]
        for label, text in self._lines():
            lines.append(("  " + (f"{label.ljust(width)}  " if width else "") + text).rstrip())
        if self.error is not None and self.world is not None:
            lines.extend("  " + line for line in repr(self.world).splitlines())
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        title_colour = {"pass": OK_COLOUR, "warn": WARN_COLOUR, "fail": BAD_COLOUR}[self.status]
        parts = [f"<div><b style='color:{title_colour}'>{html.escape(self._title())}</b>"]
        if self.error is not None:
            parts.append(f"<p style='color:{BAD_COLOUR}'>{html.escape(self.error)}</p>")
            if self.world is not None:
                parts.append(self.world._repr_html_())
            return "".join(parts) + "</div>"
        rows = [[str(c.epoch), c.once_line(), repr(c.batch_counts),
                 "-" if c.batch_sizes is None else repr(c.batch_sizes)] for c in self.checks]
        parts.append(table_html(["epoch", "exactly once", "batches per rank", "batch sizes"],
                                rows))
        extra = [c.worker_line() for c in self.checks if c.worker_line() is not None]
        extra += [f"{text[:2]}{label}: {text[2:]}" if label else text
                  for label, text in self._order_rows()]
        extra.append(self.expected_note)
        for text in extra:
            parts.append(f"<div style='color:{colour_of(text)}'>{html.escape(text)}</div>")
        return "".join(parts) + "</div>"


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _describe(value) -> str:
    return str(value) if isinstance(value, int) else f"ids {list(value)[:8]}"


# ------------------------------------------------------------------ the call


def audit(make_loader: Callable, *, world_size: int, epochs: int = 2, expected=None,
          batch_size: int | None = None, shuffle: bool | None = None,
          dropped_by_design=None, repeated_by_design=None, in_process: bool = False,
          timeout_s: float = 120.0, start_method: str | None = None,
          batch_ids: Callable | None = None,
          collective_timeout_s: float = 10.0, reuse: bool | None = None) -> AuditReport:
    """Run ``make_loader`` in every rank and check what the ranks see together.

    Args:
        make_loader: ``make_loader(rank, world_size, epoch)`` returns what a training loop
            iterates (a DataLoader, an iterable dataset, a list of batches). Each batch is
            anything :func:`talk_helpers.checks.ids_of` reads: ints, integer tensors or
            arrays, dicts with an ``"id"`` key, lists of these. In a real world it is
            pickled and sent to the rank processes, so it must be a module-level function
            (e.g. in ``talk_helpers``) or a ``functools.partial`` of one, never a function
            defined in a notebook cell.
        world_size: number of ranks (≥ 1).
        epochs: epochs to run (≥ 1); ``make_loader`` is called once per rank and epoch.
        expected: the ids one epoch should hold exactly once: an int N (ids 0..N-1) or a
            sequence of ids. None: the distinct ids seen in epoch 0 (the report says so; a
            sample missing from every rank then goes unnoticed).
        batch_size: when given, also check that every batch holds this many samples.
        shuffle: True: the loader is meant to shuffle, so an order that repeats across
            epochs or is poorly mixed fails the audit. False: the order is not judged.
            None: the order is reported, with ⚠ in the headline when it looks wrong.
        dropped_by_design: ids a fix drops on purpose, per epoch: a count (exactly that
            many ids missing) or the ids themselves. They then read "n dropped by design".
        repeated_by_design: extra reads a fix makes on purpose, per epoch: a count (reads
            beyond the first) or the ids that repeat.
        in_process: call ``make_loader`` for each rank in this process instead of a real
            world: fast, for pure simulations that do not touch ``torch.distributed``.
        timeout_s: deadline for the whole world.
        start_method: passed to :func:`talk_helpers.runtime.world.run_world`.
        batch_ids: optional picklable ``batch -> ids`` for batches ids_of cannot read
            directly (e.g. ``operator.itemgetter("__key__")`` after a mapping).
        collective_timeout_s: gloo's timeout, for loaders that use collectives.
        reuse: passed to :func:`talk_helpers.runtime.world.run_world`: False starts ranks for
            this audit alone (a one-shot command), None keeps the notebook's warm world.
    """
    if not callable(make_loader):
        raise TypeError(f"make_loader must be callable as make_loader(rank, world_size, "
                        f"epoch), got {make_loader!r}")
    require_int("world_size", world_size, minimum=1)
    require_int("epochs", epochs, minimum=1)
    if batch_ids is not None and not callable(batch_ids):
        raise TypeError(f"batch_ids must be None or a callable batch -> ids, got {batch_ids!r}")
    _validate_report_args(expected, batch_size, shuffle, dropped_by_design,
                          repeated_by_design)

    if in_process:
        per_rank = [collect_batches(rank, world_size, make_loader, epochs, batch_ids)
                    for rank in range(world_size)]
        world = None
    else:
        _check_sendable(make_loader, "make_loader")
        if batch_ids is not None:
            _check_sendable(batch_ids, "batch_ids")
        world = distributed.run_world(
            collect_batches, world_size, args=(make_loader, epochs, batch_ids),
            timeout_s=timeout_s, collective_timeout_s=collective_timeout_s,
            start_method=start_method, reuse=reuse, preload_ddp=False,
        )
        if not world.ok:
            # The rank that raised, died or hung, not one stopped because of it.
            failed = [world.ranks[r] for r in world.failed_ranks]
            bad = min(failed, key=lambda r: ("error", "timeout", "stopped").index(r.status))
            if bad.error is not None:
                what = bad.error
            elif bad.status == "timeout":
                where = (f"last: {bad.last_progress}" if bad.last_progress
                         else "stuck before its first batch")
                what = f"still running after {timeout_s:g} s ({where})"
            else:
                what = bad.status
            return failed_report(world_size, epochs,
                                 f"the audit could not finish: rank {bad.rank}: {what}",
                                 world=world, shuffle=shuffle)
        per_rank = world.results
    return build_report(per_rank, expected=expected, batch_size=batch_size, shuffle=shuffle,
                        dropped_by_design=dropped_by_design,
                        repeated_by_design=repeated_by_design, world=world)


def failed_report(world_size: int, epochs: int, error: str, *, world=None,
                  shuffle: bool | None = None) -> AuditReport:
    """The report of an audit that could not finish (a rank failed, hung or died)."""
    return AuditReport(world_size=world_size, n_epochs=epochs, epochs=[], checks=[],
                       expected_note="", world=world, error=error, shuffle_expected=shuffle)


def build_report(per_rank: list[list[RankEpoch]], *, expected=None,
                 batch_size: int | None = None, shuffle: bool | None = None,
                 dropped_by_design=None, repeated_by_design=None,
                 world: distributed.WorldReport | None = None) -> AuditReport:
    """The checks over what every rank collected (``per_rank[rank][epoch]``, from
    :func:`collect_batches`). :func:`audit` and the torchrun entry point both end here."""
    _validate_report_args(expected, batch_size, shuffle, dropped_by_design,
                          repeated_by_design)
    world_size = len(per_rank)
    epochs = len(per_rank[0]) if per_rank else 0
    if world_size < 1 or epochs < 1 or any(len(r) != epochs for r in per_rank):
        raise ValueError("per_rank must hold the same number (≥ 1) of epochs for every "
                         f"rank, got {[len(r) for r in per_rank]}")
    by_epoch = [[per_rank[r][e].batches for r in range(world_size)] for e in range(epochs)]
    if expected is None:
        seen0 = np.unique(np.concatenate([np.concatenate(b) if b else np.empty(0, np.int64)
                                          for b in by_epoch[0]]))
        expected_ids, n_expected = seen0, int(seen0.size)
        note = (f"expected: the {seen0.size} distinct ids seen in epoch 0 (pass expected= "
                "to also catch samples that no rank ever sees)")
    else:
        expected_ids = expected
        n_expected = (expected if isinstance(expected, int)
                      else len(np.asarray(expected).reshape(-1)))
        note = f"expected: {n_expected} ids per epoch"
    design = {}
    if dropped_by_design is not None:
        design["dropped"] = _design_value(dropped_by_design)
    if repeated_by_design is not None:
        design["repeated"] = _design_value(repeated_by_design)

    checks = []
    for e, ranks in enumerate(by_epoch):
        all_batches = [b for batches in ranks for b in batches]
        checks.append(EpochAudit(
            epoch=e,
            exactly_once=check_exactly_once(all_batches, expected_ids),
            batch_counts=check_batch_counts([len(batches) for batches in ranks]),
            batch_sizes=(None if batch_size is None
                         else check_batch_sizes(all_batches, batch_size)),
            by_design=design,
            worker_samples=[_worker_samples(per_rank[r][e]) for r in range(world_size)],
        ))
    report = AuditReport(world_size=world_size, n_epochs=epochs, epochs=by_epoch,
                         checks=checks, expected_note=note, world=world,
                         shuffle_expected=shuffle, expected_count=n_expected)
    if epochs >= 2:
        report.order_changes = {
            r: [not np.array_equal(report.ids(e - 1, r), report.ids(e, r))
                for e in range(1, epochs)]
            for r in range(world_size)
        }
        report.shuffle, report.shuffle_note = _shuffle(report)
    return report


def _worker_samples(seen: RankEpoch) -> list[int] | None:
    """Samples per worker id, or None without workers or when a batch's worker is unknown."""
    if not seen.num_workers or any(w is None for w in seen.workers):
        return None
    counts = [0] * seen.num_workers
    for worker, batch in zip(seen.workers, seen.batches, strict=True):
        counts[worker] += len(batch)
    return counts


def _shuffle(report: AuditReport):
    """Mixing of what a training step sees: each rank's micro-batches and the global step
    (:func:`talk_helpers.checks.mixing.step_report`)."""
    try:
        return step_report(report.epochs), None
    except (TypeError, ValueError) as exc:
        return None, f"not measured ({exc})"


def _validate_report_args(expected, batch_size, shuffle, dropped, repeated) -> None:
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or an int ≥ 1, got {batch_size!r}")
    if not any(shuffle is choice for choice in SHUFFLE_CHOICES):
        raise ValueError(f"shuffle must be None, True or False, got {shuffle!r}")
    for name, value in (("dropped_by_design", dropped), ("repeated_by_design", repeated)):
        if value is not None:
            _design_value(value, name)
    if expected is not None:
        check_exactly_once([], expected)  # validates expected before any process starts


def _design_value(value, name: str = "by_design"):
    """An int ≥ 0 (a count) or a tuple of int ids."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be None, an int count ≥ 0 or a sequence of ids, "
                        f"got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise ValueError(f"{name} must be None, an int count ≥ 0 or a sequence of ids, "
                             f"got {value!r}")
        return int(value)
    try:
        return tuple(int(i) for i in ids_of(value).tolist())
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be None, an int count ≥ 0 or a sequence of ids, "
                        f"got {value!r}") from None


def _check_sendable(obj, name: str) -> None:
    main = sys.modules.get("__main__")
    interactive = main is not None and not hasattr(main, "__file__")
    target = getattr(obj, "func", obj)
    if interactive and getattr(target, "__module__", None) == "__main__":
        raise TypeError(
            f"{name}={getattr(target, '__qualname__', target)!r} is defined in an ordinary "
            "notebook cell, so the rank processes cannot import it. Start that cell with "
            "%%importable, define it in a module and import it, or pass in_process=True "
            "for a pure simulation."
        )
    try:
        pickle.dumps(obj)
    except Exception as exc:
        raise TypeError(
            f"{name} cannot be pickled, so it cannot be sent to the rank processes "
            f"({type(exc).__name__}: {exc}). Use a module-level function or a "
            "functools.partial of one, or pass in_process=True for a pure simulation."
        ) from None


def _short_repr(obj) -> str:
    text = repr(obj)
    return text if len(text) <= 40 else text[:39] + "…"
