"""Ray's file loggers, JsonLoggerCallback and CSVLoggerCallback (fluidsalus/tune/logger/__init__.py)."""

from __future__ import annotations

import csv
import json
import math
import os
import pickle
import re
import warnings

import numpy as np
import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.testing.tune import resumable
from fluidsalus.tune.callback import TrialInfo
from fluidsalus.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback, translate_ray_logger


def _trial(tmp_path, trial_id="t0", **config) -> TrialInfo:
    return TrialInfo(trial_id=trial_id, config=config, path=str(tmp_path / trial_id))


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_json_logger_writes_params_and_one_line_per_result(tmp_path) -> None:
    trial = _trial(tmp_path, lr=0.1, layers={"n": 2})
    logger = JsonLoggerCallback()
    logger.on_trial_start(0, [trial], trial)
    logger.on_trial_result(1, [trial], trial, {"loss": np.float32(0.5), "nan": float("nan"), "i": np.int64(1),
                                               "shape": np.array([1, 2]), "config": trial.config,
                                               "np_nan": np.float32("nan")})
    logger.on_trial_result(2, [trial], trial, {"loss": 0.25, "obj": object})
    logger.on_trial_complete(3, [trial], trial)
    folder = tmp_path / "t0"
    assert json.loads((folder / "params.json").read_text()) == {"layers": {"n": 2}, "lr": 0.1}
    assert pickle.loads((folder / "params.pkl").read_bytes()) == {"lr": 0.1, "layers": {"n": 2}}
    lines = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
    assert math.isnan(lines[0].pop("nan"))  # Python's json writes a float NaN as NaN, and reads it back
    assert lines[0] == {"loss": 0.5, "i": 1, "shape": [1, 2], "config": {"lr": 0.1, "layers": {"n": 2}},
                        "np_nan": None}
    assert lines[1] == {"loss": 0.25, "obj": str(object)}
    # A resumed trial appends to its file (also with the logger Tuner.restore unpickled).
    logger = pickle.loads(pickle.dumps(logger))
    logger.on_trial_start(4, [trial], trial)
    logger.on_trial_result(5, [trial], trial, {"loss": 0.125})
    logger.on_experiment_end([trial])
    assert len((folder / "result.json").read_text().splitlines()) == 3


def test_csv_logger_keeps_the_first_results_columns_and_appends_on_resume(tmp_path) -> None:
    trial = _trial(tmp_path, lr=0.1)
    logger = CSVLoggerCallback()
    logger.on_trial_result(1, [trial], trial, {"loss": 0.5, "info": {"lr": 0.1}, "config": trial.config})
    logger.on_trial_result(2, [trial], trial, {"loss": 0.25, "info": {"lr": 0.1}, "late_key": 1})
    path = tmp_path / "t0" / "progress.csv"
    assert _rows(path) == [{"loss": "0.5", "info/lr": "0.1"}, {"loss": "0.25", "info/lr": "0.1"}]
    resumed = pickle.loads(pickle.dumps(logger))  # a resumed run: the callback Tuner.restore unpickled
    resumed.on_trial_start(0, [trial], trial)
    resumed.on_trial_result(4, [trial], trial, {"info": {"lr": 0.2}, "loss": 0.125})
    resumed.on_experiment_end([trial])
    assert _rows(path)[-1] == {"loss": "0.125", "info/lr": "0.2"}  # under the old header, no second header
    assert path.read_text().count("loss") == 1


def _iterations(logger_class, path) -> list[int]:
    if logger_class is CSVLoggerCallback:
        return [int(row["training_iteration"]) for row in _rows(path / "progress.csv")]
    return [json.loads(line)["training_iteration"] for line in (path / "result.json").read_text().splitlines()]


def _report(logger, trial, iterations, since_restore_from: int) -> None:
    for i in iterations:
        logger.on_trial_result(i, [trial], trial, {"training_iteration": i, "v": i,
                                                   "iterations_since_restore": i - since_restore_from})


