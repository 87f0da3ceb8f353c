"""The order in which a DataLoader over an IterableDataset yields batches, computed without
starting a worker.

Every worker batches its own stream (so each ends with its own partial batch, or drops it
with ``drop_last``), and the main process takes one batch from each worker in turn,
skipping a worker once it is exhausted (``in_order=True``, the default). With no workers
the loader is one stream.

    >>> loader_batches([[0, 2, 4], [1, 3]], batch_size=2)
    [[0, 2], [1, 3], [4]]
"""

from collections.abc import Sequence

__all__ = ["batched", "loader_batches", "round_robin"]


def batched(stream: Sequence, batch_size: int, drop_last: bool = False) -> list:
    """``stream`` cut into batches of ``batch_size`` (the last one partial unless
    ``drop_last``), each a slice of the stream (a list, or an array for an array)."""
    stop = len(stream) - len(stream) % batch_size if drop_last else len(stream)
    return [stream[i:i + batch_size] for i in range(0, stop, batch_size)]


def round_robin(per_worker: Sequence[Sequence]) -> list:
    """One item from each worker in turn, skipping workers that are done."""
    rounds = max((len(items) for items in per_worker), default=0)
    return [items[i] for i in range(rounds) for items in per_worker if i < len(items)]


def loader_batches(streams: Sequence[Sequence], batch_size: int,
                   drop_last: bool = False) -> list:
    """The batches a DataLoader yields when worker ``w`` iterates ``streams[w]``."""
    return round_robin([batched(stream, batch_size, drop_last) for stream in streams])
