"""The device's answer to ``should_prune`` under Optuna's ``MedianPruner``/``PercentilePruner`` (in-memory study):
given from the device's view of the study's COMPLETED trials, which the driver sends with its answers. Given the
same COMPLETED trials it is exactly what ``pruner.prune(study, trial)`` returns on the driver."""

from __future__ import annotations

import gc
import math
import random
import threading
import time
import warnings
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

import fluidsalus.optuna as fo

#: Steps a random history's trials report among.
STEPS = 12
#: How long a thread that should end at once is waited for, in seconds.
JOIN_S = 10.0
#: Random histories per seed.
HISTORIES = 40


def _random_pruner(rng: random.Random) -> optuna.pruners.BasePruner:
    kwargs = {"n_startup_trials": rng.randint(0, 4), "n_warmup_steps": rng.randint(0, 4),
              "interval_steps": rng.randint(1, 3), "n_min_trials": rng.randint(1, 3)}
    if rng.random() < 0.5:
        return optuna.pruners.MedianPruner(**kwargs)
    percentile = rng.choice([0.0, 100.0, 25.0, rng.uniform(0.0, 100.0)])
    return optuna.pruners.PercentilePruner(percentile, **kwargs)


def _random_value(rng: random.Random) -> float:
    draw = rng.random()
    if draw < 0.1:
        return math.nan
    if draw < 0.13:
        return rng.choice([math.inf, -math.inf])
    if draw < 0.3:
        return float(rng.randint(0, 3))  # (ties)
    return rng.uniform(-1.0, 1.0)


def _add_finished(study: optuna.Study, rng: random.Random) -> None:
    """A finished trial of a random state with random intermediate values at random steps."""
    state = rng.choice([TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL])
    steps = rng.sample(range(STEPS), rng.randint(0, STEPS))
    study.add_trial(optuna.trial.create_trial(
        params={"x": 0.5}, distributions={"x": FloatDistribution(0.0, 1.0)},
        value=rng.uniform(-1.0, 1.0) if state == TrialState.COMPLETE else None, state=state,
        intermediate_values={s: _random_value(rng) for s in steps}))


def _device_trial(driver: fo._StudyDriver, trial_id: str) -> fo.DeviceTrial:
    """The trial's (re)start as its device sees it: the snapshot the driver answers ``M_START`` with, and the
    COMPLETED trials its process lacks, which come with that answer."""
    snapshot = driver._on_start(trial_id)
    assert snapshot is not None and snapshot.prune_rule is not None and snapshot.prune_rule[0] == fo.PRUNE_COMPLETED
    _renew(driver, trial_id)
    return fo.DeviceTrial(snapshot)


def _renew(driver: fo._StudyDriver, trial_id: str) -> None:
    """What a driver answer to a call of the trial adds to its process's view (the call says what that holds)."""
    fo._take_completed(driver._completed_update(trial_id, fo._view_held()))


@pytest.fixture(autouse=True)
def a_new_process(monkeypatch: Any) -> None:
    """Each test's device process holds no view yet (another test's stays in this one)."""
    monkeypatch.setattr(fo, "_completed_views", {})


@pytest.fixture
def on_a_device(monkeypatch: Any) -> None:
    """DeviceTrial's calls as in a running trial whose every ``should_prune`` must be answered on the device."""
    monkeypatch.setattr(fo, "_in_live_trial", lambda: True)
    monkeypatch.setattr(fo, "VIEW_FRESH_S", math.inf)  # (the view's age: test_an_old_view_or_a_read_it_lacks_...)
    monkeypatch.setattr(fo, "_hold_report", lambda report: None)
    monkeypatch.setattr(fo.session, "report_deferred", lambda result: None)

    def no_driver(method: str, *args: Any) -> Any:
        raise AssertionError(f"{method} went to the driver")

    monkeypatch.setattr(fo, "_call", no_driver)


