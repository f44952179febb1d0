"""Population Based Bandits (PB2) as a searcher: Ray Tune's ``PB2`` scheduler.

PB2 (Parker-Holder, Nguyen and Roberts, "Provably Efficient Online Hyperparameter Optimization with
Population-Based Bandits", NeurIPS 2020) is population based training whose *explore* step is a Gaussian-process
bandit instead of a random perturbation. Everything else is :class:`~fluidsalus.searchers.PBT`'s: perturbation
points, quantiles, exploits from checkpoints, synchronous mode, state round trips.

What PB2 learns from. At each perturbation point a trial's time, continuous hyperparameters (the keys of
``hyperparam_bounds``) and score are recorded. Two consecutive points of one trial that ran the same
hyperparameters in between give one observation: the score's change divided by the time between them, the
*improvement rate* those hyperparameters gave from that state. Its inputs are the time and the score at the start
of the interval, and the hyperparameters scaled to ``[0, 1]`` by their bounds.

How it explores. When a bottom trial clones a top trial, PB2:

1. fits a GP to the newest :data:`MAX_OBSERVATIONS` observations, with the time-varying squared-exponential
   kernel of TV-GP-UCB (Bogunovic, Scarlett and Cevher, AISTATS 2016): an RBF kernel on the score and the
   hyperparameters times ``(1 - epsilon) ** (|t - t'| / 2)``, so old observations count less. Its length scale,
   ``epsilon`` and noise are the grid point of largest marginal likelihood (:data:`LENGTHSCALE_GRID`,
   :data:`EPSILON_GRID`, :data:`NOISE_GRID`), its variance the likelihood's closed-form optimum;
2. picks the hyperparameters of largest upper confidence bound ``mean + sqrt(beta) * std`` at the clone's
   starting state (the source's time and score) among :data:`ACQ_CANDIDATES` random points of the box and the
   source's own values. The variance comes from the GP conditioned also on the points already picked at this
   time, so the trials of one round spread out (GP-BUCB: Desautels, Krause and Burdick, JMLR 2014);
3. records the clone: the trial now starts from the source's state with the new hyperparameters, so its next
   point gives an observation of those.

While the source has given no observation yet (two points of its own with the same hyperparameters: in the first
round of exploits, or a source that changed its hyperparameters at its last point), the clone keeps the source's
hyperparameters, as Ray's PB2 does. Keys missing from a configuration are drawn uniformly from their bounds at
the start. Values keep the type the source's configuration gives them (an ``int`` is rounded). Ray fits the GP
with scikit-learn and L-BFGS; this one is NumPy only and deterministic for a given ``seed``.
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._pbt import DEFAULT_PERTURBATION_INTERVAL, DEFAULT_QUANTILE_FRACTION, DEFAULT_TIME_ATTR, PBT

logger = logging.getLogger(__name__)

__all__ = ["PB2", "GaussianProcess", "fit_gp", "improvement_data", "tv_se_kernel", "ucb_pick"]

#: Most observations the GP is fitted to, the newest (fitting is cubic in their number). Ray's PB2 keeps between
#: 200 and 1,000, chosen by marginal likelihood.
MAX_OBSERVATIONS = 200
#: Grids of the GP's kernel parameters, searched by marginal likelihood: the length scale of the RBF part (on
#: inputs scaled to [0, 1]; it divides the squared distance), TV-GP-UCB's forgetting rate ``epsilon`` (Ray's
#: bounds are 1e-5 to 0.5) and the observation noise as a share of the signal variance.
LENGTHSCALE_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
EPSILON_GRID = (1e-5, 0.01, 0.05, 0.1, 0.2, 0.5)
NOISE_GRID = (1e-6, 1e-3, 1e-2, 0.1)
#: Random points of the hyperparameter box the upper confidence bound is evaluated at (plus the source's own).
ACQ_CANDIDATES = 512
#: The exploration weight ``beta = UCB_BETA_OFFSET + max(0, log(UCB_BETA_SCALE * n))`` for ``n`` observations:
#: the schedule of PB2's reference implementation (Ray's ``c1`` and ``c2``).
UCB_BETA_OFFSET = 0.2
UCB_BETA_SCALE = 0.4
#: Smallest spread of a normalised input or of the observations, below which they are treated as constant.
_TINY = 1e-12


# --------------------------------------------------------------------------------------------------------
# The GP (pure functions of arrays)
# --------------------------------------------------------------------------------------------------------


def tv_se_kernel(a: np.ndarray, b: np.ndarray, lengthscale: float, epsilon: float) -> np.ndarray:
    """TV-GP-UCB's time-varying squared-exponential kernel with unit variance.

    Args:
        a: Inputs, one per row: time in column 0, the rest (score, hyperparameters) after it.
        b: Inputs like ``a``.
        lengthscale: Divides the squared distance of the non-time columns.
        epsilon: Forgetting rate in ``(0, 1)``: inputs ``dt`` apart are correlated by ``(1 - epsilon) ** (dt / 2)``.

    Returns:
        The ``len(a) x len(b)`` kernel matrix.
    """
    dt = np.abs(a[:, :1] - b[:, :1].T)
    diff = a[:, None, 1:] - b[None, :, 1:]
    return np.exp(-np.sum(diff * diff, axis=2) / lengthscale) * (1.0 - epsilon) ** (0.5 * dt)


@dataclass(frozen=True)
class GaussianProcess:
    """A GP fitted by :func:`fit_gp`: the data, the kernel parameters, the Cholesky factor ``L`` of the kernel
    matrix and ``alpha = L^-1 y``."""

    x: np.ndarray
    lengthscale: float
    epsilon: float
    noise: float
    variance: float
    chol: np.ndarray
    alpha: np.ndarray

    def predict(self, points: np.ndarray, pending: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance at ``points``.

        Args:
            points: Inputs, one per row.
            pending: Inputs already chosen but not observed yet (GP-BUCB): they lower the variance near them
                and leave the mean alone.

        Returns:
            ``(mean, variance)``, one entry per point.
        """
        v = np.linalg.solve(self.chol, tv_se_kernel(self.x, points, self.lengthscale, self.epsilon))
        mean = v.T @ self.alpha
        if pending is not None and len(pending):
            both = np.vstack([self.x, pending])
            chol = _cholesky(tv_se_kernel(both, both, self.lengthscale, self.epsilon), self.noise)
            v = np.linalg.solve(chol, tv_se_kernel(both, points, self.lengthscale, self.epsilon))
        variance = self.variance * np.clip(1.0 - np.sum(v * v, axis=0), 0.0, None)
        return mean, variance


