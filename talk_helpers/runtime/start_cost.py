"""What starting a new interpreter that imports torch costs on this machine, now.

Under spawn every rank and every DataLoader worker is such an interpreter (under
forkserver, every server). On a quiet laptop one starts in a second or two; on a machine
busy with other work, many times that. A time limit that covers starting processes (a
world's deadline, a grader's wait, a test's timeout) is therefore a multiple of this cost,
measured where it runs, rather than a fixed number that is generous on one machine and
too short on the next.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

__all__ = ["interpreter_start_s", "time_limit_s"]

STARTUP_CODE = "import os, torch; os._exit(0)"  # a spawned worker also skips the teardown

_measured: float | None = None
_lock = threading.Lock()


def interpreter_start_s(refresh: bool = False) -> float:
    """Wall-clock seconds a new interpreter takes to import torch here, now: measured once
    per process (``refresh=True`` measures again), about that long the first time."""
    global _measured
    with _lock:
        if _measured is None or refresh:
            started = time.monotonic()
            subprocess.run([sys.executable, "-c", STARTUP_CODE], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _measured = time.monotonic() - started
        return _measured


def time_limit_s(base_s: float, interpreters: int = 1, margin: float = 3.0) -> float:
    """A limit for work of ``base_s`` that also starts ``interpreters`` new interpreters:
    ``base_s`` plus ``margin`` times what they take to start here, now."""
    if base_s < 0 or interpreters < 0 or margin <= 0:
        raise ValueError(f"base_s and interpreters must be >= 0 and margin > 0, got "
                         f"base_s={base_s!r}, interpreters={interpreters!r}, margin={margin!r}")
    return base_s + margin * interpreters * interpreter_start_s()
