"""Differential tests: ``fluidsalus.tune.stopper`` against the installed Ray Tune stoppers.

The same seeded streams of results (several trials, interleaved, with plateaus, noise, missing and NaN values)
go to ours and to Ray's, built with the same arguments; every ``__call__`` answer and every ``stop_all()`` must
be the same. Ray is never started: its stoppers are plain objects. ``TimeoutStopper`` is driven with a clock of
the test's own, given to both modules.
"""

from __future__ import annotations

import datetime
import math
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from _trials import LazyModule, skip_module_unless_installed

from fluidsalus.tune import stopper as fs

skip_module_unless_installed("ray.tune")
# Imported at a test's first use, not with the module: device processes import this module to run its trainable,
# and ray.tune (with pandas and pyarrow) cost each about 1.5 CPU-s more.
rs = LazyModule("ray.tune.stopper")

TRIALS = ("t0", "t1", "t2", "t3")


def _stream(seed: int, length: int = 120, metric: str = "loss") -> list[tuple[str, dict[str, Any]]]:
    """Interleaved results of four trials: noisy descents that flatten out at different times, a few values
    missing or NaN."""
    rng = random.Random(seed)
    level = {t: rng.uniform(0.5, 2.0) for t in TRIALS}
    floor = {t: rng.uniform(0.0, 0.4) for t in TRIALS}
    iteration = dict.fromkeys(TRIALS, 0)
    out = []
    for _ in range(length):
        trial = rng.choice(TRIALS)
        iteration[trial] += 1
        value: float | None = floor[trial] + (level[trial] - floor[trial]) * math.exp(-0.3 * iteration[trial])
        value += rng.gauss(0.0, rng.choice((0.0, 0.001, 0.02)))
        roll = rng.random()
        result: dict[str, Any] = {"training_iteration": iteration[trial], "trial_id": trial}
        if roll < 0.03:
            value = float("nan")
        if roll > 0.98:
            value = None  # the metric is missing from this result
        if value is not None:
            result[metric] = value
        out.append((trial, result))
    return out


def _same_answers(ours: Any, rays: Any, stream: list[tuple[str, dict[str, Any]]],
                  on_step: Callable[[int], None] | None = None) -> int:
    """Feed ``stream`` to both; assert equal answers at every step; return how many results stopped a trial."""
    stops = 0
    for step, (trial, result) in enumerate(stream):
        if on_step is not None:
            on_step(step)
        try:
            expected: Any = rays(trial, dict(result))
        except Exception as e:  # noqa: BLE001 - ours must fail the same way
            with pytest.raises(type(e)):
                ours(trial, dict(result))
            continue
        answer = ours(trial, dict(result))
        assert bool(answer) == bool(expected), (step, trial, result)
        assert bool(ours.stop_all()) == bool(rays.stop_all()), (step, trial, result)
        stops += bool(answer)
    return stops


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kwargs", [
    {},
    {"std": 0.05, "num_results": 3, "grace_period": 2},
    {"std": 0.02, "num_results": 5, "grace_period": 8, "metric_threshold": 0.3, "mode": "min"},
    {"std": 0.1, "num_results": 2, "grace_period": 1, "metric_threshold": 0.2, "mode": "max"},
    {"metric_threshold": 0.0},  # (no mode: Ray takes a threshold of 0, whose truth it checks, and it bounds nothing)
])
def test_trial_plateau_stopper_answers_as_rays(seed: int, kwargs: dict[str, Any]) -> None:
    stream = [(t, r) for t, r in _stream(seed) if "loss" in r] if "metric_threshold" in kwargs else _stream(seed)
    stops = _same_answers(fs.TrialPlateauStopper("loss", **kwargs), rs.TrialPlateauStopper("loss", **kwargs), stream)
    if not kwargs:
        assert stops > 0  # the default settings see plateaus in these streams: the comparison is not vacuous


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kwargs", [
    {"std": 0.05, "top": 3, "mode": "min", "patience": 0},
    {"std": 0.2, "top": 4, "mode": "max", "patience": 3},
    {"std": 0.01, "top": 2, "mode": "min", "patience": 1},
])
def test_experiment_plateau_stopper_answers_as_rays(seed: int, kwargs: dict[str, Any]) -> None:
    stream = [(t, r) for t, r in _stream(seed) if "loss" in r and not math.isnan(r["loss"])]
    ours = fs.ExperimentPlateauStopper("loss", **kwargs)
    rays = rs.ExperimentPlateauStopper("loss", **kwargs)
    _same_answers(ours, rays, stream)
    assert ours.has_plateaued() == rays.has_plateaued()


