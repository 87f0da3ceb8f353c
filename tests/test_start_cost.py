"""Time limits that cover starting interpreters follow what one costs here, now."""

import pytest

from talk_helpers.runtime import start_cost


def test_the_start_cost_is_measured_once_and_is_a_real_duration():
    first = start_cost.interpreter_start_s()
    assert 0 < first < 600
    assert start_cost.interpreter_start_s() == first  # kept, not measured again


def test_a_limit_grows_with_the_interpreters_it_must_wait_for(monkeypatch):
    monkeypatch.setattr(start_cost, "_measured", 2.0)
    assert start_cost.time_limit_s(60, interpreters=0) == 60
    assert start_cost.time_limit_s(60, interpreters=2) == 60 + 3 * 2 * 2.0
    monkeypatch.setattr(start_cost, "_measured", 20.0)  # the same machine, busier
    assert start_cost.time_limit_s(60, interpreters=2) == 60 + 3 * 2 * 20.0


@pytest.mark.parametrize("kwargs", [dict(base_s=-1), dict(base_s=1, interpreters=-1),
                                    dict(base_s=1, margin=0)])
def test_a_negative_limit_or_count_is_refused(kwargs):
    with pytest.raises(ValueError, match="base_s and interpreters must be"):
        start_cost.time_limit_s(**kwargs)
