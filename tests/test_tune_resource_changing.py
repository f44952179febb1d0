"""ResourceChangingScheduler: the base scheduler decides, the planner changes resources (docs/compatibility.md)."""

from __future__ import annotations

import warnings

import pytest

import fluidsalus.tune as tune
from fluidsalus import searchers
from fluidsalus.errors import ConfigError
from fluidsalus.tune import TuneConfig, Tuner
from fluidsalus.tune import schedulers as ts
from fluidsalus.tune._translate import plan
from fluidsalus.tune.schedulers.resource_changing_scheduler import (
    DistributeResources,
    DistributeResourcesToTopJob,
    ResourceChangingScheduler,
)

SPACE = {"x": tune.uniform(0, 1)}


def _plan(scheduler, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        planned = plan(TuneConfig(scheduler=scheduler, **kwargs), SPACE)
    return planned, [str(w.message) for w in caught]


def test_the_base_schedulers_decisions_run_and_one_warning_says_the_allocation_function_is_not_called() -> None:
    base = ts.ASHAScheduler(max_t=27, grace_period=3, reduction_factor=3, metric="loss", mode="min")
    planned, messages = _plan(ResourceChangingScheduler(base, DistributeResourcesToTopJob(metric="loss", mode="min")),
                              num_samples=5)
    alone, _ = _plan(ts.ASHAScheduler(max_t=27, grace_period=3, reduction_factor=3, metric="loss", mode="min"),
                     num_samples=5)
    s = planned.searcher
    assert isinstance(s, searchers.ASHA)
    assert (s.metric, s.mode, s.max_t, s.grace_period, s.reduction_factor) == ("loss", "min", 27, 3, 3)
    assert planned.summary == alone.summary
    assert len(messages) == 1
    assert "ResourceChangingScheduler runs AsyncHyperBandScheduler's decisions" in messages[0]
    assert "DistributeResourcesToTopJob(" in messages[0] and "is not called" in messages[0]


def test_metric_and_mode_are_the_base_schedulers() -> None:
    rcs = ResourceChangingScheduler(ts.ASHAScheduler())
    assert (rcs.metric, rcs.mode) == (None, None)
    assert rcs.set_search_properties("acc", "max") is True
    assert (rcs.metric, rcs.mode, rcs.base_scheduler.metric) == ("acc", "max", "acc")
    planned, _ = _plan(ResourceChangingScheduler(ts.ASHAScheduler(metric="acc", mode="max")))
    assert (planned.metric, planned.mode) == ("acc", "max")
    with pytest.raises(ConfigError, match="metric: given differently"):
        _plan(ResourceChangingScheduler(ts.ASHAScheduler(metric="acc", mode="max")), metric="loss", mode="max")


def test_no_base_scheduler_is_fifo_and_the_default_allocation_is_distribute_resources() -> None:
    rcs = ResourceChangingScheduler()
    assert isinstance(rcs.base_scheduler, ts.FIFOScheduler)
    assert isinstance(rcs.resources_allocation_function, DistributeResources)
    planned, _ = _plan(rcs, num_samples=3)
    assert isinstance(planned.searcher, searchers.RandomSearch) and planned.searcher.num_samples == 3
    assert isinstance(tune.create_scheduler("resource_changing", base_scheduler=ts.HyperBandScheduler(max_t=9),
                                            unknown=1).base_scheduler, ts.HyperBandScheduler)


@pytest.mark.parametrize("build, message", [
    (lambda: ResourceChangingScheduler(base_scheduler=3),
     "ResourceChangingScheduler.base_scheduler must be None or one of"),
    (lambda: ResourceChangingScheduler(resources_allocation_function=5),
     "resources_allocation_function must be None or a callable"),
    (lambda: ResourceChangingScheduler(ResourceChangingScheduler()),
     "base_scheduler must not be another ResourceChangingScheduler"),
    (lambda: DistributeResources(increase_by={"CPU": -1}),
     r"DistributeResources: increase_by must be a dict of resource name -> amount >= 0"),
    (lambda: DistributeResources(increase_by_times=1.5), "increase_by_times must be an int"),
    (lambda: DistributeResources(add_bundles="yes"), "add_bundles must be True or False"),
    (lambda: DistributeResourcesToTopJob(mode="up"), "DistributeResourcesToTopJob: mode must be"),
])
def test_bad_arguments_are_refused_with_the_field(build, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


def test_the_allocation_function_is_never_called_by_fluidsalus() -> None:
    with pytest.raises(ConfigError, match="does not call resource allocation functions"):
        DistributeResources()(None, None, {}, None)


def test_rays_resource_changing_scheduler_is_translated_with_its_base_and_allocation() -> None:
    from ray.tune.schedulers import ASHAScheduler as RayASHA
    from ray.tune.schedulers import ResourceChangingScheduler as RayRCS
    from ray.tune.schedulers.resource_changing_scheduler import DistributeResources as RayDistribute
    from ray.tune.schedulers.resource_changing_scheduler import DistributeResourcesToTopJob as RayTop

    ray_rcs = RayRCS(RayASHA(max_t=8, grace_period=2), RayDistribute(increase_by={"CPU": 1}, increase_by_times=2))
    planned, messages = _plan(ray_rcs, metric="m", mode="max", num_samples=4)
    assert isinstance(planned.searcher, searchers.ASHA)
    assert (planned.searcher.max_t, planned.searcher.grace_period) == (8, 2)
    assert sum("TuneConfig.scheduler is Ray Tune's ResourceChangingScheduler" in m for m in messages) == 1
    assert any("DistributeResources(add_bundles=False, increase_by={'CPU': 1.0}, increase_by_times=2" in m
               for m in messages)
    with pytest.warns(UserWarning, match="ResourceChangingScheduler.base_scheduler is Ray Tune's"):
        ours = ResourceChangingScheduler(RayASHA(max_t=8), RayTop(metric="m", mode="min"))
    assert isinstance(ours.base_scheduler, ts.AsyncHyperBandScheduler)
    assert isinstance(ours.resources_allocation_function, RayTop)  # a callable is kept as it is
    _, messages = _plan(RayRCS(RayASHA(max_t=8), RayTop(metric="m", mode="min")), metric="m", mode="max")
    assert any("translated into ResourceChangingScheduler(" in m and "DistributeResourcesToTopJob(" in m
               and "metric='m', mode='min')" in m for m in messages)


def test_a_users_subclass_of_a_ray_scheduler_is_refused_not_translated_as_its_base() -> None:
    from ray.tune.schedulers import ASHAScheduler as RayASHA

    class MyScheduler(RayASHA):
        def on_trial_result(self, tune_controller, trial, result):  # code fluidsalus would silently drop
            return "STOP"

    with pytest.raises(ConfigError, match="TuneConfig.scheduler is MyScheduler, a subclass of Ray Tune's "
                                          "AsyncHyperBandScheduler with code of its own"):
        _plan(MyScheduler(), metric="m", mode="max")


def _stepped(config):
    resources = tune.get_context().get_trial_resources()
    for step in range(1, 5):
        tune.report({"value": config["x"], "step": step, "cpus": resources.required_resources["CPU"]})


def test_a_run_under_resource_changing_scheduler_is_stopped_by_its_base_asha(ray_cluster, storage) -> None:
    # Best first, so that some trial is stopped at a rung whatever the timing (see test_tune_frontend).
    scheduler = ResourceChangingScheduler(ts.ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2))
    tuner = Tuner(tune.with_resources(_stepped, {"cpu": 1}),
                  param_space={"x": tune.grid_search([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])},
                  tune_config=TuneConfig(metric="value", mode="max", scheduler=scheduler),
                  run_config=tune.RunConfig(storage_path=storage, verbose=0))
    with pytest.warns(UserWarning, match="ResourceChangingScheduler runs AsyncHyperBandScheduler's decisions"):
        grid = tuner.fit()
    assert grid.num_errors == 0 and len(grid) == 6
    ends = sorted(r.metrics["training_iteration"] for r in grid)
    assert ends[0] < 4 and ends[-1] == 4  # some stopped at a rung, some ran to max_t
    assert {r.metrics["cpus"] for r in grid} == {1.0}  # the trial's request, as the warning says
    assert grid.get_best_result().config["x"] == 1.0
