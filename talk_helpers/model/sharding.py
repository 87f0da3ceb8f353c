"""How shards reach a (rank, worker): the policies the notebooks compare, one rule each.

Shards hold consecutive sample ids: shard 0 holds ids ``0..size0-1``, shard 1 the next
ones, and so on.
"""

from collections.abc import Sequence

import numpy as np

from talk_helpers.arguments import check_choice

__all__ = ["POLICIES", "blocks", "stream_ids", "worker_streams"]

POLICIES = ("round_robin", "contiguous", "modulo_samples", "nested_modulo", "hf_datasets")
"""How samples reach a (rank, worker):

- ``round_robin``: whole shards, rank r takes shards r, r+W, …; then worker w takes the
  rank's shards w, w+num_workers, … (HF ``datasets`` when shards divide by world size,
  webdataset's ``split_by_node`` + ``split_by_worker``).
- ``contiguous``: whole shards, a contiguous block of shards per rank, then a contiguous
  block of the rank's shards per worker (sizes differ by at most one shard).
- ``modulo_samples``: sample i goes to the (rank, worker) with global index
  ``i % (W * num_workers) == rank * num_workers + worker`` (shard sizes do not matter).
- ``nested_modulo``: the talk's two-level modulo, ``i % W == rank and i % num_workers ==
  worker``; when gcd(W, num_workers) > 1 some workers get nothing.
- ``hf_datasets``: ``datasets`` 5.2's ``split_dataset_by_node`` (strategy ``"auto"``) on a
  ``to_iterable_dataset(num_shards)`` dataset. When the shard count divides by W it is
  ``round_robin``. Otherwise every rank keeps *every* shard: worker w reads shards w,
  w+num_workers, … and keeps one example in W of its own stream (position % W == rank), so
  ranks differ by single examples, not by shards.
"""


def stream_ids(shard_sizes: Sequence[int], rank: int, world_size: int, worker: int,
               num_workers: int, policy: str = "round_robin") -> np.ndarray:
    """The ids worker ``worker`` of ``num_workers`` on rank ``rank`` yields, in order."""
    check_choice("policy", policy, POLICIES)
    sizes = [int(s) for s in shard_sizes]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    total = int(starts[-1])

    def shards(indices) -> np.ndarray:
        parts = [np.arange(starts[s], starts[s + 1], dtype=np.int64) for s in indices]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    everyone = list(range(len(sizes)))
    if policy == "round_robin" or (policy == "hf_datasets" and len(sizes) % world_size == 0):
        return shards(everyone[rank::world_size][worker::num_workers])
    if policy == "contiguous":
        return shards(blocks(blocks(everyone, world_size)[rank], num_workers)[worker])
    if policy == "modulo_samples":
        return np.arange(rank * num_workers + worker, total, world_size * num_workers,
                         dtype=np.int64)
    if policy == "hf_datasets":  # strategy "examples", applied inside each worker
        return shards(everyone[worker::num_workers])[rank::world_size]
    ids = np.arange(total, dtype=np.int64)  # nested_modulo
    return ids[(ids % world_size == rank) & (ids % num_workers == worker)]


def worker_streams(shard_sizes: Sequence[int], *, nodes: int, workers: int,
                   policy: str = "round_robin") -> list[list[np.ndarray]]:
    """The sample ids each worker of each rank yields, in order: ``[rank][worker]``.

    With ``workers=0`` each rank has a single stream (index 0)."""
    n_streams = max(workers, 1)
    return [[stream_ids(shard_sizes, rank, nodes, w, n_streams, policy)
             for w in range(n_streams)] for rank in range(nodes)]


def blocks(items: list, n: int) -> list[list]:
    """``n`` contiguous blocks whose lengths differ by at most one (the first ones longer)."""
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        out.append(items[start:stop])
        start = stop
    return out
