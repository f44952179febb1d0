"""Goodput accounting: what each device did with its time, computed from the store's results and events.

Pure functions over the store's rows (:class:`~fluidsalus.store.ResultRow`, :class:`~fluidsalus.store.EventRow`);
nothing here starts Ray or writes anything. The exact definitions are in ``docs/goodput.md``; in short:

- **Device time.** A device exists from its ``device_start`` event to the end of that run of its actor: its
  ``device_died`` event; else its ``device_stop``/``device_lost`` (or its last activity, if later); else its last
  recorded activity, and for the last run of a finished experiment the experiment's ``finished_at`` (while a run
  goes on, the store's latest activity). A resumed experiment starts the actor again: each ``device_start`` opens a new
  *epoch* (lane ids restart at 0 in each). ``device_seconds`` is the time inside the analysed window.
- **Turns.** Each stored result is one iteration. The trial held its lane's turn over
  ``[ts - time_this_iter_s, ts]``: ``time_this_iter_s`` counts from the moment the trial (re)gained the turn
  (waiting for the turn, or paused at a budget, is excluded by the session). The lane of a result is the lane
  of the trial's latest ``lane_admit`` (data ``detail = [lane_id, P, T]``) on that device at or before ``ts``.
- **Busy.** A lane is busy while some member holds its turn: the union of its members' turn intervals. A device
  is busy while at least one of its lanes is.
- **Useful and wasted iterations.** Results are stored per (trial, attempt, iteration). When an iteration is
  reported again later (a retry after a failure, an out-of-memory re-admission, a PBT exploit rollback, a
  resumed experiment), every earlier report of it was wasted. The latest report of each iteration is useful: the
  searcher consumed it and it was never redone. Results of trials the searcher stopped stay useful. The cause of
  a waste is the first restart marker of that trial between the wasted report and its redo that resumed it from
  before that iteration (its ``from_iteration`` is lower; a ``resume``, which names none, always qualifies): a
  restart from at or after it undid nothing of it.
- **Partial iterations.** The iteration a failure cut short has no result. It held the turn from the latest of
  the attempt's last result, the trial's last ``switch`` into it and its ``trial_start``, up to the failure
  (``trial_restart`` with reason ``retry``, ``oom_readmit``, ``oom_after_stop`` (out of memory after the driver
  stopped it: it ends stopped), or ``trial_end`` with outcome ``errored``). It counts as
  busy time and as wasted seconds of that cause, never as an iteration.
- **Wasted seconds.** A device's ``wasted_s`` is the turn time of its wasted work, redone iterations and cut-short
  ones (a data-parallel worker's share too); ``wasted_fraction`` is that share of its compute (``lane_busy_s``).
- **Idle by cause.** A device's ``idle_s`` (``device_seconds - busy_s``) is split into the ``IDLE_*`` causes
  below (``idle``), taken in that order: waiting for the driver (a trial's call to it, or, without a trial, the
  driver busy asking the searcher for trials or answering a call), no trial on it (no lane open), before its
  first turn, after a trial's last report until the trial ended or left it, after its last turn up to the end of
  its epoch with a trial still on it (the run's stop cut it short), and the rest (a lane open between turns).
  They sum to ``idle_s``. The ``driver`` time is split by the method of the calls waited for (``idle_driver``:
  ``suggest``, ``should_prune``, ``searcher``, ...), a moment several calls waited shared equally by them.
- **Throughput** = iterations / device_seconds; **goodput** = useful iterations / device_seconds.

Every setting is a named constant below.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from fluidsalus.store import TRIAL_RESTART_EVENT, EventRow, ResultRow

#: Result key a trainable may report with the number of training samples of the iteration.
SAMPLES_KEY = "num_samples"
#: Result key holding the iteration's compute time (Ray Tune's, filled in by the session).
ITER_TIME_KEY = "time_this_iter_s"
#: Percentiles of switch latency that are reported.
SWITCH_P50, SWITCH_P99 = 50.0, 99.0
#: Bins a whole-run timeline is cut into when the caller gives no bin width.
DEFAULT_TIMELINE_BINS = 60
#: Smallest timeline bin, in seconds: below it a bin holds too few iterations to mean anything.
MIN_TIMELINE_BIN_S = 0.05
#: Device name given to results whose device cannot be found from any event.
UNKNOWN_DEVICE = "unknown"
#: Device name of the totals row.
TOTAL_DEVICE = "total"

# Causes of wasted work.
WASTE_RETRY = "retry"  # a failed attempt started again (trial_restart reason "retry")
WASTE_OOM = "oom"  # re-admitted after an out-of-memory error (oom_readmit)
WASTE_EXPLOIT = "exploit"  # PBT exploit: restarted from another trial's checkpoint (trial_restart reason "exploit")
WASTE_RESUME = "resume"  # the experiment was interrupted and resumed (resume event)
WASTE_OTHER = "restart"  # redone after a restart that no event names (e.g. a promoted trial that had ended)
WASTE_DEVICE_DIED = "device_died"  # the device actor died; its trials restarted elsewhere (trial_restart reason)
WASTE_FAILED = "failed"  # the partial iteration of an attempt that failed for good (trial_end errored)
#: The causes this module names. A ``trial_restart`` reason it does not know is used as the cause as it is.
WASTE_CAUSES = (WASTE_RETRY, WASTE_OOM, WASTE_EXPLOIT, WASTE_DEVICE_DIED, WASTE_RESUME, WASTE_OTHER, WASTE_FAILED)

# Causes of idle device time (device time in which none of its lanes was busy). Each idle moment of a device gets
# the first cause of this list that fits it; docs/goodput.md, "Idle by cause", defines them.
#: Waiting for the driver: a trial on the device waited for the driver's answer to a call (``driver_wait``
#: events: an Optuna trial's ``suggest`` while the sampler samples, its ``should_prune``, the trial's start and
#: end told to the study, a verdict on a result), or the device had no trial while the driver, with a trial it could
#: have placed, was busy asking the searcher for trials or answering a call (``driver_busy`` events: a Tune
#: ``Searcher``'s ``suggest``, an Optuna sampler's), counted only on a stretch without a trial that ends with a lane
#: opening (a device that got nothing after it waited for no one: ``no_trial``). Stores written before these events
#: have none: their waits are in the other causes (``startup``, ``between_turns``, ``no_trial``).
IDLE_DRIVER = "driver"
#: No trial on the device (no lane open): the search had nothing for it yet or any more (no trial left, a
#: concurrency limit, the driver placing the first trials), or the run was ending.
IDLE_NO_TRIAL = "no_trial"
#: A trial on the device (a lane open) before the device's first turn in its epoch: the first trial's start before
#: its first iteration's clock starts (its process taking the trial, a driver round trip such as an Optuna
#: sampler's first ``suggest``). (The trainable's own setup before its first report is busy: the first iteration's
#: ``time_this_iter_s`` counts it, as Ray's does.) An epoch in which trials were placed but none got a turn has
#: its lane-open time here.
IDLE_STARTUP = "startup"
#: From a trial's last report on the device to its ``trial_end``, ``trial_restart`` or ``lane_leave`` there: its
#: trainable still ran after its last report (the rest of its function, a checkpoint, its teardown) or the driver
#: took that long to stop it.
IDLE_AFTER_REPORT = "after_report"
#: From the device's last turn in its epoch to the epoch's end, a trial still on it: an iteration that the run's
#: stop (an interrupt, the actor's death) cut short, or, while the run goes on, the iteration now in progress.
IDLE_STOPPED = "stopped"
#: The rest: a trial on the device (a lane open) but no turn held: switches, driver round trips (a searcher's
#: ``suggest``, Optuna's ``should_prune``), a later trial's start, a pause at a budget.
IDLE_BETWEEN_TURNS = "between_turns"
#: Events that end a device's epoch where it was let go (the run's end, or its actor lost): its time is not
#: counted on to the experiment's end, nor, while a run goes on, to the latest activity.
DEVICE_END_EVENTS = ("device_stop", "device_lost")
#: Events of a device that are no activity of its epoch: they do not stretch it (a resumed run's device still
#: starting, or lost, stretched its previous session's epoch to the new session).
NOT_ACTIVITY_EVENTS = ("device_waiting", *DEVICE_END_EVENTS)
#: The idle causes, in the order they are tried.
IDLE_CAUSES = (IDLE_DRIVER, IDLE_NO_TRIAL, IDLE_STARTUP, IDLE_AFTER_REPORT, IDLE_STOPPED, IDLE_BETWEEN_TURNS)
#: Event of a device: one of its trials waited for the driver's answers to its calls, ``data["waits"]`` (``[[offset_s,
#: wait_s], ...]`` from ``ts``) of the calls ``data["methods"]`` names (one per wait; stores before it lack it), or, in
#: stores of the first version, one call of ``data["method"]`` from ``ts`` for ``data["wait_s"]`` seconds
#: (``fluidsalus.gpu.host.DRIVER_WAIT_EVENT``).
DRIVER_WAIT_EVENT = "driver_wait"
#: The method of a wait for the driver whose event does not name it (a store written before waits were named, whose
#: event held calls of several methods): :attr:`DeviceStats.idle_driver`'s key for it.
DRIVER_METHOD_UNKNOWN = "unknown"
#: Prefixes of the calls' names that :attr:`DeviceStats.idle_driver` leaves off (``optuna.suggest`` is ``suggest``,
#: ``fluidsalus.result_verdict`` is ``result_verdict``); a ``driver_busy`` spell asking the searcher is ``searcher``.
DRIVER_METHOD_PREFIXES = ("optuna.", "fluidsalus.")
#: Event of the driver: it was busy asking the searcher for trials, or answering a call, for ``data["wait_s"]``
#: seconds from ``ts``, with trials still to place unless ``data["more"]`` is false
#: (``fluidsalus.trialgroup.executor.DRIVER_BUSY_EVENT``).
DRIVER_BUSY_EVENT = "driver_busy"
#: Event kinds after which a trial no longer computes on its device (the end of its "after its last report" time).
LEAVE_EVENTS = ("trial_end", TRIAL_RESTART_EVENT, "lane_leave")

# Kinds of markers (failures and the like) placed on the lane timeline.
MARK_FAILURE = "failure"  # an attempt raised: retried (trial_restart retry) or final (trial_end errored)
MARK_OOM = "oom"  # out of memory (oom_readmit, or lane_fail after the last retry)
MARK_EXPLOIT = "exploit"  # a PBT exploit restart
#: ``trial_restart`` reasons that are the planner's decisions, not failures: a move or resize from a checkpoint, a
#: preemption, a trial its device gave back before it began, a trial that gave its place to one behind it (``turn``:
#: PBT's turns). They place no marker (their redone iterations, if any, are still waste of that cause).
PLANNED_RESTART_REASONS = ("move", "preempted", "withdrawn", "turn")


# ---------------------------------------------------------------------------------------------- small helpers

#: A pair's first and second item: an interval's start and end, a series point's time and value (sort and bisect
#: keys, without a Python call per item).
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values`` by linear interpolation between closest ranks (numpy's default).

    Returns None for no values. ``percentile(v, 50)`` is the median.
    """
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of closed intervals, as sorted disjoint intervals (touching ones are joined)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def overlap(start: float, end: float, w0: float, w1: float) -> float:
    """Length of ``[start, end] ∩ [w0, w1]``."""
    return max(0.0, min(end, w1) - max(start, w0))


