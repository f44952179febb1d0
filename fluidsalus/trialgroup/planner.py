"""The water-filling planner (Fluid, MLSys'21) over Salus lanes: a pure function from trials, devices and
profiles to placements.

No Ray, no clock, no threads: :func:`plan` maps the same input to the same :class:`Plan`. The executor keeps a
:class:`Planner` (a :class:`ProfileBook` plus settings), feeds it each iteration's measured time with
:meth:`Planner.observe`, and calls :meth:`Planner.plan` whenever the set of trials changes: a group arrives, a
trial ends, is stopped, pauses at its budget or is promoted. It applies only :attr:`Plan.changes`: start the
trials in :attr:`Plan.starts`, move the ones in :attr:`Plan.moves` at their next iteration boundary (from a
checkpoint), checkpoint and queue the ones in :attr:`Plan.preempted`. Everything else stays where it is.

**Turns.** "Longest first" below is the order among waiting trials of equal :attr:`TrialDemand.turn`. A
searcher whose trials take turns by progress (PBT: ``BaseSearcher.takes_turns``) gives each waiting trial its
progress as its turn, and waiting trials with a smaller turn start first, as Ray Tune's PBT runs its least
advanced trial first. Every other searcher leaves the turns equal (0).

**Regimes.** Let ``C`` be the number of *computing* trials (not paused, budget not reached) and ``D`` the
number of devices.

* ``C > D``, **intra-GPU**: every trial gets one device. Trials already placed keep their device (a
  data-parallel trial shrinks to its first device, or to its first ``min_devices`` that still hold its ``P + T``
  when its trainable needs more: those take no other trial, and evening out leaves it there). The others (one
  that needs ``min_devices`` > 1 takes that many whole devices, or waits), longest predicted remaining time first, go
  to the least-loaded device (load: the predicted remaining seconds of its computing trials; ties: fewer
  trials, then the lower index) that (1) admits the trial's memory by the Salus lane rule (the device's
  lanes with its kept residents, paused ones included: :class:`LaneMemory`, the memory side of
  :class:`~fluidsalus.gpu.lanes.LaneManager`) and (2) still gains from one more co-located trial: a device
  with ``n`` computing trials takes another only while ``n < slots`` and the measured marginal gain
  ``X(n+1) / X(n) - 1`` is at least :data:`MIN_MARGINAL_GAIN`, where ``X(n)`` is the aggregate throughput with
  ``n`` co-located trials (:meth:`ProfileBook.colocation_gain`). A trial that fits nowhere may take the memory
  of paused trials on a device that gains (they are preempted: paused trials hold memory, not compute; only
  those it needs, most recent arrival first).
  Then co-location is evened out: while a device runs two or more computing trials more than an open one,
  its longest trial moves there if the predicted saving exceeds the move cost. Trials left stay queued,
  longest first.
* ``C <= D``, **inter-GPU**: every computing trial gets a device of its own. Queued trials take free devices (taking
  back a data-parallel trial's last extra device, the one it loses least by, when none is free, never below its
  ``min_devices``; and co-located as above when nothing else is left, never on a data-parallel trial's devices; one
  that needs ``min_devices`` > 1 takes that many free devices at once, or waits). On a
  device with several computing trials the longest (or a data-parallel trial kept on its ``min_devices``, which holds
  them whole) stays and each other one moves to a free device when its predicted saving pays for the move. Then the
  water level rises: the next free device goes to the data-parallel trial with the most predicted remaining time, as
  long as its scaling profile says ``k + 1`` devices cut the time per iteration by more than :data:`MIN_SCALING_GAIN`
  and, for a running trial, the saving over its remaining budget exceeds the move cost. An unmeasured step is a probe,
  taken only once the trial's time at ``k`` devices is measured (or as the first step of a trial that starts now).
  Only trials whose trainable declared data-parallel support (``TrialDemand.data_parallel``) get more than one device,
  and only whole devices.

Moving or growing a running trial restarts it from its checkpoint, so its cost is ``move_cost_s`` (growing:
``PlannerSettings.grow_cost_s``) plus its iterations since that checkpoint (``TrialDemand.since_checkpoint``) at
its alone time per iteration, which it runs again.

**Stability.** A trial whose placement is still valid (its devices exist and its ``P + T`` fits them) keeps it:
its :class:`Assignment` is ``KEEP``. A computing data-parallel trial some of whose devices no longer hold it keeps
those that do, in either regime, while at least ``min_devices`` do (:func:`_held_devices`); else it is placed
again, or preempted. A trial changes device only as an explicit ``MOVE``/``RESIZE`` (applied
at an iteration boundary, from a checkpoint), issued only by a rule above: a shrink to one device when trials
outnumber devices, a rebalance or spread that pays for the move, a water-filling step, or an extra device
whose measured scaling no longer pays. Re-planning an applied plan with the same profiles changes nothing
(tested as a property). Memory: pass each device's lanes (``DeviceView.lanes``, from its lane manager) and the
planner starts from them; otherwise it rebuilds them by admitting the placed trials in arrival order, and a
device whose rebuilt lanes cannot hold all its residents (another admission order, or a grown estimate) keeps
them and takes nothing new.

**Incremental planning.** :func:`plan` computes a plan from scratch. :meth:`Planner.plan` returns the same plan
but keeps, from one plan to the next, the state that rebuilding the devices' residents leaves (:class:`_KeptCache`)
and updates only what changed: the trials whose :class:`TrialDemand` object is new, those whose estimate the
book changed (:meth:`ProfileBook.changed_since`), the devices whose :class:`DeviceView` object is new. Callers
that pass the same objects for what did not change pay an identity check per trial plus the work of what
changed.

**Profiles.** :class:`ProfileBook` keeps, per trial and per allocation actually tried (``k`` devices, ``n``
co-located computing trials), an EMA of seconds per iteration (:class:`~fluidsalus.gpu.memory.Ema`). From
trials measured at neighbouring allocations it pools two curves per ``curve_key`` (a device class): the
co-location steps ``n -> n + 1`` and the scaling steps ``k -> k + 1``. Fallbacks for allocations never tried
are documented on :meth:`ProfileBook.predict`, :meth:`ProfileBook.colocation_gain` and
:meth:`ProfileBook.scaling_ratio`; docs/planner.md has the whole picture with worked examples.
"""

from __future__ import annotations

import bisect
import collections
import functools
import heapq
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from fluidsalus.errors import ConfigError, FluidsalusError
from fluidsalus.gpu.lanes import LaneView, lane_requirement
from fluidsalus.gpu.memory import DEFAULT_EMA_ALPHA, Ema

__all__ = [
    "DEFAULT_CURVE_KEY",
    "DEFAULT_MOVE_COST_S",
    "DEFAULT_SERIAL_FRACTION",
    "MIN_MARGINAL_GAIN",
    "MIN_SCALING_GAIN",
    "Assignment",
    "DeviceView",
    "LaneMemory",
    "Plan",
    "PlanError",
    "Planner",
    "PlannerSettings",
    "ProfileBook",
    "TrialDemand",
    "plan",
]

#: Smallest relative gain in a device's aggregate throughput that justifies co-locating one more trial on it:
#: with ``n`` computing trials, another joins only if ``X(n+1) / X(n) - 1 >= MIN_MARGINAL_GAIN``. 5% is about
#: the run-to-run noise of a measured iteration time; a smaller gain cannot be told apart from noise, and the
#: trial added for it slows each of its neighbours (see docs/planner.md).
MIN_MARGINAL_GAIN = 0.05
#: Smallest relative cut in seconds per iteration that justifies one more device for a data-parallel trial:
#: ``time(k + 1) < time(k) * (1 - MIN_SCALING_GAIN)``. Same reasoning as :data:`MIN_MARGINAL_GAIN`.
MIN_SCALING_GAIN = 0.05
#: Rounding slack of the hinted-share test ``(n + 1) * prior_share <= 1``: a share that divides a device exactly
#: (``k`` trials of ``1/k``) must not be refused by the last bit of a floating-point product.
PRIOR_SHARE_SLACK = 1e-9
#: Seconds a move costs a trial (checkpoint, leave, restore on the new devices), used to decide whether a
#: spread or a water-filling step pays: the predicted saving over the trial's remaining budget must exceed it.
#: It is the prior until the executor has measured something better (``trialgroup/movecost.py``: what starting a
#: trial costs, then what its moves cost); other callers pass their own (:class:`PlannerSettings`).
DEFAULT_MOVE_COST_S = 5.0
#: Until a data-parallel trial's scaling is measured (by itself or, pooled, by others), it is assumed to follow
#: Amdahl's law with this serial fraction: ``time(k) = time(1) * (s + (1 - s) / k)``. With 0.5 the first extra
#: device is predicted to cut the time to 75%, the third to 94% of the previous: a cautious probe of at most
#: three extra devices, corrected by the first measurement.
DEFAULT_SERIAL_FRACTION = 0.5
#: Seconds per iteration assumed for a trial when nothing at all has been measured (not the trial, no other):
#: remaining work is then counted in iterations.
DEFAULT_SEC_PER_ITER = 1.0
#: Curve key of devices that do not name a class: all devices share one interference and scaling curve.
DEFAULT_CURVE_KEY = "default"
#: EMA weight of one sample in the pooled co-location and scaling curves. Each sample is one trial's step,
#: which differs between trials by more than one trial's iteration times differ, so the pooled curves average
#: over about 1/0.05 = 20 samples.
CURVE_EMA_ALPHA = 0.05
#: Co-location counts the slowdown cache of a curve covers at least (it grows on demand).
_CUM_MIN = 17
#: Predicted remaining seconds of a trial with an open-ended budget (``remaining=None``): larger than any real
#: one, so such trials go first and count as the heaviest load.
OPEN_ENDED_S = 1e18

# Actions of an Assignment.
KEEP = "keep"  # same devices as before: nothing to do
START = "start"  # was not placed: start (or resume from its checkpoint) on ``devices``
MOVE = "move"  # placed elsewhere before: at its next iteration boundary, checkpoint, leave, resume on ``devices``
RESIZE = "resize"  # same first device, other device count: restart from its checkpoint on ``devices``

# Regimes of a Plan.
INTRA = "intra"  # more computing trials than devices: co-locate
INTER = "inter"  # no more computing trials than devices: one or more whole devices per trial


class PlanError(FluidsalusError, ValueError):
    """Inconsistent planner input: duplicate trial or device ids, a negative estimate, a NaN ``remaining`` or
    ``turn``, a non-finite measured time."""


@dataclass(frozen=True)
class DeviceView:
    """What the planner knows of one device.

    Attributes:
        index: The device's index in the run (unique).
        capacity_bytes: Memory its lanes may reserve (the capacity of its
            :class:`~fluidsalus.gpu.lanes.LaneManager`).
        slots: Compute slots: the most lanes that run at once (``max_lanes``). Also the hard cap on co-located
            computing trials (more would only time-slice a lane, which adds no throughput).
        reserved_bytes: Memory held on the device by anything the planner is not given (another job, a
            trial being torn down); subtracted from ``capacity_bytes``.
        curve_key: Device class whose co-location and scaling curves apply (devices of one model share them).
        lanes: The device's lanes now (``LaneManager.lanes()``), or None. Given, the planner starts from them
            (trials no longer in its input leave them); without, it rebuilds each device's lanes by admitting the
            placed trials in arrival order, which can differ from the real lanes once lanes are shared.
    """

    index: int
    capacity_bytes: int
    slots: int
    reserved_bytes: int = 0
    curve_key: str = DEFAULT_CURVE_KEY
    lanes: tuple[LaneView, ...] | None = None


class TrialDemand(NamedTuple):
    """What the planner knows of one trial.

    Attributes:
        trial_id: Unique id.
        remaining: Iterations left to the budget of its group (None: open-ended, runs until it stops; ``inf`` is
            the same; NaN is refused).
        p_bytes: Persistent-memory estimate P.
        t_bytes: Ephemeral-memory estimate T.
        data_parallel: The trainable declared data-parallel support: the trial may get more than one device.
        devices: Where it is placed now (first: its home device); empty when it is not placed.
        paused: Resident but not computing (paused at its group's budget): it keeps its devices and memory but
            counts for no compute. A trial whose ``remaining`` is 0 is treated the same way.
        seq: Arrival order; ties between equal predictions go to the smaller ``seq``, then the smaller id.
        min_devices: Fewest devices a data-parallel trial runs on (its trainable's ``min_workers``). In the inter
            regime it grows to that many whatever the profiles say, and is never given back below it. In either
            regime a trial is never placed on fewer: a waiting one gets that many whole devices at once or waits,
            and of two that claim one device (their first ``min_devices``) the one with less predicted time is
            placed again on devices of its own, or waits.
        max_devices: Most devices it may get (``max_workers``; None: no bound).
        since_checkpoint: Iterations it ran after its last checkpoint (all of them when it has none). A move or
            a resize restarts it from that checkpoint and runs them again, so the planner adds their predicted
            time to ``move_cost_s`` (or the resize cost) when it weighs moving or growing this trial.
        restartable: False for a placed trial that has reported in its attempt and has no checkpoint: the
            executor never restarts such a trial (its work would be lost), so the planner never moves or
            resizes it (:meth:`Planner.restart_cost_s` is infinite) and weighs the next candidate instead.
        turn: Where a waiting trial stands when its searcher's trials take turns by progress
            (``BaseSearcher.turn_key``, e.g. PBT's): waiting trials with a smaller turn start first, whatever
            their predicted time; equal turns (the default, 0) leave the order to the predicted time. ``inf``
            and ``-inf`` order as numbers; NaN is refused (it has no place in the order).
    """

    trial_id: str
    remaining: float | None
    p_bytes: int
    t_bytes: int
    data_parallel: bool = False
    devices: tuple[int, ...] = ()
    paused: bool = False
    seq: int = 0
    min_devices: int = 1
    max_devices: int | None = None
    since_checkpoint: int = 0
    restartable: bool = True
    turn: float = 0.0

    @property
    def computing(self) -> bool:
        """Not paused and with budget left."""
        return not self.paused and (self.remaining is None or self.remaining > 0)


class Assignment(NamedTuple):
    """Where a placed trial runs after the plan, and what the executor must do about it.

    Attributes:
        trial_id: The trial.
        devices: Its devices (first: home; several only for a data-parallel trial).
        previous: Its devices before the plan (empty: it was not placed).
        action: ``KEEP``, ``START``, ``MOVE`` or ``RESIZE``.
    """

    trial_id: str
    devices: tuple[int, ...]
    previous: tuple[int, ...]
    action: str


@dataclass(frozen=True)
class Plan:
    """The planner's output.

    Attributes:
        regime: ``INTRA`` or ``INTER``.
        assignments: Every placed trial, in the order the planner decided them (kept ones first).
        queued: Trials not placed, first to start first (longest predicted remaining time first; smallest
            :attr:`TrialDemand.turn` before that). Includes the preempted and the unplaceable ones.
        preempted: Trials that were placed and are not any more (their memory no longer fits): checkpoint them
            at their next iteration boundary and queue them.
        unplaceable: Trials whose ``P + T`` exceeds every device: they can never run here.
        held: ``(trial_id, devices)`` of running trials the plan would have moved to ``devices`` (their crowded
            device to an idle one) and left where they are because they cannot restart
            (:attr:`TrialDemand.restartable` is False): the executor records why (a ``plan_refused`` event). One
            trial per crowded device, and only while that move would still even the plan out (its target was not
            given other trials meanwhile).
    """

    regime: str
    assignments: tuple[Assignment, ...]
    queued: tuple[str, ...]
    preempted: tuple[str, ...] = ()
    unplaceable: tuple[str, ...] = ()
    held: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def placement(self, trial_id: str) -> tuple[int, ...] | None:
        """The devices of a placed trial, or None when it is queued or unknown."""
        for a in self.assignments:
            if a.trial_id == trial_id:
                return a.devices
        return None

    def by_trial(self) -> dict[str, Assignment]:
        """``trial_id -> Assignment`` of the placed trials."""
        return {a.trial_id: a for a in self.assignments}

    @property
    def changes(self) -> tuple[Assignment, ...]:
        """The assignments the executor must act on (every action but ``KEEP``)."""
        return tuple(a for a in self.assignments if a.action != KEEP)

    @property
    def starts(self) -> tuple[Assignment, ...]:
        """Trials to start (or resume from a checkpoint) on their devices."""
        return tuple(a for a in self.assignments if a.action == START)

    @property
    def moves(self) -> tuple[Assignment, ...]:
        """Trials to move at their next iteration boundary, from a checkpoint (``MOVE`` and ``RESIZE``)."""
        return tuple(a for a in self.assignments if a.action in (MOVE, RESIZE))


