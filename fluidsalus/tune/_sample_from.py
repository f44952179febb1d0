"""``tune.sample_from`` in the ``param_space`` of a search algorithm, as Ray's Tuner runs it.

Ray's Tuner hands a search algorithm (``OptunaSearch``, ``HyperOptSearch``, ``TuneBOHB``, one of the user's own) the
space with a placeholder in place of each ``sample_from``, and computes the functions on each configuration the
algorithm suggests (``ray.tune.impl.placeholder``): ``{"x": tune.randint(0, 3), "y": tune.sample_from(lambda
spec: spec.config.x * 10)}`` runs with ``y = 10 * x``. fluidsalus refused it (Optuna has no distribution for a
function, and a searcher of one's own "left y unresolved"). Now as in Ray: :func:`fluidsalus.space.take_functions`
gives the algorithm the placeholders (``fluidsalus/tune/_translate.py``), and :class:`SampleFromResolver`, around the
plan's searcher, computes the functions on each configuration before its trial is made.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from fluidsalus import space as sp
from fluidsalus.searchers._base import BaseSearcher, Decision, ExploitRequest, WrappingSearcher, is_replayable
from fluidsalus.store import dumps
from fluidsalus.trialgroup.trial import TrialGroup


class SampleFromResolver(WrappingSearcher):
    """Computes the ``sample_from`` functions of the space on each configuration ``inner`` suggests.

    ``inner`` searched the space with a placeholder for each function (:func:`fluidsalus.space.take_functions`),
    and is told of each trial with the configuration it suggested (placeholders and all). A function draws from a
    generator seeded by the configuration it completes, so a resumed run that replays the searcher's calls makes
    the same configurations.

    Args:
        inner: The searcher of the search algorithm.
        functions: The functions taken out of the space, by path.
    """

    def __init__(self, inner: BaseSearcher, functions: list[tuple[tuple[Any, ...], sp.Function]]) -> None:
        self.inner = inner
        self.functions = list(functions)
        self.time_attr = inner.time_attr

    def __getattr__(self, name: str) -> Any:  # what the tune layer reads of the search algorithm's searcher
        if name == "inner":  # (not set yet: a copy or an unpickling asks before __init__)
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def replayable(self) -> bool:  # type: ignore[override]
        """Whether ``inner``'s calls may be replayed (this wrapper's own calls are: it keeps no state)."""
        return is_replayable(self.inner)

    def _resolve(self, config: Mapping[str, Any]) -> dict[str, Any]:
        seed = int.from_bytes(hashlib.sha256(dumps(dict(config)).encode()).digest()[:8], "big")
        return sp.put_functions_back(config, self.functions, np.random.default_rng(seed))

    def next_groups(self) -> list[TrialGroup]:
        return [dataclasses.replace(group, configs=[self._resolve(config) for config in group.configs])
                for group in self.inner.next_groups()]

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self.inner.on_trial_add(trial_id, group_id, sp.with_placeholders(config, self.functions))

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        return self.inner.on_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self.inner.on_trial_complete(trial_id, result, error)

    def take_exploits(self) -> list[ExploitRequest]:
        return self.inner.take_exploits()

    def cancel_exploit(self, trial_id: str) -> None:
        self.inner.cancel_exploit(trial_id)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def state_json(self) -> str:
        return self.inner.state_json()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state)