def covered(merged: Sequence[tuple[float, float]], w0: float, w1: float) -> float:
    """Length of the part of ``[w0, w1]`` covered by sorted disjoint intervals (as :func:`merge_intervals` gives)."""
    i = bisect.bisect_right(merged, w0, key=_SECOND)  # the first interval that ends after w0
    total = 0.0
    for start, end in itertools.islice(merged, i, None):
        if not start < w1:
            break
        # overlap(start, end, w0, w1) written out (a call per interval of a long list): the same operations
        length = (w1 if w1 < end else end) - (w0 if w0 > start else start)
        total += length if length > 0.0 else 0.0
    return total


def covered_per_bin(lanes: Sequence[Sequence[tuple[float, float]]],
                    edges: Sequence[tuple[float, float]]) -> list[float]:
    """``[sum(covered(iv, b0, b1) for iv in lanes) for b0, b1 in edges]``: the length each bin's part of every
    list of sorted disjoint intervals covers, summed over the lists (the lanes of a device), with the same
    additions in the same order (so the same floats), reaching each interval once rather than once per bin: the
    timeline of a sweep of a few thousand lanes spent most of ``inspect``'s time there. ``edges`` are the bins,
    sorted, each ``(start, end)``; an interval counts in the bins it reaches into (it ends after the bin's start and
    starts before its end, as :func:`covered` takes them)."""
    out: list[float] = [0.0 if lanes else 0] * len(edges)  # (sum() of no lanes: the int 0)
    ends = [b1 for _, b1 in edges]
    for merged in lanes:
        mine: dict[int, float] = {}  # bin -> this lane's covered length there (covered's 0.0 + each overlap)
        for start, end in merged:
            i = bisect.bisect_right(ends, start)  # the first bin that ends after the interval's start
            while i < len(edges) and edges[i][0] < end:
                b0, b1 = edges[i]
                if start < b1:  # (overlap(start, end, b0, b1), without the calls)
                    length = (b1 if b1 < end else end) - (b0 if b0 > start else start)
                    mine[i] = mine.get(i, 0.0) + (length if length > 0.0 else 0.0)
                i += 1
        for i, length in mine.items():
            out[i] += length
    return out


def subtract_intervals(intervals: Sequence[tuple[float, float]],
                       cuts: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals`` minus ``cuts``, both sorted and disjoint (as :func:`merge_intervals` gives); empty pieces are
    dropped."""
    if not cuts:  # (the loop below, at once: the idle causes that took nothing cut nothing from a long list)
        return [(start, end) for start, end in intervals if start < end]
    out: list[tuple[float, float]] = []
    j = 0
    n = len(cuts)
    for start, end in intervals:
        while j < n and cuts[j][1] <= start:
            j += 1
        k, t = j, start
        while k < n:
            cut_start, cut_end = cuts[k]
            if not cut_start < end:
                break
            if cut_start > t:
                out.append((t, cut_start))
            if cut_end > t:  # (max(t, cut_end), written out: a call per interval of a long list)
                t = cut_end
            k += 1
        if t < end:
            out.append((t, end))
    return out


def intersect_intervals(intervals: Sequence[tuple[float, float]],
                        other: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals ∩ other``, both sorted and disjoint; empty pieces are dropped."""
    out: list[tuple[float, float]] = []
    i = j = 0
    n, m = len(intervals), len(other)
    while i < n and j < m:
        (a0, a1), (b0, b1) = intervals[i], other[j]
        # max(a0, b0) and min(a1, b1) written out (calls per interval of a long list): the first of equal values
        start, end = b0 if b0 > a0 else a0, b1 if b1 < a1 else a1
        if start < end:
            out.append((start, end))
        if a1 < b1:
            i += 1
        else:
            j += 1
    return out


def _number(value: Any) -> float | None:
    if value is None:  # (the usual cases first: none, or a float, which float() gives back as it is)
        return None
    if type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class StepSeries:
    """A piecewise-constant quantity: 0 before the first point, then each point's value until the next one.

    Points are ``(ts, value)``; several at one ``ts`` keep the last (in insertion order).
    """

    points: list[tuple[float, float]] = field(default_factory=list)

    def add(self, ts: float, value: float) -> None:
        self.points.append((ts, value))

    def finish(self) -> None:
        """Sort the points by time (stable: same-time points keep their order)."""
        self.points.sort(key=_FIRST)

    def value_at(self, t: float) -> float:
        """The value in force at ``t`` (the last point at or before ``t``)."""
        i = bisect.bisect_right(self.points, t, key=_FIRST)
        return self.points[i - 1][1] if i else 0.0

    def peak(self, w0: float, w1: float) -> float:
        """Largest value in force at any time in ``[w0, w1]`` (the points in time order, as :meth:`finish` leaves
        them)."""
        best = self.value_at(w0)
        lo = bisect.bisect_right(self.points, w0, key=_FIRST)  # (the points are in time order: finish())
        hi = bisect.bisect_right(self.points, w1, key=_FIRST)
        if lo < hi:  # (max keeps the first of equal values, as a running max(best, value) does)
            top = max(map(_SECOND, self.points[lo:hi]))
            if top > best:
                best = top
        return best

    def integral(self, w0: float, w1: float) -> float:
        """Integral of the value over ``[w0, w1]`` (value × seconds)."""
        if w1 <= w0:
            return 0.0
        total, t, value = 0.0, w0, self.value_at(w0)
        for ts, v in self.points:
            if ts <= w0:
                continue
            if ts >= w1:
                break
            total += value * (ts - t)
            t, value = ts, v
        return total + value * (w1 - t)

    @staticmethod
    def summed(series: Sequence[StepSeries]) -> StepSeries:
        """The pointwise sum of several series (e.g. lanes open on all devices at once)."""
        merged = sorted([(ts, i, v) for i, s in enumerate(series) for ts, v in s.points], key=_FIRST)
        current = [0.0] * len(series)
        points = []
        for ts, i, v in merged:
            current[i] = v
            points.append((ts, sum(current)))
        return StepSeries(points)


# ---------------------------------------------------------------------------------------------- parsed activity


@dataclass(frozen=True)
class Epoch:
    """One life of a device's actor: from its ``device_start`` to its end (see the module docstring)."""

    device: str
    index: int
    start: float
    end: float
    kind: str | None
    slots: int | None
    node: str | None = None  # the address of the node its actor ran on (its device_start's node_ip)


@dataclass(frozen=True)
class Span:
    """One reported iteration: the interval in which its trial held its lane's turn, and what became of it.

    A *partial* span is the iteration a failure cut short: it has no result (``iteration`` is the one it was
    computing), it is never useful, and it is not counted as an iteration.

    A *worker* span is a data-parallel trial's iteration on one of its other devices (rank 1 and up, from the
    trial's ``worker_start`` to its ``worker_end`` there): the interval of rank 0's result, which speaks for the
    trial. It makes that device busy, useful or wasted as rank 0's iteration is, but the iteration counts once, on
    rank 0's device (:attr:`counted`).
    """

    trial_id: str
    attempt: int
    iteration: int
    device: str
    epoch: int
    lane: int | None
    start: float
    end: float
    samples: float | None
    useful: bool
    waste_cause: str | None
    partial: bool = False
    worker: bool = False

    @property
    def counted(self) -> bool:
        """Whether the span counts as a reported iteration (not partial, and not a worker's share)."""
        return not self.partial and not self.worker


@dataclass
class LaneLife:
    """A lane from ``lane_open`` to ``lane_close`` (None while it is still open)."""

    device: str
    epoch: int
    lane: int
    opened_at: float
    closed_at: float | None
    capacity_peak_bytes: int


@dataclass(frozen=True)
class Switch:
    """A ``switch`` event: ``trial_id`` got the lane's turn from ``from_trial`` after ``latency_ms``."""

    ts: float
    device: str
    epoch: int
    lane: int | None
    trial_id: str | None
    from_trial: str | None
    latency_ms: float


@dataclass(frozen=True)
class Marker:
    """Something that went wrong (or was rolled back), for the lane timeline."""

    ts: float
    kind: str
    device: str
    epoch: int
    lane: int | None
    trial_id: str | None
    detail: str | None


@dataclass
class Activity:
    """Everything parsed from one experiment's results and events; summarised by :func:`summarize`.

    Attributes:
        epochs: Per device, its epochs in time order.
        spans: Every reported iteration (all attempts), in time order of its end.
        lanes: Every lane that was opened.
        switches: Every lane switch.
        markers: Failures, out-of-memory re-admissions and exploit rollbacks.
        lanes_open, reserved, used, waiting: Per device, the number of open lanes, the bytes the lanes reserve
            (sum of capacities), the bytes their members need by their estimates (per lane ``sum P + max T``)
            and the number of trials waiting for a lane, over time.
        gpu_util, gpu_mem: Per device, NVML samples ``(ts, gpu_util_pct)`` and ``(ts, mem_used)`` (may be empty).
        lane_busy: Per ``(device, epoch, lane)``, the merged turn intervals.
        device_busy: Per device, the merged intervals when at least one lane was busy.
        leaves: Per ``(device, trial_id)``, the sorted times of the trial's :data:`LEAVE_EVENTS` on that device
            (where its time after its last report there ends: :data:`IDLE_AFTER_REPORT`).
        driver_waits: Per device, the merged intervals in which one of its trials waited for the driver's answer
            to a call (:data:`DRIVER_WAIT_EVENT`), or a data-parallel trial whose worker was on it did (its ranks
            > 0 wait for rank 0's call at their next collective op).
        driver_busy: The merged intervals in which the driver, with trials still to place, asked the searcher for
            trials or answered a call (:data:`DRIVER_BUSY_EVENT`).
        driver_calls: Per device, the waits of ``driver_waits`` one by one, each ``(start, end, method)`` (the
            call's name without its front end's prefix: ``suggest``, ``should_prune``, ``result_verdict``).
        driver_busy_calls: The spells of ``driver_busy`` one by one, each ``(start, end, what)`` (``searcher``, or
            the call answered).
    """

    epochs: dict[str, list[Epoch]]
    spans: list[Span]
    lanes: list[LaneLife]
    switches: list[Switch]
    markers: list[Marker]
    lanes_open: dict[str, StepSeries]
    reserved: dict[str, StepSeries]
    used: dict[str, StepSeries]
    waiting: dict[str, StepSeries]
    gpu_util: dict[str, list[tuple[float, float]]]
    gpu_mem: dict[str, StepSeries]
    lane_busy: dict[tuple[str, int, int | None], list[tuple[float, float]]]
    device_busy: dict[str, list[tuple[float, float]]]
    leaves: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    driver_waits: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    driver_busy: list[tuple[float, float]] = field(default_factory=list)
    driver_calls: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)
    driver_busy_calls: list[tuple[float, float, str]] = field(default_factory=list)

    @property
    def devices(self) -> list[str]:
        """Device names, in the order they first started."""
        return sorted(self.epochs, key=lambda d: (self.epochs[d][0].start, d))

    @property
    def start(self) -> float | None:
        """Start of the earliest epoch (None when nothing was recorded)."""
        starts = [e.start for eps in self.epochs.values() for e in eps]
        return min(starts) if starts else None

    @property
    def end(self) -> float | None:
        """End of the latest epoch."""
        ends = [e.end for eps in self.epochs.values() for e in eps]
        return max(ends) if ends else None

    def epoch_of(self, device: str, ts: float) -> int:
        """The epoch of ``device`` at ``ts`` (the last one started at or before it; 0 before the first)."""
        return _epoch_index([e.start for e in self.epochs.get(device, [])], ts)


