"""``fluidsalus.tune.search.ax.AxSearch``: Ray's ``AxSearch`` with Ax's constraints, run by Optuna's GPSampler.

The space conversion and the argument checks run without Ray; a real ``Tuner`` run on the shared test Ray checks
that every trial's configuration satisfies the parameter constraints and that the outcome constraints reach the
study. Ray's ``ax_example.py`` runs in ``tests/test_tune_examples.py``.
"""

from __future__ import annotations

import math

import pytest

import fluidsalus.tune as tune
from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.tune.search import ConcurrencyLimiter, create_searcher
from fluidsalus.tune.search.ax import AxSearch, ax_space


def test_axs_parameter_dicts_become_the_domains_that_draw_the_same_values() -> None:
    space = ax_space([
        {"name": "lr", "type": "range", "bounds": [1e-4, 1e-1], "log_scale": True},
        {"name": "model/width", "type": "range", "bounds": [2, 8]},  # int bounds: an int, upper bound included
        {"name": "drop", "type": "range", "bounds": [0, 1], "value_type": "float"},
        {"name": "act", "type": "choice", "values": ["relu", "tanh"], "is_ordered": False},
        {"name": "epochs", "type": "fixed", "value": 3},
    ])
    assert space["epochs"] == 3
    lr, width, drop, act = space["lr"], space["model"]["width"], space["drop"], space["act"]
    assert isinstance(lr, sp.Float) and lr.log and (lr.lower, lr.upper) == (1e-4, 1e-1)
    assert isinstance(width, sp.Integer) and (width.lower, width.upper) == (2, 9) and not width.log
    assert isinstance(drop, sp.Float) and (drop.lower, drop.upper) == (0.0, 1.0) and not drop.log
    assert isinstance(act, sp.Categorical) and list(act.categories) == ["relu", "tanh"]


@pytest.mark.parametrize("parameter, message", [
    ({"name": "x", "type": "range", "bounds": [1, 0]}, r" \('x'\): 'bounds' must be \[lower, upper\]"),
    ({"name": "x", "type": "range", "bounds": [0.5, 2.5], "value_type": "int"}, r"an int range needs whole bounds"),
    ({"name": "x", "type": "range", "bounds": [0, 1], "value_type": "str"}, r"'value_type' of a range must be"),
    ({"name": "x", "type": "choice", "values": []}, r"a choice parameter needs 'values', a non-empty list"),
    ({"name": "x", "type": "fixed"}, r"a fixed parameter needs 'value'"),
    ({"name": "x", "type": "ranged", "bounds": [0, 1]}, r"'type' must be 'range', 'choice' or 'fixed'"),
    ({"name": "x", "type": "range", "bounds": [0, 1], "is_fidelity": True},
     r"has \['is_fidelity'\]; fluidsalus reads"),
    ({"type": "fixed", "value": 1}, r"'name' must be a non-empty str"),
])
def test_a_bad_ax_parameter_is_refused_naming_it(parameter, message) -> None:
    with pytest.raises(ConfigError, match=rf"AxSearch: space\[0\].*{message}"):
        AxSearch(space=[parameter], metric="m", mode="min")


@pytest.mark.parametrize("kwargs, message", [
    ({"ax_client": object()}, r"ax_client cannot be used: fluidsalus runs AxSearch as Optuna's GPSampler"),
    ({"generation_strategy": object()}, r"generation_strategy takes an Ax object"),
    ({"num_trials": 3}, r"'num_trials' is no argument of AxClient; it takes random_seed"),
    ({"random_seed": -1}, r"random_seed must be None or an int >= 0"),
    ({"parameter_constraints": ["x1 < 1"]}, r"parameter_constraints: 'x1 < 1' must hold exactly one"),
    ({"outcome_constraints": ["m <= 5%"]}, r"outcome_constraints: 'm <= 5%' is relative"),
    ({"metric": ["a", "b"], "mode": ["min", "max"]}, r"metric and mode must be one result key"),
    ({"space": {"x": tune.grid_search([1, 2])}}, r"grid_search parameters cannot be converted into Ax's search space"),
    ({"space": {"x": tune.randn()}}, r"x is a Normal parameter, which Ax cannot search"),
])
def test_arguments_ax_cannot_take_here_are_refused_naming_them(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=rf"AxSearch: {message}"):
        AxSearch(**kwargs)


