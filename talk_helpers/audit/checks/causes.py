"""What causes a finding, and how the audit knows: the patterns in which ids were read, by
which rank and which worker, that tell one cause from the others.

Each function returns :class:`~talk_helpers.audit.checks.base.Cause` objects (at most one
per finding), tried from the most specific pattern to the least. Each cause's docstring
says what it must see and what rules it out; where two causes fit what was seen, the
cause names both and how to tell them apart.
"""

from __future__ import annotations

import math

import numpy as np

from talk_helpers.audit.checks.base import AuditRun, Cause
from talk_helpers.checks.mixing import GOOD_MIXING

__all__ = ["idle_cause", "once_causes", "order_cause", "order_causes", "span"]

NEARLY_ALL = 0.9    # a rank reading this share of every id reads "the same ids"


def span(ids: np.ndarray, name) -> str:
    """'0–39' for a run of consecutive ids, else the first few."""
    ids = np.sort(ids)
    if ids.size > 1 and ids[-1] - ids[0] == ids.size - 1:
        return f"{name(ids[0])}–{name(ids[-1])}"
    shown = ", ".join(str(name(i)) for i in ids[:4].tolist())
    return shown + (f", … ({ids.size} in all)" if ids.size > 4 else "")


def once_causes(run: AuditRun, epoch: int, report, wanted) -> list[Cause]:
    """The cause of duplicated, missing or unexpected ids in ``epoch``."""
    found = (_offset(run, report, wanted) or _redrawn(run, report, wanted)
             or _ranks_not_split(run, epoch, report) or _workers_not_split(run, epoch, report)
             or _sources_collide(run, report)
             or _shares_overlap(run, epoch, report) or _padding(run, report)
             or _dropped(run, report) or _unseen_workers(run, epoch, report)
             or _reread(run, epoch, report))
    return [found] if found else []


def _finding(report) -> str:
    return report.headline[2:]


def _offset(run: AuditRun, report, wanted) -> Cause | None:
    """Every unexpected id is an expected id shifted by one constant."""
    if run.counted or not report.unexpected_count or not report.missing_count \
            or not isinstance(wanted, np.ndarray | int):
        return None
    expected = np.arange(wanted) if isinstance(wanted, int) else wanted
    unexpected = report.unexpected_ids
    shift = int(unexpected.min()) - int(expected.min())
    if shift == 0 or not np.isin(unexpected - shift, expected).all():
        return None
    low, high = int(expected.min()) + shift, int(expected.max()) + shift
    return Cause(
        "✘", _finding(report), f"the ids are the expected ones shifted by {shift:+d}",
        f"each of the {unexpected.size} unexpected ids minus {shift} is an expected id",
        f"declare the ids your loader numbers: --id-range {low}:{high + 1} "
        f"(expected=range({low}, {high + 1}))")


def _per_rank_unique(run: AuditRun, epoch: int) -> list[np.ndarray]:
    return [np.unique(r.ids) for r in run.epoch(epoch)]


def _ranks_not_split(run: AuditRun, epoch: int, report) -> Cause | None:
    """Every rank reads (nearly) every id."""
    if run.world_size < 2 or not report.duplicated_count:
        return None
    unique = _per_rank_unique(run, epoch)
    every = np.unique(np.concatenate(unique)) if unique else np.empty(0)
    if not every.size or any(u.size < NEARLY_ALL * every.size for u in unique):
        return None
    ranks = " and ".join(f"rank {r}" for r in range(min(run.world_size, 3)))
    more = " …" if run.world_size > 3 else ""
    share = "all" if all(u.size == every.size for u in unique) else "nearly all"
    return Cause(
        "✘", _finding(report), "every rank reads the same ids: the loader is not split by rank",
        f"{ranks}{more} each read {share} {every.size} ids",
        "give each rank its share: DistributedSampler(dataset, num_replicas=world_size, "
        "rank=rank), split_dataset_by_node, or shard an iterable dataset by rank")


def _worker_ids(seen) -> np.ndarray | None:
    """The worker of every sample a rank read, or None when not known."""
    if not seen.num_workers or not seen.workers.size or (seen.workers < 0).any():
        return None
    return np.repeat(seen.workers.astype(np.int64), seen.sizes)


