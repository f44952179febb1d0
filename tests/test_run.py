"""End-to-end runs through real Ray device actors (one shared 2-CPU Ray for the whole test session)."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import ray
from _folders import every_file, file_times
from _trials import StopAllAfter, cpus_free_within, restarted_after_running, study_told

import fluidsalus
from fluidsalus.errors import ConfigError, FluidsalusError
from fluidsalus.inspect import inspect as inspect_experiment
from fluidsalus.progress import PLAIN_PREFIX
from fluidsalus.searchers import ASHA, BOHB, Decision, MedianStopping, OptunaSearch, RandomSearch
from fluidsalus.searchers._random import VariantStream
from fluidsalus.store import ABANDONED_CREATE_S, DB_FILENAME, ERROR_FILE, ERROR_PICKLE_FILE, DriverLock, ExperimentStore
from fluidsalus.trialgroup.executor import ACTOR_START_TIMEOUT_S

pytestmark = pytest.mark.usefixtures("ray_cluster")


def objective(config):
    for step in range(1, 6):
        if config.get("fail_at") == step:
            raise RuntimeError(f"failing on purpose at step {step}")
        fluidsalus.report({"score": config["x"] * step, "loss": 1.0 / (config["x"] * step + 1)})


def test_sweep_records_everything_and_returns_a_result_grid(storage):
    grid = fluidsalus.run(objective, {"x": fluidsalus.uniform(0, 1), "fail_at": fluidsalus.grid_search([None, 3])},
                          num_samples=3, metric="score", mode="max", storage_path=storage, name="sweep",
                          seed=7, verbose=0)
    assert len(grid) == 6
    assert grid.num_errors == 3 and grid.num_terminated == 3
    assert all("failing on purpose at step 3" in str(e) and "RuntimeError" in str(e) for e in grid.errors)
    ok = [r for r in grid if r.error is None]
    assert all(r.metrics["training_iteration"] == 5 and r.metrics["done"] for r in ok)
    assert all(len(r.metrics_dataframe) == 5 for r in ok)
    failed = [r for r in grid if r.error is not None]
    assert all(len(r.metrics_dataframe) == 2 for r in failed)  # results before the failure are kept

    best = grid.get_best_result()
    assert best.config["fail_at"] is None
    assert best.metrics["score"] == max(r.metrics["score"] for r in ok)
    # scope="all" sees the failed trials' earlier results too; "avg" averages each trial's history.
    best_avg = grid.get_best_result("loss", "min", scope="avg")
    assert best_avg.metrics_dataframe["loss"].mean() == min(
        r.metrics_dataframe["loss"].mean() for r in grid)
    df = grid.get_dataframe()
    assert len(df) == 6 and {"score", "config/x", "config/fail_at", "logdir", "trial_id"} <= set(df.columns)
    best_rows = grid.get_dataframe(filter_metric="score", filter_mode="max")
    assert best_rows["score"].max() == best.metrics["score"]

    store = ExperimentStore.open(os.path.join(storage, "sweep"), readonly=True)
    assert store.experiment()["status"] == "FINISHED"
    assert store.count("results") == 3 * 5 + 3 * 2
    kinds = {e.kind for e in store.events()}
    assert {"device_start", "place", "trial_start", "trial_end"} <= kinds
    errored = [t for t in store.trials() if t.status == "ERROR"]
    assert len(errored) == 3 and all("raise RuntimeError" in t.traceback for t in errored)


def test_grid_is_repeated_num_samples_times_and_seed_reproduces(storage):
    space = {"x": fluidsalus.uniform(0, 1), "g": fluidsalus.grid_search(["a", "b", "c"])}
    kw = dict(num_samples=2, storage_path=storage, seed=3, verbose=0)
    a = fluidsalus.run(objective, space, name="a", **kw)
    b = fluidsalus.run(objective, space, name="b", **kw)
    assert len(a) == 6 and sorted(r.config["g"] for r in a) == ["a", "a", "b", "b", "c", "c"]
    assert [r.config for r in a] == [r.config for r in b]


def test_stop_dict_and_callable(storage):
    grid = fluidsalus.run(objective, {"x": 0.5}, stop={"training_iteration": 2}, storage_path=storage,
                          name="stopdict", verbose=0)
    assert grid[0].metrics["training_iteration"] == 2 and grid[0].error is None
    grid = fluidsalus.run(objective, {"x": 0.5}, stop=lambda tid, r: r["score"] >= 1.5,
                          storage_path=storage, name="stopfn", verbose=0)
    assert grid[0].metrics["training_iteration"] == 3


def test_a_metric_without_a_mode_runs_as_in_ray_tune(storage):
    """It was refused ("metric and mode must be given together"); Ray runs it, checks that results report the
    metric, and asks for the mode where the best result is wanted."""
    grid = fluidsalus.run(objective, {"x": fluidsalus.grid_search([0.2, 0.8])}, metric="score", storage_path=storage,
                          name="nomode", verbose=0)
    with pytest.raises(ValueError, match="No mode is provided"):
        grid.get_best_result()
    assert grid.get_best_result(mode="max").config["x"] == 0.8
    with pytest.raises(ConfigError, match="metric='nope' is not in the results"):
        fluidsalus.run(objective, {"x": 0.5}, metric="nope", storage_path=storage, name="nope", verbose=0)


def _no_experiment_left(storage, name):
    return not os.path.exists(os.path.join(storage, name))


def _reports_text(config):
    fluidsalus.report({"loss": "low"})


def _reports_a_list(config):
    fluidsalus.report({"loss": [0.25]})


@pytest.mark.parametrize(("trainable", "kwargs", "message"), [
    (objective, {"metric": "acc", "mode": "max"}, r"metric='acc' is not in the results.*\['loss', 'score'\]"),
    (objective, {"stop": {"epochs": 3}}, "stop criterion 'epochs' is not in the result"),
    # A stop rule's own bug: it failed every trial it judged, as if the trainable had raised, and max_failures
    # retried them (a helper's side by side: Ray's fit() raises it)
    (objective, {"stop": lambda trial_id, result: 1 / 0, "max_failures": 2},
     r"^stop: the stop rule raised on a result of trial \S+_00000: ZeroDivisionError: division by zero$"),
    # (OptunaSearch failed inside the study with "must be real number, not str", naming neither trial nor metric)
    (_reports_text, {"metric": "loss", "mode": "min"},
     r"metric='loss' must be a number: trial \S+_00000 reported 'low' \(str\)"),
    # (Ray Tune stores such a value, and returns it from get_best_result: docs/compatibility.md, h83's N5)
    (_reports_a_list, {"metric": "loss", "mode": "min"},
     r"metric='loss' must be a number: trial \S+_00000 reported \[0.25\] \(list\)"),
])
def test_a_first_result_that_breaks_a_rule_fails_the_run_and_leaves_nothing(storage, trainable, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        fluidsalus.run(trainable, {"x": 0.5}, storage_path=storage, name="m", verbose=0, **kwargs)
    assert _no_experiment_left(storage, "m")


def _late_slip(config):
    for i in range(1, 4):
        if config["x"] == 3 and i == 3:  # the last trial's last result leaves the metric and the stop key out
            fluidsalus.report({"val_loss": 1.0})
        else:
            fluidsalus.report({"loss": config["x"] * i, "epochs": i})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"metric": "loss", "mode": "min"}, "metric='loss' is not in the results"),
    ({"stop": {"epochs": 10}}, "stop criterion 'epochs' is not in the result"),
])
def test_a_late_result_without_the_metric_or_stop_key_keeps_what_the_run_did(storage, kwargs, message):
    """The error is the same as at a first result, but the experiment is kept (marked ERROR) with every result
    acknowledged before it: it was deleted, results and checkpoints of finished trials with it."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        fluidsalus.run(_late_slip, {"x": fluidsalus.grid_search([1, 2, 3])}, max_concurrent_trials=1,
                       storage_path=storage, name="late", verbose=0, **kwargs)
    with ExperimentStore.open(os.path.join(storage, "late"), readonly=True) as store:
        experiment = store.experiment()
        assert experiment["status"] == "ERROR" and message in experiment["error"]
        kept = {t.config["x"]: [r.metrics["loss"] for r in store.results(t.trial_id)] for t in store.trials()}
    assert kept[1] == [1, 2, 3] and kept[2] == [2, 4, 6]


def _slips_at_once(config):
    fluidsalus.report({"loss": 1.0, "epochs": 1})
    fluidsalus.report({"val_loss": 1.0})  # right after: the device sends both in one batch


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"metric": "loss", "mode": "min"}, "metric='loss' is not in the results"),
    ({"stop": {"epochs": 10}}, "stop criterion 'epochs' is not in the result"),
])
def test_a_result_without_the_metric_in_the_batch_of_a_good_one_keeps_the_good_one(storage, kwargs, message):
    """The batch's check failed as a whole, so the good result before the bad one was not stored, and the
    experiment, with no result acknowledged, was deleted (a helper's docs audit): the events before the bad result
    are now stored and acted on first."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        fluidsalus.run(_slips_at_once, {"x": 1}, storage_path=storage, name="slip", verbose=0, **kwargs)
    with ExperimentStore.open(os.path.join(storage, "slip"), readonly=True) as store:
        assert store.experiment()["status"] == "ERROR"
        assert [r.metrics["loss"] for t in store.trials() for r in store.results(t.trial_id)] == [1.0]


def _five_steps(config):
    for i in range(5):
        fluidsalus.report({"loss": float(i)})


def test_a_resumed_runs_progress_counts_the_trials_stopped_before_it(storage, capfd):
    """The closing status line of a resume said "3 done (0 stopped)" of trials its first session had stopped."""
    for resume in (False, True):
        fluidsalus.run(_five_steps, {"x": fluidsalus.grid_search([1, 2, 3])}, stop={"training_iteration": 2},
                       storage_path=storage, name="again", resume=resume, verbose=1)
        out = capfd.readouterr()
        lines = [line for line in (out.out + out.err).splitlines() if line.startswith(PLAIN_PREFIX)]
        assert lines and "3 terminated, 3 of them stopped |" in lines[-1], (resume, lines[-1:])


def test_a_metric_that_result_extras_adds_passes_the_metric_check(storage):
    """The batch's check of the metric ran before the trial's extras were added to its results (a review of the
    split batch): a metric only ``result_extras`` gives was refused, and the experiment deleted."""
    grid = fluidsalus.run(_five_steps, {"x": 1}, metric="score", mode="max", storage_path=storage, name="extra",
                          verbose=0, result_extras=lambda seq, config: {"score": seq + 1.0})
    assert [r.metrics["score"] for r in grid] == [1.0]


def _three_ranks(config):
    fluidsalus.report({"loss": 1.0})


def test_a_data_parallel_trainable_that_needs_more_devices_than_the_run_has_is_refused(storage):
    """Its trial waited in the queue for ever, with no word (a helper's audit): the run has 2 devices here."""
    from fluidsalus import distributed

    trainable = distributed.data_parallel(_three_ranks, workers=(3, 3))
    with pytest.raises(ConfigError, match=r"trainable: it is data-parallel on at least 3 devices \(data_parallel\("
                                          r"workers=...\)\), but the run has 2; lower its min_workers"):
        fluidsalus.run(trainable, {"x": 1}, storage_path=storage, name="ranks", verbose=0, devices=2)
    assert not os.path.exists(storage) or os.listdir(storage) == []


def _returns_a_number(config):
    return 0.5


def test_a_trainable_that_returns_a_number_is_told_where_its_metric_went(storage):
    with pytest.raises(ConfigError, match=r"reported \['_metric'\] \(a trainable that returns or yields a number "
                                          r"reports it as '_metric', as in Ray Tune: report a dict to name it\)"):
        fluidsalus.run(_returns_a_number, {"x": 1}, metric="loss", mode="min", storage_path=storage, name="ret",
                       verbose=0)


def _improves_then_worsens(config):
    fluidsalus.report({"loss": 1.0})
    fluidsalus.report({"loss": 10.0 * config["x"]})


def test_the_live_best_is_the_best_last_result_as_the_closing_line_says(storage, capfd):
    """The progress view showed the best value ever reported (loss=1) while the closing line and get_best_result
    judge each trial by its last result (loss=10): they disagreed. Both now use the last results."""
    fluidsalus.run(_improves_then_worsens, {"x": fluidsalus.grid_search([1, 2])}, metric="loss", mode="min",
                   storage_path=storage, name="best", verbose=1)
    out = capfd.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if "best loss=" in line]
    assert lines and "best loss=10 (min)" in lines[-1]
    assert "Best loss=10 with config {'x': 1}" in out.out + out.err


def _reports_a_nested_loss(config):
    fluidsalus.report({"eval": {"loss": 10.0 * config["x"]}})


def test_a_nested_metric_is_the_best_in_the_closing_line(storage, capfd):
    """A run's metric that names a nested value (``"eval/loss"``, as Ray's ``a/b``) ended every run with a
    ``KeyError`` in the closing line, once all its trials had run (``best.metrics[metric]``; h206's
    ``entry.py``), where Ray's best-trial line and get_best_result read it."""
    grid = fluidsalus.run(_reports_a_nested_loss, {"x": fluidsalus.grid_search([1, 2])}, metric="eval/loss",
                          mode="min", storage_path=storage, name="nested", verbose=1)
    assert grid.get_best_result().config == {"x": 1}
    out = capfd.readouterr()
    assert "Best eval/loss=10 with config {'x': 1}" in out.out + out.err


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("cannot pickle '_thread.lock' object")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(metric="score", mode="maximize"), r"mode: Input should be 'min' or 'max'.*'maximize'"),
        (dict(config={"x": 0.5, "lock": threading.Lock()}),  # (a bare TypeError at the first sampling, and an
         # experiment of no trial left, which refused the fixed run's name)
         r"config: the value of 'lock' \(lock\) cannot be copied to send it to the trials"),
        (dict(config=[1, 2]), "config: the search space must be a dict"),
        (dict(config={"x": {"grid_search": []}}), "grid_search"),
        (dict(num_samples=0), r"^num_samples: must be >= 1, or -1 to sample until the run is stopped \(got 0\)$"),
        (dict(num_samples=-1), r"num_samples=-1 samples until the run is stopped: also pass time_budget_s"),
        # a searcher's own endless stream too (it ran for ever: h147's F1)
        (dict(config=None, searcher=RandomSearch({"x": 0.5}, num_samples=-1)),
         r"num_samples=-1 \(RandomSearch\) samples until the run is stopped: also pass time_budget_s"),
        # (named the rule around it, which takes no num_samples: h159's E2)
        (dict(config=None, searcher=MedianStopping(RandomSearch({"x": 0.5}, num_samples=-1), "score", "max")),
         r"num_samples=-1 \(RandomSearch\) samples until the run is stopped"),
        (dict(config=None, searcher=OptunaSearch({"x": fluidsalus.uniform(0, 1)}, -1, "score", "max")),
         r"num_samples=-1 \(OptunaSearch\) samples until the run is stopped"),
        (dict(config=None, searcher=BOHB({"x": fluidsalus.uniform(0, 1)}, -1, "score", "max", max_concurrent=2)),
         r"num_samples=-1 \(BOHB\) samples until the run is stopped"),
        # (was pydantic's two messages, one per member of the union: "fail_fast.bool: ...; fail_fast.literal[...")
        (dict(fail_fast="yes"), r"^fail_fast: must be True, False or 'raise' \(got 'yes'\)$"),
        (dict(trainable=42), r"trainable: must be a function f\(config\)"),
        (dict(verbose=7), "verbose"),
        (dict(name="a/b"), "name: must be a plain folder name"),
        # (a bare OSError "File name too long" once Ray was up: h83's N2)
        (dict(name="x" * 256), r"name: must be at most 255 bytes long, the longest folder name a file system takes; "
                               r"this one has 256 \(got 'xxx"),
        # ("" ran in ~/fluidsalus_results, as if no storage_path was given: h83's N1)
        (dict(storage_path=""), r"^storage_path: must be None \(the default folder\) or a folder path: not empty, "
                                r"without a NUL byte \(got ''\)$"),
        (dict(storage_path="a\0b"), r"^storage_path: must be None .* without a NUL byte"),
        (dict(lane_policy="lifo"), r"lane_policy: Input should be 'fifo', 'fair', 'rr', 'pack', 'srtf' or 'priority'"),
        (dict(gpu_per_trial=0), r"gpu_per_trial: Input should be greater than 0"),
        # a share of one device (2 was taken silently, and meant one trial per device: a helper's native run)
        (dict(gpu_per_trial=2), r"gpu_per_trial: Input should be less than or equal to 1 \(got 2\)"),
        (dict(gpu_per_trial=float("nan")), r"gpu_per_trial: Input should be a finite number"),
        (dict(cpus_per_trial=0), r"cpus_per_trial: Input should be greater than or equal to 0.0001"),
        (dict(cpus_per_trial=float("inf")), r"cpus_per_trial: Input should be a finite number"),
        (dict(seed=-1), r"seed: Input should be greater than or equal to 0"),  # (was NumPy's error, and a store)
        # (pydantic coerced these: "4" ran 4 samples, True one retry, as the Tune front end refuses them)
        (dict(num_samples="4"), r"num_samples: must be an int \(got '4'\)"),
        (dict(max_failures=True), r"max_failures: must be an int \(got True\)"),
        (dict(devices=2.0), r"devices: must be an int \(got 2.0\)"),
        (dict(time_budget_s="10"), r"time_budget_s: must be a number \(got '10'\)"),  # (ran with 10 s)
        # (a str: "no" ran as False, "yes" as True)
        (dict(resume="no"), r"resume: Input should be a valid boolean \(got 'no'\)"),
        (dict(call_handler=5), r"call_handler must be None or a callable"),
        (dict(searcher="MedianStopping(5)"), r"searcher: must be a fluidsalus BaseSearcher, got str"),
        # (each failed every trial at its first result, in the device's comparison)
        (dict(stop={"training_iteration": "2"}), r"stop: the threshold of 'training_iteration' must be a number, "
                                                 r"got '2' \(str\)"),
        (dict(stop={3: 1}), "stop: keys must be result names"),
        (dict(config=None, metric="score", mode="max", searcher=ASHA({"x": 0.5}, 2, "score", "min")),
         r"mode='max', but the searcher \(ASHA\) decides by mode='min'"),
        # A searcher's own space, count and seed: these went unused, silently (a helper ran 27 epochs for 5)
        (dict(config={"epochs": 5}, searcher=ASHA({"x": 0.5}, 2, "score", "min")),
         r"config: the searcher \(ASHA\) proposes every configuration from its own space, so config= would go "
         r"unused \(keys \['epochs'\]\)"),
        (dict(config=None, num_samples=10, searcher=ASHA({"x": 0.5}, 2, "score", "min")),
         r"num_samples: the searcher \(ASHA\) decides how many trials run .* got num_samples=10"),
        (dict(config=None, seed=3, searcher=ASHA({"x": 0.5}, 2, "score", "min")),
         r"seed: the searcher \(ASHA\) draws its configurations itself .* got seed=3"),
        (dict(config=None, metric="loss", mode="min", searcher=ASHA({"x": 0.5}, 2, "score", "min")),
         r"metric='loss', but the searcher \(ASHA\) decides by metric='score'"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(storage, kwargs, message):
    args = {"trainable": objective, "config": {"x": 0.5}, "storage_path": storage, "name": "bad", "verbose": 0}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        fluidsalus.run(args.pop("trainable"), args.pop("config"), **args)
    assert not os.path.exists(storage) or os.listdir(storage) == []


def _constant(config):
    fluidsalus.report({"score": len(config)})


def _raises(*args):
    raise ValueError("the user's own function failed")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(trial_dirname=_raises), ValueError, "the user's own function failed"),
    (dict(result_extras=lambda seq, config: ["tag"]), ConfigError, r"result_extras must return a dict of str keys"),
    (dict(result_extras=lambda seq, config: {1: 2}), ConfigError, r"result_extras must return a dict of str keys"),
    (dict(trial_name=lambda trial_id: 5), ConfigError, r"trial_name must return a str .* got 5"),
    # Named as the user named it (it said "TuneConfig: trial_dirname_creator"), and a name no folder can have is
    # refused as "a/b" is (it failed the trial with OSError / ValueError, and its failure could not be recorded)
    (dict(trial_dirname=lambda trial_id, config: "a/b"), ConfigError,
     r"^trial_dirname returned 'a/b' for trial \w+: it must be one folder name"),
    (dict(trial_dirname=lambda trial_id, config: "a\0b"), ConfigError,
     r"^trial_dirname returned 'a\\x00b' for trial \w+: it must be one folder name .* without a path separator or "
     r"a NUL byte"),
    (dict(trial_dirname=lambda trial_id, config: "d" * 300), ConfigError,
     r"^trial_dirname returned a name of 300 bytes for trial \w+: it must be at most 250 \(a file system's longest "
     r"folder name, 255, less the 5 a taken name gets\)"),
])
def test_an_error_before_any_trial_was_made_leaves_no_experiment_behind(storage, kwargs, error, message):
    """Such an error (the user's hook raising, or answering what it may not) left an experiment of no trial,
    marked ERROR, and a fixed run under the same name was refused: "an experiment named ... already exists"."""
    with pytest.raises(error, match=message):
        fluidsalus.run(_constant, {"x": 1}, storage_path=storage, name="hooked", verbose=0, **kwargs)
    assert not os.path.exists(os.path.join(storage, "hooked"))
    grid = fluidsalus.run(_constant, {"x": 1}, storage_path=storage, name="hooked", verbose=0)
    assert grid[0].metrics["score"] == 1


