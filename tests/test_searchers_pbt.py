"""PBT: Ray's explore rules and quantiles, decisions at perturbation points, exploits and synchronous mode.

The exploit path runs through :func:`fluidsalus.testing.pbt.run_pbt`, a small driver with the executor's
group/budget/pause rules that applies :meth:`PBT.take_exploits` the way the executor is asked to.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import statistics
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._base import Decision
from fluidsalus.searchers._pbt import (
    CONTINUE,
    EXPLOIT,
    PBT,
    POPULATION_GROUP_ID,
    exploit_logger,
    explore,
    next_perturbation_point,
    quantiles,
)
from fluidsalus.testing import drive
from fluidsalus.testing.pbt import ITERATIONS, PbtRun, exploit_lines, run_pbt, task_arguments

#: The checkout, first on the path of the scripts the tests run.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Perturbation interval of the tests' PBT (in iterations).
INTERVAL = 4


def _pbt(seed: int = 0, **kwargs: Any) -> PBT:
    return PBT(**{**task_arguments(INTERVAL), "hyperparam_mutations": {"lr": sp.uniform(0.0, 1.0)}, "seed": seed,
                  **kwargs})


# ---------------------------------------------------------------------------------------------- pure rules


def test_quantiles_follow_rays_sizes_and_order():
    scores = [("a", 3.0), ("b", 1.0), ("c", 2.0), ("d", 4.0)]
    assert quantiles(scores, 0.25) == (["b"], ["d"])
    assert quantiles(scores, 0.5) == (["b", "c"], ["a", "d"])
    # ceil(3 * 0.5) = 2 is more than half of 3, so it is cut to floor(3 / 2) = 1.
    assert quantiles(scores[:3], 0.5) == (["b"], ["a"])
    assert quantiles(scores, 0.0) == ([], [])
    assert quantiles([("a", 1.0)], 0.5) == ([], [])
    assert quantiles([("a", math.nan), ("b", 1.0), ("c", 2.0)], 0.5) == (["b"], ["c"])


def test_next_perturbation_point_respects_burn_in():
    assert next_perturbation_point(0.0, 5.0, 0.0) == 5.0
    assert next_perturbation_point(0.0, 5.0, 12.0) == 12.0
    assert next_perturbation_point(12.0, 5.0, 12.0) == 17.0


def test_explore_shifts_list_values_to_a_neighbour_and_clamps_at_the_ends():
    values = [1, 10, 100, 1000]
    seen = set()
    for seed in range(40):
        new, ops = explore({"b": 10}, {"b": values}, 0.0, (1.2, 0.8), random.Random(seed))
        seen.add((new["b"], ops["b"]))
    assert seen == {(1, "shift left"), (100, "shift right")}
    ends = {explore({"b": 1000}, {"b": values}, 0.0, (1.2, 0.8), random.Random(s))[0]["b"] for s in range(20)}
    assert ends == {100, 1000}  # "shift right (noop)" keeps the last value


def test_explore_multiplies_continuous_values_and_keeps_ints_and_bools():
    mutations = {"lr": sp.uniform(0, 1), "batch": sp.randint(1, 100), "flag": lambda: True}
    for seed in range(20):
        new, ops = explore({"lr": 0.5, "batch": 10, "flag": False}, mutations, 0.0, (1.2, 0.8), random.Random(seed))
        assert new["lr"] in (pytest.approx(0.6), pytest.approx(0.4)) and ops["lr"] in ("* 1.2", "* 0.8")
        assert new["batch"] in (12, 8) and isinstance(new["batch"], int)
        assert new["flag"] is False and isinstance(new["flag"], bool)


def test_explore_resamples_from_domains_lists_and_callables():
    mutations = {"lr": sp.loguniform(1e-4, 1e-1), "opt": ["sgd", "adam"], "m": lambda: 0.9}
    for seed in range(20):
        new, ops = explore({"lr": 5.0, "opt": "sgd", "m": 0.1}, mutations, 1.0, (1.2, 0.8), random.Random(seed))
        assert 1e-4 <= new["lr"] <= 1e-1 and new["opt"] in ("sgd", "adam") and new["m"] == 0.9
        assert set(ops.values()) == {"resample"}
    # A list value that is not among the choices is always resampled (Ray's rule).
    new, ops = explore({"opt": "rmsprop"}, {"opt": ["sgd", "adam"]}, 0.0, (1.2,), random.Random(0))
    assert new["opt"] in ("sgd", "adam") and ops["opt"] == "resample"


def test_explore_handles_nested_dicts_custom_fn_and_is_reproducible():
    config = {"model": {"lr": 0.5, "depth": 4}, "seed": 7}
    mutations = {"model": {"lr": sp.uniform(0, 1)}}

    def custom(c: dict[str, Any]) -> dict[str, Any]:
        c["model"]["depth"] += 1
        return c

    first = explore(config, mutations, 0.25, (1.2, 0.8), random.Random(3), custom)
    again = explore(config, mutations, 0.25, (1.2, 0.8), random.Random(3), custom)
    assert first == again
    new, ops = first
    assert new["model"]["depth"] == 5 and new["seed"] == 7 and set(ops) == {"model"} and set(ops["model"]) == {"lr"}
    assert config == {"model": {"lr": 0.5, "depth": 4}, "seed": 7}  # not modified
    with pytest.raises(ConfigError, match="custom_explore_fn must return"):
        explore(config, mutations, 0.25, (1.2,), random.Random(0), lambda c: None)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("resample_probability", [0.0, 0.25, 1.0])
def test_explore_makes_rays_choices_from_the_same_random_stream(seed: int, resample_probability: float) -> None:
    """Differential: Ray's ``_explore`` draws from the global ``random``, ours from its ``rng``; seeded alike,
    they give the same configs and operations (mutations without domains: Ray resamples those from NumPy's
    global generator, so the streams part there)."""
    ray_pbt = pytest.importorskip("ray.tune.schedulers.pbt")
    config = {"opt": "adam", "width": 64, "lr": 0.01, "steps": 10, "flag": True, "nested": {"m": 0.9, "k": "b"},
              "odd": "rmsprop", "keep": 1}
    mutations = {"opt": ["sgd", "adam", "adagrad"], "width": (16, 32, 64, 128), "lr": lambda: 0.05,
                 "steps": lambda: 7, "flag": lambda: False, "nested": {"m": lambda: 0.5, "k": ["a", "b"]},
                 "odd": ["sgd", "adam"]}
    factors = (1.2, 0.8, 1.5)
    state = random.getstate()
    try:
        random.seed(seed)
        expected = ray_pbt._explore(config, mutations, resample_probability, factors, None)
    finally:
        random.setstate(state)
    assert explore(config, mutations, resample_probability, factors, random.Random(seed)) == expected


def test_explore_resamples_a_value_that_cannot_be_multiplied():
    new, ops = explore({"act": "relu"}, {"act": sp.choice(["relu", "tanh"])}, 0.0, (1.2,), random.Random(0))
    assert new["act"] in ("relu", "tanh") and ops["act"] == "resample"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"quantile_fraction": 0.7}, r"quantile_fraction must be in \[0, 0.5\] \(got 0.7\)"),
        ({"quantile_fraction": -0.1}, r"quantile_fraction must be in \[0, 0.5\]"),
        ({"perturbation_interval": 0}, r"perturbation_interval must be > 0"),
        ({"perturbation_interval": -5.0}, r"perturbation_interval must be > 0"),
        ({"resample_probability": 1.5}, r"resample_probability must be in \[0, 1\] \(got 1.5\)"),
        ({"burn_in_period": -1}, r"burn_in_period must be >= 0"),
        ({"hyperparam_mutations": {}}, r"hyperparam_mutations is empty and custom_explore_fn is None"),
        ({"hyperparam_mutations": {"lr": []}}, r"hyperparam_mutations\['lr'\] is an empty list"),
        ({"hyperparam_mutations": {"lr": sp.sample_from(lambda: 1)}}, r"'lr'\] is a sample_from"),
        ({"hyperparam_mutations": {"m": {"lr": 3}}}, r"hyperparam_mutations\['m/lr'\] must be a list"),
        ({"mode": "avg"}, r"mode must be one of \['max', 'min'\] \(got 'avg'\)"),
        ({"num_samples": 0}, r"num_samples must be an int >= 1"),
        ({"perturbation_factors": ()}, r"perturbation_factors must be a non-empty sequence"),
        ({"custom_explore_fn": 3}, r"custom_explore_fn must be callable"),
        ({"seed": -1}, r"seed must be None or an int >= 0"),
    ],
)
def test_bad_parameters_raise_config_error_naming_them(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        _pbt(**kwargs)


def test_custom_explore_fn_alone_is_enough():
    assert _pbt(hyperparam_mutations=None, custom_explore_fn=lambda c: c).hyperparam_mutations == {}


def test_defaults_are_rays():
    pbt = PBT({"lr": 0.1}, 2, "loss", "min", hyperparam_mutations={"lr": [0.1, 0.2]})
    assert (pbt.time_attr, pbt.perturbation_interval, pbt.burn_in_period) == ("time_total_s", 60.0, 0.0)
    assert (pbt.quantile_fraction, pbt.resample_probability, pbt.perturbation_factors) == (0.25, 0.25, (1.2, 0.8))
    assert (pbt.log_config, pbt.require_attrs, pbt.synch) == (True, True, False)


# ---------------------------------------------------------------------------------------------- groups and decisions


def test_population_is_one_group_to_the_first_perturbation_point_with_missing_mutations_filled():
    pbt = _pbt(space={"lr": sp.uniform(0, 1), "wd": 0.0}, hyperparam_mutations={"lr": [0.1, 0.2], "mom": [0.8, 0.9]},
               perturbation_interval=5, burn_in_period=7)
    (group,) = pbt.next_groups()
    assert group.group_id == POPULATION_GROUP_ID and group.budget == 7 and len(group.configs) == 8
    assert all(c["mom"] in (0.8, 0.9) and c["wd"] == 0.0 for c in group.configs)
    assert pbt.next_groups() == [] and not pbt.is_finished()


def test_points_to_evaluate_are_the_first_members_and_count_as_samples():
    space = {"lr": sp.uniform(0, 1), "wd": 0.0}
    mutations = {"lr": [0.1, 0.2], "mom": [0.8, 0.9]}
    points = [{"lr": 0.1, "mom": 0.9}, {"mom": 0.8}]
    pbt = _pbt(space=space, hyperparam_mutations=mutations, num_samples=3, points_to_evaluate=points)
    (group,) = pbt.next_groups()
    assert [(c["lr"], c["mom"]) for c in group.configs[:1]] == [(0.1, 0.9)]
    assert group.configs[1]["mom"] == 0.8 and 0 <= group.configs[1]["lr"] <= 1
    assert len(group.configs) == 3 and all(c["wd"] == 0.0 and c["mom"] in (0.8, 0.9) for c in group.configs)
    assert pbt.points_to_evaluate == points
    # More points than samples: every point still runs, and nothing is sampled.
    (group,) = _pbt(space=space, hyperparam_mutations=mutations, num_samples=1, points_to_evaluate=points).next_groups()
    assert [c["mom"] for c in group.configs] == [0.9, 0.8]
    # Without points the population is the one random search draws for the same seed.
    (group,) = _pbt(space=space, hyperparam_mutations=mutations, num_samples=3, seed=4).next_groups()
    assert [c["lr"] for c in group.configs] == [c["lr"] for c in sp.generate_variants(space, 3, 4)]


@pytest.mark.parametrize("points, message", [
    ([{"nope": 1}], r"points_to_evaluate\[0\] sets 'nope', which is not a key of the search space \(keys: \['lr'\]\); "
                    r"add it to param_space or to hyperparam_mutations"),
    ({"lr": 0.1}, "points_to_evaluate must be None or a list of dicts"),
    ([0.1], r"points_to_evaluate\[0\] must be a dict"),
])
def test_bad_points_raise_config_error_naming_them(points: Any, message: str):
    with pytest.raises(ConfigError, match=message):
        _pbt(points_to_evaluate=points)


def _population(pbt: PBT, scores: list[float], checkpoint: bool = True) -> list[dict[str, Any]]:
    """Add trials t0, t1, ..., then bring each to the first perturbation point with the given score.

    Returns:
        The initial configs.
    """
    (group,) = pbt.next_groups()
    ids = [f"t{i}" for i in range(len(group.configs))]
    for trial_id, config in zip(ids, group.configs, strict=True):
        pbt.on_trial_add(trial_id, group.group_id, config)
    for trial_id, score in zip(ids, scores, strict=True):
        result = {"score": score, "training_iteration": INTERVAL}
        if checkpoint:
            result["checkpoint_dir_name"] = "checkpoint_000004"
        pbt.on_result(trial_id, result)
    return group.configs


def test_bottom_trial_exploits_a_top_trial_and_the_rest_are_promoted():
    pbt = _pbt(num_samples=4)
    _population(pbt, [2.0, 3.0, 4.0, 1.0])  # each newcomer but t3 is the best so far
    assert pbt.decide("t3") == (EXPLOIT, "t2") and pbt.decide("t1") == (CONTINUE, None)
    assert set(pbt.pending_exploits) == {"t3"} and pbt.pending_exploits["t3"][0] == "t2"
    groups = pbt.next_groups()
    assert [(g.trial_ids, g.budget) for g in groups] == [(["t0", "t1", "t2"], 2 * INTERVAL)]
    (request,) = pbt.take_exploits()
    assert (request.trial_id, request.source_trial_id, request.source_iteration) == ("t3", "t2", INTERVAL)
    assert request.budget == 2 * INTERVAL and request.config == pbt.trial_config("t3")
    assert request.config["lr"] in (pytest.approx(pbt.trial_config("t2")["lr"] * f) for f in (1.2, 0.8)) or (
        pbt.exploit_log[0]["operations"]["lr"] == "resample"
    )
    assert pbt.take_exploits() == [] and pbt.pending_exploits == {}
    assert pbt.exploit_log[0]["trial_id"] == "t3" and json.dumps(pbt.exploit_log)


def test_an_exploit_logs_rays_exploit_and_explore_lines() -> None:
    """PBT exploits printed nothing (fluidsalus logged its own line at INFO, which nothing shows); Ray's PBT logs
    two lines per exploit through its module's logger, shown by default at any verbose (h160's F4)."""
    import ray  # (Ray's import sets its ``ray`` logger's INFO handler, which shows the lines as it shows Ray's)

    assert exploit_logger.name == "ray.tune.schedulers.pbt" and ray and logging.getLogger("ray").handlers
    assert logging.getLogger("ray").isEnabledFor(logging.INFO)
    pbt = _pbt(num_samples=4, space={"lr": 0.5, "opt": {"m": 0.9}},
               hyperparam_mutations={"lr": sp.uniform(0.0, 1.0), "opt": {"m": [0.8, 0.9]}})
    with exploit_lines() as lines:
        _population(pbt, [2.0, 3.0, 4.0, 1.0])
    exploit, explore_line = lines
    assert exploit == "\n\n[PBT] [Exploit] Cloning trial t2 (score = 4.000000) into trial t3 (score = 1.000000)\n"
    new, ops = pbt.trial_config("t3"), pbt.exploit_log[0]["operations"]
    assert explore_line == (  # (Ray's text has no space before the trial id)
        "\n\n[PBT] [Explore] Perturbed the hyperparameter config of trialt3:\n"
        f"lr : 0.5 --- ({ops['lr']}) --> {new['lr']}\n"
        f"opt : \n    m : 0.9 --- ({ops['opt']['m']}) --> {new['opt']['m']}\n")
    pbt = _pbt(num_samples=4, hyperparam_mutations={}, custom_explore_fn=lambda config: config)
    pbt.scheduler_name = "MyPBT"  # (the Tune front end sets its scheduler's class name, as Ray's lines give it)
    with exploit_lines() as lines:
        _population(pbt, [2.0, 3.0, 4.0, 1.0])
    assert lines[-1] == ("\n\n[MyPBT] [Explore] Perturbed the hyperparameter config of trialt3:\n"
                         "No hyperparameters mutated.")



def test_the_status_line_counts_rays_checkpoints_and_perturbs_and_survives_a_resume():
    """The status report's scheduler line was PBT's repr (``PopulationBasedTraining(time_attr=..., metric=None,
    ...)``); Ray's ``PopulationBasedTraining.debug_string()`` counts the points at which a trial was in the top
    quantile (its ``_num_checkpoints``) and the exploits. Scores 2, 3, 4, 1 reach the first point in turn: t0 alone
    has no quantile, t1 and t2 are each the top one when they arrive, t3 is the bottom one and clones t2."""
    from fluidsalus.tune.progress_reporter import scheduler_lines
    from fluidsalus.tune.schedulers import PopulationBasedTraining

    pbt = _pbt(num_samples=4)
    assert pbt.debug_string() == "PopulationBasedTraining: 0 checkpoints, 0 perturbs"
    _population(pbt, [2.0, 3.0, 4.0, 1.0])
    assert pbt.debug_string() == "PopulationBasedTraining: 2 checkpoints, 1 perturbs"
    holder = PopulationBasedTraining(hyperparam_mutations={"lr": [0.1, 0.2]})
    assert scheduler_lines(pbt, [], holder) == pbt.debug_string()
    resumed = _pbt(num_samples=4)
    resumed.load_state_dict(json.loads(json.dumps(pbt.state_dict())))
    assert resumed.debug_string() == pbt.debug_string()
    older = {key: value for key, value in pbt.state_dict().items() if key != "num_checkpoints"}
    resumed.load_state_dict(older)  # (a state saved before the count: none counted)
    assert resumed.debug_string() == "PopulationBasedTraining: 0 checkpoints, 1 perturbs"


#: A user's PBT script under the Tune front end, with no ``ray.init`` of its own: fluidsalus starts Ray.
_PBT_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, tempfile
    from fluidsalus import tune

    def train(config):
        x, checkpoint = 0.0, tune.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as folder:
                x = json.load(open(os.path.join(folder, "x.json")))
        while True:
            x += config["lr"]
            folder = tempfile.mkdtemp()
            json.dump(x, open(os.path.join(folder, "x.json"), "w"))
            tune.report({"x": x}, checkpoint=tune.Checkpoint.from_directory(folder))

    pbt = tune.schedulers.PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                                  hyperparam_mutations={"lr": [0.5]})
    tune.Tuner(train, param_space={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.9])},
               tune_config=tune.TuneConfig(metric="x", mode="max", scheduler=pbt),
               run_config=tune.RunConfig(storage_path=sys.argv[1], stop={"training_iteration": 8},
                                         verbose=0)).fit()
    """
)
#: Ray's format of its ``ray`` logger's lines (``ray._private.log``), then PBT's exploit line.
_RAYS_EXPLOIT_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+\tINFO \S+\.py:\d+ -- \n\n"
                                r"\[PopulationBasedTraining\] \[Exploit\] Cloning trial \w+ \(score = ", re.MULTILINE)
