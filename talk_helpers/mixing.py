"""Is this shuffle any good? A measured answer, plus the buffer shuffles libraries use.

:func:`shuffle_report` looks at the order in which samples came out in two or more epochs
and answers two questions:

1. **Does the order change between epochs?** For each pair of consecutive epochs: the
   fraction of positions holding the same sample, and the Spearman rank correlation of
   the two sequences (1 = same order, about 0 = unrelated orders).
2. **How well are the samples mixed?** A score on a fixed scale: 0 for no mixing (the
   storage order), about 1 for a uniform random permutation.

   * Without ``groups`` the score is the *batch spread*. Sample ids are taken to number
     the samples in storage order (id 0 first on disk). Cut each epoch into batches of
     ``batch_size`` consecutive samples and measure how far apart in storage the samples
     of a batch are (the variance of their storage ranks), relative to what a uniform
     shuffle gives. The square root of that ratio reads as "the fraction of the dataset
     a batch is drawn from": 1 for a uniform shuffle, ``1/W`` when each batch comes from
     one of ``W`` equal contiguous shards, about ``batch_size/N`` for no shuffle at all.
   * With ``groups`` (a label per sample id, e.g. its class or shard) the score is the
     *group mixing*: the effective number of groups in a batch (inverse Simpson index,
     ``1 / P(two samples of a batch share a group)``) minus 1, relative to the same number
     for a uniform shuffle. 0 when every batch holds one group; about 1 for a uniform
     shuffle; above 1 only for batches more balanced than chance (stratified batches).

Everything is computed with numpy on whole epochs at once.
"""

from __future__ import annotations

import html
import math
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

GOOD_MIXING = 0.8      # the verdict asks for at least this mixing score
STALE_ORDER = 0.5      # ... and consecutive epochs less alike than this (|Spearman|, unchanged)


def _as_ids(epoch, index: int) -> np.ndarray:
    if hasattr(epoch, "detach"):  # a torch tensor
        epoch = epoch.detach().cpu().numpy()
    try:
        array = np.asarray(epoch)
    except (TypeError, ValueError) as error:
        raise TypeError(f"epoch_orders[{index}] is not a sequence of sample ids: {error}") \
            from None
    if array.ndim != 1:
        raise ValueError(f"epoch_orders[{index}] must be a flat sequence of sample ids, "
                         f"got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        if np.issubdtype(array.dtype, np.floating) and np.all(array == np.round(array)):
            array = array.astype(np.int64)
        else:
            raise TypeError(f"epoch_orders[{index}] must hold integer sample ids, "
                            f"got dtype {array.dtype}")
    return array.astype(np.int64)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), as Spearman needs."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(len(values), dtype=np.float64)
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
                             f"epoch_orders contain sample ids {int(ids.min())}…"
                             f"{int(ids.max())}; pass a label for every id or a dict")
        labels = table[ids]
    _, codes = np.unique(np.asarray(labels), return_inverse=True)
    return codes.reshape(-1)


def _full_batches(values: np.ndarray, batch_size: int) -> np.ndarray:
    count = len(values) // batch_size
    return values[: count * batch_size].reshape(count, batch_size)


def batch_spread(order: np.ndarray, storage_rank: np.ndarray, n_distinct: int,
                 batch_size: int) -> float:
    """sqrt(mean within-batch variance of storage ranks / the same for a uniform shuffle)."""
    batches = _full_batches(storage_rank[order], batch_size).astype(np.float64)
    if len(batches) == 0 or n_distinct < 2:
        return float("nan")
    observed = batches.var(axis=1, ddof=1).mean()
    # A batch drawn without replacement from ranks 0..N-1 has E[s^2] = N(N+1)/12.
    uniform = n_distinct * (n_distinct + 1) / 12.0
    return float(math.sqrt(observed / uniform))


def group_mixing(codes_in_order: np.ndarray, batch_size: int, codes_all: np.ndarray) -> float:
    """(effective groups per batch - 1) / (the same for a uniform shuffle - 1)."""
    batches = _full_batches(codes_in_order, batch_size)
    n_groups = int(codes_all.max()) + 1 if codes_all.size else 0
    if len(batches) == 0 or n_groups < 2 or batch_size < 2:
        return float("nan")
    flat = (np.arange(len(batches))[:, None] * n_groups + batches).reshape(-1)
    counts = np.bincount(flat, minlength=len(batches) * n_groups).reshape(len(batches), -1)
    same_observed = (counts * (counts - 1)).sum() / (len(batches) * batch_size * (batch_size - 1))
    sizes = np.bincount(codes_all, minlength=n_groups).astype(np.float64)
    n = sizes.sum()
    same_uniform = float((sizes * (sizes - 1)).sum() / (n * (n - 1)))
    if same_uniform >= 1.0:
        return float("nan")
    effective = 1.0 / same_observed if same_observed > 0 else float(batch_size)
    return float((effective - 1.0) / (1.0 / same_uniform - 1.0))


