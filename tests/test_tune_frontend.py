"""The Ray Tune-compatible front end (``fluidsalus.tune``).

- Signatures: tests/test_tune_signatures.py (kept apart so that this module, which device actors import to find
  its trainables, stays quick to import).
- Translation: our schedulers / search algorithms, and Ray's own objects, become the right fluidsalus
  searcher with the right parameters; unsupported pairs and bad input raise ConfigErrors naming the field.
- Runs on the shared 2-CPU Ray: with_parameters / with_resources, callbacks, stop rules (dict, callable,
  Stopper with stop_all, num_samples=-1 with a time budget), class Trainables, Tuner.restore / can_restore.
"""

from __future__ import annotations

import csv
import datetime
import glob
import json
import logging
import os
import re
import time
import warnings

import cloudpickle
import numpy as np
import optuna
import pytest
from _trials import SHARING_RESOURCES, LazyRayTune, StopAllAfter, pretend_ray_is, study_told

from fluidsalus import searchers
from fluidsalus import space as sp
from fluidsalus.errors import ConfigError, SpaceError, TrialError
from fluidsalus.store import DB_FILENAME, ExperimentStore
from fluidsalus.tune import Tuner
from fluidsalus.tune._trainable import (
    cpu_request,
    gpu_hint,
    make_entry,
    normalize_resources,
    probe_task_cpus,
    task_cpus,
)
from fluidsalus.tune._translate import MaxBudgetStop, plan
from fluidsalus.tune._tuner import TUNER_STATE_FILE

rt = LazyRayTune()  # imported at its first use, not by device processes
from fluidsalus import tune  # noqa: E402
from fluidsalus.testing.pbt import exploit_lines  # noqa: E402
from fluidsalus.testing.tune import RESUMABLE_STEPS, InterruptOnce, resumable  # noqa: E402


def test_fluidsalus_train_names_are_the_tune_objects_and_ray_train_itself_is_refused() -> None:
    from fluidsalus import train

    assert (train.RunConfig, train.CheckpointConfig, train.FailureConfig, train.Checkpoint, train.Result) == (
        tune.RunConfig, tune.CheckpointConfig, tune.FailureConfig, tune.Checkpoint, tune.Result)
    assert train.get_checkpoint is tune.get_checkpoint and train.TrainContext is tune.TuneContext
    with pytest.raises(AttributeError, match="'TorchTrainer'.*not provided.*fluidsalus.distributed"):
        train.TorchTrainer  # noqa: B018
    with pytest.raises(ImportError, match="ScalingConfig"):
        exec("from fluidsalus.train import ScalingConfig")


def test_run_config_defaults_are_rays(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.train.constants import DEFAULT_STORAGE_PATH

    monkeypatch.delenv("RAY_STORAGE", raising=False)
    assert tune.RunConfig().storage_path == DEFAULT_STORAGE_PATH
    assert tune.RunConfig().failure_config == tune.FailureConfig()
    assert tune.RunConfig().checkpoint_config == tune.CheckpointConfig()
    monkeypatch.setenv("RAY_STORAGE", "/somewhere")
    with pytest.warns(UserWarning, match="RAY_STORAGE"):
        assert tune.RunConfig().storage_path == "/somewhere"


# ---------------------------------------------------------------------------------------------------------
# Translation: our holders -> one fluidsalus searcher
# ---------------------------------------------------------------------------------------------------------

SPACE = {"x": tune.uniform(0, 1), "k": tune.choice([1, 2, 3]), "const": 7}


def _plan(**kwargs):
    space = kwargs.pop("space", SPACE)
    return plan(tune.TuneConfig(**kwargs), space)


def test_fifo_and_basic_variant_generator_become_random_search() -> None:
    planned = _plan(num_samples=3)
    assert isinstance(planned.searcher, searchers.RandomSearch) and planned.searcher.num_samples == 3
    # no random_state: the seed comes from NumPy's global state, as Ray's generator draws from it, so that
    # np.random.seed(...) before fit() repeats the sweep (it drew from fresh entropy: a helper's side-by-side run)
    np.random.seed(11)
    first = _plan(num_samples=3).searcher.next_groups()[0].configs
    np.random.seed(11)
    assert _plan(num_samples=3).searcher.next_groups()[0].configs == first
    assert _plan(num_samples=3).searcher.next_groups()[0].configs != first
    seeded = _plan(num_samples=3, search_alg=tune.search.BasicVariantGenerator(random_state=5, max_concurrent=2),
                   scheduler=tune.schedulers.FIFOScheduler())
    assert seeded.searcher.seed == 5 and seeded.max_concurrent_trials == 2
    # an int random_state draws the configurations Ray's BasicVariantGenerator draws for it, max_concurrent at a
    # time (Ray's generator makes a trial only as one ends)
    variants = sp.generate_variants(SPACE, 3, 5)
    first_two = seeded.searcher.next_groups()[0].configs
    assert first_two == variants[:2] and seeded.searcher.next_groups() == []
    for n, config in enumerate(first_two):  # (the run adds each trial it makes: ends count for those)
        seeded.searcher.on_trial_add(f"t{n}", "g", config)
    seeded.searcher.on_trial_complete("t0", None)
    assert seeded.searcher.next_groups()[0].configs == variants[2:3]


class _PlainFIFO(tune.schedulers.FIFOScheduler):
    pass


class _PlainASHA(tune.schedulers.ASHAScheduler):
    pass


def test_a_subclass_of_a_built_in_scheduler_that_adds_no_hook_runs_as_its_base() -> None:
    """Ray runs ``class Mine(FIFOScheduler): pass`` as a FIFOScheduler; it was refused ("has no fluidsalus
    equivalent"): a helper's side-by-side run."""
    fifo = _plan(scheduler=tune.schedulers.FIFOScheduler()).searcher
    assert type(_plan(scheduler=_PlainFIFO()).searcher) is type(fifo)
    plain, base = _plan(metric="m", mode="max", scheduler=_PlainASHA(max_t=9)), _plan(
        metric="m", mode="max", scheduler=tune.schedulers.ASHAScheduler(max_t=9))
    assert type(plain.searcher) is type(base.searcher)
    assert plain.summary.replace("_PlainASHA", "AsyncHyperBandScheduler") == base.summary


class _LoggingPBT(tune.schedulers.PopulationBasedTraining):
    def on_trial_result(self, tune_controller, trial, result):
        return super().on_trial_result(tune_controller, trial, result)


def test_a_subclass_of_a_built_in_scheduler_that_overrides_a_hook_says_that_the_base_decides_nothing() -> None:
    """Its hooks decide, as a scheduler of the user's own; PBT's rule is not made, and super() answers CONTINUE,
    with a warning. A subclass of ASHA, HyperBand or the median rule gets the rule's decisions from super()
    (tests/test_tune_custom_scheduler.py), with no warning."""
    with pytest.warns(UserWarning, match=r"_LoggingPBT overrides on_trial_result of PopulationBasedTraining.*"
                                         r"PopulationBasedTraining's own decisions are not made"):
        _plan(metric="m", mode="max", scheduler=_LoggingPBT(hyperparam_mutations={"x": tune.uniform(0, 1)}))


def test_asha_scheduler_becomes_asha_with_its_parameters() -> None:
    sched = tune.schedulers.ASHAScheduler(max_t=27, grace_period=3, reduction_factor=3, brackets=2,
                                          stop_last_trials=False)
    planned = _plan(metric="loss", mode="min", scheduler=sched, num_samples=5)
    s = planned.searcher
    assert isinstance(s, searchers.ASHA)
    assert (s.metric, s.mode, s.num_samples, s.max_t, s.grace_period, s.reduction_factor, s.brackets,
            s.stop_last_trials, s.time_attr) == ("loss", "min", 5, 27, 3, 3, 2, False, "training_iteration")


def test_metric_and_mode_may_be_given_to_the_scheduler() -> None:
    sched = tune.schedulers.AsyncHyperBandScheduler(metric="acc", mode="max")
    planned = _plan(scheduler=sched)
    assert (planned.metric, planned.mode) == ("acc", "max")
    assert (planned.searcher.metric, planned.searcher.mode) == ("acc", "max")


def test_tune_configs_metric_and_mode_replace_those_of_a_search_algorithm_that_searches_param_space() -> None:
    """Ray's OptunaSearch.set_search_properties takes TuneConfig's metric and mode in place of its own when it
    searches param_space; fluidsalus refused the pair ("given differently"), so such a Ray script stopped. Now it
    runs as in Ray, with a warning; with a space of its own the search algorithm keeps them in Ray, and fluidsalus,
    which has one searcher, still refuses."""
    from fluidsalus.tune.search.optuna import OptunaSearch

    with pytest.warns(UserWarning, match=r"TuneConfig.mode='max' replaces OptunaSearch.mode='min', as Ray's "
                                         r"OptunaSearch.set_search_properties replaces it"):
        planned = _plan(metric="loss", mode="max", search_alg=OptunaSearch(metric="loss", mode="min"))
    assert (planned.metric, planned.mode) == ("loss", "max")
    assert planned.searcher.study.direction == optuna.study.StudyDirection.MAXIMIZE
    with pytest.raises(ConfigError, match="metric: given differently"):
        _plan(metric="score", mode="min", space={},
              search_alg=OptunaSearch(space={"x": tune.uniform(0, 1)}, metric="loss", mode="min"))


def test_conflicting_metric_is_refused() -> None:
    sched = tune.schedulers.AsyncHyperBandScheduler(metric="acc", mode="max")
    with pytest.raises(ConfigError, match="metric: given differently"):
        _plan(metric="loss", mode="max", scheduler=sched)


def test_hyperband_scheduler_becomes_hyperband() -> None:
    s = _plan(metric="m", mode="max", scheduler=tune.schedulers.HyperBandScheduler(max_t=9, reduction_factor=3),
              num_samples=4).searcher
    assert isinstance(s, searchers.HyperBand) and (s.max_t, s.reduction_factor) == (9, 3)


def test_hyperband_for_bohb_alone_becomes_hyperband_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="HyperBandForBOHB without TuneBOHB"):
        s = _plan(metric="m", mode="max", scheduler=tune.schedulers.HyperBandForBOHB(max_t=9)).searcher
    assert type(s) is searchers.HyperBand


def test_tune_bohb_with_hyperband_for_bohb_becomes_sync_bohb() -> None:
    from fluidsalus.tune.search.bohb import TuneBOHB

    bohb = TuneBOHB(bohb_config={"num_samples": 16, "top_n_percent": 20, "random_fraction": 0.5}, seed=3)
    sched = tune.schedulers.HyperBandForBOHB(max_t=10, reduction_factor=2, stop_last_trials=False)
    planned = _plan(metric="r", mode="max", search_alg=tune.search.ConcurrencyLimiter(bohb, max_concurrent=4),
                    scheduler=sched, num_samples=8)
    s = planned.searcher
    assert isinstance(s, searchers.SyncBOHB)
    assert (s.max_t, s.reduction_factor, s.stop_last_trials, s.seed) == (10, 2, False, 3)
    assert (s.model.num_candidates, s.model.top_n_percent, s.model.random_fraction) == (16, 20, 0.5)
    assert planned.max_concurrent_trials == 4


def test_tune_bohb_with_asha_becomes_bohb() -> None:
    from fluidsalus.tune.search.bohb import TuneBOHB

    s = _plan(metric="r", mode="max", search_alg=TuneBOHB(seed=1),
              scheduler=tune.schedulers.ASHAScheduler(max_t=16, grace_period=2)).searcher
    assert isinstance(s, searchers.BOHB) and (s.max_t, s.grace_period) == (16, 2)


def test_population_based_training_becomes_pbt() -> None:
    pbt = tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=4, burn_in_period=2,
        hyperparam_mutations={"x": tune.uniform(0, 1), "k": [1, 2, 3]}, quantile_fraction=0.5, synch=True)
    planned = _plan(metric="m", mode="max", scheduler=pbt, num_samples=6)
    s = planned.searcher
    assert isinstance(s, searchers.PBT)
    assert (s.time_attr, s.perturbation_interval, s.burn_in_period, s.quantile_fraction, s.synch, s.num_samples) \
        == ("training_iteration", 4, 2, 0.5, True, 6)
    assert set(s.hyperparam_mutations) == {"x", "k"}


def test_pb2_becomes_the_pb2_searcher() -> None:
    from fluidsalus.tune.schedulers.pb2 import PB2

    pb2 = PB2(time_attr="training_iteration", perturbation_interval=4,
              hyperparam_bounds={"lr": [0.001, 0.1], "opt": {"momentum": [0.8, 0.99]}}, quantile_fraction=0.5)
    planned = _plan(metric="m", mode="max", scheduler=pb2, num_samples=6)
    s = planned.searcher
    assert isinstance(s, searchers.PB2) and planned.summary.startswith("PB2 -> PB2(")
    assert (s.time_attr, s.perturbation_interval, s.quantile_fraction, s.num_samples, s.resample_probability) \
        == ("training_iteration", 4, 0.5, 6, 0.0)
    assert s.bounds == {"lr": (0.001, 0.1), "opt/momentum": (0.8, 0.99)}
    (population,) = s.next_groups()
    assert all(0.001 <= c["lr"] <= 0.1 and 0.8 <= c["opt"]["momentum"] <= 0.99 for c in population.configs)


def test_rays_pb2_is_translated() -> None:
    from ray.tune.schedulers.pb2 import PB2

    ray_pb2 = PB2(time_attr="training_iteration", perturbation_interval=3, hyperparam_bounds={"lr": [0.1, 0.2]})
    with pytest.warns(UserWarning, match="Ray Tune's PB2"):
        s = _plan(metric="m", mode="max", scheduler=ray_pb2).searcher
    assert isinstance(s, searchers.PB2) and s.bounds == {"lr": (0.1, 0.2)} and s.perturbation_interval == 3


def test_points_to_evaluate_under_pbt_are_the_first_members_of_the_population() -> None:
    """As in Ray, BasicVariantGenerator's points run first under PopulationBasedTraining, each counting as one of
    num_samples; a point may set a mutated key the param_space lacks."""
    pbt = tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=4,
        hyperparam_mutations={"x": tune.uniform(0, 1), "mom": [0.8, 0.9]})
    points = [{"x": 0.25, "mom": 0.9}, {"k": 3}]
    planned = _plan(metric="m", mode="max", scheduler=pbt, num_samples=3,
                    search_alg=tune.search.BasicVariantGenerator(points_to_evaluate=points, random_state=5))
    s = planned.searcher
    assert isinstance(s, searchers.PBT) and "points_to_evaluate" in planned.summary
    (population,) = s.next_groups()
    configs = population.configs
    assert len(configs) == 3
    assert (configs[0]["x"], configs[0]["mom"], configs[0]["k"]) == (0.25, 0.9, configs[0]["k"])
    assert configs[1]["k"] == 3 and 0 <= configs[1]["x"] <= 1 and configs[1]["mom"] in (0.8, 0.9)
    assert all(c["const"] == 7 for c in configs)


def test_optuna_search_becomes_our_optuna_search() -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    sampler = optuna.samplers.RandomSampler(seed=4)
    holder = OptunaSearch(sampler=sampler, points_to_evaluate=[{"x": 0.5, "k": 2}])
    planned = _plan(metric="loss", mode="min", search_alg=holder, num_samples=6)
    s = planned.searcher
    assert isinstance(s, searchers.OptunaSearch)
    assert s.study.sampler is sampler and isinstance(s.study.pruner, optuna.pruners.NopPruner)
    assert s.study.direction == optuna.study.StudyDirection.MINIMIZE
    assert s.next_groups()[0].configs[0] == {"x": 0.5, "k": 2, "const": 7}


def test_optuna_search_seed_seeds_the_default_tpe_sampler() -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    s = _plan(metric="m", mode="max", search_alg=OptunaSearch(seed=11)).searcher
    assert isinstance(s.study.sampler, optuna.samplers.TPESampler)


def test_optuna_search_with_asha_gets_a_successive_halving_pruner() -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    limiter = tune.search.ConcurrencyLimiter(OptunaSearch(), max_concurrent=3)
    sched = tune.schedulers.ASHAScheduler(max_t=20, grace_period=2, reduction_factor=3)
    planned = _plan(metric="m", mode="min", search_alg=limiter, scheduler=sched, num_samples=9)
    pruner = planned.searcher.study.pruner
    assert isinstance(pruner, optuna.pruners.SuccessiveHalvingPruner)
    assert (pruner._min_resource, pruner._reduction_factor, pruner._min_early_stopping_rate) == (2, 3, 0)
    assert planned.extra_stops == [MaxBudgetStop("training_iteration", 20.0)]
    assert planned.max_concurrent_trials == 3 and planned.searcher.batch_size == 3


def test_optuna_search_with_hyperband_fills_brackets_from_the_study_and_tells_it_each_end() -> None:
    from fluidsalus.tune._optuna_hyperband import OptunaHyperBand
    from fluidsalus.tune.search.optuna import OptunaSearch

    holder = OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=4))
    planned = _plan(metric="m", mode="max", search_alg=holder, num_samples=6,
                    scheduler=tune.schedulers.HyperBandScheduler(max_t=4, reduction_factor=2))
    s = planned.searcher
    assert isinstance(s, OptunaHyperBand) and isinstance(s.optuna.study.pruner, optuna.pruners.NopPruner)
    assert planned.summary.startswith("OptunaSearch + HyperBandScheduler -> OptunaHyperBand(")
    groups = s.next_groups()  # Ray's brackets for max_t=4, eta=2: 3 trials to 4, then 3 to 2 (2 of them to 4)
    assert [(len(g.configs), g.budget) for g in groups] == [(3, 4), (3, 2)]
    assert all(c["const"] == 7 for g in groups for c in g.configs)
    ids = [f"t{i}" for i in range(6)]
    for tid, (group, config) in zip(ids, [(g, c) for g in groups for c in g.configs], strict=True):
        s.on_trial_add(tid, group.group_id, config)
    decisions = [s.on_result(tid, {"m": value, "training_iteration": 2})
                 for tid, value in zip(ids[3:], [3.0, 1.0, 2.0], strict=True)]
    stopped = [tid for tid, d in zip(ids[3:], decisions, strict=True) if d == searchers.Decision.STOP]
    assert stopped + s.collect_stops() == ["t4"]
    s.on_trial_complete("t4", {"m": 1.0, "training_iteration": 2})
    (told,) = [t for t in s.optuna.study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert told.value == 1.0 and told.intermediate_values == {2: 1.0}  # Ray's OptunaSearch: COMPLETE, last value
    state = s.state_dict()
    again = _plan(metric="m", mode="max", search_alg=OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=4)),
                  num_samples=6, scheduler=tune.schedulers.HyperBandScheduler(max_t=4, reduction_factor=2)).searcher
    again.load_state_dict(state)
    # the rung's promotion is still due, and nothing new is asked: all six were, and one was told
    assert [(g.trial_ids, g.configs, g.budget) for g in again.next_groups()] == [(["t3", "t5"], [], 4)]
    assert again.optuna.in_flight == 5

    limited = _plan(metric="m", mode="max", search_alg=tune.search.ConcurrencyLimiter(OptunaSearch(), 2),
                    num_samples=6, scheduler=tune.schedulers.HyperBandScheduler(max_t=4, reduction_factor=2))
    assert limited.max_concurrent_trials == 2
    assert [len(g.configs) for g in limited.searcher.next_groups()] == [2] and limited.searcher.next_groups() == []
    with pytest.raises(ConfigError, match="OptunaSearch, scheduler=HyperBandForBOHB has no fluidsalus equivalent"):
        _plan(metric="m", mode="max", search_alg=OptunaSearch(), scheduler=tune.schedulers.HyperBandForBOHB())


