"""``Experiment`` and ``run_experiments``: the experiment specs of Ray Tune's legacy API.

``tune.run_experiments({"name": {"run": train, "config": {...}, "stop": {...}}})`` and
``tune.run(tune.Experiment("name", train, config=..., stop=...), metric=..., ...)`` are how older Ray Tune
scripts describe an experiment. An :class:`Experiment` holds what one experiment runs (its trainable, search
space, stop rule, samples, storage, checkpoints, retries); ``tune.run`` takes those from it, as Ray does, and
the rest of its arguments (metric, mode, search algorithm, scheduler, callbacks, ...) from its own call.

:func:`run_experiments` runs each experiment with ``tune.run`` and returns all their trials. Ray runs several
experiments at once in one controller when ``concurrent=True`` (its default); fluidsalus runs them one after
another, with a warning when there are several, since each ``tune.run`` is one fluidsalus experiment with its
own store.

``Trial`` (also ``experiment.trial.Trial``) is the view of a trial that callbacks get
(:class:`fluidsalus.tune.callback.TrialInfo`), for the type hints of callbacks written for Ray.
"""

from __future__ import annotations

import copy
import datetime
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.store import tune_storage_path
from fluidsalus.tune._config import CheckpointConfig
from fluidsalus.tune._trainable import is_class_trainable
from fluidsalus.tune.callback import TrialInfo as Trial
from fluidsalus.tune.registry import resolve_trainable

__all__ = ["Experiment", "Trial", "run_experiments"]

logger = logging.getLogger(__name__)

#: The keys of :attr:`Experiment.public_spec` (Ray's).
PUBLIC_KEYS = ("stop", "num_samples", "time_budget_s")
#: How the warning after an interrupted ``run_experiments`` says to resume (Ray's words).
RESUME_HINT = "tune.run_experiments(..., resume=True)"


