"""RepeatSearcher (fluidsalus/searchers/_repeat.py) and Ray's ``Repeater`` in the tune front end."""

from __future__ import annotations

import json
import math
import statistics
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import OptunaSearch, RepeatSearcher
from fluidsalus.searchers._repeat import TRIAL_INDEX, mean_score
from fluidsalus.testing import drive

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {"x": sp.uniform(0, 1)}
#: The noise each repeat adds to the score: repeat i adds NOISE[i].
NOISE = (0.3, -0.1, 0.4)


def _noisy(config: Mapping[str, Any], iteration: int) -> float:
    return config["x"] + NOISE[config[TRIAL_INDEX]]


def _repeat(samples: int = 4, repeat: int = 3, **kwargs: Any) -> RepeatSearcher:
    inner = OptunaSearch(SPACE, num_samples=samples, metric="score", mode="max", seed=0, **kwargs)
    return RepeatSearcher(inner, repeat, "score")


def test_each_configuration_runs_repeat_times_and_the_study_gets_the_mean() -> None:
    searcher = _repeat()
    result = drive(searcher, _noisy, metric="score", max_iterations=2, parallel=5)
    by_config: dict[float, list[int]] = {}
    for trial in result.trials.values():
        by_config.setdefault(trial.config["x"], []).append(trial.config[TRIAL_INDEX])
        assert len(trial.history) == 2  # never stopped early: the inner searcher sees no intermediate result
    assert len(by_config) == 4 and all(sorted(indices) == [0, 1, 2] for indices in by_config.values())
    study = searcher.inner.study
    assert len(study.trials) == 4  # one Optuna trial per configuration, not per repeat
    for frozen in study.trials:
        assert frozen.state == TrialState.COMPLETE
        assert "__trial_index__" not in frozen.params
        assert frozen.value == pytest.approx(frozen.params["x"] + statistics.mean(NOISE))
    assert searcher.is_finished()


def test_a_failed_or_silent_repeat_is_left_out_of_the_mean_and_all_of_them_fail_the_trial() -> None:
    searcher = _repeat(samples=2, repeat=2)
    (group,) = searcher.next_groups()
    ids = [f"t{i}" for i in range(len(group.configs))]
    for trial_id, config in zip(ids, group.configs, strict=True):
        searcher.on_trial_add(trial_id, group.group_id, config)
    assert [c[TRIAL_INDEX] for c in group.configs] == [0, 1, 0, 1]
    searcher.on_trial_complete("t0", {"score": 0.5})
    searcher.on_trial_complete("t1", {"score": 9.0}, error=True)  # errored: NaN, as in Ray
    searcher.on_trial_complete("t2", {"other": 1.0})  # no metric: NaN
    searcher.on_trial_complete("t3", None, error=True)
    first, second = searcher.inner.study.trials
    assert first.state == TrialState.COMPLETE and first.value == 0.5
    assert second.state == TrialState.FAIL  # every repeat NaN


def test_the_state_survives_json_and_a_resumed_searcher_tells_the_mean_of_old_and_new_repeats() -> None:
    searcher = _repeat(samples=1, repeat=3)
    (group,) = searcher.next_groups()
    for i, config in enumerate(group.configs):
        searcher.on_trial_add(f"t{i}", group.group_id, config)
    searcher.on_trial_complete("t0", {"score": 1.0})
    searcher.on_trial_complete("t1", {"score": float("nan")})
    state = json.loads(json.dumps(searcher.state_dict()))
    resumed = _repeat(samples=1, repeat=3)
    resumed.load_state_dict(state)
    assert resumed.next_groups() == []  # its one configuration was proposed before
    resumed.on_trial_complete("t2", {"score": 2.0})
    (frozen,) = [t for t in resumed.inner.study.trials if t.state == TrialState.COMPLETE]
    assert frozen.value == 1.5


