"""``NevergradSearch`` (``ray.tune.search.nevergrad.NevergradSearch``): Nevergrad's optimizers as a search algorithm.

Nevergrad (``pip install nevergrad``) optimizes without gradients: its optimizers ``ask`` for a candidate and are
``tell``-ed its loss. ``NevergradSearch`` runs one as Ray's does, through fluidsalus's runner of search algorithms
with a ``suggest`` of their own (:mod:`fluidsalus.tune._custom_search`), so it pairs with no scheduler, ASHA,
HyperBand or the median stopping rule, and a ``ConcurrencyLimiter`` caps the trials it has in flight:

- ``suggest`` asks the optimizer for a candidate and returns it as a config (``"a/b"`` keys of a space given to
  the optimizer become nested dicts, as in Ray); ``on_trial_complete`` tells the optimizer the trial's last
  ``metric`` (negated under ``mode="max"``: Nevergrad minimizes). A trial that ends with no value of the metric
  (an error before its first report) is not told.
- The search space is ``param_space`` (or ``space=``, a dict of ``tune.*`` domains), converted as Ray converts it:
  ``uniform`` to ``ng.p.Scalar``, ``loguniform`` to ``ng.p.Log``, ``randint``/``lograndint`` to the same with
  integer casting between the bounds (``upper`` excluded), ``choice`` to ``ng.p.Choice``. A quantization is
  dropped with a warning, as Ray drops it; ``grid_search``, ``randn`` and ``sample_from`` are a ``ConfigError``
  naming the parameter. ``space`` may also be Nevergrad's own parametrization (``ng.p.Dict(...)``), or the list of
  parameter names of an optimizer instance built on an array parametrization.
- ``points_to_evaluate`` are suggested to the optimizer first, in order.
- Its state (the optimizer, pickled whole, and the candidates in flight) is saved into Ray's
  ``searcher-state-<session>.pkl`` in the experiment folder, so a resumed run goes on with the optimizer where it
  was.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.tune.search._model_space import a_kind
from fluidsalus.tune.search._own_suggest import OwnSuggestSearcher

__all__ = ["NevergradSearch"]

_INSTALL = "NevergradSearch needs the nevergrad package: pip install nevergrad"


def _nevergrad() -> Any:
    """The ``nevergrad`` module, or an ImportError saying how to install it."""
    try:
        import nevergrad
    except ImportError as exc:
        raise ImportError(_INSTALL) from exc
    return nevergrad


def convert_space(space: Mapping[str, Any], owner: str = "NevergradSearch") -> Any:
    """A ``tune.*`` search space as Nevergrad's parametrization: an ``ng.p.Dict`` keyed by ``"/"``-joined paths.

    Args:
        space: The search space; its constants are left out (they are merged into each config).
        owner: Names the caller in the errors.

    Returns:
        The ``ng.p.Dict``.

    Raises:
        ConfigError: A grid, or a parameter Nevergrad cannot search (``randn``, ``sample_from``), named by path.
    """
    ng = _nevergrad()
    if sp.has_grid(space):
        raise ConfigError(f"{owner}: grid_search parameters cannot be converted to a Nevergrad search space (as in "
                          "Ray); use tune.choice")
    domains, _constants = sp.split_constants(dict(space))
    parameters: dict[str, Any] = {}
    for path, domain in domains.items():
        if isinstance(domain, (sp.Float, sp.Integer)) and domain.q is not None:
            warnings.warn(f"{owner}: {path}: Nevergrad does not support quantization; {domain!r}'s q is dropped, as "
                          "Ray drops it", UserWarning, stacklevel=3)
        if isinstance(domain, sp.Float):
            parameters[path] = (ng.p.Log(lower=domain.lower, upper=domain.upper, exponent=math.e) if domain.log
                                else ng.p.Scalar(lower=domain.lower, upper=domain.upper))
        elif isinstance(domain, sp.Integer):
            upper = domain.upper - 1  # upper is excluded
            parameter = (ng.p.Log(lower=domain.lower, upper=upper, exponent=math.e) if domain.log
                         else ng.p.Scalar(lower=domain.lower, upper=upper))
            parameters[path] = parameter.set_integer_casting()
        elif isinstance(domain, sp.Categorical):
            parameters[path] = ng.p.Choice(choices=list(domain.categories))
        else:
            raise ConfigError(f"{owner}: {path} is {a_kind(domain)} parameter; Nevergrad searches "
                              "tune.uniform/loguniform/randint/lograndint/choice parameters (and their q* forms) only")
    return ng.p.Dict(**parameters)


class NevergradSearch(OwnSuggestSearcher):
    """Search with a Nevergrad optimizer (Ray's ``NevergradSearch``, with Ray's signature).

    Args:
        optimizer: A Nevergrad optimizer class (``ng.optimizers.CMA``), a configured optimizer
            (``ng.optimizers.OnePlusOne``, ``ng.families.ParametrizedOnePlusOne(...)``), or an optimizer instance
            (then ``space`` is None or its parameter names, and ``optimizer_kwargs`` must be empty).
        optimizer_kwargs: Keyword arguments for building ``optimizer`` (``budget``, ``num_workers``, ...).
        space: The search space: a dict of ``tune.*`` domains, a Nevergrad parametrization, or (with an optimizer
            instance on an array) the names of its coordinates. None: ``param_space`` of the ``Tuner``.
        metric: The result key to optimize; with only a mode, ``"_metric"``.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configs to run first.

    Raises:
        ImportError: nevergrad is not installed.
        ConfigError: A bad argument, named.
    """

    def __init__(self, optimizer: Any = None, optimizer_kwargs: dict[str, Any] | None = None,
                 space: dict[str, Any] | Any | list[str] | None = None, metric: str | None = None,
                 mode: str | None = None, points_to_evaluate: list[dict[str, Any]] | None = None) -> None:
        ng = _nevergrad()
        from nevergrad.optimization import Optimizer
        from nevergrad.optimization.base import ConfiguredOptimizer

        super().__init__(metric=metric, mode=mode)
        owner = type(self).__name__
        if optimizer_kwargs is not None and not isinstance(optimizer_kwargs, Mapping):
            raise ConfigError(f"{owner}: optimizer_kwargs must be a dict or None, "
                              f"got {type(optimizer_kwargs).__name__}")
        self._optimizer_kwargs = dict(optimizer_kwargs or {})
        self._points_to_evaluate = self._checked_points(points_to_evaluate)
        self._factory: Any = None
        self._optimizer: Any = None
        self._names: list[str] | None = None
        self._space: Any = None
        self._live: dict[str, Any] = {}
        if isinstance(optimizer, Optimizer):
            if space is not None and not _is_names(space):
                raise ConfigError(f"{owner}: with an optimizer instance, space must be None or the list of its "
                                  f"parameter names, got {type(space).__name__}")
            if self._optimizer_kwargs:
                raise ConfigError(f"{owner}: optimizer_kwargs build an optimizer; an optimizer instance is built "
                                  "already (pass its class or a configured optimizer instead)")
            self._names = None if space is None else list(space)
            self._optimizer = optimizer
        elif (inspect.isclass(optimizer) and issubclass(optimizer, Optimizer)) or isinstance(
                optimizer, ConfiguredOptimizer):
            self._factory = optimizer
            if isinstance(space, Mapping):
                space = convert_space(space, owner) if space else None
            elif space is not None and not isinstance(space, ng.p.Parameter):
                raise ConfigError(f"{owner}: space must be a dict of tune.* domains, a Nevergrad parametrization or "
                                  f"None, got {type(space).__name__}")
            self._space = space
        else:
            raise ConfigError(f"{owner}: optimizer must be a Nevergrad Optimizer class, a ConfiguredOptimizer (e.g. "
                              f"ng.optimizers.OnePlusOne) or an Optimizer instance, got {optimizer!r}")
        if self._optimizer is not None or self._space is not None:
            self._set_up()

    def _set_up(self) -> None:
        """Build the optimizer (unless given built), check it against the names, and queue the first points."""
        owner = type(self).__name__
        if self._optimizer is None:
            self._optimizer = self._factory(self._space, **self._optimizer_kwargs)
        self._take_default_metric()
        if self._names is not None and self._optimizer.dimension != len(self._names):
            raise ConfigError(f"{owner}: space names {len(self._names)} parameters, and the optimizer searches "
                              f"{self._optimizer.dimension} dimensions")
        # Nevergrad asks its suggestions last in, first out: suggest the last point first.
        for point in reversed(self._points_to_evaluate or []):
            self._suggest_point(point)

    def _suggest_point(self, point: dict[str, Any]) -> None:
        """Queue ``point`` (a config) as the optimizer's next candidate."""
        import numpy as np
        from nevergrad import p as ng_p

        parametrization = self._optimizer.parametrization
        if isinstance(parametrization, ng_p.Instrumentation):
            self._optimizer.suggest(**sp.flatten_config(point))
            return
        names = self._names if self._names is not None else list(parametrization.value)
        values = self._point_values(point, names)
        if self._names is not None:
            self._optimizer.suggest(np.asarray([values[name] for name in names], dtype=float))
        else:
            self._optimizer.suggest(values)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """As Ray's: with a space of its own, False (its own metric and mode are kept); else search ``config``
        with ``TuneConfig``'s ``metric``/``mode`` in place of its own, where given, and True."""
        if self.has_space():
            return False
        self._take_search_properties(metric, mode)
        self._space = convert_space(config, type(self).__name__)
        self._set_up()
        return True

    def has_space(self) -> bool:
        return self._optimizer is not None or self._space is not None

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """Ask the optimizer for the next candidate, as a config."""
        self._check_ready(self._optimizer is not None, "space")
        candidate = self._optimizer.ask()
        self._live[trial_id] = candidate
        if candidate.kwargs:
            values = dict(candidate.kwargs)
        elif self._names is not None:
            values = dict(zip(self._names, candidate.args[0], strict=True))
        else:
            values = dict(candidate.value)
        return self._config(values)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Tell the optimizer the trial's last metric (a trial with none is dropped untold)."""
        candidate = self._live.pop(trial_id, None)
        if candidate is None or not result or self._metric not in result:
            return
        self._optimizer.tell(candidate, self._loss(result[self._metric]))

    def describe(self) -> dict[str, Any]:
        return {"optimizer": repr(self._factory or self._optimizer), "optimizer_kwargs": self._optimizer_kwargs,
                "metric": self._metric, "mode": self._mode, "points_to_evaluate": self._points_to_evaluate}


def _is_names(space: Any) -> bool:
    return isinstance(space, Sequence) and not isinstance(space, (str, bytes)) and all(
        isinstance(name, str) for name in space)