@pytest.mark.parametrize("logger_class", [JsonLoggerCallback, CSVLoggerCallback])
def test_a_restored_trial_continues_its_file_from_where_it_resumes_and_a_retry_appends(tmp_path,
                                                                                      logger_class) -> None:
    """After a Ctrl-C and Tuner.restore, a trial restarted from scratch kept its aborted attempt's rows in
    progress.csv/result.json (1..7 then 1..): its file starts anew, as Ray's; one resumed from its checkpoint of
    iteration 6 keeps the rows up to 6 (as the store's results); a retry within a session appends, as in Ray
    (h160's F2)."""
    scratch, resumed = _trial(tmp_path, "scratch"), _trial(tmp_path, "resumed")
    logger = logger_class()
    for trial in (scratch, resumed):
        logger.on_trial_start(0, [trial], trial)
        _report(logger, trial, range(1, 4), since_restore_from=0)
        logger.on_trial_start(0, [trial], trial)  # a retry from scratch in the same session: appended, as in Ray
        _report(logger, trial, range(1, 8), since_restore_from=0)
    assert _iterations(logger_class, tmp_path / "scratch") == [1, 2, 3, 1, 2, 3, 4, 5, 6, 7]
    restored = pickle.loads(pickle.dumps(logger))  # Tuner.restore's logger, in the next session
    for trial, start in ((scratch, 0), (resumed, 6)):
        restored.on_trial_start(0, [trial], trial)
        _report(restored, trial, range(start + 1, 10), since_restore_from=start)
    restored.on_experiment_end([scratch, resumed])
    assert _iterations(logger_class, tmp_path / "scratch") == list(range(1, 10))
    assert _iterations(logger_class, tmp_path / "resumed") == [1, 2, 3] + list(range(1, 10))


def test_csv_logger_puts_nested_columns_after_the_plain_ones_as_ray_does(tmp_path) -> None:
    """The nested keys kept their places (``a,nest/x,b``); Ray's file has them after the plain ones (a review)."""
    trial = _trial(tmp_path, lr=0.1)
    logger = CSVLoggerCallback()
    logger.on_trial_result(1, [trial], trial, {"a": 1, "nest": {"x": 2, "deep": {"y": 3}}, "b": 4})
    logger.on_experiment_end([trial])
    header = (tmp_path / "t0" / "progress.csv").read_text().splitlines()[0]
    assert header == "a,b,nest/x,nest/deep/y"


def _has_tensorboardx() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboardX") is not None


def _events(folder) -> list:
    """Every event of the TensorBoard files in ``folder`` (TFRecord framing: length, CRC, data, CRC)."""
    import glob
    import struct

    from tensorboardX.proto import event_pb2

    events = []
    for name in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        data = open(name, "rb").read()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[at + 12:at + 12 + length])
            events.append(event)
            at += 12 + length + 4
    return events


