"""Solutions to notebook 07's exercises."""

SOLUTIONS = {
    1: """
def my_consumed(steps, micro_batch_size, micro_batches_per_step, dp):
    return steps * micro_batch_size * micro_batches_per_step * dp
# consumed_samples counts samples over all DP ranks: one step is one global batch,
# micro_batch_size * micro_batches_per_step * dp samples.
""",
    2: """
def my_megatron_readers(grid):
    return [r for r in range(grid.world_size)
            if grid.coords(r).tp_rank == 0 and grid.coords(r).pp_rank in (0, grid.pp - 1)]
# TP rank 0 of the first and of the last stage reads, once per DP replica; with pp=1 the
# first stage is also the last.
""",
    3: """
report = audit(mystery, world_size=2, epochs=1, expected=32, in_process=True)
report
# 16 unique ids, 0 duplicated, 16 missing: the odd ones. The DP ranks do not overlap, but
# their sampler was built for 4 replicas (TP x DP) with rank = the global rank of TP rank
# 0: replicas 1 and 3 never run, so their samples are never read. The sampler must span
# the DP group: num_replicas=dp, rank=dp_rank.
my_diagnosis = "half the samples are never read"
""",
}
