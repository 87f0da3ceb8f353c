"""Record what a real DataLoader did: which worker built each batch, in which order the
main process received the batches, and which index batches it sent out.

Workers never print: every sample carries its worker id back (:func:`tag_workers`) and
the main process assembles the record.
"""

import re
from dataclasses import dataclass, field

from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

__all__ = ["Batch", "LoaderRun", "run_loader", "list_batches", "tag_workers", "WorkerCrashed"]


@dataclass(frozen=True)
class Batch:
    """One batch as the main process received it: its sample ids and the worker that built
    it (-1: the main process itself, num_workers=0)."""

    ids: tuple
    worker: int

    def __len__(self):
        return len(self.ids)


@dataclass
class LoaderRun:
    """One epoch of a real DataLoader, seen from the main process."""

    kind: str                       # "map-style" or "iterable"
    batch_size: int
    num_workers: int
    prefetch_factor: int | None
    batches: list = field(default_factory=list)   # Batch, in the order received
    sends: list = field(default_factory=list)     # index batches taken from the sampler
    events: list = field(default_factory=list)    # ("send", k) / ("receive", k), in order

    @property
    def ids(self):
        """Every sample id, in the order received."""
        return [i for batch in self.batches for i in batch.ids]

    @property
    def sizes(self):
        return [len(batch) for batch in self.batches]

    @property
    def pairs(self):
        """(sample id, worker) for every sample received."""
        return [(i, batch.worker) for batch in self.batches for i in batch.ids]

    def batches_of(self, worker):
        return [batch for batch in self.batches if batch.worker == worker]

    def __repr__(self):
        head = (f"{self.kind} dataset · batch_size={self.batch_size} · "
                f"num_workers={self.num_workers} · {len(self.batches)} batches, "
                f"{len(self.ids)} samples")
        rows = [f"  batch {k:>2} · {_who(b.worker):>8} · {list(b.ids)}"
                for k, b in enumerate(self.batches)]
        return "\n".join([head, *rows])


def _who(worker):
    return "main" if worker < 0 else f"worker {worker}"


def run_loader(dataset, *, batch_size, num_workers, **loader_kwargs) -> LoaderRun:
    """Iterate ``DataLoader(dataset, batch_size, num_workers, ...)`` for one epoch and
    record it. ``dataset`` yields plain ids; it is wrapped so each sample carries its
    worker id."""
    log = []
    loader = _RecordingDataLoader(tag_workers(dataset), batch_size=batch_size,
                                  num_workers=num_workers, **loader_kwargs)
    loader.send_log = log
    run = LoaderRun(kind="iterable" if isinstance(dataset, IterableDataset) else "map-style",
                    batch_size=batch_size, num_workers=num_workers,
                    prefetch_factor=loader.prefetch_factor)
    for batch in loader:
        workers = set(batch["worker"].tolist())
        if len(workers) != 1:
            raise AssertionError(f"a batch mixes workers {sorted(workers)}")
        log.append(("receive", len(run.batches)))
        run.batches.append(Batch(tuple(batch["id"].tolist()), workers.pop()))
    run.sends = [payload for kind, payload in log if kind == "send"]
    sent = 0
    for kind, payload in log:
        if kind == "send":
            run.events.append(("send", sent))
            sent += 1
        else:
            run.events.append((kind, payload))
    return run


# --- Tagging: which worker produced each sample --------------------------------------------
# Workers must not print. Instead each sample carries its worker id back to the main process,
# where the record is made. In the main process (num_workers=0) the worker id is -1.

def _worker_id():
    info = get_worker_info()
    return -1 if info is None else info.id


class _TaggedMapStyle(Dataset):
    """Sample ``i`` of a map-style dataset becomes ``{"id": dataset[i], "worker": w}``."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return {"id": self.dataset[index], "worker": _worker_id()}


class _TaggedIterable(IterableDataset):
    """Each sample of an iterable dataset becomes ``{"id": sample, "worker": w}``."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        worker = _worker_id()
        for sample in self.dataset:
            yield {"id": sample, "worker": worker}


def tag_workers(dataset):
    """``dataset`` (iterable or map-style) with every sample tagged by the worker that
    produced it: ``{"id": sample, "worker": w}``, ``w = -1`` in the main process."""
    if isinstance(dataset, IterableDataset):
        return _TaggedIterable(dataset)
    return _TaggedMapStyle(dataset)


class _RecordingIndexSampler:
    """Passes the real index sampler through, noting each index batch as it is sent."""

    def __init__(self, sampler, log):
        self.sampler, self.log = sampler, log

    def __iter__(self):
        for index in self.sampler:
            self.log.append(("send", list(index) if index is not None else None))
            yield index

    def __len__(self):
        return len(self.sampler)


class _RecordingDataLoader(DataLoader):
    send_log = None

    @property
    def _index_sampler(self):
        sampler = super()._index_sampler
        if self.send_log is None:
            return sampler
        return _RecordingIndexSampler(sampler, self.send_log)


class WorkerCrashed(RuntimeError):
    """A DataLoader worker process died; the message is the worker's own last error line."""


# What a spawned or forkserver worker says when it cannot find a class or function that
# pickle stored as ``module.name``: the module it looked in is a path on this machine.
_NOT_FOUND = re.compile(r"Can't get attribute '(?P<name>[^']+)' on <module '(?P<module>[^']+)'"
                        r"(?: from '[^']*'| \(built-in\))?>")
_NOTEBOOK_MAINS = ("__main__", "__mp_main__", "talk_helpers.runtime.spawned_child")


def _worker_error(cause: str) -> str:
    """The worker's last error line, without addresses or paths of this machine; a name the
    worker could not find in the notebook's main module says what to do about it."""
    cause = re.sub(r"0x[0-9a-f]+", "…", cause)
    found = _NOT_FOUND.search(cause)
    if found is None:
        return cause
    if found["module"] not in _NOTEBOOK_MAINS:
        return _NOT_FOUND.sub(r"Can't get attribute '\g<name>' on module '\g<module>'", cause)
    return (f"{cause[:found.start()]}Can't get attribute '{found['name']}' on the notebook's "
            f"main module{cause[found.end():]}. `{found['name']}` was defined in an ordinary "
            f"cell, which a worker started with spawn or forkserver cannot import: start that "
            f"cell with %%importable")


def list_batches(loader):
    """``list(loader)``, except that when a worker process dies, the error raised names
    the worker's own exception instead of only its pid. (The worker prints its traceback
    to stderr, which a notebook may show late or not at all; here it is read back.)"""
    import os
    import sys
    import tempfile

    __tracebackhide__ = True  # IPython shows the notebook's line, not this function's

    with tempfile.TemporaryFile(mode="w+b") as capture:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)  # spawned and forked workers inherit file descriptor 2
        try:
            return list(loader)
        except RuntimeError as error:
            if "exited unexpectedly" not in str(error):
                raise
            capture.seek(0)
            lines = capture.read().decode(errors="replace").strip().splitlines()
            cause = lines[-1] if lines else "no error text"
            raise WorkerCrashed(f"a DataLoader worker exited: {_worker_error(cause)}") from None
        finally:
            os.dup2(saved, 2)
            os.close(saved)
