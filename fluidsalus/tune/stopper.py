"""Stoppers with Ray Tune's names, signatures and rules (``ray.tune.stopper``).

A stopper is a callable ``stopper(trial_id, result) -> bool`` (stop that trial) with a ``stop_all() -> bool``
(end the experiment). Pass one as ``RunConfig(stop=...)``. fluidsalus evaluates ``__call__`` in each trial's
own thread on its device, with a copy of the stopper made for that device, and keeps one more copy on the
driver that sees every stored result, in order, and whose ``stop_all()`` ends the experiment. So state that a
stopper keeps per trial (``TrialPlateauStopper``) works as in Ray. A stopper that looks across trials
(``ExperimentPlateauStopper``, ``TimeoutStopper``) decides on the driver's copy only: a device's copy sees only
that device's trials, so the devices get its :func:`for_devices` view, which stops no trial by itself (a
``CombinedStopper`` keeps its other stoppers' answers). A stopper of your own whose ``__call__`` answers from
state across trials should decide in ``stop_all()``, or define ``for_devices()`` the same way.
"""

from __future__ import annotations

import collections
import datetime
import numbers
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.host import for_devices  # (its home: the devices' stop rules)

__all__ = [
    "CombinedStopper",
    "ExperimentPlateauStopper",
    "FunctionStopper",
    "MaximumIterationStopper",
    "NoopStopper",
    "Stopper",
    "TimeoutStopper",
    "TrialPlateauStopper",
]

#: The result key of the iteration counter.
_ITERATION_KEY = "training_iteration"
_MODES = ("min", "max")


class Stopper:
    """Base class of stoppers (``ray.tune.Stopper``): override ``__call__`` and ``stop_all``."""

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        """Whether the trial ``trial_id`` should stop after ``result``."""
        raise NotImplementedError

    def stop_all(self) -> bool:
        """Whether the whole experiment should end."""
        raise NotImplementedError


class NoopStopper(Stopper):
    """Never stops anything."""

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return False


class CombinedStopper(Stopper):
    """Stops a trial (or everything) when any of ``stoppers`` does.

    As in Ray, the stoppers are asked in order and the first that says stop ends the round: the ones after it
    do not see that result (so an experiment-wide stopper placed after a per-trial one misses each trial's
    last result), and ``stop_all()`` asks only until one says yes.
    """

    def __init__(self, *stoppers: Stopper) -> None:
        for index, stopper in enumerate(stoppers):
            if not callable(stopper) or not callable(getattr(stopper, "stop_all", None)):
                raise ConfigError(
                    f"CombinedStopper: stoppers[{index}] must be a Stopper (got {type(stopper).__name__})"
                )
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return any(stopper(trial_id, result) for stopper in self._stoppers)

    def stop_all(self) -> bool:
        return any(stopper.stop_all() for stopper in self._stoppers)

    def for_devices(self) -> CombinedStopper:
        """The stoppers' device views (:func:`for_devices`), combined."""
        return CombinedStopper(*(for_devices(stopper) for stopper in self._stoppers))

    def _forget_trial(self, trial_id: str) -> None:
        """Each stopper forgets the trial (:func:`fluidsalus.stopper_state.forget_trials`)."""
        for stopper in self._stoppers:
            forget = getattr(stopper, "_forget_trial", None)
            if callable(forget):
                forget(trial_id)


class FunctionStopper(Stopper):
    """Wraps a function ``f(trial_id, result) -> bool``; never stops everything."""

    def __init__(self, function: Callable[[str, dict[str, Any]], bool]) -> None:
        if not callable(function):
            raise ConfigError(f"FunctionStopper: function must be callable (got {type(function).__name__})")
        self._fn = function

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return bool(self._fn(trial_id, result))

    def stop_all(self) -> bool:
        return False


class MaximumIterationStopper(Stopper):
    """Stops each trial after ``max_iter`` results."""

    def __init__(self, max_iter: int) -> None:
        if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
            raise ConfigError(f"MaximumIterationStopper: max_iter must be an int >= 1 (got {max_iter!r})")
        self._max_iter = int(max_iter)
        self._iter: collections.Counter[str] = collections.Counter()

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        self._iter[trial_id] += 1
        return self._iter[trial_id] >= self._max_iter

    def stop_all(self) -> bool:
        return False

    def _forget_trial(self, trial_id: str) -> None:
        """Count the trial from 0 again (:func:`fluidsalus.stopper_state.forget_trials`)."""
        self._iter.pop(trial_id, None)


