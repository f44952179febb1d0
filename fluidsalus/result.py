"""``ResultGrid`` and ``Result``, with Ray Tune's API, read from an experiment's store."""

from __future__ import annotations

import collections
import datetime
import logging
import math
import numbers
import os
import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError, StoreError, trial_failure
from fluidsalus.session import AUTO_RESULT_KEYS, DATE_FORMAT, DEFAULT_METRIC, with_config
from fluidsalus.store import (
    ERROR,
    ERROR_PICKLE_FILE,
    TERMINATED,
    TRIAL_RESTART_EVENT,
    ExperimentStore,
    open_readonly,
)

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)


def _error_pickle(trial_dir: str) -> bytes | None:
    """The exception that ended a trial, pickled, as the error file of its folder (``error.pkl``) keeps it; None
    when the folder has none, or one that cannot be read. The store keeps the error's text and traceback; the
    exception itself, with the classes of the user's code it may need, is only pickled there, as in Ray's
    folders."""
    try:
        with open(os.path.join(trial_dir, ERROR_PICKLE_FILE), "rb") as f:
            recorded = pickle.load(f)
    except Exception:  # noqa: BLE001 - a file of an older fluidsalus, half-copied, unreadable: no cause, no failure
        return None
    blob = getattr(recorded, "cause_pickle", None)
    return blob if isinstance(blob, bytes) else None


class NotATrialFolderError(ConfigError, RuntimeError):
    """``Result.from_path`` of a folder that is no trial folder of a fluidsalus experiment (missing, or another
    folder): a :class:`ConfigError` that is also the ``RuntimeError`` Ray's ``Result.from_path`` raises there
    ("Trial folder ... doesn't exist!", or that the folder has no results)."""


def _local_filesystem() -> Any:
    """pyarrow's local filesystem: what Ray's ``filesystem`` properties give for a local folder."""
    try:
        from pyarrow import fs
    except ImportError:
        raise ConfigError("filesystem: needs pyarrow (pip install pyarrow; ray[tune] installs it)") from None
    return fs.LocalFileSystem()


#: The scopes ``get_best_result`` accepts, as in Ray Tune.
SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")
MODES = ("min", "max")
#: Separator of nested result keys in flattened names (Ray's default ``TUNE_RESULT_DELIM``).
DELIMITER = "/"
#: Result keys a :class:`Result`'s repr leaves out, as Ray's does (``ray.tune.result.AUTO_RESULT_KEYS`` and the
#: keys its console output hides): what the engine fills in, so that the trial's own metrics show.
REPR_HIDDEN_KEYS: frozenset[str] = AUTO_RESULT_KEYS | {
    "config", "experiment_tag", "should_checkpoint", "episodes_total", "timesteps_total", "timesteps_since_restore",
    "_report_on"}


