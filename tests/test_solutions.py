import pytest

from talk_helpers.notebook.solutions import show_solution


@pytest.mark.parametrize("notebook", ["2", "two", 2, "002"])
def test_notebook_must_be_a_two_digit_string(notebook):
    with pytest.raises(ValueError, match="notebook must be a two-digit string"):
        show_solution(notebook, 1)


def test_a_notebook_without_solutions_is_named():
    with pytest.raises(ValueError, match="notebook '99' has no solutions module"):
        show_solution("99", 1)


def test_a_course_solution_opens_only_after_an_attempt_or_when_asked_anyway(monkeypatch):
    from talk_helpers import exercises
    from talk_helpers.exercises.workers import grade_index_batches

    monkeypatch.setattr(exercises, "_attempted", set())
    closed = show_solution("01", 1)
    assert "opens once the grader above has judged an attempt" in repr(closed)
    assert 'show_solution(\'01\', 1, anyway=True)' in repr(closed)
    assert "[[0, 1, 2, 3]" not in repr(closed) + closed._repr_html_()
    assert "[[0, 1, 2, 3]" in repr(show_solution("01", 1, anyway=True))
    grade_index_batches(None)  # not tried: no attempt yet
    assert "opens once" in repr(show_solution("01", 1))
    grade_index_batches([[0, 1, 2, 3]])  # a wrong attempt opens it
    assert repr(show_solution("01", 1)).startswith("Solution to exercise 01.1:\nmy_batches")
    assert "opens once" in repr(show_solution("01", 2))  # another exercise stays closed


def test_every_course_notebook_gates_its_solutions():
    import importlib

    for notebook in ("01", "02", "03", "04", "05"):
        module = importlib.import_module(f"talk_helpers.notebook.solutions.nb{notebook}")
        assert module.GATED is True
