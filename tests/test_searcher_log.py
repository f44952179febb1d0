"""The searcher log: a replayable searcher's state is saved now and then, and a resumed run replays the calls
logged since (fluidsalus/trialgroup/searcher_log.py). Pure: a real store, no Ray."""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import pytest

import fluidsalus.searchers as searchers_pkg
import fluidsalus.tune._custom_search as custom_search
import fluidsalus.tune._optuna_hyperband as optuna_hyperband
import fluidsalus.tune._streamed as streamed
from fluidsalus import space
from fluidsalus.errors import FluidsalusError, StoreError
from fluidsalus.searchers import (
    ASHA,
    BOHB,
    BaseSearcher,
    Decision,
    HyperBand,
    MedianStopping,
    RandomSearch,
    SyncBOHB,
)
from fluidsalus.searchers._base import is_replayable, replay_breaker
from fluidsalus.searchers._repeat import RepeatSearcher
from fluidsalus.store import ExperimentStore
from fluidsalus.testing import drive
from fluidsalus.testing.state import CheckedSearcher
from fluidsalus.trialgroup.searcher_log import ADD, COMPLETE, GROUPS, RESULT, SearcherLog, replay, restore
from fluidsalus.tune._streamed import StreamedASHA

SPACE = {"x": space.uniform(0.0, 1.0), "k": space.choice([1, 2, 3])}


def curve(config: Mapping[str, Any], iteration: int) -> float:
    return (config["x"] + 0.1 * config["k"]) * (1 - math.exp(-iteration / 4))


