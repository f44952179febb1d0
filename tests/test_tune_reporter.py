"""Progress reporters (``fluidsalus/tune/progress_reporter.py``): Ray's CLIReporter, JupyterNotebookReporter and
ProgressReporter.

- The status text on hand-made trials (no Ray): counts, columns given, inferred and differing, row limits, the
  sort by metric, the best trial, the error table; column additions and metric/mode conflicts.
- RunConfig's handling: Ray's own reporter translated with its settings, a custom reporter kept, anything else
  refused.
- Real runs on the shared 2-CPU Ray: a CLIReporter prints tables of the trials and a last one at the end; a
  custom ProgressReporter is asked and called with the trials; nothing is reported with ``verbose=0``.
"""

from __future__ import annotations

import os
import platform
import re
import time
from typing import Any

import pytest
from _trials import LazyRayTune

from fluidsalus.errors import ConfigError
from fluidsalus.tune.callback import TrialInfo
from fluidsalus.tune.progress_reporter import CLIReporter, ProgressReporter, adopt_reporter

rt = LazyRayTune()  # imported at its first use, not by device processes
from fluidsalus import tune  # noqa: E402


def _trial(index: int, status: str, lr: float, loss: float | None, **extra: Any) -> TrialInfo:
    result = None if loss is None else {"loss": loss, "acc": 1 - loss, "training_iteration": index + 1,
                                        "time_total_s": 1.5, "trial_id": f"t{index}", **extra}
    # (as a trial of the space {"lr": <a domain>, "opt": {"m": 0.9}}: lr was drawn, opt/m was not)
    return TrialInfo(trial_id=f"t{index}", config={"lr": lr, "opt": {"m": 0.9}}, last_result=result,
                     status=status, trainable_name="train", evaluated_params={"lr": lr})


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def _rows(text: str, *, loc: bool = False) -> list[list[str]]:
    """The trial table's data rows (cells stripped), without the ``loc`` cell unless ``loc``."""
    rows = [_cells(line) for line in [line for line in text.splitlines() if line.startswith("| ")][1:]]
    return rows if loc else [row[:2] + row[3:] for row in rows]


def _header(text: str) -> list[str]:
    """The trial table's header, which has Ray's ``loc`` column third, without it."""
    cells = _cells(next(line for line in text.splitlines() if line.startswith("| Trial name")))
    assert cells[:3] == ["Trial name", "status", "loc"]
    return cells[:2] + cells[3:]


def test_the_status_text_has_counts_the_given_columns_and_the_best_trial():
    trials = [_trial(0, "TERMINATED", 0.1, 0.5), _trial(1, "RUNNING", 0.01, 0.2), _trial(2, "PENDING", 0.3, None)]
    reporter = CLIReporter(metric_columns={"loss": "Loss", "training_iteration": "iter"}, parameter_columns=["lr"],
                           total_samples=4)
    reporter.setup(metric="loss", mode="min")
    text = reporter._progress_str(trials, done=False)
    assert text.startswith("== Status ==\nCurrent time: ")
    assert re.search(r"\(running for \d\d:\d\d:\d\d\.\d\d\)", text)
    assert "Number of trials: 3/4 (1 PENDING, 1 RUNNING, 1 TERMINATED)" in text  # (by name, as Ray's: h242)
    assert "Current best trial: t1 with loss=0.2 and parameters={'lr': 0.01}" in text  # (its parameter columns)
    assert _header(text) == ["Trial name", "status", "lr", "Loss", "iter"]
    assert _rows(text) == [["train_t1", "RUNNING", "0.01", "0.2", "2"], ["train_t2", "PENDING", "0.3", "", ""],
                           ["train_t0", "TERMINATED", "0.1", "0.5", "1"]]


def test_a_column_is_shown_in_one_format_and_the_best_trials_value_in_full_as_rays_reporter():
    """The table showed each float in 5 significant digits (``1.2346e+06``; Ray's tabulate: 6, ``1.23457e+06``) and
    the best trial's value so too (``m=1`` for 0.99999999; Ray's line: ``str(value)``). Now each column has one
    format, Ray's table's (``format_metric_column``: 6 digits; ``1`` for 0.99999999 and ``1.23457e+06`` for
    1234567.5, as Ray's), and the best line gives the value in full."""
    trials = [_trial(i, "TERMINATED", lr, None) for i, lr in enumerate((0.1, 0.2, 0.3, 0.4))]
    for trial, m in zip(trials, (1234567.0, 1234567.5, 0.99999999, 3), strict=True):
        trial.last_result = {"m": m, "training_iteration": 1}
    trials[0].config["flag"] = True
    reporter = CLIReporter(metric_columns=["m"], parameter_columns=["lr", "flag"])
    reporter.setup(metric="m", mode="min")
    text = reporter._progress_str(trials, done=True)
    assert "Current best trial: t2 with m=0.99999999 and parameters=" in text
    assert [row[2:] for row in _rows(text)] == [["0.1", "True", "1.23457e+06"], ["0.2", "", "1.23457e+06"],
                                                ["0.3", "", "1"], ["0.4", "", "3"]]


def test_a_value_near_a_whole_number_and_a_bool_beside_floats_are_shown_as_rays_table_shows_them():
    """One value that would round onto a whole number (0.99999999) gave its whole column its digits (``0.33333333``
    beside it; up to 17 digits: h174's D2), and a bool beside floats printed ``True`` (h174's B3). Ray's table
    (tabulate, ``words_run.py`` in h182's notes): ``1``, ``0.333333``; a bool beside floats ``1``, a column of bools
    ``True``/``False``, a NumPy bool ``True`` (Ray's CLIReporter hands tabulate its text: h195's ``i1_tabulate.py``;
    it read ``1``)."""
    import numpy as np

    trials = [_trial(i, "TERMINATED", lr, None) for i, lr in enumerate((0.1, 0.2, 0.3, 0.4))]
    columns = {"m": (0.99999999, 1 / 3, 2 / 3, 0.123456789), "flag": (True, 0.5, False, 0.25),
               "ok": (True, False, True, False), "np_ok": (np.True_, np.False_, np.True_, np.False_)}
    for i, trial in enumerate(trials):
        trial.last_result = {key: values[i] for key, values in columns.items()} | {"training_iteration": 1}
    text = CLIReporter(metric_columns=list(columns), parameter_columns=["lr"])._progress_str(trials, done=True)
    assert [row[3:] for row in _rows(text)] == [["1", "1", "True", "True"], ["0.333333", "0.5", "False", "False"],
                                                ["0.666667", "0", "True", "True"],
                                                ["0.123457", "0.25", "False", "False"]]


def test_default_columns_infer_metrics_and_show_the_sampled_parameters():
    trials = [_trial(0, "TERMINATED", 0.1, 0.5, extra_metric=3), _trial(1, "TERMINATED", 0.2, 0.4, extra_metric=4)]
    text = CLIReporter(infer_limit=2)._progress_str(trials, done=True)
    # lr was drawn, opt/m was not; Ray's two default columns, then two inferred metrics.
    assert _header(text) == ["Trial name", "status", "lr", "iter", "total time (s)", "loss", "acc"]


def test_the_default_parameter_columns_are_the_values_the_search_drew_as_in_ray():
    """With no ``parameter_columns`` the table showed the config keys whose values differed between the trials, so
    a single trial, or a value drawn alike for every trial, had no column, and a constant of the config that differed
    (set by the trainable's caller) had one. Ray shows the keys of the trials' ``evaluated_params``, sorted (h206's
    ``matrix.py`` cases ``pc-none(default)``, ``pc-empty-list``, ``best-nested-config``; h212's
    ``reporter_real.py``: a one-value grid search ``lr`` and a one-choice ``model`` have their columns, the
    constant ``bs`` none)."""
    one = TrialInfo(trial_id="t0", config={"opt": {"lr": 0.1}, "bs": 8, "seed": 0}, status="TERMINATED",
                    last_result={"training_iteration": 1}, trainable_name="train",
                    evaluated_params={"opt/lr": 0.1, "bs": 8})
    assert _header(CLIReporter()._progress_str([one], done=True)) == ["Trial name", "status", "bs", "opt/lr", "iter"]
    assert _rows(CLIReporter()._progress_str([one], done=True)) == [["train_t0", "TERMINATED", "8", "0.1", "1"]]
    other = TrialInfo(trial_id="t1", config={"opt": {"lr": 0.2}, "bs": 8, "seed": 1}, status="TERMINATED",
                      last_result={"training_iteration": 1}, trainable_name="train",
                      evaluated_params={"opt/lr": 0.2, "bs": 8})
    assert _header(CLIReporter(parameter_columns=[])._progress_str([one, other], done=True))[2:4] == ["bs", "opt/lr"]


