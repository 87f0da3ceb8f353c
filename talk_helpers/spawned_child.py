"""The main module of a process that a rank spawns: a DataLoader worker under spawn.

multiprocessing's spawn runs the parent's main module in the child (as ``__mp_main__``)
before it unpickles the child's work. A rank that is a new interpreter has an empty
``-c`` main, so :func:`talk_helpers.rank_entry.start_new_interpreter` names this module
as the rank's main instead: its workers then import torch here, with the collector paused
and what loaded frozen (:func:`talk_helpers.rank_entry.loading`), as the rank itself did,
before torch's worker loop imports anything. Imported under any other name it does
nothing.
"""

from talk_helpers import rank_entry

if __name__ == "__mp_main__":
    with rank_entry.loading():
        import torch  # noqa: F401  (the worker loop needs it; here it loads unwalked)
