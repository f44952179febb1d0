"""Ray Tune's progress reporters (``ray.tune.CLIReporter``, ``JupyterNotebookReporter``, ``ProgressReporter``).

``RunConfig(progress_reporter=CLIReporter(metric_columns=[...], parameter_columns=[...]))`` (or ``tune.run(...,
progress_reporter=...)``) prints a status table of the trials every ``max_report_frequency`` seconds and once at
the end, as Ray's legacy output does: the time, the trial counts by status, then one row per trial with its
status, the parameter columns and the metric columns of its last result, and a table of the errored trials.
With no metric columns given, the reporter shows Ray's default columns (``mean_accuracy`` as ``acc``,
``mean_loss``, ``training_iteration`` as ``iter``, ``time_total_s``, ``timesteps_total``, ``episode_reward_mean``)
and up to ``infer_limit`` other numeric metrics the trials report (kept once found, as Ray keeps them). As in
Ray, a metric column shows only once a trial has a value for it, and the run's metric is no column of its own (it
is in the "Current best trial" line):
with ``metric_columns`` given, those columns alone (an empty list or dict: Ray's defaults, nothing inferred; an
empty ``parameter_columns``: the default ones). A column ``"a/b"`` reads a nested result or config (``{"a": {"b":
...}}``), as does a run's metric ``"a/b"`` for the best trial and the sort. With ``sort_by_metric=True`` (and both
a metric and a mode) the terminated trials are sorted by the run's metric, below the running, paused and pending
ones, as Ray sorts them. Too many rows are cut to ``max_progress_rows``, shared fairly between the statuses as Ray's
fair filter shares them (the overflow line counts the rows left out by status); the table at the end (``done``) has
every row, and every errored trial, as Ray's has. With no ``parameter_columns`` the parameter columns are the
values the search drew (the keys of the trials' ``evaluated_params``, sorted), as Ray's. ``max_column_length``
shortens as Ray's: a longer header keeps its end, wrapped over two lines; a longer text cell keeps its start and
ends in ``_`` and 4 hex digits of the value's address.

Around the table are Ray's lines: under the time the scheduler's (:func:`scheduler_lines`, as Ray's
``scheduler.debug_string()``) and the run's resource usage (:func:`resource_line`, from its devices), given to
``report`` as ``sys_info`` by :class:`ReporterCallback`; ``Result logdir: <experiment folder>`` before the trial
counts; and the table's ``loc`` column, the ``<node ip>:<pid>`` of each trial's process (its last result's, or
where its attempt was placed, from its start). Under ASHA with a search algorithm (Optuna's successive halving
pruner runs it) the scheduler's lines are ASHA's, from the study; a subclass of ASHA or of the median rule with
hooks of its own prints its parent's lines, as Ray's.

Unlike Ray 2.60, whose default ("new") output engine ignores a ``progress_reporter`` with a warning unless
``RAY_AIR_NEW_OUTPUT=0``, fluidsalus always uses the reporter given (docs/compatibility.md).

A subclass of :class:`ProgressReporter` that overrides ``should_report(trials, done=False)`` and
``report(trials, done, *sys_info)`` is called the same way; its ``trials`` are
:class:`fluidsalus.tune.callback.TrialInfo` objects (``trial_id``, ``config``, ``last_result``, ``status``,
``error``, ... and ``str(trial)`` is the trial's name). Reports are made with ``RunConfig(verbose >= 1)``, as in
Ray.

The table is fluidsalus's own text rendering of Ray's columns, not Ray's exact layout (Ray draws it with
``tabulate``). ``JupyterNotebookReporter`` redraws the table in the notebook's cell when IPython is there
(``overwrite=True``) and prints it otherwise.
"""

from __future__ import annotations

import datetime
import inspect
import math
import numbers
import os
import platform
import sys
import textwrap
import time
import warnings
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from fluidsalus.errors import ConfigError, error_summary
from fluidsalus.progress import format_metric_column, is_table_number
from fluidsalus.result import lookup_metric
from fluidsalus.session import callers_stacklevel
from fluidsalus.tune.callback import Callback, _AfterTheResult

__all__ = ["CLIReporter", "JupyterNotebookReporter", "ProgressReporter", "ReporterCallback", "TuneReporterBase",
           "adopt_reporter"]

#: Ray's default metric columns, with their headers, in its order (each shown once a trial reports it; the four
#: well-known metrics were missing until 2026-12-01, and a ``mean_accuracy`` showed as an inferred ``mean_accuracy``
#: column after ``iter``, where Ray shows ``acc`` first).
DEFAULT_COLUMNS = {"mean_accuracy": "acc", "mean_loss": "loss", "training_iteration": "iter",
                   "time_total_s": "total time (s)", "timesteps_total": "ts", "episode_reward_mean": "reward"}
