"""Differential tests: our ASHA / HyperBand against the installed Ray Tune schedulers and Optuna pruners.

The same seeded sequences of results are fed to ours and to the reference, and the decisions compared.
Ray's schedulers are driven through their public hooks with light fake trial objects (ASHA only reads
``trial.trial_id``; HyperBand also ``status`` and ``is_saving`` and calls back ``stop_trial``); Ray is never
started. Optuna runs a real in-memory study.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import optuna
import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers.async_hyperband import AsyncHyperBandScheduler
from ray.tune.schedulers.hb_bohb import HyperBandForBOHB
from ray.tune.schedulers.hyperband import HyperBandScheduler
from ray.tune.schedulers.trial_scheduler import TrialScheduler

from fluidsalus import space as sp
from fluidsalus.searchers._asha import ASHA, asha_bracket_rng, asha_milestones
from fluidsalus.searchers._base import Decision
from fluidsalus.searchers._bohb import BOHB, SyncBOHB
from fluidsalus.searchers._hyperband import HyperBand, hyperband_schedule
from fluidsalus.testing import drive

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {"a": sp.uniform(0.0, 1.0), "b": sp.uniform(0.0, 1.0)}
RAY_DECISION = {Decision.STOP: TrialScheduler.STOP, Decision.CONTINUE: TrialScheduler.CONTINUE}
#: Results between two comparisons of ``debug_string()`` with Ray's (each costs Ray a percentile per rung).
DEBUG_STRING_EVERY = 50


def curve(config, iteration):
    """Learning curves that cross: level ``a``, speed ``b``, plus deterministic noise."""
    noise = random.Random(hash((config["a"], config["b"], iteration))).random()
    return config["a"] * (1.0 - math.exp(-iteration * config["b"])) + 0.05 * noise


class _FakeTrial:
    """What Ray's schedulers read from a trial (and HyperBand's status bookkeeping)."""

    def __init__(self, trial_id, config=None):
        self.trial_id, self.config = trial_id, config
        self.status, self.is_saving = Trial.PENDING, False
        self.iteration, self.last_result = 0, None

    def __repr__(self):
        return self.trial_id


# --------------------------------------------------------------------------------------------------------
# ASHA vs Ray's AsyncHyperBandScheduler
# --------------------------------------------------------------------------------------------------------


def _replay_on_ray_asha(searcher, result, ray_kwargs, max_iterations):
    """Feed the results of a drive() run, in their order, to Ray's scheduler; return Ray's decisions."""
    ray = AsyncHyperBandScheduler(metric="score", mode=searcher.mode, **ray_kwargs)
    fakes = {}
    for trial_id in sorted(result.trials, key=searcher.creation_index):
        fakes[trial_id] = _FakeTrial(trial_id)
        # Ray draws the bracket from NumPy's global generator: give it the state our draw used.
        np.random.set_state(asha_bracket_rng(searcher.seed, searcher.creation_index(trial_id)).get_state())
        ray.on_trial_add(None, fakes[trial_id])
    decisions = []
    for trial_id, iteration, _ in result.decisions:
        reported = result.trials[trial_id].history[iteration - 1]
        decision = ray.on_trial_result(None, fakes[trial_id], reported)
        decisions.append(decision)
        if decision == TrialScheduler.STOP or iteration >= max_iterations:
            ray.on_trial_complete(None, fakes[trial_id], reported)  # what Ray's stop_trial does
    return decisions


def _random_asha_setting(rng):
    return {
        "max_t": rng.choice([8, 20, 30, 64]),
        "grace_period": rng.choice([1, 2, 3]),
        "reduction_factor": rng.choice([2, 3, 4, 2.5]),
        "brackets": rng.choice([1, 1, 2, 3]),
        "stop_last_trials": rng.random() < 0.7,
    }


@pytest.mark.parametrize("mode", ["max", "min"])
def test_asha_decisions_equal_rays_async_hyperband_over_random_curves(mode):
    checked = Counter()
    for seed in range(25):
        rng = random.Random(seed)
        setting = _random_asha_setting(rng)
        searcher = ASHA(SPACE, rng.choice([10, 30]), "score", mode, seed=seed, **setting)
        max_iterations = rng.choice([25, 70])
        result = drive(searcher, curve, max_iterations=max_iterations, parallel=rng.choice([1, 3, 8]), seed=seed)
        ours = [RAY_DECISION[d] for _, _, d in result.decisions]
        assert ours == _replay_on_ray_asha(searcher, result, setting, max_iterations), (seed, setting)
        checked.update(ours)
    assert checked[TrialScheduler.STOP] > 150 and checked[TrialScheduler.CONTINUE] > 1000


@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_asha_decisions_equal_rays_with_jumps_missing_metrics_and_nan():
    """Direct feeding, no driver: float progress that jumps over milestones, results without the metric,
    NaN values and trials that end early (on_trial_complete records their last result, as in Ray)."""
    mismatches = total = 0
    for seed in range(40):
        rng = random.Random(1000 + seed)
        setting = _random_asha_setting(rng)
        ours = ASHA(SPACE, 12, "loss", "min", time_attr="t", seed=seed, **setting)
        ray = AsyncHyperBandScheduler(time_attr="t", metric="loss", mode="min", **setting)
        added = []
        for group in ours.next_groups():
            for config in group.configs:
                added.append((f"trial{len(added)}", group.group_id, config))
        for trial_id, group_id, config in sorted(added, key=lambda item: int(item[0][5:])):
            ours.on_trial_add(trial_id, group_id, config)
        fakes = {}
        for trial_id in sorted((a[0] for a in added), key=ours.creation_index):
            fakes[trial_id] = _FakeTrial(trial_id)
            np.random.set_state(asha_bracket_rng(ours.seed, ours.creation_index(trial_id)).get_state())
            ray.on_trial_add(None, fakes[trial_id])
        progress = dict.fromkeys(fakes, 0.0)
        live = list(fakes)
        while live:
            trial_id = rng.choice(live)
            progress[trial_id] += rng.choice([0.5, 1.0, 1.0, 2.0, 7.3])
            result = {"t": progress[trial_id]}
            draw = rng.random()
            if draw < 0.9:
                result["loss"] = float("nan") if draw < 0.05 else rng.random()
            ours_decision = RAY_DECISION[ours.on_result(trial_id, result)]
            ours.next_groups()  # promotions go out as they would in the executor
            ray_decision = ray.on_trial_result(None, fakes[trial_id], result)
            total += 1
            if total % DEBUG_STRING_EVERY == 0:  # (the status report's lines: the same rungs and cutoffs)
                assert ours.debug_string() == ray.debug_string(), (seed, setting)
            mismatches += ours_decision != ray_decision
            ends = rng.random() < 0.03 or progress[trial_id] > 80
            if ray_decision == TrialScheduler.STOP or ends:
                ours.on_trial_complete(trial_id, result)
                ray.on_trial_complete(None, fakes[trial_id], result)
                live.remove(trial_id)
        assert ours.debug_string() == ray.debug_string(), (seed, setting)
    assert total > 2000 and mismatches == 0


def test_asha_milestones_are_rays():
    for grace, max_t, rf in [(1, 100, 4), (1, 81, 3), (2, 30, 2.5), (1, 16, 4), (3, 3, 2), (0.5, 7.5, 3)]:
        for s in range(3):
            bracket = AsyncHyperBandScheduler(metric="m", mode="max", max_t=max_t, grace_period=grace,
                                              reduction_factor=rf, brackets=s + 1)._brackets[s]
            assert asha_milestones(grace, max_t, rf, s) == [m for m, _ in bracket._rungs]


def test_async_bohb_makes_rays_asha_decisions():
    """BOHB only changes which configurations are tried: its stop/continue decisions are Ray's ASHA's."""
    for seed in range(6):
        setting = {"max_t": 27, "grace_period": 1, "reduction_factor": 3, "brackets": 1, "stop_last_trials": True}
        searcher = BOHB(SPACE, 40, "score", "max", max_concurrent=4, seed=seed, **setting)
        result = drive(searcher, curve, max_iterations=40, parallel=4, seed=seed)
        ours = [RAY_DECISION[d] for _, _, d in result.decisions]
        assert ours == _replay_on_ray_asha(searcher, result, setting, 40)
        assert searcher.proposals_from_model > 0


# --------------------------------------------------------------------------------------------------------
# HyperBand vs Ray's HyperBandScheduler
# --------------------------------------------------------------------------------------------------------


class _FakeController:
    """The part of Ray's TuneController that HyperBandScheduler calls back: ``stop_trial``."""

    def __init__(self, scheduler):
        self.scheduler = scheduler

    def stop_trial(self, trial):
        if trial.status in (Trial.TERMINATED, Trial.ERROR):
            return
        if trial.status in (Trial.PENDING, Trial.PAUSED):
            self.scheduler.on_trial_remove(self, trial)
        else:
            self.scheduler.on_trial_complete(self, trial, trial.last_result)
        trial.status = Trial.TERMINATED