def test_ray_drops_a_quantization_for_ax_and_so_does_fluidsalus() -> None:
    with pytest.warns(UserWarning, match=r"n: Ax does not support quantization"):
        searcher = AxSearch(space={"n": tune.qrandint(0, 10, 5), "x": tune.uniform(0, 1)}, metric="m", mode="min")
    n = searcher.space["n"]
    assert isinstance(n, sp.Integer) and (n.lower, n.upper, n.q) == (0, 11, None)  # 0..10, as Ray's bounds


def test_create_searcher_builds_it_by_rays_short_name_and_random_seed_seeds_it() -> None:
    searcher = create_searcher("ax", metric="m", mode="max")
    assert isinstance(searcher, AxSearch) and type(searcher.sampler).__name__ == "GPSampler"
    assert AxSearch(random_seed=3).seed == 3


def _objective(config: dict) -> None:
    x = [config["x1"], config["x2"], config["x3"]]
    for step in range(3):
        loss = sum((v - 0.5) ** 2 for v in x) + 0.1 / (step + 1)
        tune.report({"loss": loss, "l2norm": math.sqrt(sum(v * v for v in x))})


def test_a_tuner_run_proposes_only_configurations_inside_the_parameter_constraints(ray_cluster, storage) -> None:
    searcher = AxSearch(parameter_constraints=["x1 + x2 <= 0.6", "x3 >= x1"], outcome_constraints=["l2norm <= 1.0"],
                        random_seed=0)
    tuner = tune.Tuner(_objective, param_space={f"x{i}": tune.uniform(0.0, 1.0) for i in (1, 2, 3)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=8,
                                                   search_alg=ConcurrencyLimiter(searcher, max_concurrent=2),
                                                   scheduler=tune.schedulers.ASHAScheduler(max_t=3)),
                       run_config=tune.RunConfig(storage_path=storage, name="ax", verbose=0))
    grid = tuner.fit()
    assert len(grid) == 8 and grid.num_errors == 0
    for result in grid:
        c = result.config
        assert c["x1"] + c["x2"] <= 0.6 + 1e-9 and c["x3"] >= c["x1"] - 1e-9, c
    assert set(grid.get_best_result().config) == {"x1", "x2", "x3"}


def test_a_tuner_refuses_a_constraint_on_a_parameter_its_space_lacks(ray_cluster, storage) -> None:
    tuner = tune.Tuner(_objective, param_space={"x1": tune.uniform(0.0, 1.0), "x2": 0.5, "x3": 0.5},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=2,
                                                   search_alg=AxSearch(parameter_constraints=["x1 + x2 <= 1"])),
                       run_config=tune.RunConfig(storage_path=storage, name="ax_bad", verbose=0))
    with pytest.raises(ConfigError, match=r"parameter_constraints: 'x1 \+ x2 <= 1' names 'x2', which is no float or "
                                          r"int parameter of the search space; it has \['x1'\]"):
        tuner.fit()


def test_a_restored_run_keeps_the_constraints(ray_cluster, storage, tmp_path) -> None:
    from fluidsalus.testing.tune import InterruptOnce, resumable

    search_alg = AxSearch(parameter_constraints=["x + y <= 0.3"], outcome_constraints=["i <= 100"], random_seed=0)
    tuner = tune.Tuner(resumable, param_space={"x": tune.uniform(0.0, 1.0), "y": tune.uniform(0.0, 1.0)},
                       tune_config=tune.TuneConfig(metric="i", mode="max", num_samples=6, max_concurrent_trials=2,
                                                   search_alg=search_alg),
                       run_config=tune.RunConfig(name="ax_restore", storage_path=storage, verbose=0,
                                                 callbacks=[InterruptOnce(str(tmp_path / "interrupted"), n=3)]))
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    restored = tune.Tuner.restore(f"{storage}/ax_restore", resumable)
    grid = restored.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    assert all(r.config["x"] + r.config["y"] <= 0.3 + 1e-9 for r in grid), [r.config for r in grid]
