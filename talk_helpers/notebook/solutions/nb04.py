"""Solutions to the exercises of notebook 04 (seeds and epochs)."""

GATED = True  # each opens once its exercise has been attempted

SOLUTIONS = {
    1: '''
%%importable
import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info


class MyEpochIds(IterableDataset):
    def __init__(self, size, seed=0):
        self.size, self.seed = size, seed
        # Shared memory: persistent workers read the epoch the main process set last.
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch):
        self.epoch.fill_(epoch)

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        # The same permutation in every worker, a new one every epoch; then my share.
        order = np.random.default_rng([self.seed, int(self.epoch)]).permutation(self.size)
        yield from order[worker::workers].tolist()
''',
    2: '''
my_answer = "c"
# The generator is made once, in the main process, which never draws from it. Every
# worker gets a copy in that state (forked: inherited; spawned: unpickled), so both
# draw the same numbers; next epoch's new workers copy the same untouched state again.
# DataLoader reseeds only the global random, torch and numpy generators, never one
# stored on the dataset.
''',
}
