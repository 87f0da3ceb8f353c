"""Pure checks of what a loader yielded: every id exactly once, ranks in step, batch
sizes, random draws that differ, and how well a shuffle mixes.

Each check returns a small report: ``.ok`` for a self-check, a one-line ``repr`` and
``_repr_html_`` for a notebook cell. Nothing here starts a process.
"""

from talk_helpers.checks.batches import (
    BatchCountReport,
    BatchSizeReport,
    check_batch_counts,
    check_batch_sizes,
)
from talk_helpers.checks.draws import DrawReport, check_random_draws
from talk_helpers.checks.exactly_once import ExactlyOnceReport, check_exactly_once
from talk_helpers.checks.ids import ids_of
from talk_helpers.checks.mixing import ShuffleReport, StepMixing, shuffle_report, step_report

__all__ = [
    "BatchCountReport", "BatchSizeReport", "DrawReport", "ExactlyOnceReport", "ShuffleReport",
    "StepMixing", "check_batch_counts", "check_batch_sizes", "check_exactly_once",
    "check_random_draws", "ids_of", "shuffle_report", "step_report",
]
