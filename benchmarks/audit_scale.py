"""What does the audit cost beside reading the loader, at the sizes people train at?

Both rows run the same loader under ``torchrun --nproc-per-node 2`` (gloo, CPU), two
epochs: a map-style dataset of N int ids (each rank its share, in a new order every epoch
when shuffled) in ``DataLoader(batch_size=256, num_workers=2)``, fetched one sample at a
time (``Dataset.__getitem__``, most datasets) or a batch at a time (``__getitems__``
returning one tensor: the cheapest loader there is, where the audit's share is largest).
The **read** row iterates it and does nothing else (``python -m benchmarks.audit_scale
--read``); the **audit** row is
``python -m talk_helpers.audit benchmarks.audit_scale:make_loader --expected N`` on the
same loader, the same bytes. Per run: wall seconds, CPU seconds of every process
(torchrun, ranks, workers: what the machine spent, whoever else was using it) and the
peak resident memory of the largest rank process (workers not counted).

Run: ``.venv/bin/python -m benchmarks.audit_scale`` (``--sizes 1e6 1e7 --fetch sample batch
--orders in-order shuffled --repeat 3``; add ``--big`` for one run of each row at 1e8, in
order, batched). Writes ``benchmarks/results/audit_scale.md``.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "audit_scale.md"
BATCH_SIZE, WORKERS, RANKS, EPOCHS = 256, 2, 2, 2
SIZE_VAR, SHUFFLE_VAR, FETCH_VAR = "AUDIT_SCALE_N", "AUDIT_SCALE_SHUFFLE", "AUDIT_SCALE_FETCH"
FETCHES = ("sample", "batch")
DEFAULT_PLAN = ("sample:1e6:in-order:3", "sample:1e6:shuffled:3", "batch:1e6:in-order:3",
                "batch:1e6:shuffled:3", "sample:1e7:in-order:3", "sample:1e7:shuffled:3",
                "batch:1e7:in-order:3")
BIG = "batch:1e8:in-order:1"


# --- the loader both rows read ------------------------------------------------------------


class Ids(Dataset):
    """Sample ``i`` is the int ``i``."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index) -> int:
        return int(index)

    def __getitems__(self, indices) -> torch.Tensor:
        """A whole batch at once (DataLoader calls this when it exists): the ids as one
        tensor, with no Python object per sample."""
        if isinstance(indices, range):
            return torch.arange(indices.start, indices.stop, indices.step)
        return torch.as_tensor(np.asarray(indices, dtype=np.int64))


class PerSample(Ids):
    """The same ids fetched one sample at a time, as most datasets are."""

    __getitems__ = None


class RankShare(Sampler):
    """Rank ``rank``'s share of ``0..n-1`` (every ``world_size``-th id), in a new order every
    epoch when ``shuffle``; kept as one int array, as ``DistributedSampler``'s list of
    Python ints would take about 36 bytes per id."""

    def __init__(self, n, rank, world_size, epoch, shuffle):
        self.n, self.rank, self.world_size = n, rank, world_size
        self.epoch, self.shuffle = epoch, shuffle

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world_size))

    def __iter__(self):
        if not self.shuffle:
            return iter(range(self.rank, self.n, self.world_size))
        dtype = np.int32 if self.n < 2**31 else np.int64
        order = np.random.default_rng(self.epoch).permutation(self.n).astype(dtype)
        return iter(order[self.rank::self.world_size].tolist())


