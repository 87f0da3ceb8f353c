"""Loader throughput: samples/s of six ways to read one token memmap, and the ceiling.

Usage: python -m benchmarks.loader_throughput [--samples N] [--seconds S] [--work W]

Writes benchmarks/results/loader_throughput.md (the table) and .png (the plot). Every
row reads the same generated int32 tokens and applies the same per-sample masking, so the
rows differ only in how samples reach the main process. Ratios are to row (a) with the
same workers and batch size, and to the single-process ceiling. Each row is the median
of several passes with the slowest and fastest beside it; a comparison gets a verdict
only when the spreads do not overlap. The default run takes about three minutes on 2 cores.
"""

import argparse
import collections
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from talk_helpers.diagrams.fast_loading import throughput_figure  # noqa: E402
from talk_helpers.lessons.datasets.fast import make_token_memmap  # noqa: E402
from talk_helpers.lessons.loading_bench import (  # noqa: E402
    KIND_LABELS,
    KINDS,
    Runs,
    compare,
    cpu_per_sample,
    grid_table,
    measure_ceiling,
    run_grid,
    unavailable_reason,
)

RESULTS = Path(__file__).resolve().parent / "results"


def check_speed() -> str:
    """checks.check_exactly_once on 10 million ids vs a collections.Counter loop."""
    try:
        from talk_helpers.checks import check_exactly_once
    except ImportError:
        return "talk_helpers.checks: not available"
    ids = np.random.default_rng(0).permutation(10_000_000)
    start = time.perf_counter()
    report = check_exactly_once(ids, 10_000_000)
    fast = time.perf_counter() - start
    sample = ids[:1_000_000].tolist()  # the loop on 1 million ids, scaled ×10
    start = time.perf_counter()
    counter = collections.Counter()
    for i in sample:
        counter[i] += 1
    slow = (time.perf_counter() - start) * 10
    return (f"check_exactly_once on 10 million ids: {fast:.2f} s (ok={report.ok}); a "
            f"collections.Counter loop: {slow:.1f} s (timed on 1 million ids, ×10) → "
            f"{slow / fast:.0f}× faster")

def cpu_table(path, work: int, batch_size: int) -> str:
    """CPU µs per sample in one process, per kind, with and without the masking work."""
    kinds = ["map", "iterable", "batched"] + (
        [] if unavailable_reason("reference") else ["reference"])
    works = sorted({0, work})
    lines = [f"CPU time per sample with num_workers=0, batch {batch_size}, best of 3 "
             f"(CPU time barely moves with machine load, unlike the rates above):\n",
             "| loader | " + " | ".join(f"µs, {w} masking round(s)" for w in works) + " |",
             "| --- |" + " ---: |" * len(works)]
    for kind in kinds:
        cells = [f"{cpu_per_sample(kind, path, batch_size=batch_size, work=w):.1f}"
                 for w in works]
        lines.append(f"| {KIND_LABELS[kind]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(results: dict, workers: int, batch: int) -> str:
    """The issue's targets for the reference dataset, read from the table."""
    def runs(kind):
        result = results.get((kind, workers, batch))
        return result if isinstance(result, Runs) else None

    ref, batched, hf = runs("reference"), runs("batched"), runs("hf")
    if ref is None:
        return "Targets: the reference dataset (d) was not available."
    lines = [f"Targets at {workers} workers, batch {batch} (ratios of medians):"]
    if batched:
        lines.append(f"(d) vs (c): {compare(ref, batched)}, target ≥ 0.90.")
    if hf:
        lines.append(f"(d) vs HF datasets: {compare(ref, hf)}, target ≥ 10×.")
    return " ".join(lines)


NOTES = """
## How to read it

- What separates (b) from (c) is not the transfer. With `batch_size` set, the DataLoader
  already collates inside each worker: samples never cross the process boundary one by
  one, in (b) or in (c). Batching in the dataset removes per-sample Python plumbing in
  the worker (one generator step and one small dict of tensors per sample, then
  `default_collate` stacking them); the per-sample masking stays. The CPU table shows
  the size of each part: the column without masking is the plumbing alone. Either way each batch
  comes from one worker's block, so neither mixes across workers (notebook 08 measures
  this with `shuffle_report`, and what unbatch/shuffle/rebatch costs).
- (d) deals batches of ids; its transform reads those rows from the same memmap (one
  slice, like (c)) and masks row by row like (c): the same bytes and the same work.
- HF datasets and webdataset pay a per-sample price of their own: Arrow rows converted
  to numpy and torch one example at a time, and a Python tar header plus an `.npy`
  header parsed per sample.
- Rows with workers above "× ceiling" 1 ran in parallel; on 2 cores the main process
  competes with the workers, so 2 workers rarely reach 2×.
"""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000, help="rows in the memmap")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=0.6,
                        help="steady-state time cap per configuration")
    parser.add_argument("--repeats", type=int, default=3,
                        help="passes over the grid; each row reports the median and spread")
    parser.add_argument("--work", type=int, default=1, help="masking rounds per sample")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--start-method", default="fork",
                        choices=["fork", "forkserver", "spawn"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="loader-bench-") as tmp:
        path = make_token_memmap(Path(tmp) / "tokens.npy", args.samples, args.seq_len)
        ceiling = Runs("ceiling", [measure_ceiling(path, work=args.work,
                                                   max_seconds=args.seconds * 2)
                                   for _ in range(args.repeats)])
        results = run_grid(path, kinds=args.kinds, workers=args.workers,
                           batch_sizes=args.batch_sizes, work=args.work,
                           max_seconds=args.seconds, repeats=args.repeats,
                           start_method=args.start_method,
                           data_dir=tmp)
        cpu = cpu_table(path, args.work, max(args.batch_sizes))
    table = grid_table(results, ceiling)
    missing = [k for k in args.kinds if unavailable_reason(k)]
    speed = check_speed()
    elapsed = time.perf_counter() - started
    header = (
        f"# Loader throughput\n\n"
        f"{args.samples} samples × {args.seq_len} int32 tokens, {args.work} masking "
        f"round(s) per sample (≈15 µs of numpy work each), start method "
        f"{args.start_method}, ≤ {args.seconds} s of steady state per row (first batch "
        f"excluded), median of {args.repeats} passes (slowest–fastest in brackets). "
        f"{os.cpu_count()} cores, Python "
        f"{platform.python_version()}, torch {torch.__version__}, load average "
        f"{load_before:.1f} at the start (above the core count, other processes shared "
        f"the cores and every row is noisy). Run took {elapsed:.0f} s.\n\n"
        f"× (a): ratio to row (a) with the same workers and batch size. × ceiling: ratio "
        f"to one process doing the same read and work without a DataLoader; above 1 means "
        f"the workers ran in parallel.\n\n")
    text = (header + table + "\n\n" + cpu + "\n\n" + targets(results, max(args.workers),
                                                 max(args.batch_sizes))
            + "\n\n" + speed + "\n" + NOTES)
    if missing:
        text += "\nNot available in this run: " + ", ".join(missing) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "loader_throughput.md").write_text(text)
    fig = throughput_figure(results, ceiling.rate,
                            title="Loader throughput (dashed: one-process ceiling)")
    fig.savefig(args.out / "loader_throughput.png", dpi=100, bbox_inches="tight")
    print(text)
    print(f"wrote {args.out / 'loader_throughput.md'} and .png", file=sys.stderr)


if __name__ == "__main__":
    main()
