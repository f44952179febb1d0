"""Ray Tune's configuration objects: :class:`TuneConfig`, :class:`RunConfig`, :class:`CheckpointConfig` and
:class:`FailureConfig`, with Ray 2.x's field names, order and defaults.

They are plain dataclasses, as in Ray, so they accept the same positional and keyword arguments. Each one
checks its fields when it is built and raises a :class:`~fluidsalus.errors.ConfigError` (a ``ValueError``,
which is what Ray raises) that names the class, the field and what is allowed. Fields that only matter to
Ray's own machinery (``sync_config``, ``log_to_file``, ...) are accepted; :meth:`RunConfig.ignored` and
:meth:`TuneConfig.ignored` list the ones set to a value that fluidsalus does not act on, so the
:class:`~fluidsalus.tune.Tuner` can warn about them.
"""

from __future__ import annotations

import datetime
import inspect
import math
import numbers
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.store import NAME_MAX_BYTES, RAY_STORAGE_ENV, TUNE_DEFAULT_STORAGE_PATH, tune_storage_path
from fluidsalus.tune._output import log_files
from fluidsalus.tune._workdir import chdir_argument_error

__all__ = [
    "DEFAULT_STORAGE_PATH",
    "CheckpointConfig",
    "FailureConfig",
    "ResumeConfig",
    "RunConfig",
    "SyncConfig",
    "TuneConfig",
]

#: Ray's default ``storage_path`` (``ray.train.constants.DEFAULT_STORAGE_PATH``): ``~/ray_results``, expanded.
#: ``RunConfig`` takes its default from :func:`fluidsalus.store.tune_storage_path` (``$RAY_STORAGE``, else this
#: folder), which ``fluidsalus ls`` and ``fluidsalus inspect NAME`` read too.
DEFAULT_STORAGE_PATH = os.path.expanduser(TUNE_DEFAULT_STORAGE_PATH)
#: Variables that Ray 2.x no longer reads (``tune.run`` refuses to start when they are set); fluidsalus
#: ignores them with a warning.
IGNORED_STORAGE_ENVS = ("TUNE_RESULT_DIR", "RAY_AIR_LOCAL_CACHE_DIR")
#: The values of ``checkpoint_score_order`` and ``mode``.
MODES = ("min", "max")
#: ``fail_fast``'s string value (compared case-insensitively, as in Ray).
FAIL_FAST_RAISE = "raise"
#: ``num_samples`` value for "sample until stopped".
INFINITE_SAMPLES = -1
#: Ray's placeholder default of deprecated fields.
DEPRECATED = "DEPRECATED"
#: Highest verbosity the engine knows (``fluidsalus.run(verbose=...)`` takes 0..3).
MAX_VERBOSITY = 3
#: Ray's verbosity when ``RunConfig.verbose`` is None; fluidsalus prints its summary line.
DEFAULT_VERBOSITY = 1


def _fail(owner: str, name: str, rule: str, value: Any) -> ConfigError:
    return ConfigError(f"{owner}: {name} must be {rule} (got {value!r})")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_mode(owner: str, value: Any, *, allow_none: bool = True) -> str | None:
    """``None`` (when allowed), ``"min"`` or ``"max"``."""
    if value is None and allow_none:
        return None
    if value not in MODES:
        raise _fail(owner, "mode", "'min' or 'max'" + (" or None" if allow_none else ""), value)
    return str(value)


def check_metric(owner: str, value: Any) -> str | None:
    """``None`` or a non-empty string (a result key)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        raise ConfigError(
            f"{owner}: metric must be one result key; several metrics (multi-objective search) are not "
            f"supported by fluidsalus (got {value!r})"
        )
    if not isinstance(value, str) or not value:
        raise _fail(owner, "metric", "None or a non-empty string (a result key)", value)
    return value


def by_short_name(field: str, value: Any, table: Mapping[str, Any]) -> Any:
    """The entry of Ray's short name ``value`` (any case) in ``table``, for ``create_scheduler``/``create_searcher``.

    Raises:
        ConfigError: ``value`` is not one of Ray's names.
    """
    name = value.lower() if isinstance(value, str) else value
    if name not in table:
        raise ConfigError(f"{field} must be one of {list(table)} (got {value!r})")
    return table[name]


def build_with_known(cls: type, kwargs: Mapping[str, Any]) -> Any:
    """``cls(**kwargs)`` with the arguments ``cls`` does not take dropped, as Ray's ``create_*`` do."""
    accepted = inspect.signature(cls).parameters
    return cls(**{key: value for key, value in kwargs.items() if key in accepted})


