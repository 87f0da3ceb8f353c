"""Sampling with replacement, judged for what it promises: coverage and balance, not
exactly once.

A loader that draws with replacement (``WeightedRandomSampler(replacement=True)``,
webdataset's ``resampled=True`` shards) repeats some samples and misses others, a
different number each epoch: that is its design. What can still be wrong:

* **coverage**: ids that no epoch ever draws, more than uniform draws would leave. ``T``
  uniform draws with replacement over ``n`` units leave ``n (1 - 1/n)^T`` of them undrawn
  on average, with variance ``n (n - 1) (1 - 2/n)^T + n (1 - 1/n)^T - (n (1 - 1/n)^T)^2``
  (the occupancy problem). Fewer drawn than that beyond chance (probability
  :data:`COVERAGE_ALPHA`) reads ✘: weights of 0, shards left out of the list. A ``unit``
  of N judges draws of whole chunks (N consecutive ids), as a loader that resamples shards
  draws them;
* **balance**: ranks that draw alike (the same sample at the same position in one epoch,
  far beyond the ``1/n`` chance of two independent draws): every rank seeded alike.

Draws per id (fewest, most) are reported, not judged: a weighted sampler means them to
differ. Pure numpy; nothing here starts a process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from talk_helpers.checks.uniform_null import poisson_tail
from talk_helpers.verdicts.render import mark, verdict_html

__all__ = ["COVERAGE_ALPHA", "ALIKE_ALPHA", "DrawsReport", "check_draws", "never_drawn_null"]

COVERAGE_ALPHA = 0.002   # P(uniform draws are called short of coverage)
ALIKE_ALPHA = 0.002      # P(two ranks drawing independently are called alike), all pairs
ALIKE_SHARE = 0.5        # ranks alike: at least this share of positions hold one sample


def never_drawn_null(n_units: int, draws: float) -> tuple[float, float]:
    """(mean, standard deviation) of the units never drawn when ``draws`` uniform draws
    with replacement fall on ``n_units`` units."""
    if n_units <= 0:
        return 0.0, 0.0
    if n_units == 1:
        return (1.0, 0.0) if draws < 1 else (0.0, 0.0)
    q1 = math.exp(draws * math.log1p(-1 / n_units))
    q2 = math.exp(draws * math.log1p(-2 / n_units)) if n_units > 2 else 0.0 ** draws
    mean = n_units * q1
    variance = n_units * (n_units - 1) * q2 + mean - mean * mean
    return mean, math.sqrt(max(variance, 0.0))


@dataclass(frozen=True)
class DrawsReport:
    """What :func:`check_draws` found; ``ok`` is the verdict."""

    n_units: int            # expected ids (or chunks) that may be drawn
    unit: int               # ids per unit: 1, or N for chunk:N
    draws: int              # samples drawn over all epochs
    never: int              # units no epoch drew
    null_mean: float        # units uniform draws leave undrawn, on average
    null_sd: float
    short: bool             # fewer units drawn than uniform draws give, beyond chance
    alike: list             # (epoch, rank, rank) pairs that draw alike
    fewest: int             # draws of the least drawn expected id
    most: int               # draws of the most drawn id
    unexpected: int         # distinct ids drawn that were not expected

    @property
    def ok(self) -> bool:
        return not (self.short or self.alike or self.unexpected)

    @property
    def headline(self) -> str:
        what = "ids" if self.unit == 1 else f"chunks of {self.unit}"
        if self.ok:
            return (f"{mark(True)} drawn with replacement: coverage and balance as uniform "
                    "draws give")
        found = []
        if self.unexpected:
            found.append(f"{self.unexpected} unexpected")
        if self.short:
            found.append(f"{self.never} {what} never drawn")
        if self.alike:
            found.append("ranks draw alike")
        return f"{mark(False)} " + " · ".join(found)

    @property
    def statistics(self) -> list[str]:
        what = "ids" if self.unit == 1 else f"chunks of {self.unit} ids"
        drawn = (f"{self.draws} draws" if self.unit == 1 else
                 f"{self.draws} samples drawn (about {self.draws / self.unit:.0f} chunks)")
        lines = [f"{self.never} of {self.n_units} {what} never drawn in {drawn} (uniform "
                 f"draws with replacement leave about {self.null_mean:.0f} ± "
                 f"{self.null_sd:.0f})",
                 f"draws per expected id: fewest {self.fewest}, most {self.most} (not judged: "
                 "a weighted sampler means them to differ)"]
        if self.alike:
            epoch, a, b = self.alike[0]
            lines.append(f"rank {a} and rank {b} drew the same sample at most positions of "
                         f"epoch {epoch}")
        return lines

    def __repr__(self) -> str:
        return "\n".join([self.headline, *(f"  {line}" for line in self.statistics)])

    def _repr_html_(self) -> str:
        return verdict_html(self.ok, self.headline[2:], statistics=self.statistics)


def check_draws(epochs, expected, unit: int = 1) -> DrawsReport:
    """Judge draws with replacement. ``epochs[e][r]``: the ids rank ``r`` drew in epoch
    ``e``, in order; ``expected``: the ids that may be drawn (an int N: ids 0..N-1, or a
    sequence); ``unit``: judge coverage in chunks of ``unit`` consecutive ids."""
    if isinstance(unit, bool) or not isinstance(unit, int) or unit < 1:
        raise ValueError(f"unit must be an int ≥ 1, got {unit!r}")
    streams = [[np.asarray(r, dtype=np.int64).reshape(-1) for r in ranks] for ranks in epochs]
    if not streams:
        raise ValueError("epochs must hold at least one epoch of ranks' draws")
    wanted = (np.arange(int(expected), dtype=np.int64) if isinstance(expected, int | np.integer)
              else np.unique(np.asarray(expected, dtype=np.int64)))
    drawn = np.concatenate([r for ranks in streams for r in ranks] or [np.empty(0, np.int64)])
    values, times = np.unique(drawn, return_counts=True)
    known = np.isin(values, wanted)
    per_wanted = np.zeros(wanted.size, dtype=np.int64)
    per_wanted[np.searchsorted(wanted, values[known])] = times[known]
    units = np.unique(wanted // unit)
    drawn_units = np.unique(values[known] // unit)
    never = int(units.size - drawn_units.size)
    alike = _alike(streams, max(int(units.size), 1), unit)
    # ranks that draw alike make one set of draws between them: one finding, not two
    copies = {(e, b) for e, _, b in alike}
    independent = sum(int(np.isin(r, wanted).sum()) for e, ranks in enumerate(streams)
                      for k, r in enumerate(ranks) if (e, k) not in copies)
    mean, sd = never_drawn_null(int(units.size), independent / unit)
    z = NormalDist().inv_cdf(1 - COVERAGE_ALPHA)
    short = never > mean + max(z * sd, 1.0) + 0.5
    return DrawsReport(n_units=int(units.size), unit=unit, draws=int(drawn.size), never=never,
                       null_mean=mean, null_sd=sd, short=bool(short), alike=alike,
                       fewest=int(per_wanted.min()) if per_wanted.size else 0,
                       most=int(times.max()) if times.size else 0,
                       unexpected=int((~known).sum()))


def _alike(streams, n: int, unit: int = 1) -> list:
    """(epoch, rank, rank) for ranks whose draws hold the same id at most positions, far
    beyond the chance of independent uniform draws of ``n`` units (a position holds the
    same unit with probability 1/n; within a unit drawn alike, the same id)."""
    pairs = [(e, a, b) for e, ranks in enumerate(streams) for a in range(len(ranks))
             for b in range(a + 1, len(ranks))]
    alpha = ALIKE_ALPHA / max(len(pairs), 1)
    found = []
    for e, a, b in pairs:
        x, y = streams[e][a], streams[e][b]
        k = min(x.size, y.size)
        if k < 2:
            continue
        same = int((x[:k] == y[:k]).sum())
        if same >= ALIKE_SHARE * k and poisson_tail(max(same // unit, 1), k / unit / n) < alpha:
            found.append((e, a, b))
    return found
