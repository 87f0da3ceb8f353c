"""Loader factories that put real data libraries through :func:`talk_helpers.audit.audit`.

Notebook 10 runs Hugging Face ``datasets``, ``webdataset``, ``torchdata`` (its
``StatefulDataLoader`` and ``nodes``), ``litdata``, mosaicml-streaming's sample assignment and
the reference :class:`~talk_helpers.reference.sharded_iterable.ShardedIterableDataset` in real gloo
worlds and compares them in one table. Every ``make_*`` function here has the signature
``audit`` expects, ``make_loader(rank, world_size, epoch)``, once its settings are bound
with ``functools.partial``; they are module-level so that spawned ranks can import them.

Everything is local and reproducible:

* the data are the ids ``0..N-1`` (61 samples in the uneven shards of notebook 09);
* Hugging Face runs offline (``HF_DATASETS_OFFLINE``, ``HF_HUB_OFFLINE``) with its cache
  in a temporary directory, set here before ``datasets`` is imported;
* webdataset tar shards are written on first use into a temporary directory whose name
  depends only on the shard sizes, so every rank (under fork or spawn) finds the same
  files; no path ever reaches an output;
* every random choice is seeded. Where a library would draw fresh entropy per process
  (``shuffle(seed=None)``), the factory stands in a generator seeded by the rank: the
  ranks still disagree, as separate processes would, but the notebook output is stable.

DataLoader workers inside a rank are forked where the platform can fork: the rank is a
fresh process holding only the loader, and a spawned worker would import ``datasets`` again
every epoch (seconds each). The ranks themselves start with ``TALK_START_METHOD``.

A loader is built afresh for every epoch, as non-persistent DataLoader workers see it:
each epoch they receive a new copy of the main process's dataset, so counters a library
increments inside a worker are lost, and whatever the main process sets (``set_epoch``)
is kept.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import tarfile
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass
from html import escape

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CACHE_DIR = os.path.join(tempfile.gettempdir(), "talk_helpers_library_audit")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(CACHE_DIR, "hf"))

SHARD_SIZES = (26, 9, 14, 12)        # notebook 09's four uneven shards: 61 samples
SHARD_SIZES_MANY = (9, 4, 8, 6, 9, 5, 12, 8)  # the same 61 samples in eight shards
N_SAMPLES = sum(SHARD_SIZES)
BATCH_SIZE = 5
NUM_WORKERS = 2
STOP_AFTER = 3   # batches a rank takes before the checkpoint in the resume runs

OK, BAD, INFO = "#009E73", "#D55E00", "#000000"

__all__ = [
    "BATCH_SIZE", "N_SAMPLES", "NUM_WORKERS", "SHARD_SIZES", "SHARD_SIZES_MANY",
    "AuditTable", "LibraryRow", "hf_iterable", "litdata_dir", "make_hf_loader",
    "make_hf_stateful", "make_litdata_loader", "make_map_stateful", "make_nodes_loader",
    "make_plain_iterable_stateful", "make_reference_loader", "make_reference_stateful",
    "make_resumed", "make_streaming_loader", "make_streaming_resumed", "make_wds_loader",
    "make_seed_pattern2", "make_seed_pattern3", "make_wds_resampled", "mystery_loader",
    "resume_verdict", "short_error", "streaming_modules", "wds_shards",
]


def _context() -> dict:
    """DataLoader keyword: fork the workers where possible (see the module docstring)."""
    import multiprocessing

    if "fork" in multiprocessing.get_all_start_methods():
        return {"multiprocessing_context": "fork"}
    return {}


def _loader_kwargs(num_workers: int) -> dict:
    return {"num_workers": num_workers, **(_context() if num_workers > 0 else {})}


def _quiet() -> None:
    import logging

    logging.getLogger("torchdata.stateful_dataloader.stateful_dataloader").setLevel(
        logging.ERROR)  # the fast-forward notice, printed by every rank
    # litdata's drop_last=False warning, printed by every rank every epoch (notebook 10 shows
    # it once, from the source)
    logging.getLogger("litdata.streaming.dataset").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    warnings.filterwarnings("ignore", message=".*shardshuffle.*")
    warnings.filterwarnings("ignore", message=".*Too many dataloader workers.*")


# ------------------------------------------------------------------ Hugging Face datasets


def hf_iterable(n: int = N_SAMPLES, num_shards: int = 4, *, shuffle: bool = False,
                seed: int | None = 0, rank: int = 0, buffer_size: int = 8):
    """``Dataset.from_dict({"id": 0..n-1}).to_iterable_dataset(num_shards)``, shuffled with
    ``seed`` if asked. ``seed=None`` stands for an unseeded shuffle: a generator seeded by
    ``rank`` (each process would draw its own entropy)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    ds = datasets.Dataset.from_dict({"id": np.arange(n)})
    it = ds.to_iterable_dataset(num_shards=num_shards)
    if shuffle:
        if seed is None:
            it = it.shuffle(generator=np.random.default_rng(1000 + rank),
                            buffer_size=buffer_size)
        else:
            it = it.shuffle(seed=seed, buffer_size=buffer_size)
    return it


