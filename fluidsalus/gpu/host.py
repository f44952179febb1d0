"""The device host: the Salus-style lane runtime of one device, with no Ray in sight.

The Ray actor of :mod:`fluidsalus.gpu.actor` is a thin wrapper around one :class:`DeviceHost`, so the
trial-running logic is tested in-process in milliseconds.

**Lanes.** A submitted trial is admitted to a lane by :class:`~fluidsalus.gpu.lanes.LaneManager` (the
safety condition ``sum(P) + P_j + max(T) <= C_l``, best fit), or waits in the device queue until memory
frees. Each trial runs in its own thread, so a function trainable keeps its Python stack. The trials of one
lane **time-slice**: only the lane's turn holder computes. At each iteration boundary (``report()``, or
``fluidsalus.step()`` once ``quantum_ms`` has passed), the holder hands the turn to the ready trial the
lane policy picks (``fifo``, ``fair``, ``rr``, ``pack``, ``srtf``, ``priority``). It hands over through a
per-trial event, so a switch wakes exactly one thread and moves no memory: the waiting trial's model and
optimizer stay where they are. Lanes run side by side; there are at most ``max_lanes`` of them (a CPU
device's compute slots), so a device never runs more compute threads than that. A trial paused at its
budget gives the turn away but stays in its lane (resident). A trial that ends leaves its lane; an empty
lane dissolves, and waiting trials are admitted.

Protocol with the driver:

- :meth:`DeviceHost.submit` admits or queues :class:`TrialSpec` s.
- Trials report through :mod:`fluidsalus.session`. Each result becomes an event in the host's outbox, and so
  do lane events (open/close/resize, admit/leave/wait, every switch with its latency). ``report()`` never
  waits for the driver: a stop rule is evaluated right in the trial thread, and a stop decision from the
  driver takes effect at the trial's next boundary.
- :meth:`DeviceHost.poll` long-polls the outbox and returns every event gathered so far, in order, as one
  batch (so a busy device sends one message per driver round trip, not one per report).
"""

from __future__ import annotations

import logging
import numbers
import os
import pickle
import socket
import sys
import threading
import time
import traceback as tb
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.distributed._common import DEFAULT_TIMEOUT_S as DEFAULT_DISTRIBUTED_TIMEOUT_S
from fluidsalus.distributed._common import data_parallel_timeout
from fluidsalus.errors import ConfigError, SessionError, exception_text, pickle_exception
from fluidsalus.gpu import lanes as ln
from fluidsalus.gpu import memory as mem
from fluidsalus.gpu import nvml
from fluidsalus.gpu import rng as rngs
from fluidsalus.gpu.allocator import is_refusal
from fluidsalus.gpu.arena import DEFAULT_MEMORY_MODE, ArenaBackend, ArenaOutOfMemoryError, host_arenas
from fluidsalus.gpu.device import host_memory_bytes
from fluidsalus.gpu.hints import shared_process_hint
from fluidsalus.gpu.output import end_trial_output
from fluidsalus.gpu.policies import DEFAULT_POLICY, TrialView, choose, get_policy
from fluidsalus.result import lookup_metric
from fluidsalus.session import (
    BudgetKeyError,
    StopTrial,
    TrialContext,
    TrialSession,
    inherit_sessions_in_started_threads,
    raised_as_stop_unwound,
    set_session,
    start_outside_trials,
)
from fluidsalus.store import DB_FILENAME, ERROR_AFTER_STOP_EVENT

logger = logging.getLogger(__name__)

#: Environment variables that cap the compute threads of torch (and the BLAS/OpenMP it uses) at import.
_THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

# Event kinds sent from a device to the driver. Each event is a tuple whose first item is its kind.
EV_START = "start"  # (EV_START, trial_id, attempt, ts)
EV_RESULT = "result"  # (EV_RESULT, trial_id, attempt, ts, metrics, paused_at_budget, stopped_by_rule)
#: (EV_END, trial_id, attempt, ts, outcome, error, traceback[, error_pickle[, unwinding_stop]]): ``error_pickle`` is
#: the exception a trial raised, pickled (:func:`~fluidsalus.errors.pickle_exception`), or None; ``unwinding_stop``
#: is True when the trainable raised that error as a stop of the driver's unwound it (a ``finally:`` or an ``except``
#: that failed on its way out): only the driver knows whether that stop ended the trial for good (then it ends
#: stopped, as a Ray Tune trial, whose actor Ray stops unseen) or moved it, and judges (``Executor._handle``). Ends
#: from elsewhere have neither.
EV_END = "end"
EV_FATAL = "fatal"  # (EV_FATAL, trial_id, attempt, ts, message): a run-level configuration error
#: (EV_CALL, trial_id, attempt, ts, call_id, method, args, label): the trial waits for answer(); ``label`` names the
#: call in goodput's records (the caller's ``label``, else ``method``): its ``driver_wait`` here and, when the driver's
#: loop is busy answering it, the driver's ``driver_busy`` spell (an Optuna ``should_prune`` carrying held reports
#: travels as ``optuna.after_reports`` and is named ``optuna.should_prune`` in both)
EV_CALL = "call"
EV_LANE = "lane"  # (EV_LANE, trial_id | None, attempt | None, ts, kind, data): lane activity, for goodput
#: (EV_CHECKPOINT, trial_id, attempt, ts, iteration, checkpoint_dir_name): a checkpoint of an iteration whose
#: result was already sent without one (``TrialSession.attach_checkpoint``)
EV_CHECKPOINT = "checkpoint"

#: An ``EV_LANE`` kind, stored as an event of that kind: a trial waited for the driver's answer to its calls
#: (``call_driver``: an Optuna trial's ``suggest``/``should_prune``, a verdict on a result). Its lane's turn went to
#: a neighbour meanwhile; a device with none idled, waiting for the driver (``fluidsalus.goodput.IDLE_DRIVER``).
#: The device gathers a trial's waits and sends them as one event (:data:`DRIVER_WAITS_HELD_S`): ``data["waits"]``
#: is ``[[offset_s, wait_s], ...]``, each wait from ``ts + offset_s`` for ``wait_s`` seconds (to the microsecond),
#: ``data["methods"]`` the method of each of those waits (the call's ``label`` where its front end gave one: an
#: Optuna ``should_prune`` carrying held reports is ``optuna.should_prune``, not ``optuna.after_reports``; stores
#: before it lack it), ``data["wait_s"]`` their sum and ``data["calls"]`` a count per method. (The first version
#: stored one event per call, with ``data["wait_s"]`` and ``data["method"]``: twice the events of an Optuna study,
#: h117's F3.)
DRIVER_WAIT_EVENT = "driver_wait"
#: How long a device holds a trial's waits for the driver before it sends them (as one :data:`DRIVER_WAIT_EVENT`):
#: when a call is answered, or the driver polls, and the trial's first held wait is this old; and always when the
#: trial's attempt ends. A live ``inspect`` thus lacks at most the last second of a trial's waits (shown
#: ``between_turns`` meanwhile), and an actor's death or the run's stop (a Ctrl-C: the driver polls no more) loses
#: them, as it loses the device's last lane events.
DRIVER_WAITS_HELD_S = 1.0
#: An ``EV_LANE`` kind: the trial asked for the checkpoint it resumes from (``TrialSession.resume_checkpoint``), so
#: a restart from its checkpoint resumes it; the driver keeps it on the trial and stores no event of it.
LANE_RESUME_READ = "resume_read"
#: An ``EV_LANE`` kind: the trainable raised after the result its stop rule ended it at (a ``finally:`` or an
#: ``except`` that fails as the stop unwinds it; ``data``: ``error`` and ``traceback``). The trial ends stopped at that
#: result (its ``EV_END`` is ``OUT_STOPPED``), as a Ray Tune trial does; the driver stores the event and warns. The
#: driver stores one of its own, with ``moved``, for an error raised as a stop of its own unwound the trial (EV_END's
#: ``unwinding_stop``).
LANE_ERROR_AFTER_STOP = ERROR_AFTER_STOP_EVENT  # (stored under this kind: store.ERROR_AFTER_STOP_EVENT)
#: An ``EV_LANE`` kind: a warning for the script's author given in the trial (:func:`fluidsalus.session.warn_user`;
#: ``data``: ``message``, ``category`` and the user's ``filename``, ``lineno`` and ``module``); the driver gives it
#: once per run and stores no event of it.
LANE_WARNING = "warning"

# Outcomes of EV_END.
OUT_COMPLETED = "completed"  # the trainable returned
OUT_STOPPED = "stopped"  # the stop rule fired or the driver stopped it
OUT_ERRORED = "errored"  # the trainable raised
OUT_OOM = "oom"  # ran out of memory: re-admitted with a larger estimate, never sent to the driver as an end
OUT_WITHDRAWN = "withdrawn"  # taken back before it began (DeviceHost.withdraw): the driver places it again

#: Default ``quantum_ms``: the least time a trial computes before ``fluidsalus.step()`` hands its lane over.
#: Salus switches at iteration granularity; a quantum of a few milliseconds keeps a switch (~0.1 ms here)
#: a small share of the time while letting long iterations interleave.
DEFAULT_QUANTUM_MS = 5.0
#: Iterations at the start of each trial (and after each re-admission) that measure its memory, as DESIGN.md's
#: profiling rule says ("the first iterations measure time and memory"). Three boundaries see the model, the
#: optimizer state created by the first step, and one steady iteration.
PROFILE_ITERATIONS = 3