@pytest.mark.parametrize("seed", range(5))
def test_the_devices_pruner_answers_what_optunas_pruner_answers_over_random_histories(on_a_device, seed):
    """Random pruners (warm-up, interval, startup and minimum trials, percentiles 0 and 100), directions and
    histories (NaN, infinities, ties, missing steps; PRUNED and FAIL trials beside the COMPLETED ones, trials
    completing while the trial runs, a restarted attempt): at each step the device answers what the study's pruner
    answers on the driver, once the driver's next answer brought the new COMPLETED trials."""
    rng = random.Random(seed)
    answers = []
    for _ in range(HISTORIES):
        study = optuna.create_study(direction=rng.choice(["minimize", "maximize"]), pruner=_random_pruner(rng))
        for _ in range(rng.randint(0, 8)):
            _add_finished(study, rng)
        driver = fo._StudyDriver(study, None, None, [], "unit")
        device = _device_trial(driver, "unit-0")
        real = driver._live["unit-0"].trial
        steps = rng.sample(range(STEPS), rng.randint(1, STEPS))
        for i, step in enumerate(steps):
            value = _random_value(rng)
            real.report(value, step)
            device.report(value, step)
            if rng.random() < 0.2:  # another trial completes; the driver's next answer to this device brings it
                _add_finished(study, rng)
                _renew(driver, "unit-0")
            if rng.random() < 0.1 and i < len(steps) - 1:  # the engine starts the trial again: same Optuna trial
                device = _device_trial(driver, "unit-0")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # (an all-NaN trial: NumPy's, on both sides)
                expected = real.should_prune()
                answer = device.should_prune()
            assert answer == expected, (study.pruner.__dict__, study.direction, real._cached_frozen_trial)
            assert type(answer) is type(expected)  # (MedianPruner's NumPy bool, as Optuna returns it)
            answers.append(bool(answer))
    assert any(answers) and not all(answers)  # (the histories both prune and keep)


def test_a_process_view_is_sent_only_what_it_lacks(on_a_device):
    """The COMPLETED trials travel once per device process: a trial started in a process whose view holds them is
    sent none, and an answer carries only those completed since what the process held."""
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=0))
    rng = random.Random(0)
    for _ in range(3):
        study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: rng.random()}))
    driver = fo._StudyDriver(study, None, None, [], "unit")
    assert driver._on_start("unit-0") is not None and fo._view_held() is None
    first = driver._completed_update("unit-0", fo._view_held())
    assert first is not None and first[1] == 0 and len(first[2]) == 3
    fo._take_completed(first)
    assert fo._view_held() == (driver.view_key, 3)
    assert driver._on_start("unit-1") is not None
    assert driver._completed_update("unit-1", fo._view_held()) is None  # (the process holds them: nothing sent)
    assert driver._completed_update("unit-1", ("another call's key", 3)) == first  # (a view of another call: all)
    study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: 2.0}))
    update = driver._completed_update("unit-0", fo._view_held())
    assert update is not None and update[1:] == (3, [{0: 2.0}])
    also = driver._completed_update("unit-1", fo._view_held())  # (the other trial's call, answered meanwhile)
    fo._take_completed(update)
    fo._take_completed(also)  # (the same trial again: kept once)
    assert fo._known_completed(driver.view_key) == 4
    assert fo._completed_at(driver.view_key)(0)[0] == 4 and len(fo._completed_at(driver.view_key)(0)[1]) == 4


def test_answers_that_arrive_out_of_order_lose_no_completed_trial(monkeypatch: Any) -> None:
    """The answers to a process's calls may arrive in another order than the driver made them (two threads of one
    trial, or two trials of the process, each waiting for its own). Each answer brought the trials from what the
    driver had last sent the trial, so one that overtook an earlier one started past the view's end and was
    dropped, and so was every later one: the process judged against the trials it had until a trial started there
    again. Each call now says what its process's view holds, and its answer starts there."""
    monkeypatch.setattr(fo, "_in_live_trial", lambda: True)
    monkeypatch.setattr(fo, "_view_answered_at", [time.monotonic()])
    monkeypatch.setattr(fo, "VIEW_FRESH_S", math.inf)
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=0))

    def complete(value: float) -> None:
        study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: value}))

    complete(0.0)
    driver = fo._StudyDriver(study, None, None, [], "unit")

    def in_order(method: str, *args: Any, label: Any = None, verdict: bool = False) -> Any:
        return driver.handle_call("unit-0", method, args)

    def overtaken(method: str, *args: Any, label: Any = None, verdict: bool = False) -> Any:
        answer = driver.handle_call("unit-0", method, args)  # (answered: it brings the trial completed before it)
        complete(1.0)
        monkeypatch.setattr(fo.session, "call_driver", in_order)
        fo._call(fo.M_FLUSH)  # another thread's call, answered after this one and taken before it arrives
        return answer

    monkeypatch.setattr(fo.session, "call_driver", in_order)
    device = fo.DeviceTrial(fo._call(fo.M_START))
    assert fo._known_completed(driver.view_key) == 1
    complete(2.0)
    monkeypatch.setattr(fo.session, "call_driver", overtaken)
    fo._call(fo.M_FLUSH)
    assert fo._known_completed(driver.view_key) == 3
    complete(3.0)
    complete(4.0)
    fo._call(fo.M_FLUSH)  # (a later answer: it was dropped too)
    assert fo._known_completed(driver.view_key) == 5
    real = driver._live["unit-0"].trial
    real.report(2.5, 0)  # (above the median of the five, 2.0; below that of the first three, 1.0 - 3.0 the last)
    monkeypatch.setattr(fo, "_hold_report", lambda report: None)
    monkeypatch.setattr(fo.session, "report_deferred", lambda result: None)
    device.report(2.5, 0)
    assert device._local_should_prune() == study.pruner.prune(study, study.trials[real.number]) == True  # noqa: E712


