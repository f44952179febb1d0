"""``AxSearch`` (``ray.tune.search.ax.AxSearch``) with Ray's signature, run by Optuna's ``GPSampler``.

Ray's ``AxSearch`` drives Ax's ``AxClient``, whose default generation strategy is Bayesian optimisation with a
Gaussian process (BoTorch) after quasi-random start-up trials. Optuna's ``GPSampler`` is the same kind of
search (a Gaussian process with a log expected improvement acquisition, random start-up trials), so a Ray Tune
script that uses ``AxSearch`` runs with only its imports changed, and Ax (with BoTorch and GPyTorch) is not
needed: fluidsalus runs an :class:`~fluidsalus.tune.search.optuna.OptunaSearch` whose sampler is
``GPSampler(seed=random_seed)``.

Ax's constraints keep their meaning:

* ``parameter_constraints`` (``["x1 + x2 <= 2.0", "x3 >= x4", "2*x1 - x2 <= 1"]``): every configuration proposed
  satisfies them. The sampler's proposal is kept when it does; otherwise it moves towards a configuration inside
  every constraint until it satisfies them all (:class:`fluidsalus.searchers._constraints.FeasibleSampler`). A
  constraint may name float and int parameters; no configuration within the bounds satisfying them all is a
  ``ConfigError``, as are ``points_to_evaluate`` that break one.
* ``outcome_constraints`` (``["l2norm <= 1.25"]``): each finished trial's last result gives the violation of each
  (as Ray's ``AxSearch`` hands Ax the last result), which the Gaussian process models: it proposes where the
  objective is good **and** the constraints likely hold, as Ax does. A trial whose last result lacks a constrained
  key or holds NaN is told ``FAIL`` (Ray's ``AxSearch`` abandons it). Relative constraints (``"m1 <= 5%"``) need
  Ax's status-quo arm and are refused.

The space is Ray's (``param_space`` or a dict of ``tune.*`` domains, converted by Ray's rules: no grid, no
normal distribution, a quantization dropped with a warning) or Ax's own list of parameter dicts (``"name"``,
``"type"`` ``"range"``/``"choice"``/``"fixed"``, ``"bounds"``, ``"values"``, ``"value"``, ``"value_type"``,
``"log_scale"``): a range becomes ``uniform``/``loguniform`` (``randint``/``lograndint`` over the inclusive
bounds for ints), a choice ``choice`` and a fixed value a constant.

Differences: the acquisition and the draws are Optuna's, so a seed gives other configurations than Ax would;
start-up trials are random draws (``GPSampler``'s 10), not a Sobol sequence; an ordered choice
(``"is_ordered"``) is searched as unordered categories. ``ax_client`` (an ``AxClient`` of your own) cannot be
driven and is refused, as are the ``AxClient`` arguments that take Ax objects (``generation_strategy``,
``db_settings``, ``early_stopping_strategy``, ``global_stopping_strategy``); ``random_seed`` seeds the search;
``enforce_sequential_optimization``, ``verbose_logging``, ``torch_device`` and ``suppress_storage_errors`` change
nothing here.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._constraints import parse_inequalities
from fluidsalus.tune.search._model_space import model_space
from fluidsalus.tune.search.optuna import OptunaSearch, gp_sampler, single_objective

__all__ = ["AxSearch"]

#: ``AxClient`` arguments (``**ax_kwargs``) that take Ax's own objects: refused, there is no Ax here.
AX_OBJECT_KWARGS = ("generation_strategy", "db_settings", "early_stopping_strategy", "global_stopping_strategy")
#: ``AxClient`` arguments that change nothing about which configurations are proposed: accepted and not used.
AX_IGNORED_KWARGS = ("enforce_sequential_optimization", "verbose_logging", "torch_device", "suppress_storage_errors")
#: The keys of an Ax parameter dict fluidsalus reads (``"is_ordered"``, ``"sort_values"`` and ``"digits"`` are
#: accepted and not used).
AX_PARAMETER_KEYS = ("name", "type", "bounds", "values", "value", "value_type", "log_scale", "is_ordered",
                     "sort_values", "digits")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _ax_parameter(index: int, parameter: Any) -> tuple[str, Any]:
    """One Ax parameter dict as a (flat name, fluidsalus domain or constant) pair."""
    where = f"AxSearch: space[{index}]"
    if not isinstance(parameter, Mapping):
        raise ConfigError(f"{where} must be a dict such as {{'name': 'x1', 'type': 'range', 'bounds': [0.0, 1.0]}}, "
                          f"got {parameter!r}")
    unknown = sorted(set(parameter) - set(AX_PARAMETER_KEYS))
    if unknown:
        raise ConfigError(f"{where} has {unknown}; fluidsalus reads {list(AX_PARAMETER_KEYS)} (Ax's fidelity, task "
                          "and hierarchical parameters have no equivalent here)")
    name, kind = parameter.get("name"), parameter.get("type")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: 'name' must be a non-empty str, got {name!r}")
    if kind == "fixed":
        if "value" not in parameter:
            raise ConfigError(f"{where} ({name!r}): a fixed parameter needs 'value'")
        return name, parameter["value"]
    if kind == "choice":
        values = parameter.get("values")
        if not isinstance(values, Sequence) or isinstance(values, str) or not values:
            raise ConfigError(f"{where} ({name!r}): a choice parameter needs 'values', a non-empty list, "
                              f"got {values!r}")
        return name, sp.choice(list(values))
    if kind != "range":
        raise ConfigError(f"{where} ({name!r}): 'type' must be 'range', 'choice' or 'fixed', got {kind!r}")
    bounds = parameter.get("bounds")
    if (not isinstance(bounds, Sequence) or isinstance(bounds, str) or len(bounds) != 2
            or not all(_is_number(b) for b in bounds) or not bounds[0] < bounds[1]):
        raise ConfigError(f"{where} ({name!r}): 'bounds' must be [lower, upper] with lower < upper, got {bounds!r}")
    value_type = parameter.get("value_type")
    if value_type is None:  # Ax infers it from the bounds
        value_type = "int" if all(isinstance(b, numbers.Integral) for b in bounds) else "float"
    if value_type not in ("int", "float"):
        raise ConfigError(f"{where} ({name!r}): 'value_type' of a range must be 'int' or 'float', got {value_type!r}")
    log = parameter.get("log_scale", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where} ({name!r}): 'log_scale' must be True or False, got {log!r}")
    lower, upper = bounds
    if value_type == "int":
        if not all(float(b).is_integer() for b in bounds):
            raise ConfigError(f"{where} ({name!r}): an int range needs whole bounds, got {bounds!r}")
        lower, upper = int(lower), int(upper) + 1  # Ax's bounds are inclusive, randint's upper is not
        return name, sp.lograndint(lower, upper) if log else sp.randint(lower, upper)
    return name, sp.loguniform(float(lower), float(upper)) if log else sp.uniform(float(lower), float(upper))


def ax_space(parameters: Sequence[Any]) -> dict[str, Any]:
    """Ax's list of parameter dicts as a fluidsalus space (``"/"`` in a name nests it, as Ray names them).

    Raises:
        ConfigError: A parameter dict that is not one of Ax's kinds, or a name given twice.
    """
    flat: dict[str, Any] = {}
    for index, parameter in enumerate(parameters):
        name, domain = _ax_parameter(index, parameter)
        if name in flat:
            raise ConfigError(f"AxSearch: space names {name!r} twice")
        flat[name] = domain
    return sp.unflatten(flat)


class AxSearch(OptunaSearch):
    """Bayesian optimisation as Ax runs it (``ray.tune.search.ax.AxSearch``), by Optuna's ``GPSampler``, with
    Ax's parameter and outcome constraints (see the module docstring).

    Args:
        space: None (use ``param_space``), a dict of ``tune.*`` domains, or Ax's list of parameter dicts.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configurations to run first; each must satisfy ``parameter_constraints``.
        parameter_constraints: Linear inequalities over float and int parameters (``"x1 + x2 <= 2.0"``).
        outcome_constraints: Linear inequalities over result keys (``"l2norm <= 1.25"``).
        ax_client: Must be None: an ``AxClient`` of your own cannot be driven here.
        **ax_kwargs: ``AxClient``'s arguments: ``random_seed`` seeds the search; see the module docstring.

    Raises:
        ConfigError: An argument out of range; the message names it.
    """

    def __init__(
        self,
        space: dict[str, Any] | list[dict[str, Any]] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        parameter_constraints: list[str] | None = None,
        outcome_constraints: list[str] | None = None,
        ax_client: Any = None,
        **ax_kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        single_objective(owner, "Ax through AxSearch", metric, mode)
        if ax_client is not None:
            raise ConfigError(f"{owner}: ax_client cannot be used: fluidsalus runs AxSearch as Optuna's GPSampler, "
                              "without Ax; give the experiment's space, metric, mode and constraints to AxSearch")
        for key in ax_kwargs:
            if key in AX_OBJECT_KWARGS:
                raise ConfigError(f"{owner}: {key} takes an Ax object, and fluidsalus runs AxSearch without Ax; "
                                  "leave it out")
            if key != "random_seed" and key not in AX_IGNORED_KWARGS:
                raise ConfigError(f"{owner}: {key!r} is no argument of AxClient; it takes random_seed, "
                                  f"{', '.join(AX_IGNORED_KWARGS)} and {', '.join(AX_OBJECT_KWARGS)}")
        seed = ax_kwargs.get("random_seed")
        if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0):
            raise ConfigError(f"{owner}: random_seed must be None or an int >= 0 (got {seed!r})")
        if isinstance(space, Sequence) and not isinstance(space, str):
            space = ax_space(space)
        elif space is not None and not isinstance(space, Mapping):
            raise ConfigError(f"{owner}: space must be None, a dict of tune.* domains or Ax's list of parameter "
                              f"dicts (got {type(space).__name__})")
        # Parsed here so that a malformed constraint fails at once; the names are checked against the space the
        # search runs on, when the Tuner starts.
        parse_inequalities(parameter_constraints, f"{owner}: parameter_constraints")
        parse_inequalities(outcome_constraints, f"{owner}: outcome_constraints")
        seed = None if seed is None else int(seed)
        super().__init__(space=space or None, metric=metric, mode=mode, points_to_evaluate=points_to_evaluate,
                         sampler=gp_sampler(seed), seed=seed)
        if self.space:
            self.space = self.prepare_space(self.space)
        self.parameter_constraints = None if parameter_constraints is None else list(parameter_constraints)
        self.outcome_constraints = None if outcome_constraints is None else list(outcome_constraints)
        self.ax_kwargs = dict(ax_kwargs)

    def prepare_space(self, space: dict[str, Any]) -> dict[str, Any]:
        """Ray's conversion of a space for Ax: floats, ints and categories; a quantization is dropped.

        Raises:
            ConfigError: A grid, or a parameter of another kind (a normal distribution, ``sample_from``).
        """
        return model_space(type(self).__name__, "Ax", space)

    def describe(self) -> dict[str, Any]:
        return {"space": self.space, "metric": self._metric, "mode": self._mode,
                "points_to_evaluate": self.points_to_evaluate, "parameter_constraints": self.parameter_constraints,
                "outcome_constraints": self.outcome_constraints, **self.ax_kwargs}
