"""What the xgboost and LightGBM callbacks share: which metrics a round reports, and when it checkpoints."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.tune.utils import flatten_dict

#: The delimiter Ray's callbacks join an evaluation set's name and a metric's name with (``"test-logloss"``).
METRIC_DELIMITER = "-"

Metrics = str | Sequence[str] | Mapping[str, str] | None
Postprocess = Callable[[dict[str, Any]], dict[str, Any]]


def check_arguments(owner: str, metrics: Metrics, filename: str, frequency: int,
                    results_postprocessing_fn: Postprocess | None) -> dict[str, str] | None:
    """Validate a callback's arguments and return its metrics as ``{reported name: library name}``.

    Args:
        owner: The callback's name, for the error messages.
        metrics: None (report every metric), one library metric name, a list of them, or a dict from the name to
            report under to the library's name.
        filename: The model's file name inside each checkpoint.
        frequency: Checkpoint every ``frequency`` rounds; 0 checkpoints only at the end.
        results_postprocessing_fn: None or a callable that rewrites each round's metrics.

    Returns:
        None when every metric is reported, else the mapping of reported names to the library's names.

    Raises:
        ConfigError: naming the argument and what it accepts.
    """
    if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 0:
        raise ConfigError(f"{owner}: frequency must be an int >= 0 (0: checkpoint only at the end), "
                          f"got {frequency!r}")
    check_filename(owner, filename)
    if results_postprocessing_fn is not None and not callable(results_postprocessing_fn):
        raise ConfigError(f"{owner}: results_postprocessing_fn must be None or a callable, "
                          f"got {type(results_postprocessing_fn).__name__}")
    return check_metrics(owner, metrics)


def check_filename(owner: str, filename: str) -> None:
    """Raise a ``ConfigError`` unless ``filename`` is one file name (the model's, in each checkpoint's folder)."""
    if not isinstance(filename, str) or not filename or Path(filename).name != filename:
        raise ConfigError(f"{owner}: filename must be a file name without a folder, got {filename!r}")


def check_metrics(owner: str, metrics: Metrics) -> dict[str, str] | None:
    """Validate a callback's ``metrics`` and return them as ``{reported name: library name}``.

    Args:
        owner: The callback's name, for the error message.
        metrics: None (report every metric), one library metric name, a list of them, or a dict from the name to
            report under to the library's name.

    Returns:
        None when every metric is reported (also for an empty list or dict, as in Ray), else the mapping.

    Raises:
        ConfigError: ``metrics`` is of another type, or names a metric by something other than a str.
    """
    if metrics is None:
        return None
    if isinstance(metrics, str):
        return {metrics: metrics}
    if isinstance(metrics, Mapping):
        pairs = list(metrics.items())
    elif isinstance(metrics, Sequence):
        pairs = [(name, name) for name in metrics]
    else:
        raise ConfigError(f"{owner}: metrics must be None, a str, a list of str or a dict of str to str, "
                          f"got {type(metrics).__name__}")
    for key, name in pairs:
        if not isinstance(key, str) or not isinstance(name, str):
            raise ConfigError(f"{owner}: metrics must name metrics by str, got {key!r}: {name!r}")
    return dict(pairs) or None


def report_dict(owner: str, evaluation: Mapping[str, Any], metrics: Mapping[str, str] | None,
                postprocess: Postprocess | None) -> dict[str, Any]:
    """The metrics one round reports.

    Args:
        owner: The callback's name, for the error message.
        evaluation: ``{evaluation set: {metric: value or history}}``; a history (a list) counts by its last entry.
        metrics: ``{reported name: "<set>-<metric>"}``, or None for every metric under its flattened name.
        postprocess: Applied last to the dict, as Ray's ``results_postprocessing_fn``.

    Returns:
        The dict to report.

    Raises:
        KeyError: a metric of ``metrics`` that this round did not evaluate, with the ones it did.
    """
    flat = {key: value[-1] if isinstance(value, list) and value else value
            for key, value in flatten_dict(dict(evaluation), delimiter=METRIC_DELIMITER).items()}
    if metrics is None:
        chosen = flat
    else:
        missing = sorted(name for name in metrics.values() if name not in flat)
        if missing:
            raise KeyError(f"{owner}: metrics {missing} were not evaluated this round; the evaluated ones are "
                           f"{sorted(flat)} (<evaluation set name>{METRIC_DELIMITER}<metric name>)")
        chosen = {key: flat[name] for key, name in metrics.items()}
    return postprocess(chosen) if postprocess is not None else chosen


class ReportCallback:
    """The state both libraries' callbacks keep: their checked arguments.

    Args:
        metrics: What to report (:func:`check_arguments`).
        filename: The booster's file name inside each checkpoint.
        frequency: Save a checkpoint every ``frequency`` rounds; 0 saves none during training.
        checkpoint_at_end: Save one at the end of training.
        results_postprocessing_fn: Rewrites each round's dict before it is reported.
    """

    def __init__(self, metrics: Metrics, filename: str, frequency: int, checkpoint_at_end: bool,
                 results_postprocessing_fn: Postprocess | None) -> None:
        self._metrics = check_arguments(type(self).__name__, metrics, filename, frequency, results_postprocessing_fn)
        self._filename = filename
        self._frequency = frequency
        self._checkpoint_at_end = bool(checkpoint_at_end)
        self._postprocess = results_postprocessing_fn

    def _round_metrics(self, evaluation: Mapping[str, Any]) -> dict[str, Any]:
        """The metrics a round with these evaluation results reports (:func:`report_dict`)."""
        return report_dict(type(self).__name__, evaluation, self._metrics, self._postprocess)

    def _saves_at(self, round_index: int) -> bool:
        """Whether round ``round_index`` (0-based) saves a checkpoint by ``frequency``."""
        return self._frequency > 0 and (round_index + 1) % self._frequency == 0


def removed_callback(module: str) -> type:
    """Ray's ``TuneReportCallback`` of ``module``, removed in Ray 2.11: creating one raises, as in Ray."""

    class TuneReportCallback:
        def __new__(cls, *args: Any, **kwargs: Any) -> TuneReportCallback:
            raise DeprecationWarning("`TuneReportCallback` is deprecated. Use "
                                     f"`{module}.TuneReportCheckpointCallback` instead.")

    TuneReportCallback.__module__ = module
    TuneReportCallback.__doc__ = f"Removed in Ray 2.11 ({module}.TuneReportCallback): creating one raises."
    return TuneReportCallback


def report(metrics: dict[str, Any], save: Callable[[str], Any] | None, filename: str) -> None:
    """Report ``metrics`` through :func:`fluidsalus.tune.report`, with a checkpoint if ``save`` is given.

    Args:
        metrics: The round's metrics.
        save: Writes the model to the path it is given (a booster's ``save_model``, a Lightning trainer's
            ``save_checkpoint``), or None to report no checkpoint.
        filename: The model's file name in the checkpoint's folder. The folder is temporary: ``report`` copies it
            into the experiment before it returns.
    """
    from fluidsalus.tune import Checkpoint
    from fluidsalus.tune import report as tune_report

    if save is None:
        tune_report(metrics)
        return
    with tempfile.TemporaryDirectory(prefix="fluidsalus_model_") as folder:
        save(str(Path(folder, filename)))
        tune_report(metrics, checkpoint=Checkpoint(folder))
