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
SPAWNED_CHILD_MAIN = "talk_helpers.runtime.spawned_child"


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

    Its spawned DataLoader workers then load as it does (:func:`name_spawned_child_main`).
    """
    name_spawned_child_main()
    start(main, *args)


def name_spawned_child_main() -> None:
    """Let the processes this one spawns start from :mod:`talk_helpers.runtime.spawned_child`.

    multiprocessing's spawn runs the parent's main module in the child first. A rank
    started from a notebook, and the notebook's kernel itself, have a main module with
    neither a spec nor a file; naming :mod:`~talk_helpers.runtime.spawned_child` instead
    makes each spawned DataLoader worker import torch under :func:`loading` (about 0.1
    CPU-s less) and end without Python's teardown once its loop has run (see
    :mod:`talk_helpers.runtime.worker_exit`). A real main module (a script, whose
    classes the workers may unpickle) is left alone, and so is a forked rank's.
    """
    stub = sys.modules["__main__"]
    if getattr(stub, "__spec__", None) is None and getattr(stub, "__file__", None) is None:
        stub.__spec__ = importlib.util.find_spec(SPAWNED_CHILD_MAIN)


def entry_point(start_method: str):
    """The ``Process`` target for a rank started with ``start_method``."""
    return start if start_method == "fork" else start_new_interpreter


# DistributedDataParallel imports torch._dynamo when it wraps its first model: seconds
# in every rank, long enough for a peer to hit the collective timeout. Forked ranks
# inherit it from the parent, forkserver ranks from the server's preload; spawned ranks
# import it only for a function that needs it, before they synchronise (its module
# imports it, as talk_helpers.lessons.training does) or before it starts its loader
# (load_ddp): a world that only reads data does not pay for it.
WARM_IMPORTS = ("torch._dynamo",)


def warm_imports() -> None:
    """Import :data:`WARM_IMPORTS` unless they are imported already."""
    for name in WARM_IMPORTS:
        if name not in sys.modules:
            importlib.import_module(name)


def load_ddp() -> None:
    """In a rank whose ``fn`` wraps a model but whose module leaves DDP's imports to it (so
    that the kernel need not load them): load :data:`WARM_IMPORTS` now, as the rank's own
    code loads (:func:`loading`): under spawn a third less CPU than
    DistributedDataParallel's own import of them, and never walked again by the garbage
    collector."""
    with loading():
        warm_imports()
