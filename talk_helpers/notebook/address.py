"""The collection's one address: the repository and the ref its links name.

README badges, onboarding snippets and the talk's QR code are made from these names, so a
move of the repository is one edit here.
"""

REPOSITORY = "what-could-go-wrong/notebooks"
REF = "main"  # a branch that is kept: Binder caches one build per commit of it


def repository_url() -> str:
    """The repository's page."""
    return f"https://github.com/{REPOSITORY}"


def binder_url(notebook: str = "notebooks/00_index.ipynb") -> str:
    """A Binder link that opens ``notebook`` (a path in the repository) in JupyterLab."""
    return f"https://mybinder.org/v2/gh/{REPOSITORY}/{REF}?labpath={notebook}"


def nbviewer_url(notebook: str, anchor: str | None = None) -> str:
    """A static view of ``notebook`` (no kernel), at ``anchor`` (a heading's id) if given."""
    url = f"https://nbviewer.org/github/{REPOSITORY}/blob/{REF}/{notebook}"
    return f"{url}#{anchor}" if anchor else url
