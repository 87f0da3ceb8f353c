from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from talk_helpers.diagrams import all_figures  # noqa: E402
from talk_helpers.diagrams.__main__ import main  # noqa: E402

IMGS = Path(__file__).resolve().parent.parent / "imgs"


def test_every_figure_has_a_committed_png():
    missing = [name for name in all_figures() if not (IMGS / name).is_file()]
    assert not missing, f"run `make imgs` and commit {missing}"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("imgs")
    main([str(out)])
    return out


@pytest.mark.parametrize("name", sorted(all_figures()))
def test_committed_png_matches_a_fresh_rendering(regenerated, name):
    fresh, committed = mpimg.imread(regenerated / name), mpimg.imread(IMGS / name)
    assert fresh.shape == committed.shape, f"{name} changed size: run `make imgs`"
    assert np.array_equal(fresh, committed), f"{name} changed: run `make imgs`"


def test_grid_title_counts_duplicated_ids_and_missing_ids_as_the_check_does():
    from talk_helpers.diagrams.workers import assignment_grid

    fig = assignment_grid([(0, 0), (0, 1), (2, 0), (2, (1, 0))], n_ids=4)
    title = fig.axes[0].get_title(loc="left")
    assert "2 of 4 ids received · 2 duplicated · 2 missing" in title
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "worker 0", "worker 1", "rank 1 · worker 0"]


def test_every_figure_function_displays_as_a_png_in_ipython_without_pyplot_setup():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for name, make in all_figures().items():
        data, _ = shell.display_formatter.format(make())
        assert "image/png" in data, f"{name} would show as a bare <Figure …> repr"


def test_a_figure_function_leaves_no_figure_open_in_pyplot():
    import matplotlib.pyplot as plt

    plt.close("all")
    for make in all_figures().values():
        make()
    assert plt.get_fignums() == [], "pyplot would draw these again at the end of the cell"
