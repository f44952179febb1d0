"""An exception raised by a run's experiment callback (``RunConfig(callbacks=[...])``: a ``tune.Callback``, a
``LoggerCallback``), handled hook by hook as Ray Tune 2.60's controller handles it:

- ``on_trial_complete`` (a ``LoggerCallback``'s ``log_trial_end``): logged, the trial ends ``ERROR`` (its results and
  checkpoints kept, ``on_trial_error`` called) and the run goes on; it ended the whole run;
- ``on_checkpoint``: logged, the run goes on (the checkpoint kept); it ended the whole run;
- ``on_trial_result``, ``on_trial_save``, ``on_trial_error``, ``on_trial_recover`` (and ``log_trial_result``): the run
  ends with a ``TuneError`` (Ray's) naming the callback and the hook, from the callback's exception; it was the bare
  exception. What the trials reported is stored and the experiment is resumable;
- any other hook (``on_trial_start``, ``setup``, ...): the exception itself, as in Ray, with a note naming the
  callback and the hook.

The runs share the session's 2-CPU Ray (tests/conftest.py), a few short trials each.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

import pytest

from fluidsalus import tune
from fluidsalus.errors import CallbackError
from fluidsalus.tune.callback import RayCallbackAdapter
from fluidsalus.tune.logger import LoggerCallback

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _resumed_at() -> int:
    """The iteration the trial's checkpoint (file ``it``) says it resumes at, 0 without one."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as folder, open(os.path.join(folder, "it")) as f:
        return int(f.read())


def _train(config: dict[str, Any]) -> None:
    """Three iterations, each with a checkpoint; with ``fail``, trial x=1 raises at the second of every attempt."""
    start = _resumed_at()
    for i in range(start, 3):
        if config["fail"] and config["x"] == 1 and i == 1:
            raise RuntimeError("the trial fails")
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "it"), "w") as f:
                f.write(str(i + 1))
            tune.report({"score": i}, checkpoint=tune.Checkpoint.from_directory(folder))


class Raising(tune.Callback):
    """Raises ``ValueError`` at the first call of ``hook`` (while :attr:`armed`); records every hook called, with
    the trial's ``x``."""

    #: Off for a restored run (its callbacks are the first run's, unpickled from tuner.pkl)
    armed = True

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.calls: list[tuple[str, Any]] = []

    def _called(self, hook: str, trial: Any = None) -> None:
        self.calls.append((hook, None if trial is None else trial.config["x"]))
        if self.armed and hook == self.hook and sum(1 for h, _ in self.calls if h == hook) == 1:
            raise ValueError(f"boom in {hook}")

    def setup(self, **info: Any) -> None:
        self._called("setup")

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._called("on_trial_start", trial)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self._called("on_trial_result", trial)

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        self._called("on_checkpoint", trial)

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._called("on_trial_save", trial)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._called("on_trial_complete", trial)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._called("on_trial_error", trial)

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._called("on_trial_recover", trial)


class RaisingLogger(LoggerCallback):
    """A ``LoggerCallback`` whose ``log_*`` method ``hook`` raises ``ValueError`` at its first call (while armed)."""

    armed = True

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.ends: list[tuple[Any, bool]] = []
        self.count = 0

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        self._maybe_raise("log_trial_result")

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self.ends.append((trial.config["x"], failed))
        self._maybe_raise("log_trial_end")

    def _maybe_raise(self, hook: str) -> None:
        if self.armed and hook == self.hook:
            self.count += 1
            if self.count == 1:
                raise ValueError(f"boom in {hook}")


def _fit(path: Any, name: str, callback: Any, xs: list[int], fail: bool = False, **failure: Any) -> Any:
    space = {"x": tune.grid_search(xs), "fail": fail}
    return tune.Tuner(_train, param_space=space, tune_config=tune.TuneConfig(max_concurrent_trials=1),
                      run_config=tune.RunConfig(name=name, storage_path=str(path), callbacks=[callback], verbose=0,
                                                failure_config=tune.FailureConfig(**failure))).fit()


def _by_x(grid: Any) -> dict[int, Any]:
    return {result.config["x"]: result for result in grid}


