"""Is this shuffle any good? A measured answer, with a verdict a uniform shuffle passes.

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
  are.

**Verdict: a test against a uniform shuffle.** For every score it looks at (each block
count; with :func:`step_report`, each rank's micro-batches and the global step) the report
knows how a uniform shuffle of the same epochs, cut into batches of the same sizes, would
scatter the same-label pair count: its exact mean and variance, and a chi-square tail
(:mod:`talk_helpers.checks.uniform_null`). The verdict is

* **poorly mixed** (✘) when some score is below :data:`GOOD_MIXING` *and* its pairs share
  labels more often than a uniform shuffle does with probability :data:`MIXING_ALPHA`,
  divided among all the scores compared (Bonferroni);
* **mixing unproven: too few samples to tell** (⚠, not ✔) when, at these sizes, even a
  loader scoring :data:`POOR_MIXING` would usually pass: a question of sizes alone, never
  of chance, so a size either always or never reads "unproven";
* **well mixed** (✔) otherwise, with the spread of a uniform shuffle's score printed.

The order is judged the same way: **order repeats** when at least :data:`STALE_ORDER` of
the positions hold the same sample in consecutive epochs, **epochs keep a similar order**
when the rank correlation is at least +:data:`STALE_ORDER` and beyond what chance gives
with probability :data:`ORDER_ALPHA` (divided among the sequences compared). A negative
correlation is no similar order and is not judged. Every line of a report is rendered
from these findings, so no two lines disagree.

:func:`step_report` scores each rank's micro-batches and the global step (all ranks'
micro-batches of one step together) and takes the worst: a rank whose micro-batches come
from one shard is poorly mixed even when the global order looks uniform.
:func:`effective_groups` gives the mean inverse Simpson index of the labels in each batch
(1 when every batch comes from one shard).

Everything is computed with numpy on whole epochs at once, in time linear in the samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from talk_helpers.arguments import require_int
from talk_helpers.checks.uniform_null import (
    NONE,
    PairMoments,
    poisson_tail,
    same_pair_moments,
    upper_quantile,
    upper_tail,
)
from talk_helpers.verdicts.render import verdict_html

__all__ = [
    "GOOD_MIXING", "POOR_MIXING", "STALE_ORDER", "MIN_SAME_PAIRS", "MAX_BLOCKS",
    "MIXING_ALPHA", "ORDER_ALPHA",
    "ShuffleReport",
    "shuffle_report", "step_report", "batch_mixing", "effective_groups",
    "block_counts", "OrderAcross", "order_across", "mixing_finding", "score_line", "order_line",
    "spearman", "chunk_windows", "ORDER_TEXT", "ORDER_PROBLEM", "LATER_EPOCHS",
]

GOOD_MIXING = 0.8      # a score below this, beyond chance, is "poorly mixed"
POOR_MIXING = 0.25     # "too few samples" when a loader scoring this would usually pass
STALE_ORDER = 0.5      # order repeats: this share of positions unchanged; similar order:
                       # |Spearman| at least this, beyond chance
MIN_SAME_PAIRS = 30    # a block count is scored when a uniform shuffle puts this many
                       # same-block pairs in the batches (fewer would be mostly noise)
MAX_BLOCKS = 64        # the finest storage blocks scored: 1/64 of the dataset each
MIXING_ALPHA = 0.002   # P(a uniform shuffle is called poorly mixed), all scores together
ORDER_ALPHA = 0.002    # P(a uniform shuffle's epochs are called alike), all pairs together


# --- reading the arguments ---------------------------------------------------------------


def _as_ids(epoch, where: str) -> np.ndarray:
    if isinstance(epoch, np.ndarray) and epoch.ndim == 1 and epoch.dtype.kind in "iu":
        return epoch.astype(np.int64, copy=False)
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
        self._lookup, self._uniform = None, {}
        if all_ids.size and all_ids.min() >= 0 and all_ids.max() < 4 * all_ids.size + 1024:
            present = np.bincount(all_ids) > 0          # linear time for dense ids
            self.distinct = np.flatnonzero(present)
            self._lookup = np.cumsum(present) - 1
        else:
            self.distinct = np.unique(all_ids)
        self.n = len(self.distinct)
        self.group_codes = None if groups is None else _group_labels(groups, self.distinct)
        self.n_groups = None if groups is None else int(self.group_codes.max()) + 1

    def rank(self, ids: np.ndarray) -> np.ndarray:
        if self._lookup is not None:
            return self._lookup[ids]
        return np.searchsorted(self.distinct, ids)

    def codes(self, ranks: np.ndarray, blocks: int | None) -> np.ndarray:
        """Group codes (``blocks=None``) or storage-block codes of storage ``ranks``."""
        if blocks is None:
            return self.group_codes[ranks]
        return ranks * blocks // self.n

    def n_labels(self, blocks: int | None) -> int:
        return self.n_groups if blocks is None else blocks

    def same_uniform(self, blocks: int | None) -> float:
        """P(two distinct samples share a label) under a uniform draw."""
        if blocks not in self._uniform:
            self._uniform[blocks] = self._same_uniform(blocks)
        return self._uniform[blocks]

    def _same_uniform(self, blocks: int | None) -> float:
        codes = (self.group_codes if blocks is None
                 else np.arange(self.n) * blocks // self.n)
        sizes = np.bincount(codes).astype(np.float64)
        return float((sizes * (sizes - 1)).sum() / (self.n * (self.n - 1)))


# --- a view of the batches: one rank's micro-batches, the global steps, or all batches ----


@dataclass(frozen=True)
class _View:
    """Batches of one view, epoch by epoch: the storage ranks of their samples
    (concatenated), the batch each sample is in, and the batch sizes (batches of at least 2
    samples); ``pools[e]``: the storage ranks of every sample of epoch ``e``, what a
    uniform shuffle would cut those batches from (shared by the views of one report)."""

    ranks: list[np.ndarray]
    batch: list[np.ndarray]
    sizes: list[np.ndarray]
    pools: list[np.ndarray]

    @classmethod
    def of(cls, labels: _Labels, epochs: list[list[np.ndarray]],
           pools: list[np.ndarray]) -> _View:
        ranks, batch, sizes = [], [], []
        for batches in epochs:
            kept = [b for b in batches if len(b) >= 2]
            ranks.append(labels.rank(np.concatenate(kept)) if kept
                         else np.empty(0, np.int64))
            sizes.append(np.array([len(b) for b in kept], dtype=np.int64))
            batch.append(np.repeat(np.arange(len(kept), dtype=np.int64), sizes[-1]))
        return cls(ranks, batch, sizes, pools)

    @property
    def pairs(self) -> float:
        return float(sum(int((s * (s - 1) // 2).sum()) for s in self.sizes))


def _same_pairs(codes: np.ndarray, batch: np.ndarray, n_batches: int, n_labels: int) -> int:
    """Pairs of samples in one batch sharing a code (``batch[i]``: the batch of sample i)."""
    if not n_batches:
        return 0
    key = batch * n_labels + codes
    if n_batches * n_labels <= 1 << 24:
        counts = np.bincount(key, minlength=n_batches * n_labels)
    else:
        counts = np.unique(key, return_counts=True)[1]
    counts = counts.astype(np.int64)
    return int((counts * (counts - 1) // 2).sum())


@dataclass(frozen=True)
class _Measured:
    """One view at one labelling: the same-label pairs seen, what a uniform shuffle would
    give, and the score."""

    same: float
    null: PairMoments
    uniform: float        # P(two distinct samples share a label): the score's scale

    @property
    def score(self) -> float:
        return _ratio(self.same, self.null.total, self.uniform)

    @property
    def chance(self) -> float:
        """Spread of a uniform shuffle's score: its pair-count spread through the score."""
        if self.null.variance <= 0:
            return float("nan")
        sd = math.sqrt(self.null.variance)
        high = _ratio(max(self.null.mean - sd, 0.5), self.null.total, self.uniform)
        low = _ratio(self.null.mean + sd, self.null.total, self.uniform)
        return abs(high - low) / 2

    def p_value(self) -> float:
        return upper_tail(self.same, self.null)

    def detectable(self, alpha: float) -> float:
        """The highest score a loader could have and still be caught at level ``alpha``."""
        return _ratio(upper_quantile(alpha, self.null), self.null.total, self.uniform)