#: Seconds the script may take: Ray's start (up to 30 s on a loaded 2-core machine) and 4 trials of 8 iterations
#: (a point may skip its exploit, "no checkpoint for trial ...", by the order the trials reach it: three points).
_PBT_SCRIPT_TIMEOUT_S = 180


def test_an_exploit_shows_rays_lines_on_the_console_of_a_run_that_started_ray(tmp_path) -> None:
    """The lines never reached the console when fluidsalus started Ray itself (h204's F3): its
    ``ray.init(configure_logging=False)`` cleared the handler ``import ray`` sets on the ``ray`` logger. Ray Tune's
    own ``ray.init()`` keeps it, so the lines show there; they now show here too, and Ray's start lines still do
    not (a fresh process: the suite's own Ray is up already)."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env["RAY_ADDRESS"] = "local"  # (a fresh Ray of its own, even beside a cluster `ray start` left running)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _PBT_SCRIPT, str(tmp_path / "results")], capture_output=True,
                          text=True, env=env, timeout=_PBT_SCRIPT_TIMEOUT_S)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-3000:]
    assert _RAYS_EXPLOIT_LINE.search(done.stderr), console[-3000:]
    assert "[PopulationBasedTraining] [Explore] Perturbed the hyperparameter config of trial" in done.stderr
    assert "Started a local Ray instance" not in console


def test_trials_take_turns_by_the_time_of_their_last_point_as_in_rays_choose_trial_to_run():
    """PBT's turn key is Ray's ``choose_trial_to_run`` key: a trial's ``time_attr`` at its last perturbation point
    (0 before its first, and for a trial PBT has not been told of); an exploiting trial takes its source's."""
    pbt = _pbt(num_samples=4)
    assert pbt.takes_turns and pbt.turn_key("t-unknown") == 0.0
    pbt.next_groups()
    for i in range(4):
        pbt.on_trial_add(f"t{i}", POPULATION_GROUP_ID, {"lr": 0.1})
    assert [pbt.turn_key(f"t{i}") for i in range(4)] == [0.0] * 4
    pbt.on_result("t0", {"score": 1.0, "training_iteration": INTERVAL - 1})  # before its point: no turn taken
    assert pbt.turn_key("t0") == 0.0
    for tid, score in (("t0", 2.0), ("t1", 3.0), ("t2", 4.0)):
        pbt.on_result(tid, {"score": score, "training_iteration": INTERVAL, "checkpoint_dir_name": "c"})
    assert [pbt.turn_key(f"t{i}") for i in range(4)] == [INTERVAL, INTERVAL, INTERVAL, 0.0]
    pbt.next_groups()
    pbt.on_result("t2", {"score": 5.0, "training_iteration": 2 * INTERVAL, "checkpoint_dir_name": "c"})
    pbt.on_result("t3", {"score": 0.0, "training_iteration": INTERVAL, "checkpoint_dir_name": "c"})
    assert pbt.pending_exploits["t3"][0] == "t2"  # the bottom trial clones the top one, at 2 * INTERVAL
    assert pbt.turn_key("t2") == pbt.turn_key("t3") == 2 * INTERVAL