def seconds(owner: str, name: str, value: Any) -> float | None:
    """``None``, or a number / ``timedelta`` of seconds ``> 0``, as a float."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if not _is_real(value) or not math.isfinite(float(value)) or value <= 0:
        raise _fail(owner, name, "None, a number of seconds > 0 or a datetime.timedelta", value)
    return float(value)


def _no_budget(value: Any) -> bool:
    """A ``time_budget_s`` of 0 (or a zero ``timedelta``), which Ray reads as no budget (it tests the value's
    truth), or of ``inf``, which never ends a run in Ray (nor in ``fluidsalus.run``; it was refused here); not
    ``False``, which is no number of seconds."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds() == 0
    return _is_real(value) and not isinstance(value, bool) and (value == 0 or value == math.inf)


@dataclass
class CheckpointConfig:
    """Which checkpoints a trial keeps (``ray.tune.CheckpointConfig``).

    Args:
        num_to_keep: Checkpoints kept per trial (the best by ``checkpoint_score_attribute``, else the newest;
            the latest is always kept). None keeps all.
        checkpoint_score_attribute: Result key that ranks checkpoints.
        checkpoint_score_order: ``"max"`` or ``"min"``: which scores are best.
        checkpoint_frequency: Iterations between checkpoints of a class :class:`~fluidsalus.tune.Trainable`
            (0: none). Function trainables checkpoint themselves; as in Ray, they refuse this field.
        checkpoint_at_end: Checkpoint a class ``Trainable`` when it ends (by itself, by the stop rule or by a
            scheduler). None (the default): True for a class ``Trainable`` run by a ``Tuner``, False under
            ``tune.run``, as in Ray. Refused (True) for function trainables.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str | None = "max"
    checkpoint_frequency: int | None = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        owner = "CheckpointConfig"
        if self.num_to_keep is not None and (not _is_int(self.num_to_keep) or self.num_to_keep < 1):
            raise _fail(owner, "num_to_keep", "None or an int >= 1", self.num_to_keep)
        if self.checkpoint_score_attribute is not None and (
            not isinstance(self.checkpoint_score_attribute, str) or not self.checkpoint_score_attribute
        ):
            raise _fail(owner, "checkpoint_score_attribute", "None or a result key", self.checkpoint_score_attribute)
        if self.checkpoint_score_order not in MODES:
            raise _fail(owner, "checkpoint_score_order", "'max' or 'min'", self.checkpoint_score_order)
        if self.checkpoint_frequency is None:
            self.checkpoint_frequency = 0
        if not _is_int(self.checkpoint_frequency) or self.checkpoint_frequency < 0:
            raise _fail(owner, "checkpoint_frequency", "an int >= 0", self.checkpoint_frequency)
        if self.checkpoint_at_end is not None and not isinstance(self.checkpoint_at_end, bool):
            raise _fail(owner, "checkpoint_at_end", "None, True or False", self.checkpoint_at_end)


@dataclass
class FailureConfig:
    """How failing trials are handled (``ray.tune.FailureConfig``).

    Args:
        max_failures: Times a failing trial is started again from its last checkpoint; -1 retries forever.
        fail_fast: True ends the experiment at the first trial that fails for good; ``"raise"`` also raises
            that trial's error from ``fit()``. As in Ray, it needs ``max_failures=0``.
    """

    max_failures: int = 0
    fail_fast: bool | str = False

    def __post_init__(self) -> None:
        owner = "FailureConfig"
        if not _is_int(self.max_failures) or self.max_failures < -1:
            raise _fail(owner, "max_failures", "an int >= 0, or -1 to retry forever", self.max_failures)
        if isinstance(self.fail_fast, str) and self.fail_fast.lower() == FAIL_FAST_RAISE:
            self.fail_fast = FAIL_FAST_RAISE
        elif not isinstance(self.fail_fast, bool):
            raise _fail(owner, "fail_fast", "True, False or 'raise'", self.fail_fast)
        if self.fail_fast and self.max_failures != 0:
            raise ConfigError(
                f"FailureConfig: max_failures must be 0 if fail_fast={self.fail_fast!r} "
                f"(got max_failures={self.max_failures})"
            )


@dataclass
class SyncConfig:
    """How Ray copies a trial's files to remote storage (``ray.tune.SyncConfig``), with Ray's fields.

    fluidsalus writes the store and the checkpoints under ``storage_path`` directly (a local or mounted
    folder), so there is nothing to sync: ``RunConfig(sync_config=...)`` is accepted and ignored, with the
    warning that lists ignored settings. The fields are checked as Ray checks them.

    Args:
        sync_period: Least seconds between two syncs.
        sync_timeout: Most seconds one sync may take.
        sync_artifacts: Whether Ray syncs the files a trial writes to its folder.
        sync_artifacts_on_checkpoint: Whether Ray syncs them when a checkpoint is reported.
    """

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True

    def __post_init__(self) -> None:
        owner = "SyncConfig"
        for name in ("sync_period", "sync_timeout"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool) or value < 0:
                raise _fail(owner, name, "a number of seconds >= 0", value)
        for name in ("sync_artifacts", "sync_artifacts_on_checkpoint"):
            if not isinstance(getattr(self, name), bool):
                raise _fail(owner, name, "True or False", getattr(self, name))


class ResumeType(str, Enum):
    """What a resumed run does with a trial (``ray.tune.ResumeConfig.ResumeType``)."""

    RESUME = "resume"  #: continue from its latest checkpoint
    RESTART = "restart"  #: start again from the beginning, with no checkpoint
    SKIP = "skip"  #: leave it as it is (an unfinished trial counts as terminated)


@dataclass
class ResumeConfig:
    """How ``tune.run(resume_config=...)`` resumes the trials of each state (``ray.tune.ResumeConfig``).

    fluidsalus carries out the settings that ``Tuner.restore``'s flags can express: finished trials are
    skipped, unfinished ones resumed or skipped, errored ones skipped, resumed or restarted. Restarting an
    unfinished trial, or running a finished one again, is refused with a ``ConfigError`` when the run
    starts (``tune.run``), since the searcher's saved state already counts those trials.

    Args:
        finished: For TERMINATED trials: ``"skip"`` (default).
        unfinished: For PENDING, RUNNING and PAUSED trials: ``"resume"`` (default) or ``"skip"``.
        errored: For ERROR trials: ``"skip"`` (default), ``"resume"`` or ``"restart"``.
    """

    ResumeType = ResumeType

    finished: str = ResumeType.SKIP
    unfinished: str = ResumeType.RESUME
    errored: str = ResumeType.SKIP

    def __post_init__(self) -> None:
        allowed = [t.value for t in ResumeType]
        for name in ("finished", "unfinished", "errored"):
            value = getattr(self, name)
            try:
                setattr(self, name, ResumeType(getattr(value, "value", value)))
            except ValueError:
                raise _fail("ResumeConfig", name, f"one of {allowed}", value) from None

    def restore_flags(self) -> dict[str, bool]:
        """The ``Tuner.restore`` flags that do the same.

        Returns:
            ``{"resume_unfinished", "resume_errored", "restart_errored"}``.

        Raises:
            ConfigError: For a setting those flags cannot express, naming it.
        """
        if self.finished is not ResumeType.SKIP:
            raise ConfigError(f"ResumeConfig: finished={self.finished.value!r} is not supported by fluidsalus "
                              "(finished trials are kept as they are: 'skip')")
        if self.unfinished is ResumeType.RESTART:
            raise ConfigError("ResumeConfig: unfinished='restart' is not supported by fluidsalus; use 'resume' "
                              "(from the latest checkpoint) or 'skip'")
        return {"resume_unfinished": self.unfinished is ResumeType.RESUME,
                "resume_errored": self.errored is ResumeType.RESUME,
                "restart_errored": self.errored is ResumeType.RESTART}


@dataclass
class RunConfig:
    """Where and how an experiment runs (``ray.tune.RunConfig``).

    Args:
        name: The experiment's folder under ``storage_path``. Default: ``<trainable>_<timestamp>``.
        storage_path: Where experiments go. Default: Ray's ``~/ray_results`` (or ``$RAY_STORAGE``, which Ray
            still reads, with a warning).
        storage_filesystem: A pyarrow filesystem. Not supported: refused unless None.
        failure_config: A :class:`FailureConfig` (default ``FailureConfig()``).
        checkpoint_config: A :class:`CheckpointConfig` (default ``CheckpointConfig()``).
        sync_config: Accepted and ignored: the store and checkpoints live under ``storage_path`` directly.
        verbose: 0 no progress, 1 a summary (the default), 2 and 3 a line per finished trial; a trial that fails
            for good is printed on stderr at every level, as Ray logs it. Ray's
            ``AirVerbosity``/``Verbosity`` enums are read as their int values.
        stop: ``{result_key: threshold}``, a callable ``f(trial_id, result) -> bool``, or a
            :class:`~fluidsalus.tune.Stopper` (whose ``stop_all()`` ends the experiment).
        callbacks: :class:`~fluidsalus.tune.Callback` s (Ray's hooks) or ``fluidsalus.callbacks.Callback`` s.
        progress_reporter: A :class:`~fluidsalus.tune.CLIReporter` (or another ``ProgressReporter``): prints a
            status table of the trials every few seconds and at the end (with ``verbose >= 1``).
        log_to_file: True (files ``stdout`` and ``stderr``), one file name for both, or a pair
            ``(stdout_file, stderr_file)``: what each trial prints also goes to those files in its folder, as in
            Ray (it still reaches the console). Per trial thread: see :mod:`fluidsalus.tune._output`.
        local_dir: Deprecated in Ray, which refuses it; so does fluidsalus. Use ``storage_path``.
    """

    name: str | None = None
    storage_path: str | None = None
    storage_filesystem: Any = None
    failure_config: FailureConfig | None = None
    checkpoint_config: CheckpointConfig | None = None
    sync_config: Any = None
    verbose: Any = None
    stop: Mapping[str, Any] | Callable[[str, Mapping[str, Any]], bool] | None = None
    callbacks: list[Any] | None = None
    progress_reporter: Any = None
    log_to_file: bool | str | tuple[str, str] = False
    local_dir: str | None = None

    def __post_init__(self) -> None:
        owner = "RunConfig"
        if self.local_dir is not None:
            raise ConfigError(
                f"{owner}: local_dir is deprecated (Ray refuses it too); pass storage_path={self.local_dir!r} "
                "instead"
            )
        if self.storage_filesystem is not None:
            raise ConfigError(
                f"{owner}: storage_filesystem is not supported by fluidsalus (got "
                f"{type(self.storage_filesystem).__name__}); pass a local or mounted storage_path"
            )
        for env in IGNORED_STORAGE_ENVS:
            if os.environ.get(env):
                warnings.warn(
                    f"fluidsalus.tune: the environment variable {env} is ignored (Ray 2.x no longer reads it "
                    "either); set RunConfig(storage_path=...)",
                    UserWarning,
                    stacklevel=3,
                )
        if self.storage_path is None:
            self.storage_path = tune_storage_path()  # ($RAY_STORAGE or ~/ray_results: as `fluidsalus ls` looks)
            if os.environ.get(RAY_STORAGE_ENV):
                warnings.warn(
                    f"fluidsalus.tune: using ${RAY_STORAGE_ENV}={self.storage_path!r} as the storage_path; this "
                    "variable is deprecated in Ray, pass RunConfig(storage_path=...) instead",
                    UserWarning,
                    stacklevel=3,
                )
        if isinstance(self.storage_path, os.PathLike):
            self.storage_path = os.fspath(self.storage_path)
        if not isinstance(self.storage_path, str) or not self.storage_path:
            raise _fail(owner, "storage_path", "None or a folder path", self.storage_path)
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise _fail(owner, "name", "None or a non-empty folder name", self.name)
        if self.name is not None and len(self.name.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES:
            # (before fit() starts Ray: it failed once Ray was up, with OSError "File name too long")
            raise _fail(owner, "name", f"a folder name of at most {NAME_MAX_BYTES} bytes, the longest a file system "
                        "takes", self.name)
        from fluidsalus.tune.progress_reporter import adopt_reporter  # it imports the callbacks, which import this

        self.progress_reporter = adopt_reporter(self.progress_reporter)
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        elif not isinstance(self.failure_config, FailureConfig):
            self.failure_config = _adopt(owner, "failure_config", self.failure_config, FailureConfig)
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        elif not isinstance(self.checkpoint_config, CheckpointConfig):
            self.checkpoint_config = _adopt(owner, "checkpoint_config", self.checkpoint_config, CheckpointConfig)
        self.verbosity()  # checks verbose
        log_files(self.log_to_file)  # checks log_to_file
        if self.callbacks is not None and not isinstance(self.callbacks, (list, tuple)):
            raise _fail(owner, "callbacks", "None or a list of callbacks", self.callbacks)
        if self.stop is not None and not (isinstance(self.stop, Mapping) or callable(self.stop)):
            raise _fail(
                owner, "stop", "None, a dict {result_key: threshold}, a callable (trial_id, result) -> bool or "
                "a Stopper", self.stop
            )
        if isinstance(self.stop, type):  # a Stopper class, not an instance: Ray refuses it (a ValueError) too
            raise _fail(owner, "stop", f"a Stopper instance, such as {self.stop.__name__}(...), not the class",
                        self.stop)

    def verbosity(self) -> int:
        """The engine's verbosity (0..3) for ``verbose``."""
        value = self.verbose
        if value is None:
            return DEFAULT_VERBOSITY
        if isinstance(value, bool):
            return int(value)
        raw = getattr(value, "value", value)  # Ray's AirVerbosity / Verbosity enums
        if not _is_int(raw) or raw < 0:
            raise _fail("RunConfig", "verbose", "None, an int >= 0 or a Ray verbosity enum", value)
        return min(int(raw), MAX_VERBOSITY)

    def ignored(self) -> list[str]:
        """The fields set to something fluidsalus accepts but does not act on."""
        out = []
        if self.sync_config is not None:
            out.append("sync_config")
        return out


def _adopt(owner: str, name: str, value: Any, cls: type) -> Any:
    """Take a Ray config object (a forgotten import) field by field; anything else is refused."""
    fields = getattr(cls, "__dataclass_fields__", {})
    if type(value).__name__ == cls.__name__ and type(value).__module__.startswith("ray."):
        warnings.warn(
            f"fluidsalus.tune: {owner}.{name} is Ray's {cls.__name__}; it was translated into "
            f"fluidsalus.tune.{cls.__name__} (change the import to `from fluidsalus.tune import {cls.__name__}`)",
            UserWarning,
            stacklevel=4,
        )
        return cls(**{field: getattr(value, field) for field in fields if hasattr(value, field)})
    raise _fail(owner, name, f"None or a fluidsalus.tune.{cls.__name__}", value)


@dataclass
class TuneConfig:
    """What to search and how (``ray.tune.TuneConfig``).

    Args:
        mode: ``"min"`` or ``"max"``; may instead be given to the scheduler or search algorithm, as in Ray.
        metric: The result key to optimise; may instead be given to the scheduler or search algorithm.
        search_alg: A search algorithm of :mod:`fluidsalus.tune.search` (Ray's own objects are translated
            with a warning, or refused where fluidsalus has no equivalent).
        scheduler: A scheduler of :mod:`fluidsalus.tune.schedulers` (Ray's own are translated likewise).
        num_samples: Samples per grid point; -1 samples until ``time_budget_s`` or a stopper's
            ``stop_all()`` ends the run (every search algorithm and scheduler but PopulationBasedTraining).
        max_concurrent_trials: Cap on trials running at once (0 or None: no cap, as in Ray).
        time_budget_s: Seconds (or a ``timedelta``) after which the experiment ends; None, 0 or ``inf``: no
            budget (Ray's reading of 0 and inf).
        reuse_actors: Accepted; fluidsalus always reuses its device actors.
        trial_name_creator: ``f(trial) -> str``, called once per trial with its callback view
            (:class:`fluidsalus.tune.callback.TrialInfo`: ``trial_id``, ``trainable_name``, ``config``); the
            name is ``str(trial)`` in callbacks and progress tables, as in Ray. Trial ids stay ``<run>_<seq>``.
        trial_dirname_creator: ``f(trial) -> str``: the folder name of each trial in the experiment, called once
            when the trial is created (default: the trial id). It must be one new folder name (a ConfigError
            ends the run otherwise).
        chdir_to_trial_dir: Deprecated: refused with a ConfigError, as Ray refuses it; set the
            ``RAY_CHDIR_TO_TRIAL_DIR`` environment variable instead (see ``fluidsalus.tune._workdir``).
    """

    mode: str | None = None
    metric: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: int | float | datetime.timedelta | None = None
    reuse_actors: bool = False
    trial_name_creator: Callable[[Any], str] | None = None
    trial_dirname_creator: Callable[[Any], str] | None = None
    chdir_to_trial_dir: bool | str = DEPRECATED

    def __post_init__(self) -> None:
        owner = "TuneConfig"
        check_mode(owner, self.mode)
        check_metric(owner, self.metric)
        if not _is_int(self.num_samples) or (self.num_samples < 1 and self.num_samples != INFINITE_SAMPLES):
            raise _fail(owner, "num_samples", f"an int >= 1, or {INFINITE_SAMPLES} to sample until stopped",
                        self.num_samples)
        if self.max_concurrent_trials is not None and (
            not _is_int(self.max_concurrent_trials) or self.max_concurrent_trials < 0
        ):
            raise _fail(owner, "max_concurrent_trials", "None or an int >= 1 (0 means no cap, as in Ray)",
                        self.max_concurrent_trials)
        if not _no_budget(self.time_budget_s):  # (0 and inf: no budget, as Ray reads them)
            seconds(owner, "time_budget_s", self.time_budget_s)
        if not isinstance(self.reuse_actors, bool):
            raise _fail(owner, "reuse_actors", "True or False", self.reuse_actors)
        for name in ("trial_name_creator", "trial_dirname_creator"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise _fail(owner, name, "None or a callable", value)
        if self.chdir_to_trial_dir != DEPRECATED:
            raise chdir_argument_error(owner)

    @property
    def concurrency_cap(self) -> int | None:
        """``max_concurrent_trials`` with Ray's 0 read as "no cap"."""
        return self.max_concurrent_trials or None

    @property
    def time_budget(self) -> float | None:
        """``time_budget_s`` in seconds; None for none, and for 0 (or a zero ``timedelta``) and ``inf``, which Ray
        also reads as no budget."""
        if _no_budget(self.time_budget_s):
            return None
        return seconds("TuneConfig", "time_budget_s", self.time_budget_s)

class MetricModeHolder:
    """What Ray's schedulers and searchers share: an optional ``metric``/``mode``, settable once by Tune."""

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        owner = type(self).__name__
        self._metric = check_metric(owner, metric)
        self._mode = check_mode(owner, mode)

    @property
    def metric(self) -> str | None:
        """The metric given to this object, or None."""
        return self._metric

    @property
    def mode(self) -> str | None:
        """The mode given to this object, or None."""
        return self._mode

    def _take_metric_mode(self, metric: str | None, mode: str | None) -> bool:
        """Ray's ``set_search_properties`` rule: take them unless this object already has its own (False)."""
        if (self._metric and metric) or (self._mode and mode):
            return False
        if metric:
            self._metric = check_metric(type(self).__name__, metric)
        if mode:
            self._mode = check_mode(type(self).__name__, mode)
        return True