@dataclass(frozen=True)
class PlannerSettings:
    """Thresholds of the planner (see the module constants for their reasoning).

    Attributes:
        min_marginal_gain: :data:`MIN_MARGINAL_GAIN`.
        min_scaling_gain: :data:`MIN_SCALING_GAIN`.
        move_cost_s: :data:`DEFAULT_MOVE_COST_S`: what moving a trial to other devices costs it.
        resize_cost_s: What giving a running data-parallel trial another device costs it (a restart on more
            devices, with a new process group), or None for the same as ``move_cost_s``.
        prior_share: The share of a device the user expects one trial to need (Ray Tune's ``with_resources``
            ``gpu``: ``0.25`` for a quarter), or None for no hint. A hint, not a share: it only replaces the
            just-paying prior of *unmeasured* co-location steps (:meth:`ProfileBook.colocation_pays`), so that
            packing starts at ``1 / prior_share`` trials per device and goes beyond one measured step at a time.

    Raises:
        ConfigError: A threshold outside ``[0, 1)``, a negative move or resize cost or a non-positive share.
    """

    min_marginal_gain: float = MIN_MARGINAL_GAIN
    min_scaling_gain: float = MIN_SCALING_GAIN
    move_cost_s: float = DEFAULT_MOVE_COST_S
    prior_share: float | None = None
    resize_cost_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_marginal_gain", "min_scaling_gain"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {value!r}")
        if not self.move_cost_s >= 0.0:
            raise ConfigError(f"move_cost_s: must be >= 0 seconds, got {self.move_cost_s!r}")
        if self.resize_cost_s is not None and not self.resize_cost_s >= 0.0:
            raise ConfigError(f"resize_cost_s: must be None or >= 0 seconds, got {self.resize_cost_s!r}")
        if self.prior_share is not None and not (isinstance(self.prior_share, (int, float))
                                                 and 0.0 < self.prior_share < math.inf):
            raise ConfigError(f"prior_share: must be None or a number > 0 (a fraction of a device), "
                              f"got {self.prior_share!r}")

    @property
    def grow_cost_s(self) -> float:
        """What one more device costs a running trial: ``resize_cost_s``, else ``move_cost_s``."""
        return self.move_cost_s if self.resize_cost_s is None else self.resize_cost_s


# ------------------------------------------------------------------------------------------ profiles


def _amdahl_ratio(serial: float, k: int) -> float:
    """``time(k + 1) / time(k)`` under Amdahl's law with serial fraction ``serial``."""
    serial = min(max(serial, 0.0), 1.0)
    return (serial + (1.0 - serial) / (k + 1)) / (serial + (1.0 - serial) / k)


class ProfileBook:
    """Measured seconds per iteration, per trial and per allocation tried, and the curves pooled from them.

    An *allocation* is ``(k, n)``: ``k`` devices, ``n`` computing trials co-located on the trial's home device
    (itself included). :meth:`record` keeps an EMA per ``(trial, k, n)``. When a trial's allocation changes to a
    neighbouring one (a co-runner joins or leaves, ``k = 1``; or it gains or loses a device, ``n = 1``), the ratio
    of its new time to its smoothed time at the old allocation is one sample ``log(time(n+1) / time(n))`` of its
    curve key's co-location step ``n`` (or scaling step ``k``), pooled by an EMA over all trials.

    Args:
        alpha: EMA weight of a new sample of one trial's time at one allocation.
        curve_alpha: EMA weight of one sample of a pooled curve step.
        min_marginal_gain: The gain an unmeasured co-location step is assumed to have (it "just pays"); keep it
            equal to the planner's threshold.
    """

    def __init__(
        self, alpha: float = DEFAULT_EMA_ALPHA, curve_alpha: float = CURVE_EMA_ALPHA,
        min_marginal_gain: float = MIN_MARGINAL_GAIN,
    ) -> None:
        Ema(alpha)  # validates alpha
        Ema(curve_alpha)
        self.alpha = alpha
        self.curve_alpha = curve_alpha
        self.min_marginal_gain = min_marginal_gain
        self._times: dict[str, dict[tuple[int, int], Ema]] = {}
        self._key: dict[str, str] = {}  # trial -> curve key of its last record
        self._last: dict[str, tuple[int, int]] = {}  # trial -> allocation of its last record
        self._coloc: dict[str, dict[int, Ema]] = {}  # curve key -> n -> EMA of log(time(n+1) / time(n))
        self._scale: dict[str, dict[int, Ema]] = {}  # curve key -> k -> EMA of log(time(k+1) / time(k))
        self._typical_sum = 0.0  # sum over trials of their first alone-equivalent sample
        self._alone: dict[str, float] = {}  # trial -> alone estimate as of its last record
        self._cum: dict[str, list[float]] = {}  # curve key -> slowdown(n) for n = 1, 2, ... (cache)
        self._typical_count = 0
        # trial -> the count of alone-estimate changes when its own last changed, least recent first (a trial
        # moves to the end when it changes): what changed since a count is a walk back from the end.
        self._journal: dict[str, int] = {}
        self._changes = 0
        self._classes_seen: set[str] = set()  # curve keys with at least one recorded iteration
        # trial -> curve key -> [scaling_ratio(trial, k, curve key) for k = 1, 2, ...] as computed (a cache: the
        # planner asks the same ratios at every plan). Ratio k reads the trial's EMAs at (k, 1), (k + 1, 1) and
        # (1, 1), else the pooled step k of the curve key: a record at (k, 1) drops the trial's ratios from k - 1 on
        # (all of them for k = 1; a record at n > 1 changes none), forget() drops them all, and a pooled step k
        # that moves drops, for its curve key, the lists whose ratio k came from the pooled or default step.
        self._ratios: dict[str, dict[str, list[tuple[float, str]]]] = {}
        # (curve key, k) -> trials whose cached ratio k for that key came from the pooled or default step (some
        # may have been dropped since): those a change of pooled step k drops
        self._pooled_users: dict[tuple[str, int], set[str]] = {}
        # trial -> (devices, curve key) -> predict(trial, devices, 1, curve key), for trials with an alone estimate
        # of their own (a cache; the co-location curves do not enter: slowdown(1) is 1). Dropped for a trial at
        # each of its records and at forget(), all of them when a pooled scaling step moves.
        self._predictions: dict[str, dict[tuple[int, str], float]] = {}

    # ---------------------------------------------------------------- recording

    def record(
        self,
        trial_id: str,
        sec_per_iter: float,
        *,
        devices: int = 1,
        colocated: int = 1,
        curve_key: str = DEFAULT_CURVE_KEY,
    ) -> None:
        """Fold in one measured iteration.

        Args:
            trial_id: The trial.
            sec_per_iter: The iteration's duration, in seconds (> 0 and finite).
            devices: Devices the trial ran on (``k``).
            colocated: Computing trials on its home device during the iteration, itself included (``n``).
            curve_key: The home device's class.

        Raises:
            PlanError: A non-positive or non-finite time (an infinite one made the next neighbouring record fail
                on ``log(0)``), or a non-positive allocation.
        """
        if not 0 < sec_per_iter < math.inf or devices < 1 or colocated < 1:
            raise PlanError(f"record({trial_id!r}): need a finite sec_per_iter > 0, devices >= 1, colocated >= 1; "
                            f"got {sec_per_iter!r}, {devices!r}, {colocated!r}")
        key = (devices, colocated)
        per = self._times.get(trial_id)
        self._classes_seen.add(curve_key)
        if per is not None and self._last[trial_id] == key and self._key[trial_id] == curve_key:
            # The allocation of its last record (most records): its EMA there and its alone estimate move.
            value = per[key].update(sec_per_iter)
            if colocated == 1:
                self._drop_ratios(trial_id, devices)
            self._predictions.pop(trial_id, None)
            one = per.get((1, 1))
            if one is not None:
                self._alone[trial_id] = one.value
            elif devices == 1:
                cum = self._cum.get(curve_key)
                if cum is not None and len(cum) >= colocated:  # _slowdown, inlined
                    self._alone[trial_id] = value / math.exp(cum[colocated - 1])
                else:
                    self._alone[trial_id] = value / self._slowdown(curve_key, colocated)
            else:
                self._alone[trial_id] = value / (self._slowdown(curve_key, colocated)
                                                 * self._scale_factor(curve_key, devices))
            changes = self._changes = self._changes + 1  # _note, inlined
            journal = self._journal
            del journal[trial_id]  # (it has an entry: it was recorded before)
            journal[trial_id] = changes
            return
        if per is None:
            per = self._times[trial_id] = {}
            equivalent = sec_per_iter / (self._slowdown(curve_key, colocated) * self._scale_factor(curve_key, devices))
            self._typical_sum += equivalent
            self._typical_count += 1
            previous = key
        else:
            previous = self._last[trial_id]
        self._last[trial_id] = key
        self._key[trial_id] = curve_key
        ema = per.get(key)
        if ema is None:
            ema = per[key] = Ema(self.alpha)
        value = ema.update(sec_per_iter)
        if colocated == 1:
            self._drop_ratios(trial_id, devices)
        self._predictions.pop(trial_id, None)
        if previous != key:
            # The trial just changed allocation: one sample of the step between its last allocation (its recent
            # smoothed time there) and this one, if they are neighbours.
            k0, n0 = previous
            before = per[previous].value
            if k0 == devices == 1 and abs(n0 - colocated) == 1:
                low = min(n0, colocated)
                self._step(self._coloc, curve_key, low, value / before if colocated > n0 else before / value)
            elif n0 == colocated == 1 and abs(k0 - devices) == 1:
                low = min(k0, devices)
                self._step(self._scale, curve_key, low, value / before if devices > k0 else before / value)
        one = per.get((1, 1))
        if one is not None:
            self._alone[trial_id] = one.value
        elif devices == 1:
            self._alone[trial_id] = value / self._slowdown(curve_key, colocated)
        else:
            self._alone[trial_id] = value / (self._slowdown(curve_key, colocated)
                                             * self._scale_factor(curve_key, devices))
        self._note(trial_id)

    def _drop_ratios(self, trial_id: str, k: int) -> None:
        """The trial's EMA at ``(k, 1)`` changed: drop its cached scaling ratios that read it (see ``_ratios``)."""
        known = self._ratios.get(trial_id)
        if known is not None:
            if k == 1:
                del self._ratios[trial_id]
            else:
                for ratios in known.values():
                    del ratios[k - 2:]

    def _note(self, trial_id: str) -> None:
        """The trial's alone estimate changed (see :meth:`changed_since`)."""
        self._changes += 1
        journal = self._journal
        journal.pop(trial_id, None)
        journal[trial_id] = self._changes

    def changed_since(self, count: int) -> tuple[list[str], int]:
        """The trials whose alone estimate changed (or that were forgotten) after ``count`` changes, and the count
        now: the planner updates only those between plans.

        Args:
            count: What an earlier call returned (0: from the start).

        Returns:
            ``(trial ids, count now)``.
        """
        if count >= self._changes:
            return [], self._changes
        out = []
        for tid, at in reversed(self._journal.items()):
            if at <= count:
                break
            out.append(tid)
        return out, self._changes

    def _step(self, curves: dict[str, dict[int, Ema]], curve_key: str, step: int, ratio: float) -> None:
        if not 0.0 < ratio < math.inf:
            return  # two finite times too far apart for a float ratio (1e-300 s, then 1e300 s): no sample
        steps = curves.get(curve_key)
        if steps is None:
            steps = curves[curve_key] = {}
        ema = steps.get(step)
        if ema is None:
            ema = steps[step] = Ema(self.curve_alpha)
            old = math.log((step + 1) / step / (1.0 + self.min_marginal_gain))  # the fallback it replaces
        else:
            old = ema.value
        new = ema.update(math.log(ratio))
        if curves is self._scale:  # the ratios at this step that came from it, or from the default it replaces
            for tid in self._pooled_users.pop((curve_key, step), ()):
                ratios = self._ratios.get(tid, {}).get(curve_key)
                if ratios is not None and len(ratios) >= step and ratios[step - 1][1] in ("pooled", "default"):
                    del ratios[step - 1:]
            self._predictions.clear()
        if curves is self._coloc:
            cum = self._cum.get(curve_key)
            if cum is not None:  # log slowdown(m) for m > step moves by the step's change
                delta = new - old
                for m in range(step, len(cum)):
                    cum[m] += delta

    def forget(self, trial_id: str) -> None:
        """Drop a trial's own measurements (the pooled curves keep what it contributed)."""
        self._times.pop(trial_id, None)
        self._ratios.pop(trial_id, None)
        self._predictions.pop(trial_id, None)
        self._key.pop(trial_id, None)
        self._last.pop(trial_id, None)
        if self._alone.pop(trial_id, None) is not None:
            self._note(trial_id)

    # ---------------------------------------------------------------- curves

    def colocation_step(self, curve_key: str, n: int) -> float | None:
        """Measured ``log(time(n+1) / time(n))`` of a trial when one more computing trial joins, or None."""
        ema = self._coloc.get(curve_key, {}).get(n)
        return None if ema is None else ema.value

    def colocation_pays(self, curve_key: str, n: int, min_gain: float, prior_share: float | None = None) -> bool:
        """Does an ``(n+1)``-th computing trial pay on a device of class ``curve_key``? The planner's gate.

        A measured step pays when its gain (:meth:`colocation_gain`) reaches ``min_gain``. An unmeasured one
        follows :meth:`colocation_gain`'s fallbacks, and with a user's hint ``prior_share`` (the share of a
        device one trial is expected to need) it pays without measurement only while the hinted shares fit
        (``(n + 1) * prior_share <= 1``). Beyond that it is a probe, taken once the step below it is measured
        (for ``n == 1``: once any trial of the class is): each step past the hint is measured before the next.
        So a hint starts packing where the user expects it to pay and never stops it where measurements say
        more pays.

        Args:
            curve_key: Device class.
            n: Computing trials already on the device.
            min_gain: The planner's threshold (``PlannerSettings.min_marginal_gain``).
            prior_share: ``PlannerSettings.prior_share``.

        Returns:
            True to let one more computing trial in.
        """
        gain, measured = self.colocation_gain(curve_key, n, min_gain)
        if gain < min_gain:
            return False
        if measured or prior_share is None or (n + 1) * prior_share <= 1.0 + PRIOR_SHARE_SLACK:
            return True
        if n == 1:
            return curve_key in self._classes_seen
        return self.colocation_step(curve_key, n - 1) is not None

    def colocation_gain(self, curve_key: str, n: int, min_gain: float | None = None) -> tuple[float, bool]:
        """Marginal gain of co-locating an ``(n+1)``-th computing trial on a device of class ``curve_key``.

        With ``X(n) = n / slowdown(n)`` the aggregate throughput of ``n`` co-located trials (each runs
        ``slowdown(n)`` times slower than alone), the gain is ``X(n+1) / X(n) - 1 = (n+1)/n * exp(-step_n) - 1``.

        Fallbacks: an unmeasured step is assumed to *just pay*: its gain is ``min_gain`` (so packing proceeds
        up to the device's slots until measurements say otherwise), unless a smaller step was measured and did
        not pay, in which case the curve is taken to be saturated (gain 0). ``n == 0`` (an empty device)
        always pays.

        Args:
            curve_key: Device class.
            n: Computing trials already on the device.
            min_gain: The threshold the caller uses (None: the book's ``min_marginal_gain``).

        Returns:
            ``(gain, measured)``.
        """
        if min_gain is None:
            min_gain = self.min_marginal_gain
        if n <= 0:
            return math.inf, True
        step = self.colocation_step(curve_key, n)
        if step is not None:
            return (n + 1) / n * math.exp(-step) - 1.0, True
        for m in range(1, n):
            lower = self.colocation_step(curve_key, m)
            if lower is not None and (m + 1) / m * math.exp(-lower) - 1.0 < min_gain:
                return 0.0, False
        return min_gain, False

    def _slowdown(self, curve_key: str, n: int) -> float:
        """``time(n) / time(1)`` for co-location ``n``, from the measured steps (unmeasured: just paying)."""
        cum = self._cum.get(curve_key)
        if cum is None or len(cum) < n:
            cum = self._cum[curve_key] = self._cumulative(curve_key, n)
        return math.exp(cum[n - 1]) if n >= 1 else 1.0

    def _cumulative(self, curve_key: str, n: int) -> list[float]:
        """``log slowdown(m)`` for ``m = 1 .. max(n, CUM_MIN)``."""
        gain = self.min_marginal_gain
        steps = self._coloc.get(curve_key, {})
        cum = [0.0]
        for m in range(1, max(n, _CUM_MIN)):
            ema = steps.get(m)
            cum.append(cum[-1] + (ema.value if ema is not None else math.log((m + 1) / m / (1.0 + gain))))
        return cum

    def slowdown(self, curve_key: str, n: int) -> float:
        """How many times slower a trial runs with ``n`` computing trials on its device than alone.

        Unmeasured steps use the just-paying fallback of :meth:`colocation_gain`.
        """
        return self._slowdown(curve_key, n)

    def scaling_ratio(self, trial_id: str, k: int, curve_key: str = DEFAULT_CURVE_KEY) -> tuple[float, str]:
        """Predicted ``time(k + 1) / time(k)`` of a data-parallel trial, and where the prediction came from.

        In order: the trial's own measurements at ``k`` and ``k + 1`` (``"trial"``); an Amdahl fit of its own times at
        1 and ``k`` devices (``"fit"``, ``k >= 2``); the pooled step of its curve key (``"pooled"``); Amdahl's law
        with :data:`DEFAULT_SERIAL_FRACTION` (``"default"``). The trial's own fit goes before the pooled step:
        trials differ in how they scale (their serial fraction) far more than one trial's iterations differ, so
        a step pooled over trials that scale better or worse is a worse guess than the trial's own two points.

        Args:
            trial_id: The trial.
            k: Devices it has.
            curve_key: Its home device's class.

        Returns:
            ``(ratio, source)``.
        """
        known = self._ratios.get(trial_id)
        if known is not None:
            ratios = known.get(curve_key)
            if ratios is not None and len(ratios) >= k >= 1:
                return ratios[k - 1]
        if k < 1:
            return self._scaling_ratio(trial_id, k, curve_key)
        return self.scaling_ratios(trial_id, k, curve_key)[k - 1]

    def scaling_ratios(self, trial_id: str, k: int, curve_key: str = DEFAULT_CURVE_KEY) -> list[tuple[float, str]]:
        """``[scaling_ratio(trial_id, m, curve_key) for m = 1 .. k]`` (at least; ``k >= 1``), from the book's cache
        (see ``_ratios`` in ``__init__``). The caller must not change the list."""
        known = self._ratios.get(trial_id)
        if known is None:
            known = self._ratios[trial_id] = {}
        ratios = known.get(curve_key)
        if ratios is None:
            ratios = known[curve_key] = []
        while len(ratios) < k:
            m = len(ratios) + 1
            ratio = self._scaling_ratio(trial_id, m, curve_key)
            ratios.append(ratio)
            if ratio[1] in ("pooled", "default"):
                users = self._pooled_users.get((curve_key, m))
                if users is None:
                    users = self._pooled_users[(curve_key, m)] = set()
                users.add(trial_id)
        return ratios

    def _scaling_ratio(self, trial_id: str, k: int, curve_key: str) -> tuple[float, str]:
        """:meth:`scaling_ratio`, computed."""
        per = self._times.get(trial_id, {})
        now, nxt = per.get((k, 1)), per.get((k + 1, 1))
        if now is not None and nxt is not None:
            return nxt.value / now.value, "trial"
        one = per.get((1, 1))
        if k >= 2 and now is not None and one is not None:
            serial = (k * now.value / one.value - 1.0) / (k - 1)
            return _amdahl_ratio(serial, k), "fit"
        pooled = self._scale.get(curve_key, {}).get(k)
        if pooled is not None:
            return math.exp(pooled.value), "pooled"
        return _amdahl_ratio(DEFAULT_SERIAL_FRACTION, k), "default"

    def _scale_factor(self, curve_key: str, k: int) -> float:
        """``time(k) / time(1)`` from the pooled steps (unmeasured steps: the Amdahl default)."""
        factor = 1.0
        steps = self._scale.get(curve_key, {})
        for m in range(1, k):
            ema = steps.get(m)
            factor *= math.exp(ema.value) if ema is not None else _amdahl_ratio(DEFAULT_SERIAL_FRACTION, m)
        return factor

    # ---------------------------------------------------------------- predictions

    def measured(self, trial_id: str, devices: int = 1, colocated: int = 1) -> float | None:
        """The trial's smoothed time at exactly this allocation, or None if it was never tried."""
        ema = self._times.get(trial_id, {}).get((devices, colocated))
        return None if ema is None else ema.value

    def typical(self) -> float:
        """Mean alone-equivalent time per iteration of the trials measured so far (their first sample, converted
        by the curves), or :data:`DEFAULT_SEC_PER_ITER` before any measurement."""
        if not self._typical_count:
            return DEFAULT_SEC_PER_ITER
        return self._typical_sum / self._typical_count

    def knows(self, trial_id: str) -> bool:
        """Whether the trial has an alone time of its own (it was measured); else :meth:`alone` is typical."""
        return trial_id in self._alone

    def alone(self, trial_id: str) -> float:
        """Predicted seconds per iteration of the trial alone on one device, as of its last measurement.

        Its own EMA at ``(1, 1)`` when it ran alone; else its last measured allocation's EMA divided by the
        co-location slowdown and the scaling factor of that allocation (pooled curves at the time of that
        measurement, unmeasured steps by their fallbacks); a trial never measured gets :meth:`typical`.
        """
        value = self._alone.get(trial_id)
        return self.typical() if value is None else value

    def predict(self, trial_id: str, devices: int = 1, colocated: int = 1, curve_key: str | None = None) -> float:
        """Predicted seconds per iteration at an allocation, with fallbacks for allocations never tried.

        1. The trial's own EMA at exactly ``(devices, colocated)``.
        2. Its alone time (:meth:`alone`) times the slowdown of ``colocated`` (:meth:`slowdown`) and the
           product of the scaling ratios up to ``devices`` (:meth:`scaling_ratio`: its own steps first).
        3. A trial never measured: :meth:`typical` times the factors.

        Args:
            trial_id: The trial.
            devices: ``k``.
            colocated: ``n``.
            curve_key: Device class (default: that of the trial's last record).

        Returns:
            Seconds per iteration.
        """
        cacheable = colocated == 1 and curve_key is not None
        if cacheable:
            known = self._predictions.get(trial_id)
            if known is not None:
                value = known.get((devices, curve_key))  # type: ignore[arg-type]
                if value is not None:
                    return value
        exact = self.measured(trial_id, devices, colocated)
        if exact is not None:
            value = exact
        else:
            key = curve_key if curve_key is not None else self._key.get(trial_id, DEFAULT_CURVE_KEY)
            base = self.alone(trial_id)
            factor = 1.0
            for m in range(1, devices):
                factor *= self.scaling_ratio(trial_id, m, key)[0]
            value = base * factor * self._slowdown(key, colocated)
        if cacheable and trial_id in self._alone:  # (a trial never measured follows typical(), which moves)
            known = self._predictions.get(trial_id)
            if known is None:
                known = self._predictions[trial_id] = {}
            known[(devices, curve_key)] = value  # type: ignore[index]
        return value

    def trials(self) -> list[str]:
        """Trials with measurements."""
        return list(self._times)