def test_a_trial_whose_last_result_was_done_is_neither_ranked_nor_cloned_until_it_reports_again():
    """As Ray's PBT passes over finished trials: t2 met the run's stop rule at the first point (its end has not
    reached the driver yet), so the bottom trial clones another top trial, not t2's last checkpoint."""
    pbt = _pbt(num_samples=4, quantile_fraction=0.5)
    (group,) = pbt.next_groups()
    ids = [f"t{i}" for i in range(4)]
    for trial_id, config in zip(ids, group.configs, strict=True):
        pbt.on_trial_add(trial_id, group.group_id, config)
    point = {"training_iteration": INTERVAL, "checkpoint_dir_name": "checkpoint_000004"}
    pbt.on_result("t2", {**point, "score": 9.0, "done": True})  # the best, and finished by the stop rule
    pbt.on_result("t0", {**point, "score": 2.0})
    pbt.on_result("t1", {**point, "score": 3.0})  # top at its point: its checkpoint may be cloned
    pbt.on_result("t3", {**point, "score": 1.0})
    assert pbt.pending_exploits["t3"][0] == "t1"  # without the rule: t2, the best
    lower, upper = pbt._quantiles()
    assert "t2" not in lower + upper and pbt.decide("t2") == (CONTINUE, None)
    pbt.on_result("t2", {**point, "training_iteration": INTERVAL + 1, "score": 9.0})  # it went on (a move)
    assert "t2" in pbt._quantiles()[1]  # ranked, and a source, again


