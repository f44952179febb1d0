"""Search spaces: Ray Tune's sampling functions, variant generation and conversion to Optuna.

The public functions mirror ``ray.tune`` (Ray 2.x): :func:`uniform`, :func:`quniform`, :func:`loguniform`,
:func:`qloguniform`, :func:`randn`, :func:`qrandn`, :func:`randint`, :func:`qrandint`, :func:`lograndint`,
:func:`qlograndint`, :func:`choice`, :func:`grid_search` and :func:`sample_from`, with Ray's bounds (for
example ``randint`` excludes ``upper``, ``qrandint`` includes it unless ``q == 1``). Unlike Ray, every
domain checks its arguments when it is built and raises :class:`~fluidsalus.errors.SpaceError` naming the
function, the argument and what is allowed.

:func:`iter_variants` and :func:`generate_variants` resolve a space into concrete configurations with the
semantics of Ray's ``BasicVariantGenerator``:

* grid searches (anywhere in nested dicts and lists) are expanded as a cross product. The grid parameters
  are ordered by their key path and the *first* one varies fastest, as in Ray: for
  ``{"a": grid_search([1, 2]), "b": grid_search(["x", "y"])}`` the order is ``(1, x), (2, x), (1, y),
  (2, y)``;
* the whole grid is repeated ``num_samples`` times (``-1``: forever) and random domains are sampled anew
  for every variant, in key-path order (depth first, in insertion order) from one
  ``numpy.random.default_rng(seed)``. The random draws are made with the same NumPy calls and in the same
  order as Ray's, so for a given seed the configurations equal those of Ray's ``generate_variants`` with
  ``random_state=numpy.random.default_rng(seed)``;
* :func:`sample_from` functions run once the rest of their variant is drawn (the domains inside grid values
  and ``choice`` categories too), as Ray's Tuner computes them on each trial's configuration, in repeated
  passes until every function whose inputs are known has run (one that reads another's value waits for it).
  A function is called as Ray 2.60's Tuner calls it: ``func(config)``, the variant as a dict (item access,
  ``config["a"]``); if that raises ``KeyError`` or ``AttributeError``, as ``func(spec)``, where ``spec``
  gives the variant under ``config`` with attribute or item access (``spec.config.a`` or
  ``spec["config"]["a"]``), logging :data:`SPEC_DEPRECATED`; a function of no argument as ``func()``;
* values that come out of a grid, a ``choice`` or a ``sample_from`` and hold further domains or grids are
  resolved in turn (Ray's ``generate_variants`` does the same; Ray 2.60's Tuner leaves a domain or grid that a
  ``sample_from`` returns in the trial's configuration as it is);
* constants are deep-copied into each variant; sampled values are plain Python objects (``float``,
  ``int``, ``str``, ...), never NumPy scalars.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import logging
import math
import numbers
import reprlib
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fluidsalus.errors import SpaceError

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LOG_BASE",
    "GRID_SEARCH_KEY",
    "INFINITE_SAMPLES",
    "PATH_SEPARATOR",
    "Categorical",
    "Domain",
    "Float",
    "Function",
    "Integer",
    "Normal",
    "choice",
    "count_variants",
    "flatten_config",
    "flatten_space",
    "generate_variants",
    "grid_search",
    "has_grid",
    "holds_domains",
    "iter_variants",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "put_functions_back",
    "split_constants",
    "take_functions",
    "to_optuna_distribution",
    "to_optuna_distributions",
    "to_python",
    "uniform",
    "unflatten",
    "validate_space",
    "with_placeholders",
]

#: Separator of nested keys in flattened spaces (``"model/lr"``), as in Ray's ``OptunaSearch``.
PATH_SEPARATOR = "/"
#: The only key of a grid-search dict: ``{"grid_search": [values]}``.
GRID_SEARCH_KEY = "grid_search"
#: ``num_samples`` value that asks for an endless stream of variants.
INFINITE_SAMPLES = -1
#: Default ``base`` of the log-scale functions. Kept for Ray's signatures; log-uniform sampling does not
#: depend on the base, so it is checked but not used.
DEFAULT_LOG_BASE = 10
#: Ray 2.60's warning where ``base`` is given to a log-scale function (``loguniform``, ``qloguniform``,
#: ``lograndint``, ``qlograndint``) or builder (``Float.loguniform``, ``Integer.loguniform``), at construction.
BASE_DEPRECATED = "The `base` argument is deprecated. Please remove it as it is not actually needed in this method."
#: Ray 2.60's warning, logged at WARNING for each value drawn, where a :func:`sample_from` function works only on the
#: spec (``spec.config.a``), not on the config itself (``func(config)`` raised ``KeyError`` or ``AttributeError``).
SPEC_DEPRECATED = ("sample_from functions that take a spec dict are deprecated. Please update your function to work "
                   "with the config dict directly.")
#: Key under which :func:`sample_from` functions find the variant in their ``spec`` argument.
_SPEC_CONFIG_KEY = "config"
#: A value produced by a grid, ``choice`` or ``sample_from`` may itself hold domains; this bounds how many
#: times such values may nest (it only stops runaway self-producing ``sample_from`` functions).
_MAX_NESTING_DEPTH = 64
#: Module of Ray Tune's domain classes, to recognise a Ray domain mixed into a fluidsalus space.
_RAY_SAMPLE_MODULE = "ray.tune.search.sample"
#: Name of the root of a space in messages.
_ROOT_NAME = "<root>"

Path = tuple[Any, ...]


# --------------------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------------------


def _short(value: Any) -> str:
    """``repr`` of ``value``, shortened so that messages stay readable."""
    return reprlib.repr(value)


def _call_text(fn: str, **kwargs: Any) -> str:
    """``"uniform(lower=5, upper=1)"``: the call that built a domain, for messages and ``repr``."""
    args = ", ".join(f"{name}={_short(value)}" for name, value in kwargs.items())
    return f"{fn}({args})"


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_real(call: str, name: str, value: Any, *, finite: bool = True) -> float:
    """Return ``value`` as a float or raise a SpaceError naming ``name``."""
    if not _is_real(value):
        raise SpaceError(f"{call}: {name} must be a real number, got {type(value).__name__}")
    result = float(value)
    if finite and not math.isfinite(result):
        raise SpaceError(f"{call}: {name} must be finite, got {result}")
    return result


def _check_int(call: str, name: str, value: Any) -> int:
    """Return ``value`` as an int (integral floats such as ``1e3`` are accepted) or raise a SpaceError."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if _is_real(value) and math.isfinite(float(value)) and float(value).is_integer():
        return int(value)
    raise SpaceError(f"{call}: {name} must be an integer, got {_short(value)}")


def _check_positive_q(call: str, value: Any, *, integer: bool) -> float | int:
    q = _check_int(call, "q", value) if integer else _check_real(call, "q", value)
    if q <= 0:
        raise SpaceError(f"{call}: q must be > 0, got {q}")
    return q


def _deprecation_category() -> type[Warning]:
    """Ray's ``RayDeprecationWarning`` (a ``DeprecationWarning``, which Ray shows once per module) where Ray is
    loaded (``fluidsalus.tune`` loads it), so a filter on Ray's category catches it; a plain ``DeprecationWarning``
    otherwise (this module imports without Ray)."""
    annotations = sys.modules.get("ray.util.annotations")
    category = getattr(annotations, "RayDeprecationWarning", DeprecationWarning)
    return category if isinstance(category, type) and issubclass(category, Warning) else DeprecationWarning


