"""Every check in one call: run a loader in every rank of a real world and audit what it yields.

``audit(make_loader, world_size=2)`` calls ``make_loader(rank, world_size, epoch)`` in
each rank of a real gloo world (through :func:`talk_helpers.distributed.run_world`),
iterates what it returns exactly as a training loop would, reads the sample ids of every
batch and answers, per epoch:

* **exactly once** — over the union of all ranks (and so of all their workers): no
  duplicates, nothing missing (:func:`talk_helpers.checks.check_exactly_once`);
* **batches per rank** — equal on every rank, or a DDP training loop would block at the
  first step one rank no longer takes (:func:`talk_helpers.checks.check_batch_counts`);
* **batch sizes** — when ``batch_size`` is given, partial or oversized batches
  (:func:`talk_helpers.checks.check_batch_sizes`);

and across epochs: whether each rank's order changes, and the shuffle report
(:func:`talk_helpers.checks.shuffle_report`) of the global order, in which step ``k``
holds rank 0's batch ``k``, then rank 1's, and so on.

``report.ok`` is true when every epoch passes the first three checks; the order and the
shuffle are reported beside it (a loader that is not meant to shuffle is not wrong).
``report.epochs[e][rank]`` keeps the ids, one numpy array per batch, for drawing.
"""

from __future__ import annotations

import html
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from talk_helpers import distributed
from talk_helpers.checks import (
    BatchCountReport,
    BatchSizeReport,
    ExactlyOnceReport,
    check_batch_counts,
    check_batch_sizes,
    check_exactly_once,
    ids_of,
)

__all__ = ["AuditReport", "EpochAudit", "audit", "collect_ids"]

OK_COLOUR, BAD_COLOUR, INFO_COLOUR = "#009E73", "#D55E00", "#000000"


# ------------------------------------------------------------------ what runs in a rank


def collect_ids(rank: int, world_size: int, make_loader: Callable, epochs: int,
                batch_ids: Callable | None = None) -> list[list[np.ndarray]]:
    """Iterate ``make_loader(rank, world_size, epoch)`` for each epoch; return batch ids.

    The result is ``[epoch][batch] -> np.ndarray`` of int64 ids. This is what every rank
    runs inside :func:`audit`.
    """
    extract = ids_of if batch_ids is None else (lambda batch: ids_of(batch_ids(batch)))
    out = []
    for epoch in range(epochs):
        loader = make_loader(rank, world_size, epoch)
        try:
            iterator = iter(loader)
        except TypeError:
            raise TypeError(
                f"make_loader(rank={rank}, world_size={world_size}, epoch={epoch}) returned "
                f"{type(loader).__name__} {_short_repr(loader)}, which is not iterable; "
                "return what a training loop iterates (a DataLoader, a dataset, a list of "
                "batches)"
            ) from None
        batches = []
        for i, batch in enumerate(iterator):
            try:
                batches.append(extract(batch))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"epoch {epoch}, batch {i}: cannot read the sample ids "
                                f"({exc})") from None
            distributed.report_progress(f"epoch {epoch}, batch {i + 1}")
        out.append(batches)
        distributed.report_progress(f"epoch {epoch} done ({len(batches)} batches)")
    return out


# ------------------------------------------------------------------ the report


@dataclass
class EpochAudit:
    """The checks of one epoch."""

    epoch: int
    exactly_once: ExactlyOnceReport
    batch_counts: BatchCountReport
    batch_sizes: BatchSizeReport | None

    @property
    def ok(self) -> bool:
        return (self.exactly_once.ok and self.batch_counts.ok
                and (self.batch_sizes is None or self.batch_sizes.ok))


