"""Recorded traces (fluidsalus/sim/trace.py): reading a store, calibration, replay, and the sim-vs-real machinery."""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time

import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.lanes import LaneManager
from fluidsalus.sim import Hardware, Simulation, TrialRecord, Workload, load_trace
from fluidsalus.sim.trace import (
    LeastLoadedStrategy,
    PinnedLanes,
    ReplaySearcher,
    TrialPlan,
    alone_times,
    calibrate,
    compare_with_store,
    fit_interference,
    hardware_for,
    load_store_trace,
    main,
    make_replay_strategy,
    recorded_workload,
    replay,
    runtime_simulation,
    save_store_trace,
    share_order,
    trial_plans,
)
from fluidsalus.store import ExperimentStore
from fluidsalus.trialgroup.planner import DEFAULT_MOVE_COST_S

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 2**20
DEFAULT_P = DEFAULT_T = 256 * MIB
#: Tolerance of times read back from a store (epoch timestamps carry about 0.2 µs of float resolution).
TIME_TOL = 1e-5
#: A device with no costs at all: every makespan below is hand-computed.
FREE = dict(gpus_per_node=1, gpu_memory=16 * 2**30, context_bytes=0, interference=0.0, startup_s=0.0, move_s=0.0,
            comm_fraction=0.0, driver_latency_s=0.0)


def close(expected, **tolerance):
    """``pytest.approx`` with the store's time tolerance (unless given)."""
    return pytest.approx(expected, **(tolerance or {"abs": TIME_TOL}))


class StoreWriter:
    """Writes a store as the executor would, with timestamps relative to ``base`` (in the future, so that the
    trials' ``created_at``, which the store stamps itself, comes first)."""

    def __init__(self, path: str, slots: int = 2, devices: int = 1, spec: dict | None = None) -> None:
        self.base = time.time() + 1.0
        self.store = ExperimentStore.create(path, "synthetic", spec or {}, "score", "max")
        self.store.add_events([(self.base, "device_start", None, f"cpu:{d}", {"slots": slots, "kind": "cpu"})
                               for d in range(devices)])

    def trial(self, tid: str, seq: int, budget: float | None) -> None:
        self.store.add_trials([(tid, seq, {"seq": seq})], group_id=f"g{budget}", budget=budget)

    def event(self, at: float, kind: str, tid: str | None = None, device: str = "cpu:0", **data) -> None:
        self.store.add_events([(self.base + at, kind, tid, device, data or None)])

    def start(self, at: float, tid: str, lane: int, new_lane: bool, device: str = "cpu:0") -> None:
        self.event(at, "place", tid, device, attempt=0)
        self.event(at, "trial_start", tid, device, attempt=0)
        if new_lane:
            self.event(at, "lane_open", None, device, lane=lane, capacity=DEFAULT_P + DEFAULT_T)
        self.event(at, "lane_admit", tid, device, detail=[lane, DEFAULT_P, DEFAULT_T], attempt=0)
        self.store.update_trial(tid, status="RUNNING", started_at=self.base + at)

    def iteration(self, tid: str, iteration: int, start: float, end: float, score: float) -> None:
        self.store.add_results([(tid, 0, iteration, self.base + end,
                                 {"score": score, "training_iteration": iteration, "time_this_iter_s": end - start})])

    def end(self, at: float, tid: str, lane: int, iterations: int, close: bool, device: str = "cpu:0") -> None:
        self.event(at, "trial_end", tid, device, attempt=0, outcome="stopped")
        self.event(at, "lane_leave", tid, device, detail=[lane], attempt=0)
        if close:
            self.event(at, "lane_close", None, device, lane=lane)
        self.store.update_trial(tid, status="TERMINATED", finished_at=self.base + at, stop_reason="stopped",
                                last_iteration=iterations)

    def close(self, at: float) -> None:
        self.store.set_experiment(status="FINISHED", finished_at=self.base + at)
        self.store.close()


