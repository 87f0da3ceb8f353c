"""What every library audit shares: the data (ids ``0..N-1`` in notebook 09's uneven
shards), the loader settings, and a quiet, reproducible run.

Everything is local and reproducible: the data are generated on first use into a
temporary folder whose name depends only on its sizes, so every rank (under fork or
spawn) finds the same files and no path reaches an output; Hugging Face runs offline
(:func:`talk_helpers.third_party.hub_offline`); every random choice is seeded, and where a
library would draw fresh entropy per process the factory stands in a generator seeded by
the rank.

DataLoader workers inside a rank are forked where the platform can fork: the rank is a
fresh process holding only the loader, and a spawned worker would import ``datasets``
again every epoch (seconds each). The ranks themselves start with ``TALK_START_METHOD``.

A loader is built afresh for every epoch, as non-persistent DataLoader workers see it:
each epoch they receive a new copy of the main process's dataset, so counters a library
increments inside a worker are lost, and whatever the main process sets (``set_epoch``)
is kept.
"""

from __future__ import annotations

import pickle
import warnings

import torch
from torch.utils.data import Dataset

from talk_helpers.private_dirs import private_dir


def cache_dir() -> str:
    """This user's folder for the data the library audits generate (see private_dirs)."""
    return private_dir("library_audit")


SHARD_SIZES = (26, 9, 14, 12)        # notebook 09's four uneven shards: 61 samples


SHARD_SIZES_MANY = (9, 4, 8, 6, 9, 5, 12, 8)  # the same 61 samples in eight shards


N_SAMPLES = sum(SHARD_SIZES)


BATCH_SIZE = 5


NUM_WORKERS = 2


STOP_AFTER = 3   # batches a rank takes before the checkpoint in the resume runs


def fork_context() -> dict:
    """DataLoader keyword: fork the workers where possible (see the module docstring)."""
    import multiprocessing

    if "fork" in multiprocessing.get_all_start_methods():
        return {"multiprocessing_context": "fork"}
    return {}


def loader_kwargs(num_workers: int) -> dict:
    return {"num_workers": num_workers, **(fork_context() if num_workers > 0 else {})}


def quiet() -> None:
    import logging

    logging.getLogger("torchdata.stateful_dataloader.stateful_dataloader").setLevel(
        logging.ERROR)  # the fast-forward notice, printed by every rank
    # litdata's drop_last=False warning, printed by every rank every epoch (notebook 10 shows
    # it once, from the source)
    logging.getLogger("litdata.streaming.dataset").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    warnings.filterwarnings("ignore", message=".*shardshuffle.*")
    warnings.filterwarnings("ignore", message=".*Too many dataloader workers.*")


class Ids(Dataset):
    """Map-style ids ``0..n-1``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return int(index)


def collate_ids(items: list) -> torch.Tensor:
    return torch.tensor(items, dtype=torch.int64)


_job_start = 0  # how many times the job has restarted, in make_resumed's simulated job


def job_start() -> int:
    """0 in a job's first start; 1 after the restart :func:`make_resumed` simulates. A
    factory standing in for a library that draws fresh entropy whenever a process starts
    seeds its draw with it: reproducible here, different after the restart."""
    return _job_start


def make_resumed(rank: int, world_size: int, epoch: int, *, build, stop_after: int = STOP_AFTER):
    """Take ``stop_after`` batches from ``build(rank, world_size, epoch)``, save its
    ``state_dict()`` (through pickle, as a checkpoint file would), then build a new loader
    the same way, as the restarted job (:func:`job_start` is 1 meanwhile), load the state
    and read it to the end. Returns every batch the "job" saw, before and after the
    restart, so ``audit`` can check the epoch as a whole."""
    global _job_start
    loader = build(rank, world_size, epoch)
    iterator = iter(loader)
    before = []
    for _ in range(stop_after):
        try:
            before.append(next(iterator))
        except StopIteration:
            break
    state = pickle.dumps(loader.state_dict())
    del iterator, loader
    _job_start += 1
    try:
        resumed = build(rank, world_size, epoch)
        resumed.load_state_dict(pickle.loads(state))
        return before + list(resumed)
    finally:
        _job_start -= 1
