"""Can every rank find the index cache that one rank built?

Megatron-LM's ``GPTDataset`` builds its index files (document, sample and shuffle
indices) on global rank 0 only, then every rank loads them. With the cache on a
filesystem every node shares, that works; on node-local disks, the ranks of every other
node find nothing (NVIDIA/Megatron-LM#907).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from talk_helpers.arguments import is_int
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.verdicts.render import listing

__all__ = ["CacheReport", "check_cache_visibility"]


def check_cache_visibility(per_rank: Sequence[tuple[int, str | None]]) -> CacheReport:
    """Check that every rank found the cache, and that all copies agree.

    ``per_rank[r]`` is ``(node, digest)``: the node rank ``r`` runs on and a digest of the
    cache it loaded (None when it found none).
    """
    if not isinstance(per_rank, Sequence) or isinstance(per_rank, str) or not per_rank:
        raise TypeError(f"per_rank must be a non-empty list of (node, digest) pairs, "
                        f"got {per_rank!r}")
    rows = []
    for rank, entry in enumerate(per_rank):
        if not (isinstance(entry, tuple | list) and len(entry) == 2 and is_int(entry[0])
                and (entry[1] is None or isinstance(entry[1], str))):
            raise TypeError(f"per_rank[{rank}] must be (node, digest or None), got {entry!r}")
        rows.append((int(entry[0]), entry[1]))
    return CacheReport(per_rank=tuple(rows))


@dataclass(frozen=True, repr=False)
class CacheReport(OneLineReport):
    """Outcome of :func:`check_cache_visibility`: ``(node, digest)`` for each rank."""

    per_rank: tuple[tuple[int, str | None], ...]

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks that found no cache."""
        return [r for r, (_, digest) in enumerate(self.per_rank) if digest is None]

    @property
    def versions(self) -> int:
        """How many different caches the ranks loaded."""
        return len({d for _, d in self.per_rank if d is not None})

    @property
    def ok(self) -> bool:
        """True when every rank found the cache and all copies are the same."""
        return not self.missing_ranks and self.versions == 1

    def _verdict(self) -> str:
        world = len(self.per_rank)
        nodes = sorted({node for node, _ in self.per_rank})
        if self.missing_ranks:
            missing = self.missing_ranks
            lost_nodes = sorted({self.per_rank[r][0] for r in missing})
            where = ", ".join(map(str, lost_nodes))
            who = (f"rank {missing[0]}" if len(missing) == 1
                   else f"ranks {listing(missing, len(missing), 8)}")
            return (f"index cache: {who} (node{'s' if len(lost_nodes) > 1 else ''} {where}) "
                    f"found none; {world - len(missing)} of {world} ranks did")
        copies = len({node for node, _ in self.per_rank})
        if self.versions > 1:
            return (f"index cache: every rank found one, but the {len(nodes)} nodes hold "
                    f"{self.versions} different versions")
        return (f"index cache: all {world} ranks found it on their node "
                f"({copies} {'copy' if copies == 1 else 'identical copies'})")