@pytest.mark.parametrize("logger_hook", [False, True], ids=["on_trial_complete", "log_trial_end"])
def test_a_callback_raising_at_a_trials_end_fails_that_trial_and_the_run_goes_on(tmp_path, caplog,
                                                                                  logger_hook: bool) -> None:
    """Ray's stop_trial logs the exception and fails the trial; the whole run ended here (a helper's script)."""
    callback = RaisingLogger("log_trial_end") if logger_hook else Raising("on_trial_complete")
    with caplog.at_level(logging.ERROR, logger="fluidsalus.tune.callback"):
        grid = _fit(tmp_path, "end", callback, [0, 1])
    results = _by_x(grid)
    assert len(grid) == 2 and grid.num_errors == 1
    failed = results[0]
    assert isinstance(failed.error, tune.error.TuneError) and isinstance(failed.error, ValueError)
    assert "on_trial_complete" in str(failed.error) and "boom in" in str(failed.error)
    # its results and checkpoints are kept; the next trial ran
    assert failed.metrics["training_iteration"] == 3 and list(failed.metrics_dataframe["training_iteration"]) == \
        [1, 2, 3]
    assert failed.checkpoint is not None and os.path.isdir(failed.checkpoint.path)
    assert os.path.isfile(os.path.join(failed.path, "error.txt"))
    assert results[1].error is None and results[1].metrics["training_iteration"] == 3
    if logger_hook:  # on_trial_error after the failed on_trial_complete: log_trial_end(failed=True)
        assert callback.ends == [(0, False), (0, True), (1, False)]
    else:
        assert ("on_trial_error", 0) in callback.calls
        assert callback.calls.index(("on_trial_complete", 0)) < callback.calls.index(("on_trial_error", 0))
    assert "Error stopping trial" in caplog.text and "on_trial_complete" in caplog.text
    # the experiment is resumable: the errored trial resumes from its last checkpoint and ends
    type(callback).armed = False
    try:
        again = tune.Tuner.restore(grid.experiment_path, _train, resume_errored=True).fit()
    finally:
        type(callback).armed = True
    assert again.num_errors == 0
    assert [r.metrics["training_iteration"] for r in sorted(again, key=lambda r: r.config["x"])] == [3, 3]


def test_a_callback_raising_in_on_checkpoint_is_logged_and_the_run_goes_on(tmp_path, caplog) -> None:
    """Ray's controller logs it (with its warning about the checkpoint interface); the whole run ended here."""
    callback = Raising("on_checkpoint")
    with caplog.at_level(logging.WARNING, logger="fluidsalus.tune.callback"):
        grid = _fit(tmp_path, "checkpoint", callback, [0, 1])
    assert grid.num_errors == 0
    assert [r.metrics["training_iteration"] for r in sorted(grid, key=lambda r: r.config["x"])] == [3, 3]
    assert "checkpoint interface" in caplog.text and "Raising.on_checkpoint" in caplog.text
    assert callback.calls.count(("on_trial_save", 0)) == 3  # on_trial_save is called all the same, as in Ray
    assert _by_x(grid)[0].checkpoint is not None


@pytest.mark.parametrize("hook", ["on_trial_result", "on_trial_save", "on_trial_recover", "on_trial_error",
                                  "log_trial_result"])
def test_a_callback_raising_in_a_trial_event_hook_ends_the_run_with_a_tune_error(tmp_path, hook: str) -> None:
    """As Ray's controller (its future handlers wrap any exception in TuneError); here the error names the
    callback and the hook, its cause is the callback's exception, and what was reported is kept."""
    callback = RaisingLogger(hook) if hook.startswith("log_") else Raising(hook)
    failing = hook in ("on_trial_recover", "on_trial_error")  # x=1 fails at its second iteration
    with pytest.raises(tune.error.TuneError) as raised:
        _fit(tmp_path, hook, callback, [0, 1], fail=failing, max_failures=1 if hook == "on_trial_recover" else 0)
    error = raised.value
    assert isinstance(error, CallbackError) and isinstance(error.__cause__, ValueError)
    shown = "on_trial_result" if hook == "log_trial_result" else hook
    assert error.hook == shown and f"{type(callback).__name__}.{shown}" in str(error)
    assert f"ValueError: boom in {hook}" in str(error)
    path = os.path.join(str(tmp_path), hook)
    stored = tune.ExperimentAnalysis(path).trial_dataframes
    assert max(len(frame) for frame in stored.values()) >= 1  # (what the trials reported is kept)
    if hook == "on_trial_result":  # resumable: the run finishes
        Raising.armed = False
        try:
            again = tune.Tuner.restore(path, _train).fit()
        finally:
            Raising.armed = True
        assert again.num_errors == 0 and [r.metrics["training_iteration"] for r in again] == [3, 3]


def test_a_callback_raising_in_another_hook_raises_its_exception_with_a_note(tmp_path) -> None:
    """on_trial_start, setup, the step hooks, on_experiment_end: the exception itself, as Ray raises it; a note
    names the callback and the hook."""
    with pytest.raises(ValueError, match="boom in on_trial_start") as raised:
        _fit(tmp_path, "start", Raising("on_trial_start"), [0])
    assert not isinstance(raised.value, tune.error.TuneError)
    assert any("Raising.on_trial_start" in note for note in getattr(raised.value, "__notes__", []))