def _run_ray_hyperband(configs, max_t, eta, slots, seed, max_iterations=1000, ended=None):
    """A minimal TuneController loop around HyperBandScheduler: ``slots`` trials at a time, results in a
    seeded random order, PAUSE/STOP/CONTINUE carried out as Ray does. Returns each trial's last iteration
    (``ended``, a list: the scheduler and its trials are appended to it at the end)."""
    scheduler = HyperBandScheduler(metric="score", mode="max", max_t=max_t, reduction_factor=eta)
    controller, rng = _FakeController(scheduler), random.Random(seed)
    trials = [_FakeTrial(f"t{i:05d}", config) for i, config in enumerate(configs)]
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
    running = []
    while True:
        while len(running) < slots:
            trial = scheduler.choose_trial_to_run(controller)
            if trial is None:
                break
            trial.status = Trial.RUNNING
            running.append(trial)
        if not running:
            if ended is not None:
                ended += [scheduler, trials]
            return {t.trial_id: t.iteration for t in trials}
        trial = rng.choice(running)
        trial.iteration += 1
        trial.last_result = {"score": curve(trial.config, trial.iteration), "training_iteration": trial.iteration}
        decision = scheduler.on_trial_result(controller, trial, trial.last_result)
        if decision == TrialScheduler.STOP or trial.iteration >= max_iterations:
            controller.stop_trial(trial)
            running.remove(trial)
        elif decision == TrialScheduler.PAUSE:
            trial.status = Trial.PAUSED
            running.remove(trial)


