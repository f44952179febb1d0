"""HyperOpt's distributions that Optuna has none for, as a transform of one Optuna parameter.

Optuna's distributions are uniform or log-uniform, optionally stepped, but a log scale cannot be stepped (nor an
integer one with a step other than 1), and there is no normal distribution. HyperOpt has them, and so does Ray's
``HyperOptSearch``, which converts Tune's ``qloguniform``, ``qlograndint``, ``randn`` and ``qrandn`` into them.
Each becomes one Optuna parameter that Optuna samples, whose value is a monotone function of it, so that TPE models
a monotone transform of the value and a random draw has HyperOpt's distribution:

- ``qloguniform(low, high, q)``: the Optuna parameter is the value before rounding,
  ``FloatDistribution(low, high, log=True)`` under the parameter's own name; the value is it rounded to ``q`` as
  HyperOpt rounds (``round(x / q) * q``; an integer domain's as an ``int``, kept within the domain's values);
- ``normal(mu, sigma)`` (``randn``): the Optuna parameter is the value's quantile ``u``,
  ``FloatDistribution(QUANTILE_EPS, 1 - QUANTILE_EPS)`` under ``<name>:quantile``
  (:data:`QUANTILE_SUFFIX`), and the value is ``NormalDist(mu, sigma).inv_cdf(u)``: a uniform ``u`` gives a
  normal value. ``qnormal`` rounds it to ``q``;
- ``lognormal(mu, sigma)``: ``exp`` of that normal value; ``qlognormal`` rounds it to ``q``.

A normal with ``sigma = 0`` takes the value ``mu`` (``exp(mu)`` for a lognormal, rounded to ``q``) whatever its
quantile, as HyperOpt's random draws do (its TPE fails on it at its first suggestion). A negative ``sigma`` and a
``q <= 0`` are refused when the parameter is built (HyperOpt fails on a negative sigma and gives NaN for ``q = 0``;
a negative ``q`` rounds as ``|q|`` there, refused here as Tune's ``quniform`` refuses it).

A value given by ``points_to_evaluate`` becomes its Optuna parameter through the inverse (the normal's CDF), and
:class:`GivenValues` gives that trial the value itself (the round trip through the CDF is not exact to the bit).
Pure logic: no Ray, no study.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution

from fluidsalus import space as sp
from fluidsalus.errors import SpaceError

__all__ = ["MIDDLE_QUANTILE", "QUANTILE_EPS", "QUANTILE_SUFFIX", "GivenValues", "TransformedParam",
           "check_step", "from_domain", "optuna_distributions", "round_to"]

#: Appended to a normal parameter's name to name the Optuna parameter that holds its quantile.
QUANTILE_SUFFIX = ":quantile"
#: A quantile lies in ``[QUANTILE_EPS, 1 - QUANTILE_EPS]``: the inverse CDF needs ``0 < u < 1``, and this keeps
#: draws within about 7 standard deviations of the mean (HyperOpt's draws go further once in ~10^12 draws).
QUANTILE_EPS = 1e-12
#: The quantile a point's value of a normal with ``sigma = 0`` becomes (every quantile gives its mean).
MIDDLE_QUANTILE = 0.5
#: The kinds of transform: a rounded log-uniform value, a normal value, the exp of a normal value.
KINDS = ("qloguniform", "normal", "lognormal")


def round_to(value: float, q: Any) -> float:
    """``value`` rounded to a multiple of ``q``, as HyperOpt rounds its q-distributions (None: unchanged)."""
    return value if q is None else float(round(value / float(q)) * float(q))


def check_step(q: float | None) -> None:
    """Refuse a rounding step ``q`` that is not None or a finite number > 0 (raises ``ValueError``, naming q)."""
    if q is not None and not (math.isfinite(q) and q > 0):
        raise ValueError(f"q must be a finite number > 0, got {q!r}")


def _real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{value!r} is not a finite number")
    return float(value)


@dataclass(frozen=True)
class TransformedParam:
    """One parameter whose value is a monotone function of an Optuna parameter (see the module docstring).

    Args:
        kind: One of :data:`KINDS`.
        name: The parameter's own name (a configuration's ``"/"``-joined key, or a HyperOpt label).
        low: ``qloguniform``: the lower bound of the value before rounding; a normal: its mean ``mu``.
        high: ``qloguniform``: the upper bound; a normal: its standard deviation ``sigma``.
        q: The rounding step, or None.
        integer: The value is an ``int`` (Tune's ``qlograndint``).
        values: ``(first, last)``: the smallest and largest value the parameter takes, which a rounded value is
            kept within (Tune's ``qlograndint`` with bounds that are not multiples of ``q``), or None.
    """

    kind: str
    name: str
    low: float
    high: float
    q: float | None = None
    integer: bool = False
    values: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        """Raises ValueError naming the field: an unknown kind, a ``sigma`` that is not a finite number >= 0, a
        ``q`` that is not None or a finite number > 0."""
        if self.kind not in KINDS:
            raise ValueError(f"TransformedParam: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind != "qloguniform":
            for field, value in (("mu", self.low), ("sigma", self.high)):
                if not math.isfinite(value):
                    raise ValueError(f"{field} must be a finite number, got {value!r}")
            if self.high < 0:
                raise ValueError(f"sigma must be >= 0 (0: no spread, every draw at mu), got {self.high!r}")
        check_step(self.q)

    @property
    def optuna_name(self) -> str:
        """The name of the Optuna parameter: the parameter's own, or ``<name>:quantile`` for a normal one."""
        return self.name if self.kind == "qloguniform" else self.name + QUANTILE_SUFFIX

    @property
    def distribution(self) -> BaseDistribution:
        """The Optuna distribution of :attr:`optuna_name`."""
        if self.kind == "qloguniform":
            return FloatDistribution(self.low, self.high, log=True)
        return FloatDistribution(QUANTILE_EPS, 1.0 - QUANTILE_EPS)

    def value(self, param: float) -> Any:
        """The parameter's value for the Optuna parameter's ``param``."""
        if self.kind == "qloguniform":
            raw = float(param)
        else:
            raw = self.low if self.high == 0 else NormalDist(self.low, self.high).inv_cdf(float(param))
            if self.kind == "lognormal":
                raw = math.exp(raw)
        value = round_to(raw, self.q)
        if self.values is not None:
            value = min(max(value, self.values[0]), self.values[1])
        return int(value) if self.integer else value

    def param(self, value: Any) -> float:
        """The Optuna parameter that gives ``value`` (before rounding, for a rounded one).

        Raises:
            ValueError: ``value`` is not a finite number, or is outside what the parameter takes.
        """
        x = _real(value)
        if self.integer and x != int(x):
            raise ValueError(f"{value!r} is not an integer")
        if self.kind == "qloguniform":
            first, last = self.values or (self.low, self.high)
            if not first <= x <= last:
                raise ValueError(f"{value!r} is outside [{first:g}, {last:g}]")
            return min(max(x, self.low), self.high)
        if self.kind == "lognormal":
            if x < 0 or (x == 0 and self.q is None):
                raise ValueError(f"{value!r} is not > 0 (a lognormal value is positive)")
            # 0 is what qlognormal rounds every value below q / 2 to: take a value in the middle of those
            x = math.log(x if x > 0 else float(self.q) / 4)  # type: ignore[arg-type]
        if self.high == 0:  # every quantile gives the mean: the middle one stands for the point's value
            return MIDDLE_QUANTILE
        quantile = NormalDist(self.low, self.high).cdf(x)
        return min(max(quantile, QUANTILE_EPS), 1.0 - QUANTILE_EPS)


class GivenValues:
    """The values ``points_to_evaluate`` gave transformed parameters, so that a point's trial holds them exactly.

    :meth:`param` records each value under the Optuna parameter it became; :meth:`value` gives it back for that
    Optuna parameter (a random draw lands on it with probability 0), and the transform's value otherwise.
    """

    def __init__(self) -> None:
        self._given: dict[tuple[str, float], Any] = {}

    def param(self, transformed: TransformedParam, value: Any) -> float:
        """:meth:`TransformedParam.param`, remembered (raises its ``ValueError``).

        Two values can have the same Optuna parameter (quantiles beyond the bounds' ~7 standard deviations are
        clipped to a bound; a ``qlognormal``'s 0 and ``q / 4``; any two values of a normal with ``sigma = 0``):
        the later one's is moved by the smallest steps towards the middle of the distribution (from the middle,
        towards the upper bound) until it is one of its own, so that each point keeps its value.
        """
        param = transformed.param(value)
        given = int(value) if transformed.integer else float(value)
        bounds = transformed.distribution
        middle = (bounds.low + bounds.high) / 2  # type: ignore[attr-defined]
        towards = middle if param != middle else bounds.high  # type: ignore[attr-defined]
        while self._given.get((transformed.optuna_name, param), given) != given:
            param = math.nextafter(param, towards)
        self._given[(transformed.optuna_name, param)] = given
        return param

    def value(self, transformed: TransformedParam, param: float) -> Any:
        """The value a point gave for ``param``, or :meth:`TransformedParam.value`."""
        given = self._given.get((transformed.optuna_name, float(param)))
        return transformed.value(param) if given is None else given


def from_domain(path: str, domain: Any) -> TransformedParam | None:
    """The transformed parameter Ray's ``HyperOptSearch`` makes of a Tune domain Optuna has no distribution for
    (``qloguniform``, ``qlograndint`` with ``q > 1``, ``randn``, ``qrandn``), or None for any other domain.

    Ray converts them to HyperOpt's ``hp.qloguniform(path, log(lower), log(upper), q)`` (in ``scope.int`` for an
    integer domain), ``hp.normal(path, mean, sd)`` and ``hp.qnormal(path, mean, sd, q)``.
    """
    if isinstance(domain, sp.Normal):
        return TransformedParam("normal", path, domain.mean, domain.sd, q=domain.q)
    if isinstance(domain, sp.Float) and domain.log and domain.q is not None:
        return TransformedParam("qloguniform", path, domain.lower, domain.upper, q=domain.q)
    if isinstance(domain, sp.Integer) and domain.log and domain.q is not None and domain.q > 1:
        first, last, _ = domain.inclusive_bounds()
        return TransformedParam("qloguniform", path, float(domain.lower), float(domain.upper), q=float(domain.q),
                                integer=True, values=(float(first), float(last)))
    return None


def optuna_distributions(space: dict[str, Any]) -> tuple[dict[str, BaseDistribution], dict[str, TransformedParam]]:
    """:func:`fluidsalus.space.to_optuna_distributions`, with the domains :func:`from_domain` transforms.

    Returns:
        ``(distributions, transformed)``: the Optuna distributions by Optuna parameter name, in the order
        ``to_optuna_distributions`` gives, and the transformed parameters by the configuration's key.

    Raises:
        SpaceError: The space is invalid or a parameter has no Optuna equivalent; the message names it.
    """
    domains, _ = sp.split_constants(space)
    distributions: dict[str, BaseDistribution] = {}
    transformed: dict[str, TransformedParam] = {}
    plain = sp.to_optuna_distributions(sp.unflatten({path: domain for path, domain in domains.items()
                                                     if from_domain(path, domain) is None}))
    for path in sorted(domains, key=lambda key: key.count("/")):  # to_optuna_distributions's order
        param = from_domain(path, domains[path])
        if param is None:
            distributions[path] = plain[path]
        else:
            if param.optuna_name != path and param.optuna_name in domains:
                raise SpaceError(f"parameter '{path}': {domains[path]!r} is searched as the Optuna parameter "
                                 f"'{param.optuna_name}', which is also a key of the space; rename that key")
            transformed[path] = param
            distributions[param.optuna_name] = param.distribution
    return distributions, transformed
