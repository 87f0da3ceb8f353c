"""A training loop that is stopped, saved and resumed, as a trainer does it: which ids did
it take in each epoch? For :func:`talk_helpers.checks.check_resume`.

The dataset's side of a resume is the lesson (notebook 11 writes it in a cell); this is
the trainer's side. The dataset offers ``state_dict(consumed)`` (its state, given how many
items the loop took this epoch: only the loop knows, since the workers hold copies),
``load_state_dict(state)`` and, optionally, ``set_epoch(epoch)``, called before every
epoch. The loop takes one id per item (``batch_size=None``).
"""

from __future__ import annotations

from collections.abc import Callable

from torch.utils.data import DataLoader

from talk_helpers.arguments import require_int

__all__ = ["epochs_taken"]


def epochs_taken(make_dataset: Callable, *, epochs: int, stop: tuple[int, int | str] | None = None,
                 num_workers: int = 1, persistent_workers: bool = False) -> list[list[int]]:
    """The ids the loop took in each of ``epochs`` epochs.

    ``stop=(epoch, n)``: right after the loop took its ``n``-th item of ``epoch``, the
    trainer saves a checkpoint (its epoch and ``dataset.state_dict(n)``), and the run goes
    on from it in a new dataset and a new DataLoader, as after a restart: the rest of that
    epoch, then the next ones. ``stop=(epoch, "end")``: the checkpoint is taken once the
    epoch is over, and the run goes on with the next epoch.
    """
    require_int("epochs", epochs, minimum=1)
    require_int("num_workers", num_workers, minimum=0)
    if stop is not None:
        if not (isinstance(stop, tuple) and len(stop) == 2):
            raise TypeError(f"stop must be None or (epoch, items or 'end'), got {stop!r}")
        require_int("stop[0]", stop[0], minimum=0, maximum=epochs - 1)
        if stop[1] != "end":
            require_int("stop[1]", stop[1], minimum=1)
    taken: list[list[int]] = [[] for _ in range(epochs)]
    dataset = make_dataset()
    loader = _loader(dataset, num_workers, persistent_workers)
    epoch = 0
    while epoch < epochs:
        _set_epoch(dataset, epoch)
        interrupted = False
        for item in loader:
            taken[epoch].append(int(item))
            if stop == (epoch, len(taken[epoch])):
                interrupted = True
                break
        if interrupted or stop == (epoch, "end"):
            checkpoint = {"epoch": epoch if interrupted else epoch + 1,
                          "data": dataset.state_dict(len(taken[epoch]))}
            del loader  # the run stops here: its workers go with it
            dataset = make_dataset()  # ... and restarts from the checkpoint
            dataset.load_state_dict(checkpoint["data"])
            loader = _loader(dataset, num_workers, persistent_workers)
            epoch, stop = checkpoint["epoch"], None
            continue
        epoch += 1
    return taken


def _loader(dataset, num_workers: int, persistent_workers: bool) -> DataLoader:
    return DataLoader(dataset, batch_size=None, num_workers=num_workers,
                      persistent_workers=persistent_workers and num_workers > 0)


def _set_epoch(dataset, epoch: int) -> None:
    set_epoch = getattr(dataset, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)