def _band_size(max_t, eta):
    return sum(rungs[0][0] for _, rungs in hyperband_schedule(max_t, eta))


@pytest.mark.filterwarnings("ignore")
def test_hyperband_outcomes_equal_rays_hyperband_scheduler_over_random_curves():
    """Full bands: every trial runs exactly as far under ours as under Ray's scheduler (which trials are
    stopped at which rung, and which reach max_t), whatever the interleaving."""
    settings = [(2, 8), (3, 9), (3, 27), (2, 16), (3, 10), (4, 16), (2.5, 12), (3, 81)]
    trials_seen = 0
    for seed in range(24):
        rng = random.Random(seed)
        eta, max_t = settings[seed % len(settings)]
        num_samples = _band_size(max_t, eta) * (1 if max_t == 81 else rng.choice([1, 2]))
        searcher = HyperBand(SPACE, num_samples, "score", "max", max_t=max_t, reduction_factor=eta, seed=seed)
        result = drive(searcher, curve, max_iterations=1000, parallel=rng.choice([1, 4, 16]), seed=seed)
        ours = {trial_id: trial.iteration for trial_id, trial in result.trials.items()}
        # Trial ids follow group order, which is Ray's bracket-filling order.
        configs = [result.trials[trial_id].config for trial_id in sorted(result.trials)]
        ended = []
        assert ours == _run_ray_hyperband(configs, max_t, eta, rng.choice([1, 3]), seed, ended=ended), (eta, max_t)
        # (the status report's lines at the end: the same brackets, halvings and trials, as Ray's debug_string)
        scheduler, ray_trials = ended
        assert searcher.debug_string({t.trial_id: t.status for t in ray_trials}) == scheduler.debug_string()
        trials_seen += len(ours)
    assert trials_seen > 1000


