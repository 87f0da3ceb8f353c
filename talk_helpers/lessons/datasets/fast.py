"""Token datasets for notebook 08 and the throughput benchmark: one memmap, three loaders.

All three read the same file of int32 tokens (``n_samples`` rows of ``seq_len``) and apply
the same per-sample work, a masked-language-model corruption (:func:`mask_tokens`), so
that their speeds differ only in how samples travel from the workers:

- :class:`TokenMapDataset`: map-style, one ``__getitem__`` per sample (use a sampler);
- :class:`TokenIterableDataset`: iterable, yields one sample at a time;
- :class:`TokenBatchedIterableDataset`: iterable, yields whole batches built in the
  worker (use ``DataLoader(batch_size=None)``).

The memmap is opened lazily in each process, so pickling a dataset to a spawned worker
sends a path, not the tokens.
"""

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from talk_helpers.arguments import require_int

VOCAB_SIZE = 32_000
MASK_ID = 3
MASK_FRACTION = 0.15


def make_token_memmap(path, n_samples: int, seq_len: int = 128, seed: int = 0) -> Path:
    """Write ``n_samples`` rows of ``seq_len`` random int32 tokens to ``path``; return it."""
    if n_samples < 1 or seq_len < 1:
        raise ValueError(f"n_samples and seq_len must be ≥ 1, got {n_samples}, {seq_len}")
    path = Path(path)
    rng = np.random.default_rng(seed)
    tokens = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32,
                                       shape=(n_samples, seq_len))
    for start in range(0, n_samples, 65_536):
        stop = min(start + 65_536, n_samples)
        tokens[start:stop] = rng.integers(4, VOCAB_SIZE, size=(stop - start, seq_len),
                                          dtype=np.int32)
    tokens.flush()
    del tokens
    return path


def open_tokens(path) -> np.ndarray:
    """The token file as a read-only memmap of shape (n_samples, seq_len)."""
    return np.load(path, mmap_mode="r")


def mask_tokens(tokens: np.ndarray, index: int, work: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """BERT-style corruption of one sample, seeded by its index: (input_ids, labels).

    ``work`` repeats the corruption (0 = copy only), to dial the CPU cost per sample.
    The result depends only on the tokens and the index, never on the worker.
    """
    input_ids = tokens.astype(np.int64)
    labels = input_ids.copy()
    for round_ in range(work):
        rng = np.random.default_rng((index, round_))
        masked = rng.random(input_ids.shape[0]) < MASK_FRACTION
        input_ids = np.where(masked, MASK_ID, labels)
    return input_ids, labels


def make_sample(tokens: np.ndarray, index: int, work: int) -> dict:
    input_ids, labels = mask_tokens(tokens, index, work)
    return {"id": index, "input_ids": torch.from_numpy(input_ids),
            "labels": torch.from_numpy(labels)}


class _TokenFile:
    """Shared plumbing: lazy memmap, length, per-worker ranges."""

    def __init__(self, path, work: int = 1, rank: int = 0, world_size: int = 1):
        if work < 0:
            raise ValueError(f"work must be ≥ 0, got {work}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
        self.path = str(path)
        self.work = work
        self.rank = rank
        self.world_size = world_size
        self._tokens = None
        self.n_samples, self.seq_len = open_tokens(self.path).shape

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = open_tokens(self.path)
        return self._tokens

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tokens"] = None
        return state

    def _my_range(self) -> range:
        """A contiguous block of ids for this (rank, worker); blocks cover every id once."""
        info = get_worker_info()
        workers = 1 if info is None else info.num_workers
        worker = 0 if info is None else info.id
        parts = self.world_size * workers
        part = self.rank * workers + worker
        return range(part * self.n_samples // parts, (part + 1) * self.n_samples // parts)


class TokenMapDataset(_TokenFile, Dataset):
    """Map-style: the sampler picks ids, each worker fetches them one ``__getitem__`` at a time."""

    def __len__(self) -> int:
        return self.n_samples

    def __getitem__(self, index: int) -> dict:
        return make_sample(self.tokens[index], int(index), self.work)


class TokenIterableDataset(_TokenFile, IterableDataset):
    """Iterable, per-sample: each worker yields its block of ids one sample at a time."""

    def __iter__(self):
        tokens = self.tokens
        for index in self._my_range():
            yield make_sample(tokens[index], index, self.work)


class TokenBatchedIterableDataset(_TokenFile, IterableDataset):
    """Iterable, batched in the worker: yields dicts of stacked tensors, ``batch_size`` rows.

    Reads one slice of the memmap per batch and returns three tensors instead of
    ``batch_size`` dicts; the per-sample work is the same. Use with ``batch_size=None``.
    The last batch of each worker may be short.
    """

    def __init__(self, path, batch_size: int, work: int = 1, rank: int = 0,
                 world_size: int = 1):
        require_int("batch_size", batch_size, minimum=1)
        super().__init__(path, work=work, rank=rank, world_size=world_size)
        self.batch_size = batch_size

    def __iter__(self):
        tokens = self.tokens
        ids = self._my_range()
        for start in range(ids.start, ids.stop, self.batch_size):
            stop = min(start + self.batch_size, ids.stop)
            block = np.asarray(tokens[start:stop])
            input_ids = np.empty(block.shape, dtype=np.int64)
            labels = np.empty(block.shape, dtype=np.int64)
            for row, index in enumerate(range(start, stop)):
                input_ids[row], labels[row] = mask_tokens(block[row], index, self.work)
            yield {"id": torch.arange(start, stop), "input_ids": torch.from_numpy(input_ids),
                   "labels": torch.from_numpy(labels)}
