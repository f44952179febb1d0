"""One rank's link with the other ranks of its data-parallel trial: a rendezvous store and a process group.

Rank 0 serves a ``torch.distributed.TCPStore`` at the trial's rendezvous address (a port its device actor
found free); the workers connect to it as clients. Every key lives under ``fluidsalus/<trial_id>/<attempt>/``,
so a late worker of an earlier attempt can never mix with the current one. The store carries:

- the **boundary protocol** (:class:`~fluidsalus.session.RankSync`): at each ``report()`` rank 0 writes its
  decision (``report/<i>`` = go, pause, stop or verdict) and, after a pause or once the driver judged a result
  that waits for its verdict, its verdict (``resume/<i>``); a worker waits for that key and does the same. So
  the workers pause, resume and stop exactly when rank 0 does, and the driver only ever talks to rank 0;
- the **end protocol**: rank 0 writes ``end`` when its trainable is over, a worker writes ``exited/<r>`` when
  its own is, and a worker that failed on its own writes ``error/<r>`` and ``failed``;
- the rendezvous of the trial's **process group**, built on demand by ``init_process_group()``.

A process group here is a ``torch.distributed.ProcessGroup`` of its own, not torch's global default group:
several data-parallel trials may share one device actor process, each with its own group. DDP takes it as
``process_group=``, and ``torch.distributed`` collectives take it as ``group=``.
"""

from __future__ import annotations

import datetime
import gc
import socket
import threading
import time
import weakref
from typing import Any

from fluidsalus.distributed._common import (
    CONNECT_POLL_MAX_S,
    CONNECT_TIMEOUT_S,
    POLL_MAX_S,
    POLL_MIN_S,
    DataParallelError,
)
from fluidsalus.errors import ConfigError, exception_text
from fluidsalus.gpu.host import OUT_COMPLETED, OUT_ERRORED, OUT_OOM, OUT_STOPPED
from fluidsalus.session import GO, STOP, StopTrial

#: Backends a trial's process group can use.
BACKENDS = ("gloo", "nccl")


def parse_address(address: str | None) -> tuple[str, int]:
    """Split an ``"ip:port"`` rendezvous address (an IPv6 ip may be in brackets).

    Raises:
        ConfigError: When the address is missing or malformed.
    """
    if not address or ":" not in address:
        raise ConfigError(f"rendezvous: a data-parallel trial needs an 'ip:port' address; got {address!r}")
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"rendezvous: expected 'ip:port' with a port in 1..65535; got {address!r}")
    return host, int(port)


