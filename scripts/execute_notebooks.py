"""Re-run notebooks top to bottom in a fresh kernel and store the outputs.

Usage: python scripts/execute_notebooks.py notebooks/02_workers_and_sharding.ipynb [...]

The stored outputs are what nbval compares against, so they must come from one clean
run: execution counts 1..N, no per-cell timing metadata, the kernelspec 'python3'.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TIMEOUT_PER_CELL_S = 600


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    start = time.perf_counter()
    NotebookClient(nb, timeout=TIMEOUT_PER_CELL_S, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    elapsed = time.perf_counter() - start
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return elapsed


def main(paths: list[str]) -> None:
    if not paths:
        raise SystemExit(__doc__)
    for name in paths:
        elapsed = execute(Path(name))
        print(f"{name}: executed in {elapsed:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
