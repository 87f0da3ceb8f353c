"""Helpers for the 'What Could Go Wrong?' notebooks.

Importing this package starts nothing: no process group, no workers, no figures.
Import the module you need, e.g. ``from talk_helpers.checks import check_exactly_once``.
It registers one exit hook, which does nothing outside a DataLoader worker and ends a
finished spawned worker without Python's teardown (see :mod:`talk_helpers.worker_exit`).
"""

from talk_helpers import worker_exit as _worker_exit

__version__ = "0.1.0"

_worker_exit.register()
