"""``python -m talk_helpers.audit module:factory …``: audit your own loader (see ``--help``)."""

import gc
import sys

from talk_helpers.audit.cli import main

if __name__ == "__main__":
    status = main()
    gc.freeze()  # Python's last collection at exit would walk all of torch's objects
    sys.exit(status)
