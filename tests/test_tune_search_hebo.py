"""``fluidsalus.tune.search.hebo.HEBOSearch``: Ray's ``HEBOSearch`` run by Optuna's GPSampler in synchronous batches.

The argument checks and the plan run without Ray; a real ``Tuner`` run on the shared test Ray checks that a new
batch starts only once every trial of the last one has ended, as Ray's ``HEBOSearch`` proposes.
"""

from __future__ import annotations

import pytest

import fluidsalus.tune as tune
from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.tune._translate import plan
from fluidsalus.tune.search import ConcurrencyLimiter, create_searcher
from fluidsalus.tune.search.hebo import HEBOSearch

SPACE = {"x": tune.uniform(0.0, 1.0), "n": tune.qrandint(0, 10, 5), "act": tune.choice(["a", "b"]), "k": 3}


@pytest.mark.parametrize("kwargs, message", [
    ({"max_concurrent": 0}, r"max_concurrent must be an int >= 1 \(got 0\)"),
    ({"random_state_seed": "1"}, r"random_state_seed must be None or an int >= 0"),
    ({"space": object()}, r"space must be None or a dict of tune.\* domains .* HEBO's own DesignSpace needs HEBO"),
    ({"rand_samples": 3}, r"\['rand_samples'\] are no arguments of HEBO\(\); it takes rand_sample"),
    ({"rand_sample": -1}, r"rand_sample must be None or an int >= 0"),
    ({"space": {"x": tune.randn()}}, r"x is a Normal parameter, which HEBO cannot search"),
    ({"space": {"x": tune.grid_search([1, 2])}}, r"grid_search parameters cannot be converted into HEBO's search"),
])
def test_arguments_hebo_cannot_take_are_refused_naming_them(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=rf"HEBOSearch: {message}"):
        HEBOSearch(**kwargs)


def test_hebos_model_arguments_are_accepted_with_a_warning_that_they_are_not_used() -> None:
    with pytest.warns(UserWarning, match=r"\['acq_cls', 'model_name'\] choose HEBO's own model"):
        HEBOSearch(model_name="gp", acq_cls=object)


def test_the_plan_batches_as_ray_and_starts_with_hebos_number_of_random_trials() -> None:
    with pytest.warns(UserWarning, match=r"n: HEBO does not support quantization"):
        planned = plan(tune.TuneConfig(metric="m", mode="min", num_samples=12,
                                       search_alg=HEBOSearch(max_concurrent=3, random_state_seed=1)), SPACE)
    searcher = planned.searcher
    assert searcher.batch_size == 3 and searcher.wait_for_batch
    assert type(searcher.study.sampler).__name__ == "GPSampler" and searcher.study.sampler._n_startup_trials == 4
    n = sp.split_constants(searcher.space)[0]["n"]
    assert isinstance(n, sp.Integer) and (n.lower, n.upper, n.q) == (0, 11, None)
    assert planned.summary.endswith("in batches of 3")
    limited = plan(tune.TuneConfig(metric="m", mode="min", num_samples=12, search_alg=ConcurrencyLimiter(
        HEBOSearch(max_concurrent=3, rand_sample=1), max_concurrent=2)), {"x": tune.uniform(0.0, 1.0)})
    assert limited.searcher.batch_size == 2 and limited.searcher.study.sampler._n_startup_trials == 2  # HEBO's min


def test_create_searcher_builds_it_by_rays_short_name() -> None:
    searcher = create_searcher("hebo", metric="m", mode="max", max_concurrent=4)
    assert isinstance(searcher, HEBOSearch) and searcher.max_concurrent == 4


def _objective(config: dict) -> None:
    import time

    time.sleep(0.05 + 0.1 * config["x"])  # trials of one batch end at different times
    tune.report({"loss": (config["x"] - 0.3) ** 2})


def test_a_tuner_starts_each_batch_once_the_last_one_has_ended(ray_cluster, storage) -> None:
    tuner = tune.Tuner(_objective, param_space={"x": tune.uniform(0.0, 1.0)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=6,
                                                   search_alg=HEBOSearch(max_concurrent=2, random_state_seed=0)),
                       run_config=tune.RunConfig(storage_path=storage, name="hebo", verbose=0))
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    from fluidsalus.store import ExperimentStore

    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    rows = sorted(store.trials(), key=lambda r: r.started_at)
    batches = [rows[0:2], rows[2:4], rows[4:6]]
    for before, after in zip(batches, batches[1:], strict=False):
        assert min(r.started_at for r in after) >= max(r.finished_at for r in before), (before, after)
