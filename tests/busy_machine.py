"""A busy machine for tests that must not depend on a quiet one: ``with busy(2): ...`` runs
the block beside at least two CPU-bound processes, adding ``sh -c 'while :; do :; done'``
loops (ended by PID) for the part of that load the machine does not carry already."""

from __future__ import annotations

import contextlib
import os
import subprocess


def loops_to_add(loops: int, load: float) -> int:
    """How many loops bring a machine whose 1-minute load is ``load`` to ``loops`` busy
    processes: inside ``make test`` the other stages are that load, and loops beside them
    would only take the cores from them."""
    return max(0, loops - int(load))


@contextlib.contextmanager
def busy(loops: int):
    """Keep at least ``loops`` CPU-bound processes running while the block runs."""
    started = [subprocess.Popen(["sh", "-c", "while :; do :; done"])
               for _ in range(loops_to_add(loops, os.getloadavg()[0]))]
    try:
        yield [p.pid for p in started]
    finally:
        for proc in started:
            proc.kill()
        for proc in started:
            proc.wait()
