"""Across epochs: does each rank's order change, and is what a training step sees well
mixed (:func:`talk_helpers.checks.step_report`)?

``shuffle=True`` (the loader is meant to shuffle) makes an order that repeats or mixes
poorly a failure; ``None`` shows it with ⚠; ``False`` does not judge the order and skips
the mixing score. Mixing is scored on at most :data:`MIXING_SAMPLES` samples per epoch:
whole steps, evenly spaced, at the same positions in every epoch (its cost grows faster
than the number of samples). It needs integer ids that number samples in storage order,
so it is not measured for string ids or contents.
"""

from __future__ import annotations

import numpy as np

from talk_helpers.audit.checks.base import AuditRun, Check, Verdict
from talk_helpers.checks import step_report

MIXING_SAMPLES = 8192   # samples per epoch the mixing score looks at, at most


class Order(Check):
    name = "order"

    def judge(self, run: AuditRun) -> Verdict:
        expect = run.options.shuffle
        changes: dict[int, list[bool]] = {}
        shuffle = note = None
        if run.n_epochs >= 2:
            changes = {r: [not np.array_equal(run.ranks[r].epochs[e - 1].ids,
                                              run.ranks[r].epochs[e].ids)
                           for e in range(1, run.n_epochs)] for r in range(run.world_size)}
            if run.counted:
                what = "contents" if run.options.counted else "string ids"
                note = f"not measured: {what} carry no storage order"
            elif expect is not False:
                shuffle, note = _mixing(run)
        out = Verdict(detail=OrderDetail(changes, shuffle, note))
        detail = out.detail
        mark = {True: "✘", None: "⚠"}.get(expect)
        if mark is not None:
            if detail.repeats:
                out.problems.append((mark, detail.order_problem()))
            if detail.poorly_mixed:
                out.problems.append((mark, detail.mixing_problem()))
            if expect and run.n_epochs < 2:
                out.problems.append(("✘", "order not judged: shuffle=True needs epochs ≥ 2"))
        out.rows = _rows(detail, expect, run.n_epochs)
        out.data = {
            "order": {"repeats": detail.repeats if changes else None,
                      "changes_per_rank": {str(r): v for r, v in changes.items()}},
            "shuffle": None if shuffle is None else {
                "order_changes": bool(shuffle.order_changes),
                "well_mixed": bool(shuffle.well_mixed),
                "mixing": float(shuffle.mixing) if np.isfinite(shuffle.mixing) else None,
                "verdict": repr(shuffle).splitlines()[0]},
            "shuffle_note": note,
        }
        return out


class OrderDetail:
    """``changes[rank]``: per epoch after the first, whether the rank's order changed;
    ``shuffle``: the mixing report (None when not measured, ``note`` says why)."""

    def __init__(self, changes, shuffle, note):
        self.changes, self.shuffle, self.note = changes, shuffle, note

    @property
    def repeats(self) -> bool:
        stale = any(not all(c) for c in self.changes.values())
        return stale or (self.shuffle is not None and not self.shuffle.order_changes)

    @property
    def poorly_mixed(self) -> bool:
        return self.shuffle is not None and not self.shuffle.well_mixed

    def order_problem(self) -> str:
        """"order repeats" when a rank reads an epoch in the same order as the one before;
        else the mixing report's words ("similar order across epochs", or repeats)."""
        if self.shuffle is None or any(not all(c) for c in self.changes.values()):
            return "order repeats"
        return self.shuffle.order_problem or "order repeats"

    def mixing_problem(self) -> str:
        if getattr(self.shuffle, "too_few_samples", False):
            return "mixing unproven"
        if not np.isfinite(self.shuffle.mixing):
            return "mixing not measured"
        return "poorly mixed"


def _mixing(run: AuditRun):
    """step_report over every step, or over evenly spaced whole steps when the epochs hold
    more than MIXING_SAMPLES samples; (None, why not) when it cannot be measured."""
    steps = min(rank.epochs[e].n_batches for rank in run.ranks for e in range(run.n_epochs))
    per_step = sum(int(rank.epochs[0].sizes[:1].sum()) for rank in run.ranks) or 1
    keep = max(2, MIXING_SAMPLES // per_step)
    chosen = np.unique(np.linspace(0, steps - 1, keep).round().astype(int)) \
        if steps > keep else None
    epochs = []
    for e in range(run.n_epochs):
        ranks = []
        for rank in run.ranks:
            batches = rank.epochs[e].batches
            if chosen is not None:
                batches = [batches[k] for k in chosen]
            ranks.append([b.astype(np.int64) for b in batches])
        epochs.append(ranks)
    try:
        return step_report(epochs), None
    except (TypeError, ValueError) as exc:
        return None, f"not measured ({exc})"


def _rows(detail: OrderDetail, expect, n_epochs: int) -> list[tuple[str, str]]:
    rows = []
    warn = {True: "✘", None: "⚠", False: "·"}[expect]
    good = "·" if expect is False else "✔"
    if n_epochs >= 2 and detail.changes:
        stale = [r for r, changes in detail.changes.items() if not all(changes)]
        if not stale:
            rows.append(("order", f"{good} every rank's order changes from epoch to epoch"))
        else:
            who = ", ".join(f"rank {r}" for r in stale[:8]) + (" …" if len(stale) > 8 else "")
            rows.append(("order", f"{warn} {who}: the same order in consecutive epochs"))
    elif expect and n_epochs < 2:
        rows.append(("order", "✘ not judged: shuffle=True needs epochs ≥ 2"))
    if detail.shuffle is not None:
        text = repr(detail.shuffle).splitlines()[0].replace("shuffle: ", "", 1)
        if text[0] in "✔✘":
            text = (good if detail.shuffle.ok else warn) + text[1:]
        rows.append(("shuffle", text))
    elif detail.note:
        rows.append(("shuffle", f"· {detail.note}"))
    if expect is False and rows:
        rows.append(("", "· order not judged (shuffle=False)"))
    return rows
