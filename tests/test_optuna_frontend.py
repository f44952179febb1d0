"""fluidsalus.optuna.optimize: Optuna's ``study.optimize`` semantics, with the objective on device lanes.

These mirror Optuna's own ``optimize`` tests: n_trials, timeout, catch, callbacks and ``study.stop()``, pruned
values with a real pruner, best_trial/best_value, define-by-run, re-raised exceptions, multi-objective studies,
persistent storages (SQLite through RDBStorage, JournalStorage) and the log lines. The objective runs in a
device actor, so what it sees is recorded in user attributes and checked on the driver.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import types
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import optuna
import pytest
from _trials import began_on_the_freed_device
from optuna.trial import FrozenTrial, TrialState

import fluidsalus.optuna as fo
from fluidsalus.errors import ConfigError, TrialError
from fluidsalus.store import ERROR_FILE, ExperimentStore
from fluidsalus.trialgroup.executor import POLL_WAIT_S

pytestmark = pytest.mark.usefixtures("ray_cluster")


class Boom(Exception):
    """An exception with state of its own, to check that it comes back whole."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code)
        self.code = code


class NotRecreatable(Exception):
    """Pickles, but cannot be unpickled (its __init__ wants two arguments, its args hold one)."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}-{b}")


def _optimize(study: optuna.Study, objective: Any, tmp_path: Any, **kwargs: Any) -> None:
    fo.optimize(study, objective, storage_path=str(tmp_path / "fluidsalus"), **kwargs)


def _quadratic(trial: Any) -> float:
    x = trial.suggest_float("x", -10, 10)
    return (x - 2) ** 2


@pytest.fixture
def optuna_records() -> Iterator[list[logging.LogRecord]]:
    """Optuna's log records at INFO (Optuna's logger does not propagate to pytest's handlers)."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(level=logging.INFO)
    root = logging.getLogger("optuna")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    root.addHandler(handler)
    yield records
    root.removeHandler(handler)
    optuna.logging.set_verbosity(verbosity)


# ---------------------------------------------------------------------------------------------- basics


def test_n_trials_best_trial_and_records(tmp_path):
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    _optimize(study, _quadratic, tmp_path, n_trials=8, name="quad")

    assert [t.number for t in study.trials] == list(range(8))
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    best = min(study.trials, key=lambda t: t.value)
    assert study.best_trial.number == best.number
    assert study.best_value == best.value == pytest.approx((best.params["x"] - 2) ** 2)
    assert study.best_params == best.params
    # Each Optuna trial names its fluidsalus trial; the experiment records the Optuna numbers and states.
    links = {t.system_attrs[fo.SYSTEM_ATTR]["trial_id"]: t.number for t in study.trials}
    assert {t.system_attrs[fo.SYSTEM_ATTR]["experiment"] for t in study.trials} == {"quad"}
    store = ExperimentStore.open(tmp_path / "fluidsalus" / "quad", readonly=True)
    try:
        finals = {row.trial_id: row.last_result for row in store.trials() if row.last_result}
    finally:
        store.close()
    assert {fid: r[fo.KEY_NUMBER] for fid, r in finals.items()} == links
    assert all(r[fo.KEY_STATE] == "COMPLETE" for r in finals.values())
    # The experiment names the study's objective once optimize ends, so `fluidsalus inspect` and `ls` show the
    # study's best trial (they showed none: the run had no metric)
    import fluidsalus

    report = fluidsalus.inspect(str(tmp_path / "fluidsalus" / "quad"))
    assert (report.experiment["metric"], report.experiment["mode"]) == (fo.KEY_VALUE, "min")
    assert report.best is not None and links[report.best.trial_id] == study.best_trial.number
    assert report.best.value == study.best_value
    # and each trial's config is its parameters (the searcher proposed empty ones: `config {}` in inspect)
    assert report.best.config == study.best_params and f"config {study.best_params}" in report.render_table()
    store = ExperimentStore.open(tmp_path / "fluidsalus" / "quad", readonly=True)
    try:
        assert {row.trial_id: row.config for row in store.trials()} == {
            fid: study.trials[number].params for fid, number in links.items()}
    finally:
        store.close()


def test_define_by_run_conditional_space_and_trial_api(tmp_path):
    def objective(trial: Any) -> float:
        kind = trial.suggest_categorical("kind", ["svc", "forest"])
        if kind == "svc":
            c = trial.suggest_float("c", 1e-3, 1e3, log=True)
            assert trial.suggest_float("c", 1e-3, 1e3, log=True) == c  # a repeated suggestion: the same value
            value = math.log10(c) ** 2
        else:
            depth = trial.suggest_int("depth", 2, 32, step=2)
            value = depth / 10
        try:
            trial.suggest_int("kind_as_int", 0, 1)
            trial.suggest_float("kind_as_int", 0.0, 1.0)  # incompatible with the first distribution
        except ValueError as e:
            trial.set_user_attr("incompatible", type(e).__name__)
        try:
            trial.set_user_attr("lock", threading.Lock())
        except TypeError:
            trial.set_user_attr("unpicklable", "TypeError")
        trial.set_user_attr("seen_params", trial.params)
        trial.set_user_attr("distribution_types", sorted(type(d).__name__ for d in trial.distributions.values()))
        trial.set_user_attr("number", trial.number)
        trial.set_user_attr("started", isinstance(trial.datetime_start, datetime.datetime))
        trial.set_user_attr("study_name", trial.study.study_name)
        trial.set_user_attr("user_attrs_seen", sorted(trial.user_attrs))
        trial.set_constraint("c0", -1.0)
        trial.set_user_attr("constraints", trial.constraints)
        assert isinstance(trial, optuna.trial.BaseTrial)
        return value

    study = optuna.create_study(study_name="dbr", sampler=optuna.samplers.RandomSampler(seed=1))
    # Both branches, whatever order the parallel trials draw in: seed 1's stream is mostly "forest" (2 of 10 alone),
    # and a CI run's interleaving drew no "svc" at all.
    study.enqueue_trial({"kind": "svc"})
    study.enqueue_trial({"kind": "forest"})
    _optimize(study, objective, tmp_path, n_trials=10)

    assert len(study.trials) == 10 and all(t.state == TrialState.COMPLETE for t in study.trials)
    kinds = {t.params["kind"] for t in study.trials}
    assert kinds == {"svc", "forest"}
    for t in study.trials:
        branch = {"c"} if t.params["kind"] == "svc" else {"depth"}
        assert set(t.params) == {"kind", "kind_as_int"} | branch
        attrs = t.user_attrs
        assert attrs["incompatible"] == "ValueError" and attrs["unpicklable"] == "TypeError"
        assert attrs["seen_params"] == t.params
        assert attrs["number"] == t.number and attrs["started"] and attrs["study_name"] == "dbr"
        assert attrs["user_attrs_seen"] == ["distribution_types", "incompatible", "number", "seen_params", "started",
                                            "study_name", "unpicklable"]
        branch_type = "FloatDistribution" if t.params["kind"] == "svc" else "IntDistribution"
        assert attrs["distribution_types"] == sorted(["CategoricalDistribution", "IntDistribution", branch_type])
        assert attrs["constraints"] == {"c0": -1.0}
        if t.params["kind"] == "forest":
            assert t.params["depth"] % 2 == 0 and isinstance(t.params["depth"], int)


# ---------------------------------------------------------------------------------------------- same as Optuna


def _scenario(trial: Any) -> Any:
    """Every way a trial can end; the enqueued x picks the way."""
    x = trial.suggest_float("x", 0, 4)
    trial.set_user_attr("x_seen", x)
    if x == 3.0:
        raise ValueError("boom")
    if x == 1.0:
        return None
    if x == 1.5:
        return float("nan")
    if x == 2.5:
        return "abc"
    if x == 2.0:
        trial.report(4.0, 0)
        trial.report(5.0, 1)
        raise optuna.TrialPruned("not promising")
    if x == 3.5:
        trial.report(1.0, 0)
        raise optuna.TrialPruned()
    return x**2


SCENARIO_XS = [0.5, 3.0, 1.0, 1.5, 2.0, 2.5, 0.25, 3.5, 0.75]


def _scenario_study() -> optuna.Study:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for x in SCENARIO_XS:
        study.enqueue_trial({"x": x})
    return study


def _facts(study: optuna.Study) -> list[tuple[Any, ...]]:
    return [(t.number, t.state, t.values, t.params, t.intermediate_values, t.user_attrs) for t in study.trials]


def _messages(records: list[logging.LogRecord]) -> list[tuple[str, int, str]]:
    """Optuna's lines for the trials (not the study's creation, nor the line that says where fluidsalus's record
    went: ``test_optimize_says_where_its_record_went_in_one_line_of_optunas_log``)."""
    return [(r.name, r.levelno, r.getMessage()) for r in records
            if "new study created" not in r.getMessage() and r.name != fo._RECORD_LOGGER.name]


def test_states_values_and_log_lines_are_optunas(tmp_path, optuna_records):
    """The same enqueued trials through study.optimize and through fluidsalus: same trials, same log lines."""
    reference = _scenario_study()
    reference.optimize(_scenario, n_trials=len(SCENARIO_XS), catch=(ValueError,))
    expected = _messages(optuna_records)
    optuna_records.clear()

    study = _scenario_study()
    _optimize(study, _scenario, tmp_path, n_trials=len(SCENARIO_XS), catch=(ValueError,),
              max_concurrent_trials=1)  # one at a time, so "Best is trial ..." is computed over the same trials

    assert _facts(study) == _facts(reference)
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL, TrialState.FAIL, TrialState.FAIL, TrialState.PRUNED,
                      TrialState.FAIL, TrialState.COMPLETE, TrialState.PRUNED, TrialState.COMPLETE]
    assert study.trials[4].value == 5.0  # a pruned trial keeps its last reported value
    assert _messages(optuna_records) == expected
    assert any("Trial 0 finished with value: 0.25 and parameters: {'x': 0.5}. Best is trial 0 with value: 0.25."
               == m for _, _, m in expected)
    failed = [r for r in optuna_records if "because of the following error: ValueError('boom')" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None  # the traceback is logged, as Optuna does
    assert "raise ValueError" in logging.Formatter().formatException(failed[0].exc_info)


def test_failed_and_pruned_trials_end_errored_and_stopped_in_the_experiment_record(tmp_path):
    """Every objective ended as a completed fluidsalus trial with a last result: ``fluidsalus inspect`` counted no
    pruned trial as stopped and no failed one as errored, and a failed objective's work since its last report was a
    useful iteration, not the failure's waste (a helper's goodput audit). A failure is final: ``max_failures`` does
    not run the objective again on its FAIL trial."""
    from fluidsalus.inspect import inspect

    study = _scenario_study()
    _optimize(study, _scenario, tmp_path, n_trials=len(SCENARIO_XS), catch=(ValueError,), name="scenario",
              max_failures=2)
    report = inspect(tmp_path / "fluidsalus" / "scenario")
    states = [t.state for t in study.trials]
    rows = sorted(report.trial_rows, key=lambda r: r.trial_id)
    assert [(r.status, r.stop_reason) for r in rows] == [
        {TrialState.COMPLETE: ("TERMINATED", "completed"), TrialState.PRUNED: ("TERMINATED", "stopped"),
         TrialState.FAIL: ("ERROR", "errored")}[state] for state in states]
    assert report.stopped == 2
    # no FAIL ran again: no restart but the planner's move of a queued trial before it started ("withdrawn", timing:
    # it came in about one run in six once the trials' calls got fewer)
    store = ExperimentStore.open(str(tmp_path / "fluidsalus" / "scenario"), readonly=True)
    assert {e.data["reason"] for e in store.events("trial_restart") if e.data} <= {"withdrawn"}
    assert all(r.attempt == 0 for r in rows if r.trial_id not in {e.trial_id for e in store.events("trial_restart")})
    errors = [e["error"] for e in report.errors]
    assert errors[0] == "ValueError: boom" and errors[1].startswith(
        "ValueError: Optuna failed trial 2: the objective returned None")
    failed = report.summary.totals.wasted["failed"]  # each FAIL's work since its last report: cut short, wasted
    assert failed.partial == 4 and failed.iterations == 0
    finals = [s for s in report.activity.spans if s.trial_id in {r.trial_id for r in rows if r.status == "ERROR"}]
    assert len(finals) == 4 and not any(s.useful for s in finals)  # (they reported nothing: no useful final row)


def test_inspect_and_ls_name_the_trials_by_their_optuna_number_and_state(tmp_path, capsys):
    """``fluidsalus inspect`` named an Optuna study's trials only by their fluidsalus ids and showed PRUNED as
    TERMINATED; ``ls`` counted "9 terminated" (h134's F7). On a study that held trials before (its numbers are not
    the fluidsalus trials' order), every trial, a FAIL before any report too (no result carries its number: the
    ``optuna_trial`` event ``optimize`` stores as it ends does), has the study's number and state."""
    from fluidsalus.cli import main
    from fluidsalus.inspect import OPTUNA_NUMBER_KEY, OPTUNA_SEARCHER, OPTUNA_STATE_KEY, inspect

    assert (fo.KEY_NUMBER, fo.KEY_STATE, fo._StudyDriver.__name__) == (OPTUNA_NUMBER_KEY, OPTUNA_STATE_KEY,
                                                                        OPTUNA_SEARCHER)
    study = _scenario_study()
    study.optimize(_quadratic, n_trials=2)  # Optuna's trials 0 and 1 (the first two enqueued x's)
    _optimize(study, _scenario, tmp_path, n_trials=5, catch=(ValueError,), name="numbers")
    path = tmp_path / "fluidsalus" / "numbers"
    ours = {t.system_attrs[fo.SYSTEM_ATTR]["trial_id"]: (t.number, t.state.name) for t in study.trials
            if fo.SYSTEM_ATTR in t.system_attrs}  # (not the trials enqueued for later)
    assert sorted(state for _, state in ours.values()) == ["COMPLETE", "FAIL", "FAIL", "FAIL", "PRUNED"]
    report = inspect(path)
    assert {t["trial_id"]: (t["optuna_number"], t["optuna_state"]) for t in report.trial_table} == ours
    table = report.render_table()
    for trial_id, (number, state) in ours.items():
        if state == "FAIL":
            assert any(line.startswith(f"  {trial_id} (Optuna trial {number}): ") for line in table.splitlines())
    assert main(["ls", str(tmp_path / "fluidsalus")]) == 0
    assert "5 (1 complete, 3 fail, 1 pruned)" in capsys.readouterr().out


def test_a_failed_objective_is_logged_once_under_the_progress_view(tmp_path, capfd, optuna_records):
    """With verbose=1 (what show_progress_bar=True gave before it showed Optuna's bar) a FAIL trial, which now
    ends errored in the experiment, was also printed by the run ("Trial ... errored after 0 iterations" with the
    device's traceback and "every errored trial's traceback is in ResultGrid.errors", which optimize does not
    return) under Optuna's own log line."""
    study = _scenario_study()
    _optimize(study, _scenario, tmp_path, n_trials=2, catch=(ValueError,), verbose=1)
    assert [t.state for t in study.trials[:2]] == [TrialState.COMPLETE, TrialState.FAIL]  # (the rest: enqueued)
    assert any("because of the following error: ValueError('boom')" in r.getMessage() for r in optuna_records)
    err = capfd.readouterr().err
    assert "errored after" not in err and "ResultGrid.errors" not in err


def _after_frames_of(formatted: str, function: str) -> list[str]:
    """The lines of a logged traceback from the frame of ``function`` on (the objective's frames and its error)."""
    lines = formatted.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.endswith(f", in {function}")):]