def test_without_checkpoints_nobody_exploits():
    pbt = _pbt(num_samples=4)
    _population(pbt, [4.0, 3.0, 2.0, 1.0], checkpoint=False)
    assert pbt.pending_exploits == {}
    assert [sorted(g.trial_ids) for g in pbt.next_groups()] == [["t0", "t1", "t2", "t3"]]


def test_min_mode_exploits_the_largest_loss():
    pbt = _pbt(num_samples=4, mode="min")
    _population(pbt, [3.0, 2.0, 1.0, 4.0])  # in min mode the last one is the worst
    assert set(pbt.pending_exploits) == {"t3"} and pbt.pending_exploits["t3"][0] == "t2"


def test_an_untaken_exploit_falls_back_to_a_promotion_with_the_old_config():
    pbt = _pbt(num_samples=4)
    old = _population(pbt, [2.0, 3.0, 4.0, 1.0])[3]
    assert "t3" not in {tid for g in pbt.next_groups() for tid in g.trial_ids}  # offered once
    (group,) = pbt.next_groups()  # not taken: the driver cannot apply exploits
    assert group.trial_ids == ["t3"] and group.budget == 2 * INTERVAL
    assert pbt.trial_config("t3") == old and pbt.exploit_log == [] and pbt.pending_exploits == {}