def test_a_batch_limiter_around_optuna_search_waits_for_every_trial_of_the_batch() -> None:
    from fluidsalus.tune.search.bohb import TuneBOHB
    from fluidsalus.tune.search.optuna import OptunaSearch

    planned = _plan(metric="m", mode="max", num_samples=6,
                    search_alg=tune.search.ConcurrencyLimiter(OptunaSearch(seed=1), max_concurrent=3, batch=True))
    search = planned.searcher
    assert search.wait_for_batch and planned.max_concurrent_trials == 3
    (group,) = search.next_groups()
    for i, config in enumerate(group.configs):
        search.on_trial_add(f"t{i}", group.group_id, config)
    search.on_trial_complete("t0", {"m": 1.0})
    search.on_trial_complete("t1", {"m": 2.0})
    assert search.next_groups() == []  # t2 still runs
    search.on_trial_complete("t2", {"m": 3.0})
    assert [len(g.configs) for g in search.next_groups()] == [3]
    hyperband = _plan(metric="m", mode="max", num_samples=6,
                      search_alg=tune.search.ConcurrencyLimiter(OptunaSearch(seed=1), 2, batch=True),
                      scheduler=tune.schedulers.HyperBandScheduler(max_t=4, reduction_factor=2)).searcher
    assert hyperband.optuna.wait_for_batch
    with pytest.warns(UserWarning, match=r"batch=True\) waits for each batch around OptunaSearch.*; SyncBOHB "
                                         "proposes as it does without it"):
        _plan(metric="m", mode="max", search_alg=tune.search.ConcurrencyLimiter(TuneBOHB(), 2, batch=True),
              scheduler=tune.schedulers.HyperBandForBOHB(max_t=4))


def test_median_stopping_rule_judges_the_trials_of_any_search_with_rays_defaults() -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    rule = tune.schedulers.MedianStoppingRule(grace_period=5, min_samples_required=4)
    planned = _plan(metric="m", mode="max", scheduler=rule, num_samples=2,
                    search_alg=tune.search.BasicVariantGenerator(random_state=2),
                    space={"x": tune.grid_search([1, 2, 3]), "y": tune.uniform(0, 1)})
    s = planned.searcher
    assert isinstance(s, searchers.MedianStopping) and isinstance(s.inner, searchers.RandomSearch)
    assert (s.time_attr, s.grace_period, s.min_samples_required, s.hard_stop) == ("time_total_s", 5.0, 4, True)
    assert sorted(c["x"] for g in s.next_groups() for c in g.configs) == [1, 1, 2, 2, 3, 3]  # the grid, enumerated
    assert planned.summary.startswith("MedianStoppingRule(time_attr='time_total_s', grace_period=5, ")
    optuna_rule = _plan(metric="m", mode="max", scheduler=tune.schedulers.MedianStoppingRule(),
                        search_alg=OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=0))).searcher
    assert isinstance(optuna_rule.inner, searchers.OptunaSearch)
    assert isinstance(optuna_rule.inner.study.pruner, optuna.pruners.NopPruner)  # the rule stops, not a pruner
    with pytest.warns(UserWarning, match="hard_stop=False.*goes on at once"):
        soft = _plan(metric="m", mode="min", scheduler=tune.schedulers.MedianStoppingRule(hard_stop=False)).searcher
    assert soft.hard_stop is False
    with pytest.raises(ConfigError, match="MedianStoppingRule decides on one metric"):
        _plan(scheduler=tune.schedulers.MedianStoppingRule(),
              search_alg=OptunaSearch(metric=["a", "b"], mode=["min", "max"]))
    with pytest.raises(ConfigError, match="metric: given differently to TuneConfig.metric='m', "
                                          "MedianStoppingRule.metric='n'"):
        _plan(metric="m", mode="max", scheduler=tune.schedulers.MedianStoppingRule(metric="n"))


def test_optuna_distributions_space_is_converted() -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from fluidsalus.tune.search.optuna import OptunaSearch

    holder = OptunaSearch(space={"lr": FloatDistribution(1e-4, 1e-1, log=True), "n": IntDistribution(1, 4),
                                 "model/act": CategoricalDistribution(["relu", "tanh"])})
    planned = _plan(metric="m", mode="max", search_alg=holder, space={"epochs": 3})
    dists = sp.to_optuna_distributions(planned.space)
    assert dists == {"lr": FloatDistribution(1e-4, 1e-1, log=True), "n": IntDistribution(1, 4),
                     "model/act": CategoricalDistribution(["relu", "tanh"])}
    config = planned.searcher.next_groups()[0].configs[0]
    assert config["epochs"] == 3 and config["model"]["act"] in ("relu", "tanh") and 1 <= config["n"] <= 4
    nested = OptunaSearch(space={"model": {"act": CategoricalDistribution(["relu", "tanh"])}})
    assert sp.to_optuna_distributions(nested.own_space()) == {"model/act": CategoricalDistribution(["relu", "tanh"])}
    with pytest.raises(ConfigError, match="'odd'.*multiples of the step"):
        OptunaSearch(space={"odd": IntDistribution(1, 10, step=3)})


def test_space_errors_of_an_optuna_based_search_algorithm_name_the_class_built() -> None:
    """HyperOptSearch runs as an OptunaSearch, and its space's errors said "OptunaSearch:", a class the user never
    named (h150 D1). Keys other than strings below the top are refused by it (Ray's HyperOptSearch runs them; Ray's
    OptunaSearch fails with a TypeError). A choice whose options hold domains is refused by OptunaSearch only
    (HyperOptSearch searches it as Ray's converts it: tests/test_tune_search_hyperopt_domains.py)."""
    from fluidsalus.tune.search.hyperopt import HyperOptSearch

    spaces = {r"search space key 2 at 'n' must be a string": {"n": {2: tune.uniform(0, 1), 3: tune.choice([1, 2])}},
              r"parameter 'c': choice\(.*\) holds domains": {"c": tune.choice([{"u": tune.uniform(0, 1)}, {"k": 3}])}}
    for search in (HyperOptSearch, tune.search.optuna.OptunaSearch):
        for message, space in spaces.items():
            if search is HyperOptSearch and "holds domains" in message:
                continue
            with pytest.raises(SpaceError, match=f"^{search.__name__}: {message}"):
                plan(tune.TuneConfig(search_alg=search(metric="m", mode="max"), num_samples=2), space)


def test_searcher_space_and_param_space_domains_are_refused_together() -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    with pytest.raises(ConfigError, match="own search space"):
        _plan(metric="m", mode="max", search_alg=OptunaSearch(space={"y": tune.uniform(0, 1)}))


def test_a_param_space_value_that_cannot_be_copied_is_refused_naming_it() -> None:
    """A lock in ``param_space`` failed the run with a bare ``TypeError`` from the first sampling (a helper's bad-input
    fuzzing); Ray's own fails the same way, later."""
    import threading

    with pytest.raises(ConfigError, match=r"param_space: the value of 'opt/lock' \(lock\) cannot be copied"):
        _plan(space={"x": tune.uniform(0, 1), "opt": {"lock": threading.Lock()}})


def test_a_fluidsalus_searcher_is_taken_as_it_is() -> None:
    ours = searchers.ASHA(SPACE, 4, "m", "max", max_t=8)
    assert _plan(search_alg=ours).searcher is ours


def test_ray_domains_in_param_space_are_translated() -> None:
    with pytest.warns(UserWarning, match="Ray Tune domains"):
        planned = _plan(space={"a": rt.qrandint(1, 10, 3), "b": rt.loguniform(1e-3, 1), "c": rt.choice([1, 2]),
                               "d": rt.randn(0, 2), "e": rt.grid_search([1, 2])})
    space = planned.space
    assert isinstance(space["a"], sp.Integer) and (space["a"].lower, space["a"].upper, space["a"].q) == (1, 10, 3)
    assert isinstance(space["b"], sp.Float) and space["b"].log
    assert isinstance(space["c"], sp.Categorical) and space["c"].categories == [1, 2]
    assert isinstance(space["d"], sp.Normal) and space["d"].sd == 2
    assert space["e"] == {"grid_search": [1, 2]}


def test_a_ray_domain_with_an_argument_fluidsalus_refuses_is_named_by_its_key() -> None:
    """Ray builds qrandn(0, 1, q=0) (its HyperOptSearch runs it as randn, its random search gives NaN); the error
    named the domain but not where it is in the space."""
    with pytest.raises(SpaceError, match=r"^parameter 'opt/b': Ray Tune's qrandn\(mean=0, sd=1, q=0\): q must be > "
                                         r"0, got 0.0$"):
        _plan(space={"a": rt.uniform(0, 1), "opt": {"b": rt.qrandn(0, 1, 0)}})


# ---------------------------------------------------------------------------------------------------------
# Ray's own objects (an import left unchanged)
# ---------------------------------------------------------------------------------------------------------


def test_rays_asha_is_translated_with_a_warning() -> None:
    from ray.tune.schedulers import ASHAScheduler

    with pytest.warns(UserWarning, match="Ray Tune's AsyncHyperBandScheduler") as caught:
        s = _plan(metric="m", mode="max", scheduler=ASHAScheduler(max_t=50, grace_period=5, brackets=2)).searcher
    assert isinstance(s, searchers.ASHA) and (s.max_t, s.grace_period, s.brackets) == (50, 5, 2)
    # the warning names the script's line, not fluidsalus's own (it named fluidsalus/tune/_translate.py's)
    assert {os.path.abspath(w.filename) for w in caught} == {os.path.abspath(__file__)}


def test_rays_hyperband_median_and_pbt_are_translated() -> None:
    from ray.tune.schedulers import HyperBandScheduler, MedianStoppingRule, PopulationBasedTraining

    with pytest.warns(UserWarning, match="Ray Tune's HyperBandScheduler"):
        s = _plan(metric="m", mode="max", scheduler=HyperBandScheduler(max_t=27, reduction_factor=3)).searcher
    assert isinstance(s, searchers.HyperBand) and s.max_t == 27
    with pytest.warns(UserWarning, match="Ray Tune's MedianStoppingRule"):
        s = _plan(metric="m", mode="max",
                  scheduler=MedianStoppingRule(time_attr="training_iteration", grace_period=3)).searcher
    assert isinstance(s, searchers.MedianStopping) and (s.time_attr, s.grace_period) == ("training_iteration", 3)
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=3,
                                  hyperparam_mutations={"x": rt.uniform(0, 1)})
    with pytest.warns(UserWarning, match="Ray Tune's PopulationBasedTraining"):
        s = _plan(metric="m", mode="max", scheduler=pbt).searcher
    assert isinstance(s, searchers.PBT) and isinstance(s.hyperparam_mutations["x"], sp.Float)


def test_rays_search_algorithms_are_translated() -> None:
    from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    with pytest.warns(UserWarning, match="Ray Tune's BasicVariantGenerator"):
        assert _plan(search_alg=BasicVariantGenerator(max_concurrent=3)).max_concurrent_trials == 3
    sampler = optuna.samplers.RandomSampler(seed=0)
    with pytest.warns(UserWarning, match="Ray Tune's ConcurrencyLimiter"):
        planned = _plan(metric="m", mode="max", search_alg=ConcurrencyLimiter(OptunaSearch(sampler=sampler), 2))
    assert isinstance(planned.searcher, searchers.OptunaSearch) and planned.searcher.study.sampler is sampler
    assert planned.max_concurrent_trials == 2


def test_max_concurrent_trials_is_ignored_with_a_search_generator_object_as_ray_ignores_it(caplog) -> None:
    """Ray wraps only a ``Searcher`` in a ``ConcurrencyLimiter`` of ``max_concurrent_trials``: beside a
    ``BasicVariantGenerator`` or ``SearchGenerator`` object it logs its warning and ignores it (2 trials at once under
    ``max_concurrent_trials=1``; the generator's own ``max_concurrent=1`` beside ``max_concurrent_trials=2`` caps, and
    is no error). fluidsalus capped the first and refused the second (h184's note, h195's ``i3_bvg_cap.py``)."""
    rays = ("You have passed a `SearchGenerator` instance as the `search_alg`, but `max_concurrent_trials` requires a "
            "`Searcher` instance`. `max_concurrent_trials` will be ignored.")  # (ray/tune/tune.py, word for word)
    for search_alg, cap, capped in ((tune.search.BasicVariantGenerator(), 1, None),
                                    (tune.search.BasicVariantGenerator(max_concurrent=1), 2, 1),
                                    (tune.search.SearchGenerator(_optuna_holder()), 2, None)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fluidsalus.tune._translate"):
            planned = _plan(metric="m", mode="max", search_alg=search_alg, max_concurrent_trials=cap)
        assert planned.max_concurrent_trials == capped
        assert [r.getMessage() for r in caplog.records] == [rays]
    caplog.clear()
    for search_alg in (None, tune.search.ConcurrencyLimiter(_optuna_holder(), 2)):  # (Ray caps these, silently)
        with caplog.at_level(logging.WARNING, logger="fluidsalus.tune._translate"):
            planned = _plan(metric="m", mode="max", search_alg=search_alg, max_concurrent_trials=2)
        assert planned.max_concurrent_trials == 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_rays_tune_bohb_is_translated() -> None:
    # Ray's TuneBOHB needs hpbandster to be built; its state is what the translation reads.
    from ray.tune.search.bohb import TuneBOHB

    ray_bohb = object.__new__(TuneBOHB)
    ray_bohb.__dict__.update(_space=None, _bohb_config={"num_samples": 8}, _metric="r", _mode="max",
                             _points_to_evaluate=None, _seed=2, _max_concurrent=0)
    with pytest.warns(UserWarning, match="Ray Tune's TuneBOHB"):
        s = _plan(search_alg=ray_bohb, scheduler=tune.schedulers.HyperBandForBOHB(max_t=8)).searcher
    assert isinstance(s, searchers.SyncBOHB) and s.model.num_candidates == 8 and s.seed == 2


def test_rays_unsupported_scheduler_is_refused() -> None:
    from ray.tune.schedulers import TrialScheduler

    with pytest.raises(ConfigError, match="TuneConfig.scheduler is Ray Tune's TrialScheduler, which fluidsalus has no"):
        _plan(metric="m", mode="max", scheduler=TrialScheduler())


def test_rays_config_objects_are_translated() -> None:
    with pytest.warns(UserWarning, match="Ray Tune's RunConfig"):
        tuner = Tuner(lambda c: None, run_config=rt.RunConfig(
            name="x", failure_config=rt.FailureConfig(max_failures=2),
            checkpoint_config=rt.CheckpointConfig(num_to_keep=3)))
    assert tuner._run_config.failure_config.max_failures == 2
    assert tuner._run_config.checkpoint_config.num_to_keep == 3
    with pytest.warns(UserWarning, match="Ray Tune's TuneConfig"):
        tuner = Tuner(lambda c: None, tune_config=rt.TuneConfig(num_samples=4, metric="m", mode="min"))
    assert tuner._tune_config.num_samples == 4


# ---------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("build, message", [
    (lambda: tune.TuneConfig(num_samples=0), "TuneConfig: num_samples must be an int >= 1, or -1"),
    (lambda: tune.TuneConfig(mode="best"), "TuneConfig: mode must be 'min' or 'max'"),
    (lambda: tune.TuneConfig(time_budget_s=-1), "TuneConfig: time_budget_s must be"),
    (lambda: tune.FailureConfig(max_failures=2, fail_fast=True), "max_failures must be 0 if fail_fast"),
    (lambda: tune.FailureConfig(fail_fast="sometimes"), "FailureConfig: fail_fast must be True, False or 'raise'"),
    (lambda: tune.CheckpointConfig(num_to_keep=0), "CheckpointConfig: num_to_keep must be None or an int >= 1"),
    (lambda: tune.CheckpointConfig(checkpoint_score_order="best"), "checkpoint_score_order must be 'max' or"),
    (lambda: tune.RunConfig(local_dir="/tmp/x"), "RunConfig: local_dir is deprecated"),
    (lambda: tune.RunConfig(stop=3), "RunConfig: stop must be None, a dict"),
    # (a class passed the callable check and failed the run at its first result: h217)
    (lambda: tune.RunConfig(stop=tune.stopper.MaximumIterationStopper),
     r"RunConfig: stop must be a Stopper instance, such as MaximumIterationStopper\(\.\.\.\), not the class"),
    # (before fit() starts Ray: an OSError "File name too long" once it was up; h83's N2)
    (lambda: tune.RunConfig(name="x" * 256), "RunConfig: name must be a folder name of at most 255 bytes"),
    (lambda: tune.RunConfig(storage_path=""), r"RunConfig: storage_path must be None or a folder path \(got ''\)"),
    (lambda: tune.schedulers.ASHAScheduler(reduction_factor=1), "AsyncHyperBandScheduler: reduction_factor must"),
    (lambda: tune.schedulers.ASHAScheduler(grace_period=200), "AsyncHyperBandScheduler: grace_period must be"),
    (lambda: tune.schedulers.HyperBandScheduler(mode="up"), "HyperBandScheduler: mode must be"),
    (lambda: tune.schedulers.PopulationBasedTraining(), "PopulationBasedTraining: hyperparam_mutations is empty"),
    (lambda: tune.schedulers.PB2(), "PB2: hyperparam_bounds must be a non-empty dict"),
    (lambda: tune.schedulers.PB2(hyperparam_bounds={"lr": [2, 1]}), r"PB2: hyperparam_bounds\['lr'\] must be"),
    (lambda: tune.search.ConcurrencyLimiter(tune.search.Searcher(), 0),
     "ConcurrencyLimiter: max_concurrent must be an int >= 1"),
    # (Ray raises too; fluidsalus ran it as max_concurrent_trials: a helper's side-by-side run)
    (lambda: tune.search.ConcurrencyLimiter(tune.search.BasicVariantGenerator(), 2),
     r"ConcurrencyLimiter: searcher must be a Searcher, such as OptunaSearch or one of your own \(got a "
     r"BasicVariantGenerator \(pass max_concurrent to the BasicVariantGenerator itself\)\)"),
    (lambda: tune.search.SearchGenerator(tune.search.SearchGenerator(tune.search.Searcher())),
     "SearchGenerator: searcher must be a Searcher, such as OptunaSearch or one of your own \\(got a "
     "SearchGenerator\\)"),
    (lambda: tune.with_resources(lambda c: None, {"gpu": -1}), r"with_resources: resources\['gpu'\] must be"),
    (lambda: tune.with_parameters("PPO"), "with_parameters takes the function"),
])
def test_bad_input_names_the_field(build, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


def test_a_time_budget_of_zero_is_no_budget_as_ray_reads_it() -> None:
    """Ray tests ``time_budget_s``'s truth, so 0 (a script's "none" default) runs without a budget; it was refused
    here (a helper's side-by-side run). A negative one or ``False`` is still refused."""
    import datetime

    for zero in (0, 0.0, datetime.timedelta(0)):
        assert tune.TuneConfig(time_budget_s=zero).time_budget is None
    # inf too, which Ray and fluidsalus.run take as no budget (it was refused: "a number of seconds > 0", h83's N15)
    assert tune.TuneConfig(time_budget_s=float("inf")).time_budget is None
    assert tune.TuneConfig(time_budget_s=datetime.timedelta(seconds=2)).time_budget == 2.0
    for bad in (False, -1, float("-inf"), float("nan")):
        with pytest.raises(ConfigError, match="TuneConfig: time_budget_s must be"):
            tune.TuneConfig(time_budget_s=bad)


def test_define_by_run_optuna_space_refuses_evaluated_rewards() -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    with pytest.raises(ConfigError, match="evaluated_rewards cannot be used with a define-by-run space"):
        OptunaSearch(space=lambda trial: None, points_to_evaluate=[{"x": 1}], evaluated_rewards=[1.0])


def _bohb():
    from fluidsalus.tune.search.bohb import TuneBOHB

    return TuneBOHB()


def _pbt():
    return tune.schedulers.PopulationBasedTraining(hyperparam_mutations={"x": tune.uniform(0, 1)})


def _optuna_holder():
    from fluidsalus.tune.search.optuna import OptunaSearch

    return OptunaSearch()


@pytest.mark.parametrize("make, message", [
    (lambda: {"search_alg": _bohb(), "scheduler": tune.schedulers.HyperBandScheduler()},
     "TuneBOHB needs HyperBandForBOHB"),
    (lambda: {"search_alg": _optuna_holder(), "scheduler": _pbt()}, "no fluidsalus equivalent"),
    (lambda: {"scheduler": _pbt(), "num_samples": -1},
     "num_samples=-1.*not supported with PBT"),
    (lambda: {"scheduler": tune.schedulers.ASHAScheduler(), "metric": None, "mode": None},
     "needs a metric and a mode"),
    (lambda: {"search_alg": tune.search.BasicVariantGenerator(points_to_evaluate=[{"nope": 0.1}])},
     "points_to_evaluate\\[0\\] sets 'nope', which is not a key"),
    (lambda: {"search_alg": tune.search.ConcurrencyLimiter(tune.search.Searcher(), 2),
              "max_concurrent_trials": 3}, "already limits concurrency to 2"),
    (lambda: {"search_alg": object()}, "search_alg must be None"),
])
def test_unsupported_combinations_are_refused(make, message: str) -> None:
    kwargs = {"metric": "m", "mode": "max", **make()}
    with pytest.raises(ConfigError, match=message):
        plan(tune.TuneConfig(**kwargs), SPACE)


def test_trainables_that_cannot_run_are_refused(storage: str) -> None:
    class RayStyle(rt.Trainable):
        pass

    with pytest.raises(ConfigError, match="subclasses Ray's Trainable"):
        tune.with_resources(RayStyle, {"cpu": 1})
    with pytest.raises(ConfigError, match="checkpoint_frequency and checkpoint_at_end are not supported for"):
        Tuner(lambda c: None, run_config=tune.RunConfig(
            storage_path=storage, checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2))).fit()
    with pytest.raises(ConfigError, match="Tuner.restore: resume_errored must be True or False"):
        Tuner.restore(storage, lambda c: None, resume_errored="yes")
    with pytest.raises(ConfigError, match="is not a restorable fluidsalus.tune experiment"):
        Tuner.restore(storage, lambda c: None, resume_errored=True)
    with pytest.raises(FileNotFoundError):  # what Ray raises: a script's `except FileNotFoundError` still works
        Tuner.restore(os.path.join(storage, "missing"), lambda c: None)
    assert not Tuner.can_restore(storage)
    with pytest.raises(RuntimeError, match="has not been run"):
        Tuner(lambda c: None).get_results()


