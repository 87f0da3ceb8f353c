"""What a uniform shuffle would give: the chance distribution behind the mixing verdict.

Put ``N`` labelled samples (label ``g`` on ``c_g`` of them) in a uniformly random order and
cut batches of given sizes from it. :func:`same_pair_moments` gives the exact mean and
variance of ``S``, the number of pairs of samples in one batch that share a label, and a
degrees-of-freedom figure for its skew; :func:`upper_tail` turns an observed ``S`` into the
probability that a uniform shuffle gets at least that many. ``S`` is, up to a constant, a
chi-square statistic of the batch × label table, so its tail is read from a chi-square
with those degrees of freedom matched to the exact mean and variance (a normal tail would
call a uniform shuffle poor several times too often at a few batches).

Pure Python and numpy; exact integer arithmetic where the variance's terms cancel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["NONE", "PairMoments", "poisson_tail", "same_pair_moments", "upper_quantile",
           "upper_tail"]


@dataclass(frozen=True)
class PairMoments:
    """Mean, variance and degrees of freedom of the same-label pair count ``S``, and the
    number of pairs ``total`` the batches hold. Moments of independent epochs add."""

    mean: float
    variance: float
    dof: float
    total: float

    def __add__(self, other: PairMoments) -> PairMoments:
        return PairMoments(self.mean + other.mean, self.variance + other.variance,
                           self.dof + other.dof, self.total + other.total)


NONE = PairMoments(0.0, 0.0, 0.0, 0.0)


def same_pair_moments(label_counts, batch_sizes) -> PairMoments:
    """Moments of ``S`` when the samples (``label_counts[g]`` of label ``g``) are shuffled
    uniformly and batches of ``batch_sizes`` are taken from the shuffled order (batches need
    not use every sample).

    ``S`` sums an indicator per pair of positions in one batch. Two such pairs are the
    same pair, share one position (same batch), or are disjoint, and each case has its
    own joint probability of both sharing a label; summing the covariances gives the exact
    variance. ``dof``: (batches − 1) × (effective labels − 1), capped at 8 × mean (the
    chi-square whose skew matches a Poisson count when same-label pairs are rare)."""
    counts = [int(c) for c in np.asarray(label_counts).tolist() if int(c) > 0]
    sizes = np.asarray(batch_sizes, dtype=np.int64)
    sizes = sizes[sizes >= 2]
    n = sum(counts)
    total = int((sizes * (sizes - 1) // 2).sum())
    if n < 4 or total == 0:
        return PairMoments(0.0, 0.0, 0.0, float(total))
    n2, n3 = n * (n - 1), n * (n - 1) * (n - 2)
    n4 = n3 * (n - 3)
    s2 = sum(c * (c - 1) for c in counts)
    s3 = sum(c * (c - 1) * (c - 2) for c in counts)
    w = sum(c * (c - 1) * (4 * c - 6) for c in counts)
    q2 = Fraction(s2, n2)                                   # P(a pair shares a label)
    q3_excess = Fraction(s3 * n2 * n2 - s2 * s2 * n3, n3 * n2 * n2)   # 3 positions
    q4_excess = Fraction(s2 * s2 * (4 * n - 6) - n2 * w, n2 * n4)      # 2 disjoint pairs
    sharing = int((sizes * (sizes - 1) * (sizes - 2)).sum())  # ordered pairs of pairs, 1 shared
    disjoint = total * (total - 1) - sharing
    variance = total * (q2 - q2 * q2) + sharing * q3_excess + disjoint * q4_excess
    mean = float(total * q2)
    shares = np.asarray(counts, dtype=np.float64) / n
    labels = 1.0 / float((shares * shares).sum())
    dof = max(len(sizes) - 1, 1) * max(labels - 1.0, 0.0)
    dof = min(dof, 8.0 * mean)
    return PairMoments(mean, max(float(variance), 0.0), dof, float(total))


def upper_tail(observed: float, moments: PairMoments) -> float:
    """P(S ≥ observed) for a uniform shuffle: a chi-square with ``moments.dof`` degrees of
    freedom, shifted and scaled to ``moments``' mean and variance."""
    if moments.variance <= 0 or moments.dof <= 0:
        return 1.0 if observed <= moments.mean + 1e-9 else 0.0
    z = (observed - moments.mean) / math.sqrt(moments.variance)
    nu = moments.dof
    return _chi2_sf(nu + z * math.sqrt(2.0 * nu), nu)


def upper_quantile(alpha: float, moments: PairMoments) -> float:
    """The ``S`` a uniform shuffle exceeds with probability ``alpha`` (the inverse of
    :func:`upper_tail`), found by bisection."""
    if moments.variance <= 0 or moments.dof <= 0:
        return moments.mean
    low, high = 0.0, 1.0
    while _z_tail(high, moments.dof) > alpha:
        high *= 2.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _z_tail(middle, moments.dof) > alpha else (low, middle)
    return moments.mean + high * math.sqrt(moments.variance)


def _z_tail(z: float, nu: float) -> float:
    return _chi2_sf(nu + z * math.sqrt(2.0 * nu), nu)


def _chi2_sf(x: float, nu: float) -> float:
    """P(chi-square with ``nu`` degrees of freedom ≥ x): the regularised upper incomplete
    gamma Q(nu/2, x/2), by its series below a + 1 and its continued fraction above."""
    if x <= 0:
        return 1.0
    a, y = nu / 2.0, x / 2.0
    log_front = a * math.log(y) - y - math.lgamma(a)
    if y < a + 1.0:
        term = total = 1.0 / a
        k = a
        for _ in range(10_000):
            k += 1.0
            term *= y / k
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = y + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)


def poisson_tail(k: int, mean: float) -> float:
    """P(X ≥ k) for X Poisson with ``mean``."""
    if k <= 0:
        return 1.0
    return max(0.0, 1.0 - _chi2_sf(2.0 * mean, 2.0 * k))