class Rendezvous:
    """One rank's link with its trial's other ranks (the session's ``ranks``).

    Args:
        address: ``"ip:port"`` where rank 0 serves the store.
        rank: This rank.
        world_size: Ranks in the trial.
        key: Names the trial attempt in the store (``"<trial_id>/<attempt>"``).
        timeout_s: How long a rank waits for its peers (see ``DEFAULT_TIMEOUT_S``).
        device: The torch device of this rank (``"cpu"`` or ``"cuda:0"``).
    """

    def __init__(self, address: str | None, rank: int, world_size: int, key: str, timeout_s: float,
                 device: str, cancelled: threading.Event | None = None) -> None:
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank: must be in 0..world_size-1 = 0..{world_size - 1}; got {rank}")
        host, port = parse_address(address)
        import torch.distributed as dist

        self.rank, self.world_size, self.timeout_s, self.device = rank, world_size, timeout_s, device
        self.leader = rank == 0
        self._key = key
        self._timeout = datetime.timedelta(seconds=timeout_s)
        # Rank 0 serves; a worker waits for rank 0's port first (rank 0 may start later, or have ended already).
        if not self.leader:
            _wait_for_server(host, port, timeout_s, cancelled, rank, world_size)
        connect = self._timeout if self.leader else datetime.timedelta(seconds=min(timeout_s, CONNECT_TIMEOUT_S))
        self._server = dist.TCPStore(host, port, None, self.leader, connect, wait_for_workers=False)
        self._server.set_timeout(self._timeout)
        self.store = dist.PrefixStore(f"fluidsalus/{key}/", self._server)
        self.store.set(f"joined/{rank}", "1")
        self._lock = threading.Lock()
        self._group: Any = None
        self._backends: list[Any] = []
        self.backend: str | None = None

    # ------------------------------------------------------------------ boundary protocol (RankSync)

    def at_report(self, iteration: int, decision: str, cancelled: threading.Event) -> str:
        """Rank 0 publishes its decision at report ``iteration``; a worker waits for it and returns it.

        Raises:
            DataParallelError: On rank 0, when a worker has failed; on a worker, when rank 0 sent nothing
                for the rendezvous timeout.
        """
        if self.leader:
            if self.store.check(["failed"]):
                raise DataParallelError("a data-parallel worker failed: " + "; ".join(self.worker_failures()))
            self.store.set(f"report/{iteration}", decision)
            return decision
        got = self._wait(f"report/{iteration}", cancelled, self.timeout_s,
                         f"rank 0's decision at report {iteration}")
        return STOP if got is None else got

    def at_resume(self, iteration: int, stop: bool, cancelled: threading.Event) -> str:
        """After a pause, or a verdict, at report ``iteration``: rank 0 publishes go or stop; a worker waits
        (without limit)."""
        if self.leader:
            decision = STOP if stop else GO
            self.store.set(f"resume/{iteration}", decision)
            return decision
        got = self._wait(f"resume/{iteration}", cancelled, None, f"rank 0's resume after report {iteration}")
        return STOP if got is None else got

    def leader_gone(self) -> bool:
        """True once rank 0 has ended or its store cannot be reached."""
        import torch.distributed as dist

        try:
            return self.leader is False and self.store.check(["end"])
        except dist.DistError:
            return True

    def _wait(self, key: str, cancelled: threading.Event | None, timeout_s: float | None, what: str,
              abandon: threading.Event | None = None) -> str | None:
        """Wait for ``key`` and return its value; None once rank 0 ended or its store is gone, or at once when
        ``abandon`` is set (what it waits for will never come).

        A worker asked to stop (``cancelled``) still waits for rank 0's decision, so that every rank stops
        at the same ``report()``, but at most the rendezvous timeout from then on; it then returns None.

        Raises:
            DataParallelError: After ``timeout_s`` seconds (None: no limit).
        """
        import torch.distributed as dist

        start, pause = time.monotonic(), POLL_MIN_S
        cancelled_at: float | None = None
        while True:
            try:
                if self.store.check([key]):
                    return self.store.get(key).decode()
                if not self.leader and self.store.check(["end"]):
                    # Rank 0 writes its keys before ``end``: look once more, since both may have come between
                    # the two looks above (a worker at rank 0's last report would otherwise stop instead of going
                    # on to its own end).
                    return self.store.get(key).decode() if self.store.check([key]) else None
            except dist.DistError:  # rank 0's store is gone: so is the trial
                return None
            if abandon is not None and abandon.is_set():
                return None
            now = time.monotonic()
            if cancelled is not None and cancelled_at is None and cancelled.is_set():
                cancelled_at = now
            if cancelled_at is not None and now - cancelled_at > self.timeout_s:
                return None
            if timeout_s is not None and now - start > timeout_s:
                raise DataParallelError(f"rank {self.rank} of {self.world_size} waited {timeout_s:g} s for {what} "
                                        "(the data-parallel rendezvous timeout)")
            time.sleep(pause)
            pause = min(2 * pause, POLL_MAX_S)

    # ------------------------------------------------------------------ process group

    def process_group(self, backend: str | None = None, timeout_s: float | None = None) -> Any:
        """The trial's process group, created on first use (every rank must call this).

        Args:
            backend: ``"gloo"`` or ``"nccl"``; None picks nccl on a CUDA device and gloo on a CPU one. A
                later call returns the existing group and must not ask for another backend.
            timeout_s: Collective timeout in seconds (None: the rendezvous timeout).

        Returns:
            A ``torch.distributed.ProcessGroup`` of this trial's ranks.

        Raises:
            ConfigError: For an unknown backend, nccl on a CPU device, or a second call with another backend.
        """
        cuda = self.device.startswith("cuda")
        chosen = check_group_args(backend, timeout_s, self.device)
        with self._lock:
            if self._group is not None:
                if backend is not None and backend != self.backend:
                    raise ConfigError(f"init_process_group: this trial's group already uses {self.backend!r}; "
                                      f"got backend={backend!r}")
                return self._group
            self._group = self._make_group(chosen, cuda, timeout_s)
            self.backend = chosen
            return self._group

    def _make_group(self, backend: str, cuda: bool, timeout_s: float | None) -> Any:
        import torch
        import torch.distributed as dist

        timeout = self._timeout if timeout_s is None else datetime.timedelta(seconds=timeout_s)
        store = dist.PrefixStore("group/", self.store)
        group = dist.ProcessGroup(store, self.rank, self.world_size)
        kinds = dist.ProcessGroup.BackendType
        # gloo serves CPU tensors in either case (and CUDA ones when it is the chosen backend).
        gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), self.rank, self.world_size, timeout)
        self._backends.append(gloo)
        group._register_backend(torch.device("cpu"), kinds.GLOO, gloo)
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options.is_high_priority_stream = False
            options._timeout = timeout
            options.global_ranks_in_group = list(range(self.world_size))
            options.group_name = f"fluidsalus/{self._key}"
            nccl = dist.ProcessGroupNCCL(dist.PrefixStore("nccl/", store), self.rank, self.world_size, options)
            self._backends.append(nccl)
            group._register_backend(torch.device("cuda"), kinds.NCCL, nccl)
            group._set_default_backend(kinds.NCCL)
        else:
            if cuda:
                group._register_backend(torch.device("cuda"), kinds.GLOO, gloo)
            group._set_default_backend(kinds.GLOO)
        group._set_group_name(f"fluidsalus/{self._key}")
        return group

    def close_group(self) -> None:
        """Close this rank's connections, so that a peer waiting in a collective with it fails at once.

        gloo closes a rank's sockets only when its backend object is destroyed (``abort()`` and ``shutdown()``
        leave them open while anything refers to the group). So this aborts the backends, drops this object's
        references and, when the backends still live on (a DDP module refers to its group through reference
        cycles), collects garbage. It is called once the trainable has returned or raised, when its own
        references are gone; a group the trainable kept elsewhere (a global) stays open, and its peers then fail
        at the collective timeout instead. A rank's own pending collective is never woken by this: it ends at
        its timeout.
        """
        with self._lock:
            backends, self._backends, self._group = self._backends, [], None
        alive = [weakref.ref(backend) for backend in backends]
        while backends:  # popped, so that no local name keeps a backend alive
            try:
                backends.pop().abort()
            except Exception:  # noqa: BLE001,S110 - a group that is already broken has nothing left to close
                pass
        if any(ref() is not None for ref in alive):  # held in a reference cycle (DDP): a full collection
            gc.collect()

    # ------------------------------------------------------------------ end protocol

    def worker_failures(self) -> list[str]:
        """The errors of workers that failed on their own (not because the trial ended), as ``rank r: text``."""
        import torch.distributed as dist

        failures = []
        for rank in range(1, self.world_size):
            try:
                if self.store.check([f"error/{rank}"]):
                    failures.append(f"rank {rank}: {self.store.get(f'error/{rank}').decode()}")
            except dist.DistError:
                break
        return failures

    def finish(self, outcome: str, error: str | None, trace: str | None, peer_gone: bool = False,
               peers_lost: threading.Event | None = None,
               stop_requested: threading.Event | None = None) -> tuple[str, str | None, str | None]:
        """End this rank's part of the trial and return its (outcome, error, traceback) as the host reports it.

        Rank 0 announces the end, closes its connections (workers blocked in a collective with it fail at
        once), waits up to the timeout for its workers to end, and fails the trial with the errors of workers
        that failed on their own. A worker that has not joined yet is waited for too (up to the timeout for its
        join, then for its end), unless rank 0 failed or the driver asked it to stop (``stop_requested``, also
        while rank 0 waits; the driver stops such a worker after rank 0's end): a trainable with no collective
        can end on rank 0 before a worker slower to start met it, and that worker then runs its function through
        rank 0's decisions, all written, to the same end (the driver's stop at rank 0's end ended it before its
        function ran). A worker that failed on its own records its error for rank 0; a
        worker whose collective broke after rank 0 ended (:func:`broken_by_leader_end`) counts as stopped. A
        worker's own error after rank 0 ended (rank 0 ran ahead of it, or its code after the last report raised)
        is its own still: it was counted as stopped, and the trial ended completed with the error nowhere.

        Args:
            outcome: This rank's outcome.
            error: Its error text, or None.
            trace: Its traceback, or None.
            peer_gone: The exception that ended it says a peer went away (:func:`broken_by_leader_end`; the host
                tells it, and keeps no reference to the exception, whose frames would keep the process group
                open and its peers blocked in their collectives until gloo's timeout).
            peers_lost: On rank 0: set when the driver found a worker's device dead (its process killed, its node
                gone; ``TrialSession.peers_lost``). Rank 0 then waits for no worker: a dead process never says it
                ended, and the wait would last the whole rendezvous timeout (300 s by default) while the driver
                waits for this end to restart the trial.
            stop_requested: On rank 0: set when the driver asked the trial to stop (``TrialSession.stop_requested``,
                also set with ``peers_lost``). Rank 0 then waits only for the workers that have joined.
        """
        import torch.distributed as dist

        if self.leader:
            try:
                self.store.set("end", outcome)
            except dist.DistError:
                pass
            self.close_group()
            late_joins = outcome in (OUT_COMPLETED, OUT_STOPPED) and not (stop_requested and stop_requested.is_set())
            for rank in range(1, self.world_size):
                try:
                    joined = self.store.check([f"joined/{rank}"])
                    if not joined and late_joins:
                        joined = self._wait(f"joined/{rank}", None, self.timeout_s, f"worker rank {rank} to start",
                                            abandon=stop_requested) is not None
                    if joined:
                        self._wait(f"exited/{rank}", None, self.timeout_s, f"worker rank {rank} to end",
                                   abandon=peers_lost)
                except DataParallelError as e:
                    error = f"{error}; {e}" if error else str(e)
                    outcome = OUT_ERRORED
            failures = self.worker_failures()
            if failures:
                outcome = OUT_ERRORED
                firsts = [f.splitlines()[0] for f in failures]
                if error and peer_gone:
                    # Rank 0's own error is its collective, broken by the worker that failed: the worker's error
                    # leads, so that the trial's error has its type (it was rank 0's gloo RuntimeError)
                    rank, _, own = firsts[0].partition(": ")
                    error = f"{own} (data-parallel worker {rank} failed; rank 0: {error})"
                    if len(firsts) > 1:
                        error += "; data-parallel worker failed: " + "; ".join(firsts[1:])
                else:
                    text = "data-parallel worker failed: " + "; ".join(firsts)
                    error = f"{error}; {text}" if error else text
                trace = "\n".join([trace or "", *failures])
            return outcome, error, trace
        failed = outcome in (OUT_ERRORED, OUT_OOM)
        try:
            leader_ended = self.store.check(["end"])
        except dist.DistError:
            leader_ended = True
        # Its collectives broke because rank 0 had ended: the trial stopped under it, and the broken collective's
        # error is not the worker's failure (rank 0 stops at a fine boundary, while a worker ahead of it may
        # already wait in the iteration's collective).
        broken = failed and leader_ended and peer_gone
        if failed and not broken:
            try:  # (rank 0 reads it while it waits for this rank to exit)
                self.store.set(f"error/{self.rank}", f"{error}\n{trace or ''}")
                self.store.set("failed", str(self.rank))
            except dist.DistError:
                pass  # rank 0 is gone: the error stays in this rank's own end (its worker_end event)
        self.close_group()
        try:
            self.store.set(f"exited/{self.rank}", outcome)
        except dist.DistError:
            pass
        if broken:
            return OUT_STOPPED, None, None
        return outcome, error, trace


