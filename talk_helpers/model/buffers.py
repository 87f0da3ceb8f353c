"""The buffer shuffles libraries use (HF datasets, WebDataset): a stream shuffled through a
buffer, and WebDataset's unbatch → shuffle → rebatch in the main process."""

import random
from collections.abc import Iterable, Iterator

__all__ = ["buffer_shuffle", "unbatch_shuffle_rebatch"]


def buffer_shuffle(items: Iterable, buffer_size: int, rng: random.Random) -> Iterator:
    """Shuffle a stream through a buffer, as HF datasets and WebDataset do.

    Fill a buffer of ``buffer_size`` items; then for every new item pick a random slot,
    yield what is there and put the new item in its place; at the end, yield the rest in
    random order. An item can move forward by at most ``buffer_size - 1`` places, so a
    small buffer over sorted data stays nearly sorted.
    """
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be at least 1, got {buffer_size}")
    buffer: list = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        slot = rng.randrange(buffer_size)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


def unbatch_shuffle_rebatch(batches: Iterable, buffer_size: int, batch_size: int,
                            rng: random.Random, drop_last: bool = False) -> Iterator[list]:
    """The WebDataset pattern ``loader.unbatched().shuffle(n).batched(b)``: take the
    batches workers made, split them into samples, buffer-shuffle those in the main
    process and batch again, so one batch can hold samples of every worker."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")

    def samples():
        for batch in batches:
            if hasattr(batch, "tolist"):
                batch = batch.tolist()
            yield from batch

    batch: list = []
    for sample in buffer_shuffle(samples(), buffer_size, rng):
        batch.append(sample)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch
