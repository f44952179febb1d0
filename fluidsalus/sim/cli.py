"""``python -m fluidsalus.sim``: compare the planners on a simulated cluster.

    python -m fluidsalus.sim --gpus 64 --trials 1000 --searcher asha --json
    python -m fluidsalus.sim --gpus 64 --trials 1000 --searcher bohb --json --seed 1
    python -m fluidsalus.sim --trace runs/trace.json --searcher asha --json
    python -m fluidsalus.sim --bench

Prints a table (one row per planner), the speed-ups of ``waterfill``, the simulator's speed, and with
``--json`` as its last line one JSON object mapping each planner's name to its figures (``makespan_s``,
``time_to_target_s``, ``mean_jct_s``, ``utilisation``, ``sim_iterations_per_s``, ...). ``--bench`` measures
the engine alone on a long-trial workload and prints ``{"bench": {...}}`` as its last line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.policies import POLICIES
from fluidsalus.sim.engine import SimResult, SimulationError, check_records_fit
from fluidsalus.sim.model import GIB, Hardware
from fluidsalus.sim.runner import BENCH_MAX_T, BENCH_PLANNERS, BENCH_TRIALS, RunSpec, bench, compare, speedups
from fluidsalus.sim.searchers import BRACKET_SEARCHERS, SEARCHERS
from fluidsalus.sim.strategies import PLANNERS
from fluidsalus.sim.workload import (
    Workload,
    check_save_path,
    generate_workload,
    load_trace,
    records_summary,
    save_trace,
)

#: Defaults of the options that choose the run, which ``--bench`` (the engine on its own workload) does not take.
RUN_DEFAULTS: dict[str, Any] = {"searcher": "asha", "planners": ",".join(PLANNERS), "lane_policy": "fifo"}
#: Trials the searcher creates on the synthetic workload when ``--trials`` is not given (with ``--trace``: one
#: per recorded trial).
DEFAULT_TRIALS = 1000
#: Largest ``--interference``. Past it packing is absurd rather than costly: with 8 co-runners a GPU runs at
#: ``(1 - 0.5) ** 7``, under 1% of its speed; at 0.9 a 50-trial run took tens of millions of virtual seconds and
#: a static planner's out-of-memory retries tens of millions of events. (The library's
#: :class:`~fluidsalus.sim.model.Hardware` takes [0, 1), for fitted replays.)
MAX_INTERFERENCE_OPTION = 0.5
#: Lane policies the simulator cannot model: its trials have no priority (``Simulation.view``), so ``priority``
#: would run exactly as ``fifo`` (its tie-break).
UNMODELLED_POLICIES = {"priority": "simulated trials have no priority, so it would run exactly as fifo"}
#: Lane policies ``--lane-policy`` takes.
LANE_POLICIES = sorted(p for p in POLICIES if p not in UNMODELLED_POLICIES)


def _integer(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum`` (argparse's error then names the option)."""
    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return integer