class Clock:
    """A clock the test moves: ``step`` seconds per reading (so each save takes ``step``)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _logged(live: BaseSearcher, store: ExperimentStore, make: Callable[[], BaseSearcher], clock: Clock,
            share: float) -> tuple[CheckedSearcher, SearcherLog]:
    """What the executor does with a searcher, one call per transaction: each call through the log, then a save;
    after each save, a searcher restored from the store (saved state, then the logged calls) must equal it."""
    log = SearcherLog(live, store, share=share, clock=clock)

    def commit() -> None:
        with store.transaction():
            log.save()
        restored = make()
        restore(restored, store)
        assert restored.state_dict() == live.state_dict()

    return CheckedSearcher(live, commit, calls=log), log


SEARCHERS: dict[str, Callable[[], BaseSearcher]] = {
    "asha": lambda: ASHA(SPACE, 20, "score", "max", max_t=9, grace_period=1, reduction_factor=3, brackets=2, seed=1,
                         max_concurrent=4),
    "asha_budgets": lambda: ASHA(SPACE, 20, "score", "max", max_t=9, grace_period=1, reduction_factor=3, seed=2,
                                 stop_last_trials=False),
    "hyperband": lambda: HyperBand(SPACE, 20, "score", "max", max_t=9, reduction_factor=3, seed=3),
    "bohb": lambda: BOHB(SPACE, 20, "score", "max", max_t=9, grace_period=1, reduction_factor=3, seed=4),
    "sync_bohb": lambda: SyncBOHB(SPACE, 20, "score", "max", max_t=9, reduction_factor=3, seed=7),
    "streamed_asha": lambda: StreamedASHA(SPACE, 20, "score", "max", max_t=9, grace_period=1, reduction_factor=3,
                                          seed=8, points_to_evaluate=[{"x": 0.5, "k": 2}]),
    "median": lambda: MedianStopping(RandomSearch(SPACE, 12, seed=5), "score", "max", time_attr="training_iteration",
                                     grace_period=2, min_samples_required=2),
    "repeat": lambda: RepeatSearcher(RandomSearch(SPACE, 6, seed=6), 2, "score"),
}


@pytest.mark.parametrize("share, step", [(1e-9, 1e-3), (0.05, 1e-3), (1.0, 1.0)],
                         ids=["saved_once", "saved_now_and_then", "saved_every_call"])
@pytest.mark.parametrize("name", sorted(SEARCHERS))
def test_a_restored_searcher_replays_to_the_state_it_had_at_every_commit(tmp_path, name, share, step):
    make = SEARCHERS[name]
    live = make()
    assert live.replayable
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    logged, log = _logged(live, store, make, Clock(step), share)
    drive(logged, curve, max_iterations=9, parallel=3, seed=0)
    assert logged.checks > 50
    if share == 1e-9:  # the next save is due in 11 days: only the first one is made, the rest is logged
        assert log.saves == 1 and len(store.searcher_calls()) > 50
        kinds = {kind for kind, _, _ in store.searcher_calls()}
        assert {RESULT, COMPLETE} <= kinds
        if name == "asha":  # new trials after the first save (a cap on live trials)
            assert {GROUPS, ADD} <= kinds
    elif share == 1.0:
        assert store.searcher_calls() == []
    else:
        assert 1 < log.saves < logged.checks
    with store.transaction():
        log.save(force=True)
    assert store.searcher_calls() == []


def test_a_searcher_that_is_not_replayable_is_saved_with_every_call(tmp_path):
    class Told(RandomSearch):
        replayable = False

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    log = SearcherLog(Told(SPACE, 3, seed=0), store, share=1e-9, clock=Clock(1e-3))
    for _ in range(3):
        log.on_result("t", {"score": 1.0})
        with store.transaction():
            log.save()
    assert log.saves == 3 and store.searcher_calls() == []


def test_a_replay_that_makes_other_groups_is_refused(tmp_path):
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    live = RandomSearch(SPACE, 2, seed=0)
    log = SearcherLog(live, store, share=1e-9, clock=Clock(1e-3))
    with store.transaction():
        log.save()  # the state before any group
    groups = log.next_groups()
    for i, config in enumerate(groups[0].configs):
        log.on_trial_add(f"t{i}", groups[0].group_id, config)
    with store.transaction():
        log.save()
    calls = store.searcher_calls()
    assert [kind for kind, _, _ in calls] == [GROUPS, ADD, ADD]
    exhausted = RandomSearch(SPACE, 2, seed=0)
    exhausted.next_groups()  # it already made its groups: the replayed call makes none
    with pytest.raises(StoreError, match="cannot replay RandomSearch's logged calls: trial t0 was added to group"):
        replay(exhausted, calls)
    with pytest.raises(StoreError, match="unknown searcher call 'sideways'"):
        replay(RandomSearch(SPACE, 2, seed=0), [("sideways", "t0", None)])
    with pytest.raises(ValueError, match=r"share must be in \(0, 1\]"):
        SearcherLog(live, store, share=0.0)


def _searcher_classes() -> list[type]:
    modules = [searchers_pkg, custom_search, optuna_hyperband, streamed]
    found: set[type] = set()
    for module in modules:
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseSearcher):
                found.add(value)
    todo = list(found)
    while todo:  # and every subclass defined anywhere in the package
        for sub in todo.pop().__subclasses__():
            if sub not in found and sub.__module__.startswith("fluidsalus."):
                found.add(sub)
                todo.append(sub)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


@pytest.mark.parametrize("cls", _searcher_classes(), ids=lambda c: c.__qualname__)
def test_a_searcher_that_changes_a_replayed_call_says_itself_whether_it_is_replayable(cls):
    """A class that inherits ``replayable = True`` must not override a call the log replays: the class that
    changes a call declares whether it is replayable (BOHB does, for its model's hooks)."""
    declared = inspect.getattr_static(cls, "replayable")
    if declared is not True:
        return  # not replayable, or a wrapper (a property: as replayable as what it wraps)
    breaker = replay_breaker(cls)
    assert breaker is None, f"{cls.__qualname__} inherits replayable=True, but {breaker}"


def test_which_searchers_are_replayable():
    assert ASHA.replayable and HyperBand.replayable and BOHB.replayable and RandomSearch.replayable
    assert streamed.StreamedASHA.replayable  # the Tune front end's ASHAScheduler
    assert not custom_search.CustomASHA.replayable  # a user's searcher is told of results
    assert not optuna_hyperband.OptunaHyperBand.replayable  # the Optuna study is told of results
    assert not searchers_pkg.PBT.replayable and not searchers_pkg.OptunaSearch.replayable
    assert MedianStopping(RandomSearch(SPACE, 1), "score", "max").replayable
    assert RepeatSearcher(RandomSearch(SPACE, 1), 2, "score").replayable


def test_a_subclass_of_your_own_that_changes_how_asha_answers_is_saved_with_every_batch(tmp_path):
    """``is_replayable`` applies the rule above at run time: a user's subclass that overrides a replayed call is not
    logged and replayed (its code may have effects a replay repeats) unless it declares ``replayable`` itself."""

    class Noisy(ASHA):
        def on_result(self, trial_id, result):
            print("result", trial_id)  # an effect a replay would repeat
            return super().on_result(trial_id, result)

    class Promised(Noisy):
        replayable = True

    def make(cls):
        return cls(SPACE, 4, "score", "max", max_t=9, grace_period=1, reduction_factor=3, seed=0)

    assert ASHA.replayable and Noisy.replayable  # the class attribute is inherited...
    assert is_replayable(make(ASHA)) and is_replayable(make(Promised))
    assert not is_replayable(make(Noisy))  # ...but not trusted past an override
    assert not is_replayable(MedianStopping(make(Noisy), "score", "max"))  # a wrapper asks what it wraps
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    log = SearcherLog(make(Noisy), store, share=1e-9, clock=Clock(1e-3))
    assert not log.replayable


@pytest.mark.parametrize("answer", [None, "pause", 3])
def test_an_answer_to_a_result_that_is_no_decision_names_the_searcher_and_the_decisions(tmp_path, answer):
    class Pauses(RandomSearch):
        def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Any:
            return answer

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    log = SearcherLog(Pauses(SPACE, 3, seed=0), store)
    with pytest.raises(FluidsalusError, match=rf"Pauses.on_result returned {answer!r} for trial t: expected "
                                              r"Decision.CONTINUE, Decision.STOP$"):
        log.on_result("t", {"score": 1.0})
    assert store.searcher_calls() == []  # nothing logged for a result the searcher did not answer


def test_a_decision_may_be_given_as_its_value(tmp_path):
    class Strings(RandomSearch):
        def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Any:
            return "stop" if result["score"] > 0.5 else "continue"

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    log = SearcherLog(Strings(SPACE, 3, seed=0), store)
    assert log.on_result("t", {"score": 1.0}) is Decision.STOP
    assert log.on_result("t", {"score": 0.0}) is Decision.CONTINUE


def _saved_once(live: BaseSearcher, tmp_path: Any, metric: str) -> tuple[ExperimentStore, SearcherLog]:
    """A new experiment's store and a log of ``live`` whose whole state is saved once: the calls after are logged."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, metric, "max")
    log = SearcherLog(live, store, share=1e-9, clock=Clock(1e-3))
    with store.transaction():
        log.save()
    return store, log


def test_a_searcher_is_given_nested_values_under_rays_flattened_keys_too_and_so_is_a_replay(tmp_path):
    """``metric="val/acc"`` names ``result["val"]["acc"]``: the searcher sees that key, live and replayed, while
    the log keeps the result as reported."""
    class Seen(RandomSearch):
        replayable = True  # what it records is no part of its state

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.seen: list[tuple[str, Any]] = []

        def on_result(self, trial_id, result):
            self.seen.append(("result", result.get("val/acc")))
            return super().on_result(trial_id, result)

        def on_trial_complete(self, trial_id, result=None, error=False):
            self.seen.append(("complete", result.get("val/acc")))
            super().on_trial_complete(trial_id, result, error=error)

    live = Seen(SPACE, 3, seed=0)
    store, log = _saved_once(live, tmp_path, "val/acc")
    log.on_result("t", {"val": {"acc": 0.5}})
    log.on_trial_complete("t", {"val": {"acc": 0.75}}, error=False)
    with store.transaction():
        log.save()
    assert live.seen == [("result", 0.5), ("complete", 0.75)]
    assert [data for kind, _, data in store.searcher_calls() if kind == RESULT] == [{"val": {"acc": 0.5}}]
    replayed = Seen(SPACE, 3, seed=0)
    replay(replayed, store.searcher_calls())
    assert replayed.seen == live.seen


def test_a_searcher_is_told_why_a_trial_errored_before_its_end_live_and_replayed(tmp_path):
    """``on_trial_error`` comes with the error the store keeps, just before ``on_trial_complete(error=True)``, and
    a replay makes it again; a trial that did not error gets none."""
    class Seen(RandomSearch):
        replayable = True  # what it records is no part of its state

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.seen: list[tuple[str, str, Any]] = []

        def on_trial_error(self, trial_id, error):
            self.seen.append(("error", trial_id, error))

        def on_trial_complete(self, trial_id, result=None, error=False):
            self.seen.append(("complete", trial_id, error))
            super().on_trial_complete(trial_id, result, error=error)

    live = Seen(SPACE, 3, seed=0)
    store, log = _saved_once(live, tmp_path, "score")
    log.on_trial_complete("a", {"score": 0.5}, error=True, error_text="ValueError: boom")
    log.on_trial_complete("b", {"score": 0.7}, error=False, error_text=None)
    with store.transaction():
        log.save()
    assert live.seen == [("error", "a", "ValueError: boom"), ("complete", "a", True), ("complete", "b", False)]
    replayed = Seen(SPACE, 3, seed=0)
    replay(replayed, store.searcher_calls())
    assert replayed.seen == live.seen


def test_a_result_is_logged_as_the_searcher_was_given_it(tmp_path):
    """The executor marks the result a stop is decided on done after the decision (as Ray does); the logged call
    shared the dict, so a resumed run replayed it with done=True where the live searcher had False (a review)."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    log = SearcherLog(RandomSearch(SPACE, 1, seed=0), store, share=1e-9, clock=Clock(1e-3))
    with store.transaction():
        log.save()
    groups = log.next_groups()
    log.on_trial_add("t0", groups[0].group_id, groups[0].configs[0])
    result = {"score": 1.0, "training_iteration": 1, "done": False}
    log.on_result("t0", result)
    result["done"] = True
    with store.transaction():
        log.save()
    assert [data for kind, _, data in store.searcher_calls() if kind == RESULT] == [
        {"score": 1.0, "training_iteration": 1, "done": False}]


def test_the_searcher_docs_name_every_question_asked_of_a_trials_end():
    """docs/searchers.md lists the questions the run asks a searcher of a trial's end (``retries``,
    ``stopped_by_search``), but not ``started_trial`` (h149's F4): each hook ``f(trial_id) -> bool`` is named there."""
    page = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "searchers.md")
    if not os.path.exists(page):
        pytest.skip("no docs/ beside the tests (an installed package)")
    with open(page) as f:
        text = f.read()
    questions = [name for name, hook in vars(BaseSearcher).items() if callable(hook) and not name.startswith("_")
                 and list(inspect.signature(hook).parameters) == ["self", "trial_id"]
                 and inspect.signature(hook).return_annotation in (bool, "bool")]
    assert {"retries", "stopped_by_search", "started_trial"} <= set(questions)
    assert [q for q in questions if f"`{q}(trial_id)`" not in text] == []