def test_a_failed_trials_log_shows_the_objectives_traceback_as_optunas_does(tmp_path, optuna_records):
    """Optuna logs a failed trial's traceback as ``Traceback ...``, the objective's frames and its error; the log
    here showed the re-created exception's chain: a ``fluidsalus.optuna.DeviceTraceback:`` line, the device's
    frames, "The above exception was the direct cause of the following exception:" and the error again."""
    reference = _scenario_study()
    reference.optimize(_scenario, n_trials=2, catch=(ValueError,))
    formatter = logging.Formatter()
    [expected] = [formatter.format(r) for r in optuna_records if "ValueError('boom')" in r.getMessage()]
    optuna_records.clear()

    study = _scenario_study()
    _optimize(study, _scenario, tmp_path, n_trials=2, catch=(ValueError,), max_concurrent_trials=1)
    [record] = [r for r in optuna_records if "ValueError('boom')" in r.getMessage()]
    shown = formatter.format(record)
    assert shown.splitlines()[1] == "Traceback (most recent call last):" == expected.splitlines()[1]
    assert _after_frames_of(shown, "_scenario") == _after_frames_of(expected, "_scenario")
    assert "DeviceTraceback" not in shown and "direct cause" not in shown
    assert isinstance(record.exc_info[1], ValueError)  # (the exception itself stays on the record, for handlers)


def _prune_answer_types(trial: Any) -> float:
    x = trial.suggest_float("x", 0, 4)
    trial.report(x, 0)
    answer = trial.should_prune()
    trial.set_user_attr("answer", f"{type(answer).__module__}.{type(answer).__name__}")
    return x


def test_should_prune_returns_what_the_pruner_returns_as_optunas_does(tmp_path):
    """Optuna's ``should_prune`` returns the pruner's answer as it is (``MedianPruner``: a NumPy bool once it
    compares); it was made a Python ``bool`` here (a ``repr`` or an ``is np.True_`` differed)."""
    def make() -> optuna.Study:
        study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=0))
        for x in (1.0, 2.0, 0.5):
            study.enqueue_trial({"x": x})
        return study

    reference = make()
    reference.optimize(_prune_answer_types, n_trials=3)
    study = make()
    _optimize(study, _prune_answer_types, tmp_path, n_trials=3, max_concurrent_trials=1)
    answers = [t.user_attrs["answer"] for t in study.trials]
    assert answers == [t.user_attrs["answer"] for t in reference.trials]
    assert answers[1:] == ["numpy.bool"] * 2


#: How long an objective's threads get to return before the test takes them for stuck (they take milliseconds).
THREADS_JOIN_S = 5.0


def _threads_call_the_trial_at_once(kind: str, n_threads: int) -> Any:
    """An objective whose threads call the trial at once, each its own call (``kind``); it records the threads
    still alive after ``THREADS_JOIN_S`` (h205's ``f4_threads_hang.py``)."""
    def objective(trial: Any) -> float:
        def work(k: int) -> None:
            if kind == "suggest":
                trial.suggest_float(f"p{k}", 0, 1)
            elif kind == "user_attr":
                trial.set_user_attr(f"k{k}", k)
            else:  # report+prune: each thread reports its steps, then asks the pruner
                for step in range(3):
                    trial.report(float(k * 10 + step), k * 10 + step)
                trial.should_prune()

        threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(n_threads)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + THREADS_JOIN_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        trial.set_user_attr("stuck", sum(thread.is_alive() for thread in threads))
        return 0.0

    return objective


@pytest.mark.parametrize(("kind", "n_threads", "sqlite"), [
    ("suggest", 2, False), ("user_attr", 4, False), ("report+prune", 4, True)])
def test_threads_of_an_objective_may_call_the_trial_at_once_as_in_optuna(tmp_path, kind, n_threads, sqlite):
    """Threads of one objective that call the trial at once, with calls the driver answers (``suggest_*``,
    ``set_user_attr``; ``should_prune`` on SQLite while reports are held): all return and the trial completes,
    as under ``study.optimize``. Before, each thread back from the driver after the first waited for ever for its
    lane's turn (h205's F4)."""
    def make() -> optuna.Study:
        url = f"sqlite:///{tmp_path}/{len(os.listdir(tmp_path))}.db" if sqlite else None
        return optuna.create_study(storage=url, sampler=optuna.samplers.RandomSampler(seed=0))

    objective = _threads_call_the_trial_at_once(kind, n_threads)
    reference = make()
    reference.optimize(objective, n_trials=1)
    study = make()
    _optimize(study, objective, tmp_path, n_trials=1)
    for trial in (reference.trials[0], study.trials[0]):
        assert (trial.state, trial.user_attrs["stuck"]) == (TrialState.COMPLETE, 0)
    assert sorted(study.trials[0].params) == sorted(reference.trials[0].params)
    assert study.trials[0].user_attrs == reference.trials[0].user_attrs
    assert study.trials[0].intermediate_values == reference.trials[0].intermediate_values


def _bar_descriptions(err: str) -> list[str]:
    """Optuna's bar texts ("Best trial: N. Best value: V") in the order shown, each once, and the bar's last count."""
    texts = re.findall(r"Best trial: \d+\. Best value: [^:]+", err)
    return [text for i, text in enumerate(texts) if i == 0 or text != texts[i - 1]] + re.findall(r"\d+/\d+", err)[-1:]


def test_show_progress_bar_is_optunas_bar_with_the_best_trial(tmp_path, capfd):
    """``show_progress_bar=True`` showed fluidsalus's progress line and summary, never the best value, where
    Optuna's tqdm bar shows "Best trial: 3. Best value: 0.12" after each trial: it is Optuna's bar now, updated as
    Optuna's loop updates it (fluidsalus's own view: ``verbose=1``)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(_quadratic, n_trials=4, show_progress_bar=True)
    expected = _bar_descriptions(capfd.readouterr().err)
    assert len(expected) >= 2 and expected[-1] == "4/4"

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    _optimize(study, _quadratic, tmp_path, n_trials=4, show_progress_bar=True, max_concurrent_trials=1)
    err = capfd.readouterr().err
    assert _bar_descriptions(err) == expected
    assert "[fluidsalus]" not in err and "fluidsalus: 4 trials" not in err  # (no view of its own unless verbose=1)


def _sleeps_a_little(trial: Any) -> float:
    x = trial.suggest_float("x", 0, 1)
    time.sleep(0.3)
    return x


def _bar_shares(err: str) -> list[int]:
    """The shares of a ``timeout`` bar ("  54%|"), in the order shown."""
    return [int(share) for share in re.findall(r"(\d+)%\|", err)]


def test_a_timeout_bar_ends_full_as_optunas_does(tmp_path, capfd):
    """With ``timeout`` alone Optuna's bar ends at 100% (its last trial's update passes the timeout); here the trials
    that ran beside the last one end past it too, and each of their updates moved the bar back: a 1.5 s study
    ended at 95% or 54% (h170). It fills once and stays full."""
    study = optuna.create_study()
    study.optimize(_sleeps_a_little, timeout=1.0, show_progress_bar=True)
    assert _bar_shares(capfd.readouterr().err)[-1] == 100

    study = optuna.create_study()
    _optimize(study, _sleeps_a_little, tmp_path, timeout=1.0, show_progress_bar=True)
    shares = _bar_shares(capfd.readouterr().err)
    assert shares[-1] == 100 and shares == sorted(shares), shares  # (never back)
    assert len(study.trials) >= 4  # (trials side by side: several ended past the timeout)


def _returns_at_once(trial: Any) -> float:
    return 0.5


def test_a_timeout_bar_ends_full_when_no_trial_ends_past_the_timeout(tmp_path, capfd):
    """Optuna starts a trial whenever its loop finds time left, so its last trial ends past the ``timeout`` and fills
    the bar. Here the last trial may end before the ``timeout`` and the next one's start find it passed (it never
    starts): no update passed the timeout, and the bar ended short (97% after a helper's 1 s study of 50 ms trials
    one at a time; h222's ``progress`` case). Quick trials one at a time make that the usual ending."""
    for _ in range(2):
        study = optuna.create_study()
        _optimize(study, _returns_at_once, tmp_path, timeout=0.5, show_progress_bar=True, max_concurrent_trials=1)
        shares = _bar_shares(capfd.readouterr().err)
        assert shares[-1] == 100 and shares == sorted(shares), shares


def test_a_timeout_bar_never_moves_back_past_its_timeout():
    """The updates a side-by-side run makes (several past the timeout), without timing luck (h187's f10_bar_unit.py:
    the test above passed on the old bar in 2 of 6 runs): Optuna's bar went back to 55%, this one stays full."""
    import io

    study = optuna.create_study()
    study.optimize(_quadratic_local, n_trials=1)
    bar = fo._TrialsSideBySideBar(True, None, 1.0)
    bar._progress_bar.fp = io.StringIO()
    shares = []
    for elapsed in (0.3, 0.6, 0.9, 1.2, 1.25, 1.4):
        bar.update(elapsed, study)
        shares.append(round(bar._progress_bar.n, 3))
    bar.close()
    assert shares == [0.3, 0.6, 0.9, 1.0, 1.0, 1.0]


def _quadratic_local(trial: optuna.Trial) -> float:
    return (trial.suggest_float("x", -1, 1) - 0.5) ** 2


def test_optimize_says_where_its_record_went_in_one_line_of_optunas_log(tmp_path, capfd, optuna_records):
    """Under the default ``verbose=0`` nothing said where the fluidsalus record went (``fluidsalus ls``/``inspect``
    had something to show that the user did not know of): one INFO line of Optuna's logger says it, which
    ``optuna.logging.set_verbosity(WARNING)`` silences with Optuna's own lines; ``verbose=1``'s summary names it."""
    study = optuna.create_study()
    _optimize(study, _quadratic, tmp_path, n_trials=2, name="where")
    where = str(tmp_path / "fluidsalus" / "where")
    lines = [r for r in optuna_records if r.name == "optuna.fluidsalus"]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.INFO, f"fluidsalus recorded this call's 2 trials; show them with: fluidsalus inspect {where}")]
    optuna_records.clear()

    _optimize(study, _quadratic, tmp_path, n_trials=1, name="where_verbose", verbose=1)
    assert not [r for r in optuna_records if r.name == "optuna.fluidsalus"]
    assert str(tmp_path / "fluidsalus" / "where_verbose") in capfd.readouterr().out

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # (the fixture puts the verbosity back)
    _optimize(study, _quadratic, tmp_path, n_trials=1, name="where_quiet")
    assert "fluidsalus" not in capfd.readouterr().err


def test_multi_objective_is_optunas(tmp_path, optuna_records):
    def objective(trial: Any) -> Any:
        x = trial.suggest_float("x", 0, 1)
        try:
            trial.report(x, 0)
        except NotImplementedError as e:
            trial.set_user_attr("report", type(e).__name__)
        if x == 0.0:
            return x  # one value for two objectives: FAIL
        return x, (1 - x) ** 2

    def make() -> optuna.Study:
        study = optuna.create_study(directions=["minimize", "minimize"], sampler=optuna.samplers.RandomSampler(1))
        for x in (0.0, 0.2, 0.6):
            study.enqueue_trial({"x": x})
        return study

    reference = make()
    reference.optimize(objective, n_trials=4)
    expected = _messages(optuna_records)
    optuna_records.clear()
    study = make()
    _optimize(study, objective, tmp_path, n_trials=4, max_concurrent_trials=1)

    assert _facts(study) == _facts(reference)
    assert [t.state for t in study.trials[:3]] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert all(t.user_attrs["report"] == "NotImplementedError" for t in study.trials)
    assert {t.number for t in study.best_trials} >= {1}
    assert _messages(optuna_records) == expected


# ---------------------------------------------------------------------------------------------- errors


def test_catch_fails_the_trial_and_goes_on(tmp_path):
    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number % 2:
            raise KeyError(f"odd trial {trial.number}")
        return x

    study = optuna.create_study()
    _optimize(study, objective, tmp_path, n_trials=6, catch=[KeyError, ValueError], gc_after_trial=True)

    assert len(study.trials) == 6
    for t in study.trials:
        assert t.state == (TrialState.FAIL if t.number % 2 else TrialState.COMPLETE)


def test_uncaught_exception_stops_and_is_reraised(tmp_path):
    n_trials = 30

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        time.sleep(0.05)
        if trial.number == 2:
            raise Boom("trial two broke", 7)
        return x

    study = optuna.create_study()
    with pytest.raises(Boom, match="trial two broke") as info:
        _optimize(study, objective, tmp_path, n_trials=n_trials, catch=(ValueError,))

    assert info.value.code == 7  # the exception came back whole, with the device's traceback as its cause
    assert isinstance(info.value.__cause__, fo.DeviceTraceback)
    assert 'raise Boom("trial two broke", 7)' in info.value.__cause__.text
    assert study.trials[2].state == TrialState.FAIL
    assert all(t.state.is_finished() for t in study.trials)  # running trials finished
    assert len(study.trials) < n_trials  # no new trial started after the error


def test_an_exceptions_cause_and_context_come_back_with_it():
    """The re-created exception's __cause__ was the device's traceback and its __context__ None: the objective's
    own `raise ... from` cause was lost (Optuna's optimize raises the exception itself; a helper's side by side)."""
    try:
        try:
            {}["missing"]
        except KeyError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as e:
        explicit = e
    back = fo._PackedError.of(explicit).unpack()
    assert isinstance(back.__cause__, KeyError) and back.__context__ is back.__cause__ and back.__suppress_context__
    assert isinstance(back.__cause__.__cause__, fo.DeviceTraceback)  # the device's frames, printed first
    assert "wrapped" in back.__cause__.__cause__.text and "'missing'" in back.__cause__.__cause__.text
    try:
        try:
            _ = 1 / 0
        except ZeroDivisionError:
            raise ValueError("while handling")  # noqa: B904 - an implicit chain, as objectives write them
    except ValueError as e:
        implicit = e
    back = fo._PackedError.of(implicit).unpack()
    assert isinstance(back.__context__, ZeroDivisionError) and not back.__suppress_context__
    assert isinstance(back.__cause__, fo.DeviceTraceback)


def _answering_on_the_driver() -> None:
    raise ValueError("Cannot set different distribution kind to the same parameter name.")


def test_an_error_that_crossed_twice_prints_each_frame_once():
    """An error the driver raised answering a trial's call (Optuna's for a changed distribution, a sampler's) goes
    to the device, is raised in the objective and comes back: its driver frames were printed twice, with two
    device tracebacks in the chain (191 lines against Optuna's 43: a helper's side-by-side run)."""
    try:
        _answering_on_the_driver()
    except ValueError as e:
        on_device = fo._PackedError.of(e).unpack()  # as the trial's call raises it on the device
    try:
        raise on_device  # through the objective's frames
    except ValueError as e:
        back = fo._PackedError.of(e).unpack()  # as optimize raises it on the driver
    printed = "".join(traceback.format_exception(back))
    assert printed.count("in _answering_on_the_driver") == 1
    assert printed.count("DeviceTraceback:") == 1  # (its header came twice, stacked: a review)
    assert printed.count("test_an_error_that_crossed_twice_prints_each_frame_once") == 2  # each crossing's frame
    assert isinstance(back.__cause__, fo.DeviceTraceback) and back.__cause__.__cause__ is None


class NewOnly(Exception):
    """Cannot be made again by any pickle: its __new__ wants two arguments, its args hold one."""

    def __new__(cls, a: str, b: str) -> NewOnly:
        return super().__new__(cls, f"{a}-{b}")

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}-{b}")


def test_exception_that_cannot_be_recreated_becomes_trial_error():
    # One whose __init__ takes other arguments than its args is made from its class, args and attributes (it was
    # a TrialError, where the Tune front end's error.cause gave the exception: a helper's side by side)
    error = fo._PackedError.of(NotRecreatable("left", "right")).unpack()
    assert type(error) is NotRecreatable and str(error) == "left-right"
    packed = fo._PackedError.of(NewOnly("left", "right"))
    error = packed.unpack()
    assert isinstance(error, TrialError) and "NewOnly: left-right" in str(error)
    assert isinstance(error.__cause__, fo.DeviceTraceback)
    unpicklable = ValueError("holds a lock")
    unpicklable.lock = threading.Lock()
    error = fo._PackedError.of(unpicklable).unpack()
    assert isinstance(error, TrialError) and "ValueError: holds a lock" in str(error) and "pickle" in str(error)


