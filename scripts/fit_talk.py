"""Prepare notebook copies for RISE (jupyterlab-rise) at 1280x720: the slide breaks of the
offline decks, RISE settings, the decks' text sizes and the emoji font; the talk's copy
also loses its stored outputs, so that the room sees each answer when the speaker runs it.

Usage: python scripts/fit_talk.py build/talk/notebooks/talk.ipynb   (`make talk`)
       python scripts/fit_talk.py build/talk/notebooks              (`make present`: all)

Each copy is fitted the way `make slides` fits its deck (measured in headless Chromium at
1280x720); the copy then gets the same subslide breaks on its own cells. Cells the deck
adds (title notes, outputs or halves shown on a slide of their own) have no place in a
live notebook, so a deck slide that needed them may run long in RISE; the talk needs none.
Next to the copies go rise.css (the decks' sizes, for every notebook of the folder),
talk.css (the talk's sizes, RISE loads <notebook>.css for that notebook alone) and fonts/.
Only the copies are written; notebooks/ is never touched.

RISE loads the lab extensions of one folder (the Makefile's RISE_FLAGS): `make talk` copies
the talk's steps there (scripts/slides_template/rise-extension: one Shift+Enter per step, a
sign while a cell runs).
"""

import importlib.util
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

_spec = importlib.util.spec_from_file_location("build_slides",
                                               Path(__file__).with_name("build_slides.py"))
build_slides = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_slides)

TEMPLATES = build_slides.TEMPLATES
# RISE's settings (notebook metadata "rise"): the deck's size, no margin to scale into,
# no transition or theme that loads web fonts, Space steps through fragments and slides.
RISE = {"width": build_slides.WIDTH, "height": build_slides.HEIGHT, "margin": 0,
        "minScale": 1, "center": False, "scroll": False, "theme": "white",
        "transition": "none", "controls": True, "progress": True, "slideNumber": False,
        "enable_chalkboard": False, "start_slideshow_at": "beginning",
        "show_buttons_on_startup": False}
# The talk's steps choose the cell to run next; RISE's own choice after each
# slide change (the first code cell of the slide or fragment shown) would undo theirs.
TALK_RISE = {"controls": False, "auto_select": "none"}


def copy_breaks(fitted, original) -> int:
    """Mark as subslide every ORIGINAL cell whose fitted counterpart starts one, with the
    heading (and notes) the deck repeats on a continuation inserted before it; count the
    breaks."""
    breaks, pending, inserts = 0, [], []
    for cell in fitted.cells:
        if build_slides.CONTINUED in cell.metadata.get("tags", []):
            pending.append(cell)  # goes before the next cell of the notebook
            continue
        index = cell.metadata.get(build_slides.ORIGIN)
        if index is None or not re.fullmatch(r"c\d+", cell.get("id", "")):
            # outputs or a half the deck moved: no cell of the notebook starts there, and
            # the heading the deck repeats over them has nothing to head in RISE
            pending = []
            continue
        target = original.cells[index]
        if pending:
            inserts.append((index, [_live(c) for c in pending]))
            build_slides.set_slide_type(target, build_slides.slide_type(cell))
            breaks += 1
            pending = []
        elif (build_slides.slide_type(cell) == "subslide"
                and build_slides.slide_type(target) in ("-", "fragment")):
            build_slides.set_slide_type(target, "subslide")
            breaks += 1
    for index, cells in sorted(inserts, key=lambda item: item[0], reverse=True):
        original.cells[index:index] = cells
    return breaks


def _live(cell):
    """A copy of a cell the deck added, for the live notebook (an id of its own)."""
    live = nbformat.v4.new_markdown_cell(cell.source)
    live.metadata.update({k: v for k, v in cell.metadata.items() if k != build_slides.ORIGIN})
    return live


def fit_copy(path: Path, browser, decks: Path) -> None:
    original = nbformat.read(path, as_version=4)
    if browser is not None:
        _, fitted = build_slides.build_fitted(path, decks, browser)
        print(f"{path.name}: {copy_breaks(fitted, original)} slide break(s) added")
    talk = build_slides.is_talk(path)
    settings = {**RISE, **(TALK_RISE if talk else {})}  # the talk: keys only
    original.metadata["rise"] = {**original.metadata.get("rise", {}), **settings}
    if talk:
        without_outputs(original)
    nbformat.write(original, path)


def without_outputs(nb) -> None:
    """Clear every code cell's outputs and count: each answer appears when its cell runs."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


def copy_styles(folder: Path) -> None:
    """rise.css, talk.css and the emoji font next to the notebooks RISE shows."""
    shutil.copy(TEMPLATES / "rise.css", folder / "rise.css")
    shutil.copy(TEMPLATES / "rise-talk.css", folder / f"{build_slides.TALK}.css")
    shutil.copytree(TEMPLATES / "fonts", folder / "fonts", dirs_exist_ok=True)


def notebooks_at(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(target.glob("[0-9][0-9]_*.ipynb")) + sorted(
            target.glob(f"{build_slides.TALK}.ipynb"))
    if target.suffix != ".ipynb" or not target.exists():
        raise SystemExit(f"fit_talk.py: {target} is neither a notebook nor a folder of them")
    return [target]


def main(target: str) -> None:
    path = Path(target)
    notebooks = notebooks_at(path)
    copy_styles(path if path.is_dir() else path.parent)
    if not build_slides.CHROMIUM.exists():
        print(f"!!! {build_slides.CHROMIUM} is missing: RISE gets 1280x720 but NO slide breaks "
              "(a slide may run off the screen); `make chromium` installs it !!!",
              file=sys.stderr)
        for notebook in notebooks:
            fit_copy(notebook, None, Path())
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        decks = Path(tmp)
        vendor = build_slides.ROOT / "build/slides/vendor"
        if vendor.is_dir():  # the decks' scripts, without asking npm again
            (decks / "vendor").symlink_to(vendor)
        else:
            build_slides.fetch_vendor(decks / "vendor")
        browser = p.chromium.launch(executable_path=str(build_slides.CHROMIUM),
                                    args=["--no-sandbox"])
        try:
            for notebook in notebooks:
                fit_copy(notebook, browser, decks)
        finally:
            browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