def test_hyperband_debug_string_equals_rays_in_the_middle_of_a_band():
    """The status report's scheduler lines (Ray's ``HyperBandScheduler.debug_string()``, which the reporter prints)
    from HyperBand's own state, fed the same results as Ray's scheduler: the halvings' stopped count, each
    bracket's size, budget, share of its work done (Ray's formula) and its trials by status, mid-band."""
    ours = HyperBand(SPACE, 17, "score", "max", max_t=9, reduction_factor=3, seed=0)
    ray = HyperBandScheduler(metric="score", mode="max", max_t=9, reduction_factor=3)
    controller, fakes = _FakeController(ray), {}
    for group in ours.next_groups():  # (brackets s=0: 3 trials, s=1: 5, s=2: 9, in Ray's order)
        for config in group.configs:
            trial_id = f"t{len(fakes):02d}"
            ours.on_trial_add(trial_id, group.group_id, config)
            fakes[trial_id] = _FakeTrial(trial_id, config)
            fakes[trial_id].status = Trial.RUNNING
            ray.on_trial_add(controller, fakes[trial_id])

    def report(trial_id, iteration, score):
        result = {"score": score, "training_iteration": iteration}
        ours.on_result(trial_id, result)
        fakes[trial_id].last_result = result
        decision = ray.on_trial_result(controller, fakes[trial_id], result)
        if decision == TrialScheduler.STOP:
            controller.stop_trial(fakes[trial_id])
            ours.on_trial_complete(trial_id, result)
        elif decision == TrialScheduler.PAUSE:
            fakes[trial_id].status = Trial.PAUSED

    assert ours.debug_string() == ray.debug_string() == "Using HyperBand: num_stopped=0 total_brackets=3\nRound #0:" \
        + "".join(f"\n  Bracket(Max Size (n)={n}, Milestone (r)={r}, completed=0.0%): {{RUNNING: {n}}} "
                  for n, r in ((3, 9), (5, 3), (9, 1)))
    # (trials the run has made and the reporter has not seen yet are PENDING, as Ray's every trial made)
    assert "  Bracket(Max Size (n)=3, Milestone (r)=9, completed=0.0%): {PENDING: 3} " in ours.debug_string({})
    for i in range(8, 17):  # the s=2 bracket's first rung: 3 of 9 go on
        report(f"t{i:02d}", 1, i / 10)
    for iteration in range(1, 5):
        report("t00", iteration, 0.1 * iteration)
    report("t03", 1, 0.5)
    statuses = {trial_id: fake.status for trial_id, fake in fakes.items()}
    assert ours.debug_string(statuses) == ray.debug_string()
    assert ray.debug_string().splitlines()[0] == "Using HyperBand: num_stopped=6 total_brackets=3"
    assert "completed=34.6%): {PAUSED: 2, RUNNING: 1, TERMINATED: 6} " in ray.debug_string()


def _ray_bracket_assignment(scheduler_cls, count, max_t, eta, made=None):
    """Each trial's (band, s, n0, r0) in Ray's scheduler (``made``, a list: the scheduler is appended to it)."""
    scheduler = scheduler_cls(metric="score", mode="max", max_t=max_t, reduction_factor=eta)
    fakes = [_FakeTrial(f"t{i}") for i in range(count)]
    for fake in fakes:
        scheduler.on_trial_add(None, fake)
    if made is not None:
        made.append(scheduler)
    out = []
    for fake in fakes:
        bracket, band = scheduler._trial_info[fake]
        out.append((band, bracket._halves, bracket._n0, bracket._r0))
    return out


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("searcher_cls, ray_cls", [(HyperBand, HyperBandScheduler), (SyncBOHB, HyperBandForBOHB)])
@pytest.mark.parametrize("max_t, eta", [(81, 3), (100, 3), (16, 2), (27, 4), (10, 3), (12, 2.5), (1, 3), (200, 5)])
def test_bracket_sizes_and_assignment_equal_rays(searcher_cls, ray_cls, max_t, eta):
    """Which bracket (s, n0, r0) and band each new trial goes to, over a band and a half (partial last
    bracket included): HyperBand as Ray's HyperBandScheduler (s = 0 first), SyncBOHB as HyperBandForBOHB
    (largest bracket first)."""
    count = _band_size(max_t, eta) * 3 // 2 + 1
    extra = {"max_concurrent_brackets": None} if searcher_cls is SyncBOHB else {}
    searcher = searcher_cls(SPACE, count, "score", "max", max_t=max_t, reduction_factor=eta, seed=0, **extra)
    ours = []
    for group in searcher.next_groups():
        for i, config in enumerate(group.configs):
            searcher.on_trial_add(f"{group.group_id}-{i}", group.group_id, config)
    for bracket in searcher.bracket_summary():
        s, (n0, r0) = bracket["s"], bracket["schedule"][0]
        ours += [(bracket["band"], s, n0, r0)] * len(bracket["members"])
    made = []
    assert ours == _ray_bracket_assignment(ray_cls, count, max_t, eta, made)
    # (the status report's lines of those brackets, every trial pending: Ray's count of brackets, skipped ones too)
    assert searcher.debug_string({}) == made[0].debug_string()