def test_tbx_logger_writes_rays_scalars_histograms_and_hparams(tmp_path) -> None:
    pytest.importorskip("tensorboardX")
    logger = TBXLoggerCallback()
    trial = TrialInfo("t0", {"lr": 0.1, "model": {"width": 4}, "fn": len, "batch": 32}, path=str(tmp_path / "t0"),
                      evaluated_params={"lr": 0.1, "model/width": np.int64(4), "fn": len})  # batch: a constant
    logger.on_trial_start(0, [trial], trial)
    for step, loss in ((1, 0.5), (2, 0.25)):
        logger.on_trial_result(step, [trial], trial, {
            "loss": loss, "info": {"acc": np.float32(0.75)}, "bad": math.nan, "hist": [1.0, 2.0, 3.0],
            "flag": step == 2, "np_flag": np.bool_(True),  # (a Python bool is a scalar, as in Ray; NumPy's is not)
            "training_iteration": step, "time_total_s": 1.0, "config": trial.config, "name": "text"})
    resumed = pickle.loads(pickle.dumps(logger))  # what Tuner.restore unpickles: no open writer in it
    assert resumed._writers == {}
    trial.status = "TERMINATED"
    logger.on_trial_complete(2, [trial], trial)
    events = _events(tmp_path / "t0")
    scalars = sorted((v.tag, e.step, round(v.simple_value, 3)) for e in events for v in e.summary.value
                     if v.HasField("simple_value"))
    assert scalars == [("ray/tune/flag", 1, 0), ("ray/tune/flag", 2, 1), ("ray/tune/info/acc", 1, 0.75),
                       ("ray/tune/info/acc", 2, 0.75), ("ray/tune/loss", 1, 0.5),
                       ("ray/tune/loss", 2, 0.25)]  # no NaN, no text, no training_iteration or time_total_s
    assert [(v.tag, e.step) for e in events for v in e.summary.value if v.HasField("histo")] == [
        ("ray/tune/hist", 1), ("ray/tune/hist", 2)]
    hparams = {v.tag for e in events for v in e.summary.value if v.tag.startswith("_hparams_/")}
    assert hparams == {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
    start = next(v for e in events for v in e.summary.value if v.tag == "_hparams_/session_start_info")
    content = start.metadata.plugin_data.content
    assert b"model/width" in content and b"lr" in content  # the searched values (NumPy's as Python's), as in Ray
    assert b"fn" not in content and b"batch" not in content  # not a simple value; not searched


def test_rays_own_loggers_are_translated_or_refused() -> None:
    ray_logger = pytest.importorskip("ray.tune.logger")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert isinstance(translate_ray_logger(ray_logger.JsonLoggerCallback()), JsonLoggerCallback)
        assert isinstance(translate_ray_logger(ray_logger.CSVLoggerCallback()), CSVLoggerCallback)
        assert isinstance(translate_ray_logger(ray_logger.TBXLoggerCallback()), TBXLoggerCallback)
    assert ["translated into fluidsalus.tune.logger" in str(w.message) for w in caught] == [True, True, True]

    def ray_integration(tool: str, name: str) -> object:
        """An object of a class named as Ray's logger for ``tool`` is (importing Ray's module imports the tool,
        seconds for MLflow; the real ones run in tests/test_tune_mlflow.py and test_tune_wandb.py)."""
        return type(name, (), {"__module__": f"ray.air.integrations.{tool}"})()

    for tool, name in (("mlflow", "MLflowLoggerCallback"), ("wandb", "WandbLoggerCallback")):
        ray_logger_object = ray_integration(tool, name)
        assert translate_ray_logger(ray_logger_object) is ray_logger_object  # runs as it is
    with pytest.raises(ConfigError, match="Ray's CometLoggerCallback is not provided by fluidsalus"):
        translate_ray_logger(ray_integration("comet", "CometLoggerCallback"))
    mine = CSVLoggerCallback()
    assert translate_ray_logger(mine) is mine


def test_rays_logger_submodules_are_found_under_the_rewritten_import() -> None:
    # ray.tune.logger.aim (and .mlflow, .wandb, .comet) after "from ray.tune..." became "from fluidsalus.tune...":
    # Ray's own class, which a run then runs or refuses by name (MLflow's and W&B's in test_tune_mlflow/_wandb.py)
    ray_aim = pytest.importorskip("ray.tune.logger.aim")
    from fluidsalus.tune.logger.aim import AimLoggerCallback

    assert AimLoggerCallback is ray_aim.AimLoggerCallback
    with pytest.raises(ConfigError, match="Ray's AimLoggerCallback is not provided by fluidsalus"):
        translate_ray_logger(AimLoggerCallback.__new__(AimLoggerCallback))


def _two_steps(config):
    from fluidsalus import tune

    for step in range(2):
        tune.report({"score": config["x"] * step})


def test_a_run_with_the_loggers_writes_rays_files_in_each_trial_folder(ray_cluster, storage) -> None:
    from fluidsalus import tune
    from fluidsalus.tune.logger import CSVLoggerCallback as CSV
    from fluidsalus.tune.logger import JsonLoggerCallback as Json

    callbacks = [Json(), CSV(), *([TBXLoggerCallback()] if _has_tensorboardx() else [])]
    grid = tune.Tuner(_two_steps, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=callbacks)).fit()
    for result in grid:
        if _has_tensorboardx():
            assert sorted((v.tag, e.step, v.simple_value) for e in _events(result.path) for v in e.summary.value
                          if v.tag == "ray/tune/score") == [("ray/tune/score", 1, 0), ("ray/tune/score", 2,
                                                                                      result.config["x"])]
        assert json.loads(open(os.path.join(result.path, "params.json")).read()) == result.config
        lines = open(os.path.join(result.path, "result.json")).read().splitlines()
        assert [json.loads(line)["score"] for line in lines] == [0, result.config["x"]]
        assert {json.loads(line)["experiment_tag"] for line in lines} == {result.metrics["experiment_tag"]}
        assert [float(row["score"]) for row in _rows(os.path.join(result.path, "progress.csv"))] == [
            0, result.config["x"]]


