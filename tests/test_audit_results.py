"""A failed audit's results read as 'nothing to show' in every reader a notebook cell uses,
never as an AttributeError or an IndexError."""

import pytest

import talk_helpers.libraries as la
from talk_helpers.audit import audit
from talk_helpers.audit.core import failed_report
from talk_helpers.checks import (
    NOTHING_TO_SHOW,
    NothingToShow,
    audit_failed,
    check_rank_split,
    checklist,
    read_audit,
)
from talk_helpers.model.simulate import simulate


def ranks_of_four(rank, world_size, epoch):
    return [[i] for i in range(rank, 8, world_size)]


@pytest.fixture(scope="module")
def passed():
    return audit(ranks_of_four, world_size=2, epochs=2, expected=8, in_process=True)


@pytest.fixture(scope="module")
def failed():
    return failed_report(2, 2, "RuntimeError: a rank died")


def test_a_failed_audit_is_told_from_one_that_judged(passed, failed):
    assert audit_failed(failed) and not audit_failed(passed)


def test_every_reader_shows_nothing_for_a_failed_audit(failed):
    shown = [check_rank_split(failed), simulate([4, 4], nodes=2, workers=1,
                                               micro_batch_size=1).compare(failed),
             la.first_batches(failed), la.same_samples_each_epoch(failed),
             la.dropped_each_epoch(failed, 8), read_audit(failed, lambda r: r.ids(0, 0))]
    for result in shown:
        assert isinstance(result, NothingToShow)
        assert repr(result) == f"· {NOTHING_TO_SHOW}" and not result.ok
        assert NOTHING_TO_SHOW in result._repr_html_()


def test_the_same_readers_read_an_audit_that_judged(passed):
    assert check_rank_split(passed).ok
    assert simulate([1] * 8, nodes=2, workers=1, micro_batch_size=1).compare(passed).ok
    assert repr(la.first_batches(passed, count=2)).splitlines() == [
        "epoch 0: [[0], [2]]", "epoch 1: [[0], [2]]"]
    assert la.same_samples_each_epoch(passed) is True
    assert la.dropped_each_epoch(passed, 9) == [[8], [8]]
    assert read_audit(passed, lambda r: r.ids(1, 1).tolist()) == [1, 3, 5, 7]


def test_the_library_table_has_nothing_to_show_for_a_failed_row(passed, failed):
    table = la.AuditTable([la.LibraryRow("failed", failed), la.LibraryRow("passed", passed)])
    failed_line = repr(table).splitlines()[1]
    assert failed_line.startswith("failed") and NOTHING_TO_SHOW in failed_line
    assert "✘" not in failed_line
    assert NOTHING_TO_SHOW in table._repr_html_()


def test_a_checklist_item_with_nothing_to_show_does_not_pass(passed, failed):
    listed = checklist({"audit": passed, "rank split": check_rank_split(failed)})
    assert not listed.ok and NOTHING_TO_SHOW in repr(listed)


def test_an_epoch_the_audit_did_not_run_is_refused(passed):
    with pytest.raises(ValueError, match="epoch"):
        check_rank_split(passed, epoch=2)
    with pytest.raises(ValueError, match="epoch"):
        simulate([1] * 8, nodes=2, workers=1, micro_batch_size=1).compare(passed, epoch=5)


def test_a_row_whose_resumed_run_failed_says_the_resume_crashed(passed, failed):
    cells = la.LibraryRow("resumed", passed, failed).cells()
    assert cells[0] == (True, "yes")
    assert cells[-1] == (False, "crashed: RuntimeError: a rank died")


def test_a_figure_of_a_failed_audit_says_it_needs_a_real_run(failed):
    from talk_helpers.diagrams.ddp import _placements

    with pytest.raises(ValueError, match="a failed one"):
        _placements(failed, 0)
