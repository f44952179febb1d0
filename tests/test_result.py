"""``Result`` and ``ResultGrid`` as Ray shows them (``fluidsalus/result.py``), on hand-made results (no Ray).

- The reprs have Ray's layout: one attribute per line, only the trial's own metrics, an error by its type.
- ``metrics_dataframe`` is Ray's trial frame: nested metrics flattened, each row's configuration as ``config/``
  columns, the configuration of the attempt the row came from when PBT changed it.
- ``get_best_checkpoint`` reads nested metrics and raises Ray's errors; ``get_best_result`` and ``get_dataframe``
  read nested metrics by their flattened names too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError, TrialError
from fluidsalus.result import Result, ResultGrid, _config_of_attempt
from fluidsalus.session import with_config


def _result(history: list[dict[str, Any]], config: dict[str, Any], **kwargs: Any) -> Result:
    metrics = dict(history[-1], config=config) if history else None
    return Result(metrics=metrics, checkpoint=kwargs.pop("checkpoint", None), error=kwargs.pop("error", None),
                  path="/exp/t1", trial_id="t1", _history=history, _config=config, **kwargs)


_ROW = {"loss": 0.5, "info": {"acc": 0.9}, "training_iteration": 3, "time_total_s": 1.5, "timestamp": 17,
        "trial_id": "t1", "date": "2026-11-27_10-00-00", "done": True, "pid": 7, "hostname": "h", "node_ip": "n",
        "time_this_iter_s": 0.5, "time_since_restore": 1.5, "iterations_since_restore": 3,
        "checkpoint_dir_name": "checkpoint_000003", "experiment_tag": "0_lr=0.1"}


def test_a_results_repr_shows_its_own_metrics_path_filesystem_and_checkpoint_as_ray_does() -> None:
    result = _result([_ROW], {"lr": 0.1}, checkpoint=Checkpoint("/exp/t1/checkpoint_000003"))
    assert repr(result) == (
        "Result(\n"
        "  metrics={'loss': 0.5, 'info': {'acc': 0.9}},\n"
        "  path='/exp/t1',\n"
        "  filesystem='local',\n"
        "  checkpoint=Checkpoint(filesystem=local, path=/exp/t1/checkpoint_000003)\n"
        ")")


def test_a_failed_results_repr_names_the_errors_type_first() -> None:
    result = _result([], {"lr": 0.1}, error=TrialError("Trial t1 failed: boom"), status="ERROR")
    assert repr(result) == ("Result(\n  error='TrialError',\n  metrics=None,\n  path='/exp/t1',\n"
                            "  filesystem='local',\n  checkpoint=None\n)")


def test_a_grids_repr_lists_every_result_indented() -> None:
    grid = ResultGrid([_result([{"loss": 1.0}], {}), _result([{"loss": 2.0}], {})], "/exp")
    lines = repr(grid).splitlines()
    assert lines[0] == "ResultGrid<[" and lines[-1] == "]>"
    assert lines[1:4] == ["  Result(", "    metrics={'loss': 1.0},", "    path='/exp/t1',"]
    assert lines.count("  ),") == 1 and lines[-2] == "  )"


def test_the_metrics_dataframe_flattens_nested_metrics_and_adds_the_config_of_each_row() -> None:
    history = [{"loss": 1.0, "info": {"acc": 0.5}, "training_iteration": 1},
               {"loss": 0.5, "info": {"acc": 0.7}, "training_iteration": 2}]
    frame = _result(history, {"lr": 0.2, "net": {"width": 8}},
                    _row_configs=[{"lr": 0.1, "net": {"width": 8}}, {"lr": 0.2, "net": {"width": 8}}]
                    ).metrics_dataframe
    # Ray's order (pandas' json_normalize of result.json): top-level values, then nested ones, then the config
    assert list(frame.columns) == ["loss", "training_iteration", "info/acc", "config/lr", "config/net/width"]
    assert list(frame["info/acc"]) == [0.5, 0.7] and list(frame["config/lr"]) == [0.1, 0.2]
    # Without per-row configurations (a store older than them): the trial's configuration on every row.
    assert list(_result(history, {"lr": 0.2}).metrics_dataframe["config/lr"]) == [0.2, 0.2]
    assert _result([], {"lr": 0.2}).metrics_dataframe.empty  # never started: empty, as Ray's


#: Ray Tune 2.60's result keys in order, from a function trainable that reports ``{"score": ..., "nested": {...}}``
#: (``Result.metrics`` of ``ray.tune.Tuner(...).fit()``; ``experiment_tag`` is fluidsalus's too).
RAY_METRICS_ORDER = ["score", "nested", "timestamp", "checkpoint_dir_name", "done", "training_iteration", "trial_id",
                     "date", "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip", "config",
                     "time_since_restore", "iterations_since_restore", "experiment_tag"]
#: The columns of that result's ``metrics_dataframe`` and of the grid's ``get_dataframe()`` under Ray 2.60 (Ray's
#: result.json has no ``experiment_tag``; fluidsalus's frames have it, among the top-level values).
RAY_FRAME_ORDER = ["score", "timestamp", "checkpoint_dir_name", "done", "training_iteration", "trial_id", "date",
                   "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip", "time_since_restore",
                   "iterations_since_restore", "experiment_tag", "nested/a", "nested/b/c", "config/x", "config/y/z"]


def _ray_ordered_row(i: int) -> dict[str, Any]:
    """A stored result as the engine's session makes it, in Ray's order (config is added when it is shown)."""
    row = {"score": float(i), "nested": {"a": i, "b": {"c": 1}}}
    row.update({key: 0 for key in RAY_METRICS_ORDER[2:] if key not in ("config", "experiment_tag")})
    row["experiment_tag"] = "0_x=1"
    return row


def test_the_config_goes_where_ray_puts_it_in_a_result_and_the_frames_have_rays_column_order() -> None:
    config = {"x": 1, "y": {"z": 2}}
    assert list(with_config(_ray_ordered_row(1), config)) == RAY_METRICS_ORDER
    assert list(with_config({"loss": 1.0, "config": "reported"}, config)) == ["loss", "config"]  # no node_ip: last
    assert with_config({"loss": 1.0, "config": "reported"}, config)["config"] is config  # the trial's replaces it
    result = Result(metrics=with_config(_ray_ordered_row(1), config), checkpoint=None, error=None, path="/exp/t1",
                    trial_id="t1", _history=[_ray_ordered_row(0), _ray_ordered_row(1)], _config=config)
    assert list(result.metrics_dataframe.columns) == RAY_FRAME_ORDER
    assert list(result.metrics_dataframe["nested/a"]) == [0, 1]
    grid = ResultGrid([result], "/exp")
    assert list(grid.get_dataframe().columns) == [*RAY_FRAME_ORDER, "logdir"]
    assert list(grid.get_dataframe(filter_metric="score", filter_mode="min").columns) == [*RAY_FRAME_ORDER, "logdir"]
    assert list(grid.get_dataframe(filter_metric="score", filter_mode="min")["score"]) == [0.0]


def test_each_attempt_has_the_configuration_it_ran_with() -> None:
    changes = [(2, {"lr": 0.2}, {"lr": 0.1}), (4, {"lr": 0.3}, {"lr": 0.2})]
    assert [_config_of_attempt({"lr": 0.3}, changes, a)["lr"] for a in range(6)] == [0.1, 0.1, 0.2, 0.2, 0.3, 0.3]
    assert _config_of_attempt({"lr": 0.3}, [], 0) == {"lr": 0.3}


def test_the_best_checkpoint_follows_rays_rules_and_errors() -> None:
    first, second = Checkpoint("/exp/t1/checkpoint_000001"), Checkpoint("/exp/t1/checkpoint_000002")
    kept = [(first, {"loss": 2.0, "info": {"acc": 0.5}}), (second, {"loss": float("nan"), "info": {"acc": 0.8}})]
    result = _result([{"loss": 1.0}], {}, best_checkpoints=kept)
    assert result.get_best_checkpoint("info/acc", "max") is second  # a flattened name reads the nested value
    assert result.get_best_checkpoint("loss", "max") is first  # NaN is no candidate
    assert _result([{"loss": 1.0}], {}, best_checkpoints=[(second, {"loss": float("nan")})]
                   ).get_best_checkpoint("loss", "min") is None
    with pytest.raises(RuntimeError, match="Invalid metric name acc! You may choose from the following metrics"):
        result.get_best_checkpoint("acc", "max")
    with pytest.raises(RuntimeError, match="No checkpoint exists in the trial directory!"):
        _result([{"loss": 1.0}], {}).get_best_checkpoint("loss", "min")
    with pytest.raises(ValueError, match="mode must be one of"):
        result.get_best_checkpoint("loss", "best")


def test_the_best_result_and_the_frame_read_nested_metrics_by_their_flattened_names() -> None:
    low = _result([{"info": {"acc": 0.9}}, {"info": {"acc": 0.2}}], {"x": 1})
    high = _result([{"info": {"acc": 0.5}}, {"info": {"acc": 0.6}}], {"x": 2})
    grid = ResultGrid([low, high], "/exp")
    assert grid.get_best_result("info/acc", "max") is high  # the last values: 0.2 against 0.6
    assert grid.get_best_result("info/acc", "max", scope="all") is low
    frame = grid.get_dataframe(filter_metric="info/acc", filter_mode="max")
    assert list(frame["info/acc"]) == [0.9, 0.6] and list(frame["config/x"]) == [1, 2]


def test_the_best_result_of_one_trial_is_that_trial_and_the_errors_say_what_is_missing() -> None:
    only = _result([{"loss": float("nan")}], {"x": 1})
    assert ResultGrid([only], "/exp").get_best_result() is only  # Ray's rule: whatever the arguments
    two = ResultGrid([only, _result([{"loss": 2.0}], {"x": 2})], "/exp")
    with pytest.raises(ValueError, match="No metric is provided"):
        two.get_best_result(mode="min")
    with pytest.raises(ValueError, match="No mode is provided"):
        two.get_best_result(metric="loss")
    with pytest.raises(RuntimeError, match=r"no trial has reported this metric\.$"):
        two.get_best_result("acc", "max", filter_nan_and_inf=False)
    with pytest.raises(RuntimeError, match="To not ignore NaN values"):
        two.get_best_result("acc", "max")


def test_a_run_with_a_mode_and_no_metric_is_judged_by_rays_anonymous_metric() -> None:
    """``TuneConfig(mode="max")`` without a metric: Ray's grid takes ``"_metric"`` (what a returned number is
    reported as); this one raised "No metric is provided" (a helper's run against Ray). A mode given only to the
    call still needs a metric, as in Ray."""
    low, high = _result([{"_metric": 1.0}], {"x": 1}), _result([{"_metric": 3.0}], {"x": 2})
    assert ResultGrid([low, high], "/exp", None, "max").get_best_result() is high
    assert ResultGrid([low, high], "/exp", None, "min").get_best_result() is low
    with pytest.raises(ValueError, match="No metric is provided"):
        ResultGrid([low, high], "/exp").get_best_result(mode="max")


def test_a_searcher_sees_a_nested_value_under_rays_flattened_key_too():
    from fluidsalus.result import with_flat_keys

    flat = {"acc": 0.5, "training_iteration": 3}
    assert with_flat_keys(flat) is flat  # nothing nested: the result itself
    nested = {"val": {"acc": 0.9, "deep": {"x": 1}}, "val/acc": 0.1, "training_iteration": 3}
    assert with_flat_keys(nested) == {"val": {"acc": 0.9, "deep": {"x": 1}}, "val/acc": 0.1, "val/deep/x": 1,
                                      "training_iteration": 3}  # the result's own "val/acc" wins


def test_a_trial_that_never_reported_has_only_its_id_in_metrics_and_no_row_in_the_frame(tmp_path) -> None:
    """As Ray's: ``metrics == {"trial_id": ...}`` (it was None, so ``r.metrics.get(...)`` failed), ``config`` None, and
    ``get_dataframe`` leaves it out, with or without a filter (it had a row of NaN)."""
    from fluidsalus.store import ExperimentStore

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("ran", 0, {"x": 1}), ("never", 1, {"x": 2})])
    store.add_results([("ran", 0, 1, 1.0, {"acc": 0.5, "training_iteration": 1}),
                       ("ran", 0, 2, 2.0, {"acc": 0.7, "training_iteration": 2})])
    grid = ResultGrid.from_store(store)
    never = next(r for r in grid if r.trial_id == "never")
    assert never.metrics == {"trial_id": "never"} and never.config is None and never.metrics_dataframe.empty
    ran = next(r for r in grid if r.trial_id == "ran")
    for frame in (grid.get_dataframe(), grid.get_dataframe(filter_metric="acc", filter_mode="min")):
        assert list(frame["config/x"]) == [1] and list(frame["logdir"]) == [ran.path]
    assert list(grid.get_dataframe(filter_metric="acc", filter_mode="min")["acc"]) == [0.5]
    assert grid.get_best_result().trial_id == "ran"
    # Ray's error for the folder of a trial that never started (it returned a Result of None config)
    with pytest.raises(RuntimeError, match="Neither result.json nor progress.csv exists in the trial folder"):
        Result.from_path(never.path)
    assert Result.from_path(ran.path).config == {"x": 1}
    # A grid in which no trial reported: a frame without columns, as Ray's (it had a logdir column)
    assert ResultGrid([never], grid.experiment_path).get_dataframe().columns.empty
    store.close()


def test_a_trial_that_started_and_reported_nothing_keeps_its_config_as_in_ray(tmp_path) -> None:
    """A trial that returned at once (or failed before its first report) had ``config`` None and ``metrics`` of
    its id alone, like one that never started; Ray gives it its config, when it started, ``done`` if it ended
    well, and an empty frame. An errored trial's last result is not ``done``, as in Ray."""
    from fluidsalus.store import ERROR, TERMINATED, ExperimentStore

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("skipped", 0, {"lr": 5}), ("failed", 1, {"lr": -1}), ("ran", 2, {"lr": 0.1})])
    store.add_results([("ran", 0, 1, 1.0, {"acc": 0.5, "training_iteration": 1, "done": False})])
    store.update_trial("skipped", status=TERMINATED, started_at=1795906791.5)
    store.update_trial("failed", status=ERROR, started_at=1795906792.0, error="ValueError: negative lr")
    store.update_trial("ran", status=ERROR, started_at=1795906793.0, error="ValueError: later",
                       last_result={"acc": 0.5, "training_iteration": 1, "done": False})
    grid = {r.trial_id: r for r in ResultGrid.from_store(store)}
    skipped, failed, ran = grid["skipped"], grid["failed"], grid["ran"]
    assert skipped.config == {"lr": 5} and skipped.metrics["done"] is True
    assert skipped.metrics["timestamp"] == 1795906791 and skipped.metrics["trial_id"] == "skipped"
    assert failed.config == {"lr": -1} and "done" not in failed.metrics and failed.error is not None
    assert skipped.metrics_dataframe.empty and failed.metrics_dataframe.empty
    assert ran.metrics["done"] is False and ran.config == {"lr": 0.1}
    store.update_trial("ran", status=TERMINATED)  # ended by a stop rule, say: done, but its last row is as reported
    again = ResultGrid.from_store(store)
    assert next(r for r in again if r.trial_id == "ran").metrics["done"] is True
    assert list(again.get_dataframe()["done"]) == [False]  # as Ray's frame, read from the trial's result files
    assert sorted(r.config["lr"] for r in grid.values()) == [-1, 0.1, 5]
    assert len(ResultGrid.from_store(store).get_dataframe()) == 1  # no row for a trial that reported nothing
    frames = ResultGrid.from_store(store)
    assert list(frames.get_dataframe(filter_metric="acc")["acc"]) == [0.5]  # no mode: the last rows, as in Ray
    with pytest.raises(ValueError, match="you'll also have to pass a `metric`"):
        frames.get_dataframe(filter_mode="max")
    with pytest.raises(ValueError, match=r"has to be one of \[min, max\]"):
        frames.get_dataframe(filter_metric="acc", filter_mode="best")
    store.close()


