"""fluidsalus.optuna.optimize with two devices or more: the sampler's calls (``trial.suggest_*``) are answered on
the driver's call threads, so a slow sampler (GPSampler) holds up only the trial that asked, not every device.

Every wait below has a timeout: a regression fails a test, it does not hang the suite.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

import fluidsalus.optuna as fo
from fluidsalus.errors import ConfigError, ConfigTypeError
from fluidsalus.store import ExperimentStore

pytestmark = pytest.mark.usefixtures("ray_cluster")

#: How long a test's sampler waits for something another trial does (the test fails, not hangs, if it never comes).
WAIT_S = 20.0
#: The prefix of the executor's call threads' names (``Executor._start_call``).
CALL_THREAD = "fluidsalus-call"


#: fluidsalus.optuna's own threshold (the fixture below sets it to 0 for each test).
DEFAULT_THREAD_MIN_S = fo.SAMPLER_THREAD_MIN_S


@pytest.fixture(autouse=True)
def every_sampler_is_slow(monkeypatch):
    """Every sampler call goes to a call thread (with two devices): the tests' samplers are fast, and by default
    only a slow sampler's calls go there (SAMPLER_THREAD_MIN_S)."""
    monkeypatch.setattr(fo, "SAMPLER_THREAD_MIN_S", 0.0)


def _optimize(study: optuna.Study, objective: Any, tmp_path: Any, **kwargs: Any) -> None:
    fo.optimize(study, objective, storage_path=str(tmp_path / "fluidsalus"), **kwargs)


def _three_params(trial: Any) -> float:
    return trial.suggest_float("a", 0, 1) + trial.suggest_float("b", 0, 1) + trial.suggest_int("c", 0, 3)


def _call_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(CALL_THREAD)]


class _Recording(optuna.samplers.RandomSampler):
    """Records, per trial number, the params it samples in order and the threads it samples them on."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.lock = threading.Lock()
        self.order: dict[int, list[str]] = {}
        self.threads: set[str] = set()

    def sample_independent(self, study, trial, param_name, param_distribution):
        with self.lock:
            self.order.setdefault(trial.number, []).append(param_name)
            self.threads.add(threading.current_thread().name)
        return super().sample_independent(study, trial, param_name, param_distribution)


class _Blocking(_Recording):
    """Trial 0's first sample waits until another trial asks for one: with the calls answered one at a time on
    the driver's loop, that never comes (trial 0 then fails with a TimeoutError)."""

    def __init__(self) -> None:
        super().__init__()
        self.other_asked = threading.Event()

    def sample_independent(self, study, trial, param_name, param_distribution):
        if trial.number == 0 and param_name == "a":
            if not self.other_asked.wait(WAIT_S):
                raise TimeoutError("no other trial's suggest was answered while trial 0's was being sampled")
        elif trial.number >= 1:
            self.other_asked.set()
        return super().sample_independent(study, trial, param_name, param_distribution)


def test_a_slow_sample_does_not_hold_up_another_device(tmp_path):
    sampler = _Blocking()
    study = optuna.create_study(sampler=sampler)
    _optimize(study, _three_params, tmp_path, n_trials=4, devices=2)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4, [t.user_attrs for t in study.trials]
    for number, names in sampler.order.items():  # each trial's calls still come in the objective's order
        assert names == ["a", "b", "c"], (number, names)
    assert sampler.threads and all(name.startswith(CALL_THREAD) for name in sampler.threads)
    assert not _call_threads()  # none left behind


class _RecordingTPE(optuna.samplers.TPESampler):
    """TPE (which reads the study's history), recording the threads it samples on."""

    def __init__(self) -> None:
        super().__init__(seed=3, n_startup_trials=3)
        self.threads: set[str] = set()

    def sample_independent(self, study, trial, param_name, param_distribution):
        self.threads.add(threading.current_thread().name)
        return super().sample_independent(study, trial, param_name, param_distribution)


