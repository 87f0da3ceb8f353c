"""Datasets of sample ids for code that needs one it can import: figures, benchmarks, tests
and notebook 04's samplers. The datasets the notebooks teach are written in their cells.

Each sample is just its id, so a batch shows at a glance where every sample came from.
"""

from torch.utils.data import Dataset, IterableDataset, get_worker_info

__all__ = ["MapStyleIds", "WorkerStreams"]


class MapStyleIds(Dataset):
    """Ids ``0..size-1``, indexed: ``dataset[i]`` is ``i``."""

    def __init__(self, size=100):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return index


class WorkerStreams(IterableDataset):
    """DataLoader worker ``w`` yields the ids ``streams[w]``, in order (with
    ``num_workers=0`` the main process yields ``streams[0]``): what a sharding rule gives
    each worker (:mod:`talk_helpers.model.sharding`), replayed through a real DataLoader."""

    def __init__(self, streams):
        self.streams = [[int(i) for i in stream] for stream in streams]
        if not self.streams:
            raise ValueError("streams must hold one sequence of ids per worker, got none")

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        if num_workers != len(self.streams):
            raise ValueError(f"streams holds {len(self.streams)} streams, one per worker, "
                             f"but the DataLoader runs {num_workers} worker(s)")
        yield from self.streams[worker]
