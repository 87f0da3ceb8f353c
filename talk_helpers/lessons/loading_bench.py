"""Measuring DataLoader speed: what notebook 08 and ``benchmarks/loader_throughput.py`` call.

- :func:`make_loader` builds one row of the benchmark ("map", "iterable", "batched",
  "reference", "hf", "wds") over the token memmap of :mod:`talk_helpers.lessons.datasets.fast`;
- :func:`measure_throughput` iterates a loader with a progress bar and returns samples/s;
  :func:`compare` and :func:`beyond_cores` judge two settings only beyond their spread;
- :func:`measure_ceiling` is the same read and the same work in one process, no DataLoader;
- :func:`time_training_loop` splits a training loop into data time and step time;
- :func:`epoch_start_times` measures how long each epoch waits for its first batch;
- :func:`profile_loop` returns a torch.profiler table of the same loop;
- :func:`check_data_time` checks that a loop's "data time" accounts for the time the loop
  spends outside its step, and :func:`check_epoch_samples` that an epoch holds the
  samples it is meant to.

Timings vary from run to run; the returned objects keep the counts (samples, batches),
which do not.
"""

import importlib.util
import io
import os
import random
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from tqdm.std import tqdm

from talk_helpers.arguments import check_choice, require_int
from talk_helpers.lessons.datasets.fast import (
    TokenBatchedIterableDataset,
    TokenIterableDataset,
    TokenMapDataset,
    mask_tokens,
    open_tokens,
)
from talk_helpers.model.buffers import buffer_shuffle
from talk_helpers.progress import progress as progress_bar
from talk_helpers.third_party import hub_offline, native_stderr_silenced
from talk_helpers.verdicts.render import mark

KINDS = ("map", "iterable", "batched", "reference", "hf", "wds")
KIND_LABELS = {
    "map": "(a) map-style + DistributedSampler, per-sample fetch",
    "iterable": "(b) iterable, yields samples (DataLoader batches them)",
    "batched": "(c) iterable, batched in workers",
    "reference": "(d) reference ShardedIterableDataset",
    "hf": "(e) HF datasets IterableDataset (torch format)",
    "wds": "(e) webdataset, batched in workers",
}


# ---------------------------------------------------------------------------- results

@dataclass
class Throughput:
    """Samples/s of one loader. ``seconds`` counts from the first batch on (steady state);
    ``first_batch_s`` is the wait for the first batch (worker start-up included)."""

    label: str
    samples: int
    batches: int
    seconds: float
    first_batch_s: float

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("nan")

    def __repr__(self) -> str:
        return (f"{self.label}: {self.rate:,.0f} samples/s ({self.samples} samples in "
                f"{self.batches} batches; first batch after {self.first_batch_s:.2f} s)")


@dataclass
class Runs:
    """Several runs of one configuration: ``rate`` is their median, ``low``/``high`` the
    slowest and fastest (the spread a difference must exceed to mean something)."""

    label: str
    runs: list

    @property
    def rates(self) -> list[float]:
        return sorted(r.rate for r in self.runs)

    @property
    def rate(self) -> float:
        return float(np.median(self.rates))

    @property
    def low(self) -> float:
        return self.rates[0]

    @property
    def high(self) -> float:
        return self.rates[-1]

    def __repr__(self) -> str:
        return (f"{self.label}: median {self.rate:,.0f} samples/s of {len(self.runs)} runs "
                f"(slowest {self.low:,.0f} samples/s, fastest {self.high:,.0f} samples/s)")


def compare(a: "Runs", b: "Runs") -> str:
    """``a`` vs ``b``: the ratio of medians, and a verdict only when the spreads do not
    overlap (every run of one faster than every run of the other)."""
    ratio = a.rate / b.rate
    if a.low > b.high:
        verdict = "faster, beyond the spread"
    elif a.high < b.low:
        verdict = "slower, beyond the spread"
    else:
        verdict = "no verdict: within the spread"
    return f"{ratio:.2f}× ({verdict})"