def test_a_run_without_a_config_runs_its_samples_of_the_empty_config_as_ray_does(storage):
    """``config``'s own default (None), and ``{}``, were refused ("the search space is empty"): Ray Tune runs
    ``num_samples`` trials of ``{}``, as the Tune front end here did."""
    grid = fluidsalus.run(_constant, storage_path=storage, name="empty", verbose=0, num_samples=2)
    assert [(r.config, r.metrics["score"], r.error) for r in grid] == [({}, 0, None), ({}, 0, None)]


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(num_samples=0), "RandomSearch: num_samples must be an int >= 1, or -1 for an endless stream, got 0"),
    (dict(num_samples=-5), "RandomSearch: num_samples must be an int >= 1, or -1"),
    (dict(seed="a"), "RandomSearch: seed must be None or an int >= 0, got 'a'"),
    (dict(seed=-1), "RandomSearch: seed must be None or an int >= 0, got -1"),
    # (a bare TypeError "'int' object is not iterable"; any value was taken as a flag: h83's N9)
    (dict(space=5), "RandomSearch: space must be a dict of the search space (constants, domains such as "
                    "uniform(0, 1), grid_search([...])); got int"),
    (dict(constant_grid_search="x"), "RandomSearch: constant_grid_search must be True or False (got 'x')"),
    (dict(max_concurrent=0), "RandomSearch: max_concurrent must be None or an int >= 1 (got 0)"),
    (dict(max_concurrent=True), "RandomSearch: max_concurrent must be None or an int >= 1 (got True)"),
])
def test_random_search_refuses_a_count_or_seed_that_cannot_run(kwargs, message):
    """A count of 0 made a run that never ended (nothing to propose, never finished); a bad seed failed in NumPy."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        RandomSearch(**{"space": {"x": fluidsalus.uniform(0, 1)}, **kwargs})


def test_a_run_takes_the_searchers_metric_when_it_names_none(storage):
    """The best result and the check that results report the metric follow the searcher's (ASHA's) metric."""
    grid = fluidsalus.run(objective, searcher=ASHA({"x": fluidsalus.grid_search([0.2, 0.8])}, 1, "score", "max",
                                                   max_t=3), storage_path=storage, name="asha", verbose=0)
    assert grid.get_best_result().config["x"] == 0.8
    with pytest.raises(ConfigError, match="metric='nope' is not in the results"):
        fluidsalus.run(objective, searcher=ASHA({"x": 0.5}, 1, "nope", "max", max_t=3), storage_path=storage,
                       name="nope", verbose=0)


def test_unpicklable_trainable_is_refused(storage):
    lock = threading.Lock()

    def uses_lock(config):
        with lock:
            fluidsalus.report({"x": 1})

    with pytest.raises(ConfigError, match=r"trainable: cannot be pickled.*lock"):
        fluidsalus.run(uses_lock, {"x": 1}, storage_path=storage, name="u", verbose=0)
    assert not os.path.exists(os.path.join(storage, "u"))


def test_storage_path_not_writable(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"storage_path: .* is not writable"):
        fluidsalus.run(objective, {"x": 1}, storage_path=str(blocker / "results"), verbose=0)


def test_a_name_or_storage_path_that_is_a_file_is_refused_and_the_file_left_alone(storage):
    """A name of an existing file failed with a bare FileExistsError once Ray was up (h83's N14); a storage_path
    of a file said "is not writable (File exists)"."""
    os.makedirs(storage)
    a_file = Path(storage, "a_file")
    a_file.write_text("mine")
    with pytest.raises(ConfigError, match=rf"^name: {re.escape(str(a_file))} is a file, not an experiment's folder; "
                                          "choose another name$"):
        fluidsalus.run(objective, {"x": 1}, storage_path=storage, name="a_file", verbose=0)
    with pytest.raises(ConfigError, match=rf"^storage_path: {re.escape(repr(str(a_file)))} is a file, not a folder"):
        fluidsalus.run(objective, {"x": 1}, storage_path=str(a_file), verbose=0)
    assert os.listdir(storage) == ["a_file"] and a_file.read_text() == "mine"


def test_existing_name_is_refused_unless_resuming(storage):
    fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="once", verbose=0)
    with pytest.raises(ConfigError, match="name: an experiment named 'once' already exists.*resume=True"):
        fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="once", verbose=0)
    with pytest.raises(ConfigError, match="resume: there is no experiment named 'never'"):
        fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="never", resume=True, verbose=0)


class _OneSecond(datetime.datetime):
    """A clock that always says the same second."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 11, 29, 12, 0, 0)


def test_runs_of_one_second_get_names_of_their_own(storage, monkeypatch):
    """The name fluidsalus makes, ``<trainable>_<date>``, is to the second: a second run within it failed with
    "an experiment named ... already exists" (a helper's loop of runs on warm devices, 0.05 s each)."""
    import fluidsalus.api

    monkeypatch.setattr(fluidsalus.api, "datetime", types.SimpleNamespace(datetime=_OneSecond))
    names = [os.path.basename(fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, verbose=0).experiment_path)
             for _ in range(3)]
    assert names == ["objective_2026-11-29_12-00-00", "objective_2026-11-29_12-00-00_2",
                     "objective_2026-11-29_12-00-00_3"]


def test_a_made_up_name_another_run_takes_between_its_check_and_its_store_gets_the_next_one(storage, monkeypatch):
    """Two runs of one second in two threads: both found the name free, and the second's store creation failed
    with "already exists" (the review's threads). The claim of the store file decides; the loser takes the next."""
    import fluidsalus.api

    monkeypatch.setattr(fluidsalus.api, "datetime", types.SimpleNamespace(datetime=_OneSecond))
    create = ExperimentStore.create.__func__
    calls = []

    def the_other_run_wins(cls, path, *args, **kwargs):
        if not calls:  # the other thread's run creates the store of this name first
            create(cls, path, *args, **kwargs).close()
        calls.append(os.path.basename(path))
        return create(cls, path, *args, **kwargs)

    monkeypatch.setattr(ExperimentStore, "create", classmethod(the_other_run_wins))
    grid = fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, verbose=0)
    assert os.path.basename(grid.experiment_path) == "objective_2026-11-29_12-00-00_2" and grid.num_errors == 0
    assert calls == ["objective_2026-11-29_12-00-00", "objective_2026-11-29_12-00-00_2"]


def raises_what_utf8_cannot_encode(config: dict[str, Any]) -> None:
    fluidsalus.report({"x": 1})
    raise ValueError("bad file name: " + os.fsdecode(b"\xff\xfe"))


def test_a_trial_error_that_utf8_cannot_encode_fails_the_trial_not_the_run(storage):
    """A lone surrogate (os.fsdecode of a file name that is not UTF-8) in a trial's error ended the whole run with
    a UnicodeEncodeError from the error file, then from the store (the review; Ray's run finishes)."""
    grid = fluidsalus.run(raises_what_utf8_cannot_encode, {"k": fluidsalus.grid_search([0, 1])}, devices=1,
                          storage_path=storage, name="surrogates", verbose=0)
    assert grid.num_errors == 2
    assert all("bad file name: \\udcff\\udcfe" in str(r.error) for r in grid), [str(r.error) for r in grid]
    with open(os.path.join(grid[0].path, ERROR_FILE), encoding="utf-8") as f:
        assert "\\udcff\\udcfe" in f.read()


def test_a_store_whose_creation_was_cut_short_long_ago_is_replaced_by_a_new_run(storage):
    """A driver killed between claiming experiment.db and committing its schema left a file that neither a new run
    (the name was taken) nor a resume (no experiment in it) could use: it had to be removed by hand. A recent one
    may be a creation under way, and is left alone."""
    db = os.path.join(storage, "cut", "experiment.db")
    os.makedirs(os.path.dirname(db))
    open(db, "w").close()
    with pytest.raises(ConfigError, match="name: an experiment named 'cut' already exists"):
        fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="cut", verbose=0)
    old = time.time() - ABANDONED_CREATE_S - 1
    os.utime(db, (old, old))
    grid = fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="cut", verbose=0)
    assert grid.num_errors == 0 and len(grid) == 1


def test_a_driver_that_loses_the_race_to_create_an_experiment_gets_the_same_error(storage, monkeypatch):
    """Two drivers starting the same new name at once both passed the check; the loser got a StoreError (or
    sqlite's "table experiment already exists") with a traceback, not the name's ConfigError."""
    from fluidsalus.store import ExperimentStore

    real = ExperimentStore.create

    def another_driver_first(exp_dir, *args, **kwargs):
        real(exp_dir, *args, **kwargs).close()  # the other driver's create, just after this one's check
        return real(exp_dir, *args, **kwargs)

    monkeypatch.setattr(ExperimentStore, "create", another_driver_first)
    with pytest.raises(ConfigError, match="name: an experiment named 'raced' already exists.*resume=True"):
        fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="raced", verbose=0)
    assert os.path.exists(os.path.join(storage, "raced", "experiment.db"))  # the other driver's, kept


def test_a_second_driver_cannot_run_an_experiment_that_one_is_running(storage):
    """Each run holds its experiment's driver lock: a resume=True from another terminal while the first driver runs
    is refused (it ran every unfinished trial a second time beside the first). The lock goes with its holder, so
    the experiment resumes once it is released (or its process is gone)."""
    fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="held", verbose=0)
    exp_dir = os.path.join(storage, "held")
    lock = DriverLock.acquire(exp_dir)  # as the other driver would hold it
    try:
        with pytest.raises(ConfigError, match=rf"resume: the experiment at .*held is being run by another driver "
                                              rf"\(pid {os.getpid()} on "):
            fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="held", resume=True, verbose=0)
    finally:
        lock.release()
    with ExperimentStore.open(exp_dir, readonly=True) as store:
        assert store.experiment()["status"] == "FINISHED"  # the refused driver changed nothing
    grid = fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="held", resume=True, verbose=0)
    assert grid[0].metrics["training_iteration"] == 5


def test_a_resume_with_another_kind_of_searcher_is_refused(storage):
    """It failed with the searcher's KeyError ('rungs') out of its load_state_dict."""
    fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="kind", verbose=0)
    with pytest.raises(ConfigError, match="searcher: the experiment ran with RandomSearch; resume it with that "
                                          r"searcher \(got ASHA\)"):
        fluidsalus.run(objective, storage_path=storage, name="kind", resume=True, verbose=0,
                       searcher=ASHA({"x": 0.5}, 1, "score", "max"))


def test_bad_callbacks_are_refused_before_the_experiment_is_made(storage):
    with pytest.raises(ConfigError, match="callbacks"):
        fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="cbs", callbacks=[object()], verbose=0)
    assert _no_experiment_left(storage, "cbs")  # it was left RUNNING, and the name taken


def checkpointing(config):
    start = 0
    ckpt = fluidsalus.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read())
    for step in range(start + 1, 7):
        d = os.path.join(fluidsalus.get_context().get_trial_dir(), "scratch")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "step"), "w") as f:
            f.write(str(step))
        fluidsalus.report({"step": step, "resumed_from": start},
                          checkpoint=fluidsalus.Checkpoint.from_directory(d) if step % 2 == 0 else None)


def test_resume_keeps_finished_trials_and_continues_unfinished_from_checkpoint(storage):
    grid = fluidsalus.run(checkpointing, {"x": fluidsalus.grid_search([1, 2])}, storage_path=storage,
                          name="res", verbose=0)
    assert [r.metrics["step"] for r in grid] == [6, 6]
    exp = os.path.join(storage, "res")
    # Make the first trial look as if the driver died after its 5th result (checkpoint at step 4).
    store = ExperimentStore.open(exp)
    first = store.trials()[0]
    conn = sqlite3.connect(os.path.join(exp, DB_FILENAME))
    conn.execute("UPDATE trials SET status='RUNNING', checkpoint_path=? WHERE trial_id=?",
                 (os.path.join(exp, first.trial_id, "checkpoint_000004"), first.trial_id))
    conn.execute("DELETE FROM results WHERE trial_id=? AND iteration=6", (first.trial_id,))
    # Its 6th checkpoint folder may be on disk (the device copied it), but it was never acknowledged.
    conn.execute("DELETE FROM checkpoints WHERE trial_id=? AND iteration=6", (first.trial_id,))
    conn.commit()
    conn.close()
    store.close()
    before_second = len(ExperimentStore.open(exp, readonly=True).results(grid[1].trial_id))

    grid = fluidsalus.run(checkpointing, {"x": fluidsalus.grid_search([1, 2])}, storage_path=storage,
                          name="res", resume=True, verbose=0)
    assert [r.metrics["step"] for r in grid] == [6, 6]
    assert grid[0].metrics["resumed_from"] == 4 and grid[0].metrics["training_iteration"] == 6
    assert [row["step"] for _, row in grid[0].metrics_dataframe.iterrows()] == [1, 2, 3, 4, 5, 6]
    reader = ExperimentStore.open(exp, readonly=True)
    assert len(reader.results(grid[1].trial_id)) == before_second  # the finished trial did not run again
    assert [r.attempt for r in reader.results(first.trial_id)][-2:] == [1, 1]


