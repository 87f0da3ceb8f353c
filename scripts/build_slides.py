"""Build reveal.js decks of the notebooks that fit a 1280x720 screen and work offline.

Usage: python scripts/build_slides.py [OUTDIR]   (default build/slides)

The decks load reveal.js, require.js, jQuery and MathJax from OUTDIR/vendor/, which is
filled once from the npm registry (`npm pack`, pinned versions) and reused afterwards.
Each notebook is prepared in memory (the files are never touched): a failing cell shows
only its last error line, a widget shows its stored PNG (never its repr), the title slide
keeps its heading and first paragraph (the rest becomes speaker notes), and the first
mention of a numbered seed gets a slide saying what the seeds are. The deck is then
measured in headless Chromium and every slide taller than the screen is split at a cell
boundary; a single cell still too tall is scaled down, never below 60 %.
"""

import copy
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "slides_template"
CHROMIUM = Path("/usr/bin/chromium")
WIDTH, HEIGHT = 1280, 720
MIN_ZOOM = 60  # percent: below this, code on a projector is no longer readable
FIT_PASSES = 10
VENDOR = {  # npm package@version -> folder under vendor/
    "reveal.js@4.0.2": "reveal.js",
    "requirejs@2.3.7": "requirejs",
    "jquery@2.2.4": "jquery",
    "mathjax@2.7.9": "mathjax",
}
ASSET_URLS = {
    "reveal_url_prefix": "vendor/reveal.js",
    "reveal_theme": "white",  # its fonts ship with reveal.js; "simple" imports web fonts
    "require_js_url": "vendor/requirejs/require.js",
    "jquery_url": "vendor/jquery/dist/jquery.min.js",
    "mathjax_url": "vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe",
    "reveal_width": str(WIDTH),
    "reveal_height": str(HEIGHT),
}
EXTERNAL = re.compile(r"""<(?:script|link|img)[^>]+(?:src|href)=["'](?:https?:)?//""")
ORIGIN = "slides_origin"  # index of the notebook cell a prepared cell came from
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SEED_MENTION = re.compile(r"\b[Ss]eeds? 00[0-4]\b")
SEEDS_SLIDE = """## Seed 000? Seed 001?

The talk was written from five source documents, numbered like seeds:

- **000**: notes from a training run that hung (HF `datasets` + DDP + workers, uneven shards)
- **001**: the README of WebDataset's distributed example (unequal batches per node)
- **002**: the original talk, *Implementing and using iterable datasets: What Could Go Wrong?*
- **003**: notes on porting Megatron-LM's data loading into nanotron
- **004**: a course module on distributed data loading

"Seed 000 says..." means: the first document says it. The notebooks check it by running it."""


def fetch_vendor(vendor_dir: Path) -> None:
    """Unpack each pinned npm package into vendor_dir unless it is there already."""
    for spec, folder in VENDOR.items():
        target = vendor_dir / folder
        if target.exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["npm", "pack", spec, "--pack-destination", tmp, "--silent"],
                           check=True, stdout=subprocess.DEVNULL)
            (tarball,) = Path(tmp).glob("*.tgz")
            with tarfile.open(tarball) as tar:
                tar.extractall(tmp, filter="data")
            shutil.move(Path(tmp) / "package", target)


# --- preparing a notebook in memory -------------------------------------------------------

def slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def set_slide_type(cell, kind: str) -> None:
    cell.setdefault("metadata", {}).setdefault("slideshow", {})["slide_type"] = kind


def short_error(output: dict) -> dict:
    """The error output with its traceback cut to the one line a slide can show."""
    short = copy.deepcopy(output)
    evalue = output.get("evalue", "")
    if len(evalue) > 240:
        evalue = evalue[:237] + "..."
    short["traceback"] = [f"\x1b[0;31m{output.get('ename', 'Error')}\x1b[0m: {evalue}"]
    return short


def slide_outputs(outputs: list) -> list:
    """Outputs as a slide shows them: short errors, widgets as their PNG or not at all."""
    kept = []
    for output in outputs:
        if output.get("output_type") == "error":
            kept.append(short_error(output))
            continue
        data = output.get("data", {})
        if WIDGET_VIEW in data:
            if "image/png" not in data:
                continue  # a widget without a still would only show its repr
            output = copy.deepcopy(output)
            output["data"] = {"image/png": data["image/png"]}
        kept.append(output)
    return kept


