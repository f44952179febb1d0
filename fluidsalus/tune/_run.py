"""``tune.run``: Ray Tune's legacy entry point, run by :class:`~fluidsalus.tune.Tuner`.

``tune.run(trainable, config=..., metric=..., mode=..., scheduler=..., ...)`` is the API older Ray Tune scripts
(and many tutorials) use. It takes everything as keyword arguments and returns an
:class:`~fluidsalus.tune.analysis.ExperimentAnalysis`. Here each argument goes to the field of the
:class:`TuneConfig`, :class:`RunConfig`, :class:`CheckpointConfig` or :class:`FailureConfig` that Ray's own
``Tuner`` fills from it, and a :class:`Tuner` runs the experiment:

=========================================================  =======================================================
``tune.run`` argument                                      goes to
=========================================================  =======================================================
config, metric, mode, search_alg, scheduler, num_samples,  ``Tuner(param_space=config)``, ``TuneConfig``; a search
max_concurrent_trials, time_budget_s, reuse_actors,        algorithm or scheduler given by name is built by
trial_name_creator, trial_dirname_creator                  ``create_searcher`` / ``create_scheduler``
name, storage_path, stop, callbacks, verbose,              ``RunConfig``
progress_reporter, log_to_file, sync_config, local_dir
checkpoint_config, keep_checkpoints_num,                   ``CheckpointConfig`` (the deprecated four with Ray's
checkpoint_score_attr (``min-``/``max-`` prefix),          ``DeprecationWarning``)
checkpoint_freq, checkpoint_at_end
max_failures, fail_fast                                    ``FailureConfig`` (``fail_fast`` needs ``max_failures=0``)
resources_per_trial                                        ``with_resources(trainable, resources_per_trial)``
resume (``True``, ``"AUTO"``, ``+ERRORED``,                ``Tuner.restore``'s flags when the experiment
``+RESTART_ERRORED``, ``+ERRORED_ONLY``,                   ``<storage_path>/<name>`` can be restored, else a new
``+RESTART_ERRORED_ONLY``), resume_config                  run, as in Ray (``ResumeConfig``: what those flags
                                                           express; it takes the place of ``resume``)
raise_on_failed_trial                                      after the run: ``TuneError`` if a trial did not end
                                                           TERMINATED (logged instead after a Ctrl-C)
=========================================================  =======================================================

As in Ray, the first Ctrl-C stops the run and returns its analysis so far, and the warning says to resume with
``tune.run(..., resume=True)``.

A trainable may be given by the name it was registered under (``tune.register_trainable``).

Refused with a :class:`~fluidsalus.errors.ConfigError` naming the argument: a name nothing was registered
under, a list of trainables or ``Experiment`` objects, ``restore`` (a checkpoint to start one trial from),
a ``ResumeConfig`` that restarts unfinished trials or runs finished ones again, ``storage_filesystem``, the
resume modes Ray refuses too (``"LOCAL"``, ``"REMOTE"``,
``"PROMPT"``, ``"ERRORED_ONLY"``), ``chdir_to_trial_dir`` and ``local_dir`` (Ray refuses both).
``export_formats`` is accepted and ignored with a warning, like the other fields fluidsalus does not act on.
"""

from __future__ import annotations

import datetime
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fluidsalus.errors import ConfigError, FluidsalusError, error_summary
from fluidsalus.store import DB_FILENAME, TERMINATED, written_by_ray
from fluidsalus.tune._config import (
    DEPRECATED,
    CheckpointConfig,
    FailureConfig,
    ResumeConfig,
    RunConfig,
    TuneConfig,
)
from fluidsalus.tune._trainable import adopt_ray_trainable, carried_request, trainable_name, with_resources
from fluidsalus.tune._tuner import Tuner, check_same_trainable
from fluidsalus.tune._workdir import chdir_argument_error
from fluidsalus.tune.analysis import ExperimentAnalysis, Trial
from fluidsalus.tune.experiment import Experiment
from fluidsalus.tune.registry import resolve_trainable
from fluidsalus.tune.schedulers import create_scheduler
from fluidsalus.tune.search import create_searcher

__all__ = ["RESUME_SUFFIXES", "run"]

logger = logging.getLogger(__name__)

#: How the warning after an interrupted run says to resume (Ray's words for ``tune.run``).
RESUME_HINT = "tune.run(..., resume=True)"

