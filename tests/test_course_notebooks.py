"""What a learner meets in notebooks 01-05: a short core path with "Going deeper" after it,
graders that stored 'not tried' (never a hint or an answer) and solutions that stayed
closed, a surprise early in 01, every new word in bold where it is first explained, no
term before the notebook that explains it, lesson datasets defined in the cells that
teach them, and collectives whose tensors sit on the group's device."""

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
FROM_A_LINK = re.compile(r"## Came here from a link\?")


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
    """Words of markdown above the first "Going deeper" heading (notes cells included; the
    answer kept folded for a visitor who came from a link left out)."""
    words = 0
    for cell in cells:
        if cell["cell_type"] != "markdown" or FROM_A_LINK.match(_source(cell)):
            continue
        if DEEPER.search(_source(cell)):
            break
        words += len(_source(cell).split())
    return words


def test_the_core_prose_of_01_to_03_fits_its_budget():
    counts = {name: core_words(_cells(name)) for name in COURSE}
    assert sum(counts.values()) <= CORE_WORDS, counts


def test_the_core_prose_of_01_to_05_fits_in_5000_words():
    names = [*COURSE, "04_seeds_and_epochs.ipynb", "05_ddp_sharding.ipynb"]
    counts = {name: core_words(_cells(name)) for name in names}
    assert sum(counts.values()) <= 5000, counts


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


ALL = [*COURSE, "04_seeds_and_epochs.ipynb", "05_ddp_sharding.ipynb"]
# Words a learner must be told, each explained (in bold) where it is first used in 01-05.
DEFINED = ["worker", "epoch", "main process", "shard", "sharding", "share", "start method",
           "uniform shuffle", "mixing score", "Spearman", "storage blocks",
           "persistent workers", "DDP", "rank", "world", "world size", "process group",
           "backend", "gloo", "NCCL", "collective", "all-reduce", "broadcast", "buffers",
           "slot", "micro-batch"]
COLLECTIVE = re.compile(r"dist\.(all_reduce|all_gather|broadcast|reduce_scatter|reduce)\(")


def _prose(name: str) -> list[str]:
    """The markdown of a notebook after its introduction (whose list names what is to
    come), the recall answers left out."""
    cells = [_source(c) for c in _cells(name)[1:] if c["cell_type"] == "markdown"]
    return [re.sub(r"<details>.*?</details>", "", s, flags=re.S) for s in cells]


@pytest.mark.parametrize("word", DEFINED)
def test_every_new_word_is_explained_where_it_is_first_used(word):
    pattern = re.compile(rf"(?<![\w-]){re.escape(word)}s?(?![\w-])", re.IGNORECASE)
    for name in ALL:
        for text in _prose(name):
            if pattern.search(text.replace("**", "")):
                assert re.search(rf"\*\*{re.escape(word)}", text, re.IGNORECASE), \
                    f"{word!r} is first used in {name} without being explained:\n{text}"
                return
    pytest.fail(f"{word!r} is never used")


def test_01_reaches_its_first_surprise_by_its_seventh_code_cell():
    """The talk's came at its fourth, whose cells defined and ran a dataset at once."""
    code = [c for c in _cells("01_map_style_and_iterable.ipynb") if c["cell_type"] == "code"]
    first = next(i for i, c in enumerate(code)
                 if "IterableIds(100)" in _source(c) and "num_workers" in _source(c))
    assert first <= 6 and _shown(code[first]).strip() == "20"


@pytest.mark.parametrize("name", ALL)
def test_solutions_stayed_closed_in_the_stored_outputs(name):
    shown = [_shown(c) for c in _cells(name)
             if c["cell_type"] == "code" and "show_solution(" in _source(c)]
    assert shown, name
    assert all("opens once the grader above has judged an attempt" in s for s in shown)


@pytest.mark.parametrize("name", ALL)
def test_no_speaker_notes_stand_in_a_course_notebook(name):
    for cell in _cells(name):
        assert cell.get("metadata", {}).get("slideshow", {}).get("slide_type") != "notes"
        assert not _source(cell).startswith("Speaker notes")


@pytest.mark.parametrize("name", ALL)
def test_a_collective_a_reader_may_copy_puts_its_tensor_on_a_device(name):
    for cell in _cells(name):
        source = _source(cell)
        if cell["cell_type"] == "code" and COLLECTIVE.search(source):
            assert "device=" in source, source