def write_race_store(path: str) -> None:
    """Three trials on one 2-slot device. t0 opens lane 0 and runs 3 iterations of 1 s (pausing at budget 1);
    t1 opens lane 1, runs one 1.5 s iteration and is stopped there; t2, placed when t1 reported, is admitted
    to lane 0 before t1 leaves (the race) and runs one 1 s iteration, time-slicing lane 0 with t0 (a device
    that does not spread its lanes: arena mode, or before ``DeviceHost._spread_locked``; the calibration tests
    read its turns)."""
    w = StoreWriter(path)
    w.trial("t0", 0, 3.0)
    w.trial("t1", 1, 1.0)
    w.trial("t2", 2, 1.0)
    w.start(0.0, "t0", lane=0, new_lane=True)
    w.start(0.0, "t1", lane=1, new_lane=True)
    w.iteration("t0", 1, 0.0, 1.0, 0.1)
    w.iteration("t1", 1, 0.0, 1.5, 0.05)
    w.start(1.503, "t2", lane=0, new_lane=False)
    w.end(1.505, "t1", lane=1, iterations=1, close=True)
    w.iteration("t0", 2, 1.0, 2.0, 0.2)
    w.event(2.0, "lane_estimate", "t0", detail=["t0", 4096, 8192], attempt=0)
    w.iteration("t2", 1, 2.0, 3.0, 0.15)
    w.end(3.001, "t2", lane=0, iterations=1, close=False)
    w.iteration("t0", 3, 3.001, 4.001, 0.3)
    w.end(4.002, "t0", lane=0, iterations=3, close=True)
    w.close(4.01)


def write_spread_store(path: str, spec: dict | None = None) -> None:
    """A lane that dissolves as today's device records it (the pattern of a real 1 x 2-slot ASHA run's
    events). t0 (lane 0) runs 3 iterations of 1 s, pausing at budget 1; t1 (lane 1) runs one of 1.5 s and is
    stopped; t2, prefetched at the start into t0's lane (the device was full), begins when t0 pauses and is
    stopped after one iteration, so t0, promoted, waits in the shared lane for its turn. When t1's lane
    closes the device spreads (``DeviceHost._spread_locked``): t0 takes a lane of its own and goes on at
    once. Makespan: 3.503 s (t0 waiting for t2's turn instead: 4 s)."""
    w = StoreWriter(path, spec=spec)
    w.trial("t0", 0, 3.0)
    w.trial("t1", 1, 1.0)
    w.trial("t2", 2, 1.0)
    w.start(0.0, "t0", lane=0, new_lane=True)
    w.start(0.0, "t1", lane=1, new_lane=True)
    w.event(0.0, "place", "t2", attempt=0, action="prefetch")
    w.event(0.0, "lane_admit", "t2", detail=[0, DEFAULT_P, DEFAULT_T], attempt=0)
    w.iteration("t0", 1, 0.0, 1.0, 0.1)
    w.event(1.0, "trial_start", "t2", attempt=0)  # (a prefetched trial starts at its first turn)
    w.store.update_trial("t2", status="RUNNING", started_at=w.base + 1.0)
    w.iteration("t1", 1, 0.0, 1.5, 0.05)
    w.end(1.503, "t1", lane=1, iterations=1, close=True)
    w.event(1.503, "lane_leave", "t0", detail=[0], attempt=0)  # the spread: t0 leaves the shared lane ...
    w.event(1.503, "lane_open", None, lane=2, capacity=DEFAULT_P + DEFAULT_T)
    w.event(1.503, "lane_admit", "t0", detail=[2, DEFAULT_P, DEFAULT_T], attempt=0)  # ... for a lane of its own
    w.iteration("t2", 1, 1.0, 2.0, 0.15)
    w.end(2.003, "t2", lane=0, iterations=1, close=True)
    w.iteration("t0", 2, 1.503, 2.503, 0.2)
    w.iteration("t0", 3, 2.503, 3.503, 0.3)
    w.end(3.503, "t0", lane=2, iterations=3, close=True)
    w.close(3.51)


def test_a_store_reads_as_a_trace(tmp_path):
    path = str(tmp_path / "race")
    write_race_store(path)
    trace = load_store_trace(path)
    t0, t1, t2 = trace.trials
    assert trace.metric == "score" and trace.mode == "max"
    assert trace.devices == {"cpu:0": 2}
    assert trace.makespan_s == close(4.002)
    assert trace.iterations == 5 and trace.budgets == (1.0, 3.0)
    assert [it.iteration for it in t0.iterations] == [1, 2, 3]
    assert [it.duration for it in t0.iterations] == close([1.0, 1.0, 1.0])
    assert t0.iterations[2].start == close(3.001) and t0.iterations[2].value == close(0.3)
    assert (t0.length, t1.length, t2.length) == (3, 1, 1)
    assert t0.started == close(0.0) and t2.started == close(1.503)
    assert t1.end_reason == "stopped" and t1.finished == close(1.505)
    # Lanes: t0 and t1 opened theirs; t2 joined t0's. t1 left after t2 was admitted.
    assert (t0.lane_mates, t1.lane_mates, t2.lane_mates) == ((), (), (0,))
    assert trace.fresh_lane == {"t0", "t1"}
    assert t1.left_after_admit is True and t0.left_after_admit is None
    assert trace.admit_first_share == 1.0
    assert t0.estimates == ((4096, 8192),)
    # Pause points: the run's budgets below each trial's length, then its own budget.
    assert [p.budgets for p in trial_plans(trace)] == [(1.0, 3.0), (1.0,), (1.0,)]
    assert [p.length for p in trial_plans(trace)] == [3, 1, 1]


