"""Where ``fluidsalus.tune`` used to differ from Ray Tune 2.60 (issue #6), each checked by behaviour:

1. ``OptunaSearch(space=<define-by-run function>)``: conditional parameters, returned constants, resume.
2. ``points_to_evaluate`` of ``BasicVariantGenerator`` (Ray's exact configurations, order and count) and of
   ``TuneBOHB``; with ASHA and HyperBand too.
3. ``num_samples=-1`` with searchers other than random search.
4. Ray's callback hooks: starts, recoveries, restores, checkpoints, errors, with Ray's arguments.
5. ``Tuner.restore(resume_errored=..., restart_errored=..., resume_unfinished=...)``.
6. ``with_resources``: validation, fractional GPUs as a recorded hint.
7. A multi-objective ``OptunaSearch(metric=[...], mode=[...])``; ``points_to_evaluate`` under PBT.

Tests that start trials use the session's 2-CPU Ray (``ray_cluster``).
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import optuna
import pytest
import ray
from _trials import LazyRayTune, pretend_ray_is

from fluidsalus import space as sp
from fluidsalus import tune
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import OptunaSearch as EngineOptuna
from fluidsalus.searchers import RandomSearch
from fluidsalus.searchers._bohb import BOHB, SyncBOHB
from fluidsalus.searchers._random import ENDLESS_FIRST_BATCH
from fluidsalus.store import ExperimentStore
from fluidsalus.testing.tune import InterruptOnce
from fluidsalus.tune import Tuner
from fluidsalus.tune._streamed import StreamedASHA, StreamedHyperBand
from fluidsalus.tune._trainable import TrialEntry, normalize_resources
from fluidsalus.tune._translate import plan
from fluidsalus.tune.search.bohb import TuneBOHB
from fluidsalus.tune.search.optuna import OptunaSearch

rt = LazyRayTune()  # imported at its first use, not by device processes

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _tuner(trainable: Any, storage: str, param_space: dict[str, Any], run_kwargs: dict[str, Any] | None = None,
           **tune_kwargs: Any) -> Tuner:
    return Tuner(trainable, param_space=param_space, tune_config=tune.TuneConfig(**tune_kwargs),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0, **(run_kwargs or {})))


def _add(searcher: Any, prefix: str = "t") -> list[tuple[str, dict[str, Any]]]:
    """Take the searcher's next groups and announce their new trials; returns (id, config) of each."""
    added = []
    for group in searcher.next_groups():
        for config in group.configs:
            trial_id = f"{prefix}{getattr(searcher, '_test_seq', 0)}"
            searcher._test_seq = getattr(searcher, "_test_seq", 0) + 1
            searcher.on_trial_add(trial_id, group.group_id, config)
            added.append((trial_id, config))
    return added


# ---------------------------------------------------------------------------------------------------------
# 1. Define-by-run OptunaSearch
# ---------------------------------------------------------------------------------------------------------


def _define_by_run(trial: Any) -> dict[str, Any]:
    activation = trial.suggest_categorical("activation", ["relu", "tanh"])
    trial.suggest_float("width", 0, 20)
    if activation == "relu":
        trial.suggest_float("mult", 1, 2)
    return {"steps": 3, "model/depth": 2}


def test_define_by_run_space_gives_conditional_parameters_and_the_returned_constants() -> None:
    holder = OptunaSearch(space=_define_by_run, metric="loss", mode="min", seed=0,
                          points_to_evaluate=[{"activation": "relu", "width": 5.0}])
    planned = plan(tune.TuneConfig(search_alg=holder, num_samples=12), {"const": "c"})
    searcher = planned.searcher
    assert isinstance(searcher, EngineOptuna) and "define-by-run" in planned.summary
    configs = []
    while len(configs) < 12:
        added = _add(searcher)
        configs += [c for _, c in added]
        for trial_id, config in added:
            searcher.on_result(trial_id, {"loss": config["width"], "training_iteration": 1})
            searcher.on_trial_complete(trial_id, {"loss": config["width"]})
    assert configs[0]["activation"] == "relu" and configs[0]["width"] == 5.0  # the point went first
    for config in configs:
        assert config["const"] == "c" and config["steps"] == 3 and config["model"] == {"depth": 2}
        assert ("mult" in config) == (config["activation"] == "relu")  # conditional on the draw
        assert 0 <= config["width"] <= 20
    assert {c["activation"] for c in configs} == {"relu", "tanh"}
    study_params = [t.params for t in searcher.study.trials]
    assert [{k: c[k] for k in p} for p, c in zip(study_params, configs, strict=True)] == study_params


