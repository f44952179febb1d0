"""How the driver's own cost grows with a sweep's length: ASHA over N trials that do no work.

    python benchmarks/long_sweep.py                              # N = 250, 500, 1000, 2000; every tool
    python benchmarks/long_sweep.py --trials 1000 --tools fluidsalus --json-only

Each trial reports :data:`REPORTS` times and does nothing else, so the whole time is the engine's: for
fluidsalus the driver (searcher, planner, store) and the round trips to the virtual CPU devices; for Optuna
(``n_jobs=2``, in-memory storage, ``SuccessiveHalvingPruner``) the study and the pruner. ``fluidsalus`` runs
:class:`~fluidsalus.searchers.ASHA` with ``grace_period=1``, ``reduction_factor=3``, ``max_t=REPORTS`` and a
fixed seed; ``optuna`` the pruner with the same rungs and a seeded ``RandomSampler``; ``fluidsalus_optuna`` the
same study through :func:`fluidsalus.optuna.optimize`, whose trials ask the driver for each suggestion and each
pruning decision (a round trip per report). Ray is started once, before any
timing (``trivial`` in ``compare.py`` measures the per-trial cost of a short sweep; Ray Tune, at about 2 s per
trial here, is left out: 2,000 trials would take more than an hour).

A driver whose cost per trial stays flat scales; one whose cost per trial grows with N does work in proportion
to the trials seen at every step. Printed per tool and N: ``wall_s``, ``ms_per_trial`` and, for both fluidsalus
tools, ``driver_cpu_s`` (this process's CPU time: the driver, not the device actors). The last line is one JSON object
``{"reports": ..., "runs": [{"tool": ..., "trials": ..., "wall_s": ..., ...}, ...]}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from typing import Any

#: Reports (iterations) per trial: rungs at 1, 3 and 9 with reduction factor 3.
REPORTS = 9
REDUCTION_FACTOR = 3
TRIALS = (250, 500, 1000, 2000)
TOOLS = ("fluidsalus", "optuna", "fluidsalus_optuna")
SEED = 0


def value(x: float, step: int) -> float:
    """The score of a trial with hyperparameter ``x`` at its ``step``-th report (1-based)."""
    return x * step / REPORTS


def fluidsalus_trial(config: dict[str, Any]) -> None:
    import fluidsalus

    for step in range(1, REPORTS + 1):
        fluidsalus.report({"score": value(config["x"], step)})


def run_fluidsalus(trials: int, storage: str) -> dict[str, Any]:
    import fluidsalus
    from fluidsalus.searchers import ASHA

    space = {"x": fluidsalus.uniform(0.0, 1.0)}
    asha = ASHA(space, trials, "score", "max", max_t=REPORTS, grace_period=1, reduction_factor=REDUCTION_FACTOR,
                seed=SEED)
    cpu, start = time.process_time(), time.perf_counter()
    grid = fluidsalus.run(fluidsalus_trial, searcher=asha, storage_path=storage, name=f"long_{trials}", verbose=0)
    wall = time.perf_counter() - start
    return {"wall_s": round(wall, 3), "driver_cpu_s": round(time.process_time() - cpu, 3), "trials_run": len(grid),
            "best": grid.get_best_result("score", "max").metrics["score"]}


def optuna_objective(trial: Any) -> float:
    import optuna

    x = trial.suggest_float("x", 0.0, 1.0)
    score = 0.0
    for step in range(1, REPORTS + 1):
        score = value(x, step)
        trial.report(score, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return score


def run_optuna(trials: int, through_fluidsalus: bool = False) -> dict[str, Any]:
    """Optuna's own ``study.optimize(n_jobs=2)``, or the same study through ``fluidsalus.optuna.optimize``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=SEED),
                                pruner=optuna.pruners.SuccessiveHalvingPruner(
                                    min_resource=1, reduction_factor=REDUCTION_FACTOR))
    cpu, start = time.process_time(), time.perf_counter()
    if through_fluidsalus:
        import fluidsalus.optuna

        fluidsalus.optuna.optimize(study, optuna_objective, n_trials=trials)
    else:
        study.optimize(optuna_objective, n_trials=trials, n_jobs=2)
    figures = {"wall_s": round(time.perf_counter() - start, 3), "trials_run": len(study.trials),
               "best": study.best_value}
    if through_fluidsalus:
        figures["driver_cpu_s"] = round(time.process_time() - cpu, 3)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", default=",".join(map(str, TRIALS)),
                        help="comma-separated sweep lengths (default: %(default)s)")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {', '.join(TOOLS)}")
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    try:
        lengths = [int(n) for n in args.trials.split(",")]
    except ValueError:
        parser.error(f"--trials must be comma-separated integers, got {args.trials!r}")
    if any(n < 1 for n in lengths):
        parser.error(f"--trials must be >= 1 each, got {args.trials!r}")
    tools = [t for t in args.tools.split(",") if t]
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown or not tools:
        parser.error(f"--tools: unknown {unknown}; choose from {', '.join(TOOLS)}")

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fluidsalus_long_") as storage:
        if {"fluidsalus", "fluidsalus_optuna"} & set(tools):
            import ray

            os.environ.setdefault("RAY_DEDUP_LOGS", "0")
            # a new 2-CPU cluster even where another Ray runs here (a plain ray.init would join that one)
            ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False,
                     logging_level=logging.WARNING)
        for n in lengths:
            for tool in tools:
                figures = run_fluidsalus(n, storage) if tool == "fluidsalus" else \
                    run_optuna(n, through_fluidsalus=tool == "fluidsalus_optuna")
                figures = {"tool": tool, "trials": n, **figures,
                           "ms_per_trial": round(1000 * figures["wall_s"] / n, 2)}
                runs.append(figures)
                if not args.json_only:
                    extra = f"  driver_cpu_s {figures['driver_cpu_s']:7.2f}" if "driver_cpu_s" in figures else ""
                    print(f"{tool:<17} trials {n:5d}  wall_s {figures['wall_s']:7.2f}  "
                          f"ms_per_trial {figures['ms_per_trial']:6.2f}{extra}", flush=True)
    print(json.dumps({"reports": REPORTS, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