#: The suffixes of a ``resume`` string and the ``Tuner.restore`` flags each sets (Ray's legacy resume modes).
RESUME_SUFFIXES: dict[str, dict[str, bool]] = {
    "ERRORED": {"resume_unfinished": True, "resume_errored": True, "restart_errored": False},
    "RESTART_ERRORED": {"resume_unfinished": True, "resume_errored": False, "restart_errored": True},
    "ERRORED_ONLY": {"resume_unfinished": False, "resume_errored": True, "restart_errored": False},
    "RESTART_ERRORED_ONLY": {"resume_unfinished": False, "resume_errored": False, "restart_errored": True},
}
#: Resume modes Ray 2.x refuses (it raises a ``DeprecationWarning``); fluidsalus refuses them too.
_DEPRECATED_RESUME = ("LOCAL", "REMOTE", "PROMPT", "ERRORED_ONLY")
#: What ``resume`` may be, for messages.
_RESUME_RULE = "None, True, False, or 'AUTO' optionally followed by +ERRORED, +RESTART_ERRORED, +ERRORED_ONLY or " \
               "+RESTART_ERRORED_ONLY"


def _resume_config(value: Any) -> ResumeConfig:
    """``resume_config`` as a :class:`ResumeConfig` (Ray's own object is read field by field)."""
    if isinstance(value, ResumeConfig):
        return value
    if all(hasattr(value, name) for name in ("finished", "unfinished", "errored")):
        return ResumeConfig(finished=value.finished, unfinished=value.unfinished, errored=value.errored)
    raise ConfigError(f"tune.run: resume_config must be None or a ResumeConfig (got {type(value).__name__})")


def resume_flags(resume: bool | str | None) -> dict[str, bool] | None:
    """The ``Tuner.restore`` flags of a legacy ``resume`` value, or None for a new experiment.

    Args:
        resume: ``None``/``False`` (a new experiment), ``True`` or ``"AUTO"`` (continue one if it exists), with
            ``+`` suffixes from :data:`RESUME_SUFFIXES` (e.g. ``"AUTO+ERRORED"``).

    Raises:
        ConfigError: Any other value, naming what is allowed.
    """
    if resume is None or resume is False:
        return None
    plain = {"resume_unfinished": True, "resume_errored": False, "restart_errored": False}
    if resume is True:
        return plain
    if not isinstance(resume, str):
        raise ConfigError(f"tune.run: resume must be {_RESUME_RULE} (got {resume!r})")
    mode, *suffixes = resume.split("+")
    if mode in _DEPRECATED_RESUME:
        raise ConfigError(f"tune.run: resume={resume!r}: {mode!r} is deprecated (Ray refuses it too); resume must "
                          f"be {_RESUME_RULE}")
    if mode != "AUTO":
        raise ConfigError(f"tune.run: resume must be {_RESUME_RULE} (got {resume!r})")
    flags = plain
    for suffix in suffixes:  # as in Ray, the last suffix decides
        if suffix not in RESUME_SUFFIXES:
            raise ConfigError(f"tune.run: resume={resume!r} has the invalid setting {suffix!r}; resume must be "
                              f"{_RESUME_RULE}")
        flags = RESUME_SUFFIXES[suffix]
    return dict(flags)


def _checkpoint_config(
    checkpoint_config: CheckpointConfig | None, keep_checkpoints_num: int | None, checkpoint_score_attr: str | None,
    checkpoint_freq: int, checkpoint_at_end: bool,
) -> CheckpointConfig | None:
    """``checkpoint_config`` with the deprecated arguments applied on top, each with Ray's warning."""
    changes: dict[str, Any] = {}
    if keep_checkpoints_num is not None:
        warnings.warn("keep_checkpoints_num is deprecated and will be removed. use checkpoint_config.num_to_keep "
                      "instead.", DeprecationWarning, stacklevel=3)
        changes["num_to_keep"] = keep_checkpoints_num
    if checkpoint_score_attr is not None:
        warnings.warn("checkpoint_score_attr is deprecated and will be removed. use "
                      "checkpoint_config.checkpoint_score_attribute instead.", DeprecationWarning, stacklevel=3)
        if not isinstance(checkpoint_score_attr, str):
            raise ConfigError(f"tune.run: checkpoint_score_attr must be a result key, optionally prefixed with "
                              f"'min-' (got {checkpoint_score_attr!r})")
        if checkpoint_score_attr.startswith("min-"):
            warnings.warn("using min- and max- prefixes to specify checkpoint score order is deprecated. Use "
                          "CheckpointConfig.checkpoint_score_order instead", DeprecationWarning, stacklevel=3)
            changes["checkpoint_score_attribute"] = checkpoint_score_attr[len("min-"):]
            changes["checkpoint_score_order"] = "min"
        else:
            changes["checkpoint_score_attribute"] = checkpoint_score_attr
            changes["checkpoint_score_order"] = "max"
    if checkpoint_freq:
        warnings.warn("checkpoint_freq is deprecated and will be removed. use checkpoint_config.checkpoint_frequency "
                      "instead.", DeprecationWarning, stacklevel=3)
        changes["checkpoint_frequency"] = checkpoint_freq
    if checkpoint_at_end:
        warnings.warn("checkpoint_at_end is deprecated and will be removed. use checkpoint_config.checkpoint_at_end "
                      "instead.", DeprecationWarning, stacklevel=3)
        changes["checkpoint_at_end"] = checkpoint_at_end
    if not changes:
        return checkpoint_config
    base = checkpoint_config if checkpoint_config is not None else CheckpointConfig()
    fields = {name: getattr(base, name) for name in ("num_to_keep", "checkpoint_score_attribute",
                                                     "checkpoint_score_order", "checkpoint_frequency",
                                                     "checkpoint_at_end")}
    return CheckpointConfig(**{**fields, **changes})


