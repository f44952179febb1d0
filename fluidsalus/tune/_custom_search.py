"""A search algorithm of the user's own (a subclass of Ray Tune's ``Searcher``), run as a fluidsalus searcher.

Ray Tune lets a script implement its own search algorithm: a ``Searcher`` subclass with ``suggest(trial_id)``,
which returns a configuration, None ("not now, ask again later") or ``Searcher.FINISHED``, and
``on_trial_complete(trial_id, result, error)`` (plus, optionally, ``on_trial_result``, ``set_search_properties``,
``set_max_concurrency`` and ``save``/``restore``). Ray wraps it in a ``SearchGenerator``, which asks for one trial
at a time while resources are free. :class:`CustomSearch` does that job for the fluidsalus engine,
:class:`CustomASHA` with Ray's ``AsyncHyperBandScheduler`` on top (ASHA decides on the trials the searcher makes),
and :class:`CustomHyperBand` with Ray's ``HyperBandScheduler`` (the searcher's trials fill HyperBand's brackets):

- It asks ``suggest`` for new trials while fewer than ``max_concurrent`` of its trials are unfinished and
  ``num_samples`` are not all made (``num_samples=-1``: until ``FINISHED``, the time budget or a stopper). A
  None stops the asking until the engine's next pass; ``FINISHED`` ends it for good. Under HyperBand it is asked
  for each new bracket's trials, capped only by a ``ConcurrencyLimiter`` or ``max_concurrent_trials`` (trials
  paused at a rung wait there, unfinished, for the rest of it).
- Each suggestion is merged into ``param_space`` (its constants; a domain the suggestion leaves unresolved is a
  ``ConfigError``), as Ray merges it.
- The searcher sees its own trial ids: the id it was asked with is the one its results and completion come
  back under (``result["trial_id"]`` too), although the engine names the trial otherwise.
- Results go to ``on_trial_result`` and the end of each trial to ``on_trial_complete(trial_id, result=last
  result, error=...)``, also when ASHA stopped it. The searcher itself never stops a trial (Ray's rule).
- State: the ids and counts are in :meth:`CustomSearch.state_dict`; the searcher itself is saved with its
  ``save(path)`` into Ray's ``searcher-state-<session>.pkl`` in the experiment folder whenever a trial was
  suggested or completed since the last save (a searcher without ``save`` is not saved, as in Ray, with one
  warning), and a resumed run gives the newest file to its ``restore(path)``.
"""

from __future__ import annotations

import copy
import glob
import logging
import os
from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import BaseSearcher, Decision
from fluidsalus.searchers._base import check_saved_state
from fluidsalus.searchers._optuna import DEFAULT_BATCH_SIZE
from fluidsalus.trialgroup.trial import TrialGroup
from fluidsalus.tune._streamed import StreamedASHA, StreamedHyperBand

__all__ = ["FINISHED", "STATE_FILE_PATTERN", "CustomASHA", "CustomHyperBand", "CustomSearch", "SuggestStream",
           "defined_by_user", "is_custom_searcher", "newest_state_file", "runner_of", "save_searcher"]

logger = logging.getLogger(__name__)

#: What ``suggest`` returns when the search is over (Ray's ``Searcher.FINISHED``).
FINISHED = "FINISHED"
#: Ray's file name of a saved searcher in the experiment folder, by session.
STATE_FILE_PATTERN = "searcher-state-{}.pkl"
#: Prefix of the trial ids the searcher is asked with (the engine names its trials itself).
_ID_PREFIX = "suggest_"
_GROUP_PREFIX = "custom"
_OWNER = "CustomSearch"
#: What ASHA's and HyperBand's own space checks see when ``param_space`` is empty (see :class:`CustomASHA`).
_PLACEHOLDER_SPACE = {"_": 0}