def _epoch_index(starts: Sequence[float], ts: float) -> int:
    if len(starts) < 2:  # (no epoch or one: 0, whatever the time; most devices start once)
        return 0
    return max(0, bisect.bisect_right(starts, ts) - 1)


class _LaneState:
    """Lanes, members and the queue of one device epoch, replayed from lane events."""

    def __init__(self) -> None:
        self.capacity: dict[int, int] = {}
        self.members: dict[int, dict[str, tuple[int, int]]] = {}
        self.where: dict[str, int] = {}
        self.waiting: set[str] = set()

    def used(self) -> int:
        total = 0
        for members in self.members.values():
            if members:
                total += sum(p for p, _ in members.values()) + max(t for _, t in members.values())
        return total

    def remove_member(self, trial_id: str) -> None:
        lane = self.where.pop(trial_id, None)
        if lane is not None:
            self.members.get(lane, {}).pop(trial_id, None)


def _as_int(value: Any) -> int | None:
    """An int from an event field (ints, or floats that hold one), else None: malformed events are skipped."""
    if type(value) is int:  # (the usual case, first: int() of an int is that int)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def _detail(event: EventRow) -> list[Any]:
    data = event.data or {}
    detail = data.get("detail")
    return list(detail) if isinstance(detail, (list, tuple)) else []


def _driver_waits(ts: float, data: Mapping[str, Any]) -> list[tuple[float, float, str]]:
    """The waits of a :data:`DRIVER_WAIT_EVENT`, each ``(start, end, method)``: ``data["waits"]`` (``[[offset_s,
    wait_s], ...]`` from ``ts``) with ``data["methods"]`` (each wait's method; a store before it has none: its
    one method when ``data["calls"]`` names one, else :data:`DRIVER_METHOD_UNKNOWN`), or, as the first version
    stored one event per call, ``[ts, ts + data["wait_s"]]`` of ``data["method"]``."""
    waits = data.get("waits")
    if isinstance(waits, list):
        methods = data.get("methods")
        methods = methods if isinstance(methods, list) and len(methods) == len(waits) else None
        calls = data.get("calls")
        only = next(iter(calls)) if isinstance(calls, dict) and len(calls) == 1 else DRIVER_METHOD_UNKNOWN
        out = []
        for i, pair in enumerate(waits):
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                off, wait = _number(pair[0]), _number(pair[1])
                if off is not None and wait is not None and wait > 0:
                    out.append((ts + off, ts + off + wait, _method(methods[i] if methods is not None else only)))
        return out
    wait = _number(data.get("wait_s"))
    return [(ts, ts + wait, _method(data.get("method")))] if wait is not None and wait > 0 else []


def _method(raw: Any) -> str:
    """The name of a call to the driver as the report gives it: its front end's prefix (``optuna.``,
    ``fluidsalus.``) left off; :data:`DRIVER_METHOD_UNKNOWN` for none."""
    if not isinstance(raw, str) or not raw:
        return DRIVER_METHOD_UNKNOWN
    for prefix in DRIVER_METHOD_PREFIXES:
        if raw.startswith(prefix) and len(raw) > len(prefix):
            return raw[len(prefix):]
    return raw


def split_by_label(target: Sequence[tuple[float, float]],
                   labelled: Iterable[tuple[float, float, str]]) -> dict[str, float]:
    """The length of ``target`` (sorted disjoint intervals) split among the labels of ``labelled`` intervals:
    each moment of ``target`` is shared equally by the labelled intervals that cover it (two calls waited at
    once: half each), so the shares sum to the covered length of ``target``; a moment none covers goes to
    :data:`DRIVER_METHOD_UNKNOWN`. Labels with no share are left out."""
    points: list[tuple[float, int, str | None]] = []  # (t, +1/-1, label; None: target)
    for a, b in target:
        if b > a:
            points += [(a, 1, None), (b, -1, None)]
    for a, b, label in labelled:
        if b > a:
            points += [(a, 1, label), (b, -1, label)]
    points.sort(key=lambda p: p[0])
    out: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    inside = 0
    for i, (t, delta, label) in enumerate(points):
        if label is None:
            inside += delta
        else:
            count[label] += delta
        if i + 1 == len(points) or inside <= 0:
            continue
        seg = points[i + 1][0] - t
        if seg <= 0:
            continue
        live = {k: n for k, n in count.items() if n > 0}
        if not live:
            out[DRIVER_METHOD_UNKNOWN] += seg
            continue
        total = sum(live.values())
        for k, n in live.items():
            out[k] += seg * n / total
    return {k: v for k, v in out.items() if v > 0}