def test_rays_own_mock_trainable_is_translated_into_fluidsalus_twin_with_a_warning_naming_the_import() -> None:
    # Ray's hyperband_example.py keeps `from ray.tune.utils.mock_trainable import MyTrainableClass` (docs/migrating.md
    # keeps Ray's helpers): it was refused at fit(), after Ray started, with advice to import Trainable (h134's F2)
    from ray.tune.utils.mock_trainable import MyTrainableClass as RaysClass

    from fluidsalus.tune._trainable import adopt_ray_trainable
    from fluidsalus.tune.registry import get_trainable_cls
    from fluidsalus.tune.utils.mock_trainable import MyTrainableClass

    said = "MyTrainableClass is Ray Tune's .*Change the import to `from fluidsalus.tune.utils.mock_trainable import"
    with pytest.warns(UserWarning, match=said) as caught:
        assert adopt_ray_trainable(RaysClass) is MyTrainableClass
    assert caught[0].filename == __file__  # the script's line, not fluidsalus's
    # not prefixed with the entry point: tune.run(resources_per_trial=...) named with_resources, a call the script
    # did not make (h140 F7; end to end in test_tune_gaps.py)
    with pytest.warns(UserWarning, match="fluidsalus.tune: " + said):
        assert tune.with_parameters(RaysClass, data=1).base is MyTrainableClass
    with pytest.warns(UserWarning, match="fluidsalus.tune: " + said):
        assert tune.with_resources(RaysClass, {"cpu": 1}).base is MyTrainableClass
    with pytest.warns(UserWarning, match="fluidsalus.tune: " + said):
        tune.register_trainable("rays_mock", RaysClass)
    assert get_trainable_cls("rays_mock") is MyTrainableClass


def _takes_data(config, data=None):
    pass


def test_rays_own_with_parameters_and_with_resources_around_rays_class_are_translated() -> None:
    """Ray's ``with_parameters`` / ``with_resources`` make a subclass of a class trainable (``_Inner``,
    ``ResourceTrainable``, named as the class, in ``ray.tune.trainable.util``): around Ray's ``MyTrainableClass``
    they were refused as "Ray's own class (ray.tune.trainable.util), which fluidsalus has no equivalent of" (h140
    F4); they are read back as they are for a function, with the same warning."""
    from ray.tune.utils.mock_trainable import MyTrainableClass as RaysClass

    from fluidsalus.tune._trainable import adopt_ray_trainable
    from fluidsalus.tune.registry import get_trainable_cls
    from fluidsalus.tune.utils.mock_trainable import MyTrainableClass

    with pytest.warns(UserWarning) as caught:
        prepared = adopt_ray_trainable(rt.with_resources(rt.with_parameters(RaysClass, data=5), {"cpu": 1, "gpu": 0.5}))
    assert (prepared.base, prepared.parameters, prepared.resources) == (MyTrainableClass, {"data": 5},
                                                                        {"cpu": 1.0, "gpu": 0.5})
    assert sorted(str(w.message).split(";")[0] for w in caught) == [
        "fluidsalus.tune: MyTrainableClass is Ray Tune's (ray.tune.utils.mock_trainable)",
        "fluidsalus.tune: the trainable was wrapped by Ray Tune's with_resources and with_parameters"]
    assert {w.filename for w in caught} == {__file__}
    # a function of the config is kept; a factory's later bundles are kept for the trial's tasks, for a class as for
    # a function, without the warning about a *function's* factory (normalize_resources without keeps_task_cpus)
    with pytest.warns(UserWarning, match="wrapped by Ray Tune's with_resources") as caught:
        by_config = adopt_ray_trainable(rt.with_resources(RaysClass, lambda config: {"cpu": config["n"]}))
        factory = rt.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}])
        factories = [adopt_ray_trainable(rt.with_resources(t, factory)) for t in (RaysClass, _takes_data)]
    assert by_config.resources({"n": 2}) == {"cpu": 2}
    assert [(f.base, f.resources, f.task_cpus) for f in factories] == [(MyTrainableClass, {"cpu": 3.0}, 2.0),
                                                                       (_takes_data, {"cpu": 3.0}, 2.0)]
    assert not [w for w in caught if "a function of the config" in str(w.message)]
    # fluidsalus's wrappers and register_trainable around Ray's keep what Ray's held
    with pytest.warns(UserWarning, match="wrapped by Ray Tune's with_resources"):
        both = tune.with_parameters(rt.with_resources(RaysClass, {"cpu": 2}), x=1)
    assert (both.base, both.parameters, both.resources) == (MyTrainableClass, {"x": 1}, {"cpu": 2.0})
    with pytest.warns(UserWarning, match="wrapped by Ray Tune's with_parameters"):
        tune.register_trainable("rays_wrapped_mock", rt.with_parameters(RaysClass))
    assert get_trainable_cls("rays_wrapped_mock").base is MyTrainableClass

    class RayStyle(rt.Trainable):
        pass

    # around a class of the script's own that subclasses Ray's Trainable: refused naming it, not Ray's wrapper
    with pytest.raises(ConfigError, match="RayStyle \\(defined in .*test_tune_frontend\\) subclasses Ray's Trainable"):
        adopt_ray_trainable(rt.with_parameters(RayStyle, data=1))


def _takes_two(config, x=None, y=None):
    return {"x": x, "y": y}


def test_rays_wrappers_around_fluidsaluss_are_merged_as_ray_merges_its_own() -> None:
    """A half-migrated script (fluidsalus's ``with_parameters``/``with_resources`` in one module, Ray's in another):
    Ray's ``with_resources`` around fluidsalus's wrapper set ``_resources`` on it and the request was dropped
    silently; Ray's ``with_parameters`` around it made ``Prepared(Prepared(f))``, which lost the inner request and
    failed every trial (``Prepared.__call__() got an unexpected keyword argument``) (h150 A2). They merge as Ray's
    own nest: the objects of both, the outer's winning; Ray's ``with_resources`` overriding the request inside it;
    Ray's ``with_parameters`` keeping it."""
    from fluidsalus.tune._trainable import Prepared, adopt_ray_trainable, carried_request

    def merged(wrapped):
        with pytest.warns(UserWarning, match="wrapped by Ray Tune's") as caught:
            prepared = adopt_ray_trainable(wrapped)
        assert {w.filename for w in caught} == {__file__}
        assert isinstance(prepared, Prepared) and prepared.base is _takes_two
        return prepared

    fs_params = merged(rt.with_resources(tune.with_parameters(_takes_two, x=1), {"cpu": 2}))
    assert (fs_params.parameters, fs_params.resources, carried_request(fs_params)) == (
        {"x": 1}, {"cpu": 2.0}, "with_resources")
    both_params = merged(rt.with_parameters(tune.with_parameters(_takes_two, x=1), y=2))
    assert (both_params.parameters, both_params.resources, both_params({})) == ({"x": 1, "y": 2}, None,
                                                                               {"x": 1, "y": 2})
    outer_wins = merged(rt.with_parameters(tune.with_parameters(_takes_two, x=1), x=5))
    assert outer_wins.parameters == {"x": 5}
    factory = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}])
    kept = merged(rt.with_parameters(tune.with_resources(_takes_two, factory), y=2))
    assert (kept.parameters, kept.resources, kept.task_cpus, kept({})) == ({"y": 2}, {"cpu": 3.0}, 2.0,
                                                                           {"x": None, "y": 2})
    overridden = merged(rt.with_resources(tune.with_resources(_takes_two, factory), {"cpu": 1}))
    assert (overridden.resources, overridden.task_cpus) == ({"cpu": 1.0}, 0.0)
    # through fluidsalus's own wrapper and the Tuner too
    with pytest.warns(UserWarning, match="wrapped by Ray Tune's with_parameters"):
        outer = tune.with_parameters(rt.with_parameters(tune.with_resources(_takes_two, {"cpu": 2}), y=2), x=1)
    assert (outer.base, outer.parameters, outer.resources) == (_takes_two, {"x": 1, "y": 2}, {"cpu": 2.0})

def test_the_mock_trainable_module_registers_its_class_as_rays_does() -> None:
    """Ray's ``mock_trainable`` module has ``MOCK_TRAINABLE_NAME`` and ``register_mock_trainable()``; fluidsalus's
    twin lacked both, so a script of Ray's that registers the class by name failed at its import."""
    from fluidsalus.tune.registry import get_trainable_cls
    from fluidsalus.tune.utils.mock_trainable import MOCK_TRAINABLE_NAME, MyTrainableClass, register_mock_trainable

    register_mock_trainable()
    assert MOCK_TRAINABLE_NAME == "mock_trainable" and get_trainable_cls("mock_trainable") is MyTrainableClass


def test_a_subclass_of_rays_trainable_is_refused_before_ray_starts(storage: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray.tune.examples.pbt_example import PBTBenchmarkExample  # Ray's own, with no fluidsalus twin

    class RayStyle(rt.Trainable):
        pass

    def started(*args, **kwargs):
        raise AssertionError("Ray was started before the trainable was checked")

    pretend_ray_is(monkeypatch, lambda: False)
    monkeypatch.setattr(ray, "init", started)
    with pytest.raises(ConfigError, match="RayStyle \\(defined in .*test_tune_frontend\\) subclasses Ray's Trainable.*"
                                          "Make it subclass fluidsalus.tune.Trainable"):
        Tuner(RayStyle, run_config=tune.RunConfig(storage_path=storage)).fit()
    with pytest.raises(ConfigError, match="Make it subclass fluidsalus.tune.Trainable"):
        tune.run(RayStyle, storage_path=storage)
    with pytest.raises(ConfigError, match="PBTBenchmarkExample is Ray's own class \\(ray.tune.examples.pbt_example\\), "
                                          "which fluidsalus has no equivalent of"):
        Tuner(PBTBenchmarkExample, run_config=tune.RunConfig(storage_path=storage)).fit()
    # a subclass of Ray's MyTrainableClass: the import to change is that one (the message named `from ray.tune
    # import Trainable`, an import the script never wrote)
    from ray.tune.utils.mock_trainable import MyTrainableClass

    class Mocked(MyTrainableClass):
        pass

    with pytest.raises(ConfigError, match="Mocked .* subclasses Ray's MyTrainableClass .*Change `from "
                                          "ray.tune.utils.mock_trainable import MyTrainableClass` in "
                                          f"{re.escape(__file__)} to `from "
                                          "fluidsalus.tune.utils.mock_trainable import MyTrainableClass`"):
        Tuner(Mocked, run_config=tune.RunConfig(storage_path=storage)).fit()


def test_a_subclass_of_rays_trainable_outside_the_script_is_refused_with_advice_the_user_can_act_on(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed package's subclass of Ray's Trainable was refused with "change `from ray.tune import
    Trainable`", an import in someone else's package: the advice is now to run it from a function trainable (which
    runs: Ray's Trainable makes and steps outside Ray's trial runner, in the trial's folder given as its
    ``storage``). A module of the user's is named by its file. The advice is about the class whose own base is
    Ray's: a script's subclass of a library's class got advice to change an import it never wrote, and so did a
    library's subclass of Ray's MyTrainableClass (h150 B1)."""
    import sys
    import sysconfig
    import types

    from ray.tune.utils.mock_trainable import MyTrainableClass

    from fluidsalus.gpu.ray_session import trial_storage
    from fluidsalus.tune._trainable import adopt_ray_trainable

    def module(name: str, path: str, source: str = "from ray import tune\nclass Algo(tune.Trainable):\n"
                                                        "    def step(self):\n        return {'s': 1}\n"
               ) -> types.ModuleType:
        made = types.ModuleType(name)
        made.__file__ = path
        monkeypatch.setitem(sys.modules, name, made)
        exec(source, made.__dict__)  # noqa: S102 - a package's module, in small
        return made

    def refused(trainable: type) -> str:
        with pytest.raises(ConfigError) as caught:
            adopt_ray_trainable(trainable)
        return str(caught.value)

    purelib = os.path.join(sysconfig.get_path("purelib"), "somelib")
    installed = module("somelib.algos", os.path.join(purelib, "algos.py"))
    recipe = ("the import to change is the package's, not yours. Run it from a function trainable of yours that makes "
              "it and reports each step: `def train(config): algo = {}(config=config, "
              "storage=tune.get_context().get_storage()); for _ in range(steps): tune.report(algo.step())`")
    assert refused(installed.Algo).startswith("Tuner: Algo (from somelib.algos, an installed package) subclasses "
                                              "Ray's Trainable, which fluidsalus cannot run as a trainable; "
                                              + recipe.format("Algo"))

    class Mine(installed.Algo):  # the script's own subclass of the library's class
        pass

    assert refused(Mine).startswith(f"Tuner: Mine (defined in {__name__}) subclasses Ray's Trainable through "
                                    "Algo (from somelib.algos, an installed package), which fluidsalus cannot run as "
                                    "a trainable; " + recipe.format("Mine"))
    mocks = module("somelib.mocks", os.path.join(purelib, "mocks.py"),
                   "from ray.tune.utils.mock_trainable import MyTrainableClass\nclass LibMock(MyTrainableClass):\n"
                   "    pass\n")
    assert MyTrainableClass in mocks.LibMock.__bases__
    assert refused(mocks.LibMock).startswith(
        "Tuner: LibMock (from somelib.mocks, an installed package) subclasses Ray's MyTrainableClass "
        "(ray.tune.utils.mock_trainable), which fluidsalus cannot run as a trainable; " + recipe.format("LibMock"))
    # the advice works: made in a trial's folder (no folder of its own in ~/ray_results) and stepped outside Ray's
    # trial runner (Ray's Trainable moves into the folder: the test's working directory and environment are put back)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNE_ORIG_WORKING_DIR", raising=False)
    trial_dir = tmp_path / "experiment" / "trial_0"
    algo = installed.Algo(config={}, storage=trial_storage(str(trial_dir)))
    assert algo.step() == {"s": 1} and algo.logdir.rstrip(os.sep) == str(trial_dir)
    algo.stop()
    users = module("my_models", str(tmp_path / "my_models.py"))
    assert "change `from ray.tune import Trainable` in " + users.__file__ in refused(users.Algo)

    class FromMyModels(users.Algo):  # the file to change is my_models', not the script's
        pass

    assert refused(FromMyModels).startswith(
        f"Tuner: FromMyModels (defined in {__name__}) subclasses Ray's Trainable through Algo (defined in "
        f"my_models); fluidsalus runs function trainables and fluidsalus.tune.Trainable subclasses. Make Algo subclass "
        f"fluidsalus.tune.Trainable: change `from ray.tune import Trainable` in {users.__file__} to ")


# ---------------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------------


def _steps(config):
    for i in range(config.get("steps", 3)):
        tune.report({"score": config["x"] * (i + 1), "i": i})


def _run(trainable, storage, param_space=None, run_config_kwargs=None, **tune_kwargs):
    run_kwargs = {"storage_path": storage, "verbose": 0, **(run_config_kwargs or {})}
    tuner = Tuner(trainable, param_space=param_space if param_space is not None else {"x": tune.uniform(0, 1)},
                  tune_config=tune.TuneConfig(**tune_kwargs), run_config=tune.RunConfig(**run_kwargs))
    return tuner, tuner.fit()


def _step_of(checkpoint: tune.Checkpoint | None) -> int:
    """The step a checkpoint of :func:`_step_folder` was saved at; 0 for none."""
    if checkpoint is None:
        return 0
    with open(os.path.join(checkpoint.path, "step")) as f:
        return int(f.read())


def _step_folder(trial_dir: str, step: int) -> str:
    """A folder in the trial's own that holds ``step``, to report as a checkpoint."""
    folder = os.path.join(trial_dir, f"state_{step}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "step"), "w") as f:
        f.write(str(step))
    return folder


def _train_style(config):
    """A function trainable as Ray 2.7-2.9 wrote them: ``train.report`` and ``train.get_checkpoint``."""
    from fluidsalus import train

    start = _step_of(train.get_checkpoint())
    for step in range(start + 1, 4):
        folder = _step_folder(train.get_context().get_trial_dir(), step)
        train.report({"score": config["x"] * step, "started_at": start},
                     checkpoint=train.Checkpoint.from_directory(folder))


def test_a_script_with_ray_train_names_runs_with_its_imports_changed(ray_cluster, storage: str) -> None:
    from fluidsalus import train

    tuner = Tuner(_train_style, param_space={"x": tune.grid_search([1, 2])},
                  tune_config=tune.TuneConfig(metric="score", mode="max"),
                  run_config=train.RunConfig(storage_path=storage, verbose=0,
                                             checkpoint_config=train.CheckpointConfig(num_to_keep=1),
                                             failure_config=train.FailureConfig(max_failures=1)))
    grid = tuner.fit()
    assert grid.num_errors == 0 and grid.get_best_result().metrics["score"] == 6
    assert all(len(r.best_checkpoints) == 1 and r.checkpoint.path.endswith("checkpoint_000003") for r in grid)
    # A trial's result read back from its folder alone (ray.tune.Result.from_path).
    best = grid.get_best_result()
    again = tune.Result.from_path(best.path)
    assert (again.metrics["score"], again.config, again.checkpoint.path) == (6, best.config, best.checkpoint.path)
    assert type(again.filesystem).__name__ == type(grid.filesystem).__name__ == "LocalFileSystem"
    with pytest.raises(ConfigError, match="has no trial folder 'nope'"):
        tune.Result.from_path(os.path.join(grid.experiment_path, "nope"))
    with pytest.raises(ConfigError, match="is not a trial folder of a fluidsalus experiment"):
        tune.Result.from_path(os.path.join(storage, "t0"))


def test_tune_bohb_with_hyperband_for_bohb_runs_a_class_trainable(ray_cluster, storage: str) -> None:
    """Ray's bohb_example.py in small (its own run is behind FLUIDSALUS_RUN_SLOW): TuneBOHB behind a
    ConcurrencyLimiter with HyperBandForBOHB over a class Trainable, which pauses at rungs and resumes."""
    from fluidsalus.tune.search.bohb import TuneBOHB
    from fluidsalus.tune.utils.mock_trainable import MyTrainableClass

    search = tune.search.ConcurrencyLimiter(TuneBOHB(seed=0), max_concurrent=4)
    scheduler = tune.schedulers.HyperBandForBOHB(time_attr="training_iteration", max_t=4, reduction_factor=2,
                                                 stop_last_trials=False)
    grid = Tuner(MyTrainableClass, param_space={"width": tune.uniform(0, 20), "height": tune.uniform(-100, 100)},
                 tune_config=tune.TuneConfig(metric="episode_reward_mean", mode="max", scheduler=scheduler,
                                             search_alg=search, num_samples=8),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0, stop={"training_iteration": 4})).fit()
    assert len(grid) == 8 and grid.num_errors == 0
    ends = sorted(r.metrics["training_iteration"] for r in grid)
    assert ends[-1] == 4 and ends[0] < 4  # the best reached max_t; others were stopped at a rung
    best = grid.get_best_result()
    assert set(best.config) == {"width", "height"}
    assert best.metrics["episode_reward_mean"] == max(r.metrics["episode_reward_mean"] for r in grid)


def test_optuna_search_with_hyperband_runs_and_the_study_learns_every_trials_last_value(ray_cluster,
                                                                                     storage: str) -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    def steps(config):
        for _ in range(4):
            tune.report({"value": config["x"]})

    search = OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=0))
    tuner = Tuner(steps, param_space={"x": tune.uniform(0, 1)},
                  tune_config=tune.TuneConfig(metric="value", mode="max", search_alg=search, num_samples=10,
                                              scheduler=tune.schedulers.HyperBandScheduler(max_t=4,
                                                                                           reduction_factor=2)),
                  run_config=tune.RunConfig(storage_path=storage, verbose=0))
    grid = tuner.fit()
    assert len(grid) == 10 and grid.num_errors == 0
    # max_t=4, eta=2: brackets of 3 (to 4), 3 (to 2, the best 2 on to 4) and 4 (to 1, the best 2 to 2, 1 to 4)
    assert sorted(r.metrics["training_iteration"] for r in grid) == [1, 1, 2, 2, 4, 4, 4, 4, 4, 4]
    study = tuner.plan.searcher.optuna.study
    told = sorted((t.params["x"], t.value, t.state.name) for t in study.get_trials())
    assert told == sorted((r.config["x"], r.metrics["value"], "COMPLETE") for r in grid)


