"""How often does the mixing verdict fault a correct shuffle, and does it still catch the
broken ones, at the sizes the notebooks, the README and the audit use?

Run: ``.venv/bin/python -m benchmarks.mixing_false_alarms``. Prints a markdown table and
writes it to ``benchmarks/results/mixing_false_alarms.md``. Every row is a fixed range of
seeds, so the table is the same on every machine: counts, not timings.

*False alarms*: reports of uniform shuffles (one permutation per epoch, cut as
``DistributedSampler`` cuts it) that are not a clean pass: poorly mixed, mixing unproven,
or an order that repeats or stays alike. *Caught*: reports of a broken shuffle (each rank
and worker shuffles its own contiguous block, or a buffer of 4 on the storage order) that
read poorly mixed.

Two modes of the audit are measured the same way. ``--with-replacement``: uniform draws
with replacement (``WeightedRandomSampler`` with equal weights, seeded per rank), judged
by :func:`talk_helpers.checks.replacement.check_draws` and by the mixing and order of the
draws; caught: ranks seeded alike, and a fifth of the ids never reachable.
``--mixing chunk:N``: a uniform chunk shuffle (chunks of N in a new order every epoch,
dealt to the ranks in turn, each read in order), judged on chunk windows
(:func:`talk_helpers.checks.mixing.chunk_windows`); caught: the chunks in storage order.
"""

import random
from pathlib import Path

import numpy as np

from talk_helpers.checks.mixing import (
    MIXING_ALPHA,
    ORDER_ALPHA,
    chunk_windows,
    shuffle_report,
    step_report,
)
from talk_helpers.checks.replacement import ALIKE_ALPHA, COVERAGE_ALPHA, check_draws
from talk_helpers.model.buffers import buffer_shuffle

RESULTS = Path(__file__).parent / "results" / "mixing_false_alarms.md"


