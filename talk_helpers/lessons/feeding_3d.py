"""What each rank of a TP × DP × PP world does to get its micro-batches, two ways.

- :func:`nanotron_rank`: on the first and last pipeline stages every TP rank runs its own
  DataLoader with a DistributedSampler over the DP group (or the sampler a notebook cell
  builds, ``FeedConfig.make_sampler``); middle stages iterate an
  :class:`~talk_helpers.lessons.megatron_data.EmptyInfiniteDataset` of the same length and get
  TensorPointers. No communication: TP ranks agree because they read the same indices.
- :func:`megatron_rank`: only TP rank 0 of the first and last stages builds a loader (a
  MegatronPretrainingSampler); it broadcasts tokens and position ids (first stage) or
  labels and loss mask (last stage) inside its TP group. Middle stages get nothing.

Both run inside the ranks of ``talk_helpers.runtime.world.run_ranks`` and return plain data
(what the rank saw, bytes read from the .bin file, bytes broadcast); :func:`check_feeding`
turns the results of a whole world into one report. :func:`megatron_builder` is Megatron's
dataset builder as one rank runs it, and :func:`reads_data` says which ranks read.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from talk_helpers.arguments import check_choice

__all__ = ["FeedConfig", "FeedReport", "check_feeding", "feed_rank", "feeding_table",
           "make_mystery_dp_loader", "megatron_builder", "megatron_rank", "nanotron_rank",
           "reads_data", "results_of", "write_corpus"]


@dataclass(frozen=True)
class FeedConfig:
    """Everything a rank needs to build its loader (picklable)."""

    prefix: str
    tp: int = 2
    dp: int = 2
    pp: int = 2
    seq_len: int = 8
    micro_batch_size: int = 2
    micro_batches_per_step: int = 2
    steps: int = 3
    seed: int = 1234
    consumed_samples: int = 0
    # nanotron's sampler: None builds it over the DP group, as nanotron does; or a
    # picklable make_sampler(dataset, dp_rank, dp_size) -> sampler (a notebook cell's)
    make_sampler: Callable | None = None

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.micro_batches_per_step * self.dp


def write_corpus(directory, n_documents: int = 80, seed: int = 0, max_len: int = 30) -> str:
    """A tiny .bin/.idx corpus of documents of random length in ``directory``; its prefix."""
    from pathlib import Path

    from talk_helpers.lessons.megatron_data import make_documents, write_indexed_dataset

    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=n_documents)
    prefix = Path(directory) / "corpus"
    write_indexed_dataset(prefix, make_documents(lengths))
    return str(prefix)


# --------------------------------------------------------------------------------------
# inside the ranks


def feed_rank(rank: int, world_size: int, tasks) -> list[dict]:
    """Run several feedings in one world, one after the other: ``tasks`` = (style, cfg) pairs.

    Starting 8 processes costs seconds; building a few more process groups costs little.
    """
    styles = {"nanotron": nanotron_rank, "megatron": megatron_rank}
    out = []
    for style, cfg in tasks:
        check_choice("style", style, tuple(styles))
        out.append(styles[style](rank, world_size, cfg))
    return out


def results_of(world_results, task: int) -> list[dict]:
    """The per-rank results of task number ``task`` of :func:`feed_rank`."""
    return [per_rank[task] for per_rank in world_results]


def nanotron_rank(rank: int, world_size: int, cfg: FeedConfig) -> dict:
    """nanotron's feeding: every TP rank of a data stage reads; middle stages read nothing."""
    from functools import partial

    from torch.utils.data import DataLoader, DistributedSampler

    from talk_helpers.lessons.megatron_data import EmptyInfiniteDataset, GPTSamples, collate_clm
    from talk_helpers.model.parallel_groups import create_groups

    groups = create_groups(cfg.tp, cfg.dp, cfg.pp)
    c = groups.coords
    samples = GPTSamples(cfg.prefix, cfg.seq_len, seed=cfg.seed)
    data_stage = groups.is_first_stage or groups.is_last_stage
    dataset = samples if data_stage else EmptyInfiniteDataset(len(samples))
    if cfg.make_sampler is None:
        sampler = DistributedSampler(dataset, num_replicas=cfg.dp, rank=c.dp_rank,
                                     shuffle=False, drop_last=True)
    else:
        sampler = cfg.make_sampler(dataset, c.dp_rank, cfg.dp)
    collate = partial(collate_clm, pp_rank=c.pp_rank, input_pp_rank=0,
                      output_pp_rank=cfg.pp - 1)
    loader = DataLoader(dataset, batch_size=cfg.micro_batch_size, sampler=sampler,
                        collate_fn=collate, num_workers=0)
    it = iter(loader)
    seen = []
    for _ in range(cfg.steps):
        for _ in range(cfg.micro_batches_per_step):
            mb = next(it)
            seen.append({"ids": mb.get("id"), "tokens": _real(mb["input_ids"]),
                         "labels": _real(mb["label_ids"])})
    return _result(c, "reads" if data_stage else "empty dataset", seen,
                   samples.indexed.bytes_read, 0, 0)


