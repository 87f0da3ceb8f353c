"""Graders for the exercises, here so that no answer stands in a cell the learner reads.

A grader runs the learner's code and returns a :class:`Grade`: *passes*, *not yet* with a
hint that never gives the answer, *not tried* for an untouched stub, or *not graded* when
its processes were too slow (:mod:`~talk_helpers.exercises.start_up`): slow is never
wrong. Every grade but *not tried* is an attempt (:func:`attempted`), which opens the
exercise's solution (:mod:`talk_helpers.notebook.solutions`).
"""

from __future__ import annotations

import ast
import contextlib
import html
import inspect
import sys
import textwrap
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from talk_helpers.palette import BAD_COLOUR, INFO_COLOUR, OK_COLOUR, WARN_COLOUR
from talk_helpers.progress import in_notebook

__all__ = ["Grade", "GradeFailure", "announce", "attempt", "attempted", "choice", "is_stub",
           "not_graded", "not_tried", "not_yet", "passes", "raised"]


_attempted: set[str] = set()  # exercises a grader has judged an attempt at


@dataclass(frozen=True)
class Grade:
    """The answer to one attempt at exercise ``exercise`` (e.g. ``"02.3"``).

    ``passed`` is True (passes), False (not yet) or None (not tried: the stub is
    untouched; or, with ``late``, not graded: the grader's processes did not answer in
    time). ``hint`` is shown after a wrong attempt or a late one."""

    exercise: str
    passed: bool | None
    message: str
    hint: str | None = None
    late: bool = False

    def __post_init__(self):
        if self.passed is not None or self.late:
            _attempted.add(self.exercise)

    @property
    def ok(self) -> bool:
        return self.passed is True

    def _head(self) -> tuple[str, str, str]:
        if self.passed is True:
            return "✔", "passes", OK_COLOUR
        if self.passed is False:
            return "✘", "not yet", BAD_COLOUR
        if self.late:
            return "⌛", "not graded", WARN_COLOUR
        return "·", "not tried yet", INFO_COLOUR

    def _shows_hint(self) -> bool:
        return bool(self.hint) and (self.passed is False or self.late)

    def __repr__(self) -> str:
        mark, word, _ = self._head()
        lines = [f"{mark} exercise {self.exercise} {word}: {self.message}"]
        if self._shows_hint():
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        mark, word, colour = self._head()
        out = (f'<div style="font-family:monospace"><span style="color:{colour};'
               f'font-weight:bold">{mark} exercise {html.escape(self.exercise)} {word}</span>: '
               f"{html.escape(self.message)}")
        if self._shows_hint():
            out += f"<br>&nbsp;&nbsp;hint: {html.escape(self.hint)}"
        return out + "</div>"


def passes(exercise: str, message: str) -> Grade:
    """The attempt passes."""
    return Grade(exercise, True, message)


def not_yet(exercise: str, message: str, hint: str | None = None) -> Grade:
    """The attempt does not pass yet; ``hint`` points at the problem, never the answer."""
    return Grade(exercise, False, message, hint)


def not_tried(exercise: str, message: str) -> Grade:
    """The stub is untouched: what to do first."""
    return Grade(exercise, None, message)


def not_graded(exercise: str, message: str, hint: str | None = None) -> Grade:
    """No verdict: the processes the grader started did not answer in time. ``message``
    says how long they took and to run the grader again; it never blames the code."""
    return Grade(exercise, None, message, hint, late=True)


def attempted(exercise: str) -> bool:
    """Whether a grader of ``exercise`` (e.g. ``"03.1"``) has judged an attempt in this
    process (any grade but *not tried*)."""
    return exercise in _attempted


class GradeFailure(Exception):
    """Raised with a finished grade (*not yet* or *not graded*), so that a grader stops at
    the first problem it finds."""

    def __init__(self, grade: Grade):
        super().__init__(grade.message)
        self.grade = grade


def is_stub(value: Any) -> bool:
    """Whether ``value`` is what a stub holds before the learner edits it: ``None``,
    ``...``, or a function (a class: the ``__iter__`` it has, its own or inherited) whose
    body is only ``...`` or ``pass`` (and a docstring)."""
    if value is None or value is Ellipsis:
        return True
    if isinstance(value, type):
        value = next((vars(k)["__iter__"] for k in value.__mro__ if "__iter__" in vars(k)), value)
    try:
        source = textwrap.dedent(inspect.getsource(value))
        node = ast.parse(source).body[0]
    except (TypeError, OSError, SyntaxError, IndexError):
        return False
    body = getattr(node, "body", None)
    if not isinstance(body, list):
        return False
    return all(isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr)
               and isinstance(stmt.value, ast.Constant)
               and (stmt.value.value is Ellipsis or isinstance(stmt.value.value, str)))
               for stmt in body)


def raised(exercise: str, exc: BaseException, hint: str | None = None) -> Grade:
    """*Not yet*: the learner's code raised; the message is its last line, not a dump."""
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return not_yet(exercise, f"your code raised {last}", hint)


def choice(exercise: str, answer: Any, *, options: Sequence, correct: Any,
           hints: dict | None = None, explain: str = "") -> Grade:
    """Grade a multiple-choice answer: ``None`` is not tried, a value outside ``options``
    is refused with the options, a wrong option gets its own hint from ``hints``."""
    if answer is None:
        return not_tried(exercise, f"set your answer to one of {list(options)}")
    if answer not in options:
        return not_yet(exercise, f"{answer!r} is not one of {list(options)}")
    if answer == correct:
        return passes(exercise, explain or f"{answer!r} is right")
    return not_yet(exercise, f"{answer!r} is not it", (hints or {}).get(answer))


def attempt(exercise: str, run: Callable[[], Grade], *, hint: str | None = None,
            waits_for: str | None = None) -> Grade:
    """``run()`` (announcing ``waits_for`` meanwhile), or the grade a :class:`GradeFailure`
    carries, or *not yet* naming the exception if the learner's code raised."""
    try:
        with announce(exercise, waits_for) if waits_for else contextlib.nullcontext():
            return run()
    except GradeFailure as failure:
        return failure.grade
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        return raised(exercise, exc, hint)


@contextlib.contextmanager
def announce(exercise: str, what: str):
    """Say what the grader waits for until its verdict: a line on stderr; in a notebook a
    display emptied at the end (stored outputs hold no trace of it, whatever the method)."""
    line = f"⏳ exercise {exercise}: {what}…"
    if not in_notebook():
        print(line, file=sys.stderr, flush=True)
        yield
        return
    from IPython.display import display

    handle = display({}, raw=True, display_id=True)
    handle.update({"text/plain": line}, raw=True)
    try:
        yield
    finally:
        handle.update({}, raw=True)
