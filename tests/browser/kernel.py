"""The notebook's kernel as JupyterLab itself knows it, for tests that run cells.

The toolbar's execution indicator reads "idle" before a busy machine has connected the
kernel, and a cell run before the connection can be lost with its prompt left at ``[*]``.
The lab is started with ``expose_app_in_browser``, so a test can ask the notebook's own
kernel connection instead: connected, and idle.
"""

from playwright.sync_api import TimeoutError as PlaywrightTimeout

KERNEL_READY = """() => {
    const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
    return kernel?.connectionStatus === 'connected' && kernel?.status === 'idle';
}"""

ALL_CELLS_RAN = """() => {
    const prompts = [...document.querySelectorAll(
        '.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
    return prompts.length > 0 && prompts.every(t => /\\[\\d+\\]/.test(t));
}"""

FIRST_CELL_STARTED = ("() => /\\[(\\*|\\d+)\\]/.test(document.querySelector("
                      "'.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')?.textContent ?? '')")


def wait_kernel_ready(page, timeout_ms: int = 180_000) -> None:
    """Wait until the current notebook's kernel is connected and idle."""
    page.wait_for_function(KERNEL_READY, timeout=timeout_ms, polling=250)


def press_run_all(page) -> None:
    page.locator(".jp-Notebook .jp-Cell").first.click()  # menus act on the active notebook
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").click()
    page.locator("li[data-command='runmenu:run-all']").click()


def run_all(page, timeout_ms: int = 180_000) -> None:
    """Run All once the kernel is connected, then wait until every code cell has an
    execution count and the kernel is idle again."""
    wait_kernel_ready(page, timeout_ms)
    for attempt in range(4):  # a press the lab did not take (a menu still opening): again
        press_run_all(page)
        try:
            page.wait_for_function(FIRST_CELL_STARTED, timeout=20_000, polling=100)
            break
        except PlaywrightTimeout:
            if attempt == 3:
                raise
    page.wait_for_function(ALL_CELLS_RAN, timeout=timeout_ms, polling=500)
    wait_kernel_ready(page, timeout_ms)