def test_an_unpicklable_error_the_driver_raised_goes_to_the_device_as_its_class():
    """An error the driver raised answering a trial's call (the study's storage, its sampler) that does not pickle
    goes as its class, args and the attributes that pickle (it was a TrialError: the objective, ``catch`` and
    optimize's caller did not see the class Optuna shows them)."""
    error = StorageDown("storage down")
    error.code = 7
    back = fo._PackedError.of(error, bare=True).unpack()
    assert type(back) is StorageDown and str(back) == "storage down" and back.code == 7
    assert not hasattr(back, "lock")  # (what cannot travel stays behind)
    assert isinstance(back.__cause__, fo.DeviceTraceback)
    assert isinstance(fo._PackedError.of(error).unpack(), TrialError)  # (an objective's own: as before)


class _Described(RuntimeError):
    """An exception that formats itself from an attribute that does not pickle (as many libraries' errors do)."""

    def __init__(self, conn: Any) -> None:
        super().__init__()
        self.conn = conn

    def __str__(self) -> str:
        return f"lost {self.conn!r}"


def test_an_unpicklable_driver_error_whose_text_needs_what_stays_behind_goes_as_its_text():
    """Re-created without the attribute its ``__str__`` reads, such an error failed wherever it was shown (the
    user got ``AttributeError: ... no attribute 'conn'``): it goes as a TrialError with its own text, as before."""
    error = _Described(threading.Lock())
    back = fo._PackedError.of(error, bare=True).unpack()
    assert isinstance(back, TrialError) and "_Described: lost <unlocked _thread.lock" in str(back), str(back)


class _Handle:
    """A picklable object whose repr holds its address (a new one once unpickled)."""


class _AddressedDown(RuntimeError):
    """A storage error that does not pickle (it holds a lock) and names an object by its repr, address and all."""

    def __init__(self) -> None:
        super().__init__()
        self.handle, self.lock = _Handle(), threading.Lock()

    def __str__(self) -> str:
        return f"lost {self.handle!r}"


def test_an_unpicklable_driver_error_whose_text_names_an_address_still_goes_as_its_class():
    """Re-created, its text names another address: it still goes as its class, which ``catch`` names (it was sent
    as a TrialError when the texts differed, and optimize stopped where Optuna's ``catch`` went on)."""
    back = fo._PackedError.of(_AddressedDown(), bare=True).unpack()
    assert type(back) is _AddressedDown and str(back).startswith("lost <")


class _BadStr(ValueError):
    """An objective's exception whose ``__str__`` itself raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize("how", ["optuna", "fluidsalus"])
def test_an_objective_error_whose_str_raises_is_caught_as_in_optuna(tmp_path, how):
    """Optuna fails the trial and ``catch=(ValueError,)`` goes on; here packing its text raised, and the run ended
    with a TrialError."""
    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number == 1:
            raise _BadStr()
        return x

    study = optuna.create_study()
    if how == "optuna":
        study.optimize(objective, n_trials=3, catch=(ValueError,))
    else:
        _optimize(study, objective, tmp_path, n_trials=3, catch=(ValueError,), max_concurrent_trials=1, name="bad")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]


class StorageDown(RuntimeError):
    """A storage's exception that does not pickle (it holds a lock)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


#: Where trial 1's refused report reaches the study: with a later call inside the objective, with the end of an
#: objective that returns, or with the end of one that raises (TrialPruned) right after its last report.
_CALL_AFTER_EACH_REPORT = {"inside": True, "at_the_end": False, "at_a_raising_end": False}


def _reports_three(trial: Any, call_after: bool, pruned: bool = False) -> float:
    x = trial.suggest_float("x", -10, 10)
    for step in range(3):
        trial.report(x + step, step)
        if call_after:  # the report goes to the study with this call, inside the objective (else with its end)
            trial.suggest_int(f"k{step}", 0, 3)
    if pruned:
        raise optuna.TrialPruned()
    return x


class _NeverPrunes(optuna.pruners.BasePruner):
    """A pruner of the user's own that never prunes: its ``should_prune`` always goes to the driver (Optuna's
    ``MedianPruner``, the default, is answered on the device of an in-memory study)."""

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return False


def _refusing_trial_1s_first_report(error: Exception, step: int = 0, once: bool = False) -> optuna.Study:
    """A study whose storage refuses trial 1's report of ``step`` with ``error`` (the first time only: ``once``)."""
    study = optuna.create_study()
    real = study._storage.set_trial_intermediate_value
    refused: list[int] = []

    def refusing(trial_id: int, at: int, value: float) -> None:
        if study._storage.get_trial(trial_id).number == 1 and at == step and not (once and refused):
            refused.append(at)
            raise error
        real(trial_id, at, value)

    study._storage.set_trial_intermediate_value = refusing
    return study


@pytest.mark.parametrize("where", sorted(_CALL_AFTER_EACH_REPORT))
@pytest.mark.parametrize("catch", [(), (RuntimeError,)])
@pytest.mark.parametrize("how", ["optuna", "fluidsalus"])
def test_a_storage_error_in_a_report_is_the_objectives_as_in_optuna(tmp_path, how, catch, where):
    """The study's storage refuses trial 1's first report with an exception that does not pickle. Optuna raises it
    in the objective's ``report``: the trial is FAIL, and optimize raises that very exception unless ``catch``
    names it. Here optimize raised a TrialError ("errored on its device before its objective returned" when the
    report went with the trial's end, also that of an objective raising right after it; "could not be re-created"
    when with a later call) and ``catch`` missed it."""
    study = _refusing_trial_1s_first_report(StorageDown("storage down"))
    objective = functools.partial(_reports_three, call_after=_CALL_AFTER_EACH_REPORT[where],
                                  pruned=where == "at_a_raising_end")
    with contextlib.nullcontext() if catch else pytest.raises(StorageDown, match="storage down"):
        if how == "optuna":
            study.optimize(objective, n_trials=3, catch=catch)
        else:
            _optimize(study, objective, tmp_path, n_trials=3, catch=catch, max_concurrent_trials=1, name="down")
    states = [t.state for t in study.trials]
    ok = TrialState.PRUNED if where == "at_a_raising_end" else TrialState.COMPLETE
    assert states == ([ok, TrialState.FAIL, ok] if catch else [ok, TrialState.FAIL])
    assert study.trials[1].intermediate_values == {}  # (nothing told after the refused report)
    if how == "fluidsalus":
        store = ExperimentStore.open(tmp_path / "fluidsalus" / "down", readonly=True)
        try:
            errors = [row.error for row in store.trials() if row.status == "ERROR"]
        finally:
            store.close()
        assert errors == ["StorageDown: storage down"]


def _reports_three_then_waits_for_the_driver(trial: Any) -> float:
    x = trial.suggest_float("x", -10, 10)
    for step in range(3):
        trial.report(x + step, step)
    time.sleep(2 * POLL_WAIT_S)  # (the results reach the driver before the end that carries the reports)
    return x


@pytest.mark.parametrize("how", ["optuna", "fluidsalus"])
def test_a_trial_whose_report_the_storage_refused_keeps_no_later_value_as_in_optuna(tmp_path, how):
    """Optuna's ``report`` raises the storage's refusal in the objective, which reports no more: the FAIL trial has
    no intermediate value. The driver told each later report as its result came (the refusal was left to the call
    carrying it), so the FAIL trial kept the values of steps 1 and 2 (h131's F3)."""
    study = _refusing_trial_1s_first_report(ConnectionError("storage down"))
    if how == "optuna":
        study.optimize(_reports_three_then_waits_for_the_driver, n_trials=3, catch=(ConnectionError,))
    else:
        _optimize(study, _reports_three_then_waits_for_the_driver, tmp_path, n_trials=3, catch=(ConnectionError,),
                  max_concurrent_trials=1)
    assert [(t.state, sorted(t.intermediate_values)) for t in study.trials] == [
        (TrialState.COMPLETE, [0, 1, 2]), (TrialState.FAIL, []), (TrialState.COMPLETE, [0, 1, 2])]


def _retries_a_refused_report(trial: Any) -> float:
    x = trial.suggest_float("x", 0, 1)
    for step in range(4):
        for _ in range(2):  # (the objective reports the step again after the storage's error)
            try:
                trial.report(x + step, step)
                trial.should_prune()
                break
            except ConnectionError:
                pass
    return x


def _guards_its_reports_only(trial: Any) -> float:
    x = trial.suggest_float("x", 0, 1)
    for step in range(4):
        with contextlib.suppress(ConnectionError):
            trial.report(x + step, step)
    time.sleep(2 * POLL_WAIT_S)  # (the results reach the driver before the call that carries the reports)
    trial.set_user_attr("done", True)
    return x


@pytest.mark.parametrize("how", ["optuna", "fluidsalus"])
def test_a_report_the_storage_refused_once_is_stored_when_the_objective_reports_it_again(tmp_path, how):
    """The storage refuses trial 1's step 1 once; the objective catches the error and reports the step again.
    Optuna stores it then. The device had marked the step reported before the driver stored it, so the second
    report was ignored with Optuna's "already reported" warning and the value lost (h149's F1)."""
    study = _refusing_trial_1s_first_report(ConnectionError("storage down"), step=1, once=True)
    study.pruner = _NeverPrunes()  # (asked on the driver at each step: the call that raises the refusal)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # (no "already reported" warning: Optuna gives none)
        if how == "optuna":
            study.optimize(_retries_a_refused_report, n_trials=3)
        else:
            _optimize(study, _retries_a_refused_report, tmp_path, n_trials=3, max_concurrent_trials=1)
    assert [(t.state, sorted(t.intermediate_values)) for t in study.trials] == [
        (TrialState.COMPLETE, [0, 1, 2, 3])] * 3


@pytest.mark.parametrize("how", ["optuna", "fluidsalus"])
def test_a_report_the_storage_refused_once_fails_no_trial_whose_objective_guards_its_reports(tmp_path, how):
    """The storage refuses trial 1's step 1 once, and the objective guards only its reports. Optuna's report raises
    there and the trial completes. The driver kept the first refusal and raised it at the call carrying the report,
    the unguarded ``set_user_attr``: the trial failed (h149's F2); the call tells the report again now."""
    study = _refusing_trial_1s_first_report(ConnectionError("storage down"), step=1, once=True)
    if how == "optuna":
        study.optimize(_guards_its_reports_only, n_trials=3)
    else:
        _optimize(study, _guards_its_reports_only, tmp_path, n_trials=3, max_concurrent_trials=1)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    assert all(t.user_attrs == {"done": True} for t in study.trials)


class _PrunerThatFailsOnce(optuna.pruners.BasePruner):
    """Raises at trial 1's first ``should_prune`` (a pruner's own error: no report was refused)."""

    def __init__(self) -> None:
        self.failed = False

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if trial.number == 1 and not self.failed:
            self.failed = True
            raise RuntimeError("pruner hiccup")
        return False


def _reports_a_step_again_after_a_failed_call(trial: Any) -> float:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trial.report(1.0, 0)
        with contextlib.suppress(RuntimeError):
            trial.should_prune()
        trial.report(2.0, 0)  # (Optuna: "already reported", given here)
        trial.report(3.0, 1)
    trial.set_user_attr("warned", [str(w.message)[:40] for w in caught])
    return 0.0


@pytest.mark.parametrize("how", ["optuna", "fluidsalus"])
def test_a_call_that_failed_for_another_reason_than_a_refused_report_keeps_its_steps_reported(tmp_path, how):
    """A call carrying held reports failed on the driver (the pruner raised) after every report was stored: the
    device forgot all of their steps, so a step reported again gave Optuna's "already reported" warning at a later
    call, outside the objective's ``catch_warnings`` (Optuna gives it at ``report``: h158's B1)."""
    study = optuna.create_study(pruner=_PrunerThatFailsOnce())
    if how == "optuna":
        study.optimize(_reports_a_step_again_after_a_failed_call, n_trials=2)
    else:
        _optimize(study, _reports_a_step_again_after_a_failed_call, tmp_path, n_trials=2, max_concurrent_trials=1)
    assert [t.user_attrs["warned"] for t in study.trials] == [["The reported value is ignored because th"]] * 2
    assert [t.intermediate_values for t in study.trials] == [{0: 1.0, 1: 3.0}] * 2


def test_out_of_memory_reruns_the_same_optuna_trial(tmp_path):
    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        first = "x_first" not in trial.user_attrs
        if first:
            trial.set_user_attr("x_first", x)
        for step in range(3):
            trial.report(x + step + (0 if first else 100), step)
            if first and step == 1:  # (a refusal at its cap: alone on its device, a plain MemoryError is not retried)
                from fluidsalus.gpu.allocator import Status
                from fluidsalus.gpu.arena import ArenaOutOfMemoryError

                raise ArenaOutOfMemoryError("out of memory on the first attempt", Status.TAG_CAP)
        return x

    study = optuna.create_study()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # re-reported steps of the first attempt are skipped without a warning
        _optimize(study, objective, tmp_path, n_trials=2)

    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    for t in study.trials:
        x = t.params["x"]
        assert t.user_attrs["x_first"] == x  # the same Optuna trial, the same suggestion
        # Steps 0-1 from the first attempt; step 2 from the rerun, computed as the objective does ((x + 2) + 100:
        # float addition is not associative, so x + 102 can differ in the last digit).
        assert t.intermediate_values == {0: x + 0 + 0, 1: x + 1 + 0, 2: x + 2 + 100}


def _reports_for_a_second(trial: Any) -> float:
    """Twenty reports 0.05 s apart: running when a callback ends the run."""
    x = trial.suggest_float("x", 0, 1)
    for step in range(20):
        time.sleep(0.05)
        trial.report(x, step)
    return x


def test_interrupted_run_fails_its_running_trials(tmp_path, optuna_records):
    def interrupt(study: optuna.Study, trial: FrozenTrial) -> None:
        raise KeyboardInterrupt

    study = optuna.create_study()
    with pytest.raises(KeyboardInterrupt):
        _optimize(study, _reports_for_a_second, tmp_path, n_trials=10, callbacks=[interrupt])
    states = [t.state for t in study.trials]
    assert TrialState.COMPLETE in states and TrialState.RUNNING not in states
    assert not study._thread_local.in_optimize_loop
    # the experiment's record has the study's params and metric, as after a run that ended (h99's F3)
    [folder] = os.listdir(tmp_path / "fluidsalus")
    store = ExperimentStore.open(tmp_path / "fluidsalus" / folder, readonly=True)
    try:
        assert store.experiment()["metric"] == fo.KEY_VALUE
        rows = {row.trial_id: row for row in store.trials()}
        ends = store.events("trial_end")
    finally:
        store.close()
    # every trial has one trial_end, of its outcome, as every trial the engine ends (those the interrupt ended in the
    # study had none: inspect's timelines lacked their end)
    assert sorted(e.trial_id for e in ends) == sorted(rows)
    assert all(e.data["outcome"] == rows[e.trial_id].stop_reason and e.data["attempt"] == rows[e.trial_id].attempt
               for e in ends)
    configs = [row.config for row in rows.values()]
    assert sum(set(config) == {"x"} for config in configs) == len(study.trials)  # (the others never started)
    # each trial the interrupt failed in the study is ERROR in the experiment too, with the interrupt, and the trial
    # whose callback raised it is TERMINATED (they stayed RUNNING or PENDING there, for a resume optimize never does:
    # the two records disagreed)
    for trial in study.trials:
        row = rows[trial.system_attrs[fo.SYSTEM_ATTR]["trial_id"]]
        expected = {TrialState.COMPLETE: "TERMINATED", TrialState.FAIL: "ERROR"}[trial.state]
        assert row.status == expected and (expected == "TERMINATED" or row.error == "KeyboardInterrupt")
        if expected == "TERMINATED":  # with its value, as a trial that ended in the run (no value: no best trial)
            assert (row.last_result or {}).get(fo.KEY_VALUE) == trial.value
        else:  # and its error files, as every ERROR trial's (Trial.get_error() was None)
            assert "KeyboardInterrupt" in (tmp_path / "fluidsalus" / folder / row.trial_id / ERROR_FILE).read_text()
    # and a trial proposed but never started (no Optuna trial) ends as the engine ends those it never ran: it
    # stayed PENDING, "unfinished" in `ls`, for a resume optimize never does (h116's F3)
    linked = {t.system_attrs[fo.SYSTEM_ATTR]["trial_id"] for t in study.trials}
    assert all(row.status in ("TERMINATED", "ERROR") for row in rows.values())
    assert all(row.status == "TERMINATED" and row.stop_reason == "stopped" and row.last_result is None
               for row in rows.values() if row.trial_id not in linked)
    # Optuna's lines for each trial the interrupt failed, without the driver's traceback (the same frames for
    # every such trial, none of them the objective's: it was shown once per trial)
    failed = [r for r in optuna_records if "because of the following error: KeyboardInterrupt()." in r.getMessage()]
    assert len(failed) == states.count(TrialState.FAIL) >= 1
    assert all(r.exc_info is None for r in failed)



