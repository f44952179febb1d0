"""``fluidsalus.run``: run a sweep of a function trainable and return its :class:`ResultGrid`.

Everything is checked before any trial starts and before anything is written: a bad argument raises one
:class:`ConfigError` naming it, and leaves no experiment folder behind. A metric that no trial reports can
only be seen once the first result arrives; that also raises a ConfigError, and the half-run experiment is
removed, as is one that any error ended before its first trial was made (a hook that raised, no device actor
starting): the same name then runs once the input is fixed. A result that breaks such a rule after others kept
it (a metric or stop key a late result leaves out) raises the same error but keeps the experiment, marked
ERROR: what the run did is not thrown away.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import numbers
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import ray
from ray import cloudpickle as ray_cloudpickle

from fluidsalus import space as sp
from fluidsalus._exits import ray_started
from fluidsalus.callbacks import Callback
from fluidsalus.checkpoint import remove_staging_folders
from fluidsalus.config import RunSpec, build
from fluidsalus.errors import ConfigError, SpaceError, StoreError, plural
from fluidsalus.gpu import nvml
from fluidsalus.gpu.actor import cluster_nodes, pack_trainable
from fluidsalus.gpu.arena import DEFAULT_MEMORY_MODE
from fluidsalus.gpu.device import DeviceSpec, plan_devices
from fluidsalus.gpu.host import DEFAULT_QUANTUM_MS, OUT_STOPPED, for_devices, stop_rule
from fluidsalus.inspect import trial_counts_text
from fluidsalus.progress import format_metric
from fluidsalus.result import ResultGrid, lookup_metric, with_flat_keys
from fluidsalus.searchers import BaseSearcher, RandomSearch
from fluidsalus.searchers._base import WrappingSearcher
from fluidsalus.session import DATE_FORMAT, callable_name
from fluidsalus.stopper_state import forget_trials, restored_stopper
from fluidsalus.store import (
    ABANDONED_CREATE_S,
    CALLBACK_ERROR_EVENT,
    DB_FILENAME,
    ERROR,
    ERROR_FILE,
    FINAL_STATUSES,
    SEARCHER_STOP_EVENT,
    SEARCHER_TOLD_END_EVENT,
    TERMINATED,
    DriverLock,
    ExperimentStore,
    ResultRow,
    abandoned_create,
    open_untouched,
    remove_store_files,
    unused_name,
    wait_for_killed_drivers_devices,
)
from fluidsalus.trialgroup.dispatch import resume_from
from fluidsalus.trialgroup.executor import (
    EXPERIMENT_ENDING_EVENT,
    RAISED_TRIAL_KEY,
    WARM_DEVICES,
    Executor,
    ExecutorSettings,
    lineage_starts,
)
from fluidsalus.trialgroup.searcher_log import restore
from fluidsalus.trialgroup.trial import Trial
from fluidsalus.trialgroup.warm import keep_warm_s

logger = logging.getLogger(__name__)

# Experiment statuses in the store.
EXP_RUNNING, EXP_FINISHED, EXP_ERROR, EXP_INTERRUPTED = "RUNNING", "FINISHED", "ERROR", "INTERRUPTED"
#: Seconds to wait for a TCP connection to ``address`` before ``ray.init`` is tried. Ray itself retries an
#: unreachable head for minutes; this turns a mistyped address into a prompt ConfigError.
ADDRESS_CONNECT_TIMEOUT_S = 5.0
#: Held while a run checks whether this process has initialised Ray and initialises it: two runs started at once
#: from two threads (two Optuna studies, say) both found Ray not initialised, and the second ``ray.init`` failed.
_CONNECT_LOCK = threading.Lock()
#: Ray's logger of the driver: ``import ray`` gives it a handler that prints its records (INFO and up) on stderr.
RAY_LOGGER = "ray"
#: True while a front end (the Tune front end) calls :func:`run` with a searcher that already holds the run's space:
#: its ``config`` and ``num_samples`` then describe the run (stored with it) and are not refused as unused.
_SPACE_IN_SEARCHER: contextvars.ContextVar[bool] = contextvars.ContextVar("fluidsalus_space_in_searcher",
                                                                         default=False)


#: The event a resume stores once it is accepted, after :data:`_ON_RESUME`'s hook (``data["unfinished"]``: how many
#: trials it found unfinished).
RESUME_EVENT = "resume"
#: The event a resume stores for each unfinished trial it ended at the ``done`` result its interrupted run had
#: stopped it at (:func:`end_decided_trials`; ``data``: that result's ``attempt`` and ``iteration``).
DECIDED_END_EVENT = "decided_end"
#: Set by a front end around :func:`run`: called as ``hook(store, searcher)`` by a resume once every check passed
#: and the store is open for writing, before the stored trials are loaded; ``searcher`` holds the stored state
#: then (what the hook tells it, it saves itself). The Tune front end carries out ``Tuner.restore``'s flags in it,
#: so that a refused resume has changed no trial. It returns the trials it made start again from scratch as new
#: trials (``restart_errored``), whose restored stopper's state is forgotten (:func:`forget_trials`).
_ON_RESUME: contextvars.ContextVar[Callable[[ExperimentStore, BaseSearcher], Collection[str]] | None] = \
    contextvars.ContextVar("fluidsalus_on_resume", default=None)


@contextlib.contextmanager
def on_resume(hook: Callable[[ExperimentStore, BaseSearcher], Collection[str]]) -> Any:
    """Within it, a resume by :func:`run` calls ``hook`` once it is accepted (:data:`_ON_RESUME`)."""
    token = _ON_RESUME.set(hook)
    try:
        yield
    finally:
        _ON_RESUME.reset(token)


#: Set by a front end around :func:`run`: called as ``hook(experiment_dir)`` once a new run's store is created and
#: locked, before Ray's devices start (a resume does not call it). The Tune front end writes ``tuner.pkl`` in it,
#: as Ray writes it as ``fit`` begins, so that a driver killed from then on leaves a folder ``Tuner.restore``
#: continues. What it writes in the folder goes with it where the run removes the folder (an error before any
#: trial was made).
_ON_CREATED: contextvars.ContextVar[Callable[[str], None] | None] = \
    contextvars.ContextVar("fluidsalus_on_created", default=None)


@contextlib.contextmanager
def on_created(hook: Callable[[str], None]) -> Any:
    """Within it, a new run of :func:`run` calls ``hook`` once its store is created (:data:`_ON_CREATED`)."""
    token = _ON_CREATED.set(hook)
    try:
        yield
    finally:
        _ON_CREATED.reset(token)


@contextlib.contextmanager
def space_in_searcher() -> Any:
    """Within it, :func:`run` takes a searcher with ``config``/``num_samples`` describing its space (the Tune
    front end's plans)."""
    token = _SPACE_IN_SEARCHER.set(True)
    try:
        yield
    finally:
        _SPACE_IN_SEARCHER.reset(token)


def run(
    trainable: Callable[[dict[str, Any]], Any],
    config: Mapping[str, Any] | None = None,
    *,
    num_samples: int = 1,
    metric: str | None = None,
    mode: str | None = None,
    stop: Mapping[str, float] | Callable[[str, Mapping[str, Any]], bool] | None = None,
    name: str | None = None,
    storage_path: str | None = None,
    seed: int | None = None,
    searcher: BaseSearcher | None = None,
    devices: int | None = None,
    cpus_per_device: int | None = None,
    max_concurrent_trials: int | None = None,
    max_failures: int = 0,
    lane_policy: str = "fifo",
    quantum_ms: float = DEFAULT_QUANTUM_MS,
    time_budget_s: float | None = None,
    fail_fast: bool | str = False,
    checkpoint_num_to_keep: int | None = None,
    checkpoint_score_attribute: str | None = None,
    checkpoint_score_order: str = "max",
    call_handler: Callable[[str, str, tuple[Any, ...]], Any] | None = None,
    verbose: int = 1,
    resume: bool = False,
    callbacks: list[Callback] | None = None,
    address: str | None = None,
    memory_mode: str = DEFAULT_MEMORY_MODE,
    gpu_per_trial: float | None = None,
    cpus_per_trial: float | None = None,
    task_cpus_per_trial: float = 0.0,
    trial_dirname: Callable[[str, Mapping[str, Any]], str] | None = None,
    trial_name: Callable[[str], str | None] | None = None,
    trial_id: Callable[[], str] | None = None,
    result_extras: Callable[[int, Mapping[str, Any]], Mapping[str, Any]] | None = None,
    call_offload: Callable[[str, str, tuple[Any, ...]], Callable[[], Any] | None] | None = None,
    call_threads: int = 0,
) -> ResultGrid:
    """Run a hyperparameter sweep of ``trainable`` on the cluster's devices.

    Args:
        trainable: A function ``f(config)`` that calls :func:`fluidsalus.report` once per iteration (or
            returns / yields a dict or a number, as in Ray Tune).
        config: The search space: constants, domains (``uniform(0, 1)``, ``choice([...])``, ...) and
            ``grid_search([...])``, possibly nested. None or ``{}``: ``num_samples`` trials of ``{}`` (Ray's).
        num_samples: Samples per grid point; -1 samples until the run is stopped, which needs ``time_budget_s``
            or a ``stop`` Stopper with ``stop_all()``, unless ``searcher`` may end the search itself
            (``BaseSearcher.ends_itself``: a Ray Tune search algorithm of the user's own that returns ``FINISHED``).
        metric: The metric to optimise; every result must report it (``"a/b"`` names a nested value,
            ``result["a"]["b"]``, and searchers see it under that key too).
        mode: ``"min"`` or ``"max"``. Either of ``metric`` and ``mode`` may come alone, as in Ray Tune (the best
            result then needs the other, from the searcher or ``get_best_result``).
        stop: ``{key: threshold}`` (a trial stops once ``result[key] >= threshold``; ``"a/b"`` also names
            ``result["a"]["b"]``; a result without the key fails the run), a callable
            ``f(trial_id, result) -> bool``, or a Ray-style Stopper (a callable with ``stop_all()``). The
            per-trial rule runs at each report in the trial's own thread. A Stopper's driver-side copy also sees
            every acknowledged result, and its ``stop_all()`` ends the experiment. The result a callable or a
            Stopper is given also holds the trial's ``config``, as in Ray Tune.
        name: Experiment folder name under ``storage_path`` (at most 255 bytes, a file system's longest name; not
            the name of a file there). Default: ``<trainable>_<timestamp>``, with ``_2``, ``_3``, ... added when a
            run of the same second has it.
        storage_path: Where experiments go (default ``~/fluidsalus_results`` or ``$FLUIDSALUS_STORAGE_PATH``); a
            folder path, not ``""``.
        seed: Seed of the sampler, for reproducible configurations.
        searcher: A searcher that proposes the trials. Default: random/grid search over ``config``. A searcher
            has its own space, number of trials and seed: ``config``, ``num_samples`` and ``seed`` are then
            refused (a ``ConfigError``: they went unused, silently).
        devices: Number of devices. Default: every GPU, else one virtual CPU device per core.
        cpus_per_device: CPU cores per device (each runs a trial at once, unless ``cpus_per_trial`` says
            otherwise). Default: one for virtual CPU devices, an even share of its node's cores for a GPU.
        max_concurrent_trials: Cap on trials running at once across all devices.
        max_failures: Times a failing trial is started again (from its last checkpoint) before it is recorded
            as errored; -1 retries without limit (Ray Tune's ``FailureConfig.max_failures``).
        lane_policy: How a lane picks its next trial at an iteration boundary: ``fifo``, ``fair``, ``rr``,
            ``pack``, ``srtf`` or ``priority`` (see docs/lanes.md).
        quantum_ms: Least compute time before ``fluidsalus.step()`` lets a lane switch trials.
        time_budget_s: End the experiment after this many seconds: running trials stop at their next
            boundary, and unstarted ones never start.
        fail_fast: True ends the experiment once a trial has failed for good (after its retries); ``"raise"``
            also raises that trial's error.
        checkpoint_num_to_keep: Checkpoints kept per trial: the best by ``checkpoint_score_attribute`` (or the
            newest), plus always the latest. None keeps all.
        checkpoint_score_attribute: Result key that ranks checkpoints for ``checkpoint_num_to_keep``.
        checkpoint_score_order: ``"max"`` or ``"min"``: which scores are best.
        call_handler: Answers ``fluidsalus.session.call_driver(method, *args)`` from inside trials, as
            ``handler(trial_id, method, args)``, on the driver (front ends use it for define-by-run APIs).
        verbose: 0 no progress, 1 a summary, 2 a line per finished trial (``Trial <name> never started`` for one
            the counts call never started; a trial is named by ``trial_name``, else its id). At every level a trial
            that fails for good is printed on stderr (the run's first with its traceback), as Ray logs failures.
        resume: Continue the experiment ``name``: finished trials are kept, unfinished ones resume from their
            last checkpoint (or restart when they have none). The searcher proposes no new trial when the
            experiment was ended by its time budget, a stopper's ``stop_all()`` or ``fail_fast`` (not ``"raise"``),
            as Ray's restored search stays finished, and the resumed run ends at once (trials left unfinished end
            unstarted, as Ray's restored run's end stops them again); ``fail_fast="raise"`` leaves the trials its end
            stopped unfinished, so they resume (its failed trial stays errored). It needs the trainable (by name), the
            ``config`` keys, the metric, mode and searcher kind the experiment ran with (another is a ConfigError naming
            both, and the experiment's folder is left byte for byte as it was: the checks read the store without
            writing, and only an accepted resume opens it for writing); ``config``'s values may differ (object
            refs given again).
        callbacks: :class:`fluidsalus.callbacks.Callback` s, told of each result once it is safely stored.
        address: The Ray cluster to run on when this process has not initialised Ray yet: the head node's
            ``host:port``, ``ray://host:port`` (Ray Client) or ``"auto"``, as in ``ray.init(address=...)``.
            None starts a local Ray (or joins ``$RAY_ADDRESS``). The devices are planned node by node: one per
            GPU of every node, or virtual CPU devices within each node, each actor pinned to its node.
        memory_mode: How GPU devices know and bound their trials' memory (docs/allocator.md, "Which mode the
            engine uses"). ``"caching"`` (the default): PyTorch's caching allocator, each trial's P and T measured
            by profiling its first iterations (a solo iteration for T), no hard caps. ``"arena"``: the lane
            allocator is installed as PyTorch's CUDA allocator in each device actor: exact per-trial P and T at
            every iteration boundary and hard lane caps (the trial that overflows gets the out-of-memory error
            and is re-admitted), but no CUDA graphs, CUDA IPC or ``torch.cuda`` memory statistics in trainables;
            a device that cannot install it fails to start. ``"auto"``: arena where it can be installed, else
            caching. Virtual CPU devices always profile.
        gpu_per_trial: The share of one device you expect one trial to need, in (0, 1] (``0.25``: a quarter; a
            trial that trains on several devices: :mod:`fluidsalus.distributed`; Ray Tune's
            ``with_resources({"gpu": ...})`` passes its ``gpu`` here). A hint, not a share: until co-location
            is measured the planner packs up to ``1 / gpu_per_trial`` trials per device instead of up to the
            device's slots, then goes further one measured step at a time while co-locating still pays
            (docs/planner.md, "Hints"). None (the default): no hint.
        cpus_per_trial: The CPU cores one trial asks for, as in Ray (Ray Tune's ``with_resources({"cpu": ...})``
            passes its ``cpu`` here): a device of ``c`` cores runs at most ``floor(c / cpus_per_trial)`` trials at
            once (at least one), so ``0.5`` runs two trials per core where one trial waits on I/O or sleeps. On
            virtual CPU devices, a request of more than one core makes each device ``ceil(cpus_per_trial)``
            cores (unless ``cpus_per_device`` is given), whose torch intra-op threads its trial gets; more than a
            node has makes its devices the node's cores, with a warning (Ray leaves such trials pending). No less
            than ``0.0001`` (Ray's resource unit); a trial's ``get_context().get_trial_resources()`` reports it
            (and ``gpu_per_trial``), as Ray reports a request. None (the default): one trial per core.
        task_cpus_per_trial: CPU cores each trial keeps free for the Ray tasks and actors it starts (Ray Tune's
            ``PlacementGroupFactory`` bundles after the first pass their CPUs here). The device actors hold every
            core they are given, so such a task that asks for a CPU would wait for one as long as the run
            lasts. With it, each node's devices hold only the cores of the trials Ray would run there at once
            (``floor(cores / (cpus_per_trial + task_cpus_per_trial))``, at least one; their ``cpus_per_trial``
            each, one if None), and leave the rest to Ray for those tasks. 0 (the default): none kept.
        trial_dirname: ``f(trial_id, config) -> str``, called once for each new trial: the name of its folder in
            the experiment (Ray Tune's ``trial_dirname_creator``). It must be one folder name of at most 250 bytes,
            without a NUL byte (else the run ends with a ConfigError); a name already taken gets ``_`` and four hex
            digits, as in Ray. None (the default): the folder is the trial id.
        trial_name: ``f(trial_id) -> str | None``, asked after ``trial_dirname``: the name
            ``get_context().get_trial_name()`` gives the trial (Ray Tune's ``trial_name_creator``). None (the
            default), or a None answer: ``<trainable>_<trial_id>``.
        trial_id: ``f() -> str``, called for each new trial: its id (Ray Tune's front end gives a search algorithm's
            trials Ray's ``Trial.generate_id()`` form, 8 hex digits); an id the experiment already has is drawn
            again. Without ``trial_dirname`` the id names the trial's folder: one that is no folder name (``../x``,
            longer than 255 bytes) is a ``ConfigError``, and one a file of the experiment has is drawn again. None
            (the default): ``<5 hex digits>_<its number, 5 digits>``, in creation order.
        result_extras: ``f(seq, config) -> dict``: keys added to every result of the trial created ``seq``-th
            (from 0) with ``config``, before it is stored (front ends use it for their own keys, such as Ray
            Tune's ``experiment_tag``). None (the default): none.
        call_offload: ``f(trial_id, name, args) -> answer_fn | None``, asked on the driver's loop for each call
            from a trial when ``call_threads`` allows more than one thread: a function ``answer_fn()`` that the run
            calls on one of its call threads, and whose return value (or exception) is the call's answer, while
            the loop goes on serving the other devices; or None to answer with ``call_handler`` on the loop, as
            always. For a front end's slow calls (``fluidsalus.optuna``: the sampler's). The front end keeps
            what else it does for the calling trial until ``answer_fn`` returns; the answer goes to the trial as
            soon as the loop sees it; if the run cannot hand it to a thread (a Ctrl-C at that moment), it calls
            ``answer_fn.cancel()`` when there is one, so the front end lets go of what it kept. None (the
            default): every call on the loop.
        call_threads: The most calls answered at once on call threads (``call_offload``): one per device up to
            this; with fewer than two (one device, or 0 or 1 here) every call is answered on the loop.

    Returns:
        A :class:`ResultGrid` of every trial.

    Raises:
        ConfigError: For bad input, naming the argument and what is allowed.
    """
    spec: RunSpec = build(
        RunSpec, num_samples=num_samples, metric=metric, mode=mode, name=name, storage_path=storage_path,
        seed=seed, devices=devices, cpus_per_device=cpus_per_device,
        max_concurrent_trials=max_concurrent_trials, max_failures=max_failures, verbose=verbose, resume=resume,
        lane_policy=lane_policy, quantum_ms=quantum_ms, time_budget_s=time_budget_s, fail_fast=fail_fast,
        checkpoint_num_to_keep=checkpoint_num_to_keep, checkpoint_score_attribute=checkpoint_score_attribute,
        checkpoint_score_order=checkpoint_score_order, address=address,
        memory_mode=memory_mode, gpu_per_trial=gpu_per_trial, cpus_per_trial=cpus_per_trial,
        task_cpus_per_trial=task_cpus_per_trial,
    )
    trainable_name = _check_trainable(trainable)
    for field_name, value, form in (("trial_dirname", trial_dirname, "f(trial_id, config) -> str"),
                                    ("trial_name", trial_name, "f(trial_id) -> str | None"),
                                    ("trial_id", trial_id, "f() -> str"),
                                    ("result_extras", result_extras, "f(seq, config) -> dict"),
                                    ("call_handler", call_handler, "f(trial_id, name, args) -> answer"),
                                    ("call_offload", call_offload, "f(trial_id, name, args) -> answer_fn | None")):
        if value is not None and not callable(value):
            raise ConfigError(f"{field_name} must be None or a callable {form} (got {type(value).__name__})")
    if not isinstance(call_threads, numbers.Integral) or isinstance(call_threads, bool) or call_threads < 0:
        raise ConfigError(f"call_threads must be a number of threads >= 0 (got {call_threads!r})")
    run_callbacks = _check_callbacks(callbacks)  # (checked before the store is made: a bad one left it RUNNING)
    space = {} if config is None else config
    # (a searcher's own num_samples=-1 too: RandomSearch(space, num_samples=-1) ran for ever)
    endless = spec.num_samples == sp.INFINITE_SAMPLES or bool(getattr(searcher, "endless", False))
    if endless and spec.time_budget_s is None and not hasattr(stop, "stop_all") \
            and not (searcher is not None and getattr(searcher, "ends_itself", False)):
        owner = searcher
        while isinstance(owner, WrappingSearcher):  # (the searcher given -1, not a stopping rule or repeats on it)
            owner = owner.inner
        raise ConfigError(
            f"num_samples=-1{'' if spec.num_samples == sp.INFINITE_SAMPLES else f' ({type(owner).__name__})'} "
            "samples until the run is stopped: also pass time_budget_s, or a stop= Stopper whose stop_all() ends "
            "the run"
        )
    if searcher is None:
        try:
            sp.validate_space(space, allow_empty=True)  # ({}: num_samples trials of the empty config, as in Ray)
        except SpaceError as e:  # (named as every other bad argument is)
            raise SpaceError(f"config: {e}") from None
        space = dict(space)
        sp.check_copyable(space, "config")
        searcher = RandomSearch(space, num_samples=spec.num_samples, seed=spec.seed)
    elif not isinstance(searcher, BaseSearcher):
        raise ConfigError(f"searcher: must be a fluidsalus BaseSearcher, got {type(searcher).__name__}")
    else:
        if not _SPACE_IN_SEARCHER.get():
            _refuse_unused_with_searcher(searcher, space, spec)
        spec = _with_searchers_metric(spec, searcher)
    rule = stop_rule(stop)
    nvml.context_reserve_bytes()  # a bad $FLUIDSALUS_CUDA_RESERVE_BYTES fails here, before any actor starts
    keep_s = keep_warm_s()  # and a bad $FLUIDSALUS_KEEP_WARM_S
    payload = _pack(trainable, rule, {"memory_mode": spec.memory_mode})
    storage = spec.resolved_storage_path()
    _check_writable(storage)
    # (a made-up name is made free: two runs of one second got the same one, and the second failed as "taken")
    exp_name_base = f"{trainable_name}_{datetime.datetime.now().strftime(DATE_FORMAT)}"
    exp_name = spec.name or unused_name(storage, exp_name_base)
    exp_dir = os.path.join(storage, exp_name)
    db_path = os.path.join(exp_dir, DB_FILENAME)
    if abandoned_create(db_path):  # a creation cut short (its driver killed): the name is free again
        logger.warning("%s holds no experiment: a creation cut short, %.0f s ago or more; it is replaced", db_path,
                       ABANDONED_CREATE_S)
        remove_store_files(db_path)
    exists = os.path.exists(db_path)
    taken = ConfigError(f"name: an experiment named {exp_name!r} already exists at {exp_dir}. Pass resume=True to "
                        "continue it, or choose another name.")
    if exists and not spec.resume:
        raise taken
    if not exists and spec.resume:
        raise ConfigError(f"resume: there is no experiment named {exp_name!r} at {exp_dir} to resume")
    if os.path.lexists(exp_dir) and not os.path.isdir(exp_dir):  # (it failed later: a bare FileExistsError)
        raise ConfigError(f"name: {exp_dir} is a file, not an experiment's folder; choose another name")
    if not exists and os.path.isdir(exp_dir) and os.listdir(exp_dir):
        raise ConfigError(
            f"name: {exp_dir} exists and is not an empty folder or an experiment; choose another name"
        )

    experiment: Mapping[str, Any] = {}
    if exists:
        # Every check of a resume before Ray starts (a refused one started a whole local Ray first: seconds), on
        # a view that changes nothing (the store's folder byte for byte, no -wal/-shm made): a refused resume
        # leaves the experiment as it was. Only once Ray is up is it opened for writing, which brings an older
        # schema up to date and rewrites the checkpoint paths of a moved experiment.
        lock = _lock(exp_dir)  # before the store is read: another driver may be running it
        try:
            with open_untouched(exp_dir, writable=True) as view:  # (a store it could not write: refused now)
                experiment = view.experiment()
                check_resume(experiment, metric=spec.metric, mode=spec.mode, searcher=searcher, space=space,
                             trainable=trainable_name)
                _restore(searcher, view)  # its saved state, and what it was told after it (or the refusal)
            restored = restored_stopper(exp_dir, stop)  # (the stopper's saved state: fluidsalus.stopper_state)
            if restored is not stop:
                stop, rule = restored, stop_rule(restored)
                payload = _pack(trainable, rule, {"memory_mode": spec.memory_mode})  # (the devices' copies too)
        except BaseException:
            lock.release(put_back=True)
            raise

    try:  # (the lock of a resume is put back on every way out until the store is opened for writing)
        _connect(spec.address)
        device_specs = plan_devices(cluster_nodes(), spec.devices, spec.cpus_per_device, spec.cpus_per_trial,
                                    spec.task_cpus_per_trial)
        largest = max((d.cpus for d in device_specs if d.kind == "cpu"), default=None)
        if spec.cpus_per_trial is not None and largest is not None and spec.cpus_per_trial > largest \
                and spec.cpus_per_device is None:
            # (Ray warns that the cluster has too few, and leaves the trials pending; here they run on what there
            # is; a warning filter may make it an error)
            warnings.warn(f"cpus_per_trial={spec.cpus_per_trial:g}: no node has that many cores; each trial runs "
                          f"on a device of {largest} core{'s' if largest != 1 else ''}", UserWarning, stacklevel=2)
    except BaseException:
        if exists:
            lock.release(put_back=True)
        raise

    created_here = not exists
    trials: list[Trial] = []
    if exists:
        store = None
        try:
            store = ExperimentStore.open(exp_dir)
            still_running: list[int] = []
            if experiment.get("status") == EXP_RUNNING and lock.previous_pid not in (None, os.getpid()):
                # Its driver was killed: its device actors on this machine run on until Ray ends them, and
                # would run the same trials beside ours, writing the same folders.
                still_running = wait_for_killed_drivers_devices(store)
            if not still_running:  # (nothing copies a checkpoint in now: what a kill cut short goes)
                remove_staging_folders(store.trial_dirs().values())
            end_decided_trials(store, searcher)  # (before the front end's flags: in Ray's state they had ended)
            accepted = _ON_RESUME.get()
            if accepted is not None:  # (a front end's changes to the stored trials: Tuner.restore's flags)
                if forget_trials(stop, accepted(store, searcher)):  # (restarted as new trials, as Ray's)
                    payload = _pack(trainable, stop_rule(stop), {"memory_mode": spec.memory_mode})
            tell_raised_end(store, searcher)
            trials = _load_trials(store)
            _renew_object_refs(trials, space)
            store.set_experiment(status=EXP_RUNNING, error=None, finished_at=None)
            if experiment.get("metric") is None and spec.metric is not None:  # it ran without one: now it has it
                store.set_experiment(metric=spec.metric, mode=spec.mode)
            store.add_events([(time.time(), RESUME_EVENT, None, None, {"unfinished": sum(
                t.status not in ("TERMINATED", "ERROR") for t in trials)})])
        except BaseException:
            if store is not None:
                store.close()
            lock.release(put_back=store is None)  # (refused before the store was opened for writing: as it was)
            raise
    else:
        while True:
            try:
                store = ExperimentStore.create(
                    exp_dir, exp_name, _describe(spec, space, stop, trainable_name, searcher), spec.metric, spec.mode
                )
                break
            except StoreError:
                if not os.path.exists(os.path.join(exp_dir, DB_FILENAME)):
                    raise
                if spec.name:
                    raise taken from None  # another driver created it since the check above
                # a made-up name another run of the same second took since unused_name: the next free one
                exp_name = unused_name(storage, exp_name_base)
                exp_dir = os.path.join(storage, exp_name)
        try:
            lock = _lock(exp_dir)
        except BaseException:
            store.close()
            shutil.rmtree(exp_dir, ignore_errors=True)
            raise
    try:
        return _execute(spec, payload, searcher, store, device_specs, trials, created_here, ExecutorSettings(
            experiment_name=exp_name,
            experiment_dir=exp_dir,
            trainable_name=trainable_name,
            metric=spec.metric,
            mode=spec.mode,
            max_concurrent_trials=spec.max_concurrent_trials,
            max_failures=spec.max_failures if spec.max_failures >= 0 else sys.maxsize,
            lane_policy=spec.lane_policy,
            quantum_ms=spec.quantum_ms,
            time_budget_s=spec.time_budget_s,
            fail_fast=spec.fail_fast,
            stopper=stop if hasattr(stop, "stop_all") else None,
            checkpoint_num_to_keep=spec.checkpoint_num_to_keep,
            checkpoint_score_attribute=spec.checkpoint_score_attribute,
            checkpoint_score_order=spec.checkpoint_score_order,
            call_handler=call_handler,
            verbose=spec.verbose,
            callbacks=run_callbacks,
            gpu_per_trial=spec.gpu_per_trial,
            cpus_per_trial=spec.cpus_per_trial,
            trial_dirname=trial_dirname,
            trial_name=trial_name,
            trial_id=trial_id,
            result_extras=result_extras,
            call_offload=call_offload,
            call_threads=call_threads,
            keep_warm_s=keep_s,
            node_devices=lambda node_id, resources: plan_devices(
                {node_id: resources}, None, spec.cpus_per_device, spec.cpus_per_trial, spec.task_cpus_per_trial),
            # (a run of devices=N keeps its N; one of the whole cluster grows with it, as Ray Tune's trials do)
            grow_onto_new_nodes=spec.devices is None and all(d.node_id is not None for d in device_specs),
        ))
    finally:
        lock.release()


@contextlib.contextmanager
def resume_view(exp_dir: str) -> Iterator[ExperimentStore]:
    """The store of an experiment about to be resumed, read before anything starts (a front end's look at its
    trials before Ray starts), with :func:`run`'s first refusals of such a resume: another driver runs it (its lock
    is taken first, so a read beside that driver's writes is never what fails: it failed about once in 36,000
    opens, a StoreError in place of this refusal), or its store cannot be read, or written, by this version. The
    view changes nothing (:func:`~fluidsalus.store.open_untouched`), and the lock is put back as it was on every
    way out: :func:`run` takes it again.

    Raises:
        ConfigError: Another driver is running the experiment.
        StoreError: The store cannot be read, or is of a schema this version cannot write.
    """
    lock = _lock(exp_dir)
    try:
        with open_untouched(exp_dir, writable=True) as view:
            yield view
    finally:
        lock.release(put_back=True)


def _lock(exp_dir: str) -> DriverLock:
    """The experiment's driver lock (:class:`DriverLock`).

    Raises:
        ConfigError: Another driver is running the experiment.
    """
    try:
        return DriverLock.acquire(exp_dir)
    except StoreError as e:
        raise ConfigError(f"resume: {e}") from None


def check_resume(experiment: Mapping[str, Any], *, metric: str | None, mode: str | None,
                 searcher: BaseSearcher | None, space: Mapping[str, Any] | None, trainable: str | None = None) -> None:
    """:func:`run`'s refusals of a resume that need neither Ray nor the searcher's saved state: another metric or
    mode (:func:`_check_objective`), a searcher of another kind, another trainable, or a search space of other
    keys (:func:`check_same_run`), in that order. :func:`run` makes them on its view of the store; a front end that
    starts Ray itself (the Tune front end's ``Tuner.fit``) makes them first on :func:`resume_view`'s store, with
    what it will give :func:`run`, so such a resume is refused before Ray starts.

    Args:
        experiment: The stored experiment (``ExperimentStore.experiment()``).
        metric: The run's ``metric`` (the searcher's own where it decides by one, as :func:`run` takes it).
        mode: The run's ``mode`` (likewise).
        searcher: The run's searcher (only its kind and its metric and mode are looked at; None: not compared).
        space: The run's ``config``.
        trainable: The trainable's name as :func:`run` stores it (None: not compared).

    Raises:
        ConfigError: Any of them differs from the experiment's, or the run's metric or mode from the searcher's.
    """
    if searcher is not None:
        metric, mode = _searchers_objective(metric, mode, searcher)
    _check_objective(metric, mode, experiment)
    ran = experiment.get("spec") or {}
    if searcher is not None:
        _check_searcher_kind(searcher, ran.get("searcher"))
    ran_space = ran.get("space")
    check_same_run(None if trainable is None else ran.get("trainable"), trainable or "",
                   None if ran_space is None else list(ran_space), list(_describe_space(space or {})),
                   other_trainable=_OTHER_TRAINABLE, other_space=_OTHER_SPACE)


def _check_objective(metric: str | None, mode: str | None, experiment: Mapping[str, Any]) -> None:
    """A resumed run must optimise what the experiment did: its best result, its searcher's decisions and its
    stored results all follow that metric and mode (an experiment that ran without one may be given one).

    Raises:
        ConfigError: ``metric`` or ``mode`` differs from the experiment's (a resume used to keep the old ones
            silently, so the best result was not the one asked for).
    """
    for field, given in (("metric", metric), ("mode", mode)):
        ran = experiment.get(field)
        if ran is not None and given is not None and ran != given:
            raise ConfigError(f"{field}: the experiment ran with {field}={ran!r}; resume it with that {field} "
                              f"(got {given!r}), or start a new experiment under another name")


#: :func:`run`'s refusals of a resume that runs another trainable or search space (:func:`check_same_run`).
_OTHER_TRAINABLE = ("trainable: the experiment ran the trainable {expected!r}; resume it with that trainable (got "
                    "{got!r}), or start a new experiment under another name: its unfinished trials would run the "
                    "other one on their configs")
_OTHER_SPACE = ("config: the experiment ran with the search space keys {expected}; resume it with that search space "
                "(got keys {got}), or start a new experiment under another name")


def check_same_run(ran_trainable: str | None, trainable: str, ran_keys: Iterable[str] | None,
                   keys: Iterable[str] | None, *, other_trainable: str, other_space: str) -> None:
    """Refuse a resume that brings another trainable, or a search space of other keys, than the experiment ran
    with: its unfinished trials would run the other trainable on their configs, and its results would mix both.
    Trainables are compared by name (:func:`fluidsalus.session.callable_name`: a function is pickled anew each
    run), spaces by their flattened keys only (their values may be given again: an object ref that died with the
    driver that made it, a constant that does not pickle). ``fluidsalus.run`` and the Tune front end's
    ``Tuner.restore``/``tune.run(resume=...)`` each word the refusal their own way.

    Args:
        ran_trainable: The trainable's name the experiment stored (None: not stored, not compared).
        trainable: The given trainable's name.
        ran_keys: The flattened keys of the space the experiment stored (None: not compared).
        keys: The flattened keys of the given space (None: not compared).
        other_trainable: The refusal of another trainable, with ``{expected}`` and ``{got}``.
        other_space: The refusal of other keys, with ``{expected}`` and ``{got}`` (sorted lists).

    Raises:
        ConfigError: Another trainable, or other keys.
    """
    if ran_trainable is not None and trainable != ran_trainable:
        raise ConfigError(other_trainable.format(expected=ran_trainable, got=trainable))
    if ran_keys is None or keys is None:
        return
    expected, got = sorted(ran_keys), sorted(keys)
    if expected != got:
        raise ConfigError(other_space.format(expected=expected, got=got))


def _check_searcher_kind(searcher: BaseSearcher, ran_with: str | None) -> None:
    """A resumed run's searcher must be of the kind the experiment ran with (``ran_with``, its class's name).

    Raises:
        ConfigError: The searcher is of another kind.
    """
    if ran_with is not None and ran_with != type(searcher).__name__:
        raise ConfigError(f"searcher: the experiment ran with {ran_with}; resume it with that searcher (got "
                          f"{type(searcher).__name__})")


def raised_trial(store: ExperimentStore) -> str | None:
    """The trial whose error the session a resume continues raised (``fail_fast="raise"``): the last run's end
    names it (:data:`~fluidsalus.trialgroup.executor.RAISED_TRIAL_KEY`) when no resume came after it. None
    otherwise."""
    endings = store.events(EXPERIMENT_ENDING_EVENT)
    if not endings:
        return None
    resumes = store.events(RESUME_EVENT)
    if resumes and resumes[-1].ts >= endings[-1].ts:
        return None
    return (endings[-1].data or {}).get(RAISED_TRIAL_KEY)


def end_kept_from_searcher(store: ExperimentStore, trial_id: str) -> bool:
    """Whether the end of the trial ``fail_fast="raise"`` raised was kept from the searcher
    (``Executor._withholds_end``): not when a callback's ``on_trial_complete`` failed it (its ``callback_error``
    event), which the searcher had been told of as completed."""
    return not any(event.trial_id == trial_id for event in store.events(CALLBACK_ERROR_EVENT))


def tell_raised_end(store: ExperimentStore, searcher: BaseSearcher) -> None:
    """A resume of a run that ``fail_fast="raise"`` ended, once the front end changed its trials: the raised trial,
    if it is still ``ERROR`` (the native API never runs an errored trial again), fails now for the searcher, which
    the raise kept from it as Ray's does (``Executor._withholds_end``), and its state is saved. A trial the front end
    runs on, or ended and told itself (``Tuner.restore``), is not told here.

    Args:
        store: The experiment's store, open for writing.
        searcher: The run's searcher, restored from the store.
    """
    raised = raised_trial(store)
    row = next((row for row in store.trials() if row.trial_id == raised), None)
    if row is None or row.status != ERROR or not end_kept_from_searcher(store, row.trial_id):
        return
    if row.error is not None:
        searcher.on_trial_error(row.trial_id, row.error)
    searcher.on_trial_complete(row.trial_id, row.last_result, error=True)
    store.set_searcher_state(searcher.state_json())  # (and the logged calls go: the state has them)


def end_decided_trials(store: ExperimentStore, searcher: BaseSearcher) -> list[str]:
    """A resume: end, ``TERMINATED`` (stopped), the unfinished trials whose end was decided at a stored result before
    the run was cut short (a Ctrl-C or a kill between the commit of that result and that of the trial's end).

    Such a result is stored ``done``: the searcher stopped the trial there (ASHA at a rung or at ``max_t``, the median
    rule, HyperBand's ``on_result``), or its stop rule, its stopper or a stop for good ended it. Ray decides and stops
    the trial in one step of its controller, so its saved state holds it ``TERMINATED`` at that result, and its
    restore leaves it so. Here it stayed unfinished and ran again (from scratch, without a checkpoint) to where it had
    been decided on; its searcher, given those iterations once already, decided nothing more, and a trial that
    paused there (at its budget) waited for ever (h228's finding). It now ends at that result, as its last, and the
    searcher is told its end unless it was at that result (:data:`SEARCHER_TOLD_END_EVENT`); its state is saved. The
    callbacks are not told: its end belongs to the session that decided it, as in Ray's restore. A trial its searcher
    stopped while it was paused on its device (``collect_stops``: HyperBand's rung settled) has no such result: the
    stop's :data:`SEARCHER_STOP_EVENT`, stored with the searcher's state that no longer holds it, ends it at its last
    result the same way. Each trial ended gets a :data:`DECIDED_END_EVENT`.

    Args:
        store: The experiment's store, open for writing.
        searcher: The run's searcher, restored from the store.

    Returns:
        The ids of the trials ended.
    """
    unfinished = {row.trial_id: row for row in store.trials() if row.status not in FINAL_STATUSES}
    if not unfinished:
        return []
    lineage = lineage_starts(store)  # (results of a configuration an exploit replaced are not the trial's now)
    decided: dict[str, ResultRow] = {}
    for result in store.results(latest_attempt_only=False):
        if result.trial_id in unfinished and result.trial_id not in decided and result.metrics.get("done") \
                and result.attempt >= lineage.get(result.trial_id, 0):
            decided[result.trial_id] = result
    for event in store.events(SEARCHER_STOP_EVENT):  # stopped paused, by its searcher, before the interrupt
        attempt = (event.data or {}).get("attempt", 0)
        if event.trial_id in unfinished and event.trial_id not in decided and isinstance(attempt, int) \
                and attempt >= lineage.get(event.trial_id, 0):
            row = unfinished[event.trial_id]  # (paused at its last result)
            decided[event.trial_id] = ResultRow(event.trial_id, attempt, row.last_iteration, event.ts,
                                                row.last_result or {})
    if not decided:
        return []
    told = {event.trial_id for event in store.events(SEARCHER_TOLD_END_EVENT) if event.trial_id in decided
            and (event.data or {}).get("attempt", 0) >= lineage.get(event.trial_id, 0)}
    now = time.time()
    with store.transaction():
        for trial_id, result in decided.items():
            store.update_trial(trial_id, status=TERMINATED, stop_reason=OUT_STOPPED, finished_at=now,
                               last_iteration=result.iteration,
                               **({"last_result": result.metrics} if result.metrics else {}))
            if trial_id not in told:
                searcher.on_trial_complete(trial_id, with_flat_keys(result.metrics) if result.metrics else None,
                                           error=False)
        store.add_events([(now, DECIDED_END_EVENT, trial_id, None, {"attempt": result.attempt,
                                                                     "iteration": result.iteration})
                          for trial_id, result in decided.items()])
        store.set_searcher_state(searcher.state_json())  # (and the logged calls go: the state has them)
    logger.info("resume: %s ended where the interrupted run had stopped them: %s", plural(len(decided), "trial"),
                ", ".join(sorted(decided)))
    return sorted(decided)


def _restore(searcher: BaseSearcher, store: ExperimentStore) -> None:
    """:func:`restore` for a resumed run (whose searcher :func:`_check_searcher_kind` checked).

    Raises:
        ConfigError: The searcher's saved state does not load into it.
    """
    try:
        restore(searcher, store)
    except (ConfigError, StoreError):
        raise
    except Exception as e:  # noqa: BLE001 - a searcher's load_state_dict may fail in any way on a foreign state
        raise ConfigError(f"searcher: the experiment's saved searcher state does not load into this "
                          f"{type(searcher).__name__} ({type(e).__name__}: {e}); resume it with the searcher, and "
                          "the searcher's arguments, it ran with") from e


def _execute(spec: RunSpec, payload: bytes, searcher: BaseSearcher, store: ExperimentStore,
             device_specs: list[DeviceSpec], trials: list[Trial], created_here: bool,
             settings: ExecutorSettings) -> ResultGrid:
    """Run the experiment in ``store`` to its end and return its grid; the store is closed on every way out.

    Raises:
        ConfigError: A rule the results must keep was broken (the metric or a stop key left out). The experiment
            made here is removed when no result was acknowledged yet; else it is kept, marked ERROR. Another
            error removes it too when it holds no trial yet.
        KeyboardInterrupt: The run was interrupted (the experiment is marked INTERRUPTED).
    """
    exp_dir = settings.experiment_dir
    executor: Executor | None = None
    started = time.time()
    try:
        created = _ON_CREATED.get()
        if created_here and created is not None:  # (a front end's file beside the new store: tuner.pkl)
            created(exp_dir)
        executor = Executor(payload, searcher, store, device_specs, settings, trials=trials)
        executor.run()
    except KeyboardInterrupt:
        try:
            store.set_experiment(status=EXP_INTERRUPTED, finished_at=time.time())
        except Exception:  # noqa: BLE001 - the Ctrl-C is what the caller must get (a full disk's error replaced it)
            logger.exception("could not record the interrupted run in its store (it stays RUNNING there; a resume "
                             "continues it all the same)")
        try:
            if spec.verbose >= 1:  # (Ray prints an interrupted run's errored trials too; the summary is a finish's)
                with contextlib.suppress(Exception):  # (the interrupt is what the caller must get)
                    _print_errored_table(ResultGrid.from_store(store), ended_unstarted(store))
        finally:  # (a second Ctrl-C while it prints: the store is closed all the same)
            store.close()
        raise
    except BaseException as e:
        if created_here and not (executor and executor.results_acknowledged) and (
                isinstance(e, ConfigError) or _holds_no_trial(store)):
            # Nothing worth keeping (a typo in the metric; an error before any trial was made: a searcher or a
            # trial_dirname that raised): the experiment goes, so the same name runs once the input is fixed.
            store.close()
            shutil.rmtree(exp_dir, ignore_errors=True)
            raise
        # Any other error, a late result breaking a rule the earlier ones kept included: what the run did is kept.
        with contextlib.suppress(Exception):
            store.set_experiment(status=EXP_ERROR, error=f"{type(e).__name__}: {e}", finished_at=time.time())
        store.close()
        raise
    store.set_experiment(status=EXP_FINISHED, finished_at=time.time())
    assert executor is not None  # (it ran to its end)
    grid = ResultGrid.from_store(store, last_results=executor.last_results(), configs=executor.configs())
    counts = trial_counts_text(store.trials(), live=False)
    unstarted = ended_unstarted(store) if spec.verbose >= 1 else set()
    store.close()
    if spec.verbose >= 1:
        _print_summary(grid, exp_dir, time.time() - started, spec.metric, spec.mode, counts, unstarted)
    if executor.warning_error is not None:  # a trial's warning under an "error" filter (python -W error)
        raise executor.warning_error
    return grid


def _holds_no_trial(store: ExperimentStore) -> bool:
    """Whether the store holds no trial yet (False when it cannot tell: the store may be what failed)."""
    try:
        return not store.trials()
    except Exception:  # noqa: BLE001 - keep what cannot be read
        return False


def _refuse_unused_with_searcher(searcher: BaseSearcher, space: Mapping[str, Any], spec: RunSpec) -> None:
    """A searcher proposes every configuration from its own space, as many as it decides, seeded its own way:
    ``config``, ``num_samples`` and ``seed`` given with it went unused (Ray refuses a ``param_space`` domain next
    to a search algorithm with a space of its own).

    Raises:
        ConfigError: Naming the first of them that was given.
    """
    name = type(searcher).__name__
    if space:
        raise ConfigError(f"config: the searcher ({name}) proposes every configuration from its own space, so "
                          f"config= would go unused (keys {sorted(space)}); put these values, constants too, in "
                          "the searcher's space")
    if spec.num_samples != 1:
        raise ConfigError(f"num_samples: the searcher ({name}) decides how many trials run (give it its own "
                          f"num_samples=, where it has one); got num_samples={spec.num_samples}")
    if spec.seed is not None:
        raise ConfigError(f"seed: the searcher ({name}) draws its configurations itself (give it its own seed=, "
                          f"where it has one); got seed={spec.seed}")


def _with_searchers_metric(spec: RunSpec, searcher: BaseSearcher) -> RunSpec:
    """The run's metric and mode, checked against the searcher's own (ASHA's, PBT's, ...): the run takes them
    when it names none, so the best result, ``fluidsalus inspect`` and the check that results report the metric
    follow the searcher's.

    Raises:
        ConfigError: The run names another metric or mode than the searcher decides by.
    """
    metric, mode = _searchers_objective(spec.metric, spec.mode, searcher)
    if (metric, mode) == (spec.metric, spec.mode):
        return spec
    return spec.model_copy(update={"metric": metric, "mode": mode})


def _searchers_objective(metric: str | None, mode: str | None, searcher: BaseSearcher) -> tuple[str | None, str | None]:
    """:func:`_with_searchers_metric`'s metric and mode: the searcher's own when it decides by one, else the run's.

    Raises:
        ConfigError: The run names another metric or mode than the searcher decides by.
    """
    its_metric, its_mode = getattr(searcher, "metric", None), getattr(searcher, "mode", None)
    if not isinstance(its_metric, str) or its_mode not in ("min", "max"):
        return metric, mode  # (a searcher without one, or a multi-objective one: the run's own stand)
    for field_name, ours, its in (("metric", metric, its_metric), ("mode", mode, its_mode)):
        if ours is not None and ours != its:
            raise ConfigError(f"{field_name}={ours!r}, but the searcher ({type(searcher).__name__}) decides by "
                              f"{field_name}={its!r}: pass the same {field_name}, or leave it to the searcher")
    return its_metric, its_mode


def release_devices() -> int:
    """End the device actors that finished runs of this process keep warm, now.

    A run that ends normally leaves its virtual CPU devices' actors up for ``$FLUIDSALUS_KEEP_WARM_S`` seconds
    (60 by default), so that the next run of the process starts without new worker processes. Meanwhile they hold
    their cores, until other work on the cluster waits for resources (then they go within about half a second).
    Call this to free the cores at once, or before a step that measures a cold start.

    Returns:
        How many actors were ended.
    """
    return WARM_DEVICES.release()


def _connect(address: str | None) -> None:
    """Initialise Ray if this process has not: a local Ray, or the cluster at ``address``.

    Args:
        address: A validated ``RunSpec.address``, or None.

    Raises:
        ConfigError: If nothing answers at ``address``, or Ray is already connected to a cluster whose GCS port
            differs from the one a ``host:port`` address names (host names are not compared: one node has
            several).
    """
    with _CONNECT_LOCK:
        _connect_locked(address)


def _connect_locked(address: str | None) -> None:
    if ray.is_initialized():
        # A ``ray://`` address names the Ray Client server, whose port is not the GCS port: not compared.
        if address is not None and address not in ("auto", "local") and not address.startswith("ray://"):
            connected = ray.get_runtime_context().gcs_address
            if address.rsplit(":", 1)[1] != connected.rsplit(":", 1)[1]:
                raise ConfigError(
                    f"address: this process is already connected to the Ray cluster at {connected}, not "
                    f"{address!r}. Call ray.shutdown() first, or leave address out to use the connected cluster."
                )
        return
    if address is not None and address not in ("auto", "local"):
        host, port = address.removeprefix("ray://").rsplit(":", 1)
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=ADDRESS_CONNECT_TIMEOUT_S).close()
        except OSError as e:
            raise ConfigError(
                f"address: no Ray cluster answers at {address!r} ({e.strerror or e}). Pass the head node's "
                "address as `ray start --head` or `ray status` prints it."
            ) from None
    try:
        init_ray(address)
    except ConnectionError as e:
        raise ConfigError(f"address: cannot connect to a Ray cluster at {address!r} ({e})") from None


