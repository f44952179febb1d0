"""Ray Tune's experiment callbacks (``ray.tune.Callback``), run on fluidsalus's driver-side callbacks.

A subclass of :class:`Callback` overrides any of Ray's hooks. They are called in the driver, after the event
has been stored, with Ray's argument names, in Ray's order:

- ``setup(stop=..., num_samples=..., total_num_samples=..., time_budget_s=...)`` once, before the first trial
  (``num_samples=-1`` is passed as ``sys.maxsize``, as Ray passes it);
- ``on_trial_start(iteration, trials, trial)`` when an attempt of a trial starts on a device (its first start,
  a retry, a resumed or restored trial, a PBT exploit);
- ``on_trial_recover(iteration, trials, trial)`` before the start of a retry after a failure that
  ``FailureConfig.max_failures`` allows (Ray calls it at the failure; fluidsalus learns of the retry when it
  starts, so a retry that never starts, because the run ended, is not reported);
- ``on_trial_restore(iteration, trials, trial)`` right after the start of an attempt that resumes from a
  checkpoint (a retry or a PBT exploit from a checkpoint, or an unfinished trial of a restored experiment);
- ``on_trial_result(iteration, trials, trial, result)`` for every result, in order; ``result`` has Ray's
  ``config`` key (and ``trial_id``, ``training_iteration``, ...). A callback that sets
  ``result["should_checkpoint"] = True`` asks for a checkpoint of that result, as in Ray: with such a callback
  in the run (one whose module's source mentions ``should_checkpoint``), a class ``Trainable`` waits after each
  result for the driver's answer and saves that iteration (``ClassOptions.checkpoint_verdicts``), and
  ``on_checkpoint`` / ``on_trial_save`` follow;
- ``on_checkpoint(iteration, trials, trial, checkpoint)`` then ``on_trial_save(iteration, trials, trial)``
  after a result that carried a checkpoint; ``checkpoint`` is a :class:`fluidsalus.tune.Checkpoint` of the
  stored copy;
- ``on_trial_complete(iteration, trials, trial)`` when a trial ends, or ``on_trial_error(...)`` when it
  failed for good (after its retries);
- ``on_step_begin(iteration, trials)`` / ``on_step_end(iteration, trials)`` at the start and end of each pass
  of the driver's loop (Ray: of each step of its controller), for callbacks that override them;
- ``on_experiment_end(trials)`` once, when ``fit()`` returns or raises.

As in Ray, ``trial.status`` is still ``PENDING`` in ``on_trial_start`` and still ``RUNNING`` in
``on_trial_complete`` (``PAUSED`` for a trial stopped while paused at its rung; its ``last_result`` says
``done``), and ``trial.checkpoint`` in ``on_checkpoint`` is still the previous one. A progress reporter, which Ray
runs after its step, sees them updated.

``trial`` is a :class:`TrialInfo`: ``trial_id``, ``config``, ``last_result``, ``status``, ``path`` /
``local_path``, ``checkpoint``, ``num_failures``, ``trial_name``, ``error`` and ``is_finished()``, the
attributes callbacks read most; it is not Ray's ``Trial``. ``trials`` holds every trial made so far, in the order
they were made, as Ray's: a trial the search made is there ``PENDING`` before it starts (a grid's, a HyperBand
bracket's), and a trial its searcher pauses at a rung is ``PAUSED`` until it goes on (``RUNNING`` again).
``iteration`` counts the events the callbacks have seen.

A callback with state overrides ``get_state()`` (a dict, or None for nothing to save) and ``set_state(state)``,
as in Ray: the states are saved in the experiment's folder (``callback-states-<session>.pkl``, Ray's file) at
the first event, then with Ray's period (``TUNE_GLOBAL_CHECKPOINT_S``, seconds or ``auto``: at least 10 s and 19
times the last save's duration), and once more before ``on_experiment_end`` (a failure of that last save is
logged, as in Ray). When the experiment is restored (``Tuner.restore``, ``tune.run(resume=...)``), each callback
at the same place in the list is given its state before ``setup``.

An object of Ray's own ``ray.tune.Callback`` class is accepted too and called the same way.

A callback's exception is handled hook by hook as Ray's controller handles it, and ends that hook's round (the
callbacks after it are not called for the event, as in Ray's ``CallbackList``): in ``on_trial_complete`` it is
logged and the trial fails (``ERROR``, ``on_trial_error``; the engine records it:
:meth:`RayCallbackAdapter.failed_ends`) while the run goes on; in ``on_checkpoint`` it is logged and the run goes
on; in ``on_trial_result``, ``on_trial_save``, ``on_trial_recover`` and ``on_trial_error`` the run ends with a
:class:`~fluidsalus.errors.CallbackError` (a ``TuneError``, as Ray's); in any other hook the run ends with the
exception itself, with a note naming the callback and the hook (docs/compatibility.md, "A callback that raises").
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import logging
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ray import cloudpickle  # (Ray's: the standalone one names functions pickled by value <dynamic-code>)

from fluidsalus._periodic import SavePeriod
from fluidsalus.callbacks import Callback as EngineCallback
from fluidsalus.checkpoint import write_atomically
from fluidsalus.errors import CallbackError, ConfigError, pickle_exception
from fluidsalus.session import DATE_FORMAT, with_config
from fluidsalus.store import (
    DB_FILENAME,
    ERROR,
    ERROR_FILE,
    FINAL_STATUSES,
    PAUSED,
    RESTART_EXPLOIT,
    TERMINATED,
    TRIAL_RESTART_EVENT,
    ExperimentStore,
    read_error_file,
)
from fluidsalus.tune._tags import Tagger
from fluidsalus.tune.result import DONE, SHOULD_CHECKPOINT

__all__ = ["Callback", "TrialInfo"]

logger = logging.getLogger(__name__)

#: Status of a trial that runs (Ray's name).
RUNNING = "RUNNING"
#: Status of a trial waiting to start again (Ray's name), e.g. between a failure and its retry.
PENDING = "PENDING"
#: Ray's result key of the trial's tag (``fluidsalus/tune/_tags.py``).
EXPERIMENT_TAG = "experiment_tag"
#: The result key that is 1 at the first result of each attempt of a trial (a start, a retry, a PBT exploit).
_RESTART_KEY = "iterations_since_restore"
#: The result key that counts a trial's iterations over all its attempts.
_ITERATION_KEY = "training_iteration"
#: The result key naming the checkpoint folder a result carried (inside the trial's folder).
_CHECKPOINT_KEY = "checkpoint_dir_name"
#: The store's event of a trial being started again, and the reason it records for a retry after a failure.
_RETRY_REASON = "retry"
#: Ray's file of the callbacks' states in the experiment's folder, one per session (the newest is restored).
STATE_FILE_PATTERN = "callback-states-{}.pkl"


#: Hooks that Ray's controller calls in the handler of a trial's future (its training result, its save, its
#: failure), which turns any exception into ``TuneError(traceback)``: the run ends with a :class:`CallbackError` (a
#: ``TuneError``).
#: A ``LoggerCallback``'s ``log_trial_result`` / ``log_trial_save`` / ``log_trial_end(failed=True)`` run under them.
RAISED_AS_TUNE_ERROR = frozenset({"on_trial_result", "on_trial_save", "on_trial_recover", "on_trial_error"})
#: Hooks whose exception Ray's controller catches, logs, and goes on: ``on_checkpoint`` (the run goes on; the
#: checkpoint is kept) and ``on_trial_complete`` (the trial ends ``ERROR``; a ``LoggerCallback``'s
#: ``log_trial_end(failed=False)`` runs under it).
CAUGHT = frozenset({"on_checkpoint", "on_trial_complete"})
#: Ray's warning when a callback's ``on_checkpoint`` raises (its words).
CHECKPOINT_HOOK_WARNING = ("Error encountered during processing of callbacks. Ray Train/Tune recently changed the "
                           "checkpoint interface that is passed to callbacks. If you implemented your own callback "
                           "with an `on_checkpoint` handler, please review the checkpoint interface and adjust your "
                           "code accordingly.")


class _HookFailed(Exception):
    """A callback's exception in a hook of :data:`CAUGHT`, for the adapter to handle as Ray's controller does."""

    def __init__(self, name: str, error: Exception, trace: str) -> None:
        super().__init__(name)
        self.name, self.error, self.trace = name, error, trace


def _callback_name(callback: Any) -> str:
    return type(callback).__qualname__


def _overrides(callback: Any, hook: str) -> bool:
    """Whether ``callback``'s class defines ``hook`` itself rather than keeping a ``Callback`` base's no-op
    (fluidsalus's or Ray's)."""
    method = getattr(type(callback), hook, None)
    return callable(method) and getattr(method, "__qualname__", "") != f"Callback.{hook}"


class Callback:
    """Base class of experiment callbacks, with Ray Tune's hooks; override the ones you need."""

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:
        """Called once before the first trial (``info`` holds ``time_budget_s``)."""

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Called at the start of each pass of the driver's loop, as Ray's at each step of its controller."""

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Called at the end of each pass of the driver's loop."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called when an attempt of a trial has started on a device."""

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called before the first result of an attempt that resumed from a checkpoint."""

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called after ``on_checkpoint``, when a result carried a checkpoint."""

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        """Called for every stored result, in order."""

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called when a trial ends without error."""

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called before a trial that failed starts again (``FailureConfig.max_failures``)."""

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called when a trial has failed for good (after its retries)."""

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        """Called after a result that carried a checkpoint, with the stored checkpoint."""

    def get_state(self) -> dict[str, Any] | None:
        """The callback's state to save with the experiment (None, the default: nothing to save)."""
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        """Take back the state :meth:`get_state` saved, when the experiment is restored.

        Args:
            state: What :meth:`get_state` returned.
        """

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Called once when the experiment ends (``fit()`` returns or raises)."""


class _AfterTheResult:
    """A callback of fluidsalus's own (a progress reporter) that Ray runs after a step, not in its
    ``on_trial_result``: it sees the trial's ``last_result`` already updated."""


