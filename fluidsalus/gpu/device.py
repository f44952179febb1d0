"""Devices: the units trials are placed on.

A device is a GPU (``cuda:i``, one per GPU Ray reports) or, where there is no GPU, a *virtual CPU device*:
a share of the machine's cores with its own slots, so the whole engine runs on a laptop or in CI.
This module is pure: it turns the resources of the cluster's nodes into a list of :class:`DeviceSpec`, each
on one node (``fluidsalus.gpu.actor.cluster_nodes`` reads them from Ray).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from fluidsalus.errors import ConfigError

#: Share of the host's physical memory that the virtual CPU devices split between them as their lane
#: capacity. The other half is left to the driver, Ray's own processes and the OS.
VIRTUAL_DEVICE_MEMORY_FRACTION = 0.5
#: Memory assumed for a trial until it is measured: persistent (model, optimizer state) and ephemeral
#: (activations, gradients) bytes. Generous for the small models that benefit from co-location (the digits
#: MLP needs under 1 MiB of each), and small enough that a 12 GiB virtual device holds dozens of trials.
DEFAULT_TRIAL_ESTIMATE = (256 * 2**20, 256 * 2**20)

#: Default cores per virtual CPU device: one, so a CPU device is one process per core. Lanes of one process
#: share Python's GIL, and for the small models that sweeps co-locate the Python work dominates: measured on
#: this project's 2-core machine, the digits sweep's 2187 epochs took 33.4 s one after another and 38.2 s on
#: two threads of one process, and ``benchmarks/compare.py --sweep digits`` trained 409 epochs in 10.0 s on
#: one 2-core device but 341 in 5.4 s on two 1-core devices (docs/benchmarks.md). Pass ``cpus_per_device``
#: for trainables whose compute releases the GIL long enough to share a process.
DEFAULT_CPUS_PER_DEVICE = 1
#: Ray's resource unit: amounts are fixed-point numbers with four decimals (``0.0001`` is the finest request), so
#: ``cores / cpus_per_trial`` is computed in these units, where ``1 / 0.1`` is exactly 10.
RESOURCE_UNITS = 10_000


@dataclass(frozen=True)
class DeviceSpec:
    """One device, before its actor exists.

    Attributes:
        name: ``"cpu:0"`` for a virtual CPU device, ``"cuda:0"`` for a GPU (the index is the device's place in
            the run, not the physical GPU id, which comes from Ray's assignment inside the actor).
        kind: ``"cpu"`` or ``"cuda"``.
        index: Position among the run's devices.
        slots: Compute slots: the most trials that run at once on the device (its lanes). As many as its
            ``cpus`` unless a run's ``cpus_per_trial`` asks for another number (:func:`lanes_for`).
        node_id: The Ray node the device's actor is pinned to (``ray.nodes()[i]["NodeID"]``), or None to let
            Ray place it on any node with the resources (the single-pool plan of one resources mapping).
        node_devices: The run's devices on the same node (every device of a single pool): virtual CPU devices
            split their node's memory between them (:func:`virtual_device_capacity`, read on that node).
        cpus: The CPU cores reserved for the device's actor (0, the default: ``slots``). On a virtual CPU
            device torch's intra-op threads are shared out among its slots (``cpus // slots`` each, at least 1).
    """

    name: str
    kind: str
    index: int
    slots: int
    node_id: str | None = None
    node_devices: int = 1
    cpus: int = 0

    def __post_init__(self) -> None:
        if self.cpus <= 0:
            object.__setattr__(self, "cpus", self.slots)


def lanes_for(cores: int, cpus_per_trial: float | None) -> int:
    """How many trials a device of ``cores`` CPU cores runs at once when each trial asks for ``cpus_per_trial``.

    Ray's rule for a node: ``floor(cores / cpus_per_trial)`` trials fit. A device always runs at least one
    (where one trial asks for more cores than the device has, it gets them all). No request: one per core.

    Args:
        cores: The device's cores (``DeviceSpec.cpus``).
        cpus_per_trial: A trial's request (``fluidsalus.run(cpus_per_trial=...)``), or None.

    Returns:
        The device's slots, ``>= 1``.
    """
    if cpus_per_trial is None:
        return max(1, cores)
    return max(1, cores * RESOURCE_UNITS // _units(cpus_per_trial))


def _units(amount: float) -> int:
    """A resource amount in Ray's fixed-point units (at least one)."""
    return max(1, round(amount * RESOURCE_UNITS))


def host_memory_bytes() -> int:
    """Physical memory of this machine, in bytes."""
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def virtual_device_capacity(n_devices: int) -> int:
    """Lane capacity of each of ``n_devices`` virtual CPU devices on this machine (called on the device's node:
    the nodes of a cluster may have different memory)."""
    return int(host_memory_bytes() * VIRTUAL_DEVICE_MEMORY_FRACTION / max(1, n_devices))


#: Resources of one node: ``ray.nodes()[i]["Resources"]`` (``CPU``, ``GPU``, ``memory``, ...).
NodeResources = Mapping[str, float]


def plan_devices(
    cluster: NodeResources | Mapping[str, NodeResources],
    devices: int | None = None,
    cpus_per_device: int | None = None,
    cpus_per_trial: float | None = None,
    task_cpus_per_trial: float = 0.0,
) -> list[DeviceSpec]:
    """Decide the run's devices from Ray's resources, node by node.

    A device never spans nodes. If any node has a GPU, there is one ``cuda`` device per GPU of every node (nodes
    without a GPU get none); otherwise each node is split into virtual CPU devices of ``cpus_per_device`` cores.
    When ``devices`` asks for fewer devices than the nodes hold, they are dealt out round-robin over the nodes,
    in the order given, so a smaller run still spreads over the cluster. Devices are numbered in that order:
    ``cpu:0``, ``cpu:1``, ... across all nodes.

    Args:
        cluster: ``{node_id: resources}`` for each alive node (in the order devices are numbered), as
            :func:`fluidsalus.gpu.actor.cluster_nodes` gives it; or one plain resources mapping
            (``ray.cluster_resources()``), taken as a single node whose devices carry no node id and so are
            not pinned to any node.
        devices: How many devices to use; None means every GPU, or else one virtual CPU device per
            ``cpus_per_device`` cores of each node (at least one, if the cluster has a CPU).
        cpus_per_device: Cores per device. None means :data:`DEFAULT_CPUS_PER_DEVICE` for virtual CPU devices
            (or ``ceil(cpus_per_trial)`` where that is more), and an even share of its node's cores for GPU
            devices. A node with fewer cores than this gets one virtual CPU device of all its cores.
        cpus_per_trial: The cores one trial asks for (Ray Tune's ``with_resources({"cpu": ...})``): each
            device runs at most ``floor(cores / cpus_per_trial)`` trials at once, and at least one
            (:func:`lanes_for`). None: one trial per core.
        task_cpus_per_trial: Cores each trial keeps for the Ray tasks and actors it starts (Ray Tune's
            ``PlacementGroupFactory`` bundles after the first): the devices of each node then hold only the cores
            of the trials it can run at once by Ray's count, and leave the rest to Ray (:func:`device_cores`).

    Returns:
        The device specs, in order.

    Raises:
        ConfigError: If the cluster cannot hold the devices asked for.
    """
    nodes = _as_nodes(cluster)
    if not (isinstance(task_cpus_per_trial, (int, float)) and 0 <= task_cpus_per_trial < math.inf):
        raise ConfigError(f"task_cpus_per_trial: must be a number >= 0 (got {task_cpus_per_trial!r})")
    if task_cpus_per_trial > 0:
        nodes = [(node_id, _keep_task_cpus(res, cpus_per_trial, task_cpus_per_trial)) for node_id, res in nodes]
    if devices is not None and devices < 1:
        raise ConfigError(f"devices: must be >= 1 or None (one per GPU / per {DEFAULT_CPUS_PER_DEVICE} cores)")
    if cpus_per_device is not None and cpus_per_device < 1:
        raise ConfigError("cpus_per_device: must be >= 1 or None")
    if cpus_per_trial is not None and not (isinstance(cpus_per_trial, (int, float)) and 0 < cpus_per_trial < math.inf):
        raise ConfigError(f"cpus_per_trial: must be a number > 0 or None (got {cpus_per_trial!r})")
    if any(_count(res, "GPU") > 0 for _, res in nodes):
        specs = _plan_gpu_devices(nodes, devices, cpus_per_device)
    else:
        if cpus_per_device is None and cpus_per_trial is not None and _units(cpus_per_trial) > \
                DEFAULT_CPUS_PER_DEVICE * RESOURCE_UNITS:
            cores = -(-_units(cpus_per_trial) // RESOURCE_UNITS)  # the whole cores one trial asks for
            try:
                specs = _plan_cpu_devices(nodes, devices, cores)
            except ConfigError as e:
                raise ConfigError(f"{e} (cpus_per_trial={cpus_per_trial} makes devices of {cores} cores)") from None
        else:
            specs = _plan_cpu_devices(nodes, devices, cpus_per_device)
    if cpus_per_trial is None:
        return specs
    return [DeviceSpec(d.name, d.kind, d.index, lanes_for(d.cpus, cpus_per_trial), d.node_id, d.node_devices, d.cpus)
            for d in specs]


def _keep_task_cpus(res: NodeResources, cpus_per_trial: float | None, task_cpus_per_trial: float) -> NodeResources:
    """A node's resources as its devices may hold them: :func:`device_cores` cores, and no more GPU devices than
    those cores (each GPU device holds at least one core, so more would take the cores kept for the tasks)."""
    cores = device_cores(_count(res, "CPU"), cpus_per_trial, task_cpus_per_trial)
    kept = {**res, "CPU": cores}
    if _count(res, "GPU") > cores > 0:
        kept["GPU"] = cores
    return kept


def device_cores(cores: int, cpus_per_trial: float | None, task_cpus_per_trial: float) -> int:
    """The cores of a node of ``cores`` that its devices hold when each trial also keeps ``task_cpus_per_trial``
    cores for the Ray tasks and actors it starts, as Ray Tune keeps a placement group's later bundles for them.

    Ray runs ``k = floor(cores / (cpus_per_trial + task_cpus_per_trial))`` such trials at once on the node; the
    devices hold the cores of those ``k`` trials' own share (``ceil(k * cpus_per_trial)``), and Ray keeps the
    rest for their tasks. At least one trial runs (where Ray would wait for ever for a larger node) and the
    devices hold at least one core.

    Args:
        cores: The node's CPUs.
        cpus_per_trial: A trial's own cores (the placement group's first bundle), or None for one.
        task_cpus_per_trial: The cores each trial keeps for its tasks.

    Returns:
        The cores the node's devices hold, ``1 <= n <= cores`` (0 for a node without a core).
    """
    if cores <= 0:
        return 0
    own = _units(cpus_per_trial) if cpus_per_trial else RESOURCE_UNITS
    at_once = max(1, cores * RESOURCE_UNITS // (own + _units(task_cpus_per_trial)))
    return min(cores, max(1, -(-at_once * own // RESOURCE_UNITS)))


def replacements_for_lost(
    lost: Sequence[DeviceSpec],
    nodes: Mapping[str, NodeResources],
    placed: Mapping[str, Sequence[str]],
    plan_node: Callable[[str, NodeResources], list[DeviceSpec]],
) -> list[tuple[DeviceSpec, DeviceSpec]]:
    """Where the devices a run lost with their node start again: on nodes that joined the cluster since.

    A device pinned to a node that is gone cannot start there again (``soft=False``). A node the run did not begin
    on (one that joined, or a dead node back under a new id) is planned as the run planned its own (``plan_node``),
    less the devices the run already has there, and each device left takes the place of a lost one of the same
    kind, keeping that one's name and index. Devices lost for another reason (their node still there: the
    trainable failed to load, say) are not moved.

    Args:
        lost: The lost devices' specs, in the order they should get a place.
        nodes: The alive nodes the run did not begin on, and their resources.
        placed: The kinds of the run's devices on each node (moved or added there before; a lost one too, which
            still holds its place).
        plan_node: The devices of one node as the run plans them (``plan_devices({node: resources}, ...)``).

    Returns:
        ``(lost spec, its new spec)`` pairs.
    """
    waiting = [spec for spec in lost if spec.node_id is not None and spec.node_id not in nodes]
    moved: list[tuple[DeviceSpec, DeviceSpec]] = []
    for node_id, resources in nodes.items():
        if not waiting:
            break
        for spec in free_devices(node_id, resources, placed.get(node_id, ()), plan_node):
            old = next((s for s in waiting if s.kind == spec.kind), None)
            if old is None:
                continue
            waiting.remove(old)
            moved.append((old, DeviceSpec(old.name, spec.kind, old.index, spec.slots, node_id, spec.node_devices,
                                          spec.cpus)))
    return moved


def free_devices(node_id: str, resources: NodeResources, placed: Sequence[str],
                 plan_node: Callable[[str, NodeResources], list[DeviceSpec]]) -> list[DeviceSpec]:
    """A node's devices as the run plans them, less one of the same kind for each device it has there already
    (``placed``: their kinds). A node the run cannot plan (no core, too few for ``cpus_per_device``: a head node
    started with ``num_cpus=0``, say) has none."""
    try:
        specs = plan_node(node_id, resources)
    except ConfigError:
        return []
    for kind in placed:
        taken = next((s for s in specs if s.kind == kind), None)
        if taken is not None:
            specs.remove(taken)
    return specs


def as_run_plans(resources: NodeResources, kinds: Collection[str]) -> NodeResources:
    """A joining node's resources as a run of devices of ``kinds`` plans them: a run of virtual CPU devices plans
    a GPU node's cores as CPU devices, leaving its GPUs out (Ray Tune places CPU trials on a GPU node; planned as
    it is, the node gave only GPU devices, which such a run does not take: a helper's run)."""
    if set(kinds) == {"cpu"} and "GPU" in resources:
        return {k: v for k, v in resources.items() if k != "GPU"}
    return resources


def devices_of_joined_nodes(
    nodes: Mapping[str, NodeResources],
    placed: Mapping[str, Sequence[str]],
    kinds: Collection[str],
    plan_node: Callable[[str, NodeResources], list[DeviceSpec]],
    first_index: int,
) -> list[DeviceSpec]:
    """The devices a run that uses its whole cluster adds for nodes that joined it, as Ray Tune places trials on
    such a node: each node is planned as the run planned its own (``plan_node``), less the devices the run has
    there already, and its devices of the kinds the run has are kept (a CPU node that joins a run of GPU devices
    adds none), numbered on from ``first_index``.

    Args:
        nodes: The alive nodes the run did not begin on, with their resources.
        placed: The kinds of the run's devices on each node (:func:`replacements_for_lost`).
        kinds: The kinds of the run's devices (``cpu``, ``cuda``).
        plan_node: The devices of one node as the run plans them (``plan_devices({node: resources}, ...)``).
        first_index: The run's device count: the first new device's index.

    Returns:
        The new devices, named ``<kind>:<index>``.
    """
    added: list[DeviceSpec] = []
    for node_id, resources in nodes.items():
        for spec in free_devices(node_id, resources, placed.get(node_id, ()), plan_node):
            if spec.kind in kinds:
                index = first_index + len(added)
                added.append(DeviceSpec(f"{spec.kind}:{index}", spec.kind, index, spec.slots, node_id,
                                        spec.node_devices, spec.cpus))
    return added


def _as_nodes(cluster: NodeResources | Mapping[str, NodeResources]) -> list[tuple[str | None, NodeResources]]:
    """``(node_id, resources)`` pairs: a per-node mapping has mappings as values, a single pool has numbers."""
    if cluster and all(isinstance(v, Mapping) for v in cluster.values()):
        return [(str(node_id), res) for node_id, res in cluster.items()]  # type: ignore[misc]
    return [(None, cluster)]  # type: ignore[list-item]


def _count(resources: NodeResources, name: str) -> int:
    """Whole units of a resource (Ray reports fractions as floats; a device needs whole ones)."""
    return int(resources.get(name, 0))


def _deal(n: int, capacities: list[int]) -> list[int]:
    """Deal ``n`` devices round-robin over nodes that hold ``capacities[i]`` each (``n <= sum(capacities)``)."""
    counts = [0] * len(capacities)
    while n > 0:
        for i, cap in enumerate(capacities):
            if n > 0 and counts[i] < cap:
                counts[i] += 1
                n -= 1
    return counts


def _where(node_id: str | None) -> str:
    return "the Ray cluster" if node_id is None else f"node {node_id}"


def _plan_gpu_devices(nodes: list[tuple[str | None, NodeResources]], devices: int | None,
                      cpus_per_device: int | None) -> list[DeviceSpec]:
    gpus = [_count(res, "GPU") for _, res in nodes]
    total = sum(gpus)
    n = total if devices is None else devices
    if n > total:
        raise ConfigError(f"devices={n}: the Ray cluster has only {total} GPU(s)")
    specs: list[DeviceSpec] = []
    for (node_id, res), count in zip(nodes, _deal(n, gpus), strict=True):
        if count == 0:
            continue
        cpus = _count(res, "CPU")
        slots = cpus_per_device if cpus_per_device is not None else max(1, cpus // count)
        if cpus_per_device is not None and slots * count > max(cpus, 1):
            on = "" if node_id is None else f" on node {node_id}"
            raise ConfigError(
                f"cpus_per_device={slots} x {count} GPU devices{on} needs {slots * count} CPUs; "
                f"{_where(node_id)} has {cpus}"
            )
        for _ in range(count):
            specs.append(DeviceSpec(f"cuda:{len(specs)}", "cuda", len(specs), slots, node_id, count))
    return specs


def _plan_cpu_devices(nodes: list[tuple[str | None, NodeResources]], devices: int | None,
                      cpus_per_device: int | None) -> list[DeviceSpec]:
    cpus = [_count(res, "CPU") for _, res in nodes]
    per = cpus_per_device if cpus_per_device is not None else DEFAULT_CPUS_PER_DEVICE
    if devices is None:
        # Each node: devices of ``per`` cores, or one of all its cores if it has fewer.
        sizes = [min(per, c) for c in cpus]
        counts = [c // s if s > 0 else 0 for c, s in zip(cpus, sizes, strict=True)]
        if sum(counts) == 0:
            _too_small(1, min(per, 1), cpus, nodes)
    else:
        if cpus_per_device is None:
            # The largest size up to the default at which the nodes hold ``devices`` devices.
            per = next((s for s in range(per, 0, -1) if sum(c // s for c in cpus) >= devices), 1)
        capacities = [c // per for c in cpus]
        if sum(capacities) < devices:
            _too_small(devices, per, cpus, nodes)
        sizes = [per] * len(nodes)
        counts = _deal(devices, capacities)
    specs: list[DeviceSpec] = []
    for (node_id, _), size, count in zip(nodes, sizes, counts, strict=True):
        for _ in range(count):
            specs.append(DeviceSpec(f"cpu:{len(specs)}", "cpu", len(specs), size, node_id, count))
    return specs


def _too_small(n: int, per: int, cpus: list[int], nodes: list[tuple[str | None, NodeResources]]) -> None:
    """Raise the ConfigError for ``n`` virtual CPU devices of ``per`` cores that the nodes cannot hold."""
    message = f"{n} virtual CPU device(s) x {per} CPU(s) each needs {n * per} CPUs, but the Ray cluster has {sum(cpus)}"
    if len(nodes) > 1 and sum(cpus) >= n * per:
        per_node = ", ".join(f"{node_id}: {c}" for (node_id, _), c in zip(nodes, cpus, strict=True))
        message += f" split over nodes ({per_node}), and a device never spans nodes"
    raise ConfigError(f"{message}. Lower devices= or cpus_per_device=, or start Ray with more CPUs.")
