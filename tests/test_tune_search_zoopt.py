"""``fluidsalus.tune.search.zoopt.ZOOptSearch``: Ray's ZOOpt search algorithm on ZOOpt's ASRacos.

The space conversion, the argument checks and the suggest/complete protocol (which must never stall, however
the trials are asked for) run without Ray; a real ``Tuner`` run checks that its solutions are the trials' configs.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from _trials import LazyModule, skip_module_unless_installed

import fluidsalus.tune as tune
from fluidsalus.errors import ConfigError
from fluidsalus.tune.search import create_searcher
from fluidsalus.tune.search.zoopt import ZOOptSearch, convert_space

skip_module_unless_installed("zoopt")
# Imported at a test's first use, not with the module: device processes import this module to run its trainable.
zoopt = LazyModule("zoopt")

SPACE = {"x": tune.uniform(0, 1), "net": {"n": tune.randint(1, 4)}, "c": tune.choice(["a", "b"]),
         "q": tune.quniform(0, 1, 0.25), "epochs": 3}


def test_a_tune_space_becomes_zoopts_dimensions_as_ray_converts_it() -> None:
    ValueType = zoopt.ValueType
    assert convert_space(SPACE) == {"x": (ValueType.CONTINUOUS, [0.0, 1.0], 1e-12),
                                    "net/n": (ValueType.DISCRETE, [1, 3], True),  # upper excluded
                                    "c": (ValueType.GRID, ["a", "b"]),
                                    "q": (ValueType.CONTINUOUS, [0.0, 1.0], 0.25)}


@pytest.mark.parametrize("space, message", [
    ({"x": tune.loguniform(1e-3, 1)}, r"x is .*loguniform.*; ZOOpt searches tune.uniform/quniform/randint/choice"),
    ({"x": tune.randn()}, r"x is .*; ZOOpt searches"),
    ({"x": tune.grid_search([1, 2])}, r"grid_search parameters cannot be converted"),
])
def test_a_space_zoopt_cannot_search_is_refused_naming_the_parameter(space, message) -> None:
    with pytest.raises(ConfigError, match=rf"ZOOptSearch: {message}"):
        ZOOptSearch(budget=4, dim_dict=space)


@pytest.mark.parametrize("kwargs, message", [
    ({}, r"budget must be an int >= 1 .* got None"),
    ({"budget": 4, "algo": "cmaes"}, r"algo must be one of \['asracos', 'sracos'\], got 'cmaes'"),
    ({"budget": 4, "parallel_num": 0}, r"parallel_num must be an int >= 1, got 0"),
    ({"budget": 4, "points_to_evaluate": {"x": 1}}, r"points_to_evaluate must be a list of config dicts, got dict"),
    ({"budget": 4, "dim_dict": {"x": tune.uniform(0, 1), "c": tune.choice([1, 2])},
      "points_to_evaluate": [{"x": 0.5}]}, r"points_to_evaluate: \{'x': 0.5\} has no value for \['c'\]"),
])
def test_bad_arguments_are_refused_naming_the_argument(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=rf"ZOOptSearch: {message}"):
        ZOOptSearch(**kwargs)


def _drive(search: ZOOptSearch, in_flight: int, most: int, seed: int) -> list[dict]:
    """Ask for trials as the engine does (up to ``in_flight`` unfinished), end them in random order."""
    rng = random.Random(seed)
    live: list[str] = []
    made: list[dict] = []
    for _ in range(10 * most):
        while len(live) < in_flight and len(made) < most:
            config = search.suggest(f"t{len(made)}")
            if config == ZOOptSearch.FINISHED:
                for trial_id in live:  # the trials in flight still end
                    search.on_trial_complete(trial_id, {"m": rng.random()})
                return made
            if config is None:
                break
            live.append(f"t{len(made)}")
            made.append(config)
        if not live:
            return made
        search.on_trial_complete(live.pop(rng.randrange(len(live))), {"m": rng.random()})
    raise AssertionError("the search stalled")


@pytest.mark.parametrize("budget, parallel_num, in_flight", [(6, 1, 1), (8, 2, 2), (12, 2, 4), (10, 1, 3)])
def test_zoopt_never_stalls_however_its_trials_are_asked_for(budget, parallel_num, in_flight) -> None:
    # ZOOpt waits for its initial samples to end before it suggests again. Asked one at a time, it would wait for
    # an end that has already come unless its "wait" is taken while the last initial sample runs.
    search = ZOOptSearch(budget=budget, parallel_num=parallel_num, dim_dict=SPACE, metric="m", mode="min")
    made = _drive(search, in_flight, most=budget, seed=budget)
    assert len(made) == budget and search._live == {}  # then FINISHED, and every trial was told to ZOOpt
    assert search._optimizer.complete_num == budget and search.suggest("more") == ZOOptSearch.FINISHED
    for config in made:
        assert 0 <= config["x"] <= 1 and config["net"]["n"] in (1, 2, 3) and config["c"] in ("a", "b")
        assert config["q"] in (0.0, 0.25, 0.5, 0.75, 1.0) and isinstance(config["net"]["n"], int)


def test_points_come_first_max_is_told_negated_and_a_trial_without_the_metric_is_told_the_worst(monkeypatch) -> None:
    point = {"x": 0.5, "net": {"n": 2}, "c": "b", "q": 0.25}
    search = ZOOptSearch(budget=6, dim_dict=SPACE, metric="acc", mode="max", points_to_evaluate=[point])
    told: list[float] = []
    complete = search._optimizer.complete
    monkeypatch.setattr(search._optimizer, "complete", lambda s, v: (told.append(v), complete(s, v))[1])
    assert search.suggest("t0") == point
    second = search.suggest("t1")
    assert second is not None and second != point
    search.on_trial_complete("t0", {"acc": 0.9})
    search.on_trial_complete("t1", None, error=True)
    assert told == [-0.9, float("inf")]


def test_a_restored_searcher_goes_on_where_the_saved_one_was(tmp_path) -> None:
    search = ZOOptSearch(budget=10, dim_dict=SPACE, metric="m", mode="min")
    _drive(search, 1, most=5, seed=1)
    path = str(tmp_path / "state.pkl")
    search.save(path)
    restored = ZOOptSearch(budget=1)
    restored.restore(path)
    assert restored._handed_out == search._handed_out == 5 and restored._keys == search._keys
    np.random.seed(7)  # ZOOpt draws from NumPy's global generator
    expected = search.suggest("next")
    np.random.seed(7)
    assert restored.suggest("next") == expected


def test_create_searcher_builds_it_by_rays_short_name() -> None:
    search = create_searcher("zoopt", budget=5, metric="m", mode="min")
    assert isinstance(search, ZOOptSearch) and search.metric == "m"


def _objective(config: dict) -> None:
    for step in range(3):
        tune.report({"loss": (config["x"] - 0.3) ** 2 + config["n"] * 0.01 + 0.1 / (step + 1)})


def test_a_tuner_runs_its_solutions_under_asha(ray_cluster, storage) -> None:
    search = ZOOptSearch(budget=6, parallel_num=2)
    tuner = tune.Tuner(_objective, param_space={"x": tune.uniform(0, 1), "n": tune.randint(0, 4), "k": 7},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=6, search_alg=search,
                                                   scheduler=tune.schedulers.ASHAScheduler(max_t=3)),
                       run_config=tune.RunConfig(storage_path=storage, name="zo", verbose=0))
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    assert all(0 <= r.config["x"] <= 1 and r.config["n"] in (0, 1, 2, 3) and r.config["k"] == 7 for r in grid)
    assert search._live == {} and search._optimizer.complete_num == 6


@pytest.mark.parametrize("own_space", [False, True], ids=["param_space", "own_space"])
def test_tune_configs_metric_and_mode_differing_from_its_own_are_rays_choice(own_space: bool) -> None:
    """As for NevergradSearch (Ray 2.60 runs the pair; fluidsalus refused it): searching ``param_space``, ZOOpt is
    told TuneConfig's metric in TuneConfig's direction; with a ``dim_dict`` of its own, its own."""
    from fluidsalus.tune._translate import plan

    space = {"x": tune.uniform(0, 1)}
    searcher = ZOOptSearch(budget=4, metric="score", mode="max", dim_dict=space if own_space else None)
    replaced = "for the run's results, as in Ray; ZOOptSearch keeps its own metric" if own_space else \
        "as Ray's ZOOptSearch.set_search_properties replaces it"
    replacing = rf"TuneConfig.metric='other' replaces ZOOptSearch.metric='score',? {replaced}"
    with pytest.warns(UserWarning, match=replacing):
        planned = plan(tune.TuneConfig(metric="other", mode="min", num_samples=4, search_alg=searcher),
                       {} if own_space else space)
    assert (planned.metric, planned.mode) == ("other", "min")
    if own_space:
        assert (searcher.metric, searcher.mode, searcher._loss(2.0)) == ("score", "max", -2.0)
    else:
        assert (searcher.metric, searcher.mode, searcher._loss(2.0)) == ("other", "min", 2.0)
