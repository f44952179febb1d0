"""``Tuner``: Ray Tune's entry point, run by ``fluidsalus.run``.

``Tuner(trainable, param_space=..., tune_config=..., run_config=...).fit()`` combines the search algorithm,
the scheduler, ``param_space`` and ``metric``/``mode`` into one fluidsalus searcher
(:func:`fluidsalus.tune._translate.plan`), wraps the trainable (``with_parameters`` objects go to Ray's object
store once), and calls :func:`fluidsalus.run` with the run settings taken from ``RunConfig``:

============================================  ==============================================
Ray                                           fluidsalus.run
============================================  ==============================================
RunConfig.name / storage_path                 name / storage_path (default ``~/ray_results``)
RunConfig.stop (dict, callable, Stopper)      stop (plus the rules the translation adds)
RunConfig.verbose                             verbose
RunConfig.callbacks                           callbacks (Ray hooks through an adapter)
FailureConfig.max_failures / fail_fast        max_failures / fail_fast
CheckpointConfig.num_to_keep / score_*        checkpoint_num_to_keep / checkpoint_score_*
TuneConfig.num_samples                        num_samples (-1: until the time budget / stop_all)
TuneConfig.max_concurrent_trials              max_concurrent_trials
TuneConfig.time_budget_s                      time_budget_s
Tuner.restore(path, ...).fit()                resume=True on the same experiment (after the restore flags are
                                              applied to the store: see :meth:`Tuner.restore`)
============================================  ==============================================

The experiment folder gets a ``tuner.pkl`` (param_space, TuneConfig and RunConfig, as Ray keeps one) as soon as
the run's store is created, before the devices start, so :meth:`Tuner.restore` can rebuild the same Tuner after a
crash.

As in Ray, the first Ctrl-C (or SIGUSR1) during :meth:`Tuner.fit` stops the trials, saves the experiment and
returns its results so far, with a warning that says how to resume; a second Ctrl-C raises ``KeyboardInterrupt``,
as does one during the devices' start (:mod:`fluidsalus.tune._interrupt`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import inspect
import json
import logging
import os
import re
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ray
from ray import cloudpickle  # (Ray's: the standalone one names functions pickled by value <dynamic-code>)

from fluidsalus.api import (
    check_resume,
    check_same_run,
    end_kept_from_searcher,
    ensure_ray,
    on_created,
    on_resume,
    raised_trial,
    resume_view,
    run,
    space_in_searcher,
)
from fluidsalus.callbacks import Callback as EngineCallback
from fluidsalus.checkpoint import write_atomically
from fluidsalus.errors import ConfigError
from fluidsalus.gpu.host import decides_stop_all, for_devices, stop_rule
from fluidsalus.result import ResultGrid
from fluidsalus.searchers import PBT, BaseSearcher, MedianStopping
from fluidsalus.searchers._pbt_replay import write_policy_files
from fluidsalus.session import DATE_FORMAT
from fluidsalus.store import (
    DB_FILENAME,
    ERROR,
    FINAL_STATUSES,
    PENDING,
    RUNNING,
    TERMINATED,
    ExperimentStore,
    dumps,
    remove_folder,
    unused_name,
)
from fluidsalus.trialgroup.executor import search_ended_by
from fluidsalus.tune._config import INFINITE_SAMPLES, CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from fluidsalus.tune._custom_scheduler import ScheduledSearch
from fluidsalus.tune._custom_search import defined_by_user, runner_of
from fluidsalus.tune._interrupt import StopSignals
from fluidsalus.tune._output import log_files
from fluidsalus.tune._ray_objects import adopt_scheduler
from fluidsalus.tune._tags import PARAMS_FILE, SEARCHER, TAG_KEY, Tagger
from fluidsalus.tune._trainable import (
    MANY_GPUS_WARNING,
    NO_GPU_WARNING,
    UNSCHEDULED_RESOURCES_WARNING,
    ClassOptions,
    Prepared,
    adopt_ray_trainable,
    check_task_gpus,
    cpu_request,
    gpu_hint,
    is_class_trainable,
    make_entry,
    probe_request,
    trainable_name,
    unscheduled_resources,
)
from fluidsalus.tune._translate import Plan, plan
from fluidsalus.tune._workdir import chdir_to_trial_dir
from fluidsalus.tune.analysis import written_by_ray
from fluidsalus.tune.callback import RayCallbackAdapter, TrialInfo
from fluidsalus.tune.logger import PROGRESS_FILE, RESULT_FILE, default_loggers, translate_ray_logger
from fluidsalus.tune.progress_reporter import ReporterCallback
from fluidsalus.tune.registry import resolve_trainable
from fluidsalus.tune.utils import date_str, flatten_dict

__all__ = ["TUNER_STATE_FILE", "Tuner"]

logger = logging.getLogger(__name__)

#: The file in the experiment folder that lets :meth:`Tuner.restore` rebuild the Tuner (Ray's name for it).
TUNER_STATE_FILE = "tuner.pkl"
#: Version of what ``tuner.pkl`` holds.
_STATE_VERSION = 1
#: Hex digits of the id of a trial a search algorithm makes (``OptunaSearch``, ``HyperOptSearch``, a ``Searcher`` of
#: your own): Ray's ``SearchGenerator`` gives it ``Trial.generate_id()``, the first 8 of a random UUID's. The trials
#: of ``BasicVariantGenerator`` (the default search) keep the engine's ``<5 hex>_<number>``, Ray's form for them.
SEARCH_TRIAL_ID_HEX = 8


def search_trial_id() -> str:
    """A new id of a search algorithm's trial, as Ray's ``Trial.generate_id()`` makes it (``c81718b6``)."""
    return uuid.uuid4().hex[:SEARCH_TRIAL_ID_HEX]


#: Characters a default experiment name may not hold (``<lambda>`` becomes ``lambda``).
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.=+-]+")
#: Ray's environment variable for the length of a default trial folder name before its date, and its default.
MAX_LEN_IDENTIFIER_ENV, DEFAULT_MAX_LEN_IDENTIFIER = "TUNE_MAX_LEN_IDENTIFIER", 130
#: The characters Ray replaces in a trial folder name (``/``, parentheses, and the characters Windows reserves).
_RAY_UNSAFE_DIRNAME = re.compile(r'[/()<>:"\\|?*]')
#: Default experiment name prefix when the trainable's name has no usable character.
_FALLBACK_NAME = "trainable"
#: ``stop_reason`` of an unfinished trial that ``Tuner.restore(resume_unfinished=False)`` ends.
NOT_RESUMED = "not_resumed"
#: How the warning after an interrupted :meth:`Tuner.fit` says to resume (Ray's words).
RESUME_HINT = 'Tuner.restore(path="{path}", trainable=...)'
#: Store event recording what ``Tuner.restore``'s flags did to each trial.
_RESTORE_EVENT = "restore_flags"
#: Ray's callback hooks; an object with any of them is run through :class:`RayCallbackAdapter`.
_RAY_HOOKS = ("setup", "on_trial_start", "on_trial_result", "on_trial_complete", "on_trial_error",
              "on_experiment_end", "on_step_begin", "on_step_end", "on_checkpoint", "on_trial_save",
              "on_trial_restore", "on_trial_recover")


# ---------------------------------------------------------------------------------------------------------
# Stop rules
# ---------------------------------------------------------------------------------------------------------


class AnyStop:
    """Stops a trial when any of ``rules`` says so; every rule sees every result (stateful stoppers)."""

    def __init__(self, rules: list[Callable[[str, Mapping[str, Any]], bool]]) -> None:
        self.rules = list(rules)

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        return any([bool(rule(trial_id, result)) for rule in self.rules])


class AnyStopWithStopper(AnyStop):
    """:class:`AnyStop` whose first rule is a Stopper; its ``stop_all()`` ends the experiment."""

    def __init__(self, stopper: Any, rules: list[Callable[[str, Mapping[str, Any]], bool]]) -> None:
        super().__init__([stopper, *rules])
        self.stopper = stopper

    def stop_all(self) -> bool:
        return bool(self.stopper.stop_all())

    def decides_stop_all(self) -> bool:
        """Whether the stopper's ``stop_all()`` may end the run (``gpu.host.decides_stop_all``)."""
        return decides_stop_all(self.stopper)

    def for_devices(self) -> AnyStop:
        """The stopper's device view (``stopper.for_devices``) with the other rules."""
        return AnyStop([for_devices(self.stopper), *self.rules[1:]])

    def with_stopper(self, stopper: Any) -> AnyStopWithStopper:
        """The same added rules around another stopper: a resumed run's saved one (``fluidsalus.stopper_state``),
        with the rules this run's translation adds, not those of the run that saved it."""
        return AnyStopWithStopper(stopper, self.rules[1:])


