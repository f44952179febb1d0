"""The strict-arena memory mode: the glue between a device's lane runtime and the C++ lane allocator.

A device measures and bounds its trials' memory in one of two modes (``docs/allocator.md``, "Which mode the
engine uses"):

- ``"caching"``: PyTorch's own CUDA caching allocator. A trial's ``P`` and ``T`` come from a measured solo
  profiling iteration (:mod:`fluidsalus.gpu.memory`, ``DeviceHost._profile``), and lane capacities are budgets
  that nothing enforces inside the process.
- ``"arena"``: the lane allocator (``csrc/``) is PyTorch's CUDA allocator. Every lane is an arena carved from a
  device pool, every allocation is charged to the trial whose thread (or whose lane's stream) made it, ``P``
  and ``T`` are read exactly from the allocator at every iteration boundary, and a trial that passes its cap
  gets the out-of-memory error while its neighbours go on.
- ``"auto"``: ``"arena"`` where it can be installed (a CUDA device whose process has not initialised CUDA yet,
  with the compiled allocator present), else ``"caching"``.

This module holds the parts of arena mode that do not depend on CUDA, so they run in the tests over host
memory: :func:`resolve_memory_mode` (which mode a device gets, and why), the backends (where the arenas live:
:class:`CudaArenaBackend` on a GPU, :class:`HostArenaBackend` over host memory), and :class:`LaneArenas`, which
keeps the allocator in step with the lane manager: lanes to arenas, trials to tags, caps, and the boundary
reads of ``P`` and ``T``. It imports neither Ray nor torch (torch only inside :meth:`CudaArenaBackend.install`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.allocator import (
    ALIGNMENT,
    LaneAllocator,
    LaneAllocatorError,
    Status,
    install_cuda_allocator,
    last_error,
    load_library,
    set_thread_tag,
)
from fluidsalus.gpu.lanes import LaneView

__all__ = [
    "DEFAULT_MEMORY_MODE",
    "MEMORY_MODES",
    "MODE_ARENA",
    "MODE_AUTO",
    "MODE_CACHING",
    "ArenaBackend",
    "ArenaOutOfMemoryError",
    "BoundaryMemory",
    "CudaArenaBackend",
    "HostArenaBackend",
    "LaneArenas",
    "MemoryModeChoice",
    "MemoryModeError",
    "host_arenas",
    "pool_bytes",
    "resolve_memory_mode",
]

MODE_CACHING = "caching"
MODE_ARENA = "arena"
MODE_AUTO = "auto"
#: The memory modes a run may ask for (``fluidsalus.run(memory_mode=...)``).
MEMORY_MODES = (MODE_CACHING, MODE_ARENA, MODE_AUTO)
#: The default mode. PyTorch's caching allocator works with everything a trainable may use: CUDA graphs
#: (``torch.compile(mode="reduce-overhead")``), ``torch.cuda.memory_allocated`` and the other memory statistics,
#: CUDA IPC. The pluggable allocator of arena mode supports none of these, and a Ray Tune script switched to
#: fluidsalus by changing its imports must keep running. Arena mode is also new: its CUDA path has run on one kind
#: of GPU (docs/allocator.md, "Tests"). Runs that want exact P/T and hard caps ask for ``"arena"`` or ``"auto"``.
DEFAULT_MEMORY_MODE = MODE_CACHING

#: Event kinds :class:`LaneArenas` reports (the device host sends them to the driver as lane events).
EV_ARENA_OPEN = "arena_open"  # {lane, arena, capacity, reserved}
EV_ARENA_RESIZE = "arena_resize"  # {lane, arena, capacity, reserved}
EV_ARENA_CLOSE = "arena_close"  # {lane, arena, kept}: kept = live bytes left behind (the arena retires)
EV_ARENA_SHORT = "arena_short"  # {lane, arena, wanted, capacity}: the pool could not supply the whole lane
EV_ARENA_LEFTOVER = "arena_leftover"  # {trial_id, tag, bytes}: live bytes of a trial run that ended


class MemoryModeError(ConfigError):
    """A device cannot run the memory mode the run asked for (arena mode where it cannot be installed)."""


class ArenaOutOfMemoryError(MemoryError):
    """An allocation through :meth:`HostArenaBackend.allocate` passed a cap: the trial's out-of-memory error.

    It is a ``MemoryError``, which the device host treats as a device out-of-memory error (re-admission with a
    larger estimate), as it treats ``torch.OutOfMemoryError`` raised by the CUDA entry points.

    Attributes:
        status: Why the allocator refused (``Status.TAG_CAP``, ``Status.LANE_FULL``, ``Status.NO_LANE``).
    """

    def __init__(self, message: str, status: Status) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class MemoryModeChoice:
    """The memory mode a device runs in.

    Attributes:
        mode: ``"caching"`` or ``"arena"`` (never ``"auto"``).
        reason: Why, in words (stored with the device's start event).
    """

    mode: str
    reason: str


def resolve_memory_mode(requested: str, device_kind: str, *, cuda_usable: bool, cuda_initialized: bool,
                        library_error: str | None) -> MemoryModeChoice:
    """Decide a device's memory mode from what the run asked for and what its process can do.

    Args:
        requested: ``"caching"``, ``"arena"`` or ``"auto"``.
        device_kind: ``"cuda"`` or ``"cpu"`` (a virtual CPU device).
        cuda_usable: Whether torch sees a CUDA device in this process.
        cuda_initialized: Whether torch has already initialised CUDA in this process (then PyTorch's allocator
            can no longer be replaced: ``torch.cuda.is_initialized()``).
        library_error: Why the compiled lane allocator cannot be loaded, or None when it can.

    Returns:
        The mode and the reason for it.

    Raises:
        MemoryModeError: ``"arena"`` on a CUDA device that cannot install the allocator, or an unknown mode.
    """
    if requested not in MEMORY_MODES:
        raise MemoryModeError(f"memory_mode: must be one of {', '.join(MEMORY_MODES)}, got {requested!r}")
    if requested == MODE_CACHING:
        return MemoryModeChoice(MODE_CACHING, "the run asked for PyTorch's caching allocator")
    if device_kind != "cuda":
        return MemoryModeChoice(MODE_CACHING, "a virtual CPU device measures host memory by profiling: the lane "
                                              "allocator replaces CUDA allocations only")
    problem = None
    if not cuda_usable:
        problem = "torch sees no CUDA device in the device actor's process"
    elif library_error is not None:
        problem = library_error
    elif cuda_initialized:
        problem = ("CUDA was already initialised in the device actor's process (torch.cuda.is_initialized()) "
                   "before the lane allocator could be installed, and PyTorch cannot swap an allocator it has "
                   "initialised. Something touched CUDA before the actor started its trials: a module imported at "
                   "start-up, or the trainable's own module at unpickling")
    if problem is None:
        return MemoryModeChoice(MODE_ARENA, f"the run asked for {requested!r} and the lane allocator is installed")
    if requested == MODE_ARENA:
        raise MemoryModeError(f"memory_mode='arena' cannot be used on this CUDA device: {problem}. Use "
                              "memory_mode='auto' to fall back to PyTorch's caching allocator, or 'caching'.")
    return MemoryModeChoice(MODE_CACHING, f"memory_mode='auto' fell back to the caching allocator: {problem}")


def pool_bytes(capacity_bytes: int, max_lanes: int) -> int:
    """Bytes of the device pool that a device's lanes are carved from.

    A lane's capacity (any byte count from the lane manager) is rounded up to :data:`ALIGNMENT` in its arena, so
    the pool holds the device capacity rounded up plus one :data:`ALIGNMENT` per lane: every lane the manager
    admits then fits.

    Args:
        capacity_bytes: Memory the device's lanes may reserve.
        max_lanes: Lanes that may exist at once.

    Returns:
        The pool size in bytes, a multiple of :data:`ALIGNMENT`.
    """
    return _round_up(capacity_bytes) + max(1, max_lanes) * ALIGNMENT


def _round_up(n: int) -> int:
    return -(-max(0, n) // ALIGNMENT) * ALIGNMENT


# ------------------------------------------------------------------------------------------------ backends


class ArenaBackend:
    """Where a device's lane arenas live: an allocator with a pool on one device.

    Args:
        allocator: The lane allocator, with a pool for ``device_index`` (:meth:`LaneAllocator.set_pool`).
        device_index: Device the lanes are created on.
    """

    #: ``"cuda"`` or ``"host"``.
    kind: str = ""

    def __init__(self, allocator: LaneAllocator, device_index: int = 0) -> None:
        self.allocator = allocator
        self.device_index = device_index

    def stream_handle(self, stream: Any) -> int | None:
        """The handle of a lane's stream for :meth:`LaneAllocator.bind_stream`, or None when lanes have none.

        Args:
            stream: The lane's stream object (a ``torch.cuda.Stream`` on a GPU), or None.

        Returns:
            The handle to bind, or None.
        """
        return None

    def close(self) -> None:
        """Give the backend's memory back (a no-op where the allocator is process-wide)."""


class HostArenaBackend(ArenaBackend):
    """Arenas over host memory: the same allocator, pool and accounting as on CUDA, for tests and CPU runs.

    Code in a trial's thread allocates through :meth:`allocate` and :meth:`free`; each allocation is charged
    to the thread's tag, which the lane runtime sets, as a CUDA tensor allocation is.

    Args:
        capacity_bytes: Memory the device's lanes may reserve.
        max_lanes: Lanes that may exist at once.
    """

    kind = "host"

    def __init__(self, capacity_bytes: int, max_lanes: int) -> None:
        allocator = LaneAllocator("host")
        try:
            allocator.set_pool(pool_bytes(capacity_bytes, max_lanes))
        except BaseException:
            allocator.close()
            raise
        super().__init__(allocator, 0)

    def allocate(self, nbytes: int) -> int:
        """Allocate for the calling thread's trial.

        Args:
            nbytes: Bytes (rounded up to :data:`ALIGNMENT`).

        Returns:
            The address of real, writable host memory.

        Raises:
            ArenaOutOfMemoryError: The allocation would pass the trial's cap or its lane's, or the thread has no
                lane: the trial's out-of-memory error.
        """
        address = self.allocator.malloc(nbytes)
        if address:
            return address
        status = last_error()
        raise ArenaOutOfMemoryError(
            f"lane arena: the trial could not get {nbytes} bytes: {status.name.lower().replace('_', ' ')}", status)

    def free(self, address: int) -> None:
        """Free an allocation of :meth:`allocate` (from any thread: it is charged back to its trial)."""
        self.allocator.free(address)

    def close(self) -> None:
        """Give the pool's host memory back; addresses still live become invalid."""
        self.allocator.close()


class CudaArenaBackend(ArenaBackend):
    """Arenas in GPU memory: the lane allocator installed as PyTorch's CUDA allocator, with a device pool.

    Build it with :meth:`install`.
    """

    kind = "cuda"

    @classmethod
    def install(cls, capacity_bytes: int, max_lanes: int, device_index: int = 0) -> CudaArenaBackend:
        """Make the lane allocator PyTorch's CUDA allocator in this process and reserve the device pool.

        It must run before anything initialises CUDA in the process (:func:`resolve_memory_mode` checks that).
        The pool is one ``cudaMalloc`` of :func:`pool_bytes`: lanes are carved from it without further
        ``cudaMalloc`` calls.

        Args:
            capacity_bytes: Memory the device's lanes may reserve (free memory less the CUDA context reserve).
            max_lanes: Lanes that may exist at once.
            device_index: The CUDA device (0: the one Ray assigned, as the actor sees it).

        Returns:
            The backend.

        Raises:
            LaneAllocatorError: If the allocator cannot be installed or the pool cannot be reserved.
        """
        allocator = install_cuda_allocator()
        allocator.set_pool(pool_bytes(capacity_bytes, max_lanes), device=device_index)
        return cls(allocator, device_index)

    def stream_handle(self, stream: Any) -> int | None:
        """The ``cudaStream_t`` of a lane's ``torch.cuda.Stream``."""
        return None if stream is None else int(stream.cuda_stream)


def library_error() -> str | None:
    """Why the compiled lane allocator cannot be used, or None when it can."""
    try:
        load_library()
    except LaneAllocatorError as e:
        return str(e)
    return None


# --------------------------------------------------------------------------------------------------- glue


@dataclass(frozen=True)
class BoundaryMemory:
    """A trial's memory at an iteration boundary, read from the allocator.

    Attributes:
        p: Persistent bytes: the trial's live bytes now.
        t: Ephemeral bytes: the peak of its live bytes since the previous boundary, less ``p``.
        peak: That peak.
    """

    p: int
    t: int
    peak: int


@dataclass
class _Trial:
    """The allocator's view of one run (thread) of a trial."""

    tag: int
    lane: int | None = None  # the lane manager's lane it is placed in
    arena: int | None = None  # the allocator lane its tag is assigned to
    cap: int | None = None  # the tag's cap, as last set
    thread: int | None = None  # ident of the thread that runs it, once it has entered
    exited: bool = False  # the thread ended: the next run of the trial gets a new tag


@dataclass
class _Arena:
    """A lane's arena."""

    arena: int | None  # allocator lane id; None while the pool has nothing for it
    wanted: int  # the arena's capacity: `budget` plus what departed runs left in it
    budget: int = 0  # capacity the lane manager gave the lane, rounded up to ALIGNMENT
    short: bool = False  # the pool could not supply all of `wanted` (reported once per shortage)
    stream: int | None = None  # the stream handle bound to it


class LaneArenas:
    """Keeps a lane allocator in step with a device's lane manager, and reads exact P and T from it.

    - **Lanes to arenas.** :meth:`sync` takes the lane manager's lanes after every change: a new lane gets an
      arena of its capacity (rounded up to :data:`ALIGNMENT`), a resized lane a resized arena, a closed lane's
      arena is retired (dissolved at once when empty, else once the live blocks that a moved trial left there
      are freed). The arena's capacity is the lane's hard cap, plus the live bytes ended runs left in it (a
      cached cuBLAS workspace outlives the trial that created it), which no member's cap includes.
    - **Trials to tags.** Each run of a trial (one thread) allocates under its own tag, so a re-admitted trial
      starts from zero and what its previous run leaked stays apart. The tag is assigned to the arena of the
      trial's lane, with the cap ``C_l - (sum of the other members' P)``: a trial may use its own persistent
      memory and the lane's ephemeral allowance, never its neighbours' persistent memory, so the trial that
      overflows is the one that gets the out-of-memory error.
    - **Threads.** :meth:`enter` (whenever a trial's thread starts or resumes a turn) sets the thread's tag and
      makes the trial the lane's running tag, for allocations on the lane's stream from threads without a tag
      (autograd's); :meth:`exit` (when the thread ends) clears the thread's tag.
    - **P and T.** :meth:`boundary` reads the tag's live bytes (``P``) and its peak since the previous boundary
      (``T = peak - P``), and resets the peak.

    Every method is thread-safe.

    Args:
        backend: Where the arenas live.
    """

    def __init__(self, backend: ArenaBackend) -> None:
        self.backend = backend
        self._arenas: dict[int, _Arena] = {}  # lane manager's lane id -> its arena
        self._views: dict[int, LaneView] = {}  # the lane manager's lanes at the last sync
        self._trials: dict[str, _Trial] = {}
        self._orphans: dict[int, int | None] = {}  # tags of ended runs that still hold live bytes -> their arena
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._next_tag = 0
        self._lock = threading.Lock()

    @property
    def allocator(self) -> LaneAllocator:
        """The backend's allocator."""
        return self.backend.allocator

    # -- lanes ------------------------------------------------------------------------------------------

    def sync(self, lanes: Sequence[LaneView]) -> list[tuple[str, dict[str, Any]]]:
        """Bring arenas, tag assignments and caps in line with the lane manager's lanes.

        Args:
            lanes: ``LaneManager.lanes()`` after a change.

        Returns:
            The events of what changed, oldest first, as ``(kind, data)`` (kinds ``EV_ARENA_*``), including those
            :meth:`exit` recorded since the previous call.
        """
        with self._lock:
            self._views = {view.lane_id: view for view in lanes}
            for lane_id in [lane for lane in self._arenas if lane not in self._views]:
                self._close_locked(lane_id)
            for view in lanes:
                self._fit_locked(view)
            members = {tid: view.lane_id for view in lanes for tid in view.members}
            for trial_id in list(self._trials):
                self._place_trial_locked(trial_id, members.get(trial_id))
            for trial_id, lane_id in members.items():
                if trial_id not in self._trials:
                    self._trials[trial_id] = self._new_trial_locked()
                    self._place_trial_locked(trial_id, lane_id)
            self._forget_orphans_locked()
            if self._orphans:  # runs that left in this sync may have left memory behind: their arenas grow
                for view in lanes:
                    self._fit_locked(view)
            for view in lanes:
                self._cap_locked(view)
            self.allocator.reap()
            events, self._events = self._events, []
            return events

    def arena_of(self, lane_id: int) -> int | None:
        """The allocator lane of a lane manager's lane, or None (no such lane, or no memory for it yet)."""
        with self._lock:
            arena = self._arenas.get(lane_id)
            return None if arena is None else arena.arena

    def tag_of(self, trial_id: str) -> int | None:
        """The tag the trial's current run allocates under, or None."""
        with self._lock:
            trial = self._trials.get(trial_id)
            return None if trial is None else trial.tag

    # -- trial threads ----------------------------------------------------------------------------------

    def enter(self, trial_id: str, lane_id: int, stream: Any = None) -> int:
        """The calling thread starts or resumes a turn of ``trial_id`` in lane ``lane_id``: charge to it.

        Args:
            trial_id: The trial.
            lane_id: Its lane (the lane manager's id).
            stream: The lane's stream object (a ``torch.cuda.Stream``), bound to the lane's arena so that
                allocations on it from threads without a tag are charged to the lane's running trial.

        Returns:
            The trial's tag.
        """
        me = threading.get_ident()
        with self._lock:
            trial = self._trials.get(trial_id)
            if trial is None or trial.exited:  # normally sync() has already given the new run its tag
                if trial is not None:
                    self._retire_tag_locked(trial)
                trial = self._trials[trial_id] = self._new_trial_locked()
            trial.thread = me
            if trial.lane != lane_id or trial.arena is None:
                self._place_trial_locked(trial_id, lane_id)
                if lane_id in self._views:
                    self._cap_locked(self._views[lane_id])
            arena = self._arenas.get(lane_id)
            tag = trial.tag
            if arena is not None and arena.arena is not None:
                handle = self.backend.stream_handle(stream)
                if handle is not None and handle != arena.stream:
                    self.allocator.bind_stream(handle, arena.arena)
                    arena.stream = handle
                self.allocator.set_lane_tag(arena.arena, tag)
        set_thread_tag(tag)  # thread-local: this thread's allocations are the trial's from now on
        return tag

    def boundary(self, trial_id: str) -> BoundaryMemory:
        """Read the trial's P and T at an iteration boundary, and start the next iteration's peak from here.

        Args:
            trial_id: A trial whose thread has entered.

        Returns:
            ``P`` = the tag's live bytes, ``T`` = its peak since the previous boundary less ``P``.
        """
        with self._lock:
            tag = self._trials[trial_id].tag
        info = self.allocator.tag_info(tag)
        self.allocator.reset_peak(tag)
        return BoundaryMemory(p=info.live, t=max(0, info.peak - info.live), peak=info.peak)

    def exit(self, trial_id: str) -> int:
        """The calling thread, which ran ``trial_id``, ends: clear its tag.

        A run that ends has normally freed everything by now (its objects died with its frames). A garbage
        collection runs only when the tag still holds live bytes (reference cycles); what is left after it is
        reported as an :data:`EV_ARENA_LEFTOVER` event and stays charged to the old tag.

        Args:
            trial_id: The trial.

        Returns:
            The live bytes the run left behind.
        """
        set_thread_tag(None)
        with self._lock:
            trial = self._trials.get(trial_id)
            if trial is None or trial.thread != threading.get_ident():
                return 0
            trial.exited, trial.thread = True, None
            tag = trial.tag
        live = self._live(tag)
        if live:
            gc.collect()
            live = self._live(tag)
        if live:
            with self._lock:
                self._events.append((EV_ARENA_LEFTOVER, {"trial_id": trial_id, "tag": tag, "bytes": live}))
        return live

    def close(self) -> None:
        """Retire every arena and forget every tag that holds nothing (at the device's shutdown)."""
        with self._lock:
            for lane_id in list(self._arenas):
                self._close_locked(lane_id)
            for trial in self._trials.values():
                self._retire_tag_locked(trial)
            self._trials.clear()
            self.allocator.reap()
            self._forget_orphans_locked()

    def _live(self, tag: int) -> int:
        """Live bytes of a tag (0 once a concurrent sync() has forgotten it: it held nothing)."""
        try:
            return self.allocator.tag_info(tag).live
        except LaneAllocatorError as e:
            if e.status != Status.NO_TAG:
                raise
            return 0

    # -- internals (the caller holds self._lock) ---------------------------------------------------------

    def _new_trial_locked(self) -> _Trial:
        tag = self._next_tag
        self._next_tag += 1
        return _Trial(tag)

    def _fit_locked(self, view: LaneView) -> None:
        """Open or resize the arena of a lane manager's lane: its capacity, plus the live bytes that ended runs
        left in it (PyTorch's cached cuBLAS workspaces, reference cycles), which its members cannot use."""
        budget = _round_up(view.capacity)
        arena = self._arenas.get(view.lane_id)
        if arena is None or arena.arena is None:
            first = arena is None
            arena = self._arenas[view.lane_id] = _Arena(self._create_locked(view.lane_id, budget, report=first),
                                                        budget, budget)
            if arena.arena is not None:
                arena.short = self.allocator.lane_stats(arena.arena).capacity < budget
                self._events.append((EV_ARENA_OPEN, self._arena_data(view.lane_id, arena)))
            return
        kept = sum(self._live(tag) for tag, held_in in self._orphans.items() if held_in == arena.arena)
        wanted = budget + _round_up(kept)
        arena.budget, arena.wanted = budget, wanted
        if self.allocator.lane_stats(arena.arena).capacity == wanted:
            return
        try:
            self.allocator.resize_lane(arena.arena, wanted)
        except LaneAllocatorError as e:
            if e.status != Status.BACKING:
                raise
            if not arena.short:
                arena.short = True
                self._events.append((EV_ARENA_SHORT, {**self._arena_data(view.lane_id, arena), "wanted": wanted}))
            return
        arena.short = False
        self._events.append((EV_ARENA_RESIZE, self._arena_data(view.lane_id, arena)))

    def _create_locked(self, lane_id: int, wanted: int, report: bool) -> int | None:
        """A new arena of ``wanted`` bytes, else of what the pool has left, else None."""
        device = self.backend.device_index
        try:
            return self.allocator.create_lane(wanted, device)
        except LaneAllocatorError as e:
            if e.status != Status.BACKING:
                raise
        # The pool is short: memory that moved trials left in retired arenas is still held. Open what is there;
        # the lane's trial may then run out of memory early and be re-admitted, and later syncs grow the arena.
        free = self.allocator.pool_stats(device).free
        got = min(wanted, free - free % ALIGNMENT)
        arena = None
        if got >= ALIGNMENT:
            try:
                arena = self.allocator.create_lane(got, device)
            except LaneAllocatorError as e:
                if e.status != Status.BACKING:
                    raise
        if report:
            self._events.append((EV_ARENA_SHORT, {"lane": lane_id, "arena": arena, "wanted": wanted,
                                                  "capacity": got if arena is not None else 0}))
        return arena

    def _arena_data(self, lane_id: int, arena: _Arena) -> dict[str, Any]:
        stats = self.allocator.lane_stats(arena.arena)  # type: ignore[arg-type]
        return {"lane": lane_id, "arena": arena.arena, "capacity": stats.capacity, "reserved": stats.reserved}

    def _close_locked(self, lane_id: int) -> None:
        arena = self._arenas.pop(lane_id)
        if arena.arena is None:
            return
        kept = self.allocator.lane_stats(arena.arena).used
        self.allocator.retire_lane(arena.arena)  # dissolved now if empty, else once its blocks are freed
        self._events.append((EV_ARENA_CLOSE, {"lane": lane_id, "arena": arena.arena, "kept": kept}))

    def _place_trial_locked(self, trial_id: str, lane_id: int | None) -> None:
        """Assign the trial's tag to its lane's arena (``lane_id`` None: it waits for memory, or has left)."""
        trial = self._trials[trial_id]
        if lane_id is None and (trial.exited or trial.thread is None):
            # The run ended and the trial left, or it was placed and left before its thread ran: drop it.
            self._retire_tag_locked(trial)
            del self._trials[trial_id]
            return
        if trial.exited:  # a run ended and the trial stays placed (re-admitted): its next run gets a new tag
            self._retire_tag_locked(trial)
            trial = self._trials[trial_id] = self._new_trial_locked()
        arena = None if lane_id is None else self._arenas.get(lane_id)
        target = None if arena is None else arena.arena
        if trial.arena != target or trial.lane != lane_id:
            self.allocator.assign(trial.tag, target)  # a trial waiting for memory keeps its blocks, allocates nothing
            trial.arena = target
        trial.lane = lane_id

    def _cap_locked(self, view: LaneView) -> None:
        """Cap each member at the lane's capacity less the other members' persistent memory."""
        arena = self._arenas.get(view.lane_id)
        if arena is None or arena.arena is None:
            return
        persistent = sum(p for p, _ in view.members.values())
        for trial_id, (p, _) in view.members.items():
            trial = self._trials.get(trial_id)
            cap = max(0, arena.budget - (persistent - p))
            if trial is not None and trial.cap != cap:
                self.allocator.set_tag_cap(trial.tag, cap)
                trial.cap = cap

    def _retire_tag_locked(self, trial: _Trial) -> None:
        """A run's tag is done: forget it, or keep it as an orphan until its live bytes are freed."""
        try:
            self.allocator.assign(trial.tag, None)
        except LaneAllocatorError:  # pragma: no cover - unassigning an existing tag cannot fail
            pass
        self._orphans[trial.tag] = trial.arena
        self._forget_orphans_locked()

    def _forget_orphans_locked(self) -> None:
        for tag in list(self._orphans):
            try:
                self.allocator.forget_tag(tag)
            except LaneAllocatorError as e:
                if e.status == Status.LANE_BUSY:  # still holds live bytes
                    continue
                if e.status != Status.NO_TAG:
                    raise
            del self._orphans[tag]


def host_arenas(memory_mode: str, backend: ArenaBackend | None) -> LaneArenas | None:
    """The device host's arena glue for its settings.

    Args:
        memory_mode: ``HostSettings.memory_mode``.
        backend: The device's arena backend (the actor installs one on a GPU in arena mode; tests pass a
            :class:`HostArenaBackend`), or None.

    Returns:
        The glue in arena mode (``"arena"``, or ``"auto"`` with a backend), None in caching mode.

    Raises:
        MemoryModeError: An unknown mode, ``"arena"`` without a backend, or a backend in ``"caching"`` mode.
    """
    if memory_mode not in MEMORY_MODES:
        raise MemoryModeError(f"memory_mode: must be one of {', '.join(MEMORY_MODES)}, got {memory_mode!r}")
    if memory_mode == MODE_ARENA and backend is None:
        raise MemoryModeError("memory_mode='arena' needs the device's arena backend (the device actor installs "
                              "the lane allocator on a GPU; a host-memory backend serves tests)")
    if memory_mode == MODE_CACHING and backend is not None:
        raise MemoryModeError("memory_mode='caching' was given an arena backend: ask for 'arena' or 'auto'")
    return None if backend is None else LaneArenas(backend)
