"""Median stopping: another searcher's trials, stopped by the median stopping rule of Google Vizier, with the
decisions of Ray Tune's ``MedianStoppingRule``.

At each result of a trial at time ``t`` (``result[time_attr]``) from ``grace_period`` on, the trial is stopped
when its best ``metric`` value so far is strictly worse than the median of the other trials' running means,
taken over the trials whose last recorded time is at least ``t``. A running mean is the mean of a trial's values
recorded at times in ``[grace_period, t]``; trials with none, or with a mean that is not finite, are left out,
and with fewer than ``min_samples_required`` left nothing is decided. Ray's bookkeeping is kept as it is: a
result counts only when it has both keys, and a trial's last result is recorded a second time when it ends
(Ray's ``on_trial_complete`` appends it), so it weighs twice in that trial's running mean.

From ``grace_period`` on, a trial waits after each result for the rule's decision on it (``verdict_from``), as a
Ray Tune trial waits for its scheduler: a trial the rule stops ends at that result, as under Ray, at the cost of
one round trip to the driver per result (its lane's turn goes to a neighbour meanwhile).

``hard_stop=False`` makes Ray pause the trial instead, and resume it, never to be judged again, once no other
trial waits. fluidsalus shares devices instead of pausing trials, so such a trial goes on at once and is not
judged again: it ends as it would under Ray, only sooner.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fluidsalus.errors import ConfigError
from fluidsalus.searchers._asha import check_mode, check_name, is_number
from fluidsalus.searchers._base import BaseSearcher, Decision, WrappingSearcher, check_inner, is_replayable
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["MedianStopping", "median_says_stop"]


def median_says_stop(best: float, running_means: list[float], mode: str, min_samples_required: int) -> bool:
    """The rule itself: stop when the median of the finite running means is strictly better than ``best``.

    Args:
        best: The trial's best value so far (Ray: ``max`` or ``min`` over its recorded values).
        running_means: The other trials' running means up to the trial's time (NaN and infinities are left out).
        mode: ``"min"`` or ``"max"``.
        min_samples_required: Fewer finite running means than this decide nothing (the trial continues).

    Returns:
        True to stop the trial.
    """
    finite = [m for m in running_means if math.isfinite(m)]
    if len(finite) < min_samples_required:
        return False
    median = float(np.median(finite))
    better = max if mode == "max" else min
    return better(median, best) != best


class _History:
    """One trial's recorded (time, value) pairs, in the order they came."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[float] = []
        self.sorted = True  # times never went down: a window is found by bisection

    def add(self, time: float, value: float) -> None:
        if self.times and time < self.times[-1]:
            self.sorted = False
        self.times.append(time)
        self.values.append(value)

    def running_mean(self, start: float, end: float) -> float:
        """Ray's ``np.mean`` of the values recorded at times in ``[start, end]`` (NaN when there is none)."""
        if self.sorted:
            window = self.values[bisect.bisect_left(self.times, start):bisect.bisect_right(self.times, end)]
        else:
            window = [v for t, v in zip(self.times, self.values, strict=True) if start <= t <= end]
        return float(np.mean(window)) if window else math.nan


