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
:mod:`talk_helpers.start_method`), else multiprocessing's current default (fork on Linux
before Python 3.14), the same rule DataLoader workers follow in these notebooks. All
three work from a Jupyter kernel. Under spawn and forkserver, ``fn`` and ``args`` are
pickled, so ``fn`` must be importable: a module-level function in ``talk_helpers`` or a
``functools.partial`` of one, never a function defined in a notebook cell. The same rule
is enforced under fork, so that a notebook behaves the same under every start method.

What a world costs to start: fork a fraction of a second (the parent imports
torch._dynamo once, which DistributedDataParallel would import in every rank); forkserver
as little, because the server preloads torch (``start_method.FORKSERVER_PRELOAD``), but
each rank then starts a server of its own for its DataLoader workers, a second of CPU;
spawn a new interpreter and ``import torch`` per rank, seconds. So under spawn and
forkserver the ranks of a call are kept as a *warm world* for the next call with the same
world size (``reuse=``, ``TALK_WARM_WORLD``; see :mod:`talk_helpers.world_pool`): still
processes started with that method, with a fresh process group and fresh DataLoader
workers every call (but for the one loader a rank keeps between calls, see
``world_pool.kept_loader``); a rank that hangs or dies stops them all. ``report.how``
says which it was.

Each rank runs with ``torch.set_num_threads(1)`` (ranks share a laptop's cores) and with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` set, as torchrun would set them.
"""

from __future__ import annotations

import html
import os
import pickle
import queue as queue_module
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from talk_helpers import rank_entry
from talk_helpers.start_method import (
    FORKSERVER_PRELOAD,
    RANK_FORKSERVER_PRELOAD,
    START_METHODS,
    requested_start_method,
)

HOST = "127.0.0.1"
# After a rank raises, how long the others may take to report. A peer blocked in a
# collective with it fails within milliseconds (its connection closes: 10-25 ms here under
# every start method, also with three busy processes on two cores); one that is busy
# elsewhere (the hang lessons) would not report for minutes, and the cell waits this long.
ERROR_GRACE_S = 0.25
EXIT_GRACE_S = 5.0  # after every rank reported, how long each may take to exit cleanly
SILENT_DEATH_GRACE_S = 1.0  # a dead rank's last message may still be in the pipe
INTERRUPT_GRACE_S = 0.5  # a warm rank told to stop its call has this long to report
STATUSES = ("ok", "error", "timeout", "stopped")
DETAIL_WIDTH = 70  # longer errors are cut in the table and printed in full below it

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


# --------------------------------------------------------------------------- reports


@dataclass
class RankOutcome:
    """What happened in one rank.

    ``status`` is ``"ok"`` (fn returned), ``"error"`` (fn raised or the process died),
    ``"timeout"`` (still running at the deadline) or ``"stopped"`` (still running when
    another rank's failure stopped the world: killed, or a warm rank interrupted).
    """

    rank: int
    status: str
    result: Any = None
    error: str | None = None  # "ExceptionType: message", ports and pids masked
    traceback: str | None = None  # the last frames, for reading, not for comparing
    last_progress: str | None = None  # the last report_progress text
    elapsed_s: float | None = None  # time spent in fn (None when never finished)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def error_type(self) -> str | None:
        if self.error is None:
            return None
        return self.error.split(":", 1)[0]


@dataclass
class WorldReport:
    """The outcome of :func:`run_world`: one :class:`RankOutcome` per rank."""

    world_size: int
    ranks: list[RankOutcome]
    elapsed_s: float
    stopped_by: str | None = None  # None, "error" or "deadline"
    start_method: str = field(default="", repr=False)  # how the ranks were started
    warm: bool = field(default=False, repr=False)  # ranks kept from an earlier call

    @property
    def how(self) -> str:
        """How the ranks were started, e.g. ``"spawn, warm world"`` (not in the repr, which
        must read the same under every start method)."""
        return f"{self.start_method}, {'warm' if self.warm else 'fresh'} world"

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    @property
    def results(self) -> list[Any]:
        """Each rank's return value, by rank (None for a rank that did not finish)."""
        return [r.result for r in self.ranks]

    @property
    def errors(self) -> dict[int, str]:
        return {r.rank: r.error for r in self.ranks if r.error is not None}

    @property
    def failed_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if not r.ok]

    def headline(self) -> str:
        n = self.world_size
        noun = "rank" if n == 1 else "ranks"
        if self.ok:
            verdict = f"✔ world of {n} {noun}: every rank finished"
        else:
            counts = {s: sum(r.status == s for r in self.ranks) for s in STATUSES}
            parts = [f"{counts[s]} {s}" for s in STATUSES if counts[s]]
            if self.stopped_by == "deadline":
                why = "stopped at the deadline"
            elif self.stopped_by == "error":
                why = "stopped after an error"
            else:
                why = "failed"
            verdict = f"✘ world of {n} {noun} {why} ({', '.join(parts)})"
        return f"{verdict} · {self.elapsed_s:.1f} s"

    def _rows(self) -> list[tuple[str, str, str, str]]:
        rows = []
        for r in self.ranks:
            if r.status == "ok":
                detail = _short(repr(r.result), 60)
            elif r.error is not None:
                detail = _short(r.error, DETAIL_WIDTH)
            elif r.status == "timeout":
                detail = "still running at the deadline"
            elif r.status == "stopped":
                detail = "stopped because another rank failed"
            else:
                detail = ""
            progress = "-" if r.last_progress is None else _short(r.last_progress, 40)
            rows.append((str(r.rank), r.status, progress, detail))
        return rows

    def __repr__(self) -> str:
        head = ("rank", "status", "last progress", "result" if self.ok else "result or error")
        rows = [head, *self._rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [self.headline()]
        for row in rows:
            cells = [row[i].ljust(widths[i]) for i in range(3)]
            lines.append(("  ".join([*cells, row[3]])).rstrip())
        for r in self.ranks:  # errors cut short in the table, in full below it
            if r.error is not None and len(" ".join(r.error.split())) > DETAIL_WIDTH:
                lines.append(f"rank {r.rank}: {_short(r.error, 400)}")
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        colour = {"ok": "#009E73", "error": "#D55E00", "timeout": "#E69F00",
                  "stopped": "#CC79A7"}
        body = []
        for rank, status, progress, detail in self._rows():
            body.append(
                "<tr>"
                f"<td>{rank}</td>"
                f"<td style='color:{colour.get(status, '#000')};font-weight:bold'>"
                f"{html.escape(status)}</td>"
                f"<td>{html.escape(progress)}</td>"
                f"<td style='text-align:left'><code>{html.escape(detail)}</code></td>"
                "</tr>"
            )
        last = "result" if self.ok else "result or error"
        return (
            f"<div><b>{html.escape(self.headline())}</b>"
            "<table><thead><tr><th>rank</th><th>status</th><th>last progress</th>"
            f"<th style='text-align:left'>{last}</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )


class WorldFailed(RuntimeError):
    """Raised by :func:`run_ranks` when a rank failed; ``.report`` is the WorldReport."""

    def __init__(self, report: WorldReport):
        self.report = report
        super().__init__(repr(report))


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_MASKS = (
    (re.compile(r"\[[^\]]*third_party/gloo/[^\]]*\]\s*"), "gloo: "),
    (re.compile(r"\[?(127\.0\.0\.1|localhost|::1|0\.0\.0\.0)\]?:\d+"), r"\1:<PORT>"),
    (re.compile(r"\b(pid|PID|process)([ =:]+)\d+"), r"\1\2<PID>"),
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "0x<ADDR>"),
)


def mask_volatile(text: str) -> str:
    """Replace ports, process ids and addresses so that an error reads the same every run."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


# ------------------------------------------------------------------ inside a rank

_world: dict[str, Any] = {}  # set in a rank process: rank, queue


def report_progress(text: str) -> None:
    """Record how far this rank got; shown in the report if the rank fails or hangs.

    Call it from ``fn`` (e.g. ``report_progress(f"step {i}")``). Outside a world made by
    :func:`run_world` it does nothing, so the same function also runs in-process.
    """
    q = _world.get("queue")
    if q is None:
        return
    text = str(text)
    _world["last_progress"] = text
    try:
        _send("progress", text)
    except Exception:  # a closed queue must never break the training loop
        pass


def _stage(text: str | None) -> None:
    """Where the set-up of this rank is (None once fn runs): shown if the rank never
    reaches fn."""
    try:
        _send("stage", text)
    except Exception:
        pass


def current_rank() -> int | None:
    """This process's rank inside :func:`run_world`, or None outside a world."""
    return _world.get("rank")


def _watch_caller(caller_pid: int) -> None:
    """Exit this rank (and its workers) if the process that started the world is gone."""
    while True:
        time.sleep(1.0)
        if not psutil.pid_exists(caller_pid):
            _kill_tree([psutil.Process()], include_roots=False)
            os._exit(70)


def _send(kind: str, *payload) -> None:
    """Put one message for the parent on the result queue, tagged with this call's id."""
    _world["queue"].put((_world.get("call", 0), kind, _world["rank"], *payload))


def _rank_setup(rank, result_queue, caller_pid) -> None:
    """What every rank process does once, before its first call."""
    _world.update(rank=rank, queue=result_queue, last_progress=None, call=0)
    threading.Thread(target=_watch_caller, args=(caller_pid,), daemon=True).start()
    torch.set_num_threads(1)
    if mp.get_start_method(allow_none=True) == "forkserver":
        # A forkserver child does not share its parent's server: the rank's DataLoader
        # workers come from a server of the rank's own, started at the rank's first
        # loader. Preloaded with torch, it forks each worker in hundredths of a second.
        mp.set_forkserver_preload(list(RANK_FORKSERVER_PRELOAD))


def _rank_main(rank, world_size, port_queue, fn, args, result_queue, collective_timeout_s,
               rendezvous_timeout_s, caller_pid):
    """A fresh rank process (started by rank_entry.start): set up, run fn once, exit."""
    started = time.monotonic()
    _rank_setup(rank, result_queue, caller_pid)
    _run_call(rank, world_size, port_queue, fn, args, collective_timeout_s,
              rendezvous_timeout_s, started)


def _run_call(rank, world_size, port_queue, fn, args, collective_timeout_s,
              rendezvous_timeout_s, started) -> bool:
    """One call of fn in a fresh gloo process group; the outcome goes to the parent.
    Returns whether fn returned (and its result could be sent)."""
    call = _world.get("call", 0)
    rendezvous = timedelta(seconds=rendezvous_timeout_s)
    store = None
    message: tuple
    try:
        if isinstance(fn, bytes):  # fn and args arrive pickled
            # Unpickled before the ranks synchronise: the imports fn's module makes (DDP's
            # torch._dynamo in talk_helpers.training, seconds under spawn) are never
            # mistaken for a rank stuck in a collective. They stay loaded for the rank's
            # life, so they load as the rank's own code does (rank_entry.loading).
            _stage("importing")
            with rank_entry.loading():
                fn, args = pickle.loads(fn)
        # Rank 0 hosts the rendezvous store on a port the OS picks and hands it to the
        # others; the parent hosts nothing, so a fork never copies a busy store server.
        if rank == 0:
            _stage("opening the rendezvous store")
            store = dist.TCPStore(HOST, 0, world_size=None, is_master=True,
                                  timeout=rendezvous, wait_for_workers=False)
            port = store.port
            for _ in range(world_size - 1):
                port_queue.put((call, port))
        else:
            _stage("waiting for rank 0's rendezvous port")
            port_deadline = time.monotonic() + rendezvous_timeout_s
            while True:  # a port left over from an earlier call is skipped
                port_call, port = port_queue.get(
                    timeout=max(0.01, port_deadline - time.monotonic()))
                if port_call == call:
                    break
            _stage("connecting to the rendezvous store")
            store = dist.TCPStore(HOST, port, world_size=None, is_master=False,
                                  timeout=rendezvous)
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world_size),
            MASTER_ADDR=HOST,
            MASTER_PORT=str(port),
        )
        # Every rank is up before the process group starts, so a slow start under spawn
        # is not mistaken for a collective timeout.
        _stage("waiting for the other ranks to start")
        store.set(f"up/{rank}", "1")
        store.wait([f"up/{r}" for r in range(world_size)], rendezvous)
        _stage("joining the gloo process group")
        # Connecting the full mesh may take long on a busy machine: it gets the start-up
        # allowance; the collectives then get the short timeout.
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=rendezvous)
        dist.distributed_c10d._set_pg_timeout(timedelta(seconds=collective_timeout_s))
        _stage(None)
        _world["interruptible"] = True  # a warm rank may be told to stop here (SIGUSR1)
        try:
            result = fn(rank, world_size, *args)
        finally:
            _world["interruptible"] = False
        elapsed = time.monotonic() - started
        try:
            payload = pickle.dumps(result)
            message = ("ok", payload, elapsed)
        except Exception as exc:
            message = ("error", f"{type(exc).__name__}: the result of fn cannot be "
                       f"sent back to the parent ({exc})", "", elapsed)
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        elapsed = time.monotonic() - started
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:])
        message = ("error", f"{type(exc).__name__}: {exc}", tb, elapsed)
    _send(*message)
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
    if store is not None:
        # The store lives in rank 0: it stays up until every rank is done with it.
        try:
            store.set(f"done/{rank}", "1")
            if rank == 0:
                store.wait([f"done/{r}" for r in range(world_size)], rendezvous)
        except Exception:
            pass
    return message[0] == "ok"


