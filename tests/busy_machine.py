"""A busy machine for tests that must not depend on a quiet one: ``with busy(2): ...`` runs
two ``sh -c 'while :; do :; done'`` loops beside the block and ends them by PID."""

from __future__ import annotations

import contextlib
import subprocess


@contextlib.contextmanager
def busy(loops: int):
    """Keep ``loops`` CPU-bound shell loops running while the block runs."""
    started = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(loops)]
    try:
        yield [p.pid for p in started]
    finally:
        for proc in started:
            proc.kill()
        for proc in started:
            proc.wait()
