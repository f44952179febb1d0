"""Check the simulator against real runs on virtual CPU devices: predicted vs measured makespan.

    python benchmarks/sim_vs_real.py                                  # ASHA, 64 trials, sleep and compute
    python benchmarks/sim_vs_real.py --workloads compute --trials 32 --seeds 0,1,2
    python benchmarks/sim_vs_real.py --workloads sleep --seeds 1,1,1      # the same sweep three times
    python benchmarks/sim_vs_real.py --devices 2 --cpus-per-device 1
    python benchmarks/sim_vs_real.py --devices 2 --cpus-per-device 1 --checkpoint   # trials that can move

For each workload it runs a real ASHA sweep with ``fluidsalus.run`` on virtual CPU devices, then reads the
experiment's store (:func:`fluidsalus.sim.trace.load_store_trace`) and predicts the sweep's makespan (first
trial start to last trial end) with the simulator, under the placement the real executor uses (the
water-filling planner under the executor's rules; the simulator's plain ``waterfill`` is replayed beside it):

- from the **recorded trace**: the recorded decisions, every recorded iteration time (as alone times), and
  the recorded lane of each trial and order of each stop against the admission that followed it;
- from the **model**: each trial's first iterations only (what profiling knows), a fresh ASHA searcher with
  the same settings deciding again in simulated time, the lane manager's own best fit, and the measured
  share of stops that reached the device after the next admission;
- **naive**: the recorded trace without the device runtime's stop order and memory re-fits (what the
  simulator predicts when it takes stops and placements in the driver's order).

All use figures measured in the same run (co-location slowdown, driver latency, start and boundary costs,
admit-first share; see ``fluidsalus/sim/trace.py``).

Workloads (a trial's iteration cost scales with its ``scale`` parameter, drawn uniformly in
:data:`SCALE_RANGE`, so trials differ):

- ``sleep``: ``time.sleep``: a pure scheduling check (no CPU contention);
- ``compute``: single-threaded torch matrix products: real CPU work, co-located trials share the cores (and
  the GIL, between kernels) with each other and with the driver.

With ``--checkpoint`` every iteration saves a checkpoint and a restarted trial resumes from it, so the executor
carries out the planner's moves and preemptions (without one it refuses them). The replay then models them,
each move costing what the executor measured (``move_cost`` events; ``moves`` and ``move_ms`` per run).

Prints one line per run and, as its last line, one JSON object: ``measured_s``, ``predicted_s`` and
``error_pct`` of the worst run (largest absolute error of the trace prediction), ``max_error_pct``,
``max_profile_error_pct``, ``max_naive_error_pct``, and every run under ``runs``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fluidsalus  # noqa: E402
from fluidsalus import space as sp  # noqa: E402
from fluidsalus.searchers import ASHA  # noqa: E402
from fluidsalus.sim.trace import REPLAY_PLANNERS, compare_with_store, load_store_trace  # noqa: E402

#: Workloads (see the module docstring).
WORKLOADS = ("sleep", "compute")
#: Seconds of one iteration of a trial of scale 1.
DEFAULT_ITER_S = 0.1
#: Range of a trial's cost scale: iterations cost ``scale * iter_s``.
SCALE_RANGE = (0.5, 1.5)
#: Side of the square matrices of the ``compute`` workload: large enough that a product is pure kernel time
#: (about 1 ms on one core here), small enough that an iteration is many products (an even cost).
MATRIX_SIDE = 256
#: ASHA settings (Ray's ASHA with a short ``max_t``: rungs at 1, 4 and 16 iterations).
MAX_T = 16
GRACE_PERIOD = 1
REDUCTION_FACTOR = 4
#: Products timed to turn ``iter_s`` into a product count, after one untimed warm-up product.
CALIBRATION_PRODUCTS = 200
#: Placements also replayed for comparison: the simulator's ``waterfill`` as it is (no prefetch, moves
#: carried out) beside the executor's own rules.
OTHER_PLANNERS = ("waterfill",)
#: Target of the trace prediction (issue #4): within 15% of the measured makespan.
TARGET_ERROR_PCT = 15.0


def _resumed_at() -> int:
    """Iterations done before this start: the checkpoint's (0 without one)."""
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as folder:
        return int(Path(folder, "iteration").read_text())