@dataclass
class AuditReport:
    """The outcome of :func:`audit`.

    ``ok``: every epoch has every expected sample exactly once across ranks, the same
    number of batches on every rank and (when ``batch_size`` was given) full batches.
    ``epochs[e][rank]``: the ids of each batch (numpy arrays). ``checks[e]``: the
    :class:`EpochAudit` of epoch ``e``. ``order_changes[rank]``: for each epoch after the
    first, whether that rank's order differs from the previous epoch. ``shuffle``: the
    shuffle report of the global order (None with one epoch or when it cannot be made;
    ``shuffle_note`` says why). ``world``: the WorldReport of the real world (None in
    process); when a rank failed, the checks are empty and ``error`` says what happened.
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

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

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

    # -- text

    def _title(self) -> str:
        mark = "✔" if self.ok else "✘"
        ranks = "rank" if self.world_size == 1 else "ranks"
        epochs = "epoch" if self.n_epochs == 1 else "epochs"
        return f"{mark} audit of {self.world_size} {ranks} × {self.n_epochs} {epochs}"

    def _order_line(self) -> tuple[bool, str] | None:
        if self.n_epochs < 2 or not self.order_changes:
            return None
        stale = [r for r, changes in self.order_changes.items() if not all(changes)]
        if not stale:
            return True, "every rank's order changes from epoch to epoch"
        who = ", ".join(f"rank {r}" for r in stale[:8]) + (" …" if len(stale) > 8 else "")
        return False, f"{who}: the same order in consecutive epochs"

    def _lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs; text starts with ✔/✘ where it is a verdict."""
        if self.error is not None:
            return [("", f"✘ {self.error}")]
        rows = []
        for c in self.checks:
            label = f"epoch {c.epoch}"
            rows.append((label, repr(c.exactly_once)))
            rows.append(("", repr(c.batch_counts)))
            if c.batch_sizes is not None:
                rows.append(("", repr(c.batch_sizes)))
        order = self._order_line()
        if order is not None:
            rows.append(("order", f"{'✔' if order[0] else '✘'} {order[1]}"))
        if self.shuffle is not None:
            rows.append(("shuffle", repr(self.shuffle).splitlines()[0].replace("shuffle: ", "", 1)))
        elif self.shuffle_note:
            rows.append(("shuffle", f"· {self.shuffle_note}"))
        rows.append(("", f"· {self.expected_note}"))
        return rows

    def __repr__(self) -> str:
        width = max((len(label) for label, _ in self._lines()), default=0)
        lines = [self._title()]
        for label, text in self._lines():
            lines.append(f"  {label.ljust(width)}  {text}".rstrip())
        if self.error is not None and self.world is not None:
            lines.extend("  " + line for line in repr(self.world).splitlines())
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        def cell(text: str) -> str:
            colour = (OK_COLOUR if text.startswith("✔") else BAD_COLOUR
                      if text.startswith("✘") else INFO_COLOUR)
            return f"<td style='text-align:left;color:{colour}'>{html.escape(text)}</td>"

        title_colour = OK_COLOUR if self.ok else BAD_COLOUR
        parts = [f"<div><b style='color:{title_colour}'>{html.escape(self._title())}</b>"]
        if self.error is not None:
            parts.append(f"<p style='color:{BAD_COLOUR}'>{html.escape(self.error)}</p>")
            if self.world is not None:
                parts.append(self.world._repr_html_())
            return "".join(parts) + "</div>"
        parts.append("<table><thead><tr><th>epoch</th><th style='text-align:left'>exactly "
                     "once</th><th style='text-align:left'>batches per rank</th>"
                     "<th style='text-align:left'>batch sizes</th></tr></thead><tbody>")
        for c in self.checks:
            sizes = "-" if c.batch_sizes is None else repr(c.batch_sizes)
            parts.append(f"<tr><td>{c.epoch}</td>{cell(repr(c.exactly_once))}"
                         f"{cell(repr(c.batch_counts))}{cell(sizes)}</tr>")
        parts.append("</tbody></table>")
        extra = []
        order = self._order_line()
        if order is not None:
            extra.append(f"{'✔' if order[0] else '✘'} order: {order[1]}")
        if self.shuffle is not None:
            extra.append(repr(self.shuffle).splitlines()[0])
        elif self.shuffle_note:
            extra.append(f"shuffle: {self.shuffle_note}")
        extra.append(self.expected_note)
        for text in extra:
            colour = (OK_COLOUR if text.startswith("✔") else BAD_COLOUR
                      if text.startswith("✘") else INFO_COLOUR)
            parts.append(f"<div style='color:{colour}'>{html.escape(text)}</div>")
        return "".join(parts) + "</div>"


# ------------------------------------------------------------------ the call