def _measure(labels: _Labels, view: _View, blocks: int | None,
             epochs: list[int] | None = None) -> _Measured:
    same, null = 0, NONE
    n_labels = labels.n_labels(blocks)
    for e in (range(len(view.sizes)) if epochs is None else epochs):
        sizes = view.sizes[e]
        if not len(sizes):
            continue
        same += _same_pairs(labels.codes(view.ranks[e], blocks), view.batch[e], len(sizes),
                            n_labels)
        pool = np.bincount(labels.codes(view.pools[e], blocks), minlength=n_labels)
        null = null + same_pair_moments(pool, sizes)
    return _Measured(float(same), null, labels.same_uniform(blocks))


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


# --- the verdict over several views and labellings ---------------------------------------


@dataclass(frozen=True)
class _Judged:
    """Scores per view (worst over its labellings), per labelling for the worst view,
    the spread at the worst score, and the verdict."""

    scores: list[float]              # per view
    per_count: dict[int, float]      # block count -> score, for the worst view ({} groups)
    chance: float
    poor: bool
    unproven: bool

    @property
    def score(self) -> float:
        return _worst(self.scores)


def _judge(labels: _Labels, views: list[_View], counts: tuple) -> _Judged:
    """Every view at every labelling in ``counts`` (block counts, or ``(None,)`` for
    groups), tested against a uniform shuffle with :data:`MIXING_ALPHA` shared among them."""
    table = [{m: _measure(labels, view, m) for m in counts} for view in views]
    finite = [(v, m) for v, row in enumerate(table) for m, r in row.items()
              if math.isfinite(r.score)]
    alpha = MIXING_ALPHA / max(len(finite), 1)
    poor = any(table[v][m].score < GOOD_MIXING and table[v][m].p_value() < alpha
               for v, m in finite)
    unproven = any(max((r.detectable(alpha) for r in row.values()
                        if math.isfinite(r.score)), default=float("nan")) < POOR_MIXING
                   for row in table)
    scores = [min((r.score for r in row.values()), default=float("nan"))
              if all(math.isfinite(r.score) for r in row.values()) and row else float("nan")
              for row in table]
    if not finite or not all(math.isfinite(s) for s in scores):
        return _Judged(scores, {}, float("nan"), True, False)
    worst_view = min(range(len(views)), key=lambda v: scores[v])
    row = table[worst_view]
    worst_count = min(row, key=lambda m: row[m].score)
    per_count = {} if counts == (None,) else {m: r.score for m, r in row.items()}
    return _Judged(scores, per_count, row[worst_count].chance, poor, unproven and not poor)


