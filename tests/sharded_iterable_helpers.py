"""What the tests of the reference dataset share: ids of batches, shards as ranges, and
refusals read without keeping a stopped loader's workers alive."""

import numpy as np
import torch

TIMEOUT = 120  # seconds for a DataLoader with workers on a busy 2-core machine


def ids(items) -> list[int]:
    """Every sample id in ``items`` (tensors, lists of them, ints), in order."""
    out = []
    for item in items:
        if isinstance(item, torch.Tensor):
            out += item.reshape(-1).tolist()
        elif isinstance(item, (list, tuple)):
            out += ids(item)
        else:
            out.append(int(item))
    return out


def shard_ranges(sizes) -> list[range]:
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return [range(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def refusal(call, error=ValueError) -> str:
    """The message of the ``error`` that ``call()`` raises. Its traceback is dropped so
    that a loader it stopped lets its workers go now, not at a later garbage collection
    (the traceback keeps the loader's iterator in a reference cycle)."""
    try:
        call()
    except error as exc:
        message = str(exc)
        exc.__traceback__ = None
        return message
    raise AssertionError(f"no {error.__name__}")