def test_a_ctrl_c_keeps_the_reports_the_devices_still_held(tmp_path):
    """Under a pruner answered on the device (``NopPruner``), a report reaches the driver with the trial's next call
    to it or within ``POLL_WAIT_S``: a Ctrl-C lost the running trials' reports of that last half second (here the
    ten after the first: the study had step 0, or steps 0-1), where Optuna stores each at once. The first Ctrl-C
    takes what the devices hold before it fails the trials (``Executor._drain``)."""
    driver = os.getpid()

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        trial.report(x, 0)
        time.sleep(2 * POLL_WAIT_S)  # (step 0 has reached the driver, which waits for the next poll)
        for step in range(1, 11):
            trial.report(x, step)
            trial.should_prune()
        os.kill(driver, signal.SIGINT)  # the user's Ctrl-C, right after them
        for step in range(11, 1000):  # (stopped at a report once the run stops its trials)
            time.sleep(0.01)
            trial.report(x, step)
        return x

    study = optuna.create_study(pruner=optuna.pruners.NopPruner())
    with pytest.raises(KeyboardInterrupt):
        _optimize(study, objective, tmp_path, n_trials=1)
    [trial] = study.trials
    assert trial.state == TrialState.FAIL
    assert set(range(11)) <= trial.intermediate_values.keys()


@pytest.mark.parametrize("how", ["optuna", "fluidsalus"])
def test_an_interrupt_before_any_trial_started_leaves_no_trial_unfinished(tmp_path, how, capsys):
    """A Ctrl-C landing in the first ``study.ask()``: Optuna raises it with no trial; the experiment's record had
    the proposed fluidsalus trials RUNNING/PENDING for good ("unfinished" in ``fluidsalus ls``, for a resume
    optimize never does), and no metric (nothing was recorded when no trial had started). They end as trials that
    never started: the one whose lane had begun it counted as a trial that ran ("1 terminated" in ``ls``), with
    no ``trial_end`` (h131's F6, h130's F4)."""
    from fluidsalus.cli import main

    def interrupted_ask(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    study = optuna.create_study()
    study.ask = interrupted_ask  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        if how == "optuna":
            study.optimize(_quadratic, n_trials=4)
        else:
            _optimize(study, _quadratic, tmp_path, n_trials=4, name="first")
    assert study.trials == []
    if how == "optuna":
        return
    path = tmp_path / "fluidsalus" / "first"
    store = ExperimentStore.open(path, readonly=True)
    try:
        rows, ends, starts = store.trials(), store.events("trial_end"), store.events("trial_start")
        assert store.experiment()["metric"] == fo.KEY_VALUE
    finally:
        store.close()
    assert rows and all(row.status == "TERMINATED" and row.stop_reason == "stopped" and row.last_result is None
                        and row.started_at is None for row in rows)
    assert sorted((e.trial_id, e.data) for e in ends) == sorted(
        (row.trial_id, {"attempt": 0, "outcome": "stopped", "started": False}) for row in rows)
    assert starts == []
    capsys.readouterr()
    assert main(["ls", str(path)]) == 0
    assert f"{len(rows)} ({len(rows)} terminated, {len(rows)} of them never started)" in capsys.readouterr().out


def test_a_system_exit_in_the_driver_leaves_the_running_trials_running_as_optuna_does(tmp_path):
    """Ray's SIGTERM handler raises SystemExit in the driver (a preemption): Optuna fails a trial only on an
    Exception or a KeyboardInterrupt, so its trials stay RUNNING for a heartbeat storage to retry; here they were
    told FAIL, and a RetryFailedTrialCallback never ran them again (a helper's side-by-side run)."""
    def terminated(study: optuna.Study, trial: FrozenTrial) -> None:
        raise SystemExit(15)

    study = optuna.create_study()
    with pytest.raises(SystemExit):
        _optimize(study, _reports_for_a_second, tmp_path, n_trials=10, callbacks=[terminated], name="sigterm")
    states = [t.state for t in study.trials]
    assert TrialState.COMPLETE in states and TrialState.RUNNING in states and TrialState.FAIL not in states
    # the experiment's record agrees: the COMPLETE trial (its callback raised) TERMINATED, the RUNNING ones unfinished
    store = ExperimentStore.open(tmp_path / "fluidsalus" / "sigterm", readonly=True)
    try:
        rows = {row.trial_id: row.status for row in store.trials()}
    finally:
        store.close()
    for trial in study.trials:
        status = rows[trial.system_attrs[fo.SYSTEM_ATTR]["trial_id"]]
        assert status == "TERMINATED" if trial.state == TrialState.COMPLETE else status in ("RUNNING", "PENDING")


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError, ConnectionError])
def test_an_error_while_a_trial_is_started_leaves_no_trial_running(tmp_path, error):
    """A Ctrl-C (or a storage error) landing in the driver's write of a new trial's system attribute, between
    ``study.ask()`` and the trial's registration and heartbeat, left that trial RUNNING for good: nothing failed it,
    and without a heartbeat row no stale-trial check ever would (h99's F1, seen twice in ~25 signalled runs)."""
    study = optuna.create_study()
    storage = study._storage
    real = storage.set_trial_system_attr
    calls = {"n": 0}

    def lands_in_the_third_start(trial_id: int, key: str, value: Any) -> None:
        if key == fo.SYSTEM_ATTR:
            calls["n"] += 1
            if calls["n"] == 3:
                raise error("it landed here")
        real(trial_id, key, value)

    storage.set_trial_system_attr = lands_in_the_third_start
    if error is ConnectionError:  # the storage stays down: telling the study that trial failed fails too
        real_tell = storage.set_trial_state_values

        def still_down(trial_id: int, state: TrialState, values: Any = None) -> bool:
            if calls["n"] >= 3:
                raise RuntimeError("still down")
            return real_tell(trial_id, state, values)

        storage.set_trial_state_values = still_down
    with pytest.raises(error, match="it landed here"):  # (the first error: the second's was raised)
        _optimize(study, _quadratic, tmp_path, n_trials=6, name="started")
    if error is ConnectionError:
        return
    states = [t.state for t in study.trials]
    assert len(states) >= 3 and TrialState.RUNNING not in states and states[2] == TrialState.FAIL
    if error is RuntimeError:
        # the experiment's record agrees with the study: that trial ERROR with the storage's error (it ended
        # TERMINATED with no result and an empty config)
        store = ExperimentStore.open(tmp_path / "fluidsalus" / "started", readonly=True)
        try:
            rows = {row.trial_id: row for row in store.trials()}
        finally:
            store.close()
        linked = {t.system_attrs[fo.SYSTEM_ATTR]["trial_id"] for t in study.trials if fo.SYSTEM_ATTR in t.system_attrs}
        errored = [row for row in rows.values() if row.status == "ERROR"]
        assert len(errored) == 1 and errored[0].trial_id not in linked  # (the one whose link was not written)
        assert "RuntimeError: it landed here" in (errored[0].error or "")


# ---------------------------------------------------------------------------------------------- stopping


def test_callbacks_get_frozen_trials_and_can_stop_the_study(tmp_path):
    seen: list[tuple[int, TrialState]] = []

    def record(study: optuna.Study, trial: FrozenTrial) -> None:
        assert isinstance(trial, FrozenTrial)
        seen.append((trial.number, trial.state))
        if len(seen) == 3:
            study.stop()

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number == 1:
            raise optuna.TrialPruned()
        return x

    study = optuna.create_study()
    _optimize(study, objective, tmp_path, n_trials=50, callbacks=[record])

    assert 3 <= len(study.trials) < 50
    assert all(t.state.is_finished() for t in study.trials)
    assert sorted(n for n, _ in seen) == [t.number for t in study.trials]  # once per trial, after its tell
    assert dict(seen)[1] == TrialState.PRUNED


def test_callback_error_is_raised(tmp_path):
    def broken(study: optuna.Study, trial: FrozenTrial) -> None:
        raise RuntimeError("callback broke")

    study = optuna.create_study()
    with pytest.raises(RuntimeError, match="callback broke"):
        _optimize(study, _quadratic, tmp_path, n_trials=20, callbacks=[broken])
    assert 1 <= len(study.trials) < 20 and all(t.state == TrialState.COMPLETE for t in study.trials)


def test_an_optimize_started_from_a_callback_of_another_is_refused_at_once_when_the_outer_holds_every_core(tmp_path):
    """Optuna runs another study's optimize in a callback. Here the outer run's devices hold the cores until the
    callback returns: the inner run waited 120 s for them, then blamed the resources (a helper's test). It is now
    refused at once, naming the nesting; where the outer leaves a core free, the inner runs on it."""
    from fluidsalus.errors import FluidsalusError

    other = optuna.create_study()

    def optimise_other(study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.number == 0:
            fo.optimize(other, _quadratic, n_trials=2, storage_path=str(tmp_path / "inner"), verbose=0)

    study = optuna.create_study()
    with pytest.raises(FluidsalusError, match=r"^this run was started inside another fluidsalus run of this thread "
                                              r"\(from its callback.*none of its devices can start"):
        _optimize(study, _quadratic, tmp_path, n_trials=3, callbacks=[optimise_other], name="outer")
    assert len(other.trials) == 0 and study.trials[0].state == TrialState.COMPLETE
    study = optuna.create_study()
    _optimize(study, _quadratic, tmp_path, n_trials=3, callbacks=[optimise_other], name="outer_one", devices=1,
              cpus_per_device=1)
    assert [t.state for t in other.trials] == [TrialState.COMPLETE] * 2 and len(study.trials) == 3

def test_study_stop_from_the_objective(tmp_path):
    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number == 2:
            trial.study.stop()
        return x

    study = optuna.create_study()
    _optimize(study, objective, tmp_path, n_trials=40)
    assert 3 <= len(study.trials) < 40 and all(t.state == TrialState.COMPLETE for t in study.trials)


def test_timeout_starts_no_new_trial_and_lets_running_ones_finish(tmp_path):
    sleep_s, timeout_s = 0.3, 1.5

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        time.sleep(sleep_s)
        return x

    study = optuna.create_study()
    started = time.monotonic()
    _optimize(study, objective, tmp_path, timeout=timeout_s)
    elapsed = time.monotonic() - started

    assert len(study.trials) >= 1
    assert all(t.state == TrialState.COMPLETE for t in study.trials)  # none cut short
    assert elapsed >= timeout_s
    last_start = max(t.datetime_start for t in study.trials)
    first_start = min(t.datetime_start for t in study.trials)
    assert (last_start - first_start).total_seconds() < timeout_s


def test_a_trial_whose_start_finds_the_study_stopped_ends_as_one_that_never_started(tmp_path, monkeypatch, capsys):
    """After ``study.stop()`` (or ``timeout``) the trial waiting on a lane begins before the stop reaches it (forced
    here: the driver sends it no stop), asks for its start and runs nothing: the study has no trial for it, as Optuna's
    loop starts none. It was recorded as a started, completed trial ("4 terminated" for Optuna's 3, h130's F2): it
    ends stopped, with no start, a ``trial_end`` with ``started: False``, and the final line and ``ls`` count it
    among those that never started."""
    from fluidsalus.cli import main

    def stop_after_the_third(study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.number == 2:
            study.stop()

    plain = optuna.create_study()
    plain.optimize(_quadratic, n_trials=20, callbacks=[stop_after_the_third])
    monkeypatch.setattr(fo._StudyDriver, "collect_stops", lambda self: [])  # (the stop reaches no trial in time)
    study = optuna.create_study()
    _optimize(study, _quadratic, tmp_path, n_trials=20, callbacks=[stop_after_the_third], name="stopped",
              max_concurrent_trials=1, verbose=1)
    assert len(study.trials) == len(plain.trials) == 3
    path = tmp_path / "fluidsalus" / "stopped"
    store = ExperimentStore.open(path, readonly=True)
    try:
        rows, ends, starts = store.trials(), store.events("trial_end"), store.events("trial_start")
    finally:
        store.close()
    linked = {t.system_attrs[fo.SYSTEM_ATTR]["trial_id"] for t in study.trials}
    never = {row.trial_id for row in rows if row.trial_id not in linked}
    assert len(never) == 1
    assert all(row.status == "TERMINATED" and row.stop_reason == "stopped" and row.started_at is None
               and row.last_result is None for row in rows if row.trial_id in never)
    assert [e.data for e in ends if e.trial_id in never] == [{"attempt": 0, "outcome": "stopped", "started": False}]
    assert {e.trial_id for e in starts} == linked
    assert "4 trials in" in (out := capsys.readouterr().out) and "(4 terminated, 1 of them never started" in out
    assert main(["ls", str(path)]) == 0
    assert "4 (3 complete, 1 terminated, 1 of them never started)" in capsys.readouterr().out


def test_cpus_per_trial_runs_more_objectives_at_once_on_each_core(tmp_path):
    # cpus_per_trial=0.5 on the shared 2-CPU Ray: two objectives per core, four at once. Each waits until all
    # four have started; with one per core the first two would give up and return 2.
    import ray

    n = 2 * int(ray.cluster_resources()["CPU"])
    started = tmp_path / "started"
    started.mkdir()

    def objective(trial: Any) -> float:
        (started / str(trial.number)).touch()
        deadline = time.monotonic() + 10.0
        while len(os.listdir(started)) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return float(len(os.listdir(started)))

    study = optuna.create_study()
    _optimize(study, objective, tmp_path, n_trials=n, cpus_per_trial=0.5)
    assert [t.value for t in study.trials] == [float(n)] * n


# ---------------------------------------------------------------------------------------------- pruning


def test_median_pruner_prunes_with_the_last_reported_value(tmp_path):
    steps = 5

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 10)
        for step in range(steps):
            trial.report(x + (steps - step), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return x

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1))
    _optimize(study, objective, tmp_path, n_trials=16, name="median")

    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert pruned and complete
    for t in pruned:
        last = max(t.intermediate_values)
        assert t.value == t.intermediate_values[last]
        assert last >= 1  # n_warmup_steps=1: never pruned at step 0
    for t in complete:
        assert sorted(t.intermediate_values) == list(range(steps))
    assert study.best_value == min(t.value for t in complete)
    # Each report was an iteration in the experiment too (learning curves for fluidsalus inspect).
    store = ExperimentStore.open(tmp_path / "fluidsalus" / "median", readonly=True)
    try:
        curves = [r.metrics for r in store.results() if fo.KEY_INTERMEDIATE in r.metrics]
    finally:
        store.close()
    assert len(curves) == sum(len(t.intermediate_values) for t in study.trials)


def test_reports_without_should_prune_reach_the_experiment_in_order(tmp_path):
    """A report rides with the trial's next driver call (fluidsalus.session.report_deferred): with no
    should_prune, the finish brings them, and every step is in the experiment, in order."""

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        for step in range(3):
            trial.report(x * step, step)
        return x

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    _optimize(study, objective, tmp_path, n_trials=4, name="curves")
    assert [sorted(t.intermediate_values) for t in study.trials] == [[0, 1, 2]] * 4
    store = ExperimentStore.open(tmp_path / "fluidsalus" / "curves", readonly=True)
    try:
        steps: dict[int, list[int]] = {}
        for r in store.results():
            if fo.KEY_INTERMEDIATE in r.metrics:
                steps.setdefault(r.metrics[fo.KEY_NUMBER], []).append(r.metrics[fo.KEY_STEP])
    finally:
        store.close()
    assert steps == {t.number: [0, 1, 2] for t in study.trials}


