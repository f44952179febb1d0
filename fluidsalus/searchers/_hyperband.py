"""Synchronous HyperBand (Li et al., JMLR 2018) with Ray Tune's bracket sizes; every rung is one TrialGroup.

Bracket sizes are computed exactly as Ray's ``HyperBandScheduler`` does (``s_max + 1`` brackets per band,
``n0(s)`` trials starting at ``r0(s)``, then ``n <- ceil(n / eta)`` and ``r <- int(min(r * eta, max_t))``
at each halving). Trials are dealt to brackets in Ray's order as they are created: band after band, and
within a band from bracket ``s = 0`` up (:class:`HyperBand`) or from the largest bracket down
(:class:`~fluidsalus.searchers._bohb.SyncBOHB`, as Ray's ``HyperBandForBOHB``).

TrialGroups: rung 0 of a bracket is one group of fresh configurations with budget ``r0``. When every trial
of a rung has paused at the rung's budget (or ended), the best go on as the next rung's group
(``trial_ids``, budget ``r_{k+1}``); the others are stopped (``collect_stops``, or a STOP decision for the
trial whose result completed the rung). Trials of the last rung are stopped when they reach its budget
(``stop_last_trials``), or run until the trainable returns otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fluidsalus.searchers._asha import (
    METRIC_SIGN,
    check_bool,
    check_int,
    check_mode,
    check_name,
    check_optional_int,
    check_real,
    check_reduction_factor,
    check_seed,
    check_space,
    is_number,
)
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.searchers._random import VariantStream, count_trials
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["HyperBand", "bracket_work", "hyperband_schedule"]

#: Version of the :meth:`HyperBand.state_dict` layout.
_STATE_VERSION = 1
#: The status of a trial the run has made and not started (Ray's ``Trial.PENDING``).
PENDING = "PENDING"
#: Score of a trial with no usable metric value (NaN or never reported): it ranks last.
_WORST_SCORE = -math.inf


def _s_max_1(max_t: float, eta: float) -> int:
    """Ray's number of brackets per band: ``round(log(max_t) / log(eta)) + 1``."""
    return int(np.round(np.log(max_t) / np.log(eta))) + 1


def _n0(s: int, s_max_1: int, eta: float) -> int:
    """Ray's bracket size: ``ceil(s_max_1 / (s + 1) * eta ** s)``."""
    return int(np.ceil(s_max_1 / (s + 1) * eta**s))


def _r0(s: int, max_t: float, eta: float) -> int:
    """Ray's first budget of bracket ``s``: ``int(max_t * eta ** -s)``."""
    return int(max_t * eta ** (-s))


def bracket_work(n0: int, r0: int, s: int, eta: float, max_t: float) -> int:
    """The work (trials times budget) Ray counts for a bracket of ``n0`` trials from budget ``r0`` over ``s + 1``
    rungs, the denominator of its ``completed=`` share (Ray's ``_Bracket._calculate_total_work``): each rung adds
    ``int(n) * int(r)``, then ``n = ceil(n / eta)`` and ``r = int(min(r * eta, max_t - r0))`` (Ray caps the next
    budget by ``max_t`` less the first one, so the share is Ray's, not the work the rungs' budgets add up to)."""
    work, n, r = 0, n0, float(r0)
    for _ in range(s + 1):
        work += int(n) * int(r)
        n = int(np.ceil(n / eta))
        r = int(min(r * eta, max_t - r0))
    return work


