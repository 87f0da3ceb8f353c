"""Helpers for the 'What Could Go Wrong?' notebooks.

Importing this package starts nothing: no process group, no workers, no figures.
Import the module you need, e.g. ``from talk_helpers.checks import check_exactly_once``.
"""

__version__ = "0.1.0"