class RankBatches(Sampler):
    """Rank ``rank``'s share in batches of ``BATCH_SIZE`` ids: ranges in order, or slices of
    one int array per epoch when ``shuffle`` (for ``__getitems__``)."""

    def __init__(self, n, rank, world_size, epoch, shuffle):
        self.share = RankShare(n, rank, world_size, epoch, shuffle)

    def __len__(self) -> int:
        return -(-len(self.share) // BATCH_SIZE)

    def __iter__(self):
        share = self.share
        if not share.shuffle:
            mine = range(share.rank, share.n, share.world_size)
            return (mine[i:i + BATCH_SIZE] for i in range(0, len(mine), BATCH_SIZE))
        order = np.random.default_rng(share.epoch).permutation(share.n).astype(np.int64)
        mine = order[share.rank::share.world_size]
        return (mine[i:i + BATCH_SIZE] for i in range(0, len(mine), BATCH_SIZE))


def as_batch(batch):
    """collate_fn of the batched fetch: the tensor ``__getitems__`` made is the batch."""
    return batch


def make_loader(rank: int, world_size: int, epoch: int) -> DataLoader:
    """The benchmark's loader: N from ``AUDIT_SCALE_N``, shuffled when
    ``AUDIT_SCALE_SHUFFLE=1``, fetched per sample (``AUDIT_SCALE_FETCH=sample``, default)
    or a batch at a time (``batch``)."""
    n = int(float(os.environ[SIZE_VAR]))
    shuffle = os.environ.get(SHUFFLE_VAR) == "1"
    if os.environ.get(FETCH_VAR, "sample") == "batch":
        return DataLoader(Ids(n), batch_sampler=RankBatches(n, rank, world_size, epoch, shuffle),
                          num_workers=WORKERS, collate_fn=as_batch)
    return DataLoader(PerSample(n), batch_size=BATCH_SIZE, num_workers=WORKERS,
                      sampler=RankShare(n, rank, world_size, epoch, shuffle))


def read() -> int:
    """The read row, in each rank under torchrun: every epoch, every batch, nothing else."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    batches = 0
    for epoch in range(EPOCHS):
        for _batch in make_loader(rank, world_size, epoch):
            batches += 1
    dist.barrier()
    dist.destroy_process_group()
    return 0


# --- the harness --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _peak_rank_rss(proc: subprocess.Popen, stop: threading.Event, out: list) -> None:
    """Poll torchrun's children (the ranks) and keep the largest resident size seen."""
    import psutil

    peak = 0
    try:
        agent = psutil.Process(proc.pid)
        while not stop.is_set():
            for child in agent.children():
                try:
                    peak = max(peak, child.memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(0.1)
    except psutil.Error:
        pass
    out.append(peak)


def run_once(row: str, n: int, shuffle: bool, fetch: str) -> dict:
    torchrun = Path(sys.executable).with_name("torchrun")
    what = (["-m", "benchmarks.audit_scale", "--read"] if row == "read" else
            ["-m", "talk_helpers.audit", "benchmarks.audit_scale:make_loader",
             "--expected", str(n), "--shuffle" if shuffle else "--no-shuffle",
             "--timeout", "3600", "--json"])
    cmd = [str(torchrun), "--nproc-per-node", str(RANKS), "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), *what]
    env = {**os.environ, SIZE_VAR: str(n), SHUFFLE_VAR: "1" if shuffle else "0",
           FETCH_VAR: fetch, "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stop, peak = threading.Event(), []
    watcher = threading.Thread(target=_peak_rank_rss, args=(proc, stop, peak))
    watcher.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    stop.set()
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{row} at {n:g} failed ({proc.returncode}): {err[-2000:]}")
    if row == "audit" and '"status": "pass"' not in out:
        raise RuntimeError(f"the audit of a correct loader did not pass at {n:g}: {out[:500]}")
    return {"wall": wall, "cpu": cpu, "rss": peak[0] if peak else 0}


def _spec(text: str) -> tuple[str, int, bool, int]:
    fetch, n, order, repeat = text.split(":")
    if fetch not in FETCHES or order not in ("in-order", "shuffled"):
        raise SystemExit(f"--rows {text!r}: expected fetch:ids:order:repeats with fetch in "
                         f"{FETCHES} and order in-order or shuffled")
    return fetch, int(float(n)), order == "shuffled", int(repeat)


def _median_spread(values: list[float], digits: int = 1) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return (f"{np.median(values):.{digits}f} ({min(values):.{digits}f}–"
            f"{max(values):.{digits}f})")


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read", action="store_true", help="(the read row, in a rank)")
    parser.add_argument("--rows", nargs="+", default=list(DEFAULT_PLAN), metavar="SPEC",
                        help="fetch:ids:order:repeats, e.g. sample:1e6:shuffled:3 (default: "
                             + " ".join(DEFAULT_PLAN) + ")")
    parser.add_argument("--big", action="store_true",
                        help=f"also {BIG} (one run of each row at 1e8 ids)")
    args = parser.parse_args(argv)
    if args.read:
        sys.exit(read())
    plan = [_spec(text) for text in [*args.rows, *([BIG] if args.big else [])]]
    load_start = os.getloadavg()[0]
    started = datetime.now(UTC)
    rows = []
    for fetch, n, shuffle, repeat in plan:
        runs = {"read": [], "audit": [], "load": os.getloadavg()[0]}
        for _ in range(repeat):   # interleaved, so both rows see the same machine
            for row in ("read", "audit"):
                runs[row].append(run_once(row, n, shuffle, fetch))
                print(f"{row} {fetch} {n:g} shuffle={shuffle}: {runs[row][-1]}",
                      file=sys.stderr, flush=True)
        rows.append((fetch, n, shuffle, runs))
        table = _table(rows, argv, started, load_start, plan)   # kept after every row
    return table


def _table(rows, argv, started, load_start, plan) -> str:
    load_end = os.getloadavg()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    lines = [
        "# The audit beside reading the loader",
        "",
        f"`.venv/bin/python -m benchmarks.audit_scale {' '.join(argv or sys.argv[1:])}`"
        .replace("  ", " ").strip(),
        "",
        f"Linux, Python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"{os.cpu_count()} cores, commit {commit}, {started:%Y-%m-%d %H:%M} UTC. Under "
        f"`torchrun --nproc-per-node {RANKS}` (gloo), {EPOCHS} epochs, batch {BATCH_SIZE}, "
        f"{WORKERS} DataLoader workers per rank; both rows read the same loader "
        "(`benchmarks.audit_scale:make_loader`): fetched one sample at a time (`sample`, "
        "`Dataset.__getitem__`) or a batch at a time (`batch`, `__getitems__` returning the "
        "ids as one tensor: the cheapest loader, where the audit's share is largest). Median "
        "of "
        "the interleaved runs of each row (min–max in brackets; the repeats per row are "
        f"{', '.join(sorted({str(p[3]) for p in plan}))}). Load "
        f"average {load_start:.1f} at the start, {load_end:.1f} at the end (the load column: "
        "at the start of each row): "
        + ("the machine was shared with other work, so wall seconds include waiting for a "
           "core; CPU seconds (every process of the run) do not."
           if max(load_start, load_end) > 1.5 else "the machine was otherwise idle."),
        "",
        "| fetch | ids | order | load | row | wall s | CPU s | peak rank RSS MB "
        "| audit / read (wall, CPU) |",
        "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for fetch, n, shuffle, runs in rows:
        read_wall = [r["wall"] for r in runs["read"]]
        read_cpu = [r["cpu"] for r in runs["read"]]
        for row in ("read", "audit"):
            wall = [r["wall"] for r in runs[row]]
            cpu = [r["cpu"] for r in runs[row]]
            rss = [r["rss"] / 1e6 for r in runs[row]]
            ratio = ""
            if row == "audit":
                ratio = (f"{np.median(wall) / np.median(read_wall):.2f}× · "
                         f"{np.median(cpu) / np.median(read_cpu):.2f}×"
                         + _verdict(wall, read_wall, cpu, read_cpu))
            lines.append(f"| {fetch} | {n:.0e} | {'shuffled' if shuffle else 'in order'} | "
                         f"{runs['load']:.1f} | {row} | "
                         f"{_median_spread(wall)} | {_median_spread(cpu)} | "
                         f"{_median_spread(rss, 0)} | {ratio} |")
    table = "\n".join(lines)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table + "\n")
    return table


def _verdict(wall, read_wall, cpu, read_cpu, limit: float = 1.3) -> str:
    """Within the 1.3× target only when the worst audit run is under 1.3× the best read
    run (beyond the spread); over it only when the best audit is over 1.3× the worst read."""
    if len(wall) < 2:
        return ""
    verdicts = []
    for name, a, r in (("wall", wall, read_wall), ("CPU", cpu, read_cpu)):
        if max(a) <= limit * min(r):
            verdicts.append(f"{name} ≤ {limit}×")
        elif min(a) > limit * max(r):
            verdicts.append(f"{name} > {limit}×")
        else:
            verdicts.append(f"{name}: within the spread")
    return " (" + ", ".join(verdicts) + ")"


if __name__ == "__main__":
    print(main())
