"""How long until the first batch, and how much memory, as the dataset grows to 10**9?

Run: ``.venv/bin/python -m benchmarks.reference_scale``. Each run is a fresh interpreter
that imports torch, then times one epoch start of worker 0 of rank 0 in a world of 8
ranks (micro-batches of 256) up to its first batch, and reads how far its peak resident
memory rose over what the imports had taken. Two rows do that same work:

- ``keyed permutation``: :class:`~talk_helpers.reference.sharded_iterable.
  ShardedIterableDataset` as it is (a Feistel bijection of the positions, nothing built);
- ``materialised permutation``: an epoch start that builds the order, ``torch.randperm(N)``
  of the whole epoch in every worker, then its rank's block and its worker's items.

a third shows the sharded path: ``from_shards`` over ``N // 10_000`` shards of 10,000
samples (the shard order is built: O(shards)), and a fourth the dataset yielding samples
for a DataLoader that batches them (``batch_size=None``): the first 256 samples one by one,
collated as ``DataLoader(batch_size=256)`` would. The materialised row stops at 10**8: at
10**9 it needs 8 GB for the order alone, more than a shared machine can give.

Runs alternate between rows; the table gives the median and the spread (min-max) of each.

A second table measures the docstring's memory claim: one worker reads a whole epoch of
64 shard files of 1 MiB (1,024 samples of 256 float32 each, loaded with ``np.load``), and
records the most shards it held at once and the peak resident memory it gained. Rows: the
default ``block_size`` (2**18 samples: all 65,536 are one block) and ``block_bytes=8 MiB``
(at most two blocks of 8 MiB plus one shard each).
Written to ``benchmarks/results/reference_scale.md`` (``--memory-only``: the second table).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RUNS = 5
SIZES = (10**6, 10**7, 10**8, 10**9)
MATERIALISED_UP_TO = 10**8
BATCH, WORLD = 256, 8
RESULTS = Path(__file__).parent / "results" / "reference_scale.md"
SHARDS, SHARD_SAMPLES, SAMPLE_FLOATS = 64, 1024, 256    # 1 MiB per shard
MEMORY_ROWS = {"block_size=2**18 samples (the default)": {},
               "block_bytes=8 MiB": {"block_bytes": 8 << 20}}
ROWS = ("keyed permutation", "from_shards, 10,000 per shard",
        "samples as items, collated by 256", "materialised permutation")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux


def one_run(row: str, n: int) -> dict:
    """In this (fresh) process: seconds to the first batch and peak memory it added."""
    import itertools
    import time

    import numpy as np
    import torch
    from torch.utils.data import default_collate

    from talk_helpers.reference.sharded_iterable import ShardedIterableDataset

    count = n // 10_000
    shards = [range(i * 10_000, (i + 1) * 10_000) for i in range(count)] \
        if row.startswith("from_shards") else None   # the caller's list, made beforehand
    before = peak_mb()
    start = time.perf_counter()
    if row == "materialised permutation":
        generator = torch.Generator().manual_seed(1)
        order = torch.randperm(n, generator=generator).numpy()
        per_rank = n // WORLD
        first = torch.from_numpy(order[:per_rank][:BATCH].copy())
    elif row.startswith("samples as items"):
        ds = ShardedIterableDataset(n, rank=0, world_size=WORLD)
        ds.set_epoch(1)
        first = default_collate(list(itertools.islice(iter(ds), BATCH)))
    else:
        if row == "keyed permutation":
            ds = ShardedIterableDataset(n, batch_size=BATCH, rank=0, world_size=WORLD)
        else:
            ds = ShardedIterableDataset.from_shards(
                shards, lengths=np.full(count, 10_000).tolist(), batch_size=BATCH, rank=0,
                world_size=WORLD)
        ds.set_epoch(1)
        first = next(iter(ds))
    seconds = time.perf_counter() - start
    assert len(first) == BATCH
    return {"seconds": seconds, "extra_mb": peak_mb() - before}


def memory_run(row: str, folder: str) -> dict:
    """In this (fresh) process: one worker reads a whole epoch of the shard files."""
    import numpy as np

    from talk_helpers.reference.sharded_iterable import ShardedIterableDataset

    paths = sorted(Path(folder).glob("*.npy"))
    before = peak_mb()
    ds = ShardedIterableDataset.from_shards(
        paths, lengths=[SHARD_SAMPLES] * SHARDS, load=np.load, batch_size=BATCH, rank=0,
        world_size=1, **MEMORY_ROWS[row])
    ds.set_epoch(1)
    held = 0
    for _ in ds:
        held = max(held, len(ds._shards.cache))   # the loaded shards the worker keeps
    return {"held": held, "extra_mb": peak_mb() - before}


def measure(*args) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.reference_scale", *map(str, args)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_table() -> list[str]:
    import numpy as np

    folder = tempfile.mkdtemp()
    try:
        for i in range(SHARDS):
            np.save(Path(folder) / f"{i:03d}.npy",
                    np.zeros((SHARD_SAMPLES, SAMPLE_FLOATS), dtype=np.float32))
        runs = {row: [] for row in MEMORY_ROWS}
        for _ in range(RUNS):
            for row in runs:
                runs[row].append(measure("--memory", row, folder))
    finally:
        shutil.rmtree(folder)
    return [f"| {row} | {spread([r['held'] for r in rs], 0)} | "
            f"{spread([r['extra_mb'] for r in rs], 1)} |" for row, rs in runs.items()]


def spread(values: list[float], digits: int) -> str:
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f})")


def main() -> None:
    load_before = os.getloadavg()[0]
    results = {(row, n): [] for n in SIZES for row in ROWS
               if row != "materialised permutation" or n <= MATERIALISED_UP_TO}
    for _ in range(RUNS):
        for key in results:
            results[key].append(measure("--one", *key))
            print(key, results[key][-1], flush=True)
    load_after = os.getloadavg()[0]
    lines = []
    for (row, n), runs in results.items():
        seconds = [r["seconds"] for r in runs]
        memory = [r["extra_mb"] for r in runs]
        lines.append(f"| {row} | {n:.0e} | {spread(seconds, 3)} | {spread(memory, 1)} |")
    shared = max(load_before, load_after) > (os.cpu_count() or 1)
    table = "\n".join([
        "# First batch of an epoch, as the dataset grows",
        "",
        f"`benchmarks/reference_scale.py`: {RUNS} runs per row in fresh interpreters, rows "
        f"alternating; worker 0 of rank 0 of {WORLD}, micro-batches of {BATCH}. "
        f"{platform.system()}, Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {load_before:.1f} before and {load_after:.1f} after"
        + (" — the machine was shared with other jobs, so the times are upper bounds."
           if shared else "."),
        "",
        "Median (min–max) of the seconds from the epoch start to the first batch, and of "
        "the peak resident memory the process gained over its imports.",
        "",
        "| row | samples | first batch, s | extra memory, MB |",
        "| --- | ---: | ---: | ---: |",
        *lines,
        "",
        f"The materialised row stops at {MATERIALISED_UP_TO:.0e}: at 1e9 its order alone is "
        "8 GB in every worker.",
        "",
    ])
    RESULTS.write_text(table + memory_section())
    print(RESULTS.read_text())


def memory_section() -> str:
    load_before = os.getloadavg()[0]
    rows = memory_table()
    return "\n".join([
        "",
        "## What a worker holds",
        "",
        f"One worker reads a whole epoch of {SHARDS} shard files of 1 MiB ({SHARD_SAMPLES} "
        f"samples of {SAMPLE_FLOATS} float32), loaded with `np.load`, micro-batches of "
        f"{BATCH}; {RUNS} runs per row in fresh interpreters, load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after. Median (min–max) of "
        "the most shards it held at once and of the peak resident memory it gained.",
        "",
        "| blocks | shards held | extra memory, MB |",
        "| --- | ---: | ---: |",
        *rows,
        "",
    ])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one_run(sys.argv[2], int(sys.argv[3]))))
    elif sys.argv[1:2] == ["--memory"]:
        print(json.dumps(memory_run(sys.argv[2], sys.argv[3])))
    elif sys.argv[1:2] == ["--memory-only"]:   # keeps the first table as it was measured
        kept = RESULTS.read_text().split("## What a worker holds")[0].rstrip()
        RESULTS.write_text(kept + "\n" + memory_section())
        print(RESULTS.read_text())
    else:
        main()
