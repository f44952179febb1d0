"""Random and grid search over a search space (Ray Tune's BasicVariantGenerator semantics)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.searchers._base import BaseSearcher
from fluidsalus.trialgroup.trial import TrialGroup


class RandomSearch(BaseSearcher):
    """Samples ``num_samples`` configurations (times every grid point) as one TrialGroup of fresh trials.

    Args:
        space: The search space (constants, domains such as ``uniform(0, 1)``, ``grid_search([...])``).
        num_samples: Samples per grid point, as in Ray Tune (>= 1).
        seed: Seed of the sampler; the same seed gives the same configurations.
    """

    def __init__(self, space: Mapping[str, Any], num_samples: int = 1, seed: int | None = None) -> None:
        self.space = dict(space)
        self.num_samples = num_samples
        self.seed = seed
        self._proposed = False

    def next_groups(self) -> list[TrialGroup]:
        if self._proposed:
            return []
        self._proposed = True
        configs = sp.generate_variants(self.space, self.num_samples, self.seed)
        return [TrialGroup(group_id="variants-0", configs=configs)]

    def is_finished(self) -> bool:
        return self._proposed

    def state_dict(self) -> dict[str, Any]:
        return {"proposed": self._proposed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._proposed = bool(state.get("proposed", False))
