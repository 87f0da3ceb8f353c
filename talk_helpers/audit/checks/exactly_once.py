"""Every expected sample read exactly once per epoch, over all ranks and workers, or exactly
the drops and repeats declared by design; with ``with_replacement``, samples drawn with
replacement judged for coverage and balance instead (:mod:`.replacement`).

Expected, per epoch: ``expected=N`` (ids ``0..N-1``; with content or string ids, ``N``
distinct samples), a range (``range(10_000, 10_240)``, ``--id-range 10000:10240``), a
sequence of ids (``--ids-file``: integers or strings, one per line), or by default the
distinct ids of epoch 0 (with ``steps``, each epoch's own: a window of an endless stream
is judged by itself). Missing, unexpected and duplicated ids are each named, and a finding
with a usual cause says it (:mod:`.causes`).

``dropped_by_design="auto"`` (``--dropped-by-design auto``) asks the library: litdata's
``StreamingDataset`` says how many samples each rank reads (``len(dataset)``,
``litdata/streaming/dataset.py``, ``StreamingDataset.__len__`` → ``get_len``, which
applies its ``drop_last``), and the drop is the dataset's size less their sum.
mosaicml-streaming's ``StreamingDataset`` pads instead: each rank reads
``ceil(epoch_size / ranks)`` (``streaming/base/dataset.py``, ``StreamingDataset.__init__``:
``self.length``), and ``repeated_by_design="auto"`` takes the excess as repeats.
"""

from __future__ import annotations

from talk_helpers.audit.checks.base import AuditRun, Check, Recorder, Verdict
from talk_helpers.audit.checks.causes import once_causes
from talk_helpers.audit.checks.once import (
    AUTO,
    ContentOnceReport,
    CountedOnceReport,
    EpochOnce,
    declared_design,
    design_value,
    epoch_report,
    expected_of,
)
from talk_helpers.audit.checks.replacement import judge_draws

__all__ = ["ContentOnceReport", "CountedOnceReport", "EpochOnce", "ExactlyOnce",
           "PromiseRecorder", "design_value", "library_promise"]


class ExactlyOnce(Check):
    name = "exactly_once"
    column = "exactly once"

    def recorder(self, plan) -> Recorder:
        return PromiseRecorder()

    def judge(self, run: AuditRun) -> Verdict:
        opts = run.options
        expected, note = expected_of(run)
        if opts.with_replacement:
            return judge_draws(run, expected, note)
        design, design_note = _design(run)
        per_epoch = [EpochOnce(e, epoch_report(run, run.ids(e), expected(e, run.ids(e))),
                               design) for e in range(run.n_epochs)]
        out = Verdict(detail=per_epoch, footnotes=[f"· {note}"] + (
            [f"· {design_note}"] if design_note else []))
        out.epoch_lines = [[c.entry(run)] for c in per_epoch]
        strict = [c for c in per_epoch if not c.ok]
        words = (("identical contents" if opts.counted else "duplicated"), "missing",
                 ("more than expected" if run.counted else "unexpected"))
        for word, count in zip(words, ("duplicated_count", "missing_count",
                                       "unexpected_count"), strict=True):
            n = max((getattr(c.report, count) for c in strict), default=0)
            if n:
                out.problems.append(("✘", f"{n} {word}"))
        if strict:
            worst = max(strict, key=lambda c: c.report.duplicated_count + c.report.missing_count
                        + c.report.unexpected_count)
            out.causes = once_causes(run, worst.epoch, worst.report, wanted=expected(
                worst.epoch, run.ids(worst.epoch)))
        notes = [c.design_note() for c in per_epoch if c.ok and c.design_note()]
        out.notes = notes[:1]
        if all(c.report.ok for c in per_epoch):
            out.passed = "exactly once"
        out.data = {"expected_note": note, "by_design_note": design_note,
                    "epochs": [c.to_dict(run) for c in per_epoch],
                    "causes": [c.to_dict() for c in out.causes]}
        return out


# ------------------------------------------------------------------ the library's own rule


class PromiseRecorder(Recorder):
    """In each rank: what a library says this rank will read (for ``"auto"`` by design)."""

    def start_epoch(self, epoch: int, loader) -> None:
        self.promise = library_promise(loader)

    def end_epoch(self, epoch: int):
        return self.promise


def library_promise(loader) -> dict | None:
    """``{"library", "rank_samples", "total"}`` for a litdata or mosaicml-streaming dataset
    found in ``loader`` (the loader itself or its ``dataset``), else None."""
    dataset = getattr(loader, "dataset", loader)
    module = type(dataset).__module__ or ""
    try:
        if module.startswith("litdata.") and hasattr(dataset, "region_of_interest"):
            # litdata/utilities/dataset_utilities.py, subsample_streaming_dataset: the
            # (start, end) range it reads in each chunk; len(dataset) is this rank's share
            total = sum(int(end - start) for start, end in dataset.region_of_interest)
            return {"library": "litdata", "rank_samples": int(len(dataset)), "total": total,
                    "rule": "litdata/streaming/dataset.py, StreamingDataset.__len__"}
        if module.startswith("streaming.") and hasattr(dataset, "epoch_size"):
            return {"library": "mosaicml-streaming", "rank_samples": int(len(dataset)),
                    "total": int(dataset.epoch_size),
                    "rule": "streaming/base/dataset.py, StreamingDataset.__init__ (length)"}
    except Exception:   # a library version whose internals moved: no promise
        return None
    return None


def _design(run: AuditRun) -> tuple[dict, str | None]:
    """The declared design, with "auto" worked out from the library's own rule."""
    opts = run.options
    design = declared_design(opts.dropped_by_design, opts.repeated_by_design)
    if AUTO not in design.values():
        return design, None
    promises = [per_rank[0] if per_rank else None
                for per_rank in run.recordings(ExactlyOnce.name)]
    if not promises or any(p is None for p in promises):
        for key in [k for k, v in design.items() if v == AUTO]:
            design[key] = 0
        return design, ("by design 'auto': no litdata or mosaicml-streaming dataset found in "
                        "the loader, so nothing is taken as dropped or repeated by design")
    total = promises[0]["total"]
    promised = sum(p["rank_samples"] for p in promises)
    library, rule = promises[0]["library"], promises[0]["rule"]
    shares = " + ".join(str(p["rank_samples"]) for p in promises)
    if design.get("dropped") == AUTO:
        design["dropped"] = max(0, total - promised)
    if design.get("repeated") == AUTO:
        design["repeated"] = max(0, promised - total)
    return design, (f"by design, from {library}'s rule ({rule}): the ranks read {shares} = "
                    f"{promised} of its {total} samples")
