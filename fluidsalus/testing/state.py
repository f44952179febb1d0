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

__all__ = ["drive_checking_state_json"]


class _Checked(BaseSearcher):
    """Passes every call on to ``inner`` and then compares its ``state_json`` with its ``state_dict``."""

    def __init__(self, inner: BaseSearcher) -> None:
        self.inner, self.time_attr, self.checks = inner, inner.time_attr, 0

    def _check(self) -> None:
        written, expected = json.loads(self.inner.state_json()), json.loads(dumps(self.inner.state_dict()))
        if written != expected:
            raise AssertionError(f"{type(self.inner).__name__}.state_json() after {self.checks} calls differs from "
                                 f"its state_dict():\n{written}\n!=\n{expected}")
        self.checks += 1

    def next_groups(self) -> list[TrialGroup]:
        groups = self.inner.next_groups()
        self._check()
        return groups

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self.inner.on_trial_add(trial_id, group_id, config)
        self._check()

    def collect_stops(self) -> list[str]:
        stops = self.inner.collect_stops()
        self._check()
        return stops

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        decision = self.inner.on_result(trial_id, result)
        self._check()
        return decision

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self.inner.on_trial_complete(trial_id, result, error)
        self._check()

    def is_finished(self) -> bool:
        return self.inner.is_finished()


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
    checked = _Checked(searcher)
    drive(checked, curve, **drive_kwargs)
    return checked.checks
