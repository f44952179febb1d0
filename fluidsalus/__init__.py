"""fluidsalus: a hyperparameter-tuning execution engine on Ray.

Search algorithms emit TrialGroups, a planner spreads them over the cluster's devices, and one long-lived
Ray actor per device runs many small trials side by side. Every run is recorded in an SQLite store.

Public names:

- :func:`run` runs a sweep and returns a :class:`ResultGrid`; :func:`inspect` reads an experiment's goodput
  report; :func:`release_devices` ends the device actors finished runs keep warm for the next;
  ``fluidsalus.tune`` and ``fluidsalus.optuna`` are the Ray Tune and Optuna front ends.
- Inside a trainable: :func:`report`, :func:`step`, :func:`get_checkpoint`, :func:`get_context`,
  :class:`Checkpoint`.
- Search space: :func:`uniform`, :func:`quniform`, :func:`loguniform`, :func:`qloguniform`, :func:`randn`,
  :func:`qrandn`, :func:`randint`, :func:`qrandint`, :func:`lograndint`, :func:`qlograndint`,
  :func:`choice`, :func:`grid_search`, :func:`sample_from`.
"""

from typing import TYPE_CHECKING

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError, FluidsalusError, SessionError, SpaceError, StoreError, TrialError
from fluidsalus.inspect import Report, inspect
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

if TYPE_CHECKING:
    from fluidsalus.api import release_devices, run

#: The package's version, written only here: pyproject.toml reads it (``[tool.setuptools.dynamic]``).
__version__ = "0.1.0"

#: Front ends and tools loaded on first use, so that ``import fluidsalus`` does not import optuna etc.
_LAZY_SUBMODULES = frozenset({"optuna", "tune", "searchers", "callbacks", "session"})
#: Names loaded on first use, and their modules: ``run`` imports Ray, which the pure modules (the planner, the
#: searchers, the simulator) must not pay for, since ``import fluidsalus.sim`` runs this file first.
_LAZY_NAMES = {"run": "fluidsalus.api", "release_devices": "fluidsalus.api"}


def __getattr__(name: str) -> object:
    import importlib

    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"fluidsalus.{name}")
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fluidsalus' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The loaded names and those loaded on first use (so that tab completion lists ``run``)."""
    return sorted(set(globals()) | set(_LAZY_NAMES) | _LAZY_SUBMODULES)

__all__ = [
    "Checkpoint",
    "ConfigError",
    "Report",
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
    "inspect",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "release_devices",
    "report",
    "run",
    "sample_from",
    "step",
    "uniform",
]
