"""The legacy ``tune.run`` and ``ExperimentAnalysis`` (``fluidsalus/tune/_run.py``, ``fluidsalus/tune/analysis.py``).

- ExperimentAnalysis on hand-made results (no Ray): Ray's best-trial rules (scopes, NaN and inf skipped, a single
  trial wins, a mode alone selects ``_metric``), frames, checkpoints, and the errors that name the argument.
- The mapping of tune.run's arguments: resume strings, the deprecated checkpoint arguments, names of schedulers
  and search algorithms, and refusals before anything runs.
- Real runs on the shared 2-CPU Ray: a legacy script's analysis (and one rebuilt from the folder), a failed trial
  with raise_on_failed_trial, resume="AUTO" after an interruption, a class Trainable with the deprecated
  checkpoint arguments, resources_per_trial.
"""

from __future__ import annotations

import math
import os
import warnings

import pytest
from _folders import every_file, file_times
from _trials import LazyRayTune, pretend_ray_is

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError, FluidsalusError
from fluidsalus.result import Result
from fluidsalus.tune import analysis as an
from fluidsalus.tune._run import _checkpoint_config, _resume_config, resume_flags

rt = LazyRayTune()  # imported at its first use, not by device processes
from fluidsalus import tune  # noqa: E402
from fluidsalus.testing.tune import RESUMABLE_STEPS, InterruptOnce, resumable  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# ExperimentAnalysis on hand-made results
# ---------------------------------------------------------------------------------------------------------


def _result(trial_id: str, values: list[float], config: dict | None = None, status: str = "TERMINATED",
            checkpoints: list[tuple[Checkpoint, dict]] | None = None) -> Result:
    history = [{"trial_id": trial_id, "training_iteration": i + 1, "loss": v, "info": {"acc": -v}}
               for i, v in enumerate(values)]
    metrics = dict(history[-1], config=config or {}) if history else None
    return Result(metrics=metrics, checkpoint=checkpoints[-1][0] if checkpoints else None, error=None,
                  path=f"/exp/{trial_id}", best_checkpoints=checkpoints or [], trial_id=trial_id, status=status,
                  _history=history)


def _analysis(*results: Result, metric: str | None = "loss", mode: str | None = "min") -> an.ExperimentAnalysis:
    return an.ExperimentAnalysis("/exp", trials=[an.Trial(r) for r in results], default_metric=metric,
                                 default_mode=mode)


def test_metric_analysis_has_rays_entries_for_every_numeric_metric() -> None:
    trial = an.Trial(_result("a", [float(v) for v in range(1, 13)]))
    loss = trial.metric_analysis["loss"]
    assert loss == {"max": 12.0, "min": 1.0, "avg": 6.5, "last": 12.0, "last-5-avg": 10.0, "last-10-avg": 7.5}
    assert trial.metric_analysis["info/acc"]["min"] == -12.0  # nested keys flattened with "/"
    assert "trial_id" not in trial.metric_analysis and "config" not in trial.metric_analysis


def test_best_trial_follows_rays_rules_for_each_scope() -> None:
    # a: last 1.0, avg 3.0, min 1.0;  b: last 2.0, avg 2.0, min 2.0;  c: last 4.0, avg 2.5, min 0.5
    a, b, c = _result("a", [5.0, 1.0], {"x": 1}), _result("b", [2.0, 2.0], {"x": 2}), _result("c", [0.5, 4.0], {"x": 3})
    analysis = _analysis(a, b, c)
    assert analysis.best_trial.trial_id == "a" and analysis.best_config == {"x": 1}
    assert analysis.best_result["loss"] == 1.0
    assert analysis.get_best_trial(scope="avg").trial_id == "b"
    assert analysis.get_best_trial(scope="all").trial_id == "c"  # each trial's best value in mode
    assert analysis.get_best_trial("loss", "max").trial_id == "c"
    assert analysis.get_best_config("info/acc", "max") == {"x": 1}
    assert analysis.get_best_trial("missing") is None  # with a warning, as in Ray
    assert analysis.results == {"a": a.metrics, "b": b.metrics, "c": c.metrics}
    assert analysis.get_all_configs() == {"a": {"x": 1}, "b": {"x": 2}, "c": {"x": 3}}
    assert analysis.get_all_configs(prefix=True)["c"] == {"config/x": 3}


def test_nan_and_inf_scores_are_skipped_unless_asked() -> None:
    analysis = _analysis(_result("a", [math.nan]), _result("b", [3.0]), _result("c", [-math.inf]))
    assert analysis.get_best_trial().trial_id == "b"
    assert _analysis(_result("b", [3.0]), _result("c", [-math.inf])).get_best_trial(
        filter_nan_and_inf=False).trial_id == "c"


def test_one_trial_is_the_best_for_any_metric_and_a_mode_alone_selects_the_anonymous_metric() -> None:
    only = _analysis(_result("a", [1.0]), metric=None, mode=None)
    assert only.get_best_trial("anything", "max").trial_id == "a"
    assert _analysis(_result("a", [1.0]), metric=None, mode="max").default_metric == an.DEFAULT_METRIC


def test_analysis_errors_name_what_is_missing() -> None:
    two = _analysis(_result("a", [1.0]), _result("b", [2.0]), metric=None, mode=None)
    with pytest.raises(ConfigError, match="best_config.*metric and mode.*tune.run"):
        _ = two.best_config
    with pytest.raises(ConfigError, match="no metric has been passed"):
        two.get_best_trial(mode="min")
    with pytest.raises(ConfigError, match="no mode has been passed"):
        two.get_best_trial("loss")
    with pytest.raises(ConfigError, match="scope has to be one of"):
        two.get_best_trial("loss", "min", scope="best")
    with pytest.raises(ConfigError, match=r"mode has to be one of \['min', 'max'\]"):
        two.get_best_trial("loss", "lowest")
    with pytest.raises(ConfigError, match="default_mode"):
        an.ExperimentAnalysis("/exp", trials=[], default_mode="up")
    with pytest.raises(ConfigError, match="a mode needs a metric"):
        two.dataframe(mode="min")
    with pytest.raises(ConfigError, match="experiment.db not found"):
        an.ExperimentAnalysis("/no/such/experiment")
    with pytest.raises(ConfigError, match="storage_filesystem"):
        an.ExperimentAnalysis("/exp", trials=[], storage_filesystem=object())


def test_a_folder_ray_tune_wrote_is_named_as_such(tmp_path) -> None:
    """ExperimentAnalysis(path) of a folder Ray Tune wrote said only that experiment.db is missing; its message, and
    Tuner.restore's, lacked their final period (h134's F8)."""
    (tmp_path / "experiment_state-2026-11-29_01-31-01.json").write_text("{}")
    with pytest.raises(ConfigError, match="experiment.db not found.*Ray Tune wrote this folder .*read this one with "
                                          r"Ray's ExperimentAnalysis\.$"):
        an.ExperimentAnalysis(str(tmp_path))
    with pytest.raises(ConfigError, match=r"not found\); pass the folder <storage_path>/<name> of a run$"):
        an.ExperimentAnalysis(str(tmp_path / "nothing"))
    # Tuner.restore of it says so too (it said only that it is not restorable: a helper's resume check)
    (tmp_path / "tuner.pkl").write_bytes(b"Ray's")
    with pytest.raises(FileNotFoundError, match="Ray Tune wrote this folder .*continue this one with Ray's "
                                                r"Tuner\.restore\.$"):
        tune.Tuner.restore(str(tmp_path), lambda config: None)
    # So does tune.run(resume=...) of it, before Ray starts (it failed in fluidsalus.run: "exists and is not an empty
    # folder or an experiment; choose another name")
    with pytest.raises(ConfigError, match=r"resume='AUTO': Ray Tune wrote .* continue this one with Ray's "
                                          r"tune\.run\(\.\.\., resume=True\), or give this run another name$"):
        tune.run(_noop, name=tmp_path.name, storage_path=str(tmp_path.parent), resume="AUTO")


