"""Driver-side trial and TrialGroup models (plain dataclasses, no Ray)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fluidsalus.store import PENDING


@dataclass
class TrialGroup:
    """Trials a searcher wants run to the same budget, placed as one unit.

    Attributes:
        group_id: Unique within the experiment, e.g. ``"random-0"`` or ``"asha-rung1"``.
        configs: Fresh configurations to start as new trials.
        budget: How far each trial should run, in the searcher's resource unit (None: until the trainable
            returns or the stop rule fires).
    """

    group_id: str
    configs: list[dict[str, Any]]
    budget: float | None = None


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
    error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
