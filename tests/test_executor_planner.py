"""The executor places trials with the water-filling planner.

Pure tests of the translation (``trialgroup/dispatch.py``: trials -> TrialDemand, plan -> actions, prefetch, lane
mirror) run without Ray;
the others run real sweeps on the shared 2-CPU Ray and read the store's events.
"""

from __future__ import annotations

import os
import pickle
import time
import types
from typing import Any

import cloudpickle
import pytest
from _trials import patch_ray, start_devices_warm

import fluidsalus
from fluidsalus.callbacks import Callback as EngineCallback
from fluidsalus.gpu.host import TrialSpec
from fluidsalus.store import PAUSED, PENDING, RUNNING, ExperimentStore
from fluidsalus.trialgroup.dispatch import (
    REFUSED_LIMIT,
    REFUSED_MIN_DEVICES,
    REFUSED_NO_CHECKPOINT,
    REFUSED_PAUSED,
    DeviceLoad,
    LaneMirror,
    TrialState,
    charge_death,
    choose_prefetch,
    estimate_of,
    is_stalled,
    plan_actions,
    trial_demand,
)
from fluidsalus.trialgroup.executor import declared_workers, rank_specs
from fluidsalus.trialgroup.planner import (
    DEFAULT_MOVE_COST_S,
    INTRA,
    KEEP,
    MOVE,
    START,
    Assignment,
    DeviceView,
    Plan,
    Planner,
)
from fluidsalus.trialgroup.queue import queue_window, remaining_budget
from fluidsalus.trialgroup.trial import Trial, TrialGroup

GiB = 2**30
ESTIMATE = (256 * 2**20, 256 * 2**20)


def _trial(tid: str, seq: int = 0, **kw) -> Trial:
    return Trial(trial_id=tid, seq=seq, config={}, trial_dir=f"/tmp/{tid}", **kw)


# ------------------------------------------------------------------------------------------ pure: demands


def test_remaining_budget_counts_from_the_last_iteration_or_the_time_attr():
    assert remaining_budget(_trial("a"), "training_iteration") is None  # no budget: open-ended
    assert remaining_budget(_trial("a", budget=8, last_iteration=3), "training_iteration") == 5
    assert remaining_budget(_trial("a", budget=2, last_iteration=5), "training_iteration") == 0
    custom = _trial("a", budget=10.0, last_result={"epochs": 4.5})
    assert remaining_budget(custom, "epochs") == 5.5
    assert remaining_budget(_trial("a", budget=10.0), "epochs") == 10.0  # nothing reported yet


def test_trial_demand_carries_estimates_devices_pause_and_data_parallel_bounds():
    fresh = trial_demand(_trial("q", seq=4, budget=9), "training_iteration", ESTIMATE)
    assert (fresh.remaining, fresh.p_bytes, fresh.t_bytes, fresh.devices, fresh.paused, fresh.seq) == (
        9, ESTIMATE[0], ESTIMATE[1], (), False, 4)
    assert not fresh.data_parallel
    measured = _trial("r", seq=1, budget=9, last_iteration=9, status=PAUSED, devices=(1,), p_bytes=100, t_bytes=50)
    demand = trial_demand(measured, "training_iteration", ESTIMATE)
    assert (demand.remaining, demand.p_bytes, demand.t_bytes, demand.devices, demand.paused) == (0, 100, 50, (1,), True)
    wide = trial_demand(_trial("w"), "training_iteration", ESTIMATE, workers=(1, 4))
    assert wide.data_parallel and wide.remaining is None
    assert (wide.min_devices, wide.max_devices) == (1, 4)
    assert not trial_demand(_trial("n"), "training_iteration", ESTIMATE, workers=None).data_parallel


def test_trial_demand_counts_the_iterations_a_restart_would_run_again():
    # A move restarts a trial from its last checkpoint: what it ran after it is run again.
    running = _trial("c", budget=20, last_iteration=7, checkpoint_path="/tmp/c/checkpoint_000004", devices=(0,),
                     reads_checkpoints=True)
    assert trial_demand(running, "training_iteration", ESTIMATE).since_checkpoint == 3
    assert trial_demand(_trial("d", budget=20, last_iteration=7, devices=(0,)), "training_iteration",
                        ESTIMATE).since_checkpoint == 7  # no checkpoint: everything
    at_checkpoint = _trial("e", budget=20, last_iteration=4, checkpoint_path="/tmp/e/checkpoint_000004",
                           reads_checkpoints=True)
    assert trial_demand(at_checkpoint, "training_iteration", ESTIMATE).since_checkpoint == 0
    # A trial that never asked for its checkpoint (its callback saves one, its function never reads it) would
    # start over at a restart while its iterations went on from the checkpoint's (a helper's XGBoost sweep)
    unread = _trial("u", budget=20, last_iteration=7, checkpoint_path="/tmp/u/checkpoint_000004", devices=(0,))
    # A trial that reported and has no checkpoint it reads is never restarted (plan_actions refuses): the planner
    # is told.
    assert [trial_demand(t, "training_iteration", ESTIMATE).restartable
            for t in (running, _trial("d", budget=20, last_iteration=7, devices=(0,)), at_checkpoint,
                      _trial("f", budget=20, devices=(0,)), unread)] == [True, False, True, True, False]
    # Its device was asked to give it back: it had begun, or it is on its way back to the queue.
    asked = _trial("g", budget=20, devices=(0,))
    assert not trial_demand(asked, "training_iteration", ESTIMATE, withdrawal_asked=True).restartable


def test_the_planner_starts_the_longest_queued_trial_first():
    """Three queued trials, one single-slot device: the one with most budget left starts, the rest queue
    longest first (nothing measured: remaining work is counted in iterations)."""
    trials = [_trial("short", seq=0, budget=2), _trial("long", seq=1, budget=8), _trial("mid", seq=2, budget=4)]
    demands = [trial_demand(t, "training_iteration", ESTIMATE) for t in trials]
    plan = Planner().plan(demands, [DeviceView(0, 16 * GiB, 1)])
    actions = plan_actions(plan, {t.trial_id: TrialState(()) for t in trials})
    assert [(tid, devices) for tid, devices, _ in actions.submit] == [("long", (0,))]
    assert [tid for tid in plan.queued] == ["mid", "short"]


def test_the_queue_window_keeps_the_trials_the_planner_would_start_first():
    """A long queue is cut to its head before planning: the head is the planner's own order."""
    planner = Planner()
    trials = [_trial(f"t{i:02d}", seq=i, budget=[3, 9, None, 5, 9, 1][i % 6]) for i in range(24)]
    for i, t in enumerate(trials[:6]):  # some measured, at different speeds
        planner.observe(t.trial_id, 0.5 + i)
    demands = [trial_demand(t, "training_iteration", ESTIMATE) for t in trials]
    plan = planner.plan(demands, [DeviceView(0, 16 * GiB, 1)])
    order = [a.trial_id for a in plan.starts] + list(plan.queued)
    assert queue_window(trials, planner.book, "training_iteration", 24) == order
    assert queue_window(trials, planner.book, "training_iteration", 5) == order[:5]


# ------------------------------------------------------------------------------------------ pure: plan -> actions


def _plan(*assignments: Assignment, preempted=(), unplaceable=(), queued=()) -> Plan:
    return Plan(INTRA, tuple(assignments), tuple(queued), tuple(preempted), tuple(unplaceable))


def test_only_the_plans_changes_become_actions():
    plan = _plan(Assignment("kept", (0,), (0,), KEEP), Assignment("new", (1,), (), START),
                 Assignment("moved", (1,), (0,), MOVE))
    states = {"kept": TrialState((0,), can_restart=True), "new": TrialState(()),
              "moved": TrialState((0,), can_restart=True)}
    actions = plan_actions(plan, states)
    assert actions.submit == [("new", (1,), START)]
    assert actions.move == [("moved", (1,), MOVE)]
    assert not actions.preempt and not actions.refused and not actions.retarget


def test_a_move_needs_a_checkpoint_and_a_computing_trial():
    plan = _plan(Assignment("ckpt", (1,), (0,), MOVE), Assignment("bare", (1,), (0,), MOVE),
                 Assignment("paused", (1,), (0,), MOVE), Assignment("moving", (2,), (1,), MOVE),
                 Assignment("stopping", (1,), (0,), MOVE))
    states = {
        "ckpt": TrialState((0,), can_restart=True),
        "bare": TrialState((0,), can_restart=False),  # no checkpoint: a restart would start it over
        "paused": TrialState((0,), computing=False, can_restart=True),
        "moving": TrialState((0,), moving=True),
        "stopping": TrialState((0,), can_restart=True, busy=True),
    }
    actions = plan_actions(plan, states)
    assert [m[0] for m in actions.move] == ["ckpt"]
    assert actions.retarget == [("moving", (2,))]
    assert set(actions.refused) == {("bare", MOVE, REFUSED_NO_CHECKPOINT), ("paused", MOVE, REFUSED_PAUSED)}


def test_a_move_the_planner_held_back_is_reported_as_refused_for_want_of_a_checkpoint():
    """``Plan.held``: moves the planner left out because the trial cannot restart. Each becomes a refusal (the
    executor's ``plan_refused`` event, so a report says why a device idled), unless the trial is already being
    stopped or moved, or is paused at its budget (it computes nothing where it is)."""
    plan = Plan(INTRA, (Assignment("held", (0,), (0,), KEEP), Assignment("busy", (0,), (0,), KEEP),
                        Assignment("paused", (0,), (0,), KEEP)), (),
                held=(("held", (1,)), ("busy", (1,)), ("paused", (1,)), ("gone", (1,))))
    states = {"held": TrialState((0,)), "busy": TrialState((0,), busy=True),
              "paused": TrialState((0,), computing=False)}
    actions = plan_actions(plan, states)
    assert actions.refused == [("held", MOVE, REFUSED_NO_CHECKPOINT)]
    assert not actions.move and not actions.submit and not actions.withdraw


def test_preemption_and_unplaceable_trials():
    plan = _plan(preempted=("ckpt", "bare", "queued"), unplaceable=("huge", "running_huge"), queued=("huge",))
    states = {"ckpt": TrialState((0,), can_restart=True), "bare": TrialState((0,)), "queued": TrialState(()),
              "huge": TrialState(()), "running_huge": TrialState((0,))}
    actions = plan_actions(plan, states)
    assert actions.preempt == ["ckpt"]
    assert actions.refused == [("bare", "preempt", REFUSED_NO_CHECKPOINT)]
    assert actions.unplaceable == ["huge"]  # a running one is its device's to fail


def test_a_planned_move_or_preemption_of_a_trial_that_may_not_have_begun_is_a_withdrawal():
    """No checkpoint and nothing reported: its device is asked to give it back (it does only if the trial never had
    its lane's turn), which loses nothing; a checkpoint still means a move, and a paused trial is still refused."""
    plan = _plan(Assignment("unbegun", (1,), (0,), MOVE), Assignment("ckpt", (1,), (0,), MOVE),
                 Assignment("reported", (1,), (0,), MOVE), Assignment("paused", (1,), (0,), MOVE),
                 preempted=("unbegun_too", "reported_too"))
    states = {
        "unbegun": TrialState((0,), unbegun=True),
        "ckpt": TrialState((0,), can_restart=True, unbegun=False),
        "reported": TrialState((0,)),  # it reported: it has run, and only a checkpoint could move it
        "paused": TrialState((0,), computing=False, unbegun=True),
        "unbegun_too": TrialState((0,), unbegun=True),
        "reported_too": TrialState((0,)),
    }
    actions = plan_actions(plan, states)
    assert actions.withdraw == [("unbegun", MOVE), ("unbegun_too", "preempt")]
    assert [m[0] for m in actions.move] == ["ckpt"] and not actions.preempt
    assert set(actions.refused) == {("reported", MOVE, REFUSED_NO_CHECKPOINT), ("paused", MOVE, REFUSED_PAUSED),
                                    ("reported_too", "preempt", REFUSED_NO_CHECKPOINT)}



def test_when_the_run_is_stalled_moves_and_preemptions_go_ahead_without_a_checkpoint():
    """Nothing computes and a trial waits for memory (:func:`is_stalled`): a trial that reported without a
    checkpoint is moved or preempted anyway (it restarts from scratch), but a trial that may not have begun is
    still withdrawn (that loses nothing), and a paused trial is still never moved (the planner preempts it)."""
    plan = _plan(Assignment("reported", (1,), (0,), MOVE), Assignment("unbegun", (1,), (0,), MOVE),
                 Assignment("paused", (1,), (0,), MOVE), preempted=("paused_too", "waiting"))
    states = {
        "reported": TrialState((0,), stalled=True),
        "unbegun": TrialState((0,), unbegun=True, stalled=True),
        "paused": TrialState((0,), computing=False, stalled=True),
        "paused_too": TrialState((0,), computing=False, stalled=True),
        "waiting": TrialState((0,), stalled=True),
    }
    actions = plan_actions(plan, states)
    assert actions.move == [("reported", (1,), MOVE)] and actions.preempt == ["paused_too", "waiting"]
    assert actions.withdraw == [("unbegun", MOVE)]
    assert actions.refused == [("paused", MOVE, REFUSED_PAUSED)]
    unstalled = plan_actions(plan, {tid: s._replace(stalled=False) for tid, s in states.items()})
    assert not unstalled.move and not unstalled.preempt
    assert {r[0] for r in unstalled.refused} == {"reported", "paused", "paused_too", "waiting"}


@pytest.mark.parametrize(("computing", "waiting", "queued", "under_way", "stalled"), [
    (0, 1, 0, False, True),  # a trial waits for a lane's admission, nothing computes
    (0, 0, 2, False, True),  # trials wait in the driver's queue, nothing computes
    (1, 1, 2, False, False),  # a trial computes: its results may let the searcher decide
    (0, 1, 1, True, False),  # a stop, a start or a worker's end is on its way: news will come
    (0, 0, 0, False, False),  # nothing waits: the run is ending, not stalled
])
def test_a_run_is_stalled_when_nothing_computes_nothing_is_under_way_and_a_trial_waits(
        computing, waiting, queued, under_way, stalled):
    assert is_stalled(computing, waiting, queued, under_way) is stalled



def test_a_device_death_blames_the_trials_computing_at_it_in_equal_shares_until_one_gets_further():
    """``charge_death``: a trial that computed alone at two deaths in a row without a result past the first fails
    once; one of two computing trials needs four such deaths; a result past the death point starts it afresh."""
    alone = _trial("alone", last_iteration=3)
    assert not charge_death(alone, 1) and charge_death(alone, 1)  # two deaths at iteration 3, alone
    assert (alone.death_point, alone.stuck_deaths) == (3, 2)
    assert not charge_death(alone, 1)  # its retry counts afresh: one more death is not yet a failure
    shared = _trial("shared", last_iteration=0)
    assert [charge_death(shared, 2) for _ in range(4)] == [False, False, False, True]
    moving_on = _trial("moving_on", last_iteration=1)
    assert not charge_death(moving_on, 1)
    moving_on.last_iteration = 2  # it got further before the next death: counted from there
    assert not charge_death(moving_on, 1) and moving_on.death_point == 2 and moving_on.stuck_deaths == 1
    assert charge_death(moving_on, 1)
    # A trial whose counter goes on from a checkpoint it does not restore: each attempt dies after 2 iterations.
    starts_over = _trial("starts_over", last_iteration=2)
    assert not charge_death(starts_over, 1) and starts_over.death_run == 2
    starts_over.attempt_start, starts_over.last_iteration = 2, 4  # "further", but after the same 2 iterations
    assert charge_death(starts_over, 1) and starts_over.death_point == 2
    starts_over.attempt_start, starts_over.last_iteration = 4, 7  # 3 iterations this time: it got further
    assert not charge_death(starts_over, 1) and (starts_over.death_point, starts_over.death_run) == (7, 3)


def test_submissions_stop_at_max_concurrent_trials():
    plan = _plan(*(Assignment(f"t{i}", (0,), (), START) for i in range(4)))
    actions = plan_actions(plan, {f"t{i}": TrialState(()) for i in range(4)}, limit=3, computing=1)
    assert [s[0] for s in actions.submit] == ["t0", "t1"]
    assert [(r[0], r[2]) for r in actions.refused] == [("t2", REFUSED_LIMIT), ("t3", REFUSED_LIMIT)]


def test_a_data_parallel_trial_never_runs_on_fewer_devices_than_its_min_workers():
    plan = _plan(Assignment("narrow", (0,), (), START), Assignment("wide", (0, 1), (), START),
                 Assignment("shrunk", (1,), (1, 2), "resize"), Assignment("kept", (2, 3), (2, 3), KEEP))
    states = {"narrow": TrialState((), min_devices=2), "wide": TrialState((), min_devices=2),
              "shrunk": TrialState((1, 2), can_restart=True, min_devices=2),
              "kept": TrialState((2, 3), min_devices=2)}
    actions = plan_actions(plan, states)
    assert actions.submit == [("wide", (0, 1), START)] and not actions.move
    assert set(actions.refused) == {("narrow", START, REFUSED_MIN_DEVICES), ("shrunk", "resize", REFUSED_MIN_DEVICES)}


def test_prefetch_fills_only_full_devices_in_queue_order():
    devices = [DeviceLoad(0, 2, 2, 10), DeviceLoad(1, 1, 2, 10), DeviceLoad(2, 3, 2, 10), DeviceLoad(3, 1, 1, 4)]
    sizes = {"a": 5, "b": 3, "c": 3, "d": 1}
    # cpu0 is full (one prefetch), cpu1 has a free slot the planner chose not to fill, cpu2 already holds one
    # beyond its slots, cpu3 is full but too small for "a".
    assert choose_prefetch(["a", "b", "c", "d"], sizes, devices) == [("a", 0), ("b", 3)]
    assert choose_prefetch(["a", "b"], sizes, devices, allowance=1) == [("a", 0)]
    assert choose_prefetch(["a"], sizes, devices, per_device=0) == []


def test_rank_specs_give_one_rank_per_device_with_rank_zero_at_home():
    spec = TrialSpec("t", "f_t", {"x": 1}, "/tmp/t", attempt=2)
    assert rank_specs(spec, [3]) == [(3, spec)]
    ranks = rank_specs(spec, [2, 0, 1], "10.0.0.1:5000")
    assert [(i, s.rank, s.world_size, s.rendezvous, s.attempt) for i, s in ranks] == [
        (2, 0, 3, "10.0.0.1:5000", 2), (0, 1, 3, "10.0.0.1:5000", 2), (1, 2, 3, "10.0.0.1:5000", 2)]
    with pytest.raises(fluidsalus.FluidsalusError, match="rendezvous"):
        rank_specs(spec, [0, 1])


def test_lane_mirror_replays_the_devices_lane_events():
    mirror = LaneMirror()
    mirror.apply("lane_open", None, {"lane": 0, "capacity": 1000})
    mirror.apply("lane_admit", "a", {"detail": [0, 300, 200]})
    mirror.apply("lane_admit", "b", {"detail": [0, 100, 100]})
    mirror.apply("lane_open", None, {"lane": 1, "capacity": 50})
    mirror.apply("lane_admit", "c", {"detail": [1, 20, 30]})
    mirror.apply("lane_estimate", "a", {"detail": [400, 150]})
    mirror.apply("lane_resize", None, {"lane": 1, "old_capacity": 50, "capacity": 80})
    views = mirror.views()
    assert [(v.lane_id, v.capacity, v.members) for v in views] == [
        (0, 1000, {"a": (400, 150), "b": (100, 100)}), (1, 80, {"c": (20, 30)})]
    mirror.apply("lane_leave", "c", {"detail": [1]})
    mirror.apply("lane_close", None, {"lane": 1})
    mirror.apply("lane_wait", "b", {"detail": [100, 100]})  # re-fitted: back in the device queue
    mirror.apply("something_new", "a", {})  # unknown kinds change nothing
    assert [(v.lane_id, v.members) for v in mirror.views()] == [(0, {"a": (400, 150)})]
    assert estimate_of("lane_oom", {"detail": [0, 1, 800, 300]}) == (800, 300)
    assert estimate_of("lane_admit", {"detail": [0, 5, 6]}) == (5, 6)
    assert estimate_of("lane_leave", {"detail": [0]}) is None


def test_declared_workers_reads_the_trainables_data_parallel_declaration():
    def train(config):
        return None

    assert declared_workers(cloudpickle.dumps((train, None))) is None
    train._fluidsalus_data_parallel = {"min_workers": 1, "max_workers": 4}
    assert declared_workers(cloudpickle.dumps((train, None))) == (1, 4)
    from fluidsalus.gpu.actor import pack_trainable

    assert declared_workers(pack_trainable(train, None)) == (1, 4)
    train._fluidsalus_data_parallel = {"min_workers": 1, "max_workers": 1}
    assert declared_workers(cloudpickle.dumps((train, None))) is None  # one device: not data-parallel


# ------------------------------------------------------------------------------------------ the executor, no Ray


class _FakeMethod:
    def __init__(self, calls, name, batches):
        self.calls, self.name, self.batches = calls, name, batches

    def remote(self, *args, batch=None):
        self.calls.append((self.name, args))
        self.batches.append(batch)


class _FakeActor:
    """Records the calls the executor makes on a device actor."""

    def __init__(self):
        self.calls = []
        self.batches = []  # the number of each call (Executor._batch)

    def __getattr__(self, name):
        return _FakeMethod(self.calls, name, self.batches)


def _sent(device):
    """What the executor sent a device: the calls it made at once, then the commands waiting for the device's next
    poll (``Executor._send``)."""
    return device.actor.calls + device.outbox


