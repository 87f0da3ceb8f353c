"""litdata: an optimized folder read by ``StreamingDataset`` and ``StreamingDataLoader``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from unittest import mock

from torch.utils.data import DataLoader

from talk_helpers.libraries.common import (
    BATCH_SIZE,
    N_SAMPLES,
    NUM_WORKERS,
    cache_dir,
    loader_kwargs,
    quiet,
)


def _litdata_item(index: int) -> dict:
    return {"id": index}


def litdata_dir(n: int = N_SAMPLES, chunk_size: int = 8) -> str:
    """``litdata.optimize`` of the ids ``0..n-1`` in chunks of ``chunk_size`` (61 ids: eight
    chunks, the last of 5), written once into a temporary folder and renamed into place, so
    ranks that race all find the same complete folder. Its progress output is swallowed."""
    import contextlib

    folder = os.path.join(cache_dir(), f"litdata-{n}-{chunk_size}")
    if os.path.exists(os.path.join(folder, "index.json")):
        return folder
    import litdata

    tmp = tempfile.mkdtemp(prefix="litdata-", dir=cache_dir())
    out = os.path.join(tmp, "out")
    # optimize's own scratch folders (``<temp>/chunks`` and ``<temp>/data`` by default,
    # fixed names it also deletes) go inside ours
    scratch = {"DATA_OPTIMIZER_CACHE_FOLDER": os.path.join(tmp, "chunks"),
               "DATA_OPTIMIZER_DATA_CACHE_FOLDER": os.path.join(tmp, "data")}
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink), mock.patch.dict(os.environ, scratch):
        litdata.optimize(fn=_litdata_item, inputs=list(range(n)), output_dir=out,
                         chunk_size=chunk_size, num_workers=1,
                         verbose=False)  # its progress bar is a widget in a notebook
    written = _ids_written(out)
    if written != n:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"litdata.optimize wrote {written} of {n} ids into {out}: "
                           "nothing was kept, the next call builds the folder again")
    try:
        os.rename(out, folder)
    except OSError:          # another rank got there first; its folder is the same
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _ids_written(out: str) -> int:
    """How many ids the chunks listed in ``out/index.json`` hold (0 if the index or any
    chunk file is missing): a folder is kept only when this is all of them."""
    try:
        with open(os.path.join(out, "index.json")) as f:
            chunks = json.load(f)["chunks"]
    except (OSError, ValueError, KeyError):
        return 0
    if not all(os.path.exists(os.path.join(out, c["filename"])) for c in chunks):
        return 0
    return sum(int(c["chunk_size"]) for c in chunks)


def make_litdata_loader(rank: int, world_size: int, epoch: int, *, n: int = N_SAMPLES,
                        shuffle: bool = True, seed: int = 42, drop_last: bool | None = None,
                        num_workers: int = NUM_WORKERS, batch_size: int = BATCH_SIZE,
                        plain_dataloader: bool = False, chunk_size: int = 8):
    """``StreamingDataset(optimized folder, shuffle=…, seed=…)`` in a
    ``StreamingDataLoader``. litdata reads rank and world size from ``torch.distributed``.
    The loader counts epochs itself (``current_epoch``, +1 at every ``iter``); setting it to
    ``epoch`` is the value a loader reused for ``epoch`` epochs holds.
    ``plain_dataloader=True`` uses torch's ``DataLoader`` instead, which never calls
    ``set_epoch``. ``chunk_size``: samples per chunk file (:func:`litdata_dir`)."""
    import litdata

    quiet()
    ds = litdata.StreamingDataset(litdata_dir(n, chunk_size), shuffle=shuffle, seed=seed,
                                  drop_last=drop_last)
    if plain_dataloader:
        return DataLoader(ds, batch_size=batch_size, **loader_kwargs(num_workers))
    loader = litdata.StreamingDataLoader(ds, batch_size=batch_size,
                                         **loader_kwargs(num_workers))
    loader.current_epoch = epoch
    return loader
