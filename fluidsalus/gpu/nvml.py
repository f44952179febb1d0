"""GPU utilisation and memory from NVML (``pynvml``, the nvidia-ml-py package).

:class:`NvmlSampler` samples one GPU on a background daemon thread into a bounded ring buffer.
Where there is no NVML library or no GPU (a laptop, CI) it records nothing and raises nothing:
``available`` is False and :meth:`NvmlSampler.samples` is empty.

Device indices. NVML numbers GPUs physically and ignores ``CUDA_VISIBLE_DEVICES``; inside a Ray actor
``cuda:0`` is whichever GPU Ray assigned. :func:`nvml_device_for_cuda` maps a CUDA index through
``CUDA_VISIBLE_DEVICES`` (integer ids, or ``GPU-…`` UUIDs, which NVML accepts as they are). With integer ids
this assumes ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` ordering (NVML's), which Ray's ids follow; on a machine mixing
GPU models with CUDA's default "fastest first" order, set ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fluidsalus.errors import ConfigError

#: Seconds between samples when the caller does not say. NVML's utilisation counter is itself an average
#: over a 1/6 s to 1 s window (depending on the GPU), so sampling faster adds no information.
DEFAULT_INTERVAL_S = 0.5

#: Samples kept in the ring buffer: 10 minutes at :data:`DEFAULT_INTERVAL_S`, about 100 KB. The goodput
#: collector drains samples long before that; older ones are dropped, never the newest.
DEFAULT_RING_SIZE = 1200

#: Device memory kept out of the lanes for the CUDA context and the kernels loaded into it (torch's, cuBLAS's
#: and cuDNN's), which no allocator of torch's sees. With lazy module loading (the default since CUDA 12.2 and
#: set by torch since 1.13) PyTorch measured a bare context at 287 MB against 667 MB loaded eagerly
#: (pytorch/pytorch#86509). On an H200 with torch 2.11 + CUDA 13 the context took 619 MiB, and 759 MiB once one
#: thread had run fp32/bf16/fp16 GEMMs (with their backward passes) and a cuDNN convolution
#: (docs/benchmarks.md, "Device memory outside torch's allocator"): 1 GiB covers that with room for more
#: kernels.
CUDA_CONTEXT_RESERVE_BYTES = 1 << 30

#: Device memory each thread's cuBLAS handle takes outside torch's allocator. cuBLAS gives every thread that
#: runs a GEMM its own handle (torch keeps them in a pool and hands a finished thread's handle to the next), and
#: every trial runs in a thread of its own. Measured with torch 2.11 + CUDA 13 (docs/benchmarks.md): 64 MiB per
#: live thread on an H200 (1 to 32 live threads: 893 to 2,881 MiB outside torch's allocator) and on an H100
#: (16 to 32 live threads: 1,930 to 2,956 MiB). The cost is the handle's, not a stream's: on the H100, 8 threads
#: alive at once on one shared stream added 73 MiB each, and 8 threads run one after another, each on a new
#: stream (so reusing one handle), added nothing. The workspaces torch gives each (handle, stream) are allocated
#: through torch's allocator, so they are not part of this.
CUBLAS_HANDLE_BYTES = 64 << 20

#: Device memory each thread's cuDNN handle takes outside torch's allocator, for the threads that run
#: convolutions: 9.8 MiB per thread on an H100 (8 live threads that ran only a convolution's forward and
#: backward pass on one shared stream; torch 2.11 + CUDA 13, ``benchmarks/gpu_memory.py``), rounded up to whole
#: MiB. Counted for every thread of :func:`context_reserve_bytes`, since the engine cannot tell which trials
#: convolve before they run.
CUDNN_HANDLE_BYTES = 10 << 20

#: Environment variable that replaces the whole reserve of :func:`context_reserve_bytes` (a byte count) on every
#: device of the machines where it is set, for libraries that need more device memory of their own.
RESERVE_ENV = "FLUIDSALUS_CUDA_RESERVE_BYTES"


def context_reserve_bytes(max_threads: int = 1) -> int:
    """Device memory kept out of a GPU's lanes: what torch's allocator never sees.

    That is the CUDA context with its kernels (:data:`CUDA_CONTEXT_RESERVE_BYTES`) plus one cuBLAS handle
    (:data:`CUBLAS_HANDLE_BYTES`) and one cuDNN handle (:data:`CUDNN_HANDLE_BYTES`) per thread that may run
    kernels at once: the device's trials (at most its ``max_lanes``, one thread each) and autograd's thread for
    the device, which runs their backward passes. The driver sends a device at most one trial more than its
    slots (prefetched, waiting for a slot); the context's share has room for such a handle or two (759 MiB
    measured of the 1 GiB).
    In arena mode the lanes' pool takes all the rest when the device starts, so a reserve too small makes
    ``cublasCreate`` fail with ``CUBLAS_STATUS_ALLOC_FAILED``.

    Args:
        max_threads: Trial threads that may run on the device at once (its ``max_lanes``).

    Returns:
        ``$FLUIDSALUS_CUDA_RESERVE_BYTES`` when set, else
        ``CUDA_CONTEXT_RESERVE_BYTES + (CUBLAS_HANDLE_BYTES + CUDNN_HANDLE_BYTES) * (max_threads + 1)``.

    Raises:
        ConfigError: The variable is set but is not a byte count (a whole number >= 0).
    """
    text = os.environ.get(RESERVE_ENV, "").strip()
    if not text:
        return CUDA_CONTEXT_RESERVE_BYTES + (CUBLAS_HANDLE_BYTES + CUDNN_HANDLE_BYTES) * (max(1, max_threads) + 1)
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{RESERVE_ENV}={text!r}: expected a byte count, a whole number >= 0")
    return value


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading.

    Attributes:
        ts: Wall-clock time of the reading (``time.time()`` unless another clock was given).
        gpu_util_pct: Percent of the last sample window during which a kernel ran.
        mem_util_pct: Percent of the window during which device memory was read or written.
        mem_used: Device memory in use, bytes (all processes).
        mem_total: Device memory, bytes.
    """

    ts: float
    gpu_util_pct: int
    mem_util_pct: int
    mem_used: int
    mem_total: int