def ensure_ray() -> None:
    """Start Ray as :func:`init_ray` does unless this process has initialised it (the Tune front end's start of
    Ray), checked and started under the lock :func:`_connect` holds, so two ``Tuner.fit`` calls started at once from
    two threads start Ray once (the second ``ray.init`` failed, "Perhaps you called ray.init twice by accident?",
    until 2026-12-01)."""
    with _CONNECT_LOCK:
        if not ray.is_initialized():
            init_ray()


def init_ray(address: str | None = None) -> None:
    """Start (or connect to) Ray as fluidsalus does when the script has not: no dashboard, the trials' output on
    the driver's console, and the driver's logging left as it was.

    ``configure_logging=False`` keeps Ray from setting the ``ray`` logger's level and its handlers' format (a
    level or format the script set stays). Ray 2.60 then clears the ``ray`` logger's handlers, which include the
    one ``import ray`` sets on it, so its start lines ("Started a local Ray instance.") stay off fluidsalus's
    console. The handlers are put back after the call, so the ``ray.*`` records logged in the driver during the
    run (PBT's ``[Exploit]`` and ``[Explore]`` lines) show as under Ray Tune, whose ``ray.init()`` keeps that
    handler; unless the call set handlers of its own (Ray's ``LoggingConfig``, from
    ``RAY_LOGGING_CONFIG_ENCODING``, replaces them under Ray Tune too).

    Ray's start changes how the process ends on Ctrl-C and SIGTERM; :func:`fluidsalus._exits.ray_started` makes it
    end as Python would (exit status 130 after a ``KeyboardInterrupt`` nothing caught, SIGTERM's handler as before).

    Args:
        address: As ``ray.init(address=...)``; None for a local Ray or ``$RAY_ADDRESS``.
    """
    ray_logger = logging.getLogger(RAY_LOGGER)
    handlers = list(ray_logger.handlers)
    try:
        with ray_started():  # (Ctrl-C and SIGTERM end the process as Python's: fluidsalus/_exits.py)
            ray.init(address=address, include_dashboard=False, configure_logging=False, log_to_driver=True)
    finally:
        if not ray_logger.handlers:
            for handler in handlers:
                ray_logger.addHandler(handler)