def test_a_cancelled_exploit_promotes_the_trial_unchanged():
    pbt = _pbt(num_samples=4)
    old = _population(pbt, [2.0, 3.0, 4.0, 1.0])[3]
    pbt.next_groups()
    pbt.take_exploits()
    pbt.cancel_exploit("t3")
    (group,) = pbt.next_groups()
    assert group.trial_ids == ["t3"] and pbt.trial_config("t3") == old


def test_a_taken_exploit_cancelled_as_the_trial_ends_leaves_it_ended_with_its_own_config():
    """The executor cancels a taken exploit of a trial that met the run's stop rule before its restart began, and
    then tells PBT the trial's end (tests/test_executor_planner.py): PBT keeps the trial's own configuration,
    forgets the exploit, and promotes nothing."""
    pbt = _pbt(num_samples=4)
    old = _population(pbt, [2.0, 3.0, 4.0, 1.0])[3]
    pbt.next_groups()
    (request,) = pbt.take_exploits()
    assert request.trial_id == "t3" and len(pbt.exploit_log) == 1
    pbt.cancel_exploit("t3")
    pbt.on_trial_complete("t3", {"score": 1.0, "training_iteration": INTERVAL + 1, "done": True})
    assert pbt.trial_config("t3") == old and pbt.exploit_log == []
    assert "t3" not in {tid for group in pbt.next_groups() for tid in group.trial_ids}