def _offline_executor(tmp_path, n_devices=1, slots=1, capacity=GiB):
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings, _Device

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, None, None)
    specs = [DeviceSpec(f"cpu:{i}", "cpu", i, slots) for i in range(n_devices)]
    executor = Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store, specs,
                        ExecutorSettings("exp", str(tmp_path / "exp"), "f", verbose=0))
    for spec in specs:
        device = _Device(spec, _FakeActor(), {"node_ip": "127.0.0.1", "capacity_bytes": capacity},
                         max_running=slots, assigned=set())
        executor._adopt(device, device.info)
        executor._devices.append(device)
    return executor, store


def test_a_resumed_run_goes_on_from_the_move_cost_it_measured(tmp_path):
    """The last stored ``move_cost`` estimate is the resumed executor's move cost, and the next measured move
    continues its EMA; a new run, or a stored estimate that is no time, starts from the prior."""
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, None, None)
    store.add_events([(1.0, "move_cost", "a", "cpu:0", {"seconds": 0.2, "move_cost_s": 0.2, "samples": 1}),
                      (2.0, "move_cost", "b", "cpu:0", {"seconds": 0.4, "move_cost_s": 0.3, "samples": 2})])

    def executor(trials):
        settings = ExecutorSettings("exp", str(tmp_path / "exp"), "f", verbose=0)
        return Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store,
                        [DeviceSpec("cpu:0", "cpu", 0, 1)], settings, trials=trials)

    assert executor([]).planner.settings.move_cost_s == DEFAULT_MOVE_COST_S  # a new run
    resumed = executor([_trial("a", last_iteration=1)])
    assert resumed.planner.settings.move_cost_s == pytest.approx(0.3)
    meter = resumed._move_costs
    meter.left("a", 0.0, 1)
    assert meter.result("a", 2.0, 3, 2, 0.55) == pytest.approx(0.9)
    assert meter.cost_s == pytest.approx(0.3 * 0.9 + 0.7 * 0.3) and meter.samples == 3  # DEFAULT_EMA_ALPHA = 0.3
    store.add_events([(3.0, "move_cost", "c", "cpu:0", {"move_cost_s": float("nan"), "samples": 3})])
    assert executor([_trial("a")]).planner.settings.move_cost_s == DEFAULT_MOVE_COST_S


def test_a_resumed_run_has_the_time_budget_its_earlier_sessions_left_as_rays(tmp_path):
    """Ray's ``time_budget_s`` is a ``TimeoutStopper`` in its saved experiment state: a restored run has what was
    left. A resumed run here had the whole budget again (h255's F5: ``time_budget_s=20`` interrupted at 6 s, Ray's
    restored run reported 49 more iterations, fluidsalus's 98). The time of the earlier sessions (``sessions()``:
    from the creation to the last thing recorded, then from each resume) is spent."""
    from fluidsalus.api import RESUME_EVENT
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, None, None)
    created = store.experiment()["created_at"]
    store.add_events([(created + 12.0, "trial_end", "a", "cpu:0", {}),  # the first session ran 12 s
                      (created + 100.0, RESUME_EVENT, None, None, {})])  # (resumed later)

    def executor(trials: list[Any], budget: float) -> Any:
        settings = ExecutorSettings("exp", str(tmp_path / "exp"), "f", verbose=0, time_budget_s=budget)
        return Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store,
                        [DeviceSpec("cpu:0", "cpu", 0, 1)], settings, trials=trials)

    resumed = executor([_trial("a", last_iteration=1)], 20.0)
    assert resumed._budget_spent == pytest.approx(12.0, abs=0.1)
    resumed._check_end()
    assert resumed._ending is None  # 8 s left
    spent = executor([_trial("a", last_iteration=1)], 11.0)
    spent._check_end()
    assert spent._ending == "time_budget"  # nothing left: it ends at once, as Ray's restored run
    fresh = executor([], 11.0)  # a new run's budget is whole
    assert fresh._budget_spent == 0.0
    fresh._check_end()
    assert fresh._ending is None


def test_a_resumed_run_does_not_give_its_searcher_the_iterations_it_saw_before(tmp_path):
    """The stored searcher state commits with the results it was given: after a resume, each trial's highest
    stored iteration of its current configuration (since its last PBT exploit) is what the searcher has seen."""
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, None, None)
    store.add_trials([("a", 0, {}), ("b", 1, {}), ("c", 2, {})])
    # a: iterations 1-5, then a retry from its checkpoint at 2 that ran 3 and 4 again. b: iterations 1-8, then an
    # exploit (attempt 2) that restarted it from another trial's checkpoint at 4 with a new config: 5, 6.
    store.add_results([("a", 0, i, float(i), {}) for i in range(1, 6)] + [("a", 1, i, 9.0, {}) for i in (3, 4)]
                      + [("b", 0, i, float(i), {}) for i in range(1, 9)] + [("b", 2, i, 9.0, {}) for i in (5, 6)])
    store.add_events([(8.5, "trial_restart", "b", "cpu:0", {"attempt": 2, "reason": "exploit", "from_iteration": 4})])
    settings = ExecutorSettings("exp", str(tmp_path / "exp"), "f", verbose=0)
    resumed = Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store,
                       [DeviceSpec("cpu:0", "cpu", 0, 1)], settings,
                       trials=[_trial("a", last_iteration=4), _trial("b", seq=1, last_iteration=6),
                               _trial("c", seq=2)])
    assert resumed._searcher_seen == {"a": 5, "b": 6}


def test_the_planners_move_cost_follows_trial_starts_until_a_move_is_measured(tmp_path):
    """A small trial could never save the 5 s prior: the executor's estimate of a move is a start's set-up (first
    iteration less second) until it has measured a move, so that moves can happen, and be measured, at all."""
    executor, _ = _offline_executor(tmp_path)
    trial = _trial("a")
    executor.trials["a"] = trial
    events = []

    def result(since, seconds, iteration):
        executor._measure_costs(trial, 100.0 + iteration, {"iterations_since_restore": since,
                                                          "time_this_iter_s": seconds,
                                                          "training_iteration": iteration}, events, "cpu:0")

    result(1, 0.9, 1)
    assert executor.planner.settings.move_cost_s == DEFAULT_MOVE_COST_S
    result(2, 0.2, 2)
    assert executor.planner.settings.move_cost_s == pytest.approx(0.7)
    result(3, 0.2, 3)
    assert executor.planner.settings.move_cost_s == pytest.approx(0.7) and not events  # no move, no event
    # A resize of it (a data-parallel restart) is measured into the planner's resize cost only.
    executor._move_costs.left("a", 103.0, 3, resize=True)
    result(1, 1.0, 4)
    result(2, 0.2, 5)  # at 105: 2 s for 2 iterations of 0.2 s: 1.6 s lost
    assert executor.planner.settings.resize_cost_s == pytest.approx(1.6)
    assert executor.planner.settings.move_cost_s == pytest.approx(0.3 * 0.8 + 0.7 * 0.7)  # a 2nd start, 0.8 s
    (event,) = events
    assert event[1] == "move_cost" and event[4]["kind"] == "resize" and event[4]["resize_samples"] == 1
    assert event[4]["samples"] == 0 and event[4]["resize_cost_s"] == pytest.approx(1.6)


@pytest.mark.parametrize(("status", "attempt", "placed_on", "resumed"), [
    (RUNNING, 1, (0,), True),  # restarted from a checkpoint before the budget the searcher saw: redoing iterations
    (PENDING, 1, (0,), True),  # restarted, submitted, not started yet
    (PENDING, 1, (), False),  # not submitted: its spec will carry the new budget
    # never paused at its budget: its save there raised, so the result went out as not paused (and its end is on its
    # way); promoting it ended the whole run with a FluidsalusError (a class Trainable without save_checkpoint
    # under ASHA). It is given the new budget, which its end makes moot.
    (RUNNING, 0, (0,), True),
])
def test_a_promotion_of_a_restarted_trial_gives_its_device_the_new_budget(tmp_path, status, attempt, placed_on,
                                                                          resumed):
    executor, store = _offline_executor(tmp_path)
    trial = _trial("a", status=status, attempt=attempt, placed_on=placed_on, budget=1, group_id="g1")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor.searcher.next_groups = lambda: [TrialGroup("g2", budget=3, trial_ids=["a"])]
    executor.searcher.collect_stops = lambda: []
    executor.searcher.on_trial_add = lambda *args: None
    executor._take_groups()
    assert trial.budget == 3 and trial.status == status
    calls = _sent(executor._devices[0])
    assert (("resume", ({"a": 3},)) in calls) is resumed


@pytest.mark.parametrize("reason", ["move", "preempted"])
def test_a_trial_promoted_while_its_attempt_ends_for_a_restart_restarts_to_the_new_budget(tmp_path, reason):
    """The planner's stop (a move, a preemption) reaches the trial at the report where it meets its budget, so it
    ends there instead of pausing; the searcher, which saw the result at its budget, promotes it before the end
    arrives. That is no searcher error (it made pbt_example.py fail): the restart runs to the new budget."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, OUT_STOPPED
    from fluidsalus.trialgroup.executor import _Restart

    executor, store = _offline_executor(tmp_path, n_devices=2)
    checkpoint = tmp_path / "a" / "checkpoint_000005"
    checkpoint.mkdir(parents=True)  # (a checkpoint whose folder is gone is not restarted from)
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(1,), budget=5, group_id="g1")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor._devices[0].assigned.add("a")
    executor._restarts["a"] = _Restart(reason=reason, action=MOVE)
    executor._stopping.add("a")
    # The result at the budget answers the stop: done, not paused.
    metrics = {"training_iteration": 5, "done": True, "time_this_iter_s": 0.1,
               "checkpoint_dir_name": checkpoint.name}
    executor.trials["a"].trial_dir = str(tmp_path / "a")
    executor._handle(executor._devices[0], [(EV_RESULT, "a", 0, 1.0, metrics, False, False)])
    assert trial.status == RUNNING and not trial.finished_by_rule
    executor.searcher.next_groups = lambda: [TrialGroup("g2", budget=10, trial_ids=["a"])]
    executor.searcher.collect_stops = lambda: []
    executor.searcher.on_trial_add = lambda *args: None
    executor._take_groups()
    assert trial.budget == 10 and trial.group_id == "g2" and trial.status == RUNNING
    assert not [c for c in _sent(executor._devices[0]) if c[0] == "resume"]  # its attempt is ending
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 1.1, OUT_STOPPED, None, None)])
    assert trial.status == PENDING and "a" in executor.pending and trial.attempt == 1
    assert trial.last_iteration == 5 and trial.checkpoint_path == str(checkpoint)
    row = {t.trial_id: t for t in store.trials()}["a"]
    assert (row.budget, row.group_id, row.status, row.attempt) == (10, "g2", PENDING, 1)


def test_calls_that_bring_a_device_commands_are_numbered_in_the_order_they_are_sent(tmp_path):
    executor, _ = _offline_executor(tmp_path)
    device = executor._devices[0]
    device.poll_ref = "outstanding"  # commands go at once, each as a call of its own
    executor._send(device, "submit", ["spec"])
    executor._send(device, "stop", ["a"])
    assert device.actor.calls == [("submit", (["spec"],)), ("stop", (["a"],))] and device.actor.batches == [0, 1]
    device.poll_ref = None  # its poll came back: the next command waits for the next poll, numbered then
    executor._send(device, "resume", {"a": 3})
    assert device.outbox == [("resume", ({"a": 3},))] and device.batches == 2
    executor._adopt(device, device.info)  # a new actor (after a death) counts from 0
    assert device.batches == 0


def test_a_stop_that_is_no_verdict_says_so_to_the_device(tmp_path):
    """The run's end and the planner's moves and preemptions are no verdict on a trial: its device is told, so a
    class Trainable whose save at its end is not implemented is only stopped there (a preempted paused one failed
    with the save's error instead of waiting to be promoted: a review)."""
    executor, _ = _offline_executor(tmp_path)
    trial = _trial("a")
    executor.trials["a"] = trial
    trial.placed_on = (0,)
    executor._send_stop(["a"], no_verdict=True)
    executor._send_stop(["a"])
    assert [c for c in _sent(executor._devices[0]) if c[0] == "stop"] == [("stop", (["a"], None, True)),
                                                                         ("stop", (["a"],))]


def test_a_device_command_that_raises_holds_back_no_command_after_it():
    """A batch that arrived early waited for the one numbered before it; when that one's command raised, the
    early batch stayed held until some later call came (and a command after it in its batch was dropped)."""
    import threading

    from fluidsalus.gpu.actor import _DeviceActor

    class Host:
        def __init__(self):
            self.done = []

        def submit(self, specs):
            if specs == "bad":
                raise RuntimeError("the device host is shut down")
            self.done.append(("submit", specs))

        def stop(self, ids, attempts=None):
            self.done.append(("stop", ids))

    actor = _DeviceActor.__new__(_DeviceActor)  # its ordering alone: no Ray, no trainable
    actor.host, actor._order, actor._next_batch, actor._early = Host(), threading.Lock(), 0, {}
    actor.apply([("stop", (["t1"], None))], batch=1)  # arrives first: waits for batch 0
    with pytest.raises(RuntimeError, match="shut down"):
        actor.apply([("submit", ("bad",)), ("stop", (["t0"], None))], batch=0)
    assert actor.host.done == [("stop", ["t0"]), ("stop", ["t1"])] and actor._early == {}


@pytest.mark.parametrize("by_rule", [True, False], ids=["rule_met", "rule_not_met"])
def test_a_trial_stopped_for_a_move_where_it_met_the_stop_rule_ends_instead_of_moving(tmp_path, by_rule):
    """The move's stop and the run's stop rule met at the same report: the trial is finished (a searcher's later
    promotion of it is ignored), not restarted on its new device. Its stored result says done only then: the device
    marks every result its trial is stopped at done, and a move's is not the trial's last (a CI run's rows said done
    at the move and again at the end, where Ray's say it once)."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, OUT_STOPPED
    from fluidsalus.store import TERMINATED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart

    executor, store = _offline_executor(tmp_path, n_devices=2)
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(1,), budget=8,
                   checkpoint_path=str(tmp_path / "a" / "checkpoint_000004"))
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor.searcher.on_trial_add("a", "g", {})
    executor._devices[0].assigned.add("a")
    executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)
    executor._stopping.add("a")
    metrics = {"training_iteration": 4, "done": True, "time_this_iter_s": 0.1}
    executor._handle(executor._devices[0], [(EV_RESULT, "a", 0, 1.0, metrics, False, by_rule),
                                            (EV_END, "a", 0, 1.1, OUT_STOPPED, None, None)])
    assert trial.finished_by_rule is by_rule
    (row,) = store.results()
    assert row.metrics["done"] is by_rule
    if by_rule:
        assert trial.status == TERMINATED and "a" not in executor.pending and trial.attempt == 0
    else:  # an ordinary move: it restarts on its new device
        assert trial.status == PENDING and "a" in executor.pending and trial.attempt == 1


@pytest.mark.parametrize("stop", ["for_good", "move", "none"])
def test_an_error_the_drivers_stop_raised_as_it_unwound_the_trial_is_no_failure_of_it(tmp_path, stop):
    """The device marks an error its trial raised as the driver's stop unwound it (a ``finally:`` that failed: EV_END's
    last item). Ray Tune stops such a trial's actor and never sees that error: a stop for good (its searcher's, the
    run's end) ends it TERMINATED, a move goes on from its checkpoint (as Ray's pause), each with a warning and an
    ``error_after_stop`` record, where the trial ended ERROR (retried after a move). A trial the driver did not stop
    still fails."""
    from fluidsalus.gpu.host import EV_END, OUT_ERRORED
    from fluidsalus.store import ERROR, TERMINATED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart

    executor, store, trial = _running_on_device_0(tmp_path)
    executor.settings.max_failures = 1
    if stop != "none":
        executor._stopping.add("a")
    if stop == "move":
        executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 1.1, OUT_ERRORED, "RuntimeError: cleanup failed",
                                             "Traceback ...", None, True)])
    row = {r.trial_id: r for r in store.trials()}["a"]
    if stop == "none":  # (the device's mark alone decides nothing: max_failures=1 retries it)
        assert (trial.status, trial.num_failures, trial.attempt) == (PENDING, 1, 1)
        assert not store.events("error_after_stop")
        return
    assert trial.num_failures == 0 and row.error is None
    assert not os.path.exists(os.path.join(trial.trial_dir, "error.txt"))
    if stop == "for_good":
        assert (trial.status, row.status, row.stop_reason) == (TERMINATED, TERMINATED, "stopped")
    else:  # the move goes on: restarted on its new device
        assert trial.status == PENDING and "a" in executor.pending and trial.attempt == 1
    assert trial.status != ERROR
    (record,) = store.events("error_after_stop")
    assert record.data["error"] == "RuntimeError: cleanup failed" and record.data["moved"] is (stop == "move")


@pytest.mark.parametrize("reason", ["move", "preempted", "turn", "device_died", "exploit"])
def test_the_warning_for_an_error_a_restarts_stop_raised_names_that_restart(tmp_path, caplog, reason):
    """The warning for an error a trial raised as the stop that restarts it unwound it named "a move, a preemption,
    PBT's exploit" whatever the restart was: a time slice's turn and a device's death too (a helper's review). It
    names the restart now (``store.restart_words``), and the ``error_after_stop`` record keeps its reason
    (``restart``), which ``fluidsalus inspect`` shows."""
    from fluidsalus.gpu.host import EV_END, OUT_ERRORED
    from fluidsalus.store import RESTART_WORDS
    from fluidsalus.trialgroup.executor import _Restart

    executor, store, trial = _running_on_device_0(tmp_path)
    executor._stopping.add("a")
    executor._restarts["a"] = _Restart(reason=reason, action=MOVE if reason == "move" else None,
                                       config={"lr": 2} if reason == "exploit" else None)
    with caplog.at_level("WARNING", logger="fluidsalus.trialgroup.executor"):
        executor._handle(executor._devices[0], [(EV_END, "a", 0, 1.1, OUT_ERRORED, "RuntimeError: cleanup failed",
                                                 "Traceback ...", None, True)])
    assert trial.attempt == 1 and trial.num_failures == 0  # (it goes on with its restart)
    (record,) = store.events("error_after_stop")
    assert record.data["moved"] is True and record.data["restart"] == reason
    said = [r.getMessage() for r in caplog.records if "cleanup failed" in r.getMessage()]
    assert said == [f"trial a raised as a stop to restart it ({RESTART_WORDS[reason]}) unwound it; it goes on "
                    "from a checkpoint, as a Ray Tune trial paused: RuntimeError: cleanup failed"]
    assert ("preemption" in said[0]) is (reason == "preempted") and ("exploit" in said[0]) is (reason == "exploit")


def _running_on_device_0(tmp_path) -> tuple[Any, Any, Any]:
    """An offline executor of two devices with trial ``a`` RUNNING on device 0 (planned on device 1 next), with a
    checkpoint and its folder, added to its searcher: the executor, its store and the trial."""
    executor, store = _offline_executor(tmp_path, n_devices=2)
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(1,), budget=8,
                   checkpoint_path=str(tmp_path / "a" / "checkpoint_000004"))
    trial.trial_dir = str(tmp_path / "a")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor.searcher.on_trial_add("a", "g", {})
    executor._devices[0].assigned.add("a")
    return executor, store, trial


def _placed_with_lr_1(tmp_path, status: str) -> tuple[Any, Any, Any]:
    """An offline executor with trial ``a`` (config ``{"lr": 1}``) placed on device 0 in ``status``, added to its
    searcher: the executor, its store and the trial."""
    executor, store = _offline_executor(tmp_path)
    trial = _trial("a", status=status, placed_on=(0,), devices=(0,), budget=8)
    trial.config = {"lr": 1}
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor.searcher.on_trial_add("a", "g", {"lr": 1})
    return executor, store, trial


@pytest.mark.parametrize("by_rule", [True, False], ids=["rule_met", "rule_not_met"])
def test_a_trial_that_met_the_stop_rule_while_its_exploit_was_pending_ends_instead_of_exploiting(tmp_path, by_rule):
    """PBT's exploit was taken (the trial's attempt is stopped to restart on the source's checkpoint with a new
    configuration), and the trial's result met the run's stop rule before its end arrived: the exploit was not
    dropped (a move's is), so the finished trial restarted on the new configuration past its stop rule, its results
    hidden from its searcher (h92's F6). Now the exploit is cancelled (the searcher is told, before it hears of the
    trial's end, so PBT reverts it) and the trial ends there; without the stop rule it exploits as before."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, OUT_STOPPED
    from fluidsalus.store import TERMINATED
    from fluidsalus.trialgroup.executor import _Restart

    executor, store, trial = _placed_with_lr_1(tmp_path, RUNNING)
    told: list[tuple[str, str]] = []
    executor.searcher.cancel_exploit = lambda trial_id: told.append(("cancel_exploit", trial_id))
    executor.searcher.on_trial_complete = lambda trial_id, *args, **kwargs: told.append(("complete", trial_id))
    executor._devices[0].assigned.add("a")
    executor._restarts["a"] = _Restart(reason="exploit", config={"lr": 2}, iteration=4,
                                       checkpoint_path=str(tmp_path / "b" / "checkpoint_000004"))
    executor._stopping.add("a")  # (_stop_exploited's stop)
    metrics = {"training_iteration": 5, "done": True, "time_this_iter_s": 0.1}
    executor._handle(executor._devices[0], [(EV_RESULT, "a", 0, 1.0, metrics, False, by_rule)])
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 1.1, OUT_STOPPED, None, None)])
    if by_rule:
        assert (trial.status, trial.attempt, trial.config) == (TERMINATED, 0, {"lr": 1})
        assert "a" not in executor.pending and not store.events("trial_restart")
        assert told == [("cancel_exploit", "a"), ("complete", "a")]
    else:  # the exploit goes ahead
        assert (trial.status, trial.attempt, trial.config) == (PENDING, 1, {"lr": 2}) and "a" in executor.pending
        assert "cancel_exploit" not in {what for what, _ in told}


