"""Loaders modelled on what people train with, each as ``factory(rank, world_size, epoch)``
the audit runs unchanged, some with a planted bug whose effect is known.

Data are generated locally (small images, tar shards, a CSV, token files, a litdata
folder) into the folder ``$AUDIT_TRIAL_DATA`` names (the tests make one per session and
build every file in it before any rank starts, :func:`build_all`), else into a private
temporary folder. Each file, and the image folder as a whole, is written under a
temporary name and renamed into place, so that ranks that race never see half of one.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import io
import os
import tarfile
import tempfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset
from torch.utils.data import get_worker_info as worker_info

DATA = os.environ.get("AUDIT_TRIAL_DATA") or tempfile.mkdtemp(prefix="audit-trial-")


def _atomic(path: str, write) -> str:
    """``write(tmp)`` then rename to ``path``, unless ``path`` exists."""
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        write(tmp)
        os.replace(tmp, path)
    return path


def _atomic_folder(path: str, fill) -> str:
    """``fill(tmp_folder)`` then rename the whole folder to ``path``, unless it exists: a
    rank listing ``path`` sees every file or no folder at all."""
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=os.path.basename(path) + ".", dir=os.path.dirname(path))
        fill(tmp)
        try:
            os.rename(tmp, path)
        except OSError:   # another process renamed its own first: the same content
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return path


def build_all() -> None:
    """Every file the loaders read, built once, before any rank starts."""
    clip_shards()
    clip_shards(8, 16, name="keyed")
    keys_file()
    image_folder()
    token_file()
    csv_file()
    from talk_helpers.libraries.litdata_loaders import litdata_dir

    for n, chunk in ((64, 8), (256, 4), (61, 8)):
        litdata_dir(n, chunk)


def _documents(n: int) -> list[str]:
    """n documents of made-up words: no two windows of their text alike."""
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return [" ".join("".join(rng.choice(letters, size=int(rng.integers(2, 9))))
                     for _ in range(int(rng.integers(5, 40)))) for _ in range(n)]


def _tokens(text: str) -> list[int]:
    return list(text.encode())


# --- 1, 2. torchtitan-style: an HF stream, tokenized and packed, StatefulDataLoader ------


class PackedHFStream(IterableDataset):
    """torchtitan's HuggingFaceDataset, reduced: documents from an HF iterable dataset split
    by node, tokenized, packed into windows of ``seq_len + 1`` tokens; yields
    ``({"input": x}, y)`` (``dicts=True``: ``{"input_ids": x, "labels": y}``); endless with
    ``infinite=True``, re-reading its split from the start."""

    def __init__(self, rank, world_size, *, seq_len=16, infinite=False, split=True,
                 dicts=False):
        from datasets import Dataset as HFDataset
        from datasets.distributed import split_dataset_by_node

        ds = HFDataset.from_dict({"text": _documents(64)}).to_iterable_dataset(num_shards=4)
        self.data = split_dataset_by_node(ds, rank, world_size) if split else ds
        self.seq_len, self.infinite, self.dicts = seq_len, infinite, dicts

    def __iter__(self):
        buffer: list[int] = []
        while True:
            for sample in self.data:
                buffer += _tokens(sample["text"])
                while len(buffer) >= self.seq_len + 1:
                    window = torch.tensor(buffer[:self.seq_len + 1])
                    buffer = buffer[self.seq_len + 1:]
                    x, y = window[:-1], window[1:]
                    yield {"input_ids": x, "labels": y} if self.dicts else ({"input": x}, y)
            if not self.infinite:
                return


def titan_loader(rank, world_size, epoch, *, infinite=False, split=True, dicts=False):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(PackedHFStream(rank, world_size, infinite=infinite, split=split,
                                             dicts=dicts), batch_size=4)


# --- 3. OpenCLIP-style WebDataset: image/text pairs with __key__, optionally resampled -----


def clip_shards(n_shards=4, per_shard=8, name="clip") -> list[str]:
    from PIL import Image

    def write(i):
        def fill(tmp):
            rng = np.random.default_rng(i)
            with tarfile.open(tmp, "w") as tar:
                for j in range(per_shard):
                    key = f"s{i:02d}/{j:04d}"
                    png = io.BytesIO()
                    pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                    Image.fromarray(pixels).save(png, format="PNG")
                    for ext, data in (("png", png.getvalue()),
                                      ("txt", f"caption {i} {j}".encode())):
                        info = tarfile.TarInfo(f"{key}.{ext}")
                        info.size, info.mtime = len(data), 0
                        tar.addfile(info, io.BytesIO(data))
        return _atomic(os.path.join(DATA, name, f"shard-{i:03d}.tar"), fill)

    return [write(i) for i in range(n_shards)]


def _clip_sample(sample: dict) -> dict:
    image = torch.from_numpy(np.array(sample["png"])).permute(2, 0, 1).float() / 255
    return {"__key__": sample["__key__"], "image": image, "text": sample["txt"]}


def clip_loader(rank, world_size, epoch, *, split=True, resampled=False):
    import warnings

    import webdataset as wds

    warnings.filterwarnings("ignore", message=".*shardshuffle.*")
    urls = clip_shards()
    if resampled:
        ds = wds.WebDataset(urls, resampled=True, shardshuffle=False, seed=rank,
                            nodesplitter=None).with_epoch(8)
        # the same draws on every run: ResampledShards.__iter__ mixes the pid, the time and
        # os.urandom into its seed unless deterministic (webdataset/shardlists.py)
        ds.pipeline[0].deterministic = True
    else:
        ds = wds.WebDataset(urls, shardshuffle=False, empty_check=False,
                            nodesplitter=wds.split_by_node if split else (lambda u: u))
    ds = ds.decode("rgb8").map(_clip_sample)
    return DataLoader(ds, batch_size=4, num_workers=2)


# --- 4. ImageFolder-like files through DistributedSampler, float or uint8 ---------------


def image_folder(n=101, classes=3) -> str:
    from PIL import Image

    def fill(folder):
        for i in range(n):
            pixels = np.random.default_rng(i).integers(0, 256, (8, 8, 3), dtype=np.uint8)
            os.makedirs(os.path.join(folder, f"class_{i % classes}"), exist_ok=True)
            with open(os.path.join(folder, f"class_{i % classes}", f"img_{i:04d}.png"),
                      "wb") as out:
                Image.fromarray(pixels).save(out, format="PNG")

    return _atomic_folder(os.path.join(DATA, f"images-{n}"), fill)


class ImageFolderLike(Dataset):
    """torchvision's ImageFolder, without torchvision: (image, class index) from
    ``root/<class>/<file>``, as a float tensor in [0, 1] or as uint8 pixels."""

    def __init__(self, root: str, uint8: bool = False):
        self.classes = sorted(os.listdir(root))
        self.samples = [(os.path.join(root, c, f), k) for k, c in enumerate(self.classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))]
        self.uint8 = uint8

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        from PIL import Image

        path, label = self.samples[i]
        with Image.open(path) as img:
            pixels = torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)
        return (pixels if self.uint8 else pixels.float() / 255), label


def image_folder_loader(rank, world_size, epoch, *, uint8=False, set_epoch=True):
    ds = ImageFolderLike(image_folder(), uint8=uint8)
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    if set_epoch:
        sampler.set_epoch(epoch)
    return DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)


# --- 5. A Lightning-style DataModule, its loader built once and reused ------------------


class Features(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"idx": i, "x": torch.full((4,), float(i))}


class DataModule:
    """LightningDataModule's shape, plain Python: ``setup()``, ``train_dataloader()``.
    Lightning builds the loader once and calls ``sampler.set_epoch`` every epoch."""

    def __init__(self, rank, world_size):
        self.rank, self.world_size = rank, world_size

    def setup(self, stage="fit"):
        self.train = Features()

    def train_dataloader(self):
        sampler = DistributedSampler(self.train, num_replicas=self.world_size, rank=self.rank,
                                     shuffle=True, seed=7)
        return DataLoader(self.train, batch_size=8, sampler=sampler, num_workers=2,
                          persistent_workers=True)


def datamodule_loader(rank, world_size, epoch):
    module = DataModule(rank, world_size)
    module.setup("fit")
    return module.train_dataloader()


# --- 6, 7. HF map-style datasets: an int idx column, a string id column -------------------


def hf_table(string_ids=False):
    from datasets import Dataset as HFDataset

    n = 60
    columns = {"text": _documents(n)}
    if string_ids:
        columns["doc_id"] = [f"doc-{i:04d}" for i in range(n)]
    else:
        columns["idx"] = list(range(n))
    return HFDataset.from_dict(columns)


def hf_map_loader(rank, world_size, epoch, *, string_ids=False, seed_by_rank=False,
                  sampler=True):
    ds = hf_table(string_ids)
    if not string_ids:
        ds = ds.with_format("torch", columns=["idx"], output_all_columns=True)
    if not sampler:
        return DataLoader(ds, batch_size=6)
    chosen = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True,
                                seed=rank if seed_by_rank else 0)
    chosen.set_epoch(epoch)
    return DataLoader(ds, batch_size=6, sampler=chosen)


# --- 8. A packing text stream: documents sharded by rank and worker, packed windows -------


class PackedText(IterableDataset):
    """Documents sharded by rank and worker, tokenized and packed into windows; each worker
    stops after ``windows`` of them, so that every rank takes as many steps (documents
    pack into different numbers of windows on different ranks)."""

    def __init__(self, rank, world_size, seq_len=32, shard_workers=True, windows=8):
        self.rank, self.world_size = rank, world_size
        self.seq_len, self.shard_workers, self.windows = seq_len, shard_workers, windows

    def __iter__(self):
        info = worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        if not self.shard_workers:
            workers, worker = 1, 0
        shards = self.world_size * workers
        mine = self.rank * workers + worker
        buffer: list[int] = []
        made = 0
        for i, doc in enumerate(_documents(48)):
            if i % shards == mine:
                buffer += _tokens(doc) + [0]
                while len(buffer) >= self.seq_len:
                    if self.windows is not None and made == self.windows:
                        return
                    yield torch.tensor(buffer[:self.seq_len])
                    buffer = buffer[self.seq_len:]
                    made += 1


def packed_text_loader(rank, world_size, epoch, *, shard_workers=True, capped=True):
    return DataLoader(PackedText(rank, world_size, shard_workers=shard_workers,
                                 windows=8 if capped else None), batch_size=4, num_workers=2)


# --- 9. nanoGPT's DataLoaderLite: (x, y) windows from a token file, strided by rank -------


def token_file(n=4096) -> str:
    def fill(tmp):
        tokens = np.random.default_rng(1).integers(0, 50257, n, dtype=np.int64)
        with open(tmp, "wb") as out:
            np.save(out, tokens.astype(np.uint16))
    return _atomic(os.path.join(DATA, f"tokens-{n}.npy"), fill)


class DataLoaderLite:
    """nanoGPT's loader: ``next_batch()`` returns (x, y) of shape (B, T); each process
    starts at ``B * T * process_rank`` and strides by ``B * T * num_processes``."""

    def __init__(self, B, T, process_rank, num_processes):
        self.B, self.T = B, T
        self.process_rank, self.num_processes = process_rank, num_processes
        self.tokens = torch.tensor(np.load(token_file()).astype(np.int64))
        self.current_position = B * T * process_rank

    def next_batch(self):
        B, T = self.B, self.T
        buf = self.tokens[self.current_position:self.current_position + B * T + 1]
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        self.current_position += B * T * self.num_processes
        if self.current_position + (B * T * self.num_processes + 1) > len(self.tokens):
            self.current_position = B * T * self.process_rank
        return x, y


def nanogpt_loader(rank, world_size, epoch, *, ignore_rank=False):
    lite = DataLoaderLite(4, 32, 0 if ignore_rank else rank, world_size)
    return iter(lite.next_batch, None)   # endless, as the training loop calls it


# --- 10. litdata's StreamingDataLoader, which keeps its own epoch -----------------------


def litdata_loader(rank, world_size, epoch):
    import logging

    import litdata

    from talk_helpers.libraries.litdata_loaders import litdata_dir

    logging.getLogger("litdata.streaming.dataset").setLevel(logging.ERROR)
    ds = litdata.StreamingDataset(litdata_dir(64, 8), shuffle=True, seed=3, drop_last=False)
    return litdata.StreamingDataLoader(ds, batch_size=4, num_workers=2)


# --- 11, 12. dataclass and named-tuple batches --------------------------------------------


@dataclasses.dataclass
class ImageBatch:
    sample_ids: torch.Tensor
    pixels: torch.Tensor


def collate_images(samples) -> ImageBatch:
    return ImageBatch(sample_ids=torch.tensor([i for i, _ in samples]),
                      pixels=torch.stack([p for _, p in samples]))


class IndexedPixels(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return i, torch.full((3, 2, 2), i % 7, dtype=torch.uint8)


def dataclass_loader(rank, world_size, epoch):
    sampler = DistributedSampler(IndexedPixels(), num_replicas=world_size, rank=rank,
                                 shuffle=False)
    return DataLoader(IndexedPixels(), batch_size=5, sampler=sampler, collate_fn=collate_images)


Example = collections.namedtuple("Example", "index tokens label")


class Examples(Dataset):
    def __len__(self):
        return 200

    def __getitem__(self, i):
        return Example(i, torch.arange(6) + i, i % 2)


def namedtuple_loader(rank, world_size, epoch, *, same_rank=False):
    sampler = DistributedSampler(Examples(), num_replicas=world_size,
                                 rank=0 if same_rank else rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(Examples(), batch_size=10, sampler=sampler)


# --- 13. File paths -------------------------------------------------------------------------


class Files(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.paths[i], torch.tensor([float(len(self.paths[i]))])


def file_loader(rank, world_size, epoch, *, listed_twice=False):
    root = image_folder()
    paths = sorted(os.path.relpath(os.path.join(d, f), root)
                   for d, _, files in os.walk(root) for f in files)
    if listed_twice:   # a manifest concatenated with itself
        paths = paths + paths
    ds = Files(paths)
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)


# --- 14. Length bucketing ---------------------------------------------------------------


def lengths(n=64) -> np.ndarray:
    return np.random.default_rng(2).integers(3, 30, n)


class Sequences(Dataset):
    def __init__(self):
        self.lengths = lengths()

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        return i, torch.ones(int(self.lengths[i]), dtype=torch.long)


def pad_batch(samples) -> dict:
    longest = max(len(t) for _, t in samples)
    tokens = torch.zeros(len(samples), longest, dtype=torch.long)
    for row, (_, t) in enumerate(samples):
        tokens[row, :len(t)] = t
    return {"id": torch.tensor([i for i, _ in samples]), "tokens": tokens}


BOUNDARIES = (8, 16, 24)   # length buckets: < 8, 8-15, 16-23, 24 and longer


def bucketed_batches(ids: np.ndarray, all_lengths: np.ndarray, batch_size: int) -> list:
    """Batches of similar lengths: one bucket per length range, each cut into batches
    (its last one partial)."""
    bucket = np.searchsorted(BOUNDARIES, all_lengths[ids], side="right")
    out = []
    for b in range(len(BOUNDARIES) + 1):
        members = ids[bucket == b]
        out += [members[i:i + batch_size].tolist() for i in range(0, len(members), batch_size)]
    return out


def bucketing_loader(rank, world_size, epoch, *, per_rank=False):
    ds = Sequences()
    ids = np.arange(len(ds))
    if per_rank:   # each rank buckets its own share: how lengths fall decides its batches
        batches = bucketed_batches(ids[rank::world_size], ds.lengths, 4)
    else:          # bucket everything, deal whole batches in turn, drop what is left over
        batches = bucketed_batches(ids, ds.lengths, 4)
        batches = batches[:len(batches) // world_size * world_size][rank::world_size]
    return DataLoader(ds, batch_sampler=batches, collate_fn=pad_batch)


# --- 15. A CSV stream ---------------------------------------------------------------------


def csv_file(n=50) -> str:
    def fill(tmp):
        with open(tmp, "w") as out:
            out.write("row_id,value\n")
            for i in range(n):
                out.write(f"{i},{i * 0.5}\n")
    return _atomic(os.path.join(DATA, f"rows-{n}.csv"), fill)


class CsvRows(IterableDataset):
    def __init__(self, rank, world_size, shard_ranks=True):
        self.rank, self.world_size, self.shard_ranks = rank, world_size, shard_ranks

    def __iter__(self):
        info = worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        ranks, rank = (self.world_size, self.rank) if self.shard_ranks else (1, 0)
        with open(csv_file()) as rows:
            next(rows)
            for line_no, line in enumerate(rows):
                if line_no % (ranks * workers) == rank * workers + worker:
                    row_id, value = line.strip().split(",")
                    yield {"row_id": int(row_id), "value": float(value)}


def csv_loader(rank, world_size, epoch, *, shard_ranks=True):
    return DataLoader(CsvRows(rank, world_size, shard_ranks), batch_size=5, num_workers=2)


# --- 16. An HF iterable dataset with an id column -------------------------------------------


def hf_iterable_loader(rank, world_size, epoch, *, split=True):
    from datasets import Dataset as HFDataset
    from datasets.distributed import split_dataset_by_node

    ds = HFDataset.from_dict({"id": list(range(48)), "text": _documents(48)})
    stream = ds.to_iterable_dataset(num_shards=4)
    if split:
        stream = split_dataset_by_node(stream, rank, world_size)
    stream.set_epoch(epoch)
    return DataLoader(stream.with_format("torch"), batch_size=6, num_workers=2)


# --- 17. Ids that do not start at 0: a shard numbered from 10 000 ------------------------


class OffsetRecords(Dataset):
    """240 records numbered 10 000 + i, as the second shard of a larger set would be."""

    def __len__(self):
        return 240

    def __getitem__(self, i):
        return {"sample_id": 10_000 + i, "x": torch.zeros(2)}


def offset_ids_loader(rank, world_size, epoch, *, skip_tail=False):
    ds = OffsetRecords()
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    batches = DataLoader(ds, batch_size=8, sampler=sampler)
    if skip_tail:   # a bug: every rank stops one batch early, in epoch 0 as in the others
        return list(batches)[:-1]
    return batches


# --- 18. A resumed StatefulDataLoader whose next epoch replays part of the last ----------


def resumed_replay_loader(rank, world_size, epoch, n=256):
    """A job resumed from a stale checkpoint: epoch 1 reads the first 60% of epoch 0's
    order again, then the rest in a new order."""
    first = np.random.default_rng(0).permutation(n)
    if epoch == 0:
        order = first
    else:
        keep = int(0.6 * n)
        order = np.concatenate([first[:keep],
                                np.random.default_rng(epoch).permutation(first[keep:])])
    mine = torch.from_numpy(order[rank::world_size])
    return list(mine.split(8))


# --- 19. DistributedSampler whose set_epoch is never called -------------------------------


def sampler_loader(rank, world_size, epoch, *, set_epoch=True, n=400):
    ds = Features400()
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True, seed=1)
    if set_epoch:
        sampler.set_epoch(epoch)
    return DataLoader(ds, batch_size=10, sampler=sampler)


class Features400(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        return {"idx": i, "x": torch.full((2,), float(i))}


# --- 20. An IterableDataset split by rank, and maybe not by worker ------------------------


class RankStream(IterableDataset):
    """Rows ``rank::world_size`` of 96, split over workers unless ``split_workers`` is off
    (the bug: every worker of a rank reads the rank's whole share)."""

    def __init__(self, rank, world_size, split_workers=True):
        self.rank, self.world_size, self.split_workers = rank, world_size, split_workers

    def __iter__(self):
        mine = list(range(self.rank, 96, self.world_size))
        info = worker_info()
        if self.split_workers and info is not None:
            mine = mine[info.id::info.num_workers]
        yield from mine


def rank_stream_loader(rank, world_size, epoch, *, split_workers=True):
    return DataLoader(RankStream(rank, world_size, split_workers), batch_size=8,
                      num_workers=2)


# --- 21. ConcatDataset of two sources that each number their samples from 0 ---------------


class Source(Dataset):
    def __init__(self, n, offset=0):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"id": self.offset + i, "text": f"sample {i}"}


