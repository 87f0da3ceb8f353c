"""The checks the audit runs, one module each, in the order the report shows them.

A new check is one file: a module here with a subclass of :class:`Check`, and one line in
:data:`CHECKS`. The report runs every check in that list, shows their lines, puts their
problems in the headline and their data in the JSON; nothing else needs to change.

The interface (:mod:`talk_helpers.audit.checks.base`):

``Check.judge(run) -> Verdict``
    ``run`` (:class:`AuditRun`) holds what every rank saw: ``run.epoch(e)[rank]`` is a
    :class:`~talk_helpers.audit.collect.RankEpoch` (the ids in order, the size of every
    batch, the worker that made it), ``run.ids(e)`` every id of an epoch, ``run.options``
    what the user asked (expected, batch size, shuffle, by-design counts, steps, how ids
    were read), ``run.id_text(i)`` how to name a sample. The :class:`Verdict` says what to
    show per epoch and after the epochs (each entry its finding first, the statistics
    behind it on the lines after), the headline's ✘ and ⚠ problems (a ✘ fails the
    audit, exit status 1), the usual cause of a finding with how the audit knows
    (:class:`Cause`) and the check's JSON. Judge with the pure checks of
    :mod:`talk_helpers.checks`; render marks with :mod:`talk_helpers.verdicts.render`.

``Check.recorder(plan) -> Recorder | None``
    For what ids cannot show (a worker's memory, /dev/shm, time per batch): a
    :class:`Recorder` built inside every rank, called at the start of every epoch, after
    every batch and at its end; what ``end_epoch`` returns reaches ``judge`` as
    ``run.recordings(check.name)[rank][epoch]``. Keep it cheap: it runs in the loop the
    audit times.

A sketch, for a check that every rank reads at least one batch::

    class EmptyRank(Check):
        name = "empty_rank"

        def judge(self, run):
            empty = [r for r in range(run.world_size)
                     if any(run.epoch(e)[r].n_batches == 0 for e in range(run.n_epochs))]
            out = Verdict(data={"empty_ranks": empty})
            if empty:
                out.problems.append(("✘", f"{len(empty)} empty ranks"))
                out.rows.append(("ranks", f"✘ no batch on rank {empty[0]}"))
            return out
"""

from talk_helpers.audit.checks.base import AuditRun, Cause, Check, Options, Recorder, Verdict
from talk_helpers.audit.checks.batch_counts import BatchCounts
from talk_helpers.audit.checks.batch_sizes import BatchSizes
from talk_helpers.audit.checks.exactly_once import ExactlyOnce
from talk_helpers.audit.checks.order import Order
from talk_helpers.audit.checks.shared_memory import SharedMemory
from talk_helpers.audit.checks.workers import Workers

__all__ = ["CHECKS", "AuditRun", "Cause", "Check", "Options", "Recorder", "Verdict"]

CHECKS: tuple[Check, ...] = (ExactlyOnce(), BatchCounts(), BatchSizes(), Order(), Workers(),
                             SharedMemory())
