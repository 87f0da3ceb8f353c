"""With ``batch_size``: every batch holds exactly that many samples
(:class:`talk_helpers.checks.BatchSizeReport`)."""

from __future__ import annotations

from talk_helpers.audit.checks.base import AuditRun, Check, Verdict
from talk_helpers.checks import BatchSizeReport


class BatchSizes(Check):
    name = "batch_sizes"
    column = "batch sizes"

    def judge(self, run: AuditRun) -> Verdict:
        size = run.options.batch_size
        if size is None:
            return Verdict(detail=[None] * run.n_epochs,
                           epoch_lines=[[] for _ in range(run.n_epochs)],
                           data={"epochs": [None] * run.n_epochs})
        reports = [BatchSizeReport(batch_size=size, per_batch=tuple(
            int(n) for r in run.epoch(e) for n in r.sizes.tolist()))
            for e in range(run.n_epochs)]
        out = Verdict(detail=reports, epoch_lines=[[repr(c)] for c in reports])
        partial = max(c.partial + c.oversized for c in reports)
        if partial:
            out.problems.append(("✘", f"{partial} partial batches"))
        out.data = {"epochs": [{"ok": c.ok, "partial": c.partial, "oversized": c.oversized}
                               for c in reports]}
        return out
