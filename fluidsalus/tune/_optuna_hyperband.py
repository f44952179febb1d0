"""HyperBand over the trials an Optuna study proposes (Ray's ``OptunaSearch`` with ``HyperBandScheduler``).

In Ray the pair splits the work: ``OptunaSearch`` asks its study for each new trial, reports every result to it
as an intermediate value and tells it the trial's last result when the trial ends; ``HyperBandScheduler`` puts
each trial in a bracket, pauses it at its rung and stops the losers. Optuna's own pruner takes no part.
:class:`OptunaHyperBand` is fluidsalus's :class:`~fluidsalus.searchers.HyperBand` with its configurations taken
from a fluidsalus :class:`~fluidsalus.searchers.OptunaSearch` (which keeps the study, its sampler, storage,
``points_to_evaluate`` and define-by-run space) and every result and end passed on to it. A trial HyperBand
stops is told to the study with its last value, as Ray's ``OptunaSearch`` tells it (``COMPLETE``, not
``PRUNED``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.searchers import Decision, OptunaSearch
from fluidsalus.tune._streamed import StreamedHyperBand

__all__ = ["OptunaHyperBand"]

#: What HyperBand's own space check sees when the study's space is define-by-run (HyperBand draws nothing).
_PLACEHOLDER_SPACE = {"_": 0}


class OptunaHyperBand(StreamedHyperBand):
    """:class:`~fluidsalus.searchers.HyperBand` whose brackets hold the trials ``optuna`` proposes.

    Each new bracket asks the study for its first rung's trials, at most ``max_concurrent`` minus the trials
    asked and not yet ended (a trial paused at a rung is unfinished, as in Ray). A bracket that gets fewer
    runs with those and halves its actual size.

    Args:
        optuna: The OptunaSearch that asks and tells the study (its own pruner must be None).
        num_samples: Trials to make (as ``optuna.num_samples``: >= 1, or -1).
        metric: The result key HyperBand decides on.
        mode: ``"min"`` or ``"max"``.
        max_concurrent: Trials asked and not yet ended at any time (a ``ConcurrencyLimiter`` or
            ``max_concurrent_trials``); None: each bracket gets its full size.
        **kwargs: HyperBand's other arguments (``time_attr``, ``max_t``, ``reduction_factor``, ...).

    Raises:
        ConfigError: ``max_concurrent`` out of range, or a HyperBand argument out of range.
    """

    replayable = False  # it tells the Optuna study of results and ends

    def __init__(self, optuna: OptunaSearch, num_samples: int, metric: str, mode: str,
                 max_concurrent: int | None = None, **kwargs: Any) -> None:
        if max_concurrent is not None and (isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int)
                                           or max_concurrent < 1):
            raise ConfigError(f"OptunaHyperBand: max_concurrent must be None or an int >= 1 (got {max_concurrent!r})")
        super().__init__(optuna.space or _PLACEHOLDER_SPACE, num_samples, metric, mode, **kwargs)
        self.space = dict(optuna.space)
        self.optuna = optuna
        self.max_concurrent = max_concurrent
        self._groups: deque[str] = deque()  # the Optuna group of each configuration handed out, not yet added

    def _configs_left(self) -> bool:
        return not self.optuna.is_finished()

    def _draw_configs(self, count: int) -> list[dict[str, Any]]:
        if self.optuna.wait_for_batch and self.optuna.in_flight:
            return []
        if self.max_concurrent is not None:
            count = min(count, self.max_concurrent - self.optuna.in_flight)
        group = self.optuna.propose(count)
        if group is None:
            return []
        self._groups.extend([group.group_id] * len(group.configs))
        return list(group.configs)

    def _on_new_trial(self, trial_id: str, config: Mapping[str, Any]) -> None:
        if self._groups:
            self.optuna.on_trial_add(trial_id, self._groups.popleft(), config)

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self.optuna.on_result(trial_id, result)  # an intermediate value; no pruner, so never a STOP
        return super().on_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        super().on_trial_complete(trial_id, result, error)
        self.optuna.on_trial_complete(trial_id, result, error)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "optuna": self.optuna.state_dict(), "optuna_groups": list(self._groups)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.optuna.load_state_dict(state["optuna"])
        self._groups = deque(str(g) for g in state.get("optuna_groups", []))