def _number(minimum: float | None = 0.0, below: float | None = None, positive: bool = False,
            maximum: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number, ``>= minimum`` (``> minimum`` if ``positive``), ``< below`` and
    ``<= maximum``."""
    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if minimum is not None and (value <= minimum if positive else value < minimum):
            raise argparse.ArgumentTypeError(f"must be {'>' if positive else '>='} {minimum:g}, got {text}")
        if below is not None and value >= below:
            raise argparse.ArgumentTypeError(f"must be < {below:g}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum:g}, got {text}")
        return value
    return number


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fluidsalus.sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=_integer(1), help=f"virtual GPUs (default: the trace's, else {Hardware.gpus})")
    p.add_argument("--trials", type=_integer(1), help=f"trials the searcher creates (default: one per record of "
                   f"--trace, else {DEFAULT_TRIALS})")
    p.add_argument("--searcher", choices=SEARCHERS, help=f"(default {RUN_DEFAULTS['searcher']})")
    p.add_argument("--seed", type=_integer(0), default=0, help="seed of the workload and the searcher (default 0)")
    p.add_argument("--trace", help="a recorded trace (.json or .csv) instead of the synthetic workload")
    p.add_argument("--save-trace", metavar="FILE", help="write the workload as a JSON trace (not .csv) and go on")
    p.add_argument("--planners", help="comma-separated planners (default: all)")
    p.add_argument("--max-t", type=_integer(1), help="largest budget (default: the largest budget a --trace "
                   "records, as python -m fluidsalus.sim.trace --save writes it, else the searcher's)")
    p.add_argument("--target", type=_number(minimum=None), help="metric value of time-to-target (default: the value "
                   "the best 5%% of the trials reach at the largest budget: the 95th percentile of the values for "
                   "mode max, the 5th for mode min)")
    p.add_argument("--gpus-per-node", type=_integer(1))
    p.add_argument("--gpu-memory-gib", type=_number(positive=True))
    p.add_argument("--slots", type=_integer(1), help="compute slots (lanes) per GPU")
    p.add_argument("--interference", type=_number(maximum=MAX_INTERFERENCE_OPTION),
                   help=f"throughput lost per co-running trial, in [0, {MAX_INTERFERENCE_OPTION:g}]")
    p.add_argument("--startup-s", type=_number())
    p.add_argument("--move-s", type=_number())
    p.add_argument("--lane-policy", choices=sorted(POLICIES), metavar="{" + ",".join(LANE_POLICIES) + "}",
                   help=f"lane policy of waterfill (default {RUN_DEFAULTS['lane_policy']}; not priority: "
                   f"{UNMODELLED_POLICIES['priority']})")
    p.add_argument("--max-concurrent-brackets", type=_integer(1),
                   help=f"{'/'.join(BRACKET_SEARCHERS)} only: brackets at once (default: all)")
    p.add_argument("--driver-latency-s", type=_number(), help="delay of the driver's decisions after a change")
    p.add_argument("--context-mib", type=_number(), help="GPU memory of one CUDA context")
    p.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    p.add_argument("--bench", action="store_true", help="measure the engine's simulated iterations per second on "
                   "its own workload (takes --gpus, --seed and the hardware options only)")
    return p


#: Options ``--bench`` refuses: it simulates its own workload (``runner.bench``) under its own planners.
_NOT_FOR_BENCH = ("trials", "searcher", "trace", "save_trace", "planners", "max_t", "target", "lane_policy",
                  "max_concurrent_brackets")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.bench:
        given = ["--" + name.replace("_", "-") for name in _NOT_FOR_BENCH if getattr(args, name) is not None]
        if given:
            parser.error(f"--bench measures the engine on its own workload (random search, {BENCH_TRIALS} trials "
                         f"of {BENCH_MAX_T} iterations, planners {', '.join(BENCH_PLANNERS)}); it does not take "
                         f"{', '.join(given)}")
    if args.lane_policy in UNMODELLED_POLICIES:
        parser.error(f"--lane-policy {args.lane_policy}: {UNMODELLED_POLICIES[args.lane_policy]}; choose from "
                     f"{', '.join(LANE_POLICIES)}")
    for name, default in RUN_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.max_concurrent_brackets is not None and args.searcher not in BRACKET_SEARCHERS:
        parser.error(f"--max-concurrent-brackets: only --searcher {' or '.join(BRACKET_SEARCHERS)} run brackets; "
                     f"--searcher {args.searcher} would ignore it")
    return args


def _hardware(args: argparse.Namespace, traced: dict, source: str = "the trace") -> Hardware:
    """The command line's hardware over a trace's (``traced``, already checked by ``load_trace``).

    Raises:
        ConfigError: The trace's interference is past :data:`MAX_INTERFERENCE_OPTION` and ``--interference``
            does not replace it (``--interference`` itself is held to that range by argparse).
    """
    interference = traced.get("interference")
    if args.interference is None and interference is not None and interference > MAX_INTERFERENCE_OPTION:
        raise ConfigError(
            f"{source}: hardware.interference {interference:g} is above the command line's "
            f"{MAX_INTERFERENCE_OPTION:g}: past it packing is absurd rather than costly (runs took ~10^12 "
            f"virtual seconds or tens of millions of out-of-memory retries); give --interference (at most "
            f"{MAX_INTERFERENCE_OPTION:g}) to run this trace")
    memory = None if args.gpu_memory_gib is None else int(args.gpu_memory_gib * GIB)
    return Hardware.from_dict(traced, gpus=args.gpus, gpus_per_node=args.gpus_per_node, gpu_memory=memory,
                              slots=args.slots, interference=args.interference, startup_s=args.startup_s,
                              move_s=args.move_s, driver_latency_s=args.driver_latency_s,
                              context_bytes=None if args.context_mib is None else int(args.context_mib * 2**20))


def _load_trace(path: str) -> Workload:
    """:func:`load_trace`, its warnings (fields it does not know, another version) printed as ``warning: ...``
    lines on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        workload = load_trace(path)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return workload


def _cell(value: float | int | None, width: int, spec: str) -> str:
    """One right-aligned figure of :func:`_table`: in ``spec``, or with 3 significant digits when that does not
    fit its column; always at least one space from the figure before it."""
    if value is None:
        return "-".rjust(width)
    text = format(value, spec)
    if len(text) >= width:
        text = format(value, ".3g")
    return text.rjust(width) if len(text) < width else " " + text


def _table(results: dict[str, SimResult]) -> str:
    columns = (("makespan_s", 12, ".0f"), ("ttt_s", 10, ".0f"), ("mean_jct_s", 12, ".0f"), ("util", 7, ".3f"),
               ("ooms", 6, "d"), ("moves", 7, "d"), ("iters", 8, "d"), ("iters/s", 10, ".0f"))
    rows = [f"{'planner':<16}" + "".join(title.rjust(width) for title, width, _ in columns)]
    for name, r in results.items():
        values = (r.makespan_s, r.time_to_target_s, r.mean_jct_s, r.utilisation, r.ooms, r.moves, r.iterations,
                  r.sim_iterations_per_s)
        rows.append(f"{name:<16}" + "".join(_cell(v, width, spec)
                                            for v, (_, width, spec) in zip(values, columns, strict=True)))
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point.

    Args:
        argv: Arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    args = _parse(argv)
    try:
        if args.bench:
            hardware = _hardware(args, {})
            figures = bench(hardware, seed=args.seed)
            print(f"# engine benchmark: {figures['iterations']} simulated trial-iterations in {figures['wall_s']} s"
                  f" on {hardware.gpus} GPUs: {figures['sim_iterations_per_s']:.0f} iterations/s")
            print(json.dumps({"bench": figures}))
            return 0
        workload = _load_trace(args.trace) if args.trace else None
        hardware = _hardware(args, workload.hardware if workload else {}, args.trace)
        if args.trials is None:  # a trace's own trials once each; its hardware fields are taken unless overridden
            args.trials = DEFAULT_TRIALS if workload is None else len(workload.records)
        if args.max_t is None and workload is not None and workload.max_budget is not None:
            args.max_t = workload.max_budget  # its curves and times stop there (a saved replay trace)
            print(f"# --max-t {args.max_t}: the largest budget {args.trace} records (its curves stop there)")
        if workload is None:
            workload = generate_workload(args.trials, args.seed, hardware.gpu_memory - hardware.context_bytes)
        planners = [p.strip() for p in args.planners.split(",") if p.strip()]
        unknown = [p for p in planners if p not in PLANNERS]
        if unknown or not planners:
            raise ConfigError(f"--planners: {'unknown ' + str(unknown) if unknown else 'none given'}; choose from "
                              f"{', '.join(PLANNERS)}")
        spec = RunSpec(args.searcher, args.trials, args.seed, hardware, max_t=args.max_t, target=args.target,
                       lane_policy=args.lane_policy, brackets=args.max_concurrent_brackets)
        if args.save_trace:
            check_save_path(args.save_trace)
        check_records_fit(workload, hardware)
        summary = records_summary(workload.records)
        print(f"# {args.searcher}, {args.trials} trials on {hardware.gpus} GPUs ({hardware.gpu_memory / GIB:.3g} GiB, "
              f"{hardware.slots} slots), workload {workload.source}: mean {summary['sec_per_iter_mean']:.1f} s/iter, "
              f"demand {summary['demand_mean']:.2f}, {summary['memory_gib_mean']:.2f} GiB")
        results = compare(spec, workload, planners)
        if args.save_trace:
            save_trace(workload, args.save_trace, args.max_t or 100, hardware.to_dict())
    except (ConfigError, SimulationError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(_table(results))
    ratios = speedups(results)
    if ratios:
        parts = [f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in ratios.items()]
        print("# waterfill makespan speed-up: " + ", ".join(parts))
        ours, theirs = results.get("waterfill"), results.get("one_per_gpu")
        if ours is not None and theirs is not None and ours.extra.get("critical_path_bound_s"):
            bound = ours.extra["critical_path_bound_s"]
            print(f"# critical-path bound of waterfill's trials: {bound:.0f} s (its longest trial alone at its best "
                  f"data-parallel width): no planner beats one_per_gpu by more than "
                  f"{theirs.makespan_s / bound:.2f} on them")
    iterations = sum(r.iterations for r in results.values())
    wall = sum(r.wall_s for r in results.values())
    print(f"# simulator: {iterations} trial-iterations in {wall:.2f} s ({iterations / wall:.0f} iterations/s, "
          "searcher and planner included)")
    if args.json:
        print(json.dumps({name: r.figures() for name, r in results.items()}))
    return 0
