"""Solutions to the exercises of notebook 03 (shuffling)."""

SOLUTIONS = {
    1: """
def score(buffer_size):
    runs = [np.concatenate(simulate_loader(
                BufferShuffled(buffer_size=buffer_size, num_shards=1, epoch=e), 1, 20))
            for e in range(2)]
    return shuffle_report(runs, groups=labels, batch_size=20).mixing

smallest_buffer = next(b for b in range(50, 601, 50) if score(b) >= 0.9)
smallest_buffer
""",
    2: """
def my_worker_ids(size, seed, epoch, worker_id, num_workers):
    # The permutation stream: the same in every worker, new every epoch.
    order = np.random.default_rng([seed, epoch]).permutation(size)
    return order[worker_id::num_workers].tolist()
""",
    3: """
mystery = [collect(DataLoader(MysteryShuffle(epoch=e), batch_size=20, num_workers=2))
           for e in range(2)]
print([check_exactly_once(batches, SIZE) for batches, _ in mystery])          # ✔ ✔
print(shuffle_report([np.concatenate(b) for b, _ in mystery], groups=labels,
                     batch_size=20))                 # order changes ✔ · poorly mixed ✘
print(check_random_draws(mystery[0][1], value="aug", across="worker"))       # ✔
mystery_problem = "poorly mixed"
# It moves whole blocks of 50 consecutive ids and reads each block in storage order,
# so a batch of 20 comes from one or two blocks: mostly one class.
""",
}
