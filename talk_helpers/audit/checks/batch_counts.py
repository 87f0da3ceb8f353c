"""The same number of batches on every rank, or DDP blocks at the first step a rank no
longer takes (:func:`talk_helpers.checks.check_batch_counts`)."""

from __future__ import annotations

from talk_helpers.audit.checks.base import AuditRun, Check, Verdict
from talk_helpers.checks import check_batch_counts


class BatchCounts(Check):
    name = "batch_counts"
    column = "batches per rank"

    def judge(self, run: AuditRun) -> Verdict:
        reports = [check_batch_counts([r.n_batches for r in run.epoch(e)])
                   for e in range(run.n_epochs)]
        out = Verdict(detail=reports, epoch_lines=[[repr(c)] for c in reports])
        if any(not c.ok for c in reports):
            out.problems.append(("✘", "unequal batches per rank"))
        out.data = {"epochs": [{"batches_per_rank": list(c.counts), "equal": c.ok,
                                "samples_per_rank": [int(r.sizes.sum()) for r in run.epoch(e)]}
                               for e, c in enumerate(reports)]}
        return out
