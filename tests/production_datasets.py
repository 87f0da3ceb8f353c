"""Datasets for the tests of notebook 11's machinery, importable by spawned workers."""

from functools import partial
from multiprocessing import shared_memory

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


def _worker():
    info = get_worker_info()
    return (info.id, info.num_workers) if info else (0, 1)


def _captions(n):
    return [f"caption {i:06d} " + "words " * 80 for i in range(n)]


class ListCaptions(IterableDataset):
    """Captions in a Python list: each worker ends up owning a copy."""

    def __init__(self, n):
        self.captions = _captions(n)

    def __iter__(self):
        worker, workers = _worker()
        for i in range(worker, len(self.captions), workers):
            yield len(self.captions[i])


class TensorCaptions(IterableDataset):
    """The same captions packed in tensors: shared, never copied."""

    def __init__(self, n):
        encoded = [c.encode() for c in _captions(n)]
        self.data = torch.frombuffer(bytearray(b"".join(encoded)), dtype=torch.uint8)
        self.ends = torch.tensor([len(e) for e in encoded]).cumsum(0)

    def __iter__(self):
        worker, workers = _worker()
        ends = self.ends.numpy()
        for i in range(worker, len(ends), workers):
            yield int(ends[i] - (ends[i - 1] if i else 0))


class Images(IterableDataset):
    def __init__(self, n, dtype):
        self.n, self.dtype = n, dtype

    def __iter__(self):
        worker, workers = _worker()
        for i in range(worker, self.n, workers):
            yield torch.full((3, 224, 224), i % 256, dtype=self.dtype)


def image_loader(dtype=torch.float32, n=256, num_workers=2, prefetch_factor=2):
    return DataLoader(Images(n, dtype), batch_size=32, num_workers=num_workers,
                      prefetch_factor=prefetch_factor)


class FramesInSharedMemory(IterableDataset):
    def __iter__(self):
        worker, workers = _worker()
        for i in range(worker, 16, workers):
            block = shared_memory.SharedMemory(create=True, size=4 * 2**20)
            np.ndarray(4 * 2**20, np.uint8, buffer=block.buf)[:] = i
            yield block.name


def frame_loader():
    return DataLoader(FramesInSharedMemory(), batch_size=None, num_workers=2)


def raising_loader():
    raise ValueError("no loader today")


class ResumableIds(IterableDataset):
    """Skips what the loop took, in every later epoch too."""

    def __init__(self, size):
        self.size, self.skip = size, 0

    def state_dict(self, consumed):
        return {"consumed": consumed}

    def load_state_dict(self, state):
        self.skip = state["consumed"]

    def __iter__(self):
        worker, workers = _worker()
        yield from range(self.skip + worker, self.size, workers)


class EpochResumable(IterableDataset):
    """Skips only in the epoch its resume point names; the epoch is in shared memory."""

    def __init__(self, size):
        self.size, self.resume_at = size, (0, 0)
        self.epoch = torch.zeros((), dtype=torch.long).share_memory_()

    def set_epoch(self, epoch):
        self.epoch.fill_(epoch)

    def state_dict(self, consumed):
        return {"epoch": int(self.epoch), "consumed": consumed}

    def load_state_dict(self, state):
        self.resume_at = (state["epoch"], state["consumed"])

    def __iter__(self):
        worker, workers = _worker()
        epoch, taken = self.resume_at
        skip = taken if int(self.epoch) == epoch else 0
        yield from range(skip + worker, self.size, workers)


uint8_image_loader = partial(image_loader, torch.uint8)


def write_caption_files(n, folder):
    """Captions packed into two .npy files (bytes, ends), for :class:`MappedCaptions`."""
    encoded = [c.encode() for c in _captions(n)]
    np.save(f"{folder}/bytes.npy", np.frombuffer(b"".join(encoded), dtype=np.uint8))
    np.save(f"{folder}/ends.npy", np.cumsum([len(e) for e in encoded]))
    return folder


class MappedCaptions(IterableDataset):
    """Captions in files each worker maps: a path is all it receives."""

    def __init__(self, folder):
        self.folder = folder

    def __iter__(self):
        worker, workers = _worker()
        ends = np.load(f"{self.folder}/ends.npy", mmap_mode="r")
        for i in range(worker, len(ends), workers):
            yield int(ends[i] - (ends[i - 1] if i else 0))


def caption_loader(make_dataset):
    """One worker, the start method left to the default (compare_in_small_shm sets it)."""
    return DataLoader(make_dataset(), batch_size=32, num_workers=1)