def test_a_trial_restarted_on_a_new_configuration_gives_its_searcher_its_results_again(tmp_path):
    """``_requeue`` forgot the results the searcher had seen for a new configuration (an exploit), but not that the
    searcher was told the trial's end at a result (``_told_end``): a trial restarted on a new configuration then
    had every result of it hidden from its searcher, and its end never told (h92's F6). The new configuration is a
    new run for the searcher: its results are given, and its end is told."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, EV_START, OUT_COMPLETED, OUT_STOPPED
    from fluidsalus.searchers._base import Decision
    from fluidsalus.trialgroup.executor import RESTART_EXPLOIT, _Restart

    executor, store, trial = _placed_with_lr_1(tmp_path, PAUSED)
    told: list[tuple[str, object]] = []
    executor.searcher.on_result = lambda trial_id, result: told.append(
        ("result", result["training_iteration"])) or Decision.CONTINUE
    executor.searcher.on_trial_complete = lambda trial_id, *args, **kwargs: told.append(("complete", trial_id))
    device = executor._devices[0]
    device.assigned.add("a")
    executor._told_end.add("a")  # (the searcher was told the end of its old configuration at a result)
    executor._restarts["a"] = _Restart(reason=RESTART_EXPLOIT, config={"lr": 2}, iteration=4,
                                       checkpoint_path=str(tmp_path / "b" / "checkpoint_000004"))
    executor._handle(device, [(EV_END, "a", 0, 1.0, OUT_STOPPED, None, None)])
    assert (trial.attempt, trial.config) == (1, {"lr": 2})
    executor.pending.discard("a")
    trial.placed_on = (0,)
    device.assigned.add("a")
    executor._handle(device, [(EV_START, "a", 1, 1.1),
                              (EV_RESULT, "a", 1, 1.2, {"training_iteration": 5, "time_this_iter_s": 0.1}, False,
                               False),
                              (EV_END, "a", 1, 1.3, OUT_COMPLETED, None, None)])
    assert told == [("result", 5), ("complete", "a")]


def test_the_progress_views_stopped_count_is_the_same_live_and_after_a_resume(tmp_path):
    """The live view counted a queued trial its searcher stopped before it began as "stopped"; a resumed run's
    recount leaves out trials that never started, so the count went down on resume. A trial stopped on its device
    counts in both."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_STOPPED
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings

    executor, store = _offline_executor(tmp_path)
    ran, queued = _trial("ran", status=RUNNING, placed_on=(0,), devices=(0,)), _trial("queued", seq=1)
    _queue(executor, store, ran, queued)
    executor.pending.discard("ran")
    executor._devices[0].assigned.add("ran")
    executor._handle(executor._devices[0], [(EV_START, "ran", 0, 1.0)])
    executor._tell_stopped(executor._stop_trials(["ran", "queued"]))  # (the searcher's stops)
    executor._handle(executor._devices[0], [(EV_END, "ran", 0, 1.1, OUT_STOPPED, None, None)])
    assert {t.trial_id: t.status for t in store.trials()} == {"ran": "TERMINATED", "queued": "TERMINATED"}
    resumed = Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store,
                       executor.device_specs, ExecutorSettings("exp", str(tmp_path / "exp"), "f", verbose=0),
                       trials=list(executor.trials.values()))
    assert executor._snapshot()["stopped"] == resumed._snapshot()["stopped"] == 1


def test_a_resumed_trial_lets_go_of_the_stored_checkpoints_after_the_one_it_resumes_from(tmp_path):
    """A resumed trial whose newest stored checkpoint's folder was gone resumed from the one before (_load_trials),
    but the stored row of the gone one stayed: the attempt wrote that folder again, and it was listed twice, once
    with the lost attempt's metrics, for retention and ``best_checkpoints`` (h171's F1). It goes once the attempt
    starts, as after a restart within a run."""
    from fluidsalus.gpu.host import EV_START
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings

    executor, store = _offline_executor(tmp_path)
    store.add_trials([("a", 0, {})], group_id="g")
    for iteration in (3, 4):
        store.add_checkpoint("a", iteration, str(tmp_path / f"checkpoint_{iteration:06d}"), {"acc": iteration})
    store.update_trial("a", status=RUNNING)
    resumed = Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store,
                       executor.device_specs, ExecutorSettings("exp", str(tmp_path / "exp"), "f", verbose=0),
                       trials=[_trial("a", status=RUNNING, last_iteration=3, attempt=1)])  # (checkpoint_000004 gone)
    device = executor._devices[0]  # (offline: the resumed run has started none)
    device.assigned.add("a")
    assert [c["iteration"] for c in store.checkpoints("a")] == [3, 4]  # (until its attempt starts)
    resumed._handle(device, [(EV_START, "a", 1, 1.0)])
    assert [c["iteration"] for c in store.checkpoints("a")] == [3]


def test_verbose_2_says_a_trial_that_never_started_never_started(tmp_path, capsys):
    """With ``verbose=2`` a trial the counts call never started printed "stopped after 0 iterations", as one that ran
    (h149's F5): the trial whose start found the search over (``started_trial`` False, the Optuna front end's after
    ``study.stop()``) and a queued trial its searcher stopped. A trial stopped on its device still says so."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_COMPLETED, OUT_STOPPED

    executor, store = _offline_executor(tmp_path, n_devices=2)
    executor.settings.verbose = 2
    _placed_trial(executor, store, "ran", devices=(0,))
    _placed_trial(executor, store, "over", devices=(1,))
    _queue(executor, store, _trial("queued", seq=2))
    executor.searcher.started_trial = lambda trial_id: trial_id != "over"  # (its start found the search over)
    executor._handle(executor._devices[0], [(EV_START, "ran", 0, 1.0)])
    executor._handle(executor._devices[1], [(EV_START, "over", 0, 1.0)])
    executor._tell_stopped(executor._stop_trials(["ran", "queued"]))  # (the searcher's stops)
    executor._handle(executor._devices[0], [(EV_END, "ran", 0, 1.1, OUT_STOPPED, None, None)])
    executor._handle(executor._devices[1], [(EV_END, "over", 0, 1.1, OUT_COMPLETED, None, None)])
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == ["Trial over never started", "Trial queued never started",
                             "Trial ran stopped after 0 iterations"]
    snapshot = executor._snapshot()
    assert (snapshot["stopped"], snapshot["never_started"]) == (1, 2)  # (the counts the lines agree with)


def test_a_trials_end_lines_name_it_as_ray_does(tmp_path, capsys):
    """"Trial <id> errored after N iterations" (stderr, every verbose) and verbose=2's end lines named a trial by id;
    Ray's name it ``str(trial)``: ``trial_name_creator``'s name, else ``<trainable>_<id>`` (h156's and h148's notes).
    The run's ``trial_name`` names them now, as the errored-trials table; a trial it gives no name keeps its id."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_COMPLETED, OUT_ERRORED

    executor, store = _offline_executor(tmp_path, n_devices=2)
    executor.settings.verbose = 2
    executor.settings.trial_name = lambda trial_id: None if trial_id == "plain" else f"train_{trial_id}"
    _placed_trial(executor, store, "ran", devices=(0,))
    _placed_trial(executor, store, "bad", devices=(1,))
    _queue(executor, store, _trial("queued", seq=2))
    _queue(executor, store, _trial("plain", seq=3))
    executor._names.update({t: f"train_{t}" for t in ("ran", "bad", "queued")})  # (as their creation keeps them)
    executor._handle(executor._devices[0], [(EV_START, "ran", 0, 1.0)])
    executor._handle(executor._devices[1], [(EV_START, "bad", 0, 1.0)])
    executor._tell_stopped(executor._stop_trials(["queued", "plain"]))
    executor._handle(executor._devices[0], [(EV_END, "ran", 0, 1.1, OUT_COMPLETED, None, None)])
    executor._handle(executor._devices[1], [(EV_END, "bad", 0, 1.1, OUT_ERRORED, "ValueError: no", "trace")])
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == ["Trial plain never started", "Trial train_queued never started",
                                        "Trial train_ran finished after 0 iterations"]
    assert err.startswith("Trial train_bad errored after 0 iterations: ValueError: no"), err


def test_the_progress_lines_best_keeps_an_integer_metric_whole(tmp_path):
    """The live best was kept as float(): an integer metric showed as ``1.23457e+06`` on the progress line where the
    summary (and Ray's table) show ``1234567``, and one above 2**53 lost its last digits (h148's F2, live part)."""
    import numpy as np

    from fluidsalus.progress import Progress

    executor, _ = _offline_executor(tmp_path)
    executor.settings.metric, executor.settings.mode = "m", "max"
    progress = Progress(1, "m", "max", None, live=False)
    for value, shown in ((1234567, "1234567"), (2**53 + 1, "9007199254740993"), (np.int64(7), "7"), (0.5, "0.5")):
        executor._last_values.clear()
        executor._note_last_value("t", {"m": value})
        assert f"best m={shown} (max)" in progress.line(executor._snapshot())


def test_the_progress_lines_best_takes_an_integer_too_large_for_a_float(tmp_path):
    """``math.isfinite`` of an int above ~1e308 raised ``OverflowError`` in the live best (h148's and h156's
    note): it is compared as Python's int, beside floats too."""
    from fluidsalus.progress import Progress

    executor, _ = _offline_executor(tmp_path)
    executor.settings.metric, executor.settings.mode = "m", "max"
    progress = Progress(1, "m", "max", None, live=False)
    for trial_id, value in (("a", 0.5), ("b", 10**400), ("c", float("inf"))):
        executor._note_last_value(trial_id, {"m": value})
    assert f"best m={10**400} (max)" in progress.line(executor._snapshot())
    executor.settings.mode = "min"
    assert executor._snapshot()["best"] == 0.5


def test_a_metric_too_large_for_a_float_is_refused_as_such(tmp_path):
    """An int metric above ~1e308 was refused as ``must be a number: ... reported 1000...0 (int)``, its 401 digits
    written out (h182's ``bigint_run.py``; Ray's run fails on it too, in its own ``isnan``). The refusal says why."""
    from fluidsalus.errors import ConfigError

    executor, _ = _offline_executor(tmp_path)
    executor.settings.metric = "m"
    executor._check_metric("t", {"m": 2**1023})  # (a float holds it)
    with pytest.raises(ConfigError, match=r"metric='m' must be a number a float holds .*: trial t reported an int of "
                                          r"401 digits, above a float's largest \(1\.79769e\+308\)$"):
        executor._check_metric("t", {"m": 10**400})


def test_the_metric_refusals_name_the_trial_as_the_runs_lines(tmp_path):
    """The refusals of a missing or non-numeric metric named the trial by id (``trial 90784_00000 reported ...``)
    where the run's lines name it ``train_90784_00000`` (h188's F7): they use the run's name now."""
    from fluidsalus.errors import ConfigError

    executor, _ = _offline_executor(tmp_path)
    executor.settings.metric = "m"
    executor.trials["t"] = _trial("t")
    executor._names["t"] = "train_t"
    for result, refusal in (({"x": 1}, "is not in the results: trial train_t reported"),
                            ({"m": "low"}, "must be a number: trial train_t reported 'low'"),
                            ({"m": 10**400}, "must be a number a float holds .*: trial train_t reported an int")):
        with pytest.raises(ConfigError, match=refusal):
            executor._check_metric("t", result)


def test_the_fail_fast_raise_error_and_the_error_file_name_the_trial_as_the_runs_lines(tmp_path, capsys):
    """The ``fail_fast="raise"`` error (``Trial <id> failed: ...``) and the trial's ``error.pkl`` named it by id where
    the run's lines and its errored-trials table name it ``train_<id>`` (h167's note). They use the run's name now,
    as the trial's ``Result.error``."""
    import pickle

    from fluidsalus.gpu.host import EV_END, EV_START, OUT_ERRORED

    executor, store = _offline_executor(tmp_path)
    executor.settings.trial_name = lambda trial_id: f"train_{trial_id}"
    _placed_trial(executor, store, "bad", devices=(0,))
    executor._names["bad"] = "train_bad"  # (as the trial's creation keeps it: _placed_trial places it directly)
    executor._handle(executor._devices[0], [(EV_START, "bad", 0, 1.0)])
    executor._handle(executor._devices[0], [(EV_END, "bad", 0, 1.1, OUT_ERRORED, "ValueError: no", "trace")])
    assert executor._first_error == "Trial train_bad failed: ValueError: no\ntrace"
    with open(os.path.join(executor.trials["bad"].trial_dir, "error.pkl"), "rb") as f:
        assert str(pickle.load(f)).startswith("Trial train_bad failed: ValueError: no")


