"""ASHA and synchronous HyperBand: TrialGroups and budgets end to end through the pure driver, state round
trips and bad input. (Decision-level equality with Ray and Optuna is in test_searchers_differential.py.)"""

from __future__ import annotations

import math
import random
import warnings
from collections import Counter

import numpy as np
import pytest

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._asha import ASHA, Rewards, asha_milestones
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.searchers._hyperband import HyperBand, hyperband_schedule
from fluidsalus.store import dumps, loads
from fluidsalus.testing import drive

SPACE = {"a": sp.uniform(0.0, 1.0), "b": sp.uniform(0.0, 1.0), "fixed": 7}


def curve(config, iteration):
    """Crossing learning curves with deterministic noise (higher is better)."""
    noise = random.Random(hash((config["a"], config["b"], iteration))).random()
    return config["a"] * (1.0 - math.exp(-iteration * config["b"])) + 0.05 * noise


# --------------------------------------------------------------------------------------------------------
# Helpers shared with test_searchers_bohb.py
# --------------------------------------------------------------------------------------------------------


class Recorder(BaseSearcher):
    """Delegates to a searcher and logs its groups, stops and live-trial count."""

    def __init__(self, inner):
        self.inner, self.time_attr = inner, inner.time_attr
        self.groups, self.stops, self.live, self.max_live = [], [], set(), 0

    def next_groups(self):
        groups = self.inner.next_groups()
        self.groups += groups
        return groups

    def on_trial_add(self, trial_id, group_id, config):
        self.live.add(trial_id)
        self.max_live = max(self.max_live, len(self.live))
        self.inner.on_trial_add(trial_id, group_id, config)

    def on_result(self, trial_id, result):
        return self.inner.on_result(trial_id, result)

    def on_trial_complete(self, trial_id, result, error=False):
        self.live.discard(trial_id)
        self.inner.on_trial_complete(trial_id, result, error)

    def collect_stops(self):
        stops = self.inner.collect_stops()
        self.stops += stops
        return stops

    def is_finished(self):
        return self.inner.is_finished()


class Resuming(Recorder):
    """Swaps the searcher for a fresh one loaded from its state (through the store's JSON) at chosen points:
    before the n-th result, and (``after_groups``) right after ``next_groups`` returned groups and before
    ``on_trial_add``, which is where the executor saves the state."""

    def __init__(self, factory, at_results=(), after_groups=False):
        super().__init__(factory(seed=SEED))
        self.factory, self.at_results, self.after_groups = factory, set(at_results), after_groups
        self.results = self.swaps = 0

    def _swap(self):
        state = loads(dumps(self.inner.state_dict()))
        fresh = self.factory(seed=None)  # a different seed: the state must bring back the saved one
        fresh.load_state_dict(state)
        self.inner = fresh
        self.swaps += 1

    def next_groups(self):
        groups = super().next_groups()
        if groups and self.after_groups:
            self._swap()
        return groups

    def on_result(self, trial_id, result):
        self.results += 1
        if self.results in self.at_results:
            self._swap()
        return super().on_result(trial_id, result)


SEED = 5