def test_a_none_takes_an_inferred_place_and_the_metrics_inferred_stay_once_at_the_limit_as_in_ray():
    """The reporter inferred the first ``infer_limit`` numbers of each report anew. Ray's counts a ``None`` value
    (one of its summary types) among them, its column showing once a trial has a value, and keeps its inferred
    metrics once it has ``infer_limit`` of them, so a trial that reports another metric later adds no column
    (h206's ``matrix.py`` cases ``infer None takes a slot`` and ``sticky inference``)."""
    first = TrialInfo(trial_id="t0", config={"lr": 0.1}, status="TERMINATED", trainable_name="train", last_result={
        "maybe": None, "a": 1.0, "b": 2.0, "c": 3.0, "training_iteration": 1})
    assert _header(CLIReporter(parameter_columns=["lr"])._progress_str([first], done=True))[2:] == ["lr", "iter", "a",
                                                                                                    "b"]
    reporter = CLIReporter(parameter_columns=["lr"], infer_limit=1)
    late = TrialInfo(trial_id="t0", config={"lr": 0.1}, status="PENDING", trainable_name="train")
    early = TrialInfo(trial_id="t1", config={"lr": 0.2}, status="RUNNING", trainable_name="train",
                      last_result={"y": 1.0, "training_iteration": 1})
    reporter._progress_str([late, early], done=False)
    late.status, late.last_result = "RUNNING", {"x": 1.0, "training_iteration": 1}
    assert _header(reporter._progress_str([late, early], done=True))[2:] == ["lr", "iter", "y"]


def test_a_long_header_keeps_its_end_over_two_lines_and_a_long_text_cell_is_shortened_as_in_ray():
    """``max_column_length`` cut a long header to its start (``val...``) and left every cell whole. Ray keeps the
    header's end (``...`` and its last ``2 * length - 3`` characters past ``2 * length``), wrapped over lines of
    ``length``, and shortens a text cell longer than ``length`` to ``length - 5`` characters, ``_`` and 4 hex
    digits of the value's address; numbers stay whole (h206's ``matrix.py`` case ``max_column_length=6 header``;
    h212's ``reporter_real.py``)."""
    trial = TrialInfo(trial_id="t0", config={"model": "resnet50_pretrained_imagenet", "act": "relu", "lr": 0.123456},
                      last_result={"validation_loss_of_the_model": 0.5, "loss_long": 123456789,
                                   "training_iteration": 1},
                      status="TERMINATED", trainable_name="train")
    text = CLIReporter(parameter_columns=["model", "act", "lr"], max_column_length=10, metric_columns={
        "validation_loss_of_the_model": "validation_loss_of_the_model", "loss_long": "long loss"})._progress_str(
        [trial], done=True)
    head = [line for line in text.splitlines() if line.startswith("| ")][:2]
    assert [[c.strip() for c in line.strip("|").split("|")] for line in head] == [
        ["Trial name", "status", "loc", "model", "act", "lr", "...loss_of", "long loss"],
        ["", "", "", "", "", "", "_the_model", ""]]
    row = _rows(text)[-1]
    assert re.fullmatch(r"resne_[0-9a-f]{4}", row[2]) and row[3:] == ["relu", "0.123456", "0.5", "123456789"]
    six = CLIReporter(metric_columns={"loss": "validation_loss_long"}, parameter_columns=["lr"],
                      max_column_length=6)._progress_str([_trial(0, "TERMINATED", 0.1, 0.5)], done=True)
    assert "| ...los |" in six and "| s_long |" in six


@pytest.mark.parametrize("columns", [["loss", "unreported"], {"loss": "Loss", "unreported": "U"}, None],
                         ids=["list", "dict", "default"])
@pytest.mark.parametrize("run_metric", [None, "acc"])
def test_the_metric_columns_are_rays_whatever_the_runs_metric(columns, run_metric):
    """The run's metric (``TuneConfig(metric=...)``) was added as a column of its own, beside the metric columns
    given (a list or a dict) or inferred, and a column given that no trial reports stood empty. Ray's CLIReporter
    (2.60, ``_get_progress_table_data``; ``t1_ray_reporter_matrix.py`` in h202's notes) shows the columns given, or
    its defaults and those inferred, only those a trial has a value for, and the run's metric only in its
    "Current best trial" line."""
    trials = [_trial(0, "TERMINATED", 0.1, 0.5), _trial(1, "TERMINATED", 0.2, 0.4)]
    reporter = CLIReporter(parameter_columns=["lr"], infer_limit=1,
                           **({} if columns is None else {"metric_columns": columns}))
    reporter.setup(metric=run_metric, mode=run_metric and "max")
    text = reporter._progress_str(trials, done=True)
    shown = {"list": ["loss"], "dict": ["Loss"], "default": ["iter", "total time (s)", "loss"]}
    kind = "default" if columns is None else type(columns).__name__
    assert _header(text) == ["Trial name", "status", "lr", *shown[kind]]
    assert ("Current best trial: t1 with acc=0.6 and parameters=" in text) is (run_metric == "acc")


def test_rays_well_known_metrics_are_default_columns_under_its_headers():
    """Ray's default columns are six (``mean_accuracy`` as ``acc``, ``mean_loss`` as ``loss``, ``iter``, ``total time
    (s)``, ``timesteps_total`` as ``ts``, ``episode_reward_mean`` as ``reward``), each shown once a trial reports it;
    fluidsalus had the middle two only, so a ``mean_accuracy`` was an inferred column of that name after ``iter``
    (h202's ``t1b_default_columns.py``, beside Ray 2.60's CLIReporter)."""
    trials = [_trial(i, "TERMINATED", lr, None) for i, lr in enumerate((0.1, 0.2))]
    for i, trial in enumerate(trials):
        trial.last_result = {"mean_accuracy": 0.9 - i / 10, "mean_loss": 0.1, "timesteps_total": 10 * i,
                             "episode_reward_mean": 3.0, "training_iteration": 1, "time_total_s": 1.0, "other": i}
    text = CLIReporter(parameter_columns=["lr"])._progress_str(trials, done=True)
    assert _header(text) == ["Trial name", "status", "lr", "acc", "loss", "iter", "total time (s)", "ts", "reward",
                             "other"]


def test_only_top_level_numbers_are_inferred_as_rays_reporter_infers_them():
    """A nested metric (``{"eval": {"x": 1.0}}``) was inferred as an ``eval/x`` column; Ray's CLIReporter infers only
    top-level numbers (h202's ``t1c_inference.py``): a nested one is shown when given in ``metric_columns``."""
    trials = [_trial(i, "TERMINATED", lr, None) for i, lr in enumerate((0.1, 0.2))]
    for i, trial in enumerate(trials):
        trial.last_result = {"eval": {"x": 1.0 + i}, "flag": bool(i), "training_iteration": 1, "score": 0.5}
    assert _header(CLIReporter(parameter_columns=["lr"])._progress_str(trials, done=True)) == [
        "Trial name", "status", "lr", "iter", "score"]
    assert _header(CLIReporter(metric_columns=["eval/x"], parameter_columns=["lr"])._progress_str(
        trials, done=True)) == ["Trial name", "status", "lr", "eval/x"]


