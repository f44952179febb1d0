"""Ray Tune's stop signals: the first Ctrl-C ends a run and returns its results.

In Ray Tune, the first SIGINT (Ctrl-C) or SIGUSR1 during ``Tuner.fit()`` or ``tune.run()`` does not raise: the run
stops its trials, saves its state and returns what it has, after a warning that says how to resume. A second
Ctrl-C skips that and raises ``KeyboardInterrupt``. ``TUNE_DISABLE_SIGINT_HANDLER=1`` leaves SIGINT alone (it then
raises at once). The front end keeps these rules: :class:`StopSignals` counts the signals while a run is under way
and turns each into a ``KeyboardInterrupt``, which stops the trials and flushes the store as every interruption of
``fluidsalus.run`` does. :meth:`StopSignals.graceful` then says whether the front end returns the results (exactly
one signal came) or lets the exception through (a second signal, or a ``KeyboardInterrupt`` no signal caused, such
as one a callback raises). A stop signal before the run has begun (Ray's start, the devices' start: before
:meth:`StopSignals.arm`) raises ``KeyboardInterrupt`` from ``fit()``, as Ray's, whose handler is set once its set-up
is done.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

__all__ = ["DISABLE_SIGINT_ENV", "StopSignals"]

logger = logging.getLogger(__name__)

#: Ray's environment variable: a non-zero integer leaves SIGINT to Python (Ctrl-C raises ``KeyboardInterrupt``).
DISABLE_SIGINT_ENV = "TUNE_DISABLE_SIGINT_HANDLER"


class StopSignals:
    """Counts SIGINT and SIGUSR1 while it is entered, turning each into ``KeyboardInterrupt``.

    Handlers can only be set in the main thread; entered in another thread it changes nothing (as in Ray).

    Args:
        armed: Whether a signal ends the run gracefully from the start; if not, until :meth:`arm`, a signal raises
            ``KeyboardInterrupt`` uncounted (not :meth:`graceful`), without the warning.
    """

    def __init__(self, armed: bool = True) -> None:
        self.received = 0
        self.armed = armed
        self._previous: dict[int, Any] = {}

    def arm(self) -> None:
        """From now on the first stop signal ends the run gracefully (the run has begun)."""
        self.armed = True

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        wanted = [] if int(os.getenv(DISABLE_SIGINT_ENV, "0") or "0") else [signal.SIGINT]
        if hasattr(signal, "SIGUSR1"):
            wanted.append(signal.SIGUSR1)
        for signum in wanted:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.armed:
            raise KeyboardInterrupt
        self.received += 1
        if self.received == 1:
            logger.warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending the run. Its trials are stopped "
                           "and its state saved. Press Ctrl+C again to skip that.")
        raise KeyboardInterrupt

    def graceful(self) -> bool:
        """Whether the ``KeyboardInterrupt`` being handled came from exactly one stop signal."""
        return self.received == 1