def _scores_only(labels: _Labels, view: _View, counts: tuple,
                 epochs: list[int] | None = None) -> float:
    """The worst score of ``view`` over ``counts``, without a verdict."""
    scores = [_measure(labels, view, m, epochs).score for m in counts]
    return min(scores) if scores and all(math.isfinite(s) for s in scores) else float("nan")


# --- the order across epochs ---------------------------------------------------------------


@dataclass(frozen=True)
class _PairStats:
    """Two consecutive epochs' sequences (of one rank, or of everything) compared."""

    n: int               # positions compared
    same: int            # positions holding the same sample
    rho: float           # Spearman rank correlation
    expected: float      # positions two unrelated orders of these samples would share
    batches: int         # batches the positions form: the correlation's sample size

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray, batch_size: int) -> _PairStats:
        n = min(len(a), len(b))
        a, b = a[:n], b[:n]
        same = int(np.sum(a == b))
        batches = -(-n // max(batch_size, 1))
        if n < 2:
            return cls(n, same, 1.0, 1.0, batches)
        both = np.concatenate([a, b])
        counts = _value_counts(both)
        shares = counts / len(both)
        return cls(n, same, _spearman(a, b), max(1.0, n * float((shares * shares).sum())),
                   batches)


@dataclass(frozen=True)
class OrderAcross:
    """How each rank's order compares across consecutive epochs: ``finding`` (None, the
    order changes; "repeats"; "similar"), and per pair of epochs the largest share of
    positions that keep their sample and the largest rank correlation, with the rank
    that shows it."""

    finding: str | None
    unchanged: list[float]
    unchanged_rank: list[int]
    spearman: list[float]
    spearman_rank: list[int]


def chunk_windows(sequences, chunk: int) -> list:
    """A chunk-level shuffle's epochs as :func:`step_report` reads them.
    ``sequences[e][r]``: the storage positions rank ``r`` read in epoch ``e``. Each rank's
    chunks (``position // chunk``) in the order it first reads them, cut into windows of
    about the square root of the fewest chunks a rank reads (at least 2)."""
    require_int("chunk", chunk, minimum=1)
    orders = []
    for ranks in sequences:
        per_rank = []
        for positions in ranks:
            chunks = np.asarray(positions, dtype=np.int64) // chunk
            _, first = np.unique(chunks, return_index=True)
            per_rank.append(chunks[np.sort(first)])
        orders.append(per_rank)
    shortest = min(len(s) for ranks in orders for s in ranks)
    window = max(2, round(math.sqrt(max(shortest, 1))))
    return [[[s[i:i + window] for i in range(0, len(s), window)] for s in ranks]
            for ranks in orders]


def order_across(sequences, batch_size: int | None = None) -> OrderAcross:
    """``sequences[e][r]``: the ids rank ``r`` read in epoch ``e``, in order (≥ 2 epochs),
    in batches of ``batch_size`` (default: about the square root of a rank's samples).
    Any integer ids will do (hashes too): only positions and rank correlations are used."""
    unchanged, unchanged_rank, spearman, spearman_rank, pairs = [], [], [], [], []
    for before, after in zip(sequences, sequences[1:], strict=False):
        stats = [_PairStats.of(np.asarray(a, np.int64), np.asarray(b, np.int64),
                               batch_size or max(1, round(math.sqrt(max(len(a), 1)))))
                 for a, b in zip(before, after, strict=True)]
        shares = [p.same / p.n if p.n else 1.0 for p in stats]
        unchanged_rank.append(int(np.argmax(shares)))
        unchanged.append(max(shares))
        rhos = [p.rho for p in stats]
        spearman_rank.append(int(np.argmax(rhos)))
        spearman.append(rhos[spearman_rank[-1]])
        pairs.extend(stats)
    return OrderAcross(_order_finding(pairs), unchanged, unchanged_rank, spearman,
                       spearman_rank)


def _order_finding(pairs: list[_PairStats]) -> str | None:
    """"repeats", "similar" or None: repeats when at least STALE_ORDER of the positions
    hold the same sample (beyond chance), similar when Spearman ≥ +STALE_ORDER beyond
    chance (a negative correlation keeps no order alike); ORDER_ALPHA is shared among the
    pairs compared. The correlation's chance is taken at one position per batch: a poorly
    mixed batch holds neighbours, whose positions move together, so counting every sample
    would find order where there is only poor mixing."""
    alpha = ORDER_ALPHA / max(len(pairs), 1)
    z_crit = NormalDist().inv_cdf(1 - alpha / 2)
    if any(p.n >= 2 and p.same >= STALE_ORDER * p.n and poisson_tail(p.same, p.expected) < alpha
           for p in pairs):
        return "repeats"
    if any(p.batches >= 3 and p.rho >= STALE_ORDER
           and p.rho * math.sqrt(p.batches - 1) >= z_crit for p in pairs):
        return "similar"
    return None


# --- the scores of batches, without a verdict ----------------------------------------------


def _effective(labels: _Labels, batches: list[np.ndarray]) -> float:
    """Mean over batches of 1 / sum(p_g^2), p_g the share of label g in the batch."""
    values = []
    for batch in batches:
        if len(batch):
            p = np.bincount(labels.codes(labels.rank(batch), None)) / len(batch)
            values.append(1.0 / float((p * p).sum()))
    return float(np.mean(values)) if values else float("nan")


def _cut(order: np.ndarray, batch_size: int) -> list[np.ndarray]:
    count = len(order) // batch_size
    return list(order[: count * batch_size].reshape(count, batch_size))


def batch_mixing(batches, groups=None) -> float:
    """The mixing score of ``batches`` (a list of id batches, as seen): group mixing
    with ``groups``, else the smallest storage-block score; see the module docstring."""
    batches = _batches(batches, "batches")
    all_ids = np.concatenate(batches) if batches else np.empty(0, np.int64)
    labels = _Labels(all_ids, groups)
    view = _View.of(labels, [batches], [labels.rank(all_ids)])
    counts = (None,) if groups is not None else block_counts(labels.n, view.pairs)
    return _scores_only(labels, view, counts)


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
    return [_as_ids(b, f"{name}[{i}]") for i, b in enumerate(batches)]


# --- the report ---------------------------------------------------------------------------


def _worst(scores: list[float]) -> float:
    """The smallest score; NaN (not measurable) when any part could not be scored."""
    scores = [float(s) for s in scores]
    return min(scores) if scores and all(math.isfinite(s) for s in scores) else float("nan")


def mixing_finding(mixing: float, poor: bool, unproven: bool, chance: float | None) -> str:
    """The finding, in words a back row reads: "poorly mixed", "well mixed", …"""
    if not math.isfinite(mixing):
        return "mixing not measured"
    if poor:
        return "poorly mixed"
    if unproven:
        return "mixing unproven: too few samples to tell"
    if above_uniform(mixing, chance):
        return "well mixed, more evenly than chance"
    return "well mixed"


def above_uniform(mixing: float, chance: float | None) -> bool:
    """A score above the band a uniform shuffle scatters in (1 ± 2 × its spread)."""
    return bool(math.isfinite(mixing) and chance is not None and math.isfinite(chance)
                and mixing > 1 + 2 * chance)


def score_line(mixing: float, chance: float | None) -> str:
    """'mixing score 0.44 (a uniform shuffle scores about 1 ± 0.11 at this size; no shuffle
    scores 0)', and what a score above that band means."""
    if not math.isfinite(mixing):
        return "no score: some part has no batch of 2 samples, or one label only"
    band = (f"about 1 ± {chance:.2f} at this size" if chance is not None
            and math.isfinite(chance) else "about 1")
    text = f"mixing score {mixing:.2f} (a uniform shuffle scores {band}; no shuffle scores 0)"
    if above_uniform(mixing, chance):
        text += "; above that band: batches more balanced than a uniform shuffle makes them"
    return text


ORDER_TEXT = {None: "order changes every epoch", "repeats": "order repeats across epochs",
               "similar": "epochs keep a similar order"}
ORDER_PROBLEM = {None: None, "repeats": "order repeats",
                  "similar": "similar order across epochs"}
LATER_EPOCHS = {"repeats": "later epochs repeat its order",
                "similar": "later epochs keep a similar order"}


def order_line(unchanged: float, rho: float) -> str:
    """The order's statistics in words: positions kept, and the rank correlation."""
    return (f"between epochs: up to {unchanged:.0%} of positions keep their sample; order "
            f"correlation (Spearman) {rho:+.2f} (unrelated orders score about 0, the same "
            "order 1)")


@dataclass(repr=False)  # the report reads as its verdict
class ShuffleReport:
    """What :func:`shuffle_report` or :func:`step_report` measured; ``ok`` is the verdict.

    ``mixing`` is the judged score, pooled over the epochs judged: the worst of each
    rank's micro-batches and the global step (``step_report``), else group mixing
    (``groups`` given), else the storage-block score. ``blocks`` maps each block count to
    its score. ``order_finding``: None (the order changes), "repeats" or "similar"; every
    line of the report is rendered from it and from these numbers alone.
    """

    epochs: int
    samples_per_epoch: int
    batch_size: int
    unchanged: list[float]          # per consecutive pair: fraction of positions unchanged
    spearman: list[float]           # per consecutive pair: rank correlation of the orders
    n_groups: int | None = None
    basis: str = field(default="storage blocks")
    blocks: dict[int, float] | None = None   # block count -> score, pooled over epochs
    score: float | None = None               # shuffle_report: the judged score
    rank_scores: list[float] | None = None   # step_report: per rank, its micro-batches
    step_score: float | None = None          # step_report: the global steps
    rank_effective: list[float] | None = None  # step_report + groups: effective groups
    world_size: int | None = None
    chance: float | None = None   # spread of a uniform shuffle's score at this size
    poor: bool = False            # below GOOD_MIXING and beyond chance
    unproven: bool = False        # too few samples: a poor loader would pass too
    order_finding: str | None = None
    held_back: bool = False       # the findings held back until an exercise is answered

    @property
    def mixing(self) -> float:
        """The judged mixing score (see the class docstring)."""
        if self.rank_scores is not None:
            return _worst([*self.rank_scores, self.step_score])
        return float(self.score)

    @property
    def order_changes(self) -> bool:
        """True when no epoch repeats the previous one's order or keeps a similar one
        (beyond what chance gives a uniform shuffle)."""
        return self.order_finding is None

    @property
    def order_repeats(self) -> bool:
        """Consecutive epochs hold the same sample at most positions."""
        return self.order_finding == "repeats"

    @property
    def order_problem(self) -> str | None:
        """A headline's words for the order: "order repeats", "similar order across
        epochs", or None when it changes."""
        return ORDER_PROBLEM[self.order_finding]

    @property
    def ok(self) -> bool:
        return self.order_changes and self.well_mixed

    @property
    def well_mixed(self) -> bool:
        """Measured, not worse than a uniform shuffle beyond chance, at a size that would
        have caught a poor one."""
        return bool(math.isfinite(self.mixing) and not self.poor and not self.unproven)

    @property
    def too_few_samples(self) -> bool:
        """Not poorly mixed, but at these sizes a poorly mixed loader would pass too."""
        return bool(math.isfinite(self.mixing) and not self.poor and self.unproven)

    def _mixing_text(self) -> str:
        return mixing_finding(self.mixing, self.poor, self.unproven, self.chance)

    def __repr__(self) -> str:
        return "\n".join(self._lines())

    @property
    def headline(self) -> str:
        """The first line: the mark and the finding."""
        return self._lines()[0]

    def _repr_html_(self) -> str:
        first, *rest = self._lines()
        number = f"mixing score {self.mixing:.2f}" if math.isfinite(self.mixing) else ""
        return verdict_html(first[:1], " · ".join(filter(None, [first[2:], number])),
                            statistics=rest)

    def _lines(self) -> list[str]:
        mark = "✔" if self.ok else "✘"
        order, mixing = ORDER_TEXT[self.order_finding], self._mixing_text()
        if self.ok:
            head = f"{mark} {order} · {mixing}"
        else:
            found = [order] if self.order_finding is not None else []
            found += [] if self.well_mixed else [mixing]
            head = f"{mark} " + " · ".join(found)
        what = "micro-batches" if self.rank_scores is not None else "batches"
        alone = ([f"  mixing judged on epoch 0 alone: {LATER_EPOCHS[self.order_finding]}, so they "
                  "are no new draws"] if self.order_finding is not None else [])
        if self.held_back:
            head, alone = "· findings held back until you answer: the statistics alone", []
        return [head, f"  {score_line(self.mixing, self.chance)}", *alone,
                f"  {order_line(max(self.unchanged), max(self.spearman))}",
                f"  {self.epochs} epochs × {self.samples_per_epoch} samples in {what} of "
                f"{self.batch_size}", *self._basis_lines()]

    def _basis_lines(self) -> list[str]:
        if self.n_groups:
            basis = (f"scored on your {self.n_groups} groups: how many groups a batch holds, "
                     "against a uniform shuffle")
        else:
            shown = ", ".join(f"{m} blocks {s:.2f}" for m, s in (self.blocks or {}).items())
            basis = ("scored on storage blocks: the ids cut into runs of neighbours in "
                     f"storage order, the lowest score counts ({shown})")
        if self.rank_scores is None:
            return [f"  {basis}"]
        ranks = ", ".join(f"{s:.2f}" if math.isfinite(s) else "no score"
                          for s in self.rank_scores)
        lines = [f"  {basis}",
                 f"  each rank's micro-batches score {ranks}; all ranks' micro-batches of "
                 f"one step together ({self.world_size} rank{'s' * (self.world_size > 1)}) "
                 f"{self.step_score:.2f}"]
        if self.rank_effective is not None:
            eff = ", ".join(f"{e:.1f}" for e in self.rank_effective)
            lines.append(f"  groups a micro-batch effectively holds, per rank: {eff}")
        return lines


def shuffle_report(epoch_orders, groups=None, batch_size: int | None = None, *,
                   hold_back: bool = False) -> ShuffleReport:
    """Measure whether ``epoch_orders`` (≥ 2 epochs of sample ids, in the order seen)
    change between epochs and how well their batches mix; see the module docstring.

    ``groups``: optional label per sample id — a sequence indexed by id, or a dict
    id -> label. ``batch_size``: the batch the score looks at (default: about sqrt(N)).
    ``hold_back``: show the statistics alone, the findings held back (for an exercise
    that asks for them; its grader shows them once answered).
    """
    if not isinstance(hold_back, bool):
        raise TypeError(f"hold_back must be True or False, got {hold_back!r}")
    if isinstance(epoch_orders, (str, bytes)) or not hasattr(epoch_orders, "__len__"):
        raise TypeError("epoch_orders must be a sequence of epochs, each a sequence of "
                        "sample ids")
    if getattr(epoch_orders, "ndim", None) == 2:   # a numpy array or a torch tensor
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

    labels = _Labels(np.concatenate(orders), groups)
    pairs = [_PairStats.of(a, b, batch_size) for a, b in zip(orders, orders[1:], strict=False)]
    unchanged = [p.same / p.n for p in pairs]
    spearman = [p.rho for p in pairs]
    finding = _order_finding(pairs)
    # Epochs that follow the first one's order are not new draws: pooled, they would make a
    # uniform shuffle look worse than chance allows. Mixing is then judged on epoch 0 alone.
    judged_orders = orders if finding is None else orders[:1]
    view = _View.of(labels, [_cut(order, batch_size) for order in judged_orders],
                    [labels.rank(order) for order in judged_orders])
    counts = block_counts(labels.n, view.pairs)
    judged = _judge(labels, [view], counts if groups is None else (None,))
    per_count = (judged.per_count if groups is None
                 else {m: _measure(labels, view, m).score for m in counts})
    return ShuffleReport(epochs=len(orders), samples_per_epoch=n, batch_size=batch_size,
                         unchanged=unchanged, spearman=spearman, n_groups=labels.n_groups,
                         basis="group mixing" if groups is not None else "storage blocks",
                         blocks=per_count, score=judged.score, chance=judged.chance,
                         poor=judged.poor, unproven=judged.unproven, order_finding=finding,
                         held_back=hold_back)


def _check_batch_size(batch_size, n: int) -> int:
    if batch_size is None:
        return max(2, round(math.sqrt(n)))
    require_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) is larger than an epoch ({n} samples)")
    return int(batch_size)