def test_rows_are_cut_sorted_by_metric_and_errors_get_their_own_table():
    trials = [_trial(i, "TERMINATED", 0.1 * (i + 1), loss) for i, loss in enumerate([0.5, 0.1, 0.3, 0.2])]
    trials.append(TrialInfo(trial_id="t9", config={"lr": 9.0}, status="ERROR", trainable_name="train",
                            error="ValueError: lr too large\nsee the docs", num_failures=1))  # (the store's text)
    reporter = CLIReporter(metric_columns=["loss"], max_progress_rows=3, sort_by_metric=True, metric="loss",
                           mode="min")
    text = reporter._progress_str(trials, done=False)  # (the last table, done, has every row)
    # (Ray's fair filter: a row for the errored trial too, h206's matrix.py)
    assert [row[0] for row in _rows(text.split("Number of errored trials")[0])] == ["train_t1", "train_t3",
                                                                                    "train_t9"]
    assert "... 2 more trials not shown" in text
    assert "Number of errored trials: 1" in text and "| train_t9   | 1          | ValueError: lr too large |" in text


def test_sort_by_metric_sorts_the_finished_trials_below_the_running_ones_and_needs_a_mode_as_in_ray():
    """``sort_by_metric`` sorted every trial by the metric, a running trial below a finished one, and sorted with a
    metric and no mode. Ray's (2.60, ``_get_progress_table_data``; h206's ``matrix.py``) sorts the terminated trials
    only, below the running and pending ones, and with no mode warns and does not sort."""
    trials = [_trial(i, status, 0.1 * (i + 1), loss) for i, (status, loss) in enumerate(
        [("TERMINATED", 0.5), ("RUNNING", 0.9), ("TERMINATED", 0.1), ("RUNNING", 0.05), ("TERMINATED", 0.3)])]
    reporter = CLIReporter(metric_columns=["loss"], sort_by_metric=True)
    reporter.setup(metric="loss", mode="min")
    assert [row[0] for row in _rows(reporter._progress_str(trials, done=False))] == [
        "train_t1", "train_t3", "train_t2", "train_t4", "train_t0"]
    no_mode = CLIReporter(metric_columns=["loss"], sort_by_metric=True, metric="loss")
    with pytest.warns(UserWarning, match="sort_by_metric needs both a metric and a mode"):
        text = no_mode._progress_str(trials, done=False)
    assert [row[0] for row in _rows(text)] == ["train_t1", "train_t3", "train_t0", "train_t2", "train_t4"]


def test_rows_are_shared_between_statuses_and_the_last_table_has_them_all_as_in_ray():
    """Too many rows were the first ``max_progress_rows`` in status order (20 pending trials hid every finished
    one), and the table at the end was cut too, its errors to ``max_error_rows``. Ray's fair filter shares the rows
    between the statuses and names what it left out; its last table (``done``) has every row and every error."""
    trials = ([_trial(i, "PENDING", 0.1 * i, None) for i in range(4)]
              + [_trial(i, "TERMINATED", 0.1 * i, 0.5) for i in range(4, 8)]
              + [TrialInfo(trial_id=f"t{i}", config={"lr": 1.0}, status="ERROR", trainable_name="train",
                           error="ValueError: no", num_failures=1) for i in (8, 9)])
    reporter = CLIReporter(metric_columns=["loss"], max_progress_rows=4, max_error_rows=1)
    text = reporter._progress_str(trials, done=False)
    assert [row[0] for row in _rows(text.split("Number of errored trials")[0])] == [
        "train_t0", "train_t4", "train_t8", "train_t9"]  # (one more row in turn to ERROR, PENDING, TERMINATED)
    assert "... 6 more trials not shown (3 PENDING, 3 TERMINATED)" in text
    assert text.count("ValueError: no") == 1
    last = reporter._progress_str(trials, done=True)
    assert len(_rows(last.split("Number of errored trials")[0])) == 10 and "more trials not shown" not in last
    assert last.count("ValueError: no") == 2


def test_the_columns_are_those_of_the_rows_shown_as_in_ray():
    """The columns were those of every trial, so a metric or a drawn parameter that only the rows past
    ``max_progress_rows`` had was a column of blanks. Ray picks them from the rows it shows (h214's ``matrix.py``
    case ``h214 metric only on a hidden row``); the last table shows every row, so every column."""
    trials = [_trial(0, "TERMINATED", 0.1, 0.5), _trial(1, "TERMINATED", 0.2, 0.4),
              TrialInfo(trial_id="t2", config={"lr": 0.3, "wd": 0.1}, status="TERMINATED", trainable_name="train",
                        last_result={"other": 1.0, "training_iteration": 1}, evaluated_params={"lr": 0.3, "wd": 0.1})]
    reporter = CLIReporter(metric_columns=["loss", "other"], max_progress_rows=2)
    assert _header(reporter._progress_str(trials, done=False)) == ["Trial name", "status", "lr", "loss"]
    assert _header(reporter._progress_str(trials, done=True)) == ["Trial name", "status", "lr", "wd", "loss",
                                                                   "other"]


def test_empty_columns_are_rays_defaults_and_an_a_b_column_or_metric_reads_a_nested_value():
    """An empty ``metric_columns`` or ``parameter_columns`` showed no such column; Ray reads an empty one as its
    default (its default metric columns, nothing inferred; the default parameters). The best trial's line listed
    the whole config flattened (``'opt/m': 0.9``), where Ray lists the parameter columns given, else the config's
    top-level keys as they are; a run's metric ``"eval/acc"`` found no best trial and sorted nothing, where Ray
    reads it in the nested result. Ray's own automatic ``episodes_total`` was inferred as a metric."""
    trials = [_trial(0, "TERMINATED", 0.1, 0.5, episodes_total=3), _trial(1, "TERMINATED", 0.2, 0.4)]
    text = CLIReporter(metric_columns=[], parameter_columns={})._progress_str(trials, done=True)
    assert _header(text) == ["Trial name", "status", "lr", "iter", "total time (s)"]
    for i, trial in enumerate(trials):
        trial.last_result = {"eval": {"acc": 0.6 + i / 10}, "training_iteration": 1}
    reporter = CLIReporter(metric_columns=["eval/acc"], sort_by_metric=True)
    reporter.setup(metric="eval/acc", mode="max")
    text = reporter._progress_str(trials, done=True)
    assert "Current best trial: t1 with eval/acc=0.7 and parameters={'lr': 0.2, 'opt': {'m': 0.9}}" in text
    assert [row[0] for row in _rows(text)] == ["train_t1", "train_t0"]
    assert _header(CLIReporter()._progress_str(
        [_trial(0, "TERMINATED", 0.1, 0.5, episodes_total=3)], done=True))[-1] == "acc"


def test_columns_can_be_added_and_a_second_metric_is_refused():
    reporter = CLIReporter(metric_columns=["loss"])
    reporter.add_metric_column("acc")
    with pytest.raises(ConfigError, match="the metric column 'acc' exists already"):
        reporter.add_metric_column("acc")
    with pytest.raises(ConfigError, match="a header for 'lr' needs a dict of parameter columns"):
        reporter.add_parameter_column("lr", "learning rate")
    named = CLIReporter(parameter_columns={"lr": "learning rate"})
    named.add_parameter_column("batch", "B")
    assert named._parameter_columns == {"lr": "learning rate", "batch": "B"}
    with pytest.raises(ConfigError, match="CLIReporter: the run has a metric/mode and this reporter was built with"):
        CLIReporter(metric="loss").setup(metric="acc", mode="max")
    with pytest.raises(ConfigError, match="CLIReporter: max_progress_rows must be an int >= 0"):
        CLIReporter(max_progress_rows=-1)


def test_rays_reporter_is_translated_with_its_settings_and_other_objects_are_refused():
    ray_reporter = rt.CLIReporter(metric_columns=["loss"], parameter_columns=["lr"], max_progress_rows=7,
                                  max_report_frequency=2, sort_by_metric=True)
    with pytest.warns(UserWarning, match="progress_reporter is Ray Tune's CLIReporter"):
        config = tune.RunConfig(progress_reporter=ray_reporter)
    ours = config.progress_reporter
    assert isinstance(ours, CLIReporter)
    assert (ours._metric_columns, ours._parameter_columns, ours._max_progress_rows, ours._max_report_frequency,
            ours._sort_by_metric) == (["loss"], ["lr"], 7, 2.0, True)

    class Custom:
        def should_report(self, trials, done=False):
            return True

        def report(self, trials, done, *sys_info):
            pass

    custom = Custom()
    assert adopt_reporter(custom) is custom
    with pytest.raises(ConfigError, match="RunConfig: progress_reporter must be None or a fluidsalus.tune"):
        tune.RunConfig(progress_reporter="cli")


