"""Across epochs: does each rank's order change, and is what a training step sees well
mixed (:func:`talk_helpers.checks.step_report`)? One finding for the order, one for the
mixing, shown the same in the headline, the order and mixing rows and the JSON.

``shuffle=True`` (the loader is meant to shuffle) makes an order that repeats or mixes
poorly a failure; ``None`` shows it with ⚠; ``False`` does not judge the order and skips
the mixing score.

**The order** repeats when a rank reads an epoch exactly as the one before, or when most
positions keep their sample beyond chance; it is similar when the rank correlation between
epochs is high beyond chance (:func:`talk_helpers.checks.mixing.order_across`). Its cause
reads what each rank's loader held after each epoch (:class:`EpochSeen`).

**The mixing** is scored on samples in storage order: integer ids as they are; string ids
in their natural sort order (``doc-2`` before ``doc-10``), or in the order of the ids the
user listed (``--ids-file``), and the report says which; never for contents. It looks at
:data:`MIXING_SAMPLES` samples per epoch at most: whole steps, evenly spaced, at the same
positions in every epoch. An order that repeats and batches of storage neighbours are one
finding: "not shuffled".

``mixing="chunk:N"`` judges a chunk-level shuffle at its level: ids in chunks of ``N``
(storage order), each rank's chunks in the order it first reads them, cut into windows of
about the square root of their number, scored like micro-batches.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from talk_helpers.audit.checks.base import AuditRun, Check, Recorder, Verdict
from talk_helpers.audit.checks.causes import order_causes
from talk_helpers.checks import step_report
from talk_helpers.checks.mixing import (
    ORDER_PROBLEM,
    ORDER_TEXT,
    POOR_MIXING,
    chunk_windows,
    mixing_finding,
    order_across,
    order_line,
    spearman,
)

MIXING_SAMPLES = 8192   # samples per epoch the mixing score looks at, at most


class Order(Check):
    name = "order"

    def recorder(self, plan) -> Recorder:
        return EpochRecorder(plan)

    def judge(self, run: AuditRun) -> Verdict:
        expect = run.options.shuffle
        detail = OrderDetail.of(run)
        out = Verdict(detail=detail)
        mark = {True: "✘", None: "⚠"}.get(expect)
        if mark is not None:
            for problem in detail.problems():
                out.problems.append((mark, problem))
            if expect and run.n_epochs < 2:
                out.problems.append(("✘", "order not judged: shuffle=True needs epochs ≥ 2"))
            out.causes += order_causes(run, detail, mark, run.recordings(self.name))
        out.rows = detail.rows(expect, run)
        shuffle = detail.shuffle
        out.data = {
            "order": {"repeats": detail.repeats if detail.changes else None,
                      "finding": detail.finding if detail.changes else None,
                      "changes_per_rank": {str(r): v for r, v in detail.changes.items()}},
            "shuffle": None if shuffle is None else {
                "order_changes": detail.finding is None,
                "well_mixed": bool(shuffle.well_mixed),
                "poorly_mixed": detail.poorly_mixed,
                "mixing": float(shuffle.mixing) if np.isfinite(shuffle.mixing) else None,
                "level": detail.level,
                "verdict": detail.mixing_text()},
            "shuffle_note": detail.note,
            "causes": [c.to_dict() for c in out.causes],
        }
        return out


class OrderDetail:
    """``changes[rank]``: per epoch after the first, whether the rank's order changed;
    ``finding``: None, "repeats" or "similar"; ``shuffle``: the mixing report (None when
    not measured, ``note`` says why)."""

    def __init__(self, changes, finding, across, shuffle, note, level="sample",
                 storage=None):
        self.changes, self.finding, self.across = changes, finding, across
        self.shuffle, self.note, self.level, self.storage = shuffle, note, level, storage
        self.sorted = False   # every rank reads epoch 0 in (nearly) storage order

    @classmethod
    def of(cls, run: AuditRun) -> OrderDetail:
        if run.n_epochs < 2:
            return cls({}, None, None, None, None)
        changes = {r: [_changed(run.ranks[r].epochs[e - 1].ids, run.ranks[r].epochs[e].ids)
                       for e in range(1, run.n_epochs)] for r in range(run.world_size)}
        batch = max((int(r.sizes.max()) for r in run.epoch(0) if r.sizes.size), default=1)
        # the same whole steps of every epoch, at most MIXING_SAMPLES samples: the order's
        # statistics cost what the mixing's do, whatever the size of an epoch
        raw = _sampled_epochs(run, {"ids": None})
        across = order_across([[_joined(batches) for batches in ranks] for ranks in raw],
                              batch_size=batch)
        stale = any(not all(c) for c in changes.values())
        finding = "repeats" if stale else across.finding
        if run.options.shuffle is False:
            return cls(changes, finding, across, None, None)
        storage, how = storage_order(run)
        if storage is None:
            return cls(changes, finding, across, None, how)
        chunk = run.options.chunk
        epochs = _chunk_epochs(run, storage, chunk) if chunk else _sampled_epochs(run, storage)
        copies = _copied_ranks(epochs)
        if copies:   # ranks that read what another reads at the same steps: one finding
            epochs = [[batches for r, batches in enumerate(ranks) if r not in copies]
                      for ranks in epochs]
            who = ", ".join(f"rank {b} reads what rank {a} reads"
                            for b, a in sorted(copies.items()))
            copied = (f"{who} at the same steps: left out of the mixing (the exactly-once "
                      "or draws check says why)")
            how = copied if how is None else f"{how}; {copied}"
        try:
            shuffle = step_report(epochs)
        except (TypeError, ValueError) as exc:
            return cls(changes, finding, across, None, f"not measured ({exc})")
        if chunk and shuffle.order_finding is not None and finding is None:
            finding = shuffle.order_finding    # the chunks' order repeats
        level = f"chunks of {chunk}" if chunk else "sample"
        detail = cls(changes, finding, across, shuffle, how, level, storage)
        detail.sorted = _in_storage_order(run, storage, chunk, raw[0])
        return detail

    @property
    def repeats(self) -> bool:
        return self.finding == "repeats"

    @property
    def poorly_mixed(self) -> bool:
        """Poorly mixed, mixing unproven or not measured: the mixing finding is a problem
        (an unproven mixing behind an order that repeats is not: see :meth:`problems`)."""
        return self.shuffle is not None and not self.shuffle.well_mixed

    @property
    def not_shuffled(self) -> bool:
        """The order repeats, in storage order, its batches storage neighbours: one
        finding."""
        s = self.shuffle
        return bool(self.repeats and self.sorted and s is not None and s.poor
                     and np.isfinite(s.mixing) and s.mixing < POOR_MIXING)

    def mixing_problem(self) -> str | None:
        s = self.shuffle
        if s is None or s.well_mixed:
            return None
        if getattr(s, "too_few_samples", False):
            if self.finding is not None:
                return None   # epoch 0 alone is too small: the order finding says it all
            return "mixing unproven"
        if not np.isfinite(s.mixing):
            return "mixing not measured"
        return "poorly mixed"

    def problems(self) -> list[str]:
        """The headline's findings: one per cause."""
        if self.not_shuffled:
            return ["not shuffled"]
        found = [ORDER_PROBLEM[self.finding]] if self.finding is not None else []
        mixing = self.mixing_problem()
        return found + ([mixing] if mixing else [])

    def mixing_text(self) -> str | None:
        s = self.shuffle
        if s is None:
            return None
        return mixing_finding(s.mixing, s.poor, s.unproven, s.chance)

    def rows(self, expect, run: AuditRun) -> list[tuple[str, str]]:
        warn = {True: "✘", None: "⚠", False: "·"}[expect]
        good = "·" if expect is False else "✔"
        rows = []
        if self.changes:
            rows.append(("order", self._order_entry(warn, good, run)))
        elif expect and run.n_epochs < 2:
            rows.append(("order", "✘ not judged: shuffle=True needs epochs ≥ 2"))
        if self.shuffle is not None:
            rows.append(("mixing", self._mixing_entry(warn, good)))
        elif self.note and expect is not False:
            rows.append(("mixing", f"· not judged: {self.note}"))
        if expect is False and rows:
            rows.append(("", "· order not judged (shuffle=False)"))
        return rows

    def _order_entry(self, warn: str, good: str, run: AuditRun) -> str:
        if self.not_shuffled:
            head = f"{warn} not shuffled: the same order every epoch, in storage order"
        else:
            head = f"{warn if self.finding else good} {ORDER_TEXT[self.finding]}"
            if self.level != "sample" and self.finding:
                head += f" (at the level of {self.level})"
        stale = [r for r, c in self.changes.items() if not all(c)]
        lines = [head]
        if stale:
            who = ", ".join(f"rank {r}" for r in stale[:8]) + (" …" if len(stale) > 8 else "")
            first = next(e for e, changed in enumerate(self.changes[stale[0]], 1)
                         if not changed)
            lines.append(f"{who}: epoch {first} read in exactly epoch {first - 1}'s order")
        across = self.across
        worst = int(np.argmax(across.unchanged))
        lines.append(f"rank {across.unchanged_rank[worst]}, epochs {worst}→{worst + 1}: "
                     f"{order_line(across.unchanged[worst], across.spearman[worst])}"
                     .replace("between epochs: ", ""))
        return "\n".join(lines)

    def _mixing_entry(self, warn: str, good: str) -> str:
        s = self.shuffle
        problem = self.mixing_problem()
        text = self.mixing_text()
        if self.not_shuffled:
            head = f"{warn} {text} (the order above: not shuffled)"
        elif problem:
            head = f"{warn} {text}"
        elif not s.well_mixed:     # unproven behind an order that repeats
            head = f"· {text}"
        else:
            head = f"{good} {text}"
        # the mixing report's own statistics (its order line is the order row's)
        stats = [line.strip() for line in repr(s).splitlines()[1:]
                 if not line.strip().startswith("between epochs")]
        if self.level != "sample":
            stats.insert(1, f"judged at the level of {self.level}: each rank's chunks in the "
                            "order it first reads them, in windows")
        lines = [head, *stats, *([self.note] if self.note else [])]
        return "\n".join(lines)