def test_median_stopping_rule_stops_trials_below_the_median_in_a_run(ray_cluster, storage: str) -> None:
    def steps(config):
        for _ in range(6):
            time.sleep(0.1)  # a stop lands at the trial's next report; a trial of instant steps would end first
            tune.report({"value": config["x"]})

    rule = tune.schedulers.MedianStoppingRule(time_attr="training_iteration", grace_period=1,
                                              min_samples_required=2)
    grid = Tuner(steps, param_space={"x": tune.grid_search([5, 4, 3, 0, 1])},
                 tune_config=tune.TuneConfig(metric="value", mode="max", scheduler=rule, max_concurrent_trials=2),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    ends = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    # 5 and 4 run first, with too few others to judge them; 3, 0 and 1 are each below the median of the
    # running means of 5 and 4 (and of each other) from their first result on
    assert ends[5] == ends[4] == 6 and max(ends[3], ends[0], ends[1]) < 6
    assert grid.num_errors == 0 and grid.get_best_result().config["x"] == 5


def test_fit_runs_a_grid_with_a_dict_stop(ray_cluster, storage: str) -> None:
    _, grid = _run(_steps, storage, {"x": tune.grid_search([0.1, 0.5, 0.9]), "steps": 5},
                   run_config_kwargs={"name": "grid", "stop": {"training_iteration": 2}},
                   metric="score", mode="max", num_samples=1)
    assert len(grid) == 3 and grid.num_errors == 0
    assert all(r.metrics["training_iteration"] == 2 for r in grid)
    assert grid.get_best_result().config["x"] == 0.9
    assert grid.experiment_path == os.path.join(storage, "grid")


def test_with_parameters_and_with_resources(ray_cluster, storage: str) -> None:
    data = np.arange(200_000, dtype=np.float64)

    def train(config, data=None, offset=0):
        resources = tune.get_context().get_trial_resources()
        tune.report({"total": float(data.sum()) + offset, "gpu": resources["gpu"], "cpu": resources["cpu"]})

    trainable = tune.with_resources(tune.with_parameters(train, data=data, offset=1), {"cpu": 1, "gpu": 0.25})
    entry, refs = make_entry(trainable, None)
    assert len(cloudpickle.dumps(entry)) < data.nbytes / 10  # the array travels through Ray's store, not the payload
    del entry, refs
    _, grid = _run(trainable, storage, num_samples=2)
    assert [r.metrics["total"] for r in grid] == [float(data.sum()) + 1] * 2
    assert all((r.metrics["gpu"], r.metrics["cpu"]) == (0.25, 1.0) for r in grid)
    # The gpu request reached the planner as its hint (the run's recorded settings).
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        assert store.experiment()["spec"]["gpu_per_trial"] == 0.25
    finally:
        store.close()


def test_the_planner_hint_is_the_gpu_of_a_static_request_only() -> None:
    assert gpu_hint({"cpu": 1.0, "gpu": 0.25}) == 0.25
    assert gpu_hint({"cpu": 2.0}) is None and gpu_hint({"gpu": 0.0}) is None and gpu_hint(None) is None
    assert gpu_hint(lambda config: {"gpu": 0.5}) is None  # per trial, known only at its start


def test_the_cpu_request_is_a_static_requests_positive_cpu_only() -> None:
    assert cpu_request({"cpu": 0.5, "gpu": 0.25}) == 0.5 and cpu_request({"cpu": 2.0}) == 2.0
    assert cpu_request({"gpu": 1.0}) is None and cpu_request({"cpu": 0.0}) is None and cpu_request(None) is None
    assert cpu_request(lambda config: {"cpu": 0.5}) is None  # per trial, known only at its start


#: How long a trial of the test below waits for the others to start (its whole run when they do start).
PEER_WAIT_S = 10.0


def _waits_for_its_peers(config):
    """Marks its start in ``config["dir"]``, then waits until ``config["n"]`` trials have started (or gives up)."""
    open(os.path.join(config["dir"], str(config["i"])), "w").close()
    deadline = time.monotonic() + PEER_WAIT_S
    while len(os.listdir(config["dir"])) < config["n"] and time.monotonic() < deadline:
        time.sleep(0.02)
    resources = tune.get_context().get_trial_resources()
    tune.report({"peers": len(os.listdir(config["dir"])), "cpu": resources["cpu"]})


def test_a_fractional_cpu_request_runs_more_trials_at_once_on_each_core(ray_cluster, storage: str, tmp_path) -> None:
    # {"cpu": 0.5} on the shared 2-CPU Ray: Ray runs four trials at once, and so does fluidsalus (two 1-core
    # devices of two lanes each). With one trial per core, the first two would wait in vain and see only two.
    import ray

    n = 2 * int(ray.cluster_resources()["CPU"])
    started = tmp_path / "started"
    started.mkdir()
    trainable = tune.with_resources(_waits_for_its_peers, {"cpu": 0.5})
    _, grid = _run(trainable, storage, param_space={"dir": str(started), "n": n, "i": tune.grid_search(list(range(n)))})
    assert sorted((r.metrics["peers"], r.metrics["cpu"]) for r in grid) == [(n, 0.5)] * n
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        assert store.experiment()["spec"]["cpus_per_trial"] == 0.5
    finally:
        store.close()


class _AsksForTwoCpus(tune.Trainable):
    """RLlib's way to declare a trial's resources: a constant ``default_resource_request``."""

    @classmethod
    def default_resource_request(cls, config):
        return tune.PlacementGroupFactory([{"CPU": 2}])

    def step(self):
        return {"cpu": tune.get_context().get_trial_resources()["cpu"], "done": True}


def _cpus_per_trial_of(grid) -> float | None:
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        return store.experiment()["spec"]["cpus_per_trial"]
    finally:
        store.close()


def test_a_function_that_answers_one_request_counts_it_as_a_fixed_request(ray_cluster, storage: str) -> None:
    """A constant ``default_resource_request`` of two CPUs ran a trial per core on 2 cores, where Ray runs one at a
    time, and a lambda's ``{"cpu": 0.5, "gpu": 0.5}`` half as many as Ray (h89's B4): a function's request set no
    count. Its answers for the space's first configurations, asked before the devices start, now count as the
    fixed request when they agree; a request that differs per configuration still sets none."""
    no_save = {"checkpoint_config": tune.CheckpointConfig(checkpoint_at_end=False)}  # it has no save_checkpoint
    _, grid = _run(_AsksForTwoCpus, storage, param_space={"x": tune.grid_search([1, 2])}, run_config_kwargs=no_save)
    assert [r.metrics["cpu"] for r in grid] == [2.0, 2.0]
    assert _cpus_per_trial_of(grid) == 2.0  # one trial at a time on the 2-core test cluster, as Ray
    _, grid = _run(tune.with_resources(_reports_its_gpus, lambda config: {"cpu": 0.5}), storage,
                   param_space={"x": tune.grid_search([1, 2])})
    assert _cpus_per_trial_of(grid) == 0.5
    by_x = tune.with_resources(_reports_its_gpus, lambda config: {"cpu": config["x"]})
    _, grid = _run(by_x, storage, param_space={"x": tune.grid_search([1, 2])})
    assert grid.num_errors == 0 and _cpus_per_trial_of(grid) is None  # per trial: no count, as before
    from fluidsalus.tune._trainable import probe_request

    space = {"x": tune.uniform(0, 1)}
    constant = tune.with_resources(_reports_its_gpus, lambda config: tune.PlacementGroupFactory(
        [{"CPU": 0.5, "GPU": 0.5}, {"CPU": 1}]))
    assert probe_request(make_entry(constant, None)[0], space) == (1.0, {"cpu": 1.5, "gpu": 0.5})
    fails_later = tune.with_resources(_reports_its_gpus, lambda config: {"cpu": 1 / (config["x"] > 0.5)})
    assert probe_request(make_entry(fails_later, None)[0], space)[1] is None
    nothing = tune.with_resources(_reports_its_gpus, lambda config: None)
    assert probe_request(make_entry(nothing, None)[0], space) == (0.0, {})
    # the probe's draws leave the global generators as they were: a sample_from drawing from np.random then draws
    # what it would without the probe (a review: a resource function changed a seeded run's configurations)
    import random

    drawn = {"x": tune.sample_from(lambda spec: float(np.random.uniform()) + random.random())}
    np.random.seed(0)
    random.seed(0)
    expected = (float(np.random.uniform()), random.random())
    np.random.seed(0)
    random.seed(0)
    probe_request(make_entry(constant, None)[0], drawn)
    assert (float(np.random.uniform()), random.random()) == expected


def test_a_request_the_run_does_not_reserve_is_warned_of_once(ray_cluster, storage: str) -> None:
    """Custom resources and ``memory`` were recorded and silently not reserved (Ray limits the trials at once by
    them and places trials on the nodes that have them), and a GPU request on a cluster without a GPU ran on CPU
    devices, silently, where Ray waits for ever (h89's B1/B5). Each is warned of once per run, naming the keys."""
    request = {"cpu": 1, "gpu": 0.5, "memory": 1e6, "custom_resources": {"special": 1}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, grid = _run(tune.with_resources(_reports_its_gpus, request), storage,
                       param_space={"x": tune.grid_search([1, 2])})
    assert grid.num_errors == 0
    messages = [str(w.message) for w in caught if str(w.message).startswith("fluidsalus.tune: each trial asks")]
    assert len(messages) == 2, messages
    assert "asks for 0.5 GPU, but the Ray cluster has no GPU" in messages[0]
    assert "asks for memory: 1e+06, special: 1, which fluidsalus records" in messages[1]
    assert "max_concurrent_trials" in messages[1]
    with warnings.catch_warnings(record=True) as caught:  # CPUs only (custom amounts of 0): nothing to say
        warnings.simplefilter("always")
        _run(tune.with_resources(_reports_its_gpus, {"cpu": 1, "gpu": 0, "custom_resources": {"special": 0}}),
             storage, num_samples=1)
    assert not [w for w in caught if str(w.message).startswith("fluidsalus.tune: each trial asks")]


def _reports_its_gpus(config):
    tune.report({"gpu": tune.get_context().get_trial_resources().get("gpu", 0.0)})


def test_a_request_of_several_gpus_per_trial_runs_on_one_device_and_says_so(ray_cluster, storage: str) -> None:
    """Ray gives such a trial two GPUs (or never starts it where no node has them); here it ran on one device,
    silently, while get_trial_resources() said 2 (a helper's side-by-side run)."""
    with pytest.warns(UserWarning, match=r"each trial asks for 2 GPUs, but runs on one device .*data_parallel"):
        _, grid = _run(tune.with_resources(_reports_its_gpus, {"cpu": 1, "gpu": 2}), storage, num_samples=1)
    assert grid[0].metrics["gpu"] == 2.0 and grid[0].error is None


def _starts_a_task_of_one_cpu(config):
    import ray

    @ray.remote(num_cpus=1)
    def square(x: float) -> float:
        return x * x

    # (a bound, not a test of speed: the task waited for ever, as long as the run's devices held every core)
    tune.report({"square": ray.get(square.remote(config["x"]), timeout=60),
                 "cpu": tune.get_context().get_trial_resources()["cpu"]})


def test_a_placement_group_factorys_later_cpu_bundles_are_kept_free_for_the_tasks_a_trial_starts(
        ray_cluster, storage: str) -> None:
    """Ray keeps a factory's later bundles for the Ray tasks and actors a trial starts; they were summed into the
    trial's request and the run's devices held every core, so such a task waited for ever (a helper's side-by-side
    run: it was only warned of). On the 2-core test cluster the devices now hold one core and leave one to Ray."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kept, so nothing to warn of
        trainable = tune.with_resources(_starts_a_task_of_one_cpu,
                                        tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}]))
    assert trainable.task_cpus == 1.0
    _, grid = _run(trainable, storage, param_space={"x": tune.grid_search([2.0, 3.0])})
    assert grid.num_errors == 0
    assert sorted(r.metrics["square"] for r in grid) == [4.0, 9.0]
    assert {r.metrics["cpu"] for r in grid} == {2.0}  # the request as recorded: the bundles summed, as before


class _StartsATaskOfOneCpu(tune.Trainable):
    """RLlib's way: the class asks for a bundle for itself and one for the remote worker it starts."""

    @classmethod
    def default_resource_request(cls, config):
        return tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}])

    def step(self):
        import ray

        @ray.remote(num_cpus=1)
        def square(x: float) -> float:
            return x * x

        # (a bound, not a test of speed: the task waited as long as the run's devices held every core)
        return {"square": ray.get(square.remote(self.config["x"]), timeout=30), "done": True}


def test_a_trainables_default_resource_request_keeps_its_later_bundles_cores_for_its_tasks(
        ray_cluster, storage: str) -> None:
    """Its factory was known only at each trial's start, once the devices held every core: the worker it
    started waited for a core, where Ray's trials ran (a review at stop 45). The request is now asked once with
    the space's first configuration before the devices start (``probe_task_cpus``), and its later bundles' cores
    are left to Ray."""
    no_save = {"checkpoint_config": tune.CheckpointConfig(checkpoint_at_end=False)}  # it has no save_checkpoint
    _, grid = _run(_StartsATaskOfOneCpu, storage, param_space={"x": tune.grid_search([2.0, 3.0])},
                   run_config_kwargs=no_save)
    assert grid.num_errors == 0
    assert sorted(r.metrics["square"] for r in grid) == [4.0, 9.0]


def test_a_placement_group_factory_from_a_function_of_the_config_warns_that_it_keeps_no_cores() -> None:
    """A function's factory is known only at each trial's start, after the devices took the cores."""
    factory = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}])
    with pytest.warns(UserWarning, match=r"keeps more cores for the Ray tasks.*than the run kept.*fixed "
                                         r"PlacementGroupFactory"):
        normalize_resources(factory)
    assert (task_cpus(factory), cpu_request(normalize_resources(factory, keeps_task_cpus=True), 2.0)) == (2.0, 1.0)
    # before the devices start, the function is asked once with the space's first configuration (a grid's first
    # value; seed 0 for the rest), and its later bundles' cores are kept for every trial
    space = {"workers": tune.grid_search([3, 1]), "lr": tune.uniform(0, 1)}
    by_workers = tune.with_resources(_reports_its_gpus, lambda config: tune.PlacementGroupFactory(
        [{"CPU": 1}] + [{"CPU": 1}] * config["workers"]))
    assert probe_task_cpus(make_entry(by_workers, None)[0], space) == 3.0
    needs_more = tune.with_resources(_reports_its_gpus, lambda config: config["not in the space"])
    assert probe_task_cpus(make_entry(needs_more, None)[0], space) == 0.0  # asked again per trial, as before
    assert probe_task_cpus(make_entry(tune.with_resources(_reports_its_gpus, {"cpu": 2}), None)[0], space) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one bundle, or later bundles of no CPU: nothing to say
        tune.with_resources(_reports_its_gpus, tune.PlacementGroupFactory([{"CPU": 1, "GPU": 1}]))
        tune.with_resources(_reports_its_gpus, tune.PlacementGroupFactory([{"CPU": 1}, {"GPU": 1}]))
        normalize_resources(tune.PlacementGroupFactory([{"CPU": 1}, {"GPU": 1}]))


def test_a_placement_group_factorys_later_gpu_bundles_are_refused_before_the_devices_start(
        ray_cluster, storage: str) -> None:
    """Ray keeps a factory's later GPU bundles for the tasks a trial starts (``.options(num_gpus=1)``); here the
    device actors held every GPU, so such a task waited for ever, silently (a helper's side-by-side run: h89's A1).
    fluidsalus cannot keep GPUs free, so fit() and tune.run refuse the factory, naming the bundle, before any device
    starts; a function's factory is refused when its answer for the space's first configuration has one, and
    fails its trial when only that trial's has."""
    factory = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}, {"CPU": 0, "GPU": 0.5}])
    fixed = tune.with_resources(_reports_its_gpus, factory)  # (Ray accepts it here too; the run is what fails)
    refused = r"with_resources: the PlacementGroupFactory's bundles\[2\] asks for 0.5 GPU.*first bundle.*num_gpus=0"
    with pytest.raises(ConfigError, match=refused):
        _run(fixed, storage, num_samples=1)
    with pytest.raises(ConfigError, match=refused):  # kept by with_parameters, given by resources_per_trial
        tune.run(tune.with_parameters(_reports_its_gpus, unused=1), resources_per_trial=factory, num_samples=1,
                 storage_path=storage, verbose=0)
    assert not os.path.exists(storage)  # nothing started
    with pytest.raises(ConfigError, match=r"the resource request of .*space's first configuration.*bundles\[1\] "
                                          r"asks for 1 GPU"):
        _run(tune.with_resources(_reports_its_gpus, lambda config: tune.PlacementGroupFactory(
            [{"CPU": 1}, {"GPU": 1}])), storage, num_samples=1)
    # a function whose first configuration's answer has none: the trial whose answer has one fails (not waits)
    by_x = tune.with_resources(_reports_its_gpus, lambda config: tune.PlacementGroupFactory(
        [{"CPU": 1}] + [{"GPU": 1}] * config["x"]))
    _, grid = _run(by_x, storage, param_space={"x": tune.grid_search([0, 1])})
    assert [(r.config["x"], r.error is None) for r in sorted(grid, key=lambda r: r.config["x"])] == \
        [(0, True), (1, False)]
    assert "bundles[1] asks for 1 GPU" in str(next(r.error for r in grid if r.error is not None))
    # a GPU in the trial's own (first) bundle is its device's, as before
    from fluidsalus.tune._trainable import task_gpu_bundle

    assert task_gpu_bundle(tune.PlacementGroupFactory([{"CPU": 1, "GPU": 1}, {"CPU": 1}])) is None


def test_rays_own_with_parameters_and_with_resources_are_translated(ray_cluster, storage: str) -> None:
    def train(config, data=None):
        tune.report({"total": float(data.sum()), "gpu": tune.get_context().get_trial_resources()["gpu"]})

    wrapped = rt.with_parameters(rt.with_resources(train, {"cpu": 1, "gpu": 0.5}), data=np.ones(10))
    with pytest.warns(UserWarning, match="Ray Tune's with_parameters and with_resources") as caught:
        _, grid = _run(wrapped, storage, num_samples=1)
    assert (grid[0].metrics["total"], grid[0].metrics["gpu"]) == (10.0, 0.5)
    # at the script's line, whichever entry point took the trainable (callers_stacklevel)
    assert {os.path.abspath(w.filename) for w in caught if "with_parameters" in str(w.message)} == {
        os.path.abspath(__file__)}