def _check_callbacks(callbacks: Any) -> list[Callback]:
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)) or not all(isinstance(c, Callback) for c in callbacks):
        raise ConfigError("callbacks: must be a list of fluidsalus.callbacks.Callback instances")
    return list(callbacks)


def _check_trainable(trainable: Any) -> str:
    if not callable(trainable):
        raise ConfigError(
            f"trainable: must be a function f(config) that reports with fluidsalus.report(); "
            f"got {type(trainable).__name__}"
        )
    if isinstance(trainable, type):
        raise ConfigError(
            f"trainable: class trainables ({trainable.__name__}) are not supported by fluidsalus.run; "
            "pass a function f(config)"
        )
    return callable_name(trainable)


def _pack(trainable: Any, rule: Any, host_options: dict[str, Any]) -> bytes:
    """Pickle the trainable and stop rule (and the run's device settings) once for every device; an
    unpicklable one is a ConfigError."""
    try:
        return pack_trainable(trainable, for_devices(rule), host_options)  # (a stopper's device view)
    except Exception as e:  # noqa: BLE001 - pickling can fail with any exception type
        # a front end's wrapper names the user's argument it carries (fluidsalus.optuna: "objective")
        field = str(getattr(trainable, "error_field", "trainable"))
        with contextlib.suppress(Exception):
            ray_cloudpickle.dumps(trainable)
            field = "stop"
        raise ConfigError(
            f"{field}: cannot be pickled to send it to the device actors ({type(e).__name__}: {e}). Create "
            "objects such as locks, open files, sockets or clients inside the function instead of "
            "capturing them."
        ) from None


