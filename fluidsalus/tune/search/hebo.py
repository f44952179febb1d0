"""``HEBOSearch`` (``ray.tune.search.hebo.HEBOSearch``) with Ray's signature, run by Optuna's ``GPSampler``.

Ray's ``HEBOSearch`` drives HEBO (Huawei's Heteroscedastic Evolutionary Bayesian Optimisation): a Gaussian process
after ``rand_sample`` quasi-random trials, proposing ``max_concurrent`` configurations at a time and waiting for
the whole batch to end before it proposes the next. Optuna's ``GPSampler`` is the same kind of search (a Gaussian
process, random start-up trials, and a batch acquisition that accounts for the trials still running), so a Ray
Tune script that uses ``HEBOSearch`` runs with only its imports changed, and HEBO (whose dependencies did not
resolve here) is not needed: fluidsalus runs an :class:`~fluidsalus.tune.search.optuna.OptunaSearch` whose
sampler is ``GPSampler(seed=random_state_seed, n_startup_trials=...)``, in synchronous batches as Ray's.

* The space is ``param_space`` or ``tune.*`` domains, converted by Ray's rules for HEBO (floats and ints,
  uniform or log-uniform, and categories; a quantization dropped with a warning; no grid, no ``randn``). HEBO's
  own ``DesignSpace`` needs HEBO and is refused.
* Start-up trials: HEBO's ``rand_sample`` (given in ``**kwargs``: at least 2, as HEBO takes it), by default HEBO's
  own ``1 + `` the number of searched parameters.
* Batches: ``max_concurrent`` configurations are proposed together and the next batch waits until every trial
  of this one has ended, as in Ray; a ``ConcurrencyLimiter`` around it sets the batch size instead, as Ray's
  ``set_max_concurrency`` does. (Under ``HyperBandScheduler`` the brackets decide how many trials start.)
* ``points_to_evaluate`` run first; with ``evaluated_rewards`` they are added to the study as finished trials
  instead, as Ray tells HEBO of them.

Differences: the acquisition is Optuna's (log expected improvement), not HEBO's MACE ensemble over a warped,
heteroscedastic model, and the draws are Optuna's, so a seed gives other configurations than HEBO would; start-up
trials are random draws, not a Sobol sequence. HEBO's ``model_name``, ``model_config``, ``acq_cls``, ``es`` and
``scramble_seed`` are accepted and not used (a warning names them); any other keyword is a ``ConfigError``.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.tune.search._model_space import model_space
from fluidsalus.tune.search.optuna import OptunaSearch, gp_sampler, single_objective

__all__ = ["HEBOSearch"]

#: ``HEBO()`` keywords that choose HEBO's own model and acquisition: accepted and not used (with a warning).
HEBO_MODEL_KWARGS = ("model_name", "model_config", "acq_cls", "es", "scramble_seed")
#: HEBO's smallest ``rand_sample`` (it raises a smaller one to this).
HEBO_MIN_RAND_SAMPLE = 2


class HEBOSearch(OptunaSearch):
    """HEBO's Bayesian optimisation (``ray.tune.search.hebo.HEBOSearch``), by Optuna's ``GPSampler``, in
    synchronous batches of ``max_concurrent`` (see the module docstring).

    Args:
        space: None (use ``param_space``) or a dict of ``tune.*`` domains.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configurations to run first.
        evaluated_rewards: Their rewards: they are then added as finished trials instead of run.
        random_state_seed: Seed of the search.
        max_concurrent: Configurations proposed per batch (>= 1); the next batch waits for this one to end.
        **kwargs: ``HEBO()``'s keywords: ``rand_sample`` sets the start-up trials; see the module docstring.

    Raises:
        ConfigError: An argument out of range; the message names it.
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        evaluated_rewards: list[Any] | None = None,
        random_state_seed: int | None = None,
        max_concurrent: int = 8,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        single_objective(owner, "HEBO", metric, mode)
        if space is not None and not isinstance(space, Mapping):
            raise ConfigError(f"{owner}: space must be None or a dict of tune.* domains (got {type(space).__name__}; "
                              "HEBO's own DesignSpace needs HEBO: give the space as tune.uniform, tune.choice, ...)")
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, numbers.Integral) or max_concurrent < 1:
            raise ConfigError(f"{owner}: max_concurrent must be an int >= 1 (got {max_concurrent!r})")
        if random_state_seed is not None and (isinstance(random_state_seed, bool)
                                              or not isinstance(random_state_seed, numbers.Integral)
                                              or random_state_seed < 0):
            raise ConfigError(f"{owner}: random_state_seed must be None or an int >= 0 (got {random_state_seed!r})")
        unknown = sorted(set(kwargs) - {"rand_sample", *HEBO_MODEL_KWARGS})
        if unknown:
            raise ConfigError(f"{owner}: {unknown} are no arguments of HEBO(); it takes rand_sample and "
                              f"{', '.join(HEBO_MODEL_KWARGS)}")
        rand_sample = kwargs.get("rand_sample")
        if rand_sample is not None and (isinstance(rand_sample, bool) or not isinstance(rand_sample, numbers.Integral)
                                        or rand_sample < 0):
            raise ConfigError(f"{owner}: rand_sample must be None or an int >= 0 (got {rand_sample!r})")
        ignored = sorted(set(kwargs) & set(HEBO_MODEL_KWARGS))
        if ignored:
            warnings.warn(f"{owner}: {ignored} choose HEBO's own model and acquisition and are not used: fluidsalus "
                          "runs HEBOSearch as Optuna's GPSampler", UserWarning, stacklevel=2)
        seed = None if random_state_seed is None else int(random_state_seed)
        super().__init__(space=space or None, metric=metric, mode=mode, points_to_evaluate=points_to_evaluate,
                         seed=seed, evaluated_rewards=evaluated_rewards)
        self.random_state_seed = seed
        self.max_concurrent = int(max_concurrent)
        self.rand_sample = None if rand_sample is None else max(HEBO_MIN_RAND_SAMPLE, int(rand_sample))
        self.hebo_kwargs = dict(kwargs)
        #: Proposals come in synchronous batches of this size (a ConcurrencyLimiter's cap takes its place).
        self.batches = self.max_concurrent
        if self.space:
            self.space = self.prepare_space(self.space)

    def prepare_space(self, space: dict[str, Any]) -> dict[str, Any]:
        """Ray's conversion of a space for HEBO; also sizes the start-up trials to the searched parameters.

        Raises:
            ConfigError: A grid, or a parameter of another kind (a normal distribution, ``sample_from``).
        """
        converted = model_space(type(self).__name__, "HEBO", space)
        searched = len(sp.split_constants(converted)[0])
        startup = self.rand_sample if self.rand_sample is not None else 1 + searched
        self.sampler = gp_sampler(self.random_state_seed, startup)
        return converted

    def describe(self) -> dict[str, Any]:
        return {"space": self.space, "metric": self._metric, "mode": self._mode,
                "points_to_evaluate": self.points_to_evaluate, "evaluated_rewards": self.evaluated_rewards,
                "random_state_seed": self.random_state_seed, "max_concurrent": self.max_concurrent,
                **self.hebo_kwargs}
