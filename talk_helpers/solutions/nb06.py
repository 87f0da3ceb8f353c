"""Solutions to the exercises of notebook 06 (uneven batches and hangs)."""

SOLUTIONS = {
    1: '''
# Try every shard count and keep the ones the simulator says hang.
hanging = [s for s in range(2, 41)
           if not simulate(shard_sizes_for(1000, s), nodes=2, workers=2,
                           micro_batch_size=8).ok]
print(hanging)
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
}