def _check_writable(storage: str) -> None:
    if os.path.lexists(storage) and not os.path.isdir(storage):  # (it said "is not writable (File exists)")
        raise ConfigError(f"storage_path: {storage!r} is a file, not a folder. Pass a folder you can write to.")
    try:
        os.makedirs(storage, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=storage, prefix=".write_test_"):
            pass
    except OSError as e:
        raise ConfigError(
            f"storage_path: {storage!r} is not writable ({e.strerror or e}). Pass a folder you can write to."
        ) from None


def _describe(spec: RunSpec, space: Mapping[str, Any], stop: Any, trainable_name: str,
              searcher: BaseSearcher) -> dict[str, Any]:
    return {
        "trainable": trainable_name,
        "searcher": type(searcher).__name__,  # (a resume must bring one of the same kind)
        "space": _describe_space(space),
        "stop": stop if isinstance(stop, Mapping) else (repr(stop) if stop is not None else None),
        **spec.model_dump(exclude={"name", "storage_path", "resume"}),
    }


def _describe_space(space: Mapping[str, Any]) -> dict[str, str]:
    """The search space as an experiment stores it: its flattened keys and their values' reprs."""
    return {k: repr(v) for k, v in sp.flatten_space(dict(space), strict=False).items()} if space else {}


def _load_trials(store: ExperimentStore) -> list[Trial]:
    """The trials of a stored experiment; unfinished ones restart from their latest whole checkpoint."""
    latest: dict[str, dict[str, Any]] = {}
    for c in store.checkpoints():  # in the order they were taken; a checkpoint on disk is whole (renamed in)
        if os.path.isdir(c["path"]):
            latest[c["trial_id"]] = c
    out = []
    folders = store.trial_dirs()
    # The objects a trial began with (a class, a function, a tuple), where JSON holds only their repr: a resumed
    # trial got the strings (a helper's side-by-side run: config["cls"]() failed after Tuner.restore)
    pickled = store.configs()
    for row in store.trials():
        final = row.status in ("TERMINATED", "ERROR")
        trial = Trial(
            trial_id=row.trial_id,
            seq=row.seq,
            config=pickled.get(row.trial_id, row.config),
            trial_dir=folders[row.trial_id],
            group_id=row.group_id,
            budget=row.budget,
            status=row.status,
            attempt=row.attempt if final else row.attempt + 1,
            last_iteration=row.last_iteration,
            last_result=row.last_result,
            checkpoint_path=row.checkpoint_path,
            num_failures=row.num_failures,
        )
        if not final:
            resume_from(trial, latest.get(row.trial_id))
        out.append(trial)
    return out