@pytest.mark.parametrize("one_batch", [True, False], ids=["one_batch", "two_batches"])
def test_a_failure_right_after_the_result_its_searcher_stops_the_trial_at_is_not_retried(tmp_path, one_batch):
    """A trial's result, which its searcher STOPs it at, and its failure right after it, came in one device batch:
    the failure was judged before the searcher decided, so the trial was retried (one failure more, a restart, its
    error file) and the STOP then ended the retry unstarted: ``TERMINATED`` with the failure's error
    (h110's stop_and_error_offline.py). Ray handles the result first (its trial waits in its report). Now the
    searcher decides first, as when the two come in two batches: a failure on the way out of a stopped trial,
    not retried (docs/compatibility.md: it ends ``ERROR``)."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, OUT_ERRORED
    from fluidsalus.searchers._base import Decision

    executor, store = _offline_executor(tmp_path)
    executor.settings.max_failures = 1
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(0,))
    trial.trial_dir = str(tmp_path / "a")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor.searcher.on_trial_add("a", "g", {})
    executor.searcher.on_result = lambda trial_id, result: Decision.STOP
    executor._devices[0].assigned.add("a")
    batch = [(EV_RESULT, "a", 0, 1.0, {"training_iteration": 2, "time_this_iter_s": 0.1}, False, False),
             (EV_END, "a", 0, 1.1, OUT_ERRORED, "RuntimeError: boom", "Traceback ...\nRuntimeError: boom")]
    for part in [batch] if one_batch else [batch[:1], batch[1:]]:
        executor._handle(executor._devices[0], part)
    row = {r.trial_id: r for r in store.trials()}["a"]
    assert (trial.status, trial.num_failures, trial.attempt) == ("ERROR", 0, 0)
    assert (row.status, row.num_failures, row.error) == ("ERROR", 0, "RuntimeError: boom")
    assert not store.events("trial_restart") and "a" not in executor.pending


def test_a_failure_after_a_result_whose_callback_raised_in_the_same_batch_is_still_recorded(tmp_path):
    """The batch is split so that the searcher decides on the result before the failure is judged; when handling
    the result raised (an engine callback's ``on_trial_result``), the failure after it was never stored: the trial
    stayed RUNNING with no failure counted and no error file (a review's s3_split_lost_end.py)."""
    from fluidsalus.callbacks import Callback
    from fluidsalus.gpu.host import EV_END, EV_RESULT, OUT_ERRORED

    class Raises(Callback):
        def on_trial_result(self, trial_id: str, result: dict) -> None:
            raise RuntimeError("a callback that fails")

    executor, store = _offline_executor(tmp_path)
    executor.settings.max_failures = 1
    executor.settings.callbacks = [Raises()]
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(0,))
    trial.trial_dir = str(tmp_path / "a")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor.searcher.on_trial_add("a", "g", {})
    executor._devices[0].assigned.add("a")
    batch = [(EV_RESULT, "a", 0, 1.0, {"training_iteration": 1, "time_this_iter_s": 0.1}, False, False),
             (EV_END, "a", 0, 1.1, OUT_ERRORED, "RuntimeError: boom", "Traceback ...\nRuntimeError: boom")]
    with pytest.raises(RuntimeError, match="a callback that fails"):
        executor._handle(executor._devices[0], batch)
    row = {r.trial_id: r for r in store.trials()}["a"]
    assert row.status != RUNNING and row.num_failures == 1
    assert "RuntimeError: boom" in (tmp_path / "a" / "error.txt").read_text()


@pytest.mark.parametrize("stopped", [False, True], ids=["placed_again", "stopped_meanwhile"])
def test_a_withdrawn_trial_goes_back_to_the_queue_unless_its_searcher_stopped_it_meanwhile(tmp_path, stopped):
    """A device's ``withdrawn`` end: the trial is queued again on a new attempt, with no device of its own (the next
    plan places it), and the searcher hears nothing; but a trial the searcher stopped before the end arrived ends
    stopped, as it would have."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_WITHDRAWN
    from fluidsalus.store import TERMINATED

    executor, store = _offline_executor(tmp_path, n_devices=2)
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(0,))
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor.searcher.on_trial_add("a", "g", {})
    executor._devices[0].assigned.add("a")
    executor._handle(executor._devices[0], [(EV_START, "a", 0, 1.0)])
    if stopped:
        executor._stop_trials(["a"])
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 1.1, OUT_WITHDRAWN, None, None)])
    assert "a" not in executor._devices[0].assigned and not trial.placed_on
    row = {t.trial_id: t for t in store.trials()}["a"]
    if stopped:
        assert trial.status == TERMINATED and "a" not in executor.pending and trial.attempt == 0
        assert row.stop_reason == "stopped" and not store.events("trial_restart")
    else:
        assert trial.status == PENDING and "a" in executor.pending and trial.attempt == 1 and not trial.devices
        assert (row.status, row.attempt) == (PENDING, 1)
        (restart,) = store.events("trial_restart")
        assert restart.data["reason"] == "withdrawn" and restart.device == "cpu:0"
        assert not store.events("trial_end")


def _queue(executor, store, *trials):
    store.add_trials([(t.trial_id, t.seq, t.config) for t in trials], group_id="g", budget=None)
    for t in trials:
        executor.trials[t.trial_id] = t
        executor.pending.add(t)


def test_a_queued_trial_that_fits_no_device_ends_with_an_error_naming_both_sizes(tmp_path):
    executor, store = _offline_executor(tmp_path, capacity=GiB)
    _queue(executor, store, _trial("huge", p_bytes=GiB, t_bytes=GiB), _trial("small", seq=1))
    executor._dispatch()
    huge = executor.trials["huge"]
    assert huge.status == "ERROR"
    assert "needs P+T = 2147483648 bytes" in huge.error and f"largest device holds {GiB} bytes" in huge.error
    row = {t.trial_id: t for t in store.trials()}["huge"]
    assert row.status == "ERROR" and row.error == huge.error
    submitted = [spec.trial_id for name, (specs,) in _sent(executor._devices[0]) if name == "submit"
                 for spec in specs]
    assert submitted == ["small"]  # the other trial runs


def test_dispatch_submits_starts_then_one_prefetch_per_full_device_and_records_place_events(tmp_path):
    executor, store = _offline_executor(tmp_path, n_devices=2, slots=1, capacity=16 * GiB)
    _queue(executor, store, *(_trial(f"t{i}", seq=i, budget=[3, 9, 5, 7, 1][i]) for i in range(5)))
    executor._dispatch()
    placed = [(e.trial_id, e.device, e.data["action"]) for e in store.events("place")]
    # Longest first: t1 (9) and t3 (7) start, one per device; t2 (5) and t0 (3) are prefetched, one per device.
    assert placed == [("t1", "cpu:0", "start"), ("t3", "cpu:1", "start"), ("t2", "cpu:0", "prefetch"),
                      ("t0", "cpu:1", "prefetch")]
    assert list(executor.pending) == ["t4"]
    executor._dispatch()  # nothing changed: no new plan, nothing sent
    assert len(store.events("place")) == 4 and executor._plans == 1


def _retry_prefetched_behind_b(tmp_path) -> tuple[Any, Any, Any, Any]:
    """Two 1-slot devices, the second still starting: ``a`` started and failed at once (``max_failures=1``), ``b``,
    prefetched behind it, began in its slot and reported (no checkpoint), and ``a``'s retry is queued. Returns the
    executor, its store and the two devices."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, EV_START, OUT_ERRORED

    executor, store = _offline_executor(tmp_path, n_devices=2)
    executor.settings.max_failures = 1
    d0, d1 = executor._devices
    d1.alive = False  # (its actor still starting: _start_devices)
    _queue(executor, store, _trial("a"), _trial("b", seq=1))
    for tid in ("a", "b"):
        executor.searcher.on_trial_add(tid, "g", {})
    executor._dispatch()
    assert [(e.trial_id, e.data["action"]) for e in store.events("place")] == [("a", "start"), ("b", "prefetch")]
    metrics = {"training_iteration": 1, "time_this_iter_s": 0.2, "time_total_s": 0.2}
    executor._handle(d0, [(EV_START, "a", 0, 0.5), (EV_END, "a", 0, 0.6, OUT_ERRORED, "boom", None),
                          (EV_START, "b", 0, 0.6), (EV_RESULT, "b", 0, 0.8, metrics, False, False)])
    return executor, store, d0, d1


def test_a_retry_whose_slot_a_prefetched_trial_took_waits_and_goes_to_a_device_that_joins(tmp_path):
    """Two 1-slot devices, the second still starting: ``a`` starts, ``b`` is prefetched behind it; ``a`` fails and ``b``
    begins in its slot. The retry kept its device and began beside ``b``, past the device's one slot, where the two
    took it in turns; when the second device joined, ``b`` (reported, no checkpoint) could not move and ``a``'s retry
    (reported too) could not either, so the new device idled to the end (CI's hang of a fail_fast test; a run twice
    as long). The retry now waits in the queue and is prefetched (it does not begin), and when the device joins it is
    withdrawn to it while ``b`` runs on."""
    executor, store, d0, d1 = _retry_prefetched_behind_b(tmp_path)
    a = executor.trials["a"]
    assert (a.attempt, a.devices, "a" in executor.pending) == (1, (), True)  # its slot is b's: it waits
    executor._dispatch()
    assert [(e.trial_id, e.device, e.data["action"]) for e in store.events("place")][2:] == [("a", "cpu:0", "prefetch")]
    (submit,) = [specs for name, (specs,) in _sent(d0) if name == "submit"][1:]
    assert [(spec.trial_id, spec.prefetched) for spec in submit] == [("a", True)]  # it waits behind b, unbegun
    d1.alive, executor._dirty = True, True  # the second device joins (_join)
    executor._dispatch()
    (withdraw,) = store.events("plan_withdraw")
    assert (withdraw.trial_id, withdraw.data["to"]) == ("a", ["cpu:1"])
    assert not store.events("plan_refused")  # (b, which cannot restart, keeps device 0)


@pytest.mark.parametrize("answer", ["withdrawn", "declined"])
def test_a_plan_while_a_withdrawal_is_unanswered_records_no_refusal_unless_the_device_declines_it(tmp_path, answer):
    """h245's F2: once ``a``'s withdrawal to the device that joined is asked, its demand says it cannot restart (it
    may have begun) while it is still on device 0, so a plan before device 0's answer (any news re-plans) held
    ``b``'s move to the free device: a ``plan_refused`` that ``fluidsalus inspect`` counted, though device 0 then gave
    ``a`` back, which went to the free device, and nothing was held. Such a plan records no refusal now; one whose
    withdrawal the device declined (``a`` had begun: it reports) records the refusal that then holds."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_WITHDRAWN

    executor, store, d0, d1 = _retry_prefetched_behind_b(tmp_path)
    executor._dispatch()  # the retry is prefetched behind b
    d1.alive, executor._dirty = True, True  # the second device joins (_join)
    executor._dispatch()
    assert [e.trial_id for e in store.events("plan_withdraw")] == ["a"]
    executor._dirty = True  # (b's next result, say)
    executor._dispatch()
    assert not store.events("plan_refused")
    if answer == "withdrawn":
        executor._handle(d0, [(EV_END, "a", 1, 1.0, OUT_WITHDRAWN, None, None)])
        executor._dispatch()
        assert [(e.trial_id, e.device) for e in store.events("place")][-1] == ("a", "cpu:1")
        assert not store.events("plan_refused")
        return
    executor._handle(d0, [(EV_START, "a", 1, 1.0), _result_event(1, 1)])  # it had begun: no withdrawal comes
    executor._dirty = True
    executor._dispatch()
    assert [(e.data["reason"], e.data["from"], e.data["to"]) for e in store.events("plan_refused")] == [
        ("no checkpoint", "cpu:0", ["cpu:1"])]


@pytest.mark.parametrize(("slots", "kept"), [(1, ()), (2, (0,))], ids=["slot_taken", "slot_free"])
def test_an_exploit_whose_slot_a_prefetched_trial_took_waits_in_the_queue(tmp_path, slots, kept):
    """PBT's exploit of ``a``, paused at its perturbation point, while ``b``, prefetched behind it on a 1-slot device,
    began at that pause: the exploit gives the device up and waits in the queue, as a retry does (kept, it began
    beside ``b``, past the slot). On a device of two slots, where ``b`` started beside ``a``, one slot is ``a``'s:
    it restarts in place."""
    from fluidsalus.gpu.host import EV_RESULT, EV_START
    from fluidsalus.store import RESTART_EXPLOIT
    from fluidsalus.trialgroup.executor import _Restart

    executor, store = _offline_executor(tmp_path, n_devices=1, slots=slots)
    (d0,) = executor._devices
    _queue(executor, store, _trial("a"), _trial("b", seq=1))
    for tid in ("a", "b"):
        executor.searcher.on_trial_add(tid, "g", {})
    executor._dispatch()
    assert [e.data["action"] for e in store.events("place")] == ["start", "prefetch" if slots == 1 else "start"]
    metrics = {"training_iteration": 1, "time_this_iter_s": 0.2, "time_total_s": 0.2}
    executor._handle(d0, [(EV_START, "a", 0, 0.5), (EV_RESULT, "a", 0, 0.8, metrics, False, False),
                          (EV_START, "b", 0, 0.9)])
    a = executor.trials["a"]
    executor._unplace(a, 1.0)  # (its attempt ends for the exploit)
    executor._requeue(a, _Restart(reason=RESTART_EXPLOIT, iteration=1), 1.0, "cpu:0", None, [])
    assert (a.attempt, a.devices, "a" in executor.pending) == (1, kept, True)


# ------------------------------------------------------------------------------------------ real runs


def _events(grid, kind: str):
    return ExperimentStore.open(grid.experiment_path, readonly=True).events(kind)


class _Budgets(fluidsalus.searchers.BaseSearcher):
    """One group per budget, all proposed at once in the order given; trials pause at their budget and are
    stopped at the end of the run."""

    def __init__(self, budgets):
        self.budgets, self.done = budgets, False

    def next_groups(self):
        if self.done:
            return []
        self.done = True
        return [TrialGroup(f"g{i}", [{"budget": b}], budget=b) for i, b in enumerate(self.budgets)]

    def is_finished(self):
        return self.done


def counting(config):
    for _ in range(100):
        time.sleep(0.002)
        fluidsalus.report({"v": 1.0})


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("limit", [1, None], ids=["one_at_a_time", "with_prefetch"])
def test_after_a_trial_ends_the_longest_queued_trial_starts_first(storage, limit):
    grid = fluidsalus.run(counting, searcher=_Budgets([2, 8, 4, 1]), devices=1, cpus_per_device=1,
                          max_concurrent_trials=limit, storage_path=storage, name=f"order{limit}", verbose=0)
    assert grid.num_errors == 0
    budget_of = {r.trial_id: r.config["budget"] for r in grid}
    started = [budget_of[e.trial_id] for e in _events(grid, "trial_start")]
    assert started == [8, 4, 2, 1]  # arrival order was 2, 8, 4, 1
    assert sorted(r.metrics["training_iteration"] for r in grid) == [1, 2, 4, 8]
    if limit == 1:  # one at a time: each starts only after the one before it paused (its last result)
        reader = ExperimentStore.open(grid.experiment_path, readonly=True)
        starts = [(e.ts, e.trial_id) for e in _events(grid, "trial_start")]
        for (_, before), (ts, _) in zip(starts, starts[1:], strict=False):
            assert ts >= max(r.ts for r in reader.results(before))


def steps(config):
    for _ in range(config["n"]):
        time.sleep(0.005)
        fluidsalus.report({"n": config["n"]})


@pytest.mark.usefixtures("ray_cluster")
def test_more_trials_than_fit_wait_and_drain(storage):
    """Ten trials on two single-slot devices: each device computes one and holds at most one prefetched, and
    every trial runs to the end. (Both devices are up when the run begins: with the second still starting on a
    loaded machine, the first ran every trial.)"""
    start_devices_warm(storage, devices=2, cpus_per_device=1)
    grid = fluidsalus.run(steps, {"n": fluidsalus.grid_search([3, 5, 7, 4, 6, 8, 3, 5, 4, 6])}, devices=2,
                          cpus_per_device=1, storage_path=storage, name="drain", verbose=0)
    assert len(grid) == 10 and grid.num_errors == 0
    assert all(r.metrics["training_iteration"] == r.config["n"] for r in grid)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    # a prefetched trial may be withdrawn (before it began) to the device that frees first: it leaves its device
    withdrawn = reader.events("trial_restart")
    assert all(e.data["reason"] == "withdrawn" for e in withdrawn)
    timeline = sorted([(e.ts, 1, e.device) for e in reader.events("place")] +
                      [(e.ts, -1, e.device) for e in reader.events("trial_end") + withdrawn])
    held: dict[str, int] = {}
    peak: dict[str, int] = {}
    for _, delta, device in timeline:
        held[device] = held.get(device, 0) + delta
        peak[device] = max(peak.get(device, 0), held[device])
    assert peak == {"cpu:0": 2, "cpu:1": 2}  # one slot plus one prefetched trial, never more


@pytest.mark.usefixtures("ray_cluster")
def test_place_events_record_the_planners_decisions(storage):
    start_devices_warm(storage, devices=2, cpus_per_device=1)  # (both up at the start: the first two spread)
    grid = fluidsalus.run(steps, {"n": fluidsalus.grid_search([4, 4, 4])}, devices=2, cpus_per_device=1,
                          storage_path=storage, name="placed", verbose=0)
    places = _events(grid, "place")
    assert all(e.data["attempt"] == 0 for e in places[:3])
    first = places[:2]  # three trials, two devices: the planner spreads the first two, one per device
    assert {e.device for e in first} == {"cpu:0", "cpu:1"}
    assert [e.data["action"] for e in first] == ["start", "start"] and first[0].data["regime"] == INTRA
    assert places[2].data["action"] == "prefetch"  # both devices full: the third waits on one of them
    # It waits there without running. If the other device frees first, the planner spreads it there: it has not
    # begun, so it is withdrawn and placed again, never started over after running; if its own device frees
    # first, it begins there.
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    restarts = reader.events("trial_restart")
    assert all(e.data["reason"] == "withdrawn" and e.trial_id == places[2].trial_id for e in restarts)
    assert [(e.trial_id, e.data["attempt"]) for e in places[3:]] == [(places[2].trial_id, 1)] * len(restarts)
    assert all(e.data["reason"] == REFUSED_NO_CHECKPOINT for e in reader.events("plan_refused"))


def checkpointed(config):
    start = 0
    if fluidsalus.get_checkpoint() is not None:
        with fluidsalus.get_checkpoint().as_directory() as d:
            start = int(open(os.path.join(d, "it")).read())
    for it in range(start + 1, config["n"] + 1):
        time.sleep(0.01)
        d = os.path.join(fluidsalus.get_context().get_trial_dir(), f"s{it}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "it"), "w") as f:
            f.write(str(it))
        fluidsalus.report({"it": it, "start": start}, checkpoint=fluidsalus.Checkpoint.from_directory(d))


@pytest.mark.usefixtures("ray_cluster")
def test_a_sweep_that_fits_its_device_never_restarts_a_trial(storage):
    grid = fluidsalus.run(checkpointed, {"n": fluidsalus.grid_search([5, 9, 6, 8, 7, 5])}, devices=1,
                          storage_path=storage, name="steady", verbose=0)
    assert grid.num_errors == 0 and all(r.metrics["it"] == r.config["n"] for r in grid)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert not reader.events("trial_restart") and not reader.events("plan_move")
    assert all(t.attempt == 0 for t in reader.trials())


def unevenly(config):
    """Trial 'short' ends early; 'a' and 'b' run long. Checkpoints every step when config says so. Each step asks
    the driver something (as an Optuna objective does at each report), so a trial prefetched behind another
    begins while that one waits for the answer, and the two then time-slice their lane. With config "reads"
    False it never asks for its checkpoint (as Ray's XGBoost example, whose callback saves)."""
    start = 0
    if config["reads"] and fluidsalus.get_checkpoint() is not None:
        with fluidsalus.get_checkpoint().as_directory() as d:
            start = int(open(os.path.join(d, "it")).read())
    for it in range(start + 1, config["n"] + 1):
        time.sleep(0.02)
        checkpoint = None
        if config["checkpoint"]:
            d = os.path.join(fluidsalus.get_context().get_trial_dir(), f"s{it}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "it"), "w") as f:
                f.write(str(it))
            checkpoint = fluidsalus.Checkpoint.from_directory(d)
        fluidsalus.report({"it": it, "start": start}, checkpoint=checkpoint)
        fluidsalus.session.call_driver("tick")


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize(("checkpoint", "reads"), [(True, True), (False, True), (True, False)],
                         ids=["checkpointed", "no_checkpoint", "checkpoint_never_read"])
def test_a_trial_moves_only_from_a_checkpoint(storage, checkpoint, reads):
    """Two single-slot devices, three trials: 'a' and 'short' start, 'b' is prefetched behind 'a', begins while
    'a' waits for the driver and time-slices its lane. When 'short' ends, the planner spreads 'b' to the free
    device. With checkpoints it moves there at its next boundary and resumes from its checkpoint; without, it
    stays (a restart would lose its work, so the planner does not plan one). So it does with checkpoints that it
    never asks for: restarted, it would start over while its iterations went on from the checkpoint's (it moved,
    and a helper's ASHA sweep judged an XGBoost trial of 4 rounds at its rung 8)."""
    space = {"n": fluidsalus.grid_search([40, 8, 40]), "checkpoint": checkpoint, "reads": reads}
    start_devices_warm(storage, devices=2, cpus_per_device=1)  # (both up at the start: 'a' and 'short' spread)
    grid = fluidsalus.run(unevenly, space, devices=2, cpus_per_device=1, storage_path=storage,
                          name=f"move{checkpoint}{reads}", verbose=0,
                          call_handler=lambda trial_id, method, args: None)
    assert grid.num_errors == 0 and sorted(r.metrics["it"] for r in grid) == [8, 40, 40]
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    trials = {r.config["n"]: r for r in grid}
    restarts = reader.events("trial_restart")
    planner = fluidsalus.inspect(grid.experiment_path).planner  # what `fluidsalus inspect` shows of it
    if not checkpoint or not reads:
        # The planner knows that neither long trial can restart (TrialDemand.restartable): it plans no move, and
        # says which it held back (Plan.held), which the executor records as refused, once for the trial's
        # attempt: a report tells why the free device idled (it said "refused: none").
        assert not restarts and not reader.events("plan_move")
        refused = reader.events("plan_refused")
        assert refused and len({e.trial_id for e in refused}) == len(refused)
        for e in refused:
            assert e.trial_id != trials[8].trial_id and e.data["action"] == MOVE
            assert e.data["reason"] == REFUSED_NO_CHECKPOINT and e.data["to"] != [
                p.device for p in reader.events("place") if p.trial_id == e.trial_id][-1:]
            # the device the move would have left, so that inspect says which trial stayed where (h104's F10)
            assert e.data["from"] == [p.device for p in reader.events("place")
                                      if p.trial_id == e.trial_id and p.ts <= e.ts][-1]
        assert [(h["trial_id"], h["from"], h["to"]) for h in planner.held_back] == [
            (e.trial_id, e.data["from"], e.data["to"]) for e in refused]
        assert planner.moves == 0 and planner.refused == {REFUSED_NO_CHECKPOINT: len(refused)}
        assert planner.move_cost_s is None
        return
    assert restarts, "the time-sliced trial was never spread to the free device"
    assert all(e.data["reason"] == "move" for e in restarts)
    moved = {e.trial_id for e in restarts}
    assert len(moved) == 1 and trials[8].trial_id not in moved  # only one of the two long trials moves
    (restart,) = restarts
    checkpoints = {c["iteration"] for c in reader.checkpoints(restart.trial_id)}
    assert restart.data["from_iteration"] in checkpoints and restart.data["from_iteration"] > 0
    moved_result = next(r for r in grid if r.trial_id in moved)
    assert list(moved_result.metrics_dataframe["it"]) == list(range(1, 41))
    assert moved_result.metrics["start"] == restart.data["from_iteration"]  # resumed from that checkpoint
    placed = [e for e in reader.events("place") if e.trial_id == restart.trial_id]
    assert placed[-1].device == restart.data["to"][0] != placed[0].device
    kept = [r.trial_id for r in grid if r.trial_id not in moved]
    assert all(t.attempt == 0 for t in reader.trials() if t.trial_id in kept)  # unchanged placements kept
    # The move was measured (movecost.py): its cost, far below the 5 s prior for this tiny trial, is now the
    # planner's move cost.
    (measured,) = reader.events("move_cost")
    assert measured.trial_id == restart.trial_id and measured.data["samples"] == 1
    assert 0.0 <= measured.data["seconds"] == measured.data["move_cost_s"] < DEFAULT_MOVE_COST_S
    assert (planner.moves, planner.restarts_for_moves, planner.moves_measured) == (1, 1, 1)
    assert planner.move_cost_s == measured.data["move_cost_s"]


#: How long the "hold" trial of the withdrawal test waits for the "marker" trial before it gives up.
HOLD_WAIT_S = 30.0
#: How long the "quick" trial of the withdrawal test runs on after its first report.
QUICK_S = 0.5


def hold_quick_marker(config):
    """'hold' reports only once 'marker' has run (or after HOLD_WAIT_S); 'quick' reports, runs QUICK_S more and
    ends; 'marker' records each time its code runs."""
    marker_runs = os.path.join(config["folder"], "marker_runs")
    if config["role"] == "marker":
        with open(marker_runs, "a") as f:
            f.write(f"{fluidsalus.get_context().get_trial_id()}\n")
    elif config["role"] == "hold":
        deadline = time.time() + HOLD_WAIT_S
        while not os.path.exists(marker_runs) and time.time() < deadline:
            time.sleep(0.01)
    elif config["role"] == "quick":
        fluidsalus.report({"role": "quick", "saw_marker": False})
        time.sleep(QUICK_S)
    fluidsalus.report({"role": config["role"], "saw_marker": os.path.exists(marker_runs)})


class _MarkerLater(fluidsalus.searchers.BaseSearcher):
    """'hold' and 'quick' first (one per device); 'marker' once 'quick' has reported, so that both devices are
    busy then and it is prefetched behind 'hold', which holds its lane's turn from its start."""

    def __init__(self, folder):
        self.folder, self.stage = folder, 0

    def next_groups(self):
        if self.stage in (0, 2):
            roles = ["hold", "quick"] if self.stage == 0 else ["marker"]
            self.stage += 1
            return [TrialGroup(f"g{self.stage}", [{"role": r, "folder": self.folder} for r in roles])]
        return []

    def on_result(self, trial_id, result):
        if result["role"] == "quick" and self.stage == 1:
            self.stage = 2
        return super().on_result(trial_id, result)

    def is_finished(self):
        return self.stage == 3


@pytest.mark.usefixtures("ray_cluster")
def test_a_prefetched_trial_that_has_not_begun_is_withdrawn_to_a_device_that_frees(storage, tmp_path):
    """Two single-slot devices: 'hold' and 'quick' run, 'marker' comes later, is prefetched behind 'hold' and
    cannot get a turn while 'hold' computes. When 'quick' ends, the planner spreads 'marker' to the free device.
    It has no checkpoint, but it has not begun: its device gives it back and it runs on the free device, once.
    Without that it would wait behind 'hold', which waits for it."""
    grid = fluidsalus.run(hold_quick_marker, searcher=_MarkerLater(str(tmp_path)), devices=2, cpus_per_device=1,
                          storage_path=storage, name="withdrawn", verbose=0)
    assert grid.num_errors == 0
    trials = {r.config["role"]: r for r in grid}
    assert trials["hold"].metrics["saw_marker"] is True  # 'marker' ran while 'hold' still held its device
    marker = trials["marker"].trial_id
    assert (tmp_path / "marker_runs").read_text().splitlines() == [marker]  # its code ran once
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    places = {r: [e for e in reader.events("place") if e.trial_id == trials[r].trial_id] for r in trials}
    (withdraw,) = reader.events("plan_withdraw")
    (restart,) = reader.events("trial_restart")
    assert [e.data["action"] for e in places["marker"]] == ["prefetch", "start"]
    assert places["marker"][0].device == places["hold"][0].device == withdraw.device
    assert withdraw.trial_id == restart.trial_id == marker
    assert withdraw.data["to"] == [places["marker"][1].device] == [places["quick"][0].device]
    assert restart.data["reason"] == "withdrawn" and restart.data["from_iteration"] == 0
    assert {t.trial_id: t.attempt for t in reader.trials()} == {
        trials["hold"].trial_id: 0, trials["quick"].trial_id: 0, marker: 1}
    assert not reader.events("plan_refused")
    assert fluidsalus.inspect(grid.experiment_path).planner.withdrawals == 1


def in_pairs(config):
    for i in range(3):
        time.sleep(0.01)
        fluidsalus.report({"i": i, "world": fluidsalus.distributed.get_world_size()})


@pytest.mark.usefixtures("ray_cluster")
def test_trials_that_need_two_devices_each_run_one_after_another_on_both(storage):
    """workers=(2, 2): every trial runs on both devices (rank 1 a worker), so three trials take turns; none is
    ever started on one device, prefetched, or co-located."""
    from fluidsalus import distributed

    trainable = distributed.data_parallel(in_pairs, workers=(2, 2))
    grid = fluidsalus.run(trainable, {"x": fluidsalus.grid_search([1, 2, 3])}, devices=2, cpus_per_device=1,
                          storage_path=storage, name="pairs", verbose=0)
    assert grid.num_errors == 0 and all(r.metrics["world"] == 2 and r.metrics["i"] == 2 for r in grid)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    places = reader.events("place")
    assert len(places) == 3 and all(e.data["devices"] == ["cpu:0", "cpu:1"] for e in places)
    workers = reader.events("worker_start")
    assert len(workers) == 3 and all(e.data["rank"] == 1 and e.device == "cpu:1" for e in workers)
    spans = sorted((min(r.ts for r in reader.results(t.trial_id)), max(r.ts for r in reader.results(t.trial_id)))
                   for t in reader.trials())
    assert all(later[0] > earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))  # one at a time


@pytest.mark.usefixtures("ray_cluster")
def test_promoted_trials_resume_in_place_and_statuses_settle(storage):
    """Paused trials hold their device; a promotion resumes them there (no restart); the run ends with every
    trial TERMINATED."""
    from test_run import _TwoRungs, long_objective

    grid = fluidsalus.run(long_objective, searcher=_TwoRungs(), devices=2, cpus_per_device=1,
                          storage_path=storage, name="rungs2", verbose=0)
    assert {r.config["x"]: r.metrics["training_iteration"] for r in grid} == {1: 2, 2: 2, 3: 4, 4: 4}
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    # (a prefetched trial that had not begun may have been withdrawn to the device that freed first: no restart
    # of a trial that ran)
    assert all(e.data["reason"] == "withdrawn" for e in reader.events("trial_restart"))
    assert {t.status for t in reader.trials()} == {"TERMINATED"}
    assert PENDING not in {t.status for t in reader.trials()} and RUNNING not in {t.status for t in reader.trials()}


def test_a_virtual_cpu_device_reports_its_share_of_its_own_nodes_memory(ray_cluster):
    """A CPU device's lane capacity is read by its actor on its node (nodes may differ from the driver's machine),
    split between the run's devices on that node; an explicit capacity is kept."""
    import ray

    from fluidsalus.gpu.actor import pack_trainable, start_device_actor
    from fluidsalus.gpu.device import DeviceSpec, virtual_device_capacity
    from fluidsalus.gpu.host import HostSettings

    payload = pack_trainable(lambda config: None, None)
    shared = start_device_actor(DeviceSpec("cpu:0", "cpu", 0, 1, None, 4), payload, HostSettings("exp"))
    explicit = start_device_actor(DeviceSpec("cpu:1", "cpu", 1, 1, None, 4), payload,
                                  HostSettings("exp", capacity_bytes=GiB))
    try:
        infos = ray.get([a.info.remote() for a in (shared, explicit)], timeout=120)
    finally:
        for actor in (shared, explicit):
            ray.kill(actor, no_restart=True)
    assert infos[0]["capacity_bytes"] == virtual_device_capacity(4)  # one node here: this machine's memory / 4
    assert infos[1]["capacity_bytes"] == GiB


def test_a_checkpoint_verdict_is_answered_after_the_callbacks_saw_the_result_and_the_checkpoint_is_stored(tmp_path):
    """A class Trainable asks, after each result, whether a callback wants it saved (CHECKPOINT_VERDICT_CALL). The
    executor answers only once the batch's callbacks have run, for the iteration they saw, and stores the
    checkpoint the trial then attaches (EV_CHECKPOINT) as that iteration's, telling the callbacks."""
    from fluidsalus.callbacks import Callback
    from fluidsalus.gpu.host import EV_CALL, EV_CHECKPOINT, EV_RESULT
    from fluidsalus.session import CHECKPOINT_VERDICT_CALL

    class AskAt2(Callback):
        def __init__(self):
            self.asked, self.seen, self.saved = [], [], []

        def on_trial_result(self, trial_id, result):
            self.seen.append(result["training_iteration"])
            if result["training_iteration"] == 2:
                self.asked.append(trial_id)

        def checkpoint_requests(self):
            asked, self.asked = self.asked, []
            return asked

        def on_trial_checkpoint(self, trial_id, iteration, checkpoint_dir_name):
            self.saved.append((trial_id, iteration, checkpoint_dir_name))

    executor, store = _offline_executor(tmp_path)
    callback = AskAt2()
    executor.settings.callbacks = [callback]
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(0,))
    trial.trial_dir = str(tmp_path / "a")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    device = executor._devices[0]
    for iteration in (1, 2):  # each result, then the trial's question about it, in one batch
        executor._handle(device, [
            (EV_RESULT, "a", 0, float(iteration), {"training_iteration": iteration, "loss": 1.0 / iteration}, False,
             False),
            (EV_CALL, "a", 0, float(iteration), 10 + iteration, CHECKPOINT_VERDICT_CALL, (iteration,))])
    answers = [args for name, args in _sent(device) if name == "answer"]
    assert answers == [(11, False, False), (12, True, False)]
    assert "request_checkpoint" not in [name for name, _ in _sent(device)]  # the answer carries the request
    assert callback.seen == [1, 2]
    executor._handle(device, [(EV_CHECKPOINT, "a", 0, 2.5, 2, "checkpoint_000002")])
    assert trial.checkpoint_path == str(tmp_path / "a" / "checkpoint_000002")
    (stored,) = store.checkpoints("a")
    assert stored["iteration"] == 2 and stored["metrics"]["loss"] == 0.5
    assert stored["metrics"]["checkpoint_dir_name"] == "checkpoint_000002"
    assert callback.saved == [("a", 2, "checkpoint_000002")]
    assert {t.trial_id: t for t in store.trials()}["a"].checkpoint_path == trial.checkpoint_path  # for a resume
    # A question about an iteration the callbacks did not ask for (or asked for long ago) is answered no.
    executor._handle(device, [(EV_CALL, "a", 0, 3.0, 13, CHECKPOINT_VERDICT_CALL, (3,))])
    assert [args for name, args in _sent(device) if name == "answer"][-1] == (13, False, False)


def test_the_drivers_busy_spell_answering_a_call_is_named_by_the_calls_label(tmp_path):
    """A call the loop answers slowly while a trial is queued is a ``driver_busy`` spell; it was named by the wire
    method (``optuna.after_reports``: a ``should_prune`` carrying held reports; ``optuna.flush``) while the
    trial's own wait was named by the call's label (``should_prune``, ``report``), so ``idle_driver`` showed the
    one call as two methods. The spell is named by the label the call carries (``gpu.host.EV_CALL``)."""
    from fluidsalus.gpu.host import EV_CALL
    from fluidsalus.trialgroup.executor import DRIVER_BUSY_EVENT, DRIVER_BUSY_MIN_S

    executor, store = _offline_executor(tmp_path)
    executor.settings.call_handler = lambda trial_id, method, args: time.sleep(2 * DRIVER_BUSY_MIN_S)
    running = _trial("a", status=RUNNING, placed_on=(0,), devices=(0,))
    _queue(executor, store, running, _trial("queued", seq=1))
    executor.pending.discard("a")  # ("queued" waits for a place: the loop's spell holds it back)
    device = executor._devices[0]
    executor._handle(device, [
        (EV_CALL, "a", 0, 1.0, 1, "optuna.after_reports", (b"",), "optuna.should_prune"),
        (EV_CALL, "a", 0, 2.0, 2, "optuna.flush", (), "optuna.report")])
    assert [e.data["what"] for e in store.events(DRIVER_BUSY_EVENT)] == ["optuna.should_prune", "optuna.report"]
    assert [args[0] for name, args in _sent(device) if name == "answer"] == [1, 2]


def test_a_command_waits_for_the_next_poll_of_a_device_whose_poll_came_back_and_goes_at_once_otherwise(tmp_path):
    """``Executor._send``: one message per round trip for a busy device, no delay for one with a poll still out,
    nothing for a dead device."""
    executor, _ = _offline_executor(tmp_path)
    device = executor._devices[0]
    executor._send(device, "stop", ["a"])
    executor._send(device, "answer", 7, 1.5, False)
    assert device.outbox == [("stop", (["a"],)), ("answer", (7, 1.5, False))] and device.actor.calls == []
    device.poll_ref = object()  # a poll is out: the device would not see the command until it came back
    executor._send(device, "resume", {"a": 3})
    assert device.actor.calls == [("resume", ({"a": 3},))] and len(device.outbox) == 2
    device.alive = False
    executor._send(device, "submit", [])
    assert device.actor.calls == [("resume", ({"a": 3},))] and len(device.outbox) == 2


def test_the_driver_holds_pauses_on_its_devices_only_while_another_device_is_up_and_nothing_is_queued(tmp_path):
    """``Executor._tell_hold_pauses``: a device holds a prefetched trial through its neighbour's pause until the
    driver answered it (``DeviceHost.hold_pauses``) only when a slot freed elsewhere would have nothing to start,
    and the message goes only when that changes (a run on one device never sends it). An empty queue is not
    enough while the searcher may still propose new trials (one under ``max_concurrent`` empties it after each
    start: holding there cost 8-15% of device time, h173)."""
    executor, _ = _offline_executor(tmp_path, n_devices=2)
    new_trials = [True]
    executor.searcher.proposes_new = lambda: new_trials[0]  # type: ignore[method-assign]
    executor.pending.add(_trial("a"))
    executor._tell_hold_pauses()
    assert [_sent(d) for d in executor._devices] == [[], []]  # a trial waits for a slot: no device would idle
    executor.pending.discard("a")
    executor._tell_hold_pauses()
    assert [_sent(d) for d in executor._devices] == [[], []]  # a new trial may still come for a freed slot
    new_trials[0] = False
    executor._tell_hold_pauses()
    executor._tell_hold_pauses()
    assert [_sent(d) for d in executor._devices] == [[("hold_pauses", (True,))]] * 2
    executor._devices[1].alive = False  # no other device is up
    executor._tell_hold_pauses()
    assert _sent(executor._devices[0]) == [("hold_pauses", (True,)), ("hold_pauses", (False,))]
    one, _ = _offline_executor(tmp_path / "one")
    one._tell_hold_pauses()
    assert _sent(one._devices[0]) == []


def test_the_driver_tells_its_devices_to_hold_pauses_before_it_sends_the_prefetched_trial_they_would_hold(tmp_path):
    """The plan that prefetches a run's last trial empties the queue: the devices are told to hold pauses in the same
    pass, before the submissions (``Executor._dispatch``). Told after them, the prefetched trial began at once behind
    a neighbour that already waited for its verdict (the Optuna front end proposes the last trial once the others
    started, so the neighbour's first ``should_prune`` may come first): the two time-sliced one device while the
    other idled (CI's failure of ``test_optuna_frontend.py::test_in_the_runs_tail_a_prefetched_trial_waits_...``)."""
    executor, store = _offline_executor(tmp_path, n_devices=2)
    executor.searcher.proposes_new = lambda: False  # type: ignore[method-assign]
    _queue(executor, store, _trial("a"), _trial("b", seq=1), _trial("c", seq=2))
    executor._dispatch()
    assert sorted(e.data["action"] for e in store.events("place")) == ["prefetch", "start", "start"]
    assert [[name for name, _ in _sent(d)] for d in executor._devices] == [["hold_pauses", "submit"]] * 2
    assert all(_sent(d)[0] == ("hold_pauses", (True,)) for d in executor._devices)


#: Reports of :func:`_reports_slowly`, each after :data:`_REPORT_SLEEP_S`: long enough that a stop sent after the
#: submit lands before the trial ends.
_SLOW_REPORTS = 50
_REPORT_SLEEP_S = 0.01


def _reports_slowly(config):
    for i in range(_SLOW_REPORTS):
        time.sleep(_REPORT_SLEEP_S)
        fluidsalus.report({"i": i})


def test_a_device_carries_out_the_commands_sent_with_a_poll_in_their_order_before_it_polls(ray_cluster, tmp_path):
    """``poll(max_wait_s, commands)`` applies the commands first and in order: a stop after the submit stops the
    trial, a stop before it finds nothing to stop. An unknown command is refused with the allowed ones."""
    import ray

    from fluidsalus.gpu.actor import pack_trainable, start_device_actor
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.gpu.host import EV_END, EV_RESULT, OUT_COMPLETED, OUT_STOPPED, HostSettings

    actor = start_device_actor(DeviceSpec("cpu:0", "cpu", 0, 1), pack_trainable(_reports_slowly, None),
                               HostSettings("exp", max_lanes=1, capacity_bytes=GiB, trial_estimate=(2**20, 2**20)))

    def run(trial_id, commands):
        events = ray.get(actor.poll.remote(0.0, commands), timeout=120)
        deadline = time.time() + 120
        while not any(e[0] == EV_END and e[1] == trial_id for e in events):
            assert time.time() < deadline, events
            events += ray.get(actor.poll.remote(0.5), timeout=120)
        end = next(e for e in events if e[0] == EV_END and e[1] == trial_id)
        return end[4], sum(1 for e in events if e[0] == EV_RESULT and e[1] == trial_id)

    def spec(trial_id):
        return TrialSpec(trial_id, trial_id, {}, str(tmp_path / trial_id))

    try:
        outcome, results = run("a", [("submit", ([spec("a")],)), ("stop", (["a"],))])
        assert outcome == OUT_STOPPED and results <= 1
        assert run("b", [("stop", (["b"],)), ("submit", ([spec("b")],))]) == (OUT_COMPLETED, _SLOW_REPORTS)
        with pytest.raises(ray.exceptions.RayTaskError,
                           match="unknown device command 'kill'; allowed: submit, stop, withdraw, resume, "
                                 "request_checkpoint"):
            ray.get(actor.apply.remote([("kill", ())]), timeout=120)
        # Numbered calls are carried out in their numbers' order, whichever the actor's threads get first (Ray
        # does not order the calls of a threaded actor): the stop numbered 1 waits for the submit numbered 0.
        ray.get(actor.stop.remote(["c"], batch=1), timeout=120)
        ray.get(actor.submit.remote([spec("c")], batch=0), timeout=120)
        assert run("c", None)[0] == OUT_STOPPED
        # A refused batch still takes its turn: the batches after it are carried out.
        with pytest.raises(ray.exceptions.RayTaskError, match="unknown device command 'kill'"):
            ray.get(actor.apply.remote([("kill", ())], batch=2), timeout=120)
        ray.get(actor.submit.remote([spec("d")], batch=3), timeout=120)
        assert run("d", None) == (OUT_COMPLETED, _SLOW_REPORTS)
    finally:
        ray.kill(actor, no_restart=True)


@pytest.mark.parametrize("reason", ["move", "preempted", "withdrawn"])
def test_a_device_that_dies_while_the_planner_takes_a_trial_off_it_restarts_the_trial_as_a_death(
        tmp_path, monkeypatch, reason):
    """The planner's stop (a move, a preemption, a withdrawal) had not ended the attempt when the device died: the
    death ended it, and may have taken a failure the trial raised just before, so the restart is the death's
    (``device_died``), as for the device's other trials. Seen in tests/test_chaos.py (seed 13): a trial whose
    device died during its move failed once more than max_failures allows, its restart recorded as a move."""
    from fluidsalus.trialgroup import executor as executor_module
    from fluidsalus.trialgroup.executor import _Restart

    executor, store = _offline_executor(tmp_path, n_devices=2)
    moving = _trial("a", status=RUNNING, placed_on=(0,), devices=(1,), group_id="g1")
    still = _trial("b", status=RUNNING, placed_on=(0,), devices=(0,), group_id="g1")
    for trial in (moving, still):
        _queue(executor, store, trial)
        executor.pending.discard(trial.trial_id)
        executor._devices[0].assigned.add(trial.trial_id)
    executor._restarts["a"] = _Restart(reason=reason, action=MOVE)
    executor._stopping.add("a")
    monkeypatch.setattr(executor_module, "start_device_actor", lambda *args: _FakeActor())
    executor._device_died(executor._devices[0], RuntimeError("the process died"))
    restarts = {e.trial_id: e.data for e in store.events("trial_restart")}
    assert restarts["a"]["reason"] == restarts["b"]["reason"] == "device_died"
    assert restarts["a"]["error"] == "the process died" and "a" not in executor._restarts
    assert moving.status == still.status == PENDING and moving.attempt == still.attempt == 1



#: Share of a one-device run's lane capacity that each trial of :func:`holding` holds: three fit, four do not.
HELD_SHARE = 0.3


def holding(config):
    """Holds :data:`HELD_SHARE` of the device in torch tensors (its P: counted, never touched, so it costs no real
    memory) and reports ``x`` times the iteration, as ``test_run.long_objective`` does."""
    import torch

    from fluidsalus.gpu.device import virtual_device_capacity

    weights = torch.empty(int(HELD_SHARE * virtual_device_capacity(1)) // 4)
    for step in range(1, 100):
        time.sleep(0.01)
        fluidsalus.report({"score": config["x"] * step, "held": weights.numel()})


@pytest.mark.usefixtures("ray_cluster")
def test_a_rung_whose_trials_cannot_all_stay_on_the_device_completes_by_evicting_paused_ones(storage):
    """A synchronous rung of four trials (``test_run._TwoRungs``: all four to budget 2, then the best two to 4) on
    one device that holds three of them, and paused trials keep their memory. No trial checkpoints, so no plan
    could take one off the device without losing its work, and the run waited for ever: the fourth trial waited
    for memory that only the rung's end would free. Once nothing computes and a trial waits, the planner's
    preemption (or move) goes ahead without a checkpoint: a paused trial waits off the device and, if promoted,
    runs again from scratch."""
    from test_run import _TwoRungs

    grid = fluidsalus.run(holding, searcher=_TwoRungs(), devices=1, cpus_per_device=1, storage_path=storage,
                          name="evicted", verbose=0, time_budget_s=90)
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    assert grid.num_errors == 0 and {t.status for t in reader.trials()} == {"TERMINATED"}
    # The rung ended (before, nothing ran after its first three trials paused): the best two went on to 4.
    assert {r.config["x"]: r.metrics["training_iteration"] for r in grid} == {1: 2, 2: 2, 3: 4, 4: 4}
    evicted = {e.trial_id for e in reader.events("plan_preempt")} | {e.trial_id for e in reader.events("plan_move")}
    assert evicted and not reader.checkpoints()  # trials left the device without a checkpoint
    for result in grid:  # (one evicted and promoted ran again from scratch: its last attempt has every iteration)
        expected = list(range(1, result.metrics["training_iteration"] + 1))
        assert [row.iteration for row in reader.results(result.trial_id)] == expected


def test_a_restart_lets_go_of_the_checkpoints_after_its_resume_point_only_once_the_new_attempt_starts(tmp_path):
    """An exploit rewinds a trial to another trial's checkpoint. Its checkpoints of later iterations belong to the
    abandoned line, whose folder names the new attempt writes again: their rows go when the attempt starts (before
    any of its checkpoints is handled), not at the requeue, so a run that ends first keeps the old line whole. The
    folders stay (the new attempt replaces those it reaches), as Ray keeps an exploited trial's old checkpoints."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_STOPPED
    from fluidsalus.trialgroup.executor import _Restart

    executor, store = _offline_executor(tmp_path)
    trial = _trial("a", status=RUNNING, placed_on=(0,), devices=(0,), last_iteration=4)
    trial.trial_dir = str(tmp_path / "exp" / "a")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    executor._devices[0].assigned.add("a")
    for i in range(1, 5):
        folder = tmp_path / "exp" / "a" / f"checkpoint_{i:06d}"
        folder.mkdir(parents=True)
        store.add_checkpoint("a", i, str(folder), {"training_iteration": i})
    trial.checkpoint_path = str(tmp_path / "exp" / "a" / "checkpoint_000004")
    executor._restarts["a"] = _Restart(reason="exploit", config={"x": 2}, iteration=2, time_total_s=0.2,
                                       checkpoint_path=str(tmp_path / "exp" / "a" / "checkpoint_000002"))
    executor._stopping.add("a")
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 1.0, OUT_STOPPED, None, None)])
    assert trial.attempt == 1 and trial.last_iteration == 2
    assert [c["iteration"] for c in store.checkpoints("a")] == [1, 2, 3, 4]  # requeued: nothing let go yet
    trial.placed_on = (0,)
    executor._devices[0].assigned.add("a")
    executor._handle(executor._devices[0], [(EV_START, "a", 1, 2.0)])
    assert [c["iteration"] for c in store.checkpoints("a")] == [1, 2]
    assert (tmp_path / "exp" / "a" / "checkpoint_000004").is_dir()  # the folder stays, unlisted


def _placed_trial(executor, store, tid: str, devices=(0,), **kwargs) -> Trial:
    """A RUNNING trial of group "g" placed on ``devices`` of an offline executor, its folder in the experiment's,
    and known to the searcher."""
    from fluidsalus.store import RUNNING

    trial = _trial(tid, status=RUNNING, group_id="g", **kwargs)
    trial.trial_dir = os.path.join(executor.settings.experiment_dir, tid)
    _queue(executor, store, trial)
    executor.pending.discard(trial.trial_id)
    trial.placed_on = trial.devices = tuple(devices)
    for index in devices:
        executor._devices[index].assigned.add(tid)
    executor.searcher.on_trial_add(tid, "g", {})
    return trial


def test_a_data_parallel_workers_own_end_after_its_trials_end_changes_nothing(tmp_path):
    """A worker still waiting for memory when rank 0's end came sends an end of its own once the stop reaches it:
    it was taken as the trial's second end (an ERROR trial became TERMINATED, the searcher heard of it twice)."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_ERRORED, OUT_STOPPED
    from fluidsalus.store import ERROR

    executor, store = _offline_executor(tmp_path, n_devices=2)
    trial = _placed_trial(executor, store, "a", devices=(0, 1))
    completes = []
    executor._searcher_log.on_trial_complete = lambda tid, *args, **kwargs: completes.append(tid)
    rank0, worker = executor._devices
    executor._handle(rank0, [(EV_START, "a", 0, 0.5), (EV_END, "a", 0, 1.0, OUT_ERRORED, "rendezvous timed out", None)])
    executor._handle(worker, [(EV_END, "a", 0, 1.2, OUT_STOPPED, None, None)])
    row = {r.trial_id: r for r in store.trials()}["a"]
    assert (trial.status, row.status, row.error) == (ERROR, ERROR, "rendezvous timed out")
    assert completes == ["a"] and len(store.events("trial_end")) == 1


def test_a_retry_from_an_earlier_checkpoint_continues_time_total_s_from_the_checkpoint(tmp_path):
    """Results 1-5, a checkpoint at 3, then a failure: the retry resumed at iteration 3 with time_total_s from
    the 5th result, so each restart moved it on (budgets in time_total_s came early)."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, EV_START, OUT_ERRORED

    executor, store = _offline_executor(tmp_path)
    executor.settings.max_failures = 1
    trial = _placed_trial(executor, store, "a")
    os.makedirs(os.path.join(trial.trial_dir, "checkpoint_000003"))
    batch = [(EV_START, "a", 0, 0.5)]
    for i in range(1, 6):
        metrics = {"training_iteration": i, "time_this_iter_s": 1.0, "time_total_s": float(i),
                   **({"checkpoint_dir_name": "checkpoint_000003"} if i == 3 else {})}
        batch.append((EV_RESULT, "a", 0, float(i), metrics, False, False))
    batch.append((EV_END, "a", 0, 5.5, OUT_ERRORED, "boom", None))
    executor._handle(executor._devices[0], batch)
    spec = executor._spec_for(trial)
    assert (trial.attempt, spec.start_iteration, spec.time_total_offset) == (1, 3, 3.0)


def _paused_at_its_budget_with_a_checkpoint(tmp_path, n_devices=1):
    """Trial "a" paused at its budget 2, with its checkpoint of iteration 2."""
    from fluidsalus.gpu.host import EV_RESULT, EV_START
    from fluidsalus.store import PAUSED

    executor, store = _offline_executor(tmp_path, n_devices=n_devices)
    trial = _placed_trial(executor, store, "a", budget=2)
    store.update_trial("a", budget=2)
    batch = [(EV_START, "a", 0, 0.5)]
    for i in (1, 2):
        os.makedirs(os.path.join(trial.trial_dir, f"checkpoint_00000{i}"))
        metrics = {"training_iteration": i, "time_this_iter_s": 1.0, "time_total_s": float(i),
                   "checkpoint_dir_name": f"checkpoint_00000{i}"}
        batch.append((EV_RESULT, "a", 0, float(i), metrics, i == 2, False))
    executor._handle(executor._devices[0], batch)
    assert trial.status == PAUSED
    return executor, store, trial


def test_a_trial_paused_at_its_budget_whose_device_dies_waits_off_it_for_its_searcher(tmp_path, monkeypatch):
    """It went back to the queue with its budget reached: restarted from its checkpoint at the budget, it ran one
    iteration past it before pausing again (a move or a preemption already kept such a trial paused)."""
    from fluidsalus.store import PAUSED
    from fluidsalus.trialgroup import executor as executor_module

    executor, _, trial = _paused_at_its_budget_with_a_checkpoint(tmp_path, n_devices=2)
    monkeypatch.setattr(executor_module, "start_device_actor", lambda *args: _FakeActor())
    executor._device_died(executor._devices[0], RuntimeError("killed"))
    assert trial.status == PAUSED and "a" not in executor.pending and trial.placed_on == ()


class _Ends(EngineCallback):
    """Records the results and ends the executor tells its callbacks, in order."""

    def __init__(self):
        self.calls = []

    def on_trial_result(self, trial_id, result):
        self.calls.append(("result", trial_id, result["training_iteration"]))

    def on_trial_complete(self, trial_id, status, result):
        self.calls.append(("complete", trial_id, status))


@pytest.mark.parametrize("how", ["searcher_stops_it", "search_finished"])
def test_a_trial_moved_off_its_device_while_paused_at_its_budget_then_stopped_is_told_to_the_callbacks(tmp_path,
                                                                                                       how):
    """A move planned for a trial that then paused at its budget leaves it paused off any device (_requeue). When
    its searcher stops it (ASHA below its top rung) or the search ends (ASHA's last rung, the run's last trials), it
    ended in the store without a word to the callbacks: a Ray callback never got ``on_trial_complete`` and its
    ``on_experiment_end`` saw the trial RUNNING (h101's F6: an ASHA run restored with ``restart_errored=True``, about 1
    run in 4 on a loaded machine). Ray's ``stop_trial`` calls ``on_trial_complete`` for a PAUSED or PENDING trial."""
    from fluidsalus.gpu.host import EV_END, OUT_STOPPED
    from fluidsalus.store import TERMINATED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart

    executor, store, trial = _paused_at_its_budget_with_a_checkpoint(tmp_path, n_devices=2)
    callback = _Ends()
    executor.settings.callbacks = [callback]
    executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)
    executor._send_stop(["a"], no_verdict=True)
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 3.0, OUT_STOPPED, None, None)])
    assert trial.status == PAUSED and not trial.placed_on and "a" not in executor.pending and not callback.calls
    if how == "searcher_stops_it":
        executor._searcher_log.collect_stops = lambda: ["a"]
        executor._searcher_log.next_groups = lambda: []
        executor._take_groups()
    else:
        executor.searcher.is_finished = lambda: True
        assert executor._finished()
    row = {r.trial_id: r for r in store.trials()}["a"]
    assert (trial.status, row.status) == (TERMINATED, TERMINATED)
    assert callback.calls == [("complete", "a", TERMINATED)]


