"""When the executor saves its searcher's state, and how a resumed run gets back what it had not saved.

A searcher's whole state (``state_dict()``) grows with the trials it has seen: ASHA keeps every trial's rung
rewards, the median stopping rule every result. Writing it after every batch of results and every promotion made
a long sweep's driver spend much of its time in ``json.dumps`` (a 2,000-trial ASHA sweep: 12 of its 30 s, the cost
growing with the square of the trials). So, for a searcher whose ``replayable`` is true, :class:`SearcherLog` logs
the calls that change it between saves instead:

- The executor calls the searcher through the log: ``next_groups`` (logged when it returns groups), the
  ``on_trial_add`` of each new trial, ``collect_stops`` (logged when it returns stops), ``on_result`` and
  ``on_trial_complete`` (with the ``on_trial_error`` before it). The calls are appended, in order, to the store's
  ``searcher_calls`` table, in the same transaction as the batch or the new trials they belong to.
- The whole state is saved (and the logged calls dropped, in one transaction) when the executor asks for it
  (``force``: the run ended) and otherwise only so often that saving takes at most :data:`SAVE_SHARE` of the
  driver's time. This is Ray Tune's rule for its experiment checkpoints (``TUNE_GLOBAL_CHECKPOINT_S="auto"``:
  the next one waits 19 times as long as the last one took).
- A resumed run loads the saved state and makes the logged calls again (:func:`replay`), with the trial ids
  and results they had. ``replayable`` means these calls depend only on the searcher's state and their
  arguments (``next_groups`` changes nothing when it returns no groups), so the searcher ends in the state it
  had when the last transaction committed: what the store holds and what the searcher knows still agree.

A searcher that is not replayable (it talks to an Optuna study, runs user code or exploits other trials) has its
whole state saved with every batch it acted on and with every group it made, as before.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fluidsalus.errors import FluidsalusError, StoreError
from fluidsalus.result import with_flat_keys
from fluidsalus.searchers import BaseSearcher, Decision
from fluidsalus.searchers._base import is_replayable
from fluidsalus.store import ExperimentStore, loads
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["ADD", "COMPLETE", "GROUPS", "RESULT", "SAVE_SHARE", "STOPS", "SearcherLog", "replay", "restore"]

#: The most of the driver's time that saving the searcher's whole state may take (Ray Tune's 5 %, see above).
SAVE_SHARE = 0.05
#: Kinds of logged calls.
GROUPS, ADD, STOPS, RESULT, COMPLETE = "groups", "add", "stops", "result", "complete"


class SearcherLog:
    """The executor's way to its searcher's calls that change its state, and to saving that state.

    Args:
        searcher: The run's searcher.
        store: The experiment's store.
        share: The most of the driver's time saves may take (None: :data:`SAVE_SHARE`).
        clock: Seconds, for the time a save takes and the time since the last one.
    """

    def __init__(self, searcher: BaseSearcher, store: ExperimentStore, share: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        share = SAVE_SHARE if share is None else share
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share!r}")
        self.searcher, self.store, self.share, self.clock = searcher, store, share, clock
        self.replayable = is_replayable(searcher)
        self._calls: list[tuple[str, str, Any]] = []  # since the last save or flush
        self._next_save = 0.0  # clock time before which a save that is not forced waits
        self.saves = 0  # whole states written (for tests and benchmarks)
        # Configs of logged groups not yet added: the state is not saved between a ``next_groups`` and the
        # ``on_trial_add`` of its configs, whose replay needs that ``next_groups`` to make them again.
        self._unadded = 0

    def _log(self, kind: str, trial_id: str, data: Any) -> None:
        if self.replayable:
            self._calls.append((kind, trial_id, data))

    def next_groups(self) -> list[TrialGroup]:
        """The searcher's new groups (logged when there are any)."""
        groups = self.searcher.next_groups()
        if groups:
            self._log(GROUPS, "", None)
            self._unadded += sum(len(group.configs) for group in groups)
        return groups

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        """Tell the searcher the id of a new config of a group (logged without the config, which a replayed
        ``next_groups`` makes again)."""
        self.searcher.on_trial_add(trial_id, group_id, config)
        self._log(ADD, trial_id, {"group": group_id})
        self._unadded = max(0, self._unadded - 1)

    def collect_stops(self) -> list[str]:
        """The paused trials the searcher ends (logged when there are any)."""
        stops = self.searcher.collect_stops()
        if stops:
            self._log(STOPS, "", None)
        return stops

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Give the searcher a result (with Ray's flattened keys for nested values: :func:`with_flat_keys`).

        Raises:
            FluidsalusError: The searcher answered something other than a :class:`Decision`.
        """
        answer = self.searcher.on_result(trial_id, with_flat_keys(result))
        try:
            decision = Decision(answer)
        except ValueError:
            raise FluidsalusError(
                f"{type(self.searcher).__name__}.on_result returned {answer!r} for trial {trial_id}: expected "
                f"{', '.join(f'Decision.{d.name}' for d in Decision)}") from None
        self._log(RESULT, trial_id, dict(result))  # (as given: the executor marks a stopped result done after)
        return decision

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool,
                          error_text: str | None = None) -> None:
        """Tell the searcher of a trial's end: why it errored (``on_trial_error``, when told), then that it ended.

        Args:
            trial_id: The trial.
            result: Its last result, if any.
            error: Whether it errored.
            error_text: Its error as the store keeps it.
        """
        if error and error_text is not None:
            self.searcher.on_trial_error(trial_id, error_text)
        self.searcher.on_trial_complete(trial_id, None if result is None else with_flat_keys(result), error=error)
        self._log(COMPLETE, trial_id, {"result": result, "error": error, "error_text": error_text if error else None})

    def save(self, force: bool = False) -> None:
        """Make what the searcher knows durable with the current transaction: its whole state, or (a
        replayable searcher, not forced, a save too recent) the calls logged since the last save.

        Args:
            force: Save the whole state whatever the time since the last save (not while configs of the last
                groups are still to be added).
        """
        now = self.clock()
        if self.replayable and (self._unadded or (not force and now < self._next_save)):
            if self._calls:
                self.store.add_searcher_calls(self._calls)
                self._calls = []
            return
        self.store.set_searcher_state(self.searcher.state_json())
        self._calls = []
        self.saves += 1
        done = self.clock()
        self._next_save = done + (done - now) * (1 / self.share - 1)


def replay(searcher: BaseSearcher, calls: Sequence[tuple[str, str, Any]]) -> None:
    """Make the logged calls again on a searcher restored from its saved state, in order.

    ``next_groups`` makes its groups again; each logged ``on_trial_add`` gives the next new config its logged
    trial id. What the calls return is not acted on again: it was when they were first made.

    Args:
        searcher: The searcher, after ``load_state_dict``.
        calls: ``store.searcher_calls()``.

    Raises:
        StoreError: A call of a kind this version does not know, or a replayed ``next_groups`` that made other
            groups than the first time (the searcher is not replayable after all).
    """
    made: deque[tuple[str, Mapping[str, Any]]] = deque()  # (group id, config) of replayed groups, not yet added
    for kind, trial_id, data in calls:
        if kind == GROUPS:
            made.extend((group.group_id, config) for group in searcher.next_groups() for config in group.configs)
        elif kind == ADD:
            if not made or made[0][0] != data["group"]:
                raise StoreError(f"cannot replay {type(searcher).__name__}'s logged calls: trial {trial_id} was "
                                 f"added to group {data['group']!r}, but the replayed groups "
                                 f"{'had no more configs' if not made else f'go on with {made[0][0]!r}'}")
            group_id, config = made.popleft()
            searcher.on_trial_add(trial_id, group_id, config)
        elif kind == STOPS:
            searcher.collect_stops()
        elif kind == RESULT:
            searcher.on_result(trial_id, with_flat_keys(data))
        elif kind == COMPLETE:
            result = data["result"]
            if data.get("error_text") is not None:  # (calls logged before it was kept have none)
                searcher.on_trial_error(trial_id, data["error_text"])
            searcher.on_trial_complete(trial_id, None if result is None else with_flat_keys(result),
                                       error=bool(data["error"]))
        else:
            raise StoreError(f"unknown searcher call {kind!r} in the store")


def restore(searcher: BaseSearcher, store: ExperimentStore) -> None:
    """Bring a new searcher to what the stored one knew: its saved state, then the calls logged after it.

    Args:
        searcher: A searcher of the same kind and parameters as the stored one.
        store: The experiment's store.

    Raises:
        StoreError: See :func:`replay`.
    """
    state = store.experiment()["searcher_state"]
    if state:
        searcher.load_state_dict(loads(state))
    replay(searcher, store.searcher_calls())