def test_the_view_goes_with_the_process_s_copy_of_the_objective() -> None:
    """A device process's view of an ``optimize`` call's COMPLETED trials lives as long as its copy of the objective
    (the host lets that go when the run ends on it: test_host's test_a_host_that_shut_down_lets_its_trainable_go).
    A warm process kept it, 169.6 MB for 2,000 trials of 1,000 steps, until it served another ``optimize`` call."""
    runner = fo._ObjectiveRunner(lambda trial: 0.0, (), False, view_key="k")
    on_device = fo.cloudpickle.loads(fo.cloudpickle.dumps(runner))  # (as the device's host gets it)
    fo._take_completed(("k", 0, [{0: 1.0}, {0: 2.0}]))
    assert fo._known_completed("k") == 2
    del runner  # (the driver's own: it keeps no view)
    assert fo._known_completed("k") == 2
    del on_device
    assert fo._known_completed("k") == 0 and fo._view_held() is None


@pytest.mark.parametrize("state", [TrialState.PRUNED, TrialState.FAIL])
def test_a_pruned_or_failed_trial_leaves_no_cycle_that_keeps_the_view(monkeypatch: Any, state: TrialState) -> None:
    """A pruned trial's exception held the runner's frame, which held the exception: a cycle that only a
    collection ends, which an idle warm process never makes, so the view stayed after its run (h203's
    real_run.py). A failed trial's too: the runner raises it to the engine, and its frame kept it."""
    def objective(trial: Any) -> float:
        raise optuna.TrialPruned() if state == TrialState.PRUNED else ValueError("the objective's error")

    monkeypatch.setattr(fo, "_call", lambda method, *args: state.name)
    on_device = fo.cloudpickle.loads(fo.cloudpickle.dumps(
        fo._ObjectiveRunner(objective, (ValueError,), False, view_key="k")))
    fo._take_completed(("k", 0, [{0: 1.0}]))
    gc.disable()
    try:
        try:
            outcome = on_device._run(type("Trial", (), {"number": 0})())[fo.KEY_STATE]
        except ValueError:  # (the engine's handler, which keeps no reference to it)
            outcome = TrialState.FAIL.name
        assert outcome == state.name
        del on_device
        assert fo._known_completed("k") == 0
    finally:
        gc.enable()


def test_an_old_view_asks_the_driver(monkeypatch: Any) -> None:
    """A view not renewed by a driver answer for ``VIEW_FRESH_S`` is not judged from: a trial with slow steps and no
    other call judged against the trials of its start for good, and a slow, bad trial beside fast ones was never
    pruned (h197's stale_slow_trial.py; Optuna pruned it at step 0)."""
    monkeypatch.setattr(fo, "_in_live_trial", lambda: True)
    monkeypatch.setattr(fo, "_hold_report", lambda report: None)
    monkeypatch.setattr(fo.session, "report_deferred", lambda result: None)
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=0, n_warmup_steps=0))
    study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: 0.0}))
    driver = fo._StudyDriver(study, None, None, [], "unit")
    device = _device_trial(driver, "unit-0")
    device.report(5.0, 0)
    monkeypatch.setattr(fo, "_view_answered_at", [time.monotonic()])
    assert device._local_should_prune()  # (fresh: judged on the device, 5.0 above the median 0.0)
    monkeypatch.setattr(fo, "_view_answered_at", [time.monotonic() - 2 * fo.VIEW_FRESH_S])
    assert device._local_should_prune() is None  # (old: the driver answers)


