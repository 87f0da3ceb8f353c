"""Give the notebook copies that `make present` opens in RISE the slide breaks of the decks.

Usage: python scripts/fit_talk.py build/talk/notebooks

Each copy is fitted the way `make slides` fits its deck (measured in headless Chromium at
1280x720); the copy then gets the same subslide breaks on its own cells and RISE metadata
for a 1280x720 slide. Cells the deck adds (title notes, the seeds slide, outputs shown on a
slide of their own) have no place in a live notebook, so a slide that still does not fit
may scroll. Only the copies are written; notebooks/ is never touched.
"""

import importlib.util
import sys
import tempfile
from pathlib import Path

import nbformat

_spec = importlib.util.spec_from_file_location("build_slides",
                                               Path(__file__).with_name("build_slides.py"))
build_slides = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_slides)

RISE = {"width": build_slides.WIDTH, "height": build_slides.HEIGHT, "scroll": True,
        "center": False, "margin": 0}


def copy_breaks(fitted, original) -> int:
    """Mark as subslide every ORIGINAL cell whose fitted counterpart starts one; count them."""
    breaks = 0
    for cell in fitted.cells:
        index = cell.metadata.get(build_slides.ORIGIN)
        if index is None or "slides-output-only" in cell.metadata.get("tags", []):
            continue
        target = original.cells[index]
        if (build_slides.slide_type(cell) == "subslide"
                and build_slides.slide_type(target) in ("-", "fragment")):
            build_slides.set_slide_type(target, "subslide")
            breaks += 1
    return breaks


def fit_copy(path: Path, browser, decks: Path) -> None:
    original = nbformat.read(path, as_version=4)
    if browser is not None:
        _, fitted = build_slides.build_fitted(path, decks, browser)
        print(f"{path.name}: {copy_breaks(fitted, original)} slide break(s) added")
    original.metadata["rise"] = {**original.metadata.get("rise", {}), **RISE}
    nbformat.write(original, path)


def main(folder: str) -> None:
    notebooks = sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if not build_slides.CHROMIUM.exists():
        print(f"!!! {build_slides.CHROMIUM} is missing: RISE gets 1280x720 but NO slide breaks",
              file=sys.stderr)
        for path in notebooks:
            fit_copy(path, None, Path())
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
            for path in notebooks:
                fit_copy(path, browser, decks)
        finally:
            browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
