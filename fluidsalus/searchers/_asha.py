"""Asynchronous successive halving (ASHA, Li et al., MLSys 2020) with Ray Tune's exact decision rules.

:class:`ASHA` makes the same stop/continue decision as Ray's ``AsyncHyperBandScheduler`` for every result,
given the same results in the same order: the same rung milestones, the same cutoff (NumPy's
``nanpercentile`` of the values recorded at the rung, at ``(1 - 1/reduction_factor) * 100``), the same
bracket assignment rule, the same ``max_t``/``stop_last_trials`` rule and the same recording of a trial's
last result when it ends.

What fluidsalus adds is the TrialGroup view: a trial runs with the budget of its next rung milestone, so it
pauses exactly there (no overshoot past a rung that may stop it). The decision on that result is made at
once; a trial allowed on is promoted in the next :meth:`ASHA.next_groups` call, in a group whose budget is
its next milestone (or ``max_t``).

This module also holds the argument checks shared by ``_hyperband.py`` and ``_bohb.py``. Configurations come
lazily from :class:`~fluidsalus.searchers._random.VariantStream` (restorable by the count drawn).
"""

from __future__ import annotations

import bisect
import math
import numbers
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError, SpaceError
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.searchers._random import VariantStream, count_trials
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["ASHA", "asha_bracket_rng", "asha_lines", "asha_milestones", "bracket_line"]

#: Optimisation directions.
MODES = ("min", "max")
#: Multiplier that turns the metric into a reward (larger is better), Ray's ``metric_op``.
METRIC_SIGN = {"max": 1.0, "min": -1.0}
#: Bits of the seed drawn when the caller passes ``seed=None`` (it is kept in the state, so a resumed run
#: draws the same configurations).
_RANDOM_SEED_BITS = 63
#: Version of the :meth:`ASHA.state_dict` layout.
_STATE_VERSION = 1
#: Stream tag of the per-trial bracket draw (keeps it independent of other uses of the seed).
_BRACKET_STREAM = 0


# --------------------------------------------------------------------------------------------------------
# Argument checks shared by the searchers of this package
# --------------------------------------------------------------------------------------------------------


def fail(owner: str, name: str, rule: str, value: Any) -> ConfigError:
    """A ConfigError such as ``ASHA: reduction_factor must be > 1 (got 1)``."""
    return ConfigError(f"{owner}: {name} must be {rule} (got {value!r})")


def is_number(value: Any) -> bool:
    """A real number that is not a bool (NaN included)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_real(
    owner: str,
    name: str,
    value: Any,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
    rule: str,
) -> float:
    """Return ``value`` as a finite float within the given bounds, or raise a ConfigError naming it."""
    if not is_number(value) or not math.isfinite(float(value)):
        raise fail(owner, name, f"a finite number {rule}", value)
    number = float(value)
    if (
        (above is not None and not number > above)
        or (at_least is not None and not number >= at_least)
        or (below is not None and not number < below)
        or (at_most is not None and not number <= at_most)
    ):
        raise fail(owner, name, rule, value)
    return number


def check_int(owner: str, name: str, value: Any, *, minimum: int) -> int:
    """Return ``value`` as an int ``>= minimum``, or raise a ConfigError naming it."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise fail(owner, name, f"an int >= {minimum}", value)
    if value < minimum:
        raise fail(owner, name, f">= {minimum}", value)
    return int(value)


def check_optional_int(owner: str, name: str, value: Any, *, minimum: int) -> int | None:
    """``None`` or :func:`check_int`."""
    return None if value is None else check_int(owner, name, value, minimum=minimum)


def check_name(owner: str, name: str, value: Any) -> str:
    """A non-empty string (a result key)."""
    if not isinstance(value, str) or not value:
        raise fail(owner, name, "a non-empty string (a result key)", value)
    return value


def check_mode(owner: str, value: Any) -> str:
    """``"min"`` or ``"max"``."""
    if value not in MODES:
        raise fail(owner, "mode", "'min' or 'max'", value)
    return str(value)


def check_bool(owner: str, name: str, value: Any) -> bool:
    """A bool."""
    if not isinstance(value, bool):
        raise fail(owner, name, "True or False", value)
    return value


def check_seed(owner: str, value: Any) -> int:
    """``None`` (a random seed is drawn and kept in the state) or an int ``>= 0``."""
    if value is None:
        return secrets.randbits(_RANDOM_SEED_BITS)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        raise fail(owner, "seed", "None or an int >= 0", value)
    return int(value)


