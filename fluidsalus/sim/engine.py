"""The event-driven core: virtual GPUs, lanes, trials, a searcher and a planner, in virtual time.

The engine follows the executor's rules (``fluidsalus/trialgroup/executor.py``, mirrored by
``fluidsalus/testing/driver.py``): groups from ``next_groups()`` (new trials announced with ``on_trial_add``,
promotions resume paused trials), ``collect_stops()``, every result answered by ``on_result``, a trial pausing
at its group's budget and ending on STOP or at ``max_iterations``, ``on_trial_complete`` once per end, and the
run finishing when the searcher is finished and nothing computes (paused trials are then stopped).

**Events** sit in one heap ordered by ``(time, sequence)``: an iteration finishes (``EV_ITER``), a trial
finishes starting or moving (``EV_READY``), a process crashes out of memory (``EV_OOM``), the driver acts
(``EV_CONTROL``, :data:`~fluidsalus.sim.model.DEFAULT_DRIVER_LATENCY_S` after a change; the changes of that
window are decided together, as the executor handles a batch). Nothing advances in fixed time steps.

**Execution**: each GPU runs *lanes*. Under ``waterfill`` they are the Salus lanes of a real
:class:`~fluidsalus.gpu.lanes.LaneManager` (its admission rule, best fit, queue); the trials of one lane take
turns at iteration boundaries in the order of a real lane policy (:mod:`fluidsalus.gpu.policies`). Under the
static planners every trial is its own process (a lane of its own). An iteration's duration is fixed when it
starts, from :mod:`fluidsalus.sim.model`.

**What the planner is told** is what the executor measures: each iteration's time since the trial's previous
report (its lane's turn included) and the number of trials computing on its home GPU; an iteration during which
that number changed is not reported, except as a trial's first. Each trial's ``TrialDemand`` is rebuilt only
when a field of it changes, as the executor does, so the planner's incremental path applies.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterator, ValuesView
from dataclasses import dataclass, field
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.lanes import LaneManager, TrialTooLargeError
from fluidsalus.gpu.policies import DEFAULT_POLICY, TrialView, choose, get_policy
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.sim.model import GIB, MIB, Hardware, best_dp_factor, dp_factor
from fluidsalus.sim.strategies import Strategy
from fluidsalus.sim.workload import TrialRecord, Workload
from fluidsalus.trialgroup.planner import TrialDemand

# Trial states.
QUEUED = 0  # waiting for a placement
STARTING = 1  # placed, starting (or restoring); holds its memory
RUNNING = 2  # computing: in a lane, ready or running an iteration
PAUSED = 3  # at its group's budget, waiting for the searcher (resident, or released under a static planner)
MOVING = 4  # moving between devices (checkpoint, restore)
ENDED = 5
STATE_NAMES = ("queued", "starting", "running", "paused", "moving", "ended")

# Event kinds.
EV_ITER = 0
EV_READY = 1
EV_OOM = 2
EV_CONTROL = 3

# Queue classes (order in which a static planner starts trials).
Q_RESUME = 0
Q_NEW = 1
Q_RETRY = 2

_STOP = Decision.STOP

#: Guard against a run that never ends (a searcher bug): events processed at most.
MAX_EVENTS = 50_000_000

#: Sort keys over :class:`SimTrial` equal to the lane policies' keys over the :class:`TrialView` the engine would
#: build (:meth:`Simulation.view`: ``arrival_seq`` = ``arrival``, ``used_time_s`` = ``used_s``, ``iterations`` =
#: ``lane_iterations``): the engine picks a lane's next trial with them instead of building views
#: (tests/test_sim.py checks that they choose as :func:`fluidsalus.gpu.policies.choose` does). Policies not
#: listed (``srtf``, ``priority``) go through ``choose``.
SIM_POLICY_KEYS: dict[str, Callable[[SimTrial], tuple]] = {
    "fifo": lambda t: (t.ready_since, t.arrival, t.tid),
    "fair": lambda t: (t.used_s, t.ready_since, t.arrival, t.tid),
    "rr": lambda t: (t.lane_iterations, t.ready_since, t.arrival, t.tid),
    "pack": lambda t: (t.arrival, t.ready_since, t.tid),
}


class SimulationError(RuntimeError):
    """The run cannot go on: the searcher proposes nothing while nothing runs, or a trial fits no GPU."""


def check_records_fit(workload: Workload, hardware: Hardware) -> None:
    """Refuse a workload with a trial that no GPU can ever hold.

    Such a trial would never start: the water-filling planner's lane managers refuse it only once it is
    placed (and the run stalls), and a static planner's process runs out of memory at every start and is
    retried for ever (Ray's ``max_failures=-1``), to :data:`MAX_EVENTS`. Synthetic workloads are clipped to
    fit (:func:`~fluidsalus.sim.workload.generate_workload`); a trace or a smaller ``--gpu-memory-gib`` may not.

    Args:
        workload: The trial records.
        hardware: The virtual cluster.

    Raises:
        ConfigError: A record's ``P + T`` exceeds a GPU's memory less its CUDA context; the message names the
            first such record, how many there are, and the options that set the GPU's memory.
    """
    room = hardware.gpu_memory - hardware.context_bytes
    big = [i for i, r in enumerate(workload.records) if r.p_bytes + r.t_bytes > room]
    if big:
        r = workload.records[big[0]]
        raise ConfigError(
            f"{workload.source}: trial record {big[0]} needs P + T = {(r.p_bytes + r.t_bytes) / GIB:.2f} GiB but a "
            f"GPU leaves {room / GIB:.2f} GiB to trials ({hardware.gpu_memory / GIB:.2f} GiB, --gpu-memory-gib, "
            f"less a {hardware.context_bytes / MIB:.0f} MiB CUDA context, --context-mib); {len(big)} of the "
            f"{len(workload.records)} records are that large: no planner could ever start them")


class SimTrial:
    """One trial's state in the simulation (slots: the engine touches these millions of times)."""

    __slots__ = (
        "tid", "seq", "rec", "budget", "state", "iteration", "devices", "lane", "created", "ended_at",
        "const_base", "dp", "cap", "eff_demand", "next_devices", "preempt_pending", "stop_pending",
        "resident", "cold", "epoch", "iter_start", "iter_n", "arrival", "ready_since", "used_s", "slot",
        "last", "waiting_admission", "end_reason", "attempts", "view", "iter_left", "iter_last", "iter_rate",
        "iter_mixed", "probe_pending", "prefetched", "began", "lane_iterations",
    )

    def __init__(self, tid: str, seq: int, rec: TrialRecord, budget: float | None, created: float) -> None:
        self.tid, self.seq, self.rec, self.budget, self.created = tid, seq, rec, budget, created
        self.state = QUEUED
        self.iteration = 0
        self.devices: tuple[int, ...] = ()
        self.lane: SimLane | None = None
        self.ended_at: float | None = None
        self.const_base = None if isinstance(rec.sec_per_iter, tuple) else rec.sec_per_iter
        self.dp = 1.0
        self.cap = 1.0
        self.eff_demand = rec.demand
        self.next_devices: tuple[int, ...] | None = None
        self.preempt_pending = False
        self.stop_pending = False
        self.resident = False  # holds memory/slot on its devices
        self.cold = False  # must restore from a checkpoint before computing again
        self.epoch = 0
        self.iter_start = 0.0
        self.iter_n = 1
        self.arrival = 0
        self.ready_since = 0.0
        self.used_s = 0.0  # compute time used since it joined its lane (the device host's used_time_s)
        self.lane_iterations = 0  # iterations run since it joined its lane (the device host's iterations)
        self.slot: Any = None
        self.last: dict[str, Any] | None = None
        self.waiting_admission: set[int] = set()
        self.end_reason: str | None = None
        self.attempts = 0
        self.view: TrialDemand | None = None  # cached demand_view (None: stale)
        self.iter_left = 0.0  # work left in the running iteration (seconds at full speed)
        self.iter_last = 0.0  # when iter_left was last brought up to date
        self.iter_rate = 1.0  # current speed of the running iteration
        self.iter_mixed = False  # its GPU's running set changed during the iteration
        self.probe_pending = False  # on several GPUs, not yet measured there: re-plan after its first iteration
        self.prefetched = False  # placed by the executor's prefetch (start_lanes): held until its lane would idle
        self.began = False  # has been its lane's current trial since it joined the lane

    def remaining(self, max_iterations: int) -> float:
        """Iterations left to its budget (or to ``max_iterations``)."""
        top = max_iterations if self.budget is None else min(self.budget, max_iterations)
        return max(0.0, top - self.iteration)

    def demand_view(self, max_iterations: int) -> TrialDemand:
        """What the water-filling planner is told about this trial (:meth:`build_view`, cached).

        The cache, ``view``, is reset to None wherever a field the view depends on changes (the trial's
        iteration, budget, state, devices, pending move or preemption).
        """
        view = self.view
        if view is None:
            view = self.view = self.build_view(max_iterations)
        return view

    def build_view(self, max_iterations: int) -> TrialDemand:
        """The trial's :class:`~fluidsalus.trialgroup.planner.TrialDemand` now (uncached)."""
        state = self.state
        if state == QUEUED or self.preempt_pending:
            devices: tuple[int, ...] = ()
        else:
            devices = self.next_devices if self.next_devices is not None else self.devices
        budget = self.budget
        top = max_iterations if budget is None or budget > max_iterations else budget
        remaining = top - self.iteration  # remaining(), inlined: this runs for every trial that changed
        rec = self.rec
        return TrialDemand(self.tid, remaining if remaining > 0.0 else 0.0, rec.p_bytes, rec.t_bytes,
                           rec.data_parallel, devices, state == PAUSED, self.seq)


class SimLane:
    """A lane (or, for a static planner, one trial's process) on a GPU."""

    __slots__ = ("device", "lane_id", "ready", "current", "active", "demand", "members", "arrivals", "starting")

    def __init__(self, device: SimDevice, lane_id: int) -> None:
        self.device, self.lane_id = device, lane_id
        self.ready: list[SimTrial] = []
        self.current: SimTrial | None = None
        self.active = False
        self.demand = 0.0
        self.members = 0
        self.arrivals = itertools.count()
        self.starting = 0  # members not prefetched that have not begun: a prefetched trial waits for them


class SimDevice:
    """A virtual GPU."""

    __slots__ = ("index", "lm", "lanes", "n_active", "d_active", "mem_used", "private_lanes", "version",
                 "changed_at", "n_computing")

    def __init__(self, index: int, lm: LaneManager | None) -> None:
        self.index = index
        self.lm = lm
        self.lanes: dict[int, SimLane] = {}
        self.n_active = 0
        self.d_active = 0.0
        self.mem_used = 0  # static planners: bytes held by the processes on the GPU
        self.private_lanes = itertools.count(-1, -1)
        self.version = 0  # bumped whenever its lane manager admits or releases
        self.changed_at = -1.0  # when a trial last started or stopped computing here
        self.n_computing = 0  # trials computing here: running an iteration or ready for the next (kept by the engine)

    def computing(self) -> int:
        """Trials computing here now, counted from the lanes (tests check :attr:`n_computing` against it)."""
        return sum((lane.current is not None) + len(lane.ready) for lane in self.lanes.values())


@dataclass
class SimResult:
    """Figures of one simulated run.

    Attributes:
        planner: Planner name.
        makespan_s: Virtual time from the first group to the last trial's end.
        time_to_target_s: Virtual time until a result reached the target (None: never).
        mean_jct_s: Mean trial completion time (end minus creation).
        utilisation: Useful GPU work (each iteration's ``demand * alone time``) over ``gpus * makespan``.
        trials: Trials created.
        iterations: Trial-iterations simulated.
        best: Best metric value reported.
        ooms: Processes that crashed out of memory.
        moves: Moves and resizes between devices.
        starts: Trial starts and restores.
        wall_s: Seconds the simulation took on this machine.
        sim_iterations_per_s: ``iterations / wall_s``.
        extra: Planner-specific figures.
    """

    planner: str
    makespan_s: float
    time_to_target_s: float | None
    mean_jct_s: float
    utilisation: float
    trials: int
    iterations: int
    best: float | None
    ooms: int
    moves: int
    starts: int
    wall_s: float
    sim_iterations_per_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        """The JSON figures of the run."""
        out = {
            "makespan_s": round(self.makespan_s, 3),
            "time_to_target_s": None if self.time_to_target_s is None else round(self.time_to_target_s, 3),
            "mean_jct_s": round(self.mean_jct_s, 3),
            "utilisation": round(self.utilisation, 4),
            "trials": self.trials,
            "iterations": self.iterations,
            "best": self.best,
            "ooms": self.ooms,
            "moves": self.moves,
            "starts": self.starts,
            "sim_wall_s": round(self.wall_s, 3),
            "sim_iterations_per_s": round(self.sim_iterations_per_s, 1),
        }
        out.update(self.extra)
        return out


class Simulation:
    """One simulated tuning run.

    Args:
        strategy: The planner under test.
        workload: Trial records.
        searcher: The searcher (fresh; the run drives it to the end).
        max_iterations: Iterations after which a trial's trainable returns.
        hardware: The virtual cluster.
        target: Metric value of time-to-target (None: not measured).
        lane_policy: Policy of the lanes (waterfill), a name of :data:`fluidsalus.gpu.policies.POLICIES`.
    """

    def __init__(
        self,
        strategy: Strategy,
        workload: Workload,
        searcher: BaseSearcher,
        max_iterations: int,
        hardware: Hardware,
        target: float | None = None,
        lane_policy: str = DEFAULT_POLICY,
    ) -> None:
        self.strategy = strategy
        self.workload = workload
        self.searcher = searcher
        self.max_iterations = max_iterations
        self.hardware = hardware
        self.target = target
        self.policy = get_policy(lane_policy)
        self._policy_key = SIM_POLICY_KEYS.get(self.policy.name)
        self.metric = workload.metric
        self.sign = 1.0 if workload.mode == "max" else -1.0
        lane_capacity = hardware.gpu_memory - hardware.context_bytes
        check_records_fit(workload, hardware)
        self.devices = [
            SimDevice(i, LaneManager(lane_capacity, hardware.slots) if strategy.lanes else None)
            for i in range(hardware.gpus)
        ]
        self.trials: dict[str, SimTrial] = {}
        self._live: dict[str, SimTrial] = {}
        # Trials that paused at their budget since the last driver step: the only ones a static planner's step
        # releases (the step walked every live trial, and ASHA's are all live from the start: 20,000 trials ran
        # 5x slower per iteration than 1,000)
        self._paused_since: list[SimTrial] = []
        # Whether a prefetched trial waits through its lane neighbour's pause at the budget until the driver's next
        # step (the device host's ``hold_pauses``, which the executor's replay sets as the executor does)
        self.hold_pauses = False
        self.queue: list[tuple[int, int, SimTrial]] = []  # heap of (class, order, trial)
        self._queue_order = itertools.count()
        self._heap: list[tuple[float, int, int, Any, int]] = []
        self._seq = itertools.count()
        self._control_pending = False
        self._pow = [(1.0 - hardware.interference) ** max(0, n - 1) for n in range(4 * hardware.slots + 64)]
        self.now = 0.0
        self.iterations = 0
        self.colocated_sum = 0  # sum over iterations of the co-running trials on the home GPU
        self.multi_gpu_iterations = 0
        self.useful = 0.0
        self.best: float | None = None
        self.time_to_target: float | None = None
        self.ooms = 0
        self.moves = 0
        self.starts = 0
        self._on_result = searcher.on_result
        self._slots = hardware.slots
        strategy.bind(self)
        # Only a strategy that overrides observe() is told iteration times (the static ones ignore them).
        self._observe = strategy.observe if type(strategy).observe is not Strategy.observe else None

    # ------------------------------------------------------------------ queue

    def enqueue(self, trial: SimTrial, cls: int) -> None:
        """Put a trial in the start queue (class :data:`Q_RESUME`, :data:`Q_NEW` or :data:`Q_RETRY`)."""
        trial.state = QUEUED
        trial.view = None
        heapq.heappush(self.queue, (cls, next(self._queue_order), trial))

    def pop_queue(self) -> SimTrial:
        """Take the next queued trial (static planners)."""
        while True:
            trial = heapq.heappop(self.queue)[2]
            if trial.state == QUEUED and not trial.resident:
                return trial

    def live(self) -> Iterator[SimTrial]:
        """Trials created and not ended, in creation order."""
        return iter(list(self._live.values()))

    def live_trials(self) -> ValuesView[SimTrial]:
        """The live trials, in creation order, without a copy (do not end or create trials while iterating)."""
        return self._live.values()

    # ------------------------------------------------------------------ events

    def _push(self, at: float, kind: int, trial: SimTrial | None, epoch: int = 0) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), kind, trial, epoch))

    def _dirty(self) -> None:
        if not self._control_pending:
            self._control_pending = True
            self._push(self.now + self.hardware.driver_latency_s, EV_CONTROL, None)

    # ------------------------------------------------------------------ lanes

    def _kick(self, lane: SimLane, now: float) -> None:
        """Start the lane's next iteration if it is free and has a ready trial; keep the GPU's active set, and
        re-price the GPU's running iterations when it changes."""
        if lane.current is not None:
            return
        dev = lane.device
        ready = lane.ready
        trial = None
        if len(ready) == 1:  # the common case, inlined: this runs for every iteration
            trial = ready[0]
            if trial.began or not trial.prefetched or not (lane.starting or self._pause_unanswered(lane)):
                ready.pop()
            else:
                trial = None
        elif ready:
            trial = self._next(lane)
        if trial is None:
            if lane.active:
                lane.active = False
                dev.n_active -= 1
                dev.d_active -= lane.demand
                lane.demand = 0.0
                self._reprice(dev, now)
            return
        if not trial.began:
            trial.began = True
            if not trial.prefetched:
                lane.starting -= 1
        demand = trial.eff_demand
        changed = False
        if not lane.active:
            lane.active = True
            dev.n_active += 1
            dev.d_active += demand
            changed = True
        elif lane.demand != demand:
            dev.d_active += demand - lane.demand
            changed = True
        lane.demand = demand
        base = trial.const_base if trial.const_base is not None else trial.rec.base_time(trial.iteration + 1)
        lane.current = trial
        trial.iter_start = trial.iter_last = now
        trial.iter_n = dev.n_active
        trial.iter_left = base * trial.dp
        trial.iter_mixed = False
        if changed:
            self._reprice(dev, now)  # prices this iteration too
            return
        d_sum = dev.d_active
        rate = trial.iter_rate = trial.cap / (d_sum if d_sum > 1.0 else 1.0) * self._pow[dev.n_active]
        trial.epoch += 1
        heapq.heappush(self._heap, (now + trial.iter_left / rate, next(self._seq), EV_ITER, trial, trial.epoch))

    def _next(self, lane: SimLane) -> SimTrial | None:
        """Take the trial the lane runs next from its two or more ready ones, as the device host does
        (``DeviceHost._grant_locked``; :meth:`_kick` inlines the case of one): by the lane policy, a prefetched trial
        that has not begun only when no other trial is ready, none that is not prefetched is still starting in
        the lane and (pauses held) none is paused at its budget until the driver's next step (None: the lane
        waits)."""
        ready = lane.ready
        eligible = [t for t in ready if not (t.prefetched and not t.began)]
        if not eligible:
            if lane.starting or self._pause_unanswered(lane):
                return None
            eligible = ready
        trial = eligible[0] if len(eligible) == 1 else self.pick(eligible)
        ready.remove(trial)
        return trial

    def _pause_unanswered(self, lane: SimLane) -> bool:
        """While pauses are held (:attr:`hold_pauses`): whether a trial of ``lane`` paused at its budget since the
        driver's last step, which answers it as the executor's next poll does (``DeviceHost.poll``)."""
        return self.hold_pauses and any(t.lane is lane and t.state == PAUSED for t in self._paused_since)

    @staticmethod
    def view(trial: SimTrial) -> TrialView:
        """What the lane policy knows of a ready trial: the view the device host builds (``DeviceHost._view``).

        Its compute time and iterations count since it joined its lane (the host keeps them per admission, so
        a trial that moved starts unprofiled again); ``sec_per_iter`` is their ratio (None before its first
        iteration there); its remaining iterations are to its group's budget (None: open-ended, as the host
        does not know ``max_iterations``). Sim trials have no priority.

        Args:
            trial: A trial ready in a lane.

        Returns:
            Its view.
        """
        n = trial.lane_iterations
        budget = trial.budget
        remaining = None if budget is None else max(0.0, budget - trial.iteration)
        return TrialView(trial.tid, trial.arrival, trial.ready_since, trial.used_s, n, remaining,
                         trial.used_s / n if n else None)

    def pick(self, ready: list[SimTrial]) -> SimTrial:
        """The ready trial a lane runs next, by the lane policy (over :meth:`view`)."""
        key = self._policy_key
        if key is not None:
            return min(ready, key=key)
        chosen = choose(self.policy, [self.view(t) for t in ready])
        return next(t for t in ready if t.tid == chosen)

    def _reprice(self, dev: SimDevice, now: float) -> None:
        """The GPU's set of running trials changed: every iteration in flight there continues at its new speed
        (processor sharing); its completion event is rescheduled."""
        d_sum = dev.d_active
        share = 1.0 / (d_sum if d_sum > 1.0 else 1.0) * self._pow[dev.n_active]
        heap, seq = self._heap, self._seq
        for lane in dev.lanes.values():
            trial = lane.current
            if trial is None:
                continue
            if trial.iter_last < now:
                trial.iter_left -= (now - trial.iter_last) * trial.iter_rate
                trial.iter_last = now
                trial.iter_mixed = True
            rate = trial.iter_rate = trial.cap * share
            trial.epoch += 1
            left = trial.iter_left
            heapq.heappush(heap, (now + (left if left > 0.0 else 0.0) / rate, next(seq), EV_ITER, trial, trial.epoch))

    def _make_ready(self, trial: SimTrial, now: float) -> None:
        trial.state = RUNNING
        trial.view = None
        trial.ready_since = now
        lane = trial.lane
        assert lane is not None
        dev = lane.device
        dev.changed_at = now
        dev.n_computing += 1
        lane.ready.append(trial)
        self._kick(lane, now)

    def _unready(self, trial: SimTrial, now: float) -> None:
        lane = trial.lane
        if lane is not None and trial in lane.ready:
            lane.device.changed_at = now
            lane.device.n_computing -= 1
            lane.ready.remove(trial)
            self._kick(lane, now)

    def _join_lane(self, trial: SimTrial, dev: SimDevice, lane_id: int) -> None:
        lane = dev.lanes.get(lane_id)
        if lane is None:
            lane = dev.lanes[lane_id] = SimLane(dev, lane_id)
        lane.members += 1
        trial.lane = lane
        trial.arrival = next(lane.arrivals)
        trial.used_s = 0.0  # the device host counts a trial's time and iterations per admission
        trial.lane_iterations = 0
        trial.began = False
        if not trial.prefetched:
            lane.starting += 1

    def _leave_lane(self, trial: SimTrial, now: float) -> None:
        lane = trial.lane
        if lane is None:
            return
        if trial in lane.ready:
            lane.device.changed_at = now
            lane.device.n_computing -= 1
            lane.ready.remove(trial)
        trial.lane = None
        lane.members -= 1
        if not trial.began and not trial.prefetched:
            lane.starting -= 1
        self._kick(lane, now)
        if lane.members <= 0 and lane.current is None:
            lane.device.lanes.pop(lane.lane_id, None)

    # ------------------------------------------------------------------ placement (called by strategies)

    def start_process(self, trial: SimTrial, gpu: int, share: float, now: float) -> None:
        """Start a trial as its own process on ``gpu`` (static planners): out of memory if it does not fit.

        Args:
            trial: A queued trial.
            gpu: Its GPU.
            share: Its MPS share (1.0: none).
            now: Virtual time.
        """
        hw = self.hardware
        dev = self.devices[gpu]
        need = trial.rec.p_bytes + trial.rec.t_bytes + hw.context_bytes
        trial.devices = (gpu,)
        trial.view = None
        trial.resident = True
        trial.dp = 1.0
        trial.cap = min(1.0, share / trial.rec.demand)
        trial.eff_demand = min(trial.rec.demand, share)
        trial.state = STARTING
        trial.view = None
        trial.epoch += 1
        self.starts += 1
        trial.attempts += 1
        if dev.mem_used + need > hw.gpu_memory:
            self._push(now + hw.startup_s, EV_OOM, trial, trial.epoch)
            return
        dev.mem_used += need
        self._join_lane(trial, dev, next(dev.private_lanes))
        self._push(now + hw.startup_s, EV_READY, trial, trial.epoch)

    def _admit(self, trial: SimTrial, devices: tuple[int, ...], now: float) -> tuple[int, ...]:
        """Admit a trial's memory on its devices' lane managers; return the devices it is placed on (its home
        may queue it; an extra device that does not admit it is dropped)."""
        rec = trial.rec
        placed: list[int] = []
        for i, d in enumerate(devices):
            lm = self.devices[d].lm
            assert lm is not None
            self.devices[d].version += 1
            try:
                placement = lm.admit(trial.tid, rec.p_bytes, rec.t_bytes)
            except TrialTooLargeError:
                raise SimulationError(f"trial {trial.tid} needs more memory than a GPU has") from None
            if placement is None:
                if i == 0:
                    trial.waiting_admission.add(d)
                    placed.append(d)
                else:
                    for admitted in lm.leave(trial.tid):
                        self._on_admitted(self.devices[d], admitted.trial_id, admitted.lane_id, now)
                continue
            placed.append(d)
            if i == 0:
                self._join_lane(trial, self.devices[d], placement.lane_id)
        return tuple(placed)

    def _set_allocation(self, trial: SimTrial, devices: tuple[int, ...]) -> None:
        trial.devices = devices
        trial.view = None
        trial.resident = True
        k = len(devices)
        trial.dp = dp_factor(trial.rec.serial_fraction, k, self.hardware.comm_fraction)
        trial.cap = 1.0
        trial.eff_demand = 1.0 if k > 1 else trial.rec.demand  # data-parallel trials own whole GPUs
        trial.probe_pending = k > 1

    def start_lanes(self, trial: SimTrial, devices: tuple[int, ...], now: float, prefetched: bool = False) -> None:
        """Start (or restore) a queued trial on ``devices`` in lanes (waterfill); ``prefetched``: the executor's
        prefetch, which waits in its lane until the lane would idle (see :meth:`_next`)."""
        if trial.state != QUEUED:
            return
        trial.prefetched = prefetched
        trial.epoch += 1
        self._set_allocation(trial, self._admit(trial, devices, now))
        trial.state = STARTING
        trial.view = None
        self.starts += 1
        trial.attempts += 1
        if not trial.waiting_admission:
            self._push(now + self.hardware.startup_s, EV_READY, trial, trial.epoch)

    def _on_admitted(self, dev: SimDevice, tid: str, lane_id: int, now: float) -> None:
        """A trial the lane manager had queued got a lane: its start (or move) proceeds."""
        trial = self.trials[tid]
        trial.waiting_admission.discard(dev.index)
        if trial.devices and trial.devices[0] == dev.index:
            self._join_lane(trial, dev, lane_id)
            if not trial.waiting_admission and trial.state in (STARTING, MOVING):
                cost = self.hardware.startup_s if trial.state == STARTING else self.hardware.move_s
                self._push(now + cost, EV_READY, trial, trial.epoch)

    def _release(self, trial: SimTrial, now: float) -> None:
        """Free a trial's memory, lane and GPU share on all its devices."""
        if not trial.resident:
            return
        self._leave_lane(trial, now)
        if self.strategy.lanes:
            for d in trial.devices:
                dev = self.devices[d]
                assert dev.lm is not None
                dev.version += 1
                if trial.tid in dev.lm:
                    for admitted in dev.lm.leave(trial.tid):
                        self._on_admitted(dev, admitted.trial_id, admitted.lane_id, now)
                    self._spread(dev, now)
            trial.waiting_admission.clear()
        else:
            for d in trial.devices:
                self.devices[d].mem_used -= trial.rec.p_bytes + trial.rec.t_bytes + self.hardware.context_bytes
            self.strategy.released(trial)
        trial.resident = False
        trial.devices = ()
        trial.view = None

    def _spread(self, dev: SimDevice, now: float) -> None:
        """Work conservation after a trial left ``dev`` (``DeviceHost._spread_locked``): while the device runs
        fewer lanes than its ``max_lanes``, a trial waiting for its turn in a shared lane (ready, not its lane's
        current trial: at an iteration boundary, or not begun) takes a lane of its own
        (:meth:`~fluidsalus.gpu.lanes.LaneManager.split`), lanes in creation order, each lane's trials in the
        order they became ready. This is what a stop racing its replacement's admission leaves: the newcomer
        shares a lane (every lane was open), then the stopped trial's lane dissolves; without the spread a slot
        would idle until the next admission. As on the device, the moved trial keeps its turn counts (its
        memory stays resident; only its turn moves) and begins at once in its new lane, prefetched or not."""
        lm = dev.lm
        if lm is None or lm.lane_count >= lm.max_lanes:
            return
        for lane in list(dev.lanes.values()):
            for trial in sorted(lane.ready, key=lambda t: t.ready_since):
                if lm.lane_count >= lm.max_lanes:
                    return
                placement = lm.split(trial.tid)
                if placement is None:
                    continue
                lane.ready.remove(trial)
                lane.members -= 1
                unbegun = not trial.began and not trial.prefetched
                if unbegun:
                    lane.starting -= 1
                new = dev.lanes[placement.lane_id] = SimLane(dev, placement.lane_id)
                new.members = 1
                new.starting = 1 if unbegun else 0
                trial.lane = new
                trial.arrival = next(new.arrivals)
                new.ready.append(trial)
                self._kick(new, now)
            self._kick(lane, now)  # (a trial it held back may be free to begin now)

    def move(self, trial: SimTrial, devices: tuple[int, ...], now: float) -> None:
        """Move a placed trial to ``devices``: now if it is at an iteration boundary, else at the next one."""
        if trial.state == ENDED:
            return
        if trial.state == QUEUED:
            self.start_lanes(trial, devices, now)
            return
        if trial.waiting_admission:  # still in a device's lane queue: go elsewhere at once
            state = trial.state
            self._release(trial, now)
            if state == STARTING:  # it never started: a start there, not a move
                trial.state = QUEUED
                trial.view = None
                self.start_lanes(trial, devices, now)
            else:
                self._do_move(trial, devices, now)
            return
        current = trial.lane.current if trial.lane is not None else None
        if trial.state in (STARTING, MOVING) or current is trial:
            trial.next_devices = devices
            trial.view = None
            return
        self._do_move(trial, devices, now)

    def withdraw(self, trial: SimTrial, devices: tuple[int, ...] | None, now: float) -> bool:
        """The executor's withdrawal (``DeviceHost.withdraw``): take back a placed trial that has not begun (no
        iteration done, never its lane's current trial) and start it on ``devices``, or queue it (None).

        Returns:
            Whether it was taken back (a trial that has begun stays where it is).
        """
        if trial.state not in (STARTING, RUNNING) or trial.iteration > 0:
            return False
        if trial.lane is not None and trial.lane.current is trial:
            return False
        self._unready(trial, now)
        self._release(trial, now)
        trial.state = QUEUED
        trial.view = None
        trial.epoch += 1
        if devices:
            self.start_lanes(trial, devices, now)
        else:
            self.enqueue(trial, Q_NEW)
        return True

    def _do_move(self, trial: SimTrial, devices: tuple[int, ...], now: float) -> None:
        paused = trial.state == PAUSED
        self._release(trial, now)
        trial.prefetched = False  # a move starts a new attempt, never a prefetch
        trial.epoch += 1
        trial.next_devices = None
        trial.view = None
        self._set_allocation(trial, self._admit(trial, devices, now))
        self.moves += 1
        if paused:
            trial.cold = True  # restores from its checkpoint when promoted
            return
        trial.state = MOVING
        trial.view = None
        if not trial.waiting_admission:
            self._push(now + self.hardware.move_s, EV_READY, trial, trial.epoch)

    def preempt(self, trial: SimTrial, now: float) -> None:
        """Checkpoint a placed trial and queue it (at its next boundary if it is computing)."""
        if trial.state in (ENDED, QUEUED):
            return
        current = trial.lane.current if trial.lane is not None else None
        if trial.state in (STARTING, MOVING) or current is trial:
            trial.preempt_pending = True
            trial.view = None
            return
        self._do_preempt(trial, now)

    def _do_preempt(self, trial: SimTrial, now: float) -> None:
        paused = trial.state == PAUSED
        self._release(trial, now)
        trial.epoch += 1
        trial.preempt_pending = False
        trial.next_devices = None
        trial.view = None
        trial.cold = True
        if paused:
            return  # stays PAUSED, off-device, until promoted
        self.enqueue(trial, Q_RESUME)

    # ------------------------------------------------------------------ trial life

    def _end(self, trial: SimTrial, now: float, reason: str) -> None:
        if trial.state == ENDED:
            return
        self._unready(trial, now)
        self._release(trial, now)
        trial.state = ENDED
        trial.view = None
        trial.epoch += 1
        trial.ended_at = now
        trial.end_reason = reason
        self._live.pop(trial.tid, None)
        self.searcher.on_trial_complete(trial.tid, trial.last, error=False)
        self._dirty()

    def _boundary(self, trial: SimTrial, now: float) -> bool:
        """Apply a pending move or preemption at an iteration boundary; True if the trial left its lane."""
        if trial.preempt_pending:
            self._do_preempt(trial, now)
            return True
        if trial.next_devices is not None:
            target = trial.next_devices
            if target == trial.devices:
                trial.next_devices = None
                trial.view = None
                return False
            self._do_move(trial, target, now)
            return True
        return False

    def _on_iter(self, trial: SimTrial, now: float) -> None:
        lane = trial.lane
        lane.current = None  # type: ignore[union-attr]
        duration = now - trial.iter_start
        trial.used_s += duration
        trial.lane_iterations += 1
        iteration = trial.iteration = trial.iteration + 1
        trial.view = None
        self.iterations += 1
        self.colocated_sum += trial.iter_n
        if len(trial.devices) > 1:
            self.multi_gpu_iterations += 1
        rec = trial.rec
        base = trial.const_base
        self.useful += rec.demand * (base if base is not None else rec.base_time(iteration))
        dev = lane.device  # type: ignore[union-attr]
        observe = self._observe
        if observe is not None and (dev.changed_at <= trial.ready_since or iteration == 1):
            # What the executor reports (fluidsalus/trialgroup/executor.py, _observe): the time since the trial's
            # previous report (time_this_iter_s: its iteration and any wait for its lane's turn), with the number
            # of trials computing on its home device, at most its slots. An iteration during which that number
            # changed measures no single allocation and is not reported (except as a trial's first measurement).
            n = dev.n_computing
            observe(trial, now - trial.ready_since, len(trial.devices), n if n < self._slots else self._slots)
            if trial.probe_pending:  # its new allocation is measured: the planner may take the next step
                trial.probe_pending = False
                self._dirty()
        value = rec.value(iteration)
        best = self.best
        if best is None or (value > best if self.sign > 0 else value < best):
            self.best = value
            target = self.target
            if target is not None and self.time_to_target is None and self.sign * value >= self.sign * target:
                self.time_to_target = now
        result = {self.metric: value, "training_iteration": iteration}
        trial.last = result
        budget = trial.budget
        at_budget = budget is not None and iteration >= budget
        if at_budget:
            trial.state = PAUSED
            self._paused_since.append(trial)
            trial.view = None
        if self._on_result(trial.tid, result) is _STOP or trial.stop_pending:
            self._end(trial, now, "stopped")
        elif iteration >= self.max_iterations:
            self._end(trial, now, "completed")
        elif at_budget:
            self._kick(lane, now)  # type: ignore[arg-type]
            self._dirty()
            if trial.preempt_pending or trial.next_devices is not None:
                self._boundary(trial, now)
        elif (trial.preempt_pending or trial.next_devices is not None) and self._boundary(trial, now):
            pass
        else:
            trial.ready_since = now
            if lane.ready or lane.demand != trial.eff_demand:  # type: ignore[union-attr]
                lane.ready.append(trial)  # type: ignore[union-attr]
                self._kick(lane, now)  # type: ignore[arg-type]
                return
            # Alone in its lane, which stays busy at the same demand: _kick would pick it again and change no
            # speed on the GPU, so its next iteration starts here.
            lane.current = trial  # type: ignore[union-attr]
            base = trial.const_base if trial.const_base is not None else rec.base_time(iteration + 1)
            trial.iter_start = trial.iter_last = now
            trial.iter_n = dev.n_active
            left = trial.iter_left = base * trial.dp
            trial.iter_mixed = False
            d_sum = dev.d_active
            rate = trial.iter_rate = trial.cap / (d_sum if d_sum > 1.0 else 1.0) * self._pow[dev.n_active]
            epoch = trial.epoch = trial.epoch + 1
            heapq.heappush(self._heap, (now + left / rate, next(self._seq), EV_ITER, trial, epoch))
            return
        dev.changed_at = now  # it stopped computing here
        dev.n_computing -= 1
        if lane.current is None:  # type: ignore[union-attr]
            self._kick(lane, now)  # type: ignore[arg-type]

    def _on_ready(self, trial: SimTrial, now: float) -> None:
        trial.cold = False
        if trial.stop_pending:
            self._end(trial, now, "stopped")
            return
        if self._boundary(trial, now):
            return
        if trial.state == STARTING or trial.state == MOVING:
            if trial.budget is not None and trial.iteration >= trial.budget:
                trial.state = PAUSED  # promoted to a budget it already reached: nothing to run
                self._paused_since.append(trial)
                trial.view = None
                self._dirty()
                return
            self._make_ready(trial, now)

    def _on_oom(self, trial: SimTrial, now: float) -> None:
        """A static planner's process ran out of memory at start: it crashes and is retried later."""
        self.ooms += 1
        trial.resident = False
        self.strategy.released(trial)
        trial.devices = ()
        trial.view = None
        trial.epoch += 1
        if trial.stop_pending:
            trial.state = QUEUED
            trial.view = None
            self._end(trial, now, "stopped")
            return
        trial.cold = trial.iteration > 0
        self.enqueue(trial, Q_RETRY)
        self._dirty()

    # ------------------------------------------------------------------ the driver

    def _control(self, now: float) -> None:
        """One driver step: the searcher's groups and stops, then the planner."""
        self._control_pending = False
        searcher = self.searcher
        for group in searcher.next_groups():
            for config in group.configs:
                seq = len(self.trials)
                tid = f"t{seq:05d}"
                trial = SimTrial(tid, seq, self.workload.record(seq), group.budget, now)
                self.trials[tid] = trial
                self._live[tid] = trial
                searcher.on_trial_add(tid, group.group_id, config)
                self.enqueue(trial, Q_NEW)
            for tid in group.trial_ids:
                trial = self.trials[tid]
                trial.budget = group.budget
                trial.view = None
                if trial.state != PAUSED:
                    raise SimulationError(f"the searcher promoted {tid} while it is {STATE_NAMES[trial.state]}")
                if trial.resident and trial.waiting_admission:
                    trial.state = MOVING  # its lane manager lets it in later; _on_admitted starts it
                    trial.view = None
                    trial.epoch += 1
                elif trial.resident and not trial.cold:
                    self._make_ready(trial, now)
                elif trial.resident:  # moved while paused: restore on its new devices first
                    trial.state = MOVING
                    trial.view = None
                    trial.epoch += 1
                    self._push(now + self.hardware.move_s, EV_READY, trial, trial.epoch)
                else:
                    trial.cold = True
                    self.enqueue(trial, Q_RESUME)
        for tid in searcher.collect_stops():
            trial = self.trials[tid]
            if trial.state in (PAUSED, QUEUED) or (trial.prefetched and not trial.began):
                self._end(trial, now, "stopped")  # (a prefetched one that has not begun ends without running)
            elif trial.state != ENDED:
                trial.stop_pending = True
        if not self.strategy.keeps_paused:
            for trial in self._paused_since:
                if trial.state == PAUSED and trial.resident:
                    self._release(trial, now)
                    trial.cold = True
        # pauses that stand after the step: a prefetched trial held behind one may begin (hold_pauses)
        answered = [t.lane for t in self._paused_since if t.state == PAUSED and t.lane is not None] \
            if self.hold_pauses else []
        self._paused_since.clear()
        self.strategy.place(now)
        for lane in answered:
            self._kick(lane, now)

    def _finish(self, now: float) -> bool:
        """Nothing is scheduled: end the run (True) or let the driver act once more (False)."""
        computing = any(t.state != PAUSED for t in self._live.values())
        if self.searcher.is_finished() and not computing:
            for trial in list(self._live.values()):
                self._end(trial, now, "stopped")
            return not self._heap or all(e[2] == EV_CONTROL for e in self._heap)
        return False

    def run(self) -> SimResult:
        """Run to the end.

        Returns:
            The run's figures.

        Raises:
            SimulationError: The run stalls (the searcher proposes nothing while nothing can run).
        """
        started = time.perf_counter()
        heap = self._heap
        pop = heapq.heappop
        self._control(0.0)
        on_iter = self._on_iter
        processed = 0
        stalls = 0
        while True:
            while heap:
                at, _, kind, trial, epoch = pop(heap)
                self.now = at
                processed += 1
                if kind == EV_ITER:
                    if epoch == trial.epoch:
                        on_iter(trial, at)
                elif kind == EV_CONTROL:
                    self._control(at)
                elif epoch == trial.epoch:
                    if kind == EV_READY:
                        self._on_ready(trial, at)
                    else:
                        self._on_oom(trial, at)
                if processed > MAX_EVENTS:
                    raise SimulationError(f"more than {MAX_EVENTS} events: the run does not end")
            if self._finish(self.now):
                break
            self._control(self.now)
            if heap:
                stalls = 0
                continue
            stalls += 1
            if self._finish(self.now):
                break
            if stalls > 1:
                states = {STATE_NAMES[s]: sum(1 for t in self._live.values() if t.state == s) for s in range(6)}
                raise SimulationError(f"the run stalled at t={self.now:.1f}s: nothing can run; trials: {states}")
        wall = time.perf_counter() - started
        return self._result(wall)

    def critical_path_bound(self) -> float:
        """A lower bound on the makespan of any planner that runs these trials to the iterations they ran here: the
        longest trial's start-up plus its iterations alone on the number of whole GPUs that runs them fastest
        (data-parallel trials; :func:`~fluidsalus.sim.model.dp_factor`), with no co-location, no queueing and no
        wait for the rest of its group. What a planner can gain over another is capped by it."""
        hw = self.hardware
        best_dp: dict[float, float] = {}
        bound = 0.0
        for t in self.trials.values():
            rec = t.rec
            if not isinstance(rec.sec_per_iter, tuple):
                work = rec.sec_per_iter * t.iteration
            else:
                work = sum(rec.base_time(i) for i in range(1, t.iteration + 1))
            factor = 1.0
            if rec.data_parallel:
                factor = best_dp.get(rec.serial_fraction)
                if factor is None:
                    factor = best_dp[rec.serial_fraction] = best_dp_factor(rec.serial_fraction, hw.gpus,
                                                                           hw.comm_fraction)
            bound = max(bound, hw.startup_s + work * factor)
        return bound

    def _result(self, wall: float) -> SimResult:
        ended = [t for t in self.trials.values() if t.ended_at is not None]
        makespan = max((t.ended_at for t in ended), default=0.0)  # type: ignore[type-var]
        jct = sum(t.ended_at - t.created for t in ended) / len(ended) if ended else 0.0  # type: ignore[operator]
        util = self.useful / (self.hardware.gpus * makespan) if makespan > 0 else 0.0
        extra: dict[str, Any] = {
            "mean_colocation": round(self.colocated_sum / self.iterations, 3) if self.iterations else 0.0,
            "multi_gpu_iterations": self.multi_gpu_iterations,
            "critical_path_bound_s": round(self.critical_path_bound(), 3),
        }
        plans = getattr(self.strategy, "plans", None)
        if plans is not None:
            extra["plans"] = plans
        return SimResult(
            planner=self.strategy.name,
            makespan_s=makespan,
            time_to_target_s=self.time_to_target,
            mean_jct_s=jct,
            utilisation=util,
            trials=len(self.trials),
            iterations=self.iterations,
            best=None if self.best is None else round(self.best, 6),
            ooms=self.ooms,
            moves=self.moves,
            starts=self.starts,
            wall_s=wall,
            sim_iterations_per_s=self.iterations / wall if wall > 0 else math.inf,
            extra=extra,
        )
