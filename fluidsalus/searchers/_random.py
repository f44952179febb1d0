"""Random and grid search over a search space (Ray Tune's BasicVariantGenerator semantics)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.searchers._base import BaseSearcher
from fluidsalus.trialgroup.trial import TrialGroup

#: With ``num_samples=-1`` (an endless search), the first batch of fresh trials: enough to keep every lane of
#: a few devices busy; afterwards one new trial is proposed for each trial that ends.
ENDLESS_FIRST_BATCH = 16


class RandomSearch(BaseSearcher):
    """Samples ``num_samples`` configurations (times every grid point) as one TrialGroup of fresh trials.

    With ``num_samples=-1`` (Ray Tune's "until stopped") the stream never ends: a first batch of
    :data:`ENDLESS_FIRST_BATCH`, then one new configuration per trial that ends. The run then ends by its
    time budget or a stopper's ``stop_all()``.

    Args:
        space: The search space (constants, domains such as ``uniform(0, 1)``, ``grid_search([...])``).
        num_samples: Samples per grid point, as in Ray Tune (>= 1, or -1 for endless).
        seed: Seed of the sampler; the same seed gives the same configurations.
    """

    def __init__(self, space: Mapping[str, Any], num_samples: int = 1, seed: int | None = None) -> None:
        self.space = dict(space)
        self.num_samples = num_samples
        self.seed = seed
        self._proposed = 0  # configurations proposed so far
        self._owed = ENDLESS_FIRST_BATCH  # endless mode: configurations to propose next
        self._stream: Any = None

    def next_groups(self) -> list[TrialGroup]:
        if self.num_samples != sp.INFINITE_SAMPLES:
            if self._proposed:
                return []
            configs = sp.generate_variants(self.space, self.num_samples, self.seed)
        else:
            if not self._owed:
                return []
            if self._stream is None:  # a resumed search skips what it proposed before
                self._stream = sp.iter_variants(self.space, self.num_samples, self.seed)
                for _ in range(self._proposed):
                    next(self._stream)
            configs = [next(self._stream) for _ in range(self._owed)]
            self._owed = 0
        group = TrialGroup(group_id=f"variants-{self._proposed}", configs=configs)
        self._proposed += len(configs)
        return [group]

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        if self.num_samples == sp.INFINITE_SAMPLES:
            self._owed += 1

    def is_finished(self) -> bool:
        return self.num_samples != sp.INFINITE_SAMPLES and self._proposed > 0

    def state_dict(self) -> dict[str, Any]:
        return {"proposed": self._proposed, "owed": self._owed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._proposed = int(state.get("proposed", 0))
        self._owed = int(state.get("owed", ENDLESS_FIRST_BATCH))