def test_results_acknowledged_before_a_driver_kill_are_in_the_store(tmp_path, ray_cluster):
    """The driver is SIGKILLed mid-run; every result it acknowledged (acted on) is in experiment.db."""
    storage = str(tmp_path / "killed")
    script = textwrap.dedent(
        f"""
        import time, ray, fluidsalus
        from fluidsalus.callbacks import Callback

        class Announce(Callback):
            def on_trial_result(self, trial_id, result):  # called only after the result's batch committed
                print(trial_id, result["training_iteration"], flush=True)

        def slow(config):
            for i in range(1000):
                time.sleep(0.002)
                fluidsalus.report({{"v": i}})

        ray.init(address={ray_cluster.get_runtime_context().gcs_address!r}, configure_logging=False)
        fluidsalus.run(slow, {{"x": fluidsalus.uniform(0, 1)}}, num_samples=4, callbacks=[Announce()],
                       storage_path={storage!r}, name="k", verbose=0)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acked = []
    for line in proc.stdout:  # type: ignore[union-attr]
        trial_id, iteration = line.split()
        acked.append((trial_id, int(iteration)))
        if len(acked) >= 150:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = ExperimentStore.open(os.path.join(storage, "k"), readonly=True)
    stored = {(r.trial_id, r.iteration) for r in store.results()}
    assert set(acked) <= stored
    assert store.experiment()["status"] == "RUNNING"  # never marked finished: a resume can pick it up


class _TwoRungs(fluidsalus.searchers.BaseSearcher):
    """A tiny synchronous successive halving: 4 trials to budget 2, the best 2 promoted to budget 4."""

    def __init__(self):
        self.added, self.paused, self.stage = [], {}, 0

    def next_groups(self):
        if self.stage == 0:
            self.stage = 1
            return [fluidsalus.trialgroup.TrialGroup("rung0", [{"x": x} for x in (1, 2, 3, 4)], budget=2)]
        if self.stage == 1 and len(self.paused) == 4:
            self.stage = 2
            top = sorted(self.paused, key=self.paused.get, reverse=True)[:2]
            return [fluidsalus.trialgroup.TrialGroup("rung1", budget=4, trial_ids=top)]
        return []

    def on_trial_add(self, trial_id, group_id, config):
        self.added.append((trial_id, group_id, config["x"]))

    def on_result(self, trial_id, result):
        if result["training_iteration"] == 2:
            self.paused[trial_id] = result["score"]
        return fluidsalus.searchers.Decision.CONTINUE

    def collect_stops(self):
        if self.stage == 2:
            self.stage = 3
            return sorted(self.paused, key=self.paused.get, reverse=True)[2:]
        return []

    def is_finished(self):
        return self.stage == 3


def long_objective(config):
    for step in range(1, 100):
        fluidsalus.report({"score": config["x"] * step})


def test_groups_pause_at_budget_and_promoted_trials_continue_in_place(storage):
    searcher = _TwoRungs()
    grid = fluidsalus.run(long_objective, searcher=searcher, storage_path=storage, name="rungs", verbose=0)
    assert [g for _, g, _ in searcher.added] == ["rung0"] * 4
    iterations = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    assert iterations == {1: 2, 2: 2, 3: 4, 4: 4}  # the best two ran on to budget 4, the rest stopped at 2
    assert all(r.error is None for r in grid)
    reader = ExperimentStore.open(os.path.join(storage, "rungs"), readonly=True)
    promoted = [t for t in reader.trials() if t.group_id == "rung1"]
    assert len(promoted) == 2  # resumed in place, never restarted (a withdrawal before it began is no restart)
    assert not restarted_after_running(os.path.join(storage, "rungs")) & {t.trial_id for t in promoted}
    assert [e.data["outcome"] for e in reader.events("trial_end")].count("stopped") == 4
    assert {len(r.metrics_dataframe) for r in grid} == {2, 4}


def restored_iteration() -> int | None:
    """The iteration of the checkpoint the trial was restored from (None: it was not)."""
    restored = fluidsalus.get_checkpoint()
    if restored is None:
        return None
    with restored.as_directory() as d:
        return int(open(os.path.join(d, "it")).read())


def iteration_checkpoint(it: int) -> fluidsalus.Checkpoint:
    """A checkpoint that holds only the iteration it was taken at."""
    d = os.path.join(fluidsalus.get_context().get_trial_dir(), f"scratch{it}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "it"), "w") as f:
        f.write(str(it))
    return fluidsalus.Checkpoint.from_directory(d)


def flaky(config):
    """Fails at iteration 3 unless it was restored from a checkpoint; always fails when config says so."""
    restored = restored_iteration()
    start = restored or 0
    for it in range(start + 1, 6):
        if it == 3 and (restored is None or config["always"]):
            raise RuntimeError("flaky failure")
        fluidsalus.report({"it": it, "restored_from": start}, checkpoint=iteration_checkpoint(it))


def _flaky_steps(config):
    """Reports 10 timesteps per iteration, with a checkpoint at iteration 2 only; fails at iteration 3 once."""
    restored = restored_iteration()
    for it in range((restored or 0) + 1, 5):
        if it == 3 and restored is None:
            raise RuntimeError("flaky failure")
        fluidsalus.report({"timesteps_this_iter": 10}, checkpoint=iteration_checkpoint(it) if it == 2 else None)


def test_a_retried_trial_continues_rays_running_totals_from_its_checkpoint(storage):
    """Ray restores timesteps_total from the checkpoint's result: the retry from iteration 2 goes on at 30."""
    grid = fluidsalus.run(_flaky_steps, {"x": 1}, max_failures=1, storage_path=storage, name="steps", verbose=0)
    (result,) = grid
    assert result.error is None and result.metrics["timesteps_total"] == 40
    assert list(result.metrics_dataframe["timesteps_total"]) == [10, 20, 30, 40]
    assert result.metrics["timesteps_since_restore"] == 20  # counted from the restore, as Ray counts it


def test_failing_trials_are_retried_from_checkpoint_up_to_max_failures(storage):
    grid = fluidsalus.run(flaky, {"always": fluidsalus.grid_search([False, True])}, max_failures=2,
                          storage_path=storage, name="retry", verbose=0)
    recovered, hopeless = grid[0], grid[1]
    assert recovered.error is None and recovered.metrics["it"] == 5 and recovered.metrics["restored_from"] == 2
    assert list(recovered.metrics_dataframe["it"]) == [1, 2, 3, 4, 5]
    assert hopeless.error is not None and "flaky failure" in str(hopeless.error)
    reader = ExperimentStore.open(os.path.join(storage, "retry"), readonly=True)
    rows = {t.trial_id: t for t in reader.trials()}
    assert rows[recovered.trial_id].num_failures == 1 and rows[recovered.trial_id].attempt == 1
    assert rows[hopeless.trial_id].num_failures == 2 and rows[hopeless.trial_id].attempt == 2
    restarts = [e for e in reader.events("trial_restart") if e.trial_id == hopeless.trial_id]
    assert [e.data["reason"] for e in restarts] == ["retry", "retry"]
    assert all(e.data["from_iteration"] == 2 and "flaky failure" in e.data["traceback"] for e in restarts)
    # Ray's error.txt in each trial's folder: every failure appended, retried ones and the last, with its traceback
    for result, failures in ((recovered, 1), (hopeless, 3)):
        text = open(os.path.join(result.path, ERROR_FILE)).read()
        assert re.findall(r"^Failure # (\d+) \(occurred at \d{4}-\d\d-\d\d_\d\d-\d\d-\d\d\)$", text, re.M) == [
            str(n) for n in range(1, failures + 1)]
        assert text.count("Traceback (most recent call last)") == failures and text.count("flaky failure") >= failures
        # and Ray's error.pkl: the last failure, as the result's error gives it (Ray's Result.from_path reads it)
        with open(os.path.join(result.path, ERROR_PICKLE_FILE), "rb") as f:
            last = ray.cloudpickle.load(f)
        assert isinstance(last, RuntimeError) and isinstance(last, fluidsalus.TrialError)
        assert "flaky failure" in str(last)
    assert str(hopeless.error) == str(last)


def test_the_summary_lists_each_failed_trials_error_file_as_ray_does(storage, capsys):
    """Ray prints "Number of errored trials: N" and each failed trial's failures and error.txt at a run's end (a
    trial retried to its end marked ``*``); fluidsalus printed no error.txt path (h134's F8)."""
    grid = fluidsalus.run(flaky, {"always": fluidsalus.grid_search([False, True])}, max_failures=2,
                          storage_path=storage, name="errfiles", verbose=1)
    recovered, hopeless = grid[0], grid[1]
    out = capsys.readouterr().out.splitlines()
    start = out.index("Number of errored trials: 2")
    assert out[start + 1].split() == ["Trial", "name", "#", "failures", "error", "file"]
    rows = {line.split()[0]: line.split()[1:] for line in out[start + 2:start + 4]}
    assert rows == {recovered.trial_id: ["1*", os.path.join(recovered.path, ERROR_FILE)],
                    hopeless.trial_id: ["3", os.path.join(hopeless.path, ERROR_FILE)]}
    assert out[start + 4] == "* The trial terminated successfully after retrying."
    capsys.readouterr()
    fluidsalus.run(_improves_then_worsens, {"x": 1}, storage_path=storage, name="fine", verbose=1)
    assert "Number of errored trials" not in capsys.readouterr().out  # (no failure: no table)



def test_the_errored_table_marks_each_failed_trial_by_what_became_of_it(tmp_path, capsys) -> None:
    """The errored-trials table: an errored trial's failures unmarked, one retried to its end ``*`` (Ray's note), one
    that ended without running again ``+`` and an unfinished one ``~``, each note once and only for a mark shown; a
    trial ``restart_errored`` ran again anew (0 failures) is not listed, as Ray's restarted trial, a new one with no
    error file, is not (it was listed ``0*``, then ``0+``)."""
    from fluidsalus.api import _print_errored_table

    def trial(name: str, status: str, failures: int) -> types.SimpleNamespace:
        (tmp_path / name).mkdir()
        (tmp_path / name / ERROR_FILE).write_text("Failure # 1\n")
        return types.SimpleNamespace(_trial_name=None, trial_id=name, _num_failures=failures, status=status,
                                     path=str(tmp_path / name))

    grid = [trial("errored", "ERROR", 2), trial("retried", "TERMINATED", 1), trial("unstarted", "TERMINATED", 1),
            trial("unfinished", "PENDING", 1), trial("restarted", "TERMINATED", 0)]
    _print_errored_table(grid, {"unstarted", "restarted"})  # type: ignore[arg-type]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Number of errored trials: 4"
    assert {line.split()[0]: line.split()[1] for line in out[2:6]} == {
        "errored": "2", "retried": "1*", "unstarted": "1+", "unfinished": "1~"}
    assert out[6:] == ["* The trial terminated successfully after retrying.",
                       "+ The trial ended without running again after its failure.",
                       "~ The trial is unfinished: a resume of the experiment runs it on."]
    _print_errored_table(grid[-1:], {"restarted"})  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""  # (nothing failed since the restart: no table)

def fails_at_once_or_runs(config):
    """Fails before its first result when ``config["fail"]``, else reports for a while (longer than a test waits)."""
    if config["fail"]:
        raise ValueError("bad config")
    for it in range(1, 200):
        fluidsalus.report({"it": it})
        time.sleep(0.05)


def test_the_errored_table_names_a_trial_by_the_name_the_run_gave_it(storage, capsys):
    """Ray's table names a trial as its ``trial_name_creator`` does (``<trainable>_<id>`` by default, which the Tune
    front end gives as ``trial_name``): the table named it by its id (h148's F4)."""
    grid = fluidsalus.run(fails_at_once_or_runs, {"fail": True}, storage_path=storage, name="named",
                          trial_name=lambda trial_id: f"named_{trial_id}", verbose=1)
    out = capsys.readouterr().out.splitlines()
    start = out.index("Number of errored trials: 1")
    assert out[start + 2].split() == [f"named_{grid[0].trial_id}", "1", os.path.join(grid[0].path, ERROR_FILE)]


class _InterruptAfterAFailure(fluidsalus.callbacks.Callback):
    """A Ctrl-C at the first result after a trial failed for good."""

    def __init__(self) -> None:
        self.failed = False

    def on_trial_complete(self, trial_id, status, result):
        self.failed = self.failed or status == "ERROR"

    def on_trial_result(self, trial_id, result):
        if self.failed:
            raise KeyboardInterrupt


def test_an_interrupted_run_lists_its_errored_trials_as_ray_does(storage, capsys):
    """Ray prints its errored trials on an interrupted run too (before its "Experiment has been interrupted"); the
    table came only with a finished run's summary (h148's F3). The summary itself is a finished run's."""
    with pytest.raises(KeyboardInterrupt):
        fluidsalus.run(fails_at_once_or_runs, {"fail": fluidsalus.grid_search([True, False])}, storage_path=storage,
                       name="cut", callbacks=[_InterruptAfterAFailure()], verbose=1)
    out = capsys.readouterr().out
    grid = fluidsalus.ResultGrid.read(os.path.join(storage, "cut"))
    failed = next(r for r in grid if r.status == "ERROR")
    assert "Number of errored trials: 1" in out and "fluidsalus: 2 trials in" not in out
    rows = out.split("Number of errored trials: 1\n")[1].splitlines()
    assert rows[1].split() == [failed.trial_id, "1", os.path.join(failed.path, ERROR_FILE)]


def fails_with_its_value(config):
    fluidsalus.report({"it": 1})
    raise ValueError(f"bad value {config['v']}")


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_a_trial_that_fails_for_good_is_printed_the_first_with_its_traceback(storage, capsys, verbose):
    grid = fluidsalus.run(fails_with_its_value, {"v": fluidsalus.grid_search([1, 2])}, storage_path=storage,
                          name="loud", verbose=verbose)
    assert len(grid.errors) == 2
    err = capsys.readouterr().err
    ends = sorted(line.split(" errored after 1 iteration: ")[1] for line in err.splitlines()
                  if " errored after " in line)
    # As Ray logs each trial failure, at verbose=0 too (where nothing was printed, and a Ray user lost the only sign
    # that a trial failed): one line per trial, the first with its traceback (each with verbose=2)
    assert ends == ["ValueError: bad value 1", "ValueError: bad value 2"]
    assert err.count("Traceback (most recent call last)") == (2 if verbose >= 2 else 1)
    assert "raise ValueError(f\"bad value {config['v']}\")" in err
    assert err.count("every errored trial's traceback is in ResultGrid.errors") == 1


def fails_once_past_a_checkpoint(config):
    """Checkpoints at even iterations only, and fails at iteration 4 unless restored: its retry resumes from
    iteration 2 and runs iteration 3 again."""
    restored = restored_iteration()
    start = restored or 0
    for it in range(start + 1, 6):
        if it == 4 and restored is None:
            raise RuntimeError("fails once")
        checkpoint = iteration_checkpoint(it) if it % 2 == 0 else None
        fluidsalus.report({"it": it, "attempt_from": start}, checkpoint=checkpoint)


class RecordingSearch(RandomSearch):
    """Random search that records every result it is given, and each trial's end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[int, int]] = []
        self.calls: dict[str, list[int | str]] = {}  # trial -> its results' iterations, then "complete"

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self.seen.append((result["training_iteration"], result.get("attempt_from", 0)))
        self.calls.setdefault(trial_id, []).append(result["training_iteration"])
        return super().on_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self.calls.setdefault(trial_id, []).append("complete")
        super().on_trial_complete(trial_id, result, error=error)


def test_iterations_run_again_after_a_restart_are_stored_but_not_decided_on_twice(storage):
    searcher = RecordingSearch({"x": 1}, num_samples=1)
    grid = fluidsalus.run(fails_once_past_a_checkpoint, searcher=searcher, max_failures=1, storage_path=storage,
                          name="redo", verbose=0)
    (result,) = grid
    assert result.error is None and list(result.metrics_dataframe["it"]) == [1, 2, 3, 4, 5]
    reader = ExperimentStore.open(os.path.join(storage, "redo"), readonly=True)
    stored = [(r.iteration, r.metrics["attempt_from"])
              for r in reader.results(result.trial_id, latest_attempt_only=False)]
    assert stored == [(1, 0), (2, 0), (3, 0), (3, 2), (4, 2), (5, 2)]  # iteration 3 ran twice, both kept
    # The searcher decided on each iteration once: on the first run of iteration 3, not on its repeat. The
    # results before the failure are given even when they arrive with it, the retry's last ones even when they
    # arrive with the trial's end.
    assert searcher.seen == [(1, 0), (2, 0), (3, 0), (4, 2), (5, 2)]
    assert searcher.calls[result.trial_id][-1] == "complete"


def burst(config):
    for i in range(REPORTS_PER_BURST):
        fluidsalus.report({"v": config["x"] + i})


#: Results `burst` reports back to back and then returns: they reach the driver with the trial's end (as a rule).
REPORTS_PER_BURST = 6


def test_results_that_arrive_with_the_trials_end_are_given_before_it(storage):
    searcher = RecordingSearch({"x": fluidsalus.uniform(0, 1)}, num_samples=8, seed=1)
    grid = fluidsalus.run(burst, searcher=searcher, storage_path=storage, verbose=0)
    assert grid.num_errors == 0 and len(grid) == 8
    # Each trial's results in order, each once, then its end: the same sequence whatever the batching was.
    expected = [*range(1, REPORTS_PER_BURST + 1), "complete"]
    assert searcher.calls == {r.trial_id: expected for r in grid}


def sleepy(config):
    for i in range(4):
        time.sleep(0.01)
        fluidsalus.report({"i": i})


@pytest.mark.parametrize("policy", ["fifo", "rr"])
def test_lane_activity_is_recorded_in_the_store(storage, policy):
    grid = fluidsalus.run(sleepy, {"x": fluidsalus.grid_search(list(range(6)))}, lane_policy=policy,
                          devices=1, cpus_per_device=1, max_concurrent_trials=3, storage_path=storage, verbose=0)
    assert grid.num_errors == 0
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    kinds = [e.kind for e in reader.events()]
    assert {"lane_open", "lane_admit", "lane_leave", "lane_close", "switch"} <= set(kinds)
    switches = reader.events("switch")
    assert all(e.data["latency_ms"] >= 0 and e.data["from"] != e.trial_id for e in switches)


def endless(config):
    for i in range(1000):
        time.sleep(0.005)
        fluidsalus.report({"v": config["x"] + i})


def test_endless_search_ends_with_its_time_budget(storage):
    # The budget counts the device actors' start too (as Ray's does): 6 s leaves room for trials even when the
    # actors start slowly on a loaded 2-core machine (3 s did not, with a second test run beside it).
    budget = 6
    started = time.time()
    grid = fluidsalus.run(endless, {"x": fluidsalus.uniform(0, 1)}, num_samples=-1, time_budget_s=budget,
                          storage_path=storage, name="budget", verbose=0)
    assert time.time() - started < budget + 15  # the budget plus start-up and one boundary per trial
    # How many trials started before the budget ran out depends on how fast the actors started (none did within
    # 8 s in a similar Tune test once, under load); every trial that did ended cleanly, stopped by the budget.
    assert grid.num_errors == 0 and all(r.status == "TERMINATED" for r in grid)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert [e.data["reason"] for e in reader.events("experiment_ending")] == ["time_budget"]


def test_a_time_budget_that_ends_before_any_trial_started_says_so(storage, caplog):
    """It ended the run FINISHED with no trial run and no word (a helper's goodput audit: 3 s against a 6 s start
    of the devices on a loaded machine)."""
    import logging

    with caplog.at_level(logging.WARNING, logger="fluidsalus"):
        grid = fluidsalus.run(endless, {"x": fluidsalus.uniform(0, 1)}, num_samples=2, time_budget_s=0.001,
                              storage_path=storage, name="too_short", verbose=0)
    # the search's trials are made before the first check, and end never started (the grid was empty)
    assert len(grid) == 2 and all(r.status == "TERMINATED" and "v" not in r.metrics for r in grid)
    assert any("time_budget_s=0.001 ended the run before any trial started or reported" in r.getMessage()
               for r in caplog.records)


class _StopAfter:
    """A Ray-style Stopper: per trial after 3 results; the whole experiment once 10 results were seen."""

    def __init__(self):
        self.seen = 0

    def __call__(self, trial_id, result):
        self.seen += 1
        return result["training_iteration"] >= 3

    def stop_all(self):
        return self.seen >= 10


def test_stopper_stops_trials_and_stop_all_ends_the_experiment(storage):
    grid = fluidsalus.run(endless, {"x": fluidsalus.uniform(0, 1)}, num_samples=-1, stop=_StopAfter(),
                          storage_path=storage, name="stopper", verbose=0)
    ran = [r for r in grid if "training_iteration" in r.metrics]  # proposed, never started: only a trial_id
    assert ran and all(r.metrics["training_iteration"] <= 3 for r in ran)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert [e.data["reason"] for e in reader.events("experiment_ending")] == ["stop_all"]


def hangs_after_a_report(config):
    fluidsalus.report({"v": 0})
    while True:  # reaches no report again: the stop at the run's end never reaches it
        time.sleep(0.05)


class _StopAllSoonAfterAResult:
    """Lets the first result go on, then ends the experiment a moment later."""

    def __init__(self):
        self.first = None

    def __call__(self, trial_id, result):
        self.first = self.first or time.time()
        return False

    def stop_all(self):
        return self.first is not None and time.time() - self.first > 0.3


def test_a_trial_that_reaches_no_report_after_the_run_began_to_end_is_ended_after_a_grace(storage, monkeypatch):
    """The run waited for ever for a hung trial to reach the report the stop waits at (a helper's time_budget_s
    run went on past 295 s). It ends without it after RUN_END_GRACE_S, with the results it had, and its device
    is ended."""
    from fluidsalus.trialgroup import executor as executor_module

    monkeypatch.setattr(executor_module, "RUN_END_GRACE_S", 1.0)
    started = time.time()
    grid = fluidsalus.run(hangs_after_a_report, {"x": 1}, stop=_StopAllSoonAfterAResult(), storage_path=storage,
                          name="hung", verbose=0)
    assert time.time() - started < 60
    [hung] = grid
    assert grid.num_errors == 0 and hung.status == "TERMINATED" and hung.metrics["training_iteration"] == 1
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert [e.data["reason"] for e in reader.events("experiment_ending")] == ["stop_all"]
    assert [(e.trial_id, e.data["reason"]) for e in reader.events("trial_abandoned")] == [(hung.trial_id, "stop_all")]


def reports_a_lock(config):
    import threading

    for i in range(4):
        extra = threading.Lock() if config["bad"] and i == 1 else None
        fluidsalus.report({"v": i, "extra": extra})


def test_a_result_that_does_not_pickle_fails_its_trial_not_the_run(storage):
    """The device's batch failed to pickle on its way to the driver: the run ended with Ray's error naming neither
    the trial nor the key, and every trial stayed RUNNING (a helper's test)."""
    grid = fluidsalus.run(reports_a_lock, {"bad": fluidsalus.grid_search([True, False])}, storage_path=storage,
                          name="lock", verbose=0)
    bad, good = sorted(grid, key=lambda r: not r.config["bad"])
    assert good.error is None and good.metrics["training_iteration"] == 4
    assert bad.metrics["training_iteration"] == 1
    assert "the value of 'extra' (lock) cannot be sent to the driver" in str(bad.error)


def fails_on_negative(config):
    for i in range(50):
        time.sleep(0.01)
        if config["x"] < 0 and i == 1:
            raise ValueError("negative x")
        fluidsalus.report({"v": i})


@pytest.mark.parametrize("mode", [True, "raise"])
def test_fail_fast_ends_the_experiment_at_the_first_failure(storage, mode):
    kwargs = dict(num_samples=1, fail_fast=mode, storage_path=storage, name=f"ff{mode}", verbose=0,
                  max_concurrent_trials=2)
    config = {"x": fluidsalus.grid_search([-1, 1, 2, 3, 4, 5])}
    if mode == "raise":
        with pytest.raises(fluidsalus.TrialError, match="negative x") as raised:
            fluidsalus.run(fails_on_negative, config, **kwargs)
        assert isinstance(raised.value, ValueError)  # the trial's own type too, as Ray's RayTaskError(ValueError)
        # with the trial's traceback, as its Result.error has it (it was one line: a helper's side by side)
        assert 'raise ValueError("negative x")' in str(raised.value)
        return
    grid = fluidsalus.run(fails_on_negative, config, **kwargs)
    assert grid.num_errors == 1
    assert sum(1 for r in grid if r.metrics.get("training_iteration") == 50) == 0  # nobody finished


class CodedError(Exception):
    """A script's exception whose ``__init__`` takes more than its message, and keeps it as an attribute."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def fails_with_a_code(config):
    fluidsalus.report({"v": 1})
    raise CodedError(f"code {config['code']}", config["code"])


def test_a_failed_trials_exception_comes_to_the_driver_as_the_errors_cause(storage):
    """The result's error, its error.pkl, a reader of the experiment and ``fail_fast="raise"``'s exception all
    carry the trial's exception as Ray's ``RayTaskError.cause`` (before: its text only, ``error.code`` raised)."""
    grid = fluidsalus.run(fails_with_a_code, {"code": fluidsalus.grid_search([7])}, storage_path=storage,
                          name="cause", verbose=0)
    error = grid[0].error
    assert isinstance(error, CodedError) and isinstance(error.cause, CodedError)
    assert error.cause.code == 7 and error.code == 7 and str(error.cause) == "code 7"
    with open(os.path.join(grid[0].path, ERROR_PICKLE_FILE), "rb") as f:
        assert ray.cloudpickle.load(f).cause.code == 7
    assert fluidsalus.ResultGrid.read(os.path.join(storage, "cause"))[0].error.cause.code == 7
    with pytest.raises(fluidsalus.TrialError, match="code 8") as raised:
        fluidsalus.run(fails_with_a_code, {"code": 8}, storage_path=storage, name="cause_ff", fail_fast="raise",
                       verbose=0)
    assert isinstance(raised.value, CodedError) and raised.value.cause.code == 8

def _fails_at_2_until_marked(config):
    for i in range(1, 4):
        time.sleep(0.1)
        if config["x"] == 0.2 and i == 2 and not os.path.exists(config["mark"]):
            raise RuntimeError("x=0.2 fails")
        fluidsalus.report({"i": i})


def test_a_native_resume_after_fail_fast_raise_tells_the_searcher_the_raised_failure(storage, tmp_path):
    """``fail_fast="raise"`` keeps every end from the searcher, as Ray's raise (``Executor._withholds_end``); the
    native API never runs the raised trial again, so its resume tells the searcher that failure
    (``fluidsalus.api.tell_raised_end``): an Optuna study held it ``RUNNING`` for ever. The others run on and are
    told their ends."""

    mark = str(tmp_path / "fixed")

    def searcher():
        return OptunaSearch({"x": fluidsalus.uniform(0, 1), "mark": mark}, num_samples=3, metric="i", mode="max",
                            seed=1, points_to_evaluate=[{"x": 0.2, "mark": mark}, {"x": 0.3, "mark": mark},
                                                        {"x": 0.1, "mark": mark}])

    def told() -> dict[float, tuple[str, float | None]]:
        return study_told(os.path.join(storage, "raised"))

    kwargs = {"storage_path": storage, "name": "raised", "fail_fast": "raise", "verbose": 0,
              "max_concurrent_trials": 3}
    with pytest.raises(fluidsalus.TrialError, match="x=0.2 fails"):
        fluidsalus.run(_fails_at_2_until_marked, searcher=searcher(), **kwargs)
    # The raised failure is not told; a trial that completed before it may have been (on a loaded machine x=0.3,
    # 0.3 s long, completed before x=0.2 failed at 0.2 s: its device started first).
    assert 0.2 not in told() and all(state == "COMPLETE" for state, _ in told().values())
    open(mark, "w").close()
    grid = fluidsalus.run(_fails_at_2_until_marked, searcher=searcher(), resume=True, **kwargs)
    assert sorted((r.config["x"], r.error is None) for r in grid) == [(0.1, True), (0.2, False), (0.3, True)]
    assert told() == {0.1: ("COMPLETE", 3.0), 0.2: ("FAIL", None), 0.3: ("COMPLETE", 3.0)}



def _a_fails_twice_then_b(config):
    """``a`` fails at once, both attempts (``max_failures=1``: its second failure is for good); ``b`` fails a moment
    after ``a``'s second attempt began, before its next report: within ``fail_fast="raise"``'s end."""
    folder = config["dir"]
    fluidsalus.report({"i": 1})
    if config["w"] == "a":
        second = os.path.exists(os.path.join(folder, "a1"))
        open(os.path.join(folder, "a2" if second else "a1"), "w").close()
        raise RuntimeError("a fails")
    while not os.path.exists(os.path.join(folder, "a2")):
        time.sleep(0.01)
    time.sleep(1.0)
    raise RuntimeError("b fails")


def test_a_trial_that_fails_within_fail_fast_raises_end_is_not_retried_nor_counted(storage, tmp_path):
    """A trial that fails after ``fail_fast="raise"``'s failure, within the run's end, is no failure of it (Ray raises
    the first failure at once and never sees a later one): not retried under ``max_failures``, no failure counted,
    no error file; unfinished for a resume. It ended ``ERROR`` with its error file (``num_failures`` 1 in the
    callbacks' view), and one that failed before the run's end stopped it was retried under ``max_failures``."""
    folder = tmp_path / "marks"
    folder.mkdir()
    # One device of two slots: a and b compute at once. (With a slot each, a run that began on one device, the other
    # still starting, put both in its one lane, where a trial computes only between the other's reports: b waited
    # for a's second attempt for ever, and a's second attempt for b's next report.)
    with pytest.raises(fluidsalus.TrialError, match="a fails"):
        fluidsalus.run(_a_fails_twice_then_b, {"w": fluidsalus.grid_search(["a", "b"]), "dir": str(folder)},
                       storage_path=storage, name="raised", fail_fast="raise", max_failures=1, verbose=0,
                       max_concurrent_trials=2, devices=1, cpus_per_trial=0.5)
    path = os.path.join(storage, "raised")
    reader = ExperimentStore.open(path, readonly=True)
    try:
        rows = {row.config["w"]: row for row in reader.trials()}
        assert {w: (row.status, row.num_failures) for w, row in rows.items()} == {"a": ("ERROR", 1),
                                                                                 "b": ("PENDING", 0)}
        b_starts = [e for e in reader.events("trial_start") if e.trial_id == rows["b"].trial_id]
        assert len(b_starts) == 1
        assert [e.data["reason"] for e in reader.events("trial_restart") if e.trial_id == rows["b"].trial_id] == []
    finally:
        reader.close()
    assert os.path.exists(os.path.join(path, rows["a"].trial_id, ERROR_FILE))
    assert not os.path.exists(os.path.join(path, rows["b"].trial_id, ERROR_FILE))

def keeps_checkpoints(config):
    for i, score in enumerate(config["scores"], start=1):
        d = os.path.join(fluidsalus.get_context().get_trial_dir(), f"c{i}")
        os.makedirs(d, exist_ok=True)
        fluidsalus.report({"val": {"score": score}, "score": score}, checkpoint=fluidsalus.Checkpoint.from_directory(d))


def _iterations(checkpoints):
    return [int(os.path.basename(c.path).rsplit("_", 1)[1]) for c, _ in checkpoints]


@pytest.mark.parametrize("attribute", ["score", "val/score"])
def test_checkpoint_retention_keeps_the_best_and_the_latest(storage, attribute):
    """Ray's rules: the ``num_to_keep`` best by the score (a nested one by its flattened name too), and always the
    latest; ``best_checkpoints`` lists the best, worst first, without the latest unless it is one of them."""
    grid = fluidsalus.run(keeps_checkpoints, {"scores": [5, 1, 9, 2, 3, 4]}, checkpoint_num_to_keep=2,
                          checkpoint_score_attribute=attribute, checkpoint_score_order="max", storage_path=storage,
                          name="keep", verbose=0)
    result = grid[0]
    assert _iterations(result.best_checkpoints) == [1, 3]  # scores 5 and 9, worst first
    on_disk = sorted(d for d in os.listdir(result.path) if d.startswith("checkpoint_"))
    assert on_disk == ["checkpoint_000001", "checkpoint_000003", "checkpoint_000006"]  # and 6, the latest
    assert _iterations([(result.checkpoint, {})]) == [6]
    assert result.get_best_checkpoint("score", "max").path.endswith("checkpoint_000003")
    # each with the config it was reported with, as Ray's (a helper's m["config"] was a KeyError)
    assert [m["config"] for _, m in result.best_checkpoints] == [{"scores": [5, 1, 9, 2, 3, 4]}] * 2


def test_a_checkpoints_config_is_that_of_the_last_result_of_its_iteration():
    """Under PBT a trial's configuration changes at an exploit: a checkpoint's result carries the configuration of
    the last stored result of its iteration (else the trial's), as Ray's carries the one it was reported with."""
    from fluidsalus.result import _configs_by_iteration

    def _config_at(iteration, rows, configs, config):
        return _configs_by_iteration(rows, configs).get(iteration, config)

    rows = [{"training_iteration": 1}, {"training_iteration": 2}, {"training_iteration": 2}]
    configs = [{"lr": 1}, {"lr": 1}, {"lr": 2}]
    assert _config_at(1, rows, configs, {"lr": 3}) == {"lr": 1}
    assert _config_at(2, rows, configs, {"lr": 3}) == {"lr": 2}  # the later report of iteration 2 (after a rollback)
    assert _config_at(7, rows, configs, {"lr": 3}) == {"lr": 3}  # none: the trial's
    assert _config_at(1, rows, [], {"lr": 3}) == {"lr": 3}  # an older store without per-row configs


def test_a_nan_score_ranks_below_every_checkpoint_and_never_displaces_a_better_one(storage):
    """A NaN score was kept as one of the best, and the checkpoint it displaced (score 7) was deleted; Ray ranks
    NaN below everything."""
    nan = float("nan")
    grid = fluidsalus.run(keeps_checkpoints, {"scores": [3, nan, 9, 1, 7, 2]}, checkpoint_num_to_keep=2,
                          checkpoint_score_attribute="score", storage_path=storage, name="nan", verbose=0)
    result = grid[0]
    assert [m["score"] for _, m in result.best_checkpoints] == [7, 9]
    assert sorted(d for d in os.listdir(result.path) if d.startswith("checkpoint_")) == [
        "checkpoint_000003", "checkpoint_000005", "checkpoint_000006"]


@pytest.mark.parametrize(("order", "expected"), [("max", [1, 3, 7, 9]), ("min", [9, 7, 3, 1])])
def test_best_checkpoints_go_from_worst_to_best_as_in_ray(storage, order, expected):
    grid = fluidsalus.run(keeps_checkpoints, {"scores": [3, 9, 1, 7]}, checkpoint_score_attribute="score",
                          checkpoint_score_order=order, storage_path=storage, name=f"order_{order}", verbose=0)
    result = grid[0]
    assert [m["score"] for _, m in result.best_checkpoints] == expected
    assert _iterations([(result.checkpoint, {})]) == [4]  # the latest, whatever its score


def test_rank_checkpoints_is_rays_order():
    """Worst first: NaN and non-numbers lowest, then a missing score (minus infinity), then by score; ties and
    no attribute by report order."""
    from fluidsalus.result import rank_checkpoints

    nan = float("nan")
    results = [{"s": 2}, {"s": nan}, {}, {"s": 5}, {"s": "high"}, {"s": 2}, None]
    assert rank_checkpoints(results, "s", "max") == [1, 4, 2, 6, 0, 5, 3]
    assert rank_checkpoints(results, "s", "min") == [1, 4, 2, 6, 3, 0, 5]
    assert rank_checkpoints(results, None) == list(range(7))
    assert rank_checkpoints([{"a": {"b": 1}}, {"a": {"b": 0}}], "a/b") == [1, 0]


def asks_driver(config):
    total = fluidsalus.session.call_driver("add", config["x"], 10)
    fluidsalus.report({"total": total})
    try:
        fluidsalus.session.call_driver("boom")
    except KeyError as e:
        fluidsalus.report({"total": total, "error": str(e)})


def test_trials_call_the_driver_and_get_answers_or_errors(storage):
    seen = []

    def handler(trial_id, method, args):
        seen.append((trial_id, method))
        if method == "add":
            return sum(args)
        raise KeyError(f"no method {method}")

    grid = fluidsalus.run(asks_driver, {"x": fluidsalus.grid_search([1, 2])}, call_handler=handler,
                          storage_path=storage, name="calls", verbose=0)
    assert sorted(r.metrics["total"] for r in grid) == [11, 12]
    assert all("no method boom" in r.metrics["error"] for r in grid)
    assert sorted(m for _, m in seen) == ["add", "add", "boom", "boom"]


def checkpoints_each_step(config):
    start = 0
    if fluidsalus.get_checkpoint() is not None:
        with fluidsalus.get_checkpoint().as_directory() as d:
            start = int(open(os.path.join(d, "it")).read())
    for it in range(start + 1, 9):
        time.sleep(0.02)
        d = os.path.join(fluidsalus.get_context().get_trial_dir(), f"s{it}")
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "it"), "w").write(str(it))
        fluidsalus.report({"it": it, "start": start}, checkpoint=fluidsalus.Checkpoint.from_directory(d))


class _KillDeviceOnce(fluidsalus.callbacks.Callback):
    def __init__(self, after: int):
        self.after, self.seen, self.acked, self.killed = after, 0, [], False

    def on_trial_result(self, trial_id, result):
        import ray

        self.seen += 1
        self.acked.append((trial_id, result["training_iteration"]))
        if self.seen == self.after and not self.killed:
            names = [n for n in ray.util.list_named_actors() if n.startswith("fluidsalus:killed:")]
            assert names, "no named device actor found"
            ray.kill(ray.get_actor(names[0]))
            self.killed = True


def test_a_killed_device_actor_loses_nothing_and_its_trials_resume_from_checkpoints(storage):
    fluidsalus.release_devices()  # this run starts actors of its own, named after it (the killer finds them so)
    killer = _KillDeviceOnce(after=6)
    grid = fluidsalus.run(checkpoints_each_step, {"x": fluidsalus.grid_search([1, 2, 3])}, callbacks=[killer],
                          storage_path=storage, name="killed", verbose=0)
    assert killer.killed
    assert grid.num_errors == 0 and all(r.metrics["it"] == 8 for r in grid)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    stored = {(r.trial_id, r.iteration) for r in reader.results(latest_attempt_only=False)}
    assert set(killer.acked) <= stored  # no acknowledged result lost
    # (A replacement actor starts too, but the run does not wait for it: here the other device may finish the
    # trials first. test_a_device_that_dies_twice_in_a_second_gets_a_replacement_each_time has one device.)
    assert reader.events("device_died")
    restarted = [e for e in reader.events("trial_restart") if e.data["reason"] == "device_died"]
    assert restarted  # the trials on the dead actor resumed...
    resumed = [r for r in grid if r.metrics["start"] > 0]
    assert resumed  # ...from their checkpoints, not from scratch
    for r in grid:
        assert list(r.metrics_dataframe["it"]) == list(range(1, 9))


def _sleeps(config):
    for it in range(1, 4):
        time.sleep(0.05)
        fluidsalus.report({"it": it, "x": config["x"]})


class _ReleaseAfter(fluidsalus.callbacks.Callback):
    """Kills the actor that holds a core (another workload's) once the run has stored ``after`` results."""

    def __init__(self, blocker: Any, after: int):
        self.blocker, self.after, self.seen = blocker, after, 0

    def on_trial_result(self, trial_id, result):
        import ray

        self.seen += 1
        if self.seen == self.after:
            ray.kill(self.blocker)


#: How long a trial of the first device waits for one to start on the device that joins: far more than an actor
#: start (1-5 s), less than ACTOR_START_TIMEOUT_S, so that a device that never joins fails the test's assertions.
JOIN_WAIT_S = 60.0


def _waits_for_a_second_process(config):
    """Reports once, then waits until trials have run in two processes (the first device's and the one that joins),
    so that the run lasts until then however long the joining actor takes to start."""
    marks = Path(config["marks"])
    (marks / str(os.getpid())).touch()
    fluidsalus.report({"it": 1, "x": config["x"]})
    while len(list(marks.iterdir())) < 2 and time.time() < config["deadline"]:
        time.sleep(0.05)
    for it in range(2, 4):
        fluidsalus.report({"it": it, "x": config["x"]})


def test_a_run_goes_on_with_the_devices_that_start_and_the_others_join_when_their_cores_free_up(storage, caplog):
    """Another workload holds one of the two cores: the run starts on the other device (instead of waiting for
    both until ACTOR_START_TIMEOUT_S and failing), and the second device joins once the core is free."""
    import logging

    import ray

    caplog.set_level(logging.INFO, logger="fluidsalus.trialgroup.executor")  # (at verbose=0 the line is INFO)

    @ray.remote(num_cpus=1)
    class Holder:
        def ready(self) -> bool:
            return True

    blocker = Holder.remote()
    ray.get(blocker.ready.remote())
    began = time.time()
    marks = Path(storage) / "marks"
    marks.mkdir(parents=True)
    grid = fluidsalus.run(_waits_for_a_second_process, {"x": fluidsalus.grid_search(list(range(12))),
                                                        "marks": str(marks), "deadline": time.time() + JOIN_WAIT_S},
                          devices=2, cpus_per_device=1, callbacks=[_ReleaseAfter(blocker, after=1)],
                          storage_path=storage, name="shared", verbose=0)
    assert time.time() - began < ACTOR_START_TIMEOUT_S
    assert re.search(r"devices cpu:[01] have not started yet", caplog.text)  # the user is told why one is idle
    assert grid.num_errors == 0 and len(grid) == 12 and all(r.metrics["it"] == 3 for r in grid)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    waiting = reader.events("device_waiting")
    joined = [e for e in reader.events("device_start") if e.data.get("joined")]
    assert [e.device for e in waiting] == [joined[0].device] and len(joined) == 1
    first_place = min(e.ts for e in reader.events("place"))
    assert first_place < joined[0].ts  # trials ran before the second device was up...
    assert any(e.device == joined[0].device for e in reader.events("place"))  # ...and on it once it was
    late = inspect_experiment(grid.experiment_path).planner.late_devices
    assert list(late) == [joined[0].device] and late[joined[0].device] == joined[0].ts - waiting[0].ts


def test_two_runs_started_at_once_on_a_cluster_too_small_for_both_share_it(tmp_path):
    """Each run asks for both cores: each starts on the device it gets, instead of both waiting for the other."""
    outcomes: dict[str, Any] = {}

    def sweep(name: str) -> None:
        try:
            outcomes[name] = fluidsalus.run(_sleeps, {"x": fluidsalus.grid_search([1, 2, 3])}, devices=2,
                                            cpus_per_device=1, storage_path=str(tmp_path), name=name, verbose=0)
        except Exception as e:  # noqa: BLE001 - the assertion below shows it
            outcomes[name] = e

    threads = [threading.Thread(target=sweep, args=(name,)) for name in ("left", "right")]
    began = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.time() - began < ACTOR_START_TIMEOUT_S
    for name in ("left", "right"):
        grid = outcomes[name]
        assert not isinstance(grid, Exception), grid
        assert grid.num_errors == 0 and sorted(r.config["x"] for r in grid) == [1, 2, 3]


def dies_with_its_device_twice(config):
    """Kills its own device process at its first report, in its first two attempts (markers on disk)."""
    for it in range(1, 4):
        fluidsalus.report({"it": it})
        marks = sorted(os.listdir(config["marks"]))
        if it == 1 and len(marks) < 2:
            open(os.path.join(config["marks"], f"death{len(marks)}"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def test_a_device_that_dies_twice_in_a_second_gets_a_replacement_each_time(storage, tmp_path):
    """Each replacement actor has a name of its own (the device's name and its number). They were named after the
    second of the death: a second death within the same second asked Ray for the name of the first replacement,
    which Ray had not released yet, and the device was lost with the run (seen in tests/test_chaos.py, seed 181)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    fluidsalus.release_devices()  # its first actor is its own, named after it (not one a run before left warm)
    # (two deaths at one point while it computed alone are one failure of the trial: DEATHS_PER_FAILURE; one retry)
    grid = fluidsalus.run(dies_with_its_device_twice, {"marks": str(marks)}, devices=1, storage_path=storage,
                          name="twice", verbose=0, max_failures=1)
    assert grid.num_errors == 0 and [r.metrics["it"] for r in grid] == [3]
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        actors = [e.data["actor"] for e in reader.events("device_start")]
        deaths = reader.events("device_died")
    finally:
        reader.close()
    assert len(deaths) == 2 and len(actors) == 3
    assert actors[0].startswith("fluidsalus:twice:cpu:0:") and actors[1:] == [f"{actors[0]}:1", f"{actors[0]}:2"]


_TEST_PROCESS = os.getpid()


class _LoadsOnlyWhereAllowed:
    """A trainable that cannot be unpickled in a device process, or only in the first to take ``token`` when one
    is given (the others raise): a module that imports only on some machines, say."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    def __call__(self, config: dict[str, Any]) -> None:
        fluidsalus.report({"x": config["x"], "pid": os.getpid()})

    def __getstate__(self) -> dict[str, Any]:
        return {"token": self.token, "driver": _TEST_PROCESS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.token = state["token"]
        if os.getpid() == state["driver"]:
            return
        if self.token is not None:
            try:
                os.close(os.open(self.token, os.O_CREAT | os.O_EXCL))
                return
            except FileExistsError:
                pass
        raise RuntimeError("this trainable cannot be loaded here")


def test_a_run_whose_device_actors_all_fail_to_start_says_why_and_leaves_no_actor(ray_cluster, storage):
    fluidsalus.release_devices()
    with pytest.raises(FluidsalusError, match=r"(?s)no device actor started: that of cpu:[01] failed: .*"
                                              r"this trainable cannot be loaded here") as raised:
        fluidsalus.run(_LoadsOnlyWhereAllowed(None), {"x": fluidsalus.grid_search([1, 2])}, devices=2,
                       storage_path=storage, name="unloadable", verbose=0)
    assert "\x1b" not in str(raised.value)  # Ray's terminal colour codes are left out
    assert cpus_free_within(2, timeout_s=10), "a device actor of the failed run still holds a core"
    # No trial was made: nothing is kept (it was, marked ERROR, and the same name was refused once it could run)
    assert not os.path.exists(os.path.join(storage, "unloadable"))


def test_a_device_whose_actor_fails_to_start_is_lost_and_the_run_goes_on_with_the_others(ray_cluster, storage,
                                                                                         tmp_path):
    fluidsalus.release_devices()
    grid = fluidsalus.run(_LoadsOnlyWhereAllowed(str(tmp_path / "token")), {"x": fluidsalus.grid_search([1, 2, 3])},
                          devices=2, storage_path=storage, name="one_loads", verbose=0)
    assert grid.num_errors == 0 and sorted(r.metrics["x"] for r in grid) == [1, 2, 3]
    assert len({r.metrics["pid"] for r in grid}) == 1  # all on the device whose actor started
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        lost = reader.events("device_lost")
        assert len(lost) == 1 and "this trainable cannot be loaded here" in lost[0].data["error"]
        assert "\x1b" not in lost[0].data["error"]
        assert len(reader.events("device_start")) == 1
    finally:
        reader.close()
    fluidsalus.release_devices()
    assert cpus_free_within(2, timeout_s=10), "the lost device's actor still holds a core"


def _replacement_never_starts_script(storage: str, marks: str, gcs: str) -> str:
    """A driver whose device's replacement actor asks Ray for a resource no node has (it never starts)."""
    return textwrap.dedent(
        f"""
        import sys, time, ray, fluidsalus
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from test_run import dies_with_its_device_twice
        import fluidsalus.trialgroup.executor as executor
        from fluidsalus.errors import FluidsalusError
        from fluidsalus.gpu.actor import DeviceActor

        real, names = executor.start_device_actor, []

        def start(spec, payload, settings, name=None):
            names.append(name)
            if len(names) == 1:  # (the first starts in its own time: a loaded machine took more than 3 s)
                return real(spec, payload, settings, name)
            executor.ACTOR_START_TIMEOUT_S = 3.0  # (the replacement's wait)
            return DeviceActor.options(num_cpus=spec.cpus, name=name, resources={{"no_node_has_this": 1}}).remote(
                spec, payload, settings, list(sys.path))

        executor.start_device_actor = start
        ray.init(address={gcs!r}, configure_logging=False)
        try:
            fluidsalus.run(dies_with_its_device_twice, {{"marks": {marks!r}}}, devices=1, storage_path={storage!r},
                           name="lost", verbose=0)
        except FluidsalusError as e:
            print("ERROR", e, flush=True)
        deadline = time.time() + 30
        while time.time() < deadline:  # the replacement that never started is ended with the run
            try:
                ray.get_actor(names[1])
            except ValueError:
                print("REPLACEMENT GONE", flush=True)
                break
            time.sleep(0.1)
        """
    )


def test_a_run_whose_only_device_died_fails_when_its_replacement_does_not_start_in_time(tmp_path, ray_cluster):
    """No device is up and none comes up: the run fails as one whose devices never start does, naming what it
    asked for, instead of waiting for ever; the actor it asked for is ended, and the experiment can be resumed."""
    fluidsalus.release_devices()
    marks = tmp_path / "marks"
    marks.mkdir()
    storage = str(tmp_path / "results")
    script = _replacement_never_starts_script(storage, str(marks), ray_cluster.get_runtime_context().gcs_address)
    began = time.time()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^ERROR no device is up, and the device actors still starting did not start within 3 s\. "
                     r"Asked for: cpu:0 \(1 CPU\); Ray has available: .*Free resources or ask for fewer devices\.$",
                     proc.stdout, re.MULTILINE), proc.stdout + proc.stderr
    assert "REPLACEMENT GONE" in proc.stdout
    assert time.time() - began < ACTOR_START_TIMEOUT_S
    reader = ExperimentStore.open(os.path.join(storage, "lost"), readonly=True)
    try:
        assert reader.experiment()["status"] == "ERROR"
        assert [t.status for t in reader.trials()] != ["TERMINATED"]  # unfinished: a resumed run runs it again
        assert len(reader.events("device_died")) == 1
    finally:
        reader.close()


def _driver_script(storage: str, name: str, gcs: str) -> str:
    return textwrap.dedent(
        f"""
        import sys, ray, fluidsalus
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from test_run import checkpoints_each_step
        from fluidsalus.callbacks import Callback

        class Announce(Callback):
            def on_trial_result(self, trial_id, result):
                print(trial_id, result["training_iteration"], flush=True)

        ray.init(address={gcs!r}, configure_logging=False)
        fluidsalus.run(checkpoints_each_step, {{"x": fluidsalus.grid_search([1, 2, 3, 4])}}, callbacks=[Announce()],
                       storage_path={storage!r}, name={name!r}, verbose=0)
        """
    )


@pytest.mark.parametrize("how", ["sigkill", "ctrl_c"])
def test_an_interrupted_driver_resumes_to_the_results_of_an_uninterrupted_run(tmp_path, ray_cluster, how):
    storage, name = str(tmp_path / "results"), "interrupted"
    script = _driver_script(storage, name, ray_cluster.get_runtime_context().gcs_address)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = []
    for line in proc.stdout:  # type: ignore[union-attr]
        trial_id, iteration = line.split()
        acked.append((trial_id, int(iteration)))
        if len(acked) >= 10:
            break
    os.kill(proc.pid, signal.SIGKILL if how == "sigkill" else signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    exp = os.path.join(storage, name)
    before = ExperimentStore.open(exp, readonly=True)
    status = before.experiment()["status"]
    assert status == ("RUNNING" if how == "sigkill" else "INTERRUPTED"), stderr[-4000:]  # (why, where it was not)
    finished_before = {t.trial_id: len(before.results(t.trial_id)) for t in before.trials() if t.status == "TERMINATED"}
    assert set(acked) <= {(r.trial_id, r.iteration) for r in before.results(latest_attempt_only=False)}
    before.close()

    grid = fluidsalus.run(checkpoints_each_step, {"x": fluidsalus.grid_search([1, 2, 3, 4])}, storage_path=storage,
                          name=name, resume=True, verbose=0)
    # The same final results as a run that was never interrupted: every trial reached iteration 8.
    assert len(grid) == 4 and grid.num_errors == 0
    assert all(list(r.metrics_dataframe["it"]) == list(range(1, 9)) for r in grid)
    after = ExperimentStore.open(exp, readonly=True)
    for trial_id, count in finished_before.items():  # finished trials were not run again
        assert len(after.results(trial_id, latest_attempt_only=False)) == count
    assert any(r.metrics["start"] > 0 for r in grid)  # unfinished ones resumed from their checkpoints
    assert after.experiment()["status"] == "FINISHED"


#: Seconds the stand-in for a killed driver's device process lives in the test below.
ORPHAN_LIFE_S = 2.0


def test_a_resume_after_a_killed_driver_waits_for_its_device_processes_to_end(storage, caplog):
    """A SIGKILLed driver's device actors run its trials on until Ray ends them (about 2 s, a helper measured),
    writing checkpoint folders into the trials' folders; a resume started within that time ran the same trials
    beside them (the driver lock died with the driver). It now waits for the device processes that the
    experiment's ``device_start`` events name on this machine. Here the experiment is left as such a driver leaves
    it: RUNNING, its line in the lock file, and a device process still running (a stand-in that lives
    :data:`ORPHAN_LIFE_S`)."""
    import logging
    import socket

    from fluidsalus.store import LOCK_FILENAME

    grid = fluidsalus.run(objective, {"x": 1.0}, storage_path=storage, name="orphaned", verbose=0)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # (a pid no process has now: the killed driver's)
    born = time.time()
    orphan = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({ORPHAN_LIFE_S})"])
    try:
        store = ExperimentStore.open(grid.experiment_path)
        store.set_experiment(status="RUNNING", finished_at=None)
        # (the killed driver's devices started after its own resume: the first run's, still warm in this
        # process, are not its)
        store.add_events([(time.time(), "resume", None, None, {"unfinished": 0}),
                          (time.time() + 0.1, "device_start", None, "cpu:0",
                           {"pid": orphan.pid, "hostname": socket.gethostname()})])
        store.close()
        with open(os.path.join(grid.experiment_path, LOCK_FILENAME), "w") as f:
            f.write(f"pid {dead.pid} on {socket.gethostname()}, since 2026-11-30 12:00:00\n")
        with caplog.at_level(logging.WARNING, logger="fluidsalus.store"):
            again = fluidsalus.run(objective, {"x": 1.0}, storage_path=storage, name="orphaned", resume=True,
                                   verbose=0)
    finally:
        orphan.kill()
        orphan.wait()
    assert again.num_errors == 0 and len(again) == 1
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    resume = reader.events("resume")[-1]
    assert resume.ts >= born + ORPHAN_LIFE_S - 0.1  # not before the process ended
    assert f"waiting for 1 device process of the experiment's killed driver to end (pid {orphan.pid})" in caplog.text
    # A driver that let the experiment go cleanly (it empties its line) leaves nothing to wait for.
    start = time.time()
    with caplog.at_level(logging.WARNING, logger="fluidsalus.store"):
        caplog.clear()
        fluidsalus.run(objective, {"x": 1.0}, storage_path=storage, name="orphaned", resume=True, verbose=0)
    assert "waiting for" not in caplog.text and time.time() - start < ORPHAN_LIFE_S * 5


def test_a_resume_removes_the_staging_folders_of_checkpoint_copies_a_kill_cut_short(storage):
    """A process killed while it copied a checkpoint into a trial's folder (a killed driver's device process, which
    Ray ends shortly after its driver; the driver, copying an exploit's source) leaves its staging folder
    (``.incoming_*``) there, up to a checkpoint's size. No checkpoint is taken from one, but a resume left it for
    good (a helper's SIGKILLed drivers, checkpoints of 2 MB each iteration: one or two left in 3 of 3 runs). A resume
    now removes them, and only them."""
    from fluidsalus.checkpoint import STAGING_PREFIX

    grid = fluidsalus.run(checkpoints_each_step, {"x": 1}, storage_path=storage, name="cut", verbose=0)
    trial_dir = grid[0].path
    staging = os.path.join(trial_dir, f"{STAGING_PREFIX}cut_short")
    os.makedirs(os.path.join(staging, "half"))
    Path(staging, "it").write_text("4")
    kept = sorted(os.listdir(trial_dir))
    again = fluidsalus.run(checkpoints_each_step, {"x": 1}, storage_path=storage, name="cut", resume=True, verbose=0)
    assert not os.path.exists(staging)
    assert sorted(os.listdir(trial_dir)) == sorted(set(kept) - {os.path.basename(staging)})
    assert again[0].checkpoint.path == grid[0].checkpoint.path and os.path.isdir(again[0].checkpoint.path)


def asha_steps(config):
    for it in range(1, 10):
        time.sleep(0.02)
        fluidsalus.report({"score": config["x"] * it})


def _asha(num_samples: int):
    from fluidsalus.searchers import ASHA
    return ASHA({"x": fluidsalus.uniform(0, 1)}, num_samples, "score", "max", max_t=9, grace_period=1,
                reduction_factor=3, seed=0)


#: Most seconds the resumed run of the killed-driver test may go on after its last trial ended (its shutdown).
RESUMED_RUN_IDLE_BOUND_S = 15.0


def test_a_killed_driver_whose_searcher_state_was_saved_long_ago_resumes_from_the_logged_calls(tmp_path, ray_cluster):
    """The driver saves ASHA's whole state once (a save share so small that no second save is due), logs every
    later call, and is SIGKILLed mid-sweep. Its saved state plus the replayed calls know every stored trial
    and result; the resumed run makes no trial twice and ends with the state saved and the log empty."""
    from fluidsalus.store import loads
    from fluidsalus.trialgroup.searcher_log import replay

    storage, name = str(tmp_path / "results"), "logged"
    script = textwrap.dedent(f"""
        import sys, ray, fluidsalus
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import fluidsalus.trialgroup.searcher_log as searcher_log
        from test_run import _asha, asha_steps
        from fluidsalus.callbacks import Callback

        class Announce(Callback):
            def on_trial_result(self, trial_id, result):
                print(trial_id, result["training_iteration"], flush=True)

        searcher_log.SAVE_SHARE = 1e-12
        ray.init(address={ray_cluster.get_runtime_context().gcs_address!r}, configure_logging=False)
        fluidsalus.run(asha_steps, searcher=_asha(12), callbacks=[Announce()], storage_path={storage!r},
                       name={name!r}, verbose=0)
        """)
    # The devices earlier tests left warm hold cores the subprocess's own actors wait for (63 s once, in a full CI
    # run, where it takes 5 s alone).
    fluidsalus.release_devices()
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = 0
    for _ in proc.stdout:  # type: ignore[union-attr]
        acked += 1
        if acked >= 15:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    exp = os.path.join(storage, name)
    before = ExperimentStore.open(exp, readonly=True)
    calls = before.searcher_calls()
    assert len([c for c in calls if c[0] == "result"]) >= 15  # logged, not saved
    restored = _asha(12)
    restored.load_state_dict(loads(before.experiment()["searcher_state"]))
    saved_rung = set(restored.state_dict()["rungs"][0][-1])
    replay(restored, calls)
    state = restored.state_dict()
    assert set(state["trials"]) == {t.trial_id for t in before.trials()}
    reported = {r.trial_id for r in before.results()}
    assert set(state["rungs"][0][-1]) == reported and saved_rung < reported  # the first rung (milestone 1)
    before.close()

    # (The time budget only bounds a regression: a searcher that missed trials' ends would wait for them forever.)
    grid = fluidsalus.run(asha_steps, searcher=_asha(12), storage_path=storage, name=name, resume=True, verbose=0,
                          time_budget_s=60)
    assert len(grid) == 12 and grid.num_errors == 0  # no trial made twice
    after = ExperimentStore.open(exp, readonly=True)
    assert after.experiment()["status"] == "FINISHED" and after.searcher_calls() == []
    # Once its devices were up the resumed run took about 1 s here, also with the machine's two cores busy with
    # other work (it was 15 s from the call to the devices' start then: starting actors on a loaded machine). A
    # searcher that missed a trial's end would keep it waiting, until the time budget, after its last trial ended.
    resumed_start = max(e.ts for e in after.events("device_start"))
    last_end = max(e.ts for e in after.events("trial_end"))
    assert max(e.ts for e in after.events("device_stop")) - last_end < RESUMED_RUN_IDLE_BOUND_S
    assert last_end > resumed_start
    final = _asha(12)
    final.load_state_dict(loads(after.experiment()["searcher_state"]))
    assert final.is_finished() and set(final.state_dict()["rungs"][0][-1]) == {t.trial_id for t in after.trials()}


def _stored_results_of_this_trial() -> int:
    """The results of the calling trial (all its attempts) that the driver has stored."""
    context = fluidsalus.get_context()
    experiment = Path(context.get_trial_dir()).parent
    if not (experiment / DB_FILENAME).exists():
        return 0
    store = ExperimentStore.open(str(experiment), readonly=True)
    try:
        return len(store.results(context.get_trial_id(), latest_attempt_only=False))
    finally:
        store.close()


#: How long a trial that is about to end its process waits for the driver to store its last result.
STORED_RESULT_WAIT_S = 60.0


def _wait_until_stored(count: int) -> None:
    """Wait until the driver has stored ``count`` results of the calling trial. A process that ends before then takes
    with it the results the driver has not fetched: on a loaded machine, the end of the trial before it on the device
    too, which then counted as computing at the death (charged half of it: one death more, a failed run)."""
    deadline = time.monotonic() + STORED_RESULT_WAIT_S
    while _stored_results_of_this_trial() < count and time.monotonic() < deadline:
        time.sleep(0.02)


def ends_its_process_at_iteration_two(config: dict[str, Any]) -> None:
    """``k == 1`` ends its device process (as a segfault or the out-of-memory killer would) at the second
    iteration of each attempt, every time; the others report three iterations. With ``ckpt``, each report has a
    checkpoint, which the others restore and ``k == 1`` ignores: it starts over, while its iteration counter goes
    on from the checkpoint."""
    start = 0
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is not None and config["k"] != 1:
        start = int(Path(checkpoint.path, "i").read_text())
    stored_before = _stored_results_of_this_trial() if config["k"] == 1 else 0
    for i in range(start + 1, 4):
        time.sleep(0.05)
        if config["k"] == 1 and i == 2:
            _wait_until_stored(stored_before + 1)
            os._exit(1)
        saved = None
        if config["ckpt"]:
            folder = Path(fluidsalus.get_context().get_trial_dir(), f"s{i}")
            folder.mkdir(exist_ok=True)
            (folder / "i").write_text(str(i))
            saved = fluidsalus.Checkpoint.from_directory(str(folder))
        fluidsalus.report({"v": i}, checkpoint=saved)


# (Two of the four combinations: each costs several device processes, and each axis is shown with the other's
# harder case: a retry across deaths with checkpoints, and no retry without them.)
@pytest.mark.parametrize(("max_failures", "ckpt"), [(0, False), (1, True)])
def test_a_trial_that_ends_its_own_device_process_each_time_fails_instead_of_restarting_for_ever(
        ray_cluster, storage, max_failures, ckpt):
    """A device's death is not its trials' failure, so it used to restart them: a trial that kills its process at
    the same point every time was restarted for ever and the run never ended. Two deaths in a row while it
    computed alone, with no progress between them (``dispatch.DEATHS_PER_FAILURE``), count as one failure;
    ``max_failures`` retries it, then it errors with that reason. Its neighbours, which never computed at a death
    of their own device twice without getting further, finish. With ``ckpt``, the trial's iteration counter goes
    on from the checkpoint it does not restore, so it seemed to get further at each death and was again restarted
    for ever: an attempt that dies after as many iterations as the last one did has not got further."""
    from fluidsalus.trialgroup.dispatch import DEATHS_PER_FAILURE

    grid = fluidsalus.run(ends_its_process_at_iteration_two, {"k": fluidsalus.grid_search([0, 1, 2]), "ckpt": ckpt},
                          max_failures=max_failures, storage_path=storage, name=f"dies{max_failures}{ckpt}",
                          verbose=0, time_budget_s=120)  # (before: it ran until this budget ended it)
    assert grid.num_errors == 1
    (failed,) = [r for r in grid if r.error is not None]
    deaths = DEATHS_PER_FAILURE * (max_failures + 1)  # it computed alone at each: one device, one slot
    # each attempt reported one iteration: with checkpoints, the counter went on from the last one
    assert failed.config["k"] == 1 and failed.metrics["training_iteration"] == (deaths if ckpt else 1)
    assert f"died {deaths} times while it ran, each time before it got past iteration 1 or after 1 iteration " \
        "of its attempt" in str(failed.error)
    assert sorted(r.metrics["training_iteration"] for r in grid if r.error is None) == [3, 3]
    assert failed._num_failures == max_failures + 1  # Ray's count: the retried failures and the last one
    frame = inspect_experiment(grid.experiment_path).trials
    assert frame.set_index("trial_id").loc[failed.trial_id, "failures"] == max_failures + 1
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        assert len(store.events("device_died")) == deaths
        (row,) = [t for t in store.trials() if t.trial_id == failed.trial_id]
        assert row.num_failures == max_failures  # the retried ones, as for a trial whose error ended it
    finally:
        store.close()
    with open(os.path.join(failed.path, ERROR_FILE)) as f:
        assert f.read().count("Failure # ") == max_failures + 1  # one per counted failure, as Ray's file


def removes_its_experiment_folder(config: dict[str, Any]) -> None:
    """Four iterations; the trial with ``k == 0`` removes the whole experiment folder at its third (once)."""
    for i in range(1, 5):
        time.sleep(0.05)
        flag = Path(config["flag"])
        if config["k"] == 0 and i == 3 and not flag.exists():
            flag.write_text("done")
            # (ignore_errors: the driver may write its store back into the folder while the removal is still under
            # way, and the removal's last rmdir then finds the folder not empty: a failed test run once)
            shutil.rmtree(Path(fluidsalus.get_context().get_trial_dir()).parent, ignore_errors=True)
        fluidsalus.report({"v": i})


def test_an_experiment_folder_removed_during_the_run_gets_its_store_back(storage, tmp_path):
    """SQLite goes on writing a deleted file, so a run whose folder was removed ended "successfully" and left no
    store behind: no results, no inspect, no resume. The driver writes the store back (every row the open
    connection holds) and goes on writing it there."""
    flag = str(tmp_path / "removed")
    grid = fluidsalus.run(removes_its_experiment_folder, {"k": fluidsalus.grid_search([0, 1, 2]), "flag": flag},
                          storage_path=storage, name="removed", verbose=0)
    assert os.path.exists(flag) and grid.num_errors == 0
    store = ExperimentStore.open(os.path.join(storage, "removed"), readonly=True)
    try:
        assert store.experiment()["status"] == "FINISHED"
        assert sorted((r.trial_id, r.iteration) for r in store.results()) == sorted(
            (r.trial_id, i) for r in grid for i in range(1, 5))
        assert store.events("store_restored")
    finally:
        store.close()
    assert inspect_experiment(os.path.join(storage, "removed")).trial_counts["TERMINATED"] == 3


def loses_its_checkpoint_then_fails(config: dict[str, Any]) -> None:
    """Checkpoints at iterations 1 and 2; at 3 (the first time) removes the folder of the latest and raises."""
    start = 0
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is not None:
        start = int(Path(checkpoint.path, "i").read_text())
    for i in range(start + 1, 5):
        time.sleep(0.02)
        if i == 3 and not Path(config["flag"]).exists():
            Path(config["flag"]).write_text("done")
            shutil.rmtree(Path(fluidsalus.get_context().get_trial_dir(), "checkpoint_000002"))
            raise RuntimeError("planned")
        folder = Path(fluidsalus.get_context().get_trial_dir(), f"s{i}")
        folder.mkdir(exist_ok=True)
        (folder / "i").write_text(str(i))
        fluidsalus.report({"v": i}, checkpoint=fluidsalus.Checkpoint.from_directory(str(folder)) if i <= 2 else None)


def test_a_retry_whose_checkpoint_was_deleted_restarts_from_the_newest_one_left(storage, tmp_path):
    """A retried trial whose latest checkpoint folder was deleted meanwhile was given that folder and failed on
    it (a second failure); it now restarts from its newest checkpoint still on disk, as a resumed run does."""
    grid = fluidsalus.run(loses_its_checkpoint_then_fails, {"flag": str(tmp_path / "failed")}, max_failures=1,
                          storage_path=storage, name="lost", verbose=0)
    (result,) = grid
    assert result.error is None and result.metrics["training_iteration"] == 4
    store = ExperimentStore.open(os.path.join(storage, "lost"), readonly=True)
    try:
        (missing,) = store.events("checkpoint_missing")
        assert missing.data["path"].endswith("checkpoint_000002") and missing.data["instead"].endswith(
            "checkpoint_000001")
        (retry,) = [e for e in store.events("trial_restart") if e.data["reason"] == "retry"]
        assert retry.data["from_iteration"] == 1
    finally:
        store.close()


def test_a_resume_with_another_metric_or_mode_is_refused_and_changes_nothing(storage):
    """A resume kept the experiment's metric and mode whatever it was given, so its best result was silently
    not the one asked for."""
    fluidsalus.run(objective, {"x": 0.5}, metric="score", mode="max", storage_path=storage, name="obj", verbose=0)
    for metric, mode, field in (("other", "max", "metric='score'"), ("score", "min", "mode='max'")):
        with pytest.raises(ConfigError, match=f"the experiment ran with {field}"):
            fluidsalus.run(objective, {"x": 0.5}, metric=metric, mode=mode, storage_path=storage, name="obj",
                           resume=True, verbose=0)
    grid = fluidsalus.run(objective, {"x": 0.5}, metric="score", mode="max", storage_path=storage, name="obj",
                          resume=True, verbose=0)
    assert len(grid) == 1 and grid.num_errors == 0
    # An experiment that ran without a metric takes the one its resume gives, which later resumes then keep.
    fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="none", verbose=0)
    grid = fluidsalus.run(objective, {"x": 0.5}, metric="score", mode="max", storage_path=storage, name="none",
                          resume=True, verbose=0)
    assert grid.get_best_result().metrics["score"] is not None
    with pytest.raises(ConfigError, match="the experiment ran with metric='score'"):
        fluidsalus.run(objective, {"x": 0.5}, metric="loss", mode="min", storage_path=storage, name="none",
                       resume=True, verbose=0)


def _other_objective(config):
    fluidsalus.report({"score": 0.0})


def _files(folder: str) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes (the driver's lock file left out: each driver writes its line)."""
    return {os.path.relpath(os.path.join(root, name), folder): Path(root, name).read_bytes()
            for root, _, names in os.walk(folder) for name in names if name != ".driver.lock"}


@pytest.mark.parametrize(("trainable", "config", "message"), [
    (_other_objective, {"x": fluidsalus.uniform(0, 1)},
     r"trainable: the experiment ran the trainable 'objective'; resume it with that trainable \(got "
     r"'_other_objective'\)"),
    (objective, {"lr": fluidsalus.uniform(0, 1)},
     r"config: the experiment ran with the search space keys \['x'\]; resume it with that search space \(got "
     r"keys \['lr'\]\)"),
    (objective, {"x": fluidsalus.uniform(0, 1), "extra": 1}, r"config: .* keys \['x'\]; .* \['extra', 'x'\]"),
])
def test_a_resume_with_another_trainable_or_space_is_refused_and_changes_nothing(storage, trainable, config,
                                                                                   message):
    """A resume ran whatever trainable and space it was given: the unfinished trials ran the other function on
    their old configs, and the experiment mixed both (h83's N13). Tuner.restore refuses these in Ray's words."""
    fluidsalus.run(objective, {"x": fluidsalus.uniform(0, 1)}, num_samples=2, storage_path=storage, name="e",
                   verbose=0)
    before = _files(storage)
    with pytest.raises(ConfigError, match=message):
        fluidsalus.run(trainable, config, num_samples=2, storage_path=storage, name="e", resume=True, verbose=0)
    assert _files(storage) == before
    # The same trainable and keys resume (the values may be given again: an object ref, a constant)
    grid = fluidsalus.run(objective, {"x": fluidsalus.uniform(0, 1)}, num_samples=2, storage_path=storage,
                          name="e", resume=True, verbose=0)
    assert len(grid) == 2 and grid.num_errors == 0


@pytest.mark.parametrize(("state", "message"), [
    ('{"bogus":1}', r"searcher: the experiment's saved searcher state is not a RandomSearch's: it lacks "
                    r"'proposed' \(it holds \['bogus'\]\)"),
    ("[3]", r"saved searcher state is a JSON array, not the object a RandomSearch saves"),
    ("null", r"saved searcher state is a JSON null, not the object a RandomSearch saves"),
])
def test_a_resume_whose_stored_searcher_state_is_not_the_searchers_own_is_refused_and_changes_nothing(
        storage, state, message):
    """RandomSearch read its state with defaults: a foreign state of valid JSON, {"bogus": 1}, loaded as a search
    that had proposed nothing, and the resume ran every trial again beside the stored ones (6 trials, not 3)."""
    fluidsalus.run(objective, {"x": fluidsalus.uniform(0, 1)}, num_samples=3, seed=1, storage_path=storage,
                   name="e", verbose=0)
    conn = sqlite3.connect(os.path.join(storage, "e", DB_FILENAME))
    with conn:
        conn.execute("UPDATE experiment SET searcher_state = ?", (state,))
    conn.close()
    before = _files(storage)
    with pytest.raises(ConfigError, match=message):
        fluidsalus.run(objective, {"x": fluidsalus.uniform(0, 1)}, num_samples=3, seed=1, storage_path=storage,
                       name="e", resume=True, verbose=0)
    assert _files(storage) == before


@pytest.mark.parametrize("num_samples", [4, -1])
def test_a_random_search_under_max_concurrent_proposes_a_trial_as_one_ends_with_the_same_configurations(
        num_samples: int) -> None:
    """Ray 2.60's ``BasicVariantGenerator(max_concurrent=N)`` (what its Tuner makes of ``max_concurrent_trials=N``)
    makes a trial only while fewer than N of its trials are live, one more as each ends (``next_trial``): 2 trials,
    then one per end (Ray's hooks in a side-by-side run: add, add, complete, add, complete, add, ...). RandomSearch
    proposed all ``num_samples`` at once. The configurations and their order stay those of the search without the
    cap, also across a save and load of its state between any two calls (a resumed run)."""
    space = {"x": fluidsalus.uniform(0, 1), "g": fluidsalus.grid_search([1, 2, 3])}
    wanted = 12  # (4 samples of the grid of 3)
    expected = VariantStream(space, num_samples, 3).take(wanted)
    search = RandomSearch(space, num_samples, seed=3, max_concurrent=2)
    proposed: list[dict] = []
    live: list[str] = []
    while len(proposed) < wanted:
        assert not search.is_finished()
        new = [config for group in search.next_groups() for config in group.configs]
        assert len(live) + len(new) == 2 and search.next_groups() == []  # (as many as the cap leaves room for)
        for config in new:  # (the executor adds each trial it makes)
            live.append(f"t{len(proposed)}")
            search.on_trial_add(live[-1], "g", config)
            proposed.append(config)
        search.on_trial_complete(live.pop(0), None)  # one trial ends
        resumed = RandomSearch(space, num_samples, seed=3, max_concurrent=2)
        resumed.load_state_dict(search.state_dict())
        search = resumed
    assert proposed[:wanted] == expected
    assert search.is_finished() == (num_samples != -1)


@pytest.mark.parametrize("num_samples", [4, -1])
def test_a_random_search_counts_the_end_of_a_trial_a_restore_runs_again_once(num_samples: int) -> None:
    """``Tuner.restore(restart_errored=True)`` runs an errored trial again, under its id, after the saved search
    state counted its end: ``RandomSearch`` counted ends, not live trial ids, so its second end made room for one
    trial more than the cap (a cap of 1: a third trial beside the second) or, endless, owed one trial more. Ray's
    ``BasicVariantGenerator`` counts its live trial ids (``on_trial_complete`` of one no longer live changes nothing):
    the second end is not counted, and the state says which trials are live."""
    search = RandomSearch({"x": fluidsalus.uniform(0, 1)}, num_samples, seed=0, max_concurrent=1)
    [first] = [c for g in search.next_groups() for c in g.configs]
    search.on_trial_add("t0", "g", first)
    search.on_trial_complete("t0", None, error=True)  # it errored: the run went on
    [second] = [c for g in search.next_groups() for c in g.configs]
    search.on_trial_add("t1", "g", second)
    restored = RandomSearch({"x": fluidsalus.uniform(0, 1)}, num_samples, seed=0, max_concurrent=1)
    restored.load_state_dict(search.state_dict())  # (the run was interrupted while t1 ran)
    restored.on_trial_complete("t0", None)  # t0 restarted (restart_errored) and ended again while t1 runs
    assert restored.next_groups() == []  # t1 still fills the cap
    restored.on_trial_complete("t1", None)
    assert [len(g.configs) for g in restored.next_groups()] == [1]
    assert restored.state_dict()["ended"] == 2 and search.state_dict()["live"] == ["t1"]


def test_a_random_search_state_saved_before_its_pacing_goes_on_as_it_began_and_a_resume_draws_nothing_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A state saved before ``RandomSearch`` kept its ended trials (``"ended"``) read as if every proposed trial had
    ended: an endless search under a cap then proposed more than its logged calls replay (h192's A1: ``cannot
    replay``, two configurations never run). It goes on unpaced, as it began, in its own format. And a resumed
    finite search drew every configuration it had proposed again to learn it was finished (100k: 8.4 s, A2)."""
    from fluidsalus.searchers import _random

    endless = RandomSearch({"x": fluidsalus.uniform(0, 1)}, -1, seed=0, max_concurrent=2)
    endless.load_state_dict({"proposed": 16, "owed": 1})  # (the old format: 16 out, one owed for an end)
    assert [len(g.configs) for g in endless.next_groups()] == [1] and endless.next_groups() == []
    endless.on_trial_complete("t", None)
    assert [len(g.configs) for g in endless.next_groups()] == [1]
    assert "ended" not in endless.state_dict()

    class Undrawable(_random.VariantStream):
        def __init__(self, *args, **kwargs):
            raise AssertionError("drew the configurations again")

    monkeypatch.setattr(_random, "VariantStream", Undrawable)
    for cap in (None, 4):
        finite = RandomSearch({"g": fluidsalus.grid_search(list(range(100)))}, 1, seed=0, max_concurrent=cap)
        finite.load_state_dict({"proposed": 100, "ended": 100, "owed": 16})
        assert finite.is_finished() and finite.next_groups() == []


def test_a_random_search_subclass_that_saves_fields_of_its_own_resumes() -> None:
    """Fields beside RandomSearch's own are a subclass's, not a foreign state (a review found the check refusing
    them: "a CountingRandom saves no 'seen'")."""

    class CountingRandom(RandomSearch):
        def state_dict(self) -> dict:
            return {**super().state_dict(), "seen": 4}

    search = CountingRandom({"x": fluidsalus.uniform(0, 1)}, num_samples=3)
    search.load_state_dict({"proposed": 2, "ended": 1, "owed": 1, "seen": 4})
    assert search.state_dict() == {"proposed": 2, "ended": 1, "owed": 1, "seen": 4}


def test_cpus_per_trial_above_every_node_warns_and_runs_on_the_largest_device(storage):
    """It ran on a device of the node's cores without a word (a helper's lanes test); Ray warns that the cluster
    has too few and leaves the trials pending."""
    with pytest.warns(UserWarning, match="cpus_per_trial=3: no node has that many cores; each trial runs on a "
                                         "device of 2 cores"):
        grid = fluidsalus.run(objective, {"x": 0.5}, cpus_per_trial=3, storage_path=storage, name="big", verbose=0)
    assert grid.num_errors == 0 and len(grid) == 1


def reports_its_resources(config: dict[str, Any]) -> None:
    fluidsalus.report(dict(fluidsalus.get_context().get_trial_resources().required_resources))


def test_a_trials_context_reports_the_cpus_per_trial_the_run_asked_for(storage):
    """``get_trial_resources()`` said the device's cores (1.0 for ``cpus_per_trial=0.25``), where the Tune front
    end, as Ray, reports the request (a helper's lanes test)."""
    grid = fluidsalus.run(reports_its_resources, {"x": fluidsalus.grid_search([1, 2])}, cpus_per_trial=0.25,
                          storage_path=storage, name="quarter", verbose=0)
    assert grid.num_errors == 0 and {r.metrics["CPU"] for r in grid} == {0.25}
    plain = fluidsalus.run(reports_its_resources, {"x": 1}, storage_path=storage, name="plain", verbose=0)
    assert plain[0].metrics["CPU"] == 1.0  # no request: the device's one core, as before


def fails_with_two_lines_and_a_note(config):
    fluidsalus.report({"it": 1})
    if config["kind"] == "lines":
        raise ValueError("first line of the message\nsecond line")
    error = KeyError("missing-key")
    error.add_note("NOTE: check your config")
    raise error


def test_an_errors_summary_is_its_first_line_with_its_type(storage, capsys):
    """The console's line, inspect's errors and tune.run's TuneError summed an error up by its text's last line: a
    multi-line message's last line without its type, or a note in place of the exception (a helper's test)."""
    grid = fluidsalus.run(fails_with_two_lines_and_a_note, {"kind": fluidsalus.grid_search(["lines", "note"])},
                          storage_path=storage, name="summary", verbose=1)
    err = capsys.readouterr().err
    ends = sorted(line.split(" errored after 1 iteration: ")[1] for line in err.splitlines()
                  if " errored after " in line)
    assert ends == ["KeyError: 'missing-key'", "ValueError: first line of the message"]
    errors = inspect_experiment(grid.experiment_path).errors
    assert sorted(e["error"] for e in errors) == ends
    assert any("NOTE: check your config" in e["text"] or "NOTE" in (e["traceback"] or "") for e in errors)


def _fails_on_its_way_out(config):
    """Reports until its stop rule stops it, then fails as the stop unwinds it: ``config["how"]`` ``"raise"`` (a
    ``finally:`` that raises) or ``"exit"`` (its process ends, as a crash in native code or the out-of-memory killer
    would)."""
    with open(config["log"], "a") as log:
        log.write("start\n")
    try:
        for i in range(10):
            fluidsalus.report({"loss": float(i)})
    finally:
        if config["how"] == "exit":
            os._exit(1)
        raise RuntimeError("cleanup failed")


def _ended_once_at_its_stop_result(grid: Any, log: Path, searcher: Any) -> ExperimentStore:
    """Assert the one trial ended TERMINATED, with no error, at its stop rule's result (iteration 3), its function
    started once and its searcher told its end once; return the experiment's store, open."""
    assert log.read_text().count("start") == 1
    (result,) = grid
    assert result.error is None and grid.num_errors == 0
    assert result.metrics["training_iteration"] == 3 and result.metrics["done"] is True
    assert list(searcher.calls.values()) == [[1, 2, "complete"]]
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert [t.status for t in store.trials()] == ["TERMINATED"]
    return store


def test_a_trial_that_met_its_stop_rule_and_then_fails_is_not_retried(storage, tmp_path):
    """Its end was told to the searcher at the result the stop rule ended it at (as Ray's controller tells it); an
    error on its way out then had it retried: the finished trial ran again, its new results unseen by the searcher
    (a review's script). Then it ended ERROR, where its searcher was told it completed; as in Ray Tune, it ends
    TERMINATED at that result, with no error, and the error is a warning and an ``error_after_stop`` event."""
    log = tmp_path / "starts.txt"
    searcher = RecordingSearch({"log": str(log), "how": "raise"}, num_samples=1)
    grid = fluidsalus.run(_fails_on_its_way_out, searcher=searcher, stop={"training_iteration": 3},
                          storage_path=storage, name="way_out", verbose=0, max_failures=1)
    store = _ended_once_at_its_stop_result(grid, log, searcher)
    assert [e.data["error"] for e in store.events("error_after_stop")] == ["RuntimeError: cleanup failed"]


class _StopsAtThree(RecordingSearch):
    """Stops each trial at its third result (as a scheduler's STOP: ASHA's at ``max_t``, a user's own), each result
    waiting for its decision, as under the Tune front end's schedulers: the trial stops at that very result."""

    verdict_from = 0.0

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        decision = super().on_result(trial_id, result)
        return Decision.STOP if result["training_iteration"] >= 3 else decision


@pytest.mark.parametrize("how", ["searcher", "run_end"])
def test_a_trial_that_fails_as_the_drivers_stop_for_good_unwinds_it_ends_terminated(storage, tmp_path, how):
    """A trial its searcher stops (or the run's end: a stopper's ``stop_all()``), whose ``finally:`` then raises,
    ended ERROR (not retried), where Ray Tune, which stops the trial's actor, never sees that error: the trial ends
    TERMINATED there. As for a trial that met its stop rule (above), the error is a warning and an ``error_after_stop``
    event."""
    log = tmp_path / "starts.txt"
    space = {"log": str(log), "how": "raise"}
    if how == "searcher":
        searcher: RecordingSearch = _StopsAtThree(space, num_samples=1)
        grid = fluidsalus.run(_fails_on_its_way_out, searcher=searcher, storage_path=storage, name="stopped_out",
                              verbose=0, max_failures=1)
        assert list(searcher.calls.values()) == [[1, 2, 3, "complete"]]
        assert grid[0].metrics["training_iteration"] == 3
    else:  # (the run's end by a stopper's stop_all() once the trial reported: a 1 s time budget ran out before
        # the trial started on a loaded machine, as test_endless_search_ends_with_its_time_budget says)
        grid = fluidsalus.run(_waits_then_fails_on_its_way_out, space, storage_path=storage, name="budget_out",
                              verbose=0, max_failures=1, stop=StopAllAfter(2))
    assert log.read_text().count("start") == 1
    (result,) = grid
    assert result.error is None and grid.num_errors == 0
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert [t.status for t in store.trials()] == ["TERMINATED"]
    assert [e.data["error"] for e in store.events("error_after_stop")] == ["RuntimeError: cleanup failed"]


def _waits_then_fails_on_its_way_out(config):
    """Reports each 0.1 s until the run's end stops it, then fails as the stop unwinds it."""
    with open(config["log"], "a") as log:
        log.write("start\n")
    try:
        for i in range(1000):
            time.sleep(0.1)
            fluidsalus.report({"loss": float(i)})
    finally:
        raise RuntimeError("cleanup failed")


@pytest.mark.parametrize("max_failures", [0, 1])
def test_a_trial_whose_process_dies_right_after_its_stop_result_ends_terminated_there(storage, tmp_path,
                                                                                      max_failures):
    """The result its stop rule ended it at waited in the device's outbox; the process died before the driver's next
    poll took it, so the trial ran again (its death not charged at first), and failed at its second death (a review's
    script). As a Ray Tune trial, whose report waits for the driver, it ends TERMINATED at that result, with no error
    and its function started once: the device waits for the driver to have that result before the trainable goes on,
    and a death after it ends the trial there, its searcher told its end once."""
    log = tmp_path / "starts.txt"
    searcher = RecordingSearch({"log": str(log), "how": "exit"}, num_samples=1)
    grid = fluidsalus.run(_fails_on_its_way_out, searcher=searcher, stop={"training_iteration": 3},
                          storage_path=storage, name=f"dies_after_stop{max_failures}", verbose=0,
                          max_failures=max_failures, time_budget_s=120)
    store = _ended_once_at_its_stop_result(grid, log, searcher)
    assert store.trials()[0].attempt == 0
    assert len(store.events("device_died")) == 1 and not store.events("trial_restart")


def _ten_steps(config):
    for i in range(10):
        fluidsalus.report({"loss": config["x"] + i})


def test_a_resumed_run_does_not_tell_the_searcher_again_of_an_end_it_was_told_at_the_stop_result(storage):
    """The searcher is told a trial's end at the result its stop rule ended it at, and that commits with the result;
    a driver that died before the trial's end reached the store left it RUNNING, and the resumed run told the
    searcher its end a second time (the median rule then counts it twice: a review's script)."""
    space = {"x": fluidsalus.uniform(0, 1)}
    kwargs: dict[str, Any] = {"metric": "loss", "mode": "min", "stop": {"training_iteration": 3},
                              "storage_path": storage, "name": "told", "verbose": 0, "devices": 1}
    first = RecordingSearch(space, num_samples=1, seed=0)
    fluidsalus.run(_ten_steps, searcher=first, **kwargs)
    assert list(first.calls.values()) == [[1, 2, "complete"]]
    db = sqlite3.connect(os.path.join(storage, "told", DB_FILENAME))  # the store as that crash leaves it
    db.execute("UPDATE trials SET status = 'RUNNING', finished_at = NULL")
    db.commit()
    db.close()
    again = RecordingSearch(space, num_samples=1, seed=0)
    grid = fluidsalus.run(_ten_steps, searcher=again, resume=True, **kwargs)
    assert "complete" not in [call for calls in again.calls.values() for call in calls]
    assert grid[0].metrics["training_iteration"] == 3


def _checkpointed(config):
    for it in (1, 2):
        fluidsalus.report({"score": config["x"] * it}, checkpoint=iteration_checkpoint(it))


def _as_schema_1(folder: str) -> None:
    conn = sqlite3.connect(os.path.join(folder, DB_FILENAME), isolation_level=None)
    for statement in ("DROP TABLE searcher_calls", "ALTER TABLE trials DROP COLUMN config_pickle",
                      "DROP TABLE store_info", "PRAGMA user_version = 1"):
        conn.execute(statement)
    conn.close()


def _moved(folder: str) -> str:
    moved = folder + "_moved"
    shutil.copytree(folder, moved)
    return moved


def _killed_drivers_log(folder: str) -> None:
    """A killed driver's store: a transaction in its ``-wal`` (not folded in), ``-shm`` beside it, its lock line."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, sqlite3
        c = sqlite3.connect({os.path.join(folder, DB_FILENAME)!r}, isolation_level=None)
        c.execute("INSERT INTO events (ts, kind) VALUES (1.0, 'late')")
        os._exit(0)""")], check=True)
    Path(folder, ".driver.lock").write_text("pid 999999 on elsewhere, since 2025-01-01 00:00:00\n")


def _killed_drivers_old_log(folder: str) -> None:
    """A killed driver's store, as :func:`_killed_drivers_log`, left longer than ``store.ABANDONED_CREATE_S`` ago
    (the check for a creation cut short opened it with a plain read-only connection then, which rewrote its -shm)."""
    _killed_drivers_log(folder)
    long_ago = time.time() - 2 * ABANDONED_CREATE_S
    os.utime(os.path.join(folder, DB_FILENAME), (long_ago, long_ago))


def _truncated_store(folder: str) -> None:
    path = os.path.join(folder, DB_FILENAME)
    os.truncate(path, os.path.getsize(path) // 2)


def _as_newer_read_only(folder: str) -> None:
    """A store of a later schema that says this version can read it (``readable_from``), but not write it."""
    conn = sqlite3.connect(os.path.join(folder, DB_FILENAME), isolation_level=None)
    conn.execute("UPDATE store_info SET value = '1' WHERE key = 'readable_from'")
    conn.execute("PRAGMA user_version = 99")
    conn.close()


@pytest.mark.parametrize(("prepare", "trainable", "message"), [
    (_as_schema_1, _other_objective, "trainable: the experiment ran the trainable '_checkpointed'"),
    (_moved, _other_objective, "trainable: the experiment ran the trainable '_checkpointed'"),
    (lambda folder: os.remove(os.path.join(folder, ".driver.lock")), _other_objective, "trainable: the experiment"),
    (_killed_drivers_log, _other_objective, "trainable: the experiment ran the trainable '_checkpointed'"),
    (_killed_drivers_old_log, _other_objective, "trainable: the experiment ran the trainable '_checkpointed'"),
    (_truncated_store, _checkpointed, r"experiment.db' is not a fluidsalus experiment store \(database disk image is "
                                      r"malformed\)"),
    # (it was refused only when the writer opened it, after Ray's start)
    (_as_newer_read_only, _checkpointed, "written by a newer fluidsalus .*can read this store but not write it"),
], ids=["older-schema", "moved", "no-lock-file", "killed-driver", "killed-driver-long-ago", "truncated-store",
        "newer-read-only"])
def test_a_refused_resume_leaves_the_experiments_folder_byte_for_byte(storage, prepare, trainable, message,
                                                                      monkeypatch):
    """A refused resume opened the store for writing before its checks: an older schema was migrated, a moved
    experiment's checkpoint paths rewritten, a killed driver's log folded in and its lock line emptied, a lock
    file made, and a store damaged past its header got -wal/-shm files (h92's review, h83's N8). It is refused
    before Ray is asked for anything (a refused resume started a whole local Ray first: h98's F1)."""
    fluidsalus.run(_checkpointed, {"x": fluidsalus.grid_search([1, 2])}, storage_path=storage, name="e", verbose=0)
    folder = prepare(os.path.join(storage, "e")) or os.path.join(storage, "e")
    lock_file = os.path.join(folder, ".driver.lock")
    earlier = time.time() - 5  # (the folder's and the lock file's: a refusal that moved them shows, h125's b)
    for path in (folder, *([lock_file] if os.path.exists(lock_file) else [])):
        os.utime(path, (earlier, earlier))
    before, times = every_file(folder), file_times(folder)

    def no_ray(address: str | None) -> None:
        raise AssertionError("a refused resume connected to Ray")

    monkeypatch.setattr(fluidsalus.api, "_connect", no_ray)
    with pytest.raises(fluidsalus.errors.FluidsalusError, match=message):
        fluidsalus.run(trainable, {"x": fluidsalus.grid_search([1, 2])}, storage_path=os.path.dirname(folder),
                       name=os.path.basename(folder), resume=True, verbose=0)
    assert every_file(folder) == before
    assert file_times(folder) == times


def test_an_accepted_resume_still_migrates_and_relocates(storage):
    """What a refused resume no longer does, an accepted one still does: an older schema is brought up to date and
    a moved experiment's checkpoints are found where it is now."""
    fluidsalus.run(_checkpointed, {"x": fluidsalus.grid_search([1, 2])}, storage_path=storage, name="e", verbose=0)
    _as_schema_1(os.path.join(storage, "e"))
    moved = _moved(os.path.join(storage, "e"))
    grid = fluidsalus.run(_checkpointed, {"x": fluidsalus.grid_search([1, 2])}, storage_path=storage,
                          name=os.path.basename(moved), resume=True, verbose=0)
    assert len(grid) == 2 and grid.num_errors == 0
    conn = sqlite3.connect(os.path.join(moved, DB_FILENAME))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert all(path.startswith(moved + os.sep) for (path,) in conn.execute("SELECT path FROM checkpoints"))
    conn.close()


def test_a_resume_whose_warning_is_made_an_error_lets_the_experiment_go(storage):
    """A warning between the resume's lock and the store's opening, made an error by a filter, left the lock held
    in this process: every later resume here was refused as 'being run by another driver' (h101)."""
    fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="e", verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="cpus_per_trial=3: no node has that many cores"):
            fluidsalus.run(objective, {"x": 0.5}, cpus_per_trial=3, storage_path=storage, name="e", resume=True,
                           verbose=0)
    grid = fluidsalus.run(objective, {"x": 0.5}, storage_path=storage, name="e", resume=True, verbose=0)
    assert len(grid) == 1 and grid.num_errors == 0


class _FailsEveryEnd(fluidsalus.callbacks.Callback):
    """Takes no trial's end: each is handed back as failed (as the Tune front end's adapter does for a Ray
    callback whose on_trial_complete raised)."""

    def __init__(self) -> None:
        self.ends: list[str] = []

    def on_trial_complete(self, trial_id: str, status: str, result: Any) -> None:
        self.ends.append(trial_id)

    def failed_ends(self) -> list[tuple[str, str, str, None]]:
        ended, self.ends = self.ends, []
        return [(trial_id, "ValueError: boom", "the callback's traceback", None) for trial_id in ended]


def test_a_stopped_trial_a_callback_fails_is_counted_errored_not_stopped(storage, capsys):
    """The progress line read '0 done (2 stopped), 2 errored': a trial counted stopped at its stop rule stayed
    counted when a callback's error at its end made it ERROR (h103's F4)."""
    def reports(config: dict[str, Any]) -> None:
        for i in range(5):
            fluidsalus.report({"loss": 1.0 / (i + 1)})

    grid = fluidsalus.run(reports, {"x": fluidsalus.grid_search([0, 1])}, stop={"training_iteration": 2},
                          storage_path=storage, verbose=1, callbacks=[_FailsEveryEnd()])
    assert grid.num_errors == 2
    last = [line for line in capsys.readouterr().out.splitlines() if "trials of 2:" in line][-1]
    assert "trials of 2: 2 error |" in last


def _fails_at_one(config: dict[str, Any]) -> None:
    fluidsalus.report({"loss": 1.0})
    if config["x"] == 1:
        raise ValueError("x=1 fails")


def test_the_progress_line_the_summary_and_ls_count_a_runs_trials_in_the_same_words(storage, capsys):
    """One run said '3 done (0 stopped), 1 errored' (progress line), '(3 terminated, 1 errored)' (summary), and
    '4 (1 error, 3 terminated)' (ls); Ray's status line: '3 TERMINATED | 1 ERROR'. The three count in ls's words
    (h148's F5)."""
    from fluidsalus.cli import main as cli

    fluidsalus.run(_fails_at_one, {"x": fluidsalus.grid_search([0, 1, 2, 3])}, storage_path=storage, name="words",
                   verbose=1)
    out = capsys.readouterr().out
    last = [line for line in out.splitlines() if line.startswith(PLAIN_PREFIX)][-1]
    assert "| trials of 4: 1 error, 3 terminated |" in last, last
    assert re.search(r"fluidsalus: 4 trials in \S+ \(1 error, 3 terminated\) -> ", out), out
    assert cli(["ls", storage]) == 0
    assert "4 (1 error, 3 terminated)" in capsys.readouterr().out


def test_a_pathlib_storage_path_is_taken_as_ray_takes_it(storage):
    """``storage_path=Path(...)``, as Ray's RunConfig takes it, was refused as not a string (h106)."""
    grid = fluidsalus.run(objective, {"x": 0.5}, storage_path=Path(storage), name="p", verbose=0)
    assert grid.num_errors == 0 and grid.experiment_path == os.path.join(storage, "p")


class _TextlessError(ValueError):
    """A trainable's exception whose ``__str__`` itself raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def _raises_textless_at_1(config):
    if config["x"] == 1:
        raise _TextlessError()
    fluidsalus.report({"m": config["x"]})


def test_a_trainable_error_whose_str_raises_errors_its_trial_and_the_run_ends(storage):
    """The device's trial thread died formatting such an error (``str(e)``), so the trial never ended and the run
    waited for it for ever; it is recorded as Python's traceback shows it."""
    grid = fluidsalus.run(_raises_textless_at_1, {"x": fluidsalus.grid_search([0, 1, 2])}, storage_path=storage,
                          name="textless", verbose=0)
    assert [r.error is not None for r in grid] == [False, True, False]
    assert "_TextlessError: <exception str() failed>" in str(grid[1].error)


def test_a_store_that_cannot_record_a_ctrl_c_leaves_the_ctrl_c_raised(tmp_path, ray_cluster, monkeypatch, caplog):
    """The run's Ctrl-C path records the experiment INTERRUPTED: a store that cannot be written then (a full disk)
    raised its ``StoreError`` in place of the user's ``KeyboardInterrupt`` and left the store open. The Ctrl-C is
    raised, the error logged, and the experiment stays as stored (RUNNING: a resume continues it)."""
    from fluidsalus.callbacks import Callback
    from fluidsalus.errors import StoreError

    class CtrlC(Callback):
        def on_trial_result(self, trial_id, result):
            raise KeyboardInterrupt  # (as a Ctrl-C in the driver)

    set_experiment = ExperimentStore.set_experiment

    def full_disk(self, **fields):
        if fields.get("status") == "INTERRUPTED":
            raise StoreError("could not write the experiment store: disk full")
        set_experiment(self, **fields)

    monkeypatch.setattr(ExperimentStore, "set_experiment", full_disk)
    storage = str(tmp_path / "results")
    with pytest.raises(KeyboardInterrupt):
        fluidsalus.run(checkpoints_each_step, {"x": 1}, callbacks=[CtrlC()], storage_path=storage, name="full",
                       verbose=0)
    assert any(r.exc_info and "disk full" in str(r.exc_info[1]) for r in caplog.records)
    reader = ExperimentStore.open(os.path.join(storage, "full"), readonly=True)
    try:
        assert reader.experiment()["status"] == "RUNNING"
    finally:
        reader.close()


def test_trial_id_names_each_new_trial_and_is_drawn_again_for_an_id_taken(storage):
    """``trial_id=f``: each new trial's id is ``f()`` (the Tune front end's: Ray's ``Trial.generate_id()`` form for a
    search algorithm's trials), drawn again while the experiment has it; a function that gives only ids taken, or
    no str, ends the run with a ``ConfigError``."""
    ids = iter(["aa", "aa", "bb", "bb", "aa", "cc"])
    kwargs = dict(storage_path=storage, name="ids", verbose=0, trial_id=lambda: next(ids))
    grid = fluidsalus.run(objective, {"x": fluidsalus.grid_search([1, 2])}, **kwargs)
    assert [r.trial_id for r in grid] == ["aa", "bb"]
    assert os.path.isdir(os.path.join(storage, "ids", "bb"))  # (fluidsalus.run names folders by id)
    with pytest.raises(ConfigError, match="trial_id gave no new trial id in 100 draws"):
        fluidsalus.run(objective, {"x": fluidsalus.grid_search([1, 2])}, storage_path=storage, name="same",
                       verbose=0, trial_id=lambda: "aa")
    with pytest.raises(ConfigError, match=r"trial_id must return a non-empty str \(a new trial's id\); got 7"):
        fluidsalus.run(objective, {"x": 1}, storage_path=storage, name="bad", verbose=0, trial_id=lambda: 7)
    with pytest.raises(ConfigError, match=r"trial_id must be None or a callable f\(\) -> str \(got str\)"):
        fluidsalus.run(objective, {"x": 1}, storage_path=storage, name="bad2", verbose=0, trial_id="aa")


def four_steps(config: dict[str, Any]) -> None:
    for it in range(1, 5):
        fluidsalus.report({"score": config["x"] * it})


#: Seconds the resume below may run: it takes a few; without the fix it waited for ever (bounded by this budget).
DECIDED_RESUME_BUDGET_S = 30.0


@pytest.mark.parametrize("kind", ["asha_at_max_t", "median_rule"])
def test_a_resume_ends_a_trial_whose_stop_was_decided_before_the_interrupt_where_it_was_decided(
        storage, ray_cluster, monkeypatch, kind):
    """A Ctrl-C (or a kill) after the commit of a result the searcher stopped its trial at, and before the trial's end
    was stored, left the trial unfinished (h228's finding). Its resume ran it again from scratch; the searcher, given
    those iterations once already, was not asked again, so an ASHA trial stopped at ``max_t`` paused there, its budget,
    and the run waited for ever. As in Ray (whose saved state holds the trial ``TERMINATED`` at that result), the
    resume now ends it there, stopped, without running it again, and the searcher is told its end. The interrupt is
    made where the executor would carry out the first stop its searcher decided on a result."""
    from fluidsalus.store import loads
    from fluidsalus.trialgroup.executor import Executor

    def searcher() -> Any:
        if kind == "asha_at_max_t":  # (the first trial at each rung is not cut: it is stopped at max_t, its budget)
            return ASHA({"x": fluidsalus.grid_search([1, 2, 3])}, 1, "score", "max", max_t=4, grace_period=1,
                        reduction_factor=2, seed=0)
        # (the third trial, worse than the first two, is stopped at its second iteration)
        return MedianStopping(RandomSearch({"x": fluidsalus.grid_search([3, 2, 1])}, 1), "score", "max",
                              time_attr="training_iteration", grace_period=2, min_samples_required=2)

    stop_trials = Executor._stop_trials

    def interrupted_at_the_first_decided_stop(self: Executor, trial_ids: list[str], no_verdict: bool = False) -> Any:
        if trial_ids and sys._getframe(1).f_code.co_name == "_handle" and not getattr(self, "_cut", False):
            self._cut = True  # (the Ctrl-C's drain handles the batches still out: it is cut once)
            raise KeyboardInterrupt
        return stop_trials(self, trial_ids, no_verdict)

    kwargs: dict[str, Any] = dict(storage_path=storage, name="cut", verbose=0, max_concurrent_trials=1)
    monkeypatch.setattr(Executor, "_stop_trials", interrupted_at_the_first_decided_stop)
    with pytest.raises(KeyboardInterrupt):
        fluidsalus.run(four_steps, searcher=searcher(), **kwargs)
    monkeypatch.undo()
    exp = os.path.join(storage, "cut")
    before = ExperimentStore.open(exp, readonly=True)
    cut = [t for t in before.trials() if t.status not in ("TERMINATED", "ERROR") and before.results(t.trial_id)
           and before.results(t.trial_id)[-1].metrics["done"]]
    assert len(cut) == 1, [(t.trial_id, t.status) for t in before.trials()]  # its stop result stored, its end not
    stopped, at = cut[0].trial_id, before.results(cut[0].trial_id)[-1].iteration
    assert at == (4 if kind == "asha_at_max_t" else 2)
    before.close()

    grid = fluidsalus.run(four_steps, searcher=searcher(), resume=True, time_budget_s=DECIDED_RESUME_BUDGET_S,
                          **kwargs)
    after = ExperimentStore.open(exp, readonly=True)
    assert after.experiment()["status"] == "FINISHED" and not after.events("experiment_ending")  # not the budget's end
    row = next(t for t in after.trials() if t.trial_id == stopped)
    assert (row.status, row.stop_reason, row.last_iteration) == ("TERMINATED", "stopped", at)
    # not run again: its one attempt's results, the last of them the one it was stopped at
    assert [(r.attempt, r.iteration) for r in after.results(stopped, latest_attempt_only=False)] == \
        [(0, i) for i in range(1, at + 1)]
    assert [e.trial_id for e in after.events("decided_end")] == [stopped]
    result = next(r for r in grid if r.metrics["trial_id"] == stopped)
    assert result.metrics["training_iteration"] == at and result.metrics["done"] is True
    assert len(grid) == 3 and grid.num_errors == 0 and all(t.status == "TERMINATED" for t in after.trials())
    if kind == "asha_at_max_t":  # the searcher was told its end: it holds no live trial
        assert not any(info["live"] for info in loads(after.experiment()["searcher_state"])["trials"].values())


def test_a_resume_ends_a_paused_trial_its_searcher_stopped_before_the_interrupt(storage, ray_cluster, monkeypatch):
    """HyperBand stops the losers of a settled rung that wait paused on their devices (``collect_stops``). Their ends
    reach the driver with a later batch; a batch of another trial committed in between saved the searcher's state
    without those stops, so a crash there left them unfinished, to run again from scratch to the rung where nothing
    stops them any more (until the search's end). The stop is now stored as it is decided, with that state, and the
    resume ends the trial there. Here the interrupt comes as the stop is about to be sent, after such a commit."""
    from fluidsalus.searchers import HyperBand
    from fluidsalus.trialgroup.executor import Executor

    def searcher() -> HyperBand:
        # (eight configurations fill a bracket of rungs 1, 2 and 4; fewer ran to max_t at once)
        return HyperBand({"x": fluidsalus.grid_search(list(range(1, 9)))}, 1, "score", "max", max_t=4,
                         reduction_factor=2, seed=0)

    send_stop, take_groups = Executor._send_stop, Executor._take_groups
    cut: list[str] = []

    def held_back(self: Executor, trial_ids: Any, *args: Any, **kw: Any) -> Any:
        trial_ids = list(trial_ids)
        if trial_ids and not cut and sys._getframe(2).f_code.co_name == "_take_groups":
            cut.extend(trial_ids)  # (the first stops of paused trials: the interrupt comes before they go out)
            return None
        return send_stop(self, trial_ids, *args, **kw)

    def interrupted_after_the_stops(self: Executor) -> None:
        take_groups(self)
        if cut and not getattr(self, "_cut", False):
            self._cut = True
            with self.store.transaction():  # (another trial's batch, committed before the stopped trial's end)
                self._searcher_log.save()
            raise KeyboardInterrupt

    kwargs: dict[str, Any] = dict(storage_path=storage, name="cut", verbose=0, max_concurrent_trials=1)
    monkeypatch.setattr(Executor, "_send_stop", held_back)
    monkeypatch.setattr(Executor, "_take_groups", interrupted_after_the_stops)
    with pytest.raises(KeyboardInterrupt):
        fluidsalus.run(four_steps, searcher=searcher(), **kwargs)
    monkeypatch.undo()
    assert cut
    exp = os.path.join(storage, "cut")
    before = ExperimentStore.open(exp, readonly=True)
    paused = {t.trial_id: t.last_iteration for t in before.trials() if t.trial_id in cut}
    assert all(t.status == "PAUSED" for t in before.trials() if t.trial_id in cut)
    before.close()

    grid = fluidsalus.run(four_steps, searcher=searcher(), resume=True, time_budget_s=DECIDED_RESUME_BUDGET_S,
                          **kwargs)
    after = ExperimentStore.open(exp, readonly=True)
    assert after.experiment()["status"] == "FINISHED" and not after.events("experiment_ending")
    for trial_id, at in paused.items():
        row = next(t for t in after.trials() if t.trial_id == trial_id)
        assert (row.status, row.stop_reason, row.last_iteration) == ("TERMINATED", "stopped", at)
        assert [(r.attempt, r.iteration) for r in after.results(trial_id, latest_attempt_only=False)] == \
            [(0, i) for i in range(1, at + 1)]  # not run again
    assert sorted(e.trial_id for e in after.events("decided_end")) == sorted(paused)
    assert len(grid) == 8 and grid.num_errors == 0


def test_a_trial_id_that_names_its_folder_must_be_a_folder_name_of_the_experiment(storage):
    """``fluidsalus.run`` names a trial's folder by its id (no ``trial_dirname``): an id ``trial_id=f`` gives that
    is no folder name (``../out``, one longer than a file system's) ends the run with a ``ConfigError``, as a
    ``trial_dirname`` answer does, and one a file of the experiment has (``experiment.db``) is drawn again. The
    trial ran in ``<storage>/out``, outside its experiment, or failed on a folder it could not make."""
    with pytest.raises(ConfigError, match=r"trial_id returned '\.\./out', which names the trial's folder: it must be "
                                          r"one folder name"):
        fluidsalus.run(objective, {"x": 1}, storage_path=storage, name="up", verbose=0, trial_id=lambda: "../out")
    assert not os.path.exists(os.path.join(storage, "out"))
    with pytest.raises(ConfigError, match="trial_id returned an id of 300 bytes, which names the trial's folder: it "
                                          "must be at most 255"):
        fluidsalus.run(objective, {"x": 1}, storage_path=storage, name="long", verbose=0, trial_id=lambda: "x" * 300)
    ids = iter(["experiment.db", "ok"])
    (result,) = fluidsalus.run(objective, {"x": 1}, storage_path=storage, name="db", verbose=0,
                               trial_id=lambda: next(ids))
    assert (result.trial_id, result.error) == ("ok", None)