@dataclass
class TrialSpec:
    """Everything a device needs to start (or restart) one trial.

    A data-parallel trial on k devices (see :mod:`fluidsalus.distributed`) is k specs, one per device, with
    the same ``trial_id``, ``attempt``, ``config``, ``checkpoint_path`` and ``budget``, ``world_size = k``,
    ranks ``0 .. k-1`` and one ``rendezvous`` address (``DeviceActor.free_port()`` on rank 0's actor).

    **Rank 0** is the trial as the driver sees it: its events (start, results, end, calls) are those of a
    one-device trial. **A rank > 0 is a worker**: it runs the same trainable and follows rank 0 at each
    ``report()`` (it continues, pauses at the budget, resumes or stops when rank 0 does). It sends no
    ``EV_START``/``EV_RESULT``/``EV_END``: its start and end are ``EV_LANE`` events of kind
    ``"worker_start"`` and ``"worker_end"`` whose data holds ``rank`` and ``world_size`` (and, at the end,
    ``outcome``, ``error`` and ``traceback``). Rank 0 sends its ``EV_END`` only after every worker has ended
    (or after the rendezvous timeout), and a worker's error is added to rank 0's error text.

    Attributes:
        result_totals: Ray's ``timesteps_total``/``episodes_total`` of the result ``checkpoint_path`` was taken at,
            which a restart continues from (``TrialSession``).
        rank: This spec's rank in its trial (0 for an ordinary trial).
        world_size: Devices (ranks) the trial runs on (1 for an ordinary trial).
        rendezvous: ``"ip:port"`` where rank 0 serves the trial's rendezvous store; required when
            ``world_size > 1``.
        prefetched: The driver sent it ahead to a full device (its place action ``prefetch``). Until it has had
            its first turn it takes its lane's turn only when no other trial of the lane is ready or on its way to
            its first turn, that is when the lane would otherwise idle (the running trial ended, paused at its
            budget or waits for the driver; while the driver holds pauses, a pause only once the driver answered
            it and it stands, and a wait for a verdict on a result not at all: :meth:`DeviceHost.hold_pauses`).
            Once begun it time-slices like any other trial.
            Its ``EV_START`` is sent at its first turn, not at its admission; one withdrawn or stopped before
            that ends with no start.
        stop_state: For an attempt that continues a trial (a retry, a move, an exploit, a resume), the driver's
            copy of the run's stopper (its device view, pickled), which has seen every result of the trial: this
            attempt is judged by it instead of the device's own copy, which saw only the trials that ran here
            (a retry on the other device counted ``MaximumIterationStopper(6)``'s results afresh and ran to 9).
            None: the device's copy (a trial's first attempt).
        stop_seen_through: The trial's last iteration the run's stop rule has judged. An attempt that the engine
            itself restarted (a move, a preemption, a turn) goes on from the trial's last checkpoint, which may be
            older than its last result, and runs the iterations after it again; the stop rule does not judge those
            (it judged each once, as Ray's, whose trial never moves: a counting ``MaximumIterationStopper(18)``
            ended a trial moved at 14 from its checkpoint of 10 at 14), whatever its kind (a stopper, a function,
            a dict: one rule, as Ray wraps a function in a ``FunctionStopper``). 0 for a retry, whose results the
            stop rule judges again, as Ray's.
    """

    trial_id: str
    trial_name: str
    config: dict[str, Any]
    trial_dir: str
    attempt: int = 0
    checkpoint_path: str | None = None
    start_iteration: int = 0
    time_total_offset: float = 0.0
    result_totals: dict[str, float] = field(default_factory=dict)
    budget: float | None = None
    priority: float = 0.0
    rank: int = 0
    world_size: int = 1
    rendezvous: str | None = None
    prefetched: bool = False
    stop_state: bytes | None = None
    stop_seen_through: int = 0


@dataclass
class HostSettings:
    """Per-run settings of a device host.

    Attributes:
        experiment_name: Shown to trainables through ``get_context()``.
        device: Torch device string trials use (``"cpu"``, ``"cuda:0"``).
        max_lanes: Lanes that may exist (and run) at once: the compute slots of a CPU device.
        capacity_bytes: Memory the device's lanes may reserve.
        trial_estimate: ``(P, T)`` bytes assumed for a trial until it is measured.
        policy: The lane policy's name (see :mod:`fluidsalus.gpu.policies`).
        quantum_ms: Least compute time before ``fluidsalus.step()`` hands the lane over.
        torch_threads: Intra-op threads torch may use in this process (None leaves torch alone). With one
            thread per trial and at most ``max_lanes`` trials computing, the device never runs more compute
            threads than its slots. torch is not imported for this: a trainable that never uses torch never
            pays for its import.
        stop: The run's stop rule, evaluated in the trial thread at each report (see ``stop_rule``).
        resources: What ``get_context().get_trial_resources()`` reports.
        time_attr: The result key budgets are measured in.
        verdict_from: From this ``result[time_attr]`` on, each result waits for the searcher's decision on it
            (the searcher's ``verdict_from``; see ``TrialSession``). None: results never wait.
        profile_memory: Measure each trial's P and T during its first :data:`PROFILE_ITERATIONS` iterations
            (T only in an iteration no other trial computed during; up to as many more iterations wait for one
            when none was) and re-fit its lane; False keeps ``trial_estimate`` (changed only by an OOM).
        memory_mode: How the device knows and bounds its trials' memory (:mod:`fluidsalus.gpu.arena`):
            ``"caching"`` (profiling as above, PyTorch's caching allocator on a GPU), ``"arena"`` (the lane
            allocator's arenas: exact P and T read at every boundary, hard caps; needs the ``arena`` backend of
            :class:`DeviceHost`) or ``"auto"`` (arena when a backend is given). The device actor resolves it.
        distributed_timeout_s: How long a rank of a data-parallel trial waits for its peers (rendezvous,
            collectives, rank 0's decision at a report, the workers' end) before it fails; see
            ``fluidsalus.distributed.DEFAULT_TIMEOUT_S``.
        experiment_dir: The experiment's folder as the driver made it (its store is there). The first trial on
            the device checks that it sees the store there, since every node must share ``storage_path``:
            otherwise the run ends with a :class:`StorageNotSharedError`, as Ray Tune fails a trial whose node
            does not see the experiment's storage. None: not checked.
    """

    experiment_name: str
    device: str = "cpu"
    max_lanes: int = 1
    capacity_bytes: int = 0
    trial_estimate: tuple[int, int] = (0, 0)
    policy: str = DEFAULT_POLICY
    quantum_ms: float = DEFAULT_QUANTUM_MS
    torch_threads: int | None = None
    stop: Callable[[str, Mapping[str, Any]], bool] | None = None
    resources: dict[str, float] = field(default_factory=dict)
    time_attr: str = "training_iteration"
    verdict_from: float | None = None
    profile_memory: bool = True
    memory_mode: str = DEFAULT_MEMORY_MODE
    distributed_timeout_s: float = DEFAULT_DISTRIBUTED_TIMEOUT_S
    experiment_dir: str | None = None


@dataclass
class _Running:
    """A trial admitted to a lane (its thread may be computing, waiting for its turn, or paused)."""

    spec: TrialSpec
    session: TrialSession
    thread: threading.Thread
    lane_id: int
    seq: int
    turn: threading.Event = field(default_factory=threading.Event)
    used_time_s: float = 0.0
    iterations: int = 0
    turn_started: float = 0.0
    memory: mem.MemoryEstimate = field(default_factory=mem.MemoryEstimate)
    window: tuple[int | None, int, int] | None = None  # (rss at start, grant seq, lanes computing) of an iteration
    suspect_t: int | None = None  # an RSS-measured T that alone would not fit the device, awaiting a second look
    readmitted: threading.Event | None = None  # set when a trial that had to wait for memory is placed again
    wait_cancelled: bool = False  # stopped while it waited for memory (readmitted set without a placement)
    began: bool = False  # it has been given its lane's turn: its code may have run
    left: bool = False  # it ended and left its lane (_leave_locked): a thread of it still away gets no turn back
    rngs: rngs.RngState | None = None  # its global random generators, kept while another trial holds them
    withdrawn: bool = False  # taken back before it began (:meth:`DeviceHost.withdraw`): it ends without running


#: The start of the warning torch gives once per process when a thread asks for its cuBLAS handle before it has a
#: current CUDA context (a regular expression for :func:`warnings.filterwarnings`).
CUBLAS_NO_CONTEXT_WARNING = "Attempting to run cuBLAS, but there was no current CUDA context"


class StreamsByHandle:
    """One CUDA stream per cuBLAS handle: the streams trials run on in caching mode.

    torch keeps a cuBLAS workspace (32 MiB on Hopper) for every (handle, stream) pair that ran a GEMM and frees
    none of them. cuBLAS handles belong to threads (a finished thread's handle goes to the next thread), and
    each trial runs in a thread of its own; had trials run on their lane's stream, every pairing of a handle
    with a lane stream would keep a workspace, and on an H200 a sweep of 64 small trials held 3 GiB of them
    (docs/benchmarks.md). With one stream per handle a handle meets only its own stream (and the default
    stream): two workspaces per handle, however long the sweep. Threads alive at the same time have different
    handles, so trials running side by side still run on different streams.

    Arena mode keeps one stream per lane instead: its arenas are bound to the lane's stream (docs/allocator.md).

    Args:
        make_stream: Makes a new stream (``torch.cuda.Stream`` on the device).
    """

    def __init__(self, make_stream: Callable[[], Any]) -> None:
        self._make_stream = make_stream
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()

    def stream_for(self, handle: int) -> Any:
        """The stream of cuBLAS handle ``handle`` (made on its first use).

        Args:
            handle: The calling thread's cuBLAS handle (``torch.cuda.current_blas_handle()``).

        Returns:
            The same stream for the same handle, a different one for each other handle.
        """
        with self._lock:
            stream = self._streams.get(handle)
            if stream is None:
                stream = self._streams[handle] = self._make_stream()
            return stream

    def __len__(self) -> int:
        return len(self._streams)


class LaneStreams:
    """The lanes' CUDA streams in arena mode: a new lane takes the stream the last closed lane gave back.

    torch's own pool hands out 32 streams in turn, so lanes opened one after another would meet up to 32 streams,
    and each new (cuBLAS handle, stream) pair keeps a workspace in the arena of the trial that made it. Reusing
    streams keeps them to the most lanes open at once, and a new trial in the reused stream's lane often gets the
    cuBLAS handle of the thread that just ended there (torch's handle pool is last in, first out too), so the
    pair recurs and nothing new is allocated.

    Args:
        make_stream: Makes a new stream (``torch.cuda.Stream`` on the device).
    """

    def __init__(self, make_stream: Callable[[], Any]) -> None:
        self._make_stream = make_stream
        self._spare: list[Any] = []
        self.made = 0

    def take(self) -> Any:
        """A stream for a lane that opens: the last one given back, else a new one."""
        if self._spare:
            return self._spare.pop()
        self.made += 1
        return self._make_stream()

    def give_back(self, stream: Any) -> None:
        """The stream of a lane that closed (None, when the lane never had one, is ignored)."""
        if stream is not None:
            self._spare.append(stream)


@dataclass
class _LaneTurn:
    """Whose turn it is in one lane, and who is ready for the next."""

    holder: str | None = None
    ready: dict[str, float] = field(default_factory=dict)  # trial_id -> ready since (perf_counter)
    released_at: float = 0.0
    released_by: str | None = None
    stream: Any = None  # the lane's CUDA stream on a GPU device in arena mode


class DeviceTooSmallError(RuntimeError):
    """A trial's measured memory exceeds its whole device: it fails (there is nothing to retry)."""


class StopRuleError(ConfigError):
    """The stop rule cannot be evaluated on a result (e.g. a stop key that no result has)."""


class StorageNotSharedError(ConfigError):
    """The experiment's folder is not visible where a trial runs: every node of the cluster must share
    ``storage_path`` (checkpoints written there would be lost with the node's own disk)."""


class _Withdrawn(Exception):
    """Ends a trial's thread that :meth:`DeviceHost.withdraw` took back before it began."""


class _Turns:
    """The session's handle on its lane (see :class:`TrialSession`).

    Attributes:
        session: The trial's session, whose threads make these calls (set once it is made): a thread of an attempt
            that ended gets no turn of the trial's next attempt on this device (an out-of-memory re-admission).
    """

    def __init__(self, host: DeviceHost, trial_id: str) -> None:
        self._host, self._trial_id = host, trial_id
        self.session: TrialSession | None = None

    def acquire(self) -> None:
        self._host._acquire(self._trial_id, self.session)

    def release(self, verdict: bool = False) -> None:
        self._host._release(self._trial_id, ready=False, verdict=verdict, session=self.session)

    def boundary(self, may_switch: bool = True) -> None:
        self._host._boundary(self._trial_id, may_switch, session=self.session)

    def step(self) -> None:
        self._host._step(self._trial_id, self.session)


