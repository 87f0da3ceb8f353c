"""The datasets of notebooks 01 and 02: sample ids 0..size-1, the broken versions included.

Each sample is just its id, so a batch shows at a glance where every sample came from.
The classes are short on purpose: the notebooks print their source.
"""

from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

__all__ = [
    "MapStyleIds", "IterableIds", "NaiveShardedIds", "ModuloShardedIds", "BlockShardedIds",
    "TaggedMapStyle", "TaggedIterable", "tag_workers", "current_worker", "block_bounds",
    "mystery_loader",
]


class MapStyleIds(Dataset):
    """Map-style: DataLoader asks for sample ``index``; we return it."""

    def __init__(self, size=100):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        # A real dataset reads, decodes and transforms sample `index` here.
        return index


class IterableIds(IterableDataset):
    """Iterable, no sharding: every worker that iterates it yields every sample."""

    def __init__(self, size=100):
        self.size = size

    def __iter__(self):
        # A real dataset streams samples from files here.
        yield from range(self.size)


class NaiveShardedIds(IterableDataset):
    """Worker i keeps the ids with ``id % num_workers == i``. Crashes with num_workers=0."""

    def __init__(self, size=100):
        self.size = size

    def __iter__(self):
        info = get_worker_info()  # None in the main process
        for sample in range(self.size):
            if sample % info.num_workers == info.id:
                yield sample


def current_worker():
    """(worker id, number of workers) inside a worker; (0, 1) in the main process."""
    info = get_worker_info()
    if info is None:  # num_workers=0: the main process iterates the dataset itself
        return 0, 1
    return info.id, info.num_workers


class ModuloShardedIds(IterableDataset):
    """The fix: the same modulo shard, and the main process counts as the only worker."""

    def __init__(self, size=100):
        self.size = size

    def __iter__(self):
        worker, num_workers = current_worker()
        for sample in range(self.size):
            if sample % num_workers == worker:
                yield sample


def block_bounds(size, worker, num_workers):
    """[start, stop) of ``worker``'s contiguous block; the first ``size % num_workers``
    blocks hold one sample more."""
    base, extra = divmod(size, num_workers)
    start = worker * base + min(worker, extra)
    return start, start + base + (1 if worker < extra else 0)


class BlockShardedIds(IterableDataset):
    """Worker i yields one contiguous block of ids: another valid partition."""

    def __init__(self, size=100):
        self.size = size

    def __iter__(self):
        worker, num_workers = current_worker()
        start, stop = block_bounds(self.size, worker, num_workers)
        yield from range(start, stop)


# --- Notebook 02's exercise: a loader to diagnose with audit, before reading its source ------

class _EvenBlockIds(IterableDataset):
    """Each worker yields ``size // num_workers`` neighbouring ids (the bug of the exercise:
    the last ``size % num_workers`` ids belong to no worker)."""

    def __init__(self, size):
        self.size = size

    def __iter__(self):
        worker, num_workers = current_worker()
        per_worker = self.size // num_workers
        yield from range(worker * per_worker, (worker + 1) * per_worker)


def mystery_loader(rank, world_size, epoch, size=25, num_workers=2, batch_size=4):
    """A loader someone hands you: ``make_loader(rank, world_size, epoch)`` for ``audit``."""
    return DataLoader(_EvenBlockIds(size), batch_size=batch_size, num_workers=num_workers)


# --- Tagging: which worker produced each sample --------------------------------------------
# Workers must not print. Instead each sample carries its worker id back to the main process,
# where the notebook shows it. In the main process (num_workers=0) the worker id is -1.

def _worker_id():
    info = get_worker_info()
    return -1 if info is None else info.id


class TaggedMapStyle(Dataset):
    """Wraps a map-style dataset: sample ``i`` becomes ``{"id": dataset[i], "worker": w}``."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return {"id": self.dataset[index], "worker": _worker_id()}


class TaggedIterable(IterableDataset):
    """Wraps an iterable dataset: each sample becomes ``{"id": sample, "worker": w}``."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        worker = _worker_id()
        for sample in self.dataset:
            yield {"id": sample, "worker": worker}


def tag_workers(dataset):
    """The tagging wrapper that fits ``dataset`` (iterable or map-style)."""
    if isinstance(dataset, IterableDataset):
        return TaggedIterable(dataset)
    return TaggedMapStyle(dataset)
