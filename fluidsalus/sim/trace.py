"""Recorded traces: read a finished experiment's store, replay it in the simulator, and compare.

A real run on virtual CPU devices (or GPUs) leaves in its store what the simulator needs to replay it:

- per trial, its config, its results (one per iteration: the metric, ``time_this_iter_s`` and the timestamp
  at which the iteration ended, so the interval in which it held its lane's turn), when it started and
  ended, its group and budget, how it ended (``stop_reason``), and the memory estimates the device's lane
  manager recorded for it (``lane_estimate``);
- per device, its slots (``device_start``), and the driver and lane activity (``place``, ``trial_start``,
  ``lane_open``, ``lane_admit``, ``lane_leave``, ...).

:func:`load_store_trace` reads that into a :class:`StoreTrace` (pure: no Ray).

**Calibration** (:func:`calibrate`): every figure measured in the trace, none assumed.

- *Co-location slowdown*: an iteration computed while ``n`` trials computed on its device takes longer than
  alone (the trial threads of one device actor share its cores, the GIL between kernels, and the machine
  with the driver). Under the simulator's model (:mod:`fluidsalus.sim.model`), with each trial keeping
  ``1 / slots`` of its device busy, ``n <= slots`` co-runners each run at ``(1 - interference) ** (n - 1)``
  of their alone speed. The interference is fitted by least squares on ``log(iteration time) = log(trial's
  work) + gamma * mean(n - 1)`` with one intercept per trial (slow and fast trials do not bias it; first
  iterations, which carry the trainable's set-up, are left out); ``interference = 1 - exp(-gamma)``.
- *Driver latency*: from a result or trial end to the trial start it caused (the driver's batch, the store
  commit, ``submit`` to the device): the median over placements of ``trial_start - (last report before the
  place event)``, where a trial's start is its arrival on the device: its admission into a lane (a prefetched
  trial starts only when its lane would idle, so its ``trial_start`` would measure that wait, not the driver).
- *Start cost*: from a trial's ``trial_start`` to its first iteration, over trials whose lane computed
  nothing else meanwhile (so waited for no turn).
- *Boundary cost*: the time a lane spends between one iteration and the next when the next trial was ready
  (``report()``, the memory profile of a trial's first iterations, the hand-over): the median gap. The
  runtime excludes it from ``time_this_iter_s``, but the lane is busy; it is added to every iteration.
- *Admit-first share*: the runtime's race between a stopped trial leaving its lane and the trial the driver
  placed in its stead being admitted. The driver sends the stop first, but the stopped trial's thread must
  wake up (take the GIL) to leave, while ``submit`` runs at once in an actor thread: the new trial is often
  admitted while the stopped one still holds its lane (a trial prefetched to a full device always is). With
  every lane open it then joins another lane; when the stopped trial's lane dissolves, the device spreads
  (``DeviceHost._spread_locked``, modelled by ``Simulation._spread``): a trial waiting in a shared lane takes
  a lane of its own, so no slot idles. The share is measured over the placements that followed a stop.

**Workloads** (:class:`~fluidsalus.sim.workload.Workload`, the simulator's input):

- :func:`recorded_workload`: every recorded iteration, with its time converted to the *alone* time (the
  integral of the model's speed over the iteration, given how many trials computed on the device at each
  instant), plus the boundary cost. The simulator re-applies the slowdown of the co-location it produces.
- :func:`profile_workload`: what profiling knows: each trial's first :data:`PROFILE_ITERATIONS` iterations
  (its first, set-up included, then the mean of the next ones as its steady time), constant after that.

**Replay** (:func:`replay`): a workload, a searcher (by default :class:`ReplaySearcher`, which makes exactly
the recorded decisions: each trial runs its recorded iterations, pausing at the run's budgets on the way)
and a placement: ``executor`` (:class:`PlannerExecutorStrategy`: the real executor's, i.e. the water-filling
planner under the executor's rules: moves and preemptions only for trials that checkpoint, a prefetch of one
queued trial per full device), ``waterfill`` (the simulator's planner as it is), or ``least_loaded``
(:class:`LeastLoadedStrategy`, the executor's dispatch before it used the planner). The trials of a device
share its lanes as its real lane manager admits them. With ``runtime_effects`` (the default) the
replay also does what the device runtime does to the searcher's decisions (:class:`RuntimeEffects`): a
paused trial's stop reaches its device at the driver's next step, before or after that step's admissions
(the recorded order for a recorded stop, the measured admit-first share otherwise), and the memory
estimates the runtime profiled re-fit the lanes at the iterations they were taken.

:func:`compare_with_store` measures a run's makespan (first trial start to last trial end) and predicts it
both ways. ``python -m fluidsalus.sim.trace EXPERIMENT`` prints that comparison; ``--save FILE`` writes the
recorded workload as a JSON trace that ``python -m fluidsalus.sim --trace FILE`` reads.

Limitations: a run with data-parallel trials is refused (:func:`check_single_device`: the replay places each
trial on one device); attempts are flattened (a retried or restored trial replays its latest results as one
attempt); pause points are inferred as the run's distinct group budgets below a trial's length, which adds a
pause where a multi-bracket searcher had none (one driver round trip each); the replay's memory re-fits must
keep each trial in its lane (always so on virtual CPU devices, whose lanes can grow into half the host's
memory).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fluidsalus import goodput as gp
from fluidsalus.errors import ConfigError, StoreError, plural
from fluidsalus.gpu import lanes as ln
from fluidsalus.gpu.device import DEFAULT_TRIAL_ESTIMATE, virtual_device_capacity
from fluidsalus.gpu.host import PROFILE_ITERATIONS
from fluidsalus.gpu.policies import POLICIES
from fluidsalus.inspect import open_readonly, resolve_experiment
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.sim.engine import ENDED, PAUSED, QUEUED, SimResult, SimTrial, Simulation, SimulationError
from fluidsalus.sim.model import Hardware, colocated_speed
from fluidsalus.sim.strategies import Strategy, WaterfillStrategy, make_strategy
from fluidsalus.sim.workload import TRACE_FORMAT, TRACE_VERSION, TrialRecord, Workload, check_save_path
from fluidsalus.trialgroup.dispatch import PREFETCH_PER_DEVICE, DeviceLoad, TrialState, choose_prefetch, plan_actions
from fluidsalus.trialgroup.planner import DEFAULT_MOVE_COST_S, Plan, PlannerSettings, TrialDemand
from fluidsalus.trialgroup.trial import TrialGroup

#: Placements a replay can use: the real executor's (the water-filling planner under the executor's rules:
#: :class:`PlannerExecutorStrategy`), the simulator's ``waterfill`` as it is, and the executor's earlier
#: least-loaded dispatch (:class:`LeastLoadedStrategy`).
REPLAY_PLANNERS = ("executor", "waterfill", "least_loaded")
#: The largest interference a fit may return (``colocated_speed`` needs it below 1): a co-runner that takes
#: more than 95% of a trial's speed means the measurement is broken, not the model.
MAX_INTERFERENCE = 0.95
#: Least co-location spread (sum of squared deviations of ``mean(n - 1)`` within trials) for the interference
#: fit; below it (every iteration ran at the same co-location) nothing can be separated and 0 is returned.
MIN_FIT_SPREAD = 1e-6
#: The world size taken for a data-parallel trial whose ``worker_start`` event does not say it: a worker rank
#: and rank 0.
MIN_WORLD_SIZE = 2
#: The result key budgets and iterations count.
ITERATION_KEY = "training_iteration"
#: The result key of an iteration's duration.
ITER_TIME_KEY = gp.ITER_TIME_KEY
#: The lane policy of a replay whose run recorded none (``fluidsalus.run``'s default).
DEFAULT_LANE_POLICY = "fifo"
#: Lane policies a replay runs as :data:`DEFAULT_LANE_POLICY`: they order trials by priority, which the replay's
#: trials do not have.
UNPRIORITISED_POLICIES = frozenset({"priority"})


# ------------------------------------------------------------------------------------------ the trace


@dataclass(frozen=True)
class TraceIteration:
    """One recorded iteration (the latest attempt's result).

    Attributes:
        iteration: ``training_iteration`` (1-based).
        start: When the trial started computing it (seconds after the trace's origin).
        end: When it reported it (seconds after the origin).
        value: The metric it reported (None when absent or not a number).
    """

    iteration: int
    start: float
    end: float
    value: float | None

    @property
    def duration(self) -> float:
        """``time_this_iter_s``: seconds it held its lane's turn."""
        return self.end - self.start


@dataclass(frozen=True)
class TraceSpan:
    """An iteration that occupied a device (any attempt: wasted ones occupied it too).

    Attributes:
        device: Its device.
        lane: Its lane (None when unknown).
        trial_id: Its trial.
        iteration: Its ``training_iteration``.
        start: When it started (seconds after the origin).
        end: When it ended.
    """

    device: str
    lane: int | None
    trial_id: str
    iteration: int
    start: float
    end: float


@dataclass(frozen=True)
class TraceTrial:
    """One recorded trial.

    Attributes:
        trial_id: Its id in the store.
        seq: Creation order.
        config: Its configuration.
        group_id: Its last group.
        budget: Its last group's budget (None: open-ended).
        device: The device it ran on last (None: never placed).
        end_reason: ``stopped``, ``completed``, ``errored`` (None: it never ended).
        created: When its group was created (seconds after the origin).
        started: Its first ``trial_start`` (None: never started).
        finished: When it ended (None: never).
        iterations: Its iterations in order.
        estimates: The ``(P, T)`` its device's lane manager recorded for it (``lane_estimate``, latest attempt),
            in order: one per profiled iteration boundary.
        left_after_admit: Whether a trial the driver placed after its last result was admitted on its device
            before it left its lane (None: no placement followed it).
        lane_mates: Creation indices of the trials in the lane it was first admitted to, at that moment (empty:
            it opened a lane; None: never admitted).
    """

    trial_id: str
    seq: int
    config: dict[str, Any]
    group_id: str | None
    budget: float | None
    device: str | None
    end_reason: str | None
    created: float
    started: float | None
    finished: float | None
    iterations: tuple[TraceIteration, ...]
    estimates: tuple[tuple[int, int], ...] = ()
    left_after_admit: bool | None = None
    lane_mates: tuple[int, ...] | None = None

    @property
    def length(self) -> int:
        """Iterations it ran (its last ``training_iteration``)."""
        return self.iterations[-1].iteration if self.iterations else 0


@dataclass(frozen=True)
class StoreTrace:
    """A finished experiment, as the simulator needs it. Times are seconds after ``origin``.

    Attributes:
        path: The experiment (folder or database).
        metric: The run's metric (None: not set).
        mode: ``"max"`` or ``"min"`` (None: not set).
        origin: The first trial start (epoch seconds).
        trials: Every trial, in creation order.
        devices: Device name -> slots, in start order.
        spans: Every iteration that computed, in order of its end.
        places: ``(ts, trial_id)`` of each ``place`` event.
        starts: ``trial_id -> ts`` of its first arrival on a device: its first ``lane_admit`` or ``trial_start``,
            whichever came first (see :func:`measure_driver_latency`).
        fresh_lane: Trials that opened a lane of their own when admitted.
        reports: Times of every result and trial end (what the driver reacts to), sorted.
        wall_s: The experiment's ``created_at`` to ``finished_at`` (None while it runs).
        checkpointed: Whether any trial saved a checkpoint (the executor moves only trials that did).
        move_costs: The seconds each measured move cost its trial (``move_cost`` events), in order.
        world_sizes: The trials that ran data-parallel (a ``worker_start`` event: ranks on other devices), each
            with the most devices it ran on at once.
        lane_policy: The run's lane policy, as its spec recorded it (None: not recorded).
        resumes: How many times the run was resumed (its ``resume`` events): its makespan then holds the time it
            sat interrupted (:func:`check_finished`).
    """

    path: str
    metric: str | None
    mode: str | None
    origin: float
    trials: tuple[TraceTrial, ...]
    devices: dict[str, int]
    spans: tuple[TraceSpan, ...]
    places: tuple[tuple[float, str], ...]
    starts: dict[str, float]
    fresh_lane: frozenset[str]
    reports: tuple[float, ...]
    wall_s: float | None
    checkpointed: bool = False
    move_costs: tuple[float, ...] = ()
    world_sizes: dict[str, int] = field(default_factory=dict)
    lane_policy: str | None = None
    resumes: int = 0

    @property
    def makespan_s(self) -> float:
        """First trial start to last trial end: the figure the simulator predicts."""
        return max((t.finished for t in self.trials if t.finished is not None), default=0.0)

    @property
    def budgets(self) -> tuple[float, ...]:
        """The run's distinct finite group budgets, ascending."""
        return tuple(sorted({float(t.budget) for t in self.trials if t.budget is not None}))

    @property
    def iterations(self) -> int:
        """Iterations recorded (latest attempts)."""
        return sum(len(t.iterations) for t in self.trials)

    @property
    def admit_first_share(self) -> float:
        """Of the stops a placement followed, the share whose new trial was admitted first (0 when none)."""
        raced = [t.left_after_admit for t in self.trials if t.left_after_admit is not None]
        return sum(raced) / len(raced) if raced else 0.0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _attempt(event: Any) -> int:
    attempt = (event.data or {}).get("attempt")
    return attempt if isinstance(attempt, int) else 0


def load_store_trace(path: str) -> StoreTrace:
    """Read a finished (or running) experiment's store into a :class:`StoreTrace`.

    Args:
        path: The experiment folder, its ``experiment.db``, or a bare experiment name under the storage path.

    Returns:
        The trace; times are relative to the first trial start.

    Raises:
        StoreError: Not a store, no trial of it ever started, or none reported an iteration.
    """
    path = resolve_experiment(path)
    store = open_readonly(path)
    try:
        exp = store.experiment()
        rows = store.trials()
        results = store.results(latest_attempt_only=False)
        events = store.events()
        checkpointed = bool(store.checkpoints(include_deleted=True))
    finally:
        store.close()
    starts_abs: dict[str, float] = {}
    arrivals_abs: dict[str, float] = {}  # a trial's first admission into a lane, or its first start
    world_sizes: dict[str, int] = {}
    for ev in events:
        if ev.kind == "worker_start" and ev.trial_id is not None:
            size = (ev.data or {}).get("world_size")
            size = size if isinstance(size, int) and not isinstance(size, bool) else MIN_WORLD_SIZE
            world_sizes[ev.trial_id] = max(world_sizes.get(ev.trial_id, 1), size)
        if ev.kind == "trial_start" and ev.trial_id is not None:
            starts_abs.setdefault(ev.trial_id, ev.ts)
        if ev.kind in ("trial_start", "lane_admit") and ev.trial_id is not None:
            arrivals_abs.setdefault(ev.trial_id, ev.ts)
    for row in rows:
        if row.started_at is not None:
            starts_abs.setdefault(row.trial_id, row.started_at)
    if not starts_abs:
        raise StoreError(f"{path}: no trial of this experiment ever started; there is nothing to replay")
    if not results:  # (its replay predicted 0 s: "-100.0%")
        raise StoreError(f"{path}: no trial of this experiment reported an iteration; there is nothing to replay")
    origin = min(starts_abs.values())
    metric = exp.get("metric")
    attempts = {row.trial_id: row.attempt for row in rows}

    latest: dict[tuple[str, int], Any] = {}
    for r in results:
        key = (r.trial_id, r.iteration)
        if key not in latest or r.attempt >= latest[key].attempt:
            latest[key] = r
    per_trial: dict[str, list[TraceIteration]] = defaultdict(list)
    for (trial_id, iteration), r in latest.items():
        dt = max(0.0, _number(r.metrics.get(ITER_TIME_KEY)) or 0.0)
        value = _number(r.metrics.get(metric)) if metric else None
        per_trial[trial_id].append(TraceIteration(iteration, r.ts - dt - origin, r.ts - origin, value))

    placed_on: dict[str, str] = {}
    estimates: dict[str, list[tuple[int, int]]] = defaultdict(list)
    admitted: dict[str, float] = {}
    left: dict[str, float] = {}
    fresh: set[str] = set()
    last_lane_event: dict[str, Any] = {}
    members: dict[tuple[str, Any], set[str]] = defaultdict(set)  # (device, lane) -> trials in it now
    lane_of: dict[str, tuple[str, Any]] = {}
    mates: dict[str, tuple[str, ...]] = {}
    for ev in events:
        tid = ev.trial_id
        if ev.kind in ("place", "trial_start") and tid is not None and ev.device is not None:
            placed_on[tid] = ev.device
        if ev.device is None or not ev.kind.startswith("lane_"):
            continue
        detail = (ev.data or {}).get("detail") or []
        if ev.kind == "lane_admit" and tid is not None and detail:
            if tid in lane_of:
                members[lane_of[tid]].discard(tid)
            key = (ev.device, detail[0])
            if _attempt(ev) == attempts.get(tid, 0):
                mates.setdefault(tid, tuple(sorted(members[key])))
            members[key].add(tid)
            lane_of[tid] = key
        elif ev.kind in ("lane_leave", "lane_fail") and tid is not None and tid in lane_of:
            members[lane_of.pop(tid)].discard(tid)
        if tid is not None and _attempt(ev) == attempts.get(tid, 0):
            if ev.kind == "lane_estimate" and len(detail) >= 2:
                estimates[tid].append((int(detail[-2]), int(detail[-1])))
            elif ev.kind == "lane_admit":
                admitted.setdefault(tid, ev.ts)
                prev = last_lane_event.get(ev.device)  # a lane opened just for it: the event before its admission
                opened = None if prev is None or prev.kind != "lane_open" else (prev.data or {}).get("lane")
                if detail and opened == detail[0]:
                    fresh.add(tid)
            elif ev.kind == "lane_leave":
                left[tid] = ev.ts
        last_lane_event[ev.device] = ev

    # The admit-first race: a placement whose device's latest result before it was a trial's last one.
    by_device: dict[str, list[tuple[float, str]]] = defaultdict(list)
    last_ts: dict[str, float] = {}
    for (tid, _), r in latest.items():
        last_ts[tid] = max(last_ts.get(tid, r.ts), r.ts)
        device = placed_on.get(tid)
        if device is not None:
            by_device[device].append((r.ts, tid))
    for rows_of in by_device.values():
        rows_of.sort()
    raced: dict[str, bool] = {}
    for ev in events:
        if ev.kind != "place" or ev.trial_id is None or ev.device is None:
            continue
        reports = by_device.get(ev.device, [])
        i = bisect.bisect_right(reports, (ev.ts, "\uffff")) - 1
        if i < 0:
            continue
        ts, trigger = reports[i]
        if ts < last_ts[trigger] or trigger not in left or left[trigger] < ts or ev.trial_id not in admitted:
            continue  # the trigger went on computing (promoted), or the placement's admission is unknown
        raced.setdefault(trigger, admitted[ev.trial_id] < left[trigger])

    seq_of = {row.trial_id: row.seq for row in rows}
    trials = []
    for row in rows:
        recorded_mates = mates.get(row.trial_id)
        trials.append(TraceTrial(
            trial_id=row.trial_id, seq=row.seq, config=dict(row.config), group_id=row.group_id,
            budget=None if row.budget is None else float(row.budget),
            device=row.device if row.device is not None else placed_on.get(row.trial_id),
            end_reason=row.stop_reason if row.finished_at is not None else None,
            created=row.created_at - origin,
            started=None if row.trial_id not in starts_abs else starts_abs[row.trial_id] - origin,
            finished=None if row.finished_at is None else row.finished_at - origin,
            iterations=tuple(sorted(per_trial.get(row.trial_id, []), key=lambda x: x.iteration)),
            estimates=tuple(estimates.get(row.trial_id, [])),
            left_after_admit=raced.get(row.trial_id),
            lane_mates=None if recorded_mates is None else tuple(seq_of[m] for m in recorded_mates if m in seq_of),
        ))
    trials.sort(key=lambda t: t.seq)

    activity = gp.build_activity(results, events, exp.get("finished_at"))
    devices: dict[str, int] = {}
    for name in activity.devices:
        slots = activity.epochs[name][0].slots
        devices[name] = int(slots) if slots else 1
    spans = tuple(TraceSpan(s.device, s.lane, s.trial_id, s.iteration, s.start - origin, s.end - origin)
                  for s in activity.spans if not s.worker)  # (the simulator models rank 0 of a data-parallel trial)
    # (a trial_end with no device is an end off any device, no report: a trial the run or its search ended queued)
    reports = sorted([r.ts - origin for r in results]
                     + [ev.ts - origin for ev in events if ev.kind == "trial_end" and ev.device is not None])
    finished = exp.get("finished_at")
    return StoreTrace(
        path=str(path), metric=metric, mode=exp.get("mode"), origin=origin, trials=tuple(trials),
        devices=devices, spans=spans,
        places=tuple((ev.ts - origin, ev.trial_id) for ev in events if ev.kind == "place" and ev.trial_id),
        starts={tid: ts - origin for tid, ts in arrivals_abs.items()}, fresh_lane=frozenset(fresh),
        reports=tuple(reports), wall_s=None if finished is None else finished - exp["created_at"],
        checkpointed=checkpointed,
        move_costs=tuple(float((ev.data or {})["seconds"]) for ev in events
                         if ev.kind == "move_cost" and _number((ev.data or {}).get("seconds")) is not None),
        world_sizes=world_sizes,
        lane_policy=_recorded_policy(exp),
        resumes=sum(1 for ev in events if ev.kind == "resume"),
    )


def _recorded_policy(exp: Mapping[str, Any]) -> str | None:
    """The lane policy the run's spec recorded (``fluidsalus.run(lane_policy=...)``), if it is one."""
    spec = exp.get("spec")
    policy = spec.get("lane_policy") if isinstance(spec, Mapping) else None
    return policy if isinstance(policy, str) and policy in POLICIES else None


# ------------------------------------------------------------------------------------------ calibration


@dataclass(frozen=True)
class Calibration:
    """The machine's figures measured in a trace (see the module docstring).

    Attributes:
        interference: Speed lost per co-running trial on a device.
        driver_latency_s: A change (result, end) to the trial start it causes.
        startup_s: A trial's start to its first iteration, in an idle lane.
        boundary_s: A lane's typical time between an iteration and the next one of a ready trial.
        admit_first_share: Share of the stops a placement followed whose new trial was admitted first.
        colocation_spread: The interference fit's spread (0: it could not be measured; interference 0).
        move_s: The median measured move (None: the run measured none; a replay then takes ``startup_s``).
    """

    interference: float
    driver_latency_s: float
    startup_s: float
    boundary_s: float
    admit_first_share: float
    colocation_spread: float
    move_s: float | None = None


class _Occupancy:
    """How many iterations computed on one device at each instant: a step function ``n(t)``."""

    def __init__(self, intervals: Sequence[tuple[float, float]]) -> None:
        deltas: dict[float, int] = defaultdict(int)
        for start, end in intervals:
            if end > start:
                deltas[start] += 1
                deltas[end] -= 1
        self.times = sorted(deltas)
        self.counts: list[int] = []
        n = 0
        for t in self.times:
            n += deltas[t]
            self.counts.append(n)

    def segments(self, start: float, end: float) -> list[tuple[float, int]]:
        """``(seconds, n)`` pieces of ``[start, end]``; ``n`` counts the iteration itself (at least 1)."""
        out: list[tuple[float, int]] = []
        i = bisect.bisect_right(self.times, start) - 1
        t = start
        while t < end:
            n = self.counts[i] if i >= 0 else 0
            stop = min(end, self.times[i + 1] if i + 1 < len(self.times) else math.inf)
            if stop > t:
                out.append((stop - t, max(1, n)))
            t = stop
            i += 1
        return out


def _occupancy(trace: StoreTrace) -> dict[str, _Occupancy]:
    by_device: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for span in trace.spans:
        by_device[span.device].append((span.start, span.end))
    return {device: _Occupancy(iv) for device, iv in by_device.items()}


def _speed(n: int, slots: int, interference: float) -> float:
    """The simulator's speed of one of ``n`` co-running trials that each keep ``1 / slots`` of a device busy."""
    return colocated_speed(1.0, n / slots, n, interference)


def fit_interference(trace: StoreTrace) -> tuple[float, float]:
    """Fit the speed lost per co-running trial (see the module docstring).

    Args:
        trace: The run.

    Returns:
        ``(interference, spread)``: the fitted interference in ``[0, MAX_INTERFERENCE]`` and the fit's
        co-location spread (below :data:`MIN_FIT_SPREAD` no trial ran at two co-locations: interference 0).
    """
    occupancy = _occupancy(trace)
    num = den = 0.0
    for trial in trace.trials:
        occ = occupancy.get(trial.device or "")
        if occ is None:
            continue
        xs, ys = [], []
        for it in trial.iterations[1:]:  # the first iteration carries the trainable's set-up
            if it.duration <= 0:
                continue
            xs.append(sum(dt * (n - 1) for dt, n in occ.segments(it.start, it.end)) / it.duration)
            ys.append(math.log(it.duration))
        if len(xs) < 2:
            continue
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        num += sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
        den += sum((x - mx) ** 2 for x in xs)
    if den < MIN_FIT_SPREAD:
        return 0.0, den
    return min(MAX_INTERFERENCE, max(0.0, 1.0 - math.exp(-num / den))), den


def measure_driver_latency(trace: StoreTrace) -> float:
    """Median seconds from the report before a ``place`` event to the trial's arrival on the device it caused
    (``trace.starts``: its admission into a lane, or its start; 0: none)."""
    samples = []
    for ts, trial_id in trace.places:
        start = trace.starts.get(trial_id)
        i = bisect.bisect_left(trace.reports, ts) - 1
        if start is None or i < 0 or start < ts:
            continue
        samples.append(start - trace.reports[i])
    return statistics.median(samples) if samples else 0.0


def measure_startup(trace: StoreTrace) -> float:
    """Median seconds from a trial's start to its first iteration, over trials whose lane computed nothing else
    meanwhile (so the gap is the start itself, not a wait for the lane's turn); 0 when there are none."""
    by_lane: dict[tuple[str, int | None], list[TraceSpan]] = defaultdict(list)
    first_lane: dict[str, int | None] = {}
    for span in trace.spans:
        by_lane[(span.device, span.lane)].append(span)
        if span.iteration == 1:
            first_lane.setdefault(span.trial_id, span.lane)
    samples = []
    for t in trace.trials:
        if not t.iterations or t.started is None or t.trial_id not in first_lane:
            continue
        began = t.iterations[0].start
        others = by_lane[(t.device or "", first_lane[t.trial_id])]
        if any(o.trial_id != t.trial_id and o.start < began and o.end > t.started for o in others):
            continue
        samples.append(began - t.started)
    return max(0.0, statistics.median(samples)) if samples else 0.0


def _pause_points(trace: StoreTrace) -> dict[str, set[int]]:
    """Iterations after which each trial paused (see :func:`trial_plans`)."""
    out: dict[str, set[int]] = {}
    for trial, plan in zip(trace.trials, trial_plans(trace), strict=True):
        out[trial.trial_id] = {int(b) for b in plan.budgets if b is not None}
    return out


def measure_boundary(trace: StoreTrace) -> float:
    """Median seconds between two iterations in one lane when the second one's trial was ready: the same
    trial going on (not at a pause), or one whose previous iteration ended before the first began (0: none)."""
    pauses = _pause_points(trace)
    by_lane: dict[tuple[str, int], list[TraceSpan]] = defaultdict(list)
    previous_end: dict[tuple[str, int], float] = {}
    for span in trace.spans:
        if span.lane is not None:
            by_lane[(span.device, span.lane)].append(span)
        previous_end[(span.trial_id, span.iteration + 1)] = span.end
    gaps = []
    for spans in by_lane.values():
        spans.sort(key=lambda s: s.start)
        for a, b in zip(spans, spans[1:], strict=False):
            before = previous_end.get((b.trial_id, b.iteration))
            if before is None or (b.iteration - 1) in pauses.get(b.trial_id, ()):
                continue
            if (b.trial_id == a.trial_id and b.iteration == a.iteration + 1) or before <= a.start:
                gaps.append(max(0.0, b.start - a.end))
    return statistics.median(gaps) if gaps else 0.0


def calibrate(trace: StoreTrace) -> Calibration:
    """Measure the machine's figures in a trace (see :class:`Calibration`)."""
    interference, spread = fit_interference(trace)
    move_s = statistics.median(trace.move_costs) if trace.move_costs else None
    return Calibration(interference, measure_driver_latency(trace), measure_startup(trace), measure_boundary(trace),
                       trace.admit_first_share, spread, move_s)


# ------------------------------------------------------------------------------------------ workloads


def alone_times(trace: StoreTrace, interference: float) -> dict[str, list[float]]:
    """Each trial's iteration times converted to alone times (the integral of the model's speed over the
    iteration, at the co-location of each instant).

    Returns:
        ``trial_id -> [alone seconds of iteration 1, 2, ...]``.
    """
    occupancy = _occupancy(trace)
    out: dict[str, list[float]] = {}
    for trial in trace.trials:
        slots = trace.devices.get(trial.device or "", 1)
        occ = occupancy.get(trial.device or "")
        times = []
        for it in trial.iterations:
            if occ is None or it.duration <= 0:
                times.append(max(0.0, it.duration))
                continue
            times.append(sum(dt * _speed(n, slots, interference) for dt, n in occ.segments(it.start, it.end)))
        out[trial.trial_id] = times
    return out


def _record(times: Sequence[float], curve: Sequence[float], demand: float) -> TrialRecord:
    return TrialRecord(sec_per_iter=tuple(times), demand=demand, p_bytes=DEFAULT_TRIAL_ESTIMATE[0],
                       t_bytes=DEFAULT_TRIAL_ESTIMATE[1], serial_fraction=1.0, data_parallel=False,
                       curve=tuple(curve) or (0.0,))


def _curve(trial: TraceTrial) -> list[float]:
    values, last = [], 0.0
    for it in trial.iterations:
        last = it.value if it.value is not None else last
        values.append(last)
    return values


def _demand(trace: StoreTrace, trial: TraceTrial) -> float:
    return 1.0 / max(1, trace.devices.get(trial.device or "", 1))


def _typical(times: dict[str, list[float]]) -> float:
    flat = [t for ts in times.values() for t in ts if t > 0]
    return statistics.median(flat) if flat else 1.0


def recorded_workload(trace: StoreTrace, calibration: Calibration) -> Workload:
    """The recorded iterations as alone times plus the boundary cost, one record per trial in creation order.

    Args:
        trace: The run.
        calibration: Its measured figures.

    Returns:
        The workload (metric and mode from the run; ``min`` when the run set none). A trial that never
        reported gets the median iteration time (it never runs in a replay of its own run).
    """
    times = alone_times(trace, calibration.interference)
    typical = _typical(times)
    records = []
    for trial in trace.trials:
        ts = [t if t > 0 else typical for t in times[trial.trial_id]] or [typical]
        records.append(_record([t + calibration.boundary_s for t in ts], _curve(trial), _demand(trace, trial)))
    return Workload(tuple(records), metric=trace.metric or "_metric", mode=trace.mode or "min",
                    source=f"recorded({trace.path})")


def profile_workload(trace: StoreTrace, calibration: Calibration, iterations: int = PROFILE_ITERATIONS
                     ) -> Workload:
    """What profiling knows: each trial's first iteration, then the mean of its next ``iterations - 1`` as
    its steady time (alone times, plus the boundary cost). A trial that ran one iteration gets its first time
    less the median set-up excess (first minus steady) of the others.

    Args:
        trace: The run.
        calibration: Its measured figures.
        iterations: Iterations profiled per trial (at least 1).

    Returns:
        The workload, one record per trial in creation order (curves as recorded).
    """
    if iterations < 1:
        raise ConfigError(f"profile_workload: iterations must be >= 1, got {iterations}")
    times = alone_times(trace, calibration.interference)
    typical = _typical(times)
    steady: dict[str, float] = {}
    excess = []
    for tid, ts in times.items():
        later = [t for t in ts[1:iterations] if t > 0]
        if later and ts[0] > 0:
            steady[tid] = statistics.fmean(later)
            excess.append(ts[0] - steady[tid])
    setup = statistics.median(excess) if excess else 0.0
    records = []
    for trial in trace.trials:
        ts = times[trial.trial_id]
        first = ts[0] if ts and ts[0] > 0 else typical
        rest = steady.get(trial.trial_id, first - setup if first - setup > 0 else first)
        b = calibration.boundary_s
        records.append(_record((first + b, rest + b), _curve(trial), _demand(trace, trial)))
    return Workload(tuple(records), metric=trace.metric or "_metric", mode=trace.mode or "min",
                    source=f"profiled({trace.path})")


# ------------------------------------------------------------------------------------------ replay searcher


@dataclass(frozen=True)
class TrialPlan:
    """What a trial did, for :class:`ReplaySearcher`.

    Attributes:
        length: Iterations it ran (0: it never ran; it is stopped as soon as it is created).
        budgets: The budgets it ran to, in order (None: open-ended).
        ended_before: Trials that had ended when its group was created (the replay creates it once as many
            have ended).
    """

    length: int
    budgets: tuple[float | None, ...]
    ended_before: int


def trial_plans(trace: StoreTrace) -> list[TrialPlan]:
    """One :class:`TrialPlan` per trial, in creation order.

    A trial paused at each of the run's distinct budgets below its length and its own last budget, and ran
    to that last budget (see the module docstring's limitations).
    """
    budgets = trace.budgets
    ends = sorted(t.finished for t in trace.trials if t.finished is not None)
    plans = []
    for t in trace.trials:
        top = t.length if t.budget is None else min(t.length, t.budget)
        path: list[float | None] = [b for b in budgets if b < top]
        path.append(t.budget)
        plans.append(TrialPlan(t.length, tuple(path), bisect.bisect_left(ends, t.created)))
    return plans


class ReplaySearcher(BaseSearcher):
    """Makes a recorded run's decisions again: trial ``i`` (in creation order) runs ``plans[i].length``
    iterations, pausing at each of its budgets and promoted past each but the last, and is stopped there.

    Args:
        plans: One per trial, in creation order (:func:`trial_plans`).
        time_attr: The result key budgets count.
    """

    def __init__(self, plans: Sequence[TrialPlan], time_attr: str = ITERATION_KEY) -> None:
        self.plans = list(plans)
        self.time_attr = time_attr
        self._batches: list[tuple[int, list[int]]] = []
        for index, plan in enumerate(self.plans):
            if self._batches and self._batches[-1][0] == plan.ended_before:
                self._batches[-1][1].append(index)
            else:
                self._batches.append((plan.ended_before, [index]))
        self._emitted_batches = 0
        self._added = 0
        self._index: dict[str, int] = {}
        self._stage: dict[str, int] = {}
        self._promotions: list[tuple[str, float | None]] = []
        self._stops: list[str] = []
        self._ended = 0
        self._groups = 0

    def _group_id(self) -> str:
        self._groups += 1
        return f"replay-{self._groups}"

    def next_groups(self) -> list[TrialGroup]:
        """Promotions decided since the last call, then every batch of new trials now due."""
        groups = []
        by_budget: dict[float | None, list[str]] = {}
        for tid, budget in self._promotions:
            by_budget.setdefault(budget, []).append(tid)
        self._promotions = []
        for budget, ids in by_budget.items():
            groups.append(TrialGroup(self._group_id(), budget=budget, trial_ids=ids))
        while self._emitted_batches < len(self._batches):
            ended_before, indices = self._batches[self._emitted_batches]
            if self._ended < ended_before:
                break
            self._emitted_batches += 1
            run: list[int] = []
            for index in indices:  # one group per run of equal first budgets, keeping creation order
                if run and self.plans[run[0]].budgets[0] != self.plans[index].budgets[0]:
                    groups.append(self._new_group(run))
                    run = []
                run.append(index)
            groups.append(self._new_group(run))
        return groups

    def _new_group(self, indices: list[int]) -> TrialGroup:
        return TrialGroup(self._group_id(), configs=[{"replay": i} for i in indices],
                          budget=self.plans[indices[0]].budgets[0])

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        index = self._added
        self._added += 1
        self._index[trial_id] = index
        self._stage[trial_id] = 0
        if self.plans[index].length == 0:
            self._stops.append(trial_id)

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        plan = self.plans[self._index[trial_id]]
        progress = result[self.time_attr]
        if progress >= plan.length:
            return Decision.STOP
        stage = self._stage[trial_id]
        budget = plan.budgets[stage]
        if budget is not None and progress >= budget and stage + 1 < len(plan.budgets):
            self._stage[trial_id] = stage + 1
            self._promotions.append((trial_id, plan.budgets[stage + 1]))
        return Decision.CONTINUE

    def collect_stops(self) -> list[str]:
        stops, self._stops = self._stops, []
        return stops

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self._ended += 1

    def is_finished(self) -> bool:
        return self._emitted_batches == len(self._batches) and not self._promotions

    def proposes_new(self) -> bool:
        return self._emitted_batches < len(self._batches)


# ------------------------------------------------------------------------------------------ the device runtime


class PinnedLanes(ln.LaneManager):
    """A device's lane manager that admits each trial as the recorded run did: into the lane of its recorded
    lane mates while one of them is still there, into a new lane when it opened one (if a lane may open),
    and by the manager's own best fit otherwise (its mates all left, or the trial was never recorded).

    Args:
        capacity_bytes: The device's lane capacity.
        max_lanes: Its lanes.
        mates_of: ``trial_id -> ids of its recorded lane mates`` (empty: it opened a lane; None: not recorded).
    """

    def __init__(self, capacity_bytes: int, max_lanes: int,
                 mates_of: Callable[[str], Sequence[str] | None]) -> None:
        super().__init__(capacity_bytes, max_lanes)
        self._mates_of = mates_of
        self._placing: str | None = None

    def admit(self, trial_id: str, p: int, t: int) -> ln.Placement | None:
        self._placing = trial_id
        try:
            return super().admit(trial_id, p, t)
        finally:
            self._placing = None

    def _find(self, p: int, t: int) -> tuple[str, int | None] | None:
        mates = None if self._placing is None else self._mates_of(self._placing)
        if mates is not None and not mates and len(self._lanes) < self.max_lanes and p + t <= self.unreserved:
            return ("new", None)
        for mate in mates or ():
            lane_id = self._where.get(mate)
            if lane_id is None:
                continue
            lane = self._lanes[lane_id]
            if lane.admits(p, t):
                return ("lane", lane_id)
            if self.grow_lanes and self._growth(lane, p, t) <= self.unreserved:
                return ("grow", lane_id)
            break
        return super()._find(p, t)


class RuntimeEffects(BaseSearcher):
    """What the device runtime does to a searcher's decisions, wrapped around the run's searcher.

    - A STOP on a paused trial's result does not end it at once: the stop reaches its device at the driver's
      next step, where the trial leaves its lane either before that step's admissions or after them (the
      race of the module docstring). ``admit_first(seq, contested)`` says which, for the trial created
      ``seq``-th; ``contested`` is whether trials are queued for placement.
    - At each iteration boundary where the trial goes on computing (not paused, not stopped: where the
      runtime profiles), the trial's next recorded memory estimate re-fits its lane.

    - With ``lane_mates``, each device's lane manager is a :class:`PinnedLanes`: trials join the lanes they
      joined in the recorded run.

    The strategy calls :meth:`end_stopped` around its placements (see :class:`_EffectsStrategy`).

    Args:
        inner: The run's searcher.
        estimates: ``(P, T)`` estimates per trial, by creation order (missing: none).
        admit_first: ``(seq, contested) -> bool``.
        lane_mates: Recorded lane mates (creation indices) per trial, by creation order (None: best fit).
    """

    def __init__(self, inner: BaseSearcher, estimates: Sequence[Sequence[tuple[int, int]]],
                 admit_first: Callable[[int, bool], bool],
                 lane_mates: Sequence[Sequence[int] | None] | None = None) -> None:
        self.inner = inner
        self.time_attr = inner.time_attr
        self.estimates = [list(e) for e in estimates]
        self.admit_first = admit_first
        self.lane_mates = None if lane_mates is None else list(lane_mates)
        self._samples: dict[str, int] = defaultdict(int)
        self._stopped: list[str] = []
        self._tids: list[str] = []  # simulated trial ids in creation order
        self._seq: dict[str, int] = {}
        self.sim: Simulation | None = None

    def bind(self, sim: Simulation) -> None:
        """Attach to the simulation that drives it (before it runs); pin its lanes when asked to."""
        self.sim = sim
        if self.lane_mates is None:
            return
        for device in sim.devices:
            if device.lm is not None:
                device.lm = PinnedLanes(device.lm.capacity, device.lm.max_lanes, self._mates_of)

    def _mates_of(self, trial_id: str) -> list[str] | None:
        seq = self._seq.get(trial_id)
        if self.lane_mates is None or seq is None or seq >= len(self.lane_mates):
            return None
        mates = self.lane_mates[seq]
        return None if mates is None else [self._tids[m] for m in mates if m < len(self._tids)]

    # Delegation.
    def next_groups(self) -> list[TrialGroup]:
        return self.inner.next_groups()

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self._seq[trial_id] = len(self._tids)
        self._tids.append(trial_id)
        self.inner.on_trial_add(trial_id, group_id, config)

    def collect_stops(self) -> list[str]:
        return self.inner.collect_stops()

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self.inner.on_trial_complete(trial_id, result, error=error)

    def is_finished(self) -> bool:
        return self.inner.is_finished()

    def proposes_new(self) -> bool:
        return self.inner.proposes_new()

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        decision = self.inner.on_result(trial_id, result)
        sim = self.sim
        assert sim is not None, "RuntimeEffects.bind(sim) was not called"
        trial = sim.trials[trial_id]
        if trial.state == PAUSED:
            if decision == Decision.STOP:
                self._stopped.append(trial_id)
                return Decision.CONTINUE  # it stays paused (and resident) until the driver's next step
            return decision
        if decision == Decision.CONTINUE:
            self._refit(trial)
        return decision

    def _refit(self, trial: SimTrial) -> None:
        sim = self.sim
        assert sim is not None
        recorded = self.estimates[trial.seq] if trial.seq < len(self.estimates) else []
        sample = self._samples[trial.tid]
        if sample >= len(recorded):
            return
        self._samples[trial.tid] = sample + 1
        p, t = recorded[sample]
        for index in trial.devices:
            device = sim.devices[index]
            if device.lm is None or trial.tid not in device.lm:
                continue
            decision = device.lm.update_estimate(trial.tid, p, t)
            device.version += 1
            if decision.action not in (ln.ACT_STAY, ln.ACT_RESIZE) or decision.admitted:
                raise SimulationError(f"re-fitting trial {trial.tid}'s recorded estimate (P={p}, T={t}) moved trials "
                                      f"between lanes ({decision.action}); the replay keeps trials in their lanes")

    def end_stopped(self, now: float, admitted: bool) -> None:
        """End the stopped trials whose stop reaches the device before (``admitted=False``) or after this
        step's admissions."""
        sim = self.sim
        assert sim is not None
        contested = any(t.state == QUEUED and not t.resident for t in sim.live_trials())
        kept = []
        for tid in self._stopped:
            trial = sim.trials[tid]
            if trial.state != PAUSED:  # ended meanwhile (the run finished)
                continue
            if self.admit_first(trial.seq, contested) == admitted:
                _end_trial(sim, trial, now)
            else:
                kept.append(tid)
        self._stopped = kept


def _end_trial(sim: Simulation, trial: SimTrial, now: float) -> None:
    """End a paused trial whose stop reached its device (the engine's own end of a trial)."""
    sim._end(trial, now, "stopped")


def recorded_order(trace: StoreTrace) -> Callable[[int, bool], bool]:
    """The admit-first order of a recorded run: each trial's recorded race, else the run's share."""
    flags = {t.seq: t.left_after_admit for t in trace.trials}
    share = share_order(trace.admit_first_share)

    def order(seq: int, contested: bool) -> bool:
        flag = flags.get(seq)
        return share(seq, contested) if flag is None else flag

    return order


def share_order(share: float) -> Callable[[int, bool], bool]:
    """A deterministic order with a given admit-first share: the ``k``-th contested stop is admit-first when
    ``floor((k + 1) * share) > floor(k * share)`` (uncontested stops are leave-first: nothing is admitted)."""
    counter = [0]
    memo: dict[int, bool] = {}

    def order(seq: int, contested: bool) -> bool:
        if seq in memo:
            return memo[seq]
        if not contested:
            return False
        k = counter[0]
        counter[0] += 1
        memo[seq] = math.floor((k + 1) * share) > math.floor(k * share)
        return memo[seq]

    return order


class _EffectsStrategy(Strategy):
    """A strategy with the runtime's stop order: leave-first stops, the inner placement, admit-first stops."""

    def __init__(self, inner: Strategy, effects: RuntimeEffects) -> None:
        self.inner = inner
        self.effects = effects
        self.name = inner.name
        self.lanes = inner.lanes
        self.keeps_paused = inner.keeps_paused

    def bind(self, sim: Simulation) -> None:
        super().bind(sim)
        self.inner.bind(sim)
        self.effects.bind(sim)

    def place(self, now: float) -> None:
        self.effects.end_stopped(now, admitted=False)
        self.inner.place(now)
        self.effects.end_stopped(now, admitted=True)

    def observe(self, trial: SimTrial, duration: float, devices: int, colocated: int) -> None:
        self.inner.observe(trial, duration, devices, colocated)

    def released(self, trial: SimTrial) -> None:
        self.inner.released(trial)

    def __getattr__(self, name: str) -> Any:  # figures a planner keeps (e.g. ``plans``)
        return getattr(self.inner, name)


# ------------------------------------------------------------------------------------------ the executor's dispatch


class LeastLoadedStrategy(Strategy):
    """The executor's placement before it used the planner (its least-loaded ``_dispatch``), in the simulator.

    At every driver step, queued trials (in queue order) go one by one to the device with the fewest
    computing trials per slot (ties: the lower index) among those with fewer than ``slots + prefetch``
    computing trials; a computing trial is one placed there and not paused at its budget. There, the
    device's real lane manager admits it (best fit over at most ``slots`` lanes, growing a lane when none is
    free) and its lane's policy time-slices it with the lane's other trials. Paused trials stay resident.

    Args:
        prefetch: Trials queued per device beyond its slots.
    """

    name = "least_loaded"
    lanes = True
    keeps_paused = True

    def __init__(self, prefetch: int = PREFETCH_PER_DEVICE) -> None:
        self.prefetch = prefetch

    def place(self, now: float) -> None:
        sim = self.sim
        slots = sim.hardware.slots
        load = [0] * sim.hardware.gpus
        queued = 0
        for trial in sim.live_trials():
            if trial.state == QUEUED and not trial.resident:
                queued += 1
            elif trial.devices and trial.state not in (PAUSED, ENDED):
                load[trial.devices[0]] += 1
        while queued:
            open_devices = [d for d in range(len(load)) if load[d] < slots + self.prefetch]
            if not open_devices:
                return
            device = min(open_devices, key=lambda d: (load[d] / slots, d))
            sim.start_lanes(sim.pop_queue(), (device,), now)
            load[device] += 1
            queued -= 1


class PlannerExecutorStrategy(WaterfillStrategy):
    """The real executor's placement (``Executor._dispatch`` with the water-filling planner) in the simulator.

    At every driver step the planner plans every live trial (as ``waterfill`` does), and the executor's rules
    apply its plan: a queued trial is submitted to its planned devices; a placed trial is moved or preempted
    only if it can restart from a checkpoint (``checkpoints``; else the change is refused and it stays), and one
    with no iteration done yet is withdrawn if it has not begun (``Simulation.withdraw``); then
    each full device (at least as many computing trials as slots) takes up to ``prefetch`` more of the plan's
    queued trials, in the plan's queue order, each to the lowest-index full device whose lanes can hold it.

    Args:
        prefetch: Queued trials submitted ahead to each full device (``trialgroup.dispatch.PREFETCH_PER_DEVICE``).
        checkpoints: Whether the trials checkpoint (so that moves and preemptions are carried out).
        settings: Planner thresholds (None: the defaults; the move cost is then the executor's estimate
            (``trialgroup/movecost.py``): the prior :data:`DEFAULT_MOVE_COST_S` until a trial has done two
            iterations, then what a start costs (the hardware's ``startup_s``) until a moved trial has done two
            iterations on its new devices, then the hardware's ``move_s``.)
    """

    name = "executor"

    def __init__(self, prefetch: int = PREFETCH_PER_DEVICE, checkpoints: bool = False,
                 settings: PlannerSettings | None = None) -> None:
        super().__init__(settings)
        self.prefetch = prefetch
        self.checkpoints = checkpoints
        self._learning = False  # the executor's move cost is followed (settings=None) and not yet from a move
        self._started_measured = False  # some trial has done two iterations: starts are measured
        self._moved_at: dict[str, int] = {}  # moved trial -> its iteration then, until a move is measured
        self._restarted_at: dict[str, int] = {}  # moved trial -> its iteration at its last move (its attempt's start)

    def bind(self, sim: Simulation) -> None:
        super().bind(sim)
        if self.settings is None:
            self._learning = True
            self.planner.settings = replace(self.planner.settings, move_cost_s=DEFAULT_MOVE_COST_S)

    def _learn_move_cost(self) -> None:
        """What the executor knows of a move's cost by now: a start's cost once an attempt of any trial (one that
        has ended too) has done two iterations, a move's once a moved trial has done two iterations on its new
        devices."""
        trials = self.sim.trials
        hardware = self.sim.hardware
        if any(trials[tid].iteration >= at + 2 for tid, at in self._moved_at.items()):
            self.planner.settings = replace(self.planner.settings, move_cost_s=hardware.move_s)
            self._learning = False
            self._moved_at.clear()
        elif not self._started_measured and any(t.iteration - self._restarted_at.get(t.tid, 0) >= 2
                                                for t in trials.values()):  # ended trials' attempts count too
            self.planner.settings = replace(self.planner.settings, move_cost_s=hardware.startup_s)
            self._started_measured = True

    def adjust(self, demands: list[TrialDemand]) -> list[TrialDemand]:
        """Without checkpoints a placed trial that has done an iteration cannot restart: the executor tells the
        planner so (``TrialDemand.restartable``), and the planner weighs another trial for a move instead."""
        if self.checkpoints:
            return demands
        trials = self.sim.trials
        return [d._replace(restartable=False) if d.devices and trials[d.trial_id].iteration > 0 else d
                for d in demands]

    def place(self, now: float) -> None:
        if self._learning:
            self._learn_move_cost()
        plan = self.plan()
        if plan is None:
            return
        sim = self.sim
        trials = sim.trials
        # The executor's own rules decide which of the plan's changes happen (trialgroup/dispatch.py).
        actions = plan_actions(plan, {tid: self._state(trials[tid]) for tid in self._planned(plan)})
        for tid, devices, _ in actions.submit:
            sim.start_lanes(trials[tid], devices, now)
        retargeted = [(tid, devices) for tid, devices in actions.retarget if devices != trials[tid].next_devices]
        for tid, devices in [(tid, devices) for tid, devices, _ in actions.move] + retargeted:
            sim.move(trials[tid], devices, now)
            if self._learning:
                self._moved_at[tid] = self._restarted_at[tid] = trials[tid].iteration
        planned = {a.trial_id: a.devices for a in plan.assignments}
        for tid, action in actions.withdraw:
            # The executor queues a withdrawn trial and its next plan places it: here it goes to the devices this
            # plan chose at once (a preemption has none: it is queued).
            sim.withdraw(trials[tid], None if action == "preempt" else planned[tid], now)
        for tid in actions.preempt:
            sim.preempt(trials[tid], now)
        left = self._prefetch(plan.queued, now)
        # as the executor tells its devices (Executor._tell_hold_pauses): hold pauses while another device is up, no
        # trial waits in the queue and the searcher proposes no new one
        sim.hold_pauses = sim.hardware.gpus > 1 and not left and not sim.searcher.proposes_new()

    def _planned(self, plan: Plan) -> set[str]:
        """The trials a plan decides about."""
        return {a.trial_id for a in plan.assignments} | set(plan.preempted)

    def _state(self, trial: SimTrial) -> TrialState:
        """A virtual trial as the executor's :func:`plan_actions` sees a real one: it restarts from a checkpoint
        only when the trials checkpoint (the replay assumes one at every iteration), and it may not have begun
        while it has done no iteration."""
        placed = trial.state != QUEUED or trial.resident
        return TrialState(placed_on=tuple(trial.devices) if placed else (), computing=trial.state != PAUSED,
                          can_restart=self.checkpoints and trial.iteration > 0, unbegun=trial.iteration == 0,
                          moving=trial.next_devices is not None, busy=trial.state == ENDED or trial.stop_pending)

    def _prefetch(self, queue: Sequence[str], now: float) -> int:
        """Submit queued trials ahead to full devices; returns how many trials are left waiting in the queue."""
        sim = self.sim
        slots = sim.hardware.slots
        load = [0] * sim.hardware.gpus
        for trial in sim.live_trials():
            if trial.devices and trial.state not in (QUEUED, PAUSED, ENDED):
                load[trial.devices[0]] += 1
        trials = sim.trials
        waiting = [tid for tid in queue if trials[tid].state == QUEUED and not trials[tid].resident]
        sizes = {tid: trials[tid].rec.p_bytes + trials[tid].rec.t_bytes for tid in waiting}
        devices = [DeviceLoad(d, n, slots, self.capacity) for d, n in enumerate(load)]
        prefetched = choose_prefetch(waiting, sizes, devices, self.prefetch)
        for tid, device in prefetched:
            sim.start_lanes(trials[tid], (device,), now, prefetched=True)
        return len(waiting) - len(prefetched)


def make_replay_strategy(planner: str, checkpoints: bool = False) -> Strategy:
    """The placement of a replay (one of :data:`REPLAY_PLANNERS`).

    Args:
        planner: Its name.
        checkpoints: ``executor``: whether the trials checkpoint (moves and preemptions are carried out).

    Raises:
        ConfigError: An unknown name.
    """
    if planner == "executor":
        return PlannerExecutorStrategy(checkpoints=checkpoints)
    if planner == "least_loaded":
        return LeastLoadedStrategy()
    if planner == "waterfill":
        return make_strategy("waterfill")
    raise ConfigError(f"planner: {planner!r} is not one of {', '.join(REPLAY_PLANNERS)}")


# ------------------------------------------------------------------------------------------ replay


def runtime_simulation(
    strategy: Strategy,
    workload: Workload,
    searcher: BaseSearcher,
    max_iterations: int,
    hardware: Hardware,
    *,
    estimates: Sequence[Sequence[tuple[int, int]]] = (),
    admit_first: Callable[[int, bool], bool] | None = None,
    lane_mates: Sequence[Sequence[int] | None] | None = None,
    lane_policy: str = "fifo",
) -> Simulation:
    """A simulation with the device runtime's effects (:class:`RuntimeEffects`) around a searcher and a
    placement strategy.

    Args:
        strategy: The placement (e.g. :class:`LeastLoadedStrategy`).
        workload: The trials.
        searcher: The run's searcher.
        max_iterations: Where a trial's trainable returns.
        hardware: The devices.
        estimates: Recorded ``(P, T)`` estimates per trial, by creation order.
        admit_first: The stop order (None: every stop leaves before the admissions).
        lane_mates: Recorded lane mates per trial (None: the lane manager's best fit).
        lane_policy: The lane policy.

    Returns:
        The simulation, ready to :meth:`~fluidsalus.sim.engine.Simulation.run`.
    """
    effects = RuntimeEffects(searcher, estimates, admit_first or share_order(0.0), lane_mates)
    return Simulation(_EffectsStrategy(strategy, effects), workload, effects, max_iterations, hardware,
                      lane_policy=lane_policy)


def hardware_for(trace: StoreTrace, calibration: Calibration, **overrides: Any) -> Hardware:
    """The virtual devices of a trace: its device count and slots, a virtual CPU device's lane capacity on
    this machine (no CUDA context), and the calibration's costs.

    Args:
        trace: The run.
        calibration: Its measured figures.
        **overrides: Hardware fields to set instead.

    Raises:
        ConfigError: The devices had different slot counts (the simulator has one per run).
    """
    slots = set(trace.devices.values()) or {1}
    if len(slots) > 1:
        raise ConfigError(f"the trace's devices have different slots {sorted(slots)}; the simulator needs one")
    n = max(1, len(trace.devices))
    values: dict[str, Any] = dict(
        gpus=n, gpus_per_node=n, gpu_memory=virtual_device_capacity(n), context_bytes=0, slots=slots.pop(),
        interference=calibration.interference, startup_s=calibration.startup_s,
        move_s=calibration.startup_s if calibration.move_s is None else calibration.move_s,
        comm_fraction=0.0, driver_latency_s=calibration.driver_latency_s,
    )
    values.update(overrides)
    return Hardware(**values)


def replay(
    trace: StoreTrace,
    *,
    calibration: Calibration | None = None,
    workload: Workload | None = None,
    planner: str = "executor",
    searcher: BaseSearcher | None = None,
    max_iterations: int | None = None,
    lane_policy: str = "fifo",
    runtime_effects: bool = True,
    admit_first: Callable[[int, bool], bool] | None = None,
    pin_lanes: bool = False,
    checkpoints: bool = False,
) -> SimResult:
    """Simulate a recorded run.

    Args:
        trace: The run.
        calibration: Its figures (None: :func:`calibrate`).
        workload: The trials (None: :func:`recorded_workload`).
        planner: One of :data:`REPLAY_PLANNERS`.
        searcher: The searcher (None: a :class:`ReplaySearcher` of the recorded decisions).
        max_iterations: Where a trial's trainable returns (None: the longest recorded trial).
        lane_policy: The run's lane policy.
        runtime_effects: Replay the device runtime's stop order and memory re-fits (:class:`RuntimeEffects`).
        admit_first: The stop order (None: :func:`recorded_order` of the trace).
        pin_lanes: With ``runtime_effects``, admit trials to the lanes they joined in the run
            (:class:`PinnedLanes`) instead of by best fit.
        checkpoints: ``executor``: whether the run's trials checkpoint (the executor moves and preempts only
            trials that can restart from a checkpoint).

    Returns:
        The simulated run's figures (``makespan_s`` is comparable with :attr:`StoreTrace.makespan_s`).

    Raises:
        StoreError: The run had data-parallel trials (:func:`check_single_device`).
    """
    check_single_device(trace)
    strategy = make_replay_strategy(planner, checkpoints)
    calibration = calibration or calibrate(trace)
    workload = workload or recorded_workload(trace, calibration)
    searcher = searcher or ReplaySearcher(trial_plans(trace))
    top = max_iterations or max((t.length for t in trace.trials), default=1) or 1
    hardware = hardware_for(trace, calibration)
    if not runtime_effects:
        return Simulation(strategy, workload, searcher, top, hardware, lane_policy=lane_policy).run()
    return runtime_simulation(
        strategy, workload, searcher, top, hardware, estimates=[t.estimates for t in trace.trials],
        admit_first=admit_first or recorded_order(trace), lane_mates=[t.lane_mates for t in trace.trials] if pin_lanes
        else None, lane_policy=lane_policy).run()


@dataclass
class Comparison:
    """A measured run against its replays.

    Attributes:
        measured_s: The run's makespan (first trial start to last trial end).
        wall_s: The experiment's lifetime in the store (created to finished; None while running).
        recorded_s: Makespan predicted from the recorded trace (recorded decisions and iteration times).
        profile_s: Makespan predicted from profiles of the first iterations (and ``searcher`` if given).
        naive_s: ``recorded_s`` without the runtime's stop order and memory re-fits.
        calibration: The measured figures all used.
        planner: The placement of the replays.
        iterations: Iterations measured, replayed from the trace, and simulated from profiles.
        extra: Anything else worth printing.
    """

    measured_s: float
    wall_s: float | None
    recorded_s: float
    profile_s: float
    naive_s: float
    calibration: Calibration
    planner: str
    iterations: dict[str, int]
    extra: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def error_pct(predicted: float, measured: float) -> float | None:
        """``100 * (predicted - measured) / measured`` (None when nothing was measured: JSON has no infinity)."""
        return None if measured <= 0 else 100.0 * (predicted - measured) / measured

    @staticmethod
    def _rounded(value: float | None, digits: int) -> float | None:
        return None if value is None else round(value, digits)

    def figures(self) -> dict[str, Any]:
        """JSON-ready figures: ``predicted_s`` and ``error_pct`` are the recorded trace's."""
        c = self.calibration
        return {
            "measured_s": round(self.measured_s, 4),
            "predicted_s": round(self.recorded_s, 4),
            "error_pct": self._rounded(self.error_pct(self.recorded_s, self.measured_s), 2),
            "profile_predicted_s": round(self.profile_s, 4),
            "profile_error_pct": self._rounded(self.error_pct(self.profile_s, self.measured_s), 2),
            "naive_predicted_s": round(self.naive_s, 4),
            "naive_error_pct": self._rounded(self.error_pct(self.naive_s, self.measured_s), 2),
            "store_wall_s": None if self.wall_s is None else round(self.wall_s, 4),
            "planner": self.planner,
            "interference": round(c.interference, 4),
            "driver_latency_ms": round(c.driver_latency_s * 1e3, 3),
            "startup_ms": round(c.startup_s * 1e3, 3),
            "boundary_ms": round(c.boundary_s * 1e3, 3),
            "admit_first_share": round(c.admit_first_share, 3),
            "move_ms": None if c.move_s is None else round(c.move_s * 1e3, 3),
            "iterations": dict(self.iterations),
            **self.extra,
        }


def compare_with_store(
    trace: StoreTrace,
    *,
    planner: str = "executor",
    searcher_factory: Callable[[], BaseSearcher] | None = None,
    max_iterations: int | None = None,
    profile_iterations: int = PROFILE_ITERATIONS,
    lane_policy: str = "fifo",
    also: Sequence[str] = (),
) -> Comparison:
    """Predict a recorded run's makespan (a) from its trace and (b) from profiles of its first iterations.

    Args:
        trace: The run.
        planner: The placement the real executor used (one of :data:`REPLAY_PLANNERS`).
        searcher_factory: A fresh copy of the run's searcher for (b) (None: the recorded decisions). Its
            decisions are made again in simulated time, and the stop order follows the measured share.
        max_iterations: Where a trial's trainable returns (None: the longest recorded trial).
        profile_iterations: Iterations profiled per trial for (b).
        lane_policy: The run's lane policy.
        also: Other placements (of :data:`REPLAY_PLANNERS`) to replay the recorded trace under; their makespans
            and errors go to ``extra`` as ``<name>_predicted_s`` and ``<name>_error_pct``.

    Returns:
        The comparison.

    Raises:
        StoreError: A trial of the run never ended (the run was killed or is still going): it has no makespan
            to compare with.
    """
    check_finished(trace)
    calibration = calibrate(trace)
    common = dict(calibration=calibration, planner=planner, max_iterations=max_iterations, lane_policy=lane_policy,
                  checkpoints=trace.checkpointed)
    recorded = replay(trace, pin_lanes=True, **common)  # type: ignore[arg-type]
    naive = replay(trace, runtime_effects=False, **common)  # type: ignore[arg-type]
    searcher = searcher_factory() if searcher_factory is not None else None
    profiled = replay(trace, workload=profile_workload(trace, calibration, profile_iterations), searcher=searcher,
                      admit_first=share_order(calibration.admit_first_share) if searcher is not None else None,
                      **common)  # type: ignore[arg-type]
    extra: dict[str, Any] = {"trials": len(trace.trials), "devices": len(trace.devices),
                             "slots": max(trace.devices.values(), default=1)}
    for name in also:
        other = replay(trace, pin_lanes=True, **{**common, "planner": name}).makespan_s  # type: ignore[arg-type]
        extra[f"{name}_predicted_s"] = round(other, 4)
        extra[f"{name}_error_pct"] = Comparison._rounded(Comparison.error_pct(other, trace.makespan_s), 2)
    return Comparison(
        measured_s=trace.makespan_s, wall_s=trace.wall_s, recorded_s=recorded.makespan_s,
        profile_s=profiled.makespan_s, naive_s=naive.makespan_s, calibration=calibration, planner=planner,
        iterations={"measured": trace.iterations, "recorded": recorded.iterations, "profile": profiled.iterations},
        extra=extra,
    )


# ------------------------------------------------------------------------------------------ export, CLI


def check_single_device(trace: StoreTrace) -> None:
    """Refuse a run with data-parallel trials: the replay and the saved trace model every trial on one device.

    A trial whose ranks ran on several devices would be replayed on one (its iteration times, measured on all
    its ranks, taken as one device's alone times), beside trials that in the run waited for its devices, and a
    resize would not be replayed: a tester's run of 4 trials on 2 devices each was predicted 38% short.

    Args:
        trace: The run.

    Raises:
        StoreError: Naming how many trials ran data-parallel and the first of them.
    """
    if trace.world_sizes:
        first = next((t.trial_id for t in trace.trials if t.trial_id in trace.world_sizes),
                     next(iter(trace.world_sizes)))
        raise StoreError(
            f"{trace.path}: {len(trace.world_sizes)} of its {len(trace.trials)} trials ran data-parallel (first: "
            f"{first} on up to {trace.world_sizes[first]} devices); the simulator replays one-device trials only "
            "and would predict a wrong makespan: recorded traces of data-parallel runs are not supported")


def check_finished(trace: StoreTrace) -> None:
    """Refuse a run with a trial that never ended: its measured makespan (the last trial end) would leave that
    trial out, or be 0 when none ended, and a replay runs every trial to its last report. Refuse a resumed run too:
    its measured makespan holds the time it sat interrupted (and the iterations its resume ran again), which no
    replay predicts (``fluidsalus ls`` sums its sessions instead).

    Args:
        trace: The run.

    Raises:
        StoreError: Naming how many trials never ended and the first of them, or how many times it was resumed.
    """
    open_ = [t.trial_id for t in trace.trials if t.finished is None]
    if open_:
        raise StoreError(f"{trace.path}: {len(open_)} of its {len(trace.trials)} trials never ended (first: "
                         f"{open_[0]}); the run was interrupted or is still going, so it has no makespan to "
                         "compare with: replay a finished experiment")
    if trace.resumes:
        raise StoreError(f"{trace.path}: the run was interrupted and resumed ({plural(trace.resumes, 'time')}), so "
                         "its makespan holds the time it sat interrupted: replay an experiment that ran in one "
                         "session")


def trace_document(trace: StoreTrace, calibration: Calibration | None = None) -> dict[str, Any]:
    """The recorded workload as a ``fluidsalus-sim-trace`` JSON document (``python -m fluidsalus.sim
    --trace`` reads it). Each trial also carries what a replay needs (``iterations_run``, ``budgets``,
    ``end``, ``estimates``), and the hardware the measured figures.

    Args:
        trace: The run.
        calibration: Its figures (None: :func:`calibrate`).

    Returns:
        The JSON-ready document.

    Raises:
        StoreError: The run had data-parallel trials (:func:`check_single_device`).
    """
    check_single_device(trace)
    calibration = calibration or calibrate(trace)
    workload = recorded_workload(trace, calibration)
    entries = []
    for trial, rec, plan in zip(trace.trials, workload.records, trial_plans(trace), strict=True):
        entry = rec.to_dict(max(1, trial.length))
        entry.update(trial_id=trial.trial_id, iterations_run=plan.length, budgets=list(plan.budgets),
                     end=trial.end_reason, estimates=[list(e) for e in trial.estimates])
        entries.append(entry)
    return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "metric": workload.metric, "mode": workload.mode,
            "hardware": hardware_for(trace, calibration).to_dict(), "source": trace.path,
            "measured_makespan_s": trace.makespan_s, "trials": entries}


def save_store_trace(trace: StoreTrace, path: str, calibration: Calibration | None = None) -> None:
    """Write :func:`trace_document` to ``path``."""
    with open(path, "w") as f:
        json.dump(trace_document(trace, calibration), f)


def _pct(value: float | None) -> str:
    return "no error: nothing measured" if value is None else f"{value:+.1f}%"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fluidsalus.sim.trace EXPERIMENT [--save FILE] [--planner executor|waterfill|least_loaded]``.

    Prints the measured makespan, the predictions from the recorded trace and from first-iteration profiles,
    and as its last line their JSON figures.

    Args:
        argv: Arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    p = argparse.ArgumentParser(prog="python -m fluidsalus.sim.trace",
                                description="Replay a finished experiment in the simulator.")
    p.add_argument("experiment", help="an experiment folder, its experiment.db, or a name under the storage path")
    p.add_argument("--save", metavar="FILE", help="write the recorded workload as a JSON trace")
    p.add_argument("--planner", choices=REPLAY_PLANNERS, default="executor")
    p.add_argument("--lane-policy", choices=sorted(POLICIES),
                   help=f"the run's lane policy (default: the one the run's store records, else {DEFAULT_LANE_POLICY})")
    args = p.parse_args(argv)
    try:
        if args.save:
            check_save_path(args.save)  # before the replay: a .csv name or a missing folder
        trace = load_store_trace(args.experiment)
        policy = args.lane_policy or trace.lane_policy or DEFAULT_LANE_POLICY
        if policy in UNPRIORITISED_POLICIES:
            print(f"# lane policy {policy}: the replay's trials have no priority, so it runs as "
                  f"{DEFAULT_LANE_POLICY} (its tie-break)")
        comparison = compare_with_store(trace, planner=args.planner, lane_policy=policy)
        if args.save:
            save_store_trace(trace, args.save, comparison.calibration)
    except (StoreError, ConfigError, SimulationError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    f = comparison.figures()
    print(f"# {len(trace.trials)} trials, {trace.iterations} iterations on {len(trace.devices)} device(s), lane "
          f"policy {policy}; "
          f"interference {f['interference']}, driver latency {f['driver_latency_ms']} ms, start {f['startup_ms']} ms, "
          f"boundary {f['boundary_ms']} ms, admit-first share {f['admit_first_share']}")
    print(f"measured makespan {f['measured_s']:.3f} s; predicted from the trace {f['predicted_s']:.3f} s "
          f"({_pct(f['error_pct'])}; {_pct(f['naive_error_pct'])} without the runtime's stop order and re-fits), "
          f"from profiles {f['profile_predicted_s']:.3f} s ({_pct(f['profile_error_pct'])})")
    print(json.dumps(f, allow_nan=False))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = [
    "REPLAY_PLANNERS",
    "Calibration",
    "Comparison",
    "LeastLoadedStrategy",
    "PinnedLanes",
    "PlannerExecutorStrategy",
    "ReplaySearcher",
    "RuntimeEffects",
    "StoreTrace",
    "TraceIteration",
    "TraceSpan",
    "TraceTrial",
    "TrialPlan",
    "alone_times",
    "calibrate",
    "check_finished",
    "check_single_device",
    "compare_with_store",
    "fit_interference",
    "hardware_for",
    "load_store_trace",
    "make_replay_strategy",
    "measure_boundary",
    "measure_driver_latency",
    "measure_startup",
    "profile_workload",
    "recorded_order",
    "recorded_workload",
    "replay",
    "runtime_simulation",
    "save_store_trace",
    "share_order",
    "trace_document",
    "trial_plans",
]
