"""Python binding of the C++ lane allocator (``csrc/``), through ctypes.

The allocator splits memory into **lanes**: one best-fit arena per lane, with coalescing of free
neighbours, whose capacity is a hard cap. Every allocation carries a **tag** (a trial id, an integer
``>= 0``). Per tag it keeps the live bytes, their peak since the last :meth:`LaneAllocator.reset_peak`, and
an optional hard cap. An allocation past a cap fails for its tag only; other tags keep allocating. The engine
measures a trial's persistent memory ``P`` as its live bytes at an iteration boundary, resets the peak there,
and reads its ephemeral memory ``T = peak - P`` at the next boundary.

The same arena and accounting serve three kinds of backing memory:

- ``"host"``: real host memory (``aligned_alloc``). Used on virtual CPU devices and in the tests.
- ``"virtual"``: address ranges with no memory behind them (the addresses must not be dereferenced), for
  simulations and lanes larger than the machine's memory.
- ``"cuda"``: device memory from ``cudaMalloc``. Only the process-wide allocator (:meth:`LaneAllocator.device`)
  uses it: :func:`install_cuda_allocator` makes it PyTorch's CUDA allocator, so every tensor allocation is
  charged to the calling thread's tag (:func:`set_thread_tag`) in the tag's lane.

A lane can be resized while it holds live allocations (it grows in place or by another segment, and shrinks as
far as its live blocks allow), and a device's lanes can be carved from one pool of its memory
(:meth:`LaneAllocator.set_pool`), so that opening, resizing and dissolving lanes costs no ``cudaMalloc``. The
arena memory mode of the lane runtime (:mod:`fluidsalus.gpu.arena`) uses both.

The compiled library is the extension module ``fluidsalus.gpu._lane_allocator``, built by ``setup.py``. Calls
into it release the GIL, so Python threads allocate concurrently. See ``docs/allocator.md``.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import re
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

from fluidsalus.errors import FluidsalusError

__all__ = [
    "ALIGNMENT",
    "NO_TAG",
    "REFUSAL_PATTERN",
    "Block",
    "LaneAllocator",
    "LaneAllocatorError",
    "LaneAllocatorUnavailable",
    "LaneStats",
    "PoolStats",
    "Status",
    "TagInfo",
    "get_thread_tag",
    "is_refusal",
    "install_cuda_allocator",
    "last_error",
    "last_error_detail",
    "library_path",
    "load_library",
    "refusals_raise_torch_oom",
    "set_thread_tag",
    "thread_tag",
]

#: Every block starts at a multiple of this many bytes and its size is rounded up to one (as in PyTorch's CUDA
#: caching allocator). Byte counts in the statistics are rounded sizes.
ALIGNMENT = 512

#: Tag of allocations made by a thread without a tag (:func:`set_thread_tag`).
NO_TAG = -1

#: Module name of the compiled library (a Python extension module that is loaded with ctypes).
EXTENSION_MODULE = "fluidsalus.gpu._lane_allocator"

#: Environment variable that points at another build of the library (a debug or sanitizer build).
LIBRARY_ENV_VAR = "FLUIDSALUS_LANE_ALLOCATOR_LIB"

#: Names of PyTorch's pluggable-allocator entry points in the library.
CUDA_MALLOC_SYMBOL = "fs_cuda_malloc"
CUDA_FREE_SYMBOL = "fs_cuda_free"

#: How every refusal of an allocation begins (``Allocator::describe_failure`` in ``csrc/allocator.cpp``).
REFUSAL_PATTERN = re.compile(r"^fluidsalus lane allocator: (tag -?\d+|untagged allocation) could not get ")

_UNLIMITED = -1  # FS_UNLIMITED
_NO_LANE = -1  # FS_NO_LANE
_WHY_LEN = 512

Backing = Literal["host", "virtual", "cuda"]
_BACKING_CODES: dict[str, int] = {"host": 0, "virtual": 1, "cuda": 2}
_BACKING_NAMES = {code: name for name, code in _BACKING_CODES.items()}


class Status(IntEnum):
    """Status codes of the C library (``FS_OK`` and ``FS_ERR_*`` in ``csrc/lane_allocator.h``)."""

    OK = 0
    INVALID = -1
    NO_LANE = -2
    LANE_BUSY = -3
    LANE_FULL = -4
    TAG_CAP = -5
    NO_TAG = -6
    NOT_OURS = -7
    BACKING = -8
    WRONG_DEVICE = -9
    INTERNAL = -10


def is_refusal(error: BaseException) -> bool:
    """Whether ``error`` is the lane allocator refusing an allocation (a lane or tag cap, or a full device).

    A refusal is raised as ``torch.OutOfMemoryError`` where the library could bind PyTorch's
    ``c10::OutOfMemoryError``, else as the ``RuntimeError`` PyTorch makes of any other C++ exception, with the
    same message; this recognises both.

    Args:
        error: An exception raised by a tensor allocation.

    Returns:
        True if its message is one of the allocator's refusals.
    """
    return isinstance(error, RuntimeError) and REFUSAL_PATTERN.match(str(error)) is not None


class LaneAllocatorError(FluidsalusError, RuntimeError):
    """A lane-allocator call failed. ``status`` says why."""

    def __init__(self, message: str, status: Status = Status.INTERNAL):
        super().__init__(message)
        self.status = status


class LaneAllocatorUnavailable(LaneAllocatorError):
    """The compiled lane allocator is missing (fluidsalus was installed without a C++ compiler)."""

    def __init__(self, message: str):
        super().__init__(message, Status.BACKING)


@dataclass(frozen=True)
class LaneStats:
    """Statistics of one lane.

    Attributes:
        lane: Lane id.
        device: Device index of the lane's memory (meaningful for CUDA lanes).
        capacity: Bytes of the arena: the lane's hard cap.
        used: Bytes in live blocks.
        free: ``capacity - used`` (0 when a shrink put the cap below the live bytes).
        largest_free: The largest free block, within the cap. A larger allocation within the cap also succeeds
            while the pool (or backing) has the memory: the lane then reserves more than its capacity.
        allocated_blocks: Live blocks.
        free_blocks: Free blocks (1 when the lane is one empty segment: every free neighbour is coalesced).
        tags: Tags assigned to the lane.
        active_tag: Tag the lane runs now (:meth:`LaneAllocator.set_lane_tag`), None if none.
        base: Address of the first byte of the lane's first segment.
        reserved: Bytes of memory the lane holds: at least ``capacity``; more after a shrink that live blocks
            kept from giving everything back (:meth:`LaneAllocator.resize_lane`), and after an allocation within
            the cap that no free block could hold (:meth:`LaneAllocator.malloc`). :meth:`LaneAllocator.reap`
            and resizes give the excess back as blocks are freed.
        segments: Pieces of memory the lane is made of (1 unless it grew while blocks were live).
        retired: Dissolved while blocks were live (:meth:`LaneAllocator.retire_lane`): its memory goes back as
            they are freed.
    """

    lane: int
    device: int
    capacity: int
    used: int
    free: int
    largest_free: int
    allocated_blocks: int
    free_blocks: int
    tags: int
    active_tag: int | None
    base: int
    reserved: int
    segments: int
    retired: bool


@dataclass(frozen=True)
class PoolStats:
    """Statistics of a device's pool (:meth:`LaneAllocator.set_pool`).

    Attributes:
        device: Device index.
        capacity: Bytes of the pool.
        used: Bytes carved out for lanes.
        free: ``capacity - used``.
        largest_free: Bytes of the largest free piece.
        free_blocks: Free pieces.
        segments: Lane segments carved from it.
        base: Address of its first byte.
    """

    device: int
    capacity: int
    used: int
    free: int
    largest_free: int
    free_blocks: int
    segments: int
    base: int


@dataclass(frozen=True)
class TagInfo:
    """Accounting of one tag.

    Attributes:
        tag: The tag (``NO_TAG`` for untagged allocations).
        lane: Lane the tag allocates from, None if unassigned.
        cap: Hard cap of the tag's live bytes, None if none.
        live: Bytes in the tag's live blocks.
        peak: Highest ``live`` since the tag was created or its peak was last reset.
        allocations: The tag's live blocks.
        failures: Allocations refused so far (tag cap, lane full, no lane).
    """

    tag: int
    lane: int | None
    cap: int | None
    live: int
    peak: int
    allocations: int
    failures: int


@dataclass(frozen=True)
class Block:
    """One block of a lane's arena, in address order.

    Attributes:
        address: First byte of the block.
        offset: ``address`` minus the base of its segment.
        size: Bytes (a multiple of :data:`ALIGNMENT`).
        tag: Owner of a live block; None for a free block.
        segment: Index of its segment in the lane (0 for a lane of one segment).
    """

    address: int
    offset: int
    size: int
    tag: int | None
    segment: int = 0

    @property
    def free(self) -> bool:
        """Whether the block is free."""
        return self.tag is None


class _LaneStatsC(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "lane",
            "device",
            "capacity",
            "used",
            "largest_free",
            "allocated_blocks",
            "free_blocks",
            "tags",
            "active_tag",
            "base",
            "reserved",
            "segments",
            "retired",
        )
    ]


class _PoolStatsC(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int64)
        for name in ("device", "capacity", "used", "largest_free", "free_blocks", "segments", "base")
    ]


class _TagStatsC(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in ("tag", "lane", "cap", "live", "peak", "allocations", "failures")]


class _BlockC(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in ("offset", "size", "tag", "is_free", "segment", "address")]


_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p
_PROTOTYPES: dict[str, tuple[type | None, list[type]]] = {
    "fs_alignment": (_i64, []),
    "fs_status_string": (ctypes.c_char_p, [_i64]),
    "fs_last_error": (_i64, []),
    "fs_last_error_detail": (ctypes.c_char_p, []),
    "fs_allocator_create": (_ptr, [_i64]),
    "fs_allocator_destroy": (None, [_ptr]),
    "fs_global_allocator": (_ptr, []),
    "fs_global_set_backing": (_i64, [_i64]),
    "fs_allocator_backing": (_i64, [_ptr]),
    "fs_pool_set": (_i64, [_ptr, _i64, _i64]),
    "fs_pool_stats_get": (_i64, [_ptr, _i64, ctypes.POINTER(_PoolStatsC)]),
    "fs_lane_create": (_i64, [_ptr, _i64, _i64]),
    "fs_lane_dissolve": (_i64, [_ptr, _i64]),
    "fs_lane_retire": (_i64, [_ptr, _i64]),
    "fs_reap": (_i64, [_ptr]),
    "fs_lane_resize": (_i64, [_ptr, _i64, _i64]),
    "fs_lane_stats_get": (_i64, [_ptr, _i64, ctypes.POINTER(_LaneStatsC)]),
    "fs_lane_blocks": (_i64, [_ptr, _i64, ctypes.POINTER(_BlockC), _i64]),
    "fs_lane_check": (_i64, [_ptr, _i64, ctypes.c_char_p, _i64]),
    "fs_lane_list": (_i64, [_ptr, ctypes.POINTER(_i64), _i64]),
    "fs_assign_tag": (_i64, [_ptr, _i64, _i64]),
    "fs_set_tag_cap": (_i64, [_ptr, _i64, _i64]),
    "fs_tag_stats_get": (_i64, [_ptr, _i64, ctypes.POINTER(_TagStatsC)]),
    "fs_reset_peak": (_i64, [_ptr, _i64]),
    "fs_forget_tag": (_i64, [_ptr, _i64]),
    "fs_bind_stream": (_i64, [_ptr, _ptr, _i64]),
    "fs_set_lane_tag": (_i64, [_ptr, _i64, _i64]),
    "fs_set_thread_tag": (None, [_i64]),
    "fs_get_thread_tag": (_i64, []),
    "fs_malloc": (_ptr, [_ptr, _i64, _i64]),
    "fs_malloc_current": (_ptr, [_ptr, _i64, _i64, _ptr]),
    "fs_free": (_i64, [_ptr, _ptr]),
    "fs_allocator_live_bytes": (_i64, [_ptr]),
    "fs_cuda_bind_torch": (_i64, [ctypes.c_char_p]),
    "fs_cuda_runtime_status": (_i64, [ctypes.c_char_p, _i64]),
}

_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def library_path() -> str:
    """Path of the compiled lane allocator.

    Returns:
        The file of the extension module ``fluidsalus.gpu._lane_allocator`` (or ``$FLUIDSALUS_LANE_ALLOCATOR_LIB``).

    Raises:
        LaneAllocatorUnavailable: If the library was not built.
    """
    override = os.environ.get(LIBRARY_ENV_VAR)
    if override:
        if not os.path.isfile(override):
            raise LaneAllocatorUnavailable(f"{LIBRARY_ENV_VAR}={override!r} is not a file")
        return override
    spec = importlib.util.find_spec(EXTENSION_MODULE)
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise LaneAllocatorUnavailable(
            "fluidsalus was installed without its compiled lane allocator "
            f"({EXTENSION_MODULE} is missing); reinstall with a C++ compiler available "
            "(`pip install .` or `pip install -e .` from the source), "
            "or build it in a checkout with `python setup.py build_ext --inplace`"
        )
    return spec.origin


def load_library() -> ctypes.CDLL:
    """Load the compiled lane allocator once and declare its C functions.

    Returns:
        The library, with ``argtypes``/``restype`` set on every function.

    Raises:
        LaneAllocatorUnavailable: If the library is missing or cannot be loaded.
    """
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise LaneAllocatorUnavailable(f"the compiled lane allocator at {path} cannot be loaded: {e}") from e
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        if lib.fs_alignment() != ALIGNMENT:
            raise LaneAllocatorUnavailable(f"{path} aligns to {lib.fs_alignment()} bytes, expected {ALIGNMENT}")
        _lib = lib
        return lib


def _status_message(status: int) -> str:
    return load_library().fs_status_string(status).decode()


def _check(status: int, what: str) -> int:
    """Raise :class:`LaneAllocatorError` for a negative status; return it otherwise."""
    if status < 0:
        lib = load_library()
        code = Status(status) if status in Status._value2member_map_ else Status.INTERNAL
        detail = (lib.fs_last_error_detail() or b"").decode(errors="replace")
        message = f"{what}: {_status_message(status)}" + (f" ({detail})" if detail else "")
        raise LaneAllocatorError(message, code)
    return status


def set_thread_tag(tag: int | None) -> None:
    """Charge the calling thread's later allocations (:meth:`LaneAllocator.malloc` without a tag, and every
    CUDA tensor once :func:`install_cuda_allocator` ran) to ``tag``.

    Args:
        tag: A tag ``>= 0``, or None to clear the thread's tag.
    """
    if tag is not None and tag < 0:
        raise ValueError(f"tag: must be >= 0 or None, got {tag}")
    load_library().fs_set_thread_tag(NO_TAG if tag is None else tag)


def get_thread_tag() -> int | None:
    """The calling thread's tag.

    Returns:
        The tag set by :func:`set_thread_tag`, None if the thread has none.
    """
    tag = load_library().fs_get_thread_tag()
    return None if tag == NO_TAG else tag


@contextlib.contextmanager
def thread_tag(tag: int | None) -> Iterator[None]:
    """Set the calling thread's tag for a ``with`` block and restore the previous one after.

    Args:
        tag: A tag ``>= 0``, or None for no tag.
    """
    previous = get_thread_tag()
    set_thread_tag(tag)
    try:
        yield
    finally:
        set_thread_tag(previous)


def last_error() -> Status:
    """Why the calling thread's last call into the library failed.

    Returns:
        The status of the thread's last call (``Status.OK`` after a success); e.g. ``Status.TAG_CAP`` after
        :meth:`LaneAllocator.malloc` returned 0 because of the tag's cap.
    """
    status = load_library().fs_last_error()
    return Status(status) if status in Status._value2member_map_ else Status.INTERNAL


def last_error_detail() -> str:
    """The detail of the calling thread's last failure, "" if there is none.

    Returns:
        E.g. why the lane could not grow for a fragmented request after :meth:`LaneAllocator.malloc` returned 0
        with ``Status.LANE_FULL``, or why the backing memory could not be obtained.
    """
    return (load_library().fs_last_error_detail() or b"").decode(errors="replace")


class LaneAllocator:
    """An allocator of lanes and tagged allocations.

    Args:
        backing: ``"host"`` (real host memory) or ``"virtual"`` (addresses only). The CUDA allocator is
            process-wide: get it with :meth:`device`.

    Raises:
        LaneAllocatorUnavailable: If the compiled library is missing.
        ValueError: For another backing.

    Example::

        alloc = LaneAllocator()
        lane = alloc.create_lane(64 << 20)
        alloc.assign(tag=7, lane=lane)
        addr = alloc.malloc(1 << 20, tag=7)
        live, peak = alloc.tag_stats(7)
        alloc.free(addr)
    """

    def __init__(self, backing: Backing = "host"):
        if backing not in ("host", "virtual"):
            raise ValueError(
                f"backing: must be 'host' or 'virtual', got {backing!r} "
                "(the CUDA allocator is process-wide: LaneAllocator.device())"
            )
        lib = load_library()
        handle = lib.fs_allocator_create(_BACKING_CODES[backing])
        if not handle:
            raise LaneAllocatorError(f"creating a {backing!r} allocator failed: {_status_message(lib.fs_last_error())}")
        self._lib = lib
        self._handle: int | None = handle
        self._finalizer: weakref.finalize | None = weakref.finalize(self, lib.fs_allocator_destroy, handle)

    @classmethod
    def device(cls) -> LaneAllocator:
        """The process-wide allocator behind PyTorch's CUDA allocations (:func:`install_cuda_allocator`).

        Its backing is CUDA unless changed with :meth:`set_backing` (before it has lanes). It is never freed.

        Returns:
            A handle on the process-wide allocator.
        """
        lib = load_library()
        self = cls.__new__(cls)
        self._lib = lib
        self._handle = lib.fs_global_allocator()
        self._finalizer = None
        return self

    # -- life cycle ------------------------------------------------------------------------------------

    @property
    def handle(self) -> int:
        """The C handle (``fs_allocator*``)."""
        if self._handle is None:
            raise LaneAllocatorError("the allocator is closed", Status.INVALID)
        return self._handle

    @property
    def backing(self) -> Backing:
        """Where lane memory comes from: ``"host"``, ``"virtual"`` or ``"cuda"``."""
        return _BACKING_NAMES[self._lib.fs_allocator_backing(self.handle)]  # type: ignore[return-value]

    def set_backing(self, backing: Backing) -> None:
        """Change the process-wide allocator's backing (only :meth:`device`'s, and only while it has no lanes
        and no live allocations).

        Args:
            backing: ``"host"``, ``"virtual"`` or ``"cuda"``.
        """
        if self._finalizer is not None:
            raise LaneAllocatorError("only the process-wide allocator (LaneAllocator.device()) changes backing")
        if backing not in _BACKING_CODES:
            raise ValueError(f"backing: must be one of {sorted(_BACKING_CODES)}, got {backing!r}")
        _check(self._lib.fs_global_set_backing(_BACKING_CODES[backing]), f"set_backing({backing!r})")

    def close(self) -> None:
        """Give every lane's memory back. Addresses still live become invalid. No-op for :meth:`device`."""
        if self._finalizer is not None:
            self._finalizer()
            self._handle = None

    def __enter__(self) -> LaneAllocator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- device pools ----------------------------------------------------------------------------------

    def set_pool(self, capacity: int, device: int = 0) -> None:
        """Obtain ``capacity`` bytes of the device's memory at once and carve its lanes from them from now on.

        With a pool, creating, resizing and dissolving a lane only moves bookkeeping (no ``cudaMalloc`` or
        ``cudaFree`` on CUDA), and a lane that shrinks gives its free tail back to the pool.

        Args:
            capacity: Bytes (rounded down to :data:`ALIGNMENT`); 0 gives the pool back.
            device: Device index.

        Raises:
            LaneAllocatorError: ``Status.LANE_BUSY`` while the device has lanes; ``Status.BACKING`` if the memory
                cannot be obtained.
        """
        if capacity < 0:
            raise ValueError(f"capacity: must be >= 0, got {capacity}")
        _check(self._lib.fs_pool_set(self.handle, device, capacity), f"set_pool({capacity}, device={device})")

    def pool_stats(self, device: int = 0) -> PoolStats:
        """Statistics of the device's pool.

        Args:
            device: Device index.

        Returns:
            Capacity, bytes carved out for lanes, the largest free piece, ...

        Raises:
            LaneAllocatorError: ``Status.NO_LANE`` if the device has no pool.
        """
        s = _PoolStatsC()
        _check(self._lib.fs_pool_stats_get(self.handle, device, ctypes.byref(s)), f"pool_stats({device})")
        return PoolStats(s.device, s.capacity, s.used, s.capacity - s.used, s.largest_free, s.free_blocks,
                         s.segments, s.base)

    # -- lanes -----------------------------------------------------------------------------------------

    def create_lane(self, capacity: int, device: int = 0) -> int:
        """Create a lane (an arena) of ``capacity`` bytes.

        With a pool for the device (:meth:`set_pool`) the lane is carved from it, in one piece where the pool has
        one large enough, else in several (segments).

        Args:
            capacity: Bytes, rounded down to a multiple of :data:`ALIGNMENT`: the lane's hard cap.
            device: Device index of the lane's memory (CUDA); recorded only, on the host.

        Returns:
            The lane id.

        Raises:
            LaneAllocatorError: If the capacity is below :data:`ALIGNMENT` or the memory cannot be obtained.
        """
        return _check(self._lib.fs_lane_create(self.handle, capacity, device), f"create_lane({capacity})")

    def dissolve_lane(self, lane: int) -> None:
        """Dissolve an empty lane and give its memory back. Tags assigned to it become unassigned.

        Args:
            lane: Lane id.

        Raises:
            LaneAllocatorError: ``Status.LANE_BUSY`` if it holds live allocations, ``Status.NO_LANE`` if unknown.
        """
        _check(self._lib.fs_lane_dissolve(self.handle, lane), f"dissolve_lane({lane})")

    def retire_lane(self, lane: int) -> None:
        """Dissolve a lane that may still hold live allocations.

        Its tags are unassigned and its streams unbound at once, and nothing more is allocated from it. Its free
        memory goes back now where it can (a pooled lane gives back its free segments and free segment tails),
        the rest as the live allocations are freed (:meth:`reap`). An empty lane is dissolved at once.

        Args:
            lane: Lane id.

        Raises:
            LaneAllocatorError: ``Status.NO_LANE`` if unknown.
        """
        _check(self._lib.fs_lane_retire(self.handle, lane), f"retire_lane({lane})")

    def reap(self) -> int:
        """Dissolve retired lanes that have emptied, and give back the free memory of the others (pooled).

        Every other lane gives back what it holds beyond its capacity (after a shrink or an overdraw, see
        :meth:`malloc`), as far as its live blocks allow.

        Creating, resizing, dissolving and retiring lanes do this too.

        Returns:
            How many lanes were dissolved.
        """
        return _check(self._lib.fs_reap(self.handle), "reap()")

    def resize_lane(self, lane: int, capacity: int) -> None:
        """Change a lane's capacity (its hard cap), also while it holds live allocations.

        - An empty lane gives its memory back and obtains the new size, in one piece where possible.
        - A growing lane grows its last segment in place when the pool's memory right after it is free, else
          it gains a segment of the difference.
        - A shrinking lane's cap drops at once (below its live bytes too: allocations fail until enough is
          freed). Its memory goes back from free segments, and from free segment tails when it is pooled, as
          far as the live blocks allow: :attr:`LaneStats.reserved` may stay above the capacity.

        Args:
            lane: Lane id.
            capacity: New capacity in bytes (rounded down to :data:`ALIGNMENT`).

        Raises:
            LaneAllocatorError: ``Status.BACKING`` if the memory to grow cannot be obtained (the lane keeps its
                capacity; an empty lane that cannot get its old size back either is gone); ``Status.NO_LANE`` if
                unknown or retired.
        """
        _check(self._lib.fs_lane_resize(self.handle, lane, capacity), f"resize_lane({lane}, {capacity})")

    def lanes(self) -> list[int]:
        """The lanes of this allocator.

        Returns:
            Their ids, in increasing order.
        """
        while True:
            n = _check(self._lib.fs_lane_list(self.handle, None, 0), "lanes()")
            out = (_i64 * max(n, 1))()
            m = _check(self._lib.fs_lane_list(self.handle, out, n), "lanes()")
            if m <= n:
                return list(out[:m])

    def lane_stats(self, lane: int) -> LaneStats:
        """Statistics of one lane.

        Args:
            lane: Lane id.

        Returns:
            Capacity, used bytes, largest free block, block counts, ...
        """
        s = _LaneStatsC()
        _check(self._lib.fs_lane_stats_get(self.handle, lane, ctypes.byref(s)), f"lane_stats({lane})")
        return LaneStats(
            lane=s.lane,
            device=s.device,
            capacity=s.capacity,
            used=s.used,
            free=max(0, s.capacity - s.used),
            largest_free=s.largest_free,
            allocated_blocks=s.allocated_blocks,
            free_blocks=s.free_blocks,
            tags=s.tags,
            active_tag=None if s.active_tag == NO_TAG else s.active_tag,
            base=s.base,
            reserved=s.reserved,
            segments=s.segments,
            retired=bool(s.retired),
        )

    def lane_blocks(self, lane: int) -> list[Block]:
        """Every block of a lane, free and live, segment by segment and in address order within each.

        Args:
            lane: Lane id.

        Returns:
            The blocks; together they tile the lane's segments exactly.
        """
        while True:
            n = _check(self._lib.fs_lane_blocks(self.handle, lane, None, 0), f"lane_blocks({lane})")
            out = (_BlockC * max(n, 1))()
            m = _check(self._lib.fs_lane_blocks(self.handle, lane, out, n), f"lane_blocks({lane})")
            if m <= n:
                return [Block(b.address, b.offset, b.size, None if b.is_free else b.tag, b.segment) for b in out[:m]]

    def check_lane(self, lane: int) -> None:
        """Verify the lane's invariants: in every segment blocks tile the arena, no two free neighbours, indexes
        and counters agree; segments are where the address index and the device pool say; the lane holds at
        least its capacity unless retired.

        Args:
            lane: Lane id.

        Raises:
            LaneAllocatorError: Describing the first violation.
        """
        why = ctypes.create_string_buffer(_WHY_LEN)
        status = self._lib.fs_lane_check(self.handle, lane, why, _WHY_LEN)
        if status < 0:
            detail = why.value.decode() or _status_message(status)
            raise LaneAllocatorError(f"check_lane({lane}): {detail}", Status(status))

    # -- tags ------------------------------------------------------------------------------------------

    def assign(self, tag: int, lane: int | None) -> None:
        """Make ``tag`` allocate from ``lane`` from now on (its live blocks stay where they are).

        Args:
            tag: A tag ``>= 0``, or :data:`NO_TAG` to route untagged allocations into a lane.
            lane: Lane id, or None to unassign.
        """
        _check(self._lib.fs_assign_tag(self.handle, tag, _NO_LANE if lane is None else lane), f"assign({tag}, {lane})")

    def set_tag_cap(self, tag: int, cap: int | None) -> None:
        """Set a hard cap on the tag's live bytes. Allocations that would pass it fail for this tag only.

        Args:
            tag: The tag.
            cap: Bytes (counted in :data:`ALIGNMENT` units, as allocations are), or None for no cap.
        """
        if cap is not None and cap < 0:
            raise ValueError(f"cap: must be >= 0 or None, got {cap}")
        _check(self._lib.fs_set_tag_cap(self.handle, tag, _UNLIMITED if cap is None else cap), f"set_tag_cap({tag})")

    def tag_info(self, tag: int) -> TagInfo:
        """Accounting of one tag.

        Args:
            tag: The tag.

        Returns:
            Lane, cap, live and peak bytes, live blocks, refused allocations.

        Raises:
            LaneAllocatorError: ``Status.NO_TAG`` if the tag was never assigned nor capped.
        """
        s = _TagStatsC()
        _check(self._lib.fs_tag_stats_get(self.handle, tag, ctypes.byref(s)), f"tag_stats({tag})")
        return TagInfo(
            tag=s.tag,
            lane=None if s.lane == _NO_LANE else s.lane,
            cap=None if s.cap == _UNLIMITED else s.cap,
            live=s.live,
            peak=s.peak,
            allocations=s.allocations,
            failures=s.failures,
        )

    def tag_stats(self, tag: int) -> tuple[int, int]:
        """Live and peak bytes of a tag.

        Args:
            tag: The tag.

        Returns:
            ``(live, peak)``: bytes in the tag's live blocks, and their highest value since the tag was created
            or :meth:`reset_peak` was last called.
        """
        info = self.tag_info(tag)
        return info.live, info.peak

    def reset_peak(self, tag: int) -> None:
        """Set the tag's peak to its live bytes, so the next peak measures from here.

        At an iteration boundary ``P = live``; after :meth:`reset_peak`, the next boundary's ``peak - P`` is the
        iteration's ephemeral memory ``T``.

        Args:
            tag: The tag.
        """
        _check(self._lib.fs_reset_peak(self.handle, tag), f"reset_peak({tag})")

    def forget_tag(self, tag: int) -> None:
        """Drop a finished tag's accounting.

        Args:
            tag: A tag with no live bytes.

        Raises:
            LaneAllocatorError: ``Status.LANE_BUSY`` if it still has live allocations.
        """
        _check(self._lib.fs_forget_tag(self.handle, tag), f"forget_tag({tag})")

    # -- streams ---------------------------------------------------------------------------------------

    def bind_stream(self, stream: int, lane: int | None) -> None:
        """Charge allocations on ``stream`` from threads without a tag to the lane's active tag.

        PyTorch runs a backward pass on its own device threads, which have no tag, but on the forward pass's
        stream: binding each lane's CUDA stream keeps those allocations on the trial's account.

        Args:
            stream: A stream handle (``torch.cuda.Stream.cuda_stream``; 0 is the default stream).
            lane: Lane id, or None to unbind.
        """
        _check(self._lib.fs_bind_stream(self.handle, stream or None, _NO_LANE if lane is None else lane), "bind_stream")

    def set_lane_tag(self, lane: int, tag: int | None) -> None:
        """Record which tag the lane runs now (lanes time-slice, one trial at a time), for :meth:`bind_stream`.

        Args:
            lane: Lane id.
            tag: The running trial's tag, or None.
        """
        _check(self._lib.fs_set_lane_tag(self.handle, lane, NO_TAG if tag is None else tag), f"set_lane_tag({lane})")

    # -- allocation ------------------------------------------------------------------------------------

    def malloc(self, nbytes: int, tag: int | None = None, *, stream: int = 0) -> int:
        """Allocate from the tag's lane.

        Args:
            nbytes: Bytes (rounded up to :data:`ALIGNMENT`; 0 takes one unit).
            tag: The tag to charge. None charges what a CUDA allocation would: the calling thread's tag, else the
                active tag of the lane ``stream`` is bound to, else :data:`NO_TAG` (outside every lane, unless
                :data:`NO_TAG` is assigned to one).
            stream: Stream handle for the fallback above (only used when ``tag`` is None).

        The lane's capacity caps its live bytes, not where they lie: a request within the cap that no free block
        holds (the free memory is fragmented) is served from more memory for the lane, grown in place from the
        pool where the memory after its last segment is free, else a new segment of the request's size.

        Returns:
            The address (a multiple of :data:`ALIGNMENT`), or 0 if the allocation failed: :func:`last_error`
            says why (``Status.TAG_CAP``, ``Status.LANE_FULL``: past the lane's cap, or fragmented with no memory
            left to grow into; ``Status.NO_LANE``, ...).
        """
        if tag is None:
            address = self._lib.fs_malloc_current(self.handle, nbytes, -1, stream or None)
        else:
            address = self._lib.fs_malloc(self.handle, nbytes, tag)
        return address or 0

    def free(self, address: int) -> None:
        """Free an allocation.

        Args:
            address: An address :meth:`malloc` returned (0 is a no-op).

        Raises:
            LaneAllocatorError: ``Status.NOT_OURS`` for an address this allocator does not hold (or a double free).
        """
        _check(self._lib.fs_free(self.handle, address or None), f"free({address:#x})")

    def live_bytes(self) -> int:
        """Total live bytes, for leak checks.

        Returns:
            Live bytes over every tag, in lanes and outside them.
        """
        return _check(self._lib.fs_allocator_live_bytes(self.handle), "live_bytes()")