def test_the_report_has_rays_lines_around_the_table_the_scheduler_resources_logdir_and_loc(capsys):
    """The status text lacked Ray's lines around its table: the scheduler's (``scheduler.debug_string()``), the
    run's resource usage, ``Result logdir: ...`` and the ``loc`` column (the trial's node ip:pid). Ray 2.60's legacy
    output (``RAY_AIR_NEW_OUTPUT=0``; h221's ``side_by_side.py``) reads, around its table::

        == Status ==
        Current time: 2026-12-01 03:55:25 (running for 00:00:39.80)
        Using AsyncHyperBand: num_stopped=4
        Bracket: Iter 8.000: -0.125 | Iter 4.000: -0.25 | Iter 2.000: -0.5 | Iter 1.000: -2.5
        Logical resource usage: 1.0/2 CPUs, 0/0 GPUs
        Current best trial: ed988_00000 with loss=0.1111111111111111 and parameters={'lr': 0.1}
        Result logdir: /tmp/ray/session_.../asha_run/driver_artifacts
        Number of trials: 4/4 (4 TERMINATED)
        | Trial name        | status     | loc             |   lr | ...

    fluidsalus's lines come from its own state: ASHA's rungs, its devices (none in progress here: ``?``, as
    Ray's before it knows its cluster), the experiment folder, each trial's last result."""
    from fluidsalus.searchers import ASHA
    from fluidsalus.tune.progress_reporter import FIFO_LINE, ReporterCallback, scheduler_lines

    trials = [_trial(0, "TERMINATED", 0.1, 0.5, node_ip="192.0.2.2", pid=4242),
              _trial(1, "RUNNING", 0.2, 0.4, node_ip=platform.node(), pid=77), _trial(2, "PENDING", 0.3, None)]
    for trial in trials:
        trial.path = f"/store/exp/train_{trial.trial_id}"
    asha = ASHA({"lr": 0.1}, 3, "loss", "min", max_t=4, grace_period=1, reduction_factor=2)
    reporter = CLIReporter(metric_columns=["loss"], parameter_columns=["lr"], max_report_frequency=0)
    reporter.setup(metric="loss", mode="min", total_samples=3)
    ReporterCallback(reporter, asha).on_trial_result(0, trials, trials[0], trials[0].last_result)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "== Status ==" and lines[1].startswith("Current time: ")
    assert lines[2:8] == ["Using AsyncHyperBand: num_stopped=0",
                          "Bracket: Iter 4.000: None | Iter 2.000: None | Iter 1.000: None",
                          "Logical resource usage: ?",
                          "Current best trial: t1 with loss=0.4 and parameters={'lr': 0.2}",
                          "Result logdir: /store/exp", "Number of trials: 3/3 (1 PENDING, 1 RUNNING, 1 TERMINATED)"]
    assert [row[:3] for row in _rows("\n".join(lines), loc=True)] == [
        ["train_t1", "RUNNING", "pid=77"], ["train_t2", "PENDING", ""], ["train_t0", "TERMINATED", "192.0.2.2:4242"]]
    ReporterCallback(reporter).on_trial_result(0, trials, trials[0], trials[0].last_result)  # (no scheduler)
    assert capsys.readouterr().out.splitlines()[2] == FIFO_LINE == "Using FIFO scheduling algorithm."
    # (a scheduler class of one's own with its lines; Ray's ResourceChangingScheduler names itself before its base's)
    from fluidsalus.tune.schedulers import ResourceChangingScheduler, TrialScheduler

    class Mine(TrialScheduler):
        def debug_string(self) -> str:
            return "Mine: 3 decisions"

    assert scheduler_lines(asha, trials, Mine()) == "Mine: 3 decisions"
    assert scheduler_lines(None, trials, ResourceChangingScheduler()) == f"(ResourceChangingScheduler) {FIFO_LINE}"
    assert scheduler_lines(asha, trials, ResourceChangingScheduler()).startswith(
        "(ResourceChangingScheduler) Using AsyncHyperBand: num_stopped=0\nBracket: Iter 4.000: None")


def test_a_started_trial_shows_where_it_runs_before_its_first_result_as_rays():
    """Ray's ``loc`` shows a started trial's actor (``192.0.2.2:312``) before its first result (h232's ``sbs.py
    loc``); fluidsalus's was empty until the first result. The engine tells where the attempt was placed (its
    device process's node ip and pid, ``on_trial_placed``) before its start; a result's location comes first."""
    from fluidsalus.tune.callback import RayCallbackAdapter
    from fluidsalus.tune.progress_reporter import _location

    adapter = RayCallbackAdapter([], "/nowhere", "train")
    adapter.on_trial_placed("t0", "192.0.2.9", 4242)
    adapter.on_trial_start("t0", {"lr": 0.1}, 0)
    trial = adapter.trials["t0"]
    assert trial.status == "RUNNING" and trial.location == ("192.0.2.9", 4242)
    assert _location(trial) == "192.0.2.9:4242"
    trial.location = (platform.node(), 7)
    assert _location(trial) == "pid=7"
    trial.last_result = {"node_ip": "192.0.2.3", "pid": 55}
    assert _location(trial) == "192.0.2.3:55"  # (the result's first, as Ray's)
    adapter.on_trial_start("t1", {"lr": 0.2}, 0)  # (not placed: an engine that does not tell)
    assert adapter.trials["t1"].location is None and _location(adapter.trials["t1"]) == ""


@pytest.mark.parametrize("status", ["TERMINATED", "ERROR"])
def test_an_ended_trial_with_no_result_keeps_where_it_ran_as_rays(status: str):
    """Ray's ``trial.last_result`` before any result is its actor's auto-filled metrics (``node_ip``, ``pid``), so
    a trial that ended (or failed) without a result keeps its ``loc`` in every later table (h237's ``sbs_loc.py
    noreport``: ``| TERMINATED | 192.0.2.2:8433 |``; ``err``: ``| ERROR | 192.0.2.2:4442 |``); h232's reporter
    showed an empty cell for an ended trial. A retried attempt shows where it runs now (``died``: the new pid)."""
    from fluidsalus.tune.callback import RayCallbackAdapter
    from fluidsalus.tune.progress_reporter import _location

    adapter = RayCallbackAdapter([], "/nowhere", "train")
    adapter.on_trial_placed("t0", "192.0.2.9", 4242)
    adapter.on_trial_start("t0", {"lr": 0.1}, 0)
    adapter.on_trial_placed("t0", "192.0.2.9", 4343)  # (its retry, in a new device process)
    adapter.on_trial_start("t0", {"lr": 0.1}, 1)
    trial = adapter.trials["t0"]
    assert _location(trial) == "192.0.2.9:4343"
    adapter.on_trial_complete("t0", status, None)
    assert trial.status == status and _location(trial) == "192.0.2.9:4343"


def test_a_retried_trials_recover_hook_sees_where_it_failed_as_rays(tmp_path):
    """Ray calls ``on_trial_recover`` as the failed attempt ends: the trial is ``PENDING`` and its ``loc`` is still
    the failed actor's (h237's ``sbs_loc.py died``: ``| PENDING | 192.0.2.2:3356 |``, the new pid once it runs
    again). fluidsalus calls it as the retry starts, and h232 set the new attempt's location before it: the recover
    hook's reporter showed the new process as the failed one's. The new location now comes after that hook."""
    from fluidsalus.store import TRIAL_RESTART_EVENT, ExperimentStore
    from fluidsalus.tune.callback import Callback, RayCallbackAdapter
    from fluidsalus.tune.progress_reporter import _location

    seen: list[tuple[str, str, str]] = []

    class Locations(Callback):
        def on_trial_recover(self, iteration, trials, trial, **info):
            seen.append(("recover", trial.status, _location(trial)))

        def on_trial_start(self, iteration, trials, trial, **info):
            seen.append(("start", trial.status, _location(trial)))

    ExperimentStore.create(str(tmp_path), "retried", {}, "loss", "min").add_events(
        [(time.time(), TRIAL_RESTART_EVENT, "t0", None, {"attempt": 1, "reason": "retry"})])
    adapter = RayCallbackAdapter([Locations()], str(tmp_path), "train")
    adapter.on_trial_placed("t0", "192.0.2.9", 4242)
    adapter.on_trial_start("t0", {"lr": 0.1}, 0)
    adapter.on_trial_placed("t0", "192.0.2.9", 4343)  # (its retry, in a new device process)
    adapter.on_trial_start("t0", {"lr": 0.1}, 1)
    assert seen == [("start", "PENDING", "192.0.2.9:4242"), ("recover", "PENDING", "192.0.2.9:4242"),
                    ("start", "PENDING", "192.0.2.9:4343")]


