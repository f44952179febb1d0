"""Ctrl-C under the Ray Tune front end (``fluidsalus/tune/_interrupt.py``), with Ray Tune's rules.

- :class:`StopSignals` alone (no Ray): one signal is graceful, a second is not, a ``KeyboardInterrupt`` no signal
  caused is not, ``TUNE_DISABLE_SIGINT_HANDLER`` leaves SIGINT to Python, handlers are put back, and outside the
  main thread nothing changes.
- Real runs on the shared 2-CPU Ray, with real signals sent to the driver: ``Tuner.fit`` and ``tune.run`` return
  the results so far after the first Ctrl-C or SIGUSR1 (a trial that was running or pending shows ``TERMINATED``,
  in the grid and in the callbacks' ``on_experiment_end``, as after Ray's clean-up, while the saved state keeps it
  ``RUNNING`` or ``PENDING``) and the experiment continues to the end; a second Ctrl-C,
  or one with the handler disabled, raises ``KeyboardInterrupt`` and the experiment still continues.
- A driver SIGKILLed at a chosen point (a subprocess on the shared Ray): a paced ASHA run killed as its devices
  start, or once its first trials are made, restores to the end an uninterrupted run has.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from _trials import skip_module_unless_installed

from fluidsalus import tune
from fluidsalus.result import ResultGrid
from fluidsalus.testing.tune import RESUMABLE_STEPS, SignalOnce, resumable
from fluidsalus.tune import Tuner
from fluidsalus.tune._interrupt import DISABLE_SIGINT_ENV, StopSignals

# Not imported here (no test reads it): the killed driver's subprocess below imports this module, and ray.tune (with
# pandas and pyarrow) cost it about 1.5 CPU-s more.
skip_module_unless_installed("ray.tune")

#: Trials of each run below; the signal comes at a result where none of them can have finished.
_TRIALS = 3
_SIGNAL_AT = 4

# ---------------------------------------------------------------------------------------------------------
# StopSignals alone
# ---------------------------------------------------------------------------------------------------------


def test_one_signal_is_graceful_and_a_second_is_not() -> None:
    before = signal.getsignal(signal.SIGINT)
    signals = StopSignals()
    with pytest.raises(KeyboardInterrupt), signals:
        signal.raise_signal(signal.SIGINT)
    assert signals.graceful()
    assert signal.getsignal(signal.SIGINT) is before
    twice = StopSignals()
    with pytest.raises(KeyboardInterrupt), twice:
        try:
            signal.raise_signal(signal.SIGINT)
        finally:
            signal.raise_signal(signal.SIGINT)
    assert twice.received == 2 and not twice.graceful()


def test_sigusr1_is_a_stop_signal_too_and_a_raised_keyboardinterrupt_is_not_one() -> None:
    signals = StopSignals()
    with pytest.raises(KeyboardInterrupt), signals:
        signal.raise_signal(signal.SIGUSR1)
    assert signals.graceful()
    raised = StopSignals()
    with pytest.raises(KeyboardInterrupt), raised:
        raise KeyboardInterrupt
    assert not raised.graceful()


def test_disabled_sigint_handler_leaves_ctrl_c_to_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_SIGINT_ENV, "1")
    before = signal.getsignal(signal.SIGINT)
    signals = StopSignals()
    with pytest.raises(KeyboardInterrupt), signals:
        assert signal.getsignal(signal.SIGINT) is before
        signal.raise_signal(signal.SIGINT)
    assert not signals.graceful()


def test_a_signal_before_the_run_is_armed_raises_uncounted() -> None:
    """Before :meth:`StopSignals.arm` (the devices' start) a stop signal raises ``KeyboardInterrupt`` without the
    warning and is not graceful, as a Ctrl-C before Ray's handler is set; once armed, the first is graceful."""
    signals = StopSignals(armed=False)
    with pytest.raises(KeyboardInterrupt), signals:
        signal.raise_signal(signal.SIGINT)
    assert signals.received == 0 and not signals.graceful()
    signals.arm()
    with pytest.raises(KeyboardInterrupt), signals:
        signal.raise_signal(signal.SIGINT)
    assert signals.graceful()


def test_outside_the_main_thread_no_handler_is_set() -> None:
    seen: list[object] = []

    def enter() -> None:
        with StopSignals():
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == [before]


# ---------------------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------------------


def _signal(storage: str, *signals: int) -> SignalOnce:
    """A Ctrl-C (or ``signals``) at result :data:`_SIGNAL_AT`, once in this test."""
    return SignalOnce(os.path.join(storage, "signalled"), _SIGNAL_AT, signals or (signal.SIGINT,))


def _tuner(storage: str, name: str, callback: tune.Callback, *more: tune.Callback) -> Tuner:
    return Tuner(resumable, param_space={"x": tune.uniform(0, 1)},
                 tune_config=tune.TuneConfig(num_samples=_TRIALS, metric="i", mode="max"),
                 run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, callbacks=[callback, *more]))


