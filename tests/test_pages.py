"""The README stays a short front page: the three uses first, the audit after them in a
short section, its manual on a page of its own, and no paragraph a reader has to wade
through."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 150
MAX_WORDS = 120
SECTIONS = ("## Give the talk", "## Learn alone", "## From a link", "## Check your own loader")


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a markdown page: blocks between blank lines, outside code
    fences, that are not tables or headings."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    blocks = [block.strip() for block in re.split(r"\n\s*\n", text)]
    return [b for b in blocks if b and not b.startswith(("|", "#"))]


def test_the_readme_is_at_most_150_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_no_readme_paragraph_is_over_120_words():
    long = [(len(p.split()), p[:60]) for p in paragraphs(README.read_text())
            if len(p.split()) > MAX_WORDS]
    assert long == []


def test_the_readme_serves_the_three_uses_before_the_audit():
    text = README.read_text()
    where = [text.find(heading + "\n") for heading in SECTIONS]
    assert -1 not in where, [h for h, at in zip(SECTIONS, where, strict=True) if at == -1]
    assert where == sorted(where)


def test_the_readme_links_the_audits_manual_and_the_speakers_guide():
    text = README.read_text()
    assert "(docs/audit.md)" in text and "(docs/talk.md)" in text
    manual = (ROOT / "docs" / "audit.md").read_text()
    assert "## Check your loader before a long run" in manual


def test_paragraphs_skip_code_tables_and_headings():
    page = "# Title\n\nOne two three.\n\n```bash\nnot prose here\n```\n\n| a | b |\n| - | - |\n"
    assert paragraphs(page) == ["One two three."]


def test_contributing_maps_every_notebook_to_modules_that_exist():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    table = text.split("## Where each notebook's code lives")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip().split(" ")[0]: line.split("|")[2]
            for line in table.splitlines() if line.startswith("| ") and "---" not in line}
    notebooks = {p.name.split("_")[0] if p.name[0].isdigit() else p.stem
                 for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert notebooks <= set(rows), sorted(notebooks - set(rows))
    paths = [p for modules in rows.values() for p in re.findall(r"`([\w/]+(?:\.py|/))`", modules)]
    missing = [p for p in paths if not (ROOT / "talk_helpers" / p).exists()]
    assert paths and missing == []