class _Recorder(tune.Callback):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.events.append(("setup", num_samples, stop))

    def on_trial_start(self, iteration, trials, trial, **info):
        self.events.append(("start", trial.trial_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.events.append(("result", trial.trial_id, trial.config["x"], result["config"]["x"],
                            result["training_iteration"], iteration))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.events.append(("complete", trial.trial_id, trial.last_result["training_iteration"], len(trials)))

    def on_experiment_end(self, trials, **info):
        self.events.append(("end", len(trials)))


class _SeesPrevious(tune.Callback):
    """Records what ``trial.last_result`` holds in each hook: Ray's trial is updated after ``on_trial_result``."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.seen.append(("start", trial.last_result.get("i"), trial.last_result["config"]["x"] == trial.config["x"]))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.append(("result", result["i"], trial.last_result.get("i")))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.seen.append(("complete", trial.last_result.get("i"), trial.last_result["done"]))


def test_a_callback_sees_the_trials_previous_result_in_on_trial_result_as_in_ray(ray_cluster, storage: str) -> None:
    """Ray updates ``trial.last_result`` after ``on_trial_result`` (a callback compares the new result with the
    last one) and starts a trial with a result of its id and config: here the trial already held the new result,
    and ``trial.last_result`` was None at the start (``.get`` raised)."""
    seer = _SeesPrevious()
    _, grid = _run(_steps, storage, {"x": 2.0}, run_config_kwargs={"callbacks": [seer]})
    assert grid.num_errors == 0
    # (and the last result says done in on_trial_complete, as Ray's; it said done=False)
    assert seer.seen == [("start", None, True), ("result", 0, None), ("result", 1, 0), ("result", 2, 1),
                         ("complete", 2, True)]


def test_a_tuner_leaves_its_store_whole_in_experiment_db_with_no_log_beside_it(ray_cluster, storage: str) -> None:
    """The callbacks' store reader closed after the run's writer, so every row stayed in ``experiment.db-wal``
    beside a 4 KiB ``experiment.db`` (a helper copied the database alone: "not a fluidsalus experiment store")."""
    _, grid = _run(_steps, storage, {"x": 2.0}, run_config_kwargs={"callbacks": [_SeesPrevious()], "name": "whole"})
    assert grid.num_errors == 0
    folder = os.path.join(storage, "whole")
    assert not [name for name in os.listdir(folder) if name.startswith(f"{DB_FILENAME}-")]
    with ExperimentStore.open(folder, readonly=True, immutable=True) as store:
        assert len(store.results()) == 3


class _Activation:
    """A class in the search space, as a model's activation is."""


def _reports_x(config):
    tune.report({"score": config["x"]})


def test_a_results_config_keeps_the_classes_functions_and_tuples_of_the_space(ray_cluster, storage: str) -> None:
    """``build(**result.config)`` needs the objects, as Ray's Result gives them: they came back from the store's
    JSON as a class's repr string, a function's repr and lists (a helper's differential test against Ray)."""
    space = {"x": tune.uniform(0, 1), "act": _Activation, "fn": np.tanh, "layers": tune.choice([(64, 32)]),
             "size": (5, 6), "n": np.int64(3)}
    _, grid = _run(_reports_x, storage, space, metric="score", mode="max", num_samples=2)
    best = grid.get_best_result()
    for config in (best.config, best.metrics["config"]):
        assert config["act"] is _Activation and config["fn"] is np.tanh
        assert config["layers"] == (64, 32) and config["size"] == (5, 6) and type(config["n"]) is np.int64
    frame = grid.get_dataframe()
    assert frame["config/act"].iloc[0] is _Activation and frame["config/layers"].iloc[0] == (64, 32)


def _reports_slashed(config):
    tune.report({"score": config["optim/lr"] + config["m"]["a/b"]})


def test_a_space_whose_keys_hold_slashes_runs_as_in_ray(ray_cluster, storage: str) -> None:
    """Flattened names such as ``"optim/lr"`` were refused (the run's record of its space flattened it strictly);
    Ray runs them (a helper's differential test)."""
    space = {"optim/lr": tune.grid_search([0.1, 0.2]), "m": {"a/b": 1}}
    _, grid = _run(_reports_slashed, storage, space, metric="score", mode="max")
    assert grid.num_errors == 0 and sorted(r.config["optim/lr"] for r in grid) == [0.1, 0.2]
    assert grid.get_best_result().metrics["score"] == pytest.approx(1.2)


class _NoSave(tune.Trainable):
    """A class Trainable without save_checkpoint (Ray's base raises NotImplementedError)."""

    def setup(self, config):
        self.i = 0

    def step(self):
        self.i += 1
        return {"score": self.i * self.config["x"]}


@pytest.mark.parametrize("stop", [None, {"training_iteration": 6}])
def test_asha_runs_a_class_trainable_without_save_checkpoint_and_its_ends_fail_as_in_ray(ray_cluster, storage: str,
                                                                                       stop) -> None:
    """Under the Tuner's default checkpoint_at_end, the save at ASHA's first rung raised: the result went out as
    not paused, and the promotion of a RUNNING trial ended the whole run with a FluidsalusError. As in Ray (checked
    with Ray 2.60), a promoted trial goes on, and each trial fails where it ends: at the rung ASHA stops it at, or
    at max_t (a pause at the last budget when no stop rule ends it first: a review)."""
    scheduler = tune.schedulers.ASHAScheduler(max_t=6, grace_period=1, reduction_factor=4)
    _, grid = _run(_NoSave, storage, {"x": tune.grid_search([1, 2, 3, 4])}, metric="score", mode="max",
                   scheduler=scheduler, max_concurrent_trials=1,
                   run_config_kwargs={"stop": stop} if stop is not None else None)
    ends = [(r.metrics["training_iteration"], type(r.error).__name__ if r.error else None) for r in grid]
    assert all(error is not None and "NotImplementedError" in error for _, error in ends), ends
    assert max(iteration for iteration, _ in ends) == 6
    # Ray's own reader of a trial folder finds the error (its error.pkl; before, none was written: error None)
    again = rt.Result.from_path(grid[0].path)
    assert isinstance(again.error, NotImplementedError) and str(again.error) == str(grid[0].error)


class _NoSaveDoneAtTwo(_NoSave):
    def step(self):
        return dict(super().step(), done=self.i >= 2)


def test_a_class_trainable_whose_end_save_fails_keeps_its_last_result_as_in_ray(ray_cluster, storage: str) -> None:
    """Under the Tuner's default checkpoint_at_end, the save that went with the result that ended the trial raised
    before the result was reported: the trial failed with no result at all (or its previous one, without done). Ray
    has the result before it saves (checked with Ray 2.60: iteration 2, the score, done True, and the error)."""
    _, grid = _run(_NoSaveDoneAtTwo, storage, {"x": 3})
    result = grid[0]
    assert isinstance(result.error, NotImplementedError)
    assert {k: result.metrics.get(k) for k in ("training_iteration", "score", "done")} == {
        "training_iteration": 2, "score": 6, "done": True}


class _CleanupRaises(tune.Trainable):
    """Saves and restores; cleanup() raises; step() raises at iteration 2 when config["fail"]."""

    def setup(self, config):
        self.i = 0

    def step(self):
        self.i += 1
        if self.config["fail"] and self.i == 2:
            raise ValueError("boom in step at 2")
        return {"score": self.i}

    def save_checkpoint(self, checkpoint_dir):
        return {"i": self.i}

    def load_checkpoint(self, checkpoint):
        self.i = checkpoint["i"]

    def cleanup(self):
        raise RuntimeError("boom in cleanup")


def test_an_error_in_cleanup_neither_fails_a_finished_trial_nor_hides_a_steps_error(ray_cluster,
                                                                                    storage: str) -> None:
    """As in Ray (checked with Ray 2.60), what ``cleanup()`` raises is logged, not the trial's: a trial that
    reached its stop rule ended ERROR, and ``max_failures`` ran it again from its checkpoint past the rule (to
    iteration 4 of 2); a ``step()``'s error was replaced by cleanup's (a helper's side-by-side run)."""
    _, grid = _run(_CleanupRaises, storage, {"fail": tune.grid_search([False, True])},
                   run_config_kwargs={"stop": {"training_iteration": 2},
                                      "failure_config": tune.FailureConfig(max_failures=2)})
    finished, failed = sorted(grid, key=lambda r: r.config["fail"])
    assert finished.error is None and finished.metrics["training_iteration"] == 2
    assert list(finished.metrics_dataframe["training_iteration"]) == [1, 2]
    assert isinstance(failed.error, ValueError) and "boom in step at 2" in str(failed.error)


class _FailsOnceAtThree(tune.Trainable):
    """Writes one file per checkpoint and reads it back as the only file of its folder; fails once at its third
    step (a flag file remembers); reports the iteration it saw before the step."""

    def setup(self, config):
        self.value = 0

    def step(self):
        seen = self.iteration
        self.value += 1
        if self.value == 3 and not os.path.exists(self.config["flag"]):
            open(self.config["flag"], "w").close()
            raise RuntimeError("fails once at its third step")
        return {"seen": seen, "value": self.value}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "value.txt"), "w") as f:
            f.write(str(self.value))

    def load_checkpoint(self, checkpoint_dir):
        (name,) = os.listdir(checkpoint_dir)
        with open(os.path.join(checkpoint_dir, name)) as f:
            self.value = int(f.read())
        assert self.iteration == self.value, (self.iteration, self.value)  # as Ray's restore sets it first


def test_a_retried_class_trainable_continues_its_counters_from_the_store(ray_cluster, storage: str,
                                                                         tmp_path) -> None:
    """Its checkpoint folder holds only what save_checkpoint wrote (no ``_trainable_state.json``), and its
    ``iteration`` from the restore on, ``load_checkpoint`` included (a review found 0 there), is the checkpoint's,
    as the store recorded it."""
    _, grid = _run(_FailsOnceAtThree, storage, {"flag": str(tmp_path / "failed")},
                   run_config_kwargs={"stop": {"training_iteration": 5},
                                      "failure_config": tune.FailureConfig(max_failures=1),
                                      "checkpoint_config": tune.CheckpointConfig(checkpoint_frequency=1)})
    (result,) = grid
    assert result.error is None and os.path.exists(tmp_path / "failed")
    frame = result.metrics_dataframe
    assert list(frame["training_iteration"]) == [1, 2, 3, 4, 5] and list(frame["value"]) == [1, 2, 3, 4, 5]
    assert list(frame["seen"]) == [0, 1, 2, 3, 4]
    assert os.listdir(result.checkpoint.path) == ["value.txt"]


def _fails_once_at_four(config):
    start = 0
    if tune.get_checkpoint() is not None:
        with tune.get_checkpoint().as_directory() as folder, open(os.path.join(folder, "i")) as f:
            start = int(f.read())
    for i in range(start + 1, 21):
        flag = os.path.join(config["flags"], str(config["k"]))
        if i == 4 and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("fails once before its 4th report")
        folder = os.path.join(tune.get_context().get_trial_dir(), f"tmp_{i}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "i"), "w") as f:
            f.write(str(i))
        tune.report({"x": float(i)}, checkpoint=tune.Checkpoint.from_directory(folder))
        time.sleep(0.1)


def test_a_retried_trial_is_judged_by_a_stopper_that_counted_its_earlier_attempt(ray_cluster, storage: str,
                                                                                 tmp_path) -> None:
    """Each device judged its trials with a copy of the stopper of its own, which knew only the trials that had run
    there: a trial retried on the other device counted ``MaximumIterationStopper(6)``'s results afresh and ran to
    iteration 9 (a helper's side-by-side run: 3 of 3; Ray stops every trial at 6). A continuing attempt now takes
    the driver's copy, which saw all its results."""
    flags = tmp_path / "flags"
    flags.mkdir()
    _, grid = _run(_fails_once_at_four, storage, {"k": tune.grid_search([1, 2, 3]), "flags": str(flags)},
                   run_config_kwargs={"stop": tune.stopper.MaximumIterationStopper(6),
                                      "failure_config": tune.FailureConfig(max_failures=1)})
    assert len(os.listdir(flags)) == 3 and grid.num_errors == 0
    assert sorted(r.metrics["training_iteration"] for r in grid) == [6, 6, 6]


class _FlagStopper(tune.Stopper):
    """Stops every trial once its ``flag`` is set (by a callback, on the driver); its own ``stop_all``."""

    def __init__(self) -> None:
        self.flag = False

    def __call__(self, trial_id, result) -> bool:
        return self.flag

    def stop_all(self) -> bool:
        return False


class _SetsTheFlag(tune.Callback):
    def __init__(self, stopper: _FlagStopper) -> None:
        self.stopper = stopper

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["training_iteration"] >= 3:
            self.stopper.flag = True


def _thirty_steps(config):
    for i in range(30):
        tune.report({"i": i})
        time.sleep(0.02)


def test_a_stopper_whose_state_changes_on_the_driver_stops_trials_there(ray_cluster, storage: str) -> None:
    """A stopper whose ``stop_all`` may end the run makes each result wait for the driver's copy: its ``__call__``
    answer now stops the trial too, so state the driver's copy gathered (a callback's "stop now" flag) counts, as in
    Ray's one copy; the devices' copies never saw it and both trials ran all 30 iterations (a helper's side-by-side
    run: Ray stops them at 3 and 4)."""
    stopper = _FlagStopper()
    _, grid = _run(_thirty_steps, storage, {"x": tune.grid_search([1, 2])},
                   run_config_kwargs={"stop": stopper, "callbacks": [_SetsTheFlag(stopper)]})
    assert grid.num_errors == 0
    assert all(r.metrics["training_iteration"] <= 5 for r in grid), [r.metrics["training_iteration"] for r in grid]


@pytest.mark.parametrize("data_parallel", [False, True])
def test_the_drivers_stopper_stops_a_trial_at_the_result_after_the_flag_one_device_or_data_parallel(
        ray_cluster, storage: str, data_parallel: bool) -> None:
    """The callback sets the flag on result 3, before that result's verdict goes out: the driver's copy stops the
    trial at result 4, as Ray's one copy does. A data-parallel trial's results did not wait for the driver, so the
    stop reached it at a later report (5 in a review's run); rank 0 now waits and its workers with it."""
    from fluidsalus import distributed

    stopper = _FlagStopper()
    trainable = distributed.data_parallel(workers=2)(_thirty_steps) if data_parallel else _thirty_steps
    _, grid = _run(trainable, storage, {"x": 1},
                   run_config_kwargs={"stop": stopper, "callbacks": [_SetsTheFlag(stopper)]})
    (result,) = grid
    assert result.error is None and result.metrics["training_iteration"] == 4
    assert list(result.metrics_dataframe["done"]) == [False, False, False, True]


class _ThirtyStepsSaved(tune.Trainable):
    def setup(self, config):
        self.i = 0

    def step(self):
        self.i += 1
        time.sleep(0.02)
        return {"i": self.i, "done": self.i >= 30}

    def save_checkpoint(self, checkpoint_dir):
        return {"i": self.i}

    def load_checkpoint(self, checkpoint):
        self.i = checkpoint["i"]


def test_a_class_trainable_the_drivers_stopper_stops_is_saved_at_its_end(ray_cluster, storage: str) -> None:
    """Under a Tuner's default checkpoint_at_end, a class Trainable is saved with the result that ends it, whatever
    ends it: the driver's stopper's stop came as the answer to a result that waits, which saved nothing (Ray 2.60
    saves it: a review's side-by-side run)."""
    stopper = _FlagStopper()
    _, grid = _run(_ThirtyStepsSaved, storage, {"x": tune.grid_search([1, 2])},
                   run_config_kwargs={"stop": stopper, "callbacks": [_SetsTheFlag(stopper)]})
    assert grid.num_errors == 0
    for result in grid:
        assert result.metrics["training_iteration"] <= 5 and result.checkpoint is not None
        assert result.checkpoint.path.endswith(f"checkpoint_{result.metrics['training_iteration']:06d}")


class _LogsWhatItIsGiven(tune.search.Searcher):
    """Suggests ``{"x": 1}``; appends each result it is given and each trial's end to the file ``log`` (the
    engine runs a copy of it)."""

    def __init__(self, log: str) -> None:
        super().__init__(metric="i", mode="max")
        self.log = log

    def suggest(self, trial_id):
        return {"x": 1}

    def _write(self, *entry) -> None:
        with open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def on_trial_result(self, trial_id, result):
        self._write("result", trial_id, result["training_iteration"], result["done"])

    def on_trial_complete(self, trial_id, result=None, error=False):
        self._write("complete", trial_id, result["training_iteration"], result["done"])


def test_the_result_the_drivers_stopper_stops_a_trial_at_is_done_and_kept_from_the_searcher(
        ray_cluster, storage: str, tmp_path) -> None:
    """Ray asks its stopper before its scheduler and search algorithm: the result the stopper stops a trial at is
    marked done (its stored row, progress.csv) and only the searcher's on_trial_complete gets it. The driver's copy
    was asked after the batch was stored and given to the searcher: that row said done=False (Result.metrics said
    True) and the searcher's on_trial_result got it (a review's side-by-side run with Ray 2.60)."""
    log = tmp_path / "searcher.log"
    stopper = _FlagStopper()
    _, grid = _run(_thirty_steps, storage, {}, search_alg=_LogsWhatItIsGiven(str(log)), num_samples=2,
                   run_config_kwargs={"stop": stopper, "callbacks": [_SetsTheFlag(stopper)]})
    assert grid.num_errors == 0
    ends = sorted(r.metrics["training_iteration"] for r in grid)
    assert ends[-1] <= 5, ends
    for result in grid:
        stops = [False] * (result.metrics["training_iteration"] - 1) + [True]
        assert result.metrics["done"] and list(result.metrics_dataframe["done"]) == stops
        with open(os.path.join(result.path, "progress.csv")) as f:
            assert [row["done"] for row in csv.DictReader(f)] == [str(done) for done in stops]
    given: dict[str, list[tuple[str, int, bool]]] = {}
    for line in log.read_text().splitlines():
        what, trial_id, iteration, done = json.loads(line)
        given.setdefault(trial_id, []).append((what, iteration, done))
    assert sorted(calls[-1][1] for calls in given.values()) == ends
    for calls in given.values():
        end = calls[-1][1]
        assert calls == [("result", i, False) for i in range(1, end)] + [("complete", end, True)]


def _six_steps_done_at_three_if_told(config):
    for i in range(1, 7):
        tune.report({"i": i, **({"done": i == 3} if config.get("done_at_3") else {})})


class _LogsWhatItIsScheduled(tune.schedulers.FIFOScheduler):
    """A scheduler of the user's own that appends each result and end it is given to the file ``log``."""

    def __init__(self, log: str) -> None:
        super().__init__()
        self.log = log

    def _write(self, *entry) -> None:
        with open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def on_trial_result(self, tune_controller, trial, result):
        self._write("result", trial.trial_id, result["training_iteration"], result["done"])
        return tune.schedulers.TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result):
        self._write("complete", trial.trial_id, result["training_iteration"], result["done"])


@pytest.mark.parametrize("rule", ["dict", "function", "stopper", "trainable_done"])
def test_the_result_a_stop_rule_ends_a_trial_at_goes_to_the_end_hooks_only_as_in_ray(
        ray_cluster, storage: str, tmp_path, rule: str) -> None:
    """Ray's controller gives a result its stopper, the trial's stop criteria or the trainable's own ``done=True``
    ends the trial at to neither the scheduler's nor the search algorithm's ``on_trial_result``: both get it in
    ``on_trial_complete`` only (``Trial.should_stop``, tune_controller.py). fluidsalus gave it to both (one call more
    per trial: Ray 2.60 side by side, a side-by-side script's case ``c3``, ``searcher``, ``done``)."""
    stops = {"dict": {"training_iteration": 3}, "function": lambda trial_id, result: result["training_iteration"] >= 3,
             "stopper": tune.stopper.MaximumIterationStopper(3), "trainable_done": None}
    searcher_log, scheduler_log = tmp_path / "searcher.log", tmp_path / "scheduler.log"
    _, grid = _run(_six_steps_done_at_three_if_told, storage, {"done_at_3": rule == "trainable_done"},
                   search_alg=_LogsWhatItIsGiven(str(searcher_log)),
                   scheduler=_LogsWhatItIsScheduled(str(scheduler_log)), num_samples=2,
                   run_config_kwargs={"stop": stops[rule]})
    assert grid.num_errors == 0 and sorted(r.metrics["training_iteration"] for r in grid) == [3, 3]
    for log in (searcher_log, scheduler_log):
        given: dict[str, list[tuple[str, int, bool]]] = {}
        for line in log.read_text().splitlines():
            what, trial_id, iteration, done = json.loads(line)
            given.setdefault(trial_id, []).append((what, iteration, done))
        assert len(given) == 2, given
        for calls in given.values():
            assert calls == [("result", 1, False), ("result", 2, False), ("complete", 3, True)], (log.name, calls)