def sampler_epochs(rng, n, world, micro_batch, epochs=2):
    """One uniform permutation per epoch, padded to a multiple of ``world``; rank r takes
    positions r, r + world, …, in micro-batches."""
    out = []
    for _ in range(epochs):
        order = rng.permutation(n)
        total = -(-n // world) * world
        order = np.concatenate([order, order[:total - n]])
        out.append([[order[r::world][i:i + micro_batch]
                     for i in range(0, total // world, micro_batch)] for r in range(world)])
    return out


def block_local_epochs(rng, n, world, micro_batch, workers=2, epochs=2):
    """Each (rank, worker) shuffles its own contiguous block; a rank alternates workers."""
    size = n // (world * workers)
    out = []
    for _ in range(epochs):
        ranks = []
        for rank in range(world):
            streams = []
            for worker in range(workers):
                block = rng.permutation(np.arange(size) + size * (workers * rank + worker))
                streams.append([block[i:i + micro_batch] for i in range(0, size, micro_batch)])
            ranks.append([b for step in zip(*streams, strict=False) for b in step])
        out.append(ranks)
    return out


def buffer_epochs(rng, n, world, micro_batch, buffer_size=4, epochs=2):
    out = []
    for _ in range(epochs):
        order = np.fromiter(buffer_shuffle(range(n), buffer_size,
                                           random.Random(int(rng.integers(1 << 30)))), np.int64)
        out.append([[order[r::world][i:i + micro_batch]
                     for i in range(0, n // world, micro_batch)] for r in range(world)])
    return out


# (what, ids, ranks, micro-batch, seeds)
SIZES = [
    ("2 ranks, micro-batches of 4 (notebook 05)", 48, 2, 4, 1000),
    ("2 ranks, micro-batches of 5 (notebooks 09, 10)", 61, 2, 5, 1000),
    ("2 ranks, micro-batches of 10 (notebook 04)", 400, 2, 10, 300),
    ("4 ranks, micro-batches of 15", 1920, 4, 15, 200),
    ("4 ranks, micro-batches of 32 (the README)", 50_000, 4, 32, 20),
]


def flat_row(n, batch_size, seeds):
    alarms = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        report = shuffle_report([rng.permutation(n) for _ in range(2)], batch_size=batch_size)
        alarms += not (report.well_mixed and report.order_changes)
    return alarms


def step_rows(n, world, micro_batch, seeds):
    alarms = block = buffered = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        report = step_report(sampler_epochs(rng, n, world, micro_batch))
        alarms += not (report.well_mixed and report.order_changes)
        block += step_report(block_local_epochs(rng, n, world, micro_batch)).poor
        buffered += step_report(buffer_epochs(rng, n, world, micro_batch)).poor
    return alarms, block, buffered


def draw_epochs(rng, n, world, micro_batch, epochs=2, alike=False, reachable=None):
    """Uniform draws with replacement: each rank ``n // world`` per epoch, in
    micro-batches; ``alike``: every rank draws the same; ``reachable``: ids drawn from."""
    top = n if reachable is None else reachable
    out = []
    for _ in range(epochs):
        first = rng.integers(0, top, n // world)
        ranks = [first if alike or r == 0 else rng.integers(0, top, n // world)
                 for r in range(world)]
        out.append([[d[i:i + micro_batch] for i in range(0, len(d), micro_batch)]
                    for d in ranks])
    return out


def _draws_clean(epochs, n) -> bool:
    """The audit's --with-replacement verdict: draws, then order and mixing of the draws."""
    streams = [[np.concatenate(r) for r in ranks] for ranks in epochs]
    if not check_draws(streams, n).ok:
        return False
    report = step_report(epochs)
    return bool(report.well_mixed and report.order_changes)


def replacement_row(n, world, micro_batch, seeds):
    alarms = alike = short = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        alarms += not _draws_clean(draw_epochs(rng, n, world, micro_batch), n)
        alike += not _draws_clean(draw_epochs(rng, n, world, micro_batch, alike=True), n)
        short += not check_draws([[np.concatenate(r) for r in ranks] for ranks in
                                  draw_epochs(rng, n, world, micro_batch,
                                              reachable=n * 4 // 5)], n).ok
    return alarms, alike, short


def chunk_epochs(rng, n, world, micro_batch, chunk, epochs=2, shuffled=True):
    """Chunks of ``chunk`` ids, in a new order every epoch (or in storage order), dealt to
    the ranks in turn, each read in order; as storage positions per rank."""
    out = []
    for _ in range(epochs):
        chunks = rng.permutation(n // chunk) if shuffled else np.arange(n // chunk)
        ranks = [np.concatenate([np.arange(c * chunk, (c + 1) * chunk)
                                 for c in chunks[r::world]]) for r in range(world)]
        out.append(ranks)
    return out


def chunk_row(n, world, chunk, seeds):
    alarms = caught = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        report = step_report(chunk_windows(chunk_epochs(rng, n, world, 4, chunk), chunk))
        alarms += not (report.well_mixed and report.order_changes)
        stored = step_report(chunk_windows(chunk_epochs(rng, n, world, 4, chunk,
                                                        shuffled=False), chunk))
        caught += not (stored.well_mixed and stored.order_changes)
    return alarms, caught


def main() -> str:
    lines = [
        "# The mixing verdict on correct and broken shuffles",
        "",
        "`.venv/bin/python -m benchmarks.mixing_false_alarms`: fixed seeds, so these are",
        "counts, the same on every machine. A false alarm is a uniform shuffle that does not",
        f"read ✔ (MIXING_ALPHA = {MIXING_ALPHA}, ORDER_ALPHA = {ORDER_ALPHA}: at most about",
        f"{MIXING_ALPHA + ORDER_ALPHA:.1%} expected). Caught: broken shuffles that read",
        "poorly mixed (block-local: each rank and worker shuffles its own block; buffer of 4).",
        "",
        "| step_report | ids | seeds | false alarms | block-local caught | buffer of 4 caught |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for what, n, world, micro_batch, seeds in SIZES:
        alarms, block, buffered = step_rows(n, world, micro_batch, seeds)
        lines.append(f"| {what} | {n} | {seeds} | {alarms} ({alarms / seeds:.1%}) | "
                     f"{block} / {seeds} | {buffered} / {seeds} |")
    lines += ["", "| shuffle_report | ids | batch | seeds | false alarms |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for n, batch_size, seeds in [(48, 4, 1000), (61, 5, 1000), (200, 20, 1000)]:
        alarms = flat_row(n, batch_size, seeds)
        lines.append(f"| uniform permutations | {n} | {batch_size} | {seeds} | "
                     f"{alarms} ({alarms / seeds:.1%}) |")
    lines += ["", "`--with-replacement`: uniform draws with replacement, 2 epochs (COVERAGE_ALPHA "
              f"= {COVERAGE_ALPHA}, ALIKE_ALPHA = {ALIKE_ALPHA}, and the mixing and order as "
              "above). Caught: every rank seeded alike; a fifth of the ids never reachable.",
              "", "| draws | ids | ranks | micro-batch | seeds | false alarms | seeded alike "
              "caught | unreachable caught |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, world, micro_batch, seeds in [(200, 2, 10, 1000), (1000, 2, 25, 500),
                                         (5000, 4, 32, 100)]:
        alarms, alike, short = replacement_row(n, world, micro_batch, seeds)
        lines.append(f"| uniform with replacement | {n} | {world} | {micro_batch} | {seeds} | "
                     f"{alarms} ({alarms / seeds:.1%}) | {alike} / {seeds} | "
                     f"{short} / {seeds} |")
    lines += ["", "`--mixing chunk:N`: a uniform chunk shuffle judged on chunk windows. "
              "Caught: the chunks read in storage order.", "",
              "| chunks | ids | ranks | chunk | seeds | false alarms | storage order caught |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, world, chunk, seeds in [(256, 2, 4, 1000), (2048, 2, 8, 500), (8192, 4, 16, 200)]:
        alarms, caught = chunk_row(n, world, chunk, seeds)
        lines.append(f"| uniform chunk shuffle | {n} | {world} | {chunk} | {seeds} | "
                     f"{alarms} ({alarms / seeds:.1%}) | {caught} / {seeds} |")
    text = "\n".join(lines) + "\n"
    RESULTS.write_text(text)
    return text


if __name__ == "__main__":
    print(main())
