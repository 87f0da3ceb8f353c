import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_slides", ROOT / "scripts/build_slides.py")
build_slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_slides)


def test_index_deck_loads_every_asset_from_the_local_vendor_folder(tmp_path):
    deck = build_slides.build_deck(ROOT / "notebooks/00_index.ipynb", tmp_path).read_text()
    assert build_slides.external_assets(deck) == []
    assert 'src="vendor/requirejs/require.js"' in deck
    assert "vendor/reveal.js/dist/reveal.js" in deck


def test_a_cdn_script_is_recognised_as_external():
    html = '<script src="https://unpkg.com/reveal.js/dist/reveal.js"></script>'
    assert build_slides.external_assets(html)
