"""``LoggerCallback`` (``ray.tune.logger.LoggerCallback``): a callback with per-trial logging hooks, and Ray's
file loggers ``JsonLoggerCallback`` and ``CSVLoggerCallback``.

Override ``log_trial_start``, ``log_trial_restore``, ``log_trial_save``, ``log_trial_result`` and
``log_trial_end``; they are called from Ray's callback hooks (:mod:`fluidsalus.tune.callback`), with the same
``trial`` view.

:class:`JsonLoggerCallback` and :class:`CSVLoggerCallback` write Ray's files into each trial's folder
(``params.json``, ``params.pkl`` and ``result.json``, one JSON line per result; ``progress.csv``, one row per
result), for tools that read those files. As in Ray, ``Tuner.fit`` and ``tune.run`` add both to every run
(:func:`default_loggers`) unless they were passed already or ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``; the
experiment's store (``ResultGrid``, ``ExperimentAnalysis``, ``fluidsalus inspect``) holds every result either
way. Ray's own objects of these two classes are translated (:func:`translate_ray_logger`).

:class:`TBXLoggerCallback` writes TensorBoard event files into each trial's folder, as Ray's does (it needs the
tensorboardX package). Ray adds it to every run when tensorboardX is installed; fluidsalus adds it only when
``callbacks`` has one (Ray's object is translated too), because it costs the driver about 0.17 ms per scalar plus
1.7 s to import tensorboardX on this project's 2-core machine, which a sweep of short trials would feel
(measured in docs/compatibility.md, "Callbacks").
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

from fluidsalus.checkpoint import write_atomically
from fluidsalus.errors import ConfigError
from fluidsalus.result import flatten_dict
from fluidsalus.store import PARAMS_FILE, PARAMS_PICKLE_FILE, PROGRESS_FILE, RESULT_FILE  # Ray's names (re-exported)
from fluidsalus.tune.callback import Callback, TrialInfo
from fluidsalus.tune.utils import flatten_dict as flatten_like_ray

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback", "default_loggers",
           "pretty_print", "translate_ray_logger"]

#: Ray's switch (``ray.tune.constants``): ``"1"`` leaves out the loggers added to every run.
DISABLE_AUTO_LOGGERS_ENV = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
#: Where TensorBoard shows a result's scalars (Ray's ``ray/tune/<key>``).
TBX_PREFIX = "ray/tune/"
#: Result keys Ray's TBXLoggerCallback leaves out (not useful as curves).
TBX_SKIPPED = ("config", "pid", "timestamp", "time_total_s", "training_iteration")
#: How often a trial's event file is flushed in the background, in seconds (Ray's ``flush_secs``).
TBX_FLUSH_S = 30

_Row = TypeVar("_Row")


class LoggerCallback(Callback):
    """Base class of logger callbacks: Ray's trial events as ``log_*`` calls."""

    def log_trial_start(self, trial: Any) -> None:
        """A trial started."""

    def log_trial_restore(self, trial: Any) -> None:
        """A trial resumed from a checkpoint."""

    def log_trial_save(self, trial: Any) -> None:
        """A trial's result carried a checkpoint."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        """A trial reported ``result``."""

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        """A trial ended; ``failed`` when it errored."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_start(trial)

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_save(trial)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=True)


class _JsonFallback(json.JSONEncoder):
    """Writes what JSON cannot hold as Ray's logger does: arrays as lists, NumPy scalars as numbers, NaN as null,
    anything else as its ``str``."""

    def default(self, value: Any) -> Any:
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):  # NumPy's scalars among them
            number = float(value)
            return None if math.isnan(number) else number
        if hasattr(value, "tolist"):  # NumPy arrays (torch tensors too)
            return value.tolist()
        return str(value)


#: Ray's ``pretty_print`` writes a list longer than this on one line (``[a, b, c, d]``).
_FLOW_SEQUENCE_LENGTH = 3
#: Result keys ``pretty_print`` leaves out, as Ray's does.
_NOT_PRINTED = ("config", "hist_stats")


