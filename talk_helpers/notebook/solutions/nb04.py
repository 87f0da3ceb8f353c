"""Solutions to the exercises of notebook 04 (seeds and epochs)."""

SOLUTIONS = {
    1: """
# base_seed is one int64 drawn from the loader's generator; worker k adds k.
generator = torch.Generator().manual_seed(42)
base_seed = torch.empty((), dtype=torch.int64).random_(generator=generator).item()
worker_1_seed = base_seed + 1
worker_1_seed
""",
    2: """
def ids_for(seed, epoch, rank, world_size, worker_id, num_workers, size):
    # One permutation for everybody, new every epoch; then one slot per (rank, worker).
    order = np.random.default_rng([seed, epoch]).permutation(size)
    slot, slots = rank * num_workers + worker_id, world_size * num_workers
    return order[slot::slots].tolist()
""",
}