def _hf_split(rank, world_size, epoch, *, n, num_shards, shuffle, seed, buffer_size,
              set_epoch, split_then_epoch=True):
    from datasets.distributed import split_dataset_by_node

    it = hf_iterable(n, num_shards, shuffle=shuffle, seed=seed, rank=rank,
                     buffer_size=buffer_size)
    if set_epoch and not split_then_epoch:
        it.set_epoch(epoch)
    it = split_dataset_by_node(it, rank=rank, world_size=world_size)
    if set_epoch and split_then_epoch:
        it.set_epoch(epoch)
    return it


def make_hf_loader(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                   num_shards: int = 4, shuffle: bool = False, seed: int | None = 0,
                   buffer_size: int = 8, set_epoch: bool = True,
                   split_then_epoch: bool = True, num_workers: int = NUM_WORKERS,
                   batch_size: int = BATCH_SIZE):
    """``to_iterable_dataset(num_shards)`` → (``shuffle``) → ``split_dataset_by_node`` →
    ``set_epoch(epoch)`` → DataLoader. ``split_then_epoch=False`` calls ``set_epoch``
    before the split instead."""
    _quiet()
    it = _hf_split(rank, world_size, epoch, n=n, num_shards=num_shards, shuffle=shuffle,
                   seed=seed, buffer_size=buffer_size, set_epoch=set_epoch,
                   split_then_epoch=split_then_epoch)
    return DataLoader(it, batch_size=batch_size, **_loader_kwargs(num_workers))


def make_hf_stateful(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                     num_shards: int = 4, shuffle: bool = False, seed: int | None = 0,
                     buffer_size: int = 8, num_workers: int = NUM_WORKERS,
                     batch_size: int = BATCH_SIZE):
    """The same pipeline in torchdata's StatefulDataLoader (for :func:`make_resumed`)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    _quiet()
    it = _hf_split(rank, world_size, epoch, n=n, num_shards=num_shards, shuffle=shuffle,
                   seed=seed, buffer_size=buffer_size, set_epoch=True)
    return StatefulDataLoader(it, batch_size=batch_size, **_loader_kwargs(num_workers))


# ------------------------------------------------------------------ webdataset


def wds_shards(sizes=SHARD_SIZES) -> list[str]:
    """Tar shards holding the ids ``0..sum(sizes)-1`` in order, one ``<key>.id`` member per
    sample; written once (atomically, so ranks may race) and reused."""
    sizes = tuple(int(s) for s in sizes)
    folder = os.path.join(CACHE_DIR, "wds-" + "-".join(map(str, sizes)))
    os.makedirs(folder, exist_ok=True)
    paths, start = [], 0
    for i, size in enumerate(sizes):
        path = os.path.join(folder, f"shard-{i:05d}.tar")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with tarfile.open(tmp, "w") as tar:
                for sample in range(start, start + size):
                    data = str(sample).encode()
                    info = tarfile.TarInfo(f"{sample:06d}.id")
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, io.BytesIO(data))
            os.replace(tmp, path)
        paths.append(path)
        start += size
    return paths


def _wds_id(sample: dict) -> int:
    return int(sample["id"])


def _ids_tensor(samples: list) -> torch.Tensor:
    return torch.tensor(samples, dtype=torch.int64)


def make_wds_loader(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                    shardshuffle=False, detshuffle: bool = False, seed: int = 0,
                    split_nodes: bool = True, num_workers: int = NUM_WORKERS,
                    batch_size: int = BATCH_SIZE):
    """``WebDataset(urls, nodesplitter=split_by_node, workersplitter=split_by_worker,
    shardshuffle=…, seed=…)`` in a DataLoader. ``seed`` is what ``WebDataset`` would draw
    once at construction; passing it keeps every epoch's copy as the one built once.
    ``split_nodes=False`` keeps WebDataset's default node splitter."""
    import webdataset as wds

    _quiet()
    extra = {"nodesplitter": wds.split_by_node} if split_nodes else {}
    ds = wds.WebDataset(wds_shards(sizes), **extra,
                        workersplitter=wds.split_by_worker, shardshuffle=shardshuffle,
                        detshuffle=detshuffle, seed=seed, empty_check=False).map(_wds_id)
    return DataLoader(ds, batch_size=batch_size, **_loader_kwargs(num_workers))


