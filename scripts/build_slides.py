"""Build reveal.js decks of the notebooks that work offline: every asset is local.

Usage: python scripts/build_slides.py [OUTDIR]   (default build/slides)

The decks load reveal.js, require.js, jQuery and MathJax from OUTDIR/vendor/, which is
filled once from the npm registry (`npm pack`, pinned versions) and reused afterwards.
"""

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from nbconvert import SlidesExporter

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "slides_template"
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
}
EXTERNAL = re.compile(r"""<(?:script|link|img)[^>]+(?:src|href)=["'](?:https?:)?//""")


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


def build_deck(notebook: Path, outdir: Path) -> Path:
    """Write NOTEBOOK's slides as OUTDIR/<stem>.slides.html, using only local assets."""
    exporter = SlidesExporter(template_name="offline", extra_template_basedirs=[str(TEMPLATES)],
                              **ASSET_URLS)
    body, _ = exporter.from_filename(str(notebook))
    external = external_assets(body)
    if external:
        raise RuntimeError(f"{notebook.name}: the deck still loads {external[:3]}")
    path = outdir / f"{notebook.stem}.slides.html"
    path.write_text(body)
    return path


def external_assets(html: str) -> list[str]:
    """Script, stylesheet and image tags that would load from another host."""
    return EXTERNAL.findall(html)


def main(outdir: str = "build/slides") -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    fetch_vendor(out / "vendor")
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        print(build_deck(notebook, out))


if __name__ == "__main__":
    main(*sys.argv[1:])