@dataclass(eq=False)
class TrialInfo:
    """The light view of a trial that Ray-style callbacks get as ``trial``.

    Like Ray's ``Trial``, a view compares and hashes by identity: the callbacks of a run get one view per trial
    for the whole run, so a logger may key its own records by the view (Ray's ``MLflowLoggerCallback`` does).

    Attributes:
        trial_id: The trial's id.
        config: Its configuration (PBT may change it).
        last_result: Its last result (with ``config``), or None.
        status: ``PENDING`` (made, not started yet; or waiting to start again), ``RUNNING``, ``PAUSED`` (paused
            at its searcher's rung or perturbation point, as Ray's HyperBand, BOHB and PBT pause it, until it goes
            on; in ``on_experiment_end``, a trial a Ctrl-C found paused off any device, as Ray's), ``TERMINATED``
            or ``ERROR``.
        path: Its folder in the experiment.
        trainable_name: The trainable's name.
        checkpoint: Its latest checkpoint (a :class:`fluidsalus.tune.Checkpoint`), or None.
        num_failures: Failures so far that were retried or ended it (Ray's ``Trial.num_failures``).
        attempt: The attempt running now (0 for the first start).
        error: The error that ended it (``status == "ERROR"``), or None. fluidsalus's addition: Ray keeps it in
            the file :attr:`error_file`.
        custom_trial_name: What ``TuneConfig(trial_name_creator=...)`` named it, or None (Ray's attribute).
        tag: Its ``experiment_tag`` as known when the view was made (before its first result), or None.
        evaluated_params: The values the search chose for it, by ``/``-joined path (Ray's attribute: the space's
            grid searches and domains, as first drawn; a PBT perturbation does not change them).
        request: The run's resource request (a dict, a function of the config, or None), for
            :attr:`placement_group_factory`.
        location: ``(node ip, pid)`` of the process that runs its attempt, known from its start (Ray's
            ``trial.temporary_state.location``: the progress table's ``loc`` before the trial's first result), or
            None before it starts.
    """

    trial_id: str
    config: dict[str, Any] = field(default_factory=dict)
    last_result: dict[str, Any] | None = None
    status: str = RUNNING
    path: str = ""
    trainable_name: str = ""
    checkpoint: Any = None
    num_failures: int = 0
    attempt: int | None = None
    error: str | None = None
    custom_trial_name: str | None = None
    tag: str | None = None
    evaluated_params: dict[str, Any] = field(default_factory=dict)
    request: Any = field(default=None, repr=False)
    location: tuple[str, int] | None = field(default=None, repr=False)

    @property
    def placement_group_factory(self) -> Any:
        """Ray's attribute: the trial's resource request as a ``tune.PlacementGroupFactory`` of one bundle, as the
        trial records it (``get_trial_resources()``; a factory's bundles summed); Ray's default, one CPU, for a run
        that asked for none (:func:`fluidsalus.tune._trainable.trial_placement_group_factory`)."""
        from fluidsalus.tune._trainable import trial_placement_group_factory

        return trial_placement_group_factory(self.request, self.config)

    @property
    def local_path(self) -> str:
        """Ray's name for :attr:`path`."""
        return self.path

    @property
    def error_file(self) -> str | None:
        """Ray's attribute: the trial's ``error.txt`` (every failure of the trial, appended), or None before any."""
        path = os.path.join(self.path, ERROR_FILE) if self.path else ""
        return path if path and os.path.isfile(path) else None

    def get_error(self) -> str | None:
        """Ray's: the text of :attr:`error_file` (every failure so far, appended), or None before any."""
        return read_error_file(self.error_file)

    @property
    def experiment_dir_name(self) -> str:
        """Ray's name for the experiment folder's name (the folder that holds :attr:`path`)."""
        return os.path.basename(os.path.dirname(self.path.rstrip(os.sep))) if self.path else ""

    @property
    def trial_name(self) -> str:
        """The name ``trial_name_creator`` gave it, else ``<trainable>_<trial_id>``."""
        if self.custom_trial_name:
            return self.custom_trial_name
        return f"{self.trainable_name}_{self.trial_id}" if self.trainable_name else self.trial_id

    @property
    def experiment_tag(self) -> str:
        """Ray's ``experiment_tag`` (``"<index>_<values>"``): its last result's, else :attr:`tag`, else empty."""
        tag = (self.last_result or {}).get(EXPERIMENT_TAG)
        return str(tag) if tag is not None else (self.tag or "")

    @property
    def storage(self) -> Any:
        """Ray's ``Trial.storage``, as far as Ray's own loggers read it: the trial's folder is its storage (local), so
        their ``_restore_from_remote`` of a resumed trial's file finds it where it already is."""
        import types

        import pyarrow.fs

        return types.SimpleNamespace(trial_fs_path=self.path, storage_filesystem=pyarrow.fs.LocalFileSystem(),
                                     trial_dir_name=os.path.basename(self.path.rstrip(os.sep)),
                                     experiment_fs_path=os.path.dirname(self.path.rstrip(os.sep)))

    def init_local_path(self) -> None:
        """Ray's: make the trial's folder (Ray's own loggers call it before writing there)."""
        if self.path:
            os.makedirs(self.path, exist_ok=True)

    def is_finished(self) -> bool:
        """Whether the trial has ended (``TERMINATED`` or ``ERROR``)."""
        return self.status in FINAL_STATUSES

    def has_checkpoint(self) -> bool:
        """Ray's: whether the trial has a checkpoint."""
        return self.checkpoint is not None

    @property
    def has_reported_at_least_once(self) -> bool:
        """Ray's: whether the trial reported a result (its ``last_result`` holds a ``training_iteration``)."""
        return bool(self.last_result) and _ITERATION_KEY in self.last_result

    def __str__(self) -> str:
        return self.trial_name