def concat_loader(rank, world_size, epoch, *, offsets=True):
    from torch.utils.data import ConcatDataset

    ds = ConcatDataset([Source(100), Source(40, offset=100 if offsets else 0)])
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(ds, batch_size=10, sampler=sampler)


# --- 22. webdataset's WebLoader: more workers than a rank has shards ----------------------


def webloader_loader(rank, world_size, epoch, *, workers=3):
    import warnings

    import webdataset as wds

    warnings.filterwarnings("ignore", message=".*shardshuffle.*")
    ds = (wds.WebDataset(clip_shards(), shardshuffle=False, empty_check=False,
                         nodesplitter=wds.split_by_node)
          .decode("rgb8").map(_clip_sample))
    return wds.WebLoader(ds, batch_size=4, num_workers=workers)


# --- 23. WeightedRandomSampler with replacement, seeded per rank or alike ----------------


def weighted_loader(rank, world_size, epoch, *, seeded_alike=False, n=500):
    from torch.utils.data import WeightedRandomSampler

    generator = torch.Generator().manual_seed(1000 * epoch + (0 if seeded_alike else rank))
    weights = torch.ones(n)
    sampler = WeightedRandomSampler(weights, num_samples=n // world_size, replacement=True,
                                    generator=generator)
    return DataLoader(list(range(n)), batch_size=10, sampler=sampler)


