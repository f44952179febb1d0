"""The device's answer to ``should_prune`` under Optuna's ``MedianPruner``/``PercentilePruner`` (in-memory study):
the pruner run on the device's view of the study's COMPLETED trials, which the driver sends with its answers. Given
the same COMPLETED trials it is exactly what ``pruner.prune(study, trial)`` returns on the driver."""

from __future__ import annotations

import math
import random
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
    """The trial's (re)start as its device sees it: the snapshot the driver answers ``M_START`` with."""
    snapshot = driver._on_start(trial_id, fo._known_completed(driver.view_key))
    assert snapshot is not None and snapshot.prune_rule is not None and snapshot.prune_rule[0] == fo.PRUNE_COMPLETED
    return fo.DeviceTrial(snapshot)


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
                fo._take_completed(driver._completed_update("unit-0"))
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
    sent none, and an answer carries only those completed since its last one."""
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=0))
    rng = random.Random(0)
    for _ in range(3):
        study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: rng.random()}))
    driver = fo._StudyDriver(study, None, None, [], "unit")
    first = driver._on_start("unit-0", fo._known_completed(driver.view_key))
    assert first is not None and first.completed is not None and len(first.completed[2]) == 3
    fo._take_completed(first.completed)
    second = driver._on_start("unit-1", fo._known_completed(driver.view_key))
    assert second is not None and second.completed is None  # (the process holds them: nothing sent)
    assert driver._completed_update("unit-0") is None  # nothing new
    study.add_trial(optuna.trial.create_trial(value=0.0, intermediate_values={0: 2.0}))
    update = driver._completed_update("unit-0")
    assert update is not None and update[1:] == (3, [{0: 2.0}])
    fo._take_completed(update)
    fo._take_completed(driver._completed_update("unit-1"))  # (the same trial again, by the other one: kept once)
    assert fo._known_completed(driver.view_key) == 4


def test_an_old_view_or_a_read_it_lacks_asks_the_driver(monkeypatch: Any) -> None:
    """A view not renewed by a driver answer for ``VIEW_FRESH_S`` is not judged from: a trial with slow steps and no
    other call judged against the trials of its start for good, and a slow, bad trial beside fast ones was never
    pruned (h197's stale_slow_trial.py; Optuna pruned it at step 0). A read of the study or trial the views do not
    hold asks the driver too (it raised AttributeError and failed the trial)."""
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

    class ReadsMore(optuna.pruners.MedianPruner):
        def prune(self, study, trial):
            return bool(study.trials) and super().prune(study, trial)  # (a read the view does not hold)

    monkeypatch.setattr(fo, "_view_answered_at", [time.monotonic()])
    device._prune_rule = (fo.PRUNE_COMPLETED, ReadsMore(n_startup_trials=0), driver.view_key)
    assert device._local_should_prune() is None


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
    update = driver._completed_update("unit-0")
    assert update is not None and update[2] == [{0: 2.0}] and driver._scan_from == 3
    driver._live["unit-0"].trial.report(3.0, 0)
    study.tell(driver._live["unit-0"].trial, 0.0)
    update = driver._completed_update("unit-0")
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
