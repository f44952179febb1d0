"""A trial scheduler of the user's own (a subclass of Ray Tune's ``TrialScheduler``), run as a fluidsalus searcher.

Ray Tune lets a script write its own scheduler: ``on_trial_result(tune_controller, trial, result)`` returns
``CONTINUE``, ``PAUSE`` or ``STOP``, and ``on_trial_add``, ``on_trial_complete``, ``on_trial_error`` and
``on_trial_remove`` tell it of each trial's life. :class:`ScheduledSearch` wraps the searcher that makes the
trials (random search, OptunaSearch, or a search algorithm of the user's own) and asks the scheduler about each
result:

- ``STOP`` stops the trial; ``CONTINUE`` (and ``NOOP``) leave the decision to the wrapped searcher. As a Ray
  trial waits for its scheduler at every result, each result waits for the decision (``verdict_from``), so a
  ``STOP`` ends the trial at the result it answers.
- ``PAUSE``: a paused Ray trial waits, checkpointed, until ``choose_trial_to_run`` picks it again, so that
  another trial can have its resources. fluidsalus shares devices between trials instead of pausing them, so the
  trial goes on, with one warning; a later ``STOP`` still ends it.
- ``choose_trial_to_run`` is never called: the planner decides which trials run where (one warning when the
  scheduler overrides it).
- ``tune_controller`` is a small view with ``get_trials()`` and ``get_live_trials()``; each ``trial`` is the same
  :class:`~fluidsalus.tune.callback.TrialInfo` view callbacks get (``trial_id``, ``config``, ``last_result``,
  ``status``, ...), one object per trial for the whole run.
- The run's end (its time budget, ``fail_fast``, ``stop_all()``) tells the scheduler of none of the trials it ends,
  queued or running, as Ray's controller calls no scheduler hook there (:meth:`ScheduledSearch.run_ending`).
- The scheduler's own state is not saved with the experiment, as in Ray: a resumed run starts it from its state
  when the run began (its ``tuner.pkl`` copy) and, as Ray's resume does, tells it of every trial of the experiment
  again with ``on_trial_add`` (newest result first; an unfinished trial as ``PENDING``, a finished one as
  ``TERMINATED``, an errored one as ``ERROR``). The trial views are saved (config, status and the time of the last
  result) for this.
- A subclass of ``ASHAScheduler`` (``AsyncHyperBandScheduler``) or ``MedianStoppingRule`` that overrides hooks
  runs here with a :class:`BuiltInRule`: the searcher the plain class maps onto (``ASHA``, ``MedianStopping``),
  which judges the trials result by result, as Ray's scheduler does. While a hook is called, the holder's base
  hooks answer with it (``fluidsalus.tune.schedulers._holders.judging``): ``super().on_trial_result(...)`` is
  the rule's decision on that result, and the subclass's own answer is final, as in Ray. The rule's state is
  not saved, as the scheduler's is not: a resumed run starts it anew and re-adds the trials.
- A subclass of ``HyperBandScheduler`` whose ``on_trial_result`` calls ``super()`` runs here around the plain
  class's search (:class:`HyperBandRule`): HyperBand's trials run to its rungs' budgets and wait there, its
  halvings stop trials, and ``super().on_trial_result(...)`` answers the decision HyperBand made on the result
  (``PAUSE`` while the trial waits at its rung). Only the subclass's ``STOP`` changes that decision; a trial
  stopped while it waits is told with ``on_trial_remove``, as Ray tells it (and the base's ``on_trial_complete``
  and ``on_trial_error`` call ``self.on_trial_remove``, as Ray's do).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.searchers import BaseSearcher, Decision, HyperBand
from fluidsalus.searchers._base import WrappingSearcher
from fluidsalus.store import ERROR, FINAL_STATUSES, PAUSED, PENDING, RUNNING, TERMINATED, KeptRecords
from fluidsalus.trialgroup.trial import TrialGroup
from fluidsalus.tune._custom_search import defined_by_user
from fluidsalus.tune.callback import TrialInfo
from fluidsalus.tune.schedulers._holders import judging

__all__ = ["CONTINUE", "NOOP", "PAUSE", "STOP", "HOOKS", "BuiltInRule", "HyperBandRule", "ScheduledSearch",
           "is_custom_scheduler"]

logger = logging.getLogger(__name__)

#: Ray's decisions (``TrialScheduler.CONTINUE`` ...).
CONTINUE, PAUSE, STOP, NOOP = "CONTINUE", "PAUSE", "STOP", "NOOP"
#: The methods a scheduler of the user's own overrides.
HOOKS = ("on_trial_add", "on_trial_result", "on_trial_complete", "on_trial_error", "on_trial_remove",
         "choose_trial_to_run")


def is_custom_scheduler(scheduler: Any) -> bool:
    """Whether ``scheduler`` has code of the user's own in one of Ray's scheduler hooks (:data:`HOOKS`)."""
    return any(defined_by_user(scheduler, hook) for hook in HOOKS)


class _ControllerView:
    """What a scheduler gets as ``tune_controller``: the trials seen so far."""

    def __init__(self, trials: dict[str, TrialInfo]) -> None:
        self._trials = trials

    def get_trials(self) -> list[TrialInfo]:
        """Every trial, in the order they were added."""
        return list(self._trials.values())

    def get_live_trials(self) -> list[TrialInfo]:
        """The trials that have not ended."""
        return [t for t in self._trials.values() if t.status not in FINAL_STATUSES]


class _NoTrials(BaseSearcher):
    """The searcher a :class:`~fluidsalus.searchers.MedianStopping` rule wraps when it only judges."""

    def next_groups(self) -> list[TrialGroup]:
        return []


class BuiltInRule:
    """A built-in scheduler's decisions, for a subclass's ``super()`` calls: ``searcher`` (an
    :class:`~fluidsalus.searchers.ASHA` or a :class:`~fluidsalus.searchers.MedianStopping`) judges trials made
    elsewhere, each result as it is given.

    Args:
        searcher: The searcher the plain class maps onto (for ASHA, its trials are taken with
            :meth:`~fluidsalus.searchers.ASHA.judge_trial`; for the median rule, wrapping nothing).
    """

    def __init__(self, searcher: BaseSearcher) -> None:
        self.searcher = searcher

    @classmethod
    def asha(cls, metric: str, mode: str, seed: int | None, **kwargs: Any) -> BuiltInRule:
        """ASHA's rule (``kwargs``: time_attr, max_t, grace_period, reduction_factor, brackets, stop_last_trials;
        ``seed`` draws the brackets). It draws no configuration, so its space is a placeholder."""
        from fluidsalus.searchers import ASHA

        return cls(ASHA({"_": 0}, 1, metric, mode, seed=seed, **kwargs))

    @classmethod
    def median(cls, metric: str, mode: str, **kwargs: Any) -> BuiltInRule:
        """The median rule's (``kwargs``: time_attr, grace_period, min_samples_required, hard_stop)."""
        from fluidsalus.searchers import MedianStopping

        return cls(MedianStopping(_NoTrials(), metric, mode, **kwargs))

    def add(self, trial_id: str) -> None:
        """Ray's ``on_trial_add``."""
        judge_trial = getattr(self.searcher, "judge_trial", None)
        if judge_trial is not None:
            judge_trial(trial_id)

    def judge(self, trial_id: str, result: Mapping[str, Any]) -> str:
        """Ray's ``on_trial_result``: ``STOP``, ``CONTINUE``, or ``PAUSE`` where the median rule without
        ``hard_stop`` would stop the trial (Ray pauses it)."""
        judged = getattr(self.searcher, "judged", None)
        before = judged is not None and judged(trial_id)
        if self.searcher.on_result(trial_id, dict(result)) == Decision.STOP:
            return STOP
        return PAUSE if judged is not None and not before and judged(trial_id) else CONTINUE

    def complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Ray's ``on_trial_complete`` (``error``: ``on_trial_error`` or ``on_trial_remove``)."""
        self.searcher.on_trial_complete(trial_id, None if result is None else dict(result), error)


