"""Per-trial memory estimates on CPU torch devices (persistent ``P`` and ephemeral ``T``), and EMA smoothing.

On a GPU in arena mode the lane allocator (``csrc/``, :mod:`fluidsalus.gpu.arena`) tags every allocation with
its trial and measures ``P`` and ``T`` exactly. On a virtual CPU device host memory is shared by everything
in the process, so the estimate is built from two measurements (a GPU in caching mode uses the same ``P``,
and ``torch.cuda.max_memory_allocated`` for ``T``):

**P (persistent)**: bytes of the tensors a trial keeps between iterations, counted from the objects
themselves: module parameters and buffers (:func:`module_bytes`) and optimizer state (:func:`optimizer_state_bytes`).
Tensors are deduplicated by storage: tied weights, views and a tensor listed twice count once, and a storage
counts its full size (``untyped_storage().nbytes()``, which for an ordinary tensor is
``element_size() * nelement()``; for a view into a larger storage it is the memory the view keeps alive).
Meta tensors hold no memory and count 0. What is not reachable from the modules and optimizers passed in
(a dataset cached in memory, a replay buffer) is not counted; pass those tensors to :func:`tensor_bytes`.

**T (ephemeral)**: the peak increase of the process's resident set size (RSS) during one iteration run
*alone* (:class:`PeakRss`, :func:`measure_iteration`), minus the growth of P in that iteration (Adam
creates its state at the first step: persistent, not ephemeral). On Linux the peak is ``VmHWM`` of
``/proc/self/status``, reset before the iteration by writing ``5`` to ``/proc/self/clear_refs`` so it is
the peak of this iteration only; ``resource.getrusage`` (``ru_maxrss``) is the fallback. Limits:

- RSS is per process: any other thread that allocates during the window (another trial, Ray's own
  threads) is counted too. The runtime therefore measures T only while the trial runs alone on the device.
- ``ru_maxrss`` and an unresettable ``VmHWM`` are peaks since the process started. When the peak did not
  rise during the window the true peak is not known; the measurement then reports the old peak as a safe
  upper bound and says ``exact=False``.
- The C allocator may reuse memory that is already resident (freed by earlier work), which RSS does not
  see as an increase; the first iteration is the one measured since it starts from the coldest state. Pages
  allocated but never touched are not resident and not counted (they cost no memory either).
- Without ``/proc`` (macOS) there is no current RSS to subtract: :func:`measure_iteration` gives ``t=0``
  and ``rss=None``.

torch is not imported by this module; the helpers import it when called with tensors.
"""

from __future__ import annotations

import math
import re
import resource
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Default weight of a new sample in :class:`Ema`. A sample's weight after ``n`` more is ``0.7**n``: a
#: half-life of about two samples, so an estimate follows a real change (a new phase of training) within
#: five samples (17% of the old value left) while one noisy iteration moves it by only 30% of its deviation.
DEFAULT_EMA_ALPHA = 0.3

#: Where Linux reports the process's memory (``VmRSS``: now, ``VmHWM``: peak), in kB.
PROC_STATUS = "/proc/self/status"
#: Writing :data:`CLEAR_REFS_RESET_PEAK` here resets ``VmHWM`` to the current RSS (Linux >= 4.0).
PROC_CLEAR_REFS = "/proc/self/clear_refs"
CLEAR_REFS_RESET_PEAK = "5"
#: Bytes per unit of ``/proc`` kB fields and of ``ru_maxrss`` on Linux (KiB); macOS reports bytes.
KIB = 1024
_RU_MAXRSS_UNIT = 1 if sys.platform == "darwin" else KIB


# ------------------------------------------------------------------------------------------------- P


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes held by tensors, each storage counted once.

    Args:
        tensors: Any tensors (views, duplicates and tensors sharing storage are fine).

    Returns:
        Sum over distinct storages of their size in bytes. A tensor without an accessible storage (sparse)
        counts ``element_size() * nelement()`` of its values and indices.
    """
    seen: set[tuple[str, int]] = set()
    seen_ids: set[int] = set()
    total = 0
    for t in tensors:
        if t.device.type == "meta":
            continue
        if t.is_sparse:
            if id(t) not in seen_ids:
                seen_ids.add(id(t))
                total += tensor_bytes([t._values(), t._indices()])
            continue
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
            if id(t) not in seen_ids:
                seen_ids.add(id(t))
                total += t.element_size() * t.nelement()
            continue
        key = (str(t.device), storage.data_ptr())
        if storage.nbytes() == 0 or key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def module_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters and buffers of a module and its submodules."""
    return [*module.parameters(), *module.buffers()]


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The tensors of an optimizer's per-parameter state (moments, step counters, ...), found recursively."""
    import torch

    out: list[torch.Tensor] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)

    for state in optimizer.state.values():
        walk(state)
    return out


