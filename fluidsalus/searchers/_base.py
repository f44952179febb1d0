"""The searcher interface: searchers propose TrialGroups and answer results with decisions."""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.store import dumps
from fluidsalus.trialgroup.trial import TrialGroup


class Decision(str, enum.Enum):
    """What a searcher wants done with a trial after one of its results.

    There is no pause or promotion decision: a trial pauses when it reaches its group's budget, and a later
    group promotes it (:class:`BaseSearcher`).
    """

    CONTINUE = "continue"
    STOP = "stop"


@dataclass(frozen=True)
class ExploitRequest:
    """Restart ``trial_id`` from ``source_trial_id``'s checkpoint with ``config`` (what the executor must do).

    Semantics the executor implements for each request it takes with :meth:`PBT.take_exploits` (called right
    after ``next_groups``):

    1. ``trial_id`` is paused at its perturbation point. Its current attempt ends *silently*: no checkpoint is
       saved, no ``on_trial_complete`` is sent, it is not an error.
    2. Its config becomes ``config``; ``group_id`` and ``budget`` become the request's.
    3. It restarts on a new attempt from the checkpoint that ``source_trial_id`` reported with its result at
       ``training_iteration == source_iteration`` (copied into the trial's own directory, so that the source
       may delete its copy). Iteration count and ``time_total_s`` continue from that result, exactly as a
       restore of the trial's own checkpoint would.
    4. It runs until ``result[time_attr] >= budget`` and pauses there: its next perturbation point.

    ``source_trial_id`` may be ``trial_id`` itself (a PBT replay's change point): the trial restarts from its own
    stored checkpoint with the new config.

    If that checkpoint no longer exists, the executor calls :meth:`PBT.cancel_exploit` instead; the trial is
    then promoted unchanged by the next ``next_groups``.

    Attributes:
        trial_id: The bottom-quantile trial that exploits.
        source_trial_id: The top-quantile trial it clones.
        source_iteration: ``training_iteration`` of the source's result that carried the checkpoint.
        source_time: ``time_attr`` of that result (where the trial's ``time_attr`` resumes).
        config: The explored configuration of the restarted trial.
        budget: Where the restarted trial pauses next, in ``time_attr`` (None: it runs to its end).
        group_id: The group the restarted trial belongs to from now on.
    """

    trial_id: str
    source_trial_id: str
    source_iteration: int
    source_time: float
    config: dict[str, Any]
    budget: float | None
    group_id: str


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
    #: Whether the searcher may end an endless search (``num_samples=-1``) by itself, as a search algorithm of the
    #: user's own does when it returns ``FINISHED``; ``fluidsalus.run`` then needs no time budget or stopper.
    ends_itself: bool = False
    #: Whether :meth:`on_result` and :meth:`on_trial_complete` depend only on the searcher's state and their
    #: arguments, and change nothing outside it (no study, no user code, no clock, no unsaved random state).
    #: The executor then logs these calls and saves the whole state only now and then; a resumed run replays
    #: the calls logged after the saved state (``fluidsalus/trialgroup/searcher_log.py``). False (the default):
    #: the state is saved after every batch of results the searcher was given.
    replayable: bool = False
    #: From this ``result[time_attr]`` on, a trial waits after each result for the searcher's decision on it, as a
    #: Ray Tune trial waits for its scheduler's: a STOP then ends it at that very result, at the cost of one round
    #: trip to the driver per result (its lane's turn goes to a neighbour meanwhile). None (the default): trials
    #: run on, and a STOP reaches the trial at a later report (a pause at a budget always waits).
    verdict_from: float | None = None
    #: Whether the searcher's trials take turns on the devices by progress (:meth:`turn_key`), as Ray Tune's
    #: ``PopulationBasedTraining`` makes them when there are more trials than places: the queue starts the trial
    #: with the smallest key first, and a trial promoted (or exploiting) while a queued trial has a smaller key
    #: gives its place up, restarting from its checkpoint at its turn (only when that loses nothing: the executor
    #: keeps it on its device when its last checkpoint is older than its last result). False (the default): the
    #: planner's order (longest predicted work first), and a promoted trial resumes where it is.
    takes_turns: bool = False
    #: Whether a trial paused at its budget waits there as Ray Tune's scheduler pauses it (HyperBand and BOHB's,
    #: PBT's perturbation points, PBT replay's changes): callbacks are told it is ``PAUSED``
    #: (``Callback.on_trial_status``), and ``fluidsalus.tune`` shows it so. False (the default): the pause is the
    #: engine's wait for the searcher's promotion (ASHA's rung), where Ray's asynchronous scheduler decides at the
    #: result and its trial stays ``RUNNING``.
    pauses_as_ray: bool = False

    def turn_key(self, trial_id: str) -> float:
        """Where a trial stands in the turns of :attr:`takes_turns` (Ray's ``choose_trial_to_run`` key): smaller
        goes first.

        Args:
            trial_id: A trial of the searcher (possibly one it has not been told of yet: a new one).

        Returns:
            Its progress, in the searcher's measure (0.0, the default, for every trial).
        """
        return 0.0

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

        A result that ends its trial by the run's stop rule (``stop``, a stopper, the trainable's own ``done``) or
        after a stop for good does not come here: :meth:`on_trial_complete` gets it, at once, as Ray's controller
        gives such a result to neither ``on_trial_result``.

        Args:
            trial_id: The trial that reported.
            result: The result, with the auto-filled keys (``training_iteration``, ...).

        Returns:
            The decision for the trial, :attr:`Decision.CONTINUE` (the default) or :attr:`Decision.STOP`; anything
            else fails the run with an error that names the searcher.
        """
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Told once when a trial ends (finished, stopped or errored), with its last result; for a trial that a
        stop rule ends, at the result that ends it (see :meth:`on_result`), which may come before its end."""

    def on_trial_error(self, trial_id: str, error: str) -> None:
        """Told why a trial errored, just before its ``on_trial_complete(..., error=True)``.

        Args:
            trial_id: The trial.
            error: Its error as the store keeps it (``fluidsalus inspect`` shows it): the trial's exception and
                traceback, or the engine's reason (its device process died, no device can hold it, ...).
        """

    def collect_stops(self) -> list[str]:
        """Paused trials the searcher has decided to end (asked after every batch of results)."""
        return []

    def retries(self, trial_id: str) -> bool:
        """Whether a trial that failed may run again (``max_failures`` decides how often).

        Args:
            trial_id: A trial that ended errored.

        Returns:
            True (the default); False for a failure the search has taken as the trial's outcome already (an
            Optuna objective's exception: the study's trial is ``FAIL``), which a new attempt cannot change, and
            which the search reports itself (the run's log does not print it again).
        """
        return True

    def stopped_by_search(self, trial_id: str) -> bool:
        """Whether a trial that ended on its own ended by the search's decision (an Optuna pruner's: the objective
        raised ``TrialPruned``): it then ends stopped, as a trial a scheduler stops.

        Args:
            trial_id: A trial whose trainable returned.

        Returns:
            False (the default).
        """
        return False

    def started_trial(self, trial_id: str) -> bool:
        """Whether a trial whose trainable began on its device and ended without an error ran the search's trial: False
        for one that found the search over at its start and ran nothing (the Optuna front end's trial whose start came
        after ``timeout`` or ``study.stop()``: the study has no trial for it). It then ends stopped, as a trial that
        never started (as one the run's end stops before its first turn).

        Args:
            trial_id: A trial whose attempt began and that returned or was stopped.

        Returns:
            True (the default).
        """
        return True

    def take_exploits(self) -> list[ExploitRequest]:
        """Paused trials to restart from another trial's checkpoint with a new config (PBT's exploit).

        Asked right after every :meth:`next_groups`; the executor applies each request as
        :class:`ExploitRequest` describes, or calls :meth:`cancel_exploit` when it cannot.
        """
        return []

    def cancel_exploit(self, trial_id: str) -> None:
        """Told that a taken exploit request could not be applied (its source checkpoint is gone)."""

    def is_finished(self) -> bool:
        """True when the searcher will propose no more groups."""
        return False

    def run_ending(self) -> None:
        """Told once when the run begins to end early (its time budget, ``fail_fast``, a stopper's ``stop_all()``),
        before the ends that brings: the trials it stops or ends queued are told with :meth:`on_trial_complete`
        after it. Nothing by default (a scheduler of the user's own is told no more of its trials then, as Ray's
        controller calls no scheduler hook for the trials its run's end stops)."""

    def proposes_new(self) -> bool:
        """Whether it may still propose trials of new configurations (promotions of its trials aside): a slot that
        frees then gets one. The executor holds a device's prefetched trial through a neighbour's pause only once
        none can come (``Executor._tell_hold_pauses``). True until :meth:`is_finished`, unless the searcher knows
        sooner (ASHA, HyperBand: once their configurations are all drawn)."""
        return not self.is_finished()

    @property
    def endless(self) -> bool:
        """Whether the searcher proposes until the run is stopped (``num_samples=-1``): ``fluidsalus.run`` then
        needs a time budget or a stopper that ends the run, unless the searcher :attr:`ends_itself`."""
        return False

    def state_dict(self) -> dict[str, Any]:
        """State that lets a resumed run continue the same search (JSON-serialisable)."""
        return {}

    def state_json(self) -> str:
        """:meth:`state_dict` as the JSON text the store keeps. Override it only to encode the same object faster
        (OptunaSearch keeps the parts of finished trials encoded).

        Returns:
            ``fluidsalus.store.dumps(self.state_dict())``.
        """
        return dumps(self.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def check_saved_state(state: Any, owner: str, required: tuple[str, ...]) -> None:
    """Refuse a saved state that is not ``owner``'s own before :meth:`BaseSearcher.load_state_dict` takes anything
    from it: a loader that reads its fields with defaults (``state.get("proposed", 0)``) took any JSON object,
    ``{"bogus": 1}`` too, for a search that had proposed nothing, and a resumed run proposed every trial again.
    Fields it does not know are not refused: a subclass's state holds its own beside its base's.

    Args:
        state: The saved state, as the store's JSON gave it back.
        owner: The searcher's name, for the message.
        required: The fields every state ``owner`` has saved holds.

    Raises:
        ConfigError: ``state`` is not a JSON object, or lacks a required field; the message names the searcher and
            the field.
    """
    advice = f"resume it with the searcher ({owner}), and the searcher's arguments, it ran with"
    if not isinstance(state, Mapping):
        shown = {type(None): "null", str: "string", list: "array", bool: "boolean"}.get(type(state), "number")
        raise ConfigError(f"searcher: the experiment's saved searcher state is a JSON {shown}, not the object a "
                          f"{owner} saves; {advice}")
    missing = [name for name in required if name not in state]
    if missing:
        raise ConfigError(f"searcher: the experiment's saved searcher state is not a {owner}'s: it lacks "
                          f"{', '.join(map(repr, missing))} (it holds {sorted(map(str, state))}); {advice}")


#: The calls (and the hooks of ASHA and HyperBand) whose replay a replayable searcher promises to be exact.
REPLAYED_CALLS = ("next_groups", "on_trial_add", "collect_stops", "on_result", "on_trial_error", "on_trial_complete",
                  "take_exploits",
                  "_on_new_trial", "_on_budget_reached", "_draw_configs", "_config_stream")


def replay_breaker(cls: type) -> str | None:
    """What keeps ``cls``'s declared ``replayable`` from holding: a call in :data:`REPLAYED_CALLS` that a class
    below the one that declared ``replayable`` changes.

    Args:
        cls: A searcher class.

    Returns:
        ``"<class> changes <call>, below <declaring class>"``, or None when no such call exists (or nothing in
        ``cls``'s MRO declares ``replayable``).
    """
    mro = cls.__mro__
    where = next((i for i, c in enumerate(mro) if "replayable" in vars(c)), None)
    if where is None:
        return None
    for call in REPLAYED_CALLS:
        owner = next((i for i, c in enumerate(mro) if call in vars(c)), None)
        if owner is not None and owner < where:
            return f"{mro[owner].__qualname__} changes {call}, below {mro[where].__qualname__}"
    return None


def is_replayable(searcher: BaseSearcher) -> bool:
    """Whether the executor may log ``searcher``'s calls and save its whole state only now and then.

    Its class must say so (:attr:`BaseSearcher.replayable`), and no class below the one that said it may change a
    call in :data:`REPLAYED_CALLS` (:func:`replay_breaker`): a subclass of ASHA that overrides ``on_result`` (user
    code, say) is not replayable until it declares ``replayable = True`` itself. A wrapper's ``replayable`` is a
    property that asks this of what it wraps.

    Args:
        searcher: The searcher.

    Returns:
        True when its calls may be logged and replayed.
    """
    return bool(getattr(searcher, "replayable", False)) and replay_breaker(type(searcher)) is None


def check_inner(owner: str, inner: Any) -> BaseSearcher:
    """A wrapper's ``inner`` must be a searcher (a number there failed only as the run began, with an
    ``AttributeError`` about ``next_groups``).

    Raises:
        ConfigError: It is not a :class:`BaseSearcher`.
    """
    if not isinstance(inner, BaseSearcher):
        raise ConfigError(f"{owner}: inner must be a fluidsalus searcher (a BaseSearcher: RandomSearch, which "
                          "grid-searches grid_search(...) values too, OptunaSearch, ASHA, ...); got "
                          f"{type(inner).__name__}")
    return inner


class WrappingSearcher(BaseSearcher):
    """A searcher around another one, ``inner``, which makes the trials (repeats, a stopping rule, a scheduler of
    the user's own): what the wrapper does not change is ``inner``'s.

    Attributes:
        inner: The wrapped searcher.
    """

    inner: BaseSearcher

    def next_groups(self) -> list[TrialGroup]:
        return self.inner.next_groups()

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self.inner.on_trial_add(trial_id, group_id, config)

    def collect_stops(self) -> list[str]:
        return self.inner.collect_stops()

    def on_trial_error(self, trial_id: str, error: str) -> None:
        self.inner.on_trial_error(trial_id, error)

    def is_finished(self) -> bool:
        return self.inner.is_finished()

    def run_ending(self) -> None:
        self.inner.run_ending()

    def proposes_new(self) -> bool:
        return self.inner.proposes_new()

    @property
    def endless(self) -> bool:
        """Whether the wrapped searcher proposes until the run is stopped."""
        return self.inner.endless

    @property
    def ends_itself(self) -> bool:  # type: ignore[override]
        """Whether the wrapped searcher may end an endless search by itself."""
        return self.inner.ends_itself

    @property
    def verdict_from(self) -> float | None:  # type: ignore[override]
        """Where the wrapped searcher's trials begin to wait for its decisions."""
        return self.inner.verdict_from

    @property
    def takes_turns(self) -> bool:  # type: ignore[override]
        """Whether the wrapped searcher's trials take turns by progress."""
        return self.inner.takes_turns

    @property
    def pauses_as_ray(self) -> bool:  # type: ignore[override]
        """Whether the wrapped searcher pauses its trials as Ray's scheduler does."""
        return self.inner.pauses_as_ray

    def turn_key(self, trial_id: str) -> float:
        return self.inner.turn_key(trial_id)

    def _groups_run_to_their_end(self, who: str, why: str) -> list[TrialGroup]:
        """``inner``'s groups, whose trials must run to their end because ``who`` judges them (``why``).

        Raises:
            ConfigError: ``inner`` runs trials to budgets (it already stops trials itself).
        """
        groups = self.inner.next_groups()
        if any(group.budget is not None or group.trial_ids for group in groups):
            raise ConfigError(f"{who}: {type(self.inner).__name__} runs trials to budgets; {why}")
        return groups