def _check_trainable(run_or_experiment: Any) -> None:
    if isinstance(run_or_experiment, (list, tuple)):
        raise ConfigError("tune.run: run_or_experiment must be one function, Trainable class or Experiment; to run "
                          "several experiments, use tune.run_experiments")
    if type(run_or_experiment).__name__ == "Experiment" and not isinstance(run_or_experiment, Experiment):
        raise ConfigError("tune.run: this Experiment is Ray's own (ray.tune.Experiment); build it with "
                          "fluidsalus.tune.Experiment")


def _describe(trial: Trial) -> str:
    """A trial that did not end TERMINATED, for TuneError's message: its name (``str(trial)``, as Ray's), status and
    error's summary (:func:`~fluidsalus.errors.error_summary`)."""
    if trial.error is None:
        return f"{trial} ({trial.status})"
    return f"{trial} ({trial.status}: {error_summary(trial.error) or type(trial.error).__name__})"


def run(
    run_or_experiment: Any,
    *,
    name: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    stop: Mapping[str, Any] | Callable[[str, Mapping[str, Any]], bool] | Any = None,
    time_budget_s: int | float | datetime.timedelta | None = None,
    config: dict[str, Any] | None = None,
    resources_per_trial: Mapping[str, Any] | Any = None,
    num_samples: int = 1,
    storage_path: str | None = None,
    storage_filesystem: Any = None,
    search_alg: Any = None,
    scheduler: Any = None,
    checkpoint_config: CheckpointConfig | None = None,
    verbose: Any = None,
    progress_reporter: Any = None,
    log_to_file: bool | str | tuple[str, str] = False,
    trial_name_creator: Callable[[Any], str] | None = None,
    trial_dirname_creator: Callable[[Any], str] | None = None,
    sync_config: Any = None,
    export_formats: Sequence[Any] | None = None,
    max_failures: int = 0,
    fail_fast: bool | str = False,
    restore: str | None = None,
    resume: bool | str | None = None,
    resume_config: Any = None,
    reuse_actors: bool = False,
    raise_on_failed_trial: bool = True,
    callbacks: Sequence[Any] | None = None,
    max_concurrent_trials: int | None = None,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    chdir_to_trial_dir: bool | str = DEPRECATED,
    local_dir: str | None = None,
    _resume_hint: str = RESUME_HINT,
) -> ExperimentAnalysis:
    """Run an experiment with Ray Tune's legacy API (``ray.tune.run``); see the module docstring for the mapping.

    Args:
        run_or_experiment: A function ``f(config)`` that calls ``tune.report``, a ``Trainable`` subclass, the name
            either was registered under (``tune.register_trainable``), or an
            :class:`~fluidsalus.tune.Experiment`, whose own name, stop, time_budget_s, config,
            resources_per_trial, num_samples, storage_path, checkpoint_config and max_failures are used then (the
            arguments of this call that an Experiment sets are ignored, as in Ray); a list of one Experiment too.
        name: The experiment's name (default: the trainable's name and a timestamp).
        metric: The metric to optimise; it goes to the search algorithm and the scheduler.
        mode: ``"min"`` or ``"max"``.
        stop: A dict of result thresholds, a function ``f(trial_id, result)``, or a ``Stopper``.
        time_budget_s: Time after which every trial is stopped.
        config: The search space (``param_space``).
        resources_per_trial: A resource request (``with_resources``): a hint to the planner. Refused (as Ray
            refuses it) for a trainable that has its own: wrapped by ``with_resources``, or a Trainable subclass
            that overrides ``default_resource_request``.
        num_samples: Samples of the space (``-1``: until a stop rule or the time budget ends the run).
        storage_path: Where the experiment folder goes (default ``~/ray_results``).
        storage_filesystem: Not supported (must be None).
        search_alg: A search algorithm, or its name (``"random"``, ``"optuna"``, ``"bohb"``).
        scheduler: A scheduler, or its name (``"fifo"``, ``"async_hyperband"``, ``"hyperband"``, ``"hb_bohb"``,
            ``"median_stopping_rule"``, ``"pbt"``).
        checkpoint_config: A ``CheckpointConfig``.
        verbose: 0, 1, 2 or 3.
        progress_reporter: A ``CLIReporter`` or other progress reporter (``RunConfig.progress_reporter``).
        log_to_file: Trial output to files in each trial's folder (``RunConfig.log_to_file``).
        trial_name_creator: ``f(trial) -> str``: each trial's name (``TuneConfig.trial_name_creator``).
        trial_dirname_creator: ``f(trial) -> str``: each trial's folder name (``TuneConfig.trial_dirname_creator``).
        sync_config: Accepted and ignored (with a warning).
        export_formats: Accepted and ignored (with a warning).
        max_failures: Retries of a failing trial (``-1``: no limit).
        fail_fast: Stop the experiment at the first error (``"raise"``: raise it).
        restore: Not supported (must be None).
        resume: Continue the experiment ``<storage_path>/<name>`` if it exists (its ``experiment.db``; with or
            without ``tuner.pkl``, as this call gives the configs): ``True``, ``"AUTO"``, with ``+ERRORED``,
            ``+RESTART_ERRORED``, ``+ERRORED_ONLY`` or ``+RESTART_ERRORED_ONLY``.
        resume_config: A :class:`~fluidsalus.tune.ResumeConfig` (or Ray's): how to resume the trials of each
            state; it takes the place of ``resume`` and, like ``resume="AUTO"``, continues the experiment when
            it exists.
        reuse_actors: Accepted (device actors are always reused).
        raise_on_failed_trial: Raise ``TuneError`` after the run when a trial did not end TERMINATED (not after a
            Ctrl-C, which returns the analysis so far).
        callbacks: Ray ``Callback`` objects (or ``fluidsalus.callbacks.Callback``).
        max_concurrent_trials: Most trials running at once.
        keep_checkpoints_num: Deprecated: ``CheckpointConfig(num_to_keep=...)``.
        checkpoint_score_attr: Deprecated: ``CheckpointConfig(checkpoint_score_attribute=...)``; a ``min-`` prefix
            sets ``checkpoint_score_order="min"``.
        checkpoint_freq: Deprecated: ``CheckpointConfig(checkpoint_frequency=...)``.
        checkpoint_at_end: Deprecated: ``CheckpointConfig(checkpoint_at_end=...)``.
        chdir_to_trial_dir: Refused, as in Ray.
        local_dir: Refused, as in Ray: use ``storage_path``.

    Returns:
        An :class:`ExperimentAnalysis` of the experiment, with ``metric`` and ``mode`` as its defaults.

    Raises:
        ConfigError: Bad or unsupported input, before any trial starts.
        TuneError: A trial did not end TERMINATED and ``raise_on_failed_trial`` is True.
        KeyboardInterrupt: A second Ctrl-C (the experiment can be resumed with ``resume=True``).
    """
    if isinstance(run_or_experiment, (list, tuple)) and len(run_or_experiment) == 1:
        run_or_experiment = run_or_experiment[0]
    if isinstance(run_or_experiment, Experiment):
        # This call's arguments (nothing else is bound yet), with those the Experiment sets taking their place.
        arguments = {key: value for key, value in locals().items() if key not in ("run_or_experiment", "arguments")}
        return run(**{**arguments, **run_or_experiment.run_arguments()})
    registered_name = run_or_experiment if isinstance(run_or_experiment, str) else None
    run_or_experiment = resolve_trainable(run_or_experiment)  # a name given to tune.register_trainable
    _check_trainable(run_or_experiment)
    # Ray's own wrappers and MyTrainableClass translated here, before resources_per_trial wraps the trainable (its
    # warning named with_resources, a call the script did not make) and is checked against their request.
    run_or_experiment = adopt_ray_trainable(run_or_experiment, "tune.run")
    carried = carried_request(run_or_experiment, config)
    if resources_per_trial is not None and carried is not None:  # (Ray: a TuneError; fluidsalus took the argument)
        raise ConfigError(f"tune.run: resources_per_trial={resources_per_trial!r} is given, but the trainable "
                          f"{trainable_name(run_or_experiment)} already has a resource request (from {carried}); "
                          "give it in one place: drop resources_per_trial, or the trainable's own request")
    for field, value in (("storage_filesystem", storage_filesystem), ("restore", restore)):
        if value is not None:
            raise ConfigError(f"tune.run: {field} is not supported by fluidsalus; leave it None")
    if chdir_to_trial_dir != DEPRECATED:
        raise chdir_argument_error("tune.run")
    if mode and mode not in ("min", "max"):
        raise ConfigError(f"tune.run: mode must be one of ['min', 'max'] (got {mode!r})")
    if config is not None and not isinstance(config, dict):
        raise ConfigError(f"tune.run: config must be a dict (got {type(config).__name__})")
    if callbacks is not None and not isinstance(callbacks, (list, tuple)):  # (list(5): a bare TypeError, as Ray's)
        raise ConfigError(f"tune.run: callbacks must be None or a list of callbacks (got {callbacks!r})")
    if fail_fast and max_failures != 0:
        raise ConfigError("tune.run: max_failures must be 0 if fail_fast=True")
    # As in Ray, a resume_config takes the place of what `resume` says, and makes the run resume when it can.
    flags = _resume_config(resume_config).restore_flags() if resume_config is not None else resume_flags(resume)
    if isinstance(search_alg, str):
        search_alg = create_searcher(search_alg)
    if isinstance(scheduler, str):
        scheduler = create_scheduler(scheduler)
    if export_formats:
        warnings.warn("fluidsalus.tune: export_formats is accepted but not used by fluidsalus", UserWarning,
                      stacklevel=2)
    run_config = RunConfig(
        name=name,
        storage_path=storage_path,
        failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        checkpoint_config=_checkpoint_config(checkpoint_config, keep_checkpoints_num, checkpoint_score_attr,
                                             checkpoint_freq, checkpoint_at_end),
        sync_config=sync_config,
        verbose=verbose,
        stop=stop,
        callbacks=list(callbacks) if callbacks is not None else None,
        progress_reporter=progress_reporter,
        log_to_file=log_to_file,
        local_dir=local_dir,
    )
    tune_config = TuneConfig(
        mode=mode,
        metric=metric,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples,
        max_concurrent_trials=max_concurrent_trials,
        time_budget_s=time_budget_s,
        reuse_actors=reuse_actors,
        trial_name_creator=trial_name_creator,
        trial_dirname_creator=trial_dirname_creator,
    )
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    tuner = Tuner(trainable, param_space=config, tune_config=tune_config, run_config=run_config)
    folder = os.path.join(os.path.abspath(os.path.expanduser(run_config.storage_path or "")), name) if name else None
    if flags is not None and folder is not None and not os.path.isfile(os.path.join(folder, DB_FILENAME)) \
            and written_by_ray(folder):
        given = "resume_config" if resume_config is not None else f"resume={resume!r}"
        raise ConfigError(f"tune.run: {given}: Ray Tune wrote {folder!r} (its experiment_state file is "
                          "there); fluidsalus continues the experiments it ran itself: continue this one with Ray's "
                          "tune.run(..., resume=True), or give this run another name")
    # (its experiment.db is what it resumes: tune.run takes its configs from the call, so a folder without tuner.pkl,
    # of a native fluidsalus.run or an older fluidsalus, is resumed too, or refused with fluidsalus.run's reason)
    if flags is not None and folder is not None and os.path.isfile(os.path.join(folder, DB_FILENAME)):
        check_same_trainable(folder, tuner._trainable, registered_name)  # (its resume ran another one's trials)
        tuner._continue(folder, **flags)
    tuner._resume_hint = _resume_hint
    tuner._checkpoint_at_end_by_default = False  # tune.run leaves CheckpointConfig's None as it is, falsy
    tuner._registered_name = registered_name  # kept under with_resources too: Ray names the run after it
    grid = tuner.fit()
    analysis = ExperimentAnalysis.of_results(grid.experiment_path, list(grid), tuner.request, metric, mode)
    trials = analysis.trials
    incomplete = [trial for trial in trials if trial.status != TERMINATED]
    if incomplete:
        described = "; ".join(_describe(t) for t in incomplete)
        if raise_on_failed_trial and not tuner.interrupted:
            # (Ray's TuneError("Trials did not complete", incomplete_trials): scripts read the trials from args[1])
            raise FluidsalusError(f"Trials did not complete: {described}", incomplete)
        logger.error("Trials did not complete: %s", described)
    return analysis
