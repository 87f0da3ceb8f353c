"""How fast is check_exactly_once on ten million ids, compared with a Counter loop?

Run: ``.venv/bin/python -m benchmarks.check_speed``. Prints a markdown table and writes it
to ``benchmarks/results/check_speed.md``. Each figure is the best of a few repeats.
"""

import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from talk_helpers.checks import check_exactly_once

N = 10_000_000
DUPLICATES = 10_000
BATCH_SIZE = 256
REPEATS = 3
RESULTS = Path(__file__).parent / "results" / "check_speed.md"


def counter_check(samples: list[int], n: int) -> tuple[dict, list, list]:
    """The same check written the obvious way: a Counter and a loop over every id."""
    seen = Counter(samples)
    duplicates = {i: c for i, c in seen.items() if c > 1}
    missing = [i for i in range(n) if i not in seen]
    unexpected = sorted(i for i in seen if not 0 <= i < n)
    return duplicates, missing, unexpected


def best_of(fn, repeats: int = REPEATS) -> tuple[float, float, object]:
    """Best wall-clock and best CPU seconds over a few runs, and the last result.

    CPU time is the fairer figure on a shared machine: waiting for a core is not counted.
    """
    wall, cpu, result = float("inf"), float("inf"), None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return wall, cpu, result


def main() -> str:
    rng = np.random.default_rng(0)
    ids = rng.permutation(N)
    ids[:DUPLICATES] = ids[DUPLICATES:2 * DUPLICATES]  # some ids twice, as many never
    as_list = ids.tolist()
    as_batches = list(torch.from_numpy(ids).split(BATCH_SIZE))

    counter_wall, counter_cpu, (duplicates, missing, _) = best_of(
        lambda: counter_check(as_list, N), 1
    )
    rows = []
    for label, samples in [
        ("numpy array", ids),
        (f"list of {len(as_batches):,} tensor batches", as_batches),
        ("Python list of ints", as_list),
    ]:
        wall, cpu, report = best_of(lambda s=samples: check_exactly_once(s, N))
        assert report.duplicates == duplicates and report.missing == missing
        rows.append((f"check_exactly_once, {label}", wall, cpu))
    rows.append(("Counter loop, Python list of ints", counter_wall, counter_cpu))

    lines = [
        f"Exactly-once check of {N:,} ids ({DUPLICATES:,} duplicated, {DUPLICATES:,} missing),"
        f" torch {torch.__version__}, numpy {np.__version__}, {os.cpu_count()} cores,"
        f" load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        "| method | wall s | CPU s | Counter CPU / method CPU |",
        "| --- | ---: | ---: | ---: |",
        *(f"| {name} | {wall:.3f} | {cpu:.3f} | {counter_cpu / cpu:.0f}× |"
          for name, wall, cpu in rows),
    ]
    table = "\n".join(lines)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table + "\n")
    return table


if __name__ == "__main__":
    print(main())
