"""Lane bookkeeping: the Salus rule, best fit, dissolution, the queue, estimate changes, OOM; property tests."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.lanes import (
    ACT_ADMIT,
    ACT_FAIL,
    ACT_MOVE,
    ACT_RESIZE,
    ACT_STAY,
    ACT_WAIT,
    EV_ADMIT,
    EV_FAIL,
    EV_LANE_CLOSE,
    EV_LANE_OPEN,
    EV_LANE_RESIZE,
    EV_LEAVE,
    EV_OOM,
    EV_WAIT,
    LaneError,
    LaneInvariantError,
    LaneManager,
    TrialTooLargeError,
    admits,
    lane_requirement,
)


def kinds(events):
    return [e[0] for e in events]


# ----------------------------------------------------------------------------------------- the rule


def test_admits_is_the_salus_rule():
    # empty lane: P_j + T_j <= C
    assert admits([], [], 3, 7, 10)
    assert not admits([], [], 3, 8, 10)
    # members P=2,T=5 and P=1,T=3: 2+1 + 4 + max(5,3,T_j)
    assert admits([2, 1], [5, 3], 2, 4, 10)  # 3+2+5 = 10
    assert not admits([2, 1], [5, 3], 3, 4, 10)  # 3+3+5 = 11
    assert admits([2, 1], [5, 3], 1, 6, 10)  # 3+1+6 = 10: the candidate's T is the max
    assert not admits([2, 1], [5, 3], 1, 7, 10)
    assert lane_requirement([], []) == 0
    assert lane_requirement([2, 1], [5, 3]) == 8


# ------------------------------------------------------------------------------------------ best fit


def test_new_lane_of_exactly_p_plus_t_then_smallest_fitting_lane():
    m = LaneManager(100, max_lanes=2, grow_lanes=False)
    a = m.admit("a", 10, 30)
    assert (a.lane_id, a.capacity, a.new_lane) == (0, 40, True)
    b = m.admit("b", 5, 20)
    assert (b.lane_id, b.capacity, b.new_lane) == (1, 25, True)
    assert m.unreserved == 35
    # max_lanes reached: the smallest lane where the rule holds. Both admit c (lane 1: 5+0+20 = 25 <= 25,
    # lane 0: 10+0+30 = 40 <= 40): lane 1 is smaller.
    c = m.admit("c", 0, 20)
    assert (c.lane_id, c.new_lane) == (1, False)
    # d fits neither (lane 1: 5+4+20 = 29 > 25, lane 0: 10+4+30 = 44 > 40) and may not open a third lane
    assert m.admit("d", 4, 20) is None
    m.check_invariants()


def test_best_fit_picks_the_smallest_lane_that_admits():
    m = LaneManager(100, max_lanes=2, grow_lanes=False)
    m.admit("big", 10, 50)  # lane 0, 60
    m.admit("small", 2, 10)  # lane 1, 12
    # lanes full; x (P=1, T=9): lane 1 gives 2+1+10 = 13 > 12, lane 0 gives 10+1+50 = 61 > 60 -> waits
    assert m.admit("x", 1, 9) is None
    assert m.waiting == ("x",)
    m.leave("x")
    # y (P=0, T=10): lane 1: 2+0+10 = 12 <= 12 (smallest) although lane 0 admits it too
    y = m.admit("y", 0, 10)
    assert (y.lane_id, y.new_lane) == (1, False)
    m.check_invariants()


def test_a_new_lane_needs_unreserved_memory_and_a_free_lane_slot():
    m = LaneManager(50, max_lanes=4, grow_lanes=False)
    m.admit("a", 10, 30)  # 40 reserved, 10 left
    p = m.admit("b", 2, 8)  # exactly the unreserved 10: new lane
    assert p.new_lane and m.unreserved == 0
    # no unreserved memory: existing lanes only; a (10+T30, cap 40) admits P=0,T=30
    assert m.admit("c", 0, 30).lane_id == 0
    m.check_invariants()


def test_empty_lane_dissolves_and_the_queue_is_retried_in_order():
    m = LaneManager(100, max_lanes=1, grow_lanes=False)
    m.admit("a", 10, 40)  # lane 0 (50)
    assert m.admit("b", 30, 30) is None  # 10+30+40 = 80 > 50
    assert m.admit("c", 0, 1) is None  # strict FIFO: behind b although it would fit
    m.drain_events()
    placed = m.leave("a")
    assert [(pl.trial_id, pl.lane_id, pl.capacity) for pl in placed] == [("b", 1, 60), ("c", 1, 60)]
    assert kinds(m.drain_events()) == [EV_LEAVE, EV_LANE_CLOSE, EV_LANE_OPEN, EV_ADMIT, EV_ADMIT]
    assert m.waiting == ()
    m.check_invariants()


def test_backfill_lets_a_fitting_trial_pass_a_waiting_one():
    m = LaneManager(100, max_lanes=1, backfill=True, grow_lanes=False)
    m.admit("a", 10, 40)
    assert m.admit("b", 30, 30) is None
    assert m.admit("c", 0, 1).lane_id == 0
    m.check_invariants()


def test_leaving_the_queue_lets_the_next_one_in_under_fifo():
    m = LaneManager(100, max_lanes=1, grow_lanes=False)
    m.admit("a", 10, 40)
    assert m.admit("b", 30, 30) is None
    assert m.admit("c", 0, 1) is None
    placed = m.leave("b")
    assert [pl.trial_id for pl in placed] == ["c"]
    m.check_invariants()


def test_misuse_is_refused():
    with pytest.raises(ConfigError, match="max_lanes"):
        LaneManager(100, max_lanes=0, grow_lanes=False)
    with pytest.raises(ConfigError, match="capacity_bytes"):
        LaneManager(-1, max_lanes=1, grow_lanes=False)
    m = LaneManager(100, max_lanes=1, grow_lanes=False)
    m.admit("a", 1, 1)
    with pytest.raises(LaneError, match="already"):
        m.admit("a", 1, 1)
    with pytest.raises(LaneError, match="p: must be"):
        m.admit("b", -1, 1)
    with pytest.raises(TrialTooLargeError, match="cannot run here"):
        m.admit("huge", 60, 41)
    with pytest.raises(LaneError, match="neither"):
        m.leave("nobody")
    with pytest.raises(LaneError, match="not placed"):
        m.on_oom("nobody")
    assert "huge" not in m


# --------------------------------------------------------------------------------- estimate changes


def test_sole_member_lane_tracks_its_estimate():
    m = LaneManager(100, max_lanes=2, grow_lanes=False)
    m.admit("a", 10, 50)  # a first, conservative guess
    m.drain_events()
    d = m.update_estimate("a", 10, 20)
    assert (d.action, d.placement.capacity) == (ACT_RESIZE, 30)
    assert (EV_LANE_RESIZE, 0, 60, 30) in m.drain_events()
    d = m.update_estimate("a", 10, 20)
    assert d.action == ACT_STAY
    d = m.update_estimate("a", 20, 70)  # grows into unreserved memory
    assert (d.action, d.placement.capacity) == (ACT_RESIZE, 90)
    m.check_invariants()


def test_shared_lane_estimate_changes():
    m = LaneManager(100, max_lanes=1, grow_lanes=False)
    m.admit("a", 10, 50)  # lane 0 (60)
    assert m.admit("b", 0, 50).lane_id == 0  # 10 + 0 + 50 = 60
    # still within the lane: stay
    assert m.update_estimate("b", 0, 40).action == ACT_STAY
    # needs 10 + 5 + 50 = 65: grows by 5 from the 40 unreserved
    d = m.update_estimate("b", 5, 40)
    assert (d.action, d.placement.capacity) == (ACT_RESIZE, 65)
    # needs 10 + 50 + 50 = 110 > 65 + 35: cannot grow, cannot go anywhere else -> waits at the queue front
    assert m.admit("c", 1, 1) is None  # 10+5+1 + 50 = 66 > 65 and no second lane (max_lanes=1)
    d = m.update_estimate("b", 50, 40)
    assert d.action == ACT_WAIT and d.placement is None
    assert m.waiting[0] == "b"  # ahead of c: it was running
    assert m.lane_of("b") is None
    m.check_invariants()


def test_a_trial_that_no_longer_fits_moves_to_another_lane():
    m = LaneManager(100, max_lanes=2, grow_lanes=False)
    m.admit("a", 10, 50)  # lane 0 (60)
    m.admit("b", 0, 40)  # lane 1 (40), nothing unreserved
    assert m.admit("c", 0, 50).lane_id == 0
    d = m.update_estimate("c", 0, 40)  # still fits: 10 + 0 + 50
    assert d.action == ACT_STAY
    # lane 0 would need 10 + 0 + 55 = 65 > 60, nothing unreserved, lane 1 needs 0 + 10 + 55 > 40: a waits
    d = m.update_estimate("a", 10, 55)
    assert d.action == ACT_WAIT and m.waiting == ("a",)
    m.check_invariants()
    m2 = LaneManager(100, max_lanes=2, grow_lanes=False)
    m2.admit("a", 0, 60)  # lane 0 (60)
    m2.admit("b", 0, 40)  # lane 1 (40)
    assert m2.admit("c", 0, 30).lane_id == 1  # smallest fitting lane: 0 + 0 + 40 <= 40
    d = m2.update_estimate("c", 0, 50)  # lane 1 needs 50 > 40, no room: moves to lane 0 (0+0+60)
    assert (d.action, d.placement.lane_id) == (ACT_MOVE, 0)
    m2.check_invariants()


def test_estimate_of_a_waiting_trial_and_too_large_estimates():
    m = LaneManager(100, max_lanes=1, grow_lanes=False)
    m.admit("a", 10, 50)
    assert m.admit("w", 50, 50) is None
    d = m.update_estimate("w", 0, 40)  # now fits lane 0: 10 + 0 + 50
    assert (d.action, d.placement.lane_id) == (ACT_ADMIT, 0)
    d = m.update_estimate("w", 60, 50)  # 110 > the device: fail, forgotten
    assert d.action == ACT_FAIL and "w" not in m
    assert m.drain_events()[-1][0] == EV_FAIL
    m.check_invariants()


def test_a_lower_estimate_lets_waiting_trials_in():
    m = LaneManager(100, max_lanes=1, grow_lanes=False)
    m.admit("a", 10, 50)
    m.admit("b", 0, 50)
    assert m.admit("c", 5, 5) is None  # 10+0+5 + 50 = 65 > 60
    d = m.update_estimate("b", 0, 10)  # shared lane stays 60; 10 + 5 + 50 = 65 still > 60
    assert d.admitted == ()
    d = m.update_estimate("a", 5, 50)  # 5 + 0 + 5 + 50 = 60: c gets in
    assert [pl.trial_id for pl in d.admitted] == ["c"]
    m.check_invariants()


# ------------------------------------------------------------------------------------------------ OOM


def test_oom_grows_the_estimate_then_fails_after_the_retry_limit():
    m = LaneManager(1000, max_lanes=2, max_oom_retries=2, grow_lanes=False)
    m.admit("a", 10, 20)
    m.drain_events()
    d = m.on_oom("a")
    assert d.action == ACT_RESIZE and m.estimate("a") == (20, 40)
    assert m.drain_events()[0] == (EV_OOM, "a", 0, 1, 20, 40)
    d = m.on_oom("a", factor=1.5)
    assert m.estimate("a") == (30, 60)
    d = m.on_oom("a")
    assert d.action == ACT_FAIL and "a" not in m
    assert "max_oom_retries=2" in m.drain_events()[-1][2]
    m.check_invariants()


def test_oom_clamps_to_the_whole_device_then_fails():
    m = LaneManager(100, max_lanes=2, grow_lanes=False)
    m.admit("a", 30, 30)
    d = m.on_oom("a")  # 60 + 60 > 100: clamped, P kept at 60
    assert m.estimate("a") == (60, 40) and d.placement.capacity == 100
    d = m.on_oom("a")
    assert d.action == ACT_FAIL and "whole device" in m.drain_events()[-1][2]


def test_oom_in_a_shared_lane_waits_for_a_lane_alone():
    m = LaneManager(100, max_lanes=1, grow_lanes=False)
    m.admit("a", 10, 40)  # lane 0 (50)
    m.admit("b", 0, 40)  # lane 0: 10 + 0 + 40 = 50
    d = m.on_oom("b")  # b -> (0, 80): lane 0 needs 10 + 0 + 80 = 90 <= 50 + 50 unreserved: it grows
    assert d.action == ACT_RESIZE and d.placement.capacity == 90
    m2 = LaneManager(100, max_lanes=1, grow_lanes=False)
    m2.admit("a", 20, 60)  # lane 0 (80), 20 unreserved
    m2.admit("b", 0, 60)
    d = m2.on_oom("b")  # (0, 120) -> clamped to (0, 100): lane needs 120 > 100 -> waits
    assert d.action == ACT_WAIT and m2.waiting == ("b",)
    placed = m2.leave("a")  # the lane dissolves: b gets the whole device, alone
    assert [(pl.trial_id, pl.capacity, pl.new_lane) for pl in placed] == [("b", 100, True)]
    m2.check_invariants()


def test_oom_grows_t_to_at_least_the_allocation_that_failed():
    m = LaneManager(1000, max_lanes=1, grow_lanes=False)
    m.admit("a", 10, 20)
    m.on_oom("a", needed=300)  # it held P and asked for 300 more: doubling (40) is known to fail again
    assert m.estimate("a") == (20, 300)
    m.on_oom("a", needed=100)  # a smaller request than double: doubling decides
    assert m.estimate("a") == (40, 600)
    m.on_oom("a", needed=5000)  # more than the device: clamped, P kept
    assert m.estimate("a") == (80, 920)
    with pytest.raises(LaneError, match="needed: must be an int >= 0"):
        m.on_oom("a", needed=-1)


def test_zero_estimates_still_grow_on_oom():
    m = LaneManager(10, max_lanes=1, grow_lanes=False)
    m.admit("a", 0, 0)
    m.on_oom("a")
    assert sum(m.estimate("a")) == 1


def test_events_cover_open_admit_wait_leave_close():
    m = LaneManager(10, max_lanes=1, grow_lanes=False)
    m.admit("a", 2, 8)
    m.admit("b", 5, 5)
    m.leave("a")
    m.leave("b")
    assert m.drain_events() == [
        (EV_LANE_OPEN, 0, 10),
        (EV_ADMIT, "a", 0, 2, 8),
        (EV_WAIT, "b", 5, 5),
        (EV_LEAVE, "a", 0),
        (EV_LANE_CLOSE, 0),
        (EV_LANE_OPEN, 1, 10),
        (EV_ADMIT, "b", 1, 5, 5),
        (EV_LEAVE, "b", 1),
        (EV_LANE_CLOSE, 1),
    ]
    assert m.drain_events() == []


def test_check_invariants_catches_corruption():
    m = LaneManager(10, max_lanes=1, grow_lanes=False)
    m.admit("a", 2, 8)
    m._lanes[0].members["a"] = (5, 8)
    with pytest.raises(LaneInvariantError, match="capacity"):
        m.check_invariants()


# ----------------------------------------------------------------------------------- property tests

CAPACITY = 1000
#: Estimates up to 60% of the device each, so that P + T sometimes exceeds it (refused or failed).
sizes = st.integers(min_value=0, max_value=CAPACITY * 6 // 10)


class LaneMachine(RuleBasedStateMachine):
    """Random arrivals, departures, estimate changes and OOMs. The caller's view (built only from what the
    manager returns) must always match the manager's, so no trial is lost or placed without the caller
    knowing; the invariants must hold after every step; and draining the device admits every waiting trial."""

    @initialize(max_lanes=st.integers(1, 4), backfill=st.booleans(), grow=st.booleans())
    def setup(self, max_lanes, backfill, grow):
        self.m = LaneManager(CAPACITY, max_lanes, backfill=backfill, max_oom_retries=2, grow_lanes=grow)
        self.placed: dict[str, int] = {}  # the caller's view: trial -> lane
        self.waiting: set[str] = set()
        self.next_id = 0

    def apply(self, placements):
        for pl in placements:
            self.waiting.discard(pl.trial_id)
            self.placed[pl.trial_id] = pl.lane_id

    def apply_decision(self, d):
        self.apply(d.admitted)
        self.placed.pop(d.trial_id, None)
        self.waiting.discard(d.trial_id)
        if d.action in (ACT_STAY, ACT_RESIZE, ACT_MOVE, ACT_ADMIT):
            self.placed[d.trial_id] = d.placement.lane_id
        elif d.action == ACT_WAIT:
            self.waiting.add(d.trial_id)
        else:
            assert d.action == ACT_FAIL

    @rule(p=sizes, t=sizes)
    def arrive(self, p, t):
        tid = f"t{self.next_id}"
        self.next_id += 1
        if p + t > CAPACITY:
            with pytest.raises(TrialTooLargeError):
                self.m.admit(tid, p, t)
            assert tid not in self.m
            return
        pl = self.m.admit(tid, p, t)
        if pl is None:
            self.waiting.add(tid)
        else:
            assert pl.new_lane or pl.lane_id in self.placed.values()
            self.placed[tid] = pl.lane_id

    @precondition(lambda self: self.placed or self.waiting)
    @rule(data=st.data())
    def leave(self, data):
        tid = data.draw(st.sampled_from(sorted(self.placed) + sorted(self.waiting)))
        self.placed.pop(tid, None)
        self.waiting.discard(tid)
        self.apply(self.m.leave(tid))

    @precondition(lambda self: self.placed or self.waiting)
    @rule(data=st.data(), p=sizes, t=sizes)
    def update(self, data, p, t):
        tid = data.draw(st.sampled_from(sorted(self.placed) + sorted(self.waiting)))
        self.apply_decision(self.m.update_estimate(tid, p, t))

    @precondition(lambda self: self.placed)
    @rule(data=st.data(), factor=st.sampled_from([1.25, 1.5, 2.0, 3.0]))
    def oom(self, data, factor):
        tid = data.draw(st.sampled_from(sorted(self.placed)))
        self.apply_decision(self.m.on_oom(tid, factor))

    @precondition(lambda self: self.placed)
    @rule(data=st.data())
    def split(self, data):
        tid = data.draw(st.sampled_from(sorted(self.placed)))
        before = self.m.lanes()
        pl = self.m.split(tid)
        if pl is None:
            assert self.m.lanes() == before
        else:
            assert pl.new_lane and len(self.m.lanes()) == len(before) + 1 <= self.m.max_lanes
            assert self.m.lanes()[-1].members == {tid: self.m.estimate(tid)}
            self.placed[tid] = pl.lane_id

    @invariant()
    def consistent(self):
        self.m.check_invariants()
        assert {tid: self.m.lane_of(tid) for tid in self.placed} == self.placed
        assert set(self.m.waiting) == self.waiting
        assert {tid for lane in self.m.lanes() for tid in lane.members} == set(self.placed)

    def teardown(self):
        # Liveness: trials leave one at a time; every waiting trial is admitted once enough memory frees.
        while self.placed:
            tid = min(self.placed)
            del self.placed[tid]
            self.apply(self.m.leave(tid))
            self.m.check_invariants()
        assert not self.waiting and not self.m.waiting
        assert not self.m.lanes() and self.m.unreserved == CAPACITY


LaneMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_lane_machine = LaneMachine.TestCase


def test_split_gives_a_time_slicing_trial_the_lane_slot_that_freed():
    m = LaneManager(100, max_lanes=2)
    assert m.admit("a", 10, 10).new_lane and m.admit("b", 10, 10).new_lane
    assert m.admit("c", 10, 10).lane_id == 0  # every lane open: c shares (grows) lane 0
    assert m.split("c") is None  # no free lane slot yet
    m.leave("b")  # b's lane dissolves: two lanes may run, one does
    pl = m.split("c")
    assert pl is not None and pl.new_lane and pl.lane_id == 2 and pl.capacity == 20
    assert {lane.lane_id: sorted(lane.members) for lane in m.lanes()} == {0: ["a"], 2: ["c"]}
    assert m.lanes()[0].capacity == 30  # the shared lane keeps its capacity
    assert m.split("a") is None and m.split("c") is None  # alone in their lanes now
    m.check_invariants()


def test_split_needs_unreserved_memory_and_a_placed_trial():
    m = LaneManager(50, max_lanes=3)
    m.admit("a", 10, 10)
    m.admit("b", 10, 10)
    assert m.admit("c", 10, 10).lane_id == 0  # no memory for a third lane: c grows lane 0 into the last 10
    assert len(m.lanes()) == 2 < m.max_lanes and m.unreserved == 0
    assert m.split("c") is None  # a lane slot is free, the memory is not
    with pytest.raises(LaneError, match="not placed"):
        m.split("nobody")


def test_growth_lets_identical_trials_share_a_lane_once_every_lane_is_open():
    # Two lanes may exist. Trials of P=10, T=5: lanes open at 15 each; the third joins the lane needing
    # the least growth (lane 0: sum P 10+10 + max T 5 = 25, so +10), the fourth grows lane 1 the same way.
    m = LaneManager(100, max_lanes=2)
    placements = [m.admit(t, 10, 5) for t in "abcd"]
    assert [(p.lane_id, p.capacity, p.new_lane) for p in placements] == [
        (0, 15, True), (1, 15, True), (0, 25, False), (1, 25, False)]
    assert m.reserved == 50
    m.check_invariants()


def test_growth_stops_at_the_device_capacity_and_then_trials_wait():
    m = LaneManager(40, max_lanes=1)
    assert m.admit("a", 10, 10).capacity == 20
    assert m.admit("b", 10, 10).capacity == 30
    assert m.admit("c", 10, 10).capacity == 40
    assert m.admit("d", 10, 10) is None and m.waiting == ("d",)
    assert [p.trial_id for p in m.leave("a")] == ["d"]
    m.check_invariants()
