"""Search algorithms with Ray Tune's names (``ray.tune.search``).

- :class:`BasicVariantGenerator`: random and grid search (the default);
- :class:`ConcurrencyLimiter`: caps the trials running at once;
- :class:`Repeater`: runs each configuration several times and tells the search algorithm the mean;
- :class:`SearchGenerator`: Ray's wrapper of a ``Searcher`` (it changes nothing);
- :class:`Searcher`: the base of a search algorithm of your own (``suggest``/``on_trial_complete``);
- :class:`~fluidsalus.tune.search.bohb.TuneBOHB`: BOHB (``from fluidsalus.tune.search.bohb import TuneBOHB``);
- :class:`~fluidsalus.tune.search.optuna.OptunaSearch`: Optuna's samplers
  (``from fluidsalus.tune.search.optuna import OptunaSearch``);
- :class:`~fluidsalus.tune.search.hyperopt.HyperOptSearch`: HyperOpt's TPE, run by Optuna's TPE sampler with
  HyperOpt's settings (``from fluidsalus.tune.search.hyperopt import HyperOptSearch``);
- :class:`~fluidsalus.tune.search.bayesopt.BayesOptSearch`: Gaussian-process optimisation, run by Optuna's
  ``GPSampler`` (``from fluidsalus.tune.search.bayesopt import BayesOptSearch``);
- :class:`~fluidsalus.tune.search.ax.AxSearch`: Ax's Bayesian optimisation with its parameter and outcome
  constraints, run by Optuna's ``GPSampler`` (``from fluidsalus.tune.search.ax import AxSearch``);
- :class:`~fluidsalus.tune.search.hebo.HEBOSearch`: HEBO's batched Bayesian optimisation, run by Optuna's
  ``GPSampler`` in synchronous batches (``from fluidsalus.tune.search.hebo import HEBOSearch``).

They hold their arguments; ``Tuner.fit()`` turns them, with the scheduler, into one fluidsalus searcher.
:func:`create_searcher` builds one from Ray's short names (``"random"``, ``"optuna"``, ``"bohb"``, ...), as
``tune.run(search_alg="...")`` does.
"""

from __future__ import annotations

from typing import Any

from fluidsalus.space import grid_search
from fluidsalus.tune._config import build_with_known, by_short_name
from fluidsalus.tune.search._holders import (
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Repeater,
    SearchAlgorithm,
    Searcher,
    SearchGenerator,
)

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "Repeater", "SEARCHER_NAMES", "SearchAlgorithm",
           "SearchGenerator", "Searcher", "UNDEFINED_METRIC_MODE", "UNDEFINED_SEARCH_SPACE",
           "UNRESOLVED_SEARCH_SPACE", "create_searcher", "grid_search"]

# The error messages a search algorithm of your own raises, as Ray's searchers do, with Ray's placeholders.
#: ``{par}`` (the argument) and ``{cls}`` (the searcher): a space given to the searcher itself still holds
#: ``tune.*`` sampling functions.
UNRESOLVED_SEARCH_SPACE = (
    "The {par} argument of {cls} holds unresolved search space definitions (tune.* sampling functions). "
    "Give {cls} a space in its own terms, or pass the tune.* space as Tuner(param_space=...) instead."
)
#: ``{cls}`` and ``{space}`` (the argument that takes the space): asked for a configuration without a space.
UNDEFINED_SEARCH_SPACE = (
    "{cls} was asked for a configuration, but it has no search space: pass its {space} argument, or a "
    "param_space to Tuner()."
)
#: ``{cls}``, ``{metric}`` and ``{mode}``: asked for a configuration before ``metric`` and ``mode`` were set.
UNDEFINED_METRIC_MODE = (
    "{cls} was asked for a configuration, but its metric ({metric}) or mode ({mode}) is not set: pass them to "
    "{cls} or to TuneConfig()."
)

#: Ray's short search algorithm names (``ray.tune.search.SEARCH_ALG_IMPORT``), each naming the module and class
#: that ``create_searcher`` imports (lazily, as Ray does).
SEARCHER_NAMES: dict[str, tuple[str, str]] = {
    "variant_generator": ("fluidsalus.tune.search._holders", "BasicVariantGenerator"),
    "random": ("fluidsalus.tune.search._holders", "BasicVariantGenerator"),
    "ax": ("fluidsalus.tune.search.ax", "AxSearch"),
    "hyperopt": ("fluidsalus.tune.search.hyperopt", "HyperOptSearch"),
    "bayesopt": ("fluidsalus.tune.search.bayesopt", "BayesOptSearch"),
    "bohb": ("fluidsalus.tune.search.bohb", "TuneBOHB"),
    "nevergrad": ("fluidsalus.tune.search.nevergrad", "NevergradSearch"),
    "optuna": ("fluidsalus.tune.search.optuna", "OptunaSearch"),
    "zoopt": ("fluidsalus.tune.search.zoopt", "ZOOptSearch"),
    "hebo": ("fluidsalus.tune.search.hebo", "HEBOSearch"),
}


def create_searcher(search_alg: str, **kwargs: Any) -> SearchAlgorithm:
    """A search algorithm from its short name (``ray.tune.create_searcher``).

    Args:
        search_alg: One of Ray's names (:data:`SEARCHER_NAMES`), in any case.
        **kwargs: Arguments of the search algorithm (e.g. ``metric`` and ``mode``); those it does not take are
            dropped, as in Ray.

    Returns:
        The search algorithm.

    Raises:
        ConfigError: An unknown name.
    """
    import importlib

    module, name = by_short_name("search_alg", search_alg, SEARCHER_NAMES)
    return build_with_known(getattr(importlib.import_module(module), name), kwargs)
