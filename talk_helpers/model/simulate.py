"""Predict, without starting a process, where every sample of a sharded iterable dataset
lands: which rank, which DataLoader worker, which micro-batch — and so how many batches
each rank gets.

It follows what DataLoader really does with an IterableDataset: every worker batches its
own stream (so every worker ends with its own partial batch, or drops it with
``drop_last``), and the main process takes batches from the workers in turn, skipping a
worker once it is exhausted. With ``workers=0`` a rank is one stream.

    >>> simulate([5, 3, 3, 3], nodes=2, workers=2, micro_batch_size=4).batches_per_rank
    [3, 2]
"""

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from talk_helpers.arguments import check_choice, require_int
from talk_helpers.model.dataloader import loader_batches
from talk_helpers.model.sharding import POLICIES, worker_streams
from talk_helpers.verdicts.audit_results import NothingToShow, audit_failed
from talk_helpers.verdicts.render import table_html, verdict_html


def simulate(shard_sizes: Sequence[int], *, nodes: int, workers: int, micro_batch_size: int,
             drop_last: bool = False, policy: str = "round_robin") -> "Simulation":
    """Place every sample of shards of ``shard_sizes`` on ``nodes`` ranks × ``workers``
    DataLoader workers and batch them like DataLoader does.

    Sample ids are global: shard 0 holds ids 0..size0-1, shard 1 the next ones, and so on.
    """
    sizes = _check_sizes(shard_sizes)
    require_int("nodes", nodes, minimum=1)
    require_int("workers", workers, minimum=0)
    require_int("micro_batch_size", micro_batch_size, minimum=1)
    if not isinstance(drop_last, bool | np.bool_):
        raise TypeError(f"drop_last must be True or False, got {drop_last!r}")
    check_choice("policy", policy, POLICIES)

    streams = worker_streams(sizes, nodes=nodes, workers=workers, policy=policy)
    batches = [loader_batches(per_worker, micro_batch_size, bool(drop_last))
               for per_worker in streams]
    return Simulation(shard_sizes=tuple(int(s) for s in sizes), nodes=nodes, workers=workers,
                      micro_batch_size=micro_batch_size, drop_last=bool(drop_last),
                      policy=policy, worker_samples=streams, batches=batches)


def shard_sizes_for(dataset_size: int, num_shards: int) -> list[int]:
    """Contiguous shards whose sizes differ by at most one sample (the first ones larger),
    as ``datasets.Dataset.to_iterable_dataset(num_shards)`` cuts them."""
    require_int("dataset_size", dataset_size, minimum=0)
    require_int("num_shards", num_shards, minimum=1)
    if num_shards > dataset_size:
        raise ValueError(f"num_shards ({num_shards}) must not exceed dataset_size "
                         f"({dataset_size}): some shards would be empty")
    base, extra = divmod(dataset_size, num_shards)
    return [base + 1] * extra + [base] * (num_shards - extra)


@dataclass(frozen=True)
class RuleCheck:
    """The rule of thumb of a user's notes on a DDP hang with HF datasets:
    ``remainder < shards_per_worker < micro_batch_size``; with ``drop_last`` only
    ``shards_per_worker < micro_batch_size`` (partial batches are dropped, so the remainder
    no longer matters)."""

    remainder: int
    shards_per_worker: float
    micro_batch_size: int
    drop_last: bool = False

    @property
    def holds(self) -> bool:
        if self.drop_last:
            return self.shards_per_worker < self.micro_batch_size
        return self.remainder < self.shards_per_worker < self.micro_batch_size

    def __repr__(self) -> str:
        mark = "✔ holds" if self.holds else "✘ broken"
        if self.drop_last:
            return (f"rule (drop_last) {mark}: shards_per_worker {self.shards_per_worker:g} "
                    f"< micro_batch_size {self.micro_batch_size}")
        return (f"rule {mark}: remainder {self.remainder} < shards_per_worker "
                f"{self.shards_per_worker:g} < micro_batch_size {self.micro_batch_size}")


