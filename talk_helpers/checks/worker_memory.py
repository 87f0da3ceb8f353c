"""Does each DataLoader worker own a private copy of the dataset?

Python objects (lists and dicts of strings, ints, tuples) carry a reference count that
every read writes. Under fork, a worker shares its parent's pages until it writes one, so
reading every object copies every page they sit on ("copy-on-read",
pytorch/pytorch#13246); under spawn and forkserver, a worker unpickles its own full copy
when it starts. Tensors hold their data outside Python objects: a forked worker reads
them without writing, and spawn or forkserver send them through shared memory.

:func:`check_worker_memory` judges what each worker was measured to own because of the
dataset (see ``talk_helpers.lessons.production.measure_worker_memory``) against the size of
the dataset's payload (:func:`dataset_bytes`). The measurement varies from run to run; the
verdict does not, and the report shows only the payload and the threshold.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from talk_helpers.arguments import is_int
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.checks.sizes import size_text

__all__ = ["WorkerMemoryReport", "check_worker_memory", "dataset_bytes"]

OWNED_LIMIT = 0.5  # a worker owning half the payload or more holds a copy of it
NOISE_BYTES = 8 * 2**20  # a worker's heap moves by this much between measurements, copy
# or not (up to 7 MiB measured while a worker read a dataset of tensors): a copy smaller
# than this cannot be told from it, and costs little
_CONTAINERS = (list, tuple, dict, set, frozenset)


def check_worker_memory(owned_bytes: Sequence[int], dataset, *,
                        limit: float = OWNED_LIMIT) -> WorkerMemoryReport:
    """Check that no worker owns a private copy of the dataset.

    ``owned_bytes[w]`` is the unique memory worker ``w`` was measured to own because of
    the dataset; ``dataset`` is the dataset itself (its payload is measured with
    :func:`dataset_bytes`) or its payload in bytes. A worker owning at least ``limit``
    times the payload holds a copy. A payload under 8 MiB passes whatever was measured:
    a worker's heap moves by that much on its own, and such a copy costs little.
    """
    if not isinstance(owned_bytes, Sequence) or isinstance(owned_bytes, str) or not owned_bytes:
        raise TypeError(f"owned_bytes must be a non-empty sequence of byte counts, one per "
                        f"worker, got {owned_bytes!r}")
    for worker, value in enumerate(owned_bytes):
        if not isinstance(value, int | float | np.integer | np.floating) \
                or isinstance(value, bool):
            raise TypeError(f"owned_bytes[{worker}] must be a number of bytes, got {value!r}")
    payload = int(dataset) if is_int(dataset) else dataset_bytes(dataset)
    if payload <= 0:
        raise ValueError(f"dataset must hold some data to compare with, got a payload of "
                         f"{payload} bytes")
    if not (isinstance(limit, int | float) and 0 < limit <= 1):
        raise ValueError(f"limit must be a fraction in (0, 1], got {limit!r}")
    copies = () if payload < NOISE_BYTES else \
        tuple(w for w, value in enumerate(owned_bytes) if value >= limit * payload)
    return WorkerMemoryReport(workers=len(owned_bytes), payload_bytes=payload,
                              copies=copies, limit=float(limit))


def dataset_bytes(obj, *, _seen: set | None = None) -> int:
    """The bytes a dataset's payload takes: Python objects counted with their containers
    (``sys.getsizeof``), tensors and numpy arrays by their data. Walks the dataset's
    attributes and the containers in them; each object is counted once."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return int(obj.untyped_storage().nbytes())
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return int(obj.nbytes) + sum(dataset_bytes(x, _seen=seen) for x in obj.flat)
        return int(obj.nbytes)
    if isinstance(obj, Mapping):
        return sys.getsizeof(obj) + sum(dataset_bytes(k, _seen=seen) + dataset_bytes(v, _seen=seen)
                                        for k, v in obj.items())
    if isinstance(obj, _CONTAINERS):
        return sys.getsizeof(obj) + sum(dataset_bytes(x, _seen=seen) for x in obj)
    if isinstance(obj, str | bytes | bytearray | int | float | complex | bool) or obj is None:
        return sys.getsizeof(obj)
    attributes = getattr(obj, "__dict__", None)
    if attributes is None:
        return sys.getsizeof(obj)
    return sum(dataset_bytes(value, _seen=seen) for value in attributes.values())


@dataclass(frozen=True, repr=False)
class WorkerMemoryReport(OneLineReport):
    """Outcome of :func:`check_worker_memory`: ``copies`` lists the workers that own a
    private copy of the dataset's ``payload_bytes``."""

    workers: int
    payload_bytes: int
    copies: tuple[int, ...]
    limit: float

    @property
    def ok(self) -> bool:
        """True when no worker owns a copy of the dataset."""
        return not self.copies

    @property
    def copied_bytes(self) -> int:
        """What the copies cost together: one payload per copying worker."""
        return len(self.copies) * self.payload_bytes

    def _verdict(self) -> str:
        share = f"{self.limit:.0%}"
        if self.payload_bytes < NOISE_BYTES:
            return (f"worker memory: the dataset's {size_text(self.payload_bytes)} is less than "
                    f"a worker's heap moves by ({size_text(NOISE_BYTES)}): a copy would cost "
                    "little")
        if self.ok:
            return (f"worker memory: {self._workers()} the dataset's "
                    f"{size_text(self.payload_bytes)} (each owns less than {share} of it)")
        if self.workers == 1:
            who = "the only worker owns"
        elif len(self.copies) == self.workers:
            who = "both workers own" if self.workers == 2 else f"all {self.workers} workers own"
        else:
            who = f"{len(self.copies)} of {self.workers} workers own"
        return (f"worker memory: {who} a private copy of the dataset's "
                f"{size_text(self.payload_bytes)} (at least {share} of it each): "
                f"{size_text(self.copied_bytes)} in copies")

    def _workers(self) -> str:
        return "the only worker shares" if self.workers == 1 else f"{self.workers} workers share"