def _redrawn(run: AuditRun, report, wanted) -> Cause | None:
    """Repeats and gaps whose counts change from epoch to epoch, and ids read again within
    one rank: random draws with replacement, not a split that is wrong the same way every
    epoch."""
    if run.n_epochs < 2 or run.options.with_replacement:
        return None
    from talk_helpers.audit.checks.once import epoch_report

    counts = []
    for e in range(run.n_epochs):
        once = epoch_report(run, run.ids(e), wanted)
        counts.append((once.duplicated_count, once.missing_count))
    if len(set(counts)) < 2:
        return None
    shown = "; ".join(f"epoch {e}: {d} duplicated, {m} missing"
                      for e, (d, m) in enumerate(counts[:4]))
    within = max(int((np.unique(r.ids, return_counts=True)[1] > 1).sum())
                 for e in range(run.n_epochs) for r in run.epoch(e))
    if within:
        return Cause(
            "✘", _finding(report),
            "draws with replacement (resampled shards, a sampler with replacement=True): "
            "repeats and gaps that change every epoch",
            f"{shown}; a rank read {within} ids again within one epoch",
            "if it draws with replacement by design, judge it for that: --with-replacement "
            "(with_replacement=True)")
    return Cause(
        "✘", _finding(report),
        "each rank draws a random share of its own: repeats and gaps that change every "
        "epoch (a shuffle seeded by rank, or draws with replacement)",
        shown,
        "shuffle with a seed every rank shares (seed + epoch), then split; if it draws with "
        "replacement by design: --with-replacement")


def _workers_not_split(run: AuditRun, epoch: int, report) -> Cause | None:
    """The workers of every rank read the same ids (a split forgotten, the same in every
    rank, not the chance of random draws)."""
    found = []
    for r, seen in enumerate(run.epoch(epoch)):
        workers = _worker_ids(seen)
        if workers is None or seen.num_workers < 2:
            continue
        pairs = np.unique(np.stack([seen.ids.astype(np.int64), workers]), axis=1)
        ids, times = np.unique(pairs[0], return_counts=True)
        shared = ids[times > 1]
        if shared.size < NEARLY_ALL * ids.size or not shared.size:
            return None
        found.append((r, shared, ids, pairs))
    if not found:
        return None
    r, shared, ids, pairs = found[0]
    first = shared[0]
    readers = pairs[1][pairs[0] == first].tolist()
    ranks = "rank 0" if len(found) == 1 else "every rank"
    return Cause(
        "✘", _finding(report),
        f"the workers of {ranks} read the same ids: the dataset is split by rank but not "
        "by worker",
        f"{shared.size} of the {ids.size} ids rank {r} read came from more than one of its "
        f"workers (id {run.id_text(first)}: workers {', '.join(map(str, readers))})",
        "split each rank's share over its workers too: get_worker_info() in __iter__ "
        "(id and num_workers), or a library's split by worker")


def _sources_collide(run: AuditRun, report) -> Cause | None:
    """The duplicated ids are one run from the lowest id, each read the same number of
    times: sources that each number their samples from the same start."""
    if run.counted or report.duplicated_count < 2:
        return None
    dup, times = report.duplicate_ids, report.duplicate_times
    seen_low = min(int(dup.min()), *(int(r.ids.min()) for r in run.epoch(0) if r.ids.size))
    if int(dup.min()) != seen_low or int(dup.max()) - int(dup.min()) != dup.size - 1 \
            or len(set(times.tolist())) != 1:
        return None
    k = int(times[0])
    evidence = f"the duplicated ids are exactly {span(dup, run.id_text)}, each read {k} times"
    missing = report.missing_ids
    if missing.size and int(missing.max()) - int(missing.min()) == missing.size - 1:
        evidence += f", and the missing ones are the top ids {span(missing, run.id_text)}"
    return Cause(
        "✘", _finding(report),
        f"ids collide across sources: {k} sources each number their samples from "
        f"{run.id_text(seen_low)} (a ConcatDataset or a mixture whose sources keep their own "
        "ids)", evidence,
        "give each source its own id range: add the sizes of the sources before it")