def test_a_num_samples_that_is_not_a_multiple_of_repeat_runs_the_last_configuration_fewer_times() -> None:
    """Ray 2.60's ``Repeater(OptunaSearch(...), repeat=2)`` with ``num_samples=5`` runs 5 trials: two whole
    configurations and a third run once (``__trial_index__=0``), whose Optuna trial is never told (it stays
    RUNNING); with ``num_samples=1, repeat=3``, one trial. fluidsalus ran ``num_samples // repeat``
    configurations: 4 trials, and refused ``num_samples < repeat``."""
    inner = OptunaSearch(SPACE, num_samples=3, metric="score", mode="max", seed=0)
    searcher = RepeatSearcher(inner, 2, "score", num_samples=5)
    result = drive(searcher, _noisy, metric="score", max_iterations=1, parallel=2)
    indices = [trial.config[TRIAL_INDEX] for trial in result.trials.values()]
    assert sorted(indices) == [0, 0, 0, 1, 1] and searcher.is_finished()
    states = sorted(t.state.name for t in inner.study.trials)
    assert states == ["COMPLETE", "COMPLETE", "RUNNING"]  # the partial configuration is never told, as in Ray
    state = json.loads(json.dumps(searcher.state_dict()))
    resumed = RepeatSearcher(OptunaSearch(SPACE, num_samples=3, metric="score", mode="max", seed=0), 2, "score",
                             num_samples=5)
    resumed.load_state_dict(state)
    assert resumed.next_groups() == []  # all 5 were proposed
    alone = RepeatSearcher(OptunaSearch(SPACE, num_samples=1, metric="score", mode="max", seed=0), 3, "score",
                           num_samples=1)
    (group,) = alone.next_groups()
    assert [c[TRIAL_INDEX] for c in group.configs] == [0] and alone.next_groups() == []
    with pytest.raises(ConfigError, match="^RepeatSearcher: num_samples must be None or an int >= 1"):
        RepeatSearcher(OptunaSearch(SPACE, num_samples=1, metric="score", mode="max"), 2, "score", num_samples=0)


