"""Notebook 04's restart check: the same seed gives the same epochs in a fresh process.

Run as a script it prints a digest of two epochs of a seeded loader whose augmentations
come from DataLoader's worker seeding, so a notebook can compare a fresh process with
its own kernel:

    python -m talk_helpers.lessons.datasets.seeds --seed 0 [--start-method spawn]

(Notebook 04's datasets are written in its cells; this one is machinery the check runs.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.arguments import require_int

__all__ = ["digest", "main"]


class _AugmentedIds(IterableDataset):
    """Ids sharded over workers, each with an augmentation drawn from Python's ``random``,
    which DataLoader seeds in every worker from ``base_seed + worker id``."""

    def __init__(self, size: int):
        self.size = size

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for i in range(worker, self.size, workers):
            yield {"id": i, "aug": random.randrange(100)}


def digest(seed: int, epochs: int = 2, num_workers: int = 1) -> dict:
    """Seed torch, read ``epochs`` epochs of a loader whose augmentations come from
    DataLoader's worker seeding, and summarise what came out: the first augmentations of
    each epoch and a hash of every id and augmentation."""
    require_int("seed", seed)
    require_int("epochs", epochs, minimum=1)
    require_int("num_workers", num_workers, minimum=0)
    torch.manual_seed(seed)
    loader = DataLoader(_AugmentedIds(24), batch_size=4, num_workers=num_workers,
                        persistent_workers=num_workers > 0)
    runs = []
    for _ in range(epochs):
        batches = list(loader)
        runs.append([torch.cat([b["id"] for b in batches]).tolist(),
                     torch.cat([b["aug"] for b in batches]).tolist()])
    text = json.dumps(runs)
    return {"seed": seed, "first augmentations": [augs[:6] for _, augs in runs],
            "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-method", default=None,
                        choices=("fork", "forkserver", "spawn"))
    args = parser.parse_args(argv)
    if args.start_method:
        torch.multiprocessing.set_start_method(args.start_method, force=True)
    if args.start_method == "forkserver":  # as in the notebooks: workers fork with torch loaded
        torch.multiprocessing.set_forkserver_preload(["torch"])
    print(json.dumps(digest(args.seed)))


if __name__ == "__main__":
    main()
