"""Does a distributed evaluation count every sample exactly once?

``DistributedSampler`` gives every rank the same number of indices: with
``drop_last=False`` it pads by repeating the first ones, with ``drop_last=True`` it cuts
the tail. A metric averaged over what the ranks evaluated then counts the padding twice
or never sees the tail (pytorch/pytorch#25162).
"""

from __future__ import annotations

from dataclasses import dataclass

from talk_helpers.arguments import is_int, require_int
from talk_helpers.checks.exactly_once import ExactlyOnceReport, check_exactly_once
from talk_helpers.checks.ids import ids_in
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.verdicts.render import listing

__all__ = ["EvalCountReport", "check_eval_counts"]


def check_eval_counts(per_rank_ids, dataset_size: int, *,
                      counted: int | None = None) -> EvalCountReport:
    """Check that an evaluation over ``dataset_size`` samples saw each one once.

    ``per_rank_ids[r]`` holds the sample ids rank ``r`` evaluated. ``counted`` is the
    number the metric divided by (the all-reduced count); by default, every id the ranks
    evaluated.
    """
    require_int("dataset_size", dataset_size, minimum=1)
    if not isinstance(per_rank_ids, list | tuple) or not per_rank_ids:
        raise TypeError(f"per_rank_ids must be a non-empty list with the ids of each rank, "
                        f"got {type(per_rank_ids).__name__}")
    per_rank = [ids_in(ids, "per_rank_ids", f"per_rank_ids[{r}]")
                for r, ids in enumerate(per_rank_ids)]
    seen = sum(int(ids.size) for ids in per_rank)
    if counted is None:
        counted = seen
    elif not is_int(counted) or counted < 0:
        raise ValueError(f"counted must be None or the metric's count (an int ≥ 0), "
                         f"got {counted!r}")
    once = check_exactly_once(per_rank, dataset_size)
    return EvalCountReport(dataset_size=int(dataset_size), counted=int(counted),
                           per_rank=tuple(int(ids.size) for ids in per_rank), once=once)


@dataclass(frozen=True, repr=False)
class EvalCountReport(OneLineReport):
    """Outcome of :func:`check_eval_counts`: ``per_rank`` samples evaluated by each rank,
    ``counted`` in the metric, ``once`` the exactly-once check of the ids."""

    dataset_size: int
    counted: int
    per_rank: tuple[int, ...]
    once: ExactlyOnceReport

    @property
    def ok(self) -> bool:
        """True when every sample was evaluated once and the metric counted each once."""
        return self.once.ok and self.counted == self.dataset_size

    def _problems(self) -> list[str]:
        problems = []
        if self.once.duplicated_count:
            twice = [f"{i} ×{t}" for i, t in self.once.duplicates.items()]
            problems.append(f"counted more than once: {listing(twice, len(twice), 6)}")
        if self.once.missing_count:
            missing = listing(self.once.missing, self.once.missing_count, 6)
            problems.append(f"never evaluated: {missing}")
        if self.once.unexpected_count:
            unexpected = listing(self.once.unexpected, self.once.unexpected_count, 6)
            problems.append(f"not in the dataset: {unexpected}")
        return problems

    def _verdict(self) -> str:
        ranks = " + ".join(map(str, self.per_rank))
        head = (f"evaluation: the metric counted {self.counted} predictions for "
                f"{self.dataset_size} samples (ranks: {ranks})")
        if self.ok:
            return f"{head}, each sample once"
        problems = self._problems()
        if not problems:  # the ids are right, the count is not
            problems = [f"the metric divided by {self.counted}, not {self.dataset_size}"]
        return f"{head} — " + "; ".join(problems)