def build_activity(results: Iterable[ResultRow], events: Iterable[EventRow],
                   finished_at: float | None = None) -> Activity:
    """Parse an experiment's results (all attempts) and events (in store order) into an :class:`Activity`.

    Args:
        results: Every stored result, all attempts (``store.results(latest_attempt_only=False)``).
        events: Every stored event, in the order they were written (``store.events()``).
        finished_at: The experiment's ``finished_at`` (None while it runs); it ends the devices' last epochs.
    """
    results = list(results)
    events = list(events)

    # Epochs from device_start / device_died.
    starts: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
    died: dict[str, list[float]] = defaultdict(list)
    stopped: dict[str, list[float]] = defaultdict(list)  # device_stop / device_lost: the epoch ended there
    for ev in events:
        if ev.kind == "device_start" and ev.device is not None:
            starts[ev.device].append((ev.ts, ev.data or {}))
        elif ev.kind == "device_died" and ev.device is not None:
            died[ev.device].append(ev.ts)
        elif ev.kind in DEVICE_END_EVENTS and ev.device is not None:
            stopped[ev.device].append(ev.ts)
    start_ts = {d: sorted(ts for ts, _ in s) for d, s in starts.items()}

    def epoch_of(device: str, ts: float) -> int:
        return _epoch_index(start_ts.get(device, []), ts)

    # Where each (trial, attempt) ran: trial_start events, else place events.
    started: dict[tuple[str, int], list[tuple[float, str]]] = defaultdict(list)
    placed: dict[tuple[str, int], list[tuple[float, str]]] = defaultdict(list)
    for ev in events:
        if ev.kind in ("trial_start", "place") and ev.trial_id is not None and ev.device is not None:
            attempt = (ev.data or {}).get("attempt", 0)
            (started if ev.kind == "trial_start" else placed)[(ev.trial_id, int(attempt or 0))].append(
                (ev.ts, ev.device))

    def device_of(trial_id: str, attempt: int, ts: float) -> str:
        for table in (started, placed):
            rows = table.get((trial_id, attempt))
            if rows:
                before = [d for t, d in rows if t <= ts]
                return before[-1] if before else rows[0][1]
        return UNKNOWN_DEVICE

    # Replay lane events per device.
    lane_state: dict[str, _LaneState] = {}
    lanes_open: dict[str, StepSeries] = defaultdict(StepSeries)
    reserved: dict[str, StepSeries] = defaultdict(StepSeries)
    used: dict[str, StepSeries] = defaultdict(StepSeries)
    waiting: dict[str, StepSeries] = defaultdict(StepSeries)
    lives: dict[tuple[str, int, int], LaneLife] = {}
    admits: dict[tuple[str, int, str], list[tuple[float, int]]] = defaultdict(list)
    switches: list[Switch] = []
    gpu_util: dict[str, list[tuple[float, float]]] = defaultdict(list)
    gpu_mem: dict[str, StepSeries] = defaultdict(StepSeries)
    restarts: dict[str, list[tuple[float, str, int | None]]] = defaultdict(list)  # trial -> (ts, cause, from_iteration)
    resumes: list[float] = []
    raw_markers: list[tuple[float, str, str, str | None, str | None]] = []  # ts, kind, device, trial, detail
    failures: list[tuple[float, str, str, int, str]] = []  # ts, device, trial, attempt, cause: cut-short iterations
    switch_in: dict[tuple[str, str], list[float]] = defaultdict(list)  # (device, trial) -> switch times
    last_ts: dict[tuple[str, int], float] = {}
    leaves: dict[tuple[str, str], list[float]] = defaultdict(list)  # (device, trial) -> its LEAVE_EVENTS' times
    # device -> its trials' calls' waits, each (start, end, method)
    driver_waits: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    # the driver asked the searcher / answered a call, with trials to place: (start, end, what)
    driver_busy: list[tuple[float, float, str]] = []
    trial_waits: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)  # (trial, attempt) -> waits
    # (trial, attempt) -> [device, worker_start, worker_end] of each rank > 0 of a data-parallel trial
    workers: dict[tuple[str, int], list[list[Any]]] = defaultdict(list)

    def touch(device: str, ts: float) -> None:
        key = (device, epoch_of(device, ts))
        last = last_ts.get(key)
        if last is None or ts > last:  # (max(last, ts))
            last_ts[key] = ts

    def record(device: str, ts: float, state: _LaneState) -> None:
        lanes_open[device].points.append((ts, len(state.capacity)))
        reserved[device].points.append((ts, sum(state.capacity.values())))
        used[device].points.append((ts, state.used()))
        waiting[device].points.append((ts, len(state.waiting)))

    for ev in events:
        data = ev.data or {}
        if ev.kind == "resume":
            resumes.append(ev.ts)
        elif ev.kind == DRIVER_WAIT_EVENT and ev.device is not None:
            waits = _driver_waits(ev.ts, data)
            driver_waits[ev.device].extend(waits)
            if ev.trial_id is not None:  # (its data-parallel workers waited too: below)
                trial_waits[(ev.trial_id, int(data.get("attempt") or 0))].extend(waits)
        elif ev.kind == DRIVER_BUSY_EVENT:
            wait = _number(data.get("wait_s"))
            if wait is not None and wait > 0 and data.get("more", True):  # (with nothing to place, no device waited)
                driver_busy.append((ev.ts, ev.ts + wait, _method(data.get("what"))))
        attempt = data.get("attempt")
        attempt = attempt if isinstance(attempt, int) else 0
        if ev.kind == TRIAL_RESTART_EVENT and ev.trial_id is not None:
            reason = str(data.get("reason") or WASTE_OTHER)
            restarts[ev.trial_id].append((ev.ts, reason, _as_int(data.get("from_iteration"))))
            kind = MARK_EXPLOIT if reason == WASTE_EXPLOIT else MARK_FAILURE
            if reason not in PLANNED_RESTART_REASONS:
                raw_markers.append((ev.ts, kind, ev.device or UNKNOWN_DEVICE, ev.trial_id, data.get("error")))
            if reason == WASTE_RETRY and ev.device is not None:  # data["attempt"] is the new attempt
                failures.append((ev.ts, ev.device, ev.trial_id, attempt - 1, WASTE_RETRY))
        elif ev.kind in ("oom_readmit", "oom_after_stop") and ev.trial_id is not None:
            if ev.kind == "oom_readmit":  # (after a stop the trial ends there: nothing is redone)
                restarts[ev.trial_id].append((ev.ts, WASTE_OOM, _as_int(data.get("from_iteration"))))
            raw_markers.append((ev.ts, MARK_OOM, ev.device or UNKNOWN_DEVICE, ev.trial_id, data.get("error")))
            if ev.device is not None:
                failures.append((ev.ts, ev.device, ev.trial_id, attempt, WASTE_OOM))
        elif ev.kind == "trial_end" and data.get("outcome") == "errored" and ev.trial_id is not None:
            raw_markers.append((ev.ts, MARK_FAILURE, ev.device or UNKNOWN_DEVICE, ev.trial_id, None))
            if ev.device is not None:
                failures.append((ev.ts, ev.device, ev.trial_id, attempt, WASTE_FAILED))
        if ev.device is None:
            continue
        device = ev.device
        if ev.kind not in NOT_ACTIVITY_EVENTS:
            touch(device, ev.ts)
        if ev.kind in LEAVE_EVENTS and ev.trial_id is not None \
                and not (ev.kind == TRIAL_RESTART_EVENT and data.get("reason") == WASTE_DEVICE_DIED):
            leaves[(device, ev.trial_id)].append(ev.ts)  # (an actor's death cut its iteration short: IDLE_STOPPED)
        if ev.kind == "worker_start" and ev.trial_id is not None:
            workers[(ev.trial_id, attempt)].append([device, ev.ts, math.inf])
            continue
        if ev.kind == "worker_end" and ev.trial_id is not None:
            for row in workers.get((ev.trial_id, attempt), []):
                if row[0] == device and row[2] == math.inf:
                    row[2] = ev.ts
            continue
        if ev.kind == "device_start":
            lane_state[device] = _LaneState()
            record(device, ev.ts, lane_state[device])
            continue
        if ev.kind == "nvml":
            util, mem = _number(data.get("gpu_util_pct")), _number(data.get("mem_used"))
            if util is not None:
                gpu_util[device].append((ev.ts, util))
            if mem is not None:
                gpu_mem[device].add(ev.ts, mem)
            continue
        if ev.kind == "switch":
            latency = _number(data.get("latency_ms"))
            if latency is not None:
                lane = data.get("lane")
                switches.append(Switch(ev.ts, device, epoch_of(device, ev.ts), lane if isinstance(lane, int) else None,
                                       ev.trial_id, data.get("from"), latency))
            if ev.trial_id is not None:
                switch_in[(device, ev.trial_id)].append(ev.ts)
            continue
        if not ev.kind.startswith("lane_"):
            continue
        state = lane_state.get(device)
        if state is None:  # (a lane event before any device_start; setdefault made a state at every lane event)
            state = lane_state[device] = _LaneState()
        epoch = epoch_of(device, ev.ts)
        lane = _as_int(data.get("lane"))
        if ev.kind in ("lane_open", "lane_resize"):
            cap = _as_int(data.get("capacity")) or 0
        if ev.kind == "lane_open" and lane is not None:
            state.capacity[lane] = cap
            state.members.setdefault(lane, {})
            lives[(device, epoch, lane)] = LaneLife(device, epoch, lane, ev.ts, None, cap)
        elif ev.kind == "lane_resize" and lane is not None:
            state.capacity[lane] = cap
            life = lives.get((device, epoch, lane))
            if life is not None:
                life.capacity_peak_bytes = max(life.capacity_peak_bytes, cap)
        elif ev.kind == "lane_close" and lane is not None:
            state.capacity.pop(lane, None)
            for tid in state.members.pop(lane, {}):
                state.where.pop(tid, None)
            life = lives.get((device, epoch, lane))
            if life is not None:
                life.closed_at = ev.ts
        elif ev.kind == "lane_admit" and ev.trial_id is not None:
            lane, p, t = (_as_int(x) for x in [*_detail(ev), None, None, None][:3])
            if lane is None or p is None or t is None:
                continue  # a malformed admission changes nothing
            state.remove_member(ev.trial_id)
            state.members.setdefault(lane, {})[ev.trial_id] = (p, t)
            state.where[ev.trial_id] = lane
            state.waiting.discard(ev.trial_id)
            admits[(device, epoch, ev.trial_id)].append((ev.ts, lane))
        elif ev.kind == "lane_leave" and ev.trial_id is not None:
            state.remove_member(ev.trial_id)
            state.waiting.discard(ev.trial_id)
        elif ev.kind == "lane_wait" and ev.trial_id is not None:
            state.remove_member(ev.trial_id)
            state.waiting.add(ev.trial_id)
        elif ev.kind in ("lane_estimate", "lane_oom") and ev.trial_id is not None:
            detail = _detail(ev)
            p_t = [_as_int(x) for x in detail[-2:]] if len(detail) >= 2 else [None]
            where = state.where.get(ev.trial_id)
            if None not in p_t and where is not None:
                state.members[where][ev.trial_id] = (p_t[0], p_t[1])
        elif ev.kind == "lane_fail" and ev.trial_id is not None:  # the failure itself is marked by its trial_end
            state.remove_member(ev.trial_id)
            state.waiting.discard(ev.trial_id)
        else:
            continue
        record(device, ev.ts, state)

    # A data-parallel trial's ranks > 0 wait for rank 0's calls to the driver (the next collective op): their
    # devices waited for the driver too, while the worker was there.
    for key, rows in workers.items():
        waits = trial_waits.get(key)
        if waits:
            for device, since, until in rows:
                driver_waits[device].extend((max(a, since), min(b, until), method) for a, b, method in waits
                                            if min(b, until) > max(a, since))

    # Which report of each iteration is useful, and why the others were wasted.
    by_iteration: dict[tuple[str, int], list[ResultRow]] = defaultdict(list)
    for r in results:
        by_iteration[(r.trial_id, r.iteration)].append(r)
    for rows in restarts.values():
        rows.sort(key=lambda r: r[0])
    resumes.sort()
    verdict: dict[int, str | None] = {}  # id(row) -> waste cause (None: useful)
    for (trial_id, iteration), rows in by_iteration.items():
        rows.sort(key=lambda r: (r.attempt, r.ts))
        for row, redo in zip(rows, rows[1:], strict=False):
            verdict[id(row)] = _cause(restarts.get(trial_id, []), resumes, row.ts, redo.ts, iteration)
        verdict[id(rows[-1])] = None

    # Spans.
    def device_time(device: str, epoch: int, start: float, end: float) -> float:
        """``start`` clipped to the start of the device's epoch that the span ends in: the device time of a turn.
        A resumed trial's first iteration timed from before its device came back ran on no device before that
        (busy time, wasted seconds and a trial's compute seconds all read the clipped span)."""
        starts = start_ts.get(device)
        if starts and epoch < len(starts):
            start = max(start, starts[epoch])
        return min(start, end)

    def lane_at(device: str, epoch: int, trial_id: str, ts: float) -> int | None:
        history = admits.get((device, epoch, trial_id), [])
        before = [lane for t, lane in history if t <= ts]
        return before[-1] if before else (history[0][1] if history else None)

    spans: list[Span] = []
    last_result: dict[tuple[str, str, int], list[tuple[float, int]]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r.ts):
        device = device_of(r.trial_id, r.attempt, r.ts)
        epoch = epoch_of(device, r.ts)
        dt = _number(r.metrics.get(ITER_TIME_KEY))
        dt = max(0.0, dt) if dt is not None else 0.0
        cause = verdict.get(id(r))
        spans.append(Span(r.trial_id, r.attempt, r.iteration, device, epoch, lane_at(device, epoch, r.trial_id, r.ts),
                          device_time(device, epoch, r.ts - dt, r.ts), r.ts, _number(r.metrics.get(SAMPLES_KEY)),
                          cause is None, cause))
        last_result[(device, r.trial_id, r.attempt)].append((r.ts, r.iteration))
        touch(device, r.ts)
        for other, since, until in workers.get((r.trial_id, r.attempt), []):  # its ranks > 0 computed it too
            if since <= r.ts <= until and other != device:
                other_epoch = epoch_of(other, r.ts)
                spans.append(Span(r.trial_id, r.attempt, r.iteration, other, other_epoch,
                                  lane_at(other, other_epoch, r.trial_id, r.ts),
                                  device_time(other, other_epoch, max(r.ts - dt, since), r.ts), r.ts, None,
                                  cause is None, cause, worker=True))

    # The iteration each failure cut short held the turn from the trial's last result, switch-in or start.
    for ts, device, trial_id, attempt, cause in failures:
        reports = sorted((t, it) for t, it in last_result.get((device, trial_id, attempt), []) if t <= ts)
        since = [t for t, _ in reports[-1:]]
        since += [t for t in switch_in.get((device, trial_id), []) if t <= ts]
        # (A start stamped at the failure itself is the re-admission that follows it, not the failed iteration's.)
        since += [t for t, d in started.get((trial_id, attempt), []) if d == device and t < ts]
        if not since:
            continue
        start = max(since)
        epoch = epoch_of(device, ts)
        iteration = reports[-1][1] + 1 if reports else 1
        spans.append(Span(trial_id, attempt, iteration, device, epoch, lane_at(device, epoch, trial_id, start),
                          device_time(device, epoch, start, ts), ts, None, False, cause, partial=True))
    spans.sort(key=lambda s: s.end)

    # Epoch bounds.
    epochs: dict[str, list[Epoch]] = {}
    # While the experiment runs (no finished_at), a device's live epoch lasts up to the store's latest
    # activity, not its own last event: a device idle since its last trial ended was shown busy.
    latest = max([*last_ts.values(), *(s.end for s in spans)], default=None)
    for device, rows in starts.items():
        rows.sort(key=lambda x: x[0])
        out = []
        for i, (ts, info) in enumerate(rows):
            nxt = rows[i + 1][0] if i + 1 < len(rows) else math.inf
            end = last_ts.get((device, i), ts)
            deaths = [d for d in died.get(device, []) if ts <= d < nxt]
            stops = [d for d in stopped.get(device, []) if ts <= d < nxt]
            if deaths:
                end = deaths[0]
            elif stops:  # (a device a resumed run did not start again lasted to that run's end)
                end = max(end, stops[0])
            elif nxt == math.inf and finished_at is not None and finished_at > end:
                end = finished_at
            elif nxt == math.inf and finished_at is None and latest is not None and latest > end:
                end = latest
            slots = info.get("slots")
            node = info.get("node_ip")
            out.append(Epoch(device, i, ts, end, info.get("kind"), int(slots) if isinstance(slots, int) else None,
                             node if isinstance(node, str) else None))
        epochs[device] = out
    orphans = defaultdict(list)
    for s in spans:
        if s.device not in epochs:
            orphans[s.device].append(s)
    for device, rows in orphans.items():  # results of a device no device_start names: span their extent
        epochs[device] = [Epoch(device, 0, min(s.start for s in rows), max(s.end for s in rows), None, None)]

    # Every series drops to 0 when an epoch ends (its actor and lanes are gone).
    for device, eps in epochs.items():
        for ep in eps:
            for series in (lanes_open, reserved, used, waiting):
                series[device].add(ep.end, 0.0)
    for table in (lanes_open, reserved, used, waiting, gpu_mem):
        for s in table.values():
            s.finish()

    # Busy intervals.
    per_lane: dict[tuple[str, int, int | None], list[tuple[float, float]]] = defaultdict(list)
    for s in spans:
        per_lane[(s.device, s.epoch, s.lane)].append((s.start, s.end))
    # Busy time is device time: the spans are clipped to their epoch's start (device_time above), and the busy
    # intervals to the device's epochs too (counted whole, a turn reaching back before its epoch's start made busy_s
    # exceed the device's time and the residual idle cause, between_turns, go negative).
    alive = {d: merge_intervals((e.start, e.end) for e in eps) for d, eps in epochs.items()}
    lane_busy = {key: intersect_intervals(merge_intervals(iv), alive.get(key[0], [])) for key, iv in per_lane.items()}
    per_device: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (device, _, _), iv in lane_busy.items():
        per_device[device].extend(iv)
    device_busy = {d: merge_intervals(iv) for d, iv in per_device.items()}

    # Markers sit on the lane where the trial last computed before them.
    last_lane: dict[tuple[str, str], list[tuple[float, int | None]]] = defaultdict(list)
    for s in spans:
        last_lane[(s.device, s.trial_id)].append((s.end, s.lane))
    markers = []
    for ts, kind, device, trial_id, detail in sorted(raw_markers, key=lambda m: m[0]):
        history = last_lane.get((device, trial_id or ""), [])
        before = [lane for end, lane in history if end <= ts]
        lane = before[-1] if before else None
        markers.append(Marker(ts, kind, device, epoch_of(device, ts), lane, trial_id, detail))

    return Activity(
        epochs=epochs, spans=spans, lanes=sorted(lives.values(), key=lambda x: (x.device, x.epoch, x.opened_at)),
        switches=switches, markers=markers, lanes_open=dict(lanes_open), reserved=dict(reserved), used=dict(used),
        waiting=dict(waiting), gpu_util=dict(gpu_util), gpu_mem=dict(gpu_mem), lane_busy=lane_busy,
        device_busy=device_busy, leaves={key: sorted(ts) for key, ts in leaves.items()},
        driver_waits={d: merge_intervals((a, b) for a, b, _ in iv) for d, iv in driver_waits.items()},
        driver_busy=merge_intervals((a, b) for a, b, _ in driver_busy),
        driver_calls={d: sorted(iv) for d, iv in driver_waits.items()}, driver_busy_calls=sorted(driver_busy),
    )