def test_frames_take_the_last_or_the_best_row_per_trial() -> None:
    analysis = _analysis(_result("a", [3.0, 1.0, 2.0], {"x": 1, "opt": {"lr": 0.1}}), _result("b", [4.0], {"x": 2}),
                         _result("c", [], {"x": 3}, status="PENDING"))
    last = analysis.dataframe()
    assert list(last["trial_id"]) == ["a", "b"]  # a trial that reported nothing has no row
    assert list(last["loss"]) == [2.0, 4.0] and list(last["config/opt/lr"].fillna(0)) == [0.1, 0]
    assert list(last["logdir"]) == ["/exp/a", "/exp/b"] and list(last["info/acc"]) == [-2.0, -4.0]
    best = analysis.dataframe("loss", "min")
    assert list(best["loss"]) == [1.0, 4.0] and list(best["training_iteration"]) == [2, 1]
    assert list(analysis.dataframe("loss", "max")["loss"]) == [3.0, 4.0]
    assert list(analysis.dataframe("loss")["loss"]) == [2.0, 4.0]  # no mode: the last row
    frame = analysis.results_df
    assert frame.index.name == "trial_id" and frame.loc["a", "loss"] == 2.0 and frame.loc["b", "config/x"] == 2
    assert _analysis(_result("c", [], {"x": 3}, status="PENDING")).dataframe().columns.empty  # none reported
    assert list(analysis.trial_dataframes["a"]["loss"]) == [3.0, 1.0, 2.0] and analysis.trial_dataframes["c"].empty
    assert analysis.best_result_df.index.tolist() == ["a"] and list(analysis.best_dataframe["loss"]) == [3.0, 1.0, 2.0]


def test_frames_have_rays_column_order() -> None:
    """Nested keys stayed where the result had them (``loss, info/acc, done``); Ray's frames put them after the
    plain ones (a helper's side-by-side comparison)."""
    history = [{"trial_id": "a", "training_iteration": i, "loss": 1.0, "info": {"acc": 0.5}, "done": False}
               for i in (1, 2)]
    result = Result(metrics=dict(history[-1], config={"x": 1}), checkpoint=None, error=None, path="/exp/a",
                    best_checkpoints=[], trial_id="a", status="TERMINATED", _history=history)
    analysis = _analysis(result)
    plain = ["trial_id", "training_iteration", "loss", "done"]
    assert list(analysis.dataframe().columns) == [*plain, "info/acc", "config/x", "logdir"]
    assert list(analysis.results_df.columns) == [*plain[1:], "info/acc", "config/x"]
    assert list(analysis.best_result_df.columns) == [*plain[1:], "info/acc", "config/x"]


def test_checkpoints_best_by_metric_and_last_by_iteration(tmp_path) -> None:
    ckpts = []
    for i, loss in ((1, 5.0), (2, 1.0), (3, 3.0)):
        folder = tmp_path / f"checkpoint_{i:06d}"
        folder.mkdir()
        ckpts.append((Checkpoint(str(folder)), {"training_iteration": i, "loss": loss}))
    trial = _result("a", [5.0, 1.0, 3.0], checkpoints=ckpts)
    analysis = _analysis(trial, _result("b", [9.0]))
    best = analysis.trials[0]
    assert analysis.best_checkpoint.path == ckpts[1][0].path  # lowest loss
    assert analysis.get_best_checkpoint(best, "loss", "max").path == ckpts[0][0].path
    assert analysis.get_best_checkpoint("/exp/a", "training_iteration", "max").path == ckpts[2][0].path
    assert analysis.get_last_checkpoint(best).path == ckpts[2][0].path
    assert analysis.get_last_checkpoint().path == ckpts[2][0].path  # the trial with the most iterations: a (3)
    assert analysis.get_best_checkpoint(analysis.trials[1]) is None  # kept none
    # A metric its checkpoints' results lack raises as Ray's does (it gave None with "no checkpoints" logged)
    with pytest.raises(KeyError, match="metric 'los' is not in the result of trial .*; it has: loss, "
                                       "training_iteration"):
        analysis.get_best_checkpoint(best, "los", "min")
    # one it reported as None is there: no candidate, no KeyError
    none_valued = _analysis(_result("n", [1.0], checkpoints=[(ckpts[0][0], {"training_iteration": 1, "loss": None})]))
    assert none_valued.get_best_checkpoint(none_valued.trials[0], "loss", "min") is None
    assert best.checkpoint.path == ckpts[2][0].path
    with pytest.raises(ConfigError, match="neither a Trial of this analysis"):
        analysis.get_best_checkpoint("/exp/zzz")


def test_analysis_has_every_public_name_of_rays() -> None:
    theirs = {name for name in dir(rt.ExperimentAnalysis) if not name.startswith("_")}
    assert theirs <= {name for name in dir(tune.ExperimentAnalysis) if not name.startswith("_")}


# ---------------------------------------------------------------------------------------------------------
# tune.run's arguments
# ---------------------------------------------------------------------------------------------------------


def test_resume_values_map_onto_restore_flags() -> None:
    plain = {"resume_unfinished": True, "resume_errored": False, "restart_errored": False}
    assert resume_flags(None) is None and resume_flags(False) is None
    assert resume_flags(True) == plain and resume_flags("AUTO") == plain
    assert resume_flags("AUTO+ERRORED") == {**plain, "resume_errored": True}
    assert resume_flags("AUTO+RESTART_ERRORED") == {**plain, "restart_errored": True}
    assert resume_flags("AUTO+ERRORED_ONLY") == {**plain, "resume_unfinished": False, "resume_errored": True}
    assert resume_flags("AUTO+RESTART_ERRORED_ONLY") == {**plain, "resume_unfinished": False,
                                                         "restart_errored": True}
    for bad, message in (("LOCAL", "deprecated"), ("ERRORED_ONLY", "deprecated"), ("auto", "resume must be"),
                         ("AUTO+ERRORS", "invalid setting 'ERRORS'"), (1, "resume must be")):
        with pytest.raises(ConfigError, match=message):
            resume_flags(bad)


def test_resume_configs_map_onto_restore_flags_and_rays_is_read_too() -> None:
    assert tune.ResumeConfig().restore_flags() == resume_flags("AUTO")
    assert tune.ResumeConfig(errored="resume").restore_flags() == resume_flags("AUTO+ERRORED")
    assert tune.ResumeConfig(errored=tune.ResumeConfig.ResumeType.RESTART).restore_flags() == resume_flags(
        "AUTO+RESTART_ERRORED")
    assert tune.ResumeConfig(unfinished="skip", errored="resume").restore_flags() == resume_flags(
        "AUTO+ERRORED_ONLY")
    theirs = rt.ResumeConfig(unfinished=rt.ResumeConfig.ResumeType.SKIP, errored=rt.ResumeConfig.ResumeType.RESTART)
    assert _resume_config(theirs).restore_flags() == resume_flags("AUTO+RESTART_ERRORED_ONLY")
    with pytest.raises(ConfigError, match=r"ResumeConfig: errored must be one of \['resume', 'restart', 'skip'\]"):
        tune.ResumeConfig(errored="retry")


