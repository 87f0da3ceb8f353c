"""Solutions to the exercises of notebook 09 (the exercise, solved)."""

SOLUTIONS = {
    1: """
my_dropped, my_batches = 3, 8
# 1003 // 8 = 125 samples per rank; 8 * 125 = 1000, so 3 samples are dropped (< 8 ranks).
# 125 samples in micro-batches of 16: 7 full batches and one of 13, so 8 per rank. The
# workers get batches 0, 3, 6 / 1, 4, 7 / 2, 5 on every rank: the same counts everywhere.
""",
    2: """
my_state = job.checkpoint(batches_consumed=3)
# checkpoint() records the epoch (5), the batches consumed and the configuration; a
# dataset built the same way deals the remaining batches to its workers from worker 0.
""",
}