def _three_kinds(trial: Any) -> float:
    x = trial.suggest_float("x", -5, 5)
    k = trial.suggest_int("k", 0, 9)
    c = trial.suggest_categorical("c", ["p", "q", "r"])
    return (x - 1) ** 2 + k + (c == "q")


def test_one_device_samples_on_the_loop_as_before(tmp_path):
    """One device: every call is answered on the driver's loop, one at a time: with a seed, the same params as
    Optuna's own sequential study.optimize (and as before call threads)."""
    sampler = _RecordingTPE()
    study = optuna.create_study(sampler=sampler)
    _optimize(study, _three_kinds, tmp_path, n_trials=8, devices=1, max_concurrent_trials=1)
    expected = optuna.create_study(sampler=_RecordingTPE())
    expected.optimize(_three_kinds, n_trials=8)
    assert [t.params for t in study.trials] == [t.params for t in expected.trials]
    assert sampler.threads == {threading.main_thread().name}


def test_sampler_threads_1_samples_on_the_loop(tmp_path):
    """sampler_threads=1: the calls of two devices' trials on the loop, as before (no call thread)."""
    sampler = _Recording()
    study = optuna.create_study(sampler=sampler)
    _optimize(study, _three_params, tmp_path, n_trials=4, devices=2, sampler_threads=1)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4
    assert sampler.threads == {threading.main_thread().name}


class _Counting(optuna.samplers.RandomSampler):
    """Records how many COMPLETE trials the sampler's own (cached) view of the study held at each trial's
    sample: samplers read it so (``Study._get_trials(use_cache=True)``: TPE, GP, CMA-ES, QMC)."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: dict[int, int] = {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        trials = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
        self.seen.setdefault(trial.number, len(trials))
        return super().sample_independent(study, trial, param_name, param_distribution)


def test_the_sampler_sees_the_study_as_it_is_on_a_call_thread(tmp_path):
    """Optuna keeps the trials list per thread from ask() to tell(); ask and tell run on the loop, so a call
    thread's list was never renewed and the sampler saw the study as at that thread's first call (a naive pool:
    ~560 of 600 TPE trials PRUNED, best 0.11 vs 0.103)."""
    sampler = _Counting()
    study = optuna.create_study(sampler=sampler)
    _optimize(study, _three_params, tmp_path, n_trials=10, devices=2, max_concurrent_trials=2)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 10
    # trial n starts once n - 1 trials ended at least (two run at once): its sampler sees them
    for number, seen in sampler.seen.items():
        assert seen >= number - 1, sampler.seen


def test_a_sampler_error_is_raised_in_the_calling_trial(tmp_path):
    class Failing(_Recording):
        def sample_independent(self, study, trial, param_name, param_distribution):
            if trial.number == 1 and param_name == "b":
                raise ValueError("sampler failed for trial 1")
            return super().sample_independent(study, trial, param_name, param_distribution)

    sampler = Failing()
    study = optuna.create_study(sampler=sampler)
    with pytest.raises(ValueError, match="sampler failed for trial 1"):
        _optimize(study, _three_params, tmp_path, n_trials=4, devices=2)
    assert sampler.threads and all(name.startswith(CALL_THREAD) for name in sampler.threads)
    assert study.trials[1].state == TrialState.FAIL
    assert all(t.state != TrialState.RUNNING for t in study.trials)
    assert not _call_threads()


class _Warning(_Recording):
    def sample_independent(self, study, trial, param_name, param_distribution):
        warnings.warn(f"sampled {param_name} of trial {trial.number}", UserWarning, stacklevel=1)
        time.sleep(0.02)  # (two trials' samples overlap)
        return super().sample_independent(study, trial, param_name, param_distribution)


def test_a_sampler_warning_goes_to_its_own_trial(tmp_path, monkeypatch):
    """The warnings of a sample answered on a call thread go back with the answer to the trial that asked, while
    another trial's calls are answered on the loop or another thread (``warnings.catch_warnings`` per call swapped
    the process's warning state from two threads at once); the process's warning state is as it was after."""
    answered: list[tuple[int, str, list[str]]] = []
    answer = fo._StudyDriver._answer

    def recording(self, trial_id, method, args):
        ok, payload = answer(self, trial_id, method, args)
        if method == fo.M_SUGGEST and ok:
            _, warned, _ = fo.cloudpickle.loads(payload)
            name = fo.cloudpickle.loads(args[0])[0]
            answered.append((self._live[trial_id].trial.number, name, [str(w) for w in warned]))
        return ok, payload

    monkeypatch.setattr(fo._StudyDriver, "_answer", recording)
    before = (warnings.showwarning, warnings._showwarnmsg_impl, list(warnings.filters))
    sampler = _Warning()
    study = optuna.create_study(sampler=sampler)
    _optimize(study, _three_params, tmp_path, n_trials=6, devices=2)
    assert (warnings.showwarning, warnings._showwarnmsg_impl, list(warnings.filters)) == before
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 6
    assert all(name.startswith(CALL_THREAD) for name in sampler.threads)
    assert len(answered) == 6 * 3
    for number, name, warned in answered:
        assert warned == [f"sampled {name} of trial {number}"], answered


class _WarnsWhileTheLoopAnswers(_Recording):
    """Trial 0's first sample warns while the loop answers trial 1's should_prune (which warns too)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop_in_call = threading.Event()
        self.warned = threading.Event()

    def sample_independent(self, study, trial, param_name, param_distribution):
        if trial.number == 0 and param_name == "a":
            self.loop_in_call.wait(WAIT_S)
            warnings.warn("sampled a of trial 0", UserWarning, stacklevel=1)
            self.warned.set()
        return super().sample_independent(study, trial, param_name, param_distribution)


