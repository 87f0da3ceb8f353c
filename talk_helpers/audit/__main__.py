"""``python -m talk_helpers.audit module:factory …``: audit your own loader (see ``--help``)."""

from talk_helpers.audit.cli import run

if __name__ == "__main__":
    run()