@dataclass(init=False)
class Result:
    """The outcome of one trial.

    Built by the engine from the store; a user may build one too, with Ray's constructor: ``Result(metrics,
    checkpoint, error, path, metrics_dataframe=None, best_checkpoints=None, _storage_filesystem=None)``.

    Attributes:
        metrics: The trial's last reported result (with ``config``, as in Ray Tune), or None.
        checkpoint: Its latest persisted checkpoint, or None.
        error: A :class:`TrialError` with the trial's traceback if it failed, else None.
        path: The trial's folder in the experiment.
        best_checkpoints: ``(checkpoint, metrics)`` of the trial's best persisted checkpoints, worst first, as in
            Ray: by ``checkpoint_score_attribute`` (else by recency, oldest first), at most ``num_to_keep`` (the
            latest checkpoint, which is always kept, counts only if it is one of them).
        metrics_dataframe: Every result of the trial, one row per iteration, as Ray builds it from a trial's
            ``result.json``: nested metrics flattened to ``"a/b"`` columns, and the configuration each result was
            reported with as ``config/...`` columns (under PBT it changes at an exploit). Empty if it reported
            nothing, as Ray's; None for a ``Result`` built by hand without a frame, as Ray's.
    """

    metrics: dict[str, Any] | None
    checkpoint: Checkpoint | None
    error: Exception | None
    path: str
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] | None = None
    trial_id: str = ""
    status: str = TERMINATED
    _history: list[dict[str, Any]] | None = None
    _config: dict[str, Any] | None = None  # the trial's configuration, also when it reported nothing
    _row_configs: list[dict[str, Any]] | None = None  # the configuration of each row of ``_history``
    _num_failures: int = 0
    _trainable_name: str = ""
    _started: bool = False  # whether the trial started (one that reported nothing then has an empty frame)
    _trial_name: str | None = None  # the name the run gave it (a Ray trial_name_creator's), if any
    _frame: pd.DataFrame | None = field(default=None, compare=False, repr=False)  # one given to the constructor

    def __init__(self, metrics: dict[str, Any] | None, checkpoint: Checkpoint | None, error: Exception | None,
                 path: str, metrics_dataframe: pd.DataFrame | None = None,
                 best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] | None = None,
                 _storage_filesystem: Any = None, *, trial_id: str = "", status: str = TERMINATED,
                 _history: list[dict[str, Any]] | None = None, _config: dict[str, Any] | None = None,
                 _row_configs: list[dict[str, Any]] | None = None, _num_failures: int = 0,
                 _trainable_name: str = "", _started: bool = False, _trial_name: str | None = None,
                 _frame: pd.DataFrame | None = None) -> None:
        """Ray's positional order (``metrics_dataframe`` fifth); the keywords after ``*`` are the engine's.

        Raises:
            ConfigError: ``_storage_filesystem`` is set (the folder must be local or mounted).
        """
        if _storage_filesystem is not None:
            raise ConfigError("Result: _storage_filesystem is not supported by fluidsalus (the trial folder must be "
                              "local or mounted)")
        self.metrics, self.checkpoint, self.error, self.path = metrics, checkpoint, error, path
        self.best_checkpoints, self.trial_id, self.status = best_checkpoints, trial_id, status
        metrics_dataframe = _frame if metrics_dataframe is None else metrics_dataframe  # (dataclasses.replace)
        if metrics_dataframe is not None and _history is None:
            # its rows are what a grid scores and lists (get_best_result's scopes, get_dataframe), as Ray reads
            # them from this frame; a frame's rows are flat, and flattened names are looked up as nested ones
            _history = metrics_dataframe.to_dict("records")
            _started = True
        self._history, self._config, self._row_configs = _history, _config, _row_configs
        self._num_failures, self._trainable_name = _num_failures, _trainable_name
        self._started, self._trial_name = _started, _trial_name
        self._frame = metrics_dataframe

    @property
    def metrics_dataframe(self) -> pd.DataFrame | None:
        """Every result of the trial, one row per iteration (built when asked for; see the class docstring): empty
        when it reported nothing, or never started (as Ray's); the frame given to the constructor if one was, and
        None for a ``Result`` built by hand without one (Ray's default)."""
        import pandas as pd

        if self._frame is not None:
            return self._frame
        if self._history is None:  # (built by hand without a frame: the engine's results always have a history)
            return None
        if not self._history:
            return pd.DataFrame()

        configs = self._row_configs or [self._config or {}] * len(self._history)
        # As Ray reads a trial's result.json: each row's top-level values first, then its nested ones flattened.
        return pd.json_normalize([with_config(metrics, config) for metrics, config in
                                  zip(self._history, configs, strict=True)], sep=DELIMITER)

    @property
    def config(self) -> dict[str, Any] | None:
        """The trial's configuration."""
        return None if self.metrics is None else self.metrics.get("config")

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint | None:
        """The persisted checkpoint whose result is best for ``metric`` in ``mode`` (Ray's rules and errors).

        Args:
            metric: A key of the checkpoints' results; a flattened name (``"info/loss"``) reads a nested one.
            mode: ``"min"`` or ``"max"``.

        Returns:
            The checkpoint, or None if the metric is in their results but no value of it is a number other than
            NaN (an infinity counts, as in Ray; a NaN is never the best: Ray's pick among NaNs depends on their
            order).

        Raises:
            RuntimeError: The trial kept no checkpoint, or none of their results has the metric (Ray's messages).
            ValueError: A bad mode.
        """
        if not self.best_checkpoints:
            raise RuntimeError("No checkpoint exists in the trial directory!")
        _check_mode(mode)
        values = [(c, lookup_metric(m, metric)) for c, m in self.best_checkpoints]
        if all(value is None for _, value in values):
            raise RuntimeError(f"Invalid metric name {metric}! You may choose from the following metrics: "
                               f"{(self.metrics or {}).keys()}.")
        scored = [(c, value) for c, value in values if is_number(value) and not math.isnan(value)]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda cm: cm[1])[0]

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], storage_filesystem: Any = None) -> Result:
        """The result of the trial whose folder is ``path`` (``ray.tune.Result.from_path``).

        A trial's folder lies in its experiment's folder, whose store holds the trial's results, checkpoints
        and error; the trial is the one whose id is the folder's name.

        Args:
            path: The trial's folder (``<storage_path>/<experiment>/<trial_id>``).
            storage_filesystem: Not supported (must be None): the folder is local or mounted.

        Returns:
            The trial's :class:`Result`.

        Raises:
            ConfigError: If ``storage_filesystem`` is set.
            NotATrialFolderError: ``path`` is not a trial folder of a fluidsalus experiment (the message says which
                part is missing): a ``ConfigError`` that is also the ``RuntimeError`` Ray raises there.
            RuntimeError: If the trial never started (Ray's error: its folder has no results).
        """
        if storage_filesystem is not None:
            raise ConfigError("Result.from_path: storage_filesystem is not supported by fluidsalus (the trial "
                              "folder must be local or mounted)")
        folder = os.path.abspath(os.path.expanduser(os.fspath(path)))
        experiment_dir, dirname = os.path.split(folder)
        missing = f"Trial folder {folder} doesn't exist!"  # Ray's message for a folder that is not there
        try:
            grid = ResultGrid.read(experiment_dir)
        except StoreError as e:
            raise NotATrialFolderError((f"{missing} " if not os.path.exists(folder) else "Result.from_path: ")
                                       + f"{folder!r} is not a trial folder of a fluidsalus experiment: {e}") from None
        for result in grid:
            if os.path.basename(result.path) == dirname:
                if not result._started and not result._history:
                    raise RuntimeError("Failed to restore the Result object: Neither result.json nor progress.csv "
                                       "exists in the trial folder!")
                return result
        raise NotATrialFolderError((f"{missing} " if not os.path.exists(folder) else "Result.from_path: ")
                                   + f"the experiment {experiment_dir!r} has no trial folder {dirname!r} (its "
                                   f"trials' folders: {[os.path.basename(r.path) for r in grid]})")

    @property
    def filesystem(self) -> Any:
        """The filesystem of :attr:`path` (``pyarrow.fs.LocalFileSystem``, as Ray gives for a local folder)."""
        return _local_filesystem()

    def _repr(self, indent: int = 0) -> str:
        """Ray's layout: one attribute per line, the error by its type, only the trial's own metrics."""
        shown: dict[str, Any] = {}
        if self.error is not None:
            shown["error"] = type(self.error).__name__
        shown["metrics"] = None if self.metrics is None else {
            k: v for k, v in self.metrics.items() if k not in REPR_HIDDEN_KEYS}
        shown["path"] = self.path
        shown["filesystem"] = "local"
        shown["checkpoint"] = self.checkpoint
        pad, inner = " " * indent, " " * (indent + 2)
        body = ",\n".join(f"{inner}{key}={value!r}" for key, value in shown.items())
        return f"{pad}Result(\n{body}\n{pad})"

    def __repr__(self) -> str:
        return self._repr()