def _pruned_search(**kwargs: Any) -> Any:
    """An OptunaSearch under Optuna's SuccessiveHalvingPruner, as a Tuner plans OptunaSearch + ASHAScheduler."""
    import optuna

    from fluidsalus import space as sp
    from fluidsalus.searchers import OptunaSearch

    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2, min_early_stopping_rate=0)
    return OptunaSearch({"x": sp.uniform(0, 1)}, num_samples=4, metric="loss", mode="min", seed=1, pruner=pruner,
                        **kwargs)


def test_asha_with_a_search_algorithm_prints_rays_asha_lines_from_the_pruners_state():
    """OptunaSearch (or HyperOptSearch) + ASHAScheduler, Ray's commonest set-up, runs as Optuna's
    SuccessiveHalvingPruner, and its status block showed the scheduler's repr (``AsyncHyperBandScheduler(time_attr=
    ..., metric=None, ...)``) where Ray's shows ``Using AsyncHyperBand: num_stopped=6`` and ``Bracket: Iter 4.000:
    -0.51... | Iter 2.000: -1.16... | Iter 1.000: -3.02...`` (h232's ``sbs.py optuna_asha``). The lines now come
    from the study: the trials the pruner stopped (and those stopped at ``max_t``), and at each of Ray's milestones
    the cutoff the pruner used there (the worst value it promotes, as a reward)."""
    from fluidsalus.searchers import Decision
    from fluidsalus.tune.progress_reporter import FIFO_LINE, scheduler_lines
    from fluidsalus.tune.schedulers import ASHAScheduler, FIFOScheduler

    search = _pruned_search()
    group = search.propose(4)
    ids = [f"t{i}" for i in range(4)]
    for trial_id, config in zip(ids, group.configs, strict=True):
        search.on_trial_add(trial_id, group.group_id, config)
    asha = ASHAScheduler(max_t=5, grace_period=1, reduction_factor=2)
    assert scheduler_lines(search, [], asha) == ("Using AsyncHyperBand: num_stopped=0\n"
                                                "Bracket: Iter 4.000: None | Iter 2.000: None | Iter 1.000: None")
    # rung 0 (iteration 1): 1.0 promoted, 2.0 pruned, 0.5 promoted, 3.0 pruned (the 2nd best of 4 is the cutoff)
    decisions = [search.on_result(t, {"loss": loss, "training_iteration": 1})
                 for t, loss in zip(ids, (1.0, 2.0, 0.5, 3.0), strict=True)]
    assert decisions == [Decision.CONTINUE, Decision.STOP, Decision.CONTINUE, Decision.STOP]
    assert scheduler_lines(search, [], asha) == ("Using AsyncHyperBand: num_stopped=2\n"
                                                "Bracket: Iter 4.000: None | Iter 2.000: None | Iter 1.000: -1.0")
    for step, loss in ((2, 0.4), (3, 0.3), (4, 0.1)):  # t0 on, past rungs 1 and 2
        assert search.on_result("t0", {"loss": loss, "training_iteration": step}) == Decision.CONTINUE
    # at max_t a stop rule ends t0 (the search learns only its end); Ray's ASHA counts that stop
    last = {"loss": 0.05, "training_iteration": 5}
    search.on_trial_complete("t0", last)
    trials = [TrialInfo("t0", {}, last_result=last, status="TERMINATED"), _trial(1, "RUNNING", 0.2, 2.0)]
    assert scheduler_lines(search, trials, asha) == (
        "Using AsyncHyperBand: num_stopped=3\nBracket: Iter 4.000: -0.1 | Iter 2.000: -0.4 | Iter 1.000: -1.0")
    # (a trial at max_t is stopped there only with stop_last_trials, as Ray counts it)
    assert scheduler_lines(search, trials, ASHAScheduler(max_t=5, grace_period=1, reduction_factor=2,
                                                         stop_last_trials=False)).startswith(
        "Using AsyncHyperBand: num_stopped=2\n")
    # the same search under no scheduler, or without the pruner, has no ASHA lines
    assert scheduler_lines(search, [], FIFOScheduler()) == FIFO_LINE
    import optuna

    search.study.pruner = optuna.pruners.MedianPruner()
    assert scheduler_lines(search, [], asha) == asha.debug_string()


def test_a_tuner_of_optuna_search_and_asha_gives_its_reporter_the_pruned_search(monkeypatch):
    """The wiring, without a run: the Tuner's reporter gets the planned search (the pruner's) and ASHA, and so
    prints ASHA's lines (h232); the Tuner stops before Ray starts."""
    from fluidsalus.tune import _tuner
    from fluidsalus.tune.progress_reporter import scheduler_lines
    from fluidsalus.tune.search.optuna import OptunaSearch

    made: list[Any] = []
    monkeypatch.setattr(_tuner, "ReporterCallback", lambda *args: made.append(args) or args[0])

    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    monkeypatch.setattr(_tuner, "ensure_ray", stop)
    tuner = tune.Tuner(_train, param_space={"lr": tune.uniform(0.1, 1.0)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=2,
                                                   search_alg=OptunaSearch(seed=1),
                                                   scheduler=tune.schedulers.ASHAScheduler(max_t=5)),
                       run_config=tune.RunConfig(progress_reporter=CLIReporter(), verbose=1))
    with pytest.raises(Stop):
        tuner.fit()
    (_, searcher, scheduler), = made
    assert scheduler_lines(searcher, [], scheduler) == (  # (Ray's default reduction_factor, 4)
        "Using AsyncHyperBand: num_stopped=0\nBracket: Iter 4.000: None | Iter 1.000: None")