def _report(config: dict[str, Any], i: int) -> None:
    """Report iteration ``i`` (0-based), with a checkpoint of it when the sweep checkpoints."""
    metrics = {"score": config["quality"] * (1.0 - 1.0 / (i + 2))}
    if not config.get("checkpoint"):
        fluidsalus.report(metrics)
        return
    folder = Path(fluidsalus.get_context().get_trial_dir(), f"checkpoint_{i + 1}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "iteration").write_text(str(i + 1))
    fluidsalus.report(metrics, checkpoint=fluidsalus.Checkpoint.from_directory(str(folder)))


def sleep_trainable(config: dict[str, Any]) -> None:
    """A trial whose iterations sleep ``scale * iter_s`` seconds."""
    for i in range(_resumed_at(), config["max_t"]):
        time.sleep(config["scale"] * config["iter_s"])
        _report(config, i)


def compute_trainable(config: dict[str, Any]) -> None:
    """A trial whose iterations run ``scale * products`` single-threaded matrix products."""
    import torch

    side = config["side"]
    a = torch.rand(side, side)
    b = torch.rand(side, side)
    count = max(1, round(config["scale"] * config["products"]))
    for i in range(_resumed_at(), config["max_t"]):
        for _ in range(count):
            torch.mm(a, b)
        _report(config, i)


def products_per_iteration(iter_s: float, side: int = MATRIX_SIDE) -> int:
    """Matrix products that take ``iter_s`` seconds on one thread of this machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.rand(side, side), torch.rand(side, side)
        torch.mm(a, b)
        started = time.perf_counter()
        for _ in range(CALIBRATION_PRODUCTS):
            torch.mm(a, b)
        per = (time.perf_counter() - started) / CALIBRATION_PRODUCTS
    finally:
        torch.set_num_threads(threads)
    return max(1, round(iter_s / per))


def make_searcher(trials: int, seed: int, space: dict[str, Any]) -> ASHA:
    """The sweep's ASHA (also the simulator's, for the model prediction)."""
    return ASHA(space, trials, "score", "max", max_t=MAX_T, grace_period=GRACE_PERIOD,
                reduction_factor=REDUCTION_FACTOR, seed=seed)


def run_sweep(workload: str, trials: int, seed: int, storage: str, name: str, iter_s: float,
              devices: int | None, cpus_per_device: int | None, products: int | None = None,
              checkpoint: bool = False) -> float:
    """Run one real ASHA sweep; return its end-to-end seconds (``fluidsalus.run``, Ray already started).

    Args:
        workload: One of :data:`WORKLOADS`.
        trials: Trials (ASHA's ``num_samples``).
        seed: Seed of the configurations.
        storage: Storage folder.
        name: Experiment name.
        iter_s: Seconds of an iteration of scale 1.
        devices: Virtual CPU devices (None: fluidsalus's default).
        cpus_per_device: Cores per device (None: the default).
        products: ``compute``: products per iteration of scale 1 (None: calibrated now).
        checkpoint: Save a checkpoint every iteration (and resume from it).
    """
    space: dict[str, Any] = {"scale": sp.uniform(*SCALE_RANGE), "quality": sp.uniform(0.0, 1.0),
                             "max_t": MAX_T, "iter_s": iter_s, "checkpoint": checkpoint}
    if workload == "compute":
        space.update(side=MATRIX_SIDE, products=products or products_per_iteration(iter_s))
        trainable = compute_trainable
    elif workload == "sleep":
        trainable = sleep_trainable
    else:
        raise ValueError(f"workload: {workload!r} is not one of {WORKLOADS}")
    started = time.perf_counter()
    fluidsalus.run(trainable, searcher=make_searcher(trials, seed, space), metric="score", mode="max",
                   storage_path=storage, name=name, verbose=0, devices=devices, cpus_per_device=cpus_per_device)
    return time.perf_counter() - started


def measure(workload: str, trials: int, seed: int, storage: str, name: str, iter_s: float,
            devices: int | None, cpus_per_device: int | None, planner: str,
            products: int | None = None, checkpoint: bool = False) -> dict[str, Any]:
    """Run one sweep and compare it with the simulator.

    Returns:
        The comparison's figures (:meth:`fluidsalus.sim.trace.Comparison.figures`) plus ``workload``,
        ``seed``, ``end_to_end_s`` and ``moves`` (trials restarted for a move).
    """
    end_to_end = run_sweep(workload, trials, seed, storage, name, iter_s, devices, cpus_per_device, products,
                           checkpoint)
    trace = load_store_trace(os.path.join(storage, name))
    space = {"scale": sp.uniform(*SCALE_RANGE), "quality": sp.uniform(0.0, 1.0)}
    others = [name for name in OTHER_PLANNERS if name != planner]
    comparison = compare_with_store(trace, planner=planner, searcher_factory=lambda: make_searcher(trials, seed, space),
                                    max_iterations=MAX_T, also=others)
    moves = fluidsalus.inspect(os.path.join(storage, name)).planner.restarts_for_moves
    return {"workload": workload, "seed": seed, **comparison.figures(), "end_to_end_s": round(end_to_end, 3),
            "moves": moves}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seeds", default="0", help="comma-separated seeds, one sweep per seed and workload")
    p.add_argument("--iter-s", type=float, default=DEFAULT_ITER_S)
    p.add_argument("--devices", type=int,
                   help="virtual CPU devices (default: fluidsalus.run's, one 1-slot device per core)")
    p.add_argument("--cpus-per-device", type=int)
    p.add_argument("--planner", choices=REPLAY_PLANNERS, default="executor",
                   help="the placement to model: executor (the planner under the executor's rules, as the real "
                        "executor places; default), waterfill, or least_loaded (the executor's dispatch before)")
    p.add_argument("--checkpoint", action="store_true",
                   help="trials checkpoint every iteration, so the executor can move and preempt them")
    p.add_argument("--storage", help="keep the experiments here (default: a temporary folder, removed)")
    args = p.parse_args()

    import ray

    storage = args.storage or tempfile.mkdtemp(prefix="sim_vs_real_")
    # address="local": a cluster of our own, even when other Ray instances run on this machine.
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    runs = []
    try:
        products = None
        print(f"# {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"ray {ray.__version__}, load average {os.getloadavg()[0]:.1f}; "
              f"ASHA(max_t={MAX_T}, grace_period={GRACE_PERIOD}, reduction_factor={REDUCTION_FACTOR}), "
              f"{args.trials} trials, iteration {args.iter_s} s x scale in {SCALE_RANGE}")
        print(f"{'workload':<9}{'seed':>5}{'measured_s':>12}{'trace_s':>10}{'err%':>8}{'model_s':>10}{'err%':>8}"
              f"{'naive_s':>10}{'err%':>8}{'wfill_s':>10}{'err%':>8}{'e2e_s':>8}{'interf':>8}{'drv_ms':>8}"
              f"{'admit1st':>9}{'moves':>6}{'move_ms':>8}")
        for workload in args.workloads.split(","):
            if workload == "compute" and products is None:
                products = products_per_iteration(args.iter_s)
            for seed in (int(x) for x in args.seeds.split(",")):
                name = f"{workload}_{seed}_{int(time.time() * 1e3)}"
                r = measure(workload, args.trials, seed, storage, name, args.iter_s, args.devices,
                            args.cpus_per_device, args.planner, products, args.checkpoint)
                runs.append(r)
                print(f"{workload:<9}{seed:>5}{r['measured_s']:>12.2f}{r['predicted_s']:>10.2f}{r['error_pct']:>8.1f}"
                      f"{r['profile_predicted_s']:>10.2f}{r['profile_error_pct']:>8.1f}"
                      f"{r['naive_predicted_s']:>10.2f}{r['naive_error_pct']:>8.1f}"
                      f"{r.get('waterfill_predicted_s', math.nan):>10.2f}{r.get('waterfill_error_pct', math.nan):>8.1f}"
                      f"{r['end_to_end_s']:>8.2f}"
                      f"{r['interference']:>8.3f}{r['driver_latency_ms']:>8.2f}{r['admit_first_share']:>9.2f}"
                      f"{r['moves']:>6}{'-' if r['move_ms'] is None else format(r['move_ms'], '.1f'):>8}",
                      flush=True)
    finally:
        ray.shutdown()
        if args.storage is None:
            shutil.rmtree(storage, ignore_errors=True)
    worst = max(runs, key=lambda r: abs(r["error_pct"]))
    out = {
        "measured_s": worst["measured_s"], "predicted_s": worst["predicted_s"], "error_pct": worst["error_pct"],
        "max_error_pct": max(abs(r["error_pct"]) for r in runs),
        "max_profile_error_pct": max(abs(r["profile_error_pct"]) for r in runs),
        "max_naive_error_pct": max(abs(r["naive_error_pct"]) for r in runs),
        "target_error_pct": TARGET_ERROR_PCT,
        "met": all(abs(r["error_pct"]) <= TARGET_ERROR_PCT for r in runs),
        "runs": runs,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
