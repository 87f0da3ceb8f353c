"""What a learner meets in notebooks 01-03: a short core path with "Going deeper" after it,
graders that stored 'not tried' (never a hint or an answer), no term before the notebook
that explains it, and lesson datasets defined in the cells that teach them."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COURSE = ["01_map_style_and_iterable.ipynb", "02_workers_and_sharding.ipynb",
          "03_shuffling.ipynb"]
CORE_WORDS = 3000  # 01-03 together; 04-05 get 2,000, for 5,000 over 01-05
LATER_TERMS = re.compile(r"\brank\b|\branks\b|\bDDP\b|DistributedSampler", re.IGNORECASE)
DEEPER = re.compile(r"^#+ .*going deeper", re.IGNORECASE | re.MULTILINE)


def _cells(name: str) -> list[dict]:
    return json.loads((ROOT / "notebooks" / name).read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _shown(cell: dict) -> str:
    """The text of a code cell's stored outputs."""
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
        parts.append(out.get("evalue", ""))
    return "".join(parts)


def core_words(cells: list[dict]) -> int:
    """Words of markdown above the first "Going deeper" heading (notes cells included)."""
    words = 0
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        if DEEPER.search(_source(cell)):
            break
        words += len(_source(cell).split())
    return words


def test_the_core_prose_of_01_to_03_fits_its_budget():
    counts = {name: core_words(_cells(name)) for name in COURSE}
    assert sum(counts.values()) <= CORE_WORDS, counts


@pytest.mark.parametrize("name", COURSE)
def test_detours_sit_under_going_deeper_at_the_end(name):
    cells = _cells(name)
    headings = [i for i, c in enumerate(cells)
                if c["cell_type"] == "markdown" and DEEPER.search(_source(c))]
    assert headings, f"{name} has no 'Going deeper' heading"
    later = [_source(c) for c in cells[headings[0]:] if c["cell_type"] == "markdown"]
    assert not any(re.search(r"^## (Key takeaways|Exercises|Recall)", s, re.M) for s in later)


@pytest.mark.parametrize("name", COURSE)
def test_every_grader_stored_not_tried_and_no_hint(name):
    graded = [c for c in _cells(name) if c["cell_type"] == "code" and "grade_" in _source(c)]
    assert graded, f"{name} has no graded exercise"
    for cell in graded:
        shown = _shown(cell)
        assert "not tried yet" in shown and "hint" not in shown, _source(cell)


@pytest.mark.parametrize("name", COURSE)
def test_no_grading_logic_or_answer_stands_in_a_visible_cell(name):
    for cell in _cells(name):
        source = _source(cell)
        if cell["cell_type"] == "code" and "grade_" in source:
            assert len(source.strip().splitlines()) <= 3, source
            assert "==" not in source and "print(" not in source, source


@pytest.mark.parametrize("name", COURSE)
def test_ranks_and_ddp_wait_for_the_notebooks_that_explain_them(name):
    for number, cell in enumerate(_cells(name)):
        text = _source(cell) + _shown(cell)
        assert not LATER_TERMS.search(text), f"{name} cell {number}: {LATER_TERMS.search(text)}"


@pytest.mark.parametrize("name", COURSE)
def test_the_datasets_a_lesson_runs_are_defined_in_its_cells(name):
    code = [_source(c) for c in _cells(name) if c["cell_type"] == "code"]
    assert not any("datasets.basics" in source for source in code)
    defined = [s for s in code if s.startswith("%%importable")
               and re.search(r"^class \w+\((Iterable)?Dataset\):", s, re.M)]
    assert defined, f"{name} defines no dataset in an %%importable cell"


def test_the_index_points_at_the_one_talk_and_plans_notebook_11():
    cells = _cells("00_index.ipynb")
    text = "\n".join(_source(c) + _shown(c) for c in cells)
    assert "talk.ipynb" in text and "make talk" in text and "build/slides/talk.slides.html" in text
    assert "11_when_it_breaks_in_production.ipynb" in text
    assert not any(c.get("metadata", {}).get("slideshow", {}).get("slide_type") == "notes"
                   for c in cells)