def megatron_rank(rank: int, world_size: int, cfg: FeedConfig) -> dict:
    """Megatron's feeding: TP rank 0 of a data stage reads and broadcasts to its TP group.

    The broadcast tensors live on the TP group's device (``collective_device``), where
    Megatron puts them on ``torch.cuda.current_device()``: the CPU in a gloo world, the
    rank's GPU under NCCL."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from talk_helpers.lessons.megatron_data import GPTSamples, MegatronPretrainingSampler
    from talk_helpers.model.parallel_groups import create_groups
    from talk_helpers.runtime.devices import collective_device

    groups = create_groups(cfg.tp, cfg.dp, cfg.pp)
    c = groups.coords
    first, last = groups.is_first_stage, groups.is_last_stage
    builds = c.tp_rank == 0 and (first or last)
    device = collective_device(groups.tp_group)  # Megatron: torch.cuda.current_device()
    dist.barrier()                       # every rank enters the dataset builder
    bytes_read, it = 0, None
    if builds:
        samples = GPTSamples(cfg.prefix, cfg.seq_len, seed=cfg.seed)
        sampler = MegatronPretrainingSampler(len(samples), cfg.consumed_samples,
                                             cfg.micro_batch_size, c.dp_rank, cfg.dp)
        it = iter(DataLoader(samples, batch_sampler=sampler, num_workers=0))
    dist.barrier()
    mbs, s = cfg.micro_batch_size, cfg.seq_len
    sent = received = 0
    seen = []
    for _ in range(cfg.steps):
        for _ in range(cfg.micro_batches_per_step):
            if not (first or last):
                seen.append({"ids": None, "tokens": None, "labels": None})
                continue
            if builds:
                batch = next(it)
                text = batch["text"].to(device)
                ids = batch["id"].numpy()
                data = {"tokens": text[:, :-1].contiguous(), "labels": text[:, 1:].contiguous(),
                        "loss_mask": torch.ones(mbs, s, dtype=torch.float32, device=device),
                        "position_ids": torch.arange(s, device=device).repeat(mbs, 1)}
            else:
                ids = None
                data = {"tokens": torch.empty(mbs, s, dtype=torch.int64, device=device),
                        "labels": torch.empty(mbs, s, dtype=torch.int64, device=device),
                        "loss_mask": torch.empty(mbs, s, dtype=torch.float32, device=device),
                        "position_ids": torch.empty(mbs, s, dtype=torch.int64, device=device)}
            keys = (["tokens", "position_ids"] if first else []) + \
                   (["labels", "loss_mask"] if last else [])
            for key in keys:
                dist.broadcast(data[key], groups.tp_src_rank, group=groups.tp_group)
                nbytes = data[key].numel() * data[key].element_size()
                if builds:
                    sent += nbytes * (cfg.tp - 1)
                else:
                    received += nbytes
            seen.append({"ids": ids,
                         "tokens": data["tokens"].cpu().numpy() if first else None,
                         "labels": data["labels"].cpu().numpy() if last else None})
    if builds:
        bytes_read = samples.indexed.bytes_read
    role = "reads, broadcasts" if builds else ("receives" if first or last else "nothing")
    return _result(c, role, seen, bytes_read, sent, received)


def make_mystery_dp_loader(rank: int, world_size: int, epoch: int, *, size: int = 32,
                           micro_batch_size: int = 2):
    """A data-parallel loader of a TP=2 job with one bug, to diagnose with ``audit``.

    ``rank`` and ``world_size`` are the DP rank and DP size, as ``audit`` passes them.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    tp = 2
    sampler = DistributedSampler(range(size), num_replicas=world_size * tp, rank=rank * tp,
                                 shuffle=False, drop_last=True)
    return DataLoader(range(size), batch_size=micro_batch_size, sampler=sampler)


def reads_data(rank: int, world_size: int, cfg: FeedConfig) -> bool:
    """Whether ``rank`` reads data in Megatron-LM: TP rank 0 of the first or last stage."""
    from talk_helpers.model.parallel_groups import layout

    c = layout(world_size, cfg.tp, cfg.dp, cfg.pp).coords(rank)
    return c.tp_rank == 0 and c.pp_rank in (0, cfg.pp - 1)


def megatron_builder(rank: int, world_size: int, cfg: FeedConfig) -> str:
    """Megatron's dataset builder as one rank runs it (``build_generic_dataset``).

    Rank 0 builds first, then a barrier over the whole world, then the other reading ranks
    build; a rank that reads nothing takes the barrier and returns. A rank whose barrier
    times out (the world's collective timeout) says so instead of raising.
    """
    import torch.distributed as dist

    from talk_helpers.lessons.megatron_data import GPTSamples
    from talk_helpers.runtime.in_rank import report_progress

    reader = reads_data(rank, world_size, cfg)
    report_progress("in the builder's barrier")
    if rank == 0 and reader:
        GPTSamples(cfg.prefix, cfg.seq_len, seed=cfg.seed)
    try:
        dist.barrier()
    except RuntimeError:
        return "timed out in the builder's barrier"
    if rank != 0 and reader:
        GPTSamples(cfg.prefix, cfg.seq_len, seed=cfg.seed)
    report_progress("past the barrier")
    return "built the dataset" if reader else "barrier only"


