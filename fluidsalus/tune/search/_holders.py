"""Ray Tune's search algorithms as configuration holders: :class:`Searcher`, :class:`BasicVariantGenerator`
and :class:`ConcurrencyLimiter` (``TuneBOHB`` and ``OptunaSearch`` live in the ``bohb`` and ``optuna``
submodules, as in Ray).

Each class keeps its arguments, with Ray 2.x's signature and defaults. At ``Tuner.fit()`` the search
algorithm, the scheduler, the ``param_space`` and ``metric``/``mode`` become one
:mod:`fluidsalus.searchers` searcher (see :mod:`fluidsalus.tune._translate`).
"""

from __future__ import annotations

import contextvars
import logging
import numbers
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fluidsalus.errors import ConfigError, ConfigRuntimeError
from fluidsalus.tune._config import MetricModeHolder

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "Repeater", "SearchAlgorithm", "SearchGenerator", "Searcher"]

logger = logging.getLogger(__name__)

#: Bits of the seed drawn from a user's NumPy ``Generator`` (``random_state``).
_SEED_BITS = 63
#: Exclusive upper bound of the seed drawn from a legacy ``RandomState`` (its ``randint`` takes int32 bounds).
_LEGACY_SEED_BOUND = 2**31 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class SearchAlgorithm:
    """Base of every search algorithm (``ray.tune.search.SearchAlgorithm``), with the attributes and hooks of
    Ray's base: ``metric``, ``set_search_properties``, ``total_samples``, ``is_finished``/``set_finished``, ...

    Ray's low-level API (a subclass of its own implementing ``add_configurations(experiments)`` and
    ``next_trial()``, which build Ray's ``Trial`` objects) does not run in fluidsalus: ``Tuner.fit()`` refuses
    such a search algorithm with a ``ConfigError``; subclass :class:`Searcher` (``suggest``/``on_trial_complete``)
    instead.
    """

    _finished = False
    _metric: str | None = None

    @property
    def metric(self) -> str | None:
        """The metric given to this search algorithm, or None (Ray's base has it, with no ``mode``)."""
        return self._metric

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """Ray's base rule: take ``metric`` unless this search algorithm has its own already (then False)."""
        if self._metric and metric:
            return False
        if metric:
            self._metric = metric
        return True

    @property
    def total_samples(self) -> int:
        """The number of trials it will make (Ray's base: 0, unknown)."""
        return 0

    def add_configurations(self, experiments: Any) -> None:
        """Ray's low-level hook, which fluidsalus does not call (see the class)."""
        raise NotImplementedError

    def next_trial(self) -> Any:
        """Ray's low-level hook, which fluidsalus does not call (see the class)."""
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Told each result of a trial (nothing by default)."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Told once when a trial ends (nothing by default)."""

    def is_finished(self) -> bool:
        """Whether it will make no more trials (after :meth:`set_finished`)."""
        return self._finished

    def set_finished(self) -> None:
        """Mark it finished."""
        self._finished = True

    def has_checkpoint(self, dirpath: str) -> bool:
        """Whether ``dirpath`` holds its saved state (Ray's base: False, nothing to restore)."""
        return False

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        """Save its state into ``checkpoint_dir`` (Ray's base: nothing)."""

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """Load what :meth:`save_to_dir` wrote (Ray's base: nothing)."""

    def describe(self) -> dict[str, Any]:
        """The constructor arguments (for messages)."""
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"{type(self).__name__}({args})"