def _shares_overlap(run: AuditRun, epoch: int, report) -> Cause | None:
    """Ranks read some of the same ids, and some ids nobody reads."""
    if run.world_size < 2 or not (report.duplicated_count and report.missing_count):
        return None
    unique = _per_rank_unique(run, epoch)
    both = np.unique(np.concatenate(unique), return_counts=True)
    across = both[0][both[1] > 1]
    if not across.size:
        return None
    return Cause(
        "✘", _finding(report),
        "the ranks' shares overlap and leave gaps: each rank draws a random share of its "
        "own (a shuffle seeded by rank, or draws with replacement)",
        f"{across.size} ids were read by more than one rank, and {report.missing_count} by "
        "none",
        "shuffle with a seed every rank shares (seed + epoch), then split; if it draws with "
        "replacement by design: --with-replacement")


def _padding(run: AuditRun, report) -> Cause | None:
    """A few ids read twice, fewer than the ranks: padding to equal shares."""
    extra = int((report.duplicate_times - 1).sum()) if report.duplicate_ids.size else 0
    if report.missing_count or report.unexpected_count or not extra \
            or extra >= run.world_size:
        return None
    return Cause(
        "✘", _finding(report),
        "padding: the loader repeats a few samples so that every rank gets as many "
        "(DistributedSampler does, with drop_last=False)",
        f"{extra} extra read{'' if extra == 1 else 's'}, fewer than the {run.world_size} "
        "ranks",
        f"if that is your loader's design, declare it: --repeated-by-design {extra} "
        f"(repeated_by_design={extra})")


def _dropped(run: AuditRun, report) -> Cause | None:
    """A few ids never read, nothing else wrong: a drop to equal shares or full batches."""
    if report.duplicated_count or report.unexpected_count or not report.missing_count:
        return None
    sizes = [int(s) for r in run.epoch(0) for s in r.sizes[:1]]
    limit = run.world_size * max(max(sizes, default=1), max(
        (r.num_workers or 1) for r in run.epoch(0)))
    if report.missing_count >= limit:
        return None
    return Cause(
        "✘", _finding(report),
        "a drop: samples that do not fill a rank's equal share or a last batch are left out "
        "(drop_last, an even split, litdata under DDP)",
        f"{report.missing_count} missing, fewer than one batch per rank and worker",
        f"if that is your loader's design, declare it: --dropped-by-design "
        f"{report.missing_count} (for litdata: --dropped-by-design auto)")


def _unseen_workers(run: AuditRun, epoch: int, report) -> Cause | None:
    """A rank reads ids more than once and has workers the audit could not count."""
    if not report.duplicated_count:
        return None
    for r, seen in enumerate(run.epoch(epoch)):
        ids, times = np.unique(seen.ids, return_counts=True)
        if (times > 1).any() and seen.workers_note:
            return Cause(
                "✘", _finding(report),
                f"rank {r} reads some ids more than once itself: its DataLoader workers may "
                "each read the whole share",
                f"{int((times > 1).sum())} ids read twice or more within rank {r}, whose "
                f"workers are {seen.workers_note}",
                "split the share over the workers: get_worker_info() in __iter__")
    return None


def _reread(run: AuditRun, epoch: int, report) -> Cause | None:
    """A rank reads ids again, some more often than others: draws with replacement."""
    for r, seen in enumerate(run.epoch(epoch)):
        _, times = np.unique(seen.ids, return_counts=True)
        again = times[times > 1]
        if again.size and again.min() != again.max():
            return Cause(
                "✘", _finding(report),
                f"rank {r} draws some samples again, some more often than others: draws with "
                "replacement (resampled shards, a sampler with replacement=True)",
                f"{again.size} ids read again within rank {r}, from {int(again.min())} to "
                f"{int(again.max())} times each",
                "if it draws with replacement by design, judge it for that: --with-replacement "
                "(with_replacement=True)")
    return None


def order_causes(run: AuditRun, detail, mark: str, epochs_seen) -> list[Cause]:
    """The causes of the order and mixing findings of an ``order.OrderDetail``."""
    out = []
    if detail.not_shuffled:
        out.append(Cause(
            mark, "not shuffled", "the loader reads in storage order every epoch "
            "(shuffle=False, a sequential sampler, an iterable dataset read in file order)",
            "every epoch in the same order, each worker's in storage order, its batches "
            f"storage neighbours (mixing score {detail.shuffle.mixing:.2f})",
            "shuffle: DataLoader(shuffle=True), DistributedSampler(shuffle=True) with "
            "set_epoch, or a shuffle buffer for an iterable dataset"))
        return out
    if detail.finding == "repeats":
        exact = any(not all(c) for c in detail.changes.values())
        out.append(order_cause(run, "order repeats", mark, epochs_seen, detail.across, exact))
    elif detail.finding == "similar":
        out.append(Cause(
            mark, "similar order across epochs", "each epoch moves samples only a little "
            "from the last one's order (a small shuffle buffer, or a shuffle within a "
            "window)", "the order correlation (Spearman) between consecutive epochs is "
            f"{max(detail.across.spearman):+.2f} (unrelated orders: about 0)",
            "shuffle the whole epoch (or larger windows), with a new seed every epoch"))
    if detail.mixing_problem() == "poorly mixed":
        out.append(_mixing_cause(detail, mark))
    return out