def idle_intervals(activity: Activity, device: str) -> dict[str, list[tuple[float, float]]]:
    """The device's idle time (its epochs minus its busy time), as sorted disjoint intervals per idle cause.

    Every cause of :data:`IDLE_CAUSES` is a key (empty list when none). In each epoch, each idle moment gets the
    first cause that fits it: :data:`IDLE_DRIVER` (one of its trials waited for the driver's answer to a call, or
    no lane was open while the driver was busy with trials to place, on a stretch without a lane that ends with one
    opening), :data:`IDLE_NO_TRIAL` (no lane open),
    :data:`IDLE_STARTUP` (before the epoch's first turn), :data:`IDLE_AFTER_REPORT` (from a trial's last span on
    the device to its next leave event there), :data:`IDLE_STOPPED` (after the epoch's last turn),
    :data:`IDLE_BETWEEN_TURNS` (the rest). The causes of an epoch are disjoint and cover its idle time exactly.
    """
    return _idle_split(activity, device)[0]


def _idle_split(activity: Activity, device: str) -> tuple[dict[str, list[tuple[float, float]]],
                                                          list[tuple[float, float, str]]]:
    """:func:`idle_intervals`, and the calls and driver spells that make its :data:`IDLE_DRIVER` time, each
    ``(start, end, method)`` (a trial's wait for the driver; the driver's busy spell on a stretch without a trial
    that a lane ended): :func:`split_by_label` splits that time by method."""
    out: dict[str, list[tuple[float, float]]] = {cause: [] for cause in IDLE_CAUSES}
    calls: list[tuple[float, float, str]] = []
    busy_all = activity.device_busy.get(device, [])
    mine = [s for s in activity.spans if s.device == device]
    for ep in activity.epochs.get(device, []):
        if ep.end <= ep.start:
            continue
        whole = [(ep.start, ep.end)]
        busy = intersect_intervals(busy_all, whole)
        idle = subtract_intervals(whole, busy)
        lanes = merge_intervals(
            (max(life.opened_at, ep.start), min(ep.end if life.closed_at is None else life.closed_at, ep.end))
            for life in activity.lanes if life.device == device and life.epoch == ep.index)
        lanes = [(a, b) for a, b in lanes if a < b]
        first = busy[0][0] if busy else ep.end
        no_lane = subtract_intervals(whole, lanes)  # no lane open: the complement of the lanes
        # The driver's busy spells count only on the stretches without a trial that a trial ended (a lane opened
        # after them): on a device that got nothing more (the sweep's last trials ran elsewhere, a concurrency
        # limit) the driver held nothing back from it, whatever it was doing.
        awaited = [(a, b) for a, b in no_lane if b < ep.end]
        calls += [(max(a, ep.start), min(b, ep.end), m) for a, b, m in activity.driver_calls.get(device, [])
                  if min(b, ep.end) > max(a, ep.start)]
        by_what: dict[str, list[tuple[float, float]]] = defaultdict(list)  # (one linear merge per label)
        for a, b, m in activity.driver_busy_calls:
            by_what[m].append((a, b))
        calls += [(a2, b2, m) for m, spells in by_what.items()
                  for a2, b2 in intersect_intervals(merge_intervals(spells), awaited)]
        pieces = {IDLE_DRIVER: merge_intervals([*intersect_intervals(activity.driver_waits.get(device, []), whole),
                                                *intersect_intervals(activity.driver_busy, awaited)]),
                  IDLE_NO_TRIAL: no_lane,
                  IDLE_STARTUP: [(ep.start, first)] if first > ep.start else []}
        # after a trial's last report: from its last span before each of its leave events to that event
        tails = []
        last_end: dict[str, list[float]] = defaultdict(list)
        for s in mine:
            if s.epoch == ep.index:
                last_end[s.trial_id].append(s.end)
        for trial_id, ends in last_end.items():
            ends.sort()
            prev = ep.start
            for ts in activity.leaves.get((device, trial_id), []):
                if not ep.start <= ts <= ep.end:
                    continue
                i = bisect.bisect_right(ends, ts)
                if i and ends[i - 1] >= prev and ends[i - 1] < ts:
                    tails.append((ends[i - 1], ts))
                prev = ts
        pieces[IDLE_AFTER_REPORT] = merge_intervals(tails)
        pieces[IDLE_STOPPED] = [(busy[-1][1], ep.end)] if busy and busy[-1][1] < ep.end else []
        for cause in IDLE_CAUSES[:-1]:
            took = intersect_intervals(idle, pieces[cause])
            out[cause].extend(took)
            idle = subtract_intervals(idle, pieces[cause])
        out[IDLE_BETWEEN_TURNS].extend(idle)
    return out, calls