def _median_values(config):
    values = {0: [1, 1, 10, 10, 10, 10], 1: [5, 5, 5, 5, 5, 5]}[config["x"]]
    for i, value in enumerate(values, 1):
        tune.report({"score": value, "stopme": int(config["x"] == 0 and i >= 3)})


def test_the_median_rule_counts_the_result_a_stop_rule_ends_a_trial_at_once_as_in_ray(ray_cluster,
                                                                                        storage: str) -> None:
    """Trial 0 meets ``stop`` at its 3rd result (1, 1, 10): Ray's MedianStoppingRule records that result once (its
    on_trial_complete), so trial 1 (5 at every step) is judged at step 3 against a running mean of 4 and runs on to
    its end. fluidsalus's rule also got it in on_result: counted twice, the mean was 5.5 and trial 1 was stopped at
    step 3 (Ray 2.60 side by side: a side-by-side script's case ``median``)."""
    rule = tune.schedulers.MedianStoppingRule(time_attr="training_iteration", grace_period=1, min_samples_required=1)
    _, grid = _run(_median_values, storage, {"x": tune.grid_search([0, 1])}, metric="score", mode="max",
                   scheduler=rule, max_concurrent_trials=1, run_config_kwargs={"stop": {"stopme": 1}})
    assert sorted((r.config["x"], r.metrics["training_iteration"]) for r in grid) == [(0, 3), (1, 6)]


def _rung_steps(config):
    start = _step_of(tune.get_checkpoint())
    for step in range(start + 1, 10):
        time.sleep(0.4 if config["x"] == 3 else 0.0)  # trial 3 reaches its rung last
        folder = _step_folder(tune.get_context().get_trial_dir(), step)
        tune.report({"score": config["score"] + 0.01 * step}, checkpoint=tune.Checkpoint.from_directory(folder))


def test_a_trial_a_stop_rule_ends_at_its_hyperband_rung_takes_no_place_there_as_in_ray(ray_cluster,
                                                                                        storage: str) -> None:
    """HyperBand max_t=9, rf=3 over 9 trials: trials 3-7 make the bracket of 5 that keeps 2 at its rung 3. Trial 3,
    the best and the last to get there, meets ``stop`` at 3: Ray's HyperBand takes it out of the bracket
    (on_trial_complete -> cleanup_trial) and keeps the best 2 others (6 and 7 run to 9). fluidsalus's HyperBand also
    got that result in on_result: trial 3 completed the rung as a candidate, took one of the 2 places, and trial 7
    was stopped at 3 (Ray 2.60 side by side: a side-by-side script's case ``hb3``)."""
    scores = {0: 1, 1: 2, 2: 3, 3: 9, 4: 4.16, 5: 4.08, 6: 4.97, 7: 4.47, 8: 0}
    _, grid = _run(_rung_steps, storage, {"x": tune.grid_search(list(range(9))),
                                          "score": tune.sample_from(lambda spec: scores[spec.config.x])},
                   metric="score", mode="max",
                   scheduler=tune.schedulers.HyperBandScheduler(max_t=9, reduction_factor=3),
                   run_config_kwargs={"stop": lambda trial_id, result: result["config"]["x"] == 3
                                      and result["training_iteration"] >= 3})
    ends = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    assert {x: ends[x] for x in range(3, 8)} == {3: 3, 4: 3, 5: 3, 6: 9, 7: 9}, ends


class _NoSaveEndless(_NoSave):
    def step(self):
        time.sleep(0.02)
        return super().step()


class _MayAskForCheckpoints(tune.Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        result["should_checkpoint"] = False  # it mentions should_checkpoint: each result waits for its verdict


@pytest.mark.parametrize("ending", ["stop_all", "time_budget_under_verdicts"])
def test_a_class_trainable_without_save_checkpoint_stopped_by_the_runs_end_is_only_stopped(ray_cluster,
                                                                                          storage: str,
                                                                                          ending: str) -> None:
    """The run's end (a stopper's stop_all() here) stopped each trial at its next report, where the save of the
    Tuner's default checkpoint_at_end raised: every trial failed. Ray saves at the end only a trial that is done,
    and stops the others at the experiment's end (checked with Ray 2.60's TuneController). With a callback that
    may ask for checkpoints, the stop came while the trial waited for its verdict, and that path saved too (the
    review)."""
    if ending == "stop_all":
        run_config, tune_config = {"stop": _StopAllAfter(6)}, {}
    else:  # (the budget counts the actors' start: 5 s leaves room for results)
        run_config, tune_config = {"callbacks": [_MayAskForCheckpoints()]}, {"time_budget_s": 5}
    _, grid = _run(_NoSaveEndless, storage, {"x": tune.grid_search([1, 2])}, run_config_kwargs=run_config,
                   **tune_config)
    assert grid.num_errors == 0 and any(r.metrics.get("training_iteration", 0) >= 1 for r in grid)


class _SaveFails(_NoSave):
    def save_checkpoint(self, checkpoint_dir):
        raise OSError("no space left on device")


def test_a_save_that_fails_at_asha_s_rung_fails_its_trial_not_the_run(ray_cluster, storage: str) -> None:
    """The result went out as not paused and ASHA promoted the RUNNING trial before its end arrived: the run
    ended with "searcher promoted trial ... while it is RUNNING". Each trial fails at its rung instead."""
    scheduler = tune.schedulers.ASHAScheduler(max_t=6, grace_period=1, reduction_factor=4)
    _, grid = _run(_SaveFails, storage, {"x": tune.grid_search([1, 2, 3, 4])}, metric="score", mode="max",
                   scheduler=scheduler, run_config_kwargs={"stop": {"training_iteration": 6}})
    assert [(r.metrics["training_iteration"], "no space left" in str(r.error)) for r in grid] == [(1, True)] * 4


def _reports_world_size(config, extra=0):
    from fluidsalus import distributed

    tune.report({"world_size": distributed.get_world_size() + extra})


def test_a_data_parallel_trainable_gets_its_devices_through_the_tune_front_end(ray_cluster, storage: str) -> None:
    """The Tuner's wrappers (its trial entry, with_parameters) dropped the data_parallel declaration the engine
    reads, so such a trial ran on one device (a helper's audit; fluidsalus.run gave it two)."""
    from fluidsalus import distributed

    trainable = distributed.data_parallel(workers=2)(_reports_world_size)
    for given in (trainable, tune.with_parameters(trainable, extra=0)):
        _, grid = _run(given, storage, {"x": 1})
        assert [r.metrics["world_size"] for r in grid] == [2]


def test_ray_style_callbacks_see_every_result(ray_cluster, storage: str) -> None:
    recorder = _Recorder()
    _, grid = _run(_steps, storage, run_config_kwargs={"callbacks": [recorder]}, num_samples=3)
    kinds = [e[0] for e in recorder.events]
    assert kinds[0] == "setup" and kinds[-1] == "end" and recorder.events[-1] == ("end", 3)
    assert recorder.events[0] == ("setup", 3, {})  # no stop rule: Ray gives an empty dict (it gave None)
    results = [e for e in recorder.events if e[0] == "result"]
    assert len(results) == 9 and all(e[2] == e[3] for e in results)
    assert [e[-1] for e in results] == sorted(e[-1] for e in results)  # iteration grows
    configs = {r.trial_id: r.config["x"] for r in grid}
    assert all(configs[e[1]] == e[2] for e in results)
    assert sorted(e[1] for e in recorder.events if e[0] == "start") == sorted(configs)
    assert sorted(e[1] for e in recorder.events if e[0] == "complete") == sorted(configs)


class _StopAllAfter(StopAllAfter, tune.Stopper):
    """:class:`StopAllAfter`, a ``tune.Stopper``."""


def _forever(config):
    i = 0
    while True:
        i += 1
        time.sleep(0.02)
        tune.report({"x": config["x"], "i": i})


@pytest.mark.parametrize("ending", ["stop_all", "time_budget"])
def test_a_run_ended_early_under_max_concurrent_trials_holds_only_the_trials_its_generator_made_as_rays(
        ray_cluster, storage: str, ending: str) -> None:
    """Under ``max_concurrent_trials=N`` Ray 2.60's ``BasicVariantGenerator`` makes a trial only as one of its N live
    ones ends, so a run that ``stop_all()`` or the time budget ends early holds only the trials it made: in a
    side-by-side run (``num_samples=8``, ``max_concurrent_trials=2``, trials that report until stopped), Ray's
    ResultGrid has 2 trials, both TERMINATED, at either end (``stop_all()`` after 3 results; ``time_budget_s``); with
    trials of 4 reports and an 8 s budget, 4 (2 ended, 2 made as they ended). fluidsalus made all 8 up front: its
    grid held 8, 6 of them never started."""
    run_config: dict = {"stop": _StopAllAfter(3)} if ending == "stop_all" else {}
    budget: dict = {"time_budget_s": 3} if ending == "time_budget" else {}
    _, grid = _run(_forever, storage, run_config_kwargs=run_config, num_samples=8, max_concurrent_trials=2, **budget)
    assert len(grid) == 2 and grid.num_errors == 0
    # (the budget counts the devices' start, which on a loaded machine can take all of it: a trial may not report)
    assert ending == "time_budget" or all(r.metrics["i"] >= 1 for r in grid)


def test_stop_callable_and_stopper_with_endless_samples(ray_cluster, storage: str) -> None:
    _, grid = _run(_forever, storage, run_config_kwargs={"stop": lambda tid, r: r["i"] >= 3}, num_samples=2)
    assert [r.metrics["i"] for r in grid] == [3, 3]
    started = time.time()
    _, grid = _run(_steps, storage, {"x": tune.uniform(0, 1), "steps": 1},
                   run_config_kwargs={"stop": _StopAllAfter(5)}, num_samples=-1)
    assert len(grid) >= 5 and time.time() - started < 30
    _, grid = _run(_forever, storage, run_config_kwargs={"stop": tune.stopper.MaximumIterationStopper(2)},
                   num_samples=-1, time_budget_s=4)
    # The time budget ended the endless run. It also covers starting the device actors, which on a loaded machine
    # can take all of it (no trial started within 8 s once, in a CI run at load average 2.5), so the trials that
    # did run are checked, not their number.
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert [e.data["reason"] for e in reader.events("experiment_ending")] == ["time_budget"]
    assert all("i" not in r.metrics or r.metrics["i"] <= 2 for r in grid)


class _EndsAtOnce(tune.Stopper):
    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        return True


@pytest.mark.parametrize("ending", ["stop_all", "timeout_stopper_0", "time_budget"])
def test_a_run_that_ends_before_any_trial_starts_keeps_its_trials_never_started_as_in_ray(ray_cluster, storage: str,
                                                                                          ending: str) -> None:
    """A stop_all() True at its first check (or TimeoutStopper(0), a time budget the devices' start spent) ended
    the run before the search made any trial: the grid was empty and ``grid[0]`` raised IndexError. Ray's grid
    holds the trials, TERMINATED, with metrics of just their trial_id (a helper's side-by-side run)."""
    run_config, tune_config = {}, {}
    if ending == "stop_all":
        run_config["stop"] = _EndsAtOnce()
    elif ending == "timeout_stopper_0":
        run_config["stop"] = tune.stopper.TimeoutStopper(0)
    else:
        tune_config["time_budget_s"] = 0.0001
    _, grid = _run(_thirty_steps, storage, {"x": tune.grid_search([1, 2, 3])}, run_config_kwargs=run_config,
                   **tune_config)
    assert len(grid) == 3 and grid.num_errors == 0 and grid.num_terminated == 3
    assert [set(r.metrics) for r in grid] == [{"trial_id"}] * 3 and grid[0].error is None
    assert [t.status for t in tune.ExperimentAnalysis(grid.experiment_path).trials] == ["TERMINATED"] * 3
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert [e.data["reason"] for e in reader.events("experiment_ending")] == [
        "time_budget" if ending == "time_budget" else "stop_all"]
    assert [t.status for t in reader.trials()] == ["TERMINATED"] * 3 and not reader.results()


class _TrialEnds(tune.Callback):
    """Records the trial-end hooks and the statuses ``on_experiment_end`` sees (and each trial's ``last_result``'s
    ``trial_id``, a dict also for a trial that never started, as Ray's); its ``on_trial_complete`` raises (which
    fails the trial it is called for, as in Ray, except at the run's end)."""

    def __init__(self) -> None:
        self.ends: list[tuple[str, str]] = []
        self.at_end: dict[str, str] | None = None

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.ends.append(("complete", trial.trial_id))
        raise ValueError("a callback that fails at a trial's end")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.ends.append(("error", trial.trial_id))

    def on_experiment_end(self, trials, **info):
        self.at_end = {t.trial_id: t.status for t in trials}
        self.last_ids = {t.trial_id: t.last_result.get("trial_id") for t in trials}


def _forever_but_x1_fails(config):
    for i in range(1, 100000):
        if config["x"] == 1 and i == 4:
            raise RuntimeError("x=1 fails")
        time.sleep(0.02)
        tune.report({"x": config["x"], "i": i})


@pytest.mark.parametrize("ending", ["stop_all", "time_budget", "fail_fast"])
def test_the_runs_end_leaves_its_trials_terminated_whatever_their_end_hook_does_and_lists_every_trial(
        ray_cluster, storage: str, ending: str) -> None:
    """Ray 2.60's controller ends the run (stop_all(), its time budget: a TimeoutStopper, fail_fast) by setting every
    unfinished trial TERMINATED there, running, queued or paused alike, with no on_trial_complete: its
    on_experiment_end and ResultGrid show them all TERMINATED (a helper's side-by-side run). fluidsalus calls
    on_trial_complete for each trial the run's end stops on its device (so loggers end their records: Ray's W&B
    callback waits its upload_timeout for runs never ended), but a callback that raises there made the trial ERROR;
    now it stays TERMINATED. on_experiment_end did not have the trials that never started (their last_result is a
    dict, as Ray's: None broke a callback reading it)."""
    recorder = _TrialEnds()
    run_config, tune_config = {"callbacks": [recorder]}, {}
    if ending == "stop_all":
        run_config["stop"] = _StopAllAfter(6)
    elif ending == "time_budget":
        tune_config["time_budget_s"] = 6
    else:
        run_config["failure_config"] = tune.FailureConfig(fail_fast=True)
    trainable = _forever_but_x1_fails if ending == "fail_fast" else _forever
    _, grid = _run(trainable, storage, {"x": tune.grid_search([1, 2, 3, 4, 5, 6])}, run_config_kwargs=run_config,
                   **tune_config)
    failed = [r.trial_id for r in grid if (r.config or {}).get("x") == 1] if ending == "fail_fast" else []
    assert [end for end in recorder.ends if end[0] == "error"] == [("error", tid) for tid in failed]
    started = {r.trial_id for r in grid if r.metrics and r.metrics.get("i")}
    assert started - set(failed) <= {tid for kind, tid in recorder.ends if kind == "complete"}
    assert recorder.last_ids == {r.trial_id: r.trial_id for r in grid}
    assert grid.num_errors == len(failed) and grid.num_terminated == len(grid) - len(failed) == 6 - len(failed)
    assert recorder.at_end == {r.trial_id: "ERROR" if r.trial_id in failed else "TERMINATED"
                               for r in grid}


class _EndHooks(tune.Callback):
    """Records which trials got on_trial_start and on_trial_complete, and the last_result each end hook saw."""

    def __init__(self) -> None:
        self.started: set[str] = set()
        self.completed: dict[str, object] = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started.add(trial.trial_id)

    def on_trial_complete(self, iteration, trials, trial, **info):
        last = trial.last_result  # (a dict, as Ray's: it was None for a trial that never started)
        self.completed[trial.trial_id] = last.get("trial_id") if isinstance(last, dict) else last


@pytest.mark.parametrize("ending", ["time_budget", "fail_fast"])
def test_the_runs_end_calls_no_end_hook_for_a_trial_it_finds_prefetched_as_for_one_still_queued(
        ray_cluster, storage: str, capsys: pytest.CaptureFixture[str], ending: str) -> None:
    """Ray 2.60's controller ends the run (its time budget, fail_fast, stop_all()) by setting its PENDING trials
    TERMINATED with no hook (a helper's side-by-side run: 8 trials on 2 CPUs, time_budget_s=6: on_trial_start and
    no on_trial_complete for the 6 that never started, all 8 TERMINATED in on_experiment_end, the grid and
    ExperimentAnalysis). Here a trial the planner had sent ahead to a device (prefetched, waiting for its first
    turn) got on_trial_complete with last_result None (a callback reading it raised), where one still queued in
    the driver got nothing, so the hooks followed the planner's timing. Every such trial now ends as a queued
    one: no hook, TERMINATED, one trial_end event marked ``started: False``; the run's final line and
    ``fluidsalus ls`` say how many of the terminated trials never started."""
    from fluidsalus.cli import main as cli_main

    hooks = _EndHooks()
    run_config, tune_config = {"callbacks": [hooks], "verbose": 1}, {}
    if ending == "time_budget":
        tune_config["time_budget_s"] = 6
    else:
        run_config["failure_config"] = tune.FailureConfig(fail_fast=True)
    trainable = _forever_but_x1_fails if ending == "fail_fast" else _forever
    _, grid = _run(trainable, storage, {"x": tune.grid_search([1, 2, 3, 4, 5, 6, 7, 8])},
                   run_config_kwargs=run_config, **tune_config)
    assert len(grid) == 8 and grid.num_terminated + grid.num_errors == 8
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    rows = {row.trial_id: row for row in reader.trials()}
    never = {tid for tid, row in rows.items() if row.started_at is None}
    assert never and never.isdisjoint(hooks.started) and hooks.started == set(rows) - never
    # both ways a trial waits: prefetched onto a device, and queued in the driver (at fail_fast, which comes once
    # the devices are up; a loaded machine may spend the 6 s budget starting them, before anything is sent ahead)
    if ending == "fail_fast":
        assert {rows[tid].device is None for tid in never} == {True, False}, [rows[t].device for t in never]
    assert set(hooks.completed) <= hooks.started and all(v == k for k, v in hooks.completed.items())
    assert all(rows[tid].status == "TERMINATED" for tid in never)
    ends = {}
    for event in reader.events("trial_end"):
        ends.setdefault(event.trial_id, []).append(event.data)
    assert all(ends.get(tid) == [{"attempt": 0, "outcome": "stopped", "started": False}] for tid in never), ends
    assert all(len(ends.get(tid, [])) == 1 and "started" not in ends[tid][0] for tid in set(rows) - never)
    out = capsys.readouterr().out
    assert f"terminated, {len(never)} of them never started) -> " in out  # (the summary, in ls's words)
    assert cli_main(["ls", storage]) == 0
    assert f"terminated, {len(never)} of them never started" in capsys.readouterr().out


def _flat_thirty(config):
    for _ in range(30):
        tune.report({"m": 1.0})


class _StopArgs(tune.Callback):
    def setup(self, stop=None, **info):
        self.stop = stop


def test_a_stoppers_stop_all_ends_the_run_at_the_result_that_ended_it_as_in_ray(ray_cluster, storage: str) -> None:
    """A trial of fast iterations ran on past the result at which the driver's copy of the stopper said
    stop_all: an ExperimentPlateauStopper that Ray's ends after the 2nd result let the first trial run all 30 (a
    helper's audit). With such a stopper each result waits for the driver's judgement. Callbacks' setup gets
    Ray's {} for a stopper that is no dict (it got the stopper)."""
    told = _StopArgs()
    _, grid = _run(_flat_thirty, storage, {"x": tune.grid_search([1, 2, 3])}, max_concurrent_trials=1,
                   run_config_kwargs={"stop": tune.stopper.ExperimentPlateauStopper("m", top=2, patience=0),
                                      "callbacks": [told]})
    assert [r.metrics.get("training_iteration") for r in grid] == [2]  # (as Ray's: it never made the others)
    assert told.stop == {}


def test_asha_under_max_concurrent_trials_makes_its_trials_as_others_end_as_in_ray(ray_cluster, storage: str) -> None:
    """Ray's BasicVariantGenerator(max_concurrent=...) makes a trial only as one ends, under ASHA as under FIFO: a
    stop_all() after the first trial's 2nd result leaves a grid of that one trial (Ray's, a helper's side-by-side
    run). fluidsalus's ASHA made the whole grid at once: 2 more trials, never started, with no config."""
    _, grid = _run(_flat_thirty, storage, {"x": tune.grid_search([1, 2, 3])}, max_concurrent_trials=1,
                   metric="m", mode="max", scheduler=tune.schedulers.ASHAScheduler(max_t=30),
                   run_config_kwargs={"stop": tune.stopper.ExperimentPlateauStopper("m", top=2, patience=0)})
    assert [(r.config, r.metrics.get("training_iteration")) for r in grid] == [({"x": 1}, 2)]


def _reports_its_x_once(config):
    tune.report({"m": float(config["x"])})


def test_a_stopper_gets_the_last_result_again_done_when_the_function_returns_as_in_ray(ray_cluster,
                                                                                      storage: str) -> None:
    """Ray's controller gives the stopper a returned function trainable's last result once more (its duplicate,
    ``done=True``): trial 1's one value fills both of the plateau's top places, and the run ends after it (Ray's
    grid: 1 trial, a helper's side-by-side run). The driver's copy saw each result once, and all 3 trials ran."""
    stopper = tune.stopper.ExperimentPlateauStopper("m", std=0.001, top=2, mode="min", patience=0)
    _, grid = _run(_reports_its_x_once, storage, {"x": tune.grid_search([1, 2, 3])}, max_concurrent_trials=1,
                   run_config_kwargs={"stop": stopper})
    assert [(r.config["x"], r.metrics["training_iteration"]) for r in grid] == [(1, 1)]
    assert grid[0].metrics["done"] is True and grid.num_errors == 0


class _StopByConfig(tune.Stopper):
    """Stops each trial at the iteration its config names; ends the run once the driver's copy saw both at theirs."""

    def __init__(self) -> None:
        self.ended: set[int] = set()

    def __call__(self, trial_id, result):
        at = result["config"]["at"]  # Ray's stoppers see the trial's config in each result
        if result["i"] >= at:
            self.ended.add(at)
        return result["i"] >= at

    def stop_all(self):
        return self.ended == {2, 4}


def test_a_stopper_sees_the_trials_config_in_each_result_as_in_ray(ray_cluster, storage: str) -> None:
    # The device's copy stops each trial by its config, and the driver's copy (stop_all) reads the config too. A
    # stop function is called on the devices as the Stopper's copies are, with the same result.
    _, grid = _run(_forever, storage, {"x": 0.5, "at": tune.grid_search([2, 4])},
                   run_config_kwargs={"stop": _StopByConfig()})
    assert sorted(r.metrics["i"] for r in grid) == [2, 4]


class _Counter(tune.Trainable):
    def setup(self, config, start=0):
        self.value = start

    def step(self):
        self.value += self.config["x"]
        return {"value": self.value, "done": self.iteration >= 3}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


def test_class_trainable_with_parameters_and_checkpoint_frequency(ray_cluster, storage: str) -> None:
    tuner = Tuner(tune.with_parameters(_Counter, start=10), param_space={"x": tune.grid_search([1, 2])},
                  run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2)))
    grid = tuner.fit()
    assert sorted(r.metrics["value"] for r in grid) == [14, 18]  # 10 + 4 steps of x: done after the 4th
    assert all(r.metrics["training_iteration"] == 4 for r in grid)
    assert all([int(c.path[-6:]) for c, _ in r.best_checkpoints] == [2, 4] for r in grid)


