"""How often a run saves the state a resume takes back, beside its store: the callbacks' states
(``fluidsalus.tune.callback``) and the run's stopper (:mod:`fluidsalus.stopper_state`).

Ray Tune saves its experiment state, which holds both, with one period: ``TUNE_GLOBAL_CHECKPOINT_S``, a number of
seconds, or ``auto`` (the default): at least :data:`AUTO_MIN_PERIOD_S` between saves and :data:`AUTO_PERIOD_FACTOR`
times the last save's duration, so that saving takes at most a twentieth of the run. Each save here keeps its own
clock by the same rule.
"""

from __future__ import annotations

import os
import time

from fluidsalus.errors import ConfigError

__all__ = ["AUTO_MIN_PERIOD_S", "AUTO_PERIOD_FACTOR", "PERIOD_ENV", "SavePeriod", "save_period"]

#: Ray's environment variable for the period of experiment-state saves: seconds, or ``auto``.
PERIOD_ENV = "TUNE_GLOBAL_CHECKPOINT_S"
#: Ray's ``auto`` period: at least this many seconds between saves ...
AUTO_MIN_PERIOD_S = 10.0
#: ... and this many times the last save's duration, so that saving takes at most 1/20 of the time.
AUTO_PERIOD_FACTOR = 19.0


def save_period() -> float | None:
    """The fixed period :data:`PERIOD_ENV` names, or None for ``auto``.

    Raises:
        ConfigError: If the variable is neither ``auto`` nor a number of seconds >= 0.
    """
    raw = os.environ.get(PERIOD_ENV, "auto").strip()
    if raw == "auto":
        return None
    try:
        period = float(raw)
    except ValueError:
        period = -1.0
    if not period >= 0:
        raise ConfigError(f"{PERIOD_ENV} must be 'auto' or a number of seconds >= 0 (got {raw!r})")
    return period


class SavePeriod:
    """When the next save of one kind of state is due. The first is due at once (Ray's first loop step saves).

    Raises:
        ConfigError: If :data:`PERIOD_ENV` is neither ``auto`` nor a number of seconds >= 0.
    """

    def __init__(self) -> None:
        self._fixed = save_period()
        self._period = AUTO_MIN_PERIOD_S if self._fixed is None else self._fixed
        self._last = float("-inf")

    def due(self) -> bool:
        """Whether a save is due now; if so, the clock starts again from now (a save that then writes nothing
        waits a whole period too: asking for the state has its own cost)."""
        now = time.monotonic()
        if now - self._last < self._period:
            return False
        self._last = now
        return True

    def saved(self, seconds: float) -> None:
        """A save that took ``seconds`` has just ended: the next is a period from now (under ``auto``, a period
        that grows with the save's duration)."""
        self._last = time.monotonic()
        if self._fixed is None:
            self._period = max(AUTO_MIN_PERIOD_S, AUTO_PERIOD_FACTOR * seconds)
