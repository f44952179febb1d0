"""The session API a trainable calls: :func:`report`, :func:`get_checkpoint`, :func:`get_context`.

Many trials share one device actor process, each in its own thread, so the current trial is found through a
thread-local :class:`TrialSession`. The device host (``fluidsalus.gpu.host``) installs one before it calls the
trainable and removes it afterwards. A thread that a trial starts belongs to that trial
(:func:`inherit_sessions_in_started_threads`), as every thread of a Ray Tune trial's process does: it may call
these functions too, until the trial ends.

Each :func:`report` call is one iteration. As Ray Tune does, it adds ``training_iteration``,
``time_this_iter_s``, ``time_total_s``, ``timestamp`` and a few identifying fields to the metrics.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import pickle
import socket
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from numbers import Number
from typing import Any, Protocol

from fluidsalus.checkpoint import Checkpoint, persist_checkpoint
from fluidsalus.errors import ConfigError, SessionError

#: Ray's date stamp (``ray.tune.utils.date_str``), used wherever fluidsalus stamps a time as Ray does: the ``date``
#: of every result, default experiment names, the session of the callbacks' state files (it sorts by time), and
#: the time of each failure in a trial's ``error.txt``.
DATE_FORMAT = "%Y-%m-%d_%H-%M-%S"

#: Keys the engine adds to every result. A metric to optimise must be one the trainable reports itself.
AUTO_RESULT_KEYS: frozenset[str] = frozenset(
    {
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "timestamp",
        "trial_id",
        "date",
        "done",
        "pid",
        "hostname",
        "node_ip",
        "time_since_restore",
        "iterations_since_restore",
        "checkpoint_dir_name",
    }
)

#: The key of a trial's configuration in the results callbacks and ``Result.metrics`` show (Ray's).
CONFIG_KEY = "config"
#: The result key Ray puts ``config`` right after (``Trainable.get_auto_filled_metrics``' order).
CONFIG_AFTER_KEY = "node_ip"


def with_config(result: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` with the trial's configuration under ``"config"``, where Ray's results have it.

    Args:
        result: A result as the engine stores it (any ``"config"`` key of its own is replaced).
        config: The configuration the result was reported with.

    Returns:
        A new dict: ``config`` right after ``node_ip`` (before ``time_since_restore``), or last when the result has
        no ``node_ip``.
    """
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key != CONFIG_KEY:
            out[key] = value
            if key == CONFIG_AFTER_KEY:
                out[CONFIG_KEY] = config
    if CONFIG_KEY not in out:
        out[CONFIG_KEY] = config
    return out


#: The metric name a trainable's bare number return value is reported under (Ray Tune's name).
DEFAULT_METRIC = "_metric"
#: Ray's running totals: a result with ``timesteps_this_iter`` (``episodes_this_iter``) gets ``timesteps_total``
#: (``episodes_total``) and ``timesteps_since_restore``, counted over the trial's life (``TrialSession.report``).
TIMESTEPS_THIS_ITER_KEY, TIMESTEPS_TOTAL_KEY = "timesteps_this_iter", "timesteps_total"
EPISODES_THIS_ITER_KEY, EPISODES_TOTAL_KEY = "episodes_this_iter", "episodes_total"
TIMESTEPS_SINCE_RESTORE_KEY = "timesteps_since_restore"


def result_totals(result: Mapping[str, Any]) -> dict[str, float]:
    """The running totals ``result`` carries (``timesteps_total``, ``episodes_total``): what a restart from a
    checkpoint taken at it continues from."""
    return {key: result[key] for key in (TIMESTEPS_TOTAL_KEY, EPISODES_TOTAL_KEY) if result.get(key) is not None}
#: The driver call by which a trial learns whether the run's callbacks asked for a checkpoint of its last reported
#: iteration (``fluidsalus.callbacks.Callback.checkpoint_requests``); the executor answers it once the callbacks
#: have seen that result. Argument: the iteration.
CHECKPOINT_VERDICT_CALL = "fluidsalus.checkpoint_verdict"
#: The driver call by which a trial, after a result from the searcher's ``verdict_from`` on, waits for the
#: searcher's decision on it (True: stop here), as a Ray Tune trial waits for its scheduler's at every result.
#: The executor answers once the searcher has seen that result. Argument: the iteration.
RESULT_VERDICT_CALL = "fluidsalus.result_verdict"

HOSTNAME = socket.gethostname()
_local = threading.local()


def callable_name(trainable: Any) -> str:
    """The name a trainable's runs and trials are named after: its ``__name__`` (its type's for a callable
    object), and ``lambda`` for a lambda, as Ray names it (``<lambda>`` made ``<lambda>_<date>`` folders, which a
    shell must quote, and ``_lambda__`` trial folders)."""
    name = getattr(trainable, "__name__", type(trainable).__name__)
    return "lambda" if name == "<lambda>" else name


