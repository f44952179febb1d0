"""A virtual-time, multi-GPU, lane-aware simulator that drives the real planner, lane policies and searchers.

Modules, one concern each:

- :mod:`fluidsalus.sim.model`: the ground truth (speed under co-location, data parallelism, memory, costs);
- :mod:`fluidsalus.sim.workload`: trial records, synthetic small trials, trace files;
- :mod:`fluidsalus.sim.searchers`: the real searchers with Ray Tune's defaults;
- :mod:`fluidsalus.sim.strategies`: the planners compared (``waterfill`` and the static baselines);
- :mod:`fluidsalus.sim.engine`: the event-driven core;
- :mod:`fluidsalus.sim.runner`: comparisons and the speed benchmark;
- :mod:`fluidsalus.sim.cli`: ``python -m fluidsalus.sim``.

See docs/planner.md for the model, its parameters and measured results.
"""

from fluidsalus.sim.engine import SimResult, Simulation, SimulationError
from fluidsalus.sim.model import Hardware
from fluidsalus.sim.runner import RunSpec, bench, compare, simulate, speedups
from fluidsalus.sim.strategies import PLANNERS, make_strategy
from fluidsalus.sim.workload import TrialRecord, Workload, generate_workload, load_trace, save_trace

__all__ = [
    "PLANNERS",
    "Hardware",
    "RunSpec",
    "SimResult",
    "Simulation",
    "SimulationError",
    "TrialRecord",
    "Workload",
    "bench",
    "compare",
    "generate_workload",
    "load_trace",
    "make_strategy",
    "save_trace",
    "simulate",
    "speedups",
]
