"""Solutions to the exercises of notebook 05 (DDP sharding)."""

SOLUTIONS = {
    1: '''
# Rank r keeps ids with i % 2 == r, so its ids all have the parity of r. Worker w keeps
# ids with i % 6 == w, which has the parity of w. A worker whose parity differs from its
# rank's never matches: on each rank, 3 of the 6 workers are idle.
my_idle = [(r, w) for r in range(2) for w in range(6) if (w - r) % 2 != 0]
my_idle
''',
    2: '''
# Every rank gets ceil(10 / 4) = 3 indices: 12 in total, so 2 indices are read twice.
# With drop_last=True every rank gets floor(10 / 4) = 2: 8 in total, 2 never read.
my_repeated, my_dropped = 2, 2
''',
    3: '''
report = audit(mystery, world_size=2, epochs=1, expected=24)
report
# Every id is read 3 times. Not world_size (2) times, so the ranks are sharded: rank 0
# reads even ids, rank 1 odd ones. 3 is the loader's num_workers, and each of a rank's
# 3 workers read all 12 of the rank's ids: the dataset never asks get_worker_info().
my_diagnosis = "no worker sharding"
''',
}