IN_STORAGE_ORDER = 0.9   # rank correlation of a rank's order with the storage order
COPIED = 0.5             # a rank whose samples are this often another's at the same step


def _copied_ranks(epochs) -> dict[int, int]:
    """{rank: the earlier rank it copies}: ranks whose micro-batches in epoch 0 hold mostly
    the samples an earlier rank's hold at the same steps (ranks not split, or seeded
    alike). Their steps would read as poorly mixed for a reason another check names."""
    ranks = epochs[0]
    found = {}
    for b in range(1, len(ranks)):
        for a in range(b):
            if a in found:
                continue
            steps = min(len(ranks[a]), len(ranks[b]))
            total = sum(len(ranks[b][k]) for k in range(steps))
            shared = sum(int(np.isin(ranks[b][k], ranks[a][k]).sum()) for k in range(steps))
            if total and shared >= COPIED * total:
                found[b] = a
                break
    return found


def _joined(batches: list) -> np.ndarray:
    return np.concatenate(batches) if batches else np.empty(0, np.int64)


def _in_storage_order(run: AuditRun, storage: dict, chunk: int | None, sampled) -> bool:
    """Every worker of every rank reads epoch 0 in (nearly) storage order: the rank
    correlation of its order with the storage order is at least IN_STORAGE_ORDER (by
    chunks, each counted where it is first read, with ``chunk``). Judged on the steps the
    mixing looks at (``sampled[rank]``: epoch 0's batches of ids); every batch with
    ``chunk``, whose windows need every sample."""
    for seen, batches in zip(run.epoch(0), sampled, strict=True):
        if chunk:
            positions, workers = storage_positions(storage, seen.ids), seen.workers
            sizes = seen.sizes
        else:
            positions = storage_positions(storage, _joined(batches))
            sizes = np.array([len(b) for b in batches], dtype=np.int64)
            workers = seen.workers[_sampled_steps(run)] if seen.workers.size else seen.workers
        if chunk:
            positions = positions // chunk
        workers = (np.repeat(workers.astype(np.int64), sizes)
                   if workers.size == sizes.size and workers.size
                   else np.zeros(positions.size, np.int64))
        for worker in np.unique(workers):
            mine = positions[workers == worker]
            if chunk:
                _, first = np.unique(mine, return_index=True)
                mine = mine[np.sort(first)]
            if mine.size >= 2 and spearman(mine, np.arange(mine.size)) < IN_STORAGE_ORDER:
                return False
    return True