class ResultGrid:
    """All trials of an experiment (``ray.tune.ResultGrid``'s API).

    Args:
        results: One :class:`Result` per trial, in trial order; or, as Ray's constructor takes it, a
            ``fluidsalus.tune.ExperimentAnalysis`` (``ResultGrid(analysis)``: its trials' results, its folder and
            its default metric and mode).
        experiment_path: The experiment folder (not with an analysis).
        metric: Default metric for :meth:`get_best_result`.
        mode: Default mode for :meth:`get_best_result`.
        experiment_analysis: Ray's keyword for the analysis, instead of ``results``.

    Raises:
        TypeError: Neither an analysis nor results with their ``experiment_path``.
    """

    def __init__(self, results: list[Result] | Any = None, experiment_path: str | None = None,
                 metric: str | None = None, mode: str | None = None, *, experiment_analysis: Any = None) -> None:
        analysis = experiment_analysis if experiment_analysis is not None else results
        self._analysis: Any = None
        if experiment_path is None and hasattr(analysis, "trials") and hasattr(analysis, "experiment_path"):
            results = [trial._result for trial in analysis.trials]
            experiment_path = analysis.experiment_path
            metric, mode = analysis.default_metric, analysis.default_mode
            self._analysis = analysis
        elif results is None or experiment_path is None:
            raise TypeError("ResultGrid: give an ExperimentAnalysis (ResultGrid(analysis), as in Ray), or the results "
                            "and their experiment_path")
        self._results = results
        self.experiment_path = experiment_path
        self._metric = metric
        self._mode = mode

    @property
    def _experiment_analysis(self) -> Any:
        """Ray's attribute: the grid's ``fluidsalus.tune.ExperimentAnalysis`` (the one it was built from, else one
        of its results, made when first asked for, with the run's metric and mode as its defaults), whose
        ``trials`` are Ray's ``Trial`` views of the results (``evaluated_params``, ``metric_analysis``, ...)."""
        if self._analysis is None:
            from fluidsalus.tune.analysis import ExperimentAnalysis  # (the Tune front end imports this module)

            self._analysis = ExperimentAnalysis.of_results(self.experiment_path, list(self._results),
                                                           default_metric=self._metric, default_mode=self._mode)
        return self._analysis

    @classmethod
    def read(cls, experiment_dir: str | os.PathLike[str]) -> ResultGrid:
        """The results an experiment's store holds, read without writing (safe on a running experiment).

        Raises:
            StoreError: If there is no fluidsalus store in ``experiment_dir``.
        """
        store = open_readonly(experiment_dir)  # (creating nothing: a store on a read-only disk failed to open)
        try:
            return cls.from_store(store)
        finally:
            store.close()

    @property
    def filesystem(self) -> Any:
        """The filesystem of :attr:`experiment_path` (``pyarrow.fs.LocalFileSystem``, as in Ray)."""
        return _local_filesystem()

    @classmethod
    def from_store(cls, store: ExperimentStore,
                   last_results: Mapping[str, Mapping[str, Any]] | None = None,
                   configs: Mapping[str, Mapping[str, Any]] | None = None) -> ResultGrid:
        """Build the grid from an experiment's store (works on a running experiment too).

        Args:
            store: The experiment's store.
            last_results: Trials' last results as they were reported, by trial id, for those the store holds in
                JSON: the run that just ended gives them, so that ``Result.metrics`` keeps the objects the
                trials reported (NumPy scalars and arrays), as Ray's does; a grid read from disk has JSON's.
            configs: Trials' configurations as the search gave them, by trial id: the run that just ended gives
                them, so that ``Result.config`` keeps a class, a function or a tuple of the search space (as Ray's
                does: ``model(**result.config)``). None: the store's, which keeps those that JSON cannot hold
                pickled beside it (``ExperimentStore.configs``).
        """
        exp = store.experiment()
        history: dict[str, list[dict[str, Any]]] = {}
        attempts: dict[str, list[int]] = {}
        for row in store.results():
            history.setdefault(row.trial_id, []).append(row.metrics)
            attempts.setdefault(row.trial_id, []).append(row.attempt)
        changes: dict[str, list[tuple[int, dict[str, Any], dict[str, Any]]]] = {}
        for event in store.events(TRIAL_RESTART_EVENT):
            data = event.data or {}
            if event.trial_id and "config" in data:
                changes.setdefault(event.trial_id, []).append(
                    (int(data["attempt"]), data["config"], data.get("previous_config") or {}))
        checkpoints: dict[str, list[tuple[Checkpoint, dict[str, Any], int]]] = {}
        for c in store.checkpoints():
            if os.path.isdir(c["path"]):
                checkpoints.setdefault(c["trial_id"], []).append(
                    (Checkpoint(c["path"]), c["metrics"] or {}, c["iteration"]))
        spec = exp["spec"] or {}
        score_attribute, num_to_keep = spec.get("checkpoint_score_attribute"), spec.get("checkpoint_num_to_keep")
        score_order = spec.get("checkpoint_score_order") or "max"
        results = []
        folders, names = store.trial_dirs(), store.trial_names()
        if configs is None:
            configs = store.configs()  # (as given, where JSON holds only a repr; the others' JSON is exact)
        for t in store.trials():
            config = dict(configs[t.trial_id]) if t.trial_id in configs else t.config
            rows = history.get(t.trial_id, [])
            reported = (last_results or {}).get(t.trial_id)
            metrics = (dict(reported) if reported is not None and t.last_result is not None
                       else dict(t.last_result) if t.last_result is not None
                       else (dict(rows[-1]) if rows else None))
            started = t.started_at is not None
            if metrics is not None:
                if t.status == TERMINATED:  # (an errored trial's last result stays as it was: not done, as in Ray)
                    metrics["done"] = True
                metrics = with_config(metrics, config)
            elif started:  # it started but reported nothing (it returned at once, or failed first): as in Ray,
                # its id, when it started and its config
                metrics = {"trial_id": t.trial_id, "date": datetime.datetime.fromtimestamp(
                    t.started_at).strftime(DATE_FORMAT), "timestamp": int(t.started_at), "config": config}
                if t.status == TERMINATED:
                    metrics["done"] = True
            else:  # it never started: Ray's Result has only the trial's id
                metrics = {"trial_id": t.trial_id}
            error = (trial_failure(names.get(t.trial_id, t.trial_id), t.error, t.traceback,
                                   _error_pickle(folders[t.trial_id]))
                     if t.status == ERROR else None)
            row_configs = [_config_of_attempt(config, changes.get(t.trial_id, []), attempt)
                           for attempt in attempts.get(t.trial_id, [])]
            # in report order: the last is the latest; each with its result and the config it was reported with
            # (Ray's checkpoint results carry ``config``; here the store's lack it: a helper's KeyError)
            stored = checkpoints.get(t.trial_id, [])
            by_iteration = _configs_by_iteration(rows, row_configs) if stored and changes.get(t.trial_id) else {}
            ckpts = [(ckpt, with_config(m, by_iteration.get(iteration, config))) for ckpt, m, iteration in stored]
            # Ray's best_checkpoints: the num_to_keep best, worst first (the latest, always kept, only if one)
            best = [ckpts[i] for i in rank_checkpoints([m for _, m in ckpts], score_attribute, score_order)]
            best = best[-num_to_keep:] if num_to_keep else best
            results.append(
                Result(
                    metrics=metrics,
                    checkpoint=ckpts[-1][0] if ckpts else None,
                    error=error,
                    path=folders[t.trial_id],
                    best_checkpoints=best,
                    trial_id=t.trial_id,
                    status=t.status,
                    _history=rows,
                    _config=config,
                    _row_configs=row_configs,
                    _num_failures=t.num_failures + (t.status == ERROR),  # the retried failures, and the last
                    _started=started,
                    _trainable_name=str(spec.get("trainable") or ""),
                    _trial_name=names.get(t.trial_id),
                )
            )
        return cls(results, store.experiment_dir, exp["metric"], exp["mode"])

    # ------------------------------------------------------------------ container protocol

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, index: int) -> Result:
        return self._results[index]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    def __repr__(self) -> str:
        """Ray's layout: every trial's :class:`Result`, indented."""
        shown = ",\n".join(result._repr(indent=2) for result in self._results)
        return f"ResultGrid<[\n{shown}\n]>"

    # ------------------------------------------------------------------ summaries

    @property
    def errors(self) -> list[Exception]:
        """The errors of the trials that failed."""
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return sum(1 for r in self._results if r.status == TERMINATED)

    def get_best_result(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                        filter_nan_and_inf: bool = True) -> Result:
        """The trial with the best ``metric``.

        Args:
            metric: Metric to compare; defaults to the run's metric (``"_metric"``, what a trainable's returned
                number is reported as, when the run had only a mode, as in Ray). A flattened name (``"info/acc"``)
                reads a nested one, as in Ray.
            mode: ``"min"`` or ``"max"``; defaults to the run's mode.
            scope: Which of a trial's results count: ``"last"`` (its last result), ``"avg"`` (the mean of
                all), ``"last-5-avg"``, ``"last-10-avg"``, or ``"all"`` (its best result).
            filter_nan_and_inf: Ignore NaN and infinite values.

        Returns:
            The best trial's :class:`Result`; as in Ray, the one trial of a run of one trial, whatever the
            arguments.

        Raises:
            ValueError: No metric or no mode (neither given nor set for the run), or a bad mode/scope.
            RuntimeError: No trial reported a usable value of the metric.
        """
        if len(self._results) == 1:
            return self._results[0]
        if not metric and not self._metric and self._mode:
            metric = DEFAULT_METRIC  # a run with a mode and no metric optimises Ray's anonymous "_metric", as Ray's
        metric = metric or self._metric
        mode = mode or self._mode
        if not metric:
            raise ValueError("No metric is provided. Either pass in a `metric` arg to `get_best_result` or specify a "
                             "metric in the `TuneConfig` of your `Tuner` (fluidsalus.run: `metric=`).")
        if not mode:
            raise ValueError("No mode is provided. Either pass in a `mode` arg to `get_best_result` or specify a "
                             "mode in the `TuneConfig` of your `Tuner` (fluidsalus.run: `mode=`).")
        _check_mode(mode)
        if scope not in SCOPES:
            raise ValueError(f"get_best_result: scope must be one of {SCOPES}, got {scope!r}")
        best: tuple[float, Result] | None = None
        for result in self._results:
            score = _score(result._history or [], metric, mode, scope, filter_nan_and_inf)
            if score is None:
                continue
            if best is None or (score > best[0] if mode == "max" else score < best[0]):
                best = (score, result)
        if best is None:
            raise RuntimeError(
                f"No best trial found for the given metric: {metric}. This means that no trial has reported "
                "this metric" + (", or all values reported for this metric are NaN. To not ignore NaN values, you "
                                 "can set the `filter_nan_and_inf` arg to False." if filter_nan_and_inf else ".")
            )
        return best[1]

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None) -> pd.DataFrame:
        """One row per trial that reported (as in Ray, a trial that never did has none): its last result (or, with a
        filter, its best), nested metrics flattened to ``a/b`` columns, with ``config/...`` columns, as in Ray.

        Args:
            filter_metric: Pick each trial's row by this metric instead of taking its last result (a flattened
                name such as ``"info/acc"`` reads a nested one); a trial whose values of it are all NaN has no row
                then, with Ray's warning, as in Ray.
            filter_mode: ``"min"`` or ``"max"``: with ``filter_metric`` the filter applies; without it each
                trial's last result is taken, as in Ray.

        Raises:
            ValueError: ``filter_mode`` is neither ``"min"`` nor ``"max"``, or comes without ``filter_metric``
                (Ray's messages).
        """

        if filter_mode and filter_mode not in ("min", "max"):
            raise ValueError("If set, `mode` has to be one of [min, max]")
        if filter_mode and not filter_metric:
            raise ValueError("If a `mode` is passed to `ExperimentAnalysis.dataframe(), you'll also have to pass a "
                             "`metric`!")
        metric = filter_metric if filter_mode else None  # a metric without a mode: the last results, as in Ray
        return picked_rows_frame([(result, result._config if result._config is not None else result.config or {})
                                  for result in self._results], metric, filter_mode)


