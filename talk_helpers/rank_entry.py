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
import importlib.util
import sys

# What a new-interpreter rank names as its main module, for the processes it spawns.
SPAWNED_CHILD_MAIN = "talk_helpers.spawned_child"


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


def start_new_interpreter(main: str, *args) -> None:
    """:func:`start` in a rank that is a new interpreter (spawn, forkserver).

    Started from a notebook, such a rank's ``__main__`` is an empty stub that its spawned
    DataLoader workers would import first; naming :mod:`talk_helpers.spawned_child`
    instead makes them import torch under :func:`loading` too: about 0.1 CPU-s less per
    worker. A real main module (a script the parent ran, whose classes the workers may
    unpickle) is left alone, and so is a forked rank's, which is its parent's.
    """
    stub = sys.modules["__main__"]
    if getattr(stub, "__spec__", None) is None and getattr(stub, "__file__", None) is None:
        stub.__spec__ = importlib.util.find_spec(SPAWNED_CHILD_MAIN)
    start(main, *args)


def entry_point(start_method: str):
    """The ``Process`` target for a rank started with ``start_method``."""
    return start if start_method == "fork" else start_new_interpreter
