"""Lane bookkeeping for one device, and the Salus admission rule.

This module is pure: no threads, no clock, no Ray, no torch. The lane runtime (one per device) owns one
:class:`LaneManager`, calls it from a single thread (or under its own lock), and turns what it returns into
actions on streams / worker threads and into store events.

**The rule** (Salus, Yu & Chowdhury, MLSys'20, section 4.2). Trials in a lane run one iteration at a time,
so at most one of them holds its *ephemeral* memory (activations, workspaces: ``T``) while all of them keep
their *persistent* memory (weights, optimizer state: ``P``) resident. Trial ``j`` may join lane ``l`` of
capacity ``C_l`` holding trials ``i`` iff::

    sum(P_i) + P_j + max(T_i ∪ {T_j}) <= C_l

:func:`admits` is exactly that line.

**Best fit.** :meth:`LaneManager.admit` opens a new lane of exactly ``P + T`` when the device has that much
unreserved memory (device capacity minus the sum of lane capacities) and fewer than ``max_lanes`` lanes
exist; otherwise it uses the smallest existing lane where the rule admits the trial (ties: the older lane);
otherwise the trial waits in the device queue, which the manager keeps (FIFO, :attr:`LaneManager.waiting`).
An empty lane dissolves and its memory returns to the device; waiting trials are then retried in order.

**Queue discipline.** By default the queue is strict FIFO: a new arrival waits behind any waiting trial,
and a retry stops at the first waiting trial that does not fit. No trial starves (a waiting head is placed
as soon as enough memory frees: at the latest when the device empties). With ``backfill=True`` a trial that
fits is placed even when an earlier one waits; that packs more but a large trial may wait indefinitely
while small ones keep arriving.

**Lane sizes.** A lane opens at exactly the ``P + T`` of its first trial. It grows only when an estimate
update or an out-of-memory error needs it to and the device has the unreserved memory. A lane whose only
member's estimate changes is resized to exactly that member's new ``P + T`` (it shrinks as well as grows:
the first estimate of a trial is usually a conservative guess that profiling then corrects). A shared lane
never shrinks; it dissolves when its last member leaves. Lane capacities are budgets: the lane allocator
enforces them as caps, so growing a lane needs unreserved memory, not contiguous memory.

**Estimate changes and OOM** are handled at the trial's iteration boundary (where the runtime calls
:meth:`LaneManager.update_estimate` and :meth:`LaneManager.on_oom`), so a trial that no longer fits its lane
is moved at once: to a grown lane, another lane, a new lane, or the front of the queue. The returned
:class:`Decision` says which; see its ``action`` values.

**Events.** Every change is recorded as a tuple ``(kind, ...)`` (kinds ``EV_*`` below) in a list the caller
drains with :meth:`LaneManager.drain_events` and stamps with its clock before storing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from fluidsalus.errors import ConfigError, FluidsalusError

#: Factor by which :meth:`LaneManager.on_oom` multiplies a trial's P and T. Doubling is the usual geometric
#: growth: an underestimate by a factor ``k`` is corrected in ``ceil(log2 k)`` retries, and the waste of the
#: final estimate is at most 2x. Callers pass their own factor where they know better.
DEFAULT_OOM_FACTOR = 2.0

#: Out-of-memory re-admissions allowed per trial before :meth:`LaneManager.on_oom` gives up (``ACT_FAIL``).
#: With :data:`DEFAULT_OOM_FACTOR` three retries cover an 8x underestimate; the last retry is clamped to the
#: whole device, so a trial that still overflows cannot run on this device at all.
DEFAULT_MAX_OOM_RETRIES = 3

# Event kinds. Each event is a tuple whose first item is its kind; the caller adds a timestamp.
EV_LANE_OPEN = "lane_open"  # (EV_LANE_OPEN, lane_id, capacity)
EV_LANE_CLOSE = "lane_close"  # (EV_LANE_CLOSE, lane_id): the lane emptied and dissolved
EV_LANE_RESIZE = "lane_resize"  # (EV_LANE_RESIZE, lane_id, old_capacity, new_capacity)
EV_ADMIT = "lane_admit"  # (EV_ADMIT, trial_id, lane_id, p, t)
EV_LEAVE = "lane_leave"  # (EV_LEAVE, trial_id, lane_id): lane_id None when it left the queue
EV_WAIT = "lane_wait"  # (EV_WAIT, trial_id, p, t): the trial entered the device queue
EV_ESTIMATE = "lane_estimate"  # (EV_ESTIMATE, trial_id, p, t): a new estimate was recorded
EV_OOM = "lane_oom"  # (EV_OOM, trial_id, lane_id, retry, new_p, new_t)
EV_FAIL = "lane_fail"  # (EV_FAIL, trial_id, reason): the trial cannot run on this device

# Actions of a Decision (what the runtime must do with the trial at this iteration boundary).
ACT_STAY = "stay"  # same lane, lane unchanged: carry on
ACT_RESIZE = "resize"  # same lane, whose capacity changed: update the lane allocator's cap
ACT_MOVE = "move"  # another lane (placement): run the trial on that lane's stream/thread from now on
ACT_ADMIT = "admit"  # a waiting trial is now placed (placement): start or resume it there
ACT_WAIT = "wait"  # no lane: the trial waits in the queue; if it was running, checkpoint it and free its memory
ACT_FAIL = "fail"  # the trial cannot run on this device (reason in the event): fail it; the manager forgot it


class LaneError(FluidsalusError, ValueError):
    """Misuse of a :class:`LaneManager`: an unknown or duplicate trial id, a negative estimate."""


class TrialTooLargeError(LaneError):
    """A trial whose ``P + T`` exceeds the whole device: it can never be admitted here."""


class LaneInvariantError(AssertionError):
    """Raised by :meth:`LaneManager.check_invariants` when the bookkeeping is inconsistent (a bug)."""


def admits(lane_persistent: Sequence[int], lane_ephemeral: Sequence[int], p_j: int, t_j: int, capacity: int) -> bool:
    """The Salus safety condition: may trial ``j`` join a lane whose members hold ``P_i`` and ``T_i``?

    Args:
        lane_persistent: ``P_i`` of the lane's members, in bytes.
        lane_ephemeral: ``T_i`` of the lane's members, in bytes (same order; may be empty).
        p_j: Persistent memory of the candidate.
        t_j: Ephemeral memory of the candidate.
        capacity: The lane's capacity ``C_l``.

    Returns:
        ``sum(P_i) + P_j + max(T_i ∪ {T_j}) <= C_l``.
    """
    return sum(lane_persistent) + p_j + max([*lane_ephemeral, t_j]) <= capacity


def lane_requirement(persistent: Sequence[int], ephemeral: Sequence[int]) -> int:
    """Memory a set of time-sliced trials needs: ``sum(P) + max(T)`` (0 for no trials).

    Args:
        persistent: ``P`` of each trial.
        ephemeral: ``T`` of each trial.

    Returns:
        The smallest lane capacity that holds them all under :func:`admits`.
    """
    return sum(persistent) + max(ephemeral, default=0)


@dataclass(frozen=True)
class Placement:
    """Where a trial runs.

    Attributes:
        trial_id: The trial.
        lane_id: Its lane (ids are never reused on one manager).
        capacity: The lane's capacity when the trial was placed.
        new_lane: True when the lane was opened for this trial.
    """

    trial_id: str
    lane_id: int
    capacity: int
    new_lane: bool


@dataclass(frozen=True)
class Decision:
    """What happened to a trial after an estimate change or an out-of-memory error.

    Attributes:
        action: One of ``ACT_STAY``, ``ACT_RESIZE``, ``ACT_MOVE``, ``ACT_ADMIT``, ``ACT_WAIT``, ``ACT_FAIL``.
        trial_id: The trial.
        placement: Its placement after the call (None for ``ACT_WAIT`` and ``ACT_FAIL``).
        admitted: Other, waiting trials that the call let in (start them, in this order).
    """

    action: str
    trial_id: str
    placement: Placement | None
    admitted: tuple[Placement, ...] = ()


@dataclass(frozen=True)
class LaneView:
    """A read-only snapshot of one lane.

    Attributes:
        lane_id: The lane.
        capacity: Its memory budget in bytes.
        members: ``trial_id -> (P, T)``, in the order the trials joined.
    """

    lane_id: int
    capacity: int
    members: dict[str, tuple[int, int]]

    @property
    def requirement(self) -> int:
        """``sum(P) + max(T)`` of the members: the memory the lane actually needs."""
        return lane_requirement([p for p, _ in self.members.values()], [t for _, t in self.members.values()])


@dataclass
class _Lane:
    lane_id: int
    capacity: int
    members: dict[str, tuple[int, int]] = field(default_factory=dict)

    def admits(self, p: int, t: int, capacity: int | None = None) -> bool:
        cap = self.capacity if capacity is None else capacity
        return admits([m[0] for m in self.members.values()], [m[1] for m in self.members.values()], p, t, cap)


def _check_bytes(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LaneError(f"{name}: must be an int >= 0 (bytes), got {value!r}")
    return value


class LaneManager:
    """Lanes of one device: admission by the Salus rule, best fit, the waiting queue and OOM re-admission.

    Args:
        capacity_bytes: Memory of the device the lanes may reserve (for a GPU: free memory minus the CUDA
            context reserve, see :func:`fluidsalus.gpu.nvml.device_free_memory`; for a virtual CPU device:
            its memory budget).
        max_lanes: Most lanes that may exist at once (lanes run concurrently): the compute slots of a CPU
            device, or a measured value on a GPU. Always the caller's setting, never a constant here.
        backfill: Let a trial that fits jump ahead of waiting trials that do not (see the module doc).
        max_oom_retries: Out-of-memory re-admissions per trial before ``ACT_FAIL``.
        grow_lanes: When no new lane may open and the trial fits no lane, grow the lane that needs the least
            extra capacity, if the device has that much unreserved memory (see docs/lanes.md). False keeps
            the strict rule, under which such a trial waits.

    Raises:
        ConfigError: If ``capacity_bytes`` < 0 or ``max_lanes`` < 1.
    """

    def __init__(
        self,
        capacity_bytes: int,
        max_lanes: int,
        *,
        backfill: bool = False,
        max_oom_retries: int = DEFAULT_MAX_OOM_RETRIES,
        grow_lanes: bool = True,
    ) -> None:
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) or capacity_bytes < 0:
            raise ConfigError(f"capacity_bytes: must be an int >= 0 (bytes of the device), got {capacity_bytes!r}")
        if isinstance(max_lanes, bool) or not isinstance(max_lanes, int) or max_lanes < 1:
            raise ConfigError(f"max_lanes: must be an int >= 1 (concurrent lanes of the device), got {max_lanes!r}")
        if max_oom_retries < 0:
            raise ConfigError(f"max_oom_retries: must be >= 0, got {max_oom_retries!r}")
        self.capacity = capacity_bytes
        self.max_lanes = max_lanes
        self.backfill = backfill
        self.max_oom_retries = max_oom_retries
        self.grow_lanes = grow_lanes
        self._lanes: dict[int, _Lane] = {}
        self._where: dict[str, int] = {}  # placed trial -> lane id
        self._waiting: deque[tuple[str, int, int]] = deque()  # (trial_id, p, t), FIFO
        self._oom_retries: dict[str, int] = {}
        self._next_lane = 0
        self._events: list[tuple] = []

    # ----------------------------------------------------------------- views

    @property
    def reserved(self) -> int:
        """Sum of the lane capacities, in bytes."""
        return sum(lane.capacity for lane in self._lanes.values())

    @property
    def unreserved(self) -> int:
        """Device memory no lane holds: ``capacity - reserved``."""
        return self.capacity - self.reserved

    @property
    def waiting(self) -> tuple[str, ...]:
        """Trial ids in the device queue, first to be retried first."""
        return tuple(tid for tid, _, _ in self._waiting)

    def lanes(self) -> list[LaneView]:
        """Snapshots of the lanes, oldest first."""
        return [LaneView(lane.lane_id, lane.capacity, dict(lane.members)) for lane in self._lanes.values()]

    @property
    def lane_count(self) -> int:
        """Lanes open now (what :meth:`split` and admission compare with ``max_lanes``)."""
        return len(self._lanes)

    def lane_of(self, trial_id: str) -> int | None:
        """The lane of a placed trial, or None (waiting or unknown)."""
        return self._where.get(trial_id)

    def estimate(self, trial_id: str) -> tuple[int, int]:
        """The ``(P, T)`` the manager holds for a placed or waiting trial.

        Raises:
            LaneError: If the trial is unknown.
        """
        lane_id = self._where.get(trial_id)
        if lane_id is not None:
            return self._lanes[lane_id].members[trial_id]
        for tid, p, t in self._waiting:
            if tid == trial_id:
                return p, t
        raise LaneError(f"trial {trial_id!r} is neither placed nor waiting on this device")

    def oom_retries(self, trial_id: str) -> int:
        """How many times the trial was re-admitted after running out of memory."""
        return self._oom_retries.get(trial_id, 0)

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._where or any(tid == trial_id for tid, _, _ in self._waiting)

    def drain_events(self) -> list[tuple]:
        """Return the events recorded since the last call, oldest first, and forget them."""
        events, self._events = self._events, []
        return events

    # ---------------------------------------------------------- operations

    def admit(self, trial_id: str, p: int, t: int) -> Placement | None:
        """Place a new trial by best fit, or queue it.

        Args:
            trial_id: A trial not yet known to this manager.
            p: Its persistent-memory estimate, in bytes.
            t: Its ephemeral-memory estimate, in bytes.

        Returns:
            The placement, or None when the trial waits in the queue (it is then returned by a later
            :meth:`leave`, :meth:`update_estimate` or :meth:`on_oom` when it gets in).

        Raises:
            LaneError: If the trial is already known or an estimate is not a non-negative int.
            TrialTooLargeError: If ``p + t`` exceeds the device: it could never run here.
        """
        if trial_id in self:
            raise LaneError(f"trial {trial_id!r} is already placed or waiting on this device")
        _check_bytes("p", p)
        _check_bytes("t", t)
        if p + t > self.capacity:
            raise TrialTooLargeError(
                f"trial {trial_id!r} needs P+T = {p + t} bytes but the device has {self.capacity}: it cannot run here"
            )
        placement = None if (self._waiting and not self.backfill) else self._place(trial_id, p, t)
        if placement is None:
            self._waiting.append((trial_id, p, t))
            self._events.append((EV_WAIT, trial_id, p, t))
        return placement

    def leave(self, trial_id: str) -> list[Placement]:
        """Remove a trial (it ended, was stopped, or moves to another device).

        Its lane dissolves if it was the last member. Waiting trials are then retried in order.

        Args:
            trial_id: A placed or waiting trial.

        Returns:
            The placements of the waiting trials that got in, in queue order.

        Raises:
            LaneError: If the trial is unknown.
        """
        if trial_id in self._where:
            self._remove(trial_id)
        elif not self._unqueue(trial_id):
            raise LaneError(f"trial {trial_id!r} is neither placed nor waiting on this device")
        else:
            self._events.append((EV_LEAVE, trial_id, None))
        self._oom_retries.pop(trial_id, None)
        return self._drain()

    def split(self, trial_id: str) -> Placement | None:
        """Give a trial that shares its lane a new lane of its own, when one may open.

        Work conservation after a lane dissolved: a trial that time-slices a shared lane while the device runs
        fewer lanes than ``max_lanes`` moves to a new lane of exactly ``P + T``, if the device has that much
        unreserved memory. Its old lane keeps its capacity (a shared lane never shrinks, as in
        :meth:`update_estimate`); nothing else changes. The caller moves only a trial waiting for its turn, so
        the move happens at an iteration boundary and moves no memory.

        Args:
            trial_id: A placed trial.

        Returns:
            The new placement, or None when the trial is alone in its lane, no lane may open, or the memory
            is not there.

        Raises:
            LaneError: If the trial is not placed.
        """
        lane_id = self._where.get(trial_id)
        if lane_id is None:
            raise LaneError(f"trial {trial_id!r} is not placed on this device")
        lane = self._lanes[lane_id]
        p, t = lane.members[trial_id]
        if len(lane.members) < 2 or len(self._lanes) >= self.max_lanes or p + t > self.unreserved:
            return None
        self._remove(trial_id)
        placement = self._place(trial_id, p, t)
        assert placement is not None and placement.new_lane  # a lane may open and the memory is there
        return placement

    def update_estimate(self, trial_id: str, p: int, t: int) -> Decision:
        """Record a new ``(P, T)`` for a trial, at its iteration boundary, and keep the lane safe.

        For a placed trial: if it is alone in its lane, the lane is resized to exactly ``p + t`` when the device
        can hold that; if it shares the lane and the rule still holds, nothing moves; if the rule fails, the
        lane grows by the shortfall when the device has that much unreserved memory; otherwise the trial
        leaves the lane and is placed again by best fit, or waits at the *front* of the queue (it was running
        and is owed its place). For a waiting trial the queued estimate is replaced and the queue retried.

        Args:
            trial_id: A placed or waiting trial.
            p: New persistent-memory estimate, in bytes.
            t: New ephemeral-memory estimate, in bytes.

        Returns:
            The decision. ``ACT_FAIL`` (the manager forgets the trial) when ``p + t`` exceeds the device.

        Raises:
            LaneError: If the trial is unknown or an estimate is not a non-negative int.
        """
        _check_bytes("p", p)
        _check_bytes("t", t)
        if trial_id not in self:
            raise LaneError(f"trial {trial_id!r} is neither placed nor waiting on this device")
        self._events.append((EV_ESTIMATE, trial_id, p, t))
        if p + t > self.capacity:
            return self._fail(trial_id, f"estimate P+T = {p + t} bytes exceeds the device's {self.capacity}")
        return self._refit(trial_id, p, t)

    def on_oom(self, trial_id: str, factor: float = DEFAULT_OOM_FACTOR, needed: int = 0) -> Decision:
        """A placed trial ran out of memory: re-admit it with ``P`` and ``T`` multiplied by ``factor``.

        ``T`` grows to at least ``needed``, the size of the allocation that failed when its error says it: the
        trial held its ``P`` and asked for that much more, so a smaller ``T`` is known to fail again.

        The grown estimate is clamped to the whole device (so the last chance is a lane alone on the device).
        The trial is re-placed like an estimate change (:meth:`update_estimate`): its lane grows if the device
        has room, or it moves, or it waits at the front of the queue, where a lane of its own opens for it as
        soon as the memory frees. After ``max_oom_retries`` re-admissions, or when it already had the whole
        device, the trial fails.

        Args:
            trial_id: A placed trial (its failed iteration is re-run from its last state by the caller).
            factor: Growth factor of the estimate, > 1.
            needed: Bytes the failed allocation asked for (0: unknown).

        Returns:
            The decision (``ACT_FAIL``: the manager forgot the trial; fail it with the recorded reason).

        Raises:
            LaneError: If the trial is not placed, or ``factor`` <= 1.
        """
        if not factor > 1:
            raise LaneError(f"factor: must be > 1, got {factor!r}")
        _check_bytes("needed", needed)
        lane_id = self._where.get(trial_id)
        if lane_id is None:
            raise LaneError(f"trial {trial_id!r} is not placed on this device: only a running trial can run out")
        p, t = self._lanes[lane_id].members[trial_id]
        retry = self._oom_retries.get(trial_id, 0) + 1
        if retry > self.max_oom_retries:
            return self._fail(trial_id, f"out of memory {retry} times (max_oom_retries={self.max_oom_retries})")
        if p + t >= self.capacity:
            return self._fail(trial_id, f"out of memory with the whole device ({self.capacity} bytes)")
        new_p, new_t = math.ceil(p * factor), max(math.ceil(t * factor), needed)
        if new_p + new_t <= p + t:  # zero estimates do not grow by multiplication: take at least one byte more
            new_t = t + 1
        if new_p + new_t > self.capacity:  # clamp to the device, keeping P (persistent memory cannot shrink)
            new_p = min(new_p, self.capacity)
            new_t = self.capacity - new_p
        self._oom_retries[trial_id] = retry
        self._events.append((EV_OOM, trial_id, lane_id, retry, new_p, new_t))
        return self._refit(trial_id, new_p, new_t)

    # ------------------------------------------------------------ invariants

    def check_invariants(self) -> None:
        """Check the bookkeeping; used by tests and cheap enough for debug runs.

        Checked: reserved <= device capacity; every lane is non-empty and its members satisfy the rule
        (``sum P + max T <= capacity``); no trial is in two lanes or both placed and waiting; the number of
        lanes is <= ``max_lanes``; and no waiting trial that could be placed is left waiting (the queue head
        under FIFO, any waiting trial under backfill).

        Raises:
            LaneInvariantError: On the first violation found.
        """

        def fail(msg: str) -> None:
            raise LaneInvariantError(msg)

        if self.reserved > self.capacity:
            fail(f"reserved {self.reserved} > device capacity {self.capacity}")
        if len(self._lanes) > self.max_lanes:
            fail(f"{len(self._lanes)} lanes > max_lanes {self.max_lanes}")
        seen: dict[str, int] = {}
        for lane in self._lanes.values():
            if not lane.members:
                fail(f"lane {lane.lane_id} is empty but not dissolved")
            need = lane_requirement([m[0] for m in lane.members.values()], [m[1] for m in lane.members.values()])
            if need > lane.capacity:
                fail(f"lane {lane.lane_id}: sum P + max T = {need} > capacity {lane.capacity}")
            for tid in lane.members:
                if tid in seen:
                    fail(f"trial {tid!r} is in lanes {seen[tid]} and {lane.lane_id}")
                seen[tid] = lane.lane_id
        if seen != self._where:
            fail(f"lane index {self._where} does not match the lanes {seen}")
        queued = [tid for tid, _, _ in self._waiting]
        if len(set(queued)) != len(queued):
            fail(f"a trial is queued twice: {queued}")
        both = set(queued) & set(seen)
        if both:
            fail(f"trials both placed and waiting: {sorted(both)}")
        candidates = list(self._waiting) if self.backfill else list(self._waiting)[:1]
        for tid, p, t in candidates:
            if self._find(p, t) is not None:
                fail(f"waiting trial {tid!r} (P={p}, T={t}) could be placed")

    # -------------------------------------------------------------- internals

    def _find(self, p: int, t: int) -> tuple[str, int | None] | None:
        """Best fit without side effects: ("new", None), ("lane", lane_id), ("grow", lane_id) or None.

        When no new lane may open (``max_lanes`` reached), a lane the trial does not fit grows into
        unreserved memory, choosing the lane that needs the least growth: this is what lets identical
        trials share (time-slice) a lane once every lane is open.
        """
        if len(self._lanes) < self.max_lanes and p + t <= self.unreserved:
            return ("new", None)
        fits = [lane for lane in self._lanes.values() if lane.admits(p, t)]
        if fits:
            best = min(fits, key=lambda lane: (lane.capacity, lane.lane_id))
            return ("lane", best.lane_id)
        if not self.grow_lanes:
            return None
        # Least growth first; on a tie the smaller lane, so that time-slicing spreads evenly over lanes.
        growth = [(self._growth(lane, p, t), lane.capacity, lane.lane_id) for lane in self._lanes.values()]
        growable = [g for g in growth if g[0] <= self.unreserved]
        if growable:
            return ("grow", min(growable)[2])
        return None

    @staticmethod
    def _growth(lane: _Lane, p: int, t: int) -> int:
        """Extra capacity ``lane`` needs to admit a trial with ``(p, t)`` by the safety condition."""
        ps = [mp for mp, _ in lane.members.values()]
        ts = [mt for _, mt in lane.members.values()]
        return lane_requirement([*ps, p], [*ts, t]) - lane.capacity

    def _place(self, trial_id: str, p: int, t: int) -> Placement | None:
        found = self._find(p, t)
        if found is None:
            return None
        kind, lane_id = found
        if kind == "new":
            lane_id = self._next_lane
            self._next_lane += 1
            self._lanes[lane_id] = _Lane(lane_id, p + t)
            self._events.append((EV_LANE_OPEN, lane_id, p + t))
        lane = self._lanes[lane_id]
        if kind == "grow":
            old = lane.capacity
            lane.capacity = old + self._growth(lane, p, t)
            self._events.append((EV_LANE_RESIZE, lane_id, old, lane.capacity))
        lane.members[trial_id] = (p, t)
        self._where[trial_id] = lane_id
        self._events.append((EV_ADMIT, trial_id, lane_id, p, t))
        return Placement(trial_id, lane_id, lane.capacity, kind == "new")

    def _remove(self, trial_id: str) -> None:
        lane_id = self._where.pop(trial_id)
        lane = self._lanes[lane_id]
        del lane.members[trial_id]
        self._events.append((EV_LEAVE, trial_id, lane_id))
        if not lane.members:
            del self._lanes[lane_id]
            self._events.append((EV_LANE_CLOSE, lane_id))

    def _unqueue(self, trial_id: str) -> bool:
        for i, (tid, _, _) in enumerate(self._waiting):
            if tid == trial_id:
                del self._waiting[i]
                return True
        return False

    def _drain(self) -> list[Placement]:
        placed: list[Placement] = []
        kept: deque[tuple[str, int, int]] = deque()
        while self._waiting:
            tid, p, t = self._waiting.popleft()
            placement = self._place(tid, p, t)
            if placement is not None:
                placed.append(placement)
                continue
            kept.append((tid, p, t))
            if not self.backfill:
                break
        kept.extend(self._waiting)
        self._waiting = kept
        return placed

    def _resize(self, lane: _Lane, capacity: int) -> None:
        self._events.append((EV_LANE_RESIZE, lane.lane_id, lane.capacity, capacity))
        lane.capacity = capacity

    def _refit(self, trial_id: str, p: int, t: int) -> Decision:
        """Apply a new estimate to a placed or waiting trial (see :meth:`update_estimate`)."""
        lane_id = self._where.get(trial_id)
        if lane_id is None:  # waiting: replace the queued estimate in place, then retry the queue
            self._waiting[self.waiting.index(trial_id)] = (trial_id, p, t)
            admitted = self._drain()
            mine = next((pl for pl in admitted if pl.trial_id == trial_id), None)
            others = tuple(pl for pl in admitted if pl.trial_id != trial_id)
            return Decision(ACT_WAIT if mine is None else ACT_ADMIT, trial_id, mine, others)
        lane = self._lanes[lane_id]
        others_p = [m[0] for tid, m in lane.members.items() if tid != trial_id]
        others_t = [m[1] for tid, m in lane.members.items() if tid != trial_id]
        # The capacity the lane needs with the new estimate: exactly P + T when the trial is alone (the lane
        # tracks its only member), else at least the current capacity (a shared lane never shrinks).
        need = lane_requirement([*others_p, p], [*others_t, t])
        target = need if not others_p else max(lane.capacity, need)
        if target - lane.capacity <= self.unreserved:
            lane.members[trial_id] = (p, t)
            action = ACT_STAY
            if target != lane.capacity:
                self._resize(lane, target)
                action = ACT_RESIZE
            placement = Placement(trial_id, lane_id, lane.capacity, False)
            # An estimate that went down, or a lane that shrank, may let waiting trials in.
            return Decision(action, trial_id, placement, tuple(self._drain()))
        # The trial does not fit where it is and the lane cannot grow: it leaves (dissolving the lane if it
        # was alone) and is placed again by best fit, ahead of the queue, since it was running.
        self._remove(trial_id)
        placement = self._place(trial_id, p, t)
        if placement is None:
            self._waiting.appendleft((trial_id, p, t))
            self._events.append((EV_WAIT, trial_id, p, t))
            return Decision(ACT_WAIT, trial_id, None, tuple(self._drain()))
        return Decision(ACT_MOVE, trial_id, placement, tuple(self._drain()))

    def _fail(self, trial_id: str, reason: str) -> Decision:
        if trial_id in self._where:
            self._remove(trial_id)
        else:
            self._unqueue(trial_id)
        self._oom_retries.pop(trial_id, None)
        self._events.append((EV_FAIL, trial_id, reason))
        return Decision(ACT_FAIL, trial_id, None, tuple(self._drain()))