@functools.cache
def node_ip() -> str:
    """This node's IP address (Ray's ``node_ip`` result key), found once per process: Ray's own answer where Ray
    runs (a device actor), else what the host name resolves to, else the loopback address."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        with contextlib.suppress(Exception):
            return str(ray.util.get_node_ip_address())
    try:
        return socket.gethostbyname(HOSTNAME)
    except OSError:
        return "127.0.0.1"


class LaneTurns(Protocol):
    """A trial's handle on its lane's turn (implemented by the device host)."""

    def acquire(self) -> None:
        """Wait until the trial holds the turn."""

    def release(self, verdict: bool = False) -> None:
        """Give the turn away; the trial is not ready (it pauses, or waits for the driver: ``verdict``, for its
        verdict on the result just reported, which the device host may hold a prefetched trial through)."""

    def boundary(self, may_switch: bool = True) -> None:
        """An iteration boundary: hand the turn to the next ready trial, if any, and wait for it back (with
        ``may_switch=False``, only account for the iteration: the trial keeps the turn)."""

    def step(self) -> None:
        """Like ``boundary`` once the trial has computed for at least the quantum; else nothing."""


class SharedTurn:
    """A trial's lane turn as its threads share it (wraps the host's :class:`LaneTurns` handle; pure logic).

    The turn is the trial's, not a thread's: a trainable (an Optuna objective) may start threads, and several of
    them may wait for the driver at once (``suggest_*``, ``set_user_attr``, a ``should_prune`` the driver answers),
    or report, while others compute. The host's handle knows one holder per trial, so each thread stepping away
    and back on its own lost the turn: the first thread back from the driver took the turn again, and each next
    one found the trial holding it and waited for ever for a grant (h205's F4). Here:

    - :meth:`release` (a thread steps away: a driver call, a pause at the budget, a verdict) gives the turn up when
      the first thread steps away; one stepping away while others are away only counts (``verdict`` still tells
      the host, which holds a prefetched neighbour through a verdict wait);
    - :meth:`acquire` (the thread is back) returns once the trial's turn is taken back: the last thread back
      takes it, once, for all; one back before the last waits for it, as a lone thread waits for its turn after
      its call, so no thread of the trial computes outside its turn past the calls in flight;
    - :meth:`boundary` and :meth:`step` (a ``report()``, a ``fluidsalus.step()``) first wait until the trial's turn
      is taken back (another thread may be away), as a boundary waited for the turn before (a thread that stepped
      away again since leaves no turn to hand on: no boundary then);
    - :meth:`leave` (a thread that stepped away ends there: the verdict stopped the trial at its pause) counts it
      back without taking the turn, which the next thread that needs it takes.

    One lock makes the host's turn operations of the trial one at a time, held through them (an ``acquire`` or a
    boundary waits for a neighbour's turn under it): a thread that steps away while another takes the turn back
    gives it up only once that one has it (before, its release took the trial off the lane's ready list and the
    other waited for a grant that never came). No host operation waits for another thread of the same trial, so
    holding it there waits for nothing of this trial. One thread's calls cost one uncontended lock more each.
    """

    def __init__(self, turns: LaneTurns) -> None:
        self._turns = turns
        self._lock = threading.Lock()
        self._back = threading.Condition(self._lock)  # notified when the turn is taken back or a thread leaves
        self._held = True  # the trial holds its lane's turn (its trainable starts in its first turn)
        self._away = 0  # threads that stepped away (release) and are not back yet (acquire, leave)
        self._waiting = 0  # threads back before the last one, waiting for the turn (none: nothing to notify)
        self._taken = 0  # times a thread took the turn back (a waiter waits for the next: _wait_held_locked)

    @property
    def away(self) -> int:
        """How many threads of the trial are away from its turn now (in a driver call, paused)."""
        return self._away

    @property
    def held(self) -> bool:
        """Whether the trial holds its lane's turn now (as far as its threads have given it up and taken it)."""
        return self._held

    def release(self, verdict: bool = False) -> None:
        """This thread steps away (see :meth:`LaneTurns.release`); the first one away gives the turn up."""
        with self._lock:
            self._away += 1
            if self._held or verdict:  # (not held: another thread is away; the host only notes the verdict)
                self._held = False
                self._turns.release(verdict)

    def acquire(self) -> None:
        """This thread is back: return once the trial's turn is taken back (by the last thread back)."""
        with self._lock:
            self._away -= 1
            if not self._held:
                self._wait_held_locked()

    def leave(self) -> None:
        """This thread stepped away and ends the trial there (a stop at its pause or verdict), without the turn."""
        with self._lock:
            self._away -= 1
            if self._waiting:
                self._back.notify_all()  # a thread waiting for the last one back takes the turn itself now

    def boundary(self, may_switch: bool = True) -> None:
        """An iteration boundary of this thread (see :meth:`LaneTurns.boundary`), once the trial holds its turn."""
        with self._lock:
            if not self._held:
                self._wait_held_locked()
            if self._held:  # (not held: another thread stepped away again after the take-back: no turn to hand on)
                self._turns.boundary(may_switch)

    def step(self) -> None:
        """Like :meth:`boundary` for :meth:`LaneTurns.step`."""
        with self._lock:
            if not self._held:
                self._wait_held_locked()
            if self._held:
                self._turns.step()

    def _wait_held_locked(self) -> None:
        """Under the lock: wait until the trial's turn is taken back, here once no thread is away.

        A waiter returns once a thread has taken the turn back since it began to wait, even if another thread has
        stepped away again since (it then computes outside the turn, as a thread that computes while another is in
        a call does): waiting until the trial holds its turn at its wake-up starved it while another thread called
        the driver back to back, each call given up before the waiter woke (up to 1 s for one call of 3 ms)."""
        taken = self._taken
        while not self._held and self._taken == taken:
            if self._away > 0:
                self._waiting += 1
                try:
                    self._back.wait()
                finally:
                    self._waiting -= 1
                continue
            try:
                self._turns.acquire()
            except BaseException:
                # The host could not give the turn back (the trial ended while this thread was in its call: its
                # function returned without joining it). Each waiter tries, and fails, itself: none waits for ever.
                if self._waiting:
                    self._back.notify_all()
                raise
            self._held = True
            self._taken += 1
            if self._waiting:
                self._back.notify_all()


#: Decisions the ranks of a data-parallel trial agree on at each ``report()`` (see :class:`RankSync`). VERDICT: the
#: result waits for the driver's verdict on it (``verdict_from``), which rank 0 asks for and then passes on as
#: after a pause (go or stop), so that every rank stops at that result.
GO, PAUSE, STOP, VERDICT = "go", "pause", "stop", "verdict"


class RankSync(Protocol):
    """How the ranks of a data-parallel trial agree at each ``report()`` (``fluidsalus.distributed``).

    Rank 0 (the leader) decides as a one-device trial would and publishes its decision; a worker (rank > 0)
    waits for it and follows, so every rank continues, pauses at the budget, resumes or stops together.
    """

    leader: bool

    def at_report(self, iteration: int, decision: str, cancelled: threading.Event) -> str:
        """Leader: publish ``decision`` (GO, PAUSE, STOP or VERDICT) and return it. Worker: return the leader's."""

    def at_resume(self, iteration: int, stop: bool, cancelled: threading.Event) -> str:
        """After a pause or a VERDICT. Leader: publish GO, or STOP when ``stop``. Worker: wait for the leader's
        verdict."""

    def leader_gone(self) -> bool:
        """True once rank 0 has ended (or cannot be reached): a stopped worker need not wait for it."""


class IterationClock:
    """A trial's iteration clock (``time_this_iter_s``), shared by its threads (pure logic; times are passed in).

    An iteration lasts from one report to the next, less the time in which the trial was away from its lane's turn:
    a thread of it waiting for the driver (a call, a scheduler's verdict), paused at its budget, or at a boundary
    while a neighbour had the lane, and a report's own work past its result's time (saving its checkpoint, waiting
    for the driver to have it). While several threads are away at once, that time counts once, as the trial's turn
    is given up by the first thread away and taken back by the last one back (:class:`SharedTurn`); a lone thread's
    iterations are what they were. Only the part of a thread's absence since the current iteration began is
    taken from it: an iteration another thread's report closed meanwhile already counted the rest.

    Each reading and update is one step under the clock's lock. A thread back from a driver call added its time
    away to the iteration's start unlocked while another thread's report reset that start, so one of the two was
    lost (the next ``time_this_iter_s`` counted time the last one had counted), and a thread's whole absence came
    off the iteration after a report made meanwhile, which had counted its part before (the next one could come
    out negative).
    """

    def __init__(self, now: float) -> None:
        self._lock = threading.Lock()
        self._began = now  # when the current iteration began (the last report's time, or the start)
        self._excluded = 0.0  # seconds of the current iteration the trial was away, in spells that ended
        self._away = 0  # threads of the trial away now
        self._away_since = now  # when the current spell away began (some thread stepped away while none was)
        #: The last spell away that ended (its start and end): a step's wait told after the fact may overlap it.
        self._last_spell_start = self._last_spell_end = now

    def start(self, now: float) -> None:
        """Start over at ``now`` (the trial first holds its lane's turn: the time before is no iteration's)."""
        with self._lock:
            self._began, self._excluded = now, 0.0
            if self._away:
                self._away_since = now

    def step_away(self, now: float) -> None:
        """A thread of the trial is away from its turn from ``now`` on, until :meth:`come_back`."""
        with self._lock:
            self._step_away_locked(now)

    def come_back(self, now: float) -> None:
        """A thread that stepped away is back at ``now``; the last one back ends the spell away."""
        with self._lock:
            self._away -= 1
            if self._away == 0:
                self._excluded += self._spell_locked(now)
                self._last_spell_start, self._last_spell_end = self._away_since, now

    def exclude(self, start: float, end: float) -> None:
        """A thread of the trial was away from ``start`` to ``end`` and is back, told after the fact: a
        ``fluidsalus.step()``, which seldom waits (only when its quantum is up and a neighbour takes the lane, or
        while another thread is away: it waits for the trial's turn back), so it costs one update where
        :meth:`step_away` and :meth:`come_back` cost two. What an ongoing spell of other threads covers, what the
        last spell that ended covers (a step that waited for a thread's call to come back is told after that
        thread came back: the spell was taken off already), and what fell in an iteration a report ended since,
        is not taken again. (While a step hands the lane on, it holds the trial's turn operations,
        :class:`SharedTurn`: no other thread steps away or comes back from a call meanwhile; a report's part of
        it before that report counts in the iteration it ends.)"""
        with self._lock:
            start = max(start, self._began)
            if self._away:
                end = min(end, self._away_since)
            seconds = end - start
            if self._last_spell_end > start:  # (a spell ended during the wait: its part was counted already)
                seconds -= max(0.0, min(end, self._last_spell_end) - max(start, self._last_spell_start))
            if seconds > 0.0:
                self._excluded += seconds

    def lap(self, now: float, away_after: bool = False) -> float:
        """End the current iteration at ``now`` (a report) and return its seconds; the next one begins there.

        ``away_after``: the reporting thread is away from ``now`` on (its report's work past the result, its wait
        for a verdict, a pause or the lane's turn), until it calls :meth:`come_back`: in the same step, so that no
        other thread's update comes between."""
        with self._lock:
            seconds = now - self._began - self._excluded - (self._spell_locked(now) if self._away else 0.0)
            self._began, self._excluded = now, 0.0
            if away_after:
                self._step_away_locked(now)
            return max(0.0, seconds)

    def _step_away_locked(self, now: float) -> None:
        if self._away == 0:
            self._away_since = now
        self._away += 1

    def _spell_locked(self, now: float) -> float:
        """The part of the spell away going on now that falls in the current iteration (never negative: a time
        read just before the lock may precede another thread's report)."""
        return max(0.0, now - max(self._away_since, self._began))


class BudgetKeyError(ConfigError):
    """The searcher's ``time_attr`` is missing from a result, so the trial's budget cannot be checked."""


class StopTrial(BaseException):
    """Raised inside the trial thread at a report boundary when the trial must stop.

    It derives from BaseException so that a trainable's ``except Exception`` does not swallow it.
    """


def raised_as_stop_unwound(error: BaseException) -> bool:
    """Whether ``error`` was raised while a :class:`StopTrial` unwound the trainable (a ``finally:`` or an ``except``
    that failed): the stop is in its context chain."""
    seen: set[int] = set()
    cause = error.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, StopTrial):
            return True
        seen.add(id(cause))
        cause = cause.__context__
    return False


