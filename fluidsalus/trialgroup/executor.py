"""The driver loop: searcher → TrialGroups → planner → device actors → results → store → decisions.

One :class:`Executor` runs one experiment. It keeps one long poll outstanding per device actor and handles
whatever batch of events comes back first. Each batch is written to the store in one transaction *before*
anything acts on it; only then do the searcher, the decisions and the progress view see it.

**Placement** is the water-filling planner's (:mod:`fluidsalus.trialgroup.planner`, docs/planner.md). The
executor keeps a :class:`~fluidsalus.trialgroup.planner.Planner` and feeds it:

- every rank-0 result's ``time_this_iter_s``, with the trial's device count and the number of trials computing
  on its home device (:meth:`Planner.observe`; an iteration during which that number changed is left out,
  except as a trial's first measurement);
- each trial's P and T as its device's lane manager records them (``lane_admit``, ``lane_estimate``,
  ``lane_oom`` events; the device's default estimate until then);
- one :class:`~fluidsalus.trialgroup.planner.DeviceView` per live device: its lane capacity, its slots, its
  kind as the curve key, and its lanes as replayed from its lane events (:class:`LaneMirror`);
- every live trial as a :class:`~fluidsalus.trialgroup.planner.TrialDemand` (:func:`trial_demand`): the
  iterations left to its budget, its estimates, its devices, paused or not, and whether its trainable is
  data-parallel.

It re-plans only when something changed (new trials, a promotion, a trial that ended, paused, was stopped or
requeued, a first or materially new profile, a new memory estimate, a device that died), and applies only the
plan's changes (:func:`plan_actions`): a START is submitted to its devices (one rank per device); a MOVE or
RESIZE stops the trial at its next iteration boundary and restarts it from its last checkpoint on the new
devices; a preempted trial does the same and goes back to the queue; a KEEP is left alone, so a trial whose
placement is unchanged is never restarted. A trial without a checkpoint is not moved or preempted:
restarting it from scratch would throw its work away (a planned move refused for that is recorded as a
``plan_refused`` event, and its first checkpoint triggers a re-plan). One exception: a trial that has reported
nothing yet (typically one prefetched behind a running trial, below) may not have begun at all, so the executor
asks its device to take it back (``withdraw``): a device gives back only a trial that has never had its lane's
turn, and the trial is then placed again as planned, losing nothing (a ``plan_withdraw`` event, then a
``trial_restart`` with reason ``withdrawn``). Trials the planner
finds unplaceable (``P + T`` above every device) end with an error that names both sizes.

**Prefetch.** Once a device runs as many computing trials as it has slots, the executor also submits
:data:`PREFETCH_PER_DEVICE` of the planner's queued trials to it (queue order: longest predicted work first), so
that the device starts its next trial the moment a slot frees, without a driver round trip. The planner sees a
prefetched trial as placed there (it holds memory in a lane there), and may still withdraw it or move it (from a
checkpoint, as any trial). The device holds it back (``TrialSpec.prefetched``): it begins only when its lane would
otherwise idle, so it does not time-slice with the trial it waits behind, and trials end one after another.
While another device is up, no trial waits in the queue and the searcher proposes no new one, the device also holds it
through its neighbour's pause at the budget until the driver answered that pause, and through its neighbour's wait for a
verdict on a result (an Optuna pruner's ``should_prune``) (``Executor._tell_hold_pauses``): a freed slot elsewhere has
nothing else to start, and ASHA's promotion (or a verdict to run on) would leave the two time-slicing one slot to their
ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import numbers
import os
import pickle
import queue
import re
import signal
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import ray
from ray import cloudpickle

from fluidsalus.callbacks import Callback
from fluidsalus.checkpoint import EXPLOIT_CHECKPOINT_PREFIX, Checkpoint, persist_checkpoint
from fluidsalus.distributed import data_parallel_workers
from fluidsalus.errors import ConfigError, FluidsalusError, error_summary, plural, trial_error, trial_failure
from fluidsalus.gpu.actor import cluster_nodes, start_device_actor
from fluidsalus.gpu.device import (
    DEFAULT_TRIAL_ESTIMATE,
    DeviceSpec,
    NodeResources,
    as_run_plans,
    devices_of_joined_nodes,
    replacements_for_lost,
)
from fluidsalus.gpu.host import (
    DEFAULT_QUANTUM_MS,
    EV_CALL,
    EV_CHECKPOINT,
    EV_END,
    EV_FATAL,
    EV_LANE,
    EV_RESULT,
    EV_START,
    LANE_ERROR_AFTER_STOP,
    LANE_RESUME_READ,
    LANE_WARNING,
    OUT_COMPLETED,
    OUT_ERRORED,
    OUT_STOPPED,
    OUT_WITHDRAWN,
    HostSettings,
    TrialSpec,
    decides_stop_all,
    for_devices,
)
from fluidsalus.gpu.policies import DEFAULT_POLICY
from fluidsalus.progress import Progress, format_metric
from fluidsalus.result import lookup_metric, rank_checkpoints
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.session import (
    AUTO_RESULT_KEYS,
    CHECKPOINT_VERDICT_CALL,
    DATE_FORMAT,
    DEFAULT_METRIC,
    RESULT_VERDICT_CALL,
    result_totals,
)
from fluidsalus.stopper_state import StopperSaves
from fluidsalus.store import (
    CALLBACK_ERROR_EVENT,
    ERROR,
    ERROR_FILE,
    ERROR_PICKLE_FILE,
    FINAL_STATUSES,
    NAME_MAX_BYTES,
    PAUSED,
    PENDING,
    RESTART_DEVICE_DIED,
    RESTART_EXPLOIT,
    RESTART_MOVE,
    RESTART_PREEMPT,
    RESTART_RETRY,
    RESTART_TURN,
    RESTART_WITHDRAWN,
    RUNNING,
    SEARCHER_STOP_EVENT,
    SEARCHER_TOLD_END_EVENT,
    TERMINATED,
    TRIAL_DIRNAME_EVENT,
    TRIAL_RESTART_EVENT,
    TRIAL_START_EVENT,
    ExperimentStore,
    remove_folder,
    restart_words,
)
from fluidsalus.trialgroup.dispatch import (
    PREFETCH_PER_DEVICE,
    REFUSED_LIMIT,
    REFUSED_NO_CHECKPOINT,
    DeviceLoad,
    LaneMirror,
    PlanActions,
    TrialState,
    charge_death,
    checkpoint_iteration,
    choose_prefetch,
    estimate_of,
    is_stalled,
    may_not_have_begun,
    plan_actions,
    restarts_in_place,
    resume_from,
    trial_demand,
)
from fluidsalus.trialgroup.movecost import MoveCostMeter
from fluidsalus.trialgroup.planner import (
    KEEP,
    RESIZE,
    DeviceView,
    Plan,
    Planner,
    PlannerSettings,
    TrialDemand,
)
from fluidsalus.trialgroup.queue import PendingQueue, remaining_budget
from fluidsalus.trialgroup.searcher_log import SearcherLog
from fluidsalus.trialgroup.trial import Trial, TrialGroup
from fluidsalus.trialgroup.warm import DEFAULT_KEEP_WARM_S, NodeRoom, WarmActor, WarmDevices, WarmKey, waits_for_room

logger = logging.getLogger(__name__)

#: Longest a device holds a poll when it has nothing to report. It bounds how long the driver goes without
#: hearing from a device (and so how late it notices Ctrl-C or a dead actor); it costs nothing when trials
#: report, since a poll returns as soon as there is an event.
POLL_WAIT_S = 0.5
#: How long the driver waits for the first of the device actors to start before it gives up with an error naming
#: the resources asked for. Starting an actor takes about a second here; a cluster too small for the devices
#: asked for never starts them, and this turns that hang into an error. (The others join when they come up:
#: :meth:`Executor._start_devices`.) A run with no device up later (its last one died) waits as long for a
#: replacement (:meth:`Executor._loop`).
ACTOR_START_TIMEOUT_S = 120.0
#: Longest a Ctrl-C waits for the devices' last polls before it stops their trials (:meth:`Executor._drain`): woken,
#: a device's poll returns at once (a few milliseconds), and without the wake within :data:`POLL_WAIT_S`; on a loaded
#: machine the round trip of the two polls took longer than two poll periods (a CI run on 2 cores under two pytest
#: processes lost a trial's last result at 1 s), so six. Only a slow device makes a Ctrl-C wait that long; a second
#: Ctrl-C cuts it short.
INTERRUPT_DRAIN_S = 6 * POLL_WAIT_S
#: Grace period for trials to reach a report boundary when the run ends early (Ctrl-C, fatal error).
SHUTDOWN_GRACE_S = 2.0
#: Seconds a trial has to reach its next report once the run begins to end (its time budget, ``stop_all()``,
#: ``fail_fast``); one that has not is ended without it (:meth:`Executor._end_stragglers`). Ray's: its controller
#: waits 5 s for the trials' actors to stop at the end of an experiment, then kills them.
RUN_END_GRACE_S = 5.0
#: Event the driver stores when the run begins to end early (:meth:`Executor._check_end`): ``data["reason"]`` is
#: ``"time_budget"``, ``"fail_fast"`` or ``"stop_all"``, and ``data[SEARCH_ENDED_KEY]`` whether that end ended the
#: search for good.
EXPERIMENT_ENDING_EVENT = "experiment_ending"
#: :data:`EXPERIMENT_ENDING_EVENT`'s key that says the run's end ended the search, as Ray's controller calls
#: ``search_alg.set_finished()`` there and its restore keeps it: a resumed run asks its searcher for no more trials.
#: True for each reason but ``fail_fast="raise"`` (Ray raises that trial's error before it ends the search); a
#: Ctrl-C stores no such event (Ray's leaves the search to go on). Stores before it have no such key: their search
#: goes on.
SEARCH_ENDED_KEY = "search_ended"
#: :data:`EXPERIMENT_ENDING_EVENT`'s key, under ``fail_fast="raise"`` only, naming the trial whose error the run
#: raised. Ray raises it before it records the failure, so its saved state holds that trial unfinished and its
#: ``Tuner.restore`` runs it on whatever its errored-trial flags say (``fluidsalus.tune.Tuner.restore``).
RAISED_TRIAL_KEY = "raised"
#: The devices' ``verdict_from`` when a stopper's ``stop_all()`` may end the run: every result (its ``time_attr``
#: is at least this) waits for the driver's judgement of it.
STOP_ALL_VERDICT_FROM = float("-inf")
#: Relative change of a trial's predicted alone time per iteration, since the planner last saw it, that
#: triggers a re-plan. Iteration times of one trial vary by a few percent from noise alone; a quarter is a
#: change in what the trial costs (a new phase, another allocation), which can change the queue order, a
#: device's load or whether a move pays. A trial's first measurement always triggers one.
REPLAN_PROFILE_CHANGE = 0.25
#: Queued trials the planner sees, as a multiple of what one plan can start (every slot of every device, plus
#: the prefetch). A plan starts at most that many, longest first, so the rest of the queue cannot change it;
#: leaving it out keeps a plan's cost independent of the queue's length. The second multiple is for the trials
#: the first ones make room for when some of them fit no device's memory.
QUEUE_WINDOW_FACTOR = 2
#: How long a finished run waits for the end events of data-parallel workers whose rank 0 has ended. Rank 0
#: ends after its workers (``gpu.host.TrialSpec``), so their ends are already in their devices' outboxes: one
#: poll of each brings them, well within two poll periods. A worker that outlives this (one that never joined
#: its rank 0) is ended by the device's shutdown.
WORKER_END_GRACE_S = 2 * POLL_WAIT_S
#: Event the driver stores when it was busy for at least :data:`DRIVER_BUSY_MIN_S` asking the searcher for trials
#: (``next_groups``: a Tune ``Searcher``'s ``suggest``; ``data["what"]`` is ``"searcher"``, ``data["trials"]`` the
#: new trials it gave) or answering a trial's call (an Optuna sampler's ``suggest``; ``data["what"]`` is the call as
#: its trial's ``driver_wait`` names it, ``gpu.host.EV_CALL``'s label: ``optuna.should_prune`` for one carrying held
#: reports, ``optuna.report`` for a flush; stores before it have the wire method, ``optuna.after_reports``):
#: ``ts`` is when it began, ``data["wait_s"]`` how long it took. Meanwhile the loop placed nothing: a device without
#: a trial waited for the driver (``fluidsalus.goodput.IDLE_DRIVER``). Stored only when the spell held a placement
#: back: the ask gave trials, or trials were queued, under ``max_concurrent_trials`` (``data["more"]`` is then
#: true; stores of 1e74147 also hold spells with ``more`` false, which goodput ignores). A quicker ask stores
#: nothing.
DRIVER_BUSY_EVENT = "driver_busy"
#: Shortest ask of the searcher, or answer to a call, stored as a :data:`DRIVER_BUSY_EVENT` (the loop asks the
#: searcher at every pass; a random search's draws take microseconds).
DRIVER_BUSY_MIN_S = 0.001
#: While calls are answered on the run's call threads (``ExecutorSettings.call_offload``), the loop waits for its
#: devices in slices of this long, and sends the answers made meanwhile between them: an answer reaches its trial
#: at most this late (a sampler call so answered takes 0.01 to 1 s), and the loop wakes 500 times a second at
#: most, only while such calls are out.
CALL_ANSWER_CHECK_S = 0.002
#: Shortest iteration the planner is told about. A shorter one measures the report path (building the result,
#: the lane hand-over, GIL hand-offs between the device's trial threads), not the trial's compute: a report
#: costs ~0.01 ms alone but its 95th percentile is 1 to 4 ms on a busy 2-core machine (``report_ms_p95`` of
#: ``benchmarks/compare.py --sweep trivial``), so only iterations ten times longer resolve the 5% gains the
#: planner's thresholds ask for. Trials with shorter iterations stay unmeasured: the planner packs them to the
#: devices' slots, which also hides the driver round trip that dominates them.
MIN_PROFILED_ITERATION_S = 0.01
#: How long the driver waits for rank 0's device actor to pick a free port for a data-parallel trial's
#: rendezvous: one actor round trip, far below this unless the actor is dead or stuck.
FREE_PORT_TIMEOUT_S = 30.0
#: From this ``verbose`` on, a trial that fails for good is printed when it ends: at every verbosity, as Ray logs
#: every trial failure even at ``verbose=0`` (where fluidsalus said nothing, and a failed trial went unseen); other
#: trial ends from 2 on.
ERROR_VERBOSITY = 0

#: The warning for a trial's ``error_after_stop`` record (``gpu.host.LANE_ERROR_AFTER_STOP``), by its ``moved``: None
#: for the device's (the trial met its stop rule), False or True for the driver's (a stop that ended it for good, or
#: a restart that goes on from a checkpoint: its ``restart`` is the reason, worded by
#: :func:`~fluidsalus.store.restart_words`).
_ERROR_AFTER_STOP_WARNINGS: dict[bool | None, str] = {
    None: "trial %s raised after the result its stop rule ended it at; it ends TERMINATED there, as in Ray Tune: %s",
    False: "trial %s raised as its stop (its scheduler's or searcher's, or the run's end) unwound it; it ends "
           "TERMINATED, as in Ray Tune: %s",
    True: "trial %s raised as a stop to restart it (%s) unwound it; it goes on from a checkpoint, as a Ray Tune "
          "trial paused: %s",
}
#: The warning for a trial that fails after ``fail_fast="raise"`` has a failure to raise (its ``error_after_stop``
#: record's ``after_raise``): Ray raises the first failure as its event comes and its clean-up kills the other trials'
#: actors, so it never sees this one.
_FAILED_AFTER_RAISE_WARNING = ("trial %s raised after fail_fast='raise''s failure ended the run; as in Ray Tune, "
                               "which raises the first failure at once and never sees this one, it is no failure of "
                               "it: it ends TERMINATED, left unfinished for a resume: %s")
#: Draws of ``ExecutorSettings.trial_id`` for one new trial before the run ends with a ``ConfigError``: a function
#: that keeps giving ids the experiment already has gives no new ones (8 random hex digits collide once in ~4e9).
TRIAL_ID_DRAWS = 100
#: The ``exploit_cancelled`` event of an exploit the executor does not apply (with its ``reason``).
EXPLOIT_CANCELLED_EVENT = "exploit_cancelled"
#: Ray Tune's switch for its check that every result has the run's metric: ``1`` turns it off (read at the start of
#: each run), for trainables that report the metric only now and then (with PBT's ``require_attrs=False``).
LENIENT_METRIC_ENV = "TUNE_DISABLE_STRICT_METRIC_CHECKING"

#: How often a run asks Ray for the cluster's nodes, to use those that joined (:meth:`Executor._watch_nodes`), while
#: it has devices lost with their node or when it uses the whole cluster: a node's devices wait at most this long
#: past its arrival, and a question costs the driver 0.55 ms here (``ray.nodes()``), 0.06 % of its time.
NODE_CHECK_S = 1.0


@dataclass
class ExecutorSettings:
    """Run-level settings the executor needs (validated earlier, at the public boundary)."""

    experiment_name: str
    experiment_dir: str
    trainable_name: str
    metric: str | None = None
    mode: str | None = None
    max_concurrent_trials: int | None = None
    max_failures: int = 0
    lane_policy: str = DEFAULT_POLICY
    quantum_ms: float = DEFAULT_QUANTUM_MS
    time_budget_s: float | None = None
    fail_fast: bool | str = False
    stopper: Any = None  # a driver-side Ray-style Stopper (its stop_all() ends the experiment)
    checkpoint_num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    #: Answers ``fluidsalus.session.call_driver(method, *args)`` from trials: ``handler(trial_id, method, args)``.
    call_handler: Callable[[str, str, tuple[Any, ...]], Any] | None = None
    #: ``f(trial_id, method, args) -> answer_fn | None``, asked on the loop for each call when the run may use call
    #: threads (``call_threads``): ``answer_fn()`` answers it on one of them, while the loop goes on; None: answered
    #: on the loop by ``call_handler`` (:meth:`Executor._answer_call`).
    call_offload: Callable[[str, str, tuple[Any, ...]], Callable[[], Any] | None] | None = None
    #: The most call threads: one per device up to this; fewer than two: every call is answered on the loop.
    call_threads: int = 0
    verbose: int = 1
    callbacks: list[Callback] = field(default_factory=list)
    #: ``(min_workers, max_workers)``: devices a trial may run on, data-parallel. None reads what the trainable
    #: declared with ``fluidsalus.distributed.data_parallel`` (one device when it declared nothing).
    workers: tuple[int, int] | None = None
    #: Queued trials submitted ahead to each full device (:data:`PREFETCH_PER_DEVICE`; 0 turns prefetch off).
    prefetch_per_device: int = PREFETCH_PER_DEVICE
    #: The user's hint of the device share one trial needs (``PlannerSettings.prior_share``); None: no hint.
    gpu_per_trial: float | None = None
    #: The CPU cores one trial asks for (``fluidsalus.run(cpus_per_trial=...)``), which its context reports
    #: (``get_trial_resources()``, as Ray's gives the request); None: its device's cores.
    cpus_per_trial: float | None = None
    #: ``f(trial_id, config) -> str``: the folder name of each new trial in the experiment (None: its id).
    trial_dirname: Callable[[str, Mapping[str, Any]], str] | None = None
    #: ``f(trial_id) -> str | None``: the name a trial's context gives it (None, or a None answer:
    #: ``<trainable>_<trial_id>``).
    trial_name: Callable[[str], str | None] | None = None
    #: ``f() -> str``: a new trial's id (the Tune front end's: Ray's ``Trial.generate_id()`` form for a search
    #: algorithm's trials); an id the experiment already has is drawn again (:data:`TRIAL_ID_DRAWS`). None:
    #: ``<run tag>_<seq:05d>``, the form of Ray's ``BasicVariantGenerator`` (a resumed run keeps its trials' prefix).
    trial_id: Callable[[], str] | None = None
    #: ``f(seq, config) -> dict``: keys added to each result of the trial created ``seq``-th with ``config``
    #: (a front end's own result keys, such as Ray's ``experiment_tag``), asked again when an exploit gives the
    #: trial a new config; None: none. For a new trial it is asked just before ``trial_dirname``.
    result_extras: Callable[[int, Mapping[str, Any]], Mapping[str, Any]] | None = None
    #: Seconds the run's virtual CPU devices' actors stay warm for the next run of this process when it ends
    #: normally (``fluidsalus.trialgroup.warm``; 0: they end with the run).
    keep_warm_s: float = DEFAULT_KEEP_WARM_S
    #: The devices of one node as the run plans its own (``plan_devices({node_id: resources}, ...)``), for the
    #: nodes that join the cluster (:meth:`Executor._watch_nodes`): the devices lost with their node start again
    #: there, and a run that grows adds the rest. None: lost devices stay lost, and the run does not grow.
    node_devices: Callable[[str, NodeResources], list[DeviceSpec]] | None = None
    #: The run uses the whole cluster (no ``devices=N``): a node that joins it gets devices too
    #: (:meth:`Executor._watch_nodes`).
    grow_onto_new_nodes: bool = False


def _kill_quietly(actor: Any) -> None:
    """End a parked actor; nothing to do once Ray is shut down (its actors ended with it)."""
    if ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def _resources_wanted_elsewhere() -> bool:
    """Whether anything on the connected cluster waits for resources that a node could hold but has not free now
    (``warm.waits_for_room``): an actor still waiting to be placed (any actor: the GCS lists them, device actors
    pinned to a node too; not one whose worker process is up, running its ``__init__``), or a task or placement group
    that waits (the demand ``ray status`` lists, which leaves out requests pinned to a node: a task pinned so is not
    seen). True where Ray is gone or cannot say: parked actors then go."""
    if not ray.is_initialized():
        return True
    try:
        from ray.autoscaler.v2.sdk import get_cluster_status

        requests = _actors_waiting_for_resources()
        if requests is None:  # (Ray does not say what they ask for)
            return True
        status = get_cluster_status(ray.get_runtime_context().gcs_address)
        demands = status.resource_demands
        requests += [dict(count.bundle) for demand in demands.ray_task_actor_demand
                     for count in demand.bundles_by_count if count.count]
        groups = [[dict(count.bundle) for count in demand.bundles_by_count]
                  for demand in demands.placement_group_demand]
        nodes: list[NodeRoom] = []
        for node in [*status.active_nodes, *status.idle_nodes]:
            if node.resource_usage is not None:
                usage = node.resource_usage.usage
                nodes.append(NodeRoom({u.resource_name: u.total for u in usage},
                                      {u.resource_name: u.total - u.used for u in usage}))
    except Exception:  # noqa: BLE001 - no answer: let the actors go rather than hold resources someone may want
        return True
    return waits_for_room(requests, nodes, groups)


def _actors_waiting_for_resources() -> list[dict[str, float]] | None:
    """What each actor the GCS has not placed yet asks for: those still being created and given no worker process
    yet (one that has one runs its ``__init__`` on resources it holds; the GCS gives it only once that process is up,
    so one whose process still starts is listed). None where this Ray does not say."""
    from ray._private.state import state as gcs_state

    accessor = getattr(gcs_state, "_connect_and_get_accessor", None)
    if accessor is None:
        return None
    from ray.core.generated import gcs_pb2

    actors = [gcs_pb2.ActorTableData.FromString(row)
              for row in accessor().get_actor_table(None, "PENDING_CREATION")]
    return [dict(actor.required_resources) for actor in actors if not actor.address.worker_id]


#: The device actors this process keeps warm between runs (``fluidsalus.release_devices()`` ends them).
WARM_DEVICES = WarmDevices(kill=_kill_quietly, wanted_elsewhere=_resources_wanted_elsewhere)


def _floats(value: Any) -> bool:
    """Whether ``float(value)`` takes it (a NumPy scalar, a one-element tensor, ...)."""
    try:
        float(value)
    except Exception:  # noqa: BLE001 - float() of an arbitrary object can raise anything
        return False
    return True


def _digits(value: int) -> str:
    """How many decimal digits an int has, ``about`` that many past Python's int-to-str limit (4300 digits by
    default, where ``str()`` raises ``ValueError``)."""
    try:
        return str(len(str(abs(value))))
    except ValueError:
        return f"about {int(value.bit_length() * math.log10(2)) + 1}"


def _cluster_token() -> str | None:
    """The connected Ray cluster and job, as :class:`WarmKey` keeps it; None where Ray cannot say."""
    try:
        context = ray.get_runtime_context()
        return f"{context.gcs_address}/{context.get_job_id()}"
    except Exception:  # noqa: BLE001 - a driver that cannot name its cluster keeps no actor warm
        return None


#: The signals :func:`sigint_held` holds: Ctrl-C, and SIGUSR1, which the Tune front end counts as one
#: (``fluidsalus.tune._interrupt.StopSignals``), each where its handler is one set from Python.
_HELD_SIGNALS = (signal.SIGINT, *((signal.SIGUSR1,) if hasattr(signal, "SIGUSR1") else ()))


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block is done, then give it to the handler it was for.

    The driver handles a device's batch in steps that belong together (the store's transaction, the searcher's
    decisions, the callbacks, the answers the trials wait for): a Ctrl-C that lands between them lost the rest of
    the batch (a callback's ``on_trial_result`` of the batch's later results, say a logger's rows, and the answers)
    before the Ctrl-C's drain ran. Held, the batch is handled whole, then the Ctrl-C goes on as before. A second
    Ctrl-C within the block is not held: both go to the handler at once (Ray Tune's front end counts them,
    ``fluidsalus.tune._interrupt.StopSignals``), so an insistent user still gets out at once, mid-batch. SIGUSR1,
    which that front end takes as a Ctrl-C, is held alike. A block that raises an error of its own (a callback's
    error that ends the run) ends with that error: the held signal is still given to its handler (counted), and its
    ``KeyboardInterrupt`` goes, as Ray's first Ctrl-C only sets a flag and the step's error comes out.

    Only in the main thread (handlers are set there alone), and only over a handler set from Python (the default
    ``KeyboardInterrupt``, the Tune front end's): one set by the OS (ignored, or the process's end) is left alone,
    and so is a handler the block itself sets.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: handler for signum in _HELD_SIGNALS if callable(handler := signal.getsignal(signum))}
    if not handlers:
        yield
        return
    held: list[tuple[int, FrameType | None]] = []

    def put_back() -> None:
        for signum, handler in handlers.items():
            if signal.getsignal(signum) is hold:
                signal.signal(signum, handler)

    def deliver(swallow: bool = False) -> None:
        """Give each handler its signals, in order; a ``KeyboardInterrupt`` comes out after the last of them (none
        when ``swallow``: the block's own error is on its way)."""
        signals = list(held)
        held.clear()
        interrupt: KeyboardInterrupt | None = None
        for signum, frame in signals:
            try:
                handlers[signum](signum, frame)
            except KeyboardInterrupt as e:
                interrupt = e
        if interrupt is not None and not swallow:
            raise interrupt

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append((signum, frame))
        if len(held) > 1:
            put_back()
            deliver()

    for signum in handlers:
        signal.signal(signum, hold)
    failed = False
    try:
        yield
    except Exception:
        failed = True
        raise
    finally:
        put_back()
        if held:
            deliver(swallow=failed)


#: A terminal colour code, which Ray's error texts carry (``\x1b[36m``).
_COLOUR_CODE = re.compile(r"\x1b\[[0-9;]*m")


def _plain(error: BaseException) -> str:
    """``str(error)`` without the terminal colour codes of Ray's error texts (for messages, events and logs)."""
    return _COLOUR_CODE.sub("", str(error))


def _not_started(specs: Sequence[DeviceSpec], what: str) -> FluidsalusError:
    """The error of a run whose device actors did not come up within :data:`ACTOR_START_TIMEOUT_S`.

    Args:
        specs: The devices whose actors were asked for.
        what: What did not start, as the message begins (``"the device actors"``).

    Returns:
        The error, naming the resources asked for and those Ray has free.
    """
    return FluidsalusError(
        f"{what} did not start within {ACTOR_START_TIMEOUT_S:.0f} s. Asked for: {_asked_for(specs)}; "
        f"Ray has available: {ray.available_resources()}. Free resources or ask for fewer devices.")


def _asked_for(specs: Sequence[DeviceSpec]) -> str:
    """The resources of the devices' actors, for an error: ``cpu:0 (1 CPU), cuda:0 (2 CPU, 1 GPU)``."""
    return ", ".join(f"{d.name} ({d.cpus} CPU{', 1 GPU' if d.kind == 'cuda' else ''})" for d in specs)


#: This thread's runs in progress (``devices``: their device lists, outermost first): a run started from a
#: callback, a searcher or a stopper of another on the driver (an Optuna callback that optimises a second study) is
#: nested in it, and waits on resources that the outer run, blocked in that call, never frees
#: (:meth:`Executor._check_nested_start`).
_THREAD_RUNS = threading.local()


@dataclass(frozen=True)
class ResourceUsage:
    """The cores and GPUs a run holds, and how many of them its running trials use now (Ray's "logical resource
    usage" of a Tune run, in fluidsalus's terms).

    Attributes:
        used_cpus: The cores of the lanes that run a trial: on each device, a core share (``cpus / slots``) per
            running trial, at most its ``slots`` of them.
        total_cpus: The cores the run's live devices reserve.
        used_gpus: On each GPU device, its share per running trial (``1 / slots``), at most the whole GPU.
        total_gpus: The run's live GPU devices.
    """

    used_cpus: float
    total_cpus: float
    used_gpus: float
    total_gpus: float


def runs_in_progress() -> list[Executor]:
    """The runs in progress on this thread, the innermost last (a callback of a run is called on it; a run started
    from another's callback is nested in it); each gives its :class:`ResourceUsage`
    (:meth:`Executor.resource_usage`)."""
    return list(getattr(_THREAD_RUNS, "executors", []))


def _free_after_take(parked: Sequence[WarmKey], taken: Sequence[WarmActor | None],
                     keys: Sequence[WarmKey | None]) -> dict[str, float]:
    """Ray's free resources as a run sees them once ``WARM_DEVICES.take`` ended the parked actors it did not take
    (``parked``: what was parked before): Ray frees their cores a moment after the kill, and a run that asked at
    once saw them held (a nested run refused, new actors not waited for)."""
    available = dict(ray.available_resources())
    kept = [key for key, warm in zip(keys, taken, strict=True) if warm is not None and key is not None]
    freed = sum(key.cpus for key in parked) - sum(key.cpus for key in kept)
    available["CPU"] = available.get("CPU", 0.0) + max(0, freed)
    return available


def _fits(spec: DeviceSpec, available: Mapping[str, float]) -> bool:
    """Whether Ray's free resources hold one more actor of ``spec`` (its CPUs, and a GPU for a CUDA device)."""
    return (available.get("CPU", 0.0) >= spec.cpus
            and (spec.kind != "cuda" or available.get("GPU", 0.0) >= 1.0))


def _warm_key(cluster: str | None, spec: DeviceSpec) -> WarmKey | None:
    """What a parked actor must match to serve ``spec``; None for a device that is never served warm (a GPU,
    whose memory and CUDA state a new process starts from)."""
    if cluster is None or spec.kind != "cpu":
        return None
    return WarmKey(cluster, spec.kind, spec.cpus, spec.node_id)


@dataclass
class _Restart:
    """How to start a trial again once its current attempt has ended."""

    reason: str  # "retry" after a failure, "exploit" for PBT, "move"/"preempted" for the planner, ...
    action: str | None = None  # the planner's action of a "move": MOVE or RESIZE
    error: str | None = None
    config: dict[str, Any] | None = None
    checkpoint_path: str | None = None
    iteration: int = 0
    time_total_s: float = 0.0
    totals: dict[str, float] = field(default_factory=dict)  # Ray's running totals at ``checkpoint_path``
    queue: bool = False  # give its devices up and wait in the queue (an exploit while a trial behind it waits)
    copied_metrics: dict[str, Any] | None = None  # an exploit's copy of another trial's checkpoint: its result


#: A trial id the executor made itself (``<prefix>_<seq:05d>``, the form of Ray's ``BasicVariantGenerator``), its
#: prefix as group 1.
_MADE_ID = re.compile(r"([0-9a-f]{5})_\d{5}")
#: Hex digits Ray appends to a trial folder name that is taken (``_create_unique_logdir_name``).
DIRNAME_SUFFIX_HEX = 4


def search_ended_by(store: ExperimentStore) -> str | None:
    """Why the last of the store's runs whose end ended the search (:data:`SEARCH_ENDED_KEY`) ended:
    ``"time_budget"``, ``"fail_fast"`` or ``"stop_all"``; None when no run's end did."""
    ended = [event.data["reason"] for event in store.events(EXPERIMENT_ENDING_EVENT)
             if (event.data or {}).get(SEARCH_ENDED_KEY)]
    return ended[-1] if ended else None


def resumed_search_ended_text(reason: str, trials: Sequence[Trial]) -> str:
    """What a resumed run whose earlier session's end (``reason``: :func:`search_ended_by`) ended the search does
    with its ``trials``: it proposes no new trial, and those left to run (unfinished, or errored ones a
    ``Tuner.restore`` flag made ``PENDING``) end unstarted at its first check (:meth:`Executor._check_end`); with none
    left, it has nothing to run."""
    left = sum(t.status not in FINAL_STATUSES for t in trials)
    head = (f"the run this resumes ended ({reason.replace('_', ' ')}) and its search with it; as a restored Ray "
            "Tune run, ")
    if not left:
        return head + "this one proposes no new trial, and has no trial left to run"
    return (head + f"this one ends at once: no new trial is proposed, and the {plural(left, 'trial')} it would run "
            f"again end{'s' if left == 1 else ''} unstarted")


def append_error_file(trial_dir: str, trial_name: str, number: int, ts: float, error: str | None,
                       trace: str | None, error_pickle: bytes | None = None) -> None:
    """Record a failure in the trial's folder as Ray does: append it to :data:`ERROR_FILE` (``Failure # <n>
    (occurred at <date>)``, then the error with its traceback), and pickle it, as the result's ``error`` gives it
    (its ``cause`` from ``error_pickle``), to :data:`ERROR_PICKLE_FILE` (the last failure; Ray's
    ``Result.from_path`` reads it, and so do fluidsalus's results, for the cause; ``Trial <trial_name> failed: ...``,
    :func:`~fluidsalus.errors.trial_failure`). A folder that cannot be written loses the files, never the run."""
    try:
        os.makedirs(trial_dir, exist_ok=True)
        with open(os.path.join(trial_dir, ERROR_FILE), "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(f"Failure # {number} (occurred at {time.strftime(DATE_FORMAT, time.localtime(ts))})\n")
            f.write(f"{(trace or error or 'no error text').rstrip()}\n")
        pickled = os.path.join(trial_dir, ERROR_PICKLE_FILE)
        with open(pickled + ".tmp", "wb") as f:  # (whole or not at all: a reader never sees half of it)
            pickle.dump(trial_failure(trial_name, error, trace, error_pickle), f)
        os.replace(pickled + ".tmp", pickled)
    except Exception as e:  # noqa: BLE001 - a failure's record must never end the run (OSError, a text that
        # cannot be encoded, an error object that cannot be made or pickled)
        logger.warning("could not record the failure in %s: %s", trial_dir, e)


#: The longest name a ``trial_dirname`` function may give: a file system's :data:`NAME_MAX_BYTES`, less the ``_``
#: and :data:`DIRNAME_SUFFIX_HEX` hex digits a taken name gets.
MAX_DIRNAME_BYTES = NAME_MAX_BYTES - 1 - DIRNAME_SUFFIX_HEX


def check_folder_name(name: str, what: str) -> None:
    """Check that ``name`` is one folder name (of a trial's folder, inside the experiment's).

    Args:
        name: The name.
        what: What gave it, for the message (``trial_dirname returned 'a/b' for trial x``).

    Raises:
        ConfigError: ``name`` is empty, ``.``/``..``, or has a path separator or a NUL byte (it named a folder
            outside the experiment's, or none).
    """
    if name in ("", ".", "..") or "/" in name or "\0" in name or os.sep in name or (
            os.altsep and os.altsep in name):
        raise ConfigError(f"{what}: it must be one folder name (not empty, '.', '..', and without a path separator "
                          "or a NUL byte)")


def check_dirname(name: Any, trial_id: str, experiment_dir: str, used: set[str], field: str = "trial_dirname") -> str:
    """A new trial's folder name as a ``trial_dirname`` function gave it, checked.

    Args:
        name: What the function returned.
        trial_id: The trial (for the message).
        experiment_dir: The experiment's folder.
        used: The folder names of the experiment's other trials.
        field: The function, as the user named it (``fluidsalus.run``'s ``trial_dirname``; a front end's own).

    Returns:
        ``name``, or, when another trial or a file of the experiment already has it, ``name`` followed by ``_``
        and four hex digits that make it new (Ray's rule, logged).

    Raises:
        ConfigError: ``name`` is not a str naming one folder: empty, ``.``/``..``, with a path separator or a NUL
            byte, or longer than :data:`MAX_DIRNAME_BYTES` (it failed the trial, with OSError "File name too long").
    """
    if not isinstance(name, str):
        raise ConfigError(f"{field} must return a str (got {type(name).__name__} for trial {trial_id})")
    check_folder_name(name, f"{field} returned {name!r} for trial {trial_id}")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_DIRNAME_BYTES:
        raise ConfigError(f"{field} returned a name of {len(name.encode('utf-8', 'surrogateescape'))} bytes for "
                          f"trial {trial_id}: it must be at most {MAX_DIRNAME_BYTES} (a file system's longest "
                          f"folder name, {NAME_MAX_BYTES}, less the {1 + DIRNAME_SUFFIX_HEX} a taken name gets)")
    unique = name
    while unique in used or os.path.lexists(os.path.join(experiment_dir, unique)):
        unique = f"{name}_{uuid.uuid4().hex[:DIRNAME_SUFFIX_HEX]}"
    if unique != name:
        logger.info("Trial %s gets the folder %s: %r is taken in the experiment", trial_id, unique, name)
    return unique


def rank_specs(spec: TrialSpec, devices: Sequence[int], rendezvous: str | None = None) -> list[tuple[int, TrialSpec]]:
    """The per-device specs of one trial: one rank per device, rank 0 on the first (its home).

    Args:
        spec: The trial's spec.
        devices: Its devices, home first.
        rendezvous: ``"ip:port"`` of rank 0's rendezvous; needed when there is more than one device.

    Returns:
        ``(device index, spec)`` pairs; a one-device trial keeps ``spec`` as it is.

    Raises:
        FluidsalusError: Several devices and no rendezvous address.
    """
    if len(devices) == 1:
        return [(devices[0], spec)]
    if not rendezvous:
        raise FluidsalusError(f"trial {spec.trial_id}: a data-parallel start on {len(devices)} devices needs a "
                              "rendezvous address")
    return [(index, dataclasses.replace(spec, rank=rank, world_size=len(devices), rendezvous=rendezvous))
            for rank, index in enumerate(devices)]


def declared_workers(payload: bytes) -> tuple[int, int] | None:
    """``(min_workers, max_workers)`` the packed trainable declared as data-parallel, or None.

    Reads the declaration ``fluidsalus.distributed.data_parallel`` attaches to the trainable
    (``fluidsalus.distributed.data_parallel_workers``).

    Args:
        payload: ``gpu.actor.pack_trainable``'s bytes.
    """
    try:
        packed = cloudpickle.loads(payload)
        if isinstance(packed, Mapping):  # {"host_options": ..., "code": cloudpickle of (trainable, stop)}
            packed = cloudpickle.loads(packed["code"])
        trainable = packed[0]
    except Exception:  # noqa: BLE001 - a trainable that cannot be rebuilt here is not declared data-parallel
        return None
    workers = data_parallel_workers(trainable)
    return workers if workers is not None and workers[1] > 1 else None


def _process_location(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"node_ip": ..., "pid": ...}`` of a device's process, from its actor's info (what it has of them)."""
    info = info or {}
    return {key: info[key] for key in ("node_ip", "pid") if info.get(key)}


@dataclass
class _Device:
    spec: DeviceSpec
    actor: Any
    info: dict[str, Any]
    max_running: int
    assigned: set[str]  # trials with a rank of their current attempt here (submitted, not ended)
    poll_ref: Any = None
    alive: bool = True
    outbox: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)  # commands for its next poll
    batches: int = 0  # calls with commands sent to its actor: the next one's number (``_DeviceActor.apply``)
    replacements: int = 0  # actors started in place of dead ones (each is named after its number)
    lanes: int = 0  # open lanes, from the device's lane events (for the progress view)
    capacity: int = 0  # bytes its lanes may reserve (the planner's DeviceView.capacity_bytes)
    curve_key: str = "cpu"  # device class whose co-location and scaling curves apply
    mirror: LaneMirror = field(default_factory=LaneMirror)
    changed_at: float = 0.0  # when its set of computing trials last changed (device clock)
    view: DeviceView | None = None  # the planner's last view of it (reused while nothing in it changed)
    lingering: dict[str, float] = field(default_factory=dict)  # data-parallel workers of ended attempts not yet
    # seen to end -> when their rank 0 ended (driver clock)
    start_ref: Any = None  # its actor's ``info()`` while the actor is still starting (the device is not alive yet)
    actor_name: str = ""  # the Ray name of its current actor
    launched: float = 0.0  # when its current actor was asked for (driver clock)
    hold_pauses: bool = False  # what its actor was last told to do with pauses (``DeviceHost.hold_pauses``)


def lineage_starts(store: ExperimentStore) -> dict[str, int]:
    """Each exploited trial's first attempt of its current configuration (its last PBT exploit's): the stored
    results of earlier attempts belong to another configuration, which its searcher has closed. A trial missing
    here has one lineage, from attempt 0."""
    lineage: dict[str, int] = {}
    for event in store.events(TRIAL_RESTART_EVENT):
        data = event.data or {}
        if event.trial_id is not None and data.get("reason") == RESTART_EXPLOIT \
                and isinstance(data.get("attempt"), int):
            lineage[event.trial_id] = data["attempt"]
    return lineage


class Executor:
    """Runs one experiment's trials on device actors and records everything in the store.

    Args:
        payload: The trainable and stop rule, pickled once (``gpu.actor.pack_trainable``).
        searcher: Proposes the TrialGroups and decides on results.
        store: The experiment's store (opened for writing; only this executor writes to it).
        devices: The devices to start one actor each on.
        settings: Run-level settings.
        trials: Trials already in the store (a resumed run); unfinished ones are queued again.
    """

    def __init__(
        self,
        payload: bytes,
        searcher: BaseSearcher,
        store: ExperimentStore,
        devices: list[DeviceSpec],
        settings: ExecutorSettings,
        trials: list[Trial] | None = None,
    ) -> None:
        self.payload = payload
        self.searcher = searcher
        self.store = store
        self._searcher_log = SearcherLog(searcher, store)  # the searcher's results and ends, and its saved state
        self.device_specs = devices
        self.settings = settings
        self.trials: dict[str, Trial] = {}
        self.planner = Planner(PlannerSettings(prior_share=settings.gpu_per_trial))
        # Trials waiting for the planner (by progress first when the searcher's trials take turns: PBT)
        self._turns = bool(getattr(searcher, "takes_turns", False))
        self._lenient_metric = os.environ.get(LENIENT_METRIC_ENV, "0").strip() == "1"
        self.pending = PendingQueue(self.planner.book, searcher.time_attr, searcher.turn_key if self._turns else None)
        self._devices: list[_Device] = []
        # Calls answered on call threads (settings.call_offload): the pool (made at the first), the answers the loop
        # has not sent yet (device, its actor then, call id, value, is_error), and how many calls are still out
        self._call_pool: ThreadPoolExecutor | None = None
        self._answers: queue.SimpleQueue[tuple[_Device, Any, Any, Any, bool]] = queue.SimpleQueue()
        self._calls_out = 0
        self._lost: dict[str, _Device] = {}  # devices whose actor is gone and could not be started again, by name
        self._parked: set[int] = set()  # ids of the devices parked warm at the run's end (_stop_devices)
        self._next_node_check = 0.0
        # How long a new device actor takes to come up here: the first of the run's own, or, when warm actors serve
        # the run, the longest such time of the runs that started them (a device that joined late waited for its
        # resources, which says nothing of a start's time).
        self._start_s = 0.0
        self._seq = 0
        self._run_tag = os.urandom(3).hex()[:5]
        # The prefix of the ids made here (<prefix>_<seq:05d>): the run's tag, or, in a resumed run, the prefix its
        # latest such trial has, so the experiment's trials keep one, as Ray's BasicVariantGenerator keeps its uuid
        # prefix in its saved state (a resume's new trials had this session's tag)
        self._id_prefix = self._run_tag
        self._stopping: set[str] = set()  # stop sent, end not yet seen
        # placed trials whose stop was decided (a searcher's or scheduler's), not the run's end's: they keep their end
        # hook even when the run's end began before their device's reply (Ray's stop_trial calls it at once)
        self._decided_stops: set[str] = set()
        self._restarts: dict[str, _Restart] = {}  # start again once the current attempt ends
        # trial -> the iteration its requeued attempt resumes from: its later checkpoints go when it starts
        self._abandoned: dict[str, int] = {}
        # Per trial, the (path, iteration) of checkpoints a restart abandoned or an exploit's copy replaced, whose
        # folders retention removes once the new attempt has gone past them (num_to_keep: _retain_checkpoints)
        self._unlisted: dict[str, list[tuple[str, int]]] = {}
        self._exploits: list[str] = []  # exploit restarts decided, stop not yet sent
        # (trial, status) of paused trials restarted (PENDING) and trials a restart left paused off any device (PAUSED),
        # for the callbacks once stored (Callback.on_trial_status)
        self._restatused: list[tuple[str, str]] = []
        self._ending: str | None = None  # why the experiment ends early (time budget, fail_fast, stop_all)
        # Why an earlier session's end ended the search (SEARCH_ENDED_KEY), when one did: the searcher proposes no
        # more trials for good, as Ray's restored search algorithm stays finished, and the run ends again at its
        # first check (_check_end), as Ray's restored controller finds its end condition again at its first step
        # (its TimeoutStopper's budget spent, fail_fast's error, the stopper's state)
        self._ended_before = search_ended_by(store) if trials else None
        self._search_ended = self._ended_before is not None
        if self._ended_before is not None and settings.verbose >= 1:  # (a new time_budget_s or num_samples, or
            # errored trials a restore runs again, run nothing then: say why, and what it ends: _check_end ends the
            # trials left to run, and a resume with none left simply has nothing to do)
            print(f"fluidsalus: {resumed_search_ended_text(self._ended_before, trials)}", flush=True)
        self._ending_at = 0.0  # when it began to end
        # Each trial's last finite value of the metric: the live view's best is the best of these, as the best
        # result is (a trial's last result, Ray's default scope), not the best value ever reported.
        self._last_values: dict[str, float | int] = {}
        self._iterations = 0
        # trials stopped early (the progress view's count): those of an earlier session of a resumed run too
        # (a set: a trial a callback's error then fails leaves it)
        self._stopped: set[str] = {row.trial_id for row in store.trials() if row.status == TERMINATED
                                   and row.stop_reason == OUT_STOPPED and row.started_at is not None} if trials \
            else set()  # (not those ended before they began)
        # trials that have started (the count leaves out a trial stopped before it began, also in this session:
        # a queued one its searcher stopped, as the recount above does)
        self._began: set[str] = {row.trial_id for row in store.trials() if row.started_at is not None} if trials \
            else set()
        self._progress = Progress(settings.verbose, settings.metric, settings.mode, None)
        self._started = time.time()
        # The time the experiment ran in its earlier sessions (a resumed run's: store.sessions()), which its time
        # budget spent: a restored run has what was left, as Ray's, whose budget is a TimeoutStopper in its saved
        # experiment state (it had the whole budget again: h255's F5)
        self._budget_spent = sum(end - start for start, end in store.sessions()[:-1]) if trials else 0.0
        self._first_error: str | None = None
        self._first_error_text: str | None = None  # that trial's own error, which names its type
        self._first_error_pickle: bytes | None = None  # and its exception, pickled (the raised error's cause)
        self._first_error_trial: str | None = None  # and the trial's id
        # fail_fast="raise": the trials not ended when the run began to end (_check_end), which Ray's saved state
        # holds unfinished (_leave_unfinished)
        self._caught: set[str] = set()
        # fail_fast="raise": the trials whose end the searcher was not told (:meth:`_withholds_end`), left unfinished
        self._withheld: set[str] = set()
        self._cluster: str | None = None  # the Ray cluster the devices started on (_cluster_token)
        self._traced_an_error = False  # the first trial that fails for good is printed with its traceback
        self._dirty = True  # something the plan depends on changed since the last plan
        self._plans = 0
        self._measured: set[str] = set()  # trials with at least one observed iteration
        self._planned_alone: dict[str, float] = {}  # trial -> its alone time when a re-plan last took it in
        self._allocation: dict[str, tuple[int, int]] = {}  # trial -> (devices, co-located) of its last measurement
        self._planned_gates: dict[str, tuple[bool, ...]] = {}  # curve key -> co-location gates at the last plan
        self._refused: set[tuple[str, int, str]] = set()  # (trial, attempt, action) refusals already recorded
        self._withdraw_sent: set[tuple[str, int]] = set()  # (trial, attempt) its device was asked to give back
        self._awaiting_checkpoint: set[str] = set()  # trials whose planned move waits for their first checkpoint
        # Trials computing beside others when their device died, until they get past the iteration they died at:
        # one of them may have ended the process itself, and only one of them computes at a time (_held_suspects).
        self._suspects: set[str] = set()
        self._admission_wait: set[str] = set()  # placed trials waiting for a lane's admission (lane_wait)
        # trial -> the iteration the callbacks last asked to checkpoint (answered to CHECKPOINT_VERDICT_CALL)
        self._checkpoint_wanted: dict[str, int] = {}
        self._asks_verdicts: set[str] = set()  # trials that ask for verdicts: request_checkpoint is not for them
        self._demands: dict[str, TrialDemand] = {}  # trial -> the demand the planner was last given
        self._move_costs = MoveCostMeter(self.planner.settings.move_cost_s)  # measured moves -> the planner's cost
        self._first_iter_s: dict[str, object] = {}  # trial -> time_this_iter_s of its attempt's first result
        # trial -> the highest training_iteration its searcher was given in this run: a restart from a checkpoint
        # runs the iterations after it again, and the searcher does not decide on them twice (_requeue resets it
        # for a new configuration, which starts a new lineage)
        self._searcher_seen: dict[str, int] = {}
        # trial -> the last iteration its callbacks were given before the engine restarted it on its own (a move, a
        # preemption, a time slice's turn), from a checkpoint older than that: the iterations it runs again are kept
        # from the callbacks, which Ray's (it never restarts a trial so) would see twice (a logger's progress.csv
        # had a row twice: a CI run), and so do those a device's death runs again that is not charged as a failure
        # (no on_trial_recover: nothing Ray would show). A retry or an exploit gives them again, as Ray's retry does;
        # a redone result that ends the trial is given (its last).
        self._redo_unseen: dict[str, int] = {}
        # trials whose searcher was told of their end at the result a stop rule (or a stop for good) ended them at,
        # as Ray's controller tells its scheduler and search algorithm there: their end tells it nothing more
        self._told_end: set[str] = set()
        # The warnings the trials sent for the script's author (LANE_WARNING) given in this run: each once
        self._trial_warnings: set[tuple[Any, str]] = set()
        self._warnings_registry: dict[Any, Any] = {}  # (warnings' "default" action: once per place, per run)
        #: The first trial warning that the driver's filters turned into an exception ("error"): raised by the
        #: caller once the run has ended and is stored (raised mid-run, it ended the run as an engine error)
        self.warning_error: Exception | None = None
        self._readmitted_from: dict[str, int] = {}  # trial -> the iteration its out-of-memory re-admission resumes at
        self._dirnames = {os.path.basename(t.trial_dir) for t in trials or []}  # folder names in use
        # The names trial_name gave the trials when they were created (a resumed run's from the store): a trial keeps
        # its name, as Ray's keeps custom_trial_name, and trial_name is asked once per trial, as Ray asks its creator
        self._names: dict[str, str] = store.trial_names() if trials else {}
        if trials:  # a resumed run goes on from the move cost it had measured, and from what its searcher saw
            self._restore_move_cost()
            self._restore_searcher_seen()
        self._workers = settings.workers if settings.workers is not None else declared_workers(payload)
        if self._workers is not None and self._workers[0] > len(devices):  # (it waited in the queue for ever)
            raise ConfigError(
                f"trainable: it is data-parallel on at least {self._workers[0]} devices (data_parallel(workers=...)), "
                f"but the run has {len(devices)}; lower its min_workers, or run on more devices"
            )
        #: Whether each result waits for the driver to judge the stopper's stop_all() on it (``decides_stop_all``):
        #: the run then ends at the result that ended it.
        self._stop_all_verdicts = decides_stop_all(settings.stopper)
        self._stop_state_failed = False  # the stopper could not be pickled for a restarted trial (_stop_state)
        # the driver's copy of the stopper, saved beside the store for a resume (fluidsalus.stopper_state)
        self._stopper_saves = StopperSaves(settings.experiment_dir, settings.stopper)
        prefixed = -1  # (the seq of the trial whose prefix _id_prefix is)
        for trial in trials or []:
            self.trials[trial.trial_id] = trial
            self._seq = max(self._seq, trial.seq + 1)
            made_here = _MADE_ID.fullmatch(trial.trial_id)
            if made_here is not None and trial.seq > prefixed:
                self._id_prefix, prefixed = made_here.group(1), trial.seq
            self._set_extras(trial)
            self._note_last_value(trial.trial_id, trial.last_result)
            if trial.status not in FINAL_STATUSES:
                left = remaining_budget(trial, self.searcher.time_attr)  # (from its checkpoint: _load_trials)
                trial.devices, trial.placed_on = (), ()
                if trial.status == PAUSED and left is not None and left <= 0:
                    continue  # its checkpoint is at its budget: it waits for its searcher, as _requeue keeps one
                trial.status = PENDING
                self.pending.add(trial)
                # it resumes from its newest checkpoint left on disk (_load_trials): the stored ones after it (whose
                # folders went) go when its attempt starts, as after a restart within a run; kept, the folder it
                # writes again was listed twice, once with the lost attempt's metrics (h171's F1)
                self._abandoned[trial.trial_id] = trial.last_iteration

    # ------------------------------------------------------------------ public

    def last_results(self) -> dict[str, Mapping[str, Any]]:
        """Each trial's last result as its device reported it (NumPy values kept; the store holds JSON), by id."""
        return {trial_id: trial.last_result for trial_id, trial in self.trials.items()
                if trial.last_result is not None}

    def configs(self) -> dict[str, Mapping[str, Any]]:
        """Each trial's configuration as the search gave it (a class, a function or a tuple kept; the store holds
        JSON, which makes them strings and lists), by id."""
        return {trial_id: trial.config for trial_id, trial in self.trials.items()}

    @property
    def results_acknowledged(self) -> int:
        """How many results the run has stored and acted on (a batch that failed its checks is not stored)."""
        return self._iterations

    def run(self) -> None:
        """Run until the searcher is finished and every trial has ended.

        Raises:
            ConfigError: A run-level input error found while running (metric not reported, stop key missing).
            KeyboardInterrupt: After stopping the trials and flushing the store.
        """
        ended = False
        outer: list[Sequence[DeviceSpec]] = getattr(_THREAD_RUNS, "devices", [])
        _THREAD_RUNS.devices = [*outer, self.device_specs]
        outer_runs: list[Executor] = getattr(_THREAD_RUNS, "executors", [])
        _THREAD_RUNS.executors = [*outer_runs, self]
        try:
            self._start_devices(outer=[spec for specs in outer for spec in specs])
            self._loop()
            self._tell_withheld()  # (a time budget's end came first: it ends the run, not the raise)
            self._searcher_log.save(force=True)
            ended = True
        except (KeyboardInterrupt, FluidsalusError) as e:
            # Ctrl-C (a notebook's cell stopped to be run again), fail_fast="raise", a run-level input error: the
            # devices are sound, and those whose trials all stop at the shutdown are kept warm as after a normal
            # end. (An error of fluidsalus's own or of Ray's ends them: their state is not known.)
            ended = True
            if isinstance(e, KeyboardInterrupt):
                try:
                    self._drain()  # (a second Ctrl-C cuts it short: raised from here, the devices are shut down)
                except Exception:  # noqa: BLE001 - the user's Ctrl-C is the exception to raise
                    logger.exception("could not take the devices' last results after the Ctrl-C")
            if self._raises():  # (its error, or a Ctrl-C or a run-level error within its end)
                self._leave_unfinished()  # (fail_fast="raise": Ray raised before its end began, nothing of it ended)
            elif isinstance(e, KeyboardInterrupt) and self._ending is not None:
                try:
                    self._end_the_ending()
                except Exception:  # noqa: BLE001 - the user's Ctrl-C is the exception to raise (its transaction
                    # rolled back: the trials stay as stored, for a resume to run again)
                    logger.exception("could not end the trials the run's end was waiting for after the Ctrl-C; "
                                     "they stay unfinished in the store, and a resume runs them again")
            if not self._raises():
                self._tell_withheld()  # (a failure kept from the searcher for a raise that never came)
            raise
        except BaseException:  # (an error of fluidsalus's own or Ray's, a callback hook's passed through, SystemExit)
            if self._raises():
                self._leave_unfinished()
            else:
                self._tell_withheld()
            raise
        finally:
            _THREAD_RUNS.devices = outer
            _THREAD_RUNS.executors = outer_runs
            try:
                self._stopper_saves.save()  # (what it saw to the end, whatever ended the run: a resume goes on)
            except Exception:  # noqa: BLE001 - the run's own outcome is what to raise or return
                logger.exception("could not save the stopper's state; a resumed run starts it afresh")
            try:
                try:
                    self._end_calls()
                finally:
                    self._progress.close()
            finally:
                self._stop_devices(keep_warm=ended)

    def _drain(self) -> None:
        """At a Ctrl-C, before the trials stop: the polls the live devices have out (woken: they return at once),
        then one more of each that waits for nothing, within :data:`INTERRUPT_DRAIN_S` in all, their results handled
        as usual (stored, told to the searcher and the callbacks). What a device still held was lost with its
        trials: an Optuna trial's reports reach the driver with its next call or within :data:`POLL_WAIT_S`
        (``session.report_deferred``), so a Ctrl-C lost their last half second (Optuna stores each at once), and a
        poll that came back as the Ctrl-C came was dropped (Ray's first Ctrl-C lets the trials' last results
        through). The poll out comes first (one sent beside it could take the outbox before it, and their events be
        handled out of order), the second takes what came after it; a device that does not answer in time keeps
        what it holds. The trials' calls to the driver in them are not answered (the shutdown answers them)."""
        if not ray.is_initialized() or self._ray_elsewhere():  # (a call would start a Ray: _shut_down_devices)
            return
        end = time.monotonic() + INTERRUPT_DRAIN_S
        out = [d for d in self._devices if d.alive and d.poll_ref is not None]
        for device in out:
            device.actor.wake_poll.remote()
        self._take_polls(out, end)
        last = [d for d in self._devices if d.alive and d.poll_ref is None]
        for device in last:  # (commands left for it are moot: the shutdown stops every trial)
            device.poll_ref = device.actor.poll.remote(0.0)
        self._take_polls(last, end)

    def _take_polls(self, devices: list[_Device], end: float) -> None:
        """Handle the batches of the polls ``devices`` have out that come back before ``end`` (``time.monotonic``)
        (:meth:`_drain`)."""
        by_ref = {d.poll_ref: d for d in devices}
        if not by_ref:
            return
        ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=max(0.0, end - time.monotonic()))
        for ref in ready:
            device = by_ref[ref]
            device.poll_ref = None
            try:
                batch = ray.get(ref)
            except ray.exceptions.RayError:  # (it died: its trials end with the run, as they would have)
                device.alive = False
                continue
            # (a trial's call is not answered: it stops with the others, as before; answered, an Optuna trial's
            # start began an Optuna trial that the interrupt then failed, one Optuna never starts after a Ctrl-C)
            batch = [event for event in batch if event[0] != EV_CALL]
            try:
                if batch:
                    self._handle(device, batch)
            except Exception:  # noqa: BLE001 - the Ctrl-C is what the caller must get (a callback's error, a result
                # that failed the run's checks: the trials end as they would have without it)
                logger.exception("could not take the last results of device %s after the Ctrl-C", device.spec.name)

    # ------------------------------------------------------------------ devices

    def _host_settings(self, spec: DeviceSpec) -> HostSettings:
        return HostSettings(
                experiment_name=self.settings.experiment_name,
                max_lanes=spec.slots,
                # 0: the actor sets it on its node (a GPU's free memory, or a virtual CPU device's share of
                # its node's memory) and reports it in its info.
                capacity_bytes=0,
                trial_estimate=DEFAULT_TRIAL_ESTIMATE,
                policy=self.settings.lane_policy,
                quantum_ms=self.settings.quantum_ms,
                # Its cores shared out among the trials it runs at once (one each by default).
                torch_threads=max(1, spec.cpus // spec.slots) if spec.kind == "cpu" else None,
                # what a trial's context reports: the run's request where it made one, as Ray reports it (it
                # said the device's cores, 1.0 for cpus_per_trial=0.25: a helper's lanes test), else the device's
                resources={"cpu": float(self.settings.cpus_per_trial or spec.cpus),
                           "gpu": float(self.settings.gpu_per_trial or 1.0) if spec.kind == "cuda" else 0.0},
                time_attr=self.searcher.time_attr,
                # every result waits for the driver when a stopper's stop_all() may end the run at it
                verdict_from=STOP_ALL_VERDICT_FROM if self._stop_all_verdicts else self.searcher.verdict_from,
                experiment_dir=self.settings.experiment_dir,  # every node must see it (a shared storage_path)
            )

    def _actor_name(self, spec: DeviceSpec) -> str:
        """Named so that operators (and tests) can find a device's actor: ``fluidsalus:<experiment>:<device>``."""
        return f"fluidsalus:{self.settings.experiment_name}:{spec.name}:{self._run_tag}"

    def _adopt(self, device: _Device, info: dict[str, Any]) -> None:
        """Take a (new) actor's info: the capacity and class the planner sees, and empty lanes."""
        device.info = info
        device.batches = 0  # a new actor numbers the calls that bring it commands from 0
        device.hold_pauses = False  # (a new actor's host does not hold them)
        # The actor reports its lane capacity: a GPU's free memory, or a CPU device's share of its node's memory.
        device.capacity = int(info.get("capacity_bytes") or 0)
        model = info.get("gpu_name")
        device.curve_key = f"{device.spec.kind}:{model}" if model else device.spec.kind
        device.mirror = LaneMirror()
        device.view = None
        device.lanes = 0
        device.lingering.clear()
        device.changed_at = time.time()

    def _check_nested_start(self, outer: Sequence[DeviceSpec]) -> None:
        """Refuse at once a run nested in others of this thread (see :data:`_THREAD_RUNS`) when none of its devices
        could ever start: the cluster less what the outer runs' devices hold (until the call that started this one
        returns) has no room for one. Waiting :data:`ACTOR_START_TIMEOUT_S` could only end in
        :func:`_not_started`'s misleading advice. (Ray's free resources are no test: the cores of parked actors
        just ended are freed a moment later, and other work may end.)

        Args:
            outer: The devices of the runs this one is nested in.

        Raises:
            FluidsalusError: No device of this run fits in what the outer runs leave of the cluster.
        """
        total = ray.cluster_resources()
        available = {
            "CPU": total.get("CPU", 0.0) - sum(spec.cpus for spec in outer),
            "GPU": total.get("GPU", 0.0) - sum(1 for spec in outer if spec.kind == "cuda"),
        }
        if any(_fits(spec, available) for spec in self.device_specs):
            return
        raise FluidsalusError(
            "this run was started inside another fluidsalus run of this thread (from its callback, searcher or "
            "stopper, or an Optuna callback of fluidsalus.optuna.optimize), whose devices hold the cluster's "
            f"resources until that call returns: none of its devices can start (asked for: "
            f"{_asked_for(self.device_specs)}; the cluster less the outer runs' devices leaves: {available}). Start "
            "it after the outer run returns, or give the outer run fewer devices (devices=...).")

    def _start_devices(self, outer: Sequence[DeviceSpec] = ()) -> None:
        """Give every device an actor: a warm one that a finished run of this process left, where one matches
        (:meth:`_reset_warm_devices`), and a new one for each of the others. The run begins once the first new
        actor is up, or at once when no new actor is needed.

        New actors started together do the same work, so the others get as long again as the first took to come
        up before the run goes on without them: on a cluster that other work shares (two runs started at once,
        each asking for every core), the resources of some may be taken, and waiting for all would block every run
        sharing the cluster until one gave up. Beside warm actors, the new ones get as long as the first new actor
        of the runs that started the warm ones took, and as long again. A device whose actor is not up yet joins
        when it is (:meth:`_join`); until then the planner leaves it out, as it does a lost device. A device whose
        actor fails to start (its constructor raised: the trainable could not be loaded there, say) is lost, and
        the run goes on with the others.

        Every actor is one of the run's devices from the moment it is asked for, so a run that fails while they
        start ends them all (:meth:`_stop_devices`).

        Args:
            outer: The devices of the runs of this thread that this one was started inside
                (:meth:`_check_nested_start`).

        Raises:
            FluidsalusError: No device is up: every new actor failed to start (the message has the first one's
                error), or none came up within :data:`ACTOR_START_TIMEOUT_S` (the message names the resources
                asked for and those Ray has free); or, nested, none can start on the resources Ray has free.
        """
        cluster = self._cluster = _cluster_token()
        parked = WARM_DEVICES.keys(cluster)
        keys = [_warm_key(cluster, spec) for spec in self.device_specs]
        taken = WARM_DEVICES.take(cluster, keys)
        if outer and not any(taken):  # (a warm actor taken is one the outer runs do not hold)
            self._check_nested_start(outer)
        # Whether Ray has room now for a new actor beside the warm ones (which hold theirs): without it, a warm
        # run does not wait for its new ones. (It waited as long again as the warm actors' first start, which a
        # busy cluster had made long, and passed that on: a helper's fits, with the script's own actor holding
        # one of two cores, took 13.9 s each where one without warm devices took 1.5 s.)
        room = False
        if any(taken):
            available = _free_after_take(parked, taken, keys)
            room = any(_fits(spec, available)
                       for spec, warm in zip(self.device_specs, taken, strict=True) if warm is None)
        launched = time.time()
        # New actors first, so that their processes start while the warm ones reset.
        for spec, warm in zip(self.device_specs, taken, strict=True):
            actor, name = (warm.actor, warm.name) if warm is not None else (
                start_device_actor(spec, self.payload, self._host_settings(spec), self._actor_name(spec)),
                self._actor_name(spec))
            device = _Device(spec, actor, {}, max_running=spec.slots, assigned=set(), actor_name=name,
                             launched=launched)
            device.alive = False  # until its actor is up
            self._devices.append(device)
        warm_infos = self._reset_warm_devices(taken)
        for i, device in enumerate(self._devices):
            if taken[i] is not None and i not in warm_infos:  # its reset was refused or failed: a new actor
                room = True  # (in the place of the one ended)
                device.actor_name = self._actor_name(device.spec)
                device.actor = start_device_actor(device.spec, self.payload, self._host_settings(device.spec),
                                                  device.actor_name)
        refs = {device.actor.info.remote(): i for i, device in enumerate(self._devices) if i not in warm_infos}
        infos: dict[int, dict[str, Any]] = {}
        failed: dict[int, Exception] = {}

        def take(done: list[Any]) -> None:
            for ref in done:
                try:
                    infos[refs[ref]] = ray.get(ref)
                except ray.exceptions.RayError as e:  # its constructor raised, or its process died
                    failed[refs[ref]] = e

        pending = list(refs)
        if warm_infos:
            self._start_s = max(w.start_s for w in taken if w is not None)
            if pending and room:
                done, pending = ray.wait(pending, num_returns=len(pending),
                                         timeout=max(0.0, launched + 2 * self._start_s - time.time()))
                take(done)
        else:
            deadline = launched + ACTOR_START_TIMEOUT_S
            while pending and not infos and time.time() < deadline:
                done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.time()))
                take(done)
            if not infos:
                if failed:
                    i, error = next(iter(failed.items()))
                    raise FluidsalusError(f"no device actor started: that of {self.device_specs[i].name} failed: "
                                          f"{_plain(error)}") from error
                raise _not_started(self.device_specs, "the device actors")
            self._start_s = time.time() - launched
            if pending:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=self._start_s)
                take(done)
        events = []
        now = time.time()
        still = {refs[ref]: ref for ref in pending}  # device index -> its actor's info() call, still out
        for i, device in enumerate(self._devices):
            name = device.spec.name
            if i in warm_infos:
                self._adopt(device, warm_infos[i])
                device.alive = True
                events.append((now, "device_start", None, name, {**warm_infos[i], "actor": device.actor_name,
                                                                 "warm": True}))
            elif i in infos:
                self._adopt(device, infos[i])
                device.alive = True
                events.append((now, "device_start", None, name, {**infos[i], "actor": device.actor_name}))
            elif i in failed:
                logger.warning("device %s is lost: its actor failed to start: %s", name, _plain(failed[i]))
                events.append((now, "device_lost", None, name, {"error": _plain(failed[i])}))
                self._lost[name] = device
            else:
                device.start_ref = still[i]
                events.append((now, "device_waiting", None, name, {"actor": device.actor_name}))
        self.store.add_events(events)
        waiting = [d.spec.name for d in self._devices if d.start_ref is not None]
        if waiting:  # (a warning from verbose=1 on: every run started beside another one meets it)
            logger.log(logging.WARNING if self.settings.verbose else logging.INFO,
                       "devices %s have not started yet (other work on the cluster may hold their resources; Ray has "
                       "available: %s); the run goes on without them, and each joins when it starts",
                       ", ".join(waiting), ray.available_resources())

    def _reset_warm_devices(self, taken: Sequence[WarmActor | None]) -> dict[int, dict[str, Any]]:
        """Reset the warm actors taken for this run's devices with its trainable and settings.

        An actor that refuses (a module it imported changed on disk, or a thread a trial started still runs) or
        fails is ended; its device gets a new actor (:meth:`_start_devices`).

        Args:
            taken: ``WarmDevices.take``'s answer, aligned with the run's devices.

        Returns:
            Device index -> the info its reset returned, for each device a warm actor now serves.
        """
        resets = {i: (warm, warm.actor.reset.remote(self.device_specs[i], self.payload,
                                                    self._host_settings(self.device_specs[i]), list(sys.path)))
                  for i, warm in enumerate(taken) if warm is not None}
        if not resets:
            return {}
        # A reset does what a new actor's start does after its process is up (unpickling the trainable): no longer.
        ray.wait([ref for _, ref in resets.values()], num_returns=len(resets), timeout=ACTOR_START_TIMEOUT_S)
        served: dict[int, dict[str, Any]] = {}
        for i, (warm, ref) in resets.items():
            info: dict[str, Any] | None = None
            with contextlib.suppress(ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                info = ray.get(ref, timeout=0)
            if info is None or "refused" in info:
                why = info["refused"] if info else "its reset failed"
                logger.debug("warm device actor %s not reused: %s", warm.name, why)
                _kill_quietly(warm.actor)
                continue
            served[i] = info
        return served

    def _join(self, device: _Device) -> None:
        """A device's actor that was still starting is up: one the run began without, or the replacement of a
        dead one. If it failed to start instead, the device is lost (the run goes on with the others)."""
        ref, device.start_ref = device.start_ref, None
        try:
            info = ray.get(ref)
        except ray.exceptions.RayError as e:
            self.store.add_events([(time.time(), "device_lost", None, device.spec.name, {"error": _plain(e)})])
            what = "the replacement of its dead actor" if device.replacements else "its actor"
            if self._node_gone(device):  # (Ray's words, "the actor died unexpectedly", sounded like a bad trainable)
                logger.warning("device %s is lost with its node, which left the cluster while %s started; the run "
                               "goes on with the other devices, and the device starts again on a node that joins",
                               device.spec.name, what)
            else:
                logger.warning("device %s is lost: %s could not start: %s; the run goes on with the other devices",
                               device.spec.name, what, _plain(e).splitlines()[0])
            self._lost[device.spec.name] = device
            return
        self._lost.pop(device.spec.name, None)
        self._adopt(device, info)
        device.alive, self._dirty = True, True
        how = {"replacement": True} if device.replacements else {"joined": True}
        self.store.add_events([(time.time(), "device_start", None, device.spec.name,
                                {**info, "actor": device.actor_name, **how})])

    @staticmethod
    def _node_gone(device: _Device) -> bool:
        """Whether the node a device is pinned to has left the cluster (False when unpinned, or when Ray cannot
        say)."""
        if device.spec.node_id is None:
            return False
        try:
            return device.spec.node_id not in cluster_nodes()
        except Exception:  # noqa: BLE001 - Ray's GCS did not answer
            return False

    def _send(self, device: _Device, method: str, *args: Any) -> None:
        """Send a command (``submit``, ``stop``, ``withdraw``, ``resume``, ``request_checkpoint``, ``answer``) to a
        device.

        A device whose last poll came back gets the command with its next poll, which the loop sends before it
        waits again, so a busy device gets one message per round trip instead of one per command; the device
        carries out a poll's commands in the order they were sent, before it polls. A device with a poll still
        out gets the command at once, as its own actor call. Each call that brings commands is numbered
        (:meth:`_batch`), and the device carries them out in that order. A dead device's commands are dropped
        (its trials are requeued by :meth:`_device_died`).
        """
        if not device.alive:
            return
        if device.poll_ref is None:
            device.outbox.append((method, args))
        else:
            getattr(device.actor, method).remote(*args, batch=self._batch(device))

    @staticmethod
    def _batch(device: _Device) -> int:
        """The number of the next call that brings ``device``'s actor commands: it carries them out in this
        order, whichever of its threads gets which call first (``_DeviceActor.apply``)."""
        device.batches += 1
        return device.batches - 1

    def _stop_devices(self, keep_warm: bool = False) -> None:
        """Shut every device's trials down and end its actor, or park it for the next run of this process.

        Args:
            keep_warm: The run ended normally, by Ctrl-C or by a :class:`FluidsalusError`: the actors of virtual
                CPU devices whose trials all stopped are parked for ``settings.keep_warm_s``
                (``fluidsalus.trialgroup.warm``) instead of ended.
        """
        try:
            self._shut_down_devices(keep_warm)
        except KeyboardInterrupt:
            # A (second) Ctrl-C while the trials stop: every actor not yet parked is ended at once. (It left them
            # neither parked nor ended, holding their cores while anything, a notebook's last error, held the run.)
            # (not only the live ones: a device's actor still starting, a replacement or one the run began
            # without, is not alive yet and holds its cores as well; the parked ones serve the next run)
            for device in self._devices:
                if id(device) not in self._parked:
                    with contextlib.suppress(Exception):
                        ray.kill(device.actor, no_restart=True)
                    device.alive = False
            raise

    def _ray_elsewhere(self) -> bool:
        """Whether this process's Ray is another cluster than the run's (``ray.shutdown()`` from another thread, then
        a call that started a new local one): the run's actors ended with the old one."""
        return self._cluster is not None and _cluster_token() not in (None, self._cluster)

    def _shut_down_devices(self, keep_warm: bool) -> None:
        """:meth:`_stop_devices` but for a Ctrl-C on the way."""
        initialized = ray.is_initialized()
        elsewhere = initialized and self._ray_elsewhere()
        if not initialized or elsewhere:
            # Ray was shut down under the run (``ray.shutdown()`` from another thread): its actors ended with it,
            # and a call to one would start a new local Ray from this thread (Ray's auto-init), which the script's
            # next ``ray.init(...)`` then met ("called ray.init twice"). One of the loop's own calls may have
            # started it already (another cluster now): that one is the run's doing, and goes.
            if elsewhere:
                logger.warning("Ray was shut down during the run, and a call of the run started a new local Ray; "
                               "it is shut down again")
                ray.shutdown()
            for device in self._devices:
                device.alive = False
            return
        live = [d for d in self._devices if d.alive]
        for device in self._devices:  # commands left for a next poll are moot: shutdown stops every trial and
            device.outbox.clear()     # answers every call a trial waits in
        idle: set[int] = set()  # the ids of devices whose every trial stopped
        if live:
            refs = [d.actor.shutdown.remote(SHUTDOWN_GRACE_S) for d in live]
            try:
                still_running = ray.get(refs, timeout=SHUTDOWN_GRACE_S + POLL_WAIT_S + 5)
                idle = {id(d) for d, left in zip(live, still_running, strict=True) if not left}
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                pass
        now = time.time()
        with contextlib.suppress(Exception):  # the store may already be closed by a failing run
            self.store.add_events([(now, "device_stop", None, d.spec.name, None) for d in self._devices if d.alive])
        cluster = _cluster_token() if keep_warm else None
        for device in self._devices:
            key = _warm_key(cluster, device.spec) if id(device) in idle else None
            if key is not None:
                WARM_DEVICES.park(key, WarmActor(device.actor, device.actor_name, self._start_s),
                                  self.settings.keep_warm_s)
                self._parked.add(id(device))
            else:
                ray.kill(device.actor, no_restart=True)
            device.alive = False

    # ------------------------------------------------------------------ main loop

    def resource_usage(self) -> ResourceUsage:
        """The cores and GPUs of the live devices, and the share of them the running trials use now."""
        used_cpus = total_cpus = used_gpus = total_gpus = 0.0
        for d in self._devices:
            if not d.alive:
                continue
            slots = max(d.spec.slots, 1)
            busy = min(sum(1 for t in d.assigned if self.trials[t].status == RUNNING), slots)
            total_cpus += d.spec.cpus
            used_cpus += busy * d.spec.cpus / slots
            if d.spec.kind == "cuda":
                total_gpus += 1
                used_gpus += busy / slots
        return ResourceUsage(used_cpus, total_cpus, used_gpus, total_gpus)

    def _snapshot(self) -> dict[str, Any]:
        """What the live progress view shows (see ``fluidsalus.progress.Progress.update``)."""
        counts = {status: 0 for status in (PENDING, RUNNING, PAUSED, TERMINATED, ERROR)}
        never = 0  # (done trials the run's end, or a stop, ended before they began: a time budget's counted done)
        for trial_id, trial in self.trials.items():
            counts[trial.status] = counts.get(trial.status, 0) + 1
            never += trial.status == TERMINATED and trial_id not in self._began
        devices = [{"device": d.spec.name, "lanes": d.lanes,
                    "computing": sum(1 for t in d.assigned if self.trials[t].status == RUNNING)}
                   for d in self._devices]
        mode = self.settings.mode
        best = (max if mode == "max" else min)(self._last_values.values(), default=None) if mode else None
        stopped = sum(1 for trial_id in self._stopped if trial_id in self._began)
        return {"elapsed_s": time.time() - self._started, "trials": counts, "stopped": stopped,
                "never_started": never, "best": best, "devices": devices,
                # Known once the searcher will propose no more trials: then the view shows an ETA.
                "total_trials": len(self.trials) if self._search_over() else None,
                "iterations_done": self._iterations, "iterations_budget": None}

    def _loop(self) -> None:
        first = not self.trials  # a new run's first pass (a resumed run has its trials)
        while True:
            for callback in self.settings.callbacks:
                callback.on_step_begin()
            if self.settings.verbose > 0:
                self._progress.update(self._snapshot())
            if first:
                # The search's first trials are made before the first check of the run's end, so that a run that
                # ends there (a stop_all() True from the start, TimeoutStopper(0), a time budget the devices' start
                # spent) ends them unstarted and its grid holds them, as Ray's does (it was empty)
                self._take_groups()
            self._check_end()
            if self._ending is None:
                self._watch_nodes()
                if not first:
                    self._take_groups()
                self._dispatch()
            self._stopper_saves.maybe_save()
            first = False
            if self._finished():
                self._tell_restatused()
                for callback in self.settings.callbacks:  # every pass that began ends, the last one too
                    callback.on_step_end()
                if self._raises():  # (run() leaves its trials unfinished)
                    raise trial_error(self._first_error or "a trial failed (fail_fast='raise')", self._first_error_text,
                                      self._first_error_pickle)
                return
            self._send_answers()  # (made on call threads since the last pass: they go with the polls)
            self._tell_hold_pauses()
            refs = []
            for device in self._devices:
                if device.alive and device.poll_ref is None:
                    commands, device.outbox = device.outbox, []
                    device.poll_ref = device.actor.poll.remote(POLL_WAIT_S, commands,
                                                               batch=self._batch(device) if commands else None)
                if device.alive:
                    refs.append(device.poll_ref)
            starting = {d.start_ref: d for d in self._devices if d.start_ref is not None}
            if not refs and not starting:
                raise FluidsalusError("every device actor has died; the run cannot go on")
            timeout = None
            if not refs:  # no device is up: the run waits for one of those starting, as long as a run's start does
                timeout = max(0.0, max(d.launched for d in starting.values()) + ACTOR_START_TIMEOUT_S - time.time())
            refs.extend(starting)
            ready = self._wait_for_devices(refs, timeout)
            if not ready:
                raise _not_started([d.spec for d in starting.values()],
                                   "no device is up, and the device actors still starting")
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if len(refs) > 1 else (ready, None)
            by_ref = {d.poll_ref: d for d in self._devices if d.poll_ref is not None}
            for ref in ready:
                if ref in starting:
                    self._join(starting[ref])
                    continue
                device = by_ref[ref]
                try:
                    batch = ray.get(ref)  # (its poll stays out until got: a Ctrl-C here leaves it to _drain)
                except ray.exceptions.RayActorError as e:
                    self._device_died(device, e)
                    continue
                device.poll_ref = None
                if batch:
                    with sigint_held():  # (handled whole: a Ctrl-C lost the rest of it, then the drain ran)
                        self._handle(device, batch)
            self._tell_restatused()
            for callback in self.settings.callbacks:
                callback.on_step_end()

    def _tell_hold_pauses(self) -> None:
        """Tell each device, when it changes, whether a prefetched trial there waits through its neighbour's pause
        at the budget until this driver answered it (``DeviceHost.hold_pauses``): while another device is up and no
        trial waits in the queue nor can come (``BaseSearcher.proposes_new``). A device that frees a slot then has
        nothing to start, and a prefetched trial that has not begun is the only one that can still go there (the planner
        withdraws it); one begun at a pause that the searcher answers with a promotion (ASHA's, at once) would
        time-slice one slot with the promoted trial to their ends, neither movable without a checkpoint, while that
        device idled. Otherwise a freed slot gets a queued trial, and the prefetched trial begins at the pause (no round
        trip lost)."""
        alive = [d for d in self._devices if d.alive]
        # (an empty queue alone is not the run's tail: a search that proposes as slots free, under
        # max_concurrent, empties it after each start; holding then cost 8-15% of device time, h173)
        hold = len(alive) > 1 and not self.pending and (self._search_ended or not self.searcher.proposes_new())
        for device in alive:
            if device.hold_pauses != hold:
                device.hold_pauses = hold
                self._send(device, "hold_pauses", hold)

    def _check_end(self) -> None:
        """End the experiment early when its time budget is spent, a trial failed under fail_fast, or the
        stopper's ``stop_all()`` says so: every trial stops at its next boundary, unstarted ones never start.

        While the run ends, trials that come back to the queue (a retry, a move) end there too, and those that
        reach no report within :data:`RUN_END_GRACE_S` end without one (:meth:`_end_stragglers`)."""
        if self._ending is not None:
            if self.pending:
                with self.store.transaction():
                    self._end_queued()
                    self._searcher_log.save()  # the searcher's record of the ends commits with the trials'
            if time.time() - self._ending_at >= RUN_END_GRACE_S:
                self._end_stragglers()
            return
        budget = self.settings.time_budget_s
        ended_before, self._ended_before = self._ended_before, None  # (judged at the first check only)
        if ended_before is not None and any(t.status not in FINAL_STATUSES for t in self.trials.values()):
            self._ending = ended_before  # (those a restore runs again, errored ones included, end unstarted)
        elif budget is not None and time.time() - self._started + self._budget_spent >= budget:
            self._ending = "time_budget"
            if not any(t.last_result is not None or t.status in (RUNNING, PAUSED) for t in self.trials.values()):
                logger.warning("time_budget_s=%g ended the run before any trial started or reported: the budget counts "
                               "from the run's start, the devices' start included (as Ray Tune's counts from the "
                               "experiment's); give it more time", budget)
        elif self._first_error is not None and self.settings.fail_fast:
            self._ending = "fail_fast"
        elif self.settings.stopper is not None and hasattr(self.settings.stopper, "stop_all") \
                and self.settings.stopper.stop_all():
            self._ending = "stop_all"
        if self._ending is None:
            return
        self._ending_at = time.time()
        self._search_ended = ended_before is not None or self._ending != "fail_fast" \
            or self.settings.fail_fast != "raise"
        data: dict[str, Any] = {"reason": self._ending, SEARCH_ENDED_KEY: self._search_ended}
        if self._raises():
            data[RAISED_TRIAL_KEY] = self._first_error_trial
            # (|=: those whose failure came after the raised one, before this check, are in it: _fails_unseen)
            self._caught |= {tid for tid, trial in self.trials.items() if trial.status not in FINAL_STATUSES}
        self.store.add_events([(self._ending_at, EXPERIMENT_ENDING_EVENT, None, None, data)])
        for callback in self.settings.callbacks:  # (before the ends it brings: Callback.on_run_ending)
            ending = getattr(callback, "on_run_ending", None)
            if callable(ending):
                ending(self._ending)
        self.searcher.run_ending()  # (likewise: BaseSearcher.run_ending)
        with self.store.transaction():
            self._end_queued()
            for trial in self.trials.values():  # paused off any device: nothing to stop, they end here
                if trial.status == PAUSED and not trial.placed_on:
                    self._end_unstarted(trial)
            self._searcher_log.save()
        # (the run's end: trials it ends unstarted are not told to the callbacks, as Ray's end leaves its queued and
        # paused trials as they are, nor are those prefetched on a device that end there before they began
        # (_handle's ``unstarted``); those that run on a device end there, and are told)
        self._stop_trials([tid for d in self._devices for tid in d.assigned], no_verdict=True)

    def _end_stragglers(self) -> None:
        """End the trials still on a device :data:`RUN_END_GRACE_S` after the run began to end: they reached no
        report since (a trainable that hangs, or one iteration longer than the grace), so the stop never reached
        them and the run waited for ever. They end stopped, with the results they reported, as if their device
        had sent the end; the device is not kept warm, its actor is ended with the run (``_stop_devices``: a
        trial of it still runs), as Ray's controller kills the actors of trials that have not stopped after its
        grace. A trial sent ahead that had not begun its attempt (``PENDING`` until its start) ends as well, as
        the run's end ends the queued ones: no warning and no ``trial_abandoned`` event name it, since nothing of it
        ran to be abandoned."""
        now = time.time()
        stragglers = {tid: self.trials[tid] for d in self._devices for tid in d.assigned}
        for trial_id, trial in stragglers.items():
            if trial.status in FINAL_STATUSES or not trial.placed_on:
                continue
            if trial.status != PENDING:  # (its attempt began: it is what the run's end waited for)
                logger.warning("trial %s reached no report in the %.0f s after the run began to end (%s): it ends "
                               "here, and its device with the run", trial_id, RUN_END_GRACE_S, self._ending)
                self.store.add_events([(now, "trial_abandoned", trial_id, None, {"attempt": trial.attempt,
                                                                                   "reason": self._ending})])
            self._handle(self._device(trial.placed_on[0]), [(EV_END, trial_id, trial.attempt, now, OUT_STOPPED,
                                                            None, None)])

    def _new_trial_id(self, made: set[str]) -> str:
        """The id of the trial made next: ``<prefix>_<seq:05d>`` (the run's tag, or its stored trials' prefix), or
        ``settings.trial_id``'s, drawn again while the experiment has it (a trial of this session's or an earlier
        one's, or one of ``made``, those made with it), or, where it names the trial's folder, a folder or file of the
        experiment has that name (``experiment.db``).

        Raises:
            ConfigError: ``settings.trial_id`` gave no new id in :data:`TRIAL_ID_DRAWS` draws, or not a str; or,
                where the id names the trial's folder (no ``settings.trial_dirname``), no folder name
                (:func:`check_folder_name`) or one longer than a file system's.
        """
        make = self.settings.trial_id
        if make is None:
            return f"{self._id_prefix}_{self._seq:05d}"
        names_folder = self.settings.trial_dirname is None  # (then the trial's folder is named by its id)
        for _ in range(TRIAL_ID_DRAWS):
            trial_id = make()
            if not isinstance(trial_id, str) or not trial_id:
                raise ConfigError(f"trial_id must return a non-empty str (a new trial's id); got {trial_id!r}")
            if names_folder:  # (it named a folder outside the experiment, "../x", or one it could not make)
                check_folder_name(trial_id, f"trial_id returned {trial_id!r}, which names the trial's folder")
                size = len(trial_id.encode("utf-8", "surrogateescape"))
                if size > NAME_MAX_BYTES:
                    raise ConfigError(f"trial_id returned an id of {size} bytes, which names the trial's folder: it "
                                      f"must be at most {NAME_MAX_BYTES} "
                                      "(a file system's longest folder name)")
            if trial_id in self.trials or trial_id in made or names_folder and (
                    trial_id in self._dirnames
                    or os.path.lexists(os.path.join(self.settings.experiment_dir, trial_id))):
                continue  # (taken: by a trial, or as a folder or file of the experiment, experiment.db)
            return trial_id
        raise ConfigError(f"trial_id gave no new trial id in {TRIAL_ID_DRAWS} draws (the last: {trial_id!r}); the "
                          f"experiment has {len(self.trials)} trials")

    def _raises(self) -> bool:
        """Whether the run ends by ``fail_fast="raise"`` (it raises the first trial error at its end)."""
        return self._ending == "fail_fast" and self.settings.fail_fast == "raise" and self._first_error is not None

    def _leave_unfinished(self) -> None:
        """Before ``fail_fast="raise"`` raises: give the store back, unfinished (``PENDING``), the trials whose end
        the searcher was not told (:meth:`_withholds_end`) but the raised one: those the run's end stopped
        (queued, prefetched or running) and those that failed after the raised one (within the end's wait, or in
        its batch), so that a resume runs them on from their last checkpoint, as after a Ctrl-C. Ray raises the
        trial's error at once, before its end stops any trial and before it sees a later failure, so its saved
        state holds them unfinished and ``Tuner.restore`` runs them on; here they stayed stopped or ``ERROR``, and a
        restore ran none of them (h174's B2, h178). Those that ended otherwise meanwhile (completed, stopped by their
        searcher or their stop rule) stay as they ended. A store that cannot be written leaves them as they ended,
        logged: the trial's error is what the run raises."""
        try:
            with self.store.transaction():
                for row in self.store.trials():
                    if row.trial_id in self._withheld and row.trial_id != self._first_error_trial \
                            and row.status in FINAL_STATUSES:
                        self.store.update_trial(row.trial_id, status=PENDING, stop_reason=None, finished_at=None,
                                                error=None, traceback=None)
        except Exception:  # noqa: BLE001 - the trial's error is the exception to raise
            logger.exception("could not leave the trials that fail_fast='raise' stopped unfinished in the store; "
                             "they stay stopped, and a resume runs none of them")

    def _tell_withheld(self) -> None:
        """A ``fail_fast="raise"`` run that ends otherwise than by its raise (a Ctrl-C or a run-level error before its
        end began, a time budget's end that came first): tell the searcher the ends it was not told
        (:meth:`_withholds_end`), which stay as they ended, so that no resume waits for them. A store that cannot be
        written is logged: the exception on its way, if any, is the one to raise."""
        if not self._withheld:
            return
        try:
            with self.store.transaction():
                for trial_id in sorted(self._withheld):
                    trial = self.trials[trial_id]
                    self._searcher_log.on_trial_complete(trial_id, trial.last_result, error=trial.status == ERROR,
                                                         error_text=trial.error if trial.status == ERROR else None)
                self._searcher_log.save()
            self._withheld.clear()
        except Exception:  # noqa: BLE001 - the exception on its way is the one to raise
            logger.exception("could not tell the searcher the trial ends fail_fast='raise' kept from it")

    def _end_the_ending(self) -> None:
        """A Ctrl-C while the run ends (its time budget, ``fail_fast``, ``stop_all()``) cuts short its wait for the
        trials still on a device, those sent ahead that had not begun included: they end here, ``TERMINATED``
        (stopped, with the results they reported), as the run's end ended those it found queued. Ray's end of an
        experiment sets every unfinished trial ``TERMINATED`` at once, so a Ctrl-C after it leaves none for
        ``Tuner.restore`` to run; here those the device had not answered for yet stayed ``PENDING`` or ``RUNNING``,
        and a restore ran them again, while the queued ones stayed ended. No hook is called (the run is
        interrupted, as Ray's end calls none)."""
        left = [trial for trial in self.trials.values() if trial.status not in FINAL_STATUSES]
        if not left:
            return
        with self.store.transaction():
            for trial in left:
                self._end_unstarted(trial)
            self._searcher_log.save()
        if self.settings.verbose > 0:  # (the progress view's last line, drawn as it closes, shows them ended)
            self._progress.update(self._snapshot())

    def _end_queued(self) -> None:
        for trial_id in list(self.pending):
            self.pending.discard(trial_id)
            self._end_unstarted(self.trials[trial_id])

    def _finished(self) -> bool:
        horizon = time.time() - WORKER_END_GRACE_S
        if any(since > horizon for d in self._devices if d.alive for since in d.lingering.values()):
            return False  # a data-parallel worker's end is still on its way: its events belong in the store
        if self._ending is not None:
            return not self.pending and all(not d.assigned for d in self._devices)
        if self.pending or not self._search_over():
            return False
        live = [t.trial_id for t in self.trials.values() if t.status in (RUNNING, PAUSED) or t.placed_on]
        paused = [tid for tid in live if self.trials[tid].status == PAUSED]
        if paused and len(paused) == len(live):
            # The searcher is done and will promote no one: paused trials have reached their last budget.
            self._tell_stopped(self._stop_trials(paused))
            live = [t.trial_id for t in self.trials.values() if t.status in (RUNNING, PAUSED) or t.placed_on]
        return not live and not self.pending

    def _search_over(self) -> bool:
        """Whether the searcher will propose no more trials: it says so, or the run's end ended the search."""
        return self._search_ended or self.searcher.is_finished()

    def _take_groups(self) -> None:
        """Register the searcher's new groups (new trials, promotions) and carry out its stops. Once the run's end
        ended the search (:data:`SEARCH_ENDED_KEY`), it is not asked for groups."""
        groups: list[TrialGroup] = []
        if not self._search_ended:
            asked = time.time()
            groups = self._searcher_log.next_groups()
            took = time.time() - asked
            if took >= DRIVER_BUSY_MIN_S:  # a device without a trial waited for it (goodput's IDLE_DRIVER)
                self._note_busy(asked, took, "searcher", sum(len(g.configs) for g in groups))
        stops = self._searcher_log.collect_stops()
        placed = [tid for tid in stops if tid in self.trials and self.trials[tid].placed_on
                  and self.trials[tid].status not in FINAL_STATUSES]
        if placed:
            # Their ends come with a later batch, and the searcher's state that holds these stops no more may commit
            # before (with another trial's batch): the stops are stored first, so that a resume after a crash ends
            # those trials (fluidsalus.api.end_decided_trials; its searcher, if it still holds a stop, is told the
            # end, which drops it). (Not saved here: the groups just taken are not registered yet.)
            self.store.add_events([(time.time(), SEARCHER_STOP_EVENT, tid, None,
                                    {"attempt": self.trials[tid].attempt}) for tid in placed])
        if stops:
            self._tell_stopped(self._stop_trials(stops))
        if not groups:
            with self.store.transaction():
                self._take_exploits()
            self._stop_exploited()
            return
        self._dirty = True
        new: list[Trial] = []
        made: set[str] = set()  # the ids of ``new`` (a set built again for each trial made a batch of 5,000 quadratic)
        named: dict[str, str] = {}  # trial -> its folder name, when a trial_dirname function names it
        names: dict[str, str] = {}  # trial -> its name, when a trial_name function names it (kept for a resume)
        for group in groups:
            for config in group.configs:
                trial_id = self._new_trial_id(made)
                made.add(trial_id)
                extras = self._extras_of(self._seq, config)  # asked before trial_dirname (a front end reads it)
                dirname = trial_id
                if self.settings.trial_dirname is not None:
                    dirname = check_dirname(self.settings.trial_dirname(trial_id, config), trial_id,
                                            self.settings.experiment_dir, self._dirnames,
                                            str(getattr(self.settings.trial_dirname, "error_field", "trial_dirname")))
                    named[trial_id] = dirname
                if self.settings.trial_name is not None:
                    shown = self.settings.trial_name(trial_id)
                    if isinstance(shown, str):
                        if shown:  # ("" names no trial: its id, as None; Ray's str(trial) falls back so too)
                            names[trial_id] = self._names[trial_id] = shown
                    elif shown is not None:
                        raise ConfigError(f"trial_name must return a str (the trial's name) or None (its id); got "
                                          f"{shown!r} for trial {trial_id}")
                self._dirnames.add(dirname)
                new.append(Trial(
                    trial_id=trial_id,
                    seq=self._seq,
                    config=config,
                    trial_dir=os.path.join(self.settings.experiment_dir, dirname),
                    group_id=group.group_id,
                    budget=group.budget,
                ))
                new[-1].extras = extras
                self._seq += 1
        resumes: dict[int, dict[str, float | None]] = {}
        requeued: list[Trial] = []
        turns: list[str] = []  # promoted residents that give their place to a trial behind them
        went_on: list[tuple[str, str]] = []  # paused trials promoted: (trial, RUNNING in place or PENDING again)
        now = time.time()
        with self.store.transaction():
            for group in groups:
                members = [t for t in new if t.group_id == group.group_id]
                self.store.add_trials([(t.trial_id, t.seq, t.config) for t in members],
                                      group_id=group.group_id, budget=group.budget)
                self.store.add_events([(now, TRIAL_DIRNAME_EVENT, t.trial_id, None, {
                    **({"dirname": named[t.trial_id]} if t.trial_id in named else {}),
                    **({"name": names[t.trial_id]} if t.trial_id in names else {}),
                }) for t in members if t.trial_id in named or t.trial_id in names])
                for trial_id in group.trial_ids:
                    trial = self.trials[trial_id]
                    if trial.finished_by_rule:  # it met the run's stop rule: nothing may run it further
                        self.store.add_events([(now, "promotion_ignored", trial_id, None,
                                                {"group": group.group_id, "reason": "stop rule met"})])
                        continue
                    trial.budget, trial.group_id = group.budget, group.group_id
                    self.pending.refresh(trial)  # a queued trial (restarting) has a new remaining budget
                    if trial.status == PAUSED and trial.device is not None and self._gives_way(trial, new):
                        # Its searcher's trials take turns and one behind it waits: its attempt ends, and it
                        # restarts from its checkpoint (at its last result) at its turn, to the new budget.
                        self._restarts[trial_id] = _Restart(reason=RESTART_TURN)
                        turns.append(trial_id)
                    elif trial.status == PAUSED and trial.device is not None:  # resident: resumes in place
                        trial.status = RUNNING
                        went_on.append((trial_id, RUNNING))
                        resumes.setdefault(trial.device, {})[trial_id] = group.budget
                        self._device(trial.device).changed_at = now
                    elif trial.device is not None and (trial.status == PENDING or (trial.status == RUNNING and (
                            trial.attempt > 0 or trial_id not in self._restarts))):
                        # Submitted, or restarted (a move, a retry) from a checkpoint before the budget the searcher
                        # saw it reach, so redoing iterations: its device gives the attempt the new budget, so that
                        # it runs on instead of pausing at the old one. (Or its pause at the budget failed, a save
                        # there raised: its end is on its way, and the new budget is moot.)
                        resumes.setdefault(trial.device, {})[trial_id] = group.budget
                    elif trial.status == RUNNING and trial_id in self._restarts:
                        # Its attempt is ending for a restart (a move, a preemption): the stop reached it at the
                        # report where it met its budget, so it ended there instead of pausing. The restart's
                        # attempt, queued when the end arrives, runs to the new budget (``_requeue``).
                        pass
                    elif trial.status in FINAL_STATUSES or trial.status in (PENDING, PAUSED):
                        # An ended trial, or one paused off any device (preempted), restarts from its checkpoint.
                        if trial.status != PENDING:
                            if trial.status == PAUSED:
                                went_on.append((trial_id, PENDING))
                            trial.status, trial.attempt = PENDING, trial.attempt + 1
                            trial.devices = ()
                            requeued.append(trial)
                            self.store.add_events([(now, TRIAL_RESTART_EVENT, trial_id, None, {
                                "attempt": trial.attempt, "reason": "promoted",
                                "from_iteration": checkpoint_iteration(trial.checkpoint_path)
                                if trial.checkpoint_path else 0})])
                    else:
                        raise FluidsalusError(
                            f"searcher promoted trial {trial_id} while it is {trial.status}; only paused or "
                            "ended trials can be promoted"
                        )
                    self.store.update_trial(trial_id, status=trial.status, group_id=group.group_id,
                                            budget=group.budget, attempt=trial.attempt)
            for trial in new:
                self.trials[trial.trial_id] = trial
                self.pending.add(trial)
                self._searcher_log.on_trial_add(trial.trial_id, trial.group_id or "", trial.config)
            self._take_exploits()
            # Saved after on_trial_add, so a resumed searcher knows every trial id it has been given.
            self._searcher_log.save()
        self._tell_added(new)
        self._tell_statuses(went_on)
        for trial in requeued:
            self._rewind(trial)
            self.pending.add(trial)
        for index, budgets in resumes.items():  # rank 0 decides for a data-parallel trial's workers
            self._send(self._device(index), "resume", budgets)
        self._send_stop(turns, no_verdict=True)
        self._stop_exploited()

    def _tell_added(self, new: Sequence[Trial]) -> None:
        """Tell the callbacks of the trials just made, once stored (``Callback.on_trial_add``), in the order made."""
        for callback in self.settings.callbacks:
            added = getattr(callback, "on_trial_add", None)
            if callable(added):
                for trial in new:
                    added(trial.trial_id, trial.config)

    def _tell_statuses(self, changes: Sequence[tuple[str, str]]) -> None:
        """Tell the callbacks of started trials that were paused or went on (``Callback.on_trial_status``), once
        stored: ``(trial, PAUSED | RUNNING | PENDING)`` each. A pause is told only where Ray's scheduler pauses
        (``BaseSearcher.pauses_as_ray``): ASHA's trial waits at its rung for the engine's promotion, where Ray's
        decides at the result and its trial stays ``RUNNING`` (h242 showed it ``PAUSED``, and its rung's stop
        ``PAUSED`` in ``on_trial_complete``: h246)."""
        if not getattr(self.searcher, "pauses_as_ray", False):
            changes = [(trial_id, status) for trial_id, status in changes if status != PAUSED]
        if not changes:
            return
        for callback in self.settings.callbacks:
            told = getattr(callback, "on_trial_status", None)
            if callable(told):
                for trial_id, status in changes:
                    told(trial_id, status)

    def _tell_restatused(self) -> None:
        """Tell the callbacks of the paused trials restarted and the trials left paused since the last call."""
        if self._restatused:
            changes, self._restatused = self._restatused, []
            self._tell_statuses(changes)

    def _gives_way(self, trial: Trial, new: Iterable[Trial] = (), restarting: bool = False) -> bool:
        """Whether ``trial``, paused on its device and about to run on (promoted, or exploiting), gives its place
        to a waiting trial instead: its searcher's trials take turns (``BaseSearcher.takes_turns``), a queued
        trial (or one of ``new``, about to be queued) has a smaller ``turn_key``, and a restart loses nothing
        (``restarting``: it restarts anyway, an exploit; else its checkpoint is at its last result and its
        trainable reads its checkpoints). Ray's PBT pauses a trial at a perturbation point while others wait, and
        then runs the least advanced one.

        Args:
            trial: The trial.
            new: Trials of the groups being registered, not queued yet.
            restarting: The trial restarts anyway (from another trial's checkpoint).

        Returns:
            True when it should wait in the queue for its turn.
        """
        if not self._turns or not restarting and (
                trial.checkpoint_path is None or checkpoint_iteration(trial.checkpoint_path) != trial.last_iteration
                or not trial.reads_checkpoints):  # (a trainable that only saves would start over from step 0)
            return False
        turn = self.searcher.turn_key
        key = turn(trial.trial_id)
        # A trial behind it that computes on its device (one prefetched there that began while it paused) shares
        # its place: running on beside it would put this one ahead of everyone as much as a queued one would.
        home = self._device(trial.device).assigned if trial.device is not None else ()
        neighbours = (tid for tid in home if tid != trial.trial_id and self.trials[tid].status != PAUSED)
        return any(turn(tid) < key for tid in self.pending if tid != trial.trial_id) \
            or any(turn(t.trial_id) < key for t in new) or any(turn(tid) < key for tid in neighbours)

    def _warn_from_trials(self, warned: Sequence[Mapping[str, Any]]) -> None:
        """Give the warnings the trials sent for the script's author (:func:`fluidsalus.session.warn_user`: an import
        to change), each once per run, in the driver's terminal, under the driver's filters, at the user's line in the
        trial. Given in a device process, they reached the terminal only through Ray's forwarding of the workers'
        output, after the run's summary, once per device, or never when the script ended right after ``fit()``."""
        for data in warned:
            category = data.get("category")
            if not (isinstance(category, type) and issubclass(category, Warning)):
                category = UserWarning
            message = str(data.get("message"))
            if (category, message) in self._trial_warnings:
                continue
            self._trial_warnings.add((category, message))
            try:
                warnings.warn_explicit(message, category, str(data.get("filename") or "<trial>"),
                                       int(data.get("lineno") or 0), module=data.get("module"),
                                       registry=self._warnings_registry)
            except Exception as e:  # noqa: BLE001 - a filter set to "error": raised once the run has ended
                if self.warning_error is None:
                    self.warning_error = e

    def _note_last_value(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        """Keep the trial's last value of the metric (a trial whose last value is no finite number has none), an
        integer as an int (the progress line shows it in full, as the summary: float() lost digits above 2**53, and
        raised ``OverflowError`` above ~1e308; the live best compares ints as Python's ints)."""
        value = lookup_metric(result, self.settings.metric) if self.settings.metric and result else None
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            self._last_values[trial_id] = int(value)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            self._last_values[trial_id] = float(value)
        else:
            self._last_values.pop(trial_id, None)

    def _extras_of(self, seq: int, config: Mapping[str, Any]) -> dict[str, Any]:
        """The keys ``result_extras`` adds to the results of the trial of number ``seq``.

        Raises:
            ConfigError: It returned no dict of string keys.
        """
        extras = self.settings.result_extras
        if extras is None:
            return {}
        added = extras(seq, config)
        if not isinstance(added, Mapping) or not all(isinstance(k, str) for k in added):
            raise ConfigError(f"result_extras must return a dict of str keys -> values to add to the trial's results; "
                              f"got {added!r}")
        return dict(added)

    def _set_extras(self, trial: Trial) -> None:
        if self.settings.result_extras is not None:
            trial.extras = self._extras_of(trial.seq, trial.config)

    def _device(self, index: int) -> _Device:
        return self._devices[index] if self._devices[index].spec.index == index else \
            next(d for d in self._devices if d.spec.index == index)

    def _stop_exploited(self) -> None:
        """End the current attempts of exploiting trials; each restarts when its end arrives (_requeue).

        A trial paused off any device (preempted) has no attempt to end: it is queued at once."""
        if not self._exploits:
            return
        ids, self._exploits = self._exploits, []
        resident = [tid for tid in ids if self.trials[tid].placed_on]
        idle = [tid for tid in ids if not self.trials[tid].placed_on and tid in self._restarts]
        if idle:
            events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]] = []
            with self.store.transaction():
                for tid in idle:
                    self._requeue(self.trials[tid], self._restarts.pop(tid), time.time(), None, None, events)
                self.store.add_events(events)
        self._send_stop([tid for tid in resident if tid in self._restarts], no_verdict=True)

    def _take_exploits(self) -> None:
        """Apply the searcher's exploit requests: each paused trial restarts from its source's checkpoint."""
        for request in self.searcher.take_exploits():
            trial = self.trials[request.trial_id]
            source = [c for c in self.store.checkpoints(request.source_trial_id)
                      if c["iteration"] == request.source_iteration and os.path.isdir(c["path"])]
            if trial.status != PAUSED or not source:
                self.searcher.cancel_exploit(request.trial_id)
                if trial.status == PAUSED:  # (a trial that is no longer paused ended or moved on: nothing to say)
                    # The source's checkpoint is gone (retention deleted it, or by hand): the trial goes on as it
                    # was. It was cancelled without a word (a helper's multi-node run).
                    logger.warning("trial %s does not exploit trial %s: its checkpoint of iteration %s is not found; "
                                   "it continues with its own config", trial.trial_id, request.source_trial_id,
                                   request.source_iteration)
                    self.store.add_events([(time.time(), EXPLOIT_CANCELLED_EVENT, trial.trial_id, None, {
                        "source": request.source_trial_id, "source_iteration": request.source_iteration,
                        "reason": "no_checkpoint"})])
                continue
            own = request.source_trial_id == trial.trial_id  # (restarting from its own checkpoint: stored already)
            # Another trial's is copied beside the trial's own checkpoint of that iteration, not over it, and
            # listed when the exploit happens (_requeue): a run that ends first keeps the trial's own whole.
            copied = persist_checkpoint(Checkpoint(source[-1]["path"]), trial.trial_dir, request.source_iteration,
                                        prefix="" if own else EXPLOIT_CHECKPOINT_PREFIX)
            metrics = source[-1]["metrics"] or {}
            trial.budget, trial.group_id = request.budget, request.group_id
            self.pending.refresh(trial)
            self.store.update_trial(trial.trial_id, group_id=request.group_id, budget=request.budget)
            self._restarts[trial.trial_id] = _Restart(
                reason=RESTART_EXPLOIT, config=dict(request.config), checkpoint_path=copied,
                iteration=request.source_iteration, time_total_s=float(metrics.get("time_total_s", 0.0)),
                totals=result_totals(metrics), queue=self._gives_way(trial, restarting=True),
                copied_metrics=None if own else dict(metrics),
            )
            self._exploits.append(trial.trial_id)

    def _drop_exploit(self, trial_id: str) -> None:
        """A trial whose exploit was taken met the run's stop rule before its attempt ended: nothing may run it
        further (as a promotion of it is ignored, and a move of it dropped), so its exploit is cancelled, and its
        searcher told so before it hears of the trial's end (PBT then reverts the exploit: the trial ended with its
        own configuration). It restarted on the new configuration past its stop rule, unseen by its searcher."""
        restart = self._restarts.get(trial_id)
        if restart is None or restart.reason != RESTART_EXPLOIT:
            return
        del self._restarts[trial_id]
        self.searcher.cancel_exploit(trial_id)
        self.store.add_events([(time.time(), EXPLOIT_CANCELLED_EVENT, trial_id, None, {"reason": "stop rule met"})])

    def _stop_trials(self, trial_ids: list[str], no_verdict: bool = False) -> list[Trial]:
        """Stop trials: queued ones and ones paused off any device end at once, placed ones at their next report
        (or now, if paused). A restart planned for a trial (a move, an exploit) is dropped: the stop wins.
        ``no_verdict``: the stop is the run's end, not a decision about the trials (``gpu.host.DeviceHost.stop``).

        Returns:
            The trials ended at once (committed): the caller tells the callbacks (:meth:`_tell_stopped`) once
            they have seen what came before the stop (a batch's results).
        """
        stop: list[str] = []
        ended: list[Trial] = []
        for trial_id in trial_ids:
            trial = self.trials[trial_id]
            if trial.status in FINAL_STATUSES:
                continue
            if trial_id in self._stopping:
                self._restarts.pop(trial_id, None)
                if not no_verdict:  # (a decision now: the trial ends by it, whatever stop came before)
                    self._decided_stops.add(trial_id)
                continue
            self._restarts.pop(trial_id, None)
            if trial_id in self.pending:
                self.pending.discard(trial_id)
                ended.append(trial)
            elif trial.placed_on:
                stop.append(trial_id)
                if not no_verdict:
                    self._decided_stops.add(trial_id)
            elif trial.status == PAUSED:  # paused off any device (preempted): nothing runs, it ends here
                ended.append(trial)
        if ended:
            self._dirty = True
            with self.store.transaction():
                for trial in ended:
                    self._end_unstarted(trial)
                self._searcher_log.save()
        self._send_stop(stop, no_verdict)
        return ended

    def _tell_stopped(self, ended: list[Trial]) -> None:
        """Tell the callbacks the end of trials :meth:`_stop_trials` ended off any device (queued, or paused off
        its device: moved or preempted at its rung, then stopped by its searcher or at the search's end), as the
        ends that come from a device are told (:meth:`_handle`), and as Ray's ``stop_trial`` calls
        ``on_trial_complete`` for a ``PENDING`` or ``PAUSED`` trial."""
        for trial in ended:
            if trial.status != TERMINATED:
                continue
            self._log_end(trial, OUT_STOPPED)
            self._callbacks_end(trial)

    def _send_stop(self, trial_ids: Iterable[str], no_verdict: bool = False, peers_lost: bool = False) -> None:
        """Ask every device a trial runs on to stop it at its next boundary (``no_verdict``: the stop is the run's
        end or the planner's, not a decision that the trial ends: ``gpu.host.DeviceHost.stop``). A data-parallel
        trial's workers stop with rank 0, at its next report (``gpu.host.TrialSpec``): the stop only makes sure
        they end too when rank 0 is gone. ``peers_lost``: a worker of each trial died with its device, so its
        rank 0 must not wait for its workers at its end."""
        by_device: dict[int, list[str]] = {}
        for trial_id in trial_ids:
            trial = self.trials[trial_id]
            if not trial.placed_on:
                continue
            self._stopping.add(trial_id)
            for index in trial.placed_on:
                by_device.setdefault(index, []).append(trial_id)
        for index, ids in by_device.items():
            args = (ids, None, no_verdict, True) if peers_lost else (ids, None, True) if no_verdict else (ids,)
            self._send(self._device(index), "stop", *args)

    def _send_checkpoint_requests(self, trial_ids: Iterable[str]) -> None:
        """Ask the device of each trial the callbacks want checkpointed to save it at its next iteration (a
        trial that ended, or is being stopped, is passed over, and so is one that asks for verdicts: its answer
        carries the request)."""
        by_device: dict[int, list[str]] = {}
        for trial_id in dict.fromkeys(trial_ids):
            trial = self.trials.get(trial_id)
            if trial is None or trial.status in FINAL_STATUSES or trial_id in self._stopping or not trial.placed_on \
                    or trial_id in self._asks_verdicts:
                continue
            by_device.setdefault(trial.placed_on[0], []).append(trial_id)  # rank 0's device: it saves the trial
        for index, ids in by_device.items():
            self._send(self._device(index), "request_checkpoint", ids)

    def _take_back_start(self, trial_id: str,
                         events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]]) -> None:
        """The trial never started after all (:meth:`BaseSearcher.started_trial`): its start goes from the store, and
        from the batch's ``events`` when it came in the same batch (then no callback is told of it)."""
        self._began.discard(trial_id)
        events[:] = [e for e in events if not (e[1] == TRIAL_START_EVENT and e[2] == trial_id)]
        self.store.take_back_start(trial_id)

    def _end_unstarted(self, trial: Trial) -> None:
        """End a trial that runs nowhere (or runs no more: :meth:`_end_the_ending`), inside the caller's
        transaction; the caller saves the searcher's log (``self._searcher_log.save()``) in it once for all the
        trials it ends."""
        now, queued = time.time(), trial.status == PENDING
        trial.status = TERMINATED
        trial.devices = ()
        self._forget(trial.trial_id)
        self.store.update_trial(trial.trial_id, status=TERMINATED, stop_reason=OUT_STOPPED, finished_at=now)
        self._stopped.add(trial.trial_id)  # (counted if it began: one that ran, then waited for another attempt)
        # Every ended trial has its trial_end, one that ends off any device too (no device: it ends no time on
        # one; ``started`` False: a queued trial's attempt never began, as a prefetched one the run's end stops)
        self.store.add_events([(now, "trial_end", trial.trial_id, None,
                                {"attempt": trial.attempt, "outcome": OUT_STOPPED,
                                 **({"started": False} if queued else {})})])
        self._tell_end(trial, error=False, stopped=True)

    # ------------------------------------------------------------------ placement (the planner)

    def _estimate(self, trial: Trial) -> tuple[int, int]:
        p = trial.p_bytes if trial.p_bytes is not None else DEFAULT_TRIAL_ESTIMATE[0]
        t = trial.t_bytes if trial.t_bytes is not None else DEFAULT_TRIAL_ESTIMATE[1]
        return p, t

    def _view(self, device: _Device) -> DeviceView:
        """The device as the planner sees it; the same object while nothing in it changed (the planner reuses
        its work for views and demands it saw before)."""
        lanes = device.mirror.views()
        view = device.view
        if view is None or view.lanes is not lanes or view.capacity_bytes != device.capacity \
                or view.curve_key != device.curve_key:
            view = device.view = DeviceView(device.spec.index, device.capacity, device.spec.slots,
                                            curve_key=device.curve_key, lanes=lanes)
        return view

    def _demand(self, trial: Trial, time_attr: str) -> TrialDemand:
        """:func:`trial_demand`, as the same object as last time when it is equal to it."""
        turn = self.searcher.turn_key(trial.trial_id) if self._turns and not trial.placed_on else 0.0
        if turn != turn:  # a NaN progress (its time_attr reported NaN): last in turn, as the planner refuses NaN
            turn = math.inf
        demand = trial_demand(trial, time_attr, DEFAULT_TRIAL_ESTIMATE, self._workers,
                              withdrawal_asked=(trial.trial_id, trial.attempt) in self._withdraw_sent, turn=turn)
        before = self._demands.get(trial.trial_id)
        if before == demand:
            return before  # type: ignore[return-value]
        self._demands[trial.trial_id] = demand
        return demand

    def _planned(self, queued: Iterable[str] | None = None) -> dict[str, TrialState]:
        """The trials the planner is given, with what :func:`plan_actions` needs of each.

        Queued trials (``queued``, else all of them), placed ones (running, paused, prefetched) and moving ones
        (at their planned devices). Trials being stopped for good (a searcher's stop, an exploit, a preemption)
        wait for their end."""
        states: dict[str, TrialState] = {}
        low = self._workers[0] if self._workers is not None else 1
        stalled = self._stalled()
        held = self._held_suspects()
        for trial_id in self.pending if queued is None else queued:
            trial = self.trials[trial_id]
            if trial.devices and not all(self._device(i).alive for i in trial.devices):
                trial.devices = ()  # kept for a device that is gone: placed afresh (a held suspect too)
            if trial_id not in held:
                states[trial_id] = TrialState((), min_devices=low)
        for device in self._devices:
            for trial_id in device.assigned:
                trial = self.trials[trial_id]
                if trial_id in states or not trial.placed_on or trial.placed_on[0] != device.spec.index:
                    continue
                restart = self._restarts.get(trial_id)
                moving = trial_id in self._stopping and restart is not None and restart.reason == RESTART_MOVE
                if trial_id in self._stopping and not moving:
                    continue
                states[trial_id] = TrialState(
                    trial.placed_on, computing=trial.status != PAUSED,
                    can_restart=trial.checkpoint_path is not None and trial.reads_checkpoints,
                    unbegun=may_not_have_begun(trial, (trial_id, trial.attempt) in self._withdraw_sent),
                    moving=moving, min_devices=low, stalled=stalled)
        return states

    def _held_suspects(self) -> set[str]:
        """Queued suspects (``_suspects``) that wait while another computes.

        A device's death is charged to every trial computing on it (:func:`charge_death`), as the driver cannot tell
        which one ended the process (``os._exit``, a crash in native code, the out-of-memory killer). Restarted side
        by side, a trial that does so and its blameless neighbour died together again and again until both had
        failed (a helper's study: the neighbour of an objective calling ``os._exit`` failed in 3 runs of 3). One at a
        time, the next death is charged to the one that caused it, beside trials that are not suspected.

        Returns:
            Every queued suspect when a suspect computes now (placed and not paused: a submitted one is PENDING until
            its device says it started); else all but the first of them, the one of the fewest deaths (so one that
            just died again goes behind those that had no turn yet), then by arrival.
        """
        if not self._suspects:
            return set()
        queued = sorted((self.trials[tid] for tid in self._suspects if tid in self.pending),
                        key=lambda t: (t.stuck_deaths, t.seq))
        computing = any(tid in self._suspects and self.trials[tid].status != PAUSED
                        for device in self._devices for tid in device.assigned)
        return {t.trial_id for t in queued[0 if computing else 1:]}

    def _stalled(self) -> bool:
        """Whether no trial computes and one waits for memory that only trials that do not compute can free
        (:func:`is_stalled`): the planner's preemptions are then carried out without a checkpoint."""
        alive = [d for d in self._devices if d.alive]
        computing = sum(1 for d in alive for tid in d.assigned
                        if self.trials[tid].status != PAUSED and tid not in self._admission_wait)
        under_way = bool(self._stopping) or any(d.start_ref is not None or d.lingering for d in self._devices)
        return is_stalled(computing, len(self._admission_wait), len(self.pending), under_way)

    def _dispatch(self) -> None:
        """Re-plan if anything the plan depends on changed, and apply the plan's changes (then prefetch)."""
        # A paused trial restarted since the last batch (an exploit of one paused off any device, a dead device's)
        # is told PENDING before the plan can start its new attempt, whose on_trial_start would come first (h246)
        self._tell_restatused()
        if not self._dirty:
            return
        self._dirty = False
        alive = [d for d in self._devices if d.alive]
        attr = self.searcher.time_attr
        window = QUEUE_WINDOW_FACTOR * sum(d.spec.slots + self.settings.prefetch_per_device for d in alive) \
            + len(alive) + 1  # one more than the devices: a long queue keeps the plan in the intra regime
        low = self._workers[0] if self._workers is not None else 1
        if low > 1:
            # Trials that need several devices each: the planner sees only as many as the free devices can start,
            # so it plans them in the inter regime, where each gets whole devices (min_workers of them).
            busy = {d.spec.index for d in alive
                    if any(self.trials[tid].status != PAUSED for tid in d.assigned)}
            window = min(window, (len(alive) - len(busy)) // low)
        queued = None
        if len(self.pending) > window:
            queued = self.pending.window(window)
            # A trial restarting on devices the planner already gave it (a move) holds them: always planned.
            queued += [tid for tid in self.pending.holding() if tid not in queued]
        states = self._planned(queued)
        if not alive or not states:
            return
        demands = [self._demand(self.trials[tid], attr) for tid in states]
        plan = self.planner.plan(demands, [self._view(d) for d in alive])
        self._plans += 1
        for device in alive:
            self._planned_gates[device.curve_key] = self._gates(device)
        computing = sum(1 for tid, s in states.items() if s.placed_on and s.computing)
        actions = plan_actions(plan, states, self.settings.max_concurrent_trials, computing)
        now = time.time()
        events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]] = []
        submits: list[tuple[Trial, tuple[int, ...], str]] = []
        by_index = {d.spec.index: d for d in alive}
        # Too big for every device up: it fails, unless a device still starting may hold it (then it waits).
        unplaceable = () if any(d.start_ref is not None for d in self._devices) else actions.unplaceable
        with self.store.transaction():
            for trial_id in unplaceable:
                self._fail_unplaceable(self.trials[trial_id], max(d.capacity for d in alive), now, events)
            if unplaceable:
                self._searcher_log.save()
            for trial_id, devices, action in actions.submit:
                trial = self.trials[trial_id]
                if all(i in by_index and trial_id not in by_index[i].assigned and trial_id not in by_index[i].lingering
                       for i in devices):
                    submits.append((trial, devices, action))
                else:  # a rank of its last attempt is still winding down there: next plan
                    self._dirty = True
            for trial_id, devices, action in actions.move:
                trial = self.trials[trial_id]
                names = [self._name(i) for i in devices]
                self._restarts[trial_id] = _Restart(reason=RESTART_MOVE, action=action)
                events.append((now, "plan_move", trial_id, self._name(trial.placed_on[0]), {
                    "attempt": trial.attempt, "action": action, "to": names, "regime": plan.regime,
                    "from_iteration": checkpoint_iteration(trial.checkpoint_path) if trial.checkpoint_path else 0}))
                trial.devices = devices
            for trial_id, devices in actions.retarget:
                self.trials[trial_id].devices = devices
            for trial_id in actions.preempt:
                trial = self.trials[trial_id]
                self._restarts[trial_id] = _Restart(reason=RESTART_PREEMPT)
                events.append((now, "plan_preempt", trial_id, self._name(trial.placed_on[0]),
                               {"attempt": trial.attempt, "regime": plan.regime}))
                trial.devices = ()
            held = dict(plan.held)
            for trial_id, action, reason in actions.refused:
                if reason == REFUSED_NO_CHECKPOINT and self.trials[trial_id].checkpoint_path is None:
                    # (its first checkpoint may let it move; one that has a checkpoint it does not read stays
                    # unmovable, and each of its checkpoints re-planned for nothing)
                    self._awaiting_checkpoint.add(trial_id)
                key = (trial_id, self.trials[trial_id].attempt, action)
                on = self.trials[trial_id].placed_on  # (inspect names the device the change would have left)
                # Not while a trial of its device is on its way off it: asked back, its demand says it cannot
                # restart (it may have begun), so the plan held this one until the answer, which undoes that (a
                # report counted a refusal that never held: h245's F2); one that holds after a declined withdrawal
                # is recorded at the next plan once that trial reported.
                if reason != REFUSED_LIMIT and key not in self._refused and not (
                        reason == REFUSED_NO_CHECKPOINT and on and self._withdrawal_unanswered(self._device(on[0]))):
                    self._refused.add(key)
                    events.append((now, "plan_refused", trial_id, None, {
                        "attempt": key[1], "action": action, "reason": reason,
                        "from": self._name(on[0]) if on else None,
                        "to": [self._name(i) for i in held.get(trial_id) or plan.placement(trial_id) or ()]}))
            withdraws: dict[int, dict[str, int]] = {}  # device -> {trial: attempt}
            for trial_id, action in actions.withdraw:
                trial = self.trials[trial_id]
                self._withdraw_sent.add((trial_id, trial.attempt))
                withdraws.setdefault(trial.placed_on[0], {})[trial_id] = trial.attempt
                events.append((now, "plan_withdraw", trial_id, self._name(trial.placed_on[0]), {
                    "attempt": trial.attempt, "action": action, "regime": plan.regime,
                    "to": [self._name(i) for i in plan.placement(trial_id) or ()]}))
            for trial, devices, action in submits:  # a trial restarting where the planner kept it: "restart"
                self._place(trial, devices, action if action != KEEP else "restart", plan.regime, now, events)
            for trial_id, index in self._prefetch(plan, actions):
                self._place(self.trials[trial_id], (index,), "prefetch", plan.regime, now, events)
                submits.append((self.trials[trial_id], (index,), "prefetch"))
            if events:
                self.store.add_events(events)
        self._send_stop([tid for tid, _, _ in actions.move] + actions.preempt, no_verdict=True)
        for index, attempts in withdraws.items():
            self._send(self._device(index), "withdraw", list(attempts), attempts)
        # (before the submissions: a device that is to hold pauses holds them before its prefetched trial can begin,
        # behind a neighbour's pause or verdict wait that may have begun already; after them it began at once)
        self._tell_hold_pauses()
        self._submit(submits)
        for trial_id in unplaceable:  # committed: tell the callbacks
            trial = self.trials[trial_id]
            self._log_end(trial, OUT_ERRORED)
            self._callbacks_end(trial)

    def _name(self, index: int) -> str:
        return self._device(index).spec.name

    def _withdrawal_unanswered(self, device: _Device) -> bool:
        """Whether ``device`` was asked to give back a trial of its own (a withdrawal, to place it elsewhere) that has
        reported nothing since: the device may still give it back. It ends the trial when it does (``withdrawn``),
        and says nothing when it declines (the trial had begun), so a withdrawal is known to have failed only once
        the trial reports."""
        index = device.spec.index
        return any((trial := self.trials[trial_id]).placed_on[:1] == (index,)
                   and (trial_id, trial.attempt) in self._withdraw_sent and may_not_have_begun(trial, False)
                   for trial_id in device.assigned)

    def _place(self, trial: Trial, devices: tuple[int, ...], action: str, regime: str, now: float,
               events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]]) -> None:
        """Record a submission (inside the plan's transaction): the trial leaves the queue for ``devices``."""
        self.pending.discard(trial.trial_id)
        trial.devices = trial.placed_on = devices
        for index in devices:
            self._device(index).assigned.add(trial.trial_id)
        names = [self._name(i) for i in devices]
        data: dict[str, Any] = {"attempt": trial.attempt, "action": action, "regime": regime}
        if len(devices) > 1:
            data["devices"] = names
        events.append((now, "place", trial.trial_id, names[0], data))
        self.store.update_trial(trial.trial_id, device=names[0])

    def _prefetch(self, plan: Plan, actions: PlanActions) -> list[tuple[str, int]]:
        """Queued trials to submit ahead to full devices (:func:`choose_prefetch`), in the plan's queue order."""
        per_device = self.settings.prefetch_per_device
        if per_device <= 0 or not self.pending or (self._workers is not None and self._workers[0] > 1):
            return []  # (a trial that needs several devices is never queued on one)
        skip = set(actions.unplaceable)
        queue = [tid for tid in plan.queued if tid in self.pending and tid not in skip
                 and not self.trials[tid].devices]
        if not queue:
            return []
        load = self._computing_load()
        computing = sum(load.values())
        limit = self.settings.max_concurrent_trials
        allowance = None if limit is None else max(0, limit - computing)
        devices = [DeviceLoad(d.spec.index, load.get(d.spec.index, 0), d.spec.slots, d.capacity)
                   for d in self._devices if d.alive]
        sizes = {tid: sum(self._estimate(self.trials[tid])) for tid in queue}
        return choose_prefetch(queue, sizes, devices, per_device, allowance)

    def _submit(self, submits: list[tuple[Trial, tuple[int, ...], str]]) -> None:
        """Send the submissions to the devices (after the commit): one spec per device, rank 0 on the first."""
        batches: dict[int, list[TrialSpec]] = {}
        for trial, devices, action in submits:
            rendezvous = None
            if len(devices) > 1:
                try:
                    rendezvous = self._rendezvous(devices[0])
                except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
                    self._unsubmit(trial, f"no rendezvous port from {self._name(devices[0])}: {e}")
                    continue
            spec = self._spec_for(trial, prefetched=action == "prefetch")
            for index, rank_spec in rank_specs(spec, devices, rendezvous):
                batches.setdefault(index, []).append(rank_spec)
        for index, specs in batches.items():
            self._send(self._device(index), "submit", specs)

    def _unsubmit(self, trial: Trial, reason: str) -> None:
        """Take back a placement that could not be sent (its rank 0's actor did not answer): the trial waits in
        the queue again, and the poll of that actor finds out whether it died."""
        for index in trial.placed_on:
            self._device(index).assigned.discard(trial.trial_id)
        trial.placed_on, trial.devices = (), ()
        self.pending.add(trial)
        self._dirty = True
        self.store.add_events([(time.time(), "place_failed", trial.trial_id, None,
                                {"attempt": trial.attempt, "reason": reason})])

    def _rendezvous(self, index: int) -> str:
        """``"ip:port"`` of a data-parallel trial's rendezvous: rank 0's node and a port free there."""
        device = self._device(index)
        port = ray.get(device.actor.free_port.remote(), timeout=FREE_PORT_TIMEOUT_S)
        return f"{device.info['node_ip']}:{int(port)}"

    def _fail_unplaceable(self, trial: Trial, largest: int, now: float,
                          events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]]) -> None:
        """End a queued trial that no device can hold (inside the plan's transaction)."""
        p, t = self._estimate(trial)
        error = (f"trial {trial.trial_id} needs P+T = {p + t} bytes (P={p}, T={t}) but the largest device holds "
                 f"{largest} bytes: it cannot run on this cluster")
        self.pending.discard(trial.trial_id)
        trial.status, trial.error, trial.devices = ERROR, error, ()
        self._forget(trial.trial_id)
        self.store.update_trial(trial.trial_id, status=ERROR, finished_at=now, error=error, stop_reason=OUT_ERRORED)
        events.append((now, "trial_end", trial.trial_id, None,
                       {"attempt": trial.attempt, "outcome": OUT_ERRORED, "reason": "unplaceable"}))
        self._tell_end(trial, error=True)
        self._note_error(trial)

    def _spec_for(self, trial: Trial, prefetched: bool = False) -> TrialSpec:
        """The spec of the trial's attempt; ``prefetched``: sent ahead to a full device, where it waits in its lane
        until the lane would idle (``TrialSpec.prefetched``)."""
        return TrialSpec(
            trial_id=trial.trial_id,
            trial_name=self._names.get(trial.trial_id) or f"{self.settings.trainable_name}_{trial.trial_id}",
            config=trial.config,
            trial_dir=trial.trial_dir,
            attempt=trial.attempt,
            checkpoint_path=trial.checkpoint_path,
            start_iteration=trial.last_iteration if trial.checkpoint_path else 0,
            time_total_offset=trial.time_total_s if trial.checkpoint_path else 0.0,
            result_totals=dict(trial.checkpoint_totals) if trial.checkpoint_path else {},
            budget=trial.budget,
            prefetched=prefetched,
            stop_state=self._stop_state() if trial.attempt > 0 or trial.checkpoint_path else None,
            # (what the stop rule has judged: the results a restart runs again are kept from it, _stopper_stops)
            stop_seen_through=self._redo_unseen.get(trial.trial_id, 0),
        )

    def _stop_state(self) -> bytes | None:
        """The driver's copy of the run's stopper as the devices evaluate it, pickled, for an attempt that continues
        a trial (``TrialSpec.stop_state``); None without a stopper object (a dict's thresholds or a function keep
        no per-trial state the driver could hand on)."""
        if self.settings.stopper is None or self._stop_state_failed:
            return None
        try:
            return cloudpickle.dumps(for_devices(self.settings.stopper))
        except Exception as e:  # noqa: BLE001 - pickling fails with any type (a lock the stopper made since)
            # It was pickled for the devices at the start: only state it gathered since fails. The devices' own
            # copies judge the trial then, as before.
            self._stop_state_failed = True
            logger.warning("the stopper's state cannot be sent with a restarted trial (%s: %s); each device judges "
                           "it with its own copy", type(e).__name__, e)
            return None

    # ------------------------------------------------------------------ events

    def _acts_on(self, device: _Device, event: tuple[Any, ...]) -> bool:
        """Whether a trial's event from ``device`` counts: not one of an earlier attempt that was already given up
        on, nor a data-parallel worker's (only rank 0 speaks for the trial; the host sends none), nor one of a
        trial that has ended (a worker still waiting for memory when its trial ended sends an end of its own, which
        was taken as the trial's second end: an errored trial became TERMINATED)."""
        trial = self.trials.get(event[1])
        if trial is None or event[2] != trial.attempt or trial.status in FINAL_STATUSES:
            return False
        return not (trial.placed_on and trial.placed_on[0] != device.spec.index)

    def _handle(self, device: _Device, batch: list[tuple[Any, ...]]) -> None:
        """Store and act on a device's batch of events, in one transaction.

        Raises:
            ConfigError: A result leaves out the run's metric, or a device reported a run-level error (a stop key
                missing from a result): the events before it are stored and acted on first, as if they had come
                in a batch of their own, so that what the run did is kept whatever the device's batching.
        """
        split = self._failed_after_its_result(batch)
        if split:
            # The searcher decides on the trial's result before its failure is judged, as when they come in two
            # batches (and as Ray, whose trial waits in its report: a STOP there ends it before it fails): a STOP
            # there makes the failure one on its way out, not retried; decided after it, a retry ran the trial
            # again (one failure more, its error file, a restart) and the STOP then ended the retry unstarted
            try:
                self._handle(device, batch[:split])
            except BaseException:  # (a callback or stopper that raised: the failure after it is still recorded)
                self._handle(device, batch[split:])
                raise
            self._handle(device, batch[split:])
            return
        for index, event in enumerate(batch):
            error: ConfigError | None = None
            if event[0] not in (EV_FATAL, EV_RESULT) or not self._acts_on(device, event):
                continue
            if event[0] == EV_FATAL:
                error = ConfigError(event[4])
            else:
                extras = self.trials[event[1]].extras
                if extras:  # the front end's keys go into the result before its check (a metric may be one)
                    event[4].update(extras)
                try:
                    self._check_metric(event[1], event[4])
                except ConfigError as e:
                    error = e
            if error is not None:
                if index:
                    self._handle(device, batch[:index])
                raise error
        results: list[tuple[str, int, int, float, Mapping[str, Any]]] = []
        events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]] = []
        acted: list[tuple[str, Trial, tuple[Any, ...]]] = []
        # Trials the run's end stopped before their attempt's first turn (prefetched): they end as those it finds
        # queued (_end_unstarted), with no end hook, whatever the planner had sent ahead (and in the "stopped" count
        # as those, if an earlier attempt began: the count takes only the trials in _began)
        unstarted: set[str] = set()
        returned: set[str] = set()  # trials whose function returned after a result that did not end them
        verdicts: list[tuple[Any, ...]] = []  # CHECKPOINT_VERDICT_CALLs: answered once the callbacks saw the batch
        decisions: list[tuple[Any, ...]] = []  # RESULT_VERDICT_CALLs: answered once the searcher saw the batch
        warned: list[Mapping[str, Any]] = []  # LANE_WARNINGs: given once the batch is committed
        failed_after_stop: list[tuple[Any, ...]] = []  # LANE_ERROR_AFTER_STOPs: warned of once the batch is committed
        failed_in_batch = False  # a trial of this batch failed for good (fail_fast="raise" raises it: _fails_unseen)
        paused_at: set[int] = set()  # (ids of) the results at which their trial paused at its budget
        redone_at: set[int] = set()  # (ids of) results run again after the engine's own restart (_redone)
        name = device.spec.name
        received = time.time()  # the driver's clock: a move's two ends may be on nodes with different clocks
        with self.store.transaction():
            for event in batch:
                kind, trial_id, attempt, ts = event[0], event[1], event[2], event[3]
                if kind == EV_CALL:  # a trial waits for the driver: answer at once (nothing to store)...
                    if event[5] == CHECKPOINT_VERDICT_CALL:  # ...except this, once the callbacks saw the batch
                        verdicts.append(event)
                        self._asks_verdicts.add(trial_id)
                    elif event[5] == RESULT_VERDICT_CALL:  # and this, once the searcher decided on the result
                        decisions.append(event)
                    else:
                        self._answer_call(device, event)
                    continue
                if kind == EV_LANE and event[4] == LANE_ERROR_AFTER_STOP:
                    failed_after_stop.append(event)  # (stored below, as every lane event; warned of after the commit)
                if kind == EV_LANE and event[4] == LANE_WARNING:
                    warned.append(event[5])
                    continue
                if kind == EV_LANE and event[4] == LANE_RESUME_READ:
                    if trial_id in self.trials:
                        self.trials[trial_id].reads_checkpoints = True
                        self._dirty = True  # it may be moved now
                    continue
                if kind == EV_LANE:  # lane activity: stored as it is, for goodput; the planner's memory view
                    self._lane_event(device, event)
                    events.append((ts, event[4], trial_id, name, {**event[5], "attempt": attempt}))
                    continue
                trial = self.trials.get(trial_id)
                if kind == EV_END and trial_id in device.lingering:
                    del device.lingering[trial_id]  # a worker that ended as a trial (never admitted, say)
                elif (kind == EV_END and trial is not None and attempt == trial.attempt
                      and device.spec.index in trial.placed_on[1:]):
                    # A worker that ended as a trial before rank 0's end (too large for its device, or stopped
                    # while it waited for memory): it is gone from there, as after its worker_end. Left assigned,
                    # rank 0's end marked it lingering there for ever, and the trial's restart never went out.
                    device.assigned.discard(trial_id)
                if trial is None or not self._acts_on(device, event):
                    continue
                if kind == EV_RESULT:
                    metrics = event[4]  # (with the trial's extras: see above)
                    if metrics.get("done") and not event[6] and trial_id in self._restarts:
                        # The stop of a restart (a move, a preemption, a turn, an exploit) reached the trial at this
                        # result, and its device marked it done: the trial goes on from here, so it is not its last
                        # (Ray's row where its scheduler pauses a trial says False). A stop decided on it sets it
                        # again below. (A CI run's stored rows said done at a move and again at the trial's end.)
                        metrics["done"] = False
                    reached = metrics.get(self.searcher.time_attr)
                    if event[5] and not (trial.budget is not None and isinstance(reached, (int, float))
                                         and reached < trial.budget):
                        # (A pause short of the trial's budget is stale: a promotion's new budget is on its way
                        # to the device, which resumes the trial when it arrives.)
                        trial.status = PAUSED
                        paused_at.add(id(event))
                        device.changed_at = ts
                        self._dirty = True
                    if (metrics.get("done") and trial_id not in self._stopping) or event[6]:
                        trial.finished_by_rule = True  # the run's stop rule ended it, not a decision
                        self._drop_exploit(trial_id)
                    results.append((trial_id, attempt, metrics["training_iteration"], ts, metrics))
                    if self._redone(trial_id, metrics):
                        redone_at.add(id(event))
                    trial.last_result = metrics
                    trial.last_iteration = metrics["training_iteration"]
                    if trial_id in self._suspects and trial.last_iteration > (trial.death_point or 0):
                        self._suspects.discard(trial_id)  # past where it died: not the one that ended the process
                        self._dirty = True  # (the suspects held back may start)
                    trial.time_total_s = metrics.get("time_total_s", trial.time_total_s)
                    if metrics.get("checkpoint_dir_name"):
                        trial.checkpoint_path = os.path.join(trial.trial_dir, metrics["checkpoint_dir_name"])
                        self.store.add_checkpoint(trial_id, trial.last_iteration, trial.checkpoint_path, metrics)
                        trial.checkpoint_totals = result_totals(metrics)
                        if trial_id in self._awaiting_checkpoint:  # a move refused for want of one may go ahead
                            self._awaiting_checkpoint.discard(trial_id)
                            self._dirty = True
                    self._observe(device, trial, ts, metrics)
                    self._measure_costs(trial, received, metrics, events, name)
                    acted.append((kind, trial, event))
                elif kind == EV_CHECKPOINT:  # of an iteration whose result came without one
                    iteration, dirname = event[4], event[5]
                    last = trial.last_result or {}
                    metrics = dict(last) if last.get("training_iteration") == iteration else {
                        "training_iteration": iteration}
                    metrics["checkpoint_dir_name"] = dirname
                    trial.checkpoint_path = os.path.join(trial.trial_dir, dirname)
                    self.store.add_checkpoint(trial_id, iteration, trial.checkpoint_path, metrics)
                    trial.checkpoint_totals = result_totals(metrics)
                    self.store.update_trial(trial_id, checkpoint_path=trial.checkpoint_path)  # a resume starts there
                    if trial_id in self._awaiting_checkpoint:
                        self._awaiting_checkpoint.discard(trial_id)
                        self._dirty = True
                    acted.append((kind, trial, event))
                elif kind == EV_START:
                    trial.status = RUNNING
                    # where this attempt resumes (its death rule): re-admitted after an out-of-memory error, from
                    # its checkpoint's iteration (it was the last result's, so a death in the redo seemed no progress)
                    trial.attempt_start = self._readmitted_from.pop(trial_id, trial.last_iteration)
                    if trial_id in self._abandoned:
                        self._drop_checkpoints_after(trial, self._abandoned.pop(trial_id))
                    device.changed_at = ts
                    self.store.update_trial(trial_id, status=RUNNING, started_at=ts, attempt=attempt)
                    self._began.add(trial_id)
                    # (with where it runs: the node and pid of the device's process, Ray's trial location)
                    events.append((ts, TRIAL_START_EVENT, trial_id, name, {"attempt": attempt,
                                                                          **_process_location(device.info)}))
                elif kind == EV_END:
                    outcome, error, trace = event[4], event[5], event[6]
                    error_pickle = event[7] if len(event) > 7 else None
                    if outcome == OUT_ERRORED and len(event) > 8 and event[8] and trial_id in self._stopping:
                        # It raised as this driver's stop unwound it (a ``finally:`` that failed): as Ray Tune, which
                        # stops the actor and never sees what the trainable does on its way out, the trial ends
                        # stopped (or goes on with the move that stopped it), the error a warning and a record
                        going_on = self._restarts.get(trial_id)  # (a restart: its reason, which the warning names)
                        failed_after_stop.append((EV_LANE, trial_id, attempt, ts, LANE_ERROR_AFTER_STOP, {
                            "error": error, "traceback": trace, "moved": going_on is not None,
                            **({} if going_on is None else {"restart": going_on.reason})}))
                        events.append((ts, LANE_ERROR_AFTER_STOP, trial_id, name,
                                       {**failed_after_stop[-1][5], "attempt": attempt}))
                        outcome, error, trace, error_pickle = OUT_STOPPED, None, None, None
                        event = (*event[:4], outcome, error, trace)
                    elif outcome == OUT_ERRORED and self._fails_unseen(trial_id, failed_in_batch):
                        # fail_fast="raise" has a failure to raise: Ray raised it as its event came and killed this
                        # trial's actor, unseen. It ends stopped by the run's end (no error file, no failure counted,
                        # no retry, no on_trial_error), left unfinished as the trials that end stopped
                        self._caught.add(trial_id)
                        failed_after_stop.append((EV_LANE, trial_id, attempt, ts, LANE_ERROR_AFTER_STOP, {
                            "error": error, "traceback": trace, "moved": False, "after_raise": True}))
                        events.append((ts, LANE_ERROR_AFTER_STOP, trial_id, name,
                                       {**failed_after_stop[-1][5], "attempt": attempt}))
                        outcome, error, trace, error_pickle = OUT_STOPPED, None, None, None
                        event = (*event[:4], outcome, error, trace)
                    self._unplace(trial, ts)
                    stopped_for_good = trial_id in self._stopping and trial_id not in self._restarts
                    self._stopping.discard(trial_id)
                    self._dirty = True
                    restart = self._restarts.pop(trial_id, None)
                    if outcome == OUT_WITHDRAWN:  # given back before it began: placed again, unless stopped
                        outcome = OUT_STOPPED if stopped_for_good else outcome
                        restart = None if stopped_for_good else _Restart(reason=RESTART_WITHDRAWN)
                    if restart is not None and restart.reason in (RESTART_MOVE, RESTART_PREEMPT, RESTART_TURN) \
                            and (outcome != OUT_STOPPED or trial.finished_by_rule):
                        restart = None  # it ended on its own, or met the stop rule, at its boundary: nothing to move
                    if outcome == OUT_ERRORED:
                        # Ray's error file counts every failure, the retried ones and the last
                        failures = trial.num_failures + 1
                        append_error_file(trial.trial_dir, self._shown_name(trial_id), failures, ts, error, trace,
                                          error_pickle)
                    # (not a trial that met its stop rule, or was stopped for good, whose end the searcher is told
                    # at that result (in this batch or an earlier one): an error on its way out ends it, where a
                    # retry ran a finished trial again, unseen by the searcher)
                    ended_at_result = trial_id in self._told_end or trial.finished_by_rule or stopped_for_good
                    if restart is None and outcome == OUT_ERRORED and not ended_at_result and self._may_retry(trial):
                        trial.num_failures += 1
                        restart = _Restart(reason=RESTART_RETRY, error=error)
                    if restart is not None:
                        left_iteration = trial.last_iteration
                        self._requeue(trial, restart, ts, name, trace, events)
                        if restart.reason == RESTART_MOVE and trial.status == PENDING and trial.checkpoint_path:
                            # _requeue set last_iteration to that of the checkpoint the new attempt resumes from
                            # (a move without one, out of a stalled run, is no move to learn a cost from)
                            self._move_costs.left(trial_id, received, left_iteration, resize=restart.action == RESIZE,
                                                  resumed_from=trial.last_iteration)
                        else:
                            self._move_costs.drop(trial_id)
                        continue
                    if outcome == OUT_COMPLETED and self.searcher.stopped_by_search(trial_id):
                        outcome = OUT_STOPPED  # the search ended it (an Optuna pruner), as a scheduler's stop
                        event = (*event[:4], outcome, *event[5:])
                    attempt_began = not (outcome == OUT_STOPPED and trial.status == PENDING)  # (PENDING until EV_START)
                    if attempt_began and outcome in (OUT_COMPLETED, OUT_STOPPED) \
                            and not self.searcher.started_trial(trial_id):
                        # it began only to find the search over (an Optuna trial's start after the timeout or
                        # study.stop(): the study has no trial for it): it never started, as a prefetched trial the
                        # run's end stops (it was "completed", a started trial, in the counts)
                        outcome, attempt_began = OUT_STOPPED, False
                        event = (*event[:4], outcome, *event[5:])
                        self._take_back_start(trial_id, events)
                    if not attempt_began and self._ending is not None and trial_id not in self._decided_stops:
                        unstarted.add(trial_id)  # (the run's end stopped it before its attempt began)
                    if outcome == OUT_COMPLETED and not ended_at_result:
                        returned.add(trial_id)
                    trial.status = ERROR if outcome == OUT_ERRORED else TERMINATED
                    failed_in_batch = failed_in_batch or trial.status == ERROR
                    trial.error, trial.error_pickle = error, error_pickle
                    trial.devices = ()
                    self._forget(trial_id)
                    self.store.update_trial(
                        trial_id, status=trial.status, finished_at=ts, error=error, traceback=trace,
                        stop_reason=outcome, last_iteration=trial.last_iteration,
                        checkpoint_path=trial.checkpoint_path,
                        **({"last_result": trial.last_result} if trial.last_result is not None else {}),
                    )
                    events.append((ts, "trial_end", trial_id, name, {"attempt": attempt, "outcome": outcome,
                                                                      **({} if attempt_began else {"started": False})}))
                    acted.append((kind, trial, event))
            # The searcher consumes the batch in memory, and its new state commits together with the batch:
            # after a crash, the stored results and the stored searcher state always agree. Nothing leaves
            # this process (stop messages, printed lines) before the commit. (It decides before the results
            # are written, so that a stop marks its result done.)
            stops: list[str] = []
            stopper_error: Exception | None = None  # the driver's copy of the stopper raised: after the commit
            for kind, trial, event in acted:
                if kind == EV_RESULT:
                    # As Ray's controller, the stopper is asked first; a stop of its own skips the searcher
                    stopped = False
                    # (not a result a restart of the engine's own runs again: the stopper had it once, as in Ray,
                    # whose trial never moves; the devices' copies skip it too, TrialSpec.stop_seen_through)
                    if stopper_error is None and id(event) not in redone_at:
                        try:
                            stopped = self._stopper_stops(trial, event[4])
                        except Exception as e:  # the run ends with it, once the batch is kept
                            stopper_error = e
                    # Every result is given, in order, also those that arrive in the batch of the trial's end
                    # (they come before it in ``acted``): the searcher sees the same sequence however the
                    # device happened to batch them. A stop asked for a trial that has already ended is moot
                    # (_stop_trials passes over ended trials).
                    if self._cut_short(trial, event):  # (left unfinished: not its last result, and given as any)
                        event[4]["done"] = False
                    iteration = event[4]["training_iteration"]
                    seen = iteration <= self._searcher_seen.get(trial.trial_id, 0)
                    if trial.trial_id in self._told_end or (seen and not stopped):
                        continue  # run again after a restart: the searcher decided on this iteration already
                    self._searcher_seen[trial.trial_id] = max(iteration, self._searcher_seen.get(trial.trial_id, 0))
                    if stopped or self._ends_at(trial, event):
                        # As Ray's controller: a result its stopper, the trial's stop criteria or a trainable's own
                        # ``done`` ends the trial at goes to neither on_trial_result; the searcher learns the trial's
                        # end from it, there (Ray's stop_trial: ASHA records it at its rung, HyperBand takes the
                        # trial out of its rung, the median rule records it once, PBT ranks it no more)
                        if stopped:
                            stops.append(trial.trial_id)
                        event[4]["done"] = True
                        self._told_end.add(trial.trial_id)
                        self._searcher_log.on_trial_complete(trial.trial_id, event[4], error=False)
                        events.append((event[3], SEARCHER_TOLD_END_EVENT, trial.trial_id, None,
                                       {"attempt": trial.attempt}))
                    elif self._searcher_log.on_result(trial.trial_id, event[4]) == Decision.STOP:
                        stops.append(trial.trial_id)
                        # As Ray marks the result its stopper or scheduler stops a trial at: ``done`` in the stored
                        # row, the trial's last result (which the searcher's on_trial_complete gets), the callbacks
                        # and the loggers' files (the results are stored next)
                        event[4]["done"] = True
                elif kind == EV_END:
                    # (not one a decision on its last result stopped, in this batch: Ray stops it there)
                    if trial.trial_id in returned and trial.trial_id not in stops and stopper_error is None:
                        try:
                            self._stopper_sees_return(trial)
                        except Exception as e:  # the run ends with it, once the batch is kept
                            stopper_error = e
                    self._tell_end(trial, error=trial.status == ERROR, stopped=event[4] == OUT_STOPPED)
            if results:
                self.store.add_results(results)
                last: dict[str, Trial] = {r[0]: self.trials[r[0]] for r in results}
                for trial in last.values():
                    if trial.status not in FINAL_STATUSES:
                        self.store.update_trial(trial.trial_id, status=trial.status, last_result=trial.last_result,
                                                last_iteration=trial.last_iteration,
                                                checkpoint_path=trial.checkpoint_path)
            if events:
                self.store.add_events(events)
            if acted:
                self._searcher_log.save()
        # Committed: the batch is acknowledged. Now act on it.
        self._warn_from_trials(warned)
        for event in failed_after_stop:
            data = event[5]
            if data.get("after_raise"):
                logger.warning(_FAILED_AFTER_RAISE_WARNING, self._shown_name(event[1]), data.get("error"))
                continue
            restarted = (restart_words(data.get("restart")),) if data.get("moved") else ()
            logger.warning(_ERROR_AFTER_STOP_WARNINGS[data.get("moved")], self._shown_name(event[1]), *restarted,
                           data.get("error"))
        if stopper_error is not None:
            raise stopper_error
        # Trials a stop ends at once (a trial this batch's end requeued: a move at its budget leaves it paused off
        # any device, a retry queued) are told to the callbacks after this batch's results
        stopped = self._stop_trials(stops) if stops else []
        # Trials whose checkpoints this batch added: retention (num_to_keep) runs once the callbacks have heard of
        # them, as Ray's checkpoint manager deletes after on_checkpoint: a callback's on_checkpoint (on_trial_result,
        # on_trial_save) reads the checkpoint it is given, and the trial's previous one, on disk (retained before the
        # callbacks, a batch of two results of a trial deleted the first's checkpoint before its on_checkpoint: h260)
        retained: dict[str, Trial] = {}
        for kind, trial, event in acted:
            if kind == EV_CHECKPOINT:
                retained[trial.trial_id] = trial
            elif kind == EV_RESULT:
                self._iterations += 1
                self._note_last_value(trial.trial_id, event[4])
                if event[4].get("checkpoint_dir_name"):
                    retained[trial.trial_id] = trial
            elif trial.status == ERROR:
                self._note_error(trial, event[6] if kind == EV_END else None)
            elif kind == EV_END and event[4] == OUT_STOPPED:  # (counted if it began, as the resume's recount)
                self._stopped.add(trial.trial_id)
        try:
            for _, what, started_id, _, info in events:  # starts of this batch first (Callback.on_trial_start)
                if what == TRIAL_START_EVENT and started_id in self.trials:
                    where = info or {}
                    for callback in self.settings.callbacks:
                        placed = getattr(callback, "on_trial_placed", None)
                        if callable(placed) and where.get("node_ip") and where.get("pid"):
                            placed(started_id, str(where["node_ip"]), int(where["pid"]))
                        callback.on_trial_start(started_id, self.trials[started_id].config, int(where["attempt"]))
            for kind, trial, event in acted:
                if kind == EV_RESULT:
                    if id(event) not in redone_at or event[4].get("done"):
                        # (a redone result that ends the trial, by the trainable's own done or the run's end, is given
                        # all the same: the trial's last result, which its Result and a logger's last row show; the stop
                        # rule judges no redone result)
                        for callback in self.settings.callbacks:
                            callback.on_trial_result(trial.trial_id, event[4])
                    elif dirname := event[4].get("checkpoint_dir_name"):
                        # (run again after the engine's own restart: the callbacks had this iteration; a checkpoint it
                        # brings is told as one saved after its result)
                        for callback in self.settings.callbacks:
                            callback.on_trial_checkpoint(trial.trial_id, event[4]["training_iteration"], dirname)
                    # (after its result's hooks, as Ray's pause; a redone result's too: a trial moved at or while paused
                    # at its budget, from an older checkpoint, pauses there again, where the callbacks saw it go on)
                    if id(event) in paused_at and trial.status == PAUSED:
                        self._tell_statuses([(trial.trial_id, PAUSED)])
                elif kind == EV_CHECKPOINT:
                    for callback in self.settings.callbacks:
                        callback.on_trial_checkpoint(trial.trial_id, event[4], event[5])
                elif trial.trial_id not in unstarted:  # (the run's end ends an unstarted trial with no hook, as Ray's)
                    self._log_end(trial, event[4], event[6])
                    self._callbacks_end(trial)
            self._tell_restatused()
            self._tell_stopped(stopped)
        finally:  # (also when a callback raised: the run ends with num_to_keep's checkpoints, as before)
            if self.settings.checkpoint_num_to_keep is not None:
                for trial in retained.values():
                    self._retain_checkpoints(trial)
        if acted and self.settings.callbacks:
            requested = [tid for callback in self.settings.callbacks for tid in callback.checkpoint_requests()]
            for tid in requested:
                if tid in self.trials and self.trials[tid].status not in FINAL_STATUSES:
                    self._checkpoint_wanted[tid] = self.trials[tid].last_iteration
            self._send_checkpoint_requests(requested)
        if decisions and self._stop_all_verdicts:
            self._check_end()  # (the stopper's stop_all() judged these results: the trials stop at them)
        for event in decisions:  # the result came in this batch or an earlier one: either way it was decided on
            self._send(device, "answer", event[4], event[1] in self._stopping, False)
        for event in verdicts:
            trial_id, iteration = event[1], event[6][0]
            wanted = self._checkpoint_wanted.get(trial_id) == iteration
            if wanted:
                del self._checkpoint_wanted[trial_id]
            self._send(device, "answer", event[4], wanted, False)

    def _failed_after_its_result(self, batch: list[tuple[Any, ...]]) -> int:
        """The index of the first errored end in ``batch`` that a result of the same attempt of its trial comes
        before (where a retry may follow the failure), or 0: :meth:`_handle` handles the events before it first."""
        if not self.settings.max_failures or len(batch) < 2:
            return 0
        reported: set[tuple[str, int]] = set()
        for index, event in enumerate(batch):
            if event[0] == EV_RESULT:
                reported.add((event[1], event[2]))
            elif event[0] == EV_END and event[4] == OUT_ERRORED and (event[1], event[2]) in reported:
                return index
        return 0

    def _ends_at(self, trial: Trial, event: tuple[Any, ...]) -> bool:
        """Whether a result ends its trial by a stop rule or a stop for good, where Ray's controller gives it to
        neither ``on_trial_result``: ``done``, and met the run's stop rule on its device (``stop``, a stopper, a
        trainable's own ``done=True``: ``Trial.should_stop``), or came after the driver stopped the trial for good
        (the run's end, a stop decided on an earlier result; not a move, which runs it on elsewhere).
        A trainable whose function returns after its last report ends with a result that is not ``done``: that
        one is the searcher's, as in Ray."""
        if not event[4].get("done"):
            return False
        return bool(event[6]) or (trial.trial_id in self._stopping and trial.trial_id not in self._restarts)

    def _tell_end(self, trial: Trial, error: bool, stopped: bool = False) -> None:
        """Tell the searcher a trial ended (with its last result), unless it was told at the result that ended it
        (:meth:`_ends_at`), or the end is one that ``fail_fast="raise"`` keeps from it (:meth:`_withholds_end`).

        Args:
            trial: The trial.
            error: It failed for good.
            stopped: It was stopped (by the run's end or a decision), not completed nor failed.
        """
        if trial.trial_id in self._told_end:
            self._told_end.discard(trial.trial_id)
            return
        if self._withholds_end(trial.trial_id, error, stopped):
            self._withheld.add(trial.trial_id)
            return
        self._searcher_log.on_trial_complete(trial.trial_id, trial.last_result, error=error,
                                             error_text=trial.error if error else None)

    def _withholds_end(self, trial_id: str, error: bool, stopped: bool) -> bool:
        """Whether the searcher is not told of a trial's end under ``fail_fast="raise"``: Ray raises the first
        failure as its event comes, before it tells its search algorithm or scheduler of it, and before any other
        trial ends, so neither hears of that failure, of a later one, or of a stop the raise's end brought (not a
        stop the searcher decided). Such a trial is left unfinished (:meth:`_leave_unfinished`; the raised one stays
        ``ERROR`` until a resume takes it up: ``fluidsalus.api.tell_raised_end``), and its end is told in the session
        that runs it on. Told, an Optuna searcher kept a cut-short trial's early value (its ``_told`` skip) and the
        failed ones' ``FAIL``, where Ray's study gets their values when the restore runs them to their ends."""
        if self.settings.fail_fast != "raise":
            return False
        # (_caught: the trials the raise's end found unfinished, and those that failed after the raised failure
        # before that end began: _fails_unseen)
        return error or (stopped and trial_id in self._caught and trial_id not in self._decided_stops)

    def _fails_unseen(self, trial_id: str, failed_in_batch: bool) -> bool:
        """Whether a trial's failure comes after ``fail_fast="raise"`` has a failure to raise: one noted already
        (the run's end begun, or to begin at its next check), or an earlier one of the same batch. Ray raises the
        first failure as its event comes, and its clean-up kills the other trials' actors: it never sees a later
        failure, and the trial is unfinished in its saved state. (Not when another end came first, a time budget's:
        the run then raises nothing, and its trials' failures are theirs.)"""
        if self.settings.fail_fast != "raise" or trial_id == self._first_error_trial:
            return False
        if self._ending is not None and not self._raises():
            return False
        return self._first_error is not None or failed_in_batch

    def _cut_short(self, trial: Trial, event: tuple[Any, ...]) -> bool:
        """Whether a result is one of a trial that ``fail_fast="raise"``'s end is stopping (not by its stop rule, nor
        a stop the searcher decided): the trial is left unfinished, so the result it is stopped at is not its last
        (``done``), and the searcher is given it as any result, not told the trial's end there (:meth:`_ends_at`)."""
        return (self._raises() and not event[6] and trial.trial_id in self._caught
                and trial.trial_id not in self._decided_stops)

    def _stopper_stops(self, trial: Trial, metrics: Mapping[str, Any]) -> bool:
        """Give the driver's copy of the run's stopper a result (it sees every one, in order, but those a move,
        preemption or turn runs again, which it saw once: its state serves ``stop_all()`` and the copy a restarted
        trial takes, ``_stop_state``), and say whether its answer stops the trial at that result, where the device's
        copy did not.

        It does for a stopper whose results wait for the driver (``_stop_all_verdicts``): the wait costs nothing
        more, and state the driver's copy gathered since the start (a callback's "stop now") then counts, as in
        Ray's one copy (the devices' copies never see it). Not for a trial that has ended, nor a result that
        already ends its trial (``done``: the device's copy, the trainable or an earlier stop ended it there).
        It is asked before the searcher, with the result as the trial reported it, as Ray asks its stopper before
        the scheduler.

        Raises:
            Exception: What the stopper raised.
        """
        if self.settings.stopper is None:
            return False
        says_stop = self.settings.stopper(trial.trial_id, {"config": trial.config, **metrics})
        return (bool(says_stop) and self._stop_all_verdicts and not metrics.get("done")
                and trial.status not in FINAL_STATUSES)

    def _stopper_sees_return(self, trial: Trial) -> None:
        """Give the driver's copy of the run's stopper the last result once more, ``done``, for a trial whose
        function returned after it, as Ray's controller does: the trainable's end reaches it as a duplicate of the
        last result, which it hands to the stopper (``stopper(trial_id, result)``) before the trial completes. So a
        stopper that counts results, or an ``ExperimentPlateauStopper`` (whose top values get that value twice),
        judges ``stop_all()`` on what Ray's sees. The caller gives it only trials whose function returned after a
        result that did not end them (a stop rule, its own ``done``, a scheduler's or searcher's stop: Ray stops the
        trial there, with no duplicate); not a trial that reported nothing.

        Raises:
            Exception: What the stopper raised.
        """
        if self.settings.stopper is None or trial.last_result is None or trial.trial_id in self._told_end:
            return
        self.settings.stopper(trial.trial_id, {"config": trial.config, **trial.last_result, "done": True})

    def _lane_event(self, device: _Device, event: tuple[Any, ...]) -> None:
        """Follow a device's lanes (its mirror for the planner), the trials' memory estimates and the end of
        data-parallel workers."""
        trial_id, attempt, what, data = event[1], event[2], event[4], event[5]
        if what in ("lane_open", "lane_close"):
            device.lanes += 1 if what == "lane_open" else -1
        device.mirror.apply(what, trial_id, data)
        trial = self.trials.get(trial_id) if trial_id is not None else None
        if trial is None:
            return
        if what == "lane_wait" and attempt == trial.attempt and trial.placed_on:
            self._admission_wait.add(trial_id)
            self._dirty = True  # it may be what stalls the run (_stalled)
        elif what == "lane_admit":
            self._admission_wait.discard(trial_id)
        estimate = estimate_of(what, data)
        if estimate is not None and estimate != (trial.p_bytes, trial.t_bytes):
            trial.p_bytes, trial.t_bytes = estimate
            if self.pending:  # memory decides where queued trials fit
                self._dirty = True
        if what == "oom_readmit" and attempt == trial.attempt:  # it starts again in this attempt, from there
            self._readmitted_from[trial_id] = int(data.get("from_iteration") or 0)
        if what == "worker_end" and device.spec.index in trial.placed_on[1:] and attempt == trial.attempt:
            device.assigned.discard(trial_id)
        elif what in ("worker_end", "lane_leave", "lane_fail") and trial_id in device.lingering:
            del device.lingering[trial_id]  # the worker of an ended attempt is gone
            self._dirty = True

    def _observe(self, device: _Device, trial: Trial, ts: float, metrics: Mapping[str, Any]) -> None:
        """Feed one iteration's time to the planner, with the allocation it ran at; re-plan on news.

        ``colocated`` is the number of trials computing on the home device, at most its slots (more time-slice
        its lanes, which the iteration time already shows). An iteration during which that number changed
        measures no single allocation and is left out, unless it is the trial's first; so is one shorter than
        :data:`MIN_PROFILED_ITERATION_S`."""
        seconds = metrics.get("time_this_iter_s")
        if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < MIN_PROFILED_ITERATION_S:
            return
        trial_id = trial.trial_id
        if trial_id in self._measured and device.changed_at > ts - seconds:
            return
        home = (device.spec.index,)
        computing = sum(1 for tid in device.assigned
                        if self.trials[tid].status == RUNNING and self.trials[tid].placed_on[:1] == home)
        allocation = (max(1, len(trial.placed_on)), max(1, min(device.spec.slots, computing)))
        self.planner.observe(trial_id, float(seconds), devices=allocation[0], colocated=allocation[1],
                             curve_key=device.curve_key)
        self.pending.refresh(trial)  # (a queued trial is seldom measured: a late result of a restarting one)
        self._measured.add(trial_id)
        if self._allocation.get(trial_id) != allocation:
            # A new allocation: the book may have pooled a co-location step. Re-plan if a device of this class
            # now takes a different number of trials.
            self._allocation[trial_id] = allocation
            if self._gates(device) != self._planned_gates.get(device.curve_key):
                self._dirty = True
        if sum(1 for d in self._devices if d.alive) > 1:
            # Where a trial goes, and whether a move pays, depend on the trials' predicted times; with one device
            # they only order the queue, where unmeasured trials all count alike.
            alone = self.planner.book.alone(trial_id)
            before = self._planned_alone.get(trial_id)
            if before is None or abs(alone - before) > REPLAN_PROFILE_CHANGE * before:
                self._planned_alone[trial_id] = alone
                self._dirty = True

    def _restore_move_cost(self) -> None:
        """Take the last stored ``move_cost`` estimate (a resumed run); a malformed one is ignored."""
        measured = self.store.events("move_cost")
        if not measured:
            return
        data = measured[-1].data or {}
        try:
            self._move_costs.restore(data.get("move_cost_s"), data.get("samples", 0),  # type: ignore[arg-type]
                                     data.get("resize_cost_s"), data.get("resize_samples", 0))
        except ValueError as e:
            logger.warning("ignoring the stored move cost %r: %s", data, e)
            return
        self._follow_move_costs()

    def _restore_searcher_seen(self) -> None:
        """A resumed run: the stored searcher state commits with the results it was given, so it has seen every
        stored result of each trial's current configuration (from its last exploit, if any). The iterations run
        again after the resume are not given to it twice."""
        lineage = lineage_starts(self.store)
        # told at the result that ended them, before a crash kept their end from the store: not told again
        unfinished = {row.trial_id for row in self.store.trials() if row.status not in FINAL_STATUSES}
        self._told_end.update(event.trial_id for event in self.store.events(SEARCHER_TOLD_END_EVENT)
                              if event.trial_id in unfinished)
        seen = self._searcher_seen
        for row in self.store.results(latest_attempt_only=False):
            if row.attempt >= lineage.get(row.trial_id, 0) and row.iteration > seen.get(row.trial_id, 0):
                seen[row.trial_id] = row.iteration

    def _follow_move_costs(self) -> None:
        """Give the planner the current move and resize estimates (a new settings object only on a change)."""
        meter, settings = self._move_costs, self.planner.settings
        if (meter.cost_s, meter.resize_cost_s) != (settings.move_cost_s, settings.resize_cost_s):
            self.planner.settings = dataclasses.replace(settings, move_cost_s=meter.cost_s,
                                                        resize_cost_s=meter.resize_cost_s)

    def _measure_costs(self, trial: Trial, received: float, metrics: Mapping[str, Any],
                       events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]],
                       device_name: str) -> None:
        """What this result tells of a start's or a move's cost (``movecost.py``). The planner's move cost follows
        the estimate; a measured move is also stored, as a ``move_cost`` event."""
        trial_id = trial.trial_id
        since, seconds = metrics.get("iterations_since_restore"), metrics.get("time_this_iter_s")
        if since == 1:
            self._first_iter_s[trial_id] = seconds
        elif since == 2 and trial_id in self._first_iter_s:
            self._move_costs.start(self._first_iter_s.pop(trial_id), seconds)
        meter = self._move_costs
        resize = meter.waiting(trial_id)
        sample = meter.result(trial_id, received, metrics.get("training_iteration"), since, seconds)
        self._follow_move_costs()
        if sample is not None:
            resize_cost = meter.resize_cost_s
            events.append((received, "move_cost", trial_id, device_name, {
                "attempt": trial.attempt, "kind": "resize" if resize else "move", "seconds": round(sample, 6),
                "move_cost_s": round(meter.cost_s, 6), "samples": meter.samples,
                "resize_cost_s": None if resize_cost is None else round(resize_cost, 6),
                "resize_samples": meter.resize_samples}))

    def _redone(self, trial_id: str, metrics: Mapping[str, Any]) -> bool:
        """Whether a result is of an iteration the trial runs again after the engine's own restart, which its
        callbacks were given already (``_redo_unseen``; the first result past it ends the watch). Whether it still
        reaches them is the caller's rule: one that ends the trial does."""
        seen = self._redo_unseen.get(trial_id)
        if seen is None:
            return False
        if metrics["training_iteration"] <= seen:
            return True
        del self._redo_unseen[trial_id]
        return False

    def _forget(self, trial_id: str) -> None:
        """An ended trial's measurements go (the pooled curves keep what it taught them)."""
        self._move_costs.drop(trial_id)
        self._redo_unseen.pop(trial_id, None)
        self._first_iter_s.pop(trial_id, None)
        self._decided_stops.discard(trial_id)
        self.planner.forget(trial_id)
        self._measured.discard(trial_id)
        self._planned_alone.pop(trial_id, None)
        self._allocation.pop(trial_id, None)
        self._awaiting_checkpoint.discard(trial_id)
        if trial_id in self._suspects:
            self._suspects.discard(trial_id)
            self._dirty = True
        self._checkpoint_wanted.pop(trial_id, None)
        self._asks_verdicts.discard(trial_id)
        self._demands.pop(trial_id, None)

    def _gates(self, device: _Device) -> tuple[bool, ...]:
        """Whether a device of this class gains from one more computing trial, for 1 .. slots - 1 of them."""
        book, settings = self.planner.book, self.planner.settings
        return tuple(book.colocation_pays(device.curve_key, n, settings.min_marginal_gain, settings.prior_share)
                     for n in range(1, device.spec.slots))

    def _unplace(self, trial: Trial, ts: float) -> None:
        """The trial's current attempt ended (rank 0's end): it leaves every device it ran on.

        A data-parallel worker still winding down on another device is remembered there (``lingering``), so no
        new rank of the same trial is sent there before it is gone, and is told to stop: a worker that joined
        rank 0 stops with it anyway, but one still waiting for rank 0's rendezvous would wait out its timeout."""
        for position, index in enumerate(trial.placed_on):
            device = self._device(index)
            if trial.trial_id in device.assigned:
                device.assigned.discard(trial.trial_id)
                if position > 0:
                    device.lingering[trial.trial_id] = time.time()
                    self._send(device, "stop", [trial.trial_id], {trial.trial_id: trial.attempt})
            device.changed_at = ts
        trial.placed_on = ()
        self._admission_wait.discard(trial.trial_id)

    def _requeue(self, trial: Trial, restart: _Restart, ts: float, device_name: str | None, trace: str | None,
                 events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]]) -> None:
        """Start ``trial`` again on a new attempt (inside the batch's transaction).

        It resumes from ``restart.checkpoint`` (another trial's, for an exploit) or its own last checkpoint,
        or from scratch when there is none; results it redoes are stored again under the new attempt. It keeps
        the devices the planner gave it (a move's destination, its device for a retry or an exploit), so the next
        plan keeps it there; a preempted trial goes back to the queue, and so does a retry or an exploit whose
        device's slots other trials now fill (:func:`.dispatch.restarts_in_place`), and any trial whose devices
        are not all up (a dead device's, while its replacement starts): the planner places it afresh.
        A moved or preempted trial, or one whose device died, with nothing to run before its budget waits, paused off
        any device, for its searcher to promote it (it then restarts) or stop it: one whose checkpoint already reached
        its budget, and one without a checkpoint that had reached its budget (preempted while paused there because the
        run stalled: :func:`~fluidsalus.trialgroup.dispatch.is_stalled`; it restarts from scratch if promoted).
        """
        left = remaining_budget(trial, self.searcher.time_attr)
        reached = left is not None and left <= 0  # in the attempt that ends, before a restart sets it back
        previous_config = trial.config
        before = trial.status
        if restart.reason in (RESTART_MOVE, RESTART_PREEMPT, RESTART_TURN, RESTART_WITHDRAWN, RESTART_DEVICE_DIED):
            if trial.last_iteration:
                self._redo_unseen[trial.trial_id] = max(trial.last_iteration,
                                                        self._redo_unseen.get(trial.trial_id, 0))
        else:
            self._redo_unseen.pop(trial.trial_id, None)
        if restart.config is not None:
            trial.config = dict(restart.config)
            # a new configuration: its results are all new, and its end is yet to be told
            self._searcher_seen.pop(trial.trial_id, None)
            self._told_end.discard(trial.trial_id)
            self._set_extras(trial)
        if restart.copied_metrics is not None:  # the exploit happens: its copy becomes the trial's checkpoint
            # of that iteration, in place of the trial's own (whose folder stays on disk, unlisted, as Ray keeps
            # an exploited trial's old checkpoints; with num_to_keep, retention removes it: _retain_checkpoints)
            replaced = [c["path"] for c in self.store.checkpoints(trial.trial_id)
                        if c["iteration"] == restart.iteration]
            if replaced:
                self.store.mark_checkpoints_deleted(replaced)
                self._note_unlisted(trial.trial_id, [(p, restart.iteration) for p in replaced])
            self.store.add_checkpoint(trial.trial_id, restart.iteration, restart.checkpoint_path,  # type: ignore[arg-type]
                                      restart.copied_metrics)
            # ...and its result the trial's last, as Ray's restore makes the checkpoint's result the trial's last
            # (Trial.on_restore): an attempt that ends before it reports (an exploit at the trial's last iteration)
            # kept the trial's own last result beside the new config and the copied checkpoint, and was ranked by a
            # score that neither gave; one that reports replaces it
            trial.last_result = {**restart.copied_metrics, "trial_id": trial.trial_id}
            if self.settings.checkpoint_num_to_keep is not None:  # (the attempt may end before it saves again)
                self._retain_checkpoints(trial)
        if restart.checkpoint_path is not None:
            trial.checkpoint_path = restart.checkpoint_path
            trial.last_iteration, trial.time_total_s = restart.iteration, restart.time_total_s
            trial.checkpoint_totals = dict(restart.totals)
        else:
            self._rewind(trial)
        self._abandoned[trial.trial_id] = trial.last_iteration  # its later checkpoints go when the attempt starts
        trial.attempt += 1
        trial.placed_on = ()
        if restart.reason in (RESTART_PREEMPT, RESTART_WITHDRAWN, RESTART_TURN) or restart.queue:
            trial.devices = ()
        elif trial.devices and not all(self._device(i).alive for i in trial.devices):
            # A device that is not up (one that died, whose replacement starts: _device_died) is kept by nobody,
            # whatever the restart: the planner places the trial afresh. Its dead device's trials were requeued
            # one at a time, in id order, each retry judged by a load that still counted the trials not yet
            # requeued, so which of them kept the device depended on their ids; and a held suspect kept it past the
            # plans that drop such devices (_planned), then started on the replacement past its slots.
            trial.devices = ()
        elif restart.reason in (RESTART_RETRY, RESTART_EXPLOIT) and trial.devices and not restarts_in_place(
                self._computing_on(home := self._device(trial.devices[0])), home.spec.slots):
            trial.devices = ()  # a trial prefetched there took its slot: it waits in the queue (a lane shared)
        remaining = remaining_budget(trial, self.searcher.time_attr)
        self._dirty = True
        if restart.reason in (RESTART_MOVE, RESTART_PREEMPT, RESTART_DEVICE_DIED) and (
                (trial.checkpoint_path is not None and remaining is not None and remaining <= 0)
                or (trial.checkpoint_path is None and reached)):
            trial.status, trial.devices = PAUSED, ()
        else:
            trial.status = PENDING
            self.pending.add(trial)
        if trial.status != before and PAUSED in (before, trial.status):
            self._restatused.append((trial.trial_id, trial.status))
        self.store.update_trial(trial.trial_id, status=trial.status, attempt=trial.attempt,
                                num_failures=trial.num_failures, checkpoint_path=trial.checkpoint_path,
                                error=restart.error)
        if restart.config is not None:
            self.store.update_trial_config(trial.trial_id, trial.config)
        data: dict[str, Any] = {"attempt": trial.attempt, "reason": restart.reason,
                                "from_iteration": trial.last_iteration, "error": restart.error, "traceback": trace}
        if restart.reason == RESTART_MOVE:
            data["to"] = [self._name(i) for i in trial.devices]
        if restart.config is not None:  # which configuration each result came from (Result.metrics_dataframe)
            data["config"], data["previous_config"] = trial.config, previous_config
        events.append((ts, TRIAL_RESTART_EVENT, trial.trial_id, device_name, data))

    def _rewind(self, trial: Trial) -> None:
        """Set a trial about to restart back to its checkpoint (or scratch): the iteration, ``time_total_s`` and
        Ray's running totals its next attempt continues from. (``time_total_s`` stayed at its last result's, so
        each restart from an earlier checkpoint moved it on: budgets in ``time_total_s`` came early.)"""
        self._fall_back_if_gone(trial)
        if trial.checkpoint_path is None:
            trial.last_iteration, trial.time_total_s = 0, 0.0
            return
        row = next((c for c in reversed(self.store.checkpoints(trial.trial_id))
                    if os.path.abspath(c["path"]) == os.path.abspath(trial.checkpoint_path)), None)
        if row is not None:
            resume_from(trial, row)
        else:  # (not stored: a checkpoint of a run before rows named their metrics)
            trial.last_iteration = checkpoint_iteration(trial.checkpoint_path)

    def _fall_back_if_gone(self, trial: Trial) -> None:
        """A trial about to restart from its checkpoint whose folder is gone (deleted by hand, or with the
        experiment's folder) restarts from its newest checkpoint still on disk, as a resumed run does
        (``api._load_trials``), or from scratch. It used to be given the missing folder, and failed on it."""
        gone = trial.checkpoint_path
        if gone is None or os.path.isdir(gone):
            return
        left = [c for c in self.store.checkpoints(trial.trial_id) if os.path.isdir(c["path"])]
        resume_from(trial, left[-1] if left else None)
        logger.warning("the checkpoint %s of trial %s is gone; it restarts from %s", gone, trial.trial_id,
                       trial.checkpoint_path or "scratch")
        self.store.add_events([(time.time(), "checkpoint_missing", trial.trial_id, None,
                                {"path": gone, "instead": trial.checkpoint_path})])

    def _drop_checkpoints_after(self, trial: Trial, iteration: int) -> None:
        """Let go of the trial's checkpoints of iterations after ``iteration``, where its new attempt resumed, once
        that attempt has started (inside the batch's transaction, before any of its checkpoints is handled).

        They belong to the line of work the restart abandoned (an exploit rewinds the trial to another trial's
        checkpoint, possibly an earlier iteration). Checkpoint folders are named by iteration, so the new attempt
        writes the same names again: kept, the old rows would name the new folders with the old metrics, and
        retention could delete a new folder for an old row's score, or while the trial writes it. Their rows are
        marked deleted; the folders are left as they are (the new attempt may be writing one of those names): the
        ones it reaches it replaces, the others stay on disk unlisted, as Ray keeps an exploited trial's old
        checkpoints, unless ``num_to_keep`` is set: then retention removes those the attempt has gone past
        (:meth:`_retain_checkpoints`). Until the attempt starts, nothing changes: a run that ends first keeps the
        old line whole (less what ``num_to_keep``'s retention removed when the exploit's copy was listed).
        """
        doomed = [c for c in self.store.checkpoints(trial.trial_id) if c["iteration"] > iteration]
        if doomed:
            self.store.mark_checkpoints_deleted([c["path"] for c in doomed])
            self._note_unlisted(trial.trial_id, [(c["path"], c["iteration"]) for c in doomed])

    def _note_unlisted(self, trial_id: str, folders: list[tuple[str, int]]) -> None:
        """Keep the ``(path, iteration)`` of checkpoints no longer listed, for retention to remove (num_to_keep)."""
        if self.settings.checkpoint_num_to_keep is not None:
            self._unlisted.setdefault(trial_id, []).extend(folders)

    def _answer_call(self, device: _Device, event: tuple[Any, ...]) -> None:
        trial_id, call_id, method, args, label = event[1], event[4], event[5], event[6], event[7]
        handler = self.settings.call_handler
        offload = self.settings.call_offload
        if handler is not None and offload is not None and self._call_threads() > 1:
            try:
                work = offload(trial_id, str(method), tuple(args))
            except Exception as e:  # noqa: BLE001 - raised in the calling trial, as the handler's own errors
                self._send(device, "answer", call_id, e, True)
                return
            if work is not None:
                try:
                    self._start_call(device, call_id, work)
                except BaseException:  # (not handed to a thread: a Ctrl-C here, no thread to start)
                    cancel = getattr(work, "cancel", None)
                    if callable(cancel):
                        cancel()
                    raise
                return
        began = time.time()
        try:
            if handler is None:
                raise FluidsalusError(f"trial {trial_id} called the driver ({method!r}); the run has no call handler")
            value, is_error = handler(trial_id, method, tuple(args)), False
        except Exception as e:  # noqa: BLE001 - the error is raised in the calling trial, where it belongs
            value, is_error = e, True
        took = time.time() - began
        if took >= DRIVER_BUSY_MIN_S:  # (an Optuna sampler's suggest: no trial is placed meanwhile)
            self._note_busy(began, took, str(label))  # (named as the caller's wait: goodput's idle by method)
        self._send(device, "answer", call_id, value, is_error)

    def _call_threads(self) -> int:
        """How many call threads the run may use (one per device, up to ``settings.call_threads``)."""
        return min(self.settings.call_threads, len(self._devices))

    def _start_call(self, device: _Device, call_id: Any, work: Callable[[], Any]) -> None:
        """Answer a call on a call thread: ``work()``'s value (or exception) goes back to the loop
        (:attr:`_answers`), which sends it (:meth:`_send_answers`). No ``driver_busy`` event: the loop is not held up
        meanwhile (the calling trial's wait is its own ``driver_wait``)."""
        if self._call_pool is None:
            self._call_pool = ThreadPoolExecutor(max_workers=self._call_threads(), thread_name_prefix="fluidsalus-call")
        actor = device.actor

        def answer() -> None:
            try:
                value, is_error = work(), False
            except BaseException as e:  # noqa: BLE001 - raised in the calling trial, as the handler's own errors
                value, is_error = e, True
            self._answers.put((device, actor, call_id, value, is_error))

        self._call_pool.submit(answer)
        self._calls_out += 1

    def _send_answers(self) -> None:
        """Send the answers made on call threads since the last look. One to a device's actor that has died since
        is dropped (a replacement numbers its calls anew; the trial's new attempt asks again)."""
        while True:
            try:
                device, actor, call_id, value, is_error = self._answers.get_nowait()
            except queue.Empty:
                return
            self._calls_out -= 1
            if device.actor is actor:
                self._send(device, "answer", call_id, value, is_error)

    def _wait_for_devices(self, refs: list[Any], timeout: float | None) -> list[Any]:
        """``ray.wait`` for the first of ``refs`` (``timeout``: None waits for ever); while calls are out on call
        threads, in slices of :data:`CALL_ANSWER_CHECK_S`, sending each answer between them (every live device
        has a poll out here: the answer goes to its actor at once)."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._calls_out:
            left = CALL_ANSWER_CHECK_S if end is None else min(CALL_ANSWER_CHECK_S, max(0.0, end - time.monotonic()))
            ready, _ = ray.wait(refs, num_returns=1, timeout=left)
            self._send_answers()
            if ready or (end is not None and time.monotonic() >= end):
                return ready
        ready, _ = ray.wait(refs, num_returns=1, timeout=None if end is None else max(0.0, end - time.monotonic()))
        return ready

    def _end_calls(self) -> None:
        """At the run's end (a normal one has none out), wait for the calls still answered on call threads, so
        that no thread is left working on the front end's state after the run (a sampler call takes a second at
        most): their answers are moot (the devices stop, answering their waiting trials themselves)."""
        pool, self._call_pool = self._call_pool, None
        if pool is None:
            return
        pool.shutdown(wait=True)
        while True:
            try:
                self._answers.get_nowait()
            except queue.Empty:
                break
        self._calls_out = 0

    def _note_busy(self, began: float, took: float, what: str, trials: int | None = None) -> None:
        """Store a :data:`DRIVER_BUSY_EVENT`: the loop did ``what`` for ``took`` seconds from ``began`` (an ask of
        the searcher that gave ``trials`` new trials, or a call), if it held a placement back (:meth:`_could_place`:
        a trial it gave, or a queued one, with a free place under the concurrency limit). A spell with nothing to
        place is not stored: a searcher that answers "not now" at every pass of the loop (a Tune ``Searcher``'s
        ``None``), the end of an ASHA sweep whose last trials run, a run at its ``max_concurrent_trials``."""
        if not self._could_place(bool(trials)):
            return
        data: dict[str, Any] = {"wait_s": took, "what": what, "more": True}
        if trials is not None:
            data["trials"] = trials
        self.store.add_events([(began, DRIVER_BUSY_EVENT, None, None, data)])

    def _could_place(self, given: bool = False) -> bool:
        """Whether a trial could have been placed: the searcher ``given`` new trials, or trials are queued, and
        fewer trials compute than ``max_concurrent_trials`` (:meth:`_computing_load`). Whether the search
        is over (``searcher.is_finished()``) is not it: ASHA's, PBT's and HyperBand's stay unfinished while their
        last trials run, with nothing left to place."""
        if not given and not self.pending:
            return False
        limit = self.settings.max_concurrent_trials
        if limit is None:
            return True
        return sum(self._computing_load().values()) < limit

    def _computing_load(self) -> dict[int, int]:
        """Per device index, the trials computing there (:meth:`_computing_on`), for the devices with any."""
        load: dict[int, int] = {}
        for device in self._devices:
            n = self._computing_on(device)
            if n:
                load[device.spec.index] = n
        return load

    def _computing_on(self, device: _Device) -> int:
        """The trials computing on ``device``: assigned, not paused, with it as their first device."""
        index = device.spec.index
        return sum(1 for trial_id in device.assigned
                   if (trial := self.trials[trial_id]).status != PAUSED and trial.placed_on
                   and trial.placed_on[0] == index)

    def _retain_checkpoints(self, trial: Trial) -> None:
        """Keep the trial's ``num_to_keep`` best checkpoints (by score, else the newest) and always its latest."""
        keep = self.settings.checkpoint_num_to_keep or 0
        checkpoints = self.store.checkpoints(trial.trial_id)
        if not checkpoints:
            return
        latest = checkpoints[-1]
        live = {c["path"] for c in checkpoints}
        if len(checkpoints) > keep:
            ranked = rank_checkpoints([c["metrics"] for c in checkpoints], self.settings.checkpoint_score_attribute,
                                      self.settings.checkpoint_score_order)
            live = {checkpoints[i]["path"] for i in ranked[-keep:]} | {latest["path"]} if keep else {latest["path"]}
            doomed = [c for c in checkpoints if c["path"] not in live]
            self.store.mark_checkpoints_deleted([c["path"] for c in doomed])
            for c in doomed:  # (once the rows that stop listing them are committed: a Ctrl-C rolls both back)
                self.store.after_commit(functools.partial(remove_folder, c["path"]))
        # The folders of a line a restart abandoned (an exploit: _drop_checkpoints_after), which the new attempt
        # went past without writing again: listed nowhere, they stayed on disk whatever num_to_keep said (Ray's
        # checkpoint manager keeps num_to_keep). A later one may be the name the attempt writes next: kept.
        unlisted = self._unlisted.pop(trial.trial_id, [])
        if unlisted:
            ahead = [(path, iteration) for path, iteration in unlisted if iteration > latest["iteration"]]
            for path, iteration in unlisted:
                if iteration <= latest["iteration"] and path not in live:
                    self.store.after_commit(functools.partial(remove_folder, path))
            if ahead:
                self._unlisted[trial.trial_id] = ahead

    def _check_metric(self, trial_id: str, result: Mapping[str, Any]) -> None:
        """The run's metric is in every result (or nested: ``"val/acc"``), as a number (NaN and None pass; a
        searcher cannot rank a string, which failed inside it with an error naming neither trial nor metric).

        Raises:
            ConfigError: It is missing, or not a number (an int too large for a float too); the trial named as the
                run's lines name it (:meth:`_shown_name`).
        """
        metric = self.settings.metric
        if metric is None:
            return
        value = result[metric] if metric in result else lookup_metric(result, metric)
        if value is None and metric not in result:
            if self._lenient_metric:
                return
            added = self.trials[trial_id].extras or {}  # (result_extras' keys, the Tune front end's experiment_tag:
            # not the trainable's, told apart)
            reported = sorted(k for k in result if k not in AUTO_RESULT_KEYS and k not in added)
            returned = (f" (a trainable that returns or yields a number reports it as {DEFAULT_METRIC!r}, as in Ray "
                        "Tune: report a dict to name it)" if reported == [DEFAULT_METRIC] else "")
            if added:
                returned += f", and the run added {sorted(added)} to its results"
            raise ConfigError(
                f"metric={metric!r} is not in the results: trial {self._shown_name(trial_id)} reported "
                f"{reported}{returned}. "
                f"Pass the name of a metric the trainable reports (or set {LENIENT_METRIC_ENV}=1, as in Ray Tune, "
                "when it reports it only in some results)."
            )
        if value is None or (not isinstance(value, (str, bytes)) and _floats(value)):
            return
        if isinstance(value, numbers.Integral):  # (float() raised OverflowError; "must be a number" said of an int)
            raise ConfigError(f"metric={metric!r} must be a number a float holds (searchers and best-trial choices "
                              f"compute with floats, as Ray Tune's): trial {self._shown_name(trial_id)} reported an "
                              f"int of {_digits(int(value))} digits, above a float's largest "
                              f"({sys.float_info.max:g})")
        raise ConfigError(f"metric={metric!r} must be a number: trial {self._shown_name(trial_id)} reported "
                          f"{value!r} ({type(value).__name__})")

    def _device_died(self, device: _Device, error: Exception) -> None:
        """A device actor died: its trials resume from their last checkpoints, on a replacement actor.

        Every acknowledged result is already in the store; iterations after a trial's last checkpoint are run
        again (and stored under the new attempt). The replacement stands for the same device and takes the
        resources the dead actor gave back; while it starts, the driver goes on serving the other devices, and
        the trials go to them or wait in the queue, as for a device the run began without (:meth:`_join`). If it
        cannot start, the device is gone and the planner places them on the others (the run fails when no device
        is left or starting, or when none is up and those starting take longer than :data:`ACTOR_START_TIMEOUT_S`:
        :meth:`_loop`). A trial that was being stopped for good ends, and a data-parallel
        trial that lost a worker's device is stopped and restarts the same way.
        """
        device.alive = False
        device.poll_ref = None
        device.lanes = 0  # (the progress view showed a dead device's last open lanes for the rest of the run)
        device.outbox.clear()
        self._dirty = True
        now = time.time()
        text = _plain(error)
        # Its node left the cluster (removed, preempted, crashed): no trial ended the process, so none is charged
        # with the death or held back as a suspect (each computing trial on a device of several slots was, and
        # then restarted one at a time on the node that took its place).
        node_died = self._node_gone(device)
        if node_died:
            text = f"{text.rstrip()}\nIts node {device.spec.node_id} left the cluster."
        events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]] = [
            (now, "device_died", None, device.spec.name, {"error": text, **({"node_died": True} if node_died
                                                                           else {})})]
        ended: list[Trial] = []
        lost_worker: list[str] = []
        lost_stopping: list[str] = []  # (being stopped already: its rank 0 only learns that it waits for no worker)
        died_after_stop: list[Trial] = []  # met its stop rule, then its process died: it ends TERMINATED there
        # (began, not paused, when the driver last heard of them; its home here: charge_death shares the blame)
        computing = {tid for tid in device.assigned if self.trials[tid].status == RUNNING
                     and self.trials[tid].placed_on[:1] == (device.spec.index,)} if not node_died else set()
        with self.store.transaction():
            for trial_id in sorted(device.assigned):
                trial = self.trials[trial_id]
                if trial.placed_on and trial.placed_on[0] != device.spec.index:  # a worker's device died
                    if trial_id not in self._stopping:
                        self._restarts[trial_id] = _Restart(reason=RESTART_DEVICE_DIED, error=text)
                        lost_worker.append(trial_id)
                    else:
                        lost_stopping.append(trial_id)
                    continue
                stopping = trial_id in self._stopping
                self._stopping.discard(trial_id)
                restart = self._restarts.pop(trial_id, None)
                # It met its stop rule (its searcher was told its end at that result, which the driver has: the
                # device waits for that before its trainable goes on): it ends there, TERMINATED, as a Ray Tune trial
                # whose process dies after its stop; restarted, it ran a finished trial again, unseen by its searcher
                finished = trial.finished_by_rule or trial_id in self._told_end
                if finished:
                    restart = None
                if restart is not None and restart.reason in (RESTART_MOVE, RESTART_PREEMPT, RESTART_WITHDRAWN,
                                                              RESTART_TURN):
                    # The death ended the attempt before the planner's stop did (and may have taken a failure
                    # the trial raised meanwhile): it restarts as every trial of the device does, from its last
                    # checkpoint, where the next plan puts it. An exploit or a retry keeps its own restart.
                    restart = _Restart(reason=RESTART_DEVICE_DIED, error=text)
                self._unplace(trial, now)  # its workers elsewhere are told to stop: rank 0 is gone
                ends = stopping or finished  # (it ends here: no suspect, charged with nothing)
                if restart is None and not ends and trial_id in computing and len(computing) > 1:
                    self._suspects.add(trial_id)  # (cleared past its death point: _handle; or at its end: _forget)
                if restart is None and not ends and trial_id in computing and charge_death(trial, len(computing)):
                    if self._may_retry(trial):
                        trial.num_failures += 1
                        restart = _Restart(reason=RESTART_RETRY, error=self._death_error(trial, text))
                        append_error_file(trial.trial_dir, self._shown_name(trial_id), trial.num_failures, now,
                                          restart.error, None)
                    else:
                        self._end_by_deaths(trial, self._death_error(trial, text), now, device.spec.name, events)
                        ended.append(trial)
                        continue
                if ends and restart is None:  # it was being stopped for good, or met its stop rule: it ends now
                    if finished:
                        died_after_stop.append(trial)  # (warned of after the commit)
                    trial.status, trial.devices = TERMINATED, ()
                    self._forget(trial_id)
                    self.store.update_trial(trial_id, status=TERMINATED, finished_at=now, stop_reason=OUT_STOPPED,
                                            last_iteration=trial.last_iteration, checkpoint_path=trial.checkpoint_path)
                    events.append((now, "trial_end", trial_id, device.spec.name,
                                   {"attempt": trial.attempt, "outcome": OUT_STOPPED}))
                    self._tell_end(trial, error=False, stopped=True)
                    ended.append(trial)
                    continue
                self._requeue(trial, restart or _Restart(reason=RESTART_DEVICE_DIED, error=text), now,
                              device.spec.name, None, events)
            self.store.add_events(events)
            if ended:
                self._searcher_log.save()
        device.assigned.clear()
        device.lingering.clear()
        for trial in died_after_stop:
            logger.warning("trial %s: its device %s died after the result its stop rule ended it at (iteration %s); it "
                           "ends TERMINATED there: %s", trial.trial_id, device.spec.name, trial.last_iteration,
                           text.splitlines()[0] if text else "")
        self._send_stop(lost_worker, no_verdict=True, peers_lost=True)
        self._send_stop(lost_stopping, peers_lost=True)
        for trial in ended:
            if trial.status == ERROR:
                self._note_error(trial)
                self._log_end(trial, OUT_ERRORED)
            else:
                self._stopped.add(trial.trial_id)
                self._log_end(trial, OUT_STOPPED)
            self._callbacks_end(trial)
        self._start_replacement(device)

    def _start_replacement(self, device: _Device) -> None:
        """Start a new actor for a device whose actor died (or was lost with its node: :meth:`_watch_nodes`).

        The driver goes on serving the other devices while it starts; it joins as a device the run began without
        does (:meth:`_join`), and the device's trials wait in the queue or go to the others meanwhile.
        """
        # Named by its number: two deaths within a second once gave a replacement the name of the last one, which
        # Ray had not yet released, and the device was lost.
        device.replacements += 1
        name = f"{self._actor_name(device.spec)}:{device.replacements}"
        try:
            actor = start_device_actor(device.spec, self.payload, self._host_settings(device.spec), name)
        except ray.exceptions.RayError as e:  # (its node went again, say)
            self.store.add_events([(time.time(), "device_lost", None, device.spec.name, {"error": _plain(e)})])
            logger.warning("device %s is lost: its actor died and no replacement can start (%s); the run goes on "
                           "with the other devices", device.spec.name, _plain(e).splitlines()[0])
            self._lost[device.spec.name] = device
            return
        device.actor, device.actor_name, device.start_ref = actor, name, actor.info.remote()
        device.launched = time.time()

    def _watch_nodes(self) -> None:
        """Use the nodes that joined the cluster since the run began, at most every :data:`NODE_CHECK_S`, as Ray
        Tune places trials on them: first the devices the run lost with their node start again there
        (:func:`fluidsalus.gpu.device.replacements_for_lost`: a node removed and added back, or a new one, takes
        their place), then, when the run uses the whole cluster, the rest of such a node gets devices of its own
        (:func:`fluidsalus.gpu.device.devices_of_joined_nodes`). A node is planned as the run planned its own,
        less the devices the run has there already, at each check: a device lost a moment later still finds its
        place."""
        now = time.time()
        grow = self.settings.grow_onto_new_nodes
        if (not self._lost and not grow) or self.settings.node_devices is None or now < self._next_node_check:
            return
        self._next_node_check = now + NODE_CHECK_S
        try:
            alive = cluster_nodes()
        except Exception as e:  # noqa: BLE001 - Ray's GCS did not answer: asked again at the next check
            logger.debug("cannot list the cluster's nodes: %s", e)
            return
        home = {spec.node_id for spec in self.device_specs}  # (the nodes the run began on keep their plan)
        kinds = {spec.kind for spec in self.device_specs}
        nodes = {node_id: as_run_plans(res, kinds) for node_id, res in alive.items() if node_id not in home}
        if not nodes:
            return
        placed: dict[str, list[str]] = {}
        for d in self._devices:
            if d.spec.node_id in nodes:
                placed.setdefault(str(d.spec.node_id), []).append(d.spec.kind)
        gone = [d.spec for d in self._lost.values() if d.spec.node_id is not None and d.spec.node_id not in alive]
        for old, new in replacements_for_lost(gone, nodes, placed, self.settings.node_devices):
            device = self._lost.pop(old.name)
            device.spec, device.max_running = new, new.slots
            placed.setdefault(str(new.node_id), []).append(new.kind)
            logger.warning("device %s, lost with its node, starts again on node %s, which joined the cluster",
                           new.name, new.node_id)
            self.store.add_events([(now, "device_moved", None, new.name,
                                    {"from_node": old.node_id, "node_id": new.node_id, "slots": new.slots})])
            self._start_replacement(device)
        if not grow:
            return
        # (numbered on from the devices there are; the first that cannot start ends the loop: no gap)
        for spec in devices_of_joined_nodes(nodes, placed, kinds, self.settings.node_devices, len(self._devices)):
            name = self._actor_name(spec)
            try:
                actor = start_device_actor(spec, self.payload, self._host_settings(spec), name)
            except ray.exceptions.RayError as e:  # (the node went again, say: it is asked again next time)
                logger.warning("device %s for node %s, which joined the cluster, cannot start: %s", spec.name,
                               spec.node_id, _plain(e).splitlines()[0])
                break
            logger.warning("device %s starts on node %s, which joined the cluster", spec.name, spec.node_id)
            self.store.add_events([(now, "device_added", None, spec.name, {"node_id": spec.node_id,
                                                                           "slots": spec.slots})])
            device = _Device(spec, actor, {}, max_running=spec.slots, assigned=set(), actor_name=name,
                             launched=now, start_ref=actor.info.remote())
            device.alive = False  # until it joins (:meth:`_join`); a failed start leaves it lost, in its place
            self._devices.append(device)

    def _callbacks_end(self, trial: Trial) -> None:
        """Tell the callbacks a trial's end (``on_trial_complete``, once its end is committed), then record the ends
        a callback could not take (:meth:`_record_failed_ends`)."""
        for callback in self.settings.callbacks:
            callback.on_trial_complete(trial.trial_id, trial.status, trial.last_result)
        self._record_failed_ends()

    def _record_failed_ends(self) -> None:
        """Record as ``ERROR`` the trials whose end a callback could not take (``Callback.failed_ends``: a Ray-style
        callback's ``on_trial_complete`` raised), as Ray's ``stop_trial`` fails such a trial: its error in the store
        and its folder's error file, ``fail_fast`` applies, the run goes on. Its results and checkpoints stay."""
        failed = [end for callback in self.settings.callbacks for end in callback.failed_ends()]
        now = time.time()
        for trial_id, error, trace, error_pickle in failed:
            trial = self.trials.get(trial_id)
            if trial is None or trial.status != TERMINATED:
                continue
            trial.status, trial.error, trial.error_pickle = ERROR, error, error_pickle
            self._stopped.discard(trial_id)  # (counted as stopped by the search or a stop rule: now errored)
            append_error_file(trial.trial_dir, self._shown_name(trial_id), trial.num_failures + 1, now, error, trace,
                              error_pickle)
            with self.store.transaction():
                self.store.update_trial(trial_id, status=ERROR, error=error, traceback=trace, stop_reason=OUT_ERRORED)
                self.store.add_events([(now, CALLBACK_ERROR_EVENT, trial_id, None,
                                        {"attempt": trial.attempt, "hook": "on_trial_complete", "error": error})])
            self._note_error(trial, trace)
            self._log_end(trial, OUT_ERRORED)  # (one line: the callbacks' logger has shown the traceback)

    def _note_error(self, trial: Trial, trace: str | None = None) -> None:
        """Keep the run's first failure (``fail_fast`` ends the run with it), with its traceback where the trial's
        end brought one: ``fail_fast="raise"``'s error is the trial's ``Result.error`` (it had one line, and at
        ``verbose=0`` nothing said where the trainable failed; Ray's shows the remote traceback), which names it as
        the run's lines do (:meth:`_shown_name`)."""
        if self._first_error is None:
            name = self._shown_name(trial.trial_id)
            self._first_error = f"Trial {name} failed: {trial.error}\n{trace or ''}".rstrip()
            self._first_error_text = trial.error
            self._first_error_pickle = trial.error_pickle
            self._first_error_trial = trial.trial_id

    def _may_retry(self, trial: Trial) -> bool:
        """Whether ``max_failures`` allows one more retry of a failed trial (``-1`` arrives as ``sys.maxsize``), and
        the searcher does not take the failure as the trial's outcome (:meth:`BaseSearcher.retries`)."""
        return trial.num_failures < self.settings.max_failures and self.searcher.retries(trial.trial_id)

    @staticmethod
    def _death_error(trial: Trial, text: str) -> str:
        """The last death's error, then (the line a log shows) what counted it as the trial's failure."""
        return (f"{text.rstrip()}\nIts device process died {trial.stuck_deaths} times while it ran, each time "
                f"before it got past iteration {trial.death_point} or after {trial.death_run} "
                f"iteration{'' if trial.death_run == 1 else 's'} of its attempt: the trial may end the process itself "
                "(os._exit, a crash in native code, the out-of-memory killer)")

    def _end_by_deaths(self, trial: Trial, error: str, now: float, device_name: str,
                       events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]]) -> None:
        """End a trial errored (inside the device death's transaction): its device's deaths were its failures, and
        ``max_failures`` allows no more."""
        trial.status, trial.devices, trial.error = ERROR, (), error
        self._forget(trial.trial_id)
        # Ray's failure number: the retried failures, then this one (num_failures counts the retried ones, as for
        # a trial whose error ended it)
        append_error_file(trial.trial_dir, self._shown_name(trial.trial_id), trial.num_failures + 1, now, error,
                          None)
        self.store.update_trial(trial.trial_id, status=ERROR, finished_at=now, error=error, stop_reason=OUT_ERRORED,
                                last_iteration=trial.last_iteration, checkpoint_path=trial.checkpoint_path,
                                num_failures=trial.num_failures)
        events.append((now, "trial_end", trial.trial_id, device_name, {"attempt": trial.attempt,
                                                                        "outcome": OUT_ERRORED}))
        self._tell_end(trial, error=True)

    def _shown_name(self, trial_id: str) -> str:
        """A trial as the run's lines name it, as Ray's name it (``str(trial)``): the name ``trial_name`` gives it
        (the Tune front end's ``<trainable>_<id>`` or ``trial_name_creator``'s), else its id, as the errored-trials
        table under the run's summary names it."""
        return self._names.get(trial_id) or trial_id

    def _log_end(self, trial: Trial, outcome: str, trace: str | None = None) -> None:
        """Print a trial's end: a trial that failed for good at every ``verbose``, to stderr, as Ray logs it (the
        first such trial of the run with its traceback, the others in one line each unless ``verbose>=2``); the
        other ends from ``verbose=2`` on, to stdout (a trial stopped before any attempt of it began, which the counts
        call never started, as such: "stopped after 0 iterations" read as a trial that ran). A failure the searcher
        took as the trial's outcome (:meth:`BaseSearcher.retries`: an Optuna objective's, which Optuna's own log line
        reports) is not printed again. The trial is named as Ray's lines name it (:meth:`_shown_name`)."""
        errored = outcome == OUT_ERRORED
        if self.settings.verbose < (ERROR_VERBOSITY if errored else 2):
            return
        if errored and not self.searcher.retries(trial.trial_id):
            return
        if outcome == OUT_STOPPED and trial.trial_id not in self._began:  # (the counts' rule: see _snapshot)
            print(f"Trial {self._shown_name(trial.trial_id)} never started", flush=True)
            return
        metric = self.settings.metric
        value = trial.last_result.get(metric) if (trial.last_result and metric) else None
        shown = f" {metric}={format_metric(value)}" if isinstance(value, (int, float)) else ""
        what = {OUT_COMPLETED: "finished", OUT_STOPPED: "stopped", OUT_ERRORED: "errored"}[outcome]
        iterations = plural(trial.last_iteration, "iteration")
        line = f"Trial {self._shown_name(trial.trial_id)} {what} after {iterations}{shown}"
        if not errored:
            print(line, flush=True)
            return
        line += f": {error_summary(trial.error) or 'no error text'}"
        if trace and (self.settings.verbose >= 2 or not self._traced_an_error):
            line += "\n" + trace.rstrip()
            if not self._traced_an_error:
                line += "\n(every errored trial's traceback is in ResultGrid.errors)"
            self._traced_an_error = True
        print(line, file=sys.stderr, flush=True)