class Experiment:
    """One experiment of Ray Tune's legacy API (``ray.tune.Experiment``), with Ray's arguments.

    Args:
        name: The experiment's folder name under ``storage_path`` (default: the trainable's name and a timestamp).
        run: A function ``f(config)`` that calls ``tune.report``, a ``Trainable`` subclass, or the name it was
            registered under (``tune.register_trainable``).
        stop: A dict of result thresholds, a function ``f(trial_id, result)``, or a ``Stopper``.
        time_budget_s: Time after which every trial is stopped.
        config: The search space.
        resources_per_trial: A resource request (see ``with_resources``).
        num_samples: Samples of the search space (``-1``: until the time budget or a stopper ends the run).
        storage_path: Where the experiment folder goes (default ``~/ray_results``).
        storage_filesystem: Not supported (must be None).
        sync_config: Accepted and ignored (with a warning, when run).
        checkpoint_config: A ``CheckpointConfig`` or a dict of its fields.
        trial_name_creator: Names each trial (``TuneConfig.trial_name_creator``).
        trial_dirname_creator: Names each trial's folder (``TuneConfig.trial_dirname_creator``).
        log_to_file: Trial output to files in each trial's folder (``RunConfig.log_to_file``).
        export_formats: Accepted and ignored (with a warning, when run).
        max_failures: Retries of a failing trial (``-1``: no limit).
        restore: Not supported (must be None).
        local_dir: Refused, as in Ray: use ``storage_path``.

    Raises:
        ConfigError: A refused argument, a ``config`` that is not a dict, or ``checkpoint_at_end`` /
            ``checkpoint_frequency`` with a function trainable (Ray refuses those too).
    """

    def __init__(
        self,
        name: str,
        run: str | Callable[..., Any] | type,
        *,
        stop: Mapping[str, Any] | Callable[[str, Mapping[str, Any]], bool] | Any = None,
        time_budget_s: int | float | datetime.timedelta | None = None,
        config: dict[str, Any] | None = None,
        resources_per_trial: Mapping[str, Any] | Any = None,
        num_samples: int = 1,
        storage_path: str | None = None,
        storage_filesystem: Any = None,
        sync_config: Any = None,
        checkpoint_config: CheckpointConfig | Mapping[str, Any] | None = None,
        trial_name_creator: Callable[[Any], str] | None = None,
        trial_dirname_creator: Callable[[Any], str] | None = None,
        log_to_file: bool | str | tuple[str, str] = False,
        export_formats: Sequence[Any] | None = None,
        max_failures: int = 0,
        restore: str | None = None,
        local_dir: str | None = None,
    ) -> None:
        self._run_name = run if isinstance(run, str) else None
        run = resolve_trainable(run)  # a name given to tune.register_trainable
        if not callable(run):
            raise ConfigError(f"Experiment: run must be a function or a Trainable class (got {type(run).__name__})")
        for field, value in (("storage_filesystem", storage_filesystem), ("restore", restore)):
            if value is not None:
                raise ConfigError(f"Experiment: {field} is not supported by fluidsalus; leave it None")
        if local_dir is not None:
            raise ConfigError("Experiment: local_dir is no longer supported (Ray refuses it too); use storage_path")
        if name is not None and not isinstance(name, str):
            raise ConfigError(f"Experiment: name must be a str or None (got {type(name).__name__})")
        if config is not None and not isinstance(config, dict):
            raise ConfigError(f"Experiment: config must be a dict (got {type(config).__name__}); convert the search "
                              "space to a dict first")
        if isinstance(checkpoint_config, Mapping):
            checkpoint_config = CheckpointConfig(**checkpoint_config)
        checkpoint_config = checkpoint_config or CheckpointConfig()
        if not is_class_trainable(run):
            for field in ("checkpoint_at_end", "checkpoint_frequency"):
                if getattr(checkpoint_config, field):
                    raise ConfigError(f"Experiment: {field} cannot be used with a function trainable; report a "
                                      "checkpoint with tune.report(metrics, checkpoint=...) in the training loop")
        self.name = name
        self._run = run
        self._checkpoint_config = checkpoint_config
        self._stop = stop
        self.spec: dict[str, Any] = {
            "run": run,
            "stop": stop,
            "time_budget_s": time_budget_s,
            "config": config or {},
            "resources_per_trial": resources_per_trial,
            "num_samples": num_samples,
            "storage_path": storage_path,
            "sync_config": sync_config,
            "checkpoint_config": checkpoint_config,
            "trial_name_creator": trial_name_creator,
            "trial_dirname_creator": trial_dirname_creator,
            "log_to_file": log_to_file,
            "export_formats": list(export_formats or []),
            "max_failures": max_failures,
        }

    @classmethod
    def from_json(cls, name: str, spec: Mapping[str, Any]) -> Experiment:
        """An Experiment from a spec dict, the values of ``run_experiments({name: spec})`` (Ray's keys).

        Args:
            name: The experiment's name.
            spec: ``{"run": trainable, ...}`` with the other arguments of :class:`Experiment`; an ``env`` key goes
                into ``config`` (Ray's special case for RLlib).

        Raises:
            ConfigError: No ``run``, or a key :class:`Experiment` does not take (the message lists them).
        """
        if not isinstance(spec, Mapping):
            raise ConfigError(f"run_experiments: the spec of experiment {name!r} must be a dict (got "
                              f"{type(spec).__name__})")
        if "run" not in spec:
            raise ConfigError(f"run_experiments: experiment {name!r} has no trainable: add \"run\": <function or "
                              "Trainable class> to its spec")
        spec = {key: value for key, value in spec.items()}
        if "env" in spec:
            spec["config"] = dict(spec.get("config") or {}, env=spec.pop("env"))
        allowed = sorted(_ARGUMENTS)
        unknown = sorted(set(spec) - set(allowed) - {"run"})
        if unknown:
            raise ConfigError(f"run_experiments: experiment {name!r} has unknown keys {unknown}; the keys are "
                              f"'run' and {allowed}")
        run = spec.pop("run")
        # Copied as Ray does, so that later changes to the caller's dicts do not reach the experiment.
        return cls(name, run, **copy.deepcopy(spec))

    @property
    def run_identifier(self) -> str:
        """The trainable's name (Ray's registry name for it)."""
        if self._run_name is not None:
            return self._run_name
        return getattr(self._run, "__name__", type(self._run).__name__)

    @property
    def stopper(self) -> Any:
        """The ``stop`` argument when it is a function or a ``Stopper`` (None for a dict of thresholds)."""
        return None if self._stop is None or isinstance(self._stop, Mapping) else self._stop

    @property
    def checkpoint_config(self) -> CheckpointConfig:
        """The experiment's :class:`CheckpointConfig`."""
        return self._checkpoint_config

    @property
    def public_spec(self) -> dict[str, Any]:
        """The spec's ``stop``, ``num_samples`` and ``time_budget_s`` (Ray's public keys)."""
        return {key: self.spec[key] for key in PUBLIC_KEYS}

    @property
    def path(self) -> str | None:
        """The experiment folder, when the experiment has a name (None: named when it runs)."""
        if not self.name:
            return None
        storage = self.spec["storage_path"] or tune_storage_path()  # (RunConfig's default: $RAY_STORAGE too)
        return os.path.join(os.path.abspath(os.path.expanduser(storage)), self.name)

    local_path = path

    def run_arguments(self) -> dict[str, Any]:
        """The ``tune.run`` arguments this experiment sets (the trainable under ``run_or_experiment``)."""
        arguments = {key: value for key, value in self.spec.items() if key != "run"}
        arguments["run_or_experiment"] = self._run_name or self._run  # tune.run names the run after a registered name
        arguments["name"] = self.name
        return arguments

    def __repr__(self) -> str:
        return f"Experiment(name={self.name!r}, run={self.run_identifier!r})"


