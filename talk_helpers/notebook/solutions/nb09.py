"""Solutions to the exercises of notebook 09 (the exercise, solved)."""

SOLUTIONS = {
    1: """
my_dropped, my_batches = 3, 8
# 1003 // 8 = 125 samples per rank; 8 * 125 = 1000, so 3 samples are dropped (< 8 ranks).
# 125 samples in micro-batches of 16: 7 full batches and one of 13, so 8 per rank. The
# 3 workers get runs of 3, 3 and 2 batches on every rank: the same counts everywhere.
""",
    2: """
my_state = job.checkpoint(batches_consumed=3, num_workers=0)
# checkpoint() records the epoch (5), the batches consumed, the loader's workers (none)
# and the configuration. A loader with the same workers reads the rest in the order the
# first one had it; with other workers it deals the rest afresh, each batch still once.
""",
}
