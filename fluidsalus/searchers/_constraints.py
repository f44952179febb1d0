"""Linear constraints on parameters and on outcomes, in Ax's notation, for the Optuna searcher.

Ax (and Ray's ``AxSearch``) take constraints as strings:

* a **parameter constraint** limits which configurations may be proposed: ``"x1 + x2 <= 2.0"``,
  ``"x3 >= x4"``, ``"2*x1 - 0.5*x2 <= 1"``;
* an **outcome constraint** limits which results count as feasible: ``"l2norm <= 1.25"``, ``"m1 >= 3"``.

Both are one linear inequality, parsed by :func:`parse_inequality` into a :class:`LinearInequality`
(``sum(weight * value) <= bound``). A side is a sum of terms ``[+|-] [number *] name`` and numbers; names are
parameter names (``"/"``-joined for nested keys) or result keys. Ax's relative outcome constraints
(``"m1 <= 5%"``, relative to a status-quo arm) have no meaning without that arm and are refused.

:class:`FeasibleSampler` wraps any Optuna sampler so that every configuration it proposes satisfies the parameter
constraints (see its docstring for how). Outcome constraints are set on each finished trial with Optuna's
``Trial.set_constraint`` (the violation: ``> 0`` infeasible), which Optuna's ``GPSampler`` models, as Ax's
Bayesian optimisation does.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler

from fluidsalus.errors import ConfigError

__all__ = ["FEASIBLE_DRAWS", "FeasibleSampler", "LinearInequality", "parse_inequality", "parse_inequalities"]

#: Draws of the wrapped sampler's own independent sampling (random draws: its start-up trials) that may be
#: redrawn when they break a parameter constraint, before the point is moved into the feasible region instead.
#: Redrawing keeps the start-up points spread over the feasible region as the sampler spreads them over the box:
#: if the constraints leave a share ``p`` of the box, all 100 draws miss with probability ``(1 - p) ** 100``
#: (0.6 % for ``p = 5 %``). Either way the point proposed is feasible.
FEASIBLE_DRAWS = 100

#: Relative floating-point slack of a constraint's test: a point on the boundary, computed in floating point,
#: may land a few units in the last place outside it. 1e-9 of the bound's scale is far above float64's rounding
#: (about 1e-16) and far below any meaningful distance between configurations.
REL_TOL = 1e-9

#: Halvings of the step towards the reference before the reference itself is taken: after 53 (float64's
#: mantissa bits) a step of at most 1 moves a point by less than the precision of its coordinates.
HALVINGS = 53

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_NAME = r"[A-Za-z_][\w./]*"
#: One term of a side: a sign, then ``number * name``, ``name`` or ``number``.
_TERM = re.compile(rf"\s*([+-])?\s*(?:({_NUMBER})\s*\*\s*({_NAME})|({_NAME})|({_NUMBER}))\s*")
_OPERATORS = ("<=", ">=")


@dataclass(frozen=True)
class LinearInequality:
    """``sum(weights[name] * value[name]) <= bound``.

    Attributes:
        weights: The coefficient of each name (no zero coefficients).
        bound: The right-hand side.
        text: The string it was parsed from, for messages.
    """

    weights: Mapping[str, float]
    bound: float
    text: str

    def lhs(self, values: Mapping[str, float]) -> float:
        """The left-hand side at ``values`` (every name must be in it)."""
        return math.fsum(w * float(values[name]) for name, w in self.weights.items())

    def violation(self, values: Mapping[str, float]) -> float:
        """How far ``values`` are outside: ``lhs - bound``; ``<= 0`` is feasible (Optuna's sign)."""
        return self.lhs(values) - self.bound

    def holds(self, values: Mapping[str, float]) -> bool:
        """Whether ``values`` satisfy it, up to :data:`REL_TOL` of its scale."""
        scale = max(1.0, abs(self.bound), *(abs(w * float(values[n])) for n, w in self.weights.items()))
        return self.violation(values) <= REL_TOL * scale


def _side(text: str, whole: str, field: str) -> tuple[dict[str, float], float]:
    """A side of an inequality: its weights and its constant."""
    if not text.strip():
        raise ConfigError(f"{field}: {whole!r} has an empty side; write e.g. 'x1 + x2 <= 2.0'")
    weights: dict[str, float] = {}
    constant = 0.0
    pos = 0
    first = True
    while pos < len(text):
        match = _TERM.match(text, pos)
        if match is None or match.end() == pos or (not first and match.group(1) is None):
            raise ConfigError(f"{field}: cannot read {whole!r} at {text[pos:].strip()!r}: write a linear inequality "
                              "such as 'x1 + 2*x2 <= 3' (terms 'number*name', 'name' or 'number' joined by + or -, "
                              "then <= or >=, then the same)")
        sign = -1.0 if match.group(1) == "-" else 1.0
        if match.group(5) is not None:
            constant += sign * float(match.group(5))
        else:
            name = match.group(3) or match.group(4)
            weight = sign * (float(match.group(2)) if match.group(2) is not None else 1.0)
            weights[name] = weights.get(name, 0.0) + weight
        pos = match.end()
        first = False
    return weights, constant


def parse_inequality(text: Any, field: str) -> LinearInequality:
    """Parse one constraint in Ax's notation (see the module docstring).

    Args:
        text: The constraint, e.g. ``"x1 + x2 <= 2.0"`` or ``"l2norm <= 1.25"``.
        field: The argument it came from, named in errors (e.g. ``"AxSearch: parameter_constraints"``).

    Returns:
        The inequality, as ``sum(weights * values) <= bound``.

    Raises:
        ConfigError: Not a str, not exactly one ``<=`` or ``>=``, a relative (``%``) bound, a term that cannot
            be read, or no name at all.
    """
    if not isinstance(text, str):
        raise ConfigError(f"{field}: each constraint must be a str such as 'x1 + x2 <= 2.0', got {text!r}")
    if "%" in text:
        raise ConfigError(f"{field}: {text!r} is relative to a status-quo configuration (Ax's '%' bound), which "
                          "fluidsalus does not have; give an absolute bound")
    found = [op for op in _OPERATORS if op in text]
    if len(found) != 1 or text.count(found[0]) != 1 or re.search(r"(?<![<>])=|<(?!=)|>(?!=)", text):
        raise ConfigError(f"{field}: {text!r} must hold exactly one '<=' or '>=' (e.g. 'x1 + x2 <= 2.0')")
    op = found[0]
    left, right = text.split(op)
    lw, lc = _side(left, text, field)
    rw, rc = _side(right, text, field)
    weights = dict(lw)
    for name, w in rw.items():
        weights[name] = weights.get(name, 0.0) - w
    bound = rc - lc
    if op == ">=":
        weights = {name: -w for name, w in weights.items()}
        bound = -bound
    weights = {name: w for name, w in weights.items() if w != 0.0}
    if not weights:
        raise ConfigError(f"{field}: {text!r} names no parameter or metric")
    return LinearInequality(weights=weights, bound=bound, text=text)


def parse_inequalities(texts: Any, field: str, names: Sequence[str] | None = None,
                       what: str = "numeric parameter") -> list[LinearInequality]:
    """Parse a list of constraints; with ``names``, every name they use must be one of them.

    Args:
        texts: None or a list of str.
        field: The argument, named in errors.
        names: The names allowed (None: any).
        what: What a name must be, for the error (``"float or int parameter"``).

    Returns:
        The inequalities, in order (empty for None).

    Raises:
        ConfigError: ``texts`` is not a list of str, one cannot be parsed, or it names an unknown name.
    """
    if texts is None:
        return []
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ConfigError(f"{field}: must be None or a list of str such as ['x1 + x2 <= 2.0'], got {texts!r}")
    parsed = [parse_inequality(text, field) for text in texts]
    if names is not None:
        for inequality in parsed:
            unknown = sorted(set(inequality.weights) - set(names))
            if unknown:
                raise ConfigError(f"{field}: {inequality.text!r} names {', '.join(map(repr, unknown))}, which is no "
                                  f"{what} of the search space; it has {sorted(names)}")
    return parsed


def _numeric(distribution: BaseDistribution) -> bool:
    return isinstance(distribution, (FloatDistribution, IntDistribution))


def snap(distribution: BaseDistribution, value: float, towards: float | None = None) -> float | int:
    """``value`` made a value of ``distribution``: inside its bounds and, for an integer or a stepped float, on
    its grid (``low + k * step``), rounded towards ``towards`` (to the nearest grid value when None).

    Args:
        distribution: A ``FloatDistribution`` or ``IntDistribution``.
        value: Any number.
        towards: The side to round to.

    Returns:
        A value Optuna's ``distribution`` contains.
    """
    low, high = distribution.low, distribution.high  # type: ignore[attr-defined]
    step = distribution.step if isinstance(distribution, (FloatDistribution, IntDistribution)) else None
    if isinstance(distribution, IntDistribution) or step is not None:
        step = step or 1
        k = (value - low) / step
        k = round(k) if towards is None else (math.floor(k) if towards < value else math.ceil(k))
        k = min(max(k, 0), math.floor((high - low) / step + REL_TOL))
        value = low + k * step
        return int(value) if isinstance(distribution, IntDistribution) else float(value)
    return float(min(max(value, low), high))


class FeasibleSampler(BaseSampler):
    """An Optuna sampler whose every proposal satisfies linear parameter constraints.

    It proposes every parameter of ``distributions`` at once (its relative search space): first the wrapped
    sampler's relative proposal (a Gaussian process's or TPE's choice), with the parameters it leaves out drawn
    by the wrapped sampler's independent sampling (random, in its start-up trials). A point that breaks a
    constraint is then made feasible:

    1. while the broken constraints involve only independently drawn parameters, those are drawn again, up to
       :data:`FEASIBLE_DRAWS` times;
    2. otherwise the point moves along the segment from it to ``reference``, a configuration inside every
       constraint, to the last point of that segment that satisfies them all (the feasible region, the box
       of the bounds cut by half-spaces, is convex, so that point exists and keeps as much of the proposal as
       any point of the segment can). Integer parameters are rounded towards ``reference``; if the rounded
       point breaks a constraint, the step is halved until it does not (at step 0 it is ``reference``).

    Args:
        base: The sampler that proposes (kept as ``base``).
        distributions: Every parameter of the search (flat names).
        constraints: Each ``sum(w * x) <= bound`` over numeric parameters of ``distributions``.
        seed: Seed of the search for ``reference`` (see :func:`feasible_point`).

    Raises:
        ConfigError: A constraint names a parameter that is not a float or int of ``distributions``, or no
            configuration satisfies them all.
    """

    def __init__(self, base: BaseSampler, distributions: Mapping[str, BaseDistribution],
                 constraints: Sequence[LinearInequality], seed: int | None = None) -> None:
        numeric = [name for name, d in distributions.items() if _numeric(d)]
        for inequality in constraints:
            unknown = sorted(set(inequality.weights) - set(numeric))
            if unknown:
                raise ConfigError(f"parameter_constraints: {inequality.text!r} names {', '.join(map(repr, unknown))}, "
                                  f"which is no float or int parameter of the search space; those are {numeric}")
        self.base = base
        self.distributions = dict(distributions)
        self.constraints = list(constraints)
        #: A configuration of the constrained parameters inside every constraint.
        self.reference = feasible_point(self.distributions, self.constraints, seed)
        self._names = sorted({name for c in self.constraints for name in c.weights})

    # ------------------------------------------------------------------ the feasibility rule

    def feasible(self, point: Mapping[str, Any]) -> bool:
        """Whether ``point`` (every constrained parameter) satisfies every constraint."""
        return all(c.holds(point) for c in self.constraints)

    def repair(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """The last feasible point on the segment from ``point`` to :attr:`reference` (step 2 of the class
        docstring); ``point`` itself when it is feasible.

        Args:
            point: A configuration inside the bounds (at least the constrained parameters).

        Returns:
            A feasible configuration, equal to ``point`` outside the constrained parameters.
        """
        if self.feasible(point):
            return dict(point)
        ref = self.reference
        direction = {n: float(point[n]) - ref[n] for n in self._names}
        step = 1.0
        for c in self.constraints:
            slope = math.fsum(w * direction[n] for n, w in c.weights.items())
            if slope > 0.0:
                step = min(step, max(0.0, (c.bound - c.lhs(ref)) / slope))
        for _ in range(HALVINGS):
            moved = self._moved(point, direction, step)
            if self.feasible(moved):
                return moved
            step /= 2
        return self._moved(point, direction, 0.0)

    def _moved(self, point: Mapping[str, Any], direction: Mapping[str, float], step: float) -> dict[str, Any]:
        """``point`` with each constrained parameter at ``reference + step * direction``, on its grid (rounded
        towards ``reference``) and inside its bounds."""
        moved = dict(point)
        for n in self._names:
            moved[n] = snap(self.distributions[n], self.reference[n] + step * direction[n],
                            towards=self.reference[n])
        return moved

    # ------------------------------------------------------------------ Optuna's sampler interface

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, BaseDistribution]:
        return dict(self.distributions)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        own = self.base.sample_relative(study, trial, self.base.infer_relative_search_space(study, trial))
        point = {name: own[name] for name in search_space if name in own}
        drawn = [name for name in search_space if name not in own]
        for name in drawn:
            point[name] = self.base.sample_independent(study, trial, name, search_space[name])
        redraw = [n for n in drawn if n in self._names]
        for _ in range(FEASIBLE_DRAWS):
            broken = [c for c in self.constraints if not c.holds(point)]
            if not broken or any(n not in redraw for c in broken for n in c.weights):
                break
            for name in redraw:
                point[name] = self.base.sample_independent(study, trial, name, search_space[name])
        return self.repair(point)

    def sample_independent(self, study: Any, trial: Any, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Any, trial: Any) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Sequence[float] | None) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