class _ScriptError(Exception):
    """An exception type of the user's own, whose __init__ takes other arguments than a message."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code


def test_a_failed_trials_error_is_also_an_instance_of_the_exception_it_raised(tmp_path) -> None:
    """As Ray's ``RayTaskError(ValueError)``: a script may route failures by their type (before, every error was a
    plain TrialError). A type the driver does not have, or a device's death, stays a plain TrialError."""
    import pickle

    from fluidsalus.errors import TrialError
    from fluidsalus.store import ExperimentStore

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    errors = {"builtin": "ValueError: bad lr", "own": f"{__name__}._ScriptError: 3: detail",
              "unknown": "somewhere.else.Oops: x", "died": "The actor died unexpectedly before finishing this task."}
    store.add_trials([(tid, i, {"i": i}) for i, tid in enumerate(errors)])
    for tid, text in errors.items():
        store.update_trial(tid, status="ERROR", error=text, traceback="Traceback (most recent call last): ...")
    by_id = {r.trial_id: r.error for r in ResultGrid.from_store(store)}
    store.close()
    assert all(isinstance(e, TrialError) for e in by_id.values())
    assert isinstance(by_id["builtin"], ValueError) and type(by_id["builtin"]).__name__ == "TrialError(ValueError)"
    assert isinstance(by_id["own"], _ScriptError) and str(by_id["own"]).startswith("Trial own failed: ")
    assert type(by_id["unknown"]) is TrialError and type(by_id["died"]) is TrialError
    copy = pickle.loads(pickle.dumps(by_id["builtin"]))
    assert isinstance(copy, ValueError) and str(copy) == str(by_id["builtin"])
    result = next(r for r in ResultGrid.from_store(ExperimentStore.open(str(tmp_path / "exp"), readonly=True))
                  if r.trial_id == "builtin")
    assert "error='TrialError(ValueError)'" in repr(result)  # Ray shows 'RayTaskError(ValueError)'


