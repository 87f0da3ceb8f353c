"""Pure checks of what a loader yielded: every id exactly once, ranks in step, batch
sizes, random draws that differ, and how well a shuffle mixes; and of what breaks in
production: worker memory, shared memory, evaluation counts, the rank split, rank-0
preparation, shard coverage, resumes and node-local caches (notebook 11).

Each check returns a small report: ``.ok`` for a self-check, a one-line ``repr`` and
``_repr_html_`` for a notebook cell. Nothing here starts a process.
"""

from talk_helpers.checks.batches import (
    BatchCountReport,
    BatchSizeReport,
    check_batch_counts,
    check_batch_sizes,
)
from talk_helpers.checks.cache_visibility import CacheReport, check_cache_visibility
from talk_helpers.checks.checklist import Checklist, checklist
from talk_helpers.checks.draws import DrawReport, check_random_draws
from talk_helpers.checks.eval_counts import EvalCountReport, check_eval_counts
from talk_helpers.checks.exactly_once import ExactlyOnceReport, check_exactly_once
from talk_helpers.checks.ids import ids_of
from talk_helpers.checks.mixing import ShuffleReport, shuffle_report, step_report
from talk_helpers.checks.preparation import PreparationReport, check_preparation_time
from talk_helpers.checks.rank_split import RankSplitReport, check_rank_split
from talk_helpers.checks.resume import ResumeReport, check_resume
from talk_helpers.checks.shard_coverage import ShardCoverageReport, check_shard_coverage
from talk_helpers.checks.shm_budget import (
    ShmBudgetReport,
    batch_bytes,
    check_shm_budget,
    dataset_shm_bytes,
)
from talk_helpers.checks.worker_memory import (
    WorkerMemoryReport,
    check_worker_memory,
    dataset_bytes,
)
from talk_helpers.verdicts.audit_results import (
    NOTHING_TO_SHOW,
    NothingToShow,
    audit_failed,
    read_audit,
)

__all__ = [
    "BatchCountReport", "BatchSizeReport", "DrawReport", "ExactlyOnceReport", "ShuffleReport",
    "check_batch_counts", "check_batch_sizes", "check_exactly_once",
    "check_random_draws", "ids_of", "shuffle_report", "step_report",
    # what breaks in production (notebook 11)
    "CacheReport", "Checklist", "EvalCountReport", "PreparationReport", "RankSplitReport",
    "ResumeReport", "ShardCoverageReport", "ShmBudgetReport", "WorkerMemoryReport",
    "batch_bytes", "check_cache_visibility", "check_eval_counts", "check_preparation_time",
    "check_rank_split", "check_resume", "check_shard_coverage", "check_shm_budget",
    "check_worker_memory", "checklist", "dataset_bytes", "dataset_shm_bytes",
    # reading an audit's results in a later cell
    "NOTHING_TO_SHOW", "NothingToShow", "audit_failed", "read_audit",
]