def test_results_missing_the_metric_raise_unless_require_attrs_is_false():
    pbt = _pbt(num_samples=2)
    (group,) = pbt.next_groups()
    pbt.on_trial_add("a", group.group_id, group.configs[0])
    with pytest.raises(ConfigError, match=r"metric='score' is not in the result of trial a"):
        pbt.on_result("a", {"training_iteration": 4})
    lax = _pbt(num_samples=2, require_attrs=False)
    (group,) = lax.next_groups()
    lax.on_trial_add("a", group.group_id, group.configs[0])
    assert lax.on_result("a", {"training_iteration": 4}) == Decision.CONTINUE
    assert lax.next_groups() == []  # no score, so no decision (and no promotion) yet


@pytest.mark.parametrize("synch", [False, True], ids=["async", "synch"])
def test_pure_driver_runs_pbt_as_promotions_only(synch):
    # fluidsalus.testing.drive reports no checkpoints, so nobody can be cloned: every trial is promoted at
    # each perturbation point and runs to the end without restarts.
    pbt = _pbt(num_samples=6, synch=synch)
    result = drive(pbt, lambda c, i: c["lr"] * i, max_iterations=21, parallel=2)
    assert all(t.iteration == 21 and t.restarts == 0 and t.end_reason == "completed" for t in result.trials.values())
    assert pbt.is_finished() and pbt.num_perturbations == 0