def test_sync_config_has_rays_defaults_and_checks() -> None:
    config = tune.SyncConfig()
    ray_config = rt.SyncConfig()
    assert (config.sync_period, config.sync_timeout, config.sync_artifacts, config.sync_artifacts_on_checkpoint) == (
        ray_config.sync_period, ray_config.sync_timeout, ray_config.sync_artifacts,
        ray_config.sync_artifacts_on_checkpoint)
    with pytest.raises(ConfigError, match="SyncConfig: sync_period must be a number of seconds >= 0"):
        tune.SyncConfig(sync_period=-1)
    with pytest.raises(ConfigError, match="SyncConfig: sync_artifacts must be True or False"):
        tune.SyncConfig(sync_artifacts="yes")
    assert "sync_config" in tune.RunConfig(sync_config=config).ignored()



def test_a_verbose_above_3_is_taken_and_a_negative_one_refused_as_rays_default_output(monkeypatch) -> None:
    """Ray 2.60's default output engine takes ``tune.run(verbose=5)`` and ``RunConfig(verbose=5)`` (its
    ``get_air_verbosity`` caps a verbosity at 2) and raises a ``ValueError`` for a negative one; only its legacy output
    (``RAY_AIR_NEW_OUTPUT=0``, which fluidsalus does not read) raises for 5 too (a side-by-side run,
    /work/scratch_h220/verbose_check.py). fluidsalus takes it as its highest verbosity and refuses a negative one
    with a ``ConfigError``, a ``ValueError`` too. (A pin of the parity found: no change was needed.)"""
    from ray.tune.experimental.output import AirVerbosity, get_air_verbosity

    monkeypatch.delenv("RAY_AIR_NEW_OUTPUT", raising=False)
    assert get_air_verbosity(5) == AirVerbosity.VERBOSE
    assert tune.RunConfig(verbose=5).verbosity() == 3
    with pytest.raises(ValueError, match="-1 is not a valid AirVerbosity"):
        get_air_verbosity(-1)
    with pytest.raises(ValueError, match="RunConfig: verbose must be None, an int >= 0"):
        tune.RunConfig(verbose=-1)

def test_deprecated_checkpoint_arguments_fill_the_checkpoint_config() -> None:
    assert _checkpoint_config(None, None, None, 0, False) is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = _checkpoint_config(tune.CheckpointConfig(num_to_keep=5), 2, "min-loss", 3, True)
    assert [str(w.message).split(" is ")[0] for w in caught if w.category is DeprecationWarning] == [
        "keep_checkpoints_num", "checkpoint_score_attr",
        "using min- and max- prefixes to specify checkpoint score order",  # (Ray's third warning for "min-")
        "checkpoint_freq", "checkpoint_at_end"]
    assert (config.num_to_keep, config.checkpoint_score_attribute, config.checkpoint_score_order,
            config.checkpoint_frequency, config.checkpoint_at_end) == (2, "loss", "min", 3, True)
    with pytest.warns(DeprecationWarning):
        config = _checkpoint_config(None, None, "acc", 0, False)
    assert (config.checkpoint_score_attribute, config.checkpoint_score_order, config.num_to_keep) == ("acc", "max",
                                                                                                       None)


def test_schedulers_and_search_algorithms_by_rays_names() -> None:
    assert isinstance(tune.create_scheduler("ASYNC_HYPERBAND", max_t=9, unknown=1), tune.schedulers.ASHAScheduler)
    assert tune.create_scheduler("async_hyperband", max_t=9).describe()["max_t"] == 9
    assert type(tune.create_scheduler("hb_bohb")).__name__ == "HyperBandForBOHB"
    assert type(tune.create_searcher("random")).__name__ == "BasicVariantGenerator"
    assert tune.create_searcher("optuna", metric="m", mode="min").metric == "m"
    assert type(tune.create_scheduler("pb2", hyperparam_bounds={"lr": [0.1, 0.2]})).__name__ == "PB2"
    assert type(tune.create_scheduler("resource_changing")).__name__ == "ResourceChangingScheduler"
    with pytest.raises(ConfigError, match="policy_file '/nowhere/pbt_policy_x.txt' not found"):
        tune.create_scheduler("pbt_replay", policy_file="/nowhere/pbt_policy_x.txt")  # known now: it reads the file
    with pytest.raises(ConfigError, match=r"scheduler must be one of \['fifo'"):
        tune.create_scheduler("asha")  # not one of Ray's names either
    assert type(tune.create_searcher("ax", metric="m", mode="min")).__name__ == "AxSearch"
    assert type(tune.create_searcher("hebo", metric="m", mode="min")).__name__ == "HEBOSearch"


def _noop(config):
    tune.report({"score": 1.0})