class HyperBandRule(BuiltInRule):
    """HyperBand's decisions, for a subclass of ``HyperBandScheduler`` whose ``on_trial_result`` calls ``super()``.

    Unlike ASHA's and the median rule's, they are not made result by result on the side: HyperBand runs its
    trials to each rung's budget, where they wait (paused) until their rung is complete, and its halving stops the
    rung's worst trials, so :class:`ScheduledSearch` runs the plain class's searcher (``searcher``, found in the
    search it wraps) as the search itself. ``super().on_trial_result(...)`` answers the decision that searcher
    made on the result (:meth:`answer`); the other hooks tell it nothing (the search already did).

    Args:
        searcher: The :class:`~fluidsalus.searchers.HyperBand` that runs the trials.
    """

    searcher: HyperBand

    def __init__(self, searcher: HyperBand) -> None:
        super().__init__(searcher)
        self._answers: dict[str, str] = {}

    def answer(self, trial_id: str, decision: Decision) -> str:
        """Note and return Ray's answer for the searcher's ``decision`` on the trial's latest result: ``PAUSE``
        while the trial waits at its rung's budget (Ray pauses a trial that reached the last rung too, and stops
        it when the bracket ends; fluidsalus stops it at once), ``STOP`` for a trial the rung's halving stopped,
        else ``CONTINUE``."""
        said = PAUSE if self.searcher.waits_at_rung(trial_id) else STOP if decision == Decision.STOP else CONTINUE
        self._answers[trial_id] = said
        return said

    def add(self, trial_id: str) -> None:
        """Nothing: the search tells the searcher of its trials."""

    def judge(self, trial_id: str, result: Mapping[str, Any]) -> str:
        return self._answers.get(trial_id, CONTINUE)

    def complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Nothing: the search tells the searcher of its trials' ends."""