def check_space(owner: str, space: Any) -> dict[str, Any]:
    """A valid, non-empty search space (a dict)."""
    try:
        sp.validate_space(space)
    except SpaceError as exc:
        raise ConfigError(f"{owner}: space: {exc}") from exc
    return dict(space)


def check_max_t(owner: str, max_t: Any, *, minimum_rule: str = "> 0") -> float:
    """``max_t`` as Ray's schedulers take it (a positive number)."""
    return check_real(owner, "max_t", max_t, above=0.0, rule=minimum_rule)


def check_reduction_factor(owner: str, value: Any) -> float:
    """``reduction_factor`` (Ray's ``eta``): a number ``> 1``."""
    return check_real(owner, "reduction_factor", value, above=1.0, rule="> 1")


# --------------------------------------------------------------------------------------------------------
# Ray's bracket rules
# --------------------------------------------------------------------------------------------------------


def asha_milestones(grace_period: float, max_t: float, reduction_factor: float, s: int) -> list[float]:
    """The rung milestones of ASHA bracket ``s``, in descending order, computed exactly as Ray does.

    Ray: ``MAX_RUNGS = int(log(max_t / grace_period) / log(reduction_factor) - s + 1)`` and the milestones
    are ``grace_period * reduction_factor ** (k + s)`` for ``k < MAX_RUNGS``.

    Args:
        grace_period: The first milestone of bracket 0 (Ray's ``min_t``).
        max_t: The largest budget.
        reduction_factor: Ray's ``reduction_factor``.
        s: The bracket index.

    Returns:
        The milestones, largest first (empty when the bracket has no rung).
    """
    max_rungs = int(np.log(max_t / grace_period) / np.log(reduction_factor) - s + 1)
    return [grace_period * reduction_factor ** (k + s) for k in reversed(range(max_rungs))]


def bracket_line(rungs: Sequence[tuple[float, float | None]]) -> str:
    """Ray's ``_Bracket.debug_str()`` from a bracket's ``(milestone, cutoff)`` pairs, largest milestone first (the
    cutoff as a reward, None while its rung has no value): ``Bracket: Iter 4.000: -0.25 | Iter 1.000: None``."""
    return "Bracket: " + " | ".join(f"Iter {milestone:.3f}: {cutoff}" for milestone, cutoff in rungs)


def asha_lines(num_stopped: int, brackets: Sequence[str]) -> str:
    """Ray's ``AsyncHyperBandScheduler.debug_string()``: ``Using AsyncHyperBand: num_stopped=<n>`` and each
    bracket's line (:func:`bracket_line`)."""
    return "\n".join([f"Using AsyncHyperBand: num_stopped={num_stopped}", *brackets])


def asha_bracket_rng(seed: int, index: int) -> np.random.RandomState:
    """The generator that draws the bracket of the ``index``-th trial (only used when ``brackets > 1``).

    It is a legacy ``RandomState`` because Ray draws the bracket with the legacy global
    ``np.random.choice(len(brackets), p=softmax(rung counts))``: ``np.random.set_state(
    asha_bracket_rng(seed, i).get_state())`` before Ray's ``on_trial_add`` makes Ray pick the same bracket.

    Args:
        seed: The searcher's seed.
        index: The 0-based position of the trial in the order trials are created.

    Returns:
        A fresh ``numpy.random.RandomState``.
    """
    return np.random.RandomState(np.random.MT19937(np.random.SeedSequence([seed, _BRACKET_STREAM, index])))


class Rewards(dict[str, float]):
    """The rewards recorded at one rung (trial id -> reward), with its non-NaN values also kept sorted, so the
    rung's cutoff costs a binary insertion per record instead of a sort of the whole rung per decision.

    Only ``rewards[tid] = value`` changes it (a rung never forgets a trial).
    """

    def __init__(self, items: Mapping[str, float] | None = None) -> None:
        super().__init__()
        self._sorted: list[float] = []
        for tid, value in (items or {}).items():
            self[tid] = value

    def __setitem__(self, tid: str, value: float) -> None:
        old = self.get(tid)
        if old is not None and old == old:  # a NaN reward is in the dict only
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        super().__setitem__(tid, value)
        if value == value:
            bisect.insort(self._sorted, value)

    def nanpercentile(self, q: float) -> float:
        """``float(numpy.nanpercentile(list(self.values()), q))`` for ``0 <= q <= 100``: NumPy's default
        ``linear`` method, with its exact floating-point steps, over the sorted non-NaN rewards (NaN when every
        reward is NaN, as NumPy returns after a warning). tests/test_asha.py checks it against NumPy.

        Args:
            q: The percentile.

        Returns:
            The cutoff.
        """
        values = self._sorted
        n = len(values)
        if n == 0:
            return math.nan
        virtual = (n - 1) * (q / 100)  # NumPy: true_divide(q, 100), then (n - 1) * quantile
        below = math.floor(virtual)
        gamma = virtual - below
        if virtual >= n - 1:  # NumPy interpolates between the last value and itself (NaN for an infinity)
            a = b = values[-1]
        elif virtual < 0:
            a = b = values[0]
        else:
            a, b = values[below], values[below + 1]
        diff = b - a
        # NumPy's _lerp: a + diff * t, or b - diff * (1 - t) where t >= 0.5.
        return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