def assert_round_trip_continues_the_same_search(factory, **drive_args):
    """Uninterrupted vs swapped at several points: same trials, configurations and decisions."""
    plain = drive(factory(seed=SEED), curve, **drive_args)
    total = len(plain.decisions)
    for at_results, after_groups in [((1,), False), ((total // 3, 2 * total // 3), False), ((), True)]:
        resuming = Resuming(factory, at_results, after_groups)
        resumed = drive(resuming, curve, **drive_args)
        assert resuming.swaps >= max(1, len(at_results))
        assert resumed.decisions == plain.decisions
        assert {t: r.config for t, r in resumed.trials.items()} == {t: r.config for t, r in plain.trials.items()}


# --------------------------------------------------------------------------------------------------------
# ASHA
# --------------------------------------------------------------------------------------------------------


def test_asha_milestones_and_budgets_follow_ray():
    assert asha_milestones(1, 100, 4, 0) == [64, 16, 4, 1]
    assert asha_milestones(1, 100, 4, 1) == [64, 16, 4]
    assert asha_milestones(1, 81, 3, 0) == [81, 27, 9, 3, 1]
    assert asha_milestones(10, 5, 3, 0) == []


@pytest.mark.parametrize("seed", range(4))
def test_rung_cutoff_equals_numpys_nanpercentile_bit_for_bit(seed):
    """The sorted-rung cutoff is Ray's np.nanpercentile, including NaN, infinities, ties and one value."""
    rng = random.Random(seed)
    specials = [math.nan, math.inf, -math.inf, 0.0, 1.0, -1.0, 0.1, 0.2]
    for _ in range(500):
        size = rng.randint(1, 15)
        values = [rng.choice(specials) if rng.random() < 0.3 else rng.gauss(0.0, 1e3) for _ in range(size)]
        rewards = Rewards({f"t{i}": v for i, v in enumerate(values)})
        for rf in (1.5, 2, 3, 4, 7, 1e9):
            q = (1 - 1 / rf) * 100
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN rung
                expected = float(np.nanpercentile(values, q))
            got = rewards.nanpercentile(q)
            assert (math.isnan(expected) and math.isnan(got)) or got == expected, (values, rf, got, expected)


def test_rewards_keep_their_sorted_values_when_a_trial_is_recorded_again():
    rewards = Rewards({"a": 3.0, "b": math.nan, "c": 1.0})
    rewards["a"] = 0.5
    rewards["b"] = 2.0
    assert rewards == {"a": 0.5, "b": 2.0, "c": 1.0}
    assert rewards.nanpercentile(100) == 2.0 and rewards.nanpercentile(0) == 0.5
    assert Rewards().nanpercentile(50) != Rewards().nanpercentile(50)  # NaN on an empty rung


def test_asha_end_to_end_pauses_at_milestones_promotes_and_stops_without_overshoot():
    searcher = ASHA(SPACE, 40, "score", "max", max_t=27, grace_period=1, reduction_factor=3, seed=1)
    recorder = Recorder(searcher)
    result = drive(recorder, curve, max_iterations=100, parallel=4, seed=1)
    first = recorder.groups[0]
    assert len(first.configs) == 40 and first.budget == 1 and not first.trial_ids  # one batch of fresh samples
    promoted: dict[str, list[float]] = {}
    for group in recorder.groups[1:]:
        assert not group.configs and group.budget in (3, 9, 27)
        for trial_id in group.trial_ids:
            promoted.setdefault(trial_id, []).append(group.budget)
    for budgets in promoted.values():
        assert budgets == [3, 9, 27][: len(budgets)]  # each milestone once, in order
    finals = Counter(trial.iteration for trial in result.trials.values())
    assert set(finals) <= {1, 3, 9, 27} and finals[27] >= 1 and finals[1] >= 20
    for trial_id, trial in result.trials.items():
        # No overshoot: a trial stops exactly at the milestone where it was stopped (or at max_t).
        budgets = [1, *promoted.get(trial_id, [])]
        assert trial.iteration == budgets[-1] and trial.end_reason == "stopped" and trial.restarts == 0
    stops = [(tid, it) for tid, it, d in result.decisions if d == Decision.STOP]
    assert len(stops) == 40 and all(it in (1, 3, 9, 27) for _, it in stops)
    assert result.total_iterations == sum(trial.iteration for trial in result.trials.values())
    assert searcher.is_finished()


def test_asha_max_concurrent_limits_live_trials_and_creates_all_samples():
    recorder = Recorder(ASHA(SPACE, 25, "score", "min", max_t=9, reduction_factor=3, max_concurrent=3, seed=2))
    result = drive(recorder, curve, max_iterations=100, parallel=2, seed=2)
    assert len(result.trials) == 25 and recorder.max_live <= 3
    assert all(len(group.configs) <= 3 for group in recorder.groups)
    assert recorder.inner.is_finished()


def test_asha_without_stop_last_trials_lets_survivors_run_to_the_end():
    recorder = Recorder(ASHA(SPACE, 20, "score", "max", max_t=9, reduction_factor=3, stop_last_trials=False,
                             seed=3))
    result = drive(recorder, curve, max_iterations=15, parallel=4, seed=3)
    assert any(group.budget is None for group in recorder.groups)
    finals = Counter(trial.iteration for trial in result.trials.values())
    assert set(finals) <= {1, 3, 9, 15} and finals[15] >= 1
    assert all(t.end_reason == "completed" for t in result.trials.values() if t.iteration == 15)


def test_asha_several_brackets_start_at_their_own_first_milestone():
    recorder = Recorder(ASHA(SPACE, 60, "score", "max", max_t=27, reduction_factor=3, brackets=3, seed=4))
    result = drive(recorder, curve, max_iterations=100, parallel=4, seed=4)
    first_budgets = {group.budget for group in recorder.groups if group.configs}
    assert first_budgets == {1, 3, 9}
    assert len(result.trials) == 60 and recorder.inner.is_finished()


def test_asha_grid_space_gives_num_samples_per_grid_point():
    space = {"opt": sp.grid_search(["sgd", "adam", "lamb"]), "a": sp.uniform(0, 1), "b": 0.5}
    result = drive(ASHA(space, 4, "score", "max", max_t=9, reduction_factor=3, seed=0), curve, max_iterations=20)
    assert Counter(t.config["opt"] for t in result.trials.values()) == {"sgd": 4, "adam": 4, "lamb": 4}


def test_asha_result_without_the_metric_continues_and_is_still_promoted():
    searcher = ASHA(SPACE, 2, "score", "max", max_t=16, grace_period=1, reduction_factor=4, seed=0)
    group = searcher.next_groups()[0]
    for i, config in enumerate(group.configs):
        searcher.on_trial_add(f"t{i}", group.group_id, config)
    assert searcher.on_result("t0", {"training_iteration": 1}) == Decision.CONTINUE  # no metric: as Ray
    assert searcher.on_result("t1", {"training_iteration": 1, "score": None}) == Decision.CONTINUE
    promotions = searcher.next_groups()
    assert [(g.budget, sorted(g.trial_ids)) for g in promotions] == [(4, ["t0", "t1"])]
    assert searcher.on_result("t0", {"training_iteration": 16, "score": 1.0}) == Decision.STOP  # max_t
    searcher.on_trial_complete("t0", {"training_iteration": 16, "score": 1.0})
    assert not searcher.is_finished()  # t1 still runs
    searcher.on_trial_complete("t1", None, error=True)
    assert searcher.is_finished()


@pytest.mark.parametrize("make", [
    lambda: ASHA(SPACE, 2, "score", "max", max_t=16, grace_period=1, reduction_factor=4, seed=0),
    lambda: HyperBand(SPACE, 2, "score", "max", max_t=16, reduction_factor=4, seed=0),
])
def test_a_searcher_proposes_no_new_trial_once_its_configurations_are_drawn(make):
    """``proposes_new``: False once every configuration is drawn, while its trials still run and may be promoted
    (``is_finished`` stays False): the executor then holds pauses for a device that would idle (h173)."""
    searcher = make()
    assert searcher.proposes_new()
    while searcher.proposes_new():
        groups = [g for g in searcher.next_groups() if not g.trial_ids]
        for group in groups:
            for i, config in enumerate(group.configs):
                searcher.on_trial_add(f"{group.group_id}_{i}", group.group_id, config)
        assert groups, "it said it proposes new trials, and proposed none"
    assert not searcher.is_finished()
    assert BaseSearcher.proposes_new(searcher) != searcher.proposes_new()  # (the default waits for the end)


def test_asha_trials_that_end_early_do_not_block_the_run():
    result = drive(ASHA(SPACE, 30, "score", "max", max_t=27, reduction_factor=3, seed=6), curve,
                   max_iterations=5, parallel=4)
    assert {t.iteration for t in result.trials.values()} <= {1, 3, 5}
    assert all(t.restarts == 0 for t in result.trials.values())


def _asha(seed, **extra):
    return ASHA(SPACE, 30, "score", "max", max_t=27, reduction_factor=3, brackets=2, seed=seed, **extra)


def test_asha_state_round_trip_continues_the_same_search():
    assert_round_trip_continues_the_same_search(_asha, max_iterations=100, parallel=4, seed=7)
    assert_round_trip_continues_the_same_search(lambda seed: _asha(seed, max_concurrent=4), max_iterations=100,
                                                parallel=3, seed=8)


# --------------------------------------------------------------------------------------------------------
# HyperBand
# --------------------------------------------------------------------------------------------------------


def test_hyperband_schedule_is_rays_for_the_default_81_3():
    assert hyperband_schedule(81, 3) == [
        (0, [(5, 81)]),
        (1, [(8, 27), (3, 81)]),
        (2, [(15, 9), (5, 27), (2, 81)]),
        (3, [(34, 3), (12, 9), (4, 27), (2, 81)]),
        (4, [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)]),
    ]


def _expected_finals(max_t, eta, bands=1):
    """Where each trial of full bands ends: n_k - n_{k+1} at r_k, and the n_s survivors at r_s."""
    expected = Counter()
    for _, rungs in hyperband_schedule(max_t, eta):
        for (n, r), (n_next, _) in zip(rungs[:-1], rungs[1:], strict=True):
            expected[r] += (n - n_next) * bands
        expected[rungs[-1][1]] += rungs[-1][0] * bands
    return expected


@pytest.mark.parametrize("mode", ["max", "min"])
def test_hyperband_runs_each_rung_as_one_group_and_halves_synchronously(mode):
    max_t, eta = 27, 3
    schedule = dict(hyperband_schedule(max_t, eta))
    num_samples = sum(rungs[0][0] for rungs in schedule.values())
    recorder = Recorder(HyperBand(SPACE, num_samples, "score", mode, max_t=max_t, reduction_factor=eta, seed=9))
    result = drive(recorder, curve, max_iterations=100, parallel=6, seed=9)
    sizes = {}
    for group in recorder.groups:
        bracket, rung = (int(part[1:]) for part in group.group_id.split("-")[1:])
        sizes[bracket, rung] = (len(group.configs) + len(group.trial_ids), group.budget)
        assert bool(group.configs) == (rung == 0)
    brackets = recorder.inner.bracket_summary()
    for index, bracket in enumerate(brackets):
        assert [sizes[index, k] for k in range(len(bracket["schedule"]))] == [tuple(r) for r in bracket["schedule"]]
    assert [b["s"] for b in brackets] == [0, 1, 2, 3]  # Ray's order: s = 0 first
    assert Counter(t.iteration for t in result.trials.values()) == _expected_finals(max_t, eta)
    assert all(t.restarts == 0 and t.end_reason == "stopped" for t in result.trials.values())
    # The survivors of each rung are its best trials at the rung's budget.
    sign = 1 if mode == "max" else -1
    for index, bracket in enumerate(brackets):
        for (_, r), (n_next, _) in zip(bracket["schedule"][:-1], bracket["schedule"][1:], strict=True):
            prefix = f"hyperband-b{index}-"
            reached = [t for t in result.trials.values() if t.group_id.startswith(prefix) and t.iteration >= r]
            ranked = sorted(reached, key=lambda t: sign * t.history[r - 1]["score"], reverse=True)
            assert {t.trial_id for t in ranked[:n_next]} == {t.trial_id for t in reached if t.iteration > r}
    assert recorder.inner.is_finished()


def test_hyperband_partial_bracket_halves_its_actual_size():
    """num_samples ends inside a bracket of 4 trials: its rungs keep c_{k+1} = min(n_{k+1}, ceil(c_k / eta)),
    i.e. 2 then 1. Ray would keep its nominal n_1 = 3 of the 4 (docs/searchers.md, "Differences")."""
    recorder = Recorder(HyperBand(SPACE, 3 + 5 + 4, "score", "max", max_t=9, reduction_factor=3, seed=10))
    drive(recorder, curve, max_iterations=100, parallel=4, seed=10)
    last = recorder.inner.bracket_summary()[-1]
    assert last["s"] == 2 and last["schedule"] == [(9, 1), (3, 3), (1, 9)]
    sizes = [len(g.configs) + len(g.trial_ids) for g in recorder.groups if g.group_id.startswith("hyperband-b2-")]
    assert sizes == [4, 2, 1]


def test_hyperband_full_bracket_keeps_rays_nominal_sizes_when_trials_fail():
    """Bracket s=3 of 81/3 is (34, 3) (12, 9) (4, 27) (2, 81). 28 of its 34 trials fail in rung 0: all 6 left go
    on (n_1 = 12), and rung 1 still keeps Ray's n_2 = 4 of those 6, not a third of them."""
    searcher = HyperBand(SPACE, 5 + 8 + 15 + 34, "score", "max", max_t=81, reduction_factor=3, seed=0)
    groups = searcher.next_groups()
    bracket = groups[3]
    assert bracket.budget == 3 and len(bracket.configs) == 34
    for i, config in enumerate(bracket.configs):
        searcher.on_trial_add(f"t{i}", bracket.group_id, config)
    for i in range(6, 34):
        searcher.on_trial_complete(f"t{i}", None, error=True)
    for i in range(6):
        assert searcher.on_result(f"t{i}", {"training_iteration": 3, "score": float(i)}) == Decision.CONTINUE
    (rung1,) = searcher.next_groups()
    assert rung1.budget == 9 and sorted(rung1.trial_ids) == [f"t{i}" for i in range(6)]
    decisions = [searcher.on_result(f"t{i}", {"training_iteration": 9, "score": float(i)}) for i in range(6)]
    assert decisions[-1] == Decision.CONTINUE and sorted(searcher.collect_stops()) == ["t0", "t1"]
    (rung2,) = searcher.next_groups()
    assert rung2.budget == 27 and sorted(rung2.trial_ids) == ["t2", "t3", "t4", "t5"]


def test_a_rung_with_fewer_trials_left_than_it_keeps_promotes_them_all():
    """Bracket s=1 of 81/3 is (8, 27) (3, 81): 6 of its 8 trials fail before the rung, which keeps 3. Both left go
    on, as Ray's sorted(...)[-3:] keeps them; the slice ranked[len - keep:] was ranked[-1:] then, and stopped one."""
    searcher = HyperBand(SPACE, 5 + 8, "score", "max", max_t=81, reduction_factor=3, seed=0)
    bracket = searcher.next_groups()[1]
    assert bracket.budget == 27 and len(bracket.configs) == 8
    for i, config in enumerate(bracket.configs):
        searcher.on_trial_add(f"t{i}", bracket.group_id, config)
    for i in range(2, 8):
        searcher.on_trial_complete(f"t{i}", None, error=True)
    decisions = [searcher.on_result(f"t{i}", {"training_iteration": 27, "score": float(i)}) for i in range(2)]
    assert decisions == [Decision.CONTINUE] * 2 and searcher.collect_stops() == []
    (rung1,) = searcher.next_groups()
    assert rung1.budget == 81 and sorted(rung1.trial_ids) == ["t0", "t1"]


def test_rays_rule_keeps_the_nominal_size_of_a_partly_filled_bracket():
    """The Tune front end's HyperBand (halve_partial_brackets=False) ends each trial where Ray's HyperBandScheduler
    does on Ray's hyperband_function_example with a 20-point grid of heights (max_t=200; trials return at 100):
    the last bracket, s=2, got 5 of its 18 trials and promotes them all at 22 (n_1 = 6), then 2 at 66. The ends are
    those Ray 2.60 gave (side by side, twice); halving the real size stopped 30, 50, 70 at 22 and 80 at 66."""
    from fluidsalus import tune
    from fluidsalus.tune._translate import plan

    heights = [5, 55, 15, 95, 35, 75, 25, 85, 45, 65, 10, 60, 20, 90, 40, 70, 30, 80, 50, 99]
    searcher = plan(tune.TuneConfig(metric="m", mode="max", scheduler=tune.schedulers.HyperBandScheduler(max_t=200)),
                    {"h": tune.grid_search(heights)}).searcher
    assert isinstance(searcher, HyperBand) and not searcher.halve_partial_brackets
    ends = {t.config["h"]: t.iteration for t in drive(searcher, lambda c, it: c["h"], metric="m",
                                                      max_iterations=100).trials.values()}
    assert [h for h in heights if ends[h] == 66] == [25, 45, 10, 60, 20, 40, 70, 30, 50]
    assert all(ends[h] == 100 for h in heights if h not in (25, 45, 10, 60, 20, 40, 70, 30, 50))
    # A native user asks for Ray's rule with an argument (it was an attribute only): the same ends
    native = HyperBand({"h": sp.grid_search(heights)}, 1, "m", "max", max_t=200, halve_partial_brackets=False)
    assert {t.config["h"]: t.iteration for t in drive(native, lambda c, it: c["h"], metric="m",
                                                      max_iterations=100).trials.values()} == ends
    with pytest.raises(ConfigError, match="halve_partial_brackets"):
        HyperBand(SPACE, 4, "score", "max", halve_partial_brackets="no")


def test_hyperband_one_bracket_at_a_time():
    recorder = Recorder(HyperBand(SPACE, 40, "score", "max", max_t=9, reduction_factor=3, max_concurrent_brackets=1,
                                  seed=11))
    result = drive(recorder, curve, max_iterations=100, parallel=8, seed=11)
    bracket_of = {tid: int(t.group_id.split("-")[1][1:]) for tid, t in result.trials.items()}
    order = [bracket_of[tid] for tid, _, _ in result.decisions]
    assert order == sorted(order)  # bracket i+1 reports only after bracket i is over
    assert len(result.trials) == 40


def test_hyperband_trials_that_end_before_their_budget_leave_the_rung():
    recorder = Recorder(HyperBand(SPACE, 30, "score", "max", max_t=27, reduction_factor=3, seed=12))
    result = drive(recorder, curve, max_iterations=5, parallel=4, seed=12)
    assert {t.iteration for t in result.trials.values()} <= {1, 3, 5}
    assert recorder.inner.is_finished() and all(t.restarts == 0 for t in result.trials.values())


def test_hyperband_without_stop_last_trials_runs_the_last_rung_to_the_end():
    recorder = Recorder(HyperBand(SPACE, 17, "score", "max", max_t=9, reduction_factor=3, stop_last_trials=False,
                                  seed=13))
    result = drive(recorder, curve, max_iterations=12, parallel=4, seed=13)
    survivors = [t for t in result.trials.values() if t.iteration == 12]
    assert len(survivors) == 3 + 2 + 1 and all(t.end_reason == "completed" for t in survivors)


def _hyperband(seed):
    return HyperBand(SPACE, 40, "score", "min", max_t=27, reduction_factor=3, max_concurrent_brackets=2, seed=seed)


def test_hyperband_state_round_trip_continues_the_same_search():
    assert_round_trip_continues_the_same_search(_hyperband, max_iterations=100, parallel=5, seed=14)


# --------------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"reduction_factor": 1}, "ASHA: reduction_factor must be > 1 (got 1)"),
    ({"reduction_factor": 0.5}, "ASHA: reduction_factor must be > 1 (got 0.5)"),
    ({"grace_period": 200}, "ASHA: grace_period must be > 0 and <= max_t (100) (got 200)"),
    ({"grace_period": 0}, "ASHA: grace_period must be > 0 and <= max_t (100) (got 0)"),
    ({"grace_period": -1}, "ASHA: grace_period must be > 0"),
    ({"max_t": 0}, "ASHA: max_t must be > 0 (got 0)"),
    ({"max_t": -5}, "ASHA: max_t must be > 0 (got -5)"),
    ({"max_t": float("inf")}, "ASHA: max_t must be a finite number > 0"),
    ({"brackets": 0}, "ASHA: brackets must be >= 1 (got 0)"),
    ({"brackets": 1.5}, "ASHA: brackets must be an int >= 1 (got 1.5)"),
    ({"mode": "median"}, "ASHA: mode must be 'min' or 'max' (got 'median')"),
    ({"metric": ""}, "ASHA: metric must be a non-empty string"),
    ({"time_attr": None}, "ASHA: time_attr must be a non-empty string"),
    ({"num_samples": 0}, "ASHA: num_samples must be >= 1 (got 0)"),
    ({"seed": -1}, "ASHA: seed must be None or an int >= 0 (got -1)"),
    ({"max_concurrent": 0}, "ASHA: max_concurrent must be >= 1 (got 0)"),
    ({"stop_last_trials": "yes"}, "ASHA: stop_last_trials must be True or False"),
    ({"space": {}}, "ASHA: space: the search space is empty"),
    ({"space": [1, 2]}, "ASHA: space: the search space must be a dict"),
])
def test_asha_rejects_impossible_parameters(kwargs, message):
    args = {"space": SPACE, "num_samples": 4, "metric": "score", "mode": "max", **kwargs}
    with pytest.raises(ConfigError) as info:
        ASHA(**args)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("kwargs, message", [
    ({"reduction_factor": 1}, "HyperBand: reduction_factor must be > 1 (got 1)"),
    ({"max_t": 0}, "HyperBand: max_t must be >= 1"),
    ({"max_t": 0.5}, "HyperBand: max_t must be >= 1 (budgets are truncated to ints, as in Ray) (got 0.5)"),
    ({"mode": "MAX"}, "HyperBand: mode must be 'min' or 'max' (got 'MAX')"),
    ({"num_samples": -3}, "HyperBand: num_samples must be >= 1 (got -3)"),
    ({"max_concurrent_brackets": 0}, "HyperBand: max_concurrent_brackets must be >= 1 (got 0)"),
    ({"space": {}}, "HyperBand: space: the search space is empty"),
])
def test_hyperband_rejects_impossible_parameters(kwargs, message):
    args = {"space": SPACE, "num_samples": 4, "metric": "score", "mode": "max", **kwargs}
    with pytest.raises(ConfigError) as info:
        HyperBand(**args)
    assert str(info.value).startswith(message)
