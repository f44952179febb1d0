"""The simulator's ground truth: how fast a trial runs on virtual GPUs. No planner ever reads this module.

Every planner sees only what a real executor would measure (iteration times, fed to
:class:`~fluidsalus.trialgroup.planner.ProfileBook`); the model below decides what those measurements are.

**A trial alone on one GPU** takes ``sec_per_iter`` seconds per iteration and keeps a fraction ``demand`` of
the GPU's compute busy meanwhile (a small trial launches kernels too small to fill the GPU, or waits on its
input pipeline: ``demand < 1``).

**Co-location** (several trials computing on one GPU at once, as lanes of one process or as separate
processes): with ``n`` trials whose effective demands sum to ``D``, each runs at ``speed = cap / max(1, D) *
(1 - interference) ** (n - 1)`` of its alone speed. ``max(1, D)``: the GPU has one GPU of compute, shared in
proportion once oversubscribed, so aggregate throughput saturates at ``D = 1``; ``(1 - interference)`` per
co-runner: cache and memory-bandwidth contention and switching, so packing past saturation *loses*
throughput. ``cap`` is 1 except under an MPS share (``fluid_heuristic``): a trial capped at a share ``s`` of
the SMs runs at ``min(1, s / demand)`` and its effective demand is ``min(demand, s)``.

**Memory**: a trial needs ``P + T`` bytes while it computes. Separate processes (Ray Tune's fractional GPUs)
each also hold a CUDA context (``context_bytes``); lanes share their device actor's one context. A static
packing that puts more on a GPU than it holds runs out of memory: the trial that allocates last crashes
after its start-up and is retried later (Ray's ``max_failures=-1``).

**Data parallelism on k whole GPUs**: ``time(k) = sec_per_iter * (serial + (1 - serial) / k + comm *
log2(k))``, Amdahl's law plus an all-reduce term that grows with the number of rounds of a ring/tree
reduction.

**Costs of changes**: starting (or restoring) a trial takes ``startup_s``; moving one between devices (at an
iteration boundary: checkpoint, restore) takes ``move_s``. Both are the same for every planner.

**Time** is virtual and event driven, with exact processor sharing: when a GPU's set of running trials changes,
every iteration in flight there continues at its new speed (the engine re-prices it and reschedules its end).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from fluidsalus.errors import ConfigError

GIB = 2**30
MIB = 2**20

#: GPUs per node: Ray places a trial on a node first, then on one of its GPUs (8-GPU servers, as in Fluid's
#: and most tuning clusters).
DEFAULT_GPUS_PER_NODE = 8
#: Memory of one virtual GPU (a 16 GB V100, the GPU of Fluid's evaluation).
DEFAULT_GPU_MEMORY = 16 * GIB
#: Compute slots of a device (its lanes): the CPU cores of an 8-GPU server with 64-80 cores, per GPU, as
#: ``fluidsalus.gpu.device.plan_devices`` gives them.
DEFAULT_SLOTS = 8
#: GPU memory a CUDA context holds (300-500 MiB on recent GPUs and drivers; the low end is used).
DEFAULT_CONTEXT_BYTES = 300 * 2**20
#: Throughput lost per co-running trial on one GPU (cache/bandwidth contention, switching): 3%. Salus and
#: Gandiva report a few percent per co-located job for small models; the same value applies to every planner.
DEFAULT_INTERFERENCE = 0.03
#: Seconds to start a trial or restore it from a checkpoint (process/thread start, model and data loading).
DEFAULT_STARTUP_S = 5.0
#: Seconds to move a trial between devices at an iteration boundary (checkpoint + restore).
DEFAULT_MOVE_S = 5.0
#: All-reduce cost per doubling of the data-parallel devices, as a fraction of the trial's alone iteration.
DEFAULT_COMM_FRACTION = 0.05
#: Seconds between a change a driver must act on (a trial pauses, ends or is stopped) and its decisions: one
#: round trip of results to the driver and placements back.
DEFAULT_DRIVER_LATENCY_S = 0.1


@dataclass(frozen=True)
class Hardware:
    """The virtual cluster and its cost model (see the module docstring).

    Attributes:
        gpus: Number of GPUs.
        gpus_per_node: GPUs per node.
        gpu_memory: Bytes of memory per GPU.
        slots: Compute slots (lanes) per GPU.
        context_bytes: GPU memory of one CUDA context.
        interference: Throughput lost per co-running trial.
        startup_s: Start or restore time of a trial.
        move_s: Time of a move between devices.
        comm_fraction: Data-parallel all-reduce cost per doubling.
        driver_latency_s: Delay of the driver's decisions after a change.
    """

    gpus: int = 64
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    gpu_memory: int = DEFAULT_GPU_MEMORY
    slots: int = DEFAULT_SLOTS
    context_bytes: int = DEFAULT_CONTEXT_BYTES
    interference: float = DEFAULT_INTERFERENCE
    startup_s: float = DEFAULT_STARTUP_S
    move_s: float = DEFAULT_MOVE_S
    comm_fraction: float = DEFAULT_COMM_FRACTION
    driver_latency_s: float = DEFAULT_DRIVER_LATENCY_S

    def __post_init__(self) -> None:
        for name in ("gpus", "gpus_per_node", "slots"):
            if getattr(self, name) < 1:
                raise ConfigError(f"Hardware: {name} must be >= 1, got {getattr(self, name)!r}")
        if not 0 <= self.context_bytes < self.gpu_memory:
            raise ConfigError(f"Hardware: need 0 <= context_bytes < gpu_memory, got context_bytes "
                              f"{self.context_bytes / 2**20:.0f} MiB (--context-mib) and gpu_memory "
                              f"{self.gpu_memory / GIB:.2f} GiB (--gpu-memory-gib)")
        if not 0.0 <= self.interference < 1.0:
            raise ConfigError(f"Hardware: interference must be in [0, 1), got {self.interference!r}")
        for name in ("startup_s", "move_s", "comm_fraction", "driver_latency_s"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ConfigError(f"Hardware: {name} must be a finite number >= 0, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> Hardware:
        """Build from a dict (unknown keys are ignored), with keyword overrides."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def dp_factor(serial: float, k: int, comm_fraction: float) -> float:
    """``time(k) / time(1)`` of a data-parallel trial on ``k`` whole GPUs.

    Args:
        serial: The trial's serial fraction (Amdahl).
        k: GPUs (>= 1).
        comm_fraction: All-reduce cost per doubling.

    Returns:
        ``serial + (1 - serial) / k + comm_fraction * log2(k)``.
    """
    if k <= 1:
        return 1.0
    return serial + (1.0 - serial) / k + comm_fraction * math.log2(k)


