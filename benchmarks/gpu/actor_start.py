"""Where a GPU device actor's start goes: the steps of its start, timed in new Ray worker processes.

A sweep's GPU device came up about 4 s later than a virtual CPU device of the same machine (docs/benchmarks.md,
"An H200 (the thirty-first session)"). This script times, in a new Ray worker process each time, what a device
actor's start does before it serves trials (``fluidsalus.gpu.actor._DeviceActor._serve``), for a worker that Ray
gave one GPU and for one it gave none:

- ``worker``: from the driver's ``.remote()`` to the first line of the task (Ray starts a new worker process);
- ``import actor``: ``import fluidsalus.gpu.actor`` (ray, the device host and what they import);
- ``import torch``: torch, where the import above did not already bring it;
- ``cuda available``: ``torch.cuda.is_available()`` (the actor's ``_cuda_available``);
- ``nvml free``: the GPU's free memory read with NVML (``nvml.device_free_memory``);
- ``cuda context``: the first tensor on the GPU (torch creates the CUDA context; trials do this on their first
  use of the GPU).

Run from the repository root on a GPU machine: ``python3 benchmarks/gpu/actor_start.py [--repeats 2] [--json]``.
Without a GPU only the CPU worker is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import ray

#: Each task runs in a worker process of its own (Ray starts one per call), as each device actor does.
ONE_CALL_PER_WORKER = 1


@ray.remote(max_calls=ONE_CALL_PER_WORKER)
def _start_steps(submitted: float, gpu: bool) -> dict[str, float]:
    """The seconds each step of a device actor's start took in this new worker process."""
    steps: dict[str, float] = {"worker": time.time() - submitted}
    last = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        steps[name] = now - last
        last = now

    import fluidsalus.gpu.actor  # noqa: F401

    mark("import actor")
    import torch

    mark("import torch")
    if gpu:
        available = torch.cuda.is_available()
        mark("cuda available")
        from fluidsalus.gpu import nvml

        nvml.device_free_memory(nvml.nvml_device_for_cuda(0), max_threads=16)
        mark("nvml free")
        if available:
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            mark("cuda context")
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="new workers timed per kind (default 2)")
    parser.add_argument("--json", action="store_true", help="print the timings as JSON")
    args = parser.parse_args(argv)
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        kinds = ["cpu"] + (["gpu"] if ray.cluster_resources().get("GPU", 0) >= 1 else [])
        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        for _ in range(args.repeats):
            for kind in kinds:  # alternate, so that a slow moment of the machine falls on both
                gpu = kind == "gpu"
                ref = _start_steps.options(num_gpus=1 if gpu else 0, num_cpus=1).remote(time.time(), gpu)
                runs[kind].append(ray.get(ref))
    finally:
        ray.shutdown()
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    for kind, timings in runs.items():
        print(f"{kind} worker ({len(timings)} new processes), median seconds per step:")
        for step in timings[0]:
            values = [t[step] for t in timings]
            print(f"  {step:<15} {statistics.median(values):7.3f}   ({', '.join(f'{v:.3f}' for v in values)})")
        total = [sum(t.values()) for t in timings]
        print(f"  {'total':<15} {statistics.median(total):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
