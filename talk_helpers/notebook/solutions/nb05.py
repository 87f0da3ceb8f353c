"""Solutions to the exercises of notebook 05 (DDP sharding)."""

GATED = True  # each opens once its exercise has been attempted

SOLUTIONS = {
    1: '''
# Rank r keeps ids with i % 2 == r, so its ids all have the parity of r. Worker w keeps
# ids with i % 6 == w, which has the parity of w. A worker whose parity differs from its
# rank's never matches: on each rank, 3 of the 6 workers are idle.
my_idle = [(r, w) for r in range(2) for w in range(6) if (w - r) % 2 != 0]
grade_idle_workers(my_idle)
''',
    2: '''
# Every rank gets ceil(10 / 4) = 3 indices: 12 in total, so 2 indices are read twice.
# With drop_last=True every rank gets floor(10 / 4) = 2: 8 in total, 2 never read.
my_repeated, my_dropped = 2, 2
grade_sampler_counts(my_repeated, my_dropped)
''',
    3: '''
from talk_helpers.lessons.datasets.ddp import make_mystery_loader

report = audit(make_mystery_loader, world_size=2, epochs=1, expected=24)
report
# Every id is read 3 times. Not world_size (2) times, so the ranks are sharded: rank 0
# reads even ids, rank 1 odd ones. 3 is the loader's num_workers, and each of a rank's
# 3 workers reads all 12 of the rank's ids: the dataset never asks get_worker_info().
my_diagnosis = "no worker sharding"
''',
    4: '''
%%importable
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

SIZE, BATCH_SIZE = 4097, 32
EQUAL_BY = "drop"  # the last size % world_size ids of each epoch's permutation sit out


class MyDataset(IterableDataset):
    def __init__(self, size, rank, world_size, seed=0):
        self.size, self.rank, self.world_size, self.seed = size, rank, world_size, seed
        # Shared memory, so that set_epoch also reaches persistent workers (notebook 04).
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch):
        self.epoch.fill_(epoch)

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        # 1. One permutation, the same in every rank and worker, new every epoch.
        order = np.random.default_rng([self.seed, int(self.epoch)]).permutation(self.size)
        # 2. Drop the tail, so every rank gets as many ids (and so as many batches).
        order = order[:len(order) - len(order) % self.world_size]
        # 3. Shard by rank (given to __init__, never asked inside a worker) ...
        mine = order[self.rank::self.world_size]
        # 4. ... then by worker: every worker of every rank gets a share.
        yield from mine[worker::workers].tolist()


def make_loader(rank, world_size, epoch):
    dataset = MyDataset(SIZE, rank, world_size)
    dataset.set_epoch(epoch)
    return DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=2)
''',
}
