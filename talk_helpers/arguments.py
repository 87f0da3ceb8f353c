"""Bad arguments get one kind of error everywhere: it names the argument and what it may be.

Ints are Python or numpy integers, never bools (``True`` is an int to Python, but nobody
means 1 worker by it).
"""

import numpy as np

__all__ = ["check_choice", "check_int", "is_int", "require_int", "require_seconds"]


def is_int(value) -> bool:
    """Whether ``value`` is a Python or numpy integer (a bool is not)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def require_int(name: str, value, *, minimum: int | None = None,
                maximum: int | None = None, allow_none: bool = False) -> int | None:
    """``value`` as an int; TypeError if it is not one, ValueError outside the bounds."""
    if value is None and allow_none:
        return None
    if not is_int(value):
        what = "None or an int" if allow_none else "an int"
        raise TypeError(f"{name} must be {what}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return int(value)


def require_seconds(name: str, value) -> float:
    """``value`` as a positive number of seconds, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) \
            or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def check_int(name: str, value, low: int, high: int, step: int = 1) -> int:
    """An explorer's starting value: an int in ``[low, high]`` on the slider's ``step``.

    An ipywidgets slider clips a value outside its range without a word, so the widget
    refuses it (ValueError) before any control is built."""
    if not is_int(value):
        raise ValueError(f"{name} must be an int from {low} to {high}, got {value!r}")
    if not low <= value <= high or (value - low) % step:
        every = f" in steps of {step}" if step != 1 else ""
        raise ValueError(f"{name} must be from {low} to {high}{every}, got {value!r}")
    return int(value)


def check_choice(name: str, value, choices) -> object:
    """``value`` if it is one of ``choices``, else ValueError listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return value
