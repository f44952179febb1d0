"""BOHB (Falkner, Klein, Hutter, ICML 2018): a TPE-like KDE model over HyperBand or ASHA, in NumPy only.

The model follows hpbandster's ``BOHB`` config generator (the reference implementation Ray's ``TuneBOHB``
wraps), without hpbandster, ConfigSpace or statsmodels:

* Every parameter is mapped to the unit interval (floats and integers, log-scaled when the domain is, with
  integers padded by half a step on each side as ConfigSpace does) or to a category index.
* Observations ``(budget, x, loss)`` are kept per budget (``loss`` is the metric, negated for
  ``mode="max"``; NaN counts as ``+inf``). The model is fitted on the largest budget with at least
  ``min_points_in_model`` observations whose good and bad sets both have more points than dimensions:
  the best ``max(min_points_in_model, top_n_percent% of n)`` points make the good density ``l(x)`` and the
  next ``max(min_points_in_model, (100 - top_n_percent)% of n)`` the bad density ``g(x)``.
* Each density is a product-kernel KDE: Gaussian kernels on the unit-interval dimensions and
  Aitchison-Aitken kernels on categorical ones, with statsmodels' ``normal_reference`` bandwidths
  (``1.06 * std * n ** (-1 / (4 + d))``) clipped below at ``min_bandwidth``.
* A proposal is random with probability ``random_fraction`` (or while there is no model); otherwise
  ``num_candidates`` points are drawn around random good points (truncated normals on ``[0, 1]`` with
  ``bandwidth_factor`` times the bandwidth; a categorical keeps the point's value with probability
  ``1 - bandwidth`` and is uniform otherwise) and the one with the smallest ``g(x) / l(x)`` wins.

:class:`BOHB` puts the model over :class:`~fluidsalus.searchers._asha.ASHA` (asynchronous: ASHA's decisions,
the model proposes each new configuration, observations at every milestone). :class:`SyncBOHB` puts it over
:class:`~fluidsalus.searchers._hyperband.HyperBand` with ``HyperBandForBOHB``'s bracket order (largest
first); each rung is one TrialGroup and each new bracket's configurations come from the model.

Both take ``points_to_evaluate``: those configurations are proposed first, in order (Ray's ``TuneBOHB``), each
counting as one of ``num_samples``; a partial point gets the parameters it leaves out from a regular proposal.
With ``num_samples=-1`` they propose until the run is stopped (its time budget or a stopper), keeping at most
``max_concurrent`` trials live (BOHB) or ``max_concurrent_brackets`` brackets unfinished (SyncBOHB); left
unset, :data:`~fluidsalus.searchers._random.ENDLESS_FIRST_BATCH` trials and one bracket.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._asha import ASHA, check_int, check_optional_int, check_real, is_number
from fluidsalus.searchers._hyperband import HyperBand
from fluidsalus.searchers._random import ENDLESS_FIRST_BATCH, apply_point, check_points

__all__ = ["BOHB", "BOHBModel", "KernelDensity", "SpaceEncoder", "SyncBOHB"]

logger = logging.getLogger(__name__)

#: Kind code of a dimension mapped to the unit interval (hpbandster's ``vartypes`` 0).
CONTINUOUS = 0
#: Factor of statsmodels' ``normal_reference`` rule of thumb (Scott's / Silverman's 1.06).
_NORMAL_REFERENCE_FACTOR = 1.06
#: Exponent offset of the rule of thumb: ``n ** (-1 / (d + 4))``.
_NORMAL_REFERENCE_DIM_OFFSET = 4
#: Floor of both densities in the acquisition ``max(g, 1e-32) / max(l, 1e-32)`` (hpbandster's).
_DENSITY_FLOOR = 1e-32
#: Loss of an observation with no usable value (hpbandster: ``loss = inf`` when a run returned nothing).
_MISSING_LOSS = math.inf
#: Half an integer step: an integer domain with K values covers ``[low - 0.5, high + 0.5]`` in the unit
#: interval, so each value owns an equal share of it (ConfigSpace's ``UniformInteger`` transform).
_HALF_STEP = 0.5
#: Truncated-normal sampling: above this scale a uniform proposal is used (accepted with the normal's
#: relative density), below it a normal one (accepted when it lands in [0, 1]); each accepts at least about
#: a third of the draws, so the rejection loop is short whatever ``bandwidth_factor`` is.
_UNIFORM_PROPOSAL_SCALE = 0.3
#: Rounds of the rejection loop before the few draws left are clipped into [0, 1] (practically never).
_MAX_REJECTION_ROUNDS = 200
#: Stream tag of the per-proposal generators (``SeedSequence([seed, tag, k])``).
_PROPOSAL_STREAM = 1
#: Version of the state layouts.
_STATE_VERSION = 1
#: With ``num_samples=-1`` and no ``max_concurrent_brackets``, SyncBOHB keeps this many brackets unfinished:
#: each new bracket is proposed from everything the previous ones observed (its default).
ENDLESS_SYNC_BRACKETS = 1


def _check_samples(owner: str, num_samples: Any) -> int:
    """``num_samples``: an int >= 1, or -1 (propose until the run is stopped)."""
    if num_samples == sp.INFINITE_SAMPLES and not isinstance(num_samples, bool):
        return sp.INFINITE_SAMPLES
    return check_int(owner, "num_samples", num_samples, minimum=1)


# --------------------------------------------------------------------------------------------------------
# The space as unit-interval / index vectors
# --------------------------------------------------------------------------------------------------------


def _holds_domain(value: Any) -> bool:
    if isinstance(value, sp.Domain) or (isinstance(value, dict) and sp.GRID_SEARCH_KEY in value):
        return True
    if isinstance(value, Mapping):
        return any(_holds_domain(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_domain(v) for v in value)
    return False


class SpaceEncoder:
    """Maps configurations of a search space to model vectors and back.

    Dimensions follow the flattened parameter order (``"/"``-joined paths). Floats and integers become
    ``[0, 1]`` coordinates (log-scaled for log domains); categoricals become their index.

    Args:
        owner: Name of the searcher, for error messages.
        space: The search space. Supported: ``uniform``/``loguniform``/``quniform``/``qloguniform``,
            ``randint``/``lograndint``/``qrandint``/``qlograndint``, ``choice`` of plain values, constants.

    Raises:
        ConfigError: The space is empty or holds a domain the model cannot express (``randn``,
            ``sample_from``, ``grid_search``, a ``choice`` whose categories hold domains).
    """

    def __init__(self, owner: str, space: Mapping[str, Any]) -> None:
        domains, self.constants = sp.split_constants(dict(space))
        if not domains:
            raise ConfigError(f"{owner}: space must hold at least one domain to search (it has only constants)")
        self.paths: list[str] = []
        self.domains: list[sp.Domain] = []
        kinds: list[int] = []
        for path, domain in domains.items():
            if isinstance(domain, (sp.Float, sp.Integer)):
                kinds.append(CONTINUOUS)
            elif isinstance(domain, sp.Categorical):
                if any(_holds_domain(category) for category in domain.categories):
                    raise ConfigError(
                        f"{owner}: parameter '{path}': {domain!r} holds domains or grid searches; the model "
                        "needs plain categories"
                    )
                kinds.append(len(domain.categories))
            else:
                what = "grid_search" if isinstance(domain, dict) else repr(domain)
                raise ConfigError(
                    f"{owner}: parameter '{path}': {what} cannot be modelled; use uniform/loguniform/quniform, "
                    "randint/qrandint/lograndint or choice"
                )
            self.paths.append(path)
            self.domains.append(domain)
        #: Per dimension: 0 for a unit-interval dimension, else the number of categories.
        self.kinds = np.array(kinds, dtype=int)

    @property
    def dim(self) -> int:
        """Number of dimensions."""
        return len(self.paths)

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        """A configuration drawn from the space's own distributions (the model's random proposals)."""
        values = {path: domain.draw(rng) for path, domain in zip(self.paths, self.domains, strict=True)}
        return sp.unflatten({**copy.deepcopy(self.constants), **values})

    def encode(self, config: Mapping[str, Any]) -> list[float] | None:
        """The vector of a configuration, or None when a value does not belong to the space."""
        flat = sp.flatten_space(dict(config))
        out: list[float] = []
        for path, domain in zip(self.paths, self.domains, strict=True):
            if path not in flat:
                return None
            coordinate = _encode_value(domain, flat[path])
            if coordinate is None:
                return None
            out.append(coordinate)
        return out

    def decode(self, vector: np.ndarray) -> dict[str, Any]:
        """The configuration of a vector (values snapped onto each domain)."""
        values = {
            path: _decode_value(domain, float(x))
            for path, domain, x in zip(self.paths, self.domains, vector, strict=True)
        }
        return sp.unflatten({**copy.deepcopy(self.constants), **values})


def _unit(value: float, lower: float, upper: float, log: bool) -> float:
    if log:
        value, lower, upper = math.log(value), math.log(lower), math.log(upper)
    return min(max((value - lower) / (upper - lower), 0.0), 1.0)


def _from_unit(x: float, lower: float, upper: float, log: bool) -> float:
    x = min(max(x, 0.0), 1.0)
    if log:
        return math.exp(math.log(lower) + x * (math.log(upper) - math.log(lower)))
    return lower + x * (upper - lower)


def _integer_index_span(domain: sp.Integer) -> tuple[int, int, int]:
    """``(first, last, step)``: the domain's values are ``index * step`` for ``first <= index <= last``."""
    low, high, step = domain.inclusive_bounds()
    return low // step, high // step, step