class _AtEnd(tune.Callback):
    """Records the statuses ``on_experiment_end`` sees."""

    statuses: dict[str, str] | None = None

    def on_experiment_end(self, trials, **info):
        self.statuses = {t.trial_id: t.status for t in trials}


def _check_shown_as_ray_shows(statuses: dict[str, str], path: str) -> None:
    """Check ``statuses`` (trial id -> status after the first stop signal) against the saved state.

    Some trial was running when the signal came and the store keeps it ``RUNNING`` (so it resumes); the run
    returns it ``TERMINATED``, as Ray's clean-up does, and a pending one too (Ray's clean-up stops the actors it
    requested for its pending trials: h110's end_states.py showed them ``TERMINATED`` in Ray 2.60's grid), and
    every other trial (paused, ended) with its stored status.
    """
    stored = {r.trial_id: r.status for r in ResultGrid.read(path)}
    assert "RUNNING" in stored.values() and statuses.keys() == stored.keys()
    assert statuses == {tid: "TERMINATED" if s in ("RUNNING", "PENDING") else s for tid, s in stored.items()}
    # Ray's ExperimentAnalysis of the folder reads its saved state, where a trial it was running is PENDING (they
    # showed RUNNING, as if a driver ran them: a helper's side-by-side run)
    analysed = {t.trial_id: t.status for t in tune.ExperimentAnalysis(path).trials}
    assert analysed == {tid: "PENDING" if s == "RUNNING" else s for tid, s in stored.items()}


def _finish(path: str) -> None:
    """Restore the experiment at ``path`` and check that it ends with every trial done, from checkpoints."""
    grid = Tuner.restore(path, resumable).fit()
    assert len(grid) == _TRIALS and grid.num_errors == 0
    assert all(r.metrics["i"] == RESUMABLE_STEPS for r in grid)
    assert any(r.metrics["resumed_from"] > 0 for r in grid)


def test_first_ctrl_c_returns_the_results_so_far_and_the_experiment_resumes(
        ray_cluster, storage: str, caplog: pytest.LogCaptureFixture) -> None:
    before = signal.getsignal(signal.SIGINT)
    at_end = _AtEnd()
    tuner = _tuner(storage, "ctrl_c", _signal(storage), at_end)
    with caplog.at_level(logging.WARNING, logger="fluidsalus.tune"):
        grid = tuner.fit()
    path = os.path.join(storage, "ctrl_c")
    assert tuner.interrupted and grid.experiment_path == path
    assert signal.getsignal(signal.SIGINT) is before
    assert len(grid) == _TRIALS
    _check_shown_as_ray_shows({r.trial_id: r.status for r in grid}, path)
    # The callbacks' on_experiment_end sees the trials as the grid shows them, every one of them (as Ray's, after
    # its clean-up; it saw those that had run RUNNING, and none that had not started)
    assert at_end.statuses == {r.trial_id: r.status for r in grid}
    reported = [r for r in grid if r.metrics_dataframe is not None]
    assert sum(len(r.metrics_dataframe) for r in reported) >= _SIGNAL_AT  # every acknowledged result
    # the results so far: not every trial ended (one may end before the stop reaches it on a loaded machine: the
    # stop comes with the batch after the 4th result, and a trial's 6 steps take 0.6 s)
    assert min((r.metrics or {}).get("i", 0) for r in grid) < RESUMABLE_STEPS
    assert "Stop signal received" in caplog.text
    assert f'Resume experiment with: Tuner.restore(path="{path}", trainable=...)' in caplog.text
    assert tuner.get_results() is grid
    _finish(path)