def _cholesky(k: np.ndarray, noise: float) -> np.ndarray:
    return np.linalg.cholesky(k + noise * np.eye(len(k)))


def fit_gp(x: np.ndarray, y: np.ndarray) -> GaussianProcess:
    """Fit the TV-GP to ``(x, y)``: the grid point of the largest marginal likelihood.

    The variance is profiled out (for ``K = s2 * (K0 + noise * I)`` its optimum is ``y' (K0 + noise I)^-1 y / n``),
    so the grid is over the length scale, ``epsilon`` and the noise only.

    Args:
        x: Inputs, one per row (time first).
        y: Observations (standardised by the caller).

    Returns:
        The fitted :class:`GaussianProcess`.
    """
    n = len(y)
    best: tuple[float, GaussianProcess] | None = None
    for lengthscale in LENGTHSCALE_GRID:
        for epsilon in EPSILON_GRID:
            k0 = tv_se_kernel(x, x, lengthscale, epsilon)
            for noise in NOISE_GRID:
                try:
                    chol = _cholesky(k0, noise)
                except np.linalg.LinAlgError:
                    continue
                alpha = np.linalg.solve(chol, y)
                variance = max(float(alpha @ alpha) / n, _TINY)
                nll = 0.5 * n * math.log(variance) + float(np.sum(np.log(np.diag(chol))))
                if best is None or nll < best[0]:
                    best = (nll, GaussianProcess(x, lengthscale, epsilon, noise, variance, chol, alpha))
    assert best is not None, "the largest noise of NOISE_GRID keeps every kernel matrix positive definite"
    return best[1]


def ucb_pick(gp: GaussianProcess, fixed: np.ndarray, candidates: np.ndarray, pending: np.ndarray | None,
             beta: float) -> np.ndarray:
    """The candidate of largest ``mean + sqrt(beta) * std`` at the fixed start state.

    Args:
        gp: The fitted GP.
        fixed: The non-hyperparameter inputs of the new point (its time and score).
        candidates: Hyperparameter points (scaled to ``[0, 1]``), one per row.
        pending: Hyperparameter points already chosen at this state (GP-BUCB), or None.
        beta: The exploration weight.

    Returns:
        The chosen row of ``candidates`` (the first of equal scores).
    """
    def full(points: np.ndarray) -> np.ndarray:
        return np.hstack([np.tile(fixed, (len(points), 1)), points])

    mean, variance = gp.predict(full(candidates), None if pending is None else full(pending))
    scores = mean + math.sqrt(beta) * np.sqrt(variance)
    return candidates[int(np.argmax(scores))]