def test_the_driver_looks_past_the_finished_trials_once(on_a_device) -> None:
    """Each answer looked at every trial of the study for new COMPLETED ones: 2,000 trials cost 12-14% of the
    driver's time (h197). The finished trials before the first unfinished one are taken once; a trial that
    completes after a later one is still taken."""
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner())
    for _ in range(3):
        study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: 1.0}))
    driver = fo._StudyDriver(study, None, None, [], "unit")
    _device_trial(driver, "unit-0")  # (a RUNNING trial: number 3)
    assert driver._scan_from == 3 and len(driver._completed) == 3
    study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: 2.0}))  # (number 4, after it)
    update = driver._completed_update("unit-0", fo._view_held())
    assert update is not None and update[2] == [{0: 2.0}] and driver._scan_from == 3
    fo._take_completed(update)
    driver._live["unit-0"].trial.report(3.0, 0)
    study.tell(driver._live["unit-0"].trial, 0.0)
    update = driver._completed_update("unit-0", fo._view_held())
    assert update is not None and update[2] == [{0: 3.0}] and driver._scan_from == 5


def test_other_pruners_and_storages_still_ask_the_driver():
    """Only Optuna's own MedianPruner/PercentilePruner on an in-memory study are answered on the device."""
    class Mine(optuna.pruners.MedianPruner):
        pass

    in_memory = optuna.create_study(pruner=Mine())
    assert fo._prune_rule(in_memory, "k") is None
    sqlite = optuna.create_study(storage="sqlite:///:memory:", pruner=optuna.pruners.MedianPruner())
    assert fo._prune_rule(sqlite, "k") is None
    assert fo._prune_rule(optuna.create_study(pruner=optuna.pruners.HyperbandPruner()), "k") is None


def test_completed_values_that_are_no_floats_are_read_as_the_pruner_reads_them(on_a_device) -> None:
    """``study.add_trial`` takes a COMPLETED trial whose intermediate values are None or strings; Optuna's pruner
    reads them through ``np.array(..., dtype=float)`` (None: NaN, "1.5": 1.5). The device's view refused them
    (``array('d')``): the answer that brought them raised TypeError in the trial's call, so every trial of the
    ``optimize`` call failed at its start, and the view kept the trial's earlier steps (added again at each call).
    A value NumPy makes no float of leaves that step's answer to the driver, whose pruner raises as Optuna's."""
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=0))
    study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: 1.0, 1: None, 2: "1.5", 3: "x"}))
    study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: 3.0, 1: 2.0, 2: 2.5, 3: 1.0}))
    driver = fo._StudyDriver(study, None, None, [], "unit")
    device = _device_trial(driver, "unit-0")
    _renew(driver, "unit-0")  # (a later call: nothing is added twice)
    assert fo._completed_at(driver.view_key)(0)[0] == 2 and list(fo._completed_at(driver.view_key)(0)[1]) == [1., 3.]
    real = driver._live["unit-0"].trial
    for step, value in ((0, 2.5), (1, 2.2), (2, 1.6)):
        real.report(value, step)
        device.report(value, step)
        expected = real.should_prune()
        assert device.should_prune() == expected and type(device.should_prune()) is type(expected)
    real.report(2.0, 3)
    device.report(2.0, 3)
    with pytest.raises(ValueError):
        real.should_prune()  # (Optuna's: could not convert string to float)
    assert device._local_should_prune() is None  # (the driver answers)


def test_a_runner_collected_while_the_view_is_read_does_not_hang_the_trial(monkeypatch: Any) -> None:
    """A runner left in a garbage cycle (an objective that kept an exception it caught: its traceback's frames lead
    back to the runner) is collected at whatever allocation makes the collection, also while a trial's thread
    holds the views' lock (a warm process's next ``optimize`` call adding to its view): the runner's
    ``weakref.finalize`` then took that lock again, and the thread hung for ever."""
    # (a new lock of the module's kind: a thread that hangs keeps this one, not the one the other tests take)
    kind = threading.RLock if "RLock" in type(fo._completed_views_lock).__name__ else threading.Lock
    monkeypatch.setattr(fo, "_completed_views_lock", kind())
    gc.disable()
    try:
        old = fo.cloudpickle.loads(fo.cloudpickle.dumps(fo._ObjectiveRunner(lambda trial: 0.0, (), False,
                                                                              view_key="the last run")))
        old.cycle = old
        del old  # (garbage, not yet collected)
        add = fo._CompletedValues.add

        def collected_meanwhile(self: fo._CompletedValues, trials: Any) -> None:
            gc.collect()
            add(self, trials)

        monkeypatch.setattr(fo._CompletedValues, "add", collected_meanwhile)
        thread = threading.Thread(target=fo._take_completed, args=(("this run", 0, [{0: 1.0}]),), daemon=True)
        thread.start()
        thread.join(JOIN_S)
        assert not thread.is_alive()
        assert fo._view_held() == ("this run", 1)
    finally:
        gc.enable()