def check_group_args(backend: str | None, timeout_s: float | None, device: str) -> str:
    """Check ``init_process_group``'s arguments, on any number of ranks (a trainable tried on one device failed
    only once the planner gave it two), and return the backend to use.

    Args:
        backend: ``"gloo"``, ``"nccl"`` or None (nccl on a CUDA device, gloo on a CPU one).
        timeout_s: The collective timeout, or None.
        device: The trial's torch device (``"cpu"``, ``"cuda:0"``).

    Raises:
        ConfigError: For an unknown backend, nccl on a CPU device, or a timeout that is not positive.
    """
    cuda = device.startswith("cuda")
    chosen = backend if backend is not None else ("nccl" if cuda else "gloo")
    if chosen not in BACKENDS:
        raise ConfigError(f"init_process_group: backend must be one of {BACKENDS} or None; got {backend!r}")
    if chosen == "nccl" and not cuda:
        raise ConfigError(f"init_process_group: backend 'nccl' needs a CUDA device; this trial runs on "
                          f"{device!r} (use 'gloo' or None)")
    if timeout_s is not None and not timeout_s > 0:
        raise ConfigError(f"init_process_group: timeout_s must be > 0 seconds; got {timeout_s!r}")
    return chosen


#: Words of the errors a collective raises when a peer's connection goes away (gloo's "Connection closed by
#: peer" / "reset by peer", a broken pipe): a worker whose collective broke so, after rank 0 ended, stopped.
_BROKEN_PEER_WORDS = ("closed by peer", "reset by peer", "broken pipe", "connection refused")
#: How many exceptions of a chain (``__cause__``/``__context__``) :func:`broken_by_leader_end` looks at.
_CHAIN_DEPTH = 8