# ---------------------------------------------------------------------------------------------- exploitation pays


def test_pbt_beats_the_same_population_without_exploitation():
    gains = []
    for seed in range(8):
        with_pbt = run_pbt(_pbt(seed=seed), seed=seed)
        without = run_pbt(_pbt(seed=seed, quantile_fraction=0.0), seed=seed)
        assert without.exploits == [] and with_pbt.exploits
        same_population = _pbt(seed=seed, quantile_fraction=0.0).next_groups()[0].configs
        assert _pbt(seed=seed).next_groups()[0].configs == same_population
        gains.append(with_pbt.best_final() - without.best_final())
    # A constant lr loses about 20% of the progress on this task; PBT's schedule recovers most of it.
    assert min(gains) > 1.0 and statistics.mean(gains) > 2.5, gains


def test_exploited_trials_restart_from_the_sources_checkpoint_and_run_to_the_next_point():
    run = run_pbt(_pbt(seed=1), seed=1)
    assert run.exploits
    for request in run.exploits:
        assert request.source_iteration % INTERVAL == 0  # the source's checkpoint at its perturbation point
        assert request.budget == request.source_iteration + INTERVAL
    assert all(t.iteration == ITERATIONS for t in run.trials.values())


def test_synch_mode_moves_the_whole_population_at_once():
    # Trials of different speed (time_total_s per iteration grows with lr) reach each point at different steps.
    kwargs = {"synch": True, "time_attr": "time_total_s", "perturbation_interval": 6.0}
    run = run_pbt(_pbt(seed=2, **kwargs), seed=2, iteration_time=lambda c: 1.0 + c["lr"])
    assert run.exploits

    def moved_by_step(run: PbtRun) -> dict[int, dict[str, float]]:
        by_step: dict[int, dict[str, float]] = {}
        for step, trial_id, budget, _ in run.moves:
            by_step.setdefault(step, {})[trial_id] = budget
        return by_step

    for step, moved in moved_by_step(run).items():
        assert set(moved) == run.live_at[step], f"step {step}: only part of the population moved on"
        assert len(set(moved.values())) == 1, f"step {step}: budgets differ"
    asynch = run_pbt(_pbt(seed=2, **{**kwargs, "synch": False}), seed=2, iteration_time=lambda c: 1.0 + c["lr"])
    assert any(set(moved) != asynch.live_at[step] for step, moved in moved_by_step(asynch).items())


