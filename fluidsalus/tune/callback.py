"""Ray Tune's experiment callbacks (``ray.tune.Callback``), run on fluidsalus's driver-side callbacks.

A subclass of :class:`Callback` overrides any of Ray's hooks. They are called in the driver, after the
result or the trial's end has been stored, with Ray's arguments:

- ``setup(stop=..., num_samples=..., total_num_samples=...)`` once, before the first trial;
- ``on_trial_start(iteration, trials, trial)`` before a trial's first result is passed on (fluidsalus tells
  callbacks about results, not starts, so a trial that ends without a result is never "started");
- ``on_trial_result(iteration, trials, trial, result)`` for every result, in order. ``result`` has Ray's
  ``config`` key;
- ``on_trial_complete(iteration, trials, trial)`` when a trial ends, or ``on_trial_error(...)`` when it
  failed for good;
- ``on_experiment_end(trials)`` once, when ``fit()`` returns or raises.

``trial`` is a :class:`TrialInfo`: ``trial_id``, ``config``, ``last_result``, ``status`` and ``path``, the
attributes callbacks read most; it is not Ray's ``Trial``. ``iteration`` counts the results and trial ends
the callbacks have seen. ``on_step_begin``/``on_step_end``, ``on_trial_save``, ``on_trial_restore``,
``on_trial_recover`` and ``on_checkpoint`` are never called (fluidsalus has no such events for callbacks).

An object of Ray's own ``ray.tune.Callback`` class is accepted too and called the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fluidsalus.callbacks import Callback as EngineCallback
from fluidsalus.store import DB_FILENAME, ERROR, ExperimentStore

__all__ = ["Callback", "TrialInfo"]

logger = logging.getLogger(__name__)

#: Status of a trial that runs (Ray's name).
RUNNING = "RUNNING"
#: Ray's result key that holds the trial's configuration.
CONFIG_KEY = "config"
#: The result key that is 1 at the first result of each attempt of a trial (a start, a retry, a PBT exploit).
_RESTART_KEY = "iterations_since_restore"


class Callback:
    """Base class of experiment callbacks, with Ray Tune's hooks; override the ones you need."""

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:
        """Called once before the first trial."""

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Not called by fluidsalus (it has no controller steps)."""

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Not called by fluidsalus (it has no controller steps)."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called before a trial's first result is passed on."""

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Not called by fluidsalus."""

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Not called by fluidsalus."""

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        """Called for every stored result, in order."""

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called when a trial ends without error."""

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Not called by fluidsalus."""

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called when a trial has failed for good (after its retries)."""

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        """Not called by fluidsalus."""

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Called once when the experiment ends (``fit()`` returns or raises)."""


@dataclass
class TrialInfo:
    """The light view of a trial that Ray-style callbacks get as ``trial``.

    Attributes:
        trial_id: The trial's id.
        config: Its configuration (PBT may change it).
        last_result: Its last result, or None.
        status: ``RUNNING``, ``TERMINATED`` or ``ERROR``.
        path: Its folder in the experiment.
        trainable_name: The trainable's name.
    """

    trial_id: str
    config: dict[str, Any] = field(default_factory=dict)
    last_result: dict[str, Any] | None = None
    status: str = RUNNING
    path: str = ""
    trainable_name: str = ""

    @property
    def local_path(self) -> str:
        """Ray's name for :attr:`path`."""
        return self.path

    @property
    def trial_name(self) -> str:
        """``<trainable>_<trial_id>``."""
        return f"{self.trainable_name}_{self.trial_id}" if self.trainable_name else self.trial_id

    def __str__(self) -> str:
        return self.trial_name


class RayCallbackAdapter(EngineCallback):
    """Runs Ray-style callbacks on fluidsalus's callback hooks.

    The engine tells callbacks a trial id and a result; the configuration comes from the experiment's store
    (read-only), read again at the first result of each attempt (a PBT exploit changes it).

    Args:
        callbacks: Objects with Ray's hooks (:class:`Callback` or Ray's own).
        experiment_dir: The experiment's folder (where its store is).
        trainable_name: For :attr:`TrialInfo.trial_name`.
    """

    def __init__(self, callbacks: list[Any], experiment_dir: str, trainable_name: str) -> None:
        self.callbacks = list(callbacks)
        self.experiment_dir = experiment_dir
        self.trainable_name = trainable_name
        self.trials: dict[str, TrialInfo] = {}
        self.iteration = 0
        self._store: ExperimentStore | None = None
        self._config_cache: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ Ray-side calls

    def _call(self, hook: str, **kwargs: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if callable(method):
                method(**kwargs)

    def setup(self, stop: Any, num_samples: int, total_num_samples: int | None) -> None:
        """Call every callback's ``setup``."""
        self._call("setup", stop=stop, num_samples=num_samples, total_num_samples=total_num_samples)

    def experiment_end(self) -> None:
        """Call every callback's ``on_experiment_end`` and close the store."""
        try:
            self._call("on_experiment_end", trials=list(self.trials.values()))
        finally:
            if self._store is not None:
                with contextlib.suppress(Exception):
                    self._store.close()
                self._store = None

    # ------------------------------------------------------------------ engine hooks

    def _configs(self) -> dict[str, dict[str, Any]]:
        if self._store is None:
            if not os.path.exists(os.path.join(self.experiment_dir, DB_FILENAME)):
                return {}
            self._store = ExperimentStore.open(self.experiment_dir, readonly=True)
        return {row.trial_id: row.config for row in self._store.trials()}

    def _trial(self, trial_id: str, refresh: bool) -> tuple[TrialInfo, bool]:
        info = self.trials.get(trial_id)
        new = info is None
        if new or refresh:
            if refresh or trial_id not in self._config_cache:
                self._config_cache = self._configs()
            config = self._config_cache.get(trial_id, {} if info is None else info.config)
            if info is None:
                info = TrialInfo(trial_id, dict(config), path=os.path.join(self.experiment_dir, trial_id),
                                 trainable_name=self.trainable_name)
                self.trials[trial_id] = info
            else:
                info.config = dict(config)
        return info, new

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        # The first result of every attempt (a retry, or a PBT exploit with a new config) has
        # iterations_since_restore == 1: read the configuration again then.
        restarted = result.get(_RESTART_KEY) == 1
        trial, new = self._trial(trial_id, refresh=restarted)
        trial.status = RUNNING
        full = {**result, CONFIG_KEY: trial.config}
        trial.last_result = full
        self.iteration += 1
        trials = list(self.trials.values())
        if new:
            self._call("on_trial_start", iteration=self.iteration, trials=trials, trial=trial)
        self._call("on_trial_result", iteration=self.iteration, trials=trials, trial=trial, result=full)

    def on_trial_complete(self, trial_id: str, status: str, result: Mapping[str, Any] | None) -> None:
        trial, _ = self._trial(trial_id, refresh=False)
        trial.status = status
        if result is not None:
            trial.last_result = {**result, CONFIG_KEY: trial.config}
        self.iteration += 1
        hook = "on_trial_error" if status == ERROR else "on_trial_complete"
        self._call(hook, iteration=self.iteration, trials=list(self.trials.values()), trial=trial)