def test_an_experiment_plateau_ends_the_experiment_after_its_patience() -> None:
    ours = fs.ExperimentPlateauStopper("loss", std=0.01, top=3, mode="min", patience=2)
    rays = rs.ExperimentPlateauStopper("loss", std=0.01, top=3, mode="min", patience=2)
    stream = [("t0", {"loss": v}) for v in (0.5, 0.1, 0.1, 0.1, 0.9, 0.8)]
    answers = []
    for trial, result in stream:
        answers.append(ours(trial, result))
        assert answers[-1] == rays(trial, result)
    # the top 3 plateau at the 4th result (patience 1 of 2) and stay there at the 5th (2 of 2)
    assert answers == [False, False, False, False, True, True]


@pytest.mark.parametrize("seed", range(4))
def test_maximum_iteration_function_and_combined_stoppers_answer_as_rays(seed: int) -> None:
    stream = _stream(seed)
    stops = _same_answers(fs.MaximumIterationStopper(7), rs.MaximumIterationStopper(7), stream)
    assert stops > 0

    def rule(trial_id: str, result: dict[str, Any]) -> bool:
        return result["training_iteration"] % 5 == 0 and trial_id != "t1"

    _same_answers(fs.FunctionStopper(rule), rs.FunctionStopper(rule), stream)
    ours = fs.CombinedStopper(fs.MaximumIterationStopper(9), fs.TrialPlateauStopper("loss", std=0.05),
                              fs.ExperimentPlateauStopper("training_iteration", std=0.5, top=3, mode="max"))
    rays = rs.CombinedStopper(rs.MaximumIterationStopper(9), rs.TrialPlateauStopper("loss", std=0.05),
                              rs.ExperimentPlateauStopper("training_iteration", std=0.5, top=3, mode="max"))
    _same_answers(ours, rays, stream)


@pytest.mark.parametrize("timeout", [5, 2.5, datetime.timedelta(seconds=4)])
def test_timeout_stopper_ends_the_experiment_when_rays_does(timeout: Any, monkeypatch) -> None:
    clock = [1000.0]

    def now() -> float:
        return clock[0]

    import ray.tune.stopper.timeout as ray_timeout

    monkeypatch.setattr(fs.time, "time", now)
    monkeypatch.setattr(ray_timeout.time, "time", now)
    ours, rays = fs.TimeoutStopper(timeout), rs.TimeoutStopper(timeout)
    rng = random.Random(7)

    def tick(step: int) -> None:
        clock[0] += rng.uniform(0.0, 0.3)

    _same_answers(ours, rays, _stream(3, length=80), on_step=tick)
    assert clock[0] - 1000.0 > 8.0  # the steps' time passes every timeout here
    assert ours.stop_all() and rays.stop_all()


@pytest.mark.parametrize("build", [
    lambda m: m.TrialPlateauStopper("loss", metric_threshold=0.1),
    lambda m: m.TrialPlateauStopper("loss", metric_threshold=0.1, mode="best"),
    lambda m: m.ExperimentPlateauStopper("loss", mode="best"),
    lambda m: m.ExperimentPlateauStopper("loss", top=1),
    lambda m: m.ExperimentPlateauStopper("loss", patience=-1),
    lambda m: m.ExperimentPlateauStopper("loss", std=0),
])
def test_arguments_ray_refuses_are_refused(build: Callable[[Any], Any]) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - Ray raises ValueError, fluidsalus its ConfigError
        build(rs)
    with pytest.raises(fs.ConfigError):
        build(fs)


@pytest.mark.parametrize("seed", range(4))
def test_a_dict_stop_rule_through_the_tune_front_end_answers_as_rays_trial_should_stop(seed: int) -> None:
    """``RunConfig(stop={...})``: Ray checks each flattened result with ``Trial.should_stop`` (a nested value under
    its ``"a/b"`` key; a key a result lacks is skipped with a warning). The Tune front end's rule
    (``combine_stops``: ``stop_rule(missing="warn")``) gives the same answer for every result of a stream where
    the metric sits in a nested dict and is sometimes missing."""
    from types import SimpleNamespace

    from ray.tune.experiment.trial import Trial
    from ray.tune.utils import flatten_dict

    from fluidsalus.tune._tuner import combine_stops

    criteria = {"val/loss": 0.45, "training_iteration": 25}
    ours = combine_stops(criteria, [])
    holder = SimpleNamespace(stopping_criterion=criteria)
    stops = 0
    for trial, result in _stream(seed, metric="loss"):
        nested = {k: v for k, v in result.items() if k != "loss"}
        if "loss" in result:
            nested["val"] = {"loss": 1.0 - result["loss"]}  # rising, so that it meets the threshold (NaN stays NaN)
        expected = Trial.should_stop(holder, flatten_dict(nested))
        assert ours(trial, nested) == expected, (trial, nested)
        stops += expected
    assert stops  # the stream meets the criteria


