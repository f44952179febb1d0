"""The pure searcher driver applies the executor's rules (checked against the same searcher on Ray)."""

from __future__ import annotations

from test_run import _TwoRungs

from fluidsalus.searchers import RandomSearch
from fluidsalus.testing import drive


def test_random_search_runs_every_trial_to_the_end():
    result = drive(RandomSearch({"x": 1.0}, num_samples=5), lambda c, i: c["x"] * i, max_iterations=3)
    assert len(result.trials) == 5 and result.total_iterations == 15
    assert all(t.end_reason == "completed" for t in result.trials.values())


def test_two_rung_searcher_same_outcome_as_on_ray():
    # tests/test_run.py runs the same searcher through Ray: the best two go to 4 iterations, the rest stop at 2.
    result = drive(_TwoRungs(), lambda c, i: c["x"] * i, parallel=2)
    assert {t.config["x"]: t.iteration for t in result.trials.values()} == {1: 2, 2: 2, 3: 4, 4: 4}
    assert all(t.restarts == 0 for t in result.trials.values())