def local_image_paths(source: str) -> str:
    """Point markdown and HTML images at imgs/ next to the deck, not ../imgs/ of notebooks/."""
    return re.sub(r"(\]\(|src=[\"'])\.\./imgs/", r"\1imgs/", source)


def split_title(cell) -> list:
    """The title cell as a short slide (heading + first paragraph) and the rest as notes."""
    blocks = cell["source"].strip().split("\n\n")
    head = [blocks.pop(0)]
    if blocks and blocks[0].lstrip().startswith("#"):
        head.append(blocks.pop(0))
    if blocks and not blocks[0].lstrip().startswith(("-", "*", "[", "|")):
        head.append(blocks.pop(0))
    title = copy.deepcopy(cell)
    title["source"] = "\n\n".join(head)
    if not blocks:
        return [title]
    notes = nbformat.v4.new_markdown_cell("\n\n".join(blocks))
    set_slide_type(notes, "notes")
    return [title, notes]


def seeds_cell():
    cell = nbformat.v4.new_markdown_cell(SEEDS_SLIDE)
    set_slide_type(cell, "subslide")
    return cell


def prepare(nb):
    """A copy of NB arranged for the projector (see the module docstring)."""
    nb = copy.deepcopy(nb)
    cells, seeds_done = [], False
    for index, cell in enumerate(nb.cells):
        cell = copy.deepcopy(cell)
        cell.metadata[ORIGIN] = index
        if cell.cell_type == "markdown":
            cell["source"] = local_image_paths(cell["source"])
        if cell.cell_type == "code":
            cell["outputs"] = slide_outputs(cell.get("outputs", []))
        names_seed = (not seeds_done and slide_type(cell) not in ("skip", "notes")
                      and SEED_MENTION.search(cell["source"]))
        if index == 0 and cell.cell_type == "markdown":
            cells.extend(split_title(cell))
            if names_seed:  # the title comes first; the seeds slide follows it
                cells.append(seeds_cell())
                seeds_done = True
            continue
        if names_seed:
            cells.append(seeds_cell())
            seeds_done = True
            if slide_type(cell) in ("-", "fragment"):
                set_slide_type(cell, "subslide")
        cells.append(cell)
    nb.cells = cells
    for number, cell in enumerate(nb.cells):
        cell["id"] = f"c{number}"
    return nb


# --- fitting ----------------------------------------------------------------------------

def split_points(cells: list[tuple[str, int, int]], height: int = HEIGHT) -> list[str]:
    """Cells (id, top, bottom, in slide pixels) of one slide: where to start new subslides.

    A cell that starts on screen but ends below it, or starts below it, begins a new
    subslide, unless it is the slide's first cell (nothing to split off before it)."""
    points, first, offset = [], None, None
    for cell_id, top, bottom in cells:
        if bottom <= top:
            continue  # an empty or hidden cell takes no room
        if first is None:
            first = offset = top
            continue
        if first + bottom - offset > height:
            points.append(cell_id)
            offset = top
    return points


def zoom_for(cell_height: int, room: int = HEIGHT - 40) -> int | None:
    """Percent to scale a cell taller than ROOM by (5 % steps, floor MIN_ZOOM), or None."""
    if cell_height <= room:
        return None
    percent = int(100 * room / cell_height) // 5 * 5
    return max(MIN_ZOOM, percent)


def detach_outputs(nb, cell_id: str) -> None:
    """Show a code cell's outputs on a subslide of their own, after its source."""
    for index, cell in enumerate(nb.cells):
        if cell.get("id") == cell_id and cell.cell_type == "code" and cell.outputs:
            shown = copy.deepcopy(cell)
            shown["id"] = f"{cell_id}o"
            shown.metadata["tags"] = [t for t in shown.metadata.get("tags", [])
                                      if not t.startswith("slides-zoom-")] + ["slides-output-only"]
            set_slide_type(shown, "subslide")
            cell["outputs"] = []
            nb.cells.insert(index + 1, shown)
            return


