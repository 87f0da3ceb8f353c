"""A verdict read at a glance: the verdict-bearing outputs of notebooks 01–05 hold at most
800 words as a notebook shows them (HTML with every <details> closed: its <summary>
shown, the rest hidden; an output without HTML by its text).

Count other copies by hand: ``python tests/test_report_words.py build/try/notebooks/0*.ipynb``.
"""

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LESSONS = ("01", "02", "03", "04", "05")
MAX_WORDS = 800
MARKS = "✔✘⚠"


class _Shown(HTMLParser):
    """The text of an HTML page as shown with every <details> closed."""

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self.details = 0       # depth inside <details>
        self.summary = 0       # depth inside a <summary> of the outermost closed <details>

    def handle_starttag(self, tag, attrs):
        if tag == "details":
            self.details += 1
        elif tag == "summary" and self.details == 1:
            self.summary += 1
        self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag == "details":
            self.details -= 1
        elif tag == "summary" and self.summary:
            self.summary -= 1
        self.parts.append(" ")

    def handle_data(self, data):
        if not self.details or self.summary:
            self.parts.append(data)


def shown_words(html: str) -> int:
    parser = _Shown()
    parser.feed(html)
    return len("".join(parser.parts).split())


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def verdict_words(path: Path) -> int:
    """Words shown by the outputs of ``path`` that bear a verdict (their text starts with
    ✔, ✘ or ⚠)."""
    total = 0
    for cell in json.loads(path.read_text())["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            plain = _text(data.get("text/plain", output.get("text", "")))
            if not plain.lstrip()[:1] or plain.lstrip()[0] not in MARKS:
                continue
            html = data.get("text/html")
            total += shown_words(_text(html)) if html else len(plain.split())
    return total


def lesson_words(folder: Path = NOTEBOOKS) -> dict[str, int]:
    return {path.name: verdict_words(path) for path in sorted(folder.glob("0[1-5]_*.ipynb"))}


def test_a_closed_details_shows_only_its_summary():
    html = ("<div>✔ audit passed<details><summary>statistics</summary>"
            "<div>forty words hidden here</div></details></div>")
    assert shown_words(html) == 4


def test_the_verdicts_of_lessons_01_to_05_read_at_a_glance():
    counts = lesson_words()
    assert len(counts) == len(LESSONS)
    assert sum(counts.values()) <= MAX_WORDS, counts


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or sorted(NOTEBOOKS.glob("0[1-5]_*.ipynb"))
    found = {p.name: verdict_words(p) for p in paths}
    for name, words in found.items():
        print(f"{words:6d}  {name}")
    print(f"{sum(found.values()):6d}  in all")
