"""Is this shuffle any good? A measured answer, plus the buffer shuffles libraries use.

:func:`shuffle_report` looks at the order in which samples came out in two or more epochs,
:func:`step_report` at what each rank fed its model at each step, and both answer:

1. **Does the order change between epochs?** For each pair of consecutive epochs: the
   fraction of positions holding the same sample, and the Spearman rank correlation of
   the two sequences (1 = same order, about 0 = unrelated orders).
2. **How well are the samples mixed?** A score on a fixed scale: 0 for no mixing (the
   storage order), about 1 for a uniform random permutation.

The score is **group mixing**: take a label per sample, count how often two samples of
one batch share a label, and turn that into the effective number of labels per batch
(inverse Simpson index, ``1 / P(two samples of a batch share a label)``). The score is
that number minus 1, relative to the same for a uniform shuffle: 0 when every batch holds
one label, about 1 for a uniform shuffle, above 1 only for batches more balanced than
chance (stratified batches). Pairs are pooled over all batches before the ratio is taken.

* With ``groups`` (a label per sample id: its class, its shard, its source) the labels
  are yours.
* Without ``groups`` the labels are **storage blocks**. Sample ids are taken to number
  the samples in storage order (id 0 first on disk); the distinct ids are cut into
  ``m`` contiguous blocks for ``m = 2, 4, 8, …, 64`` (as many as the batches hold enough
  pairs to measure: a uniform shuffle must put at least :data:`MIN_SAME_PAIRS` pairs in
  one block) and the score is the *smallest* over these block counts. A batch drawn from
  ``k`` of ``m`` contiguous blocks holds at most ``k`` effective blocks, so its score is
  at most about ``(k - 1) / (m - 1)`` at that block count, however far apart the blocks
  are. (An earlier score, the variance of storage positions in a batch, rewarded exactly
  that: two distant blocks look *more* spread than a uniform draw. It is still computed,
  as ``ShuffleReport.spread``, but never judged.)

**Verdict.** Well mixed means a score of at least :data:`GOOD_MIXING`. Small samples
scatter: the report draws :data:`NULL_DRAWS` uniform shuffles of the same batch sizes and
prints the spread of their score ("uniform shuffle ≈ 1 ± 0.15 at this size"). Below
:data:`GOOD_MIXING`, it says *poorly mixed* when batches share labels more often than
those uniform shuffles do by more than :data:`CHANCE_SDS` spreads, and *mixing unproven:
too few samples to tell* otherwise. Neither is a ✔.

What a training step sees is each rank's micro-batch, and the global step (all ranks'
micro-batches of one step together). :func:`step_report` scores both and its verdict is
the worst of them: a rank whose micro-batches come from one shard is poorly mixed even
when the interleaved global order looks uniform. :func:`effective_groups` gives the mean
inverse Simpson index of the labels in each micro-batch ("effective shards per
micro-batch": 1 when every micro-batch comes from one shard, about 5.8 for a uniform draw
of 8 from 16 equal shards).

Everything is computed with numpy on whole epochs at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from talk_helpers.arguments import require_int
from talk_helpers.checks.verdict import verdict_html

__all__ = [
    "GOOD_MIXING", "STALE_ORDER", "MIN_SAME_PAIRS", "MAX_BLOCKS", "NULL_DRAWS", "CHANCE_SDS",
    "ShuffleReport", "StepMixing",
    "shuffle_report", "step_report", "rank_mixing", "batch_mixing", "effective_groups",
    "block_counts",
]

GOOD_MIXING = 0.8      # the verdict asks for at least this mixing score
STALE_ORDER = 0.5      # ... and consecutive epochs less alike than this (|Spearman|, unchanged)
MIN_SAME_PAIRS = 30    # a block count is scored when a uniform shuffle puts this many
                       # same-block pairs in the batches (fewer would be mostly noise)
MAX_BLOCKS = 64        # the finest storage blocks scored: 1/64 of the dataset each
NULL_DRAWS = 32        # uniform shuffles drawn to measure a score's spread at this size
CHANCE_SDS = 4.0       # "poorly mixed" (not "too few samples") beyond this many spreads:
                       # a report makes up to 30 comparisons (block counts × ranks and
                       # steps), and at 3 a uniform shuffle was now and then called poor


# --- reading the arguments ---------------------------------------------------------------


def _as_ids(epoch, where: str) -> np.ndarray:
    if hasattr(epoch, "detach"):  # a torch tensor
        epoch = epoch.detach().cpu().numpy()
    try:
        array = np.asarray(epoch)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{where} is not a sequence of sample ids: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{where} must be a flat sequence of sample ids, "
                         f"got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        if np.issubdtype(array.dtype, np.floating) and np.all(array == np.round(array)):
            array = array.astype(np.int64)
        else:
            raise TypeError(f"{where} must hold integer sample ids, got dtype {array.dtype}")
    return array.astype(np.int64)


def _group_labels(groups, ids: np.ndarray) -> np.ndarray:
    """The group of every sample id in ``ids``, as small integer codes."""
    if isinstance(groups, Mapping):
        missing = [int(i) for i in np.unique(ids) if int(i) not in groups]
        if missing:
            raise ValueError(f"groups has no entry for sample ids {missing[:5]}"
                             f"{' …' if len(missing) > 5 else ''}")
        labels = [groups[int(i)] for i in ids]
    else:
        if hasattr(groups, "detach"):
            groups = groups.detach().cpu().numpy()
        table = np.asarray(groups)
        if table.ndim != 1:
            raise ValueError(f"groups must be one label per sample id, got shape {table.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= len(table)):
            raise ValueError(f"groups has length {len(table)} (one label per sample id) but "
                             f"the batches contain sample ids {int(ids.min())}…"
                             f"{int(ids.max())}; pass a label for every id or a dict")
        labels = table[ids]
    _, codes = np.unique(np.asarray(labels), return_inverse=True)
    return codes.reshape(-1)


class _Labels:
    """Storage ranks and group codes of the distinct ids seen, and lookups into them."""

    def __init__(self, all_ids: np.ndarray, groups=None):
        self.distinct = np.unique(all_ids)
        self.n = len(self.distinct)
        self.group_codes = None if groups is None else _group_labels(groups, self.distinct)

    def rank(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.distinct, ids)

    def codes(self, ids: np.ndarray, blocks: int | None) -> np.ndarray:
        """Group codes (``blocks=None``) or storage-block codes of ``ids``."""
        if blocks is None:
            return self.group_codes[self.rank(ids)]
        return self.rank(ids) * blocks // self.n

    def same_uniform(self, blocks: int | None) -> float:
        """P(two distinct samples share a label) under a uniform draw."""
        codes = (self.group_codes if blocks is None
                 else np.arange(self.n) * blocks // self.n)
        sizes = np.bincount(codes).astype(np.float64)
        return float((sizes * (sizes - 1)).sum() / (self.n * (self.n - 1)))


# --- the scores -------------------------------------------------------------------------


def _pairs(batches: list[np.ndarray]) -> float:
    return float(sum(len(b) * (len(b) - 1) // 2 for b in batches))


def _same_pairs(code_batches: list[np.ndarray]) -> tuple[float, float]:
    """(pairs of samples in one batch sharing a code, all pairs in one batch)."""
    batches = [b for b in code_batches if len(b) >= 2]
    if not batches:
        return 0.0, 0.0
    lengths = np.array([len(b) for b in batches], dtype=np.int64)
    codes = np.concatenate(batches).astype(np.int64)
    top = int(codes.max()) + 1
    key = np.repeat(np.arange(len(batches), dtype=np.int64), lengths) * top + codes
    counts = np.unique(key, return_counts=True)[1].astype(np.float64)
    return float((counts * (counts - 1) / 2).sum()), float((lengths * (lengths - 1) / 2).sum())


def _ratio(same: float, total: float, same_uniform: float) -> float:
    """(effective labels per batch - 1) / (the same for a uniform shuffle - 1)."""
    if total == 0 or same_uniform >= 1.0 or same_uniform <= 0.0:
        return float("nan")
    effective = total / max(same, 0.5)   # no shared pair at all: at most this many
    return float((effective - 1.0) / (1.0 / same_uniform - 1.0))


def block_counts(n_distinct: int, pairs: float) -> tuple[int, ...]:
    """The block counts ``m = 2, 4, 8, …`` scored for ``n_distinct`` ids and ``pairs``
    pairs of samples in one batch: 2 always, more while a uniform shuffle would put at
    least :data:`MIN_SAME_PAIRS` pairs in one block, blocks hold at least 2 ids and
    ``m`` ≤ :data:`MAX_BLOCKS`."""
    if n_distinct < 2:
        return ()
    counts, m = [2], 4
    while m <= min(n_distinct // 2, MAX_BLOCKS) and pairs / m >= MIN_SAME_PAIRS:
        counts.append(m)
        m *= 2
    return tuple(counts)


@dataclass(frozen=True)
class _Measured:
    """A score, its value per block count, and how far chance alone moves it."""

    score: float                   # smallest over the block counts, or the group score
    per_count: dict[int, float]    # block count -> score ({} for groups)
    chance: float                  # spread of a uniform shuffle's score at the worst count
    poor: bool                     # below GOOD_MIXING with more same-label pairs than
                                   # chance explains, at some block count


def _null(key_base: np.ndarray, universe: np.ndarray, rng) -> tuple[float, float]:
    """Mean and spread of same-label pair counts when batches of the same sizes are drawn
    by uniform shuffles of the whole dataset (``universe``: the label of every id)."""
    need = len(key_base)
    copies = -(-need // len(universe))
    draws = []
    for _ in range(NULL_DRAWS):
        codes = np.concatenate([rng.permutation(universe) for _ in range(copies)])[:need]
        counts = np.unique(key_base + codes, return_counts=True)[1]
        draws.append(float((counts * (counts - 1) / 2).sum()))
    return float(np.mean(draws)), float(np.std(draws, ddof=1))


def _measure(labels: _Labels, batches: list[np.ndarray], count: int | None,
             rng) -> tuple[float, float, bool]:
    """(score, spread of a uniform shuffle's score, judged poor) for one labelling."""
    kept = [b for b in batches if len(b) >= 2]
    if not kept:
        return float("nan"), float("nan"), True
    codes = np.concatenate([labels.codes(b, count) for b in kept]).astype(np.int64)
    lengths = np.array([len(b) for b in kept], dtype=np.int64)
    universe = labels.codes(labels.distinct, count).astype(np.int64)
    top = int(universe.max()) + 1
    base = np.repeat(np.arange(len(kept), dtype=np.int64), lengths) * top
    counts = np.unique(base + codes, return_counts=True)[1].astype(np.float64)
    same = float((counts * (counts - 1) / 2).sum())
    total = float((lengths * (lengths - 1) / 2).sum())
    uniform = labels.same_uniform(count)
    score = _ratio(same, total, uniform)
    if not math.isfinite(score):
        return score, float("nan"), True
    mean, spread = _null(base, universe, rng)
    # Spread of the score: the pair-count spread through the score's slope at the mean.
    low, high = _ratio(mean + spread, total, uniform), _ratio(max(mean - spread, 0.5),
                                                             total, uniform)
    chance = abs(high - low) / 2
    # Judged on the pair counts, where chance is close to symmetric.
    poor = score < GOOD_MIXING and same > mean + CHANCE_SDS * spread
    return score, chance, poor


def _score(labels: _Labels, batches: list[np.ndarray],
           counts: tuple[int, ...] | None, judge: bool = True) -> _Measured:
    """The score of ``batches``: group mixing when ``counts`` is None, else the smallest
    storage-block score over ``counts``. ``judge=False`` skips the chance estimate."""
    rng = np.random.default_rng(0)
    if counts is None:
        if not judge:
            same, total = _same_pairs([labels.codes(b, None) for b in batches])
            return _Measured(_ratio(same, total, labels.same_uniform(None)), {},
                             float("nan"), False)
        score, chance, poor = _measure(labels, batches, None, rng)
        return _Measured(score, {}, chance, poor)
    per_count, chances, poor = {}, {}, False
    for m in counts:
        if judge:
            per_count[m], chances[m], poor_here = _measure(labels, batches, m, rng)
            poor = poor or poor_here
        else:
            same, total = _same_pairs([labels.codes(b, m) for b in batches])
            per_count[m] = _ratio(same, total, labels.same_uniform(m))
    finite = {m: s for m, s in per_count.items() if math.isfinite(s)}
    if not finite:
        return _Measured(float("nan"), per_count, float("nan"), True)
    worst = min(finite, key=finite.get)
    return _Measured(finite[worst], per_count, chances.get(worst, float("nan")), poor)


def _effective(labels: _Labels, batches: list[np.ndarray]) -> float:
    """Mean over batches of 1 / sum(p_g^2), p_g the share of label g in the batch."""
    values = []
    for batch in batches:
        if len(batch):
            p = np.bincount(labels.codes(batch, None)) / len(batch)
            values.append(1.0 / float((p * p).sum()))
    return float(np.mean(values)) if values else float("nan")


def _cut(order: np.ndarray, batch_size: int) -> list[np.ndarray]:
    count = len(order) // batch_size
    return list(order[: count * batch_size].reshape(count, batch_size))


def batch_mixing(batches, groups=None) -> float:
    """The mixing score of ``batches`` (a list of id batches, as seen): group mixing
    with ``groups``, else the smallest storage-block score; see the module docstring."""
    batches = _batches(batches, "batches")
    labels = _Labels(np.concatenate(batches) if batches else np.empty(0, np.int64), groups)
    counts = None if groups is not None else block_counts(labels.n, _pairs(batches))
    return _score(labels, batches, counts, judge=False).score


def effective_groups(batches, groups) -> float:
    """Mean inverse Simpson index of ``groups`` labels per batch: how many groups (shards,
    classes) a batch effectively draws from. 1 when each batch holds one group."""
    if groups is None:
        raise ValueError("effective_groups needs groups: a label per sample id")
    batches = _batches(batches, "batches")
    labels = _Labels(np.concatenate(batches) if batches else np.empty(0, np.int64), groups)
    return _effective(labels, batches)


def _batches(batches, name: str) -> list[np.ndarray]:
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__len__"):
        raise TypeError(f"{name} must be a list of batches, each a sequence of sample ids")
    out = [_as_ids(b, f"{name}[{i}]") for i, b in enumerate(batches)]
    return out


# --- legacy: the storage-position spread -------------------------------------------------


def batch_spread(order: np.ndarray, storage_rank: np.ndarray, n_distinct: int,
                 batch_size: int) -> float:
    """sqrt(mean within-batch variance of storage ranks / the same for a uniform shuffle).
    Not judged: two distant blocks in one batch score *higher* than a uniform draw."""
    batches = np.asarray(_cut(storage_rank[order], batch_size), dtype=np.float64)
    if len(batches) == 0 or n_distinct < 2:
        return float("nan")
    observed = batches.var(axis=1, ddof=1).mean()
    # A batch drawn without replacement from ranks 0..N-1 has E[s^2] = N(N+1)/12.
    uniform = n_distinct * (n_distinct + 1) / 12.0
    return float(math.sqrt(observed / uniform))


# --- the report ---------------------------------------------------------------------------


def _worst(scores: list[float]) -> float:
    """The smallest score; NaN (not measurable) when any part could not be scored."""
    scores = [float(s) for s in scores]
    return min(scores) if all(math.isfinite(s) for s in scores) else float("nan")


def _well_mixed(mixing: float, poor: bool | None) -> bool:
    return bool(math.isfinite(mixing) and mixing >= GOOD_MIXING)


def _verdict(mixing: float, poor: bool | None, chance: float | None) -> str:
    """'well mixed (mixing 0.93; uniform shuffle ≈ 1 ± 0.05 at this size, none = 0)'."""
    noise = (f" ± {chance:.2f} at this size" if chance is not None and math.isfinite(chance)
             else "")
    if not math.isfinite(mixing):
        return "mixing not measured: some part has no batch of 2 samples or one label only"
    scale = f"mixing {mixing:.2f}; uniform shuffle ≈ 1{noise}, none = 0"
    if _well_mixed(mixing, poor):
        return f"well mixed ({scale})"
    if poor is False and math.isfinite(mixing):
        return f"mixing unproven: too few samples to tell ({scale})"
    return f"poorly mixed ({scale})"


class _MixingVerdict:
    """What every mixing report shares: the verdict read from ``mixing`` and ``poor``,
    and the plain and HTML reprs built from ``_lines()``."""

    @property
    def well_mixed(self) -> bool:
        """The mixing score is at least GOOD_MIXING."""
        return _well_mixed(self.mixing, self.poor)

    @property
    def too_few_samples(self) -> bool:
        """Below GOOD_MIXING, but by no more than chance explains at this size."""
        return not self.well_mixed and self.poor is False and math.isfinite(self.mixing)

    def __repr__(self) -> str:
        return "\n".join(self._lines())

    def _repr_html_(self) -> str:
        first, *rest = self._lines()
        return verdict_html(first[:1], first[2:], details=rest)


@dataclass(repr=False)  # the report reads as its verdict
class ShuffleReport(_MixingVerdict):
    """What :func:`shuffle_report` or :func:`step_report` measured; ``ok`` is the verdict.

    ``mixing`` is the judged score: the worst of each rank's micro-batches and the global
    step (``step_report``), else group mixing (``groups`` given), else the storage-block
    score. ``blocks`` maps each block count to its score (no ``groups``).
    """

    epochs: int
    samples_per_epoch: int
    batch_size: int
    unchanged: list[float]          # per consecutive pair: fraction of positions unchanged
    spearman: list[float]           # per consecutive pair: rank correlation of the orders
    spread: list[float]             # per epoch: storage-position spread (not judged)
    group_scores: list[float] | None = None  # per epoch: group mixing score (groups given)
    n_groups: int | None = None
    basis: str = field(default="storage blocks")
    block_scores: list[float] | None = None  # per epoch: smallest storage-block score
    blocks: dict[int, float] | None = None   # block count -> score, pooled over epochs
    block_score: float | None = None         # min over blocks: the judged score
    rank_scores: list[float] | None = None   # step_report: per rank, its micro-batches
    step_score: float | None = None          # step_report: the global steps
    rank_effective: list[float] | None = None  # step_report + groups: effective groups
    world_size: int | None = None
    chance: float | None = None   # spread of a uniform shuffle's score at this size
    poor: bool | None = None      # more same-label pairs than chance explains

    @property
    def mixing(self) -> float:
        """The judged mixing score (see the class docstring)."""
        if self.rank_scores is not None:
            return _worst([*self.rank_scores, self.step_score])
        if self.group_scores is not None:
            return float(np.mean(self.group_scores))
        return float(self.block_score)

    @property
    def order_changes(self) -> bool:
        """True when every epoch differs from the previous one (not just a few positions)."""
        return all(u < STALE_ORDER and abs(r) < STALE_ORDER
                   for u, r in zip(self.unchanged, self.spearman, strict=True))

    @property
    def ok(self) -> bool:
        return self.order_changes and self.well_mixed

    def _lines(self) -> list[str]:
        mark = "✔" if self.ok else "✘"
        unchanged = max(self.unchanged)
        rho = max(self.spearman, key=abs)
        if self.order_changes:
            change = "order changes every epoch"
        elif unchanged >= STALE_ORDER:
            change = "order repeats across epochs"
        else:
            change = "epochs keep a similar order"
        head = f"{mark} shuffle: {change} · {_verdict(self.mixing, self.poor, self.chance)}"
        what = "micro-batches" if self.rank_scores is not None else "batches"
        detail = (f"  {self.epochs} epochs × {self.samples_per_epoch} samples · "
                  f"{what} of {self.batch_size} · "
                  f"between epochs: ≤ {unchanged:.0%} positions unchanged, "
                  f"Spearman {rho:+.2f}")
        return [head, detail, *self._basis_lines()]

    def _basis_lines(self) -> list[str]:
        if self.group_scores is not None or (self.rank_scores is not None and self.n_groups):
            basis = f"group mixing over {self.n_groups} groups"
        else:
            shown = ", ".join(f"{m}: {s:.2f}" for m, s in (self.blocks or {}).items())
            basis = f"storage blocks (smallest over block counts {shown})"
        if self.rank_scores is not None:
            ranks = ", ".join(f"{s:.2f}" for s in self.rank_scores)
            line = (f"  {basis}; each rank's micro-batches: {ranks} · "
                    f"global step ({self.world_size} ranks): {self.step_score:.2f}")
            lines = [line]
            if self.rank_effective is not None:
                eff = ", ".join(f"{e:.1f}" for e in self.rank_effective)
                lines.append(f"  effective groups per micro-batch, per rank: {eff}")
            return lines
        scores = self.group_scores if self.group_scores is not None else self.block_scores
        per_epoch = ", ".join(f"{s:.2f}" for s in scores)
        return [f"  {basis}; per epoch: {per_epoch}"]


def _order_stats(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    n = min(len(a), len(b))
    if n < 2:
        return float(np.mean(a[:n] == b[:n])) if n else 1.0, 1.0
    return float(np.mean(a[:n] == b[:n])), _spearman(a[:n], b[:n])


def shuffle_report(epoch_orders, groups=None, batch_size: int | None = None) -> ShuffleReport:
    """Measure whether ``epoch_orders`` (≥ 2 epochs of sample ids, in the order seen)
    change between epochs and how well their batches mix; see the module docstring.

    ``groups``: optional label per sample id — a sequence indexed by id, or a dict
    id -> label. ``batch_size``: the batch the score looks at (default: about sqrt(N)).
    """
    if isinstance(epoch_orders, (str, bytes)) or not hasattr(epoch_orders, "__len__"):
        raise TypeError("epoch_orders must be a sequence of epochs, each a sequence of "
                        "sample ids")
    if hasattr(epoch_orders, "detach") and epoch_orders.ndim == 2:
        epoch_orders = list(epoch_orders)
    if isinstance(epoch_orders, np.ndarray) and epoch_orders.ndim == 2:
        epoch_orders = list(epoch_orders)
    if len(epoch_orders) and np.ndim(epoch_orders[0]) == 0:
        raise ValueError("epoch_orders must be a sequence of epochs (at least 2 epochs to "
                         "compare), each a sequence of sample ids; got one flat sequence")
    if len(epoch_orders) < 2:
        raise ValueError(f"epoch_orders needs at least 2 epochs to compare, got "
                         f"{len(epoch_orders)}")
    orders = [_as_ids(epoch, f"epoch_orders[{k}]") for k, epoch in enumerate(epoch_orders)]
    lengths = sorted({len(order) for order in orders})
    if len(lengths) > 1:
        raise ValueError(f"epoch_orders must all have the same length, got lengths "
                         f"{[len(order) for order in orders]}")
    n = lengths[0]
    if n < 2:
        raise ValueError(f"each epoch in epoch_orders needs at least 2 samples, got {n}")
    batch_size = _check_batch_size(batch_size, n)

    stacked = np.stack(orders)
    labels = _Labels(stacked.reshape(-1), groups)
    unchanged = [float(np.mean(a == b)) for a, b in zip(orders, orders[1:], strict=False)]
    spearman = [_spearman(a, b) for a, b in zip(orders, orders[1:], strict=False)]
    identity = np.arange(labels.n)
    spread = [batch_spread(labels.rank(order), identity, labels.n, batch_size)
              for order in orders]
    per_epoch = [_cut(order, batch_size) for order in orders]
    counts = block_counts(labels.n, _pairs([b for e in per_epoch for b in e]))
    pooled = [b for e in per_epoch for b in e]
    measured = _score(labels, pooled, counts, judge=groups is None)
    block_scores = [_score(labels, batches, counts, judge=False).score for batches in per_epoch]

    group_scores = n_groups = None
    if groups is not None:
        n_groups = int(labels.group_codes.max()) + 1
        group_scores = [_score(labels, batches, None, judge=False).score
                        for batches in per_epoch]
        judged = _score(labels, pooled, None)
    else:
        judged = measured
    return ShuffleReport(epochs=len(orders), samples_per_epoch=n, batch_size=batch_size,
                         unchanged=unchanged, spearman=spearman, spread=spread,
                         group_scores=group_scores, n_groups=n_groups,
                         basis="group mixing" if groups is not None else "storage blocks",
                         block_scores=block_scores, blocks=measured.per_count,
                         block_score=measured.score, chance=judged.chance, poor=judged.poor)


def _check_batch_size(batch_size, n: int) -> int:
    if batch_size is None:
        return max(2, round(math.sqrt(n)))
    require_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) is larger than an epoch ({n} samples)")
    return int(batch_size)


# --- what a training step sees -----------------------------------------------------------


@dataclass(repr=False)
class StepMixing(_MixingVerdict):
    """:func:`rank_mixing` of one epoch: each rank's micro-batches and the global steps."""

    rank_scores: list[float]
    step_score: float
    rank_effective: list[float] | None   # effective groups per micro-batch (groups given)
    world_size: int
    micro_batch: int
    basis: str
    chance: float = float("nan")   # spread of a uniform shuffle's score at this size
    poor: bool = False             # more same-label pairs than chance explains

    @property
    def mixing(self) -> float:
        """The worst of every rank's micro-batches and the global step."""
        return _worst([*self.rank_scores, self.step_score])

    @property
    def ok(self) -> bool:
        return self.well_mixed

    def _lines(self) -> list[str]:
        mark = "✔" if self.ok else "✘"
        ranks = ", ".join(f"{s:.2f}" for s in self.rank_scores)
        lines = [f"{mark} micro-batches: {_verdict(self.mixing, self.poor, self.chance)}",
                 f"  {self.basis}; each rank's micro-batches of {self.micro_batch}: {ranks} · "
                 f"global step ({self.world_size} ranks): {self.step_score:.2f}"]
        if self.rank_effective is not None:
            eff = ", ".join(f"{e:.1f}" for e in self.rank_effective)
            lines.append(f"  effective groups per micro-batch, per rank: {eff}")
        return lines


def _rank_epochs(epochs, name: str) -> list[list[list[np.ndarray]]]:
    """epochs -> ranks -> micro-batches, as int64 arrays; checks the nesting."""
    if isinstance(epochs, (str, bytes)) or not hasattr(epochs, "__len__"):
        raise TypeError(f"{name} must be a list of epochs, each a list of ranks, each a list "
                        "of micro-batches of sample ids")
    out = []
    for e, ranks in enumerate(epochs):
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__len__") or not len(ranks):
            raise ValueError(f"{name}[{e}] must be a non-empty list of ranks, each a list of "
                             "micro-batches")
        out.append([_batches(batches, f"{name}[{e}][{r}]") for r, batches in enumerate(ranks)])
    sizes = {len(ranks) for ranks in out}
    if len(sizes) > 1:
        raise ValueError(f"every epoch of {name} must hold the same number of ranks, got "
                         f"{[len(ranks) for ranks in out]}")
    return out


def _steps(ranks: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Global step k: every rank's k-th micro-batch (the steps all ranks take)."""
    common = min(len(batches) for batches in ranks)
    return [np.concatenate([batches[k] for batches in ranks]) for k in range(common)]


def _score_ranks(labels: _Labels, epochs, groups):
    """(score per rank, score of the global steps, effective groups per rank or None,
    {block count: score} of the worst of these or None)."""
    world = len(epochs[0])
    per_rank = [[b for ranks in epochs for b in ranks[r]] for r in range(world)]
    steps = [s for ranks in epochs for s in _steps(ranks)]
    if groups is None:
        # One set of block counts for all: the fewest pairs any part holds decides.
        pairs = min([_pairs(batches) for batches in per_rank] + [_pairs(steps)])
        counts = block_counts(labels.n, pairs)
    else:
        counts = None
    parts = [_score(labels, batches, counts) for batches in [*per_rank, steps]]
    effective = None if groups is None else [_effective(labels, b) for b in per_rank]
    worst = min(parts, key=lambda part: part.score if math.isfinite(part.score) else -1.0)
    return ([p.score for p in parts[:-1]], parts[-1].score, effective,
            None if groups is not None else worst.per_count,
            worst.chance, any(p.poor for p in parts))


def rank_mixing(rank_batches, groups=None) -> StepMixing:
    """Score one epoch as training sees it. ``rank_batches[r]`` is the list of micro-batches
    (sample ids) rank ``r`` yielded, in order; the global step ``k`` is every rank's ``k``-th
    micro-batch together. Scores each rank's micro-batches, the global steps, and with
    ``groups`` the effective groups per micro-batch (see :func:`effective_groups`)."""
    epochs = _rank_epochs([rank_batches], "rank_batches")
    all_ids = np.concatenate([b for r in epochs[0] for b in r] or [np.empty(0, np.int64)])
    labels = _Labels(all_ids, groups)
    if labels.n < 2:
        raise ValueError("rank_batches must hold at least 2 distinct sample ids")
    rank_scores, step_score, effective, _, chance, poor = _score_ranks(labels, epochs, groups)
    sizes = [len(b) for r in epochs[0] for b in r]
    basis = (f"group mixing over {int(labels.group_codes.max()) + 1} groups"
             if groups is not None else "storage blocks")
    return StepMixing(rank_scores=rank_scores, step_score=step_score,
                      rank_effective=effective, world_size=len(epochs[0]),
                      micro_batch=max(sizes) if sizes else 0, basis=basis,
                      chance=chance, poor=poor)


def step_report(epochs, groups=None) -> ShuffleReport:
    """:func:`shuffle_report` for what training sees. ``epochs[e][r]`` is the list of
    micro-batches (sample ids) rank ``r`` yielded in epoch ``e`` (≥ 2 epochs). Scores each
    rank's micro-batches and the global steps (pooled over epochs); the verdict takes the
    worst. The order must change between epochs on every rank."""
    epochs = _rank_epochs(epochs, "epochs")
    if len(epochs) < 2:
        raise ValueError(f"epochs needs at least 2 epochs to compare, got {len(epochs)}")
    world = len(epochs[0])
    all_ids = np.concatenate([b for ranks in epochs for r in ranks for b in r]
                             or [np.empty(0, np.int64)])
    labels = _Labels(all_ids, groups)
    if labels.n < 2:
        raise ValueError("epochs must hold at least 2 distinct sample ids")
    sequences = [[np.concatenate(r) if r else np.empty(0, np.int64) for r in ranks]
                 for ranks in epochs]
    unchanged, spearman = [], []
    for before, after in zip(sequences, sequences[1:], strict=False):
        stats = [_order_stats(a, b) for a, b in zip(before, after, strict=True)]
        unchanged.append(max(u for u, _ in stats))
        spearman.append(max((r for _, r in stats), key=abs))
    rank_scores, step_score, effective, blocks, chance, poor = _score_ranks(labels, epochs,
                                                                            groups)
    sizes = [len(b) for ranks in epochs for r in ranks for b in r]
    n_groups = None if groups is None else int(labels.group_codes.max()) + 1
    return ShuffleReport(epochs=len(epochs), samples_per_epoch=sum(len(s) for s in sequences[0]),
                         batch_size=max(sizes) if sizes else 0, unchanged=unchanged,
                         spearman=spearman, spread=[], n_groups=n_groups,
                         basis="group mixing" if groups is not None else "storage blocks",
                         blocks=blocks, rank_scores=rank_scores, step_score=step_score,
                         rank_effective=effective, world_size=world, chance=chance,
                         poor=poor)


# --- order statistics ----------------------------------------------------------------------


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), as Spearman needs."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    _, inverse, counts = np.unique(sorted_values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=np.arange(len(values), dtype=np.float64))
    ranks[order] = (sums / counts)[inverse]
    return ranks


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    denominator = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb / denominator) if denominator else 1.0