def _mixing_cause(detail, mark: str) -> Cause:
    """Why batches hold storage neighbours: each rank's own block, or chunks and shards."""
    s = detail.shuffle
    ranks = ", ".join(f"{v:.2f}" for v in s.rank_scores)
    evidence = (f"each rank's batches score {ranks}; all ranks' batches of one step together "
                f"{s.step_score:.2f} (a uniform shuffle: about 1)")
    if min(s.rank_scores) < GOOD_MIXING <= s.step_score:
        return Cause(mark, "poorly mixed", "each rank's batches come from its own part of "
                     "the data: each rank (or worker) shuffles only its own block",
                     evidence, "shuffle before splitting: one order every rank shares "
                     "(seed + epoch), then each rank takes its slice")
    fix = ("shuffle across chunks and shards (a larger buffer, interleaved shards); if your "
           "loader promises a chunk-level shuffle, judge it at that level: --mixing chunk:N")
    if detail.level != "sample":
        fix = "shuffle the chunks themselves, with a new seed every epoch"
    return Cause(mark, "poorly mixed", "batches hold storage neighbours: a shuffle within "
                 "chunks or shards only, or a buffer smaller than a shard", evidence, fix)


def order_cause(run: AuditRun, finding: str, mark: str, epochs_seen, across=None,
                exact: bool = True) -> Cause | None:
    """Why the order repeats. ``epochs_seen[rank][epoch]``: an ``order.EpochSeen`` (the
    epoch the loader's sampler or dataset held after the epoch, the audit's own epoch
    call, persistent workers) or None. ``exact``: some rank read an epoch in exactly the
    last one's order (else most positions kept their sample, ``across`` says how many).
    Each cause is named only when what it must see is seen and what rules it out is not."""
    seen = [[v for v in per_rank if v is not None] for per_rank in epochs_seen]
    full = [v for v in seen if len(v) == run.n_epochs and run.n_epochs >= 2]
    known = [[(e.where, e.value) for e in v] for v in full if all(e.where for e in v)]
    called = next((e.called for v in full for e in v if e.called), None)
    persistent = any(e.persistent for v in full for e in v)
    if not exact and across is not None:
        pair = int(np.argmax(across.unchanged))
        return Cause(
            mark, finding, "part of an epoch replays the last one's order: a loader resumed "
            "from a stale state, or a shuffle restarted alike part-way",
            f"rank {across.unchanged_rank[pair]}: {across.unchanged[pair]:.0%} of epoch "
            f"{pair + 1}'s positions hold epoch {pair}'s sample (two unrelated orders share "
            "about one position)",
            "save and restore the loader's state with the epoch it belongs to; reseed with "
            "seed + epoch")
    if called and persistent:
        return Cause(
            mark, finding, "persistent workers keep the copy of the dataset they started "
            f"with: the audit called {called}(epoch) before every epoch, in the main "
            "process, and the workers never see it",
            f"persistent_workers=True, the loader reused, {called} called with 0, 1, … "
            "(the order repeats all the same)",
            "keep the epoch where the workers read it (a shared value, the sampler), or "
            "persistent_workers=False")
    if known and all(len({value for _, value in v}) == 1 for v in known):
        where, value = known[0][0]
        if "current_epoch" in where:   # litdata/streaming/dataloader.py, __iter__ counts
            return Cause(
                mark, finding, "litdata's StreamingDataLoader counts its own epochs, and a "
                "loader built anew every epoch starts its count again",
                f"{where} was {value} at the start of every epoch",
                "build the loader once and iterate it every epoch (audit it with "
                "--reuse-loader)")
        if called:
            return Cause(
                mark, finding, f"{called}(epoch) does not reach what the loader shuffles "
                "with: the audit called it every epoch, and the epoch stayed",
                f"{where} was {value} at the start of every epoch",
                "set the epoch on the object whose shuffle uses it")
        return Cause(
            mark, finding, "set_epoch is not called (or not with the epoch): the shuffle is "
            "seeded alike every epoch",
            f"{where} was {value} at the start of every epoch",
            "call sampler.set_epoch(epoch) before each epoch (with --reuse-loader: "
            "--epoch-call sampler.set_epoch)")
    if known:
        where = known[0][0][0]
        values = ", ".join(str(value) for _, value in known[0])
        return Cause(
            mark, finding, "the epoch reaches the loader, but its order does not follow it: "
            "a seed fixed elsewhere", f"{where} went {values}, and the order stayed",
            "seed the shuffle with seed + epoch")
    told = f"the audit called {called}(epoch) every epoch; " if called else ""
    first = (f"{called} that does not reach the shuffle" if called
             else "an epoch that never reaches the shuffle (set_epoch not called)")
    return Cause(
        mark, finding, f"not told apart: {first}, a generator seeded alike every epoch, or a "
        "loader that counts its own epochs built anew every epoch",
        f"{told}the same samples at the same positions in consecutive epochs; the loader "
        "shows no epoch counter the audit can read",
        "to tell them apart: give the sampler or dataset an epoch attribute (set_epoch), or "
        "audit with --reuse-loader; then seed the shuffle with seed + epoch")


