"""Exercise solutions, shown folded so that reaching one never spoils it by accident.

Each notebook NN has a module ``talk_helpers.notebook.solutions.nbNN`` with a dict
``SOLUTIONS = {1: "code …", 2: …}``. In a notebook::

    from talk_helpers.notebook.solutions import show_solution
    show_solution("02", 1)
"""

import html
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Solution:
    """A folded solution: plain text in a terminal, a closed <details> in Jupyter."""

    notebook: str
    exercise: int
    code: str

    def __repr__(self) -> str:
        return f"Solution to exercise {self.notebook}.{self.exercise}:\n{self.code}"

    def _repr_html_(self) -> str:
        return (f"<details><summary>Solution to exercise {self.notebook}.{self.exercise} "
                f"(click to unfold)</summary><pre>{html.escape(self.code)}</pre></details>")


def show_solution(notebook: str, exercise: int) -> Solution:
    """The solution of exercise ``exercise`` of notebook ``notebook`` (e.g. "02", 1)."""
    if not (isinstance(notebook, str) and len(notebook) == 2 and notebook.isdigit()):
        raise ValueError(f"notebook must be a two-digit string such as '02', got {notebook!r}")
    try:
        module = importlib.import_module(f"talk_helpers.notebook.solutions.nb{notebook}")
    except ModuleNotFoundError:
        raise ValueError(f"notebook {notebook!r} has no solutions module") from None
    solutions = module.SOLUTIONS
    if exercise not in solutions:
        raise ValueError(f"exercise must be one of {sorted(solutions)} for notebook "
                         f"{notebook}, got {exercise!r}")
    return Solution(notebook, exercise, solutions[exercise].strip("\n"))