def ucb_beta(n: int) -> float:
    """The exploration weight for ``n`` observations (:data:`UCB_BETA_OFFSET`, :data:`UCB_BETA_SCALE`)."""
    return UCB_BETA_OFFSET + max(0.0, math.log(UCB_BETA_SCALE * n)) if n > 0 else UCB_BETA_OFFSET


# --------------------------------------------------------------------------------------------------------
# Observations
# --------------------------------------------------------------------------------------------------------


@dataclass
class _Point:
    """A trial at a perturbation point (or a clone's start): the rows PB2 learns from."""

    segment: str  # the trial and how many exploits it has made: improvements are taken within one segment
    time: float
    values: list[float]  # the hyperparameters, scaled to [0, 1] by their bounds
    score: float
    group_id: str | None = None  # a clone's start: the exploit that made it (dropped if the exploit is undone)


def improvement_data(points: Sequence[_Point]) -> tuple[np.ndarray, np.ndarray]:
    """Observations from consecutive points of each segment: inputs ``[t, score, values...]`` at the start of
    the interval, and the score's change per unit of time (intervals with no time passing are skipped).

    Args:
        points: Perturbation points and clone starts, in the order they were recorded.

    Returns:
        ``(x, y)``, oldest first, at most :data:`MAX_OBSERVATIONS` (the newest).
    """
    return _arrays(_newest(points), len(points[0].values) if points else 0)


def _newest(points: Sequence[_Point]) -> list[tuple[str, list[float], float]]:
    """The observations the GP learns from: the newest :data:`MAX_OBSERVATIONS` of :func:`_observations`."""
    return _observations(points)[-MAX_OBSERVATIONS:]


def _arrays(kept: Sequence[tuple[str, list[float], float]], n_values: int) -> tuple[np.ndarray, np.ndarray]:
    """Observations as the GP's ``(x, y)``."""
    x = np.array([row for _, row, _ in kept], dtype=float).reshape(-1, 2 + n_values)
    return x, np.array([y for _, _, y in kept], dtype=float)


def _observed(kept: Sequence[tuple[str, list[float], float]], trial_id: str) -> bool:
    """Whether one of the observations ``kept`` is the trial's (any of its segments ``<trial_id>#<n>``)."""
    return any(segment.rpartition("#")[0] == trial_id for segment, _, _ in kept)


def _observations(points: Sequence[_Point]) -> list[tuple[str, list[float], float]]:
    """Every observation, oldest first, as ``(segment, [t, score, values...], improvement rate)``."""
    last: dict[str, _Point] = {}
    out: list[tuple[str, list[float], float]] = []
    for point in sorted(points, key=lambda p: p.time):  # a stable sort keeps a segment's order at equal times
        before = last.get(point.segment)
        last[point.segment] = point
        if before is None or point.time <= before.time or point.values != before.values:
            continue
        out.append((point.segment, [before.time, before.score, *before.values],
                    (point.score - before.score) / (point.time - before.time)))
    return out


def has_observation(points: Sequence[_Point], trial_id: str) -> bool:
    """Whether one of the observations the GP learns from (the newest :data:`MAX_OBSERVATIONS`) is the trial's (any
    of its segments): Ray's PB2 fits its GP for a clone only when the trial it clones has one among the rows it
    keeps (its ``_explore`` reads the rows of ``base``), and copies the source's hyperparameters otherwise.

    Args:
        points: Perturbation points and clone starts.
        trial_id: The trial.
    """
    return _observed(_newest(points), trial_id)


def _scale(value: Any, low: float, high: float) -> Any:
    """``value`` (a number or an array) scaled to [0, 1] by ``[low, high]`` (0 for an empty range)."""
    return (value - low) / (high - low) if high - low > _TINY else value * 0.0


# --------------------------------------------------------------------------------------------------------
# The searcher
# --------------------------------------------------------------------------------------------------------


