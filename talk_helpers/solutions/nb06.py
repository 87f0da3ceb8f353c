"""Solutions to the exercises of notebook 06 (uneven batches and hangs)."""

SOLUTIONS = {
    1: '''
# Try every shard count and keep the ones the simulator says hang. HF keeps every shard on
# every rank when the count does not divide by the world size: policy="hf_datasets".
hanging = [s for s in range(2, 41)
           if not simulate(shard_sizes_for(1000, s), nodes=2, workers=2,
                           micro_batch_size=8, policy="hf_datasets").ok]
print(hanging)
my_shards = hanging[0]
''',
    2: '''
# WebDataset hands out whole shards round robin: the simulator's default policy.
sim = simulate([7, 2, 5, 5, 3], nodes=2, workers=2, micro_batch_size=2)
print(sim)
my_steps = min(sim.batches_per_rank)
kept = sum(len(b) for rank in sim.batches for b in rank[:my_steps])
my_skipped = sum([7, 2, 5, 5, 3]) - kept
# Bonus: HF keeps all five shards on both ranks (5 does not divide by 2).
print(simulate([7, 2, 5, 5, 3], nodes=2, workers=2, micro_batch_size=2,
               policy="hf_datasets").batches_per_rank)
my_steps, my_skipped
''',
}