def _encode_value(domain: sp.Domain, value: Any) -> float | None:
    if isinstance(domain, sp.Categorical):
        for index, category in enumerate(domain.categories):
            if category == value and type(category) is type(value):
                return float(index)
        for index, category in enumerate(domain.categories):
            if category == value:
                return float(index)
        return None
    if not is_number(value) or not math.isfinite(float(value)):
        return None
    if isinstance(domain, sp.Float):
        if domain.log and value <= 0:
            return None
        return _unit(float(value), domain.lower, domain.upper, domain.log)
    assert isinstance(domain, sp.Integer)
    first, last, step = _integer_index_span(domain)
    index = min(max(float(value) / step, first), last)
    return _unit(index, first - _HALF_STEP, last + _HALF_STEP, domain.log)


def _decode_value(domain: sp.Domain, x: float) -> Any:
    if isinstance(domain, sp.Categorical):
        index = min(max(int(round(x)), 0), len(domain.categories) - 1)
        return copy.deepcopy(domain.categories[index])
    if isinstance(domain, sp.Float):
        value = _from_unit(x, domain.lower, domain.upper, domain.log)
        if domain.q is None:
            return float(min(max(value, domain.lower), domain.upper))
        # Both bounds are multiples of q (Float checks it): snap onto the grid as Float.sample does.
        first, last = round(domain.lower / domain.q), round(domain.upper / domain.q)
        return float(min(max(np.round(value / domain.q), first), last) * domain.q)
    assert isinstance(domain, sp.Integer)
    first, last, step = _integer_index_span(domain)
    index = _from_unit(x, first - _HALF_STEP, last + _HALF_STEP, domain.log)
    return int(min(max(round(index), first), last)) * step


