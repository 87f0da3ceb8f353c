"""The graders' common parts: a stub is 'not tried', a wrong answer gets its hint."""

from talk_helpers.exercises import attempt, choice, is_stub, not_yet, passes


class StubIds:
    def __iter__(self):
        ...


class DoneIds:
    def __iter__(self):
        yield from range(3)


def stub_function(size, worker):
    """Return this worker's ids."""
    pass


def test_untouched_stubs_are_recognised_and_edited_code_is_not():
    assert is_stub(None) and is_stub(...) and is_stub(StubIds) and is_stub(stub_function)
    assert not is_stub(DoneIds) and not is_stub(3) and not is_stub(print)


def test_a_choice_left_at_none_is_not_tried_and_shows_no_hint():
    grade = choice("05.4", None, options=("a", "b"), correct="b", hints={"a": "count again"})
    assert grade.passed is None and "hint" not in repr(grade)


def test_a_wrong_choice_gets_its_own_hint_and_a_right_one_passes():
    hints = {"a": "count the batches per rank"}
    wrong = choice("05.4", "a", options=("a", "b"), correct="b", hints=hints)
    assert wrong.passed is False and "count the batches per rank" in repr(wrong)
    assert choice("05.4", "b", options=("a", "b"), correct="b").ok
    refused = choice("05.4", "c", options=("a", "b"), correct="b")
    assert refused.passed is False and "not one of ['a', 'b']" in refused.message


def test_code_that_raises_is_not_yet_with_the_exception_named():
    def run():
        raise ZeroDivisionError("division by zero")

    grade = attempt("02.3", run, hint="num_workers=0 means no worker info")
    assert grade.passed is False
    assert "ZeroDivisionError: division by zero" in grade.message
    assert "num_workers=0" in repr(grade)


def test_a_grade_reads_the_same_as_text_and_html():
    assert repr(passes("02.3", "every id once")).startswith("✔ exercise 02.3 passes")
    html = not_yet("02.3", "2 ids missing", "look at the remainder")._repr_html_()
    assert "not yet" in html and "look at the remainder" in html