def test_stoppers_that_look_across_trials_answer_on_the_driver_only() -> None:
    """A device's copy of an ExperimentPlateauStopper saw only its device's trials and stopped a trial on their
    plateau; the devices now get a view that stops no trial itself, and a CombinedStopper keeps the per-trial
    answers of its other stoppers."""
    plateau = fs.ExperimentPlateauStopper("score", std=0.001, top=2, mode="max")
    view = fs.for_devices(plateau)
    assert [view("t0", {"score": 0.0}) for _ in range(3)] == [False, False, False] and not view.stop_all()
    combined = fs.for_devices(fs.CombinedStopper(fs.MaximumIterationStopper(2), plateau))
    assert not combined("t0", {"score": 0.0, "training_iteration": 1})
    assert combined("t0", {"score": 0.0, "training_iteration": 2})
    rule = fs.FunctionStopper(lambda trial_id, result: False)
    assert fs.for_devices(rule) is rule and fs.for_devices(None) is None


def _flat_or_rising(config: dict[str, Any]) -> None:
    from fluidsalus import tune

    if config["x"] == 0:
        time.sleep(1.0)  # starts after the other has reported a few rising values
    for i in range(10 if config["x"] == 0 else 40):
        time.sleep(0.05)
        tune.report({"score": 0.0 if config["x"] == 0 else float(i + 1)})


def test_an_experiment_plateau_is_judged_over_every_trial_as_in_ray(ray_cluster, tmp_path) -> None:
    """Two trials on two devices: the flat one has no plateau of the experiment's top values (the other keeps
    rising), so, as under Ray, both run to their end (before, its device's copy stopped it at its second result)."""
    from fluidsalus import tune

    stopper = fs.ExperimentPlateauStopper(metric="score", std=0.001, top=2, mode="max", patience=0)
    grid = tune.Tuner(_flat_or_rising, param_space={"x": tune.grid_search([0, 1])},
                      run_config=tune.RunConfig(storage_path=str(tmp_path), stop=stopper, verbose=0)).fit()
    assert sorted((r.config["x"], r.metrics["training_iteration"]) for r in grid) == [(0, 10), (1, 40)]


def test_which_stoppers_may_end_the_run_and_so_make_each_result_wait_for_the_driver():
    """A stopper whose stop_all() may be True makes each result wait for the driver's judgement (the run then ends
    at the result that ended it); one whose stop_all() is always False must not cost that round trip. Ray's own
    per-trial stoppers, passed unchanged, made every result wait (15-20x slower fast trials), and a subclass that
    overrides stop_all() of a per-trial stopper must wait (a review)."""
    from ray.tune import stopper as ray_stopper

    from fluidsalus.gpu.host import decides_stop_all

    class Subclass(fs.MaximumIterationStopper):
        def stop_all(self):
            return True

    assert not decides_stop_all(None) and not decides_stop_all(lambda trial_id, result: False)
    for per_trial in (fs.MaximumIterationStopper(3), fs.TrialPlateauStopper("m"),
                      fs.FunctionStopper(lambda trial_id, result: False), fs.NoopStopper(),
                      ray_stopper.MaximumIterationStopper(3), ray_stopper.TrialPlateauStopper("m"),
                      ray_stopper.CombinedStopper(ray_stopper.MaximumIterationStopper(3))):
        assert not decides_stop_all(per_trial), per_trial
    for ending in (fs.ExperimentPlateauStopper("m"), fs.TimeoutStopper(60), Subclass(3),
                   fs.CombinedStopper(fs.MaximumIterationStopper(3), fs.TimeoutStopper(60)),
                   ray_stopper.ExperimentPlateauStopper("m")):
        assert decides_stop_all(ending), ending

    class Says(fs.Stopper):
        decides_stop_all = False

        def __call__(self, trial_id, result):
            return False

        def stop_all(self):
            return False

    assert not decides_stop_all(Says())
