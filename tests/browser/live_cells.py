"""Which cells a browser test must run for one cell to work: the cells that define the
names it uses, and theirs, back to the set-up cell.

nbval already runs every notebook top to bottom under each start method and compares the
stored outputs; the browser tests show those outputs and run live only what needs a live
kernel (a widget's controls). Names are found statically (``ast``): what a cell assigns,
imports, defines, and what it reads that it did not define itself.
"""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def widget_cells(cells: list[dict]) -> list[int]:
    """Indices (among code cells) of the cells whose stored output is a live widget."""
    return [i for i, cell in enumerate(cells)
            if any(WIDGET_VIEW in out.get("data", {}) for out in cell.get("outputs", []))]


def cells_to_run(cells: list[dict], targets: list[int]) -> list[int]:
    """The set-up cell, ``targets`` and every earlier cell that (transitively) defines a
    name they read, in notebook order."""
    found = [_names(cell) for cell in cells]
    needed, pending = {0}, list(targets)
    while pending:
        index = pending.pop()
        needed.add(index)
        for name in found[index][1]:
            source = next((j for j in range(index - 1, -1, -1) if name in found[j][0]), None)
            if source is not None and source not in needed and source not in pending:
                pending.append(source)
    return sorted(needed)


def _names(cell: dict) -> tuple[set[str], set[str]]:
    """(names the cell defines, names it reads without defining them first)."""
    source = "".join(cell["source"])
    if source.startswith("%%"):  # a cell magic (%%importable): Python below its first line
        source = source.split("\n", 1)[1] if "\n" in source else ""
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                       for line in source.splitlines())
    tree = ast.parse(source)
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            defined |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    read = {node.id for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return defined, read - defined - set(dir(builtins))