# ------------------------------------------------------------------------------------------ memory


class LaneMemory:
    """The memory side of one device's :class:`~fluidsalus.gpu.lanes.LaneManager`: the Salus rule and best fit,
    without the queue, events or out-of-memory handling.

    :meth:`admit` answers exactly as ``LaneManager(capacity, max_lanes, grow_lanes=True).admit`` would (a new
    lane of ``P + T`` if one may open; else the smallest lane where ``sum(P) + P_j + max(T) <= C_l``, ties to
    the older lane; else the lane that needs the least growth, if the device has it unreserved; ties to the
    smaller, then older lane), and :meth:`leave` frees as it does (a lane dissolves when its last member
    leaves; a shared lane never shrinks). tests/test_planner.py checks both against ``LaneManager`` on random
    sequences. It exists because the planner asks these questions thousands of times per plan.

    Args:
        capacity: Bytes the lanes may reserve.
        max_lanes: Most lanes at once.
    """

    __slots__ = ("capacity", "max_lanes", "reserved", "_lanes", "_where", "_next")

    def __init__(self, capacity: int, max_lanes: int) -> None:
        self.capacity = capacity
        self.max_lanes = max_lanes
        self.reserved = 0
        # lane: [lane_id, capacity, sum_p, max_t, members {trial_id: (p, t)}], oldest first
        self._lanes: list[list] = []
        self._where: dict[str, list] = {}
        self._next = 0

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._where

    def __len__(self) -> int:
        return len(self._where)

    def admit(self, trial_id: str, p: int, t: int) -> bool:
        """Place a trial by best fit; False (nothing changes) when it would have to wait."""
        unreserved = self.capacity - self.reserved
        if p + t > self.capacity:
            return False
        lanes = self._lanes
        if len(lanes) < self.max_lanes and p + t <= unreserved:
            lane = [self._next, p + t, 0, 0, {}]
            self._next += 1
            lanes.append(lane)
            self.reserved += p + t
        else:
            lane = None
            for cand in lanes:
                if cand[2] + p + (cand[3] if cand[3] > t else t) <= cand[1] and (lane is None or cand[1] < lane[1]):
                    lane = cand
            if lane is None:
                best = None
                for cand in lanes:
                    growth = cand[2] + p + (cand[3] if cand[3] > t else t) - cand[1]
                    if growth <= unreserved and (best is None or (growth, cand[1]) < best[:2]):
                        best = (growth, cand[1], cand)
                if best is None:
                    return False
                lane = best[2]
                lane[1] += best[0]
                self.reserved += best[0]
        lane[2] += p
        if t > lane[3]:
            lane[3] = t
        lane[4][trial_id] = (p, t)
        self._where[trial_id] = lane
        return True

    def leave(self, trial_id: str) -> None:
        """Remove a placed trial (unknown ids are ignored)."""
        lane = self._where.pop(trial_id, None)
        if lane is None:
            return
        members = lane[4]
        del members[trial_id]
        if not members:
            self._lanes.remove(lane)
            self.reserved -= lane[1]
            return
        lane[2] = sum(p for p, _ in members.values())
        lane[3] = max(t for _, t in members.values())

    @classmethod
    def from_lanes(cls, capacity: int, max_lanes: int, lanes: Sequence[LaneView]) -> LaneMemory:
        """The lanes of a device as its lane manager reports them (``LaneManager.lanes()``)."""
        mem = cls(capacity, max_lanes)
        for view in lanes:
            members = {tid: (int(p), int(t)) for tid, (p, t) in view.members.items()}
            lane = [mem._next, int(view.capacity), sum(p for p, _ in members.values()),
                    max((t for _, t in members.values()), default=0), members]
            mem._next += 1
            mem._lanes.append(lane)
            mem.reserved += lane[1]
            for tid in members:
                mem._where[tid] = lane
        return mem

    def copy(self) -> LaneMemory:
        """An independent copy (to try evictions and undo them)."""
        other = LaneMemory(self.capacity, self.max_lanes)
        other.reserved, other._next = self.reserved, self._next
        for lane in self._lanes:
            clone = [lane[0], lane[1], lane[2], lane[3], dict(lane[4])]
            other._lanes.append(clone)
            for tid in clone[4]:
                other._where[tid] = clone
        return other

    def bound(self) -> tuple[int, int]:
        """``(B, A)``: a trial with ``P + T > B`` or ``P > A`` cannot be admitted (a necessary condition)."""
        unreserved = self.capacity - self.reserved
        b = unreserved if len(self._lanes) < self.max_lanes else -1
        a = b
        for lane in self._lanes:
            room = lane[1] - lane[2] + unreserved
            b = max(b, room)
            a = max(a, room - lane[3])
        return b, a

    def requirements(self) -> list[int]:
        """``sum(P) + max(T)`` of each lane (tests use it to check the rule)."""
        return [lane_requirement([p for p, _ in lane[4].values()], [t for _, t in lane[4].values()])
                for lane in self._lanes]

    def lane_capacities(self) -> list[int]:
        """Capacity of each lane, oldest first."""
        return [lane[1] for lane in self._lanes]


# ------------------------------------------------------------------------------------------ planning


def lane_members(view: DeviceView) -> frozenset[str]:
    """The trials in a device view's reported lanes (empty without lanes)."""
    return frozenset(tid for lane in view.lanes or () for tid in lane.members)


#: :class:`Planner` keeps the reported-lane members of at most this many device views per device (older views
#: of a device are dropped when the cache grows past it).
_SNAP_CACHE_FACTOR = 4
#: Sort key of trials by arrival: ``(seq, trial_id)``.
_ARRIVAL = operator.attrgetter("seq", "trial_id")
_TRIAL_ID = operator.attrgetter("trial_id")
_DEVICES = operator.attrgetter("devices")
_P_BYTES = operator.attrgetter("p_bytes")
_TURN = operator.attrgetter("turn")


def _by_turn(trials: list[TrialDemand]) -> list[TrialDemand]:
    """Waiting trials in queue order, stably sorted by :attr:`TrialDemand.turn` when their turns differ (in place)."""
    if trials:
        first = trials[0].turn
        if any(t.turn != first for t in trials):
            trials.sort(key=_TURN)
    return trials
_T_BYTES = operator.attrgetter("t_bytes")
_FIRST = operator.itemgetter(0)
_MIN_DEVICES = operator.attrgetter("min_devices")
_DATA_PARALLEL = operator.attrgetter("data_parallel")
_SECOND = operator.itemgetter(1)


def _can_leave(t: TrialDemand) -> bool:
    """False for a placed trial that cannot be restarted (it sorts first: it stays), True for the others."""
    return not t.devices or t.restartable


def _held_devices(devices: list[int], capacity: dict[int, int], size: int, fewest: int,
                  shrink: bool) -> list[int] | None:
    """The devices that a trial placed on several devices (or needing several) keeps, in either regime: of
    ``devices`` (those of its placement that exist, in placement order) the ones whose capacity holds its ``size``
    (``P + T``), only the first ``fewest`` of them when it ``shrink``-s (a computing trial in the intra regime).
    ``fewest`` is the fewest devices it may be kept on: a computing trial's ``min_devices``; all of ``devices`` for
    one that is not computing (the executor never resizes a paused trial). None when one of them is too small for
    it and fewer than ``fewest`` of the others hold it: it is taken off them all (placed again, or preempted).
    (One left on fewer because devices are gone keeps them: :meth:`_Planning.settle_whole` places it again.)"""
    held = [d for d in devices if size <= capacity[d]]
    if len(held) < len(devices) and len(held) < fewest:
        return None
    return held[:fewest] if shrink else held


def _assignment(tid: str, devs: list[int], before: tuple[int, ...]) -> Assignment:
    """The assignment of a placed trial: its devices now and before, and what the executor must do."""
    devs_t = tuple(devs)
    make = tuple.__new__  # Assignment(...) without its Python-level __new__: this runs for every placed trial
    if devs_t == before:
        return make(Assignment, (tid, before, before, KEEP))
    if not before:
        return make(Assignment, (tid, devs_t, before, START))
    if devs_t[0] == before[0]:
        return make(Assignment, (tid, devs_t, before, RESIZE))
    return make(Assignment, (tid, devs_t, before, MOVE))


class _Alloc(dict):
    """``trial -> devices`` that remembers which trials were written or removed since it was built (the plan's
    placements: :meth:`_Planning.result` reuses the kept trials' assignments while none of them was touched).
    Reads are the dict's own."""

    __slots__ = ("touched",)

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.touched: set[str] = set()

    def __setitem__(self, key: str, value: list[int]) -> None:
        self.touched.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.touched.add(key)
        super().__delitem__(key)

    def pop(self, key: str, *default: object) -> object:  # type: ignore[override]
        self.touched.add(key)
        return super().pop(key, *default)


