"""A loader someone hands you, for notebook 01's audit exercise: read the report first."""

from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.basics import IterableIds


def colleagues_loader(rank, world_size, epoch, size=10, num_workers=2, batch_size=5):
    """``make_loader(rank, world_size, epoch)`` for ``audit``: ids streamed by two workers."""
    return DataLoader(IterableIds(size), batch_size=batch_size, num_workers=num_workers)