# --------------------------------------------------------------------------------------------------------
# ASHA vs Optuna's SuccessiveHalvingPruner
# --------------------------------------------------------------------------------------------------------


def _ray_rule_stops(value, others, rf):
    """Ray's (and our) rule: stop when the value is below the (1 - 1/rf) percentile of the others."""
    return bool(others) and value < np.percentile(others, (1 - 1 / rf) * 100)


def _optuna_rule_prunes(value, others, rf):
    """Optuna's rule: prune unless the value is in the top max(1, n // rf) of the n values (itself included)."""
    competing = sorted([*others, value])
    keep = max(1, len(competing) // rf)
    return not value >= competing[-keep]


def test_asha_vs_optuna_successive_halving_pruner():
    """Same settings (min_resource = grace_period, reduction_factor, min_early_stopping_rate = 0, no max_t).

    Both decide only at the same rung steps, and record every trial that reaches a rung. They differ on
    purpose in the promotion rule at a rung (docs/searchers.md, "Differences"): we keep Ray's rule (continue
    when the value is at least the (1 - 1/rf) percentile of the values recorded before, interpolated),
    Optuna keeps the top floor(n / rf) of the n values including the trial's own. The test checks each side
    against its rule and that the decisions are equal whenever the rules agree.
    """
    counts = Counter()
    for seed in range(30):
        rng = random.Random(seed)
        rf, grace = rng.choice([2, 3, 4]), rng.choice([1, 2])
        ours = ASHA({"a": sp.uniform(0, 1)}, 24, "v", "max", max_t=10**6, grace_period=grace,
                    reduction_factor=rf, seed=seed)
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=grace, reduction_factor=rf,
                                                        min_early_stopping_rate=0)
        study = optuna.create_study(direction="maximize", pruner=pruner)
        trial_ids = []
        for group in ours.next_groups():
            for config in group.configs:
                trial_ids.append(f"t{len(trial_ids)}")
                ours.on_trial_add(trial_ids[-1], group.group_id, config)
        optuna_trials = {trial_id: study.ask() for trial_id in trial_ids}
        level = {trial_id: rng.random() for trial_id in trial_ids}
        milestones = {grace * rf**k for k in range(20)}
        recorded: dict[int, list[float]] = {}
        step = dict.fromkeys(trial_ids, 0)
        live = list(trial_ids)
        while live:
            trial_id = rng.choice(live)
            step[trial_id] += 1
            value = level[trial_id] + 0.3 * rng.random()
            stops = ours.on_result(trial_id, {"v": value, "training_iteration": step[trial_id]}) == Decision.STOP
            ours.next_groups()
            optuna_trial = optuna_trials[trial_id]
            optuna_trial.report(value, step[trial_id])
            prunes = optuna_trial.should_prune()
            if step[trial_id] in milestones:
                others = recorded.setdefault(step[trial_id], [])
                ray_rule, optuna_rule = _ray_rule_stops(value, others, rf), _optuna_rule_prunes(value, others, rf)
                assert stops == ray_rule and prunes == optuna_rule
                counts["rules agree" if ray_rule == optuna_rule else "rules differ"] += 1
                if len(others) <= 1 or value > max(others) or value < min(others):
                    assert stops == prunes  # the first two, the best and the worst: both rules agree
                others.append(value)
            else:
                assert not stops and not prunes  # neither acts between rungs
            if stops or prunes or step[trial_id] >= 40:
                live.remove(trial_id)
                ours.on_trial_complete(trial_id, {"v": value, "training_iteration": step[trial_id]})
                state = optuna.trial.TrialState.PRUNED if prunes else optuna.trial.TrialState.COMPLETE
                study.tell(optuna_trial, value if state == optuna.trial.TrialState.COMPLETE else None, state=state)
            counts["decisions"] += 1
    assert counts["decisions"] > 3000 and counts["rules agree"] > 500 and counts["rules differ"] > 10