def _result_event(attempt: int, iteration: int, *, checkpoint: bool = False, paused: bool = False, done: bool = False,
                  by_rule: bool = False, trial_id: str = "a") -> tuple[Any, ...]:
    """A device's EV_RESULT of ``trial_id``'s ``iteration`` (with ``checkpoint_<iteration>`` when ``checkpoint``)."""
    from fluidsalus.gpu.host import EV_RESULT

    metrics = {"training_iteration": iteration, "time_this_iter_s": 0.1, "done": done,
               "checkpoint_dir_name": f"checkpoint_{iteration:06d}" if checkpoint else None}
    return (EV_RESULT, trial_id, attempt, float(iteration), metrics, paused, by_rule)


@pytest.mark.parametrize("restart", ["move", "retry"])
def test_iterations_a_move_runs_again_are_not_given_to_the_callbacks_twice_as_a_retrys_are(tmp_path, restart):
    """A move goes on from the trial's last checkpoint, older than its last result: the iterations after it run
    again. The store keeps both attempts (the latest counts), but the callbacks got those results twice, so Ray's
    loggers wrote a row twice in progress.csv (a CI run of
    ``test_checkpoint_at_end_saves_a_trial_the_stop_rule_or_a_scheduler_ends``): Ray never moves a trial. Now they
    see each iteration once; a checkpoint the redone iteration brings is told as a save. A retry after a failure
    gives them again, as Ray's retry does. So does the driver's copy of a stopper: a counting one counted the redone
    results too, and the attempt took its count with no mark of what it saw, so a moved trial ended early (h248's F2;
    the device's side: ``test_host.py::test_a_moved_trials_stop_rule_does_not_judge_the_iterations_it_runs_again``)."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_ERRORED, OUT_STOPPED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart
    from fluidsalus.tune.stopper import MaximumIterationStopper

    executor, store, trial = _running_on_device_0(tmp_path)
    trial.checkpoint_path = None
    executor.settings.max_failures = 1
    executor.settings.stopper = stopper = MaximumIterationStopper(100)
    callback = _Ends()
    callback.on_trial_checkpoint = lambda trial_id, iteration, dirname: callback.calls.append(
        ("checkpoint", trial_id, iteration))
    executor.settings.callbacks = [callback]
    os.makedirs(os.path.join(trial.trial_dir, "checkpoint_000002"))
    os.makedirs(os.path.join(trial.trial_dir, "checkpoint_000004"))
    result = _result_event
    executor._handle(executor._devices[0], [result(0, 1), result(0, 2, checkpoint=True), result(0, 3)])
    if restart == "move":
        executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)
        executor._stopping.add("a")
        end = (EV_END, "a", 0, 3.5, OUT_STOPPED, None, None)
    else:
        end = (EV_END, "a", 0, 3.5, OUT_ERRORED, "RuntimeError: boom", "Traceback ...")
    executor._handle(executor._devices[0], [end])
    assert trial.attempt == 1 and trial.last_iteration == 2  # from its checkpoint of iteration 2
    trial.placed_on, trial.devices = (1,), (1,)  # (where the planner starts it)
    spec = executor._spec_for(trial)
    assert pickle.loads(spec.stop_state)._iter["a"] == 3
    assert spec.stop_seen_through == (3 if restart == "move" else 0)
    executor._handle(executor._devices[1], [(EV_START, "a", 1, 4.0), result(1, 3), result(1, 4, checkpoint=True),
                                            result(1, 5)])
    results = [call[2] for call in callback.calls if call[0] == "result"]
    if restart == "move":
        assert results == [1, 2, 3, 4, 5] and ("checkpoint", "a", 4) not in callback.calls
    else:
        assert results == [1, 2, 3, 3, 4, 5]
    assert stopper._iter["a"] == len(results)
    assert [(r.attempt, r.iteration) for r in store.results("a")] == [(0, 1), (0, 2), (1, 3), (1, 4), (1, 5)]


def test_a_checkpoint_a_redone_iteration_brings_is_told_to_the_callbacks_as_a_save(tmp_path):
    """The redone iteration's own checkpoint (one the first attempt did not save there) is the trial's newest:
    the callbacks hear of it (``on_trial_checkpoint``), though not of the result again."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, EV_START, OUT_STOPPED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart

    executor, store, trial = _running_on_device_0(tmp_path)
    trial.checkpoint_path = None
    callback = _Ends()
    callback.on_trial_checkpoint = lambda trial_id, iteration, dirname: callback.calls.append(
        ("checkpoint", trial_id, iteration))
    executor.settings.callbacks = [callback]
    for name in ("checkpoint_000001", "checkpoint_000002"):
        os.makedirs(os.path.join(trial.trial_dir, name))
    metrics = [{"training_iteration": i, "time_this_iter_s": 0.1, "checkpoint_dir_name": name}
               for i, name in ((1, "checkpoint_000001"), (2, None), (2, "checkpoint_000002"))]
    executor._handle(executor._devices[0], [(EV_RESULT, "a", 0, 1.0, metrics[0], False, False),
                                            (EV_RESULT, "a", 0, 2.0, metrics[1], False, False)])
    executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)
    executor._stopping.add("a")
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 2.5, OUT_STOPPED, None, None)])
    trial.placed_on, trial.devices = (1,), (1,)
    executor._handle(executor._devices[1], [(EV_START, "a", 1, 3.0), (EV_RESULT, "a", 1, 4.0, metrics[2], False,
                                                                        False)])
    assert callback.calls == [("result", "a", 1), ("result", "a", 2), ("checkpoint", "a", 2)]