class _Bracket:
    """One ASHA bracket: its rungs (largest milestone first) and the rewards recorded at each.

    Args:
        grace_period: Ray's ``min_t``.
        max_t: Ray's ``max_t``.
        reduction_factor: Ray's ``rf``.
        s: Bracket index (offsets the first rung).
        stop_last_trials: Ray's ``stop_last_trials``.
    """

    def __init__(self, grace_period: float, max_t: float, reduction_factor: float, s: int,
                 stop_last_trials: bool) -> None:
        self.rf = reduction_factor
        self.rungs: list[tuple[float, Rewards]] = [
            (milestone, Rewards()) for milestone in asha_milestones(grace_period, max_t, reduction_factor, s)
        ]
        self.stop_last_trials = stop_last_trials

    def cutoff(self, recorded: Rewards) -> float | None:
        """The reward a trial needs at a rung: the ``(1 - 1/rf)`` quantile of the rewards recorded there."""
        if not recorded:
            return None
        return recorded.nanpercentile((1 - 1 / self.rf) * 100)

    def on_result(self, trial_id: str, cur_iter: float, cur_rew: float) -> bool:
        """The ASHA decision for one result (Ray's ``_Bracket.on_result``).

        Walk the rungs from the largest milestone down. The first rung the trial has reached
        (``cur_iter >= milestone``) and where it has no reward yet decides: the trial is stopped when its
        reward is below the rung's cutoff, and its reward is recorded there either way. Rungs where the
        trial is already recorded are skipped; with ``stop_last_trials=False`` a trial recorded at a rung it
        has passed just continues.

        Args:
            trial_id: The trial.
            cur_iter: Its progress (``result[time_attr]``).
            cur_rew: Its reward (the metric, negated for ``mode="min"``).

        Returns:
            True to stop the trial, False to let it continue.
        """
        stop = False
        for milestone, recorded in self.rungs:
            if cur_iter >= milestone and trial_id in recorded and not self.stop_last_trials:
                break  # The decision to go on from here was already made.
            if cur_iter < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            if cutoff is not None and cur_rew < cutoff:
                stop = True
            recorded[trial_id] = cur_rew
            break
        return stop

    def debug_str(self) -> str:
        """Ray's ``_Bracket.debug_str()``: each rung's milestone and cutoff (the reward a trial needs there, None
        before any is recorded), largest milestone first: ``Bracket: Iter 4.000: -0.25 | Iter 1.000: None``."""
        return bracket_line([(milestone, self.cutoff(recorded)) for milestone, recorded in self.rungs])

    def budgets(self, max_t: float) -> list[float | None]:
        """The budgets a trial of this bracket runs to, in order: milestones below ``max_t``, then
        ``max_t`` (``stop_last_trials``) or every milestone then ``None`` (run until the trainable ends)."""
        ascending = sorted(milestone for milestone, _ in self.rungs)
        if self.stop_last_trials:
            return [m for m in ascending if m < max_t] + [max_t]
        return [*ascending, None]


# --------------------------------------------------------------------------------------------------------
# The searcher
# --------------------------------------------------------------------------------------------------------


