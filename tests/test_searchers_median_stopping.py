"""The median stopping rule (searchers/_median_stopping.py): hand-computed cases and Ray's own decisions."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

import fluidsalus
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import BaseSearcher, Decision, MedianStopping, RandomSearch
from fluidsalus.searchers._median_stopping import median_says_stop


class _Inner(BaseSearcher):
    """Makes no trials and never stops one: the rule alone decides."""

    def __init__(self) -> None:
        self.completed: list[str] = []

    def next_groups(self) -> list:
        return []

    def on_trial_complete(self, trial_id: str, result: Any, error: bool = False) -> None:
        self.completed.append(trial_id)

    def state_dict(self) -> dict[str, Any]:
        return {"completed": list(self.completed)}

    def load_state_dict(self, state: Any) -> None:
        self.completed = list(state["completed"])


def test_the_rule_stops_only_when_the_median_is_strictly_better() -> None:
    assert median_says_stop(0.5, [0.6, 0.7, 0.9], "max", 3)  # median 0.7 > best 0.5
    assert not median_says_stop(0.7, [0.6, 0.7, 0.9], "max", 3)  # a tie goes on
    assert not median_says_stop(0.5, [0.6, 0.7], "max", 3)  # too few samples
    assert not median_says_stop(0.5, [0.6, 0.7, math.nan, math.inf], "max", 3)  # NaN and inf left out
    assert median_says_stop(0.8, [0.6, 0.7, 0.9], "min", 3) and not median_says_stop(0.6, [0.6, 0.7, 0.9], "min", 3)


def test_a_trial_worse_than_the_median_of_running_means_is_stopped_after_the_grace_period() -> None:
    inner = _Inner()
    rule = MedianStopping(inner, "acc", "max", time_attr="t", grace_period=2, min_samples_required=2)
    for trial, values in {"a": [0.1, 0.6, 0.8], "b": [0.2, 0.5, 0.7]}.items():
        for t, value in enumerate(values, start=1):
            assert rule.on_result(trial, {"t": t, "acc": value}) == Decision.CONTINUE
        rule.on_trial_complete(trial, {"t": 3, "acc": values[-1]})
    # at t=1 (grace) nothing is judged; at t=2 the running means over [2, 2] are a: 0.6, b: 0.5 (median 0.55)
    assert rule.on_result("c", {"t": 1, "acc": 0.0}) == Decision.CONTINUE
    assert rule.on_result("c", {"t": 2, "acc": 0.56}) == Decision.CONTINUE  # best 0.56 >= 0.55
    # at t=3: a's mean over [2, 3] is (0.6 + 0.8 + 0.8) / 3 (its last result counts twice, as in Ray), b's
    # (0.5 + 0.7 + 0.7) / 3: median about 0.683 > c's best 0.6
    assert rule.on_result("c", {"t": 3, "acc": 0.6}) == Decision.STOP
    assert rule.on_result("d", {"t": 3}) == Decision.CONTINUE  # no metric: not judged, not recorded
    assert "d" not in rule._history
    rule.on_trial_complete("c", {"t": 3, "acc": 0.6}, error=True)  # an error records nothing more (Ray's too)
    assert rule._history["c"].values == [0.0, 0.56, 0.6]


def test_without_hard_stop_the_trial_goes_on_and_is_not_judged_again() -> None:
    rule = MedianStopping(_Inner(), "loss", "min", time_attr="t", grace_period=0, min_samples_required=1,
                          hard_stop=False)
    rule.on_result("a", {"t": 1, "loss": 1.0})
    assert rule.on_result("b", {"t": 1, "loss": 2.0}) == Decision.CONTINUE and rule._judged == {"b"}
    assert rule.on_result("b", {"t": 2, "loss": 9.0}) == Decision.CONTINUE
    assert rule._history["b"].values == [2.0]  # Ray records nothing more for a trial it paused


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "up"}, "mode must be"),
    ({"grace_period": -1}, "grace_period must be a number >= 0"),
    ({"min_samples_required": 0}, "min_samples_required must be an int >= 1"),
    ({"hard_stop": "yes"}, "hard_stop must be True or False"),
])
def test_bad_arguments_are_refused_by_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MedianStopping(_Inner(), **{"metric": "m", "mode": "max", **kwargs})


def _stream(seed: int, trials: int = 8, steps: int = 12) -> list[tuple[str, dict[str, float], bool]]:
    """Interleaved results of ``trials`` trials: (trial, result, whether the trial then ends by itself)."""
    rng = random.Random(seed)
    quality = {f"t{i}": rng.uniform(0, 1) for i in range(trials)}
    clock = dict.fromkeys(quality, 0.0)
    step = dict.fromkeys(quality, 0)
    length = {t: rng.randint(steps // 2, steps) for t in quality}
    events = []
    live = list(quality)
    while live:
        trial = rng.choice(live)
        step[trial] += 1
        clock[trial] += rng.uniform(0.5, 1.5)
        result = {"time_total_s": clock[trial], "training_iteration": step[trial],
                  "score": quality[trial] + rng.gauss(0, 0.2) + 0.02 * step[trial]}
        ends = step[trial] >= length[trial]
        events.append((trial, result, ends))
        if ends:
            live.remove(trial)
    return events


class _Trial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


class _Controller:
    def get_live_trials(self) -> list:
        return []  # no trial waits, so Ray's rule never yields for lack of samples


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode, time_attr, grace, samples, hard", [
    ("max", "time_total_s", 3.0, 3, True),
    ("min", "training_iteration", 2, 2, True),
    ("max", "training_iteration", 0, 1, False),
])
def test_the_same_decisions_as_rays_median_stopping_rule(seed: int, mode: str, time_attr: str, grace: float,
                                                         samples: int, hard: bool) -> None:
    from ray.tune.schedulers import MedianStoppingRule, TrialScheduler

    theirs = MedianStoppingRule(time_attr=time_attr, metric="score", mode=mode, grace_period=grace,
                                min_samples_required=samples, hard_stop=hard)
    ours = MedianStopping(_Inner(), "score", mode, time_attr=time_attr, grace_period=grace,
                          min_samples_required=samples, hard_stop=hard)
    controller, trials, ended = _Controller(), {}, set()
    decisions = 0
    for trial_id, result, ends in _stream(seed):
        if trial_id in ended:
            continue
        trial = trials.setdefault(trial_id, _Trial(trial_id))
        said = theirs.on_trial_result(controller, trial, dict(result))
        judged_before = trial_id in ours._judged
        decision = ours.on_result(trial_id, dict(result))
        if hard:
            assert (said == TrialScheduler.STOP) == (decision == Decision.STOP), (trial_id, result)
        else:
            assert decision == Decision.CONTINUE
            assert (said == TrialScheduler.PAUSE) == (trial_id in ours._judged and not judged_before)
        decisions += said != TrialScheduler.CONTINUE
        if said == TrialScheduler.STOP or ends:
            theirs.on_trial_complete(controller, trial, dict(result))
            ours.on_trial_complete(trial_id, dict(result))
            ended.add(trial_id)
    if seed == 0:
        assert decisions > 0  # the streams do make the rule act
    # (the status report's scheduler line, Ray's debug_string: the trials it stopped, or paused without hard_stop)
    assert ours.debug_string() == theirs.debug_string()


def test_a_resumed_rule_decides_as_the_uninterrupted_one() -> None:
    events = _stream(3)
    whole = MedianStopping(_Inner(), "score", "max", time_attr="time_total_s", grace_period=2)
    first = MedianStopping(_Inner(), "score", "max", time_attr="time_total_s", grace_period=2)
    half = len(events) // 2
    stopped: set[str] = set()
    for index, (trial_id, result, ends) in enumerate(events):
        if trial_id in stopped:
            continue
        if index == half:  # the state survives JSON, as the store keeps it
            resumed = MedianStopping(_Inner(), "score", "max", time_attr="time_total_s", grace_period=2)
            resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
            first = resumed
        expected = whole.on_result(trial_id, result)
        assert first.on_result(trial_id, result) == expected
        if expected == Decision.STOP or ends:
            whole.on_trial_complete(trial_id, result)
            first.on_trial_complete(trial_id, result)
            stopped.add(trial_id)
    assert first.inner.completed == whole.inner.completed and first._judged == whole._judged


def _climb(config: dict[str, Any]) -> None:
    for i in range(1, 13):  # no sleep: a trial that did not wait for the rule would be far past the result
        fluidsalus.report({"score": config["a"] * i})


def test_a_trial_the_rule_stops_ends_at_that_result_as_under_ray(ray_cluster, storage) -> None:
    """From the grace period on, each result waits for the rule (verdict_from), as a Ray Tune trial waits for its
    scheduler: the stopped trials end at iteration 3, as under Ray's MedianStoppingRule on the same grid, one trial
    at a time (checked side by side with Ray 2.60); they ended at 4 to 8, the stop landing reports later."""
    rule = MedianStopping(RandomSearch({"a": fluidsalus.grid_search([0.1, 0.5, 0.3, 0.9, 0.2, 0.7])}), "score", "max",
                          time_attr="training_iteration", grace_period=3, min_samples_required=2)
    assert rule.verdict_from == 3
    grid = fluidsalus.run(_climb, searcher=rule, max_concurrent_trials=1, storage_path=storage, name="median",
                          verbose=0)
    last = {r.config["a"]: r.metrics["training_iteration"] for r in grid}
    assert last == {0.1: 12, 0.5: 12, 0.3: 3, 0.9: 12, 0.2: 3, 0.7: 12}
    assert MedianStopping(RandomSearch({"a": 1}), "score", "max", hard_stop=False).verdict_from is None