def _flat_bounds(bounds: Mapping[str, Any], prefix: str = "") -> dict[str, tuple[float, float]]:
    """``hyperparam_bounds`` flattened to ``"a/b"`` keys, checked: each ``[low, high]`` of two finite numbers."""
    flat: dict[str, tuple[float, float]] = {}
    for key, value in bounds.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flat_bounds(value, f"{path}/"))
            continue
        if (
            not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        ):
            raise ConfigError(f"PB2: hyperparam_bounds[{path!r}] must be [low, high], two finite numbers "
                              f"(got {value!r})")
        low, high = float(value[0]), float(value[1])
        if low > high:
            raise ConfigError(f"PB2: hyperparam_bounds[{path!r}] must be [low, high] with low <= high (got {value!r})")
        flat[path] = (low, high)
    return flat


def _as_domains(bounds: Mapping[str, Any]) -> dict[str, Any]:
    """``hyperparam_bounds`` as PBT's mutations: uniform domains (they fill keys a config lacks)."""
    return {key: _as_domains(value) if isinstance(value, Mapping) else sp.uniform(float(value[0]), float(value[1]))
            for key, value in bounds.items()}


def _get(config: Mapping[str, Any], path: str) -> Any:
    value: Any = config
    for part in path.split("/"):
        value = value[part]
    return value


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split("/")
    for part in parents:
        config = config.setdefault(part, {})
    config[leaf] = value


