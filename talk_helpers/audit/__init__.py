"""The audit: run a loader in every rank of a real world, check what it yields, report.

``from talk_helpers.audit import audit`` in a notebook; ``python -m talk_helpers.audit
module:factory`` (or the ``talk-helpers-audit`` command) on the command line
(:mod:`talk_helpers.audit.cli`). The names below load on first use, so that ``--help``
answers before torch is imported.

Modules: :mod:`.core` (``audit()``), :mod:`.collect` (what runs in each rank),
:mod:`.sample_ids` (which sample is which), :mod:`.checks` (one module per check, the
list the report runs, and the interface a new check implements), :mod:`.report`,
:mod:`.failure` (exit statuses), :mod:`.where` (file:line in the user's code), and the
command line: :mod:`.cli`, :mod:`.shell`, :mod:`.launch` (``--nproc-per-node``) and
:mod:`.torchrun` (inside a torchrun world).
"""

import importlib

__all__ = ["AuditFailed", "AuditOptions", "AuditReport", "EpochAudit", "RankEpoch",
           "UnreadableBatch", "audit", "build_report", "collect_batches", "collect_ids"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("talk_helpers.audit.core"), name)
    raise AttributeError(f"module 'talk_helpers.audit' has no attribute {name!r}")