def beyond_cores(by_workers: dict, cores: int | None = None) -> str:
    """The best setting with more workers than ``cores`` (default: this machine's) against
    the best within them, ``{num_workers: Runs}``, as :func:`compare` says it: a verdict
    only beyond the spread of the runs."""
    if cores is None:
        cores = os.cpu_count() or 1
    within = [r for w, r in by_workers.items() if w <= cores]
    beyond = [r for w, r in by_workers.items() if w > cores]
    if not within or not beyond:
        return (f"· nothing to compare: the settings {sorted(by_workers)} are not on both "
                f"sides of this machine's {cores} cores")
    best_within = max(within, key=lambda r: r.rate)
    best_beyond = max(beyond, key=lambda r: r.rate)
    return (f"more workers than the {cores} cores ({best_beyond.label}) against the best "
            f"within them ({best_within.label}): {compare(best_beyond, best_within)}")


@dataclass
class LoopTiming:
    """A training loop split into time waiting for data and time in the step."""

    data_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    samples: int = 0

    @property
    def data_share(self) -> float:
        total = sum(self.data_s) + sum(self.step_s)
        return sum(self.data_s) / total if total else float("nan")

    def __repr__(self) -> str:
        return (f"{len(self.step_s)} steps, {self.samples} samples: waiting for data "
                f"{sum(self.data_s):.2f} s, in the step {sum(self.step_s):.2f} s "
                f"→ data share {self.data_share:.0%}")


@dataclass
class EpochStarts:
    """Seconds each epoch waited for its first batch, and the whole epoch's seconds."""

    label: str
    first_batch_s: list[float]
    epoch_s: list[float]
    batches: list[int]

    def __repr__(self) -> str:
        firsts = ", ".join(f"{s:.2f} s" for s in self.first_batch_s)
        return (f"{self.label}: first batch after {firsts}; "
                f"total {sum(self.epoch_s):.2f} s for {len(self.epoch_s)} epochs")


@dataclass(frozen=True)
class DataTimeCheck:
    """Does a loop's "data time" account for the time the loop spends outside its step?

    ``data_s`` is what the loop's own timer measured, ``outside_s`` the loop's wall time
    minus the time in its step: waiting for batches, copying them, the loop itself. A
    timer that misses the wait for the next batch reads small however slow the loader.
    """

    name: str
    data_s: float
    outside_s: float

    COVERS = 0.8  # a timer passes when it accounts for at least this share

    @property
    def share(self) -> float:
        return self.data_s / self.outside_s if self.outside_s > 0 else float("nan")

    @property
    def ok(self) -> bool:
        return self.share >= self.COVERS

    def __repr__(self) -> str:
        if self.ok:
            return (f"{mark(True)} {self.name}: accounts for the time the loop spends "
                    "outside its step, the wait for batches included")
        return (f"{mark(False)} {self.name}: accounts for under {self.COVERS:.0%} of the time "
                "the loop spends outside its step: it misses the wait for batches")


def check_data_time(name: str, data_s: Iterable[float], loop_s: float,
                    step_s: Iterable[float]) -> DataTimeCheck:
    """``name``'s timer against the loop: ``data_s`` the times it measured, ``loop_s`` the
    loop's wall time, ``step_s`` the times spent in the step."""
    data, steps = float(sum(data_s)), float(sum(step_s))
    if not loop_s > steps >= 0:
        raise ValueError(f"loop_s must be more than the time in the step ({steps:g} s), "
                         f"got {loop_s!r}")
    return DataTimeCheck(name, data, loop_s - steps)


@dataclass(frozen=True)
class EpochSamples:
    """How many samples one epoch of a loader held, against the number it is meant to."""

    what: str
    samples: int
    share: int

    @property
    def ok(self) -> bool:
        return self.samples == self.share

    def __repr__(self) -> str:
        if self.ok:
            return f"{mark(True)} {self.what}: {self.samples} samples, its share"
        return (f"{mark(False)} {self.what}: {self.samples} samples, "
                f"{self.samples / self.share:g}× its share of {self.share}")


def check_epoch_samples(batches: Iterable, share: int,
                        what: str = "one epoch of this rank's loader") -> EpochSamples:
    """Count the samples of one pass over ``batches`` against ``share``."""
    require_int("share", share, minimum=1)
    return EpochSamples(what, sum(batch_len(b) for b in batches), share)


# ---------------------------------------------------------------------------- measuring

def batch_len(batch) -> int:
    """How many samples a batch holds: a dict with "id", a tuple/list of columns, a tensor."""
    if isinstance(batch, dict):
        first = batch["id"] if "id" in batch else next(iter(batch.values()))
    elif isinstance(batch, (tuple, list)):
        first = batch[0]
    else:
        first = batch
    if isinstance(first, (torch.Tensor, np.ndarray)):
        return 1 if first.ndim == 0 else int(first.shape[0])
    if isinstance(first, (list, tuple)):
        return len(first)
    return 1


