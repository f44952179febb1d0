"""Ray's HyperOptSearch and BayesOptSearch with Ray's signatures, run by Optuna's samplers
(tune/search/hyperopt.py: TPE with HyperOpt's settings; tune/search/bayesopt.py: GPSampler)."""

from __future__ import annotations

import inspect
import pickle
import warnings

import optuna
import pytest

import fluidsalus.tune as tune
from fluidsalus import searchers
from fluidsalus.errors import ConfigError
from fluidsalus.tune import TuneConfig, Tuner
from fluidsalus.tune._translate import plan
from fluidsalus.tune.search.bayesopt import BayesOptSearch
from fluidsalus.tune.search.hyperopt import LINEAR_FORGETTING, HyperOptGamma, HyperOptSearch
from fluidsalus.tune.search.nevergrad import NevergradSearch

rt = pytest.importorskip("ray.tune")

#: Each class with Ray's module, and the fluidsalus module to import it from.
_RAYS = [(HyperOptSearch, "ray.tune.search.hyperopt", "hyperopt"),
         (BayesOptSearch, "ray.tune.search.bayesopt", "bayesopt"),
         (NevergradSearch, "ray.tune.search.nevergrad", "nevergrad")]  # runs Nevergrad itself, not Optuna


@pytest.mark.parametrize("ours, module, package", _RAYS)
def test_the_signature_is_rays(ours, module, package) -> None:
    import importlib

    theirs = getattr(importlib.import_module(module), ours.__name__)
    assert [(p.name, p.default) for p in inspect.signature(ours).parameters.values()] == \
        [(p.name, p.default) for p in inspect.signature(theirs).parameters.values()]


@pytest.mark.parametrize("ours, module, package", _RAYS)
def test_rays_own_object_is_refused_with_the_import_to_use(ours, module, package) -> None:
    import importlib

    cls = getattr(importlib.import_module(module), ours.__name__)
    theirs = cls.__new__(cls)  # Ray's constructor needs the package, not installed here
    with pytest.raises(ConfigError, match=f"change its import to `from fluidsalus.tune.search.{package} import "
                                          f"{ours.__name__}`"):
        plan(TuneConfig(metric="m", mode="max", search_alg=theirs), {"x": tune.uniform(0, 1)})


# ---------------------------------------------------------------- HyperOptSearch

def test_hyperopts_split_of_good_trials() -> None:
    gamma = HyperOptGamma(0.25)
    assert [gamma(n) for n in (1, 16, 100, 10_000, 100_000)] == [1, 1, 3, 25, LINEAR_FORGETTING]
    assert HyperOptGamma(1.0)(100) == 10
    assert pickle.loads(pickle.dumps(gamma))(100) == 3  # the Tuner pickles its search algorithm


def test_it_becomes_an_optuna_search_with_a_tpe_sampler_set_as_hyperopts() -> None:
    holder = HyperOptSearch(n_initial_points=5, random_state_seed=3, gamma=0.5,
                            points_to_evaluate=[{"x": 0.5}])
    planned = plan(TuneConfig(metric="loss", mode="min", num_samples=8, search_alg=holder),
                   {"x": tune.uniform(0, 1), "c": 7})
    search = planned.searcher
    assert isinstance(search, searchers.OptunaSearch) and planned.summary == "HyperOptSearch"
    sampler = search.study.sampler
    assert isinstance(sampler, optuna.samplers.TPESampler) and sampler._n_startup_trials == 5
    assert isinstance(sampler._gamma, HyperOptGamma) and sampler._gamma.gamma == 0.5
    assert search.next_groups()[0].configs[0] == {"x": 0.5, "c": 7}  # the point first
    again = plan(TuneConfig(metric="loss", mode="min", num_samples=8,
                            search_alg=HyperOptSearch(random_state_seed=3)), {"x": tune.uniform(0, 1)})
    twice = plan(TuneConfig(metric="loss", mode="min", num_samples=8,
                            search_alg=HyperOptSearch(random_state_seed=3)), {"x": tune.uniform(0, 1)})
    assert again.searcher.next_groups() == twice.searcher.next_groups()  # the seed seeds the draws
    asha = plan(TuneConfig(metric="loss", mode="min", search_alg=HyperOptSearch(),
                           scheduler=tune.schedulers.ASHAScheduler(max_t=9, grace_period=1)), {"x": tune.uniform(0, 1)})
    assert asha.summary.startswith("HyperOptSearch + AsyncHyperBandScheduler -> OptunaSearch(pruner=")
    assert isinstance(tune.search.create_searcher("hyperopt", metric="m", mode="max", n_initial_points=2),
                      HyperOptSearch)


class _HpExpression:
    """Stands for a hyperopt ``hp.*`` expression (hyperopt is not installed here)."""


_HpExpression.__module__ = "hyperopt.pyll.base"