def _cause(restarts: Sequence[tuple[float, str, int | None]], resumes: Sequence[float], done: float, redo: float,
           iteration: int) -> str:
    """Why the report of ``iteration`` at ``done`` was redone at ``redo``: the first restart marker in between that
    resumed the trial from before ``iteration`` (a marker without ``from_iteration``, and a ``resume``, may have).

    A restart from at or after the iteration undid nothing of it: a PBT trial that gave its place up at its
    checkpoint (``turn``) and was later exploited from an earlier checkpoint lost its iterations to the exploit,
    not to its turn. (When no marker resumed from before it, the first marker in between is named, as before
    ``from_iteration`` was read; none: :data:`WASTE_OTHER`.)
    """
    between = [(ts, c, start) for ts, c, start in restarts if done <= ts <= redo]
    between += [(ts, WASTE_RESUME, None) for ts in resumes if done <= ts <= redo]
    undid = [(ts, c) for ts, c, start in between if start is None or start < iteration]
    found = undid or [(ts, c) for ts, c, _ in between]
    return min(found)[1] if found else WASTE_OTHER


# ---------------------------------------------------------------------------------------------- summaries


@dataclass
class WasteStats:
    """Work of one cause that was thrown away.

    Attributes:
        iterations: Completed (reported) iterations that were redone later.
        partial: Iterations cut short by a failure (no result).
        seconds: Compute time of both: the time their trials held the lane's turn.
    """

    iterations: int = 0
    partial: int = 0
    seconds: float = 0.0


@dataclass
class LaneStats:
    """One lane over the analysed window."""

    device: str
    epoch: int
    lane: int
    opened_at: float
    closed_at: float | None
    open_s: float
    busy_s: float
    occupancy: float | None
    iterations: int
    trials: int
    capacity_peak_bytes: int


@dataclass
class DeviceStats:
    """What one device (or, for ``device == "total"``, all of them) did in the analysed window.

    Rates are per device-second; a figure that cannot be computed (no device time, no samples) is None.
    See ``docs/goodput.md`` for each definition.
    """

    device: str
    kind: str | None
    slots: int | None
    device_seconds: float
    busy_s: float
    busy_fraction: float | None
    lane_busy_s: float
    mean_busy_lanes: float | None
    slot_occupancy: float | None
    trials: int
    iterations: int
    useful_iterations: int
    wasted_iterations: int
    throughput: float | None
    goodput: float | None
    goodput_fraction: float | None
    samples: float | None
    samples_per_s: float | None
    useful_samples_per_s: float | None
    switches: int
    switch_latency_ms_p50: float | None
    switch_latency_ms_p99: float | None
    lanes_peak: int
    lanes_mean: float | None
    waiting_peak: int
    reserved_peak_bytes: int
    used_peak_bytes: int
    gpu_util_mean_pct: float | None
    gpu_mem_used_peak_bytes: int | None
    wasted: dict[str, WasteStats] = field(default_factory=dict)
    node: str | None = None  # the node its (last) actor ran on; None for the totals and older stores
    #: Compute seconds of wasted work on this device (iterations redone later, and those a failure cut short:
    #: their turn time, lane-seconds), a data-parallel worker's share included: the device time ``wasted``'s
    #: seconds leave on rank 0's device only.
    wasted_s: float = 0.0
    #: ``wasted_s / lane_busy_s``: the share of the device's compute that was wasted (None without compute).
    wasted_fraction: float | None = None
    #: ``device_seconds - busy_s``: the device's time in which none of its lanes computed.
    idle_s: float = 0.0
    #: ``idle_s`` split by cause (every one of :data:`IDLE_CAUSES`, in that order; they sum to ``idle_s``).
    idle: dict[str, float] = field(default_factory=dict)
    #: ``idle["driver"]`` split by the method of the calls waited for (``suggest``, ``should_prune``, ``report``,
    #: ``start``, ``finish``, ``result_verdict``, ``searcher`` for the driver asking it, ...), largest first; a
    #: moment in which several calls waited is shared equally by them. They sum to ``idle["driver"]``.
    idle_driver: dict[str, float] = field(default_factory=dict)


@dataclass
class Goodput:
    """The summary of one window: per device, the totals, and per lane."""

    start: float
    end: float
    devices: list[DeviceStats]
    totals: DeviceStats
    lanes: list[LaneStats]


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _window(activity: Activity, window: tuple[float, float] | None) -> tuple[float, float]:
    if window is not None:
        return float(window[0]), float(window[1])
    start, end = activity.start, activity.end
    if start is None or end is None:
        return 0.0, 0.0
    return start, end


