"""Compare the planners in the simulator over several seeds and searchers (``python -m fluidsalus.sim`` is one).

    python benchmarks/sim_compare.py                                  # 64 GPUs, 1000 trials, asha + bohb, seeds 0-4
    python benchmarks/sim_compare.py --searchers asha --seeds 0,1 --gpus 16 --trials 200

Prints one row per (searcher, seed): each planner's makespan, waterfill's speed-ups over ``one_per_gpu`` and over
the best static fractional packing of that run, the most any planner could reach over ``one_per_gpu`` on the
trials of waterfill's run (``one_per_gpu`` makespan over the run's critical-path bound, ``critical_path_bound_s``:
its longest trial alone at its best data-parallel width, nothing else), and waterfill's simulated
trial-iterations per second; then the medians. Its last line is one JSON object
``{searcher: {"runs": [...], "median_vs_one_per_gpu": ..., "median_vs_best_fractional": ...}}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fluidsalus.sim import PLANNERS, Hardware, RunSpec, compare, generate_workload, speedups  # noqa: E402
from fluidsalus.sim.searchers import BRACKET_SEARCHERS  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--searchers", default="asha,bohb")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--max-concurrent-brackets", type=int,
                   help=f"brackets at once of {'/'.join(BRACKET_SEARCHERS)} (the others run none; default: all)")
    args = p.parse_args()
    hardware = Hardware(gpus=args.gpus)
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict[str, dict] = {}
    header = "".join(f"{name:>16}" for name in PLANNERS)
    print(f"{'searcher':<10}{'seed':>5}{header}{'vs_1/gpu':>10}{'vs_frac':>9}{'bound':>8}{'wf it/s':>9}")
    for searcher in args.searchers.split(","):
        runs = []
        for seed in seeds:
            workload = generate_workload(args.trials, seed, hardware.gpu_memory - hardware.context_bytes)  # as the CLI
            brackets = args.max_concurrent_brackets if searcher in BRACKET_SEARCHERS else None
            spec = RunSpec(searcher, args.trials, seed, hardware, brackets=brackets)
            results = compare(spec, workload)
            ratios = speedups(results)
            ours = results["waterfill"]
            makespans = {name: round(r.makespan_s, 1) for name, r in results.items()}
            bound = ours.extra["critical_path_bound_s"]
            ceiling = results["one_per_gpu"].makespan_s / bound if bound > 0 else float("inf")
            runs.append({"seed": seed, "makespan_s": makespans, **ratios, "critical_path_bound_s": bound,
                         "max_vs_one_per_gpu": round(ceiling, 3),
                         "waterfill_iterations_per_s": round(ours.sim_iterations_per_s, 1)})
            print(f"{searcher:<10}{seed:>5}" + "".join(f"{makespans[name]:>16.0f}" for name in PLANNERS)
                  + f"{ratios['vs_one_per_gpu']:>10.2f}{ratios['vs_best_fractional']:>9.2f}{ceiling:>8.2f}"
                  + f"{ours.sim_iterations_per_s:>9.0f}", flush=True)
        out[searcher] = {
            "runs": runs,
            "median_vs_one_per_gpu": statistics.median(r["vs_one_per_gpu"] for r in runs),
            "median_vs_best_fractional": statistics.median(r["vs_best_fractional"] for r in runs),
            "median_max_vs_one_per_gpu": statistics.median(r["max_vs_one_per_gpu"] for r in runs),
        }
        print(f"# {searcher}: median speed-up vs one_per_gpu {out[searcher]['median_vs_one_per_gpu']:.2f} "
              f"(at most {out[searcher]['median_max_vs_one_per_gpu']:.2f} by the critical-path bound), "
              f"vs the best fractional packing {out[searcher]['median_vs_best_fractional']:.2f}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
