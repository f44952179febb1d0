"""The Optuna front end: ``fluidsalus.optuna.optimize(study, objective, ...)``.

``optimize`` is ``study.optimize`` with the objective running on fluidsalus's device actors (lanes) instead of
Optuna's threads. Each Optuna trial is one fluidsalus trial, run by :func:`fluidsalus.run` with a searcher
that proposes empty fluidsalus trials and a call handler that owns the real study on the driver.

The objective gets a :class:`DeviceTrial`, which has ``optuna.Trial``'s API. Each of its calls goes to the
real ``optuna.Trial`` on the driver through :func:`fluidsalus.session.call_driver` (one round trip; a
parameter already suggested with the same distribution is answered from a local copy, as Optuna does; a report
goes with the next call; ``should_prune`` under a ``NopPruner``, or Optuna's ``MedianPruner``/``PercentilePruner``
of an in-memory study, is answered on the device: :meth:`DeviceTrial._local_should_prune`), so the
study's sampler, pruner and storage (in-memory, RDB/SQLite, JournalStorage, ...) see exactly what
``study.optimize`` would show them, define-by-run included, and the study shows up in optuna-dashboard like
any other.

A trial's life, and the Optuna state it ends in:

1. The executor places the fluidsalus trial on a device; once it holds its lane, the objective wrapper asks
   the driver to start it. Only then is the Optuna trial created (``study.ask()``), so a trial waiting for a
   lane is no RUNNING Optuna trial yet and samplers learn from every trial finished before it starts.
   After ``timeout``, ``study.stop()`` or an uncaught exception, no new trial starts; running ones finish. A
   trial that began on its lane before the stop reached it runs nothing (no Optuna trial) and is recorded as one
   that never started (:meth:`_StudyDriver.started_trial`).
2. The objective runs. ``trial.report(value, step)`` records the value in the study and is an iteration
   boundary of the lane (where another trial of the lane may take its turn); ``trial.should_prune()`` asks the
   study's pruner. An error of the study's storage answering a call (a value it refuses, which goes with the
   trial's next call or its end) is raised in the objective there, as Optuna's ``report`` raises it.
3. The wrapper classifies the outcome on the device and tells the driver, which tells the study:

   * a return value: ``COMPLETE`` (a float, or a sequence for a multi-objective study); ``None``, NaN, a value
     that is no number, or the wrong number of values: ``FAIL``, and the optimisation goes on (as in Optuna);
   * ``optuna.TrialPruned``: ``PRUNED``, with the last reported value as the trial's value (Optuna's rule);
   * an exception in ``catch``: ``FAIL``, and the optimisation goes on;
   * any other exception: ``FAIL``; no new trial starts, running trials finish, and ``optimize`` raises the
     exception (re-created on the driver from its pickle, with its chain of causes, and the device's traceback
     as the ``__cause__`` of the chain's first exception).

   Then Optuna's log line is written through Optuna's logger and the callbacks get ``(study, FrozenTrial)``.
4. A trial the engine starts again (a device out-of-memory error re-admits it with a larger memory estimate;
   a dead device actor is replaced; ``max_failures=``) runs its objective again on the **same** Optuna trial:
   the suggestions are the same and steps already reported are not reported again. A trial that the engine
   ends before the objective returns (out of memory for good, an engine error, ``KeyboardInterrupt``) is told
   ``FAIL``; it counts as an exception that ``catch`` did not name, unless it was an out-of-memory error of a
   type in ``catch``.

Optuna's artifacts work from the objective as under ``study.optimize``:
``optuna.artifacts.upload_artifact(artifact_store=..., file_path=..., study_or_trial=trial)`` writes the file
from the device to the artifact store and records it on the trial in the study's storage (through
:class:`DeviceStorage`, ``trial.storage``), so ``get_all_artifact_meta`` and optuna-dashboard find it.

The fluidsalus experiment (``storage_path``/``name``) records every trial's intermediate values, its Optuna
number and final state, so ``fluidsalus inspect`` shows the lanes' goodput for the study: a ``PRUNED`` trial ends
there stopped, as a trial a scheduler stops; a ``FAIL`` one errored, with the objective's exception, its work since
its last report counted as the failure's waste (a failure told to the study is final: ``max_failures`` retries only
the engine's failures).
"""

from __future__ import annotations

import array
import collections
import contextlib
import copy
import datetime
import gc
import inspect
import io
import itertools
import logging
import math
import numbers
import os
import re
import shlex
import threading
import time
import traceback
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.progress_bar import _ProgressBar
from optuna.trial import BaseTrial, FrozenTrial, TrialState

# Ray's own pickler, which ships the objective: a class of the script pickled in a call is then the class the
# objective has (cloudpickle tracks its by-value classes per pickler module).
from ray import cloudpickle

from fluidsalus import session
from fluidsalus._warnings import category_ignored, filters_mutated
from fluidsalus.api import run
from fluidsalus.config import resolve_storage_path
from fluidsalus.errors import (
    MAX_ERROR_PICKLE_BYTES,
    ConfigError,
    ConfigTypeError,
    FluidsalusError,
    StoreError,
    TrialError,
    exception_text,
    pickle_exception,
    plural,
    unpickle_exception,
)
from fluidsalus.gpu.host import OUT_COMPLETED, OUT_ERRORED, OUT_STOPPED, _is_out_of_memory
from fluidsalus.inspect import OPTUNA_NUMBER_KEY, OPTUNA_STATE_KEY, OPTUNA_TRIAL_EVENT
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.searchers._optuna import DIRECTIONS
from fluidsalus.store import DB_FILENAME, ERROR, PENDING, RUNNING, TERMINATED, ExperimentStore, unused_name
from fluidsalus.trialgroup.executor import append_error_file
from fluidsalus.trialgroup.trial import TrialGroup

try:  # Optuna's own heartbeat helpers (what study.optimize uses for RDBStorage(heartbeat_interval=...)).
    from optuna.storages._heartbeat import get_heartbeat_thread, is_heartbeat_enabled
except ImportError as exc:  # pragma: no cover - present in every supported Optuna (>=4,<6)
    raise ImportError(f"fluidsalus.optuna needs optuna>=4,<6 (optuna.storages._heartbeat: {exc})") from exc

__all__ = ["DeviceStorage", "DeviceStudy", "DeviceTraceback", "DeviceTrial", "optimize"]

#: Prefix of the driver calls this front end makes (``fluidsalus.session.call_driver``).
CALL_PREFIX = "optuna."
M_START = CALL_PREFIX + "start"
M_SUGGEST = CALL_PREFIX + "suggest"
M_SHOULD_PRUNE = CALL_PREFIX + "should_prune"
M_SET_USER_ATTR = CALL_PREFIX + "set_user_attr"
M_CONSTRAINTS = CALL_PREFIX + "constraints"
M_SET_CONSTRAINT = CALL_PREFIX + "set_constraint"
M_STUDY = CALL_PREFIX + "study"
M_FAILING = CALL_PREFIX + "failing"
M_FINISH = CALL_PREFIX + "finish"
#: The trial's system attributes in the study's storage: read them, or set one (``DeviceStorage``).
M_SYSTEM_ATTRS = CALL_PREFIX + "system_attrs"
M_SET_SYSTEM_ATTR = CALL_PREFIX + "set_system_attr"
#: What the study's sampler drew jointly for the trial (``optuna.Trial.relative_params``).
M_RELATIVE_PARAMS = CALL_PREFIX + "relative_params"
#: Reports held back by ``DeviceTrial.report``, then another call: ``(reports, method, pickled args)``.
M_AFTER_REPORTS = CALL_PREFIX + "after_reports"
#: Nothing but the held reports it carries: a trial leaving its objective early (stopped) tells them, and so does one
#: that holds :data:`HELD_REPORTS_MAX`.
M_FLUSH = CALL_PREFIX + "flush"
#: What a :data:`M_FLUSH` call's wait is named in the device's goodput record (``driver_wait``): the trial's
#: ``report`` calls told to the study (a call that carries them with it is named by its own method).
M_REPORT = CALL_PREFIX + "report"
#: The most reports a trial holds for its next driver call: one more is sent at once with the others (one round trip
#: per this many steps of a trial whose ``should_prune`` the device answers). Without it such a trial carried all its
#: reports in its last call, which held the driver's loop, and every other device's trial, for 32-34 s at 100,000
#: steps (a review's measurement); Optuna's own steps then cost about 0.1 ms each, a round trip here about 3 ms.
HELD_REPORTS_MAX = 100

#: ``_TrialSnapshot.prune_rule``: the study's pruner answers ``should_prune`` with False whatever the study holds
#: (``NopPruner``), or reads nothing of the study but its COMPLETED trials' intermediate values
#: (``MedianPruner``/``PercentilePruner`` on an in-memory study: ``(PRUNE_COMPLETED, pruner, view key)``, the
#: pruner's answer given from the device's view of those trials, :func:`_percentile_prune`). The device then answers
#: those calls itself.
PRUNE_NEVER, PRUNE_COMPLETED = "never", "completed"

#: How the objective ended (sent with ``M_FINISH``).
OUT_RETURNED, OUT_PRUNED, OUT_FAILED = "returned", "pruned", "failed"

#: Proposed fluidsalus trials that have not started their objective yet. One is enough: the executor always
#: has a trial ready for the next free lane, and each start proposes the next one (a loop turn, milliseconds).
#: More would only sit in queues; the Optuna trial is created when the objective starts, not when proposed.
PROPOSALS_AHEAD = 1
#: The calls answered off the driver's loop when the run has two devices or more: those in which the study's sampler
#: samples (a GPSampler's fit takes 0.3 to 1 s; the loop meanwhile serves the other devices' trials).
SAMPLER_CALLS = frozenset({M_SUGGEST, M_RELATIVE_PARAMS})
#: Default of ``optimize(sampler_threads=...)``: at most this many sampler calls are answered at once (one per
#: device up to this). More threads than the driver's cores gain nothing: a sampler holds the GIL between its
#: NumPy/PyTorch calls.
SAMPLER_THREADS_MAX = 4
#: A sampler call goes to a call thread only while one of the study's last :data:`SAMPLE_TIMES_KEPT` sampler calls
#: took this long or more: a GPSampler's do (0.3 to 1 s for each trial's first suggest, which fits the model;
#: its others take a millisecond); a TPE's or random sampler's (0.1 to 10 ms) stay on the loop, where they were:
#: on a call thread they gained nothing (they hold the GIL) and cost the loop GIL waits (TPE, 400 trials on two
#: devices: 25.4 s against 22.5 s, docs/benchmarks.md). A run's first sampler calls are answered on the loop, and
#: timed.
SAMPLER_THREAD_MIN_S = 0.05
#: How many of the last sampler calls' times :data:`SAMPLER_THREAD_MIN_S` looks at (two trials' worth of four
#: parameters: a GPSampler's slow first suggest of each trial stays in view).
SAMPLE_TIMES_KEPT = 8
#: Prefix of the TrialGroup ids (one fresh trial per group).
GROUP_ID_PREFIX = "optuna"
#: System attribute of each Optuna trial: ``{"experiment": name, "trial_id": id}`` of its fluidsalus trial.
SYSTEM_ATTR = "fluidsalus"
#: Result keys: every ``trial.report`` stores (number, step, intermediate value); the end stores the outcome.
KEY_NUMBER, KEY_STEP, KEY_INTERMEDIATE = OPTUNA_NUMBER_KEY, "optuna_step", "optuna_intermediate_value"
#: Result key: which of the trial's reports this is, ``[start, seq]`` (the attempt's start on the driver, and its
#: count of reports): the driver tells the study each report once, from its result or from the call carrying it.
KEY_REPORT = "optuna_report"
KEY_STATE, KEY_VALUES = OPTUNA_STATE_KEY, "optuna_values"
#: Result key of a single-objective study's completed trial: its value, the experiment's metric once ``optimize``
#: ends (so ``fluidsalus inspect``, ``ls`` and ``ResultGrid.read`` name the best trial, in the study's direction).
KEY_VALUE = "optuna_value"
#: Characters of the study name kept in the default experiment name (file names have a length limit).
MAX_STUDY_NAME_CHARS = 80
#: Characters a fluidsalus experiment name may not hold (see ``fluidsalus.config``), replaced with ``_``.
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.=+-]")

#: ``fluidsalus.run`` arguments that ``optimize`` passes on (``**run_kwargs``).
RUN_KWARGS = frozenset({
    "name", "storage_path", "devices", "cpus_per_device", "max_concurrent_trials", "max_failures", "lane_policy",
    "quantum_ms", "verbose", "cpus_per_trial", "gpu_per_trial",
})
#: ``fluidsalus.run`` arguments ``optimize`` sets itself or that have an Optuna equivalent: what to use instead.
_REFUSED_RUN_KWARGS = {
    "config": "the objective suggests its parameters through the trial",
    "searcher": "the study's sampler proposes the parameters",
    "call_handler": "optimize answers the trials' calls itself",
    "call_offload": "optimize answers the trials' calls itself",
    "call_threads": "use sampler_threads=",
    "num_samples": "use n_trials=",
    "time_budget_s": "use timeout= (running trials then finish, as in Optuna)",
    "stop": "use timeout=, n_trials= or study.stop() in a callback",
    "fail_fast": "an exception that is not in catch= already stops the optimisation",
    "metric": "the study's directions say what is optimised",
    "mode": "the study's directions say what is optimised",
    "seed": "seed the study's sampler",
    "resume": "call optimize again on the same study storage: trial numbers continue",
    "callbacks": "pass Optuna callbacks f(study, frozen_trial) as callbacks=",
}

# Optuna writes its per-trial lines through these loggers; ours go through the same ones.
_STUDY_LOGGER = optuna.logging.get_logger("optuna.study.study")
_OPTIMIZE_LOGGER = optuna.logging.get_logger("optuna.study._optimize")
#: The line that says where an ``optimize`` call's fluidsalus record went (under ``verbose=0``), below Optuna's root
#: logger as its trial lines are: ``optuna.logging.set_verbosity``, its handler and its format apply to it.
_RECORD_LOGGER = optuna.logging.get_logger("optuna.fluidsalus")
logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- wire format


#: Links of an exception's chain (causes and contexts) re-created on the driver; past them the chain ends (its
#: text stays in the device's traceback).
MAX_CHAINED_ERRORS = 8