def test_a_subclass_of_rays_own_logger_writes_each_file_once(ray_cluster, storage) -> None:
    """A subclass of Ray's CSV or JSON logger runs as a Ray callback: it failed at once (``TrialInfo`` had no
    ``init_local_path``), then the default loggers wrote the same files again (two headers, every row twice); a
    helper's scripts. Each file now has what Ray's has."""
    from ray.tune.logger import CSVLoggerCallback as RayCSV
    from ray.tune.logger import JsonLoggerCallback as RayJson

    from fluidsalus import tune

    class MyCSV(RayCSV):
        pass

    class MyJson(RayJson):
        pass

    grid = tune.Tuner(_two_steps, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[MyCSV(), MyJson()])).fit()
    assert grid.num_errors == 0
    for result in grid:
        with open(os.path.join(result.path, "progress.csv")) as f:
            lines = f.read().splitlines()
        assert len(lines) == 3 and lines.count(lines[0]) == 1  # one header, one row per result
        assert [float(row["score"]) for row in _rows(os.path.join(result.path, "progress.csv"))] == [
            0, result.config["x"]]
        lines = open(os.path.join(result.path, "result.json")).read().splitlines()
        assert [json.loads(line)["score"] for line in lines] == [0, result.config["x"]]


def test_a_trials_folder_is_there_when_a_ray_logger_is_told_of_its_start(tmp_path) -> None:
    """Ray makes a trial's folder before it starts the trial, and its own ``JsonLoggerCallback`` writes
    ``params.json`` there in ``on_trial_start`` before it makes the folder itself. The device makes the folder as the
    trial starts, which the driver's news of the start could come before: the logger's ``on_trial_start`` raised
    ``FileNotFoundError`` and ended the run (seen once in a suite run, in
    ``test_a_subclass_of_rays_own_logger_writes_each_file_once``)."""
    from ray.tune.logger import JsonLoggerCallback as RayJson

    from fluidsalus.tune.callback import RayCallbackAdapter

    logger = RayJson()
    adapter = RayCallbackAdapter([logger], str(tmp_path / "exp"), "f")
    adapter.on_trial_start("t0", {"x": 1}, 0)  # (no device has made tmp_path/exp/t0)
    assert json.loads((tmp_path / "exp" / "t0" / "params.json").read_text()) == {"x": 1}
    adapter.on_trial_result("t0", {"score": 2.0, "training_iteration": 1})
    assert [json.loads(line)["score"] for line in (tmp_path / "exp" / "t0" / "result.json").read_text().splitlines()
            ] == [2.0]


class _Names:
    """Ray's callback hook that records the trials' names."""

    def __init__(self) -> None:
        self.names: list[str] = []

        self.tags: set[str] = set()

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        self.names.append(str(trial))

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.tags.add(trial.experiment_tag)


