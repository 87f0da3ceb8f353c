"""One switch for how DataLoader workers and rank processes start: ``TALK_START_METHOD``.

Set ``TALK_START_METHOD=fork|forkserver|spawn`` before starting Jupyter (or pytest) and
call :func:`apply_start_method`; every DataLoader created afterwards without an explicit
``multiprocessing_context`` uses that method. Unset, Python's own default stays.
"""

import os

import torch.multiprocessing as mp

ENV_VAR = "TALK_START_METHOD"
START_METHODS = ("fork", "forkserver", "spawn")


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