class DeviceTraceback(Exception):
    """The traceback of an exception raised in another process, set as the ``__cause__`` of its re-creation."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


@dataclass(frozen=True)
class _PackedError:
    """An exception on its way between the device and the driver: its pickle, or enough to describe it."""

    type_name: str
    text: str
    shown: str
    trace: str
    pickled: bytes | None
    pickle_error: str | None
    warned: tuple[Warning, ...] = ()  # warnings given on the driver before the error (see ``_caught``)
    # For a call that carried held reports: the steps of those the driver did not store (the refused one and those
    # after it), () when all were told and the call itself failed; None: not known (all are taken as untold)
    untold: tuple[int, ...] | None = None
    # Its chain (a pickle keeps none of it): ``raise ... from`` its cause, the exception being handled when it was
    # raised (often the cause itself), and whether that is hidden, as ``raise ... from`` hides it.
    cause: _PackedError | None = None
    context: _PackedError | None = None
    context_is_cause: bool = False
    suppress_context: bool = False

    @classmethod
    def of(cls, error: BaseException, depth: int = 0, bare: bool = False) -> _PackedError:
        """Pack ``error`` (and its chain). ``bare``: one that does not pickle goes as its class, ``args`` (or its
        message) and the attributes that pickle, rather than as a :class:`TrialError` naming it: for an error the
        driver raised answering a trial's call (the study's storage, its sampler), which the objective, ``catch``
        and ``optimize``'s caller then see as Optuna shows it, by its class (a storage's exception holding a lock
        was a ``TrialError``, and ``catch`` missed it)."""
        # (whole, and as its class, args and attributes: one whose __init__ takes other arguments than its args,
        # common in frameworks' errors, comes back all the same, as a Tune trial's error.cause does)
        pickled = pickle_exception(error, partial=bare)
        problem = None if pickled is not None else (
            f"it could not be pickled, or its pickles are over {MAX_ERROR_PICKLE_BYTES} bytes")
        linked = depth < MAX_CHAINED_ERRORS
        cause = error.__cause__ if linked else None
        context = error.__context__ if linked else None
        return cls(
            type_name=type(error).__name__,
            text=exception_text(error),
            shown=exception_text(error, repr),
            trace="".join(traceback.format_exception(error)) if depth == 0 else "",  # (the first's holds the chain)
            pickled=pickled,
            pickle_error=problem,
            cause=None if cause is None else cls.of(cause, depth + 1, bare),
            context=None if context is None or context is cause else cls.of(context, depth + 1, bare),
            context_is_cause=context is not None and context is cause,
            suppress_context=error.__suppress_context__,
        )

    def unpack(self, depth: int = 0) -> BaseException:
        """The exception again (or a :class:`TrialError` describing it), with its chain, and the remote traceback
        as its ``__cause__`` (when it has a cause of its own: as that chain's first cause's)."""
        error: BaseException | None = None
        problem = self.pickle_error
        if self.pickled is not None:
            error = unpickle_exception(self.pickled)
            if error is None:
                problem = "its pickle could not be loaded (its class is not importable here, or needs other arguments)"
        if not isinstance(error, BaseException):
            error = TrialError(
                f"{self.type_name}: {self.text} (the exception could not be re-created in this process: {problem})"
            )
        cause = None if self.cause is None else self.cause.unpack(depth + 1)
        error.__context__ = cause if self.context_is_cause else (
            None if self.context is None else self.context.unpack(depth + 1))
        error.__cause__ = cause
        error.__suppress_context__ = self.suppress_context
        if depth == 0:
            first = error
            while first.__cause__ is not None:
                first = first.__cause__
            if isinstance(first, DeviceTraceback):  # an error that crossed before (driver -> device -> driver):
                # its trace already holds the earlier one, under that one's header line (printed once, by first)
                trace = self.trace.removeprefix(f"{DeviceTraceback.__module__}.{DeviceTraceback.__qualname__}: \n")
                first.text, first.args = trace, (trace,)
            else:
                suppressed = first.__suppress_context__  # (setting __cause__ sets it)
                first.__cause__ = DeviceTraceback(self.trace)  # printed first: the device's frames of the chain
                first.__suppress_context__ = suppressed
        return error


class _Uncastable:
    """A returned value that ``float()`` refused on the device; ``float()`` refuses it again on the driver."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def __float__(self) -> float:
        raise TypeError(f"{self.shown} is not a number")

    def __repr__(self) -> str:
        return self.shown


class _Shown:
    """Prints as the text it holds (the ``repr`` of an object that stayed on the device)."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def __repr__(self) -> str:
        return self.shown


@dataclass(frozen=True)
class _TrialSnapshot:
    """What the device needs to know of a started Optuna trial."""

    number: int
    datetime_start: datetime.datetime | None
    params: dict[str, Any]
    distributions: dict[str, BaseDistribution]
    user_attrs: dict[str, Any]
    steps: frozenset[int]
    study_name: str
    directions: list[optuna.study.StudyDirection]
    trial_id: int  # the Optuna trial's id in the study's storage (``optuna.Trial._trial_id``)
    start: int  # how many times the objective started on this trial (1, or more after the engine restarted it)
    #: When the device may answer ``should_prune`` itself (:func:`_prune_rule`; None: never, it asks the driver).
    prune_rule: tuple[Any, ...] | None = None
    #: The trial's intermediate values in the study as this attempt starts (an earlier attempt's; under a
    #: ``PRUNE_COMPLETED`` rule only, which reads them): the device's pruner sees them as the driver's would.
    values: dict[int, float] = field(default_factory=dict)
    #: The study's storage is Optuna's ``InMemoryStorage``, whose writes of a running trial's reports cannot
    #: fail: a report may then wait for the trial's next call to the driver (see :meth:`DeviceTrial.should_prune`);
    #: other storages (RDB, journal) can fail a write, which must raise at the call Optuna raises it at, so there
    #: the device asks the driver whenever a report is held.
    writes_cannot_fail: bool = False
    #: The driver's Optuna logging settings as the trial starts (:func:`_optuna_log_settings`): the device's Optuna
    #: logger takes them before the objective runs (:func:`_take_optuna_log_settings`), as the script's apply to
    #: everything Optuna logs under ``study.optimize``. None: leave the device's as they are.
    log_settings: _LogSettings | None = None


#: The root of Optuna's loggers, whose level, default handler and propagation ``optuna.logging`` sets.
_OPTUNA_ROOT_LOGGER = "optuna"


@dataclass(frozen=True)
class _LogSettings:
    """Optuna's logging settings of a process: ``optuna.logging.set_verbosity`` 's level,
    ``enable_default_handler``/``disable_default_handler`` and ``enable_propagation``/``disable_propagation``."""

    verbosity: int
    default_handler: bool
    propagate: bool


def _optuna_log_settings() -> _LogSettings:
    """This process's Optuna logging settings (the driver's: the script's ``optuna.logging`` calls)."""
    verbosity = optuna.logging.get_verbosity()  # (first: it sets Optuna's logger up, with its handler, if not yet)
    root = logging.getLogger(_OPTUNA_ROOT_LOGGER)
    handler = getattr(optuna.logging, "_default_handler", None)  # (Optuna's own: it has no public getter)
    return _LogSettings(verbosity=verbosity, default_handler=handler is None or handler in root.handlers,
                        propagate=root.propagate)


#: The driver's Optuna logging settings this process took last (:func:`_take_optuna_log_settings`; None: none yet).
_taken_log_settings: list[_LogSettings | None] = [None]


def _take_optuna_log_settings(settings: _LogSettings | None) -> None:
    """Give this process's (a device's) Optuna logger the driver's settings, through Optuna's own calls: the
    objective's Optuna log lines (``optuna.logging.get_logger(...).info``) then show as the script asked, as under
    ``study.optimize``. Until 2026-12-01 a device kept Optuna's defaults (``INFO``, its handler, no propagation),
    so ``set_verbosity(WARNING)`` in the script left an objective's ``INFO`` lines printed.

    Settings equal to those this process took last are not taken again: a ``set_verbosity`` the objective calls
    holds for the later trials of its process, as it holds for every later trial under ``study.optimize``, until
    the script's settings change (each trial's start put the driver's back, a review of h212)."""
    if settings is None or settings == _taken_log_settings[0]:
        return
    _taken_log_settings[0] = settings
    optuna.logging.set_verbosity(settings.verbosity)
    if settings.default_handler:
        optuna.logging.enable_default_handler()
    else:
        optuna.logging.disable_default_handler()
    if settings.propagate:
        optuna.logging.enable_propagation()
    else:
        optuna.logging.disable_propagation()


#: One intermediate value on its way to the study: ``(value, step, (start, seq))`` (see :data:`KEY_REPORT`).
_Report = tuple[float, int, tuple[int, int]]
#: COMPLETED trials a device's view lacks: ``(view key, index of the first, their intermediate values)``, in the
#: order the driver saw them complete, past those the process said it held (:meth:`_StudyDriver._completed_update`).
_CompletedUpdate = tuple[str, int, list[dict[int, float]]]