def module_bytes(module: torch.nn.Module) -> int:
    """Parameter and buffer bytes of a module (deduplicated by storage)."""
    return tensor_bytes(module_tensors(module))


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's state (deduplicated by storage). Adam after a step: 2x its parameters + steps."""
    return tensor_bytes(optimizer_tensors(optimizer))


def persistent_bytes(
    modules: Iterable[torch.nn.Module] = (),
    optimizers: Iterable[torch.optim.Optimizer] = (),
    extra: Iterable[torch.Tensor] = (),
) -> int:
    """P of a trial: its modules' parameters and buffers, its optimizers' state and any extra tensors.

    Args:
        modules: The trial's modules.
        optimizers: Its optimizers.
        extra: Other tensors it keeps between iterations.

    Returns:
        Bytes, each storage counted once across all of them.
    """
    tensors: list[torch.Tensor] = []
    for m in modules:
        tensors.extend(module_tensors(m))
    for o in optimizers:
        tensors.extend(optimizer_tensors(o))
    tensors.extend(extra)
    return tensor_bytes(tensors)


# ------------------------------------------------------------------------------------------------- T


#: Binary units in the out-of-memory messages of NumPy ("728. TiB") and PyTorch ("2.00 GiB").
_UNITS = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}
#: How NumPy ("Unable to allocate 728. TiB for an array ..."), PyTorch ("Tried to allocate 2.00 GiB", "you tried
#: to allocate 400000000000000 bytes") and this project's lane allocators (the CUDA one's "tag 1 could not get
#: 512.00 MiB (536870912 bytes)", the host arena's "the trial could not get 4096 bytes") name the size of the
#: allocation that failed.
_REQUEST = re.compile(r"(?:[Uu]nable to allocate|[Tt]ried to allocate|could not get) ([0-9]+(?:\.[0-9]*)?) ?"
                      r"(bytes|B|[KMGTPE]iB)\b")
#: The exact count some messages give after the rounded size (the CUDA lane allocator's), read in its place.
_EXACT = re.compile(r" \(([0-9]+) bytes\)")


def requested_bytes(message: str) -> int | None:
    """The size of the allocation an out-of-memory error's message names (NumPy's, PyTorch's, the lane allocators'),
    or None.

    Args:
        message: The error's text.

    Returns:
        Bytes (the exact count where the message gives one, else rounded as it rounds them), or None when the
        message names no size.
    """
    found = _REQUEST.search(message)
    if found is None:
        return None
    exact = _EXACT.match(message, found.end())  # the CUDA lane allocator's "1.00 GiB (1077936128 bytes)"
    return int(exact.group(1)) if exact else int(float(found.group(1)) * _UNITS[found.group(2)])


def _status_bytes(field: str) -> int | None:
    try:
        with open(PROC_STATUS) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * KIB
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_rss() -> int | None:
    """Resident set size of this process now, in bytes (None without ``/proc``)."""
    return _status_bytes("VmRSS")