# --------------------------------------------------------------------------------------------------------
# Kernel density
# --------------------------------------------------------------------------------------------------------


class KernelDensity:
    """A product-kernel density on unit-interval and categorical dimensions (statsmodels'
    ``KDEMultivariate`` with ``var_type`` 'c'/'u' and ``bw="normal_reference"``).

    Args:
        data: Points, shape ``(n, d)``; categorical coordinates are indices.
        kinds: Per dimension, 0 (unit interval) or the number of categories.
        min_bandwidth: Lower bound of every bandwidth.

    Attributes:
        bw: The bandwidths: ``1.06 * std * n ** (-1 / (d + 4))`` clipped to ``>= min_bandwidth``; for a
            categorical dimension also to ``<= (c - 1) / c``, where the Aitchison-Aitken kernel is uniform
            (statsmodels leaves it unclipped, so a wide spread of indices could invert the kernel).
    """

    def __init__(self, data: np.ndarray, kinds: np.ndarray, min_bandwidth: float) -> None:
        self.data = np.asarray(data, dtype=float)
        self.kinds = np.asarray(kinds, dtype=int)
        n, d = self.data.shape
        bw = _NORMAL_REFERENCE_FACTOR * self.data.std(axis=0) * n ** (-1.0 / (d + _NORMAL_REFERENCE_DIM_OFFSET))
        bw = np.maximum(bw, min_bandwidth)
        categorical = self.kinds > 1
        uniform_at = np.where(categorical, (self.kinds - 1) / np.maximum(self.kinds, 1), np.inf)
        self.bw = np.where(categorical, np.minimum(bw, np.maximum(uniform_at, min_bandwidth)), bw)

    def pdf(self, points: np.ndarray) -> np.ndarray:
        """The density at each of ``points`` (shape ``(m, d)``), shape ``(m,)``."""
        points = np.atleast_2d(np.asarray(points, dtype=float))
        diff = points[:, None, :] - self.data[None, :, :]  # (m, n, d)
        continuous = self.kinds == CONTINUOUS
        kernel = np.empty_like(diff)
        h = self.bw[continuous]
        kernel[..., continuous] = np.exp(-0.5 * (diff[..., continuous] / h) ** 2) / (math.sqrt(2 * math.pi) * h)
        for j in np.flatnonzero(~continuous):
            levels, h_j = self.kinds[j], self.bw[j]
            if levels <= 1:
                kernel[..., j] = 1.0
            else:
                kernel[..., j] = np.where(diff[..., j] == 0, 1.0 - h_j, h_j / (levels - 1))
        return kernel.prod(axis=2).mean(axis=1)


