"""Every check in one call: run a loader in every rank of a real world and audit what it yields.

``audit(make_loader, world_size=2)`` calls ``make_loader(rank, world_size, epoch)`` in
each rank of a real gloo world (:func:`talk_helpers.runtime.world.run_world`), iterates
what it returns as a training loop would, reads the sample ids of every batch
(:mod:`talk_helpers.audit.sample_ids`: never guessed) and runs every check of
:data:`talk_helpers.audit.checks.CHECKS` (exactly once, batches per rank, batch sizes,
order and mixing, samples per worker) over what the ranks saw together. The
:class:`~talk_helpers.audit.report.AuditReport` says ✔, ⚠ or ✘ with every problem in its
headline, and the cause of a finding where the evidence tells it; a failed audit's report
shows why, and what a later cell reads from it raises ``AuditFailed``.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from talk_helpers.arguments import is_int, require_int
from talk_helpers.audit.checks import CHECKS, AuditRun, Options
from talk_helpers.audit.checks.exactly_once import design_value
from talk_helpers.audit.collect import (
    NotALoader,
    Plan,
    RankEpoch,
    RankRun,
    collect,
    collect_batches,
    collect_ids,
)
from talk_helpers.audit.failure import Failure, from_world
from talk_helpers.audit.report import AuditFailed, AuditReport, EpochAudit
from talk_helpers.audit.sample_ids import UnreadableBatch, sample_ids
from talk_helpers.checks import check_exactly_once
from talk_helpers.runtime import world as distributed

__all__ = ["AuditFailed", "AuditOptions", "AuditReport", "EpochAudit", "NotALoader", "RankEpoch",
           "UnreadableBatch", "audit", "build_report", "collect_batches", "collect_ids",
           "expected_fits", "failed_report", "validate_options"]

SHUFFLE_CHOICES = (None, True, False)
BYTES_PER_EXPECTED_ID = 24   # the exactly-once check's counts, masks and copies, per id


@dataclass(frozen=True)
class AuditOptions:
    """Everything :func:`audit` takes besides the loader and the world size (or the same
    names as keywords).

    * ``expected``: what one epoch holds exactly once: an int N (ids 0..N-1; with string
      ids or ``by_content``, N distinct samples), a range or a sequence of ids. None: the
      distinct ids of epoch 0 (with ``steps``, each epoch's own).
    * ``shuffle``: True fails an order that repeats or mixes poorly, None warns, False
      does not judge it. ``mixing``: ``"sample"``, or ``"chunk:N"`` for a loader that
      shuffles chunks of N consecutive ids.
    * ``dropped_by_design`` / ``repeated_by_design``: drops or extra reads per epoch a
      fix makes on purpose, a count or the ids (``"auto"``: litdata's drop,
      mosaicml-streaming's padding). ``with_replacement``: judge coverage and balance.
    * ``ids``: where a batch holds its ids (``"idx"``, ``"0"``, ``"meta.id"``);
      ``by_content``: a hash of each sample instead; ``batch_ids``: a picklable
      ``batch -> ids``. Otherwise only 1-D integer batches or dicts with ``"id"``.
    * ``steps``: batches per rank per epoch, at most. ``reuse_loader``: build each rank's
      loader once, and call ``epoch_call`` (``"sampler.set_epoch"`` or ``fn(loader,
      epoch)``) before each epoch.
    * ``in_process``: every rank in this process, no world (pure simulations).
      ``timeout_s``, ``collective_timeout_s``, ``start_method`` and ``warm_world``
      (False: ranks for this audit alone) go to the world.
    * ``checks``: default :data:`talk_helpers.audit.checks.CHECKS`. ``hold_back``: the
      report holds its causes back for an exercise (``report.causes`` keeps them).
    """

    epochs: int = 2
    expected: Any = None
    batch_size: int | None = None
    shuffle: bool | None = None
    dropped_by_design: Any = None
    repeated_by_design: Any = None
    ids: str | None = None
    by_content: bool = False
    batch_ids: Callable | None = None
    steps: int | None = None
    reuse_loader: bool = False
    epoch_call: str | Callable | None = None
    in_process: bool = False
    timeout_s: float = 120.0
    collective_timeout_s: float = 10.0
    start_method: str | None = None
    warm_world: bool | None = None
    checks: tuple | None = None
    with_replacement: bool = False
    mixing: str = "sample"
    hold_back: bool = False


def audit(make_loader: Callable, *, world_size: int, options: AuditOptions | None = None,
          **keywords) -> AuditReport:
    """Run ``make_loader`` in every rank and check what the ranks see together.

    ``make_loader(rank, world_size, epoch)`` returns what a training loop iterates (a
    DataLoader, an iterable dataset, a list of batches). In a real world it is pickled and
    sent to the rank processes, so it must be a module-level function, one from an
    ``%%importable`` cell, or a ``functools.partial`` of one. ``world_size``: number of
    ranks (≥ 1). Everything else: :class:`AuditOptions`, as ``options=`` or keywords.
    """
    if not callable(make_loader):
        raise TypeError(f"make_loader must be callable as make_loader(rank, world_size, "
                        f"epoch), got {make_loader!r}")
    unknown = sorted(set(keywords) - {f.name for f in fields(AuditOptions)})
    if unknown:
        raise TypeError(f"audit() has no option {unknown[0]!r}; the options are "
                        f"{[f.name for f in fields(AuditOptions)]}")
    o = replace(options or AuditOptions(), **keywords)
    require_int("world_size", world_size, minimum=1)
    require_int("epochs", o.epochs, minimum=1)
    require_int("steps", o.steps, minimum=1, allow_none=True)
    reader = sample_ids(o.ids, o.by_content, o.batch_ids)
    if not isinstance(o.reuse_loader, bool):
        raise TypeError(f"reuse_loader must be True or False, got {o.reuse_loader!r}")
    if o.epoch_call is not None:
        if not o.reuse_loader:
            raise ValueError("epoch_call needs reuse_loader=True: a loader built for every "
                             "epoch gets its epoch from make_loader(rank, world_size, epoch)")
        if not callable(o.epoch_call) and not (isinstance(o.epoch_call, str) and o.epoch_call):
            raise TypeError(f"epoch_call must be an attribute path such as "
                            f"'sampler.set_epoch' or a callable fn(loader, epoch), "
                            f"got {o.epoch_call!r}")
    # ids listed as a tuple are kept in their order (string ids: the storage order)
    expected = list(o.expected) if isinstance(o.expected, tuple) else o.expected
    judged = Options(expected=expected, batch_size=o.batch_size,
                     shuffle=o.shuffle, dropped_by_design=o.dropped_by_design,
                     repeated_by_design=o.repeated_by_design, steps=o.steps,
                     ids=reader.label, counted=reader.counted,
                     with_replacement=o.with_replacement, mixing=o.mixing,
                     hold_back=o.hold_back)
    validate_options(judged)
    checks = CHECKS if o.checks is None else tuple(o.checks)
    plan = Plan(epochs=o.epochs, reader=reader, steps=o.steps, reuse_loader=o.reuse_loader,
                epoch_call=o.epoch_call, checks=checks)

    if o.in_process:
        ranks = [collect(rank, world_size, make_loader, plan, publish=lambda _: None)
                 for rank in range(world_size)]
        return build_report(ranks, options=judged, checks=checks)
    _check_sendable(make_loader, "make_loader")
    for name, value in (("batch_ids", o.batch_ids), ("epoch_call", o.epoch_call)):
        if callable(value):
            _check_sendable(value, name)
    world = distributed.run_world(
        collect, world_size, args=(make_loader, plan), timeout_s=o.timeout_s,
        collective_timeout_s=o.collective_timeout_s, start_method=o.start_method,
        reuse=o.warm_world, preload_ddp=False,
    )
    if not world.ok:
        return failed_report(world_size, o.epochs, from_world(world, o.timeout_s),
                             world=world, options=judged)
    return build_report(world.results, options=judged, world=world, checks=checks)


def failed_report(world_size: int, epochs: int, failure: Failure | str, *, world=None,
                  options: Options | None = None, shuffle: bool | None = None) -> AuditReport:
    """The report of an audit that could not judge (a rank failed, hung or died, or a
    batch's ids could not be told)."""
    if isinstance(failure, str):
        failure = Failure(kind="raised", message=failure, error=failure)
    return AuditReport(world_size=world_size, n_epochs=epochs, failure=failure, world=world,
                       options=options or Options(shuffle=shuffle))


def build_report(per_rank: list, *, options: Options | None = None, world=None,
                 checks: tuple | None = None, **kwargs) -> AuditReport:
    """Every check over what the ranks collected (``per_rank[rank]``: a RankRun, or a list
    of RankEpoch). :func:`audit` and the torchrun entry point both end here. Options may
    be given as keywords (``expected=``, ``batch_size=``, ``shuffle=``, …)."""
    if options is None:
        options = Options(**kwargs)
    elif kwargs:
        raise TypeError("pass options= or keywords, not both")
    validate_options(options)
    ranks = [r if isinstance(r, RankRun) else RankRun(list(r)) for r in per_rank]
    epochs = len(ranks[0].epochs) if ranks else 0
    if not ranks or epochs < 1 or any(len(r.epochs) != epochs for r in ranks):
        raise ValueError("per_rank must hold the same number (≥ 1) of epochs for every "
                         f"rank, got {[len(r.epochs) for r in ranks]}")
    run = AuditRun(ranks, options)
    results = {}
    for check in CHECKS if checks is None else checks:
        results[check.name] = verdict = check.judge(run)
        verdict.column = verdict.column or check.column
    return AuditReport(world_size=len(ranks), n_epochs=epochs, options=options, run=run,
                       results=results, world=world)


def validate_options(options: Options) -> None:
    """Refuse bad arguments before any process starts, naming the argument."""
    for name in ("with_replacement", "hold_back"):
        if not isinstance(getattr(options, name), bool):
            raise TypeError(f"{name} must be True or False, got {getattr(options, name)!r}")
    mixing = options.mixing
    if not (mixing == "sample" or (isinstance(mixing, str) and mixing.startswith("chunk:")
                                   and mixing[6:].isdigit() and int(mixing[6:]) >= 1)):
        raise ValueError(f"mixing must be 'sample' or 'chunk:N' with N ≥ 1 ids per chunk, "
                         f"got {mixing!r}")
    batch_size = options.batch_size
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or an int ≥ 1, got {batch_size!r}")
    if not any(options.shuffle is choice for choice in SHUFFLE_CHOICES):
        raise ValueError(f"shuffle must be None, True or False, got {options.shuffle!r}")
    for name, value in (("dropped_by_design", options.dropped_by_design),
                        ("repeated_by_design", options.repeated_by_design)):
        if value is not None:
            design_value(value, name)
    expected = options.expected
    if expected is None:
        return
    if is_int(expected):
        if expected < 0:
            raise ValueError(f"expected must be an int N ≥ 0 or a sequence of ids, "
                             f"got {expected}")
        if not options.counted:
            expected_fits(int(expected))
        return
    if isinstance(expected, range):
        if expected.step != 1 or expected.start < 0 or len(expected) == 0:
            raise ValueError(f"expected as a range must count up by 1 from an id ≥ 0 and hold "
                             f"at least one id, got {expected!r}")
        return
    if isinstance(expected, list | tuple) and expected and all(isinstance(v, str)
                                                               for v in expected):
        if len(set(expected)) != len(expected):
            raise ValueError("expected holds the same string id twice, e.g. "
                             f"{next(v for v in expected if expected.count(v) > 1)!r}")
        return  # string ids, hashed when the audit reads them
    check_exactly_once([], expected)  # validates a sequence of ids


def expected_fits(n: int) -> None:
    """ValueError when checking ids 0..n-1 needs more memory than this machine has free."""
    import psutil

    need = BYTES_PER_EXPECTED_ID * (n + 1)
    free = psutil.virtual_memory().available
    if need > free:
        raise ValueError(
            f"expected={n} is too large to hold: checking ids 0..{n - 1} needs about "
            f"{_bytes(need)} of memory, and {_bytes(free)} is free here. Pass the number of "
            "samples one epoch really holds")


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def _check_sendable(obj, name: str) -> None:
    main = sys.modules.get("__main__")
    interactive = main is not None and not hasattr(main, "__file__")
    target = getattr(obj, "func", obj)
    if interactive and getattr(target, "__module__", None) == "__main__":
        raise TypeError(
            f"{name}={getattr(target, '__qualname__', target)!r} is defined in an ordinary "
            "notebook cell, so the rank processes cannot import it. Start that cell with "
            "%%importable, define it in a module and import it, or pass in_process=True "
            "for a pure simulation."
        )
    try:
        pickle.dumps(obj)
    except Exception as exc:
        raise TypeError(
            f"{name} cannot be pickled, so it cannot be sent to the rank processes "
            f"({type(exc).__name__}: {exc}). Use a module-level function or a "
            "functools.partial of one, or pass in_process=True for a pure simulation."
        ) from None