def trial_ended_error(trial_id: str) -> SessionError:
    """The error a thread of a trial that has ended gets when it asks for the trial's lane turn: typically one the
    trial's function started and left in a call to the driver (an Optuna ``suggest_*`` or ``should_prune``, a
    ``call_driver``), or paused at a report, when it returned; the trial left its lane meanwhile."""
    return SessionError(f"trial {trial_id} has ended (its function returned) while a thread it started was away from "
                        "the trial's turn on its device (in a call to the driver, or paused at a report): that thread "
                        "cannot take the turn back, and it stops here. Join the threads a trainable starts before it "
                        "returns.")


def _shut_down(config: dict[str, Any]) -> Any:
    """The trainable of a device host that shut down (none runs there any more: ``DeviceHost.shutdown``)."""
    raise RuntimeError("this device host was shut down")


class DeviceHost:
    """The lane runtime of one device: admits, time-slices and runs trials of one trainable as threads.

    Args:
        trainable: The user's function trainable, ``f(config)``.
        settings: Run settings for this device.
        arena: Where the lane arenas live in arena mode (``settings.memory_mode``): the CUDA backend the device
            actor installs, or a host-memory backend in tests. None in caching mode.
    """

    def __init__(self, trainable: Callable[[dict[str, Any]], Any], settings: HostSettings,
                 arena: ArenaBackend | None = None) -> None:
        self._trainable = trainable
        self.settings = settings
        self._policy = get_policy(settings.policy)
        # Arena mode: the lane allocator's arenas follow the lanes, and P and T are read from it exactly.
        self._arenas = host_arenas(settings.memory_mode, arena)
        self._lanes = ln.LaneManager(settings.capacity_bytes, settings.max_lanes)
        self._lock = threading.Lock()
        self._outbox_ready = threading.Condition(self._lock)
        self._outbox: list[tuple[Any, ...]] = []
        self._outbox_wakes = False  # whether the outbox holds an event the driver should get now (_emit_locked)
        # Polls that took the outbox, and of those the ones the driver has handled (it polls again only after it
        # handled the last batch: its next poll says so): see await_delivery
        self._taken = 0
        self._handled = 0
        self._handled_ready = threading.Condition(self._lock)
        # (trial_id, attempt) -> its waits for the driver not sent yet: [asked, wait_s, method] (DRIVER_WAITS_HELD_S)
        self._waits: dict[tuple[str, int], list[tuple[float, float, str]]] = {}
        self._waiting: dict[str, TrialSpec] = {}  # admitted later, in the lane manager's queue order
        self._running: dict[str, _Running] = {}
        self._turns: dict[int, _LaneTurn] = {}
        # On a GPU the trials' streams (_use_stream): one per cuBLAS handle in caching mode, per lane in arena mode.
        self._handle_streams = StreamsByHandle(self._new_stream)
        self._warned_no_handle = False  # see _warn_no_handle
        self._lane_streams = LaneStreams(self._new_stream)
        if settings.device.startswith("cuda") and self._arenas is None:
            # A trial thread has no current CUDA context when it first asks for its cuBLAS handle: torch makes the
            # device's primary context current, as the trial's first CUDA call would, and warns once per process.
            warnings.filterwarnings("ignore", message=CUBLAS_NO_CONTEXT_WARNING)
        self._seq = 0
        self._calls: dict[int, list[Any]] = {}  # call id -> [event, answer, is_error]
        self._call_seq = 0
        self._grant_seq = 0  # counts every turn given anywhere on the device (for "ran alone" checks)
        self._hold_pauses = False  # see hold_pauses
        # Trial paused at its budget -> the poll that takes that result (its batch answered once the driver polls
        # again: _handled). Kept whether or not pauses are held: a pause that began before the driver said to hold
        # them holds a prefetched trial submitted after (hold_pauses)
        self._pauses: dict[str, int] = {}
        # Trials waiting for the driver's verdict on a result (a verdict call: answered when they take their turn
        # back, or end); kept whether or not pauses are held, as _pauses
        self._verdict_waits: set[str] = set()
        self._closed = False
        self._storage_seen = False  # the experiment's store was seen from this node (_check_storage)
        self._torch_configured = False
        # One lane: one trial runs at a time, so each can have the process's random generators to itself.
        self._own_rngs = settings.max_lanes == 1
        self._rng_owner: _Running | None = None  # whose streams the generators hold now
        inherit_sessions_in_started_threads()  # a thread a trial starts reports to that trial, as under Ray
        if settings.torch_threads is not None:
            # torch reads these when it is first imported; a torch imported earlier is set up in _run_trial.
            for var in _THREAD_ENV_VARS:
                os.environ[var] = str(settings.torch_threads)

    # ------------------------------------------------------------------ driver-facing

    def submit(self, specs: list[TrialSpec]) -> None:
        """Admit trials to lanes; those that do not fit wait in the device queue."""
        with self._lock:
            if self._closed:
                raise RuntimeError("device host is shut down")
            p, t = self.settings.trial_estimate
            for spec in specs:
                try:
                    placement = self._lanes.admit(spec.trial_id, p, t)
                except ln.TrialTooLargeError as e:
                    self._emit_lane_events_locked()
                    self._emit_locked((EV_END, spec.trial_id, spec.attempt, time.time(), OUT_ERRORED, str(e), None))
                    continue
                if placement is None:
                    self._waiting[spec.trial_id] = spec
                else:
                    self._start_locked(spec, placement.lane_id)
            self._emit_lane_events_locked()

    def stop(self, trial_ids: list[str], attempts: dict[str, int] | None = None, no_verdict: bool = False,
             peers_lost: bool = False) -> None:
        """Stop trials at their next boundary (at once if paused, or waiting for memory); waiting ones leave the queue
        stopped.

        Args:
            trial_ids: The trials.
            attempts: Only these attempts of the trials named here (a stop that arrives late must not hit a
                newer attempt); a trial not named here is stopped whatever its attempt.
            no_verdict: The stop is no verdict on these trials: the run's end, or the planner's move or preemption
                (``TrialSession.request_stop``).
            peers_lost: A data-parallel worker of these trials died with its device: their rank 0 ends without
                waiting for its workers (``TrialSession.request_stop``).
        """
        now = time.time()
        attempts = attempts or {}
        with self._lock:
            for tid in trial_ids:
                wanted = attempts.get(tid)
                spec = self._waiting.get(tid)
                if spec is not None and (wanted is None or spec.attempt == wanted):
                    self._end_waiting_locked(spec, OUT_STOPPED, now)
                    continue
                running = self._running.get(tid)
                if running is not None and (wanted is None or running.spec.attempt == wanted):
                    running.session.request_stop(no_verdict, peers_lost)
                    if running.readmitted is not None and not running.readmitted.is_set():
                        # It waits, in the lane queue, for memory to be placed again (its estimate grew): it
                        # leaves the queue and ends at once (_profile), instead of waiting for memory that may
                        # never free (what its searcher waits for may be this very trial's next result).
                        running.wait_cancelled = True
                        self._place_admitted_locked(self._lanes.leave(tid))
                        running.readmitted.set()
                        continue
                    turn = self._turns.get(running.lane_id)
                    if turn is not None:  # a held prefetched trial may take a free turn now, to end at once
                        self._grant_locked(turn)
            self._emit_lane_events_locked()

    def withdraw(self, trial_ids: list[str], attempts: dict[str, int]) -> None:
        """Take back trials that have not begun: no code of theirs has run, they wait for their first turn.

        Each such trial ends at once with outcome ``withdrawn`` (its admission undone), and the driver places it
        again: this is how a trial prefetched here, behind a running one, moves to a device that became idle,
        losing nothing. A trial that has had a turn (or another attempt) is left alone: its code may have run,
        so only a move from a checkpoint could take it elsewhere without losing work.

        Args:
            trial_ids: The trials.
            attempts: The attempt the driver means, for each.
        """
        now = time.time()
        with self._lock:
            for tid in trial_ids:
                wanted = attempts.get(tid)
                spec = self._waiting.get(tid)
                if spec is not None and spec.attempt == wanted:
                    self._end_waiting_locked(spec, OUT_WITHDRAWN, now)
                    continue
                r = self._running.get(tid)
                if r is None or r.spec.attempt != wanted or r.began or r.withdrawn or r.spec.world_size > 1:
                    continue
                r.withdrawn = True
                turn = self._turns.get(r.lane_id)
                if turn is not None:
                    turn.ready.pop(tid, None)
                r.turn.set()  # wakes its thread if it waits for a turn; it then ends (see _run_trial)
            self._emit_lane_events_locked()

    def _end_waiting_locked(self, spec: TrialSpec, outcome: str, now: float) -> None:
        """A trial waiting for memory (never started) leaves the device queue and ends with ``outcome``."""
        del self._waiting[spec.trial_id]
        self._lanes.leave(spec.trial_id)
        self._emit_locked((EV_END, spec.trial_id, spec.attempt, now, outcome, None, None))

    def request_checkpoint(self, trial_ids: list[str]) -> None:
        """Ask running trials for a checkpoint at their next iteration (a class ``Trainable`` saves there; a
        function trainable checkpoints when it chooses to, so the request does nothing to it)."""
        with self._lock:
            for tid in trial_ids:
                running = self._running.get(tid)
                if running is not None:
                    running.session.checkpoint_requested.set()

    def resume(self, budgets: dict[str, float | None]) -> None:
        """Give trials a new budget (None: to the end). One paused at its budget runs on; one still running (a
        restart redoing iterations from an earlier checkpoint) or still waiting for admission will pause at the
        new budget instead of the old one."""
        with self._lock:
            for tid, budget in budgets.items():
                running = self._running.get(tid)
                if running is not None:
                    self._pauses.pop(tid, None)  # answered: it runs on, the prefetched trial still waits
                    running.session.resume(budget)
                elif tid in self._waiting:
                    self._waiting[tid].budget = budget

    def hold_pauses(self, hold: bool) -> None:
        """Whether a prefetched trial that has not begun waits through its lane neighbour's pause at the budget
        until the driver has answered that pause (:meth:`poll`), instead of beginning at the pause; and through its
        neighbour's wait for the driver's verdict on a result (a verdict call: :meth:`_release`), until the neighbour
        takes its turn back or ends (an ASHA that decides at each result, an Optuna pruner).

        The driver holds pauses while another device is up, no trial waits in its queue and none can come: a device that
        frees a slot then has nothing to start, and only a prefetched trial that has not begun can still go there (a
        trial that has begun, without a checkpoint, cannot leave). Begun at a pause that ASHA answers with a promotion,
        it would time-slice one slot with the promoted trial to their ends while that device idled. Otherwise every
        freed slot gets a queued trial, and the prefetched trial begins at the pause, using the driver's round trip
        (which a pause that ends in a stop would otherwise leave idle).

        A pause or a verdict wait that began before the driver said to hold them holds too: the driver says so
        before it sends the first prefetched trial that would be held (``Executor._dispatch``), which may come
        after its neighbour's first driver call (the Optuna front end proposes a run's last trial once the others
        have started). The device keeps its pauses and verdict waits either way; this says whether they hold."""
        with self._lock:
            self._hold_pauses = hold
            if not hold:
                self._grant_lanes_of_locked([*self._pauses, *self._verdict_waits])

    def answer(self, call_id: int, value: Any, is_error: bool = False) -> None:
        """Deliver the driver's answer to a trial waiting in ``call_driver`` (an exception if ``is_error``)."""
        with self._lock:
            slot = self._calls.get(call_id)
            if slot is None:
                return
            slot[1], slot[2] = value, is_error
            slot[0].set()

    def _call(self, trial_id: str, attempt: int, method: str, args: tuple[Any, ...], label: str | None = None) -> Any:
        with self._lock:
            if self._closed:  # shut down: no driver answers now (shutdown answered the calls already waiting)
                raise StopTrial()
            self._call_seq += 1
            call_id = self._call_seq
            slot: list[Any] = [threading.Event(), None, False]
            self._calls[call_id] = slot
            asked = time.time()
            label = label or method
            self._emit_locked((EV_CALL, trial_id, attempt, asked, call_id, method, args, label))
        slot[0].wait()
        answered = time.time()
        with self._lock:
            del self._calls[call_id]
            if not self._closed:  # the wait, for goodput (held, then sent as a record with a later event)
                held = self._waits.setdefault((trial_id, attempt), [])
                held.append((asked, answered - asked, label))
                if answered - held[0][0] >= DRIVER_WAITS_HELD_S:
                    self._send_waits_locked((trial_id, attempt))
        if slot[2]:
            raise slot[1]
        return slot[1]

    def poll(self, max_wait_s: float) -> list[tuple[Any, ...]]:
        """Return all events gathered so far, waiting up to ``max_wait_s`` for one that wakes the driver (events
        that are only records, such as a lane switch, wait for the next that does, or for ``max_wait_s``).

        A pause at the budget is answered by the poll after the one that returned its result: the driver sends
        what its searcher decided (a promotion, a stop) with that poll, and the actor carries it out before it
        calls this. While pauses are held (:meth:`hold_pauses`), a prefetched trial waiting behind a pause that
        still stands then begins."""
        with self._lock:
            if self._handled < self._taken:  # (the driver polls again once it has handled the last batch)
                self._handled = self._taken
                self._handled_ready.notify_all()
                if self._pauses:  # (answered pauses that still stand: a prefetched trial held behind one may begin)
                    self._answered_locked([tid for tid, by in self._pauses.items() if by <= self._handled])
            if not self._outbox_wakes and max_wait_s > 0:
                self._outbox_ready.wait(max_wait_s)
            if self._waits:
                old = time.time() - DRIVER_WAITS_HELD_S
                for key in [k for k, held in self._waits.items() if held[0][0] <= old]:
                    self._send_waits_locked(key)
            out, self._outbox, self._outbox_wakes = self._outbox, [], False
            self._taken += 1
            return out

    def wake_poll(self) -> None:
        """Make the poll that waits now (or the next one) return at once with what the outbox holds: the driver's
        last look at a Ctrl-C, which takes the results held back (``trialgroup.executor.Executor._drain``)."""
        with self._lock:
            self._outbox_wakes = True
            self._outbox_ready.notify_all()

    def await_delivery(self, take: int) -> None:
        """Wait until the driver has handled the batch of the ``take``-th poll (it polls again: :meth:`poll`), or
        the host shuts down. A trial waits so at the result its stop rule ends it at
        (:meth:`TrialSession._wait_delivered`), before its trainable goes on to what may end the process."""
        with self._lock:
            while self._handled < take and not self._closed:
                self._handled_ready.wait()

    def _answered_locked(self, trial_ids: list[str]) -> None:
        """The driver has answered these pauses and they stand: a prefetched trial waiting in their lanes may
        begin."""
        for tid in trial_ids:
            del self._pauses[tid]
        self._grant_lanes_of_locked(trial_ids)

    def _grant_lanes_of_locked(self, trial_ids: Iterable[str]) -> None:
        """Give the free turns of the lanes of these trials (a prefetched trial held behind them may begin)."""
        for tid in trial_ids:
            r = self._running.get(tid)
            turn = self._turns.get(r.lane_id) if r is not None else None
            if turn is not None:
                self._grant_locked(turn)

    def _send_waits_locked(self, key: tuple[str, int]) -> None:
        """Queue the held waits for the driver of ``key`` (trial, attempt) as one :data:`DRIVER_WAIT_EVENT`."""
        held = self._waits.pop(key, None)
        if not held:
            return
        ts = held[0][0]
        calls: dict[str, int] = {}
        for _, _, method in held:
            calls[method] = calls.get(method, 0) + 1
        self._outbox.append((EV_LANE, key[0], key[1], ts, DRIVER_WAIT_EVENT, {
            "waits": [[round(asked - ts, 6), round(wait, 6)] for asked, wait, _ in held],
            "methods": [method for _, _, method in held],  # (beside "waits": a reader before them reads those)
            "wait_s": sum(wait for _, wait, _ in held), "calls": calls}))  # (a record: wakes no poll)

    def load(self) -> tuple[int, int, int]:
        """(computing, resident, queued) trial counts: resident includes trials paused at their budget."""
        with self._lock:
            return self._computing_locked(), len(self._running), len(self._waiting)

    def _computing_locked(self) -> int:
        """Trials holding a lane's turn now. Under the lock: lanes open and close under it, and iterating the
        table while another thread changes it failed a trial ("dictionary changed size during iteration")."""
        return sum(1 for turn in self._turns.values() if turn.holder is not None)

    def lanes(self) -> list[ln.LaneView]:
        """A snapshot of the device's lanes."""
        with self._lock:
            return self._lanes.lanes()

    def shutdown(self, timeout_s: float = 0.0) -> list[str]:
        """Stop every trial at its next boundary and drop the queue. Once no trial runs, the host lets its trainable
        go, with what it captured: a warm device process (``fluidsalus.trialgroup.warm``) keeps nothing of the run
        it served (the Optuna front end's view of the study's trials had stayed until the next run's start).

        Returns:
            The ids of trials still running after ``timeout_s`` (a trainable that never reports).
        """
        with self._lock:
            self._closed = True
            for tid in list(self._waiting):
                self._lanes.leave(tid)
            self._waiting.clear()
            for running in self._running.values():
                running.session.request_stop(no_verdict=True)
            for slot in self._calls.values():  # a trial waiting for the driver will not get an answer now
                slot[1], slot[2] = StopTrial(), True
                slot[0].set()
            self._handled_ready.notify_all()  # (nor will a trial waiting for its result's delivery)
            threads = [r.thread for r in self._running.values()]
        deadline = time.time() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.time()))
        with self._lock:
            if not self._running:
                self._trainable = _shut_down
            return list(self._running)

    # ------------------------------------------------------------------ lanes: turns

    def _view(self, trial_id: str, ready_since: float) -> TrialView:
        r = self._running[trial_id]
        budget = r.session.budget
        remaining = None if budget is None else max(0.0, budget - r.session.iteration)
        sec = r.used_time_s / r.iterations if r.iterations else None
        return TrialView(trial_id, r.seq, ready_since, r.used_time_s, r.iterations, remaining, sec,
                         r.spec.priority)

    def _grant_locked(self, turn: _LaneTurn) -> None:
        """Give a free lane's turn to the ready trial the policy picks."""
        if turn.holder is not None or not turn.ready:
            return
        eligible = [tid for tid in turn.ready if not self._held(tid)]
        if not eligible:  # only prefetched trials wait: one begins unless a trial ahead of it is still starting
            # or (pauses held) is paused at its budget until the driver answered, or waits for its verdict on a result
            if any(self._starting_ahead(tid) for tid in turn.ready) or (self._hold_pauses and (
                    self._pauses or self._verdict_waits) and self._pause_unanswered(turn)):
                return
            eligible = list(turn.ready)
        views = [self._view(tid, turn.ready[tid]) for tid in eligible]
        chosen = choose(self._policy, views)
        del turn.ready[chosen]
        turn.holder = chosen
        self._begin_locked(self._running[chosen])
        self._grant_seq += 1
        self._running[chosen].turn.set()

    def _begin_locked(self, r: _Running) -> None:
        """``r`` gets its lane's turn: it has begun. A prefetched trial's start is sent now, not at its admission:
        until this moment it waited without running (so the driver shows it as waiting, not running). One the
        driver stopped meanwhile gets the turn only to end without running: it has no start."""
        if not r.began and r.spec.prefetched and not r.session.stop_requested.is_set():
            self._emit_locked((EV_START, r.spec.trial_id, r.spec.attempt, time.time()))
        r.began = True

    def _held(self, trial_id: str) -> bool:
        """A prefetched trial that has not begun: it takes its lane's turn only when the lane would idle. One the
        driver stopped is not held: it takes the turn at the next boundary, to end there without running."""
        r = self._running[trial_id]
        return r.spec.prefetched and not r.began and not r.session.stop_requested.is_set()

    def _pause_unanswered(self, turn: _LaneTurn) -> bool:
        """Whether a trial of the lane of ``turn`` is paused at its budget, or waits for its verdict on a result,
        and the driver has not answered yet (while pauses are held, that holds a prefetched trial:
        :meth:`hold_pauses`)."""
        running = self._running
        return any(tid in running and self._turns.get(running[tid].lane_id) is turn
                   for tid in (*self._pauses, *self._verdict_waits))

    def _starting_ahead(self, trial_id: str) -> bool:
        """Whether a trial that is not prefetched shares ``trial_id``'s lane and has not begun: its thread is on
        its way to its first turn (submitted in the same batch, say), which comes before the prefetched one's."""
        lane_id = self._running[trial_id].lane_id
        return any(o.lane_id == lane_id and not o.began and not o.spec.prefetched and not o.withdrawn
                   for o in self._running.values())

    def _running_of(self, trial_id: str, session: TrialSession | None) -> _Running:
        """The running trial a thread of ``session``'s trial asks about its turn (None: the host's own call).

        Raises:
            SessionError: The trial (that attempt of it) has ended: :func:`trial_ended_error` (a bare ``KeyError``
                of its id before).
        """
        r = self._running.get(trial_id)
        if r is None or r.left or (session is not None and (r.session is not session or session.ended)):
            raise trial_ended_error(trial_id)
        return r

    def _acquire(self, trial_id: str, session: TrialSession | None = None) -> None:
        """Become ready and wait for the lane's turn (``session``: the calling thread's trial, see
        :meth:`_running_of`; a thread that waits as its trial leaves its lane gets that error too)."""
        with self._lock:
            self._verdict_waits.discard(trial_id)  # (answered: it takes the turn back before a prefetched trial)
            r = self._running_of(trial_id, session)  # (under the lock: the trial's end is marked, then it leaves)
            if r.withdrawn:
                return
            turn = self._turns[r.lane_id]
            if turn.holder != trial_id:
                turn.ready[trial_id] = time.perf_counter()
                self._grant_locked(turn)
        self._wait_turn(r, turn)

    def _wait_turn(self, r: _Running, turn: _LaneTurn) -> None:
        r.turn.wait()
        r.turn.clear()
        if r.withdrawn:  # woken by withdraw(), without a turn
            return
        if r.left:  # woken by the trial's end (a thread of it that was away as its function returned): no turn
            raise trial_ended_error(r.spec.trial_id)
        if self._own_rngs and self._rng_owner is not r:
            self._swap_rngs(r)
        turn = self._turns.get(r.lane_id, turn)  # the turn may have come in another lane (_spread_locked)
        self._enter_arena(r, turn)
        now = time.perf_counter()
        r.turn_started = now
        self._open_window(r)
        if turn.released_by is not None and turn.released_by != r.spec.trial_id:
            latency_ms = (now - turn.released_at) * 1e3
            with self._lock:
                self._emit_locked((EV_LANE, r.spec.trial_id, r.spec.attempt, time.time(), "switch",
                                   {"lane": r.lane_id, "from": turn.released_by, "latency_ms": latency_ms}),
                                  wake=False)
        turn.released_by = None

    def _swap_rngs(self, r: _Running) -> None:
        """In ``r``'s thread, at the start of its turn on a one-lane device, after another trial's: keep that
        trial's random generators for its next turn and give ``r`` its own (fresh ones at its first turn). The
        other trial is not running (one lane), so the swap races with nothing; it costs one
        :func:`~fluidsalus.gpu.rng.capture` and one :func:`~fluidsalus.gpu.rng.restore` (about 80 us with NumPy
        imported, its legacy generator's state being most of it) per change of hands, and nothing while a
        trial keeps its lane."""
        owner = self._rng_owner
        if owner is not None:
            owner.rngs = rngs.capture()
        rngs.restore(r.rngs)
        self._rng_owner = r

    def _enter_arena(self, r: _Running, turn: _LaneTurn) -> None:
        """Arena mode, at every turn start: charge this thread's allocations, and those on the lane's stream
        from threads without a tag (autograd's), to the trial (part of the switch, so of its latency)."""
        if self._arenas is None:
            return
        if self.settings.device.startswith("cuda"):
            self._use_stream(r.spec.trial_id)  # a trial that moved lanes runs on its new lane's stream
        self._arenas.enter(r.spec.trial_id, r.lane_id, turn.stream)

    def _release(self, trial_id: str, ready: bool, verdict: bool = False, session: TrialSession | None = None) -> None:
        """Hand the lane's turn on (:meth:`_release_locked`). ``verdict``: the trial waits for the driver's verdict
        on its result (:meth:`hold_pauses`: a prefetched trial of its lane waits through it while pauses are held).
        ``session``: see :meth:`_running_of`."""
        with self._lock:
            r = self._running_of(trial_id, session)
            if verdict:
                self._verdict_waits.add(trial_id)
            self._release_locked(r, ready)

    @staticmethod
    def _charge_turn(r: _Running) -> float:
        """Count the compute time of ``r``'s turn so far as used (what the ``fair`` and ``srtf`` policies read),
        and start its count again; returns the time now."""
        now = time.perf_counter()
        r.used_time_s += now - r.turn_started
        r.turn_started = now
        return now

    def _release_locked(self, r: _Running, ready: bool) -> None:
        """Hand the lane's turn on (to the policy's pick among the ready, maybe ``r`` itself if ``ready``)."""
        turn = self._turns.get(r.lane_id)
        if turn is None:  # the lane already dissolved (its last member failed out of memory)
            return
        if turn.holder != r.spec.trial_id:
            turn.ready.pop(r.spec.trial_id, None)
            return
        now = self._charge_turn(r)
        turn.holder, turn.released_at, turn.released_by = None, now, r.spec.trial_id
        if ready:
            turn.ready[r.spec.trial_id] = now
        self._grant_locked(turn)
        if turn.holder is None:  # nobody was ready: the lane idles, and the next start is not a switch
            turn.released_by = None

    def _boundary(self, trial_id: str, may_switch: bool = True, iteration: bool = True,
                  session: TrialSession | None = None) -> None:
        """An iteration boundary: measure memory while profiling, then switch if another trial is ready (and
        ``may_switch``). ``iteration=False``: a ``step()`` inside an iteration, which may switch but is no
        iteration (the ``rr`` and ``srtf`` policies count reports) and no profiling sample. ``session``: see
        :meth:`_running_of`."""
        r = self._running_of(trial_id, session)
        if iteration:
            r.iterations += 1
        if iteration and self._profiling(r):
            if self._profile(r):  # the trial changed lane or had to wait for memory: it holds a turn again
                return
        turn = self._turns[r.lane_id]
        with self._lock:
            keep = not may_switch or all(self._held(tid) for tid in turn.ready)  # (a prefetched trial waits)
            if keep:
                self._charge_turn(r)
            else:
                self._release_locked(r, ready=True)
        if keep:
            if iteration:  # (a step() inside the iteration keeps the window that measures the whole iteration)
                self._open_window(r)
            return
        self._wait_turn(r, turn)

    # ------------------------------------------------------------------ memory profiling (CPU devices)

    def _profiling(self, r: _Running) -> bool:
        # Arena mode reads the allocator at every boundary (one call): an estimate that grows is re-fitted at once.
        if not self.settings.profile_memory:
            return False
        if self._arenas is not None or r.memory.samples < PROFILE_ITERATIONS:
            return True
        # A T never measured (the trial never computed alone: a busy device) or held back (see _confirmed_rss_t)
        # waits for a solo iteration, for PROFILE_ITERATIONS more at most; after that the trial keeps its estimate.
        waiting = r.suspect_t is not None or r.memory.t_samples == 0
        return waiting and r.memory.samples < 2 * PROFILE_ITERATIONS

    def _memory_now(self) -> int | None:
        """Memory in use by this process on the device: RSS on a CPU device, allocated bytes on a GPU."""
        if self.settings.device.startswith("cuda"):
            return int(sys.modules["torch"].cuda.memory_allocated(self.settings.device))
        return mem.current_rss()

    def _memory_peak(self) -> int:
        if self.settings.device.startswith("cuda"):
            return int(sys.modules["torch"].cuda.max_memory_allocated(self.settings.device))
        return mem.peak_rss()

    def _memory_total(self) -> int:
        """All the memory of the device: a GPU's, or the machine's for a virtual CPU device (its lane capacity is
        only its share: an allocation past that may still succeed)."""
        if self.settings.device.startswith("cuda"):
            return int(sys.modules["torch"].cuda.get_device_properties(self.settings.device).total_memory)
        return host_memory_bytes()

    def _reset_memory_peak(self) -> None:
        if self.settings.device.startswith("cuda"):
            cuda = sys.modules["torch"].cuda
            # Before the process's first CUDA call there is no peak to reset, and torch refuses to ("Invalid
            # device argument"): the first window of the first trial on a GPU opens before it touches CUDA.
            if cuda.is_initialized():
                cuda.reset_peak_memory_stats(self.settings.device)
        else:
            mem.reset_peak_rss()

    def _open_window(self, r: _Running) -> None:
        """Start measuring the coming iteration (only while the trial is still being profiled; in arena mode
        the allocator's per-trial peak needs no window)."""
        if not self._profiling(r) or self._arenas is not None:
            r.window = None
            return
        with self._lock:
            computing, grant_seq = self._computing_locked(), self._grant_seq
        if computing == 1:
            self._reset_memory_peak()
        r.window = (self._memory_now(), grant_seq, computing)

    def _profile(self, r: _Running) -> bool:
        """Measure P (and T when the trial ran alone) at this boundary and re-fit its lane.

        P counts the modules, optimizers and tensors reachable from the trainable's local variables (on any
        device). T is the peak rise of the device's memory over an iteration during which no other trial
        computed on it, less P's growth: the process's RSS on a CPU device (see :mod:`fluidsalus.gpu.memory`),
        PyTorch's caching allocator's ``max_memory_allocated`` on a GPU (a measured solo iteration, the
        caching-allocator mode of docs/allocator.md). Otherwise T is not measured and the estimate keeps its T
        (the one the trial was admitted with, until a solo iteration measures it).

        In arena mode both are exact, whoever else runs: P is the trial's live bytes in the lane allocator and T
        its peak since the previous boundary less P (:meth:`LaneArenas.boundary`). They are read at every
        boundary and fed to the estimate during the first :data:`PROFILE_ITERATIONS` iterations, and after
        that whenever they exceed it.

        Returns:
            True when the trial moved to another lane or waited for memory (it holds a turn again).
        """
        if self._arenas is not None:
            exact = self._arenas.boundary(r.spec.trial_id)
            if r.memory.samples >= PROFILE_ITERATIONS and exact.p <= r.memory.p and exact.t <= r.memory.t:
                return False  # within the estimate: nothing to re-fit or report
            p, t, alone = exact.p, exact.t, None
        else:
            p = _reachable_bytes()
            t: int | None = None
            window = r.window
            alone = window is not None and window[2] == 1 and window[1] == self._grant_seq and window[0] is not None
            if alone:
                with self._lock:
                    computing = self._computing_locked()
                if computing == 1:
                    grown = max(0, p - r.memory.p) if r.memory.samples else p
                    measured = max(0, self._memory_peak() - window[0] - grown)  # type: ignore[operator]
                    t = self._confirmed_rss_t(r, p, measured)
        r.memory.update(p, t)
        with self._lock:
            self._emit_locked((EV_LANE, r.spec.trial_id, r.spec.attempt, time.time(), "memory",
                               {"p": r.memory.p, "t": r.memory.t, "alone": alone, "sample": r.memory.samples,
                                "exact": self._arenas is not None, "suspect_t": r.suspect_t}))
            decision = self._lanes.update_estimate(r.spec.trial_id, r.memory.p, r.memory.t)
            self._emit_lane_events_locked()
            self._place_admitted_locked(decision.admitted)
            if decision.action == ln.ACT_FAIL:  # not an OOM to retry: the device can never hold this trial
                raise DeviceTooSmallError(f"trial {r.spec.trial_id} needs more memory than the device has "
                                          f"(measured P={r.memory.p}, T={r.memory.t} bytes; device "
                                          f"{self.settings.capacity_bytes} bytes)")
            moved = decision.placement is not None and decision.placement.lane_id != r.lane_id
            if not moved and decision.action != ln.ACT_WAIT:
                return False
            self._charge_turn(r)  # it held its turn: counted now, as its lane may have dissolved as it left
            self._release_locked(r, ready=False)
            if decision.action == ln.ACT_WAIT:
                r.readmitted = threading.Event()
            else:
                r.lane_id = decision.placement.lane_id  # type: ignore[union-attr]
                self._turns.setdefault(r.lane_id, _LaneTurn())
        if r.readmitted is not None:
            r.readmitted.wait()  # the memory it needs is not free yet: it waits, holding no lane's turn
            r.readmitted = None
            if r.wait_cancelled:  # stopped meanwhile (stop()): it ends here, without a lane
                raise r.session._stop()
        self._acquire(r.spec.trial_id)
        return True

    def _confirmed_rss_t(self, r: _Running, p: int, measured: int) -> int | None:
        """The T to use from a solo iteration's measured peak (the process's RSS on a CPU device; on a GPU in
        caching mode the allocator's device-wide peak).

        Both belong to the whole process: a thread that is no trial's (Ray's, the caller's) may allocate
        during the window, and that cannot be told apart from the trial's own use. P is counted from the
        trial's own objects, so P alone over the device fails the trial at once; a T that alone would push
        the trial past the whole device (a failure, never retried) must be measured twice in a row first.
        The first such sample is held back (the estimate keeps its T) and the next solo iteration decides:
        over again, and the larger one is used (the trial fails); within the device, and it is used as
        measured.

        Args:
            r: The trial.
            p: Its P just counted.
            measured: T from this window's RSS peak.

        Returns:
            The T to fold into the estimate, or None while it is held back.
        """
        settled = p > self.settings.capacity_bytes or p + measured <= self.settings.capacity_bytes
        if settled:  # within the device, or P alone decides the failure: nothing to confirm
            r.suspect_t = None
            return measured
        if r.suspect_t is None:
            r.suspect_t = measured
            return None
        measured, r.suspect_t = max(measured, r.suspect_t), None
        return measured

    def _place_admitted_locked(self, placements: tuple[ln.Placement, ...] | list[ln.Placement]) -> None:
        """Start newly admitted trials; wake running ones that were waiting to be placed again."""
        for placement in placements:
            if placement.trial_id in self._waiting:
                self._start_locked(self._waiting.pop(placement.trial_id), placement.lane_id)
                continue
            r = self._running[placement.trial_id]
            r.lane_id = placement.lane_id
            self._turns.setdefault(r.lane_id, _LaneTurn())
            if r.readmitted is not None:
                r.readmitted.set()

    def _step(self, trial_id: str, session: TrialSession | None = None) -> None:
        r = self._running_of(trial_id, session)
        if (time.perf_counter() - r.turn_started) * 1e3 >= self.settings.quantum_ms:
            self._boundary(trial_id, iteration=False, session=session)

    # ------------------------------------------------------------------ lanes: membership

    def _emit_locked(self, event: tuple[Any, ...], wake: bool = True) -> None:
        """Queue an event for the driver's next poll.

        Args:
            event: The event.
            wake: Whether the poll returns for it now. False for an event that is only a record and asks nothing
                of the driver (a lane switch; a result the trial sends with its next call, see
                :meth:`TrialSession.report`'s ``deferred``): it goes with the next event that wakes the poll, or
                when the poll's wait ends. A trial that reports and then calls the driver at each step (an
                Optuna trial's ``report`` and ``should_prune``) thus costs one round trip per step, not two.
        """
        if event[0] == EV_END and self._waits:  # the attempt's held waits go first
            self._send_waits_locked((event[1], event[2]))
        self._outbox.append(event)
        if wake:
            self._outbox_wakes = True
            self._outbox_ready.notify_all()

    def _emit_lane_events_locked(self) -> None:
        now = time.time()
        for event in self._lanes.drain_events():
            kind, rest = event[0], event[1:]
            if kind in (ln.EV_LANE_OPEN, ln.EV_LANE_CLOSE, ln.EV_LANE_RESIZE):
                data = dict(zip(("lane", "capacity", "new_capacity"), rest, strict=False))
                if kind == ln.EV_LANE_RESIZE:
                    data = {"lane": rest[0], "old_capacity": rest[1], "capacity": rest[2]}
                self._emit_locked((EV_LANE, None, None, now, kind, data))
            else:
                trial_id = rest[0]
                attempt = self._attempt_of(trial_id)
                self._emit_locked((EV_LANE, trial_id, attempt, now, kind, {"detail": list(rest[1:])}))
            if kind == ln.EV_LANE_CLOSE:
                closed = self._turns.pop(rest[0], None)
                if closed is not None:
                    self._lane_streams.give_back(closed.stream)
        if self._arenas is not None:  # arena mode: the lane allocator follows every lane change
            for kind, data in self._arenas.sync(self._lanes.lanes()):
                trial_id = data.pop("trial_id", None)
                self._emit_locked((EV_LANE, trial_id, self._attempt_of(trial_id) if trial_id else None, now, kind,
                                   data))

    def _attempt_of(self, trial_id: str) -> int | None:
        if trial_id in self._running:
            return self._running[trial_id].spec.attempt
        if trial_id in self._waiting:
            return self._waiting[trial_id].attempt
        return None

    def _start_locked(self, spec: TrialSpec, lane_id: int) -> None:
        session = self._make_session(spec)
        thread = threading.Thread(target=self._run_trial, args=(spec, session), name=f"trial-{spec.trial_id}",
                                  daemon=True)
        self._turns.setdefault(lane_id, _LaneTurn())
        # Its estimate starts from the one it was admitted with: the guess, or what an out-of-memory error grew.
        estimate = self._lanes.estimate(spec.trial_id) if spec.trial_id in self._lanes else self.settings.trial_estimate
        # After an out-of-memory error its grown T is a floor: a smaller iteration measured first must not undo it
        floor = estimate[1] if self._lanes.oom_retries(spec.trial_id) else 0
        self._running[spec.trial_id] = _Running(spec, session, thread, lane_id, self._seq,
                                                memory=mem.MemoryEstimate(*estimate, t_floor=floor))
        self._seq += 1
        if spec.prefetched:
            pass  # its start is its first turn (_begin_locked): until then it waits without running
        elif spec.rank == 0:
            self._emit_locked((EV_START, spec.trial_id, spec.attempt, time.time()))
        else:  # a data-parallel worker: not the trial's start (see TrialSpec)
            self._emit_locked((EV_LANE, spec.trial_id, spec.attempt, time.time(), "worker_start",
                               {"rank": spec.rank, "world_size": spec.world_size}))
        start_outside_trials(thread)  # it may be admitted from a neighbour's report: it is not that trial's

    def _leave_locked(self, trial_id: str) -> None:
        """A trial ended: its turn goes on, it leaves its lane, and waiting trials are admitted."""
        r = self._running[trial_id]
        if self._rng_owner is r:
            self._rng_owner = None  # its streams end with it: the next holder need not keep them
        self._pauses.pop(trial_id, None)  # (a pause the driver answered with a stop)
        self._verdict_waits.discard(trial_id)  # (a verdict that stopped it)
        self._release_locked(r, ready=False)
        del self._running[trial_id]
        r.left = True
        r.turn.set()  # (a thread of it that waits for its turn back wakes to its end: _wait_turn)
        turn = self._turns.get(r.lane_id)
        if turn is not None:  # a prefetched trial may have waited for this one to begin
            self._grant_locked(turn)
        admitted = self._lanes.leave(trial_id) if trial_id in self._lanes else []  # not after an OOM failure
        self._place_admitted_locked(admitted)
        self._spread_locked()
        self._emit_lane_events_locked()

    def _spread_locked(self) -> None:
        """Work conservation: while the device runs fewer lanes than ``max_lanes``, a trial that waits for its
        turn in a shared lane takes a lane of its own (:meth:`LaneManager.split`).

        This happens when a trial ends and its lane dissolves while the trial that replaces it was admitted a
        moment earlier (it then shared a lane, since every lane was still open): without it, a compute slot
        would idle until the next admission. The moved trial waits at an iteration boundary and its memory is
        resident, so only its turn moves. Not in arena mode, where a lane is also an arena that holds the
        trial's blocks.
        """
        if self._arenas is not None:
            return
        for turn in list(self._turns.values()):
            for trial_id in sorted(turn.ready, key=turn.ready.__getitem__):
                if len(self._lanes.lanes()) >= self.settings.max_lanes:
                    return
                placement = self._lanes.split(trial_id)
                if placement is None:
                    continue
                del turn.ready[trial_id]
                r = self._running[trial_id]
                r.lane_id = placement.lane_id
                self._turns.setdefault(placement.lane_id, _LaneTurn()).holder = trial_id
                self._begin_locked(r)
                self._grant_seq += 1
                r.turn.set()

    def _make_session(self, spec: TrialSpec) -> TrialSession:
        attempt = spec.attempt
        trial_id = spec.trial_id
        worker = spec.rank > 0  # a data-parallel worker: rank 0 reports, decides and pauses for the trial

        delivered_by = [0]  # the poll whose batch carries the trial's last result (await_delivery)

        def sink(result: dict[str, Any], paused: bool, prompt: bool) -> None:
            if worker:
                return
            with self._lock:
                self._emit_locked((EV_RESULT, trial_id, attempt, time.time(), result, paused,
                                   session.stopped_by_rule), wake=prompt)
                delivered_by[0] = self._taken + 1  # (the next poll takes it)
                if paused:
                    self._pauses[trial_id] = delivered_by[0]

        def await_delivery() -> None:
            self.await_delivery(delivered_by[0])

        def checkpoint_sink(iteration: int, dirname: str) -> None:
            with self._lock:
                self._emit_locked((EV_CHECKPOINT, trial_id, attempt, time.time(), iteration, dirname))

        def resume_read() -> None:
            with self._lock:
                self._emit_locked((EV_LANE, trial_id, attempt, time.time(), LANE_RESUME_READ, {}))

        def warning_sink(data: dict[str, Any]) -> None:
            with self._lock:
                # wake: sent at once (once per trial and message), so a process that dies next does not lose it
                self._emit_locked((EV_LANE, trial_id, attempt, time.time(), LANE_WARNING, data))

        stop_rule = None if worker else self.settings.stop
        if stop_rule is not None and spec.stop_state is not None:
            stop_rule = pickle.loads(spec.stop_state)  # the driver's, with the trial's past (TrialSpec.stop_state)
        should_stop = None
        seen_through = spec.stop_seen_through
        if stop_rule is not None:

            def should_stop(result: Mapping[str, Any]) -> bool:
                if result["training_iteration"] <= seen_through:
                    return False  # run again after the engine's restart: the rule judged it (stop_seen_through)
                # with the trial's config, as Ray's stoppers see it (a key the trainable reported itself wins)
                try:
                    return stop_rule(trial_id, {"config": spec.config, **result})
                except StopRuleError:
                    raise
                except Exception as e:
                    # The stop rule's own bug ends the run, as Ray's fit() raises it: it failed every trial it
                    # judged, as if the trainables had, and max_failures retried them (a helper's test)
                    raise StopRuleError(f"stop: the stop rule raised on a result of trial {trial_id}: "
                                        f"{type(e).__name__}: {e}") from e

        context = TrialContext(
            trial_id=trial_id,
            trial_name=spec.trial_name,
            experiment_name=self.settings.experiment_name,
            trial_dir=spec.trial_dir,
            device=self.settings.device,
            resources=dict(self.settings.resources),
            world_rank=spec.rank,
            world_size=spec.world_size,
        )
        checkpoint = Checkpoint(spec.checkpoint_path) if spec.checkpoint_path else None
        turns = _Turns(self, trial_id)
        session = TrialSession(
            context,
            sink,
            checkpoint=checkpoint,
            start_iteration=spec.start_iteration,
            time_total_offset=spec.time_total_offset,
            should_stop=should_stop,
            budget=None if worker else spec.budget,
            time_attr=self.settings.time_attr,
            turns=turns,
            checkpoint_sink=None if worker else checkpoint_sink,
            verdict_from=None if worker else self.settings.verdict_from,
            result_totals=spec.result_totals if spec.checkpoint_path else None,
            on_resume_read=None if worker else resume_read,
            warning_sink=warning_sink,
            await_delivery=None if worker else await_delivery,
        )
        session._caller = lambda method, args, label=None: self._call(trial_id, attempt, method, args, label)
        turns.session = session
        return session

    def _check_storage(self) -> None:
        """Raise :class:`StorageNotSharedError` when this node does not see the experiment's store (once seen,
        not checked again). A node with a disk of its own under ``storage_path`` kept its trials' checkpoints
        there, where the driver never found them (a helper's two-node run with PBT: no error, no checkpoint)."""
        folder = self.settings.experiment_dir
        if folder is None or self._storage_seen:
            return
        if not os.path.isfile(os.path.join(folder, DB_FILENAME)):
            raise StorageNotSharedError(
                f"the experiment's folder {folder!r} is not visible on node {socket.gethostname()!r} (device "
                f"{self.settings.device}: no {DB_FILENAME} there): storage_path must be a folder that every node of "
                "the cluster shares (a network file system), as Ray Tune requires; the trials' checkpoints and "
                "files written on this node would be lost")
        self._storage_seen = True

    def _configure_torch(self) -> None:
        """Give a torch imported before the host's settings took effect the device's intra-op thread count.

        A torch imported later reads ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``, set in ``__init__``. Trainables
        often import torch themselves, in their first trials, side by side: a trial thread may then find torch
        in ``sys.modules`` while another thread is still importing it. ``import torch`` waits for that import to
        finish (Python's per-module import lock) instead of using the half-built module.
        """
        if self._torch_configured or self.settings.torch_threads is None or "torch" not in sys.modules:
            return
        import torch

        torch.set_num_threads(self.settings.torch_threads)
        self._torch_configured = True

    def _run_trial(self, spec: TrialSpec, session: TrialSession) -> None:
        set_session(session)
        outcome, error, trace = OUT_COMPLETED, None, None
        fatal: str | None = None
        error_pickle: bytes | None = None
        refusal = False  # the lane allocator refused an allocation at the trial's cap (its estimate)
        ranks = None
        peer_gone = False  # a data-parallel rank's failure says a peer went away (a broken collective)
        unwinding_stop = False  # it raised while the stop at a report unwound it (raised_as_stop_unwound)
        try:
            self._check_storage()
            self._configure_torch()
            os.makedirs(spec.trial_dir, exist_ok=True)
            if spec.world_size > 1:  # a rank of a data-parallel trial meets the others first
                ranks = session.ranks = _open_rendezvous(spec, self.settings, session.stop_requested,
                                                         data_parallel_timeout(self._trainable))
            self._acquire(spec.trial_id)
            if self._running[spec.trial_id].withdrawn:
                raise _Withdrawn()
            self._use_stream(spec.trial_id)
            session.start_clock()
            if session.stop_requested.is_set():
                raise StopTrial()
            output = self._trainable(dict(spec.config))
            if hasattr(output, "__next__"):  # a generator trainable: each yield is a report
                for item in output:
                    session.report_return_value(item)
            else:
                session.report_return_value(output)
            if session.stopped:  # a thread the trial started was stopped at its report; the function returned
                outcome = OUT_STOPPED
        except StopTrial:
            outcome = OUT_STOPPED
        except _Withdrawn:
            outcome = OUT_WITHDRAWN
        except BaseException as e:  # noqa: BLE001 - a trial's failure must never take the device down
            # (as Python prints it: no ": " after the type of an exception without a message)
            text = exception_text(e)
            error = _encodable(f"{type(e).__name__}: {text}" if text else type(e).__name__)
            trace = _encodable(tb.format_exc())
            error_pickle = pickle_exception(e)
            unwinding_stop = raised_as_stop_unwound(e)
            if ranks is not None:
                from fluidsalus.distributed._rendezvous import broken_by_leader_end  # (it imports this module)

                peer_gone = broken_by_leader_end(e)
            hint = (nvml.reserve_hint(error, self.settings.max_lanes)
                    or shared_process_hint(error, self.settings.max_lanes))
            if hint is not None:
                error = f"{error} ({hint})"
            outcome = OUT_OOM if _is_out_of_memory(e) else OUT_ERRORED
            refusal = is_refusal(e) or isinstance(e, ArenaOutOfMemoryError)
            requested = mem.requested_bytes(error) if outcome == OUT_OOM else None
            total = self._memory_total() if requested is not None else 0
            if requested is not None and requested > total:
                # One allocation larger than the whole device: a re-admission (with more of the device) would run
                # the trial again, its side effects too, to fail the same way.
                outcome = OUT_ERRORED
                error = (f"{error} (one allocation of {requested} bytes is more than all the {total} bytes of "
                         f"memory of device {self.settings.device}: not retried)")
            if isinstance(e, (StopRuleError, BudgetKeyError, StorageNotSharedError)):
                fatal = error = str(e)
        finally:
            session.ended = True  # threads the trial started may not report after its end
            set_session(None)
            end_trial_output(session)  # a line it left unfinished is written before its end is sent
            if self._arenas is not None:  # the run's memory is the trial's no more; leftovers are reported
                self._arenas.exit(spec.trial_id)
        if ranks is not None:  # rank 0 waits for its workers here; their failures become the trial's error
            own = error
            outcome, error, trace = ranks.finish(outcome, error, trace, peer_gone, session.peers_lost,
                                                 session.stop_requested)
            if error != own:  # a worker's error, whose exception stayed in the worker
                error_pickle, unwinding_stop = None, False
        now = time.time()
        with self._lock:
            if outcome == OUT_OOM and (session.stop_requested.is_set() or self._closed):
                # Out of memory after the driver stopped it (the searcher, a move, the run's end): it ends stopped,
                # from its last result and checkpoint, as at its next report; a re-admission lost the stop.
                self._emit_locked((EV_LANE, spec.trial_id, spec.attempt, now, "oom_after_stop",
                                   {"error": error, "traceback": trace}))
                outcome, error, trace = OUT_STOPPED, None, None
            if outcome in (OUT_ERRORED, OUT_OOM) and fatal is None and session.stopped_by_rule and unwinding_stop:
                # It raised as the stop at its stop rule's result unwound it: it ends stopped there, where it was
                # retried or ERROR. (An end save that fails at that result is no such error: the class front end
                # reports the result, then raises the save's error, which fails the trial, as in Ray.)
                self._emit_locked((EV_LANE, spec.trial_id, spec.attempt, now, LANE_ERROR_AFTER_STOP,
                                   {"error": error, "traceback": trace}))
                outcome, error, trace = OUT_STOPPED, None, None
            # It raised as a stop of the driver's unwound it (a verdict, a stop at its next report or pause): the
            # driver judges that error (EV_END's ``unwinding_stop``). Out of memory there is no cause to re-admit it.
            unwinding_stop = outcome in (OUT_ERRORED, OUT_OOM) and fatal is None and unwinding_stop
            if unwinding_stop:
                outcome = OUT_ERRORED
            if (outcome == OUT_OOM and not refusal
                    and all(member == spec.trial_id for lane in self._lanes.lanes() for member in lane.members)):
                # Out of the device's own memory with no other trial on it: a larger estimate frees nothing for it,
                # and a re-admission would run it (and what it does besides) again, to fail the same way (a plain
                # MemoryError ran four times under max_failures=0, at estimates of 1, 2 and 4 bytes: a helper's
                # test). Only the lane allocator's refusal at the trial's own cap is helped by a larger estimate.
                outcome = OUT_ERRORED
                error = (f"{error} (out of memory with no other trial on device {self.settings.device}: a larger "
                         "estimate frees nothing for it; not retried)")
            try:
                # A data-parallel rank is not re-admitted alone: its peers' group is gone; the driver restarts.
                if (outcome == OUT_OOM and spec.world_size == 1
                        and self._readmit_locked(spec, session, error or "", trace, requested or 0)):
                    return
            except Exception as e:  # noqa: BLE001 - the trial must still end, or the driver waits forever
                error = _encodable(f"{error}; re-admission failed: {type(e).__name__}: {e}")
                trace = _encodable(tb.format_exc())
            if outcome == OUT_OOM:
                outcome = OUT_ERRORED
            if fatal is not None:
                self._emit_locked((EV_FATAL, spec.trial_id, spec.attempt, now, fatal))
            if spec.rank == 0:
                self._emit_locked((EV_END, spec.trial_id, spec.attempt, now, outcome, error, trace,
                                   error_pickle if outcome == OUT_ERRORED else None, unwinding_stop))
            else:  # a data-parallel worker's end is not the trial's (see TrialSpec)
                self._emit_locked((EV_LANE, spec.trial_id, spec.attempt, now, "worker_end",
                                   {"rank": spec.rank, "world_size": spec.world_size, "outcome": outcome,
                                    "error": error, "traceback": trace}))
            try:
                self._leave_locked(spec.trial_id)  # after its END: trials admitted now start after it ended
            except Exception:  # noqa: BLE001 - bookkeeping must not kill the thread silently: say so, go on
                self._emit_locked((EV_LANE, spec.trial_id, spec.attempt, time.time(), "runtime_error",
                                   {"traceback": tb.format_exc()}))

    def _readmit_locked(self, spec: TrialSpec, session: TrialSession, error: str, trace: str | None,
                        requested: int) -> bool:
        """A trial ran out of memory: re-admit it with a larger estimate, from its last checkpoint.

        Its lane neighbours keep running. The lane manager grows its estimate (alone in a lane if need be),
        up to its retry limit: doubled, and its T at least the ``requested`` bytes its error named (0: none).

        Returns:
            True when the trial was re-admitted (or queued for it); False when it must fail.
        """
        r = self._running[spec.trial_id]
        self._release_locked(r, ready=False)
        decision = self._lanes.on_oom(spec.trial_id, needed=requested)
        self._emit_lane_events_locked()
        if decision.action == ln.ACT_FAIL:  # the manager forgot the trial; it ends as errored
            self._place_admitted_locked(decision.admitted)  # the memory it left let waiting trials in: start them
            return False
        del self._running[spec.trial_id]
        r.left = True  # (this attempt's: a thread of it left waiting for its turn ends, as at _leave_locked)
        r.turn.set()
        iteration, time_total = session.checkpoint_at
        # From its checkpoint if it reads one (else it would start over while its iterations went on from there)
        resume = session.checkpoint if session.resume_read else None
        respec = TrialSpec(
            trial_id=spec.trial_id, trial_name=spec.trial_name, config=spec.config, trial_dir=spec.trial_dir,
            attempt=spec.attempt,
            checkpoint_path=resume.path if resume is not None else None,
            start_iteration=iteration if resume is not None else 0,
            time_total_offset=time_total if resume is not None else 0.0,
            result_totals=session.checkpoint_totals if resume is not None else {},
            budget=session.budget, priority=spec.priority,
        )
        self._emit_locked((EV_LANE, spec.trial_id, spec.attempt, time.time(), "oom_readmit",
                           {"action": decision.action, "from_iteration": respec.start_iteration, "error": error,
                            "traceback": trace}))
        if decision.placement is None:
            self._waiting[spec.trial_id] = respec
        else:
            self._start_locked(respec, decision.placement.lane_id)
        self._place_admitted_locked(decision.admitted)
        return True

    def _use_stream(self, trial_id: str) -> None:
        """On a GPU, run the trial on its own CUDA stream, so that lanes run concurrently.

        In arena mode that is its lane's stream (the lane's arena is bound to it; :class:`LaneStreams`). In
        caching mode it is the stream of the thread's cuBLAS handle (:class:`StreamsByHandle`), which bounds
        torch's cuBLAS workspaces.
        """
        if not self.settings.device.startswith("cuda"):
            return
        import torch

        if self._arenas is None:
            try:
                with torch.cuda.device(self.settings.device):
                    handle = int(torch.cuda.current_blas_handle())  # this thread's, made on the default stream
            except Exception as e:  # noqa: BLE001 - RuntimeError, AcceleratorError or DeferredCudaCallError
                # No CUDA context or cuBLAS handle could be made (the device's memory may be held by another
                # process): the trial runs on the thread's default stream. One that never uses cuBLAS runs as it
                # would anywhere; one that does meets the same error in its own code, where it is its error.
                self._warn_no_handle(trial_id, e)
                return
            torch.cuda.set_stream(self._handle_streams.stream_for(handle))
            return
        with self._lock:
            turn = self._turns[self._running[trial_id].lane_id]
            if turn.stream is None:
                turn.stream = self._lane_streams.take()
        torch.cuda.set_stream(turn.stream)

    def _warn_no_handle(self, trial_id: str, error: Exception) -> None:
        """Say once per device that trials run on the default stream because no cuBLAS handle could be made."""
        with self._lock:
            if self._warned_no_handle:
                return
            self._warned_no_handle = True
        logger.warning("%s: trial %s runs on its thread's default CUDA stream: no cuBLAS handle could be made "
                       "for it (%s); a trial that uses cuBLAS will fail with that error", self.settings.device,
                       trial_id, error)

    def _new_stream(self) -> Any:
        """A new CUDA stream on the device (only ever called on a GPU device)."""
        import torch

        return torch.cuda.Stream(device=self.settings.device)


