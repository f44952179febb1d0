"""The queue of trials waiting for the planner (fluidsalus/trialgroup/queue.py). Pure: no Ray."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fluidsalus.trialgroup.planner import Planner, ProfileBook
from fluidsalus.trialgroup.queue import PendingQueue, queue_window
from fluidsalus.trialgroup.trial import Trial

ATTR = "training_iteration"


def _trial(tid: str, seq: int, budget: float | None, last_iteration: int = 0) -> Trial:
    return Trial(trial_id=tid, seq=seq, config={}, trial_dir=f"/tmp/{tid}", budget=budget,
                 last_iteration=last_iteration)


# One operation: ("add", budget index, last iteration, measured seconds or 0), ("discard", which),
# ("measure", which, seconds): a queued trial measured (a late result), ("promote", which, budget index).
_BUDGETS = [None, 1, 3, 9, 27]
_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, len(_BUDGETS) - 1), st.integers(0, 4), st.sampled_from([0.0, 0.5, 2.0])),
    st.tuples(st.just("discard"), st.integers(0, 10_000)),
    st.tuples(st.just("measure"), st.integers(0, 10_000), st.sampled_from([0.1, 1.0, 30.0])),
    st.tuples(st.just("promote"), st.integers(0, 10_000), st.integers(0, len(_BUDGETS) - 1)),
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=_ops, size=st.integers(1, 12))
def test_the_head_of_the_queue_is_that_of_every_trials_key(ops, size):
    """Whatever is added, taken off, measured or given a new budget while it waits, :meth:`PendingQueue.window`
    names the trials that computing every queued trial's key names, in the same order."""
    book = Planner().book
    queue = PendingQueue(book, ATTR)
    trials: dict[str, Trial] = {}
    order: list[str] = []  # the queue's ids in insertion order
    for op in ops:
        if op[0] == "add":
            tid = f"t{len(trials)}"
            trial = trials[tid] = _trial(tid, len(trials), _BUDGETS[op[1]], op[2])
            trial.devices = (0,) if op[2] % 2 else ()  # some restart on devices the planner gave them
            if op[3]:
                book.record(tid, op[3])
            queue.add(trial)
            order.append(tid)
        elif order:
            tid = order[op[1] % len(order)]
            if op[0] == "discard":
                queue.discard(tid)
                order.remove(tid)
            elif op[0] == "measure":
                book.record(tid, op[2])
                trials[tid].devices = ()  # and the planner took its devices back (a device that is gone)
                queue.refresh(trials[tid])
            else:
                trials[tid].budget = _BUDGETS[op[2]]
                queue.refresh(trials[tid])  # it keeps its place in the insertion order
        assert list(queue) == order and len(queue) == len(order) and bool(queue) == bool(order)
        assert queue.holding() == [t for t in order if trials[t].devices]
        expected = queue_window([trials[t] for t in order], book, ATTR, size)
        assert queue.window(size) == expected


class _CountingBook(ProfileBook):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def alone(self, trial_id: str) -> float:
        self.asked += 1
        return super().alone(trial_id)


def test_a_long_queue_of_unmeasured_trials_is_cut_without_a_key_for_each():
    """1,000 trials never measured, with three remaining budgets, and two measured ones: the window of 10 asks
    the profiles for at most 10 trials per budget, and the measured ones. (The typical time is their mean.)"""
    book = _CountingBook()
    queue = PendingQueue(book, ATTR)
    trials = [_trial(f"t{i}", i, [1, 3, 9][i % 3]) for i in range(1000)]
    for trial in trials:
        queue.add(trial)
    for trial, seconds in ((trials[500], 1000.0), (trials[501], 1.0)):  # budgets 9 and 1
        book.record(trial.trial_id, seconds)
        queue.refresh(trial)
    book.asked = 0
    window = queue.window(10)
    assert book.asked <= 3 * 10 + 2  # the candidates' keys, and no other
    assert window == queue_window(trials, book, ATTR, 10)
    assert window == ["t500", "t2", "t5", "t8", "t11", "t14", "t17", "t20", "t23", "t26"]  # 9000 s, then 4504.5 s
    queue.discard("t2")
    assert "t2" not in queue and "t2" not in queue.window(10)
    queue.discard("t2")  # taking off a trial that is not queued does nothing
    assert len(queue) == 999


def test_when_trials_take_turns_the_least_advanced_starts_first():
    """A searcher whose trials take turns (PBT) orders the queue by its turn key first: the trial with the smallest
    key heads it, whatever its predicted time; equal keys keep the predicted order (longest first, then arrival)."""
    book = Planner().book
    turns = {"a": 4.0, "b": 0.0, "c": 2.0, "d": 0.0}
    queue = PendingQueue(book, ATTR, turn=turns.__getitem__)
    for seq, (tid, budget) in enumerate((("a", 27), ("b", 1), ("c", 9), ("d", 3))):
        queue.add(_trial(tid, seq, budget))
    assert queue.window(4) == ["d", "b", "c", "a"]  # d and b share turn 0: d has more left
    assert queue.window(2) == ["d", "b"]
    turns["a"] = -1.0  # keys are read at each window
    assert queue.window(1) == ["a"]
    plain = PendingQueue(book, ATTR)  # no turns: longest predicted work first
    for seq, (tid, budget) in enumerate((("a", 27), ("b", 1), ("c", 9), ("d", 3))):
        plain.add(_trial(tid, seq, budget))
    assert plain.window(4) == ["a", "c", "d", "b"]
