"""Search quality of the multi-fidelity searchers on a synthetic multi-fidelity Hartmann-6 problem.

    python benchmarks/search_quality.py              # 20 seeds, prints a table, exits 1 if a claim fails
    python benchmarks/search_quality.py --seeds 5    # quicker

The problem: minimise the 6-dimensional Hartmann function ``h(x)``, ``x`` in ``[0, 1]^6`` (minimum
``-3.32237``). A trial with configuration ``x`` reports at iteration ``i`` (``1 <= i <= R``)

    y(x, i) = h(x) + NOISE_AT_FIRST_ITERATION / sqrt(i) * eps(x, i),      eps ~ N(0, 1)

so the noise shrinks as the budget grows (sd 0.5 at the first iteration, 0.056 at R = 81) and low
budgets rank configurations worse than high ones. ``eps`` is a deterministic function of (seed, x, i).

Each method runs through :func:`fluidsalus.testing.drive` (the executor's rules, no Ray), 4 trials at a
time. Its *incumbent* at any point is the trial with the lowest value reported at the full budget R, and
its *regret* is ``h(incumbent) - h_min`` (the noiseless value: what the user really gets).

* ``random``: random search, every trial run to R (200 trials). ``random@X`` is the same run cut at the
  total iterations method X used on that seed (the same budget).
* ``asha``: :class:`ASHA` (max_t = R, grace_period 1, reduction_factor 3).
* ``bohb``: asynchronous :class:`BOHB` over the same ASHA rungs.
* ``sync-bohb``: :class:`SyncBOHB` (max_t = R, reduction_factor 3: 5 brackets per band).

Claims checked (exit status 1 when one fails):

1. BOHB's final regret beats random search with full budgets at the same total budget (mean over seeds),
   for both BOHB forms.
2. ASHA reaches the target regret with less total budget (median over seeds) than random search with full
   budgets.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fluidsalus import space as sp
from fluidsalus.searchers._asha import ASHA
from fluidsalus.searchers._base import BaseSearcher
from fluidsalus.searchers._bohb import BOHB, SyncBOHB
from fluidsalus.searchers._random import RandomSearch
from fluidsalus.testing import DriveResult, drive

#: Hartmann-6 constants (Hartmann 1973; as in Falkner et al. 2018's benchmarks).
HARTMANN_ALPHA = (1.0, 1.2, 3.0, 3.2)
HARTMANN_A = (
    (10, 3, 17, 3.5, 1.7, 8),
    (0.05, 10, 17, 0.1, 8, 14),
    (3, 3.5, 1.7, 10, 17, 8),
    (17, 8, 0.05, 10, 0.1, 14),
)
HARTMANN_P = (
    (0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
    (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
    (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
    (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381),
)
#: The global minimum of Hartmann-6.
HARTMANN_MIN = -3.32237
#: Parameter names of the 6 dimensions.
PARAMS = tuple(f"x{j}" for j in range(6))
#: Full budget R (iterations) and HyperBand/ASHA reduction factor.
MAX_BUDGET = 81
REDUCTION_FACTOR = 3
#: Standard deviation of the noise at iteration 1; it falls as ``1 / sqrt(i)``.
NOISE_AT_FIRST_ITERATION = 0.5
#: Trials that compute at once in the driver.
PARALLEL = 4
#: Regret the "budget to target" column waits for (random search with full budgets rarely gets there).
TARGET_REGRET = 1.0
#: Trials of each searcher in the full benchmark.
ASHA_TRIALS = 600
BOHB_TRIALS = 400
SYNC_BOHB_TRIALS = 429  # three full bands of HyperBand(max_t=81, eta=3): 3 * (81 + 34 + 15 + 8 + 5)
#: Trials of the random-search baseline (each run to R): its run is cut at each method's budget.
RANDOM_TRIALS = 200
#: Live trials of asynchronous BOHB (how many proposals are made before their results are known).
BOHB_MAX_CONCURRENT = 8


def hartmann6(x: Mapping[str, float]) -> float:
    """The Hartmann-6 function of a configuration ``{"x0": ..., ..., "x5": ...}``."""
    total = 0.0
    for alpha, a_row, p_row in zip(HARTMANN_ALPHA, HARTMANN_A, HARTMANN_P, strict=True):
        inner = sum(a * (x[name] - p) ** 2 for a, name, p in zip(a_row, PARAMS, p_row, strict=True))
        total -= alpha * math.exp(-inner)
    return total


def hartmann_space() -> dict[str, Any]:
    """The search space: six uniform parameters on [0, 1]."""
    return {name: sp.uniform(0.0, 1.0) for name in PARAMS}


def make_curve(seed: int) -> Callable[[Mapping[str, Any], int], float]:
    """The multi-fidelity objective ``y(x, i)`` of the module docstring, its noise keyed by ``seed``."""

    def curve(config: Mapping[str, Any], iteration: int) -> float:
        noise = random.Random(hash((seed, iteration, *(config[name] for name in PARAMS)))).gauss(0.0, 1.0)
        return hartmann6(config) + NOISE_AT_FIRST_ITERATION / math.sqrt(iteration) * noise

    return curve


@dataclass
class Outcome:
    """What one run achieved."""

    regret: float  # regret of the incumbent at the end (or at the budget it was evaluated at)
    total: int  # iterations used
    to_target: float  # iterations until the incumbent's regret <= TARGET_REGRET (inf: never)


def evaluate(
    result: DriveResult, budget: int | None = None, max_budget: int = MAX_BUDGET, target: float = TARGET_REGRET
) -> Outcome:
    """Incumbent regret and budget use of a run (see the module docstring).

    Args:
        result: The run.
        budget: Only count the first ``budget`` results (iterations), in the order they happened; None: all.
        max_budget: The full budget R.
        target: The regret of the ``to_target`` column.

    Returns:
        An :class:`Outcome`.
    """
    events = result.decisions if budget is None else result.decisions[:budget]
    best_value, incumbent_regret, to_target = math.inf, math.inf, math.inf
    for used, (trial_id, iteration, _) in enumerate(events, start=1):
        if iteration != max_budget:
            continue
        trial = result.trials[trial_id]
        value = trial.history[iteration - 1]["score"]
        if value < best_value:
            best_value = value
            incumbent_regret = hartmann6(trial.config) - HARTMANN_MIN
            if incumbent_regret <= target and math.isinf(to_target):
                to_target = used
    return Outcome(incumbent_regret, len(events), to_target)


def run(searcher: BaseSearcher, seed: int, max_budget: int = MAX_BUDGET) -> DriveResult:
    """Drive ``searcher`` on the problem of ``seed``."""
    return drive(searcher, make_curve(seed), metric="score", max_iterations=max_budget, parallel=PARALLEL,
                 seed=seed)


def make_random(trials: int, seed: int, max_budget: int = MAX_BUDGET) -> RandomSearch:
    return RandomSearch(hartmann_space(), num_samples=trials, seed=seed)


def make_asha(trials: int, seed: int, max_budget: int = MAX_BUDGET) -> ASHA:
    return ASHA(hartmann_space(), trials, "score", "min", max_t=max_budget, grace_period=1,
                reduction_factor=REDUCTION_FACTOR, seed=seed)


def make_bohb(trials: int, seed: int, max_budget: int = MAX_BUDGET) -> BOHB:
    return BOHB(hartmann_space(), trials, "score", "min", max_t=max_budget, grace_period=1,
                reduction_factor=REDUCTION_FACTOR, max_concurrent=BOHB_MAX_CONCURRENT, seed=seed)


def make_sync_bohb(trials: int, seed: int, max_budget: int = MAX_BUDGET) -> SyncBOHB:
    return SyncBOHB(hartmann_space(), trials, "score", "min", max_t=max_budget,
                    reduction_factor=REDUCTION_FACTOR, seed=seed)


def compare(
    seeds: list[int],
    asha_trials: int = ASHA_TRIALS,
    bohb_trials: int = BOHB_TRIALS,
    sync_bohb_trials: int = SYNC_BOHB_TRIALS,
    random_trials: int = RANDOM_TRIALS,
    max_budget: int = MAX_BUDGET,
) -> dict[str, list[Outcome]]:
    """Run every method on every seed.

    Random search with full budgets runs once per seed (``random_trials`` trials); ``random@X`` is that run
    cut at X's total iterations on the same seed (the same budget), ``random`` the whole run.

    Returns:
        Per method name, one :class:`Outcome` per seed.
    """
    out: dict[str, list[Outcome]] = {}
    makers = {"asha": (make_asha, asha_trials), "bohb": (make_bohb, bohb_trials),
              "sync-bohb": (make_sync_bohb, sync_bohb_trials)}
    for seed in seeds:
        baseline = run(make_random(random_trials, seed, max_budget), seed, max_budget)
        for name, (make, trials) in makers.items():
            outcome = evaluate(run(make(trials, seed, max_budget), seed, max_budget), max_budget=max_budget)
            out.setdefault(name, []).append(outcome)
            out.setdefault(f"random@{name}", []).append(evaluate(baseline, outcome.total, max_budget))
        out.setdefault("random", []).append(evaluate(baseline, max_budget=max_budget))
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values)


def table(results: dict[str, list[Outcome]]) -> str:
    """A text table: regret mean/median, mean budget, median budget to the target regret."""
    lines = [f"{'method':<18}{'regret mean':>12}{'regret med':>12}{'iters mean':>12}"
             f"{'iters to ' + format(TARGET_REGRET, 'g') + ' (med)':>22}{'reached':>9}"]
    for name, outcomes in results.items():
        regrets = [o.regret for o in outcomes]
        to_target = [o.to_target for o in outcomes]
        reached = sum(math.isfinite(t) for t in to_target)
        lines.append(f"{name:<18}{statistics.fmean(regrets):>12.4f}{_median(regrets):>12.4f}"
                     f"{statistics.fmean(o.total for o in outcomes):>12.0f}{_median(to_target):>22.0f}"
                     f"{reached:>6}/{len(outcomes)}")
    return "\n".join(lines)


def claims(results: dict[str, list[Outcome]]) -> list[tuple[str, bool]]:
    """The claims of the module docstring, each with whether it holds."""
    def mean_regret(name: str) -> float:
        return statistics.fmean(o.regret for o in results[name])

    def median_to_target(name: str) -> float:
        return _median([o.to_target for o in results[name]])

    return [
        ("bohb final regret < random (full budgets, same budget)",
         mean_regret("bohb") < mean_regret("random@bohb")),
        ("sync-bohb final regret < random (full budgets, same budget)",
         mean_regret("sync-bohb") < mean_regret("random@sync-bohb")),
        (f"asha reaches regret {TARGET_REGRET:g} with less budget than random (full budgets)",
         median_to_target("asha") < median_to_target("random")),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="number of seeds (default 20)")
    args = parser.parse_args(argv)
    results = compare(list(range(args.seeds)))
    print(f"Multi-fidelity Hartmann-6, R={MAX_BUDGET}, eta={REDUCTION_FACTOR}, {args.seeds} seeds, "
          f"{PARALLEL} trials at a time")
    print(table(results))
    ok = True
    for text, holds in claims(results):
        print(f"[{'ok' if holds else 'FAILED'}] {text}")
        ok = ok and holds
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
