"""The searcher interface: searchers propose TrialGroups and answer results with decisions."""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from typing import Any

from fluidsalus.trialgroup.trial import TrialGroup


class Decision(str, enum.Enum):
    """What a searcher wants done with a trial after one of its results."""

    CONTINUE = "continue"
    STOP = "stop"
    PAUSE = "pause"
    PROMOTE = "promote"


class BaseSearcher(abc.ABC):
    """Proposes TrialGroups; told about results, completions and failures.

    Only :meth:`next_groups` must be implemented. A searcher whose groups are all proposed and which needs
    no more results reports :meth:`is_finished`.

    Budgets are measured in :attr:`time_attr` (a result key, Ray Tune's ``time_attr``). A trial that reaches
    its group's budget pauses, resident on its device, until a later group promotes it or
    :meth:`collect_stops` (or a STOP decision on that last result) ends it.
    """

    #: The result key budgets are measured in.
    time_attr: str = "training_iteration"

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        """Told the id the executor gave to each new config of a group, in the group's order."""

    @abc.abstractmethod
    def next_groups(self) -> list[TrialGroup]:
        """Return the groups that are ready to run now (an empty list when there is nothing new yet).

        Returns:
            New TrialGroups, each placed as one unit by the executor.
        """

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Answer one acknowledged result of a running trial.

        Args:
            trial_id: The trial that reported.
            result: The result, with the auto-filled keys (``training_iteration``, ...).

        Returns:
            The decision for the trial. The default lets it continue.
        """
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Told once when a trial ends (finished, stopped or errored), with its last result."""

    def collect_stops(self) -> list[str]:
        """Paused trials the searcher has decided to end (asked after every batch of results)."""
        return []

    def is_finished(self) -> bool:
        """True when the searcher will propose no more groups."""
        return False

    def state_dict(self) -> dict[str, Any]:
        """State that lets a resumed run continue the same search (JSON-serialisable)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
