"""Goodput accounting on hand-built event logs with known answers (docs/goodput.md has the definitions)."""

from __future__ import annotations

import math
import random

import pytest

from fluidsalus import goodput as gp
from fluidsalus.store import EventRow, ExperimentStore, ResultRow

DEV = "cpu:0"
MiB = 1 << 20


def ev(ts, what, trial=None, device=DEV, **data):
    return EventRow(ts, what, trial, device, data or None)


def res(trial, attempt, iteration, ts, dt, samples=10):
    return ResultRow(trial, attempt, iteration, ts, {"acc": 0.1 * iteration, "training_iteration": iteration,
                                                      "time_this_iter_s": dt, "num_samples": samples})


def scenario():
    """One device, 2 slots, 8 s of device time (100 -> finished 108).

    Lane 0: A and B time-slice ([101, 105]); B ends and A gets the turn at 105, runs out of memory at 105.5 and,
    having no checkpoint, redoes iterations 1 and 2 in the same attempt. Lane 1: C; it fails at 104.5, in the
    iteration it started at 104, and is retried from its checkpoint at iteration 1 in lane 2. D waits for a lane
    from 101 and is stopped at 102 without running.
    """
    events = [
        ev(100.0, "device_start", device=DEV, kind="cpu", slots=2),
        ev(101.0, "trial_start", "A", attempt=0), ev(101.0, "trial_start", "B", attempt=0),
        ev(101.0, "trial_start", "C", attempt=0),
        ev(101.0, "lane_open", lane=0, capacity=200), ev(101.0, "lane_admit", "A", detail=[0, 100, 100]),
        ev(101.0, "lane_resize", lane=0, old_capacity=200, capacity=300),
        ev(101.0, "lane_admit", "B", detail=[0, 100, 100]),
        ev(101.0, "lane_open", lane=1, capacity=50), ev(101.0, "lane_admit", "C", detail=[1, 20, 30]),
        ev(101.0, "lane_wait", "D", detail=[100, 100]),
        ev(102.0, "switch", "B", lane=0, **{"from": "A"}, latency_ms=2.0),
        ev(102.0, "lane_leave", "D", detail=[None]), ev(102.0, "trial_end", "D", attempt=0, outcome="stopped"),
        ev(103.0, "switch", "A", lane=0, **{"from": "B"}, latency_ms=4.0),
        ev(104.0, "switch", "B", lane=0, **{"from": "A"}, latency_ms=6.0),
        ev(104.5, "trial_restart", "C", attempt=1, reason="retry", from_iteration=1, error="RuntimeError: boom"),
        ev(104.5, "lane_leave", "C", detail=[1]), ev(104.5, "lane_close", lane=1),
        ev(104.6, "trial_start", "C", attempt=1),
        ev(104.6, "lane_open", lane=2, capacity=80), ev(104.6, "lane_admit", "C", detail=[2, 20, 30]),
        ev(105.0, "trial_end", "B", attempt=0, outcome="completed"),
        ev(105.0, "switch", "A", lane=0, **{"from": "B"}, latency_ms=8.0),
        ev(105.1, "lane_leave", "B", detail=[0]),
        ev(105.5, "lane_oom", "A", detail=[0, 1, 200, 200]),
        ev(105.5, "lane_resize", lane=0, old_capacity=300, capacity=400),
        ev(105.5, "oom_readmit", "A", action="resize", from_iteration=0, error="MemoryError"),
        ev(105.5, "trial_start", "A", attempt=0),
        ev(107.2, "trial_end", "C", attempt=1, outcome="completed"),
        ev(107.2, "lane_leave", "C", detail=[2]), ev(107.2, "lane_close", lane=2),
        ev(107.6, "trial_end", "A", attempt=0, outcome="completed"),
        ev(107.6, "lane_leave", "A", detail=[0]), ev(107.6, "lane_close", lane=0),
    ]
    results = [
        res("A", 0, 1, 102.0, 1.0), res("B", 0, 1, 103.0, 1.0), res("C", 0, 1, 103.0, 2.0),
        res("A", 0, 2, 104.0, 1.0), res("C", 0, 2, 104.0, 1.0), res("B", 0, 2, 105.0, 1.0),
        res("C", 1, 2, 106.0, 1.0), res("A", 0, 1, 106.5, 1.0), res("C", 1, 3, 107.0, 1.0),
        res("A", 0, 2, 107.5, 1.0),
    ]
    return results, events


FINISHED_AT = 108.0


@pytest.fixture
def activity():
    results, events = scenario()
    return gp.build_activity(results, events, finished_at=FINISHED_AT)


def test_device_figures_over_the_whole_run(activity):
    summary = gp.summarize(activity)
    assert (summary.start, summary.end) == (100.0, 108.0)
    [d] = summary.devices
    assert d.device == DEV and d.kind == "cpu" and d.slots == 2
    assert d.device_seconds == pytest.approx(8.0)
    assert d.iterations == 10 and d.useful_iterations == 7 and d.wasted_iterations == 3
    assert d.throughput == pytest.approx(10 / 8) and d.goodput == pytest.approx(7 / 8)
    assert d.goodput_fraction == pytest.approx(0.7)
    # Lane 0: [101, 105] + A's cut-short iteration [105, 105.5] + [105.5, 107.5] = 6.5 s; lane 1: [101, 104] +
    # C's cut-short iteration [104, 104.5] = 3.5 s; lane 2: [105, 107] = 2 s.
    assert d.lane_busy_s == pytest.approx(12.0)
    assert d.busy_s == pytest.approx(6.5)  # some lane busy over [101, 107.5]
    assert d.busy_fraction == pytest.approx(6.5 / 8)
    assert d.mean_busy_lanes == pytest.approx(12 / 8)
    assert d.slot_occupancy == pytest.approx(12 / 16)
    assert d.samples == 100 and d.samples_per_s == pytest.approx(12.5)
    assert d.useful_samples_per_s == pytest.approx(70 / 8)
    assert d.trials == 3


def test_switches_lanes_memory_and_waiting(activity):
    d = gp.summarize(activity).devices[0]
    assert d.switches == 4
    assert d.switch_latency_ms_p50 == pytest.approx(5.0)  # of 2, 4, 6, 8 ms
    assert d.switch_latency_ms_p99 == pytest.approx(7.94)  # 6 + 0.97 * (8 - 6)
    assert d.lanes_peak == 2
    # Open lanes: 2 over [101, 104.5], 1 over [104.5, 104.6], 2 over [104.6, 107.2], 1 over [107.2, 107.6].
    assert d.lanes_mean == pytest.approx((7.0 + 0.1 + 5.2 + 0.4) / 8)
    assert d.waiting_peak == 1
    # Reserved peaks after A's OOM: lane 0 at 400 plus lane 2 at 80. Used: lane 0 sum P + max T = 200 + 200,
    # lane 2 = 20 + 30: 450. At 101 both were 350.
    assert d.reserved_peak_bytes == 480
    assert d.used_peak_bytes == 450
    assert d.gpu_util_mean_pct is None and d.gpu_mem_used_peak_bytes is None  # no NVML on a CPU device


def test_waste_by_cause(activity):
    d = gp.summarize(activity).devices[0]
    assert set(d.wasted) == {gp.WASTE_OOM, gp.WASTE_RETRY}
    oom, retry = d.wasted[gp.WASTE_OOM], d.wasted[gp.WASTE_RETRY]
    assert (oom.iterations, oom.partial, oom.seconds) == (2, 1, pytest.approx(2.5))
    assert (retry.iterations, retry.partial, retry.seconds) == (1, 1, pytest.approx(1.5))
    wasted = {(s.trial_id, s.attempt, s.iteration, s.end) for s in activity.spans if not s.useful and not s.partial}
    assert wasted == {("A", 0, 1, 102.0), ("A", 0, 2, 104.0), ("C", 0, 2, 104.0)}
    # The iterations the failures cut short: C's third (since its result at 104), A's third (since its switch-in).
    cut = {(s.trial_id, s.attempt, s.iteration, s.lane, s.start, s.end, s.waste_cause)
           for s in activity.spans if s.partial}
    assert cut == {("C", 0, 3, 1, 104.0, 104.5, gp.WASTE_RETRY), ("A", 0, 3, 0, 105.0, 105.5, gp.WASTE_OOM)}
    # C's iteration 1 was never redone (the retry resumed from its checkpoint), so it stays useful.
    assert any(s.trial_id == "C" and s.iteration == 1 and s.useful for s in activity.spans)


def test_lanes_and_markers(activity):
    lanes = {lane.lane: lane for lane in gp.summarize(activity).lanes}
    assert set(lanes) == {0, 1, 2}
    assert lanes[0].busy_s == pytest.approx(6.5) and lanes[0].open_s == pytest.approx(6.6)
    assert lanes[0].occupancy == pytest.approx(6.5 / 6.6)
    assert lanes[0].iterations == 6 and lanes[0].trials == 2 and lanes[0].capacity_peak_bytes == 400
    assert lanes[1].busy_s == pytest.approx(3.5) and lanes[1].open_s == pytest.approx(3.5)
    assert lanes[2].busy_s == pytest.approx(2.0) and lanes[2].open_s == pytest.approx(2.6)
    assert [(s.trial_id, s.lane) for s in activity.spans if s.trial_id == "C"] == [
        ("C", 1), ("C", 1), ("C", 1), ("C", 2), ("C", 2)]
    marks = [(m.kind, m.trial_id, m.lane, m.ts) for m in activity.markers]
    assert marks == [(gp.MARK_FAILURE, "C", 1, 104.5), (gp.MARK_OOM, "A", 0, 105.5)]