def _real(value):
    return value if isinstance(value, np.ndarray) else None


def _result(coords, role, seen, bytes_read, sent, received) -> dict:
    return {"rank": coords.rank, "tp": coords.tp_rank, "dp": coords.dp_rank,
            "pp": coords.pp_rank, "role": role, "seen": seen, "bytes_read": int(bytes_read),
            "bytes_sent": int(sent), "bytes_received": int(received)}


# --------------------------------------------------------------------------------------
# in the notebook process


def feeding_table(results) -> str:
    """One line per rank: its coordinates, its role, micro-batches with data, bytes moved."""
    lines = [f"{'rank':>4} {'tp':>3} {'dp':>3} {'pp':>3}  {'role':<18} {'data/next':>9} "
             f"{'read B':>7} {'sent B':>7} {'recv B':>7}"]
    for r in results:
        with_data = sum(s["tokens"] is not None or s["labels"] is not None for s in r["seen"])
        lines.append(f"{r['rank']:>4} {r['tp']:>3} {r['dp']:>3} {r['pp']:>3}  {r['role']:<18} "
                     f"{with_data:>4}/{len(r['seen']):<4} {r['bytes_read']:>7} "
                     f"{r['bytes_sent']:>7} {r['bytes_received']:>7}")
    total = {k: sum(r[k] for r in results) for k in ("bytes_read", "bytes_sent",
                                                     "bytes_received")}
    lines.append(f"{'total':>41} {total['bytes_read']:>7} {total['bytes_sent']:>7} "
                 f"{total['bytes_received']:>7}")
    return "\n".join(lines)


@dataclass
class FeedReport:
    """The four checks of notebook 07 on the results of one world."""

    same_in_tp_group: bool
    disjoint_across_dp: bool
    exactly_once: object
    labels_are_shifted_tokens: bool
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.same_in_tp_group and self.disjoint_across_dp and self.exactly_once.ok
                and self.labels_are_shifted_tokens)

    def __repr__(self) -> str:
        def mark(ok):
            return "✔" if ok else "✘"

        lines = [f"{mark(self.same_in_tp_group)} same data inside each TP group",
                 f"{mark(self.disjoint_across_dp)} disjoint data across DP ranks (each step)",
                 f"{mark(self.exactly_once.ok)} every sample once: {self.exactly_once!r}",
                 f"{mark(self.labels_are_shifted_tokens)} last-stage labels = first-stage "
                 f"tokens shifted by one"]
        return "\n".join(lines + [f"  ! {p}" for p in self.problems[:5]])


def check_feeding(results, cfg: FeedConfig) -> FeedReport:
    """Check a world's results: TP agreement, DP disjointness, exactly once, the shift."""
    from talk_helpers.checks import check_exactly_once
    from talk_helpers.model.parallel_groups import layout

    grid = layout(len(results), cfg.tp, cfg.dp, cfg.pp)
    problems = []
    same = True
    for group in grid.tp_groups:
        ref = results[group[0]]["seen"]
        for member in group[1:]:
            for step, (a, b) in enumerate(zip(ref, results[member]["seen"], strict=True)):
                for key in ("tokens", "labels"):
                    if not _same(a[key], b[key]):
                        same = False
                        problems.append(f"ranks {group[0]} and {member} differ in {key} at "
                                        f"micro-batch {step}")
    # ids as read by TP rank 0 of the first stage of each DP rank
    readers = [results[grid.tp_groups[0][0] + d * cfg.tp] for d in range(cfg.dp)]
    n_micro = len(readers[0]["seen"])
    disjoint = True
    for step in range(n_micro):
        ids = [set(r["seen"][step]["ids"].tolist()) for r in readers]
        if len(set().union(*ids)) != sum(map(len, ids)):
            disjoint = False
            problems.append(f"DP ranks share samples in micro-batch {step}")
    all_ids = [r["seen"][k]["ids"] for r in readers for k in range(n_micro)]
    expected = range(cfg.consumed_samples,
                     cfg.consumed_samples + cfg.steps * cfg.global_batch_size)
    once = check_exactly_once(all_ids, list(expected))
    shifted = True
    last_base = (cfg.pp - 1) * cfg.tp * cfg.dp
    for rank in range(cfg.tp * cfg.dp):
        for a, b in zip(results[rank]["seen"], results[last_base + rank]["seen"], strict=True):
            if not np.array_equal(a["tokens"][:, 1:], b["labels"][:, :-1]):
                shifted = False
                problems.append(f"rank {last_base + rank}'s labels are not rank {rank}'s "
                                f"tokens shifted")
    return FeedReport(same, disjoint, once, shifted, problems)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(np.asarray(a), np.asarray(b))
