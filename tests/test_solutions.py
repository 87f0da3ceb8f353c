import pytest

from talk_helpers.notebook.solutions import show_solution


@pytest.mark.parametrize("notebook", ["2", "two", 2, "002"])
def test_notebook_must_be_a_two_digit_string(notebook):
    with pytest.raises(ValueError, match="notebook must be a two-digit string"):
        show_solution(notebook, 1)


def test_a_notebook_without_solutions_is_named():
    with pytest.raises(ValueError, match="notebook '99' has no solutions module"):
        show_solution("99", 1)