class _CompletedValues:
    """One device process's copy of the COMPLETED trials of one ``optimize`` call, kept as ``MedianPruner`` and
    ``PercentilePruner`` read them: how many there are, and per step the values they reported at it (an
    ``array('d')``: 8 bytes a value, in the order the driver saw the trials complete). A dict per trial held 169.6 MB
    in each device process for 2,000 trials of 1,000 steps, and its driver a copy of 74.1 MB; this holds 17.1 MB,
    the driver none (h203's measure.py, docs/benchmarks.md). (Optuna's study lists the trials by number, not in the
    order they completed: a percentile does not depend on the order of its values.)

    Trials are only ever added, in the driver's order (``_StudyDriver._completed``), so ``count`` versions the
    view: each call to the driver says how many it holds (:func:`_view_held`), and the answer brings the trials
    from there on (:data:`_CompletedUpdate`). Callers hold ``_completed_views_lock``.

    Args:
        key: The driver's key of its ``optimize`` call (``_StudyDriver.view_key``).
    """

    __slots__ = ("_by_step", "_unreadable", "count", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self.count = 0
        self._by_step: dict[int, array.array[float]] = {}
        # Steps at which a trial's value is no float as NumPy makes one (``study.add_trial`` takes any value):
        # the pruner's own reading of them is had from the driver (see :meth:`at`).
        self._unreadable: set[int] = set()

    def add(self, trials: Iterable[Mapping[int, Any]]) -> None:
        """Add COMPLETED trials, each its intermediate values by step. A value is kept as the pruner reads it,
        ``np.array(values, dtype=float)``: ``study.add_trial`` takes a trial whose values are None (NaN there) or
        strings ("1.5"), which ``array('d')`` refused, failing the trial's call and leaving the trial half added."""
        for values in trials:
            try:  # (each trial's values are all checked before any is kept: floats and ints, in one call)
                array.array("d", values.values())
            except (TypeError, OverflowError):
                self._add_odd(values)
            else:
                for step, value in values.items():
                    column = self._by_step.get(step)
                    if column is None:
                        column = self._by_step[step] = array.array("d")
                    column.append(value)
            self.count += 1

    def _add_odd(self, values: Mapping[int, Any]) -> None:
        """Add a trial one of whose values ``array('d')`` refuses (not counted here)."""
        row = [(step, _as_pruner_float(value)) for step, value in values.items()]
        for step, value in row:
            if value is None:
                self._unreadable.add(step)
            else:
                self._by_step.setdefault(step, array.array("d")).append(value)

    def at(self, step: int) -> np.ndarray | None:
        """The values the COMPLETED trials reported at ``step`` (a copy: trials may be added meanwhile), or None
        where one of them is no float to NumPy (the driver's pruner then answers, and raises what it raises)."""
        if step in self._unreadable:
            return None
        column = self._by_step.get(step)
        return np.array(column if column is not None else (), dtype=float)


def _as_pruner_float(value: Any) -> float | None:
    """``value`` as ``PercentilePruner`` reads a COMPLETED trial's intermediate value (an element of
    ``np.array(values, dtype=float)``: None is NaN, a numeric string its number), or None where NumPy makes no
    single float of it."""
    if type(value) is float:
        return value
    try:
        converted = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        return None
    return float(converted) if converted.ndim == 0 else None


def _percentile_prune(pruner: optuna.pruners.PercentilePruner, direction: optuna.study.StudyDirection,
                      values: Mapping[int, float], completed: Callable[[int], tuple[int, np.ndarray | None]]
                      ) -> bool | None:
    """``pruner.prune(study, trial)`` of Optuna's ``PercentilePruner`` (``MedianPruner`` is one) from what it depends
    on: the trial's intermediate values, and the COMPLETED trials' count and values at the trial's last step.

    Optuna's rule (its docs): no pruning before ``n_startup_trials`` COMPLETED trials, before step
    ``n_warmup_steps``, nor at a step but the first reported in each ``interval_steps`` past the warm-up; a trial whose
    values are all NaN is pruned; else it is pruned when its best value is worse than the ``percentile`` of the
    COMPLETED trials' values at its last step (``np.nanpercentile``, from the other end when maximising), if at
    least ``n_min_trials`` of them reported that step. Optuna reads each COMPLETED trial's values to find those at
    the step, on each call (2-6 ms for 2,000 trials); here they come by step (:class:`_CompletedValues`). The
    answer is Optuna's, and of the same type (a NumPy bool from the last comparison, as Optuna returns it), and
    NumPy warns of an all-NaN slice here as there: ``tests/test_optuna_device_pruner.py`` compares the two over
    random histories.

    Args:
        pruner: The study's pruner (its own settings are read).
        direction: The study's direction.
        values: The trial's intermediate values (not changed meanwhile: a copy).
        completed: ``f(step) -> (COMPLETED trials, their values at step)``, read as one whole set (None for the
            values: one is no float to NumPy, see :meth:`_CompletedValues.at`).

    Returns:
        The pruner's answer, or None where only the pruner itself can give it (the driver answers).
    """
    if not values:
        return False
    step = max(values)
    warmup = pruner._n_warmup_steps
    if step < warmup:
        return False
    interval = pruner._interval_steps
    if interval > 1:  # (at 1, every step is the first of its interval: the trial's other steps are all before it)
        interval_start = (step - warmup) // interval * interval + warmup
        if max((s for s in values if s != step), default=-1) >= interval_start:
            return False
    count, at_step = completed(step)
    if count == 0 or count < pruner._n_startup_trials:
        return False
    own = np.asarray(list(values.values()), dtype=float)
    maximize = direction == optuna.study.StudyDirection.MAXIMIZE
    best = np.nanmax(own) if maximize else np.nanmin(own)
    if math.isnan(best):
        return True
    if at_step is None:  # (where Optuna reads the step's values: an error it raises there is raised by the driver)
        return None
    if len(at_step) < pruner._n_min_trials:
        return False
    percentile = 100 - pruner._percentile if maximize else pruner._percentile
    p = float(np.nanpercentile(at_step, percentile))
    if math.isnan(p):
        return False
    prune: bool = best < p if maximize else best > p
    return prune


#: Each device process's view of the COMPLETED trials of the ``optimize`` call running (by its driver's view key).
#: Only the newest key is kept (a process serves one ``optimize`` call at a time), and it goes when the process
#: lets that call's objective go: at the end of the run on its device (``DeviceHost.shutdown``), or at the next
#: run's start in a warm process (see :func:`_unpickle_runner`).
_completed_views: dict[str, _CompletedValues] = {}
# (reentrant: a runner left in a garbage cycle is collected at any allocation, also while this thread holds the
# lock, and its ``weakref.finalize`` then takes it again in :func:`_drop_view`: a plain lock hung the trial)
_completed_views_lock = threading.RLock()
#: How old, in seconds, this process's view of the COMPLETED trials may be for its pruner to answer from it: the
#: time since the process last got a driver answer, which brings every completion up to then. Past it the driver
#: answers (and its answer renews the view), so a trial whose steps are slow, with no other call, still sees the
#: trials that complete beside it within this time (it judged against those of its start for good: h197). A round
#: trip is ~3 ms here (docs/benchmarks.md), so a trial that reports fast spends at most ~6% of its time renewing.
VIEW_FRESH_S = 0.05
_view_answered_at = [0.0]  # (time.monotonic() of the process's last driver answer; a list: set from any thread)


def _known_completed(key: str) -> int:
    """How many COMPLETED trials this process's view holds for the driver of ``key``."""
    with _completed_views_lock:
        view = _completed_views.get(key)
        return 0 if view is None else view.count


def _view_held() -> tuple[str, int] | None:
    """What this process's view holds, sent with each call to the driver: ``(view key, COMPLETED trials)`` (None:
    no view). The answer brings the trials from there on, so it adds to the view whatever answers came between
    (an answer to another thread or trial of the process may arrive first: one sent from what the driver last sent
    the trial was dropped then, and every later one too, until a trial started in the process again)."""
    with _completed_views_lock:
        for key, view in _completed_views.items():
            return key, view.count
        return None


def _completed_at(key: str) -> Callable[[int], tuple[int, np.ndarray | None]]:
    """``f(step)``: this process's COMPLETED trials of ``key`` and their values at ``step``, read as one set."""
    def at(step: int) -> tuple[int, np.ndarray | None]:
        with _completed_views_lock:
            view = _completed_views.get(key)
            return (0, np.empty(0)) if view is None else (view.count, view.at(step))
    return at


def _take_completed(update: _CompletedUpdate | None) -> None:
    """Add the COMPLETED trials the driver sent to this process's view (those it holds already are skipped: another
    answer to the process may have brought them first)."""
    if update is None:
        return
    key, first, values = update
    with _completed_views_lock:
        view = _completed_views.get(key)
        if view is None:
            if first != 0:  # (the view went meanwhile: the process's next call says it holds none, and is sent all)
                return
            _completed_views.clear()
            view = _completed_views[key] = _CompletedValues(key)
        if first > view.count:  # pragma: no cover - an answer starts at what the process held when its call left
            return
        view.add(values[view.count - first:])


def _drop_view(key: str) -> None:
    """Let this process's view of ``key`` go (its ``optimize`` call's objective was let go here)."""
    with _completed_views_lock:
        _completed_views.pop(key, None)


#: Intermediate values the objective gave that the driver has not been told yet, per
#: trial, in the order given (its session: any thread of the trial may report, and the next call from any of
#: them carries them, as one Optuna study would see them; per thread, the reports of a thread that ended
#: without a call of its own were never told).
_held: weakref.WeakKeyDictionary[session.TrialSession, list[_Report]] = weakref.WeakKeyDictionary()
_held_lock = threading.Lock()
#: Steps of reports a failed call carried (the study's storage may have refused one, and the driver drops those after
#: it): the trial's next ``report`` of such a step goes to the driver, which stores it, or ignores it with Optuna's
#: warning when the study holds it (h149 F1: a retried refused step was ignored here as "already reported").
_untold: weakref.WeakKeyDictionary[session.TrialSession, set[int]] = weakref.WeakKeyDictionary()


def _hold_report(report: _Report) -> None:
    """Keep a report for the trial's next driver call, which carries it (see :func:`_call`)."""
    trial = session.current_session()
    if trial is None:  # outside a trial: the call below fails there, as every call does
        _call(M_FLUSH)
        return
    with _held_lock:
        held = _held.setdefault(trial, [])
        held.append(report)
        full = len(held) >= HELD_REPORTS_MAX
    if full:  # (they go now: a long trial whose should_prune the device answers made one call at its end carry all)
        _call(M_FLUSH)


def _in_live_trial() -> bool:
    """Whether the calling thread belongs to a trial that has not ended: only there may a call be answered (or
    held) without the driver; elsewhere it goes to :func:`_call`, which raises as it always did."""
    trial = session.current_session()
    return trial is not None and not trial.ended


def _holds() -> bool:
    """Whether the calling thread's trial holds reports or attributes that the driver has not been told."""
    trial = session.current_session()
    if trial is None:
        return False
    with _held_lock:
        return bool(_held.get(trial))


def _pickled_args(method: str, args: tuple[Any, ...]) -> bytes:
    """``args`` pickled for the driver; a value that does not pickle fails here, in the objective (TypeError)."""
    try:
        return cloudpickle.dumps(args)
    except Exception as e:  # noqa: BLE001 - any object may fail to pickle, in any way
        raise TypeError(f"cannot send the arguments of {method.removeprefix(CALL_PREFIX)}() to the driver, where "
                        f"the study lives: they do not pickle ({type(e).__name__}: {e})") from e


def _take_held() -> list[_Report] | None:
    """The reports held for the calling thread's trial, which the caller now carries (None: none)."""
    trial = session.current_session()
    if trial is None:
        return None
    with _held_lock:
        return _held.pop(trial, None)


def _call(method: str, *args: Any) -> Any:
    """Call the driver's handler from the trial's thread and return its answer, or raise its exception.

    Reports held back by :meth:`DeviceTrial.report` travel with the call and reach the study first, in order:
    ``report`` then ``should_prune`` (the usual pair, once per step) costs one round trip to the driver, not two,
    and nothing can read the study between them in a different order than in Optuna.

    The arguments travel pickled, so a value that cannot be pickled fails here, in the objective, as a
    TypeError naming the call, not in the engine; what is held stays held then, for the next call (before, the
    held reports went with the failed call and were lost unless their result reached the driver).

    Each call says what the process's view of the COMPLETED trials holds (:func:`_view_held`), and its answer
    brings those the view lacks (:func:`_take_completed`).
    """
    blob = _pickled_args(method, args)
    reports = _take_held()
    # The wait's name in the device's goodput record (``fluidsalus inspect``'s driver idle by method): the call the
    # objective made, whatever reports it carries; a call carrying nothing but reports is the trial's ``report``.
    label = M_REPORT if method == M_FLUSH else method
    if reports:  # (the call's own arguments stay a pickle inside: the driver loads them after the reports)
        method, blob = M_AFTER_REPORTS, cloudpickle.dumps((reports, method, blob))
    ok, payload = session.call_driver(method, blob, _view_held(), label=label, verdict=label == M_SHOULD_PRUNE)
    if ok:
        answer, warned, completed = cloudpickle.loads(payload)
        _take_completed(completed)
        _view_answered_at[0] = time.monotonic()
        _warn_again(warned)
        return answer
    _warn_again(payload.warned)
    untold = [step for _, step, _ in reports or ()] if payload.untold is None else payload.untold
    if untold:
        trial = session.current_session()
        if trial is not None:
            with _held_lock:
                _untold.setdefault(trial, set()).update(untold)
    raise payload.unpack()


def _caught(caught: list[warnings.WarningMessage]) -> tuple[Warning, ...]:
    """The warnings the driver's study gave while answering a call, as they travel back to the objective (one
    that does not pickle goes as a ``UserWarning`` with its text)."""
    out = []
    for w in caught:
        message = w.message if isinstance(w.message, Warning) else w.category(str(w.message))
        try:
            cloudpickle.dumps(message)
        except Exception:  # noqa: BLE001 - a warning of any class may hold anything
            message = UserWarning(f"{w.category.__name__}: {w.message}")
        out.append(message)
    return tuple(out)


def _inner_method(method: str, args: tuple[Any, ...]) -> str | None:
    """The call's own method: the one an ``M_AFTER_REPORTS`` carries (None when its arguments do not load)."""
    if method != M_AFTER_REPORTS:
        return method
    try:
        return cloudpickle.loads(args[0])[1]
    except Exception:  # noqa: BLE001 - answered on the loop, which gives the error
        return None


class _WarningRecorder:
    """Records the warnings the study gives while the driver answers a call, per thread, for one ``optimize``.

    ``warnings.catch_warnings`` swaps the process's warning state (filters, ``showwarning``) and puts it back at its
    end: two calls answered at once (a sampler call on a call thread, another call on the loop) put back each
    other's state in the wrong order, and one call's list could stay installed for the rest of the process. This
    one is installed once, around the run (:meth:`__enter__`), and each call records into its own thread's list
    (:meth:`recording`); a warning given outside a call (the driver's own, another thread's) goes where it went
    before. The filters are the script's, as under ``catch_warnings``, and, as there, each call starts with the
    filters' once-per-place registries cleared, so each trial gets its warnings.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._active = False
        self._showwarning: Any = None
        self._showwarnmsg_impl: Any = None

    def __enter__(self) -> _WarningRecorder:
        self._showwarning, self._showwarnmsg_impl = warnings.showwarning, warnings._showwarnmsg_impl  # type: ignore[attr-defined]
        warnings._showwarnmsg_impl = self._show  # type: ignore[attr-defined]
        # (the default showwarning makes warnings._showwarnmsg call _showwarnmsg_impl: catch_warnings(record=True)'s
        # way; a showwarning the script set still gets the warnings given outside the calls, in _show)
        warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
        self._active = True
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._active = False
        warnings.showwarning = self._showwarning
        warnings._showwarnmsg_impl = self._showwarnmsg_impl  # type: ignore[attr-defined]

    def _show(self, message: warnings.WarningMessage) -> None:
        log = getattr(self._local, "log", None)
        if log is not None:
            log.append(message)
        elif self._showwarning is not warnings._showwarning_orig:  # type: ignore[attr-defined]
            self._showwarning(message.message, message.category, message.filename, message.lineno, message.file,
                              message.line)
        else:
            self._showwarnmsg_impl(message)

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[warnings.WarningMessage]]:
        """The warnings this thread gives inside the block (``catch_warnings(record=True)`` when not installed:
        the driver's calls answered without ``optimize``, in tests)."""
        if not self._active:
            with warnings.catch_warnings(record=True) as caught:
                yield caught
            return
        log: list[warnings.WarningMessage] = []
        self._local.log = log
        filters_mutated()
        try:
            yield log
        finally:
            self._local.log = None

    @contextlib.contextmanager
    def on_the_driver(self) -> Iterator[None]:
        """Inside a call's :meth:`recording`: the warnings this thread gives in the block are the driver's, not the
        calling objective's (given where a warning given outside the calls goes: a ``catch_warnings`` or
        ``pytest.warns`` around ``optimize`` sees it), as Optuna gives those of its loop's own work in ``optimize``'s
        thread: the study's ``ask`` and ``tell`` (a sampler's ``before_trial`` and ``after_trial``), the log lines,
        the callbacks and the bar. They were sent to the trial with the call's answer and given there, inside the
        objective that had already returned."""
        log = getattr(self._local, "log", None)
        self._local.log = None
        try:
            yield
        finally:
            self._local.log = log


def _warn_again(warned: Sequence[Warning]) -> None:
    """Give the objective the warnings its call gave on the driver, as ``study.optimize`` would have given them in
    the objective's thread (``warnings.catch_warnings`` or ``pytest.warns`` around the call sees them)."""
    for message in warned:
        warnings.warn(message, stacklevel=4)  # (the objective's line that called the trial's method)


def _to_wire(output: Any) -> list[Any] | None:
    """The objective's return value as Optuna reads it (a sequence is several values), made of floats."""
    if output is None:
        return None
    items = list(output) if isinstance(output, Sequence) else [output]
    wired: list[Any] = []
    for item in items:
        try:
            wired.append(float(item))
        except Exception:  # noqa: BLE001 - float() of an arbitrary object (a tensor, ...) can raise anything
            wired.append(_Uncastable(repr(item)))
    return wired


# ---------------------------------------------------------------------------------------------- device side


class DeviceStudy:
    """The study, as seen from inside a trial on a device: each attribute asks the real study on the driver.

    Available: ``study_name``, ``directions``, ``direction``, ``best_trial``, ``best_value``, ``best_params``,
    ``best_trials``, ``trials``, ``user_attrs``, ``metric_names``, ``get_trials()``, ``set_user_attr()``,
    ``enqueue_trial()`` and ``stop()``.
    """

    #: ``trial.study._storage``: the trial's :class:`DeviceStorage` (None for the study an objective captured).
    #: optuna-integration's Lightning callback reads it in ``check_pruned()``; being none of Optuna's cached
    #: storages, it tells the callback that no DDP run keeps its values there, so it does nothing, as outside DDP.
    _storage: DeviceStorage | None = None

    def __init__(self, study_name: str, directions: list[optuna.study.StudyDirection]) -> None:
        self.study_name = study_name
        self._directions = list(directions)

    def _ask(self, attr: str, *args: Any, **kwargs: Any) -> Any:
        return _call(M_STUDY, attr, args, kwargs)

    @property
    def directions(self) -> list[optuna.study.StudyDirection]:
        return list(self._directions)

    @property
    def direction(self) -> optuna.study.StudyDirection:
        return self._ask("direction")

    @property
    def best_trial(self) -> FrozenTrial:
        return self._ask("best_trial")

    @property
    def best_value(self) -> float:
        return self._ask("best_value")

    @property
    def best_params(self) -> dict[str, Any]:
        return self._ask("best_params")

    @property
    def best_trials(self) -> list[FrozenTrial]:
        return self._ask("best_trials")

    @property
    def trials(self) -> list[FrozenTrial]:
        return self._ask("trials")

    @property
    def user_attrs(self) -> dict[str, Any]:
        return self._ask("user_attrs")

    @property
    def metric_names(self) -> list[str] | None:
        return self._ask("metric_names")

    def get_trials(self, deepcopy: bool = True, states: Iterable[TrialState] | None = None) -> list[FrozenTrial]:
        """``Study.get_trials`` (the trials are copies in any case: they crossed a process boundary)."""
        return self._ask("get_trials", deepcopy=deepcopy, states=None if states is None else tuple(states))

    def set_user_attr(self, key: str, value: Any) -> None:
        self._ask("set_user_attr", key, value)

    def enqueue_trial(self, params: dict[str, Any], user_attrs: dict[str, Any] | None = None,
                      skip_if_exists: bool = False) -> None:
        self._ask("enqueue_trial", params, user_attrs=user_attrs, skip_if_exists=skip_if_exists)

    def stop(self) -> None:
        """``Study.stop``: start no new trial; the running ones finish, then ``optimize`` returns."""
        self._ask("stop")

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"study.{name} is not available inside a trial that fluidsalus runs on a device (the study lives on "
            "the driver). Available: study_name, directions, direction, best_trial, best_value, best_params, "
            "best_trials, trials, user_attrs, metric_names, get_trials(), set_user_attr(), enqueue_trial(), stop()"
        )


class DeviceStorage:
    """``trial.storage`` inside an objective: what Optuna's artifact functions use of the study's storage.

    ``optuna.artifacts.upload_artifact(artifact_store=..., file_path=..., study_or_trial=trial)`` records the
    artifact as a system attribute of the trial in the study's storage, and ``get_all_artifact_meta(trial)``
    reads them back. The storage lives on the driver, so these two calls go there, for this trial only; the
    artifact's file goes from the device straight to the artifact store, as from an Optuna worker.

    Args:
        trial_id: The Optuna trial's id in the study's storage.
    """

    def __init__(self, trial_id: int) -> None:
        self._trial_id = trial_id

    def _check_own(self, method: str, trial_id: int) -> None:
        if trial_id != self._trial_id:
            raise ValueError(f"storage.{method}: a trial running on a device may use only its own trial id "
                             f"({self._trial_id}), not {trial_id!r}")

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        """Set a system attribute of this trial (``BaseStorage.set_trial_system_attr``)."""
        self._check_own("set_trial_system_attr", trial_id)
        _call(M_SET_SYSTEM_ATTR, key, value)

    def get_trial_system_attrs(self, trial_id: int) -> dict[str, Any]:
        """This trial's system attributes (``BaseStorage.get_trial_system_attrs``)."""
        self._check_own("get_trial_system_attrs", trial_id)
        return _call(M_SYSTEM_ATTRS)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"storage.{name} is not available inside a trial that fluidsalus runs on a device (the study's "
            "storage lives on the driver). Available, for this trial: set_trial_system_attr(), "
            "get_trial_system_attrs() (what optuna.artifacts uses)"
        )


