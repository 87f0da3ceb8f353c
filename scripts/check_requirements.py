"""`pip check` with the audit-only libraries' known exceptions named, not hidden.

requirements-audit.txt is installed with --no-deps (see that file). This checks every
requirement of every installed distribution, as `pip check` does, and fails on any unmet one
except these, which it prints:

* litdata requires torchvision: not installed, litdata's streaming path does not import it;
* mosaicml-streaming: only its numpy-only partition and shuffle modules are loaded
  (talk_helpers.libraries.streaming_assignment.streaming_modules); the package itself is
  not importable here, so its requirements are reported, not enforced.
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

KNOWN = {("litdata", "torchvision"): "litdata's streaming path does not import it"}
SOURCES_ONLY = {"mosaicml-streaming": "only its partition and shuffle modules are loaded"}


def unmet() -> list[tuple[str, str, str]]:
    """(distribution, requirement, problem) for every unmet requirement."""
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    problems = []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            have = installed.get(canonicalize_name(req.name))
            if have is None:
                problems.append((name, str(req), "not installed"))
            elif req.specifier and not req.specifier.contains(have, prereleases=True):
                problems.append((name, str(req), f"have {have}"))
    return problems


def main() -> int:
    failed = 0
    noted = set()
    for name, req, problem in sorted(set(unmet())):
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
    print(f"{failed} unmet requirement(s)" if failed else "every other requirement is met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
