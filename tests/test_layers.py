"""The package's layers: dependencies point down, no import cycle, a short top level, and
importing anything changes nothing (no environment variable, no exit hook)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "talk_helpers"

# Lower numbers are lower layers; a module may import from its own layer or below.
LAYERS = {
    "reference": 0,
    "arguments": 1, "environment": 1, "palette": 1, "private_dirs": 1, "progress": 1,
    "third_party": 1, "verdicts": 1,
    "model": 2,
    "checks": 3,
    "runtime": 4,
    "lessons": 5,
    "libraries": 6,
    "audit": 7,
    "notebook": 8, "diagrams": 8, "widgets": 8, "demos": 8, "exercises": 8,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The talk_helpers modules ``name`` imports, anywhere in its code (functions too)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in MODULES:
                candidate = candidate.rpartition(".")[0]
            if candidate.startswith("talk_helpers.") and candidate != name:
                targets.add(candidate)
    return targets


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int:
    top = name.split(".")[1]
    return LAYERS[top]


def test_every_part_of_the_package_has_a_layer():
    tops = {name.split(".")[1] for name in MODULES if name != "talk_helpers"}
    assert tops <= set(LAYERS), f"give these a layer in LAYERS: {sorted(tops - set(LAYERS))}"


def test_no_module_imports_a_higher_layer():
    upward = sorted(f"{a} -> {b}" for a, targets in GRAPH.items() if a != "talk_helpers"
                    for b in targets if _layer(b) > _layer(a))
    assert upward == []


def test_no_import_cycle():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    assert cycles == []


def test_the_top_level_holds_at_most_eight_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


def test_the_reference_dataset_needs_only_torch_and_numpy():
    path = PACKAGE / "reference" / "sharded_iterable.py"
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            roots.add(node.module.split(".")[0])
    assert roots - set(sys.stdlib_module_names) <= {"torch", "numpy"}


# Imported first, so that what they do at import (torch._dynamo sets
# TORCHINDUCTOR_CACHE_DIR) is not counted against talk_helpers.
THIRD_PARTY = ("torch", "torch._dynamo", "torch.distributed", "numpy", "matplotlib.pyplot",
               "ipywidgets", "psutil", "tqdm")
_PROBE = """
import atexit, importlib, json, os, sys
for name in {third_party!r}:
    importlib.import_module(name)
hooks = []
atexit.register = lambda fn, *a, **k: hooks.append(getattr(fn, "__qualname__", repr(fn)))
found = {{}}
for module in {modules!r}:
    before, hooks[:] = dict(os.environ), []
    importlib.import_module(module)
    changed = sorted(k for k in set(before) | set(os.environ)
                     if before.get(k) != os.environ.get(k))
    if changed or hooks:
        found[module] = {{"environment": changed, "exit_hooks": list(hooks)}}
print(json.dumps(found))
"""


def test_importing_any_module_changes_no_environment_and_registers_no_hook():
    code = _PROBE.format(third_party=THIRD_PARTY, modules=sorted(MODULES))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}


# The scope line: lines of each part of the package (its .py files, blank lines and
# docstrings included, as `wc -l` counts them) and of the README. A change that needs more
# room changes this table on purpose, in the same commit, and says why.
LINE_BUDGETS = {
    "talk_helpers/*.py": 340,
    "talk_helpers/audit": 4753,
    "talk_helpers/checks": 2977,
    "talk_helpers/demos": 350,
    "talk_helpers/diagrams": 1167,
    "talk_helpers/exercises": 2168,
    "talk_helpers/lessons": 3669,
    "talk_helpers/libraries": 1052,
    "talk_helpers/model": 593,
    "talk_helpers/notebook": 1171,
    "talk_helpers/reference": 1245,  # named shared and saved state (ResumeState, _Shared)
    "talk_helpers/runtime": 1550,
    "talk_helpers/verdicts": 165,
    "talk_helpers/widgets": 662,
}
PACKAGE_LINE_BUDGET = 21_700
README_LINE_BUDGET = 120  # of 150 at most (tests/test_pages.py)


def _lines(paths) -> int:
    return sum(len(path.read_text().splitlines()) for path in paths)


def _part_lines() -> dict[str, int]:
    parts = {"talk_helpers/*.py": _lines(PACKAGE.glob("*.py"))}
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        parts[f"talk_helpers/{folder.name}"] = _lines(folder.rglob("*.py"))
    return parts


def test_every_part_of_the_package_stays_within_its_line_budget():
    parts = _part_lines()
    assert set(parts) == set(LINE_BUDGETS), "give each part a budget in LINE_BUDGETS"
    over = {part: f"{lines} > {LINE_BUDGETS[part]}" for part, lines in parts.items()
            if lines > LINE_BUDGETS[part]}
    assert over == {}


def test_the_package_and_the_readme_stay_within_their_line_budgets():
    assert _lines(PACKAGE.rglob("*.py")) <= PACKAGE_LINE_BUDGET
    assert _lines([ROOT / "README.md"]) <= README_LINE_BUDGET