def test_a_subclass_of_asha_or_the_median_rule_with_hooks_of_its_own_prints_its_parents_lines_as_rays():
    """A subclass of ASHAScheduler whose ``on_trial_result`` calls ``super()`` (no ``debug_string`` of its own)
    runs as a scheduler of one's own, and printed its repr (its settings); Ray's prints the parent's line from the
    parent's state (h232's ``sbs.py sub_asha``: ``Using AsyncHyperBand: num_stopped=4`` and the bracket). Its lines
    are now those of the built-in rule its ``super()`` asks; a ``debug_string`` of its own still comes first."""
    from fluidsalus.tune._custom_scheduler import BuiltInRule, ScheduledSearch
    from fluidsalus.tune.progress_reporter import scheduler_lines
    from fluidsalus.tune.schedulers import ASHAScheduler, MedianStoppingRule

    class MyASHA(ASHAScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return super().on_trial_result(tune_controller, trial, result)

    class MyMedian(MedianStoppingRule):
        def on_trial_result(self, tune_controller, trial, result):
            return super().on_trial_result(tune_controller, trial, result)

    class Described(MyASHA):
        def debug_string(self) -> str:
            return "Described"

    from fluidsalus.searchers import RandomSearch

    inner = RandomSearch({"lr": 0.1}, 2)
    rule = BuiltInRule.asha("loss", "min", 1, time_attr="training_iteration", max_t=5, grace_period=1,
                            reduction_factor=2, brackets=1, stop_last_trials=True)
    mine = MyASHA(max_t=5, grace_period=1, reduction_factor=2)
    assert scheduler_lines(ScheduledSearch(inner, mine, rule=rule), [], mine) == (
        "Using AsyncHyperBand: num_stopped=0\nBracket: Iter 4.000: None | Iter 2.000: None | Iter 1.000: None")
    median = MyMedian()
    assert scheduler_lines(ScheduledSearch(inner, median, rule=BuiltInRule.median(
        "loss", "min", time_attr="training_iteration", grace_period=60.0, min_samples_required=3, hard_stop=True)),
        [], median) == "Using MedianStoppingRule: num_stopped=0."
    described = Described()
    assert scheduler_lines(ScheduledSearch(inner, described, rule=rule), [], described) == "Described"


def test_the_running_for_time_counts_days_as_rays():
    """A run of a day or more showed its hours on (``26:03:04.50``); Ray's ``_get_time_str`` counts the days apart:
    ``1 days, 02:03:04.50``."""
    reporter = CLIReporter()
    reporter.set_start_time(time.time() - (26 * 3600 + 3 * 60 + 4.5))
    assert re.search(r"\(running for 1 days, 02:03:0[45]\.\d\d\)", reporter._progress_str([], done=False))
    reporter.set_start_time(time.time() - 65)
    assert re.search(r"\(running for 00:01:0[56]\.\d\d\)", reporter._progress_str([], done=False))


def test_the_resource_line_is_rays_from_the_runs_devices_and_their_busy_lanes():
    """Ray's ``Logical resource usage: <used>/<total> CPUs, <used>/<total> GPUs`` from fluidsalus's devices: the
    cores (and GPUs) the live devices hold, and the share of them the running trials' lanes use (at most a device's
    lanes: more trials resident than lanes use no more)."""
    from types import SimpleNamespace

    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.trialgroup.executor import Executor, ResourceUsage
    from fluidsalus.tune.progress_reporter import resource_line

    def device(name: str, kind: str, slots: int, cpus: int, assigned: set[str], alive: bool = True) -> Any:
        return SimpleNamespace(spec=DeviceSpec(name, kind, 0, slots, cpus=cpus), assigned=assigned, alive=alive)

    trials = {tid: SimpleNamespace(status=status) for tid, status in
              [("a", "RUNNING"), ("b", "RUNNING"), ("c", "RUNNING"), ("d", "PAUSED"), ("e", "RUNNING")]}
    cpu_run = SimpleNamespace(trials=trials, _devices=[device("cpu:0", "cpu", 1, 1, {"a"}),
                                                      device("cpu:1", "cpu", 1, 1, {"d"}),
                                                      device("cpu:2", "cpu", 1, 1, {"e"}, alive=False)])
    assert resource_line(Executor.resource_usage(cpu_run)) == "Logical resource usage: 1.0/2 CPUs, 0/0 GPUs"
    gpu_run = SimpleNamespace(trials=trials, _devices=[device("cuda:0", "cuda", 2, 4, {"a", "b", "c"}),
                                                      device("cuda:1", "cuda", 2, 4, {"d"})])
    assert resource_line(Executor.resource_usage(gpu_run)) == "Logical resource usage: 4.0/8 CPUs, 1.0/2 GPUs"
    assert resource_line(ResourceUsage(0.0, 2.0, 0.0, 0.0)) == "Logical resource usage: 0/2 CPUs, 0/0 GPUs"
    assert resource_line(None) == "Logical resource usage: ?"


class _Run:
    """A stand-in for a run in progress (an ``Executor``): its resource usage, and how often it was taken."""

    def __init__(self, cpus: float) -> None:
        self.cpus, self.looks = cpus, 0

    def resource_usage(self) -> Any:
        from fluidsalus.trialgroup.executor import ResourceUsage

        self.looks += 1
        return ResourceUsage(1.0, self.cpus, 0.0, 0.0)


class _AtTheEnd(ProgressReporter):
    def __init__(self) -> None:
        self.lines: list[tuple[str, ...]] = []

    def should_report(self, trials, done=False):
        return done

    def report(self, trials, done, *sys_info):
        self.lines.append(sys_info)


def test_the_resource_usage_is_taken_for_a_report_and_at_a_trials_start_not_at_every_result(monkeypatch):
    """The callback took the run's resource usage (a walk over every device's lanes) at every trial event, before
    asking the reporter whether to report: at every result of the run. It is taken when a report is made, and at
    a trial's start (which gives the end's report the devices' totals)."""
    from fluidsalus.trialgroup import executor
    from fluidsalus.tune.progress_reporter import FIFO_LINE, ReporterCallback

    run, reporter = _Run(2.0), _AtTheEnd()
    monkeypatch.setattr(executor._THREAD_RUNS, "executors", [run], raising=False)  # (the run in progress)
    trials = [_trial(0, "RUNNING", 0.1, 0.5)]
    callback = ReporterCallback(reporter)
    callback.on_trial_start(0, trials, trials[0])
    for _ in range(100):
        callback.on_trial_result(0, trials, trials[0], trials[0].last_result)
    assert run.looks == 1  # (the start's; it was 101)
    monkeypatch.setattr(executor._THREAD_RUNS, "executors", [])  # (the run is over)
    callback.on_experiment_end(trials)
    assert reporter.lines == [(FIFO_LINE, "Logical resource usage: 0/2 CPUs, 0/0 GPUs")]


def test_the_last_report_of_a_run_nested_in_anothers_callback_shows_its_own_devices(monkeypatch):
    """A run started from another run's callback (on its thread) ends inside it: its last report took the usage of
    the innermost run in progress then, the outer one's (``1.0/8 CPUs``), not its own devices'."""
    from fluidsalus.trialgroup import executor
    from fluidsalus.tune.progress_reporter import ReporterCallback

    outer, inner, reporter = _Run(8.0), _Run(2.0), _AtTheEnd()
    monkeypatch.setattr(executor._THREAD_RUNS, "executors", [outer, inner], raising=False)
    trials = [_trial(0, "RUNNING", 0.1, 0.5)]
    callback = ReporterCallback(reporter)
    callback.on_trial_start(0, trials, trials[0])
    monkeypatch.setattr(executor._THREAD_RUNS, "executors", [outer])  # (the inner run is over, the outer goes on)
    callback.on_experiment_end(trials)
    assert reporter.lines[-1][1] == "Logical resource usage: 0/2 CPUs, 0/0 GPUs"


def test_a_reporter_whose_report_takes_no_sys_info_is_called_without_it_and_told_so():
    """Ray calls ``report(trials, done, *sys_info)``; a reporter of one's own with ``report(self, trials, done)``
    worked with fluidsalus until the scheduler's and resource lines came (2026-12-01), then raised a TypeError at
    the first trial's start (and again at the end). It is called with ``trials`` and ``done``, with a warning that
    says how to get the lines (Ray's legacy output raises there; its default output never calls a reporter)."""
    from fluidsalus.tune.progress_reporter import ReporterCallback

    calls: list[tuple[int, bool]] = []

    class TwoArguments(ProgressReporter):
        def should_report(self, trials, done=False):
            return True

        def report(self, trials, done):
            calls.append((len(trials), done))

    trials = [_trial(0, "RUNNING", 0.1, 0.5)]
    with pytest.warns(UserWarning, match=r"TwoArguments\.report takes no \*sys_info.*report\(self, trials, done, "
                                         r"\*sys_info\)") as warned:
        callback = ReporterCallback(TwoArguments())
    assert warned[0].filename == __file__  # (the user's line, past fluidsalus's frames)
    callback.on_trial_start(0, trials, trials[0])
    callback.on_experiment_end(trials)
    assert calls == [(1, False), (1, True)]


def test_a_scheduler_of_ones_own_on_rays_base_without_lines_does_not_end_the_run():
    """Ray's base ``TrialScheduler.debug_string`` raises ``NotImplementedError``; a scheduler of one's own on it
    without ``debug_string`` (Ray's default output never asks for its lines) ended a fluidsalus run, once all its
    trials had run, with that error from the last report. Its lines are its repr then."""
    from ray.tune.schedulers import TrialScheduler as RaysTrialScheduler

    from fluidsalus.tune.progress_reporter import scheduler_lines

    class Mine(RaysTrialScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return self.CONTINUE

    mine = Mine()
    assert scheduler_lines(None, [_trial(0, "RUNNING", 0.1, 0.5)], mine) == repr(mine)


# ---------------------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------------------


def _train(config):
    for step in range(1, 4):
        tune.report({"loss": config["lr"] / step, "step": step})


class _Recorder(ProgressReporter):
    def __init__(self) -> None:
        self.calls: list[tuple[bool, list[tuple[str, str]]]] = []
        self.setup_args: dict[str, Any] = {}

    def setup(self, start_time=None, total_samples=None, metric=None, mode=None, **kwargs):
        self.setup_args = {"total_samples": total_samples, "metric": metric, "mode": mode}

    def should_report(self, trials, done=False):
        return True

    def report(self, trials, done, *sys_info):
        self.calls.append((done, [(str(t), t.status) for t in trials]))


def test_a_restored_tuner_takes_the_reporter_as_the_script_built_it(ray_cluster, storage: str, capsys) -> None:
    """tuner.pkl kept the reporter after the run's setup() had given it TuneConfig's metric and mode, so the
    restore's setup() refused it as a reporter built with its own (a ``ConfigError``; Ray restores the same
    script): it keeps the reporter as the script built it (h246's N2)."""
    reporter = CLIReporter(metric_columns=["loss"], parameter_columns=["lr"], max_report_frequency=0)
    tuner = tune.Tuner(_train, param_space={"lr": tune.grid_search([0.1])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(name="kept", storage_path=storage, progress_reporter=reporter,
                                                 verbose=1))
    tuner.fit()
    restored = tune.Tuner.restore(os.path.join(storage, "kept"), _train)
    assert restored._run_config.progress_reporter._metric is None  # (the script's reporter had none)
    grid = restored.fit()
    assert len(grid) == 1 and grid.get_best_result().metrics["loss"] == pytest.approx(0.1 / 3)
    assert "Current best trial: " in capsys.readouterr().out.split("== Status ==")[-1]


def test_a_cli_reporter_prints_tables_of_a_real_run(ray_cluster, storage: str, capsys) -> None:
    reporter = CLIReporter(metric_columns=["loss", "step"], parameter_columns=["lr"], max_report_frequency=0)
    tune.run(_train, config={"lr": tune.grid_search([0.1, 0.2])}, metric="loss", mode="min", storage_path=storage,
             progress_reporter=reporter, verbose=1)
    out = capsys.readouterr().out
    tables = out.split("== Status ==")[1:]
    assert len(tables) >= 2
    last = tables[-1]
    assert "Number of trials: 2/2 (2 TERMINATED)" in last and "Current best trial: " in last
    # Ray's lines around the table (h221): the scheduler's, the devices' resource usage, the experiment folder, and
    # the node ip:pid of each trial's process in the loc column
    lines = last.splitlines()
    assert lines[2] == "Using FIFO scheduling algorithm."
    assert re.fullmatch(r"Logical resource usage: (0|\d+\.\d+)/[1-9]\d* CPUs, 0/0 GPUs", lines[3]), lines[3]
    logdir = next(line for line in lines if line.startswith("Result logdir: "))
    assert os.path.dirname(logdir.removeprefix("Result logdir: ")) == os.path.abspath(storage)
    assert all(re.fullmatch(r"\S+:\d+|pid=\d+", row[2]) for row in _rows(last, loc=True))
    # (a running trial before its first result shows where it runs, as Ray's: h232)
    started = [row for table in tables for row in _rows(table, loc=True)
               if row[1] == "RUNNING" and not "".join(row[4:5])]  # (no loss yet)
    assert started and all(re.fullmatch(r"\S+:\d+|pid=\d+", row[2]) for row in started), started
    rows = _rows(last)
    # (Ray's table: 6 significant digits, 0.0333333; it said 0.033333)
    assert sorted((row[1], row[2], row[3], row[4]) for row in rows) == [("TERMINATED", "0.1", "0.0333333", "3"),
                                                                         ("TERMINATED", "0.2", "0.0666667", "3")]


def test_a_custom_reporter_is_set_up_and_called_and_verbose_0_silences_it(ray_cluster, storage: str) -> None:
    recorder = _Recorder()
    tune.Tuner(_train, param_space={"lr": tune.grid_search([0.1, 0.2, 0.3])},
               tune_config=tune.TuneConfig(metric="loss", mode="min"),
               run_config=tune.RunConfig(storage_path=storage, progress_reporter=recorder, verbose=1)).fit()
    assert recorder.setup_args == {"total_samples": 3, "metric": "loss", "mode": "min"}
    done, trials = recorder.calls[-1]
    assert done and len(trials) == 3 and {status for _, status in trials} == {"TERMINATED"}
    assert all(name.startswith("_train_") for name, _ in trials)
    assert [d for d, _ in recorder.calls].count(True) == 1 and len(recorder.calls) > 1
    silent = _Recorder()
    tune.Tuner(_train, param_space={"lr": 0.1},
               run_config=tune.RunConfig(storage_path=storage, progress_reporter=silent, verbose=0)).fit()
    assert silent.calls == []


def test_a_column_with_text_in_it_shows_each_value_as_rays_text_column():
    """tabulate makes a column with a value that reads as no number a column of text, each value as ``str()``
    gives it: Ray's table shows ``0.99999999`` beside ``"auto"`` (h188's str_column.py, side by side), where
    fluidsalus formatted the numbers to 6 digits (``1``). A numeric string still counts as a number."""
    from fluidsalus.tune.progress_reporter import _column

    assert _column([0.99999999, "auto", None, 0.123456789]) == ["0.99999999", "auto", "", "0.123456789"]
    assert _column([0.99999999, "0.5", 0.123456789]) == ["1", "0.5", "0.123457"]


# ---------------------------------------------------------------------------------------------------------
# PENDING and PAUSED trials, as Ray's views show them (h242)
# ---------------------------------------------------------------------------------------------------------


def test_a_made_trial_is_pending_until_it_starts_and_a_paused_one_paused_until_it_goes_on():
    """The engine tells the views of each trial it makes (``on_trial_add``) and of each started trial it pauses or
    lets go on (``on_trial_status``): the view is ``PENDING`` in ``trials`` from its making (Ray lists every trial
    it made), ``PAUSED`` at its rung and ``RUNNING`` again, as Ray's ``Trial``; no hook is called for either. A
    finished view, and one not started yet, keep their status. Until h242 a view came at its start, and a paused
    trial said ``RUNNING``."""
    from fluidsalus.tune.callback import Callback, RayCallbackAdapter

    seen: list[tuple[str, str, list[str]]] = []

    class Hooks(Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            seen.append(("start", trial.status, [t.status for t in trials]))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            seen.append(("result", trial.status, [t.status for t in trials]))

        def on_trial_complete(self, iteration, trials, trial, **info):
            seen.append(("complete", trial.status, [t.status for t in trials]))

    adapter = RayCallbackAdapter([Hooks()], "/nowhere", "train")
    adapter.on_trial_add("t0", {"lr": 0.1})
    adapter.on_trial_add("t1", {"lr": 0.2})
    adapter.on_trial_status("t1", "PAUSED")  # (not started: it stays PENDING)
    assert [(t.trial_id, t.status) for t in adapter._listed()] == [("t0", "PENDING"), ("t1", "PENDING")]
    assert seen == []  # (no hook for a trial made, as in Ray)
    adapter.on_trial_start("t0", {"lr": 0.1}, 0)
    adapter.on_trial_result("t0", {"loss": 1.0, "training_iteration": 1})
    adapter.on_trial_status("t0", "PAUSED")
    assert [t.status for t in adapter._listed()] == ["PAUSED", "PENDING"]
    adapter.on_trial_status("t0", "RUNNING")  # (promoted: it resumes in place)
    adapter.on_trial_result("t0", {"loss": 0.5, "training_iteration": 2})
    adapter.on_trial_status("t0", "PAUSED")
    adapter.on_trial_complete("t0", "TERMINATED", None)  # (stopped at its rung: Ray's hook sees it PAUSED)
    adapter.on_trial_status("t0", "RUNNING")  # (a finished view keeps its status)
    adapter.on_trial_result("t1", {"loss": 2.0, "training_iteration": 1})  # (its start untold: it starts here)
    assert seen == [("start", "PENDING", ["PENDING", "PENDING"]), ("result", "RUNNING", ["RUNNING", "PENDING"]),
                    ("result", "RUNNING", ["RUNNING", "PENDING"]), ("complete", "PAUSED", ["PAUSED", "PENDING"]),
                    ("start", "PENDING", ["TERMINATED", "PENDING"]), ("result", "RUNNING", ["TERMINATED", "RUNNING"])]


class _Statuses(tune.Callback):
    """Records the trials' statuses as Ray's callbacks see them: each hook's trial, and every step's list."""

    def __init__(self) -> None:
        self.hooks: list[tuple[str, str, str]] = []  # (hook, trial, its status)
        self.steps: list[dict[str, str]] = []  # trial -> status, at each step's end that changed them
        self.ends: list[dict[str, str]] = []  # trial -> status, at each step's end

    def on_trial_start(self, iteration, trials, trial, **info):
        self.hooks.append(("start", trial.trial_id, trial.status))
        self._step(trials)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.hooks.append(("result", trial.trial_id, trial.status))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.hooks.append(("complete", trial.trial_id, trial.status))

    def on_step_end(self, iteration, trials, **info):
        self._step(trials)
        self.ends.append({t.trial_id: t.status for t in trials})

    def _step(self, trials):
        now = {t.trial_id: t.status for t in trials}
        if not self.steps or self.steps[-1] != now:
            self.steps.append(now)


def test_every_trial_of_a_grid_is_listed_pending_before_it_starts_as_rays(ray_cluster, storage: str, capsys):
    """Ray lists every trial it made: a grid of 4 (2 CPUs) starts at ``Number of trials: 4/4 (4 PENDING)``, its
    first ``on_trial_start`` sees 4 trials, and its table shows the unstarted ones ``PENDING`` (h242's ``sbs.py
    grid0``). fluidsalus's showed the started ones only (``1/4 (1 RUNNING)``). The counts go by status name, as Ray's
    line (``3 PENDING, 1 RUNNING``; running first until h242)."""
    statuses = _Statuses()
    reporter = CLIReporter(metric_columns=["loss"], parameter_columns=["lr"], max_report_frequency=0)
    tune.run(_train, config={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4])}, metric="loss", mode="min",
             storage_path=storage, progress_reporter=reporter, callbacks=[statuses], verbose=1)
    first = statuses.steps[0]
    assert len(first) == 4 and list(first.values()).count("PENDING") >= 3, statuses.steps
    tables = capsys.readouterr().out.split("== Status ==")[1:]
    assert re.search(r"Number of trials: 4/4 \(3 PENDING, 1 RUNNING\)", tables[0]), tables[0]
    assert [row[1] for row in _rows(tables[0])] == ["RUNNING", "PENDING", "PENDING", "PENDING"]
    assert "Number of trials: 4/4 (4 TERMINATED)" in tables[-1]


def _rungs(config):
    for step in range(1, 10):
        tune.report({"loss": config["lr"] / step})


def test_a_trial_hyperband_pauses_at_its_rung_is_paused_in_the_views_and_running_once_promoted(
        ray_cluster, storage: str, capsys):
    """Ray's HyperBand pauses a trial at its rung: it is ``PAUSED`` in the table (``(2 PAUSED, 6 PENDING)``) and in
    every ``trial.status`` its callbacks see, the result it paused at still ``RUNNING`` in ``on_trial_result``, a
    paused trial the rung stops ``PAUSED`` in ``on_trial_complete``, and one it promotes runs again (h242's
    ``sbs.py hb3``). fluidsalus's views said ``RUNNING`` throughout."""
    from fluidsalus.callbacks import Callback as EngineCallback

    told: dict[str, list[str]] = {}

    class Told(EngineCallback):  # (what the engine tells the views: a promoted trial's RUNNING may come and go
        # within one step of the driver, its next results and pause in the batch after the promotion)
        def on_trial_status(self, trial_id: str, status: str) -> None:
            told.setdefault(trial_id, []).append(status)

    statuses = _Statuses()
    reporter = CLIReporter(metric_columns=["loss"], parameter_columns=["lr"], max_report_frequency=0)
    tune.run(_rungs, config={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])}, metric="loss",
             mode="min", storage_path=storage, progress_reporter=reporter, callbacks=[statuses, Told()], verbose=1,
             scheduler=tune.schedulers.HyperBandScheduler(time_attr="training_iteration", max_t=9,
                                                          reduction_factor=3))
    out = capsys.readouterr().out
    assert re.search(r"Number of trials: 8/8 \([^)]*\d PAUSED", out)
    assert re.search(r"\{[^}]*PAUSED: \d", out)  # (HyperBand's bracket lines count them too)
    assert any("PAUSED" in step.values() for step in statuses.steps), statuses.steps
    assert all(status == "RUNNING" for hook, _, status in statuses.hooks if hook == "result")
    assert any(hook == "complete" and status == "PAUSED" for hook, _, status in statuses.hooks), statuses.hooks
    assert any(seq[:2] == ["PAUSED", "RUNNING"] for seq in told.values()), told  # (promoted: it runs on in place)
    assert set(statuses.steps[-1].values()) == {"TERMINATED"}