def _waste(spans: Iterable[Span], w0: float = -math.inf, w1: float = math.inf) -> dict[str, WasteStats]:
    """Wasted iterations by cause, and their seconds within ``[w0, w1]`` (a span that began before a window counts
    its part inside it, as busy time does)."""
    out: dict[str, WasteStats] = {}
    for s in spans:
        if s.waste_cause is not None and not s.worker:  # (a wasted iteration counts once, on rank 0's device)
            w = out.setdefault(s.waste_cause, WasteStats())
            if s.partial:
                w.partial += 1
            else:
                w.iterations += 1
            w.seconds += overlap(s.start, s.end, w0, w1)
    return out


def _stats(device: str, kind: str | None, slots: int | None, device_seconds: float, busy_s: float,
           lane_busy_s: float, slot_seconds: float, spans: Sequence[Span], latencies: Sequence[float],
           lanes_peak: float, lanes_integral: float, lanes_time: float, waiting_peak: float, reserved_peak: float,
           used_peak: float, util: Sequence[float], mem_peak: float | None,
           window: tuple[float, float] = (-math.inf, math.inf)) -> DeviceStats:
    wasted = _waste(spans, *window)
    # (partial and worker spans too: device time; within the window, as the compute it is a share of)
    wasted_s = sum(overlap(s.start, s.end, *window) for s in spans if not s.useful)
    trials = len({s.trial_id for s in spans})  # (a cut-short iteration too; a data-parallel trial's workers' devices)
    spans = [s for s in spans if s.counted]
    useful = [s for s in spans if s.useful]
    samples_all = [s.samples for s in spans if s.samples is not None]
    samples_useful = [s.samples for s in useful if s.samples is not None]
    total_samples = sum(samples_all) if samples_all else None
    return DeviceStats(
        device=device, kind=kind, slots=slots, device_seconds=device_seconds, busy_s=busy_s,
        busy_fraction=_ratio(busy_s, device_seconds), lane_busy_s=lane_busy_s,
        mean_busy_lanes=_ratio(lane_busy_s, device_seconds), slot_occupancy=_ratio(lane_busy_s, slot_seconds),
        trials=trials, iterations=len(spans), useful_iterations=len(useful),
        wasted_iterations=len(spans) - len(useful), throughput=_ratio(len(spans), device_seconds),
        goodput=_ratio(len(useful), device_seconds), goodput_fraction=_ratio(len(useful), len(spans)),
        samples=total_samples,
        samples_per_s=None if total_samples is None else _ratio(total_samples, device_seconds),
        useful_samples_per_s=None if not samples_useful else _ratio(sum(samples_useful), device_seconds),
        switches=len(latencies), switch_latency_ms_p50=percentile(latencies, SWITCH_P50),
        switch_latency_ms_p99=percentile(latencies, SWITCH_P99), lanes_peak=int(lanes_peak),
        lanes_mean=_ratio(lanes_integral, lanes_time), waiting_peak=int(waiting_peak),
        reserved_peak_bytes=int(reserved_peak), used_peak_bytes=int(used_peak),
        gpu_util_mean_pct=(sum(util) / len(util)) if util else None,
        gpu_mem_used_peak_bytes=None if mem_peak is None else int(mem_peak), wasted=wasted,
        wasted_s=wasted_s, wasted_fraction=_ratio(wasted_s, lane_busy_s),
    )


def _idle(activity: Activity, device: str, device_seconds: float, busy_s: float, w0: float,
          w1: float) -> tuple[float, dict[str, float], dict[str, float]]:
    """The device's idle seconds in ``[w0, w1]``, their split by cause (:func:`idle_intervals`), and the
    :data:`IDLE_DRIVER` seconds split by the method of the calls waited for (:func:`split_by_label`: a moment two
    calls waited at once counts half to each), largest first.

    :data:`IDLE_BETWEEN_TURNS` is what the other causes leave of ``device_seconds - busy_s``, so that the causes
    sum to it exactly (as intervals they do: this only absorbs rounding).
    """
    idle_s = device_seconds - busy_s
    intervals, calls = _idle_split(activity, device)
    split = {cause: covered(intervals[cause], w0, w1) for cause in IDLE_CAUSES[:-1]}
    rest = idle_s - sum(split.values())
    split[IDLE_BETWEEN_TURNS] = 0.0 if abs(rest) < 1e-9 else rest
    by_method = split_by_label(intersect_intervals(intervals[IDLE_DRIVER], [(w0, w1)]), calls)
    return idle_s, split, dict(sorted(by_method.items(), key=lambda x: (-x[1], x[0])))


def summarize(activity: Activity, window: tuple[float, float] | None = None) -> Goodput:
    """Goodput per device, in total and per lane, over ``window`` (absolute seconds; default: the whole run).

    An iteration belongs to the window its report falls in (``start < ts <= end``, and ``ts == start`` for a
    window that starts the run); busy and open times are clipped to the window.
    """
    w0, w1 = _window(activity, window)
    run_start = activity.start

    def inside(ts: float) -> bool:
        return w0 < ts <= w1 or (ts == w0 and (run_start is None or w0 <= run_start))

    empty = StepSeries()
    devices: list[DeviceStats] = []
    all_latencies: list[float] = []
    all_util: list[float] = []
    all_spans: list[Span] = []
    slot_seconds_total = 0.0
    for device in activity.devices:
        eps = activity.epochs[device]
        device_seconds = sum(overlap(e.start, e.end, w0, w1) for e in eps)
        slots = eps[-1].slots
        slot_seconds = sum(overlap(e.start, e.end, w0, w1) * (e.slots or 0) for e in eps)
        slot_seconds_total += slot_seconds
        spans = [s for s in activity.spans if s.device == device and inside(s.end)]
        all_spans.extend(spans)
        busy_s = covered(activity.device_busy.get(device, []), w0, w1)
        lane_busy_s = sum(covered(iv, w0, w1) for (d, _, _), iv in activity.lane_busy.items() if d == device)
        latencies = [s.latency_ms for s in activity.switches if s.device == device and inside(s.ts)]
        all_latencies.extend(latencies)
        util = [u for ts, u in activity.gpu_util.get(device, []) if inside(ts)]
        all_util.extend(util)
        mem = activity.gpu_mem.get(device)
        lanes = activity.lanes_open.get(device, empty)
        devices.append(_stats(
            device, eps[-1].kind, slots, device_seconds, busy_s, lane_busy_s, slot_seconds, spans, latencies,
            lanes.peak(w0, w1), lanes.integral(w0, w1), device_seconds,
            activity.waiting.get(device, empty).peak(w0, w1), activity.reserved.get(device, empty).peak(w0, w1),
            activity.used.get(device, empty).peak(w0, w1), util,
            mem.peak(w0, w1) if mem is not None and mem.points else None, (w0, w1),
        ))
        devices[-1].node = eps[-1].node
        devices[-1].idle_s, devices[-1].idle, devices[-1].idle_driver = _idle(activity, device, device_seconds,
                                                                              busy_s, w0, w1)

    names = activity.devices

    def total_series(table: Mapping[str, StepSeries]) -> StepSeries:
        return StepSeries.summed([table.get(d, empty) for d in names])

    total_lanes = total_series(activity.lanes_open)
    mems = [activity.gpu_mem[d] for d in names if d in activity.gpu_mem and activity.gpu_mem[d].points]
    kinds = {d.kind for d in devices}
    totals = _stats(
        TOTAL_DEVICE, kinds.pop() if len(kinds) == 1 else None,
        sum(d.slots or 0 for d in devices) or None, sum(d.device_seconds for d in devices),
        sum(d.busy_s for d in devices), sum(d.lane_busy_s for d in devices), slot_seconds_total, all_spans,
        all_latencies, total_lanes.peak(w0, w1), total_lanes.integral(w0, w1), w1 - w0,
        total_series(activity.waiting).peak(w0, w1), total_series(activity.reserved).peak(w0, w1),
        total_series(activity.used).peak(w0, w1), all_util,
        StepSeries.summed(mems).peak(w0, w1) if mems else None, (w0, w1),
    )

    totals.idle_s = totals.device_seconds - totals.busy_s
    totals.idle = {cause: sum(d.idle.get(cause, 0.0) for d in devices) for cause in IDLE_CAUSES}
    driver: dict[str, float] = defaultdict(float)
    for d in devices:
        for method, seconds in d.idle_driver.items():
            driver[method] += seconds
    totals.idle_driver = dict(sorted(driver.items(), key=lambda x: (-x[1], x[0])))

    by_lane: dict[tuple[str, int, int | None], list[Span]] = defaultdict(list)
    for s in all_spans:
        by_lane[(s.device, s.epoch, s.lane)].append(s)
    lanes: list[LaneStats] = []
    for life in activity.lanes:
        eps = activity.epochs.get(life.device, [])
        epoch_end = eps[life.epoch].end if life.epoch < len(eps) else life.opened_at
        closed = life.closed_at if life.closed_at is not None else epoch_end
        open_s = overlap(life.opened_at, closed, w0, w1)
        if open_s <= 0 and not (w0 <= life.opened_at <= w1):
            continue
        busy = covered(activity.lane_busy.get((life.device, life.epoch, life.lane), []), w0, w1)
        mine = [s for s in by_lane.get((life.device, life.epoch, life.lane), []) if s.counted]
        lanes.append(LaneStats(life.device, life.epoch, life.lane, life.opened_at, life.closed_at, open_s, busy,
                               _ratio(busy, open_s), len(mine), len({s.trial_id for s in mine}),
                               life.capacity_peak_bytes))
    return Goodput(w0, w1, devices, totals, lanes)