def _changed(before: np.ndarray, after: np.ndarray) -> bool:
    """Whether a rank's order changed (a rank with fewer than 2 samples has no order)."""
    if min(before.size, after.size) < 2:
        return True
    return not np.array_equal(before, after)


def storage_order(run: AuditRun) -> tuple[dict | None, str | None]:
    """How ids map to storage positions: ``({"ids": sorted hashes or None, "rank": …}, how)``,
    or (None, why the mixing cannot be judged)."""
    if run.options.counted:
        return None, "contents carry no storage order"
    if not run.string_ids:
        return {"ids": None}, None
    listed = run.options.expected
    if isinstance(listed, list | tuple) and listed and all(isinstance(v, str) for v in listed):
        from talk_helpers.audit.sample_ids import hash_strings

        hashed, _ = hash_strings([str(v) for v in listed])
        order = np.argsort(hashed, kind="stable")
        return ({"ids": hashed[order], "rank": order.astype(np.int64)},
                "string ids in the order of the ids listed (taken as their storage order)")
    names = run.names
    keys = np.fromiter(names.keys(), dtype=np.int64, count=len(names))
    ranked = sorted(range(len(keys)), key=lambda k: natural_key(names[int(keys[k])]))
    rank = np.empty(len(keys), dtype=np.int64)
    rank[ranked] = np.arange(len(keys))
    order = np.argsort(keys)
    return ({"ids": keys[order], "rank": rank[order]},
            "string ids in their sorted order (doc-2 before doc-10), taken as storage order: "
            "pass --no-shuffle if it is not")


