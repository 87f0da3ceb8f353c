"""Where every rank process starts: the code it loads, loaded with the garbage collector paused.

A rank imports torch and these helpers when it starts, and the module of each call's
``fn`` (DDP's ``torch._dynamo`` among them) when the call arrives: hundreds of thousands
of objects, none of them garbage, which Python's collector walks again and again while
they load. Paused there, ``import torch`` takes about a tenth less CPU, ``torch._dynamo``
about a third less. What loaded is then frozen (``gc.freeze``): it lives as long as the
rank, and no later collection walks it either, neither a warm rank's clean-up after each
call nor Python's last collection when a spawned rank exits (the parent waits for that).

This module imports nothing heavy itself, so that a new process reaches :func:`start`
before torch loads.
"""

import contextlib
import gc
import importlib


@contextlib.contextmanager
def loading():
    """Run the block with the collector paused, then freeze what is alive after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def start(main: str, *args) -> None:
    """Import ``main`` (``"module:function"``) under :func:`loading`, then call it."""
    module, name = main.split(":")
    with loading():
        function = getattr(importlib.import_module(module), name)
    function(*args)
