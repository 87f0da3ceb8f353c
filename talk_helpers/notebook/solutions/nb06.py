"""Solutions to the exercises of notebook 06 (uneven batches and hangs)."""

SOLUTIONS = {
    1: '''
# Try every shard count and keep the ones the simulator says hang under HF's split.
hanging = [s for s in range(2, 41)
           if not simulate(shard_sizes_for(1000, s), nodes=2, workers=2,
                           micro_batch_size=8, policy="hf_datasets").ok]
print(hanging)  # [11, 17, 27, 39]: most odd counts are fine, HF splits them by example
my_shards = hanging[0]
''',
    2: '''
sim = simulate([7, 2, 5, 5, 3], nodes=2, workers=2, micro_batch_size=2, policy="round_robin")
print(sim)
my_steps = min(sim.batches_per_rank)
kept = sum(len(b) for rank in sim.batches for b in rank[:my_steps])
my_skipped = sum([7, 2, 5, 5, 3]) - kept
hf = simulate([7, 2, 5, 5, 3], nodes=2, workers=2, micro_batch_size=2, policy="hf_datasets")
print(hf)  # 5 shards on 2 ranks: every rank reads every shard, one example in two
my_hf_steps = hf.batches_per_rank[0]
my_steps, my_skipped, my_hf_steps
''',
    3: '''
report = audit(make_uneven_mystery_loader, world_size=2, epochs=1, batch_size=4)
print(report)
# Every sample once and 8 samples per rank, but batches per rank differ: DDP hangs.
my_hangs = len(set(report.checks[0].batch_counts.counts)) > 1
my_hangs
''',
}