def test_every_run_writes_rays_files_unless_switched_off_and_names_come_from_registry_and_creator(
        ray_cluster, storage, monkeypatch) -> None:
    from fluidsalus import tune

    tune.register_trainable("two_steps_by_name", _two_steps)
    names = _Names()
    monkeypatch.delenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # trial_name_creator is used, not ignored with a warning
        creator = lambda t: f"{t.trainable_name}_x{t.config['x']}"  # noqa: E731 - as Ray's examples write it
        grid = tune.Tuner("two_steps_by_name", param_space={"x": tune.grid_search([1, 2])},
                          tune_config=tune.TuneConfig(trial_name_creator=creator),
                          run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[names])).fit()
    assert os.path.basename(grid.experiment_path).startswith("two_steps_by_name_")  # Ray's name, not "_two_steps"
    assert sorted(names.names) == ["two_steps_by_name_x1", "two_steps_by_name_x2"]
    assert sorted(r.metrics["experiment_tag"] for r in grid) == ["0_x=1", "1_x=2"]  # Ray's tags, in every result
    assert names.tags == {"0_x=1", "1_x=2"}  # and on the callbacks' trials
    for result in grid:  # no logger passed: Ray's files all the same, each result once
        lines = open(os.path.join(result.path, "result.json")).read().splitlines()
        assert [json.loads(line)["score"] for line in lines] == [0, result.config["x"]]
        assert [float(row["score"]) for row in _rows(os.path.join(result.path, "progress.csv"))] == [
            0, result.config["x"]]
    monkeypatch.setenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    analysis = tune.run("two_steps_by_name", config={"x": 3}, storage_path=storage, verbose=0,
                        resources_per_trial={"cpu": 1})
    assert os.path.basename(analysis.experiment_path).startswith("two_steps_by_name_")
    (trial,) = analysis.trials
    assert trial.last_result["score"] == 3 and trial.experiment_tag == "0"  # nothing drawn: the index alone
    assert not {"result.json", "progress.csv", "params.json"} & set(os.listdir(trial.path))
    bad = tune.Tuner(_two_steps, param_space={"x": 1}, tune_config=tune.TuneConfig(trial_name_creator=lambda t: 3),
                     run_config=tune.RunConfig(storage_path=storage, name="bad_name", verbose=0))
    with pytest.raises(ConfigError, match="trial_name_creator must return a str \\(got int for trial"):
        bad.fit()


def _reports_its_name(config):
    from fluidsalus import tune

    tune.report({"name": tune.get_context().get_trial_name()})