def _reachable_bytes() -> int:
    """Bytes of the torch modules, optimizers and tensors in the trainable's local variables.

    Walks the calling thread's frames from the session up to the device host, skipping fluidsalus's own
    frames, and looks one level into lists, tuples and dict values. Storages are counted once.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    modules: list[Any] = []
    optimizers: list[Any] = []
    tensors: list[Any] = []

    def take(value: Any) -> None:
        if isinstance(value, torch.nn.Module):
            modules.append(value)
        elif isinstance(value, torch.optim.Optimizer):
            optimizers.append(value)
        elif isinstance(value, torch.Tensor):
            tensors.append(value)

    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not _RUN_TRIAL_CODE:
        if not str(frame.f_globals.get("__name__", "")).startswith("fluidsalus."):
            for value in list(frame.f_locals.values()):
                take(value)
                if isinstance(value, (list, tuple)):
                    for item in value:
                        take(item)
                elif isinstance(value, dict):
                    for item in value.values():
                        take(item)
        frame = frame.f_back
    return mem.persistent_bytes(modules, optimizers, tensors)


def _open_rendezvous(spec: TrialSpec, settings: HostSettings, stop_requested: threading.Event,
                     timeout_s: float | None = None) -> Any:
    """Connect one rank of a data-parallel trial to its peers (imports torch, which such a trial needs); a worker
    still waiting for rank 0 ends with StopTrial once ``stop_requested`` is set. ``timeout_s``: the trainable's
    own (``data_parallel(..., timeout_s=...)``), else the device's ``distributed_timeout_s``."""
    from fluidsalus.distributed._rendezvous import Rendezvous

    return Rendezvous(spec.rendezvous, spec.rank, spec.world_size, f"{spec.trial_id}/{spec.attempt}",
                      settings.distributed_timeout_s if timeout_s is None else timeout_s, settings.device,
                      cancelled=stop_requested)