def queue_waits(events: Iterable[EventRow], created: Mapping[str, float]) -> dict[str, list[tuple[float, float]]]:
    """Each trial's waits to start, ``(since, start)`` in time order: every stretch in which it waited off any device
    for a place, ended by a ``trial_start`` (its ``queued_s`` is their device time, ``docs/goodput.md``).

    A trial waits from its creation (``created``) to its first ``trial_start``, and again from each
    ``trial_restart`` that ended a started attempt (a retry, a preemption, a move, a PBT turn or exploit, a device
    that died) to its next ``trial_start``; a restart of an attempt that never began (a trial its device gave back
    before its first turn, ``withdrawn``) goes on with the wait it was in, also when that attempt has a
    ``trial_start`` (a trial placed without prefetch is started at its admission, and may wait in a shared lane for
    its first turn): that start ended no wait. A ``promoted`` restart starts its wait afresh:
    the trial was paused off any device, or ended, until its searcher promoted it, waiting for the search, not for a
    place. A ``resume`` event starts a wait for every trial not waiting then: those computing when the run was
    interrupted, and ended ones the resume runs again (``resume_errored``, ``restart_errored``). A ``trial_end`` ends
    a wait that no start ended, which is not counted (nor the wait of a trial still waiting at the run's end: a
    trial that never started has none, ``queued_s`` null). A ``trial_start`` with no wait before it (an
    out-of-memory re-admission, on its device) adds none; nor does a restart of an attempt that has started already
    (its start stamped before it: another node's clock).
    """
    since: dict[str, float | None] = dict(created)
    started: dict[str, int] = {}  # each trial's latest attempt that started
    ended_by: dict[str, int] = {}  # the attempt whose trial_start ended each trial's last wait
    out: dict[str, list[tuple[float, float]]] = {tid: [] for tid in created}
    for ev in sorted(events, key=lambda e: e.ts):  # (stable: events of one moment in the order stored)
        tid = ev.trial_id
        if ev.kind == "resume":
            for trial in out:
                if since.get(trial) is None:  # (one that never starts again has no start to end the wait)
                    since[trial] = ev.ts
            continue
        if tid is None or tid not in out:
            continue
        attempt = (ev.data or {}).get("attempt")
        if ev.kind == "trial_start":
            began = since.get(tid)
            if began is not None:
                out[tid].append((began, max(began, ev.ts)))
                if isinstance(attempt, int):
                    ended_by[tid] = attempt
            since[tid] = None
            if isinstance(attempt, int):
                started[tid] = max(attempt, started.get(tid, attempt))
        elif ev.kind == TRIAL_RESTART_EVENT:
            if isinstance(attempt, int) and started.get(tid, -1) >= attempt:
                continue  # (the attempt it makes has started: a clock behind the driver's stamped its start)
            reason = (ev.data or {}).get("reason")
            if reason == "withdrawn" and since.get(tid) is None and isinstance(attempt, int) \
                    and ended_by.get(tid) == attempt - 1:
                since[tid] = out[tid].pop()[0]  # (the withdrawn attempt's start, at its admission: it never began)
                continue
            if reason == "promoted" or since.get(tid) is None:
                since[tid] = ev.ts
        elif ev.kind == "trial_end":
            since[tid] = None
    return out


@dataclass(frozen=True)
class TimelineBin:
    """One device (or ``"total"``) in one time bin."""

    start: float
    end: float
    device: str
    device_seconds: float
    iterations: int
    useful_iterations: int
    lane_busy_s: float
    busy_s: float
    throughput: float | None
    goodput: float | None


def timeline_bin_width(activity: Activity, bins: int = DEFAULT_TIMELINE_BINS,
                       window: tuple[float, float] | None = None) -> float:
    """The bin width that cuts the whole run, or ``window``, into ``bins`` bins (at least
    :data:`MIN_TIMELINE_BIN_S`)."""
    start, end = (activity.start, activity.end) if window is None else window
    if start is None or end is None:
        return MIN_TIMELINE_BIN_S
    return max((end - start) / bins, MIN_TIMELINE_BIN_S)


def timeline(activity: Activity, bin_s: float | None = None,
             window: tuple[float, float] | None = None) -> list[TimelineBin]:
    """Goodput over time: per bin of ``bin_s`` seconds from the run's start, per device and in total.

    An iteration counts in the bin its report falls in (``iterations``, ``useful_iterations``); busy and device
    time are split across bins, and so is each iteration for the rates (``throughput``, ``goodput``): its share of
    a bin is the share of its span (the time its trial held its lane's turn for it) that falls there. Counted at
    its report alone, a bin of a short run held 0 or 1 iteration and the rate flipped between 0 and its double,
    and a bin that the device's time covered only in part spiked.

    Args:
        activity: The run's activity.
        bin_s: The bins' width (default: the run, or the window, cut into :data:`DEFAULT_TIMELINE_BINS`).
        window: Only ``(start, end)`` (absolute seconds, as :func:`summarize` takes it): the bins start there
            and end there, and iterations reported outside it are left out. Default: the whole run.
    """
    if activity.start is None or activity.end is None:
        return []
    start, end = (activity.start, activity.end) if window is None else (float(window[0]), float(window[1]))
    if end <= start:
        return []
    width = bin_s if bin_s is not None and bin_s > 0 else timeline_bin_width(activity, window=(start, end))
    width = min(width, end - start)  # one bin spans the run at most (an infinite bin_s made its edges NaN)
    n = max(1, math.ceil((end - start) / width - 1e-9))
    edges = [(start + i * width, min(end, start + (i + 1) * width)) for i in range(n)]  # the last ends with the run

    def index(ts: float) -> int:
        k = math.ceil((ts - start) / width) - 1
        k = k if k > 0 else 0  # min(n - 1, max(0, k)), without the calls (per result of the run)
        return k if k < n - 1 else n - 1

    out: list[TimelineBin] = []
    totals = [[0.0, 0, 0, 0.0, 0.0, 0.0, 0.0] for _ in range(n)]
    by_device: dict[str, list[Span]] = defaultdict(list)  # (each device's spans, in their order)
    for s in activity.spans:
        by_device[s.device].append(s)
    for device in activity.devices:
        counts = [[0, 0] for _ in range(n)]
        spread = [[0.0, 0.0] for _ in range(n)]  # the iterations' shares of each bin, for the rates
        eps = activity.epochs[device]
        device_s = [sum(overlap(e.start, e.end, b0, b1) for e in eps) for b0, b1 in edges]
        # (a loop over every result of the run: the min, max and overlap calls are written out, the same operations)
        for s in by_device.get(device, ()):
            if s.partial or s.worker:  # (not s.counted)
                continue
            s_start, s_end, useful = s.start, s.end, s.useful
            if window is None or start < s_end <= end or s_end == start <= activity.start:  # (as summarize's)
                c = counts[index(s_end)]
                c[0] += 1
                c[1] += int(useful)
            length = s_end - s_start
            if length <= 0 or s_end <= start or s_start >= end:
                if length <= 0 and start <= s_end <= end:  # no span to spread: all of it where it was reported
                    i = index(s_end)
                    if not device_s[i] and s_end == edges[i][1] and i + 1 < n:
                        i += 1  # reported as its device's time begins, on a bin's end: its rate goes where that time is
                    share = spread[i]
                    share[0] += 1.0
                    share[1] += float(useful)
                continue
            # bins index(max(s_start, start)) to index(min(s_end, end))
            for i in range(index(start if start > s_start else s_start), index(end if end < s_end else s_end) + 1):
                b0, b1 = edges[i]
                inside = (b1 if b1 < s_end else s_end) - (b0 if b0 > s_start else s_start)
                f = (inside if inside > 0.0 else 0.0) / length  # overlap(s_start, s_end, b0, b1) / length
                share = spread[i]
                share[0] += f
                share[1] += f * useful
        lane_busy_per_bin = covered_per_bin([iv for (d, _, _), iv in activity.lane_busy.items() if d == device],
                                            edges)
        busy_iv = activity.device_busy.get(device, [])
        for i, (b0, b1) in enumerate(edges):
            ds = device_s[i]
            lane_busy = lane_busy_per_bin[i]
            busy = covered(busy_iv, b0, b1)
            it, useful = counts[i]
            share_it, share_useful = spread[i]
            out.append(TimelineBin(b0, b1, device, ds, it, useful, lane_busy, busy, _ratio(share_it, ds),
                                   _ratio(share_useful, ds)))
            t = totals[i]
            t[0] += ds
            t[1] += it
            t[2] += useful
            t[3] += lane_busy
            t[4] += busy
            t[5] += share_it
            t[6] += share_useful
    for (b0, b1), (ds, it, useful, lane_busy, busy, share_it, share_useful) in zip(edges, totals, strict=True):
        out.append(TimelineBin(b0, b1, TOTAL_DEVICE, ds, int(it), int(useful), lane_busy, busy,
                               _ratio(share_it, ds), _ratio(share_useful, ds)))
    return out


def from_store(store: Any, window: tuple[float, float] | None = None) -> tuple[Activity, Goodput]:
    """Read an open :class:`~fluidsalus.store.ExperimentStore` and summarise it (the store is only read)."""
    exp = store.experiment()
    activity = build_activity(store.results(latest_attempt_only=False), store.events(), exp.get("finished_at"))
    return activity, summarize(activity, window)