# ------------------------------------------------------------------ in the parent


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
                f"{what}={getattr(target, '__qualname__', target)!r} is defined in the "
                "notebook, so a rank started with spawn or forkserver cannot import it. "
                "Define it in a module (e.g. in talk_helpers) and import it."
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
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not isinstance(args, tuple):
        raise TypeError(f"args must be a tuple, got {type(args).__name__}")
    for name, value in (("timeout_s", timeout_s), ("collective_timeout_s",
                                                   collective_timeout_s)):
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


def _descendants(procs) -> list[psutil.Process]:
    found = []
    for p in procs:
        try:
            found.extend(p.children(recursive=True))
        except psutil.Error:
            pass
    return found


def _kill_tree(roots, include_roots: bool = True, known=(), spare=frozenset()) -> None:
    """SIGKILL roots and all their descendants (but the pids in ``spare``); stop roots
    first so they cannot fork."""
    roots = [r for r in roots if r is not None]
    for r in roots:
        if include_roots:
            try:
                r.suspend()
            except psutil.Error:
                pass
    victims = {}
    for p in [*known, *_descendants(roots), *(roots if include_roots else [])]:
        if p.pid not in spare:
            victims[p.pid] = p
    for p in victims.values():
        try:
            if p.is_running():  # also guards against a reused pid
                p.kill()
        except psutil.Error:
            pass
    _wait_gone(list(victims.values()), timeout_s=3.0)


