"""The fixes a reader copies from notebooks 06-11, tried on layouts they were not written
for: uneven files, a rank with one file, more workers than files. A fix holds there, or
the notebook shows where it stops holding."""

from functools import partial

import pytest
from notebook_code import importable_names

from talk_helpers.audit import audit
from talk_helpers.runtime.start_cost import time_limit_s

pytestmark = pytest.mark.distributed


def _audit(make_loader, expected, **options):
    return audit(make_loader, world_size=2, epochs=1, expected=expected,
                 timeout_s=time_limit_s(30, interpreters=8), **options)


def test_10_stopping_together_keeps_ranks_in_step_on_files_of_40_7_7_7_rows():
    cell = importable_names("10", upto="nb10-uneven-files")
    together = _audit(partial(cell["make_hf_in_step"], build=cell["make_hf_files"]), 61,
                      shuffle=False, dropped_by_design=30)
    assert together.ok, together
    assert list(together.checks[0].batch_counts.counts) == [4, 4]


def test_10_a_fixed_count_of_6_is_shown_failing_on_files_of_40_7_7_7_rows():
    cell = importable_names("10", upto="nb10-uneven-files")
    capped = _audit(partial(cell["make_hf_files"], steps=6), 61, shuffle=False)
    epoch = capped.checks[0]
    assert list(epoch.batch_counts.counts) == [6, 4]
    assert epoch.exactly_once.missing_count == 20