@dataclass
class ShuffleReport:
    """What :func:`shuffle_report` measured; ``ok`` is the verdict."""

    epochs: int
    samples_per_epoch: int
    batch_size: int
    unchanged: list[float]          # per consecutive pair: fraction of positions unchanged
    spearman: list[float]           # per consecutive pair: rank correlation of the orders
    spread: list[float]             # per epoch: batch spread score
    group_scores: list[float] | None = None  # per epoch: group mixing score (groups given)
    n_groups: int | None = None
    basis: str = field(default="batch spread")

    @property
    def mixing(self) -> float:
        """The headline mixing score: group mixing when groups were given, else spread."""
        scores = self.group_scores if self.group_scores is not None else self.spread
        return float(np.mean(scores))

    @property
    def order_changes(self) -> bool:
        """True when every epoch differs from the previous one (not just a few positions)."""
        return all(u < STALE_ORDER and abs(r) < STALE_ORDER
                   for u, r in zip(self.unchanged, self.spearman, strict=True))

    @property
    def well_mixed(self) -> bool:
        return bool(self.mixing >= GOOD_MIXING)

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
        mixing = "well mixed" if self.well_mixed else "poorly mixed"
        head = (f"{mark} shuffle: {change} · {mixing} "
                f"(mixing {self.mixing:.2f}; 1 ≈ uniform shuffle, 0 = none)")
        detail = (f"  {self.epochs} epochs × {self.samples_per_epoch} samples · "
                  f"batches of {self.batch_size} · "
                  f"between epochs: ≤ {unchanged:.0%} positions unchanged, "
                  f"Spearman {rho:+.2f}")
        scores = self.group_scores if self.group_scores is not None else self.spread
        basis = (f"group mixing over {self.n_groups} groups" if self.group_scores is not None
                 else "batch spread (fraction of the dataset a batch is drawn from)")
        per_epoch = ", ".join(f"{s:.2f}" for s in scores)
        return [head, detail, f"  {basis}; per epoch: {per_epoch}"]

    def __repr__(self) -> str:
        return "\n".join(self._lines())

    def _repr_html_(self) -> str:
        lines = [html.escape(line.strip()) for line in self._lines()]
        colour = "#009E73" if self.ok else "#D55E00"
        return (f'<div style="font-family: monospace"><b style="color: {colour}">{lines[0]}</b>'
                f"<br>{lines[1]}<br>{lines[2]}</div>")


def shuffle_report(epoch_orders, groups=None, batch_size: int | None = None) -> ShuffleReport:
    """Measure whether ``epoch_orders`` (≥ 2 epochs of sample ids, in the order seen)
    change between epochs and how well they mix; see the module docstring for the scale.

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
    orders = [_as_ids(epoch, k) for k, epoch in enumerate(epoch_orders)]
    lengths = sorted({len(order) for order in orders})
    if len(lengths) > 1:
        raise ValueError(f"epoch_orders must all have the same length, got lengths "
                         f"{[len(order) for order in orders]}")
    n = lengths[0]
    if n < 2:
        raise ValueError(f"each epoch in epoch_orders needs at least 2 samples, got {n}")
    if batch_size is None:
        batch_size = max(2, round(math.sqrt(n)))
    elif isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"batch_size must be an int, got {batch_size!r}")
    elif batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    elif batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) is larger than an epoch ({n} samples)")
    batch_size = int(batch_size)

    stacked = np.stack(orders)
    distinct = np.unique(stacked)
    storage_rank = np.searchsorted(distinct, stacked)          # rank of each id in storage
    unchanged = [float(np.mean(a == b)) for a, b in zip(orders, orders[1:], strict=False)]
    spearman = [_spearman(a, b) for a, b in zip(orders, orders[1:], strict=False)]
    identity = np.arange(len(distinct))
    spread = [batch_spread(ranks, identity, len(distinct), batch_size)
              for ranks in storage_rank]

    group_scores = n_groups = None
    if groups is not None:
        codes = _group_labels(groups, stacked.reshape(-1)).reshape(stacked.shape)
        codes_all = _group_labels(groups, distinct)
        n_groups = int(codes_all.max()) + 1
        # Both label sets are the labels of the same distinct ids, so the codes agree.
        group_scores = [group_mixing(row, batch_size, codes_all) for row in codes]
    return ShuffleReport(epochs=len(orders), samples_per_epoch=n, batch_size=batch_size,
                         unchanged=unchanged, spearman=spearman, spread=spread,
                         group_scores=group_scores, n_groups=n_groups,
                         basis="group mixing" if groups is not None else "batch spread")


# --- the shuffles libraries use ---------------------------------------------------------


def buffer_shuffle(items: Iterable, buffer_size: int, rng: random.Random) -> Iterator:
    """Shuffle a stream through a buffer, as HF datasets and WebDataset do.

    Fill a buffer of ``buffer_size`` items; then for every new item pick a random slot,
    yield what is there and put the new item in its place; at the end, yield the rest in
    random order. An item can move forward by at most ``buffer_size - 1`` places, so a
    small buffer over sorted data stays nearly sorted.
    """
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be at least 1, got {buffer_size}")
    buffer: list = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        slot = rng.randrange(buffer_size)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


def unbatch_shuffle_rebatch(batches: Iterable, buffer_size: int, batch_size: int,
                            rng: random.Random, drop_last: bool = False) -> Iterator[list]:
    """The WebDataset pattern ``loader.unbatched().shuffle(n).batched(b)``: take the
    batches workers made, split them into samples, buffer-shuffle those in the main
    process and batch again, so one batch can hold samples of every worker."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")

    def samples():
        for batch in batches:
            if hasattr(batch, "tolist"):
                batch = batch.tolist()
            yield from batch

    batch: list = []
    for sample in buffer_shuffle(samples(), buffer_size, rng):
        batch.append(sample)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch
