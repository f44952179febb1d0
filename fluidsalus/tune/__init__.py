"""Ray Tune's API on fluidsalus: change ``from ray import tune`` to ``from fluidsalus import tune``.

The names a Ray Tune script touches, with Ray 2.x's signatures and defaults:

- :class:`Tuner` (``fit``, ``restore``, ``can_restore``, ``get_results``), :class:`TuneConfig`,
  :class:`RunConfig`, :class:`CheckpointConfig`, :class:`FailureConfig`, :class:`SyncConfig` (accepted,
  nothing to sync), :class:`ResumeConfig` (for ``run(resume_config=...)``);
- inside a trainable: :func:`report`, :func:`get_checkpoint`, :func:`get_context`, :class:`Checkpoint`;
- :func:`with_parameters`, :func:`with_resources`, :class:`Trainable`, :class:`PlacementGroupFactory`;
- the search-space functions (:func:`uniform`, :func:`choice`, :func:`grid_search`, ...);
- :class:`Stopper` (and :mod:`fluidsalus.tune.stopper`), :class:`Callback` (and
  :class:`fluidsalus.tune.logger.LoggerCallback`), :class:`CLIReporter` / :class:`JupyterNotebookReporter`
  (:mod:`fluidsalus.tune.progress_reporter`);
- Ray's result keys (:mod:`fluidsalus.tune.result`), Ray's helpers (:mod:`fluidsalus.tune.utils`) and the toy
  ``MyTrainableClass`` of Ray's examples (:mod:`fluidsalus.tune.utils.mock_trainable`);
- :mod:`fluidsalus.tune.schedulers` and :mod:`fluidsalus.tune.search` (``search.bohb``, ``search.optuna``,
  ``search.hyperopt``, ``search.bayesopt``), including a ``Searcher`` or ``TrialScheduler`` subclass of your own;
- Ray's module paths scripts import from (``tune.experiment``, ``tune.result_grid``, ``tune.trainable``, ...);
- :class:`ResultGrid`, :class:`Result`;
- the legacy :func:`run` (``tune.run(trainable, config=..., ...)``), which returns an
  :class:`ExperimentAnalysis` (:mod:`fluidsalus.tune.analysis`), and ``create_scheduler`` /
  ``create_searcher`` (schedulers and search algorithms by Ray's short names), and :class:`Experiment` /
  :func:`run_experiments` (:mod:`fluidsalus.tune.experiment`), and :func:`register_trainable` (trainables
  by name, :mod:`fluidsalus.tune.registry`).

``Tuner.fit()`` turns the search algorithm and the scheduler into one fluidsalus searcher and runs it with
:func:`fluidsalus.run`. docs/compatibility.md lists what maps to what and what differs; docs/migrating.md
shows the switch side by side.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from fluidsalus import session as _session
from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import FluidsalusError as TuneError
from fluidsalus.result import Result, ResultGrid
from fluidsalus.session import TrialContext as TuneContext
from fluidsalus.space import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from fluidsalus.tune import analysis, error, experiment, progress_reporter, schedulers, search, stopper
from fluidsalus.tune._config import CheckpointConfig, FailureConfig, ResumeConfig, RunConfig, SyncConfig, TuneConfig
from fluidsalus.tune._run import run
from fluidsalus.tune._trainable import PlacementGroupFactory, Trainable, with_parameters, with_resources
from fluidsalus.tune._tuner import Tuner
from fluidsalus.tune.analysis import ExperimentAnalysis
from fluidsalus.tune.callback import Callback
from fluidsalus.tune.experiment import Experiment, run_experiments
from fluidsalus.tune.progress_reporter import CLIReporter, JupyterNotebookReporter, ProgressReporter
from fluidsalus.tune.registry import register_trainable
from fluidsalus.tune.schedulers import create_scheduler
from fluidsalus.tune.search import create_searcher
from fluidsalus.tune.stopper import Stopper

#: The session functions that warned of a call outside a trial (each warns once, as Ray's ``log_once``).
_WARNED_OUTSIDE: set[str] = set()


def _outside_a_trial(name: str) -> bool:
    """Whether ``name`` is called by a script run on its own, outside any trial: Ray's warns once and returns
    None, so a training function debugged without a ``Tuner`` runs to its end, its integration callbacks'
    reports included. In a device process a thread no trial started still gets ``SessionError`` (its report
    would be lost). fluidsalus's own ``fluidsalus.report`` always raises."""
    if _session.current_session() is not None or _session.in_device_process():
        return False
    if name not in _WARNED_OUTSIDE:
        _WARNED_OUTSIDE.add(name)
        warnings.warn(f"`{name}` is meant to only be called inside a function that is executed by a Tuner or "
                      "Trainer. Returning `None`.", stacklevel=3)
    return True


def report(metrics: Mapping[str, Any], *, checkpoint: Checkpoint | None = None) -> None:
    """Report one iteration's metrics, and optionally a checkpoint (``ray.tune.report``).

    Outside a trial (the training function run on its own) it warns once and does nothing, as Ray's.

    Args:
        metrics: The metrics of this iteration.
        checkpoint: A :class:`Checkpoint` of the trial's state after this iteration; it is copied into the
            experiment before ``report`` returns.
    """
    if _outside_a_trial("report"):
        return
    _session.report(metrics, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from (``ray.tune.get_checkpoint``), or None when the trial starts fresh (and,
    with a warning, outside a trial, as Ray's)."""
    if _outside_a_trial("get_checkpoint"):
        return None
    return _session.get_checkpoint()


def get_context() -> TuneContext:
    """The running trial's context (``ray.tune.get_context``): ids, name, folder, resources, device."""
    return _session.get_context()


__all__ = [
    "CLIReporter",
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "FailureConfig",
    "JupyterNotebookReporter",
    "PlacementGroupFactory",
    "ProgressReporter",
    "Result",
    "ResultGrid",
    "ResumeConfig",
    "RunConfig",
    "Stopper",
    "SyncConfig",
    "TuneConfig",
    "TuneContext",
    "TuneError",
    "Trainable",
    "Tuner",
    "choice",
    "get_checkpoint",
    "get_context",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "analysis",
    "create_scheduler",
    "create_searcher",
    "error",
    "experiment",
    "progress_reporter",
    "randint",
    "randn",
    "register_trainable",
    "registry",
    "report",
    "run",
    "run_experiments",
    "sample_from",
    "schedulers",
    "search",
    "stopper",
    "uniform",
    "with_parameters",
    "with_resources",
]