#: The keyword arguments of :class:`Experiment` a spec dict may hold.
_ARGUMENTS = ("stop", "time_budget_s", "config", "resources_per_trial", "num_samples", "storage_path",
              "storage_filesystem", "sync_config", "checkpoint_config", "trial_name_creator",
              "trial_dirname_creator", "log_to_file", "export_formats", "max_failures", "restore", "local_dir")


def experiment_list(experiments: Any) -> list[Experiment]:
    """Ray's ``_convert_to_experiment_list``: one :class:`Experiment`, a list of them, or ``{name: spec}``.

    Raises:
        ConfigError: Anything else (the message says what is accepted).
    """
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, Mapping):
        return [Experiment.from_json(name, spec) for name, spec in experiments.items()]
    if isinstance(experiments, Sequence) and not isinstance(experiments, str) and experiments and all(
            isinstance(e, Experiment) for e in experiments):
        return list(experiments)
    raise ConfigError("run_experiments: experiments must be an Experiment, a list of Experiments or a dict "
                      f"{{name: spec}} (got {experiments!r})")


def run_experiments(
    experiments: Experiment | Mapping[str, Any] | Sequence[Experiment | Mapping[str, Any]],
    scheduler: Any = None,
    verbose: Any = None,
    progress_reporter: Any = None,
    resume: bool | str | None = None,
    resume_config: Any = None,
    reuse_actors: bool = False,
    raise_on_failed_trial: bool = True,
    concurrent: bool = True,
    callbacks: Sequence[Any] | None = None,
    _remote: bool | None = None,
) -> list[Any]:
    """Run experiments with Ray Tune's legacy API (``ray.tune.run_experiments``) and return all their trials.

    Each experiment runs with ``tune.run`` and these arguments, one after another (see the module docstring).

    Args:
        experiments: An :class:`Experiment`, a list of them (or of ``{name: spec}`` dicts), or ``{name: spec}``.
        scheduler: A scheduler (or a name ``create_scheduler`` knows), as ``tune.run``'s.
        verbose: 0, 1, 2 or 3 (default: ``tune.run``'s).
        progress_reporter: A ``CLIReporter`` or other progress reporter (``RunConfig.progress_reporter``).
        resume: As ``tune.run``'s: continue each experiment that can be restored.
        resume_config: Not supported (must be None).
        reuse_actors: Accepted (device actors are always reused).
        raise_on_failed_trial: Raise after an experiment in which a trial did not end TERMINATED.
        concurrent: Ray runs several experiments at once when True; fluidsalus runs them one after another.
        callbacks: Ray ``Callback`` objects, given to every experiment.
        _remote: Not supported (Ray Client).

    Returns:
        The trials of every experiment, in order (:class:`fluidsalus.tune.analysis.Trial`).

    Raises:
        ConfigError: Bad or unsupported input, before any trial starts.
        TuneError: A trial did not end TERMINATED and ``raise_on_failed_trial`` is True.
    """
    from fluidsalus.tune._run import run

    if _remote:
        raise ConfigError("run_experiments: _remote (Ray Client) is not supported by fluidsalus")
    if not isinstance(experiments, (Experiment, Mapping)) and isinstance(experiments, Sequence):
        experiments = [e for item in experiments for e in experiment_list(item)]
    listed = experiment_list(experiments)
    if concurrent and len(listed) > 1:
        warnings.warn(f"fluidsalus.tune: run_experiments runs the {len(listed)} experiments one after another "
                      "(Ray runs them at once with concurrent=True)", UserWarning, stacklevel=2)
    trials: list[Any] = []
    for experiment in listed:
        analysis = run(experiment, scheduler=scheduler, verbose=verbose, progress_reporter=progress_reporter,
                       resume=resume, resume_config=resume_config, reuse_actors=reuse_actors,
                       raise_on_failed_trial=raise_on_failed_trial, callbacks=callbacks, _resume_hint=RESUME_HINT)
        trials += analysis.trials
    return trials