def idle_cause(run: AuditRun, idle: int, total: int, shards: list) -> Cause:
    """Why workers read nothing: fewer shards than readers (the dataset says how many), or
    a rank split and a worker split by modulos with a common factor (the ids show it);
    both named, and how to tell them apart, when neither is seen."""
    finding = f"{idle} of {total} workers idle"
    known = [s for s in shards if s]
    if known and known[0] < total:
        return Cause(
            "⚠", finding,
            "fewer shards than ranks × workers: each shard goes to one reader, the rest wait",
            f"the dataset has {known[0]} shards for {total} readers "
            f"({run.world_size} ranks × {total // max(run.world_size, 1)} workers)",
            f"use at most {known[0]} readers, or cut the data into a multiple of "
            f"{total} shards")
    factor = _common_factor(run)
    if factor:
        ranks, workers, g = factor
        return Cause(
            "⚠", finding,
            f"the rank split (id % {ranks}) and the worker split (id % {workers}) share the "
            f"factor {g}: a rank's ids leave only 1 in {g} worker residues, the other workers "
            "get none",
            f"every rank's ids share one residue mod {ranks}, every worker's one residue mod "
            f"{workers}, and the idle workers are exactly those whose residue mod {g} differs "
            "from their rank's",
            f"split once over all readers: keep id when id % ({ranks} × {workers}) == "
            f"rank × {workers} + worker, or split the rank's own ids by position")
    return Cause(
        "⚠", finding,
        "not told apart: fewer shards (files) than ranks × workers, or a worker split whose "
        "rule leaves these workers no id",
        f"{idle} of the {total} workers read no sample this epoch (counted inside them); the "
        "dataset says no shard count, and the ids show no common factor of two modulos",
        "to tell them apart: count the shards (fewer than the readers: the first), or list "
        "which ids each worker's rule keeps (none for the idle ones: the second)")


def _common_factor(run: AuditRun) -> tuple[int, int, int] | None:
    """(world size, workers per rank, their common factor) when each rank's ids share one
    residue mod the world size, each worker's one residue mod its rank's workers, and the
    idle workers are exactly those whose residue differs from their rank's mod the common
    factor; else None."""
    for seen in (s for e in range(run.n_epochs) for s in run.epoch(e)):
        workers, k = _worker_ids(seen), seen.num_workers or 0
        g = math.gcd(run.world_size, k)
        residue = np.unique(seen.ids.astype(np.int64) % run.world_size)
        if workers is None or g < 2 or run.counted or residue.size != 1:
            return None
        for w in range(k):
            mine = seen.ids[workers == w].astype(np.int64)
            # idle exactly where the residues cannot meet; one residue mod k where it reads
            if (not mine.size) == (int(residue[0]) % g == w % g) or np.unique(mine % k).size > 1:
                return None
    k = run.epoch(0)[0].num_workers
    return run.world_size, k, math.gcd(run.world_size, k)