def test_a_trial_asha_judges_at_its_rung_stays_running_in_the_views_as_rays(ray_cluster, storage: str, capsys):
    """Ray's ASHA never pauses a trial: it decides at the result, and a trial it stops at its rung is ``RUNNING``
    in ``on_trial_complete`` (h246's ``sbs2.py ray asha0``). fluidsalus's ASHA waits at the rung for its promotion
    (the engine's pause), which h242 told the views: ``PAUSED`` in the table, the steps' lists and the rung's
    ``on_trial_complete`` (``sbs2.py fs asha0``). Only the searchers that pause as Ray's scheduler does tell it."""
    statuses = _Statuses()
    reporter = CLIReporter(metric_columns=["loss"], parameter_columns=["lr"], max_report_frequency=0)
    tune.run(_rungs, config={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])}, metric="loss",
             mode="min", storage_path=storage, progress_reporter=reporter, callbacks=[statuses], verbose=1,
             scheduler=tune.schedulers.ASHAScheduler(time_attr="training_iteration", max_t=9, grace_period=1))
    assert "PAUSED" not in capsys.readouterr().out
    assert not any("PAUSED" in step.values() for step in statuses.steps), statuses.steps
    ended = [status for hook, _, status in statuses.hooks if hook == "complete"]
    assert len(ended) == 8 and set(ended) == {"RUNNING"}, statuses.hooks