def make_wds_resampled(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                       batches_per_epoch: int = 6, seed: int = 0,
                       num_workers: int = NUM_WORKERS, batch_size: int = BATCH_SIZE):
    """The maintainers' DDP recipe: shards drawn with replacement (``ResampledShards``,
    here ``deterministic=True`` so the run is reproducible), batched in the workers, and
    ``WebLoader(...).with_epoch(batches_per_epoch)`` cutting each rank's endless stream."""
    import webdataset as wds

    _quiet()
    pipeline = wds.DataPipeline(
        wds.ResampledShards(wds_shards(sizes), seed=seed, deterministic=True),
        wds.tarfile_to_samples(),
        wds.map(_wds_id),
        wds.batched(batch_size, collation_fn=_ids_tensor),
    )
    loader = wds.WebLoader(pipeline, batch_size=None, **_loader_kwargs(num_workers))
    return loader.with_epoch(batches_per_epoch)


# ------------------------------------------------------------------ torchdata and the reference


class _Ids(Dataset):
    """Map-style ids ``0..n-1``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return int(index)


def make_map_stateful(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                      seed: int = 0, num_workers: int = NUM_WORKERS,
                      batch_size: int = BATCH_SIZE):
    """A plain map-style dataset with torchdata's ``StatefulDistributedSampler``
    (``set_epoch(epoch)``) in a ``StatefulDataLoader``."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    _quiet()
    sampler = StatefulDistributedSampler(_Ids(n), num_replicas=world_size, rank=rank,
                                         shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return StatefulDataLoader(_Ids(n), batch_size=batch_size, sampler=sampler,
                              **_loader_kwargs(num_workers))


def make_plain_iterable_stateful(rank: int, world_size: int, epoch: int, *,
                                 sizes=SHARD_SIZES, num_workers: int = NUM_WORKERS,
                                 batch_size: int = BATCH_SIZE):
    """A plain iterable dataset with no ``state_dict`` (shards round-robin over ranks,
    then workers; notebook 05's ``ShardedIds``) in a ``StatefulDataLoader``."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from talk_helpers.lessons.datasets.ddp import ShardedIds

    _quiet()
    return StatefulDataLoader(ShardedIds(sizes, rank, world_size), batch_size=batch_size,
                              **_loader_kwargs(num_workers))


def make_reference_loader(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                          seed: int = 0, num_workers: int = NUM_WORKERS,
                          batch_size: int = BATCH_SIZE):
    """Notebook 09's ``ShardedIterableDataset`` over the same shards, in a DataLoader."""
    from talk_helpers.lessons.datasets.exercise import make_final_dataset

    ds = make_final_dataset(sizes=sizes, seed=seed, batch_size=batch_size)
    ds.set_epoch(epoch)
    return DataLoader(ds, batch_size=None, **_loader_kwargs(num_workers))


def make_reference_stateful(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                            seed: int = 0, num_workers: int = NUM_WORKERS,
                            batch_size: int = BATCH_SIZE):
    """The reference dataset in a ``StatefulDataLoader`` (for :func:`make_resumed`)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from talk_helpers.lessons.datasets.exercise import make_final_dataset

    _quiet()
    ds = make_final_dataset(sizes=sizes, seed=seed, batch_size=batch_size)
    ds.set_epoch(epoch)
    return StatefulDataLoader(ds, batch_size=None, **_loader_kwargs(num_workers))


# ------------------------------------------------------------------ resume


def make_resumed(rank: int, world_size: int, epoch: int, *, build, stop_after: int = STOP_AFTER):
    """Take ``stop_after`` batches from ``build(rank, world_size, epoch)``, save its
    ``state_dict()`` (through pickle, as a checkpoint file would), then build a new loader
    the same way, load the state and read it to the end. Returns every batch the "job"
    saw, before and after the restart, so ``audit`` can check the epoch as a whole."""
    loader = build(rank, world_size, epoch)
    iterator = iter(loader)
    before = []
    for _ in range(stop_after):
        try:
            before.append(next(iterator))
        except StopIteration:
            break
    state = pickle.dumps(loader.state_dict())
    del iterator, loader
    resumed = build(rank, world_size, epoch)
    resumed.load_state_dict(pickle.loads(state))
    return before + list(resumed)


def short_error(report) -> str:
    """The innermost exception of the first failed rank, as ``Type: message`` (no paths,
    no process ids): what a notebook shows when a library crashes inside a rank."""
    text = report.error or ""
    if report.world is not None and report.world.failed_ranks:
        text = report.world.ranks[report.world.failed_ranks[0]].error or text
    found = re.findall(r"([A-Za-z_]+(?:Error|Exception): [^\n]*?)(?=\s+[A-Za-z_]+"
                       r"(?:Error|Exception): |$)", str(text).strip())
    return found[-1].strip() if found else str(text).strip().splitlines()[-1]


def resume_verdict(uninterrupted, resumed) -> tuple[bool, str]:
    """Compare a resumed run with the uninterrupted one, rank by rank and epoch by epoch:
    the same ids in the same order is exact; otherwise count what was lost or repeated."""
    if resumed.error is not None or uninterrupted.error is not None:
        return False, "could not run"
    lost = repeated = 0
    same_order = True
    for e in range(min(uninterrupted.n_epochs, resumed.n_epochs)):
        for r in range(uninterrupted.world_size):
            a, b = uninterrupted.ids(e, r), resumed.ids(e, r)
            if not np.array_equal(a, b):
                same_order = False
            ca, cb = Counter(a.tolist()), Counter(b.tolist())
            lost += sum((ca - cb).values())
            repeated += sum((cb - ca).values())
    if lost == 0 and repeated == 0:
        return True, "exact" if same_order else "same samples, other order"
    parts = [f"{lost} lost" if lost else "", f"{repeated} repeated" if repeated else ""]
    return False, " · ".join(p for p in parts if p)


# ------------------------------------------------------------------ the table


@dataclass
class LibraryRow:
    """One line of the table: an audit, and optionally the same loader resumed."""

    name: str
    report: object
    resumed: object = None
    resume_note: str = "not supported"

    def cells(self) -> list[tuple[bool | None, str]]:
        rep = self.report
        if rep.error is not None:
            return [(False, "did not finish")] + [(None, "—")] * 4
        bad = [c.exactly_once for c in rep.checks if not c.exactly_once.ok]
        if bad:
            worst = max(bad, key=lambda x: len(x.missing) + len(x.duplicates))
            parts = []
            if worst.missing:
                parts.append(f"{len(worst.missing)} missing")
            if worst.duplicates:
                parts.append(f"{len(worst.duplicates)} duplicated")
            if worst.unexpected:
                parts.append(f"{len(worst.unexpected)} unexpected")
            once = (False, " · ".join(parts))
        else:
            once = (True, "yes")
        counts = [list(c.batch_counts.counts.values()) if isinstance(c.batch_counts.counts, dict)
                  else list(c.batch_counts.counts) for c in rep.checks]
        uneven = [c for c in counts if len(set(c)) > 1]
        shown = uneven[0] if uneven else counts[0]
        balanced = (not uneven, " / ".join(map(str, shown)) + ("" if not uneven else "  hang"))
        if rep.order_changes:
            changes = all(all(v) for v in rep.order_changes.values())
            order = (changes, "changes" if changes else "repeats")
            if getattr(rep, "shuffle_expected", None) is False:
                order = (None, order[1] + " (no shuffle asked)")
        else:
            order = (None, "—")
        mixing = (None, "—") if rep.shuffle is None else (None, f"{rep.shuffle.mixing:.2f}")
        if self.resumed is None:
            resume = (None, self.resume_note)
        elif self.resumed.error is not None:
            resume = (False, "crashed: " + short_error(self.resumed))
        else:
            resume = resume_verdict(rep, self.resumed)
        return [once, balanced, order, mixing, resume]


HEADERS = ["loader", "exactly once", "batches per rank", "order across epochs",
           "mixing", "mid-epoch resume"]


class AuditTable:
    """Rows of :class:`LibraryRow`, shown as one table (text and HTML)."""

    def __init__(self, rows: list[LibraryRow]) -> None:
        self.rows = list(rows)

    def _grid(self) -> list[list[tuple[bool | None, str]]]:
        return [[(None, row.name)] + row.cells() for row in self.rows]

    def __repr__(self) -> str:
        grid = [[(None, h) for h in HEADERS]] + self._grid()
        texts = [[("✔ " if ok is True else "✘ " if ok is False else "") + t for ok, t in line]
                 for line in grid]
        widths = [max(len(line[i]) for line in texts) for i in range(len(HEADERS))]
        return "\n".join("  ".join(t.ljust(w) for t, w in zip(line, widths, strict=True)).rstrip()
                         for line in texts)

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{escape(h)}</th>" for h in HEADERS)
        body = []
        for line in self._grid():
            tds = []
            for ok, text in line:
                mark = "✔ " if ok is True else "✘ " if ok is False else ""
                colour = OK if ok is True else BAD if ok is False else INFO
                tds.append(f"<td style='text-align:left;color:{colour}'>"
                           f"{escape(mark + text)}</td>")
            body.append("<tr>" + "".join(tds) + "</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# ------------------------------------------------------------------ torchdata.nodes


def _collate_ids(items: list) -> torch.Tensor:
    return torch.tensor(items, dtype=torch.int64)


def make_nodes_loader(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                      shuffle: bool = True, seed: int = 0, num_workers: int = NUM_WORKERS,
                      batch_size: int = BATCH_SIZE, drop_last: bool = False):
    """torchdata.nodes as its "migrating from DataLoader" guide sets it up for DDP:
    ``SamplerWrapper(DistributedSampler(ds))`` → ``ParallelMapper(ds.__getitem__)`` →
    ``Batcher`` → collate → ``Loader``. ``SamplerWrapper`` calls ``set_epoch`` itself at
    every new iteration; ``initial_epoch=epoch`` is the value a loader reused for ``epoch``
    epochs holds."""
    from torch.utils.data import DistributedSampler
    from torchdata.nodes import Batcher, Loader, Mapper, ParallelMapper, SamplerWrapper

    ds = _Ids(n)
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=shuffle,
                                 seed=seed)
    node = SamplerWrapper(sampler, initial_epoch=epoch)
    node = ParallelMapper(node, map_fn=ds.__getitem__, num_workers=num_workers,
                          method="thread")
    node = Batcher(node, batch_size=batch_size, drop_last=drop_last)
    node = Mapper(node, _collate_ids)
    return Loader(node)


# ------------------------------------------------------------------ litdata


def _litdata_item(index: int) -> dict:
    return {"id": index}


def litdata_dir(n: int = N_SAMPLES, chunk_size: int = 8) -> str:
    """``litdata.optimize`` of the ids ``0..n-1`` in chunks of ``chunk_size`` (61 ids: eight
    chunks, the last of 5), written once into a temporary folder and renamed into place, so
    ranks that race all find the same complete folder. Its progress output is swallowed."""
    import contextlib

    folder = os.path.join(CACHE_DIR, f"litdata-{n}-{chunk_size}")
    if os.path.exists(os.path.join(folder, "index.json")):
        return folder
    import litdata

    os.makedirs(CACHE_DIR, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="litdata-", dir=CACHE_DIR)
    out = os.path.join(tmp, "out")
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        litdata.optimize(fn=_litdata_item, inputs=list(range(n)), output_dir=out,
                         chunk_size=chunk_size, num_workers=1)
    try:
        os.rename(out, folder)
    except OSError:          # another rank got there first; its folder is the same
        pass
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return folder


def make_litdata_loader(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                        shuffle: bool = True, seed: int = 42, drop_last: bool | None = None,
                        num_workers: int = NUM_WORKERS, batch_size: int = BATCH_SIZE,
                        plain_dataloader: bool = False):
    """``StreamingDataset(optimized folder, shuffle=…, seed=…)`` in a
    ``StreamingDataLoader``. litdata reads rank and world size from ``torch.distributed``.
    The loader counts epochs itself (``current_epoch``, +1 at every ``iter``); setting it to
    ``epoch`` is the value a loader reused for ``epoch`` epochs holds.
    ``plain_dataloader=True`` uses torch's ``DataLoader`` instead, which never calls
    ``set_epoch``."""
    import litdata

    _quiet()
    ds = litdata.StreamingDataset(litdata_dir(n), shuffle=shuffle, seed=seed,
                                  drop_last=drop_last)
    if plain_dataloader:
        return DataLoader(ds, batch_size=batch_size, **_loader_kwargs(num_workers))
    loader = litdata.StreamingDataLoader(ds, batch_size=batch_size,
                                         **_loader_kwargs(num_workers))
    loader.current_epoch = epoch
    return loader


# ------------------------------------------------------------------ mosaicml-streaming


def streaming_modules():
    """mosaicml-streaming's partition and shuffle functions, the code
    ``StreamingDataset`` runs to decide which samples each node, rank and worker reads.

    ``import streaming`` imports its text, vision and multimodal packages, which need
    ``transformers`` and ``torchvision`` (the only torchvision for torch 2.13 on the
    registry is a CUDA build), and ``streaming.base`` imports ``transformers`` too. These two
    subpackages import only numpy, so they are loaded from the installed wheel under their
    own names, with empty stand-ins for the parents ``streaming`` and ``streaming.base``
    (their ``__init__`` is not run). Returns ``(get_partitions, get_shuffle)``."""
    import importlib
    import importlib.machinery
    import sys
    import types

    spec = importlib.machinery.PathFinder.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("mosaicml-streaming is not installed: "
                          "pip install --no-deps -r requirements-audit.txt")
    root = list(spec.submodule_search_locations)[0]
    for name, path in (("streaming", root), ("streaming.base", os.path.join(root, "base"))):
        if name not in sys.modules:
            stand_in = types.ModuleType(name, "stand-in: the package __init__ is not run")
            stand_in.__path__ = [path]
            sys.modules[name] = stand_in
    partition = importlib.import_module("streaming.base.partition")
    shuffle = importlib.import_module("streaming.base.shuffle")
    return partition.get_partitions, shuffle.get_shuffle


class _StreamingWork(torch.utils.data.IterableDataset):
    """A rank's share of one epoch as mosaicml-streaming computes it: the partition tensor
    ``(nodes, ranks per node, workers per rank, batches per worker, batch size)`` from
    ``get_partitions``, ids mapped through ``get_shuffle`` when shuffling, ``-1`` padding
    skipped, each DataLoader worker reading its own slice: what
    ``generate_work_random_batching`` and ``StreamingDataset._get_work`` do."""

    def __init__(self, rank, world_size, epoch, *, shard_sizes, shuffle, seed, batch_size,
                 num_workers, num_canonical_nodes, partition_algo, shuffle_algo,
                 shuffle_block_size, drop_first):
        self.rank, self.world_size, self.epoch = rank, world_size, epoch
        self.shard_sizes = np.asarray(shard_sizes, dtype=np.int64)
        self.shuffle, self.seed, self.batch_size = shuffle, seed, batch_size
        self.num_workers = max(1, num_workers)
        self.num_canonical_nodes = num_canonical_nodes or 1
        self.partition_algo, self.shuffle_algo = partition_algo, shuffle_algo
        self.shuffle_block_size, self.drop_first = shuffle_block_size, drop_first

    def work(self) -> np.ndarray:
        get_partitions, get_shuffle = streaming_modules()
        ids = get_partitions(self.partition_algo, int(self.shard_sizes.sum()),
                             self.num_canonical_nodes, 1, self.world_size, self.num_workers,
                             self.batch_size, self.drop_first)
        if self.shuffle:
            order = get_shuffle(self.shuffle_algo, self.shard_sizes, self.num_canonical_nodes,
                                self.seed, self.epoch, self.shuffle_block_size)
            ids = np.where(ids != -1, order[ids], -1)
        return ids[0, self.rank]

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = 0 if info is None else info.id
        mine = self.work()[worker].reshape(-1)
        yield from (int(i) for i in mine if i != -1)


def make_streaming_loader(rank: int, world_size: int, epoch: int, *, shard_sizes=SHARD_SIZES,
                          shuffle: bool = True, seed: int = 9176,
                          num_workers: int = NUM_WORKERS, batch_size: int = BATCH_SIZE,
                          num_canonical_nodes: int | None = None,
                          partition_algo: str = "relaxed", shuffle_algo: str = "py1e",
                          shuffle_block_size: int = 1 << 18, drop_first: int = 0):
    """mosaicml-streaming's sample assignment (its defaults: ``relaxed`` partition, ``py1e``
    shuffle, seed 9176) over ``shard_sizes``, in a DataLoader with ``num_workers`` workers.
    ``drop_first`` is how its ``state_dict`` resumes: the samples the whole world has seen."""
    ds = _StreamingWork(rank, world_size, epoch, shard_sizes=shard_sizes, shuffle=shuffle,
                        seed=seed, batch_size=batch_size, num_workers=num_workers,
                        num_canonical_nodes=num_canonical_nodes,
                        partition_algo=partition_algo, shuffle_algo=shuffle_algo,
                        shuffle_block_size=shuffle_block_size, drop_first=drop_first)
    return DataLoader(ds, batch_size=batch_size, **_loader_kwargs(num_workers))


def make_streaming_resumed(rank: int, world_size: int, epoch: int, *,
                           stop_after: int = STOP_AFTER, **settings):
    """mosaicml-streaming's resume: after ``stop_after`` batches on every rank its
    ``state_dict`` records ``sample_in_epoch``, the samples the whole world has seen
    (``stop_after × batch_size × world_size``), and the restarted dataset passes it to
    ``get_partitions`` as ``drop_first``. Returns every batch before and after the restart."""
    batch_size = settings.get("batch_size", BATCH_SIZE)
    first = iter(make_streaming_loader(rank, world_size, epoch, **settings))
    before = [batch for _, batch in zip(range(stop_after), first, strict=False)]
    del first
    seen = stop_after * batch_size * world_size
    return before + list(make_streaming_loader(rank, world_size, epoch, drop_first=seen,
                                               **settings))


# ------------------------------------------------------------------ seed 004's recipes, as written

SEED_SHARDS = (12, 12, 12, 12, 13)   # the same 61 ids in five shards: an odd count for 2 ranks


class _IdRange(Dataset):
    """Map-style ids ``start..stop-1``: one shard file, loaded."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.start + index


