"""Ray's HyperOptSearch and BayesOptSearch with Ray's signatures, run by Optuna's samplers
(tune/search/hyperopt.py: TPE with HyperOpt's settings; tune/search/bayesopt.py: GPSampler)."""

# ruff: noqa: E402 - the optional library is imported through pytest.importorskip, before the modules that need it
from __future__ import annotations

import inspect
import math
import pickle
import sys
import time
import warnings

import optuna
import pytest
from _trials import LazyRayTune, began_on_the_freed_device

hp = pytest.importorskip("hyperopt").hp
import fluidsalus.tune as tune
from fluidsalus import searchers
from fluidsalus.errors import ConfigError
from fluidsalus.tune import TuneConfig, Tuner
from fluidsalus.tune._translate import plan
from fluidsalus.tune.search._hyperopt_space import HyperOptSpace
from fluidsalus.tune.search.bayesopt import BayesOptSearch
from fluidsalus.tune.search.hyperopt import LINEAR_FORGETTING, HyperOptGamma, HyperOptSearch
from fluidsalus.tune.search.nevergrad import NevergradSearch
from fluidsalus.tune.search.optuna import OptunaSearch
from fluidsalus.tune.search.zoopt import ZOOptSearch

rt = LazyRayTune()  # imported at its first use, not by device processes

#: Each class with Ray's module, and the fluidsalus module to import it from.
_RAYS = [(HyperOptSearch, "ray.tune.search.hyperopt", "hyperopt"),
         (BayesOptSearch, "ray.tune.search.bayesopt", "bayesopt"),
         (NevergradSearch, "ray.tune.search.nevergrad", "nevergrad"),  # runs Nevergrad itself, not Optuna
         (ZOOptSearch, "ray.tune.search.zoopt", "zoopt")]  # runs ZOOpt itself


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


