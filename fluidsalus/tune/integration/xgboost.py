"""The XGBoost callback of Ray Tune (``ray.tune.integration.xgboost``).

Pass :class:`TuneReportCheckpointCallback` to ``xgboost.train`` (or ``xgboost.cv``) inside a trainable: after each
boosting round it reports the evaluation results, each under ``<evaluation set>-<metric>`` (``"test-logloss"``),
as ``fluidsalus.tune.report`` does, so a scheduler can stop the trial between rounds. Every ``frequency`` rounds,
and after the last one, it saves the booster into the reported checkpoint; :meth:`get_model` loads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import xgboost
from xgboost.callback import TrainingCallback

from fluidsalus.tune.integration import _report_callback as _base

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]


class TuneReportCheckpointCallback(_base.ReportCallback, TrainingCallback):
    """XGBoost callback that reports each round's metrics and checkpoints the booster.

    Args:
        metrics: What to report: None reports every evaluated metric under ``<set>-<metric>``; a str or a list
            reports those names; a dict ``{name to report: "<set>-<metric>"}`` renames them.
        filename: The booster's file name inside each checkpoint (its suffix picks XGBoost's format).
        frequency: Save a checkpoint every ``frequency`` rounds; 0 saves none during training.
        checkpoint_at_end: Save one after the last round (reported with the last round's metrics) unless the
            last round already saved one. ``xgboost.cv``'s folds have no single booster to save, so under it
            nothing is saved.
        results_postprocessing_fn: Rewrites each round's dict before it is reported (to average ``xgboost.cv``'s
            ``(mean, std)`` pairs, say).
    """

    #: The default file name, Ray's: XGBoost's binary JSON format.
    CHECKPOINT_NAME = "model.ubj"

    def __init__(self, metrics: _base.Metrics = None, filename: str = CHECKPOINT_NAME, frequency: int = 0,
                 checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        super().__init__(metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn)
        self._last_metrics: dict[str, Any] = {}
        self._last_saved_round: int | None = None

    @classmethod
    def get_model(cls, checkpoint: Any, filename: str = CHECKPOINT_NAME) -> xgboost.Booster:
        """Load the booster saved in ``checkpoint`` (``Result.checkpoint``, say) under ``filename``."""
        with checkpoint.as_directory() as folder:
            booster = xgboost.Booster()
            booster.load_model(f"{folder}/{filename}")
            return booster

    def after_iteration(self, model: Any, epoch: int, evals_log: dict[str, Any]) -> bool:
        """Report round ``epoch`` (0-based), with a checkpoint every ``frequency`` rounds; never stops training."""
        self._last_metrics = self._round_metrics(evals_log)
        save = self._saves_at(epoch) and _can_save(model)
        if save:
            self._last_saved_round = epoch
        _base.report(self._last_metrics, model.save_model if save else None, self._filename)
        return False

    def after_training(self, model: Any) -> Any:
        """Save the final booster, reported with the last round's metrics, unless the last round saved it."""
        if not self._checkpoint_at_end or not _can_save(model):
            return model
        if self._last_saved_round is not None and model.num_boosted_rounds() - 1 == self._last_saved_round:
            return model
        _base.report(self._last_metrics, model.save_model, self._filename)
        return model


def _can_save(model: Any) -> bool:
    """Whether ``model`` is one booster (``xgboost.cv`` hands its callbacks its folds, which cannot be saved)."""
    return isinstance(model, xgboost.Booster)


TuneReportCallback = _base.removed_callback(__name__)