def test_first_ctrl_c_keeps_the_last_result_the_device_held(ray_cluster, storage: str) -> None:
    """A result whose poll was on its way to the driver when the Ctrl-C came was dropped (the grid's last ``i``
    was 2); Ray's first Ctrl-C lets the trials' last results through (3 in Ray 2.60). The first Ctrl-C takes what
    the devices hold before it stops the trials (``Executor._drain``)."""
    driver = os.getpid()

    def train(config):
        for i in range(1, 4):
            time.sleep(0.2)
            tune.report({"i": i})
        os.kill(driver, signal.SIGINT)  # the user's Ctrl-C, right after the third result
        time.sleep(1)
        tune.report({"i": 4})  # (the run has stopped the trial: it ends here)

    tuner = Tuner(train, run_config=tune.RunConfig(name="last_result", storage_path=storage, verbose=0))
    [result] = tuner.fit()
    assert tuner.interrupted
    assert result.metrics["i"] == 3 and list(result.metrics_dataframe["i"]) == [1, 2, 3]


def test_sigusr1_ends_a_run_like_ctrl_c(ray_cluster, storage: str) -> None:
    tuner = _tuner(storage, "usr1", _signal(storage, signal.SIGUSR1))
    grid = tuner.fit()
    assert tuner.interrupted
    _check_shown_as_ray_shows({r.trial_id: r.status for r in grid}, os.path.join(storage, "usr1"))
    assert Tuner.can_restore(os.path.join(storage, "usr1"))  # continued as after Ctrl-C (the first test)


