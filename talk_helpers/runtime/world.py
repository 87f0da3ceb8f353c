"""A real ``torch.distributed`` world on loopback, started from a notebook or a test.

``run_world(fn, world_size)`` starts ``world_size`` processes, gives each a gloo process
group on 127.0.0.1, calls ``fn(rank, world_size, *args)`` in every rank and returns a
:class:`WorldReport`: what each rank returned, or which rank failed, with what error and
how far it got. ``run_ranks`` is the same call for code that wants the results or an
exception (:class:`WorldFailed`).

What the world guarantees:

* **No port collisions.** Rank 0 opens the rendezvous store on a port the operating
  system picks (port 0) and hands it to the other ranks, so two calls running at the
  same time never share a port. The parent hosts no store: forking it (start method
  fork) never copies a store server busy with another world's ranks.
* **A deadline.** A collective that one rank never joins fails after
  ``collective_timeout_s`` (gloo's own timeout); the whole world is stopped after
  ``timeout_s`` whatever happens. When a rank raises, the other ranks get a short grace
  period (to report their own error) and are then stopped.
* **No orphans.** Stopping a rank kills its whole process tree, DataLoader workers
  included. Ranks are not daemonic, so they may start DataLoader workers.
* **Deterministic reports.** Process ids and ports never appear in the repr, so a stored
  notebook output is the same on every run.

Start method: ``start_method`` if given, else ``TALK_START_METHOD`` (see
:mod:`talk_helpers.runtime.start_method`), else multiprocessing's current default (fork on Linux
before Python 3.14), the same rule DataLoader workers follow in these notebooks. All
three work from a Jupyter kernel. Under spawn and forkserver, ``fn`` and ``args`` are
pickled, so ``fn`` must be importable: a module-level function in a module or in an
``%%importable`` cell (:mod:`talk_helpers.notebook.cells`), or a ``functools.partial`` of
one; never a function defined in an ordinary notebook cell. The same rule
is enforced under fork, so that a notebook behaves the same under every start method.

What a world costs to start: fork a fraction of a second (the parent imports
torch._dynamo once, which DistributedDataParallel would import in every rank); forkserver
as little, because the server preloads torch (``start_method.FORKSERVER_PRELOAD``), but
each rank then starts a server of its own for its DataLoader workers, a second of CPU;
spawn a new interpreter and ``import torch`` per rank, seconds. So under spawn and
forkserver the ranks of a call are kept as a *warm world* for the next call with the same
world size (``reuse=``, ``TALK_WARM_WORLD``; see :mod:`talk_helpers.runtime.warm`): still
processes started with that method, with a fresh process group and fresh DataLoader
workers every call (but for the one loader a rank keeps between calls, see
``warm.kept_loader``); a rank that hangs or dies stops them all. ``report.how``
says which it was.

Each rank runs with ``torch.set_num_threads(1)`` (ranks share a laptop's cores) and with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` set, as torchrun would set them.
"""

from __future__ import annotations

import os
import pickle
import sys
import time

import psutil
import torch.multiprocessing as mp

from talk_helpers.arguments import require_int, require_seconds
from talk_helpers.runtime import rank_entry, warm
from talk_helpers.runtime.in_rank import current_rank, report_progress
from talk_helpers.runtime.processes import (
    close_queues,
    handles_of,
    kill_tree,
    rank_context,
    stop_processes,
)
from talk_helpers.runtime.report import RankOutcome, WorldFailed, WorldReport
from talk_helpers.runtime.start_method import START_METHODS, requested_start_method
from talk_helpers.runtime.supervise import Watch, supervise

EXIT_GRACE_S = 5.0  # after every rank reported, how long each may take to exit cleanly


__all__ = [
    "RankOutcome",
    "WorldFailed",
    "WorldReport",
    "current_rank",
    "report_progress",
    "run_ranks",
    "run_world",
    "shutdown_warm_worlds",
    "warm_worlds",
]


def _resolve_start_method(start_method: str | None) -> str:
    method = start_method or requested_start_method() or mp.get_start_method()
    if method not in START_METHODS:
        raise ValueError(
            f"start_method={method!r} is not one of {', '.join(START_METHODS)}"
        )
    return method


def _pickle_call(fn, args) -> bytes:
    """``(fn, args)`` pickled for the ranks, or a TypeError naming what cannot be."""
    main = sys.modules.get("__main__")
    interactive = main is not None and not hasattr(main, "__file__")
    for what, obj in (("fn", fn), *((f"args[{i}]", a) for i, a in enumerate(args))):
        target = getattr(obj, "func", obj)  # functools.partial
        if interactive and getattr(target, "__module__", None) == "__main__" \
                and callable(target):
            raise TypeError(
                f"{what}={getattr(target, '__qualname__', target)!r} is defined in an "
                "ordinary notebook cell, so a rank started with spawn or forkserver cannot "
                "import it. Start that cell with %%importable (after setup_notebook()), or "
                "define it in a module and import it."
            )
        try:
            pickle.dumps(obj)
        except Exception as exc:
            raise TypeError(
                f"{what} cannot be pickled, so it cannot be sent to the rank processes "
                f"({type(exc).__name__}: {exc}). Use a module-level function (or a "
                "functools.partial of one) and picklable arguments."
            ) from None
    return pickle.dumps((fn, args))


def _validate(fn, world_size, args, timeout_s, collective_timeout_s) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be callable as fn(rank, world_size, *args), got {fn!r}")
    require_int("world_size", world_size, minimum=1)
    if not isinstance(args, tuple):
        raise TypeError(f"args must be a tuple, got {type(args).__name__}")
    require_seconds("timeout_s", timeout_s)
    require_seconds("collective_timeout_s", collective_timeout_s)