def pretty_print(result: dict[str, Any], exclude: set[str] | None = None) -> str:
    """A result as Ray's ``tune.logger.pretty_print`` shows it: YAML, keys sorted, without ``config``,
    ``hist_stats``, the ``exclude`` keys and None values; values JSON cannot hold are written as Ray's loggers
    write them (arrays as lists, NaN as null, other objects as text).

    Args:
        result: The result (a dict).
        exclude: Keys to leave out.

    Returns:
        The text.
    """
    import yaml  # Ray's own dependency

    class _Dumper(yaml.SafeDumper):
        def represent_sequence(self, tag: str, sequence: Any, flow_style: bool | None = None) -> Any:
            long = len(sequence) > _FLOW_SEQUENCE_LENGTH
            return super().represent_sequence(tag, sequence, flow_style=True if long else flow_style)

    kept = {key: value for key, value in result.items()
            if key not in _NOT_PRINTED and value is not None and (exclude is None or key not in exclude)}
    plain = json.loads(json.dumps(kept, cls=_JsonFallback))
    return str(yaml.dump(plain, Dumper=_Dumper, default_flow_style=False))


#: The result keys that say where an attempt started: the trial's iteration count, and the attempt's.
_ITERATION_KEY = "training_iteration"
_SINCE_RESTORE_KEY = "iterations_since_restore"


def _drop_rows_past(rows: list[_Row], iteration_of: Callable[[_Row], int | None], last_kept: int) -> list[_Row]:
    """``rows`` without its trailing rows whose iteration is past ``last_kept`` (a row without one ends the scan):
    the rows of an attempt that a resumed attempt, starting after ``last_kept``, writes again."""
    end = len(rows)
    while end > 0 and (iteration := iteration_of(rows[end - 1])) is not None and iteration > last_kept:
        end -= 1
    return rows[:end]


def _row_iteration(value: Any) -> int | None:
    """A row's ``training_iteration`` as a number, or None when it has none."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


class _FileLogger(LoggerCallback):
    """A logger with one open results file per trial (:attr:`FILE` in its folder), closed when the trial or the
    experiment ends.

    The first result this logger gets for a trial in a session tells where the trial's attempt started
    (``training_iteration - iterations_since_restore``): the file's trailing rows past that iteration, which an
    interrupted session wrote before the trial was restored from an earlier checkpoint or restarted from scratch,
    are dropped, so the file holds the history the attempt continues, as the experiment's store does (Ray starts a
    restored trial's file anew when it has no checkpoint). Within a session a retry appends, as in Ray."""

    #: The results file, in the trial's folder.
    FILE = RESULT_FILE

    def __init__(self) -> None:
        self._files: dict[str, TextIO] = {}
        self._continued: set[str] = set()  # trials whose file this session has checked (a retry appends)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its open files and what it knows of this session (``Tuner.restore`` keeps the callbacks):
        each reopens in append mode."""
        return {name: {} if isinstance(value, dict) else set() if isinstance(value, set) else value
                for name, value in self.__dict__.items()}

    def _open(self, trial: Any) -> None:
        """Open the trial's file for appending."""
        os.makedirs(trial.path, exist_ok=True)
        self._files[trial.trial_id] = open(os.path.join(trial.path, self.FILE), "a")  # noqa: SIM115

    def _drop_rows(self, path: str, last_kept: int) -> bool:
        """Drop the file's trailing rows past iteration ``last_kept``; whether any were."""
        raise NotImplementedError

    def _continue_file(self, trial: Any, result: dict[str, Any]) -> None:
        """At the trial's first result in this session: drop its file's rows past where this attempt started
        (reopening the file if any were dropped), then open it if it is not open."""
        if trial.trial_id not in self._continued:
            self._continued.add(trial.trial_id)
            total, since = result.get(_ITERATION_KEY), result.get(_SINCE_RESTORE_KEY)
            path = os.path.join(trial.path, self.FILE)
            if isinstance(total, int) and isinstance(since, int) and os.path.exists(path) \
                    and self._drop_rows(path, total - since) and trial.trial_id in self._files:
                self.log_trial_end(trial)
        if trial.trial_id not in self._files:
            self._open(trial)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        out = self._files.pop(trial.trial_id, None)
        if out is not None:
            out.close()

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        for trial_id in list(self._files):
            self.log_trial_end(TrialInfo(trial_id=trial_id))


