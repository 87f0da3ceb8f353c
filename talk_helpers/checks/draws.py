"""Did workers, ranks or epochs draw the same random values? More equal pairs than chance
explains means a shared seed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from talk_helpers.verdicts.render import BAD_MARK, OK_MARK, mark, verdict_html


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
        lines = [f"{mark(self.ok)} {self._head()}"]
        lines += [f"  {k}: {v}" for k, v in self._examples()]
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return verdict_html(self.ok, self._head(), self._examples())


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