@pytest.mark.parametrize("moved", ["while_paused", "at_its_budget"])
def test_a_trial_a_move_runs_again_to_its_budget_is_told_paused_there(tmp_path, monkeypatch, moved):
    """A trial moved while paused at its budget (HyperBand's rung), or whose move's stop reached it at the report
    where it met its budget, restarts from an older checkpoint, runs the iterations after it again, and pauses at
    its budget again: the callbacks are told ``PAUSED`` there (``fluidsalus.tune``'s view and reporter, as Ray's
    paused trial). The redone result is kept from them, and its pause went with it: the view said ``RUNNING``."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_STOPPED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart

    executor, store, trial = _running_on_device_0(tmp_path)
    monkeypatch.setattr(executor.searcher, "pauses_as_ray", True)  # (HyperBand's, PBT's: a pause is told)
    trial.checkpoint_path, trial.budget = None, 4
    callback = _Ends()
    callback.on_trial_status = lambda trial_id, status: callback.calls.append(("status", trial_id, status))
    executor.settings.callbacks = [callback]
    os.makedirs(os.path.join(trial.trial_dir, "checkpoint_000002"))

    def result(attempt: int, iteration: int, paused: bool = False, done: bool = False) -> tuple[Any, ...]:
        return _result_event(attempt, iteration, paused=paused, done=done, checkpoint=iteration == 2 and not attempt)

    executor._handle(executor._devices[0], [result(0, 1), result(0, 2), result(0, 3)])
    if moved == "while_paused":
        executor._handle(executor._devices[0], [result(0, 4, paused=True)])
    executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)
    executor._stopping.add("a")
    # (the move's stop ends a paused trial with no result; one that reports at its budget ends there, done)
    executor._handle(executor._devices[0], ([] if moved == "while_paused" else [result(0, 4, done=True)])
                     + [(EV_END, "a", 0, 4.5, OUT_STOPPED, None, None)])
    assert trial.status == PENDING and trial.last_iteration == 2
    trial.placed_on, trial.devices = (1,), (1,)
    executor._devices[1].assigned.add("a")
    executor._handle(executor._devices[1], [(EV_START, "a", 1, 5.0), result(1, 3), result(1, 4, paused=True)])
    assert trial.status == PAUSED
    assert [call[2] for call in callback.calls if call[0] == "result"] == [1, 2, 3, 4]
    assert [call for call in callback.calls if call[0] == "status"][-1] == ("status", "a", PAUSED)


def _moved_at_5_from_checkpoint_2(tmp_path) -> tuple[Any, Any, Any, _Ends]:
    """Trial ``a`` ran iterations 1 to 5 on device 0 (its checkpoint at 2); a move's stop reached it at 5, and its
    next attempt began on device 1 (from 2: it runs 3 to 5 again). The executor, store, trial and a callback that
    records each result as ``("result", "a", iteration, done)``."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_STOPPED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart

    executor, store, trial = _running_on_device_0(tmp_path)
    trial.checkpoint_path = None
    callback = _Ends()
    callback.on_trial_result = lambda trial_id, result: callback.calls.append(
        ("result", trial_id, result["training_iteration"], bool(result.get("done"))))
    executor.settings.callbacks = [callback]
    os.makedirs(os.path.join(trial.trial_dir, "checkpoint_000002"))
    executor._handle(executor._devices[0], [_result_event(0, i, checkpoint=i == 2) for i in range(1, 5)])
    executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)
    executor._stopping.add("a")
    executor._handle(executor._devices[0], [_result_event(0, 5, done=True), (EV_END, "a", 0, 5.5, OUT_STOPPED, None,
                                                                             None)])
    assert trial.attempt == 1 and trial.last_iteration == 2
    trial.placed_on, trial.devices = (1,), (1,)
    executor._devices[1].assigned.add("a")
    executor._handle(executor._devices[1], [(EV_START, "a", 1, 6.0)])
    return executor, store, trial, callback


@pytest.mark.parametrize("ends_by", ["trainables_done", "runs_end"])
def test_a_redone_iteration_that_ends_the_trial_is_given_to_the_callbacks_as_its_last(tmp_path, ends_by):
    """A trial that its trainable (its own ``done=True``, which its device reports as the run's rule met) or the
    run's end ends at an iteration a move runs again: that result is its last, and the callbacks get it, ``done``, so
    that its Result and a logger's last row agree (h248's F3: a stopper's was kept from them, the callbacks then
    never saw a ``done`` row). (The run's stop rule does not judge a redone iteration: it judged it once.)"""
    from fluidsalus.gpu.host import EV_END, OUT_STOPPED

    executor, store, trial, callback = _moved_at_5_from_checkpoint_2(tmp_path)
    if ends_by == "runs_end":
        executor._stopping.add("a")  # (a stop for good: the run ends)
        last = _result_event(1, 4, done=True)
    else:
        last = _result_event(1, 4, done=True, by_rule=True)
    executor._handle(executor._devices[1], [_result_event(1, 3), last])
    executor._handle(executor._devices[1], [(EV_END, "a", 1, 9.0, OUT_STOPPED, None, None)])
    results = [call[2:] for call in callback.calls if call[0] == "result"]
    assert results == [(1, False), (2, False), (3, False), (4, False), (5, False), (4, True)]
    assert [(r.attempt, r.iteration, r.metrics["done"]) for r in store.results("a")][-1] == (1, 4, True)


def test_the_drivers_stopper_judges_a_moved_trial_again_past_what_it_saw(tmp_path):
    """The driver's copy of a stopper saw iterations 1 to 5 before the move; the redone 3 to 5 are not given to it
    again (a counting stopper counted them: h248's F2), and it judges the trial again from 6 on, where its stop ends
    the trial and reaches the callbacks, ``done``."""
    from fluidsalus.gpu.host import EV_END, OUT_STOPPED

    executor, store, trial, callback = _moved_at_5_from_checkpoint_2(tmp_path)
    asked: list[int] = []

    def stopper(trial_id: str, result: dict[str, Any]) -> bool:
        asked.append(result["training_iteration"])
        return result["training_iteration"] >= 4

    executor._stop_all_verdicts = True
    executor.settings.stopper = stopper
    executor._handle(executor._devices[1], [_result_event(1, i) for i in (3, 4, 5, 6)])
    executor._handle(executor._devices[1], [(EV_END, "a", 1, 9.0, OUT_STOPPED, None, None)])
    assert asked == [6]
    results = [call[2:] for call in callback.calls if call[0] == "result"]
    assert results == [(1, False), (2, False), (3, False), (4, False), (5, False), (6, True)]


def test_iterations_an_uncharged_device_death_runs_again_are_not_given_to_the_callbacks_twice(tmp_path):
    """A device whose node died (no failure charged: no retry, no ``on_trial_recover``) restarts its trial from its
    checkpoint, as a move does: the iterations it runs again are not given again (h248's F5: they were, after a
    move's redo too, with no recover between, a sequence Ray never shows)."""
    from fluidsalus.gpu.host import EV_START

    executor, store, trial, callback = _moved_at_5_from_checkpoint_2(tmp_path)
    executor._handle(executor._devices[1], [_result_event(1, 3)])
    executor._node_gone = lambda device: True
    executor._start_replacement = lambda device: None
    executor._device_died(executor._devices[1], RuntimeError("node gone"))
    assert trial.num_failures == 0 and trial.attempt == 2
    trial.placed_on, trial.devices = (0,), (0,)
    executor.pending.discard("a")
    executor._devices[0].assigned.add("a")
    executor._handle(executor._devices[0], [(EV_START, "a", 2, 10.0)] + [_result_event(2, i) for i in range(3, 7)])
    assert [call[2] for call in callback.calls if call[0] == "result"] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("run_ends", [False, True], ids=["alone", "then_the_run_ends"])
def test_a_prefetched_trial_its_searcher_stopped_keeps_its_end_hook_when_the_run_ends_before_its_reply(tmp_path,
                                                                                                       run_ends):
    """A trial sent ahead to a device (PENDING, not begun) that its searcher or scheduler stops gets
    ``on_trial_complete``, as Ray's ``stop_trial`` calls it at once for a PENDING trial; when the run's end (a time
    budget) began before its device's reply, the end was taken for the run's own (no hook, no "stopped" count). Its
    ``trial_end`` says it never began, either way."""
    from fluidsalus.gpu.host import EV_END, OUT_STOPPED
    from fluidsalus.store import PENDING, TERMINATED

    executor, store = _offline_executor(tmp_path, n_devices=1)
    callback = _Ends()
    executor.settings.callbacks = [callback]
    trial = _placed_trial(executor, store, "a")
    trial.status = PENDING  # prefetched: placed, not begun (no EV_START yet)
    executor._tell_stopped(executor._stop_trials(["a"]))  # the searcher's stop
    if run_ends:
        executor._ending = "time_budget"
    executor._handle(executor._devices[0], [(EV_END, "a", 0, 1.0, OUT_STOPPED, None, None)])
    assert callback.calls == [("complete", "a", TERMINATED)]
    assert [e.data for e in store.events("trial_end")] == [{"attempt": 0, "outcome": "stopped", "started": False}]


@pytest.mark.parametrize("waiting", ["queued", "prefetched"])
def test_a_trial_that_ran_and_that_the_runs_end_found_waiting_for_its_next_attempt_is_counted_stopped(tmp_path,
                                                                                                     waiting):
    """A trial that ran, was queued again (a PBT turn, a move) and was ended by the run's end before its next
    attempt began counts as "stopped" live as after a resume and in ``fluidsalus inspect`` (their rule: TERMINATED,
    stopped, started_at set): the live count left it out (3 stopped live, 5 after a resume, in a PBT run with a
    time budget). A trial that never began counts as never started, and not as stopped."""
    from fluidsalus.gpu.host import EV_END, OUT_STOPPED
    from fluidsalus.inspect import inspect
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.store import TERMINATED
    from fluidsalus.trialgroup.executor import Executor

    executor, store = _offline_executor(tmp_path, n_devices=1)
    ran = _placed_trial(executor, store, "ran")
    executor._began.add("ran")  # its first attempt began (EV_START) ...
    store.update_trial("ran", started_at=0.5)
    ran.status, ran.attempt = PENDING, 1  # ... and the next one waits
    if waiting == "queued":
        executor._devices[0].assigned.discard("ran")
        ran.placed_on = ran.devices = ()
        executor.pending.add(ran)
    _queue(executor, store, _trial("never", seq=1))
    executor._ending = "time_budget"
    executor._end_queued()
    executor._stop_trials(["ran"], no_verdict=True)
    if waiting == "prefetched":
        executor._handle(executor._devices[0], [(EV_END, "ran", 1, 1.0, OUT_STOPPED, None, None)])
    assert {t.trial_id: t.status for t in executor.trials.values()} == {"ran": TERMINATED, "never": TERMINATED}
    live = executor._snapshot()
    resumed = Executor(executor.payload, RandomSearch({"x": 1}), store, executor.device_specs, executor.settings,
                       trials=list(executor.trials.values()))._snapshot()
    assert (live["stopped"], live["never_started"]) == (resumed["stopped"], resumed["never_started"]) == (1, 1)
    store.set_experiment(status="FINISHED", finished_at=2.0)  # (inspect reads a running one once it has results)
    assert inspect(str(tmp_path / "exp")).stopped == 1