class TimeoutStopper(Stopper):
    """Ends the experiment once ``timeout`` (seconds or a ``timedelta``) has passed since its first check.

    As in Ray, the clock runs only while the stopper is asked; a copy that is unpickled (a resumed run)
    starts its clock again and keeps the budget left.
    """

    def __init__(self, timeout: int | float | datetime.timedelta) -> None:
        if isinstance(timeout, datetime.timedelta):
            seconds = timeout.total_seconds()
        elif isinstance(timeout, numbers.Real) and not isinstance(timeout, bool):
            seconds = float(timeout)
        else:
            raise ConfigError(
                f"TimeoutStopper: timeout must be a number of seconds or a datetime.timedelta "
                f"(got {type(timeout).__name__})"
            )
        self._timeout_seconds = seconds
        self._budget = seconds
        self._last_check: float | None = None

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        now = time.time()
        if self._last_check is not None:
            self._budget -= now - self._last_check
        self._last_check = now
        return self._budget <= 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_last_check"] = None
        self.__dict__.update(state)


class TrialPlateauStopper(Stopper):
    """Stops a trial once its last ``num_results`` values of ``metric`` have a standard deviation below ``std``.

    Args:
        metric: The result key to watch.
        std: Standard deviation under which the trial has plateaued.
        num_results: Values the standard deviation is computed over.
        grace_period: Results before the trial may be stopped.
        metric_threshold: Only stop once the value is at or better than this (needs ``mode``).
        mode: ``"min"`` or ``"max"`` (for ``metric_threshold``).
    """

    def __init__(
        self,
        metric: str,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold: float | None = None,
        mode: str | None = None,
    ) -> None:
        # (Ray checks the threshold's truth: a threshold of 0 without a mode is taken, and bounds nothing)
        if metric_threshold and mode not in _MODES:
            raise ConfigError(
                f"TrialPlateauStopper: mode must be 'min' or 'max' when metric_threshold is given (got {mode!r})"
            )
        if isinstance(num_results, bool) or not isinstance(num_results, numbers.Integral) or num_results < 1:
            raise ConfigError(f"TrialPlateauStopper: num_results must be an int >= 1 (got {num_results!r})")
        self._metric = metric
        self._mode = mode
        self._std = std
        self._num_results = int(num_results)
        self._grace_period = grace_period
        self._metric_threshold = metric_threshold
        self._iter: collections.Counter[str] = collections.Counter()
        self._trial_results: dict[str, collections.deque[Any]] = {}

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        value = result.get(self._metric)
        window = self._trial_results.setdefault(trial_id, collections.deque(maxlen=self._num_results))
        window.append(value)
        self._iter[trial_id] += 1
        if self._iter[trial_id] < self._grace_period or len(window) < self._num_results:
            return False
        if self._metric_threshold is not None:
            if self._mode == "min" and value > self._metric_threshold:
                return False
            if self._mode == "max" and value < self._metric_threshold:
                return False
        try:
            deviation = float(np.std(list(window)))
        except (TypeError, ValueError):
            deviation = float("inf")
        return deviation < self._std

    def _forget_trial(self, trial_id: str) -> None:
        """Count the trial and its values from none again (:func:`fluidsalus.stopper_state.forget_trials`)."""
        self._iter.pop(trial_id, None)
        self._trial_results.pop(trial_id, None)

    def stop_all(self) -> bool:
        return False


class ExperimentPlateauStopper(Stopper):
    """Ends the experiment once the best ``top`` values of ``metric`` have a standard deviation of at most
    ``std`` for more than ``patience`` results.

    Args:
        metric: The result key to watch.
        std: Standard deviation (``> 0``) at or under which the top values have plateaued.
        top: How many of the best values to watch (``> 1``).
        mode: ``"min"`` or ``"max"``: which values are best.
        patience: Results to wait once the plateau is reached.
    """

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0) -> None:
        if mode not in _MODES:
            raise ConfigError(f"ExperimentPlateauStopper: mode must be 'min' or 'max' (got {mode!r})")
        if isinstance(top, bool) or not isinstance(top, int) or top <= 1:
            raise ConfigError(f"ExperimentPlateauStopper: top must be an int > 1 (got {top!r})")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ConfigError(f"ExperimentPlateauStopper: patience must be an int >= 0 (got {patience!r})")
        if not isinstance(std, float) or std <= 0:
            raise ConfigError(f"ExperimentPlateauStopper: std must be a float > 0 (got {std!r})")
        self._metric = metric
        self._std = std
        self._top = top
        self._mode = mode
        self._patience = patience
        self._iterations = 0
        self._top_values: list[float] = []

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        self._top_values.append(result[self._metric])
        ordered = sorted(self._top_values)
        self._top_values = ordered[: self._top] if self._mode == "min" else ordered[-self._top:]
        self._iterations = self._iterations + 1 if self.has_plateaued() else 0
        return self.stop_all()

    def for_devices(self) -> NoopStopper:
        """On a device: no answer of its own (a device's copy would see only that device's trials and stop a trial
        on their plateau); the driver's copy, which sees every result, ends the experiment by ``stop_all()``."""
        return NoopStopper()

    def has_plateaued(self) -> bool:
        """Whether the ``top`` best values are within ``std`` of each other."""
        return len(self._top_values) == self._top and float(np.std(self._top_values)) <= self._std

    def stop_all(self) -> bool:
        return self.has_plateaued() and self._iterations >= self._patience