def _truncated_normal(mean: np.ndarray, scale: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per entry from N(mean, scale) truncated to [0, 1], by rejection (NumPy has no inverse CDF)."""
    out = np.array(mean, dtype=float)
    todo = np.arange(out.size)
    for _ in range(_MAX_REJECTION_ROUNDS):
        if todo.size == 0:
            return out
        m, s = mean[todo], scale[todo]
        wide = s > _UNIFORM_PROPOSAL_SCALE
        draw = np.where(wide, rng.uniform(0.0, 1.0, todo.size), rng.normal(m, s))
        accept_wide = rng.uniform(0.0, 1.0, todo.size) < np.exp(-0.5 * ((draw - m) / s) ** 2)
        ok = np.where(wide, accept_wide, (draw >= 0.0) & (draw <= 1.0))
        out[todo[ok]] = draw[ok]
        todo = todo[~ok]
    out[todo] = np.clip(out[todo], 0.0, 1.0)
    return out


# --------------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------------


class BOHBModel:
    """hpbandster's BOHB configuration generator: observations per budget, good/bad KDEs, proposals.

    Args:
        encoder: The space's :class:`SpaceEncoder`.
        min_points_in_model: Observations a budget needs before it gets a model (None: ``dim + 1``; raised to
            ``dim + 1`` if smaller, as hpbandster does).
        top_n_percent: Percentage of observations that make the good density (in ``(0, 100)``).
        num_candidates: Points drawn from the good density per proposal (hpbandster's ``num_samples``).
        random_fraction: Share of proposals drawn at random from the space (in ``[0, 1]``).
        bandwidth_factor: Widening of the good density's bandwidths when drawing candidates (``> 0``).
        min_bandwidth: Lower bound of every bandwidth (``> 0``).
        owner: Name of the searcher, for error messages.

    Raises:
        ConfigError: A parameter is out of range.
    """

    def __init__(
        self,
        encoder: SpaceEncoder,
        min_points_in_model: int | None = None,
        top_n_percent: float = 15,
        num_candidates: int = 64,
        random_fraction: float = 1 / 3,
        bandwidth_factor: float = 3,
        min_bandwidth: float = 1e-3,
        owner: str = "BOHB",
    ) -> None:
        self.encoder = encoder
        minimum = encoder.dim + 1
        given = check_optional_int(owner, "min_points_in_model", min_points_in_model, minimum=1)
        if given is not None and given < minimum:
            logger.warning("%s: min_points_in_model=%d is below dim + 1 = %d; using %d (as hpbandster does)",
                           owner, given, minimum, minimum)
        self.min_points_in_model = minimum if given is None else max(given, minimum)
        self.top_n_percent = check_real(owner, "top_n_percent", top_n_percent, above=0.0, below=100.0,
                                        rule="in (0, 100)")
        self.num_candidates = check_int(owner, "num_candidates", num_candidates, minimum=1)
        self.random_fraction = check_real(owner, "random_fraction", random_fraction, at_least=0.0, at_most=1.0,
                                          rule="in [0, 1]")
        self.bandwidth_factor = check_real(owner, "bandwidth_factor", bandwidth_factor, above=0.0, rule="> 0")
        self.min_bandwidth = check_real(owner, "min_bandwidth", min_bandwidth, above=0.0, rule="> 0")
        self._observations: dict[float, list[tuple[list[float], float]]] = {}
        self._fitted: dict[float, tuple[int, tuple[KernelDensity, KernelDensity] | None]] = {}

    def observe(self, budget: float, vector: list[float], value: float | None, sign: float) -> None:
        """Add one observation.

        Args:
            budget: The budget the value was measured at.
            vector: The configuration's vector (:meth:`SpaceEncoder.encode`).
            value: The metric value (None or NaN: the worst loss).
            sign: ``+1`` to minimise the value, ``-1`` to maximise it.
        """
        loss = _MISSING_LOSS if value is None or math.isnan(value) else sign * value
        self._observations.setdefault(float(budget), []).append((list(vector), float(loss)))

    def observations(self, budget: float) -> int:
        """Number of observations at ``budget``."""
        return len(self._observations.get(float(budget), []))

    def _fit(self, budget: float) -> tuple[KernelDensity, KernelDensity] | None:
        points = self._observations[budget]
        cached = self._fitted.get(budget)
        if cached is not None and cached[0] == len(points):
            return cached[1]
        models = None
        n = len(points)
        if n >= self.min_points_in_model:
            configs = np.array([vector for vector, _ in points], dtype=float)
            order = np.argsort(np.array([loss for _, loss in points]), kind="stable")
            n_good = max(self.min_points_in_model, int(self.top_n_percent * n) // 100)
            n_bad = max(self.min_points_in_model, int((100 - self.top_n_percent) * n) // 100)
            good, bad = configs[order[:n_good]], configs[order[n_good:n_good + n_bad]]
            d = self.encoder.dim
            if good.shape[0] > d and bad.shape[0] > d:
                kinds = self.encoder.kinds
                models = (KernelDensity(good, kinds, self.min_bandwidth), KernelDensity(bad, kinds, self.min_bandwidth))
        self._fitted[budget] = (n, models)
        return models

    def model_budget(self) -> float | None:
        """The largest budget that has a model, or None."""
        for budget in sorted(self._observations, reverse=True):
            if self._fit(budget) is not None:
                return budget
        return None

    def propose(self, rng: np.random.Generator) -> tuple[dict[str, Any], bool]:
        """Propose one configuration.

        Args:
            rng: The generator of this proposal.

        Returns:
            ``(config, from_model)``.
        """
        budget = self.model_budget()
        if budget is None or rng.random() < self.random_fraction:
            return self.encoder.sample(rng), False
        good, bad = self._fit(budget)  # type: ignore[misc]
        kinds = self.encoder.kinds
        centers = good.data[rng.integers(0, good.data.shape[0], size=self.num_candidates)]
        candidates = np.empty_like(centers)
        for j, levels in enumerate(kinds):
            if levels == CONTINUOUS:
                scale = np.full(self.num_candidates, self.bandwidth_factor * good.bw[j])
                candidates[:, j] = _truncated_normal(centers[:, j], scale, rng)
            else:
                keep = rng.random(self.num_candidates) < 1.0 - good.bw[j]
                candidates[:, j] = np.where(keep, centers[:, j], rng.integers(0, levels, size=self.num_candidates))
        ratio = np.maximum(bad.pdf(candidates), _DENSITY_FLOOR) / np.maximum(good.pdf(candidates), _DENSITY_FLOOR)
        return self.encoder.decode(candidates[int(np.argmin(ratio))]), True

    def state_dict(self) -> dict[str, Any]:
        """The observations (JSON-serialisable)."""
        return {"observations": [[budget, [[v, loss] for v, loss in points]]
                                 for budget, points in self._observations.items()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self._observations = {
            float(budget): [([float(x) for x in v], float(loss)) for v, loss in points]
            for budget, points in state["observations"]
        }
        self._fitted = {}


def _model_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of the ``index``-th proposal (stateless, so a resumed run proposes the same)."""
    return np.random.default_rng(np.random.SeedSequence([seed, _PROPOSAL_STREAM, index]))


class _ModelMixin:
    """What BOHB and SyncBOHB share: the model, the trial vectors and the proposal counter."""

    _owner: str
    seed: int
    _sign: float

    def _init_model(self, space: Mapping[str, Any], points: Any, **model_args: Any) -> None:
        self.encoder = SpaceEncoder(self._owner, space)
        self.model = BOHBModel(self.encoder, owner=self._owner, **model_args)
        self._points = check_points(space, points, self._owner)
        self._vectors: dict[str, list[float] | None] = {}
        self._proposals = 0
        self._from_model = 0

    @property
    def endless(self) -> bool:
        """Whether ``num_samples`` is -1 (propose until the run is stopped)."""
        return self.num_samples == sp.INFINITE_SAMPLES  # type: ignore[attr-defined]

    def _left(self) -> int | None:
        """Proposals still allowed (None: endless)."""
        return None if self.endless else self.num_samples - self._proposals  # type: ignore[attr-defined]

    def _propose(self, count: int) -> list[dict[str, Any]]:
        """``count`` configurations: the next points to evaluate first, then the model's proposals."""
        configs = []
        for _ in range(count):
            config, from_model = self.model.propose(_model_rng(self.seed, self._proposals))
            if self._proposals < len(self._points):
                # A point keeps the values it gives; the proposal fills in the rest.
                config, from_model = apply_point(config, self._points[self._proposals]), False
            self._proposals += 1
            self._from_model += int(from_model)
            configs.append(config)
        return configs

    def _remember(self, trial_id: str, config: Mapping[str, Any]) -> None:
        self._vectors[trial_id] = self.encoder.encode(config)

    def _observe(self, trial_id: str, budget: float, value: float | None) -> None:
        vector = self._vectors.get(trial_id)
        if vector is not None:
            # The model minimises a loss: the metric for mode="min", its negation for "max".
            self.model.observe(budget, vector, value, -self._sign)

    def _model_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "vectors": dict(self._vectors),
                "proposals": self._proposals, "from_model": self._from_model}

    def _load_model_state(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self._vectors = {tid: None if v is None else [float(x) for x in v] for tid, v in state["vectors"].items()}
        self._proposals = int(state["proposals"])
        self._from_model = int(state["from_model"])

    @property
    def proposals_from_model(self) -> int:
        """How many proposals came from the model (the rest were random)."""
        return self._from_model


# --------------------------------------------------------------------------------------------------------
# The searchers
# --------------------------------------------------------------------------------------------------------


class BOHB(_ModelMixin, ASHA):
    """Asynchronous BOHB: ASHA's decisions (Ray's rules), each new configuration proposed by the model.

    The model sees one observation per trial and milestone: the trial's value when it reaches the budget
    of its group (a rung milestone, or ``max_t``). New configurations are proposed when they go out: at
    most ``max_concurrent`` trials are live, and each that ends makes room for one more, proposed with
    everything observed until then.

    Args:
        space: The search space (floats, integers, ``choice`` and constants; see :class:`SpaceEncoder`).
        num_samples: The number of trials.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        time_attr, max_t, grace_period, reduction_factor, brackets, stop_last_trials: As :class:`ASHA`.
        min_points_in_model, top_n_percent, num_candidates, random_fraction, bandwidth_factor,
            min_bandwidth: As :class:`BOHBModel` (``num_candidates`` is hpbandster's ``num_samples``).
        max_concurrent: Live trials at most (``>= 1``), as Ray's ``TuneBOHB(max_concurrent=...)``; None
            sends all ``num_samples`` at once (then the model never gets to propose), or keeps
            :data:`~fluidsalus.searchers._random.ENDLESS_FIRST_BATCH` live with ``num_samples=-1``.
        seed: Seed of the proposals and bracket draws; None draws one (kept in the state).
        points_to_evaluate: Configurations (possibly partial) to propose first; they count toward
            ``num_samples``.

    Raises:
        ConfigError: A parameter is out of range; the message names it and the allowed range.
    """

    replayable = True  # its model learns from the results alone, its proposals from seeded streams

    _owner = "BOHB"
    _group_prefix = "bohb"

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: str,
        time_attr: str = "training_iteration",
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
        min_points_in_model: int | None = None,
        top_n_percent: float = 15,
        num_candidates: int = 64,
        random_fraction: float = 1 / 3,
        bandwidth_factor: float = 3,
        min_bandwidth: float = 1e-3,
        max_concurrent: int | None = 8,
        seed: int | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
    ) -> None:
        samples = _check_samples(self._owner, num_samples)
        endless = samples == sp.INFINITE_SAMPLES
        if endless and max_concurrent is None:
            max_concurrent = ENDLESS_FIRST_BATCH
        # ASHA itself counts samples only for its own random stream, which BOHB does not use.
        super().__init__(space, 1 if endless else samples, metric, mode, time_attr=time_attr, max_t=max_t,
                         grace_period=grace_period, reduction_factor=reduction_factor, brackets=brackets,
                         stop_last_trials=stop_last_trials, seed=seed, max_concurrent=max_concurrent)
        self.num_samples = samples
        self._init_model(self.space, points_to_evaluate, min_points_in_model=min_points_in_model,
                         top_n_percent=top_n_percent, num_candidates=num_candidates,
                         random_fraction=random_fraction, bandwidth_factor=bandwidth_factor,
                         min_bandwidth=min_bandwidth)

    def _configs_left(self) -> bool:
        return self.endless or self._emitted < self.num_samples

    def _draw_configs(self, count: int | None) -> list[dict[str, Any]]:
        if self.endless:
            assert count is not None  # max_concurrent is always set when endless
            return self._propose(count)
        left = self.num_samples - self._emitted
        return self._propose(left if count is None else min(count, left))

    def _on_new_trial(self, trial_id: str, config: Mapping[str, Any]) -> None:
        self._remember(trial_id, config)

    def _on_budget_reached(self, trial_id: str, budget: float, value: float) -> None:
        self._observe(trial_id, budget, value)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), **self._model_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._load_model_state(state)