@pytest.mark.parametrize("with_dirname_creator", [False, True])
def test_a_trial_knows_the_name_trial_name_creator_gave_it(ray_cluster, storage, with_dirname_creator) -> None:
    """``get_context().get_trial_name()`` inside the trial is the creator's name, as in Ray (it was
    ``<trainable>_<trial_id>``, so a file or a W&B/MLflow run named after it did not match ``str(trial)``)."""
    from fluidsalus import tune

    config = tune.TuneConfig(trial_name_creator=lambda t: f"my_trial_{t.config['x']}",
                             trial_dirname_creator=(lambda t: f"dir_{t.config['x']}") if with_dirname_creator else None)
    grid = tune.Tuner(_reports_its_name, param_space={"x": tune.grid_search([1, 2])}, tune_config=config,
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert sorted(r.metrics["name"] for r in grid) == ["my_trial_1", "my_trial_2"]
    plain = tune.Tuner(_reports_its_name, param_space={"x": 1},
                       run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert plain[0].metrics["name"] == f"_reports_its_name_{plain[0].metrics['trial_id']}"  # Ray's default
    # The names are stored: ExperimentAnalysis's trials are named so (they were <trainable>_<trial_id>), as Ray's
    assert sorted(str(t) for t in tune.ExperimentAnalysis(grid.experiment_path).trials) == ["my_trial_1",
                                                                                              "my_trial_2"]
    tune.register_trainable("registered_name", _reports_its_name)
    analysis = tune.run("registered_name", config={"x": 1}, storage_path=storage, verbose=0)
    (trial,) = analysis.trials
    assert str(trial) == trial.last_result["name"] == f"registered_name_{trial.trial_id}"  # by the registered name


def _fails_until_flagged(config):
    from fluidsalus import tune

    tune.report({"name": tune.get_context().get_trial_name()})
    if not os.path.exists(config["flag"]):
        raise RuntimeError("not yet")


def _named_by_x(trial) -> str:
    return f"named_{trial.config['x']}"


def test_a_restored_trial_keeps_the_name_trial_name_creator_gave_it(ray_cluster, storage, tmp_path) -> None:
    """A trial a Tuner.restore continues had the default name in get_trial_name(): the creator's names were not
    stored. They are now (with the trial's folder name), and the creator is not called again for it."""
    from fluidsalus import tune

    flag = str(tmp_path / "flag")
    first = tune.Tuner(_fails_until_flagged, param_space={"x": 7, "flag": flag},
                       tune_config=tune.TuneConfig(trial_name_creator=_named_by_x),
                       run_config=tune.RunConfig(storage_path=storage, name="renamed", verbose=0)).fit()
    assert first.num_errors == 1 and first[0].metrics["name"] == "named_7"
    open(flag, "w").close()
    grid = tune.Tuner.restore(os.path.join(storage, "renamed"), _fails_until_flagged, resume_errored=True).fit()
    assert grid.num_errors == 0 and grid[0].metrics["name"] == "named_7"


def test_trial_dirname_creator_names_each_trials_folder_and_a_restore_finds_them(ray_cluster, storage) -> None:
    from fluidsalus import tune
    from fluidsalus.result import ResultGrid

    creator = lambda t: f"{t.trainable_name}_x{t.config['x']}"  # noqa: E731 - as Ray's examples write it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # used, not ignored with a warning
        grid = tune.Tuner(_two_steps, param_space={"x": tune.grid_search([1, 2])},
                          tune_config=tune.TuneConfig(trial_dirname_creator=creator),
                          run_config=tune.RunConfig(storage_path=storage, name="named", verbose=0)).fit()
    folder = os.path.join(storage, "named")
    assert sorted(os.path.basename(r.path) for r in grid) == ["_two_steps_x1", "_two_steps_x2"]
    for result in grid:  # Ray's files (written at the callbacks' trial.path) and Result.from_path use it
        assert [json.loads(line)["score"] for line in open(os.path.join(result.path, "result.json"))] == [
            0, result.config["x"]]
        assert tune.Result.from_path(result.path).trial_id == result.trial_id
        assert not os.path.exists(os.path.join(folder, result.trial_id))
    assert sorted(r.path for r in ResultGrid.read(folder)) == sorted(r.path for r in grid)
    restored = tune.Tuner.restore(folder, _two_steps).fit()  # nothing left to run: the same folders
    assert sorted(r.path for r in restored) == sorted(r.path for r in grid)
    (saved,) = tune.Tuner(resumable, tune_config=tune.TuneConfig(trial_dirname_creator=lambda t: "only"),
                          run_config=tune.RunConfig(storage_path=storage, name="ckpt", verbose=0)).fit()
    assert saved.path == os.path.join(storage, "ckpt", "only")  # the trial's own checkpoints are kept there
    assert saved.checkpoint is not None and os.path.dirname(saved.checkpoint.path) == saved.path

    # A name another trial has gets "_" and four hex digits, as Ray makes it unique.
    same = tune.Tuner(_two_steps, param_space={"x": tune.grid_search([1, 2, 3])},
                      tune_config=tune.TuneConfig(trial_dirname_creator=lambda t: "same"),
                      run_config=tune.RunConfig(storage_path=storage, name="same", verbose=0)).fit()
    names = sorted(os.path.basename(r.path) for r in same)
    assert names[0] == "same" and all(re.fullmatch(r"same_[0-9a-f]{4}", n) for n in names[1:])
    assert len(set(names)) == 3 and all(os.path.isfile(os.path.join(r.path, "result.json")) for r in same)
    for bad, message in ((lambda t: "a/b", r"returned 'a/b' for trial .*: it must be one folder name"),
                         (lambda t: 7, r"trial_dirname_creator must return a str \(got int for trial")):
        tuner = tune.Tuner(_two_steps, param_space={"x": tune.grid_search([1, 2])},
                           tune_config=tune.TuneConfig(trial_dirname_creator=bad),
                           run_config=tune.RunConfig(storage_path=storage, name=f"bad_{id(bad)}", verbose=0))
        with pytest.raises(ConfigError, match=message):
            tuner.fit()


def test_trial_folders_have_rays_default_names(ray_cluster, storage, monkeypatch) -> None:
    import re

    from fluidsalus import tune

    grid = tune.Tuner(_two_steps, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, name="default_names", verbose=0)).fit()
    stamp = r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d"
    for result in grid:  # Ray's <trainable>_<trial_id>_<experiment_tag>_<date>
        name = os.path.basename(result.path)
        tag = result.metrics["experiment_tag"]
        assert re.fullmatch(rf"_two_steps_{result.trial_id}_{re.escape(tag)}_{stamp}", name), name
        assert os.path.isfile(os.path.join(result.path, "result.json"))
    monkeypatch.setenv("TUNE_MAX_LEN_IDENTIFIER", "12")  # Ray's limit on the part before the date
    asked: list[str] = []

    def name(trial):
        asked.append(trial.trial_id)
        return "a(b)"

    (short,) = tune.Tuner(_two_steps, param_space={"x": 1}, tune_config=tune.TuneConfig(trial_name_creator=name),
                          run_config=tune.RunConfig(storage_path=storage, name="short", verbose=0)).fit()
    assert re.fullmatch(rf"a_b__0_{stamp}", os.path.basename(short.path))  # named, cut, Ray's characters made _
    assert asked == [short.trial_id]  # called once for the trial, as Ray calls it


def test_a_search_algorithms_trials_have_rays_search_generator_ids(ray_cluster, storage) -> None:
    """Ray's ``SearchGenerator`` gives each trial a search algorithm makes ``Trial.generate_id()``, 8 random hex
    digits (``train_c81718b6_1_x=0.4170_<date>``), and its default ``BasicVariantGenerator`` ``<5 hex>_<00000>``
    (a side-by-side run, /work/scratch_h220/search_ids_check.py). fluidsalus gave every trial the second form.
    Names, folders, ``Result.path`` and the callbacks' ids follow; the grid keeps the trials' creation order, and a
    restore keeps the ids."""
    import re

    from fluidsalus import tune
    from fluidsalus.tune.search.optuna import OptunaSearch

    stamp = r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d"
    grid = tune.Tuner(_two_steps, param_space={"x": tune.uniform(0, 1)},
                      tune_config=tune.TuneConfig(search_alg=OptunaSearch(seed=1), metric="score", mode="max",
                                                  num_samples=3),
                      run_config=tune.RunConfig(storage_path=storage, name="searched", verbose=0)).fit()
    ids = [r.trial_id for r in grid]
    assert len(set(ids)) == 3 and all(re.fullmatch(r"[0-9a-f]{8}", i) for i in ids), ids
    for number, result in enumerate(grid, start=1):  # in creation order, numbered from 1 as Ray's search's
        assert re.fullmatch(rf"_two_steps_{result.trial_id}_{number}_x=[0-9.]+_{stamp}",
                            os.path.basename(result.path)), result.path
    assert [r.trial_id for r in tune.Tuner.restore(os.path.join(storage, "searched"), _two_steps).fit()] == ids
    (default,) = tune.Tuner(_two_steps, param_space={"x": 1},
                            run_config=tune.RunConfig(storage_path=storage, name="variants", verbose=0)).fit()
    assert re.fullmatch(r"[0-9a-f]{5}_00000", default.trial_id)
