"""``BayesOptSearch`` (``ray.tune.search.bayesopt.BayesOptSearch``) with Ray's signature, run by Optuna's
``GPSampler``.

Ray's ``BayesOptSearch`` drives the bayesian-optimization package: a Gaussian process over continuous parameters,
``random_search_steps`` random trials first, then the maximiser of an acquisition function. Optuna's
``GPSampler`` is the same kind of search (a Gaussian process, random trials first), so a Ray Tune script that uses
``BayesOptSearch`` runs with only its imports changed, and bayesian-optimization is not needed: fluidsalus runs an
:class:`~fluidsalus.tune.search.optuna.OptunaSearch` whose sampler is ``GPSampler(seed=random_state,
n_startup_trials=random_search_steps)``. The space follows Ray's rules for BayesOpt: only float parameters
(``tune.uniform`` and its kin), searched uniformly between their bounds (a log scale or a quantization is dropped
with a warning, as Ray drops it), and no grid.

Differences: the acquisition is Optuna's (log expected improvement), so ``utility_kwargs`` (bayes_opt's UCB by
default) is not used, and a warning says so when it is given. The draws are Optuna's, so a seed gives other
configurations than bayes_opt would. ``patience`` and ``skip_duplicate`` guard against bayes_opt suggesting the same
point again, which a continuous ``GPSampler`` does not do; they are checked and not used. ``verbose`` is not used.
``analysis`` (an earlier experiment's results) is refused; give them as ``points_to_evaluate`` with
``OptunaSearch(evaluated_rewards=...)``.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.tune.search._model_space import a_kind
from fluidsalus.tune.search.optuna import OptunaSearch, gp_sampler, single_objective

__all__ = ["BayesOptSearch"]


class BayesOptSearch(OptunaSearch):
    """Bayesian optimisation with a Gaussian process (``ray.tune.search.bayesopt.BayesOptSearch``), run by
    Optuna's ``GPSampler`` (see the module docstring).

    Args:
        space: None (use ``param_space``) or a dict of float domains.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configurations to run first.
        utility_kwargs: bayes_opt's acquisition settings; not used (a warning says so).
        random_state: Seed of the sampler (Ray's default 42).
        random_search_steps: Random trials before the Gaussian process decides (>= 0).
        verbose: bayes_opt's log level; not used.
        patience: Checked as Ray checks it (> 0); not used.
        skip_duplicate: Checked (a bool); not used.
        analysis: Must be None.
        repeat_float_precision: Checked (an int >= 0); not used (bayes_opt's duplicate test rounds to it).

    Raises:
        ConfigError: An argument out of range; the message names it.
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        utility_kwargs: dict[str, Any] | None = None,
        random_state: int = 42,
        random_search_steps: int = 10,
        verbose: int = 0,
        patience: int = 5,
        skip_duplicate: bool = True,
        analysis: Any = None,
        repeat_float_precision: int = 5,
    ) -> None:
        owner = type(self).__name__
        single_objective(owner, "BayesOpt", metric, mode)
        if space is not None and not isinstance(space, Mapping):
            raise ConfigError(f"{owner}: space must be None or a dict of float domains (got {type(space).__name__})")
        for name, value, low in (("random_state", random_state, 0), ("random_search_steps", random_search_steps, 0),
                                 ("patience", patience, 1), ("repeat_float_precision", repeat_float_precision, 0)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ConfigError(f"{owner}: {name} must be an int >= {low} (got {value!r})")
        if not isinstance(skip_duplicate, bool):
            raise ConfigError(f"{owner}: skip_duplicate must be True or False (got {skip_duplicate!r})")
        if utility_kwargs is not None and not isinstance(utility_kwargs, Mapping):
            raise ConfigError(f"{owner}: utility_kwargs must be None or a dict (got {type(utility_kwargs).__name__})")
        if analysis is not None:
            raise ConfigError(f"{owner}: analysis (an earlier experiment's results) is not supported; give those "
                              "configurations as points_to_evaluate with OptunaSearch(evaluated_rewards=...)")
        if utility_kwargs:
            warnings.warn(f"{owner}: utility_kwargs={dict(utility_kwargs)!r} is not used: fluidsalus runs BayesOpt as "
                          "Optuna's GPSampler, whose acquisition is log expected improvement", UserWarning,
                          stacklevel=2)
        sampler = gp_sampler(int(random_state), int(random_search_steps))
        super().__init__(space=space, metric=metric, mode=mode, points_to_evaluate=points_to_evaluate,
                         sampler=sampler)
        if self.space:
            self.space = self.prepare_space(self.space)
        self.utility_kwargs = None if utility_kwargs is None else dict(utility_kwargs)
        self.random_state = int(random_state)
        self.random_search_steps = int(random_search_steps)
        self.verbose, self.patience, self.skip_duplicate = verbose, patience, skip_duplicate
        self.repeat_float_precision = repeat_float_precision

    def prepare_space(self, space: dict[str, Any]) -> dict[str, Any]:
        """Ray's BayesOpt space: float domains searched uniformly between their bounds, and constants.

        Raises:
            ConfigError: A grid, or a parameter that is not a float.
        """
        owner = type(self).__name__
        if sp.has_grid(space):
            raise ConfigError(f"{owner}: grid_search parameters cannot be searched by BayesOpt (as in Ray); "
                              "use tune.uniform")
        domains, constants = sp.split_constants(space)
        uniform: dict[str, Any] = {}
        for path, domain in domains.items():
            if not isinstance(domain, sp.Float):
                raise ConfigError(f"{owner}: {path} is {a_kind(domain)} parameter, and BayesOpt searches "
                                  "float parameters only (tune.uniform, ...), as in Ray")
            if domain.log or domain.q is not None:
                warnings.warn(f"{owner}: {path}: BayesOpt searches between the bounds uniformly; {domain!r}'s "
                              f"{'log scale' if domain.log else 'quantization'} is dropped, as Ray drops it",
                              UserWarning, stacklevel=3)
            uniform[path] = sp.uniform(domain.lower, domain.upper)
        return sp.unflatten({**constants, **uniform})

    def describe(self) -> dict[str, Any]:
        return {"space": self.space, "metric": self._metric, "mode": self._mode,
                "points_to_evaluate": self.points_to_evaluate, "utility_kwargs": self.utility_kwargs,
                "random_state": self.random_state, "random_search_steps": self.random_search_steps}
