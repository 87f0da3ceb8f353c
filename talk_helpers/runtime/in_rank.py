"""What runs inside a rank process: its set-up, one call of ``fn`` in a fresh gloo process
group, and what it tells the parent (progress, stage, outcome) through the result queue."""

from __future__ import annotations

import os
import pickle
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from talk_helpers.runtime import rank_entry
from talk_helpers.runtime.processes import kill_tree
from talk_helpers.runtime.start_method import RANK_FORKSERVER_PRELOAD

HOST = "127.0.0.1"


state: dict[str, Any] = {}  # set in a rank process: rank, queue


def report_progress(text: str) -> None:
    """Record how far this rank got; shown in the report if the rank fails or hangs.

    Call it from ``fn`` (e.g. ``report_progress(f"step {i}")``). Outside a world made by
    :func:`run_world` it does nothing, so the same function also runs in-process.
    """
    q = state.get("queue")
    if q is None:
        return
    text = str(text)
    state["last_progress"] = text
    try:
        send("progress", text)
    except Exception:  # a closed queue must never break the training loop
        pass


def stage(text: str | None) -> None:
    """Where the set-up of this rank is (None once fn runs): shown if the rank never
    reaches fn."""
    try:
        send("stage", text)
    except Exception:
        pass


def current_rank() -> int | None:
    """This process's rank inside :func:`run_world`, or None outside a world."""
    return state.get("rank")


def _watch_caller(caller_pid: int) -> None:
    """Exit this rank (and its workers) if the process that started the world is gone."""
    while True:
        time.sleep(1.0)
        if not psutil.pid_exists(caller_pid):
            kill_tree([psutil.Process()], include_roots=False)
            os._exit(70)


def send(kind: str, *payload) -> None:
    """Put one message for the parent on the result queue, tagged with this call's id."""
    state["queue"].put((state.get("call", 0), kind, state["rank"], *payload))


def setup(rank, result_queue, caller_pid) -> None:
    """What every rank process does once, before its first call."""
    state.update(rank=rank, queue=result_queue, last_progress=None, call=0)
    threading.Thread(target=_watch_caller, args=(caller_pid,), daemon=True).start()
    torch.set_num_threads(1)
    if mp.get_start_method(allow_none=True) == "forkserver":
        # A forkserver child does not share its parent's server: the rank's DataLoader
        # workers come from a server of the rank's own, started at the rank's first
        # loader. Preloaded with torch, it forks each worker in hundredths of a second.
        mp.set_forkserver_preload(list(RANK_FORKSERVER_PRELOAD))


def fresh_rank_main(rank, world_size, port_queue, fn, args, result_queue, collective_timeout_s,
               rendezvous_timeout_s, caller_pid):
    """A fresh rank process (started by rank_entry.start): set up, run fn once, exit."""
    started = time.monotonic()
    setup(rank, result_queue, caller_pid)
    run_call(rank, world_size, port_queue, fn, args, collective_timeout_s,
              rendezvous_timeout_s, started)


def run_call(rank, world_size, port_queue, fn, args, collective_timeout_s,
              rendezvous_timeout_s, started) -> bool:
    """One call of fn in a fresh gloo process group; the outcome goes to the parent.
    Returns whether fn returned (and its result could be sent)."""
    call = state.get("call", 0)
    rendezvous = timedelta(seconds=rendezvous_timeout_s)
    store = None
    message: tuple
    try:
        if isinstance(fn, bytes):  # fn and args arrive pickled
            # Unpickled before the ranks synchronise: the imports fn's module makes (DDP's
            # torch._dynamo in talk_helpers.lessons.training, seconds under spawn) are never
            # mistaken for a rank stuck in a collective. They stay loaded for the rank's
            # life, so they load as the rank's own code does (rank_entry.loading).
            stage("importing")
            with rank_entry.loading():
                fn, args = pickle.loads(fn)
        # Rank 0 hosts the rendezvous store on a port the OS picks and hands it to the
        # others; the parent hosts nothing, so a fork never copies a busy store server.
        if rank == 0:
            stage("opening the rendezvous store")
            store = dist.TCPStore(HOST, 0, world_size=None, is_master=True,
                                  timeout=rendezvous, wait_for_workers=False)
            port = store.port
            for _ in range(world_size - 1):
                port_queue.put((call, port))
        else:
            stage("waiting for rank 0's rendezvous port")
            port_deadline = time.monotonic() + rendezvous_timeout_s
            while True:  # a port left over from an earlier call is skipped
                port_call, port = port_queue.get(
                    timeout=max(0.01, port_deadline - time.monotonic()))
                if port_call == call:
                    break
            stage("connecting to the rendezvous store")
            store = dist.TCPStore(HOST, port, world_size=None, is_master=False,
                                  timeout=rendezvous)
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world_size),
            MASTER_ADDR=HOST,
            MASTER_PORT=str(port),
            # A rank leaves init_process_group and new_group only once every rank has made
            # the group (a barrier on the store): a rank returns from making a gloo group
            # once its own side of every connection is made, possibly before a peer's side
            # is, and a rank whose fn then returns at once and destroys the group would
            # close a connection the peer is still completing ("connectFullMesh failed ...
            # Connection closed by peer", or a peer stuck joining until the deadline, on a
            # busy machine). So fn starts once every rank has joined the world, and goes
            # on from a group it makes once every rank has made it.
            TORCH_DIST_INIT_BARRIER="1",
        )
        # Every rank is up before the process group starts, so a slow start under spawn
        # is not mistaken for a collective timeout.
        stage("waiting for the other ranks to start")
        store.set(f"up/{rank}", "1")
        store.wait([f"up/{r}" for r in range(world_size)], rendezvous)
        stage("joining the gloo process group")
        # Connecting the full mesh may take long on a busy machine: it gets the start-up
        # allowance; the collectives then get the short timeout.
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=rendezvous)
        dist.distributed_c10d._set_pg_timeout(timedelta(seconds=collective_timeout_s))
        stage(None)
        state["interruptible"] = True  # a warm rank may be told to stop here (SIGUSR1)
        try:
            result = fn(rank, world_size, *args)
        finally:
            state["interruptible"] = False
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
    send(*message)
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


class CallInterrupted(BaseException):
    """Raised in a warm rank whose call the parent stops after another rank failed (a
    BaseException, like KeyboardInterrupt, so that `except Exception` lets it through)."""


def interrupt_call(signum=None, frame=None) -> None:
    """SIGUSR1 handler of a warm rank: stop the running call, if one runs (else ignore)."""
    if state.get("interruptible"):
        state["interruptible"] = False  # at most once per call
        raise CallInterrupted("stopped because another rank failed")