class _Planning:
    """State of one :func:`plan` call. Not reused across calls.

    Memory is checked on a :class:`LaneMemory` per device, built lazily: a device whose residents' ``P + T``
    sum to no more than its capacity holds them all whatever the lanes (each lane's capacity is at most the sum
    of its members' ``P + T``), so its lanes are only replayed, in the same order, when the plan first admits
    something there. The answers are those of an eager replay.
    """

    def __init__(
        self, trials: Sequence[TrialDemand], devices: Sequence[DeviceView], book: ProfileBook,
        cfg: PlannerSettings, snap_cache: dict[int, tuple[DeviceView, frozenset[str]]] | None = None,
    ) -> None:
        self.book, self.cfg = book, cfg
        self.devices = sorted(devices, key=lambda d: d.index)
        self.dev: dict[int, DeviceView] = {}
        self.capacity: dict[int, int] = {}
        for d in self.devices:
            if d.index in self.dev:
                raise PlanError(f"device index {d.index} appears twice")
            if d.slots < 1 or d.capacity_bytes < 0 or d.reserved_bytes < 0:
                raise PlanError(f"device {d.index}: needs slots >= 1 and non-negative memory, got {d!r}")
            self.dev[d.index] = d
            self.capacity[d.index] = max(0, d.capacity_bytes - d.reserved_bytes)
        self.trials: dict[str, TrialDemand] = {}
        self.rem: dict[str, float] = {}
        self.comp: set[str] = set()  # computing trials: not paused, budget left
        alone_of = book._alone.get
        typical = book.typical()
        by_id, rem, comp = self.trials, self.rem, self.comp
        for t in trials:  # the hot loop of a plan: one pass, locals only
            tid, remaining = t.trial_id, t.remaining
            if t.p_bytes < 0 or t.t_bytes < 0:
                raise PlanError(f"trial {tid!r}: negative memory estimate")
            if t.since_checkpoint < 0:
                raise PlanError(f"trial {tid!r}: since_checkpoint must be >= 0 iterations, got {t.since_checkpoint}")
            if t.turn != t.turn:  # NaN: the order of waiting trials would depend on the order of the input
                raise PlanError(f"trial {tid!r}: turn must be a number (smaller goes first), got {t.turn!r}")
            if type(t.devices) is not tuple:
                t = t._replace(devices=tuple(t.devices))
            by_id[tid] = t
            if remaining is None:
                rem[tid] = OPEN_ENDED_S
                if not t.paused:
                    comp.add(tid)
            elif remaining <= 0:
                rem[tid] = 0.0
            elif remaining < math.inf:
                alone = alone_of(tid)
                rem[tid] = remaining * (typical if alone is None else alone)
                if not t.paused:
                    comp.add(tid)
            elif remaining == math.inf:  # an infinite budget is an open-ended one (its sums would make NaN)
                rem[tid] = OPEN_ENDED_S
                if not t.paused:
                    comp.add(tid)
            else:
                raise PlanError(f"trial {tid!r}: remaining must be None (open-ended) or a number of iterations, "
                                f"got {remaining!r}")
        if len(by_id) != len(trials):
            seen: set[str] = set()
            for t in trials:
                if t.trial_id in seen:
                    raise PlanError(f"trial {t.trial_id!r} appears twice")
                seen.add(t.trial_id)
        self._snap: dict[int, frozenset[str]] = {}  # device -> trials in its reported lanes
        for d in self.devices:
            if d.lanes is not None:
                cached = snap_cache.get(id(d)) if snap_cache is not None else None
                if cached is not None and cached[0] is d:
                    self._snap[d.index] = cached[1]
                else:
                    members = lane_members(d)
                    self._snap[d.index] = members
                    if snap_cache is not None:
                        snap_cache[id(d)] = (d, members)
        self._fresh()

    def _fresh(self) -> None:
        """The state a plan starts from, before :meth:`keep` (also used by :class:`_KeptCache`)."""
        indices = self.dev
        self._mem: dict[int, LaneMemory] = {}
        self._pending: defaultdict[int, list[str]] = defaultdict(list)  # admitted, not yet replayed
        self._leaving: dict[int, set[str]] = {}  # device -> reported members that leave its lanes in this plan
        # trial -> devices after the plan; a list here is never changed in place (it may be shared with the
        # Planner's cache): a phase that changes a placement assigns a new list. No phase depends on the order of
        # its entries (the decision order is ``order``): the cache copies its own.
        self.alloc: dict[str, list[int]] = {}
        self.order: list[str] = []  # decision order of placed trials
        self.ncomp: dict[int, int] = dict.fromkeys(indices, 0)
        self.load: dict[int, float] = dict.fromkeys(indices, 0.0)
        self._gates: dict[tuple[str, int], bool] = {}
        self._rejected: defaultdict[int, list[tuple[int, int]]] = defaultdict(list)
        self._no_room: list[tuple[int, int]] = []  # (P, T) that no device admits even without its paused trials
        self._paused_on: dict[int, list[str]] | None = None  # device -> its placed paused trials, latest first
        # Residents that keep() may leave on several devices (the only trials that can hold devices whole when the
        # later phases begin); given by _KeptCache, which must not see it changed.
        self.multi: set[str] = set()
        self.spread: list[str] = []  # trials the phases after keep() placed on whole devices (place_whole)
        self._displaced: set[str] = set()  # kept trials settle_whole took off their devices (still in ``order``)
        self._full: set[int] = set()  # devices whose replay could not hold every resident
        self._unheld: dict[int, list[TrialDemand]] = {}  # full device -> residents its replay could not admit
        self._reopened: list[int] = []  # full devices that make_room's evictions let hold every resident
        self.held: dict[str, int] = {}  # running trial -> the device a move would have taken it to (Plan.held)
        self._held_from: set[int] = set()  # devices one of whose trials is held (one says why: the others wait)
        self.left: list[TrialDemand] | None = None  # intra: candidates left unplaced, in queue order
        # Computing trials keep() left unplaced, in arrival order (None: found by a scan); given by _KeptCache.
        self.arrivals: list[str] | None = None
        # Given by _KeptCache: the assignments of the trials keep() kept (the first of ``order``), and the set of
        # those trials; result() uses them as they are unless a later phase touched one of those placements.
        self.kept_prefix: list[Assignment] | None = None
        self.kept_ids: dict[str, list[int]] | None = None
        self.kept_keys: list[tuple[int, str]] | None = None  # their (seq, id), in the same order

    # ---- helpers

    def key(self, t: TrialDemand) -> tuple:
        """Longest predicted remaining time first; ties by arrival, then id."""
        return (-self.rem[t.trial_id], t.seq, t.trial_id)

    def restart_cost_s(self, t: TrialDemand, cost_s: float) -> float:
        """What restarting ``t`` from its checkpoint costs it: ``cost_s`` (a move's or a resize's) plus its
        iterations since that checkpoint at its alone time per iteration (they are run again); infinite for a
        trial that cannot be restarted (``TrialDemand.restartable``)."""
        if not t.restartable:
            return math.inf
        return cost_s + t.since_checkpoint * self.book.alone(t.trial_id) if t.since_checkpoint else cost_s

    def mem(self, d: int) -> LaneMemory:
        """Device ``d``'s lanes, replaying what was admitted there so far on first use."""
        m = self._mem.get(d)
        if m is None and d in self._snap:  # the reported lanes, less the trials that left them
            view = self.dev[d]
            m = self._mem[d] = LaneMemory.from_lanes(self.capacity[d], view.slots, view.lanes or ())
            for tid in self._leaving.pop(d, ()):
                m.leave(tid)
        elif m is None:
            m = self._mem[d] = LaneMemory(self.capacity[d], self.dev[d].slots)
            for tid in self._pending.pop(d, ()):
                t = self.trials[tid]
                m.admit(tid, t.p_bytes, t.t_bytes)
        return m

    def admit(self, t: TrialDemand, d: int) -> bool:
        """Admit ``t``'s memory on device ``d`` by the lane rule; False when it does not fit."""
        p, q = t.p_bytes, t.t_bytes
        if d in self._full:
            return False
        rejected = self._rejected[d]
        for rp, rq in rejected:
            if p >= rp and q >= rq:  # admission only gets harder while nothing leaves: dominated, no fit
                return False
        if self.mem(d).admit(t.trial_id, p, q):
            return True
        if rejected:  # keep the minimal pairs only: one dominated by the new pair adds nothing
            rejected[:] = [(rp, rq) for rp, rq in rejected if rp < p or rq < q]
        rejected.append((p, q))
        return False

    def admit_unchecked(self, t: TrialDemand, d: int) -> None:
        """Record ``t`` on device ``d`` without a check (its residents fit whatever the order: see the class)."""
        if d in self._mem or d in self._snap:
            self.mem(d).admit(t.trial_id, t.p_bytes, t.t_bytes)
        else:
            self._pending[d].append(t.trial_id)

    def release(self, t: TrialDemand, d: int) -> None:
        """Undo an admission on ``d``."""
        if d in self._mem or d in self._snap:
            self.mem(d).leave(t.trial_id)
            self._rejected[d].clear()
        else:
            self._pending[d].remove(t.trial_id)

    def gate(self, d: int) -> bool:
        """Does device ``d`` take one more computing trial (slots and measured marginal gain)?"""
        n = self.ncomp[d]
        view = self.dev[d]
        if n >= view.slots:
            return False
        if n == 0:
            return True
        cached = self._gates.get((view.curve_key, n))
        if cached is None:
            cached = self._gates[(view.curve_key, n)] = self.book.colocation_pays(
                view.curve_key, n, self.cfg.min_marginal_gain, self.cfg.prior_share)
        return cached

    def open_devices(self, exclude: Container[int] = ()) -> list[int]:
        """The devices not in ``exclude`` whose :meth:`gate` is open, in index order (its answers, without a call
        per device: a plan asks this of every device)."""
        out: list[int] = []
        append = out.append
        gates, ncomp = self._gates, self.ncomp
        for view in self.devices:
            d = view.index
            if d in exclude:
                continue
            n = ncomp[d]
            if n == 0:
                append(d)  # (slots >= 1)
            elif n < view.slots:
                cached = gates.get((view.curve_key, n))
                if cached is None:
                    cached = self.gate(d)
                if cached:
                    append(d)
        return out

    def sec(self, t: TrialDemand, k: int) -> float:
        """Predicted seconds per iteration of ``t`` alone on ``k`` devices."""
        return self.book.predict(t.trial_id, k, 1, self.dev[self.alloc[t.trial_id][0]].curve_key)

    def place(self, t: TrialDemand, devices: list[int]) -> None:
        self.alloc[t.trial_id] = devices
        self.order.append(t.trial_id)
        if t.trial_id in self.comp:
            home = devices[0]
            self.ncomp[home] += 1
            self.load[home] += self.rem[t.trial_id]

    # ---- phases

    def keep(self, intra: bool) -> None:
        """Keep the placed trials whose placement is still valid: their devices exist and their ``P + T`` fits
        the device. In the intra regime a computing trial keeps only its first device (it shrinks; the executor
        resizes it), or its first ``min_devices``; a trial that lost some devices keeps the others, and a computing
        one on several devices keeps those that still hold it (:func:`_held_devices`, in either regime). The others
        are left unplaced (placed again below, or queued and reported as preempted).

        Kept trials are re-admitted in arrival order to rebuild each device's lanes. A device whose replay does
        not hold all its residents (its real lanes were filled in another order, or an estimate grew) keeps them
        all (its own lane manager is the authority on its residents) and takes nothing new in this plan."""
        known, snap, capacity, comp = self.dev, self._snap, self.capacity, self.comp
        residents = [t for t in self.trials.values() if t.devices]
        residents.sort(key=_ARRIVAL)
        # (trial, devices it keeps, fast): fast when its one device reported lanes that hold it and it fits there,
        # which needs no admission (the common case when devices report their lanes).
        entries: list[tuple[TrialDemand, list[int], bool]] = []
        total: dict[int, int] = dict.fromkeys(known, 0)
        staying: defaultdict[int, set[str]] = defaultdict(set)  # device with reported lanes -> its kept trials
        for t in residents:
            devices = t.devices
            tid = t.trial_id
            size = t.p_bytes + t.t_bytes
            if len(devices) == 1 or (intra and tid in comp and t.min_devices <= 1):
                d = devices[0]
                if d not in known:
                    continue
                if t.min_devices > 1:
                    self.multi.add(tid)  # on fewer devices than it runs on: settle_whole places it again
                members = snap.get(d)
                if members is not None:
                    staying[d].add(tid)
                    entries.append((t, [d], tid in members and size <= capacity[d]))
                else:
                    total[d] += size
                    entries.append((t, [d], False))
                continue
            devs = [d for d in dict.fromkeys(devices) if d in known]
            computing = tid in comp
            shrink = intra and computing  # a data-parallel trial shrinks no further than its fewest devices
            held = _held_devices(devs, capacity, size, t.min_devices if computing else len(devs), shrink)
            if held is not None:
                devs = held  # those that hold it (a device too small for it is left)
            elif shrink:
                devs = devs[:t.min_devices]
            if not devs:
                continue
            self.multi.add(tid)
            for d in devs:
                total[d] += size
                if d in snap:
                    staying[d].add(tid)
            if held is None:
                continue  # too few of its devices hold it: counted as staying, not kept (placed again, or preempted)
            entries.append((t, devs, False))
        for d, members in snap.items():  # reported lanes: trials that left (ended, shrunk) free theirs
            leaving = members - staying[d] if d in staying else members
            if leaving:
                self._leaving[d] = set(leaving)
        replay = {d for d, need in total.items() if need > capacity[d] and d not in snap}
        pending = self._pending
        alloc, order, ncomp, load, rem = self.alloc, self.order, self.ncomp, self.load, self.rem
        for t, devs, fast in entries:
            if fast:  # place(t, devs), inlined
                tid = t.trial_id
                alloc[tid] = devs
                order.append(tid)
                if tid in comp:
                    home = devs[0]
                    ncomp[home] += 1
                    load[home] += rem[tid]
                continue
            if len(devs) == 1 and devs[0] not in replay and devs[0] not in snap:
                d = devs[0]
                if d in self._mem:
                    self._mem[d].admit(t.trial_id, t.p_bytes, t.t_bytes)
                else:
                    pending[d].append(t.trial_id)
                self.place(t, devs)
                continue
            if any(t.p_bytes + t.t_bytes > capacity[d] for d in devs):
                # A trial kept on one device (or on its first, shrinking) that can never hold it (its estimate
                # grew): placed again below, or preempted. (Those on several keep only devices that hold them.)
                continue
            recorded: list[int] = []  # devices whose lanes now hold the trial
            displaced = False
            for d in devs:
                if d in self._snap:
                    if t.trial_id not in self._snap[d] and not self.admit(t, d):
                        displaced = True  # the device has not got it (it waits in the device's queue): re-place it
                        break
                elif d in replay:
                    if not self.admit(t, d):
                        # The replay's lanes differ from the device's real ones (another admission order), or
                        # the trial's estimate grew: the device's own lane manager holds or queues it. Keep it,
                        # and admit nothing more on that device in this plan.
                        self._full.add(d)
                        self._unheld.setdefault(d, []).append(t)
                        continue
                else:
                    self.admit_unchecked(t, d)
                recorded.append(d)
            if displaced:
                for d in recorded:
                    self.release(t, d)
                for d in devs:  # a reported lane still holding it past the failing device
                    if d in self._snap and d not in recorded and t.trial_id in self._snap[d]:
                        self.mem(d).leave(t.trial_id)
                continue
            self.place(t, devs)

    def fill_intra(self, candidates: list[TrialDemand], exclude: frozenset[int] = frozenset()) -> list[TrialDemand]:
        """Longest first onto the least-loaded device that admits and gains; return the trials left.

        A trial that no open device admits may take the memory of paused residents (:meth:`make_room`).
        Devices in ``exclude`` (a data-parallel trial's devices) take nothing.
        """
        open_list = self.open_devices(exclude)
        open_devs = set(open_list)
        load, ncomp = self.load, self.ncomp
        heap = [(load[d], ncomp[d], d) for d in open_list]
        heapq.heapify(heap)
        bounds: dict[int, tuple[int, int] | None] = {
            d: (-1, -1) if d in self._full else self.mem(d).bound() if d in self._mem else None for d in open_devs
        }
        left: list[TrialDemand] = []

        def bound(d: int) -> tuple[int, int]:
            b = bounds.get(d)
            if b is None:
                b = bounds[d] = self.mem(d).bound()
            return b

        # The largest bounds among the open devices, for the quick "fits nowhere" test: two max-heaps with lazy
        # deletion (an entry counts while its device is open and its bound is still the entry's), so that a
        # placement costs O(log devices) here instead of a scan of every open device.
        # The heaps are built on first use: a plan with no candidate reads no device's memory.
        in_heap = set(open_devs)
        tops: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
        built = False

        def push_bounds(d: int) -> None:
            if not built:
                return
            b = bound(d)
            heapq.heappush(tops[0], (-b[0], d))
            heapq.heappush(tops[1], (-b[1], d))

        def refresh_reopened() -> None:
            """Devices that evictions let hold every resident again (:meth:`_reopen`): their bounds, anew."""
            for d in self._reopened:
                if d in bounds:
                    bounds[d] = self.mem(d).bound()
                    if d in in_heap:
                        push_bounds(d)
            self._reopened.clear()

        def best(which: int) -> int:
            top = tops[which]
            while top and (top[0][1] not in in_heap or bound(top[0][1])[which] != -top[0][0]):
                heapq.heappop(top)
            return -top[0][0] if top else -1

        best_b = best_a = -1
        stale = True  # the best bounds are read again after each placement only
        whole: set[int] | None = None  # exclude, and the devices trials placed below hold whole
        whole_failed: list[tuple[int, int, int]] = []  # (P, T, min_devices) that found no whole devices
        for i, t in enumerate(candidates):
            if not heap:  # no device takes anything more (nothing reopens one without a placement)
                left.extend(candidates[i:])
                break
            if t.min_devices > 1:  # it runs on no fewer devices: whole ones, or it waits (the next trial goes on)
                p, q, k = t.p_bytes, t.t_bytes, t.min_devices
                if any(p >= fp and q >= fq and k >= fk for fp, fq, fk in whole_failed):
                    left.append(t)  # devices are only taken (until an eviction): what failed fails again
                    continue
                if whole is None:
                    whole = set(exclude)
                devs = self.place_whole(t, whole)
                if devs is None:
                    whole_failed.append((p, q, k))
                    left.append(t)
                    continue
                self.take_whole(t, devs)
                whole.update(devs)
                in_heap.difference_update(devs)
                heap = [item for item in heap if item[2] not in whole]
                heapq.heapify(heap)
                refresh_reopened()
                stale = True
                continue
            if stale:
                if not built:
                    tops[0].extend((-bound(d)[0], d) for d in in_heap)
                    tops[1].extend((-bound(d)[1], d) for d in in_heap)
                    heapq.heapify(tops[0])
                    heapq.heapify(tops[1])
                    built = True
                best_b, best_a = best(0), best(1)
                stale = False
            size = t.p_bytes + t.t_bytes
            chosen = None
            if size <= best_b and t.p_bytes <= best_a:
                skipped = []
                while heap:
                    item = heapq.heappop(heap)
                    b, a = bound(item[2])
                    if size <= b and t.p_bytes <= a and self.admit(t, item[2]):
                        chosen = item[2]
                        break
                    skipped.append(item)
                for item in skipped:
                    heapq.heappush(heap, item)
            if chosen is None:
                if self._paused_on is not None and not self._paused_on or any(
                        t.p_bytes >= rp and t.t_bytes >= rq for rp, rq in self._no_room):
                    left.append(t)  # no paused trial to evict, or none whose eviction let an alike trial in
                    continue
                chosen = self.make_room(t, sorted(heap))
                if chosen is None:
                    left.append(t)
                    continue
                whole_failed.clear()  # evictions freed memory: a trial that needs whole devices may fit now
                heap = [item for item in heap if item[2] != chosen]
                heapq.heapify(heap)
                refresh_reopened()
            in_heap.discard(chosen)
            self.place(t, [chosen])
            bounds[chosen] = self.mem(chosen).bound()
            stale = True
            if self.gate(chosen):
                heapq.heappush(heap, (self.load[chosen], self.ncomp[chosen], chosen))
                in_heap.add(chosen)
                push_bounds(chosen)
        return left

    def rebalance(self, exclude: frozenset[int] = frozenset()) -> bool:
        """Even out co-location after :meth:`fill_intra`: while a device runs at least two computing trials more
        than a device whose gate is open, move the crowded device's trial with the most predicted remaining time
        there, if the move pays: ``remaining * (slowdown(n_from) - slowdown(n_to + 1))`` exceeds its
        :meth:`restart_cost_s` (the move cost plus its iterations since its checkpoint; a trial too dear for that
        leaves the move to the next longest). Trials that end unevenly otherwise leave long trials crowded on some
        devices while others idle. Devices in ``exclude`` (a data-parallel trial's, held whole) take nothing, and
        a trial on several devices does not move."""
        cfg = self.cfg
        moved: set[str] = set()
        ncomp, load, alloc, gate = self.ncomp, self.load, self.alloc, self.gate
        # device -> its computing trials (home there), listed when a move from it is first considered (a C-level
        # pass over the placements; moves are few), then kept up to date by the moves
        by_dev: dict[int, list[str]] = {}

        def on(d: int) -> list[str]:
            here = by_dev.get(d)
            if here is None:
                here = by_dev[d] = [tid for tid in itertools.compress(
                    alloc.keys(), map(operator.eq, map(_FIRST, alloc.values()), itertools.repeat(d)))
                    if tid in self.comp]
            return here

        # The most crowded device, max (ncomp, load, -index), and the least loaded open one, min (ncomp, load,
        # index), from two heaps with lazy deletion: an entry counts while its device's version is the entry's.
        # A move changes only its two devices, which are pushed again: O(log devices) a move, not three scans.
        version = dict.fromkeys(ncomp, 0)
        crowded_heap = [(-ncomp[d], -load[d], d, 0) for d in ncomp]
        open_heap = [(ncomp[d], load[d], d, 0) for d in self.open_devices(exclude)]
        heapq.heapify(crowded_heap)
        heapq.heapify(open_heap)

        def push(d: int) -> None:
            v = version[d] = version[d] + 1
            heapq.heappush(crowded_heap, (-ncomp[d], -load[d], d, v))
            if d not in exclude and gate(d):
                heapq.heappush(open_heap, (ncomp[d], load[d], d, v))

        while True:
            while crowded_heap and crowded_heap[0][3] != version[crowded_heap[0][2]]:
                heapq.heappop(crowded_heap)
            if not crowded_heap:
                return bool(moved)
            crowded = crowded_heap[0][2]
            target = None
            while open_heap:
                entry = open_heap[0]
                if entry[3] != version[entry[2]]:
                    heapq.heappop(open_heap)
                elif entry[2] == crowded:  # the next one: the crowded device's own entry stays for later
                    top = heapq.heappop(open_heap)
                    while open_heap and open_heap[0][3] != version[open_heap[0][2]]:
                        heapq.heappop(open_heap)
                    target = open_heap[0][2] if open_heap else None
                    heapq.heappush(open_heap, top)
                    break
                else:
                    target = entry[2]
                    break
            if target is None:
                return bool(moved)
            n_from, n_to = ncomp[crowded], ncomp[target]
            if n_from - n_to < 2:
                return bool(moved)
            candidates = [self.trials[tid] for tid in on(crowded) if tid not in moved and len(alloc[tid]) == 1]
            candidates.sort(key=self.key)
            key_from = self.dev[crowded].curve_key
            key_to = self.dev[target].curve_key
            gap = self.book.slowdown(key_from, n_from) - self.book.slowdown(key_to, n_to + 1)
            for t in candidates:
                saving = self.rem[t.trial_id] * gap
                if saving <= cfg.move_cost_s:
                    return bool(moved)  # the longest cannot pay for the move: no shorter one can
                if saving <= self.restart_cost_s(t, cfg.move_cost_s):
                    if not t.restartable:
                        self._hold(t, crowded, target)
                    continue  # its work since its checkpoint makes it dear to move: a shorter one may pay
                self.release(t, crowded)
                if self.admit(t, target):
                    break
                self.admit_unchecked(t, crowded)  # it fitted there: put it back
            else:
                return bool(moved)
            tid = t.trial_id
            moved.add(tid)
            alloc[tid] = [target]
            on(crowded).remove(tid)
            if target in by_dev:  # (listed later from the placements, where it now is)
                by_dev[target].append(tid)
            rem = self.rem[tid]
            ncomp[crowded] -= 1
            load[crowded] -= rem
            ncomp[target] += 1
            load[target] += rem
            push(crowded)
            push(target)

    def _hold(self, t: TrialDemand, home: int, target: int) -> None:
        """Note that evening out would have moved ``t`` (which cannot restart) from ``home`` to ``target``, if it
        fits there and no other trial of ``home`` is noted already."""
        if home not in self._held_from and self.admit(t, target):
            self.release(t, target)
            self._note_held(t, home, target)

    def _note_held(self, t: TrialDemand, home: int, target: int) -> None:
        """Record ``t``'s held move from ``home`` to ``target`` (``Plan.held``; one per device)."""
        self.held[t.trial_id] = target
        self._held_from.add(home)

    def make_room(self, t: TrialDemand, order: list[tuple[float, int, int]]) -> int | None:
        """Evict paused residents (most recent arrival first) from the first device, in ``order``, where that
        lets ``t`` in. Paused trials hold memory but no compute; without this, a synchronous rung whose paused
        trials fill every device would wait forever for its last trials. Only the evictions ``t`` needs are kept
        (:meth:`_fewest_evictions`). Returns the device, or None."""
        if not self._paused_residents():
            return None
        for rp, rq in self._no_room:
            if t.p_bytes >= rp and t.t_bytes >= rq:
                return None
        for _, _, d in order:
            if self._evict_for(t, d):
                return d
        p, q = t.p_bytes, t.t_bytes  # keep the minimal pairs only: a pair dominated by another adds nothing
        self._no_room = [(rp, rq) for rp, rq in self._no_room if rp < p or rq < q]
        self._no_room.append((p, q))
        return None

    def _paused_residents(self) -> dict[int, list[str]]:
        """Device -> its placed paused trials, latest arrival first (built on first use, then kept up to date)."""
        if self._paused_on is None:
            self._paused_on = {}
            for tid in reversed(self.order):
                if tid in self.alloc and tid not in self.comp:
                    for d in self.alloc[tid]:
                        self._paused_on.setdefault(d, []).append(tid)
        return self._paused_on

    def _evict_for(self, t: TrialDemand, d: int) -> bool:
        """Evict paused residents of ``d`` (most recent arrival first, only those needed) until ``t`` is admitted
        there; False (nothing changed) when even all of them do not make room."""
        paused_on = self._paused_residents()
        if d in self._full or not paused_on.get(d):
            return False
        victims = list(paused_on[d])
        touched = {dev for tid in victims for dev in self.alloc[tid]}
        saved = {dev: self.mem(dev).copy() for dev in touched}
        evicted: list[TrialDemand] = []
        for tid in victims:
            victim = self.trials[tid]
            for dev in self.alloc[tid]:
                self.release(victim, dev)
            evicted.append(victim)
            if self.admit(t, d):
                if len(evicted) > 1:
                    evicted = self._fewest_evictions(t, d, evicted, saved)
                freed: set[int] = set()
                for v in evicted:
                    for dev in self.alloc.pop(v.trial_id):
                        paused_on[dev].remove(v.trial_id)
                        freed.add(dev)
                for dev in sorted(freed & self._full):
                    self._reopen(dev)
                return True
        self._mem.update(saved)  # no room even without them: undo the evictions
        return False

    def _admits_without_paused(self, t: TrialDemand, d: int) -> bool:
        """Would ``d`` admit ``t`` once all its paused residents left? (Asked on a copy: nothing changes.)"""
        trial_mem = self.mem(d).copy()
        for tid in self._paused_residents().get(d, ()):
            trial_mem.leave(tid)
        return trial_mem.admit(t.trial_id, t.p_bytes, t.t_bytes)

    def place_whole(self, t: TrialDemand, exclude: Container[int]) -> list[int] | None:
        """Whole devices for a computing trial that runs on no fewer than ``min_devices`` (> 1) of them: the
        lowest-index devices that no computing trial uses, are not in ``exclude`` (devices other trials hold
        whole) and admit its memory, evicting paused residents where only that lets it in (as :meth:`make_room`,
        and only once enough devices are known to take it). Returns ``min_devices`` devices, lowest first, with
        ``t`` admitted on each, or None (nothing changed): it is never placed on fewer."""
        k = t.min_devices
        ncomp, full = self.ncomp, self._full
        usable = [v.index for v in self.devices
                  if not ncomp[v.index] and v.index not in exclude and v.index not in full]
        if len(usable) < k:
            return None
        chosen: list[int] = []
        for d in usable:
            if self.admit(t, d):
                chosen.append(d)
                if len(chosen) == k:
                    return chosen
        paused_on = self._paused_residents()
        if paused_on:
            taken = set(chosen)
            more = [d for d in usable if d not in taken and paused_on.get(d) and self._admits_without_paused(t, d)]
            if len(chosen) + len(more) >= k:
                for d in more[:k - len(chosen)]:
                    # (an eviction for an earlier device may have freed this one too: a paused trial on both)
                    if not self.admit(t, d) and not self._evict_for(t, d):
                        raise AssertionError(f"place_whole: {t.trial_id!r} no longer fits device {d}")  # (as found)
                    chosen.append(d)
                return sorted(chosen)
        for d in chosen:
            self.release(t, d)
        return None

    def take_whole(self, t: TrialDemand, devices: list[int]) -> None:
        """Record ``t`` on the whole devices :meth:`place_whole` found (a trial :meth:`settle_whole` took off its
        devices keeps its place in the decision order)."""
        tid = t.trial_id
        if tid in self._displaced:
            self.alloc[tid] = devices
            self.ncomp[devices[0]] += 1
            self.load[devices[0]] += self.rem[tid]
        else:
            self.place(t, devices)
        self.spread.append(tid)

    def settle_whole(self) -> None:
        """Before the regimes' phases: every computing trial kept on several devices that needs more than one
        (``min_devices`` > 1) claims its first ``min_devices``, longest predicted remaining time first (:meth:`key`).
        One whose claim overlaps an earlier one (a paused trial promoted on another's devices), or that kept
        fewer than ``min_devices`` (some of its devices are gone), is taken off its devices: placed again on
        whole devices of its own, or queued (preempted). Never on fewer devices than it runs on."""
        alloc, comp, trials = self.alloc, self.comp, self.trials
        needs = [trials[tid] for tid in self.multi
                 if tid in comp and trials[tid].min_devices > 1 and tid in alloc]
        if not needs:
            return
        needs.sort(key=self.key)
        claimed: set[int] = set()
        off: list[TrialDemand] = []
        for t in needs:
            devs = alloc[t.trial_id]
            mine = devs[:t.min_devices]
            if len(mine) == t.min_devices and claimed.isdisjoint(mine):
                claimed.update(mine)
                continue
            off.append(t)
        freed: set[int] = set()
        for t in off:
            tid = t.trial_id
            for d in alloc[tid]:
                self.release(t, d)
            devs = alloc.pop(tid)
            freed.update(devs)
            self.ncomp[devs[0]] -= 1
            self.load[devs[0]] -= self.rem[tid]
            self._displaced.add(tid)
        for d in sorted(freed & self._full):  # as after make_room's evictions: it may take trials again
            self._reopen(d)
        self._reopened.clear()  # (fill_intra reads it; its bounds are not built yet)
        if self.arrivals is not None:  # the cache's candidates: these join them, in arrival order
            waiting = sorted([(trials[tid].seq, tid) for tid in self.arrivals]
                             + [(t.seq, t.trial_id) for t in off])
            self.arrivals = list(map(_SECOND, waiting))

    def _evict_and_admit(self, t: TrialDemand, d: int, evicted: list[TrialDemand],
                         saved: dict[int, LaneMemory]) -> bool:
        """From the lanes as they were before :meth:`make_room` (``saved``), release ``evicted`` (in that order)
        and admit ``t`` on ``d``: the lanes the devices would have if only those were preempted."""
        self._mem.update({dev: mem.copy() for dev, mem in saved.items()})
        for victim in evicted:
            for dev in self.alloc[victim.trial_id]:
                self.release(victim, dev)
        return self.admit(t, d)

    def _fewest_evictions(self, t: TrialDemand, d: int, evicted: list[TrialDemand],
                          saved: dict[int, LaneMemory]) -> list[TrialDemand]:
        """``t`` was admitted on ``d`` once ``evicted`` (most recent arrival first) were released; the last one was
        needed, the others perhaps not (a later eviction alone may free enough). Each of the others, oldest
        first, stays where it is when ``t`` is still admitted without evicting it. Returns the evictions kept,
        with the lanes left as they are with those released and ``t`` admitted."""
        needed = list(evicted)
        settled = True  # the lanes are those of ``needed`` released and t admitted
        for victim in reversed(evicted[:-1]):
            trial = [v for v in needed if v is not victim]
            settled = self._evict_and_admit(t, d, trial, saved)
            if settled:
                needed = trial
        if not settled and not self._evict_and_admit(t, d, needed, saved):
            raise AssertionError(f"make_room: {t.trial_id!r} no longer fits device {d}")  # a replay is deterministic
        return needed

    def _reopen(self, d: int) -> None:
        """A full device lost residents to :meth:`make_room`: if its replay now holds the residents it could not
        admit, it is no longer full (it may take trials again, as it would in the next plan)."""
        trial_mem = self.mem(d).copy()
        unheld = [t for t in self._unheld.get(d, ()) if d in self.alloc.get(t.trial_id, ())]  # not evicted
        if all(trial_mem.admit(t.trial_id, t.p_bytes, t.t_bytes) for t in unheld):
            self._mem[d] = trial_mem
            self._full.discard(d)
            self._unheld.pop(d, None)
            self._rejected[d].clear()
            self._reopened.append(d)

    def free_devices(self) -> list[int]:
        """Devices no computing trial uses (home or extra), by index."""
        alloc = self.alloc
        used = set(itertools.chain.from_iterable(map(alloc.__getitem__, self.comp.intersection(alloc))))
        return [d for d in self.dev if d not in used]  # self.dev is in index order

    def whole_devices(self) -> frozenset[int]:
        """The devices of the computing trials placed on several devices: a data-parallel trial holds them whole,
        so nothing else is placed on them."""
        alloc, comp = self.alloc, self.comp
        whole: set[int] = set()
        for tids in (self.multi, self.spread):
            for tid in tids:
                devs = alloc.get(tid)
                if devs is not None and len(devs) > 1 and tid in comp:
                    whole.update(devs)
        return frozenset(whole)

    def inter(self) -> None:
        """The inter-GPU regime after :meth:`keep`."""
        cfg = self.cfg
        # In key() order: a stable sort by predicted time, longest first, of the trials in arrival order.
        alloc, trials = self.alloc, self.trials
        computing = [trials[tid] for tid in alloc if tid in self.comp]
        computing.sort(key=_ARRIVAL)
        ids = list(map(_TRIAL_ID, computing))
        ids.sort(key=self.rem.__getitem__, reverse=True)
        computing = list(map(trials.__getitem__, ids))
        placed = list(map(alloc.__getitem__, ids))  # their devices, in the same order
        # 1. Homes: the longest trial on a device owns it; the others there share it (step 4 may spread them). A
        # data-parallel trial placed on at least its fewest devices (``min_devices`` > 1) owns those first: it is
        # never taken below them.
        owner: dict[int, str] = {}
        if any(map((1).__lt__, map(_MIN_DEVICES, computing))):
            for t, devs in zip(computing, placed, strict=True):
                if 1 < t.min_devices <= len(devs):
                    for d in devs[:t.min_devices]:
                        owner.setdefault(d, t.trial_id)
        # each home's first trial in that order (assigned last to first: the first stays)
        first = dict(zip(reversed(list(map(_FIRST, placed))), reversed(ids), strict=True))
        if owner:
            for d, tid in first.items():
                owner.setdefault(d, tid)
        else:
            owner = first
        # 2. Extras: a device is an extra only if no other computing trial lives there, and only while the
        # measured scaling step (the trial's own or the pooled one) pays. (Trials on one device have none: only
        # those on several are looked at, in the same order.)
        limit = 1.0 - cfg.min_scaling_gain
        for i in itertools.compress(range(len(placed)), map((1).__lt__, map(len, placed))):
            t, devs = computing[i], placed[i]
            tid = t.trial_id
            keep = [devs[0]]
            if owner.get(devs[0]) != tid:  # shares its home: it cannot hold whole devices either
                for d in devs[1:]:
                    self.release(t, d)
                alloc[tid] = keep
                continue
            ratios = self.book.scaling_ratios(tid, len(devs) - 1, self.dev[devs[0]].curve_key)
            max_devices, min_devices = t.max_devices, t.min_devices
            for d in devs[1:]:
                ratio, source = ratios[len(keep) - 1]
                measured_no_gain = source in ("trial", "pooled") and not ratio < limit
                at_most = max_devices is not None and len(keep) >= max_devices
                if owner.get(d, tid) != tid or at_most or (measured_no_gain and len(keep) >= min_devices):
                    self.release(t, d)
                    continue
                keep.append(d)
                owner[d] = tid
            if len(keep) != len(devs):  # (all kept: its placement, the same list, stays as it is; result() reuses it)
                alloc[tid] = keep
        # 3. Queued and displaced trials take free devices, longest first.
        candidates = _by_turn(sorted(
            [self.trials[tid] for tid in self.comp if tid not in self.alloc], key=self.key
        ))
        left: list[TrialDemand] = []
        taken: dict[int, TrialDemand] = {}  # device -> the candidate this step gave it
        for t in candidates:
            if t.min_devices > 1:  # whole devices of its own, or it waits (co-located below only on whole ones)
                devs = self.place_whole(t, owner)
                self._reopened.clear()  # (read by fill_intra only)
                if devs is None:
                    left.append(t)
                    continue
                self.take_whole(t, devs)
                for d in devs:
                    owner[d] = t.trial_id
                continue
            target = self._free_device_for(t, owner)
            if target is None:
                target = self._swap_for(t, owner, taken)
            if target is None:
                target = self._reclaim_extra(t, owner)
            if target is not None:
                self.place(t, [target])
                owner[target] = t.trial_id
                taken[target] = t
            else:
                left.append(t)
        if left:  # no free device admits them: co-locate like the intra regime, not on a data-parallel trial's
            # devices (it holds them whole)
            self.fill_intra(left, self.whole_devices())
        # 4. Spread: on a device with several computing trials (kept there, or co-located by the fallback above)
        # the longest stays and each other one moves to a free device when the predicted saving pays for the
        # move (a trial that only starts now moves for free): its own, or that of the longest when it is
        # data-parallel, since it grows only once its home is its own (a paused trial promoted in place, for
        # one, lands on the home of a trial that has grown meanwhile).
        alloc_get, comp = self.alloc.get, self.comp
        home_of = [(devs[0], tid) for tid in self.order if (devs := alloc_get(tid)) is not None and tid in comp]
        homes: dict[int, list[TrialDemand]] = {  # (only the homes of several computing trials: the others stay)
            home: [] for home, n in collections.Counter(map(_FIRST, home_of)).items() if n > 1}
        if homes:
            for home, tid in home_of:
                crowd = homes.get(home)
                if crowd is not None:
                    crowd.append(self.trials[tid])
        free_left = -1  # free devices no trial owns (-1: not counted yet); each move below takes one
        for home in sorted(homes):
            crowd = homes[home]
            crowd.sort(key=self.key)
            if self._stuck_stays(crowd, home):
                crowd.sort(key=_can_leave)  # (stable: each part stays longest first)
                owner[home] = crowd[0].trial_id
            for i, t in enumerate(crowd):
                if i and len(self.alloc[t.trial_id]) > 1:  # a data-parallel trial kept at its fewest devices
                    crowd.insert(0, crowd.pop(i))  # stays (it moves only whole): the others spread
                    break
            curve = self.dev[home].curve_key
            if free_left < 0:
                free_left = sum(1 for d in self.free_devices() if d not in owner)
            owner_gain = self._owner_gain(crowd[0], len(crowd) - 1, free_left)
            for t in crowd[1:]:
                n = self.ncomp[home]
                saving = self.rem[t.trial_id] * (self.book.slowdown(curve, n) - 1.0) if n > 1 else 0.0
                if max(saving, owner_gain) <= (self.restart_cost_s(t, cfg.move_cost_s) if t.devices else 0.0):
                    if t.devices and not t.restartable and max(saving, owner_gain) > cfg.move_cost_s \
                            and home not in self._held_from:
                        held = self._free_device_for(t, owner)
                        if held is not None:
                            self.release(t, held)
                            self._note_held(t, home, held)
                    continue
                target = self._free_device_for(t, owner)
                if target is None:
                    continue
                self.release(t, home)
                self.alloc[t.trial_id] = [target]
                owner[target] = t.trial_id
                free_left -= 1
                self.ncomp[home] -= 1
                self.load[home] -= self.rem[t.trial_id]
                self.ncomp[target] += 1
                self.load[target] += self.rem[t.trial_id]
        # 5. Water-filling: the next free device to the data-parallel trial with the most predicted remaining
        # time whose scaling profile says one more device pays. A step nobody measured yet is a probe (below).
        free = [d for d in self.free_devices() if d not in owner]
        if not free:
            return
        # A grower's key depends on its own allocation only, and growing takes free devices, never a home: so
        # the candidates are found once and kept in a heap by key (the one with the most remaining time first).
        # A trial that the loop below would pop and pass over whatever its key (at its most devices, or a step
        # that does not pay or is an untaken probe, at no fewer than its fewest devices) is left out: it would
        # not change the others' order, and its key (two predictions) is the costly part of a plan's growing.
        heap: list[tuple[float, int, str, TrialDemand]] = []
        book, alloc, ncomp = self.book, self.alloc, self.ncomp
        predict, rem, dev = book.predict, self.rem, self.dev
        limit = 1.0 - cfg.min_scaling_gain
        for t in filter(_DATA_PARALLEL, itertools.chain(computing, candidates)):
            tid = t.trial_id
            devs = alloc.get(tid)
            if devs is None or owner.get(devs[0]) != tid or ncomp[devs[0]] > 1:
                continue  # not placed, or shares its home: it cannot grow (it holds whole devices only)
            k = len(devs)
            if t.max_devices is not None and k >= t.max_devices:
                continue
            curve_key = dev[devs[0]].curve_key
            if k >= t.min_devices:
                ratio, source = book.scaling_ratio(tid, k, curve_key)
                if not ratio < limit or (source not in ("trial", "pooled") and book.measured(tid, k) is None
                                         and not (k == 1 and not t.devices)):
                    continue
            # _grow_key(t), inlined
            alone = predict(tid, 1, 1, curve_key)
            heapq.heappush(heap, (-(rem[tid] * (alone if k == 1 else predict(tid, k, 1, curve_key)) / alone), t.seq,
                                  tid, t))
        while free and heap:
            neg_remaining_s, _, tid, best = heapq.heappop(heap)
            if best.max_devices is not None and len(self.alloc[tid]) >= best.max_devices:
                continue
            k = len(self.alloc[tid])
            ratio, source = self.book.scaling_ratio(tid, k, self.dev[self.alloc[tid][0]].curve_key)
            remaining_s = -neg_remaining_s
            pays = ratio < 1.0 - cfg.min_scaling_gain
            # Growing a running trial restarts it from its checkpoint; a trial that starts now pays nothing.
            if pays and best.devices and remaining_s * (1.0 - ratio) <= self.restart_cost_s(best, cfg.grow_cost_s):
                pays = False
            # An unmeasured step k -> k + 1 is a probe, taken only once the trial's time at k devices is measured
            # (or as the first step of a trial that starts now): each probe is measured before the next, and
            # re-planning with the same profiles changes nothing.
            if source not in ("trial", "pooled") and self.book.measured(tid, k) is None \
                    and not (k == 1 and not best.devices):
                pays = False
            if k < best.min_devices:
                pays = True  # below the fewest devices its trainable runs on: it grows whatever the profiles say
            if not pays:
                continue  # saturated
            target = next((d for d in free if self.admit(best, d)), None)
            if target is None:
                continue  # saturated
            free.remove(target)
            self.alloc[tid] = self.alloc[tid] + [target]
            owner[target] = tid
            heapq.heappush(heap, self._grow_key(best))

    def _stuck_stays(self, crowd: list[TrialDemand], home: int) -> bool:
        """Whether a crowded device's trial that cannot restart (``TrialDemand.restartable`` False) stays in place of
        its longest one (``crowd[0]``, the one that would stay), which then moves instead: the longest can restart
        (one that may not have begun is withdrawn), its move pays (its saving from running alone beats its restart,
        which costs nothing to a trial that only starts now), and a trial placed there cannot.
        Otherwise the longest stayed, the trial that could not restart was held, and the pair took the device's
        slot in turns to their ends while a free device idled (a retry prefetched beside a trial that had reported
        without a checkpoint, when the run's second device joined)."""
        first = crowd[0]
        if not _can_leave(first) or all(map(_can_leave, crowd)) \
                or any(len(self.alloc[t.trial_id]) > 1 for t in crowd):  # (a data-parallel trial kept whole stays)
            return False
        n = self.ncomp[home]
        saving = self.rem[first.trial_id] * (self.book.slowdown(self.dev[home].curve_key, n) - 1.0)
        return saving > (self.restart_cost_s(first, self.cfg.move_cost_s) if first.devices else 0.0)

    def _grow_key(self, t: TrialDemand) -> tuple[float, int, str, TrialDemand]:
        """Water-filling order: most predicted remaining time at the trial's current width first."""
        tid = t.trial_id
        devs = self.alloc[tid]
        k = len(devs)
        predict, curve_key = self.book.predict, self.dev[devs[0]].curve_key
        alone = predict(tid, 1, 1, curve_key)  # (sec(t, 1); at one device, sec(t, k) is the same prediction)
        remaining_s = self.rem[tid] * (alone if k == 1 else predict(tid, k, 1, curve_key)) / alone
        return (-remaining_s, t.seq, tid, t)

    def _owner_gain(self, t: TrialDemand, others: int, free: int) -> float:
        """Predicted saving of data-parallel trial ``t`` from its next scaling step, net of its restart, if the
        ``others`` computing trials on its home moved to free devices and one more free device were left for it
        (``free``: the free devices no trial owns); 0 when that cannot happen or the step does not pay (the rules
        of step 5)."""
        if not t.data_parallel:
            return 0.0
        if free < others + 1:
            return 0.0
        tid = t.trial_id
        k = len(self.alloc[tid])
        ratio, source = self.book.scaling_ratio(tid, k, self.dev[self.alloc[tid][0]].curve_key)
        if not ratio < 1.0 - self.cfg.min_scaling_gain:
            return 0.0
        if source not in ("trial", "pooled") and self.book.measured(tid, k) is None and not (k == 1 and not t.devices):
            return 0.0
        remaining_s = self.rem[tid] * self.sec(t, k) / self.sec(t, 1)
        return remaining_s * (1.0 - ratio) - (self.restart_cost_s(t, self.cfg.grow_cost_s) if t.devices else 0.0)

    def _free_device_for(self, t: TrialDemand, owner: dict[int, str]) -> int | None:
        for d in self.devices:
            if d.index in owner or self.ncomp[d.index] > 0:
                continue
            if self.admit(t, d.index):
                return d.index
        return None

    def _swap_for(self, t: TrialDemand, owner: dict[int, str], taken: dict[int, TrialDemand]) -> int | None:
        """A device for ``t`` that no free device admits, freed by moving a candidate step 3 placed before it to
        another free device that admits that one, so that every trial gets a device of its own when the devices
        differ (a small trial took the only device a larger one fits, lowest index first). Returns the freed
        device, with ``t`` admitted there, or None (nothing changed)."""
        if not any(v.index not in owner and self.ncomp[v.index] == 0 for v in self.devices):
            return None  # no free device is left to move a candidate to (the usual case: identical devices)
        for d, other in taken.items():
            if owner.get(d) != other.trial_id:
                continue
            self.release(other, d)
            if self.admit(t, d):
                elsewhere = self._free_device_for(other, {**owner, d: t.trial_id})
                if elsewhere is not None:
                    rem = self.rem[other.trial_id]
                    self.alloc[other.trial_id] = [elsewhere]
                    self.ncomp[d] -= 1
                    self.load[d] -= rem
                    self.ncomp[elsewhere] += 1
                    self.load[elsewhere] += rem
                    owner[elsewhere] = other.trial_id
                    del taken[d]
                    taken[elsewhere] = other
                    return d
                self.release(t, d)
            if not self.admit(other, d):
                self.admit_unchecked(other, d)  # put it back as it was (it was admitted there before)
        return None

    def _reclaim_extra(self, t: TrialDemand, owner: dict[int, str]) -> int | None:
        """Take back the extra device that costs its data-parallel trial the least, if ``t`` fits there."""
        options = []
        for tid, devs in self.alloc.items():
            if len(devs) < 2 or tid not in self.comp:
                continue
            other = self.trials[tid]
            k = len(devs)
            if k <= other.min_devices:
                continue  # it runs on no fewer devices
            loss = self.rem[tid] * (self.sec(other, k - 1) - self.sec(other, k)) / self.sec(other, 1)
            options.append((loss, other.seq, tid))
        for _, _, tid in sorted(options):
            other = self.trials[tid]
            d = self.alloc[tid][-1]
            self.release(other, d)
            if self.admit(t, d):
                self.alloc[tid] = self.alloc[tid][:-1]
                owner[d] = t.trial_id
                return d
            self.mem(d).admit(other.trial_id, other.p_bytes, other.t_bytes)  # put it back: it fitted before
        return None

    def candidates(self) -> list[TrialDemand]:
        """The computing trials left unplaced after :meth:`keep`, smallest turn first (:attr:`TrialDemand.turn`),
        then longest predicted remaining time first (ties by arrival, then id: :meth:`key`)."""
        rem = self.rem
        arrivals = self.arrivals
        if arrivals is None:
            trials = self.trials
            comp, alloc = self.comp, self.alloc
            waiting = [t for t in trials.values() if t.trial_id in comp and t.trial_id not in alloc]
            waiting.sort(key=_ARRIVAL)
            arrivals = list(map(_TRIAL_ID, waiting))
        # A stable sort by predicted time, longest first, of trials in arrival order orders them as key() does.
        arrivals = sorted(arrivals, key=rem.__getitem__, reverse=True)
        return _by_turn(list(map(self.trials.__getitem__, arrivals)))

    # ---- result

    def result(self, regime: str) -> Plan:
        alloc, trials, order = self.alloc, self.trials, self.order
        prefix, kept, keys = self.kept_prefix, self.kept_ids, self.kept_keys
        if prefix is not None and kept is not None and keys is not None and isinstance(alloc, _Alloc):
            # The kept trials' assignments as the cache has them, with those a later phase touched redone.
            assignments = list(prefix)
            gone = []
            for tid in alloc.touched:
                if tid in kept:
                    i = bisect.bisect_left(keys, (trials[tid].seq, tid))
                    devs = alloc.get(tid)
                    if devs is None:
                        gone.append(i)
                    else:
                        assignments[i] = _assignment(tid, devs, trials[tid].devices)
            for i in sorted(gone, reverse=True):
                del assignments[i]
            rest_of_order = order[len(prefix):]
        else:
            assignments = []
            rest_of_order = order
        append = assignments.append
        for tid in rest_of_order:
            devs = alloc.get(tid)
            if devs is not None:
                append(_assignment(tid, devs, trials[tid].devices))
        if self.left is not None and len(alloc) + len(self.left) == len(trials):
            rest = [t for t in self.left if t.trial_id not in alloc]  # already in queue order
        else:  # in key() order: a stable sort by predicted time, longest first, of the trials in arrival order
            rest = [t for t in trials.values() if t.trial_id not in alloc]
            rest.sort(key=_ARRIVAL)
            ids = list(map(_TRIAL_ID, rest))
            ids.sort(key=self.rem.__getitem__, reverse=True)
            rest = _by_turn(list(map(trials.__getitem__, ids)))
        queued = tuple(map(_TRIAL_ID, rest))
        preempted = tuple(map(_TRIAL_ID, filter(_DEVICES, rest)))  # (C-level loops: the queue can be long)
        biggest = max(self.capacity.values(), default=-1)
        if rest and self.capacity and max(map(_P_BYTES, rest)) + max(map(_T_BYTES, rest)) > biggest:
            unplaceable = tuple(t.trial_id for t in rest if t.p_bytes + t.t_bytes > biggest)
        else:
            unplaceable = ()
        # (a move held back that would no longer even out the plan's co-location, its target since given other
        # trials, is left out: the refusal would name a device that did not idle)
        ncomp = self.ncomp
        held = tuple((tid, (d,)) for tid, d in self.held.items()
                     if (devs := alloc.get(tid)) is not None and ncomp[d] + 1 < ncomp[devs[0]])
        return Plan(regime, tuple(assignments), queued, preempted, unplaceable, held)