def halve_markdown(source: str) -> tuple[str, str] | None:
    """SOURCE cut at the blank line or list item nearest its middle (outside fences), or None."""
    lines, fenced, cuts = source.split("\n"), False, []
    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif (not fenced and 0 < number < len(lines) - 1
              and (not line.strip() or line.startswith(("- ", "* ")))):
            cuts.append(number)  # a blank line, or a top-level list item
    if not cuts:
        return None
    cut = min(cuts, key=lambda number: abs(number - len(lines) / 2))
    return "\n".join(lines[:cut]).strip(), "\n".join(lines[cut:]).strip()


def split_markdown(nb, cell_id: str) -> bool:
    """Put the second half of a markdown cell on a subslide of its own; False if it cannot."""
    for index, cell in enumerate(nb.cells):
        if cell.get("id") == cell_id and cell.cell_type == "markdown":
            halves = halve_markdown(cell.source)
            if halves is None:
                return False
            rest = copy.deepcopy(cell)
            rest["id"] = f"{cell_id}m{len(nb.cells)}"
            cell["source"], rest["source"] = halves
            set_slide_type(rest, "subslide")
            nb.cells.insert(index + 1, rest)
            return True
    return False


def halve_table(html: str) -> tuple[str, str] | None:
    """An HTML table as two tables of half its rows each (the header row in both), or None."""
    rows = [m.start() for m in re.finditer(r"<tr[\s>]", html)]
    end = html.rfind("</table>")
    if len(rows) < 4 or end < rows[-1] or html.count("<table") != 1:
        return None
    head, body = html[:rows[1]], html[rows[1]:end]
    cut = rows[(len(rows) + 1) // 2] - rows[1]
    tail = html[end:]
    return head + body[:cut] + tail, head + body[cut:] + tail


def split_table_output(nb, cell_id: str) -> bool:
    """Show the second half of an output-only cell's HTML table on a subslide of its own."""
    for index, cell in enumerate(nb.cells):
        if (cell.get("id") != cell_id or cell.cell_type != "code" or len(cell.outputs) != 1
                or "text/html" not in cell.outputs[0].get("data", {})):
            continue
        halves = halve_table(cell.outputs[0]["data"]["text/html"])
        if halves is None:
            return False
        rest = copy.deepcopy(cell)
        rest["id"] = f"{cell_id}t{len(nb.cells)}"
        cell.outputs[0]["data"]["text/html"], rest.outputs[0]["data"]["text/html"] = halves
        set_slide_type(rest, "subslide")
        nb.cells.insert(index + 1, rest)
        return True
    return False


def apply_fit(nb, splits: set[str], zooms: dict[str, int]) -> None:
    for cell in nb.cells:
        if cell.get("id") in splits and slide_type(cell) in ("-", "fragment"):
            set_slide_type(cell, "subslide")
        if cell.get("id") in zooms:
            tags = [t for t in cell.metadata.get("tags", []) if not t.startswith("slides-zoom-")]
            cell.metadata["tags"] = tags + [f"slides-zoom-{zooms[cell['id']]}"]


MEASURE_JS = """() => {
  const out = [];
  for (const slide of document.querySelectorAll('.reveal .slides section')) {
    if (slide.querySelector('section')) continue;
    Reveal.slide(...Object.values(Reveal.getIndices(slide)).slice(0, 2));
    const cells = [];
    for (const cell of slide.querySelectorAll('.jp-Cell')) {  // fragments wrap some cells
      const top = cell.offsetTop;
      cells.push([cell.id.replace('cell-id=', ''), top, top + cell.offsetHeight]);
    }
    out.push({height: slide.scrollHeight, cells});
  }
  return out;
}"""


def open_deck(browser, path: Path):
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.goto(path.resolve().as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady && Reveal.isReady()")
    return page


def measure(browser, path: Path) -> list[dict]:
    page = open_deck(browser, path)
    try:
        return page.evaluate(MEASURE_JS)
    finally:
        page.close()


def fit_deck(browser, nb, path: Path, render) -> int:
    """Split and scale NB until its deck at PATH fits; returns how many slides still do not.

    In order: split a slide before the cell that crosses the bottom edge; a lone cell too
    tall gets its outputs on a subslide of their own; a lone part still too tall is scaled
    down (5 % steps, never below MIN_ZOOM)."""
    zooms: dict[str, int] = {}
    for _ in range(FIT_PASSES):
        changed = False
        for slide in measure(browser, path):
            if slide["height"] <= HEIGHT:
                continue
            cells = [tuple(c) for c in slide["cells"]]
            splits = split_points(cells)
            if splits:
                apply_fit(nb, set(splits), {})
                changed = True
                continue
            for cell_id, top, bottom in cells:
                cell = next((c for c in nb.cells if c.get("id") == cell_id), None)
                if cell is None:
                    continue
                if (cell.cell_type == "code" and cell.outputs and cell.source.strip()
                        and "slides-output-only" not in cell.metadata.get("tags", [])):
                    detach_outputs(nb, cell_id)
                    changed = True
                    continue
                current = zooms.get(cell_id, 100)
                zoom = zoom_for(int((bottom - top) * 100 / current))
                if zoom == MIN_ZOOM and (split_markdown(nb, cell_id)
                                         or split_table_output(nb, cell_id)):
                    changed = True
                    continue
                if zoom and zoom < current:
                    zooms[cell_id] = zoom
                    apply_fit(nb, set(), zooms)
                    changed = True
        if not changed:
            break
        render(nb)
    return sum(slide["height"] > HEIGHT for slide in measure(browser, path))


# --- building ---------------------------------------------------------------------------

def render_deck(nb, path: Path) -> None:
    exporter = SlidesExporter(template_name="offline", extra_template_basedirs=[str(TEMPLATES)],
                              **ASSET_URLS)
    body, _ = exporter.from_notebook_node(nb)
    body = body.replace(f"height: {HEIGHT},", f"height: {HEIGHT}, margin: 0, center: false,", 1)
    body = body.replace("function(Reveal, RevealNotes){",  # tests and the fit drive Reveal
                        "function(Reveal, RevealNotes){ window.Reveal = Reveal;", 1)
    external = external_assets(body)
    if external:
        raise RuntimeError(f"{path.name}: the deck still loads {external[:3]}")
    path.write_text(body)


def build_deck(notebook: Path, outdir: Path, browser=None) -> Path:
    """Write NOTEBOOK's slides as OUTDIR/<stem>.slides.html, fitted if a browser is given."""
    return build_fitted(notebook, outdir, browser)[0]


def build_fitted(notebook: Path, outdir: Path, browser=None):
    """The deck's path and the prepared (and, with a browser, fitted) notebook."""
    copy_assets(outdir)
    nb = prepare(nbformat.read(notebook, as_version=4))
    path = outdir / f"{notebook.stem}.slides.html"
    render_deck(nb, path)
    if browser is not None:
        left = fit_deck(browser, nb, path, lambda fitted: render_deck(fitted, path))
        if left:
            print(f"{path.name}: {left} slide(s) still taller than {HEIGHT}px", file=sys.stderr)
    return path, nb


def copy_assets(outdir: Path) -> None:
    """fit.css and imgs/ next to the decks, so every image loads offline."""
    outdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(TEMPLATES / "fit.css", outdir / "fit.css")
    if (ROOT / "imgs").is_dir():
        shutil.copytree(ROOT / "imgs", outdir / "imgs", dirs_exist_ok=True)


def external_assets(html: str) -> list[str]:
    """Script, stylesheet and image tags that would load from another host."""
    return EXTERNAL.findall(html)


def build_all(outdir: Path, fit: bool = True) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    fetch_vendor(outdir / "vendor")
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not (fit and CHROMIUM.exists()):
        if fit:
            print(f"!!! {CHROMIUM} is missing: decks built WITHOUT fitting to the screen !!!",
                  file=sys.stderr)
        return [build_deck(nb, outdir) for nb in notebooks]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            return [build_deck(nb, outdir, browser) for nb in notebooks]
        finally:
            browser.close()


def main(outdir: str = "build/slides") -> None:
    for path in build_all(Path(outdir)):
        print(path)


if __name__ == "__main__":
    main(*sys.argv[1:])
