"""`pip check` for what this project installs, with the audit-only libraries' gaps named.

Usage: ``check_requirements.py [FILE ...]`` (default: requirements.txt requirements-audit.txt).
Each FILE is a pip requirements file or a conda environment file (its pip section). This
checks every requirement of the package itself, of every distribution a FILE names, and of
everything those require in turn, as `pip check` does, and fails on any unmet one. What
nothing of the project requires is left out: on Binder, the Jupyter server repo2docker
installs (notebook 7 requires a JupyterLab older than the one requirements.txt pins for
`make lab`) is repo2docker's own.

requirements-audit.txt is installed with --no-deps (see that file). These gaps are known and
printed, not hidden:

* litdata requires torchvision: not installed, litdata's streaming path does not import it;
* mosaicml-streaming: only its numpy-only partition and shuffle modules are loaded
  (talk_helpers.libraries.streaming_assignment.streaming_modules); the package itself is
  not importable here, so its requirements are reported, not enforced.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "talk-helpers"
DEFAULT_FILES = ("requirements.txt", "requirements-audit.txt")
KNOWN = {("litdata", "torchvision"): "litdata's streaming path does not import it"}
SOURCES_ONLY = {"mosaicml-streaming": "only its partition and shuffle modules are loaded"}


def named_requirements(path: Path) -> list[Requirement]:
    """The requirements a pip requirements file or a conda environment file's pip section
    names (options such as --extra-index-url and local paths are skipped)."""
    lines = path.read_text().splitlines()
    if path.suffix in (".yml", ".yaml"):
        import yaml

        lines = []
        for dep in yaml.safe_load(path.read_text()).get("dependencies", []):
            if isinstance(dep, dict):
                lines += dep.get("pip", [])
    requirements = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith(("-", ".")):
            continue
        try:
            requirements.append(Requirement(line))
        except InvalidRequirement as exc:
            raise SystemExit(f"{path}: cannot read requirement {line!r}: {exc}") from exc
    return requirements


def unmet(roots: list[Requirement]) -> list[tuple[str, str, str]]:
    """(distribution, requirement, problem) for every unmet requirement of ``roots`` and of
    everything they require, transitively."""
    dists = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    problems, seen = [], set()
    todo = [("(project)", req) for req in roots]
    while todo:
        wanted_by, req = todo.pop()
        name = canonicalize_name(req.name)
        dist = dists.get(name)
        if dist is None:
            problems.append((wanted_by, str(req), "not installed"))
            continue
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            problems.append((wanted_by, str(req), f"have {dist.version}"))
        for extra in {"", *req.extras}:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for text in dist.requires or []:
                sub = Requirement(text)
                if sub.marker is None or sub.marker.evaluate({"extra": extra}):
                    if extra and sub.marker is None:
                        continue  # the base requirements, walked with extra ""
                    todo.append((name, sub))
    return problems


def main(argv: list[str] | None = None) -> int:
    files = [Path(f) for f in (argv if argv is not None else sys.argv[1:])] or [
        ROOT / f for f in DEFAULT_FILES]
    roots = [Requirement(PROJECT)]
    for path in files:
        roots += named_requirements(path)
    failed = 0
    noted = set()
    for name, req, problem in sorted(set(unmet(roots))):
        key = (name, canonicalize_name(Requirement(req).name))
        if key in KNOWN:
            print(f"known: {name} requires {req} ({problem}): {KNOWN[key]}")
        elif name in SOURCES_ONLY:
            if name not in noted:
                print(f"known: {name} requirements not enforced: {SOURCES_ONLY[name]}")
                noted.add(name)
        else:
            print(f"UNMET: {name} requires {req} ({problem})")
            failed += 1
    checked = ", ".join(str(p) for p in files)
    print(f"{failed} unmet requirement(s)" if failed
          else f"every other requirement of the project and of {checked} is met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