@pytest.mark.parametrize("kwargs, message", [
    ({"n_initial_points": -1}, "n_initial_points must be an int >= 0"),
    ({"random_state_seed": 1.5}, "random_state_seed must be None or an int >= 0"),
    ({"gamma": 0}, r"gamma must be a number in \(0, 1\]"),
    ({"space": {"x": _HpExpression()}}, "HyperOpt's own hp.\\* expressions, which need the hyperopt package"),
    ({"metric": ["a", "b"], "mode": ["min", "max"]}, "HyperOpt is single-objective"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        HyperOptSearch(**kwargs)


def test_a_tuner_runs_hyperopt_search_under_asha(ray_cluster, storage) -> None:
    def objective(config):
        for step in range(3):
            tune.report({"loss": (config["x"] - 0.3) ** 2 + 1.0 / (step + 1)})

    tuner = Tuner(objective, param_space={"x": tune.uniform(0, 1)},
                  tune_config=TuneConfig(metric="loss", mode="min", num_samples=8,
                                         search_alg=HyperOptSearch(n_initial_points=3, random_state_seed=0),
                                         scheduler=tune.schedulers.ASHAScheduler(max_t=3, grace_period=1)),
                  run_config=tune.RunConfig(storage_path=storage, verbose=0))
    grid = tuner.fit()
    assert len(grid) == 8 and grid.num_errors == 0
    study = tuner.plan.searcher.study
    assert len(study.trials) == 8 and isinstance(study.sampler, optuna.samplers.TPESampler)
    best = grid.get_best_result()
    assert best.metrics["loss"] == min(r.metrics["loss"] for r in grid)


# ---------------------------------------------------------------- BayesOptSearch


def test_it_becomes_an_optuna_search_with_a_gp_sampler_over_uniform_floats() -> None:
    space = {"x": tune.uniform(-1, 1), "lr": tune.loguniform(1e-4, 1e-1), "nested": {"c": 7}}
    with pytest.warns(UserWarning, match=r"lr: BayesOpt searches between the bounds uniformly; "
                                         r"loguniform\(lower=0.0001, upper=0.1\)'s log scale is dropped"):
        planned = plan(TuneConfig(metric="loss", mode="min", num_samples=4,
                                  search_alg=BayesOptSearch(random_search_steps=3, random_state=7)), space)
    search = planned.searcher
    assert isinstance(search, searchers.OptunaSearch) and planned.summary == "BayesOptSearch"
    sampler = search.study.sampler
    assert isinstance(sampler, optuna.samplers.GPSampler) and sampler._n_startup_trials == 3
    assert search._distributions["lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-1, log=False)
    config = search.next_groups()[0].configs[0]
    assert config["nested"] == {"c": 7} and -1 <= config["x"] <= 1
    with pytest.warns(UserWarning, match=r"BayesOptSearch.space holds Ray Tune domains \(x\); they were translated"):
        own = BayesOptSearch(space={"x": rt.uniform(0, 2)}, metric="m", mode="max")
    assert plan(TuneConfig(search_alg=own), {"c": 1}).searcher._distributions == {
        "x": optuna.distributions.FloatDistribution(0, 2)}
    assert isinstance(tune.search.create_searcher("bayesopt", metric="m", mode="max"), BayesOptSearch)


@pytest.mark.parametrize("kwargs, space, message", [
    ({}, {"k": tune.choice([1, 2])}, "k is a Categorical parameter, and BayesOpt searches float parameters only"),
    ({}, {"x": tune.grid_search([0.1, 0.2])}, "grid_search parameters cannot be searched by BayesOpt"),
    ({"patience": 0}, {}, "patience must be an int >= 1"),
    ({"random_search_steps": -1}, {}, "random_search_steps must be an int >= 0"),
    ({"analysis": object()}, {}, "analysis .* is not supported"),
    ({"metric": ["a", "b"], "mode": ["min", "max"]}, {}, "BayesOpt is single-objective"),
])
def test_bad_arguments_and_spaces_are_refused_by_name(kwargs, space, message) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(TuneConfig(metric="m", mode="max", search_alg=BayesOptSearch(**kwargs)), space)


def test_utility_kwargs_are_not_used_and_a_warning_says_so() -> None:
    with pytest.warns(UserWarning, match="utility_kwargs=.* is not used: .* log expected improvement"):
        BayesOptSearch(utility_kwargs={"kind": "ucb", "kappa": 2.5, "xi": 0.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BayesOptSearch()  # no warning by default (Optuna's experimental flag on GPSampler is not the user's)


def test_a_tuner_runs_bayesopt_search(ray_cluster, storage) -> None:
    def objective(config):
        tune.report({"loss": (config["x"] - 0.3) ** 2})

    tuner = Tuner(objective, param_space={"x": tune.uniform(0, 1)},
                  tune_config=TuneConfig(metric="loss", mode="min", num_samples=6, max_concurrent_trials=2,
                                         search_alg=BayesOptSearch(random_search_steps=3, random_state=1)),
                  run_config=tune.RunConfig(storage_path=storage, verbose=0))
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    study = tuner.plan.searcher.study
    assert len(study.trials) == 6 and isinstance(study.sampler, optuna.samplers.GPSampler)
    assert study.best_value == min(r.metrics["loss"] for r in grid)