def _lightgbm_objective(trial: Any) -> float:
    import lightgbm as lgb
    import numpy as np
    from optuna_integration import LightGBMPruningCallback
    from sklearn.datasets import load_breast_cancer

    features, labels = load_breast_cancer(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(labels))
    train, valid = order[:400], order[400:]
    params = {"objective": "binary", "metric": "binary_logloss", "verbosity": -1, "num_threads": 1,
              "learning_rate": trial.suggest_float("lr", 1e-3, 0.3, log=True)}
    booster = lgb.train(params, lgb.Dataset(features[train], labels[train]), num_boost_round=LIGHTGBM_ROUNDS,
                        valid_sets=[lgb.Dataset(features[valid], labels[valid])],
                        callbacks=[LightGBMPruningCallback(trial, "binary_logloss")])
    return booster.best_score["valid_0"]["binary_logloss"]


LIGHTGBM_ROUNDS = 30


def test_optunas_lightgbm_pruning_callback_reports_and_prunes_through_the_study(tmp_path):
    """optuna-integration's callbacks take the objective's trial (``report``, ``should_prune``,
    ``trial.study.direction``): one run at a time, two good trials complete and a far worse one is pruned."""
    pytest.importorskip("lightgbm")
    pytest.importorskip("optuna_integration")
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=5))
    for lr in (0.3, 0.2, 0.001):
        study.enqueue_trial({"lr": lr})
    _optimize(study, _lightgbm_objective, tmp_path, n_trials=3, max_concurrent_trials=1)
    good, _, bad = study.trials
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    assert sorted(good.intermediate_values) == list(range(LIGHTGBM_ROUNDS))  # one report per boosting round
    assert good.value == good.intermediate_values[LIGHTGBM_ROUNDS - 1]  # no early stopping: the last round's
    assert max(bad.intermediate_values) == 5  # pruned at the first step after MedianPruner's warm-up
    assert bad.value == bad.intermediate_values[max(bad.intermediate_values)]


def _lightning_objective(trial: Any) -> float:
    import lightning.pytorch as pl
    import torch
    from optuna_integration import PyTorchLightningPruningCallback

    class Line(pl.LightningModule):
        def __init__(self, lr: float) -> None:
            super().__init__()
            self.w = torch.nn.Linear(1, 1)
            self.lr = lr

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.w(x), y)

        def validation_step(self, batch: Any, _: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.w(x), y))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    x = torch.linspace(-1, 1, 32).unsqueeze(1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, 3 * x), batch_size=8)
    callback = PyTorchLightningPruningCallback(trial, monitor="val_loss")
    trainer = pl.Trainer(max_epochs=LIGHTNING_EPOCHS, callbacks=[callback], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(Line(trial.suggest_float("lr", 0.01, 0.1)), data, data)
    callback.check_pruned()  # as its docstring asks, right after fit(): outside DDP it does nothing
    return float(trainer.callback_metrics["val_loss"])


LIGHTNING_EPOCHS = 3


def test_optunas_lightning_pruning_callback_reports_each_epoch_and_check_pruned_passes(tmp_path):
    """optuna-integration's ``PyTorchLightningPruningCallback`` reports each epoch's ``val_loss``; its
    ``check_pruned()`` reads ``trial.study._storage``, which a device's study did not have (AttributeError: every
    trial failed) and now has: a storage that is none of Optuna's cached ones, so outside DDP it does nothing,
    as in Optuna."""
    pytest.importorskip("lightning")
    pytest.importorskip("optuna_integration")
    study = optuna.create_study()
    _optimize(study, _lightning_objective, tmp_path, n_trials=2, max_concurrent_trials=1)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    assert all(sorted(t.intermediate_values) == list(range(LIGHTNING_EPOCHS)) for t in study.trials)


# ---------------------------------------------------------------------------------------------- storages


def test_sqlite_study_resumes_where_it_stopped(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"

    def objective(trial: Any) -> float:
        trial.set_user_attr("trials_seen", len(trial.study.trials))
        return _quadratic(trial)

    study = optuna.create_study(study_name="resumable", storage=url, sampler=optuna.samplers.TPESampler(seed=0))
    _optimize(study, objective, tmp_path, n_trials=3)
    again = optuna.load_study(study_name="resumable", storage=url, sampler=optuna.samplers.TPESampler(seed=1))
    _optimize(again, objective, tmp_path, n_trials=3)

    trials = optuna.load_study(study_name="resumable", storage=url).trials
    assert [t.number for t in trials] == list(range(6))
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert all(t.user_attrs["trials_seen"] >= 4 for t in trials[3:])  # the second run sees the first's trials
    assert len({t.system_attrs[fo.SYSTEM_ATTR]["experiment"] for t in trials}) == 2
    assert again.best_value == min(t.value for t in trials)


def test_journal_storage(tmp_path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = str(tmp_path / "journal.log")
    study = optuna.create_study(study_name="journal", storage=JournalStorage(JournalFileBackend(path)))
    _optimize(study, _quadratic, tmp_path, n_trials=4)

    reread = optuna.load_study(study_name="journal", storage=JournalStorage(JournalFileBackend(path)))
    assert [t.state for t in reread.trials] == [TrialState.COMPLETE] * 4
    assert reread.best_value == study.best_value


# ---------------------------------------------------------------------------------------------- arguments


def test_a_fractional_n_trials_runs_as_many_trials_as_optunas_loop(tmp_path):
    """Optuna's loop runs trials while their count is below ``n_trials``: 2.5 runs 3 (it was refused)."""
    ours, theirs = optuna.create_study(), optuna.create_study()
    theirs.optimize(_quadratic, n_trials=2.5)
    _optimize(ours, _quadratic, tmp_path, n_trials=2.5)
    assert len(ours.trials) == len(theirs.trials) == 3


def test_an_infinite_n_trials_runs_until_the_study_stops_as_optunas_loop(tmp_path):
    """math.ceil(inf) raised OverflowError before any trial ran (a helper's side by side)."""
    def stop_at_three(study, trial):
        if len(study.trials) >= 3:
            study.stop()

    ours, theirs = optuna.create_study(), optuna.create_study()
    theirs.optimize(_quadratic, n_trials=math.inf, callbacks=[stop_at_three])
    _optimize(ours, _quadratic, tmp_path, n_trials=math.inf, callbacks=[stop_at_three], max_concurrent_trials=1)
    assert len(ours.trials) == len(theirs.trials) == 3


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    study = optuna.create_study()
    with pytest.raises(ConfigError, match="timeout="):
        fo.optimize(study, _quadratic, n_trials=1, time_budget_s=5)
    with pytest.raises(ConfigError, match="not an argument"):
        fo.optimize(study, _quadratic, n_trials=1, no_such_option=1)
    with pytest.raises(ConfigError, match="catch"):
        fo.optimize(study, _quadratic, n_trials=1, catch=[42])
    # (a name was iterated: "got 'V'", its first letter; h83's N4)
    with pytest.raises(ConfigError, match=r"^catch: must be an exception class or an iterable of them, got "
                                          r"'ValueError', a name: pass the class itself"):
        fo.optimize(study, _quadratic, n_trials=1, catch="ValueError")
    with pytest.raises(ConfigError, match=r"n_trials: must be a number of trials \(an int\) or None, got '3'"):
        fo.optimize(study, _quadratic, n_trials="3")
    with pytest.raises(ConfigError, match="timeout: must be a number of seconds or None, got nan"):
        fo.optimize(study, _quadratic, timeout=math.nan)
    with pytest.raises(ConfigError, match="study"):
        fo.optimize("study", _quadratic, n_trials=1)
    # Where Optuna raises TypeError, the error is one too (a ConfigTypeError), so `except TypeError` code catches it
    for bad in ({"n_trials": "3"}, {"timeout": "1"}, {"callbacks": print}, {"catch": [42]}, {"n_jobs": "x"},
                {"no_such_option": 1}):
        with pytest.raises(TypeError, match=f"^{next(iter(bad))}: "):
            fo.optimize(study, _quadratic, **bad)
    with pytest.raises(ConfigError, match=r"^n_jobs: must be -1 or > 0 \(ignored: the lanes decide concurrency\), "
                                          "got 0$"):
        fo.optimize(study, _quadratic, n_trials=1, n_jobs=0)  # (Optuna: "max_workers must be greater than 0")
    with pytest.raises(TypeError, match="^objective: missing"):
        fo.optimize(study, n_trials=1)
    with pytest.raises(TypeError, match="^func: the objective was given twice"):
        fo.optimize(study, _quadratic, func=_quadratic, n_trials=1)
    # As in Optuna, no trial and no error: nothing to do (a negative timeout: the time left, computed)
    for nothing in ({"n_trials": 0}, {"n_trials": -1}, {"n_trials": 3, "timeout": -1.0}):
        fo.optimize(study, _quadratic, storage_path=str(tmp_path), **nothing)
    assert study.trials == [] and not any(tmp_path.iterdir())
    lock = threading.Lock()

    def locked(trial: Any) -> float:
        with lock:
            return trial.suggest_float("x", 0.0, 1.0)

    with pytest.raises(ConfigError, match=r"^objective: cannot be pickled.*lock"):  # the argument, by its name
        fo.optimize(study, locked, n_trials=1, storage_path=str(tmp_path))
    assert study.trials == [] and not any(tmp_path.iterdir())

    def nested(trial: Any) -> float:
        return 0.0

    study._thread_local.in_optimize_loop = True
    try:
        with pytest.raises(RuntimeError, match="Nested"):
            fo.optimize(study, nested, n_trials=1)
    finally:
        study._thread_local.in_optimize_loop = False


def test_a_bool_n_trials_or_timeout_is_read_as_optunas_loop_reads_it(tmp_path):
    """Optuna's loop compares ``n_trials`` and ``timeout`` with its counts, so a bool is an int there:
    ``n_trials=True`` runs one trial, ``False`` none, ``timeout=True`` is a second. They were refused (h170)."""
    theirs, ours = optuna.create_study(), optuna.create_study()
    theirs.optimize(_quadratic, n_trials=True, timeout=True)
    _optimize(ours, _quadratic, tmp_path, n_trials=True, timeout=True, name="bool")
    assert [t.state for t in ours.trials] == [t.state for t in theirs.trials] == [TrialState.COMPLETE]
    theirs.optimize(_quadratic, n_trials=False)
    fo.optimize(ours, _quadratic, n_trials=False, storage_path=str(tmp_path / "none"))
    assert len(ours.trials) == len(theirs.trials) == 1 and not (tmp_path / "none").exists()


def test_a_numpy_bool_n_trials_or_timeout_is_read_as_optunas_loop_reads_it(tmp_path):
    """``numbers.Real`` takes NumPy's ints and floats but not its bool, which was refused (``ConfigTypeError``) where
    Optuna's loop compares it as its number: ``n_trials=np.True_`` runs one trial (h187's F5, h195's
    ``i2_numbers.py``)."""
    theirs, ours = optuna.create_study(), optuna.create_study()
    theirs.optimize(_quadratic, n_trials=np.True_, timeout=np.True_)
    _optimize(ours, _quadratic, tmp_path, n_trials=np.True_, timeout=np.True_, name="npbool")
    assert [t.state for t in ours.trials] == [t.state for t in theirs.trials] == [TrialState.COMPLETE]
    theirs.optimize(_quadratic, n_trials=np.False_)
    fo.optimize(ours, _quadratic, timeout=np.False_, storage_path=str(tmp_path / "none"))
    assert len(ours.trials) == len(theirs.trials) == 1 and not (tmp_path / "none").exists()


def test_a_call_of_no_trial_shows_optunas_empty_bar(tmp_path, capsys):
    """With ``timeout<=0`` (or ``n_trials<0``) and ``show_progress_bar=True`` Optuna shows an empty bar (``0%|``)
    and runs nothing; fluidsalus showed none (h187's F6, h195's ``i2_bar.py``). ``n_trials=0`` shows none in
    either."""
    for kwargs in ({"timeout": 0}, {"timeout": -1}, {"n_trials": -1}, {"n_trials": 0}):
        optuna.create_study().optimize(_quadratic, show_progress_bar=True, **kwargs)
        theirs = capsys.readouterr().err
        fo.optimize(optuna.create_study(), _quadratic, show_progress_bar=True, storage_path=str(tmp_path), **kwargs)
        assert capsys.readouterr().err == theirs, kwargs
        assert ("0%|" in theirs) == ("timeout" in kwargs)
    assert not os.listdir(tmp_path)


def test_optimize_takes_optunas_func_keyword_and_catch_none_as_study_optimize_does(tmp_path):
    """``study.optimize(func=objective, catch=None)`` rewritten as ``optimize(study, func=objective, ...)``: it
    failed with "missing 1 required positional argument: 'objective'", and catch=None was refused (a helper's
    side by side)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    _optimize(study, None, tmp_path, func=_quadratic, n_trials=2, catch=None, n_jobs=1.5, name="func")  # (Optuna
    # runs a float n_jobs too: its thread pool takes it)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2


class _FailsAfterTrialOne(optuna.samplers.RandomSampler):
    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Any) -> None:
        if trial.number == 1:
            raise RuntimeError("after_trial failed")
        super().after_trial(study, trial, state, values)


def test_a_trial_whose_samplers_after_trial_raises_is_logged_as_optuna_logs_it(tmp_path, optuna_records):
    """Optuna stores the trial before the sampler's after_trial, and logs its "finished" line from the stored
    trial all the same; that line was missing here (a helper's side by side). The error then ends the run."""
    study = optuna.create_study(sampler=_FailsAfterTrialOne(seed=0))
    with pytest.raises(RuntimeError, match="after_trial failed"):
        _optimize(study, _quadratic, tmp_path, n_trials=4, max_concurrent_trials=1, name="after_trial")
    assert [t.state for t in study.trials[:2]] == [TrialState.COMPLETE] * 2
    finished = [r.getMessage() for r in optuna_records if " finished with value" in r.getMessage()]
    assert [m.split(" finished")[0] for m in finished][:2] == ["Trial 0", "Trial 1"]

def test_report_in_a_multi_objective_study_is_refused_before_its_arguments_are_checked(tmp_path):
    """Optuna's Trial.report checks the study's objectives first: ``report("abc", 0)`` in a two-objective study
    is NotImplementedError there; it was a TypeError here."""
    def objective(trial: Any) -> tuple[float, float]:
        trial.report("abc", 0)
        return 0.0, 1.0

    study = optuna.create_study(directions=["minimize", "maximize"])
    with pytest.raises(NotImplementedError, match="Trial.report is not supported for multi-objective"):
        _optimize(study, objective, tmp_path, n_trials=1, name="multi")
    assert [t.state for t in study.trials] == [TrialState.FAIL]

def _report_steps(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(3):
        trial.report(x + step, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    trial.report(x + 10, 10)  # no should_prune after it: told with the trial's end
    with pytest.raises(ValueError) as negative:
        trial.report(x, -1)  # Optuna's argument checks stay where the objective called report
    try:  # the installed Optuna's own message for the same call
        optuna.create_study().ask().report(x, -1)
    except ValueError as e:
        assert str(negative.value) == str(e)
    return x


def test_each_report_travels_with_the_next_call(tmp_path, monkeypatch):
    """report + should_prune costs one round trip to the driver; the study still gets every value, in order."""
    calls: list[str] = []
    handle = fo._StudyDriver.handle_call

    def counting(self, trial_id, method, args):
        calls.append(method)
        return handle(self, trial_id, method, args)

    monkeypatch.setattr(fo._StudyDriver, "handle_call", counting)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), pruner=_NeverPrunes())
    _optimize(study, _report_steps, tmp_path, n_trials=2)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    for t in study.trials:
        x = t.params["x"]
        assert t.intermediate_values == {0: x, 1: x + 1, 2: x + 2, 10: x + 10}
    assert calls.count(fo.M_AFTER_REPORTS) == 2 * 4  # three should_prune calls and the end carry the reports


def _count_driver_calls(monkeypatch: Any) -> list[tuple[str, str]]:
    """Record each call a trial makes to the driver: ``(method, inner)``, the inner method of a call that carries
    held reports (``M_AFTER_REPORTS``), else ``""``."""
    import cloudpickle

    calls: list[tuple[str, str]] = []
    handle = fo._StudyDriver.handle_call

    def counting(self, trial_id, method, args):
        inner = cloudpickle.loads(args[0])[1] if method == fo.M_AFTER_REPORTS else ""
        calls.append((method, inner))
        return handle(self, trial_id, method, args)

    monkeypatch.setattr(fo._StudyDriver, "handle_call", counting)
    return calls


def _steps_with_attrs(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("first", [x])
    assert trial.user_attrs["first"] == [x]  # (read from the trial's own copy, as Optuna's cache answers it)
    for step in range(6):
        trial.report(x + step, step)
        trial.set_user_attr(f"at{step}", step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x


def _run_both(study_of: Any, objective: Any, tmp_path: Any, n_trials: int) -> tuple[optuna.Study, optuna.Study]:
    """The same seeded study run by Optuna (one thread) and by fluidsalus (one trial at a time)."""
    ours, theirs = study_of(), study_of()
    theirs.optimize(objective, n_trials=n_trials)
    _optimize(ours, objective, tmp_path, n_trials=n_trials, max_concurrent_trials=1)
    return ours, theirs


def _contents(study: optuna.Study) -> list[tuple[Any, ...]]:
    return [(t.number, t.state, t.values, t.params, t.intermediate_values, t.user_attrs,
             {k: v for k, v in t.system_attrs.items() if k != fo.SYSTEM_ATTR}) for t in study.trials]


@pytest.mark.parametrize("pruner", ["nop", "median_warmup", "percentile_interval"])
def test_pruner_answers_and_user_attributes_that_need_no_driver_cost_no_round_trip(tmp_path, monkeypatch, pruner):
    """``should_prune`` under a NopPruner, or Optuna's MedianPruner/PercentilePruner of an in-memory study (run on
    the device's view of the COMPLETED trials), is answered by the device. Before, each was one round trip (a
    Median/PercentilePruner's past its warm-up); ``set_user_attr`` stays one (so the study shows it at once and a
    refused one raises at the call); the study ends with the same contents as Optuna's own run of the same seeded
    study (one trial at a time: each trial's view holds every COMPLETED trial, as the driver's study does)."""
    calls = _count_driver_calls(monkeypatch)

    def study_of() -> optuna.Study:
        if pruner == "nop":
            chosen: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
        elif pruner == "median_warmup":
            chosen = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=4)
        else:
            chosen = optuna.pruners.PercentilePruner(40.0, n_startup_trials=2, n_warmup_steps=1, interval_steps=2)
        return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3), pruner=chosen)

    ours, theirs = _run_both(study_of, _steps_with_attrs, tmp_path, n_trials=6)
    assert _contents(ours) == _contents(theirs)
    per_method = [m if not inner else inner for m, inner in calls]
    assert per_method.count(fo.M_START) == 6 and per_method.count(fo.M_SUGGEST) == 6
    attrs = sum(len(t.user_attrs) for t in ours.trials)
    assert per_method.count(fo.M_SET_USER_ATTR) == attrs  # one round trip each, as before
    assert per_method.count(fo.M_SHOULD_PRUNE) == 0
    assert len(calls) == 3 * 6 + attrs  # start, suggest, finish, and the attributes


def _converging(trial: Any) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(8):
        trial.report(x + 1.0 / (step + 1), step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x


#: Driver calls of ``should_prune`` a run of the test below may make because its device's view of the study aged
#: past ``fluidsalus.optuna.VIEW_FRESH_S`` between two steps (a pause of a loaded machine), out of its tens of steps.
_STALE_VIEWS_ALLOWED = 3


@pytest.mark.parametrize("percentile", [None, 30.0])
def test_a_median_or_percentile_pruner_prunes_on_the_device_as_optunas_run(tmp_path, monkeypatch, percentile):
    """Past the warm-up, a MedianPruner/PercentilePruner's ``should_prune`` was one round trip each step (about
    3 ms, ten times Optuna's own run of a cheap objective); the device now answers it from its view of the COMPLETED
    trials, and prunes the same trials at the same steps as Optuna's run of the same seeded study."""
    calls = _count_driver_calls(monkeypatch)

    def study_of() -> optuna.Study:
        pruner = (optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=2) if percentile is None else
                  optuna.pruners.PercentilePruner(percentile, n_startup_trials=2, n_warmup_steps=1, interval_steps=2))
        return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7), pruner=pruner)

    ours, theirs = _run_both(study_of, _converging, tmp_path, n_trials=10)
    assert _contents(ours) == _contents(theirs)
    assert sum(t.state == TrialState.PRUNED for t in ours.trials) >= 2
    # A step more than fo.VIEW_FRESH_S (50 ms) after the process's last driver answer asks the driver, whose answer
    # renews the view: a loaded machine's pause made one such call in a run (h254). Every step past the warm-up
    # asked before.
    renewed = [inner or m for m, inner in calls].count(fo.M_SHOULD_PRUNE)
    assert renewed <= _STALE_VIEWS_ALLOWED
    assert len(calls) == 3 * 10 + renewed  # start, suggest and finish of each trial


def _long_and_never_pruned(trial: Any) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(2 * fo.HELD_REPORTS_MAX + 50):
        trial.report(x + step, step)
        assert not trial.should_prune()  # (a NopPruner: the device answers)
    return x


def test_a_trial_that_never_asks_the_driver_sends_its_reports_every_so_many(tmp_path, monkeypatch):
    """Under a NopPruner no step asks the driver, and a trial carried every report in its last call (100,000 steps
    held the driver's loop, and every other device, for 32 s); it now sends them every ``HELD_REPORTS_MAX``, and the
    study gets every value, as Optuna's own run."""
    calls = _count_driver_calls(monkeypatch)

    def study_of() -> optuna.Study:
        return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5), pruner=optuna.pruners.NopPruner())

    ours, theirs = _run_both(study_of, _long_and_never_pruned, tmp_path, n_trials=2)
    assert _contents(ours) == _contents(theirs)
    assert [m for m, _ in calls].count(fo.M_AFTER_REPORTS) >= 2 * 2  # (the flushes, and the finish carrying the rest)
    assert sum(1 for m, inner in calls if inner == fo.M_FLUSH) == 2 * 2


