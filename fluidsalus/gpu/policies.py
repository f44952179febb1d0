"""Lane scheduling policies: which ready trial of a lane runs the next iteration.

Trials of one lane time-slice: at each iteration boundary the lane picks one of its *ready* trials (those
waiting to run their next iteration). A policy is a pure key function over a :class:`TrialView`; the
lane runs the ready trial with the smallest key (:func:`choose`). Every key ends with the same tie-break,
``(ready_since, arrival_seq, trial_id)`` (oldest readiness, then earliest into the lane, then id), so the
choice is deterministic (a NaN in any float field, ``ready_since`` included, sorts last).

| name | runs next | key |
|---|---|---|
| ``fifo`` | the trial that has been ready longest | ``ready_since`` |
| ``fair`` | the least used compute time | ``used_time_s`` |
| ``rr`` | the fewest iterations run | ``iterations`` |
| ``pack`` | the earliest admitted into the lane (runs it to completion before the next) | ``arrival_seq`` |
| ``srtf`` | the shortest predicted remaining time | ``remaining_iterations * sec_per_iter`` |
| ``priority`` | the highest priority value | ``-priority`` |

**srtf and missing predictions.** A trial with no ``sec_per_iter`` yet (not profiled: it has not finished an
iteration) goes *first*: running it once is what produces its prediction, and putting it last would starve
it for as long as any profiled trial is ready (it could never get a prediction). A profiled trial with no
``remaining_iterations`` (an open-ended budget) has an infinite predicted remaining time and goes *last*.

**Work conservation.** A policy is work-conserving when the lane never idles while a trial is ready. All
six are: :func:`choose` always returns one of the ready trials, none holds the lane back for a trial
that is not ready (no reservation, no gang wait, no time quota). The flag exists so that a future policy
that can idle (e.g. one that waits for a high-priority trial about to become ready) is declared as such,
and the runtime knows it may leave a lane with ready trials idle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fluidsalus.errors import ConfigError


@dataclass(frozen=True)
class TrialView:
    """What a policy may know of a ready trial.

    Attributes:
        trial_id: The trial.
        arrival_seq: Order in which the trial was admitted into the lane (smaller: earlier).
        ready_since: When the trial became ready for its next iteration (any monotonic clock, seconds).
        used_time_s: Compute time the trial has used so far on this device, in seconds.
        iterations: Iterations it has run.
        remaining_iterations: Iterations left to its budget, or None when unknown/open-ended.
        sec_per_iter: Smoothed seconds per iteration, or None before it was profiled.
        priority: Larger runs first under ``priority``.
    """

    trial_id: str
    arrival_seq: int
    ready_since: float
    used_time_s: float = 0.0
    iterations: int = 0
    remaining_iterations: float | None = None
    sec_per_iter: float | None = None
    priority: float = 0.0


#: A key function: the ready trial with the smallest key runs next.
Key = Callable[[TrialView], tuple]


@dataclass(frozen=True)
class Policy:
    """A lane scheduling policy.

    Attributes:
        name: Its name in config.
        key: Sort key over :class:`TrialView` (smallest runs next).
        work_conserving: True when the lane never idles while a trial is ready under this policy.
        description: One line for docs and errors.
    """

    name: str
    key: Key
    work_conserving: bool
    description: str


def _last_if_nan(value: float) -> float:
    """``value``, or ``inf`` when it is NaN: NaN compares false with everything, so a key holding it made the
    choice depend on the order of the ready trials (and ``choose`` disagree with ``order``)."""
    return math.inf if value != value else value


def _tie(v: TrialView) -> tuple:
    return (_last_if_nan(v.ready_since), v.arrival_seq, v.trial_id)


def fifo_key(v: TrialView) -> tuple:
    """``fifo``: the trial that has been ready longest."""
    return _tie(v)


def fair_key(v: TrialView) -> tuple:
    """``fair``: least used compute time."""
    return (_last_if_nan(v.used_time_s), *_tie(v))


def rr_key(v: TrialView) -> tuple:
    """``rr``: fewest iterations run."""
    return (v.iterations, *_tie(v))


def pack_key(v: TrialView) -> tuple:
    """``pack``: earliest admitted into the lane (its order of arrival), so a trial runs to completion first."""
    return (v.arrival_seq, _last_if_nan(v.ready_since), v.trial_id)


def predicted_remaining_s(v: TrialView) -> float | None:
    """Predicted remaining seconds: ``remaining_iterations * sec_per_iter``.

    Args:
        v: The trial.

    Returns:
        None when the trial has no ``sec_per_iter`` yet; ``inf`` when its budget is open-ended.
    """
    if v.sec_per_iter is None:
        return None
    if v.remaining_iterations is None or v.remaining_iterations != v.remaining_iterations:
        return math.inf  # (an open-ended budget; or NaN, which max() below would make 0)
    return _last_if_nan(max(0.0, v.remaining_iterations) * v.sec_per_iter)  # (NaN: inf iterations of 0 s)


def srtf_key(v: TrialView) -> tuple:
    """``srtf``: shortest predicted remaining time; unprofiled trials first, open-ended budgets last."""
    remaining = predicted_remaining_s(v)
    if remaining is None:
        return (0, 0.0, *_tie(v))
    return (1, _last_if_nan(remaining), *_tie(v))


def priority_key(v: TrialView) -> tuple:
    """``priority``: highest priority value, ties as ``fifo``."""
    return (_last_if_nan(-v.priority), *_tie(v))


#: The policies by name.
POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("fifo", fifo_key, True, "the trial ready longest runs next"),
        Policy("fair", fair_key, True, "the trial with the least used time runs next"),
        Policy("rr", rr_key, True, "the trial with the fewest iterations runs next"),
        Policy("pack", pack_key, True, "the earliest-admitted trial runs next (run to completion)"),
        Policy("srtf", srtf_key, True, "the shortest predicted remaining time runs next (unprofiled first)"),
        Policy("priority", priority_key, True, "the highest priority runs next, ties fifo"),
    )
}

#: The policy a lane uses when the run names none.
DEFAULT_POLICY = "fifo"


def get_policy(name: str) -> Policy:
    """Look a policy up by name.

    Args:
        name: One of :data:`POLICIES`.

    Returns:
        The policy.

    Raises:
        ConfigError: If the name is unknown; the message lists the allowed names.
    """
    try:
        return POLICIES[name]
    except (KeyError, TypeError):
        allowed = ", ".join(sorted(POLICIES))
        raise ConfigError(f"lane_policy: {name!r} is not a lane policy; allowed: {allowed}") from None


def order(policy: Policy, ready: Sequence[TrialView]) -> list[str]:
    """All ready trials in the order the policy would run them if nothing changed.

    Args:
        policy: The policy.
        ready: The ready trials.

    Returns:
        Their ids, first to run first.
    """
    return [v.trial_id for v in sorted(ready, key=policy.key)]


def choose(policy: Policy, ready: Sequence[TrialView]) -> str:
    """The ready trial that runs the lane's next iteration.

    Args:
        policy: The policy.
        ready: The lane's ready trials (non-empty).

    Returns:
        Its trial id.

    Raises:
        ValueError: If ``ready`` is empty.
    """
    if not ready:
        raise ValueError("choose: no ready trial")
    return min(ready, key=policy.key).trial_id