#: Result keys the session fills in, never inferred as user metrics; with Ray's other automatic keys, which its
#: reporter does not infer either (``episodes_total``, ``timesteps_since_restore``: inferred until 2026-12-01).
AUTO_FILLED = frozenset({
    "training_iteration", "time_this_iter_s", "time_total_s", "timestamp", "trial_id", "date", "done", "pid",
    "hostname", "time_since_restore", "iterations_since_restore", "checkpoint_dir_name", "config", "node_ip",
    "should_checkpoint", "episodes_total", "timesteps_since_restore",
})
#: The types of a result's value that Ray's reporter infers as a metric column (its ``VALID_SUMMARY_TYPES``: the
#: value's exact type, so not a bool, and None too).
INFERRED_TYPES = frozenset({int, float, np.float32, np.float64, np.int32, np.int64, type(None)})
#: Trial statuses in the order their rows come (running trials first, as Ray shows them).
_STATUS_ORDER = ("RUNNING", "PAUSED", "PENDING", "TERMINATED", "ERROR")


class ProgressReporter:
    """Base class of experiment progress reporters (``ray.tune.ProgressReporter``): override both methods."""

    def setup(self, start_time: float | None = None, total_samples: int | None = None, metric: str | None = None,
              mode: str | None = None, **kwargs: Any) -> None:
        """Called once before the first report, with the run's start time, samples, metric and mode."""

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        """Whether to call :meth:`report` now (``done``: the run has ended)."""
        raise NotImplementedError

    def report(self, trials: list[Any], done: bool, *sys_info: str) -> None:
        """Report the trials' progress (``sys_info``: lines about the system to show with it)."""
        raise NotImplementedError


