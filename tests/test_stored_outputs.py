"""What a reader sees without a kernel: every stored figure is a picture, no progress bar
is frozen at its start."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + [
    ROOT / "notebooks/talk.ipynb"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
BARE_FIGURE = re.compile(r"^<(?:matplotlib\.figure\.)?Figure size [\d.]+x[\d.]+ with \d+ Axes>$")
# tqdm's own format: "label:  0%|    | 0/20000 [00:00<?, ?samples/s]", "0samples [00:00, ?it/s]"
TQDM_BAR = re.compile(r"(?P<percent>\d+)%\|[^|]*\|\s*\d+/\d+ \[\d\d:\d\d"
                      r"|(?:^|[\s:])(?P<count>\d+)[A-Za-z]* \[\d\d:\d\d, ")


def _text(data) -> str:
    return "".join(data) if isinstance(data, list) else str(data)


def _outputs(path: Path):
    nb = json.loads(path.read_text())
    for number, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            for out in cell["outputs"]:
                yield number, out


def bare_figures(path: Path) -> list[str]:
    """Outputs whose only picture of a matplotlib Figure is its text repr."""
    return [f"cell {n}: {_text(out['data']['text/plain'])}" for n, out in _outputs(path)
            if BARE_FIGURE.match(_text(out.get("data", {}).get("text/plain", "")).strip())
            and "image/png" not in out.get("data", {})]


def stale_progress_bars(path: Path) -> list[str]:
    """Progress bars stored before they finished: a tqdm widget (its state is never saved,
    so a static viewer sees its first frame), or tqdm text short of 100 %."""
    found = []
    for n, out in _outputs(path):
        data = out.get("data", {})
        text = _text(out.get("text", "")) + _text(data.get("text/plain", ""))
        for match in TQDM_BAR.finditer(text):
            stuck = (match["percent"] is not None and int(match["percent"]) < 100) or \
                    (match["count"] is not None and int(match["count"]) == 0)
            if stuck or WIDGET_VIEW in data:
                found.append(f"cell {n}: {match.group(0)!r}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_stored_figure_is_drawn_not_a_bare_repr(path):
    assert bare_figures(path) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_progress_bar_is_frozen_at_its_start(path):
    assert stale_progress_bars(path) == []


def _notebook(tmp_path, outputs) -> Path:
    cell = {"cell_type": "code", "metadata": {}, "source": "", "execution_count": 1,
            "outputs": outputs}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}}))
    return path


def test_a_figure_repr_without_its_png_is_found(tmp_path):
    repr_only = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                 "data": {"text/plain": "<Figure size 640x480 with 1 Axes>"}}
    drawn = {**repr_only, "data": {**repr_only["data"], "image/png": "iVBORw0KGgo="}}
    assert bare_figures(_notebook(tmp_path, [repr_only])) == \
        ["cell 0: <Figure size 640x480 with 1 Axes>"]
    assert bare_figures(_notebook(tmp_path, [drawn])) == []


@pytest.mark.parametrize("text", ["ceiling:   0%|          | 0/20000 [00:00<?, ?samples/s]",
                                  "map: 0samples [00:00, ?samples/s]",
                                  "0 workers:  40%|####      | 12/30 [00:01<00:02, 9.1step/s]"])
def test_a_progress_bar_short_of_its_end_is_found(tmp_path, text):
    out = {"output_type": "stream", "name": "stderr", "text": text}
    assert len(stale_progress_bars(_notebook(tmp_path, [out]))) == 1


def test_a_finished_text_progress_bar_is_not_flagged(tmp_path):
    out = {"output_type": "stream", "name": "stderr",
           "text": "map: 100%|##########| 20000/20000 [00:01<00:00, 14.2ksamples/s]"}
    assert stale_progress_bars(_notebook(tmp_path, [out])) == []


def test_a_progress_bar_widget_is_flagged_even_when_finished(tmp_path):
    out = {"output_type": "display_data", "metadata": {},
           "data": {WIDGET_VIEW: {"model_id": "abc", "version_major": 2, "version_minor": 0},
                    "text/plain": "map: 100%|##########| 20000/20000 [00:01<00:00, 1it/s]"}}
    assert len(stale_progress_bars(_notebook(tmp_path, [out]))) == 1