def shard_count_rule(dataset_size: int, num_shards: int, *, nodes: int, workers: int,
                     micro_batch_size: int, drop_last: bool = False) -> RuleCheck:
    """Evaluate the shard-count rule of thumb of a user's notes on a DDP hang with HF
    datasets (its ``drop_last=True`` variant keeps only the second inequality)."""
    require_int("dataset_size", dataset_size, minimum=1)
    require_int("num_shards", num_shards, minimum=1)
    require_int("nodes", nodes, minimum=1)
    require_int("workers", workers, minimum=1)
    require_int("micro_batch_size", micro_batch_size, minimum=1)
    if not isinstance(drop_last, bool | np.bool_):
        raise TypeError(f"drop_last must be True or False, got {drop_last!r}")
    return RuleCheck(dataset_size % num_shards, num_shards / (nodes * workers),
                     micro_batch_size, bool(drop_last))


def equal_shards_rule(shard_sizes: Sequence[int], *, nodes: int, workers: int) -> bool:
    """The rule of WebDataset's distributed training example: all shards equal and their
    count divisible by nodes × workers."""
    sizes = _check_sizes(shard_sizes)
    return bool(len(set(sizes.tolist())) == 1 and len(sizes) % (nodes * max(workers, 1)) == 0)


@dataclass(frozen=True)
class Simulation:
    """Where every sample goes; ``batches[rank]`` is the list of id arrays a rank iterates."""

    shard_sizes: tuple[int, ...]
    nodes: int
    workers: int
    micro_batch_size: int
    drop_last: bool
    policy: str
    worker_samples: list[list[np.ndarray]] = field(repr=False)
    batches: list[list[np.ndarray]] = field(repr=False)

    @property
    def batches_per_rank(self) -> list[int]:
        return [len(b) for b in self.batches]

    @property
    def samples_per_rank(self) -> list[int]:
        return [int(sum(len(x) for x in b)) for b in self.batches]

    @property
    def batches_per_worker(self) -> list[list[int]]:
        """Batches each worker contributes, ``[rank][worker]``."""
        b, drop = self.micro_batch_size, self.drop_last
        return [[len(s) // b if drop else math.ceil(len(s) / b) for s in per_rank]
                for per_rank in self.worker_samples]

    @property
    def idle_workers(self) -> list[tuple[int, int]]:
        """(rank, worker) pairs that yield no sample at all."""
        return [(r, w) for r, per_rank in enumerate(self.worker_samples)
                for w, s in enumerate(per_rank) if len(s) == 0]

    @property
    def partial_batches(self) -> int:
        return sum(1 for b in self.batches for x in b if len(x) < self.micro_batch_size)

    @property
    def dropped(self) -> int:
        """Samples that never reach a batch (``drop_last`` throws each worker's rest away)."""
        return int(sum(self.shard_sizes)) - sum(self.samples_per_rank)

    @property
    def ok(self) -> bool:
        """True when every rank gets the same number of batches (DDP steps in lockstep)."""
        return len(set(self.batches_per_rank)) == 1

    def compare(self, real_batches, *, epoch: int = 0) -> "SimulationCheck | NothingToShow":
        """Compare the prediction with what real ranks received: ``real_batches[rank]`` is
        the list of batches (id sequences) one rank iterated, e.g. ``report.epochs[0]``; or
        give the audit report itself, and its ``epoch`` is compared (nothing to show when
        the audit failed)."""
        if hasattr(type(real_batches), "epochs") and hasattr(real_batches, "world_size"):
            if audit_failed(real_batches):
                return NothingToShow()
            require_int("epoch", epoch, minimum=0, maximum=real_batches.n_epochs - 1)
            real_batches = real_batches.epochs[epoch]
        if len(real_batches) != self.nodes:
            raise ValueError(f"real_batches must hold one list per rank ({self.nodes}), "
                             f"got {len(real_batches)}")
        real = [[[int(i) for i in np.asarray(b).reshape(-1)] for b in rank]
                for rank in real_batches]
        predicted = [[b.tolist() for b in rank] for rank in self.batches]
        return SimulationCheck(predicted_batches=self.batches_per_rank,
                               real_batches=[len(r) for r in real],
                               real_samples=[sum(len(b) for b in r) for r in real],
                               same_ids=[p == r for p, r in zip(predicted, real, strict=True)])

    def placement(self) -> dict[str, np.ndarray]:
        """One row per sample id: its shard, rank, worker and batch index on the rank
        (-1 for rank, worker and batch when the sample is dropped)."""
        total = int(sum(self.shard_sizes))
        shard = np.repeat(np.arange(len(self.shard_sizes)), self.shard_sizes)
        rank = np.full(total, -1, dtype=np.int64)
        worker = np.full(total, -1, dtype=np.int64)
        batch = np.full(total, -1, dtype=np.int64)
        for r, per_rank in enumerate(self.worker_samples):
            for w, ids in enumerate(per_rank):
                worker[ids] = w
                rank[ids] = r
        for per_rank in self.batches:
            for i, ids in enumerate(per_rank):
                batch[ids] = i
        dropped = batch < 0
        rank[dropped] = -1
        worker[dropped] = -1
        return {"id": np.arange(total), "shard": shard, "rank": rank, "worker": worker,
                "batch": batch}

    @property
    def verdict(self) -> str:
        counts = self.batches_per_rank
        if self.ok:
            return f"✔ every rank gets {counts[0]} batches: DDP steps in lockstep"
        low = min(counts)
        longer = [r for r, c in enumerate(counts) if c > low]
        waits = "waits" if len(longer) == 1 else "wait"
        return (f"✘ batches per rank differ {counts}: at step {low + 1} {ranks_named(longer)} "
                f"{waits} in a collective that the others never join → DDP hangs")

    def _rows(self) -> list[tuple[int, int, int, str]]:
        return [(r, self.batches_per_rank[r], self.samples_per_rank[r],
                 " ".join(map(str, self.batches_per_worker[r])))
                for r in range(self.nodes)]

    def __repr__(self) -> str:
        head = (f"{len(self.shard_sizes)} shards · {self.nodes} ranks × {self.workers} workers"
                f" · micro-batch {self.micro_batch_size} · drop_last={self.drop_last}"
                f" · {self.policy}")
        lines = [head, "rank  batches  samples  batches per worker"]
        lines += [f"{r:>4}  {b:>7}  {s:>7}  {w}" for r, b, s, w in self._rows()]
        lines.append(self.verdict)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = html.escape(repr(self).splitlines()[0])
        table = table_html(["rank", "batches", "samples", "batches per worker"], self._rows(),
                           align="right")
        return (f"<div><p>{head}</p>{table}"
                f"{verdict_html(self.ok, self.verdict[2:])}</div>")


@dataclass(frozen=True)
class SimulationCheck:
    """The simulator against a real run: batch counts and every batch's ids, per rank."""

    predicted_batches: list[int]
    real_batches: list[int]
    real_samples: list[int]
    same_ids: list[bool]

    @property
    def ok(self) -> bool:
        return all(self.same_ids) and self.predicted_batches == self.real_batches

    def __repr__(self) -> str:
        if self.ok:
            return (f"✔ the simulator predicted every batch of every rank: batches per rank "
                    f"{self.real_batches}, samples per rank {self.real_samples}")
        wrong = [r for r, same in enumerate(self.same_ids) if not same]
        return (f"✘ the simulator is wrong on {ranks_named(wrong)}: predicted "
                f"batches {self.predicted_batches}, real {self.real_batches}")


def ranks_named(ranks) -> str:
    """'rank 0', 'ranks 0 and 1', 'ranks 0, 1 and 2'."""
    names = [str(r) for r in ranks]
    if len(names) == 1:
        return f"rank {names[0]}"
    return f"ranks {', '.join(names[:-1])} and {names[-1]}"


def _check_sizes(shard_sizes) -> np.ndarray:
    if isinstance(shard_sizes, int | np.integer) or not hasattr(shard_sizes, "__len__"):
        raise TypeError("shard_sizes must be a sequence of shard lengths, e.g. [5, 5, 3], "
                        f"got {shard_sizes!r} (use shard_sizes_for(dataset_size, num_shards))")
    sizes = np.asarray(shard_sizes)
    if sizes.ndim != 1 or len(sizes) == 0:
        raise ValueError(f"shard_sizes must be a non-empty flat sequence, got {shard_sizes!r}")
    if not np.issubdtype(sizes.dtype, np.integer):
        raise TypeError(f"shard_sizes must hold ints, got dtype {sizes.dtype}")
    if (sizes < 0).any():
        raise ValueError(f"shard sizes must be ≥ 0, got {sizes.tolist()}")
    return sizes.astype(np.int64)
