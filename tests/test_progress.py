"""A progress bar leaves its finished state in a notebook, never its first frame."""

import pytest

from talk_helpers import progress as progress_module
from talk_helpers.progress import progress


class _Handle:
    def __init__(self):
        self.shown = []

    def update(self, data, raw=False):
        self.shown.append(data["text/plain"])


def test_a_notebook_bar_ends_as_a_summary_of_what_was_done(monkeypatch):
    handle = _Handle()
    monkeypatch.setattr(progress_module, "in_notebook", lambda: True)
    monkeypatch.setattr("IPython.display.display",
                        lambda data, raw, display_id: handle.shown.append(data["text/plain"])
                        or handle)
    with progress(total=300, desc="map", unit="samples") as bar:
        for _ in range(3):
            bar.update(100)
    assert handle.shown[0].startswith("map:   0%")
    assert handle.shown[-1] == "✔ map: 300 samples"


def test_outside_a_notebook_it_is_a_plain_tqdm_bar(capsys):
    with progress(total=2, desc="loop", unit="step") as bar:
        bar.update(2)
    assert bar.n == 2


@pytest.mark.parametrize("total", [-1, 2.5, True, "10"])
def test_a_bad_total_is_named(total):
    with pytest.raises((TypeError, ValueError), match="total must be"):
        with progress(total=total):
            pass