def combine_stops(stop: Any, extra: list[Callable[[str, Mapping[str, Any]], bool]]) -> Any:
    """The user's ``stop`` with the rules a translation adds (the user's own when there are none). A dict of
    thresholds checks as Ray's does: a key a result lacks is a warning (once per key), not an error, and ``"a/b"``
    also names a nested value (``stop_rule(missing="warn")``)."""
    if isinstance(stop, Mapping):
        stop = stop_rule(stop, missing="warn")
    if not extra:
        return stop
    if callable(getattr(stop, "stop_all", None)):
        return AnyStopWithStopper(stop, extra)
    rule = stop_rule(stop)
    return AnyStop(([rule] if rule is not None else []) + extra)


# ---------------------------------------------------------------------------------------------------------
# Callbacks
# ---------------------------------------------------------------------------------------------------------


def ray_default_dirname(trial: TrialInfo) -> str:
    """Ray's default folder name of a trial: ``<str(trial)>_<experiment_tag>``, cut to
    ``TUNE_MAX_LEN_IDENTIFIER`` characters (130 by default), then ``_<date>``, with the characters Ray strips
    (``/()<>:"\\|?*``) made ``_``.

    Raises:
        ConfigError: ``TUNE_MAX_LEN_IDENTIFIER`` is not a positive int.
    """
    raw = os.environ.get(MAX_LEN_IDENTIFIER_ENV, str(DEFAULT_MAX_LEN_IDENTIFIER))
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ConfigError(f"{MAX_LEN_IDENTIFIER_ENV} must be a positive int (got {raw!r})")
    name = f"{trial}_{trial.experiment_tag}"[:limit] + f"_{date_str()}"
    return _RAY_UNSAFE_DIRNAME.sub("_", name)


def _dirname_function(creator: Callable[[TrialInfo], str] | None, experiment_dir: str,
                      trainable_name: str, tags: Tagger, name_creator: Callable[[TrialInfo], str] | None,
                      names: dict[str, Any], request: Any = None) -> Callable[[str, Mapping[str, Any]], str]:
    """The engine's ``trial_dirname(trial_id, config)`` from Ray's ``trial_dirname_creator(trial)`` (None: Ray's
    default, :func:`ray_default_dirname`): the creator is given each new trial's :class:`TrialInfo` (Ray gives its
    ``Trial``), with the ``experiment_tag`` the engine asked ``tags`` for just before. Ray's default name uses
    ``trial_name_creator``'s name, which is kept in ``names`` for the callbacks (one call per trial, as Ray)."""

    def dirname(trial_id: str, config: Mapping[str, Any]) -> str:
        trial = TrialInfo(trial_id, dict(config), path=os.path.join(experiment_dir, trial_id),
                          trainable_name=trainable_name, tag=tags.latest or None, request=request)
        if name_creator is not None:  # (its name is also the trial's get_context().get_trial_name())
            names[trial_id] = named = name_creator(trial)  # checked where the callbacks use it
            trial.custom_trial_name = named if isinstance(named, str) else None
        if creator is None:
            return ray_default_dirname(trial)
        return creator(trial)

    dirname.error_field = "TuneConfig: trial_dirname_creator"  # type: ignore[attr-defined]  # (its errors name it)
    return dirname


class _PolicyFiles(EngineCallback):
    """Ray's ``pbt_global.txt`` and ``pbt_policy_<trial>.txt`` from a PBT/PB2 searcher's exploit log, written
    whole whenever the log changed, at the end of a pass of the driver loop (Ray writes them at each
    exploit), and once more when ``fit()`` ends. The log is the searcher's saved state, so a continued run
    writes them whole again. A trial's file whose only exploit was undone is removed.

    Args:
        searcher: The run's searcher (anything but PBT or PB2 with ``log_config`` writes nothing).
        experiment_dir: The experiment's folder.
    """

    def __init__(self, searcher: BaseSearcher, experiment_dir: str) -> None:
        self.searcher = searcher if isinstance(searcher, PBT) and searcher.log_config else None
        self.experiment_dir = experiment_dir
        self._version: int | None = None  # the log's version last written
        self._written: set[str] = set()

    def on_step_end(self) -> None:
        if self.searcher is not None and self.searcher.exploit_log_version != self._version:
            self.write()

    def write(self) -> None:
        """Write the files from the log now (nothing when the searcher keeps none or the folder is gone)."""
        if self.searcher is None or not os.path.isdir(self.experiment_dir):
            return
        self._version = self.searcher.exploit_log_version
        try:
            written = set(write_policy_files(self.experiment_dir, self.searcher.exploit_log))
            for stale in self._written - written:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(stale)
            self._written = written
        except OSError as exc:
            logger.warning("Writing the PBT policy files in %s failed: %s", self.experiment_dir, exc)


def _split_callbacks(callbacks: list[Any] | None) -> tuple[list[EngineCallback], list[Any]]:
    engine, ray_style = [], []
    for index, given in enumerate(callbacks or []):
        callback = translate_ray_logger(given)  # Ray's JSON/CSV loggers (an import left unchanged)
        if isinstance(callback, EngineCallback):
            engine.append(callback)
        elif any(callable(getattr(callback, hook, None)) for hook in _RAY_HOOKS):
            ray_style.append(callback)
        else:
            raise ConfigError(
                f"RunConfig: callbacks[{index}] must be a fluidsalus.tune.Callback (Ray's hooks) or a "
                f"fluidsalus.callbacks.Callback (got {type(callback).__name__})"
            )
    return engine, ray_style


