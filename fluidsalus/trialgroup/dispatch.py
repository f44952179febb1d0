"""The executor's dispatch rules, free of Ray and of the store: what the planner is told about a trial, which of
a plan's changes the executor carries out, and which queued trials a full device takes ahead (the prefetch).

:class:`~fluidsalus.trialgroup.executor.Executor` applies them to the live run, and the simulator's replay of the
executor (``fluidsalus/sim/trace.py``, :class:`~fluidsalus.sim.trace.PlannerExecutorStrategy`) applies the same
functions to its virtual trials, so the two cannot drift apart. ``tests/test_executor_planner.py`` calls them alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from fluidsalus.gpu.lanes import LaneView
from fluidsalus.session import result_totals
from fluidsalus.store import PAUSED
from fluidsalus.trialgroup.planner import KEEP, MOVE, Plan, TrialDemand
from fluidsalus.trialgroup.queue import remaining_budget
from fluidsalus.trialgroup.trial import Trial

#: Queued trials submitted to a device that already runs as many computing trials as it has slots, so that it
#: starts its next trial without waiting a driver round trip when a slot frees. One hides that round trip; more
#: would only commit more trials to a device before the planner knows where a slot frees first.
PREFETCH_PER_DEVICE = 1

# Why a planned change was not applied (``plan_refused`` events).
REFUSED_NO_CHECKPOINT = "no checkpoint"  # it reported since its start and could only restart from scratch
REFUSED_PAUSED = "paused"  # paused at its budget: it restarts from its checkpoint when promoted instead
REFUSED_LIMIT = "max_concurrent_trials"  # the run's concurrency limit is reached
REFUSED_MIN_DEVICES = "min_workers"  # fewer devices than its data-parallel trainable runs on


def checkpoint_iteration(path: str) -> int:
    """The iteration a persisted checkpoint belongs to, from its folder name ``checkpoint_<iteration>``."""
    return int(os.path.basename(path).rsplit("_", 1)[-1])



def resume_from(trial: Trial, checkpoint: Mapping[str, Any] | None) -> None:
    """Set where the trial's next attempt resumes: a stored checkpoint (a row of ``ExperimentStore.checkpoints``,
    whose counters and Ray's running totals the attempt continues), or scratch (None).

    Args:
        trial: The trial.
        checkpoint: The checkpoint row, or None.
    """
    if checkpoint is None:
        trial.checkpoint_path, trial.last_iteration, trial.time_total_s, trial.checkpoint_totals = None, 0, 0.0, {}
        return
    metrics = checkpoint["metrics"] or {}
    trial.checkpoint_path, trial.last_iteration = checkpoint["path"], int(checkpoint["iteration"])
    trial.time_total_s = float(metrics.get("time_total_s", 0.0))
    trial.checkpoint_totals = result_totals(metrics)


def may_not_have_begun(trial: Trial, withdrawal_asked: bool) -> bool:
    """Whether the trial's attempt may not have begun on its device, so that the device can still give it back
    (a withdrawal): it has no checkpoint and reported nothing, and its device was not asked for it already (then
    it had begun, or it is on its way back to the queue).

    Args:
        trial: The trial.
        withdrawal_asked: Its device was asked to give this attempt back.
    """
    return trial.checkpoint_path is None and trial.last_iteration == 0 and not withdrawal_asked


def trial_demand(trial: Trial, time_attr: str, estimate: tuple[int, int],
                 workers: tuple[int, int] | None = None, withdrawal_asked: bool = False,
                 turn: float = 0.0) -> TrialDemand:
    """What the planner is told about one live trial.

    Args:
        trial: The trial (queued, placed, paused, or restarting on the devices the planner kept for it).
        time_attr: The result key budgets are measured in.
        estimate: ``(P, T)`` bytes assumed until the trial's device has recorded an estimate.
        workers: ``(min_workers, max_workers)`` its trainable declared as data-parallel, or None.
        withdrawal_asked: Its device was asked to give this attempt back (and has not yet, or would not: it had
            begun). It is then not restartable without a checkpoint, as :func:`plan_actions` sees it.
        turn: Its place in its searcher's turns (``BaseSearcher.turn_key``; 0 when the trials take no turns).

    Returns:
        The demand: remaining budget, estimates, planned devices, paused flag, arrival order, the
        data-parallel bounds (``min_devices``/``max_devices``), and the iterations a restart would run again
        (``since_checkpoint``: its last iteration less its checkpoint's, all of them without a checkpoint),
        and whether it may be restarted at all (``restartable``: not once it reported without a checkpoint), and its
        ``turn``.
    """
    p = trial.p_bytes if trial.p_bytes is not None else estimate[0]
    t = trial.t_bytes if trial.t_bytes is not None else estimate[1]
    extra: dict[str, Any] = {}
    if workers is not None:
        extra = {"min_devices": workers[0], "max_devices": workers[1]}
    checkpointed = checkpoint_iteration(trial.checkpoint_path) if trial.checkpoint_path else 0
    return TrialDemand(trial.trial_id, remaining_budget(trial, time_attr), p, t,
                       data_parallel=workers is not None and workers[1] > 1, devices=tuple(trial.devices),
                       paused=trial.status == PAUSED, seq=trial.seq,
                       since_checkpoint=max(0, trial.last_iteration - checkpointed),
                       # what plan_actions carries out: a move from a checkpoint, or a withdrawal
                       restartable=(trial.checkpoint_path is not None and trial.reads_checkpoints)
                       or may_not_have_begun(trial, withdrawal_asked),
                       turn=turn, **extra)


def restarts_in_place(others_computing: int, slots: int) -> bool:
    """Whether a trial that restarts on its own device (a retry after a failure, PBT's exploit) keeps it, so that
    the next plan keeps it there (it starts at once), rather than waiting in the queue for the planner to place it.

    It keeps it only while the device computes fewer other trials than it has slots. A trial prefetched there
    (:func:`choose_prefetch`) begins as soon as the restarting one's lane would idle, and takes its slot: kept
    there, the restart began beside it, past the device's slots, and the two took the slot in turns to their ends
    (neither can leave once it has reported without a checkpoint), while a device that freed or joined meanwhile
    idled (a run of two 1-slot devices that began on its warm one: twice as long). Queued, the planner places it
    where a slot is free, or it is prefetched behind a running trial, where it waits without running and can still
    be withdrawn to a device that frees.

    Args:
        others_computing: Trials computing on its device now besides it (prefetched ones included).
        slots: The device's compute slots.
    """
    return others_computing < slots


class TrialState(NamedTuple):
    """What :func:`plan_actions` needs to know of a trial besides the plan.

    Attributes:
        placed_on: Devices its current attempt runs on; empty when it is not submitted (queued, or restarting).
        computing: Not paused at its budget.
        can_restart: It has a checkpoint: a restart loses at most the iterations after it. (A trial that has
            reported nothing yet may still have computed: the driver sees its results a round trip late, so
            only a checkpoint makes a move safe.)
        unbegun: It has no checkpoint and has reported nothing in this attempt: it may not have begun, and its
            device can tell (a planned move or preemption of it becomes a withdrawal).
        moving: A move is under way (its stop was sent; it restarts on its planned devices when it ends).
        busy: It is being stopped for another reason (a searcher's stop, an exploit, the end of the run): the
            plan leaves it alone.
        min_devices: Fewest devices it runs on (a data-parallel trainable's ``min_workers``).
        stalled: The run is stalled (:func:`is_stalled`): no trial computes, and a trial waits for memory that
            trials paused at their budget, or waiting themselves, hold. A planned move or preemption of this trial
            is then carried out even without a checkpoint (it restarts from scratch: at once on its new device
            after a move, and, if it had reached its budget, only when its searcher promotes it), since nothing
            else would ever free that memory. A trial paused at its budget is still never moved (it would run
            nothing there); the planner preempts it instead.
    """

    placed_on: tuple[int, ...]
    computing: bool = True
    can_restart: bool = False
    unbegun: bool = False
    moving: bool = False
    busy: bool = False
    min_devices: int = 1
    stalled: bool = False


#: Blame, from deaths of a trial's device while it computed and got no further than at the first of them, that
#: counts as one failure of the trial (retried while ``max_failures`` allows, else it errors). Each such death
#: blames the trials computing at it in equal shares: a process runs the trials of its device, and any of them
#: may have ended it. A device's death is otherwise not its trials' failure (a neighbour, the machine, an
#: operator or a chaos test may have killed the process), so one death alone never counts; but a trial that ends
#: its own process (``os._exit``, a segfault, the kernel's out-of-memory killer) again at the same point was
#: restarted for ever. Two such deaths while it computed alone are that loop (with ``n`` trials computing beside
#: each other at every death, ``2 * n`` of them).
DEATHS_PER_FAILURE = 2


def charge_death(trial: Trial, computing: int) -> bool:
    """Charge a trial computing at its device's death with its share of the blame (:data:`DEATHS_PER_FAILURE`).

    The deaths count from the first at which the trial had reached its current ``last_iteration``; a trial that
    got further since (a result past ``death_point``) starts counting again, unless its attempt died after as many
    iterations as at that first death (``death_run``): a trainable that does not restore the checkpoint it is
    given starts over at each attempt while its iteration counter goes on from the checkpoint, and dies at the
    same point of its own work each time (it was restarted for ever, whatever ``max_failures`` said). Updates
    ``trial.death_point``, ``trial.death_run``, ``trial.death_blame`` and ``trial.stuck_deaths``.

    Args:
        trial: The trial; it had begun and was not paused at the death.
        computing: The trials computing on the device at the death, this one included.

    Returns:
        True when the blame reaches one failure (it is then reset, for the retry to count afresh).
    """
    run = trial.last_iteration - trial.attempt_start
    if trial.death_point is None or (trial.last_iteration > trial.death_point and run != trial.death_run):
        trial.death_point, trial.death_run = trial.last_iteration, run
        trial.death_blame, trial.stuck_deaths = Fraction(0), 0
    trial.death_blame += Fraction(1, max(1, computing))
    trial.stuck_deaths += 1
    if trial.death_blame < DEATHS_PER_FAILURE:
        return False
    trial.death_blame = Fraction(0)
    return True


def is_stalled(computing: int, waiting: int, queued: int, under_way: bool) -> bool:
    """Whether the run can go on only if trials that do not compute give their memory up.

    Trials paused at their budget stay resident on their devices until their searcher promotes or stops them,
    and a trial without a checkpoint cannot leave its device without losing its work, so the planner's
    preemptions of such trials are refused (``REFUSED_NO_CHECKPOINT``). But a searcher that decides only once
    every trial of a rung has reached it (``HyperBand``, ``SyncBOHB``) waits for the trials that this memory keeps
    from running: with no trial computing and nothing under way, no event would ever come, and the run would
    wait for ever. Ray Tune never gets there: its paused trials leave their actors (and restart from scratch
    when they have no checkpoint).

    Args:
        computing: Placed trials that compute or will (not paused, not waiting for a lane's admission).
        waiting: Placed trials waiting for a lane's admission (for memory).
        queued: Trials waiting in the driver's queue.
        under_way: Something that will bring news: a stop sent and not yet landed, a device still starting, a
            worker still winding down.

    Returns:
        True when no trial computes, nothing is under way, and some trial waits.
    """
    return computing == 0 and not under_way and (waiting > 0 or queued > 0)


@dataclass
class PlanActions:
    """What the executor does about a plan (the output of :func:`plan_actions`).

    Attributes:
        submit: ``(trial_id, devices, action)`` of trials not running now to submit to ``devices``; ``action`` is
            the planner's (``start``, or ``keep``/``move``/``resize`` for a trial restarting on the devices the
            planner kept for it).
        move: ``(trial_id, devices, action)`` of running trials to stop at their next boundary and restart from
            their checkpoint on ``devices``.
        retarget: ``(trial_id, devices)`` of trials already moving whose destination changed.
        preempt: Running trials to stop at their next boundary and queue again.
        refused: ``(trial_id, action, reason)`` of planned changes not applied, and of the moves the planner left
            out because the trial cannot restart (``Plan.held``: ``move``, :data:`REFUSED_NO_CHECKPOINT`).
        unplaceable: Queued trials that fit no device: they end with an error.
        withdraw: ``(trial_id, action)`` of planned moves and preemptions of trials without a checkpoint that may
            not have begun (``TrialState.unbegun``): their devices are asked to give them back.
    """

    submit: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    move: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    retarget: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    preempt: list[str] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    unplaceable: list[str] = field(default_factory=list)
    withdraw: list[tuple[str, str]] = field(default_factory=list)


def plan_actions(plan: Plan, states: Mapping[str, TrialState], limit: int | None = None,
                 computing: int = 0) -> PlanActions:
    """Translate a plan into the executor's actions; only the plan's changes become actions.

    Rules: a trial that is not running is submitted to its planned devices (START, or a restart the planner
    kept in place); a running trial whose planned devices differ from those it runs on is moved at its next
    boundary, from its checkpoint, if it has one (else the restart would start it over) and is not paused, or is
    withdrawn if it may not have begun; a trial already moving just gets its new destination; preempted trials
    are stopped under the same conditions. When the run is stalled (``TrialState.stalled``) a move or a
    preemption that no withdrawal can do goes ahead without a checkpoint. A KEEP of a running trial is nothing.
    Submissions stop once ``limit`` trials compute (``max_concurrent_trials``).

    Args:
        plan: The planner's output.
        states: The state of every trial the planner was given.
        limit: The most trials that may compute at once, or None.
        computing: Trials computing now (running and not paused, or moving).

    Returns:
        The actions, in the plan's decision order.
    """
    out = PlanActions()
    for a in plan.assignments:
        state = states.get(a.trial_id)
        if state is None or state.busy:
            continue
        if len(a.devices) < state.min_devices:
            if a.action != KEEP:
                out.refused.append((a.trial_id, a.action, REFUSED_MIN_DEVICES))
            continue
        if state.moving:
            out.retarget.append((a.trial_id, a.devices))
        elif not state.placed_on:
            if limit is not None and computing >= limit:
                out.refused.append((a.trial_id, a.action, REFUSED_LIMIT))
                continue
            out.submit.append((a.trial_id, a.devices, a.action))
            computing += 1
        elif a.action == KEEP or tuple(state.placed_on) == tuple(a.devices):
            continue
        elif not state.computing:
            out.refused.append((a.trial_id, a.action, REFUSED_PAUSED))
        elif state.can_restart:
            out.move.append((a.trial_id, a.devices, a.action))
        elif state.unbegun and len(state.placed_on) == 1:
            out.withdraw.append((a.trial_id, a.action))
        elif state.stalled:
            out.move.append((a.trial_id, a.devices, a.action))
        else:
            out.refused.append((a.trial_id, a.action, REFUSED_NO_CHECKPOINT))
    for trial_id in plan.preempted:
        state = states.get(trial_id)
        if state is None or state.busy or not state.placed_on:
            continue
        if state.moving or state.can_restart:
            out.preempt.append(trial_id)
        elif state.unbegun and len(state.placed_on) == 1:
            out.withdraw.append((trial_id, "preempt"))
        elif state.stalled:
            out.preempt.append(trial_id)
        else:
            out.refused.append((trial_id, "preempt", REFUSED_NO_CHECKPOINT))
    for trial_id, _ in plan.held:  # moves the planner left out because the trial cannot restart: say why
        state = states.get(trial_id)
        if state is not None and state.placed_on and state.computing and not (state.busy or state.moving):
            out.refused.append((trial_id, MOVE, REFUSED_NO_CHECKPOINT))
    for trial_id in plan.unplaceable:
        state = states.get(trial_id)
        if state is not None and not state.placed_on and not state.busy:
            out.unplaceable.append(trial_id)
    return out


class DeviceLoad(NamedTuple):
    """One device as :func:`choose_prefetch` sees it.

    Attributes:
        index: The device.
        computing: Computing trials planned on it (home there, not paused), prefetched ones included.
        slots: Its compute slots.
        capacity_bytes: Its lane capacity.
    """

    index: int
    computing: int
    slots: int
    capacity_bytes: int


def choose_prefetch(queue: Sequence[str], sizes: Mapping[str, int], devices: Sequence[DeviceLoad],
                    per_device: int = PREFETCH_PER_DEVICE, allowance: int | None = None) -> list[tuple[str, int]]:
    """Pick queued trials to submit ahead to full devices.

    A device takes prefetched trials only when it already runs at least as many computing trials as it has slots
    (else the planner chose to leave it below, for memory or a saturated co-location curve), and up to
    ``per_device`` beyond its slots. Trials are taken in the planner's queue order (longest predicted remaining
    work first), each by the lowest-index device whose capacity holds its ``P + T``.

    Args:
        queue: Queued trials, in the planner's order (``Plan.queued`` less those not to prefetch).
        sizes: ``P + T`` of each queued trial.
        devices: The live devices.
        per_device: The most trials beyond its slots a device takes.
        allowance: The most trials to prefetch in all (what ``max_concurrent_trials`` leaves), or None.

    Returns:
        ``(trial_id, device index)`` pairs, in queue order.
    """
    room = {d.index: per_device - (d.computing - d.slots) for d in devices if d.computing >= d.slots}
    room = {i: n for i, n in room.items() if n > 0}
    capacity = {d.index: d.capacity_bytes for d in devices}
    chosen: list[tuple[str, int]] = []
    for trial_id in queue:
        if not room or (allowance is not None and len(chosen) >= allowance):
            break
        target = next((i for i in sorted(room) if sizes.get(trial_id, 0) <= capacity[i]), None)
        if target is None:
            continue
        chosen.append((trial_id, target))
        room[target] -= 1
        if room[target] <= 0:
            del room[target]
    return chosen


#: Lane events that carry a trial's ``(P, T)`` estimate, and where in their ``detail`` it is.
_ESTIMATE_EVENTS = {"lane_admit": slice(1, 3), "lane_wait": slice(0, 2), "lane_estimate": slice(0, 2),
                    "lane_oom": slice(2, 4)}


def estimate_of(kind: str, data: Mapping[str, Any]) -> tuple[int, int] | None:
    """The ``(P, T)`` a lane event records for its trial (admission, queueing, new estimate, OOM growth), or None."""
    where = _ESTIMATE_EVENTS.get(kind)
    detail = data.get("detail") if isinstance(data, Mapping) else None
    if where is None or not isinstance(detail, (list, tuple)):
        return None
    values = list(detail)[where]
    if len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return int(values[0]), int(values[1])


class LaneMirror:
    """One device's lanes as its lane events describe them (the planner's :attr:`DeviceView.lanes`).

    The device's lane manager is the authority. The driver replays the events it emits, in their order, so the
    planner starts from the real lanes instead of rebuilding them. Unknown event kinds change nothing.
    """

    def __init__(self) -> None:
        self._lanes: dict[int, tuple[list[int], dict[str, tuple[int, int]]]] = {}  # lane -> ([capacity], members)
        self._where: dict[str, int] = {}
        self._views: tuple[LaneView, ...] | None = ()

    def _remove(self, trial_id: str) -> None:
        lane = self._where.pop(trial_id, None)
        if lane is not None and lane in self._lanes:
            self._lanes[lane][1].pop(trial_id, None)

    def apply(self, kind: str, trial_id: str | None, data: Mapping[str, Any]) -> None:
        """Replay one lane event (``kind`` and ``data`` as the device host emits them)."""
        detail = data.get("detail") if isinstance(data, Mapping) else None
        detail = list(detail) if isinstance(detail, (list, tuple)) else []
        lane = data.get("lane") if isinstance(data, Mapping) else None
        if kind == "lane_open" and isinstance(lane, int):
            self._lanes[lane] = ([int(data.get("capacity") or 0)], {})
        elif kind == "lane_resize" and lane in self._lanes:
            self._lanes[lane][0][0] = int(data.get("capacity") or 0)
        elif kind == "lane_close" and isinstance(lane, int):
            _, members = self._lanes.pop(lane, ([0], {}))
            for tid in members:
                self._where.pop(tid, None)
        elif trial_id is None:
            return
        elif kind == "lane_admit" and detail and detail[0] in self._lanes:
            estimate = estimate_of(kind, data)
            if estimate is None:
                return
            self._remove(trial_id)
            self._lanes[detail[0]][1][trial_id] = estimate
            self._where[trial_id] = detail[0]
        elif kind in ("lane_leave", "lane_wait", "lane_fail"):
            self._remove(trial_id)
        elif kind in ("lane_estimate", "lane_oom") and trial_id in self._where:
            estimate = estimate_of(kind, data)
            if estimate is not None:
                self._lanes[self._where[trial_id]][1][trial_id] = estimate
        else:
            return
        self._views = None

    def views(self) -> tuple[LaneView, ...]:
        """The lanes now, oldest first (cached until the next event that changes them)."""
        if self._views is None:
            self._views = tuple(LaneView(lane, cap[0], dict(members))
                                for lane, (cap, members) in sorted(self._lanes.items()))
        return self._views