def test_synch_mode_waits_for_every_live_trial_and_a_trial_that_ends_releases_the_others():
    pbt = _pbt(num_samples=3, synch=True)
    (group,) = pbt.next_groups()
    for index, config in enumerate(group.configs):
        pbt.on_trial_add(f"t{index}", group.group_id, config)
    for trial_id in ("t0", "t1"):
        pbt.on_result(trial_id, {"score": 1.0, "training_iteration": INTERVAL})
    assert pbt.next_groups() == []  # t2 has not reached the point yet
    pbt.on_trial_complete("t2", None, error=True)
    (promotion,) = pbt.next_groups()
    assert sorted(promotion.trial_ids) == ["t0", "t1"] and promotion.budget == 2 * INTERVAL


def test_state_dict_round_trip_continues_the_same_search():
    reference = run_pbt(_pbt(seed=5), seed=5)
    pending_at_swap = []

    def swap(step: int, searcher: PBT) -> PBT:
        if step not in (4, 9, 16):
            return searcher
        pending_at_swap.append(len(searcher.pending_exploits))
        state = json.loads(json.dumps(searcher.state_dict()))
        fresh = _pbt(seed=5)
        fresh.load_state_dict(state)
        assert fresh.state_dict() == state
        return fresh

    resumed = run_pbt(_pbt(seed=5), seed=5, on_step=swap)
    assert resumed.searcher is not reference.searcher and any(pending_at_swap), pending_at_swap
    assert resumed.searcher.exploit_log == reference.searcher.exploit_log
    assert {tid: t.progress for tid, t in resumed.trials.items()} == {
        tid: t.progress for tid, t in reference.trials.items()
    }