class TuneReporterBase(ProgressReporter):
    """The table reporters' common part (``ray.tune.progress_reporter.TuneReporterBase``); see the module
    docstring. Arguments as :class:`CLIReporter`'s."""

    def __init__(
        self,
        *,
        metric_columns: list[str] | dict[str, str] | None = None,
        parameter_columns: list[str] | dict[str, str] | None = None,
        total_samples: int | None = None,
        max_progress_rows: int = 20,
        max_error_rows: int = 20,
        max_column_length: int = 20,
        max_report_frequency: int = 5,
        infer_limit: int = 3,
        print_intermediate_tables: bool | None = None,
        metric: str | None = None,
        mode: str | None = None,
        sort_by_metric: bool = False,
    ) -> None:
        owner = type(self).__name__
        for field, value in (("metric_columns", metric_columns), ("parameter_columns", parameter_columns)):
            if value is not None and not isinstance(value, (list, tuple, dict)):
                raise ConfigError(f"{owner}: {field} must be None, a list of keys or a dict key -> header (got "
                                  f"{type(value).__name__})")
        for field, value in (("max_progress_rows", max_progress_rows), ("max_error_rows", max_error_rows),
                             ("max_column_length", max_column_length), ("infer_limit", infer_limit)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{owner}: {field} must be an int >= 0 (got {value!r})")
        if not isinstance(max_report_frequency, numbers.Real) or max_report_frequency < 0:
            raise ConfigError(f"{owner}: max_report_frequency must be >= 0 seconds (got {max_report_frequency!r})")
        if mode not in (None, "min", "max"):
            raise ConfigError(f"{owner}: mode must be None, 'min' or 'max' (got {mode!r})")
        # (an empty list or dict of columns is Ray's default, as Ray reads it: its metric columns with nothing
        # inferred, and the default parameter columns; both were no column at all until 2026-12-01)
        self._metrics_override = metric_columns is not None
        self._metric_columns: list[str] | dict[str, str] = (
            (dict(metric_columns) if isinstance(metric_columns, dict) else list(metric_columns))
            if metric_columns else dict(DEFAULT_COLUMNS))
        self._parameter_columns: list[str] | dict[str, str] = (
            (dict(parameter_columns) if isinstance(parameter_columns, dict) else list(parameter_columns))
            if parameter_columns else [])
        self._parameters_override = bool(parameter_columns)
        self._total_samples = total_samples
        self._max_progress_rows = max_progress_rows
        self._max_error_rows = max_error_rows
        self._max_column_length = max_column_length
        self._max_report_frequency = float(max_report_frequency)
        self._infer_limit = infer_limit
        self._inferred: dict[str, str] = {}  # the metrics inferred so far (kept once infer_limit is reached)
        self._print_intermediate_tables = print_intermediate_tables
        self._metric = metric
        self._mode = mode
        self._sort_by_metric = bool(sort_by_metric)
        self._start_time = time.time()
        self._last_report_time = 0.0

    # ------------------------------------------------------------------ Ray's methods

    def setup(self, start_time: float | None = None, total_samples: int | None = None, metric: str | None = None,
              mode: str | None = None, **kwargs: Any) -> None:
        self.set_start_time(start_time)
        if total_samples is not None:  # the run's count, unless unknown (then the reporter's own stays)
            self.set_total_samples(total_samples)
        self.set_search_properties(metric=metric, mode=mode)

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        """Take the run's metric and mode, unless the reporter was given its own (then both is an error)."""
        if (self._metric and metric) or (self._mode and mode):
            raise ConfigError(f"{type(self).__name__}: the run has a metric/mode and this reporter was built with "
                              "its own; remove them from the reporter or from TuneConfig")
        self._metric = metric or self._metric
        self._mode = mode or self._mode
        return True

    def set_total_samples(self, total_samples: int | None) -> None:
        self._total_samples = total_samples

    def set_start_time(self, timestamp: float | None = None) -> None:
        self._start_time = time.time() if timestamp is None else timestamp

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        """Every ``max_report_frequency`` seconds, and at the end."""
        if time.time() - self._last_report_time > self._max_report_frequency:
            self._last_report_time = time.time()
            return True
        return done

    def add_metric_column(self, metric: str, representation: str | None = None) -> None:
        """Add a metric column (``representation``: its header, only with a dict of columns)."""
        self._add_column(self._metric_columns, "metric", metric, representation)
        self._metrics_override = True

    def add_parameter_column(self, parameter: str, representation: str | None = None) -> None:
        """Add a parameter column (``representation``: its header, only with a dict of columns)."""
        self._add_column(self._parameter_columns, "parameter", parameter, representation)
        self._parameters_override = True

    def _add_column(self, columns: list[str] | dict[str, str], what: str, key: str, header: str | None) -> None:
        if key in columns:
            raise ConfigError(f"{type(self).__name__}: the {what} column {key!r} exists already")
        if isinstance(columns, MutableMapping):
            columns[key] = header or key
        elif header is not None and header != key:
            raise ConfigError(f"{type(self).__name__}: a header for {key!r} needs a dict of {what} columns, "
                              "not a list")
        else:
            columns.append(key)

    # ------------------------------------------------------------------ the table

    def _progress_str(self, trials: Sequence[Any], done: bool, *sys_info: str) -> str:
        """The status text: header lines, the trial table and the error table (every row of both at the end,
        ``done``, as Ray's last table; they were cut to ``max_progress_rows`` and ``max_error_rows`` until
        2026-12-01)."""
        if self._sort_by_metric and not (self._metric and self._mode):
            warnings.warn(f"{type(self).__name__}: sort_by_metric needs both a metric and a mode (the reporter's or "
                          "TuneConfig's); the rows are not sorted", UserWarning, stacklevel=2)
            self._sort_by_metric = False  # (once, as Ray's)
        if not self._metrics_override and isinstance(self._metric_columns, dict):
            # at each report, shown or not, as Ray's; an inferred metric stays a column of this reporter, as in Ray
            self._metric_columns.update(self._infer(trials))
        now = time.time()
        elapsed = _duration(now - self._start_time)
        counts: dict[str, int] = {}
        for trial in trials:
            counts[trial.status] = counts.get(trial.status, 0) + 1
        # (by status name, as Ray's line: "2 PAUSED, 5 PENDING, 1 RUNNING"; in the rows' order, running first,
        # until h242, which a pending trial made visible)
        shown_counts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        total = f"{len(trials)}/{self._total_samples}" if self._total_samples else f"{len(trials)}"
        if self._total_samples and self._total_samples >= sys.maxsize:  # an endless search: Ray's word for it
            total = f"{len(trials)}/infinite"
        lines = ["== Status ==", f"Current time: {datetime.datetime.now():%Y-%m-%d %H:%M:%S} (running for {elapsed})",
                 *sys_info]
        best = self._best(trials)
        if best is not None:
            value = _lookup(best.last_result, self._metric)  # (in full, as Ray's line: str(value))
            lines.append(f"Current best trial: {best.trial_id} with {self._metric}={value} and parameters="
                         f"{self._best_parameters(best)}")
        if trials:  # (Ray's: each experiment folder of the trials, before their count)
            lines += [f"Result logdir: {folder}" for folder in _result_logdirs(trials)]
        lines.append(f"Number of trials: {total} ({shown_counts})")
        if trials and (done or self._print_intermediate_tables is not False):
            lines.append(self._trial_table(trials, done))
        errored = [t for t in trials if t.status == "ERROR"]
        if errored and (self._max_error_rows or done):
            lines.append(f"Number of errored trials: {len(errored)}")
            rows = [[str(t), str(t.num_failures), error_summary(t.error)]
                    for t in (errored if done else errored[:self._max_error_rows])]
            lines.append(_table(["Trial name", "# failures", "error"], rows))
        return "\n".join(lines) + "\n"

    def _columns(self, trials: Sequence[Any]) -> tuple[dict[str, str], dict[str, str]]:
        """The (key -> header) metric and parameter columns of a table of the rows of ``trials``."""
        metrics = (dict(self._metric_columns) if isinstance(self._metric_columns, dict)
                   else {key: key for key in self._metric_columns})
        # Ray's: only the columns a trial has a value for, and never the run's metric unless it is one of them (it
        # is in the "Current best trial" line); the run's metric was added as a column of its own until 2026-12-01
        metrics = {key: header for key, header in metrics.items()
                   if any(_lookup(t.last_result, key) is not None for t in trials)}
        if self._parameters_override:
            parameters = (dict(self._parameter_columns) if isinstance(self._parameter_columns, dict)
                          else {key: key for key in self._parameter_columns})
        else:  # Ray's: the values the search drew for the trials (the config keys whose values differed between the
            # trials until 2026-12-01, so one trial, or a value drawn the same for all, had no column)
            keys = sorted({key for t in trials for key in (getattr(t, "evaluated_params", None) or {})})
            parameters = {key: key for key in keys}
        return metrics, parameters

    def _infer(self, trials: Sequence[Any]) -> dict[str, str]:
        """The metrics inferred from the trials' last results, as Ray's reporter infers them: top-level keys (a
        nested one was inferred as ``eval/acc`` until 2026-12-01: give it in ``metric_columns``), none of Ray's
        default or automatic ones, with a value of Ray's summary types (:data:`INFERRED_TYPES`, None too, so a
        ``None`` takes a place, and its column shows once a trial has a value), in the order the trials report
        them, up to ``infer_limit``; once that many are found they are kept (a later report infers no other).
        Until 2026-12-01 the first ``infer_limit`` numbers of each report were inferred anew, none being None
        (h206's ``matrix.py`` cases ``infer None takes a slot``, ``sticky inference``)."""
        if len(self._inferred) >= self._infer_limit:
            return self._inferred
        self._inferred = {}
        for trial in trials:
            for key, value in (trial.last_result or {}).items():
                if key not in DEFAULT_COLUMNS and key not in AUTO_FILLED and type(value) in INFERRED_TYPES:
                    self._inferred[key] = key
                if len(self._inferred) >= self._infer_limit:
                    return self._inferred
        return self._inferred

    def _trial_table(self, trials: Sequence[Any], done: bool = False) -> str:
        sort = self._sort_by_metric and self._metric and self._mode
        sign = -1.0 if self._mode == "max" else 1.0

        def order(trial: Any) -> tuple[int, float]:
            # by status, running trials first; with sort_by_metric the terminated ones by the metric, as Ray's
            # (every trial was sorted by it, a running one below a finished one, until 2026-12-01)
            rank = _STATUS_ORDER.index(trial.status) if trial.status in _STATUS_ORDER else len(_STATUS_ORDER)
            return rank, (_sort_value(trial, str(self._metric), sign) if sort and trial.status == "TERMINATED"
                          else 0.0)

        ordered = sorted(trials, key=order)
        cut = bool(self._max_progress_rows) and not done and len(ordered) > self._max_progress_rows
        shown = _fair_rows(ordered, self._max_progress_rows) if cut else ordered
        # (the columns of the rows shown, as Ray's table picks them: a metric or drawn parameter that only the rows
        # past max_progress_rows have is no column; every trial's until 2026-12-01)
        metrics, parameters = self._columns(shown)
        length = self._max_column_length
        header = ["Trial name", "status", "loc", *[_wrapped_header(h, length) for h in parameters.values()],
                  *[_wrapped_header(h, length) for h in metrics.values()]]
        values = []
        for trial in shown:
            values.append([*[_short_cell(_lookup(trial.config, k), length) for k in parameters],
                           *[_short_cell(_lookup(trial.last_result, k), length) for k in metrics]])
        # (each column in one format, as Ray's table formats a column: not 1.2346e+06 beside 1234567.5)
        columns = [_column([row[i] for row in values]) for i in range(len(parameters) + len(metrics))]
        cells = list(zip(*columns, strict=True)) if columns else [() for _ in shown]
        rows = [[str(trial), trial.status, _location(trial), *row] for trial, row in zip(shown, cells, strict=True)]
        table = _table(header, rows)
        if len(shown) < len(trials):
            left: dict[str, int] = {}
            for trial in ordered:
                left[trial.status] = left.get(trial.status, 0) + 1
            for trial in shown:
                left[trial.status] -= 1
            by_status = ", ".join(f"{n} {status}" for status, n in left.items() if n)
            table += f"\n... {len(trials) - len(shown)} more trials not shown ({by_status})"
        return table

    def _best(self, trials: Sequence[Any]) -> Any:
        if not self._metric or self._mode not in ("min", "max"):
            return None
        metric = self._metric
        scored = [t for t in trials if _is_number(_lookup(t.last_result, metric))]
        if not scored:
            return None
        pick = max if self._mode == "max" else min
        return pick(scored, key=lambda t: _lookup(t.last_result, metric))

    def _best_parameters(self, trial: Any) -> dict[str, Any]:
        """The best trial's line's parameters, as Ray's: those of the parameter columns given, else the config's
        top-level keys, nested values as they are (the whole config, flattened, until 2026-12-01)."""
        config = trial.config or {}
        keys = list(self._parameter_columns) if self._parameters_override else list(config)
        return {key: _lookup(config, key) for key in keys}


class CLIReporter(TuneReporterBase):
    """Prints the status table to the terminal (``ray.tune.CLIReporter``; see the module docstring).

    Args:
        metric_columns: Result keys to show (a dict gives each a header); default: Ray's, plus inferred metrics.
        parameter_columns: Config keys to show (``"a/b"`` for nested ones); default: those the search drew.
        total_samples: Trials the run will have (shown as ``n/total``).
        max_progress_rows: Most trial rows (running trials first).
        max_error_rows: Most rows of the error table.
        max_column_length: Widest header line and longest text cell (0: no limit).
        max_report_frequency: Seconds between reports.
        infer_limit: Most metrics inferred when ``metric_columns`` is None.
        print_intermediate_tables: False: only the header lines until the end.
        metric: The metric of "Current best trial" (default: the run's).
        mode: ``"min"`` or ``"max"`` (default: the run's).
        sort_by_metric: Sort the rows by ``metric``.
    """

    def _print(self, message: str) -> None:
        print(message, flush=True)

    def report(self, trials: list[Any], done: bool, *sys_info: str) -> None:
        self._print(self._progress_str(trials, done, *sys_info))


class JupyterNotebookReporter(TuneReporterBase):
    """Shows the status table in a notebook (``ray.tune.JupyterNotebookReporter``), redrawn in place when
    ``overwrite`` and IPython is there; otherwise printed. Other arguments as :class:`CLIReporter`'s."""

    def __init__(self, *, overwrite: bool = True, metric_columns: list[str] | dict[str, str] | None = None,
                 parameter_columns: list[str] | dict[str, str] | None = None, total_samples: int | None = None,
                 max_progress_rows: int = 20, max_error_rows: int = 20, max_column_length: int = 20,
                 max_report_frequency: int = 5, infer_limit: int = 3, print_intermediate_tables: bool | None = None,
                 metric: str | None = None, mode: str | None = None, sort_by_metric: bool = False) -> None:
        super().__init__(metric_columns=metric_columns, parameter_columns=parameter_columns,
                         total_samples=total_samples, max_progress_rows=max_progress_rows,
                         max_error_rows=max_error_rows, max_column_length=max_column_length,
                         max_report_frequency=max_report_frequency, infer_limit=infer_limit,
                         print_intermediate_tables=print_intermediate_tables, metric=metric, mode=mode,
                         sort_by_metric=sort_by_metric)
        self._overwrite = bool(overwrite)

    def report(self, trials: list[Any], done: bool, *sys_info: str) -> None:
        text = self._progress_str(trials, done, *sys_info)
        try:
            from IPython.display import clear_output
        except ImportError:
            clear_output = None
        if self._overwrite and clear_output is not None:
            clear_output(wait=True)
        print(text, flush=True)


class ReporterCallback(Callback, _AfterTheResult):
    """Runs a progress reporter on the Ray-style callback hooks: ``should_report`` after each trial event,
    ``report`` when it says so, and a last ``report(done=True)`` at the end of the experiment.

    As Ray's, ``report`` gets two lines of system information after ``done``: the scheduler's
    (:func:`scheduler_lines` of ``searcher``) and the run's resource usage (:func:`resource_line`, of the run in
    progress on this thread, :func:`~fluidsalus.trialgroup.executor.runs_in_progress`, taken for each report and
    at each trial's start; at the end, once the run has let its devices go, their totals with nothing used). A
    reporter whose ``report`` takes no ``*sys_info`` is called ``report(trials, done)``, with a warning here.

    Args:
        reporter: The progress reporter.
        searcher: The run's searcher, whose state gives the scheduler's lines.
        scheduler: ``TuneConfig.scheduler`` as fluidsalus runs it (Ray's own translated; None: Ray's FIFO line,
            unless the searcher has lines of its own).
    """

    def __init__(self, reporter: Any, searcher: Any = None, scheduler: Any = None) -> None:
        self.reporter = reporter
        self.searcher = searcher
        self.scheduler = scheduler
        self._usage: Any = None  # the run's resource usage when last seen
        self._run: Any = None  # the run's executor, once seen
        self._sys_info = _takes_sys_info(reporter)
        if not self._sys_info:  # (it worked before 2026-12-01, when fluidsalus passed no sys_info)
            warnings.warn(f"fluidsalus.tune: {type(reporter).__name__}.report takes no *sys_info: Ray's "
                          "ProgressReporter is called report(trials, done, *sys_info), with the scheduler's and the "
                          "resource usage lines (Ray's legacy output raises a TypeError here); fluidsalus calls it "
                          "with trials and done only. Define report(self, trials, done, *sys_info) to get them.",
                          UserWarning, stacklevel=callers_stacklevel())

    def _look_at_usage(self, done: bool) -> None:
        """Take the run's resource usage now; once the run is over (its devices let go), their totals, unused. The
        run is the innermost in progress at the first event (a run nested in another's callback ends inside it: its
        last report showed the outer run's usage until h226)."""
        from fluidsalus.trialgroup.executor import ResourceUsage, runs_in_progress

        runs = runs_in_progress()
        if self._run is None and runs and not done:
            self._run = runs[-1]
        live = self._run is not None and any(run is self._run for run in runs)
        usage = self._run.resource_usage() if live else None
        if usage is None and self._usage is not None:
            usage = ResourceUsage(0.0, self._usage.total_cpus, 0.0, self._usage.total_gpus)
        self._usage = usage

    def _maybe_report(self, trials: list[Any], done: bool = False, look: bool = False) -> None:
        # The usage is taken for a report, and at a trial's start (``look``), which gives the end's report the
        # devices' totals; not at every result: it walks every device's lanes (h226).
        reporting = self.reporter.should_report(trials, done=done)
        if reporting or look:
            self._look_at_usage(done)
        if not reporting:
            return
        if self._sys_info:
            self.reporter.report(trials, done, scheduler_lines(self.searcher, trials, self.scheduler),
                                 resource_line(self._usage))
        else:
            self.reporter.report(trials, done)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._maybe_report(trials, look=True)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self._maybe_report(trials)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._maybe_report(trials)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._maybe_report(trials)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self._maybe_report(trials, done=True)


# ---------------------------------------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------------------------------------


#: Seconds in a day: Ray's "running for" counts whole days apart (``1 days, 02:03:04.00``).
_DAY_S = 24 * 60 * 60


def _duration(seconds: float) -> str:
    """``hh:mm:ss.ss``, after ``<n> days, `` from a day on, as Ray shows how long a run has been going (until
    2026-12-01 the hours went on counting: ``26:03:04.00``)."""
    days, rest = divmod(max(seconds, 0.0), float(_DAY_S))
    minutes, secs = divmod(rest, 60.0)
    hours, minutes = divmod(int(minutes), 60)
    return (f"{days:.0f} days, " if days > 0 else "") + f"{hours:02d}:{minutes:02d}:{secs:05.2f}"


def _location(trial: Any) -> str:
    """The ``loc`` cell of a trial, as Ray's (``_Location``): ``<node ip>:<pid>`` of the process that ran it (its
    device actor's), from its last result, else where its latest attempt was placed
    (:attr:`~fluidsalus.tune.callback.TrialInfo.location`, from its start, whatever its status since: Ray's
    ``trial.last_result`` before a result is its actor's auto-filled metrics, its ``node_ip`` and ``pid``, kept
    once the trial ends or waits for a retry; empty until the first result until h232, and for an ended trial
    with no result until h237); ``pid=<pid>`` where the node's name is this machine's (Ray
    compares the IP with ``platform.node()``); empty for a trial never placed."""
    result = getattr(trial, "last_result", None) or {}
    node, pid = result.get("node_ip"), result.get("pid")
    if not (node and pid):
        node, pid = getattr(trial, "location", None) or (None, None)
    if not (node and pid):
        return ""
    return f"pid={pid}" if node == platform.node() else f"{node}:{pid}"


def _result_logdirs(trials: Sequence[Any]) -> list[str]:
    """The experiment folders of the trials (those of their own folders), sorted: Ray's "Result logdir" lines."""
    folders = set()
    for trial in trials:
        path = str(getattr(trial, "path", "") or "")
        if path:
            folders.add(os.path.dirname(path.rstrip(os.sep)))
    return sorted(folders)


def resource_line(usage: Any) -> str:
    """Ray's ``Logical resource usage: 2.0/4 CPUs, 0/0 GPUs`` line from a run's
    :class:`~fluidsalus.trialgroup.executor.ResourceUsage` (its devices' cores and GPUs, and the share its running
    trials' lanes use); Ray's ``Logical resource usage: ?`` while there is none yet. A used amount shows as a float
    (``0`` when nothing is used), a total as a whole number where it is one, as Ray shows them."""
    if usage is None:
        return "Logical resource usage: ?"
    return (f"Logical resource usage: {_used(usage.used_cpus)}/{_total(usage.total_cpus)} CPUs, "
            f"{_used(usage.used_gpus)}/{_total(usage.total_gpus)} GPUs")


def _used(amount: float) -> str:
    return str(float(amount)) if amount else "0"


def _total(amount: float) -> str:
    return str(int(amount)) if float(amount).is_integer() else str(float(amount))


#: Ray's scheduler line of a run without a scheduler (``FIFOScheduler.debug_string()``).
FIFO_LINE = "Using FIFO scheduling algorithm."


def scheduler_lines(searcher: Any, trials: Sequence[Any], scheduler: Any = None) -> str:
    """The scheduler's lines of a status report, as Ray's ``scheduler.debug_string()``: a ``debug_string()`` the
    user's scheduler class defines; else those of the run's searcher that carries the scheduler's state (ASHA's
    rungs and cutoffs, HyperBand's brackets, the median rule's count: their ``debug_string(statuses)``, the searcher
    itself, the built-in rule a subclass's ``super()`` asks (its ``rule``), or one it wraps, ``inner``), or, under
    ASHA, the Optuna search whose successive halving pruner runs it (its ``successive_halving_lines``); else the
    ``TuneConfig`` scheduler's own (Ray's FIFO line for none). A
    ``ResourceChangingScheduler``'s are its base scheduler's after ``(ResourceChangingScheduler)``, as Ray's."""
    from fluidsalus.tune.schedulers import AsyncHyperBandScheduler, ResourceChangingScheduler

    if isinstance(scheduler, ResourceChangingScheduler):  # (Ray's: its base scheduler's lines, named)
        return f"(ResourceChangingScheduler) {scheduler_lines(searcher, trials, scheduler.base_scheduler)}"
    own = str(getattr(getattr(type(scheduler), "debug_string", None), "__module__", "") or "")
    if scheduler is not None and own and not own.startswith("fluidsalus."):
        try:
            return str(scheduler.debug_string())
        except NotImplementedError:  # (Ray's base TrialScheduler's: a class of one's own without lines)
            return repr(scheduler)
    statuses = {str(t.trial_id): str(t.status) for t in trials}
    while searcher is not None:
        describe = getattr(searcher, "debug_string", None)
        if callable(describe):
            return str(describe(statuses))
        # (a subclass of ASHA or the median rule with hooks of its own: the built-in rule its super() asks, whose
        # lines Ray's parent class prints; its repr until h232)
        describe = getattr(getattr(getattr(searcher, "rule", None), "searcher", None), "debug_string", None)
        if callable(describe):
            return str(describe(statuses))
        halving = getattr(searcher, "successive_halving_lines", None)
        if callable(halving) and isinstance(scheduler, AsyncHyperBandScheduler):
            # (ASHA with a search algorithm runs as Optuna's pruner: Ray's ASHA lines from the study; the
            # scheduler's repr until h232)
            # (a stop rule ends a trial at max_t, and the search only learns its end: the trials' results tell)
            at_max_t = [str(t.trial_id) for t in trials if scheduler.stop_last_trials and _is_number(
                _lookup(t.last_result, scheduler.time_attr)) and _lookup(t.last_result, scheduler.time_attr)
                >= scheduler.max_t]
            lines = halving(scheduler.grace_period, scheduler.max_t, scheduler.reduction_factor, at_max_t)
            if lines is not None:
                return str(lines)
        searcher = getattr(searcher, "inner", None)
    return FIFO_LINE if scheduler is None else str(scheduler.debug_string())


def _takes_sys_info(reporter: Any) -> bool:
    """Whether ``reporter.report`` takes Ray's ``(trials, done, *sys_info)`` (one of fluidsalus's own before
    2026-12-01 could take ``(trials, done)`` only); True when its signature cannot be read."""
    try:
        inspect.signature(reporter.report).bind([], False, "", "")
    except TypeError:
        return False
    except (ValueError, AttributeError):
        return True
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _sort_value(trial: Any, metric: str, sign: float) -> float:
    value = _lookup(trial.last_result, metric)
    return sign * float(value) if _is_number(value) and not math.isnan(value) else math.inf


def _fair_rows(ordered: Sequence[Any], rows: int) -> list[Any]:
    """At most ``rows`` of the trials (in the table's order), shared fairly between their statuses as Ray's fair
    filter shares them: one more row in turn to each status, by name, that has trials left, each status keeping its
    first trials. The rows were the first ``rows`` trials in status order until 2026-12-01, so 20 pending trials
    hid every finished one. Unlike Ray's, the rows never pass ``rows``: Ray's finishes its last turn, so 4 rows
    among 3 statuses with 2 trials or more each show 6 (and its overflow line counts ``len(trials) - rows``)."""
    counts: dict[str, int] = {}
    for trial in ordered:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    share = dict.fromkeys(counts, 0)
    left = rows
    while left > 0 and any(share[status] < counts[status] for status in counts):
        for status in sorted(counts):
            if left > 0 and share[status] < counts[status]:
                share[status] += 1
                left -= 1
    kept: list[Any] = []
    for trial in ordered:
        if share[trial.status] > 0:
            share[trial.status] -= 1
            kept.append(trial)
    return kept


def _lookup(mapping: Mapping[str, Any] | None, key: str) -> Any:
    """``mapping[key]``, or for a key ``"a/b"`` that it does not hold ``mapping["a"]["b"]``, as Ray's reporter reads a
    column or its metric (:func:`~fluidsalus.result.lookup_metric`); None where there is none."""
    return lookup_metric(mapping or {}, key)


def _column(values: Sequence[Any]) -> list[str]:
    """A column of the table's cells as Ray's table (tabulate) gives it
    (:func:`~fluidsalus.progress.format_metric_column`): its numbers in one format, Ray's 6 significant digits (a
    bool beside a float as its number, ``1``; a column of bools ``True``), another value as it is, empty for a
    missing one. A column with a value that is no number (a string that does not read as one, a list) is a column
    of text in tabulate: each value as ``str()`` gives it (``0.99999999`` beside ``"auto"``, not ``1``)."""
    if any(v is not None and not _reads_as_number(v) for v in values):
        return ["" if v is None else str(v) for v in values]
    return format_metric_column(["" if v is None else v for v in values])


def _reads_as_number(value: Any) -> bool:
    """Whether tabulate's column type takes the value as a number (a NumPy scalar and a numeric string too)."""
    if isinstance(value, (str, bytes)):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return is_table_number(value)


#: The most lines a long header is wrapped over (Ray's): past ``2 * max_column_length`` characters its start is cut.
HEADER_LINES = 2
#: What stands for the cut start of a long header (Ray's).
ELLIPSIS = "..."
#: Hex digits of the value's ``id`` that end a shortened text cell (Ray's ``_<addr>``, telling apart objects whose
#: text starts alike).
ADDRESS_DIGITS = 4


def _wrapped_header(text: str, length: int) -> str:
    """A column's header at most ``length`` characters wide, as Ray's table has it: a longer one keeps its end
    (its start cut to ``...`` past ``HEADER_LINES * length`` characters) and is wrapped over lines of ``length``
    (``textwrap``, as Ray's; a header with spaces may take more lines). ``length`` 0: as it is (Ray's textwrap
    refuses a width of 0). Until 2026-12-01 a long header kept its start, cut as ``val...``."""
    if not length or len(text) <= length:
        return text
    most = HEADER_LINES * length
    if len(text) > most:
        text = ELLIPSIS + text[len(text) - max(most - len(ELLIPSIS), 0):]
    return "\n".join(textwrap.wrap(text, width=length)) or text


def _short_cell(value: Any, length: int) -> Any:
    """A parameter or metric cell's value as Ray's table has it: a number, a bool or None as it is; the text of
    another value longer than ``length`` shortened to its first ``length - 5`` characters and ``_`` with the last
    ``ADDRESS_DIGITS`` hex digits of the value's ``id``, as Ray's reporter shortens it (``length`` 0: never).
    Until 2026-12-01 a long value was shown in full."""
    if value is None or isinstance(value, numbers.Number) or not length:
        return value
    text = str(value)
    if len(text) <= length:
        return value
    kept = max(length - 1 - ADDRESS_DIGITS, 0)
    return f"{text[:kept]}_{hex(id(value))[-ADDRESS_DIGITS:]}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A plain text table with a rule under the header; a header cell of several lines (a wrapped header) takes
    as many lines of the header as it has."""
    heads = [cell.split("\n") for cell in header]
    widths = [max(len(text) for text in [*heads[i], *(row[i] for row in rows)]) for i in range(len(header))]
    rule = "+-" + "-+-".join("-" * w for w in widths) + "-+"

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)) + " |"

    depth = max((len(lines) for lines in heads), default=1)
    head_lines = [line([lines[k] if k < len(lines) else "" for lines in heads]) for k in range(depth)]
    return "\n".join([rule, *head_lines, rule, *[line(row) for row in rows], rule])


def adopt_reporter(value: Any) -> Any:
    """``RunConfig.progress_reporter`` as a reporter fluidsalus can call.

    Ray's own ``CLIReporter`` / ``JupyterNotebookReporter`` (an import left unchanged) become this module's, with
    their settings, since their tables read Ray's ``Trial`` objects; any other object with ``should_report`` and
    ``report`` methods (a subclass of either ``ProgressReporter``) is used as it is.

    Raises:
        ConfigError: An object that is not a progress reporter.
    """
    if value is None or isinstance(value, ProgressReporter):
        return value
    ray_class = next((cls.__name__ for cls in type(value).__mro__ if cls.__module__.startswith("ray.")), None)
    if ray_class in ("CLIReporter", "JupyterNotebookReporter") and type(value).__name__ == ray_class:
        kwargs = {"metric_columns": getattr(value, "_metric_columns", None) if getattr(
                      value, "_metrics_override", True) else None,
                  "parameter_columns": getattr(value, "_parameter_columns", None) or None}
        for name in ("total_samples", "max_progress_rows", "max_error_rows", "max_column_length", "infer_limit",
                     "print_intermediate_tables", "metric", "mode", "sort_by_metric"):
            if hasattr(value, f"_{name}"):
                kwargs[name] = getattr(value, f"_{name}")
        if hasattr(value, "_max_report_freqency"):  # Ray's spelling
            kwargs["max_report_frequency"] = value._max_report_freqency
        warnings.warn(f"fluidsalus.tune: progress_reporter is Ray Tune's {ray_class}; it was translated into "
                      f"fluidsalus.tune.{ray_class}. Change the import to `from fluidsalus.tune import {ray_class}`.",
                      UserWarning, stacklevel=3)
        return (CLIReporter if ray_class == "CLIReporter" else JupyterNotebookReporter)(**kwargs)
    if callable(getattr(value, "should_report", None)) and callable(getattr(value, "report", None)):
        return value
    raise ConfigError(f"RunConfig: progress_reporter must be None or a fluidsalus.tune.ProgressReporter such as "
                      f"CLIReporter (got {type(value).__name__})")
