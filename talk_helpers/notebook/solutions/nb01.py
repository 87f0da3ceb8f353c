"""Solutions to notebook 01's exercises."""

GATED = True  # each opens once its exercise has been attempted

SOLUTIONS = {
    1: """
my_batches = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
# The batch sampler cuts the sampler's indices into groups of batch_size; the last
# group holds what is left (drop_last=True would drop it).
""",
    2: """
loader = DataLoader(MapStyleIds(12), batch_size=4, shuffle=True,
                    generator=torch.Generator().manual_seed(0))
# Running the cell again creates the generator again: the same order every time. Within
# one run the generator advances, so the next epoch gets a new order (usually wanted).
""",
    3: """
my_worker = 1
# Task k goes to worker k % num_workers, and batch k comes from task k: 4 % 3 == 1.
""",
}