def test_a_failed_trials_error_names_it_as_the_run_named_it(tmp_path) -> None:
    """``Result.error`` (``Trial <id> failed: ...``, also the ``fail_fast="raise"`` error) named the trial by id where
    the run's lines name it ``train_<id>`` (h167's note); a trial the run gave no name keeps its id."""
    from fluidsalus.store import TRIAL_DIRNAME_EVENT, ExperimentStore

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("a", 0, {}), ("b", 1, {})])
    for tid in ("a", "b"):
        store.update_trial(tid, status="ERROR", error="ValueError: bad lr")
    store.add_events([(0.0, TRIAL_DIRNAME_EVENT, "a", None, {"dirname": "train_a_0", "name": "train_a"})])
    errors = {r.trial_id: str(r.error) for r in ResultGrid.from_store(store)}
    store.close()
    assert errors == {"a": "Trial train_a failed: ValueError: bad lr", "b": "Trial b failed: ValueError: bad lr"}


class _NewOnly(Exception):
    """An exception type whose __new__ takes its own arguments."""

    def __new__(cls, a: int, b: int) -> _NewOnly:
        return super().__new__(cls, a, b)


def test_a_failed_trials_error_carries_the_exception_it_raised_as_its_cause() -> None:
    """As Ray's ``RayTaskError.cause``: the exception itself, its attributes readable on the error too (before, the
    device sent only its text: ``error.code`` raised AttributeError). One whose ``__init__`` takes other arguments
    than its ``args`` is re-created all the same (Ray's cause is then the ``TypeError`` of its unpickling)."""
    import pickle
    import threading

    from fluidsalus.errors import MAX_ERROR_PICKLE_BYTES, pickle_exception, trial_failure

    own = trial_failure("t1", f"{__name__}._ScriptError: 3: detail", "Traceback ...",
                        pickle_exception(_ScriptError(3, "detail")))
    assert isinstance(own, _ScriptError) and isinstance(own.cause, _ScriptError)
    assert own.cause.code == 3 and own.code == 3 and str(own.cause) == "3: detail"
    assert str(own).startswith("Trial t1 failed: ")
    with pytest.raises(AttributeError, match="object has no attribute 'nothing'"):  # (the cause's, as Ray's)
        own.nothing  # noqa: B018
    copy = pickle.loads(pickle.dumps(own))  # as error.pkl keeps it
    assert isinstance(copy, _ScriptError) and copy.cause.code == 3 and str(copy) == str(own)
    # A built-in one with its own fields (OSError's errno, which the error's own slot shadows, as in Ray's)
    missing = trial_failure("t2", "FileNotFoundError: [Errno 2] nope", None,
                            pickle_exception(FileNotFoundError(2, "nope")))
    assert isinstance(missing, FileNotFoundError) and missing.cause.errno == 2
    assert pickle.loads(pickle.dumps(missing)).cause.errno == 2
    # A plain TrialError (a device's death, say) pickles its cause too
    plain = TrialError("Trial t4 failed")
    plain.cause_pickle, plain.cause = pickle_exception(KeyError("k")), KeyError("k")  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(plain)).cause.args == ("k",)
    # A type of its own __new__ (a user's, the built-in ExceptionGroup): a TrialError that cannot also be one is a
    # plain TrialError; making it raised TypeError, which ended the whole run with the trial left RUNNING
    import builtins

    groups = [builtins.ExceptionGroup("eg", [ValueError("a")])] if hasattr(builtins, "ExceptionGroup") else []
    for raised in (_NewOnly(1, 2), *groups):
        error = trial_failure("t5", f"{type(raised).__name__}: {raised}", None, pickle_exception(raised))
        assert type(error) is TrialError and type(error.cause) is type(raised)
    # No cause, the error as before: one that cannot be pickled, one too large, one whose pickle cannot be read
    locked = ValueError("locked")
    locked.lock = threading.Lock()  # type: ignore[attr-defined]
    assert pickle_exception(locked) is None
    assert pickle_exception(ValueError(b"x" * MAX_ERROR_PICKLE_BYTES)) is None
    assert pickle_exception(ValueError(b"x" * (MAX_ERROR_PICKLE_BYTES // 4))) is not None  # (pickled twice)
    for blob in (None, b"not a pickle", pickle.dumps((b"garbage", None))):
        plain = trial_failure("t3", "ValueError: locked", None, blob)
        assert isinstance(plain, ValueError) and plain.cause is None
        assert pickle.loads(pickle.dumps(plain)).cause is None

_NAN, _INF = float("nan"), float("inf")
#: Histories whose scores Ray builds value by value: a NaN late and early, an infinity, a bool, steps that skip.
_HISTORIES = [
    [1.0, 2.0, 3.0, _NAN], [11.0, _INF, 13.0, 14.0], [_NAN, 5.0, 4.0], [2.0, 2.0], [True, False, True],
    [1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0, 0.5, 0.25], [10**18 + 3, 10**18 + 1],
]


def _rows(values: list[Any], every: int = 1) -> list[dict[str, Any]]:
    return [{"score": v, "nested": {"v": v}, "training_iteration": every * (i + 1), "pid": 7, "timestamp": 9}
            for i, v in enumerate(values)]


@pytest.mark.parametrize("every", [1, 3])
def test_metric_analysis_is_rays_value_by_value_with_nans_infinities_and_bools(every: int) -> None:
    """A trial's scores were computed over its finite values only: a trial that diverged to NaN late in the run
    could be the best under scope="all", where Ray's is NaN and passed over (a helper's side by side)."""
    import math

    from ray.tune.trainable.metadata import _TrainingRunMetadata

    from fluidsalus.result import metric_analysis

    for values in _HISTORIES:
        ours = metric_analysis(_rows(values, every))
        theirs = _TrainingRunMetadata()
        for row in _rows(values, every):
            for key, value in (("score", row["score"]), ("nested/v", row["nested"]["v"])):
                theirs.update_metric(key, value, step=row["training_iteration"])
        assert set(ours) == {"score", "nested/v", "training_iteration"}  # pid, timestamp: Ray's debug metrics
        for key in ("score", "nested/v"):
            for name, value in theirs.metric_analysis[key].items():
                mine = ours[key][name]
                assert (math.isnan(mine) and math.isnan(value)) if value != value else mine == value, (values, name)


def test_the_best_result_passes_over_a_trial_whose_score_is_nan_or_infinite_as_ray_does() -> None:
    diverged = _result(_rows([1.0, 2.0, 3.0, _NAN]), {"x": 0})
    spiked = _result(_rows([11.0, _INF, 13.0, 14.0]), {"x": 1})
    steady = _result(_rows([5.0, 6.0, 7.0, 8.0]), {"x": 2})
    grid = ResultGrid([diverged, spiked, steady], "/exp")
    assert grid.get_best_result("score", "min", scope="all") is steady  # diverged's min is NaN (it was 1.0)
    assert grid.get_best_result("score", "min", scope="avg") is steady  # spiked's avg is inf
    assert grid.get_best_result("score", "max", scope="last") is spiked
    assert grid.get_best_result("score", "max", scope="all", filter_nan_and_inf=False) is diverged  # NaN first
    frame = grid.get_dataframe(filter_metric="score", filter_mode="max")  # pandas' idxmax: an infinity counts
    assert list(frame["score"])[1] == _INF and list(frame["score"])[0] == 3.0
    second = Checkpoint("/exp/t1/checkpoint_000002")
    infinite = _result(_rows([1.0]), {}, best_checkpoints=[(Checkpoint("/exp/t1/checkpoint_000001"), {"score": 1.0}),
                                                            (second, {"score": _INF})])
    assert infinite.get_best_checkpoint("score", "max") is second  # as Ray's: it filters missing values only


def test_reading_a_finished_experiment_creates_nothing_beside_its_store(tmp_path) -> None:
    """A read-only open of a store nobody has open made SQLite's empty -wal and -shm files beside it, and failed on
    a read-only disk ("unable to open database file"; the review): ``ResultGrid.read`` now opens it as
    ``fluidsalus inspect`` does (``store.open_readonly``: SQLite's ``immutable=1`` when no write-ahead log exists)."""
    import os

    from fluidsalus.store import ExperimentStore

    store = ExperimentStore.create(str(tmp_path / "done"), "done", {}, "acc", "max")
    store.add_trials([("t0", 0, {"x": 1})])
    store.add_results([("t0", 0, 1, 1.0, {"acc": 0.5})])
    store.close()
    before = sorted(os.listdir(tmp_path / "done"))
    grid = ResultGrid.read(str(tmp_path / "done"))
    assert [r.metrics["acc"] for r in grid] == [0.5]
    assert sorted(os.listdir(tmp_path / "done")) == before


def test_a_result_built_with_rays_constructor_keeps_its_frame_in_rays_positional_order() -> None:
    # Ray's Result(metrics, checkpoint, error, path, metrics_dataframe, best_checkpoints, _storage_filesystem): a
    # frame given fifth is the result's frame (it was a TypeError by keyword and best_checkpoints by position), and
    # a grid scores it by its rows as Ray does
    import pandas as pd

    frame = pd.DataFrame({"loss": [3.0, 1.0, 2.0], "training_iteration": [1, 2, 3]})
    result = Result({"loss": 2.0, "config": {"x": 1}}, None, None, "/exp/t1", frame)
    assert result.metrics_dataframe is frame and result.best_checkpoints is None and result.config == {"x": 1}
    other = Result({"loss": 1.5, "config": {"x": 2}}, None, None, "/exp/t2", metrics_dataframe=pd.DataFrame(
        {"loss": [1.5]}))
    grid = ResultGrid([result, other], "/exp")
    assert grid.get_best_result("loss", "min").config == {"x": 2}
    assert grid.get_best_result("loss", "min", scope="all").config == {"x": 1}  # its 1.0 at iteration 2
    assert grid.get_best_result("loss", "min", scope="avg").config == {"x": 2}
    with pytest.raises(ConfigError, match="_storage_filesystem is not supported"):
        Result(None, None, None, "/exp/t3", _storage_filesystem=object())


def test_frames_take_each_trials_row_from_its_whole_frame_as_rays_do() -> None:
    """Ray's ``get_dataframe``/``dataframe()`` take each trial's row from the trial's whole frame (``df.iloc[-1]``, or
    the ``idxmax``/``idxmin`` row): a metric reported on some results only is a float (pandas fills the others with
    NaN), and one the trial reported before its last result has a column (NaN there). fluidsalus normalised the picked
    rows only: ``extra`` stayed int64 and ``only2`` had no column (a helper's side-by-side run)."""
    import pandas as pd

    def history(trial_id: str) -> list[dict]:
        rows = []
        for i in (1, 2, 3):
            row = {"score": float(i), "training_iteration": i, "trial_id": trial_id}
            row.update({"extra": i} if i != 2 else {"only2": 7})
            rows.append(row)
        return rows

    results = [Result(metrics=dict(history(t)[-1], config={"x": n}), checkpoint=None, error=None, path=f"/exp/{t}",
                      trial_id=t, _history=history(t), _config={"x": n}) for n, t in enumerate(("a", "b"))]
    grid = ResultGrid(results, "/exp")

    def rays(pick) -> pd.DataFrame:  # Ray 2.60's ExperimentAnalysis.dataframe, step by step
        rows = []
        for r in results:
            frame = pd.json_normalize([{**row, "config": r._config} for row in r._history], sep="/")  # result.json
            rows.append({**frame.iloc[pick(frame)].to_dict(), "config/x": r._config["x"], "logdir": r.path})
        return pd.DataFrame(rows)

    for frame, expected in ((grid.get_dataframe(), rays(lambda f: -1)),
                            (grid.get_dataframe("extra", "min"), rays(lambda f: f["extra"].idxmin())),
                            (grid.get_dataframe("score", "max"), rays(lambda f: f["score"].idxmax()))):
        pd.testing.assert_frame_equal(frame, expected)
        assert str(frame["extra"].dtype) == "float64" and frame["only2"].isna().all()
    assert list(grid.get_dataframe("extra", "min")["training_iteration"]) == [1, 1]


def test_result_from_path_of_a_missing_or_foreign_folder_raises_rays_runtime_error(tmp_path) -> None:
    """Ray's ``Result.from_path`` raises ``RuntimeError("Trial folder ... doesn't exist!")`` for a missing folder and a
    ``RuntimeError`` for a folder that is no trial's; fluidsalus raised a ``ConfigError`` (a ValueError), which an
    ``except RuntimeError`` missed. Now an error that is both."""
    from fluidsalus.errors import ConfigError
    from fluidsalus.result import NotATrialFolderError
    from fluidsalus.store import ExperimentStore

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("ran", 0, {"x": 1})])
    store.add_results([("ran", 0, 1, 1.0, {"acc": 0.5, "training_iteration": 1})])
    store.close()
    os.makedirs(tmp_path / "exp" / "ran", exist_ok=True)
    os.makedirs(tmp_path / "exp" / "other", exist_ok=True)
    assert Result.from_path(str(tmp_path / "exp" / "ran")).metrics["acc"] == 0.5
    for path, message in ((tmp_path / "exp" / "gone", "Trial folder .*gone doesn't exist!"),
                          (tmp_path / "nowhere" / "gone", "Trial folder .*gone doesn't exist!"),
                          (tmp_path / "exp" / "other", "has no trial folder 'other'"),
                          (tmp_path / "exp", "is not a trial folder of a fluidsalus experiment")):
        with pytest.raises(RuntimeError, match=message) as caught:
            Result.from_path(str(path))
        assert isinstance(caught.value, ConfigError) and isinstance(caught.value, NotATrialFolderError)


def test_dataclasses_replace_copies_a_result_with_its_frame():
    """The constructor's own fields made ``dataclasses.replace(result, ...)`` a TypeError for every Result (h101)."""
    import dataclasses

    import pandas as pd

    frame = pd.DataFrame({"loss": [2.0, 1.0]})
    result = Result({"loss": 1.0, "config": {"x": 1}}, None, None, "/exp/t1", frame)
    moved = dataclasses.replace(result, path="/exp2/t1")
    assert moved.path == "/exp2/t1" and moved.metrics_dataframe is frame and dataclasses.replace(result) == result
    assert dataclasses.replace(_result([{"loss": 1.0}], {"x": 2}), status="ERROR").metrics_dataframe["loss"].tolist() \
        == [1.0]


@pytest.mark.parametrize("metric, mode", [(None, None), ("loss", "min"), ("info/acc", "max")])
def test_a_trial_of_uniform_results_gives_its_frames_row_without_building_the_frame(monkeypatch, metric, mode):
    """get_dataframe() built each trial's whole frame to keep one row (35x slower on 2,000 trials of 50 results: a
    reviewer's measure). A trial whose results share their keys and types gives the same row from that result
    alone; any other (a key missing, an int then a float, a nested dict) still reads the whole frame."""
    import pandas as pd

    import fluidsalus.result as result_module

    def rows(n: int, loss: Any = float) -> list[dict[str, Any]]:
        return [{"loss": loss(10 - i), "it": i, "ok": True, "info": {"acc": i / 10}, "training_iteration": i + 1}
                for i in range(n)]

    flat = [{k: v for k, v in row.items() if k != "info"} | {"acc": row["info"]["acc"]} for row in rows(3)]
    mixed = [dict(row, loss=int(row["loss"])) if row["it"] == 0 else row for row in flat]  # an int, then floats
    gaps = [dict(row, extra=1) if row["it"] == 1 else row for row in flat]  # a key on some results only
    stored_config = {"x": 5}  # as a store's reader gives it: each row's config, the trial's own object
    results = [_result(flat, {"x": 1}), _result(mixed, {"x": 2}), _result(gaps, {"x": 3}),
               _result(rows(2), {"x": 4}), _result(flat, stored_config, _row_configs=[stored_config] * len(flat)),
               _result([dict(row, config={"y": 1}) for row in flat], {"x": 6})]  # a result's own "config" key
    for i, r in enumerate(results):
        r.path = f"/exp/t{i}"
    grid = ResultGrid(results, "/exp")
    fast = grid.get_dataframe(filter_metric=metric if metric != "info/acc" else "acc", filter_mode=mode)
    monkeypatch.setattr(result_module, "_uniform", lambda history: False)
    whole = grid.get_dataframe(filter_metric=metric if metric != "info/acc" else "acc", filter_mode=mode)
    pd.testing.assert_frame_equal(fast, whole)
    monkeypatch.undo()
    built: list[str] = []
    real = Result.metrics_dataframe

    def counted(self: Result) -> Any:
        built.append(self.path)
        return real.fget(self)  # type: ignore[union-attr]

    monkeypatch.setattr(Result, "metrics_dataframe", property(counted))
    grid.get_dataframe()
    assert sorted(built) == ["/exp/t1", "/exp/t2", "/exp/t3", "/exp/t5"]  # t0 and t4 are uniform (t3 has a nested
    # dict, t5 a "config" of its own)


def test_a_trial_whose_metric_is_all_nan_has_no_row_in_a_frame_picked_by_it_as_in_ray(caplog) -> None:
    """Ray's ``dataframe(metric, mode)`` (and ``get_dataframe(filter_metric, filter_mode)``) picks each trial's row
    with pandas' ``idxmax``/``idxmin``; a trial whose column of the metric holds no value (all NaN, or None) has no
    such row, and Ray leaves it out with a warning (pandas 2's NaN index; under pandas 3 its idxmax raises "Encountered
    all NA values" out of Ray's ``dataframe``: a helper's side-by-side script). fluidsalus gave the trial's
    last row. A trial without the metric at all keeps its last row, as in Ray; without a mode every trial has one."""
    import logging
    import math

    import pandas as pd

    def history(trial_id: str, values: list) -> list[dict]:
        return [{"training_iteration": i + 1, "trial_id": trial_id, **({"m": v} if v is not _NO else {})}
                for i, v in enumerate(values)]

    histories = {"nan": history("nan", [math.nan, None, _NO]), "good": history("good", [1.0, math.nan, 3.0]),
                 "none": history("none", [_NO, _NO]),
                 "nested": [{"training_iteration": 1, "trial_id": "nested", "info": {"m": math.nan}}]}
    results = [Result(metrics=dict(rows[-1]), checkpoint=None, error=None, path=f"/exp/{t}", trial_id=t,
                      _history=rows, _config={}) for t, rows in histories.items()]
    grid = ResultGrid(results, "/exp")

    def rays(metric: str, mode: str) -> list[str]:  # Ray 2.60's _retrieve_rows under pandas 2 (idxmax: NaN when all NA)
        kept = []
        for r in results:
            frame = pd.json_normalize(r._history, sep="/")
            if metric in frame and frame[metric].isna().all():
                continue  # (df.iloc[nan]: TypeError, "Non-numerical value(s) encountered")
            kept.append(r.trial_id)
        return kept

    with caplog.at_level(logging.WARNING, logger="fluidsalus.result"):
        for metric in ("m", "info/m"):
            for mode in ("max", "min"):
                assert list(grid.get_dataframe(metric, mode)["trial_id"]) == rays(metric, mode)
    assert "Warning: Non-numerical value(s) encountered for nan" in caplog.text
    picked = grid.get_dataframe("m", "max")  # good's best; the two without an "m" column: their last rows
    assert list(picked["training_iteration"]) == [3, 2, 1] and picked["m"].iloc[0] == 3.0
    assert len(grid.get_dataframe()) == len(grid.get_dataframe("m")) == 4


_NO = object()  # (a result without the metric)


def test_a_result_built_by_hand_without_a_frame_has_none_as_in_ray() -> None:
    """Ray's ``Result(metrics, checkpoint, error, path)`` has ``metrics_dataframe`` None (its default); fluidsalus
    gave an empty frame. A trial of a run that reported nothing still has an empty one, as Ray's."""
    import pandas as pd

    assert Result(metrics={"a": 1}, checkpoint=None, error=None, path="/x").metrics_dataframe is None
    frame = pd.DataFrame([{"a": 1}])
    assert Result({"a": 1}, None, None, "/x", frame).metrics_dataframe is frame
    never = Result(metrics={"trial_id": "t"}, checkpoint=None, error=None, path="/x", trial_id="t", _history=[])
    assert never.metrics_dataframe is not None and never.metrics_dataframe.empty



def _grid_of_columns(columns: Sequence[Sequence[Any]]) -> tuple[list[Result], ResultGrid]:
    """One trial per column, its results the column's values as metric ``m`` (``j``: the row)."""
    results = [_result([{"m": value, "j": j, "training_iteration": j + 1} for j, value in enumerate(values)], {"i": i})
               for i, values in enumerate(columns)]
    return results, ResultGrid(results, "/exp")


def _picked_and_pandas_rows(grid: ResultGrid, columns: Sequence[Sequence[Any]], mode: str
                            ) -> tuple[list[int], list[int]]:
    """The row each trial's best result is in, as ``get_dataframe`` picks it and as pandas' ``idxmax``/``idxmin``
    of the column (Ray's ``dataframe``) does."""
    import pandas as pd

    picked = list(grid.get_dataframe(filter_metric="m", filter_mode=mode)["j"])
    rays = [int(getattr(pd.json_normalize([{"m": value} for value in values])["m"], f"idx{mode}")())
            for values in columns]
    return picked, rays

def test_a_trials_row_picked_by_a_string_metric_is_pandas_idxmax_row_as_in_rays_dataframe() -> None:
    """Ray's ``get_dataframe(filter_metric, filter_mode)`` (and ``ExperimentAnalysis.dataframe``) picks each trial's
    row by pandas' ``idxmax``/``idxmin`` of its column (a helper's side-by-side run under Ray 2.60, pandas 3.1.1):
    for strings ``["b", "c", "a"]`` the row of ``"c"`` (max) and of ``"a"`` (min); fluidsalus took the last row for
    both (it compared numbers only). Missing values are skipped among strings as among numbers; NaN and an
    infinity pick the infinity's row (pandas 3; pandas 2's ``idxmin`` gave the NaN's row)."""
    columns = (["b", "c", "a"], ["b", None, "c", _NAN], [None, "a"], ["c", "c"], [_NAN, _INF], [_NAN, -_INF, 0.5],
               [True, False, True], [1, 3, 2, 3])
    results, grid = _grid_of_columns(columns)
    for mode in ("max", "min"):
        picked, rays = _picked_and_pandas_rows(grid, columns, mode)
        assert picked == rays, mode
    assert list(grid.get_dataframe("m", "max")["m"])[:1] == ["c"]
    mixed = ResultGrid([_result([{"m": 2.0}, {"m": "z"}, {"m": 1.0}], {}), results[0]], "/exp")  # (pandas: TypeError)
    assert list(mixed.get_dataframe("m", "min")["m"]) == [1.0, "a"]  # by its numbers


def test_a_trials_row_picked_by_values_other_than_numbers_or_strings_is_pandas_idxmax_row_as_in_rays() -> None:
    """Lists (tuples, read back as lists), ``np.bool_``, bytes and 0-d NumPy arrays: pandas compares them (Ray's run
    of the same values, reported by a trainable, picks ``[3]``'s row for ``"max"`` and ``[1]``'s for ``"min"`` of
    ``[[1], [3], [2]]``; a helper's side-by-side run under Ray 2.60). fluidsalus compared numbers and strings only,
    and took the trial's last row. A column whose values do not compare (dicts) still gives the last row."""
    import numpy as np

    columns = ([[1], [3], [2]], [[1, 5], [3, 0], [2, 9], None], [np.bool_(False), np.bool_(True), np.bool_(False)],
               [b"b", b"c", b"a"], [np.array(2.0), np.array(3.0), _NAN, np.array(1.0)], [(1,), (3,), (2,)])
    _, grid = _grid_of_columns(columns)
    for mode in ("max", "min"):
        picked, rays = _picked_and_pandas_rows(grid, columns, mode)
        assert picked == rays == ([1, 1, 1, 1, 1, 1] if mode == "max" else [0, 0, 0, 2, 3, 0]), mode
    unordered = ResultGrid([_result([{"m": {"a": 1}, "j": 0}, {"m": {"b": 0}, "j": 1}], {})], "/exp")
    assert list(unordered.get_dataframe(filter_metric="m", filter_mode="max")["j"]) == [1]