def picked_rows_frame(entries: Sequence[tuple[Result, Mapping[str, Any]]], metric: str | None,
                      mode: str | None) -> pd.DataFrame:
    """One row per trial that reported, as Ray's ``ExperimentAnalysis.dataframe`` builds it (which its
    ``ResultGrid.get_dataframe`` returns): the row of the trial's whole frame (:attr:`Result.metrics_dataframe`)
    at its last result, or with ``metric`` and ``mode`` at its best value of ``metric`` (:func:`best_index`), with
    the trial's ``config/...`` and its folder as ``logdir``. Taken from the trial's frame, a row has a column for every
    key the trial ever reported (NaN where this result lacks it) and the frame's dtype (a number reported on some
    results only is a float, as pandas fills the others with NaN), as Ray's. With ``metric`` and ``mode``, a trial
    that reported ``metric`` but never a value of it (all NaN or None) has no row, with Ray's warning, as Ray's
    ``idxmax`` pick leaves it out (a trial without the metric at all gives its last row, as in Ray).

    Args:
        entries: Each trial's result and configuration.
        metric: The metric to pick each trial's row by (None: its last result).
        mode: ``"min"`` or ``"max"`` (with ``metric``).

    Returns:
        The frame; without columns when no trial reported, as Ray's.
    """
    import pandas as pd

    rows = []
    for result, config in entries:
        history = result._history or []
        if history:
            index = best_index(history, metric, mode) if metric and mode else None
            if index is None and metric and mode and _all_missing(history, metric):
                # Ray's: the trial's column of the metric has no value (all NaN): pandas' idxmax finds no row, and
                # Ray leaves the trial out with this warning (under pandas 3 its idxmax raises instead: Ray's
                # dataframe() then fails with "Encountered all NA values"); it gave the trial's last row
                logger.warning("Warning: Non-numerical value(s) encountered for %s", result.trial_id or result.path)
                continue
            row = _frame_row(result, -1 if index is None else index)
        else:
            metrics = result.metrics or {}
            if result._started or set(metrics) <= {"trial_id"}:  # it reported nothing: no row, as in Ray
                continue
            # (a Result built by hand, with metrics and no frame: its metrics as its one row)
            row = pd.json_normalize([with_config(metrics, config)], sep=DELIMITER).iloc[-1].to_dict()
        row.update(flatten_dict({"config": config}))  # Ray's get_all_configs(prefix=True)
        row["logdir"] = result.path
        rows.append(row)
    return pd.DataFrame(rows)  # (Ray's: no trial reported, no columns either)


