"""``OptunaSearch`` (``ray.tune.search.optuna.OptunaSearch``) as a configuration holder.

It maps onto :class:`fluidsalus.searchers.OptunaSearch` (``Study.ask``/``Study.tell`` with the given
sampler, TPE by default). Paired with :class:`~fluidsalus.tune.schedulers.AsyncHyperBandScheduler` it gets
Optuna's ``SuccessiveHalvingPruner``; with :class:`~fluidsalus.tune.schedulers.HyperBandScheduler`, HyperBand
fills its brackets with the study's trials; with :class:`~fluidsalus.tune.schedulers.MedianStoppingRule`, Ray's
median rule judges them (see docs/compatibility.md).

A define-by-run ``space`` (a function ``f(trial)`` that calls ``trial.suggest_*`` and returns None or a dict of
constants) runs in the driver for every proposal, on the trial ``Study.ask()`` returned, as in Ray.

``metric`` and ``mode`` may be lists of the same length: a multi-objective search (one study direction per
metric), as in Ray. It takes no scheduler (Optuna's pruners are single-objective), and the run then has no
single metric: ``ResultGrid.get_best_result`` needs one named.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus._warnings import warning_ignored
from fluidsalus.errors import ConfigError, SpaceError
from fluidsalus.session import callers_stacklevel
from fluidsalus.tune._config import MODES
from fluidsalus.tune._domains import from_optuna_distributions, translate_ray_values
from fluidsalus.tune.search._holders import Searcher

__all__ = ["OptunaSearch", "gp_sampler", "single_objective"]


def _objectives(owner: str, metric: Any, mode: Any) -> tuple[list[str], list[str]]:
    """A multi-objective ``metric``/``mode``: two lists of the same length (Ray's rule for OptunaSearch)."""
    if not isinstance(metric, (list, tuple)) or not metric or not all(isinstance(m, str) and m for m in metric) \
            or len(set(metric)) != len(metric):
        raise ConfigError(f"{owner}: with a list of modes, metric must be a list of distinct result keys, one per "
                          f"mode (got metric={metric!r})")
    if not isinstance(mode, (list, tuple)) or len(mode) != len(metric) or not all(m in MODES for m in mode):
        raise ConfigError(f"{owner}: with metric={list(metric)!r}, mode must be a list of {len(metric)} values, "
                          f"each 'min' or 'max' (got {mode!r})")
    return list(metric), list(mode)


def single_objective(owner: str, algorithm: str, metric: Any, mode: Any) -> None:
    """Refuse a list of metrics or modes for a search algorithm that has one objective.

    Raises:
        ConfigError: ``metric`` or ``mode`` is a list; the message names ``owner`` and ``algorithm``.
    """
    if isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple)):
        raise ConfigError(f"{owner}: metric and mode must be one result key and 'min'/'max' ({algorithm} is "
                          f"single-objective; got metric={metric!r}, mode={mode!r})")


#: The start of Optuna's ExperimentalWarning for building a ``GPSampler`` (``optuna._experimental``'s text), which
#: :func:`gp_sampler` holds back.
GP_SAMPLER_WARNING = r"GPSampler is experimental"


def gp_sampler(seed: int | None, n_startup_trials: int | None = None) -> Any:
    """Optuna's ``GPSampler``, which runs ``BayesOptSearch``, ``AxSearch`` and ``HEBOSearch``.

    Optuna marks it experimental; the choice is fluidsalus's, not the user's, so that warning is not shown.

    Args:
        seed: The sampler's seed.
        n_startup_trials: Random trials before the Gaussian process decides (None: ``GPSampler``'s default, 10).
    """
    from optuna.exceptions import ExperimentalWarning
    from optuna.samplers import GPSampler

    startup = {} if n_startup_trials is None else {"n_startup_trials": n_startup_trials}
    # (only GPSampler's own ExperimentalWarning is held back: a catch_warnings that ignored the category silenced
    # every thread's ExperimentalWarnings meanwhile, and was not thread-safe, h232)
    with warning_ignored(ExperimentalWarning, GP_SAMPLER_WARNING):
        return GPSampler(seed=seed, **startup)


