"""Helpers for tests of the Ray Tune front end that interrupt a run and continue it (``Tuner.restore``,
``tune.run(resume=...)``). They live in the package so that Ray's workers import them by name."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from fluidsalus import tune

__all__ = ["RESUMABLE_STEPS", "InterruptOnce", "SignalOnce", "resumable"]

#: Iterations of :func:`resumable`.
RESUMABLE_STEPS = 6
#: Seconds each iteration of :func:`resumable` sleeps, so that an interruption finds trials unfinished.
_STEP_S = 0.1


class InterruptOnce(tune.Callback):
    """Raises KeyboardInterrupt at the ``n``-th result the driver sees, the first time only (a marker file
    remembers, so the same callback lets the continued run finish)."""

    def __init__(self, marker: str, n: int) -> None:
        self.marker, self.n, self.seen = marker, n, 0

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self.seen += 1
        if self.seen == self.n and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise KeyboardInterrupt


class SignalOnce(tune.Callback):
    """Sends ``signals`` to the driver's own process at the ``n``-th result it sees, as a user's Ctrl-C (SIGINT)
    would arrive, the first time only (a marker file remembers, since the Tuner saves its callbacks and a restored
    run gets them back). The second of two signals comes while the first one's interruption is being handled."""

    def __init__(self, marker: str, n: int, signals: tuple[int, ...] = (signal.SIGINT,)) -> None:
        self.marker, self.n, self.signals, self.seen = marker, n, signals, 0

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self.seen += 1
        if self.seen == self.n and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            self._send(list(self.signals))

    def _send(self, signals: list[int]) -> None:
        if signals:
            try:
                signal.raise_signal(signals[0])
            finally:
                self._send(signals[1:])


def resumable(config: dict[str, Any], before_step: Callable[[dict[str, Any], int], None] | None = None,
              metrics: Callable[[dict[str, Any], int], dict[str, Any]] | None = None) -> None:
    """Reports ``i`` = 1 .. :data:`RESUMABLE_STEPS` with a checkpoint each, continuing after the checkpoint it is
    given; ``resumed_from`` is the iteration it continued from (0 for a fresh start).

    Args:
        config: The trial's configuration.
        before_step: Called as ``before_step(config, i)`` before step ``i`` is reported (a trainable built on this
            one fails there, say).
        metrics: ``metrics(config, i)`` gives more metrics to report with step ``i`` (a score a scheduler ranks).
    """
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            start = json.load(f)["i"]
    for i in range(start + 1, RESUMABLE_STEPS + 1):
        time.sleep(_STEP_S)
        if before_step is not None:
            before_step(config, i)
        folder = os.path.join(tune.get_context().get_trial_dir(), f"tmp_{i}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump({"i": i}, f)
        tune.report({"i": i, "resumed_from": start, **(metrics(config, i) if metrics is not None else {})},
                    checkpoint=tune.Checkpoint.from_directory(folder))
