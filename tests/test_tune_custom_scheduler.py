"""A trial scheduler of the user's own (a TrialScheduler subclass), run as Ray Tune runs it
(fluidsalus/tune/_custom_scheduler.py)."""

from __future__ import annotations

import json
import math
import time
import warnings

import pytest
from _trials import StopAllAfter

import fluidsalus.tune as tune
from fluidsalus import searchers
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import Decision
from fluidsalus.testing.state import drive_checking_state_json
from fluidsalus.tune import TuneConfig, Tuner
from fluidsalus.tune._custom_scheduler import ScheduledSearch, is_custom_scheduler
from fluidsalus.tune._translate import plan
from fluidsalus.tune.callback import TrialInfo
from fluidsalus.tune.schedulers import ASHAScheduler, TrialScheduler

#: Seconds each iteration of the real run's trainable sleeps.
_STEP_S = 0.15


class StopBelow(TrialScheduler):
    """Stops a trial whose metric is below ``threshold`` at ``step``; records what Tune tells it."""

    def __init__(self, threshold=0.5, step=2, metric=None, mode=None):
        super().__init__(metric, mode)
        self.threshold, self.step = threshold, step
        self.added, self.completed, self.errored, self.removed = [], [], [], []
        self.live_seen: list[int] = []

    def on_trial_add(self, tune_controller, trial):
        self.added.append(trial.trial_id)

    def on_trial_result(self, tune_controller, trial, result):
        self.live_seen.append(len(tune_controller.get_live_trials()))
        if result["training_iteration"] >= self.step and result[self.metric] < self.threshold:
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result):
        self.completed.append((trial.trial_id, trial.status, result["training_iteration"]))

    def on_trial_error(self, tune_controller, trial):
        self.errored.append(trial.trial_id)

    def on_trial_remove(self, tune_controller, trial):
        self.removed.append(trial.trial_id)


def test_only_a_scheduler_with_hooks_of_its_own_is_custom() -> None:
    assert is_custom_scheduler(StopBelow())
    assert not is_custom_scheduler(TrialScheduler()) and not is_custom_scheduler(ASHAScheduler())
    assert not is_custom_scheduler(tune.schedulers.FIFOScheduler())


def _search(scheduler, n=3):
    search = ScheduledSearch(searchers.RandomSearch({"x": tune.uniform(0, 1)}, num_samples=n, seed=0), scheduler)
    (group,) = search.next_groups()
    for i, config in enumerate(group.configs):
        search.on_trial_add(f"t{i}", group.group_id, config)
    return search


def test_the_schedulers_stop_wins_and_it_hears_of_each_trials_life() -> None:
    scheduler = StopBelow(metric="m", mode="max")
    search = _search(scheduler)
    assert scheduler.added == ["t0", "t1", "t2"]
    assert search.on_result("t0", {"m": 0.9, "training_iteration": 2}) == Decision.CONTINUE
    assert search.on_result("t1", {"m": 0.1, "training_iteration": 1}) == Decision.CONTINUE  # before its step
    assert search.on_result("t1", {"m": 0.1, "training_iteration": 2}) == Decision.STOP
    assert scheduler.live_seen == [3, 3, 3]
    search.on_trial_complete("t1", {"m": 0.1, "training_iteration": 2})
    search.on_trial_complete("t0", {"m": 0.8, "training_iteration": 3}, error=True)
    search.on_trial_complete("t2", None)  # ended before it reported (stopped while queued)
    # (the hook sees the trial RUNNING and live, as Ray's: its controller sets TERMINATED after the hooks; in a
    # side-by-side run each on_trial_complete saw status RUNNING and 2 live trials under max_concurrent_trials=2,
    # the last one 1; fluidsalus's saw TERMINATED)
    assert scheduler.completed == [("t1", "RUNNING", 2)]
    assert scheduler.errored == ["t0"] and scheduler.removed == ["t2"]
    assert search.is_finished()


