"""fluidsalus: a hyperparameter-tuning execution engine on Ray.

Search algorithms emit TrialGroups, a planner spreads them over the cluster's devices, and one long-lived
Ray actor per device runs many small trials side by side. Every run is recorded in an SQLite store.

Public names:

- :func:`run` runs a sweep and returns a :class:`ResultGrid`.
- Inside a trainable: :func:`report`, :func:`step`, :func:`get_checkpoint`, :func:`get_context`,
  :class:`Checkpoint`.
- Search space: :func:`uniform`, :func:`quniform`, :func:`loguniform`, :func:`qloguniform`, :func:`randn`,
  :func:`qrandn`, :func:`randint`, :func:`qrandint`, :func:`lograndint`, :func:`qlograndint`,
  :func:`choice`, :func:`grid_search`, :func:`sample_from`.
"""

from fluidsalus.api import run
from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError, FluidsalusError, SessionError, SpaceError, StoreError, TrialError
from fluidsalus.result import Result, ResultGrid
from fluidsalus.session import get_checkpoint, get_context, report, step
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

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "ConfigError",
    "FluidsalusError",
    "Result",
    "ResultGrid",
    "SessionError",
    "SpaceError",
    "StoreError",
    "TrialError",
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
    "randint",
    "randn",
    "report",
    "run",
    "sample_from",
    "step",
    "uniform",
]