#: The result key a Ray callback sets to ask for a checkpoint, as its source spells it (``"should_checkpoint"`` or
#: the constant ``SHOULD_CHECKPOINT``; matched ignoring case).
_SHOULD_CHECKPOINT_TEXT = "should_checkpoint"


def _mentions_should_checkpoint(callback: Any) -> bool:
    """Whether the source of a module that defines one of ``callback``'s classes of the user's own mentions
    ``should_checkpoint`` (True when a source cannot be read: the callback may ask, for all we know)."""
    for cls in type(callback).__mro__:
        if cls.__module__.startswith(("ray.", "fluidsalus.", "builtins")):
            continue
        module = sys.modules.get(cls.__module__)
        try:
            source = inspect.getsource(module) if module is not None else None
        except (OSError, TypeError):
            source = None
        if source is None or _SHOULD_CHECKPOINT_TEXT in source.lower():
            return True
    return False


def _may_ask_for_checkpoints(engine: list[EngineCallback], ray_style: list[Any]) -> bool:
    """Whether a callback of the user's own may ask for a checkpoint of a result: a Ray callback's own
    ``on_trial_result`` (or a ``LoggerCallback``'s own ``log_trial_result``, which gets the same dict) may set
    ``should_checkpoint`` if its module's source mentions it, and an engine callback may override
    ``checkpoint_requests``. fluidsalus's own loggers and reporters never ask, nor does a callback that only
    logs results."""
    hooks = ("on_trial_result", "log_trial_result")
    return any(any(defined_by_user(c, hook) for hook in hooks) and _mentions_should_checkpoint(c)
               for c in ray_style) \
        or any(defined_by_user(c, "checkpoint_requests") for c in engine)


class _SaveOnFirstEvent(EngineCallback):
    """Writes ``tuner.pkl`` once: when a new run's store is created, before the devices start
    (:func:`fluidsalus.api.on_created` calls :meth:`save_once`; Ray writes it as ``fit`` begins), or for a resume at
    the beginning of the driver loop's first pass, or at a trial's first event if that came first. (It was written at
    the first trial event only: a driver killed between the commit of the first trials, with their searcher's state,
    and their start, or during the devices' start, left a store that ``Tuner.restore`` refused and
    ``tune.run(resume=True)`` left for a new experiment of another name.)"""

    def __init__(self, save: Callable[[], None]) -> None:
        self._save: Callable[[], None] | None = save

    def save_once(self) -> None:
        """Write it, unless it was written already."""
        if self._save is not None:
            save, self._save = self._save, None
            save()

    def on_step_begin(self) -> None:
        self.save_once()

    def on_trial_start(self, trial_id: str, config: Mapping[str, Any], attempt: int) -> None:
        self.save_once()

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        self.save_once()

    def on_trial_complete(self, trial_id: str, status: str, result: Mapping[str, Any] | None) -> None:
        self.save_once()


class _ArmOnFirstStep(EngineCallback):
    """Arms the fit's :class:`~fluidsalus.tune._interrupt.StopSignals` at the end of the driver loop's first pass,
    once the devices are up and the first trials made: a Ctrl-C before that raises ``KeyboardInterrupt`` from
    ``fit()`` (the experiment left restorable), as Ray's before its tuning loop, whose handler is set once its
    set-up is done; it returned an empty ``ResultGrid`` (armed at the pass's beginning, a Ctrl-C before its trials
    were made did still: h191's F2). A restore is armed from the start (:meth:`Tuner.fit`)."""

    def __init__(self, signals: StopSignals) -> None:
        self._signals = signals

    def on_step_end(self) -> None:
        self._signals.arm()


# ---------------------------------------------------------------------------------------------------------
# Configs given as Ray's objects (an import left unchanged)
# ---------------------------------------------------------------------------------------------------------


def _from_ray(value: Any, cls: type, field: str, warn: bool = True) -> Any:
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if type(value).__name__ == cls.__name__ and type(value).__module__.startswith("ray."):
        names = [f.name for f in dataclasses.fields(cls)]
        kwargs = {name: getattr(value, name) for name in names if hasattr(value, name)}
        if cls is RunConfig:
            kwargs["verbose"] = getattr(value, "_verbose", kwargs.get("verbose"))
            for name in ("sync_config", "local_dir", "storage_filesystem"):
                kwargs.pop(name, None)
            for name, sub in (("failure_config", FailureConfig), ("checkpoint_config", CheckpointConfig)):
                if kwargs.get(name) is not None:
                    kwargs[name] = _from_ray(kwargs[name], sub, f"{field}.{name}", warn=False)
        if warn:
            warnings.warn(
                f"fluidsalus.tune: {field} is Ray Tune's {cls.__name__}; it was translated into "
                f"fluidsalus.tune.{cls.__name__}. Change the import to `from fluidsalus.tune import {cls.__name__}`.",
                UserWarning,
                stacklevel=4,
            )
        return cls(**kwargs)
    raise ConfigError(f"Tuner: {field} must be None or a fluidsalus.tune.{cls.__name__} (got {type(value).__name__})")


# ---------------------------------------------------------------------------------------------------------
# The Tuner
# ---------------------------------------------------------------------------------------------------------


class NotRestorableError(ConfigError, FileNotFoundError):
    """``Tuner.restore`` of a folder that holds no fluidsalus.tune experiment: a :class:`ConfigError` that is also
    the ``FileNotFoundError`` Ray raises there."""


def _total_samples(searcher: Any, num_samples: int, endless: bool) -> int | None:
    """The run's trials as Ray counts them for ``Callback.setup(total_num_samples=...)`` and the progress table:
    the variants of the search when it makes them from the space (its grid and points; also under a scheduler,
    which Ray runs over its ``BasicVariantGenerator``), else ``num_samples`` (a model-based search, repeats:
    Ray's ``SearchGenerator`` count), None when unknown (a draw makes grids). An endless run counts as Ray counts
    it: ``sys.maxsize`` samples (Ray passed that where fluidsalus passed None: a helper's side-by-side run).

    Under ASHA or a scheduler of the user's own it was ``num_samples`` (2 for a grid of 3 values times 2, where
    Ray says 6: a helper's side-by-side run).
    """
    while isinstance(searcher, (MedianStopping, ScheduledSearch)):  # (they decide on the trials, not make them)
        searcher = searcher.inner
    return getattr(searcher, "total_samples", sys.maxsize if endless else num_samples)