#: Ray's name for each of fluidsalus's lower-case resource keys (the rest, ``memory`` and custom ones, keep theirs).
_RAY_RESOURCE_NAMES = {"cpu": "CPU", "gpu": "GPU"}
#: What Ray reports for a trial that requested nothing: its default request of one CPU.
RAY_DEFAULT_REQUEST: dict[str, float] = {"CPU": 1.0}


class TrialResources(dict):  # type: ignore[type-arg]
    """A trial's recorded resource request: a dict (``{"cpu": 1.0, "gpu": 0.25}``) that also answers the attributes
    a script reads from the ``PlacementGroupFactory`` Ray returns (``required_resources``, ``bundles``,
    ``head_cpus``, ``strategy``, ``head_bundle_is_empty``), with Ray's key names (``CPU``, ``GPU``). An empty one
    answers Ray's default request, one CPU, there; a trial that requested nothing records the resources of the
    device actor it runs in (docs/compatibility.md, "Trainables").

    The request is a hint to the planner, not a reservation (:func:`fluidsalus.tune.with_resources`).
    """

    @property
    def required_resources(self) -> dict[str, float]:
        """The request with Ray's key names."""
        if not self:
            return dict(RAY_DEFAULT_REQUEST)
        return {_RAY_RESOURCE_NAMES.get(key, key): float(value) for key, value in self.items()}

    @property
    def bundles(self) -> list[dict[str, float]]:
        """The request as Ray's one bundle (bundles given to ``with_resources`` were summed)."""
        return [self.required_resources]

    @property
    def head_cpus(self) -> float:
        """The CPUs of the (one) bundle."""
        return self.required_resources.get("CPU", 0.0)

    @property
    def head_bundle_is_empty(self) -> bool:
        """Always False: the one bundle is the trial's own."""
        return False

    @property
    def strategy(self) -> str:
        """Ray's default placement strategy (placement is the planner's)."""
        return "PACK"


@dataclass
class TrialContext:
    """What a trainable can ask about the trial it runs in (``ray.tune.get_context()``'s API)."""

    trial_id: str
    trial_name: str
    experiment_name: str
    trial_dir: str
    device: str = "cpu"
    resources: dict[str, float] = field(default_factory=dict)
    world_rank: int = 0
    world_size: int = 1

    def get_trial_id(self) -> str:
        return self.trial_id

    def get_trial_name(self) -> str:
        return self.trial_name

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_trial_dir(self) -> str:
        return self.trial_dir

    def get_storage(self) -> Any:
        """Ray's ``StorageContext`` of this trial (Ray's ``get_context().get_storage()``, a DeveloperAPI): its
        ``storage_filesystem`` is the local one, its ``trial_fs_path`` this trial's folder
        (:func:`fluidsalus.gpu.ray_session.trial_storage`). The first call in a device process imports Ray Train's
        storage module (``ray.train._internal.storage``, which imports pandas and pyarrow: 2-3 s, counted in the
        trial's time, unless the trainable's code imported ``ray.tune`` already); later calls are cheap."""
        from fluidsalus.gpu.ray_session import trial_storage

        return trial_storage(self.trial_dir)

    def get_trial_resources(self) -> TrialResources:
        """The trial's resource request (:class:`TrialResources`: a dict that also reads like Ray's
        ``PlacementGroupFactory``)."""
        return TrialResources(self.resources)

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        """0: each rank of a trial is its own device actor process, which sees its one device as index 0.

        So ``torch.device(f"cuda:{get_local_rank()}")`` names the rank's GPU, as in Ray Train scripts.
        """
        return 0

    def get_local_world_size(self) -> int:
        """1: one rank per device actor process (see :meth:`get_local_rank`)."""
        return 1

    def get_node_rank(self) -> int:
        return 0

    def get_device(self) -> str:
        """The torch device string of the device this trial runs on (``"cpu"`` or ``"cuda:0"``)."""
        return self.device


#: Types a result's value may have without a pickling check (the usual metrics; NumPy's scalars are numbers).
_SENDABLE_TYPES = (int, float, str, bool, bytes, type(None), Number)
#: Libraries whose values (arrays, scalars, tensors) pickle: not checked on each report, where pickling a
#: tensor cost 70 us and a 100,000-element array 430 us (measured by the review).
_SENDABLE_LIBRARIES = frozenset({"numpy", "torch"})


