"""Does each rank read its own part of the data?

A dataset that learns its rank when it is built learns nothing if it is built before the
process group exists, in a launcher process, or under a launcher that sets no ``RANK``:
it believes it is rank 0 of 1, and every rank reads everything (Lightning-AI/litData#411).
The ranks then read the *same* ids, which tells this cause apart from a sharding rule that
merely overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from talk_helpers.arguments import require_int
from talk_helpers.checks.ids import ids_in
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.verdicts.audit_results import NothingToShow, audit_failed
from talk_helpers.verdicts.render import listing

__all__ = ["RankSplitReport", "check_rank_split"]


def check_rank_split(per_rank_ids, *, epoch: int = 0) -> RankSplitReport | NothingToShow:
    """Check that no id is read by two ranks; name the ranks that read identical data.

    ``per_rank_ids[r]`` holds every id rank ``r`` read (one epoch, any container
    :func:`talk_helpers.checks.ids_of` reads); or give the audit report itself, and its
    ``epoch`` is read (nothing to show when the audit failed).
    """
    if hasattr(per_rank_ids, "ids") and hasattr(per_rank_ids, "world_size"):
        report = per_rank_ids
        if audit_failed(report):
            return NothingToShow()
        require_int("epoch", epoch, minimum=0, maximum=report.n_epochs - 1)
        per_rank_ids = [report.ids(epoch, rank) for rank in range(report.world_size)]
    if not isinstance(per_rank_ids, list | tuple) or not per_rank_ids:
        raise TypeError(f"per_rank_ids must be a non-empty list with the ids of each rank, "
                        f"got {type(per_rank_ids).__name__}")
    sets = [np.unique(ids_in(ids, "per_rank_ids", f"per_rank_ids[{r}]"))
            for r, ids in enumerate(per_rank_ids)]
    groups: dict[bytes, list[int]] = {}
    for rank, ids in enumerate(sets):
        if ids.size:
            groups.setdefault(ids.tobytes(), []).append(rank)
    identical = tuple(tuple(ranks) for ranks in groups.values() if len(ranks) > 1)
    everything = np.concatenate(sets) if sets else np.empty(0, np.int64)
    values, counts = np.unique(everything, return_counts=True)
    shared = values[counts > 1]
    return RankSplitReport(per_rank=tuple(int(s.size) for s in sets),
                           shared_ids=tuple(int(i) for i in shared), identical=identical)


@dataclass(frozen=True, repr=False)
class RankSplitReport(OneLineReport):
    """Outcome of :func:`check_rank_split`: distinct ids ``per_rank``, the ids read by
    more than one rank, and groups of ranks that read exactly the same ids."""

    per_rank: tuple[int, ...]
    shared_ids: tuple[int, ...]
    identical: tuple[tuple[int, ...], ...]

    @property
    def ok(self) -> bool:
        """True when every id was read by at most one rank."""
        return not self.shared_ids

    def _verdict(self) -> str:
        world = len(self.per_rank)
        if self.ok:
            counts = ", ".join(map(str, self.per_rank))
            return f"rank split: {world} ranks read disjoint ids ({counts})"
        if self.identical:
            named = "; ".join(_ranks(g) for g in self.identical)
            size = self.per_rank[self.identical[0][0]]
            return (f"rank split: {named} read the same {size} ids — the dataset did not "
                    f"know its rank")
        shared = listing(list(self.shared_ids), len(self.shared_ids), 8)
        return f"rank split: {len(self.shared_ids)} ids read by more than one rank ({shared})"


def _ranks(ranks) -> str:
    """'ranks 0 and 1', 'ranks 0, 1 and 2'."""
    names = [str(r) for r in ranks]
    return f"ranks {', '.join(names[:-1])} and {names[-1]}"
