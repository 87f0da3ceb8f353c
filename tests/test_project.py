"""The project's promises about itself: pins agree, notebooks are clean, links resolve."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + [
    ROOT / "notebooks/talk.ipynb"]


def _requirements_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_torch_is_pinned_exactly_so_no_cuda_build_is_pulled():
    assert _requirements_pins()["torch"] == "2.13.0"


def test_pyproject_ranges_admit_every_pin_and_have_upper_bounds():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared.extend(extra)
    pins = _requirements_pins()
    for text in declared:
        req = Requirement(text)
        assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), text
        pinned = pins.get(req.name.lower())
        assert pinned is not None, f"{req.name} is declared in pyproject but not pinned"
        assert req.specifier.contains(Version(pinned)), f"{text} rejects the pin {pinned}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_come_from_one_clean_run(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    for cell in nb["cells"]:
        assert "execution" not in cell.get("metadata", {}), "per-cell timing metadata"
    for cell in code:
        errors = [o for o in cell["outputs"] if o["output_type"] == "error"]
        if errors:
            assert "raises-exception" in cell["metadata"].get("tags", []), cell["source"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_starts_with_the_setup_cell(path):
    nb = json.loads(path.read_text())
    first_code = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    # the talk's start_talk() runs setup_notebook() first (tests/test_talk_setup.py)
    assert "setup_notebook()" in first_code or (path.name == "talk.ipynb"
                                                and "start_talk()" in first_code)


def _readme_links() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_readme_links_point_at_files_that_exist():
    for link in _readme_links():
        if link.startswith(("http://", "https://", "#")):
            continue
        assert (ROOT / link.split("#")[0]).exists(), link


def test_binder_links_open_existing_notebooks():
    targets = [m for link in _readme_links() for m in re.findall(r"labpath=([^&)]+)", link)]
    assert targets, "the README has no Binder links"
    for target in targets:
        assert (ROOT / target).is_file(), target


def test_every_notebook_is_linked_from_the_readme_and_the_index():
    readme = (ROOT / "README.md").read_text()
    index = (ROOT / "notebooks" / "00_index.ipynb").read_text()
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name}" in readme, path.name
        if path.name != "00_index.ipynb":
            assert path.name in index, path.name


def test_importing_every_talk_helpers_module_starts_no_process():
    script = (
        "import pkgutil, importlib, psutil, torch.distributed as dist, talk_helpers\n"
        "for m in pkgutil.walk_packages(talk_helpers.__path__, 'talk_helpers.'):\n"
        "    if not m.name.endswith('__main__') and '.demos.' not in m.name:\n"
        "        importlib.import_module(m.name)\n"
        "assert not dist.is_initialized()\n"
        "assert psutil.Process().children() == [], psutil.Process().children()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_collection_map_joins_bullets_wrapped_onto_the_next_line(tmp_path):
    from talk_helpers.notebook.collection import collection_map

    cell = {"cell_type": "markdown", "metadata": {}, "source": (
        "# 01 · A title\n\n**What you will learn**\n- one long bullet that\n  wraps here\n"
        "- a second one\n\n**Prerequisites**: none\n")}
    for name in ("00_index.ipynb", "01_map_style_and_iterable.ipynb"):
        (tmp_path / name).write_text(json.dumps({"cells": [cell]}))
    [entry] = collection_map(tmp_path).entries
    assert (entry.file, entry.title, entry.teaches) == (
        "01_map_style_and_iterable.ipynb", "A title",
        ("one long bullet that wraps here", "a second one"))


def _audit_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-audit.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_audit_only_libraries_are_pinned_exactly_and_never_bring_torch():
    pins = _audit_pins()
    assert {"litdata", "mosaicml-streaming"} <= set(pins)
    assert not {"torch", "torchvision"} & set(pins)
    assert not set(pins) & set(_requirements_pins())


def test_every_requirement_is_met_except_the_named_audit_gaps():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_requirements.py")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
    assert "known: litdata requires torchvision" in done.stdout


def _code_files() -> dict[str, str]:
    """Every piece of code the project ships or runs: the package, scripts, benchmarks and
    the notebooks' code cells, by name."""
    found = {str(p.relative_to(ROOT)): p.read_text()
             for pattern in ("talk_helpers/**/*.py", "scripts/*.py", "benchmarks/*.py")
             for p in ROOT.glob(pattern)}
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        found[str(path.relative_to(ROOT))] = "\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return found


def test_only_private_dirs_names_a_place_in_the_shared_temporary_folder():
    """A fixed name in the temporary folder belongs to whichever user makes it first: files
    go under talk_helpers.private_dirs (or mkdtemp's random, private folders) instead."""
    allowed = {
        "talk_helpers/private_dirs.py",  # the one rule: this user's folder in it
        "benchmarks/binder_check.py",  # the pod's own /tmp, a folder mounted for it alone
    }
    shared = re.compile(r"gettempdir\(|[\"']/tmp\b")
    named = {name for name, text in _code_files().items() if shared.search(text)}
    assert named - allowed == set()