class _WaitingPruner(optuna.pruners.BasePruner):
    def __init__(self, sampler: _WarnsWhileTheLoopAnswers) -> None:
        self.sampler = sampler

    def prune(self, study, trial):
        warnings.warn(f"pruner checked trial {trial.number}", UserWarning, stacklevel=1)
        if trial.number == 1:
            self.sampler.loop_in_call.set()
            self.sampler.warned.wait(WAIT_S)
        return False


def _report_and_ask(trial: Any) -> float:
    x = trial.suggest_float("a", 0, 1)
    trial.report(x, 0)
    trial.should_prune()
    return x


def test_warnings_of_two_calls_answered_at_once_go_to_their_own_trials(tmp_path, monkeypatch):
    """A sampler warning on a call thread while the loop answers another trial's call inside its own record of
    warnings: with one process-wide ``catch_warnings`` per call, the sample's warning went into the other trial's
    answer."""
    answered: list[tuple[int, str, list[str]]] = []
    answer = fo._StudyDriver._answer

    def recording(self, trial_id, method, args):
        ok, payload = answer(self, trial_id, method, args)
        live = self._live.get(trial_id)
        if ok and live is not None and method in (fo.M_SUGGEST, fo.M_AFTER_REPORTS):
            answered.append((live.trial.number, method, [str(w) for w in fo.cloudpickle.loads(payload)[1]]))
        return ok, payload

    monkeypatch.setattr(fo._StudyDriver, "_answer", recording)
    sampler = _WarnsWhileTheLoopAnswers()
    study = optuna.create_study(sampler=sampler, pruner=_WaitingPruner(sampler))
    _optimize(study, _report_and_ask, tmp_path, n_trials=2, devices=2)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    assert sampler.warned.is_set()
    expected = {(0, fo.M_SUGGEST): ["sampled a of trial 0"], (1, fo.M_SUGGEST): [],
                (0, fo.M_AFTER_REPORTS): ["pruner checked trial 0"],
                (1, fo.M_AFTER_REPORTS): ["pruner checked trial 1"]}
    assert {(number, method): warned for number, method, warned in answered} == expected, answered