class DeviceTrial(BaseTrial):
    """The trial an objective gets from :func:`optimize`: ``optuna.Trial``'s API, answered by the real trial.

    Every call is one round trip to the driver, where the real ``optuna.Trial`` lives, except a parameter
    already suggested with the same distribution (answered from the local copy, as Optuna answers it from its
    cache), the read-only properties, ``report`` (its value goes with the next call), ``should_prune`` where
    the device can give Optuna's answer (:meth:`_local_should_prune`) and, on an in-memory study,
    ``set_user_attr`` (with the next call: :meth:`set_user_attr`). Any thread of the objective may call it: a
    thread the objective starts belongs to its trial, and the values it reports reach the study with the
    trial's next call, from whichever thread (before, reports were held per thread, and those of a thread that
    ended without a call of its own never reached the study).

    Args:
        snapshot: The started Optuna trial, as the driver sent it.
    """

    def __init__(self, snapshot: _TrialSnapshot) -> None:
        self._number = snapshot.number
        self._datetime_start = snapshot.datetime_start
        self._params = dict(snapshot.params)
        self._distributions = dict(snapshot.distributions)
        self._user_attrs = dict(snapshot.user_attrs)
        self._earlier_steps = snapshot.steps  # steps an earlier attempt of this trial reported
        self._steps: set[int] = set()
        # the trial's intermediate values as the study holds them (an earlier attempt's, then this one's new steps):
        # what the device's pruner reads (kept under a PRUNE_COMPLETED rule only)
        self._values: dict[int, float] = dict(snapshot.values)
        self._start = snapshot.start
        self._reports = itertools.count(1)  # numbers the reports of this start (``next`` is atomic in CPython)
        self.study = DeviceStudy(snapshot.study_name, snapshot.directions)
        self._trial_id = snapshot.trial_id
        self.storage = DeviceStorage(snapshot.trial_id)
        self.study._storage = self.storage
        self._relative_params: dict[str, Any] | None = None  # fetched on first use, then kept (as Optuna keeps it)
        self._prune_rule = snapshot.prune_rule
        self._writes_cannot_fail = snapshot.writes_cannot_fail

    # ---------------------------------------------------------------- suggestions

    def _suggest(self, name: str, distribution: BaseDistribution) -> Any:
        if self._distributions.get(name) == distribution:
            return self._params[name]
        value, stored, index = _call(M_SUGGEST, name, distribution)
        if index is not None:  # a categorical: this process's own choice, not the driver's copy of it
            value, stored = distribution.choices[index], distribution
        self._params[name], self._distributions[name] = value, stored
        return value

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        """Suggest a float in ``[low, high]`` (``optuna.Trial.suggest_float``)."""
        return self._suggest(name, FloatDistribution(low, high, log=log, step=step))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        """Suggest an int in ``[low, high]`` (``optuna.Trial.suggest_int``)."""
        return int(self._suggest(name, IntDistribution(low, high, log=log, step=step)))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        """Suggest one of ``choices`` (``optuna.Trial.suggest_categorical``)."""
        # No warnings.catch_warnings to hold back Optuna's warning of choices unfit for storage: it swaps the
        # process's warning state and is not thread-safe (other trials of the process, their threads: one left a
        # dead list installed, and every later warning of the process was lost)
        plain = all(isinstance(c, _PLAIN_CHOICES) for c in choices)
        distribution = CategoricalDistribution(choices) if plain else _unchecked_categorical(choices)
        if self._distributions.get(name) != distribution:
            return self._suggest(name, distribution)  # the driver's suggestion gives Optuna's warnings (relayed)
        if not plain:
            CategoricalDistribution(choices)  # answered here: Optuna's warnings given here, once, as its call does
        return self._params[name]

    def suggest_uniform(self, name: str, low: float, high: float) -> float:
        """Deprecated in Optuna 3.0: ``suggest_float(name, low, high)``."""
        _deprecated("suggest_uniform", "")
        return self.suggest_float(name, low, high)

    def suggest_loguniform(self, name: str, low: float, high: float) -> float:
        """Deprecated in Optuna 3.0: ``suggest_float(name, low, high, log=True)``."""
        _deprecated("suggest_loguniform", "(..., log=True)")
        return self.suggest_float(name, low, high, log=True)

    def suggest_discrete_uniform(self, name: str, low: float, high: float, q: float) -> float:
        """Deprecated in Optuna 3.0: ``suggest_float(name, low, high, step=q)``."""
        _deprecated("suggest_discrete_uniform", "(..., step=...)")
        return self.suggest_float(name, low, high, step=q)

    # ---------------------------------------------------------------- pruning

    def report(self, value: float, step: int) -> None:
        """Record an intermediate value in the study (``optuna.Trial.report``); also a lane boundary.

        The value reaches the study with the trial's next call to the driver (``should_prune`` unless the
        device answers it, :meth:`_local_should_prune`; a ``suggest_*``, a study read, or the trial's end),
        before that call, so the study sees the same order
        of events as under ``study.optimize``, with one round trip fewer per step; or sooner, when the result
        reaches the driver first (within ``POLL_WAIT_S``). Optuna's checks of the arguments are made here, where
        the objective called ``report``, and so is its warning for a step this attempt reported already (the
        value is then ignored, as Optuna ignores it).

        Args:
            value: The intermediate value (anything ``float()`` accepts).
            step: The step, a non-negative int.
        """
        if len(self.study.directions) > 1:  # (first, as Optuna checks it)
            raise NotImplementedError("Trial.report is not supported for multi-objective optimization.")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"The `value` argument is of type '{type(value)}' but supposed to be a float.") from None
        try:
            step = int(step)
        except (TypeError, ValueError):
            raise TypeError(f"The `step` argument is of type '{type(step)}' but supposed to be an int.") from None
        if step < 0:
            raise ValueError(f"`{step=}` must be non-negative.")  # Optuna's message
        result: dict[str, Any] = {KEY_NUMBER: self._number, KEY_STEP: step, KEY_INTERMEDIATE: value}
        trial_session = session.current_session()
        if trial_session is not None and _untold:
            with _held_lock:
                self._steps.difference_update(_untold.pop(trial_session, ()))
        if step in self._steps:  # Optuna's warning, given at this call as Optuna gives it; the value is ignored
            warnings.warn(f"The reported value is ignored because this `{step=}` is already reported.", UserWarning,
                          stacklevel=2)
        elif step in self._earlier_steps:
            self._steps.add(step)  # a restarted attempt redoes a step the study already holds: nothing to tell
        else:
            # Told to the study with the trial's next call (should_prune, its end), or when the driver gets the
            # result, if that comes first: a study read from elsewhere (optuna-dashboard) sees it while the trial
            # runs, and a run interrupted before the trial's next call keeps it.
            mark = (self._start, next(self._reports))
            _hold_report((value, step, mark))
            result[KEY_REPORT] = list(mark)
            if self._prune_rule is not None and self._prune_rule[0] == PRUNE_COMPLETED:
                self._values[step] = value
            self._steps.add(step)
        # The result need not wake the driver: it rides with the trial's next call (should_prune, most often).
        session.report_deferred(result)

    def should_prune(self) -> bool:
        """Ask the study's pruner about this trial (``optuna.Trial.should_prune``).

        One round trip to the driver, except where the device can give Optuna's answer: the study's pruner is
        ``NopPruner``, or a ``MedianPruner``/``PercentilePruner`` of an in-memory study, whose answer the device
        gives from its copy of the study's COMPLETED trials (see :meth:`_local_should_prune`); the held reports go with
        the trial's next call instead.
        """
        answer = self._local_should_prune()
        if answer is not None:
            return answer
        # what the pruner returned, as Optuna's ``should_prune`` returns it (``MedianPruner``'s: a NumPy bool)
        prune: bool = _call(M_SHOULD_PRUNE)
        return prune

    def _local_should_prune(self) -> bool | None:
        """Optuna's answer to ``should_prune`` when it can be had without the study, or None (ask the driver).

        Optuna 5's ``Trial.should_prune`` checks the study's directions, then returns
        ``study.pruner.prune(study, trial)`` with the trial's own cached copy (it reads nothing of the trial
        from the storage). ``NopPruner.prune`` returns False and reads nothing. ``PercentilePruner.prune``
        (``MedianPruner`` is one) reads the study's direction, its COMPLETED trials' intermediate values and the
        trial's own: the device gives its answer (:func:`_percentile_prune`) from its process's view of the
        COMPLETED trials (:class:`_CompletedValues`, as the driver's answers to the process's calls brought them)
        and the trial's values (this attempt's and an earlier one's, as the snapshot said). Given the same COMPLETED
        trials, that is the driver's answer; the trials that completed since the driver last answered this process
        are seen at its next answer, as Optuna's ``n_jobs`` threads see another thread's completion only once it is
        stored (docs/migrating.md). The pruner is the one the study had when this attempt started: a callback that
        replaces ``study.pruner`` reaches this trial only at its calls that go to the driver.

        Not waiting for the driver must not move an error either: the reports this trial
        holds for the driver are told with its next call, so where a write can fail (an RDB or journal
        storage) the call still goes to the driver whenever something is held, and the storage's error is
        raised here as before. An in-memory storage does not fail a running trial's write. A step reported
        twice is warned of by ``report`` itself, on the device.
        """
        rule = self._prune_rule
        if rule is None or not _in_live_trial() or (not self._writes_cannot_fail and _holds()):
            return None
        if len(self.study.directions) > 1:  # (first, as Optuna checks it; the same exception and message)
            raise NotImplementedError("Trial.should_prune is not supported for multi-objective optimization.")
        if rule[0] == PRUNE_NEVER:
            return False
        _, pruner, key = rule
        if time.monotonic() - _view_answered_at[0] > VIEW_FRESH_S:
            return None  # (an old view: the driver answers, and its answer brings the completions since)
        # (a copy, taken at once: another thread of the trial may report meanwhile)
        return _percentile_prune(pruner, self.study.directions[0], self._values.copy(), _completed_at(key))

    # ---------------------------------------------------------------- attributes

    def set_user_attr(self, key: str, value: Any) -> None:
        """Set a user attribute of the trial (``optuna.Trial.set_user_attr``): one round trip, so the study shows it
        at once (optuna-dashboard, another thread's or trial's read) and a key or value the study refuses raises
        here, as in Optuna. (Held for the next call, as reports are, a refused one failed a later call, and a
        Ctrl-C lost the running trials' attributes: a review of f46935a.)"""
        _call(M_SET_USER_ATTR, key, value)
        self._user_attrs[key] = value

    def set_constraint(self, key: str, value: float) -> None:
        """Set a constraint value of the trial (``optuna.Trial.set_constraint``)."""
        _call(M_SET_CONSTRAINT, key, value)

    @property
    def constraints(self) -> dict[str, float]:
        return _call(M_CONSTRAINTS)

    @property
    def params(self) -> dict[str, Any]:
        return copy.deepcopy(self._params)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return copy.deepcopy(self._distributions)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return copy.deepcopy(self._user_attrs)

    @property
    def datetime_start(self) -> datetime.datetime | None:
        return self._datetime_start

    @property
    def relative_params(self) -> dict[str, Any]:
        """``optuna.Trial.relative_params``: the parameters the study's sampler drew jointly for this trial.

        The real trial samples them on first use, as Optuna does; one round trip, then kept.
        """
        if self._relative_params is None:
            self._relative_params = _call(M_RELATIVE_PARAMS)
        return self._relative_params

    @property
    def number(self) -> int:
        return self._number

    def __repr__(self) -> str:
        return f"DeviceTrial(number={self._number}, params={self._params})"


# Code that takes a live trial checks ``isinstance(trial, optuna.Trial)`` (``optuna.artifacts.upload_artifact``,
# ``get_all_artifact_meta``), and a DeviceTrial has that API (with ``_trial_id`` and ``storage``): register it
# as a virtual subclass (``optuna.Trial`` is an ABC), as an objective under ``study.optimize`` would pass.
optuna.trial.Trial.register(DeviceTrial)


def _deprecated(old: str, args: str) -> None:
    """Optuna's ``FutureWarning`` for a ``suggest_*`` it deprecated in 3.0, word for word (``optuna.Trial``'s)."""
    warnings.warn(f"{old} has been deprecated in v3.0.0. This feature will be removed in v6.0.0. See "
                  f"https://github.com/optuna/optuna/releases/tag/v3.0.0. Use suggest_float{args} instead.",
                  FutureWarning, stacklevel=3)


class _ObjectivePickler(cloudpickle.Pickler):
    """Ray's cloudpickle, but the study being optimised goes as the :class:`DeviceStudy` of the device.

    Args:
        file: Where the pickle goes.
        study: The study (None: nothing is replaced).
    """

    def __init__(self, file: io.BytesIO, study: optuna.Study | None) -> None:
        super().__init__(file)
        self._study = study

    def reducer_override(self, obj: Any) -> Any:
        if obj is self._study and obj is not None:
            return DeviceStudy, (obj.study_name, list(obj.directions))
        return super().reducer_override(obj)


def _unpickle_runner(blob: bytes, catch: tuple[type[BaseException], ...], gc_after_trial: bool,
                     name: str, view_key: str = "") -> _ObjectiveRunner:
    runner = _ObjectiveRunner(cloudpickle.loads(blob), catch, gc_after_trial, view_key=view_key)
    runner.__name__ = name
    # This process's view of the call's COMPLETED trials lives as long as its copy of the objective: the device host
    # lets that go when the run ends on it (a warm process kept the view, 169.6 MB for 2,000 trials of 1,000 steps,
    # until it served another optimize call), a warm process's next run at its start.
    weakref.finalize(runner, _drop_view, view_key)
    return runner