def test_a_time_window(activity):
    d = gp.summarize(activity, window=(101.0, 103.0)).devices[0]
    assert d.device_seconds == pytest.approx(2.0)
    assert d.iterations == 3 and d.useful_iterations == 2  # A1 (wasted later), B1, C1 report in (101, 103]
    assert d.lane_busy_s == pytest.approx(4.0) and d.busy_fraction == pytest.approx(1.0)
    assert d.switches == 2 and d.waiting_peak == 1


def test_timeline_bins(activity):
    bins = [b for b in gp.timeline(activity, bin_s=2.0) if b.device == DEV]
    assert [(b.start, b.end) for b in bins] == [(100, 102), (102, 104), (104, 106), (106, 108)]
    assert [b.iterations for b in bins] == [1, 4, 2, 3]
    assert [b.useful_iterations for b in bins] == [0, 2, 2, 3]
    assert [b.device_seconds for b in bins] == pytest.approx([2, 2, 2, 2])
    assert [b.lane_busy_s for b in bins] == pytest.approx([2, 4, 3.5, 2.5])
    totals = [b for b in gp.timeline(activity, bin_s=2.0) if b.device == gp.TOTAL_DEVICE]
    # The rates spread each iteration over its span: [100, 102] holds A1 [101, 102] (wasted) and half of C1
    # [101, 103]; [102, 104] B1, C1's other half, A2 and C2 (both wasted); [104, 106] B2, C2 again and half of A's
    # redone A1 [105.5, 106.5]; [106, 108] its other half, C3 and A2 (counted at their reports alone, the
    # goodput read 0, 1, 1, 1.5: a helper saw short runs' curves flip between 0 and twice the rate).
    assert [b.throughput for b in bins] == pytest.approx([0.75, 1.75, 1.25, 1.25])
    assert [b.goodput for b in totals] == pytest.approx([0.25, 0.75, 1.25, 1.25])
    assert sum(b.throughput * b.device_seconds for b in bins) == pytest.approx(10)  # every iteration, once
    assert len(gp.timeline(activity)) == 2 * gp.DEFAULT_TIMELINE_BINS  # the device and the totals


@pytest.mark.parametrize("bin_s", [math.inf, 1e6, 8.0])
def test_a_bin_as_wide_as_the_run_or_wider_is_the_whole_run(activity, bin_s):
    """``inspect --bin inf`` gave one bin of NaN edges with no busy time (and 1e6 a bin past the run's end: a
    helper's audit)."""
    (only,) = [b for b in gp.timeline(activity, bin_s=bin_s) if b.device == DEV]
    assert (only.start, only.end) == (100, 108)
    assert only.iterations == 10 and only.lane_busy_s == pytest.approx(12)


def test_the_last_bin_ends_with_the_run_or_the_window(activity):
    """A width that does not divide the run made the last bin reach past its end (past ``--end`` too, counting
    time outside the window: a review)."""
    bins = [b for b in gp.timeline(activity, bin_s=7.9) if b.device == DEV]
    assert [(b.start, b.end) for b in bins] == [(100, pytest.approx(107.9)), (pytest.approx(107.9), 108)]
    window = [b for b in gp.timeline(activity, bin_s=2.0, window=(101.0, 104.0)) if b.device == DEV]
    assert [(b.start, b.end) for b in window] == [(101, 103), (103, 104)]
    assert sum(b.device_seconds for b in window) == pytest.approx(3)  # the window's, as its summary says


def test_timeline_bins_of_a_window_cover_only_the_window(activity):
    """``inspect --start/--end`` cut every figure but the timeline, which still covered the whole run, in bins
    as wide as the whole run's (a helper's audit)."""
    bins = [b for b in gp.timeline(activity, bin_s=1.0, window=(102.0, 104.0)) if b.device == DEV]
    assert [(b.start, b.end) for b in bins] == [(102, 103), (103, 104)]
    whole = {b.start: b for b in gp.timeline(activity, bin_s=1.0) if b.device == DEV}
    assert [b.iterations for b in bins] == [whole[102].iterations, whole[103].iterations]
    assert sum(b.iterations for b in bins) == 4  # those reported in (102, 104], as in the 2 s bin above
    default = [b for b in gp.timeline(activity, window=(101.0, 107.0)) if b.device == DEV]  # (the run's: 8 s)
    assert len(default) == gp.DEFAULT_TIMELINE_BINS and (default[0].start, default[-1].end) == pytest.approx(
        (101.0, 107.0))


def test_other_waste_causes_and_stopped_trials_stay_useful():
    events = [
        ev(0.0, "device_start", kind="cpu", slots=1),
        ev(4.5, "trial_restart", "E", attempt=1, reason="exploit", from_iteration=2),
        ev(10.0, "resume", None, device=None, unfinished=1),
        ev(2.5, "trial_end", "H", attempt=0, outcome="stopped"),
    ]
    events += [ev(0.5, "trial_start", t, attempt=a) for t in "EFGH" for a in (0, 1)]
    results = [res("E", 0, i, float(i), 1.0) for i in (1, 2, 3, 4)] + [res("E", 1, 3, 5.0, 1.0),
                                                                        res("E", 1, 4, 6.0, 1.0)]
    results += [res("F", 0, 1, 8.0, 0.5), res("F", 0, 2, 9.0, 0.5), res("F", 1, 1, 11.0, 0.5)]
    results += [res("G", 0, 1, 1.0, 0.25), res("G", 1, 1, 7.0, 0.25)]  # a redo no event explains
    results += [res("H", 0, 1, 1.5, 0.5), res("H", 0, 2, 2.5, 0.5)]  # stopped by the searcher at 2
    act = gp.build_activity(results, events)
    d = gp.summarize(act).devices[0]
    assert {k: (w.iterations, w.seconds) for k, w in d.wasted.items()} == {
        gp.WASTE_EXPLOIT: (2, 2.0), gp.WASTE_RESUME: (1, 0.5), gp.WASTE_OTHER: (1, 0.25)}
    assert all(s.useful for s in act.spans if s.trial_id == "H")
    assert [m.kind for m in act.markers] == [gp.MARK_EXPLOIT]
    assert d.device_seconds == pytest.approx(11.0)  # a running experiment: up to its last activity


def test_the_planners_restarts_place_no_failure_marker_and_a_moves_redone_iterations_are_its_waste():
    events = [
        ev(0.0, "device_start", kind="cpu", slots=1),
        ev(0.5, "trial_start", "M", attempt=0),
        ev(2.5, "trial_restart", "M", attempt=1, reason="move", from_iteration=1),
        ev(2.6, "trial_start", "M", attempt=1),
        ev(0.5, "trial_start", "W", attempt=0),
        ev(0.6, "trial_restart", "W", attempt=1, reason="withdrawn", from_iteration=0),
        ev(4.0, "trial_start", "W", attempt=1),
        ev(4.6, "trial_restart", "R", attempt=1, reason="retry", from_iteration=0),
    ]
    results = [res("M", 0, 1, 1.5, 1.0), res("M", 0, 2, 2.5, 1.0), res("M", 1, 2, 3.6, 1.0)]
    results += [res("W", 1, 1, 4.5, 0.5)]
    act = gp.build_activity(results, events)
    assert [(m.kind, m.trial_id) for m in act.markers] == [(gp.MARK_FAILURE, "R")]  # the retry only
    d = gp.summarize(act).devices[0]
    assert {k: w.iterations for k, w in d.wasted.items()} == {"move": 1}  # M's iteration 2, redone after it moved
    assert all(s.useful for s in act.spans if s.trial_id == "W")


def test_a_waste_is_the_restart_that_resumed_from_before_it_not_the_first_restart_after_it():
    """A restart from at or after an iteration undoes nothing of it. PBT trial T gives its place up at its
    checkpoint 6 (``turn``: nothing lost), runs 7 and 8, and is exploited from a source's checkpoint 3: 4..8 are
    redone, all lost to the exploit (4..6 used to be blamed on the turn, the first marker after their reports: the
    flaky test_a_trial_gives_its_place_up_only_from_a_checkpoint_at_its_point). U's turn from 4 after it reported 6
    does undo 5 and 6 (the turn's waste); V's marker of an older store, without ``from_iteration``, is named as it
    always was; W's redo after a restart from past it (no marker resumed from before it) names that marker."""
    events = [ev(0.0, "device_start", kind="cpu", slots=1)]
    events += [ev(0.1, "trial_start", t, attempt=a) for t in "TUVW" for a in (0, 1, 2)]
    events += [
        ev(6.5, "trial_restart", "T", attempt=1, reason="turn", from_iteration=6),
        ev(8.5, "trial_restart", "T", attempt=2, reason="exploit", from_iteration=3),
        ev(6.5, "trial_restart", "U", attempt=1, reason="turn", from_iteration=4),
        ev(8.5, "trial_restart", "U", attempt=2, reason="exploit", from_iteration=2),
        ev(2.5, "trial_restart", "V", attempt=1, reason="move"),
        ev(2.5, "trial_restart", "W", attempt=1, reason="move", from_iteration=2),
    ]
    results = [res("T", 0, i, float(i), 1.0) for i in range(1, 7)]
    results += [res("T", 1, i, float(i), 1.0) for i in (7, 8)]
    results += [res("T", 2, i, 5.0 + i, 1.0) for i in range(4, 13)]
    results += [res("U", 0, i, float(i), 1.0) for i in range(1, 7)]
    results += [res("U", 1, i, 5.75 + i / 4, 0.25) for i in (5, 6, 7, 8)]
    results += [res("U", 2, i, 6.0 + i, 1.0) for i in range(3, 9)]
    results += [res("V", 0, 1, 1.0, 0.5), res("V", 0, 2, 2.0, 0.5), res("V", 1, 2, 3.0, 0.5)]
    results += [res("W", 0, 1, 1.0, 0.5), res("W", 0, 2, 2.0, 0.5), res("W", 1, 2, 3.0, 0.5)]
    act = gp.build_activity(results, events)
    wasted = {(s.trial_id, s.attempt, s.iteration): s.waste_cause for s in act.spans if not s.useful}
    assert wasted == {
        **{("T", 0, i): gp.WASTE_EXPLOIT for i in (4, 5, 6)}, **{("T", 1, i): gp.WASTE_EXPLOIT for i in (7, 8)},
        ("U", 0, 5): "turn", ("U", 0, 6): "turn",  # redone in U's attempt 1, after its turn from 4
        **{("U", 1, i): gp.WASTE_EXPLOIT for i in (5, 6, 7, 8)}, ("U", 0, 3): gp.WASTE_EXPLOIT,
        ("U", 0, 4): gp.WASTE_EXPLOIT, ("V", 0, 2): "move", ("W", 0, 2): "move",
    }
    d = gp.summarize(act).devices[0]
    assert {k: w.iterations for k, w in d.wasted.items()} == {gp.WASTE_EXPLOIT: 11, "turn": 2, "move": 2}