class _HeldUntilInterrupted(_Recording):
    """Trial 0's first sample waits until the run is being interrupted (or WAIT_S), and records whether the
    study still had trial 0 RUNNING when it returned (nothing of the trial is handled while it samples)."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupting = threading.Event()
        self.returned_while: list[TrialState] = []

    def sample_independent(self, study, trial, param_name, param_distribution):
        if trial.number == 0 and param_name == "a":
            self.interrupting.wait(WAIT_S)
            time.sleep(0.3)  # (the loop is in the run's end by now)
            value = super().sample_independent(study, trial, param_name, param_distribution)
            self.returned_while.append(study._storage.get_trial(trial._trial_id).state)
            return value
        return super().sample_independent(study, trial, param_name, param_distribution)


def test_an_interrupt_while_a_sample_is_out_waits_for_it(tmp_path):
    """Ctrl-C (here from a callback, on the loop) while trial 0's sample runs on a call thread: the run ends once
    the sample returned, trial 0 is then told FAIL (not while it sampled), no call thread is left, and the
    experiment's record agrees with the study."""
    sampler = _HeldUntilInterrupted()

    def interrupt(study: optuna.Study, trial: FrozenTrial) -> None:
        sampler.interrupting.set()
        raise KeyboardInterrupt

    study = optuna.create_study(sampler=sampler)
    with pytest.raises(KeyboardInterrupt):
        _optimize(study, _three_params, tmp_path, n_trials=6, devices=2, callbacks=[interrupt])
    assert sampler.interrupting.is_set()
    assert sampler.returned_while == [TrialState.RUNNING]
    assert not _call_threads()
    states = [t.state for t in study.trials]
    assert states[0] == TrialState.FAIL and TrialState.RUNNING not in states
    [folder] = list((tmp_path / "fluidsalus").iterdir())
    store = ExperimentStore.open(folder, readonly=True)
    try:
        rows = {row.trial_id: row for row in store.trials()}
    finally:
        store.close()
    for trial in study.trials:
        row = rows[trial.system_attrs[fo.SYSTEM_ATTR]["trial_id"]]
        assert row.status == {TrialState.COMPLETE: "TERMINATED", TrialState.FAIL: "ERROR"}[trial.state]


def test_sampler_threads_is_checked(tmp_path):
    study = optuna.create_study()
    with pytest.raises(ConfigError, match="sampler_threads"):
        _optimize(study, _three_params, tmp_path, n_trials=1, sampler_threads=0)
    with pytest.raises(ConfigTypeError, match="sampler_threads"):
        _optimize(study, _three_params, tmp_path, n_trials=1, sampler_threads="2")
    with pytest.raises(ConfigError, match="sampler_threads"):
        _optimize(study, _three_params, tmp_path, n_trials=1, call_threads=2)
    assert not study.trials


