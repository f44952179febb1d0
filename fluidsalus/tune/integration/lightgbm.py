"""The LightGBM callback of Ray Tune (``ray.tune.integration.lightgbm``).

Pass :class:`TuneReportCheckpointCallback` in ``callbacks`` of ``lightgbm.train`` (or ``lightgbm.cv``) inside a
trainable: after each boosting round it reports the evaluation results, each under ``<set>-<metric>``
(``"eval-binary_logloss"``; under ``lightgbm.cv`` ``"valid-binary_logloss-mean"`` and ``...-stdv``), through
``fluidsalus.tune.report``, so a scheduler can stop the trial between rounds. Every ``frequency`` rounds, and at
the last round, it saves the booster into that round's checkpoint; :meth:`get_model` loads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightgbm
from lightgbm.callback import CallbackEnv

from fluidsalus.tune.integration import _report_callback as _base

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]


class TuneReportCheckpointCallback(_base.ReportCallback):
    """LightGBM callback that reports each round's metrics and checkpoints the booster.

    Args:
        metrics: What to report: None reports every evaluated metric under ``<set>-<metric>``; a str or a list
            reports those names; a dict ``{name to report: "<set>-<metric>"}`` renames them.
        filename: The booster's file name inside each checkpoint (LightGBM's text format).
        frequency: Save a checkpoint every ``frequency`` rounds; 0 saves none during training.
        checkpoint_at_end: Save one with the last round's report. Under ``lightgbm.cv`` the saved model is the
            folds' ``CVBooster``.
        results_postprocessing_fn: Rewrites each round's dict before it is reported.
    """

    #: The default file name, Ray's.
    CHECKPOINT_NAME = "model.txt"

    def __init__(self, metrics: _base.Metrics = None, filename: str = CHECKPOINT_NAME, frequency: int = 0,
                 checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        super().__init__(metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn)

    @classmethod
    def get_model(cls, checkpoint: Any, filename: str = CHECKPOINT_NAME) -> lightgbm.Booster:
        """Load the booster saved in ``checkpoint`` (``Result.checkpoint``, say) under ``filename``."""
        with checkpoint.as_directory() as folder:
            return lightgbm.Booster(model_file=f"{folder}/{filename}")

    def __call__(self, env: CallbackEnv) -> None:
        """Report round ``env.iteration``, with a checkpoint every ``frequency`` rounds and at the last."""
        metrics = self._round_metrics(evaluation(env))
        last = env.iteration == env.end_iteration - 1
        save = (last and self._checkpoint_at_end) or self._saves_at(env.iteration)
        _base.report(metrics, env.model.save_model if save else None, self._filename)


def evaluation(env: CallbackEnv) -> dict[str, dict[str, float]]:
    """``{evaluation set: {metric: value}}`` of one round; ``lightgbm.cv`` gives ``<metric>-mean`` and ``-stdv``.

    Args:
        env: The round, as LightGBM hands it to callbacks: each entry of ``evaluation_result_list`` is
            ``(set, metric, value, is_higher_better)``, with the folds' standard deviation fifth under ``cv``.

    Returns:
        The nested dict the metrics are named from.
    """
    out: dict[str, dict[str, float]] = {}
    for entry in env.evaluation_result_list or []:
        data_name, metric, value = entry[0], entry[1], entry[2]
        into = out.setdefault(data_name, {})
        if len(entry) > 4:
            into[f"{metric}-mean"] = value
            into[f"{metric}-stdv"] = entry[4]
        else:
            into[metric] = value
    return out


TuneReportCallback = _base.removed_callback(__name__)