class ScheduledSearch(WrappingSearcher):
    """``inner``'s trials, with ``scheduler`` (Ray's API) deciding on each result (see the module docstring).

    Args:
        inner: The searcher that makes the trials and runs them to their end.
        scheduler: The user's scheduler.
        trainable_name: For the trial views' names.
        rule: For a subclass of ASHA or the median rule: the built-in rule its base hooks answer with.

    Raises:
        ConfigError: ``inner`` runs trials to budgets (a scheduler of fluidsalus's own already decides there).
    """

    def __init__(self, inner: BaseSearcher, scheduler: Any, trainable_name: str = "",
                 rule: BuiltInRule | None = None) -> None:
        self.inner, self.scheduler, self.trainable_name, self.rule = inner, scheduler, trainable_name, rule
        self.time_attr = inner.time_attr
        self._trials: dict[str, TrialInfo] = {}
        self._view = _ControllerView(self._trials)
        self._warned_pause = self._warned_rule = False
        self._run_ended = False  # the run's end began: its trials' ends are not the scheduler's (run_ending)
        self._ended_json = KeptRecords()  # ended trials' parts of state_json, encoded once
        self._name = type(scheduler).__name__
        if defined_by_user(scheduler, "choose_trial_to_run"):
            warnings.warn(f"fluidsalus.tune: {self._name}.choose_trial_to_run is not called; fluidsalus's planner "
                          "decides which trials run where", UserWarning, stacklevel=3)

    @property
    def verdict_from(self) -> float | None:  # type: ignore[override]
        """Every result waits for the scheduler's decision, as in Ray (one round trip to the driver per result)."""
        return -math.inf

    def next_groups(self) -> list[TrialGroup]:
        if isinstance(self.rule, HyperBandRule):  # (the search is HyperBand's: its trials run to rungs' budgets)
            return self.inner.next_groups()
        return self._groups_run_to_their_end(self._name, "a scheduler of your own runs with trials that run to "
                                                         "their end")

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self.inner.on_trial_add(trial_id, group_id, config)
        trial = TrialInfo(trial_id, dict(config), status=PENDING, trainable_name=self.trainable_name)
        self._trials[trial_id] = trial
        self._call("on_trial_add", trial)

    def _call(self, hook: str, trial: TrialInfo, *args: Any) -> Any:
        method = getattr(self.scheduler, hook, None)
        if not callable(method):
            return None
        if self.rule is None:
            return method(self._view, trial, *args)
        with judging(self.scheduler, self.rule):
            return method(self._view, trial, *args)

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Ask the scheduler about the result; its ``STOP`` wins over the wrapped searcher's decision.

        Raises:
            ConfigError: The scheduler returned something other than Ray's decisions.
        """
        trial = self._trials.get(trial_id)
        decision = self.inner.on_result(trial_id, result)
        if trial is None:
            return decision
        self._ended_json.forget(trial_id)
        trial.status, trial.last_result = RUNNING, dict(result)
        rules = self.rule.answer(trial_id, decision) if isinstance(self.rule, HyperBandRule) else None
        said = self._call("on_trial_result", trial, dict(result))
        if said == STOP:
            return Decision.STOP
        if rules is not None and said in (CONTINUE, NOOP, PAUSE, None):
            if rules == PAUSE:
                trial.status = PAUSED  # (a stop while it waits removes it, as Ray's stop_trial does)
            if said not in (rules, NOOP, None) and not self._warned_rule:
                self._warned_rule = True
                warnings.warn(f"fluidsalus.tune: {self._name}.on_trial_result answered {said} where "
                              f"HyperBandScheduler's rule answered {rules} (trial {trial_id}); HyperBand's trials run "
                              "to its rungs' budgets, so only a STOP of yours changes its decision", UserWarning,
                              stacklevel=2)
            return decision
        if said == PAUSE and not self._warned_pause:
            self._warned_pause = True
            warnings.warn(f"fluidsalus.tune: {self._name} paused trial {trial_id}; fluidsalus shares devices instead "
                          "of pausing trials, so it goes on (a later STOP still ends it)", UserWarning, stacklevel=2)
        elif said not in (CONTINUE, NOOP, PAUSE, None):
            raise ConfigError(f"{self._name}.on_trial_result returned {said!r}; it must return "
                              "TrialScheduler.CONTINUE, PAUSE or STOP")
        return decision

    def run_ending(self) -> None:
        """The run's end (its time budget, ``fail_fast``, ``stop_all()``) tells the scheduler of none of the trials it
        ends, as Ray's controller, which sets them ``TERMINATED`` with no scheduler hook (``_schedule_trial_stop``):
        ``on_trial_remove`` for those it ends queued or paused, ``on_trial_complete`` for those it stops running,
        were called here before."""
        self._run_ended = True
        self.inner.run_ending()

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self.inner.on_trial_complete(trial_id, result, error)
        trial = self._trials.get(trial_id)
        if trial is None or trial.status in FINAL_STATUSES:
            return
        if result is not None:
            trial.last_result = dict(result)
        ended = ERROR if error else TERMINATED
        if self._run_ended:
            trial.status = ended
            return
        # (the hook sees the trial as it was, RUNNING, PENDING or PAUSED, and among the live ones, as Ray's hooks
        # see it: its controller sets the status after them)
        try:
            if error:
                self._call("on_trial_error", trial)
            elif trial.status in (PENDING, PAUSED):  # ended before it reported (stopped while queued, say) or while
                # it waited at a HyperBand rung: Ray removes it
                self._call("on_trial_remove", trial)
            else:
                self._call("on_trial_complete", trial, None if result is None else dict(result))
        finally:
            trial.status = ended

    def state_dict(self) -> dict[str, Any]:
        """The wrapped searcher's state, and each trial's config, status and last result's time (so that a
        resumed run shows the scheduler the trials of the experiment)."""
        return {"inner": self.inner.state_dict(),
                "trials": {tid: self._record(t) for tid, t in self._trials.items()}}

    @staticmethod
    def _record(trial: TrialInfo) -> dict[str, Any]:
        return {"config": trial.config, "status": trial.status, "time": (trial.last_result or {}).get("timestamp")}

    def state_json(self) -> str:
        """:meth:`state_dict` as JSON text, with each ended trial's part encoded once and kept: the state is
        written with every batch (the scheduler's code is the user's, so it is not replayable), and it holds
        every trial of the run.

        Returns:
            The same JSON object ``dumps(self.state_dict())`` encodes.
        """
        trials = self._ended_json.encode(self._trials, lambda trial_id: self._record(self._trials[trial_id]),
                                         lambda trial_id: self._trials[trial_id].status in FINAL_STATUSES)
        return f'{{"inner":{self.inner.state_json()},"trials":{trials}}}'

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the wrapped searcher and the trial views, and tell the scheduler (the one saved when the run
        began) of every trial again with ``on_trial_add``, newest result first, as Ray's resume re-adds them: an
        unfinished trial as ``PENDING``.

        Raises:
            ConfigError: A HyperBand subclass's search given the state of one that ran without HyperBand (an
                experiment of a fluidsalus before its ``super()`` ran HyperBand's rule: its trials cannot go on
                under HyperBand; the bare load error advised a searcher the user never passed).
        """
        try:
            self.inner.load_state_dict(state["inner"])
        except (KeyError, TypeError, ValueError) as e:
            if not isinstance(self.rule, HyperBandRule):
                raise
            raise ConfigError(
                f"searcher: this experiment ran {self._name} over a search without HyperBand (a fluidsalus from "
                "before 2026-11-30, which ran a HyperBandScheduler subclass that calls super() as a scheduler of "
                "your own); it cannot go on under HyperBand's rule: resume it with that fluidsalus, or start a new "
                f"experiment ({type(e).__name__}: {e})") from e
        self._trials.clear()
        self._ended_json.clear()
        saved_trials = dict(state.get("trials", {}))
        for trial_id, saved in saved_trials.items():
            status = str(saved["status"])
            self._trials[trial_id] = TrialInfo(trial_id, dict(saved["config"]),
                                               status=status if status in FINAL_STATUSES else PENDING,
                                               trainable_name=self.trainable_name)
        newest_first = sorted(saved_trials, key=lambda tid: -math.inf if saved_trials[tid].get("time") is None
                              else float(saved_trials[tid]["time"]), reverse=True)
        for trial_id in newest_first:
            self._call("on_trial_add", self._trials[trial_id])