def test_define_by_run_state_round_trip_keeps_each_trials_own_parameters() -> None:
    searcher = EngineOptuna({}, 6, "loss", "min", seed=1, define_by_run=_define_by_run)
    added = _add(searcher)
    for trial_id, config in added[:2]:
        searcher.on_trial_complete(trial_id, {"loss": config["width"]})
    state = json.loads(json.dumps(searcher.state_dict()))
    resumed = EngineOptuna({}, 6, "loss", "min", seed=1, define_by_run=_define_by_run)
    resumed.load_state_dict(state)
    finished = [t for t in resumed.study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert [t.params for t in finished] == [searcher.study.trials[i].params for i in range(2)]
    assert [set(t.distributions) for t in finished] == [set(c) - {"steps", "model"} for _, c in added[:2]]
    running = resumed.optuna_trial(added[2][0])
    assert running is not None and running.params == searcher.optuna_trial(added[2][0]).params


def test_define_by_run_bad_returns_and_mixed_spaces_are_refused() -> None:
    bad = EngineOptuna({}, 2, "loss", "min", define_by_run=lambda trial: [trial.suggest_float("x", 0, 1)])
    with pytest.raises(ConfigError, match="define-by-run function must return None or a dict with str keys"):
        bad.next_groups()
    with pytest.raises(ConfigError, match="define-by-run space, and param_space holds parameters to search too"):
        plan(tune.TuneConfig(search_alg=OptunaSearch(space=_define_by_run, metric="m", mode="min")),
             {"x": tune.uniform(0, 1)})
    with pytest.raises(ConfigError, match="evaluated_rewards cannot be used with a define-by-run space"):
        EngineOptuna({}, 2, "loss", "min", define_by_run=_define_by_run, points_to_evaluate=[{"width": 1.0}],
                     evaluated_rewards=[1.0])


def _objective(config: dict[str, Any]) -> None:
    for step in range(config["steps"]):
        tune.report({"loss": config["width"] * config.get("mult", 1.0) / (step + 1)})


def test_define_by_run_through_the_tuner_with_asha(ray_cluster, storage: str) -> None:
    holder = OptunaSearch(space=_define_by_run, metric="loss", mode="min", seed=2)
    tuner = _tuner(_objective, storage, {}, search_alg=tune.search.ConcurrencyLimiter(holder, 2),
                   scheduler=tune.schedulers.ASHAScheduler(max_t=3, grace_period=1), num_samples=5)
    grid = tuner.fit()
    assert len(grid) == 5 and grid.num_errors == 0
    study = tuner.plan.searcher.study
    assert len(study.trials) == 5 and all(t.state.is_finished() for t in study.trials)
    by_id = {t.user_attrs["fluidsalus_trial_id"]: t.params for t in study.trials}
    for result in grid:
        params = by_id[result.metrics["trial_id"]]
        assert {k: result.config[k] for k in params} == params
        assert result.config["steps"] == 3 and ("mult" in result.config) == (result.config["activation"] == "relu")


# ---------------------------------------------------------------------------------------------------------
# 2. points_to_evaluate
# ---------------------------------------------------------------------------------------------------------


def _ray_variants(space: dict[str, Any], num_samples: int, seed: int, points: list[dict[str, Any]]
                  ) -> list[dict[str, Any]]:
    """The configurations Ray's BasicVariantGenerator makes (its _TrialIterator's loop, over Ray's functions)."""
    from ray.tune.search.sample import _BackwardsCompatibleNumpyRng
    from ray.tune.search.variant_generator import _get_preset_variants, generate_variants

    rng = _BackwardsCompatibleNumpyRng(seed)
    spec, out, left = {"config": space}, [], num_samples
    for point in points:
        left -= 1
        out += [s["config"] for _, s in _get_preset_variants(copy.deepcopy(spec), point, random_state=rng)]
    for _ in range(max(left, 0)):
        out += [s["config"] for _, s in generate_variants(copy.deepcopy(spec), random_state=rng)]
    return out


@pytest.mark.parametrize("num_samples", [1, 3, 6])
def test_random_search_points_give_rays_configurations_in_rays_order(num_samples: int) -> None:
    ray_space = {"a": rt.uniform(0, 1), "g": rt.grid_search([1, 2]), "n": {"d": rt.randint(0, 10), "e": 5},
                 "c": rt.choice(["x", "y"])}
    ours = {"a": tune.uniform(0, 1), "g": tune.grid_search([1, 2]), "n": {"d": tune.randint(0, 10), "e": 5},
            "c": tune.choice(["x", "y"])}
    points = [{"a": 0.5}, {"g": 1, "n": {"d": 3}}, {"c": "y", "a": 0.25}]
    expected = _ray_variants(ray_space, num_samples, 42, points)
    generator = tune.search.BasicVariantGenerator(points_to_evaluate=points, random_state=42)
    searcher = plan(tune.TuneConfig(search_alg=generator, num_samples=num_samples), ours).searcher
    configs = searcher.next_groups()[0].configs
    assert configs == expected
    # The first point fixes a (2 grid points); the second fixes g and n/d (1); the third c and a (2): all
    # points run even when there are more points than samples, as in Ray.
    assert [c["a"] for c in configs[:2]] == [0.5, 0.5] and configs[2]["n"]["d"] == 3
    assert len(configs) == 5 + 2 * max(num_samples - 3, 0) == searcher.total_samples


@pytest.mark.parametrize("scheduler", [None, "asha", "hyperband"])
def test_constant_grid_search_gives_rays_configurations(scheduler) -> None:
    from ray.tune.search.sample import _BackwardsCompatibleNumpyRng
    from ray.tune.search.variant_generator import _get_preset_variants, generate_variants

    def space(m):
        return {"a": m.uniform(0, 1), "g": m.grid_search([1, 2, 3]), "n": {"d": m.randint(0, 10)},
                "f": m.sample_from(lambda spec: spec.config.g * 10), "h": m.sample_from(lambda spec: spec.config.a * 2)}

    points = [{"n": {"d": 4}}]
    rng, expected = _BackwardsCompatibleNumpyRng(3), []
    expected += [s["config"] for _, s in _get_preset_variants({"config": space(rt)}, points[0],
                                                              constant_grid_search=True, random_state=rng)]
    expected += [s["config"] for _, s in generate_variants({"config": space(rt)}, constant_grid_search=True,
                                                           random_state=rng)]
    schedulers = {None: None, "asha": tune.schedulers.ASHAScheduler(max_t=4),
                  "hyperband": tune.schedulers.HyperBandScheduler(max_t=4)}
    generator = tune.search.BasicVariantGenerator(points_to_evaluate=points, constant_grid_search=True,
                                                  random_state=3)
    planned = plan(tune.TuneConfig(search_alg=generator, num_samples=2, metric="m", mode="max",
                                   scheduler=schedulers[scheduler]), space(tune))
    configs = [c for group in planned.searcher.next_groups() for c in group.configs]
    by_value = sorted(configs, key=lambda c: (c["n"]["d"], c["a"], c["g"]))
    assert by_value == sorted(expected, key=lambda c: (c["n"]["d"], c["a"], c["g"]))  # HyperBand regroups them
    assert len({c["a"] for c in configs}) == 2 and {c["f"] for c in configs} == {10, 20, 30}
    with pytest.raises(ConfigError, match="constant_grid_search=True is not supported with PBT"):
        plan(tune.TuneConfig(search_alg=generator, num_samples=2, metric="m", mode="max",
                             scheduler=tune.schedulers.PopulationBasedTraining(hyperparam_mutations={"a": [1]})),
             space(tune))


def test_points_run_first_and_count_toward_num_samples(ray_cluster, storage: str) -> None:
    starts: list[dict[str, Any]] = []

    class Starts(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            starts.append(dict(trial.config))

    def train(config):
        tune.report({"score": config["x"]})

    points = [{"x": 0.125}, {"x": 0.875, "y": 3}]
    tuner = _tuner(train, storage, {"x": tune.uniform(0, 1), "y": tune.choice([1, 2, 3])},
                   {"callbacks": [Starts()]}, num_samples=4,  # (one at a time: the generator's own cap, as Ray
                   # ignores max_concurrent_trials beside a BasicVariantGenerator object)
                   search_alg=tune.search.BasicVariantGenerator(points_to_evaluate=points, max_concurrent=1))
    grid = tuner.fit()
    assert len(grid) == 4  # 2 points + 2 samples
    assert starts[0]["x"] == 0.125 and starts[0]["y"] in (1, 2, 3)  # the partial point is filled in
    assert starts[1] == {"x": 0.875, "y": 3}
    by_id = sorted(grid, key=lambda r: r.metrics["trial_id"])
    assert [r.config["x"] for r in by_id[:2]] == [0.125, 0.875]  # the first two trials are the points


def test_point_checks_name_the_key_and_warn_outside_the_domain() -> None:
    space = {"x": sp.uniform(0, 1), "n": {"k": sp.randint(0, 4)}}
    with pytest.raises(ConfigError, match=r"points_to_evaluate\[1\] sets 'n/z', which is not a key of the search "
                                          r"space \(keys under 'n': \['k'\]\)"):
        RandomSearch(space, 2, points_to_evaluate=[{"x": 0.5}, {"n": {"z": 1}}])
    with pytest.raises(ConfigError, match="RandomSearch: points_to_evaluate must be None or a list of dicts, got dict"):
        RandomSearch(space, 2, points_to_evaluate={"x": 0.5})  # one point, not wrapped in a list
    with pytest.warns(UserWarning, match=r"sets 'x' to 7, which is not within the domain"):
        searcher = RandomSearch(space, 1, seed=0, points_to_evaluate=[{"x": 7}])
    assert searcher.next_groups()[0].configs[0]["x"] == 7  # used as given, as in Ray


def test_points_with_asha_and_hyperband_go_out_first() -> None:
    points = [{"x": 0.5}, {"x": 0.25, "k": 2}]
    generator = tune.search.BasicVariantGenerator(points_to_evaluate=points, random_state=3)
    space = {"x": tune.uniform(0, 1), "k": tune.choice([1, 2, 3])}
    for scheduler, cls in ((tune.schedulers.ASHAScheduler(max_t=9), StreamedASHA),
                           (tune.schedulers.HyperBandScheduler(max_t=9), StreamedHyperBand)):
        searcher = plan(tune.TuneConfig(search_alg=generator, scheduler=scheduler, num_samples=6, metric="m",
                                        mode="max"), space).searcher
        assert type(searcher) is cls
        configs = [c for _, c in _add(searcher)]
        assert configs[0]["x"] == 0.5 and configs[1] == {"x": 0.25, "k": 2}
        assert len({c["x"] for c in configs}) == len(configs)  # the rest are fresh samples
        state = json.loads(json.dumps(searcher.state_dict()))
        again = plan(tune.TuneConfig(search_alg=generator, scheduler=scheduler, num_samples=6, metric="m",
                                     mode="max"), space).searcher
        again.load_state_dict(state)  # a resumed run skips the configurations already handed out
        assert again._config_stream().drawn == searcher._config_stream().drawn


@pytest.mark.parametrize("cls, kwargs", [(BOHB, {"max_t": 9, "max_concurrent": 8}),
                                         (SyncBOHB, {"max_t": 9, "max_concurrent_brackets": 1})])
def test_bohb_points_are_proposed_first_filled_in_and_count_toward_num_samples(cls, kwargs) -> None:
    space = {"a": sp.uniform(0, 1), "b": sp.choice(["p", "q"]), "fixed": 7}
    points = [{"a": 0.5, "b": "q"}, {"a": 0.75}]
    searcher = cls(space, 3, "score", "max", seed=0, points_to_evaluate=points, **kwargs)
    configs = [c for _, c in _add(searcher)]
    assert configs[0] == {"a": 0.5, "b": "q", "fixed": 7}
    assert configs[1]["a"] == 0.75 and configs[1]["b"] in ("p", "q") and configs[1]["fixed"] == 7
    assert len(configs) == 3 and not searcher._configs_left()  # 2 points + 1 proposal = num_samples


def test_tune_bohb_points_reach_the_engine() -> None:
    holder = TuneBOHB(points_to_evaluate=[{"a": 0.5}], seed=1)
    for scheduler in (tune.schedulers.HyperBandForBOHB(max_t=9), tune.schedulers.ASHAScheduler(max_t=9)):
        searcher = plan(tune.TuneConfig(search_alg=holder, scheduler=scheduler, num_samples=4, metric="m",
                                        mode="max"), {"a": tune.uniform(0, 1), "b": tune.randint(0, 9)}).searcher
        assert searcher.next_groups()[0].configs[0]["a"] == 0.5


# ---------------------------------------------------------------------------------------------------------
# 3. num_samples=-1 beyond random search
# ---------------------------------------------------------------------------------------------------------


def _end_all(searcher: Any, added: list[tuple[str, dict[str, Any]]]) -> None:
    for trial_id, _ in added:
        searcher.on_trial_complete(trial_id, {"m": 0.5, "training_iteration": 1})


@pytest.mark.parametrize("make, first", [
    (lambda: {"scheduler": tune.schedulers.ASHAScheduler(max_t=9)}, ENDLESS_FIRST_BATCH),
    (lambda: {"scheduler": tune.schedulers.ASHAScheduler(max_t=9), "max_concurrent_trials": 3}, 3),
    (lambda: {"scheduler": tune.schedulers.HyperBandScheduler(max_t=9)}, None),
    (lambda: {"search_alg": TuneBOHB(max_concurrent=5), "scheduler": tune.schedulers.ASHAScheduler(max_t=9)}, 5),
    (lambda: {"search_alg": TuneBOHB(), "scheduler": tune.schedulers.HyperBandForBOHB(max_t=9)}, None),
    (lambda: {"search_alg": OptunaSearch(seed=0)}, 4),
])
def test_endless_searchers_keep_proposing_as_trials_end(make, first: int | None) -> None:
    searcher = plan(tune.TuneConfig(num_samples=-1, metric="m", mode="max", **make()),
                    {"x": tune.uniform(0, 1)}).searcher
    seen: list[dict[str, Any]] = []
    for _ in range(3):
        added = _add(searcher)
        assert added, "an endless searcher stopped proposing"
        if first is not None and not seen:
            assert len(added) == first
        seen += [c for _, c in added]
        _end_all(searcher, added)
        assert not searcher.is_finished()
    assert len({c["x"] for c in seen}) == len(seen)


def test_endless_asha_runs_until_stop_all(ray_cluster, storage: str) -> None:
    class StopAllAfter(tune.Stopper):
        def __init__(self) -> None:
            self.seen = 0

        def __call__(self, trial_id, result):
            self.seen += 1
            return False

        def stop_all(self):
            return self.seen >= 12

    def train(config):
        for step in range(3):
            tune.report({"m": config["x"] * (step + 1)})

    grid = _tuner(train, storage, {"x": tune.uniform(0, 1)}, {"stop": StopAllAfter()}, num_samples=-1,
                  max_concurrent_trials=2, scheduler=tune.schedulers.ASHAScheduler(max_t=3, grace_period=1,
                                                                                 reduction_factor=2),
                  metric="m", mode="max").fit()
    assert len(grid) >= 4  # more trials than the 2 live at once: new ones came as others ended


def test_pbt_still_refuses_endless_and_points() -> None:
    pbt = tune.schedulers.PopulationBasedTraining(hyperparam_mutations={"x": tune.uniform(0, 1)})
    with pytest.raises(ConfigError, match="num_samples=-1 .* is not supported with PBT: its population"):
        plan(tune.TuneConfig(scheduler=pbt, num_samples=-1, metric="m", mode="max"), {"x": tune.uniform(0, 1)})


# ---------------------------------------------------------------------------------------------------------
# 4. Callbacks with Ray's hooks and arguments
# ---------------------------------------------------------------------------------------------------------


class _Recorder(tune.Callback):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.setup_args: dict[str, Any] = {}

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.setup_args = {"stop": stop, "num_samples": num_samples, "total_num_samples": total_num_samples, **info}

    def _add(self, hook: str, trial: Any, *extra: Any) -> None:
        self.events.append((hook, trial.config["x"], trial.status, *extra))

    def on_trial_start(self, iteration, trials, trial, **info):
        folder = os.path.basename(trial.local_path)  # Ray's default name: <trainable>_<trial_id>_<tag>_<date>
        assert trial in trials and folder.startswith(f"{trial.trainable_name}_{trial.trial_id}_")
        assert trial.has_reported_at_least_once == (trial.num_failures > 0)  # (a retry reported before)
        self._add("start", trial, trial.num_failures)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._add("recover", trial, trial.num_failures)

    def on_trial_restore(self, iteration, trials, trial, **info):
        self._add("restore", trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        assert result["config"] == trial.config and result["trial_id"] == trial.trial_id
        self._add("result", trial, result["training_iteration"])

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        assert isinstance(checkpoint, tune.Checkpoint) and checkpoint != trial.checkpoint  # Ray's: the previous
        previous = os.path.basename(trial.checkpoint.path) if trial.checkpoint is not None else None
        self._add("checkpoint", trial, os.path.basename(checkpoint.path), os.path.isdir(checkpoint.path), previous)

    def on_trial_save(self, iteration, trials, trial, **info):
        assert trial.has_checkpoint() and trial.has_reported_at_least_once  # (Ray's Trial methods)
        self._add("save", trial, os.path.basename(trial.checkpoint.path))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._add("complete", trial, trial.is_finished())

    def on_trial_error(self, iteration, trials, trial, **info):
        with open(trial.error_file) as f:  # Ray's error.txt: each failure appended
            failures = sum(line.startswith("Failure # ") for line in f)
        assert trial.get_error() == open(trial.error_file).read()  # (Ray's Trial.get_error(): the file's text)
        self._add("error", trial, trial.num_failures, trial.error, failures)

    def on_experiment_end(self, trials, **info):
        self.events.append(("end", sorted(t.config["x"] for t in trials)))


def _checkpointing(config: dict[str, Any]) -> None:
    """Three iterations with a checkpoint each. x=1 fails once after its 2nd report (a flag file remembers);
    x=2 always fails at its 2nd iteration, before reporting."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with open(os.path.join(checkpoint.path, "state.json")) as f:
            start = json.load(f)["i"]
    for i in range(start + 1, config.get("iterations", 3) + 1):
        if config["x"] == 2 and i == 2:
            raise ValueError("x=2 always fails at iteration 2")
        folder = os.path.join(tune.get_context().get_trial_dir(), f"tmp_{i}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump({"i": i}, f)
        data = sum(ray.get(config["data"])) if "data" in config else None  # an object ref of the search space
        tune.report({"i": i, "resumed_from": start, "model": repr(config.get("model")), "data": data},
                    checkpoint=tune.Checkpoint.from_directory(folder))
        if config["x"] == 1 and i == 2 and not os.path.exists(config["flag"]):
            open(config["flag"], "w").close()
            raise RuntimeError("x=1 fails once")


def test_callbacks_get_rays_hooks_in_rays_order(ray_cluster, storage: str, tmp_path) -> None:
    recorder = _Recorder()
    space = {"x": tune.grid_search([1, 2]), "flag": str(tmp_path / "failed_once")}
    _tuner(_checkpointing, storage, space, {"callbacks": [recorder],
                                             "failure_config": tune.FailureConfig(max_failures=1)},
           max_concurrent_trials=1, time_budget_s=120).fit()
    assert recorder.setup_args == {"stop": {}, "num_samples": 1, "total_num_samples": 2, "time_budget_s": 120.0}
    one = [e[0:1] + e[2:] for e in recorder.events if e[0] != "end" and e[1] == 1]
    # As in Ray (checked with Ray 2.60): on_trial_start sees the trial PENDING, on_trial_complete still RUNNING,
    # and on_checkpoint the trial's previous checkpoint (the new one is the argument), on_trial_save the new one
    name = [None] + [f"checkpoint_00000{i}" for i in (1, 2, 3)]
    ckpt = [(("checkpoint", "RUNNING", name[i], True, name[i - 1]), ("save", "RUNNING", name[i])) for i in (1, 2, 3)]
    assert one == [
        ("start", "PENDING", 0),
        ("result", "RUNNING", 1), *ckpt[0],
        ("result", "RUNNING", 2), *ckpt[1],
        ("recover", "PENDING", 1),  # the failure was retried (max_failures=1) ...
        ("start", "PENDING", 1),
        ("restore", "RUNNING"),  # ... from its checkpoint at iteration 2
        ("result", "RUNNING", 3), *ckpt[2],
        ("complete", "RUNNING", False),
    ]
    two = [e[0:1] + e[2:] for e in recorder.events if e[0] != "end" and e[1] == 2]
    assert two[:4] == [("start", "PENDING", 0), ("result", "RUNNING", 1), *ckpt[0]]
    # x=2 fails again right after its restore, before reporting: max_failures is spent, so it errors.
    assert two[4:] == [("recover", "PENDING", 1), ("start", "PENDING", 1), ("restore", "RUNNING"),
                       ("error", "ERROR", 2, "ValueError: x=2 always fails at iteration 2", 2)]
    assert recorder.events[-1] == ("end", [1, 2])


class _CheckpointsOnDisk(tune.Callback):
    """Records, in each ``on_checkpoint``, whether the checkpoint it is given and the trial's previous one (Ray's
    ``trial.checkpoint`` there) are on disk."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, str | None, bool | None]] = []

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        previous, whole = trial.checkpoint, os.path.isfile(os.path.join(checkpoint.path, "state.json"))
        self.seen.append((os.path.basename(checkpoint.path), whole,
                          None if previous is None else os.path.basename(previous.path),
                          None if previous is None else os.path.isdir(previous.path)))


def test_on_checkpoint_finds_its_checkpoint_and_the_previous_one_on_disk_under_num_to_keep(ray_cluster,
                                                                                          storage: str) -> None:
    """As in Ray, whose checkpoint manager deletes past ``num_to_keep`` after ``on_checkpoint``: the checkpoint the
    hook is given and the trial's previous one are both there (retention ran before the callbacks: the previous one
    was always gone, and the hook's own was when two results of the trial came in one batch), and the retention
    still leaves one checkpoint at the end."""
    iterations = 6
    callback = _CheckpointsOnDisk()
    grid = _tuner(_checkpointing, storage, {"x": tune.grid_search([3, 4]), "iterations": iterations},
                  {"callbacks": [callback], "checkpoint_config": tune.CheckpointConfig(num_to_keep=1)}).fit()
    assert grid.num_errors == 0
    name = [None] + [f"checkpoint_{i:06d}" for i in range(1, iterations + 1)]
    expected = [(name[i], True, name[i - 1], None if i == 1 else True) for i in range(1, iterations + 1)]
    assert sorted(callback.seen) == sorted(expected * 2)
    for result in grid:
        assert sorted(f for f in os.listdir(result.path) if f.startswith("checkpoint_")) == [name[-1]]


def test_an_exploited_trials_view_has_the_checkpoint_its_attempt_resumes_from(tmp_path) -> None:
    """As Ray's PBT makes the source's checkpoint the trial's latest at the exploit, the view's ``checkpoint`` in the
    hooks of the exploit's attempt is the copy of the source's checkpoint that the attempt resumes from. It stayed the
    trial's own one from before, a state the attempt did not resume from, which ``num_to_keep`` had deleted (h260's
    ``race_pbt_view.py``: ``checkpoint_000012``, missing, in ``on_trial_restore``)."""
    from fluidsalus.store import RESTART_EXPLOIT, TRIAL_RESTART_EVENT
    from fluidsalus.tune.callback import RayCallbackAdapter

    store = ExperimentStore.create(str(tmp_path), "pbt", {}, "score", "max")
    store.add_trials([("t0", 0, {"lr": 0.1})])
    own, copy = tmp_path / "t0" / "checkpoint_000002", tmp_path / "t0" / "exploited_checkpoint_000002"
    own.mkdir(parents=True)
    store.add_checkpoint("t0", 2, str(own), {"training_iteration": 2})
    seen: list[tuple[str, str, bool]] = []
    last: list[dict[str, Any]] = []

    class Views(tune.Callback):
        def on_trial_restore(self, iteration, trials, trial, **info):
            seen.append(("restore", os.path.basename(trial.checkpoint.path), os.path.isdir(trial.checkpoint.path)))
            last.append(dict(trial.last_result))

    adapter = RayCallbackAdapter([Views()], str(tmp_path), "train")
    adapter.on_trial_start("t0", {"lr": 0.1}, 0)
    adapter.on_trial_result("t0", {"score": 0.2, "training_iteration": 2, "checkpoint_dir_name": own.name})
    # The exploit, as the engine stores it: the copy listed in place of the trial's own (deleted: num_to_keep=1)
    copy.mkdir()
    store.mark_checkpoints_deleted([str(own)])
    own.rmdir()
    store.add_checkpoint("t0", 2, str(copy), {"training_iteration": 2, "score": 1.8})
    store.add_events([(time.time(), TRIAL_RESTART_EVENT, "t0", None,
                       {"attempt": 1, "reason": RESTART_EXPLOIT, "from_iteration": 2})])
    adapter.on_trial_start("t0", {"lr": 0.9}, 1)
    assert seen == [("restore", copy.name, True)]
    assert adapter.trials["t0"].checkpoint.path == str(copy)
    # ...and its last result that checkpoint's, with its own id and new config, as Ray's restore makes it
    assert (last[0]["score"], last[0]["trial_id"], last[0]["config"]) == (1.8, "t0", {"lr": 0.9})
    store.close()


def test_engine_callbacks_are_told_each_start_with_its_config_and_attempt(ray_cluster, storage: str,
                                                                         tmp_path) -> None:
    from fluidsalus.callbacks import Callback as EngineCallback

    starts: list[tuple[str, dict[str, Any], int]] = []

    class Starts(EngineCallback):
        def on_trial_start(self, trial_id: str, config: Mapping[str, Any], attempt: int) -> None:
            starts.append((trial_id, dict(config), attempt))

    grid = _tuner(_checkpointing, storage, {"x": 1, "flag": str(tmp_path / "flag")},
                  {"callbacks": [Starts()], "failure_config": tune.FailureConfig(max_failures=1)}).fit()
    trial_id = grid[0].metrics["trial_id"]
    assert [(t, a) for t, _, a in starts] == [(trial_id, 0), (trial_id, 1)]
    assert all(c["x"] == 1 for _, c, _ in starts)


def test_logger_callback_and_rays_mock_trainable(ray_cluster, storage: str) -> None:
    from fluidsalus.tune.logger import LoggerCallback
    from fluidsalus.tune.result import SHOULD_CHECKPOINT, TRAINING_ITERATION
    from fluidsalus.tune.utils.mock_trainable import MyTrainableClass

    logged: list[tuple[str, Any]] = []

    class Logger(LoggerCallback):
        def log_trial_start(self, trial):
            logged.append(("start", trial.config["width"]))

        def log_trial_result(self, iteration, trial, result):
            logged.append(("result", result[TRAINING_ITERATION], round(result["episode_reward_mean"], 6)))

        def log_trial_end(self, trial, failed=False):
            logged.append(("end", failed))

    grid = _tuner(MyTrainableClass, storage, {"width": 2, "height": 3}, {"callbacks": [Logger()],
                  "stop": {TRAINING_ITERATION: 2}}).fit()
    assert grid.num_errors == 0 and SHOULD_CHECKPOINT == "should_checkpoint"
    assert logged == [("start", 2), ("result", 1, round(3 * np.tanh(0.5), 6)), ("result", 2, round(3 * np.tanh(1), 6)),
                      ("end", False)]


def test_rays_own_mock_trainable_left_imported_runs_as_fluidsalus_twin(ray_cluster, storage: str) -> None:
    # Ray's hyperband_example.py with only `from ray import tune` changed (h134's F2: refused after Ray started)
    from ray.tune.utils.mock_trainable import MyTrainableClass

    with pytest.warns(UserWarning, match="from fluidsalus.tune.utils.mock_trainable import MyTrainableClass"):
        grid = _tuner(MyTrainableClass, storage, {"width": 2, "height": 3}, {"stop": {"training_iteration": 2}},
                      metric="episode_reward_mean", mode="max").fit()
    assert grid.num_errors == 0
    assert grid[0].metrics["episode_reward_mean"] == pytest.approx(3 * np.tanh(1))


def test_rays_with_resources_around_rays_class_runs_and_tune_run_names_no_call_the_script_did_not_make(
        ray_cluster, storage: str) -> None:
    # Ray's with_resources around Ray's MyTrainableClass was refused as "Ray's own class" (h140 F4); tune.run's
    # resources_per_trial warned "with_resources: MyTrainableClass is Ray Tune's", a call the script did not make (F7)
    from ray import tune as rt
    from ray.tune.utils.mock_trainable import MyTrainableClass

    space = {"width": 2, "height": 3}
    with pytest.warns(UserWarning, match="wrapped by Ray Tune's with_resources") as caught:
        grid = _tuner(rt.with_resources(MyTrainableClass, {"cpu": 1}), storage, space,
                      {"stop": {"training_iteration": 2}}, metric="episode_reward_mean", mode="max").fit()
    assert (grid.num_errors, grid[0].metrics["episode_reward_mean"]) == (0, pytest.approx(3 * np.tanh(1)))
    assert {w.filename for w in caught if "Ray Tune's" in str(w.message)} == {__file__}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = tune.run(MyTrainableClass, resources_per_trial={"cpu": 1}, config=space, storage_path=storage,
                            stop={"training_iteration": 2}, verbose=0, metric="episode_reward_mean", mode="max")
    said = [str(w.message) for w in caught if "MyTrainableClass is Ray Tune's" in str(w.message)]
    assert len(said) == 1 and "with_resources" not in said[0], said
    assert analysis.trials[0].last_result["episode_reward_mean"] == pytest.approx(3 * np.tanh(1))
    with pytest.raises(ConfigError, match="already has a resource request \\(from with_resources\\)"):
        tune.run(rt.with_resources(MyTrainableClass, {"cpu": 1}), resources_per_trial={"cpu": 1}, config=space,
                 storage_path=storage, verbose=0)


class _Counter(tune.Trainable):
    """A class Trainable whose state is the number of steps it took."""

    def setup(self, config):
        self.value = 0

    def step(self):
        self.value += 1
        return {"value": self.value}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


class _CheckpointAt(tune.Callback):
    """Sets Ray's ``should_checkpoint`` in the result of iteration ``at``; records the checkpoints it is told of."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.saved: list[tuple[str, str]] = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["training_iteration"] == self.at:
            result["should_checkpoint"] = True

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.saved.append((trial.trial_id, os.path.basename(checkpoint.path)))


def test_a_callback_that_sets_should_checkpoint_gets_a_checkpoint_of_that_very_result(ray_cluster,
                                                                                      storage: str) -> None:
    """As in Ray, the class Trainable is saved right after the result the callback marked (each result waits for
    the callbacks' answer when a callback of the user's own could ask), and the callback hears of it."""
    last = 6
    callback = _CheckpointAt(2)
    only_asked = tune.CheckpointConfig(checkpoint_at_end=False)  # (by default a Tuner also saves at the end)
    grid = _tuner(_Counter, storage, {"x": tune.grid_search([1, 2])},
                  {"callbacks": [callback], "stop": {"training_iteration": last},
                   "checkpoint_config": only_asked}).fit()
    assert grid.num_errors == 0
    for result in grid:
        assert result.metrics["training_iteration"] == last
        assert [int(c.path[-6:]) for c, _ in result.best_checkpoints] == [2]
        assert [m["value"] for _, m in result.best_checkpoints] == [2]  # the metrics of the result it is of
        restored = _Counter({})
        restored.restore(result.checkpoint)
        assert restored.value == 2  # the state right after step 2
    assert sorted(callback.saved) == sorted((r.metrics["trial_id"], "checkpoint_000002") for r in grid)
    grid = _tuner(_Counter, storage, {"x": 1},
                  {"stop": {"training_iteration": 3}, "checkpoint_config": only_asked}).fit()
    assert [r.best_checkpoints for r in grid] == [[]]  # none without the callback's request


def test_only_a_callback_of_the_users_own_that_could_ask_for_checkpoints_makes_results_wait(tmp_path,
                                                                                          monkeypatch) -> None:
    import importlib

    from fluidsalus.callbacks import Callback as EngineCallback
    from fluidsalus.tune._tuner import _may_ask_for_checkpoints
    from fluidsalus.tune.logger import CSVLoggerCallback, JsonLoggerCallback, LoggerCallback

    class Starts(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            pass

    class Logger(LoggerCallback):
        def log_trial_result(self, iteration, trial, result):
            pass

    class Requests(EngineCallback):
        def checkpoint_requests(self):
            return []

    assert not _may_ask_for_checkpoints([EngineCallback()], [JsonLoggerCallback(), CSVLoggerCallback(), Starts()])
    assert _may_ask_for_checkpoints([], [Starts(), _CheckpointAt(1)])
    assert _may_ask_for_checkpoints([], [Logger()])  # this module mentions the key, so it may set it
    assert _may_ask_for_checkpoints([Requests()], [])
    # A callback that only logs results, from a module that never mentions the key, makes no trial wait.
    (tmp_path / "my_logging_callbacks.py").write_text(
        "from fluidsalus import tune\n\n"
        "class Printer(tune.Callback):\n"
        "    def on_trial_result(self, iteration, trials, trial, result, **info):\n"
        "        print(result['training_iteration'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    printer = importlib.import_module("my_logging_callbacks").Printer()
    assert not _may_ask_for_checkpoints([], [printer])
    ghost = type("Ghost", (tune.Callback,), {"__module__": "no_such_module",  # a source that cannot be read
                                              "on_trial_result": lambda self, *args, **info: None})
    assert _may_ask_for_checkpoints([], [ghost()])  # may ask, for all we know


# ---------------------------------------------------------------------------------------------------------
# 5. Tuner.restore's flags
# ---------------------------------------------------------------------------------------------------------


class _Model:
    """A class in the search space (Ray's ``model(**config)`` pattern): its repr names no address."""

    def __repr__(self) -> str:
        return "a _Model"


def _errored_experiment(storage: str, name: str, flag: str) -> str:
    """An experiment whose one trial errored after 2 checkpointed iterations (of 4); returns its folder."""
    grid = _tuner(_checkpointing, storage, {"x": 1, "flag": flag, "iterations": 4, "model": (_Model, 2)},
                  {"name": name}).fit()
    assert grid.num_errors == 1 and grid[0].metrics["i"] == 2
    return os.path.join(storage, name)


def _attempts(path: str) -> list[tuple[int, int, int]]:
    """(attempt, iteration, resumed_from) of every stored result."""
    store = ExperimentStore.open(path, readonly=True)
    try:
        return [(r.attempt, r.iteration, r.metrics["resumed_from"]) for r in
                sorted(store.results(latest_attempt_only=False), key=lambda r: (r.attempt, r.iteration))]
    finally:
        store.close()


def test_restore_resume_errored_continues_from_the_last_checkpoint(ray_cluster, storage: str, tmp_path) -> None:
    path = _errored_experiment(storage, "resume_errored", str(tmp_path / "flag"))
    kept = Tuner.restore(path, _checkpointing).fit()  # errored trials stay errored by default
    assert kept.num_errors == 1 and _attempts(path) == [(0, 1, 0), (0, 2, 0)]
    grid = Tuner.restore(path, _checkpointing, resume_errored=True).fit()
    assert grid.num_errors == 0 and grid[0].metrics["i"] == 4
    assert _attempts(path) == [(0, 1, 0), (0, 2, 0), (1, 3, 2), (1, 4, 2)]  # went on from iteration 2
    # with the objects of its config, as it began (it got the JSON's strings and lists: "['<class ...>', 2]")
    assert set(grid[0].metrics_dataframe["model"]) == {repr((_Model, 2))}
    assert grid[0].config["model"] == (_Model, 2)
    # As in Ray (tune.run(resume="AUTO+ERRORED") kept num_failures=1): the failure that ended it counts (was 0)
    assert [t.num_failures for t in tune.ExperimentAnalysis(path).trials] == [1]


#: ``trial.num_failures`` as a Ray callback saw it at each trial start (the callback is pickled with the Tuner).
_FAILURES_SEEN: list[int] = []


class _RecordsFailures(tune.Callback):
    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _FAILURES_SEEN.append(trial.num_failures)


def test_a_resumed_errored_trial_shows_its_earlier_failure_to_the_callbacks(ray_cluster, storage: str,
                                                                          tmp_path) -> None:
    """Ray's callbacks see ``num_failures == 1`` for a trial that ``resume_errored`` runs again; fluidsalus's
    counted this session's failures only (0; a helper's side by side). The store was right already."""
    _FAILURES_SEEN.clear()
    grid = _tuner(_checkpointing, storage, {"x": 1, "flag": str(tmp_path / "flag"), "iterations": 4,
                                            "model": (_Model, 2)},
                  {"name": "seen", "callbacks": [_RecordsFailures()]}).fit()
    assert grid.num_errors == 1 and _FAILURES_SEEN == [0]
    Tuner.restore(os.path.join(storage, "seen"), _checkpointing, resume_errored=True).fit()
    assert _FAILURES_SEEN == [0, 1]

def test_restore_with_a_param_space_gives_the_continued_trials_its_object_refs(ray_cluster, storage: str,
                                                                               tmp_path) -> None:
    """Ray's Tuner.restore(param_space=...) re-specifies the object refs, which may have died with the driver
    that made them: the continued trials got the old ones (a helper's side-by-side run)."""
    space = {"x": 1, "flag": str(tmp_path / "flag"), "iterations": 4, "data": ray.put([1, 2])}
    grid = _tuner(_checkpointing, storage, space, {"name": "refs"}).fit()
    assert grid.num_errors == 1 and list(grid[0].metrics_dataframe["data"]) == [3, 3]
    path = os.path.join(storage, "refs")
    renewed = {**space, "data": ray.put([7, 8])}
    grid = Tuner.restore(path, _checkpointing, resume_errored=True, param_space=renewed).fit()
    assert grid.num_errors == 0 and list(grid[0].metrics_dataframe["data"]) == [3, 3, 15, 15]


def _other_trainable(config):
    tune.report({"i": 0, "resumed_from": 0})


def test_restore_refuses_another_trainable_or_param_space_keys_as_ray_does(ray_cluster, storage: str,
                                                                         tmp_path) -> None:
    """Ray's Tuner.restore raises ValueError for either; fluidsalus took both, and the unfinished trials ran the
    other function, its results mixed into theirs (a helper's side-by-side check)."""
    path = _errored_experiment(storage, "other", str(tmp_path / "flag"))
    with pytest.raises(ValueError, match=re.escape("Got a trainable with identifier '_other_trainable' but "
                                                   "expected '_checkpointing'")):
        Tuner.restore(path, _other_trainable, resume_errored=True)
    space = {"x": 1, "flag": str(tmp_path / "flag"), "iterations": 4, "model": (_Model, 2)}
    with pytest.raises(ValueError, match=re.escape("Got: ['flag', 'iterations', 'model', 'y'] Expected: "
                                                   "['flag', 'iterations', 'model', 'x']")):
        Tuner.restore(path, _checkpointing, param_space={**{k: v for k, v in space.items() if k != "x"}, "y": 1})
    grid = Tuner.restore(path, _checkpointing, resume_errored=True, param_space=space).fit()  # the same keys
    assert grid.num_errors == 0 and grid[0].metrics["i"] == 4


def test_restore_of_a_damaged_tuner_pkl_names_the_file(ray_cluster, storage: str, tmp_path) -> None:
    """It raised the bare ``UnpicklingError: pickle data was truncated`` (h83's N7). ``can_restore`` still says True:
    as Ray's, it looks for the files and reads none."""
    path = _errored_experiment(storage, "cut", str(tmp_path / "flag"))
    state = os.path.join(path, "tuner.pkl")
    with open(state, "r+b") as f:
        f.truncate(os.path.getsize(state) // 2)
    assert Tuner.can_restore(path)
    with pytest.raises(ConfigError, match=rf"^Tuner.restore: {re.escape(repr(state))} cannot be read \(\w+: .*\), so "
                                          r"the experiment cannot be continued; its results can still be read with "
                                          rf"tune.ExperimentAnalysis\({re.escape(repr(path))}\)$"):
        Tuner.restore(path, _checkpointing)
    assert len(tune.ExperimentAnalysis(path).trials) == 1


@pytest.mark.parametrize("flags", [{}, {"restart_errored": True}])
def test_restore_of_a_store_damaged_past_its_header_changes_nothing(ray_cluster, storage: str, tmp_path,
                                                                    flags) -> None:
    """Its fit() opened the store for writing (to read the trials' tags) before the store was refused: the
    experiment's folder got -wal/-shm files (h83's N8)."""
    from fluidsalus.errors import StoreError

    path = _errored_experiment(storage, "damaged", str(tmp_path / "flag"))
    db_path = os.path.join(path, "experiment.db")
    os.truncate(db_path, os.path.getsize(db_path) // 2)
    before = {os.path.relpath(os.path.join(root, name), path): open(os.path.join(root, name), "rb").read()
              for root, _, names in os.walk(path) for name in names}
    with pytest.raises(StoreError, match=rf"^{re.escape(repr(db_path))} is not a fluidsalus experiment store "
                                         r"\(database disk image is malformed\)$"):
        Tuner.restore(path, _checkpointing, **flags).fit()
    assert {os.path.relpath(os.path.join(root, name), path): open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(path) for name in names} == before


def _newer_read_only(path: str) -> None:
    """The store as a later fluidsalus leaves it: a schema this version can read (its readable_from) but not write."""
    import sqlite3

    conn = sqlite3.connect(os.path.join(path, "experiment.db"), isolation_level=None)
    conn.execute("UPDATE store_info SET value = '1' WHERE key = 'readable_from'")
    conn.execute("PRAGMA user_version = 99")
    conn.close()


@pytest.fixture(scope="module")
def errored_experiment_to_copy(ray_cluster, tmp_path_factory) -> str:
    """The folder of one :func:`_errored_experiment`, which each case below copies: a run of its own per case
    started two device processes anew (each case's ``pretend_ray_is`` ends the warm ones)."""
    made = tmp_path_factory.mktemp("refused_restore")
    return _errored_experiment(str(made / "results"), "refused", str(made / "flag"))


@pytest.mark.parametrize("case", ["another-driver", "another-driver-and-a-failed-read", "newer-read-only"])
def test_a_refused_restore_is_refused_before_ray_starts_and_another_driver_wins_over_a_failed_read(
        errored_experiment_to_copy: str, storage: str, monkeypatch, case) -> None:
    """fit() read the stored trials before the driver lock was taken: beside another driver running the
    experiment, that read failed about once in 36,000 opens, a StoreError in place of the refusal (h111's a). And
    fit() started Ray before fluidsalus.run refused the resume (seconds), a store it could read but not write only
    once the writer opened it (h111's c)."""
    import shutil

    from fluidsalus.errors import StoreError
    from fluidsalus.store import DriverLock

    path = os.path.join(storage, "refused")
    shutil.copytree(errored_experiment_to_copy, path, symlinks=True)
    other = None
    if case.startswith("another-driver"):
        other = DriverLock.acquire(path)  # (a second acquire, another file description, is refused as another's)
    if case == "another-driver-and-a-failed-read":
        opened = ExperimentStore.open.__func__

        def failing_read(cls, path_, *args, **kwargs):
            if kwargs.get("untouched"):  # (the read beside that driver's writes, failing as it did)
                raise StoreError(f"the experiment store {path_!r} cannot be read (database is locked)")
            return opened(cls, path_, *args, **kwargs)

        monkeypatch.setattr(ExperimentStore, "open", classmethod(failing_read))
    if case == "newer-read-only":
        _newer_read_only(path)

    def no_ray(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a refused restore started Ray")

    pretend_ray_is(monkeypatch, lambda: False)
    monkeypatch.setattr(ray, "init", no_ray)
    before = {os.path.relpath(os.path.join(root, name), path): open(os.path.join(root, name), "rb").read()
              for root, _, names in os.walk(path) for name in names if name != ".driver.lock"}
    try:
        if case == "newer-read-only":
            with pytest.raises(StoreError, match="written by a newer fluidsalus .*can read this store but not write"):
                Tuner.restore(path, _checkpointing).fit()
        else:
            with pytest.raises(ConfigError, match=r"resume: the experiment at .* is being run by another driver"):
                Tuner.restore(path, _checkpointing).fit()
    finally:
        if other is not None:
            other.release()
    assert {os.path.relpath(os.path.join(root, name), path): open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(path) for name in names if name != ".driver.lock"} == before


def test_a_trial_restart_errored_restarts_is_counted_afresh_by_the_restored_stopper_as_rays_new_trial(
        ray_cluster, storage: str, tmp_path) -> None:
    """Ray restarts an errored trial as a new trial (a new id), which its restored stopper has not seen; fluidsalus
    keeps the id, so the restored ``MaximumIterationStopper(4)`` counted the failed attempt's 2 results and ended the
    restarted trial at 2 (h255's F4; Ray's, and fluidsalus's before stoppers were restored, end at 4)."""
    from fluidsalus.tune.stopper import MaximumIterationStopper

    grid = _tuner(_checkpointing, storage, {"x": 1, "flag": str(tmp_path / "flag"), "iterations": 4},
                  {"name": "restart_stopper", "stop": MaximumIterationStopper(4)}).fit()
    assert grid.num_errors == 1 and grid[0].metrics["i"] == 2
    path = os.path.join(storage, "restart_stopper")
    grid = Tuner.restore(path, _checkpointing, restart_errored=True).fit()
    assert grid.num_errors == 0 and grid[0].metrics["i"] == 4 and grid[0].metrics["resumed_from"] == 0


def test_restore_restart_errored_starts_from_scratch(ray_cluster, storage: str, tmp_path) -> None:
    path = _errored_experiment(storage, "restart_errored", str(tmp_path / "flag"))
    grid = Tuner.restore(path, _checkpointing, restart_errored=True, resume_errored=False).fit()
    assert grid.num_errors == 0 and grid[0].metrics["i"] == 4 and grid[0].metrics["resumed_from"] == 0
    assert _attempts(path)[2:] == [(1, 1, 0), (1, 2, 0), (1, 3, 0), (1, 4, 0)]  # no checkpoint was loaded
    assert [t.num_failures for t in tune.ExperimentAnalysis(path).trials] == [0]  # Ray's reset() trial is anew
    store = ExperimentStore.open(path, readonly=True)
    try:  # the old attempt's 2 checkpoints were removed before the restart; the new one made 4
        assert len(store.checkpoints(include_deleted=True)) == 6 and len(store.checkpoints()) == 4
        assert [r.attempt for r in store.results()] == [1, 1, 1, 1]
    finally:
        store.close()
    # Ray restarts it as a new trial in a new folder: the trial's files hold its new attempt only (they had both)
    with open(os.path.join(grid[0].path, "result.json")) as f:
        assert [json.loads(line)["training_iteration"] for line in f] == [1, 2, 3, 4]
    assert list(grid[0].metrics_dataframe["training_iteration"]) == [1, 2, 3, 4]


def _fails_or_reports(config: dict[str, Any]) -> None:
    if config["fail"]:
        raise ValueError("bad config")
    tune.report({"i": 1})


def test_a_restore_that_ends_at_once_says_what_it_ends_and_never_that_the_trial_succeeded(
        ray_cluster, storage: str, capsys: pytest.CaptureFixture[str]) -> None:
    """After a fail_fast end, a restore with ``resume_errored`` ends at once and the errored trial ends unstarted.
    Its summary marked it ``*`` with Ray's note "The trial terminated successfully after retrying." (it never ran
    again), and every restore of the folder, a plain one with nothing left to run too, said the trials it would run
    again "end unstarted" (h201). Now the mark and the line say what happened. (``restart_errored`` ends it so too;
    its trial, anew with 0 failures, is not listed: ``test_run.py::test_the_errored_table_marks_each_failed_trial_by_
    what_became_of_it``.)"""
    tuner = Tuner(_fails_or_reports, param_space={"fail": tune.grid_search([True, False])},
                  tune_config=tune.TuneConfig(max_concurrent_trials=1),
                  run_config=tune.RunConfig(name="ends_at_once", storage_path=storage, verbose=1,
                                            failure_config=tune.FailureConfig(fail_fast=True)))
    assert tuner.fit().num_errors == 1
    path = os.path.join(storage, "ends_at_once")
    capsys.readouterr()
    head = "fluidsalus: the run this resumes ended (fail fast) and its search with it; as a restored Ray Tune run, "
    grid = Tuner.restore(path, _fails_or_reports, resume_errored=True).fit()
    assert [r.status for r in grid] == ["TERMINATED"]
    out = capsys.readouterr().out.splitlines()
    assert head + ("this one ends at once: no new trial is proposed, and the 1 trial it would run again ends "
                   "unstarted") in out
    row = out[out.index("Number of errored trials: 1") + 2].split()
    assert row[1:] == [f"{grid[0]._num_failures}+", os.path.join(grid[0].path, "error.txt")]
    assert grid[0]._num_failures > 0
    assert "+ The trial ended without running again after its failure." in out
    assert "* The trial terminated successfully after retrying." not in out
    Tuner.restore(path, _fails_or_reports).fit()  # nothing left to run
    out = capsys.readouterr().out.splitlines()
    assert head + "this one proposes no new trial, and has no trial left to run" in out
    assert not any("end unstarted" in line or "ends unstarted" in line for line in out)


def test_restore_without_resume_unfinished_ends_them(ray_cluster, storage: str, tmp_path) -> None:
    def slow(config):
        for i in range(1, 20):
            time.sleep(0.05)
            tune.report({"i": i})

    tuner = _tuner(slow, storage, {"x": tune.grid_search([1, 2])},
                   {"name": "unfinished", "callbacks": [InterruptOnce(str(tmp_path / "m"), 3)]})
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    path = os.path.join(storage, "unfinished")
    restored = Tuner.restore(path, slow).get_results()
    before = {r.metrics["trial_id"]: r.metrics["i"] for r in restored if "i" in r.metrics}
    grid = Tuner.restore(path, slow, resume_unfinished=False).fit()
    assert len(grid) == 2 and grid.num_errors == 0
    assert all("i" not in r.metrics or r.metrics["i"] == before[r.metrics["trial_id"]] for r in grid)  # not run on
    store = ExperimentStore.open(path, readonly=True)
    try:
        assert {row.status for row in store.trials()} == {"TERMINATED"}
        assert {row.stop_reason for row in store.trials()} == {"not_resumed"}
    finally:
        store.close()


def test_restore_without_resume_unfinished_keeps_what_the_searcher_was_told_after_its_last_save(
        ray_cluster, storage: str, tmp_path, monkeypatch) -> None:
    """ASHA's state is saved once and every later call logged (a save share so small no second save is due).
    Ending the unfinished trials on restore replays the logged calls before telling ASHA of their end, and saves
    the state whole: each trial's first rung then holds its first result, as an uninterrupted run's would."""
    import fluidsalus.trialgroup.searcher_log as searcher_log
    from fluidsalus.store import loads
    from fluidsalus.tune.schedulers import ASHAScheduler

    def slow(config):
        for i in range(1, 20):
            time.sleep(0.05)
            tune.report({"score": config["x"] * 10 + i})

    monkeypatch.setattr(searcher_log, "SAVE_SHARE", 1e-12)
    tuner = _tuner(slow, storage, {"x": tune.grid_search([1, 2, 3])},
                   {"name": "logged", "callbacks": [InterruptOnce(str(tmp_path / "m"), 8)]},
                   metric="score", mode="max", scheduler=ASHAScheduler(max_t=19, grace_period=1, reduction_factor=3))
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    path = os.path.join(storage, "logged")
    store = ExperimentStore.open(path, readonly=True)
    try:
        assert [kind for kind, _, _ in store.searcher_calls()].count("result") >= 3  # logged since the one save
    finally:
        store.close()
    monkeypatch.undo()
    grid = Tuner.restore(path, slow, resume_unfinished=False).fit()
    assert len(grid) == 3 and grid.num_errors == 0
    store = ExperimentStore.open(path, readonly=True)
    try:
        assert store.searcher_calls() == []
        first_rung = loads(store.experiment()["searcher_state"])["rungs"][0][-1]
        first = {r.trial_id: r.metrics["score"] for r in store.results() if r.iteration == 1}
        assert first and first_rung == first  # recorded from the replayed results, not from the trials' ends
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------------------
# 6. with_resources
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("resources, message", [
    ({"gpus": 1}, "key 'gpus'; did you mean 'gpu'"),
    ({"num_cpus": 2}, "key 'num_cpus'; did you mean 'cpu'"),
    ({"gpu": 1.5}, r"resources\['gpu'\] = 1.5: a GPU request above 1 must be a whole number"),
    ({"cpu": -1}, r"resources\['cpu'\] must be a number >= 0"),
    ({"gpu": 1e-6}, "finer than Ray's precision"),
    ({"cpu": "2"}, r"resources\['cpu'\] must be a number >= 0 \(got '2'\)"),
    ({"custom_resources": 3}, "resources\\['custom_resources'\\] must be a dict"),
    ([("cpu", 1)], "resources must be a dict such as"),
])
def test_with_resources_refuses_bad_requests_naming_the_key(resources: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tune.with_resources(lambda config: None, resources)


def test_with_resources_accepts_rays_forms() -> None:
    assert normalize_resources({"CPU": 2, "GPU": 0.25, "memory": 1e9, "custom_resources": {"tpu": 1}}) == {
        "cpu": 2.0, "gpu": 0.25, "memory": 1e9, "tpu": 1.0}
    factory = tune.PlacementGroupFactory([{"CPU": 1, "GPU": 0.5}, {"CPU": 2}])
    assert normalize_resources(factory) == {"cpu": 3.0, "gpu": 0.5}  # bundles summed
    assert normalize_resources(rt.PlacementGroupFactory([{"CPU": 1, "GPU": 2}])) == {"cpu": 1.0, "gpu": 2.0}
    entry = TrialEntry(lambda config: None, {}, lambda config: {"gpu": config["g"]}, None, "f")
    with pytest.raises(ConfigError, match="a GPU request above 1 must be a whole number"):
        entry._record_resources({"g": 2.5})  # a function's request is checked at each trial's start


def test_fractional_gpu_is_recorded_per_trial(ray_cluster, storage: str) -> None:
    def train(config):
        tune.report({**tune.get_context().get_trial_resources()})

    trainable = tune.with_resources(train, lambda config: {"cpu": 1, "gpu": config["share"]})
    grid = _tuner(trainable, storage, {"share": tune.grid_search([0.25, 0.5])}).fit()
    assert sorted((r.metrics["cpu"], r.metrics["gpu"]) for r in grid) == [(1.0, 0.25), (1.0, 0.5)]


class _AsksPerConfig(tune.Trainable):
    """Ray's per-class resource hook: a request that depends on the config, none for small shares."""

    @classmethod
    def default_resource_request(cls, config):
        return None if config["share"] < 0.5 else tune.PlacementGroupFactory([{"CPU": 1, "GPU": config["share"]}])

    def step(self):
        return {"done": True, **self.trial_resources}


def test_a_trainable_classs_default_resource_request_is_each_trials_request(ray_cluster, storage: str) -> None:
    no_save = {"checkpoint_config": tune.CheckpointConfig(checkpoint_at_end=False)}  # it has no save_checkpoint
    grid = _tuner(_AsksPerConfig, storage, {"share": tune.grid_search([0.25, 0.5])}, no_save).fit()
    assert sorted((r.config["share"], r.metrics.get("gpu")) for r in grid) == [(0.25, 0.0), (0.5, 0.5)]
    # with_resources wins over the class's own request, as in Ray
    grid = _tuner(tune.with_resources(_AsksPerConfig, {"cpu": 1, "gpu": 0.125}), storage,
                  {"share": tune.grid_search([0.5])}, no_save).fit()
    assert [r.metrics["gpu"] for r in grid] == [0.125]


def test_nothing_warns_for_plain_requests() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tune.with_resources(lambda config: None, {"cpu": 1, "gpu": 0.25})
    assert np.isclose(normalize_resources({"gpu": 0.0001})["gpu"], 1e-4)


# ---------------------------------------------------------------------------------------------------------
# 7. Multi-objective OptunaSearch; points_to_evaluate under PBT
# ---------------------------------------------------------------------------------------------------------


def _two_objectives(config: dict[str, Any]) -> None:
    for step in range(1, 4):
        tune.report({"loss": (config["x"] - 0.2) ** 2 / step, "gain": config["x"] * step})


def test_multi_objective_optuna_search_runs_and_tells_every_objective(ray_cluster, storage: str, tmp_path) -> None:
    """Ray's optuna_multiobjective_example.py in small: OptunaSearch(metric=[...], mode=[...]) with no TuneConfig
    metric. The study gets both values of each trial; the grid has no default metric, so get_best_result needs
    one named, as in Ray."""
    url = f"sqlite:///{tmp_path / 'mo.db'}"
    holder = OptunaSearch(metric=["loss", "gain"], mode=["min", "max"], seed=3, storage=url, study_name="mo")
    tuner = _tuner(_two_objectives, storage, {"x": tune.uniform(0, 1)},
                   search_alg=tune.search.ConcurrencyLimiter(holder, max_concurrent=2), num_samples=6)
    grid = tuner.fit()
    assert tuner.plan.metric is None and "metric=['loss', 'gain']" in tuner.plan.summary
    assert len(grid) == 6 and grid.num_errors == 0
    study = optuna.load_study(study_name="mo", storage=url)
    assert [d.name for d in study.directions] == ["MINIMIZE", "MAXIMIZE"]
    by_id = {t.user_attrs["fluidsalus_trial_id"]: t for t in study.trials}
    assert len(by_id) == 6 and all(t.state == optuna.trial.TrialState.COMPLETE for t in by_id.values())
    for result in grid:  # each trial is told its last value of each metric
        assert by_id[result.metrics["trial_id"]].values == [result.metrics["loss"], result.metrics["gain"]]
    best_loss = grid.get_best_result("loss", "min")
    assert best_loss.metrics["loss"] == min(r.metrics["loss"] for r in grid)
    assert grid.get_best_result("gain", "max").config["x"] == max(r.config["x"] for r in grid)
    with pytest.raises(ValueError, match="metric"):
        grid.get_best_result()


def test_a_multi_objective_engine_searcher_given_as_it_is_leaves_the_run_without_a_metric() -> None:
    searcher = EngineOptuna({"x": sp.uniform(0, 1)}, 4, ["loss", "gain"], ["min", "max"], seed=0)
    planned = plan(tune.TuneConfig(search_alg=searcher), {})
    assert planned.searcher is searcher and (planned.metric, planned.mode) == (None, None)
    single = EngineOptuna({"x": sp.uniform(0, 1)}, 4, "loss", "min", seed=0)
    assert (plan(tune.TuneConfig(search_alg=single), {}).metric, single.mode) == ("loss", "min")


@pytest.mark.parametrize("make, message", [
    (lambda: {"search_alg": OptunaSearch(metric=["loss", "gain"], mode=["min", "max"]),
              "scheduler": tune.schedulers.ASHAScheduler()},
     r"multi-objective search, and AsyncHyperBandScheduler decides on one metric"),
    (lambda: {"search_alg": OptunaSearch(metric=["loss", "gain"], mode=["min", "max"]), "metric": "loss",
              "mode": "min"}, r"metric: given differently to TuneConfig.metric='loss', "
                              r"OptunaSearch.metric=\['loss', 'gain'\]"),
    (lambda: {"search_alg": OptunaSearch(metric=["loss", "gain"], mode="min")},
     r"OptunaSearch: with metric=\['loss', 'gain'\], mode must be a list of 2 values"),
    (lambda: {"search_alg": OptunaSearch(metric="loss", mode=["min", "max"])},
     r"OptunaSearch: with a list of modes, metric must be a list of distinct result keys"),
])
def test_multi_objective_mistakes_are_refused(make, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(tune.TuneConfig(**make()), {"x": tune.uniform(0, 1)})


def test_pbt_population_starts_with_rays_configurations_for_the_points() -> None:
    """Ray's PopulationBasedTraining takes its population from BasicVariantGenerator, points first: the same
    configurations in the same order for the same random_state (mutated keys that the space holds are kept)."""
    ray_space = {"a": rt.uniform(0, 1), "n": {"d": rt.randint(0, 10), "e": 5}, "c": rt.choice(["x", "y"])}
    ours = {"a": tune.uniform(0, 1), "n": {"d": tune.randint(0, 10), "e": 5}, "c": tune.choice(["x", "y"])}
    points = [{"a": 0.5}, {"n": {"d": 3}, "c": "y"}]
    pbt = tune.schedulers.PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                                  hyperparam_mutations={"a": tune.uniform(0, 1)})
    for num_samples in (1, 4):
        generator = tune.search.BasicVariantGenerator(points_to_evaluate=points, random_state=42)
        searcher = plan(tune.TuneConfig(search_alg=generator, scheduler=pbt, num_samples=num_samples,
                                        metric="m", mode="max"), ours).searcher
        (population,) = searcher.next_groups()
        assert population.configs == _ray_variants(ray_space, num_samples, 42, points)
        assert len(population.configs) == max(num_samples, len(points))


class _SchedulerOfTheUsersOwn(tune.schedulers.FIFOScheduler):
    def on_trial_result(self, tune_controller, trial, result):
        return self.CONTINUE


@pytest.mark.parametrize(("scheduler", "search_alg", "expected"), [
    (None, None, 6),
    (lambda: tune.schedulers.ASHAScheduler(max_t=4), None, 6),
    (lambda: tune.schedulers.HyperBandScheduler(max_t=4), None, 6),
    (lambda: tune.schedulers.MedianStoppingRule(), None, 6),
    (lambda: _SchedulerOfTheUsersOwn(), None, 6),
    (lambda: tune.schedulers.PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                                     hyperparam_mutations={"y": [1, 2]}), None, 6),
    (lambda: tune.schedulers.ASHAScheduler(max_t=4), lambda: OptunaSearch(), 2),  # a model's: num_samples
    # a point first, then the grid once more (it counted the grid twice, 6, under ASHA: a review)
    (lambda: tune.schedulers.ASHAScheduler(max_t=4),
     lambda: tune.search.BasicVariantGenerator(points_to_evaluate=[{"x": 5}]), 4),
    (lambda: tune.schedulers.HyperBandScheduler(max_t=4),
     lambda: tune.search.BasicVariantGenerator(points_to_evaluate=[{"x": 5}]), 4),
])
def test_callbacks_and_reporters_are_told_the_trials_ray_counts_under_any_scheduler(scheduler, search_alg, expected):
    """Ray's total_num_samples counts the grid under a scheduler too (its BasicVariantGenerator's); under ASHA,
    HyperBand, the median rule, PBT or a scheduler of the user's own it was num_samples: 2 for 3 values x 2, and
    CLIReporter printed "Number of trials: 3/1" (a helper's side-by-side run with Ray 2.60)."""
    from fluidsalus.tune._tuner import _total_samples

    searcher = search_alg() if search_alg else None
    config = tune.TuneConfig(metric="loss", mode="min", num_samples=2,
                             scheduler=scheduler() if scheduler else None, search_alg=searcher)
    grid = searcher is None or isinstance(searcher, tune.search.BasicVariantGenerator)
    space = {"x": tune.grid_search([1, 2, 3])} if grid else {"x": tune.uniform(0, 1)}
    planned = plan(config, space)
    assert _total_samples(planned.searcher, 2, endless=False) == expected


@pytest.mark.parametrize("search_alg, expected", [
    (None, 3 * sys.maxsize),  # Ray's BasicVariantGenerator: the grid of 3, sys.maxsize times
    (lambda: tune.search.BasicVariantGenerator(points_to_evaluate=[{"x": 5}]), 1 + 3 * (sys.maxsize - 1)),
    (lambda: OptunaSearch(seed=0), sys.maxsize),  # Ray's SearchGenerator: num_samples, sys.maxsize
])
def test_an_endless_run_tells_callbacks_rays_count_and_the_reporter_says_infinite(search_alg, expected):
    """Ray runs num_samples=-1 as sys.maxsize samples and passes its count to ``Callback.setup``; fluidsalus
    passed None (a helper's side-by-side run). CLIReporter then says "infinite", as Ray's does."""
    from fluidsalus.tune._tuner import _total_samples
    from fluidsalus.tune.progress_reporter import CLIReporter

    searcher = search_alg() if search_alg else None
    config = tune.TuneConfig(metric="loss", mode="min", num_samples=-1, search_alg=searcher, time_budget_s=5)
    space = {"x": tune.grid_search([1, 2, 3])} if search_alg is None or not isinstance(searcher, OptunaSearch) \
        else {"x": tune.uniform(0, 1)}
    total = _total_samples(plan(config, space).searcher, -1, endless=True)
    assert total == expected
    reporter = CLIReporter()
    reporter.setup(total_samples=total)
    assert "Number of trials: 0/infinite" in reporter._progress_str([], done=False)


# ---------------------------------------------------------------------------------------------------------
# sample_from in the space of a search algorithm
# ---------------------------------------------------------------------------------------------------------


class _CountingSearcher(tune.search.Searcher):
    """Suggests x = 1, 2, ...; records the space it was given and what it is told."""

    def __init__(self) -> None:
        super().__init__(metric="loss", mode="min")
        self.asked = 0
        self.space: dict[str, Any] | None = None

    def set_search_properties(self, metric, mode, config, **spec):
        self.space = dict(config)
        return True

    def suggest(self, trial_id):
        self.asked += 1
        return {"x": self.asked}

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass


@pytest.mark.parametrize("make", [
    lambda: OptunaSearch(seed=1),
    lambda: tune.search.ConcurrencyLimiter(OptunaSearch(seed=1), max_concurrent=2),
    _CountingSearcher,
])
def test_sample_from_in_a_search_algorithms_space_is_computed_on_each_suggestion(make) -> None:
    """Ray's Tuner hands a search algorithm a placeholder for each sample_from and computes the function on what it
    suggests; fluidsalus refused such a space (Optuna: "sample_from(...) has no Optuna equivalent"; one's own
    searcher: "left param_space's y unresolved"; a helper's side-by-side run, where Ray ran y = 10 * x)."""
    space = {"x": tune.randint(1, 4), "y": tune.sample_from(lambda spec: spec.config.x * 10),
             "nested": {"z": tune.sample_from(lambda spec: spec.config.y + 1)}, "const": 7,
             # called with the config first, as Ray's Tuner calls a placeholder's function (the spec first, it got
             # the default, -1, for every trial: the review)
             "w": tune.sample_from(lambda config: config.get("x", -1) * 100)}
    search_alg = make()
    planned = plan(tune.TuneConfig(metric="loss", mode="min", num_samples=3, search_alg=search_alg), space)
    configs = [config for _, config in _add(planned.searcher)]
    assert len(configs) >= 2
    for config in configs:
        assert config["y"] == 10 * config["x"] and config["nested"] == {"z": config["y"] + 1}
        assert config["w"] == 100 * config["x"]
        assert config["const"] == 7
    if isinstance(search_alg, _CountingSearcher):  # it saw Ray's kind of placeholder, a constant, in their place
        assert search_alg.space is not None and search_alg.space["y"] == "<sample_from: y>"
        assert [c["x"] for c in configs] == [1, 2, 3]


@pytest.mark.parametrize("constant", [False, True])
def test_random_search_calls_a_sample_from_function_with_the_config_first_as_rays_tuner(constant: bool) -> None:
    """Ray 2.60's Tuner computes a sample_from on each trial's configuration, the config first, under its random
    search too (BasicVariantGenerator sees a placeholder), and with constant_grid_search for each grid point.
    fluidsalus's random search called the spec first: ``c.get("x", 0) * 2`` gave 0 where Ray's gave 2x, and a
    function of no argument ran once per sample with constant_grid_search (sf_side.py, Ray's Tuner and
    ``tune.run`` beside fluidsalus's)."""
    drawn = iter(range(100))
    space = {"x": tune.uniform(1, 5), "g": tune.grid_search([1, 2]), "y": tune.sample_from(lambda c: c.get("x", 0) * 2),
             "n": tune.sample_from(lambda: next(drawn))}
    generator = tune.search.BasicVariantGenerator(constant_grid_search=constant, random_state=1)
    planned = plan(tune.TuneConfig(num_samples=2, search_alg=generator), space)
    configs = [c for group in planned.searcher.next_groups() for c in group.configs]
    assert len(configs) == 4 and all(c["y"] == 2 * c["x"] for c in configs)
    assert sorted(c["n"] for c in configs) == [0, 1, 2, 3]
    assert len({c["x"] for c in configs}) == (2 if constant else 4)


def _reports_y(config: dict[str, Any]) -> None:
    tune.report({"loss": float(config["y"])})


def test_a_fit_with_sample_from_and_optuna_search_runs_and_the_study_learns_the_values(ray_cluster, storage) -> None:
    search_alg = OptunaSearch(seed=1)
    space = {"x": tune.randint(1, 4), "y": tune.sample_from(lambda spec: spec.config.x * 10)}
    grid = _tuner(_reports_y, storage, space, metric="loss", mode="min", num_samples=3, search_alg=search_alg).fit()
    assert grid.num_errors == 0 and len(grid) == 3
    assert all(r.config["y"] == 10 * r.config["x"] == r.metrics["loss"] for r in grid)
    assert grid.get_best_result().config["y"] == min(r.config["y"] for r in grid)


def _checkpoints_each_iteration(config: dict[str, Any]) -> None:
    for i in range(1, 4):
        folder = os.path.join(tune.get_context().get_trial_dir(), f"tmp_{i}")
        checkpoint = tune.Checkpoint.from_directory(folder)  # before the folder exists, as Ray allows
        os.makedirs(folder)
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump({"i": i}, f)
        tune.report({"score": float(i * config["x"])}, checkpoint=checkpoint)


def test_every_checkpoint_a_run_hands_out_is_a_tune_checkpoint_with_rays_filesystem(ray_cluster, storage: str,
                                                                                    tmp_path) -> None:
    """Results' checkpoints were the engine's class: not ``isinstance(..., tune.Checkpoint)``, and without Ray's
    ``filesystem``, so Ray's ``pyarrow.fs.copy_files(..., source_filesystem=checkpoint.filesystem)`` failed where
    a checkpoint in a trial had it (a helper's side-by-side run)."""
    from pyarrow import fs

    analysis = tune.run(_checkpoints_each_iteration, config={"x": tune.grid_search([1, 2])}, metric="score",
                        mode="max", storage_path=storage, name="classes", verbose=0,
                        checkpoint_config=tune.CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score"))
    grid = tune.ResultGrid(analysis)
    best = grid.get_best_result()
    handed_out = [best.checkpoint, *(c for c, _ in best.best_checkpoints),
                  analysis.get_best_checkpoint(analysis.get_best_trial()), analysis.best_checkpoint,
                  tune.ResultGrid.read(analysis.experiment_path)[0].checkpoint]
    for checkpoint in handed_out:
        assert isinstance(checkpoint, tune.Checkpoint) and isinstance(checkpoint.filesystem, fs.LocalFileSystem)
    os.makedirs(tmp_path / "out")
    fs.copy_files(best.checkpoint.path, str(tmp_path / "out"), source_filesystem=best.checkpoint.filesystem)
    assert json.load(open(tmp_path / "out" / "state.json")) == {"i": 3}


def test_a_result_grid_is_built_from_an_experiment_analysis_as_in_ray(ray_cluster, storage: str) -> None:
    """``ResultGrid(experiment_analysis)`` is Ray's constructor (it raised ``TypeError``); the grid takes the
    analysis's trials, folder and default metric and mode."""
    analysis = tune.run(_checkpoints_each_iteration, config={"x": tune.grid_search([1, 2])}, metric="score",
                        mode="max", storage_path=storage, name="analysis", verbose=0)
    for grid in (tune.ResultGrid(analysis), tune.ResultGrid(experiment_analysis=analysis),
                 tune.ResultGrid(tune.ExperimentAnalysis(analysis.experiment_path, default_metric="score",
                                                         default_mode="min"))):
        assert len(grid) == 2 and grid.experiment_path == analysis.experiment_path
    assert tune.ResultGrid(analysis).get_best_result().metrics["score"] == 6.0  # (its default mode: max)
    assert grid.get_best_result().metrics["score"] == 3.0  # (the last one's: min)
    with pytest.raises(TypeError, match="give an ExperimentAnalysis"):
        tune.ResultGrid([])


def _retried_from_an_older_checkpoint(config: dict[str, Any]) -> None:
    """x=1: checkpoints at iteration 1 only, reaches score 100 at iteration 3 and fails; its retry resumes from
    iteration 1 and ends at iteration 2 with score 1. x=2: scores 50."""
    start = 0
    if tune.get_checkpoint() is not None:
        start = 1
    for i in range(start + 1, 4):
        if config["x"] == 2:
            tune.report({"score": 50.0})
            continue
        if start == 1:  # the retry: one more iteration, then it ends
            tune.report({"score": 1.0})
            return
        checkpoint = None
        if i == 1:
            folder = os.path.join(tune.get_context().get_trial_dir(), "tmp_1")
            os.makedirs(folder, exist_ok=True)
            checkpoint = tune.Checkpoint.from_directory(folder)
        tune.report({"score": 100.0 if i == 3 else 10.0}, checkpoint=checkpoint)
    if config["x"] == 1:
        raise RuntimeError("fails after iteration 3")


def test_a_trial_retried_from_an_older_checkpoint_is_judged_by_its_last_attempt(ray_cluster, storage: str) -> None:
    """Its dead attempt's later rows (iteration 3, score 100) stayed in its history, so the best result by the
    last score was this trial, whose own last result says 1 (Ray picks the other trial: a helper's run)."""
    grid = _tuner(_retried_from_an_older_checkpoint, storage, {"x": tune.grid_search([1, 2])},
                  {"failure_config": tune.FailureConfig(max_failures=1)}, metric="score", mode="max").fit()
    retried = next(r for r in grid if r.config["x"] == 1)
    assert retried.error is None and retried.metrics["score"] == 1.0
    assert list(retried.metrics_dataframe["training_iteration"]) == [1, 2]
    assert grid.get_best_result().config["x"] == 2
    assert sorted(grid.get_dataframe()["score"]) == [1.0, 50.0]
