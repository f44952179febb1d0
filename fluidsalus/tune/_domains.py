"""Search-space values that come from elsewhere, turned into fluidsalus domains.

* Ray Tune's own domains (``ray.tune.uniform(...)`` left in a script whose other imports were changed) are
  translated into the equal fluidsalus domain, with one ``UserWarning`` naming them. fluidsalus's domains
  mirror Ray's semantics (bounds, quantization, log sampling), so the translation is exact.
* Optuna distributions (an ``OptunaSearch(space={...})`` given as a dict of ``optuna.distributions``) are
  converted into the fluidsalus domain that samples the same values, or refused with a
  :class:`~fluidsalus.errors.ConfigError` naming the parameter where there is none.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError, SpaceError

__all__ = ["from_optuna_distributions", "is_ray_domain", "translate_ray_values"]

#: Module of Ray Tune's domain classes.
_RAY_SAMPLE_MODULE = "ray.tune.search.sample"
#: Relative tolerance when checking that a bound is a multiple of an Optuna ``step``.
_STEP_TOLERANCE = 1e-9


def is_ray_domain(value: Any) -> bool:
    """Whether ``value`` is one of Ray Tune's domain objects (``ray.tune.search.sample.Domain``)."""
    return any(cls.__module__ == _RAY_SAMPLE_MODULE for cls in type(value).__mro__)


def _ray_domain(value: Any, path: str) -> sp.Domain:
    """The fluidsalus domain equal to one Ray domain."""
    from ray.tune.search import sample as rs

    sampler = value.get_sampler() if hasattr(value, "get_sampler") else None
    q = None
    if isinstance(sampler, rs.Quantized):
        q, sampler = sampler.q, sampler.get_sampler()
    if isinstance(value, rs.Categorical):
        return sp.Categorical([translate_ray_values(c, path) for c in value.categories])
    if isinstance(value, rs.Function):
        return sp.Function(value.func)
    if isinstance(value, rs.Float):
        if isinstance(sampler, rs.Normal):
            return sp.Normal(sampler.mean, sampler.sd, q=q)
        return sp.Float(value.lower, value.upper, log=isinstance(sampler, rs.LogUniform), q=q)
    if isinstance(value, rs.Integer):
        return sp.Integer(value.lower, value.upper, log=isinstance(sampler, rs.LogUniform), q=q)
    raise ConfigError(
        f"parameter '{path}': Ray Tune domain {type(value).__name__} has no fluidsalus equivalent; build it with "
        "fluidsalus.tune's functions (tune.uniform, tune.choice, ...)"
    )


def _translate(value: Any, path: str, found: list[str]) -> Any:
    if is_ray_domain(value):
        found.append(path or "<root>")
        try:
            return _ray_domain(value, path)
        except SpaceError as exc:  # (an argument Ray took and fluidsalus's domain refuses: qrandn's q=0)
            raise SpaceError(f"parameter '{path or '<root>'}': Ray Tune's {exc}") from exc
    if isinstance(value, dict):
        return {k: _translate(v, f"{path}/{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, list):
        return [_translate(v, f"{path}/{i}", found) for i, v in enumerate(value)]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_translate(v, f"{path}/{i}", found) for i, v in enumerate(value))
    return value


def translate_ray_values(value: Any, where: str = "param_space") -> Any:
    """Replace Ray Tune domains anywhere in ``value`` (dicts, lists, tuples) by fluidsalus domains.

    Args:
        value: A search space, a ``hyperparam_mutations`` dict, a list of categories, ...
        where: What ``value`` is, for the warning.

    Returns:
        ``value`` itself when it holds no Ray domain, else a translated copy.
    """
    found: list[str] = []
    out = _translate(value, "", found)
    if not found:
        return value
    warnings.warn(
        f"fluidsalus.tune: {where} holds Ray Tune domains ({', '.join(found)}); they were translated into the "
        "equal fluidsalus domains. Change `from ray import tune` to `from fluidsalus import tune`.",
        UserWarning,
        stacklevel=3,
    )
    return out


def _multiple(value: float, step: float) -> bool:
    ratio = value / step
    return math.isclose(ratio, round(ratio), rel_tol=_STEP_TOLERANCE, abs_tol=_STEP_TOLERANCE)


def _from_optuna(path: str, dist: Any, owner: str) -> sp.Domain:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return sp.choice(list(dist.choices))
    if isinstance(dist, FloatDistribution):
        if dist.step is None:
            return sp.loguniform(dist.low, dist.high) if dist.log else sp.uniform(dist.low, dist.high)
        if not (_multiple(dist.low, dist.step) and _multiple(dist.high, dist.step)):
            raise ConfigError(
                f"{owner}: parameter '{path}': {dist!r} steps from low={dist.low}; fluidsalus's quniform needs "
                "both bounds to be multiples of the step. Use bounds that are multiples of step."
            )
        return sp.quniform(dist.low, dist.high, dist.step)
    if isinstance(dist, IntDistribution):
        if dist.step == 1:
            # fluidsalus's randint excludes its upper bound; Optuna's high is included.
            return sp.lograndint(dist.low, dist.high + 1) if dist.log else sp.randint(dist.low, dist.high + 1)
        if dist.low % dist.step:
            raise ConfigError(
                f"{owner}: parameter '{path}': {dist!r} steps from low={dist.low}; fluidsalus's qrandint draws "
                "multiples of the step. Use a low that is a multiple of step."
            )
        return sp.qrandint(dist.low, dist.high, dist.step)
    raise ConfigError(
        f"{owner}: parameter '{path}': {type(dist).__name__} is not an Optuna distribution fluidsalus can read "
        "(FloatDistribution, IntDistribution, CategoricalDistribution)"
    )


def from_optuna_distributions(space: Mapping[str, Any], owner: str = "OptunaSearch") -> dict[str, Any]:
    """Convert ``{"a/b": optuna distribution or constant}`` into a nested fluidsalus search space.

    Args:
        space: Flattened keys (``"/"``-joined, as Ray's ``OptunaSearch`` uses) or nested dicts, to Optuna
            distributions. Other values are kept as they are (fluidsalus domains, constants).
        owner: The class named in error messages.

    Returns:
        The nested search space.

    Raises:
        ConfigError: A distribution has no fluidsalus equivalent; the message names the parameter.
    """
    from optuna.distributions import BaseDistribution

    flat: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, BaseDistribution):
                flat[path] = _from_optuna(path, value, owner)
            elif isinstance(value, Mapping) and value and sp.GRID_SEARCH_KEY not in value:
                walk(value, path + sp.PATH_SEPARATOR)
            else:
                flat[path] = value

    walk(space, "")
    return sp.unflatten(flat)