def _import_pynvml() -> Any | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _nvml_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    err = getattr(nvml, "NVMLError", None)
    return (err, OSError) if isinstance(err, type) else (OSError,)


def nvml_device_for_cuda(cuda_index: int, env: Mapping[str, str] | None = None) -> int | str:
    """The NVML device (index or UUID) of a CUDA device index of this process.

    Args:
        cuda_index: Index as torch sees it (``cuda:<cuda_index>``).
        env: Environment to read ``CUDA_VISIBLE_DEVICES`` from (default ``os.environ``).

    Returns:
        The physical NVML index, or the UUID string when ``CUDA_VISIBLE_DEVICES`` lists UUIDs. Without
        ``CUDA_VISIBLE_DEVICES`` (or with an entry out of range), ``cuda_index`` itself.
    """
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return cuda_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if not 0 <= cuda_index < len(entries):
        return cuda_index
    entry = entries[cuda_index]
    return int(entry) if entry.isdigit() else entry


def _handle(nvml: Any, device: int | str) -> Any:
    if isinstance(device, str):
        return nvml.nvmlDeviceGetHandleByUUID(device)
    return nvml.nvmlDeviceGetHandleByIndex(device)


#: What CUDA libraries say when device memory of their own (a handle, a plan: outside torch's allocator) could not
#: be allocated. Such memory comes from the reserve, so :func:`reserve_hint` points at it.
LIBRARY_ALLOC_FAILURES = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                          "CUSOLVER_STATUS_ALLOC_FAILED", "CUSPARSE_STATUS_ALLOC_FAILED", "CUFFT_ALLOC_FAILED")


def reserve_hint(error: str, max_threads: int) -> str | None:
    """What to do about a trial error that says a CUDA library could not allocate memory of its own.

    Args:
        error: The trial's error message.
        max_threads: The device's ``max_lanes`` (its reserve's thread count).

    Returns:
        A sentence naming the reserve and how to raise it, or None for any other error.
    """
    if not any(code in error for code in LIBRARY_ALLOC_FAILURES):
        return None
    reserve = context_reserve_bytes(max_threads)
    return (f"a CUDA library ran out of the device memory kept outside torch's allocator ({reserve >> 20} MiB "
            f"on this device): set {RESERVE_ENV} to more bytes than {reserve}, or run fewer trials per GPU "
            "(docs/lanes.md)")