def peak_rss() -> int:
    """Peak resident set size of this process, in bytes (``VmHWM``, else ``ru_maxrss``)."""
    hwm = _status_bytes("VmHWM")
    if hwm is not None:
        return hwm
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RU_MAXRSS_UNIT


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS. Returns False where that is not possible."""
    try:
        with open(PROC_CLEAR_REFS, "w") as f:
            f.write(CLEAR_REFS_RESET_PEAK)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class RssMeasurement:
    """RSS over a window.

    Attributes:
        baseline: RSS at the start, bytes.
        peak: Peak RSS in the window (an upper bound when ``exact`` is False), bytes.
        exact: True when ``peak`` is the window's own peak.
    """

    baseline: int
    peak: int
    exact: bool

    @property
    def increase(self) -> int:
        """``max(0, peak - baseline)``."""
        return max(0, self.peak - self.baseline)


class PeakRss:
    """Context manager measuring the peak RSS increase of the process over its body.

    After the ``with`` block, ``result`` is an :class:`RssMeasurement`, or None without ``/proc``.
    Only meaningful while nothing else in the process allocates (see the module doc).
    """

    def __init__(self) -> None:
        self.result: RssMeasurement | None = None
        self._baseline: int | None = None
        self._reset = False
        self._peak_before = 0

    def __enter__(self) -> PeakRss:
        self._reset = reset_peak_rss()
        self._baseline = current_rss()
        self._peak_before = peak_rss()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._baseline is None:
            return
        after = peak_rss()
        exact = self._reset or after > self._peak_before
        self.result = RssMeasurement(self._baseline, after if exact else self._peak_before, exact)


# ------------------------------------------------------------------------------------------- estimates


class Ema:
    """Exponential moving average; the first sample is taken as it is.

    Args:
        alpha: Weight of a new sample, in (0, 1].

    Raises:
        ValueError: If ``alpha`` is outside (0, 1].
    """

    def __init__(self, alpha: float = DEFAULT_EMA_ALPHA) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha: must be in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self.value: float | None = None
        self.samples = 0

    def update(self, x: float) -> float:
        """Add a sample.

        Args:
            x: The sample.

        Returns:
            The new average.
        """
        self.value = x if self.value is None else self.alpha * x + (1 - self.alpha) * self.value
        self.samples += 1
        return self.value


@dataclass
class MemoryEstimate:
    """A trial's memory estimate, in bytes, as profiling refines it.

    ``p`` is the latest measurement (P is counted exactly, and is what the trial holds now). ``t`` starts as the
    estimate the trial was admitted with (a guess, or one an out-of-memory error grew) and is replaced by the
    first measurement of T; after that it rises at once to any larger measurement and decays towards smaller
    ones as an EMA: ``max(t_new, ema)``. An average alone would sit below the peaks it has seen, which is how an
    admission runs out of memory. A boundary that counts P but cannot measure T (another trial computed during
    the iteration) leaves ``t`` as it is: it is no sample of T.

    Attributes:
        p: Persistent bytes.
        t: Ephemeral bytes.
        samples: Boundaries measured (P at each).
        t_samples: Of them, those that measured T (0: ``t`` is still the estimate the trial was admitted with).
        alpha: EMA weight of a new ``t`` below the current estimate.
        t_floor: T known to be needed (the estimate an out-of-memory error grew): no measurement takes ``t`` below
            it, or an iteration that needs less, measured first, would undo the growth and the trial would run
            out at the same spot again.
    """

    p: int = 0
    t: int = 0
    samples: int = 0
    t_samples: int = 0
    alpha: float = DEFAULT_EMA_ALPHA
    t_floor: int = 0

    def update(self, p: int, t: int | None) -> MemoryEstimate:
        """Fold in one boundary's measurement.

        Args:
            p: Measured persistent bytes.
            t: Measured ephemeral bytes, or None when this boundary could not measure T.

        Returns:
            self, updated.
        """
        self.p = p
        if t is not None:
            self.t = t if self.t_samples == 0 else max(t, math.ceil(self.alpha * t + (1 - self.alpha) * self.t))
            self.t = max(self.t, self.t_floor)
            self.t_samples += 1
        self.samples += 1
        return self


@dataclass(frozen=True)
class IterationMemory:
    """What :func:`measure_iteration` measured.

    Attributes:
        p: Persistent bytes after the iteration.
        t: Ephemeral bytes: peak RSS increase minus the growth of P (0 when RSS is not available).
        rss: The raw RSS measurement (None without ``/proc``).
        result: What the iteration returned.
    """

    p: int
    t: int
    rss: RssMeasurement | None
    result: Any = None


def measure_iteration(
    step: Callable[[], Any],
    modules: Iterable[torch.nn.Module] = (),
    optimizers: Iterable[torch.optim.Optimizer] = (),
) -> IterationMemory:
    """Run one iteration alone and measure its P and T.

    Args:
        step: Runs one iteration (forward, backward, optimizer step).
        modules: The trial's modules.
        optimizers: Its optimizers (their state is created lazily at the first step: counted in P).

    Returns:
        The measurement.
    """
    modules, optimizers = list(modules), list(optimizers)
    p_before = persistent_bytes(modules, optimizers)
    with PeakRss() as probe:
        result = step()
    p_after = persistent_bytes(modules, optimizers)
    rss = probe.result
    t = 0 if rss is None else max(0, rss.increase - max(0, p_after - p_before))
    return IterationMemory(p_after, t, rss, result)