def _all_missing(history: Sequence[Mapping[str, Any]], metric: str) -> bool:
    """Whether the trial's frame has a column ``metric`` (a result has it, a flattened name may address a nested
    value) in which no result has a value: each is NaN or None (or the result lacks it, NaN in the frame), so
    pandas' ``idxmax``/``idxmin`` find no row."""
    present = False
    for row in history:
        value = lookup_metric(row, metric)
        if value is None:
            present = present or metric in row or metric in flatten_dict(row)
        elif is_number(value) and math.isnan(value):
            present = True
        else:
            return False
    return present


def _frame_row(result: Result, index: int) -> dict[str, Any]:
    """Row ``index`` of ``result.metrics_dataframe``, as a dict. A trial whose results all have the same keys, in the
    same order, each key's values of one type and none a nested dict, and one configuration, gives the same row
    from that result alone (no NaN to fill, no dtype a missing or other-typed value would widen): building the
    whole frame of each trial to keep one row made ``get_dataframe()`` 35x slower on 2,000 trials of 50 results (a
    reviewer's measure)."""
    history = result._history or []
    one_config = not result._row_configs or all(c is result._config for c in result._row_configs)  # (a store's
    # reader gives each row its attempt's config: the trial's own object when nothing changed it)
    if result._frame is None and one_config and _uniform(history):
        # (flat already: the frame's row is the result's values in its order, then the config's columns, which the
        # caller adds)
        return dict(history[index])
    return result.metrics_dataframe.iloc[index].to_dict()


