"""The planners the simulator compares. Each decides *where* trials run; the engine (:mod:`fluidsalus.sim.engine`)
runs them there under the same cost model.

- ``waterfill``: :func:`fluidsalus.trialgroup.planner.plan` (the real planner), re-planned at every change; trials
  share a GPU as Salus lanes of one process (one CUDA context); memory-aware (the lane rule); paused trials stay
  resident.
- ``one_per_gpu``: Ray Tune's default, one whole GPU per trial; a paused trial gives its GPU back.
- ``fractional_k``: Ray Tune with ``num_gpus=1/k`` placed by Ray's scheduler; ``k`` processes per GPU, each with
  its own CUDA context; no memory check (a process that does not fit crashes out of memory and is retried);
  a paused trial gives its share back.
- ``fluid_heuristic``: Fluid's published heuristic, two trials per GPU at a 0.6 / 0.4 MPS share; no memory
  check; a paused trial gives its share back.

**Ray's placement** (``one_per_gpu``, ``fractional_k``): the hybrid scheduling policy over nodes (a node's score
is its GPU utilisation after the placement, counted as 0 below the 0.5 spread threshold; the lowest score
wins, ties to the lower node) and, within the node, the best-fit GPU instance for a fractional request (the
GPU whose free share is smallest but large enough: ``NodeResourceInstanceSet::TryAllocate``). Ray's random
choice among the top-k nodes is left out, for determinism. Trials start in Ray's order: resumed trials first,
then new ones in creation order, then ones retried after a failure; a trial that does not fit blocks those
behind it (all requests are the same size).

**Fluid's heuristic**: each GPU offers a 0.6 and a 0.4 share (MPS active-thread percentages: a capped trial
runs at ``min(1, share / demand)`` of its speed). A trial takes the 0.6 share of an empty GPU if there is one,
else the free share of a half-used GPU.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from typing import TYPE_CHECKING

from fluidsalus.sim.model import Hardware
from fluidsalus.trialgroup.planner import (
    KEEP,
    START,
    DeviceView,
    Plan,
    Planner,
    PlannerSettings,
    TrialDemand,
)

if TYPE_CHECKING:  # pragma: no cover
    from fluidsalus.sim.engine import SimTrial, Simulation

#: Share units per GPU: divisible by 2, 4, 8 and 5 (0.6 and 0.4 are 72 and 48 units).
UNITS = 120
#: Ray's hybrid policy packs a node until its utilisation reaches this, then spreads.
SPREAD_THRESHOLD = 0.5
#: Fluid's shares (fractions of a GPU) of the two trials on a GPU.
FLUID_SHARES = (0.6, 0.4)
_VERSION = operator.attrgetter("version")
_VIEW = operator.attrgetter("view")
_ACTION = operator.attrgetter("action")
#: The planners, in the order of the report.
PLANNERS = ("waterfill", "one_per_gpu", "fractional_2", "fractional_4", "fractional_8", "fluid_heuristic")


class Strategy:
    """Decides where trials run. Subclasses implement :meth:`place`.

    Attributes:
        name: The planner's name.
        lanes: True: trials run in Salus lanes (a ``LaneManager`` per GPU, one CUDA context per GPU); False: one
            process per trial (its own context, no memory check).
        keeps_paused: True: a trial paused at its budget stays resident; False: it releases its GPU share at the
            next control step unless promoted (Ray pauses by checkpointing and stopping the trial's actor).
    """

    name = "strategy"
    lanes = False
    keeps_paused = False

    def bind(self, sim: Simulation) -> None:
        """Attach to a simulation before it starts."""
        self.sim = sim

    def place(self, now: float) -> None:
        """Start (and move) trials; called at every control step."""
        raise NotImplementedError

    def observe(self, trial: SimTrial, duration: float, devices: int, colocated: int) -> None:
        """Told every finished iteration's duration (only the water-filling planner uses it)."""

    def released(self, trial: SimTrial) -> None:
        """Told when a trial gave its GPU share back (ended, paused and released, crashed)."""


# ------------------------------------------------------------------------------------------ Ray Tune


class RayGpuPool:
    """Ray's GPU accounting for fractional requests (see the module docstring).

    Each node keeps the largest free share of its GPUs, so a request scans nodes, not GPUs, and stops at the
    first node with a zero score (no later node can beat it: ties go to the lower node).

    Args:
        gpus: GPUs.
        per_node: GPUs per node.
    """

    def __init__(self, gpus: int, per_node: int) -> None:
        self.free_units = [UNITS] * gpus
        self.nodes = [list(range(start, min(start + per_node, gpus))) for start in range(0, gpus, per_node)]
        self.node_used = [0] * len(self.nodes)
        self.node_units = [len(node) * UNITS for node in self.nodes]
        self.node_max_free = [UNITS] * len(self.nodes)
        self.node_of = [g // per_node for g in range(gpus)]

    def allocate(self, units: int) -> int | None:
        """The GPU Ray would give a request of ``units`` (and book it), or None when nothing fits."""
        best_node, best_score = -1, 0.0
        node_used, node_units = self.node_used, self.node_units
        for node, top in enumerate(self.node_max_free):
            if top < units:
                continue
            util = (node_used[node] + units) / node_units[node]
            score = 0.0 if util < SPREAD_THRESHOLD else util
            if best_node < 0 or score < best_score:
                best_node, best_score = node, score
                if score == 0.0:
                    break
        if best_node < 0:
            return None
        free_units = self.free_units
        gpu, left = -1, UNITS + 1
        for g in self.nodes[best_node]:  # best fit within the node, ties to the first GPU
            free = free_units[g]
            if free >= units and free - units < left:
                gpu, left = g, free - units
        free_units[gpu] -= units
        node_used[best_node] += units
        self.node_max_free[best_node] = max(free_units[g] for g in self.nodes[best_node])
        return gpu

    def free(self, gpu: int, units: int) -> None:
        """Give a request's units back."""
        self.free_units[gpu] += units
        node = self.node_of[gpu]
        self.node_used[node] -= units
        if self.free_units[gpu] > self.node_max_free[node]:
            self.node_max_free[node] = self.free_units[gpu]


class RayStrategy(Strategy):
    """Ray Tune with ``num_gpus = 1 / per_gpu`` per trial (``per_gpu=1``: Ray Tune's one GPU per trial).

    Args:
        name: Planner name.
        per_gpu: Trials per GPU.
    """

    def __init__(self, name: str, per_gpu: int) -> None:
        self.name = name
        self.units = UNITS // per_gpu

    def bind(self, sim: Simulation) -> None:
        super().bind(sim)
        self.pool = RayGpuPool(sim.hardware.gpus, sim.hardware.gpus_per_node)

    def place(self, now: float) -> None:
        sim = self.sim
        while sim.queue:
            gpu = self.pool.allocate(self.units)
            if gpu is None:
                return
            trial = sim.pop_queue()
            trial.slot = (gpu, self.units)
            sim.start_process(trial, gpu, share=1.0, now=now)

    def released(self, trial: SimTrial) -> None:
        if trial.slot is not None:
            gpu, units = trial.slot
            self.pool.free(gpu, units)
            trial.slot = None


class FluidHeuristicStrategy(Strategy):
    """Fluid's static heuristic: two trials per GPU at 0.6 / 0.4 MPS shares."""

    name = "fluid_heuristic"

    def bind(self, sim: Simulation) -> None:
        super().bind(sim)
        self.taken = [[False, False] for _ in range(sim.hardware.gpus)]
        # Candidate GPUs by index (lazy heaps: an entry whose GPU changed state since is dropped when seen).
        self.empty: list[int] = list(range(sim.hardware.gpus))
        self.partial: list[int] = []

    def _slot(self) -> tuple[int, int] | None:
        """The lowest empty GPU's 0.6 share, else the free share of the lowest half-used GPU."""
        taken, empty, partial = self.taken, self.empty, self.partial
        while empty and any(taken[empty[0]]):
            heapq.heappop(empty)
        if empty:
            return empty[0], 0
        while partial and taken[partial[0]][0] == taken[partial[0]][1]:
            heapq.heappop(partial)
        if partial:
            gpu = partial[0]
            return gpu, 1 if not taken[gpu][1] else 0
        return None

    def _set(self, gpu: int, which: int, value: bool) -> None:
        pair = self.taken[gpu]
        pair[which] = value
        if not pair[0] and not pair[1]:
            heapq.heappush(self.empty, gpu)
        elif pair[0] != pair[1]:
            heapq.heappush(self.partial, gpu)

    def place(self, now: float) -> None:
        sim = self.sim
        while sim.queue:
            slot = self._slot()
            if slot is None:
                return
            gpu, which = slot
            self._set(gpu, which, True)
            trial = sim.pop_queue()
            trial.slot = slot
            sim.start_process(trial, gpu, share=FLUID_SHARES[which], now=now)

    def released(self, trial: SimTrial) -> None:
        if trial.slot is not None:
            gpu, which = trial.slot
            self._set(gpu, which, False)
            trial.slot = None


# ------------------------------------------------------------------------------------------ water-filling


class WaterfillStrategy(Strategy):
    """The real planner (:class:`~fluidsalus.trialgroup.planner.Planner`) over Salus lanes.

    At every control step it passes every live trial (queued, starting, running, moving, paused) with its
    remaining budget and current (or already decided) devices, and applies the plan's changes: starts, moves
    at the next iteration boundary, preemptions. Every finished iteration's duration goes to the planner's
    profile book with the allocation it ran at.

    Args:
        settings: Planner thresholds (None: defaults, with the hardware's move time as the move cost).
        check_views: Tests: check at every plan that each trial's cached demand equals a freshly built one, and
            each device's count of computing trials the one its lanes give.
    """

    name = "waterfill"
    lanes = True
    keeps_paused = True

    def __init__(self, settings: PlannerSettings | None = None, check_views: bool = False) -> None:
        self.settings = settings
        self.check_views = check_views

    def bind(self, sim: Simulation) -> None:
        super().bind(sim)
        hw: Hardware = sim.hardware
        self.planner = Planner(self.settings or PlannerSettings(move_cost_s=hw.move_s))
        self.capacity = hw.gpu_memory - hw.context_bytes  # one CUDA context per device actor
        # Per GPU (in index order): the view of its lanes last built, and the GPU's version then (-1: none yet).
        self.views: list[DeviceView] = [DeviceView(i, self.capacity, hw.slots) for i in range(hw.gpus)]
        self.versions: list[int] = [-1] * hw.gpus
        self.plans = 0

    def device_views(self) -> list[DeviceView]:
        """Each GPU with a snapshot of its real lanes (rebuilt only for GPUs whose lanes changed: their version
        moved; the others are the same objects as in the last plan, as the executor's views are)."""
        devices, views = self.sim.devices, self.views
        now = list(map(_VERSION, devices))
        changed = list(itertools.compress(range(len(now)), map(operator.ne, now, self.versions)))
        if changed:
            slots = self.sim.hardware.slots
            for i in changed:
                dev = devices[i]
                assert dev.lm is not None
                views[i] = DeviceView(dev.index, self.capacity, slots, lanes=tuple(dev.lm.lanes()))
            self.versions = now
        return list(views)

    def observe(self, trial: SimTrial, duration: float, devices: int, colocated: int) -> None:
        # Planner.observe, without its extra call (this runs for nearly every simulated iteration).
        self.planner.book.record(trial.tid, duration, devices=devices, colocated=colocated)

    def plan(self) -> Plan | None:
        """Plan every live trial (their cached demands) on the GPUs' lanes; None when no trial is live."""
        sim = self.sim
        max_iterations = sim.max_iterations
        # (the cached views in C-level passes; the few stale ones rebuilt)
        live = list(sim.live_trials())
        demands = list(map(_VIEW, live))
        for i in itertools.compress(range(len(demands)), map(operator.is_, demands, itertools.repeat(None))):
            demands[i] = live[i].demand_view(max_iterations)
        if self.check_views:
            stale = [d for d in demands if d != sim.trials[d.trial_id].build_view(max_iterations)]
            if stale:
                raise AssertionError(f"stale demand views: {stale[:3]}")
            miscounted = [dev.index for dev in sim.devices if dev.n_computing != dev.computing()]
            if miscounted:
                raise AssertionError(f"computing counts off on devices {miscounted}")
        if not demands:
            return None
        self.plans += 1
        return self.planner.plan(self.adjust(demands), self.device_views())

    def adjust(self, demands: list[TrialDemand]) -> list[TrialDemand]:
        """What the planner is told beyond the trials' cached demands (a replay's executor rules); as they are."""
        return demands

    def place(self, now: float) -> None:
        plan = self.plan()
        if plan is None:
            return
        sim = self.sim
        trials = sim.trials
        assignments = plan.assignments
        # the changes (every action but KEEP), in their order, found in C-level passes: most trials keep their place
        for a in itertools.compress(assignments, map(operator.ne, map(_ACTION, assignments), itertools.repeat(KEEP))):
            trial = trials[a.trial_id]
            if a.action == START:
                sim.start_lanes(trial, a.devices, now)
            else:
                sim.move(trial, a.devices, now)
        for tid in plan.preempted:
            sim.preempt(trials[tid], now)


def make_strategy(name: str) -> Strategy:
    """The strategy of a planner name (one of :data:`PLANNERS`)."""
    if name == "waterfill":
        return WaterfillStrategy()
    if name == "one_per_gpu":
        return RayStrategy(name, 1)
    if name.startswith("fractional_"):
        return RayStrategy(name, int(name.split("_", 1)[1]))
    if name == "fluid_heuristic":
        return FluidHeuristicStrategy()
    raise ValueError(f"unknown planner {name!r}; one of {', '.join(PLANNERS)}")


__all__ = [
    "PLANNERS",
    "FluidHeuristicStrategy",
    "RayGpuPool",
    "RayStrategy",
    "Strategy",
    "TrialDemand",
    "WaterfillStrategy",
    "make_strategy",
]