@pytest.mark.parametrize("kwargs, message", [
    ({"run_or_experiment": "PPO"}, "Unknown trainable: 'PPO'. Registered: \\["),
    ({"run_or_experiment": [_noop, _noop]}, "use tune.run_experiments"),
    ({"restore": "/some/checkpoint"}, "restore is not supported"),
    ({"resume_config": object()}, "resume_config must be None or a ResumeConfig"),
    ({"resume_config": tune.ResumeConfig(unfinished="restart")}, "unfinished='restart' is not supported"),
    ({"resume_config": tune.ResumeConfig(finished="resume")}, "finished='resume' is not supported"),
    ({"storage_filesystem": object()}, "storage_filesystem is not supported"),
    ({"chdir_to_trial_dir": False}, "chdir_to_trial_dir is deprecated"),
    ({"local_dir": "/tmp/x"}, "local_dir is deprecated"),
    ({"mode": "maximize"}, "mode must be one of"),
    ({"config": [1, 2]}, "config must be a dict"),
    # (list(5): a bare TypeError, as Ray's; h83's N3)
    ({"callbacks": 5}, r"^tune.run: callbacks must be None or a list of callbacks \(got 5\)$"),
    ({"fail_fast": True, "max_failures": 2}, "max_failures must be 0 if fail_fast"),
    ({"resume": "PROMPT"}, "deprecated"),
    ({"scheduler": tune.schedulers.ASHAScheduler(metric="a", mode="max"), "metric": "b", "mode": "min"},
     "metric"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_arguments_are_refused_before_anything_runs(kwargs, message, tmp_path) -> None:
    kwargs = {"run_or_experiment": _noop, **kwargs}
    with pytest.raises(ConfigError, match=message):
        tune.run(kwargs.pop("run_or_experiment"), storage_path=str(tmp_path), verbose=0, **kwargs)
    assert not os.path.exists(tmp_path) or not os.listdir(tmp_path)  # nothing written


# ---------------------------------------------------------------------------------------------------------
# Experiment specs
# ---------------------------------------------------------------------------------------------------------


def test_an_experiment_from_a_spec_dict_has_rays_fields() -> None:
    spec = {"run": _noop, "config": {"x": 1}, "env": "CartPole", "stop": {"training_iteration": 2},
            "num_samples": 3, "storage_path": "/results", "checkpoint_config": {"num_to_keep": 2}}
    experiment = tune.Experiment.from_json("exp", spec)
    assert experiment.name == "exp" and experiment.run_identifier == "_noop"
    assert experiment.spec["config"] == {"x": 1, "env": "CartPole"}  # Ray moves "env" into the config
    assert experiment.public_spec == {"stop": {"training_iteration": 2}, "num_samples": 3, "time_budget_s": None}
    assert experiment.checkpoint_config.num_to_keep == 2 and experiment.stopper is None
    assert experiment.path == "/results/exp"
    assert "env" in spec and spec["config"] == {"x": 1}  # the caller's dicts are left as they were
    arguments = experiment.run_arguments()
    assert arguments["run_or_experiment"] is _noop and arguments["name"] == "exp" and arguments["num_samples"] == 3
    assert tune.Experiment("e", _noop, stop=lambda tid, r: True).stopper is not None


@pytest.mark.parametrize("build, message", [
    (lambda: tune.Experiment.from_json("e", {"config": {}}), "has no trainable"),
    (lambda: tune.Experiment.from_json("e", {"run": _noop, "stp": {}}), r"unknown keys \['stp'\].*'stop'"),
    (lambda: tune.Experiment("e", "PPO"), "Unknown trainable: 'PPO'"),
    (lambda: tune.Experiment("e", _noop, config=[1]), "config must be a dict"),
    (lambda: tune.Experiment("e", _noop, checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True)),
     "checkpoint_at_end cannot be used with a function trainable"),
    (lambda: tune.Experiment("e", _noop, restore="/x"), "restore is not supported"),
    (lambda: tune.Experiment("e", _noop, local_dir="/x"), "local_dir is no longer supported"),
    (lambda: tune.run_experiments(["not an experiment"]), "must be an Experiment"),
    (lambda: tune.run_experiments(tune.Experiment("e", _noop), _remote=True), "_remote"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_experiment_specs_are_refused(build, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


# ---------------------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------------------


def _scored(config):
    for step in range(1, 3):
        tune.report({"score": config["x"] * step})


def test_run_experiments_runs_each_spec_and_returns_all_trials(ray_cluster, storage: str) -> None:
    tune.register_trainable("scored_by_name", _scored)
    specs = {
        "first": {"run": _scored, "config": {"x": tune.grid_search([1, 2])}, "storage_path": storage},
        "second": {"run": _scored, "config": {"x": tune.grid_search([5])}, "storage_path": storage,
                   "stop": {"training_iteration": 1}},
    }
    trials = tune.run_experiments(specs, verbose=0, concurrent=False)
    assert [t.config["x"] for t in trials] == [1, 2, 5]
    assert [t.last_result["training_iteration"] for t in trials] == [2, 2, 1]  # each spec's own stop
    assert all(t.status == "TERMINATED" for t in trials)
    assert sorted(os.listdir(storage)) == ["first", "second"]
    with pytest.warns(UserWarning, match="one after another"):
        again = tune.run_experiments([tune.Experiment("third", _scored, config={"x": 1}, storage_path=storage),
                                      {"fourth": {"run": "scored_by_name", "storage_path": storage,
                                                  "config": {"x": 2}}}],
                                     verbose=0)
    assert [t.config["x"] for t in again] == [1, 2]


def test_registered_trainables_are_found_by_name() -> None:
    tune.register_trainable("noop_by_name", _noop)
    tune.register_trainable("counter_by_name", tune.with_resources(_Counter, {"cpu": 1}))
    assert tune.registry.get_trainable_cls("noop_by_name") is _noop
    assert tune.Tuner("noop_by_name")._trainable is _noop
    experiment = tune.Experiment("e", "counter_by_name")
    assert experiment.run_identifier == "counter_by_name" and experiment.spec["run"].base is _Counter
    assert {"noop_by_name", "counter_by_name"} <= set(tune.registry.registered_names())
    with pytest.raises(ConfigError, match="Unknown trainable: 'nope'. Registered: .*'noop_by_name'"):
        tune.Tuner("nope")
    with pytest.raises(ConfigError, match="register_trainable: name must be a non-empty str"):
        tune.register_trainable("", _noop)
    with pytest.raises(ConfigError, match="register_trainable: trainable must be a function"):
        tune.register_trainable("bad", 3)


def test_tune_run_takes_an_experiments_own_arguments(ray_cluster, storage: str) -> None:
    experiment = tune.Experiment("from_spec", _scored, config={"x": tune.grid_search([1, 4])}, storage_path=storage,
                                 stop={"training_iteration": 1})
    analysis = tune.run(experiment, metric="score", mode="max", verbose=0, config={"x": 100}, name="ignored")
    assert analysis.experiment_path == os.path.join(storage, "from_spec")
    assert analysis.best_config == {"x": 4} and analysis.best_result["score"] == 4  # stopped after one step
    # The name is taken now: a new folder, as above, and tune.run's way to continue the old one (it said Tuner's)
    with pytest.warns(UserWarning, match=r"already exists.*Use tune.run\(..., resume=True\) to continue"):
        again = tune.run([experiment], metric="score", mode="max", verbose=0)  # a list of one Experiment
    assert len(again.trials) == 2 and os.path.basename(again.experiment_path).startswith("from_spec_")


# ---------------------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------------------


def _train(config):
    for step in range(1, 4):
        folder = os.path.join(tune.get_context().get_trial_dir(), f"ckpt_{step}")
        os.makedirs(folder, exist_ok=True)
        score = config["x"] * step
        tune.report({"score": score, "step": step}, checkpoint=tune.Checkpoint.from_directory(folder))


def test_a_legacy_script_gets_rays_analysis(ray_cluster, storage: str) -> None:
    analysis = tune.run(_train, config={"x": tune.grid_search([1, 3, 2])}, metric="score", mode="max",
                        name="legacy", storage_path=storage, verbose=0,
                        checkpoint_config=tune.CheckpointConfig(num_to_keep=2))
    assert isinstance(analysis, tune.ExperimentAnalysis)
    assert analysis.experiment_path == os.path.join(storage, "legacy")
    assert analysis.best_config == {"x": 3} and analysis.best_result["score"] == 9
    assert sorted(t.config["x"] for t in analysis.trials) == [1, 2, 3]
    assert all(t.status == "TERMINATED" and t.last_result["step"] == 3 for t in analysis.trials)
    best = analysis.best_trial
    assert os.path.dirname(best.path) == os.path.join(storage, "legacy") and os.path.isdir(best.path)
    assert os.path.basename(best.path).startswith(f"_train_{best.trial_id}_")  # Ray's default folder name
    assert best.metric_analysis["score"]["avg"] == 6
    assert analysis.best_checkpoint.path.startswith(best.path)  # the kept checkpoint of step 3 (score 9)
    assert len(best.checkpoints) == 2  # num_to_keep
    assert sorted(analysis.results_df["score"]) == [3, 6, 9]
    assert analysis.get_best_config("score", "min") == {"x": 1}
    again = tune.ExperimentAnalysis(analysis.experiment_path, default_metric="score", default_mode="max")
    assert again.best_config == {"x": 3} and len(again.trials) == 3
    assert again.best_checkpoint.path == analysis.best_checkpoint.path
    # Ray's names: a trial is "<trainable>_<trial_id>"; its frame has every result with its config/ columns.
    assert str(best) == repr(best) == best.trial_name == f"_train_{best.trial_id}"
    assert best.trainable_name == "_train" and best.num_failures == 0 and best.is_finished()
    assert best.error_file is None
    # (Ray's Trial has these too; a script that called them got an AttributeError)
    assert best.has_checkpoint() and best.has_reported_at_least_once and best.experiment_dir_name == "legacy"
    frame = again.trial_dataframes[best.trial_id]
    assert list(frame["step"]) == [1, 2, 3] and list(frame["config/x"]) == [3, 3, 3]


def _sparse(config):
    """Reports ``extra`` at iterations 1 and 3 only, ``only2`` at iteration 2 only."""
    for i in range(1, 4):
        metrics = {"score": config["a"] * i + config["b"]}
        if i in (1, 3):
            metrics["extra"] = i
        if i == 2:
            metrics["only2"] = 7
        tune.report(metrics)


def test_the_analysis_and_the_grid_read_back_as_rays(ray_cluster, storage: str) -> None:
    """Side by side with Ray Tune 2.60 (the same sweep and reads: a helper's comparison): the analysis's trials
    have Ray's ``evaluated_params`` (the drawn values only, by flattened path: not the constants) and
    ``relative_logdir``, from ``tune.run``, from the folder and from ``ResultGrid._experiment_analysis`` (they had
    neither: AttributeError); each trial's row in ``dataframe()``/``get_dataframe()`` is the row of its whole frame,
    so a metric reported on some results only is a float and one reported before the last result has its column
    (NaN), as Ray's (``extra`` was int64, ``only2`` had no column)."""
    space = {"a": tune.uniform(0, 1), "b": tune.grid_search([1, 2]), "c": 3, "nested": {"d": tune.choice(["x", "y"]),
                                                                                       "e": 5}}
    analysis = tune.run(_sparse, config=space, metric="score", mode="max", storage_path=storage, name="sparse",
                        verbose=0)
    grid = tune.Tuner(_sparse, param_space=space, tune_config=tune.TuneConfig(metric="score", mode="max"),
                      run_config=tune.RunConfig(storage_path=storage, name="sparse_tuner", verbose=0)).fit()
    folder = tune.ExperimentAnalysis(analysis.experiment_path)
    for each in (analysis, folder, grid._experiment_analysis, tune.ExperimentAnalysis(grid.experiment_path)):
        assert len(each.trials) == 2
        for trial in each.trials:
            config = trial.config
            assert trial.evaluated_params == {"a": config["a"], "b": config["b"], "nested/d": config["nested"]["d"]}
            assert trial.relative_logdir == os.path.basename(trial.path)
            assert trial.relative_logdir.startswith("_sparse_")
            with pytest.raises(DeprecationWarning, match="Use `local_path` instead of `logdir`"):  # Ray's (h217)
                trial.logdir  # noqa: B018
        for frame in (each.dataframe(), each.dataframe("score", "max"), each.dataframe("extra", "min")):
            assert str(frame["extra"].dtype) == "float64" and str(frame["only2"].dtype) == "float64"
            assert frame["only2"].isna().all() and list(frame.columns)[-2:] == ["only2", "logdir"]
        assert list(each.dataframe("extra", "min")["training_iteration"]) == [1, 1]
        assert list(each.dataframe()["extra"]) == [3.0, 3.0]
    kept = grid._experiment_analysis
    assert kept.default_metric == "score" and grid._experiment_analysis is kept
    assert str(grid.get_dataframe()["extra"].dtype) == "float64" and "only2" in grid.get_dataframe()
    # The grid built from an analysis keeps it, as Ray's
    assert tune.ResultGrid(analysis)._experiment_analysis is analysis


def _doubled_b(spec):
    return spec.config.b * 2


def _one_report(config):
    tune.report({"score": 1.0})


def test_evaluated_params_read_back_hold_the_draws_inside_grid_values_and_categories_in_rays_order(
        ray_cluster, storage: str) -> None:
    """Side by side with Ray Tune 2.60 (a helper's script of the same space under Ray's Tuner): a trial's
    ``evaluated_params`` hold the draws inside a grid's value and a choice's category (``g/lr``, ``c/k``), in Ray's
    order (the domains in the space's order, then the grids by path, then the nested draws), in the callbacks'
    trial views, in the grid's analysis, in ``ExperimentAnalysis`` of the folder, and in that of a folder
    ``fluidsalus.run`` wrote (no ``tune_params.json``). They were ``{"g": {...}}`` and ``{"c": {...}}`` alone,
    with the grids first in the space's order."""
    import fluidsalus

    space = {"z": tune.uniform(0, 1), "b": tune.grid_search([1, 2]), "a": tune.grid_search(["x"]),
             "g": tune.grid_search([{"lr": tune.uniform(0, 1)}, {"lr": 0.1}]), "k": 7,
             "c": tune.choice([{"k": tune.randint(1, 5)}])}

    def rays(config):  # Ray 2.60's Trial.evaluated_params of this space, in its order
        drawn = config["g"]["lr"] != 0.1
        return [("z", config["z"]), ("c", config["c"]), ("a", "x"), ("b", config["b"]), ("g", config["g"]),
                *([("g/lr", config["g"]["lr"])] if drawn else []), ("c/k", config["c"]["k"])]

    started = {}

    class Starts(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            started[trial.trial_id] = (dict(trial.evaluated_params), trial.config)

    grid = tune.Tuner(_one_report, param_space=space, run_config=tune.RunConfig(
        storage_path=storage, name="nested", verbose=0, callbacks=[Starts()])).fit()
    assert len(started) == 4
    for evaluated, config in started.values():
        assert list(evaluated.items()) == rays(config)
    for each in (grid._experiment_analysis, tune.ExperimentAnalysis(grid.experiment_path)):
        for trial in each.trials:
            assert list(trial.evaluated_params.items()) == rays(trial.config)
    fluidsalus.run(_one_report, space, name="nested_by_run", storage_path=storage, verbose=0)
    trials = tune.ExperimentAnalysis(os.path.join(storage, "nested_by_run")).trials
    assert len(trials) == 4
    for trial in trials:
        assert list(trial.evaluated_params.items()) == rays(trial.config)


def test_trials_read_back_have_rays_run_settings_and_evaluated_params_without_the_params_file(
        ray_cluster, storage: str) -> None:
    """Side by side with Ray Tune 2.60 (a helper's script of the same runs under Ray): a trial of
    ``ExperimentAnalysis(path)`` has Ray's ``custom_trial_name`` (``trial_name_creator``'s name, else None),
    ``max_failures`` and ``stopping_criterion`` (the run's ``stop`` dict; ``{}`` for a function), which were
    AttributeErrors. A folder without ``tune_params.json`` (``fluidsalus.run``'s, an older fluidsalus's) gave
    ``evaluated_params == {}``; they are now the values at the stored space's grid searches and domains, Ray's value
    (not the flattened config: Ray leaves the constants and a ``sample_from``'s value out), a domain in a list and
    one under a key holding ``/`` too (they were left out). A ``stop`` dict holding a NumPy number is Ray's
    ``stopping_criterion`` (``{}``: its JSON write failed)."""
    import numpy as np

    import fluidsalus

    space = {"a": tune.uniform(0, 1), "b": tune.grid_search([1, 2]), "c": 3,
             "nested": {"d": tune.choice(["x", "y"]), "e": 5}, "f": tune.sample_from(_doubled_b),
             "lst": [tune.uniform(0, 1), 4], "p/q": {"r": tune.randint(10, 20)}}

    def rays(config):
        return {"a": config["a"], "b": config["b"], "nested/d": config["nested"]["d"], "lst/0": config["lst"][0],
                "p/q/r": config["p/q"]["r"]}

    grid = tune.Tuner(_sparse, param_space=space,
                      tune_config=tune.TuneConfig(trial_name_creator=lambda t: f"named_{t.trial_id}"),
                      run_config=tune.RunConfig(storage_path=storage, name="settings", verbose=0,
                                                stop={"training_iteration": np.int64(10)},
                                                failure_config=tune.FailureConfig(max_failures=2))).fit()
    for each in (grid._experiment_analysis, tune.ExperimentAnalysis(grid.experiment_path)):
        for trial in each.trials:
            assert trial.custom_trial_name == f"named_{trial.trial_id}" and trial.max_failures == 2
            assert trial.stopping_criterion == {"training_iteration": 10}
            assert trial.evaluated_params == rays(trial.config)
    os.remove(os.path.join(grid.experiment_path, "tune_params.json"))  # as an older fluidsalus left the folder
    for trial in tune.ExperimentAnalysis(grid.experiment_path).trials:
        assert trial.evaluated_params == rays(trial.config)

    plain = tune.run(_sparse, config=space, stop=lambda trial_id, result: False, storage_path=storage,
                     name="plain", verbose=0)
    for trial in plain.trials:
        assert (trial.custom_trial_name, trial.stopping_criterion, trial.max_failures) == (None, {}, 0)

    fluidsalus.run(_sparse, space, name="by_run", storage_path=storage, verbose=0, stop={"training_iteration": 10})
    trials = tune.ExperimentAnalysis(os.path.join(storage, "by_run")).trials
    assert len(trials) == 2
    for trial in trials:
        assert trial.evaluated_params == rays(trial.config) and trial.stopping_criterion == {"training_iteration": 10}


def _fails_for_two(config):
    if config["x"] == 2:
        raise RuntimeError("x is 2")
    tune.report({"score": config["x"]})


def test_a_failed_trial_raises_after_the_run_unless_told_otherwise(ray_cluster, storage: str) -> None:
    space = {"x": tune.grid_search([1, 2])}
    with pytest.raises(FluidsalusError, match="Trials did not complete") as caught:
        tune.run(_fails_for_two, config=space, storage_path=storage, name="fails", verbose=0)
    assert isinstance(caught.value, tune.TuneError)
    # As Ray's TuneError("Trials did not complete", incomplete_trials): scripts read the trials from args[1] (the
    # message named them by id only, and held no trials: a helper's side-by-side run)
    (trial,) = caught.value.args[1]
    assert trial.config == {"x": 2} and trial.status == "ERROR"
    assert f"Trials did not complete: {trial} (ERROR: RuntimeError: x is 2)" == caught.value.args[0]
    analysis = tune.run(_fails_for_two, config=space, storage_path=storage, name="fails_ok", verbose=0,
                        raise_on_failed_trial=False, metric="score", mode="max")
    statuses = sorted((t.config["x"], t.status) for t in analysis.trials)
    assert statuses == [(1, "TERMINATED"), (2, "ERROR")]
    failed = next(t for t in analysis.trials if t.status == "ERROR")
    assert "x is 2" in str(failed.error)
    assert failed.num_failures == 1 and failed.is_finished() and "x is 2" in open(failed.error_file).read()
    assert failed.get_error() == open(failed.error_file).read() and "x is 2" in failed.get_error()  # (Ray's text)
    assert next(t for t in analysis.trials if t.status == "TERMINATED").get_error() is None
    assert not failed.has_checkpoint() and not failed.has_reported_at_least_once
    assert analysis.best_config == {"x": 1}


def _fails_until_fixed(config):
    if config["x"] == 2 and not os.path.exists(config["fixed"]):
        raise RuntimeError("x is 2 and not fixed yet")
    tune.report({"score": config["x"]})


def test_a_resume_config_restarts_the_errored_trial_and_skips_the_finished_one(ray_cluster, storage: str,
                                                                               tmp_path) -> None:
    fixed = tmp_path / "fixed"
    kwargs = {"config": {"x": tune.grid_search([1, 2]), "fixed": str(fixed)}, "storage_path": storage,
              "name": "fix_me", "verbose": 0, "raise_on_failed_trial": False}
    first = tune.run(_fails_until_fixed, **kwargs)
    assert sorted(t.status for t in first.trials) == ["ERROR", "TERMINATED"]
    fixed.touch()
    again = tune.run(_fails_until_fixed, resume_config=tune.ResumeConfig(errored="restart"), **kwargs)
    assert sorted(t.trial_id for t in again.trials) == sorted(t.trial_id for t in first.trials)
    assert all(t.status == "TERMINATED" for t in again.trials)
    assert {t.config["x"]: t.last_result["score"] for t in again.trials} == {1: 1, 2: 2}
    assert [len(frame) for frame in again.trial_dataframes.values()] == [1, 1]  # the finished one did not run again
    # Another trainable resuming it is refused, as Tuner.restore refuses it (it ran the errored trial: a review)
    with pytest.raises(ValueError, match="Got a trainable with identifier '_noop' but expected '_fails_until_fixed'"):
        tune.run(_noop, resume_config=tune.ResumeConfig(errored="restart"), **kwargs)
    # So is a config of other keys (Ray ignores a resumed run's new config; fluidsalus ran new trials of it: h83)
    other = {**kwargs, "config": {"y": tune.grid_search([1, 2]), "fixed": str(fixed)}}
    with pytest.raises(ConfigError, match=r"config: the experiment ran with the search space keys \['fixed', 'x'\]; "
                                          r"resume it with that search space \(got keys \['fixed', 'y'\]\)"):
        tune.run(_fails_until_fixed, resume=True, **other)
    # And another trainable is refused where tuner.pkl cannot tell (unreadable): by the name the store keeps
    with open(os.path.join(storage, "fix_me", "tuner.pkl"), "r+b") as f:
        f.truncate(10)
    with pytest.raises(ConfigError, match=r"trainable: the experiment ran the trainable '_fails_until_fixed'; "
                                          r"resume it with that trainable \(got '_noop'\)"):
        tune.run(_noop, resume=True, **kwargs)


def test_resume_auto_continues_an_interrupted_run_and_starts_a_missing_one(ray_cluster, storage: str,
                                                                          tmp_path) -> None:
    kwargs = {"config": {"x": tune.uniform(0, 1)}, "num_samples": 2, "metric": "i", "mode": "max",
              "storage_path": storage, "name": "resumable", "verbose": 0}
    interrupt = InterruptOnce(str(tmp_path / "interrupted"), n=3)
    with pytest.raises(KeyboardInterrupt):
        tune.run(resumable, callbacks=[interrupt], **kwargs)
    before = tune.ExperimentAnalysis(os.path.join(storage, "resumable"))
    ids = sorted(t.trial_id for t in before.trials)
    assert any(t.status != "TERMINATED" for t in before.trials)
    analysis = tune.run(resumable, resume="AUTO", callbacks=[interrupt], **kwargs)
    assert sorted(t.trial_id for t in analysis.trials) == ids  # the same trials, not new ones
    assert all(t.last_result["i"] == RESUMABLE_STEPS for t in analysis.trials)
    assert any(t.last_result["resumed_from"] > 0 for t in analysis.trials)  # from a checkpoint
    assert analysis.experiment_path == os.path.join(storage, "resumable")
    fresh = tune.run(_noop, resume=True, storage_path=storage, name="never_ran", verbose=0)
    assert [t.last_result["score"] for t in fresh.trials] == [1.0]


def test_resume_continues_an_experiment_without_tuner_pkl(ray_cluster, storage: str) -> None:
    """A folder with experiment.db but no tuner.pkl (a native fluidsalus.run experiment of the same name, or one an
    older fluidsalus wrote) is resumed by tune.run(resume=True/"AUTO"), whose configs are the call's own; it started a
    new experiment under another name, with a warning to pass resume=True, which was passed."""
    import fluidsalus

    kwargs = {"config": {"x": tune.uniform(0, 1)}, "num_samples": 2, "metric": "score", "mode": "max",
              "storage_path": storage, "name": "native", "verbose": 0}
    ran = fluidsalus.run(_noop, kwargs["config"], num_samples=2, metric="score", mode="max", name="native",
                         storage_path=storage, verbose=0)
    ids = sorted(r.trial_id for r in ran)
    folder = os.path.join(storage, "native")
    assert not os.path.exists(os.path.join(folder, "tuner.pkl"))
    for resume in (True, "AUTO"):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*already exists", category=UserWarning)
            analysis = tune.run(_noop, resume=resume, **kwargs)
        assert analysis.experiment_path == folder and os.listdir(storage) == ["native"]
        assert sorted(t.trial_id for t in analysis.trials) == ids  # the same trials, not new ones
        os.remove(os.path.join(folder, "tuner.pkl"))  # (the resume wrote it; the next one goes without it again)
    # A resume fluidsalus.run would refuse is refused, with its reason, before anything runs
    with pytest.raises(ConfigError, match=r"search space keys \['x'\]; resume it with that search space"):
        tune.run(_noop, resume=True, **{**kwargs, "config": {"y": tune.uniform(0, 1)}})


def test_a_moved_experiment_keeps_its_checkpoints_for_its_results_and_its_resume(ray_cluster, tmp_path) -> None:
    """As with Ray, an experiment folder can be moved (or copied) and read or continued there: the checkpoints it
    recorded are found under the new folder."""
    import shutil

    first_home, moved_home = tmp_path / "first", tmp_path / "moved"
    interrupt = InterruptOnce(str(tmp_path / "interrupted"), n=3)
    with pytest.raises(KeyboardInterrupt):
        tune.run(resumable, config={"x": tune.grid_search([1, 2])}, storage_path=str(first_home), name="exp",
                 verbose=0, callbacks=[interrupt])
    shutil.move(str(first_home), str(moved_home))
    folder = os.path.join(moved_home, "exp")
    before = tune.ExperimentAnalysis(folder)
    kept = [c for t in before.trials for c, _ in t.checkpoints]
    assert kept and all(c.path.startswith(str(moved_home)) and os.path.isdir(c.path) for c in kept)
    grid = tune.Tuner.restore(folder, trainable=resumable, resume_unfinished=True).fit()
    assert all(r.metrics["i"] == RESUMABLE_STEPS for r in grid)
    assert any(r.metrics["resumed_from"] > 0 for r in grid)  # from the moved checkpoints, not from scratch
    assert all(r.checkpoint.path.startswith(str(moved_home)) for r in grid)
    assert tune.Result.from_path(grid[0].path).checkpoint == grid[0].checkpoint


class _Counter(tune.Trainable):
    def setup(self, config):
        self.value = 0

    def step(self):
        self.value += self.config["x"]
        return {"value": self.value, "done": self.iteration >= 5}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


def _resources(config):
    resources = tune.get_context().get_trial_resources()
    tune.report({"cpu": resources["cpu"], "required": resources.required_resources, "head_cpus": resources.head_cpus,
                 "bundles": resources.bundles})


def test_deprecated_checkpoint_arguments_and_resources_per_trial_take_effect(ray_cluster, storage: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = tune.run(_Counter, config={"x": 2}, checkpoint_freq=2, keep_checkpoints_num=1,
                            checkpoint_score_attr="min-value", storage_path=storage, verbose=0,
                            export_formats=["model"])
    messages = [str(w.message) for w in caught]
    assert any("checkpoint_freq is deprecated" in m for m in messages)
    assert any("export_formats is accepted but not used" in m for m in messages)
    (trial,) = analysis.trials
    assert trial.last_result["value"] == 12
    kept = trial.checkpoints
    # Checkpoints at iterations 2, 4, 6: the one with the lowest value (2) is the best kept; the latest (6) is kept
    # too, but is none of the best (Ray's best_checkpoints).
    assert [m["training_iteration"] for _, m in kept] == [2]
    assert sorted(d for d in os.listdir(trial.local_path) if d.startswith("checkpoint_")) == [
        "checkpoint_000002", "checkpoint_000006"]
    request = {"cpu": 0.5, "gpu": 0.25, "custom_resources": {"tpu": 1}}
    analysis = tune.run(_resources, resources_per_trial=request, storage_path=storage, verbose=0)
    result = analysis.trials[0].last_result
    # The context answers as a dict (fluidsalus's keys) and as Ray's PlacementGroupFactory (Ray's keys).
    ray_view = rt.PlacementGroupFactory([{"CPU": 0.5, "GPU": 0.25, "tpu": 1}])
    assert result["cpu"] == 0.5 and result["required"] == ray_view.required_resources
    assert result["head_cpus"] == ray_view.head_cpus and result["bundles"] == ray_view.bundles


class _ReadsTheFactory(tune.Callback):
    """As Ray's callbacks and loggers read it: ``trial.placement_group_factory.required_resources``."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, float]] = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.seen[trial.config["x"]] = trial.placement_group_factory.required_resources


def test_the_trials_of_callbacks_and_of_the_analysis_have_rays_placement_group_factory(
        ray_cluster, storage: str) -> None:
    """Ray's ``Trial.placement_group_factory`` was missing: a Ray callback reading it failed fit() with an
    AttributeError (h89's B3). Callbacks' trial views and tune.run's analysis now answer the trial's request as it
    recorded it (a factory's bundles summed), a function's per trial; Ray's default (one CPU) for none."""
    reader = _ReadsTheFactory()
    factory = tune.PlacementGroupFactory([{"CPU": 0.5, "GPU": 0.25}, {"CPU": 0.5}])
    analysis = tune.run(_resources, config={"x": tune.grid_search([1, 2])}, resources_per_trial=factory,
                        callbacks=[reader], storage_path=storage, verbose=0)
    summed = {"CPU": 1.0, "GPU": 0.25}  # Ray's required_resources of that factory
    assert reader.seen == {1: summed, 2: summed}
    assert [t.placement_group_factory.required_resources for t in analysis.trials] == [summed, summed]
    assert analysis.trials[0].placement_group_factory.bundles == [summed]
    by_x = tune.with_resources(_resources, lambda config: {"cpu": config["x"] / 2})
    reader = _ReadsTheFactory()
    analysis = tune.run(by_x, config={"x": tune.grid_search([1, 2])}, callbacks=[reader], storage_path=storage,
                        verbose=0)
    assert reader.seen == {1: {"CPU": 0.5}, 2: {"CPU": 1.0}}
    assert sorted(t.placement_group_factory.head_cpus for t in analysis.trials) == [0.5, 1.0]
    reader = _ReadsTheFactory()
    analysis = tune.run(_resources, config={"x": 1}, callbacks=[reader], storage_path=storage, verbose=0)
    assert reader.seen == {1: {"CPU": 1.0}}  # no request: Ray's default
    assert analysis.trials[0].placement_group_factory.required_resources == {"CPU": 1.0}
    # read back from its folder, the request is not known (the store does not keep it)
    assert an.ExperimentAnalysis(analysis.experiment_path).trials[0].placement_group_factory is None


class _AsksForTwoCpus(tune.Trainable):
    @classmethod
    def default_resource_request(cls, config):
        return tune.PlacementGroupFactory([{"CPU": 2}])

    def step(self):
        return {"done": True}


class _AsksForNothing(tune.Trainable):
    @classmethod
    def default_resource_request(cls, config):
        return None

    def step(self):
        return {"done": True}


def test_resources_per_trial_beside_a_trainables_own_request_is_refused(ray_cluster, storage: str) -> None:
    """Ray raises a TuneError ("Please clear the resources_per_trial option"); fluidsalus ran with resources_per_trial
    in place of the trainable's own request, silently (h89's B7). Refused before Ray starts, naming both."""
    for trainable, source in ((tune.with_resources(_resources, {"cpu": 1}), "with_resources"),
                              (tune.with_parameters(tune.with_resources(_resources, lambda c: {"cpu": 1}), x=1),
                               "with_resources"),
                              (_AsksForTwoCpus, "default_resource_request")):
        with pytest.raises(ConfigError, match=rf"resources_per_trial=\{{'cpu': 0.5\}} is given, but the trainable "
                                              rf"\w+ already has a resource request \(from {source}\)"):
            tune.run(trainable, resources_per_trial={"cpu": 0.5}, storage_path=storage, verbose=0)
    assert not os.path.exists(storage)
    # a default_resource_request that answers None asks for nothing: taken, as Ray takes it (a review)
    assert tune.run(_AsksForNothing, resources_per_trial={"cpu": 0.5}, storage_path=storage, verbose=0,
                    name="nothing").trials[0].status == "TERMINATED"
    # Ray Tune's own with_resources too
    with pytest.raises(ConfigError, match=r"from with_resources"):
        tune.run(rt.with_resources(_resources, {"cpu": 1}), resources_per_trial={"cpu": 0.5}, storage_path=storage,
                 verbose=0)


def test_trial_resources_read_like_rays_placement_group_factory() -> None:
    from fluidsalus.session import TrialResources

    for bundles in ([{"CPU": 2, "GPU": 1}], [{"CPU": 1, "GPU": 0.5}, {"CPU": 2, "custom": 3}]):
        ours, theirs = tune.PlacementGroupFactory(bundles), rt.PlacementGroupFactory(bundles)
        assert ours.required_resources == theirs.required_resources
    nothing = TrialResources()
    assert nothing == {} and nothing.required_resources == {"CPU": 1.0} and nothing.head_cpus == 1.0  # Ray's default
    assert (nothing.strategy, nothing.head_bundle_is_empty) == ("PACK", False)


def _checkpointed_fails_at_2(config):
    folder = os.path.join(tune.get_context().get_trial_dir(), "saved")
    os.makedirs(folder, exist_ok=True)
    tune.report({"score": config["x"]}, checkpoint=Checkpoint.from_directory(folder))
    if config["x"] == 2:
        raise RuntimeError("x is 2")


class _WithState(tune.Callback):
    def get_state(self):
        return {"seen": 1}


@pytest.mark.parametrize("how", [{"resume": "AUTO+RESTART_ERRORED"}, {"resume": "AUTO+ERRORED_ONLY"},
                                 {"resume": True, "callbacks": [_WithState()]}],
                         ids=["restart-errored", "errored-only", "callback-state"])
def test_a_refused_tune_run_resume_leaves_the_experiment_as_it_was(ray_cluster, storage: str, how) -> None:
    """``tune.run(resume=...)`` carried out its flags before fluidsalus.run refused the resume (another config's
    keys): the errored trial's checkpoints, result.json and progress.csv were deleted and it was made PENDING, its
    error gone; a callback's state file was written, and the store's reader left -wal/-shm files."""
    kwargs = {"storage_path": storage, "name": "e", "verbose": 0, "raise_on_failed_trial": False, "metric": "score",
              "mode": "max"}
    tune.run(_checkpointed_fails_at_2, config={"x": tune.grid_search([1, 2])}, **kwargs)
    folder = os.path.join(storage, "e")
    before = every_file(folder)
    with pytest.raises(ConfigError, match=r"config: the experiment ran with the search space keys \['x'\]; resume it "
                                          r"with that search space \(got keys \['y'\]\)"):
        tune.run(_checkpointed_fails_at_2, config={"y": tune.grid_search([1, 2])}, **{**kwargs, **how})
    assert every_file(folder) == before


#: The experiment the refused resumes below start from, and the run that makes it.
_REFUSED_RESUME_RUN = {"name": "e", "verbose": 0, "metric": "score", "mode": "max",
                       "config": {"x": tune.grid_search([1, 2])}}


@pytest.fixture(scope="module")
def finished_noop_experiment(ray_cluster, tmp_path_factory) -> str:
    """The folder of one finished ``tune.run(_noop, **_REFUSED_RESUME_RUN)``, which each case below copies: a run of
    its own per case started two device processes anew (each case's ``pretend_ray_is`` ends the warm ones), 14 of
    this module's 17, about a third of its CPU time."""
    storage = str(tmp_path_factory.mktemp("refused_resume") / "results")
    tune.run(_noop, storage_path=storage, **_REFUSED_RESUME_RUN)
    return os.path.join(storage, _REFUSED_RESUME_RUN["name"])


@pytest.mark.parametrize(("change", "message"), [
    ({"metric": "other"},
     r"metric: the experiment ran with metric='score'; resume it with that metric \(got 'other'\)"),
    ({"mode": "min"}, r"mode: the experiment ran with mode='max'; resume it with that mode \(got 'min'\)"),
    ({"config": {"y": tune.grid_search([1, 2])}},
     r"config: the experiment ran with the search space keys \['x'\]; resume it with that search space \(got keys "
     r"\['y'\]\)"),
    ({"scheduler": "async_hyperband"}, r"searcher: the experiment ran with RandomSearch; resume it with that searcher "
                                       r"\(got ASHA\)"),
], ids=["metric", "mode", "config", "searcher-kind"])
@pytest.mark.parametrize("lock_file", [True, False], ids=["lock-file", "no-lock-file"])
def test_a_tune_run_resume_of_another_objective_or_space_is_refused_before_ray_starts(
        finished_noop_experiment: str, storage: str, monkeypatch, change, message, lock_file) -> None:
    """These refusals came from fluidsalus.run's checks, after Tuner.fit had started Ray (seconds; h125's a), and
    the lock file they took and put back had a new mtime (or, with none, the folder had: h125's b). Ray's own
    tune.run(resume=True) takes them all: it keeps the old config and trials, and its analysis the new metric and
    mode (docs/compatibility.md: fluidsalus refuses them)."""
    import shutil

    import ray

    kwargs = {"storage_path": storage, **_REFUSED_RESUME_RUN}
    folder = os.path.join(storage, _REFUSED_RESUME_RUN["name"])
    shutil.copytree(finished_noop_experiment, folder, symlinks=True)
    if not lock_file:
        os.remove(os.path.join(folder, ".driver.lock"))
    earlier = os.stat(folder).st_mtime - 5  # (a second's tick apart from the refusal's, were it to move them)
    for path in [folder, *(os.path.join(folder, name) for name in os.listdir(folder))]:
        os.utime(path, (earlier, earlier))
    before, times = every_file(folder), file_times(folder)

    def no_ray(*args, **kwargs) -> None:
        raise AssertionError("a refused resume started Ray")

    pretend_ray_is(monkeypatch, lambda: False)
    monkeypatch.setattr(ray, "init", no_ray)
    with pytest.raises(ConfigError, match=message):
        tune.run(_noop, resume=True, **{**kwargs, **change})
    assert every_file(folder) == before and file_times(folder) == times
