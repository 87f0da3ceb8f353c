"""Solutions to notebook 03's exercises."""

GATED = True  # each opens once its exercise has been attempted

SOLUTIONS = {
    1: """
%%importable
import numpy as np
from torch.utils.data import IterableDataset, get_worker_info


class MyShuffledIds(IterableDataset):
    def __init__(self, size, seed=0):
        self.size, self.seed = size, seed

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        # One generator, seeded with `seed` alone: every worker draws the same permutation.
        order = np.random.default_rng(self.seed).permutation(self.size)
        yield from order[worker::num_workers].tolist()   # then this worker's share
""",
    2: """
mystery_problem = "poorly mixed"
# The checks, on the two epochs in `mystery`:
print([check_exactly_once(batches, SIZE) for batches, _ in mystery])     # ✔ both epochs
print(shuffle_report([np.concatenate(b) for b, _ in mystery], groups=labels,
                     batch_size=20))          # ✘ poorly mixed, though the order changes
print(check_random_draws(mystery[0][1], value="aug", across="worker"))  # ✔ no repeats
# MysteryShuffle permutes whole blocks of 50 neighbouring ids and reads each block in
# storage order, so a batch of 20 comes from one or two blocks: mostly one class.
""",
    3: """
def score(buffer_size):
    runs = [np.concatenate(simulate_loader(
                BufferShuffled(buffer_size=buffer_size, num_shards=1, epoch=e), 1, 20))
            for e in range(2)]
    return shuffle_report(runs, groups=labels, batch_size=20).mixing

smallest_buffer = next(b for b in range(50, 601, 50) if score(b) >= 0.9)
smallest_buffer
""",
}