def _wait_gone(procs, timeout_s: float) -> None:
    """Wait until every process has exited (a zombie counts as gone), at most timeout_s."""
    deadline = time.monotonic() + timeout_s
    pending = list(procs)
    while pending and time.monotonic() < deadline:
        still = []
        for p in pending:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    still.append(p)
            except psutil.Error:
                pass
        pending = still
        if pending:
            time.sleep(0.01)


# DistributedDataParallel imports torch._dynamo when it wraps its first model: seconds
# in every rank, long enough for a peer to hit the collective timeout. Forked ranks
# inherit it from the parent, forkserver ranks from the server's preload; spawned ranks
# import it only for a function that needs it, before they synchronise (its module
# imports it, as talk_helpers.training does) or before it starts its loader (load_ddp):
# a world that only reads data does not pay for it.
WARM_IMPORTS = ("torch._dynamo",)
WARM_ENV_VAR = "TALK_WARM_WORLD"
WARM_BY_DEFAULT = ("forkserver", "spawn")  # start methods whose worlds are kept warm


def _warm_imports() -> None:
    import importlib

    for name in WARM_IMPORTS:
        if name not in sys.modules:
            importlib.import_module(name)


def load_ddp() -> None:
    """In a rank whose ``fn`` wraps a model but whose module leaves DDP's imports to it (so
    that the kernel need not load them): load :data:`WARM_IMPORTS` now, as the rank's own
    code loads (:func:`talk_helpers.rank_entry.loading`): under spawn a third less CPU
    than DistributedDataParallel's own import of them, and never walked again by the
    garbage collector."""
    with rank_entry.loading():
        _warm_imports()


