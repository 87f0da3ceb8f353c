"""Solutions to the exercises of notebook 06 (uneven batches and hangs)."""

SOLUTIONS = {
    1: '''
# Ask the simulator about every even shard count and keep the ones that hang.
hanging = [s for s in range(2, 41, 2)
           if not simulate(shard_sizes_for(1003, s), nodes=2, workers=2,
                           micro_batch_size=8).ok]
print(hanging)  # [10]: 1,003 = 10 × 100 + 3, and the three larger shards land unevenly
my_shards = hanging[0]
''',
    2: '''
sim = simulate([7, 2, 5, 5, 3], nodes=2, workers=2, micro_batch_size=2)
print(sim)
my_steps = min(sim.batches_per_rank)
kept = sum(len(b) for rank in sim.batches for b in rank[:my_steps])
my_skipped = sum([7, 2, 5, 5, 3]) - kept
my_steps, my_skipped
''',
    3: '''
report = audit(make_uneven_mystery_loader, world_size=2, epochs=1)
print(report)
# Every sample once and 8 samples per rank, but the batches per rank differ: DDP hangs.
my_hangs = True
''',
    4: '''
%%importable
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class InterleavedIds(IterableDataset):
    """Split by sample, not by shard: id i goes to rank-and-worker i mod (ranks × workers)."""

    def __init__(self, n, rank, world_size):
        self.n, self.rank, self.world_size = n, rank, world_size

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        yield from range(self.rank * workers + worker, self.n, self.world_size * workers)


def make_even_loader(rank, world_size, epoch):
    # 14 ids on 2 ranks × 2 workers: 4, 4 | 3, 3 ids per worker, 2 batches of 4 on each rank
    return DataLoader(InterleavedIds(14, rank, world_size), batch_size=4, num_workers=2)
''',
}