def test_two_devices_totals_and_nvml():
    events = []
    results = []
    for i, device in enumerate(("cuda:0", "cuda:1")):
        trial = f"T{i}"
        events += [
            EventRow(0.0, "device_start", None, device, {"kind": "cuda", "slots": 4}),
            EventRow(1.0, "lane_open", None, device, {"lane": 0, "capacity": 100 * MiB}),
            EventRow(1.0, "lane_admit", trial, device, {"detail": [0, 60 * MiB, 20 * MiB]}),
            EventRow(1.0, "trial_start", trial, device, {"attempt": 0}),
            EventRow(2.0 + i, "switch", trial, device, {"lane": 0, "from": "x", "latency_ms": 1.0 + 2 * i}),
            EventRow(1.0, "nvml", None, device, {"gpu_util_pct": 40 + 20 * i, "mem_used": 1000 * (i + 1)}),
            EventRow(3.0, "nvml", None, device, {"gpu_util_pct": 60 + 20 * i, "mem_used": 500}),
            EventRow(5.0, "lane_leave", trial, device, {"detail": [0]}),
            EventRow(5.0, "lane_close", None, device, {"lane": 0}),
        ]
        results += [res(trial, 0, it, 1.0 + it, 1.0) for it in (1, 2, 3, 4)]
    act = gp.build_activity(results, events, finished_at=10.0)
    summary = gp.summarize(act)
    a, b = summary.devices
    assert (a.device, b.device) == ("cuda:0", "cuda:1")
    assert a.gpu_util_mean_pct == pytest.approx(50) and b.gpu_util_mean_pct == pytest.approx(70)
    assert a.gpu_mem_used_peak_bytes == 1000 and b.gpu_mem_used_peak_bytes == 2000
    t = summary.totals
    assert t.device == gp.TOTAL_DEVICE and t.slots == 8 and t.kind == "cuda"
    assert t.device_seconds == pytest.approx(20) and t.iterations == 8
    assert t.throughput == pytest.approx(8 / 20) and t.goodput == pytest.approx(8 / 20)
    assert t.busy_fraction == pytest.approx(8 / 20) and t.slot_occupancy == pytest.approx(8 / 80)
    assert t.lanes_peak == 2 and a.lanes_peak == 1  # both devices' lanes are open at once
    assert t.lanes_mean == pytest.approx(8 / 10)  # 2 lanes over 4 s of the 10 s window
    assert t.reserved_peak_bytes == 200 * MiB and t.used_peak_bytes == 160 * MiB
    assert t.switches == 2 and t.switch_latency_ms_p50 == pytest.approx(2.0)
    assert t.gpu_util_mean_pct == pytest.approx(60) and t.gpu_mem_used_peak_bytes == 3000


def test_results_without_lane_events_still_count():
    results = [res("Z", 0, 1, 2.0, 1.0), res("Z", 0, 2, 3.0, 1.0)]
    act = gp.build_activity(results, [])
    d = gp.summarize(act).devices[0]
    assert d.device == gp.UNKNOWN_DEVICE and d.iterations == 2 and d.busy_s == pytest.approx(2.0)
    assert d.lanes_peak == 0 and d.switches == 0 and d.switch_latency_ms_p50 is None


def test_a_trial_that_failed_before_its_first_report_counts_among_its_devices_trials():
    """Its cut-short iteration kept the device busy, and wasted, but the device showed 0 trials (a helper's
    audit: every trial of the run raised before reporting, each device 92% busy with ``trials=0``)."""
    events = [ev(0.0, "device_start", kind="cpu", slots=1), ev(0.5, "trial_start", "F", attempt=0),
              ev(1.5, "trial_end", "F", attempt=0, outcome="errored", error="ValueError: no")]
    d = gp.summarize(gp.build_activity([], events, finished_at=2.0)).devices[0]
    assert d.iterations == 0 and d.busy_s == pytest.approx(1.0) and d.wasted["failed"].partial == 1
    assert d.trials == 1


def test_malformed_events_are_skipped():
    events = [ev(0.0, "device_start", slots=1), ev(1.0, "lane_open"), ev(1.0, "lane_admit", "Z", detail=["x"]),
              ev(1.0, "lane_estimate", "Z", detail=None), ev(1.5, "switch", "Z", latency_ms="slow"),
              ev(1.5, "nvml", gpu_util_pct=None), ev(2.0, "lane_close", lane=None),
              ev(1.0, "trial_start", "Z", attempt=0)]
    act = gp.build_activity([res("Z", 0, 1, 2.0, None)], events)
    d = gp.summarize(act).devices[0]
    assert d.iterations == 1 and d.lanes_peak == 0 and d.switches == 0 and d.gpu_util_mean_pct is None
    assert d.busy_s == 0.0  # no time_this_iter_s: a zero-length turn


def test_empty_activity():
    act = gp.build_activity([], [])
    summary = gp.summarize(act)
    assert summary.devices == [] and summary.totals.iterations == 0 and summary.totals.throughput is None
    assert gp.timeline(act) == []


def test_the_same_numbers_through_a_real_store(tmp_path):
    results, events = scenario()
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([(t, i, {"x": i}) for i, t in enumerate("ABCD")])
    store.add_events([(e.ts, e.kind, e.trial_id, e.device, e.data) for e in events])
    store.add_results([(r.trial_id, r.attempt, r.iteration, r.ts, r.metrics) for r in results])
    store.set_experiment(status="FINISHED", finished_at=FINISHED_AT)
    activity, summary = gp.from_store(store)
    store.close()
    d = summary.devices[0]
    assert (d.iterations, d.useful_iterations, d.device_seconds) == (10, 7, pytest.approx(8.0))
    assert d.lane_busy_s == pytest.approx(12.0) and d.switches == 4 and d.reserved_peak_bytes == 480


def test_helpers():
    assert gp.percentile([], 50) is None
    assert gp.percentile([3.0], 99) == 3.0
    assert gp.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert gp.merge_intervals([(3, 4), (0, 1), (1, 2), (0.5, 1.5)]) == [(0, 2), (3, 4)]
    s = gp.StepSeries([(1.0, 2.0), (3.0, 5.0), (4.0, 0.0)])
    assert s.value_at(0.5) == 0 and s.value_at(3.0) == 5.0
    assert s.peak(0, 2) == 2.0 and s.peak(3.5, 10) == 5.0
    assert s.integral(0, 10) == pytest.approx(2 * 2 + 5 * 1)
    total = gp.StepSeries.summed([s, gp.StepSeries([(2.0, 1.0)])])
    assert total.value_at(2.5) == 3.0 and total.peak(0, 10) == 6.0


def _random_intervals(rng: random.Random, n: int, t0: float, t1: float) -> list[tuple[float, float]]:
    """``n`` sorted disjoint intervals in ``[t0, t1]`` (some touching, some of no length), as merge_intervals and
    intersect_intervals give lanes' busy time."""
    cuts = sorted(rng.uniform(t0, t1) for _ in range(2 * n))
    if n >= 2:
        cuts[2:4] = [cuts[2]] * 2  # (one of no length)
    return [(cuts[2 * i], cuts[2 * i + 1]) for i in range(n)]


def test_the_timelines_lane_seconds_per_bin_are_the_sums_they_were_to_the_last_bit() -> None:
    # (covered_per_bin reaches each interval once, where a sum of covered() per bin and lane reached each lane's
    # list once per bin: its floats must be those sums', added in the same order)
    rng = random.Random(7)
    for lanes_n, most, bins in ((0, 0, 5), (1, 30, 1), (3, 30, 7), (40, 30, 60), (300, 4, 7)):
        lanes = [_random_intervals(rng, rng.randint(0, most), 100.0, 160.0) for _ in range(lanes_n)]
        width = 60.0 / bins
        edges = [(100.0 + i * width, min(160.0, 100.0 + (i + 1) * width)) for i in range(bins)]
        expected = [sum(gp.covered(iv, b0, b1) for iv in lanes) for b0, b1 in edges]
        got = gp.covered_per_bin(lanes, edges)
        assert [(type(x), x.hex() if isinstance(x, float) else x) for x in got] == \
            [(type(x), x.hex() if isinstance(x, float) else x) for x in expected]