def run_world(fn, world_size: int, *, args: tuple = (), timeout_s: float = 60.0,
              collective_timeout_s: float = 10.0, start_method: str | None = None,
              reuse: bool | None = None, preload_ddp: bool = True) -> WorldReport:
    """Run ``fn(rank, world_size, *args)`` in a real gloo world; never raises for rank failures.

    Args:
        fn: a picklable callable (module-level function or functools.partial of one).
        world_size: number of rank processes, at least 1.
        args: extra positional arguments for ``fn`` (picklable).
        timeout_s: the deadline for the whole world, start-up included; ranks still
            running then are killed and reported as ``"timeout"``.
        collective_timeout_s: gloo's timeout for one collective (a rank waiting for a
            peer that never joins raises after this long).
        start_method: "fork", "forkserver" or "spawn"; default ``TALK_START_METHOD``, else
            multiprocessing's current default.
        reuse: run in a warm world (rank processes started earlier with the same start
            method and kept for the next call, see :mod:`talk_helpers.world_pool`) instead
            of starting ranks for this call. Default: ``TALK_WARM_WORLD`` if set (0 or 1),
            else True under spawn and forkserver, where starting ranks (or their
            workers' server) costs seconds.
        preload_ddp: import what DistributedDataParallel needs (:data:`WARM_IMPORTS`)
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
        from talk_helpers import world_pool

        return world_pool.run_warm(fn, world_size, args=args, timeout_s=timeout_s,
                                   collective_timeout_s=collective_timeout_s,
                                   start_method=method, preload_ddp=preload_ddp)
    ctx = _context(method, preload_ddp)
    started = time.monotonic()
    port_queue = ctx.Queue()
    result_queue = ctx.Queue()
    procs = []
    watch = _Watch(world_size)
    try:
        for rank in range(world_size):
            p = ctx.Process(
                target=rank_entry.entry_point(method),
                args=("talk_helpers.distributed:_rank_main", rank, world_size, port_queue,
                      payload, (), result_queue, collective_timeout_s, timeout_s, os.getpid()),
                name=f"rank-{rank}",
                daemon=False,
            )
            p.start()
            procs.append(p)
        handles = _handles(procs)
        known = _supervise(procs, handles, result_queue, watch, started + timeout_s)
        # After a success the ranks get a moment to exit by themselves, then are killed.
        # After a failure nothing is left to wait for (a rank may be waiting for a peer
        # that is gone): they are killed at once.
        failed = watch.stopped_by is not None or not all(o.ok for o in watch.outcomes.values())
        exit_deadline = time.monotonic() + (0.0 if failed else EXIT_GRACE_S)
        for p in procs:
            p.join(max(0.0, exit_deadline - time.monotonic()))
        leftovers = [h for h in handles.values() if h is not None and h.is_running()
                     and h.status() != psutil.STATUS_ZOMBIE]
        _kill_tree(leftovers, known=list(known.values()))
    finally:
        _stop_processes(procs)
        _close_queues(result_queue, port_queue)
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


def _context(method: str, preload_ddp: bool = True):
    """The multiprocessing context for ranks, with the imports the ranks need warm."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        # The server forks every rank from one process: with torch already imported
        # there, a rank starts in a fraction of a second instead of importing torch again.
        # (Effective only if the server is not running yet: setup_notebook starts it
        # with the full list.)
        ctx.set_forkserver_preload([name for name in FORKSERVER_PRELOAD
                                    if preload_ddp or name not in WARM_IMPORTS])
    elif method == "fork" and preload_ddp:
        _warm_imports()
    return ctx


