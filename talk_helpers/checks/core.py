"""Checks that every sample is seen exactly once, that ranks stay in step and that
workers, ranks and epochs do not draw the same random values.

Each check returns a small report: ``.ok`` for a self-check, a one-line ``repr`` for a
talk audience and ``_repr_html_`` for a notebook cell. The checks are vectorised with
numpy, so ten million ids take a fraction of a second.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

__all__ = [
    "BatchCountReport",
    "BatchSizeReport",
    "DrawReport",
    "ExactlyOnceReport",
    "check_batch_counts",
    "check_batch_sizes",
    "check_exactly_once",
    "check_random_draws",
    "ids_of",
]

OK_COLOUR = "#009E73"  # Okabe-Ito bluish green
BAD_COLOUR = "#D55E00"  # Okabe-Ito vermillion
OK_MARK, BAD_MARK = "✔", "✘"


def ids_of(samples) -> np.ndarray:
    """Flatten sample ids into one int64 array.

    ``samples`` may be an int, an integer tensor or numpy array of any shape, a dict with
    an ``"id"`` key, or a (nested) list/tuple of these, e.g. the batches a loader yielded.
    """
    return _ids(samples, "samples")


def check_exactly_once(samples, expected) -> ExactlyOnceReport:
    """Check that ``samples`` holds every expected id exactly once and nothing else.

    ``expected`` is an int N (ids 0..N-1), a range, or a sequence/array/tensor of unique ids.
    """
    ids = ids_of(samples)
    n_expected, expected_ids = _expected_ids(expected)
    if n_expected == 0 and ids.size:
        raise ValueError(
            f"expected is empty but samples holds {ids.size} id(s); "
            "pass the ids you expect (an int N means ids 0..N-1)"
        )
    top = max(int(ids.max(initial=-1)), n_expected - 1)
    if expected_ids is not None:
        top = max(top, int(expected_ids[-1]))
    if top + 1 <= 4 * (ids.size + n_expected) + 1024:
        parts = _dense_check(ids, n_expected, expected_ids, top + 1)
    else:
        parts = _sparse_check(ids, n_expected, expected_ids)
    return ExactlyOnceReport(expected_count=n_expected, seen_count=int(ids.size), **parts)


def check_batch_counts(counts) -> BatchCountReport:
    """Check that every rank got the same number of batches.

    ``counts`` is a sequence indexed by rank or a dict rank -> number of batches. With
    unequal counts DDP blocks at the first step a rank no longer takes part in.
    """
    if isinstance(counts, Mapping):
        if sorted(counts) != list(range(len(counts))):
            raise ValueError(
                f"counts keys must be the ranks 0..{len(counts) - 1}, got {sorted(counts)!r}"
            )
        counts = [counts[rank] for rank in range(len(counts))]
    elif isinstance(counts, torch.Tensor | np.ndarray):
        counts = counts.tolist()
    if not isinstance(counts, list | tuple):
        raise TypeError(
            f"counts must be a sequence indexed by rank or a dict rank -> count, "
            f"got {type(counts).__name__}"
        )
    if not counts:
        raise ValueError("counts is empty: give one batch count per rank")
    for rank, count in enumerate(counts):
        if not _is_int(count):
            raise TypeError(
                f"counts must hold integer batch counts, got {type(count).__name__} "
                f"{count!r} for rank {rank}"
            )
        if count < 0:
            raise ValueError(f"counts must be >= 0, got {count} for rank {rank}")
    return BatchCountReport(counts=tuple(int(c) for c in counts))


def check_batch_sizes(batches, batch_size: int) -> BatchSizeReport:
    """Check that every batch holds exactly ``batch_size`` samples.

    ``batches`` is a list of batches, each anything :func:`ids_of` accepts.
    """
    if not _is_int(batch_size):
        raise TypeError(f"batch_size must be an int >= 1, got {type(batch_size).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size}")
    if not isinstance(batches, list | tuple):
        raise TypeError(
            f"batches must be a list of batches, got {type(batches).__name__}; "
            "wrap a loader in list(...) first"
        )
    per_batch = tuple(
        int(_ids(batch, "batches", f"batches[{i}]").size) for i, batch in enumerate(batches)
    )
    return BatchSizeReport(batch_size=int(batch_size), per_batch=per_batch)


@dataclass(frozen=True, eq=False)
class ExactlyOnceReport:
    """Outcome of :func:`check_exactly_once`; ``duplicates`` maps id -> times seen.

    ``duplicates``, ``missing`` and ``unexpected`` are built on first use from the sorted
    int64 arrays ``duplicate_ids``/``duplicate_times``, ``missing_ids`` and ``unexpected_ids``.
    """

    expected_count: int
    unique_count: int
    seen_count: int
    duplicate_ids: np.ndarray = field(repr=False)
    duplicate_times: np.ndarray = field(repr=False)
    missing_ids: np.ndarray = field(repr=False)
    unexpected_ids: np.ndarray = field(repr=False)

    @property
    def ok(self) -> bool:
        """True when every expected id was seen once and no other id was seen."""
        return not (self.duplicate_ids.size or self.missing_ids.size or self.unexpected_ids.size)

    @property
    def duplicated_count(self) -> int:
        """How many distinct ids were seen more than once."""
        return int(self.duplicate_ids.size)

    @property
    def missing_count(self) -> int:
        """How many expected ids were never seen."""
        return int(self.missing_ids.size)

    @property
    def unexpected_count(self) -> int:
        """How many distinct ids were seen but not expected."""
        return int(self.unexpected_ids.size)

    @cached_property
    def duplicates(self) -> dict[int, int]:
        """Ids seen more than once -> how many times each was seen."""
        return dict(zip(self.duplicate_ids.tolist(), self.duplicate_times.tolist(), strict=True))

    @cached_property
    def missing(self) -> list[int]:
        """Expected ids never seen, sorted."""
        return self.missing_ids.tolist()

    @cached_property
    def unexpected(self) -> list[int]:
        """Ids seen that were not expected, sorted."""
        return self.unexpected_ids.tolist()

    def __repr__(self) -> str:
        parts = [
            f"{self.expected_count} expected",
            f"{self.unique_count} unique",
            f"{self.duplicate_ids.size} duplicated",
            f"{self.missing_ids.size} missing",
        ]
        if self.unexpected_ids.size:
            parts.append(f"{self.unexpected_ids.size} unexpected")
        return f"{_mark(self.ok)} " + " · ".join(parts)

    __str__ = __repr__

    def summary(self, limit: int = 10) -> str:
        """The verdict line and up to ``limit`` example ids of each problem."""
        return "\n".join([repr(self), *(f"  {k}: {v}" for k, v in self._examples(limit))])

    def _examples(self, limit: int) -> list[tuple[str, str]]:
        rows = []
        if self.duplicate_ids.size:
            shown = [
                f"{i} ×{t}"
                for i, t in zip(
                    self.duplicate_ids[:limit].tolist(),
                    self.duplicate_times[:limit].tolist(),
                    strict=True,
                )
            ]
            rows.append(("duplicated", _listing(shown, self.duplicate_ids.size)))
        for name, ids in (("missing", self.missing_ids), ("unexpected", self.unexpected_ids)):
            if ids.size:
                rows.append((name, _listing(ids[:limit].tolist(), ids.size)))
        return rows

    def _repr_html_(self) -> str:
        return _html(self.ok, repr(self)[2:], self._examples(8))


@dataclass(frozen=True)
class BatchCountReport:
    """Outcome of :func:`check_batch_counts`; ``counts`` is indexed by rank."""

    counts: tuple[int, ...]

    @property
    def ok(self) -> bool:
        """True when every rank has the same number of batches."""
        return self.min == self.max

    @property
    def min(self) -> int:
        return min(self.counts)

    @property
    def max(self) -> int:
        return max(self.counts)

    @property
    def world_size(self) -> int:
        return len(self.counts)

    @property
    def stopped_ranks(self) -> tuple[int, ...]:
        """Ranks that run out of batches first (empty when all counts are equal)."""
        if self.ok:
            return ()
        return tuple(rank for rank, c in enumerate(self.counts) if c == self.min)

    @property
    def blocking_step(self) -> int | None:
        """The 1-based step at which DDP would block, or None when counts are equal."""
        return None if self.ok else self.min + 1

    def __repr__(self) -> str:
        return f"{_mark(self.ok)} batches per rank: {self._verdict()}"

    __str__ = __repr__

    def _verdict(self) -> str:
        if self.ok:
            ranks = "the only rank" if self.world_size == 1 else f"each of {self.world_size} ranks"
            return f"{self.min} on {ranks}"
        listed = " · ".join(f"rank {r}: {c}" for r, c in enumerate(self.counts[:8]))
        if self.world_size > 8:
            listed += f" · … ({self.world_size} ranks)"
        stopped = self.stopped_ranks
        who = (
            f"rank {stopped[0]} has stopped"
            if len(stopped) == 1
            else f"ranks {_listing(list(stopped), len(stopped), 6)} have stopped"
        )
        return f"{listed} — DDP would block at step {self.blocking_step} ({who})"

    def _repr_html_(self) -> str:
        return _html(self.ok, f"batches per rank: {self._verdict()}", [])


@dataclass(frozen=True)
class BatchSizeReport:
    """Outcome of :func:`check_batch_sizes`; ``sizes`` counts batches by size."""

    batch_size: int
    per_batch: tuple[int, ...] = field(repr=False)

    @property
    def ok(self) -> bool:
        """True when every batch holds exactly ``batch_size`` samples."""
        return all(size == self.batch_size for size in self.per_batch)

    @property
    def sizes(self) -> Counter:
        """Batch size -> how many batches had it."""
        return Counter(self.per_batch)

    @property
    def partial(self) -> int:
        """How many batches are smaller than ``batch_size``."""
        return sum(size < self.batch_size for size in self.per_batch)

    @property
    def oversized(self) -> int:
        """How many batches are larger than ``batch_size``."""
        return sum(size > self.batch_size for size in self.per_batch)

    def __repr__(self) -> str:
        return f"{_mark(self.ok)} {self._verdict()}"

    __str__ = __repr__

    def _verdict(self) -> str:
        n = len(self.per_batch)
        noun = "batch" if n == 1 else "batches"
        full = sum(size == self.batch_size for size in self.per_batch)
        if self.ok:
            return f"{n} {noun} of {self.batch_size}"
        parts = [f"{full} of {self.batch_size}"]
        for name, count, small in (("partial", self.partial, True),
                                   ("oversized", self.oversized, False)):
            if count:
                odd = [s for s in self.per_batch
                       if (s < self.batch_size if small else s > self.batch_size)]
                parts.append(f"{count} {name} ({_listing(odd, len(odd), 6)})")
        return f"{n} {noun}: " + ", ".join(parts)

    def _repr_html_(self) -> str:
        return _html(self.ok, self._verdict(), [])


# ---------------------------------------------------------------- random draws


def check_random_draws(draws, *, value: str = "draw", across=("worker", "rank", "epoch"),
                       match: str | None = None) -> DrawReport:
    """Check that workers, ranks and epochs did not draw the same random values.

    ``draws``: one record per draw, as a list of dicts or a dict of equal-length columns
    (``collect``'s fields are one), e.g. ``{"worker": [...], "epoch": [...], "id": [...],
    "aug": [...]}``. ``value`` names the drawn value (a number, or a sequence compared
    whole). ``across``: the fields whose values must not draw alike (those present are
    used). For each such field, draws that differ in it are paired and compared: with
    ``match`` (e.g. ``"id"``), draws for the same sample; otherwise the ``k``-th draw of
    one stream with the ``k``-th of another, a stream being the draws with the same
    values of every ``across`` field, in order.

    A field fails when more pairs are equal than chance explains (chance: two draws of
    the pooled values are equal; 3.5 standard deviations).
    """
    columns = _draw_columns(draws, value)
    across = (across,) if isinstance(across, str) else across
    if not isinstance(across, list | tuple) or not across \
            or not all(isinstance(name, str) for name in across):
        raise TypeError(f"across must be a field name or a tuple of field names, got {across!r}")
    present = tuple(name for name in across if name in columns)
    if not present:
        raise ValueError(f"across names fields {list(across)} but the draws have fields "
                         f"{sorted(columns)}; name the fields that label each draw")
    if match is not None and match not in columns:
        raise ValueError(f"match={match!r} is not a field of the draws; fields: {sorted(columns)}")
    codes, n_values = _value_codes(columns[value])
    chance = _chance(columns, codes, n_values, present, columns[value])
    rows = tuple(_compare_across(columns, codes, name, present, match, chance)
                 for name in present)
    return DrawReport(value=value, n_draws=len(codes), match=match, rows=rows)


@dataclass(frozen=True)
class DrawRow:
    """Draws that differ in ``field``, paired and compared."""

    field: str
    compared: int                 # pairs of draws compared
    equal: int                    # ... of which drew the same value
    chance: float                 # probability two draws are equal by chance
    pairs: tuple                  # ((value_a, value_b, context, equal, compared), ...)

    @property
    def ok(self) -> bool:
        expected = self.compared * self.chance
        spread = math.sqrt(max(self.compared * self.chance * (1 - self.chance), 0.0))
        return self.equal <= expected + 3.5 * spread + 0.5


@dataclass(frozen=True)
class DrawReport:
    """Outcome of :func:`check_random_draws`: one row per ``across`` field."""

    value: str
    n_draws: int
    match: str | None
    rows: tuple[DrawRow, ...]

    @property
    def ok(self) -> bool:
        """True when no field has more equal draws than chance explains."""
        return all(row.ok for row in self.rows)

    @property
    def repeats(self) -> dict[str, float]:
        """Field -> fraction of its paired draws that were equal."""
        return {row.field: row.equal / row.compared if row.compared else 0.0
                for row in self.rows}

    def _head(self) -> str:
        bad = [row.field for row in self.rows if not row.ok]
        fields = " · ".join(f"{row.field}s" for row in self.rows)
        if not bad:
            return f"random draws ({self.value}): no repeats beyond chance across {fields}"
        return (f"random draws ({self.value}) repeat across "
                f"{' and '.join(f'{name}s' for name in bad)}")

    def _examples(self) -> list[tuple[str, str]]:
        how = f"same {self.match}" if self.match else "k-th draw of each stream"
        out = []
        for row in self.rows:
            mark = OK_MARK if row.ok else BAD_MARK
            share = row.equal / row.compared if row.compared else 0.0
            text = (f"{mark} {row.equal} of {row.compared} pairs equal ({share:.0%}; "
                    f"chance ≈ {row.chance:.0%}, {how})")
            worst = sorted(row.pairs, key=lambda pair: -pair[3])[:3]
            shown = [f"{row.field} {a} = {row.field} {b}{c}: {e}/{n}"
                     for a, b, c, e, n in worst if e]
            if shown and not row.ok:
                text += " — " + "; ".join(shown)
            if not row.compared:
                text = f"· nothing to compare (one {row.field} only)"
            out.append((f"across {row.field}s", text))
        return out

    def __repr__(self) -> str:
        lines = [f"{_mark(self.ok)} {self._head()}"]
        lines += [f"  {k}: {v}" for k, v in self._examples()]
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        colour = OK_COLOUR if self.ok else BAD_COLOUR
        rows = "".join(
            f'<tr><td style="text-align:left">{html.escape(k)}</td>'
            f'<td style="text-align:left">{html.escape(v)}</td></tr>'
            for k, v in self._examples())
        return (f'<div style="font-family:monospace"><span style="color:{colour};'
                f'font-weight:bold">{_mark(self.ok)}</span> {html.escape(self._head())}'
                f'<table style="margin:2px 0 0 1.5em">{rows}</table></div>')


def _draw_columns(draws, value: str) -> dict[str, list]:
    """A dict of equal-length columns (lists) from records or columns."""
    if not isinstance(value, str):
        raise TypeError(f"value must be the name of the drawn field, got {value!r}")
    if isinstance(draws, Mapping):
        columns = {}
        for key, column in draws.items():
            if isinstance(column, torch.Tensor):
                column = column.detach().cpu().numpy()
            columns[key] = list(column) if not isinstance(column, np.ndarray) else \
                [column[i] for i in range(len(column))]
        lengths = {key: len(column) for key, column in columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"draws columns must have equal lengths, got {lengths}")
    elif isinstance(draws, list | tuple):
        if not all(isinstance(record, Mapping) for record in draws):
            raise TypeError("draws must be a list of dicts (one per draw) or a dict of columns")
        keys = set().union(*(record.keys() for record in draws)) if draws else {value}
        missing = [k for k in keys if any(k not in record for record in draws)]
        if missing:
            raise ValueError(f"every draw record must have the same fields; some lack "
                             f"{sorted(map(str, missing))}")
        columns = {key: [record[key] for record in draws] for key in keys}
    else:
        raise TypeError(f"draws must be a list of dicts (one per draw) or a dict of columns, "
                        f"got {type(draws).__name__}")
    if value not in columns:
        raise ValueError(f"value={value!r} is not a field of the draws; fields: "
                         f"{sorted(map(str, columns))}")
    return columns


def _value_key(item):
    if isinstance(item, torch.Tensor):
        item = item.detach().cpu().numpy()
    array = np.asarray(item)
    if array.dtype == object:
        raise TypeError(f"drawn values must be numbers or arrays of numbers, got {item!r}")
    if array.dtype.kind in "iub":
        array = array.astype(np.int64)
    elif array.dtype.kind == "f":
        array = array.astype(np.float64)
    return array.shape, array.tobytes(), array.dtype.kind


def _value_codes(values: list) -> tuple[np.ndarray, int]:
    table: dict = {}
    codes = np.fromiter((table.setdefault(_value_key(v), len(table)) for v in values),
                        dtype=np.int64, count=len(values))
    return codes, max(len(table), 1)


def _chance(columns, codes: np.ndarray, n_values: int, present, values) -> float:
    """P(two draws are equal by chance), from pairs of draws *within* one stream (a copied
    stream does not inflate it); exact float draws never collide by chance."""
    if not len(codes):
        return 0.0
    streams = [tuple(_plain(columns[f][i]) for f in present) for i in range(len(codes))]
    index = {key: k for k, key in enumerate(dict.fromkeys(streams))}
    stream = np.array([index[key] for key in streams], dtype=np.int64)
    counts = np.unique(stream * n_values + codes, return_counts=True)[1].astype(np.float64)
    sizes = np.bincount(stream).astype(np.float64)
    pairs = float((sizes * (sizes - 1)).sum())
    if pairs:
        return float((counts * (counts - 1)).sum() / pairs)
    if all(_value_key(v)[2] == "f" for v in values):
        return 0.0
    p = np.bincount(codes, minlength=n_values) / len(codes)
    return float((p * p).sum())


def _plain(item):
    return item.item() if hasattr(item, "item") and np.ndim(item) == 0 else item


def _compare_across(columns, codes, name, present, match, chance) -> DrawRow:
    """Pair draws that differ in ``name`` and count the equal ones."""
    others = [f for f in present if f != name]
    labels = [_plain(v) for v in columns[name]]
    context = [tuple(_plain(columns[f][i]) for f in others) for i in range(len(codes))]
    groups: dict = {}
    if match is not None:
        # Draws for the same sample, whatever else differs.
        for i, key in enumerate(columns[match]):
            groups.setdefault(((), _plain(key)), []).append(i)
        position_key = None
    else:
        # The k-th draw of each stream (same values of every other across field).
        seen: dict = {}
        for i in range(len(codes)):
            stream = (context[i], labels[i])
            k = seen.get(stream, 0)
            seen[stream] = k + 1
            groups.setdefault((context[i], k), []).append(i)
        position_key = True
    tally: dict = {}
    for (ctx, _), members in groups.items():
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                i, j = members[x], members[y]
                if labels[i] == labels[j]:
                    continue
                a, b = sorted((labels[i], labels[j]), key=repr)
                where = ctx if position_key else ()
                entry = tally.setdefault((a, b, where), [0, 0])
                entry[0] += int(codes[i] == codes[j])
                entry[1] += 1
    pairs = tuple((a, b, _context_text(others, where), e, n)
                  for (a, b, where), (e, n) in tally.items())
    return DrawRow(field=name, compared=sum(n for *_, n in pairs),
                   equal=sum(e for *_, e, _ in pairs), chance=chance, pairs=pairs)


def _context_text(fields, values) -> str:
    if not values:
        return ""
    return " (" + ", ".join(f"{f} {v}" for f, v in zip(fields, values, strict=True)) + ")"


# ---------------------------------------------------------------- internals

_EMPTY = np.empty(0, dtype=np.int64)
_INT64_MAX = np.iinfo(np.int64).max


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _ids(obj, name: str, where: str = "") -> np.ndarray:
    """ids_of for argument ``name``; ``where`` locates obj inside it for error messages."""
    ids = _flatten(obj, name, where or name)
    if ids.size and (low := ids.min()) < 0:
        raise ValueError(f"{name} contains negative ids, e.g. {int(low)}")
    return ids


def _flatten(obj, name: str, where: str) -> np.ndarray:
    if _is_int(obj):
        if obj > _INT64_MAX:
            raise ValueError(f"{name} ids must fit in int64, got {obj}{_at(name, where)}")
        return np.array([obj], dtype=np.int64)
    if isinstance(obj, torch.Tensor):
        _check_kind(_torch_kind(obj.dtype), f"{obj.dtype} tensor", name, where)
        return obj.detach().reshape(-1).to("cpu", torch.int64).numpy()
    if isinstance(obj, np.ndarray):
        _check_kind(obj.dtype.kind, f"{obj.dtype} array", name, where)
        if obj.dtype == np.uint64 and obj.size and obj.max() > _INT64_MAX:
            raise ValueError(f"{name} ids must fit in int64, got {obj.max()}{_at(name, where)}")
        return obj.reshape(-1).astype(np.int64, copy=False)
    if isinstance(obj, range):
        return np.arange(obj.start, obj.stop, obj.step, dtype=np.int64)
    if isinstance(obj, Mapping):
        if "id" not in obj:
            raise TypeError(
                f"{name} dicts must have an 'id' key, got keys {sorted(map(str, obj))}"
                f"{_at(name, where)}"
            )
        return _flatten(obj["id"], name, f"{where}['id']")
    if isinstance(obj, list | tuple):
        return _flatten_sequence(obj, name, where)
    kind = _python_kind(obj)
    if kind != "O":
        _check_kind(kind, repr(obj)[:40], name, where)
    raise TypeError(
        f"{name} must hold ints, integer tensors or arrays, dicts with an 'id' key, "
        f"or lists of these; got {type(obj).__name__}{_at(name, where)}"
    )


def _flatten_sequence(seq, name: str, where: str) -> np.ndarray:
    if not seq:
        return _EMPTY
    if _is_int(seq[0]):
        # A flat list of ints: one C-level conversion instead of a loop per id.
        try:
            arr = np.asarray(seq)
        except (ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind in "iu":
            return arr.reshape(-1).astype(np.int64, copy=False)
    if all(isinstance(item, torch.Tensor) for item in seq):
        # A list of tensor batches: one concatenation in torch, dtypes checked per batch.
        if all(_torch_kind(dtype) == "i" for dtype in {item.dtype for item in seq}):
            with torch.no_grad():
                try:
                    flat = torch.cat(seq)  # 1-D batches: no per-batch reshape needed
                except RuntimeError:
                    flat = torch.cat([item.reshape(-1) for item in seq])
            return flat.reshape(-1).to("cpu", torch.int64).numpy()
    parts = [_flatten(item, name, f"{where}[{i}]") for i, item in enumerate(seq)]
    return np.concatenate(parts)


def _torch_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "b"
    if dtype.is_floating_point:
        return "f"
    if dtype.is_complex:
        return "c"
    return "i"


def _python_kind(obj) -> str:
    if isinstance(obj, bool | np.bool_):
        return "b"
    if isinstance(obj, float | np.floating):
        return "f"
    if isinstance(obj, complex | np.complexfloating):
        return "c"
    if isinstance(obj, str | bytes):
        return "U"
    return "O"


def _check_kind(kind: str, what: str, name: str, where: str) -> None:
    if kind in "iu":
        return
    label = {"b": "bool", "f": "float", "c": "complex", "U": "str", "S": "bytes"}.get(kind)
    detail = f"{label} ({what})" if label else what
    raise TypeError(f"{name} must hold integer ids, got {detail}{_at(name, where)}")


def _at(name: str, where: str) -> str:
    return "" if where == name else f" at {where}"


def _expected_ids(expected) -> tuple[int, np.ndarray | None]:
    """(number of expected ids, sorted ids or None when they are 0..N-1)."""
    if _is_int(expected):
        if expected < 0:
            raise ValueError(
                f"expected must be an int N >= 0 or a sequence of ids, got {expected}"
            )
        return int(expected), None
    if isinstance(expected, range) and expected.start == 0 and expected.step == 1:
        return max(expected.stop, 0), None
    if isinstance(expected, float | np.floating):
        raise TypeError(
            f"expected must be an int N (ids 0..N-1) or a sequence of ids, got float {expected!r}"
        )
    ids = np.sort(_ids(expected, "expected"))
    if ids.size > 1 and (repeated := ids[1:][ids[1:] == ids[:-1]]).size:
        raise ValueError(f"expected holds duplicate ids, e.g. {int(repeated[0])}")
    if ids.size == 0 or ids[-1] == ids.size - 1:
        return int(ids.size), None  # unique, non-negative and ending at N-1: exactly 0..N-1
    return int(ids.size), ids


def _dense_check(ids, n_expected, expected_ids, length) -> dict:
    """Count with bincount: linear time when ids are not much larger than their number."""
    times = np.bincount(ids, minlength=length)
    if expected_ids is None:
        missing = np.flatnonzero(times[:n_expected] == 0)
        unexpected = np.flatnonzero(times[n_expected:]) + n_expected
    else:
        wanted = np.zeros(length, dtype=bool)
        wanted[expected_ids] = True
        seen = times > 0
        missing = np.flatnonzero(wanted & ~seen)
        unexpected = np.flatnonzero(seen & ~wanted)
    duplicate_ids = np.flatnonzero(times > 1)
    return dict(
        unique_count=int(np.count_nonzero(times)),
        duplicate_ids=duplicate_ids,
        duplicate_times=times[duplicate_ids],
        missing_ids=missing.astype(np.int64, copy=False),
        unexpected_ids=unexpected.astype(np.int64, copy=False),
    )


def _sparse_check(ids, n_expected, expected_ids) -> dict:
    """Count with a sort: for a few ids spread over a huge range."""
    unique, times = np.unique(ids, return_counts=True)
    if expected_ids is None:
        expected_ids = np.arange(n_expected, dtype=np.int64)
    repeated = times > 1
    return dict(
        unique_count=int(unique.size),
        duplicate_ids=unique[repeated],
        duplicate_times=times[repeated],
        missing_ids=np.setdiff1d(expected_ids, unique, assume_unique=True),
        unexpected_ids=np.setdiff1d(unique, expected_ids, assume_unique=True),
    )


def _mark(ok: bool) -> str:
    return OK_MARK if ok else BAD_MARK


def _listing(items: list, total: int, limit: int | None = None) -> str:
    if limit is not None:
        items = items[:limit]
    text = ", ".join(map(str, items))
    if total > len(items):
        text += f", … (+{total - len(items)} more)"
    return text


def _html(ok: bool, verdict: str, examples: list[tuple[str, str]]) -> str:
    colour = OK_COLOUR if ok else BAD_COLOUR
    head = (
        f'<div style="font-family:monospace"><span style="color:{colour};font-weight:bold">'
        f"{_mark(ok)}</span> {html.escape(verdict)}"
    )
    if not examples:
        return head + "</div>"
    rows = "".join(
        f'<tr><td style="color:{BAD_COLOUR};text-align:left">{html.escape(k)}</td>'
        f'<td style="text-align:left">{html.escape(v)}</td></tr>'
        for k, v in examples
    )
    return f'{head}<table style="margin:2px 0 0 1.5em">{rows}</table></div>'