# --- what a training step sees -----------------------------------------------------------


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
    the verdict over all of them)."""
    world = len(epochs[0])
    pools = [labels.rank(np.concatenate([b for r in ranks for b in r]
                                        or [np.empty(0, np.int64)])) for ranks in epochs]
    views = [_View.of(labels, [ranks[r] for ranks in epochs], pools) for r in range(world)]
    views.append(_View.of(labels, [_steps(ranks) for ranks in epochs], pools))
    if groups is None:
        # One set of block counts for all: the fewest pairs any view holds decides.
        counts = block_counts(labels.n, min(view.pairs for view in views))
    else:
        counts = (None,)
    judged = _judge(labels, views, counts)
    effective = (None if groups is None else
                 [_effective(labels, [b for ranks in epochs for b in ranks[r]])
                  for r in range(world)])
    return judged.scores[:-1], judged.scores[-1], effective, judged


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
    micro_batch = max((len(b) for ranks in epochs for r in ranks for b in r), default=1)
    unchanged, spearman, pairs = [], [], []
    for before, after in zip(sequences, sequences[1:], strict=False):
        stats = [_PairStats.of(a, b, micro_batch) for a, b in zip(before, after, strict=True)]
        unchanged.append(max(p.same / p.n if p.n else 1.0 for p in stats))
        spearman.append(max(p.rho for p in stats))
        pairs.extend(stats)
    finding = _order_finding(pairs)
    # epochs that follow the first one's order are no new draws (see shuffle_report)
    judged_epochs = epochs if finding is None else epochs[:1]
    rank_scores, step_score, effective, judged = _score_ranks(labels, judged_epochs, groups)
    sizes = [len(b) for ranks in epochs for r in ranks for b in r]
    return ShuffleReport(epochs=len(epochs), samples_per_epoch=sum(len(s) for s in sequences[0]),
                         batch_size=max(sizes) if sizes else 0, unchanged=unchanged,
                         spearman=spearman, n_groups=labels.n_groups,
                         basis="group mixing" if groups is not None else "storage blocks",
                         blocks=judged.per_count if groups is None else None,
                         rank_scores=rank_scores, step_score=step_score,
                         rank_effective=effective, world_size=world, chance=judged.chance,
                         poor=judged.poor, unproven=judged.unproven,
                         order_finding=finding)


# --- order statistics ----------------------------------------------------------------------


def _value_counts(values: np.ndarray) -> np.ndarray:
    """How often each distinct value occurs (in value order); linear time for dense ids."""
    low = int(values.min())
    if int(values.max()) - low < 4 * len(values) + 1024:
        counts = np.bincount(values - low)
        return counts[counts > 0]
    return np.unique(values, return_counts=True)[1]


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), as Spearman needs; linear
    time for dense ids."""
    low = int(values.min())
    if int(values.max()) - low < 4 * len(values) + 1024:
        counts = np.bincount(values - low).astype(np.float64)
        below = np.cumsum(counts) - counts
        return (below + (counts + 1) / 2 - 1)[values - low]
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    _, inverse, counts = np.unique(sorted_values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=np.arange(len(values), dtype=np.float64))
    ranks[order] = (sums / counts)[inverse]
    return ranks


def spearman(a, b) -> float:
    """The Spearman rank correlation of two equal-length sequences of numbers."""
    return _spearman(np.asarray(a), np.asarray(b))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    denominator = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb / denominator) if denominator else 1.0