def measure_throughput(loader: Iterable, *, label: str = "", max_samples: int | None = None,
                       max_seconds: float | None = None, progress: bool = True,
                       on_batch: Callable | None = None) -> Throughput:
    """Iterate ``loader`` until it ends, ``max_samples`` or ``max_seconds``; count samples.

    ``on_batch(batch)`` is called on each batch (e.g. to collect ids for a check).
    """
    samples = batches = 0
    first_batch_s = 0.0
    steady_start = None
    start = time.perf_counter()
    with progress_bar(total=max_samples, desc=label or "loading", unit="samples",
                      disable=not progress) as bar:
        iterator = iter(loader)
        for batch in iterator:
            now = time.perf_counter()
            if steady_start is None:
                first_batch_s = now - start
                steady_start = now
            else:
                n = batch_len(batch)
                samples += n
                bar.update(n)
            batches += 1
            if on_batch is not None:
                on_batch(batch)
            if max_samples is not None and samples >= max_samples:
                break
            if max_seconds is not None and now - steady_start >= max_seconds:
                break
        seconds = time.perf_counter() - steady_start if steady_start else 0.0
        del iterator
    return Throughput(label, samples, batches, seconds, first_batch_s)


def measure_ceiling(path, *, work: int = 1, max_samples: int | None = None,
                    max_seconds: float | None = None, progress: bool = True) -> Throughput:
    """The same memmap read and the same per-sample work in this process, no DataLoader."""
    tokens = open_tokens(path)
    n = len(tokens) if max_samples is None else min(max_samples, len(tokens))
    samples = 0
    start = time.perf_counter()
    with progress_bar(total=n, desc="ceiling", unit="samples", disable=not progress) as bar:
        for block_start in range(0, n, 1024):
            block = np.asarray(tokens[block_start:min(block_start + 1024, n)])
            for row in range(len(block)):
                input_ids, labels = mask_tokens(block[row], block_start + row, work)
                torch.from_numpy(input_ids), torch.from_numpy(labels)
            samples += len(block)
            bar.update(len(block))
            if max_seconds is not None and time.perf_counter() - start >= max_seconds:
                break
    return Throughput("ceiling: one process, same read and work", samples, 0,
                      time.perf_counter() - start, 0.0)


# ---------------------------------------------------------------------------- loaders

def reference_available() -> bool:
    """Whether notebook 09's reference dataset can be imported."""
    try:
        return importlib.util.find_spec("talk_helpers.reference.sharded_iterable") is not None
    except ModuleNotFoundError:
        return False


def make_loader(kind: str, path, *, batch_size: int, num_workers: int = 0, work: int = 1,
                prefetch_factor: int | None = None, persistent_workers: bool = False,
                pin_memory: bool = False, start_method: str | None = None,
                data_dir=None, seed: int = 0):
    """One benchmark row as an iterable of batches over the memmap at ``path``.

    ``data_dir`` holds the converted copies that "hf" and "wds" read (made on first use).
    """
    check_choice("kind", kind, KINDS)
    options = {"num_workers": num_workers, "pin_memory": pin_memory}
    if num_workers > 0:
        options["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            options["prefetch_factor"] = prefetch_factor
        if start_method is not None:
            options["multiprocessing_context"] = start_method
    if kind == "map":
        dataset = TokenMapDataset(path, work=work)
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **options)
    if kind == "iterable":
        return DataLoader(TokenIterableDataset(path, work=work), batch_size=batch_size,
                          **options)
    if kind == "batched":
        return DataLoader(TokenBatchedIterableDataset(path, batch_size, work=work),
                          batch_size=None, **options)
    if kind == "reference":
        return _reference_loader(path, batch_size, work, options)
    data_dir = Path(data_dir if data_dir is not None else Path(path).parent)
    if kind == "hf":
        return DataLoader(hf_iterable(path, work=work, num_shards=max(2, num_workers)),
                          batch_size=batch_size, **options)
    shards = write_wds_shards(path, data_dir / "wds", n_shards=max(2, num_workers))
    return DataLoader(wds_dataset(shards, batch_size, work=work), batch_size=None, **options)