def test_the_runs_end_names_only_trials_whose_attempt_began_when_it_gives_up_waiting(tmp_path, caplog):
    """After RUN_END_GRACE_S the trials still on a device end; the warning and the ``trial_abandoned`` event named
    a trial sent ahead that had not begun too ("reached no report"): it ran nothing, and ends as the queued ones
    do, unnamed (no hook, a ``trial_end`` that says it never started)."""
    from fluidsalus.store import TERMINATED
    from fluidsalus.trialgroup.executor import RUN_END_GRACE_S

    executor, store = _offline_executor(tmp_path, n_devices=2)
    callback = _Ends()
    executor.settings.callbacks = [callback]
    _placed_trial(executor, store, "hung", devices=(0,))
    ahead = _placed_trial(executor, store, "ahead", devices=(1,))
    ahead.status = PENDING  # prefetched: placed, not begun (no EV_START yet)
    executor._ending, executor._ending_at = "time_budget", time.time() - RUN_END_GRACE_S
    with caplog.at_level("WARNING", logger="fluidsalus.trialgroup.executor"):
        executor._check_end()
    assert {t.trial_id: t.status for t in executor.trials.values()} == {"hung": TERMINATED, "ahead": TERMINATED}
    assert [e.trial_id for e in store.events("trial_abandoned")] == ["hung"]
    assert "trial hung reached no report" in caplog.text and "ahead" not in caplog.text
    assert callback.calls == [("complete", "hung", TERMINATED)]
    ends = {e.trial_id: e.data for e in store.events("trial_end")}
    assert ends == {"hung": {"attempt": 0, "outcome": "stopped"},
                    "ahead": {"attempt": 0, "outcome": "stopped", "started": False}}


def _interrupted_in_its_end(executor: Any, store: ExperimentStore, reason: str) -> None:
    """Run an offline executor with three trials (``running`` on device 0, ``ahead`` sent ahead to device 1 and not
    begun, ``queued``) whose run's end begins at once (``reason``: its settings make it) and is cut short by a
    Ctrl-C; ``run()`` raises the ``KeyboardInterrupt``."""
    from fluidsalus.store import TERMINATED

    _placed_trial(executor, store, "running", devices=(0,))
    executor._began.add("running")
    store.update_trial("running", status=RUNNING, started_at=0.5)
    ahead = _placed_trial(executor, store, "ahead", devices=(1,))
    ahead.status = PENDING
    _queue(executor, store, _trial("queued", seq=2))
    executor._start_devices = lambda outer: None
    executor._stop_devices = lambda keep_warm: None  # (offline: no actor to stop, whether or not Ray is up)
    executor._drain = lambda: None  # (nor one to poll at the Ctrl-C)

    def interrupted_while_it_ends():
        executor._check_end()  # the end begins: the queued trial ends, the others are told to stop
        assert executor._ending == reason and executor.trials["queued"].status == TERMINATED
        raise KeyboardInterrupt

    executor._loop = interrupted_while_it_ends
    with pytest.raises(KeyboardInterrupt):
        executor.run()


def test_a_ctrl_c_while_the_run_ends_ends_the_trials_it_waited_for_as_those_it_found_queued(tmp_path):
    """Ctrl-C inside the run's end (a time budget's grace): the trials still on a device, running or sent ahead and
    not begun, stayed RUNNING and PENDING in the store, so ``Tuner.restore`` ran them again, while those the end
    found queued stayed TERMINATED. Ray's end sets every unfinished trial TERMINATED at once, and a restore after
    the Ctrl-C runs none: every trial ends here, stopped, with no hook (the run is interrupted)."""
    from fluidsalus.store import FINAL_STATUSES, TERMINATED

    executor, store = _offline_executor(tmp_path, n_devices=2)
    callback = _Ends()
    executor.settings.callbacks = [callback]
    executor.settings.time_budget_s = 0.0
    _interrupted_in_its_end(executor, store, "time_budget")
    rows = {r.trial_id: r for r in store.trials()}
    assert {tid: (r.status, r.stop_reason) for tid, r in rows.items()} == {
        tid: (TERMINATED, "stopped") for tid in ("running", "ahead", "queued")}
    assert not [r for r in rows.values() if r.status not in FINAL_STATUSES]  # (a restore runs none of them)
    ends = {e.trial_id: e.data for e in store.events("trial_end")}
    assert ends["running"] == {"attempt": 0, "outcome": "stopped"}
    assert ends["ahead"] == ends["queued"] == {"attempt": 0, "outcome": "stopped", "started": False}
    assert callback.calls == []


def test_a_ctrl_c_while_a_fail_fast_raise_end_runs_leaves_its_trials_unfinished_as_its_raise_does(tmp_path):
    """``fail_fast="raise"``: Ray raises the trial's error before its end stops any trial, so its restore runs them
    on; a Ctrl-C within fluidsalus's end (before the raise) ended them all here (``_end_the_ending``), the queued one
    too, and a restore ran none. They stay unfinished, those the end found queued given back (``PENDING``)."""

    executor, store = _offline_executor(tmp_path, n_devices=2)
    executor.settings.fail_fast = "raise"
    executor._first_error, executor._first_error_trial = "Trial failed failed: boom", "failed"
    _interrupted_in_its_end(executor, store, "fail_fast")
    assert {r.trial_id: r.status for r in store.trials()} == {"running": RUNNING, "ahead": PENDING, "queued": PENDING}
    (ending,) = store.events("experiment_ending")
    assert ending.data == {"reason": "fail_fast", "search_ended": False, "raised": "failed"}


class _SignalsAtFirstResult(_Ends):
    """:class:`_Ends` that sends its own process ``signals`` SIGINTs (a user's Ctrl-C) at the first result it sees."""

    def __init__(self, signals: int):
        super().__init__()
        self.signals = signals

    def on_trial_result(self, trial_id, result):
        import signal

        super().on_trial_result(trial_id, result)
        for _ in range(self.signals if len(self.calls) == 1 else 0):
            os.kill(os.getpid(), signal.SIGINT)  # (its handler runs here, in the main thread, before the next line)


def _batch_polled_once(executor: Any, monkeypatch, batch: list) -> None:
    """Let an offline executor's ``_loop`` poll its one device: the first poll brings ``batch``, later ones nothing
    (the executor module's ``ray`` is a stand-in that answers for the fake actor's polls)."""
    from fluidsalus.trialgroup import executor as executor_module

    polls = iter([batch])
    device = executor._devices[0]
    device.actor = types.SimpleNamespace(poll=types.SimpleNamespace(remote=lambda *a, **k: object()),
                                         hold_pauses=types.SimpleNamespace(remote=lambda *a, **k: None))
    stand_in = types.SimpleNamespace(get=lambda ref, **k: next(polls, []), wait=lambda refs, **k: (list(refs), []),
                                     exceptions=executor_module.ray.exceptions)
    patch_ray(monkeypatch, executor_module, "ray", stand_in)
    executor._start_devices = lambda outer: None
    executor._stop_devices = lambda keep_warm: None
    executor._drain = lambda: None
    executor._dispatch = lambda: None


@pytest.mark.parametrize("signals", [1, 2])
def test_a_ctrl_c_while_the_driver_handles_a_batch_waits_for_the_whole_batch_a_second_one_does_not(
        tmp_path, monkeypatch, signals):
    """A Ctrl-C that landed while the driver handled a device's batch (here in a callback's ``on_trial_result`` of
    its first result) raised there: the rest of the batch was lost (the second result's ``on_trial_result``, a
    logger's row, never came; h177). SIGINT is held around a batch (``executor.sigint_held``): the batch is handled
    whole, then the ``KeyboardInterrupt`` comes, and the handler is back. A second Ctrl-C is not held: it gets out
    at once, mid-batch."""
    import signal

    from fluidsalus.gpu.host import EV_RESULT

    executor, store = _offline_executor(tmp_path, slots=2)
    for tid in ("a", "b"):
        _placed_trial(executor, store, tid)
    callback = _SignalsAtFirstResult(signals)
    executor.settings.callbacks = [callback]
    _batch_polled_once(executor, monkeypatch, [
        (EV_RESULT, tid, 0, 1.0, {"training_iteration": 1, "done": False, "time_this_iter_s": 0.1}, False, False)
        for tid in ("a", "b")])
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        executor.run()
    assert signal.getsignal(signal.SIGINT) is handler
    handled = [("result", "a", 1), ("result", "b", 1)]
    assert callback.calls == (handled if signals == 1 else handled[:1])
    assert len(store.results()) == 2  # (stored before the callbacks are told, either way)


class _RaisesAtStepEnd(_Ends):
    """:class:`_Ends` whose ``on_step_end`` raises a plain ``ValueError`` (no FluidsalusError: a Tune callback hook's
    own exception, which the front end passes through) once a trial has ended."""

    def on_step_end(self):
        if any(call[0] == "complete" for call in self.calls):
            raise ValueError("on_step_end's own bug")


def test_an_error_no_fluidsalus_error_after_a_fail_fast_raise_failure_still_tells_the_searcher_its_end(
        tmp_path, monkeypatch):
    """``fail_fast="raise"`` keeps a failure's end from the searcher (``Executor._withholds_end``) and tells it when
    the run ends otherwise (``_tell_withheld``); an exception that is no ``FluidsalusError`` nor ``KeyboardInterrupt``
    (a callback hook's own, an error of Ray's) skipped that: the Optuna study held the trial ``RUNNING`` for good,
    after a restore too (h190's F1)."""
    from fluidsalus.gpu.host import EV_END, OUT_ERRORED

    executor, store = _offline_executor(tmp_path, slots=2)
    executor.settings.fail_fast = "raise"
    for tid in ("a", "b"):
        _placed_trial(executor, store, tid)
    executor.settings.callbacks = [_RaisesAtStepEnd()]
    told: list[tuple[str, bool]] = []
    tell = executor._searcher_log.on_trial_complete
    executor._searcher_log.on_trial_complete = lambda tid, result, error, error_text=None: (
        told.append((tid, error)), tell(tid, result, error, error_text))
    _batch_polled_once(executor, monkeypatch, [(EV_END, "a", 0, 1.0, OUT_ERRORED, "boom", "trace")])
    with pytest.raises(ValueError, match="on_step_end's own bug"):
        executor.run()
    assert told == [("a", True)] and not executor._withheld


def test_sigint_held_gives_the_tune_front_ends_handler_every_ctrl_c():
    """Ray Tune's front end counts the Ctrl-Cs (one: its results are returned; two: the ``KeyboardInterrupt``
    goes through): a held one and a second one are both counted, and a held one alone once, after the block."""
    import signal

    from fluidsalus.trialgroup.executor import sigint_held
    from fluidsalus.tune._interrupt import StopSignals

    for sent in (1, 2):
        after: list[int] = []
        with StopSignals() as signals, pytest.raises(KeyboardInterrupt):
            with sigint_held():
                for _ in range(sent):
                    os.kill(os.getpid(), signal.SIGINT)
                after.append(signals.received)
        assert signals.received == sent and after == ([0] if sent == 1 else [])


def test_a_store_error_while_a_ctrl_c_ends_the_runs_end_leaves_the_ctrl_c_raised_and_the_trials_as_stored(
        tmp_path, caplog):
    """A store that cannot be written when a Ctrl-C cuts the run's end short (``Executor._end_the_ending``): its
    error replaced the user's ``KeyboardInterrupt`` (the Tune front end's first Ctrl-C then raised a ``StoreError``
    instead of returning the results so far). The ``KeyboardInterrupt`` is raised, the error logged, and the
    transaction rolled back: the trials the end waited for stay as stored, for a resume to run again."""
    from fluidsalus.errors import StoreError
    from fluidsalus.store import TERMINATED

    executor, store = _offline_executor(tmp_path, n_devices=2)
    executor.settings.time_budget_s = 0.0
    _placed_trial(executor, store, "running", devices=(0,))
    store.update_trial("running", status=RUNNING, started_at=0.5)
    ahead = _placed_trial(executor, store, "ahead", devices=(1,))
    ahead.status = PENDING
    store.update_trial("ahead", status=PENDING)
    executor._start_devices = lambda outer: None
    executor._stop_devices = lambda keep_warm: None  # (offline: no actor to stop, whether or not Ray is up)
    executor._drain = lambda: None  # (nor one to poll at the Ctrl-C)
    writes = store.update_trial

    def second_write_fails(trial_id, **fields):
        if trial_id == "ahead":
            raise StoreError("could not write the experiment store: disk full")
        writes(trial_id, **fields)

    def interrupted_while_it_ends():
        executor._check_end()  # the budget is spent: the trials on the devices are told to stop
        store.update_trial = second_write_fails
        raise KeyboardInterrupt

    executor._loop = interrupted_while_it_ends
    with pytest.raises(KeyboardInterrupt):
        executor.run()
    store.update_trial = writes
    rows = {r.trial_id: r.status for r in store.trials()}
    assert rows == {"running": RUNNING, "ahead": PENDING} and TERMINATED not in rows.values()  # (none half-ended)
    assert not store.events("trial_end")
    assert any(r.exc_info and "disk full" in str(r.exc_info[1]) for r in caplog.records)  # (logged, not lost)


