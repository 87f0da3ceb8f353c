"""JupyterLab on loopback, driven by Debian's Chromium through Python playwright.

The server works on a copy of notebooks/ and imgs/ so that running cells (and JupyterLab's
autosave) never touches the committed notebooks. Screenshots land in
tests/browser/screenshots/, which the test run keeps.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).parent / "screenshots"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
TOKEN = "browser-tests"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings_dir: Path) -> None:
    """Every cell stays in the DOM (no windowing) and nothing asks before it runs.

    The news pop-up is left to the project's own jupyterlab/overrides.json (installed into
    the environment by `make setup`), so the tests see what `make lab` shows."""
    settings = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
            "windowingMode": "none", "autoStartDefaultKernel": True},
    }
    for name, value in settings.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def start_lab(root: Path, env: dict, extra_args: list[str]):
    """A JupyterLab server on loopback, serving ``root``; returns (process, base url) once it
    answers, or raises with the end of its log if it dies or takes over 120 s."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}", "--allow-root",
         "--LabApp.expose_app_in_browser=True",  # tests ask the kernel's state (kernel.py)
         *extra_args],
        env=env, stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
            return server, url
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError((root / "server.log").read_text()[-3000:]) from None
            time.sleep(0.5)


def stop_lab(server) -> None:
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    return SCREENSHOTS


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: browser tests SKIPPED "
                    "(install Debian's chromium package) !!!")
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    if (ROOT / "imgs").exists():
        shutil.copytree(ROOT / "imgs", root / "imgs")
    settings = root / "settings"
    _write_settings(settings)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"),
               JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_RUNTIME_DIR=str(root / "runtime"))
    server, url = start_lab(root, env, ["--ServerApp.disable_check_xsrf=True"])
    yield url, root
    stop_lab(server)


@pytest.fixture(scope="session")
def lab_url(lab_server) -> str:
    return lab_server[0]


@pytest.fixture(scope="session")
def lab_root(lab_server) -> Path:
    """The server's copy of the project: what JupyterLab saves lands here."""
    return lab_server[1]


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, lab_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{lab_url}/lab?token={TOKEN}")
    page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
    yield page
    context.close()
