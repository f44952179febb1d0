"""A reusable check of a searcher's ``state_json``: it must encode what ``state_dict`` returns at every step.

A searcher that overrides :meth:`~fluidsalus.searchers.BaseSearcher.state_json` to encode its state faster (by
keeping the parts that no longer change encoded) must still write the same JSON object.
:func:`drive_checking_state_json` runs it with :func:`~fluidsalus.testing.drive` and compares the two after every
call that can change the state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.store import dumps
from fluidsalus.testing.driver import drive
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["CheckedSearcher", "drive_checking_state_json"]


class CheckedSearcher(BaseSearcher):
    """Passes each call that can change a searcher's state on, then runs ``check``: wrap a searcher in it and give
    it to :func:`~fluidsalus.testing.drive` to check something of the searcher after every step.

    Args:
        searcher: The searcher under test (asked ``time_attr`` and ``is_finished``).
        check: Called after every ``next_groups``, ``on_trial_add``, ``collect_stops``, ``on_result`` and
            ``on_trial_complete``.
        calls: What receives those calls (default: ``searcher``), e.g. the executor's ``SearcherLog`` around it.
    """

    def __init__(self, searcher: BaseSearcher, check: Callable[[], None], calls: Any = None) -> None:
        self.searcher, self.check = searcher, check
        self.calls = searcher if calls is None else calls
        self.time_attr = searcher.time_attr
        self.checks = 0

    def _after(self) -> None:
        self.check()
        self.checks += 1

    def next_groups(self) -> list[TrialGroup]:
        groups: list[TrialGroup] = self.calls.next_groups()
        self._after()
        return groups

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self.calls.on_trial_add(trial_id, group_id, config)
        self._after()

    def collect_stops(self) -> list[str]:
        stops: list[str] = self.calls.collect_stops()
        self._after()
        return stops

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        decision: Decision = self.calls.on_result(trial_id, result)
        self._after()
        return decision

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self.calls.on_trial_complete(trial_id, result, error)
        self._after()

    def is_finished(self) -> bool:
        return self.searcher.is_finished()


def drive_checking_state_json(searcher: BaseSearcher, curve: Callable[[Mapping[str, Any], int], float],
                              **drive_kwargs: Any) -> int:
    """Run ``searcher`` to its end with :func:`~fluidsalus.testing.drive`, checking after every call that
    ``json.loads(state_json())`` equals ``state_dict()`` (through JSON).

    Args:
        searcher: The searcher under test.
        curve: The objective, as for :func:`~fluidsalus.testing.drive`.
        **drive_kwargs: The other arguments of :func:`~fluidsalus.testing.drive`.

    Returns:
        How many times the two were compared.

    Raises:
        AssertionError: They differed; the message shows both.
    """
    def same() -> None:
        written, expected = json.loads(searcher.state_json()), json.loads(dumps(searcher.state_dict()))
        if written != expected:
            raise AssertionError(f"{type(searcher).__name__}.state_json() after {checked.checks} calls differs "
                                 f"from its state_dict():\n{written}\n!=\n{expected}")

    checked = CheckedSearcher(searcher, same)
    drive(checked, curve, **drive_kwargs)
    return checked.checks