def plan(
    trials: Sequence[TrialDemand],
    devices: Sequence[DeviceView],
    book: ProfileBook | None = None,
    settings: PlannerSettings | None = None,
) -> Plan:
    """Place trials on devices by water-filling (see the module docstring for the rules).

    Pure and deterministic: the same trials, devices, profile book contents and settings give the same plan,
    whatever the order of ``trials`` and ``devices``.

    Args:
        trials: Every trial of the current groups that is placed, paused or waiting, with its remaining budget.
        devices: The devices.
        book: Measured profiles (None: nothing measured).
        settings: Thresholds (None: the defaults).

    Returns:
        The plan.

    Raises:
        PlanError: Duplicate ids, invalid estimates or a NaN ``remaining`` or ``turn`` (the error names the trial and
            field).
    """
    work = _Planning(trials, devices, book if book is not None else ProfileBook(), settings or PlannerSettings())
    return _run(work)


def _run(work: _Planning) -> Plan:
    """The phases of one plan (split from :func:`plan` so that tests can inspect the lanes it built)."""
    intra = len(work.comp) > len(work.devices)
    work.keep(intra)
    return _place(work, intra)


def _place(work: _Planning, intra: bool) -> Plan:
    """The phases after :meth:`_Planning.keep`."""
    work.settle_whole()
    if intra:
        whole = work.whole_devices()  # a data-parallel trial kept on its fewest devices holds them whole
        spread = len(work.spread)
        work.left = work.fill_intra(work.candidates(), whole)
        if len(work.spread) != spread:  # queued trials placed on whole devices hold them too
            whole, spread = work.whole_devices(), len(work.spread)
        # a move may have opened a device for a queued trial (with no devices, every trial waits)
        while work.devices and work.rebalance(whole) and work.left:
            before = len(work.left)
            work.left = work.fill_intra(work.left, whole)
            if len(work.spread) != spread:
                whole, spread = work.whole_devices(), len(work.spread)
            if len(work.left) == before:
                break
        return work.result(INTRA)
    work.inter()
    return work.result(INTER)