@pytest.mark.parametrize("kwargs, message", [
    ({"n_initial_points": -1}, "n_initial_points must be an int >= 0"),
    ({"random_state_seed": 1.5}, "random_state_seed must be None or an int >= 0"),
    ({"gamma": 0}, r"gamma must be a number in \(0, 1\]"),
    ({"metric": ["a", "b"], "mode": ["min", "max"]}, "HyperOpt is single-objective"),
    ({"space": {"a": hp.uniform("x", 0, 1), "b": hp.uniform("x", 0, 2)}},
     r"the label 'x' names two parameters of the space"),
    ({"space": {"a": hp.choice("a", ["p", "q"])}, "points_to_evaluate": [{"a": "r"}]},
     r"points_to_evaluate: a='r' is not one of the options of hp.choice\('a', ...\)"),
    ({"space": {"a": hp.uniform("a", 0, 1)}, "points_to_evaluate": [{"b": 1}]},
     r"points_to_evaluate: b is not a key of the space"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        HyperOptSearch(**kwargs)


def test_a_hyperopt_space_without_hyperopt_installed_says_what_to_install(monkeypatch) -> None:
    class _HpExpression:
        """Stands for a hyperopt ``hp.*`` expression."""

    _HpExpression.__module__ = "hyperopt.pyll.base"
    monkeypatch.setitem(sys.modules, "hyperopt", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "hyperopt.pyll", None)
    with pytest.raises(ConfigError, match=r"HyperOpt's own hp.\* expressions, which need the hyperopt package \(pip "
                                          r"install hyperopt\)"):
        HyperOptSearch(space={"x": _HpExpression()})


#: A conditional HyperOpt space, as Ray's hyperopt_conditional_search_space_example.py writes one, with more kinds.
HP_SPACE = {
    "act": hp.choice("act", [{"name": "relu", "mult": hp.uniform("mult", 1, 2)}, {"name": "tanh"}]),
    "lr": hp.loguniform("lr", -5, 0),
    "units": hp.quniform("units", 8, 64, 8),
    "layers": hp.randint("layers", 1, 4),
    "batch": hp.uniformint("batch", 16, 32),
    "scaled": hp.uniform("w", 0, 1) * 10,
    "opt": hp.choice("opt", ["sgd", "adam"]),
    "steps": 5,
}


def _check_hp_config(config: dict) -> None:
    assert set(config) == {"act", "lr", "units", "layers", "batch", "scaled", "opt", "steps"}  # no labels leak
    if config["act"]["name"] == "relu":
        assert set(config["act"]) == {"name", "mult"} and 1 <= config["act"]["mult"] <= 2
    else:
        assert config["act"] == {"name": "tanh"}
    assert math.exp(-5) <= config["lr"] <= 1 and config["units"] % 8 == 0 and 8 <= config["units"] <= 64
    assert config["layers"] in (1, 2, 3) and isinstance(config["batch"], int) and 16 <= config["batch"] <= 32
    assert 0 <= config["scaled"] <= 10 and config["opt"] in ("sgd", "adam") and config["steps"] == 5


def test_a_hyperopt_space_is_searched_define_by_run_as_hyperopt_evaluates_it() -> None:
    import optuna

    space = HyperOptSpace(HP_SPACE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        config = space(trial)
        _check_hp_config(config)
        seen.add(config["act"]["name"])
        # a conditional parameter is suggested only on its branch
        assert ("mult" in trial.params) == (config["act"]["name"] == "relu")
        assert trial.params["layers"] == config["layers"] and trial.params["act"] in (0, 1)
    assert seen == {"relu", "tanh"}
    # points_to_evaluate by the space's keys: a choice by its option (a dict option with its own parameters)
    assert space.point_params({"act": {"name": "tanh"}, "opt": "adam", "lr": 0.1}) == {"act": 1, "opt": 1, "lr": 0.1}
    assert space.point_params({"act": {"name": "relu", "mult": 1.5}}) == {"act": 0, "mult": 1.5}


def test_a_tuner_runs_hyperopt_search_over_a_hyperopt_space(ray_cluster, storage) -> None:
    def objective(config):
        for step in range(config["steps"]):
            tune.report({"loss": config["lr"] * (2 if config["act"]["name"] == "tanh" else 1) / (step + 1)})

    point = {"act": {"name": "tanh"}, "lr": 0.05, "units": 16, "layers": 2, "batch": 20, "scaled": 0.5, "opt": "sgd"}
    search = HyperOptSearch(space=HP_SPACE, metric="loss", mode="min", n_initial_points=3, random_state_seed=0,
                            points_to_evaluate=[point])
    tuner = Tuner(objective, tune_config=TuneConfig(num_samples=6, search_alg=search,
                                                    scheduler=tune.schedulers.ASHAScheduler(max_t=5)),
                  run_config=tune.RunConfig(storage_path=storage, verbose=0))
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    configs = [r.config for r in grid]
    for config in configs:
        _check_hp_config(config)
    first = [c for c in configs if c["act"] == {"name": "tanh"} and c["lr"] == pytest.approx(0.05)]
    assert first and first[0]["opt"] == "sgd" and first[0]["units"] == 16  # the point ran as given


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
    ({}, {"k": tune.randint(1, 5)}, "k is an Integer parameter, and BayesOpt searches float parameters only"),
    ({}, {"x": tune.grid_search([0.1, 0.2])}, "grid_search parameters cannot be searched by BayesOpt"),
    ({"patience": 0}, {}, "patience must be an int >= 1"),
    ({"random_search_steps": -1}, {}, "random_search_steps must be an int >= 0"),
    ({"analysis": object()}, {}, "analysis .* is not supported"),
    ({"metric": ["a", "b"], "mode": ["min", "max"]}, {}, "BayesOpt is single-objective"),
])
def test_bad_arguments_and_spaces_are_refused_by_name(kwargs, space, message) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(TuneConfig(metric="m", mode="max", search_alg=BayesOptSearch(**kwargs)), space)


@pytest.mark.parametrize(("algorithm", "library"), [(OptunaSearch, "an Optuna"), (HyperOptSearch, "a HyperOpt")])
def test_a_grid_search_is_refused_as_in_ray(algorithm, library) -> None:
    """Ray refuses a grid in their spaces (ValueError); it ran as a random choice of the grid's values."""
    message = f"Grid search parameters cannot be automatically converted to {library} search space"
    with pytest.raises(ConfigError, match=message):
        plan(TuneConfig(metric="m", mode="max", search_alg=algorithm()),
             {"a": tune.grid_search([0.1, 0.2]), "b": tune.uniform(0, 1)})
    with pytest.raises(ConfigError, match=message):  # in its own space too
        plan(TuneConfig(metric="m", mode="max", search_alg=algorithm(space={"a": tune.grid_search([1, 2])})), {})


def test_optuna_search_drops_the_q_of_a_qloguniform_as_ray() -> None:
    """Ray 2.60's ``OptunaSearch`` searches ``tune.qloguniform(1e-3, 1, 1e-3)`` as ``FloatDistribution(1e-3, 1,
    log=True)``, logging "Optuna does not support both quantization and sampling from LogUniform. Dropped
    quantization." (its values, 0.0178, 0.1449, ..., are not multiples of q); fluidsalus refused it with a
    SpaceError. ``HyperOptSearch``, whose HyperOpt quantizes it, keeps q: it refused it, and now rounds its
    log-uniform draws to q (tests/test_tune_search_hyperopt_domains.py)."""
    with pytest.warns(UserWarning, match=r"^OptunaSearch: Optuna does not support both quantization and sampling "
                                         r"from LogUniform; q is dropped for model/lr \(as Ray's"):
        planned = plan(TuneConfig(metric="m", mode="max", search_alg=OptunaSearch(seed=1)),
                       {"model": {"lr": tune.qloguniform(1e-3, 1, 1e-3), "n": 2}, "b": tune.quniform(0, 1, 0.5)})
    assert planned.searcher._distributions == {
        "b": optuna.distributions.FloatDistribution(0, 1, step=0.5),
        "model/lr": optuna.distributions.FloatDistribution(1e-3, 1, log=True)}
    assert list(planned.searcher.space) == ["model", "b"] and planned.searcher.space["model"]["n"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: q is kept
        hyperopt = plan(TuneConfig(metric="m", mode="max", search_alg=HyperOptSearch()),
                        {"p": tune.qloguniform(1e-3, 1, 1e-3)}).searcher
    assert hyperopt._distributions == {"p": optuna.distributions.FloatDistribution(1e-3, 1, log=True)}
    assert hyperopt._transformed["p"].q == 1e-3


def test_a_bad_point_names_the_search_algorithm_built() -> None:
    """A point outside the space given to ``HyperOptSearch`` was refused as ``OptunaSearch: points_to_evaluate[0]
    ...`` (the engine's name; the space's errors already named the class built)."""
    with pytest.raises(ConfigError, match=r"^HyperOptSearch: points_to_evaluate\[0\]\['c'\] = 'zz' is outside the "
                                          r"parameter's range"):
        plan(TuneConfig(metric="m", mode="max", search_alg=HyperOptSearch(points_to_evaluate=[{"c": "zz"}])),
             {"c": tune.choice(["a", "b"])})
    with pytest.raises(ConfigError, match=r"^BayesOptSearch: points_to_evaluate\[0\]\['x'\] = 2"):
        plan(TuneConfig(metric="m", mode="max", search_alg=BayesOptSearch(points_to_evaluate=[{"x": 2}])),
             {"x": tune.uniform(0, 1)})


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


def test_in_the_runs_tail_a_prefetched_trial_waits_through_its_neighbours_verdicts_and_moves(ray_cluster, storage):
    """h173's 2 through the Tune front end: ``AsyncHyperBandScheduler`` under ``OptunaSearch`` decides at each
    result (each waits for the driver's verdict, a driver call), not at budget pauses. 3 trials of 40, 6 and 40 steps
    on 2 devices, the third prefetched behind the first: it waits through its neighbour's verdicts, and once the
    short trial ends it moves to the freed device (``plan_withdraw``). Before, it began at its neighbour's first
    verdict, could not move without a checkpoint (``plan_refused``) and the two time-sliced one device to their ends
    while the other idled (4.1 s against 2.5 s)."""

    steps = [40, 6, 40]

    def objective(config):
        for step in range(steps[config["i"]]):
            time.sleep(0.02)
            tune.report({"loss": 1.0 / (1 + step) + 0.01 * [0, 2, -1][config["i"]]})

    search = OptunaSearch(points_to_evaluate=[{"i": 0}, {"i": 1}, {"i": 2}])
    tuner = Tuner(tune.with_resources(objective, {"cpu": 1, "gpu": 0}), param_space={"i": tune.choice([0, 1, 2])},
                  tune_config=TuneConfig(metric="loss", mode="min", num_samples=3, search_alg=search,
                                         scheduler=tune.schedulers.AsyncHyperBandScheduler(grace_period=5, max_t=40)),
                  run_config=tune.RunConfig(name="tail", storage_path=storage, verbose=0))
    assert tuner.fit().num_errors == 0
    assert began_on_the_freed_device(str(f"{storage}/tail"))
