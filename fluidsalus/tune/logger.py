"""``LoggerCallback`` (``ray.tune.logger.LoggerCallback``): a callback with per-trial logging hooks.

Override ``log_trial_start``, ``log_trial_restore``, ``log_trial_save``, ``log_trial_result`` and
``log_trial_end``; they are called from Ray's callback hooks (:mod:`fluidsalus.tune.callback`), with the same
``trial`` view. Ray's ready-made loggers (``CSVLoggerCallback``, ``JsonLoggerCallback``, ``TBXLoggerCallback``)
are not provided: every result is in the experiment's store (``fluidsalus inspect``, ``ResultGrid``).
"""

from __future__ import annotations

from typing import Any

from fluidsalus.tune.callback import Callback

__all__ = ["LoggerCallback"]


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