# --- 24. WebDataset __key__s read in storage order, or shuffled --------------------------


def keyed_loader(rank, world_size, epoch, *, shuffle_samples=True):
    """128 samples in 8 tar shards of 16; shards shuffled per epoch, and samples shuffled
    in a buffer of 64 (or not: the bug, batches of one shard's neighbours)."""
    import warnings

    import webdataset as wds

    warnings.filterwarnings("ignore", message=".*shardshuffle.*")
    urls = clip_shards(8, 16, name="keyed")
    ds = wds.WebDataset(urls, shardshuffle=8, seed=epoch, nodesplitter=wds.split_by_node,
                        empty_check=False)
    if shuffle_samples:
        ds = ds.shuffle(64, seed=epoch + 1000 * rank)
    ds = ds.decode("rgb8").map(_clip_sample)
    return DataLoader(ds, batch_size=4)


def keys_file() -> str:
    """The 128 keys of :func:`keyed_loader`'s shards, in storage order, one per line."""
    def fill(tmp):
        with open(tmp, "w") as out:
            out.writelines(f"s{i:02d}/{j:04d}\n" for i in range(8) for j in range(16))
    return _atomic(os.path.join(DATA, "keys.txt"), fill)


# --- 25. litdata: a chunk-level shuffle judged at its level, and its DDP drop ---------------