class _Climber(tune.Trainable):
    """Climbs by ``lr`` per step; its state is its height. ``iteration`` counts the steps before this one, as in Ray,
    so it ends at the 13th."""

    def setup(self, config):
        self.height = 0.0

    def step(self):
        self.height += self.config["lr"]
        return {"height": self.height, "done": self.iteration >= 12}

    def save_checkpoint(self, checkpoint_dir):
        return {"height": self.height}

    def load_checkpoint(self, checkpoint):
        self.height = checkpoint["height"]


def test_a_class_trainable_under_pbt_is_saved_at_its_perturbation_points(ray_cluster, storage: str) -> None:
    """PBT clones a trial from its checkpoint at its last perturbation point, so a class Trainable is saved there
    (and at its end), as Ray's PBT saves it there. It used to be saved at every iteration, so that ``num_to_keep``
    kept only the last few and a source's point was often gone when a bottom trial came to clone it."""
    pbt = tune.schedulers.PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=4,
                                                  quantile_fraction=0.5, hyperparam_mutations={"lr": [0.1, 0.5, 1.0]})
    with exploit_lines() as lines:
        grid = Tuner(_Climber, param_space={"lr": tune.grid_search([0.1, 0.5, 1.0, 2.0])},
                     tune_config=tune.TuneConfig(scheduler=pbt, metric="height", mode="max"),
                     run_config=tune.RunConfig(storage_path=storage, name="points", verbose=0)).fit()
    assert grid.num_errors == 0
    store = ExperimentStore.open(os.path.join(storage, "points"), readonly=True)
    try:
        saved = {row["iteration"] for row in store.checkpoints(include_deleted=True)}
        exploits = [e for e in store.events("trial_restart") if e.data["reason"] == "exploit"]
    finally:
        store.close()
    # at the points and at the end (13), not between the points
    assert {4, 8, 12, 13} <= saved and not saved & {1, 2, 3, 5, 6, 7, 9, 10, 11}
    assert exploits and all(e.data["from_iteration"] in (4, 8, 12) for e in exploits)
    # Ray's lines of each exploit, with the scheduler's class name, at verbose=0 too (they printed nothing: h160's F4)
    for event in exploits:
        assert any(line.startswith("\n\n[PopulationBasedTraining] [Exploit] Cloning trial ")
                   and f" into trial {event.trial_id} (score = " in line for line in lines)
        assert any(line.startswith("\n\n[PopulationBasedTraining] [Explore] Perturbed the hyperparameter config "
                                   f"of trial{event.trial_id}:\nlr : ") for line in lines)


class _Endless(tune.Trainable):
    """Never ends itself: only the stop rule or a scheduler ends it."""

    def setup(self, config):
        self.value = 0

    def step(self):
        self.value += self.config["x"]
        return {"value": self.value}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


def test_checkpoint_at_end_saves_a_trial_the_stop_rule_or_a_scheduler_ends(ray_cluster, storage: str) -> None:
    at_end = {"checkpoint_config": tune.CheckpointConfig(checkpoint_at_end=True)}
    _, grid = _run(_Endless, storage, {"x": tune.grid_search([1, 2])},
                   run_config_kwargs={"stop": {"training_iteration": 3}, **at_end})
    assert grid.num_errors == 0 and len(grid) == 2
    for result in grid:  # one checkpoint each, of the last iteration (as Ray's checkpoint_at_end)
        assert [int(c.path[-6:]) for c, _ in result.best_checkpoints] == [3]
        restored = _Endless({"x": result.config["x"]})
        restored.restore(result.checkpoint)
        assert restored.value == 3 * result.config["x"]
    # Best first, so that some trial is stopped at a rung whatever the timing: asynchronous successive halving
    # promotes every trial that is the best so far at its rung (random values arriving in increasing order would
    # all run to max_t).
    seer = _SeesDone()
    _, grid = _run(_Endless, storage, {"x": tune.grid_search([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])},
                   run_config_kwargs={**at_end, "stop": seer}, metric="value", mode="max",
                   scheduler=tune.schedulers.ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2))
    ends = sorted(r.metrics["training_iteration"] for r in grid)
    assert ends[0] < 4 and ends[-1] == 4  # some stopped at a rung, some ran to max_t
    assert all(int(r.checkpoint.path[-6:]) == r.metrics["training_iteration"] for r in grid)
    # As Ray marks the result its scheduler stops a trial at (at a rung or at max_t): done in the stored rows and
    # in Ray's progress.csv (every row said False: a helper's side-by-side run)
    for result in grid:
        stops = [False] * (result.metrics["training_iteration"] - 1) + [True]
        assert list(result.metrics_dataframe["done"]) == stops
        with open(os.path.join(result.path, "progress.csv")) as f:
            assert [row["done"] for row in csv.DictReader(f)] == [str(done) for done in stops]
    # but the stopper saw them before the scheduler's decision, as in Ray (the driver's copy saw done: a review)
    assert len(seer.seen) == sum(r.metrics["training_iteration"] for r in grid) and not any(seer.seen)


class _SeesDone(tune.Stopper):
    """Records the ``done`` of each result the driver's copy of the stopper sees; never stops."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def __call__(self, trial_id, result):
        self.seen.append(bool(result.get("done")))
        return False

    def stop_all(self):
        return False


def test_a_class_trainable_is_checkpointed_at_its_end_by_default_under_a_tuner_not_under_tune_run(
        ray_cluster, storage: str) -> None:
    """Ray's Tuner reads ``CheckpointConfig(checkpoint_at_end=None)`` as True for a class Trainable (before, no
    checkpoint: ``get_best_result().checkpoint`` was None); ``tune.run`` leaves it falsy."""
    _, grid = _run(_Endless, storage, {"x": 2}, run_config_kwargs={"stop": {"training_iteration": 3}})
    (result,) = grid
    assert result.checkpoint is not None and int(result.checkpoint.path[-6:]) == 3
    restored = _Endless({"x": 2})
    restored.restore(result.checkpoint)
    assert restored.value == 6
    analysis = tune.run(_Endless, config={"x": 2}, stop={"training_iteration": 3}, storage_path=storage,
                        name="legacy", verbose=0)
    (trial,) = analysis.trials
    assert trial.checkpoint is None


class _DoneAtThree(tune.Trainable):
    def setup(self, config):
        self.n = 0

    def step(self):
        self.n += 1
        return {"m": self.n, "done": self.n == 3}

    def save_checkpoint(self, checkpoint_dir):
        return {"n": self.n}

    def load_checkpoint(self, checkpoint):
        self.n = checkpoint["n"]


def test_a_class_trainables_last_row_is_done_as_in_ray(ray_cluster, storage: str) -> None:
    """step() returned done=True at its third step: Ray's last row (metrics_dataframe, result.json) has done=True;
    every row had done=False here (the wrapper took the key out of the result it reported)."""
    _, grid = _run(_DoneAtThree, storage, {"x": 1})
    (result,) = grid
    assert result.metrics_dataframe["done"].tolist() == [False, False, True]
    assert result.metrics["done"] is True and result.metrics["training_iteration"] == 3 and result.error is None
    assert result.checkpoint is not None and int(result.checkpoint.path[-6:]) == 3  # saved at its end, as before


def _reports_accuracy(config):
    tune.report({"accuracy": config["x"]})


def test_a_wrong_metric_name_lists_only_what_the_trainable_reported(ray_cluster, storage: str) -> None:
    """The list named ``experiment_tag`` too, a key the front end adds to every result (a helper's new-user
    walkthrough), as if the trainable had reported it; it is named apart."""
    with pytest.raises(ConfigError, match=r"metric='acc' is not in the results: trial \w+ reported \['accuracy'\], "
                                          r"and the run added \['experiment_tag'\] to its results\."):
        _run(_reports_accuracy, storage, {"x": 1}, metric="acc", mode="max")


def _reports_once_tuner_state_is_saved(config):
    """Reports whether ``tuner.pkl`` appeared in its experiment folder within ``wait_s``, before any result."""
    from fluidsalus import train

    path = os.path.join(os.path.dirname(train.get_context().get_trial_dir()), TUNER_STATE_FILE)
    deadline = time.time() + config["wait_s"]
    while not os.path.isfile(path) and time.time() < deadline:
        time.sleep(0.05)
    train.report({"saved_before_first_result": os.path.isfile(path)})


def test_the_tuner_state_is_saved_once_a_trial_starts_before_any_result(ray_cluster, storage: str) -> None:
    """A driver killed after its trials started but before their first result can be restored: ``tuner.pkl`` is
    written as soon as the run's store is made, before the devices start (Ray writes it as ``fit`` begins; the
    folder exists here only once the run's store does). Before, it came with the first result (then with the first
    trial's start: ``tests/test_tune_interrupt.py`` kills a driver before it)."""
    _, grid = _run(_reports_once_tuner_state_is_saved, storage, {"wait_s": 10.0})
    (result,) = grid
    assert result.error is None and result.metrics["saved_before_first_result"] is True


def test_restore_continues_an_interrupted_experiment(ray_cluster, storage: str, tmp_path) -> None:
    callback = InterruptOnce(str(tmp_path / "interrupted"), n=4)
    tuner = Tuner(resumable, param_space={"x": tune.uniform(0, 1)},
                  tune_config=tune.TuneConfig(num_samples=3, metric="i", mode="max"),
                  run_config=tune.RunConfig(name="resumable", storage_path=storage, verbose=0, callbacks=[callback]))
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    path = os.path.join(storage, "resumable")
    assert Tuner.can_restore(path) and os.path.isfile(os.path.join(path, TUNER_STATE_FILE))
    restored = Tuner.restore(path, resumable)
    before = restored.get_results()
    assert any(r.status != "TERMINATED" for r in before)
    grid = restored.fit()
    assert len(grid) == 3 and grid.num_errors == 0
    assert all(r.metrics["i"] == 6 for r in grid)
    assert any(r.metrics["resumed_from"] > 0 for r in grid)  # continued from a checkpoint, not from scratch
    assert restored.get_results() is grid
    assert grid.get_best_result().metrics["i"] == 6


def test_a_restored_run_goes_on_with_its_stoppers_saved_state_as_rays(ray_cluster, storage: str, tmp_path) -> None:
    """Ray keeps its stopper in the experiment state it saves, and a restored run goes on with it. The restore took
    the stopper from ``tuner.pkl``, as the script built it at the start, so ``MaximumIterationStopper`` counted a
    resumed trial from 0 (h252's F2: one trial interrupted at 5 with a checkpoint at 3 ended at 11, Ray's at 6). The
    driver's copy is saved beside the store (``fluidsalus.stopper_state``) and a resume takes it back."""
    from fluidsalus.stopper_state import STOPPER_STATE_FILE
    from fluidsalus.tune.stopper import MaximumIterationStopper

    callback = InterruptOnce(str(tmp_path / "interrupted"), n=1)
    tuner = Tuner(resumable, param_space={"x": 1},
                  run_config=tune.RunConfig(name="stops", storage_path=storage, verbose=0, callbacks=[callback],
                                            stop=MaximumIterationStopper(5)))
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    path = os.path.join(storage, "stops")
    assert os.path.isfile(os.path.join(path, STOPPER_STATE_FILE))
    interrupted_at = Tuner.restore(path, resumable).get_results()[0].metrics["i"]
    assert interrupted_at < 5  # (each step has a checkpoint: the resume runs none again)
    grid = Tuner.restore(path, resumable).fit()
    assert grid[0].metrics["i"] == 5  # (counted afresh: interrupted_at + 5, past the trainable's 6 steps)
    assert grid[0].metrics["resumed_from"] == interrupted_at


@pytest.mark.parametrize("ending", ["stop_all", "time_budget", "ctrl_c"])
def test_a_restore_after_the_runs_end_asks_its_search_for_no_more_trials_as_rays(ray_cluster, storage: str, tmp_path,
                                                                                 ending: str) -> None:
    """A search that suggests as it goes (OptunaSearch under ``max_concurrent_trials``) ended by the run's end (a
    stopper's ``stop_all()``, the time budget): ``Tuner.restore(...).fit()`` asked it for new trials and ran them
    under a fresh budget (4 trials after 2). Ray's controller calls ``search_alg.set_finished()`` at that end and
    restores it, so its restore runs none (a helper's side-by-side run). A Ctrl-C is no such end: the search goes
    on to its ``num_samples``, in both."""
    from fluidsalus.trialgroup.executor import EXPERIMENT_ENDING_EVENT, SEARCH_ENDED_KEY
    from fluidsalus.tune.search.optuna import OptunaSearch

    run_config: dict = {}
    tune_config: dict = {}
    trainable = _forever
    if ending == "stop_all":
        run_config["stop"] = _StopAllAfter(3)
    elif ending == "time_budget":
        tune_config["time_budget_s"] = 4
    else:
        run_config["callbacks"] = [InterruptOnce(str(tmp_path / "interrupted"), n=3)]
        trainable = resumable
    tuner = Tuner(trainable, param_space={"x": tune.uniform(0, 1)},
                  tune_config=tune.TuneConfig(num_samples=5, max_concurrent_trials=2, **tune_config,
                                              search_alg=OptunaSearch(metric="i", mode="max", seed=1)),
                  run_config=tune.RunConfig(name="ended", storage_path=storage, verbose=0, **run_config))
    if ending == "ctrl_c":
        with pytest.raises(KeyboardInterrupt):
            tuner.fit()
    else:
        tuner.fit()
    path = os.path.join(storage, "ended")

    def stored() -> tuple[list[str], int, list[dict]]:
        reader = ExperimentStore.open(path, readonly=True)
        try:
            return (sorted(row.trial_id for row in reader.trials()), len(reader.events("trial_start")),
                    [e.data for e in reader.events(EXPERIMENT_ENDING_EVENT)])
        finally:
            reader.close()

    made, starts, endings = stored()
    grid = Tuner.restore(path, trainable).fit()
    if ending == "ctrl_c":  # (no end of the run's: the search goes on)
        assert endings == [] and len(made) < 5 and len(grid) == 5 and grid.num_errors == 0
        return
    assert stored()[:2] == (made, starts)  # no trial made after it, none started again
    assert sorted(r.metrics["trial_id"] for r in grid) == made
    assert endings == [{"reason": ending, SEARCH_ENDED_KEY: True}]  # (the store says why)


def _fails_once_at_2(config):
    """:func:`resumable` (a checkpoint each step, ``resumed_from``), whose trial of ``x == 0.2`` fails at its step 2
    until the file ``config["mark"]`` exists (the bug fixed)."""
    resumable(config, before_step=_fails_at_2_until_marked)


def _fails_at_2_until_marked(config, i):
    if config["x"] == 0.2 and i == 2 and not os.path.exists(config["mark"]):
        raise RuntimeError("x=0.2 fails")


@pytest.mark.parametrize("flags", [{}, {"resume_errored": True}, {"restart_errored": True},
                                   {"resume_unfinished": False}])
def test_a_restore_after_fail_fast_raise_runs_on_the_trials_it_cut_short_and_the_failed_one_as_rays(
        ray_cluster, storage: str, tmp_path, flags: dict) -> None:
    """Ray raises ``fail_fast="raise"``'s error at once, before it records the failure or stops a trial: its saved
    state holds every trial it had not ended unfinished, the failed one included, and ``Tuner.restore(...).fit()``
    runs them all on to their ends, whatever ``resume_errored``/``restart_errored`` say (``resume_unfinished=False``
    ends them all, none runs; a helper's side-by-side run). fluidsalus's run's end stopped them first (the running
    trial at its next step, the queued ones before they began) and saved them ``TERMINATED``, and the failed one
    ``ERROR``: a restore ran none of them (2 trials cut short at step 2-3, one error; h174's B2)."""
    mark = str(tmp_path / "fixed")
    param_space = {"x": tune.grid_search([0.1, 0.2, 0.3, 0.4]), "mark": mark}
    tuner = Tuner(_fails_once_at_2, param_space=param_space,
                  tune_config=tune.TuneConfig(max_concurrent_trials=2),
                  run_config=tune.RunConfig(name="raised", storage_path=storage, verbose=0,
                                            failure_config=tune.FailureConfig(fail_fast="raise")))
    with pytest.raises(TrialError, match="x=0.2 fails"):
        tuner.fit()
    path = os.path.join(storage, "raised")
    reader = ExperimentStore.open(path, readonly=True)
    try:
        stored = {row.config["x"]: row.status for row in reader.trials()}
        starts = len(reader.events("trial_start"))
    finally:
        reader.close()
    # (left as Ray's state has them; under max_concurrent_trials=2 its generator had made only these two)
    assert stored == {0.1: "PENDING", 0.2: "ERROR"}
    open(mark, "w").close()
    grid = Tuner.restore(path, _fails_once_at_2, **flags).fit()
    assert len(grid) == 4 and grid.num_errors == 0 and all(r.status == "TERMINATED" for r in grid)
    # The trials the restore made keep the experiment's id prefix, as Ray's generator keeps its uuid prefix in its
    # saved state (they had the restore's own: fn_83b74_00000, fn_83b74_00001, fn_e1188_00002, ...)
    assert len({r.metrics["trial_id"].split("_")[0] for r in grid}) == 1
    if flags == {"resume_unfinished": False}:  # (Ray's restore of it hangs: its grid search waits for 2 live trials)
        reader = ExperimentStore.open(path, readonly=True)
        try:
            assert len(reader.events("trial_start")) == starts + 2  # none of them ran; the grid's last two did
            assert {row.config["x"]: (row.status, row.last_iteration) for row in reader.trials()}[0.2] == \
                ("TERMINATED", 1)
        finally:
            reader.close()
        return
    steps = {r.config["x"]: r.metrics["i"] for r in grid}
    assert set(steps.values()) == {RESUMABLE_STEPS}
    resumed = {r.config["x"]: r.metrics["resumed_from"] for r in grid}
    assert resumed[0.2] == 1 and resumed[0.1] >= 1  # from their last checkpoints, as after a Ctrl-C