class OptunaSearch(Searcher):
    """Optuna's samplers as a search algorithm (``ray.tune.search.optuna.OptunaSearch``).

    Args:
        space: None (use ``param_space``), a dict of parameters: Optuna distributions under ``"/"``-joined
            keys (as Ray takes them; each is converted into the fluidsalus domain that samples the same values,
            or refused, naming it) or fluidsalus domains; or a define-by-run function ``f(trial)`` that calls
            ``trial.suggest_*`` and returns None or a dict of constants (``param_space`` may then hold only
            constants). A list of tuples is refused.
        metric: The result key to optimise, or a list of keys for a multi-objective search.
        mode: ``"min"`` or ``"max"``, or a list of them, one per metric.
        points_to_evaluate: Configurations to run first (a point may be partial).
        sampler: An ``optuna.samplers.BaseSampler``; default ``TPESampler(seed=seed)``.
        study_name: Name of the study in ``storage``.
        storage: An Optuna storage (URL or object); the study is created there, or loaded if it exists.
        seed: Seed of the default sampler.
        evaluated_rewards: Rewards of ``points_to_evaluate`` (a list of values per point for several metrics),
            which are then added as finished trials (not with a define-by-run space, as in Ray).
    """

    #: The library whose search space Ray's class of this name converts to (named in its errors).
    _library = "Optuna"
    #: Whether a ``qloguniform`` parameter is searched log-uniformly without its ``q``, with a warning, as Ray's
    #: ``OptunaSearch`` searches it (Optuna cannot step a log scale; ``HyperOptSearch``, whose HyperOpt does,
    #: rounds it to ``q`` instead: :attr:`samples_hyperopt_domains`).
    _drops_log_step = True
    #: Whether the domains Optuna has no distribution for (``randn``, ``qrandn``, ``qloguniform``, ``qlograndint``
    #: with ``q > 1``) are sampled as HyperOpt samples them (``HyperOptSearch``, as Ray's converts them to
    #: HyperOpt's ``hp.normal``, ``hp.qloguniform``, ...), not refused (Ray's ``OptunaSearch`` refuses them).
    samples_hyperopt_domains = False

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        sampler: Any = None,
        study_name: str | None = None,
        storage: Any = None,
        seed: int | None = None,
        evaluated_rewards: list[float] | None = None,
    ) -> None:
        owner = type(self).__name__
        if isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple)):
            super().__init__(None, None)
            self._metric, self._mode = _objectives(owner, metric, mode)  # type: ignore[assignment]
        else:
            super().__init__(metric, mode)
        define_by_run = space if callable(space) and not isinstance(space, Mapping) else None
        if space is not None and define_by_run is None and not isinstance(space, Mapping):
            raise ConfigError(
                f"{owner}: space must be None, a dict of Optuna distributions / fluidsalus domains or a "
                f"define-by-run function f(trial) (got {type(space).__name__})"
            )
        if define_by_run is not None and evaluated_rewards is not None:
            raise ConfigError(f"{owner}: evaluated_rewards cannot be used with a define-by-run space (as in Ray); "
                              "give points_to_evaluate alone, or the space as a dict")
        if sampler is not None:
            from optuna.samplers import BaseSampler

            if not isinstance(sampler, BaseSampler):
                raise ConfigError(
                    f"{owner}: sampler must be an optuna.samplers.BaseSampler (got {type(sampler).__name__})"
                )
        if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0):
            raise ConfigError(f"{owner}: seed must be None or an int >= 0 (got {seed!r})")
        if study_name is not None and (not isinstance(study_name, str) or not study_name):
            raise ConfigError(f"{owner}: study_name must be None or a non-empty string (got {study_name!r})")
        if evaluated_rewards is not None and not points_to_evaluate:
            raise ConfigError(f"{owner}: evaluated_rewards needs points_to_evaluate (one reward per point)")
        #: The define-by-run function given as ``space``, or None.
        self.define_by_run: Callable[[Any], Mapping[str, Any] | None] | None = define_by_run
        self.space = (
            None if not space or define_by_run is not None
            else from_optuna_distributions(translate_ray_values(dict(space), f"{owner}.space"), owner)
        )
        self.points_to_evaluate = list(points_to_evaluate or [])
        self.sampler = sampler
        self.study_name = study_name
        self.storage = storage
        self.seed = seed
        self.evaluated_rewards = None if evaluated_rewards is None else list(evaluated_rewards)
        #: Results given by :meth:`add_evaluated_point`, added to the study before the search starts.
        self.evaluated_points: list[dict[str, Any]] = []
        #: Linear constraints on the parameters and on the outcomes in Ax's notation (``AxSearch`` sets them;
        #: Ray's ``OptunaSearch`` has no such arguments).
        self.parameter_constraints: list[str] | None = None
        self.outcome_constraints: list[str] | None = None
        #: Proposals in synchronous batches of this size, each waiting for the last to end (``HEBOSearch`` sets
        #: it; a ConcurrencyLimiter's cap takes its place), or None.
        self.batches: int | None = None

    def own_space(self) -> dict[str, Any] | None:
        return self.space or None

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """Ray's hook: take ``metric``/``mode`` unless it has its own (then False); ``Tuner.fit()`` gives it
        ``param_space`` (and TuneConfig's metric and mode take the place of its own there, as in Ray)."""
        return self._take_metric_mode(metric, mode)

    def prepare_space(self, space: dict[str, Any]) -> dict[str, Any]:
        """The searched space (``param_space`` or :meth:`own_space`, with its constants) as this search
        algorithm searches it: unchanged here, but for a grid, which Ray's ``OptunaSearch`` (and
        ``HyperOptSearch``) refuse; a subclass with narrower rules (``BayesOptSearch``) checks or rewrites it.

        Args:
            space: The space, with fluidsalus domains.

        Returns:
            The space to search.

        Raises:
            ConfigError: The space holds a ``grid_search`` (Ray's ``ValueError``, whose message this keeps; the
                native ``fluidsalus.searchers.OptunaSearch`` samples a grid as a categorical).
        """
        name = type(self).__name__
        if sp.has_grid(space):
            raise ConfigError(f"{name}: Grid search parameters cannot be automatically converted to "
                              f"a{'n' if self._library[0] in 'AEIOU' else ''} {self._library} search space (as in "
                              "Ray); use tune.choice")
        if not self._drops_log_step:
            return space
        try:
            flat = sp.flatten_space(space)
        except SpaceError:
            return space  # (the engine's conversion of the space refuses it, naming this class)
        stepped = [path for path, value in flat.items() if isinstance(value, sp.Float) and value.log and value.q]
        if not stepped:
            return space
        warnings.warn(f"{name}: Optuna does not support both quantization and sampling from LogUniform; q is dropped "
                      f"for {', '.join(stepped)} (as Ray's OptunaSearch drops it): their values are not rounded to q",
                      UserWarning, stacklevel=callers_stacklevel())
        for path in stepped:
            domain = flat[path]
            flat[path] = sp.Float(domain.lower, domain.upper, log=True, base=domain.base)
        return sp.unflatten(flat)

    def add_evaluated_point(self, parameters: dict[str, Any], value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list[float] | None = None) -> None:
        """Tell the search of a configuration evaluated elsewhere (Ray's ``OptunaSearch.add_evaluated_point``).

        It is added to the study as a finished trial (failed if ``error``, pruned if ``pruned``) when the search
        starts, so the sampler learns from it; it does not run and does not count against ``num_samples``.

        Args:
            parameters: A value for every parameter of the search algorithm's own ``space`` (nested or
                ``"/"``-flattened; constants of the configuration are ignored).
            value: Its metric (ignored when ``error``).
            error: It failed.
            pruned: It was stopped early.
            intermediate_values: Its metric at each step, or None.

        Raises:
            RuntimeError: The search algorithm has no space of its own, or no metric and mode (Ray's errors).
            TypeError: Its space is a define-by-run function (as in Ray).
            ConfigError: A bad value, named (a parameter outside the space is found when the search starts).
        """
        cls = type(self).__name__
        if self.define_by_run is not None:
            raise TypeError(f"{cls}.add_evaluated_point: a define-by-run space cannot take evaluated points (as in "
                            "Ray); give the space as a dict")
        self._check_ready(bool(self.space), "space")
        if isinstance(self._metric, list):
            raise ConfigError(f"{cls}.add_evaluated_point: value is one number, and this search has several "
                              f"metrics {self._metric}; give the points with evaluated_rewards instead")
        if not isinstance(parameters, Mapping):
            raise ConfigError(f"{cls}.add_evaluated_point: parameters must be a dict, got {type(parameters).__name__}")
        if not error and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise ConfigError(f"{cls}.add_evaluated_point: value must be a number, got {value!r}")
        if intermediate_values is not None and not all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) for v in intermediate_values):
            raise ConfigError(f"{cls}.add_evaluated_point: intermediate_values must be a list of numbers or None")
        domains = sp.split_constants(dict(self.space))[0]
        flat = sp.flatten_config(parameters)
        self.evaluated_points.append({
            "parameters": {key: flat[key] for key in flat if key in domains},
            "value": None if error else float(value),
            "state": "FAIL" if error else "PRUNED" if pruned else "COMPLETE",
            "intermediate_values": None if intermediate_values is None else [float(v) for v in intermediate_values],
        })

    def describe(self) -> dict[str, Any]:
        return {"space": self.define_by_run or self.space, **super().describe(),
                "points_to_evaluate": self.points_to_evaluate, "sampler": self.sampler,
                "study_name": self.study_name, "storage": self.storage, "seed": self.seed,
                "evaluated_rewards": self.evaluated_rewards}
