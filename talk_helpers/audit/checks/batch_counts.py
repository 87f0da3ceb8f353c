"""The same number of batches on every rank, or DDP blocks at the first step a rank no
longer takes (:func:`talk_helpers.checks.check_batch_counts`)."""

from __future__ import annotations

from talk_helpers.audit.checks.base import AuditRun, Cause, Check, Verdict
from talk_helpers.checks import check_batch_counts


class BatchCounts(Check):
    name = "batch_counts"
    column = "batches per rank"

    def judge(self, run: AuditRun) -> Verdict:
        reports = [check_batch_counts([r.n_batches for r in run.epoch(e)])
                   for e in range(run.n_epochs)]
        out = Verdict(detail=reports, epoch_lines=[[_entry(c)] for c in reports])
        if any(not c.ok for c in reports):
            out.problems.append(("✘", "unequal batches per rank"))
            e, worst = next((e, c) for e, c in enumerate(reports) if not c.ok)
            samples = [int(r.sizes.sum()) for r in run.epoch(e)]
            shares = ", ".join(f"rank {r} {n} batch{'' if n == 1 else 'es'} ({s} samples)"
                               for r, (n, s) in enumerate(zip(worst.counts, samples,
                                                              strict=True)))
            out.causes.append(Cause(
                "✘", "unequal batches per rank", "the ranks' shares differ in length: uneven "
                "shards, an iterable dataset split unevenly, or no padding",
                f"epoch {e}: {shares}",
                "give every rank an equal share: pad or drop (DistributedSampler's "
                "drop_last), or cut an iterable dataset's shares to one length"))
        out.data = {"epochs": [{"batches_per_rank": list(c.counts), "equal": c.ok,
                                "samples_per_rank": [int(r.sizes.sum()) for r in run.epoch(e)]}
                               for e, c in enumerate(reports)]}
        return out


def _entry(report) -> str:
    """The finding first: '✘ unequal batches per rank: DDP would block at step 3 (rank 1
    has stopped)', the counts below it."""
    if report.ok:
        return repr(report)
    listed, _, blocked = repr(report).removeprefix("✘ batches per rank: ").partition(" — ")
    return f"✘ unequal batches per rank: {blocked}\nbatches per rank: {listed}"