class PB2(PBT):
    """Population Based Bandits with the parameters of Ray Tune's ``PB2`` (see the module docstring).

    Args:
        space: The search space of the initial population.
        num_samples: Population size (times the grid points of ``space``), ``>= 1``.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        time_attr: The monotonically increasing result key that measures progress.
        perturbation_interval: Trials are considered for perturbation every this much ``time_attr`` (> 0).
        hyperparam_bounds: Per key ``[low, high]``, or a nested dict of those: the continuous hyperparameters PB2
            selects. A key a configuration lacks is drawn uniformly from its bounds at the start.
        quantile_fraction: Fraction of the population in the bottom and top quantiles, in ``[0, 0.5]``.
        log_config: Keep every exploit in :attr:`exploit_log`.
        require_attrs: Raise when a result lacks ``metric`` or ``time_attr``; otherwise skip that result.
        synch: Synchronous mode: wait until every live trial reaches the same perturbation point.
        custom_explore_fn: ``f(config) -> config`` applied to each configuration PB2 selects.
        seed: Seed of the initial population, the exploit choices and the candidate points.
        points_to_evaluate: Configurations that are the first members of the population (as PBT's).

    Raises:
        ConfigError: ``hyperparam_bounds`` is empty or not ``[low, high]`` pairs, or a PBT parameter is out of
            range; the message names it.
    """

    scheduler_name = "PB2"

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: str,
        time_attr: str = DEFAULT_TIME_ATTR,
        perturbation_interval: float = DEFAULT_PERTURBATION_INTERVAL,
        hyperparam_bounds: Mapping[str, Any] | None = None,
        quantile_fraction: float = DEFAULT_QUANTILE_FRACTION,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        seed: int | None = None,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        if not isinstance(hyperparam_bounds, Mapping) or not hyperparam_bounds:
            raise ConfigError("PB2: hyperparam_bounds must be a non-empty dict of [low, high] per hyperparameter "
                              f"(got {hyperparam_bounds!r})")
        self.bounds = _flat_bounds(hyperparam_bounds)
        self.hyperparam_bounds = dict(hyperparam_bounds)
        try:
            super().__init__(
                space, num_samples, metric, mode, time_attr=time_attr, perturbation_interval=perturbation_interval,
                hyperparam_mutations=_as_domains(hyperparam_bounds), quantile_fraction=quantile_fraction,
                resample_probability=0.0, custom_explore_fn=custom_explore_fn, log_config=log_config,
                require_attrs=require_attrs, synch=synch, seed=seed, points_to_evaluate=points_to_evaluate,
            )
        except ConfigError as e:  # PBT's checks, named after PB2 (the Tune front end's said "PB2: PBT: ...")
            raise ConfigError(f"PB2: {str(e).removeprefix('PBT: ')}") from None
        self._points: list[_Point] = []
        self._segments: dict[str, int] = {}  # trial -> exploits it has made
        self._pending: list[list[float]] = []  # values picked at the current newest time (GP-BUCB)
        self._pending_time = -math.inf

    # ------------------------------------------------------------------ data

    def _values(self, config: Mapping[str, Any]) -> list[float]:
        """The bounded hyperparameters of ``config``, scaled to [0, 1]."""
        return [_scale(float(_get(config, key)), low, high) for key, (low, high) in self.bounds.items()]

    def _segment(self, trial_id: str) -> str:
        return f"{trial_id}#{self._segments.get(trial_id, 0)}"

    def _at_point(self, trial_id: str, state: Any) -> None:
        assert state.last_score is not None
        self._points.append(_Point(self._segment(trial_id), state.last_train_time, self._values(state.config),
                                   state.last_score))

    def _new_config(self, trial_id: str, source_id: str, group_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        source = self._trials[source_id]
        assert source.last_score is not None
        new_config = copy.deepcopy(source.config)
        kept = _newest(self._points)  # (once: the source's observation is looked for among these)
        x, y = _arrays(kept, len(self.bounds))
        chosen = None
        if len(y) and _observed(kept, source_id):
            chosen = self._select(x, y, source.last_train_time, source.last_score, self._values(source.config))
            for (key, (low, high)), value in zip(self.bounds.items(), chosen, strict=True):
                raw = low + float(value) * (high - low)
                old = _get(source.config, key)
                _set(new_config, key, int(round(raw)) if isinstance(old, numbers.Integral) else raw)
        if self.custom_explore_fn is not None:
            explored = self.custom_explore_fn(new_config)
            if not isinstance(explored, dict):
                raise ConfigError(f"PB2: custom_explore_fn must return the new config as a dict, got "
                                  f"{type(explored).__name__}")
            new_config = explored
        # The clone starts a new segment at its source's state, with the values it will run (after the custom fn).
        self._segments[trial_id] = self._segments.get(trial_id, 0) + 1
        self._points.append(_Point(self._segment(trial_id), source.last_train_time, self._values(new_config),
                                   source.last_score, group_id))
        copied = {"pb2": "copied (no observation of the source yet)"}
        return new_config, ({"pb2": "gp-ucb"} if chosen is not None else copied)

    def _select(self, x: np.ndarray, y: np.ndarray, time: float, score: float, own: list[float]) -> np.ndarray:
        """Fit the GP and pick the hyperparameters (scaled) for a clone starting at ``(time, score)``."""
        newest = max(p.time for p in self._points if p.group_id is None)
        if newest > self._pending_time:  # a new round: the points picked before are observed by now
            self._pending, self._pending_time = [], newest
        lows, highs = x[:, :2].min(axis=0), x[:, :2].max(axis=0)
        inputs = x.copy()
        for column in range(2):
            inputs[:, column] = _scale(x[:, column], lows[column], highs[column])
        fixed = np.array([_scale(value, lows[c], highs[c]) for c, value in enumerate((time, score))])
        spread = float(np.std(y))
        targets = (y - float(np.mean(y))) / spread if spread > _TINY else np.zeros_like(y)
        gp = fit_gp(inputs, targets)
        rng = np.random.default_rng(self._rng.getrandbits(64))
        candidates = np.vstack([np.array(own, dtype=float), rng.random((ACQ_CANDIDATES, len(self.bounds)))])
        pending = np.array(self._pending, dtype=float) if self._pending else None
        chosen = ucb_pick(gp, fixed, candidates, pending, ucb_beta(len(y)))
        self._pending.append([float(v) for v in chosen])
        return chosen

    def _revert(self, trial_id: str) -> None:
        group_id = self._undo[trial_id].group_id
        self._points = [p for p in self._points if p.group_id != group_id]
        self._segments[trial_id] -= 1  # the trial goes on with its own configuration: its segment goes on too
        super()._revert(trial_id)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """PBT's state plus the recorded points, the segments and the points picked this round."""
        return {**super().state_dict(), "pb2_points": [asdict(p) for p in self._points],
                "pb2_segments": dict(self._segments), "pb2_pending": [list(p) for p in self._pending],
                "pb2_pending_time": self._pending_time if math.isfinite(self._pending_time) else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        super().load_state_dict(state)
        self._points = [_Point(**p) for p in state["pb2_points"]]
        self._segments = {tid: int(n) for tid, n in state["pb2_segments"].items()}
        self._pending = [list(p) for p in state["pb2_pending"]]
        pending_time = state["pb2_pending_time"]
        self._pending_time = -math.inf if pending_time is None else float(pending_time)

