"""Binder: its own environment (what a visitor runs, none of the server repo2docker
installs), a requirement check limited to the project, the from-a-link cells, and every
link to the repository made from one address. `make binder-build-check` replays the build."""

import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import binder_build_check  # noqa: E402
import check_requirements  # noqa: E402
import links  # noqa: E402

FROM_A_LINK = ["02_workers_and_sharding.ipynb", "03_shuffling.ipynb",
               "06_uneven_batches_and_hangs.ipynb", "09_the_exercise_solved.ipynb",
               "11_when_it_breaks_in_production.ipynb"]
TEST_TOOLS = {"pytest", "pytest-timeout", "pytest-xdist", "hypothesis", "ruff", "playwright",
              "nbval"}
# What repo2docker's server environment holds; a pin here would replace its version
SERVER = {"notebook", "jupyterlab", "jupyter-server", "jupyterhub", "ipykernel", "nbformat",
          "nbclient", "nbconvert", "jupyter-resource-usage", "jupyter-offlinenotebook"}


def _pins(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            pins[req.name.lower()] = str(req.specifier)
    return pins


def _binder_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    return _pins(next(d["pip"] for d in env["dependencies"] if isinstance(d, dict)))


def test_binder_installs_what_a_visitor_runs_at_the_pins_of_make_lab_and_no_test_tool():
    binder = _binder_pins()
    lab = _pins((ROOT / "requirements.txt").read_text().splitlines())
    assert {"torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab-rise"} <= set(binder)
    assert {name: lab[name] for name in binder} == binder
    assert not TEST_TOOLS & set(binder)
    assert binder["torch"] == "==2.13.0"


def test_binder_pins_no_package_of_repo2docker_s_server():
    assert not SERVER & set(_binder_pins())
    server = _pins((ROOT / "binder" / "repo2docker-py3.11.txt").read_text().splitlines())
    assert SERVER - {"nbformat", "nbclient", "nbconvert", "ipykernel"} <= set(server)


def test_binder_uses_python_3_11_from_conda_forge_and_torch_s_cpu_index():
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"] and "python=3.11" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    # nothing from the repository: Binder keeps the environment's layer across commits
    assert not any(line.startswith(("-e", ".", "-r")) for line in pip)


def test_post_build_is_executable_and_installs_the_package_and_the_audited_libraries():
    post_build = ROOT / "binder" / "postBuild"
    assert os.access(post_build, os.X_OK)
    text = post_build.read_text()
    assert "pip install --no-deps --no-build-isolation -e ." in text
    assert "-r requirements-audit.txt" in text
    assert "check_requirements.py binder/environment.yml requirements-audit.txt" in text


def test_the_replay_reads_binder_s_pip_section_without_the_torch_index():
    lines = binder_build_check.pip_section(ROOT / "binder" / "environment.yml")
    assert "torch==2.13.0" in lines
    assert not any("download.pytorch.org" in line for line in lines)
    assert _pins(lines) == _binder_pins()


class _Dist:
    def __init__(self, name, version, requires=()):
        self.metadata, self.version, self.requires = {"Name": name}, version, list(requires)


def test_a_server_package_s_unmet_requirement_is_not_the_project_s(monkeypatch):
    dists = [_Dist("talk-helpers", "0.1.0", ["torch>=2.4"]), _Dist("torch", "2.13.0"),
             _Dist("notebook", "7.4.7", ["jupyterlab<4.5,>=4.4.9"]),
             _Dist("jupyterlab", "4.6.6")]
    monkeypatch.setattr(metadata, "distributions", lambda: dists)
    assert check_requirements.unmet([Requirement("talk-helpers")]) == []
    assert check_requirements.unmet([Requirement("notebook")]) == [
        ("notebook", "jupyterlab<4.5,>=4.4.9", "have 4.6.6")]


def test_a_project_requirement_unmet_deep_down_is_found(monkeypatch):
    dists = [_Dist("talk-helpers", "0.1.0", ["datasets>=3"]),
             _Dist("datasets", "5.2.0", ["pyarrow>=15", 'fsspec; extra == "s3"']),
             _Dist("pyarrow", "14.0.0")]
    monkeypatch.setattr(metadata, "distributions", lambda: dists)
    assert check_requirements.unmet([Requirement("talk-helpers")]) == [
        ("datasets", "pyarrow>=15", "have 14.0.0")]
    assert ("datasets", 'fsspec; extra == "s3"', "not installed") in \
        check_requirements.unmet([Requirement("datasets[s3]")])


def _cells(name):
    return json.loads((ROOT / "notebooks" / name).read_text())["cells"]


def _anchors(cells) -> set[str]:
    """Heading anchors as JupyterLab and nbviewer make them (spaces to dashes)."""
    found = set()
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for heading in re.findall(r"^#+ (.*)$", "".join(cell["source"]), re.M):
                found.add(heading.replace("`", "").strip().replace(" ", "-"))
    return found


@pytest.mark.parametrize("name", FROM_A_LINK)
def test_a_visitor_from_a_link_meets_the_answer_a_check_a_fix_and_where_it_is_shown(name):
    cells = _cells(name)
    first = "".join(cells[1]["source"])
    assert cells[1]["cell_type"] == "markdown" and first.startswith("## Came here from a link?")
    assert re.search(r"^1\. .*^2\. .*^3\. ", first, re.S | re.M), "the answer in three lines"
    assert "**Check your loader**" in first and "```" in first
    assert re.search(r"\*\*The fix(es)? to paste", first)
    shown = re.findall(r"\]\(#([^)]+)\)", first)
    assert shown and set(shown) <= _anchors(cells), set(shown) - _anchors(cells)
    words = re.findall(r"\]\(00_index\.ipynb#([^)]+)\)", first)
    assert words and set(words) <= _anchors(_cells("00_index.ipynb"))


def test_every_link_to_the_repository_is_made_from_its_one_address():
    """README badges, docs/*.md, the notebooks' links and the talk's QR code."""
    assert links.check() == []


def test_a_link_to_another_ref_or_place_is_caught_and_rewritten():
    address = links.address
    wrong = address.binder_url("notebooks/02_workers_and_sharding.ipynb").replace(
        f"/{address.REF}?", "/HEAD?")
    moved = "https://nbviewer.org/github/someone/else/blob/v1/notebooks/03_shuffling.ipynb#x"
    text = f"[a]({wrong}) [b]({moved}) github.com/{address.REPOSITORY.split('/')[0]}/old-name"
    assert [want for _, want in links.disagreements(text)] == [
        address.binder_url("notebooks/02_workers_and_sharding.ipynb"),
        address.nbviewer_url("notebooks/03_shuffling.ipynb", "x"),
        "github.com/" + address.REPOSITORY]


def test_the_talk_s_qr_code_names_the_repository():
    texts = links.texts()
    titles = [t for where, t in texts.items() if where.startswith("notebooks/talk.ipynb")
              and "github.com" in t]
    assert titles and all(links.disagreements(t) == [] for t in titles)


def test_write_rewrites_the_readme_s_and_docs_links_keeping_what_each_opens(tmp_path, monkeypatch):
    address = links.address
    (tmp_path / "docs").mkdir()
    stale = (f"[b](https://mybinder.org/v2/gh/{address.REPOSITORY}/HEAD?labpath=notebooks/06_x.ipynb)"
             f" [v](https://nbviewer.org/github/{address.REPOSITORY}/blob/HEAD/notebooks/09_y.ipynb#Step)")
    (tmp_path / "README.md").write_text(stale)
    (tmp_path / "docs" / "page.md").write_text(stale)
    monkeypatch.setattr(links, "ROOT", tmp_path)
    assert links.write() == [tmp_path / "README.md", tmp_path / "docs" / "page.md"]
    fresh = (f"[b]({address.binder_url('notebooks/06_x.ipynb')})"
             f" [v]({address.nbviewer_url('notebooks/09_y.ipynb', 'Step')})")
    assert (tmp_path / "README.md").read_text() == fresh
    assert links.check() == []  # (no notebooks there)
