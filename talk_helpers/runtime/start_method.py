"""One switch for how DataLoader workers and rank processes start: ``TALK_START_METHOD``.

Set ``TALK_START_METHOD=fork|forkserver|spawn`` before starting Jupyter (or pytest) and
call :func:`apply_start_method`; every DataLoader created afterwards without an explicit
``multiprocessing_context`` uses that method. Unset, Python's own default stays.

Under forkserver the server process imports :data:`FORKSERVER_PRELOAD` once, so every
worker or rank it forks starts with torch already imported (a few hundredths of a second
instead of a second or more). It is still a forkserver child: a clean process that
receives the dataset pickled, exactly as without the preload.
"""

import os

import torch.multiprocessing as mp

ENV_VAR = "TALK_START_METHOD"
START_METHODS = ("fork", "forkserver", "spawn")
# What the forkserver imports before it forks anything: torch, what DDP imports when it
# wraps a model (seconds otherwise, in every rank) and the helpers every rank runs.
FORKSERVER_PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "numpy",
                      "talk_helpers.runtime.warm")
# What a rank's own forkserver (for its DataLoader workers) imports: no DDP there.
RANK_FORKSERVER_PRELOAD = ("torch", "numpy")


def requested_start_method() -> str | None:
    """The start method named by ``TALK_START_METHOD``, or None when it is unset."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    if value not in START_METHODS:
        raise ValueError(f"{ENV_VAR}={value!r} is not one of {', '.join(START_METHODS)}")
    return value


def apply_start_method() -> str:
    """Make ``TALK_START_METHOD`` the default start method; return the method in force."""
    method = requested_start_method()
    if method is not None:
        mp.set_start_method(method, force=True)
    return mp.get_start_method()


def start_forkserver() -> bool:
    """Start multiprocessing's forkserver now, preloading :data:`FORKSERVER_PRELOAD`.

    Does nothing (returns False) unless forkserver is the start method in force. The
    server imports in the background, so the first worker does not wait for all of it.
    """
    if mp.get_start_method() != "forkserver":
        return False
    from multiprocessing import forkserver

    mp.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    forkserver.ensure_running()
    return True