def _handles(procs) -> dict[int, psutil.Process | None]:
    handles = {}
    for rank, p in enumerate(procs):
        try:
            handles[rank] = psutil.Process(p.pid)
        except psutil.Error:
            handles[rank] = None
    return handles


def _stop_processes(procs) -> None:
    for p in procs:
        if p.is_alive():
            try:
                _kill_tree([psutil.Process(p.pid)])
            except psutil.Error:
                pass
        p.join(1.0)


def _close_queues(*queues) -> None:
    for q in queues:
        q.close()
        q.cancel_join_thread()


@dataclass
class _Watch:
    """What the parent has heard from the ranks during one call."""

    world_size: int
    call: int = 0
    outcomes: dict[int, RankOutcome] = field(default_factory=dict)
    progress: dict[int, str] = field(default_factory=dict)
    stages: dict[int, str | None] = field(default_factory=dict)
    idle: set[int] = field(default_factory=set)
    stopped_by: str | None = None

    def drain(self, result_queue, wait: float) -> None:
        block = wait > 0
        while True:
            try:
                message = result_queue.get(block, wait) if block else result_queue.get_nowait()
            except (queue_module.Empty, EOFError, OSError):
                return
            block = False
            call, kind, rank = message[:3]
            if call != self.call and not (call == 0 and kind == "stage"):
                continue  # left over from an earlier call of a warm world
            if kind == "progress":
                self.progress[rank] = message[3]
            elif kind == "stage":
                self.stages[rank] = message[3]
            elif kind == "idle":
                self.idle.add(rank)
            elif kind == "ok":
                _, _, _, payload, elapsed = message
                self.outcomes[rank] = RankOutcome(
                    rank, "ok", result=pickle.loads(payload),
                    last_progress=self.progress.get(rank), elapsed_s=elapsed)
            elif kind == "error":
                _, _, _, error, tb, elapsed = message
                self.outcomes[rank] = RankOutcome(
                    rank, "error", error=mask_volatile(error), traceback=tb,
                    last_progress=self.progress.get(rank), elapsed_s=elapsed)

    def report(self, elapsed_s: float, method: str, warm: bool) -> WorldReport:
        for rank, outcome in self.outcomes.items():
            if outcome.last_progress is None:
                outcome.last_progress = self.progress.get(rank)
            if not outcome.ok and outcome.last_progress is None:
                stage = self.stages.get(rank, "starting the process")
                if stage is not None:
                    outcome.last_progress = f"(set-up: {stage})"
        return WorldReport(
            world_size=self.world_size,
            ranks=[self.outcomes[r] for r in range(self.world_size)],
            elapsed_s=elapsed_s,
            stopped_by=self.stopped_by,
            start_method=method,
            warm=warm,
        )