def test_calibration_measures_latency_start_and_boundary(tmp_path):
    path = str(tmp_path / "race")
    write_race_store(path)
    cal = calibrate(load_store_trace(path))
    assert cal.driver_latency_s == close(0.003)  # t1's result at 1.5, t2's start at 1.503
    assert cal.startup_s == close(0.0)  # t0 and t1 started computing as they started
    # Lane 0 ran t0.1, t0.2, t2.1, t0.3. t0.1 -> t0.2 follows a pause (the driver's round trip, not the lane's
    # boundary) and t2.1 is a first iteration; t0 was ready for t0.3 (t0.2 ended before t2.1 began): 1 ms.
    assert cal.boundary_s == close(0.001)
    assert cal.admit_first_share == 1.0


def test_an_end_off_any_device_is_no_report_for_the_driver_latency(tmp_path):
    """A trial ended off any device (queued when the run or its search ended it) writes a ``trial_end`` with no
    device: no device's report waited for the driver there, so it must not be taken for one (it shortened the
    measured driver latency: t1's result at 1.5, then t2's start at 1.503, not this end at 1.502)."""
    path = str(tmp_path / "race")
    write_race_store(path)
    before = load_store_trace(path)
    store = ExperimentStore.open(path)
    store.add_events([(before.origin + 1.502, "trial_end", "t1", None,
                       {"attempt": 0, "outcome": "stopped", "started": False})])
    store.close()
    after = load_store_trace(path)
    assert after.reports == before.reports
    assert calibrate(after).driver_latency_s == close(0.003)


def test_calibration_takes_the_median_of_the_moves_the_executor_measured(tmp_path):
    path = str(tmp_path / "race")
    write_race_store(path)
    trace = load_store_trace(path)
    cal = calibrate(trace)
    assert trace.move_costs == () and cal.move_s is None
    assert hardware_for(trace, cal).move_s == cal.startup_s  # no move measured: a move costs a start
    store = ExperimentStore.open(path)
    store.add_events([(trace.origin + 2.0 + i, "move_cost", "t0", "cpu:0",
                       {"attempt": 1, "seconds": seconds, "move_cost_s": seconds, "samples": i + 1})
                      for i, seconds in enumerate([0.4, 0.1, 0.25])])
    store.close()
    trace = load_store_trace(path)
    cal = calibrate(trace)
    assert trace.move_costs == (0.4, 0.1, 0.25)
    assert cal.move_s == 0.25 and hardware_for(trace, cal).move_s == 0.25


def write_colocation_store(path: str, factor: float) -> None:
    """Two trials on a 2-slot device whose iterations take 1 s alone and ``factor`` s when both compute."""
    w = StoreWriter(path)
    w.trial("a", 0, None)
    w.trial("b", 1, None)
    w.start(0.0, "a", lane=0, new_lane=True)
    for i, (start, end) in enumerate([(0, 1), (1, 2), (2, 3), (3, 3 + factor), (3 + factor, 3 + 2 * factor)], 1):
        w.iteration("a", i, start, end, 0.1 * i)
    w.start(3.0, "b", lane=1, new_lane=True)
    for i, (start, end) in enumerate([(3, 3 + factor), (3 + factor, 3 + 2 * factor),
                                      (3 + 2 * factor, 4 + 2 * factor)], 1):
        w.iteration("b", i, start, end, 0.1 * i)
    w.end(3 + 2 * factor, "a", lane=0, iterations=5, close=True)
    w.end(4 + 2 * factor, "b", lane=1, iterations=3, close=True)
    w.close(5 + 2 * factor)


def test_interference_fit_recovers_the_slowdown_and_alone_times_undo_it(tmp_path):
    path = str(tmp_path / "coloc")
    write_colocation_store(path, factor=1.25)
    trace = load_store_trace(path)
    interference, spread = fit_interference(trace)
    assert interference == close(0.2)  # 1.25 s when co-located = 1 s / (1 - 0.2)
    assert spread > 0
    times = alone_times(trace, interference)
    assert times["a"] == close([1.0] * 5)
    assert times["b"] == close([1.0] * 3)


