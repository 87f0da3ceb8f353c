"""Processes in the parent's hands: the multiprocessing context that starts ranks, and
stopping a process tree without leaving anything behind."""

from __future__ import annotations

import time

import psutil
import torch.multiprocessing as mp

from talk_helpers.runtime import rank_entry
from talk_helpers.runtime.start_method import FORKSERVER_PRELOAD


def rank_context(method: str, preload_ddp: bool = True):
    """The multiprocessing context for ranks, with the imports the ranks need warm."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        # The server forks every rank from one process: with torch already imported
        # there, a rank starts in a fraction of a second instead of importing torch again.
        # (Effective only if the server is not running yet: setup_notebook starts it
        # with the full list.)
        ctx.set_forkserver_preload([name for name in FORKSERVER_PRELOAD
                                    if preload_ddp or name not in rank_entry.WARM_IMPORTS])
    elif method == "fork" and preload_ddp:
        rank_entry.warm_imports()
    return ctx


def handles_of(procs) -> dict[int, psutil.Process | None]:
    handles = {}
    for rank, p in enumerate(procs):
        try:
            handles[rank] = psutil.Process(p.pid)
        except psutil.Error:
            handles[rank] = None
    return handles


def descendants(procs) -> list[psutil.Process]:
    found = []
    for p in procs:
        try:
            found.extend(p.children(recursive=True))
        except psutil.Error:
            pass
    return found


def kill_tree(roots, include_roots: bool = True, known=(), spare=frozenset()) -> None:
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
    for p in [*known, *descendants(roots), *(roots if include_roots else [])]:
        if p.pid not in spare:
            victims[p.pid] = p
    for p in victims.values():
        try:
            if p.is_running():  # also guards against a reused pid
                p.kill()
        except psutil.Error:
            pass
    wait_gone(list(victims.values()), timeout_s=3.0)


def wait_gone(procs, timeout_s: float) -> None:
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


def stop_processes(procs) -> None:
    for p in procs:
        if p.is_alive():
            try:
                kill_tree([psutil.Process(p.pid)])
            except psutil.Error:
                pass
        p.join(1.0)


def close_queues(*queues) -> None:
    for q in queues:
        q.close()
        q.cancel_join_thread()