def _is_out_of_memory(error: BaseException) -> bool:
    """A device out-of-memory error: torch's, Python's, or the lane allocator's refusal at a cap (raised as
    torch's, or as a RuntimeError where PyTorch's own exception class could not be bound)."""
    if isinstance(error, MemoryError) or is_refusal(error):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(error, torch.OutOfMemoryError)


def for_devices(stopper: Any) -> Any:
    """What the devices evaluate for ``stopper`` in each trial's thread: its ``for_devices()`` view when it has one
    (a stopper that looks across trials, such as Ray's ``ExperimentPlateauStopper``, answers only on the driver,
    whose copy sees every result), else the stopper itself.

    Args:
        stopper: A stop rule: a Stopper, a callable or None.
    """
    view = getattr(stopper, "for_devices", None)
    return view() if callable(view) else stopper


#: Stoppers (fluidsalus's and Ray's, by the class that defines ``stop_all``) whose ``stop_all()`` is always False.
_PER_TRIAL_STOPPERS = ("NoopStopper", "FunctionStopper", "MaximumIterationStopper", "TrialPlateauStopper")
#: The modules of those stoppers and of ``CombinedStopper`` (whose ``stop_all()`` is any of its stoppers').
_STOPPER_MODULES = ("fluidsalus.tune.stopper", "ray.tune.stopper")