def test_a_resumed_search_asks_the_scheduler_about_the_trials_it_continues() -> None:
    scheduler = StopBelow(metric="m", mode="max")
    search = _search(scheduler)
    search.on_result("t0", {"m": 0.9, "training_iteration": 1, "timestamp": 100})
    search.on_result("t1", {"m": 0.9, "training_iteration": 1, "timestamp": 200})
    search.on_trial_complete("t1", {"m": 0.9, "training_iteration": 1, "timestamp": 200})
    state = search.state_dict()
    fresh = StopBelow(metric="m", mode="max")
    resumed = ScheduledSearch(searchers.RandomSearch({"x": tune.uniform(0, 1)}, num_samples=3, seed=0), fresh)
    resumed.load_state_dict(state)
    # as Ray's resume: every trial added again, newest result first (t2 never reported), unfinished ones PENDING
    assert fresh.added == ["t1", "t0", "t2"]
    assert [t.status for t in resumed._view.get_trials()] == ["PENDING", "TERMINATED", "PENDING"]
    assert resumed.next_groups() == []  # nothing new
    assert resumed.on_result("t0", {"m": 0.1, "training_iteration": 2}) == Decision.STOP
    assert [t.status for t in resumed._view.get_trials()] == ["RUNNING", "TERMINATED", "PENDING"]
    assert resumed._trials["t0"].config == search._trials["t0"].config and fresh.live_seen == [2]