def _reference_loader(path, batch_size, work, options):
    """Notebook 09's dataset over the same memmap, with the same work, batched in workers.

    The dataset deals batches of ids (in order, like (c)); its ``transform`` reads those
    rows from the memmap (one slice when they are contiguous, as (c) reads) and masks
    each row by its id: the same bytes and the same work as (c).
    """
    if not reference_available():
        raise RuntimeError("talk_helpers.reference.sharded_iterable is not available")
    from talk_helpers.reference import sharded_iterable

    n = len(open_tokens(path))
    dataset = sharded_iterable.ShardedIterableDataset(
        n, batch_size=batch_size, shuffle=False, transform=_MemmapRows(path, work))
    return DataLoader(dataset, batch_size=None, **options)


class _MemmapRows:
    """``transform(ids, rng)``: the rows ``ids`` of the token memmap, masked by id. Opens the
    memmap in the process that first calls it (each worker maps the file itself)."""

    def __init__(self, path, work: int) -> None:
        self.path, self.work, self._tokens = str(path), work, None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokens": None}

    def __call__(self, batch_ids: torch.Tensor, _rng) -> dict:
        if self._tokens is None:
            self._tokens = open_tokens(self.path)
        ids = batch_ids.numpy()
        first, last = int(ids[0]), int(ids[-1])
        contiguous = last - first + 1 == len(ids) and bool((np.diff(ids) == 1).all())
        block = np.asarray(self._tokens[first:last + 1] if contiguous else self._tokens[ids])
        input_ids = np.empty(block.shape, dtype=np.int64)
        labels = np.empty(block.shape, dtype=np.int64)
        for row, index in enumerate(ids.tolist()):
            input_ids[row], labels[row] = mask_tokens(block[row], index, self.work)
        return {"id": batch_ids.clone(), "input_ids": torch.from_numpy(input_ids),
                "labels": torch.from_numpy(labels)}


def _hf_mask(example, work):
    input_ids, labels = mask_tokens(example["tokens"], int(example["id"]), work)
    return {"id": example["id"], "input_ids": input_ids, "labels": labels}


def hf_iterable(path, *, work: int = 1, num_shards: int = 2):
    """The memmap as an HF ``datasets`` IterableDataset, masked by ``.map``, torch format."""
    with hub_offline():
        import datasets

    tokens = np.asarray(open_tokens(path))
    table = datasets.Dataset.from_dict({"id": np.arange(len(tokens)), "tokens": tokens})
    iterable = table.to_iterable_dataset(num_shards=num_shards).with_format("numpy")
    iterable = iterable.map(partial(_hf_mask, work=work), remove_columns=["tokens"])
    return iterable.with_format("torch")


