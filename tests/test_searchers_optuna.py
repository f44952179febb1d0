"""OptunaSearch: Optuna samplers propose through ask/tell, the study records every outcome, pruners stop trials."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.searchers._optuna import DEFAULT_BATCH_SIZE, TRIAL_ID_ATTR, OptunaSearch
from fluidsalus.testing import drive
from fluidsalus.testing.state import drive_checking_state_json

optuna.logging.set_verbosity(optuna.logging.WARNING)

OPTIMUM = {"x": 1.5, "y": -0.5}
SPACE = {"x": sp.uniform(-5, 5), "y": sp.uniform(-5, 5), "fixed": {"width": 64}}
SEEDS = range(10)
SAMPLES = 40
#: TPESampler's default n_startup_trials: proposals before it are random.
STARTUP_TRIALS = 10


def _quadratic(config: Mapping[str, Any], iteration: int) -> float:
    return (config["x"] - OPTIMUM["x"]) ** 2 + (config["y"] - OPTIMUM["y"]) ** 2


def _learning_curve(config: Mapping[str, Any], iteration: int) -> float:
    """Loss that falls with the iterations and ends at the quadratic: bad configs are bad from the start."""
    return _quadratic(config, iteration) + 1.0 / iteration


def _search(**kwargs: Any) -> OptunaSearch:
    args: dict[str, Any] = {"space": SPACE, "num_samples": SAMPLES, "metric": "loss", "mode": "min", "seed": 0}
    args.update(kwargs)
    return OptunaSearch(**args)


def _distance(config: Mapping[str, Any]) -> float:
    return math.hypot(config["x"] - OPTIMUM["x"], config["y"] - OPTIMUM["y"])


# ---------------------------------------------------------------------------------------------- search quality


def test_tpe_beats_random_sampling_on_a_quadratic():
    tpe, rand = [], []
    for seed in SEEDS:
        a = _search(seed=seed)
        drive(a, _quadratic, metric="loss", max_iterations=1, seed=seed)
        b = _search(seed=None, sampler=optuna.samplers.RandomSampler(seed=seed))
        drive(b, _quadratic, metric="loss", max_iterations=1, seed=seed)
        tpe.append(a.study.best_value)
        rand.append(b.study.best_value)
    wins = sum(t < r for t, r in zip(tpe, rand, strict=True))
    assert statistics.median(tpe) < statistics.median(rand) / 2 and wins >= 7, (tpe, rand)


def test_tpe_proposals_concentrate_near_the_optimum_after_startup():
    startup, late = [], []
    for seed in range(4):
        result = drive(_search(seed=seed), _quadratic, metric="loss", max_iterations=1)
        distances = [_distance(t.config) for t in result.trials.values()]  # in proposal order
        startup += distances[:STARTUP_TRIALS]
        late += distances[-SAMPLES // 2:]
    # Random proposals in the 10 x 10 box lie about 4 from the optimum; TPE's later ones about half as far.
    assert statistics.median(late) < 0.6 * statistics.median(startup), (startup, late)


def test_same_seed_same_search():
    first = drive(_search(seed=7), _quadratic, metric="loss", max_iterations=2)
    second = drive(_search(seed=7), _quadratic, metric="loss", max_iterations=2)
    assert [t.config for t in first.trials.values()] == [t.config for t in second.trials.values()]
    other = drive(_search(seed=8), _quadratic, metric="loss", max_iterations=2)
    assert [t.config for t in first.trials.values()] != [t.config for t in other.trials.values()]


def test_a_nested_space_gives_rays_configurations_for_the_same_seed():
    """Ray's OptunaSearch asks the parameters level by level (its flatten_dict: the top level's first), so a seeded
    sampler gave other values for a nested space here; the configuration's keys keep the space's order, as Ray's
    Tuner gives them (checked side by side)."""
    ray_search = pytest.importorskip("ray.tune.search.optuna")
    rt = pytest.importorskip("ray.tune")
    ray_searcher = ray_search.OptunaSearch(
        space={"o": {"a": rt.uniform(0, 1), "b": rt.randint(0, 10)}, "a": rt.loguniform(0.1, 1), "k": 3},
        metric="score", mode="max", seed=3)
    expected = [ray_searcher.suggest(str(i)) for i in range(3)]
    ours = OptunaSearch({"o": {"a": sp.uniform(0, 1), "b": sp.randint(0, 10)}, "a": sp.loguniform(0.1, 1), "k": 3},
                        num_samples=3, metric="score", mode="max", seed=3, batch_size=3)
    configs = [config for group in ours.next_groups() for config in group.configs]
    assert [{key: value for key, value in c.items() if key != "k"} for c in configs] == expected  # (no constants)
    assert [list(c) for c in configs] == [["o", "a", "k"]] * 3 and list(configs[0]["o"]) == ["a", "b"]


# ---------------------------------------------------------------------------------------------- what the study holds


def test_study_holds_every_trial_with_its_last_value_and_its_curve():
    search = _search(num_samples=12)
    result = drive(search, _learning_curve, metric="loss", max_iterations=3)
    assert len(result.trials) == 12 and search.is_finished()
    trials = search.study.get_trials()
    assert len(trials) == 12 and all(t.state == TrialState.COMPLETE for t in trials)
    for trial_id, sim in result.trials.items():
        frozen = trials[search.optuna_trial(trial_id).number]
        assert frozen.user_attrs[TRIAL_ID_ATTR] == trial_id
        assert frozen.value == sim.history[-1]["loss"]
        assert frozen.intermediate_values == {r["training_iteration"]: r["loss"] for r in sim.history}
        assert sim.config == {"x": frozen.params["x"], "y": frozen.params["y"], "fixed": {"width": 64}}


def test_errored_trials_are_failed_and_trials_without_a_value_are_pruned():
    search = _search(num_samples=3)
    (group,) = search.next_groups()
    for index, config in enumerate(group.configs):
        search.on_trial_add(f"t{index}", group.group_id, config)
    search.on_result("t0", {"loss": 2.0, "training_iteration": 1})
    search.on_trial_complete("t0", {"loss": 2.0, "training_iteration": 1}, error=True)
    search.on_trial_complete("t1", None)
    search.on_result("t2", {"loss": 3.0, "training_iteration": 1})
    search.on_trial_complete("t2", {"loss": 3.0, "training_iteration": 1})
    search.on_trial_complete("t2", {"loss": 9.0, "training_iteration": 1})  # a second end is ignored
    states = [(t.state, t.value) for t in search.study.get_trials()]
    assert states == [(TrialState.FAIL, None), (TrialState.PRUNED, None), (TrialState.COMPLETE, 3.0)]


def test_nan_value_fails_the_trial_as_optuna_does():
    search = _search(num_samples=1)
    (group,) = search.next_groups()
    search.on_trial_add("t0", group.group_id, group.configs[0])
    with pytest.warns(UserWarning, match="nan is not acceptable"):
        search.on_trial_complete("t0", {"loss": float("nan"), "training_iteration": 1})
    assert search.study.get_trials()[0].state == TrialState.FAIL


def test_maximize_mode_creates_a_maximizing_study():
    search = _search(mode="max", num_samples=6)
    drive(search, _quadratic, metric="loss", max_iterations=1)
    assert search.study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert search.study.best_value == max(t.value for t in search.study.get_trials())


# ---------------------------------------------------------------------------------------------- batches


def test_batches_keep_at_most_batch_size_trials_in_flight():
    search = _search(num_samples=5, batch_size=2)
    (first,) = search.next_groups()
    assert len(first.configs) == 2 and search.next_groups() == []
    search.on_trial_add("a", first.group_id, first.configs[0])
    search.on_trial_add("b", first.group_id, first.configs[1])
    search.on_trial_complete("a", {"loss": 1.0, "training_iteration": 1})
    (second,) = search.next_groups()
    assert len(second.configs) == 1 and second.group_id != first.group_id and second.budget is None
    assert _search().batch_size == DEFAULT_BATCH_SIZE


# ---------------------------------------------------------------------------------------------- pruning


@pytest.mark.parametrize(
    "pruner",
    [
        optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=2),
        optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=3),
    ],
    ids=["median", "successive-halving"],
)
def test_pruner_stops_bad_trials_and_they_are_told_pruned(pruner):
    search = _search(num_samples=20, pruner=pruner, seed=1)
    result = drive(search, _learning_curve, metric="loss", max_iterations=10, parallel=2)
    stopped = {tid for tid, _, decision in result.decisions if decision == Decision.STOP}
    assert stopped and result.total_iterations < 20 * 10
    by_state: dict[TrialState, list[float]] = {}
    for trial_id, sim in result.trials.items():
        frozen = search.study.get_trials()[search.optuna_trial(trial_id).number]
        assert (frozen.state == TrialState.PRUNED) == (trial_id in stopped)
        if trial_id in stopped:
            assert sim.end_reason == "stopped" and frozen.value == sim.history[-1]["loss"]
        by_state.setdefault(frozen.state, []).append(_quadratic(sim.config, 0))
    assert statistics.median(by_state[TrialState.PRUNED]) > statistics.median(by_state[TrialState.COMPLETE])


def test_without_a_pruner_nothing_is_stopped_even_if_the_study_has_one():
    study = optuna.create_study(direction="minimize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    search = _search(num_samples=8, seed=None, study=study)
    result = drive(search, _learning_curve, metric="loss", max_iterations=4)
    assert all(decision == Decision.CONTINUE for *_, decision in result.decisions)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 8


# ---------------------------------------------------------------------------------------------- warm start


def test_points_to_evaluate_run_first_nested_flat_or_partial():
    points = [{"x": 1.0, "y": 2.0}, {"x": -3.0}, {"fixed/width": 64, "y": 0.25, "x": 0.5}]
    search = _search(num_samples=6, points_to_evaluate=points)
    result = drive(search, _quadratic, metric="loss", max_iterations=1, parallel=1)
    configs = [t.config for t in result.trials.values()]
    assert configs[0] == {"x": 1.0, "y": 2.0, "fixed": {"width": 64}}
    assert configs[1]["x"] == -3.0 and -5 <= configs[1]["y"] <= 5
    assert configs[2] == {"x": 0.5, "y": 0.25, "fixed": {"width": 64}}
    assert len(search.study.get_trials(states=(TrialState.COMPLETE,))) == 6


def test_evaluated_rewards_are_added_to_the_study_without_running():
    points = [{"x": 1.5, "y": -0.5}, {"x": 4.0, "y": 4.0}]
    search = _search(num_samples=3, points_to_evaluate=points, evaluated_rewards=[0.0, 37.0])
    assert [t.value for t in search.study.get_trials()] == [0.0, 37.0]
    result = drive(search, _quadratic, metric="loss", max_iterations=1)
    assert len(result.trials) == 3 and len(search.study.get_trials()) == 5
    assert search.study.best_value == 0.0
    # Reopening a persistent study (a resumed run) does not add the evaluated points twice.
    study = optuna.create_study(direction="minimize")
    for _ in range(2):
        _search(seed=None, study=study, points_to_evaluate=points, evaluated_rewards=[0.0, 37.0])
    assert len(study.get_trials()) == 2


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"space": {"model": {"init": sp.randn(0, 1)}}}, r"parameter 'model/init'.*no Optuna equivalent"),
        ({"space": {"f": sp.sample_from(lambda spec: 1)}}, r"parameter 'f'.*cannot sample from a function"),
        ({"space": {"lr": sp.qloguniform(1e-4, 1e-1, 1e-4)}}, r"parameter 'lr'.*log-scaled and stepped"),
        ({"space": [1, 2]}, r"space must be a dict"),
        ({"mode": "avg"}, r"mode must be one of \['max', 'min'\] \(got 'avg'"),
        # (an unhashable mode was a bare TypeError "unhashable type: 'list'": h83's N9)
        ({"mode": ["min"]}, r"mode must be one of \['max', 'min'\] \(got \['min'\]"),
        ({"metric": ["a", "b"], "mode": [["min"], "max"]},
         r"with metric=\['a', 'b'\], mode must be a list of 2 values"),
        ({"metric": ""}, r"metric must be the name of a result key"),
        ({"num_samples": 0}, r"num_samples must be an int >= 1 \(got 0\)"),
        ({"batch_size": 0}, r"batch_size must be an int >= 1 \(got 0\)"),
        ({"seed": -2}, r"seed must be an int >= 0"),
        ({"sampler": "tpe"}, r"sampler must be an optuna.samplers.BaseSampler, got str"),
        ({"pruner": "median"}, r"pruner must be an optuna.pruners.BasePruner, got str"),
        ({"study": "s", "seed": None}, r"study must be an optuna.Study"),
        ({"study": optuna.create_study(direction="maximize"), "seed": None},
         r"directions is \['MAXIMIZE'\] but mode='min'"),
        ({"points_to_evaluate": [{"z": 1.0}]}, r"points_to_evaluate\[0\] has 'z', which is not a parameter"),
        ({"points_to_evaluate": [{"x": 9.0}]}, r"points_to_evaluate\[0\]\['x'\] = 9.0 is outside"),
        ({"points_to_evaluate": [{"fixed": {"width": 32}}]}, r"fixes it to the constant 64"),
        ({"points_to_evaluate": {"x": 1.0}}, r"points_to_evaluate must be a list of configs"),
        ({"points_to_evaluate": [{"x": 1.0}], "evaluated_rewards": [1.0, 2.0]}, r"one value per point"),
        ({"evaluated_rewards": [1.0]}, r"evaluated_rewards needs points_to_evaluate"),
    ],
)
def test_bad_input_raises_config_error_naming_it(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        _search(**kwargs)


def test_study_and_sampler_together_are_refused_and_a_seed_with_a_sampler_warns():
    with pytest.raises(ConfigError, match="either study or sampler"):
        _search(seed=None, study=optuna.create_study(), sampler=optuna.samplers.RandomSampler())
    with pytest.raises(ConfigError, match=r"directions is \['MINIMIZE', 'MINIMIZE'\] but mode='min' asks for "
                                          r"\['MINIMIZE'\]"):
        _search(seed=None, study=optuna.create_study(directions=["minimize", "minimize"]))
    with pytest.warns(UserWarning, match="seed is ignored"):
        _search(seed=1, sampler=optuna.samplers.RandomSampler())


# ---------------------------------------------------------------------------------------------- state


class _Resuming(BaseSearcher):
    """Delegates to an OptunaSearch and, after ``at`` completions, replaces it by a fresh one loaded from its
    JSON state (what a resumed run does)."""

    def __init__(self, make: Any, at: int) -> None:
        self.make, self.at, self.completions = make, at, 0
        self.inner: OptunaSearch = make()
        self.saved: dict[str, Any] | None = None

    def next_groups(self):
        return self.inner.next_groups()

    def on_trial_add(self, trial_id, group_id, config):
        self.inner.on_trial_add(trial_id, group_id, config)

    def on_result(self, trial_id, result):
        return self.inner.on_result(trial_id, result)

    def on_trial_complete(self, trial_id, result, error=False):
        self.inner.on_trial_complete(trial_id, result, error)
        self.completions += 1
        if self.completions == self.at:
            self.saved = json.loads(json.dumps(self.inner.state_dict()))
            self.inner = self.make()
            self.inner.load_state_dict(self.saved)
            assert self.inner.state_dict() == self.saved

    def is_finished(self):
        return self.inner.is_finished()


def test_state_dict_round_trip_replays_an_in_memory_study_and_continues_running_trials():
    reference = _search(num_samples=10, batch_size=3, seed=4)
    drive(reference, _learning_curve, metric="loss", max_iterations=3, parallel=2)
    resuming = _Resuming(lambda: _search(num_samples=10, batch_size=3, seed=4), at=4)
    result = drive(resuming, _learning_curve, metric="loss", max_iterations=3, parallel=2)
    study = resuming.inner.study
    assert resuming.saved is not None and len(result.trials) == 10
    running_at_save = [tid for tid, rec in resuming.saved["trials"].items() if rec["state"] is None]
    assert running_at_save
    trials = study.get_trials()
    # Finished trials are replayed, running ones asked again with the same parameters: 10 trials, all finished.
    assert len(trials) == 10 and all(t.state == TrialState.COMPLETE for t in trials)
    by_id = {t.user_attrs[TRIAL_ID_ATTR]: t for t in trials}
    for trial_id, sim in result.trials.items():
        assert by_id[trial_id].value == sim.history[-1]["loss"]
        assert by_id[trial_id].intermediate_values == {r["training_iteration"]: r["loss"] for r in sim.history}
    # The first proposals (before the save) equal the reference run's; what follows is TPE on a replayed study.
    first_saved = next(iter(resuming.saved["trials"].values()))
    assert first_saved["params"] == reference.study.get_trials()[0].params



def test_a_resumed_successive_halving_pruner_judges_its_trials_at_the_rungs_of_an_uninterrupted_run():
    """The pruner keeps each trial's rung values in the study's system attributes (``completed_rung_<k>``), which
    the state did not hold: after a resume a running trial was at rung 0 again, its next value (iteration 3, no
    rung) was compared with another trial's iteration-5 value, and the best trial was stopped (a helper's check;
    OptunaSearch + ASHAScheduler becomes this pruner)."""

    def make() -> OptunaSearch:
        return OptunaSearch({"x": sp.uniform(0, 1)}, num_samples=6, metric="loss", mode="min", seed=1,
                            pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2,
                                                                          min_early_stopping_rate=0))

    # (trial, iteration) in the order results arrive; the reload comes after the 8th (trial 0 at 4, trial 3 at 2)
    order = [(0, 1), (1, 1), (0, 2), (2, 1), (0, 3), (3, 1), (0, 4), (3, 2),
             (0, 5), (3, 3), (0, 6), (3, 4), (3, 5), (3, 6), (4, 1), (5, 1)]

    def run(reload_after: int | None) -> dict[float, int]:
        searcher = make()
        group = searcher.propose(6)
        trials = [(f"{group.group_id}_{i}", config["x"]) for i, config in enumerate(group.configs)]
        for trial_id, config in zip((t for t, _ in trials), group.configs, strict=True):
            searcher.on_trial_add(trial_id, group.group_id, config)
        ended: dict[str, int] = {}
        for n, (k, iteration) in enumerate(order):
            trial_id, x = trials[k]
            if trial_id in ended:
                continue
            if n == reload_after:  # what a resume does: a new searcher from the saved state
                state = json.loads(searcher.state_json())
                searcher = make()
                searcher.load_state_dict(state)
            result = {"loss": (x - 0.3) ** 2 + 1 / iteration, "training_iteration": iteration}
            if searcher.on_result(trial_id, result).name == "STOP" or iteration == 6:
                ended[trial_id] = iteration
                searcher.on_trial_complete(trial_id, result)
        return {round(x, 4): ended.get(trial_id, 0) for trial_id, x in trials}

    uninterrupted = run(None)
    assert sorted(uninterrupted.values()) == [1, 1, 1, 1, 6, 6]  # stopped at rung 1 or run to the end
    assert run(8) == uninterrupted


def test_a_resumed_seeded_sampler_goes_on_drawing_where_it_was_instead_of_repeating_its_first_draws():
    """A seeded TPE's first draws are random ones from its own generator. Rebuilt from its seed on resume (before,
    the state held no sampler), it drew the same sequence again, and the run had each of those configurations
    twice (found by killing a Ray Tune script's driver and ``Tuner.restore``-ing it); Ray saves the sampler with
    its searcher. Now the resumed searcher proposes what the uninterrupted one does."""
    def step(search: OptunaSearch, trial_id: str) -> None:
        search.on_result(trial_id, {"loss": 1.0, "training_iteration": 1})
        search.on_trial_complete(trial_id, {"loss": 1.0, "training_iteration": 1})

    def configs(search: OptunaSearch, first: int, count: int) -> list[dict[str, Any]]:
        out = []
        for index in range(first, first + count):
            (group,) = search.next_groups()
            (config,) = group.configs
            search.on_trial_add(f"t{index}", group.group_id, config)
            out.append(config)
            step(search, f"t{index}")
        return out

    uninterrupted = _search(num_samples=8, batch_size=1, seed=3)
    before = configs(uninterrupted, 0, 4)
    state = json.loads(json.dumps(uninterrupted.state_dict()))
    resumed = _search(num_samples=8, batch_size=1, seed=3)
    resumed.load_state_dict(state)
    after = configs(resumed, 4, 4)
    assert after == configs(uninterrupted, 4, 4)
    assert not [c for c in after if c in before]  # before: the first four again


def test_load_into_a_study_that_already_holds_the_trials_adds_no_duplicates():
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))
    first = _search(num_samples=4, batch_size=2, seed=None, study=study)
    (group,) = first.next_groups()
    for index, config in enumerate(group.configs):
        first.on_trial_add(f"t{index}", group.group_id, config)
    first.on_result("t0", {"loss": 5.0, "training_iteration": 1})
    first.on_trial_complete("t0", {"loss": 5.0, "training_iteration": 1})
    first.on_result("t1", {"loss": 7.0, "training_iteration": 1})
    state = json.loads(json.dumps(first.state_dict()))
    second = _search(num_samples=4, batch_size=2, seed=None, study=study)  # a persistent study, reopened
    second.load_state_dict(state)
    states = [(t.state, t.user_attrs.get(TRIAL_ID_ATTR)) for t in study.get_trials()]
    assert states == [(TrialState.COMPLETE, "t0"), (TrialState.FAIL, "t1"), (TrialState.RUNNING, "t1")]
    assert study.get_trials()[2].intermediate_values == {1: 7.0}
    second.on_trial_complete("t1", {"loss": 6.0, "training_iteration": 2})
    assert study.get_trials()[2].value == 6.0 and len(second.next_groups()[0].configs) == 2


# ---------------------------------------------------------------------------------------------- multi-objective


def _multi(**kwargs: Any) -> OptunaSearch:
    return _search(metric=["loss", "size"], mode=["min", "max"], **kwargs)


def _run_by_hand(search: OptunaSearch, results: list[Mapping[str, Any] | None]) -> list[str]:
    """Add one group's trials; each reports ``results[i]`` at iterations 1 and 2, then ends with it."""
    (group,) = search.next_groups()
    ids = [f"t{i}" for i in range(len(group.configs))]
    for trial_id, config in zip(ids, group.configs, strict=True):
        search.on_trial_add(trial_id, group.group_id, config)
    for trial_id, result in zip(ids, results, strict=False):
        for step in (1, 2):
            assert search.on_result(trial_id, {**(result or {}), "training_iteration": step}) == Decision.CONTINUE
        search.on_trial_complete(trial_id, result, error=result is None)
    return ids


def test_multi_objective_study_gets_one_direction_per_metric_and_each_trials_values():
    search = _multi(batch_size=4)
    assert search.study.directions == [optuna.study.StudyDirection.MINIMIZE, optuna.study.StudyDirection.MAXIMIZE]
    assert (search.metric, search.mode) == (["loss", "size"], ["min", "max"])
    _run_by_hand(search, [{"loss": 1.0, "size": 3.0}, {"loss": 0.5, "size": 1.0}, {"loss": 2.0}, None])
    trials = search.study.get_trials()
    assert [(t.state, t.values) for t in trials] == [
        (TrialState.COMPLETE, [1.0, 3.0]), (TrialState.COMPLETE, [0.5, 1.0]),
        (TrialState.PRUNED, None),  # a metric is missing, as a single-objective trial without its value
        (TrialState.FAIL, None),  # errored
    ]
    # Optuna keeps no intermediate values for several objectives (trial.report refuses them), so none are sent.
    assert all(t.intermediate_values == {} for t in trials)
    assert sorted(t.number for t in search.study.best_trials) == [0, 1]  # the Pareto front


def test_multi_objective_state_round_trip_replays_the_values():
    search = _multi(batch_size=3)
    ids = _run_by_hand(search, [{"loss": 1.0, "size": 3.0}, {"loss": 0.5, "size": 1.0}])
    saved = json.loads(json.dumps(search.state_dict()))
    fresh = _multi(batch_size=3)
    fresh.load_state_dict(saved)
    by_id = {t.user_attrs[TRIAL_ID_ATTR]: t for t in fresh.study.get_trials()}
    assert by_id[ids[0]].values == [1.0, 3.0] and by_id[ids[1]].values == [0.5, 1.0]
    assert by_id[ids[2]].state == TrialState.RUNNING  # asked again, to continue from its checkpoint
    assert fresh.state_dict() == saved


def test_multi_objective_evaluated_rewards_are_lists_of_values():
    search = _multi(num_samples=2, points_to_evaluate=[{"x": 1.0, "y": 0.0}], evaluated_rewards=[[0.25, 4.0]])
    assert [t.values for t in search.study.get_trials()] == [[0.25, 4.0]]
    with pytest.raises(ConfigError, match=r"evaluated_rewards\[0\] must be a list of 2 numbers, one per metric"):
        _multi(points_to_evaluate=[{"x": 1.0}], evaluated_rewards=[0.25])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metric": ["loss", "size"], "mode": "min"}, r"metric must be the name of a result key, got \['loss', "),
        ({"metric": ["loss", "loss"], "mode": ["min", "max"]}, r"a list of distinct result keys"),
        ({"metric": 5, "mode": None}, r"metric must be a result key or a list of distinct result keys, got 5"),
        ({"metric": ["loss", "size"], "mode": ["min"]}, r"mode must be a list of 2 values, each one of"),
        ({"metric": ["loss", "size"], "mode": ["min", "up"]}, r"mode must be a list of 2 values"),
        ({"metric": ["loss", "size"], "mode": ["min", "max"], "pruner": optuna.pruners.MedianPruner()},
         r"a pruner cannot be used with a multi-objective search"),
        ({"metric": ["loss", "size"], "mode": ["min", "max"], "study": optuna.create_study(), "seed": None},
         r"directions is \['MINIMIZE'\] but mode=\['min', 'max'\] asks for \['MINIMIZE', 'MAXIMIZE'\]"),
    ],
)
def test_bad_multi_objective_input_raises_config_error_naming_it(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        _search(**kwargs)


def test_state_json_encodes_the_state_dict_at_every_step_and_keeps_told_trials_encoded():
    search = _search(pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
                     sampler=optuna.samplers.RandomSampler(seed=0), seed=None)
    checks = drive_checking_state_json(search, _learning_curve, metric="loss", max_iterations=9, parallel=4, seed=0)
    assert checks > 100
    assert set(search._told_json) == set(search._told) and len(search._told) == SAMPLES  # every told trial kept
    # A resumed searcher (new study) reads the text back to the same state, and encodes it again the same way.
    resumed = _search(sampler=optuna.samplers.RandomSampler(seed=1), seed=None)
    resumed.load_state_dict(json.loads(search.state_json()))
    assert json.loads(resumed.state_json()) == json.loads(search.state_json())