def _renew_object_refs(trials: list[Trial], space: Mapping[str, Any]) -> None:
    """Give the unfinished trials of a resumed run the object refs the search space holds now, at the paths where
    it holds them: those they began with may have died with the driver that made them. Ray Tune's
    ``Tuner.restore(param_space=...)`` is for this ("the only part that will be used during restore are the
    updated object references"); its continued trials got the old refs (a helper's side-by-side run)."""
    refs: list[tuple[tuple[str, ...], Any]] = []

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        for key, value in node.items():
            if isinstance(value, ray.ObjectRef):
                refs.append(((*path, key), value))
            elif isinstance(value, Mapping):
                walk(value, (*path, key))

    walk(space, ())
    if not refs:
        return
    for trial in trials:
        if trial.status in ("TERMINATED", "ERROR"):
            continue
        trial.config = _copy_dicts(trial.config)
        for path, ref in refs:
            node: Any = trial.config
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict) and path[-1] in node:
                node[path[-1]] = ref


def _copy_dicts(value: Any) -> Any:
    """``value`` with its nested dicts copied (their other values shared)."""
    return {k: _copy_dicts(v) for k, v in value.items()} if isinstance(value, dict) else value


def _print_summary(grid: ResultGrid, exp_dir: str, elapsed: float, metric: str | None, mode: str | None,
                   counts: str, unstarted: Collection[str] = ()) -> None:
    # (``counts``: the trials counted as ``fluidsalus ls`` counts them, "1 error, 8 terminated, 6 of them never
    # started": those a time budget left queued are terminated in Ray's status line too)
    counted = f" ({counts})" if counts else ""  # (none for a run of no trial)
    line = f"fluidsalus: {plural(len(grid), 'trial')} in {elapsed:.1f}s{counted} -> {exp_dir}"
    if metric and mode:
        try:
            best = grid.get_best_result()
            # (a nested metric, "eval/loss", read from its nested result: ``best.metrics[metric]`` raised a KeyError
            # there once every trial had ended, where get_best_result and Ray's best-trial line read it)
            line += (f"\nBest {metric}={format_metric(lookup_metric(best.metrics or {}, metric))} with config "
                     f"{best.config}")
        except RuntimeError:
            pass
    print(line, flush=True)
    _print_errored_table(grid, unstarted)


