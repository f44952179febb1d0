"""Warm-starting a search with results obtained elsewhere: Ray's ``Searcher.add_evaluated_point`` and
``add_evaluated_trials``, implemented by ``OptunaSearch`` (the points become finished trials of its study)."""

from __future__ import annotations

import warnings

import optuna
import pytest

import fluidsalus.tune as tune
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import OptunaSearch as EngineOptunaSearch
from fluidsalus.tune import TuneConfig, Tuner
from fluidsalus.tune._translate import plan
from fluidsalus.tune.search import Searcher
from fluidsalus.tune.search.nevergrad import NevergradSearch
from fluidsalus.tune.search.optuna import OptunaSearch

SPACE = {"x": tune.uniform(0, 1), "net": {"width": tune.randint(1, 5)}}


def _search(**kwargs) -> OptunaSearch:
    return OptunaSearch(space=SPACE, metric="loss", mode="min", **kwargs)


def test_evaluated_points_become_finished_trials_of_the_study_before_anything_is_asked() -> None:
    search = _search()
    search.add_evaluated_point({"x": 0.2, "net": {"width": 3}, "extra": "ignored"}, 0.5,
                               intermediate_values=[0.9, 0.5])
    search.add_evaluated_point({"x": 0.9, "net/width": 1}, 2.0, pruned=True)
    search.add_evaluated_point({"x": 0.5, "net": {"width": 2}}, float("nan"), error=True)
    planned = plan(TuneConfig(num_samples=4, search_alg=search), {"epochs": 3})
    assert isinstance(planned.searcher, EngineOptunaSearch)
    added = planned.searcher.study.get_trials(deepcopy=False)
    assert [t.state for t in added] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                                        optuna.trial.TrialState.FAIL]
    assert added[0].params == {"x": 0.2, "net/width": 3} and added[0].value == 0.5
    assert added[0].intermediate_values == {0: 0.9, 1: 0.5} and added[2].value is None
    assert planned.searcher.study.best_trial.params == {"x": 0.2, "net/width": 3}


@pytest.mark.parametrize("call, error, message", [
    (lambda s: s.add_evaluated_point({"x": 0.1, "net": {"width": 2}}, "good"), ConfigError, r"value must be a number"),
    (lambda s: s.add_evaluated_point([0.1], 1.0), ConfigError, r"parameters must be a dict, got list"),
    (lambda s: s.add_evaluated_point({"x": 0.1}, 1.0, intermediate_values=["a"]), ConfigError,
     r"intermediate_values must be a list of numbers"),
])
def test_bad_evaluated_points_are_refused_naming_the_argument(call, error, message) -> None:
    with pytest.raises(error, match=rf"OptunaSearch.add_evaluated_point: {message}"):
        call(_search())


def test_a_point_without_every_parameter_or_outside_the_space_is_refused_when_the_search_starts() -> None:
    partial = _search()
    partial.add_evaluated_point({"x": 0.1}, 1.0)
    with pytest.raises(ConfigError, match=r"evaluated point 0: parameters has no value for \['net/width'\]"):
        plan(TuneConfig(num_samples=2, search_alg=partial), {})
    outside = _search()
    outside.add_evaluated_point({"x": 3.0, "net": {"width": 2}}, 1.0)
    with pytest.raises(ConfigError, match=r"evaluated point 0: \['x'\] outside the space"):
        plan(TuneConfig(num_samples=2, search_alg=outside), {})


def test_without_its_own_space_or_metric_or_with_define_by_run_it_raises_rays_errors() -> None:
    with pytest.raises(RuntimeError, match=r"OptunaSearch was asked for a configuration, but it has no search space"):
        OptunaSearch(metric="loss", mode="min").add_evaluated_point({"x": 1}, 1.0)
    with pytest.raises(RuntimeError, match=r"its metric \(None\) or mode \(None\) is not set"):
        OptunaSearch(space=SPACE).add_evaluated_point({"x": 1}, 1.0)
    with pytest.raises(TypeError, match=r"a define-by-run space cannot take evaluated points"):
        OptunaSearch(space=lambda trial: None, metric="loss", mode="min").add_evaluated_point({"x": 1}, 1.0)
    ng = pytest.importorskip("nevergrad")  # the checks above ran without it
    with pytest.raises(NotImplementedError, match="NevergradSearch does not take evaluated points"):
        NevergradSearch(optimizer=ng.optimizers.OnePlusOne).add_evaluated_trials([], "loss")


class _Recorder(Searcher):
    def __init__(self) -> None:
        super().__init__(metric="loss", mode="min")
        self.points: list[tuple] = []

    def suggest(self, trial_id):
        return None

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass

    def add_evaluated_point(self, parameters, value, error=False, pruned=False, intermediate_values=None):
        self.points.append((parameters, value, error, pruned))


def _objective(config: dict) -> None:
    for step in range(3):
        tune.report({"loss": config["x"] + 1.0 / (step + 1)})
        if config["x"] > 0.95:
            raise ValueError("too big")


def test_add_evaluated_trials_warm_starts_a_search_from_an_earlier_experiment(ray_cluster, storage) -> None:
    grid = Tuner(_objective, param_space={"x": tune.grid_search([0.1, 0.5, 0.99]), "net": {"width": 2}},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=tune.RunConfig(storage_path=storage, name="first", verbose=0)).fit()
    recorder = _Recorder()
    recorder.add_evaluated_trials(grid, "loss")
    by_x = {params["x"]: (value, error, pruned) for params, value, error, pruned in recorder.points}
    assert by_x[0.1] == (pytest.approx(0.1 + 1 / 3), False, False) and by_x[0.5][1:] == (False, False)
    assert by_x[0.99][1] is True  # it failed after its first report
    analysis = tune.ExperimentAnalysis(f"{storage}/first")
    again = _Recorder()
    again.add_evaluated_trials(analysis, "loss")
    assert sorted(p[0]["x"] for p in again.points) == [0.1, 0.5, 0.99]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _Recorder().add_evaluated_trials(analysis, "accuracy")
    assert any("no trial reported 'accuracy'" in str(w.message) for w in caught)
    with pytest.raises(ConfigError, match=r"expected a trial, a list of trials, an ExperimentAnalysis or a ResultGrid"):
        _Recorder().add_evaluated_trials("first", "loss")
    # the warm-started OptunaSearch's study holds the earlier trials before it asks for new ones
    search = _search()
    search.add_evaluated_trials(grid, "loss")
    study = plan(TuneConfig(num_samples=2, search_alg=search), {}).searcher.study
    assert len(study.get_trials(deepcopy=False)) == 3 and study.best_trial.params["x"] == 0.1


def test_the_engine_searcher_refuses_an_evaluated_point_in_a_state_it_cannot_be_told_in() -> None:
    with pytest.raises(ConfigError, match=r"evaluated point 0: state must be one of \['COMPLETE', 'FAIL', 'PRUNED'\], "
                                          r"got 'RUNNING'"):
        EngineOptunaSearch({"x": tune.uniform(0, 1)}, 2, "loss", "min",
                           evaluated_points=[{"parameters": {"x": 0.5}, "value": 1.0, "state": "RUNNING"}])
