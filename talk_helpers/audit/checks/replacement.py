"""``with_replacement`` (``--with-replacement``): samples drawn with replacement, judged for
coverage and balance (:func:`talk_helpers.checks.replacement.check_draws`) instead of
exactly once. Repeats and gaps within an epoch are the design; unexpected ids, ids no
epoch draws beyond what uniform draws leave, and ranks that draw alike are not.

Draws are judged in storage order (:func:`talk_helpers.audit.checks.order.storage_order`),
so that ``mixing="chunk:N"`` judges a loader that resamples whole shards of N by its
shards; content hashes have no storage order and are judged sample by sample.
"""

from __future__ import annotations

import numpy as np

from talk_helpers.arguments import is_int
from talk_helpers.audit.checks.base import AuditRun, Cause, Verdict
from talk_helpers.audit.checks.once import SHOWN_IDS, EpochOnce, epoch_report
from talk_helpers.audit.checks.order import storage_order, storage_positions
from talk_helpers.checks.replacement import check_draws
from talk_helpers.verdicts.render import listing

__all__ = ["EpochDraws", "judge_draws"]


class EpochDraws(EpochOnce):
    """One epoch of draws: ok unless an unexpected id was drawn."""

    @property
    def ok(self) -> bool:
        return not self.report.unexpected_count

    def design_note(self) -> str:
        return ""

    def line(self) -> str:
        once = self.report
        if once.unexpected_count:
            word = "unexpected" if once.unexpected_ids.size else "more than expected"
            return f"✘ {once.unexpected_count} {word}"
        return (f"· drawn with replacement: {once.duplicated_count} drawn twice or more, "
                f"{once.missing_count} not drawn this epoch")

    def entry(self, run: AuditRun) -> str:
        once = self.report
        lines = [self.line(), once.statistics]
        if once.unexpected_ids.size:
            shown = [run.id_text(i) for i in once.unexpected_ids[:SHOWN_IDS].tolist()]
            lines.append(f"unexpected: {listing(shown, once.unexpected_ids.size)}")
        return "\n".join(lines)


def judge_draws(run: AuditRun, expected, note: str) -> Verdict:
    opts = run.options
    per_epoch = [EpochDraws(e, epoch_report(run, run.ids(e), expected(e, run.ids(e))))
                 for e in range(run.n_epochs)]
    declared = opts.expected is not None
    storage, _ = storage_order(run)
    unit = opts.chunk or 1
    if storage is None:   # contents: positions are the hashes' ranks, sample by sample
        every = np.unique(np.concatenate([run.ids(e) for e in range(run.n_epochs)]))
        position = lambda ids: np.searchsorted(every, ids)   # noqa: E731
        unit = 1
    else:
        position = lambda ids: storage_positions(storage, ids)   # noqa: E731
    streams = [[position(r.ids) for r in run.epoch(e)] for e in range(run.n_epochs)]
    if not declared:   # every id drawn is expected: coverage is not judged
        wanted = np.unique(np.concatenate([r for ranks in streams for r in ranks]))
    elif is_int(opts.expected) or (storage is not None and storage["ids"] is not None):
        wanted = np.arange(int(opts.expected) if is_int(opts.expected)
                           else len(storage["ids"]))
    else:
        wanted = expected(0, run.ids(0))
    draws = check_draws(streams, wanted, unit=unit)
    out = Verdict(detail=per_epoch, footnotes=[f"· {note}"])
    out.epoch_lines = [[c.entry(run)] for c in per_epoch]
    unexpected = max((c.report.unexpected_count for c in per_epoch), default=0)
    if unexpected:
        out.problems.append(("✘", f"{unexpected} unexpected"))
    short = declared and draws.short
    what = "ids" if unit == 1 else f"chunks of {unit}"
    if short:
        out.problems.append(("✘", f"{draws.never} {what} never drawn"))
        out.causes.append(Cause(
            "✘", f"{draws.never} {what} never drawn",
            "some samples can never be drawn: a weight of 0, shards left out of the list, or "
            "fewer draws per epoch than you think",
            f"{draws.never} of {draws.n_units} never drawn in {run.n_epochs} epochs; uniform "
            f"draws leave about {draws.null_mean:.0f} ± {draws.null_sd:.0f}",
            "check the weights and the shard list; audit more epochs to tell chance"))
    if draws.alike:
        out.problems.append(("✘", "ranks draw alike"))
        epoch, a, b = draws.alike[0]
        out.causes.append(Cause(
            "✘", "ranks draw alike",
            "every rank seeds its sampler alike, so every rank draws the same samples",
            f"rank {a} and rank {b} drew the same sample at most positions of epoch {epoch}",
            "seed each rank's sampler with its rank as well (seed + rank), or draw once and "
            "split"))
    if not declared:
        head = ("✘ ranks draw alike" if draws.alike else
                "· coverage not judged: pass --expected N, --id-range or --ids-file")
        stats = draws.statistics[1:]
    elif out.problems:
        head = "✘ " + " · ".join(text for _, text in out.problems)
        stats = draws.statistics
    else:
        head = "✔ drawn with replacement: coverage and balance as uniform draws give"
        stats = draws.statistics
    out.rows.append(("draws", "\n".join([head, *stats])))
    if not out.problems:
        out.passed = "drawn with replacement"
    out.data = {"expected_note": note, "by_design_note": None, "with_replacement": {
        "unit": unit, "n_units": draws.n_units, "draws": draws.draws, "never": draws.never,
        "never_uniform_mean": draws.null_mean, "never_uniform_sd": draws.null_sd,
        "short": bool(short), "alike": [list(p) for p in draws.alike],
        "fewest": draws.fewest, "most": draws.most, "judged": declared},
        "epochs": [c.to_dict(run) for c in per_epoch],
        "causes": [c.to_dict() for c in out.causes]}
    return out