def litdata_chunks_loader(rank, world_size, epoch, *, shuffle=True, n=256, chunk=4):
    import logging

    import litdata

    from talk_helpers.libraries.litdata_loaders import litdata_dir

    logging.getLogger("litdata.streaming.dataset").setLevel(logging.ERROR)
    ds = litdata.StreamingDataset(litdata_dir(n, chunk), shuffle=shuffle, seed=5)
    return litdata.StreamingDataLoader(ds, batch_size=4, num_workers=2)


# --- the variants, by name, as the command line reaches them (module:factory) ------------

titan_unsplit = functools.partial(titan_loader, split=False)
titan_endless_dicts = functools.partial(titan_loader, infinite=True, dicts=True)
clip_unsplit = functools.partial(clip_loader, split=False)
clip_resampled = functools.partial(clip_loader, resampled=True)
image_folder_uint8 = functools.partial(image_folder_loader, uint8=True)
image_folder_without_set_epoch = functools.partial(image_folder_loader, set_epoch=False)
hf_map_seeded_by_rank = functools.partial(hf_map_loader, seed_by_rank=True)
hf_map_string_ids = functools.partial(hf_map_loader, string_ids=True)
hf_map_string_ids_unsampled = functools.partial(hf_map_loader, string_ids=True, sampler=False)
packed_text_unsharded_workers = functools.partial(packed_text_loader, shard_workers=False)
packed_text_uncapped = functools.partial(packed_text_loader, capped=False)
nanogpt_ignoring_rank = functools.partial(nanogpt_loader, ignore_rank=True)
namedtuple_same_rank = functools.partial(namedtuple_loader, same_rank=True)
file_list_twice = functools.partial(file_loader, listed_twice=True)
bucketing_per_rank = functools.partial(bucketing_loader, per_rank=True)
csv_unsharded_ranks = functools.partial(csv_loader, shard_ranks=False)
hf_iterable_unsplit = functools.partial(hf_iterable_loader, split=False)
offset_ids_short = functools.partial(offset_ids_loader, skip_tail=True)
sampler_without_set_epoch = functools.partial(sampler_loader, set_epoch=False)
rank_stream_unsplit_workers = functools.partial(rank_stream_loader, split_workers=False)
concat_colliding = functools.partial(concat_loader, offsets=False)
weighted_seeded_alike = functools.partial(weighted_loader, seeded_alike=True)
keyed_unshuffled = functools.partial(keyed_loader, shuffle_samples=False)
litdata_unshuffled_chunks = functools.partial(litdata_chunks_loader, shuffle=False)
litdata_drop = functools.partial(litdata_chunks_loader, n=61, chunk=8)