#: The header of the table of errored trials under the run's summary: Ray Tune's words for its columns.
ERRORED_HEADER = ("Trial name", "# failures", "error file")

#: The marks after a failure count in that table, for a trial that failed but is not errored now, and the note under
#: the table for each mark used: Ray's ``*`` for one retried to its end; and, where Ray marks them ``*`` too, one
#: that ended without running again after its failure (a restore that ended at once, ``Executor._check_end``, or a
#: run's end that met it queued for a retry: Ray's note, which is not true of it, comes with its ``*``) and one still
#: unfinished (an interrupted run's: its resume runs it on; Ray prints no note for its ``*``).
RETRIED_MARK, UNSTARTED_MARK, UNFINISHED_MARK = "*", "+", "~"
ERRORED_NOTES = {RETRIED_MARK: "* The trial terminated successfully after retrying.",
                 UNSTARTED_MARK: "+ The trial ended without running again after its failure.",
                 UNFINISHED_MARK: "~ The trial is unfinished: a resume of the experiment runs it on."}


def ended_unstarted(store: ExperimentStore) -> set[str]:
    """The trials whose last attempt ended before it began: their last ``trial_end`` event says ``started: False``
    (``Executor._end_unstarted`` and the ends of trials prefetched onto a device that had not begun them)."""
    last: dict[str, bool] = {}
    for event in store.events("trial_end"):
        if event.trial_id is not None:
            last[event.trial_id] = (event.data or {}).get("started") is False
    return {trial_id for trial_id, unstarted in last.items() if unstarted}