def defined_by_user(obj: Any, name: str) -> bool:
    """Whether the method ``name`` that ``obj`` has comes from a class outside Ray and fluidsalus (the user's)."""
    for cls in type(obj).__mro__:
        if name in cls.__dict__:
            return not cls.__module__.startswith(("ray.", "fluidsalus."))
    return False


def is_custom_searcher(search_alg: Any) -> bool:
    """Whether ``search_alg`` runs here through its own ``suggest``: a search algorithm of the user's own that
    implements it (the holders ``OptunaSearch`` and ``TuneBOHB``, and Ray's classes, do not), or a fluidsalus one
    built that way (``NevergradSearch`` and ``ZOOptSearch``: their base, ``_own_suggest.OwnSuggestSearcher``, sets
    ``RUNS_ITS_OWN_SUGGEST``)."""
    return defined_by_user(search_alg, "suggest") or getattr(type(search_alg), "RUNS_ITS_OWN_SUGGEST", False) is True


def save_searcher(searcher: Any, folder: str, session: str) -> bool:
    """``searcher.save(path)`` into Ray's ``searcher-state-<session>.pkl`` in ``folder``, whole or not at all
    (written under a staging name, then renamed over the last one).

    Returns:
        False when the searcher has no ``save`` (or it raises NotImplementedError): nothing was written.
    """
    save = getattr(searcher, "save", None)
    if save is None:
        return False
    path = os.path.join(folder, STATE_FILE_PATTERN.format(session))
    staging = os.path.join(folder, f".{os.path.basename(path)}.partial")
    try:
        save(staging)
    except NotImplementedError:
        return False
    if os.path.exists(staging):
        os.replace(staging, path)
    return True


def newest_state_file(folder: str) -> str | None:
    """The newest ``searcher-state-*.pkl`` in ``folder`` (Ray's rule: the last by name), or None."""
    saved = sorted(glob.glob(os.path.join(glob.escape(folder), STATE_FILE_PATTERN.format("*"))))
    return saved[-1] if saved else None


