"""Warm worlds: rank processes started once and reused by later :func:`run_world` calls.

Under spawn a fresh world pays a new interpreter and ``import torch`` in every rank
(seconds) for a cell that runs for a fraction of a second; under forkserver every rank
starts a server of its own for its DataLoader workers, which imports torch too. A warm
world keeps its ranks (and under forkserver each rank's server) for the kernel's lifetime
and gives each call what a fresh world would give it:

* the **same start method**: the ranks were started with the method the learner chose
  (``report.start_method``, ``report.how``), and DataLoader workers they start are new
  processes, started with that method, on every call;
* a **fresh process group** per call (new rendezvous store on a new port, the call's
  collective timeout), ``torch``, ``random`` and ``numpy`` reseeded from the OS as in a
  new process (torch seeds itself randomly at start-up), and the environment restored;
* **nothing left behind**: after every call each rank kills whatever processes it still
  has (DataLoader workers included) before the call returns, with two exceptions: the
  rank's forkserver, which holds nothing of a call, and the workers of a loader built
  through :func:`kept_loader` (the toy sharded loader of notebook 06). A rank keeps
  that one loader, persistent workers and all, for the next call that asks for the same
  loader, as a training job keeps its loader's workers between epochs; any other loader,
  or a call that fails, stops it;
* **no reuse after trouble**: a call in which a rank hung, died, or did not come back
  clean (process group destroyed, workers stopped) within a second of raising stops the
  whole world (every rank's process tree); the next call starts a new one. A rank that
  raised and came back clean is like a new process for the next call, and is kept. So is
  a rank still busy when another raised (06's hang: it works on without a collective):
  it is told to stop its call (SIGUSR1 raises :class:`~talk_helpers.runtime.in_rank.
  CallInterrupted` there), and is killed only if it has not reported within half a
  second (a rank blocked inside a collective, say).

Limits: module-level state that ``fn`` changes (a global, a patched function) stays for
the next call, and a module edited on disk is not re-imported (an edited
``%%importable`` cell is a new module, so warm ranks do import it). Pass ``reuse=False`` to
:func:`run_world` (or set ``TALK_WARM_WORLD=0``) for a world started for one call.
"""

from __future__ import annotations

import atexit
import gc
import itertools
import os
import pickle
import random
import signal
import sys
import threading
import time
import warnings

import psutil
import torch

from talk_helpers.runtime import in_rank, rank_entry
from talk_helpers.runtime.processes import (
    close_queues,
    handles_of,
    kill_tree,
    rank_context,
    stop_processes,
)
from talk_helpers.runtime.report import WorldReport
from talk_helpers.runtime.supervise import Watch, supervise

MAX_WARM_RANKS = 8  # rank processes kept across all warm worlds
IDLE_GRACE_S = 5.0  # after every rank reported, how long each may take to clean up
FAILED_IDLE_GRACE_S = 1.0  # the same after a call in which a rank raised

_pool: dict[tuple[str, int], WarmWorld] = {}
_kept: dict = {}  # inside a warm rank: at most one loader, by its recipe
_in_warm_rank = False
_lock = threading.Lock()
_calls = itertools.count(1)