def natural_key(text: str) -> tuple:
    """Sort key that orders the digits in a string by their value."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.findall(r"\d+|\D+", text))


def storage_positions(storage: dict, ids: np.ndarray) -> np.ndarray:
    if storage["ids"] is None:
        return ids.astype(np.int64, copy=False)
    at = np.searchsorted(storage["ids"], ids.astype(np.int64))
    at = np.clip(at, 0, len(storage["ids"]) - 1)
    known = storage["ids"][at] == ids
    out = storage["rank"][at]
    out[~known] = len(storage["ids"]) + np.arange(int((~known).sum()))   # not listed: last
    return out


def _sampled_steps(run: AuditRun) -> np.ndarray | slice:
    """The steps the order and mixing look at: every step, or evenly spaced whole steps
    when the epochs hold more than MIXING_SAMPLES samples."""
    steps = min(rank.epochs[e].n_batches for rank in run.ranks for e in range(run.n_epochs))
    per_step = sum(int(rank.epochs[0].sizes[:1].sum()) for rank in run.ranks) or 1
    keep = max(2, MIXING_SAMPLES // per_step)
    if steps <= keep:
        return slice(None)
    return np.unique(np.linspace(0, steps - 1, keep).round().astype(int))


def _sampled_epochs(run: AuditRun, storage: dict) -> list:
    """Every step, or evenly spaced whole steps when the epochs hold more than
    MIXING_SAMPLES samples, in storage positions."""
    chosen = _sampled_steps(run)
    chosen = None if isinstance(chosen, slice) else chosen
    epochs = []
    for e in range(run.n_epochs):
        ranks = []
        for rank in run.ranks:
            batches = rank.epochs[e].batches
            if chosen is not None:
                batches = [batches[k] for k in chosen]
            ranks.append([storage_positions(storage, b) for b in batches])
        epochs.append(ranks)
    return epochs


def _chunk_epochs(run: AuditRun, storage: dict, chunk: int) -> list:
    """Each rank's chunks in the order it first reads them, cut into windows."""
    return chunk_windows([[storage_positions(storage, r.ids) for r in run.epoch(e)]
                          for e in range(run.n_epochs)], chunk)


class EpochRecorder(Recorder):
    """In each rank, once the epoch has been read: the epoch the loader, its sampler or
    its dataset holds, ``(where, value)`` or None, and what the audit did that an epoch
    depends on (for the cause of an order that repeats): :class:`EpochSeen`. Read after
    the epoch, as a loader that counts its own epochs (litdata's
    ``StreamingDataLoader.__iter__``) moves its count when it starts one."""

    def __init__(self, plan=None):
        self.call = None if plan is None or plan.epoch_call is None else str(
            getattr(plan.epoch_call, "__name__", plan.epoch_call))

    def start_epoch(self, epoch: int, loader) -> None:
        self.loader = loader

    def end_epoch(self, epoch: int):
        from talk_helpers.audit.collect import worker_target

        target, _ = worker_target(self.loader)
        persistent = bool(getattr(target, "persistent_workers", False)
                          and getattr(target, "num_workers", 0))
        seen, self.loader = epoch_seen(self.loader), None
        return EpochSeen(*(seen or (None, None)), self.call, persistent)


class EpochSeen(NamedTuple):
    """``where``/``value``: the epoch counter the loader holds (None: none found);
    ``called``: the epoch call the audit made before every epoch (None: none);
    ``persistent``: the loader keeps persistent DataLoader workers."""

    where: str | None
    value: int | None
    called: str | None
    persistent: bool


def epoch_seen(loader):
    """``(where, value)`` of the first epoch counter found on ``loader``, else None:
    ``sampler.epoch`` (torch ``DistributedSampler.set_epoch``), ``batch_sampler.sampler.epoch``,
    ``current_epoch`` (litdata ``StreamingDataLoader``, ``litdata/streaming/dataloader.py``),
    ``dataset.current_epoch`` (litdata ``StreamingDataset.set_epoch``), ``dataset._epoch``
    (HF ``IterableDataset.set_epoch``, ``datasets/iterable_dataset.py``)."""
    for path in ("sampler.epoch", "batch_sampler.sampler.epoch", "current_epoch",
                 "dataset.current_epoch", "dataset._epoch", "epoch"):
        target = loader
        for part in path.split("."):
            target = getattr(target, part, None)
        try:
            value = int(target)
        except (TypeError, ValueError):
            continue
        owner = "sampler" if "sampler" in path else path.split(".")[0] if "." in path \
            else "loader"
        return f"the {owner}'s epoch ({'loader.' * (owner == 'loader')}{path})", value
    return None
