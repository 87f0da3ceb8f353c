"""Exercise solutions, shown folded, and only once the learner has tried.

Each notebook NN has a module ``talk_helpers.notebook.solutions.nbNN`` with a dict
``SOLUTIONS = {1: "code …", 2: …}``. In a notebook::

    from talk_helpers.notebook.solutions import show_solution
    show_solution("02", 1)

A module that sets ``GATED = True`` keeps each solution closed until a grader of its
exercise ("02.1") has judged an attempt in this kernel (any verdict but "not tried",
see :func:`talk_helpers.exercises.attempted`), or until it is asked for with
``anyway=True``: reaching it never spoils it by accident.
"""

import html
import importlib
from dataclasses import dataclass

from talk_helpers.exercises import attempted

__all__ = ["ClosedSolution", "Solution", "show_solution"]


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


@dataclass(frozen=True)
class ClosedSolution:
    """A solution not opened yet: how to open it."""

    notebook: str
    exercise: int

    def _text(self) -> str:
        return (f"Solution to exercise {self.notebook}.{self.exercise}: it opens once the "
                "grader above has judged an attempt of yours. Stuck anyway? Run "
                f"show_solution({self.notebook!r}, {self.exercise}, anyway=True)")

    def __repr__(self) -> str:
        return self._text()

    def _repr_html_(self) -> str:
        return f'<div style="font-family:monospace">{html.escape(self._text())}</div>'


def show_solution(notebook: str, exercise: int, *, anyway: bool = False
                  ) -> Solution | ClosedSolution:
    """The solution of exercise ``exercise`` of notebook ``notebook`` (e.g. "02", 1);
    closed until attempted where the notebook's solutions are gated, unless ``anyway``."""
    if not (isinstance(notebook, str) and len(notebook) == 2 and notebook.isdigit()):
        raise ValueError(f"notebook must be a two-digit string such as '02', got {notebook!r}")
    if not isinstance(anyway, bool):
        raise TypeError(f"anyway must be True or False, got {anyway!r}")
    try:
        module = importlib.import_module(f"talk_helpers.notebook.solutions.nb{notebook}")
    except ModuleNotFoundError:
        raise ValueError(f"notebook {notebook!r} has no solutions module") from None
    solutions = module.SOLUTIONS
    if exercise not in solutions:
        raise ValueError(f"exercise must be one of {sorted(solutions)} for notebook "
                         f"{notebook}, got {exercise!r}")
    if getattr(module, "GATED", False) and not anyway \
            and not attempted(f"{notebook}.{exercise}"):
        return ClosedSolution(notebook, exercise)
    return Solution(notebook, exercise, solutions[exercise].strip("\n"))