class JsonLoggerCallback(_FileLogger):
    """Writes ``params.json`` / ``params.pkl`` when a trial starts and appends each result to its ``result.json``
    as one JSON line (``ray.tune.logger.JsonLoggerCallback``'s files). A retry appends to the file; a trial of a
    restored experiment continues it from the iteration it resumes from (see :class:`_FileLogger`)."""

    def log_trial_start(self, trial: Any) -> None:
        if trial.trial_id in self._files:
            self._files.pop(trial.trial_id).close()
        os.makedirs(trial.path, exist_ok=True)
        with open(os.path.join(trial.path, PARAMS_FILE), "w") as f:
            json.dump(trial.config, f, indent=2, sort_keys=True, cls=_JsonFallback)
        try:
            blob = pickle.dumps(trial.config)
        except Exception:  # noqa: BLE001 - a config may hold objects pickle refuses; params.json still holds it
            blob = None
        if blob is not None:
            with open(os.path.join(trial.path, PARAMS_PICKLE_FILE), "wb") as f:
                f.write(blob)
        self._open(trial)

    def _drop_rows(self, path: str, last_kept: int) -> bool:
        with open(path) as f:
            lines = f.readlines()

        def iteration_of(line: str) -> int | None:
            try:
                row = json.loads(line)
            except ValueError:
                return None
            return _row_iteration(row.get(_ITERATION_KEY)) if isinstance(row, dict) else None

        kept = _drop_rows_past(lines, iteration_of, last_kept)
        if len(kept) == len(lines):
            return False
        write_atomically(path, "".join(kept))
        return True

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial.trial_id not in self._files:
            self.log_trial_start(trial)
        self._continue_file(trial, result)
        out = self._files[trial.trial_id]
        out.write(json.dumps(result, cls=_JsonFallback) + "\n")
        out.flush()



class CSVLoggerCallback(_FileLogger):
    """Writes each result of a trial as one row of its ``progress.csv`` (``ray.tune.logger.CSVLoggerCallback``).

    As in Ray, the columns are the flattened keys (``/``-joined) of the trial's first result, without
    ``config``; later keys outside them are left out. A retry appends rows under the header the file has; a trial
    of a restored experiment continues the file from the iteration it resumes from (see :class:`_FileLogger`).
    """

    FILE = PROGRESS_FILE

    def __init__(self) -> None:
        super().__init__()
        self._writers: dict[str, csv.DictWriter[str] | None] = {}
        self._has_header: dict[str, bool] = {}

    def _open(self, trial: Any) -> None:
        os.makedirs(trial.path, exist_ok=True)
        path = os.path.join(trial.path, self.FILE)
        self._has_header[trial.trial_id] = os.path.exists(path) and os.path.getsize(path) > 0
        self._files[trial.trial_id] = open(path, "a", newline="")  # noqa: SIM115
        self._writers[trial.trial_id] = None

    def _drop_rows(self, path: str, last_kept: int) -> bool:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if not rows or _ITERATION_KEY not in rows[0]:
            return False
        column = rows[0].index(_ITERATION_KEY)
        kept = _drop_rows_past(rows[1:], lambda row: _row_iteration(row[column]) if column < len(row) else None,
                               last_kept)
        if len(kept) == len(rows) - 1:
            return False
        text = io.StringIO(newline="")
        if kept:  # (no row left: the file starts anew, its header from the attempt's first result, as in Ray)
            csv.writer(text).writerows(rows[:1] + kept)
        write_atomically(path, text.getvalue())
        return True

    def log_trial_start(self, trial: Any) -> None:
        if trial.trial_id in self._files:
            self.log_trial_end(trial)
        self._open(trial)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        self._continue_file(trial, result)
        # Ray's columns in Ray's order: a level's plain values, then its nested ones (Ray's flatten_dict)
        row = flatten_like_ray({k: v for k, v in result.items() if k != "config"})
        writer = self._writers[trial.trial_id]
        if writer is None:
            columns = list(row)
            if self._has_header[trial.trial_id]:  # appending to a resumed trial's file: keep its columns
                with open(os.path.join(trial.path, PROGRESS_FILE), newline="") as f:
                    columns = next(csv.reader(f), columns)
            writer = self._writers[trial.trial_id] = csv.DictWriter(self._files[trial.trial_id], columns)
            if not self._has_header[trial.trial_id]:
                writer.writeheader()
        writer.writerow({k: v for k, v in row.items() if k in writer.fieldnames})
        self._files[trial.trial_id].flush()

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        super().log_trial_end(trial, failed)
        self._writers.pop(trial.trial_id, None)


