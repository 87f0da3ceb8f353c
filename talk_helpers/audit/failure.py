"""An audit that could not judge the loader: why, where, and the exit status it earns.

==========  ===========  ====================================================================
kind        exit status  what happened
==========  ===========  ====================================================================
``usage``   2            a bad argument, or the factory returned something not iterable
``ids``     2            a batch whose sample ids the audit cannot tell (see ``--ids``)
``raised``  3            the factory or the loader raised, in some rank
``died``    3            a rank's process ended without a word (killed, crashed)
``hung``    3            a rank was still running at the deadline
==========  ===========  ====================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEADLINE_HINT", "EXIT_ERROR", "EXIT_FAIL", "EXIT_PASS", "EXIT_USAGE", "Failure",
           "from_exception", "from_world"]

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3
KINDS = ("usage", "ids", "raised", "died", "hung")
_WHERE = re.compile(r"^audit: raised at (.+)$", re.MULTILINE)


@dataclass
class Failure:
    """Why the audit could not judge: ``kind`` (see the module docstring), the ``rank``
    it happened in, ``where`` in the user's code (``file:line in function``), how far each
    rank got (``progress``, for a deadline) and a ``hint`` naming what to change."""

    kind: str
    message: str
    rank: int | None = None
    where: str | None = None
    progress: dict[int, str] | None = None
    hint: str | None = None
    error: str | None = None   # the one-line form kept by AuditReport.error

    @property
    def exit_status(self) -> int:
        return EXIT_USAGE if self.kind in ("usage", "ids") else EXIT_ERROR

    @property
    def problem(self) -> str:
        """The headline's words for it."""
        return "cannot tell the sample ids" if self.kind == "ids" else "could not finish"

    def summary(self, limit: int = 160) -> str:
        """One line: what happened, in which rank, where."""
        text = (self.error or self.message).splitlines()[0].strip()
        if self.where:
            text += f" (at {self.where})"
        return text if len(text) <= limit else text[:limit - 1] + "…"

    def lines(self) -> list[str]:
        """The report's lines under the headline."""
        text = (self.error or self.message).splitlines() or [""]
        lines = [f"✘ {text[0]}"]
        if self.kind == "ids":  # the batch's structure and the flags to pass
            lines += [f"  {line.strip()}" for line in text[1:]]
        if self.where:
            lines.append(f"  at {self.where}")
        for rank, text in (self.progress or {}).items():
            lines.append(f"  rank {rank}: {text}")
        if self.hint:
            lines.append(f"  {self.hint}")
        return lines

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.error or self.message, "rank": self.rank,
                "where": self.where,
                "progress": None if self.progress is None
                else {str(r): t for r, t in self.progress.items()},
                "hint": self.hint}


DEADLINE_HINT = ("An endless or long loader? Audit N batches per rank and epoch with "
                 "--steps N (steps=N in Python). A slow one? Raise --timeout (timeout_s=).")


def from_world(world, timeout_s: float) -> Failure:
    """The failure of a world that did not finish: the rank that raised, died or hung
    first (not one stopped because of it)."""
    failed = [world.ranks[r] for r in world.failed_ranks]
    bad = min(failed, key=lambda r: ("error", "timeout", "stopped").index(r.status))
    if bad.status == "timeout" or all(r.status != "error" for r in failed):
        progress = {r.rank: _progress(r) for r in world.ranks}
        stuck = [r.rank for r in world.ranks if r.status == "timeout"]
        return Failure(
            kind="hung", rank=stuck[0] if stuck else bad.rank, progress=progress,
            hint=DEADLINE_HINT,
            message=f"the audit did not finish within {timeout_s:g} s",
            error=(f"the audit could not finish: rank {bad.rank}: still running after "
                   f"{timeout_s:g} s ({_where(bad)})"))
    error = bad.error or bad.status
    kind_of = {"UnreadableBatch": "ids", "NotALoader": "usage", "ProcessDied": "died"}
    kind = kind_of.get(bad.error_type or "", "raised")
    if kind == "ids":
        message = error.split(": ", 1)[1]
        return Failure(kind=kind, rank=bad.rank, message=message, error=message)
    found = _WHERE.findall(bad.traceback or "")
    return Failure(kind=kind, rank=bad.rank, where=found[-1] if found else None,
                   message=error, hint=_hint(kind, bad.rank, len(world.ranks),
                                             _epoch_of(bad.last_progress)),
                   error=f"the audit could not finish: rank {bad.rank}: {error}")


def from_exception(exc: BaseException, rank: int, world_size: int | None = None,
                   epoch: int | None = None) -> Failure:
    """The failure of one rank whose collection raised ``exc`` (under torchrun), in
    ``epoch`` when known."""
    from talk_helpers.audit.collect import NotALoader
    from talk_helpers.audit.sample_ids import UnreadableBatch
    from talk_helpers.audit.where import raised_at
    from talk_helpers.runtime.report import mask_volatile

    if isinstance(exc, UnreadableBatch):
        return Failure(kind="ids", rank=rank, message=str(exc), error=str(exc))
    lines = str(exc).strip().splitlines()
    message = mask_volatile(f"{type(exc).__name__}: {lines[0] if lines else ''}")
    kind = "usage" if isinstance(exc, NotALoader) else "raised"
    return Failure(kind=kind, rank=rank, message=message,
                   where=None if kind == "usage" else raised_at(exc),
                   hint=_hint(kind, rank, world_size, epoch),
                   error=f"the audit could not finish: rank {rank}: {message}")


def _hint(kind: str, rank: int, world_size: int | None, epoch: int | None) -> str | None:
    """What to do next, for a rank that raised or died."""
    call = (f"make_loader({rank}, {world_size}, {epoch if epoch is not None else 0})"
            if world_size else f"make_loader({rank}, world_size, epoch)")
    if kind == "raised":
        return (f"To see the whole traceback, call your loader factory as rank {rank} did, "
                f"in one process: {call}, and iterate what it returns.")
    if kind == "died":
        return (f"Rank {rank}'s process ended without an error: killed (out of memory? a "
                "signal?) or ended by os._exit in your code or a library's. Audit fewer "
                "samples (--steps N) to tell memory from a crash.")
    return None


def _epoch_of(progress: str | None) -> int | None:
    found = re.match(r"epoch (\d+)", progress or "")
    return int(found.group(1)) if found else None


def _where(rank) -> str:
    return f"last: {rank.last_progress}" if rank.last_progress else \
        "stuck before its first batch"


def _progress(rank) -> str:
    state = {"ok": "finished", "error": "failed", "timeout": "still running",
             "stopped": "stopped"}.get(rank.status, rank.status)
    return f"{state}, {rank.last_progress}" if rank.last_progress else f"{state}, no progress"
