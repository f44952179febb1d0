"""How the driver's own cost grows with a sweep's length: ASHA over N trials that do no work.

    python benchmarks/long_sweep.py                              # N = 250, 500, 1000, 2000; every tool
    python benchmarks/long_sweep.py --trials 1000 --tools fluidsalus --json-only
    python benchmarks/long_sweep.py --trials 60 --step-s 0.005 --no-pruning  # every trial's 9 steps wait 5 ms
    python benchmarks/long_sweep.py --address auto   # on the cluster this machine belongs to (`ray start`)

Each trial reports :data:`REPORTS` times and does nothing else, so the whole time is the engine's: for
fluidsalus the driver (searcher, planner, store) and the round trips to the virtual CPU devices; for Optuna
(``n_jobs=2``, in-memory storage, ``SuccessiveHalvingPruner``) the study and the pruner. ``fluidsalus`` runs
:class:`~fluidsalus.searchers.ASHA` with ``grace_period=1``, ``reduction_factor=3``, ``max_t=REPORTS`` and a
fixed seed; ``optuna`` the pruner with the same rungs and a seeded ``RandomSampler``; ``fluidsalus_optuna`` the
same study through :func:`fluidsalus.optuna.optimize`, whose trials ask the driver for each suggestion and each
pruning decision (a round trip per report). Ray is started once (or joined, with ``--address``), before any
timing (``trivial`` in ``compare.py`` measures the per-trial cost of a short sweep; Ray Tune, at about 2 s per
trial here, is left out: 2,000 trials would take more than an hour).

With ``--step-s S`` each step first sleeps ``S`` seconds (a step whose process waits, as it does while its
GPU computes), so the figures also show what the engine adds to each step's latency. With ``--no-pruning``
every trial runs all its steps: fluidsalus runs :class:`~fluidsalus.searchers.RandomSearch`, Optuna a
``NopPruner`` (the objective still asks ``should_prune`` at each step).

A driver whose cost per trial stays flat scales; one whose cost per trial grows with N does work in proportion
to the trials seen at every step. Printed per tool and N: ``wall_s``, ``ms_per_trial`` and, for both fluidsalus
tools, ``driver_cpu_s`` (this process's CPU time: the driver, not the device actors). The last line is one JSON object
``{"reports": ..., "runs": [{"tool": ..., "trials": ..., "wall_s": ..., ...}, ...]}``.
"""

from __future__ import annotations

import argparse
import functools
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
        if config["step_s"]:
            time.sleep(config["step_s"])
        fluidsalus.report({"score": value(config["x"], step)})


def run_fluidsalus(trials: int, storage: str, step_s: float = 0.0, pruning: bool = True) -> dict[str, Any]:
    import fluidsalus
    from fluidsalus.searchers import ASHA, RandomSearch

    space = {"x": fluidsalus.uniform(0.0, 1.0), "step_s": step_s}
    asha = ASHA(space, trials, "score", "max", max_t=REPORTS, grace_period=1, reduction_factor=REDUCTION_FACTOR,
                seed=SEED) if pruning else RandomSearch(space, trials, seed=SEED)
    cpu, start = time.process_time(), time.perf_counter()
    grid = fluidsalus.run(fluidsalus_trial, searcher=asha, storage_path=storage, name=f"long_{trials}", verbose=0)
    wall = time.perf_counter() - start
    return {"wall_s": round(wall, 3), "driver_cpu_s": round(time.process_time() - cpu, 3), "trials_run": len(grid),
            "best": grid.get_best_result("score", "max").metrics["score"]}


def optuna_objective(trial: Any, step_s: float = 0.0) -> float:
    import optuna

    x = trial.suggest_float("x", 0.0, 1.0)
    score = 0.0
    for step in range(1, REPORTS + 1):
        if step_s:
            time.sleep(step_s)
        score = value(x, step)
        trial.report(score, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return score


def run_optuna(trials: int, through_fluidsalus: bool = False, step_s: float = 0.0,
               pruning: bool = True, storage: str | None = None) -> dict[str, Any]:
    """Optuna's own ``study.optimize(n_jobs=2)``, or the same study through ``fluidsalus.optuna.optimize``, whose
    experiment goes under ``storage`` (the run's temporary folder; None: ``~/fluidsalus_results``)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=REDUCTION_FACTOR) if pruning \
        else optuna.pruners.NopPruner()
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=SEED),
                                pruner=pruner)
    cpu, start = time.process_time(), time.perf_counter()
    if through_fluidsalus:
        import fluidsalus.optuna

        fluidsalus.optuna.optimize(study, functools.partial(optuna_objective, step_s=step_s), n_trials=trials,
                                   storage_path=storage)
    else:
        study.optimize(functools.partial(optuna_objective, step_s=step_s), n_trials=trials, n_jobs=2)
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
    parser.add_argument("--step-s", type=float, default=0.0,
                        help="seconds each step sleeps before it reports (default: %(default)s)")
    parser.add_argument("--no-pruning", action="store_true",
                        help="every trial runs all its steps (RandomSearch; Optuna's NopPruner)")
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    parser.add_argument("--address", default=None,
                        help="join this running Ray cluster (as ray.init(address=...)) instead of starting a new "
                             "2-CPU one; its CPUs set the fluidsalus tools' devices")
    args = parser.parse_args(argv)
    if not args.step_s >= 0:
        parser.error(f"--step-s must be >= 0, got {args.step_s}")
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
            if args.address:
                ray.init(address=args.address, configure_logging=False, logging_level=logging.WARNING)
            else:  # a new 2-CPU cluster even where another Ray runs here (a plain ray.init would join that one)
                ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False,
                         logging_level=logging.WARNING)
        for n in lengths:
            for tool in tools:
                pruning = not args.no_pruning
                figures = run_fluidsalus(n, storage, args.step_s, pruning) if tool == "fluidsalus" else \
                    run_optuna(n, through_fluidsalus=tool == "fluidsalus_optuna", step_s=args.step_s, pruning=pruning,
                               storage=storage)
                if tool != "optuna":  # each run starts its devices cold, as a process's first run does
                    import fluidsalus

                    fluidsalus.release_devices()
                figures = {"tool": tool, "trials": n, **figures,
                           "ms_per_trial": round(1000 * figures["wall_s"] / n, 2)}
                runs.append(figures)
                if not args.json_only:
                    extra = f"  driver_cpu_s {figures['driver_cpu_s']:7.2f}" if "driver_cpu_s" in figures else ""
                    print(f"{tool:<17} trials {n:5d}  wall_s {figures['wall_s']:7.2f}  "
                          f"ms_per_trial {figures['ms_per_trial']:6.2f}{extra}", flush=True)
    print(json.dumps({"reports": REPORTS, "step_s": args.step_s, "pruning": not args.no_pruning, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