def test_a_series_peak_is_the_running_max_it_was() -> None:
    rng = random.Random(3)
    random_points = sorted((rng.choice([1.0, 2.0, 2.5, 3.0]), rng.choice([0, 1, 2, 2.0, 3, 0.0])) for _ in range(40))
    # (equal values of two types: the first met is kept, the value in force at w0 first)
    for points in (random_points, [(1.0, 2), (2.0, 2.0)], [(1.0, 0), (2.0, 3), (3.0, 3.0)]):
        _check_peaks(gp.StepSeries(points))


def _check_peaks(s: gp.StepSeries) -> None:
    points = list(s.points)
    for w0, w1 in ((0.0, 10.0), (1.0, 2.0), (1.0, 3.0), (2.0, 2.5), (2.5, 2.5), (3.0, 9.0), (0.0, 0.5)):
        best = s.value_at(w0)  # (peak's definition: the value at w0, then every point inside, first of equals kept)
        for ts, value in points:
            if w0 < ts <= w1:
                best = max(best, value)
        assert (s.peak(w0, w1), type(s.peak(w0, w1))) == (best, type(best)), (w0, w1)


def _data_parallel_start(other: str) -> list[EventRow]:
    """Two one-slot devices, DEV and ``other``, a lane on each, and trial T's rank 0 on DEV and rank 1 on ``other``
    from t=100."""
    return [
        ev(100.0, "device_start", kind="cpu", slots=1), ev(100.0, "device_start", device=other, kind="cpu", slots=1),
        ev(100.0, "lane_open", lane=0, capacity=100 * MiB),
        ev(100.0, "lane_open", device=other, lane=0, capacity=100 * MiB),
        ev(100.0, "lane_admit", "T", detail=[0, MiB, MiB]),
        ev(100.0, "lane_admit", "T", device=other, detail=[0, MiB, MiB]),
        ev(100.0, "trial_start", "T", attempt=0), ev(100.0, "worker_start", "T", device=other, rank=1, attempt=0),
    ]


def test_a_data_parallel_trials_other_devices_are_busy_while_it_computes() -> None:
    """Rank 0 reports for the trial; its rank 1 computes each iteration too, on cpu:1 (worker_start ..
    worker_end). cpu:1 was shown idle (BUSY 0%, the total half busy); its share is now busy time there, useful as
    rank 0's iteration is, while the iteration counts once, on cpu:0."""
    other = "cpu:1"
    events = [
        *_data_parallel_start(other),
        ev(104.0, "worker_end", "T", device=other, rank=1, outcome="completed", attempt=0),
        ev(104.0, "trial_end", "T", attempt=0, outcome="completed"),
    ]
    results = [res("T", 0, 1, 102.0, 2.0), res("T", 0, 2, 104.0, 2.0)]
    summary = gp.summarize(gp.build_activity(results, events, 104.0))
    stats = {d.device: d for d in summary.devices}
    assert stats[DEV].busy_s == stats[other].busy_s == pytest.approx(4.0)
    assert (stats[DEV].iterations, stats[other].iterations) == (2, 0)
    assert stats[other].trials == 1 and stats[other].wasted_iterations == 0
    assert summary.totals.iterations == 2 and summary.totals.busy_fraction == pytest.approx(1.0)


def test_a_data_parallel_trials_workers_wait_for_the_driver_with_rank_0():
    """h117's F4: rank 0 calls the driver; its ranks > 0 wait for it at their next collective op, but only rank 0's
    device has ``driver_wait`` events, so the worker devices' wait was ``between_turns``. A trial's waits count on
    its workers' devices too, while they are there (worker_start .. worker_end). T computes [100, 101.5] and
    [102.5, 104] on both; rank 0 waited [101.5, 102.3] (one event holding two waits) for the driver."""
    other = "cpu:1"
    events = [
        *_data_parallel_start(other),
        EventRow(101.5, "driver_wait", "T", DEV, {"waits": [[0.0, 0.3], [0.5, 0.3]], "wait_s": 0.6, "attempt": 0,
                                                  "calls": {"should_prune": 2}}),
        ev(104.0, "worker_end", "T", device=other, rank=1, outcome="completed", attempt=0),
        ev(104.0, "trial_end", "T", attempt=0, outcome="completed"),
        ev(105.0, "device_stop"), ev(105.0, "device_stop", device=other),
    ]
    results = [res("T", 0, 1, 101.5, 1.5), res("T", 0, 2, 104.0, 1.5)]
    stats = {d.device: d for d in gp.summarize(gp.build_activity(results, events, 105.0)).devices}
    for device in (DEV, other):  # [101.5, 101.8] and [102.0, 102.3]; the rest of [101.5, 102.5] between turns
        assert stats[device].idle[gp.IDLE_DRIVER] == pytest.approx(0.6), device
        assert stats[device].idle[gp.IDLE_BETWEEN_TURNS] == pytest.approx(0.4), device
        assert stats[device].idle_driver == pytest.approx({"should_prune": 0.6}), device  # (the worker's: rank 0's)
    # the first version's one event per call reads the same
    old = [e for e in events if e.kind != "driver_wait"] + [
        EventRow(101.5, "driver_wait", "T", DEV, {"wait_s": 0.3, "method": "should_prune", "attempt": 0}),
        EventRow(102.0, "driver_wait", "T", DEV, {"wait_s": 0.3, "method": "should_prune", "attempt": 0})]
    assert {d.device: d.idle for d in gp.summarize(gp.build_activity(results, old, 105.0)).devices} == {
        d: s.idle for d, s in stats.items()}


def test_an_out_of_memory_error_after_a_stop_wastes_its_cut_short_iteration_and_redoes_nothing():
    """A trial the driver stopped that runs out of memory before its next report ends stopped (``oom_after_stop``):
    its cut-short iteration is out-of-memory waste, and its reported iterations stay useful (nothing is redone)."""
    events = [
        ev(100.0, "device_start", device=DEV, kind="cpu", slots=1),
        ev(101.0, "trial_start", "E", attempt=0),
        ev(101.0, "lane_open", lane=0, capacity=200), ev(101.0, "lane_admit", "E", detail=[0, 100, 100]),
        ev(102.6, "oom_after_stop", "E", attempt=0, error="MemoryError: x"),
        ev(102.6, "trial_end", "E", attempt=0, outcome="stopped"),
        ev(102.6, "lane_leave", "E", detail=[0]), ev(102.6, "lane_close", lane=0),
    ]
    activity = gp.build_activity([res("E", 0, 1, 102.0, 1.0)], events, finished_at=103.0)
    d = gp.summarize(activity).devices[0]
    assert (d.iterations, d.useful_iterations) == (1, 1)
    oom = d.wasted[gp.WASTE_OOM]
    assert (oom.iterations, oom.partial, oom.seconds) == (0, 1, pytest.approx(0.6))