WARM_ENV_VAR = "TALK_WARM_WORLD"


WARM_BY_DEFAULT = ("forkserver", "spawn")  # start methods whose worlds are kept warm


def run_world(fn, world_size: int, *, args: tuple = (), timeout_s: float = 60.0,
              collective_timeout_s: float = 10.0, start_method: str | None = None,
              reuse: bool | None = None, preload_ddp: bool = True) -> WorldReport:
    """Run ``fn(rank, world_size, *args)`` in a real gloo world; never raises for rank failures.

    Args:
        fn: a picklable callable (a module-level function, one from an %%importable cell,
            or a functools.partial of one).
        world_size: number of rank processes, at least 1.
        args: extra positional arguments for ``fn`` (picklable).
        timeout_s: the deadline for the whole world, start-up included; ranks still
            running then are killed and reported as ``"timeout"``.
        collective_timeout_s: gloo's timeout for one collective (a rank waiting for a
            peer that never joins raises after this long).
        start_method: "fork", "forkserver" or "spawn"; default ``TALK_START_METHOD``, else
            multiprocessing's current default.
        reuse: run in a warm world (rank processes started earlier with the same start
            method and kept for the next call, see :mod:`talk_helpers.runtime.warm`) instead
            of starting ranks for this call. Default: ``TALK_WARM_WORLD`` if set (0 or 1),
            else True under spawn and forkserver, where starting ranks (or their
            workers' server) costs seconds.
        preload_ddp: import what DistributedDataParallel needs (``rank_entry.WARM_IMPORTS``)
            before the ranks start, once: in this process under fork, in the server under
            forkserver (if this call starts it). False for a world that never wraps a
            model (the audit): it saves a second of start-up.

    Returns:
        a :class:`WorldReport` (``.ok``, ``.results``, ``.ranks``, ``.elapsed_s``,
        ``.start_method``, ``.warm``).
    """
    _validate(fn, world_size, args, timeout_s, collective_timeout_s)
    if not isinstance(preload_ddp, bool):
        raise TypeError(f"preload_ddp must be True or False, got {preload_ddp!r}")
    method = _resolve_start_method(start_method)
    reuse = _resolve_reuse(reuse, method)
    payload = _pickle_call(fn, args)
    if reuse:
        return warm.run_warm(fn, world_size, args=args, timeout_s=timeout_s,
                                   collective_timeout_s=collective_timeout_s,
                                   start_method=method, preload_ddp=preload_ddp)
    ctx = rank_context(method, preload_ddp)
    started = time.monotonic()
    port_queue = ctx.Queue()
    result_queue = ctx.Queue()
    procs = []
    watch = Watch(world_size)
    try:
        for rank in range(world_size):
            p = ctx.Process(
                target=rank_entry.entry_point(method),
                args=("talk_helpers.runtime.in_rank:fresh_rank_main", rank, world_size, port_queue,
                      payload, (), result_queue, collective_timeout_s, timeout_s, os.getpid()),
                name=f"rank-{rank}",
                daemon=False,
            )
            p.start()
            procs.append(p)
        handles = handles_of(procs)
        known = supervise(procs, handles, result_queue, watch, started + timeout_s)
        # After a success the ranks get a moment to exit by themselves, then are killed.
        # After a failure nothing is left to wait for (a rank may be waiting for a peer
        # that is gone): they are killed at once.
        failed = watch.stopped_by is not None or not all(o.ok for o in watch.outcomes.values())
        exit_deadline = time.monotonic() + (0.0 if failed else EXIT_GRACE_S)
        for p in procs:
            p.join(max(0.0, exit_deadline - time.monotonic()))
        leftovers = [h for h in handles.values() if h is not None and h.is_running()
                     and h.status() != psutil.STATUS_ZOMBIE]
        kill_tree(leftovers, known=list(known.values()))
    finally:
        stop_processes(procs)
        close_queues(result_queue, port_queue)
    return watch.report(time.monotonic() - started, method, warm=False)


def _resolve_reuse(reuse: bool | None, method: str) -> bool:
    if reuse is None:
        value = os.environ.get(WARM_ENV_VAR, "").strip()
        if value not in ("", "0", "1"):
            raise ValueError(f"{WARM_ENV_VAR}={value!r} is not one of 0, 1")
        return value == "1" if value else method in WARM_BY_DEFAULT
    if not isinstance(reuse, bool):
        raise TypeError(f"reuse must be True, False or None, got {reuse!r}")
    return reuse


def run_ranks(fn, world_size: int, *, args: tuple = (), timeout_s: float = 60.0,
              collective_timeout_s: float = 10.0, start_method: str | None = None,
              reuse: bool | None = None, preload_ddp: bool = True) -> list:
    """Like :func:`run_world`, but return the results by rank or raise :class:`WorldFailed`."""
    report = run_world(fn, world_size, args=args, timeout_s=timeout_s,
                       collective_timeout_s=collective_timeout_s, start_method=start_method,
                       reuse=reuse, preload_ddp=preload_ddp)
    if not report.ok:
        raise WorldFailed(report)
    return report.results


def warm_worlds() -> list[dict]:
    """The warm worlds kept for reuse: start method, world size, calls served so far."""
    return warm.warm_worlds()


def shutdown_warm_worlds() -> int:
    """Stop every warm world now (they also stop when the kernel exits); return how many."""
    return warm.shutdown_warm_worlds()