def write_wds_shards(path, out_dir, *, n_shards: int = 2) -> list[str]:
    """Write the memmap as ``n_shards`` webdataset tar files (one .npy per sample); reuse them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokens = open_tokens(path)
    names = [str(out_dir / f"tokens-{n_shards}-{k:03d}.tar") for k in range(n_shards)]
    if all(Path(name).exists() for name in names):
        return names
    for k, name in enumerate(names):
        lo, hi = k * len(tokens) // n_shards, (k + 1) * len(tokens) // n_shards
        with tarfile.open(name + ".tmp", "w", format=tarfile.USTAR_FORMAT) as tar:
            for index in range(lo, hi):
                buffer = io.BytesIO()
                np.save(buffer, np.asarray(tokens[index]))
                for suffix, payload in (("tokens.npy", buffer.getvalue()),
                                        ("id.cls", str(index).encode())):
                    member = tarfile.TarInfo(f"{index:09d}.{suffix}")
                    member.size = len(payload)
                    tar.addfile(member, io.BytesIO(payload))
        os.replace(name + ".tmp", name)
    return names


def wds_mask_sample(sample, work: int = 1):
    """A decoded webdataset sample → (id, input_ids, labels), masked as every loader is."""
    input_ids, labels = mask_tokens(sample["tokens.npy"], int(sample["id.cls"]), work)
    return int(sample["id.cls"]), input_ids, labels


def wds_dataset(shards: list[str], batch_size: int, *, work: int = 1):
    """webdataset over the tar shards: split by worker, masked, batched in the worker."""
    import webdataset as wds

    return (wds.WebDataset(shards, shardshuffle=False, nodesplitter=None, empty_check=False)
            .decode()
            .map(partial(wds_mask_sample, work=work))
            .batched(batch_size, collation_fn=wds_collate))


def wds_collate(samples):
    """(id, input_ids, labels) samples → one batch of the dict the other loaders yield."""
    ids, input_ids, labels = zip(*samples, strict=True)
    return {"id": torch.tensor(ids), "input_ids": torch.from_numpy(np.stack(input_ids)),
            "labels": torch.from_numpy(np.stack(labels))}


# ---------------------------------------------------------------------------- training loop

class TinyLM(torch.nn.Module):
    """Embedding → hidden → linear over hashed tokens: a step whose cost ``width`` dials.
    Embeds ``ids % buckets`` and predicts ``labels % classes`` to stay small."""

    def __init__(self, buckets: int = 4096, width: int = 64, classes: int = 128):
        super().__init__()
        self.buckets = buckets
        self.embed = torch.nn.Embedding(buckets, width)
        self.hidden = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, classes)
        self.classes = classes

    def forward(self, input_ids):
        return self.head(torch.relu(self.hidden(self.embed(input_ids % self.buckets))))


def make_train_step(width: int = 64, seed: int = 0) -> Callable:
    """A closure doing forward, backward and SGD on a batch dict; returns the loss."""
    torch.manual_seed(seed)
    model = TinyLM(width=width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):
        logits = model(batch["input_ids"][:, :8])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                 batch["labels"][:, :8].flatten() % model.classes)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def time_training_loop(loader: Iterable, step: Callable, *, max_steps: int,
                       progress: bool = True, desc: str = "training") -> LoopTiming:
    """Run ``step`` on up to ``max_steps`` batches; time the wait for each batch and each step."""
    timing = LoopTiming()
    iterator = iter(loader)
    with progress_bar(total=max_steps, desc=desc, unit="step", disable=not progress) as bar:
        for _ in range(max_steps):
            t0 = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            t1 = time.perf_counter()
            step(batch)
            t2 = time.perf_counter()
            timing.data_s.append(t1 - t0)
            timing.step_s.append(t2 - t1)
            timing.samples += batch_len(batch)
            bar.update()
    del iterator
    return timing


def epoch_start_times(loader, *, epochs: int = 3, label: str = "") -> EpochStarts:
    """Iterate ``loader`` for ``epochs`` full epochs; time each epoch's first batch."""
    firsts, totals, counts = [], [], []
    for _ in range(epochs):
        start = time.perf_counter()
        first = None
        n = 0
        for _batch in loader:
            if first is None:
                first = time.perf_counter() - start
            n += 1
        totals.append(time.perf_counter() - start)
        firsts.append(first if first is not None else totals[-1])
        counts.append(n)
    return EpochStarts(label, firsts, totals, counts)


def profile_loop(loader: Iterable, step: Callable, *, max_steps: int = 20,
                 row_limit: int = 8) -> str:
    """A torch.profiler table (CPU) of ``max_steps`` training steps, data fetch labelled."""
    from torch.profiler import ProfilerActivity, profile, record_function

    iterator = iter(loader)
    with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(max_steps):
            with record_function("fetch batch"):
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
            with record_function("train step"):
                step(batch)
    del iterator
    return prof.key_averages().table(sort_by="cpu_time_total", row_limit=row_limit)


# ---------------------------------------------------------------------------- the grid

def run_grid(path, *, kinds=KINDS, workers=(0, 1, 2), batch_sizes=(64, 256), work: int = 1,
             max_samples: int | None = None, max_seconds: float | None = 2.0,
             repeats: int = 1, start_method: str | None = None, data_dir=None,
             progress: bool = True) -> dict:
    """Throughput of every (kind, workers, batch size) as :class:`Runs` (median and spread
    of ``repeats`` runs); unavailable kinds map to a reason. Repeats run in separate
    passes over the grid, so a burst of load hits one pass, not one row."""
    results: dict = {}
    combos = [(k, w, b) for k in kinds for b in batch_sizes for w in workers]
    passes = [(r, c) for r in range(repeats) for c in combos]
    for _, (kind, num_workers, batch_size) in tqdm(passes, desc="grid", unit="config",
                                                   disable=not progress):
        key = (kind, num_workers, batch_size)
        reason = unavailable_reason(kind)
        if reason:
            results[key] = reason
            continue
        loader = make_loader(kind, path, batch_size=batch_size, num_workers=num_workers,
                             work=work, start_method=start_method, data_dir=data_dir)
        result = measure_throughput(
            loader, label=f"{kind} w={num_workers} b={batch_size}", max_samples=max_samples,
            max_seconds=max_seconds, progress=progress)
        results.setdefault(key, Runs(result.label, [])).runs.append(result)
    return results


