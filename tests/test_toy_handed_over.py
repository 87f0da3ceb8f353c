"""The loaders handed over for diagnosis have exactly the one flaw their solutions name."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from talk_helpers.checks import check_exactly_once, check_random_draws
from talk_helpers.checks.mixing import shuffle_report
from talk_helpers.lessons.datasets import handed_over
from talk_helpers.lessons.datasets.handed_over import MysteryShuffle, mystery_loader
from talk_helpers.lessons.datasets.shuffling import SIZE, collect, labels_of

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@given(size=st.integers(0, 40), workers=st.integers(1, 4))
def test_the_mystery_dataset_loses_exactly_the_ids_that_do_not_fill_a_worker(size, workers):
    from unittest import mock

    seen = []
    for w in range(workers):  # each worker's share, as get_worker_info would report it
        with mock.patch.object(handed_over, "_worker", return_value=(w, workers)):
            seen += list(handed_over._BlockIds(size))
    assert sorted(seen) == list(range(size - size % workers))


def test_the_mystery_loader_misses_its_last_id_with_two_workers():
    batches = list(mystery_loader())
    report = check_exactly_once(batches, expected=25)
    assert report.missing == [24] and report.duplicated_count == 0
    assert [len(b) for b in batches] == [4] * 6


def test_mystery_shuffle_is_exactly_once_changes_order_and_augments_but_mixes_poorly():
    runs = [collect(DataLoader(MysteryShuffle(epoch=e), batch_size=20, num_workers=2,
                               multiprocessing_context="fork")) for e in range(2)]
    assert all(check_exactly_once(batches, SIZE).ok for batches, _ in runs)
    report = shuffle_report([np.concatenate(b) for b, _ in runs], groups=labels_of(),
                            batch_size=20)
    assert report.order_changes and not report.well_mixed
    assert check_random_draws(runs[0][1], value="aug", across="worker").ok