def test_second_ctrl_c_raises_and_the_experiment_still_resumes(ray_cluster, storage: str) -> None:
    tuner = _tuner(storage, "twice", _signal(storage, signal.SIGINT, signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    assert not tuner.interrupted
    _finish(os.path.join(storage, "twice"))


def test_disabled_handler_makes_ctrl_c_raise(ray_cluster, storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_SIGINT_ENV, "1")
    with pytest.raises(KeyboardInterrupt):
        _tuner(storage, "disabled", _signal(storage)).fit()
    assert Tuner.can_restore(os.path.join(storage, "disabled"))  # continued as after a second Ctrl-C


@pytest.mark.parametrize("when", ["_start_devices", "_take_groups"])
def test_a_ctrl_c_during_the_devices_start_raises_as_rays_and_the_experiment_restores(
        ray_cluster, storage: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        when: str) -> None:
    """Ray sets its SIGINT handler once its set-up is done, just before its tuning loop: a Ctrl-C before it raises
    ``KeyboardInterrupt`` from ``fit()`` (a helper's side-by-side run: 0.05-2.5 s into a first ``fit()``; its folder
    holds ``tuner.pkl``). fluidsalus returned an empty ``ResultGrid`` for one during its devices' start (no trial
    made yet), after the warning that the trials were stopped, and so it did for one in its loop's first pass before
    its first trials were made (h191's F2). Now it raises, and the folder restores: every trial runs."""
    from fluidsalus.store import ExperimentStore
    from fluidsalus.trialgroup.executor import Executor

    original = getattr(Executor, when)

    def interrupted(self, *args, **kwargs):
        monkeypatch.setattr(Executor, when, original)  # (once)
        signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C as the devices start, or before the first trials
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Executor, when, interrupted)
    before = signal.getsignal(signal.SIGINT)
    tuner = Tuner(resumable, param_space={"x": tune.uniform(0, 1)},
                  tune_config=tune.TuneConfig(num_samples=_TRIALS, metric="i", mode="max"),
                  run_config=tune.RunConfig(name="at_start", storage_path=storage, verbose=0))
    with caplog.at_level(logging.WARNING, logger="fluidsalus.tune"), pytest.raises(KeyboardInterrupt):
        tuner.fit()
    assert not tuner.interrupted and "Stop signal received" not in caplog.text
    assert signal.getsignal(signal.SIGINT) is before
    path = os.path.join(storage, "at_start")
    reader = ExperimentStore.open(path, readonly=True)
    try:
        assert reader.trials() == [] and reader.experiment()["status"] == "INTERRUPTED"
    finally:
        reader.close()
    assert Tuner.can_restore(path)
    grid = Tuner.restore(path, resumable).fit()
    assert len(grid) == _TRIALS and grid.num_errors == 0
    assert all(r.metrics["i"] == RESUMABLE_STEPS for r in grid)


def test_a_ctrl_c_during_a_restores_start_returns_its_trials_as_rays(
        ray_cluster, storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore's trials are there before its devices start: Ray's restore, in a process whose Ray is up, returns
    them at a Ctrl-C then (h191's F1, side by side); fluidsalus raised ``KeyboardInterrupt`` as for a first
    ``fit()``. It returns them, and the experiment restores again."""
    from fluidsalus.trialgroup.executor import Executor

    _tuner(storage, "restore_start", _signal(storage)).fit()  # (stopped by a Ctrl-C mid-run: trials unfinished)
    path = os.path.join(storage, "restore_start")
    start_devices = Executor._start_devices

    def interrupted_start(self, *args, **kwargs):
        monkeypatch.setattr(Executor, "_start_devices", start_devices)  # (once)
        signal.raise_signal(signal.SIGINT)
        return start_devices(self, *args, **kwargs)

    monkeypatch.setattr(Executor, "_start_devices", interrupted_start)
    tuner = Tuner.restore(path, resumable)
    grid = tuner.fit()
    assert tuner.interrupted and len(grid) == _TRIALS
    grid = Tuner.restore(path, resumable).fit()
    assert len(grid) == _TRIALS and all(r.metrics["i"] == RESUMABLE_STEPS for r in grid)


def test_tune_run_returns_its_analysis_after_ctrl_c_without_raising_for_unfinished_trials(
        ray_cluster, storage: str, caplog: pytest.LogCaptureFixture) -> None:
    kwargs = {"config": {"x": tune.uniform(0, 1)}, "num_samples": _TRIALS, "metric": "i", "mode": "max",
              "storage_path": storage, "name": "legacy", "verbose": 0}
    with caplog.at_level(logging.WARNING, logger="fluidsalus.tune"):
        analysis = tune.run(resumable, callbacks=[_signal(storage)], raise_on_failed_trial=True, **kwargs)
    assert len(analysis.trials) == _TRIALS
    _check_shown_as_ray_shows({t.trial_id: t.status for t in analysis.trials}, os.path.join(storage, "legacy"))
    assert "Resume experiment with: tune.run(..., resume=True)" in caplog.text
    waiting = [t.trial_id for t in analysis.trials if t.status != "TERMINATED"]  # pending or paused: logged
    assert ("Trials did not complete: " in caplog.text) == bool(waiting)
    assert all(tid in caplog.text for tid in waiting)
    assert analysis.best_result["i"] < RESUMABLE_STEPS
    done = tune.run(resumable, resume=True, **kwargs)
    assert sorted(t.trial_id for t in done.trials) == sorted(t.trial_id for t in analysis.trials)
    assert all(t.last_result["i"] == RESUMABLE_STEPS for t in done.trials)


# ---------------------------------------------------------------------------------------------------------
# A driver killed (SIGKILL) at a chosen point
# ---------------------------------------------------------------------------------------------------------

#: Trials of the killed paced ASHA run below, and its ``max_concurrent_trials`` (its first batch).
_PACED_TRIALS, _PACED_CAP = 4, 2


def _paced_asha_tuner(storage: str, name: str) -> Tuner:
    """ASHA under ``max_concurrent_trials``: its first batch is :data:`_PACED_CAP` trials, the rest come as they end."""
    return Tuner(resumable, param_space={"x": tune.uniform(0, 1)},
                 tune_config=tune.TuneConfig(num_samples=_PACED_TRIALS, metric="i", mode="max",
                                             max_concurrent_trials=_PACED_CAP,
                                             scheduler=tune.schedulers.ASHAScheduler(max_t=RESUMABLE_STEPS)),
                 run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0))


#: Where the driver of the test below kills itself: an ``Executor`` method, and whether after it returned.
_KILL_POINTS = {"devices_start": ("_start_devices", False), "first_trials": ("_take_groups", True)}


# (The kill after the first trials also waits for the killed driver's device processes to end before its resume:
# about 10 s more, so it runs with FLUIDSALUS_RUN_SLOW=1; both failed before tuner.pkl came with the store.)
@pytest.mark.parametrize("where", [
    "devices_start", pytest.param("first_trials", marks=[pytest.mark.slow, pytest.mark.skipif(
        not os.environ.get("FLUIDSALUS_RUN_SLOW"), reason="set FLUIDSALUS_RUN_SLOW=1")])])
def test_a_paced_asha_run_killed_before_its_trials_start_restores_to_an_uninterrupted_runs_end(
        ray_cluster, storage: str, where: str) -> None:
    """The driver is SIGKILLed as its devices start (its store made, no trial yet) or as soon as its first batch of
    trials (and its searcher's state) committed, before any of them started. ``tuner.pkl`` was written at the first
    trial event only, so ``Tuner.restore`` refused the folder (NotRestorableError: not restorable) and
    ``tune.run(resume=True)`` started a new experiment of another name; it is now written as soon as the run's store
    is made (Ray writes it as ``fit`` begins), and the restore goes on as if the run had not been interrupted."""
    from fluidsalus.store import ExperimentStore

    name = "paced_killed"
    method, after = _KILL_POINTS[where]
    script = textwrap.dedent(f"""
        import os, signal, sys, ray
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from fluidsalus.trialgroup.executor import Executor
        from test_tune_interrupt import _paced_asha_tuner

        method = getattr(Executor, {method!r})

        def then_die(self, *args, **kwargs):
            if not {after!r}:
                os.kill(os.getpid(), signal.SIGKILL)
            method(self, *args, **kwargs)
            if self.trials:  # the first batch is in the store: killed before any trial starts
                os.kill(os.getpid(), signal.SIGKILL)

        setattr(Executor, {method!r}, then_die)
        ray.init(address={ray_cluster.get_runtime_context().gcs_address!r}, configure_logging=False)
        _paced_asha_tuner({storage!r}, {name!r}).fit()
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-4000:]
    path = os.path.join(storage, name)
    reader = ExperimentStore.open(path, readonly=True)
    try:
        made = {t.trial_id: t.status for t in reader.trials()}
        assert reader.experiment()["status"] == "RUNNING"
        assert bool(reader.experiment()["searcher_state"]) == bool(made)  # (saved with the first trials)
    finally:
        reader.close()
    assert len(made) == (_PACED_CAP if after else 0) and set(made.values()) <= {"PENDING"}  # (none started)
    assert Tuner.can_restore(path)
    grid = Tuner.restore(path, resumable).fit()
    assert len(grid) == _PACED_TRIALS and grid.num_errors == 0 and set(made) <= {r.trial_id for r in grid}
    assert ResultGrid.read(path).num_terminated == _PACED_TRIALS
