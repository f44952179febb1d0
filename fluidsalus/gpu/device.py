"""Devices: the units trials are placed on.

A device is a GPU (``cuda:i``, one per GPU Ray reports) or, where there is no GPU, a *virtual CPU device*:
a share of the machine's cores with its own slots, so the whole engine runs on a laptop or in CI.
This module is pure: it turns the cluster's resource totals into a list of :class:`DeviceSpec`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from fluidsalus.errors import ConfigError

#: Share of the host's physical memory that the virtual CPU devices split between them as their lane
#: capacity. The other half is left to the driver, Ray's own processes and the OS.
VIRTUAL_DEVICE_MEMORY_FRACTION = 0.5
#: Memory assumed for a trial until it is measured: persistent (model, optimizer state) and ephemeral
#: (activations, gradients) bytes. Generous for the small models that benefit from co-location (the digits
#: MLP needs under 1 MiB of each), and small enough that a 12 GiB virtual device holds dozens of trials.
DEFAULT_TRIAL_ESTIMATE = (256 * 2**20, 256 * 2**20)

#: Default cores per virtual CPU device. Two cores let a device overlap one trial's Python work with
#: another's compute, while a 2-core machine (this project's CI) still gets one device, as documented.
DEFAULT_CPUS_PER_DEVICE = 2


@dataclass(frozen=True)
class DeviceSpec:
    """One device, before its actor exists.

    Attributes:
        name: ``"cpu:0"`` for a virtual CPU device, ``"cuda:0"`` for a GPU (the index is the device's place in
            the run, not the physical GPU id, which comes from Ray's assignment inside the actor).
        kind: ``"cpu"`` or ``"cuda"``.
        index: Position among the run's devices.
        slots: Compute slots: the CPU cores reserved for the device's actor. Trials run at most this many
            at once on a CPU device, and torch's intra-op threads are shared out among them.
    """

    name: str
    kind: str
    index: int
    slots: int


def host_memory_bytes() -> int:
    """Physical memory of this machine, in bytes."""
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def virtual_device_capacity(n_devices: int) -> int:
    """Lane capacity of each of ``n_devices`` virtual CPU devices on this machine."""
    return int(host_memory_bytes() * VIRTUAL_DEVICE_MEMORY_FRACTION / max(1, n_devices))


def plan_devices(
    cluster: Mapping[str, float], devices: int | None = None, cpus_per_device: int | None = None
) -> list[DeviceSpec]:
    """Decide the run's devices from Ray's cluster resources.

    Args:
        cluster: ``ray.cluster_resources()`` (or ``available_resources()``): ``CPU``, ``GPU``, ...
        devices: How many devices to use; None means every GPU, or else one virtual CPU device per
            ``cpus_per_device`` cores (at least one).
        cpus_per_device: Cores per device (CPU slots). None means :data:`DEFAULT_CPUS_PER_DEVICE` for virtual
            CPU devices, and an even share of the cores for GPU devices.

    Returns:
        The device specs, in order.

    Raises:
        ConfigError: If the cluster cannot hold the devices asked for.
    """
    cpus = int(cluster.get("CPU", 0))
    gpus = int(cluster.get("GPU", 0))
    if devices is not None and devices < 1:
        raise ConfigError(f"devices: must be >= 1 or None (one per GPU / per {DEFAULT_CPUS_PER_DEVICE} cores)")
    if cpus_per_device is not None and cpus_per_device < 1:
        raise ConfigError("cpus_per_device: must be >= 1 or None")
    if gpus > 0:
        n = gpus if devices is None else devices
        if n > gpus:
            raise ConfigError(f"devices={n}: the Ray cluster has only {gpus} GPU(s)")
        slots = cpus_per_device if cpus_per_device is not None else max(1, cpus // n)
        if slots * n > max(cpus, 1) and cpus_per_device is not None:
            raise ConfigError(
                f"cpus_per_device={slots} x {n} GPU devices needs {slots * n} CPUs; the cluster has {cpus}"
            )
        return [DeviceSpec(f"cuda:{i}", "cuda", i, slots) for i in range(n)]
    per = cpus_per_device if cpus_per_device is not None else DEFAULT_CPUS_PER_DEVICE
    if devices is None:
        per = min(per, max(cpus, 1))
        n = max(1, cpus // per)
    else:
        n = devices
        if cpus_per_device is None:
            per = max(1, min(per, cpus // n if cpus >= n else 1))
    if n * per > cpus:
        raise ConfigError(
            f"{n} virtual CPU device(s) x {per} CPU(s) each needs {n * per} CPUs, but the Ray cluster has "
            f"{cpus}. Lower devices= or cpus_per_device=, or start Ray with more CPUs."
        )
    return [DeviceSpec(f"cpu:{i}", "cpu", i, per) for i in range(n)]