def shard_paths(sizes=SEED_SHARDS) -> list[str]:
    """Stand-in shard paths ``"ids-<start>-<stop>"`` that :func:`load_shard` reads back."""
    bounds = np.cumsum((0, *sizes))
    return [f"ids-{a}-{b}" for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def load_shard(path: str) -> Dataset:
    """The shard a path names, as a map-style dataset."""
    _, start, stop = path.split("-")
    return _IdRange(int(start), int(stop))


def load_sharded_dataset(shard_paths: list[str], rank: int, world_size: int):
    """Load dataset shards specific to this rank."""
    from torch.utils.data import ConcatDataset
    # Assign shards to ranks
    shards_per_rank = len(shard_paths) // world_size
    my_shards = shard_paths[
        rank * shards_per_rank:(rank + 1) * shards_per_rank
    ]

    # Load only this rank's shards
    datasets = [load_shard(path) for path in my_shards]
    return ConcatDataset(datasets)


def load_sharded_round_robin(shard_paths: list[str], rank: int, world_size: int):
    """Every shard to exactly one rank: shard ``i`` goes to rank ``i % world_size``."""
    from torch.utils.data import ConcatDataset

    return ConcatDataset([load_shard(path) for path in shard_paths[rank::world_size]])


def make_seed_pattern2(rank: int, world_size: int, epoch: int, *, sizes=SEED_SHARDS,
                       load=load_sharded_dataset, num_workers: int = NUM_WORKERS,
                       batch_size: int = BATCH_SIZE):
    """Seed 004's "Pattern 2" (``load=load_sharded_dataset``) in a DataLoader."""
    return DataLoader(load(shard_paths(sizes), rank, world_size), batch_size=batch_size,
                      **_loader_kwargs(num_workers))


def _wds_pair(sample: dict) -> tuple[int, int]:
    return int(sample["id"]), 0


def create_webdataset_loader(url, batch_size: int, rank: int, world_size: int, *,
                             nodesplitter=None, num_workers: int = NUM_WORKERS,
                             dataset_size: int = 10000):
    """Seed 004's "Pattern 3" as written, on tar shards holding ids: ``.decode("pil")`` and
    the image transform have nothing to decode here, so ``.map(_wds_pair)`` stands in for
    them, and the seed's literal 10000 (its dataset size) is ``dataset_size``.
    ``nodesplitter`` is the argument its error message asks for."""
    import webdataset as wds

    extra = {} if nodesplitter is None else {"nodesplitter": nodesplitter}
    dataset = (
        wds.WebDataset(url, **extra)
        .shuffle(1000)
        .map(_wds_pair)
        .batched(batch_size)
    )

    # Shard across workers
    dataset = dataset.with_epoch(dataset_size // world_size)

    return wds.WebLoader(dataset, num_workers=num_workers, **_context())


def _first(batch) -> torch.Tensor:
    return torch.as_tensor(batch[0], dtype=torch.int64)


def make_seed_pattern3(rank: int, world_size: int, epoch: int, *, sizes=SHARD_SIZES,
                       split_nodes: bool = False, num_workers: int = NUM_WORKERS,
                       batch_size: int = BATCH_SIZE):
    """Seed 004's WebDataset loader over :func:`wds_shards`; ``split_nodes=True`` passes
    ``nodesplitter=wds.split_by_node``, as its error message asks. Yields id tensors."""
    import webdataset as wds

    _quiet()
    loader = create_webdataset_loader(
        wds_shards(sizes), batch_size, rank, world_size,
        nodesplitter=wds.split_by_node if split_nodes else None, num_workers=num_workers,
        dataset_size=sum(sizes))
    return (_first(batch) for batch in loader)


def mystery_loader(rank: int, world_size: int, epoch: int):
    """A loader built with a real library, for the exercise of notebook 10: audit it before
    you read this function."""
    return make_hf_loader(rank, world_size, epoch, num_shards=6, shuffle=True,
                          split_then_epoch=False)