def test_pause_goes_on_with_one_warning_and_a_bad_decision_is_an_error() -> None:
    class Pausing(TrialScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return result["say"]

    search = _search(Pausing())
    with pytest.warns(UserWarning, match="paused trial t0; fluidsalus shares devices instead of pausing"):
        assert search.on_result("t0", {"say": TrialScheduler.PAUSE}) == Decision.CONTINUE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert search.on_result("t1", {"say": "PAUSE"}) == Decision.CONTINUE  # warned once
    with pytest.raises(ConfigError, match=r"Pausing.on_trial_result returned 'later'; it must return"):
        search.on_result("t2", {"say": "later"})


def test_state_json_encodes_the_state_dict_at_every_step_and_keeps_ended_trials_encoded() -> None:
    search = ScheduledSearch(searchers.RandomSearch({"x": tune.uniform(0, 1)}, num_samples=20, seed=0),
                             StopBelow(threshold=0.5, metric="m", mode="max"))
    checks = drive_checking_state_json(search, lambda config, iteration: config["x"], metric="m", max_iterations=4,
                                       parallel=3, seed=0)
    assert checks > 50
    assert set(search._ended_json) == set(search._trials) and len(search._trials) == 20  # every ended trial kept
    resumed = ScheduledSearch(searchers.RandomSearch({"x": tune.uniform(0, 1)}, num_samples=20, seed=0),
                              StopBelow(metric="m", mode="max"))
    resumed.load_state_dict(json.loads(search.state_json()))
    assert json.loads(resumed.state_json()) == json.loads(search.state_json())


def test_plan_wraps_the_search_algorithms_trials_and_checks_metric_and_mode() -> None:
    planned = plan(TuneConfig(num_samples=4, scheduler=StopBelow(metric="m", mode="max")), {"x": tune.uniform(0, 1)})
    assert isinstance(planned.searcher, ScheduledSearch)
    assert isinstance(planned.searcher.inner, searchers.RandomSearch) and planned.searcher.inner.num_samples == 4
    assert (planned.metric, planned.mode) == ("m", "max")
    assert planned.summary.startswith("StopBelow (your own scheduler) over FIFOScheduler -> RandomSearch(")
    with pytest.raises(ConfigError, match="runs over random or grid search, OptunaSearch, a Repeater or a search "
                                          "algorithm of your own; ASHA decides on its trials itself"):
        plan(TuneConfig(metric="m", mode="max", scheduler=StopBelow(),
                        search_alg=searchers.ASHA({"x": tune.uniform(0, 1)}, 4, "m", "max")), {})
    with pytest.raises(ConfigError, match="metric/mode given to TuneConfig and to StopBelow, which has its own"):
        plan(TuneConfig(metric="a", mode="max", scheduler=StopBelow(metric="m", mode="max")), {})

    class Chooser(StopBelow):
        def choose_trial_to_run(self, tune_controller):
            return None

    with pytest.warns(UserWarning, match="Chooser.choose_trial_to_run is not called"):
        plan(TuneConfig(metric="m", mode="max", scheduler=Chooser()), {"x": 1})


def test_a_subclass_of_rays_trial_scheduler_runs_as_it_is() -> None:
    from ray.tune.schedulers import FIFOScheduler as RayFIFO

    class RayStyle(RayFIFO):
        def on_trial_result(self, tune_controller, trial, result):
            return RayFIFO.STOP

    with pytest.warns(UserWarning, match="RayStyle subclasses Ray Tune's FIFOScheduler; fluidsalus runs it as it is"):
        planned = plan(TuneConfig(metric="m", mode="max", scheduler=RayStyle()), {"x": 1})
    (group,) = planned.searcher.next_groups()
    planned.searcher.on_trial_add("t0", group.group_id, group.configs[0])
    assert planned.searcher.on_result("t0", {"m": 1}) == Decision.STOP


def _steps(config):
    for _ in range(6):
        time.sleep(_STEP_S)  # long enough for the driver's decision to arrive before the trial ends
        tune.report({"value": config["x"]})


def test_a_tuner_run_under_a_scheduler_of_your_own(ray_cluster, storage) -> None:
    scheduler = StopBelow(threshold=0.5, step=2)
    grid = Tuner(_steps, param_space={"x": tune.grid_search([0.1, 0.3, 0.7, 0.9])},
                 tune_config=TuneConfig(metric="value", mode="max", scheduler=scheduler),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    ends = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    assert grid.num_errors == 0 and ends[0.7] == ends[0.9] == 6
    # Each result waits for the scheduler, as in Ray: a STOP at iteration 2 ends the trial there (it ended at its
    # next report after the decision arrived, a report or two later).
    assert ends[0.1] == ends[0.3] == 2
    assert sorted(scheduler.added) == sorted(r.metrics["trial_id"] for r in grid)
    assert sorted(iteration for _, _, iteration in scheduler.completed) == sorted(ends.values())


def test_the_runs_end_tells_a_scheduler_of_your_own_nothing_of_the_trials_it_ends() -> None:
    """Ray 2.60's controller ends a run (its time budget, ``stop_all()``, ``fail_fast``) by setting every unfinished
    trial ``TERMINATED`` with no scheduler hook (``TuneController._stop_experiment_if_needed`` ->
    ``_schedule_trial_stop``; in a side-by-side run, num_samples=8 under a ``stop_all()`` after 5 results: the
    scheduler heard ``on_trial_add`` of each trial and nothing more). fluidsalus called ``on_trial_remove`` for each
    trial the end found queued and ``on_trial_complete`` for each it stopped running."""
    scheduler = StopBelow(threshold=-1.0, metric="m", mode="max")
    search = _search(scheduler)
    assert search.on_result("t0", {"m": 0.9, "training_iteration": 1}) == Decision.CONTINUE
    search.run_ending()
    search.on_trial_complete("t0", {"m": 0.9, "training_iteration": 1})  # stopped running
    search.on_trial_complete("t1", None)  # ended queued
    search.on_trial_complete("t2", None, error=True)
    assert scheduler.added == ["t0", "t1", "t2"] and scheduler.completed == scheduler.removed == scheduler.errored == []
    assert [trial.status for trial in search._view.get_trials()] == ["TERMINATED", "TERMINATED", "ERROR"]


def _reports_on(config):
    while True:
        time.sleep(_STEP_S / 4)
        tune.report({"value": config["x"]})


class _StopAllAfter(StopAllAfter, tune.Stopper):
    """:class:`StopAllAfter`, a ``tune.Stopper``."""


def test_a_tuner_run_ended_by_stop_all_tells_a_scheduler_of_your_own_only_of_its_trials_start(ray_cluster,
                                                                                             storage) -> None:
    """The run's end, in a real run: 6 trials that report until stopped, ``stop_all()`` after 5 results. Ray's
    scheduler heard ``on_trial_add`` of every trial and no ``on_trial_complete`` or ``on_trial_remove`` (a
    side-by-side run)."""
    scheduler = StopBelow(threshold=-1.0)
    grid = Tuner(_reports_on, param_space={"x": tune.uniform(0, 1)},
                 tune_config=TuneConfig(metric="value", mode="max", scheduler=scheduler, num_samples=6),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=_StopAllAfter(5))).fit()
    assert len(grid) == 6 and grid.num_errors == 0 and all(r.status == "TERMINATED" for r in grid)
    assert len(scheduler.added) == 6
    assert scheduler.completed == scheduler.removed == scheduler.errored == []


#: What the scheduler of the test below records: a module-level variable, as a script's scheduler writes to one.
RECORDED: list[int] = []


def test_a_scheduler_defined_in_the_script_writes_to_the_scripts_own_variables(ray_cluster, storage) -> None:
    """fit() kept a copy of the TuneConfig for tuner.pkl by pickling and loading it in the process: cloudpickle then
    set the methods of a class pickled by value (a script's own, or one defined in a function, like this one) anew,
    with a copy of the globals they use, so the scheduler's writes to a module-level list went to a copy that
    nobody read (a helper's script: 6 entries under Ray, none here)."""

    class Records(TrialScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            RECORDED.append(result["training_iteration"])
            return TrialScheduler.CONTINUE

    RECORDED.clear()
    Tuner(_steps, param_space={"x": tune.grid_search([0.1, 0.9])},
          tune_config=TuneConfig(metric="value", mode="max", scheduler=Records()),
          run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert sorted(RECORDED) == sorted(list(range(1, 7)) * 2)


def _score(x: int, iteration: int) -> float:
    """Crossing curves (a helper's side-by-side script): slope and offset depend on x."""
    a = [0.5, 1.0, 2.0, 0.2, 3.0, 1.5, 0.7, 2.5, 0.1][x]
    b = [5.0, 3.0, 0.5, 6.0, 0.0, 2.0, 4.0, 1.0, 7.0][x]
    return b + a * math.log(1 + iteration)


class _Trial:
    """What Ray's schedulers read of a trial."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


class _NoneWaiting:
    """What Ray's MedianStoppingRule reads of its controller: no trial waits (with one, Ray pauses a trial it
    cannot judge yet, to let it run: fluidsalus shares devices instead, docs/compatibility.md)."""

    @staticmethod
    def get_live_trials():
        return []


def _decisions_one_trial_at_a_time(judge, add, complete, n=9, max_t=9):
    """Trial x runs after trial x-1 ended (max_concurrent_trials=1): {x: [decision per iteration]}."""
    out = {}
    for x in range(n):
        add(x)
        said = []
        for iteration in range(1, max_t + 1):
            result = {"m": _score(x, iteration), "training_iteration": iteration}
            said.append(judge(x, result))
            if said[-1] == TrialScheduler.STOP:
                break
        complete(x, result)
        out[x] = said
    return out


@pytest.mark.parametrize("which", ["asha", "median"])
def test_a_subclass_of_asha_or_the_median_rule_that_calls_super_gets_the_rules_decisions_as_in_ray(which) -> None:
    """A script's subclass of ASHAScheduler (or MedianStoppingRule) that overrides on_trial_result to log and
    returns super().on_trial_result(...) ran as a scheduler of your own whose super() answered CONTINUE: it
    stopped none of 9 trials, where Ray stopped 6 (a review's side-by-side run). Its base hooks now answer with the
    rule the plain class maps onto: the same decisions as Ray's own scheduler, result for result."""
    from ray.tune.schedulers import ASHAScheduler as RayASHA
    from ray.tune.schedulers import MedianStoppingRule as RayMedian

    kwargs = {"asha": {"max_t": 9, "grace_period": 1, "reduction_factor": 3},
              "median": {"time_attr": "training_iteration", "grace_period": 2, "min_samples_required": 2}}[which]
    base = {"asha": tune.schedulers.ASHAScheduler, "median": tune.schedulers.MedianStoppingRule}[which]

    class Logging(base):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.said = []

        def on_trial_result(self, tune_controller, trial, result):
            self.said.append(super().on_trial_result(tune_controller, trial, result))
            return self.said[-1]

    ray_scheduler = {"asha": RayASHA, "median": RayMedian}[which](metric="m", mode="max", **kwargs)
    ray_trials = {x: _Trial(f"r{x}") for x in range(9)}
    expected = _decisions_one_trial_at_a_time(
        lambda x, r: ray_scheduler.on_trial_result(_NoneWaiting(), ray_trials[x], r),
        lambda x: ray_scheduler.on_trial_add(None, ray_trials[x]),
        lambda x, r: ray_scheduler.on_trial_complete(None, ray_trials[x], r))
    assert sum(said[-1] == TrialScheduler.STOP and len(said) < 9 for said in expected.values()) >= 3

    mine = Logging(**kwargs)
    planned = plan(TuneConfig(metric="m", mode="max", scheduler=mine, num_samples=1),
                   {"x": tune.grid_search(list(range(9)))})
    search = planned.searcher
    assert isinstance(search, ScheduledSearch) and planned.summary.startswith(
        f"Logging (your own scheduler, super() answers {base.__name__}'s rule) over ")
    (group,) = search.next_groups()
    ids = {}

    def add(x):
        ids[x] = f"t{x}"
        search.on_trial_add(ids[x], group.group_id, group.configs[x])

    def judge(x, result):
        return TrialScheduler.STOP if search.on_result(ids[x], result) == Decision.STOP else TrialScheduler.CONTINUE

    got = _decisions_one_trial_at_a_time(judge, add, lambda x, r: search.on_trial_complete(ids[x], r))
    assert got == expected
    assert mine.said == [d for said in expected.values() for d in said]
    # outside a run the base decides nothing, as before
    assert mine.on_trial_result(None, _Trial("t0"), {"m": -100.0, "training_iteration": 9}) == TrialScheduler.CONTINUE


def test_the_subclasss_own_answer_is_final_and_a_hyperband_subclass_that_does_not_ask_its_base_has_no_rule() -> None:
    class Lenient(tune.schedulers.ASHAScheduler):
        """Lets trial t1 go on where ASHA stops it, as a Ray subclass may."""

        def on_trial_result(self, tune_controller, trial, result):
            said = super().on_trial_result(tune_controller, trial, result)
            return TrialScheduler.CONTINUE if trial.trial_id == "t1" else said

    search = plan(TuneConfig(metric="m", mode="max", scheduler=Lenient(max_t=9, reduction_factor=2)),
                  {"x": tune.grid_search([0, 1, 2])}).searcher
    (group,) = search.next_groups()
    for i, config in enumerate(group.configs):
        search.on_trial_add(f"t{i}", group.group_id, config)
    assert search.on_result("t0", {"m": 1.0, "training_iteration": 1}) == Decision.CONTINUE
    assert search.on_result("t1", {"m": 0.0, "training_iteration": 1}) == Decision.CONTINUE  # ASHA: STOP
    assert search.on_result("t2", {"m": 0.0, "training_iteration": 1}) == Decision.STOP
    assert search.on_result("t1", {"m": 5.0, "training_iteration": 9}) == Decision.CONTINUE  # max_t: STOP

    class OwnHyperBand(tune.schedulers.HyperBandScheduler):
        """Does not ask HyperBand: as in Ray, HyperBand then pauses nothing, and this rule decides alone."""

        def on_trial_result(self, tune_controller, trial, result):
            return TrialScheduler.CONTINUE

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        planned = plan(TuneConfig(metric="m", mode="max", scheduler=OwnHyperBand(max_t=9)), {"x": 1})
    assert planned.searcher.rule is None


def test_a_hyperband_subclass_asking_its_base_through_a_helper_or_a_decorator_gets_the_rule() -> None:
    """A ``super()`` call in a helper method, or under a ``functools.wraps`` decorator, was not seen in the override's
    code: the subclass ran without HyperBand and no warning (Ray: the same ends as a plain ``super()``; h157's B1).
    Metric and mode given both to such a subclass and to TuneConfig are refused, as Ray refuses them (h157's B3)."""
    import functools

    def logged(method):
        @functools.wraps(method)
        def wrapper(self, *args):
            return method(self, *args)
        return wrapper

    class ThroughAHelper(tune.schedulers.HyperBandScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return self._decide(tune_controller, trial, result)

        def _decide(self, tune_controller, trial, result):
            return super().on_trial_result(tune_controller, trial, result)

    class Decorated(tune.schedulers.HyperBandScheduler):
        @logged
        def on_trial_result(self, tune_controller, trial, result):
            return super().on_trial_result(tune_controller, trial, result)

    for cls in (ThroughAHelper, Decorated):
        planned = plan(TuneConfig(metric="m", mode="max", scheduler=cls(max_t=9)), {"x": 1})
        assert type(planned.searcher.rule).__name__ == "HyperBandRule", cls
    with pytest.raises(ConfigError, match=r"metric/mode given to TuneConfig and to Decorated, which has its own"):
        plan(TuneConfig(metric="m", mode="max", scheduler=Decorated(metric="m", mode="max", max_t=9)), {"x": 1})


def test_a_hyperband_subclasss_search_refuses_the_state_of_one_that_ran_without_hyperband_and_says_why() -> None:
    """An experiment recorded before a HyperBand subclass's ``super()`` ran HyperBand's rule (its search was random
    search) failed to restore with "does not load into this ScheduledSearch (KeyError: 'seed'); resume it with the
    searcher ... it ran with", advice the user (who passed no searcher) could not follow (h157's A1)."""
    class Asks(tune.schedulers.HyperBandScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return super().on_trial_result(tune_controller, trial, result)

    class Alone(tune.schedulers.HyperBandScheduler):  # (how such a subclass ran before: without HyperBand)
        def on_trial_result(self, tune_controller, trial, result):
            return TrialScheduler.CONTINUE

    space = {"x": tune.grid_search([1, 2])}
    old = plan(TuneConfig(metric="m", mode="max", scheduler=Alone(max_t=9)), space).searcher
    old.next_groups()
    new = plan(TuneConfig(metric="m", mode="max", scheduler=Asks(max_t=9)), space).searcher
    with pytest.raises(ConfigError, match=r"this experiment ran Asks over a search without HyperBand .* resume it "
                                          r"with that fluidsalus, or start a new experiment"):
        new.load_state_dict(old.state_dict())


class _HyperBandSaying(tune.schedulers.HyperBandScheduler):
    """Logs what ``super().on_trial_result`` says and returns it; stops the trials in ``stop_at`` ({x: iteration})
    on its own."""

    def __init__(self, stop_at=None, **kwargs):
        super().__init__(**kwargs)
        self.said, self.stop_at, self.removed, self.last = [], stop_at or {}, [], {}

    def on_trial_result(self, tune_controller, trial, result):
        self.said.append(super().on_trial_result(tune_controller, trial, result))
        self.last[trial.config["x"]] = self.said[-1]
        if self.stop_at.get(trial.config["x"]) == result["training_iteration"]:
            return TrialScheduler.STOP
        return self.said[-1]

    def on_trial_remove(self, tune_controller, trial):
        self.removed.append(trial.config["x"])
        super().on_trial_remove(tune_controller, trial)


def test_a_hyperband_subclass_is_told_on_trial_remove_by_its_bases_on_trial_complete_and_on_trial_error() -> None:
    """Ray 2.60's ``HyperBandScheduler.on_trial_complete`` and ``on_trial_error`` take the trial out of its bracket
    with ``self.on_trial_remove`` (``ray/tune/schedulers/hyperband.py``), so a subclass that overrides
    ``on_trial_remove`` is told of every trial that ends: in a side-by-side run under Ray, ``remove`` for all 9
    trials (5 inside ``on_trial_complete``, 4 stopped while paused). fluidsalus's base did not call it: the
    subclass was told only of the trials stopped while they waited."""
    trial = TrialInfo("t1", {"x": 1})
    mine = _HyperBandSaying(max_t=9)
    mine.on_trial_complete(None, trial, {"m": 1.0})
    mine.on_trial_error(None, TrialInfo("t2", {"x": 2}))
    assert mine.removed == [1, 2]


def test_a_hyperband_subclasss_plan_names_the_subclass_in_its_messages() -> None:
    """The plan of a HyperBandScheduler subclass that asks its base said "HyperBandScheduler needs a metric and a
    mode", "scheduler=HyperBandScheduler has no fluidsalus equivalent": the plain class it runs on, where every
    other scheduler's messages name the user's class. They name the subclass now."""
    from fluidsalus.tune.search.bohb import TuneBOHB

    class MyHyperBand(tune.schedulers.HyperBandScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return super().on_trial_result(tune_controller, trial, result)

    space = {"x": tune.uniform(0, 1)}
    with pytest.raises(ConfigError, match=r"^TuneConfig: MyHyperBand needs a metric and a mode"):
        plan(TuneConfig(scheduler=MyHyperBand()), space)
    with pytest.raises(ConfigError, match=r"search_alg=TuneBOHB, scheduler=MyHyperBand has no fluidsalus equivalent"):
        plan(TuneConfig(metric="m", mode="max", scheduler=MyHyperBand(), search_alg=TuneBOHB()), space)
    with pytest.raises(ConfigError, match=r"scheduler=MyHyperBand: a fluidsalus searcher already decides"):
        plan(TuneConfig(metric="m", mode="max", scheduler=MyHyperBand(),
                        search_alg=searchers.RandomSearch({"x": 0.5}, num_samples=2)), space)
    planned = plan(TuneConfig(metric="m", mode="max", scheduler=MyHyperBand(max_t=9)), space)
    assert "HyperBandScheduler ->" not in planned.summary and " over MyHyperBand -> HyperBand(" in planned.summary


#: Ray Tune 2.60's run of 9 trials (x = 0..8, ``_score``) under a HyperBandScheduler(max_t=9) subclass that returns
#: ``super().on_trial_result(...)``: each trial's last iteration, and the count of each answer of ``super()``
#: (a helper's side-by-side script). Under ``_HyperBandSaying(stop_at={8: 2})``: x=8 ends at 2, and ``super()``
#: answered CONTINUE 46, PAUSE 7, STOP 3 times.
_RAY_HYPERBAND_ENDS = {0: 9, 1: 9, 2: 9, 3: 9, 4: 3, 5: 3, 6: 9, 7: 3, 8: 9}
_RAY_HYPERBAND_SAID = {"CONTINUE": 52, "PAUSE": 7, "STOP": 4}


@pytest.mark.parametrize("stop_at", [{}, {8: 2}])
def test_a_hyperband_subclass_that_calls_super_gets_hyperbands_decisions_as_in_ray(stop_at) -> None:
    """A script's HyperBandScheduler subclass that logs and returns ``super().on_trial_result(...)`` ran as a
    scheduler of your own whose super() answered CONTINUE: all 9 trials ran to max_t, where Ray stopped 3 at their
    rung (a review's side-by-side run). It now runs HyperBand's brackets, its super() answering HyperBand's
    decision (PAUSE at a rung's budget), and a STOP of its own still ends a trial, as in Ray."""
    from collections import Counter

    from fluidsalus.testing.driver import drive

    space = {"x": tune.grid_search(list(range(9)))}
    mine = _HyperBandSaying(stop_at=stop_at, max_t=9)
    planned = plan(TuneConfig(metric="m", mode="max", scheduler=mine), space)
    assert isinstance(planned.searcher, ScheduledSearch) and planned.summary.startswith(
        "_HyperBandSaying (your own scheduler, super() answers HyperBandScheduler's rule) over _HyperBandSaying -> "
        "HyperBand(")
    run = drive(planned.searcher, lambda config, it: _score(config["x"], it), metric="m", max_iterations=9,
                parallel=9)
    ends = {t.config["x"]: t.history[-1]["training_iteration"] for t in run.trials.values()}
    assert ends == {**_RAY_HYPERBAND_ENDS, **{x: it for x, it in stop_at.items()}}
    said = Counter(mine.said)
    assert said == (_RAY_HYPERBAND_SAID if not stop_at else {"CONTINUE": 46, "PAUSE": 7, "STOP": 3})
    # every trial leaves HyperBand through on_trial_remove, once, as in Ray 2.60 (9 of 9 in the side-by-side run):
    # those it stopped while they waited at a rung as Ray's stop_trial removes them, the others through
    # super().on_trial_complete(...), which calls self.on_trial_remove in Ray's HyperBandScheduler (only the first
    # were told before)
    assert sorted(mine.removed) == list(range(9))
    # as the plain class's run, decision for decision, without a STOP of the subclass's own
    if not stop_at:
        plain = plan(TuneConfig(metric="m", mode="max", scheduler=tune.schedulers.HyperBandScheduler(max_t=9)),
                     space).searcher
        assert run.decisions == drive(plain, lambda config, it: _score(config["x"], it), metric="m",
                                      max_iterations=9, parallel=9).decisions


def test_a_tuner_run_under_an_asha_subclass_that_calls_super_stops_trials_as_asha(ray_cluster, storage) -> None:
    """A script's ASHA subclass that only counts and returns ``super().on_trial_result(...)`` stopped nothing: the
    run became a random search (a helper's side-by-side script: Ray stopped 6 of 9 trials)."""

    class Counted(ASHAScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            RECORDED.append(result["training_iteration"])
            return super().on_trial_result(tune_controller, trial, result)

    RECORDED.clear()
    grid = Tuner(_steps, param_space={"x": tune.grid_search([0.9, 0.7, 0.3, 0.1])},
                 tune_config=TuneConfig(metric="value", mode="max", max_concurrent_trials=1,
                                        scheduler=Counted(max_t=6, grace_period=1, reduction_factor=3)),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    ends = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    # one at a time, best first: each later trial is below the rung's cutoff at its first result, as ASHA decides
    assert ends == {0.9: 6, 0.7: 1, 0.3: 1, 0.1: 1} and len(RECORDED) == 9


def test_a_hyperband_subclasss_search_saves_its_state_and_warns_once_where_its_answer_cannot_stand() -> None:
    """The state (HyperBand's brackets and the trial views) is saved at every step and restores; an answer other
    than STOP that differs from HyperBand's (a CONTINUE where it pauses the trial) leaves HyperBand's decision
    standing, with one warning."""

    class Eager(tune.schedulers.HyperBandScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            super().on_trial_result(tune_controller, trial, result)
            return TrialScheduler.CONTINUE

    def planned(scheduler):
        return plan(TuneConfig(metric="m", mode="max", scheduler=scheduler), {"x": tune.grid_search(list(range(9)))})

    search = planned(_HyperBandSaying(max_t=9)).searcher
    assert drive_checking_state_json(search, lambda config, it: _score(config["x"], it), metric="m",
                                     max_iterations=9, parallel=3, seed=0) > 50
    resumed = planned(_HyperBandSaying(max_t=9)).searcher
    resumed.load_state_dict(json.loads(search.state_json()))
    assert json.loads(resumed.state_json()) == json.loads(search.state_json())

    from fluidsalus.testing.driver import drive

    with pytest.warns(UserWarning, match=r"Eager.on_trial_result answered CONTINUE where HyperBandScheduler's rule "
                                         r"answered PAUSE .*only a STOP of yours changes its decision") as caught:
        run = drive(planned(Eager(max_t=9)).searcher, lambda config, it: _score(config["x"], it), metric="m",
                    max_iterations=9, parallel=9)
    assert len([w for w in caught if "Eager.on_trial_result" in str(w.message)]) == 1
    assert {t.config["x"]: t.history[-1]["training_iteration"] for t in run.trials.values()} == _RAY_HYPERBAND_ENDS


def _crossing(config):
    for iteration in range(1, 10):
        tune.report({"m": _score(config["x"], iteration)})


def test_a_tuner_run_under_a_hyperband_subclass_that_calls_super_stops_trials_as_ray(ray_cluster, storage) -> None:
    """The side-by-side run itself: the same trials end at the same iterations as under Ray Tune 2.60, with as
    many results and PAUSEs (whether the last trial to reach a rung is its loser, STOP, or a winner, CONTINUE,
    depends on the order the trials run in, as in Ray)."""
    mine = _HyperBandSaying(max_t=9)
    grid = Tuner(_crossing, param_space={"x": tune.grid_search(list(range(9)))},
                 tune_config=TuneConfig(metric="m", mode="max", scheduler=mine),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0
    assert {r.config["x"]: r.metrics["training_iteration"] for r in grid} == _RAY_HYPERBAND_ENDS
    assert len(mine.said) == sum(_RAY_HYPERBAND_SAID.values())
    assert mine.said.count("PAUSE") == _RAY_HYPERBAND_SAID["PAUSE"]