def unavailable_reason(kind: str) -> str | None:
    """None when ``kind`` can run here, else a short reason ("not available: …")."""
    module = {"reference": "talk_helpers.reference.sharded_iterable", "hf": "datasets",
              "wds": "webdataset"}.get(kind)
    if module is None:
        return None
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    return None if found else f"not available ({module} not importable)"


def grid_table(results: dict, ceiling, *, baseline: str = "map") -> str:
    """Markdown: median samples/s with the slowest–fastest run, × the map-style row with
    the same workers and batch size, × the single-process ceiling (ratios of medians)."""
    lines = ["| loader | workers | batch | samples/s, median (min–max) | × (a) | × ceiling |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for (kind, num_workers, batch_size), result in results.items():
        label = KIND_LABELS[kind]
        if not hasattr(result, "rate"):
            lines.append(f"| {label} | {num_workers} | {batch_size} | {result} | | |")
            continue
        base = results.get((baseline, num_workers, batch_size))
        ratio = result.rate / base.rate if hasattr(base, "rate") else float("nan")
        spread = (f" ({result.low:,.0f}–{result.high:,.0f})" if isinstance(result, Runs)
                  else "")
        lines.append(f"| {label} | {num_workers} | {batch_size} | {result.rate:,.0f}{spread} | "
                     f"{ratio:.2f} | {result.rate / ceiling.rate:.2f} |")
    spread = (f" ({ceiling.low:,.0f}–{ceiling.high:,.0f})" if isinstance(ceiling, Runs)
              else "")
    lines.append(f"| ceiling: one process, same read and work | – | – | "
                 f"{ceiling.rate:,.0f}{spread} | – | 1.00 |")
    return "\n".join(lines)



# ---------------------------------------------------------------------------- mixing

def rebatch(batches: Iterable, batch_size: int, *, buffer_size: int = 1000, seed: int = 0):
    """WebDataset's main-process stage (its distributed example's ``unbatched().shuffle(n)
    .batched(b)``): unbatch, shuffle through a buffer
    (:func:`talk_helpers.model.buffers.buffer_shuffle`), batch again.

    Takes dict batches of tensors (as the loaders above yield) and yields dicts of
    ``batch_size`` rows; the last batch may be short. Runs in the calling process.
    """
    require_int("batch_size", batch_size, minimum=1)
    require_int("buffer_size", buffer_size, minimum=1)

    def rows():
        for batch in batches:
            n = batch_len(batch)
            yield from ({key: value[i] for key, value in batch.items()} for i in range(n))

    group: list = []
    for row in buffer_shuffle(rows(), buffer_size, random.Random(seed)):
        group.append(row)
        if len(group) == batch_size:
            yield torch.utils.data.default_collate(group)
            group = []
    if group:
        yield torch.utils.data.default_collate(group)


def blocks_per_batch(batches: Iterable, n_samples: int, parts: int) -> list[int]:
    """For each batch, how many of the ``parts`` contiguous id blocks its ids come from.

    With the iterable datasets above, block k is what worker k reads, so 1 means the
    batch came from a single worker.
    """
    starts = np.arange(1, parts) * n_samples // parts
    counts = []
    for batch in batches:
        ids = np.asarray(batch["id"]).reshape(-1)
        counts.append(len(np.unique(np.searchsorted(starts, ids, side="right"))))
    return counts


def cpu_per_sample(kind, path=None, *, batch_size: int | None = None, work: int = 1,
                   repeats: int = 3) -> float:
    """CPU µs per sample of one epoch in this process, best of ``repeats``.

    ``kind`` is a benchmark row, read from ``path`` with ``batch_size`` and no workers, or
    a function of no argument that returns a fresh loader.

    CPU time, unlike wall time, barely moves when other processes share the cores, so
    this separates the loaders' per-sample costs even on a busy machine.
    """
    if callable(kind):
        make = kind
    elif path is None or batch_size is None:
        raise TypeError(f"the benchmark row {kind!r} needs path and batch_size")
    else:
        def make():
            return make_loader(kind, path, batch_size=batch_size, work=work)
    require_int("repeats", repeats, minimum=1)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        n = sum(batch_len(b) for b in make())
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best
