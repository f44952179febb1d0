"""``ExperimentAnalysis``: what the legacy :func:`fluidsalus.tune.run` returns (``ray.tune.ExperimentAnalysis``).

It reads an experiment's store, like :class:`fluidsalus.ResultGrid`, and answers with Ray's older API:
``best_config``, ``best_trial``, ``best_result``, ``best_checkpoint``, ``results_df``, ``dataframe()``,
``trial_dataframes``, ``get_best_trial(metric, mode, scope)``, ... Its trials are :class:`Trial` objects with the
attributes a script reads from Ray's ``Trial`` (``config``, ``last_result``, ``status``, ``checkpoint``,
``path``, ``metric_analysis``, ``num_failures``, ``trial_name``, ``custom_trial_name``, ``max_failures``,
``stopping_criterion``, ``evaluated_params``, ...).

Ray's rules are kept where they show: the best trial compares each trial's ``metric_analysis[metric][scope]``
(for ``scope="all"``: its best value in ``mode``), a trial whose score is NaN or infinite is skipped, an
experiment of one trial answers that trial for any metric, ``get_best_trial`` answers None (with a warning) when
no trial reported the metric, and a mode without a metric selects Ray's anonymous metric ``_metric``.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError, StoreError
from fluidsalus.result import (
    MODES,
    Result,
    ResultGrid,
    flatten_dict,
    is_number,
    lookup_metric,
    metric_analysis,
    picked_rows_frame,
)
from fluidsalus.store import (
    DB_FILENAME,
    ERROR_FILE,
    FINAL_STATUSES,
    PENDING,
    RUNNING,
    TRIAL_RESTART_EVENT,
    DriverLock,
    open_readonly,
    read_error_file,
    written_by_ray,
)
from fluidsalus.tune._tags import PARAMS_FILE, Tagger, constant_list_node, draws_in, is_plain, resolved_values
from fluidsalus.tune.result import TRAINING_ITERATION
from fluidsalus.tune.utils import flatten_dict as flatten_like_ray

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEFAULT_METRIC", "ExperimentAnalysis", "Trial"]

logger = logging.getLogger(__name__)

#: Ray's anonymous metric, used when only a mode is given (``ray.tune.result.DEFAULT_METRIC``).
DEFAULT_METRIC = "_metric"
#: The scopes of :meth:`ExperimentAnalysis.get_best_trial` (Ray's list and order).
SCOPES = ("all", "last", "avg", "last-5-avg", "last-10-avg")



def _has_metric(metrics: Mapping[str, Any], metric: str) -> bool:
    """Whether ``metrics`` holds ``metric`` (a flattened name may address a nested value), None or not."""
    return metric in metrics or metric in flatten_dict(metrics)

#: A :class:`Trial`'s request where the analysis did not run it (read back from a folder): its
#: ``placement_group_factory`` is None.
UNKNOWN_REQUEST: Any = object()


#: What ``Trial.logdir`` raises, Ray 2.60's words.
LOGDIR_REMOVED = "Use `local_path` instead of `logdir`."


class Trial:
    """One trial of an analysed experiment: the attributes a script reads from Ray's ``Trial``.

    Attributes:
        trial_id: The trial's id.
        config: Its configuration.
        last_result: Its last reported result (with ``config``, as in Ray), or an empty dict.
        status: ``"TERMINATED"``, ``"ERROR"``, ``"PENDING"``, ``"RUNNING"`` or ``"PAUSED"``.
        path: Its folder in the experiment (``local_path`` is the same folder).
        checkpoint: Its latest persisted checkpoint, or None.
        error: The error it failed with, or None.
        experiment_tag: Ray's tag of the trial (``"<index>_<values>"``), or ``""`` if it reported nothing.
        num_failures: How often it failed (each failure that was retried, and the one that ended it).
        trainable_name: The name of the run's trainable (``""`` if the experiment did not record one).
        evaluated_params: Ray's: the values the search chose for the trial, by ``/``-joined path, in Ray's order (the
            space's grid searches and domains as first drawn, with the draws inside a chosen grid value or choice
            category, or a search algorithm's suggestion; not the constants), as the
            callbacks' trial views have them (:func:`evaluated_params_of`); for a folder ``fluidsalus.run`` or an
            older fluidsalus wrote, the values at the grid searches and domains of the space its store describes.
        custom_trial_name: Ray's: the name ``trial_name_creator`` gave the trial, or None (also for a creator that
            gave Ray's default name, ``<trainable>_<trial_id>``: the folder does not tell them apart).
        max_failures: Ray's: the run's ``FailureConfig.max_failures`` (``-1``: no limit).
        stopping_criterion: Ray's: the run's ``stop`` when it was a dict (``{}`` for a function, a ``Stopper`` or
            none, as in Ray; ``{}`` too for an experiment of an older fluidsalus, which did not record it).

    Args:
        result: The trial's result.
        request: The run's resource request (a dict, a function of the config, or None for none), for
            :attr:`placement_group_factory`; :data:`UNKNOWN_REQUEST` where the analysis did not run the trials
            (an experiment folder read back: its store does not keep the request).
        evaluated_params: See the attribute.
        settings: What the run said of every trial (:func:`run_settings_of`): ``max_failures`` and
            ``stopping_criterion``.
    """

    def __init__(self, result: Result, request: Any = None,
                 evaluated_params: Mapping[str, Any] | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        self._result = result
        self._request = request
        self.trial_id = result.trial_id
        self.config: dict[str, Any] = dict(result._config if result._config is not None else result.config or {})
        self.last_result: dict[str, Any] = dict(result.metrics or {})
        self.status = result.status
        self.path = result.path
        self.local_path = result.path
        self.checkpoint: Checkpoint | None = result.checkpoint
        self.error: Exception | None = result.error
        self.experiment_tag = str(self.last_result.get("experiment_tag", ""))
        self.num_failures = result._num_failures
        self.trainable_name = result._trainable_name
        self._name = result._trial_name
        self.evaluated_params: dict[str, Any] = dict(evaluated_params or {})
        settings = settings or {}
        # (the Tune front end names every trial; Ray's default name, ``<trainable>_<id>``, is no creator's)
        default_name = f"{self.trainable_name}_{self.trial_id}" if self.trainable_name else self.trial_id
        named = result._trial_name
        self.custom_trial_name: str | None = named if named and named != default_name else None
        self.max_failures: int = int(settings.get("max_failures") or 0)
        self.stopping_criterion: dict[str, Any] = dict(settings.get("stopping_criterion") or {})
        self._analysis: dict[str, dict[str, float]] | None = None

    @property
    def trial_name(self) -> str:
        """The name Ray shows for a trial (its ``str``): what ``trial_name_creator`` gave it, else
        ``<trainable>_<trial_id>`` (by the trainable's registered name, when it had one)."""
        if self._name:
            return self._name
        return f"{self.trainable_name}_{self.trial_id}" if self.trainable_name else self.trial_id

    @property
    def placement_group_factory(self) -> Any:
        """Ray's attribute: the trial's resource request as a ``tune.PlacementGroupFactory`` of one bundle, as the
        trial recorded it (a factory's bundles summed; Ray's default, one CPU, for a run that asked for none), or
        None for an experiment folder read back (:data:`UNKNOWN_REQUEST`)."""
        from fluidsalus.tune._trainable import trial_placement_group_factory

        if self._request is UNKNOWN_REQUEST:
            return None
        return trial_placement_group_factory(self._request, self.config)

    @property
    def error_file(self) -> str | None:
        """The trial's ``error.txt`` (every failure of the trial, appended), or None if it never failed."""
        path = os.path.join(self.path, ERROR_FILE)
        return path if os.path.isfile(path) else None

    def get_error(self) -> str | None:
        """Ray's: the text of :attr:`error_file` (every failure of the trial, appended), or None if it never
        failed."""
        return read_error_file(self.error_file)

    def is_finished(self) -> bool:
        """Whether the trial has ended (``TERMINATED`` or ``ERROR``)."""
        return self.status in FINAL_STATUSES

    def has_checkpoint(self) -> bool:
        """Ray's: whether the trial has a checkpoint."""
        return self.checkpoint is not None

    @property
    def has_reported_at_least_once(self) -> bool:
        """Ray's: whether the trial reported a result."""
        return bool(self._result._history)

    @property
    def logdir(self) -> str:
        """Removed in Ray 2.x, whose ``Trial.logdir`` raises this ``DeprecationWarning``: use :attr:`local_path`
        (or :attr:`path`). Raised here too, so an old script gets Ray's hint rather than an ``AttributeError``."""
        raise DeprecationWarning(LOGDIR_REMOVED)

    @property
    def relative_logdir(self) -> str:
        """Ray's: the name of the trial's folder in the experiment's folder."""
        return os.path.basename(self.path.rstrip(os.sep)) if self.path else ""

    @property
    def experiment_dir_name(self) -> str:
        """Ray's: the name of the experiment's folder (the folder that holds :attr:`path`)."""
        return os.path.basename(os.path.dirname(self.path.rstrip(os.sep))) if self.path else ""

    @property
    def metric_analysis(self) -> dict[str, dict[str, float]]:
        """For each numeric metric of the trial's results (nested ones flattened with ``/``): its ``max``,
        ``min``, ``avg``, ``last``, ``last-5-avg`` and ``last-10-avg``, as Ray updates them result by result
        (:func:`fluidsalus.result.metric_analysis`)."""
        if self._analysis is None:
            self._analysis = metric_analysis(self.history)
        return self._analysis

    @property
    def history(self) -> list[dict[str, Any]]:
        """Every result of the trial, in order."""
        return list(self._result._history or [])

    @property
    def checkpoints(self) -> list[tuple[Checkpoint, dict[str, Any]]]:
        """The trial's best persisted checkpoints with their results, worst first (``Result.best_checkpoints``)."""
        return list(self._result.best_checkpoints or [])

    @property
    def dataframe(self) -> pd.DataFrame:
        """Every result of the trial, one row per iteration (empty when it reported nothing)."""
        import pandas as pd

        frame = self._result.metrics_dataframe
        return frame if frame is not None else pd.DataFrame()

    def __str__(self) -> str:
        return self.trial_name

    def __repr__(self) -> str:
        return self.trial_name


class ExperimentAnalysis:
    """Analyse the results of an experiment (``ray.tune.ExperimentAnalysis``).

    :func:`fluidsalus.tune.run` returns one. It can also be built from a finished (or running) experiment's
    folder, as in Ray: ``ExperimentAnalysis("~/ray_results/my_experiment")``.

    Args:
        experiment_checkpoint_path: The experiment folder (``<storage_path>/<name>``), or a file in it.
        storage_filesystem: Not supported (must be None): the folder is local or mounted.
        trials: The trials to analyse (None: every trial of the experiment's store).
        default_metric: The metric of ``best_*`` and of methods called without one.
        default_mode: ``"min"`` or ``"max"``, likewise.

    Raises:
        ConfigError: A bad ``default_mode``, a ``storage_filesystem``, or no experiment at the path.
    """

    def __init__(
        self,
        experiment_checkpoint_path: str | os.PathLike[str],
        *,
        storage_filesystem: Any = None,
        trials: list[Trial] | None = None,
        default_metric: str | None = None,
        default_mode: str | None = None,
    ) -> None:
        if storage_filesystem is not None:
            raise ConfigError("ExperimentAnalysis: storage_filesystem is not supported by fluidsalus; pass a local "
                              "or mounted experiment folder")
        if default_mode and default_mode not in MODES:
            raise ConfigError(f"ExperimentAnalysis: default_mode has to be None or one of {list(MODES)} "
                              f"(got {default_mode!r})")
        self.default_metric = default_metric
        self.default_mode = default_mode
        if self.default_metric is None and self.default_mode is not None:
            self.default_metric = DEFAULT_METRIC  # as in Ray: a mode alone selects the anonymous metric
        path = os.path.abspath(os.path.expanduser(os.fspath(experiment_checkpoint_path)))
        if os.path.isfile(path):
            path = os.path.dirname(path)
        self._experiment_path = path
        self.trials: list[Trial] = trials if trials is not None else self._load_trials(path)

    @classmethod
    def of_results(cls, experiment_path: str, results: list[Result], request: Any = UNKNOWN_REQUEST,
                   default_metric: str | None = None, default_mode: str | None = None) -> ExperimentAnalysis:
        """The analysis of a run's results (what ``tune.run`` returns, and ``ResultGrid._experiment_analysis``): its
        trials share the results, with their ``evaluated_params`` from the experiment's folder."""
        params = evaluated_params_of(experiment_path, results)
        settings = run_settings_of(experiment_path)
        trials = [Trial(result, request, params.get(result.trial_id), settings) for result in results]
        return cls(experiment_path, trials=trials, default_metric=default_metric, default_mode=default_mode)

    @staticmethod
    def _load_trials(path: str) -> list[Trial]:
        if not os.path.isfile(os.path.join(path, DB_FILENAME)):
            ray_wrote_it = written_by_ray(path)
            raise ConfigError(
                f"ExperimentAnalysis: experiment_checkpoint_path {path!r} holds no experiment ({DB_FILENAME} "
                "not found); pass the folder <storage_path>/<name> of a run"
                + (". Ray Tune wrote this folder (its experiment_state file is there): fluidsalus reads the "
                   "experiments it ran itself, from their store, not Ray's result files; read this one with Ray's "
                   "ExperimentAnalysis." if ray_wrote_it else "")
            )
        store = open_readonly(path)  # (creating nothing beside it, as ResultGrid.read opens it)
        try:
            grid = ResultGrid.from_store(store)
            status = store.experiment()["status"]
        finally:
            store.close()
        params = evaluated_params_of(path, list(grid))
        settings = run_settings_of(path)
        trials = [Trial(result, UNKNOWN_REQUEST, params.get(result.trial_id), settings) for result in grid]
        if status != RUNNING or DriverLock.holder_gone(path):
            # No driver runs it (interrupted, or its driver killed): a trial it was running waits for a resume,
            # as Ray's saved state shows it (its RUNNING trials are saved PENDING; here they showed RUNNING).
            for trial in trials:
                if trial.status == RUNNING:
                    trial.status = PENDING
        return trials

    # ------------------------------------------------------------------ the experiment

    @property
    def experiment_path(self) -> str:
        """The experiment folder."""
        return self._experiment_path

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict[str, Any]]:
        """Each trial's configuration by trial id; flattened into ``config/...`` keys with ``prefix=True``."""
        if prefix:
            return {t.trial_id: flatten_dict({"config": t.config}) for t in self.trials}
        return {t.trial_id: t.config for t in self.trials}

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """Each trial's last result by trial id."""
        return {t.trial_id: t.last_result for t in self.trials}

    @property
    def results_df(self) -> pd.DataFrame:
        """The trials' last results (nested keys flattened with ``/``, after the plain ones as in Ray), indexed by
        ``trial_id``."""
        import pandas as pd

        rows = [flatten_like_ray({"trial_id": t.trial_id, **t.last_result}) for t in self.trials]
        return pd.DataFrame.from_records(rows, index="trial_id")

    @property
    def trial_dataframes(self) -> dict[str, pd.DataFrame]:
        """Each trial's results, one row per iteration, by trial id."""
        return {t.trial_id: t.dataframe for t in self.trials}

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> pd.DataFrame:
        """One row per trial that reported: its last result, or with ``metric`` and ``mode`` the result with the
        best value it ever reported (not necessarily the last; a trial whose values of it are all NaN has no row,
        with Ray's warning), plus ``config/...`` columns and ``logdir`` (the
        trial's folder, where Ray 2.60 puts its id). Columns in Ray's order: a result's plain values, then its
        nested ones flattened, then ``logdir``.

        Args:
            metric: The metric to pick each trial's row by (without ``mode``: the last row).
            mode: ``"min"``, ``"max"`` or None.

        Raises:
            ConfigError: A bad mode, or a mode without a metric.
        """

        if mode and mode not in MODES:
            raise ConfigError(f"ExperimentAnalysis.dataframe: mode has to be None or one of {list(MODES)} "
                              f"(got {mode!r})")
        if mode and not metric:
            raise ConfigError("ExperimentAnalysis.dataframe: a mode needs a metric too; pass metric=")
        # (Ray's rows: each trial's whole frame, at its last or best result; a trial that never reported has none)
        return picked_rows_frame([(trial._result, trial.config or {}) for trial in self.trials if trial.history],
                                 metric, mode)

    # ------------------------------------------------------------------ the best trial

    def _metric(self, metric: str | None) -> str:
        if not metric and not self.default_metric:
            raise ConfigError("ExperimentAnalysis: no metric has been passed and default_metric has not been set; "
                              "pass metric=, or metric= and mode= to tune.run()")
        return metric or self.default_metric  # type: ignore[return-value]

    def _mode(self, mode: str | None) -> str:
        if not mode and not self.default_mode:
            raise ConfigError("ExperimentAnalysis: no mode has been passed and default_mode has not been set; pass "
                              f"mode= (one of {list(MODES)})")
        if mode and mode not in MODES:
            raise ConfigError(f"ExperimentAnalysis: mode has to be one of {list(MODES)} (got {mode!r})")
        return mode or self.default_mode  # type: ignore[return-value]

    def _defaults(self, what: str, instead: str) -> tuple[str, str]:
        if not self.default_metric or not self.default_mode:
            raise ConfigError(f"ExperimentAnalysis: to fetch the {what}, pass a metric and mode parameter to "
                              f"tune.run(). Alternatively, use {instead} to set the metric and mode explicitly.")
        return self.default_metric, self.default_mode

    def get_best_trial(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                       filter_nan_and_inf: bool = True) -> Trial | None:
        """The trial with the best score on ``metric``.

        Args:
            metric: The metric to compare (default: ``default_metric``).
            mode: ``"min"`` or ``"max"`` (default: ``default_mode``).
            scope: ``"last"`` (each trial's last value), ``"avg"`` (the mean of its values), ``"last-5-avg"``,
                ``"last-10-avg"``, or ``"all"`` (its best value in ``mode``).
            filter_nan_and_inf: Never pick a trial whose score is NaN or infinite.

        Returns:
            The best trial, or None (with a warning) when no trial reported the metric. An experiment of one trial
            answers that trial, as in Ray.

        Raises:
            ConfigError: No metric or mode (given or default), a bad mode or a bad scope.
        """
        if len(self.trials) == 1:
            return self.trials[0]
        metric = self._metric(metric)
        mode = self._mode(mode)
        if scope not in SCOPES:
            raise ConfigError(f"ExperimentAnalysis.get_best_trial: scope has to be one of {list(SCOPES)} "
                              f"(got {scope!r})")
        best: Trial | None = None
        best_score = 0.0
        for trial in self.trials:
            analysis = trial.metric_analysis.get(metric)
            if analysis is None:
                continue
            score = analysis[mode if scope == "all" else scope]
            if filter_nan_and_inf and not math.isfinite(score):
                continue
            if best is None or (score > best_score if mode == "max" else score < best_score):
                best, best_score = trial, score
        if best is None:
            logger.warning("Could not find best trial. Did you pass the correct `metric` parameter?")
        return best

    def get_best_config(self, metric: str | None = None, mode: str | None = None,
                        scope: str = "last") -> dict[str, Any] | None:
        """The configuration of :meth:`get_best_trial`'s trial, or None."""
        trial = self.get_best_trial(metric, mode, scope)
        return trial.config if trial is not None else None

    @property
    def best_trial(self) -> Trial | None:
        """The best trial by the run's metric and mode (their last results compared)."""
        metric, mode = self._defaults("best_trial", "get_best_trial(metric, mode)")
        return self.get_best_trial(metric, mode)

    @property
    def best_config(self) -> dict[str, Any] | None:
        """The configuration of :attr:`best_trial`."""
        metric, mode = self._defaults("best_config", "get_best_config(metric, mode)")
        return self.get_best_config(metric, mode)

    @property
    def best_result(self) -> dict[str, Any]:
        """The last result of :attr:`best_trial`."""
        self._defaults("best_result", "get_best_trial(metric, mode).last_result")
        trial = self.best_trial
        return trial.last_result if trial is not None else {}

    @property
    def best_result_df(self) -> pd.DataFrame:
        """:attr:`best_result` as a one-row frame indexed by ``trial_id``."""
        import pandas as pd

        return pd.DataFrame.from_records([flatten_like_ray(self.best_result)], index="trial_id")

    @property
    def best_dataframe(self) -> pd.DataFrame:
        """Every result of :attr:`best_trial`."""
        self._defaults("best_dataframe", "get_best_trial(metric, mode).dataframe")
        trial = self.best_trial
        if trial is None:
            raise ConfigError(f"ExperimentAnalysis: no trial reported {self.default_metric!r}")
        return trial.dataframe

    # ------------------------------------------------------------------ checkpoints

    def _trial(self, trial: Trial | str | os.PathLike[str]) -> Trial:
        if isinstance(trial, Trial):
            return trial
        wanted = os.path.abspath(os.path.expanduser(os.fspath(trial)))
        for candidate in self.trials:
            if os.path.abspath(candidate.path) == wanted or candidate.trial_id == os.fspath(trial):
                return candidate
        raise ConfigError(f"ExperimentAnalysis: trial {os.fspath(trial)!r} is neither a Trial of this analysis nor "
                          "the folder or id of one")

    def get_best_checkpoint(self, trial: Trial | str, metric: str | None = None,
                            mode: str | None = None) -> Checkpoint | None:
        """The trial's kept checkpoint whose reported result is best on ``metric``.

        Args:
            trial: A :class:`Trial` of this analysis, or its folder.
            metric: The metric (default: ``default_metric``, else ``training_iteration``).
            mode: ``"min"`` or ``"max"`` (default: ``default_mode``).

        Returns:
            The checkpoint, or None (with a logged error) when the trial kept none with a number as the metric.

        Raises:
            KeyError: A kept checkpoint's result has no ``metric`` (as Ray's; its message names what they have).
        """
        found = self._trial(trial)
        metric = metric or self.default_metric or TRAINING_ITERATION
        mode = self._mode(mode)
        scored = []
        for checkpoint, metrics in found.checkpoints:
            value = lookup_metric(metrics, metric)
            if value is None and not _has_metric(metrics, metric):  # (Ray's lookup raises a bare KeyError; a typo
                # is the usual cause)
                raise KeyError(f"get_best_checkpoint: metric {metric!r} is not in the result of trial {found}'s "
                               f"checkpoint {checkpoint.path}; it has: {', '.join(sorted(flatten_dict(metrics)))}")
            if is_number(value) and not math.isnan(value):
                scored.append((checkpoint, value))
        if not scored:
            logger.error(f"No checkpoints have been found for trial {found}.")
            return None
        sign = -1 if mode == "min" else 1
        return max(scored, key=lambda pair: sign * pair[1])[0]

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        """The best checkpoint (by the run's metric and mode) of :attr:`best_trial`."""
        metric, mode = self._defaults("best_checkpoint", "get_best_checkpoint(trial, metric, mode)")
        trial = self.best_trial
        if trial is None:
            raise ConfigError(f"ExperimentAnalysis: no best trial found; check the default metric ({metric}) and "
                              f"mode ({mode})")
        return self.get_best_checkpoint(trial, metric, mode)

    def get_last_checkpoint(self, trial: Trial | str | None = None, metric: str = TRAINING_ITERATION,
                            mode: str = "max") -> Checkpoint | None:
        """The trial's kept checkpoint of its latest iteration; without a trial, that of the best trial by
        ``metric`` and ``mode``."""
        found = self._trial(trial) if trial is not None else self.get_best_trial(metric, mode)
        if found is None:
            return None
        return self.get_best_checkpoint(found, TRAINING_ITERATION, "max")

    def __repr__(self) -> str:
        return f"ExperimentAnalysis<{len(self.trials)} trials, path={self._experiment_path!r}>"


def evaluated_params_of(experiment_path: str, results: list[Result]) -> dict[str, dict[str, Any]]:
    """Ray's ``Trial.evaluated_params`` of each trial, by trial id: what the search chose for it, as the callbacks'
    trial views have it, from what the ``fluidsalus.tune`` run wrote beside ``tuner.pkl`` (:data:`PARAMS_FILE`: which
    paths of the space were drawn, the keys PBT sampled, the ``points_to_evaluate`` runs), each trial's creation
    index and its configuration as it was created (before a PBT exploit changed it; the store's restart events keep
    the one each change replaced). Ray's value is reproduced exactly: it is a function of these.

    Either way the values are in Ray's order (Ray's ``resolved_vars``: the domains in the space's order, then the
    grid searches by path, then the draws that a chosen grid value or choice category holds, such as ``g/lr`` of
    ``tune.grid_search([{"lr": tune.uniform(0, 1)}, {"lr": 0.1}])``;
    :func:`fluidsalus.tune._tags.resolved_values`). A folder without that file (an experiment ``fluidsalus.run``
    wrote, or one of an older fluidsalus) gives the values of the grid searches and domains of the search space its
    store describes (:func:`stored_draw_tree`): Ray's value for a space without ``points_to_evaluate`` or PBT's
    sampled keys, which that description does not tell apart (a point's values are then in, and PBT's sampled keys
    out).

    Returns:
        Trial id -> path -> value; empty when the folder says nothing of the space (no such file, and a store
        without a space: a searcher's own), or has no readable store.
    """
    tagger: Tagger | None = None
    try:
        with open(os.path.join(experiment_path, PARAMS_FILE), encoding="utf-8") as f:
            tagger = Tagger.from_description(json.load(f))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        store = open_readonly(experiment_path)
    except StoreError:
        return {}
    try:
        tree: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        if tagger is None:
            space = (store.experiment().get("spec") or {}).get("space")
            if not isinstance(space, Mapping) or not space:
                return {}
            tree = stored_draw_tree(space)
        seqs = store.trial_seqs()
        created: dict[str, dict[str, Any]] = {}  # the config a trial had before its first change
        for event in store.events(TRIAL_RESTART_EVENT):
            data = event.data or {}
            if event.trial_id and "config" in data and event.trial_id not in created:
                created[event.trial_id] = dict(data.get("previous_config") or {})
    finally:
        store.close()
    out = {}
    for result in results:
        config = created.get(result.trial_id)
        if config is None:
            config = result._config if result._config is not None else (result.config or {})
        if tagger is not None:
            out[result.trial_id] = tagger.evaluated_params(config, seqs.get(result.trial_id))
        else:
            out[result.trial_id] = {"/".join(str(part) for part in path): value for path, value in
                                    resolved_values(tree, lambda path, c=config: _value_at_key(c, path)).items()}
    return out


#: The ``fluidsalus.space`` domains whose value is drawn (Ray's ``tune.uniform``, ...; not ``sample_from``, whose
#: value Ray leaves out of ``evaluated_params``), by the name their repr starts with.
_DRAWN_CALLS = frozenset({"uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn", "randint", "qrandint",
                          "lograndint", "qlograndint", "choice"})
#: The reprs of the search space's draws, as a store's run spec describes the space (``repr`` of each flattened
#: value): a grid search, or one of :data:`_DRAWN_CALLS`.
_DRAWN_REPR = re.compile(r"^(\{'grid_search': |(" + "|".join(sorted(_DRAWN_CALLS)) + r")\()")
_ABSENT: Any = object()


def stored_draw_tree(space: Mapping[str, Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The grid searches and sampling domains of a stored space description (``{flattened key: repr(value)}``), as
    :func:`fluidsalus.tune._tags.draw_tree` gives them for the space itself: by path (the flattened key, then the
    positions in a list or tuple), in the space's order, each with the draws its grid values or choice categories
    hold (the reprs parsed as Python literals of calls; a repr that does not parse, cut short or with an object's
    ``<...>`` in it, gives the draw without them)."""
    out: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for key, shown in space.items():
        if not isinstance(shown, str):
            continue
        try:
            node = _repr_node(ast.parse(shown, mode="eval").body)
        except (SyntaxError, ValueError):
            if not _DRAWN_REPR.match(shown):
                continue
            node = {"kind": "grid" if shown.startswith("{") else "choice" if shown.startswith("choice(") else "draw"}
        out.extend(draws_in(node, (key,)))
    return out


def _repr_node(node: ast.AST) -> dict[str, Any]:
    """The draw-tree node (:func:`fluidsalus.tune._tags.draw_tree`) of a parsed repr of a value of the space."""
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if name not in _DRAWN_CALLS:
            return {"kind": "fn" if name == "sample_from" else "any"}
        if name != "choice":
            return {"kind": "draw"}
        given = [kw.value for kw in node.keywords if kw.arg == "categories"] or node.args[:1]
        return _options_node("choice", given[0] if given else None)
    if isinstance(node, ast.Dict):
        if len(node.keys) == 1 and isinstance(node.keys[0], ast.Constant) and node.keys[0].value == "grid_search":
            return _options_node("grid", node.values[0])
        if not all(isinstance(k, ast.Constant) for k in node.keys):
            return {"kind": "any"}
        return {"kind": "dict", "items": [[k.value, _repr_node(v)]  # type: ignore[union-attr]
                                          for k, v in zip(node.keys, node.values, strict=True)]}
    if isinstance(node, (ast.List, ast.Tuple)):
        if all(isinstance(item, ast.Constant) for item in node.elts):  # (plain values: one node, as _tags' own)
            return constant_list_node([item.value for item in node.elts])
        return {"kind": "list", "items": [_repr_node(item) for item in node.elts]}
    try:
        return {"kind": "const", "value": ast.literal_eval(node)}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return {"kind": "any"}


def _options_node(kind: str, options: ast.AST | None) -> dict[str, Any]:
    """A choice's or grid's node, with its categories or values when they hold draws."""
    node: dict[str, Any] = {"kind": kind}
    if kind == "grid" and options is not None:
        try:
            values = ast.literal_eval(options)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            values = None
        if isinstance(values, (list, tuple)) and is_plain(values):  # (its values as written, as _tags' own keeps them)
            node["values"] = list(values)
    if isinstance(options, (ast.List, ast.Tuple)):
        alternatives = [_repr_node(option) for option in options.elts]
        if any(draws_in(alternative) for alternative in alternatives):
            node["of"] = alternatives
        elif not any(isinstance(option, (ast.Dict, ast.List, ast.Tuple)) for option in options.elts):
            node["scalar"] = True  # (as _tags' own: no dict or list among its values)
    return node


def _value_at_key(config: Any, path: tuple[Any, ...]) -> Any:
    """``_at_key`` of a stored tree's path, raising ``KeyError`` where the configuration has no value."""
    value = _at_key(config, "/".join(str(part) for part in path))
    if value is _ABSENT:
        raise KeyError(path)
    return value


def _at_key(config: Any, key: str) -> Any:
    """The value at a ``/``-joined key of ``config`` (a key of its own, or a nested one, where a key may itself
    hold ``/``; a list's or tuple's element by its index; a key that is no string, such as ``2`` in
    ``{"n": {2: ...}}``, by its text), or :data:`_ABSENT`."""
    own = _child(config, key)
    if own is not _ABSENT:
        return own
    parts = key.split("/")
    for i in range(1, len(parts)):
        child = _child(config, "/".join(parts[:i]))
        if child is _ABSENT:
            continue
        value = _at_key(child, "/".join(parts[i:]))
        if value is not _ABSENT:
            return value
    return _ABSENT


def _child(config: Any, name: str) -> Any:
    """The value of ``config`` (a dict, list or tuple) under the key or index whose text is ``name``, or
    :data:`_ABSENT`."""
    if isinstance(config, Mapping):
        if name in config:
            return config[name]
        return next((value for key, value in config.items() if not isinstance(key, str) and str(key) == name),
                    _ABSENT)
    if isinstance(config, (list, tuple)) and name.isdigit() and int(name) < len(config):
        return config[int(name)]
    return _ABSENT


def run_settings_of(experiment_path: str) -> dict[str, Any]:
    """What an experiment's folder says of the run that Ray's ``Trial`` has on every trial: ``max_failures`` (the
    store's run spec), ``stopping_criterion`` (the run's ``stop`` when it was a dict: a ``fluidsalus.tune`` run's, as
    its Tuner wrote it into :data:`PARAMS_FILE`, or the dict a ``fluidsalus.run`` stored; ``{}`` otherwise, as in
    Ray).

    Returns:
        Those two keys; Ray's defaults (``0``, ``{}``) for what the folder does not say.
    """
    out: dict[str, Any] = {"max_failures": 0, "stopping_criterion": {}}
    try:
        store = open_readonly(experiment_path)
    except StoreError:
        return out
    try:
        spec = store.experiment().get("spec") or {}
    except StoreError:
        spec = {}
    finally:
        store.close()
    if isinstance(spec.get("max_failures"), int):
        out["max_failures"] = spec["max_failures"]
    stop = spec.get("stop")
    try:  # (the Tune front end ran a dict as a function, which the spec names; its Tuner wrote the dict)
        with open(os.path.join(experiment_path, PARAMS_FILE), encoding="utf-8") as f:
            stop = json.load(f).get("stop")
    except (OSError, ValueError, AttributeError):
        pass
    if isinstance(stop, Mapping):
        out["stopping_criterion"] = dict(stop)
    return out