def hyperband_schedule(max_t: float, reduction_factor: float) -> list[tuple[int, list[tuple[int, int]]]]:
    """The brackets of one HyperBand band, computed as Ray's ``HyperBandScheduler``.

    Args:
        max_t: The largest budget.
        reduction_factor: Ray's ``reduction_factor`` (``eta``).

    Returns:
        For each ``s`` from 0 to ``s_max``, ``(s, [(n_k, r_k) for each rung k])``: the nominal number of
        trials and the budget of every rung (``s + 1`` rungs). Brackets Ray skips (``r0 == 0``) are left out.
    """
    eta = reduction_factor
    s_max_1 = _s_max_1(max_t, eta)
    out = []
    for s in range(s_max_1):
        r = _r0(s, max_t, eta)
        if r == 0:
            continue
        n = _n0(s, s_max_1, eta)
        rungs = [(n, r)]
        for _ in range(s):
            n = int(np.ceil(n / eta))
            r = int(min(r * eta, max_t))
            rungs.append((n, r))
        out.append((s, rungs))
    return out


class HyperBand(BaseSearcher):
    """Synchronous HyperBand with Ray's ``HyperBandScheduler`` bracket sizes; each rung is one TrialGroup.

    Trials are dealt to brackets in Ray's order (band after band; ``s = 0`` first). Brackets run
    concurrently: every bracket whose trials exist goes out at once, up to ``max_concurrent_brackets``
    unfinished brackets. A rung is complete when each of its trials has paused at the rung's budget or
    ended; then the best ``c_{k+1}`` of its paused trials are promoted into the next rung's group and the rest
    are stopped, where ``c_0`` is the number of trials the bracket got and ``c_{k+1} = min(n_{k+1},
    ceil(c_k / eta))`` (``n_{k+1}`` is Ray's nominal size). For a full bracket ``c_k`` is exactly Ray's
    ``n_k``, whether or not trials end early; a partial bracket halves its actual size.

    Args:
        space: The search space.
        num_samples: Samples per grid point as in Ray Tune (the number of trials when there is no grid).
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        time_attr: The result key budgets are measured in (monotonic).
        max_t: The largest budget (``>= 1``; Ray truncates budgets to ints).
        reduction_factor: ``eta`` (``> 1``).
        stop_last_trials: Stop trials at the last rung's budget (Ray's default); False lets them run until
            the trainable returns.
        max_concurrent_brackets: None: all brackets go out as soon as their configurations exist. An int:
            at most that many unfinished brackets; the next starts when one finishes.
        seed: Seed of the configurations; None draws one (kept in :meth:`state_dict`).
        halve_partial_brackets: A bracket that got fewer trials than its nominal size halves its real size (the
            default); False: Ray's rule (:attr:`halve_partial_brackets`).

    Raises:
        ConfigError: A parameter is out of range; the message names it and the allowed range.
    """

    replayable = True  # its decisions depend on its state and the results alone (see BaseSearcher)
    #: A bracket that got fewer trials than its nominal size (the last one, when ``num_samples`` runs out) halves
    #: its real size: it keeps ``min(n_{k+1}, ceil(c_k / eta))`` at each rung. False: Ray's rule, which keeps up to
    #: the nominal ``n_{k+1}`` of whatever trials are left (so such a bracket may promote all of them); the Ray
    #: Tune front end sets it so, as a drop-in ``HyperBandScheduler`` (docs/searchers.md, "Differences").
    halve_partial_brackets: bool = True
    pauses_as_ray = True  # (Ray's scheduler pauses its trials: BaseSearcher.pauses_as_ray)

    _owner = "HyperBand"
    _group_prefix = "hyperband"
    #: Bracket order within a band: Ray's ``HyperBandScheduler`` fills ``s = 0`` first; ``HyperBandForBOHB``
    #: (and :class:`SyncBOHB`) the largest bracket first.
    _largest_bracket_first = False

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: str,
        time_attr: str = "training_iteration",
        max_t: float = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
        max_concurrent_brackets: int | None = None,
        seed: int | None = None,
        halve_partial_brackets: bool = True,
    ) -> None:
        owner = self._owner
        self.space = check_space(owner, space)
        self.num_samples = check_int(owner, "num_samples", num_samples, minimum=1)
        self.metric = check_name(owner, "metric", metric)
        self.mode = check_mode(owner, mode)
        self.time_attr = check_name(owner, "time_attr", time_attr)
        check_real(owner, "max_t", max_t, at_least=1.0, rule=">= 1 (budgets are truncated to ints, as in Ray)")
        self.max_t = max_t
        check_reduction_factor(owner, reduction_factor)
        self.reduction_factor = reduction_factor
        self.stop_last_trials = check_bool(owner, "stop_last_trials", stop_last_trials)
        self.max_concurrent_brackets = check_optional_int(
            owner, "max_concurrent_brackets", max_concurrent_brackets, minimum=1
        )
        self.seed = check_seed(owner, seed)
        self.halve_partial_brackets = check_bool(owner, "halve_partial_brackets", halve_partial_brackets)
        self._sign = METRIC_SIGN[self.mode]
        self._s_max_1 = _s_max_1(max_t, reduction_factor)
        self._schedules = dict(hyperband_schedule(max_t, reduction_factor))
        order = sorted(self._schedules, reverse=self._largest_bracket_first)
        self._order: list[int] = order  # the s of each bracket of a band, in fill order
        self._stream: VariantStream | None = None
        self._next_slot = 0  # position in the endless sequence of brackets (band * len(order) + i)
        self._brackets: list[dict[str, Any]] = []
        self._pending_new: dict[str, int] = {}  # group id of a rung 0 -> its bracket
        self._trial_bracket: dict[str, int] = {}
        self._last_value: dict[str, float] = {}  # last metric value of each trial
        self._last_time: dict[str, float] = {}  # last progress of each trial
        self._stops: list[str] = []  # paused trials to stop
        self._num_stopped = 0  # trials the halvings stopped (Ray's num_stopped: not those at the last rung)

    # ---- hooks for subclasses (SyncBOHB) ---------------------------------------------------------------

    def _configs_left(self) -> bool:
        return self._config_stream().has_more()

    def _draw_configs(self, count: int) -> list[dict[str, Any]]:
        """Draw up to ``count`` configurations for a new bracket."""
        return self._config_stream().take(count)

    def _on_new_trial(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """Told about each new trial."""

    def _on_budget_reached(self, trial_id: str, budget: float, value: float | None) -> None:
        """Told when a trial reaches the budget of its rung, with its last metric value (None if none)."""

    def _config_stream(self) -> VariantStream:
        if self._stream is None:
            self._stream = VariantStream(self.space, self.num_samples, self.seed)
        return self._stream

    # ---- bracket bookkeeping ---------------------------------------------------------------------------

    def _budget(self, bracket: Mapping[str, Any], rung: int | None = None) -> float | None:
        """Budget of a rung (default: the bracket's current one); None for a last rung run to the end."""
        rung = bracket["rung"] if rung is None else rung
        schedule = bracket["schedule"]
        if rung == len(schedule) - 1 and not self.stop_last_trials:
            return None
        return schedule[rung][1]

    def _is_last_rung(self, bracket: Mapping[str, Any]) -> bool:
        return bracket["rung"] == len(bracket["schedule"]) - 1

    def _rung_complete(self, bracket: Mapping[str, Any]) -> bool:
        if bracket["pending"]:
            return False
        settled = set(bracket["reached"]) | set(bracket["ended"])
        return all(tid in settled for tid in bracket["members"])

    def _score(self, trial_id: str) -> float:
        value = self._last_value.get(trial_id)
        if value is None or math.isnan(value):
            return _WORST_SCORE
        return self._sign * value

    def _settle(self, index: int) -> list[str]:
        """Advance bracket ``index`` while its current rung is complete.

        Returns:
            The trials to stop (the caller returns STOP for the one that reported, the others go to
            :meth:`collect_stops`).
        """
        bracket = self._brackets[index]
        stops: list[str] = []
        while not bracket["done"] and self._rung_complete(bracket):
            ended = set(bracket["ended"])
            if self._is_last_rung(bracket):
                stops += [tid for tid in bracket["members"] if tid not in ended]
                bracket["done"] = True
                break
            # Ray: sort ascending by reward (stable, in the bracket's order) and keep the last n.
            candidates = [tid for tid in bracket["members"] if tid in bracket["reached"] and tid not in ended]
            ranked = sorted(candidates, key=lambda tid: bracket["reached"][tid])
            nominal = bracket["schedule"][bracket["rung"] + 1][0]
            keep = min(nominal, math.ceil(bracket["capacity"] / self.reduction_factor)) \
                if self.halve_partial_brackets else nominal
            bracket["capacity"] = keep
            good = set(ranked[max(0, len(ranked) - keep):]) if keep > 0 else set()  # (all, if fewer are left)
            stops += [tid for tid in candidates if tid not in good]
            self._num_stopped += sum(1 for tid in candidates if tid not in good)
            bracket["rung"] += 1
            bracket["members"] = [tid for tid in candidates if tid in good]
            bracket["reached"], bracket["ended"] = {}, []
            budget = self._budget(bracket)
            for tid in bracket["members"]:
                if budget is not None and self._last_time.get(tid, 0.0) >= budget:
                    # Already there (Ray's int truncation can repeat a budget): nothing to run, and the
                    # value at this budget was already reported to _on_budget_reached.
                    bracket["reached"][tid] = self._score(tid)
            if not bracket["members"]:
                bracket["done"] = True
                break
            bracket["group_due"] = True
        if bracket["done"]:
            bracket["group_due"] = False
        return stops

    # ---- the interface ---------------------------------------------------------------------------------

    @property
    def total_samples(self) -> int | None:
        """How many trials the search makes (None when a draw makes grids): Ray's count of its variants."""
        return count_trials(self.space, self.num_samples)

    def next_groups(self) -> list[TrialGroup]:
        """Next rungs of brackets whose rung completed, then new brackets (rung 0 groups).

        Returns:
            The groups, one per rung.
        """
        groups: list[TrialGroup] = []
        for index, bracket in enumerate(self._brackets):
            if not bracket.get("group_due"):
                continue
            bracket["group_due"] = False
            ended = set(bracket["ended"])
            reached = set(bracket["reached"])
            trial_ids = [tid for tid in bracket["members"] if tid not in ended and tid not in reached]
            if trial_ids:
                group_id = f"{self._group_prefix}-b{index}-r{bracket['rung']}"
                groups.append(TrialGroup(group_id, budget=self._budget(bracket), trial_ids=trial_ids))
        while self._may_start_bracket() and self._configs_left():
            s = self._order[self._next_slot % len(self._order)]
            band = self._next_slot // len(self._order)
            schedule = self._schedules[s]
            index = len(self._brackets)
            first_budget = self._budget({"rung": 0, "schedule": schedule})
            configs = self._draw_configs(schedule[0][0])
            if not configs:
                break
            self._next_slot += 1
            group_id = f"{self._group_prefix}-b{index}-r0"
            self._brackets.append({
                "s": s, "band": band, "schedule": [list(rung) for rung in schedule], "rung": 0,
                "members": [], "pending": len(configs), "capacity": len(configs), "reached": {}, "ended": [],
                "done": False, "group_due": False,
            })
            self._pending_new[group_id] = index
            groups.append(TrialGroup(group_id, configs=configs, budget=first_budget))
        return groups

    def _may_start_bracket(self) -> bool:
        if self.max_concurrent_brackets is None:
            return True
        active = sum(1 for bracket in self._brackets if not bracket["done"])
        return active < self.max_concurrent_brackets

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        index = self._pending_new.get(group_id)
        if index is None:
            return
        bracket = self._brackets[index]
        bracket["members"].append(trial_id)
        bracket["pending"] -= 1
        if bracket["pending"] <= 0:
            del self._pending_new[group_id]
        self._trial_bracket[trial_id] = index
        self._on_new_trial(trial_id, config)

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Note the result; a trial that reaches its rung's budget waits there, and may complete the rung.

        Returns:
            STOP for a trial that reached the last rung's budget (``stop_last_trials``) or that lost the
            halving its result triggered; CONTINUE otherwise (the trial waits, paused, at the budget).
        """
        index = self._trial_bracket.get(trial_id)
        if index is None or self._brackets[index]["done"]:
            return Decision.CONTINUE
        bracket = self._brackets[index]
        if trial_id not in bracket["members"] or trial_id in bracket["ended"]:
            return Decision.CONTINUE
        value, progress = result.get(self.metric), result.get(self.time_attr)
        if is_number(value):
            self._last_value[trial_id] = float(value)
        if not is_number(progress):
            return Decision.CONTINUE
        self._last_time[trial_id] = float(progress)
        budget = self._budget(bracket)
        if budget is None or progress < budget or trial_id in bracket["reached"]:
            return Decision.CONTINUE
        bracket["reached"][trial_id] = self._score(trial_id)
        self._on_budget_reached(trial_id, budget, self._last_value.get(trial_id))
        at_last_rung = self._is_last_rung(bracket)
        stops = self._settle(index)
        if at_last_rung and trial_id not in stops:
            stops.append(trial_id)  # it reached max budget: Ray stops it once the bracket finishes
        if trial_id in stops:
            stops.remove(trial_id)
            self._stops += stops
            return Decision.STOP
        self._stops += stops
        return Decision.CONTINUE

    def waits_at_rung(self, trial_id: str) -> bool:
        """Whether the trial reached its rung's budget and waits there for the rest of its rung (Ray's
        ``HyperBandScheduler`` answers ``PAUSE`` on that result). A trial that completed its rung does not wait:
        it was promoted (Ray's ``CONTINUE``) or stopped."""
        index = self._trial_bracket.get(trial_id)
        if index is None:
            return False
        bracket = self._brackets[index]
        return not bracket["done"] and trial_id in bracket["reached"]

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """The trial leaves its rung; that may complete the rung."""
        index = self._trial_bracket.get(trial_id)
        if index is None:
            return
        self._stops = [tid for tid in self._stops if tid != trial_id]
        bracket = self._brackets[index]
        if bracket["done"] or trial_id not in bracket["members"] or trial_id in bracket["ended"]:
            return
        bracket["ended"].append(trial_id)
        self._stops += self._settle(index)

    def collect_stops(self) -> list[str]:
        stops, self._stops = self._stops, []
        return stops

    def proposes_new(self) -> bool:
        return bool(self._pending_new) or self._configs_left()

    def is_finished(self) -> bool:
        return (
            not self._pending_new
            and not self._stops
            and all(bracket["done"] for bracket in self._brackets)
            and not self._configs_left()
        )

    def bracket_summary(self) -> list[dict[str, Any]]:
        """A summary of each bracket created so far: ``s``, band, schedule ``[(n_k, r_k)]``, current rung,
        its members and whether it is done (for inspection and tests)."""
        return [
            {"s": b["s"], "band": b["band"], "schedule": [tuple(r) for r in b["schedule"]], "rung": b["rung"],
             "members": list(b["members"]), "done": b["done"]}
            for b in self._brackets
        ]

    def debug_string(self, statuses: Mapping[str, str] | None = None) -> str:
        """The scheduler's lines of Ray's status report (``HyperBandScheduler.debug_string()``), from this
        searcher's state: the trials the halvings stopped, the brackets (Ray counts a band's brackets too small to
        run, ``r0 == 0``, among them), then per band (Ray's round) each bracket's current size, budget, share of
        its work done and its trials by status::

            Using HyperBand: num_stopped=2 total_brackets=3
            Round #0:
              Bracket(Max Size (n)=3, Milestone (r)=9, completed=55.6%): {PAUSED: 1, TERMINATED: 2}

        Args:
            statuses: The trials' statuses by id (the run's, as the reporter has them: one it has not seen yet is
                ``PENDING``, as in Ray, where every trial made is one); without them a trial is
                counted as this searcher sees it: ``TERMINATED`` once it left its bracket or ended, ``PAUSED`` at
                its rung's budget, else ``RUNNING``.
        """
        bands = max((b["band"] for b in self._brackets), default=0) + 1
        last_band = sum(1 for b in self._brackets if b["band"] == bands - 1)
        if self._largest_bracket_first and self._brackets:  # (Ray adds the skipped ones first in a band)
            last_band += self._s_max_1 - len(self._schedules)
        lines = [f"Using HyperBand: num_stopped={self._num_stopped} total_brackets="
                 f"{(bands - 1) * self._s_max_1 + last_band}"]
        by_bracket: dict[int, list[str]] = {}
        for tid, index in self._trial_bracket.items():
            by_bracket.setdefault(index, []).append(tid)
        for band in range(bands):
            lines.append(f"Round #{band}:")
            for index, bracket in enumerate(self._brackets):
                if bracket["band"] == band:
                    lines.append(f"  {self._bracket_str(bracket, by_bracket.get(index, []), statuses)}")
        return "\n".join(lines)

    def _bracket_str(self, bracket: Mapping[str, Any], trial_ids: list[str],
                     statuses: Mapping[str, str] | None) -> str:
        """One bracket as Ray's ``_Bracket.__repr__`` (with its trailing space)."""
        size, milestone = bracket["schedule"][bracket["rung"]]
        n0, r0 = bracket["schedule"][0]
        work = bracket_work(n0, r0, bracket["s"], self.reduction_factor, self.max_t)
        done = sum(self._last_time.get(tid, 0.0) for tid in trial_ids)
        share = 1.0 if bracket["done"] or not work else min(done / work, 1.0)
        counts: dict[str, int] = {}
        for tid in trial_ids:
            status = statuses.get(tid, PENDING) if statuses is not None else self._own_status(bracket, tid)
            counts[status] = counts.get(status, 0) + 1
        shown = ", ".join(sorted(f"{status}: {n}" for status, n in counts.items()))
        return f"Bracket(Max Size (n)={size}, Milestone (r)={milestone}, completed={share:.1%}): {{{shown}}} "

    @staticmethod
    def _own_status(bracket: Mapping[str, Any], trial_id: str) -> str:
        if bracket["done"] or trial_id not in bracket["members"] or trial_id in bracket["ended"]:
            return "TERMINATED"
        return "PAUSED" if trial_id in bracket["reached"] else "RUNNING"

    # ---- state -----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "seed": self.seed,
            "drawn": self._stream.drawn if self._stream is not None else 0,
            "next_slot": self._next_slot,
            "brackets": [
                {**b, "members": list(b["members"]), "reached": dict(b["reached"]), "ended": list(b["ended"]),
                 "schedule": [list(r) for r in b["schedule"]]}
                for b in self._brackets
            ],
            "pending_new": dict(self._pending_new),
            "trial_bracket": dict(self._trial_bracket),
            "last_value": dict(self._last_value),
            "last_time": dict(self._last_time),
            "stops": list(self._stops),
            "num_stopped": self._num_stopped,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seed = int(state["seed"])
        self._stream = None
        if state["drawn"]:
            self._config_stream().restore(int(state["drawn"]))
        self._next_slot = int(state["next_slot"])
        self._brackets = [
            {**b, "members": list(b["members"]), "reached": {k: float(v) for k, v in b["reached"].items()},
             "ended": list(b["ended"]), "schedule": [list(r) for r in b["schedule"]]}
            for b in state["brackets"]
        ]
        self._pending_new = {gid: int(index) for gid, index in state["pending_new"].items()}
        self._trial_bracket = {tid: int(index) for tid, index in state["trial_bracket"].items()}
        self._last_value = {tid: float(v) for tid, v in state["last_value"].items()}
        self._last_time = {tid: float(v) for tid, v in state["last_time"].items()}
        self._stops = list(state["stops"])
        self._num_stopped = int(state.get("num_stopped", 0))  # (a state saved before 2026-12-01 has none)
