"""What moving a trial costs it, measured from the trial's own results (pure: no Ray).

The planner moves a running trial (or gives it more devices) only when the predicted saving over its remaining
budget exceeds the cost of a move, :attr:`PlannerSettings.move_cost_s`. The executor tells a
:class:`MoveCostMeter` when a trial's attempt ends for a move and passes it every later result of the trial;
each move gives one sample::

    cost = (t_j - t_left) - (j - c) * s

``t_left`` is when the old attempt's end arrived and ``i_left`` the last iteration it reported; ``c`` is the
iteration of the checkpoint the new attempt resumed from (``i_left`` when the trial checkpointed there). ``t_j``
is when result ``j`` of the new attempt arrived: the first with ``j > i_left`` that is not the attempt's first
result. ``s`` is that result's ``time_this_iter_s``, one iteration at the new allocation with no restore in it.
The sample is what any move costs: stopping, starting again on the new devices and restoring the checkpoint. The
``i_left - c`` iterations after the checkpoint, which the new attempt runs again, are not in it: they depend on
the trial and on when it last checkpointed, so the planner adds them per trial
(:attr:`~fluidsalus.trialgroup.planner.TrialDemand.since_checkpoint`). Both times are the driver's clock, so
devices on other nodes need no common clock. The meter's estimate is an EMA of the samples. A data-parallel resize (a
restart on more or fewer devices, with a new process group) is measured the same way into an estimate of its
own, which the planner uses for growing a trial (:attr:`PlannerSettings.resize_cost_s`); until a resize has been
measured, a resize costs what a move costs.

Before any move is measured, a move is taken to cost what starting a trial costs: a move is a start on new
devices from a checkpoint. Every attempt's first two results give one sample of that, its first iteration's
time less its second's: the trainable's set-up and the restore of its checkpoint (its clock starts when it gets
its lane's turn, so waiting for a slot is not in it). Without this, a prior larger than what a small trial could
save would block every move, and no move would ever be measured. Until a trial has done two iterations, the cost
is the prior :data:`~fluidsalus.trialgroup.planner.DEFAULT_MOVE_COST_S`. A resumed run goes on from the
estimate of measured moves it had stored (:meth:`MoveCostMeter.restore`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fluidsalus.gpu.memory import DEFAULT_EMA_ALPHA, Ema
from fluidsalus.trialgroup.planner import DEFAULT_MOVE_COST_S

__all__ = ["MoveCostMeter", "move_cost_sample", "start_overhead_sample"]


def move_cost_sample(left_at: float, from_iteration: int, at: float, iteration: int, sec_per_iter: float) -> float:
    """The seconds a move cost one trial beyond the iterations it ran again (never below 0).

    Args:
        left_at: When the trial's old attempt ended (driver clock, seconds).
        from_iteration: The iteration of the checkpoint the new attempt resumed from.
        at: When result ``iteration`` of the new attempt arrived (same clock).
        iteration: Its ``training_iteration`` (greater than ``from_iteration``).
        sec_per_iter: Its ``time_this_iter_s``: one iteration at the new allocation.

    Returns:
        ``max(0, at - left_at - (iteration - from_iteration) * sec_per_iter)``.
    """
    return max(0.0, at - left_at - (iteration - from_iteration) * sec_per_iter)


@dataclass(frozen=True)
class _Left:
    at: float
    iteration: int
    resize: bool
    resumed_from: int


def start_overhead_sample(first_iter_s: float, second_iter_s: float) -> float:
    """The set-up seconds of one (re)start of a trial: its first iteration less its second (never below 0).

    Args:
        first_iter_s: ``time_this_iter_s`` of the attempt's first result (set-up and restore included).
        second_iter_s: ``time_this_iter_s`` of its second result.

    Returns:
        ``max(0, first_iter_s - second_iter_s)``.
    """
    return max(0.0, first_iter_s - second_iter_s)


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


class MoveCostMeter:
    """The cost of a move: an EMA over measured moves, else over trial starts, else a prior (module docstring).

    Args:
        prior_s: The cost until a trial has done two iterations.
        alpha: EMA weight of one sample.

    Raises:
        ValueError: A negative or non-finite prior, or ``alpha`` outside (0, 1].
    """

    def __init__(self, prior_s: float = DEFAULT_MOVE_COST_S, alpha: float = DEFAULT_EMA_ALPHA) -> None:
        if not (math.isfinite(prior_s) and prior_s >= 0.0):
            raise ValueError(f"prior_s: must be a finite number of seconds >= 0, got {prior_s!r}")
        self.prior_s = prior_s
        self._moves = Ema(alpha)
        self._resizes = Ema(alpha)
        self._starts = Ema(alpha)
        self._left: dict[str, _Left] = {}

    @property
    def cost_s(self) -> float:
        """The current estimate: measured moves, else trial starts, else the prior."""
        for ema in (self._moves, self._starts):
            if ema.value is not None:
                return ema.value
        return self.prior_s

    @property
    def resize_cost_s(self) -> float | None:
        """The measured cost of a resize; None until one was measured (a resize then costs :attr:`cost_s`)."""
        return self._resizes.value

    @property
    def samples(self) -> int:
        """Moves measured so far."""
        return self._moves.samples

    @property
    def resize_samples(self) -> int:
        """Resizes measured so far."""
        return self._resizes.samples

    @property
    def start_samples(self) -> int:
        """Trial starts measured so far."""
        return self._starts.samples

    def start(self, first_iter_s: object, second_iter_s: object) -> float | None:
        """An attempt's first two results: one sample of a start's set-up time.

        Args:
            first_iter_s: ``time_this_iter_s`` of its first result.
            second_iter_s: ``time_this_iter_s`` of its second result.

        Returns:
            The sample, now folded into the start estimate; None when either figure is not a time.
        """
        first, second = _seconds(first_iter_s), _seconds(second_iter_s)
        if first is None or second is None:
            return None
        sample = start_overhead_sample(first, second)
        self._starts.update(sample)
        return sample

    def restore(self, cost_s: float | None, samples: int, resize_cost_s: float | None = None,
                resize_samples: int = 0) -> None:
        """Go on from the estimates measured earlier (a resumed run's last ``move_cost`` event).

        Args:
            cost_s: The move estimate then (ignored when ``samples`` is 0).
            samples: The moves it was measured over.
            resize_cost_s: The resize estimate then (ignored when ``resize_samples`` is 0).
            resize_samples: The resizes it was measured over.

        Raises:
            ValueError: A negative or non-finite cost, a negative count, or no sample at all.
        """
        pairs = (("cost_s", cost_s, "samples", samples, self._moves),
                 ("resize_cost_s", resize_cost_s, "resize_samples", resize_samples, self._resizes))
        for _, _, count_name, count, _ in pairs:
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"{count_name}: must be an int >= 0, got {count!r}")
        if samples + resize_samples < 1:
            raise ValueError("samples, resize_samples: nothing was measured")
        for name, value, _, count, _ in pairs:
            if count and _seconds(value) is None:
                raise ValueError(f"{name}: must be a finite number of seconds >= 0, got {value!r}")
        for _, value, _, count, ema in pairs:
            if count:
                ema.value, ema.samples = float(value), count  # type: ignore[arg-type]

    def left(self, trial_id: str, at: float, iteration: int, resize: bool = False,
             resumed_from: int | None = None) -> None:
        """A trial's attempt ended for a move or a resize; it starts again on its new devices.

        Args:
            trial_id: The trial.
            at: When its end arrived (driver clock).
            iteration: The last iteration it reported (0: none).
            resize: A data-parallel resize (measured into the resize estimate), not a move.
            resumed_from: The iteration of the checkpoint its new attempt resumes from (None: ``iteration``).
                The iterations between the two are run again and are not counted as the move's cost.
        """
        self._left[trial_id] = _Left(at, iteration, resize, iteration if resumed_from is None else resumed_from)

    def waiting(self, trial_id: str) -> bool | None:
        """Whether the trial's measurement under way is of a resize (True) or a move (False); None: none."""
        left = self._left.get(trial_id)
        return None if left is None else left.resize

    def drop(self, trial_id: str) -> None:
        """Stop waiting for a trial's move to show (it ended, failed or was restarted for another reason)."""
        self._left.pop(trial_id, None)

    def result(self, trial_id: str, at: float, iteration: object, since_restore: object,
               sec_per_iter: object) -> float | None:
        """One result of a trial; the move's sample when this result completes its measurement.

        Args:
            trial_id: The trial.
            at: When the result arrived (driver clock).
            iteration: Its ``training_iteration``.
            since_restore: Its ``iterations_since_restore`` (1 for the attempt's first result).
            sec_per_iter: Its ``time_this_iter_s``.

        Returns:
            The sample in seconds, now folded into :attr:`cost_s`; None when the trial is not being measured or
            this result does not measure it yet (or carries no usable figures).
        """
        left = self._left.get(trial_id)
        if left is None:
            return None
        seconds = _seconds(sec_per_iter)
        if not (isinstance(iteration, int) and isinstance(since_restore, int)) or seconds is None:
            return None
        if iteration <= left.iteration or since_restore < 2:
            return None
        del self._left[trial_id]
        sample = move_cost_sample(left.at, left.resumed_from, at, iteration, seconds)
        (self._resizes if left.resize else self._moves).update(sample)
        return sample