def best_dp_factor(serial: float, max_gpus: int, comm_fraction: float) -> float:
    """The smallest :func:`dp_factor` over ``k = 1 .. max_gpus`` whole GPUs, in O(1).

    For ``k > 0`` the factor's derivative ``-(1 - serial) / k**2 + comm_fraction / (k ln 2)`` is negative below
    ``k* = (1 - serial) ln 2 / comm_fraction`` and positive above it, so the best integer width is ``floor(k*)``
    or ``ceil(k*)`` (clamped to ``[1, max_gpus]``), or ``max_gpus`` when all-reduce is free.

    Args:
        serial: The trial's serial fraction (Amdahl).
        max_gpus: The most GPUs it may use (>= 1).
        comm_fraction: All-reduce cost per doubling.

    Returns:
        ``min(dp_factor(serial, k, comm_fraction) for k in range(1, max_gpus + 1))``.
    """
    if comm_fraction <= 0.0:
        candidates = {max_gpus}
    else:
        best = (1.0 - serial) * math.log(2) / comm_fraction
        candidates = {min(max_gpus, max(1, math.floor(best))), min(max_gpus, max(1, math.ceil(best)))}
    return min(1.0, *(dp_factor(serial, k, comm_fraction) for k in candidates))


def colocated_speed(cap: float, demand_sum: float, n: int, interference: float) -> float:
    """Speed of one of ``n`` co-running trials relative to alone (see the module docstring).

    Args:
        cap: ``min(1, share / demand)`` (1 without an MPS share).
        demand_sum: Sum of the co-runners' effective demands (itself included).
        n: Co-running trials (itself included).
        interference: Loss per co-runner.

    Returns:
        ``cap / max(1, demand_sum) * (1 - interference) ** (n - 1)``.
    """
    return cap / max(1.0, demand_sum) * (1.0 - interference) ** max(0, n - 1)
