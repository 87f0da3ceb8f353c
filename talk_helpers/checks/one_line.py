"""Reports whose whole verdict is one line: a mark and a sentence, in text and HTML."""

from talk_helpers.verdicts.render import mark, verdict_html

__all__ = ["OneLineReport"]


class OneLineReport:
    """A base for a report that defines ``_verdict()`` (the sentence) and ``ok``, or
    ``_mark()`` where its mark is not just ✔/✘. Its dataclass needs ``repr=False``."""

    def _mark(self) -> str:
        return mark(self.ok)

    def __repr__(self) -> str:
        return f"{self._mark()} {self._verdict()}"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return verdict_html(self._mark(), self._verdict())