class SyncBOHB(_ModelMixin, HyperBand):
    """Synchronous BOHB: HyperBand brackets (``HyperBandForBOHB`` order, largest bracket first), each rung one
    TrialGroup, each new bracket's configurations proposed by the model.

    The model sees every trial's value at the budget of each rung it reaches. With the default
    ``max_concurrent_brackets=1`` brackets run one after another (as hpbandster's iterations when workers
    are few), so each bracket is proposed from everything the earlier ones observed; the group of a late
    rung is small, which is where Fluid's inter-GPU placement helps most.

    Args:
        space: The search space (floats, integers, ``choice`` and constants; see :class:`SpaceEncoder`).
        num_samples: The number of trials (new configurations over all brackets).
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        time_attr, max_t, reduction_factor, stop_last_trials: As :class:`HyperBand`.
        max_concurrent_brackets: Unfinished brackets at most (None: no limit; :data:`ENDLESS_SYNC_BRACKETS`
            with ``num_samples=-1``).
        min_points_in_model, top_n_percent, num_candidates, random_fraction, bandwidth_factor,
            min_bandwidth: As :class:`BOHBModel`.
        seed: Seed of the proposals; None draws one (kept in the state).
        points_to_evaluate: Configurations (possibly partial) to propose first, into the first brackets; they
            count toward ``num_samples``.

    Raises:
        ConfigError: A parameter is out of range; the message names it and the allowed range.
    """

    replayable = True  # its model learns from the results alone, its proposals from seeded streams

    _owner = "SyncBOHB"
    _group_prefix = "syncbohb"
    _largest_bracket_first = True

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: str,
        time_attr: str = "training_iteration",
        max_t: float = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
        max_concurrent_brackets: int | None = 1,
        min_points_in_model: int | None = None,
        top_n_percent: float = 15,
        num_candidates: int = 64,
        random_fraction: float = 1 / 3,
        bandwidth_factor: float = 3,
        min_bandwidth: float = 1e-3,
        seed: int | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
    ) -> None:
        samples = _check_samples(self._owner, num_samples)
        endless = samples == sp.INFINITE_SAMPLES
        if endless and max_concurrent_brackets is None:
            max_concurrent_brackets = ENDLESS_SYNC_BRACKETS
        # HyperBand itself counts samples only for its own random stream, which SyncBOHB does not use.
        super().__init__(space, 1 if endless else samples, metric, mode, time_attr=time_attr, max_t=max_t,
                         reduction_factor=reduction_factor, stop_last_trials=stop_last_trials,
                         max_concurrent_brackets=max_concurrent_brackets, seed=seed)
        self.num_samples = samples
        self._init_model(self.space, points_to_evaluate, min_points_in_model=min_points_in_model,
                         top_n_percent=top_n_percent, num_candidates=num_candidates,
                         random_fraction=random_fraction, bandwidth_factor=bandwidth_factor,
                         min_bandwidth=min_bandwidth)

    def _configs_left(self) -> bool:
        return self.endless or self._proposals < self.num_samples

    def _draw_configs(self, count: int) -> list[dict[str, Any]]:
        left = self._left()
        return self._propose(count if left is None else min(count, left))

    def _on_new_trial(self, trial_id: str, config: Mapping[str, Any]) -> None:
        self._remember(trial_id, config)

    def _on_budget_reached(self, trial_id: str, budget: float, value: float | None) -> None:
        self._observe(trial_id, budget, value)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), **self._model_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._load_model_state(state)