def _supervise(procs, handles, result_queue, watch: _Watch, deadline: float,
               interrupt: bool = False) -> dict:
    """Collect every rank's outcome until all reported, one failed or the deadline passed.

    Ranks still running at the end (and their descendants) are killed and reported as
    "timeout" or "stopped". ``interrupt`` (warm ranks): after another rank's failure, the
    ranks still running are first told to stop their call (:func:`interrupt_call`), and
    only those that have not reported within :data:`INTERRUPT_GRACE_S` are killed.
    Returns the descendants seen, by pid.
    """
    world_size = len(procs)
    known: dict[int, psutil.Process] = {}  # descendants seen so far, by pid
    first_error_at = None
    dead_since: dict[int, float] = {}
    next_scan = 0.0
    outcomes = watch.outcomes
    while True:
        watch.drain(result_queue, wait=0.05)
        now = time.monotonic()
        if now >= next_scan:
            live = [h for r, h in handles.items() if h is not None and r not in outcomes]
            for child in _descendants(live):
                known.setdefault(child.pid, child)
            next_scan = now + 0.25
        for rank, p in enumerate(procs):
            if rank in outcomes or p.is_alive():
                continue
            since = dead_since.setdefault(rank, now)
            if now - since >= SILENT_DEATH_GRACE_S:
                outcomes[rank] = RankOutcome(
                    rank, "error",
                    error=f"ProcessDied: the rank process exited with code "
                          f"{p.exitcode} without reporting a result",
                )
        if first_error_at is None and any(o.status == "error" for o in outcomes.values()):
            first_error_at = now
        if len(outcomes) == world_size:
            break
        if first_error_at is not None and now >= first_error_at + ERROR_GRACE_S:
            watch.stopped_by = "error"
            break
        if now >= deadline:
            watch.stopped_by = "deadline"
            break
    running = [r for r in range(world_size) if r not in outcomes]
    interrupted = []
    if running and interrupt and watch.stopped_by == "error" and hasattr(signal, "SIGUSR1"):
        _interrupt(procs, running, result_queue, watch)
        interrupted = [r for r in running if r in outcomes]
    unreported = [r for r in running if r not in outcomes]
    if unreported:
        _kill_tree([handles[r] for r in unreported], known=list(known.values()))
        watch.drain(result_queue, wait=0.0)
    for rank in running:  # an interrupted rank's own report is not its outcome
        if rank not in outcomes or rank in interrupted:
            status = "timeout" if watch.stopped_by == "deadline" else "stopped"
            outcomes[rank] = RankOutcome(rank, status, last_progress=watch.progress.get(rank))
    return known


