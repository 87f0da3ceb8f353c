"""Every link to the repository, made from its one address (talk_helpers/notebook/address.py).

``python scripts/links.py --check`` lists each Binder, nbviewer and GitHub link to the
repository in README.md, docs/*.md and the notebooks (the talk's QR code included) that
disagrees with ``address.py``, and exits 1 if there is one. ``--write`` rewrites the Binder
and nbviewer links of README.md and docs/*.md from ``address.py`` (the notebook and the
anchor each one opens are kept), then checks.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_address():
    """address.py alone: the package's ``notebook`` layer imports torch, which this needs not."""
    spec = importlib.util.spec_from_file_location(
        "address", ROOT / "talk_helpers" / "notebook" / "address.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


address = _load_address()

BINDER = re.compile(r"https://mybinder\.org/v2/gh/(?P<slug>[\w.-]+/[\w.-]+)/(?P<ref>[^?\s)\"'<>]+)"
                    r"(?:\?labpath=(?P<path>[^\s)\"'<>#]+))?")
NBVIEWER = re.compile(r"https://nbviewer\.org/github/(?P<slug>[\w.-]+/[\w.-]+)/blob/"
                      r"(?P<ref>[^/\s]+)/(?P<path>[^\s)\"'<>#]+)(?:#(?P<anchor>[^\s)\"'<>]+))?")
OWNER = address.REPOSITORY.split("/")[0]
GITHUB = re.compile(rf"github\.com/(?P<slug>{re.escape(OWNER)}/[\w.-]+?)(?=[/@\s)\"'<>*]|\.git|$)")
QR_TITLE = re.compile(r"data:image/svg\+xml;base64,(?P<data>[A-Za-z0-9+/=]+)")


def expected(match: re.Match) -> str:
    """The link ``address.py`` makes for what ``match`` opens."""
    if match.re is BINDER:
        return address.binder_url(match["path"]) if match["path"] else address.binder_url()
    if match.re is NBVIEWER:
        return address.nbviewer_url(match["path"], match["anchor"])
    return "github.com/" + address.REPOSITORY


def texts() -> dict[str, str]:
    """Every text a link can sit in: README.md, docs/*.md, each notebook's cells (the SVG
    titles of embedded images, such as the talk's QR code, decoded)."""
    found = {p.relative_to(ROOT).as_posix(): p.read_text()
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if p.exists()}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for number, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            titles = []
            for image in QR_TITLE.finditer(source):
                svg = base64.b64decode(image["data"]).decode("utf-8", "replace")
                titles += re.findall(r"<title>(.*?)</title>", svg)
            found[f"{path.relative_to(ROOT).as_posix()} cell {number}"] = "\n".join(
                [QR_TITLE.sub("data:image/svg+xml;base64,…", source), *titles])
    return found


def disagreements(text: str) -> list[tuple[str, str]]:
    """(link as written, link address.py makes) for each link of ``text`` that differs."""
    wrong = []
    for pattern in (BINDER, NBVIEWER, GITHUB):
        for match in pattern.finditer(text):
            want = expected(match)
            if match[0] != want:
                wrong.append((match[0], want))
    return wrong


def check() -> list[str]:
    return [f"{where}: {have} -> {want}" for where, text in texts().items()
            for have, want in disagreements(text)]


def write() -> list[Path]:
    changed = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if not path.exists():
            continue
        text = path.read_text()
        new = NBVIEWER.sub(expected, BINDER.sub(expected, text))
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite README.md and docs/*.md")
    parser.add_argument("--check", action="store_true", help="only check (the default)")
    args = parser.parse_args(argv)
    if args.write:
        for path in write():
            print(f"rewrote {path.relative_to(ROOT)}")
    wrong = check()
    for line in wrong:
        print(line)
    print(f"{len(wrong)} link(s) disagree with talk_helpers/notebook/address.py" if wrong
          else f"every link names {address.REPOSITORY} at {address.REF}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