def test_no_colocation_spread_means_no_interference(tmp_path):
    path = str(tmp_path / "flat")
    w = StoreWriter(path)
    w.trial("a", 0, None)
    w.start(0.0, "a", lane=0, new_lane=True)
    for i in range(1, 4):
        w.iteration("a", i, i - 1.0, float(i), 0.1)
    w.end(3.0, "a", lane=0, iterations=3, close=True)
    w.close(3.0)
    assert fit_interference(load_store_trace(path)) == (0.0, 0.0)


def test_executor_dispatch_is_least_loaded_with_prefetch():
    # Two 1-slot devices, trials of 3, 1 and 1 iterations of 1 s. The executor's dispatch sends t2 to device 0
    # at once (both devices hold one computing trial, below slots + prefetch; ties go to the lower index), where
    # it time-slices with t0: 4 s. (Waiting for device 1 to free, as a slots-capped planner does, gives 3 s.)
    records = tuple(TrialRecord(sec_per_iter=1.0, curve=(0.0,)) for _ in range(3))
    plans = [TrialPlan(3, (None,), 0), TrialPlan(1, (None,), 0), TrialPlan(1, (None,), 0)]
    sim = Simulation(LeastLoadedStrategy(), Workload(records), ReplaySearcher(plans), 3,
                     Hardware(gpus=2, slots=1, **FREE))
    result = sim.run()
    assert result.makespan_s == close(4.0)
    assert result.iterations == 5
    assert {tid: t.ended_at for tid, t in sim.trials.items()} == close(
        {"t00000": 4.0, "t00001": 1.0, "t00002": 2.0})


def test_planner_executor_prefetches_one_queued_trial_per_full_device():
    # The same trials under the real executor's rules: the planner puts t0 on device 0 and t1 on device 1 (one
    # slot each) and queues t2; both devices are full, so t2 is prefetched to the lower one, device 0, where it
    # waits for t0 (a prefetched trial begins when its lane would idle): 4 s. When t1 ends at 1 s, no attempt has
    # done two iterations, so the planner still counts the 5 s prior for a start elsewhere and leaves t2 there.
    # The simulator's plain waterfill has no prefetch: t2 waits for device 1: 3 s.
    records = tuple(TrialRecord(sec_per_iter=1.0, curve=(0.0,)) for _ in range(3))
    plans = [TrialPlan(3, (None,), 0), TrialPlan(1, (None,), 0), TrialPlan(1, (None,), 0)]

    def run(planner: str) -> float:
        sim = Simulation(make_replay_strategy(planner), Workload(records), ReplaySearcher(plans), 3,
                         Hardware(gpus=2, slots=1, **FREE))
        return sim.run().makespan_s

    assert run("executor") == close(4.0)
    assert run("waterfill") == close(3.0)
    with pytest.raises(ConfigError):
        make_replay_strategy("nope")


def test_the_executor_replay_withdraws_a_prefetched_trial_that_has_not_begun():
    # Three 1-slot devices: t0 (10 iterations of 2 s), t1 (3 of 0.5 s) and t2 (10 of 0.5 s) start, and t3 (2 of
    # 0.5 s) is prefetched behind t0 on device 0, where it waits for t0 (it would begin only when the lane idles).
    # When t1 ends at 1.5 s (t2's first two iterations have measured what a start costs: nothing here), the
    # planner spreads t3 to device 1. t3 has no checkpoint, but it has not begun: it is withdrawn and starts there,
    # as the executor does, and ends at 2.5 s. (In the test above, the planner still had its 5 s prior when t1
    # ended, and t2 stayed.)
    records = tuple(TrialRecord(sec_per_iter=sec, curve=(0.0,)) for sec in (2.0, 0.5, 0.5, 0.5))
    plans = [TrialPlan(n, (None,), 0) for n in (10, 3, 10, 2)]
    sim = Simulation(make_replay_strategy("executor"), Workload(records), ReplaySearcher(plans), 10,
                     Hardware(gpus=3, slots=1, **FREE))
    result = sim.run()
    assert {tid: t.ended_at for tid, t in sim.trials.items()} == close(
        {"t00000": 20.0, "t00001": 1.5, "t00002": 5.0, "t00003": 2.5})
    assert result.makespan_s == close(20.0)
    assert result.moves == 0 and sim.trials["t00003"].attempts == 2  # a second start, not a move