class _ObjectiveRunner:
    """The fluidsalus trainable: runs the objective once with a :class:`DeviceTrial` and tells its outcome.

    The outcome is classified here, on the device, where the exception is (``catch`` travels in the closure).

    Args:
        objective: The user's objective ``f(trial) -> float | Sequence[float]``.
        catch: Exception types that fail the trial without stopping the optimisation.
        gc_after_trial: Run ``gc.collect()`` in the device process after each trial.
        study: The study being optimised: where the objective holds it (a script's ``study``, captured), the
            devices get the :class:`DeviceStudy` that ``trial.study`` is, which asks the real one, not a copy.
        view_key: The driver's key of the devices' views of the COMPLETED trials (``_StudyDriver.view_key``).
    """

    #: The argument an error about this trainable names (``fluidsalus.run`` reads it): the user's objective.
    error_field = "objective"

    def __init__(self, objective: Callable[[Any], Any], catch: tuple[type[BaseException], ...],
                 gc_after_trial: bool, study: optuna.Study | None = None, view_key: str = "") -> None:
        self.objective = objective
        self.view_key = view_key
        self.catch = catch
        self.gc_after_trial = gc_after_trial
        self.study = study
        self.__name__ = getattr(objective, "__name__", type(objective).__name__)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled for the devices: the objective with the study in it replaced (:class:`_ObjectivePickler`)."""
        with io.BytesIO() as file:
            _ObjectivePickler(file, self.study).dump(self.objective)
            blob = file.getvalue()
        return _unpickle_runner, (blob, self.catch, self.gc_after_trial, self.__name__, self.view_key)

    def __call__(self, config: Mapping[str, Any]) -> dict[str, Any] | None:
        snapshot: _TrialSnapshot | None = _call(M_START)
        if snapshot is None:
            return None  # the optimisation ended (timeout, study.stop(), an error) before this trial started
        # (at each trial's start: a change the script makes during the call, in a callback, reaches the trials
        # that start after it)
        _take_optuna_log_settings(snapshot.log_settings)
        trial_session = session.current_session()
        if trial_session is not None:  # what the objective prints names its trial as Optuna's log does
            trial_session.output_name = f"trial {snapshot.number}"
        try:
            return self._run(DeviceTrial(snapshot))
        finally:
            if self.gc_after_trial:
                gc.collect()

    def _run(self, trial: DeviceTrial) -> dict[str, Any]:
        """Run the objective and tell its outcome. A ``FAIL`` ends the fluidsalus trial errored, with the
        objective's exception (its work since its last report is the failure's waste in the goodput record); a
        ``PRUNED`` one ends stopped (:meth:`_StudyDriver.stopped_by_search`); both are final (no retry)."""
        values, failed = None, None
        try:
            output = self.objective(trial)
        except session.StopTrial:
            self._flush_if_held()  # the trial is being stopped: the study still gets every value it reported
            raise
        except Exception as e:
            if session.raised_as_stop_unwound(e):  # (a failing ``finally:`` as the engine's stop unwound it: the
                # engine judges it as that stop, docs/architecture.md; the study is not told FAIL first)
                self._flush_if_held()
                raise
            state, failed = self._ended(e)
        except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, one of the user's own
            # Optuna fails the trial on a KeyboardInterrupt and raises it (any other BaseException leaves its
            # study.optimize as well): the trial is FAIL and optimize raises the objective's own exception, which
            # before reached the caller as a TrialError ("errored on its device").
            state, failed = self._ended(e)
        else:
            values = _to_wire(output)
            try:
                state = _call(M_FINISH, OUT_RETURNED, values, repr(output), None, False)
            except Exception as e:
                # the reports the end carried failed (the study's storage refused one, which Optuna's report raises
                # in the objective): the objective's failure, as there (``catch`` names it or not); it ended the
                # trial errored with a TrialError, "before its objective returned", which optimize raised
                (state, failed), values = self._ended(e), None
            if state == TrialState.FAIL.name and failed is None:  # None, NaN, no number, the wrong count (Optuna's
                # log says which)
                failed = ValueError(f"Optuna failed trial {trial.number}: the objective returned {output!r}, which "
                                    "is not a value it takes")
        try:
            if state == TrialState.FAIL.name and failed is not None:
                raise failed  # the study has it already: the engine records it as the trial's error
        finally:
            # (a pruned or failed trial's exception: its traceback holds this frame, which held it, and this runner,
            # in a cycle that only a collection ends, which an idle warm process never makes: the runner and its
            # process's view of the COMPLETED trials stayed)
            failed = None
        result: dict[str, Any] = {KEY_NUMBER: trial.number, KEY_STATE: state}
        if state == TrialState.COMPLETE.name and values is not None:
            result[KEY_VALUES] = values
            if len(values) == 1:
                result[KEY_VALUE] = values[0]
        return result

    @staticmethod
    def _flush_if_held() -> None:
        """Send the reports the stopped trial holds to the driver (:data:`M_FLUSH`)."""
        trial_session = session.current_session()
        if trial_session is not None and _held.get(trial_session):
            _call(M_FLUSH)

    def _ended(self, e: BaseException) -> tuple[str, BaseException]:
        """Tell the driver how the objective ended with ``e``; return the trial's Optuna state and the exception
        that failed it: ``e``, or the study's storage's error when it refused a report the end carried (Optuna's
        ``report`` raises it in the objective, before the objective's own end: ``catch`` names it or not)."""
        try:
            return self._end_with(e), e
        except Exception as refused:
            if refused is e:  # (an out-of-memory error, raised again for its retry)
                raise
            return self._end_with(refused), refused

    def _end_with(self, e: BaseException) -> str:
        """Tell the driver how the objective ended with ``e``; return the trial's Optuna state."""
        if isinstance(e, optuna.TrialPruned):
            return _call(M_FINISH, OUT_PRUNED, None, None, _PackedError.of(e), False)
        packed, caught = _PackedError.of(e), isinstance(e, self.catch)
        if _is_out_of_memory(e):
            # The lane runtime re-admits the trial with a larger memory estimate and runs the objective again
            # on the same Optuna trial; the driver keeps the error in case that cannot be done.
            _call(M_FAILING, packed, caught)
            raise e
        return _call(M_FINISH, OUT_FAILED, None, None, packed, caught)


# ---------------------------------------------------------------------------------------------- driver side


@dataclass
class _Live:
    """A started Optuna trial and what the driver knows of it."""

    trial_id: str
    trial: optuna.Trial
    heartbeat: Any
    steps: set[int] = field(default_factory=set)
    starts: int = 1  # how many times its objective started (see _TrialSnapshot.start)
    reported: set[tuple[int, int]] = field(default_factory=set)  # the reports told to the study (KEY_REPORT)
    failing: tuple[_PackedError, bool] | None = None  # an out-of-memory error being retried, and if caught
    # The last report the study refused, and the error: the call carrying it raises that error (again, when it was
    # refused as its result came), and from then on the trial's reports reach the study only with its calls, never
    # as their results come (Optuna's report raised it in the objective, which then reported no more)
    refused: tuple[tuple[int, int], Exception] | None = None
    told: bool = False
    state: str | None = None  # the state the study was told (a TrialState name), once told
    # Held while the driver does anything for the trial: a sampler call answered on another thread holds it from the
    # loop's hand-over to its answer, so nothing else of the trial (its end, a report) is handled meanwhile.
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The study's trials as the sampler saw them at the trial's first sampler call off the loop (Optuna keeps this
    # list per thread, from ask() to tell(), ``Study._thread_local.cached_all_trials``; a call thread serves many
    # trials, so each trial's list is kept here and put back on the thread for its next call).
    cached_trials: list[FrozenTrial] | None = None
    # Under a PRUNE_COMPLETED rule: the trial's device process keeps a view of the COMPLETED trials, which the
    # answers to its calls renew (``_StudyDriver._completed_update``)
    keeps_view: bool = False


def _infeasibility(values: list[Any] | None, n_objectives: int) -> str | None:
    """Why Optuna would fail a trial that returned ``values`` (its message), or None when they are fine."""
    if values is None:
        return "The value None could not be cast to float."
    problems = []
    for value in values:
        try:
            number = float(value)
        except (TypeError, ValueError):
            problems.append(f"The value {value!r} could not be cast to float")
            continue
        if math.isnan(number):
            problems.append(f"The value {value} is not acceptable")
    if problems:
        return "; ".join(problems)
    if len(values) != n_objectives:
        return (f"The number of the values {len(values)} did not match the number of the objectives "
                f"{n_objectives}")
    return None


def _completed_logger(study: optuna.Study) -> Callable[[optuna.Trial, list[float]], None]:
    """Optuna's own "Trial N finished with value ..." line (``Study._log_completed_trial``, by its signature)."""
    method = getattr(study, "_log_completed_trial", None)
    names = list(inspect.signature(method).parameters) if method is not None else []
    if names[:3] == ["values", "number", "params"]:  # Optuna >= 4.4
        return lambda trial, values: method(values, trial.number, trial.params)
    if names[:2] == ["trial", "values"]:  # older Optuna 4
        return lambda trial, values: method(trial, values)
    return lambda trial, values: _log_completed(study, trial, values)  # pragma: no cover - unknown Optuna


def _log_completed(study: optuna.Study, trial: optuna.Trial, values: list[float]) -> None:  # pragma: no cover
    """Optuna's completed-trial line, written out (for an Optuna whose method we do not recognise)."""
    if len(values) > 1:
        _STUDY_LOGGER.info(f"Trial {trial.number} finished with values: {values} and parameters: {trial.params}.")
        return
    message = f"Trial {trial.number} finished with value: {values[0]} and parameters: {trial.params}."
    try:
        best = study.best_trial
        message += f" Best is trial {best.number} with value: {best.value}."
    except ValueError:
        pass
    _STUDY_LOGGER.info(message)


def _log_failed(number: int, params: Mapping[str, Any], message: str, shown: Any,
                exc_info: BaseException | None = None, trace: str | None = None) -> None:
    """Optuna's two warning lines for a failed trial (``optuna.study._optimize``), through its logger.

    ``trace``: the objective's traceback as the device wrote it, shown under the first line as Optuna shows the
    objective's (``Traceback ...``, the objective's frames, the error) instead of the re-created exception's chain
    (the device's text as a ``DeviceTraceback`` cause, then the error again without frames); the record keeps
    ``exc_info``, for handlers that read the exception itself.
    """
    first = f"Trial {number} failed with parameters: {params} because of the following error: {message}."
    if trace is None or exc_info is None:
        _OPTIMIZE_LOGGER.warning(first, exc_info=exc_info)
    elif _OPTIMIZE_LOGGER.isEnabledFor(logging.WARNING):
        record = _OPTIMIZE_LOGGER.makeRecord(
            _OPTIMIZE_LOGGER.name, logging.WARNING, __file__, 0, first, None,
            (type(exc_info), exc_info, exc_info.__traceback__))
        record.exc_text = trace.rstrip("\n")  # (a Formatter shows exc_text, when set, for exc_info)
        _OPTIMIZE_LOGGER.handle(record)
    _OPTIMIZE_LOGGER.warning(f"Trial {number} failed with value {shown!r}.")


#: Categorical choices that equal their copies (Optuna's "None, bool, int, float and str").
_PLAIN_CHOICES = (type(None), bool, int, float, str)


def _unchecked_categorical(choices: Sequence[Any]) -> CategoricalDistribution:
    """Optuna's distribution of ``choices`` (not empty) made without its warning of choices unfit for storage:
    made of plain stand-ins, which it warns nothing of, then given the choices."""
    distribution = CategoricalDistribution([None] * len(choices))
    distribution.choices = tuple(choices)
    return distribution


def _prune_rule(study: optuna.Study, view_key: str) -> tuple[Any, ...] | None:
    """When the device may answer ``should_prune`` without the study (:meth:`DeviceTrial._local_should_prune`).

    Only Optuna's own classes (a subclass may prune otherwise). ``NopPruner`` reads nothing: on any storage.
    ``PercentilePruner`` (``MedianPruner``) reads the study's COMPLETED trials, which an in-memory storage cannot
    fail to read: on that storage only (elsewhere the read may raise, and must, at the call), with a copy of the
    pruner's answer given from the device's view of those trials (``view_key``: :class:`_CompletedValues`).
    """
    pruner = study.pruner
    if type(pruner) is optuna.pruners.NopPruner:
        return (PRUNE_NEVER,)
    if type(pruner) in (optuna.pruners.MedianPruner, optuna.pruners.PercentilePruner) and _writes_cannot_fail(study):
        return (PRUNE_COMPLETED, pruner, view_key)
    return None


def _writes_cannot_fail(study: optuna.Study) -> bool:
    """Whether the study's storage is Optuna's ``InMemoryStorage``: it does not fail a running trial's write
    (``report``) or a read, so these need not be waited for (see ``_TrialSnapshot``)."""
    return type(study._storage) is optuna.storages.InMemoryStorage


def _same_choice(a: Any, b: Any) -> bool:
    """Whether two categorical choices are one object, or copies of one: equal, or (objects compared by identity,
    such as functions and classes of the script, which each trial's pickle copies) pickled alike."""
    if a is b:
        return True
    with contextlib.suppress(Exception):
        if bool(a == b):
            return True
    try:
        return type(a).__qualname__ == type(b).__qualname__ and cloudpickle.dumps(a) == cloudpickle.dumps(b)
    except Exception:  # noqa: BLE001 - a choice that does not pickle here is simply not the same
        return False


class _Choices:
    """The choices of each categorical parameter as the study first had them, so that a trial's choices, which
    come to the driver as copies, are told to the study as those objects: Optuna compares choices with ``==``,
    which for a function of the script is identity ("CategoricalDistribution does not support dynamic value space"
    otherwise).

    Args:
        study: The study; the choices its trials already have are the first ones (read when a choice that is no
            plain value first comes: only an in-memory study can hold those).
    """

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self._known: dict[str, list[tuple[Any, ...]]] | None = None
        self._lock = threading.Lock()  # (suggests of two trials may be answered at once, on call threads)

    def canonical(self, name: str, choices: tuple[Any, ...]) -> tuple[Any, ...]:
        """``choices`` as the study first had them for ``name`` (``choices`` itself when new or plain values)."""
        if all(isinstance(c, _PLAIN_CHOICES) for c in choices):
            return choices
        with self._lock:
            return self._canonical(name, choices)

    def _canonical(self, name: str, choices: tuple[Any, ...]) -> tuple[Any, ...]:
        if self._known is None:
            self._known = {}
            for trial in self._study.get_trials(deepcopy=False):
                for other, distribution in trial.distributions.items():
                    if isinstance(distribution, CategoricalDistribution):
                        self._known.setdefault(other, []).append(distribution.choices)
        known = self._known.setdefault(name, [])
        for first in known:
            if first is choices or (len(first) == len(choices)
                                    and all(_same_choice(a, b) for a, b in zip(first, choices, strict=True))):
                return first
        known.append(choices)
        return choices


class _TrialsSideBySideBar(_ProgressBar):
    """Optuna's progress bar, updated after each trial of trials that run side by side.

    With ``timeout`` alone, Optuna's bar moves by the time since its last update, cut at the ``timeout``; its loop
    makes one update past the ``timeout`` (its last trial's), which fills the bar. Here the trials that ran beside
    that one end past the ``timeout`` too, and each such update moved the bar back (Optuna's cut subtracts the time
    past the ``timeout`` from a move that starts at the last update's time, not at the ``timeout``): a 1.5 s study
    ended at 95% or 54%. Past the ``timeout`` the bar is updated as at the ``timeout``: full once, then still.
    """

    def update(self, elapsed_seconds: float, study: optuna.Study) -> None:
        if self._n_trials is None and self._timeout is not None:  # (the bar of the timeout: Optuna's fields)
            elapsed_seconds = min(elapsed_seconds, self._timeout)
        super().update(elapsed_seconds, study)

    def fill_at_timeout(self, elapsed_seconds: float, study: optuna.Study) -> None:
        """Fill the bar of the ``timeout`` once the run ended on it with no trial's update past it.

        Optuna starts a trial whenever its loop finds time left, so its last trial ends past the ``timeout`` and its
        update fills the bar. Here the last trial may end before the ``timeout`` and the next one's start find it
        passed (that trial never starts): no update passed the ``timeout`` and the bar ended short (97%).
        """
        if (self._n_trials is None and self._timeout is not None and self._last_elapsed_seconds < self._timeout
                <= elapsed_seconds):
            self.update(elapsed_seconds, study)


def _held_distribution(trial: optuna.Trial, name: str) -> BaseDistribution:
    """The distribution ``trial`` holds for ``name``, which it was just asked for: from the trial's own record, as
    Optuna's ``Trial`` reads it itself. Its public ``distributions`` deep-copies every distribution of the trial at
    each read: a read per suggest made a trial of P suggests cost P squared (400 suggests per trial: 16 of 35 s of
    the driver's time in copying). That property where an Optuna keeps no such record."""
    held = getattr(getattr(trial, "_cached_frozen_trial", None), "distributions", None)
    if isinstance(held, dict) and name in held:
        return held[name]
    return trial.distributions[name]


class _StudyDriver(BaseSearcher):
    """The searcher and call handler of one ``optimize`` call: owns the real study on the driver.

    It proposes one empty fluidsalus trial at a time (:data:`PROPOSALS_AHEAD` ahead of the starts), creates the
    Optuna trial when the objective starts, answers the trial's calls, tells the outcome, logs and runs the
    callbacks. Every method runs in the driver's thread (the executor's loop), but the sampler calls
    (:data:`SAMPLER_CALLS`) that the executor answers on its call threads (:meth:`offload_call`): each started
    trial's lock (``_Live.lock``) keeps whatever else the driver does for that trial until the answer is made.

    Args:
        study: The study to optimise.
        n_trials: Trials to run (None: no limit).
        timeout: Seconds after which no new trial starts (None: no limit).
        callbacks: ``f(study, frozen_trial)`` after each told trial.
        experiment: The fluidsalus experiment name (recorded on each Optuna trial).
        progress_bar: Optuna's own bar (``show_progress_bar``), updated after each trial's callbacks (None: none).
    """

    def __init__(self, study: optuna.Study, n_trials: int | None, timeout: float | None,
                 callbacks: list[Callable[[optuna.Study, FrozenTrial], None]], experiment: str,
                 progress_bar: _ProgressBar | None = None) -> None:
        self.study = study
        self.n_trials = n_trials
        self.timeout = timeout
        self.callbacks = callbacks
        self.experiment = experiment
        self.progress_bar = progress_bar if progress_bar is not None else _ProgressBar(False)
        self.error: BaseException | None = None  # the first error optimize must raise
        self._started: float | None = None  # when the devices were up (the first next_groups)
        self._live: dict[str, _Live] = {}
        self._unstarted: set[str] = set()
        self._errors: dict[str, str] = {}  # why a trial errored on its device (on_trial_error), until its end
        self._choices = _Choices(study)
        self.warnings = _WarningRecorder()  # installed by optimize around the run
        # how long the last sampler calls took (SAMPLER_THREAD_MIN_S), wherever answered
        self._sample_times: collections.deque[float] = collections.deque(maxlen=SAMPLE_TIMES_KEPT)
        self._sample_times_lock = threading.Lock()
        self._proposed_unadded = 0
        self._stop_sent: set[str] = set()
        self._group_seq = 0
        self._asked = 0
        self._calling = threading.local()  # per answering thread: ``untold`` of the call being answered
        self._log_completed = _completed_logger(study)
        #: Names this call's COMPLETED trials in the devices' views (:class:`_CompletedValues`), which hold
        #: ``_completed`` (each one's intermediate values, in the order seen complete; ``_completed_ids``: their ids).
        #: Those are the in-memory storage's own dicts, not copies: a finished trial's never change (the storage
        #: copies a trial's dict to change it, and refuses to change a finished one).
        self.view_key = uuid.uuid4().hex
        self._completed: list[dict[int, float]] = []
        self._completed_ids: set[int] = set()
        self._completed_lock = threading.Lock()
        self._scan_from = 0  # the study's trials before it are finished and taken (_completed_update)
        self._calls: dict[str, Callable[..., Any]] = {
            M_START: self._on_start, M_SUGGEST: self._on_suggest,
            M_SHOULD_PRUNE: self._on_should_prune, M_SET_USER_ATTR: self._on_set_user_attr,
            M_CONSTRAINTS: self._on_constraints, M_SET_CONSTRAINT: self._on_set_constraint,
            M_STUDY: self._on_study, M_FAILING: self._on_failing, M_FINISH: self._on_finish,
            M_AFTER_REPORTS: self._on_after_reports, M_FLUSH: lambda trial_id: None,
            M_SYSTEM_ATTRS: self._on_system_attrs, M_SET_SYSTEM_ATTR: self._on_set_system_attr,
            M_RELATIVE_PARAMS: self._on_relative_params,
        }

    # ---------------------------------------------------------------- stopping

    def stopping(self) -> bool:
        """True once no new trial may start: an error to raise, ``study.stop()``, or ``timeout`` passed."""
        return (
            self.error is not None
            or self.study._stop_flag  # set by study.stop() (Optuna's own flag)
            or (self.timeout is not None and self._started is not None
                and time.monotonic() - self._started >= self.timeout)
        )

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error

    def end_the_bar(self) -> None:
        """As the run ends: fill a ``timeout`` bar when the ``timeout`` ended it, as Optuna's ends
        (:meth:`_TrialsSideBySideBar.fill_at_timeout`); not after an error or ``study.stop()``, after which Optuna's
        bar stays where it was."""
        if (self.error is not None or self.study._stop_flag or self.timeout is None or self._started is None
                or not isinstance(self.progress_bar, _TrialsSideBySideBar)):
            return
        try:
            self.progress_bar.fill_at_timeout(time.monotonic() - self._started, self.study)
        except Exception as e:  # noqa: BLE001 - its read of the best trial failed (the storage): as in Optuna's loop
            self._fail(e)

    # ---------------------------------------------------------------- searcher

    def next_groups(self) -> list[TrialGroup]:
        """One new (empty) fluidsalus trial when fewer than :data:`PROPOSALS_AHEAD` wait to start."""
        if self._started is None:
            self._started = time.monotonic()  # the executor asks once its device actors are up
            _start_the_clock(self.progress_bar)
        waiting = len(self._unstarted) + self._proposed_unadded
        if self.stopping() or waiting >= PROPOSALS_AHEAD:
            return []
        if self.n_trials is not None and self._asked + waiting >= self.n_trials:
            return []
        self._proposed_unadded += 1
        self._group_seq += 1
        return [TrialGroup(group_id=f"{GROUP_ID_PREFIX}-{self._group_seq - 1}", configs=[{}])]

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self._proposed_unadded = max(0, self._proposed_unadded - 1)
        self._unstarted.add(trial_id)

    def retries(self, trial_id: str) -> bool:
        """A trial whose objective's failure the study was told (``FAIL``) is not run again: only the engine's
        failures are (an out-of-memory error for good, a device's death), on the same Optuna trial."""
        live = self._live.get(trial_id)
        return live is None or not live.told

    def stopped_by_search(self, trial_id: str) -> bool:
        """A trial the study was told ``PRUNED`` ends stopped, as a trial a scheduler stops (``fluidsalus
        inspect`` counts it "stopped by the search")."""
        live = self._live.get(trial_id)
        return live is not None and live.state == TrialState.PRUNED.name

    def started_trial(self, trial_id: str) -> bool:
        """Whether the fluidsalus trial started an Optuna trial: one whose start found the optimisation over (timeout,
        ``study.stop()``, an error: :meth:`_on_start` answered None) ran nothing, and ends as a trial that never
        started, as Optuna's loop starts no trial then."""
        return trial_id in self._live

    def collect_stops(self) -> list[str]:
        """Once stopping, the proposed trials that have not started: they end without running."""
        if not self.stopping():
            return []
        stops = sorted(self._unstarted - self._stop_sent)
        self._stop_sent.update(stops)
        return stops

    def is_finished(self) -> bool:
        return self.stopping() or (self.n_trials is not None and self._asked >= self.n_trials)

    def proposes_new(self) -> bool:
        """Whether a slot that frees may still get a new trial: not once stopping, nor once ``n_trials`` trials
        are asked or wait to start, as :meth:`next_groups` counts them. (:meth:`is_finished` counts a trial once
        its objective starts it: a prefetched trial does at its first turn, too late for the executor to hold
        a pause, or a verdict wait, in front of it: ``Executor._tell_hold_pauses``.)"""
        waiting = len(self._unstarted) + self._proposed_unadded
        return not self.stopping() and (self.n_trials is None or self._asked + waiting < self.n_trials)

    def on_trial_error(self, trial_id: str, error: str) -> None:
        self._errors[trial_id] = error

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """A fluidsalus trial ended; one whose objective never told its outcome is told ``FAIL`` here, with the
        reason the engine gave (``on_trial_error``)."""
        with self._held(trial_id):
            self._on_trial_complete(trial_id, error)

    def _on_trial_complete(self, trial_id: str, error: bool) -> None:
        self._unstarted.discard(trial_id)
        text = self._errors.pop(trial_id, None)
        why = (f": {text.strip()}" if text and text.strip()
               else "; see the experiment store (fluidsalus inspect) for why")
        live = self._live.get(trial_id)
        if live is None:
            if error and not self.stopping():
                self._fail(FluidsalusError(
                    f"fluidsalus trial {trial_id} (experiment {self.experiment!r}) failed before its objective "
                    f"started{why}"
                ))
            return
        if live.told:
            return
        if live.failing is not None:
            packed, caught = live.failing
            self._tell_packed(live, OUT_FAILED, packed, caught)
            return
        if not error:
            why = "; see the experiment store (fluidsalus inspect) for why"
        how = "errored" if error else "was stopped"
        reason = TrialError(f"Trial {live.trial.number} (fluidsalus trial {trial_id}) {how} on its device before "
                            f"its objective returned{why}")
        self._tell(live, OUT_FAILED, error=reason, message=repr(reason))

    # ---------------------------------------------------------------- calls from the trials

    def handle_call(self, trial_id: str, method: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        """``fluidsalus.run``'s call handler: ``(True, pickled answer)`` or ``(False, packed exception)``."""
        with self._held(trial_id):
            return self._answer(trial_id, method, args)

    def offload_call(self, trial_id: str, method: str, args: tuple[Any, ...]) -> Callable[[], tuple[bool, Any]] | None:
        """``fluidsalus.run``'s ``call_offload``: for a sampler call (:data:`SAMPLER_CALLS`) of a started trial, the
        function that answers it on one of the executor's call threads; None for any other call (answered on the
        loop by :meth:`handle_call`).

        The trial's lock is taken here, on the loop, and given back once the answer is made: what the loop does
        next for the trial (its end on its device, a report, a restarted attempt's call) waits for it, as when the
        loop answered the call itself. The sampler sees the trial's own list of the study's trials, as on Optuna's
        thread of the trial (see ``_Live.cached_trials``).
        """
        if method not in SAMPLER_CALLS and method != M_AFTER_REPORTS:
            return None
        # (a suggest carrying held reports too: a define-by-run objective's suggest after a report)
        if not self._slow_sampler() or _inner_method(method, args) not in SAMPLER_CALLS:
            return None
        live = self._live.get(trial_id)
        if live is None or live.told:
            return None  # (answered on the loop: its error)
        live.lock.acquire()
        claimed = threading.Lock()  # taken by whichever comes first: the call thread, or the executor's cancel

        def answer() -> tuple[bool, Any]:
            if not claimed.acquire(blocking=False):
                raise RuntimeError("the call was cancelled before it started")  # (its answer is dropped)
            local = self.study._thread_local
            try:
                local.cached_all_trials = live.cached_trials
                try:
                    return self._answer(trial_id, method, args)
                finally:
                    if not live.told:
                        live.cached_trials = local.cached_all_trials
                    local.cached_all_trials = None  # (kept nowhere else: the trial's tell drops it)
            finally:
                live.lock.release()

        def cancel() -> None:
            """The executor could not hand the call to a thread (a Ctrl-C, no thread to start): the trial's lock goes
            back now (it was held for ever, and ``fail_unfinished`` then hung on it)."""
            if claimed.acquire(blocking=False):
                live.lock.release()

        answer.cancel = cancel  # type: ignore[attr-defined]
        return answer

    def _slow_sampler(self) -> bool:
        """Whether one of the last sampler calls took :data:`SAMPLER_THREAD_MIN_S` or more (0 s before any)."""
        with self._sample_times_lock:
            longest = max(self._sample_times, default=0.0)
        return longest >= SAMPLER_THREAD_MIN_S

    @contextlib.contextmanager
    def _held(self, trial_id: str) -> Iterator[None]:
        """Hold the started trial's lock (nothing to hold for a trial not started)."""
        live = self._live.get(trial_id)
        if live is None:
            yield
            return
        with live.lock:
            yield

    def _dispatch(self, trial_id: str, method: str, args: tuple[Any, ...]) -> Any:
        """``method``'s handler's answer, a sampler call's timed (:data:`SAMPLER_THREAD_MIN_S`), also one that
        held reports carry (:meth:`_on_after_reports`)."""
        if method not in SAMPLER_CALLS:
            return self._calls[method](trial_id, *args)
        began = time.perf_counter()
        try:
            return self._calls[method](trial_id, *args)
        finally:
            with self._sample_times_lock:
                self._sample_times.append(time.perf_counter() - began)

    def _answer(self, trial_id: str, method: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        """Answer a call: ``args`` is ``(pickled arguments, what the device's view holds)`` (:func:`_call`; the
        second may be left out: no view)."""
        # The warnings the study gives (a step reported twice, a fixed value out of range, ...) belong to the
        # objective, as under study.optimize: they go back with the answer and are given there again. They are
        # caught here under the driver's filters (the script's own), and given there under the device's.
        with self.warnings.recording() as caught:
            self._calling.untold = None
            try:
                if method not in self._calls:
                    raise FluidsalusError(f"unknown driver call {method!r} from trial {trial_id}")
                blob, *held = args
                answer = self._dispatch(trial_id, method, cloudpickle.loads(blob))
                completed = self._completed_update(trial_id, held[0] if held else None)
                return True, cloudpickle.dumps((answer, _caught(caught), completed))
            except Exception as e:  # noqa: BLE001 - the exception belongs to the calling objective
                untold = self._calling.untold
                return False, replace(_PackedError.of(e, bare=True), warned=_caught(caught),
                                      untold=None if untold is None else tuple(untold))

    def _completed_update(self, trial_id: str, held: tuple[str, int] | None) -> _CompletedUpdate | None:
        """The study's COMPLETED trials that the device process of ``trial_id`` lacks, for its view (None: none, or
        it keeps no view): those past the ones it ``held`` as its call left (:func:`_view_held`). The study's list
        is read here, so a trial told by a callback (``study.tell``, ``add_trial``) is seen too.

        The answer is sent from what the process said it held, not from what the driver last sent the trial: the
        answers to a process's calls may arrive in another order than they were made (two threads of a trial,
        two trials of the process), and one sent from further on than the process held on its arrival was dropped
        there, with every later one, until a trial started in the process again (a review of h197)."""
        live = self._live.get(trial_id)
        if live is None or not live.keeps_view:
            return None
        first = held[1] if held is not None and held[0] == self.view_key else 0
        with self._completed_lock:
            # (in memory: the storage's own list, by number. Trials before _scan_from are all finished and taken;
            # from there on, each answer looks at the unfinished ones and those after them: not the whole study)
            trials = self.study.get_trials(deepcopy=False)
            while self._scan_from < len(trials) and trials[self._scan_from].state.is_finished():
                self._take_if_completed(trials[self._scan_from])
                self._scan_from += 1
            for frozen in trials[self._scan_from:]:
                self._take_if_completed(frozen)
            if first >= len(self._completed):
                return None
            return self.view_key, first, self._completed[first:]

    def _take_if_completed(self, frozen: FrozenTrial) -> None:
        """Add a COMPLETED trial of the study to the devices' views, once (the caller holds ``_completed_lock``)."""
        if frozen.state == TrialState.COMPLETE and frozen._trial_id not in self._completed_ids:
            self._completed_ids.add(frozen._trial_id)
            self._completed.append(frozen.intermediate_values)  # (the storage's own: see ``view_key``)

    def _trial(self, trial_id: str) -> optuna.Trial:
        live = self._live.get(trial_id)
        if live is None or live.told:
            raise RuntimeError(f"fluidsalus trial {trial_id} has no running Optuna trial")
        return live.trial

    def _snapshot(self, live: _Live) -> _TrialSnapshot:
        """What the device needs of the started trial (the COMPLETED trials its process lacks come with the answer:
        :meth:`_answer`)."""
        trial = live.trial
        rule = _prune_rule(self.study, self.view_key)
        values = {}
        live.keeps_view = rule is not None and rule[0] == PRUNE_COMPLETED
        if live.keeps_view:
            values = dict(self.study._storage.get_trial(trial._trial_id).intermediate_values)  # (in memory)
        return _TrialSnapshot(
            number=trial.number, datetime_start=trial.datetime_start, params=trial.params,
            distributions=trial.distributions, user_attrs=trial.user_attrs, steps=frozenset(live.steps),
            study_name=self.study.study_name, directions=list(self.study.directions), trial_id=trial._trial_id,
            start=live.starts, prune_rule=rule, writes_cannot_fail=_writes_cannot_fail(self.study),
            values=values, log_settings=_optuna_log_settings(),
        )

    def started_trials(self) -> dict[str, int]:
        """The Optuna trial id (in the study's storage) of each fluidsalus trial that started one."""
        return {trial_id: live.trial._trial_id for trial_id, live in self._live.items()}

    def _on_start(self, trial_id: str) -> _TrialSnapshot | None:
        """Start the trial's Optuna trial (or a new attempt of it)."""
        live = self._live.get(trial_id)
        if live is not None:  # the engine restarted this trial (out of memory, device lost): same Optuna trial
            if live.told:
                return None
            live.starts += 1
            return self._snapshot(live)
        self._unstarted.discard(trial_id)
        if self.stopping():
            return None
        storage = self.study._storage
        try:
            # (the stale-trial check and the ask are Optuna's loop's, not the objective's: their warnings, the
            # sampler's before_trial's say, are given on the driver, as Optuna gives them: not sent to the trial)
            with self.warnings.on_the_driver():
                if is_heartbeat_enabled(storage):
                    # Optuna's _run_trial ignores the ExperimentalWarnings of this call (its decorator's, and those
                    # of the storage's stale-trial callback) under warnings.catch_warnings, which swaps the process's
                    # warning state: not thread-safe beside the call threads' sampler calls (see _WarningRecorder).
                    # One filter is put first and that same one taken out: nothing of another thread is put back.
                    with category_ignored(optuna.exceptions.ExperimentalWarning):
                        optuna.storages.fail_stale_trials(self.study)
                trial = self.study.ask()
        except Exception as e:  # noqa: BLE001 - a storage or sampler error ends the optimisation, as in Optuna
            self._fail(e)
            return None
        # (registered and beating at once, as Optuna's _run_trial: a Ctrl-C, SIGTERM or storage error in the
        # write below leaves no RUNNING trial that nothing fails and no heartbeat ever makes stale)
        heartbeat = get_heartbeat_thread(trial._trial_id, storage)
        heartbeat.start()
        live = self._live[trial_id] = _Live(trial_id, trial, heartbeat)
        self._asked += 1
        try:
            storage.set_trial_system_attr(trial._trial_id, SYSTEM_ATTR,
                                          {"experiment": self.experiment, "trial_id": trial_id})
        except Exception as e:  # noqa: BLE001 - a storage error ends the optimisation; the trial is FAIL
            self._fail(e)  # (first: a tell that fails too must not make its own error the one optimize raises)
            with self.warnings.on_the_driver():
                self._tell(live, OUT_FAILED, error=e, message=repr(e))
            # ... and ERROR in the experiment's record, with this error, as the study has it (answered None, its
            # fluidsalus trial ended TERMINATED with no result: the two records disagreed)
            raise
        return self._snapshot(live)

    def _on_suggest(self, trial_id: str, name: str,
                    distribution: BaseDistribution) -> tuple[Any, BaseDistribution, int | None]:
        """The suggested value, the distribution the trial holds for ``name`` and, for a categorical, the index of
        the value in the choices (the device answers with its own object, not the copy the driver has)."""
        trial = self._trial(trial_id)
        if isinstance(distribution, FloatDistribution):
            value = trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step,
                                        log=distribution.log)
        elif isinstance(distribution, IntDistribution):
            value = trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step,
                                      log=distribution.log)
        elif isinstance(distribution, CategoricalDistribution):
            choices = self._choices.canonical(name, distribution.choices)
            value = trial.suggest_categorical(name, choices)
            index = next((i for i, choice in enumerate(choices) if choice is value), None)
            if index is None:  # a value the storage gave back (suggested before): equal, not the same object
                with contextlib.suppress(ValueError):
                    index = CategoricalDistribution(choices).to_internal_repr(value)
            return value, _held_distribution(trial, name), index
        else:
            raise TypeError(f"cannot suggest {name!r} from a {type(distribution).__name__}")
        return value, _held_distribution(trial, name), None

    def _tell_report(self, trial_id: str, value: float, step: int, mark: tuple[int, int]) -> None:
        """Tell the study one of a trial's reports, unless it was told already (see :data:`KEY_REPORT`)."""
        live = self._live.get(trial_id)
        if live is None or live.told or mark in live.reported:
            return
        if live.refused is not None and live.refused[0] == mark:
            # refused as its result came, where Optuna's report raised it: told again with its call, which raises
            # the error if the storage refuses it again (a passing refusal, a storage's hiccup, let the trial go
            # on before; raising the first error failed it at a call the objective did not guard: h149's F2)
            live.refused = None
        try:
            live.trial.report(value, step)
        except Exception as e:  # noqa: BLE001 - the study's storage, of any kind: the objective's error
            live.refused = (mark, e)
            raise
        live.reported.add(mark)
        live.steps.add(step)

    def _on_after_reports(self, trial_id: str, held: list[_Report], method: str, blob: bytes) -> Any:
        """Tell the study the reports a trial held back, in order, then answer the call they came with (its
        arguments, pickled)."""
        self._trial(trial_id)  # (raises for a trial that has no running Optuna trial)
        for i, (value, step, mark) in enumerate(held):
            self._calling.untold = [s for _, s, _ in held[i:]]  # (if this one fails: the device forgets these)
            self._tell_report(trial_id, value, step, tuple(mark))
        self._calling.untold = []  # (all told: an error of the call itself leaves the device's steps as they are)
        return self._dispatch(trial_id, method, cloudpickle.loads(blob))

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """A report of a new step that the driver gets before the call that carries it is told to the study now:
        the study shows it while the trial runs (Optuna writes each report at once), and an interrupted run keeps
        it. A step reported again is left to that call, which gives the objective Optuna's warning; a report the
        study refuses too, which raises its error there (``_Live.refused``), and after a refusal no report of the
        trial is told here: Optuna's ``report`` raised it in the objective, which reported no more (a FAIL trial kept
        the values reported after it, also those whose results came between a raising end's two calls, h131's F3)."""
        mark, live = result.get(KEY_REPORT), self._live.get(trial_id)
        step = result.get(KEY_STEP)
        if mark is None or live is None:
            return Decision.CONTINUE
        with live.lock:
            if live.told or live.refused is not None or step in live.steps:
                return Decision.CONTINUE
            with contextlib.suppress(Exception):  # (kept for the call carrying it: _Live.refused)
                self._tell_report(trial_id, float(result[KEY_INTERMEDIATE]), int(step), tuple(mark))
        return Decision.CONTINUE

    def _on_should_prune(self, trial_id: str) -> bool:
        return self._trial(trial_id).should_prune()

    def _on_relative_params(self, trial_id: str) -> dict[str, Any]:
        return self._trial(trial_id).relative_params

    def _on_set_user_attr(self, trial_id: str, key: str, value: Any) -> None:
        self._trial(trial_id).set_user_attr(key, value)

    def _on_constraints(self, trial_id: str) -> dict[str, float]:
        return self._trial(trial_id).constraints

    def _on_set_constraint(self, trial_id: str, key: str, value: float) -> None:
        self._trial(trial_id).set_constraint(key, value)

    def _on_system_attrs(self, trial_id: str) -> dict[str, Any]:
        return self.study._storage.get_trial_system_attrs(self._trial(trial_id)._trial_id)

    def _on_set_system_attr(self, trial_id: str, key: str, value: Any) -> None:
        if key == SYSTEM_ATTR:
            raise ValueError(f"the trial's system attribute {SYSTEM_ATTR!r} is fluidsalus's own (it links the "
                             "Optuna trial to its fluidsalus trial)")
        self.study._storage.set_trial_system_attr(self._trial(trial_id)._trial_id, key, value)

    #: What a DeviceStudy may read (attributes) or call (methods) on the real study.
    _STUDY_READS = frozenset({"direction", "best_trial", "best_value", "best_params", "best_trials", "trials",
                              "user_attrs", "metric_names"})
    _STUDY_METHODS = frozenset({"get_trials", "set_user_attr", "enqueue_trial", "stop"})

    def _on_study(self, trial_id: str, attr: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if attr in self._STUDY_READS:
            return getattr(self.study, attr)
        if attr in self._STUDY_METHODS:
            return getattr(self.study, attr)(*args, **kwargs)
        raise AttributeError(f"study.{attr} is not available inside a trial")

    def _on_failing(self, trial_id: str, packed: _PackedError, caught: bool) -> None:
        live = self._live.get(trial_id)
        if live is not None:
            live.failing = (packed, caught)

    def _on_finish(self, trial_id: str, outcome: str, values: list[Any] | None, shown: str | None,
                   packed: _PackedError | None, caught: bool) -> str | None:
        live = self._live.get(trial_id)
        if live is None:
            raise RuntimeError(f"fluidsalus trial {trial_id} has no Optuna trial to finish")
        if live.told:
            return self.study._storage.get_trial(live.trial._trial_id).state.name
        # (the study's tell, the log lines, the callbacks and the bar are Optuna's loop's work, not the objective's:
        # their warnings are given on the driver, where Optuna gives them, not sent to the trial with the answer; the
        # reports this call carried were told before, their warnings the objective's)
        with self.warnings.on_the_driver():
            if packed is not None:
                return self._tell_packed(live, outcome, packed, caught)
            return self._tell(live, outcome, values=values, shown=shown)

    # ---------------------------------------------------------------- telling

    def _tell(self, live: _Live, outcome: str, *, values: list[Any] | None = None, shown: str | None = None,
              error: BaseException | None = None, message: str = "", caught: bool = False,
              interrupted: bool = False, trace: str | None = None) -> str | None:
        """Tell the study how the trial ended, log Optuna's line and run the callbacks (as ``_run_trial`` does).

        Args:
            live: The trial.
            outcome: ``OUT_RETURNED``, ``OUT_PRUNED`` or ``OUT_FAILED``.
            values: What the objective returned (``OUT_RETURNED``), as floats or ``_Uncastable`` s.
            shown: The ``repr`` of the returned object, for the log.
            error: The exception that failed the trial (``OUT_FAILED``).
            message: ``repr(error)`` as the device saw it (``OUT_FAILED``), or ``str(TrialPruned)`` (``OUT_PRUNED``).
            caught: Whether ``catch`` names the error (then the optimisation goes on).
            interrupted: The run itself ended under the trial (its error is raised anyway): no callbacks.
            trace: The device's traceback of ``error``, for the log (:func:`_log_failed`).

        Returns:
            The trial's final state name, or None when telling failed (that error then ends the optimisation).
        """
        live.told = True
        live.cached_trials = None
        live.heartbeat.join()
        trial, study = live.trial, self.study
        problem = _infeasibility(values, len(study.directions)) if outcome == OUT_RETURNED else None
        try:
            if outcome == OUT_RETURNED and problem is None:
                frozen = study.tell(trial, [float(v) for v in values or []])
            elif outcome == OUT_PRUNED:
                frozen = study.tell(trial, state=TrialState.PRUNED)
            else:
                frozen = study.tell(trial, state=TrialState.FAIL)
        except Exception as e:  # noqa: BLE001 - the sampler's after_trial or the storage failed: raise it later
            # Optuna stores the state before the sampler's after_trial (its tell's finally), and its _run_trial
            # logs the trial's line from the stored trial all the same: so here, when it was stored
            stored = None
            with contextlib.suppress(Exception):
                stored = study._storage.get_trial(trial._trial_id)
            self._fail(e)
            if stored is not None and stored.state.is_finished():
                live.state = stored.state.name
                self._log_end(trial, stored, error, message, shown, problem, interrupted, trace)
            return None
        live.state = frozen.state.name
        self._log_end(trial, frozen, error, message, shown, problem, interrupted, trace)
        if interrupted:
            return frozen.state.name
        if error is not None and not caught:
            self._fail(error)  # as in Optuna: no callbacks for the trial whose exception ends the optimisation
            return frozen.state.name
        for callback in self.callbacks:
            try:
                callback(study, copy.deepcopy(frozen))
            except Exception as e:  # noqa: BLE001 - a callback's error ends the optimisation, as in Optuna
                self._fail(e)
                return frozen.state.name
        # then the bar, as Optuna's loop updates it (its time from the devices' start, as the timeout's)
        try:
            self.progress_bar.update(0.0 if self._started is None else time.monotonic() - self._started, study)
        except Exception as e:  # noqa: BLE001 - its read of the best trial failed (the storage): as in Optuna's loop
            self._fail(e)
        return frozen.state.name

    def _log_end(self, trial: optuna.Trial, frozen: FrozenTrial, error: BaseException | None, message: str,
                 shown: str | None, problem: str | None, interrupted: bool, trace: str | None) -> None:
        """Log Optuna's line for a trial's end, as its ``_run_trial`` does from the stored trial."""
        if frozen.state == TrialState.COMPLETE:
            self._log_completed(trial, list(frozen.values))
        elif frozen.state == TrialState.PRUNED:
            _OPTIMIZE_LOGGER.info(f"Trial {trial.number} pruned. {message}")
        elif error is not None:
            # (A Ctrl-C's traceback is the driver's frames, the same for every trial it ends: not shown. Optuna's,
            # from inside its one objective, is not to be had: the objectives run on the devices.)
            shown_error = None if interrupted and isinstance(error, KeyboardInterrupt) else error
            _log_failed(trial.number, trial.params, message, None, exc_info=shown_error, trace=trace)
        else:
            _log_failed(trial.number, trial.params, problem or "", _Shown(shown if shown is not None else "None"))

    def _tell_packed(self, live: _Live, outcome: str, packed: _PackedError, caught: bool) -> str | None:
        """Tell a trial that ended with an exception raised on the device (pruned or failed)."""
        if outcome == OUT_PRUNED:
            return self._tell(live, OUT_PRUNED, message=packed.text)
        return self._tell(live, OUT_FAILED, error=packed.unpack(), message=packed.shown, caught=caught,
                          trace=packed.trace)

    def fail_unfinished(self, reason: BaseException) -> None:
        """Tell ``FAIL`` for every started trial not told yet (the run ended under them: Ctrl-C, an engine error)."""
        for live in list(self._live.values()):
            with live.lock:  # (a sampler call still answered on a call thread ends first)
                if not live.told:
                    self._tell(live, OUT_FAILED, error=reason, message=repr(reason), interrupted=True)

    def close(self) -> None:
        """Stop the heartbeats of trials that are still running (only after an interrupted run)."""
        # (no lock: the last step, also after a second Ctrl-C, which may leave a sampler call on a call thread)
        for live in list(self._live.values()):
            if not live.told:
                live.heartbeat.join()
                live.told = True


# ---------------------------------------------------------------------------------------------- optimize


def _check_catch(catch: Any) -> tuple[type[BaseException], ...]:
    if catch is None:  # catching nothing (Optuna 5 takes it at the call, then fails with a TypeError at a failure)
        return ()
    if isinstance(catch, (str, bytes)):  # (it was iterated: "got 'V'", its first letter)
        raise ConfigTypeError(f"catch: must be an exception class or an iterable of them, got {catch!r}, a name: "
                              "pass the class itself (catch=(ValueError,), not catch='ValueError')")
    classes = tuple(catch) if isinstance(catch, Iterable) else (catch,)
    for item in classes:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigTypeError(f"catch: must be an exception class or an iterable of them, got {item!r}")
    return classes


def _check_run_kwargs(run_kwargs: Mapping[str, Any]) -> None:
    for key in run_kwargs:
        if key in _REFUSED_RUN_KWARGS:
            raise ConfigError(f"{key}: optimize() does not take fluidsalus.run's {key}=; {_REFUSED_RUN_KWARGS[key]}")
        if key not in RUN_KWARGS:
            raise ConfigTypeError(
                f"{key}: not an argument of optimize() or of the fluidsalus.run options it passes on "
                f"({', '.join(sorted(RUN_KWARGS))})"
            )


def _experiment_name(study: optuna.Study) -> str:
    study_part = _UNSAFE_NAME_CHARS.sub("_", study.study_name)[:MAX_STUDY_NAME_CHARS]
    return f"optuna_{study_part}_{datetime.datetime.now().strftime(session.DATE_FORMAT)}_{uuid.uuid4().hex[:6]}"


def _storage_folder(storage_path: Any) -> str | None:
    """The folder the run records its experiment in (a ``pathlib.Path`` too, as :func:`fluidsalus.run` takes it);
    None for a ``storage_path`` of a wrong type, which :func:`fluidsalus.run`'s checks refuse."""
    return resolve_storage_path(storage_path) if isinstance(storage_path, (str, os.PathLike, type(None))) else None


def _record_name(name: Any, storage_path: Any, study: optuna.Study) -> Any:
    """The name of this call's fluidsalus experiment (each call of :func:`optimize` records its trials as a new
    one): :func:`_experiment_name` by default; a given ``name`` that an experiment has already (``optimize`` called
    again on the study, which Optuna continues, or after a crash) becomes the first free ``<name>_<k>``, with a
    warning (it was refused with advice ``optimize`` cannot take: ``resume=True``). A name or storage path of a
    wrong type is left to :func:`fluidsalus.run`'s checks."""
    if name is None or name == "":  # ("": the default, as before; it named the storage folder itself, "taken")
        return _experiment_name(study)
    storage = _storage_folder(storage_path)
    if not isinstance(name, str) or storage is None:
        return name
    free = unused_name(storage, name)
    if free != name:
        warnings.warn(f"name: an experiment named {name!r} already exists in {storage} (an earlier optimize call "
                      f"on this study, or another run); this call's trials are recorded as {free!r}", UserWarning,
                      stacklevel=3)
    return free


#: The n_trials and timeout Optuna's loop compares with its counts and its clock: a real number, a NumPy bool too
#: (``numbers.Real`` takes NumPy's ints and floats, not its bool: ``n_trials=np.True_`` runs 1 trial in Optuna).
_COMPARED = (numbers.Real, np.bool_)


def optimize(
    study: optuna.Study,
    objective: Callable[[Any], float | Sequence[float] | None] | None = None,
    n_trials: int | None = None,
    timeout: float | None = None,
    n_jobs: int = 1,
    catch: Iterable[type[Exception]] | type[Exception] = (),
    callbacks: Iterable[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
    gc_after_trial: bool = False,
    show_progress_bar: bool = False,
    sampler_threads: int | None = None,
    **run_kwargs: Any,
) -> None:
    """Optimise ``study`` like ``study.optimize(objective, ...)``, with the objective on fluidsalus's lanes.

    The objective gets a :class:`DeviceTrial` (``optuna.Trial``'s API) and runs in a device actor; its
    suggestions, reports and pruning questions go to the real trial on the driver, so the study's sampler,
    pruner and storage are used exactly as ``study.optimize`` uses them, and the log lines are Optuna's.
    See the module docstring for how each trial's end maps to an Optuna state.

    Args:
        study: The study to optimise (any storage; single- or multi-objective).
        objective: ``f(trial)`` returning a float (a sequence of floats for a multi-objective study). It is
            pickled to the devices, so it must not capture locks, open files or clients.
        n_trials: Trials to run in this call; None runs until ``timeout``, ``study.stop()`` or an error. As in
            Optuna's loop, a fraction rounds up (2.5 runs 3), a bool counts as an int (True runs 1) and a number
            <= 0 runs none.
        timeout: Seconds after which no new trial starts; running trials finish (Optuna's rule). The clock
            starts once the device actors are up (starting them, a second or two, is not counted). A timeout
            <= 0 runs no trial, as in Optuna.
        n_jobs: Refused where Optuna refuses it (not a number, or neither -1 nor > 0), else ignored: the lanes
            decide how many trials run at once (cap it with ``max_concurrent_trials=``).
        catch: Exception types that fail a trial (``FAIL``) without stopping the optimisation (None: none).
        callbacks: Functions ``f(study, frozen_trial)`` called on the driver after each trial is told (not for a
            trial whose exception ends the optimisation). ``study.stop()`` in a callback ends the optimisation
            once the running trials finish.
        gc_after_trial: Run ``gc.collect()`` in the device process after each trial.
        show_progress_bar: Show Optuna's own progress bar (``Best trial: 3. Best value: 0.12``), updated after
            each trial's callbacks as ``study.optimize`` updates it; its clock starts once the devices are up, as
            ``timeout`` 's does. fluidsalus's own progress view and summary come with ``verbose=1``; under the
            default ``verbose=0`` one line of Optuna's logger (``INFO``, so ``optuna.logging.set_verbosity``
            silences it) says where the fluidsalus record of the call went.
        sampler_threads: With two devices or more and a slow sampler (one of its last calls took
            :data:`SAMPLER_THREAD_MIN_S`, 50 ms, or more, as ``GPSampler`` 's do), the trials' sampler calls
            (``trial.suggest_*``, ``relative_params``) are answered on up to this many threads of the driver, one
            per device, while the driver's loop goes on serving the other devices: the sampler then holds up only
            the trial that asked. None: :data:`SAMPLER_THREADS_MAX`; 1: every call on the loop, one at a time.
            With one device every call is answered on the loop.
        **run_kwargs: Options of :func:`fluidsalus.run` passed on: ``name``, ``storage_path``, ``devices``,
            ``cpus_per_device``, ``cpus_per_trial``, ``gpu_per_trial``, ``max_concurrent_trials``,
            ``max_failures``, ``lane_policy``, ``quantum_ms``, ``verbose``. The default name is
            ``optuna_<study name>_<timestamp>_<random>``; a ``name`` an experiment already has (an earlier call's)
            becomes ``<name>_2``, ``<name>_3``, ... with a warning. ``func=`` is taken as the objective, as Optuna
            names it.

    Raises:
        ConfigError: A bad argument, or a ``fluidsalus.run`` option that ``optimize`` sets itself (the message
            says what to use instead); a :class:`~fluidsalus.errors.ConfigTypeError` (also a ``TypeError``)
            where Optuna raises ``TypeError``.
        RuntimeError: When called while this study is already being optimised in this thread.
        Exception: The exception of a trial that ``catch`` does not name, re-created on the driver (a
            :class:`TrialError` when it cannot be unpickled), with the device's traceback as ``__cause__``; or
            the exception of a callback or of the study's storage or sampler.
    """
    if "func" in run_kwargs:  # Optuna's name for it: study.optimize(func=objective, ...) rewritten as it is
        if objective is not None:
            raise ConfigTypeError("func: the objective was given twice (as objective and as func=); pass one")
        objective = run_kwargs.pop("func")
    if not isinstance(study, optuna.Study):
        raise ConfigTypeError(f"study: must be an optuna.Study, got {type(study).__name__}")
    if objective is None:
        raise ConfigTypeError("objective: missing; call optimize(study, objective, ...) (or func=objective)")
    if not callable(objective):
        raise ConfigTypeError(f"objective: must be a function f(trial), got {type(objective).__name__}")
    # Refused where Optuna refuses it (its thread pool's max_workers: a number > 0, or -1 for one per core), then
    # left to the lanes
    if not isinstance(n_jobs, numbers.Real):
        raise ConfigTypeError(f"n_jobs: must be a number (ignored: the lanes decide concurrency), got {n_jobs!r}")
    if n_jobs != -1 and not n_jobs > 0:
        raise ConfigError(f"n_jobs: must be -1 or > 0 (ignored: the lanes decide concurrency), got {n_jobs}")
    # Numbers as Optuna's loop reads them (it compares them with its counts): n_trials=2.5 runs 3 trials,
    # n_trials=True 1 (a bool is an int, NumPy's too), n_trials=inf has no limit, and n_trials or a timeout <= 0 runs
    # none (a timeout computed as the time left, say)
    if n_trials is not None and (not isinstance(n_trials, _COMPARED) or math.isnan(n_trials)):
        raise ConfigTypeError(f"n_trials: must be a number of trials (an int) or None, got {n_trials!r}")
    if timeout is not None and (not isinstance(timeout, _COMPARED) or math.isnan(timeout)):
        raise ConfigTypeError(f"timeout: must be a number of seconds or None, got {timeout!r}")
    classes = _check_catch(catch)
    if callbacks is not None and (isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Iterable)):
        raise ConfigTypeError(f"callbacks: must be a list of functions f(study, frozen_trial), got {callbacks!r}")
    callback_list = list(callbacks or [])
    if not all(callable(c) for c in callback_list):
        raise ConfigTypeError("callbacks: every callback must be a function f(study, frozen_trial)")
    if sampler_threads is None:
        sampler_threads = SAMPLER_THREADS_MAX
    elif not isinstance(sampler_threads, numbers.Integral) or isinstance(sampler_threads, bool):
        raise ConfigTypeError(f"sampler_threads: must be a number of threads (an int) or None, got {sampler_threads!r}")
    elif sampler_threads < 1:
        raise ConfigError(f"sampler_threads: must be >= 1 (1: every call answered on the driver's loop), got "
                          f"{sampler_threads}")
    _check_run_kwargs(run_kwargs)
    if study._thread_local.in_optimize_loop:
        raise RuntimeError("Nested invocation of `Study.optimize` method isn't allowed (the study is already being "
                           "optimised in this thread).")
    if (n_trials is not None and n_trials <= 0) or (timeout is not None and timeout <= 0):
        _ProgressBar(bool(show_progress_bar), n_trials, timeout).close()  # (Optuna's empty bar, where it shows one)
        return

    name = _record_name(run_kwargs.pop("name", None), run_kwargs.get("storage_path"), study)
    verbose = run_kwargs.pop("verbose", 0)
    limit = None if n_trials is None or math.isinf(n_trials) else math.ceil(n_trials)  # (inf: no limit, as Optuna's)
    progress_bar = _TrialsSideBySideBar(bool(show_progress_bar), n_trials, timeout)  # (Optuna's, with its warning)
    driver = _StudyDriver(study, limit, timeout, callback_list, name, progress_bar)
    runner = _ObjectiveRunner(objective, classes, bool(gc_after_trial), study, view_key=driver.view_key)
    study._stop_flag = False
    study._thread_local.in_optimize_loop = True  # study.stop() works in callbacks; ask() knows it is optimize
    try:
        with driver.warnings:
            grid = run(runner, searcher=driver, call_handler=driver.handle_call, call_offload=driver.offload_call,
                       call_threads=int(sampler_threads), name=name, verbose=verbose, **run_kwargs)
        driver.end_the_bar()
    except BaseException as e:
        # As Optuna's _run_trial, which fails a trial on an Exception or a KeyboardInterrupt only: a SystemExit (Ray's
        # SIGTERM handler raises one, a preemption's signal) leaves the running trials RUNNING, for a heartbeat
        # storage's RetryFailedTrialCallback to find stale and run again (they were FAIL, never retried: a
        # helper's side-by-side run)
        if isinstance(e, (Exception, KeyboardInterrupt)):
            driver.fail_unfinished(e)
        # what the study knows goes into the record of a run cut short too (its trials had no params and `ls` no
        # best: h99's F3), when its store was made
        storage = _storage_folder(run_kwargs.get("storage_path"))
        experiment_dir = os.path.join(storage, name) if isinstance(name, str) and storage is not None else None
        if experiment_dir is not None and os.path.isfile(os.path.join(experiment_dir, DB_FILENAME)):
            try:
                _record_the_study(experiment_dir, study, driver.started_trials(), ended_by=e)
            except Exception as record_error:  # noqa: BLE001 - the run's own exception is the one to raise
                logger.warning("could not record the study's trials in %s: %s", experiment_dir, record_error)
            else:
                _say_where(experiment_dir, len(driver.started_trials()), verbose)
        raise
    finally:
        progress_bar.close()
        driver.close()
        study._thread_local.in_optimize_loop = False
        study._storage.remove_session()
    _record_the_study(grid.experiment_path, study, driver.started_trials())
    _say_where(grid.experiment_path, len(driver.started_trials()), verbose)
    if driver.error is not None:
        raise driver.error


def _start_the_clock(progress_bar: _ProgressBar) -> None:
    """Start the clock of Optuna's bar (tqdm's: the time and the rate it shows) once the devices are up, as the
    ``timeout`` 's clock starts (a bar made at the call showed the devices' start as the first trial's time, and a
    ``timeout`` bar "00:12/00:01")."""
    shown = getattr(progress_bar, "_progress_bar", None)  # (the tqdm bar, there only while the bar is shown)
    if shown is not None:
        shown.reset()


def _say_where(experiment_dir: str, n_trials: int, verbose: Any) -> None:
    """Under ``verbose=0`` (where the run prints no summary naming it), one ``INFO`` line of Optuna's logger that
    says where this call's fluidsalus record is and how to look at it."""
    if verbose == 0:
        _RECORD_LOGGER.info(f"fluidsalus recorded this call's {plural(n_trials, 'trial')}; show them with: "
                            f"fluidsalus inspect {shlex.quote(experiment_dir)}")


def _record_the_study(experiment_dir: str, study: optuna.Study, started: Mapping[str, int],
                      ended_by: BaseException | None = None) -> None:
    """Record in the experiment what the study knows once the run has ended, so that ``fluidsalus inspect`` and
    ``ls`` show it: each started trial's parameters as its config (the searcher proposed empty configs: the
    objective suggests them), and, for a single-objective study, the experiment's metric and mode: the trials'
    values (:data:`KEY_VALUE`) in the study's direction (they had no metric: one given to the run would have been
    checked on every intermediate report). A store that cannot be written keeps what it has, as before.

    Args:
        experiment_dir: The run's experiment.
        study: The study.
        started: The Optuna trial id (in the study's storage) of each fluidsalus trial that started one.
        ended_by: The exception that ended the run under its trials (Ctrl-C, an engine error), if one did: a trial
            the engine left unfinished (``RUNNING``/``PENDING``, as an interrupted run's trials wait for a resume,
            which ``optimize`` does not do) but the study has finished gets the study's end: ``ERROR`` with that
            exception for a ``FAIL`` (:meth:`_StudyDriver.fail_unfinished`), ``TERMINATED`` for a trial told
            ``COMPLETE`` or ``PRUNED`` before its result reached the driver (the two records disagreed); one that
            never started an Optuna trial ends ``TERMINATED`` (``stopped``, no result, no start, a ``trial_end`` with
            ``started: False``), as the engine ends a proposed trial it never ran.
    """
    try:
        frozen = {trial_id: study._storage.get_trial(optuna_id) for trial_id, optuna_id in started.items()}
    except Exception as e:  # noqa: BLE001 - a storage of any kind, which must not hide the run's own error
        logger.warning("could not read the study's trials' parameters for %s: %s", experiment_dir, e)
        frozen = {}
    try:
        store = ExperimentStore.open(experiment_dir)
        try:
            for trial_id, trial in frozen.items():
                store.update_trial_config(trial_id, trial.params)
            # each trial's Optuna number and state, as the study ended it: `fluidsalus inspect` and `ls` name the
            # trials so (a trial that failed before its first report has no result that carries its number)
            now = time.time()
            store.add_events([(now, OPTUNA_TRIAL_EVENT, trial_id, None,
                               {"number": trial.number, "state": trial.state.name})
                              for trial_id, trial in frozen.items()])
            if ended_by is not None:
                unfinished = {row.trial_id: row for row in store.trials() if row.status in (RUNNING, PENDING)}
                why = "".join(traceback.format_exception_only(type(ended_by), ended_by)).strip()
                trace = "".join(traceback.format_exception(type(ended_by), ended_by, ended_by.__traceback__))
                folders = store.trial_dirs()
                for trial_id, trial in frozen.items():
                    if trial_id not in unfinished or not trial.state.is_finished():
                        continue  # (the engine recorded its end, or the study has it RUNNING too: a SystemExit)
                    now = time.time()
                    with store.transaction():  # (its row, result and end together)
                        if trial.state == TrialState.FAIL:
                            outcome = OUT_ERRORED
                            store.update_trial(trial_id, status=ERROR, error=why, finished_at=now,
                                               stop_reason=outcome)
                            # (its error files too, as every ERROR trial's: Trial.get_error(), Result.error's cause)
                            append_error_file(folders[trial_id], trial_id, unfinished[trial_id].num_failures + 1, now,
                                              why, trace)
                        else:  # told before its result reached the driver (a callback raised the interrupt)
                            # its end result too, as the objective's runner returns it (the value is the metric)
                            end: dict[str, Any] = {KEY_NUMBER: trial.number, KEY_STATE: trial.state.name}
                            if trial.state == TrialState.COMPLETE and trial.values is not None:
                                end[KEY_VALUES] = list(trial.values)
                                if len(trial.values) == 1:
                                    end[KEY_VALUE] = trial.values[0]
                            stored = store.results(trial_id)
                            iteration = (stored[-1].iteration if stored else 0) + 1
                            attempt = stored[-1].attempt if stored else 0
                            end.update(training_iteration=iteration, trial_id=trial_id, done=True)
                            store.add_results([(trial_id, attempt, iteration, now, end)])
                            outcome = OUT_STOPPED if trial.state == TrialState.PRUNED else OUT_COMPLETED
                            store.update_trial(trial_id, status=TERMINATED, finished_at=now, last_result=end,
                                               stop_reason=outcome)
                        # every ended trial has its trial_end (inspect's timelines end there), off any device as the
                        # engine's ends of trials it stopped running (the run's devices had ended under it)
                        store.add_events([(now, "trial_end", trial_id, None,
                                           {"attempt": unfinished[trial_id].attempt, "outcome": outcome})])
                # a trial proposed but never started (no Optuna trial: it waited for a lane, or for its start's
                # answer) ends as the engine ends those it never ran (TERMINATED, stopped, no result, no start, a
                # trial_end off any device with started False): it stayed PENDING/RUNNING, "unfinished" in `ls`,
                # waiting for a resume optimize never does, and one whose lane had begun it then counted as a
                # trial that ran ("1 terminated", not "never started")
                now = time.time()
                for trial_id in sorted(unfinished.keys() - started.keys()):
                    with store.transaction():
                        store.update_trial(trial_id, status=TERMINATED, stop_reason=OUT_STOPPED, finished_at=now)
                        store.take_back_start(trial_id)
                        store.add_events([(now, "trial_end", trial_id, None, {
                            "attempt": unfinished[trial_id].attempt, "outcome": OUT_STOPPED, "started": False})])
            if len(study.directions) == 1:
                mode = next(m for m, direction in DIRECTIONS.items() if direction == study.direction)
                store.set_experiment(metric=KEY_VALUE, mode=mode)
        finally:
            store.close()
    except (StoreError, OSError) as e:
        logger.warning("could not record the study's trials in %s: %s", experiment_dir, e)