class ASHA(BaseSearcher):
    """Asynchronous successive halving with the rules and defaults of Ray's ``AsyncHyperBandScheduler``.

    TrialGroups: new configurations go out as one group per bracket with the budget of the bracket's first
    milestone (by default all ``num_samples`` at once; see ``max_concurrent``). A trial pauses at each
    milestone; the ASHA decision is made on that result (STOP, or CONTINUE and a promotion). Promotions go
    out at the next :meth:`next_groups`, one group per (bracket, next budget). A trial reaching ``max_t``
    is stopped when ``stop_last_trials`` (Ray's rule); otherwise it runs on with no budget after its last
    milestone.

    Args:
        space: The search space (Ray Tune's domains, grid searches, constants).
        num_samples: Samples per grid point, as in Ray Tune (the number of trials when there is no grid).
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        time_attr: The result key budgets are measured in; it must increase monotonically.
        max_t: The largest budget; trials are stopped once they reach it (``stop_last_trials``).
        grace_period: The first milestone: no trial is stopped before it (``0 < grace_period <= max_t``).
        reduction_factor: Ray's ``reduction_factor`` (``> 1``): milestones grow by it and about
            ``1/reduction_factor`` of the trials pass each rung.
        brackets: Number of brackets (``>= 1``). Bracket ``s`` starts at ``grace_period *
            reduction_factor ** s``. With several brackets each trial's bracket is drawn as in Ray (softmax
            over the brackets' rung counts), from a generator seeded by ``(seed, trial index)``
            (:func:`asha_bracket_rng`).
        stop_last_trials: Stop trials that reach ``max_t`` (Ray's default); False lets them run on.
        seed: Seed of the configurations and bracket draws; None draws one (kept in :meth:`state_dict`).
        max_concurrent: None: all configurations go out in the first :meth:`next_groups`. An int: at most
            that many trials are live (created and not ended) at once; more are created as others end.

    Raises:
        ConfigError: A parameter is out of range; the message names it and the allowed range.
    """

    replayable = True  # its decisions depend on its state and the results alone (see BaseSearcher)

    #: Name used in error messages and group ids.
    _owner = "ASHA"
    #: Prefix of the group ids.
    _group_prefix = "asha"

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: str,
        time_attr: str = "training_iteration",
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
        seed: int | None = None,
        max_concurrent: int | None = None,
    ) -> None:
        owner = self._owner
        self.space = check_space(owner, space)
        self.num_samples = check_int(owner, "num_samples", num_samples, minimum=1)
        self.metric = check_name(owner, "metric", metric)
        self.mode = check_mode(owner, mode)
        self.time_attr = check_name(owner, "time_attr", time_attr)
        check_max_t(owner, max_t)
        self.max_t = max_t
        check_real(owner, "grace_period", grace_period, above=0.0, at_most=float(max_t),
                   rule=f"> 0 and <= max_t ({max_t})")
        self.grace_period = grace_period
        check_reduction_factor(owner, reduction_factor)
        self.reduction_factor = reduction_factor
        self.brackets = check_int(owner, "brackets", brackets, minimum=1)
        self.stop_last_trials = check_bool(owner, "stop_last_trials", stop_last_trials)
        self.max_concurrent = check_optional_int(owner, "max_concurrent", max_concurrent, minimum=1)
        self.seed = check_seed(owner, seed)
        self._sign = METRIC_SIGN[self.mode]
        self._brackets = [
            _Bracket(grace_period, max_t, reduction_factor, s, stop_last_trials) for s in range(self.brackets)
        ]
        self._budgets = [bracket.budgets(max_t) for bracket in self._brackets]
        self._stream: VariantStream | None = None
        self._emitted = 0  # configurations handed out so far
        self._group_seq = 0  # makes group ids unique
        # group id -> bracket, budget and creation indices of the configurations not announced yet
        self._pending_new: dict[str, dict[str, Any]] = {}
        self._trials: dict[str, dict[str, Any]] = {}  # trial id -> bracket, budget, creation index, live
        self._promotions: list[tuple[str, float | None]] = []  # (trial id, next budget), in decision order
        self._live = 0  # trials added and not ended
        self._num_stopped = 0

    # ---- hooks for subclasses (BOHB) -------------------------------------------------------------------

    def _configs_left(self) -> bool:
        """Whether more new configurations can be created."""
        return self._config_stream().has_more()

    def _draw_configs(self, count: int | None) -> list[dict[str, Any]]:
        """Draw up to ``count`` new configurations (None: all that are left)."""
        return self._config_stream().take(count)

    def _on_new_trial(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """Told about each new trial (after the searcher's own bookkeeping)."""

    def _on_budget_reached(self, trial_id: str, budget: float, value: float) -> None:
        """Told when a trial reports ``value`` at (or past) its budget ``budget``."""

    def _config_stream(self) -> VariantStream:
        if self._stream is None:
            self._stream = VariantStream(self.space, self.num_samples, self.seed)
        return self._stream

    # ---- the interface ---------------------------------------------------------------------------------

    @property
    def total_samples(self) -> int | None:
        """How many trials the search makes (None when a draw makes grids): Ray's count of its variants."""
        return count_trials(self.space, self.num_samples)

    def next_groups(self) -> list[TrialGroup]:
        """Promotions decided since the last call, then new configurations (see the class docstring).

        Returns:
            One group per (bracket, budget) of promoted trials, then one group per bracket of new trials.
        """
        groups: list[TrialGroup] = []
        by_target: dict[tuple[int, float | None], list[str]] = {}
        for trial_id, budget in self._promotions:
            info = self._trials[trial_id]
            info["budget"] = budget
            by_target.setdefault((info["bracket"], budget), []).append(trial_id)
        self._promotions = []
        for (bracket, budget), trial_ids in by_target.items():
            groups.append(TrialGroup(self._new_group_id(bracket, budget), budget=budget, trial_ids=trial_ids))
        groups.extend(self._new_trial_groups())
        return groups

    def _new_trial_groups(self) -> list[TrialGroup]:
        room = self._room()
        if (room is not None and room <= 0) or not self._configs_left():
            return []
        configs = self._draw_configs(room)
        by_bracket: dict[int, list[tuple[int, dict[str, Any]]]] = {}
        for config in configs:
            by_bracket.setdefault(self._choose_bracket(self._emitted), []).append((self._emitted, config))
            self._emitted += 1
        groups = []
        for bracket, members in by_bracket.items():
            budget = self._budgets[bracket][0]
            group_id = self._new_group_id(bracket, budget)
            indices = [index for index, _ in members]
            self._pending_new[group_id] = {"bracket": bracket, "budget": budget, "indices": indices}
            groups.append(TrialGroup(group_id, configs=[config for _, config in members], budget=budget))
        return groups

    def _room(self) -> int | None:
        """How many new configurations may go out now (None: all that are left)."""
        if self.max_concurrent is None:
            return None
        announced = sum(len(p["indices"]) for p in self._pending_new.values())
        return self.max_concurrent - announced - self._live

    def _new_group_id(self, bracket: int, budget: float | None) -> str:
        self._group_seq += 1
        label = "end" if budget is None else f"{budget:g}"
        return f"{self._group_prefix}-{self._group_seq}-b{bracket}-t{label}"

    def creation_index(self, trial_id: str) -> int | None:
        """The position of the trial's configuration in the order configurations were created (the order in
        which Ray would have added the trials), or None for an unknown trial."""
        info = self._trials.get(trial_id)
        return None if info is None else int(info["index"])

    def _choose_bracket(self, index: int) -> int:
        """Ray's bracket draw: softmax over the brackets' rung counts (see :func:`asha_bracket_rng`)."""
        if len(self._brackets) == 1:
            return 0
        sizes = np.array([len(bracket.rungs) for bracket in self._brackets])
        probs = np.e ** (sizes - sizes.max())
        normalized = probs / probs.sum()
        return int(asha_bracket_rng(self.seed, index).choice(len(self._brackets), p=normalized))

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        pending = self._pending_new.get(group_id)
        if pending is None:
            return  # not one of our groups of new trials
        index = pending["indices"].pop(0)
        if not pending["indices"]:
            del self._pending_new[group_id]
        self._trials[trial_id] = {
            "bracket": pending["bracket"], "budget": pending["budget"], "index": index, "live": True
        }
        self._live += 1
        self._on_new_trial(trial_id, config)

    def judge_trial(self, trial_id: str) -> None:
        """Judge a trial made elsewhere, result by result, as Ray's scheduler does: it has no budget (it runs to
        its end, and :meth:`on_result` decides on each of its results), and its bracket is drawn as a new
        trial's. A ``super().on_trial_result(...)`` in a subclass of ``ASHAScheduler`` answers with this
        (:mod:`fluidsalus.tune._custom_scheduler`). A trial judged already is left as it is."""
        if trial_id in self._trials:
            return
        index = self._emitted
        self._emitted += 1
        self._trials[trial_id] = {"bracket": self._choose_bracket(index), "budget": None, "index": index,
                                  "live": True}
        self._live += 1

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Decide on one result with Ray's rules; promote a trial that passed its milestone.

        A result without ``time_attr`` or ``metric`` (or with a non-numeric value) lets the trial continue
        and records nothing, as in Ray.
        """
        info = self._trials.get(trial_id)
        if info is None or not info["live"]:
            return Decision.CONTINUE
        progress, value = result.get(self.time_attr), result.get(self.metric)
        at_budget = is_number(progress) and info["budget"] is not None and progress >= info["budget"]
        if is_number(progress) and is_number(value):
            if at_budget:
                self._on_budget_reached(trial_id, info["budget"], float(value))
            if self._decide(trial_id, info["bracket"], float(progress), float(value)):
                self._num_stopped += 1
                return Decision.STOP
        if at_budget:
            self._promotions.append((trial_id, self._next_budget(info["bracket"], float(progress))))
        return Decision.CONTINUE

    def _decide(self, trial_id: str, bracket: int, progress: float, value: float) -> bool:
        """Ray's ``AsyncHyperBandScheduler.on_trial_result``: stop at ``max_t``, else the bracket decides."""
        if progress >= self.max_t and self.stop_last_trials:
            return True
        return self._brackets[bracket].on_result(trial_id, progress, self._sign * value)

    def _next_budget(self, bracket: int, progress: float) -> float | None:
        for budget in self._budgets[bracket]:
            if budget is None or budget > progress:
                return budget
        return None

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Forget the trial; like Ray, record its last result at a rung it reached but is not recorded at."""
        info = self._trials.get(trial_id)
        if info is None or not info["live"]:
            return
        info["live"] = False
        self._live -= 1
        self._promotions = [(tid, budget) for tid, budget in self._promotions if tid != trial_id]
        if error or result is None:
            return  # Ray's AsyncHyperBandScheduler ignores errored trials.
        progress, value = result.get(self.time_attr), result.get(self.metric)
        if is_number(progress) and is_number(value):
            self._brackets[info["bracket"]].on_result(trial_id, float(progress), self._sign * float(value))

    def proposes_new(self) -> bool:
        return bool(self._pending_new) or self._configs_left()

    def debug_string(self, statuses: Mapping[str, str] | None = None) -> str:
        """The scheduler's lines of Ray's status report (``AsyncHyperBandScheduler.debug_string()``), from this
        searcher's state: the trials it stopped (at a rung or at ``max_t``), then each bracket's rungs with their
        cutoffs, as rewards (the metric negated for ``mode="min"``, as Ray shows them)::

            Using AsyncHyperBand: num_stopped=3
            Bracket: Iter 4.000: -0.25 | Iter 2.000: -0.5 | Iter 1.000: -2.5

        Args:
            statuses: The trials' statuses (unused here; HyperBand's lines count them).
        """
        return asha_lines(self._num_stopped, [bracket.debug_str() for bracket in self._brackets])

    def is_finished(self) -> bool:
        return (
            not self._pending_new
            and not self._promotions
            and self._live == 0
            and not self._configs_left()
        )

    # ---- state -----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "seed": self.seed,
            "drawn": self._stream.drawn if self._stream is not None else 0,
            "emitted": self._emitted,
            "group_seq": self._group_seq,
            "pending_new": {gid: {**p, "indices": list(p["indices"])} for gid, p in self._pending_new.items()},
            "trials": {tid: dict(info) for tid, info in self._trials.items()},
            "promotions": [[tid, budget] for tid, budget in self._promotions],
            "rungs": [[dict(recorded) for _, recorded in bracket.rungs] for bracket in self._brackets],
            "num_stopped": self._num_stopped,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        rungs = state["rungs"]
        if [len(r) for r in rungs] != [len(b.rungs) for b in self._brackets]:
            raise ConfigError(
                f"{self._owner}: the saved state has rungs {[len(r) for r in rungs]} per bracket but this "
                f"searcher has {[len(b.rungs) for b in self._brackets]}; resume with the same parameters"
            )
        self.seed = int(state["seed"])
        self._stream = None
        if state["drawn"]:
            self._config_stream().restore(int(state["drawn"]))
        self._emitted = int(state["emitted"])
        self._group_seq = int(state["group_seq"])
        self._pending_new = {gid: {**p, "indices": list(p["indices"])} for gid, p in state["pending_new"].items()}
        self._trials = {tid: dict(info) for tid, info in state["trials"].items()}
        self._live = sum(1 for info in self._trials.values() if info["live"])
        self._promotions = [(tid, budget) for tid, budget in state["promotions"]]
        for bracket, saved in zip(self._brackets, rungs, strict=True):
            bracket.rungs = [
                (milestone, Rewards({tid: float(v) for tid, v in recorded.items()}))
                for (milestone, _), recorded in zip(bracket.rungs, saved, strict=True)
            ]
        self._num_stopped = int(state.get("num_stopped", 0))

