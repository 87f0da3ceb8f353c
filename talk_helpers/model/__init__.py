"""What DataLoader and the sharding rules do, computed without starting a process: the
order in which batches leave the workers, how shards reach ranks and workers, buffer
shuffles, the TP/DP/PP groups, and :mod:`~talk_helpers.model.simulate`, which predicts
every batch of every rank."""