def _uniform(history: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every result has the first one's keys in its order, none ``config``, and each key's values are of one
    type, never a mapping (see :func:`_frame_row`)."""
    keys = tuple(history[0])
    if "config" in keys or any(tuple(r) != keys for r in history):  # (a result's own "config": with_config's)
        return False
    for values in zip(*(r.values() for r in history), strict=True):
        types = set(map(type, values))
        if len(types) != 1 or issubclass(next(iter(types)), Mapping):
            return False
    return True


def _configs_by_iteration(rows: list[dict[str, Any]], row_configs: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Iteration -> the configuration its last stored result was reported with (under PBT a trial's configuration
    changes at an exploit): what a checkpoint of that iteration carries. Empty for a store without per-row configs
    (the trial's own configuration stands then)."""
    if len(row_configs) != len(rows):
        return {}
    return {row.get("training_iteration"): row_config for row, row_config in zip(rows, row_configs, strict=True)}


def _config_of_attempt(config: dict[str, Any], changes: list[tuple[int, dict[str, Any], dict[str, Any]]],
                       attempt: int) -> dict[str, Any]:
    """The configuration a trial ran ``attempt`` with.

    Args:
        config: The trial's configuration now (its last).
        changes: ``(attempt, config, previous_config)`` of each restart that changed it, in order.
        attempt: The attempt a result came from.

    Returns:
        The configuration of the last change at or before ``attempt``; before the first change, the one it
        replaced; ``config`` if nothing changed it (or the store predates these records).
    """
    if not changes:
        return config
    if attempt < changes[0][0]:
        return changes[0][2]
    current = changes[0][1]
    for at, new, _ in changes:
        if at > attempt:
            break
        current = new
    return current


def rank_checkpoints(results: Sequence[Mapping[str, Any] | None], attribute: str | None,
                     order: str = "max") -> list[int]:
    """Checkpoints from worst to best, as Ray's checkpoint manager orders them for ``num_to_keep``.

    A checkpoint's rank is Ray's key ``(not NaN, score)``, the score negated for ``order="min"``: a NaN (or a value
    that is no number) ranks below everything, a result without ``attribute`` (a flattened name such as
    ``"val/acc"`` reads a nested value) and every checkpoint when ``attribute`` is None rank as minus infinity,
    and ties go in report order (the later one better).

    Args:
        results: Each checkpoint's result, in report order.
        attribute: ``checkpoint_score_attribute`` (None: by recency).
        order: ``"max"`` or ``"min"``: which scores are best.

    Returns:
        Indices into ``results``, worst first.
    """
    def rank(i: int) -> tuple[bool, float, int]:
        value = None if attribute is None else lookup_metric(results[i] or {}, attribute)
        if value is None:
            return True, -math.inf, i
        if not isinstance(value, numbers.Real) or math.isnan(value):
            return False, -math.inf, i
        return True, float(value) if order == "max" else -float(value), i

    return sorted(range(len(results)), key=rank)


def lookup_metric(metrics: Mapping[str, Any], metric: str) -> Any:
    """``metrics[metric]``, where a flattened name (``"info/loss"``) may also address a nested value; None if
    there is neither."""
    if metric in metrics:
        return metrics[metric]
    value: Any = metrics
    for part in metric.split(DELIMITER):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


#: Ray's ``DEBUG_METRICS``: keys of a result that are no metric, left out of a trial's :func:`metric_analysis`.
DEBUG_METRICS = frozenset({"trial_id", "experiment_id", "date", "timestamp", "pid", "hostname", "node_ip", "config"})
#: The windows of the ``last-<n>-avg`` entries of :func:`metric_analysis` (Ray keeps these two).
METRIC_WINDOWS = (5, 10)


def is_number(value: Any) -> bool:
    """A number as Ray's readers count one (``numbers.Number``: bools and NumPy's scalars too), not complex."""
    return isinstance(value, numbers.Number) and not isinstance(value, complex)


def metric_analysis(history: Sequence[Mapping[str, Any]], metric: str | None = None) -> dict[str, dict[str, Any]]:
    """Ray's ``metric_analysis`` of a trial, which its best-trial choices read: for each number in its results
    (nested keys flattened to ``a/b``; a bool counts, as in Ray), ``max``, ``min``, ``avg``, ``last``,
    ``last-5-avg`` and ``last-10-avg``, updated result by result with Ray's formulas (``TrialMetadata.update_metric``):
    ``max(value, max)`` and ``min(value, min)``, so a NaN is the max until a later number replaces it, an
    average weighted by ``training_iteration`` (``1 / step * (value + (step - 1) * avg)``), and plain means of
    the last 5 and 10 values. A NaN or an infinity in the window thus makes the score NaN or infinite, and a
    best-trial choice with ``filter_nan_and_inf`` passes that trial over, as Ray's does.

    Args:
        history: The trial's results, in order.
        metric: Only this one (a flattened name reads a nested value), for a best-trial choice: every key of
            every result is not flattened for it.

    Returns:
        ``metric -> {"max", "min", "avg", "last", "last-5-avg", "last-10-avg"}``.
    """
    analysis: dict[str, dict[str, Any]] = {}
    windows: dict[str, dict[int, collections.deque[Any]]] = {}
    if metric in DEBUG_METRICS:
        return analysis
    for row in history:
        step = row.get("training_iteration") or 1
        values = ([(metric, lookup_metric(row, metric))] if metric is not None
                  else flatten_dict({k: v for k, v in row.items() if k not in DEBUG_METRICS}).items())
        for key, value in values:
            if not is_number(value):
                continue
            entry = analysis.get(key)
            if entry is None:
                analysis[key] = {"max": value, "min": value, "avg": value, "last": value,
                                 **{f"last-{n}-avg": value for n in METRIC_WINDOWS}}
                windows[key] = {n: collections.deque([value], maxlen=n) for n in METRIC_WINDOWS}
                continue
            entry["max"], entry["min"] = max(value, entry["max"]), min(value, entry["min"])
            entry["avg"] = 1 / step * (value + (step - 1) * entry["avg"])
            entry["last"] = value
            for n, window in windows[key].items():
                window.append(value)
                entry[f"last-{n}-avg"] = sum(window) / len(window)
    return analysis


def _score(history: list[Mapping[str, Any]], metric: str, mode: str, scope: str, filter_nan: bool) -> Any:
    """A trial's score for a best-trial choice, as Ray's ``get_best_trial`` reads it (None: it has none)."""
    entry = metric_analysis(history, metric).get(metric)
    if entry is None:
        return None
    score = entry[mode if scope == "all" else scope]
    return None if filter_nan and not math.isfinite(score) else score


def best_index(history: Sequence[Mapping[str, Any]], metric: str, mode: str) -> int | None:
    """The position of the result with the best value of ``metric`` in ``mode``, as Ray's dataframes pick it
    (pandas' ``idxmax`` and ``idxmin`` of the trial's column: NaN and None skipped, an infinity counts, the first of
    equal values; a column of other values than numbers compares them as Python does, so strings ``["b", "c", "a"]``
    give ``"c"``'s row for ``"max"`` and lists ``[[1], [3], [2]]`` ``[3]``'s; a NumPy scalar or 0-d array counts as
    its value), or None when none has one or the values do not compare (dicts). A column that mixes numbers with
    other values, where pandas (and so Ray's ``dataframe``) raises a ``TypeError``, is picked by its numbers. Under
    pandas 2 Ray's ``idxmin`` of ``[nan, inf]`` gave the NaN's row (its ``nanargmin`` fills NaN with +inf); as pandas
    3 does, the infinity's row is picked here."""
    given = [(i, value) for i, r in enumerate(history)
             if (value := _as_python(lookup_metric(r, metric))) is not None
             and not (is_number(value) and math.isnan(value))]
    scored = [(i, value) for i, value in given if is_number(value)] or given
    if not scored:
        return None
    try:
        return (max if mode == "max" else min)(scored, key=lambda pair: pair[1])[0]
    except TypeError:  # values that do not compare (dicts, a list of strings beside one of numbers)
        return None


def _as_python(value: Any) -> Any:
    """A NumPy scalar or 0-d array as its Python value (``np.bool_(True)``: ``True``), anything else as it is."""
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        return value.item()
    return value


def with_flat_keys(result: Mapping[str, Any]) -> Mapping[str, Any]:
    """A result as a searcher sees it: its own keys, and, for every value in a nested dict, Ray's flattened key too
    (``{"val": {"acc": 0.9}}`` also has ``"val/acc"``), as Ray's schedulers and search algorithms see only flattened
    results. A flattened key the result already has keeps its value. The result itself when nothing is nested."""
    if not any(isinstance(value, Mapping) for value in result.values()):
        return result
    return {**flatten_dict(result), **result}


def flatten_dict(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts flattened to ``"a/b"`` keys (Ray's delimiter), e.g. for config columns; ``prefix`` goes
    before every key."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_dict(value, path + DELIMITER))
        else:
            out[path] = value
    return out