def _f3_replay(gpus):
    """h160's F3 in small, in the executor's replay: no checkpoints, 1 s iterations, a driver 0.1 s away, 1-slot
    devices. t0 (10 iterations, a rung at 2) starts on device 0, t1 (4 iterations, a rung at 2) on device 1 (or
    after t0's pause on device 0), and t2 (6 iterations, a rung at 1) is prefetched behind t0; every pause is
    promoted at the driver's next step."""
    records = tuple(TrialRecord(sec_per_iter=1.0, curve=(0.0,)) for _ in range(3))
    plans = [TrialPlan(10, (2.0, None), 0), TrialPlan(4, (2.0, None), 0), TrialPlan(6, (1.0, None), 0)]
    sim = Simulation(make_replay_strategy("executor"), Workload(records), ReplaySearcher(plans), 10,
                     Hardware(gpus=gpus, slots=1, **{**FREE, "driver_latency_s": 0.1}))
    return sim, sim.run()


def test_the_executor_replay_holds_a_prefetched_trial_through_a_pause_while_another_device_would_idle():
    # Two devices and nothing queued once t2 is prefetched: the executor holds pauses (Executor._tell_hold_pauses),
    # so t2 waits through t0's pause at 2 s until the driver's next step has promoted t0, and when t1 ends at
    # 4.1 s it has not begun: it is withdrawn to device 1 and ends at 10.3 s, beside t0 (10.1 s). Without the hold
    # t2 began at t0's pause, and the two, neither of which could leave device 0 without a checkpoint, took turns
    # there to 13 s and 16 s while device 1 idled from 4.1 s (h160's F3, an ASHA run resumed on two CPUs).
    sim, result = _f3_replay(gpus=2)
    assert {tid: t.ended_at for tid, t in sim.trials.items()} == close({"t00000": 10.1, "t00001": 4.1,
                                                                        "t00002": 10.3})
    assert result.makespan_s == close(10.3)
    assert sim.trials["t00002"].attempts == 2  # withdrawn before it began, then started on device 1


def test_the_executor_replay_does_not_hold_pauses_on_one_device():
    # With one device no other would idle, so pauses are not held: t2 begins at t0's pause (2 s), using the
    # driver's round trip, and time-slices with t0 (and then t1) as before the hold existed.
    sim, result = _f3_replay(gpus=1)
    assert not sim.hold_pauses
    assert {tid: t.ended_at for tid, t in sim.trials.items()} == close({"t00000": 14.0, "t00001": 9.0,
                                                                        "t00002": 20.1})
    assert result.makespan_s == close(20.1)


def test_the_executor_replay_learns_what_a_start_costs_from_a_trial_that_has_ended():
    # As the executor measures a start from every attempt's first two iterations: two 1-slot devices, t1 (3
    # iterations of 0.5 s) ends at 1.5 s, the only trial that has done two iterations by then. Its start cost
    # (nothing here) replaces the 5 s prior at the plan that follows its end, so t2, prefetched behind t0 and not
    # begun, is withdrawn to device 1 and ends at 2.5 s; with the prior it would wait behind t0 and end at 5 s.
    records = tuple(TrialRecord(sec_per_iter=sec, curve=(0.0,)) for sec in (2.0, 0.5, 0.5))
    plans = [TrialPlan(n, (None,), 0) for n in (10, 3, 2)]
    strategy = make_replay_strategy("executor")
    sim = Simulation(strategy, Workload(records), ReplaySearcher(plans), 10, Hardware(gpus=2, slots=1, **FREE))
    sim.run()
    assert {tid: t.ended_at for tid, t in sim.trials.items()} == close({"t00000": 20.0, "t00001": 1.5, "t00002": 2.5})
    assert strategy.planner.settings.move_cost_s == 0.0  # the hardware's startup_s


@pytest.mark.parametrize(("lengths", "costs", "moves"), [
    ((12, 2, 2, 1), [DEFAULT_MOVE_COST_S, 0.25, 0.5], 1),
    ((2, 1, 1), [DEFAULT_MOVE_COST_S], 0),
], ids=["measured", "unmeasured"])
def test_the_executor_replay_learns_the_move_cost_as_the_executor_does(lengths, costs, moves):
    # Two 1-slot devices, trials of 1 s iterations. The replay's planner starts from the executor's prior (5 s),
    # takes what a start costs (the hardware's 0.25 s) once an attempt has done two iterations, and what a move
    # costs (0.5 s) once a moved trial has done two iterations on its new device. With (12, 2, 2, 1), t0 moves
    # when a device frees and goes on there: all three. With (2, 1, 1), no attempt has done two iterations at any
    # plan: the prior stays, and with it t2, prefetched behind t0, waits there instead of being withdrawn to the
    # device t1 frees.
    records = tuple(TrialRecord(sec_per_iter=1.0, curve=(0.0,)) for _ in lengths)
    plans = [TrialPlan(n, (None,), 0) for n in lengths]
    strategy = make_replay_strategy("executor", checkpoints=True)
    used = []
    plan = strategy.plan

    def recording_plan():
        if not used or used[-1] != strategy.planner.settings.move_cost_s:
            used.append(strategy.planner.settings.move_cost_s)
        return plan()

    strategy.plan = recording_plan
    sim = Simulation(strategy, Workload(records), ReplaySearcher(plans), 20,
                     Hardware(gpus=2, slots=1, **{**FREE, "move_s": 0.5, "startup_s": 0.25}))
    result = sim.run()
    assert result.moves == moves
    assert used == costs


