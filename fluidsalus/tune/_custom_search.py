"""A search algorithm of the user's own (a subclass of Ray Tune's ``Searcher``), run as a fluidsalus searcher.

Ray Tune lets a script implement its own search algorithm: a ``Searcher`` subclass with ``suggest(trial_id)``,
which returns a configuration, None ("not now, ask again later") or ``Searcher.FINISHED``, and
``on_trial_complete(trial_id, result, error)`` (plus, optionally, ``on_trial_result``, ``set_search_properties``,
``set_max_concurrency`` and ``save``/``restore``). Ray wraps it in a ``SearchGenerator``, which asks for one trial
at a time while resources are free. :class:`CustomSearch` does that job for the fluidsalus engine:

- It asks ``suggest`` for new trials while fewer than ``max_concurrent`` of its trials are in flight and
  ``num_samples`` are not all made (``num_samples=-1``: until ``FINISHED``, the time budget or a stopper). A
  None stops the asking until the engine's next pass; ``FINISHED`` ends it for good.
- Each suggestion is merged into ``param_space`` (its constants; a domain the suggestion leaves unresolved is a
  ``ConfigError``), as Ray merges it.
- The searcher sees its own trial ids: the id it was asked with is the one its results and completion come
  back under (``result["trial_id"]`` too), although the engine names the trial otherwise.
- Results go to ``on_trial_result`` and the end of each trial to ``on_trial_complete(trial_id, result=last
  result, error=...)``. The searcher never stops a trial: with no scheduler, nothing does (Ray's rule).
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
from collections import deque
from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import BaseSearcher, Decision
from fluidsalus.searchers._optuna import DEFAULT_BATCH_SIZE
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["FINISHED", "STATE_FILE_PATTERN", "CustomSearch", "is_custom_searcher"]

logger = logging.getLogger(__name__)

#: What ``suggest`` returns when the search is over (Ray's ``Searcher.FINISHED``).
FINISHED = "FINISHED"
#: Ray's file name of a saved searcher in the experiment folder, by session.
STATE_FILE_PATTERN = "searcher-state-{}.pkl"
#: Prefix of the trial ids the searcher is asked with (the engine names its trials itself).
_ID_PREFIX = "suggest_"
_GROUP_PREFIX = "custom"


def is_custom_searcher(search_alg: Any) -> bool:
    """Whether ``search_alg`` is a search algorithm of the user's own: the ``suggest`` it has comes from a class
    outside Ray and fluidsalus (the holders ``OptunaSearch`` and ``TuneBOHB``, and Ray's classes, are not)."""
    for cls in type(search_alg).__mro__:
        if "suggest" in cls.__dict__:
            return not cls.__module__.startswith(("ray.", "fluidsalus."))
    return False


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


class CustomSearch(BaseSearcher):
    """Runs a Ray-style ``Searcher`` of the user's own (see the module docstring).

    Args:
        searcher: The object with ``suggest(trial_id)`` and ``on_trial_complete(trial_id, result, error)``.
        space: ``param_space``: its values are the base each suggestion is merged into.
        num_samples: Trials to make (>= 1), or -1 until the searcher returns ``FINISHED`` or the run is stopped.
        max_concurrent: Trials suggested and not yet complete at any time (None: :data:`DEFAULT_BATCH_SIZE`,
            Optuna's batch, so that a model-based searcher learns from most trials).
        experiment_dir: Where the searcher is saved (None: it is not saved); set by the Tune front end.

    Raises:
        ConfigError: ``num_samples`` or ``max_concurrent`` out of range.
    """

    def __init__(self, searcher: Any, space: Mapping[str, Any], num_samples: int,
                 max_concurrent: int | None = None, experiment_dir: str | None = None) -> None:
        name = type(searcher).__name__
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or (
                num_samples < 1 and num_samples != sp.INFINITE_SAMPLES):
            raise ConfigError(f"{name}: num_samples must be an int >= 1, or {sp.INFINITE_SAMPLES} to search until "
                              f"the searcher returns FINISHED or the run is stopped (got {num_samples!r})")
        if max_concurrent is not None and (isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int)
                                           or max_concurrent < 1):
            raise ConfigError(f"{name}: max_concurrent must be None or an int >= 1 (got {max_concurrent!r})")
        self.searcher = searcher
        self.space = dict(space)
        self.num_samples = num_samples
        self.max_concurrent = DEFAULT_BATCH_SIZE if max_concurrent is None else max_concurrent
        self.experiment_dir = experiment_dir
        self._session = ""  # names this run's state file (set with the experiment folder)
        self._suggested = 0  # trials made so far (the searcher's ids are numbered by it)
        self._finished = False  # the searcher returned FINISHED
        self._unassigned: dict[str, deque[str]] = {}  # group -> searcher ids not yet given an engine id
        self._ids: dict[str, str] = {}  # engine trial id -> the searcher's id
        self._done: set[str] = set()  # engine trial ids whose completion the searcher was told
        self._saved_at = -1  # (suggested + completed) when the searcher was last saved
        self._save_unsupported = False

    # ------------------------------------------------------------------ the front end's set-up

    def attach(self, experiment_dir: str, session: str) -> None:
        """Save the searcher in ``experiment_dir`` under ``session``'s file, and restore it from the newest file
        there (a resumed run's).

        Args:
            experiment_dir: The experiment folder.
            session: This run's session name (a timestamp).
        """
        self.experiment_dir, self._session = experiment_dir, session
        saved = sorted(glob.glob(os.path.join(glob.escape(experiment_dir), STATE_FILE_PATTERN.format("*"))))
        if saved and hasattr(self.searcher, "restore"):
            try:
                self.searcher.restore(saved[-1])
            except NotImplementedError:
                logger.warning("%s has no restore(); the resumed search starts from its state when the run began",
                               type(self.searcher).__name__)

    # ------------------------------------------------------------------ BaseSearcher

    def _in_flight(self) -> int:
        return self._suggested - len(self._done)

    def next_groups(self) -> list[TrialGroup]:
        """Ask the searcher for as many trials as the in-flight cap and ``num_samples`` allow.

        Returns:
            At most one TrialGroup of fresh trials (no budget: they run to their end).

        Raises:
            ConfigError: A suggestion that is not a dict, or that leaves a domain of ``param_space`` unresolved.
        """
        configs: list[dict[str, Any]] = []
        ids: list[str] = []
        while not self._finished and self._in_flight() + len(configs) < self.max_concurrent and (
                self.num_samples == sp.INFINITE_SAMPLES or self._suggested + len(configs) < self.num_samples):
            searcher_id = f"{_ID_PREFIX}{self._suggested + len(configs):05d}"
            suggestion = self.searcher.suggest(searcher_id)
            if suggestion is None:
                break
            if isinstance(suggestion, str) and suggestion == FINISHED:
                self._finished = True
                break
            if not isinstance(suggestion, Mapping):
                raise ConfigError(f"{type(self.searcher).__name__}.suggest({searcher_id!r}) returned "
                                  f"{type(suggestion).__name__}; it must return a dict, None or Searcher.FINISHED")
            config = _merge(self.space, suggestion)
            left = _unresolved(config)
            if left:
                raise ConfigError(
                    f"{type(self.searcher).__name__}.suggest({searcher_id!r}) left param_space's "
                    f"{', '.join(left)} unresolved; suggest a value for each, or make them constants in param_space"
                )
            configs.append(config)
            ids.append(searcher_id)
        if not configs:
            return []
        group_id = f"{_GROUP_PREFIX}-{self._suggested}"
        self._suggested += len(configs)
        self._unassigned[group_id] = deque(ids)
        return [TrialGroup(group_id=group_id, configs=configs)]

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        queue = self._unassigned.get(group_id)
        if not queue:
            return
        self._ids[trial_id] = queue.popleft()
        if not queue:
            del self._unassigned[group_id]

    def _seen(self, trial_id: str, result: Mapping[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        own = self._ids[trial_id]
        if result is None:
            return own, None
        return own, {**result, "trial_id": own}

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        if trial_id in self._ids and trial_id not in self._done:
            own, seen = self._seen(trial_id, result)
            handler = getattr(self.searcher, "on_trial_result", None)
            if handler is not None:
                handler(own, seen)
        return super().on_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        if trial_id not in self._ids or trial_id in self._done:
            return
        self._done.add(trial_id)
        own, seen = self._seen(trial_id, result)
        self.searcher.on_trial_complete(own, result=seen, error=error)

    def is_finished(self) -> bool:
        if self._finished:
            return True
        return self.num_samples != sp.INFINITE_SAMPLES and self._suggested >= self.num_samples

    # ------------------------------------------------------------------ state

    def _save(self) -> None:
        """Save the searcher with its ``save(path)`` when a trial was suggested or completed since the last save."""
        changes = self._suggested + len(self._done)
        if self.experiment_dir is None or self._save_unsupported or changes == self._saved_at:
            return
        save = getattr(self.searcher, "save", None)
        if save is None:
            self._save_unsupported = True
            return
        path = os.path.join(self.experiment_dir, STATE_FILE_PATTERN.format(self._session))
        staging = os.path.join(self.experiment_dir, f".{os.path.basename(path)}.partial")
        try:
            save(staging)
        except NotImplementedError:
            self._save_unsupported = True
            logger.warning("%s has no save(); a resumed run starts the search from its state when the run began, "
                           "as in Ray", type(self.searcher).__name__)
            return
        if os.path.exists(staging):  # save() wrote the file: it replaces the last one whole
            os.replace(staging, path)
        self._saved_at = changes

    def state_dict(self) -> dict[str, Any]:
        self._save()
        return {"suggested": self._suggested, "finished": self._finished, "ids": dict(self._ids),
                "done": sorted(self._done), "unassigned": {g: list(q) for g, q in self._unassigned.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._suggested = int(state.get("suggested", 0))
        self._finished = bool(state.get("finished", False))
        self._ids = {str(k): str(v) for k, v in dict(state.get("ids", {})).items()}
        self._done = {str(t) for t in state.get("done", [])}
        self._unassigned = {str(g): deque(str(i) for i in q) for g, q in dict(state.get("unassigned", {})).items()}
