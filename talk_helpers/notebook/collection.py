"""The map of the collection, read from the notebooks themselves so it cannot drift."""

import html
import json
from dataclasses import dataclass
from pathlib import Path

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"

@dataclass(frozen=True)
class Entry:
    """One notebook of the collection: its file, title and what it teaches."""

    file: str
    title: str
    teaches: tuple[str, ...]


@dataclass(frozen=True)
class CollectionMap:
    """A table of the notebooks with a checklist of what each one teaches."""

    entries: tuple[Entry, ...]

    def __repr__(self) -> str:
        lines = []
        for e in self.entries:
            lines.append(f"{e.file}: {e.title}")
            lines.extend(f"    ☐ {item}" for item in e.teaches)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        for e in self.entries:
            name = f'<a href="{e.file}">{html.escape(e.title)}</a>'
            items = "".join(f"<li>☐ {html.escape(t)}</li>" for t in e.teaches)
            rows.append(f"<tr><td><code>{e.file[:2]}</code></td><td>{name}</td>"
                        f"<td><ul style='margin:0'>{items}</ul></td></tr>")
        return ("<table><tr><th>#</th><th>notebook</th><th>you will learn</th></tr>"
                + "".join(rows) + "</table>")


def collection_map(notebook_dir: Path = NOTEBOOK_DIR) -> CollectionMap:
    """Every numbered notebook with the bullets of its 'What you will learn' section."""
    paths = sorted(Path(notebook_dir).glob("[0-9][0-9]_*.ipynb"))
    return CollectionMap(tuple(Entry(p.name, *_read_intro(p)) for p in paths
                               if not p.name.startswith("00_")))


def _read_intro(path: Path) -> tuple[str, tuple[str, ...]]:
    """The title and 'What you will learn' bullets of a notebook's first markdown cell."""
    cells = json.loads(path.read_text())["cells"]
    first = next(("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"), "")
    title, teaches, in_section = "", [], False
    for line in first.splitlines():
        stripped = line.strip()
        if stripped.startswith("# ") and not title:
            title = stripped[2:].split("·", 1)[-1].strip()
        elif "what you will learn" in stripped.lower():
            in_section = True
        elif in_section and stripped.startswith(("- ", "* ")):
            teaches.append(stripped[2:].strip())
        elif in_section and teaches and stripped and line[:1].isspace():
            teaches[-1] += " " + stripped  # a bullet wrapped onto the next line
        elif in_section and stripped:
            in_section = False
    return title, tuple(teaches)