def feasible_point(distributions: Mapping[str, BaseDistribution], constraints: Sequence[LinearInequality],
                   seed: int | None = None) -> dict[str, float | int]:
    """A configuration of the constrained parameters that satisfies every constraint.

    It is the centre of the largest ball inside the constraints' half-spaces, with the centre within the bounds
    (a linear programme, solved with SciPy's HiGHS), so it lies well inside the region; integer parameters and
    stepped floats are rounded to the nearest value. If that rounding breaks a constraint, points are drawn
    uniformly in the bounds (``seed``), up to :data:`FEASIBLE_DRAWS` times the number of parameters.

    Raises:
        ConfigError: No configuration within the bounds satisfies every constraint.
    """
    import numpy as np
    from scipy.optimize import linprog

    if not constraints:
        return {}
    names = sorted({name for c in constraints for name in c.weights})
    bounds = [(float(distributions[n].low), float(distributions[n].high)) for n in names]  # type: ignore[attr-defined]
    # Variables: x (one per name), then r; maximise r subject to a.x + |a| r <= b, bounds, r >= 0.
    rows = [[c.weights.get(n, 0.0) for n in names] for c in constraints]
    a_ub = np.array([row + [math.hypot(*row)] for row in rows])
    b_ub = np.array([c.bound for c in constraints])
    cost = np.zeros(len(names) + 1)
    cost[-1] = -1.0
    solved = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[*bounds, (0.0, None)], method="highs")
    texts = [c.text for c in constraints]
    if solved.status == 2:  # the programme is infeasible: so are the constraints within the bounds
        raise ConfigError(f"parameter_constraints: no configuration within the parameters' bounds satisfies all of "
                          f"{texts}")
    if solved.status == 0:
        centre = {name: snap(distributions[name], value) for name, value in zip(names, solved.x[:-1], strict=True)}
        if all(c.holds(centre) for c in constraints):
            return centre
    rng = random.Random(seed)
    for _ in range(FEASIBLE_DRAWS * len(names)):
        point = {name: snap(distributions[name], rng.uniform(low, high))
                 for name, (low, high) in zip(names, bounds, strict=True)}
        if all(c.holds(point) for c in constraints):
            return point
    raise ConfigError(f"parameter_constraints: found no configuration within the parameters' bounds that satisfies "
                      f"all of {texts}")
