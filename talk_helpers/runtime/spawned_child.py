"""The main module of a DataLoader worker that a rank or a notebook kernel spawns.

multiprocessing's spawn runs the parent's main module in the child (as ``__mp_main__``)
before it unpickles the child's work. :func:`talk_helpers.runtime.rank_entry.
name_spawned_child_main` names this module as that main where the parent has none of its
own, so each spawned worker imports torch here, with the collector paused and what loaded
frozen (:func:`talk_helpers.runtime.rank_entry.loading`), and ends without Python's
teardown once its worker loop has run (:mod:`talk_helpers.runtime.worker_exit`).
Imported under any other name it does nothing.
"""

from talk_helpers.runtime import rank_entry, worker_exit

if __name__ == "__mp_main__":
    worker_exit.register()
    with rank_entry.loading():
        import torch  # noqa: F401  (the worker loop needs it; here it loads unwalked)
