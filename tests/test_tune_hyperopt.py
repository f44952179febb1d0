"""HyperOptSearch with Ray's signature, run by Optuna's TPE with HyperOpt's settings (tune/search/hyperopt.py)."""

from __future__ import annotations

import pickle

import optuna
import pytest

import fluidsalus.tune as tune
from fluidsalus import searchers
from fluidsalus.errors import ConfigError
from fluidsalus.tune import TuneConfig, Tuner
from fluidsalus.tune._translate import plan
from fluidsalus.tune.search.hyperopt import LINEAR_FORGETTING, HyperOptGamma, HyperOptSearch

rt = pytest.importorskip("ray.tune")


def test_the_signature_is_rays() -> None:
    import inspect

    from ray.tune.search.hyperopt import HyperOptSearch as RayHyperOptSearch

    ours, theirs = inspect.signature(HyperOptSearch), inspect.signature(RayHyperOptSearch)
    assert [(p.name, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.default) for p in theirs.parameters.values()]


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


def test_rays_own_object_is_refused_with_the_import_to_use() -> None:
    from ray.tune.search.hyperopt import HyperOptSearch as RayHyperOptSearch

    theirs = RayHyperOptSearch.__new__(RayHyperOptSearch)  # Ray's constructor needs hyperopt, not installed here
    with pytest.raises(ConfigError, match="change its import to `from fluidsalus.tune.search.hyperopt import "
                                          "HyperOptSearch`"):
        plan(TuneConfig(metric="m", mode="max", search_alg=theirs), {"x": tune.uniform(0, 1)})


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