def test_nan_at_a_rung_continues_under_ray_rules_but_optuna_prunes():
    """Documented difference: Ray (and we) record a NaN and let the trial continue; Optuna prunes it."""
    ours = ASHA({"a": sp.uniform(0, 1)}, 2, "v", "max", max_t=100, grace_period=1, reduction_factor=2, seed=0)
    group = ours.next_groups()[0]
    ours.on_trial_add("t0", group.group_id, group.configs[0])
    ours.on_trial_add("t1", group.group_id, group.configs[1])
    assert ours.on_result("t0", {"v": 1.0, "training_iteration": 1}) == Decision.CONTINUE
    assert ours.on_result("t1", {"v": float("nan"), "training_iteration": 1}) == Decision.CONTINUE
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2))
    trial = study.ask()
    trial.report(float("nan"), 1)
    assert trial.should_prune()


# --------------------------------------------------------------------------------------------------------
# HyperBand sizes vs Optuna's HyperbandPruner
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eta", [2, 3, 4])
@pytest.mark.parametrize("power", [1, 2, 3, 4])
def test_hyperband_sizes_equal_optunas_hyperband_pruner_when_max_t_is_a_power_of_eta(eta, power):
    """With max_resource = eta ** k and min_resource = 1 the two agree: bracket count, each bracket's trial
    allocation (Ray's n0) and first rung (Ray's r0). Optuna's bracket_id b is Ray's s = n_brackets - 1 - b."""
    max_t = eta**power
    pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_t, reduction_factor=eta)
    pruner._try_initialization(optuna.create_study())
    schedule = dict(hyperband_schedule(max_t, eta))
    assert pruner._n_brackets == len(schedule)
    for bracket_id in range(pruner._n_brackets):
        s = pruner._n_brackets - 1 - bracket_id
        n0, r0 = schedule[s][0]
        assert pruner._trial_allocation_budgets[bracket_id] == n0
        bracket_pruner = pruner._pruners[bracket_id]
        assert bracket_pruner._min_resource * eta**bracket_pruner._min_early_stopping_rate == r0


def test_hyperband_sizes_differ_from_optuna_on_purpose_elsewhere():
    """Documented differences (docs/searchers.md): we follow Ray, which rounds log_eta(max_t) where Optuna
    floors it (log_3 50 = 3.56: a band of 5 brackets for Ray, 4 for Optuna), and Ray's first budgets
    int(max_t * eta**-s) are not Optuna's min_resource * eta**b when max_t is not a power of eta."""
    pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=50, reduction_factor=3)
    pruner._try_initialization(optuna.create_study())
    schedule = dict(hyperband_schedule(50, 3))
    # Ray: a band of s_max + 1 = 5 brackets, of which s = 4 is skipped (int(50 / 81) == 0).
    assert sorted(schedule) == [0, 1, 2, 3]
    assert [schedule[s][0] for s in range(4)] == [(5, 50), (8, 16), (15, 5), (34, 1)]
    # Optuna: 4 brackets (bracket_id 0 is the most aggressive), other sizes and first rungs.
    assert pruner._n_brackets == 4
    assert pruner._trial_allocation_budgets == [27, 12, 6, 4]
    assert [p._min_resource * 3**p._min_early_stopping_rate for p in pruner._pruners] == [1, 3, 9, 27]
