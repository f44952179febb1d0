"""Driver-side trial and TrialGroup models (plain dataclasses, no Ray)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fluidsalus.store import PENDING


@dataclass
class TrialGroup:
    """Trials a searcher wants run to the same budget, placed as one unit.

    A trial of the group runs until ``result[searcher.time_attr] >= budget``, then *pauses*: it stays
    resident on its device and waits. A later group that lists it in ``trial_ids`` promotes it (it runs on
    to that group's budget); ``searcher.collect_stops()`` or a STOP decision ends it.

    Attributes:
        group_id: Unique within the experiment, e.g. ``"random-0"`` or ``"hyperband-b0-r1"``.
        configs: Fresh configurations to start as new trials.
        budget: How far each trial should run, in the searcher's resource unit (None: until the trainable
            returns or the stop rule fires).
        trial_ids: Existing trials promoted into this group. A paused trial resumes in place; an ended one
            restarts from its last checkpoint.
    """

    group_id: str
    configs: list[dict[str, Any]] = field(default_factory=list)
    budget: float | None = None
    trial_ids: list[str] = field(default_factory=list)


@dataclass
class Trial:
    """The driver's view of one trial.

    Placement is kept twice, because a trial that the planner moves keeps running where it is until its next
    iteration boundary: ``devices`` is where the planner put it (the planner's input next time), ``placed_on``
    is where its current attempt was actually submitted. They differ only while a move is under way, or while
    a restarted trial waits to be submitted to the devices the planner kept for it.

    Attributes:
        devices: Device indices the planner placed the trial on (first: its home, where rank 0 runs); empty
            while it waits in the driver's queue.
        placed_on: Device indices its current attempt runs on (one rank per device); empty when the attempt
            has not been submitted, or has ended.
        p_bytes: Its persistent-memory estimate P, from its device's lane events (None: not known yet).
        t_bytes: Its ephemeral-memory estimate T (None: not known yet).
        attempt_start: The iteration its current attempt started from (its checkpoint's; 0 from scratch).
        death_point: Its last iteration when a device died while it computed, the first of the deaths it has
            not got past since (None: none); ``death_run`` is how many iterations its attempt had reported at that
            death; ``stuck_deaths`` counts those deaths and ``death_blame`` sums its shares of them
            (``dispatch.charge_death``).
    """

    trial_id: str
    seq: int
    config: dict[str, Any]
    trial_dir: str
    group_id: str | None = None
    budget: float | None = None
    status: str = PENDING
    attempt: int = 0
    devices: tuple[int, ...] = ()
    placed_on: tuple[int, ...] = ()
    p_bytes: int | None = None
    t_bytes: int | None = None
    last_iteration: int = 0
    last_result: dict[str, Any] | None = None
    checkpoint_path: str | None = None
    time_total_s: float = 0.0
    #: Ray's running totals (``timesteps_total``, ``episodes_total``) of the result ``checkpoint_path`` was taken at.
    checkpoint_totals: dict[str, float] = field(default_factory=dict)
    num_failures: int = 0
    finished_by_rule: bool = False  # a result met the run's stop rule: it ends, and is never promoted
    error: str | None = None
    error_pickle: bytes | None = None  # the exception that ended it, as its device pickled it (TrialError.cause)
    # An attempt asked for its checkpoint (get_checkpoint): a restart from one resumes it, so it may be moved
    reads_checkpoints: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, Any] | None = None  # keys added to each of its results (ExecutorSettings.result_extras)
    attempt_start: int = 0
    death_point: int | None = None
    death_run: int = 0
    stuck_deaths: int = 0
    death_blame: Fraction = Fraction(0)

    @property
    def device(self) -> int | None:
        """The home device (rank 0's) of the current attempt, or None when it is not submitted."""
        return self.placed_on[0] if self.placed_on else None