def decides_stop_all(stopper: Any) -> bool:
    """Whether ``stopper.stop_all()`` may ever end the run. When it may, each trial waits after each result for the
    driver's copy to judge it (a round trip per result), so the run ends at the result that ended it, as Ray's does.

    False for no stopper, for the stoppers whose ``stop_all()`` is always False (fluidsalus's and Ray's
    ``NoopStopper``, ``FunctionStopper``, ``MaximumIterationStopper``, ``TrialPlateauStopper``; not a subclass that
    overrides ``stop_all``), for a ``CombinedStopper`` of such, and for an object that says
    ``decides_stop_all = False``; True otherwise (``ExperimentPlateauStopper``, ``TimeoutStopper``, a stopper of your
    own).

    Args:
        stopper: The run's driver-side stopper, or None.
    """
    stop_all = getattr(type(stopper), "stop_all", None)
    if stopper is None or not callable(stop_all):
        return False
    declared = getattr(stopper, "decides_stop_all", None)
    if declared is not None:
        return bool(declared() if callable(declared) else declared)
    module, owner = getattr(stop_all, "__module__", "") or "", getattr(stop_all, "__qualname__", "").split(".")[0]
    if module.startswith(_STOPPER_MODULES):
        if owner in _PER_TRIAL_STOPPERS:
            return False
        if owner == "CombinedStopper":
            return any(decides_stop_all(inner) for inner in getattr(stopper, "_stoppers", ()))
    return True


