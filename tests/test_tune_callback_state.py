"""Callback state (``Callback.get_state`` / ``set_state``) saved with the experiment and restored, and the step
hooks (``on_step_begin`` / ``on_step_end``), as in Ray Tune.

- The adapter alone (no Ray): the first event saves, then Ray's period (``TUNE_GLOBAL_CHECKPOINT_S``) rules until
  the last save before ``on_experiment_end``; a restoring adapter gives each callback its saved state before
  ``setup``, stateless callbacks are left alone, and a bad period is a clear error.
- A real run on the shared 2-CPU Ray: ``tune.run(resume=True)`` gives a fresh callback the state the first run's
  callback had at its end, and Ray's own ``ray.tune.Callback`` objects get the same treatment; a callback that
  overrides the step hooks gets them around every pass of the driver's loop, others do not.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import cloudpickle
import pytest
from _trials import LazyRayTune, skip_module_unless_installed

from fluidsalus import tune
from fluidsalus._periodic import PERIOD_ENV
from fluidsalus.errors import ConfigError
from fluidsalus.tune.callback import STATE_FILE_PATTERN, RayCallbackAdapter

skip_module_unless_installed("ray.tune")
# Imported at a test's first use, not with the module (each test defines its subclasses of Ray's Callback): device
# processes import this module to run its trainable, and ray.tune (with pandas and pyarrow) cost each about 1.5
# CPU-s more.
rt = LazyRayTune()


class Counting(tune.Callback):
    """Counts results; records the calls that matter here, in order."""

    def __init__(self) -> None:
        self.results = 0
        self.calls: list[Any] = []

    def setup(self, **info: Any) -> None:
        self.calls.append("setup")

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self.results += 1

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.calls.append("end")

    def get_state(self) -> dict[str, Any] | None:
        return {"results": self.results}

    def set_state(self, state: dict[str, Any]) -> None:
        self.calls.append(("set_state", dict(state)))
        self.results = state["results"]


class Stateless(tune.Callback):
    def set_state(self, state: dict[str, Any]) -> None:  # must never be called: it saved nothing
        raise AssertionError(f"set_state({state!r}) on a callback without state")


def _saved(folder: str) -> dict[int, Any]:
    (path,) = glob.glob(os.path.join(folder, STATE_FILE_PATTERN.format("*")))
    with open(path, "rb") as f:
        return cloudpickle.load(f)


def _results(adapter: RayCallbackAdapter, trial_id: str, count: int) -> None:
    for i in range(1, count + 1):
        adapter.on_trial_result(trial_id, {"training_iteration": i, "iterations_since_restore": i})


def test_first_event_saves_then_the_period_rules_until_the_last_save_at_the_end(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PERIOD_ENV, "3600")
    counting = Counting()
    adapter = RayCallbackAdapter([counting, Stateless()], str(tmp_path), "f")
    adapter.setup(stop=None, num_samples=1, total_num_samples=1)
    adapter.on_trial_start("t0", {"x": 1}, 0)
    assert _saved(str(tmp_path)) == {0: {"results": 0}, 1: None}  # the first event saved
    _results(adapter, "t0", 3)
    assert _saved(str(tmp_path))[0] == {"results": 0}  # within the period: not again
    adapter.experiment_end()
    assert _saved(str(tmp_path))[0] == {"results": 3} and counting.calls == ["setup", "end"]

    monkeypatch.setenv(PERIOD_ENV, "0")
    every = RayCallbackAdapter([Counting()], str(tmp_path / "every"), "f")
    os.makedirs(tmp_path / "every")
    every.on_trial_start("t0", {"x": 1}, 0)
    _results(every, "t0", 2)
    assert _saved(str(tmp_path / "every")) == {0: {"results": 2}}  # period 0: after every event


def test_a_restoring_adapter_gives_saved_states_before_setup_and_skips_stateless_callbacks(tmp_path) -> None:
    first = Counting()
    adapter = RayCallbackAdapter([first, Stateless()], str(tmp_path), "f")
    adapter.on_trial_start("t0", {"x": 1}, 0)
    _results(adapter, "t0", 4)
    adapter.experiment_end()
    fresh, stateless = Counting(), Stateless()
    RayCallbackAdapter([fresh, stateless], str(tmp_path), "f", restore=True).setup(
        stop=None, num_samples=1, total_num_samples=1)
    assert fresh.calls == [("set_state", {"results": 4}), "setup"] and fresh.results == 4
    untouched = Counting()
    RayCallbackAdapter([untouched], str(tmp_path), "f").setup(stop=None, num_samples=1, total_num_samples=1)
    assert untouched.calls == ["setup"]  # a run that does not continue the experiment restores nothing


def test_nothing_is_written_without_state_and_a_bad_period_names_the_variable(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = RayCallbackAdapter([Stateless()], str(tmp_path), "f")
    adapter.on_trial_start("t0", {"x": 1}, 0)
    adapter.experiment_end()
    assert not glob.glob(str(tmp_path / "callback-states-*"))
    monkeypatch.setenv(PERIOD_ENV, "soon")
    with pytest.raises(ConfigError, match=r"TUNE_GLOBAL_CHECKPOINT_S must be 'auto' or a number of seconds "
                                          r">= 0 \(got 'soon'\)"):
        RayCallbackAdapter([Counting()], str(tmp_path), "f")


def _steps(config: dict[str, Any]) -> None:
    for i in range(3):
        tune.report({"i": i + config["x"]})


def test_a_resumed_run_gives_fresh_callbacks_the_states_the_first_run_ended_with(ray_cluster, tmp_path) -> None:
    class RayCounting(rt.Callback):
        """Ray's own base class, with state."""

        def __init__(self) -> None:
            self.results = 0
            self.restored: dict[str, Any] | None = None

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            self.results += 1

        def get_state(self) -> dict[str, Any] | None:
            return {"ray_results": self.results}

        def set_state(self, state: dict[str, Any]) -> None:
            self.restored = dict(state)
            self.results = state["ray_results"]

    kwargs: dict[str, Any] = {"config": {"x": tune.grid_search([0, 1])}, "metric": "i", "mode": "max",
                              "storage_path": str(tmp_path), "name": "stateful", "verbose": 0}
    first, first_ray = Counting(), RayCounting()
    tune.run(_steps, callbacks=[first, first_ray], **kwargs)
    assert first.results == first_ray.results == 6
    fresh, fresh_ray = Counting(), RayCounting()
    tune.run(_steps, callbacks=[fresh, fresh_ray], resume=True, **kwargs)
    assert fresh.calls[:2] == [("set_state", {"results": 6}), "setup"]
    assert fresh_ray.restored == {"ray_results": 6}