class Searcher(MetricModeHolder, SearchAlgorithm):
    """Base of the model-based search algorithms (``ray.tune.search.Searcher``): holds ``metric``/``mode``.

    A search algorithm of your own subclasses it as in Ray: it implements ``suggest(trial_id)`` (a config dict,
    None for "not now", or :attr:`FINISHED`) and ``on_trial_complete(trial_id, result=None, error=False)``, and
    may implement ``on_trial_result``, ``set_search_properties``, ``set_max_concurrency`` and ``save``/``restore``
    (:mod:`fluidsalus.tune._custom_search` runs it).

    Args:
        metric: The result key to optimise (or give it to ``TuneConfig``).
        mode: ``"min"`` or ``"max"``.
    """

    #: What ``suggest`` returns when the search is over.
    FINISHED = "FINISHED"

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        MetricModeHolder.__init__(self, metric, mode)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The next trial's configuration: a dict, None ("ask again later") or :attr:`FINISHED`.

        Args:
            trial_id: The trial's id, under which its results and end are reported back.

        Raises:
            NotImplementedError: A search algorithm of your own that does not override it (bare, as Ray's), or a
                fluidsalus one (``OptunaSearch``, ``HyperOptSearch``, ...), which the engine runs inside
                ``Tuner.fit()`` and which cannot suggest on its own (the message says so).
        """
        raise NotImplementedError(self._engine_run("suggest"))

    def _engine_run(self, method: str) -> str:
        """Why ``method`` cannot be called on a fluidsalus search algorithm ("" for one of your own)."""
        if type(self) is Searcher or not type(self).__module__.startswith("fluidsalus."):
            return ""
        return (f"{type(self).__name__}.{method}: fluidsalus runs this search algorithm inside Tuner.fit() (its "
                "engine's searcher asks and learns), so it cannot be called on its own; for a study you drive "
                "yourself use optuna's ask() and tell()")

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Told each result of a trial (optional; the default does nothing)."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Told once when a trial ends, with its last result (None if it had none); ``error`` if it failed."""
        raise NotImplementedError(self._engine_run("on_trial_complete"))

    def save(self, checkpoint_path: str) -> None:
        """Save the search state to the file ``checkpoint_path`` (optional: without it a resumed run starts the
        search from its state when the run began).

        Raises:
            NotImplementedError: A search algorithm of your own that does not override it (as in Ray), or a
                fluidsalus one whose state is in the experiment's store (the message says how to go on).
        """
        raise NotImplementedError(self._no_state_file("save"))

    def restore(self, checkpoint_path: str) -> None:
        """Load what :meth:`save` wrote.

        Raises:
            NotImplementedError: As :meth:`save`.
        """
        raise NotImplementedError(self._no_state_file("restore"))

    def _no_state_file(self, method: str) -> str:
        """Why ``method`` (``save``/``restore``/``restore_from_dir``) has no state file to work with."""
        from fluidsalus.tune._custom_search import is_custom_searcher

        cls = type(self).__name__
        if is_custom_searcher(self):
            return f"{cls}.{method} is not implemented: override save() and restore() to keep the search's state"
        warm = (f"; or warm-start a new one with {cls}(...).add_evaluated_trials(results, metric) (results: the last "
                "experiment's ResultGrid)") if type(self).add_evaluated_point is not Searcher.add_evaluated_point \
            else ""
        study = (", or keep the study in OptunaSearch(storage=..., study_name=...) and start the new experiment on "
                 "it") if cls == "OptunaSearch" else ""
        return (f"{cls}.{method}: fluidsalus keeps this search algorithm's state in the experiment's store, not in "
                f"a file; continue the experiment with Tuner.restore(path, trainable){warm}{study}")

    def get_state(self) -> dict[str, Any]:
        """Ray's hook for a searcher's state as a dict (optional)."""
        raise NotImplementedError

    def set_state(self, state: dict[str, Any]) -> None:
        """Take back what :meth:`get_state` returned (optional)."""
        raise NotImplementedError

    def add_evaluated_point(self, parameters: dict[str, Any], value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list[float] | None = None) -> None:
        """Tell the search algorithm of a configuration evaluated elsewhere (optional, as in Ray: ``OptunaSearch``
        implements it; :meth:`add_evaluated_trials` calls it)."""
        raise NotImplementedError

    def _check_ready(self, has_space: bool, space_argument: str) -> None:
        """Raise Ray's errors for a search algorithm used without a space, or without a metric and mode.

        Args:
            has_space: Whether it has its search space.
            space_argument: The argument that takes the space (``"space"``, ``"dim_dict"``), for the message.
        """
        from fluidsalus.tune.search import UNDEFINED_METRIC_MODE, UNDEFINED_SEARCH_SPACE

        cls = type(self).__name__
        if not has_space:
            raise RuntimeError(UNDEFINED_SEARCH_SPACE.format(cls=cls, space=space_argument))
        if not self._metric or not self._mode:
            raise RuntimeError(UNDEFINED_METRIC_MODE.format(cls=cls, metric=self._metric, mode=self._mode))

    def add_evaluated_trials(self, trials_or_analysis: Any, metric: str) -> None:
        """Tell the search algorithm of earlier trials (Ray's warm start from another experiment).

        Each trial with ``metric`` in its last result becomes one :meth:`add_evaluated_point`: its config, that
        value, failed if it errored, pruned if it was stopped before it reported ``done``. Trials without the
        metric are skipped, with one warning when none had it.

        Args:
            trials_or_analysis: A trial (as callbacks see it: ``config``, ``status``, ``last_result``), a list of
                them, an ``ExperimentAnalysis`` or a ``ResultGrid``.
            metric: The result key whose value each point gets.

        Raises:
            NotImplementedError: The search algorithm has no ``add_evaluated_point`` (as in Ray).
            ConfigError: ``trials_or_analysis`` is none of the above.
        """
        if type(self).add_evaluated_point is Searcher.add_evaluated_point:
            raise NotImplementedError(f"{type(self).__name__} does not take evaluated points")
        from fluidsalus.result import ResultGrid
        from fluidsalus.tune.analysis import ExperimentAnalysis

        if isinstance(trials_or_analysis, ExperimentAnalysis):
            trials = [(t.config, t.status, t.last_result or {}) for t in trials_or_analysis.trials]
        elif isinstance(trials_or_analysis, ResultGrid):
            trials = [(r.config or {}, r.status, r.metrics or {}) for r in trials_or_analysis]
        elif isinstance(trials_or_analysis, (list, tuple)) or hasattr(trials_or_analysis, "last_result"):
            items = trials_or_analysis if isinstance(trials_or_analysis, (list, tuple)) else [trials_or_analysis]
            if not all(hasattr(t, "last_result") and hasattr(t, "config") for t in items):
                raise ConfigError(f"{type(self).__name__}.add_evaluated_trials: expected trials (with config, status "
                                  "and last_result), a list of them, an ExperimentAnalysis or a ResultGrid")
            trials = [(t.config, t.status, t.last_result or {}) for t in items]
        else:
            raise ConfigError(f"{type(self).__name__}.add_evaluated_trials: expected a trial, a list of trials, an "
                              f"ExperimentAnalysis or a ResultGrid, got {type(trials_or_analysis).__name__}")
        added = 0
        for config, status, last in trials:
            if metric not in last:
                continue
            self.add_evaluated_point(dict(config), last[metric], error=status == "ERROR",
                                     pruned=status == "TERMINATED" and not last.get("done", False))
            added += 1
        if not added:
            warnings.warn(f"{type(self).__name__}.add_evaluated_trials: no trial reported {metric!r}; check the "
                          "metric's name", UserWarning, stacklevel=2)

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        """:meth:`save` into Ray's ``searcher-state-<session_str>.pkl`` in ``checkpoint_dir``, written whole or
        not at all. A searcher without :meth:`save` writes nothing (with a warning, as Ray logs one).

        Args:
            checkpoint_dir: The folder (an experiment's, usually).
            session_str: Names the file.
        """
        from fluidsalus.tune._custom_search import save_searcher

        if not save_searcher(self, checkpoint_dir, session_str):
            logger.warning("Nothing was saved: %s", self._no_state_file("save_to_dir"))

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """:meth:`restore` from the newest ``searcher-state-*.pkl`` in ``checkpoint_dir``: the state a run of this
        search algorithm saved in its experiment folder, to start a new experiment where it left off (Ray's
        warm start).

        Raises:
            RuntimeError: There is no such file (Ray's error).
            ConfigError: A fluidsalus search algorithm (``OptunaSearch``, ``TuneBOHB``): its state is in the
                experiment's store, not in such a file.
        """
        from fluidsalus.tune._custom_search import is_custom_searcher, newest_state_file

        if not is_custom_searcher(self):
            raise ConfigError(self._no_state_file("restore_from_dir"))
        saved = newest_state_file(os.path.expanduser(checkpoint_dir))
        if saved is None:
            raise RuntimeError(f"Searcher unable to find checkpoint in {checkpoint_dir}")
        self.restore(saved)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """Ray's hook: told TuneConfig's ``metric``/``mode`` and ``param_space`` (``config``) when ``param_space``
        is not empty. True if the search algorithm took them; this base takes nothing and returns False, as Ray's
        (so a search algorithm of your own that keeps it, given parameters to search in ``param_space``, is a
        ``ConfigError``, as Ray's ValueError; override it to search ``config``)."""
        _BASE_ANSWERS.set(_BASE_ANSWERS.get() + 1)
        return False

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Ray's hook; concurrency is applied by the engine, so this always returns False (use a limiter)."""
        return False

    def own_space(self) -> dict[str, Any] | None:
        """The search space given to the search algorithm itself, as a fluidsalus space, or None."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"metric": self._metric, "mode": self._mode}


#: How many times :meth:`Searcher.set_search_properties` (the base, which takes nothing) has answered in this
#: context: a False from an override is told apart from its ``super()``'s (:func:`base_answers`).
_BASE_ANSWERS: contextvars.ContextVar[int] = contextvars.ContextVar("fluidsalus_base_search_properties", default=0)


def base_answers() -> int:
    """How many times the base :meth:`Searcher.set_search_properties` has answered in this context (compare the
    count before and after a call to learn whether an override's False came from ``super()``)."""
    return _BASE_ANSWERS.get()


class BasicVariantGenerator(SearchAlgorithm):
    """Random and grid search over ``param_space`` (``ray.tune.search.BasicVariantGenerator``).

    Maps onto :class:`fluidsalus.searchers.RandomSearch`, which draws the same configurations as Ray for the
    same integer ``random_state``.

    Args:
        points_to_evaluate: Configurations to run first (nested dicts, possibly partial: the parameters a point
            leaves out are drawn from ``param_space``; over a grid, one trial per remaining grid point). Each
            counts as one of ``num_samples``, and all of them run even if there are more points than samples,
            as in Ray. Works with random search, ASHA and HyperBand; refused with PopulationBasedTraining.
        max_concurrent: Cap on trials running at once (0: no cap).
        constant_grid_search: Draw the random values once per sample and keep them for every grid point, as in
            Ray. Works with random search, ASHA and HyperBand; refused with PopulationBasedTraining and PB2.
        random_state: An int seed (the same configurations as Ray's), or a NumPy ``Generator`` /
            ``RandomState`` from which one seed is drawn (reproducible, but not Ray's configurations).
    """

    def __init__(
        self,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        max_concurrent: int = 0,
        constant_grid_search: bool = False,
        random_state: np.random.Generator | np.random.RandomState | int | None = None,
    ) -> None:
        owner = type(self).__name__
        if points_to_evaluate is not None and not isinstance(points_to_evaluate, (list, tuple)):
            raise ConfigError(f"{owner}: points_to_evaluate must be None or a list of dicts "
                              f"(got {type(points_to_evaluate).__name__})")
        if not _is_int(max_concurrent) or max_concurrent < 0:
            raise ConfigError(f"{owner}: max_concurrent must be an int >= 0 (0: no cap) (got {max_concurrent!r})")
        if not isinstance(constant_grid_search, bool):
            raise ConfigError(f"{owner}: constant_grid_search must be True or False (got {constant_grid_search!r})")
        if random_state is not None and not (
            (_is_int(random_state) and random_state >= 0)
            or isinstance(random_state, (np.random.Generator, np.random.RandomState))
        ):
            raise ConfigError(
                f"{owner}: random_state must be None, an int >= 0, a numpy Generator or RandomState "
                f"(got {random_state!r})"
            )
        self.points_to_evaluate = list(points_to_evaluate or [])
        self.max_concurrent = int(max_concurrent)
        self.constant_grid_search = constant_grid_search
        self.random_state = random_state

    def seed(self) -> int | None:
        """The sampler's seed: the int ``random_state`` itself, or one drawn from a NumPy generator."""
        state = self.random_state
        if state is None:
            # Ray's BasicVariantGenerator draws from NumPy's global state then, so np.random.seed(...) before
            # fit() makes the sweep reproducible; draw the seed from it.
            return int(np.random.randint(0, _LEGACY_SEED_BOUND))
        if _is_int(state):
            return int(state)
        if isinstance(state, np.random.Generator):
            return int(state.integers(0, 2**_SEED_BITS))
        return int(state.randint(0, _LEGACY_SEED_BOUND))

    def describe(self) -> dict[str, Any]:
        return {"points_to_evaluate": self.points_to_evaluate, "max_concurrent": self.max_concurrent,
                "constant_grid_search": self.constant_grid_search, "random_state": self.random_state}


class _Wrapper(SearchAlgorithm):
    """A search algorithm around another one (``searcher``), whose metric and mode are the wrapped one's."""

    searcher: Any

    def _wrap(self, searcher: Any) -> None:
        if searcher is None or isinstance(searcher, (Mapping, Sequence)):
            raise ConfigError(f"{type(self).__name__}: searcher must be a search algorithm "
                              f"(got {type(searcher).__name__})")
        if isinstance(searcher, (BasicVariantGenerator, SearchGenerator)):
            # (Ray's rule: they are search algorithms, not Searchers; its ConcurrencyLimiter raises and its
            # SearchGenerator asserts. fluidsalus ran the limiter as max_concurrent_trials: a helper's finding)
            advice = " (pass max_concurrent to the BasicVariantGenerator itself)" \
                if isinstance(searcher, BasicVariantGenerator) else ""
            # (Ray's ConcurrencyLimiter raises a RuntimeError for them, as for any object that is not a Searcher)
            error = ConfigRuntimeError if isinstance(self, ConcurrencyLimiter) else ConfigError
            raise error(f"{type(self).__name__}: searcher must be a Searcher, such as OptunaSearch or one of "
                        f"your own (got a {type(searcher).__name__}{advice})")
        self.searcher = searcher

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """Ray's hook, passed on to the wrapped search algorithm (as Ray's wrappers do)."""
        hook = getattr(self.searcher, "set_search_properties", None)
        return bool(hook(metric, mode, config, **spec)) if callable(hook) else False

    @property
    def metric(self) -> str | None:
        """The wrapped search algorithm's metric."""
        return getattr(self.searcher, "metric", None)

    @property
    def mode(self) -> str | None:
        """The wrapped search algorithm's mode."""
        return getattr(self.searcher, "mode", None)


class ConcurrencyLimiter(_Wrapper):
    """Caps the trials running at once (``ray.tune.search.ConcurrencyLimiter``).

    It becomes ``max_concurrent_trials`` of the run (and the batch size of an ``OptunaSearch``, so at most
    ``max_concurrent`` trials are asked and not yet told, as with Ray's limiter).

    Args:
        searcher: The search algorithm to limit.
        max_concurrent: Trials running at once, ``>= 1``.
        batch: Ray's "wait for the whole batch before suggesting more": no new trial is asked for until every
            trial of the batch has ended (around an ``OptunaSearch``, ``HyperOptSearch``, ``BayesOptSearch`` or a
            search algorithm of your own; others run without it, with a warning).
    """

    def __init__(self, searcher: Any, max_concurrent: int, batch: bool = False) -> None:
        owner = type(self).__name__
        self._wrap(searcher)
        if isinstance(searcher, SearchAlgorithm) and not isinstance(searcher, (Searcher, ConcurrencyLimiter,
                                                                                Repeater)):
            # (Ray's ConcurrencyLimiter raises here, at construction; fluidsalus refused it only at fit())
            cls = type(searcher)
            raise ConfigRuntimeError(
                f"The `ConcurrencyLimiter` only works with `Searcher` objects (got {cls}). {cls.__name__} subclasses "
                "SearchAlgorithm, Ray's low-level API (add_configurations/next_trial), which fluidsalus does not run; "
                "subclass tune.search.Searcher instead (suggest(trial_id) -> config, on_trial_complete)")
        if _rays_non_searcher(searcher):
            # (Ray's own BasicVariantGenerator, SearchGenerator or low-level SearchAlgorithm, its import left as
            # Ray's: Ray's limiter raises here too; fluidsalus ran the generator capped, or refused at fit())
            raise ConfigRuntimeError(
                f"The `ConcurrencyLimiter` only works with `Searcher` objects (got {type(searcher)}), and "
                f"{type(searcher).__name__} is Ray Tune's search algorithm that is no Searcher; pass max_concurrent to "
                "the BasicVariantGenerator itself, or subclass tune.search.Searcher")
        if not _is_int(max_concurrent) or max_concurrent < 1:
            raise ConfigError(f"{owner}: max_concurrent must be an int >= 1 (got {max_concurrent!r})")
        if not isinstance(batch, bool):
            raise ConfigError(f"{owner}: batch must be True or False (got {batch!r})")
        self.max_concurrent = int(max_concurrent)
        self.batch = batch

    def describe(self) -> dict[str, Any]:
        return {"searcher": self.searcher, "max_concurrent": self.max_concurrent, "batch": self.batch}


def _rays_non_searcher(value: Any) -> bool:
    """Whether ``value`` is one of Ray Tune's own search algorithms that is not a ``Searcher`` (its
    ``BasicVariantGenerator``, ``SearchGenerator`` or a subclass of its low-level ``SearchAlgorithm``). Read from the
    loaded modules: where Ray's is not loaded, ``value`` cannot be Ray's."""
    rays = sys.modules.get("ray.tune.search")
    algorithm, searcher = getattr(rays, "SearchAlgorithm", None), getattr(rays, "Searcher", None)
    return (isinstance(algorithm, type) and isinstance(searcher, type) and isinstance(value, algorithm)
            and not isinstance(value, searcher))


class SearchGenerator(_Wrapper):
    """Ray's wrapper that turns a ``Searcher`` into trials (``ray.tune.search.SearchGenerator``). Ray wraps every
    searcher in one itself; older scripts pass it explicitly. It changes nothing: the wrapped search algorithm runs
    as it would alone.

    Args:
        searcher: The search algorithm.
    """

    def __init__(self, searcher: Any) -> None:
        self._wrap(searcher)

    def describe(self) -> dict[str, Any]:
        return {"searcher": self.searcher}


class Repeater(_Wrapper):
    """Runs each configuration of a search algorithm ``repeat`` times and tells it the mean
    (``ray.tune.search.Repeater``), for noisy objectives.

    Maps onto :class:`fluidsalus.searchers.RepeatSearcher` around the search algorithm's own fluidsalus
    searcher. As in Ray, ``TuneConfig.num_samples`` counts every repeat (``num_samples=15, repeat=5``: three
    configurations; ``num_samples=16``: a fourth one run once, which the search algorithm is never told of, with a
    warning), the search algorithm sees one trial per configuration, no
    intermediate result, and the mean of the repeats' final ``metric`` values (NaN for a repeat that errored or
    did not report it, left out of the mean). A ``ConcurrencyLimiter`` inside the Repeater caps configurations
    in flight, one outside caps trials.

    Args:
        searcher: The search algorithm to repeat: an ``OptunaSearch`` or a search algorithm of your own
            (possibly in a ``ConcurrencyLimiter``). fluidsalus refuses the others and an early-stopping scheduler
            beside it at ``fit()`` (Ray recommends against that pairing; fluidsalus's schedulers stop trials
            through the search itself).
        repeat: Runs of each configuration, ``>= 1``.
        set_index: Put each repeat's index (0 .. repeat-1) into its config under ``"__trial_index__"``.
    """

    def __init__(self, searcher: Any, repeat: int = 1, set_index: bool = True) -> None:
        owner = type(self).__name__
        self._wrap(searcher)
        if not _is_int(repeat) or repeat < 1:
            raise ConfigError(f"{owner}: repeat must be an int >= 1 (got {repeat!r})")
        if not isinstance(set_index, bool):
            raise ConfigError(f"{owner}: set_index must be True or False (got {set_index!r})")
        self.repeat = int(repeat)
        self.set_index = set_index

    def describe(self) -> dict[str, Any]:
        return {"searcher": self.searcher, "repeat": self.repeat, "set_index": self.set_index}