def _failure_mark(status: str, unstarted: bool) -> str:
    """The mark of a trial with an ``error.txt`` in the errored-trials table (:data:`ERRORED_NOTES`)."""
    if status == ERROR:
        return ""
    if status == TERMINATED:
        return UNSTARTED_MARK if unstarted else RETRIED_MARK
    return UNFINISHED_MARK


def _print_errored_table(grid: ResultGrid, unstarted: Collection[str] = ()) -> None:
    """Print, as Ray Tune does at a run's end (an interrupted one's too), ``Number of errored trials: N`` and a table
    of each trial that failed (its ``error.txt`` is there: one that errored, and one that failed since, its count
    marked as :data:`ERRORED_NOTES` says, with the notes of the marks used under it): its name (the Tune front end's
    ``<trainable>_<id>`` or ``trial_name_creator``'s, else its id), its failures and its ``error.txt``; nothing when
    none failed. ``unstarted``: the trials whose last attempt ended before it began (:func:`ended_unstarted`).

    A trial ``Tuner.restore(restart_errored=True)`` ran again anew (its failures counted from 0 again) is not listed
    until it fails again: Ray restarts it as a new trial, with no error file, so its table never lists it (it was
    listed with ``0*`` or ``0+`` failures)."""
    rows = [(r._trial_name or r.trial_id,
             f"{r._num_failures}{_failure_mark(str(r.status), r.trial_id in unstarted)}",
             os.path.join(r.path, ERROR_FILE))
            for r in grid if r.path and os.path.exists(os.path.join(r.path, ERROR_FILE))
            and (r.status == ERROR or r._num_failures > 0)]
    if not rows:
        return
    widths = [max(len(row[i]) for row in [ERRORED_HEADER, *rows]) for i in range(len(ERRORED_HEADER))]
    lines = [f"Number of errored trials: {len(rows)}"]
    for name, failures, path in [ERRORED_HEADER, *rows]:  # (the count right-aligned, as Ray's)
        lines.append(f"{name.ljust(widths[0])}  {failures.rjust(widths[1])}  {path}")
    lines += [note for mark, note in ERRORED_NOTES.items() if any(failures.endswith(mark) for _, failures, _ in rows)]
    print("\n".join(lines), flush=True)