def _refused_attribute_caught(trial: Any) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    try:
        trial.set_user_attr(["unhashable"], 1)  # type: ignore[arg-type]
    except TypeError:
        trial.set_user_attr("refused", True)
    trial.report(x, 0)
    return x


def test_a_user_attribute_the_study_refuses_raises_at_its_call_as_in_optuna(tmp_path):
    """An attribute held for the trial's next call (a first version of fewer round trips) was refused only there:
    the objective's ``except`` around ``set_user_attr`` saw nothing, and the trial FAILed at its end."""
    def study_of() -> optuna.Study:
        return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2), pruner=optuna.pruners.NopPruner())

    ours, theirs = _run_both(study_of, _refused_attribute_caught, tmp_path, n_trials=2)
    assert _contents(ours) == _contents(theirs)
    assert [t.user_attrs for t in ours.trials] == [{"refused": True}] * 2


def _asks_a_multi_objective_pruner(trial: Any) -> tuple[float, float]:
    try:
        trial.should_prune()
    except NotImplementedError as e:
        trial.set_user_attr("refused", str(e))
    return 0.0, 1.0


def test_should_prune_in_a_multi_objective_study_is_refused_on_the_device_as_optuna_refuses_it(tmp_path):
    def study_of() -> optuna.Study:
        return optuna.create_study(directions=["minimize", "maximize"], pruner=optuna.pruners.NopPruner())

    ours, theirs = _run_both(study_of, _asks_a_multi_objective_pruner, tmp_path, n_trials=1)
    assert _contents(ours) == _contents(theirs)
    assert "multi-objective" in ours.trials[0].user_attrs["refused"]


def _sets_an_attribute_json_refuses(trial: Any) -> float:
    trial.report(1.0, 0)
    try:
        trial.set_user_attr("bad", {1, 2})  # pickles, but an RDB storage stores JSON: Optuna raises at the call
    except TypeError as e:
        trial.set_user_attr("refused", type(e).__name__)
    trial.report(2.0, 1)
    trial.should_prune()  # a report is held (its write could fail): asked, carrying it
    trial.should_prune()  # nothing held: NopPruner's answer reads nothing, given on the device
    return 1.0


def test_a_storage_that_can_fail_a_write_still_raises_it_at_the_call(tmp_path, monkeypatch):
    """Only an in-memory study's writes wait for the next call: an RDB storage refuses a user attribute at
    ``set_user_attr``, as in Optuna, and ``should_prune`` (NopPruner) still goes to the driver while a report is
    held there (its write could fail)."""
    calls = _count_driver_calls(monkeypatch)

    def study_of() -> optuna.Study:
        url = f"sqlite:///{tmp_path}/s{len(os.listdir(tmp_path))}.db"
        return optuna.create_study(storage=url, pruner=optuna.pruners.NopPruner())

    ours, theirs = _run_both(study_of, _sets_an_attribute_json_refuses, tmp_path, n_trials=1)
    assert _contents(ours) == _contents(theirs)
    assert ours.trials[0].user_attrs == {"refused": "TypeError"}
    assert calls == [(fo.M_START, ""), (fo.M_AFTER_REPORTS, fo.M_SET_USER_ATTR), (fo.M_SET_USER_ATTR, ""),
                     (fo.M_AFTER_REPORTS, fo.M_SHOULD_PRUNE), (fo.M_FINISH, "")]


def _report_then_unpicklable_call(trial: Any) -> float:
    trial.report(1.5, 0)
    with pytest.raises(TypeError, match=r"arguments of study\(\)"):
        trial.study.set_user_attr("lock", threading.Lock())
    return 1.0


def test_a_call_whose_arguments_do_not_pickle_keeps_the_held_reports(tmp_path):
    """The held report went with the call that failed to pickle (and the error named after_reports()): lost."""
    study = optuna.create_study()
    _optimize(study, _report_then_unpicklable_call, tmp_path, n_trials=1)
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE and trial.intermediate_values == {0: 1.5}


#: How long the objective below waits for the study to show its report (the test fails if it never does).
LIVE_REPORT_WAIT_S = 20.0


def _report_then_wait_for_the_study(trial: Any, flag: str) -> float:
    trial.report(0.5, 0)  # no should_prune: nothing else goes to the driver until the objective returns
    deadline = time.monotonic() + LIVE_REPORT_WAIT_S
    while time.monotonic() < deadline:
        if os.path.exists(flag):
            return 1.0
        time.sleep(0.05)
    return 0.0


def test_a_report_reaches_the_study_while_the_trial_runs(tmp_path):
    """Optuna writes each report at once: a watcher of the study (optuna-dashboard, another process) sees a running
    trial's curve, and a run interrupted before the trial's next call keeps it. The driver tells the study a report
    when it gets the result (the call that carries it then tells nothing twice)."""
    study = optuna.create_study(pruner=optuna.pruners.NopPruner())
    flag = str(tmp_path / "seen")
    seen: list[dict[int, float]] = []

    def watch() -> None:
        while not os.path.exists(flag):
            running = study.get_trials(deepcopy=True, states=(TrialState.RUNNING,))
            if running and running[0].intermediate_values:
                seen.append(dict(running[0].intermediate_values))
                open(flag, "w").close()
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _optimize(study, functools.partial(_report_then_wait_for_the_study, flag=flag), tmp_path, n_trials=1)
    finally:
        open(flag, "a").close()
        watcher.join()
    assert seen and seen[0] == {0: 0.5}
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE and trial.value == 1.0  # the objective saw the watcher see it
    assert trial.intermediate_values == {0: 0.5}  # told once


def _warned_in_the_objective(trial: Any) -> float:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = trial.suggest_float("x", 0.0, 1.0)  # enqueued out of its range: Optuna warns
        trial.report(x, 0)
    with warnings.catch_warnings(record=True) as again:  # around the call alone (a helper's: it came one call later)
        warnings.simplefilter("always")
        trial.report(x + 1, 0)  # the same step again: Optuna warns and ignores the value
    trial.should_prune()
    trial.set_user_attr("warned", [f"{w.category.__name__}: {w.message}" for w in caught + again])
    return x


def test_the_studys_warnings_reach_the_objective_as_in_optuna(tmp_path):
    """A warning the study gives while it answers the objective's call (a step reported twice, an enqueued value out
    of its range) is given in the objective, where warnings.catch_warnings or pytest.warns around the call sees
    it, as under study.optimize; before, it was given on the driver only."""
    studies = []
    for use_fluidsalus in (False, True):
        study = optuna.create_study()
        study.enqueue_trial({"x": 5.0})
        if use_fluidsalus:
            _optimize(study, _warned_in_the_objective, tmp_path, n_trials=1)
        else:
            study.optimize(_warned_in_the_objective, n_trials=1)
        studies.append(study)
    expected, got = (s.trials[0].user_attrs["warned"] for s in studies)
    assert any("out of range" in w for w in expected) and any("already reported" in w for w in expected)
    assert sorted(got) == sorted(expected)
    assert studies[1].trials[0].intermediate_values == {0: 5.0}


class _LoopWarning(UserWarning):
    """A warning of Optuna's loop's own work: a sampler's before_trial or after_trial, a callback."""


class _WarningSampler(optuna.samplers.RandomSampler):
    """Warns in ``before_trial`` (the study's ``ask``) and ``after_trial`` (its ``tell``)."""

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        warnings.warn(f"before_trial {trial.number}", _LoopWarning, stacklevel=2)
        super().before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Any) -> None:
        warnings.warn(f"after_trial {trial.number}", _LoopWarning, stacklevel=2)
        super().after_trial(study, trial, state, values)


def _warning_callback(study: optuna.Study, trial: FrozenTrial) -> None:
    warnings.warn(f"callback {trial.number}", _LoopWarning, stacklevel=2)