class TBXLoggerCallback(LoggerCallback):
    """TensorBoard event files in each trial's folder (``ray.tune.logger.TBXLoggerCallback``), as Ray writes them.

    Each result's numbers (nested dicts flattened with ``/``, NaN left out, and without :data:`TBX_SKIPPED`) become
    scalars ``ray/tune/<key>`` at step ``timesteps_total`` or else ``training_iteration``; a non-empty list or
    array becomes a histogram, and an array of 3, 4 or 5 dimensions an image, a batch of images or a video. When
    the trial ends, the values the search chose for it (``trial.evaluated_params``) that are simple (str, bool,
    int, float, list, None, or a NumPy scalar) and its last result's numbers go to TensorBoard's HParams view, as
    in Ray; a trial for which the search chose nothing gets none. Point TensorBoard at the experiment folder
    (``tensorboard --logdir ~/ray_results/<name>``).

    Raises:
        ConfigError: tensorboardX is not installed.
    """

    VALID_HPARAMS = (str, bool, int, float, list, type(None))

    def __init__(self) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as e:
            raise ConfigError("TBXLoggerCallback needs the tensorboardX package (pip install tensorboardX)") from e
        self._writer_class = SummaryWriter
        self._writers: dict[str, Any] = {}
        self._last: dict[str, dict[str, Any]] = {}  # each trial's last logged values, for its HParams
        self._warned = False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its open writers (``Tuner.restore`` keeps the callbacks)."""
        return {**self.__dict__, "_writers": {}, "_last": {}, "_writer_class": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tensorboardX import SummaryWriter

        self.__dict__.update(state)
        self._writer_class = SummaryWriter

    def log_trial_start(self, trial: Any) -> None:
        if trial.trial_id in self._writers:
            self._writers.pop(trial.trial_id).close()
        os.makedirs(trial.path, exist_ok=True)
        self._writers[trial.trial_id] = self._writer_class(trial.path, flush_secs=TBX_FLUSH_S)
        self._last[trial.trial_id] = {}

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        import numpy as np

        if trial.trial_id not in self._writers:
            self.log_trial_start(trial)
        writer = self._writers[trial.trial_id]
        step = result.get("timesteps_total") or result["training_iteration"]
        logged: dict[str, Any] = {}
        for key, value in flatten_dict({k: v for k, v in result.items() if k not in TBX_SKIPPED}).items():
            tag = TBX_PREFIX + key
            if _is_scalar(value):
                if not math.isnan(float(value)):
                    logged[tag] = value
                    writer.add_scalar(tag, value, global_step=step)
                continue
            if not ((isinstance(value, list) and value) or (isinstance(value, np.ndarray) and value.size > 0)):
                continue
            logged[tag] = value
            dims = value.ndim if isinstance(value, np.ndarray) else 0
            try:
                if dims == 3:
                    writer.add_image(tag, value, global_step=step)
                elif dims == 4:
                    writer.add_images(tag, value, global_step=step)
                elif dims == 5:
                    writer.add_video(tag, value, global_step=step, fps=20)
                else:
                    writer.add_histogram(tag, value, global_step=step)
            except (ValueError, TypeError) as e:
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"TBXLoggerCallback: {tag}={value!r} cannot be logged to TensorBoard ({e})",
                                  UserWarning, stacklevel=2)
        self._last[trial.trial_id] = logged
        writer.flush()

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        writer = self._writers.pop(trial.trial_id, None)
        last = self._last.pop(trial.trial_id, {})
        if writer is None:
            return
        metrics = {k: v for k, v in last.items() if _is_scalar(v)}
        params: dict[str, Any] = {}
        for k, v in flatten_dict(dict(getattr(trial, "evaluated_params", None) or {})).items():
            if type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0:  # a NumPy scalar, as Ray takes it
                v = v.item()
            if isinstance(v, self.VALID_HPARAMS):
                params[k] = v
        if metrics and params:
            from tensorboardX.summary import hparams

            try:
                for summary in hparams(hparam_dict=params, metric_dict=metrics):
                    writer.file_writer.add_summary(summary)
            except Exception as e:  # noqa: BLE001 - as Ray: a value tensorboardX refuses loses the HParams only
                warnings.warn(f"TBXLoggerCallback: the HParams of trial {trial.trial_id} were not written ({e})",
                              UserWarning, stacklevel=2)
        writer.close()

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        for trial_id in list(self._writers):
            self.log_trial_end(TrialInfo(trial_id=trial_id))


def _is_scalar(value: Any) -> bool:
    """A number TensorBoard takes as a scalar, as Ray's ``VALID_SUMMARY_TYPES`` do (ints, floats, NumPy's too, and a
    Python bool, an int: Ray logs ``done`` and a boolean metric; it dropped them here), not a NumPy bool."""
    import numpy as np

    return isinstance(value, (int, float, np.integer, np.floating))


#: Ray's loggers of other tools (``ray.air.integrations``) that run here as they are, as Ray callback objects: they
#: need only what fluidsalus's trial views have (``config``, ``local_path``, ``str(trial)``, ``trial_id``,
#: ``experiment_dir_name``, ``checkpoint`` and identity; docs/compatibility.md, "MLflow" and "W&B").
RAY_LOGGERS_RUN_AS_THEY_ARE = ("MLflowLoggerCallback", "WandbLoggerCallback")


def translate_ray_logger(callback: Any) -> Any:
    """A Ray logger callback (an import left unchanged) as fluidsalus's, or ``callback`` itself otherwise.

    Ray's JSON, CSV and TensorBoard loggers become fluidsalus's (with a warning to change the import); the
    loggers in :data:`RAY_LOGGERS_RUN_AS_THEY_ARE` are returned as they are and run as Ray callbacks.

    Raises:
        ConfigError: For a Ray logger that fluidsalus does not run (the Comet and Aim loggers), naming it.
    """
    kind = type(callback)
    if not kind.__module__.startswith(("ray.tune.logger", "ray.air.integrations")):
        return callback
    if kind.__name__ in RAY_LOGGERS_RUN_AS_THEY_ARE:
        return callback
    ours = {"JsonLoggerCallback": JsonLoggerCallback, "CSVLoggerCallback": CSVLoggerCallback,
            "TBXLoggerCallback": TBXLoggerCallback}.get(kind.__name__)
    if ours is None:
        raise ConfigError(f"RunConfig: callbacks: Ray's {kind.__name__} is not provided by fluidsalus; the results "
                          "are in the experiment's store (ResultGrid, fluidsalus inspect), and "
                          "fluidsalus.tune.logger has JsonLoggerCallback, CSVLoggerCallback and TBXLoggerCallback "
                          "(Ray's MLflowLoggerCallback and WandbLoggerCallback also run as they are)")
    warnings.warn(f"RunConfig: callbacks: Ray's {kind.__name__} was translated into "
                  f"fluidsalus.tune.logger.{kind.__name__}; import it from fluidsalus.tune.logger", UserWarning,
                  stacklevel=4)
    return ours()


def default_loggers(callbacks: list[Any]) -> list[LoggerCallback]:
    """The loggers a run adds to its ``callbacks``, as Ray's ``_create_default_callbacks`` does.

    Args:
        callbacks: The run's callbacks (Ray's loggers among them already translated).

    Returns:
        A new :class:`CSVLoggerCallback` and :class:`JsonLoggerCallback`, each unless ``callbacks`` has one;
        none when the environment sets ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``.
    """
    if os.environ.get(DISABLE_AUTO_LOGGERS_ENV, "0") == "1":
        return []
    # A subclass of Ray's own logger (not translated: it runs as a Ray callback) writes the same file. Its module
    # is imported where a script made one; it is not imported here for the others (ray.tune is slow to import).
    ray_logger = sys.modules.get("ray.tune.logger")
    return [kind() for kind in (CSVLoggerCallback, JsonLoggerCallback)
            if not any(isinstance(callback, (kind, getattr(ray_logger, kind.__name__, ()))) for callback in callbacks)]
