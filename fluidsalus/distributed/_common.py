"""Settings, errors and the declaration of data-parallel trainables. Imports no torch."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

from fluidsalus.errors import ConfigError, FluidsalusError

#: The attribute :func:`data_parallel` sets on a trainable: ``{"min_workers": a, "max_workers": b}``, and
#: ``"timeout_s"`` when it sets one. The executor reads it to know how many devices (ranks) it may give each trial
#: of that trainable; each rank's device, for the rendezvous timeout.
DATA_PARALLEL_ATTR = "_fluidsalus_data_parallel"

#: Seconds any rank of a data-parallel trial waits for its peers before it fails: to rendezvous, in one
#: collective (gloo/nccl timeout), for rank 0's decision at a ``report()``, and, on rank 0, for the workers
#: to end. Five minutes is far above a healthy wait (a peer's iteration tail, a checkpoint write, a lane
#: turn) and short enough that a dead or hung peer surfaces as an error within minutes instead of torch's
#: default 30. A trainable sets its own with ``data_parallel(..., timeout_s=...)`` (a device's default is
#: ``HostSettings.distributed_timeout_s``), and may pass ``init_process_group(timeout_s=...)`` for its collectives.
DEFAULT_TIMEOUT_S = 300.0

#: First pause between two looks at the rendezvous store while a rank waits for a peer's key (seconds).
#: Looking is one local round trip (~50 us); the pause doubles up to :data:`POLL_MAX_S`, so a boundary where
#: rank 0 is already done costs microseconds and a long pause costs ~20 looks a second.
POLL_MIN_S = 0.0005
#: Longest pause between two looks at the rendezvous store (seconds).
POLL_MAX_S = 0.05
#: Longest pause between two tries of a worker to reach rank 0's store before it exists (seconds). Rank 0
#: opens its store as its trial starts, within one driver round trip of the worker (milliseconds), so tries
#: start at :data:`POLL_MIN_S` apart and double up to this; a stop of the waiting worker is seen within it.
CONNECT_POLL_MAX_S = 0.1
#: Seconds one TCP connection attempt to rank 0's store may take. On one node or a LAN a connect takes well
#: under a millisecond, or is refused at once when nothing listens; this bounds a try to a host that drops
#: packets, so that the worker still notices a stop. It is also the TCPStore client's connect timeout once
#: the port answers (a store that vanished just then fails within it, not within the rendezvous timeout).
CONNECT_TIMEOUT_S = 5.0

_Trainable = TypeVar("_Trainable", bound=Callable[..., Any])


class DataParallelError(FluidsalusError, RuntimeError):
    """A rank of a data-parallel trial failed, or waited longer than the rendezvous timeout for a peer."""


def data_parallel(trainable: _Trainable | None = None, *, workers: int | tuple[int, int],
                  timeout_s: float | None = None) -> _Trainable | Callable[[_Trainable], _Trainable]:
    """Declare that a trainable can run data-parallel on several devices (one rank per device).

    The planner gives such a trial between ``min_workers`` and ``max_workers`` whole devices when it has
    devices to spare (docs/planner.md, inter-GPU water filling), and may change that count at a checkpoint
    boundary: the trial then restarts from its last checkpoint with the new world size. Inside the trainable,
    use :func:`get_rank`, :func:`get_world_size`, :func:`prepare_model` and :func:`shard`.

    Usable as ``data_parallel(train, workers=(1, 4))`` or as a decorator ``@data_parallel(workers=4)``.

    Args:
        trainable: The function trainable ``f(config)``; omit it to get a decorator.
        workers: The number of devices (ranks) a trial may run on: an int ``k`` (any of 1..k) or a pair
            ``(min_workers, max_workers)`` with ``1 <= min_workers <= max_workers``.
        timeout_s: How long a rank waits for its peers, in seconds (the rendezvous, each collective unless
            ``init_process_group(timeout_s=...)`` says otherwise, a worker's wait for rank 0's decision, rank 0's
            wait for its workers to end): a hung rank fails its trial within about twice this. Default
            :data:`DEFAULT_TIMEOUT_S`.

    Returns:
        The same trainable, marked with the attribute :data:`DATA_PARALLEL_ATTR`
        (``{"min_workers": a, "max_workers": b}``, and ``"timeout_s"`` when given), or a decorator that marks it.

    Raises:
        ConfigError: When ``workers`` is not a positive int or an ordered pair of them, ``timeout_s`` is not a
            positive number of seconds, or ``trainable`` is not callable.
    """
    low, high = _check_workers(workers)
    declared: dict[str, Any] = {"min_workers": low, "max_workers": high}
    if timeout_s is not None:
        declared["timeout_s"] = _check_timeout(timeout_s)

    def mark(fn: _Trainable) -> _Trainable:
        if not callable(fn) or isinstance(fn, type):
            raise ConfigError(f"data_parallel: trainable must be a function f(config); got {type(fn).__name__}")
        setattr(fn, DATA_PARALLEL_ATTR, dict(declared))
        return fn

    return mark if trainable is None else mark(trainable)


def data_parallel_workers(trainable: Any) -> tuple[int, int] | None:
    """The ``(min_workers, max_workers)`` a trainable declared with :func:`data_parallel`, or None."""
    spec = getattr(trainable, DATA_PARALLEL_ATTR, None)
    if spec is None:
        return None
    return int(spec["min_workers"]), int(spec["max_workers"])


def data_parallel_timeout(trainable: Any) -> float | None:
    """The rendezvous timeout a trainable declared with :func:`data_parallel` (``timeout_s``), or None."""
    spec = getattr(trainable, DATA_PARALLEL_ATTR, None)
    value = spec.get("timeout_s") if isinstance(spec, dict) else None
    return None if value is None else float(value)


def _check_timeout(timeout_s: Any) -> float:
    if isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and 0 < timeout_s < float("inf"):
        return float(timeout_s)
    raise ConfigError(f"data_parallel: timeout_s must be a positive number of seconds (or None for the default "
                      f"{DEFAULT_TIMEOUT_S:g}); got {timeout_s!r}")


def _check_workers(workers: Any) -> tuple[int, int]:
    def positive(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1

    if positive(workers):
        return 1, int(workers)
    if isinstance(workers, tuple) and len(workers) == 2 and all(positive(w) for w in workers):
        low, high = workers
        if low <= high:
            return int(low), int(high)
        raise ConfigError(f"data_parallel: workers=(min_workers, max_workers) needs min_workers <= "
                          f"max_workers; got {workers!r}")
    raise ConfigError(f"data_parallel: workers must be a positive int k (1..k devices) or a pair "
                      f"(min_workers, max_workers) of positive ints; got {workers!r}")


def free_port() -> int:
    """A TCP port that is free on this node now (for rank 0's rendezvous store).

    The port is found by binding port 0 and closing the socket, so another process could take it before rank
    0 binds it; the trial then fails at its rendezvous and is retried like any failed start.

    Returns:
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
