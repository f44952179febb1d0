"""Run one workload under several planners and compare them, and the engine's speed benchmark."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from fluidsalus.sim.engine import SimResult, Simulation
from fluidsalus.sim.model import Hardware
from fluidsalus.sim.searchers import make_searcher
from fluidsalus.sim.strategies import PLANNERS, make_strategy
from fluidsalus.sim.workload import Workload, generate_workload

#: Workload of the speed benchmark: every trial runs its full budget (random search), so the run is nearly
#: all iterations and few placement decisions; it measures the event core, searcher calls included.
BENCH_TRIALS = 1000
BENCH_MAX_T = 200
BENCH_PLANNERS = ("one_per_gpu", "fractional_4", "waterfill")


@dataclass(frozen=True)
class RunSpec:
    """What to simulate.

    Attributes:
        searcher: Searcher name (:data:`fluidsalus.sim.searchers.SEARCHERS`).
        trials: Trials the searcher creates.
        seed: Seed of the searcher (the workload has its own).
        hardware: The virtual cluster.
        max_t: Largest budget (None: the searcher's default).
        target: Time-to-target's metric value (None: the workload's default quantile).
        lane_policy: Lane policy of ``waterfill``.
        brackets: Most brackets at once of ``bohb`` and ``hyperband`` (None: all).
    """

    searcher: str
    trials: int
    seed: int
    hardware: Hardware
    max_t: int | None = None
    target: float | None = None
    lane_policy: str = "fifo"
    brackets: int | None = None


def simulate(spec: RunSpec, workload: Workload, planner: str) -> SimResult:
    """Simulate one planner.

    Args:
        spec: The run.
        workload: Its records.
        planner: One of :data:`fluidsalus.sim.strategies.PLANNERS`.

    Returns:
        The figures.
    """
    searcher, max_iterations = make_searcher(spec.searcher, spec.trials, spec.seed, workload.metric, workload.mode,
                                             spec.hardware.gpus, spec.max_t, spec.brackets)
    target = spec.target if spec.target is not None else workload.default_target(max_iterations)
    sim = Simulation(make_strategy(planner), workload, searcher, max_iterations, spec.hardware, target=target,
                     lane_policy=spec.lane_policy)
    return sim.run()


def compare(spec: RunSpec, workload: Workload, planners: Sequence[str] = PLANNERS) -> dict[str, SimResult]:
    """Simulate each planner on the same workload and searcher seed.

    Returns:
        ``planner -> SimResult``, in the order given.
    """
    return {name: simulate(spec, workload, name) for name in planners}


def speedups(results: dict[str, SimResult]) -> dict[str, Any]:
    """Makespan ratios of ``waterfill`` against ``one_per_gpu`` and the best static fractional packing."""
    out: dict[str, Any] = {}
    ours = results.get("waterfill")
    if ours is None or ours.makespan_s <= 0:
        return out
    if "one_per_gpu" in results:
        out["vs_one_per_gpu"] = results["one_per_gpu"].makespan_s / ours.makespan_s
    fractional = {k: v for k, v in results.items() if k.startswith("fractional_")}
    if fractional:
        best = min(fractional, key=lambda k: fractional[k].makespan_s)
        out["best_fractional"] = best
        out["vs_best_fractional"] = fractional[best].makespan_s / ours.makespan_s
    return out


def bench(hardware: Hardware, seed: int = 0, trials: int = BENCH_TRIALS, max_t: int = BENCH_MAX_T,
          planners: Sequence[str] = BENCH_PLANNERS) -> dict[str, Any]:
    """Measure simulated trial-iterations per second of the engine on a long-trial workload.

    Args:
        hardware: The virtual cluster.
        seed: Seed.
        trials: Trials (random search, each run to ``max_t``).
        max_t: Iterations per trial.
        planners: Planners to time.

    Returns:
        ``{"iterations": ..., "wall_s": ..., "sim_iterations_per_s": ..., "per_planner": {...}}``.
    """
    workload = generate_workload(trials, seed, hardware.gpu_memory - hardware.context_bytes)
    spec = RunSpec("random", trials, seed, replace(hardware), max_t=max_t, target=None)
    per: dict[str, float] = {}
    iterations = 0
    started = time.perf_counter()
    for name in planners:
        result = simulate(spec, workload, name)
        iterations += result.iterations
        per[name] = round(result.sim_iterations_per_s, 1)
    wall = time.perf_counter() - started
    return {"iterations": iterations, "wall_s": round(wall, 3),
            "sim_iterations_per_s": round(iterations / wall, 1), "per_planner": per}
