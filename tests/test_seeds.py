"""Notebook 04's restart check: a digest of two epochs depends only on the seed, in this
process and in a fresh one."""

import json
import subprocess
import sys

import pytest

from talk_helpers.lessons.datasets.seeds import digest


def test_the_same_seed_gives_the_same_digest_and_another_seed_another():
    first, again, other = digest(0), digest(0), digest(1)
    assert first == again and first["sha256"] != other["sha256"]
    assert len(first["first augmentations"]) == 2


def test_a_fresh_process_gives_this_process_digest():
    command = [sys.executable, "-m", "talk_helpers.lessons.datasets.seeds", "--seed", "3",
               "--start-method", "fork"]
    fresh = json.loads(subprocess.run(command, capture_output=True, text=True,
                                      check=True).stdout)
    assert fresh == digest(3)


@pytest.mark.parametrize("kwargs, error", [({"seed": "0"}, TypeError),
                                           ({"seed": 0, "epochs": 0}, ValueError),
                                           ({"seed": 0, "num_workers": -1}, ValueError)])
def test_bad_arguments_are_named(kwargs, error):
    with pytest.raises(error, match=next(iter(k for k in kwargs if k != "seed"), "seed")):
        digest(**kwargs)