class _Pickled:
    """Bytes of a cloudpickled object that unpickle as that object (in tuner.pkl)."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return cloudpickle.loads, (self.blob,)


class Tuner:
    """Tune a trainable's hyperparameters (``ray.tune.Tuner``).

    Args:
        trainable: A function ``f(config)`` that calls :func:`fluidsalus.tune.report`, a
            :class:`fluidsalus.tune.Trainable` subclass, or either wrapped by ``with_parameters`` /
            ``with_resources``.
        param_space: The search space: constants, ``tune.uniform(...)`` and other domains,
            ``tune.grid_search([...])``, nested dicts.
        tune_config: A :class:`TuneConfig` (metric, mode, search algorithm, scheduler, samples, ...).
        run_config: A :class:`RunConfig` (name, storage_path, stop, callbacks, failure and checkpoint configs).
    """

    def __init__(
        self,
        trainable: Any = None,
        *,
        param_space: dict[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
    ) -> None:
        if param_space is not None and not isinstance(param_space, Mapping):
            raise ConfigError(f"Tuner: param_space must be None or a dict (got {type(param_space).__name__})")
        self._trainable = resolve_trainable(trainable)  # a name given to tune.register_trainable
        #: The name given to ``tune.register_trainable`` (None: the object itself was given). As in Ray, the
        #: experiment and its trials are named after it.
        self._registered_name: str | None = trainable if isinstance(trainable, str) else None
        self._param_space = dict(param_space) if param_space is not None else None
        self._tune_config: TuneConfig = _from_ray(tune_config, TuneConfig, "tune_config")
        self._run_config: RunConfig = _from_ray(run_config, RunConfig, "run_config")
        self._experiment_dir: str | None = None
        self._resume = False
        self._restore_flags: dict[str, bool] | None = None  # applied to the store at the next fit()
        #: The run's resource request as the last fit() gave its trials (a dict, a function of the config, or None).
        self.request: Any = None
        self._results: ResultGrid | None = None
        self._resume_hint = RESUME_HINT  # tune.run names its own way to resume
        # What CheckpointConfig(checkpoint_at_end=None) means for a class Trainable: True under Ray's Tuner,
        # False under tune.run (which sets this).
        self._checkpoint_at_end_by_default = True
        self.interrupted = False  #: Whether the last fit() was ended by a stop signal (Ctrl-C).
        self.plan: Plan | None = None  #: The translation of the last fit() (searcher, metric, ...).

    # ------------------------------------------------------------------ restore

    @classmethod
    def can_restore(cls, path: str | os.PathLike[str], storage_filesystem: Any = None) -> bool:
        """Whether ``path`` is an experiment folder that :meth:`restore` can continue.

        Args:
            path: The experiment folder (``<storage_path>/<name>``).
            storage_filesystem: Not supported (must be None).
        """
        if storage_filesystem is not None:
            raise ConfigError("Tuner.can_restore: storage_filesystem is not supported by fluidsalus")
        folder = os.path.abspath(os.path.expanduser(os.fspath(path)))
        return os.path.isfile(os.path.join(folder, DB_FILENAME)) and os.path.isfile(
            os.path.join(folder, TUNER_STATE_FILE))

    @classmethod
    def restore(
        cls,
        path: str,
        trainable: Any,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: dict[str, Any] | None = None,
        storage_filesystem: Any = None,
    ) -> Tuner:
        """Continue an interrupted (or finished) experiment (``ray.tune.Tuner.restore``).

        Finished trials are kept. The search algorithm and scheduler continue from their saved state. The flags
        take effect when :meth:`fit` starts:

        - unfinished trials resume from their last checkpoint (or start again without one); with
          ``resume_unfinished=False`` they are ended as TERMINATED instead (the searcher is told they completed);
        - errored trials stay errored, unless ``resume_errored=True``: then they run again from their last
          checkpoint (from scratch without one), keeping their id, results and failure count, as in Ray; or
          ``restart_errored=True``: then they start again from scratch, with their checkpoints deleted. Ray
          gives a restarted trial a new id; fluidsalus keeps the id and starts a new attempt, whose results
          replace the old ones. ``resume_errored`` wins when both are set, as in Ray;
        - after a ``fail_fast="raise"`` end, the trial whose error was raised is unfinished, as in Ray's saved state
          (Ray raises before it records the failure): it resumes from its last checkpoint (or ends, with
          ``resume_unfinished=False``), whatever the errored-trial flags say;
        - after an end that ended the search (the time budget, a stopper's ``stop_all()``, ``fail_fast=True``), the
          run ends again at once, as Ray's restored run finds its end condition again before a trial starts: the
          errored trials the flags make ``PENDING`` end ``TERMINATED``, unstarted (a restarted one keeps what it had).

        The searcher is not told that an errored trial runs again (it was told that it failed), as in Ray: a
        model-based searcher keeps it as failed, and ASHA/HyperBand make no more decisions on it, so it runs
        to the budget it had.

        Args:
            path: The experiment folder (``<storage_path>/<name>``).
            trainable: The trainable (it is not saved, as in Ray).
            resume_unfinished: Continue unfinished trials (True), or end them (False).
            resume_errored: Run errored trials again from their last checkpoint.
            restart_errored: Run errored trials again from scratch.
            param_space: A param_space to use instead of the saved one (for objects that cannot be pickled). As
                in Ray, the trials that continue take its object refs (``ray.put``), at the paths where it has
                them, in place of theirs, which may have died with the driver that made them.
            storage_filesystem: Not supported (must be None).

        Returns:
            A Tuner whose :meth:`fit` continues the experiment.

        Raises:
            ConfigError: No restorable experiment at ``path`` (a :class:`NotRestorableError`, also a
                ``FileNotFoundError`` as Ray's), an unsupported option, or, as Ray's ``ValueError``, another
                trainable than the experiment's or a ``param_space`` with other keys.
        """
        if storage_filesystem is not None:
            raise ConfigError("Tuner.restore: storage_filesystem is not supported by fluidsalus")
        for name, value in (("resume_unfinished", resume_unfinished), ("resume_errored", resume_errored),
                            ("restart_errored", restart_errored)):
            if not isinstance(value, bool):
                raise ConfigError(f"Tuner.restore: {name} must be True or False (got {value!r})")
        folder = os.path.abspath(os.path.expanduser(os.fspath(path)))
        if not cls.can_restore(folder):
            raise NotRestorableError(
                f"Tuner.restore: path {folder!r} is not a restorable fluidsalus.tune experiment (it needs "
                f"{DB_FILENAME} and {TUNER_STATE_FILE}); check Tuner.can_restore(path) first"
                + (". Ray Tune wrote this folder (its experiment_state file is there): fluidsalus continues the "
                   "experiments it ran itself; continue this one with Ray's Tuner.restore."
                   if written_by_ray(folder) else "")
            )
        state = _read_state(folder)
        run_config = dataclasses.replace(state["run_config"], name=os.path.basename(folder),
                                         storage_path=os.path.dirname(folder))
        if state.get("progress_reporter") is not None:  # (the reporter as the script built it: _save_state)
            run_config = dataclasses.replace(run_config, progress_reporter=state["progress_reporter"])
        tuner = cls(trainable, param_space=param_space if param_space is not None else state["param_space"],
                    tune_config=state["tune_config"], run_config=run_config)
        _check_same_experiment(state, tuner._registered_name or trainable_name(tuner._trainable), param_space)
        tuner._continue(folder, resume_unfinished=resume_unfinished, resume_errored=resume_errored,
                        restart_errored=restart_errored)
        return tuner

    def _continue(self, folder: str, *, resume_unfinished: bool, resume_errored: bool,
                  restart_errored: bool) -> None:
        """Make the next :meth:`fit` continue the experiment in ``folder`` (its RunConfig names that folder)
        with :meth:`restore`'s flags; ``tune.run(resume=...)`` uses it with the configs of its own call."""
        self._experiment_dir = folder
        self._resume = True
        self._restore_flags = {"resume_unfinished": resume_unfinished, "resume_errored": resume_errored,
                               "restart_errored": restart_errored}

    def _apply_restore_flags(self, store: ExperimentStore, searcher: BaseSearcher) -> list[str]:
        """Carry out :meth:`restore`'s flags on the stored trials, once ``fluidsalus.run`` accepted the resume
        (its :func:`~fluidsalus.api.on_resume` hook: a refused resume changes no trial) and before it loads them.

        Errored trials to run again become PENDING (with their checkpoints deleted for a restart); unfinished
        trials not to resume become TERMINATED, and the run's searcher, which holds the saved state, is told they
        completed, and its state saved.

        Args:
            store: The experiment's store, open for writing.
            searcher: The run's searcher, restored from the store.

        Returns:
            The errored trials it made start again from scratch (``restart_errored``), which Ray restarts as new
            trials: their restored stopper forgets them (``fluidsalus.api.on_resume``).
        """
        flags, self._restore_flags = self._restore_flags, None
        restarted: list[str] = []
        if not flags:
            return restarted
        again_errored = flags["resume_errored"] or flags["restart_errored"]
        from_scratch = flags["restart_errored"] and not flags["resume_errored"]
        raised = raised_trial(store)
        if flags["resume_unfinished"] and not again_errored and raised is None:
            return restarted
        now, done, events = time.time(), [], []
        folders = store.trial_dirs()
        # The run's end ended the search (its time budget, stop_all(), fail_fast=True): the run ends again at once, and
        # the errored trials to run again end unstarted (Executor._check_end), as in Ray; a restart keeps what they had
        ends_at_once = search_ended_by(store) is not None
        for row in store.trials():
            if row.trial_id == raised and row.status == ERROR:
                # Ray raised its error before it recorded the failure: its saved state holds the trial unfinished,
                # and its restore runs it on (or ends it, resume_unfinished=False) whatever the errored-trial flags
                # say, with the failure not counted
                action = "resume_raised" if flags["resume_unfinished"] else NOT_RESUMED
                store.update_trial(row.trial_id, error=None, traceback=None, **(
                    {"status": PENDING, "finished_at": None, "stop_reason": None} if flags["resume_unfinished"]
                    else {"status": TERMINATED, "finished_at": now, "stop_reason": NOT_RESUMED}))
                events.append((now, _RESTORE_EVENT, row.trial_id, None, {"action": action}))
                if not flags["resume_unfinished"] and end_kept_from_searcher(store, row.trial_id):
                    done.append(row)  # (the raise kept its end from the searcher: told now, as the others it ends)
            elif row.status == ERROR and again_errored:
                # As Ray's restore: a resumed trial counts the failure that ended it, a restarted one is anew.
                fields: dict[str, Any] = {"status": PENDING, "error": None, "traceback": None,
                                          "finished_at": None, "stop_reason": None,
                                          "num_failures": 0 if from_scratch else row.num_failures + 1}
                with store.transaction():  # (the folders and files go once the rows that stop listing them commit)
                    if from_scratch and not ends_at_once:
                        checkpoints = store.checkpoints(row.trial_id)
                        store.mark_checkpoints_deleted([c["path"] for c in checkpoints])
                        for checkpoint in checkpoints:
                            store.after_commit(functools.partial(remove_folder, checkpoint["path"]))
                        fields.update(checkpoint_path=None, last_iteration=0)
                        # Ray restarts it as a new trial in a new folder: its files hold the new attempt only (they
                        # had both, 1, 2, 1, 2, 3, ...); the store keeps every attempt's results.
                        for name in (RESULT_FILE, PROGRESS_FILE):
                            store.after_commit(functools.partial(
                                Path(folders[row.trial_id], name).unlink, missing_ok=True))
                    store.update_trial(row.trial_id, **fields)
                events.append((now, _RESTORE_EVENT, row.trial_id, None,
                               {"action": "restart_errored" if from_scratch else "resume_errored"}))
                if from_scratch:
                    restarted.append(row.trial_id)
            elif row.status not in FINAL_STATUSES and not flags["resume_unfinished"]:
                store.update_trial(row.trial_id, status=TERMINATED, stop_reason=NOT_RESUMED, finished_at=now)
                events.append((now, _RESTORE_EVENT, row.trial_id, None, {"action": "not_resumed"}))
                done.append(row)
        if done:
            for row in done:
                searcher.on_trial_complete(row.trial_id, row.last_result, error=False)
            store.set_searcher_state(searcher.state_json())  # and the logged calls go: the state has them
        if events:
            store.add_events(events)
        return restarted

    @staticmethod
    def _restore_trials_view(experiment_dir: str, tags: Tagger, names: dict[str, Any] | None,
                             check: Callable[[Mapping[str, Any]], None] | None = None) -> None:
        """A resumed run, before Ray starts: each stored trial keeps the ``experiment_tag`` its last stored result had
        and, into ``names`` when given, the name ``trial_name_creator`` gave it (so the creator is called once per
        trial).

        The store is read under the experiment's driver lock (:func:`fluidsalus.api.resume_view`, which puts it back
        as it was), so a resume beside another driver is refused as ``fluidsalus.run`` refuses it, before Ray starts
        and before a read beside that driver's writes could fail; so is a store this version cannot write, and
        whatever ``check`` refuses of the stored experiment (:func:`fluidsalus.api.check_resume`).

        Raises:
            ConfigError: Another driver is running the experiment, or ``check`` refused it.
            StoreError: Its store cannot be read, or written, by this version.
        """
        if not os.path.isfile(os.path.join(experiment_dir, DB_FILENAME)):
            return
        with resume_view(experiment_dir) as store:  # (changing nothing: fluidsalus.run checks the resume after)
            if check is not None:
                check(store.experiment())
            for row in store.trials():
                stored = (row.last_result or {}).get(TAG_KEY)
                if isinstance(stored, str):
                    tags.restore(row.seq, stored, row.config)
            if names is not None:
                names.update(store.trial_names())

    # ------------------------------------------------------------------ results

    def get_results(self) -> ResultGrid:
        """The results of the last :meth:`fit`, or of the restored experiment as stored.

        Raises:
            RuntimeError: The experiment has not been run yet.
        """
        if self._results is not None:
            return self._results
        if self._experiment_dir and os.path.isfile(os.path.join(self._experiment_dir, DB_FILENAME)):
            return ResultGrid.read(self._experiment_dir)
        raise RuntimeError("Can't return results as experiment has not been run, yet. Call `Tuner.fit()` to run "
                           "the experiment first.")

    # ------------------------------------------------------------------ fit

    def _interrupted_results(self, experiment_dir: str) -> ResultGrid:
        """The results of a run a stop signal ended (its store is flushed), after Ray's warning.

        As in Ray, whose clean-up after the first Ctrl-C stops every trial that had an actor (a pending one
        has one requested), a trial that was running or pending shows as ``TERMINATED`` here; the saved state
        (the store) keeps it ``RUNNING`` or ``PENDING``, so ``Tuner.restore`` continues it (from its checkpoint).
        Paused trials keep their status.
        """
        self.interrupted = True
        hint = self._resume_hint.format(path=experiment_dir)
        logger.warning(f"Experiment has been interrupted, but the most recent state was saved.\n"
                       f"Resume experiment with: {hint}")
        grid = ResultGrid.read(experiment_dir)
        for result in grid:
            if result.status in (RUNNING, PENDING):
                result.status = TERMINATED
        return grid

    def _check_checkpointing(self, class_trainable: bool) -> ClassOptions:
        config = self._run_config.checkpoint_config
        assert config is not None
        frequency = config.checkpoint_frequency or 0
        if not class_trainable and (frequency or config.checkpoint_at_end):
            raise ConfigError(
                "CheckpointConfig: checkpoint_frequency and checkpoint_at_end are not supported for function "
                "trainables (as in Ray): report checkpoints with tune.report(metrics, checkpoint=...) instead"
            )
        at_end = bool(config.checkpoint_at_end) if config.checkpoint_at_end is not None \
            else class_trainable and self._checkpoint_at_end_by_default  # Ray's Tuner: at the end, unless a function
        return ClassOptions(checkpoint_frequency=frequency, checkpoint_at_end=at_end)

    def _experiment_name(self, storage: str, name: str, made_up: bool = False) -> str:
        """The run's name: ``name``, or, when an experiment has it, a new one (said in a warning, unless fluidsalus
        made ``name`` up: two fits of one second got the same ``<trainable>_<date>``, where Ray says nothing)."""
        if self._resume:
            return name
        if made_up:
            return unused_name(storage, name)
        if not os.path.exists(os.path.join(storage, name, DB_FILENAME)):
            return name
        stamp = datetime.datetime.now().strftime(DATE_FORMAT)
        fresh, count = f"{name}_{stamp}", 1
        while os.path.exists(os.path.join(storage, fresh)):
            count += 1
            fresh = f"{name}_{stamp}_{count}"
        warnings.warn(
            f"fluidsalus.tune: an experiment named {name!r} already exists in {storage}; this run is named "
            f"{fresh!r}. Use {self._resume_hint.format(path=os.path.join(storage, name))} to continue the old one.",
            UserWarning,
            stacklevel=3,
        )
        return fresh

    def _save_state(self, experiment_dir: str) -> None:
        """Write ``tuner.pkl`` (without callbacks if they cannot be pickled), and beside it, in plain JSON, what the
        trials' ``evaluated_params`` are made of (:data:`PARAMS_FILE`), which an ``ExperimentAnalysis`` of the folder
        reads without unpickling the run's objects."""
        tags = getattr(self, "_tags", None)
        if tags is not None:
            description = tags.describe()
            stop = getattr(self._run_config, "stop", None)
            if isinstance(stop, Mapping):  # Ray's Trial.stopping_criterion (the run spec names the function it became)
                with contextlib.suppress(TypeError, ValueError):
                    description["stop"] = json.loads(dumps(dict(stop)))  # (NumPy numbers as plain ones)
            try:
                write_atomically(os.path.join(experiment_dir, PARAMS_FILE), json.dumps(description))
            except (TypeError, ValueError, OSError) as exc:  # a path of keys JSON cannot hold: no evaluated_params
                logger.debug("fluidsalus.tune: %s not written: %s", PARAMS_FILE, exc)
        state = {"version": _STATE_VERSION, "param_space": self._param_space,
                 "tune_config": getattr(self, "_pristine_tune_config", None) or self._tune_config,
                 "run_config": self._run_config,
                 "trainable_name": self._registered_name or trainable_name(self._trainable)}
        pristine_reporter = getattr(self, "_pristine_reporter", None)
        if pristine_reporter is not None:
            state["progress_reporter"] = pristine_reporter
        try:
            blob = cloudpickle.dumps(state)
        except Exception as exc:  # noqa: BLE001 - any object in the configs may refuse pickling
            warnings.warn(
                f"fluidsalus.tune: the RunConfig cannot be pickled for Tuner.restore ({type(exc).__name__}: {exc}); "
                "saved without its callbacks and stop rule",
                UserWarning,
                stacklevel=2,
            )
            state["run_config"] = dataclasses.replace(self._run_config, callbacks=None, stop=None)
            try:
                blob = cloudpickle.dumps(state)
            except Exception as again:  # noqa: BLE001
                warnings.warn(f"fluidsalus.tune: Tuner.restore will not work for this experiment: the Tuner "
                              f"cannot be pickled ({type(again).__name__}: {again})", UserWarning, stacklevel=2)
                return
        write_atomically(os.path.join(experiment_dir, TUNER_STATE_FILE), blob)

    def fit(self) -> ResultGrid:
        """Run the experiment (or continue it, after :meth:`restore`) and return its :class:`ResultGrid`.

        The first Ctrl-C (SIGINT) or SIGUSR1 ends the run as in Ray: its trials are stopped, the store is flushed
        and the results so far are returned (:attr:`interrupted` is then True), after a warning naming
        :meth:`restore` to continue. ``TUNE_DISABLE_SIGINT_HANDLER=1`` leaves Ctrl-C to Python.

        Raises:
            ConfigError: Bad or unsupported input, before any trial starts.
            TrialError: A trial failed under ``FailureConfig(fail_fast="raise")``.
            KeyboardInterrupt: A second Ctrl-C, one during the devices' start (before the run's loop, as Ray's
                before its tuning loop), or one under ``TUNE_DISABLE_SIGINT_HANDLER=1`` (the experiment is resumable
                all the same).
        """
        self.interrupted = False
        if self._trainable is None:
            raise ConfigError("Tuner: trainable is required (a function f(config) or a Trainable subclass)")
        tune_config, run_config = self._tune_config, self._run_config
        trainable = adopt_ray_trainable(self._trainable)
        if isinstance(trainable, Prepared):  # (GPUs a factory keeps for a trial's tasks: before Ray and devices start)
            check_task_gpus(trainable.task_gpus, "with_resources")
        class_trainable = is_class_trainable(trainable)
        options = self._check_checkpointing(class_trainable)
        # What tuner.pkl keeps for Tuner.restore: the search algorithm as the script built it, before plan() gives it
        # param_space (set_search_properties); given it again at the restore, a searcher that takes its space once
        # refused (NevergradSearch, ZOOptSearch, one's own: the restore was a ConfigError). Its state comes back
        # from the store. None when it cannot be copied (the TuneConfig as it is is kept then, as before).
        try:
            # Kept as bytes: loading them here would rebind the script's own classes (cloudpickle's class
            # tracker sets their methods anew, with a copy of __main__'s globals).
            self._pristine_tune_config = _Pickled(cloudpickle.dumps(tune_config))
        except Exception:  # noqa: BLE001 - any object in the config may refuse pickling
            self._pristine_tune_config = None
        self.plan = planned = plan(tune_config, self._param_space, class_trainable=class_trainable,
                                   stop=run_config.stop)
        if planned.checkpoint_at_budgets:
            options = dataclasses.replace(options, at_budgets=True)
        ignored = run_config.ignored()
        if ignored:
            warnings.warn(f"fluidsalus.tune: {', '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} accepted "
                          "but not used by fluidsalus", UserWarning, stacklevel=2)
        engine_callbacks, ray_callbacks = _split_callbacks(run_config.callbacks)
        ray_callbacks += default_loggers(ray_callbacks)  # Ray's result.json and progress.csv in each trial's folder
        endless = tune_config.num_samples == INFINITE_SAMPLES
        total_samples = _total_samples(planned.searcher, tune_config.num_samples, endless)
        if run_config.progress_reporter is not None and run_config.verbosity() >= 1:
            # What tuner.pkl keeps of the reporter: the script's, before setup() gives it TuneConfig's metric and
            # mode (the restored reporter had them, so the restore's setup() refused it as one built with its own:
            # a ConfigError where Ray restores the script). None when it cannot be copied.
            try:
                self._pristine_reporter = _Pickled(cloudpickle.dumps(run_config.progress_reporter))
            except Exception:  # noqa: BLE001 - a reporter of the script's own may refuse pickling
                self._pristine_reporter = None
            # As tune.run does: the reporter gets the run's start, samples, and TuneConfig's metric and mode.
            run_config.progress_reporter.setup(start_time=time.time(), metric=tune_config.metric,
                                               mode=tune_config.mode, total_samples=total_samples)
            # (Ray's own scheduler, translated again: plan() warned already; a catch_warnings that ignored UserWarning
            # here silenced every thread's UserWarnings meanwhile, h232)
            scheduler = adopt_scheduler(tune_config.scheduler, warn=False)
            ray_callbacks.append(ReporterCallback(run_config.progress_reporter, planned.searcher, scheduler))
        if class_trainable and _may_ask_for_checkpoints(engine_callbacks, ray_callbacks):
            # Each result waits for the callbacks' answer, so a requested checkpoint is of that result, as in Ray.
            options = dataclasses.replace(options, checkpoint_verdicts=True)
        chdir = chdir_to_trial_dir()  # Ray's RAY_CHDIR_TO_TRIAL_DIR; a bad value fails before Ray starts
        storage = os.path.abspath(os.path.expanduser(run_config.storage_path or ""))
        tags = Tagger(planned.space, planned.tags, planned.perturbed, planned.replay_tag,  # Ray's experiment_tag
                      points=planned.points)
        self._tags = tags  # (its description goes beside tuner.pkl: the analysis's evaluated_params)
        trial_names: dict[str, Any] = {}  # trial -> what trial_name_creator returned for it
        if self._resume and run_config.name:  # (a resume names its experiment: restore and tune.run set the name)
            # Before Ray starts (seconds): another driver running it, or a store this version cannot write, is
            # refused here, and the trials are read under the experiment's lock, not beside that driver's writes.
            # So are another metric, mode, searcher kind or search space keys (tune.run(resume=...) takes the
            # call's configs): fluidsalus.run's own checks, with what it will be given (they started Ray first).
            self._restore_trials_view(os.path.join(storage, run_config.name), tags,
                                      trial_names if tune_config.trial_name_creator else None,
                                      lambda experiment: check_resume(experiment, metric=planned.metric,
                                                                      mode=planned.mode, searcher=planned.searcher,
                                                                      space=planned.space))
        ensure_ray()  # (under the lock fluidsalus.run's start of Ray holds: two fits from two threads start it once)
        entry, refs = make_entry(trainable, options, log_files(run_config.log_to_file), chdir)
        self.request = entry.resources  # (tune.run's trials' placement_group_factory)
        # (a PlacementGroupFactory's later bundles: cores left to Ray for the tasks each trial starts; a function's,
        # as it answers for the space's first configuration)
        kept_for_tasks = trainable.task_cpus if isinstance(trainable, Prepared) else 0.0
        # (and a function that answers the same request for the space's first configurations counts as that fixed
        # request: its cpu sets the trials at once, its gpu the planner's hint)
        probed_tasks, constant = probe_request(entry, planned.space)
        if not kept_for_tasks:
            kept_for_tasks = entry.kept_for_tasks = probed_tasks
        counted = constant if callable(entry.resources) else entry.resources
        label = self._registered_name or entry.__name__
        base_name = _UNSAFE_NAME_CHARS.sub("_", label).strip("_") or _FALLBACK_NAME
        default_name = f"{base_name}_{datetime.datetime.now().strftime(DATE_FORMAT)}"
        name = self._experiment_name(storage, run_config.name or default_name, made_up=not run_config.name)
        experiment_dir = os.path.join(storage, name)
        # (with a trial_name_creator and no callback too: Ray calls it for every trial, and its errors end the run)
        dirname_creator = tune_config.trial_dirname_creator
        runner = runner_of(planned.searcher)  # a search algorithm with its own suggest, also under ASHA or a wrapper
        if runner is not None:  # saved where Ray saves it, restored from there
            runner.attach(experiment_dir, datetime.datetime.now().strftime(DATE_FORMAT))
        adapter = RayCallbackAdapter(ray_callbacks, experiment_dir, label, tune_config.trial_name_creator,
                                     restore=self._resume, tags=tags, names=trial_names) \
            if ray_callbacks or tune_config.trial_name_creator is not None else None
        if adapter is not None:  # (its trial views' placement_group_factory)
            adapter.request = entry.resources
        saver = _SaveOnFirstEvent(lambda: self._save_state(experiment_dir))
        policies = _PolicyFiles(planned.searcher, experiment_dir)
        failure = run_config.failure_config
        checkpoint = run_config.checkpoint_config
        assert failure is not None and checkpoint is not None
        setup = {"stop": dict(run_config.stop) if isinstance(run_config.stop, Mapping) else {},  # (as Ray's public
                 # spec: {} for none, a Stopper or a function)
                 "num_samples": sys.maxsize if endless else tune_config.num_samples,
                 "total_num_samples": total_samples, "time_budget_s": tune_config.time_budget}
        if adapter is not None and not self._resume:
            adapter.setup(**setup)
        accepted = False

        def resume_accepted(store: ExperimentStore, searcher: BaseSearcher) -> list[str]:
            """A resume that fluidsalus.run accepted: the callbacks' setups, then the flags change the stored
            trials, and the callbacks see them as they are then. A setup that raises ends the run before the flags
            changed anything (as Ray's, whose restore changes its trials in memory only: the experiment is left
            as it was). A refused one writes nothing into the experiment's folder, and, as Ray's refused restore,
            calls no callback."""
            nonlocal accepted
            if adapter is not None:
                adapter.setup(**setup)
            restarted = self._apply_restore_flags(store, searcher)
            if adapter is not None:
                adapter.restore_trials()
            accepted = True  # (a callback whose setup raised gets no on_experiment_end, as in Ray and a new run)
            return restarted
        gpus = gpu_hint(counted)
        if gpus is not None and gpus > 1:
            warnings.warn(MANY_GPUS_WARNING.format(gpu=gpus), UserWarning, stacklevel=2)
        if gpus is not None and not ray.cluster_resources().get("GPU"):
            warnings.warn(NO_GPU_WARNING.format(gpu=gpus), UserWarning, stacklevel=2)
        unscheduled = unscheduled_resources(counted if isinstance(counted, Mapping) else None)
        if unscheduled:
            warnings.warn(UNSCHEDULED_RESOURCES_WARNING.format(keys=", ".join(
                f"{key}: {counted[key]:g}" for key in unscheduled)), UserWarning, stacklevel=2)
        # (armed once the devices are up and the first trials made, _ArmOnFirstStep; a restore at once: its trials
        # are there, and Ray's restore in a process whose Ray is up returns them at a Ctrl-C, h191's F1)
        signals = StopSignals(armed=self._resume)
        try:
            # (space_in_searcher: config= and num_samples= describe the plan's searcher; on_created: tuner.pkl as
            # soon as the new run's store is made)
            with signals, space_in_searcher(), on_resume(resume_accepted), \
                    on_created(lambda folder: saver.save_once()):
                grid = run(
                    entry,
                    config=planned.space,
                    num_samples=tune_config.num_samples,
                    metric=planned.metric,
                    mode=planned.mode,
                    stop=combine_stops(run_config.stop, planned.extra_stops),
                    name=name,
                    storage_path=storage,
                    searcher=planned.searcher,
                    max_concurrent_trials=planned.max_concurrent_trials,
                    max_failures=failure.max_failures,
                    time_budget_s=tune_config.time_budget,
                    fail_fast=failure.fail_fast,
                    checkpoint_num_to_keep=checkpoint.num_to_keep,
                    checkpoint_score_attribute=checkpoint.checkpoint_score_attribute,
                    checkpoint_score_order=checkpoint.checkpoint_score_order or "max",
                    verbose=run_config.verbosity(),
                    resume=self._resume,
                    callbacks=[_ArmOnFirstStep(signals), saver, policies, *engine_callbacks,
                               *([adapter] if adapter is not None else [])],
                    gpu_per_trial=None if gpus is None else min(gpus, 1.0),  # (more than one GPU: warned above)
                    cpus_per_trial=cpu_request(counted, kept_for_tasks),
                    task_cpus_per_trial=kept_for_tasks,
                    trial_dirname=_dirname_function(dirname_creator, experiment_dir, label, tags,
                                                    tune_config.trial_name_creator, trial_names, entry.resources),
                    # (the creator's name, else Ray's <trainable>_<trial_id> by the registered name; stored, so a
                    # restored trial keeps it and ExperimentAnalysis shows it)
                    trial_name=lambda trial_id: trial_names[trial_id] if isinstance(trial_names.get(trial_id), str)
                    and trial_names[trial_id] else f"{label}_{trial_id}",
                    # (a search algorithm's trials: Ray's SearchGenerator's ids, c81718b6; the default search's keep
                    # the engine's, Ray's BasicVariantGenerator's form)
                    trial_id=search_trial_id if planned.tags == SEARCHER else None,
                    result_extras=tags,
                )
        except KeyboardInterrupt:
            if not (signals.graceful() and os.path.isfile(os.path.join(experiment_dir, DB_FILENAME))):
                raise
            grid = self._interrupted_results(experiment_dir)
        finally:
            refused = self._resume and not accepted  # (its experiment is left as it was: see resume_accepted)
            if not refused:
                policies.write()
            if adapter is not None and not refused:
                adapter.experiment_end()
                ExperimentStore.fold_log(experiment_dir)  # (its store reader closed after the run's writer)
            if os.path.isfile(os.path.join(experiment_dir, DB_FILENAME)) and not os.path.isfile(
                    os.path.join(experiment_dir, TUNER_STATE_FILE)):
                with contextlib.suppress(OSError):
                    self._save_state(experiment_dir)
            del refs  # the objects stay in Ray's store while the run needed them
        self._experiment_dir = experiment_dir
        self._results = grid
        return grid


def check_same_trainable(folder: str, trainable: Any, registered_name: str | None) -> None:
    """``tune.run(resume=...)``'s check of :func:`_check_same_experiment` for its trainable (its configs are the
    call's own): the experiment in ``folder`` must have run the same one. A ``tuner.pkl`` that cannot be read
    (another version) is not checked here.

    Args:
        folder: The experiment being resumed.
        trainable: The call's trainable, as the Tuner holds it.
        registered_name: The name it was registered under, if the call named it by a string.

    Raises:
        ConfigError: Another trainable than the experiment's.
    """
    try:
        state = _read_state(folder)
    except Exception:  # noqa: BLE001 - unreadable: the resume goes on as before, unchecked
        return
    _check_same_experiment(state, registered_name or trainable_name(trainable), None)


def _read_state(folder: str) -> dict[str, Any]:
    """The experiment's ``tuner.pkl``.

    Raises:
        ConfigError: It cannot be read (cut short, damaged, or it pickled a class this process cannot import:
            it was the bare ``UnpicklingError``, naming no file), or another version of it wrote it.
    """
    path = os.path.join(folder, TUNER_STATE_FILE)
    try:
        with open(path, "rb") as f:
            state = cloudpickle.load(f)
    except Exception as e:  # noqa: BLE001 - unpickling fails in any way (EOFError, UnpicklingError, ImportError, ...)
        raise ConfigError(f"Tuner.restore: {path!r} cannot be read ({type(e).__name__}: {e}), so the experiment "
                          "cannot be continued; its results can still be read with "
                          f"tune.ExperimentAnalysis({folder!r})") from e
    if not isinstance(state, dict):
        raise ConfigError(f"Tuner.restore: {path!r} holds a {type(state).__name__}, not a Tuner's saved state")
    if state.get("version") != _STATE_VERSION:
        raise ConfigError(f"Tuner.restore: {TUNER_STATE_FILE} has version {state.get('version')!r}; this "
                          f"fluidsalus reads version {_STATE_VERSION}")
    return state


#: Ray's refusals of a restore with another trainable or a ``param_space`` of other keys (its words), for
#: :func:`fluidsalus.api.check_same_run`.
_OTHER_TRAINABLE = ("Invalid `trainable` input to `Tuner.restore()`. To fix this error, pass in the same trainable "
                    "that was used to initialize the Tuner. Got a trainable with identifier '{got}' but expected "
                    "'{expected}'.")
_OTHER_PARAM_SPACE = ("Invalid `param_space` input to `Tuner.restore()`. To fix this error, pass in the same "
                      "`param_space` that was used to initialize the Tuner. Only re-specify the `param_space` to "
                      "refresh Ray object references that no longer exist due to restoring from a new Ray cluster "
                      "session. It should not be used to introduce new hyperparameters to search over. Got: {got} "
                      "Expected: {expected}")


def _check_same_experiment(state: Mapping[str, Any], name: str, param_space: Mapping[str, Any] | None) -> None:
    """Refuse, as Ray's ``Tuner.restore`` does (with its words), another trainable than the experiment's (its
    unfinished trials ran the other function, and its results mixed into theirs) or a ``param_space`` whose
    flattened keys are not the saved one's (it is for refreshing object refs, not for new hyperparameters).

    Args:
        state: The saved ``tuner.pkl``.
        name: The given trainable's name (as ``tuner.pkl`` names the experiment's).
        param_space: The given ``param_space`` (None: the saved one is used).

    Raises:
        ConfigError: Either is not the experiment's.
    """
    check_same_run(state.get("trainable_name"), name,
                   None if param_space is None else list(flatten_dict(dict(state["param_space"] or {}))),
                   None if param_space is None else list(flatten_dict(dict(param_space))),
                   other_trainable=_OTHER_TRAINABLE, other_space=_OTHER_PARAM_SPACE)
