"""Reading an audit's results in a later cell: what the ranks read, or a note that the
audit failed.

An audit that could not judge (a rank raised, hung or died, or the batches' ids could not be
told) holds no ids: its report shows why, and every cell that reads from it afterwards
shows :data:`NOTHING_TO_SHOW` instead of an ``AttributeError`` or an ``IndexError``. The
checks that take an audit report (``check_rank_split``, ``Simulation.compare``) and the
library table call :func:`audit_failed` first; a cell of its own can call
:func:`read_audit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from talk_helpers.verdicts.render import NOTE_MARK, verdict_html

__all__ = ["NOTHING_TO_SHOW", "NothingToShow", "audit_failed", "read_audit"]

NOTHING_TO_SHOW = "nothing to show: the audit above failed"


def audit_failed(report) -> bool:
    """True when ``report`` is an audit that could not judge: it has a failure, or no run
    to read ids from."""
    return (getattr(report, "failure", None) is not None
            or getattr(report, "error", None) is not None
            or (hasattr(report, "run") and report.run is None))


def read_audit(report, read: Callable):
    """``read(report)``, or :class:`NothingToShow` when the audit failed."""
    return NothingToShow() if audit_failed(report) else read(report)


@dataclass(frozen=True)
class NothingToShow:
    """What stands where an audit's results would be when the audit failed: not a pass,
    not a finding (its report above says what went wrong)."""

    text: str = NOTHING_TO_SHOW

    @property
    def ok(self) -> bool:
        """False: nothing was checked."""
        return False

    @property
    def status(self) -> str:
        return "fail"

    def __repr__(self) -> str:
        return f"{NOTE_MARK} {self.text}"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return verdict_html(NOTE_MARK, self.text)
