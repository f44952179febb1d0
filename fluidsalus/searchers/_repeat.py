"""Repeated evaluations: each configuration a searcher proposes runs ``repeat`` times, and the searcher is told
the mean (the decisions of Ray Tune's ``ray.tune.search.Repeater``).

For noisy objectives: the inner searcher sees one trial per configuration (the first of its repeats, the
*primary*), never an intermediate result, and, once every repeat has ended, the mean of the repeats' final
``metric`` values as that trial's result. A repeat that errored, or whose last result lacks the metric, counts
as NaN and is left out of the mean; when every repeat is NaN the inner searcher is told the trial failed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.searchers._base import BaseSearcher, Decision, WrappingSearcher, check_inner, is_replayable
from fluidsalus.trialgroup.trial import TrialGroup

#: The config key that holds a repeat's index (0 .. repeat-1), Ray's ``ray.tune.search.repeater.TRIAL_INDEX``.
TRIAL_INDEX = "__trial_index__"


def mean_score(scores: list[float]) -> float | None:
    """The mean of the scores that are not NaN, or None when there is none (Ray's ``np.nanmean``)."""
    real = [s for s in scores if not math.isnan(s)]
    return sum(real) / len(real) if real else None


class RepeatSearcher(WrappingSearcher):
    """Runs every configuration of an inner searcher ``repeat`` times and tells it their mean.

    Args:
        inner: The searcher that proposes the configurations. It must run its trials to their end (no budgets,
            no promotions): its groups' configs are repeated, and it is never asked about a result.
        repeat: Runs of each configuration, ``>= 1``.
        metric: The result key whose final values are averaged.
        set_index: Put each repeat's index into its config under :data:`TRIAL_INDEX` (e.g. to seed it).
        num_samples: The trials to make in all (None: every repeat of every configuration). As Ray's ``Repeater``
            makes ``num_samples`` trials, a total that is not a multiple of ``repeat`` runs the last
            configuration fewer times; the inner searcher is never told of that configuration (Ray's study
            keeps its trial RUNNING).

    Raises:
        ConfigError: ``repeat`` is not an int >= 1, ``metric`` is not a str, or ``num_samples`` is not None nor
            an int >= 1.
    """

    @property
    def replayable(self) -> bool:  # type: ignore[override]
        """As the wrapped searcher's (the means depend on the results alone)."""
        return is_replayable(self.inner)

    def __init__(self, inner: BaseSearcher, repeat: int, metric: str, set_index: bool = True,
                 num_samples: int | None = None) -> None:
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ConfigError(f"RepeatSearcher: repeat must be an int >= 1 (got {repeat!r})")
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(num_samples, int)
                                        or num_samples < 1):
            raise ConfigError(f"RepeatSearcher: num_samples must be None or an int >= 1 (got {num_samples!r})")
        if not isinstance(metric, str) or not metric:
            raise ConfigError(f"RepeatSearcher: metric must be one result key, a str (got {metric!r})")
        self.inner = check_inner("RepeatSearcher", inner)
        self.repeat = repeat
        self.metric = metric
        self.set_index = set_index
        self.num_samples = num_samples
        self.time_attr = inner.time_attr
        self._proposed = 0  # trials proposed so far (up to num_samples)
        self._added: dict[str, int] = {}  # group id -> trials of it added so far (they come in the group's order)
        self._current: dict[str, str] = {}  # group id -> the primary of the configuration being added
        self._primary: dict[str, str] = {}  # trial id -> the primary trial id of its configuration
        self._scores: dict[str, dict[str, float]] = {}  # primary -> {trial id: final score}, as they end

    def next_groups(self) -> list[TrialGroup]:
        """The inner searcher's new groups, each config repeated ``repeat`` times in a row.

        Raises:
            ConfigError: The inner searcher gave a group with a budget or promoted trials.
        """
        groups = []
        for group in self.inner.next_groups():
            if group.budget is not None or group.trial_ids:
                raise ConfigError(f"RepeatSearcher: {type(self.inner).__name__} runs trials to budgets or promotes "
                                  "them; only a searcher that runs each trial to its end can be repeated")
            configs = [{**config, TRIAL_INDEX: index} if self.set_index else dict(config)
                       for config in group.configs for index in range(self.repeat)]
            if self.num_samples is not None:
                configs = configs[:max(0, self.num_samples - self._proposed)]
            self._proposed += len(configs)
            if configs:
                groups.append(replace(group, configs=configs))
        return groups

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        position = self._added.get(group_id, 0)
        self._added[group_id] = position + 1
        if position % self.repeat == 0:  # the first repeat of a configuration stands for it
            self._current[group_id] = trial_id
            self._scores[trial_id] = {}
            self.inner.on_trial_add(trial_id, group_id,
                                    {k: v for k, v in config.items() if k != TRIAL_INDEX or not self.set_index})
        self._primary[trial_id] = self._current[group_id]

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Continue: as in Ray, the inner searcher never sees an intermediate result."""
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Record the repeat's final score; the last repeat to end tells the inner searcher the mean."""
        primary = self._primary.get(trial_id)
        if primary is None or trial_id in self._scores.get(primary, {}):
            return
        value = None if error or not result else result.get(self.metric)
        real = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        scores = self._scores[primary]
        scores[trial_id] = float(value) if real else math.nan
        if len(scores) == self.repeat:
            mean = mean_score(list(scores.values()))
            if mean is None:
                self.inner.on_trial_complete(primary, None, error=True)
            else:
                self.inner.on_trial_complete(primary, {self.metric: mean}, error=False)

    def state_dict(self) -> dict[str, Any]:
        """The inner searcher's state and which repeats have ended with which score (NaN kept as None)."""
        return {
            "inner": self.inner.state_dict(),
            "added": dict(self._added),
            "primary": dict(self._primary),
            "scores": {p: {t: None if math.isnan(s) else s for t, s in scores.items()}
                       for p, scores in self._scores.items()},
            "current": dict(self._current),
            "proposed": self._proposed,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])
        self._added = {g: int(n) for g, n in state["added"].items()}
        self._primary = dict(state["primary"])
        self._scores = {p: {t: math.nan if s is None else float(s) for t, s in scores.items()}
                        for p, scores in state["scores"].items()}
        self._current = dict(state["current"])
        # (a state saved before the count was kept: every trial it proposed had been added)
        self._proposed = int(state.get("proposed", sum(self._added.values())))