def test_a_zero_length_iteration_reported_as_its_device_starts_on_a_bin_edge_keeps_its_rate():
    # Reported at cpu:0's start, which is a bin's end: it counts in that bin (bins are right-closed), where cpu:0 has
    # no device time, so its rate was dropped (throughput None there, 0.0 in the next bin, the sum 0, not 1).
    events = [EventRow(0.0, "device_start", None, "cpu:1", {"kind": "cpu", "slots": 1}),
              EventRow(1.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
              EventRow(1.0, "trial_start", "t0", "cpu:0", {"attempt": 0}),
              EventRow(1.01, "trial_end", "t0", "cpu:0", {"attempt": 0, "outcome": "completed"})]
    results = [ResultRow("t0", 0, 1, 1.0, {"time_this_iter_s": 0.0, "training_iteration": 1})]
    activity = gp.build_activity(results, events)
    bins = [b for b in gp.timeline(activity) if b.device == "cpu:0"]
    assert sum(b.iterations for b in bins) == 1  # counted where it was reported, as before
    assert sum((b.throughput or 0.0) * b.device_seconds for b in bins) == pytest.approx(1.0)
    assert all(b.throughput is None for b in bins if not b.device_seconds)
    total = [b for b in gp.timeline(activity) if b.device == gp.TOTAL_DEVICE]
    assert sum((b.throughput or 0.0) * b.device_seconds for b in total) == pytest.approx(1.0)


def test_a_live_run_counts_a_device_idle_since_its_last_trial_up_to_the_runs_latest_activity():
    """While the run goes on (no finished_at), each device's time stopped at its own last event: a device idle
    since its last trial ended at t=2 while the other ran to t=4 showed as busy (95% where the finished run gave
    48%: h104's F1). Its time now lasts to the store's latest activity."""
    events = [ev(0.0, "device_start", device=d, kind="cpu", slots=1) for d in ("cpu:0", "cpu:1")]
    events += [ev(0.0, "trial_start", "A", device="cpu:0", attempt=0),
               ev(0.0, "trial_start", "B", device="cpu:1", attempt=0)]
    results = [res("A", 0, i, float(i), 1.0) for i in (1, 2, 3, 4)] + [res("B", 0, i, float(i), 1.0) for i in (1, 2)]
    summary = gp.summarize(gp.build_activity(results, events, finished_at=None))
    idle_since_2 = next(d for d in summary.devices if d.device == "cpu:1")
    assert idle_since_2.device_seconds == pytest.approx(4.0)
    assert idle_since_2.busy_fraction == pytest.approx(0.5)


def test_each_device_says_the_seconds_it_wasted_cut_short_iterations_included(activity):
    """Per device only redone reports counted as waste (``wasted_iterations``): a device whose waste was all
    iterations cut short by failures showed 0 wasted, though 37% of its time went to them (h104's F2).
    ``wasted_s`` is their compute seconds, redone and cut short, and ``wasted_fraction`` their share of its
    compute (busy lane-seconds)."""
    summary = gp.summarize(activity)
    [d] = summary.devices
    # oom: A's iterations 1 and 2 (1 s each) and its cut-short third (0.5 s); retry: C's iteration 2 (1 s) and its
    # cut-short third (0.5 s): 4 s of the 12 lane-seconds of compute.
    assert d.wasted_s == pytest.approx(4.0) == pytest.approx(sum(w.seconds for w in d.wasted.values()))
    assert d.wasted_fraction == pytest.approx(4.0 / 12.0)
    assert summary.totals.wasted_s == pytest.approx(4.0) and summary.totals.wasted_fraction == pytest.approx(4 / 12)
    # Every waste a cut-short iteration: no wasted iteration, and all of its compute wasted.
    events = [ev(0.0, "device_start", kind="cpu", slots=1), ev(0.5, "trial_start", "F", attempt=0),
              ev(1.5, "trial_end", "F", attempt=0, outcome="errored", error="ValueError: no")]
    f = gp.summarize(gp.build_activity([], events, finished_at=2.0)).devices[0]
    assert f.wasted_iterations == 0 and f.wasted_s == pytest.approx(1.0) and f.wasted_fraction == pytest.approx(1.0)
    # No compute: nothing wasted, and no share of nothing.
    idle = gp.summarize(gp.build_activity([], [ev(0.0, "device_start", kind="cpu", slots=1)], 2.0)).devices[0]
    assert idle.wasted_s == 0.0 and idle.wasted_fraction is None


def test_a_data_parallel_trials_wasted_iteration_is_wasted_time_on_each_of_its_devices():
    """``wasted`` counts a wasted iteration once, on rank 0's device; ``wasted_s`` is device time, so its other
    devices' share of it counts there too (the worker device computed it, and it was thrown away)."""
    other = "cpu:1"
    events = [
        *_data_parallel_start(other),
        ev(102.5, "trial_restart", "T", attempt=1, reason="retry", from_iteration=0, error="RuntimeError: x"),
        ev(102.5, "worker_end", "T", device=other, rank=1, outcome="errored", attempt=0),
        ev(102.5, "trial_start", "T", attempt=1), ev(102.5, "worker_start", "T", device=other, rank=1, attempt=1),
        ev(104.5, "worker_end", "T", device=other, rank=1, outcome="completed", attempt=1),
        ev(104.5, "trial_end", "T", attempt=1, outcome="completed"),
    ]
    results = [res("T", 0, 1, 102.0, 2.0), res("T", 1, 1, 104.5, 2.0)]  # iteration 1 redone after the retry
    summary = gp.summarize(gp.build_activity(results, events, 104.5))
    stats = {d.device: d for d in summary.devices}
    assert stats[DEV].wasted_iterations == 1 and stats[other].wasted_iterations == 0
    assert stats[other].wasted == {}  # (counted once, on rank 0's device)
    assert stats[other].wasted_s == pytest.approx(2.0) and stats[other].wasted_fraction == pytest.approx(0.5)
    assert stats[DEV].wasted_s == pytest.approx(2.5)  # iteration 1 (2 s) and the cut-short [102, 102.5]


def idle_events():
    """cpu:0 (one slot, 0 -> 7): A's lane opens at 0.5 and A computes [1, 2] and [2.5, 3.5], ends at 4 (its lane
    closes); nothing on the device until B's lane opens at 5; B computes [5, 6] and the run is stopped at 7 (B's
    lane 1 still open; lane ids are not reused within an epoch). cpu:1 starts at 0 and never gets a trial."""
    events = [ev(0.0, "device_start", device=d, kind="cpu", slots=1) for d in ("cpu:0", "cpu:1")]
    events += [
        ev(0.5, "trial_start", "A", attempt=0), ev(0.5, "lane_open", lane=0, capacity=100),
        ev(0.5, "lane_admit", "A", detail=[0, 50, 50]),
        ev(4.0, "trial_end", "A", attempt=0, outcome="completed"), ev(4.0, "lane_leave", "A", detail=[0]),
        ev(4.0, "lane_close", lane=0),
        ev(5.0, "trial_start", "B", attempt=0), ev(5.0, "lane_open", lane=1, capacity=100),
        ev(5.0, "lane_admit", "B", detail=[1, 50, 50]),
        ev(7.0, "device_stop", device="cpu:0"), ev(7.0, "device_stop", device="cpu:1"),
    ]
    return events


IDLE_RESULTS = [res("A", 0, 1, 2.0, 1.0), res("A", 0, 2, 3.5, 1.0), res("B", 0, 1, 6.0, 1.0)]


def idle_scenario():
    return gp.build_activity(IDLE_RESULTS, idle_events(), finished_at=7.0)


def test_idle_time_is_split_by_cause():
    """inspect said how busy a device was, never why it was idle (h104's F3): each cause on known intervals."""
    summary = gp.summarize(idle_scenario())
    stats = {d.device: d for d in summary.devices}
    dev = stats["cpu:0"]
    assert dev.busy_s == pytest.approx(3.0) and dev.idle_s == pytest.approx(4.0)
    assert list(dev.idle) == list(gp.IDLE_CAUSES)  # every cause, in order
    assert dev.idle == pytest.approx({
        gp.IDLE_DRIVER: 0.0,  # (no driver_wait / driver_busy events: test_time_a_device_waits_for_the_driver...)
        gp.IDLE_NO_TRIAL: 1.5,  # [0, 0.5] (A not placed yet) and [4, 5]: no lane open
        gp.IDLE_STARTUP: 0.5,  # [0.5, 1]: A's lane open before the device's first turn
        gp.IDLE_BETWEEN_TURNS: 0.5,  # [2, 2.5]: A's lane open, no turn
        gp.IDLE_AFTER_REPORT: 0.5,  # [3.5, 4]: A's last report to its trial_end
        gp.IDLE_STOPPED: 1.0,  # [6, 7]: B's lane open, its iteration cut short by the stop
    })
    never = stats["cpu:1"]  # a device without a trial is idle for lack of one, not starting up
    assert never.idle_s == pytest.approx(7.0) and never.idle[gp.IDLE_NO_TRIAL] == pytest.approx(7.0)
    assert sum(never.idle.values()) == pytest.approx(7.0)
    assert summary.totals.idle_s == pytest.approx(11.0)
    assert summary.totals.idle == pytest.approx({gp.IDLE_DRIVER: 0.0, gp.IDLE_STARTUP: 0.5, gp.IDLE_NO_TRIAL: 8.5,
                                                 gp.IDLE_AFTER_REPORT: 0.5, gp.IDLE_STOPPED: 1.0,
                                                 gp.IDLE_BETWEEN_TURNS: 0.5})


def test_time_a_device_waits_for_the_driver_is_its_own_idle_cause():
    """A slow Optuna sampler (59 % of device time in h104's s12) or Tune searcher showed as ``startup``,
    ``between_turns`` or ``no_trial``: no event said the devices waited for the driver. Now a trial's call waits
    (``driver_wait``, per device) and the driver's busy spells with trials still to place (``driver_busy``) are
    ``driver`` time, before every other cause; a busy spell counts only where the device had no trial (a lane open
    is the trial's own business), and not when nothing was left to place."""
    events = idle_events() + [
        ev(0.5, "driver_wait", "A", wait_s=0.4, method="suggest"),  # [0.5, 0.9]: was startup
        ev(2.0, "driver_wait", "A", wait_s=0.3, method="should_prune"),  # [2, 2.3]: was between_turns
        ev(3.0, "driver_wait", "A", wait_s=0.2, method="should_prune"),  # during A's compute [2.5, 3.5]: busy
        EventRow(4.2, "driver_busy", None, None, {"wait_s": 0.5, "what": "searcher", "trials": 1,
                                                  "more": True}),  # no lane open on either device
        EventRow(6.2, "driver_busy", None, None, {"wait_s": 0.5, "what": "suggest", "more": True}),  # B's lane open
        EventRow(0.0, "driver_busy", None, None, {"wait_s": 0.2, "what": "searcher", "more": False}),  # none left
    ]
    summary = gp.summarize(gp.build_activity(IDLE_RESULTS, events, finished_at=7.0))
    stats = {d.device: d for d in summary.devices}
    assert stats["cpu:0"].idle == pytest.approx({
        gp.IDLE_DRIVER: 1.2,  # [0.5, 0.9], [2, 2.3], [4.2, 4.7]
        gp.IDLE_NO_TRIAL: 1.0,  # [0, 0.5] (the busy spell there had nothing to place), [4, 4.2], [4.7, 5]
        gp.IDLE_STARTUP: 0.1,  # [0.9, 1]
        gp.IDLE_AFTER_REPORT: 0.5, gp.IDLE_STOPPED: 1.0,  # [6, 7]: B's lane open, the driver's spell no matter
        gp.IDLE_BETWEEN_TURNS: 0.2,  # [2.3, 2.5]
    })
    assert stats["cpu:0"].idle_s == pytest.approx(4.0) and stats["cpu:0"].busy_s == pytest.approx(3.0)
    # cpu:1 never got a trial: the driver's spells held nothing back from it (test_a_driver_busy_spell_counts_...)
    assert stats["cpu:1"].idle == pytest.approx({gp.IDLE_DRIVER: 0.0, gp.IDLE_NO_TRIAL: 7.0, gp.IDLE_STARTUP: 0.0,
                                                 gp.IDLE_AFTER_REPORT: 0.0, gp.IDLE_STOPPED: 0.0,
                                                 gp.IDLE_BETWEEN_TURNS: 0.0})
    assert summary.totals.idle[gp.IDLE_DRIVER] == pytest.approx(1.2)
    assert list(stats["cpu:0"].idle)[0] == gp.IDLE_DRIVER  # tried first
    # clipped to a window as the others are
    assert gp.summarize(gp.build_activity(IDLE_RESULTS, events, finished_at=7.0), (0.7, 4.5)).devices[0].idle[
        gp.IDLE_DRIVER] == pytest.approx(0.2 + 0.3 + 0.3)


def test_split_by_label_shares_each_moment_among_the_calls_covering_it():
    """The maths of ``idle_driver``: each moment of the target goes to the labelled intervals that cover it, in equal
    shares (per interval: two ``b`` and one ``a`` give ``b`` two thirds); a moment none covers is ``unknown``; the
    shares sum to the target's length, and labelled time outside the target counts nothing."""
    split = gp.split_by_label([(0.0, 10.0)], [(0.0, 4.0, "a"), (2.0, 6.0, "b"), (2.0, 6.0, "b"), (8.0, 9.0, "a"),
                                              (11.0, 12.0, "c")])
    assert split == pytest.approx({"a": 2.0 + 2.0 / 3 + 1.0, "b": 4.0 / 3 + 2.0, gp.DRIVER_METHOD_UNKNOWN: 3.0})
    assert sum(split.values()) == pytest.approx(10.0)
    assert gp.split_by_label([(0.0, 1.0), (2.0, 3.0)], [(0.5, 2.5, "a")]) == pytest.approx(
        {"a": 1.0, gp.DRIVER_METHOD_UNKNOWN: 1.0})
    assert gp.split_by_label([], [(0.0, 1.0, "a")]) == {}


def test_driver_idle_is_split_by_the_method_waited_for():
    """The ``driver`` idle cause said how long the devices waited for the driver, not for which calls (an Optuna
    study's ``suggest`` while its sampler samples, or ``should_prune`` while its pruner decides): ``idle_driver``
    splits it by method, from each wait's method in its ``driver_wait`` event (``data["methods"]``), and the
    driver's busy spells by what they did (``searcher``). On cpu:0 (``idle_events``): A's ``suggest`` [0.5, 0.9]
    (startup before), its ``should_prune`` [2, 2.4] and X's ``report`` [2.2, 2.5] (between turns; [2.2, 2.4] half
    each), a ``should_prune`` inside A's turn [3, 3.2] (busy: nothing), the searcher's spell [4.2, 4.7]."""
    def waits(ts, trial, pairs, methods, **more):
        return EventRow(ts, "driver_wait", trial, "cpu:0", {"waits": pairs, "methods": methods, "attempt": 0, **more})

    events = idle_events() + [
        waits(0.5, "A", [[0.0, 0.4], [1.5, 0.4], [2.5, 0.2]], ["optuna.suggest", "optuna.should_prune",
                                                                "optuna.should_prune"]),
        waits(2.2, "X", [[0.0, 0.3]], ["optuna.report"]),
        EventRow(4.2, "driver_busy", None, None, {"wait_s": 0.5, "what": "searcher", "trials": 1, "more": True}),
    ]
    summary = gp.summarize(gp.build_activity(IDLE_RESULTS, events, finished_at=7.0))
    dev = {d.device: d for d in summary.devices}["cpu:0"]
    assert dev.idle[gp.IDLE_DRIVER] == pytest.approx(1.4)
    assert dev.idle_driver == pytest.approx({"searcher": 0.5, "suggest": 0.4, "should_prune": 0.3, "report": 0.2})
    assert list(dev.idle_driver) == ["searcher", "suggest", "should_prune", "report"]  # largest first
    assert summary.totals.idle_driver == pytest.approx(dev.idle_driver)
    assert {d.device: d for d in summary.devices}["cpu:1"].idle_driver == {}
    # clipped to a window as the cause is: [0.7, 0.9] of the suggest, [4.2, 4.5] of the spell
    windowed = gp.summarize(gp.build_activity(IDLE_RESULTS, events, finished_at=7.0), (0.7, 4.5)).devices[0]
    assert windowed.idle_driver == pytest.approx({"suggest": 0.2, "should_prune": 0.3, "report": 0.2,
                                                  "searcher": 0.3})
    assert sum(windowed.idle_driver.values()) == pytest.approx(windowed.idle[gp.IDLE_DRIVER])
    # a store before waits were named: an event's one method names its waits; several: unknown
    before = [e for e in events if e.kind != "driver_wait"] + [
        EventRow(0.5, "driver_wait", "A", "cpu:0", {"waits": [[0.0, 0.4]], "calls": {"optuna.suggest": 1}}),
        EventRow(2.0, "driver_wait", "A", "cpu:0", {"waits": [[0.0, 0.4], [1.0, 0.2]],
                                                    "calls": {"optuna.after_reports": 1, "optuna.should_prune": 1}})]
    old = gp.summarize(gp.build_activity(IDLE_RESULTS, before, finished_at=7.0)).devices[0]
    assert old.idle_driver == pytest.approx({"searcher": 0.5, "suggest": 0.4, gp.DRIVER_METHOD_UNKNOWN: 0.4})
    # the first version's one event per call names its method
    first = [e for e in events if e.kind != "driver_wait"] + [
        ev(0.5, "driver_wait", "A", wait_s=0.4, method="optuna.suggest")]
    assert gp.summarize(gp.build_activity(IDLE_RESULTS, first, finished_at=7.0)).devices[0].idle_driver == \
        pytest.approx({"searcher": 0.5, "suggest": 0.4})


def test_a_driver_busy_spell_counts_only_on_a_device_that_then_got_a_trial():
    """h117's F1: the driver's busy spells were ``driver`` idle on every device without a trial, also on one that
    nothing could have been placed on (a concurrency limit; the end of an ASHA sweep, whose searcher is not finished
    while its last trials run elsewhere): a spell counts only on a stretch without a trial that ends with a lane
    opening. cpu:0 gets B at 5 (the spell at [4.2, 4.7] held it back); cpu:1 never gets a trial, and cpu:0 after
    B's lane: the spells [1.5, 2] and [7.5, 8] (past cpu:0's end) are no one's."""
    events = idle_events() + [
        EventRow(4.2, "driver_busy", None, None, {"wait_s": 0.5, "what": "searcher", "trials": 1, "more": True}),
        EventRow(1.5, "driver_busy", None, None, {"wait_s": 0.5, "what": "suggest", "more": True}),
    ]
    summary = gp.summarize(gp.build_activity(IDLE_RESULTS, events, finished_at=7.0))
    stats = {d.device: d for d in summary.devices}
    assert stats["cpu:0"].idle[gp.IDLE_DRIVER] == pytest.approx(0.5)  # [4.2, 4.7]; [1.5, 2] A's lane was open
    assert stats["cpu:0"].idle[gp.IDLE_NO_TRIAL] == pytest.approx(1.0)
    assert stats["cpu:1"].idle[gp.IDLE_DRIVER] == 0.0 and stats["cpu:1"].idle[gp.IDLE_NO_TRIAL] == pytest.approx(7.0)
    # a device whose trial-less stretch ends with a lane opening gets the spells in it
    late = [*events, ev(6.0, "trial_start", "C", device="cpu:1", attempt=0),
            ev(6.0, "lane_open", device="cpu:1", lane=0, capacity=100),
            ev(6.0, "lane_admit", "C", device="cpu:1", detail=[0, 50, 50])]
    stats = {d.device: d for d in gp.summarize(gp.build_activity(IDLE_RESULTS, late, finished_at=7.0)).devices}
    assert stats["cpu:1"].idle[gp.IDLE_DRIVER] == pytest.approx(1.0)  # [1.5, 2] and [4.2, 4.7], before C's lane
    assert stats["cpu:1"].idle[gp.IDLE_NO_TRIAL] == pytest.approx(5.0)


def test_idle_causes_are_clipped_to_a_window():
    dev = gp.summarize(idle_scenario(), window=(0.5, 6.5)).devices[0]
    assert dev.device_seconds == pytest.approx(6.0) and dev.idle_s == pytest.approx(3.0)
    assert dev.idle == pytest.approx({gp.IDLE_DRIVER: 0.0, gp.IDLE_STARTUP: 0.5, gp.IDLE_NO_TRIAL: 1.0,
                                      gp.IDLE_AFTER_REPORT: 0.5, gp.IDLE_STOPPED: 0.5, gp.IDLE_BETWEEN_TURNS: 0.5})


def test_a_trial_that_leaves_its_device_and_comes_back_has_an_after_report_time_for_each_stay():
    """A trial's time after its last report ends at its next leave event, each stay on its own (a PBT turn given
    up at 2.5 and taken again at 3): the wait off the lane between is no trial on the device, the time after the
    last report before the final end is after_report again."""
    events = [ev(0.0, "device_start", kind="cpu", slots=1), ev(0.0, "trial_start", "A", attempt=0),
              ev(0.0, "lane_open", lane=0, capacity=100), ev(0.0, "lane_admit", "A", detail=[0, 50, 50]),
              ev(2.5, "trial_restart", "A", attempt=1, reason="turn", from_iteration=2),
              ev(2.5, "lane_leave", "A", detail=[0]), ev(2.5, "lane_close", lane=0),
              ev(3.0, "trial_start", "A", attempt=1), ev(3.0, "lane_open", lane=1, capacity=100),
              ev(3.0, "lane_admit", "A", detail=[1, 50, 50]),
              ev(4.25, "trial_end", "A", attempt=1, outcome="completed"), ev(4.25, "lane_close", lane=1)]
    results = [res("A", 0, 1, 1.0, 1.0), res("A", 0, 2, 2.0, 1.0), res("A", 1, 3, 4.0, 1.0)]
    dev = gp.summarize(gp.build_activity(results, events, finished_at=4.25)).devices[0]
    assert dev.idle == pytest.approx({gp.IDLE_DRIVER: 0.0, gp.IDLE_STARTUP: 0.0, gp.IDLE_NO_TRIAL: 0.5,
                                      gp.IDLE_AFTER_REPORT: 0.75, gp.IDLE_STOPPED: 0.0, gp.IDLE_BETWEEN_TURNS: 0.0})


def test_a_live_runs_iteration_in_progress_is_stopped_idle_and_a_device_without_lanes_is_without_a_trial():
    """No finished_at: B's lane is open since its last report at 6 (the iteration in progress) up to the store's
    latest activity; a store without lane events (older runs) has every gap as no_trial."""
    activity = idle_scenario()
    live = gp.build_activity(
        [*IDLE_RESULTS, res("C", 0, 1, 8.0, 1.0)],
        [e for e in idle_events() if e.kind != "device_stop"] + [ev(6.0, "trial_start", "C", device="cpu:1",
                                                                    attempt=0)], finished_at=None)
    stats = {d.device: d for d in gp.summarize(live).devices}
    assert stats["cpu:0"].device_seconds == pytest.approx(8.0)  # up to C's report at 8
    assert stats["cpu:0"].idle[gp.IDLE_STOPPED] == pytest.approx(2.0)  # [6, 8]
    assert stats["cpu:1"].idle[gp.IDLE_NO_TRIAL] == pytest.approx(7.0)  # [0, 7]: no lane events
    assert stats["cpu:1"].idle_s == pytest.approx(7.0)
    assert activity.leaves[("cpu:0", "A")] == [4.0, 4.0]  # its trial_end and its lane_leave


@pytest.mark.parametrize("window", [None, (100.5, 104.2), (103.0, 108.0)])
def test_idle_causes_sum_to_the_idle_time_of_each_device_and_the_totals(activity, window):
    """idle_s = device_seconds - busy_s, and the causes (none negative) add up to it, per device and in total."""
    for acts in (activity, idle_scenario()):
        if window is not None and acts is not activity:
            continue
        summary = gp.summarize(acts, window)
        for d in [*summary.devices, summary.totals]:
            assert d.idle_s == pytest.approx(d.device_seconds - d.busy_s, abs=1e-12)
            assert sum(d.idle.values()) == pytest.approx(d.idle_s, abs=1e-9)
            assert min(d.idle.values()) >= 0.0
    whole = {d.device: d for d in gp.summarize(activity).devices}[DEV]
    assert whole.idle == pytest.approx({gp.IDLE_DRIVER: 0.0, gp.IDLE_STARTUP: 0.0, gp.IDLE_NO_TRIAL: 1.4,
                                        gp.IDLE_AFTER_REPORT: 0.1, gp.IDLE_STOPPED: 0.0, gp.IDLE_BETWEEN_TURNS: 0.0})


@pytest.mark.parametrize("finished_at", [None, 12.0])
@pytest.mark.parametrize("resumed_cpu1", [None, "device_waiting", "device_lost"])
def test_a_device_a_resumed_run_did_not_start_again_ends_at_its_device_stop(finished_at, resumed_cpu1):
    """Session 1 ran two devices to t=4 (device_stop at 4); the resume started cpu:0 only, which ran to t=12.
    cpu:1's time lasted to the resumed run's end (or, live, its latest activity): 12 s, 13 % busy, against its 4 s
    (h106's F1); a resume whose cpu:1 was still starting, or was lost, stretched it to that event (h108's F1)."""
    events = [ev(0.0, "device_start", device=d, kind="cpu", slots=1) for d in ("cpu:0", "cpu:1")]
    events += [ev(0.0, "trial_start", t, device=d, attempt=0) for t, d in (("A", "cpu:0"), ("B", "cpu:1"))]
    events += [ev(4.0, "device_stop", device=d) for d in ("cpu:0", "cpu:1")]
    events += [ev(6.0, "device_start", device="cpu:0", kind="cpu", slots=1), ev(6.0, "resume", None),
               ev(6.0, "trial_start", "A", device="cpu:0", attempt=1)]
    events += [ev(7.0, resumed_cpu1, device="cpu:1")] if resumed_cpu1 else []
    results = [res("A", 0, i, float(i), 1.0) for i in (1, 2, 3, 4)] + [res("B", 0, i, float(i), 1.0) for i in (1, 2)]
    results += [res("A", 1, i, 2.0 + i, 1.0) for i in range(5, 11)]
    summary = gp.summarize(gp.build_activity(results, events, finished_at=finished_at))
    cpu1 = next(d for d in summary.devices if d.device == "cpu:1")
    assert cpu1.device_seconds == pytest.approx(4.0) and cpu1.busy_fraction == pytest.approx(0.5)


def test_wasted_seconds_in_a_window_are_the_wasted_spans_part_inside_it():
    """A window counted the whole of a wasted iteration that ended inside it, against compute clipped to it:
    WASTE% of 120-240% (h106's F3)."""
    events = [ev(0.0, "device_start", kind="cpu", slots=1), ev(0.0, "trial_start", "A", attempt=0),
              ev(2.5, "trial_restart", "A", attempt=1, reason="retry", from_iteration=0),
              ev(2.5, "trial_start", "A", attempt=1)]
    results = [res("A", 0, 1, 2.0, 2.0), res("A", 1, 1, 4.5, 2.0)]  # iteration 1 over [0, 2], redone over [2.5, 4.5]
    activity = gp.build_activity(results, events, finished_at=5.0)
    # inside (1, 3): half of the wasted [0, 2], the cut-short [2, 2.5] (the failure), and 0.5 s of the redo (useful)
    d = gp.summarize(activity, (1.0, 3.0)).devices[0]
    assert d.wasted_s == pytest.approx(1.5) and d.wasted[gp.WASTE_RETRY].seconds == pytest.approx(1.5)
    assert d.lane_busy_s == pytest.approx(2.0) and d.wasted_fraction == pytest.approx(0.75)


def test_an_iteration_an_actors_death_cut_short_is_stopped_idle_not_after_report():
    """The device died at 2.6 in the iteration after A's report at 2.0; its trial_restart (reason device_died) is
    no leave after a last report: that time is ``stopped`` (docs/goodput.md), not ``after_report`` (h108's F3)."""
    events = [ev(0.0, "device_start", kind="cpu", slots=1), ev(0.0, "lane_open", lane=0),
              ev(0.0, "trial_start", "A", attempt=0), ev(0.0, "lane_admit", "A", detail=[0, 1, 1], attempt=0),
              ev(2.6, "device_died"), ev(2.6, "trial_restart", "A", attempt=1, reason="device_died")]
    results = [res("A", 0, 1, 1.0, 1.0), res("A", 0, 2, 2.0, 1.0)]
    d = gp.summarize(gp.build_activity(results, events, finished_at=3.0)).devices[0]
    assert d.idle_s == pytest.approx(0.6) and d.idle[gp.IDLE_STOPPED] == pytest.approx(0.6)
    assert d.idle[gp.IDLE_AFTER_REPORT] == 0.0



def test_busy_time_is_device_time_a_turn_reaching_back_before_its_epoch_is_clipped():
    """A resumed trial's first iteration timed from before its device started again ([5, 7], the device back at 6)
    counted 1 s of busy time outside the device's time: busy_s 5 of 6 device-seconds, and between_turns -1.0 (h107's
    note 3). Busy time (the lanes', the device's, the timeline's) is clipped to the device's epochs."""
    events = [ev(0.0, "device_start", kind="cpu", slots=1), ev(0.0, "trial_start", "A", attempt=0),
              ev(0.0, "lane_open", lane=0, capacity=1), ev(0.0, "lane_admit", "A", detail=[0, 1, 1]),
              ev(4.0, "device_stop"), ev(6.0, "device_start", kind="cpu", slots=1), ev(6.0, "resume", None, None),
              ev(6.0, "trial_start", "A", attempt=1), ev(6.0, "lane_open", lane=0, capacity=1),
              ev(6.0, "lane_admit", "A", detail=[0, 1, 1])]
    results = [res("A", 0, 1, 1.0, 1.0), res("A", 0, 2, 2.0, 1.0), res("A", 1, 3, 7.0, 2.0), res("A", 1, 4, 8.0, 1.0)]
    activity = gp.build_activity(results, events, finished_at=8.0)
    d = gp.summarize(activity).devices[0]
    assert d.device_seconds == pytest.approx(6.0)
    assert d.busy_s == pytest.approx(4.0) and d.lane_busy_s == pytest.approx(4.0)  # [0, 2] and [6, 8]
    assert d.idle_s == pytest.approx(2.0) and d.idle[gp.IDLE_STOPPED] == pytest.approx(2.0)  # [2, 4]
    assert min(d.idle.values()) >= 0.0 and d.idle[gp.IDLE_BETWEEN_TURNS] == pytest.approx(0.0)
    assert sum(b.busy_s for b in gp.timeline(activity, 1.0) if b.device == DEV) == pytest.approx(4.0)
    assert d.iterations == 4  # (the iteration itself still counts, where it was reported)


def test_wasted_and_compute_seconds_are_device_time_as_busy_time_is():
    """h117's F2: busy time was clipped to the device's epochs, but wasted seconds and a trial's compute seconds
    (``Report.trials``) read the unclipped turn: the resumed trial's first iteration [5, 7] (device back at 6),
    redone after a retry, was 2 s of wasted_s, 50 % of 4 s of compute, and the trial's compute_s (5 s) exceeded the
    device's busy time (4 s). The spans themselves are clipped to their epoch's start: it is 1 s everywhere."""
    events = [ev(0.0, "device_start", kind="cpu", slots=1), ev(0.0, "trial_start", "A", attempt=0),
              ev(0.0, "lane_open", lane=0, capacity=1), ev(0.0, "lane_admit", "A", detail=[0, 1, 1]),
              ev(4.0, "device_stop"), ev(6.0, "device_start", kind="cpu", slots=1), ev(6.0, "resume", None, None),
              ev(6.0, "trial_start", "A", attempt=1), ev(6.0, "lane_open", lane=0, capacity=1),
              ev(6.0, "lane_admit", "A", detail=[0, 1, 1]),
              ev(7.0, "trial_restart", "A", attempt=2, reason="retry", from_iteration=2),
              ev(7.0, "trial_start", "A", attempt=2)]
    results = [res("A", 0, 1, 1.0, 1.0), res("A", 0, 2, 2.0, 1.0), res("A", 1, 3, 7.0, 2.0), res("A", 2, 3, 8.0, 1.0)]
    activity = gp.build_activity(results, events, finished_at=8.0)
    d = gp.summarize(activity).devices[0]
    assert d.busy_s == pytest.approx(4.0) and d.lane_busy_s == pytest.approx(4.0)
    assert d.wasted_s == pytest.approx(1.0) and d.wasted_fraction == pytest.approx(0.25)
    assert d.wasted[gp.WASTE_RETRY].seconds == pytest.approx(1.0)
    redone = next(s for s in activity.spans if s.attempt == 1)
    assert (redone.start, redone.end) == (6.0, 7.0)
    assert sum(s.end - s.start for s in activity.spans) == pytest.approx(d.busy_s)  # the trial's compute_s


def test_queue_waits_count_every_wait_to_start_not_only_the_first():
    """``queued_s`` counted a trial's wait from its creation to its first start only: the waits after a retry, a
    preemption or a PBT turn (the trial back in the queue until a place is free) were not counted (a population
    taking turns waited 0.9-1.1 s per trial and showed 0.005-0.24 s). Every wait counts: from the creation, and from
    each restart of a started attempt, to the next ``trial_start``."""
    def restart(ts, trial, reason, attempt):
        return ev(ts, "trial_restart", trial, attempt=attempt, reason=reason)

    events = [
        ev(0.0, "device_start", kind="cpu", slots=1),
        # A: starts at 1; retried at 2, restarts at 3; preempted at 4 (paused off any device), promoted at 6,
        # starts at 6.5; given back before it began (withdrawn) at 7, starts at 8; runs out of memory and is
        # re-admitted on its device (a trial_start without a restart) at 9; ends at 10
        ev(1.0, "trial_start", "A", attempt=0), restart(2.0, "A", "retry", 1), ev(3.0, "trial_start", "A", attempt=1),
        restart(4.0, "A", "preempted", 2), restart(6.0, "A", "promoted", 3), ev(6.5, "trial_start", "A", attempt=3),
        restart(6.7, "A", "turn", 4), restart(7.0, "A", "withdrawn", 5), ev(8.0, "trial_start", "A", attempt=5),
        ev(9.0, "oom_readmit", "A", attempt=5), ev(9.0, "trial_start", "A", attempt=5),
        ev(10.0, "trial_end", "A", attempt=5, outcome="completed"),
        # B: starts at 0.5, is computing when the run is interrupted (no end) and resumed at 20; starts at 21
        ev(0.5, "trial_start", "B", attempt=0), EventRow(20.0, "resume", None, None, {"unfinished": 2}),
        ev(21.0, "trial_start", "B", attempt=0),
        # C: never starts (stopped unstarted at 5): no wait ended by a start
        ev(5.0, "trial_end", "C", attempt=0, outcome="stopped"),
        # D: starts at 2, is retried at 3 and stopped at 3.5 before it restarts: that wait no start ended
        ev(2.0, "trial_start", "D", attempt=0), restart(3.0, "D", "retry", 1),
        ev(3.5, "trial_end", "D", attempt=1, outcome="stopped"),
    ]
    waits = gp.queue_waits(events, {"A": 0.0, "B": 0.0, "C": 0.0, "D": 1.0})
    assert waits == {"A": [(0.0, 1.0), (2.0, 3.0), (6.0, 6.5), (6.7, 8.0)], "B": [(0.0, 0.5), (20.0, 21.0)],
                     "C": [], "D": [(1.0, 2.0)]}
    # events of a trial the rows do not name are ignored; so is the order the store gave them in
    assert gp.queue_waits(list(reversed(events)), {"B": 0.0}) == {"B": [(0.0, 0.5), (20.0, 21.0)]}


def test_queue_waits_after_a_resume_that_reruns_ended_trials_and_with_a_start_stamped_before_its_restart():
    """A resume that runs errored trials again (``resume_errored``/``restart_errored``) started no wait for them:
    their wait to start again was not counted (a helper's run: 0.41 s waited, ``queued_waits`` 1). And a start
    stamped before its restart (another node's clock behind the driver's) made the whole attempt count as queued."""
    def ev_(ts, what, trial=None, **data):
        return EventRow(ts, what, trial, None, data)

    events = [
        ev_(0.0, "device_start", kind="cpu", slots=1),
        # E errors at 2 (its end), the run ends; the resume at 10 runs it again: it starts at 11
        ev_(1.0, "trial_start", "E", attempt=0), ev_(2.0, "trial_end", "E", attempt=0, outcome="errored"),
        ev_(10.0, "resume", unfinished=1), ev_(10.5, "trial_restart", "E", attempt=1, reason="retry"),
        ev_(11.0, "trial_start", "E", attempt=1),
        # F finished before the interrupt: it never starts again, and waits for nothing
        ev_(1.0, "trial_start", "F", attempt=0), ev_(3.0, "trial_end", "F", attempt=0, outcome="completed"),
        # G, on another node: retried at 5.000, its start stamped at 4.999 by its node's clock, ends at 8
        ev_(1.0, "trial_start", "G", attempt=0), ev_(5.0, "trial_restart", "G", attempt=1, reason="retry"),
        ev_(4.999, "trial_start", "G", attempt=1), ev_(8.0, "trial_end", "G", attempt=1, outcome="completed"),
    ]
    waits = gp.queue_waits(events, {"E": 0.0, "F": 0.0, "G": 0.0})
    assert waits == {"E": [(0.0, 1.0), (10.0, 11.0)], "F": [(0.0, 1.0)], "G": [(0.0, 1.0)]}


def test_queue_waits_go_on_across_the_withdrawal_of_a_trial_started_at_its_admission():
    """A trial placed without prefetch is started at its admission (its device sends ``trial_start`` then), and may
    wait in a shared lane for its first turn; given back before it (``withdrawn``), it counted a second wait, as a
    restart, and its time on the device before the withdrawal was in neither (a device's real events,
    ``scratch_h153/s3b_withdraw_unbegun_host.py``: 2 waits, 0.14 s, where it waited 0.45 s for its first turn; the
    device side: ``tests/test_host.py::test_a_trial_that_has_not_had_a_turn_is_withdrawn_without_running_and_its_
    neighbour_goes_on``). Its wait goes on across the withdrawal, as a prefetched trial's does."""
    def ev_(ts, what, trial=None, **data):
        return EventRow(ts, what, trial, None, data)

    events = [
        ev_(0.0, "device_start", kind="cpu", slots=1),
        # A: started at its admission at 1, withdrawn at 3 before its first turn, starts elsewhere at 4
        ev_(1.0, "trial_start", "A", attempt=0),
        ev_(3.0, "trial_restart", "A", attempt=1, reason="withdrawn", from_iteration=0),
        ev_(4.0, "trial_start", "A", attempt=1),
        # B: runs from 1, is retried at 2 and started again at its admission at 2.5, withdrawn at 3, starts at 4
        ev_(1.0, "trial_start", "B", attempt=0), ev_(2.0, "trial_restart", "B", attempt=1, reason="retry"),
        ev_(2.5, "trial_start", "B", attempt=1),
        ev_(3.0, "trial_restart", "B", attempt=2, reason="withdrawn", from_iteration=0),
        ev_(4.0, "trial_start", "B", attempt=2),
        # C: prefetched (no start before its first turn), withdrawn at 3, starts at 4: as before
        ev_(3.0, "trial_restart", "C", attempt=1, reason="withdrawn", from_iteration=0),
        ev_(4.0, "trial_start", "C", attempt=1),
    ]
    assert gp.queue_waits(events, {"A": 0.0, "B": 0.0, "C": 0.0}) == {
        "A": [(0.0, 4.0)], "B": [(0.0, 1.0), (2.0, 4.0)], "C": [(0.0, 4.0)]}
