"""Notebook 03's data and what it runs that is not the lesson: a dataset stored sorted by
class, models of the buffer shuffles of HF datasets and WebDataset (checked against real
runs), and helpers that collect, simulate and rebatch what loaders yield. The datasets the
notebook teaches are written in its cells.

Sample ``i`` has class ``i // per_class``: the files are stored class after class, as an
image folder with one sub-folder per class is. The data is cut into ``num_shards``
contiguous shards (files); worker ``w`` of ``W`` reads shards ``w, w + W, …``.

The models keep their RNG work in ``stream(worker_id, num_workers)``, a plain method, so
:func:`simulate_loader` can compute what each worker yields without starting one.
"""

from __future__ import annotations

import ast
import inspect
import random
import textwrap

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from talk_helpers.model.buffers import buffer_shuffle, unbatch_shuffle_rebatch
from talk_helpers.model.dataloader import loader_batches

__all__ = [
    "SIZE", "CLASSES", "BufferShuffled", "SplitThenShuffleShards", "webdataset_reads",
    "labels_of", "shard_ranges", "epoch_orders", "collect", "simulate_loader",
    "rebatched_orders", "show_code",
]

SIZE = 600          # samples
CLASSES = 10        # stored class after class: 60 samples of class 0, then class 1, …


def labels_of(size: int = SIZE, classes: int = CLASSES) -> np.ndarray:
    """The class of every sample id (the data is stored sorted by class)."""
    return np.arange(size) * classes // size


def shard_ranges(size: int, num_shards: int) -> list[range]:
    """``num_shards`` contiguous shards (think: files) covering ids 0..size-1."""
    bounds = np.linspace(0, size, num_shards + 1).round().astype(int)
    return [range(int(a), int(b)) for a, b in zip(bounds, bounds[1:], strict=False)]


def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class BufferShuffled(IterableDataset):
    """Shuffle the shards, then split them, then a sample buffer: close to HF datasets'
    ``IterableDataset.shuffle(seed, buffer_size)``. The shard order comes from a shared
    (seed, epoch); worker ``w`` reads shards ``w, w + W, …`` of that order through its own
    shuffle buffer of ``buffer_size`` samples. (HF 5.x also interleaves up to 10 of a
    worker's shards into the buffer, ``max_buffer_input_shards``; not modelled here.)
    WebDataset does it the other way round: see :class:`SplitThenShuffleShards`.
    With ``worker_batch``, workers yield lists of that many ids (for ``batch_size=None``
    loaders and the unbatch → shuffle → rebatch pattern)."""

    def __init__(self, size=SIZE, num_shards=8, buffer_size=64, seed=0, epoch=0,
                 worker_batch=None):
        self.size, self.num_shards, self.buffer_size = size, num_shards, buffer_size
        self.seed, self.epoch, self.worker_batch = seed, epoch, worker_batch

    def shard_order(self, worker_id, num_workers) -> list[int]:
        """The shards worker ``worker_id`` reads, in order: a permutation by (seed, epoch),
        then every ``num_workers``-th shard of it."""
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_shards)
        return order[worker_id::num_workers].tolist()

    def stream(self, worker_id, num_workers):
        shards = shard_ranges(self.size, self.num_shards)
        mine = (i for s in self.shard_order(worker_id, num_workers) for i in shards[s])
        rng = random.Random(f"{self.seed}-{self.epoch}-{worker_id}")
        samples = buffer_shuffle(mine, self.buffer_size, rng)
        if not self.worker_batch:
            yield from samples
            return
        batch = []
        for i in samples:
            batch.append(i)
            if len(batch) == self.worker_batch:
                yield batch
                batch = []
        if batch:
            yield batch

    def __iter__(self):
        return self.stream(*_worker())


class SplitThenShuffleShards(BufferShuffled):
    """WebDataset 1.0.2's order: ``WebDataset(urls, shardshuffle=n, seed=s).shuffle(b)``.
    The shard list is split first (worker ``w`` keeps shards ``w, w + W, …`` every epoch),
    then each worker shuffles *its* shards with ``random.Random(seed)``, the seed fixed when
    the dataset is built, so the shard order is the same every epoch; ``epoch`` only
    changes the sample buffer (``.shuffle(b)``, which WebDataset seeds from pid and time)."""

    def shard_order(self, worker_id, num_workers) -> list[int]:
        """The shards worker ``worker_id`` reads, in order: its split, then WebDataset's
        buffer pick with ``random.Random(seed)`` (exact while a worker holds fewer shards
        than ``shardshuffle`` and 100)."""
        buffer = list(range(self.num_shards))[worker_id::num_workers]
        rng, order = random.Random(self.seed), []
        while buffer:                      # webdataset.filters.pick
            k = rng.randint(0, len(buffer) - 1)
            order.append(buffer[k])
            buffer[k] = buffer[-1]
            buffer.pop()
        return order