def test_an_exception_ends_the_hooks_round_as_in_rays_callback_list(tmp_path) -> None:
    """The callbacks after the one that raised are not called for that event (Ray's CallbackList); the adapter
    hands the engine the failed end to record, and the trial's view is ERROR after on_trial_error."""
    first, second = Raising("on_trial_complete"), Raising("")
    adapter = RayCallbackAdapter([first, second], str(tmp_path), "f")
    adapter.on_trial_start("t0", {"x": 0}, 0)
    adapter.on_trial_result("t0", {"training_iteration": 1, "iterations_since_restore": 1})
    adapter.on_trial_complete("t0", "TERMINATED", {"training_iteration": 1})
    assert ("on_trial_complete", 0) not in second.calls and ("on_trial_error", 0) in second.calls
    ((trial_id, text, trace, _),) = adapter.failed_ends()
    assert trial_id == "t0" and text == "ValueError: boom in on_trial_complete" and "Raising.on_trial_complete" in trace
    assert adapter.trials["t0"].status == "ERROR" and adapter.failed_ends() == []


class _SetupRaises(Raising):
    """Raises in ``setup``; records ``on_experiment_end``."""

    def __init__(self) -> None:
        super().__init__("setup")

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self._called("on_experiment_end")


def test_a_callback_whose_setup_raises_on_a_resume_gets_no_experiment_end(tmp_path) -> None:
    """As in Ray and in a new run, a callback whose setup raised is not told the experiment ended; a resume called
    its on_experiment_end (its setup ran once fluidsalus.run accepted the resume: h101's F3)."""
    space = {"x": tune.grid_search([0]), "fail": False}
    tune.run(_train, config=space, name="e", storage_path=str(tmp_path), verbose=0)
    callback = _SetupRaises()
    with pytest.raises(ValueError, match="boom in setup"):
        tune.run(_train, config=space, name="e", storage_path=str(tmp_path), verbose=0, resume=True,
                 callbacks=[callback])
    assert callback.calls == [("setup", None)]


def _every_file(folder: str) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes (the driver's lock file left out: each driver writes its line)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            if name != ".driver.lock":
                with open(os.path.join(root, name), "rb") as f:
                    out[os.path.relpath(os.path.join(root, name), folder)] = f.read()
    return out


def _fails_while_flagged(config: dict[str, Any]) -> None:
    """Three iterations, each with a checkpoint; raises at the second while the file ``config["flag"]`` exists;
    reports where it began (``start``)."""
    start = _resumed_at()
    for i in range(start, 3):
        if i == 1 and os.path.exists(config["flag"]):
            raise RuntimeError("the trial fails")
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "it"), "w") as f:
                f.write(str(i + 1))
            tune.report({"score": i, "start": start}, checkpoint=tune.Checkpoint.from_directory(folder))


def test_a_restore_whose_callbacks_setup_raises_leaves_the_experiment_as_it_was(tmp_path) -> None:
    """The setup ran after the restore's flags were carried out: a RESTART_ERRORED resume whose callback's setup
    raised had deleted the errored trial's checkpoints and results files and made it PENDING (the experiment still
    FINISHED), and left -wal/-shm files beside the store; a later resume with resume_errored ran it from scratch.
    Ray's restore changes its trials in memory only: its experiment is left as it was (h111's d)."""
    flag = tmp_path / "fail"
    flag.touch()
    space = {"x": tune.grid_search([1]), "flag": str(flag)}
    kwargs: dict[str, Any] = {"config": space, "name": "e", "storage_path": str(tmp_path / "results"), "verbose": 0}
    tune.run(_fails_while_flagged, raise_on_failed_trial=False, **kwargs)
    flag.unlink()
    folder = str(tmp_path / "results" / "e")
    before = _every_file(folder)
    with pytest.raises(ValueError, match="boom in setup"):
        tune.run(_fails_while_flagged, resume="AUTO+RESTART_ERRORED", callbacks=[_SetupRaises()], **kwargs)
    assert _every_file(folder) == before
    # the errored trial goes on from its checkpoint, as now asked (it had lost it, and ran from scratch)
    (trial,) = tune.run(_fails_while_flagged, resume="AUTO+ERRORED", **kwargs).trials
    assert trial.status == "TERMINATED" and trial.last_result["score"] == 2 and trial.last_result["start"] == 1


class _ReadsLastResult(tune.Callback):
    """Reads ``trial.last_result`` in ``on_trial_complete``, as many callbacks do."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, str]] = []

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.seen.append((trial.trial_id, trial.last_result.get("trial_id"), trial.status))


def test_a_trial_ended_before_it_started_shows_rays_last_result_in_its_end_hook(tmp_path) -> None:
    """A trial its scheduler or search stops while queued gets on_trial_complete, as Ray's stop_trial calls it for
    a PENDING trial; Ray's Trial.last_result is then {"trial_id": ...}, never None. It was None here, so a callback
    reading it raised, and the trial that never ran ended ERROR."""
    reader = _ReadsLastResult()
    adapter = RayCallbackAdapter([reader], str(tmp_path), "f")
    adapter.on_trial_complete("t0", "TERMINATED", None)
    assert reader.seen == [("t0", "t0", "PENDING")]
    assert adapter.failed_ends() == [] and adapter.trials["t0"].status == "TERMINATED"