_installed_lock = threading.Lock()
_installed: object | None = None  # the torch CUDAPluggableAllocator, kept alive
_torch_oom_bound = False  # whether refusals raise torch.OutOfMemoryError (see refusals_raise_torch_oom)


def refusals_raise_torch_oom() -> bool:
    """Whether a refused CUDA allocation raises ``torch.OutOfMemoryError`` in this process.

    :func:`install_cuda_allocator` looks up the constructor and type of PyTorch's ``c10::OutOfMemoryError`` in
    its ``libc10``. Where that library does not export them (PyTorch 2.11+cu130 does not), a refusal raises a
    ``RuntimeError`` with the same message instead; :func:`is_refusal` recognises both, and a device host
    re-admits the trial either way.

    Returns:
        True once the allocator is installed with PyTorch's class bound; False before, or where it is missing.
    """
    return _torch_oom_bound


def install_cuda_allocator() -> LaneAllocator:
    """Make the lane allocator PyTorch's CUDA allocator in this process.

    Every CUDA tensor allocated afterwards is charged to the calling thread's tag (:func:`set_thread_tag`), or
    to its stream's lane's active tag (:meth:`LaneAllocator.bind_stream`), in the tag's lane; an allocation past
    a lane or tag cap raises ``torch.OutOfMemoryError`` in the thread that asked (a ``RuntimeError`` with the same
    message where PyTorch's libc10 does not export that class: :func:`refusals_raise_torch_oom`), and other tags go
    on.
    Allocations with no tag go straight to ``cudaMalloc``, outside every lane (accounted under :data:`NO_TAG`).

    It must run before the process's first CUDA allocation (PyTorch refuses to swap an allocator it has used);
    calling it again returns the same allocator.

    Returns:
        The process-wide allocator (:meth:`LaneAllocator.device`), with CUDA backing: create lanes on it.

    Raises:
        LaneAllocatorError: If CUDA is not available, or PyTorch's CUDA allocator was already used.
        LaneAllocatorUnavailable: If the compiled library is missing.
    """
    global _installed, _torch_oom_bound
    import torch

    with _installed_lock:
        device = LaneAllocator.device()
        if _installed is not None:
            return device
        if not torch.cuda.is_available():
            raise LaneAllocatorError("install_cuda_allocator() needs CUDA, and torch.cuda.is_available() is False")
        lib = load_library()
        why = ctypes.create_string_buffer(_WHY_LEN)
        if lib.fs_cuda_runtime_status(why, _WHY_LEN) != Status.OK:
            raise LaneAllocatorError(f"the CUDA runtime cannot be loaded: {why.value.decode()}", Status.BACKING)
        device.set_backing("cuda")
        # Find torch's c10::OutOfMemoryError, so a refused allocation raises torch.OutOfMemoryError. Without it
        # the same refusal raises RuntimeError with the same message.
        libc10 = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
        bound = lib.fs_cuda_bind_torch(libc10.encode() if os.path.isfile(libc10) else None) == Status.OK
        pluggable = torch.cuda.memory.CUDAPluggableAllocator(library_path(), CUDA_MALLOC_SYMBOL, CUDA_FREE_SYMBOL)
        try:
            torch.cuda.memory.change_current_allocator(pluggable)
        except RuntimeError as e:
            raise LaneAllocatorError(
                "install_cuda_allocator() must run before the process's first CUDA allocation: " + str(e),
                Status.LANE_BUSY,
            ) from e
        _installed = pluggable
        _torch_oom_bound = bound
        return device
