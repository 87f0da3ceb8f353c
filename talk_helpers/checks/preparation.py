"""Does rank 0's data preparation finish before the other ranks give up waiting?

A common pattern prepares the data on rank 0 (tokenising, ``datasets.map``, an index
build) while the other ranks wait in a barrier. A barrier is a collective, so they wait
at most the process group's timeout (30 minutes by default in torch.distributed), then
fail: huggingface/transformers#17106 (tokenising), NVIDIA/Megatron-LM#795 (an index build
of minutes on rank 0). Time a small fraction of the preparation and project the whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from talk_helpers.arguments import require_seconds
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.verdicts.render import BAD_MARK, OK_MARK, WARN_MARK

__all__ = ["PreparationReport", "check_preparation_time"]

HEADROOM = 2.0  # a projection within the timeout but closer than this factor is a warning


def check_preparation_time(seconds: float, *, timeout_s: float,
                           fraction: float = 1.0) -> PreparationReport:
    """Check that preparing the data on one rank fits in the collective timeout.

    ``seconds`` is how long preparing ``fraction`` of the data took (1.0: all of it);
    the whole is projected as ``seconds / fraction``. Fails when the projection exceeds
    ``timeout_s``; warns when it is within the timeout by less than a factor of 2.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"seconds must be a duration ≥ 0, got {seconds!r}")
    require_seconds("timeout_s", timeout_s)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) \
            or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], the share of the data that was "
                         f"timed, got {fraction!r}")
    return PreparationReport(seconds=float(seconds), fraction=float(fraction),
                             timeout_s=float(timeout_s))


@dataclass(frozen=True, repr=False)
class PreparationReport(OneLineReport):
    """Outcome of :func:`check_preparation_time`."""

    seconds: float
    fraction: float
    timeout_s: float

    @property
    def projected_s(self) -> float:
        """The preparation of all the data, projected from the timed fraction."""
        return self.seconds / self.fraction

    @property
    def ok(self) -> bool:
        """True when the projection fits in the timeout."""
        return self.projected_s <= self.timeout_s

    @property
    def status(self) -> str:
        """``"pass"``, ``"warn"`` (fits, with less than 2× headroom) or ``"fail"``."""
        if not self.ok:
            return "fail"
        return "warn" if self.projected_s * HEADROOM > self.timeout_s else "pass"

    def _mark(self) -> str:
        return {"pass": OK_MARK, "warn": WARN_MARK, "fail": BAD_MARK}[self.status]

    def _verdict(self) -> str:
        timed = "" if self.fraction == 1 else \
            f"{self.fraction:.0%} took {_seconds(self.seconds)}, so all of it ≈ "
        project = f"preparation on one rank: {timed}{_seconds(self.projected_s)}"
        if self.status == "fail":
            return (f"{project}; the other ranks wait in a collective that times out "
                    f"after {self.timeout_s:g} s")
        if self.status == "warn":
            return (f"{project}: within the {self.timeout_s:g} s timeout, by less than "
                    f"{HEADROOM:g}×")
        return f"{project}: well within the {self.timeout_s:g} s timeout"


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"
