"""Solutions to notebook 02's exercises."""

GATED = True  # each opens once its exercise has been attempted

SOLUTIONS = {
    1: """
my_count = 16
# Nothing splits the ids: each of the 2 workers yields all 30, batched by 4 inside that
# worker: 7 full batches and one of 2, so 8 batches per worker, 16 in all.
""",
    2: """
my_dropped = 14
# Modulo shares of 30 ids over 2 workers hold 15 ids each. With batch_size=8, drop_last
# drops each worker's remainder: 7 + 7 = 14 ids, almost half of the epoch. A map-style
# dataset, batched by the main process, would drop only 30 % 8 = 6.
""",
    3: """
%%importable
from torch.utils.data import IterableDataset, get_worker_info


class MyShardedIds(IterableDataset):
    def __init__(self, size):
        self.size = size

    def __iter__(self):
        info = get_worker_info()
        if info is None:          # num_workers=0: the main process is the only worker
            worker, num_workers = 0, 1
        else:
            worker, num_workers = info.id, info.num_workers
        yield from range(worker, self.size, num_workers)

# Contiguous blocks work too, as long as the size % num_workers ids left over get a
# worker (the first blocks one id more each).
""",
    4: """
my_cause = "b"
# The check: one id missing (24), none duplicated, and every batch
# is full. The loader gives each worker size // num_workers = 12 neighbouring ids, so the
# size % num_workers ids left over belong to no worker. Nothing crashes: only a count finds
# it. The fix gives the first size % num_workers blocks one id more.
""",
}