def test_a_trial_stopped_at_a_result_that_came_with_the_end_of_its_move_is_told_after_that_result(tmp_path):
    """The searcher's stop of a result that came in the batch of the trial's end for a move: the end requeued it
    first (paused off any device, at its budget), so the stop ended it there, unheard by the callbacks (h101's F6).
    They are told its end, after the batch's results, as Ray's callbacks get the result, then the end."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, EV_START, OUT_STOPPED
    from fluidsalus.searchers._base import Decision
    from fluidsalus.store import TERMINATED
    from fluidsalus.trialgroup.executor import RESTART_MOVE, _Restart

    executor, store = _offline_executor(tmp_path, n_devices=2)
    trial = _placed_trial(executor, store, "a", budget=3)
    store.update_trial("a", budget=3)
    callback = _Ends()
    executor.settings.callbacks = [callback]
    executor._searcher_log.on_result = lambda tid, result: (Decision.STOP if result["training_iteration"] == 3
                                                            else Decision.CONTINUE)
    device = executor._devices[0]

    def result(i):
        os.makedirs(os.path.join(trial.trial_dir, f"checkpoint_00000{i}"))
        return (EV_RESULT, "a", 0, float(i), {"training_iteration": i, "time_this_iter_s": 1.0,
                                              "time_total_s": float(i), "checkpoint_dir_name": f"checkpoint_00000{i}"},
                i == 3, False)

    executor._handle(device, [(EV_START, "a", 0, 0.5), result(1), result(2)])
    executor._restarts["a"] = _Restart(reason=RESTART_MOVE, action=MOVE)  # the planner moves it to cpu:1
    executor._send_stop(["a"], no_verdict=True)
    executor._handle(device, [result(3), (EV_END, "a", 0, 3.5, OUT_STOPPED, None, None)])
    row = {r.trial_id: r for r in store.trials()}["a"]
    assert (trial.status, row.status) == (TERMINATED, TERMINATED) and "a" not in executor.pending
    assert callback.calls == [("result", "a", 1), ("result", "a", 2), ("result", "a", 3),
                              ("complete", "a", TERMINATED)]


def _data_parallel_on_two_devices(tmp_path, max_failures=0):
    """An offline executor of two devices running data-parallel trial "a": rank 0 on cpu:0, its worker on cpu:1."""
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings, _Device

    @fluidsalus.distributed.data_parallel(workers=2)
    def train(config):
        pass

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, None, None)
    specs = [DeviceSpec(f"cpu:{i}", "cpu", i, 1) for i in range(2)]
    executor = Executor(cloudpickle.dumps((train, None)), RandomSearch({"x": 1}), store, specs,
                        ExecutorSettings("exp", str(tmp_path / "exp"), "f", verbose=0, max_failures=max_failures))
    for spec in specs:
        device = _Device(spec, _FakeActor(), {"node_ip": "127.0.0.1", "capacity_bytes": 16 * GiB}, max_running=1,
                         assigned=set())
        executor._adopt(device, device.info)
        executor._devices.append(device)
    trial = _trial("a", status=RUNNING, placed_on=(0, 1), devices=(0, 1))
    trial.trial_dir = str(tmp_path / "a")
    _queue(executor, store, trial)
    executor.pending.discard("a")
    for device in executor._devices:
        device.assigned.add("a")
    return executor, trial


@pytest.mark.parametrize("stopping", [False, True])
def test_a_data_parallel_trial_whose_workers_device_died_tells_rank_0_to_wait_for_no_worker(tmp_path, monkeypatch,
                                                                                             stopping):
    """Rank 0 (on cpu:0) would wait at its end for the worker of the dead cpu:1 the whole rendezvous timeout: the
    stop it gets says its peers are lost (``DeviceHost.stop(..., peers_lost=True)``), also when it was being
    stopped already (before, such a trial got no stop at all). Only a trial that was not being stopped restarts."""
    from fluidsalus.trialgroup import executor as executor_module

    executor, _ = _data_parallel_on_two_devices(tmp_path)
    if stopping:
        executor._send_stop(["a"])
    monkeypatch.setattr(executor_module, "start_device_actor", lambda *args: _FakeActor())
    executor._device_died(executor._devices[1], RuntimeError("killed"))
    stops = [c for c in _sent(executor._devices[0]) if c[0] == "stop"]
    assert stops[-1] == ("stop", (["a"], None, not stopping, True))
    assert ("a" in executor._restarts) is not stopping


def test_a_worker_that_ended_as_a_trial_before_rank_0_leaves_no_lingering_mark_that_blocks_the_restart(tmp_path):
    """The worker never started on cpu:1 (too large there, or stopped while it waited for memory): its device
    sends a trial's end, which the driver does not act on (only rank 0 speaks for the trial). It stayed assigned
    there, so rank 0's end then marked it as still winding down on cpu:1, a mark nothing cleared: the retry was
    never sent (a helper's driver-level script). Now the worker's end frees cpu:1 and the retry goes out."""
    from fluidsalus.gpu.host import EV_END, EV_START, OUT_ERRORED

    executor, trial = _data_parallel_on_two_devices(tmp_path, max_failures=1)
    rank0, worker = executor._devices
    executor._handle(rank0, [(EV_START, "a", 0, 1.0)])
    executor._handle(worker, [(EV_END, "a", 0, 1.5, OUT_ERRORED, "cannot run here", None)])
    executor._handle(rank0, [(EV_END, "a", 0, 2.0, OUT_ERRORED, "ValueError: rank 0", "tb")])
    assert not worker.lingering and trial.attempt == 1
    for device in executor._devices:
        device.actor.calls.clear()
        device.outbox.clear()
    executor._rendezvous = lambda device: "127.0.0.1:1"
    executor._dirty = True
    executor._dispatch()
    submitted = sorted((d.spec.name, spec.rank, spec.attempt) for d in executor._devices for c in _sent(d)
                       if c[0] == "submit" for spec in c[1][0])
    assert submitted == [("cpu:0", 0, 1), ("cpu:1", 1, 1)]


def _two_computing(tmp_path, monkeypatch):
    """Trials "a" and "b" computing side by side on one device of two slots, at iteration 1 (a replacement of its
    actor would be a fake). Returns the executor, the device and the trials."""
    from fluidsalus.gpu.host import EV_RESULT, EV_START
    from fluidsalus.trialgroup import executor as executor_module

    executor, store = _offline_executor(tmp_path, n_devices=1, slots=2)
    trials = [_placed_trial(executor, store, "a"), _placed_trial(executor, store, "b", seq=1)]
    device = executor._devices[0]
    executor._handle(device, [(EV_START, "a", 0, 0.5), (EV_START, "b", 0, 0.5)])
    executor._handle(device, [(EV_RESULT, tid, 0, 1.0, {"training_iteration": 1, "time_this_iter_s": 0.5}, False,
                               False) for tid in ("a", "b")])
    monkeypatch.setattr(executor_module, "start_device_actor", lambda *args: _FakeActor())
    return executor, device, trials


def _two_suspects(tmp_path, monkeypatch):
    """Trials "a" and "b" computed side by side on one device of two slots, at iteration 1, when it died; its
    replacement is up. Returns the executor, the device and a function that gives (and forgets) what was sent."""
    executor, device, trials = _two_computing(tmp_path, monkeypatch)
    executor._device_died(device, RuntimeError("the process died"))
    device.alive, device.start_ref = True, None
    executor._adopt(device, device.info)
    assert executor._suspects == {"a", "b"} and {t.status for t in trials} == {"PENDING"}

    def submitted() -> list[str]:
        executor._dirty = True
        executor._dispatch()
        sent = [spec.trial_id for c in _sent(device) if c[0] == "submit" for spec in c[1][0]]
        device.actor.calls.clear()
        device.outbox.clear()
        return sent

    return executor, device, trials, submitted


def test_trials_whose_shared_device_died_restart_one_at_a_time_until_past_their_death_point(tmp_path,
                                                                                             monkeypatch):
    """The driver cannot tell which trial of a device ended its process. Restarted side by side, an objective
    that calls os._exit and its blameless neighbour died together until both had failed (a helper's Optuna study:
    the neighbour failed in 3 runs of 3). Now one suspect computes at a time, beside trials not suspected, so the
    next death is charged to the one that caused it; the others start once it is past where it died, or ended."""
    from fluidsalus.gpu.host import EV_RESULT, EV_START

    executor, device, _, submitted = _two_suspects(tmp_path, monkeypatch)
    assert submitted() == ["a"]  # the first suspect alone, though the device has a free slot for "b"
    assert submitted() == []  # still PENDING (its start not heard yet), "a" counts as computing (a review's find)
    executor._handle(device, [(EV_START, "a", 1, 2.0)])
    assert submitted() == []  # "b" waits while "a" computes short of where it died
    executor._handle(device, [(EV_RESULT, "a", 1, 3.0, {"training_iteration": 2, "time_this_iter_s": 0.5}, False,
                               False)])
    assert executor._suspects == {"b"}  # "a" got past iteration 1: it did not end the process
    assert submitted() == ["b"]


def test_a_second_ctrl_c_ends_the_actors_still_starting_too(tmp_path, monkeypatch):
    """A Ctrl-C during the shutdown ended the live devices' actors, but not one still starting (a dead device's
    replacement, a device the run began without): it held its cores while the traceback held the run (the
    review's script)."""
    from fluidsalus.trialgroup import executor as executor_module

    executor, _ = _offline_executor(tmp_path, n_devices=2)
    starting = executor._devices[1]
    starting.alive, starting.start_ref = False, object()  # its replacement actor is still starting
    killed = []
    patch_ray(monkeypatch, executor_module.ray, "kill", lambda actor, no_restart=True: killed.append(actor))

    def interrupted(keep_warm: bool) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(executor, "_shut_down_devices", interrupted)
    with pytest.raises(KeyboardInterrupt):
        executor._stop_devices(keep_warm=True)
    assert killed == [d.actor for d in executor._devices] and not any(d.alive for d in executor._devices)


def test_trials_whose_device_died_with_its_node_are_neither_charged_nor_suspects(tmp_path, monkeypatch):
    """A node that left the cluster took the device's process: no trial ended it. Each trial computing on a
    device of several slots was a suspect (restarted one at a time on the node that took its place), and every
    computing trial was charged its share of the death (two node losses at the same point failed a trial that
    computed alone: ``DEATHS_PER_FAILURE``)."""
    from fluidsalus.store import ExperimentStore
    from fluidsalus.trialgroup import executor as executor_module

    executor, device, trials = _two_computing(tmp_path, monkeypatch)
    monkeypatch.setattr(executor_module.Executor, "_node_gone", staticmethod(lambda d: d is device))
    executor._device_died(device, RuntimeError("The actor died because its node has died."))
    assert executor._suspects == set() and {t.status for t in trials} == {"PENDING"}
    assert all(t.death_blame == 0 and t.stuck_deaths == 0 and t.num_failures == 0 for t in trials)
    (died,) = ExperimentStore.open(str(tmp_path / "exp"), readonly=True).events("device_died")
    assert died.data["node_died"] is True and died.data["error"].endswith("left the cluster.")


def test_a_suspect_that_died_again_waits_behind_those_that_had_no_turn(tmp_path, monkeypatch):
    """The first suspect by arrival was the culprit: picked again after each death, it kept the blameless ones
    waiting with a slot free, for ever under max_failures=-1 (a review's real run, where Ray finished them)."""
    _, _, (first, _), submitted = _two_suspects(tmp_path, monkeypatch)
    first.stuck_deaths += 1  # "a" died once more on its own turn
    assert submitted() == ["b"]


def _join_replacement(executor, device) -> None:
    """The loop's plan while a dead device's replacement starts, then the replacement's join (``_join``)."""
    executor._dispatch()
    device.alive, device.start_ref, executor._dirty = True, None, True


@pytest.mark.parametrize("running", ["a", "z"])  # its id sorts before, or after, the prefetched trial's
def test_a_dead_devices_trials_keep_no_device_and_restart_in_the_same_order_whatever_their_ids(tmp_path,
                                                                                            monkeypatch, running):
    """F1 (h245): ``_device_died`` requeued a device's trials one at a time in id order, and a retry kept its
    device only while ``_computing_load()`` counted fewer others there: the trials not yet requeued, not those
    already requeued. One device of one slot, the running trial charged with the death (a retry) and ``b``
    prefetched behind it: running ``a``, the retry was queued and ``b`` kept the device; running ``z``, both kept
    it. (The next plan, made while the replacement starts, dropped it from both, so they came out the same; a held
    suspect's was kept: the next test.) No trial keeps a device that is not up now, and the planner places them
    afresh, in the same order whatever their ids."""
    from fractions import Fraction

    from fluidsalus.gpu.host import EV_START
    from fluidsalus.trialgroup import executor as executor_module
    from fluidsalus.trialgroup.dispatch import DEATHS_PER_FAILURE

    executor, store = _offline_executor(tmp_path)
    executor.settings.max_failures = 1
    device = executor._devices[0]
    _queue(executor, store, _trial(running), _trial("b", seq=1))
    for tid in (running, "b"):
        executor.searcher.on_trial_add(tid, "g", {})
    executor._dispatch()
    executor._handle(device, [(EV_START, running, 0, 0.5), _result_event(0, 1, trial_id=running)])
    trial = executor.trials[running]  # it died here once before: this death is its failure (DEATHS_PER_FAILURE)
    trial.death_point, trial.death_run = trial.last_iteration, trial.last_iteration - trial.attempt_start
    trial.death_blame = Fraction(DEATHS_PER_FAILURE - 1)
    monkeypatch.setattr(executor_module, "start_device_actor", lambda *args: _FakeActor())
    before = len(store.events("place"))
    executor._device_died(device, RuntimeError("the process died"))
    restarts = {e.trial_id: e.data["reason"] for e in store.events("trial_restart")}
    assert restarts == {running: "retry", "b": "device_died"}
    assert executor.trials[running].devices == executor.trials["b"].devices == ()
    _join_replacement(executor, device)
    executor._dispatch()
    placed = [(e.trial_id, e.data["action"]) for e in store.events("place")][before:]
    assert placed == [(running, "start"), ("b", "prefetch")]


def test_a_held_suspect_of_a_dead_device_does_not_start_past_its_replacements_slots(tmp_path, monkeypatch):
    """A suspect held back (``_held_suspects``) is left out of the plans, so it kept the dead device past the plans
    that drop a device that is not up (``_planned``): released once the first suspect got past its death point,
    the planner kept it there and it started (``restart``) beside the two trials computing in the replacement's
    two slots. It now waits as any queued trial: prefetched behind them."""
    from fluidsalus.gpu.host import EV_START
    from fluidsalus.trialgroup import executor as executor_module

    executor, store = _offline_executor(tmp_path, slots=2)
    device = executor._devices[0]
    _queue(executor, store, _trial("a"), _trial("b", seq=1), _trial("c", seq=2))
    for tid in "abc":
        executor.searcher.on_trial_add(tid, "g", {})
    executor._dispatch()  # a and b start, c is prefetched
    executor._handle(device, [(EV_START, "a", 0, 0.5), (EV_START, "b", 0, 0.5), _result_event(0, 1),
                              _result_event(0, 1, trial_id="b")])
    monkeypatch.setattr(executor_module, "start_device_actor", lambda *args: _FakeActor())
    executor._device_died(device, RuntimeError("the process died"))
    assert executor._suspects == {"a", "b"}
    _join_replacement(executor, device)
    executor._dispatch()  # a (the first suspect) and c start; b waits
    executor._handle(device, [(EV_START, "a", 1, 2.0), (EV_START, "c", 1, 2.0), _result_event(1, 2)])
    assert executor._suspects == {"b"}  # a got past its death point: b is let go
    before = len(store.events("place"))
    executor._dirty = True
    executor._dispatch()
    assert [(e.trial_id, e.data["action"]) for e in store.events("place")][before:] == [("b", "prefetch")]


def test_a_held_suspect_that_names_a_dead_device_drops_it_as_any_queued_trial(tmp_path, monkeypatch):
    """``_planned`` dropped a dead device from queued trials only after it had skipped the held suspects: one that
    still named the device (none does since ``_requeue`` clears it, h250) kept it while held. The check now comes
    first."""
    from fluidsalus.gpu.host import EV_START
    from fluidsalus.trialgroup import executor as executor_module

    executor, store = _offline_executor(tmp_path, slots=2)
    device = executor._devices[0]
    _queue(executor, store, _trial("a"), _trial("b", seq=1))
    for tid in "ab":
        executor.searcher.on_trial_add(tid, "g", {})
    executor._dispatch()
    executor._handle(device, [(EV_START, "a", 0, 0.5), (EV_START, "b", 0, 0.5)])
    monkeypatch.setattr(executor_module, "start_device_actor", lambda *args: _FakeActor())
    executor._device_died(device, RuntimeError("the process died"))
    held = executor._held_suspects()
    assert held and not device.alive
    for tid in held:
        executor.trials[tid].devices = (0,)  # (as a suspect kept it before _requeue cleared it)
    states = executor._planned()
    assert not held & states.keys() and all(executor.trials[tid].devices == () for tid in held)


def test_a_resumed_trial_paused_at_its_budget_waits_for_its_searcher(tmp_path):
    """A resume queued it with nothing to run before its budget: the planner never starts such a trial, so it
    waited in the queue, and the run, for ever (a helper's run ended only at its time budget)."""
    from fluidsalus.api import _load_trials
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.store import PAUSED
    from fluidsalus.trialgroup.executor import Executor, ExecutorSettings

    _, store, _ = _paused_at_its_budget_with_a_checkpoint(tmp_path)
    resumed = Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store,
                       [DeviceSpec("cpu:0", "cpu", 0, 1)], ExecutorSettings("exp", str(tmp_path / "exp"), "f",
                                                                            verbose=0), trials=_load_trials(store))
    trial = resumed.trials["a"]
    assert trial.status == PAUSED and "a" not in resumed.pending and trial.last_iteration == 2


def test_an_exploit_the_runs_end_cancels_leaves_the_trials_own_checkpoint_whole(tmp_path):
    """The source's checkpoint was copied over the trial's own of the same iteration when the exploit was decided:
    a run that ended before the trial's attempt did left it TERMINATED with its own config and score, and another
    trial's weights (and score) as its checkpoint."""
    from fluidsalus.gpu.host import EV_END, EV_RESULT, EV_START, OUT_STOPPED
    from fluidsalus.searchers._base import ExploitRequest

    executor, store = _offline_executor(tmp_path, n_devices=2)
    for index, (tid, score) in enumerate((("a", 0.9), ("b", 0.1))):
        trial = _placed_trial(executor, store, tid, devices=(index,), seq=index, budget=4)
        os.makedirs(os.path.join(trial.trial_dir, "checkpoint_000004"))
        with open(os.path.join(trial.trial_dir, "checkpoint_000004", "weights"), "w") as f:
            f.write(f"weights of {tid}")
        metrics = {"training_iteration": 4, "time_total_s": 4.0, "score": score,
                   "checkpoint_dir_name": "checkpoint_000004"}
        executor._handle(executor._devices[index], [(EV_START, tid, 0, 0.5), (EV_RESULT, tid, 0, 4.0, metrics, True,
                                                                             False)])
    requests = [ExploitRequest("b", "a", 4, 4.0, {"lr": 0.5}, 8, "pbt-exploit-0")]
    executor.searcher.take_exploits = lambda: [requests.pop()] if requests else []
    executor._take_groups()
    executor.settings.time_budget_s = 0.0  # the run ends before b's attempt does
    executor._check_end()
    executor._handle(executor._devices[1], [(EV_END, "b", 0, 9.0, OUT_STOPPED, None, None)])
    b = {r.trial_id: r for r in store.trials()}["b"]
    with open(os.path.join(b.checkpoint_path, "weights")) as f:
        assert f.read() == "weights of b"
    assert [(c["iteration"], c["metrics"]["score"]) for c in store.checkpoints("b")] == [(4, 0.1)]



def _two_checkpointed_at_4(executor: Any, store: Any) -> None:
    """Place trials ``a`` (score 0.9) and ``b`` (0.1) on devices 0 and 1 of an offline executor; each reports its
    4th iteration (its budget) with a checkpoint folder on disk."""
    from fluidsalus.gpu.host import EV_RESULT, EV_START

    for index, (tid, score) in enumerate((("a", 0.9), ("b", 0.1))):
        trial = _placed_trial(executor, store, tid, devices=(index,), seq=index, budget=4)
        os.makedirs(os.path.join(trial.trial_dir, "checkpoint_000004"))
        metrics = {"training_iteration": 4, "time_total_s": 4.0, "score": score,
                   "checkpoint_dir_name": "checkpoint_000004"}
        executor._handle(executor._devices[index], [(EV_START, tid, 0, 0.5), (EV_RESULT, tid, 0, 4.0, metrics, True,
                                                                             False)])

def test_an_exploit_whose_source_checkpoint_is_gone_is_cancelled_with_a_warning_and_an_event(tmp_path, caplog):
    """It was cancelled without a word: the trial went on with its own config, and nothing said why (a helper's
    multi-node run, where the source's checkpoint was on another node's disk)."""
    import shutil

    from fluidsalus.searchers._base import ExploitRequest

    executor, store = _offline_executor(tmp_path, n_devices=2)
    _two_checkpointed_at_4(executor, store)
    shutil.rmtree(os.path.join(executor.trials["a"].trial_dir, "checkpoint_000004"))
    requests = [ExploitRequest("b", "a", 4, 4.0, {"lr": 0.5}, 8, "pbt-exploit-0")]
    executor.searcher.take_exploits = lambda: [requests.pop()] if requests else []
    cancelled = []
    executor.searcher.cancel_exploit = cancelled.append
    with caplog.at_level("WARNING", logger="fluidsalus.trialgroup.executor"):
        executor._take_groups()
    assert cancelled == ["b"] and "b" not in executor._restarts
    assert "trial b does not exploit trial a: its checkpoint of iteration 4 is not found" in caplog.text
    (event,) = store.events("exploit_cancelled")
    assert (event.trial_id, event.data) == ("b", {"source": "a", "source_iteration": 4, "reason": "no_checkpoint"})


def test_an_out_of_memory_readmission_counts_its_attempt_from_the_checkpoint_it_resumes_at(tmp_path):
    """The re-admitted trial starts again in the same attempt; its start set where the attempt resumes to its last
    result's iteration, so a device death while it redid iterations counted as no progress (the death rule)."""
    from fluidsalus.gpu.host import EV_LANE, EV_RESULT, EV_START

    executor, store = _offline_executor(tmp_path)
    trial = _placed_trial(executor, store, "a")
    batch = [(EV_START, "a", 0, 0.5)]
    for i in range(1, 6):
        batch.append((EV_RESULT, "a", 0, float(i), {"training_iteration": i, "time_total_s": float(i)}, False, False))
    executor._handle(executor._devices[0], batch)
    executor._handle(executor._devices[0], [
        (EV_LANE, "a", 0, 6.0, "oom_readmit", {"action": "resize", "from_iteration": 3, "error": "MemoryError"}),
        (EV_START, "a", 0, 6.1)])
    assert (trial.attempt, trial.attempt_start, trial.last_iteration) == (0, 3, 5)


def test_a_stopper_that_cannot_be_pickled_since_leaves_restarted_trials_to_the_devices_copies(caplog) -> None:
    """A continuing attempt takes the driver's copy of the stopper (``TrialSpec.stop_state``); one whose state
    cannot be pickled any more (a lock it made since the start) must not end the run: the attempt goes without,
    with one warning."""
    import logging
    import threading

    from fluidsalus.trialgroup.executor import Executor

    class Stopper:
        def __init__(self) -> None:
            self.seen = 0

        def __call__(self, trial_id, result) -> bool:
            return False

        def stop_all(self) -> bool:
            return False

    executor = Executor.__new__(Executor)
    executor.settings = types.SimpleNamespace(stopper=Stopper())
    executor._stop_state_failed = False
    assert pickle.loads(executor._stop_state()).seen == 0
    executor.settings.stopper.lock = threading.Lock()
    with caplog.at_level(logging.WARNING, logger="fluidsalus.trialgroup.executor"):
        assert executor._stop_state() is None and executor._stop_state() is None
    assert caplog.text.count("the stopper's state cannot be sent with a restarted trial") == 1


def test_a_resumed_run_whose_search_ended_says_so(tmp_path, capsys):
    """A resume of a run whose time budget (stop_all, fail_fast) ended its search proposes no new trial, as Ray's
    restored search: a larger time_budget_s or num_samples then asked for nothing without a word (h174's B1). It says
    what it ends: the trials left to run end unstarted, and with none left it has nothing to run (it said trials
    "end unstarted" on every such resume, a plain one of a finished run's store too: h201)."""
    from fluidsalus.gpu.device import DeviceSpec
    from fluidsalus.searchers import RandomSearch
    from fluidsalus.trialgroup.executor import EXPERIMENT_ENDING_EVENT, SEARCH_ENDED_KEY, Executor, ExecutorSettings

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, None, None)
    store.add_events([(1.0, EXPERIMENT_ENDING_EVENT, None, None, {"reason": "time_budget", SEARCH_ENDED_KEY: True})])

    def resumed(verbose: int, *left: str) -> Executor:
        return Executor(cloudpickle.dumps((lambda config: None, None)), RandomSearch({"x": 1}), store,
                        [DeviceSpec("cpu:0", "cpu", 0, 1)], ExecutorSettings("exp", str(tmp_path / "exp"), "f",
                                                                            verbose=verbose),
                        trials=[_trial("a", status="TERMINATED"), *(_trial(t, status="PENDING") for t in left)])

    head = "fluidsalus: the run this resumes ended (time budget) and its search with it; as a restored Ray Tune run, "
    assert resumed(1)._search_ended
    assert capsys.readouterr().out == head + "this one proposes no new trial, and has no trial left to run\n"
    resumed(1, "b")
    assert capsys.readouterr().out == head + ("this one ends at once: no new trial is proposed, and the 1 trial it "
                                              "would run again ends unstarted\n")
    resumed(1, "b", "c")
    assert "and the 2 trials it would run again end unstarted\n" in capsys.readouterr().out
    assert resumed(0)._search_ended and capsys.readouterr().out == ""


@pytest.mark.parametrize("name", ["counted", ""])
def test_a_trial_keeps_the_name_trial_name_gave_it_when_it_was_created(tmp_path, name: str):
    """Ray asks ``trial_name_creator`` once per trial and keeps its name; fluidsalus asked ``trial_name`` again for
    the device's spec and each failure's lines, raise and ``error.pkl``: a namer that counts its calls gave one trial
    four names (h188's run_names.py). An empty name names no trial: its id, as ``None`` (Ray's ``str(trial)``
    falls back so too), where ``Result.error`` said ``Trial  failed``."""
    executor, store = _offline_executor(tmp_path)
    calls: list[str] = []

    def namer(trial_id: str) -> str:
        calls.append(trial_id)
        return f"{name}{len(calls)}" if name else ""

    executor.settings.trial_name = namer
    executor._take_groups()
    (trial,) = executor.trials.values()
    expected = f"{name}1" if name else trial.trial_id
    assert executor._shown_name(trial.trial_id) == expected
    assert executor._spec_for(trial).trial_name == (expected if name else f"f_{trial.trial_id}")
    assert store.trial_names() == ({trial.trial_id: expected} if name else {})
    assert calls == [trial.trial_id]  # asked once, at the trial's creation


def test_sigint_held_holds_the_front_ends_sigusr1_too_and_a_blocks_own_error_comes_out():
    """The Tune front end takes SIGUSR1 as a Ctrl-C (``StopSignals``): one that landed mid-batch lost the rest of
    the batch (a logger's rows), as a Ctrl-C did before ``sigint_held``; it is held alike. A block that raises an
    error of its own with a signal held ends with its error (the signal counted), as Ray's first Ctrl-C only sets a
    flag and the step's error (a callback's ``TuneError``) comes out; the ``KeyboardInterrupt`` took its place, and
    ``fit()`` returned as after a plain Ctrl-C (h190's F2, F3)."""
    import signal

    from fluidsalus.trialgroup.executor import sigint_held
    from fluidsalus.tune._interrupt import StopSignals

    after: list[int] = []
    with StopSignals() as signals, pytest.raises(KeyboardInterrupt):
        with sigint_held():
            os.kill(os.getpid(), signal.SIGUSR1)
            after.append(signals.received)
    assert after == [0] and signals.received == 1
    with StopSignals() as signals, pytest.raises(ValueError, match="the batch's own"):
        with sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            raise ValueError("the batch's own error")
    assert signals.received == 1 and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_paused_trial_restarted_off_any_device_is_told_pending_before_its_new_attempt_starts(tmp_path):
    """A trial paused off any device (preempted) that PBT exploits is requeued at once (``_stop_exploited``): the
    callbacks are told it is ``PENDING`` (``Callback.on_trial_status``) before the plan can start its new attempt.
    h242's first version told it at the end of the next batch handled, after that batch's ``on_trial_start`` of the
    new attempt: ``fluidsalus.tune``'s view of the running trial then said ``PENDING`` until its next result (h246)."""
    from fluidsalus.gpu.host import EV_START
    from fluidsalus.searchers._base import ExploitRequest

    executor, store = _offline_executor(tmp_path, n_devices=2)
    told: list[tuple[str, ...]] = []

    class Told(EngineCallback):
        def on_trial_start(self, trial_id, config, attempt):
            told.append(("start", trial_id))

        def on_trial_status(self, trial_id, status):
            told.append(("status", trial_id, status))

    executor.settings.callbacks.append(Told())
    _two_checkpointed_at_4(executor, store)
    b, device = executor.trials["b"], executor._devices[1]
    assert b.status == PAUSED
    b.placed_on = b.devices = ()  # (preempted: paused off any device)
    device.assigned.discard("b")
    requests = [ExploitRequest("b", "a", 4, 4.0, {"lr": 0.5}, 8, "pbt-exploit-0")]
    executor.searcher.take_exploits = lambda: [requests.pop()] if requests else []
    told.clear()
    executor._take_groups()
    assert b.status == PENDING
    executor._dispatch()
    b.placed_on = b.devices = (1,)
    device.assigned.add("b")
    executor._handle(device, [(EV_START, "b", 1, 5.0)])
    assert [event for event in told if event[1] == "b"] == [("status", "b", PENDING), ("start", "b")]
