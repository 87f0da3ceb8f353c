"""How the collection runs third-party code: offline, and without noise on native stderr.

Both are context managers a caller asks for; importing this module changes nothing.
"""

import contextlib
import os
import sys

from talk_helpers.environment import variables_set
from talk_helpers.private_dirs import private_dir

# Hugging Face reads these when ``datasets`` (or ``huggingface_hub``) is first imported;
# its cache goes in this user's own folder (``private_dir("hf_cache")``).
HUB_OFFLINE = {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


@contextlib.contextmanager
def hub_offline():
    """Run the block with Hugging Face offline and its cache in this user's own folder; the
    variables a caller already set are kept, and the environment is restored after.

    Import ``datasets`` inside the block the first time: it reads them at import."""
    settings = {**HUB_OFFLINE, "HF_DATASETS_CACHE": private_dir("hf_cache")}
    with variables_set(settings, keep_set=True):
        yield


@contextlib.contextmanager
def native_stderr_silenced():
    """Send file descriptor 2 to /dev/null for the block: C++ log lines (gloo's timestamped
    messages, the profiler's start and stop) that a notebook would store as noise. Python
    exceptions still propagate; what they say is returned or raised, not printed."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
