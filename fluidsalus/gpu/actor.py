"""The Ray adapter of a device: one long-lived actor per device, reused by every trial of a run (and, kept warm,
by the next runs of the driver's process: :meth:`_DeviceActor.reset`, ``fluidsalus.trialgroup.warm``).

The actor only forwards to a :class:`~fluidsalus.gpu.host.DeviceHost`. It is a threaded actor, so the
driver's long ``poll`` never blocks ``submit`` or ``stop``. A device planned on a node (``DeviceSpec.node_id``)
gets its actor pinned to that node with a hard node-affinity scheduling strategy (docs/architecture.md,
"Several nodes").
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import os
import pickle
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray
from ray import cloudpickle  # Ray's own pickler, as Ray Tune ships trainables (see pack_trainable)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fluidsalus.distributed import free_port
from fluidsalus.gpu import arena as arena_mode
from fluidsalus.gpu import nvml
from fluidsalus.gpu.allocator import install_cuda_allocator
from fluidsalus.gpu.device import DeviceSpec, NodeResources, virtual_device_capacity
from fluidsalus.gpu.host import EV_LANE, DeviceHost, HostSettings, TrialSpec
from fluidsalus.gpu.output import tag_trial_lines
from fluidsalus.gpu.ray_session import RaySessionBridge, install_now_or_on_import
from fluidsalus.session import trial_threads_alive

#: The actor methods a driver may send as commands with a poll (``poll(max_wait_s, commands)``) or ``apply``.
COMMANDS = ("submit", "stop", "withdraw", "resume", "request_checkpoint", "answer", "hold_pauses")

#: Concurrent method calls the actor serves: one long poll plus submit/stop/info calls beside it.
ACTOR_MAX_CONCURRENCY = 4


class _DeviceActor:
    def __init__(self, device: DeviceSpec, payload: bytes, settings: HostSettings, driver_sys_path: list[str]
                 ) -> None:
        # Before any of the user's code is imported here: a module file changed after this may differ from the
        # module this process loaded, so the actor then serves no other run (reset).
        self._started = time.time()
        self._log_name = f"fluidsalus {device.name}"  # see __repr__
        # A trainable that still calls Ray's ray.tune.report (an import left unchanged) reaches its trial.
        self._ray_session = RaySessionBridge()
        # Each line a trial prints starts with its name: the process's own prefix (__repr__) names only the device.
        tag_trial_lines()
        self._serve(device, payload, settings, driver_sys_path)

    def __repr__(self) -> str:
        """What Ray's log forwarding puts before each line this process writes: ``(fluidsalus cpu:0 pid=N)``.

        Ray reads it once, when ``__init__`` has returned (its "Customizing prefixes for Actor logs"), so a warm
        actor that serves a later run keeps the name of the device it started as (``fluidsalus.trialgroup.warm``
        hands parked actors to a run's devices in order, so that is usually the same name).
        """
        return self._log_name

    def reset(self, device: DeviceSpec, payload: bytes, settings: HostSettings, driver_sys_path: list[str]
              ) -> dict[str, Any]:
        """Serve another run, in this process, as a new actor would (a warm device: fluidsalus.trialgroup.warm).

        Args:
            device: The new run's device.
            payload: Its :func:`pack_trainable` bytes.
            settings: Its device host's settings.
            driver_sys_path: Its driver's ``sys.path``.

        Which actors may be reset is the driver's rule (``trialgroup.executor._warm_key``: virtual CPU devices,
        parked only once their last run's trials have all stopped); what only this process can see is checked here.

        Returns:
            The actor's :meth:`info` for the new run, or ``{"refused": why}`` when this process cannot serve it as
            a new one would: a thread a trial of the last run started still runs, or a module it imported has
            changed on disk since it started (the driver then starts a new actor).
        """
        leftover = trial_threads_alive()
        if leftover:
            return {"refused": f"threads the last run's trials started still run: {leftover}"}
        changed = changed_module(sys.modules, self._started)
        if changed is not None:
            return {"refused": f"module {changed!r} changed on disk since the actor started"}
        self.host = None  # the last run's trainable, with what it captured, goes before the next one comes
        if max(self._payload_bytes, len(payload)) >= GIVE_BACK_PAYLOAD_BYTES:
            give_memory_back()
        self._serve(device, payload, settings, driver_sys_path)
        return self._info

    def _serve(self, device: DeviceSpec, payload: bytes, settings: HostSettings, driver_sys_path: list[str]
               ) -> None:
        """Set up a device host for one run's trainable and settings (at the start, and again at each reset)."""
        # The trainable (and a callable stop rule) may live in a module beside the user's script, which
        # cloudpickle pickles by reference: make the driver's import path visible before unpickling.
        for entry in driver_sys_path:
            if entry not in sys.path and os.path.isdir(entry):
                sys.path.append(entry)
        host_options, code = unpack_payload(payload)
        self._payload_bytes = len(payload)
        for name, value in host_options.items():  # the run's device settings from fluidsalus.run()
            setattr(settings, name, value)
        self.device = device
        torch_device = "cpu"
        physical: list[str] = []
        free = None
        if device.kind == "cuda":
            physical = [str(g) for g in ray.get_gpu_ids()]
            torch_device = "cuda:0" if _cuda_available() else "cpu"
            # Read before torch creates a CUDA context: the reserve stands for that context.
            free = nvml.device_free_memory(nvml.nvml_device_for_cuda(0), max_threads=settings.max_lanes)
            if free is not None:
                settings.capacity_bytes = free
        settings.device = torch_device
        # The memory mode is settled before the trainable is unpickled: unpickling imports the user's modules,
        # and one that touches CUDA would make the lane allocator impossible to install (docs/allocator.md).
        memory, arena = _setup_memory(device, settings, capacity_from_nvml=device.kind == "cuda" and free is not None)
        if settings.capacity_bytes <= 0:
            # A virtual CPU device (or a GPU whose free memory nothing could read): its share of this node's
            # memory, read here because the driver's machine may differ from this node.
            settings.capacity_bytes = virtual_device_capacity(device.node_devices)
        trainable, settings.stop = cloudpickle.loads(code)
        self._info = {
            "device": device.name,
            "kind": device.kind,
            "slots": device.slots,
            "cpus": device.cpus,
            "torch_device": torch_device,
            "gpu_ids": physical,
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "node_ip": ray.util.get_node_ip_address(),
            # Where Ray actually put the actor, and what it gave it (``gpu_ids`` above are Ray's GPU ids).
            "node_id": ray.get_runtime_context().get_node_id(),
            "assigned_resources": ray.get_runtime_context().get_assigned_resources(),
            "memory_mode": memory.mode,
            "memory_mode_reason": memory.reason,
            "capacity_bytes": settings.capacity_bytes,  # what its lanes may reserve: the planner's device capacity
        }
        self.host = DeviceHost(trainable, settings, arena=arena)
        # (the run's objective goes with the host: a frame of this call stayed alive in the process after it
        # returned, and held it, with the view of an Optuna study's trials, for as long: h203's real_run.py)
        del trainable, code
        install_now_or_on_import(self._ray_session)
        # Utilisation and memory of the GPU, sampled in the background and sent with each poll (for goodput).
        self._nvml = nvml.NvmlSampler(nvml.nvml_device_for_cuda(0)) if device.kind == "cuda" else None
        self._nvml_sent = 0.0
        # The driver's command batches, carried out in the order it numbered them (see _carry_out).
        self._order = threading.Lock()
        self._next_batch = 0
        self._early: dict[int, list[tuple[str, tuple[Any, ...]]]] = {}

    def info(self) -> dict[str, Any]:
        return self._info

    def free_port(self) -> int:
        """A TCP port free on this actor's node: rank 0 of a data-parallel trial serves its rendezvous there.

        The driver sends ``f"{info()['node_ip']}:{free_port()}"`` (of rank 0's actor) to every rank's
        ``TrialSpec.rendezvous``.
        """
        return free_port()

    # The commands (:data:`COMMANDS`), each a call of its own or a batch with a poll. ``batch`` is the number the
    # driver gave the call's commands (None: carry them out at once): see :meth:`apply`.

    def submit(self, specs: list[TrialSpec], batch: int | None = None) -> None:
        self.apply([("submit", (specs,))], batch)

    def stop(self, trial_ids: list[str], attempts: dict[str, int] | None = None, no_verdict: bool = False,
             peers_lost: bool = False, batch: int | None = None) -> None:
        self.apply([("stop", (trial_ids, attempts, no_verdict, peers_lost))], batch)

    def withdraw(self, trial_ids: list[str], attempts: dict[str, int], batch: int | None = None) -> None:
        self.apply([("withdraw", (trial_ids, attempts))], batch)

    def resume(self, budgets: dict[str, float | None], batch: int | None = None) -> None:
        self.apply([("resume", (budgets,))], batch)

    def request_checkpoint(self, trial_ids: list[str], batch: int | None = None) -> None:
        self.apply([("request_checkpoint", (trial_ids,))], batch)

    def answer(self, call_id: int, value: Any, is_error: bool = False, batch: int | None = None) -> None:
        self.apply([("answer", (call_id, value, is_error))], batch)

    def hold_pauses(self, hold: bool, batch: int | None = None) -> None:
        self.apply([("hold_pauses", (hold,))], batch)

    def apply(self, commands: list[tuple[str, tuple[Any, ...]]], batch: int | None = None) -> None:
        """Carry out the driver's commands in order: each is ``(method, args)`` for one of :data:`COMMANDS`.

        The actor serves its calls on a thread pool, so two calls the driver sent one after the other may run in
        either order (a ``stop`` before the ``submit`` it follows would find no trial). The driver therefore
        numbers each call that carries commands, per device actor, from 0 (``batch``); a batch that arrives
        before the one numbered just below it waits here and is carried out, in order, by the thread that
        brings the missing one. None: carry the commands out at once (a caller of its own, such as a test).
        """
        unknown = next((method for method, _ in commands if method not in COMMANDS), None)
        errors: list[Exception] = []
        if batch is None:
            if unknown is None:
                self._carry_out(commands, errors)
        else:
            with self._order:
                self._early[batch] = commands if unknown is None else []  # a refused batch still takes its turn
                while self._next_batch in self._early:
                    ready = self._early.pop(self._next_batch)
                    self._next_batch += 1
                    self._carry_out(ready, errors)
        if unknown is not None:
            raise ValueError(f"unknown device command {unknown!r}; allowed: {', '.join(COMMANDS)}")
        if errors:
            raise errors[0]

    def _carry_out(self, commands: list[tuple[str, tuple[Any, ...]]], errors: list[Exception]) -> None:
        """Carry out each command; one that raises is noted in ``errors`` and the rest go on: a command that
        raises must not hold back those after it (in its batch, or batches that came early and wait here, which
        the next numbered call would otherwise carry out, if one ever came)."""
        for method, args in commands:
            try:
                getattr(self.host, method)(*args)
            except Exception as e:  # noqa: BLE001 - raised to the caller once every command was carried out
                errors.append(e)

    def poll(self, max_wait_s: float, commands: list[tuple[str, tuple[Any, ...]]] | None = None,
             batch: int | None = None) -> list[tuple[Any, ...]]:
        """Carry out ``commands`` (see :meth:`apply`; ``batch``: their number), then return the device's events,
        waiting up to ``max_wait_s`` for the first one."""
        if commands:
            self.apply(commands, batch)
        events = self.host.poll(max_wait_s)
        if self._nvml is not None and self._nvml.available:
            for sample in self._nvml.samples():
                if sample.ts > self._nvml_sent:
                    events.append((EV_LANE, None, None, sample.ts, "nvml", dataclasses.asdict(sample)))
                    self._nvml_sent = sample.ts
        return events

    def wake_poll(self) -> None:
        """:meth:`DeviceHost.wake_poll` (a call of its own: the poll it wakes holds no lock it needs)."""
        self.host.wake_poll()

    def shutdown(self, timeout_s: float) -> list[str]:
        if self._nvml is not None:
            self._nvml.stop()
        return self.host.shutdown(timeout_s)


#: A warm device process collects what the last run left, and gives the freed heap back, before it serves a run
#: whose packed trainable (or whose last run's) is at least this big (:func:`give_memory_back`). The collection
#: costs about 80 ms in a process that imported torch, and a small trainable leaves almost nothing: 129.6 MB to
#: 132.7 MB over 150 runs of a trainable that captured nothing, against 168 MB to 875 MB over 50 runs of one that
#: captured 20 MB (a helper's soak test). 1 MiB: past glibc's smallest mmap threshold (128 KiB), where objects
#: the trainable captured begin to fragment the heap.
GIVE_BACK_PAYLOAD_BYTES = 1 << 20


def give_memory_back() -> None:
    """Collect what the last run left and return the freed heap to the system (glibc's ``malloc_trim``).

    A warm device process unpickles each run's trainable anew: with a 20 MB object in the trainable's closure its
    memory grew from 168 MB to 875 MB over 50 runs, and on by about 6 MB a run, though at most two such objects
    were alive at any time (a helper's soak test): freed memory the allocator kept, some of it held in reference
    cycles until a collection (the trim alone still reached 780 MB). With both at each reset it stayed at
    283-378 MB over 30 runs. Elsewhere than glibc only the collection is done.
    """
    gc.collect()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def changed_module(modules: Mapping[str, Any], since: float) -> str | None:
    """A module whose file was modified after ``since``: the code on disk may no longer be what was imported.

    Args:
        modules: ``sys.modules``, or a mapping like it.
        since: A time (``time.time()``), e.g. when the process began to import the user's code.

    Returns:
        The name of the first such module (one whose file is gone counts), or None.
    """
    for name, module in list(modules.items()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not os.path.isabs(path):
            continue  # (torch.ops's is "_ops.py": a name, no path, taken for a module deleted; imports give paths)
        try:
            modified = os.stat(path).st_mtime
        except OSError:
            return name
        if modified > since:
            return name
    return None


def _cuda_initialized() -> bool:
    """Whether torch has initialised CUDA in this process (then PyTorch's allocator cannot be swapped)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_initialized())


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return bool(torch.cuda.is_available())


DeviceActor = ray.remote(max_concurrency=ACTOR_MAX_CONCURRENCY)(_DeviceActor)


def pack_trainable(trainable: Callable[..., Any],
                   stop: Callable[[str, Mapping[str, Any]], bool] | None,
                   host_options: Mapping[str, Any] | None = None) -> bytes:
    """Pickle what every device needs from the user once per run (raises what cloudpickle raises).

    Args:
        trainable: The user's trainable.
        stop: The run's stop rule.
        host_options: :class:`HostSettings` fields the run sets on every device (``memory_mode``), plain
            values. The actor reads them before it unpickles the trainable, since the memory mode must be
            settled before user code runs in its process.

    Returns:
        The payload: a plain pickle of the options and of the cloudpickled trainable and stop rule. The pickler
        is Ray's vendored ``ray.cloudpickle``, the one Ray Tune ships trainables with: it keeps each function's
        source file, so a device's traceback shows the user's lines as under Ray Tune (the standalone
        ``cloudpickle`` from 3.1.3 on names every function pickled by value ``<dynamic-code>``).

    Raises:
        ValueError: For a ``host_options`` key that is not a HostSettings field.
    """
    options = dict(host_options or {})
    known = {f.name for f in dataclasses.fields(HostSettings)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"host_options: {unknown} are not HostSettings fields")
    return pickle.dumps({"host_options": options, "code": cloudpickle.dumps((trainable, stop))})


def unpack_payload(payload: bytes) -> tuple[dict[str, Any], bytes]:
    """Split :func:`pack_trainable`'s bytes without running user code.

    Args:
        payload: The payload.

    Returns:
        ``(host_options, code)``: the run's HostSettings fields, and the cloudpickled ``(trainable, stop)``.
    """
    data = pickle.loads(payload)
    return dict(data["host_options"]), data["code"]


def _setup_memory(device: DeviceSpec, settings: HostSettings, capacity_from_nvml: bool
                  ) -> tuple[arena_mode.MemoryModeChoice, arena_mode.ArenaBackend | None]:
    """Settle the device's memory mode and, in arena mode, install the lane allocator (before CUDA exists).

    Args:
        device: The device.
        settings: Its settings; ``memory_mode`` is replaced by the mode chosen (``"caching"`` or ``"arena"``),
            and ``capacity_bytes`` by torch's count of free memory when NVML could not give it.
        capacity_from_nvml: Whether ``settings.capacity_bytes`` is the GPU's free memory (read with NVML).

    Returns:
        The choice and, in arena mode, the CUDA arena backend.

    Raises:
        MemoryModeError: ``memory_mode="arena"`` where the allocator cannot be installed.
        LaneAllocatorError: The device pool cannot be reserved.
    """
    cuda = settings.device.startswith("cuda")
    wants_arena = settings.memory_mode != arena_mode.MODE_CACHING and device.kind == "cuda"
    choice = arena_mode.resolve_memory_mode(
        settings.memory_mode,
        device.kind,
        cuda_usable=cuda,
        cuda_initialized=cuda and _cuda_initialized(),
        library_error=arena_mode.library_error() if wants_arena else None,
    )
    settings.memory_mode = choice.mode
    if choice.mode != arena_mode.MODE_ARENA:
        return choice, None
    if not capacity_from_nvml:
        # Without NVML: free memory as the CUDA runtime counts it, once the allocator is in place (this
        # initialises CUDA, so the context already exists and the reserve makes the pool conservative).
        install_cuda_allocator()
        import torch

        free_now = int(torch.cuda.mem_get_info(0)[0])
        settings.capacity_bytes = max(0, free_now - nvml.context_reserve_bytes(settings.max_lanes))
    return choice, arena_mode.CudaArenaBackend.install(settings.capacity_bytes, settings.max_lanes)


def cluster_nodes() -> dict[str, NodeResources]:
    """The alive nodes of the connected Ray cluster and their total resources, for ``plan_devices``.

    The driver's own node comes first (so a one-node run numbers its devices as before), then the others by
    address and id, so the same cluster always gives the same device names.

    Returns:
        ``{node_id: resources}``, e.g. ``{"a1b2...": {"CPU": 8.0, "GPU": 2.0, "memory": ..., ...}}``.
    """
    try:
        here = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - a Ray Client driver has no node of its own
        here = None
    alive = [n for n in ray.nodes() if n.get("Alive")]
    alive.sort(key=lambda n: (n["NodeID"] != here, n.get("NodeManagerAddress", ""), n["NodeID"]))
    return {n["NodeID"]: dict(n.get("Resources", {})) for n in alive}


def start_device_actor(device: DeviceSpec, payload: bytes, settings: HostSettings, name: str | None = None) -> Any:
    """Create the actor for ``device`` with the Ray resources the device stands for.

    A device with a ``node_id`` is pinned to that node (``NodeAffinitySchedulingStrategy(soft=False)``): the
    actor starts there or not at all, so the plan's per-node split of cores and GPUs is what Ray grants. Which
    GPU of the node it gets is Ray's choice, reported by the actor's ``info()["gpu_ids"]``.

    Args:
        device: The device the actor stands for.
        payload: :func:`pack_trainable`'s bytes.
        settings: The device host's settings (its ``stop`` comes from ``payload``).
        name: The actor's name (``ray.get_actor(name)`` finds it), or None for an anonymous actor.

    Returns:
        The actor handle.
    """
    options: dict[str, Any] = {"num_cpus": device.cpus}
    if name is not None:
        options["name"] = name
    if device.kind == "cuda":
        options["num_gpus"] = 1
    if device.node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=device.node_id, soft=False)
    return DeviceActor.options(**options).remote(device, payload, settings, list(sys.path))