def audit(make_loader: Callable, *, world_size: int, epochs: int = 2, expected=None,
          batch_size: int | None = None, in_process: bool = False, timeout_s: float = 120.0,
          start_method: str | None = None, batch_ids: Callable | None = None,
          collective_timeout_s: float = 10.0) -> AuditReport:
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
        in_process: call ``make_loader`` for each rank in this process instead of a real
            world: fast, for pure simulations that do not touch ``torch.distributed``.
        timeout_s: deadline for the whole world.
        start_method: passed to :func:`talk_helpers.distributed.run_world`.
        batch_ids: optional picklable ``batch -> ids`` for batches ids_of cannot read
            directly (e.g. ``operator.itemgetter("__key__")`` after a mapping).
        collective_timeout_s: gloo's timeout, for loaders that use collectives.
    """
    if not callable(make_loader):
        raise TypeError(f"make_loader must be callable as make_loader(rank, world_size, "
                        f"epoch), got {make_loader!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if isinstance(epochs, bool) or not isinstance(epochs, int):
        raise TypeError(f"epochs must be an int, got {epochs!r}")
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or an int ≥ 1, got {batch_size!r}")
    if batch_ids is not None and not callable(batch_ids):
        raise TypeError(f"batch_ids must be None or a callable batch -> ids, got {batch_ids!r}")
    if expected is not None:
        check_exactly_once([], expected)  # validates expected before any process starts

    if in_process:
        per_rank = [collect_ids(rank, world_size, make_loader, epochs, batch_ids)
                    for rank in range(world_size)]
        world = None
    else:
        _check_sendable(make_loader, "make_loader")
        if batch_ids is not None:
            _check_sendable(batch_ids, "batch_ids")
        world = distributed.run_world(
            collect_ids, world_size, args=(make_loader, epochs, batch_ids),
            timeout_s=timeout_s, collective_timeout_s=collective_timeout_s,
            start_method=start_method,
        )
        if not world.ok:
            bad = world.ranks[world.failed_ranks[0]]
            if bad.error is not None:
                what = bad.error
            elif bad.status == "timeout":
                what = f"still running after {timeout_s:g} s (last: {bad.last_progress})"
            else:
                what = bad.status
            return AuditReport(
                world_size=world_size, n_epochs=epochs, epochs=[], checks=[],
                expected_note="", world=world,
                error=f"the audit could not finish: rank {bad.rank}: {what}",
            )
        per_rank = world.results

    # per_rank[rank][epoch] -> batches; the report is indexed [epoch][rank].
    by_epoch = [[per_rank[r][e] for r in range(world_size)] for e in range(epochs)]
    if expected is None:
        seen0 = np.unique(np.concatenate([np.concatenate(b) if b else np.empty(0, np.int64)
                                          for b in by_epoch[0]]))
        expected_ids = seen0
        note = (f"expected: the {seen0.size} distinct ids seen in epoch 0 (pass expected= "
                "to also catch samples that no rank ever sees)")
    else:
        expected_ids = expected
        n = expected if isinstance(expected, int) else len(np.asarray(expected).reshape(-1))
        note = f"expected: {n} ids per epoch"

    checks = []
    for e, ranks in enumerate(by_epoch):
        all_batches = [b for batches in ranks for b in batches]
        checks.append(EpochAudit(
            epoch=e,
            exactly_once=check_exactly_once(all_batches, expected_ids),
            batch_counts=check_batch_counts([len(batches) for batches in ranks]),
            batch_sizes=(None if batch_size is None
                         else check_batch_sizes(all_batches, batch_size)),
        ))
    report = AuditReport(world_size=world_size, n_epochs=epochs, epochs=by_epoch,
                         checks=checks, expected_note=note, world=world)
    if epochs >= 2:
        report.order_changes = {
            r: [not np.array_equal(report.ids(e - 1, r), report.ids(e, r))
                for e in range(1, epochs)]
            for r in range(world_size)
        }
        report.shuffle, report.shuffle_note = _shuffle(report, batch_size)
    return report


def _shuffle(report: AuditReport, batch_size: int | None):
    try:
        from talk_helpers.checks import shuffle_report
    except ImportError:
        return None, "not available (talk_helpers.mixing is missing)"
    orders = [report.global_order(e) for e in range(report.n_epochs)]
    if len({len(o) for o in orders}) > 1:
        return None, "not measured: the epochs have different lengths"
    if len(orders[0]) < 2:
        return None, "not measured: fewer than 2 samples per epoch"
    try:
        size = None if batch_size is None else min(batch_size * report.world_size,
                                                   len(orders[0]))
        return shuffle_report(orders, batch_size=size), None
    except (TypeError, ValueError) as exc:
        return None, f"not measured ({exc})"


def _check_sendable(obj, name: str) -> None:
    main = sys.modules.get("__main__")
    interactive = main is not None and not hasattr(main, "__file__")
    target = getattr(obj, "func", obj)
    if interactive and getattr(target, "__module__", None) == "__main__":
        raise TypeError(
            f"{name}={getattr(target, '__qualname__', target)!r} is defined in the notebook, "
            "so the rank processes cannot import it. Define it in a module (e.g. in "
            "talk_helpers) and import it, or pass in_process=True for a pure simulation."
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