def _checkpointed(config):
    import tempfile

    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "step")) as f:
            start = int(f.read())
    for step in range(start + 1, 10):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "step"), "w") as f:
                f.write(str(step))
            tune.report({"loss": config["lr"] / step}, checkpoint=tune.Checkpoint.from_directory(folder))


def test_a_trial_pbt_pauses_is_paused_then_pending_until_its_exploit_starts_as_rays(ray_cluster, storage: str):
    """Ray's PBT pauses a trial at its perturbation point and makes it ``PENDING`` when it goes on from a checkpoint
    (an exploit, or its turn), ``RUNNING`` once started (h242's ``sbs.py pbt``: ``00001:PAU`` then ``00001:PEN`` at
    the next step's end). fluidsalus's view of a trial restarted from its pause stayed ``PAUSED`` until its start
    (``RUNNING`` at h242's first change, which told only the pause at a result)."""
    statuses = _Statuses()
    tune.run(_checkpointed, config={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4])}, metric="loss", mode="min",
             storage_path=storage, callbacks=[statuses], verbose=0,
             scheduler=tune.schedulers.PopulationBasedTraining(
                 time_attr="training_iteration", perturbation_interval=3, hyperparam_mutations={"lr": [0.1, 0.2]}))
    pending_again = {tid for before, after in zip(statuses.ends, statuses.ends[1:], strict=False)
                     for tid, status in after.items() if before.get(tid) == "PAUSED" and status == "PENDING"}
    assert pending_again, statuses.steps