def test_the_warnings_of_the_studys_ask_tell_and_callbacks_are_given_in_optimizes_caller_as_in_optuna(tmp_path):
    """What Optuna's loop does itself, outside the objective (the study's ``ask`` and ``tell``, so a sampler's
    ``before_trial`` and ``after_trial``, and the callbacks), warns in ``optimize``'s caller, where a
    ``catch_warnings`` around the call sees it. Those warnings went with the answer to the trial's start or end,
    to its device, and were given there, inside the trial, as the objective's; the caller saw none."""
    seen = []
    for use_fluidsalus in (False, True):
        study = optuna.create_study(sampler=_WarningSampler(seed=0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if use_fluidsalus:
                _optimize(study, _quadratic, tmp_path, n_trials=2, callbacks=[_warning_callback])
            else:
                study.optimize(_quadratic, n_trials=2, callbacks=[_warning_callback])
        seen.append(sorted(str(w.message) for w in caught if w.category is _LoopWarning))
    assert seen[0] == sorted(f"{what} {n}" for what in ("before_trial", "after_trial", "callback") for n in (0, 1))
    assert seen[1] == seen[0]


def _unfit_choices_twice(trial: Any) -> float:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trial.suggest_categorical("c", [{"a": 1}])  # Optuna warns: such choices do not suit persistent storage
        trial.suggest_categorical("c", [{"a": 1}])  # again (fluidsalus answers it on the device)
    trial.set_user_attr("warned", [str(w.message)[:40] for w in caught])
    return 1.0


@pytest.mark.parametrize("call", [lambda t: t.suggest_uniform("u", 0, 1), lambda t: t.suggest_loguniform("l", 1, 2),
                                  lambda t: t.suggest_discrete_uniform("d", 0, 1, 0.5)])
def test_the_deprecated_suggestions_warn_in_optunas_words(call):
    trial = fo.DeviceTrial.__new__(fo.DeviceTrial)
    trial._distributions, trial._params = {}, {}  # answered here: no driver
    trial._suggest = lambda name, distribution: 0.5
    theirs = optuna.trial.FixedTrial({"u": 0.5, "l": 1.5, "d": 0.5})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(trial)
        call(theirs)
    assert [w.category for w in caught] == [FutureWarning, FutureWarning]
    assert str(caught[0].message) == str(caught[1].message)


def test_a_categorical_warning_is_given_once_per_call_as_in_optuna(tmp_path):
    """The device gave Optuna's warning about choices unfit for storage, and the driver's suggestion gave it again,
    relayed: twice per call (a helper's side by side)."""
    ours, theirs = optuna.create_study(), optuna.create_study()
    theirs.optimize(_unfit_choices_twice, n_trials=1)
    _optimize(ours, _unfit_choices_twice, tmp_path, n_trials=1)
    assert ours.trials[0].user_attrs["warned"] == theirs.trials[0].user_attrs["warned"]
    assert len(theirs.trials[0].user_attrs["warned"]) == 2


def _cached_categorical_without_catch_warnings(trial: Any) -> float:
    trial.suggest_categorical("c", ["a", "b"])
    real = warnings.catch_warnings

    def swaps_the_process_state(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("catch_warnings on the device")

    warnings.catch_warnings = swaps_the_process_state  # type: ignore[assignment,misc]
    try:
        trial.suggest_categorical("c", ["a", "b"])  # (answered on the device: the name was suggested)
    finally:
        warnings.catch_warnings = real  # type: ignore[misc]
    return 0.0


def test_a_categorical_answered_on_the_device_leaves_the_warning_state_alone(tmp_path):
    """Each ``suggest_categorical`` on the device ran under ``warnings.catch_warnings(record=True)``, which swaps the
    process's warning state and is not thread-safe: racing another trial of the device process (``cpus_per_trial``
    below 1) or a library's thread, it left a dead list installed, and every later warning of that process was lost
    (h170's 1). Plain choices (those Optuna warns nothing of) do without it."""
    study = optuna.create_study()
    _optimize(study, _cached_categorical_without_catch_warnings, tmp_path, n_trials=1)
    assert study.trials[0].state == TrialState.COMPLETE, study.trials[0]


def _object_categorical_without_catch_warnings(trial: Any) -> float:
    real = warnings.catch_warnings

    def swaps_the_process_state(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("catch_warnings on the device")

    warnings.catch_warnings = swaps_the_process_state  # type: ignore[assignment,misc]
    try:
        for _ in range(2):  # asked of the driver, then answered on the device (the name was suggested)
            trial.suggest_categorical("c", [{"a": 1}, {"b": 2}])
    finally:
        warnings.catch_warnings = real  # type: ignore[misc]
    return 0.0


def test_a_categorical_of_objects_leaves_the_warning_state_alone(tmp_path):
    """Choices that are objects (Optuna warns they do not suit persistent storage) still ran under
    ``warnings.catch_warnings`` on the device, which is not thread-safe (h170's 1, the plain choices' fix of
    89928b1): they do without it, and Optuna's warning is still given once per call
    (:func:`test_a_categorical_warning_is_given_once_per_call_as_in_optuna`)."""
    study = optuna.create_study()
    _optimize(study, _object_categorical_without_catch_warnings, tmp_path, n_trials=1)
    assert study.trials[0].state == TrialState.COMPLETE, study.trials[0]
    assert study.trials[0].params["c"] in ({"a": 1}, {"b": 2})


def test_the_stale_trial_check_of_a_heartbeat_storage_leaves_the_warning_state_alone(tmp_path, monkeypatch):
    """Each trial's start on a heartbeat storage ran Optuna's stale-trial check under ``warnings.catch_warnings``
    (to ignore its ExperimentalWarning, as Optuna's ``_run_trial``), which swaps the process's warning state beside
    the call threads' sampler calls: one ignore filter is put first and that same one taken out. The stale trial is
    still failed and the storage's retry callback run, and no ExperimentalWarning reaches the trial: neither the
    check's nor one of the storage's callback (h187's f8_stale.py: calling the check undecorated let the callback's
    warning through, and under an "error" filter the retry was lost, where Optuna ignores it)."""
    import sqlite3

    path = tmp_path / "heartbeat.db"
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback()

    def experimental_callback(study: optuna.Study, trial: FrozenTrial) -> None:
        optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(trial)  # (experimental: it warns)
        retry(study, trial)

    storage = optuna.storages.RDBStorage(f"sqlite:///{path}", heartbeat_interval=60, grace_period=60,
                                         heartbeat_stale_trial_callback=experimental_callback)
    study = optuna.create_study(storage=storage)
    stale = study.ask()
    storage.record_heartbeat(stale._trial_id)
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # (its last beat an hour ago)
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 hour')")
    driver = fo._StudyDriver(study, None, None, [], "unit")
    study._thread_local.in_optimize_loop = True  # (as optimize sets it: ask() gives no "used with optimize" warning)

    def swaps_the_process_state(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("catch_warnings on the driver")

    with driver.warnings, driver.warnings.recording() as caught:
        monkeypatch.setattr(warnings, "catch_warnings", swaps_the_process_state)
        monkeypatch.setattr(warnings, "filters", [("error", None, optuna.exceptions.ExperimentalWarning, None, 0),
                                                  *warnings.filters])
        started = driver._on_start("unit-0")
        filters = list(warnings.filters)
        monkeypatch.undo()
    assert filters[0] == ("error", None, optuna.exceptions.ExperimentalWarning, None, 0)  # (taken out again)
    try:
        assert driver.error is None and started is not None
        assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.RUNNING]
        assert started.number == 1 and study.trials[1].system_attrs["failed_trial"] == 0  # (the retry)
        assert not [w for w in caught if issubclass(w.category, optuna.exceptions.ExperimentalWarning)]
    finally:
        study._thread_local.in_optimize_loop = False
        driver.close()
        storage.remove_session()


def _upload_model(trial: Any, base: str) -> float:
    x = trial.suggest_float("x", 0, 1)
    path = os.path.join(base, f"model_{trial.number}.txt")  # the device writes the trial's file
    with open(path, "w") as f:
        f.write(f"x={x}")
    store = optuna.artifacts.FileSystemArtifactStore(os.path.join(base, "artifacts"))
    optuna.artifacts.upload_artifact(artifact_store=store, file_path=path, study_or_trial=trial)
    trial.set_user_attr("seen", [m.artifact_id for m in optuna.artifacts.get_all_artifact_meta(trial)])
    try:
        trial.storage.set_trial_system_attr(trial._trial_id + 1000, "key", 1)
    except ValueError as e:
        trial.set_user_attr("refused", str(e))
    try:
        trial.storage.get_trial(trial._trial_id)
    except AttributeError as e:
        trial.set_user_attr("missing", str(e))
    return x


def test_an_objective_uploads_artifacts_to_its_own_trial_as_under_optuna(tmp_path):
    base = tmp_path / "shared"
    (base / "artifacts").mkdir(parents=True)
    study = optuna.create_study()
    _optimize(study, functools.partial(_upload_model, base=str(base)), tmp_path, n_trials=3)
    store = optuna.artifacts.FileSystemArtifactStore(str(base / "artifacts"))
    assert len(study.trials) == 3
    for trial in study.trials:
        assert trial.state == TrialState.COMPLETE
        metas = optuna.artifacts.get_all_artifact_meta(trial, storage=study._storage)
        assert [m.filename for m in metas] == [f"model_{trial.number}.txt"]
        assert trial.user_attrs["seen"] == [metas[0].artifact_id]  # the objective read it back
        copy = tmp_path / f"copy_{trial.number}.txt"
        optuna.artifacts.download_artifact(artifact_store=store, file_path=str(copy), artifact_id=metas[0].artifact_id)
        assert copy.read_text() == f"x={trial.params['x']}"
        assert trial.user_attrs["refused"] == (f"storage.set_trial_system_attr: a trial running on a device may use "
                                               f"only its own trial id ({trial._trial_id}), not "
                                               f"{trial._trial_id + 1000}")
        assert trial.user_attrs["missing"].startswith("storage.get_trial is not available inside a trial")


class _JointSampler(optuna.samplers.BaseSampler):
    """Draws ``x`` and ``y`` together (``sample_relative``) as ``(number, -number)``; anything else at random."""

    def __init__(self) -> None:
        self._independent = optuna.samplers.RandomSampler(seed=0)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        return {"x": optuna.distributions.FloatDistribution(-100, 100),
                "y": optuna.distributions.FloatDistribution(-100, 100)}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]) -> dict[str, Any]:
        return {"x": float(trial.number), "y": -float(trial.number)}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, name: str, distribution: Any) -> Any:
        return self._independent.sample_independent(study, trial, name, distribution)


def _joint(trial: Any) -> float:
    trial.set_user_attr("relative_before", dict(trial.relative_params))
    x = trial.suggest_float("x", -100, 100)
    y = trial.suggest_float("y", -100, 100)
    z = trial.suggest_float("z", 0, 1)
    trial.set_user_attr("relative_after", trial.relative_params)
    return x + y + z


def test_relative_params_are_the_samplers_joint_draw_and_the_suggestions_use_it(tmp_path):
    study = optuna.create_study(sampler=_JointSampler())
    _optimize(study, _joint, tmp_path, n_trials=4)
    assert len(study.trials) == 4
    for t in study.trials:
        joint = {"x": float(t.number), "y": -float(t.number)}
        assert t.state == TrialState.COMPLETE
        assert t.user_attrs["relative_before"] == t.user_attrs["relative_after"] == joint
        assert {k: t.params[k] for k in ("x", "y")} == joint  # suggest_float took the joint draw, as in Optuna
        assert 0 <= t.params["z"] <= 1


def test_a_device_trial_has_every_public_name_of_optunas_trial():
    public = {name for name in dir(optuna.trial.Trial) if not name.startswith("_")}
    assert public <= set(dir(fo.DeviceTrial)), sorted(public - set(dir(fo.DeviceTrial)))


def _reports_from_a_thread(trial: Any) -> float:
    """Optuna lets any thread report: a worker reports five steps and ends; then the objective asks the pruner."""
    import threading

    x = trial.suggest_float("x", 0, 1)
    worker = threading.Thread(target=lambda: [trial.report(x + step, step) for step in range(5)])
    worker.start()
    worker.join()
    trial.set_user_attr("pruned", trial.should_prune())
    return x


def test_values_a_thread_of_the_objective_reports_reach_the_study(tmp_path):
    """Reports were held per thread until that thread's next driver call: a worker's, which ended without one,
    never reached the study (no intermediate values, and the pruner judged on none)."""
    study = optuna.create_study()
    _optimize(study, _reports_from_a_thread, tmp_path, n_trials=2)
    for trial in study.trials:
        x = trial.params["x"]
        assert trial.intermediate_values == {step: pytest.approx(x + step) for step in range(5)}
        assert trial.state == TrialState.COMPLETE and trial.user_attrs["pruned"] is False


class _Leave(BaseException):
    """A BaseException of the user's own (not an Exception), as SystemExit or KeyboardInterrupt are."""


def _leaves(trial: Any) -> float:
    x = trial.suggest_float("x", 0, 1)
    if trial.number == 1:
        raise _Leave("leave now")
    return x


def test_an_objectives_base_exception_fails_its_trial_and_is_raised_as_itself(tmp_path):
    """As Optuna does with a KeyboardInterrupt the objective raises: the trial is FAIL and optimize raises that
    exception (before, a TrialError "errored on its device before its objective returned")."""
    study = optuna.create_study()
    with pytest.raises(_Leave, match="leave now"):
        _optimize(study, _leaves, tmp_path, n_trials=3, max_concurrent_trials=1)
    states = {t.number: t.state for t in study.trials}
    assert states[1] == TrialState.FAIL and states[0] == TrialState.COMPLETE


def _objects_as_choices() -> tuple[Any, type]:
    """An objective whose categorical choices are an enum, classes and functions of its own: made here, in a
    function, so that pickles carry them by value, as they do a script's (``__main__``) objects."""
    import enum

    class Optim(enum.Enum):
        ADAM = "adam"
        SGD = "sgd"

    class Small:
        pass

    class Large:
        pass

    def mse(a: float, b: float) -> float:
        return (a - b) ** 2

    def mae(a: float, b: float) -> float:
        return abs(a - b)

    losses = [mse, mae, lambda a, b: 0.0]
    models = [Small(), Large()]  # instances without __eq__: equal only to themselves

    def objective(trial: Any) -> float:
        optim = trial.suggest_categorical("optim", [Optim.ADAM, Optim.SGD])
        net = trial.suggest_categorical("net", [Small, Large])
        loss = trial.suggest_categorical("loss", losses)
        again = trial.suggest_categorical("loss", losses)  # the same name again: the same answer, as in Optuna
        model = trial.suggest_categorical("model", models)
        trial.suggest_categorical("model", models)
        trial.set_user_attr("own_objects", optim in Optim and net in (Small, Large)
                            and any(loss is f for f in losses) and loss is again
                            and any(model is m for m in models))
        return loss(1.0, 3.0) + (optim is Optim.SGD)

    return objective, Optim


def test_categorical_choices_may_be_objects_of_the_script_as_in_optuna(tmp_path):
    """Each trial's choices came to the driver as copies: the study then refused a script's functions and classes
    ("CategoricalDistribution does not support dynamic value space") and the objective got copies, not its own
    objects. Now they are matched to the study's first choices, and the objective gets its own object back."""
    objective, optim = _objects_as_choices()
    study = optuna.create_study()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Optuna's: such choices do not suit persistent storage
        _optimize(study, objective, tmp_path, n_trials=6)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 6
    assert all(t.user_attrs["own_objects"] for t in study.trials)
    assert all(t.params["optim"] in (optim.ADAM, optim.SGD) for t in study.trials)  # the driver's own enum


def test_an_objective_that_uses_the_scripts_study_reaches_the_study_itself(tmp_path):
    """An objective that reads or changes the study it was written next to (``study``, not ``trial.study``) got a
    pickled copy of it: an in-memory study read as it was at the start, its writes were lost, and ``stop()``
    raised Optuna's "supposed to be invoked inside an objective function or a callback". The copy is now the
    study as ``trial.study`` sees it, which asks the real one."""
    study = optuna.create_study()

    def objective(trial: Any) -> float:
        seen = len(study.trials)  # the study of the script, captured by the closure
        study.set_user_attr(f"seen_{trial.number}", seen)
        if trial.number == 2:
            study.stop()
        return trial.suggest_float("x", 0, 1)

    _optimize(study, objective, tmp_path, n_trials=6, max_concurrent_trials=1)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    assert study.user_attrs == {"seen_0": 1, "seen_1": 2, "seen_2": 3}


def _ends_its_process(trial: Any) -> float:
    x = trial.suggest_float("x", 0, 1)
    if trial.number == 1:
        os._exit(3)  # as a crash in native code or the out-of-memory killer would
    return x


def test_a_trial_whose_device_died_fails_with_the_reason_in_its_error(tmp_path):
    """The TrialError of a trial that failed on its device (here its process died, every time) said only "see the
    experiment store (fluidsalus inspect) for why"; it now carries the engine's reason, as `fluidsalus inspect`
    shows it, and so does the study's trial."""
    study = optuna.create_study()
    with pytest.raises(TrialError) as caught:
        _optimize(study, _ends_its_process, tmp_path, n_trials=3, max_concurrent_trials=1)
    message = str(caught.value)
    assert message.startswith("Trial 1 (fluidsalus trial ") and "errored on its device" in message
    assert "Its device process died 2 times while it ran" in message
    states = {t.number: t.state for t in study.trials}
    assert states[1] == TrialState.FAIL and states[0] == TrialState.COMPLETE


def test_optimize_again_with_a_fixed_name_records_a_new_experiment(tmp_path):
    """Optuna continues a study optimised again; the second call with the same ``name=`` was refused as a taken
    experiment name, with advice (``resume=True``) that optimize cannot take (h99's F2)."""
    study = optuna.create_study()
    _optimize(study, _quadratic, tmp_path, n_trials=2, name="fixed")
    with pytest.warns(UserWarning, match="'fixed' already exists .* recorded as 'fixed_2'"):
        _optimize(study, _quadratic, tmp_path, n_trials=2, name="fixed")
    assert len(study.trials) == 4 and all(t.state == TrialState.COMPLETE for t in study.trials)
    assert sorted(os.listdir(tmp_path / "fluidsalus")) == ["fixed", "fixed_2"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty name is the default one, as before (it was "'' already exists")
        _optimize(study, _quadratic, tmp_path, n_trials=1, name="")
    assert len(os.listdir(tmp_path / "fluidsalus")) == 3


def test_a_failing_record_of_an_interrupted_study_does_not_hide_the_interrupt(tmp_path, monkeypatch):
    """Recording the study in the experiment of an optimize cut short must not replace its exception (h106)."""
    def interrupt(study: optuna.Study, trial: FrozenTrial) -> None:
        raise KeyboardInterrupt

    def broken_record(*args: Any) -> None:
        raise RuntimeError("the record failed")

    monkeypatch.setattr(fo, "_record_the_study", broken_record)
    study = optuna.create_study()
    with pytest.raises(KeyboardInterrupt):
        _optimize(study, _quadratic, tmp_path, n_trials=4, callbacks=[interrupt])


def test_an_interrupted_optimize_with_a_pathlib_storage_path_records_the_study(tmp_path):
    """With storage_path a pathlib.Path (taken since e4e08d5), an interrupted optimize recorded nothing of the
    study: metric None and every config {} (h108's F4)."""
    def interrupt(study: optuna.Study, trial: FrozenTrial) -> None:
        raise KeyboardInterrupt

    study = optuna.create_study()
    with pytest.raises(KeyboardInterrupt):
        fo.optimize(study, _quadratic, n_trials=4, callbacks=[interrupt], storage_path=tmp_path / "fluidsalus")
    [folder] = os.listdir(tmp_path / "fluidsalus")
    store = ExperimentStore.open(tmp_path / "fluidsalus" / folder, readonly=True)
    try:
        assert store.experiment()["metric"] == fo.KEY_VALUE
    finally:
        store.close()


def test_the_study_driver_proposes_no_new_trial_once_n_trials_are_proposed():
    """``proposes_new`` (the executor holds pauses and verdict waits only once it is False:
    ``Executor._tell_hold_pauses``) counts a proposed trial that has not started its objective yet, as
    ``next_groups`` does: a prefetched trial starts its Optuna trial only at its first turn, so counting only the
    started ones (``is_finished``) turned the hold on too late for the trial it was for (h176)."""
    driver = fo._StudyDriver(optuna.create_study(), 2, None, [], "unit")
    for trial_id in ("t0", "t1"):
        assert driver.proposes_new()
        [group] = driver.next_groups()
        driver.on_trial_add(trial_id, group.group_id, {})
        if trial_id == "t0":
            ok, _ = driver.handle_call("t0", fo.M_START, (fo.cloudpickle.dumps(()),))
            assert ok
    assert not driver.proposes_new() and not driver.is_finished()  # t1 waits to start: no third trial comes
    assert driver.next_groups() == []
    assert fo._StudyDriver(optuna.create_study(), None, None, [], "unit").proposes_new()  # no n_trials: endless


def test_should_prune_asks_the_driver_as_a_verdict_and_other_calls_do_not(monkeypatch):
    """An Optuna ``should_prune`` is the verdict on the step just reported (``call_driver(verdict=True)``): while
    the driver holds pauses, a prefetched trial of its lane waits through it (``DeviceHost.hold_pauses``); a
    ``suggest`` is no verdict."""
    calls: list[tuple[str, bool]] = []

    def call_driver(method: str, *args: Any, label: str | None = None, verdict: bool = False) -> Any:
        calls.append((label or method, verdict))
        return True, fo.cloudpickle.dumps((False, [], None))

    monkeypatch.setattr(fo.session, "call_driver", call_driver)
    assert fo._call(fo.M_SHOULD_PRUNE) is False
    fo._call(fo.M_SUGGEST, "x")
    assert calls == [(fo.M_SHOULD_PRUNE, True), (fo.M_SUGGEST, False)]


def test_in_the_runs_tail_a_prefetched_trial_waits_through_its_neighbours_should_prune_and_moves(tmp_path):
    """h173's 2, through this front end: 3 trials of 40, 6 and 40 steps on 2 devices, the third prefetched
    behind the first (nothing else can come), a pruner asking the driver at each step. Once the short trial ends,
    the prefetched one, which has not begun (it waited through its neighbour's ``should_prune`` calls), moves to the
    freed device (``plan_withdraw``); before, it began at its neighbour's first ``should_prune``, could not move
    without a checkpoint (``plan_refused``) and the two time-sliced one device to their ends while the other idled
    (4.1 s against 2.4 s)."""
    steps = [40, 6, 40]

    def objective(trial: Any) -> float:
        i = trial.number
        for step in range(steps[i]):
            time.sleep(0.02)
            trial.report(1.0 / (1 + step) + 0.01 * [0, 2, -1][i], step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return 1.0 / (1 + steps[i])

    study = optuna.create_study(pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=5))
    _optimize(study, objective, tmp_path, n_trials=3, name="tail")
    assert began_on_the_freed_device(str(tmp_path / "fluidsalus" / "tail"))


def _slow_and_bad_or_fast_and_good(trial: Any) -> float:
    slow = trial.number == 0
    for step in range(4 * fo.HELD_REPORTS_MAX):
        if slow:
            time.sleep(0.005)
        trial.report(100.0 if slow else 1.0, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return 1.0


def test_a_running_trial_hears_of_completions_beside_it(tmp_path):
    """The device's MedianPruner judges against the COMPLETED trials its process heard of at most
    ``VIEW_FRESH_S`` ago: trial 0 (slow, bad) started with none; the fast, good trials completing beside it reach
    its view with a driver answer, and it is pruned before its end, where it kept running to its end when it never
    heard of them (``tests/test_optuna_device_pruner.py`` checks the view's age deterministically)."""
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    _optimize(study, _slow_and_bad_or_fast_and_good, tmp_path, n_trials=3, devices=2)
    first = study.trials[0]
    assert first.state == TrialState.PRUNED
    assert first.last_step is not None and first.last_step < 4 * fo.HELD_REPORTS_MAX - 1
    assert [t.state for t in study.trials[1:]] == [TrialState.COMPLETE] * 2


def _records_optunas_log_settings(trial: Any) -> float:
    root = logging.getLogger("optuna")
    handler = optuna.logging._default_handler
    trial.set_user_attr("log", [optuna.logging.get_verbosity(), handler is not None and handler in root.handlers,
                                root.propagate])
    return 0.0


@pytest.fixture
def optunas_log_settings_put_back() -> Iterator[None]:
    """The driver's Optuna logging settings as they were after the test (Optuna's defaults, as a fresh script's)."""
    verbosity, propagate = optuna.logging.get_verbosity(), logging.getLogger("optuna").propagate
    yield
    optuna.logging.set_verbosity(verbosity)
    optuna.logging.enable_default_handler()
    (optuna.logging.enable_propagation if propagate else optuna.logging.disable_propagation)()


@pytest.mark.usefixtures("optunas_log_settings_put_back")
def test_the_objective_logs_under_the_scripts_optuna_logging_settings_as_in_optuna(tmp_path):
    """Under ``study.optimize`` the script's ``optuna.logging`` settings apply to what the objective logs through
    Optuna's logger. A device kept Optuna's defaults (``INFO``, its handler on, no propagation), so after
    ``set_verbosity(WARNING)`` an objective's ``INFO`` lines were printed (h205's F3; h212's ``opt_logging.py``).
    Each trial now takes the driver's settings as it starts: a change a callback makes reaches the next trial."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()

    def back_to_the_defaults(study: optuna.Study, trial: FrozenTrial) -> None:
        optuna.logging.set_verbosity(optuna.logging.INFO)
        optuna.logging.enable_default_handler()
        optuna.logging.disable_propagation()

    study = optuna.create_study()
    _optimize(study, _records_optunas_log_settings, tmp_path, n_trials=2, callbacks=[back_to_the_defaults],
              max_concurrent_trials=1)
    assert [t.user_attrs["log"] for t in study.trials] == [[logging.WARNING, False, True],
                                                           [logging.INFO, True, False]]


@pytest.mark.usefixtures("optunas_log_settings_put_back")
def test_a_verbosity_the_objective_sets_holds_for_the_later_trials_of_its_process(monkeypatch) -> None:
    """Under ``study.optimize`` a ``set_verbosity`` the objective calls holds for every later trial. Each trial's
    start put the driver's settings back on its device process, so it held until the next trial there (a review of
    h212); the driver's settings are taken again only when they change."""
    monkeypatch.setattr(fo, "_taken_log_settings", [None])
    script = fo._LogSettings(verbosity=logging.INFO, default_handler=True, propagate=False)
    fo._take_optuna_log_settings(script)  # a trial starts
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # its objective silences Optuna
    fo._take_optuna_log_settings(script)  # the next trial of the process starts: the script's have not changed
    assert optuna.logging.get_verbosity() == logging.ERROR
    fo._take_optuna_log_settings(fo._LogSettings(verbosity=logging.WARNING, default_handler=True, propagate=False))
    assert optuna.logging.get_verbosity() == logging.WARNING  # the script's changed (a callback's call): taken


#: Seconds the processes of an ended driver's own Ray (its device actors among them) may take to end.
_ENDED_DRIVERS_RAY_S = 30.0


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


#: The drivers of the test below: each lets fluidsalus start its Ray and marks ``started`` once its trial runs.
_SIGNALLED_DRIVERS = {
    "optuna": """
        import atexit, time, optuna
        import fluidsalus.optuna as fo
        from fluidsalus.api import init_ray

        kept = open({kept!r}, "w")
        kept.write("written, never flushed")  # (the interpreter's end flushes it, as Python's does)
        init_ray()  # (fluidsalus starts Ray, as optimize would: the handler below comes after its exit handler)
        atexit.register(print, "exit handler")

        def objective(trial):
            x = trial.suggest_float("x", 0, 1)
            open({started!r}, "w").close()
            time.sleep(60)
            return x

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        fo.optimize(optuna.create_study(), objective, n_trials=1, storage_path={storage!r}, name="signalled",
                    verbose=0)
        """,
    "tune": """
        import time
        from fluidsalus import tune

        def train(config):
            open({started!r}, "w").close()
            time.sleep(60)
            tune.report({{"x": 1}})

        tune.Tuner(train, run_config=tune.RunConfig(storage_path={storage!r}, name="signalled", verbose=0)).fit()
        """,
}


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the device processes' state from /proc")
# (The Tune front end's driver, in _SIGNALLED_DRIVERS too, starts Ray through the same api.init_ray: it ends the
# same way, h234; its case costs the suite 10 s more, so it is not run by default.)
@pytest.mark.parametrize("front_end, signum", [
    ("optuna", signal.SIGINT), ("optuna", signal.SIGTERM),
    pytest.param("tune", signal.SIGINT, marks=[pytest.mark.slow, pytest.mark.skipif(
        not os.environ.get("FLUIDSALUS_RUN_SLOW"), reason="set FLUIDSALUS_RUN_SLOW=1")])],
    ids=["optuna-ctrl_c", "optuna-sigterm", "tune-ctrl_c"])
def test_a_driver_whose_ray_fluidsalus_started_ends_on_a_signal_as_python_does(ray_cluster, tmp_path, front_end,
                                                                             signum):
    """A script of ``fluidsalus.optuna.optimize`` that lets fluidsalus start its Ray ends as the same script of
    ``study.optimize`` does: a Ctrl-C propagates and the process ends by SIGINT (exit status 130), SIGTERM ends it
    at once by SIGTERM (143), Python's default. With Ray started, a Ctrl-C ended it with status 1 (Ray's exit
    handler) and a SIGTERM with 134 (Ray's crash handler aborted it) or 15 (Ray's ``sys.exit`` handler); so did a
    Ctrl-C that ``Tuner.fit`` raises (here under ``TUNE_DISABLE_SIGINT_HANDLER=1``; Ray Tune's ends with 1). A
    Ctrl-C still leaves the experiment ``INTERRUPTED`` (a SIGTERM ``RUNNING``, as a killed driver's, which a resume
    continues), and no device process of it runs on. After the Ctrl-C every exit handler runs once and the files
    the script left open are flushed, as Python's end does."""
    storage, started = str(tmp_path / "fluidsalus"), tmp_path / "started"
    kept = tmp_path / "kept.txt"
    script = textwrap.dedent(_SIGNALLED_DRIVERS[front_end].format(started=str(started), storage=storage,
                                                                  kept=str(kept)))
    # (fluidsalus connects the driver to the suite's Ray, through RAY_ADDRESS as to a cluster of `ray start`: Ray's
    # handlers are the same as for a Ray it starts, and the test saves the seconds of a Ray start)
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address,
           "TUNE_DISABLE_SIGINT_HANDLER": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        deadline = time.time() + 120
        while not started.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert started.exists(), proc.communicate(timeout=60)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signum, stderr[-4000:]
    if front_end == "optuna" and signum == signal.SIGINT:
        # As Python ends it: each exit handler once, then the interpreter's end, which flushes the open files
        # (the process killed itself once it ran the handlers itself: one registered after Ray's start ran twice,
        # and the file was empty, h239)
        assert stdout.count("exit handler") == 1, stdout
        assert kept.read_text() == "written, never flushed"
    store = ExperimentStore.open(os.path.join(storage, "signalled"), readonly=True)
    try:
        status = store.experiment()["status"]
        devices = [event.data["pid"] for event in store.events("device_start")]
    finally:
        store.close()
    assert status == ("INTERRUPTED" if signum == signal.SIGINT else "RUNNING")
    deadline = time.time() + _ENDED_DRIVERS_RAY_S
    while any(_alive(pid) for pid in devices) and time.time() < deadline:
        time.sleep(0.2)
    assert devices and not any(_alive(pid) for pid in devices)


def test_fluidsalus_puts_back_the_sigterm_handler_its_ray_start_replaced_and_registers_its_exit_handler_once(
        monkeypatch):
    """Without Ray: :func:`fluidsalus._exits.ray_started` around a start that sets a SIGTERM handler (as
    ``ray.init`` does) puts the one before back, and registers the exit handler once; the exit handler acts only on
    an uncaught ``KeyboardInterrupt`` outside an interactive session."""
    from fluidsalus import _exits

    registered: list[Any] = []
    monkeypatch.setattr(_exits.atexit, "register", registered.append)
    monkeypatch.setattr(_exits, "_registered", False)
    before = signal.getsignal(signal.SIGTERM)
    for _ in range(2):
        with _exits.ray_started():
            signal.signal(signal.SIGTERM, lambda signum, frame: None)  # (ray.init's)
        assert signal.getsignal(signal.SIGTERM) is before
    assert registered == [_exits.exit_as_interrupted]
    monkeypatch.delattr(sys, "last_exc", raising=False)
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # (an interactive session's: imported by a test)
    monkeypatch.setattr(sys, "last_value", KeyboardInterrupt(), raising=False)
    assert _exits.uncaught_keyboard_interrupt()
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert not _exits.uncaught_keyboard_interrupt()
    monkeypatch.delattr(sys, "ps1")
    # IPython imported by a script (IPython.display, a library's import) is no IPython shell: it was taken for one
    shell: list[Any] = []
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell[0] if shell else None))
    assert _exits.uncaught_keyboard_interrupt()
    shell.append(object())  # (a terminal's or a Jupyter kernel's shell)
    assert not _exits.uncaught_keyboard_interrupt()
    monkeypatch.delitem(sys.modules, "IPython")
    monkeypatch.setattr(sys, "last_value", ValueError(), raising=False)
    assert not _exits.uncaught_keyboard_interrupt()
    _exits.exit_as_interrupted()  # (nothing to do: the process goes on)