def test_mean_score_and_bad_arguments() -> None:
    assert mean_score([1.0, math.nan, 3.0]) == 2.0 and mean_score([math.nan]) is None
    inner = OptunaSearch(SPACE, num_samples=1, metric="score", mode="max")
    # (named as the user called it, not "Repeater", the Tune front end's name, nor a "GridSearch" there is not: h83)
    with pytest.raises(ConfigError, match="^RepeatSearcher: repeat must be an int >= 1"):
        RepeatSearcher(inner, 0, "score")
    with pytest.raises(ConfigError, match="^RepeatSearcher: metric must be one result key"):
        RepeatSearcher(inner, 2, ["a", "b"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^RepeatSearcher: inner must be a fluidsalus searcher \(a BaseSearcher: "
                                          r"RandomSearch, which grid-searches grid_search\(...\) values too, "
                                          r"OptunaSearch, ASHA, ...\); got int$"):
        RepeatSearcher(5, 2, "score")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- the tune front end


def _plan(search_alg: Any, num_samples: int = 6, **tune_kwargs: Any) -> Any:
    from fluidsalus import tune
    from fluidsalus.tune._translate import plan

    return plan(tune.TuneConfig(search_alg=search_alg, num_samples=num_samples, **tune_kwargs),
                {"x": tune.uniform(0, 1)})


def test_repeater_maps_onto_a_repeat_searcher_with_rays_counting_and_limits() -> None:
    from fluidsalus.tune.search import ConcurrencyLimiter, Repeater
    from fluidsalus.tune.search.optuna import OptunaSearch as Holder

    with pytest.warns(UserWarning, match=r"num_samples=7 is not a multiple of Repeater\(repeat=3\): the last "
                                         r"configuration runs 1 of its 3 repeats and OptunaSearch is never told"):
        planned = _plan(Repeater(Holder(metric="score", mode="max"), repeat=3), num_samples=7)
    assert isinstance(planned.searcher, RepeatSearcher) and planned.searcher.repeat == 3
    assert planned.searcher.inner.num_samples == 3  # ceil(7 / 3), for 7 trials (see the test below)
    assert planned.searcher.num_samples == 7
    assert planned.metric == "score" and "Repeater(repeat=3" in planned.summary
    # A limiter inside caps configurations in flight; max_concurrent_trials caps trials.
    planned = _plan(Repeater(ConcurrencyLimiter(Holder(metric="score", mode="max"), 2), repeat=3),
                    max_concurrent_trials=6)
    assert planned.searcher.inner.batch_size == 2 and planned.max_concurrent_trials == 6
    planned = _plan(Repeater(Holder(metric="score", mode="max"), repeat=2, set_index=False),
                    max_concurrent_trials=5)
    assert planned.searcher.inner.batch_size == 3 and not planned.searcher.set_index  # ceil(5 / 2)


def test_repeater_with_fewer_samples_than_repeats_runs_them_as_ray() -> None:
    """Ray runs ``num_samples=2`` trials of ``Repeater(repeat=3)``: one configuration, twice; fluidsalus refused it
    ("no configuration would run")."""
    from fluidsalus.tune.search import Repeater
    from fluidsalus.tune.search.optuna import OptunaSearch as Holder

    with pytest.warns(UserWarning, match="num_samples=2 is not a multiple"):
        planned = _plan(Repeater(Holder(metric="score", mode="max"), repeat=3), num_samples=2)
    (group,) = planned.searcher.next_groups()
    assert [c[TRIAL_INDEX] for c in group.configs] == [0, 1] and planned.searcher.inner.num_samples == 1


def test_repeater_refuses_what_it_cannot_repeat() -> None:
    from fluidsalus.tune.schedulers import ASHAScheduler
    from fluidsalus.tune.search import BasicVariantGenerator, Repeater
    from fluidsalus.tune.search.optuna import OptunaSearch as Holder

    with pytest.raises(ConfigError, match="fluidsalus repeats an OptunaSearch .* with no scheduler"):
        _plan(Repeater(Holder(metric="score", mode="max"), repeat=2), scheduler=ASHAScheduler())
    with pytest.raises(ConfigError, match="Repeater: searcher must be a Searcher"):  # (Ray: not a Searcher either)
        Repeater(BasicVariantGenerator(), repeat=2)
    with pytest.raises(ConfigError, match="Repeater averages one metric"):
        _plan(Repeater(Holder(metric=["a", "b"], mode=["max", "min"]), repeat=2))
    with pytest.raises(ConfigError, match="Repeater: repeat must be an int >= 1"):
        Repeater(Holder(), repeat=0)


def test_rays_own_repeater_is_translated() -> None:
    ray_search = pytest.importorskip("ray.tune.search")
    ray_optuna = pytest.importorskip("ray.tune.search.optuna")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        planned = _plan(ray_search.Repeater(ray_optuna.OptunaSearch(metric="score", mode="max"), repeat=2,
                                            set_index=False))
    assert isinstance(planned.searcher, RepeatSearcher) and planned.searcher.repeat == 2
    assert not planned.searcher.set_index and planned.searcher.inner.num_samples == 3
    assert any("Ray Tune's Repeater" in str(w.message) for w in caught)


def _seeded(config: dict[str, Any]) -> None:
    from fluidsalus import tune

    tune.report({"score": config["x"] + NOISE[config["__trial_index__"]]})


def test_a_tuner_with_a_repeater_tells_the_study_the_mean_of_each_configuration(ray_cluster, storage) -> None:
    from fluidsalus import tune
    from fluidsalus.tune.search import Repeater
    from fluidsalus.tune.search.optuna import OptunaSearch as Holder

    tuner = tune.Tuner(_seeded, param_space={"x": tune.uniform(0, 1)},
                       tune_config=tune.TuneConfig(search_alg=Repeater(Holder(metric="score", mode="max", seed=3),
                                                                       repeat=3),
                                                   num_samples=6),
                       run_config=tune.RunConfig(storage_path=storage, verbose=0))
    grid = tuner.fit()
    assert len(grid) == 6 and not grid.errors
    assert sorted(r.config["__trial_index__"] for r in grid) == [0, 0, 1, 1, 2, 2]
    study = tuner.plan.searcher.inner.study
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    for frozen in study.trials:
        assert frozen.value == pytest.approx(frozen.params["x"] + statistics.mean(NOISE))