#: Marks a trial the cache has not seen (distinct from None, an alone estimate not yet measured).
_UNSEEN = object()


class _KeptCache:
    """What :meth:`Planner.plan` keeps from one plan to the next: the state :meth:`_Planning.keep` leaves behind,
    updated with what changed instead of rebuilt.

    Where every device reports its lanes (``DeviceView.lanes``), ``keep`` records a resident listed in the lanes
    of each of its devices (after the intra regime's shrink, and when it fits them) as it is, and admits a
    resident that the lanes of one of its devices do not list yet (sent there, or waiting in the device's queue;
    a data-parallel trial just grown or moved, on several devices). When every resident is one of those (or is
    on no device that still exists), the state after ``keep``
    (placements in arrival order, each device's computing trials and their predicted remaining work, reported
    lane members that left) is a function of each trial's demand, its alone estimate (the typical one when it
    was never measured) and its devices' views, plus those admissions. The cache holds that state from the last
    plan and updates the trials whose demand object or estimate changed, the devices whose view object changed,
    and the never-measured trials when the typical time moved; the admissions are redone. A plan then costs an
    identity check per trial plus the work of what changed. Otherwise (a resident that does not fit its one
    device, or that too few of its devices hold: :func:`_held_devices`; devices without reported lanes, another
    device set, input that :func:`plan` rejects) :meth:`prepare` answers None and the plan is computed from
    scratch. Either way it is the plan :func:`plan` returns: tests/test_planner.py checks this on random sequences
    of plans, and tests/test_sim.py on whole simulated runs.
    """

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._valid = False
        self.book: ProfileBook | None = None  # the book of the last plan, and its count of changes then
        self.book_count = 0
        self.views: dict[int, DeviceView] = {}  # device index -> the view of the last plan
        self.moved: dict[int, frozenset[str]] = {}  # device -> trials that joined or left its lanes (this plan)
        self.sorted_views: list[DeviceView] = []
        self.dev: dict[int, DeviceView] = {}
        self.capacity: dict[int, int] = {}
        self.snap: dict[int, frozenset[str]] = {}
        self.demands: dict[str, TrialDemand] = {}
        self.rem: dict[str, float] = {}
        self.alone: dict[str, float | None] = {}  # the alone estimate each rem was computed with
        self.comp: set[str] = set()
        self.unmeasured: set[str] = set()  # trials whose rem uses the typical time
        self.typical: float | None = None
        self.intra: bool | None = None
        self.res_on: dict[int, set[str]] = {}  # device -> residents with it among their devices
        self.res_devs: dict[str, tuple[int, ...]] = {}  # resident -> its known devices (as indexed in res_on)
        self.multi: set[str] = set()  # residents on several devices (the regime decides what they keep)
        self.slow: set[str] = set()  # residents that keep() handles otherwise
        self.kept: dict[str, list[int]] = {}  # resident listed in all its devices' lanes -> its devices
        self.home: dict[int, list[tuple[int, str]]] = {}  # device -> kept residents it is home of, (seq, id), sorted
        self.transit: dict[str, int] = {}  # resident its one device's lanes do not list -> that device
        self.transit_on: dict[int, list[tuple[int, str]]] = {}  # device -> its transit residents, sorted
        # resident on several devices that the lanes of one of them do not list -> the devices keep() leaves it
        self.transit_multi: dict[str, list[int]] = {}
        self.transit_multi_keys: list[tuple[int, str]] = []  # (seq, id) of transit_multi, sorted
        self.stay: dict[int, set[str]] = {}  # device -> residents that keep() counts as staying there
        self.order_keys: list[tuple[int, str]] = []  # every kept resident, (seq, id), sorted
        self.order_ids: list[str] = []  # the ids of order_keys, in the same order
        self.ncomp: dict[int, int] = {}
        self.load: dict[int, float] = {}
        self.computing_on: dict[int, list[str]] = {}  # device -> its kept computing residents, in arrival order
        self.leaving: dict[int, set[str]] = {}
        self.free_keys: list[tuple[int, str]] = []  # computing trials not kept as reported, (seq, id), sorted
        self.free_key: dict[str, tuple[int, str]] = {}
        self.kept_assign: list[Assignment] = []  # the assignment of each of order_ids, in the same order
        # device -> what the last plan's admissions did there, for a device whose transit residents are all on it
        # alone (no resident on several devices is admitted there): (its view, its reported members that leave,
        # the (id, P, T) of those residents in arrival order, its lanes after the admissions, the refused (P, T)
        # pairs, which residents were admitted). The admissions are a function of the first three: while they are
        # the same (a trial moving there waits for its iteration's end over several plans), the lanes after are
        # copied instead of rebuilt from the view and admitted again. Replaced when one differs.
        self.admissions: dict[int, tuple[DeviceView, set[str] | None, tuple[tuple[str, int, int], ...], LaneMemory,
                                         list[tuple[int, int]], tuple[bool, ...]]] = {}

    # ---------------------------------------------------------------- devices

    def _devices(self, devices: Sequence[DeviceView]) -> set[int] | None:
        """Take this plan's device views; return the devices whose view changed (their lanes), or None when the
        cache cannot serve this plan (devices without lanes, another device set, invalid views)."""
        views = self.views
        if self._valid and len(devices) == len(views):
            changed: set[int] = set()
            # The usual case (the simulator's): the views in index order, each the last plan's view of its device
            # or a new view of that same device. The views to look at are then found in one C-level pass.
            sorted_views = self.sorted_views
            positions = list(itertools.compress(range(len(devices)), map(operator.is_not, devices, sorted_views)))
            if all(devices[i].index == sorted_views[i].index for i in positions):
                for i in positions:
                    d, old = devices[i], sorted_views[i]
                    if d.lanes is None or d.capacity_bytes != old.capacity_bytes \
                            or d.reserved_bytes != old.reserved_bytes or d.slots != old.slots \
                            or d.curve_key != old.curve_key:
                        return None
                if positions:
                    moved, snap = self.moved, self.snap
                    sorted_views = self.sorted_views = list(sorted_views)
                    for i in positions:
                        d = devices[i]
                        index = d.index
                        views[index] = self.dev[index] = sorted_views[i] = d
                        members = lane_members(d)
                        moved[index] = members.symmetric_difference(snap[index])
                        snap[index] = members
                        changed.add(index)
                return changed
            for d in devices:
                old = views.get(d.index)
                if old is d:
                    continue
                if old is None or d.lanes is None or d.capacity_bytes != old.capacity_bytes \
                        or d.reserved_bytes != old.reserved_bytes or d.slots != old.slots \
                        or d.curve_key != old.curve_key:
                    return None
                changed.add(d.index)
            if changed:
                if len({d.index for d in devices}) != len(devices):
                    return None
                moved = self.moved
                for d in devices:
                    if d.index in changed:
                        views[d.index] = self.dev[d.index] = d
                        members = lane_members(d)
                        moved[d.index] = members.symmetric_difference(self.snap[d.index])
                        self.snap[d.index] = members
                self.sorted_views = [views[index] for index in self.dev]
            return changed
        # A new device set: start over (checked as _Planning checks it).
        self._clear()
        indices = {d.index for d in devices}
        if len(indices) != len(devices) or any(d.lanes is None or d.slots < 1 or d.capacity_bytes < 0
                                               or d.reserved_bytes < 0 for d in devices):
            return None
        self.sorted_views = sorted(devices, key=lambda d: d.index)
        for d in self.sorted_views:
            i = d.index
            self.views[i] = self.dev[i] = d
            self.capacity[i] = max(0, d.capacity_bytes - d.reserved_bytes)
            self.snap[i] = self.moved[i] = lane_members(d)
            self.res_on[i], self.stay[i] = set(), set()
            self.home[i], self.transit_on[i], self.computing_on[i] = [], [], []
            self.ncomp[i], self.load[i] = 0, 0.0
        self._valid = True
        return set(self.dev)

    # ---------------------------------------------------------------- trials

    def _unkeep(self, tid: str, dirty: set[int]) -> None:
        """Undo what :meth:`_status` recorded for a resident (its devices become dirty)."""
        key = (self.demands[tid].seq, tid)
        devs = self.kept.pop(tid, None)
        if devs is not None:
            lst = self.home[devs[0]]
            del lst[bisect.bisect_left(lst, key)]
            i = bisect.bisect_left(self.order_keys, key)
            del self.order_keys[i]
            del self.order_ids[i]
            del self.kept_assign[i]
            for d in devs:
                self.stay[d].discard(tid)
            dirty.update(devs)
            return
        d = self.transit.pop(tid, None)
        if d is not None:
            lst = self.transit_on[d]
            del lst[bisect.bisect_left(lst, key)]
            self.stay[d].discard(tid)
            dirty.add(d)
            return
        devs = self.transit_multi.pop(tid, None)
        if devs is not None:
            lst = self.transit_multi_keys
            del lst[bisect.bisect_left(lst, key)]
            for d in devs:
                self.stay[d].discard(tid)
            dirty.update(devs)

    def _index(self, tid: str, devices: tuple[int, ...], min_devices: int = 1) -> None:
        """Index a resident under each of its known devices (``res_on``), replacing what was there; one on several
        devices, or that needs several (``min_devices``), goes into ``multi`` as :meth:`_Planning.keep` puts it."""
        for d in self.res_devs.pop(tid, ()):
            self.res_on[d].discard(tid)
        known = tuple(d for d in devices if d in self.res_on)
        if known:
            self.res_devs[tid] = known
            for d in known:
                self.res_on[d].add(tid)
        if len(devices) > 1 or (devices and min_devices > 1):
            self.multi.add(tid)
        else:
            self.multi.discard(tid)

    def _status(self, t: TrialDemand, intra: bool, dirty: set[int]) -> None:
        """What ``keep`` does with resident ``t``: keep it as reported (``kept``), admit it on its one device
        (``transit``) or on those of its devices whose lanes do not list it (``transit_multi``), nothing (no device
        of it exists), or anything else (``slow``: the plan is computed from scratch)."""
        tid = t.trial_id
        self._unkeep(tid, dirty)
        self.slow.discard(tid)
        devices = t.devices
        if not devices:
            return
        size = t.p_bytes + t.t_bytes
        capacity, snap = self.capacity, self.snap
        if len(devices) == 1 or (intra and tid in self.comp and t.min_devices <= 1):
            devs = [devices[0]] if devices[0] in self.dev else []
            if devs and size > capacity[devs[0]]:
                self.slow.add(tid)  # keep() counts it as staying but does not keep it (it can never fit there)
                return
        else:
            devs = [d for d in dict.fromkeys(devices) if d in self.dev]
            computing = tid in self.comp
            held = _held_devices(devs, capacity, size, t.min_devices if computing else len(devs), intra and computing)
            if held is None:
                self.slow.add(tid)  # keep() counts it as staying but does not keep it
                return
            devs = held
        if not devs:
            return
        key = (t.seq, tid)
        if all(tid in snap[d] for d in devs):
            self.kept[tid] = devs
            bisect.insort(self.home[devs[0]], key)
            i = bisect.bisect_left(self.order_keys, key)
            self.order_keys.insert(i, key)
            self.order_ids.insert(i, tid)
            self.kept_assign.insert(i, _assignment(tid, devs, devices))
            for d in devs:
                self.stay[d].add(tid)
            dirty.update(devs)
        elif len(devs) == 1:
            d = devs[0]
            self.transit[tid] = d
            bisect.insort(self.transit_on[d], key)
            self.stay[d].add(tid)
            dirty.add(d)
        else:
            self.transit_multi[tid] = devs
            bisect.insort(self.transit_multi_keys, key)
            for d in devs:
                self.stay[d].add(tid)
            dirty.update(devs)

    def _take(self, t: TrialDemand, alone: float | None, typical: float) -> None:
        """Record a trial's demand and its predicted remaining time (as :class:`_Planning` computes it)."""
        tid = t.trial_id
        self.demands[tid] = t
        self.alone[tid] = alone
        remaining = t.remaining
        self.unmeasured.discard(tid)
        if remaining is None or remaining == math.inf:
            self.rem[tid] = OPEN_ENDED_S
        elif remaining <= 0:
            self.rem[tid] = 0.0
        else:
            self.rem[tid] = remaining * (typical if alone is None else alone)
            if alone is None:
                self.unmeasured.add(tid)
        if not t.paused and (remaining is None or remaining > 0):
            self.comp.add(tid)
        else:
            self.comp.discard(tid)

    def _sync_free(self, tid: str) -> None:
        """Keep ``free`` (computing trials that keep() does not keep as reported, in arrival order) in step."""
        key = self.free_key.pop(tid, None)
        if key is not None:
            i = bisect.bisect_left(self.free_keys, key)
            del self.free_keys[i]
        t = self.demands.get(tid)
        if t is not None and tid in self.comp and tid not in self.kept:
            key = self.free_key[tid] = (t.seq, tid)
            bisect.insort(self.free_keys, key)

    def _drop(self, tid: str, dirty: set[int]) -> None:
        """A trial left the input."""
        self._unkeep(tid, dirty)
        self._index(tid, ())
        self.slow.discard(tid)
        del self.demands[tid]
        del self.rem[tid]
        del self.alone[tid]
        self.comp.discard(tid)
        self.unmeasured.discard(tid)
        self._sync_free(tid)

    # ---------------------------------------------------------------- a plan

    def prepare(
        self, trials: Sequence[TrialDemand], devices: Sequence[DeviceView], book: ProfileBook,
        cfg: PlannerSettings,
    ) -> _Planning | None:
        """The state after :meth:`_Planning.keep` for this plan, or None when it must be computed from scratch."""
        changed_views = self._devices(devices)
        if changed_views is None:
            self._clear()
            return None
        demands, alone_used = self.demands, self.alone
        alone_of = book._alone.get
        typical = book.typical()
        changed: list[TrialDemand] = []
        ids: set[str] = set()
        add = ids.add
        news, self.book_count = book.changed_since(self.book_count if self.book is book else 0)
        if self.book is not book:  # another book: compare every estimate
            self.book = book
            for t in trials:
                tid = t.trial_id
                add(tid)
                if demands.get(tid) is not t or alone_of(tid) != alone_used.get(tid, _UNSEEN):
                    changed.append(t)
        else:
            ids.update(map(_TRIAL_ID, trials))
            get = demands.get
            changed = [t for t in trials if get(t.trial_id) is not t]  # the one pass over every trial
        if len(ids) != len(trials):
            self._clear()
            return None  # duplicates: plan() says which
        for t in changed:
            if t.p_bytes < 0 or t.t_bytes < 0 or t.since_checkpoint < 0 or type(t.devices) is not tuple \
                    or t.remaining != t.remaining or t.turn != t.turn:  # (NaN: plan() says which)
                self._clear()
                return None
        dirty: set[int] = set(changed_views)  # devices whose kept or staying residents, or lanes, changed
        dirty_load: set[int] = set()  # devices where a kept trial's predicted time changed
        if len(demands) + sum(1 for t in changed if t.trial_id not in demands) != len(ids):
            for tid in [tid for tid in demands if tid not in ids]:
                self._drop(tid, dirty)
        rem_changed: list[str] = []
        recheck: set[str] = set()
        rem, unmeasured, kept = self.rem, self.unmeasured, self.kept
        for t in changed:
            tid = t.trial_id
            old = demands.get(tid)
            remaining = t.remaining
            # What keep() does with it depends on everything but its remaining budget, as long as that stays
            # positive (or open); when only that or its estimate moved (an iteration went by), only its predicted
            # time changes.
            if old is not None and old[2:] == t[2:] and remaining is not None and 0 < remaining < math.inf \
                    and old.remaining is not None and 0 < old.remaining < math.inf:
                alone = alone_of(tid)
                demands[tid] = t
                alone_used[tid] = alone
                if alone is None:
                    rem[tid] = remaining * typical
                    unmeasured.add(tid)
                else:
                    rem[tid] = remaining * alone
                    unmeasured.discard(tid)
                devs = kept.get(tid)
                if devs is not None:
                    dirty_load.add(devs[0])
                continue
            if old is not None:
                self._unkeep(tid, dirty)  # (its arrival key may change)
            self._take(t, alone_of(tid), typical)
            rem_changed.append(tid)
            self._index(tid, t.devices, t.min_devices)
            recheck.add(tid)
        for tid in news:  # estimates the book changed of trials whose demand did not change (the others are done)
            if tid in ids:
                alone = alone_of(tid)
                if alone != alone_used.get(tid, _UNSEEN):
                    self._take(demands[tid], alone, typical)
                    rem_changed.append(tid)
        if typical != self.typical:  # every never-measured trial's predicted time moves with it
            unmeasured = self.unmeasured
            self.rem.update({tid: demands[tid].remaining * typical for tid in unmeasured})
            for tid in unmeasured.intersection(self.kept):
                dirty_load.add(self.kept[tid][0])
            self.typical = typical
        intra = len(self.comp) > len(self.dev)
        if intra != self.intra:
            recheck |= self.multi
            self.intra = intra
        for d in changed_views:
            recheck |= self.res_on[d].intersection(self.moved[d])
        for tid in recheck:
            self._status(demands[tid], intra, dirty)
            self._sync_free(tid)
        # Per device: computing kept trials and their remaining work, summed in arrival order as keep() does,
        # and the reported members that leave (kept up to date even when this plan is computed from scratch).
        comp = self.comp
        for tid in rem_changed:
            devs = kept.get(tid)
            if devs is not None:
                dirty_load.add(devs[0])
        computing_on = self.computing_on
        for d in dirty:
            computing_on[d] = [tid for _, tid in self.home[d] if tid in comp]
            self.ncomp[d] = len(computing_on[d])
        for d in dirty | dirty_load:
            # 0.0 + rem[a] + rem[b] + ..., left to right in arrival order: the very floats keep() adds up.
            self.load[d] = functools.reduce(operator.add, map(rem.__getitem__, computing_on[d]), 0.0)
        for d in dirty:
            leaving = self.snap[d] - self.stay[d]
            if leaving:
                self.leaving[d] = set(leaving)
            else:
                self.leaving.pop(d, None)
        if self.slow:
            return None
        work = _Planning.__new__(_Planning)
        work.book, work.cfg = book, cfg
        work.devices, work.dev, work.capacity = self.sorted_views, self.dev, self.capacity
        work.trials, work.rem, work.comp = demands, rem, comp
        work._snap = self.snap
        work._fresh()
        work._leaving = dict(self.leaving)
        work.multi = self.multi
        work.ncomp = dict(self.ncomp)
        work.load = dict(self.load)
        keys = self.order_keys
        admitted: list[tuple[int, str]] = []
        homes: dict[int, list[tuple[int, str]]] = {}  # device -> the transit residents placed with it as home
        transit, transit_multi, snap = self.transit, self.transit_multi, self.snap
        waiting = []
        # A device whose transit residents are all on it alone is admitted on independently of the others: where
        # the last plan did the same admissions there (``admissions``), their outcome is reused.
        shared = set(itertools.chain.from_iterable(transit_multi.values())) if transit_multi else ()
        done, leaving_of, dev = self.admissions, self.leaving, self.dev
        to_record: dict[int, tuple[tuple[str, int, int], ...]] = {}  # device -> its residents, admitted below
        for d, lst in self.transit_on.items():
            if not lst:
                continue
            if d not in shared:
                residents = tuple([(tid, demands[tid].p_bytes, demands[tid].t_bytes) for _, tid in lst])
                last = done.get(d)
                if last is not None and last[0] is dev[d] and last[2] == residents and last[1] == leaving_of.get(d):
                    work._mem[d] = last[3].copy()  # as mem(d) then the admissions would leave it
                    work._leaving.pop(d, None)
                    work._rejected[d] = list(last[4])  # (the admissions make the entry even when empty)
                    for key, placed in zip(lst, last[5], strict=True):
                        if placed:
                            homes.setdefault(d, []).append(key)
                            admitted.append(key)
                    continue
                to_record[d] = residents
            waiting.append(lst)
        if self.transit_multi_keys:
            waiting.append(self.transit_multi_keys)
        # keep() admits these in arrival order (one device's order is all that matters, except that a resident on
        # several devices that one of them does not admit leaves them all, which later ones may then fit)
        for key in waiting[0] if len(waiting) == 1 else heapq.merge(*waiting):
            tid = key[1]
            t = demands[tid]
            d = transit.get(tid)
            if d is not None:
                if not work.admit(t, d):
                    continue
                homes.setdefault(d, []).append(key)
                admitted.append(key)
                continue
            devs = transit_multi[tid]
            recorded = 0  # as keep() does: devices (a prefix of devs) whose lanes now hold it
            for d in devs:
                if tid not in snap[d] and not work.admit(t, d):
                    break
                recorded += 1
            if recorded < len(devs):  # the device has not got it (it waits in its queue): it is re-placed
                for d in devs[:recorded]:
                    work.release(t, d)
                for d in devs[recorded:]:  # a reported lane still holding it past the failing device
                    if tid in snap[d]:
                        work.mem(d).leave(tid)
                continue
            homes.setdefault(devs[0], []).append(key)
            admitted.append(key)
        for d, residents in to_record.items():
            after = work._mem.get(d)
            if after is None:  # (the first admission on a device reads its lanes: not reached)
                done.pop(d, None)
                continue
            leaving = leaving_of.get(d)
            here = set(homes.get(d, ()))
            done[d] = (dev[d], None if leaving is None else set(leaving), residents, after.copy(),
                       list(work._rejected.get(d, ())), tuple(key in here for key in self.transit_on[d]))
        for d, here in homes.items():
            n = 0
            load = 0.0
            for _, tid in sorted(self.home[d] + here):
                if tid in comp:
                    n += 1
                    load += rem[tid]
            work.ncomp[d] = n
            work.load[d] = load
        if admitted:
            alloc = dict(kept)  # (no phase depends on the order of ``alloc``: see _Planning._fresh)
            prefix, keys = list(self.kept_assign), list(keys)
            for key in sorted(admitted):
                tid = key[1]
                d = transit.get(tid)
                devs = alloc[tid] = [d] if d is not None else transit_multi[tid]
                i = bisect.bisect_left(keys, key)
                keys.insert(i, key)
                prefix.insert(i, _assignment(tid, devs, demands[tid].devices))
            order = list(map(_SECOND, keys))
            work.alloc = _Alloc(alloc)
            free_keys = self.free_keys
            arrivals = list(map(_SECOND, free_keys))
            drop = []
            for key in admitted:  # admitted computing trials are placed now: not candidates
                i = bisect.bisect_left(free_keys, key)
                if i < len(free_keys) and free_keys[i] == key:
                    drop.append(i)
            for i in sorted(drop, reverse=True):
                del arrivals[i]
            work.arrivals = arrivals
            work.kept_prefix, work.kept_ids, work.kept_keys = prefix, alloc, keys
        else:
            order = list(self.order_ids)
            work.alloc = _Alloc(kept)
            work.arrivals = list(map(_SECOND, self.free_keys))
            work.kept_prefix, work.kept_ids, work.kept_keys = self.kept_assign, kept, keys
        work.order = order
        return work