def broken_by_leader_end(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from (its ``__cause__``/``__context__`` chain), is a
    collective (or the rendezvous store) failing because a peer went away: a ``torch.distributed`` error, this
    module's :class:`DataParallelError`, or a ``RuntimeError`` that says so (gloo raises plain ``RuntimeError``s).
    A worker's own error (a ``ValueError`` of its code, a ``RuntimeError`` about something else) is not."""
    import torch.distributed as dist

    seen = 0
    while exc is not None and seen < _CHAIN_DEPTH:
        if isinstance(exc, (DataParallelError, dist.DistError)):
            return True
        if isinstance(exc, RuntimeError) and any(word in exception_text(exc).lower() for word in _BROKEN_PEER_WORDS):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _wait_for_server(host: str, port: int, timeout_s: float, cancelled: threading.Event | None, rank: int,
                     world_size: int) -> None:
    """Wait until rank 0's store accepts TCP connections, checking ``cancelled`` between tries.

    A worker may start before rank 0 (it then waits) or after rank 0 has already ended (its trial stopped or
    failed at once). A TCPStore client would retry inside torch for the whole timeout, deaf to a stop and
    logging every try; a plain socket try is silent and lets a stopped worker end at once.

    Raises:
        StopTrial: ``cancelled`` was set (the driver stopped this rank: its trial's rank 0 has ended).
        DataParallelError: Nothing answered for ``timeout_s`` seconds.
    """
    start, pause = time.monotonic(), POLL_MIN_S
    while True:
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
            return
        except OSError:
            pass
        if cancelled is not None and cancelled.is_set():
            raise StopTrial()
        if time.monotonic() - start > timeout_s:
            raise DataParallelError(f"rank {rank} of {world_size} waited {timeout_s:g} s for rank 0's rendezvous "
                                    f"at {host}:{port} (the data-parallel rendezvous timeout)")
        time.sleep(pause)
        pause = min(2 * pause, CONNECT_POLL_MAX_S)