def _given_base(base: float | None) -> float:
    """``base`` of a public log-scale function or builder: given, it raises Ray's deprecation warning
    (:data:`BASE_DEPRECATED`) at the caller's line; not given (None), :data:`DEFAULT_LOG_BASE`."""
    if base is None:
        return DEFAULT_LOG_BASE
    warnings.warn(BASE_DEPRECATED, _deprecation_category(), stacklevel=3)
    return base


def _check_base(call: str, base: Any) -> float:
    value = _check_real(call, "base", base)
    if value <= 0 or value == 1:
        raise SpaceError(
            f"{call}: base must be > 0 and != 1, got {value} (the base does not change log-uniform "
            "sampling; it is only checked)"
        )
    return value


def _divisible(value: float, q: float) -> bool:
    """Ray's test that a float bound lies on the grid of multiples of ``q``."""
    scaled = value / q
    return math.isclose(scaled, round(scaled))


def to_python(value: Any) -> Any:
    """Turn NumPy scalars into Python objects and spec views into plain dicts (configurations are JSON-stored)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, _ConfigView):
        return {key: to_python(item) for key, item in dict.items(value)}
    return value


# --------------------------------------------------------------------------------------------------------
# Domains
# --------------------------------------------------------------------------------------------------------


class _LegacyNumpyRng:
    """A legacy ``RandomState`` (or NumPy's global one, ``np.random``) with the ``Generator`` method names the
    domains draw with (``integers`` is ``randint`` there), so :meth:`Domain.sample` takes what Ray's takes."""

    def __init__(self, legacy: Any) -> None:
        self._legacy = legacy

    def integers(self, low: int, high: int, size: int) -> Any:
        return self._legacy.randint(low, high, size=size)

    def __getattr__(self, name: str) -> Any:  # uniform, normal, choice: the same names in both APIs
        return getattr(self._legacy, name)


def numpy_rng(random_state: Any = None) -> Any:
    """What a domain draws from for Ray's ``random_state``: a ``Generator`` as it is, an int seeds a new one, a
    legacy ``RandomState`` is adapted, and None draws from NumPy's global random state (so ``np.random.seed``
    makes ``sample()`` repeatable, as in Ray).

    Raises:
        SpaceError: ``random_state`` is none of these.
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None:
        return _LegacyNumpyRng(np.random)
    if isinstance(random_state, np.random.RandomState):
        return _LegacyNumpyRng(random_state)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) and random_state >= 0:
        return np.random.default_rng(int(random_state))
    raise SpaceError(f"random_state must be None, an int >= 0, a numpy Generator or RandomState, got "
                     f"{random_state!r}")


class Domain:
    """A parameter to sample: the base class of :class:`Float`, :class:`Integer`, :class:`Normal`,
    :class:`Categorical` and :class:`Function`.

    Domains are immutable once built; copying a space (``copy.deepcopy``) shares them. :meth:`sample` and the
    builders (``Float(0, 1).loguniform()``, ``.quantized(q)``, ...) have Ray's signatures, for code that draws a
    configuration by hand or converts a space; the searchers draw with :meth:`draw`.
    """

    def draw(self, rng: np.random.Generator, spec: Mapping[str, Any] | None = None) -> Any:
        """Draw one value.

        Args:
            rng: The random generator to draw from.
            spec: The variant being built, as ``{"config": {...}}``; only :class:`Function` reads it.

        Returns:
            A plain Python value (never a NumPy scalar).
        """
        raise NotImplementedError

    def sample(self, config: Mapping[str, Any] | None = None, size: int = 1, random_state: Any = None) -> Any:
        """Draw ``size`` values (Ray's ``Domain.sample``).

        Args:
            config: The configuration a :class:`Function` is called with (and its spec's ``config``); the
                others ignore it.
            size: How many values.
            random_state: None (NumPy's global random state), an int seed, a ``Generator`` or a ``RandomState``.

        Returns:
            One value when ``size`` is 1, else a list of ``size`` values.

        Raises:
            SpaceError: ``size`` is not an int >= 1, or ``random_state`` is not one of the above.
        """
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise SpaceError(f"{self!r}.sample: size must be an int >= 1, got {size!r}")
        rng = numpy_rng(random_state)
        spec = {_SPEC_CONFIG_KEY: dict(config)} if isinstance(config, Mapping) else None
        values = [self.draw(rng, spec) for _ in range(int(size))]
        return values[0] if size == 1 else values

    def is_grid(self) -> bool:
        """Ray's: whether it is a grid search (a domain never is; ``grid_search`` gives a dict)."""
        return False

    def is_function(self) -> bool:
        """Ray's: whether it is a :func:`sample_from`."""
        return False

    @property
    def domain_str(self) -> str:
        """Ray's: the domain's text."""
        return repr(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Domain:
        return self

    def __copy__(self) -> Domain:
        return self


class Float(Domain):
    """A float drawn uniformly or log-uniformly in ``[lower, upper]``, optionally quantized to ``q``.

    This is what :func:`uniform`, :func:`quniform`, :func:`loguniform` and :func:`qloguniform` return.

    Args:
        lower: Lower bound (finite; ``> 0`` when ``log``).
        upper: Upper bound (finite, ``> lower``).
        log: Sample log-uniformly.
        q: Quantization step: values are rounded to a multiple of ``q``, which makes ``upper`` reachable.
            Both bounds must be multiples of ``q``, as Ray requires.
        base: The log base of Ray's signature. It is checked (``> 0``, ``!= 1``) but does not change the
            distribution, since log-uniform sampling is the same in every base.

    Raises:
        SpaceError: An argument is out of range; the message names it.
    """

    def __init__(
        self,
        lower: float,
        upper: float,
        *,
        log: bool = False,
        q: float | None = None,
        base: float = DEFAULT_LOG_BASE,
    ) -> None:
        fn = ("q" if q is not None else "") + ("loguniform" if log else "uniform")
        args: dict[str, Any] = {"lower": lower, "upper": upper}
        if q is not None:
            args["q"] = q
        if log and base != DEFAULT_LOG_BASE:
            args["base"] = base
        call = _call_text(fn, **args)
        self.lower = _check_real(call, "lower", lower)
        self.upper = _check_real(call, "upper", upper)
        self.log = bool(log)
        self.q: float | None = None if q is None else _check_positive_q(call, q, integer=False)
        self.base = _check_base(call, base) if log else float(DEFAULT_LOG_BASE)
        if self.log and self.lower <= 0:
            raise SpaceError(f"{call}: lower must be > 0 (a log scale needs positive bounds)")
        if not self.lower < self.upper:
            raise SpaceError(f"{call}: lower must be < upper")
        if self.q is not None:
            for name, bound in (("lower", self.lower), ("upper", self.upper)):
                if not _divisible(bound, self.q):
                    raise SpaceError(
                        f"{call}: {name} must be a multiple of q (both bounds must be divisible by q)"
                    )
        self._call = call

    def draw(self, rng: np.random.Generator, spec: Mapping[str, Any] | None = None) -> float:
        """Draw one float (see :meth:`Domain.draw`)."""
        lower, upper = self.lower, self.upper
        if self.q is not None:
            # Ray samples between the bounds snapped onto the grid, then rounds to the grid.
            lower = round(lower / self.q) * self.q
            upper = round(upper / self.q) * self.q
        if self.log:
            draws = np.exp(rng.uniform(np.log(lower), np.log(upper), size=1))
            value = min(max(float(draws[0]), lower), upper)
        else:
            value = float(rng.uniform(lower, upper, size=1)[0])
        if self.q is not None:
            value = float(np.round(np.divide(value, self.q)) * self.q)
        return value

    def uniform(self) -> Float:
        """Ray's builder: the same bounds and step, drawn uniformly."""
        return Float(self.lower, self.upper, q=self.q)

    def loguniform(self, base: float | None = None) -> Float:
        """Ray's builder: the same bounds and step, drawn log-uniformly (``base`` is deprecated, as in Ray)."""
        return Float(self.lower, self.upper, log=True, q=self.q, base=_given_base(base))

    def quantized(self, q: float) -> Float:
        """Ray's builder: the same bounds and scale, rounded to a multiple of ``q``."""
        return Float(self.lower, self.upper, log=self.log, q=q, base=self.base)

    def __repr__(self) -> str:
        return self._call


class Normal(Domain):
    """A float drawn from a normal distribution, optionally quantized (:func:`randn`, :func:`qrandn`).

    Args:
        mean: Mean of the distribution (finite).
        sd: Standard deviation (finite, ``> 0``).
        q: Quantization step: values are rounded to a multiple of ``q``.

    Raises:
        SpaceError: An argument is out of range; the message names it.
    """

    def __init__(self, mean: float = 0.0, sd: float = 1.0, *, q: float | None = None) -> None:
        args: dict[str, Any] = {"mean": mean, "sd": sd}
        if q is not None:
            args["q"] = q
        call = _call_text("qrandn" if q is not None else "randn", **args)
        self.mean = _check_real(call, "mean", mean)
        self.sd = _check_real(call, "sd", sd)
        if self.sd <= 0:
            raise SpaceError(f"{call}: sd must be > 0")
        self.q: float | None = None if q is None else _check_positive_q(call, q, integer=False)
        self._call = call

    def draw(self, rng: np.random.Generator, spec: Mapping[str, Any] | None = None) -> float:
        """Draw one float (see :meth:`Domain.draw`)."""
        value = float(rng.normal(self.mean, self.sd, size=1)[0])
        if self.q is not None:
            value = float(np.round(np.divide(value, self.q)) * self.q)
        return value

    def __repr__(self) -> str:
        return self._call


class Integer(Domain):
    """An integer drawn uniformly or log-uniformly (:func:`randint`, :func:`qrandint`, :func:`lograndint`,
    :func:`qlograndint`).

    Without ``q``, or with ``q == 1``, values lie in ``[lower, upper)`` (``upper`` excluded). With ``q > 1``
    they are the multiples of ``q`` in ``[lower, upper]`` (``upper`` included), drawn uniformly (or
    log-uniformly) over their index ``value / q``, as in Ray.

    Args:
        lower: Lower bound (an integer; ``> 0`` when ``log``).
        upper: Upper bound (an integer).
        log: Sample log-uniformly (the draw is floored to an integer, as in Ray).
        q: Quantization step (a positive integer) or ``None``.
        base: The log base of Ray's signature; checked (``> 0``, ``!= 1``) but not used.

    Raises:
        SpaceError: An argument is out of range or no integer can be drawn; the message names it.
    """

    def __init__(
        self,
        lower: int,
        upper: int,
        *,
        log: bool = False,
        q: int | None = None,
        base: float = DEFAULT_LOG_BASE,
    ) -> None:
        fn = ("q" if q is not None else "") + ("lograndint" if log else "randint")
        args: dict[str, Any] = {"lower": lower, "upper": upper}
        if q is not None:
            args["q"] = q
        if log and base != DEFAULT_LOG_BASE:
            args["base"] = base
        call = _call_text(fn, **args)
        self.lower = _check_int(call, "lower", lower)
        self.upper = _check_int(call, "upper", upper)
        self.log = bool(log)
        self.q: int | None = None if q is None else int(_check_positive_q(call, q, integer=True))
        self.base = _check_base(call, base) if log else float(DEFAULT_LOG_BASE)
        if self.log and self.lower <= 0:
            raise SpaceError(f"{call}: lower must be > 0 (a log scale needs positive bounds)")
        step = self.q if self.q is not None else 1
        if step == 1:
            if not self.lower < self.upper:
                raise SpaceError(f"{call}: lower must be < upper (upper is excluded)")
        elif -(-self.lower // step) > self.upper // step:
            raise SpaceError(f"{call}: there is no multiple of q between lower and upper (both included)")
        self._call = call

    def _index_range(self) -> tuple[int, int, int]:
        """``(first, stop, step)``: the values are ``index * step`` for ``first <= index < stop``."""
        step = self.q if self.q is not None else 1
        first = -(-self.lower // step)
        stop = self.upper // step + (0 if step == 1 else 1)
        return first, stop, step

    def inclusive_bounds(self) -> tuple[int, int, int]:
        """The values this domain can produce as ``(low, high, step)``, with ``high`` included.

        Returns:
            For example ``(0, 9, 1)`` for ``randint(0, 10)`` and ``(3, 9, 3)`` for ``qrandint(1, 10, 3)``.
        """
        first, stop, step = self._index_range()
        return first * step, (stop - 1) * step, step

    def draw(self, rng: np.random.Generator, spec: Mapping[str, Any] | None = None) -> int:
        """Draw one integer (see :meth:`Domain.draw`)."""
        first, stop, step = self._index_range()
        if self.log:
            draws = np.floor(np.exp(rng.uniform(np.log(first), np.log(stop), size=1))).astype(int)
            index = min(int(draws[0]), stop - 1)
        else:
            index = int(rng.integers(first, stop, size=1)[0])
        return index * step

    def uniform(self) -> Integer:
        """Ray's builder: the same bounds and step, drawn uniformly."""
        return Integer(self.lower, self.upper, q=self.q)

    def loguniform(self, base: float | None = None) -> Integer:
        """Ray's builder: the same bounds and step, drawn log-uniformly (``base`` is deprecated, as in Ray)."""
        return Integer(self.lower, self.upper, log=True, q=self.q, base=_given_base(base))

    def quantized(self, q: int) -> Integer:
        """Ray's builder: the same bounds and scale, a multiple of ``q`` (``upper`` then included, as in Ray)."""
        return Integer(self.lower, self.upper, log=self.log, q=q, base=self.base)

    def __repr__(self) -> str:
        return self._call


class Categorical(Domain):
    """One of ``categories``, drawn uniformly (:func:`choice`).

    Args:
        categories: A non-empty iterable (not a string or a mapping); it is copied into a list.

    Raises:
        SpaceError: ``categories`` is empty or not a sequence.
    """

    def __init__(self, categories: Iterable[Any]) -> None:
        call = _call_text("choice", categories=categories)
        if isinstance(categories, (str, bytes, Mapping)) or not isinstance(categories, Iterable):
            raise SpaceError(
                f"{call}: categories must be a non-empty sequence (list or tuple), "
                f"got {type(categories).__name__}"
            )
        self.categories: list[Any] = list(categories)
        if not self.categories:
            raise SpaceError(f"{call}: categories must be a non-empty sequence (list or tuple)")
        self._call = call

    def draw(self, rng: np.random.Generator, spec: Mapping[str, Any] | None = None) -> Any:
        """Draw one category, deep-copied (see :meth:`Domain.draw`)."""
        # Drawing an index (rather than rng.choice on the categories) keeps each category's own type.
        index = int(rng.choice(np.arange(len(self.categories)), size=1)[0])
        return to_python(copy.deepcopy(self.categories[index]))

    def uniform(self) -> Categorical:
        """Ray's builder: a choice is always uniform."""
        return self

    def __len__(self) -> int:
        return len(self.categories)

    def __repr__(self) -> str:
        return self._call


class Function(Domain):
    """A value computed by ``func`` (:func:`sample_from`).

    ``func`` takes no argument (it is called as ``func()``) or one. As Ray 2.60's Tuner (``Function`` on the
    placeholders it resolves on each trial), it is called with the configuration first, a dict with item access
    (``lambda config: config["a"]``, ``config.get("a", 0)``; no attribute access, as Ray's plain dict has none),
    and, if that raises ``KeyError`` or ``AttributeError``, again with the ``spec``: the configuration under
    ``"config"`` with attribute and item access (``spec.config.a``, ``spec["config"]["a"]``). A function that works
    on the spec only is deprecated in Ray 2.60, which logs :data:`SPEC_DEPRECATED` at WARNING each time it falls
    back to the spec; so does fluidsalus (logger ``fluidsalus.space``).

    Args:
        func: The callable.

    Raises:
        SpaceError: ``func`` is not callable or needs more than one argument.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        call = f"sample_from(func={getattr(func, '__qualname__', None) or _short(func)})"
        if not callable(func):
            raise SpaceError(f"{call}: func must be callable, got {type(func).__name__}")
        self.func = func
        self.pass_spec = True
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):
            signature = None  # A builtin without a signature: assume it takes the spec.
        if signature is not None:
            try:
                signature.bind(None)
            except TypeError:
                try:
                    signature.bind()
                except TypeError:
                    raise SpaceError(
                        f"{call}: func must take no argument or one (the spec), its signature is {signature}"
                    ) from None
                self.pass_spec = False
        self._call = call

    def draw(self, rng: np.random.Generator, spec: Mapping[str, Any] | None = None) -> Any:
        """Call ``func`` (see the class docstring) and return its value with NumPy scalars made plain.

        Args:
            rng: Unused (a function draws from what it likes); kept for :meth:`Domain.draw`'s signature.
            spec: ``{"config": config}``, the configuration being built (an empty one where None or without
                ``"config"``).

        Raises:
            SpaceError: ``func(config)`` and ``func(spec)`` both raised ``KeyError`` or ``AttributeError`` (the
                message gives both). A read of a value that is not resolved yet raises a private subclass.
            Exception: Whatever else ``func`` raises.
        """
        if not self.pass_spec:
            return to_python(self.func())
        config = spec.get(_SPEC_CONFIG_KEY) if isinstance(spec, Mapping) else None
        variant: Mapping[Any, Any] = config if isinstance(config, Mapping) else {}
        try:
            return to_python(self.func(_ConfigView(variant, ())))
        except (KeyError, AttributeError) as config_error:
            try:
                value = to_python(self.func(_SpecView({_SPEC_CONFIG_KEY: variant}, None)))
            except (KeyError, AttributeError) as spec_error:
                raise SpaceError(
                    f"func(config) raised {type(config_error).__name__}: {config_error}; "
                    f"func(spec) raised {type(spec_error).__name__}: {spec_error}"
                ) from spec_error
        logger.warning(SPEC_DEPRECATED)  # (Ray's, where the function works on the spec only)
        return value

    def is_function(self) -> bool:
        """Ray's: a :func:`sample_from` is a function."""
        return True

    def __repr__(self) -> str:
        return self._call


class _UnresolvedDependency(SpaceError):
    """A ``sample_from`` function read a value that is not resolved yet."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"'{_path_text(path)}' is not resolved yet")
        self.path = path


class _ConfigView(dict):  # type: ignore[type-arg]
    """The configuration being built, as a ``sample_from`` function is given it first: a dict (without attribute
    access, as Ray's plain dict has none); reading a value that is still a domain or a grid raises
    :class:`_UnresolvedDependency`, so that the caller can retry once it is resolved.
    """

    def __init__(self, data: Mapping[Any, Any], path: Path | None) -> None:
        super().__init__(data)
        # None marks the spec root (a _SpecView), whose "config" child is the root of the parameter paths.
        self.__dict__["_fluidsalus_path"] = path

    def _child_path(self, key: Any) -> Path:
        path = self.__dict__["_fluidsalus_path"]
        return () if path is None else (*path, key)

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if isinstance(value, Domain) or _is_grid(value):
            raise _UnresolvedDependency(self._child_path(key))
        if isinstance(value, dict):
            return type(self)(value, self._child_path(key))
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __getattr__(self, name: str) -> Any:
        # (only for names a dict lacks: say so in the user's terms, not as "'_ConfigView' object has no attribute")
        if name.startswith("__"):
            raise AttributeError(name)
        path = self.__dict__["_fluidsalus_path"]
        where = "the config" if not path else f"the config's '{_path_text(path)}'"
        raise AttributeError(f"{where} is a dict, without attribute access: {name!r} (read it as [{name!r}])")


class _SpecView(_ConfigView):
    """Ray's spec, ``{"config": config}``, as a ``sample_from`` function is given it when the configuration
    failed: items are also attributes (``spec.config.a``), at every level, as in Ray's ``_UnresolvedAccessGuard``.
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            path = self.__dict__["_fluidsalus_path"]
            where = "the spec" if path is None else f"'{_path_text((_SPEC_CONFIG_KEY, *path))}'"
            raise AttributeError(f"{where} has no key {name!r}") from None


# --------------------------------------------------------------------------------------------------------
# Public sampling functions (Ray Tune's signatures)
# --------------------------------------------------------------------------------------------------------


def uniform(lower: float, upper: float) -> Float:
    """Sample a float uniformly in ``[lower, upper)``.

    Args:
        lower: Lower bound.
        upper: Upper bound, ``> lower``.

    Returns:
        A :class:`Float` domain.
    """
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """Sample a float uniformly and round it to a multiple of ``q`` (``upper`` becomes reachable).

    Args:
        lower: Lower bound, a multiple of ``q``.
        upper: Upper bound, a multiple of ``q`` and ``> lower``.
        q: Quantization step, ``> 0``.

    Returns:
        A :class:`Float` domain.
    """
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float | None = None) -> Float:
    """Sample a float log-uniformly in ``[lower, upper]`` (for values over orders of magnitude).

    Args:
        lower: Lower bound, ``> 0``.
        upper: Upper bound, ``> lower``.
        base: Deprecated, as in Ray: given, it raises Ray's deprecation warning (:data:`BASE_DEPRECATED`);
            checked but not used, since log-uniform sampling does not depend on it.

    Returns:
        A :class:`Float` domain.
    """
    return Float(lower, upper, log=True, base=_given_base(base))


def qloguniform(lower: float, upper: float, q: float, base: float | None = None) -> Float:
    """Sample a float log-uniformly and round it to a multiple of ``q``.

    Args:
        lower: Lower bound, ``> 0`` and a multiple of ``q``.
        upper: Upper bound, a multiple of ``q`` and ``> lower``.
        q: Quantization step, ``> 0``.
        base: Deprecated, as in Ray: given, it raises Ray's deprecation warning (:data:`BASE_DEPRECATED`);
            checked but not used, since log-uniform sampling does not depend on it.

    Returns:
        A :class:`Float` domain.
    """
    return Float(lower, upper, log=True, q=q, base=_given_base(base))


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """Sample a float from a normal distribution.

    Args:
        mean: Mean.
        sd: Standard deviation, ``> 0``.

    Returns:
        A :class:`Normal` domain.
    """
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """Sample a float from a normal distribution and round it to a multiple of ``q``.

    Args:
        mean: Mean.
        sd: Standard deviation, ``> 0``.
        q: Quantization step, ``> 0``.

    Returns:
        A :class:`Normal` domain.
    """
    return Normal(mean, sd, q=q)


def randint(lower: int, upper: int) -> Integer:
    """Sample an integer uniformly in ``[lower, upper)`` (``upper`` excluded, as ``numpy``'s ``integers``).

    Args:
        lower: Lower bound, included.
        upper: Upper bound, excluded; ``> lower``.

    Returns:
        An :class:`Integer` domain.
    """
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """Sample a multiple of ``q`` uniformly in ``[lower, upper]``.

    ``upper`` is included, except for ``q == 1`` where it is excluded (Ray's documented behaviour).

    Args:
        lower: Lower bound.
        upper: Upper bound.
        q: Quantization step, a positive integer.

    Returns:
        An :class:`Integer` domain.
    """
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float | None = None) -> Integer:
    """Sample an integer log-uniformly in ``[lower, upper)`` (``upper`` excluded).

    Args:
        lower: Lower bound, ``> 0``, included.
        upper: Upper bound, excluded; ``> lower``.
        base: Deprecated, as in Ray: given, it raises Ray's deprecation warning (:data:`BASE_DEPRECATED`);
            checked but not used, since log-uniform sampling does not depend on it.

    Returns:
        An :class:`Integer` domain.
    """
    return Integer(lower, upper, log=True, base=_given_base(base))


def qlograndint(lower: int, upper: int, q: int, base: float | None = None) -> Integer:
    """Sample a multiple of ``q`` log-uniformly in ``[lower, upper]`` (``upper`` excluded when ``q == 1``).

    Args:
        lower: Lower bound, ``> 0``.
        upper: Upper bound.
        q: Quantization step, a positive integer.
        base: Deprecated, as in Ray: given, it raises Ray's deprecation warning (:data:`BASE_DEPRECATED`);
            checked but not used, since log-uniform sampling does not depend on it.

    Returns:
        An :class:`Integer` domain.
    """
    return Integer(lower, upper, log=True, q=q, base=_given_base(base))


def choice(categories: Iterable[Any]) -> Categorical:
    """Sample one of ``categories`` uniformly.

    Args:
        categories: A non-empty list or tuple. A category that holds domains or grids is resolved in turn.

    Returns:
        A :class:`Categorical` domain.
    """
    return Categorical(categories)


def grid_search(values: Iterable[Any]) -> dict[str, list[Any]]:
    """Try every one of ``values``; several grid searches combine as a cross product.

    Args:
        values: A non-empty iterable (not a string or a mapping).

    Returns:
        ``{"grid_search": list(values)}``, the plain dict Ray uses, so code that inspects it keeps working.

    Raises:
        SpaceError: ``values`` is empty or not a sequence.
    """
    call = _call_text("grid_search", values=values)
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise SpaceError(f"{call}: values must be a non-empty list, got {type(values).__name__}")
    listed = list(values)
    if not listed:
        raise SpaceError(f"{call}: values must be a non-empty list")
    return {GRID_SEARCH_KEY: listed}


def sample_from(func: Callable[..., Any]) -> Function:
    """Compute a value with ``func``, for example from other values of the same configuration.

    Args:
        func: Called as Ray 2.60's Tuner calls it: ``func(config)`` with the configuration being built (a dict,
            ``config["a"]``), or as ``func(spec)`` with ``spec.config`` the configuration (``spec.config.a`` or
            ``spec["config"]["a"]``) when the first call raises ``KeyError`` or ``AttributeError`` (logging
            :data:`SPEC_DEPRECATED`), or as ``func()`` when it takes no argument.

    Returns:
        A :class:`Function` domain.
    """
    return Function(func)


# --------------------------------------------------------------------------------------------------------
# Space walking and validation
# --------------------------------------------------------------------------------------------------------


def _path_text(path: Path) -> str:
    return PATH_SEPARATOR.join(str(part) for part in path) if path else _ROOT_NAME


def _is_grid(value: Any) -> bool:
    """Ray's test for a grid search: a dict whose only key is ``"grid_search"``."""
    return isinstance(value, dict) and len(value) == 1 and GRID_SEARCH_KEY in value


def _is_ray_domain(value: Any) -> bool:
    return any(cls.__module__ == _RAY_SAMPLE_MODULE for cls in type(value).__mro__)


def _grid_values(grid: dict[str, Any], path: Path) -> list[Any]:
    """The values of a grid dict, or a SpaceError naming ``path`` when they are not a non-empty list."""
    values = grid[GRID_SEARCH_KEY]
    if not isinstance(values, (list, tuple)) or not values:
        raise SpaceError(
            f"parameter '{_path_text(path)}': grid_search values must be a non-empty list, "
            f"got {_short(values)}"
        )
    return list(values)


def _children(node: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(node, dict):
        return node.items()
    if isinstance(node, (list, tuple)):
        return enumerate(node)
    return ()


def _validate_value(value: Any, path: Path) -> None:
    """Check one value of a space (and what it holds); ``path`` names it in messages."""
    if _is_ray_domain(value):
        raise SpaceError(
            f"parameter '{_path_text(path)}' is a Ray Tune domain ({type(value).__name__}); build it "
            "with fluidsalus's functions (fluidsalus.uniform, fluidsalus.choice, ...) instead"
        )
    if _is_grid(value):
        for index, grid_value in enumerate(_grid_values(value, path)):
            _validate_value(grid_value, (*path, GRID_SEARCH_KEY, index))
        return
    if isinstance(value, dict) and not path:
        for key in value:
            if not isinstance(key, str):
                raise SpaceError(
                    f"search space key {key!r} at '{_path_text(path)}' must be a string, "
                    f"got {type(key).__name__}"
                )
    for key, child in _children(value):
        _validate_value(child, (*path, key))


def validate_space(space: Any, allow_empty: bool = False) -> None:
    """Check that ``space`` is a well-formed search space.

    Args:
        space: The search space: a dict of parameter name to constant, domain, grid search or nested dict.
        allow_empty: Accept ``{}`` (it resolves to one empty configuration per sample).

    Raises:
        SpaceError: ``space`` is not a dict, is empty, has a key that is not a string at its top level (below it
            a key may be any value a dict takes, as in Ray: ``{"n": {2: ...}}``), holds a malformed
            grid search (``{"grid_search": x}`` with ``x`` not a non-empty list) or a Ray Tune domain. The
            message names the parameter path, such as ``model/lr``.
    """
    if not isinstance(space, dict):
        raise SpaceError(
            f"the search space must be a dict of parameter name -> value, got {type(space).__name__}"
        )
    if not space and not allow_empty:
        raise SpaceError("the search space is empty; it needs at least one parameter")
    _validate_value(space, ())


def check_num_samples(num_samples: Any) -> int:
    """``num_samples`` as an int: ``>= 1``, or :data:`INFINITE_SAMPLES` (-1) for an endless stream.

    Raises:
        SpaceError: Anything else (the message names the allowed values).
    """
    if (
        not isinstance(num_samples, numbers.Integral)
        or isinstance(num_samples, bool)
        or (num_samples != INFINITE_SAMPLES and num_samples < 1)
    ):
        raise SpaceError(
            f"num_samples must be an int >= 1, or {INFINITE_SAMPLES} for an endless stream, "
            f"got {_short(num_samples)}"
        )
    return int(num_samples)


def check_seed(seed: Any) -> int | None:
    """A sampling seed: None, or an int ``>= 0`` (what NumPy's generators take).

    Raises:
        SpaceError: Anything else.
    """
    if seed is None:
        return None
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise SpaceError(f"seed must be None or an int >= 0, got {_short(seed)}")
    return int(seed)


def has_grid(space: Mapping[str, Any]) -> bool:
    """Whether ``space`` holds a grid search anywhere (nested dicts and lists included).

    Args:
        space: The search space.

    Returns:
        True when at least one ``{"grid_search": [...]}`` is present.
    """
    if _is_grid(space):
        return True
    return any(has_grid(value) for _, value in _children(space))


def _count_node(node: Any) -> int:
    """Number of variants one copy of ``node`` expands to (grids inside grid values included)."""
    if _is_grid(node):
        return sum(_count_node(value) for value in node[GRID_SEARCH_KEY])
    return math.prod(_count_node(value) for _, value in _children(node))


def count_variants(space: Mapping[str, Any], num_samples: int) -> int | None:
    """Number of configurations :func:`iter_variants` yields.

    Args:
        space: The search space.
        num_samples: Repetitions of the grid (``-1``: endless).

    Returns:
        ``num_samples`` times the size of the grid (the product of the grid sizes; a grid value that holds
        grids counts as its own expansion), or ``None`` for ``num_samples=-1``. Grids that only appear in a
        ``choice`` category or a ``sample_from`` result depend on the draw and are not counted.

    Raises:
        SpaceError: The space or ``num_samples`` is invalid.
    """
    validate_space(space, allow_empty=True)
    count = check_num_samples(num_samples)
    if count == INFINITE_SAMPLES:
        return None
    return count * _count_node(space)


# --------------------------------------------------------------------------------------------------------
# Variant generation
# --------------------------------------------------------------------------------------------------------


def _find_unresolved(
    node: Any, path: Path, grids: list[tuple[Path, list[Any]]], domains: list[tuple[Path, Domain]]
) -> None:
    """Collect grids and domains under ``node`` in depth-first insertion order (not inside them)."""
    for key, value in _children(node):
        child = (*path, key)
        if isinstance(value, Domain):
            domains.append((child, value))
        elif _is_grid(value):
            grids.append((child, _grid_values(value, child)))
        elif isinstance(value, (dict, list, tuple)):
            _find_unresolved(value, child, grids, domains)


def drawn_paths(space: Mapping[str, Any]) -> list[Path]:
    """The paths of a space's grid searches and domains (the values each variant draws), outermost level only.

    Args:
        space: A search space.

    Returns:
        The paths (tuples of keys), grids first, each in depth-first insertion order.
    """
    grids: list[tuple[Path, list[Any]]] = []
    domains: list[tuple[Path, Domain]] = []
    _find_unresolved(dict(space), (), grids, domains)
    return [path for path, _ in grids] + [path for path, _ in domains]


def _rebuild_tuple(original: tuple[Any, ...], items: list[Any]) -> tuple[Any, ...]:
    make = getattr(original, "_make", None)  # namedtuple
    return make(items) if callable(make) else tuple(items)


def _set_path(container: Any, path: Path, value: Any) -> Any:
    """Set ``value`` at ``path`` below ``container``; tuples on the way are rebuilt. Returns the container."""
    key = path[0]
    new_child = value if len(path) == 1 else _set_path(container[key], path[1:], value)
    if isinstance(container, tuple):
        items = list(container)
        items[key] = new_child
        return _rebuild_tuple(container, items)
    container[key] = new_child
    return container


#: What a search algorithm sees in place of a ``sample_from`` of the space (:func:`take_functions`): a constant
#: string naming its path, as Ray's Tuner hands its searchers placeholders (``ray.tune.impl.placeholder``).
SAMPLE_FROM_PLACEHOLDER = "<sample_from: {path}>"


def take_functions(space: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[Path, Function]]]:
    """Take the ``sample_from`` functions out of a space that a search algorithm (Optuna, a searcher of the user's
    own) searches, as Ray's Tuner does: the algorithm sees a constant in each one's place
    (:data:`SAMPLE_FROM_PLACEHOLDER`), and :func:`put_functions_back` computes them on each configuration it
    suggests.

    Args:
        space: The search space.

    Returns:
        A copy of the space with each function (outside grids and choices) replaced by its placeholder, and the
        functions by path, in depth-first order.
    """
    grids: list[tuple[Path, list[Any]]] = []
    domains: list[tuple[Path, Domain]] = []
    _find_unresolved(dict(space), (), grids, domains)
    functions = [(path, domain) for path, domain in domains if isinstance(domain, Function)]
    return with_placeholders(space, functions), functions


def with_placeholders(config: Mapping[str, Any], functions: list[tuple[Path, Function]]) -> dict[str, Any]:
    """``config`` (a space, or a configuration made by :func:`put_functions_back`) with the placeholders of
    :func:`take_functions` in the functions' places, as the search algorithm sees it (a new dict)."""
    suggested = copy.deepcopy(dict(config))
    for path, _ in functions:
        suggested = _set_path(suggested, path, SAMPLE_FROM_PLACEHOLDER.format(path=_path_text(path)))
    return suggested


def put_functions_back(config: Mapping[str, Any], functions: list[tuple[Path, Function]],
                       rng: np.random.Generator) -> dict[str, Any]:
    """A configuration a search algorithm suggested over a :func:`take_functions` space, with each function computed
    where its placeholder is (called as :class:`Function` says; functions may read each other, in any order).

    Args:
        config: The suggested configuration.
        functions: :func:`take_functions`' functions.
        rng: The generator a function's draw is given (a function of no argument draws from its own).

    Returns:
        A new configuration.

    Raises:
        SpaceError: A function raised, they read each other in a cycle, or one reads a domain or grid another
            returned, which nothing draws here, as in Ray's Tuner (the message names them).
    """
    variant = copy.deepcopy(dict(config))
    for path, function in functions:
        variant = _set_path(variant, path, function)
    if not _resolve_functions(variant, list(functions), rng):
        grids: list[tuple[Path, list[Any]]] = []
        domains: list[tuple[Path, Domain]] = []
        _find_unresolved(variant, (), grids, domains)
        waiting = ", ".join(f"'{_path_text(path)}'" for path, domain in domains if isinstance(domain, Function))
        raise SpaceError(
            f"sample_from at {waiting} reads a value that is still a domain or a grid_search (one that another "
            "sample_from returned, or the search algorithm left): nothing draws it on a search algorithm's "
            "configuration, as in Ray's Tuner; return a value, or draw it in the function"
        )
    return variant


def _grid_points(grids: list[tuple[Path, list[Any]]]) -> Iterator[tuple[Any, ...]]:
    """Every combination of grid values, the first grid varying fastest (Ray's order)."""
    for reversed_point in itertools.product(*(values for _, values in reversed(grids))):
        yield reversed_point[::-1]


def _resolve_functions(variant: dict[str, Any], functions: list[tuple[Path, Function]],
                       rng: np.random.Generator) -> bool:
    """Run the ``sample_from`` functions of one variant in passes until all have run.

    Returns:
        True when all ran; False when the rest wait for values that later nesting levels resolve.

    Raises:
        SpaceError: A function raised, or the functions depend on each other in a cycle.
    """
    pending = functions
    while pending:
        waiting: list[tuple[Path, Function]] = []
        blocked_on: dict[Path, Path] = {}
        for path, function in pending:
            try:
                value = function.draw(rng, {_SPEC_CONFIG_KEY: variant})
            except _UnresolvedDependency as exc:
                waiting.append((path, function))
                blocked_on[path] = exc.path
                continue
            except Exception as exc:
                raise SpaceError(
                    f"parameter '{_path_text(path)}': {function!r} raised {type(exc).__name__}: {exc} "
                    "(func is called as func(config), and as func(spec) with spec.config the configuration "
                    "if that raises KeyError or AttributeError)"
                ) from exc
            _set_path(variant, path, value)
        if len(waiting) == len(pending):
            grids: list[tuple[Path, list[Any]]] = []
            domains: list[tuple[Path, Domain]] = []
            _find_unresolved(variant, (), grids, domains)
            waiting_paths = {path for path, _ in waiting}
            if grids or any(path not in waiting_paths for path, _ in domains):
                return False  # They read values that the next nesting level resolves.
            details = "; ".join(
                f"'{_path_text(path)}' waits for '{_path_text(blocked_on[path])}'" for path, _ in waiting
            )
            raise SpaceError(f"sample_from functions depend on each other in a cycle: {details}")
        pending = waiting
    return True


def _expand(config: dict[str, Any], rng: np.random.Generator, depth: int = 0,
            constant_grid_search: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the resolved variants of ``config`` (one Ray ``_generate_variants_internal`` level).

    The ``sample_from`` functions wait until nothing else is left to resolve, then run on the otherwise complete
    configuration, as Ray's Tuner computes them on each trial's configuration (its search algorithm, Ray's random
    search too, sees a placeholder in their place). So with ``constant_grid_search``, where the random domains are
    drawn once, before the grid, and every grid point shares them, the functions still run for each grid point.
    """
    grids: list[tuple[Path, list[Any]]] = []
    domains: list[tuple[Path, Domain]] = []
    _find_unresolved(config, (), grids, domains)
    if not grids and not domains:
        yield config
        return
    if depth >= _MAX_NESTING_DEPTH:
        paths = ", ".join(_path_text(path) for path, _ in [*grids, *domains])
        raise SpaceError(
            f"values nest domains more than {_MAX_NESTING_DEPTH} levels deep (a sample_from that returns "
            f"domains forever?) at: {paths}"
        )
    grids.sort(key=lambda item: item[0])
    random_domains = [(path, domain) for path, domain in domains if not isinstance(domain, Function)]
    if not grids and not random_domains:  # only functions are left: their turn
        functions = [(path, domain) for path, domain in domains if isinstance(domain, Function)]
        # (in place: every caller hands this level a configuration of its own, a fresh deep copy)
        _resolve_functions(config, functions, rng)  # (one reading another's value waits for it)
        yield from _expand(config, rng, depth + 1, constant_grid_search)
        return
    if constant_grid_search and grids:  # drawn once for every grid point (Ray's constant_grid_search)
        config = copy.deepcopy(config)
        for path, domain in random_domains:
            _set_path(config, path, domain.draw(rng))
        random_domains = []
    for point in _grid_points(grids):
        variant = copy.deepcopy(config)
        for (path, _), value in zip(grids, point, strict=True):
            _set_path(variant, path, to_python(copy.deepcopy(value)))
        for path, domain in random_domains:
            _set_path(variant, path, domain.draw(rng))
        yield from _expand(variant, rng, depth + 1, constant_grid_search)


def _variant_stream(
    space: dict[str, Any], num_samples: int, rng: np.random.Generator, constant_grid_search: bool = False
) -> Iterator[dict[str, Any]]:
    repeats: Iterable[int] = itertools.count() if num_samples == INFINITE_SAMPLES else range(num_samples)
    for _ in repeats:
        yield from _expand(copy.deepcopy(space), rng, constant_grid_search=constant_grid_search)


def iter_variants(
    space: dict[str, Any], num_samples: int, seed: int | None = None, constant_grid_search: bool = False
) -> Iterator[dict[str, Any]]:
    """Resolve ``space`` into configurations, lazily (Ray's ``BasicVariantGenerator`` semantics).

    The grid (the cross product of all grid searches, first grid parameter by key path varying fastest) is
    yielded ``num_samples`` times, with random domains sampled anew for every configuration. See the
    module docstring for the details.

    Args:
        space: The search space (an empty dict gives one empty configuration per sample, as in Ray).
        num_samples: Repetitions of the grid, ``>= 1``, or ``-1`` for an endless stream.
        seed: Seed of the ``numpy.random.default_rng`` that draws every value; ``None`` for fresh entropy.
        constant_grid_search: Draw the random values once per sample and keep them for every grid point
            (Ray's ``BasicVariantGenerator(constant_grid_search=True)``); the ``sample_from`` functions are
            still called at every grid point, as Ray's Tuner computes them on each trial.

    Returns:
        An iterator of fully resolved configurations (new dicts; constants are deep-copied).

    Raises:
        SpaceError: The space, ``num_samples`` or ``seed`` is invalid (raised at the call). While
            iterating: a ``sample_from`` function raised or its dependencies form a cycle.
    """
    validate_space(space, allow_empty=True)
    count = check_num_samples(num_samples)
    rng = np.random.default_rng(check_seed(seed))
    return _variant_stream(copy.deepcopy(space), count, rng, bool(constant_grid_search))


def generate_variants(
    space: dict[str, Any], num_samples: int, seed: int | None = None
) -> list[dict[str, Any]]:
    """All configurations of :func:`iter_variants`, as a list.

    Args:
        space: The search space.
        num_samples: Repetitions of the grid, ``>= 1`` (``-1`` is refused: the list would be endless).
        seed: Seed of the sampler; ``None`` for fresh entropy.

    Returns:
        ``count_variants(space, num_samples)`` configurations (more if a ``choice`` or ``sample_from``
        produced grids).

    Raises:
        SpaceError: As :func:`iter_variants`, and for ``num_samples=-1``.
    """
    if check_num_samples(num_samples) == INFINITE_SAMPLES:
        raise SpaceError(
            f"generate_variants: num_samples={INFINITE_SAMPLES} asks for an endless stream; "
            "use iter_variants for it"
        )
    return list(iter_variants(space, num_samples, seed))


# --------------------------------------------------------------------------------------------------------
# Flattening and Optuna
# --------------------------------------------------------------------------------------------------------


def _flatten_into(node: dict[str, Any], path: Path, out: dict[str, Any], strict: bool = True) -> None:
    for key, value in node.items():
        child = (*path, key)
        if strict and not isinstance(key, str):
            raise SpaceError(
                f"search space key {key!r} at '{_path_text(path)}' must be a string for this search algorithm "
                f"(it names the parameter by the flattened key), got {type(key).__name__}"
            )
        if strict and PATH_SEPARATOR in key:
            raise SpaceError(
                f"search space key {key!r} at '{_path_text(path)}' contains {PATH_SEPARATOR!r}, the "
                "separator of flattened keys; rename it"
            )
        if isinstance(value, dict) and value and not _is_grid(value):
            _flatten_into(value, child, out, strict)
        else:
            out[_path_text(child)] = value


def check_copyable(space: Mapping[str, Any], name: str) -> None:
    """Each value of a search space must copy, as the searchers copy the space and the trials get theirs
    pickled: checked before a run writes anything, naming the parameter (it was a bare ``TypeError`` from the
    first sampling).

    Args:
        space: The search space.
        name: The argument that holds it (``config``, ``param_space``), for the message.

    Raises:
        SpaceError: A value cannot be copied (a lock, an open file, a client).
    """
    for path, value in flatten_space(dict(space), strict=False).items():
        try:
            copy.deepcopy(value)
        except Exception as e:  # noqa: BLE001 - copying can fail with any exception type
            raise SpaceError(f"{name}: the value of {path!r} ({type(value).__name__}) cannot be copied to send it to "
                             f"the trials ({type(e).__name__}: {e}); create such objects (locks, open files, "
                             "clients) inside the trainable instead") from None


def flatten_space(space: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    """Flatten nested dicts into ``"outer/inner"`` keys.

    Grid-search dicts, domains, lists and empty dicts are leaves, so :func:`unflatten` restores the space.

    Args:
        space: A search space or a configuration.
        strict: Refuse a key that contains ``"/"``, which :func:`unflatten` would split (the searchers that
            need the round trip); False joins it as it is (a space described for the record, as Ray's own
            ``flatten_dict`` does: a space of keys such as ``"optim/lr"`` runs under random and grid search).

    Returns:
        A flat dict from ``"/"``-joined key paths to values.

    Raises:
        SpaceError: The space is invalid, or (``strict``) a key contains ``"/"``.
    """
    validate_space(space, allow_empty=True)
    out: dict[str, Any] = {}
    _flatten_into(space, (), out, strict)
    return out


def flatten_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration given nested (``{"model": {"lr": 0.1}}``) or already flattened (``{"model/lr": 0.1}``),
    flattened with ``"/"``.

    Raises:
        SpaceError: A nested configuration that :func:`flatten_space` refuses.
    """
    if any(isinstance(key, str) and PATH_SEPARATOR in key for key in config):
        return dict(config)
    return flatten_space(dict(config))


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Rebuild nested dicts from ``"outer/inner"`` keys (the inverse of :func:`flatten_space`).

    Args:
        flat: A dict from ``"/"``-joined key paths to values.

    Returns:
        The nested dict.

    Raises:
        SpaceError: A key is not a string, or two keys conflict (``"a"`` and ``"a/b"``).
    """
    out: dict[str, Any] = {}
    leaves: set[tuple[str, ...]] = set()
    branches: set[tuple[str, ...]] = set()
    for key, value in flat.items():
        if not isinstance(key, str):
            raise SpaceError(f"flattened key {key!r} must be a string, got {type(key).__name__}")
        parts = tuple(key.split(PATH_SEPARATOR))
        prefixes = [parts[:end] for end in range(1, len(parts))]
        if parts in branches or any(prefix in leaves for prefix in prefixes):
            raise SpaceError(
                f"flattened key {key!r} conflicts with another key that is a prefix or extension of it"
            )
        node = out
        for prefix in prefixes:
            node = node.setdefault(prefix[-1], {})
            branches.add(prefix)
        node[parts[-1]] = value
        leaves.add(parts)
    return out


def _holds_unresolved(value: Any) -> bool:
    if isinstance(value, Domain) or _is_grid(value):
        return True
    return any(_holds_unresolved(child) for _, child in _children(value))


def holds_domains(value: Any) -> bool:
    """Whether ``value`` is, or holds in its dicts, lists and tuples, a domain or a grid search."""
    return _holds_unresolved(value)


def split_constants(space: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a space into its parameters to search and its constants, both flattened with ``"/"``.

    Args:
        space: The search space.

    Returns:
        ``(domains, constants)``: ``domains`` maps each flattened path to a :class:`Domain` or a grid dict,
        ``constants`` maps the other paths to their values. ``unflatten({**constants, **values})`` rebuilds
        a configuration from values chosen for the domains.

    Raises:
        SpaceError: The space is invalid, or a list holds a domain or a grid (a list element cannot be a
            flattened parameter).
    """
    domains: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for key, value in flatten_space(space).items():
        if isinstance(value, Domain) or _is_grid(value):
            domains[key] = value
        elif _holds_unresolved(value):
            raise SpaceError(
                f"parameter '{key}': domains and grid searches inside a list cannot be flattened into "
                "parameters; put them in a dict"
            )
        else:
            constants[key] = value
    return domains, constants


def _plain_choices(path: str, what: str, values: list[Any]) -> tuple[Any, ...]:
    if any(_holds_unresolved(value) for value in values):
        raise SpaceError(
            f"parameter '{path}': {what} holds domains or grid searches, which Optuna's "
            "CategoricalDistribution cannot express"
        )
    return tuple(to_python(value) for value in values)


def _to_optuna(path: str, domain: Any) -> BaseDistribution:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if _is_grid(domain):
        return CategoricalDistribution(_plain_choices(path, "the grid search", domain[GRID_SEARCH_KEY]))
    if isinstance(domain, Categorical):
        return CategoricalDistribution(_plain_choices(path, repr(domain), domain.categories))
    if isinstance(domain, Float):
        if domain.log and domain.q is not None:
            raise SpaceError(
                f"parameter '{path}': {domain!r} has no Optuna equivalent: FloatDistribution cannot be "
                "log-scaled and stepped at once; use loguniform (no q) or quniform"
            )
        return FloatDistribution(domain.lower, domain.upper, log=domain.log, step=domain.q)
    if isinstance(domain, Integer):
        low, high, step = domain.inclusive_bounds()
        if domain.log and step != 1:
            raise SpaceError(
                f"parameter '{path}': {domain!r} has no Optuna equivalent: IntDistribution cannot be "
                "log-scaled with a step other than 1; use lograndint or qrandint"
            )
        return IntDistribution(low, high, log=domain.log, step=step)
    if isinstance(domain, Normal):
        raise SpaceError(
            f"parameter '{path}': {domain!r} has no Optuna equivalent (Optuna has no normal distribution); "
            "use uniform/quniform, or a searcher that samples it such as random search"
        )
    if isinstance(domain, Function):
        raise SpaceError(
            f"parameter '{path}': {domain!r} has no Optuna equivalent (Optuna cannot sample from a "
            "function); use a searcher that samples it such as random search"
        )
    raise SpaceError(f"parameter '{path}': {domain!r} has no Optuna equivalent")


def to_optuna_distribution(path: str, domain: Any) -> BaseDistribution:
    """The Optuna distribution of one domain, as :func:`to_optuna_distributions` converts it (``path`` names it
    in errors).

    Raises:
        SpaceError: The domain has no Optuna equivalent; the message names ``path``.
    """
    return _to_optuna(path, domain)


def to_optuna_distributions(space: dict[str, Any]) -> dict[str, BaseDistribution]:
    """Convert a search space into Optuna distributions, keyed by ``"/"``-joined paths.

    * ``uniform``/``quniform``/``loguniform`` -> ``FloatDistribution(lower, upper, log=..., step=q)``;
      ``qloguniform`` is refused (Optuna forbids ``log`` with ``step``). The log base does not matter.
    * ``randint``/``qrandint``/``lograndint``/``qlograndint`` -> ``IntDistribution`` over exactly the
      values the domain samples, ``high`` included: ``randint(0, 10)`` -> ``IntDistribution(0, 9)``,
      ``qrandint(1, 10, 3)`` -> ``IntDistribution(3, 9, step=3)``; ``qlograndint`` with ``q > 1`` is
      refused (Optuna forbids ``log`` with ``step != 1``).
    * ``choice`` -> ``CategoricalDistribution(categories)``; ``grid_search`` -> ``CategoricalDistribution``
      of the grid values (Optuna samples them; it does not enumerate the grid).
    * ``randn``/``qrandn`` and ``sample_from`` are refused: Optuna has no equivalent.
    * Constants are left out; get them from :func:`split_constants`.
    * Parameters come level by level, as Ray's ``OptunaSearch`` asks them: the top level's in the space's order,
      then those one level down, and so on.

    Args:
        space: The search space.

    Returns:
        A dict from flattened parameter path to Optuna distribution.

    Raises:
        SpaceError: The space is invalid or a parameter has no Optuna equivalent; the message names it.
    """
    domains, _ = split_constants(space)
    # In the order Ray's OptunaSearch asks them (its flatten_dict: the top level's parameters, then the next level's,
    # ...), so that a seeded sampler draws the same values for a nested space as under Ray Tune.
    ordered = sorted(domains.items(), key=lambda item: item[0].count("/"))
    return {path: _to_optuna(path, domain) for path, domain in ordered}