#: What a dict stop rule does with a result that lacks one of its keys (:func:`stop_rule`).
MISSING_STOP_KEY = ("error", "warn")


def stop_rule(stop: Mapping[str, float] | Callable[[str, Mapping[str, Any]], bool] | None,
              missing: str = "error") -> Callable[[str, Mapping[str, Any]], bool] | None:
    """Turn a user's ``stop`` argument into ``f(trial_id, result) -> bool``, with Ray Tune's meaning.

    Args:
        stop: A dict ``{key: threshold}`` (stop once ``result[key] >= threshold`` for any key; ``"a/b"`` also
            names ``result["a"]["b"]``, as Ray flattens results), a callable ``f(trial_id, result) -> bool``, or
            None.
        missing: For a dict, a result without one of its keys: ``"error"`` fails the run (a misspelt key would
            otherwise never stop anything); ``"warn"`` logs a warning once per key and checks the others, as Ray
            Tune does (the Tune front end's choice: a metric reported only every few iterations is no error
            there).

    Returns:
        The rule, or None when there is no stop rule.

    Raises:
        ConfigError: A dict key that is no non-empty str, or a threshold that is no number.
    """
    if missing not in MISSING_STOP_KEY:
        raise ConfigError(f"stop_rule: missing={missing!r} is not one of {', '.join(MISSING_STOP_KEY)}")
    if stop is None:
        return None
    if callable(stop):
        return stop
    if isinstance(stop, Mapping):
        criteria = dict(stop)
        for key, threshold in criteria.items():  # (a bad one failed every trial at its first result)
            if not isinstance(key, str) or not key:
                raise ConfigError(f"stop: keys must be result names (non-empty str), got {key!r}")
            if not isinstance(threshold, numbers.Real):
                raise ConfigError(f"stop: the threshold of {key!r} must be a number, got {threshold!r} "
                                  f"({type(threshold).__name__})")
        warned: set[str] = set()

        def by_thresholds(trial_id: str, result: Mapping[str, Any]) -> bool:
            for key, threshold in criteria.items():
                value = lookup_metric(result, key)  # result[key], else the nested value "a/b" names
                # a key that names a dict of nested values is not in Ray's flattened result either (only its
                # "key/..." leaves are): missing, as in Ray, not a comparison of a dict with the threshold
                if (value is None and key not in result) or isinstance(value, Mapping):
                    nested = f"; {key!r} holds nested values: name one as '{key}/<name>'" \
                        if isinstance(value, Mapping) else ""
                    if missing == "error":
                        raise StopRuleError(
                            f"stop: the stop criterion {key!r} is not in the result reported by trial {trial_id} "
                            f"(its keys are {sorted(result)}){nested}"
                        )
                    if key not in warned:
                        warned.add(key)
                        logger.warning("Stopping criterion %r not found in the result of trial %s (its keys are "
                                       "%s)%s: it is checked again at each result", key, trial_id, sorted(result),
                                       nested)
                    continue
                if value >= threshold:
                    return True
            return False

        return by_thresholds
    raise ConfigError(f"stop: must be a dict of thresholds, a callable (trial_id, result) -> bool, or None; "
                      f"got {type(stop).__name__}")


_RUN_TRIAL_CODE = DeviceHost._run_trial.__code__


def _encodable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (lone surrogates, from a file name in ``os.fsdecode``'s escapes)
    written as backslash escapes: the store, the error file and the driver's logs all encode it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