class WarmWorld:
    """``world_size`` rank processes started with ``method``, waiting for calls."""

    def __init__(self, method: str, world_size: int, preload_ddp: bool = True):
        self.method = method
        self.world_size = world_size
        self.calls = 0
        self.started_at = time.monotonic()
        ctx = rank_context(method, preload_ddp)
        self.port_queue = ctx.Queue()
        self.result_queue = ctx.Queue()
        self.task_queues = [ctx.SimpleQueue() for _ in range(world_size)]
        self.procs = []
        try:
            for rank in range(world_size):
                p = ctx.Process(
                    target=rank_entry.entry_point(method),
                    args=("talk_helpers.runtime.warm:_warm_rank_main", rank, world_size,
                          self.port_queue, self.task_queues[rank], self.result_queue,
                          os.getpid()),
                    name=f"warm-rank-{rank}",
                    daemon=False,
                )
                p.start()
                self.procs.append(p)
        except BaseException:
            self.close()
            raise
        self.handles = handles_of(self.procs)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def run(self, fn, args, timeout_s, collective_timeout_s) -> tuple[WorldReport, bool]:
        """One call; returns the report and whether the world may serve another call."""
        started = time.monotonic()
        watch = Watch(self.world_size, call=next(_calls))
        task = (watch.call, pickle.dumps((fn, args)), collective_timeout_s, timeout_s)
        for q in self.task_queues:
            q.put(task)
        supervise(self.procs, self.handles, self.result_queue, watch,
                     started + timeout_s, interrupt=True)
        healthy = False
        # Every rank reported, or a failure stopped the others' call: wait until each rank
        # is clean again (a rank that had to be killed ends the world).
        if watch.stopped_by in (None, "error"):
            ok = all(o.ok for o in watch.outcomes.values())
            idle_deadline = time.monotonic() + (IDLE_GRACE_S if ok else FAILED_IDLE_GRACE_S)
            while len(watch.idle) < self.world_size and time.monotonic() < idle_deadline \
                    and self.alive():
                watch.drain(self.result_queue, wait=0.05)
            healthy = len(watch.idle) == self.world_size and self.alive()
        self.calls += 1
        report = watch.report(time.monotonic() - started, self.method, warm=self.calls > 1)
        return report, healthy

    def close(self, graceful: bool = True) -> None:
        """Stop every rank and its processes; never leaves one behind. ``graceful``: ask
        idle ranks to exit first (up to a second), else kill them at once."""
        if graceful:
            for q in self.task_queues:
                try:
                    q.put(None)
                except Exception:
                    pass
            deadline = time.monotonic() + 1.0
            for p in self.procs:
                p.join(max(0.0, deadline - time.monotonic()))
        stop_processes(self.procs)
        close_queues(self.result_queue, self.port_queue)
        for q in self.task_queues:
            q.close()

    def describe(self) -> dict:
        return {"start_method": self.method, "world_size": self.world_size,
                "calls": self.calls, "alive": self.alive()}


def run_warm(fn, world_size: int, *, args: tuple, timeout_s: float,
             collective_timeout_s: float, start_method: str,
             preload_ddp: bool = True) -> WorldReport:
    """:func:`talk_helpers.runtime.world.run_world` in a warm world (started if needed)."""
    with _lock:
        world = _pool.pop((start_method, world_size), None)
    if world is not None and not world.alive():
        world.close()
        world = None
    started = time.monotonic()
    if world is None:
        world = WarmWorld(start_method, world_size, preload_ddp)
    try:
        report, healthy = world.run(fn, args, timeout_s - (time.monotonic() - started),
                                    collective_timeout_s)
    except BaseException:
        world.close(graceful=False)
        raise
    if healthy:
        _keep(world)
    else:  # a rank may still wait for a peer that is gone: nothing to wait for
        world.close(graceful=False)
    report.elapsed_s = time.monotonic() - started
    return report


def _keep(world: WarmWorld) -> None:
    evicted = []
    with _lock:
        key = (world.method, world.world_size)
        if key in _pool:  # another thread made one meanwhile: keep one
            evicted.append(_pool.pop(key))
        _pool[key] = world
        # Stopped when the kernel exits: registered once a world is kept, not at import.
        atexit.unregister(shutdown_warm_worlds)
        atexit.register(shutdown_warm_worlds)
        while sum(w.world_size for w in _pool.values()) > MAX_WARM_RANKS and len(_pool) > 1:
            oldest = min((k for k in _pool if k != key), key=lambda k: _pool[k].started_at)
            evicted.append(_pool.pop(oldest))
    for w in evicted:
        w.close()


def warm_worlds() -> list[dict]:
    with _lock:
        return [w.describe() for w in _pool.values()]