def _merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``update``, nested dicts merged key by key (Ray's ``merge_dicts``)."""
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(merged.get(key), dict) and isinstance(value, Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _unresolved(config: Mapping[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """Paths of the domains and grid searches left in ``config``."""
    found = []
    for key, value in config.items():
        here = (*path, str(key))
        if isinstance(value, sp.Domain) or (isinstance(value, Mapping) and set(value) == {sp.GRID_SEARCH_KEY}):
            found.append(sp.PATH_SEPARATOR.join(here))
        elif isinstance(value, Mapping):
            found.extend(_unresolved(value, here))
    return found


def check_samples(num_samples: Any, max_concurrent: Any) -> int:
    """The cap on unfinished trials: ``max_concurrent``, or :data:`DEFAULT_BATCH_SIZE` (Optuna's batch, so a
    model-based searcher learns from most trials) when None.

    Raises:
        ConfigError: ``num_samples`` or ``max_concurrent`` out of range.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or (
            num_samples < 1 and num_samples != sp.INFINITE_SAMPLES):
        raise ConfigError(f"{_OWNER}: num_samples must be an int >= 1, or {sp.INFINITE_SAMPLES} to search until "
                          f"the searcher returns FINISHED or the run is stopped (got {num_samples!r})")
    if max_concurrent is None:
        return DEFAULT_BATCH_SIZE
    if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
        raise ConfigError(f"{_OWNER}: max_concurrent must be None or an int >= 1 (got {max_concurrent!r})")
    return max_concurrent


class SuggestStream:
    """The searcher's ``suggest`` as a stream of configurations (the interface of ``VariantStream``).

    The ``n``-th configuration drawn (from 0) is suggested for the searcher's trial id :meth:`id_of` ``(n)``.

    Args:
        searcher: The user's search algorithm.
        space: ``param_space``, which each suggestion is merged into.
        num_samples: How many to draw at most (-1: no limit).
    """

    def __init__(self, searcher: Any, space: Mapping[str, Any], num_samples: int) -> None:
        self.searcher, self.space, self.num_samples = searcher, dict(space), num_samples
        self.drawn = 0  # configurations handed out
        self.finished = False  # suggest() returned FINISHED

    @staticmethod
    def id_of(index: int) -> str:
        """The searcher's trial id of the ``index``-th configuration."""
        return f"{_ID_PREFIX}{index:05d}"

    def has_more(self) -> bool:
        """Whether the searcher may be asked for another configuration."""
        return not self.finished and (self.num_samples == sp.INFINITE_SAMPLES or self.drawn < self.num_samples)

    def take(self, count: int | None) -> list[dict[str, Any]]:
        """Ask ``suggest`` up to ``count`` times (None: up to ``num_samples``), stopping at None or FINISHED.

        Raises:
            ConfigError: A suggestion that is not a dict, or that leaves a domain of ``param_space`` unresolved.
        """
        if count is None and self.num_samples == sp.INFINITE_SAMPLES:
            raise ConfigError(f"{_OWNER}: an endless search is asked for a number of configurations at a time")
        configs: list[dict[str, Any]] = []
        while self.has_more() and (count is None or len(configs) < count):
            searcher_id = self.id_of(self.drawn)
            suggestion = self.searcher.suggest(searcher_id)
            if suggestion is None:  # not now: asked again at the engine's next pass
                break
            if isinstance(suggestion, str) and suggestion == FINISHED:
                self.finished = True
                break
            name = type(self.searcher).__name__
            if not isinstance(suggestion, Mapping):
                raise ConfigError(f"{name}.suggest({searcher_id!r}) returned {type(suggestion).__name__}; it must "
                                  "return a dict, None or Searcher.FINISHED")
            config = _merge(self.space, suggestion)
            left = _unresolved(config)
            if left:
                raise ConfigError(f"{name}.suggest({searcher_id!r}) left param_space's {', '.join(left)} unresolved; "
                                  "suggest a value for each, or make them constants in param_space")
            configs.append(config)
            self.drawn += 1
        return configs

    def restore(self, drawn: int) -> None:
        """A resumed run: ``drawn`` configurations were handed out (the searcher restores its own state)."""
        self.drawn = drawn


class _Told:
    """What both searchers share: the searcher's ids of the engine's trials, what it is told, and its saves.

    Attributes:
        searcher: The user's search algorithm.
    """

    searcher: Any
    #: Its ``suggest`` may return ``FINISHED``: an endless search may end by itself.
    ends_itself = True
    #: The user's searcher is told of results and ends: user code, so its state is saved after every batch.
    replayable = False
    #: Ray's ``ConcurrencyLimiter(batch=True)``: ``suggest`` is not asked again until every trial it made has ended
    #: (Ray also holds back the searcher's ``on_trial_complete`` calls until then; here each comes when its trial
    #: ends, which a searcher that is not asked meanwhile cannot tell apart).
    wait_for_batch = False

    def _config_stream(self) -> Any:
        raise NotImplementedError

    def _batch_running(self) -> bool:
        """Whether a batch is still running: with :attr:`wait_for_batch`, some trial made has not ended."""
        return self.wait_for_batch and self._config_stream().drawn > len(self._done)

    def _start_telling(self, searcher: Any) -> None:
        self.searcher = searcher
        self.experiment_dir: str | None = None
        self._session = ""  # names this run's state file (set with the experiment folder)
        self._ids: dict[str, str] = {}  # engine trial id -> the searcher's id
        self._done: set[str] = set()  # engine trial ids whose end the searcher was told
        self._saved_at = -1  # (trials made + trials ended) when the searcher was last saved
        self._save_unsupported = False

    def attach(self, experiment_dir: str, session: str) -> None:
        """Save the searcher in ``experiment_dir`` under ``session``'s file, and restore it from the newest file
        there (a resumed run's).

        Args:
            experiment_dir: The experiment folder.
            session: This run's session name (a timestamp).
        """
        self.experiment_dir, self._session = experiment_dir, session
        saved = newest_state_file(experiment_dir)
        if saved is not None and hasattr(self.searcher, "restore"):
            try:
                self.searcher.restore(saved)
            except NotImplementedError:
                logger.warning("%s has no restore(); the resumed search starts from its state when the run began",
                               type(self.searcher).__name__)

    def _seen(self, trial_id: str, result: Mapping[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        own = self._ids[trial_id]
        return own, None if result is None else {**result, "trial_id": own}

    def _tell_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        handler = getattr(self.searcher, "on_trial_result", None)
        if handler is not None and trial_id in self._ids and trial_id not in self._done:
            handler(*self._seen(trial_id, result))

    def _tell_end(self, trial_id: str, result: Mapping[str, Any] | None, error: bool) -> None:
        if trial_id not in self._ids or trial_id in self._done:
            return
        self._done.add(trial_id)
        own, seen = self._seen(trial_id, result)
        # (an errored trial's end brings no result, as Ray's controller calls it: a searcher that learns from any
        # result it is given learnt the failed trial's partial value)
        self.searcher.on_trial_complete(own, result=None if error else seen, error=error)

    def _save(self, made: int) -> None:
        """Save the searcher with its ``save(path)`` when a trial was made or ended since the last save."""
        changes = made + len(self._done)
        if self.experiment_dir is None or self._save_unsupported or changes == self._saved_at:
            return
        if not save_searcher(self.searcher, self.experiment_dir, self._session):
            self._save_unsupported = True
            logger.warning("%s has no save(); a resumed run starts the search from its state when the run began, "
                           "as in Ray", type(self.searcher).__name__)
            return
        self._saved_at = changes

    def _told_state(self) -> dict[str, Any]:
        return {"ids": dict(self._ids), "done": sorted(self._done)}

    def _load_told_state(self, state: Mapping[str, Any]) -> None:
        self._ids = {str(k): str(v) for k, v in dict(state.get("ids", {})).items()}
        self._done = {str(t) for t in state.get("done", [])}


def runner_of(searcher: Any) -> _Told | None:
    """The runner of a search algorithm with a ``suggest`` of its own in ``searcher``: itself, or under the
    ``inner`` of wrappers (a ``RepeatSearcher``, the median stopping rule); None if there is none.

    The Tuner attaches it to the experiment folder, where it saves the search algorithm and restores it from.
    """
    while searcher is not None:
        if isinstance(searcher, _Told):
            return searcher
        searcher = getattr(searcher, "inner", None)
    return None


#: The fields of :class:`CustomSearch`'s state as its first version saved it (commit 7861b62, 2026-11-26: its
#: own trial counter ``suggested`` and the searcher's ids not yet given a trial, by group, ``unassigned``).
_FIRST_FORMAT = ("suggested", "finished", "ids", "done", "unassigned")


def _from_first_format(state: Any) -> Any:
    """A :class:`CustomSearch` state of the first format (:data:`_FIRST_FORMAT`) in today's: ``suggested`` is
    what was ``drawn``, and the trials the engine named (``added``) are those drawn less the ones still
    ``unassigned``, as both versions name them in the order they were drawn; ``finished``, ``ids`` and ``done``
    are the same. Any other state is returned as it is. (Read from 171ddaa on as a search that had drawn
    nothing, so a resumed run asked the searcher for every trial again; then refused as not a CustomSearch's.)"""
    if not isinstance(state, Mapping) or "drawn" in state or "suggested" not in state \
            or not set(state) <= set(_FIRST_FORMAT):
        return state
    drawn = int(state["suggested"])
    unassigned = sum(len(ids) for ids in dict(state.get("unassigned") or {}).values())
    return {"drawn": drawn, "finished": bool(state.get("finished", False)), "added": max(drawn - unassigned, 0),
            "ids": dict(state.get("ids") or {}), "done": list(state.get("done") or [])}


class CustomSearch(_Told, BaseSearcher):
    """Runs a Ray-style ``Searcher`` of the user's own with no scheduler (see the module docstring).

    Args:
        searcher: The object with ``suggest(trial_id)`` and ``on_trial_complete(trial_id, result, error)``.
        space: ``param_space``: its values are the base each suggestion is merged into.
        num_samples: Trials to make (>= 1), or -1 until the searcher returns ``FINISHED`` or the run is stopped.
        max_concurrent: Trials made and not yet ended at any time (None: :data:`DEFAULT_BATCH_SIZE`).

    Raises:
        ConfigError: ``num_samples`` or ``max_concurrent`` out of range.
    """

    def __init__(self, searcher: Any, space: Mapping[str, Any], num_samples: int,
                 max_concurrent: int | None = None) -> None:
        self.max_concurrent = check_samples(num_samples, max_concurrent)
        self.space, self.num_samples = dict(space), num_samples
        self._start_telling(searcher)
        self._stream = SuggestStream(searcher, space, num_samples)
        self._added = 0  # trials the engine has named (in the order they were made)

    def next_groups(self) -> list[TrialGroup]:
        """Ask the searcher for as many trials as the cap on unfinished trials and ``num_samples`` allow.

        Returns:
            At most one TrialGroup of fresh trials (no budget: they run to their end).
        """
        if self._batch_running():
            return []
        configs = self._stream.take(self.max_concurrent - (self._stream.drawn - len(self._done)))
        if not configs:
            return []
        return [TrialGroup(group_id=f"{_GROUP_PREFIX}-{self._stream.drawn - len(configs)}", configs=configs)]

    def _config_stream(self) -> Any:
        return self._stream

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        if group_id.startswith(f"{_GROUP_PREFIX}-"):
            self._ids[trial_id] = SuggestStream.id_of(self._added)
            self._added += 1

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._tell_result(trial_id, result)
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        self._tell_end(trial_id, result, error)

    def is_finished(self) -> bool:
        return not self._stream.has_more()

    def state_dict(self) -> dict[str, Any]:
        self._save(self._stream.drawn)
        return {"drawn": self._stream.drawn, "finished": self._stream.finished, "added": self._added,
                **self._told_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        state = _from_first_format(state)
        check_saved_state(state, type(self).__name__, required=("drawn",))  # (every CustomSearch state has it)
        self._stream.restore(int(state["drawn"]))
        self._stream.finished = bool(state.get("finished", False))
        self._added = int(state.get("added", 0))
        self._load_told_state(state)


class _UnderScheduler(_Told):
    """What :class:`CustomASHA` and :class:`CustomHyperBand` add to their scheduler: the searcher's suggestions
    as its configurations, and the searcher told of each result and end, and saved with the state."""

    def __init__(self, searcher: Any, space: Mapping[str, Any], num_samples: int, metric: str, mode: str,
                 **kwargs: Any) -> None:
        self._start_telling(searcher)
        # The scheduler refuses an empty space, which it would draw from; here the searcher draws, and param_space
        # may be empty (the searcher has its own space), so the scheduler checks a placeholder and gets
        # param_space after.
        super().__init__(space or _PLACEHOLDER_SPACE, num_samples, metric, mode, **kwargs)  # type: ignore[call-arg]
        self.space = dict(space)

    def _config_stream(self) -> Any:
        if self._stream is None:
            self._stream = SuggestStream(self.searcher, self.space, self.num_samples)
        return self._stream

    def _draw_configs(self, count: int | None) -> list[dict[str, Any]]:
        if self._batch_running():
            return []
        return super()._draw_configs(count)  # type: ignore[misc]

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._tell_result(trial_id, result)
        return super().on_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        super().on_trial_complete(trial_id, result, error)
        self._tell_end(trial_id, result, error)

    def state_dict(self) -> dict[str, Any]:
        stream = self._config_stream()
        self._save(stream.drawn)
        return {**super().state_dict(), "custom_finished": stream.finished, **self._told_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._config_stream().finished = bool(state.get("custom_finished", False))
        self._load_told_state(state)


class CustomASHA(_UnderScheduler, StreamedASHA):
    """:class:`~fluidsalus.searchers.ASHA` deciding on the trials a user's ``Searcher`` makes (Ray's
    ``search_alg=MySearcher(), scheduler=AsyncHyperBandScheduler(...)``).

    Args:
        searcher: The user's search algorithm.
        space: ``param_space``.
        num_samples: Trials to make (>= 1), or -1.
        metric: The result key ASHA decides on.
        mode: ``"min"`` or ``"max"``.
        max_concurrent: Trials made and not yet ended at any time (None: :data:`DEFAULT_BATCH_SIZE`).
        **kwargs: ASHA's other arguments (``time_attr``, ``max_t``, ``grace_period``, ...).
    """

    def __init__(self, searcher: Any, space: Mapping[str, Any], num_samples: int, metric: str, mode: str,
                 max_concurrent: int | None = None, **kwargs: Any) -> None:
        cap = check_samples(num_samples, max_concurrent)
        super().__init__(searcher, space, num_samples, metric, mode, max_concurrent=cap, **kwargs)

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, group_id, config)
        index = self.creation_index(trial_id)
        if index is not None:
            self._ids[trial_id] = SuggestStream.id_of(index)


class CustomHyperBand(_UnderScheduler, StreamedHyperBand):
    """:class:`~fluidsalus.searchers.HyperBand` whose brackets hold the trials a user's ``Searcher`` makes (Ray's
    ``search_alg=MySearcher(), scheduler=HyperBandScheduler(...)``).

    Each new bracket asks ``suggest`` for its first rung's trials. A bracket that gets fewer (a None, ``FINISHED``,
    the cap or ``num_samples``) runs with the trials it got and halves its actual size, as HyperBand's partial
    brackets do. The searcher is told a trial's end when HyperBand stops it or it ends itself; a trial paused at a
    rung is still unfinished, as in Ray.

    Args:
        searcher: The user's search algorithm.
        space: ``param_space``.
        num_samples: Trials to make (>= 1), or -1.
        metric: The result key HyperBand decides on.
        mode: ``"min"`` or ``"max"``.
        max_concurrent: Trials made and not yet ended at any time (a ``ConcurrencyLimiter`` or
            ``max_concurrent_trials``); None: no cap, so each bracket gets its full size, as under Ray, where a
            paused trial frees its resources for the next.
        **kwargs: HyperBand's other arguments (``time_attr``, ``max_t``, ``reduction_factor``, ...).
    """

    def __init__(self, searcher: Any, space: Mapping[str, Any], num_samples: int, metric: str, mode: str,
                 max_concurrent: int | None = None, **kwargs: Any) -> None:
        check_samples(num_samples, max_concurrent)
        super().__init__(searcher, space, num_samples, metric, mode, **kwargs)
        self.max_concurrent = max_concurrent
        self._unnamed: list[int] = []  # draw indices of configurations handed out and not yet added as trials

    def _draw_configs(self, count: int | None) -> list[dict[str, Any]]:
        stream = self._config_stream()
        if self._batch_running() or count is None:
            return []
        if self.max_concurrent is not None:
            count = min(count, self.max_concurrent - (stream.drawn - len(self._done)))
        if count <= 0:
            return []
        first = stream.drawn
        configs = stream.take(count)
        self._unnamed.extend(range(first, stream.drawn))
        return configs

    def _on_new_trial(self, trial_id: str, config: Mapping[str, Any]) -> None:
        if self._unnamed:
            self._ids[trial_id] = SuggestStream.id_of(self._unnamed.pop(0))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "unnamed": list(self._unnamed)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._unnamed = [int(i) for i in state.get("unnamed", [])]