# --- a real WebDataset, to check the model against -------------------------------------


def _wds_record(sample: dict) -> tuple[int, int, int]:
    """(worker, shard, sample id) of one WebDataset sample, recorded inside the worker."""
    info = get_worker_info()
    shard = int(sample["__url__"].rsplit("-", 1)[1].split(".")[0])
    return (0 if info is None else info.id), shard, int(sample["id"])


def webdataset_reads(epochs=2, num_workers=2, num_shards=8, size=SIZE, shardshuffle=8,
                     buffer_size=0, seed=None, multiprocessing_context=None) -> dict:
    """Run a real ``webdataset.WebDataset(urls, shardshuffle=…, seed=…)`` (``.shuffle(
    buffer_size)`` when given) over ``num_shards`` tar shards of ids 0..size-1, in one
    DataLoader for ``epochs`` epochs (new workers each epoch, as by default). ``seed=None``
    is WebDataset's default: a seed drawn once, when the dataset is built.

    Returns ``{"seed": the seed WebDataset used, "shards": per epoch {worker: [shard, …]}
    in the order each worker first yielded a sample of them, "orders": per epoch the ids
    in the order they came out}``."""
    import warnings

    import webdataset as wds

    from talk_helpers.lessons.datasets.shard_files import write_tar_shards

    sizes = [len(r) for r in shard_ranges(size, num_shards)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = wds.WebDataset(write_tar_shards(sizes), shardshuffle=shardshuffle, seed=seed,
                                 nodesplitter=None, empty_check=False)
    used_seed = dataset.seed
    if buffer_size:
        dataset = dataset.shuffle(buffer_size)
    loader = DataLoader(dataset.map(_wds_record), batch_size=None, num_workers=num_workers,
                        multiprocessing_context=multiprocessing_context)
    shards, orders = [], []
    for _ in range(epochs):
        seen: dict[int, list[int]] = {}
        order = []
        for worker, shard, sample in loader:
            if shard not in seen.setdefault(worker, []):
                seen[worker].append(shard)
            order.append(sample)
        shards.append(dict(sorted(seen.items())))
        orders.append(np.asarray(order, dtype=np.int64))
    return {"seed": used_seed, "shards": shards, "orders": orders}


# --- running and simulating loaders ------------------------------------------------------


def collect(loader) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """One epoch: the id batches and, for dict samples, every field concatenated."""
    batches, fields = [], {}
    for batch in loader:
        if isinstance(batch, dict):
            for key, value in batch.items():
                fields.setdefault(key, []).append(torch.as_tensor(value).numpy())
            batch = batch["id"]
        batches.append(torch.as_tensor(batch).numpy().astype(np.int64))
    return batches, {k: np.concatenate(v) for k, v in fields.items()}


def epoch_orders(make_loader, epochs=2) -> list[np.ndarray]:
    """The sample order of ``epochs`` epochs; ``make_loader(epoch)`` returns the loader."""
    return [np.concatenate(collect(make_loader(epoch))[0]) for epoch in range(epochs)]


def simulate_loader(dataset, num_workers, batch_size) -> list[np.ndarray]:
    """The batches a DataLoader(dataset, batch_size, num_workers) yields, computed in this
    process (:func:`talk_helpers.model.dataloader.loader_batches`)."""
    state = random.getstate()   # augmentations must not touch ours
    n = max(num_workers, 1)
    streams = [np.asarray([s["id"] if isinstance(s, dict) else s
                           for s in dataset.stream(w, n)], dtype=np.int64) for w in range(n)]
    random.setstate(state)
    return loader_batches(streams, batch_size)


def rebatched_orders(batches_per_epoch, buffer_size, batch_size, seed=0):
    """Apply unbatch → buffer shuffle → rebatch (in the main process) to each epoch."""
    return [np.concatenate(list(unbatch_shuffle_rebatch(
        batches, buffer_size, batch_size, random.Random(f"{seed}-{epoch}"))))
        for epoch, batches in enumerate(batches_per_epoch)]


def show_code(obj, *, docstring: bool = False):
    """The source of a class or function, highlighted in a notebook; without its docstring
    unless ``docstring`` (a docstring tends to say what the cells after it find out)."""
    from IPython.display import Code

    source = textwrap.dedent(inspect.getsource(obj))
    if not docstring:
        source = _without_docstring(source)
    return Code(source, language="python")


def _without_docstring(source: str) -> str:
    node = ast.parse(source).body[0]
    first = node.body[0] if node.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return source
    lines = source.splitlines(keepends=True)
    return "".join(lines[:first.lineno - 1] + lines[first.end_lineno:])
