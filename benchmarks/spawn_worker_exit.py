"""What does Python's teardown of a spawned DataLoader worker cost an epoch?

Run: ``.venv/bin/python -m benchmarks.spawn_worker_exit``. One epoch of a spawn DataLoader
(``MapStyleIds(64)``, batches of 8) with 2 and 4 workers, in two rows that differ only in
how the workers end: as talk_helpers ends them (``os._exit(0)`` once the worker loop has
run, see :mod:`talk_helpers.runtime.worker_exit`) or with Python's usual teardown (the hook taken
back in ``worker_init_fn``). Runs alternate between the rows; the table gives the median
and the spread (min-max) of each, and a verdict only when the medians differ by more than
both spreads. Written to ``benchmarks/results/spawn_worker_exit.md``.
"""

import atexit
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.basics import MapStyleIds
from talk_helpers.runtime import worker_exit

RUNS = 7
RESULTS = Path(__file__).parent / "results" / "spawn_worker_exit.md"


def skip_teardown(worker_id: int) -> None:
    """The talk_helpers way: the exit hook stays registered."""


def keep_teardown(worker_id: int) -> None:
    """Python's usual exit: take the hook back in this worker."""
    atexit.unregister(worker_exit.end_finished_worker)


def epoch_seconds(num_workers: int, init) -> float:
    start = time.perf_counter()
    loader = DataLoader(MapStyleIds(64), batch_size=8, num_workers=num_workers,
                        multiprocessing_context="spawn", worker_init_fn=init)
    assert sum(len(batch) for batch in loader) == 64
    return time.perf_counter() - start


def main() -> None:
    rows = []
    for workers in (2, 4):
        times = {"teardown skipped": [], "Python's teardown": []}
        for _ in range(RUNS):
            times["teardown skipped"].append(epoch_seconds(workers, skip_teardown))
            times["Python's teardown"].append(epoch_seconds(workers, keep_teardown))
        (fast_label, fast), (slow_label, slow) = times.items()
        gap = statistics.median(slow) - statistics.median(fast)
        spread = max(max(fast) - min(fast), max(slow) - min(slow))
        verdict = (f"{gap:.2f} s faster" if gap > spread
                   else "no difference beyond the spread")
        for label, values in times.items():
            rows.append(f"| {workers} | {label} | {statistics.median(values):.2f} | "
                        f"{min(values):.2f}-{max(values):.2f} | "
                        f"{verdict if label == fast_label else ''} |")
    table = "\n".join([
        "# One spawn epoch: workers that skip Python's teardown, and workers that do not",
        "",
        f"`benchmarks/spawn_worker_exit.py`, {RUNS} alternating runs per row, "
        f"{platform.system()}, Python {platform.python_version()}, torch "
        f"{torch.__version__}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| workers | how workers end | median s | min-max s | verdict |",
        "| ---: | --- | ---: | --- | --- |",
        *rows,
        "",
    ])
    print(table)
    RESULTS.write_text(table)


if __name__ == "__main__":
    main()