def shutdown_warm_worlds() -> int:
    with _lock:
        worlds = list(_pool.values())
        _pool.clear()
    for w in worlds:
        w.close()
    return len(worlds)




# ------------------------------------------------------------------ inside a rank


def _warm_rank_main(rank, world_size, port_queue, task_queue, result_queue, caller_pid):
    # The kernel owns a warm rank. An interrupt sent to its whole process group (Jupyter's
    # interrupt, a kernel shutdown) is for the cell: a call it cuts short stops the world
    # itself, and an idle world stays warm instead of dying with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # After another rank failed, the parent stops a call still running here with SIGUSR1
    # (a rank that lingers outside any collective, as in 06's hang) instead of killing
    # the rank: the world stays warm for the next cell.
    if hasattr(signal, "SIGUSR1"):  # not on Windows: there such a rank is killed
        signal.signal(signal.SIGUSR1, in_rank.interrupt_call)
    global _in_warm_rank
    _in_warm_rank = True
    in_rank.setup(rank, result_queue, caller_pid)
    environ = dict(os.environ)
    me = psutil.Process()
    while True:
        task = task_queue.get()
        if task is None:
            return
        call, payload, collective_timeout_s, rendezvous_timeout_s = task
        in_rank.state.update(call=call, last_progress=None)
        torch.seed()
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        ok = in_rank.run_call(rank, world_size, port_queue, payload, (), collective_timeout_s,
                         rendezvous_timeout_s, time.monotonic())
        if not ok:
            _drop_kept_loader()
        try:
            _stop_leftovers(me)
        except Exception:  # noqa: BLE001 - a worker dying now must not end the rank
            kill_tree([me], include_roots=False)
        os.environ.clear()
        os.environ.update(environ)
        in_rank.send("idle")


def kept_loader(key, build):
    """Inside a warm rank, the loader that ``build()`` made for the same ``key`` in an
    earlier call, its persistent workers still running (``build`` must ask for
    ``persistent_workers=True``); a new ``key`` stops the kept loader and keeps the new one.
    Anywhere else (a fresh rank, a test, the kernel): ``build()``, kept by nobody."""
    if not _in_warm_rank:
        return build()
    if key not in _kept:
        _drop_kept_loader()
        _kept[key] = build()
    return _kept[key]


def _drop_kept_loader() -> None:
    for loader in _kept.values():
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None:
            iterator._shutdown_workers()
    _kept.clear()


def _kept_worker_pids() -> set[int]:
    pids = set()
    for loader in _kept.values():
        iterator = getattr(loader, "_iterator", None)
        pids.update(w.pid for w in getattr(iterator, "_workers", ()) if w.is_alive())
    return pids


def _stop_leftovers(me: psutil.Process) -> None:
    """Stop what a call left running in this rank: DataLoader workers through their own
    shutdown (so the loader does not report them as crashed), anything else killed. The
    kept loader (:func:`kept_loader`) and its workers stay."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    gc.collect()  # an iterator nobody references shuts its workers down
    # Objects frozen before the call (rank_entry.loading: the rank's code) are not walked
    # here: none of them is one of the call's iterators.
    kept = {id(getattr(loader, "_iterator", None)) for loader in _kept.values()}
    with warnings.catch_warnings():  # isinstance on torch's deprecated aliases warns
        warnings.simplefilter("ignore", FutureWarning)
        iterators = [obj for obj in gc.get_objects()
                     if isinstance(obj, _MultiProcessingDataLoaderIter) and id(obj) not in kept]
    for obj in iterators:
        obj._shutdown_workers()
    kill_tree([me], include_roots=False, spare=_kept_worker_pids() | _own_forkserver())


def _own_forkserver() -> set[int]:
    """The pid of the forkserver this rank started for its DataLoader workers, if any. It
    holds nothing of a call (its children, the workers, are stopped), so it is kept."""
    from multiprocessing import forkserver

    pid = forkserver._forkserver._forkserver_pid
    return set() if pid is None else {pid}