def test_a_resumed_runs_callbacks_are_given_every_trial_of_the_experiment(ray_cluster, tmp_path) -> None:
    """As Ray's restored controller holds every trial of the experiment, a resumed run's callbacks get those that
    ended before it too, with their last results; they saw only the trials this session ran (a helper's script)."""
    class EndSeen(rt.Callback):
        """Ray's base class; records the trials its ``on_experiment_end`` is given."""

        def __init__(self) -> None:
            self.ended: list[tuple[int, str, int | None]] = []

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            self.ended = sorted((t.config["x"], t.status, (t.last_result or {}).get("training_iteration"))
                                for t in trials)

    kwargs: dict[str, Any] = {"config": {"x": tune.grid_search([0, 1])}, "metric": "i", "mode": "max",
                              "storage_path": str(tmp_path), "name": "all_trials", "verbose": 0}
    tune.run(_steps, **kwargs)
    seen = EndSeen()
    tune.run(_steps, callbacks=[seen], resume=True, **kwargs)
    assert seen.ended == [(0, "TERMINATED", 3), (1, "TERMINATED", 3)]


def test_step_hooks_wrap_each_pass_of_the_driver_loop(ray_cluster, tmp_path) -> None:
    class Steps(rt.Callback):
        """Ray's base class; records its step calls and the results seen between them."""

        def __init__(self) -> None:
            self.calls: list[tuple[str, int, int]] = []

        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            self.calls.append(("begin", iteration, len(trials)))

        def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
            self.calls.append(("end", iteration, len(trials)))

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            self.calls.append(("result", iteration, len(trials)))

    steps = Steps()
    tune.run(_steps, config={"x": tune.grid_search([0, 1])}, storage_path=str(tmp_path), name="steps", verbose=0,
             callbacks=[steps])
    kinds = [kind for kind, _, _ in steps.calls]
    assert kinds.count("result") == 6 and kinds[0] == "begin"
    # Begin and end alternate, the last pass ends too, and every result comes inside a pass.
    passes = [kind for kind in kinds if kind != "result"]
    assert passes == ["begin", "end"] * (len(passes) // 2)
    inside = False
    for kind, _, _ in steps.calls:
        inside = {"begin": True, "end": False}.get(kind, inside)
        assert kind != "result" or inside
    assert steps.calls[-1][0] == "end" and steps.calls[-1][2] == 2  # the trials seen so far, each once
    adapter = RayCallbackAdapter([Counting(), steps], str(tmp_path), "f")
    adapter.on_step_begin()
    assert adapter._stepping["on_step_begin"] == [steps]  # a callback with the base class's no-op is not called