class MedianStopping(WrappingSearcher):
    """``inner``'s trials, each result judged by the median stopping rule (see the module docstring).

    Args:
        inner: The searcher that makes the trials and runs them to their end (random or grid search,
            OptunaSearch without a pruner, ...). Its own decisions stand unless the rule stops the trial.
        metric: The result key judged.
        mode: ``"min"`` or ``"max"``.
        time_attr: The result key time is measured in (monotonic; Ray's default ``"time_total_s"``).
        grace_period: No trial is stopped, and no value counts in a running mean, before this time.
        min_samples_required: Running means needed to decide.
        hard_stop: False: a trial the rule would stop goes on, and is not judged again (see the module
            docstring).

    Raises:
        ConfigError: A parameter out of range; the message names it and the allowed values.
    """

    @property
    def replayable(self) -> bool:  # type: ignore[override]
        """As the wrapped searcher's (the rule depends on the results alone)."""
        return is_replayable(self.inner)

    @property
    def verdict_from(self) -> float | None:  # type: ignore[override]
        """From ``grace_period`` on, each result waits for the rule, as under Ray (where a trial waits for its
        scheduler at every result): a trial the rule stops ends at that result, not one or more reports later.
        Without ``hard_stop`` the rule stops nothing, so nothing waits."""
        return self.grace_period if self.hard_stop else None

    def __init__(self, inner: BaseSearcher, metric: str, mode: str, time_attr: str = "time_total_s",
                 grace_period: float = 60.0, min_samples_required: int = 3, hard_stop: bool = True) -> None:
        owner = "MedianStopping"
        self.metric = check_name(owner, "metric", metric)
        self.mode = check_mode(owner, mode)
        self.time_attr = check_name(owner, "time_attr", time_attr)
        if not is_number(grace_period) or grace_period < 0:
            raise ConfigError(f"{owner}: grace_period must be a number >= 0 (got {grace_period!r})")
        if isinstance(min_samples_required, bool) or not isinstance(min_samples_required, int) \
                or min_samples_required < 1:
            raise ConfigError(f"{owner}: min_samples_required must be an int >= 1 (got {min_samples_required!r})")
        if not isinstance(hard_stop, bool):
            raise ConfigError(f"{owner}: hard_stop must be True or False (got {hard_stop!r})")
        self.inner = check_inner(owner, inner)
        self.grace_period = float(grace_period)
        self.min_samples_required = min_samples_required
        self.hard_stop = hard_stop
        self._history: dict[str, _History] = {}
        self._judged: set[str] = set()  # trials the rule stopped (or, without hard_stop, let go on unjudged)

    def next_groups(self) -> list[TrialGroup]:
        """The inner searcher's groups.

        Raises:
            ConfigError: The inner searcher runs trials to budgets (it already stops trials itself).
        """
        return self._groups_run_to_their_end("MedianStopping", "the median stopping rule judges trials that run to "
                                                               "their end")

    def _record(self, trial_id: str, result: Mapping[str, Any] | None) -> float | None:
        """Record the result's (time, value) when it has both; returns its time (None: not recorded)."""
        if result is None:
            return None
        time, value = result.get(self.time_attr), result.get(self.metric)
        if not is_number(time) or not is_number(value):
            return None
        self._history.setdefault(trial_id, _History()).add(float(time), float(value))
        return float(time)

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """The inner searcher's decision, or STOP when the rule stops the trial at this result."""
        decision = self.inner.on_result(trial_id, result)
        if trial_id in self._judged:
            return decision
        time = self._record(trial_id, result)
        if time is None or time < self.grace_period:
            return decision
        others = [history.running_mean(self.grace_period, time) for other, history in self._history.items()
                  if other != trial_id and history.times[-1] >= time]
        values = self._history[trial_id].values
        best = max(values) if self.mode == "max" else min(values)
        if not median_says_stop(best, others, self.mode, self.min_samples_required):
            return decision
        self._judged.add(trial_id)
        return Decision.STOP if self.hard_stop else decision

    def judged(self, trial_id: str) -> bool:
        """Whether the rule has stopped the trial (without ``hard_stop``: let it go on unjudged)."""
        return trial_id in self._judged

    def debug_string(self, statuses: Mapping[str, str] | None = None) -> str:
        """The scheduler's line of Ray's status report (``MedianStoppingRule.debug_string()``): the trials the rule
        stopped (without ``hard_stop``: judged, as Ray counts the trials it paused), e.g. ``Using
        MedianStoppingRule: num_stopped=2.`` (``statuses`` is unused.)"""
        return f"Using MedianStoppingRule: num_stopped={len(self._judged)}."

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self.inner.on_trial_complete(trial_id, result, error)
        if not error:  # Ray's on_trial_complete records the last result again; its on_trial_error records nothing
            self._record(trial_id, result)

    def state_dict(self) -> dict[str, Any]:
        """The inner searcher's state, every trial's recorded (time, value) pairs and the judged trials."""
        return {"inner": self.inner.state_dict(),
                "history": {tid: [h.times, h.values] for tid, h in self._history.items()},
                "judged": sorted(self._judged)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])
        self._history = {}
        for trial_id, (times, values) in dict(state.get("history", {})).items():
            history = self._history[str(trial_id)] = _History()
            for time, value in zip(times, values, strict=True):
                history.add(float(time), float(value))
        self._judged = {str(t) for t in state.get("judged", [])}