class Planner:
    """What the executor holds: a :class:`ProfileBook` and settings, and :func:`plan` over them.

    Call :meth:`observe` after every measured iteration and :meth:`plan` whenever a group arrives or a trial
    ends, is stopped, pauses at its budget or is promoted; apply :attr:`Plan.changes`.

    Args:
        settings: Thresholds (None: the defaults).
        book: A profile book to start from (None: an empty one).
    """

    def __init__(self, settings: PlannerSettings | None = None, book: ProfileBook | None = None) -> None:
        self.settings = settings or PlannerSettings()
        self.book = book if book is not None else ProfileBook()
        # Across plans: the state keep() leaves (_KeptCache), and for plans computed from scratch the trials in
        # each device view's reported lanes, by the view's identity (the view is held, so its id is not reused).
        # A caller that passes the same TrialDemand and DeviceView objects for what did not change (as the
        # simulator does) saves most of a plan's work.
        self._kept = _KeptCache()
        self._snap_cache: dict[int, tuple[DeviceView, frozenset[str]]] = {}

    def observe(
        self, trial_id: str, sec_per_iter: float, *, devices: int = 1, colocated: int = 1,
        curve_key: str = DEFAULT_CURVE_KEY,
    ) -> None:
        """Record one measured iteration (:meth:`ProfileBook.record`)."""
        self.book.record(trial_id, sec_per_iter, devices=devices, colocated=colocated, curve_key=curve_key)

    def forget(self, trial_id: str) -> None:
        """Drop an ended trial's own measurements."""
        self.book.forget(trial_id)

    def plan(self, trials: Sequence[TrialDemand], devices: Sequence[DeviceView]) -> Plan:
        """:func:`plan` with this planner's book and settings.

        The same plan, computed incrementally where it can be (:class:`_KeptCache`).
        """
        work = self._kept.prepare(trials, devices, self.book, self.settings)
        if work is not None:
            return _place(work, len(work.comp) > len(work.devices))
        cache = self._snap_cache
        if len(cache) > _SNAP_CACHE_FACTOR * max(1, len(devices)):
            live = {id(d) for d in devices}
            for key in [key for key in cache if key not in live]:
                del cache[key]
        return _run(_Planning(trials, devices, self.book, self.settings, cache))