class RayCallbackAdapter(EngineCallback):
    """Runs Ray-style callbacks on fluidsalus's callback hooks.

    The engine tells callbacks a trial's starts (with its config and attempt), its results and its end; the
    adapter turns them into Ray's hooks (see the module docstring). It reads the experiment's store, read-only,
    for what the engine hooks do not carry: why an attempt restarted (a retry after a failure) and a failed
    trial's error, and the configuration of a trial whose start it was not told about.

    Args:
        callbacks: Objects with Ray's hooks (:class:`Callback` or Ray's own).
        experiment_dir: The experiment's folder (where its store is).
        trainable_name: For :attr:`TrialInfo.trial_name`.
        name_creator: ``TuneConfig.trial_name_creator``: called once with each trial's view when it is first
            seen (as Ray calls it when it creates a trial); its str names the trial.
        restore: Whether the run continues an experiment: the callbacks get their saved states at :meth:`setup`.
        tags: The run's ``result_extras`` that gives each trial's ``experiment_tag``: a trial's view has its tag
            from the start, as Ray's ``Trial``.
        names: What ``name_creator`` already returned for a trial (when its folder was named), so that it is
            called once per trial, as Ray calls it.

    Raises:
        ConfigError: If ``TUNE_GLOBAL_CHECKPOINT_S`` is neither ``auto`` nor a number of seconds.
    """

    def __init__(self, callbacks: list[Any], experiment_dir: str, trainable_name: str,
                 name_creator: Callable[[TrialInfo], str] | None = None, restore: bool = False,
                 tags: Tagger | None = None,
                 names: Mapping[str, Any] | None = None) -> None:
        self.callbacks = list(callbacks)
        # on_trial_start/_result/_complete: the callbacks (Ray's: before the trial's status and last_result are
        # updated), then the reporters (which Ray runs after its step: they see the trial updated)
        self._before_update = [c for c in self.callbacks if not isinstance(c, _AfterTheResult)]
        self._after_update = [c for c in self.callbacks if isinstance(c, _AfterTheResult)]
        self.tags = tags
        self.names = names if names is not None else {}
        self._folders: dict[str, str] = {}  # trial -> its folder, as the store last said
        self._seqs: dict[str, int] = {}  # trial -> its creation index, as the store last said
        self._stored_mark = 0  # the store's trials read into _folders and _seqs so far (trials_stored_after)
        self.experiment_dir = experiment_dir
        self.trainable_name = trainable_name
        self.request: Any = None  # the run's resource request, for the views' placement_group_factory (the Tuner's)
        self.name_creator = name_creator
        self.restore = restore
        self._saves = SavePeriod()  # (the first event saves, as Ray's first loop step does)
        self._session = datetime.datetime.now().strftime(DATE_FORMAT)  # sorts by time
        self.trials: dict[str, TrialInfo] = {}
        # ``list(self.trials.values())``, the ``trials`` each hook gets: one list for the run, a trial appended to it
        # as it is added and the list put in order in place, as Ray passes its controller's one list (a callback that
        # keeps it sees the trials added later; a list made for each hook call made a sweep's hooks quadratic)
        self._trials_list: list[TrialInfo] = []
        self.iteration = 0
        self._store: ExperimentStore | None = None
        self._stepping: dict[str, list[Any]] = {}  # step hook -> the callbacks that override it
        self._restoring: set[str] = set()  # trials whose attempt's first result is still to come
        self._checkpoint_requests: list[str] = []  # trials a callback set should_checkpoint for
        # trials whose end a callback's on_trial_complete raised in, for the engine (failed_ends)
        self._failed_ends: list[tuple[str, str, str, bytes | None]] = []
        # A continued experiment's failures so far, by trial (read once, at the first trial seen: see _info)
        self._earlier_failures: dict[str, int] | None = None
        self._run_ending: str | None = None  # why the run ends early, once it does (on_run_ending)
        self._placed: dict[str, tuple[str, int]] = {}  # trial -> where its starting attempt runs (on_trial_placed)
        self._unstarted: set[str] = set()  # trials made (on_trial_add) that have not started yet: PENDING

    def checkpoint_requests(self) -> list[str]:
        """The trials a Ray callback asked to checkpoint (``result["should_checkpoint"] = True``) since the last
        call; the engine has each saved at the iteration of the result the callback saw."""
        requests, self._checkpoint_requests = self._checkpoint_requests, []
        return requests

    # ------------------------------------------------------------------ Ray-side calls

    def _call(self, hook: str, callbacks: list[Any] | None = None, **kwargs: Any) -> None:
        for callback in self.callbacks if callbacks is None else callbacks:
            method = getattr(callback, hook, None)
            if callable(method):
                self._run(callback, hook, method, kwargs)

    @staticmethod
    def _run(callback: Any, hook: str, method: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
        """Call one callback's hook. Its exception ends the hook's round (the callbacks after it are not called for
        this event, as in Ray's ``CallbackList``) and is handled as Ray's controller handles it: a hook of
        :data:`RAISED_AS_TUNE_ERROR` raises a :class:`CallbackError` from it; one of :data:`CAUGHT` raises
        :class:`_HookFailed` for the adapter; any other hook's exception leaves as it is, with a note naming the
        callback and the hook."""
        try:
            method(**kwargs)
        except Exception as error:
            name, trial = _callback_name(callback), kwargs.get("trial")
            where = f"callback {name}.{hook}" + (f" (trial {trial})" if trial is not None else "")
            if hook in CAUGHT:
                raise _HookFailed(name, error, traceback.format_exc()) from error
            if hook in RAISED_AS_TUNE_ERROR:
                raise CallbackError(f"{where} raised {type(error).__name__}: {error}\n{traceback.format_exc()}",
                                    name, hook, None if trial is None else str(trial)) from error
            error.add_note(f"(raised by fluidsalus.tune's {where}; the run ends with it, as in Ray Tune)")
            raise

    def on_step_begin(self) -> None:
        """Call ``on_step_begin(iteration, trials)`` of the callbacks that override it."""
        self._call_step("on_step_begin")

    def on_step_end(self) -> None:
        """Call ``on_step_end(iteration, trials)`` of the callbacks that override it."""
        self._call_step("on_step_end")

    def _call_step(self, hook: str) -> None:
        stepping = self._stepping.get(hook)
        if stepping is None:  # found once: most callbacks keep the base class's no-op
            stepping = self._stepping[hook] = [c for c in self.callbacks if _overrides(c, hook)]
        if stepping:
            trials = self._listed()
            for callback in stepping:
                self._run(callback, hook, getattr(callback, hook), {"iteration": self.iteration, "trials": trials})

    def _listed(self) -> list[TrialInfo]:
        """Every trial's view, in order, as the hooks' ``trials`` (one list for the run, as Ray passes its
        controller's one list)."""
        return self._trials_list

    def _call_trial(self, hook: str, trial: TrialInfo, callbacks: list[Any] | None = None, **kwargs: Any) -> None:
        self._call(hook, callbacks, iteration=self.iteration, trials=self._listed(), trial=trial, **kwargs)

    def setup(self, stop: Any, num_samples: int, total_num_samples: int | None, **info: Any) -> None:
        """Call every callback's ``setup``.

        Args:
            stop: The run's stop rule (``RunConfig.stop``).
            num_samples: ``TuneConfig.num_samples`` (``sys.maxsize`` for -1, as Ray passes it).
            total_num_samples: Trials the search will run, when known.
            **info: More of Ray's keys (``time_budget_s``).
        """
        if self.restore:  # (the stored trials' views come after, from restore_trials: see its docstring)
            self.restore_states()
        self._call("setup", stop=stop, num_samples=num_samples, total_num_samples=total_num_samples, **info)

    def restore_trials(self) -> None:
        """A restored run's trials, read from the store once every callback's :meth:`setup` returned and the
        restore's flags changed the stored trials (:meth:`_views_of_stored_trials`). The setups come first, before
        the flags change anything: a setup that raises ends the restore with the experiment as it was, as Ray's
        (the flags had deleted a ``restart_errored`` trial's checkpoints and made it PENDING, and a later restore
        with ``resume_errored=True`` ran it from scratch; the views' read connection also kept the store's ``-wal``
        and ``-shm`` files beside it)."""
        if self.restore:
            self._views_of_stored_trials()

    def experiment_end(self) -> None:
        """Save the callbacks' states, call every callback's ``on_experiment_end`` and close the store."""
        try:
            try:
                self.save_states()
            except Exception:  # as Ray's final save: logged, and the run's end goes on
                logger.exception("Saving the callbacks' states failed")
            self._settle_views()
            self._call("on_experiment_end", trials=self._listed())
        finally:
            if self._store is not None:
                with contextlib.suppress(Exception):
                    self._store.close()
                self._store = None

    def _settle_views(self) -> None:
        """The trials as Ray's ``on_experiment_end`` sees them, after its clean-up: every trial of the experiment
        (also those that never started), and those that had not ended ``TERMINATED``: the run's early end (a time
        budget, ``stop_all()``, ``fail_fast``) ended them all, and Ray's clean-up after a Ctrl-C or an error stops
        every trial that has an actor (running, or pending: Ray requests their actors ahead); a trial paused off
        any device stays ``PAUSED`` then. The store keeps what a resume needs (a trial that ran stays ``RUNNING``
        there after a Ctrl-C)."""
        store = self._open_store()
        rows = {} if store is None else {row.trial_id: row for row in store.trials()}
        for trial_id, row in sorted(rows.items(), key=lambda item: item[1].seq):
            if trial_id not in self.trials:
                self._info(trial_id, row.config)
        if rows:  # (in the order the trials were made, as Ray's list)
            order = {trial_id: row.seq for trial_id, row in rows.items()}
            self.trials = dict(sorted(self.trials.items(), key=lambda item: order.get(item[0], len(order))))
            self._trials_list[:] = self.trials.values()  # (in place: the list a callback kept is put in order too)
        for trial_id, trial in self.trials.items():
            if trial.last_result is None:  # never started: Ray's Trial.last_result is {"trial_id": ...} then
                trial.last_result = {"trial_id": trial_id}
            if trial.is_finished():
                continue
            row = rows.get(trial_id)
            if row is not None and row.status == ERROR:
                trial.status = ERROR
            elif row is not None and row.status == PAUSED and self._run_ending is None:
                trial.status = PAUSED
            else:
                trial.status = TERMINATED

    # ------------------------------------------------------------------ callback states

    def save_states(self) -> bool:
        """Write every callback's ``get_state()`` to this session's state file, atomically.

        Returns:
            Whether a file was written: not when no callback has state, or before the experiment's folder exists.
        """
        states = {index: callback.get_state() for index, callback in enumerate(self.callbacks)
                  if callable(getattr(callback, "get_state", None))}
        if not any(states.values()) or not os.path.isdir(self.experiment_dir):
            return False
        started = time.monotonic()
        write_atomically(os.path.join(self.experiment_dir, STATE_FILE_PATTERN.format(self._session)),
                         cloudpickle.dumps(states))
        self._saves.saved(time.monotonic() - started)
        return True

    def _maybe_save_states(self) -> None:
        if self._saves.due():  # (also when nothing is written: asking costs a get_state per callback)
            self.save_states()

    def restore_states(self) -> bool:
        """Give each callback its state from the newest state file of the experiment, if there is one.

        Returns:
            Whether a state file was found.
        """
        paths = glob.glob(os.path.join(glob.escape(self.experiment_dir), STATE_FILE_PATTERN.format("*")))
        if not paths:
            return False
        with open(max(paths), "rb") as f:
            states = cloudpickle.load(f)
        for index, callback in enumerate(self.callbacks):
            state = states.get(index)
            if state and callable(getattr(callback, "set_state", None)):
                callback.set_state(state)
        return True

    # ------------------------------------------------------------------ the store (read-only)

    def _open_store(self) -> ExperimentStore | None:
        if self._store is None:
            if not os.path.exists(os.path.join(self.experiment_dir, DB_FILENAME)):
                return None
            self._store = ExperimentStore.open(self.experiment_dir, readonly=True)
        return self._store

    def _stored_trial(self, trial_id: str) -> Any:
        store = self._open_store()
        if store is None:
            return None
        return next(iter(store.trials(trial_id)), None)

    def _restart(self, trial_id: str, attempt: int) -> dict[str, Any] | None:
        """The store's ``trial_restart`` event of the trial's attempt ``attempt`` (reason, from_iteration), or
        None: the attempt is the first, or the first of a resumed experiment."""
        store = self._open_store()
        if store is None:
            return None
        for event in reversed(store.events(TRIAL_RESTART_EVENT, trial_id)):  # (this trial's: one read per restart)
            if (event.data or {}).get("attempt") == attempt:
                return dict(event.data or {})
        return None

    def _resumes_from_checkpoint(self, trial_id: str, attempt: int, restart: Mapping[str, Any] | None) -> bool:
        """Whether attempt ``attempt`` (started for ``restart``, its store event) starts from a checkpoint."""
        if attempt <= 0:
            return False
        if restart is not None:
            return int(restart.get("from_iteration") or 0) > 0
        return self._latest_checkpoint(trial_id) is not None  # a trial of a restored experiment: one on disk

    def _info(self, trial_id: str, config: Mapping[str, Any] | None = None) -> tuple[TrialInfo, bool]:
        """The trial's view, created the first time it is seen (with ``config``, else its stored one)."""
        info = self.trials.get(trial_id)
        if info is not None:
            return info, False
        if config is None:
            row = self._stored_trial(trial_id)
            config = row.config if row is not None else {}
        if trial_id not in self._folders and (store := self._open_store()) is not None:
            # the trials stored since the last read, this one among them, in one read: a batch made at once is read
            # once (a read per trial was 0.4 ms a trial: 2 s before a 5,000-trial sweep's first start), and a trial a
            # searcher makes as it goes alone (every trial's read at each start was quadratic: 1,000 trials, 15 of
            # 57 s). A trial's folder and index never change once it is stored.
            self._stored_mark, seqs, folders = store.trials_stored_after(self._stored_mark)
            self._folders.update(folders)
            self._seqs.update(seqs)
        path = self._folders.get(trial_id, os.path.join(self.experiment_dir, trial_id))
        info = TrialInfo(trial_id, dict(config), path=path, trainable_name=self.trainable_name, request=self.request)
        if self.restore:  # failures of the sessions before, as Ray's Trial keeps them (a resumed errored trial: 1)
            if self._earlier_failures is None:
                store = self._open_store()
                self._earlier_failures = {} if store is None else {
                    row.trial_id: row.num_failures + (row.status == ERROR) for row in store.trials()}
            info.num_failures = self._earlier_failures.get(trial_id, 0)
        if self.tags is not None and trial_id in self._seqs:
            info.tag = self.tags.tag_of(self._seqs[trial_id], info.config) or None
        if self.tags is not None:
            info.evaluated_params = self.tags.evaluated_params(info.config, self._seqs.get(trial_id))
        if self.name_creator is not None:
            name = self.names[trial_id] if trial_id in self.names else self.name_creator(info)
            if not isinstance(name, str):
                raise ConfigError(f"TuneConfig: trial_name_creator must return a str (got {type(name).__name__} "
                                  f"for trial {trial_id})")
            info.custom_trial_name = name
        self.trials[trial_id] = info
        self._trials_list.append(info)
        return info, True

    def _views_of_stored_trials(self) -> None:
        """A continued experiment's trials, as Ray's restored ``Trial`` objects: every stored trial is in ``trials``
        from the start (a finished one with its status), with its last stored result and latest checkpoint."""
        from fluidsalus.tune import Checkpoint  # the package imports this module

        store = self._open_store()
        if store is None:
            return
        for row in sorted(store.trials(), key=lambda row: row.seq):
            trial, _ = self._info(row.trial_id, row.config)
            trial.status = row.status if row.status in FINAL_STATUSES else PENDING
            if row.last_result:
                trial.last_result = with_config(row.last_result, trial.config)
            latest = self._latest_checkpoint(row.trial_id)
            if latest is not None:
                trial.checkpoint = Checkpoint(latest["path"])

    # ------------------------------------------------------------------ engine hooks

    def _start(self, trial: TrialInfo, attempt: int | None) -> None:
        # As in Ray, on_trial_start sees the trial still PENDING; it is RUNNING once the callbacks return
        trial.status, trial.attempt, trial.error = PENDING, attempt, None
        # ...and its folder is there (Ray makes it before it starts the trial's actor): Ray's own JsonLoggerCallback
        # writes params.json in on_trial_start before it makes the folder. The device makes it as the trial starts,
        # which the start told to the driver can precede. One that cannot be made is left to the callbacks
        with contextlib.suppress(OSError):
            trial.init_local_path()
        self._unstarted.discard(trial.trial_id)
        if trial.last_result is None:  # Ray's trial starts with a result of its id, when and its config
            now = time.time()
            trial.last_result = {"trial_id": trial.trial_id, "date": datetime.datetime.fromtimestamp(now).strftime(
                DATE_FORMAT), "timestamp": int(now), "config": dict(trial.config)}
        self._restoring.add(trial.trial_id)
        self.iteration += 1
        self._call_trial("on_trial_start", trial, self._before_update)
        trial.status = RUNNING
        self._call_trial("on_trial_start", trial, self._after_update)  # (a reporter, after Ray's step)

    def on_trial_placed(self, trial_id: str, node_ip: str, pid: int) -> None:
        self._placed[trial_id] = (node_ip, pid)

    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """A trial the search made: its view is in ``trials`` from now on, ``PENDING`` until it starts, as Ray lists
        every trial it made (a grid's, HyperBand's brackets: ``4/4 (4 PENDING)``; only the started ones, ``1/4 (1
        RUNNING)``, until h242). No hook is called, as in Ray."""
        trial, new = self._info(trial_id, config)
        if new:
            trial.status = PENDING
            self._unstarted.add(trial_id)

    def on_trial_status(self, trial_id: str, status: str) -> None:
        """A started trial was paused (``PAUSED``: at its searcher's rung, as Ray's HyperBand pauses it) or goes on
        (``RUNNING`` in place, or ``PENDING`` until its next attempt starts): its view says so, as Ray's ``Trial``;
        no hook is called, as in Ray (its step hooks and the reporter see it). It said ``RUNNING`` until h242."""
        trial = self.trials.get(trial_id)
        if trial is not None and not trial.is_finished() and trial_id not in self._unstarted:
            trial.status = status

    def on_trial_start(self, trial_id: str, config: Mapping[str, Any], attempt: int) -> None:
        trial, new = self._info(trial_id, config)
        trial.config = dict(config)
        placed = self._placed.pop(trial_id, None)
        restart = self._restart(trial_id, attempt) if attempt > 0 else None
        if not new and not trial.is_finished() and (restart or {}).get("reason") == _RETRY_REASON:
            trial.num_failures += 1
            trial.status = PENDING
            self.iteration += 1
            self._call_trial("on_trial_recover", trial)  # (where the failed attempt ran, as Ray's at the failure)
        trial.location = placed  # (as Ray's trial has it once its actor runs)
        if (restart or {}).get("reason") == RESTART_EXPLOIT:
            self._take_exploited_checkpoint(trial)
        self._start(trial, attempt)
        self._restoring.discard(trial_id)
        if self._resumes_from_checkpoint(trial_id, attempt, restart):
            self._call_trial("on_trial_restore", trial)
        self._maybe_save_states()

    def _take_exploited_checkpoint(self, trial: TrialInfo) -> None:
        """A PBT exploit's attempt starts from the copy of the source's checkpoint, which the engine lists as the
        trial's latest: the view's ``checkpoint`` is that copy, as Ray's exploit makes the source's checkpoint the
        trial's latest before its restart's hooks. It stayed the trial's own checkpoint from before the exploit, whose
        state the attempt did not resume from, and which ``num_to_keep`` may have deleted already (h260). Its
        ``last_result`` is that checkpoint's result (with the trial's id and new config), as Ray's restore makes it
        (``Trial.on_restore``) and as the engine's trial has it (``Executor._requeue``)."""
        from fluidsalus.tune import Checkpoint  # the package imports this module

        latest = self._latest_checkpoint(trial.trial_id)
        if latest is not None:
            trial.checkpoint = Checkpoint(latest["path"])
            if latest["metrics"]:
                trial.last_result = with_config({**latest["metrics"], "trial_id": trial.trial_id}, trial.config)

    def _latest_checkpoint(self, trial_id: str) -> dict[str, Any] | None:
        """The store's row of the trial's latest listed checkpoint whose folder is on disk, or None."""
        store = self._open_store()
        if store is None:
            return None
        on_disk = [c for c in store.checkpoints(trial_id) if os.path.isdir(c["path"])]
        return on_disk[-1] if on_disk else None

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        trial, new = self._info(trial_id)
        if new or trial_id in self._unstarted:  # the engine did not tell of its start: it started with this result
            self._start(trial, None)
        full = with_config(result, trial.config)
        if trial_id in self._restoring:  # started without the engine's start hook: judge from the result
            self._restoring.discard(trial_id)
            since, total = result.get(_RESTART_KEY), result.get(_ITERATION_KEY)
            if isinstance(since, int) and isinstance(total, int) and total > since:
                self._call_trial("on_trial_restore", trial)  # this attempt went on from a checkpoint
        trial.status = RUNNING
        self.iteration += 1
        # As in Ray, the callbacks see the trial's previous last_result (a callback compares the two); a progress
        # reporter (which Ray runs after the step) sees the trial with this result
        self._call_trial("on_trial_result", trial, self._before_update, result=full)
        trial.last_result = full
        self._call_trial("on_trial_result", trial, self._after_update, result=full)
        if full.get(SHOULD_CHECKPOINT):  # Ray lets callbacks ask for a checkpoint by setting this in the result
            self._checkpoint_requests.append(trial_id)
        folder = result.get(_CHECKPOINT_KEY)
        if isinstance(folder, str) and folder:
            self._saved(trial, folder)
        self._maybe_save_states()

    def on_trial_checkpoint(self, trial_id: str, iteration: int, checkpoint_dir_name: str) -> None:
        """A class ``Trainable`` saved the iteration a callback asked for (``should_checkpoint``), right after its
        result: ``on_checkpoint`` then ``on_trial_save``, as Ray calls them once its save is done."""
        trial, _ = self._info(trial_id)
        self._saved(trial, checkpoint_dir_name)
        self._maybe_save_states()

    def _saved(self, trial: TrialInfo, folder: str) -> None:
        from fluidsalus.tune import Checkpoint  # the package imports this module

        checkpoint = Checkpoint(os.path.join(trial.path, folder))
        # (as in Ray: trial.checkpoint is the previous one in on_checkpoint, and this one in on_trial_save)
        try:
            self._call_trial("on_checkpoint", trial, checkpoint=checkpoint)
        except _HookFailed as failed:
            # As Ray's controller: logged, and the run goes on (on_trial_save is called all the same); the checkpoint
            # is stored before the callbacks hear of it, so it stays the trial's (Ray's trial forgets it)
            logger.warning(CHECKPOINT_HOOK_WARNING)
            logger.error("Trial %s: Error handling checkpoint %s: callback %s.on_checkpoint raised (the checkpoint is "
                         "kept and the run goes on, as in Ray Tune):\n%s", trial, checkpoint.path, failed.name,
                         failed.trace)
        trial.checkpoint = checkpoint
        self._call_trial("on_trial_save", trial)

    def on_run_ending(self, reason: str) -> None:
        """The run ends early (its time budget, ``stop_all()``, ``fail_fast``). Ray's controller then sets every
        unfinished trial ``TERMINATED`` without a trial-end hook, so its own loggers never end those trials'
        records (W&B's runs stay open and ``on_experiment_end`` waits ``upload_timeout`` for them, MLflow's stay
        ``RUNNING``, TensorBoard writes no HParams). Here the trials it stops on a device get
        ``on_trial_complete`` (and ``log_trial_end``), as every trial that ends does, which also keeps the hook of
        a trial whose own stop was decided just before the run's end (Ray calls it there); but a callback raising
        in it is only logged, the trial stays ``TERMINATED`` (Ray calls no hook that could fail it), and
        ``on_experiment_end`` sees every such trial ``TERMINATED``."""
        self._run_ending = reason

    def on_trial_complete(self, trial_id: str, status: str, result: Mapping[str, Any] | None) -> None:
        trial, _ = self._info(trial_id)
        self._restoring.discard(trial_id)
        self._unstarted.discard(trial_id)
        if result is not None:
            trial.last_result = with_config(result, trial.config)
        self.iteration += 1
        if status == ERROR:
            trial.status = status
            trial.num_failures += 1
            row = self._stored_trial(trial_id)
            trial.error = row.error if row is not None else None
            self._call_trial("on_trial_error", trial)
        else:
            # As in Ray: its last result says done, and on_trial_complete sees the status it had (RUNNING, or
            # PENDING for a trial ended before it started, whose last_result is Ray's {"trial_id": ...}: it was
            # None, and a callback reading trial.last_result raised; a trial that started has one from _start,
            # so a view with none is one that never started); it is TERMINATED once the callbacks return
            if trial.last_result is None:
                trial.status, trial.last_result = PENDING, {"trial_id": trial_id}
            else:
                trial.last_result = {**trial.last_result, DONE: True}
            try:
                self._call_trial("on_trial_complete", trial, self._before_update)
                trial.status = status
                self._call_trial("on_trial_complete", trial, self._after_update)
            except _HookFailed as failed:
                if self._run_ending is None:
                    self._end_failed(trial, failed)
                else:  # the run's end stopped it, or it ended within that end's grace: see on_run_ending
                    trial.status = TERMINATED
                    logger.error("Trial %s: callback %s.on_trial_complete raised at the run's end (%s); the trial "
                                 "stays TERMINATED:\n%s", trial, failed.name, self._run_ending, failed.trace)
        self._maybe_save_states()

    def _end_failed(self, trial: TrialInfo, failed: _HookFailed) -> None:
        """A callback's ``on_trial_complete`` raised: as Ray's ``stop_trial``, log it and fail the trial (it is
        ``ERROR``, the callbacks get ``on_trial_error``); the engine records the error (:meth:`failed_ends`) and
        keeps the trial's results and checkpoints. (Ray retries such a trial where ``max_failures`` allows, running
        the finished trial again from its last checkpoint; here it ends ``ERROR``.)"""
        logger.error("Trial %s: Error stopping trial: callback %s.on_trial_complete raised; the trial ends ERROR, its "
                     "results and checkpoints kept, and the run goes on (as in Ray Tune):\n%s", trial, failed.name,
                     failed.trace)
        error = failed.error
        text = f"{type(error).__name__}: {error}"
        trace = (f"callback {failed.name}.on_trial_complete raised at the trial's end (its results and checkpoints "
                 f"are kept):\n{failed.trace}")
        self._failed_ends.append((trial.trial_id, text, trace, pickle_exception(error)))
        trial.status, trial.error = ERROR, text
        trial.num_failures += 1
        self.iteration += 1
        self._call_trial("on_trial_error", trial)

    def failed_ends(self) -> list[tuple[str, str, str, bytes | None]]:
        """The trials whose ``on_trial_complete`` a callback raised in since the last call, each as ``(trial_id,
        error text, traceback, pickled exception)``: the engine records them as ``ERROR``."""
        failed, self._failed_ends = self._failed_ends, []
        return failed