def _fails_at_2_b_later(config, i):
    """x=0.2 fails at its step 2, x=0.3 there too, later (within the raise's end, before its next report), until
    the file ``config["mark"]`` exists."""
    if i == 2 and config["x"] in (0.2, 0.3) and not os.path.exists(config["mark"]):
        if config["x"] == 0.3:
            time.sleep(0.5)
        raise RuntimeError(f"x={config['x']} fails")


def test_fail_fast_raise_tells_the_searcher_no_end_and_leaves_a_later_failure_unfinished_as_rays(
        ray_cluster, storage: str, tmp_path) -> None:
    """Ray raises ``fail_fast="raise"``'s error as its event comes: its search algorithm hears of no end, that
    failure's, a later one's or a cut-short trial's, and a trial that fails after it is unfinished in its saved
    state; ``Tuner.restore(...).fit()`` runs them all on, and the study gets their final values (a side-by-side run,
    /work/scratch_h183/ff2.py). fluidsalus told the searcher the failures (Optuna ``FAIL``) and the cut-short
    trial's end with its early value, which Optuna kept after the restore (its ``_told`` skip), and the trial that
    failed within the raise's end stayed ``ERROR``: the restore ran it not."""
    from fluidsalus.tune.search.optuna import OptunaSearch

    mark = str(tmp_path / "fixed")
    points = [{"x": 0.2}, {"x": 0.3}, {"x": 0.1}]
    tuner = Tuner(tune.with_parameters(resumable, before_step=_fails_at_2_b_later),
                  param_space={"x": tune.uniform(0, 1), "mark": mark},
                  tune_config=tune.TuneConfig(search_alg=OptunaSearch(metric="i", mode="max", seed=1,
                                                                      points_to_evaluate=points),
                                              num_samples=3, max_concurrent_trials=3),
                  run_config=tune.RunConfig(name="raised", storage_path=storage, verbose=0,
                                            failure_config=tune.FailureConfig(fail_fast="raise")))
    with pytest.raises(TrialError, match="x=0.2 fails"):
        tuner.fit()
    path = os.path.join(storage, "raised")
    reader = ExperimentStore.open(path, readonly=True)
    try:
        stored = {row.config["x"]: row.status for row in reader.trials()}
    finally:
        reader.close()
    assert stored == {0.2: "ERROR", 0.3: "PENDING", 0.1: "PENDING"}
    assert study_told(path) == {}
    open(mark, "w").close()
    grid = Tuner.restore(path, tune.with_parameters(resumable, before_step=_fails_at_2_b_later)).fit()
    assert grid.num_errors == 0 and {r.config["x"]: r.metrics["i"] for r in grid} == {
        x: RESUMABLE_STEPS for x in (0.1, 0.2, 0.3)}
    assert study_told(path) == {x: ("COMPLETE", float(RESUMABLE_STEPS)) for x in (0.1, 0.2, 0.3)}



def _a_fails_then_b_within_the_raises_end(config):
    """Two trials that run together (each waits for the other's file in ``config["dir"]``): ``a`` reports once and
    fails; ``b`` reports once and fails a second later, before its next report: within ``fail_fast="raise"``'s end,
    which waits for it to reach a report."""
    name, other = config["w"], "b" if config["w"] == "a" else "a"
    tune.report({"i": 1})
    open(os.path.join(config["dir"], name), "w").close()
    while not os.path.exists(os.path.join(config["dir"], other)):
        time.sleep(0.01)
    time.sleep(0.0 if name == "a" else 1.0)
    raise RuntimeError(f"{name} fails")


class _ErrorHooks(tune.Callback):
    """Records the trials ``on_trial_error`` is called for, and each trial's status and ``num_failures`` as
    ``on_experiment_end`` sees them."""

    def __init__(self) -> None:
        self.errored: list[str] = []
        self.at_end: dict[str, tuple[str, int]] = {}

    def on_trial_error(self, iteration, trials, trial, **info):
        self.errored.append(trial.config["w"])

    def on_experiment_end(self, trials, **info):
        self.at_end = {t.config["w"]: (t.status, t.num_failures) for t in trials}


def test_a_trial_that_fails_within_fail_fast_raises_end_is_no_failure_as_ray_never_sees_it(
        ray_cluster, storage: str, tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    """Ray raises ``fail_fast="raise"``'s failure as its event comes and its clean-up kills the other trials' actors:
    a trial that would fail a moment later gets no ``on_trial_error``, no ``error.txt``, no failure counted, and
    ``on_experiment_end`` sees it ``TERMINATED`` (a side-by-side run, /work/scratch_h220/ff_raise_check.py).
    fluidsalus's end waits for its trials to reach a report, and such a trial failed meanwhile: ``ERROR`` with the
    hook, its error file and ``num_failures`` 1. It now ends stopped by the run's end (``on_trial_complete``, as the
    trials that end stops), with a warning and an ``error_after_stop`` record, unfinished in the store."""
    hooks = _ErrorHooks()
    folder = tmp_path / "started"
    folder.mkdir()
    # Half a CPU each: two trials at once on one device. (With one each, a run that began on one device, the other
    # still starting, put both in its one lane, where a trial computes only between the other's reports: each
    # waited for the other's file for ever.)
    tuner = Tuner(tune.with_resources(_a_fails_then_b_within_the_raises_end, SHARING_RESOURCES),
                  param_space={"w": tune.grid_search(["a", "b"]), "dir": str(folder)},
                  tune_config=tune.TuneConfig(max_concurrent_trials=2),
                  run_config=tune.RunConfig(name="raised", storage_path=storage, verbose=0, callbacks=[hooks],
                                            failure_config=tune.FailureConfig(fail_fast="raise")))
    with caplog.at_level(logging.WARNING, logger="fluidsalus.trialgroup.executor"), \
            pytest.raises(TrialError, match="a fails"):
        tuner.fit()
    assert hooks.errored == ["a"]
    assert hooks.at_end == {"a": ("ERROR", 1), "b": ("TERMINATED", 0)}
    path = os.path.join(storage, "raised")
    assert [os.path.basename(os.path.dirname(f)).split("_w=")[1][0]
            for f in glob.glob(os.path.join(path, "*", "error.txt"))] == ["a"]
    assert any("raised after fail_fast='raise'" in r.getMessage() and "b fails" in r.getMessage()
               for r in caplog.records)
    reader = ExperimentStore.open(path, readonly=True)
    try:
        assert {row.config["w"]: (row.status, row.num_failures) for row in reader.trials()} == {
            "a": ("ERROR", 0), "b": ("PENDING", 0)}
        assert ["b fails" in e.data["error"] for e in reader.events("error_after_stop")] == [True]
    finally:
        reader.close()


def _score(config, i):
    """``score`` = x + i / 100 at step ``i``: a scheduler ranks the trials without ties."""
    return {"score": config["x"] + i / 100}


#: A checkpoint and ``score`` each step, the trial of ``x == 0.2`` failing at its step 2 until the file
#: ``config["mark"]`` exists.
_scored_fails_once_at_2 = tune.with_parameters(resumable, before_step=_fails_at_2_until_marked, metrics=_score)


@pytest.mark.parametrize(("scheduler", "flag"), [("hyperband", "resume_errored"), ("asha", "restart_errored"),
                                                  ("fifo", "resume_errored")])
def test_a_restore_after_the_runs_end_runs_no_errored_trial_again_as_rays(ray_cluster, storage: str, tmp_path,
                                                                          scheduler: str, flag: str) -> None:
    """After an end of the run's that ended its search (``fail_fast=True`` here; a time budget, ``stop_all()``),
    Ray's restored controller finds its end condition again at its first step (``_has_errored`` under fail_fast,
    the TimeoutStopper's spent budget, the stopper's state) and stops every trial the restore would run, before it
    starts: the errored trial that ``resume_errored``/``restart_errored`` made ``PENDING`` ends ``TERMINATED``,
    unstarted, with no hook (a helper's side-by-side run, HyperBand, ASHA and FIFO alike). fluidsalus ran it again,
    and a synchronous HyperBand's trial then ended paused at its rung, its scheduler asked for no promotion."""
    from fluidsalus.trialgroup.executor import EXPERIMENT_ENDING_EVENT

    mark = str(tmp_path / "fixed")
    schedulers = {"hyperband": lambda: tune.schedulers.HyperBandScheduler(max_t=RESUMABLE_STEPS, reduction_factor=2),
                  "asha": lambda: tune.schedulers.ASHAScheduler(max_t=RESUMABLE_STEPS, grace_period=1,
                                                                reduction_factor=2),
                  "fifo": lambda: None}
    tuner = Tuner(_scored_fails_once_at_2, param_space={"x": tune.grid_search([0.1, 0.2, 0.3, 0.4]), "mark": mark},
                  tune_config=tune.TuneConfig(max_concurrent_trials=2, metric="score", mode="max",
                                              scheduler=schedulers[scheduler]()),
                  run_config=tune.RunConfig(name="failed_fast", storage_path=storage, verbose=0,
                                            failure_config=tune.FailureConfig(fail_fast=True)))
    assert tuner.fit().num_errors == 1
    path = os.path.join(storage, "failed_fast")

    def stored() -> tuple[dict, int, list[dict]]:
        reader = ExperimentStore.open(path, readonly=True)
        try:
            rows = {row.config["x"]: (row.status, row.last_iteration, len(reader.checkpoints(row.trial_id)))
                    for row in reader.trials()}
            return rows, len(reader.events("trial_start")), [e.data for e in reader.events(EXPERIMENT_ENDING_EVENT)]
        finally:
            reader.close()

    before, starts, _ = stored()
    assert before[0.2] == ("ERROR", 1, 1)
    open(mark, "w").close()
    grid = Tuner.restore(path, _scored_fails_once_at_2, **{flag: True}).fit()
    # (FIFO's generator makes its trials as slots free, as Ray's: the run's end left 2 or 3 of the 4)
    assert len(grid) == len(before) and grid.num_errors == 0 and all(r.status == "TERMINATED" for r in grid)
    after, starts_after, endings = stored()
    assert starts_after == starts  # none started again
    assert after == {**before, 0.2: ("TERMINATED", 1, 1)}  # (a restart's checkpoint kept: nothing replaced it)
    assert [e["reason"] for e in endings] == ["fail_fast", "fail_fast"]  # (the restore's run ended again at once)


def _median_rule() -> dict:
    return {"scheduler": tune.schedulers.MedianStoppingRule(time_attr="training_iteration", grace_period=1,
                                                            min_samples_required=1)}


def _optuna_hyperband() -> dict:
    from fluidsalus.tune.search.optuna import OptunaSearch

    return {"search_alg": OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=0)),
            "scheduler": tune.schedulers.HyperBandScheduler(max_t=6, reduction_factor=2)}


@pytest.mark.parametrize("make, wrapper", [(_median_rule, "MedianStopping"), (_optuna_hyperband, "OptunaHyperBand")])
def test_an_interrupted_run_of_a_judging_scheduler_continues_from_its_saved_state(ray_cluster, storage: str, tmp_path,
                                                                                  make, wrapper) -> None:
    callback = InterruptOnce(str(tmp_path / "interrupted"), n=4)
    tuner = Tuner(resumable, param_space={"x": tune.uniform(0, 1)},
                  tune_config=tune.TuneConfig(num_samples=4, metric="i", mode="max", max_concurrent_trials=2, **make()),
                  run_config=tune.RunConfig(name="judged", storage_path=storage, verbose=0, callbacks=[callback]))
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    restored = Tuner.restore(os.path.join(storage, "judged"), resumable)
    grid = restored.fit()
    assert type(restored.plan.searcher).__name__ == wrapper
    assert len(grid) == 4 and grid.num_errors == 0
    assert any(r.metrics["resumed_from"] > 0 for r in grid)  # continued from a checkpoint
    ends = sorted(r.metrics["i"] for r in grid)
    if wrapper == "MedianStopping":  # every trial ties on "i" at each time, so the rule stops none
        assert ends == [6] * 4
    else:  # HyperBand (max_t=6, eta=2; at most 2 unfinished trials per bracket): each ends at a rung budget
        assert set(ends) <= {1, 2, 3, 4, 6} and ends[-1] == 6
        study = restored.plan.searcher.optuna.study  # the four trials once each, each told its last value
        assert sorted((t.state.name, t.value) for t in study.trials) == [("COMPLETE", float(i)) for i in ends]


def test_running_twice_under_one_name_keeps_both(ray_cluster, storage: str) -> None:
    _run(_steps, storage, run_config_kwargs={"name": "same"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, grid = _run(_steps, storage, run_config_kwargs={"name": "same"})
    assert any("already exists" in str(w.message) for w in caught)
    assert os.path.basename(grid.experiment_path).startswith("same_")


def test_fits_of_one_second_get_names_of_their_own_without_a_word(ray_cluster, storage: str, monkeypatch) -> None:
    """The made-up name is to the second: a second fit within it warned "an experiment named ... already exists"
    and got the date twice; Ray says nothing (its two runs share the folder)."""
    import types

    import fluidsalus.tune._tuner as tuner_module

    class OneSecond(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 11, 29, 12, 0, 0)

    monkeypatch.setattr(tuner_module, "datetime", types.SimpleNamespace(datetime=OneSecond))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        names = [os.path.basename(_run(_steps, storage)[1].experiment_path) for _ in range(2)]
    assert names == ["steps_2026-11-29_12-00-00", "steps_2026-11-29_12-00-00_2"]


def _reports_nested(config):
    for i in range(2):
        tune.report({"score": config["x"] * i, "nested": {"a": i, "b": {"c": 1}}})


class _FirstResultKeys(tune.Callback):
    def __init__(self) -> None:
        self.keys: list[str] = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not self.keys:
            self.keys = list(result)


def test_results_frames_and_callbacks_have_rays_key_order(ray_cluster, tmp_path) -> None:
    from test_result import RAY_FRAME_ORDER, RAY_METRICS_ORDER  # Ray 2.60's, as measured (tests/test_result.py)

    seen = _FirstResultKeys()
    grid = Tuner(_reports_nested, param_space={"x": tune.grid_search([1]), "y": {"z": 2}},
                 run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[seen])).fit()
    assert list(grid[0].metrics) == RAY_METRICS_ORDER
    assert seen.keys == RAY_METRICS_ORDER  # (Ray's callbacks get these keys but experiment_tag)
    assert list(grid[0].metrics_dataframe.columns) == RAY_FRAME_ORDER
    assert list(grid.get_dataframe().columns) == [*RAY_FRAME_ORDER, "logdir"]


def _reports_val_acc(config):
    """Reports a nested metric, ``{"val": {"acc": a * i}}``, and ``late`` only from its third iteration on."""
    for i in range(1, 9):
        result = {"val": {"acc": config["a"] * i}}
        if i >= 3:
            result["late"] = i
        tune.report(result)


def test_a_nested_metric_and_stop_key_name_their_values_with_rays_slash_and_a_missing_stop_key_is_no_error(
        ray_cluster, tmp_path) -> None:
    """Ray flattens a result before its scheduler, search algorithm and stop rule see it, so ``metric="val/acc"``
    and ``stop={"val/acc": ...}`` name ``result["val"]["acc"]``; a stop key a result lacks is a warning there.
    Before, each of these failed the run with a ConfigError."""
    grid = Tuner(_reports_val_acc, param_space={"a": tune.grid_search([1, 2, 3, 5])},
                 tune_config=tune.TuneConfig(metric="val/acc", mode="max",
                                             scheduler=tune.schedulers.ASHAScheduler(max_t=8, grace_period=2)),
                 run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0,
                                           stop={"val/acc": 10, "late": 7})).fit()
    assert grid.num_errors == 0  # ASHA read val/acc from every result (it fails a run whose results lack it)
    reached = {r.config["a"]: r.metrics["training_iteration"] for r in grid}
    assert reached[5] == 2  # val/acc 10 at its second iteration
    assert all(it <= 7 for it in reached.values())  # "late" (from the third iteration on) stops the rest by 7
    best = grid.get_best_result()
    assert best.metrics["val"]["acc"] == max(r.metrics["val"]["acc"] for r in grid)


def reports_numpy_values(config: dict) -> None:
    for _ in range(2):
        tune.report({"a": np.float32(0.5), "b": np.int64(3), "c": np.array([1.0, 2.0]), "d": {"e": np.float32(1.5)}})


def test_reported_numpy_values_stay_numpy_in_the_results_of_fit_and_plain_after_restore(ray_cluster, tmp_path):
    """As in Ray Tune: ``Result.metrics`` of the grid ``fit()`` returns holds the objects the trial reported
    (before, the JSON store's Python numbers and lists); the grid read back from disk has what JSON holds."""
    grid = Tuner(reports_numpy_values, run_config=tune.RunConfig(storage_path=str(tmp_path), name="np",
                                                                  verbose=0)).fit()
    metrics = grid[0].metrics
    assert type(metrics["a"]) is np.float32 and type(metrics["b"]) is np.int64
    assert isinstance(metrics["c"], np.ndarray) and metrics["c"].tolist() == [1.0, 2.0]
    assert type(metrics["d"]["e"]) is np.float32
    assert metrics["done"] is True and metrics["config"] == {} and metrics["training_iteration"] == 2
    assert list(grid.get_dataframe()["a"]) == [0.5]
    again = tune.Result.from_path(grid[0].path)
    assert type(again.metrics["a"]) is float and again.metrics["c"] == [1.0, 2.0]


def test_a_lambda_trainable_names_its_experiment_trials_and_folders_lambda_as_ray_does(ray_cluster, storage):
    """Ray names a lambda's trainable ``lambda``: fluidsalus.run made ``<lambda>_<date>`` folders (which a shell
    must quote) and the Tune front end ``_lambda__<id>`` trial folders and ``<lambda>_<id>`` trial names (a
    helper's side by side)."""
    import fluidsalus

    grid = tune.Tuner(lambda config: tune.report({"name": tune.get_context().get_trial_name()}),
                      param_space={"x": tune.grid_search([1])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    (result,) = grid
    assert os.path.basename(grid.experiment_path).startswith("lambda_")
    assert os.path.basename(result.path).startswith(f"lambda_{result.metrics['trial_id']}_0_x=1_")
    assert result.metrics["name"] == f"lambda_{result.metrics['trial_id']}"
    native = fluidsalus.run(lambda config: fluidsalus.report({"x": config["x"]}), {"x": 1}, storage_path=storage,
                            verbose=0)
    assert os.path.basename(native.experiment_path).startswith("lambda_")


@pytest.mark.parametrize("module", ["fluidsalus.tune._tuner", "fluidsalus.tune.callback",
                                    "fluidsalus.tune.search._own_suggest"])
def test_what_a_restore_unpickles_keeps_the_scripts_file_names_for_its_tracebacks(module):
    """The Tuner's state, callbacks' states and a search algorithm's were pickled with the standalone
    cloudpickle, which (from 3.1.3 on) names every function pickled by value ``<dynamic-code>``: after a
    ``Tuner.restore`` a restored callback's traceback read ``File "<dynamic-code>"`` (a helper's test). Ray's
    cloudpickle, which ships the trainables, keeps the file."""
    import importlib

    pickler = importlib.import_module(module).cloudpickle
    namespace: dict = {"__name__": "__main__"}  # (a function of the script: pickled by value)
    exec(compile("def hook():\n    return 1\n", "/work/my_script.py", "exec"), namespace)
    assert pickler.loads(pickler.dumps(namespace["hook"])).__code__.co_filename == "/work/my_script.py"