def race_simulation(admit_first: bool) -> Simulation:
    """One 2-slot device. t0 and t2 (10 iterations of 1 s) share lane 0, t1 (one 5 s iteration, paused at its
    budget and stopped there) has lane 1, t3 (10 iterations) waits for a slot. t0 and t2 were profiled small."""
    def record(sec: float) -> TrialRecord:  # a trial keeps one of the device's two cores busy: no slowdown
        return TrialRecord(sec_per_iter=sec, demand=0.5, curve=(0.0,))

    records = (record(1.0), record(5.0), record(1.0), record(1.0))
    plans = [TrialPlan(10, (None,), 0), TrialPlan(1, (1.0,), 0), TrialPlan(10, (None,), 0), TrialPlan(10, (None,), 0)]
    return runtime_simulation(LeastLoadedStrategy(), Workload(records), ReplaySearcher(plans), 10,
                              Hardware(gpus=1, slots=2, **FREE), estimates=[[(0, 4096)], [], [(0, 4096)], []],
                              admit_first=lambda seq, contested: admit_first)


def test_a_lane_the_stop_race_dissolves_is_taken_by_a_waiting_trial():
    # Leave first: t1's lane dissolves at 5 s and the device spreads (DeviceHost._spread_locked): t2, waiting
    # in lane 0 for its turn, takes a lane of its own; t3 then shares one. 25 s of work left on two lanes,
    # in whole iterations: 19 s.
    assert race_simulation(admit_first=False).run().makespan_s == close(19.0)
    # Admit first: t3 joins lane 0 (its profiled members leave room), then t1's lane dissolves; a trial waiting
    # in lane 0 takes it, so no slot idles and the race costs nothing (without the spread: all 30 s of work
    # in one lane while the other slot idled, which made replays of 2-slot runs 48-146% long).
    assert race_simulation(admit_first=True).run().makespan_s == close(19.0)


def test_the_replay_spreads_as_the_device_did_when_a_lane_dissolves(tmp_path):
    # The replay must give t0 the lane t1 freed, as the device did, not keep it waiting behind t2 in the
    # shared lane (4 s against 3.5 s: what made replays of 2-slot runs 48-146% long).
    path = str(tmp_path / "spread")
    write_spread_store(path)
    trace = load_store_trace(path)
    assert trace.makespan_s == close(3.503)
    assert [t.lane_mates for t in trace.trials] == [(), (), (0,)]
    for pin in (True, False):
        result = replay(trace, pin_lanes=pin)
        assert result.iterations == trace.iterations == 5
        assert result.makespan_s == close(trace.makespan_s, rel=0.01)
    assert abs(compare_with_store(trace).figures()["error_pct"]) < 1.0


def test_share_order_is_deterministic_with_the_given_share():
    order = share_order(0.25)
    picks = [order(seq, True) for seq in range(8)]
    assert sum(picks) == 2 and picks == [order(seq, True) for seq in range(8)]  # memoised per trial
    assert share_order(0.5)(0, False) is False  # nothing to race against
    assert sum(share_order(1.0)(s, True) for s in range(5)) == 5
    assert sum(share_order(0.0)(s, True) for s in range(5)) == 0


def test_pinned_lanes_follow_the_recorded_lane_mates():
    mates = {"a": [], "b": ["a"], "c": [], "d": ["gone"]}
    lanes = PinnedLanes(16 * 2**30, 2, mates.get)
    a = lanes.admit("a", DEFAULT_P, DEFAULT_T)
    b = lanes.admit("b", DEFAULT_P, DEFAULT_T)  # best fit would open a second lane; the run put b with a
    c = lanes.admit("c", DEFAULT_P, DEFAULT_T)
    d = lanes.admit("d", DEFAULT_P, DEFAULT_T)  # its mate is not here: best fit
    assert a.new_lane and b.lane_id == a.lane_id and c.new_lane and c.lane_id != a.lane_id
    reference = LaneManager(16 * 2**30, 2)
    for tid in "abc":
        reference.admit(tid, DEFAULT_P, DEFAULT_T)
    assert reference.lane_of("b") != reference.lane_of("a")
    assert d is not None
    lanes.check_invariants()