def device_free_memory(device: int | str, reserve_bytes: int | None = None, max_threads: int = 1
                       ) -> int | None:
    """Memory the lanes of a GPU may reserve: NVML's free memory minus a reserve.

    Call it before this process creates its CUDA context (before torch first touches the GPU): the reserve
    stands for that context. Once the context exists its memory already counts as used, so pass a smaller
    ``reserve_bytes`` (the library workspaces only), or 0.

    Args:
        device: NVML index or UUID (see :func:`nvml_device_for_cuda`).
        reserve_bytes: Bytes kept out of the lanes; default ``context_reserve_bytes(max_threads)``.
        max_threads: Trial threads that may run on the device at once (see :func:`context_reserve_bytes`).

    Returns:
        ``max(0, free - reserve_bytes)``, or None when NVML or the device is not available.
    """
    nvml = _import_pynvml()
    if nvml is None:
        return None
    errors = _nvml_errors(nvml)
    try:
        nvml.nvmlInit()
    except errors:
        return None
    try:
        free = int(nvml.nvmlDeviceGetMemoryInfo(_handle(nvml, device)).free)
    except errors:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except errors:
            pass
    return max(0, free - (context_reserve_bytes(max_threads) if reserve_bytes is None else reserve_bytes))


class NvmlSampler:
    """Samples one GPU's utilisation and memory on a background daemon thread.

    NVML reference-counts ``nvmlInit``/``nvmlShutdown``, so several samplers (and :func:`device_free_memory`)
    may live in one process.

    Args:
        device_index: NVML index or UUID of the GPU (see :func:`nvml_device_for_cuda`).
        interval_s: Seconds between samples.
        ring_size: Samples kept; the oldest are dropped first.
        start: Start the thread now (tests pass False and call :meth:`sample_once`).
        clock: Timestamp source for the samples.

    Raises:
        ValueError: If ``interval_s`` <= 0 or ``ring_size`` < 1.
    """

    def __init__(
        self,
        device_index: int | str = 0,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        ring_size: int = DEFAULT_RING_SIZE,
        start: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s: must be > 0 seconds, got {interval_s!r}")
        if ring_size < 1:
            raise ValueError(f"ring_size: must be >= 1, got {ring_size!r}")
        self.device = device_index
        self.interval_s = interval_s
        self.errors = 0  # NVML errors while sampling (the sample is skipped)
        self._clock = clock
        self._ring: deque[GpuSample] = deque(maxlen=ring_size)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = _import_pynvml()
        self._errors: tuple[type[BaseException], ...] = ()
        self._handle: Any = None
        if self._nvml is not None:
            self._errors = _nvml_errors(self._nvml)
            try:
                self._nvml.nvmlInit()
            except self._errors:
                self._nvml = None
            else:
                try:
                    self._handle = _handle(self._nvml, device_index)
                except self._errors:
                    self._shutdown()
        if start and self.available:
            self._thread = threading.Thread(target=self._loop, name=f"nvml-sampler-{device_index}", daemon=True)
            self._thread.start()

    @property
    def available(self) -> bool:
        """True when NVML is loaded and the device was found (until :meth:`stop`)."""
        return self._handle is not None

    def sample_once(self) -> GpuSample | None:
        """Take one reading now and append it to the ring.

        Returns:
            The sample, or None when NVML is unavailable or the reading failed (counted in ``errors``).
        """
        nvml, handle = self._nvml, self._handle
        if nvml is None or handle is None:
            return None
        try:
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        except self._errors:
            self.errors += 1
            return None
        sample = GpuSample(self._clock(), int(util.gpu), int(util.memory), int(mem.used), int(mem.total))
        with self._lock:
            self._ring.append(sample)
        return sample

    def samples(self) -> list[GpuSample]:
        """The samples in the ring, oldest first."""
        with self._lock:
            return list(self._ring)

    def latest(self) -> GpuSample | None:
        """The newest sample, or None."""
        with self._lock:
            return self._ring[-1] if self._ring else None

    def stop(self) -> None:
        """Stop the thread and release NVML. Idempotent; the samples stay readable."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        self._shutdown()

    def __enter__(self) -> NvmlSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def _shutdown(self) -> None:
        if self._nvml is None:
            return
        nvml, self._nvml, self._handle = self._nvml, None, None
        try:
            nvml.nvmlShutdown()
        except self._errors:
            pass