def test_nothing_else_of_a_trial_is_handled_while_its_sample_is_out():
    """The driver's side alone: once the loop hands a trial's sampler call to a call thread, the trial's end (its
    device stopped it, say) waits for the answer, as when the loop answered the call itself; the trial's next call
    is answered from the list of trials its first call saw (Optuna's per-trial cache)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    driver = fo._StudyDriver(study, None, None, [], "unit")
    ok, _ = driver.handle_call("t0", fo.M_START, (fo.cloudpickle.dumps(()),))
    assert ok
    suggest = (fo.cloudpickle.dumps(("x", optuna.distributions.FloatDistribution(0, 1))),)
    assert driver.offload_call("t0", fo.M_SHOULD_PRUNE, (fo.cloudpickle.dumps(()),)) is None  # (on the loop)
    answer = driver.offload_call("t0", fo.M_SUGGEST, suggest)
    assert answer is not None
    ended = threading.Thread(target=driver.on_trial_complete, args=("t0", None, True))
    ended.start()
    ended.join(0.3)
    assert ended.is_alive() and study.trials[0].state == TrialState.RUNNING  # waits for the answer
    result: list[tuple[bool, Any]] = []
    caller = threading.Thread(target=lambda: result.append(answer()), name=f"{CALL_THREAD}-test")
    caller.start()
    caller.join(WAIT_S)
    ended.join(WAIT_S)
    assert not ended.is_alive()
    assert result[0][0] and study.trials[0].params["x"] == fo.cloudpickle.loads(result[0][1])[0][0]
    assert study.trials[0].state == TrialState.FAIL  # told after its sample, not during it
    assert driver.offload_call("t0", fo.M_SUGGEST, suggest) is None  # told: answered (with its error) on the loop


class _Slow(_Recording):
    """A sampler slower than SAMPLER_THREAD_MIN_S on every call."""

    def sample_independent(self, study, trial, param_name, param_distribution):
        time.sleep(fo.SAMPLER_THREAD_MIN_S * 1.5)
        return super().sample_independent(study, trial, param_name, param_distribution)


def test_only_a_slow_samplers_calls_go_to_call_threads(tmp_path, monkeypatch):
    """A fast sampler's calls (TPE, random) stay on the loop, where they cost no GIL waits; a slow one's go to
    call threads once the first call showed it slow."""
    monkeypatch.setattr(fo, "SAMPLER_THREAD_MIN_S", DEFAULT_THREAD_MIN_S)
    fast = _Recording()
    _optimize(optuna.create_study(sampler=fast), _three_params, tmp_path, n_trials=6, devices=2, name="fast")
    assert fast.threads == {threading.main_thread().name}
    slow = _Slow()
    study = optuna.create_study(sampler=slow)
    _optimize(study, _three_params, tmp_path, n_trials=4, devices=2, name="slow")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4
    assert threading.main_thread().name in slow.threads  # (the first call, measured)
    assert any(name.startswith(CALL_THREAD) for name in slow.threads)
    assert not _call_threads()


def _slow_once(trial: Any) -> float:
    time.sleep(0.05)
    return trial.suggest_float("x", 0, 1)


def test_a_ctrl_c_while_a_call_is_handed_to_a_thread_lets_the_trial_go(tmp_path, monkeypatch):
    """``offload_call`` takes the trial's lock on the loop and the call thread gives it back; a Ctrl-C (or no thread
    to start) between the two left it taken for ever, and ``optimize`` hung failing that trial (a review's
    s3_ctrlc_between_acquire_and_submit.py). The executor now cancels the hand-over: the trials FAIL, as in Optuna."""
    from fluidsalus.trialgroup import executor as ex

    def interrupted(self, device, call_id, work):
        raise KeyboardInterrupt

    monkeypatch.setattr(ex.Executor, "_start_call", interrupted)
    study = optuna.create_study()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            _optimize(study, _slow_once, tmp_path, n_trials=4, devices=2)
        except BaseException as e:  # noqa: BLE001 - the test looks at it below
            outcome.append(e)

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(WAIT_S)
    assert not runner.is_alive(), "optimize hung on the trial's lock"
    assert outcome and isinstance(outcome[0], KeyboardInterrupt)
    assert study.trials and all(t.state == TrialState.FAIL for t in study.trials)
    assert not _call_threads()


def _reports_then_suggests(trial: Any) -> float:
    total = 0.0
    for step in range(3):
        trial.report(total, step)  # (held: the suggest after it carries it to the driver)
        total += trial.suggest_float(f"p{step}", 0, 1)
    return total


def test_a_suggest_that_carries_held_reports_goes_to_a_call_thread_too(tmp_path):
    """A define-by-run objective's suggest after a report carries the held report (``M_AFTER_REPORTS``), and was
    answered on the loop whatever the sampler, and never timed, so a slow sampler was never seen as slow."""
    sampler = _Recording()
    study = optuna.create_study(sampler=sampler)
    _optimize(study, _reports_then_suggests, tmp_path, n_trials=4, devices=2)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4
    assert all(t.intermediate_values == {0: 0.0, 1: t.params["p0"], 2: t.params["p0"] + t.params["p1"]}
               for t in study.trials)
    assert sampler.threads and all(name.startswith(CALL_THREAD) for name in sampler.threads)
