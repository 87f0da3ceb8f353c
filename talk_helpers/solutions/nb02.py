"""Solutions to notebook 02's exercises."""

SOLUTIONS = {
    1: """
my_count = 16
# No sharding: each of the 2 workers yields all 30 ids, batched by 4 inside that
# worker: 7 full batches and one of 2, so 8 batches per worker, 16 in all.
""",
    2: """
my_dropped = 18
# Modulo shards of 50 ids over 4 workers hold 13, 13, 12 and 12 ids. With batch_size=8,
# drop_last drops each worker's remainder: 5 + 5 + 4 + 4 = 18 ids, more than a third
# of the epoch. A map-style dataset would drop only 50 % 8 = 2.
""",
    3: """
def my_shard(size, worker, num_workers):
    return list(range(worker, size, num_workers))  # modulo: id % num_workers == worker
""",
}