def check_sendable(metrics: Mapping[str, Any]) -> None:
    """Refuse a result the device could not send to the driver: a value that does not pickle (a lock, an open
    file, a client) would fail the device's whole batch, on its way, and with it the run (Ray's pickling error,
    naming neither the trial nor the key).

    Raises:
        TypeError: Naming the key and why its value does not pickle.
    """
    for key, value in metrics.items():
        if isinstance(value, _SENDABLE_TYPES) or type(value).__module__.partition(".")[0] in _SENDABLE_LIBRARIES:
            continue
        try:
            pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - any object may fail to pickle, in any way: Ray's pickler may still manage
            from ray import cloudpickle  # what ships the results: functions and classes of the script too

            try:
                cloudpickle.dumps(value)
            except Exception as e:  # noqa: BLE001
                raise TypeError(f"report(): the value of {key!r} ({type(value).__name__}) cannot be sent to the "
                                f"driver, which pickles results: {type(e).__name__}: {e}. Report numbers, strings or "
                                "objects that pickle") from None


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def callers_stacklevel() -> int:
    """The ``stacklevel`` that points a warning of the calling function at the first frame outside fluidsalus
    (the user's ``report``, whichever of fluidsalus's, ``tune``'s or ``train``'s wrappers it went through)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def warn_user(message: str, stacklevel: int = 1, category: type[Warning] = UserWarning) -> None:
    """A warning for the script's author given in a trial (an import to change): sent to the driver, which gives it
    once per run, in its own terminal, under its own warning filters.

    Given as ``warnings.warn`` in the device process, it reached the terminal only through Ray's forwarding of the
    workers' output: after the run's summary, once per device, and not at all when the script ended right after
    ``fit()`` (h134's F3). A trial run by a device host sends it with its events (``TrialSession``'s
    ``warning_sink``); the driver gives it with ``warnings.warn_explicit`` at the user's line found here. Each trial
    sends a message once. Outside a device host (a session made by hand, a trainable used directly) it is
    ``warnings.warn`` here, once per trial too.

    Args:
        message: The text.
        stacklevel: As the caller would pass it to ``warnings.warn`` (1: the caller's own line).
        category: The warning's class.
    """
    current = current_session()
    if current is not None:
        with current._warned_lock:
            if (category, message) in current._warned:
                return
            current._warned.add((category, message))
    sink = current._warning_sink if current is not None else None
    if sink is None:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
        return
    try:
        frame = sys._getframe(stacklevel)
        where = {"filename": frame.f_code.co_filename, "lineno": frame.f_lineno,
                 "module": frame.f_globals.get("__name__")}
    except ValueError:  # a shorter stack: as warnings.warn names it
        where = {"filename": "<sys>", "lineno": 0, "module": None}
    sink({"message": message, "category": category, **where})


def _engine_checkpoint(checkpoint: Any) -> Checkpoint | None:
    """``report``'s checkpoint as fluidsalus's: Ray's ``Checkpoint`` (``from ray.tune import Checkpoint`` left
    unchanged, with fluidsalus's ``report``) is translated, with a warning that names the import to change.

    Raises:
        TypeError: It is neither (its type named).
        ConfigError: Ray's checkpoint is not a local folder.
    """
    if checkpoint is None or isinstance(checkpoint, Checkpoint):
        return checkpoint
    if type(checkpoint).__module__.startswith("ray.") and type(checkpoint).__name__ == "Checkpoint":
        from fluidsalus.gpu.ray_session import _as_fluidsalus_checkpoint

        warn_user("report(checkpoint=...) got Ray's Checkpoint; it was translated. Change the import "
                  "`from ray.tune import Checkpoint` (or `ray.train`) to `from fluidsalus.tune import "
                  "Checkpoint` (or `fluidsalus.train`).", stacklevel=callers_stacklevel())
        return _as_fluidsalus_checkpoint(checkpoint)
    raise TypeError(f"report(checkpoint=...): expected a fluidsalus.Checkpoint, got {type(checkpoint).__name__}")

class TrialSession:
    """The per-trial state behind the session functions.

    Args:
        context: Identity of the trial, returned by :func:`get_context`.
        sink: Called with each finished result dict, whether the trial now pauses at its budget, and whether the
            driver should hear of it at once (False for a ``deferred`` result, see :meth:`report`); the host's
            outbox. Must be cheap and thread-safe.
        checkpoint: The checkpoint to resume from, or None for a fresh start.
        start_iteration: Iterations already done before this (re)start; the first report is this + 1.
        time_total_offset: ``time_total_s`` accumulated before this (re)start.
        should_stop: Called with each result; True stops the trial right after the result is delivered.
        budget: Pause once ``result[time_attr] >= budget`` and wait for :meth:`resume` or a stop (None: never).
        time_attr: The result key budgets are measured in (the searcher's resource unit).
        turns: The trial's handle on its lane's turn (None: the trial never waits for a turn).
        checkpoint_sink: Told ``(iteration, checkpoint_dir_name)`` of a checkpoint attached to a result already
            delivered (:meth:`attach_checkpoint`).
        verdict_from: From this ``result[time_attr]`` on, each result waits for the searcher's decision on it
            before the trial goes on (:data:`RESULT_VERDICT_CALL`; None: never). Of a data-parallel trial, rank 0
            asks and its workers wait for its answer (:data:`VERDICT`), so all stop at that result.
        result_totals: ``timesteps_total`` and ``episodes_total`` of the result the checkpoint was taken at (a
            restart continues Ray's running totals from there; see :meth:`report`).
        on_resume_read: Told, once, that the trainable asked for the checkpoint to resume from
            (:meth:`resume_checkpoint`): it restores what a restart gives it, so the planner may move it.
        warning_sink: Sends a warning for the script's author (:func:`warn_user`: its message, category and the
            user's file, line and module) to the driver, which gives it once per run (None: ``warnings.warn`` here).
        await_delivery: Waits until the driver has the results delivered so far (the host's
            :meth:`~fluidsalus.gpu.host.DeviceHost.await_delivery`); called once, at a result the trial's stop rule
            ends it at, before the trainable gets back control (None: it goes on at once).

    Attributes:
        ranks: For one rank of a data-parallel trial, its link with the other ranks (set by the device host
            before the trainable starts; None for a one-device trial). A worker's (rank > 0) results and
            checkpoints are not delivered: rank 0's are the trial's.
    """

    def __init__(
        self,
        context: TrialContext,
        sink: Callable[[dict[str, Any], bool, bool], None],
        checkpoint: Checkpoint | None = None,
        start_iteration: int = 0,
        time_total_offset: float = 0.0,
        should_stop: Callable[[Mapping[str, Any]], bool] | None = None,
        budget: float | None = None,
        time_attr: str = "training_iteration",
        turns: LaneTurns | None = None,
        checkpoint_sink: Callable[[int, str], None] | None = None,
        verdict_from: float | None = None,
        result_totals: Mapping[str, float] | None = None,
        on_resume_read: Callable[[], None] | None = None,
        warning_sink: Callable[[dict[str, Any]], None] | None = None,
        await_delivery: Callable[[], None] | None = None,
    ) -> None:
        self.context = context
        #: What starts each line the trial prints in a device process (``fluidsalus.gpu.output``): its name, or
        #: what a front end names it by (the Optuna front end: ``trial 3``, as Optuna's log does).
        self.output_name = context.trial_name
        self._on_resume_read = on_resume_read
        self._warning_sink = warning_sink
        self._await_delivery = await_delivery
        self._warned: set[tuple[type[Warning], str]] = set()  # what warn_user gave in this trial
        self._warned_lock = threading.Lock()
        #: Whether the trainable asked for its checkpoint in this attempt (:meth:`resume_checkpoint`).
        self.resume_read = False
        self.verdict_from = verdict_from
        # Ray's running totals of timesteps and episodes, kept only once a result reports an increment; a restart
        # from a checkpoint continues from the totals of the checkpoint's result (``result_totals``).
        totals = dict(result_totals or {})
        self._timesteps_total: float | None = totals.get(TIMESTEPS_TOTAL_KEY)
        self._episodes_total: float | None = totals.get(EPISODES_TOTAL_KEY)
        self._timesteps_since_restore: float = 0
        self._last_totals: dict[str, float] = totals  # those of the last result
        #: The running totals of the result the trial's checkpoint was taken at (what a restart continues from).
        self.checkpoint_totals: dict[str, float] = dict(totals)
        self._sink = sink
        self._checkpoint_sink = checkpoint_sink
        self._last_time_total = time_total_offset  # time_total_s of the last result delivered
        self.checkpoint = checkpoint
        self.iteration = start_iteration
        self._start_iteration = start_iteration
        self._time_total_offset = time_total_offset
        self._should_stop = should_stop
        #: The trial's iteration clock, shared by its threads (time away from the lane's turn is in no iteration).
        self._clock = IterationClock(time.time())
        #: Seconds of the iterations since the start or restore, as Ray sums ``time_this_iter_s`` into
        #: ``time_total_s`` and ``time_since_restore``: time paused at a budget or waiting for the lane's turn at a
        #: boundary is in no iteration, so neither counts it (a wall clock did, and budgets in ``time_total_s``
        #: came early for trials that shared a device or paused: 13-24 iterations of 10 ms to a 0.3 s max_t, Ray's
        #: 28-29).
        self._time_since_restore = 0.0
        self.stop_requested = threading.Event()
        self.no_verdict = False  # the stop requested is no verdict on the trial (see request_stop)
        #: Set when the driver found that a data-parallel worker of this rank 0 is gone with its device (see
        #: request_stop): rank 0's end then waits for no worker (a dead process would never say it ended).
        self.peers_lost = threading.Event()
        #: Set when the driver asks for a checkpoint at the trial's next iteration (a Ray callback's
        #: ``should_checkpoint``); a class ``Trainable`` that does not ask for verdicts takes it
        #: (:meth:`take_checkpoint_request`).
        self.checkpoint_requested = threading.Event()
        self.stopped_by_rule = False
        self.budget = budget
        self.time_attr = time_attr
        #: (iteration, time_total_s) of the checkpoint a restart would resume from.
        self.checkpoint_at = (start_iteration, time_total_offset)
        self._resumed = threading.Event()
        #: Whether the trial pauses at its budget (set as its result reaches it, until the verdict wakes it); and
        #: the lock that makes that check and :meth:`resume`'s new budget one step each.
        self._pausing = False
        self._pause_lock = threading.Lock()
        #: Makes each report one step, from its iteration's number through the decision on its result: delivered,
        #: and, where one is due, the stop, the driver's verdict, or the pause at the budget until it ends (not the
        #: boundary where the lane may switch after). Two threads of the trial that report at once get an iteration
        #: each, delivered in their order (they raced on the count, and both results could carry the same
        #: ``training_iteration``); a report made while another thread's result waits for its verdict or is paused
        #: at the budget waits for that decision, and a stop there drops it (its thread stops), so the driver gets
        #: no result of the trial past the budget or past a result it stopped the trial at (it got one of each).
        #: Ray's function trainable takes one report at a time too: each waits for the trainable's next
        #: ``train()`` call (its ``continue_lock``), which numbers its result, and comes only once the scheduler
        #: has decided on the last one (a stop or a pause ends the actor, and the waiting result with it). Only
        #: reports wait: the trial's other threads compute, print and call the driver meanwhile. Re-entrant: a save
        #: at the trial's end (``at_end``) or a stop rule that reports holds it already.
        self._reporting = threading.RLock()
        #: The trial's lane turn as its threads share it (None: the trial never waits for a turn).
        self._turns = SharedTurn(turns) if turns is not None else None
        #: ``caller(method, args, label)``: sends a call to the driver and waits for its answer (``label``: what
        #: the device's goodput record names the wait by, None for ``method``; :meth:`call`).
        self._caller: Callable[[str, tuple[Any, ...], str | None], Any] | None = None
        #: Set when a deferred report kept its lane's turn, expecting the driver call that follows it to give the
        #: turn away; cleared by that call or by the next boundary that may switch (see :meth:`report`).
        self._switch_owed = False
        #: The error of the save at a pause at the budget that is not implemented (no ``save_checkpoint``), raised
        #: if the verdict ends the trial there (see :meth:`report`'s ``end_save_at_pause``).
        self._unsaved_pause: NotImplementedError | None = None
        self.ranks: RankSync | None = None
        #: Set when a report, step or pause ended the trial (:class:`StopTrial`), in whichever of its threads.
        self.stopped = False
        #: Set by the host once the trial's function has returned: a thread it started may not report after.
        self.ended = False

    def at_budget(self, result: Mapping[str, Any]) -> bool:
        """True when ``result`` reaches the trial's budget (the trial then pauses after reporting it)."""
        if self.budget is None:
            return False
        if self.time_attr not in result:
            raise BudgetKeyError(
                f"time_attr: the searcher measures budgets in {self.time_attr!r}, which is not in the result "
                f"reported by trial {self.context.trial_id} (its keys are {sorted(result)})"
            )
        return bool(result[self.time_attr] >= self.budget)

    def _add_totals(self, metrics: Mapping[str, Any], result: dict[str, Any]) -> None:
        """Ray's running totals, for a trainable that reports ``timesteps_this_iter`` or ``episodes_this_iter``:
        ``timesteps_total``, ``episodes_total`` (unless the result has its own) and ``timesteps_since_restore``."""
        step = metrics.get(TIMESTEPS_THIS_ITER_KEY)
        if step is not None:
            self._timesteps_total = (self._timesteps_total or 0) + step
            self._timesteps_since_restore += step
        episodes = metrics.get(EPISODES_THIS_ITER_KEY)
        if episodes is not None:
            self._episodes_total = (self._episodes_total or 0) + episodes
        if self._timesteps_since_restore:
            result[TIMESTEPS_SINCE_RESTORE_KEY] = self._timesteps_since_restore
        if self._timesteps_total is not None:
            result.setdefault(TIMESTEPS_TOTAL_KEY, self._timesteps_total)
        if self._episodes_total is not None:
            result.setdefault(EPISODES_TOTAL_KEY, self._episodes_total)
        self._last_totals = result_totals(result)

    def _verdict_due(self, result: Mapping[str, Any]) -> bool:
        """Whether the trial waits for the searcher's decision on ``result`` (see ``verdict_from``)."""
        if self.verdict_from is None:
            return False
        reached = result.get(self.time_attr)
        return isinstance(reached, (int, float)) and reached >= self.verdict_from

    def resume(self, budget: float | None) -> None:
        """Let a trial paused at its budget run on, to ``budget`` (None: to the end). A trial still running (a
        restart redoing iterations, a trial just submitted) only gets the new budget: the wake-up is for a pause,
        and one left set would let its next pause pass without a verdict."""
        with self._pause_lock:
            self.budget = budget
            if self._pausing:
                self._resumed.set()

    def _keep(self, checkpoint: Checkpoint, result: dict[str, Any]) -> None:
        """Persist ``checkpoint`` as this iteration's and name it in ``result`` (rank 0's only: a worker's copy
        is dropped)."""
        if self.ranks is None or self.ranks.leader:
            path = persist_checkpoint(checkpoint, self.context.trial_dir, self.iteration)
            self.checkpoint = Checkpoint(path)
            self.checkpoint_at = (self.iteration, result["time_total_s"])
            self.checkpoint_totals = result_totals(result)
            result["checkpoint_dir_name"] = os.path.basename(path)

    def attach_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Persist ``checkpoint`` as that of the last reported iteration, whose result was delivered without one,
        and tell the driver (a class ``Trainable`` saving where a callback's ``should_checkpoint`` asked; the
        trainable has not moved on since). A data-parallel worker's copy is dropped, as in :meth:`report`."""
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"attach_checkpoint: expected a fluidsalus.Checkpoint, got {type(checkpoint).__name__}")
        if self.ranks is not None and not self.ranks.leader:
            return
        path = persist_checkpoint(checkpoint, self.context.trial_dir, self.iteration)
        self.checkpoint = Checkpoint(path)
        self.checkpoint_at = (self.iteration, self._last_time_total)
        self.checkpoint_totals = dict(self._last_totals)
        if self._checkpoint_sink is not None:
            self._checkpoint_sink(self.iteration, os.path.basename(path))

    def checkpoint_verdict(self) -> bool:
        """Wait for the driver to say whether the run's callbacks asked for a checkpoint of the last reported
        iteration (its lane's turn goes to a neighbour meanwhile). A data-parallel worker does not ask: rank 0
        saves the trial."""
        if self.ranks is not None and not self.ranks.leader:
            return False
        return bool(self.call(CHECKPOINT_VERDICT_CALL, self.iteration))

    def take_checkpoint_request(self) -> bool:
        """Whether the driver asked for a checkpoint since the last call (the request is consumed)."""
        if not self.checkpoint_requested.is_set():
            return False
        self.checkpoint_requested.clear()
        return True

    def request_stop(self, no_verdict: bool = False, peers_lost: bool = False) -> None:
        """Stop the trial at its next report, or now if it is paused at its budget.

        Args:
            no_verdict: The stop is no verdict on this trial: the run's end (its time budget, a stopper's
                ``stop_all()``, ``fail_fast``, an interruption), or the planner's move or preemption, after which
                it starts again from its checkpoint. A save at its end that is not implemented then does not fail
                it, as Ray saves ``checkpoint_at_end`` only for a trial that is done.
            peers_lost: A data-parallel worker of the trial died with its device (its process was killed, its
                node went): rank 0 does not wait for the workers at its end (:attr:`peers_lost`).
        """
        self.no_verdict = self.no_verdict or no_verdict
        if peers_lost:
            self.peers_lost.set()
        self.stop_requested.set()
        self._resumed.set()

    def resume_checkpoint(self) -> Checkpoint | None:
        """The checkpoint the trainable resumes from (:func:`get_checkpoint`, Ray's bridged one, a class
        ``Trainable``'s restore), noted: a trainable that asks for it restores what a restart gives it. One that
        never asks (Ray's XGBoost example: its callback saves, the function never reads) starts over at a restart
        while its iterations go on from the checkpoint's, so the planner does not move it (the driver hears of the
        first ask through ``on_resume_read``), and an out-of-memory re-admission starts it from scratch."""
        if not self.resume_read:
            self.resume_read = True
            if self._on_resume_read is not None:
                self._on_resume_read()
        return self.checkpoint

    def report(self, metrics: Mapping[str, Any], checkpoint: Checkpoint | None = None,
               at_end: Callable[[], Checkpoint] | None = None, *, deferred: bool = False,
               end_save_at_pause: bool = False) -> None:
        """Deliver one result (see :func:`report`).

        Args:
            metrics: The iteration's metrics.
            checkpoint: The iteration's checkpoint, or None.
            at_end: Makes a checkpoint when this result may be the trial's last and ``checkpoint`` is None: it
                ends the trial (done, the stop rule, a requested stop) or pauses it at its budget, where the
                verdict may end it. A class ``Trainable`` under ``CheckpointConfig(checkpoint_at_end=True)``
                passes its ``save``.
            deferred: The result need not wake the driver: it goes with the trial's next event that does (a
                call to the driver, its end) or within the driver's poll interval. For a front end whose trial
                calls the driver right after reporting (:func:`report_deferred`). A result that pauses or ends
                the trial, or carries a checkpoint, is sent at once all the same. The lane's turn stays with
                the trial at such a report, since the call gives it away anyway (switching at both would hand
                the lane to a neighbour for a whole step before the call leaves, and then leave it idle while
                both wait for the driver); if no call came since the last deferred report, this one may switch.
            end_save_at_pause: ``at_end`` saves a pause at the budget only because the verdict may end the trial
                there (a scheduler's rung, under ``checkpoint_at_end``): a save that is not implemented
                (``NotImplementedError``) then fails the trial only if the verdict ends it, as Ray's save at the
                end fails it; a promoted trial goes on (it failed at its first rung, where Ray's went on). A save
                the searcher needs at its pauses (PBT's) fails the trial there, as Ray's does.
        """
        if not isinstance(metrics, Mapping):
            raise TypeError(f"report(metrics=...): metrics must be a dict, got {type(metrics).__name__}")
        self._check_live("report")
        if self.stopped:
            self._report_after_stop()
            return
        check_sendable(metrics)
        checkpoint = _engine_checkpoint(checkpoint)
        away = False  # this thread is away on the trial's clock (from its result's time until it returns)
        try:
            with self._reporting:  # (one report at a time, through its decision: see _reporting)
                if self.stopped:  # another thread's result ended the trial while this report waited for it
                    self._report_after_stop()
                    return
                self._check_live("report")
                now = time.time()
                self.iteration += 1
                iteration = self.iteration  # (this result's, whatever another thread's report makes it after)
                this_iteration = self._clock.lap(now, away_after=True)
                away = True
                self._time_since_restore += this_iteration
                result: dict[str, Any] = dict(metrics)
                result.update(  # in the order of Ray's results (``config`` goes after ``node_ip``: with_config)
                    timestamp=int(now),
                    checkpoint_dir_name=None,  # the checkpoint's folder when the result carries one, as in Ray
                    done=metrics.get("done") is True,  # a trainable may end itself by reporting done=True, as in Ray
                    training_iteration=iteration,
                    trial_id=self.context.trial_id,
                    date=datetime.datetime.fromtimestamp(now).strftime(DATE_FORMAT),
                    time_this_iter_s=this_iteration,
                    time_total_s=self._time_total_offset + self._time_since_restore,
                    pid=os.getpid(),
                    hostname=HOSTNAME,
                    node_ip=node_ip(),
                    time_since_restore=self._time_since_restore,
                    iterations_since_restore=iteration - self._start_iteration,
                )
                self._add_totals(metrics, result)
                self._last_time_total = result["time_total_s"]
                if checkpoint is not None:
                    self._keep(checkpoint, result)
                # The run's stop rule sees every result (as Ray Tune's stoppers do), even one the driver stops the trial
                # at anyway: a trial stopped for a move that also met the rule there is finished, not moved.
                if (self._should_stop is not None and self._should_stop(result)) or result["done"]:
                    self.stopped_by_rule = True
                stop = self.stopped_by_rule or self.stop_requested.is_set()
                with self._pause_lock:  # (with resume(): a new budget comes before this check or wakes the pause)
                    paused = self._pausing = not stop and self.at_budget(result)
                verdict = not stop and not paused and self._verdict_due(result)
                if self.ranks is not None:  # data-parallel: rank 0 decides, the workers follow
                    decision = self.ranks.at_report(iteration, STOP if stop else PAUSE if paused else VERDICT
                                                    if verdict else GO, self.stop_requested)
                    stop, paused, verdict = decision == STOP, decision == PAUSE, decision == VERDICT
                if stop:
                    result["done"] = True
                if at_end is not None and checkpoint is None and (stop or paused):
                    try:
                        self._keep(at_end(), result)
                    except NotImplementedError as e:
                        # (Ray saves only a trial that is done)
                        unjudged = stop and self.no_verdict and not self.stopped_by_rule
                        if (stop and not unjudged) or not end_save_at_pause:
                            self._sink(result, False, True)  # the result stands, as in Ray; the save's error fails it
                            raise
                        if not stop:
                            # A pause that may not be its end: it stays resident, needs no checkpoint to go on, and
                            # fails with this error if the verdict ends it here (below), unless a stop that is no
                            # verdict does.
                            self._unsaved_pause = e
                    except BaseException:
                        self._sink(result, False, True)  # the result stands, as in Ray; the save's error then fails it
                        raise
                self._sink(result, paused, not deferred or stop or paused or checkpoint is not None)
                if stop:
                    if self.stopped_by_rule:
                        self._wait_delivered()
                    raise self._stop()
                try:
                    stopped_at_verdict = verdict and self._wait_verdict(iteration)
                except StopTrial:
                    # The host ended the trial during the wait (its shutdown answers the calls waiting so): a stop
                    # as any other, so that a report of another thread waiting for this one is dropped.
                    self.stopped = True
                    raise
                if stopped_at_verdict:
                    # The searcher (or the driver's copy of the stopper) stopped it at this result (its lane's turn went
                    # away meanwhile): a class Trainable's end save goes with it, as with any stop that ends the trial
                    # (the driver's stopper's stops lost theirs: a review)
                    if at_end is not None and checkpoint is None and not self.no_verdict:
                        self.attach_checkpoint(at_end())
                    raise self._stop()
                if paused:
                    # Salus-style fast switching: the trial's state stays resident while it waits for its verdict,
                    # and its lane's turn goes to another trial meanwhile.
                    if self._turns is not None:
                        self._turns.release()
                    unsaved, self._unsaved_pause = self._unsaved_pause, None
                    stops = True
                    try:
                        stops = self._wait_resume(iteration)
                    finally:
                        if stops and self._turns is not None:
                            self._turns.leave()  # it ends here, without its turn back (its other threads may take it)
                    if stops:
                        if unsaved is not None and not self.no_verdict:
                            raise unsaved  # ended at this pause: the save at its end is not implemented, as Ray's fails
                        raise self._stop()
                    if self._turns is not None:
                        self._turns.acquire()
            if not paused and self._turns is not None:
                keep = deferred and not self._switch_owed
                self._turns.boundary(may_switch=not keep)  # an iteration boundary: the lane may switch here
                self._switch_owed = keep
                if self.stop_requested.is_set() and self._stops_alone():
                    raise self._stop()
        finally:
            if away:  # (its time paused, or waiting for a verdict or the lane, is in no iteration)
                self._clock.come_back(time.time())

    def _report_after_stop(self) -> None:
        """A report of a trial already stopped (at an earlier boundary, or by another thread's result while this
        report waited for its turn to report): no result, as in Ray, which drops it: it was one more iteration,
        past where the scheduler stopped the trial, and could be its best result. Made as that stop unwinds this
        thread (in a ``finally:`` or an ``except``, Lightning's ``on_exception`` hooks), it returns; any other
        (the trial's own thread, after a thread it started was stopped) stops its caller: Ray ends the whole
        process, so nothing of a stopped trial goes on."""
        if isinstance(sys.exc_info()[1], StopTrial):
            return
        raise self._stop()

    def _wait_delivered(self) -> None:
        """Wait, at the result the trial's stop rule ends it at, until the driver has it (one round trip, once per
        trial): what the trainable does next (a ``finally:`` that ends the process, a crash in native code) can no
        longer lose it. A process that died there lost the result still waiting in the device's outbox: the trial
        was run again, and failed after two such deaths, where a Ray Tune trial, whose report waits for the driver,
        ends ``TERMINATED`` at it. The trial keeps its lane's turn meanwhile (below)."""
        if self._await_delivery is None:
            return
        # (The trial keeps its lane's turn through the wait, a round trip: given to a neighbour, it came back only
        # at that neighbour's next boundary, a whole iteration of it later, or never before the run's end.)
        self._await_delivery()

    def _wait_verdict(self, iteration: int) -> bool:
        """Wait for the driver's verdict on the result just delivered (:data:`RESULT_VERDICT_CALL`): True to stop
        at it, False to run on.

        Rank 0 of a data-parallel trial asks the driver and passes the answer on (:data:`VERDICT`); a worker waits
        for it as after a pause, its lane's turn given to a neighbour meanwhile, as the caller's is (:meth:`call`).
        """
        if self.ranks is not None and not self.ranks.leader:
            if self._turns is not None:
                self._turns.release(verdict=True)  # (held through in a run's tail as rank 0's: hold_pauses)
            stops = True
            try:
                stops = self.ranks.at_resume(iteration, False, self.stop_requested) == STOP
            finally:
                if stops and self._turns is not None:
                    self._turns.leave()  # it ends here, without its turn back (see report's pause)
            if stops:
                return True
            if self._turns is not None:
                self._turns.acquire()
            return False
        stop = bool(self.call(RESULT_VERDICT_CALL, iteration, verdict=True))
        if self.ranks is not None:
            self.ranks.at_resume(iteration, stop, self.stop_requested)
        return stop

    def _wait_resume(self, iteration: int) -> bool:
        """Wait, paused at the budget, for the verdict: True to stop, False to run on.

        A data-parallel worker waits for rank 0's verdict instead of the driver's.
        """
        if self.ranks is not None and not self.ranks.leader:
            return self.ranks.at_resume(iteration, False, self.stop_requested) == STOP
        self._resumed.wait()
        with self._pause_lock:
            self._resumed.clear()
            self._pausing = False
        stop = self.stop_requested.is_set()
        if self.ranks is not None:
            self.ranks.at_resume(iteration, stop, self.stop_requested)
        return stop

    def call(self, method: str, *args: Any, label: str | None = None, verdict: bool = False) -> Any:
        """Call ``method`` on the driver's call handler and wait for its answer (see ``fluidsalus.session.call``).

        ``label`` names the wait in the device's ``driver_wait`` record (goodput's ``idle_driver`` split by method),
        and the driver's ``driver_busy`` spell answering it, if any (the call carries it: ``gpu.host.EV_CALL``),
        ``method`` when None: a front end whose ``method`` wraps another call names the call it makes (an Optuna
        ``should_prune`` that carries the trial's held reports travels as ``optuna.after_reports``). ``verdict``: the
        call asks whether the trial stops at the result it just reported (a scheduler's verdict, an Optuna
        ``should_prune``): see :func:`call_driver`."""
        self._check_live("call_driver")
        if self._caller is None:
            raise SessionError("this trial has no driver to call (no call handler was set for the run)")
        if self._turns is None:
            return self._caller(method, args, label)
        # Waiting for the driver computes nothing: the lane's turn goes to a ready neighbour meanwhile, as when
        # paused at a budget, and comes back once the answer is here (an Optuna objective asks the driver at
        # every step, so its lane would otherwise idle for a round trip per step). Threads of the trial may be in
        # calls at once: the first gives the turn up, the last back takes it again (SharedTurn).
        self._turns.release(verdict)
        self._switch_owed = False
        self._clock.step_away(time.time())  # waiting for the driver and the turn is no part of the iteration
        try:
            return self._caller(method, args, label)
        finally:
            try:
                self._turns.acquire()
            finally:
                self._clock.come_back(time.time())

    def _stop(self) -> StopTrial:
        """The exception that ends the trial here, noted so that a stop in a thread the trial started ends the
        trial as stopped even when its function then returns."""
        self.stopped = True
        return StopTrial()

    def _check_live(self, function: str) -> None:
        if self.ended:
            raise SessionError(f"fluidsalus.{function}() was called by a thread of trial {self.context.trial_id} "
                               "after the trial ended (its function had returned). Join the threads a trainable "
                               "starts before it returns.")

    def start_clock(self) -> None:
        """Start the trial's clocks (called once the trial first holds its lane's turn)."""
        self._clock.start(time.time())

    def step(self) -> None:
        """A finer boundary than ``report()``: the lane may switch here once the quantum has passed."""
        self._check_live("step")
        if self._turns is not None:
            away = time.time()
            self._turns.step()
            self._clock.exclude(away, time.time())  # a neighbour's turn taken here is no part of this iteration
            if self.stop_requested.is_set() and self._stops_alone():
                raise self._stop()

    def _stops_alone(self) -> bool:
        """Whether a requested stop ends the trial here, between rank 0's decisions.

        A data-parallel worker that was asked to stop goes on to the next ``report()`` and stops with rank 0
        there (leaving mid-iteration would break rank 0's next collective), unless rank 0 is already gone.
        """
        return self.ranks is None or self.ranks.leader or self.ranks.leader_gone()

    def report_return_value(self, output: Any) -> None:
        """Report what a function trainable returned or yielded, as Ray Tune does."""
        if output is None:
            return
        if isinstance(output, Mapping):
            self.report(output)
        elif isinstance(output, Number) and not isinstance(output, bool):
            # as it came (an int stays an int, as in Ray); a number JSON cannot hold (a Fraction, a Decimal) as a float
            kept = isinstance(output, (int, float)) or type(output).__module__ == "numpy"
            self.report({DEFAULT_METRIC: output if kept else float(output)})
        else:
            raise ValueError(
                "Invalid return or yield value: a trainable may return or yield a single number or a dict, "
                f"got {type(output).__name__}"
            )


def _current(function: str) -> TrialSession:
    session: TrialSession | None = getattr(_local, "session", None)
    if session is None:
        raise SessionError(
            f"fluidsalus.{function}() was called outside a trial. Call it inside a trainable that fluidsalus "
            "runs (fluidsalus.run(...) or tune.Tuner(...).fit()), from the trial's thread or a thread it started."
        )
    return session


def current_session() -> TrialSession | None:
    """The session of the trial that runs in the calling thread, or None outside a trial."""
    return getattr(_local, "session", None)


def set_session(session: TrialSession | None) -> None:
    """Install (or with None remove) the session of the calling thread. Used by the device host."""
    _local.session = session


#: ``threading.Thread.start`` as it was before :func:`inherit_sessions_in_started_threads` wrapped it.
_thread_start = threading.Thread.start
_inheriting = False  # whether it has wrapped it
#: Threads trials started (and the threads those started): a device process they outlive is not reused for another
#: run (``gpu.actor._DeviceActor.reset``), since a new process would not have them.
_trial_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _start_in_trial(self: threading.Thread) -> None:
    """``threading.Thread.start`` where sessions are inherited: a thread started by a trial runs in that trial.

    A :class:`StopTrial` that ends such a thread (the driver stopped the trial at a report there) ends it quietly;
    the trial's own thread learns of the stop at its next report, or from ``TrialSession.stopped`` when its
    function returns.
    """
    session = getattr(_local, "session", None)
    if session is not None:
        run = self.run

        def run_in_trial() -> None:
            # (the session stays the thread's until it ends: the traceback of an exception it lets out, which
            # threading.excepthook prints after this returns, is the trial's output, as under Ray)
            set_session(session)
            try:
                run()
            except StopTrial:
                pass

        self.run = run_in_trial  # type: ignore[method-assign]
        _trial_threads.add(self)
    _thread_start(self)


def trial_threads_alive() -> list[str]:
    """The names of threads that trials started (since :func:`inherit_sessions_in_started_threads`) and that still
    run, such as the workers of a thread pool a trial made and never shut down."""
    return sorted(t.name for t in list(_trial_threads) if t.is_alive())


def start_outside_trials(thread: threading.Thread) -> None:
    """Start ``thread`` in no trial, whichever trial the calling thread runs (the host's own trial threads: a
    trial admitted at a neighbour's report is not the neighbour's)."""
    _thread_start(thread)


def inherit_sessions_in_started_threads() -> None:
    """Make every thread a trial starts from now on belong to that trial (idempotent; the device host calls it).

    Ray Tune runs one trial per process, so any thread of a trainable may call ``tune.report``; fluidsalus runs
    several trials as threads of one process and finds a thread's trial through the thread, so a thread inherits
    the trial of the thread that started it (``threading.Thread``, and so ``concurrent.futures`` pools a trial
    creates). A pool created before any trial, and shared between trials, runs in none.
    """
    global _thread_start, _inheriting
    if _inheriting:  # once per process: a tool that wrapped ours since must not be wrapped in turn (a loop)
        return
    _thread_start = threading.Thread.start  # as it is now: another tool may have wrapped it before
    threading.Thread.start = _start_in_trial  # type: ignore[method-assign]
    _inheriting = True


def in_device_process() -> bool:
    """Whether a device host runs in this process (it made threads inherit their trial's session): a call
    outside a trial here comes from a thread no trial started, not from a script run on its own."""
    return _inheriting


def report(metrics: Mapping[str, Any], checkpoint: Checkpoint | None = None) -> None:
    """Report one iteration's metrics, and optionally a checkpoint, from inside a trainable.

    Args:
        metrics: The metrics of this iteration, e.g. ``{"accuracy": 0.93}``.
        checkpoint: A :class:`Checkpoint` of the trial's state after this iteration.

    Raises:
        SessionError: When called outside a trial.
    """
    _current("report").report(metrics, checkpoint)


def report_deferred(metrics: Mapping[str, Any]) -> None:
    """:func:`report` for a front end whose trial calls the driver right after each report, as an Optuna
    trial's ``report`` is followed by ``should_prune``: the result reaches the driver with that call (or within
    the driver's poll interval, ``trialgroup.executor.POLL_WAIT_S``) instead of waking it on its own, so a step
    costs one round trip to the driver, not two. A result that pauses or ends the trial is sent at once. The
    trial also keeps its lane's turn for that call, which gives it away (see :meth:`TrialSession.report`).

    Args:
        metrics: The iteration's metrics.

    Raises:
        SessionError: When called outside a trial.
    """
    _current("report").report(metrics, deferred=True)


def get_checkpoint() -> Checkpoint | None:
    """Return the checkpoint this trial should resume from, or None when it starts fresh.

    After the trial reports a checkpoint, this returns that (persisted) checkpoint.
    """
    return _current("get_checkpoint").resume_checkpoint()


def call_driver(method: str, *args: Any, label: str | None = None, verdict: bool = False) -> Any:
    """From inside a trial, call the run's driver-side call handler and return its answer.

    This is the channel front ends use for define-by-run APIs (an Optuna trial's ``suggest_float`` asks the
    real study, which lives on the driver). The trial waits for the answer; an exception raised by the
    handler is raised here.

    Args:
        method: The name the handler dispatches on.
        *args: Its arguments (picklable).
        label: What the device's goodput record names the wait by (``fluidsalus inspect``'s driver idle by
            method), and the driver's record its busy spell answering the call; None: ``method``.
        verdict: The call asks whether the trial stops at the result it just reported (an Optuna ``should_prune``):
            the trial runs on or ends with the answer. While the driver holds pauses (the run's tail:
            ``DeviceHost.hold_pauses``), a prefetched trial of its lane does not begin during the wait, as during
            a pause at the budget.

    Returns:
        The handler's return value.
    """
    return _current("call_driver").call(method, *args, label=label, verdict=verdict)


def step() -> None:
    """Mark a point inside an iteration where the trial may give its lane to another trial.

    Call it, for example, after every minibatch of a long epoch. The lane switches here only once the trial
    has computed for ``quantum_ms`` since it last got the lane; otherwise this returns at once. Raises
    nothing outside a stop: a trial the searcher stopped ends here.
    """
    _current("step").step()


def get_context() -> TrialContext:
    """Return the :class:`TrialContext` of the running trial."""
    return _current("get_context").context
