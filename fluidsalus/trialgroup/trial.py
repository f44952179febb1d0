"""Driver-side trial and TrialGroup models (plain dataclasses, no Ray)."""

from __future__ import annotations

from dataclasses import dataclass, field
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
    """The driver's view of one trial."""

    trial_id: str
    seq: int
    config: dict[str, Any]
    trial_dir: str
    group_id: str | None = None
    budget: float | None = None
    status: str = PENDING
    attempt: int = 0
    device: int | None = None
    last_iteration: int = 0
    last_result: dict[str, Any] | None = None
    checkpoint_path: str | None = None
    time_total_s: float = 0.0
    num_failures: int = 0
    finished_by_rule: bool = False  # a result met the run's stop rule: it ends, and is never promoted
    error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
