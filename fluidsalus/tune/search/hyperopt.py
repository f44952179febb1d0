"""``HyperOptSearch`` (``ray.tune.search.hyperopt.HyperOptSearch``) with Ray's signature, run by Optuna's TPE.

HyperOpt's search is the Tree-structured Parzen Estimator (TPE), and Optuna's ``TPESampler`` implements the same
algorithm. So a Ray Tune script that uses ``HyperOptSearch`` runs with only its imports changed, and the hyperopt
package is not needed: fluidsalus runs an :class:`~fluidsalus.tune.search.optuna.OptunaSearch` whose sampler is a
``TPESampler`` set as HyperOpt's TPE is:

- ``n_initial_points`` random trials first (HyperOpt's ``n_startup_jobs``; Optuna's ``n_startup_trials``);
- the "good" trials that model ``l(x)`` are the best ``ceil(gamma * sqrt(n))`` of the ``n`` finished ones, at
  most :data:`LINEAR_FORGETTING` (HyperOpt's rule, whose ``gamma`` is a fraction; Optuna's default differs);
- :data:`EI_CANDIDATES` candidates scored per suggestion, as in HyperOpt;
- ``random_state_seed`` seeds the sampler.

Optuna deprecated ``TPESampler(gamma=...)`` in 4.9 and drops it in 6.0; fluidsalus requires ``optuna < 6``, and
its deprecation warning is not shown.

The draws are Optuna's, so the same seed gives other configurations than HyperOpt would. Everything else is
OptunaSearch's: every scheduler pairing, ``points_to_evaluate`` (which may be partial), ``ConcurrencyLimiter``.
A space written with HyperOpt's own ``hp.*`` expressions (conditional ``hp.choice`` options, nested dicts,
arithmetic) needs the hyperopt package, as in Ray: it is searched define-by-run, each ``hp.*`` parameter one
``trial.suggest_*`` under its label and each trial's configuration the space evaluated as HyperOpt evaluates it
(:mod:`fluidsalus.tune.search._hyperopt_space`). ``points_to_evaluate`` then give values by the space's keys, a
``hp.choice`` of plain options its option, as Ray's do.

The distributions Optuna has none for run as HyperOpt runs them (:mod:`fluidsalus.searchers._transformed`): Tune's
``qloguniform`` and ``qlograndint`` (``q > 1``) are drawn log-uniformly and rounded to ``q``, ``randn``/``qrandn``
and HyperOpt's ``hp.normal``/``qnormal``/``lognormal``/``qlognormal`` through their quantile (the study's parameter
``<key>:quantile``) and the normal's inverse CDF. ``OptunaSearch`` refuses them, as Ray's does. A normal with
``sigma = 0`` is its mean every time, as HyperOpt draws it; a negative ``sigma`` or a ``q <= 0`` is a
``ConfigError`` when the search is built. A ``tune.choice`` whose options hold domains is searched as the conditional
space Ray's converts it to (``hp.choice`` over the options, their parameters under Ray's labels ``<key>/<name>``:
:mod:`fluidsalus.searchers._conditional`), and so is a space with domains inside a list (each under Ray's label
``<key>/<position>``). As from Ray's, whose HyperOpt evaluates the whole space, every list of the space comes back a
tuple (constant ones too), and the dicts inside lists, chosen options and ``hp.*`` spaces have their keys sorted.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from fluidsalus._warnings import warning_ignored
from fluidsalus.errors import ConfigError
from fluidsalus.tune.search._hyperopt_space import HyperOptSpace, is_hyperopt_expression
from fluidsalus.tune.search.optuna import OptunaSearch, single_objective

__all__ = ["EI_CANDIDATES", "LINEAR_FORGETTING", "HyperOptGamma", "HyperOptSearch"]

#: HyperOpt's cap on the number of "good" trials (``tpe._default_linear_forgetting``).
LINEAR_FORGETTING = 25
#: Candidates HyperOpt's TPE scores per suggestion (``tpe._default_n_EI_candidates``).
EI_CANDIDATES = 24
#: The start of Optuna 4.9's FutureWarning for ``TPESampler(gamma=...)``, which :class:`HyperOptSearch` holds back (the
#: gamma is HyperOpt's rule, given on purpose).
TPE_GAMMA_WARNING = r"`gamma` has been deprecated"


class HyperOptGamma:
    """HyperOpt's split of ``n`` finished trials: the best ``min(ceil(gamma * sqrt(n)), LINEAR_FORGETTING)``.

    A class, not a closure, so that the sampler that holds it can be pickled with the Tuner.

    Args:
        gamma: HyperOpt's ``gamma``, in ``(0, 1]``.
    """

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma

    def __call__(self, n: int) -> int:
        return min(int(math.ceil(self.gamma * math.sqrt(n))), LINEAR_FORGETTING)

    def __repr__(self) -> str:
        return f"HyperOptGamma({self.gamma})"


class HyperOptSearch(OptunaSearch):
    """HyperOpt's TPE (``ray.tune.search.hyperopt.HyperOptSearch``), run by Optuna's ``TPESampler`` with
    HyperOpt's settings (see the module docstring).

    Args:
        space: None (use ``param_space``), a dict of ``tune`` domains, or a dict of HyperOpt's own ``hp.*``
            expressions (needs hyperopt).
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configurations to run first (a point may be partial).
        n_initial_points: Random trials before TPE models anything (>= 0).
        random_state_seed: Seed of the sampler (None: a random one).
        gamma: The share of good trials in HyperOpt's rule, in ``(0, 1]``.

    Raises:
        ConfigError: An argument out of range, or a HyperOpt space; the message names it.
    """

    _library = "HyperOpt"
    _drops_log_step = False
    samples_hyperopt_domains = True

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        n_initial_points: int = 20,
        random_state_seed: int | None = None,
        gamma: float = 0.25,
    ) -> None:
        owner = type(self).__name__
        hyperopt_space = None
        if space is not None and is_hyperopt_expression(space):
            if not isinstance(space, Mapping):
                raise ConfigError(f"{owner}: space must be a dict, got {type(space).__name__}")
            hyperopt_space = HyperOptSpace(space, owner)  # searched define-by-run; needs the hyperopt package
            space = hyperopt_space  # type: ignore[assignment]
            if points_to_evaluate:
                points_to_evaluate = [hyperopt_space.point_params(point) for point in points_to_evaluate]
        single_objective(owner, "HyperOpt", metric, mode)
        if isinstance(n_initial_points, bool) or not isinstance(n_initial_points, numbers.Integral) \
                or n_initial_points < 0:
            raise ConfigError(f"{owner}: n_initial_points must be an int >= 0 (got {n_initial_points!r})")
        if isinstance(random_state_seed, bool) or (
                random_state_seed is not None and (not isinstance(random_state_seed, numbers.Integral)
                                                   or random_state_seed < 0)):
            raise ConfigError(f"{owner}: random_state_seed must be None or an int >= 0 (got {random_state_seed!r})")
        if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not 0 < gamma <= 1:
            raise ConfigError(f"{owner}: gamma must be a number in (0, 1] (got {gamma!r})")
        from optuna.samplers import TPESampler

        # Optuna 4.9 deprecated gamma (to go in 6.0; pyproject pins optuna < 6): that warning alone is held back (a
        # catch_warnings here was not thread-safe: it swaps the process's warning state, h232)
        with warning_ignored(FutureWarning, TPE_GAMMA_WARNING):
            sampler = TPESampler(n_startup_trials=int(n_initial_points), gamma=HyperOptGamma(float(gamma)),
                                 n_ei_candidates=EI_CANDIDATES, seed=random_state_seed)
        super().__init__(space=space, metric=metric, mode=mode, points_to_evaluate=points_to_evaluate,
                         sampler=sampler)
        self.n_initial_points = int(n_initial_points)
        self.random_state_seed = random_state_seed
        self.gamma = float(gamma)
        #: The space as HyperOpt's own ``hp.*`` expressions (searched define-by-run), or None.
        self.hyperopt_space = hyperopt_space

    def describe(self) -> dict[str, Any]:
        return {"space": self.space, "metric": self._metric, "mode": self._mode,
                "points_to_evaluate": self.points_to_evaluate, "n_initial_points": self.n_initial_points,
                "random_state_seed": self.random_state_seed, "gamma": self.gamma}
