"""Solutions to notebook 02's exercises."""

SOLUTIONS = {
    1: """
my_count = 16
# No sharding: each of the 2 workers yields all 30 ids, batched by 4 inside that
# worker: 7 full batches and one of 2, so 8 batches per worker, 16 in all.
""",
    2: """
my_dropped = 14
# Modulo shards of 30 ids over 2 workers hold 15 ids each. With batch_size=8, drop_last
# drops each worker's remainder: 7 + 7 = 14 ids, almost half of the epoch. A map-style
# dataset would drop only 30 % 8 = 6.
""",
    3: """
def my_shard(size, worker, num_workers):
    return list(range(worker, size, num_workers))  # modulo: id % num_workers == worker
""",
    4: """
my_cause = "b"
# The report: 25 expected · 24 unique · 0 duplicated · 1 missing (id 24), full batches.
# The source (talk_helpers.lessons.datasets.basics._EvenBlockIds) gives each worker
# size // num_workers = 12 neighbouring ids, so the last size % num_workers ids belong to no worker.
# Nothing crashes and every batch is full: only a count finds it. The fix is BlockShardedIds'
# block_bounds, which gives the first size % num_workers blocks one id more.
""",
}
