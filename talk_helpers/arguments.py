"""Refuse an explorer's starting value that its control cannot show.

An ipywidgets slider clips a value outside its range without a word, and a dropdown
refuses an unknown option without naming the argument: these checks say which argument
was wrong and what it may be, before any control is built.
"""

__all__ = ["check_choice", "check_int"]


def check_int(name: str, value, low: int, high: int, step: int = 1) -> int:
    """``value`` if it is an int in ``[low, high]`` on the slider's ``step``, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int from {low} to {high}, got {value!r}")
    if not low <= value <= high or (value - low) % step:
        every = f" in steps of {step}" if step != 1 else ""
        raise ValueError(f"{name} must be from {low} to {high}{every}, got {value!r}")
    return value


def check_choice(name: str, value, choices) -> object:
    """``value`` if it is one of ``choices``, else ValueError listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return value
