"""Solutions to the exercises of notebook 08 (fast loading)."""

SOLUTIONS = {
    1: '''
# Batches built inside 2 workers come from one worker's block each; unbatch, shuffle
# through a buffer and batch again in the main process to mix them.
mixed = lb.rebatch(batched_in_worker(small, batch_size=64), 64, buffer_size=1024, seed=0)
''',
    2: '''
# with_epoch(n) after .batched counts batches, in each worker: the loader yields
# n batches × 2 workers × 4 samples. 48 samples = 12 batches = 6 per worker,
# and course_pipeline passes epoch_samples // world_size = epoch_samples // 4.
epoch_samples = 6 * 4   # 24 // 4 = 6 batches per worker
''',
    3: '''
# The sampler's drop_last gives every rank 333 samples; the loader's drop_last
# then drops the partial 13-sample batch: 5 full batches on every rank.
flags = (True, True)
''',
}
