"""The code a notebook's cells define, run here as the notebook runs it: every
``%%importable`` cell up to a given one, each a module DataLoader workers and ranks can
import under any start method (:func:`talk_helpers.notebook.cells.define`)."""

from __future__ import annotations

import json
from pathlib import Path

from talk_helpers.notebook import cells

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def cell_source(notebook: str, cell_id: str) -> str:
    """The source of cell ``cell_id`` of ``notebooks/<notebook>*.ipynb`` (e.g. "04")."""
    for cell in _cells(notebook):
        if cell.get("id") == cell_id:
            return "".join(cell["source"])
    raise KeyError(f"notebook {notebook} has no cell {cell_id!r}")


def importable_names(notebook: str, upto: str, namespace: dict | None = None) -> dict:
    """The names every ``%%importable`` cell of ``notebook`` defines, up to and with cell
    ``upto``, bound as the notebook binds them (in ``namespace``, returned)."""
    namespace = {} if namespace is None else namespace
    for cell in _cells(notebook):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith(f"%%{cells.MAGIC}"):
            cells.define(source.split("\n", 1)[1], namespace)
        if cell.get("id") == upto:
            return namespace
    raise KeyError(f"notebook {notebook} has no cell {upto!r}")


def _cells(notebook: str) -> list[dict]:
    (path,) = NOTEBOOKS.glob(f"{notebook}_*.ipynb")
    return json.loads(path.read_text())["cells"]