def test_replay_of_a_recorded_run_repeats_its_decisions(tmp_path):
    path = str(tmp_path / "race")
    write_race_store(path)
    trace = load_store_trace(path)
    result = replay(trace, pin_lanes=True)
    assert result.iterations == trace.iterations and result.trials == 3
    assert replay(trace, planner="least_loaded", pin_lanes=True).iterations == trace.iterations
    # (this device did not spread its lanes, the replay does: t0 takes the lane t1 freed, 0.5 s early)
    assert result.makespan_s == close(trace.makespan_s - 0.5, rel=0.05)
    naive = replay(trace, runtime_effects=False)
    assert naive.iterations == trace.iterations


def test_the_recorded_workload_is_a_sim_trace_and_the_cli_compares(tmp_path, capsys):
    path = str(tmp_path / "race")
    write_race_store(path)
    trace = load_store_trace(path)
    out = str(tmp_path / "trace.json")
    save_store_trace(trace, out)
    workload = load_trace(out)
    assert len(workload.records) == 3 and workload.metric == "score" and workload.mode == "max"
    expected = recorded_workload(trace, calibrate(trace))
    flat = [t for r in workload.records for t in r.sec_per_iter]
    assert flat == close([t for r in expected.records for t in r.sec_per_iter])
    with open(out) as f:
        doc = json.load(f)
    assert [t["iterations_run"] for t in doc["trials"]] == [3, 1, 1]
    assert doc["hardware"]["slots"] == 2 and doc["hardware"]["gpus"] == 1

    assert main([path]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["measured_s"] == close(4.002, abs=1e-3)
    assert figures["iterations"]["recorded"] == figures["iterations"]["measured"] == 5
    assert main([str(tmp_path / "nothing")]) == 2


def test_the_cli_takes_a_bare_name_and_refuses_a_run_without_iterations(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FLUIDSALUS_STORAGE_PATH", str(tmp_path))
    # (not the real ~/ray_results, where a name may be too)
    monkeypatch.setenv("RAY_STORAGE", os.path.join(os.path.dirname(str(tmp_path)), "no_ray_results"))
    write_race_store(str(tmp_path / "race"))
    assert main(["race"]) == 0  # "no such file" before: inspect takes a bare name, so does this
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["iterations"]["recorded"] == 5
    w = StoreWriter(str(tmp_path / "silent"))  # started, never reported: its replay was "-100.0%"
    w.trial("t0", 0, 3.0)
    w.start(0.0, "t0", lane=0, new_lane=True)
    w.end(1.0, "t0", lane=0, iterations=0, close=True)
    w.close(1.0)
    assert main(["silent"]) == 2
    assert "no trial of this experiment reported an iteration" in capsys.readouterr().err


@pytest.mark.usefixtures("ray_cluster")
def test_sim_vs_real_machinery_on_a_tiny_sweep(tmp_path):
    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    try:
        bench = importlib.import_module("sim_vs_real")
        storage = str(tmp_path / "results")
        row = bench.measure("sleep", trials=6, seed=0, storage=storage, name="tiny", iter_s=0.02, devices=None,
                            cpus_per_device=None, planner="executor")
    finally:
        sys.path.remove(os.path.join(REPO_ROOT, "benchmarks"))
    assert row["workload"] == "sleep" and row["trials"] == 6
    assert row["iterations"]["recorded"] == row["iterations"]["measured"] > 0
    for key in ("measured_s", "predicted_s", "profile_predicted_s", "naive_predicted_s", "end_to_end_s"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["end_to_end_s"] >= row["measured_s"]
    assert math.isfinite(row["error_pct"]) and 0.0 <= row["admit_first_share"] <= 1.0
    # The same store, read again, gives the same comparison (the replay is deterministic).
    again = compare_with_store(load_store_trace(os.path.join(storage, "tiny"))).figures()
    assert again["predicted_s"] == row["predicted_s"] and again["naive_predicted_s"] == row["naive_predicted_s"]


def test_a_resumed_run_is_refused_for_its_makespan_holds_the_time_it_sat_interrupted(tmp_path, capsys):
    """An experiment interrupted and resumed 30 s later was compared as "measured makespan 43.9 s; predicted ...
    8.058 s (-81.6%)": its first trial start to last trial end spans the time it sat interrupted (h147's F3)."""
    w = StoreWriter(str(tmp_path / "resumed"))
    w.trial("t0", 0, None)
    w.start(0.0, "t0", lane=0, new_lane=True)
    w.iteration("t0", 1, 0.0, 1.0, 0.5)
    w.event(30.0, "resume", unfinished=1)
    w.iteration("t0", 2, 30.0, 31.0, 0.6)
    w.end(31.0, "t0", lane=0, iterations=2, close=True)
    w.close(31.0)
    assert main([str(tmp_path / "resumed")]) == 2
    out, err = capsys.readouterr()
    assert "the run was interrupted and resumed (1 time), so its makespan holds the time it sat interrupted" in err
    assert out == ""


def test_a_run_that_did_not_finish_is_refused_and_no_figure_is_infinite(tmp_path, capsys):
    """A killed run (a trial still RUNNING) was compared as "measured makespan 0.000 s ... +inf%", with
    ``"error_pct": Infinity`` in a last line strict JSON parsers reject (a tester's F-SIM-5)."""
    from fluidsalus.sim.trace import Comparison

    w = StoreWriter(str(tmp_path / "killed"))
    w.trial("t0", 0, None)
    w.start(0.0, "t0", lane=0, new_lane=True)
    w.iteration("t0", 1, 0.0, 1.0, 0.5)
    w.store.set_experiment(status="ERROR")
    w.store.close()
    assert main([str(tmp_path / "killed")]) == 2
    out, err = capsys.readouterr()
    assert "1 of its 1 trials never ended (first: t0)" in err and out == ""
    nothing = Comparison(measured_s=0.0, wall_s=None, recorded_s=2.0, profile_s=2.0, naive_s=2.0,
                         calibration=calibrate(load_store_trace(str(tmp_path / "killed"))), planner="executor",
                         iterations={})
    figures = nothing.figures()
    assert figures["error_pct"] is None and figures["profile_error_pct"] is None
    json.dumps(figures, allow_nan=False)


def test_a_run_with_data_parallel_trials_is_refused_not_replayed_on_one_device(tmp_path, capsys):
    """A data-parallel run was replayed as one-device trials (its trials side by side on the devices they took
    turns on: -38%) and saved as a trace of one-device trials (a tester's F-SIM-2). Until the replay models
    ranks, the comparison, replay() and --save refuse such a run."""
    from fluidsalus.errors import StoreError
    from fluidsalus.sim.trace import trace_document

    path = str(tmp_path / "dp")
    w = StoreWriter(path, slots=1, devices=2)
    for seq in range(2):  # each trial on both devices (rank 1 on cpu:1), one after the other
        tid, at = f"t{seq}", 2.0 * seq
        w.trial(tid, seq, None)
        w.start(at, tid, lane=0, new_lane=True)
        w.event(at, "worker_start", tid, "cpu:1", rank=1, world_size=2, attempt=0)
        w.iteration(tid, 1, at, at + 1.0, 0.5)
        w.iteration(tid, 2, at + 1.0, at + 2.0, 0.6)
        w.event(at + 2.0, "worker_end", tid, "cpu:1", rank=1, world_size=2, outcome="completed", attempt=0)
        w.end(at + 2.0, tid, lane=0, iterations=2, close=True)
    w.close(4.1)
    assert main([path, "--save", str(tmp_path / "t.json")]) == 2
    assert "first: t0 on up to 2 devices" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    trace = load_store_trace(path)
    assert trace.world_sizes == {"t0": 2, "t1": 2}
    for call in (lambda: replay(trace), lambda: trace_document(trace), lambda: compare_with_store(trace)):
        with pytest.raises(StoreError, match="2 of its 2 trials ran data-parallel"):
            call()


def test_the_trace_cli_replays_with_the_runs_lane_policy_and_checks_save_before_the_replay(tmp_path, capsys):
    """A tester's (h71) C4 and B1: the CLI replayed with fifo whatever the run's policy (the store records it), and
    `--save out.csv` wrote JSON into a .csv name that `python -m fluidsalus.sim --trace` then read as CSV."""
    path = str(tmp_path / "srtf")
    write_spread_store(path, spec={"lane_policy": "srtf"})
    trace = load_store_trace(path)
    assert trace.lane_policy == "srtf"
    assert main([path]) == 0
    assert "lane policy srtf" in capsys.readouterr().out
    assert main([path, "--lane-policy", "fair"]) == 0
    assert "lane policy fair" in capsys.readouterr().out
    plain = str(tmp_path / "plain")
    write_spread_store(plain)
    assert load_store_trace(plain).lane_policy is None
    assert main([plain]) == 0
    assert "lane policy fifo" in capsys.readouterr().out
    assert main([path, "--save", str(tmp_path / "out.csv")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "a trace is saved as JSON" in captured.err
    assert main([path, "--save", str(tmp_path / "no_such_folder" / "t.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no such folder" in captured.err
