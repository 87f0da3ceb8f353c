"""Spawned DataLoader workers end the way forked ones do: without Python's teardown.

A child started by fork or forkserver ends with ``os._exit``. A spawned child returns
through ``sys.exit``, and Python then tears down every module it imported: with torch
loaded that costs about 0.3 s of CPU per process. DataLoader waits for it each time it
stops its workers, so under spawn a 4-worker loader's epoch ends about 0.8 s later on a
2-core laptop (``benchmarks/spawn_worker_exit.py`` measures it).

:func:`register` is called by :mod:`talk_helpers.runtime.spawned_child`, the main module
of the workers that a notebook kernel or a rank spawns. At exit,
:func:`end_finished_worker` acts only in a DataLoader worker whose worker loop has run
(``torch.utils.data.get_worker_info()`` is set there and nowhere else). That loop has
sent every batch, wrapped every error for the main process and returns 0, so the hook
flushes stdout and stderr and calls ``os._exit(0)``. Anywhere else (the kernel, a rank, a
worker that failed before its loop, such as notebook 02's unpickling error) it returns
and Python exits as usual, with its own exit code.
"""

import atexit
import os
import sys


def end_finished_worker() -> None:
    """In a DataLoader worker whose loop has run: flush and ``os._exit(0)``. Else nothing."""
    worker = sys.modules.get("torch.utils.data._utils.worker")
    if worker is None or getattr(worker, "_worker_info", None) is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # no stream, or one already closed: nothing left to lose
    os._exit(0)


def register() -> None:
    """Register :func:`end_finished_worker` at exit, once however often it is called."""
    atexit.unregister(end_finished_worker)
    atexit.register(end_finished_worker)
