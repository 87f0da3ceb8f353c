"""Helpers for the 'What Could Go Wrong?' notebooks, in layers (each imports only those
below it): ``notebook``, ``diagrams``, ``widgets``, ``demos`` › ``audit`` › ``libraries`` ›
``lessons`` › ``runtime`` › ``checks``, ``model`` › ``reference``, with a few small
modules at the bottom (``arguments``, ``palette``, ``progress``).

Importing the package or any module starts nothing, installs no hook and changes no
environment variable: a notebook asks for what it needs with
``talk_helpers.notebook.setup_notebook()``.
"""

__version__ = "0.1.0"