def _interrupt(procs, ranks, result_queue, watch: _Watch) -> None:
    """Tell warm ``ranks`` to stop their call; wait up to :data:`INTERRUPT_GRACE_S` for
    them to report it. A rank blocked inside a collective hears it only when that returns."""
    for rank in ranks:
        try:
            os.kill(procs[rank].pid, signal.SIGUSR1)
        except OSError:
            pass
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    while any(r not in watch.outcomes for r in ranks) and time.monotonic() < deadline:
        watch.drain(result_queue, wait=0.02)


class CallInterrupted(BaseException):
    """Raised in a warm rank whose call the parent stops after another rank failed (a
    BaseException, like KeyboardInterrupt, so that `except Exception` lets it through)."""


def interrupt_call(signum=None, frame=None) -> None:
    """SIGUSR1 handler of a warm rank: stop the running call, if one runs (else ignore)."""
    if _world.get("interruptible"):
        _world["interruptible"] = False  # at most once per call
        raise CallInterrupted("stopped because another rank failed")


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


# ------------------------------------------------- small rank functions for demos


def rank_and_world(rank: int, world_size: int) -> tuple[int, int]:
    """Return what this rank sees: ``(dist.get_rank(), dist.get_world_size())``."""
    return dist.get_rank(), dist.get_world_size()


def all_reduce_sum(rank: int, world_size: int, value: float | None = None) -> float:
    """All-reduce one number per rank (``rank + 1`` by default); every rank gets the sum."""
    t = torch.tensor([float(rank + 1 if value is None else value)])
    dist.all_reduce(t)
    return t.item()


def fail_on_rank(rank: int, world_size: int, bad_rank: int = 0,
                 message: str = "failed on purpose") -> int:
    """Raise ValueError(message) on ``bad_rank``; the other ranks wait in a barrier."""
    report_progress("before the barrier")
    if rank == bad_rank:
        raise ValueError(message)
    dist.barrier()
    return rank


def hang_on_rank(rank: int, world_size: int, stuck_rank: int = 0, steps: int = 3,
                 sleep_s: float = 3600.0) -> int:
    """Every rank all-reduces ``steps`` times, but ``stuck_rank`` sleeps before the last one."""
    for step in range(steps):
        report_progress(f"step {step}")
        if rank == stuck_rank and step == steps - 1:
            time.sleep(sleep_s)
        dist.all_reduce(torch.ones(1))
    return rank


def hang_with_workers(rank: int, world_size: int, num_workers: int = 2,
                      sleep_s: float = 3600.0) -> int:
    """Start a DataLoader with workers, take one batch, then sleep with the workers alive."""
    from torch.utils.data import DataLoader

    loader = DataLoader(list(range(64)), batch_size=4, num_workers=num_workers)
    it = iter(loader)
    next(it)
    report_progress(f"{num_workers} workers started")
    time.sleep(sleep_s)
    return rank


def rank_env(rank: int, world_size: int) -> dict[str, str]:
    """The torchrun-style variables this rank sees."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT")
    return {name: os.environ.get(name, "") for name in names}


# ------------------------------------------------------------------- warm worlds


def warm_worlds() -> list[dict]:
    """The warm worlds kept for reuse: start method, world size, calls served so far."""
    from talk_helpers import world_pool

    return world_pool.warm_worlds()


def shutdown_warm_worlds() -> int:
    """Stop every warm world now (they also stop when the kernel exits); return how many."""
    from talk_helpers import world_pool

    return world_pool.shutdown_warm_worlds()


def torch_draws(rank: int, world_size: int, n: int = 3, seed: int | None = None) -> list[float]:
    """``n`` draws from this rank's global torch RNG, seeded with ``seed`` if given."""
    if seed is not None:
        torch.manual_seed(seed)
    return torch.rand(n).tolist()


def process_id(rank: int, world_size: int) -> int:
    """This rank's process id (for tests of warm worlds; never shown in a notebook)."""
    return os.getpid()


def worker_start(rank: int, world_size: int) -> dict:
    """How this rank's DataLoader workers would start: method and forkserver preload."""
    from multiprocessing import forkserver

    method = mp.get_start_method()
    preload = forkserver._forkserver._preload_modules if method == "forkserver" else None
    return {"start_method": method, "forkserver_preload": preload}
