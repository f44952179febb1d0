"""Population based training (Ray Tune's ``PopulationBasedTraining``) as a searcher.

PBT trains a population of trials side by side. At every *perturbation point* (each ``perturbation_interval``
of ``time_attr``) a trial in the bottom ``quantile_fraction`` of the population *exploits* a trial of the top
quantile: it restarts from that trial's checkpoint with an *explored* copy of its configuration (continuous
values multiplied by a perturbation factor, list values shifted to a neighbour, or either resampled).

Mapping onto TrialGroups and budgets:

* The population is the first group: ``num_samples`` fresh configurations (times the grid points) with
  ``budget`` = the first perturbation point, ``max(perturbation_interval, burn_in_period)``. Given
  ``points_to_evaluate`` are its first members, each counting as one of ``num_samples`` (Ray's
  ``BasicVariantGenerator`` rules, as in random search).
* Every trial pauses when ``result[time_attr] >= budget``; that result is its perturbation point. PBT then
  decides (:meth:`PBT.decide`): a trial that *continues* is promoted by a later group (``trial_ids``) to its next
  perturbation point; a trial that *exploits* becomes an :class:`ExploitRequest`, handed out by
  :meth:`PBT.take_exploits`. The executor applies it: the trial restarts on a new attempt from the source's
  checkpoint, with the new config, and runs to the request's budget (see :class:`ExploitRequest`).
* With ``synch=True`` nothing is decided until every live trial has paused at the same point (Ray's
  synchronous PBT); then the whole population is perturbed at once and moves on to the next common point.

A trial can only be cloned from a checkpoint. PBT learns about checkpoints from the results: a result that
carries ``checkpoint_dir_name`` (the session adds it when ``report`` gets a checkpoint) marks a restore point
of its trial. A trial is cloned from the newest checkpoint it had at its last perturbation point, if it was in the
top quantile there (Ray's ``last_checkpoint``: the state that earned its top-quantile score), so the trainable
should checkpoint at least at every perturbation point. A bottom trial picks a top-quantile trial at random and
continues unchanged when that one has no such checkpoint, as Ray skips such an exploit ("no checkpoint for trial
... Skip exploit").

If the driver never calls :meth:`PBT.take_exploits` (an executor that cannot apply exploits), a request still
pending when ``next_groups`` is called the second time after it was made is withdrawn: the trial keeps its
configuration and is promoted unchanged, with a warning. The search then degrades to a population that is
only ever promoted, and never deadlocks.
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._base import BaseSearcher, Decision, ExploitRequest
from fluidsalus.searchers._random import VariantStream, check_points, count_trials
from fluidsalus.trialgroup.trial import TrialGroup

logger = logging.getLogger(__name__)
#: The logger of the lines Ray's PBT logs at each exploit (``[Exploit] Cloning trial ...``, ``[Explore] Perturbed
#: ...``) and skipped exploit: Ray's PBT module's, so they show as Ray's do (the handler Ray sets on its ``ray``
#: logger prints INFO, also at ``verbose=0``; ``fluidsalus.api.init_ray`` keeps it when fluidsalus starts Ray), and
#: a level set for ``ray.tune.schedulers.pbt`` (or ``ray.tune``) applies to them as to Ray's.
exploit_logger = logging.getLogger("ray.tune.schedulers.pbt")

__all__ = ["CONTINUE", "EXPLOIT", "PBT", "ExploitRequest", "Perturbation", "explore", "quantiles"]

#: Result key the session adds when a result comes with a checkpoint (``fluidsalus.session``).
CHECKPOINT_RESULT_KEY = "checkpoint_dir_name"
#: Result key of the iteration count (always filled in by the session).
ITERATION_KEY = "training_iteration"
#: Result key set on a trial's last result (the run's stop rule met it, or the trial was stopped there).
DONE_KEY = "done"
#: Ray's default ``time_attr`` of PopulationBasedTraining: wall-clock seconds of training.
DEFAULT_TIME_ATTR = "time_total_s"
#: Ray's default perturbation interval, in ``time_attr`` units.
DEFAULT_PERTURBATION_INTERVAL = 60.0
#: Ray's defaults for the quantile, the resampling probability and the perturbation factors.
DEFAULT_QUANTILE_FRACTION = 0.25
DEFAULT_RESAMPLE_PROBABILITY = 0.25
DEFAULT_PERTURBATION_FACTORS = (1.2, 0.8)
#: Largest allowed ``quantile_fraction``: the bottom and top quantiles must not overlap.
MAX_QUANTILE_FRACTION = 0.5
#: Sign that turns a metric into a score where larger is better.
MODE_SIGN = {"max": 1.0, "min": -1.0}
#: Decisions of :meth:`PBT.decide`.
CONTINUE = "continue"
EXPLOIT = "exploit"
#: Group id of the population, and prefix of the later groups and exploits.
POPULATION_GROUP_ID = "pbt-population"
GROUP_ID_PREFIX = "pbt"
#: Shifts of a list value to a neighbouring index (Ray's list perturbation).
LIST_SHIFTS = (-1, 1)
#: Indentation of a nested key's line in the explore summary (Ray's four spaces).
NESTED_INDENT = 4
#: Bits of the seed drawn from PBT's random stream for one NumPy generator (to resample a domain).
NUMPY_SEED_BITS = 64
#: ``next_groups`` calls a request may stay untaken before PBT concludes the driver cannot apply exploits.
#: The driver takes requests right after the ``next_groups`` call that first offered them, so a request
#: still there at the next call was not taken.
UNTAKEN_CALLS_BEFORE_FALLBACK = 2

Mutations = Mapping[str, Any]


class Perturbation(NamedTuple):
    """What PBT does with a trial at a perturbation point.

    Attributes:
        action: :data:`CONTINUE` (keep config and state) or :data:`EXPLOIT` (clone ``source_trial_id``).
        source_trial_id: The top-quantile trial to clone, for :data:`EXPLOIT`.
    """

    action: str
    source_trial_id: str | None = None


@dataclass
class _TrialState:
    """PBT's view of one trial (Ray's ``_PBTTrialState`` plus the budget and the checkpoints).

    ``checkpoint_*`` is the trial's newest checkpoint; ``point_*`` the newest one it had at its last
    perturbation point if it was in the top quantile there (else None): the state others clone (Ray's
    ``last_checkpoint``).
    """

    config: dict[str, Any]
    budget: float
    last_score: float | None = None
    last_train_time: float = 0.0
    last_perturbation_time: float = 0.0
    last_iteration: int = 0
    checkpoint_iteration: int | None = None
    checkpoint_time: float | None = None
    point_iteration: int | None = None
    point_time: float | None = None
    paused: bool = False
    ended: bool = False
    finishing: bool = False  # its last result was ``done``: until another result it is neither ranked nor cloned


@dataclass
class _Undo:
    """What an exploit replaced, to restore it when the exploit is cancelled or never taken."""

    state: dict[str, Any]
    continue_budget: float
    group_id: str
    offered: int = 0


# --------------------------------------------------------------------------------------------------------
# Pure decision functions
# --------------------------------------------------------------------------------------------------------


def quantiles(scores: Sequence[tuple[str, float]], quantile_fraction: float) -> tuple[list[str], list[str]]:
    """Split scored trials into their bottom and top quantiles (Ray's ``_quantiles``).

    Args:
        scores: ``(trial_id, score)`` pairs, larger score is better. NaN scores are left out. Ties keep the
            given order.
        quantile_fraction: Fraction of the population in each quantile, in ``[0, 0.5]``.

    Returns:
        ``(lower, upper)``: trial ids of the bottom and top quantiles, each of
        ``min(ceil(n * quantile_fraction), floor(n / 2))`` trials, worst first. Both are empty when fewer than
        two trials have a score.
    """
    ranked = [trial_id for trial_id, score in sorted(
        ((trial_id, score) for trial_id, score in scores if not math.isnan(score)), key=lambda item: item[1]
    )]
    if len(ranked) <= 1:
        return [], []
    size = min(math.ceil(len(ranked) * quantile_fraction), len(ranked) // 2)
    return ranked[:size], ranked[len(ranked) - size:]


def next_perturbation_point(last_perturbation_time: float, interval: float, burn_in_period: float) -> float:
    """The ``time_attr`` value at which a trial is next considered for perturbation (Ray's rule).

    Args:
        last_perturbation_time: ``time_attr`` of the trial's last perturbation (0 at the start).
        interval: ``perturbation_interval``.
        burn_in_period: No perturbation before this much ``time_attr``.

    Returns:
        ``max(last_perturbation_time + interval, burn_in_period)``.
    """
    return max(last_perturbation_time + interval, burn_in_period)


def _sample(distribution: Any, rng: random.Random) -> Any:
    """Draw from a mutation that is a list, a domain or a callable."""
    if isinstance(distribution, (list, tuple)):
        return copy.deepcopy(rng.choice(list(distribution)))
    if isinstance(distribution, sp.Domain):
        return distribution.draw(np.random.default_rng(rng.getrandbits(NUMPY_SEED_BITS)))
    return distribution()


def _fill_config(config: dict[str, Any], mutations: Mutations, rng: random.Random) -> None:
    """Add the mutated keys a config lacks, sampled from their mutation (Ray's ``_fill_config``)."""
    for key, distribution in mutations.items():
        if key in config:
            continue
        if isinstance(distribution, Mapping):
            config[key] = {}
            _fill_config(config[key], distribution, rng)
        else:
            config[key] = _sample(distribution, rng)


def explore(
    config: Mapping[str, Any],
    mutations: Mutations,
    resample_probability: float,
    perturbation_factors: Sequence[float],
    rng: random.Random,
    custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Perturb a configuration (Ray's ``_explore``), drawing from ``rng`` only.

    For each key of ``mutations``:

    * a dict: explore the nested config the same way (without ``custom_explore_fn``);
    * a list or tuple: with probability ``resample_probability``, or when the current value is not in it,
      pick a value at random; otherwise shift to the left or right neighbour (clamped at the ends);
    * a domain or a callable: with probability ``resample_probability`` draw a new value from it; otherwise
      multiply the current value by one of ``perturbation_factors``. A bool stays a bool, an int is rounded.
      A value that cannot be multiplied (a string from ``choice``, a missing key) is resampled instead.

    Then ``custom_explore_fn(new_config)`` runs, if given.

    Args:
        config: The configuration to perturb (not modified).
        mutations: ``hyperparam_mutations``.
        resample_probability: Probability of resampling instead of perturbing.
        perturbation_factors: Factors to choose from for continuous values.
        rng: The random stream (the same state gives the same result).
        custom_explore_fn: Optional ``f(config) -> config`` applied last.

    Returns:
        ``(new_config, operations)``: the perturbed copy, and per mutated key a description such as
        ``"* 1.2"``, ``"resample"``, ``"shift left"`` or ``"shift right (noop)"`` (nested dicts for nested keys).

    Raises:
        ConfigError: ``custom_explore_fn`` did not return a dict.
    """
    new_config = copy.deepcopy(dict(config))
    operations: dict[str, Any] = {}
    for key, distribution in mutations.items():
        current = config.get(key)
        if isinstance(distribution, Mapping):
            nested, nested_ops = explore(
                current if isinstance(current, Mapping) else {}, distribution, resample_probability,
                perturbation_factors, rng,
            )
            new_config[key], operations[key] = nested, nested_ops
        elif isinstance(distribution, (list, tuple)):
            choices = list(distribution)
            if rng.random() < resample_probability or key not in config or current not in choices:
                new_config[key], operations[key] = copy.deepcopy(rng.choice(choices)), "resample"
            else:
                shift = rng.choice(LIST_SHIFTS)
                old_index = choices.index(current)
                new_index = min(max(old_index + shift, 0), len(choices) - 1)
                new_config[key] = copy.deepcopy(choices[new_index])
                noop = " (noop)" if new_index == old_index else ""
                operations[key] = f"shift {'left' if shift < 0 else 'right'}{noop}"
        else:
            multipliable = key in config and isinstance(current, numbers.Real)
            if rng.random() < resample_probability or not multipliable:
                new_config[key], operations[key] = _sample(distribution, rng), "resample"
            else:
                factor = rng.choice(list(perturbation_factors))
                new_config[key], operations[key] = current * factor, f"* {factor}"
            if isinstance(current, bool):
                new_config[key] = bool(new_config[key])
            elif isinstance(current, numbers.Integral) and isinstance(new_config[key], numbers.Real):
                new_config[key] = int(round(new_config[key]))
    if custom_explore_fn is not None:
        explored = custom_explore_fn(new_config)
        if not isinstance(explored, dict):
            raise ConfigError(
                f"PBT: custom_explore_fn must return the new config as a dict, got {type(explored).__name__}"
            )
        new_config = explored
    return new_config, operations


# --------------------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------------------


def _mutated_params(config: Mapping[str, Any], mutations: Mutations) -> dict[str, Any]:
    """The values of ``config`` at the keys of ``mutations`` (nested dicts followed), as Ray's
    ``_filter_mutated_params_from_config`` picks them for its explore line; keys the config lacks are left out."""
    picked: dict[str, Any] = {}
    for key, distribution in mutations.items():
        if key not in config:
            continue
        value = config[key]
        if isinstance(distribution, Mapping) and isinstance(value, Mapping):
            picked[key] = _mutated_params(value, distribution)
        else:
            picked[key] = value
    return picked


def _summarize_changes(old: Mapping[str, Any], new: Mapping[str, Any], operations: Mapping[str, Any],
                      prefix: str = "") -> str:
    """Ray's ``_summarize_hyperparam_changes``: one line per mutated key, ``lr : 0.0001 --- (* 0.8) --> 8e-05``
    (``old -----> new`` without an operation; a nested dict's keys under its own, indented four spaces).

    Args:
        old: The source's values of the mutated keys (:func:`_mutated_params`).
        new: The new config's values of the same keys.
        operations: Per key, what :func:`explore` did (``"* 0.8"``, ``"resample"``, ...; nested for nested keys).
        prefix: Indentation of the lines.

    Returns:
        The lines, each ending with a newline (empty when nothing was mutated).
    """
    text = ""
    for key, old_value in old.items():
        new_value = new.get(key)
        text += f"{prefix}{key} : "
        operation = operations.get(key) if isinstance(operations, Mapping) else None
        if isinstance(old_value, Mapping) and isinstance(new_value, Mapping):
            nested = operation if isinstance(operation, Mapping) else {}
            text += "\n" + _summarize_changes(old_value, new_value, nested, prefix + " " * NESTED_INDENT)
        else:
            arrow = f"--- ({operation}) -->" if operation else "----->"
            text += f"{old_value} {arrow} {new_value}\n"
    return text


def _score(value: float | None) -> str:
    """A score as Ray's exploit line writes it (``{:4f}``: six decimals)."""
    return f"{math.nan if value is None else value:4f}"


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_range(name: str, value: Any, low: float, high: float) -> float:
    if not _is_real(value) or not low <= float(value) <= high:
        raise ConfigError(f"PBT: {name} must be in [{low:g}, {high:g}] (got {value!r})")
    return float(value)


def _points_space(space: Mapping[str, Any], mutations: Mutations) -> dict[str, Any]:
    """The space that ``points_to_evaluate`` are checked against: ``space`` plus the mutated keys it lacks.

    A mutated key need not be in the space (the population gets it from its mutation), so a point may set it
    too. A list mutation is checked as a ``choice`` of its values (a value outside them is used with a warning,
    as for any point), a domain as itself; a callable accepts any value.
    """
    out = dict(space)
    for key, mutation in mutations.items():
        present = out.get(key)
        nested = isinstance(present, dict) and not (sp.GRID_SEARCH_KEY in present and len(present) == 1)
        if isinstance(mutation, Mapping) and (key not in out or nested):
            out[key] = _points_space(present if nested else {}, mutation)
        elif key in out:
            continue
        elif isinstance(mutation, (list, tuple)):
            out[key] = sp.choice(list(mutation))
        elif isinstance(mutation, sp.Domain):
            out[key] = mutation
        else:
            out[key] = sp.sample_from(mutation)
    return out


def _check_mutations(mutations: Any, path: str = "") -> None:
    """Raise ConfigError unless ``mutations`` is a dict of lists, domains, callables and nested dicts."""
    if not isinstance(mutations, Mapping):
        where = f"hyperparam_mutations[{path!r}]" if path else "hyperparam_mutations"
        raise ConfigError(f"PBT: {where} must be a dict of parameter name -> mutation, got {type(mutations).__name__}")
    for key, value in mutations.items():
        name = f"{path}/{key}" if path else str(key)
        if isinstance(value, Mapping):
            _check_mutations(value, name)
        elif isinstance(value, (list, tuple)):
            if not value:
                raise ConfigError(f"PBT: hyperparam_mutations[{name!r}] is an empty list; give the allowed values")
        elif isinstance(value, sp.Function):
            raise ConfigError(
                f"PBT: hyperparam_mutations[{name!r}] is a sample_from, which PBT cannot perturb; use uniform, "
                "loguniform, choice, ..., a list of values or a callable"
            )
        elif not isinstance(value, sp.Domain) and not callable(value):
            raise ConfigError(
                f"PBT: hyperparam_mutations[{name!r}] must be a list or tuple of values, a search-space domain "
                f"(uniform, loguniform, ...), a callable or a nested dict, got {type(value).__name__}"
            )


# --------------------------------------------------------------------------------------------------------
# The searcher
# --------------------------------------------------------------------------------------------------------


class PBT(BaseSearcher):
    """Population based training with the parameters and semantics of Ray Tune's ``PopulationBasedTraining``.

    Args:
        space: The search space of the initial population (sampled as by random search).
        num_samples: Population size (times the grid points of ``space``), ``>= 1``.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        time_attr: The monotonically increasing result key that measures progress (Ray's default,
            ``"time_total_s"``; ``"training_iteration"`` for iteration counts).
        perturbation_interval: Trials are considered for perturbation every this much ``time_attr`` (> 0).
        burn_in_period: No perturbation before this much ``time_attr`` (>= 0).
        hyperparam_mutations: Per key a list of values, a domain (``uniform(...)``), a callable returning a
            value, or a nested dict of those. Keys a config lacks are sampled from it at the start.
        quantile_fraction: Fraction of the population in the bottom and top quantiles, in ``[0, 0.5]``
            (``0``: no exploitation).
        resample_probability: Probability of resampling a mutated value instead of perturbing it, in
            ``[0, 1]``.
        perturbation_factors: Factors a continuous value is multiplied by (one picked at random).
        custom_explore_fn: ``f(config) -> config`` applied after the built-in perturbations.
        log_config: Keep every exploit in :attr:`exploit_log` (and in the state) so the schedule of each
            trial's config can be rebuilt, as Ray's ``pbt_policy_*.txt`` files do.
        require_attrs: Raise when a result lacks ``metric`` or ``time_attr``; otherwise skip that result.
        synch: Synchronous PBT: wait until every live trial reaches the same perturbation point.
        seed: Seed of the initial population and of every random PBT decision.
        points_to_evaluate: Configurations (nested dicts, possibly partial) that are the first members of the
            population; each counts as one of ``num_samples``, and all of them run even when there are more
            points than samples. A point may set a key of ``space`` or of ``hyperparam_mutations``.

    Raises:
        ConfigError: A parameter is out of range; the message names it and what is allowed. A point is not a
            dict or sets a key that is neither in the space nor mutated.
    """

    #: The population takes turns on the devices by progress (:meth:`turn_key`), as Ray's PBT pauses a trial at a
    #: perturbation point while others wait and then runs the least advanced one.
    takes_turns = True
    pauses_as_ray = True  # (Ray's scheduler pauses its trials: BaseSearcher.pauses_as_ray)
    #: The scheduler the exploit lines name (``[PBT] [Exploit] ...``); the Tune front end sets its scheduler's class
    #: name (``PopulationBasedTraining``, ``PB2``), as Ray's lines give ``self.__class__.__name__``.
    scheduler_name = "PBT"

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: str,
        time_attr: str = DEFAULT_TIME_ATTR,
        perturbation_interval: float = DEFAULT_PERTURBATION_INTERVAL,
        burn_in_period: float = 0.0,
        hyperparam_mutations: Mutations | None = None,
        quantile_fraction: float = DEFAULT_QUANTILE_FRACTION,
        resample_probability: float = DEFAULT_RESAMPLE_PROBABILITY,
        perturbation_factors: Sequence[float] = DEFAULT_PERTURBATION_FACTORS,
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        seed: int | None = None,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        if not isinstance(space, Mapping):
            raise ConfigError(f"PBT: space must be a dict (the search space), got {type(space).__name__}")
        sp.validate_space(dict(space), allow_empty=True)
        if not isinstance(num_samples, numbers.Integral) or isinstance(num_samples, bool) or num_samples < 1:
            raise ConfigError(f"PBT: num_samples must be an int >= 1 (the population size), got {num_samples!r}")
        if not isinstance(metric, str) or not metric:
            raise ConfigError(f"PBT: metric must be the name of a result key, got {metric!r}")
        if mode not in MODE_SIGN:
            raise ConfigError(f"PBT: mode must be one of {sorted(MODE_SIGN)} (got {mode!r})")
        if not isinstance(time_attr, str) or not time_attr:
            raise ConfigError(f"PBT: time_attr must be the name of a result key, got {time_attr!r}")
        if not _is_real(perturbation_interval) or not 0 < perturbation_interval < math.inf:
            raise ConfigError(f"PBT: perturbation_interval must be > 0 and finite (got {perturbation_interval!r})")
        if not _is_real(burn_in_period) or not 0 <= burn_in_period < math.inf:
            raise ConfigError(f"PBT: burn_in_period must be >= 0 and finite (got {burn_in_period!r})")
        mutations = {} if hyperparam_mutations is None else hyperparam_mutations
        _check_mutations(mutations)
        if custom_explore_fn is not None and not callable(custom_explore_fn):
            raise ConfigError(f"PBT: custom_explore_fn must be callable, got {type(custom_explore_fn).__name__}")
        if not mutations and custom_explore_fn is None:
            raise ConfigError(
                "PBT: hyperparam_mutations is empty and custom_explore_fn is None; give at least one of them "
                "(what to perturb)"
            )
        if (
            isinstance(perturbation_factors, (str, bytes)) or not isinstance(perturbation_factors, Iterable)
            or not list(perturbation_factors)
            or not all(_is_real(f) and math.isfinite(f) for f in perturbation_factors)
        ):
            raise ConfigError(
                "PBT: perturbation_factors must be a non-empty sequence of finite numbers "
                f"(got {perturbation_factors!r})"
            )
        if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0):
            raise ConfigError(f"PBT: seed must be None or an int >= 0 (got {seed!r})")
        self.space = dict(space)
        self.num_samples = int(num_samples)
        self.metric = metric
        self.mode = mode
        self.time_attr = time_attr
        self.perturbation_interval = float(perturbation_interval)
        self.burn_in_period = float(burn_in_period)
        self.hyperparam_mutations = dict(mutations)
        self.quantile_fraction = _check_range("quantile_fraction", quantile_fraction, 0.0, MAX_QUANTILE_FRACTION)
        self.resample_probability = _check_range("resample_probability", resample_probability, 0.0, 1.0)
        self.perturbation_factors = tuple(float(f) for f in perturbation_factors)
        self.custom_explore_fn = custom_explore_fn
        self.log_config = bool(log_config)
        self.require_attrs = bool(require_attrs)
        self.synch = bool(synch)
        self.seed = seed
        self._points = check_points(_points_space(self.space, self.hyperparam_mutations), points_to_evaluate, "PBT",
                                    "add it to param_space or to hyperparam_mutations")
        self.points_to_evaluate = [copy.deepcopy(dict(p)) for p in points_to_evaluate or []]
        #: Every exploit, in order (kept when ``log_config``): Ray's policy log as dicts.
        self.exploit_log: list[dict[str, Any]] = []
        #: Counts the changes of :attr:`exploit_log` (an exploit logged or undone), for writers of the policy files.
        self.exploit_log_version = 0
        self._rng = random.Random(seed)
        self._trials: dict[str, _TrialState] = {}
        self._proposed = False
        self._population_size = 0
        self._group_seq = 0
        self._next_sync = self._first_point()
        self._promotions: dict[str, float] = {}  # trial -> budget, for the next next_groups
        self._exploits: dict[str, ExploitRequest] = {}  # untaken, in order
        self._undo: dict[str, _Undo] = {}  # exploits not yet confirmed by a result of the restarted trial
        self.num_perturbations = 0
        #: Points at which a trial was in the top quantile, its state kept for others to clone (Ray's
        #: ``_num_checkpoints``, shown in the status report's line).
        self.num_checkpoints = 0

    # ------------------------------------------------------------------ pure views of the state

    def _first_point(self) -> float:
        return next_perturbation_point(0.0, self.perturbation_interval, self.burn_in_period)

    def _quantiles(self) -> tuple[list[str], list[str]]:
        """Bottom and top quantiles of the live trials that have a score (see :func:`quantiles`).

        A trial whose last result was ``done`` is left out, as Ray's PBT leaves out finished trials: it is being
        stopped (a move: it is ranked again from its next result). (A result at which the run's stop rule ends a
        trial does not come here: the executor tells :meth:`on_trial_complete` at it, as Ray's controller does.)
        """
        scored = [
            (tid, s.last_score) for tid, s in self._trials.items()
            if not s.ended and not s.finishing and s.last_score is not None
        ]
        return quantiles(scored, self.quantile_fraction)

    def decide(self, trial_id: str) -> Perturbation:
        """Decide what a trial at a perturbation point does (draws from the random stream for the source).

        As Ray's ``_checkpoint_or_exploit``: a trial keeps its checkpoint at this point as the one others may clone
        only if it is in the top quantile here (else it has none until its next point); a trial in the bottom
        quantile exploits a top-quantile trial picked at random, and continues instead when that one has no such
        checkpoint (Ray's "no checkpoint for trial ... Skip exploit"); every other trial continues.

        Args:
            trial_id: A trial whose score was just updated at a perturbation point.

        Returns:
            The :class:`Perturbation`.
        """
        lower, upper = self._quantiles()
        state = self._trials[trial_id]
        if trial_id not in upper:  # not a top trial: nothing of this point may be cloned (Ray's last_checkpoint)
            state.point_iteration = state.point_time = None
        else:  # (Ray counts its save here, whether or not there is a checkpoint to keep)
            self.num_checkpoints += 1
        if trial_id not in lower or not upper:
            return Perturbation(CONTINUE)
        source_id = self._rng.choice(upper)
        if self._trials[source_id].point_iteration is None:
            exploit_logger.info(f"[pbt]: no checkpoint for trial {source_id}. Skip exploit for Trial {trial_id}")
            return Perturbation(CONTINUE)
        return Perturbation(EXPLOIT, source_id)

    def debug_string(self, statuses: Mapping[str, str] | None = None) -> str:
        """The scheduler's line of Ray's status report (``PopulationBasedTraining.debug_string()``, PB2's too): the
        points at which a trial was in the top quantile and its exploits so far, e.g. ``PopulationBasedTraining: 2
        checkpoints, 1 perturbs`` (``statuses`` is unused)."""
        return f"PopulationBasedTraining: {self.num_checkpoints} checkpoints, {self.num_perturbations} perturbs"

    def turn_key(self, trial_id: str) -> float:
        """Ray's ``choose_trial_to_run`` key: the ``time_attr`` of the trial's last perturbation point (after an
        exploit, its source's), 0 for a trial that has not reached one (or that PBT has not been told of yet).

        Args:
            trial_id: The trial.

        Returns:
            Its ``last_train_time``; the least advanced trial goes first.
        """
        state = self._trials.get(trial_id)
        return 0.0 if state is None else state.last_train_time

    @property
    def pending_exploits(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Untaken exploit requests: trial id -> (source trial id, new config)."""
        return {tid: (r.source_trial_id, r.config) for tid, r in self._exploits.items()}

    def trial_config(self, trial_id: str) -> dict[str, Any]:
        """The configuration PBT holds for a trial (its explored config once an exploit is made)."""
        return self._trials[trial_id].config

    # ------------------------------------------------------------------ searcher interface

    @property
    def total_samples(self) -> int | None:
        """How many trials the search makes (None when a draw makes grids): Ray's count of its variants."""
        return count_trials(self.space, self.num_samples, self._points)

    def next_groups(self) -> list[TrialGroup]:
        """The population first; then promotions of trials that continue, one group per budget.

        Returns:
            New TrialGroups.
        """
        groups: list[TrialGroup] = []
        if not self._proposed:
            self._proposed = True
            configs = VariantStream(self.space, self.num_samples, self.seed, self._points).take(None)
            for config in configs:
                _fill_config(config, self.hyperparam_mutations, self._rng)
            self._population_size = len(configs)
            groups.append(TrialGroup(group_id=POPULATION_GROUP_ID, configs=configs, budget=self._first_point()))
        self._withdraw_untaken_exploits()
        by_budget: dict[float, list[str]] = {}
        for trial_id, budget in self._promotions.items():
            by_budget.setdefault(budget, []).append(trial_id)
        self._promotions.clear()
        for budget, trial_ids in by_budget.items():
            group_id = self._new_group_id()
            for trial_id in trial_ids:
                self._trials[trial_id].budget = budget
            groups.append(TrialGroup(group_id=group_id, budget=budget, trial_ids=trial_ids))
        return groups

    def take_exploits(self) -> list[ExploitRequest]:
        """Hand the pending exploit requests to the executor, which must apply them (see ExploitRequest).

        Call it right after every ``next_groups()``.

        Returns:
            The requests, oldest first; they are no longer pending.
        """
        taken = list(self._exploits.values())
        self._exploits.clear()
        return taken

    def cancel_exploit(self, trial_id: str) -> None:
        """Told that a taken exploit could not be applied: the trial keeps its config and continues.

        Args:
            trial_id: The trial of the request.
        """
        if trial_id in self._undo:
            self._revert(trial_id)

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        if group_id == POPULATION_GROUP_ID:
            self._trials[trial_id] = _TrialState(config=copy.deepcopy(dict(config)), budget=self._first_point())

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        state = self._trials.get(trial_id)
        if state is None or state.ended:
            return Decision.CONTINUE
        state.finishing = result.get(DONE_KEY) is True
        for key, what in ((self.time_attr, "time_attr"), (self.metric, "metric")):
            if key not in result and self.require_attrs:
                raise ConfigError(
                    f"PBT: {what}={key!r} is not in the result of trial {trial_id} (keys: {sorted(result)}); "
                    "report it, or pass require_attrs=False to skip such results"
                )
        if self.time_attr not in result or self.metric not in result:
            return Decision.CONTINUE
        self._undo.pop(trial_id, None)  # the restarted trial reports: its exploit is applied for good
        time = float(result[self.time_attr])
        state.last_iteration = int(result.get(ITERATION_KEY, state.last_iteration))
        if result.get(CHECKPOINT_RESULT_KEY):
            state.checkpoint_iteration, state.checkpoint_time = state.last_iteration, time
        if time < state.budget:
            return Decision.CONTINUE
        state.last_score = MODE_SIGN[self.mode] * float(result[self.metric])
        state.last_train_time = time
        state.point_iteration, state.point_time = state.checkpoint_iteration, state.checkpoint_time
        state.paused = True
        self._at_point(trial_id, state)
        if self.synch:
            self._maybe_synch()
        else:
            state.last_perturbation_time = time
            self._carry_out(trial_id, self.decide(trial_id), self._budget_after(state.last_perturbation_time))
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        state = self._trials.get(trial_id)
        if state is None:
            return
        state.ended = True
        self._promotions.pop(trial_id, None)
        if trial_id in self._exploits:
            self._revert(trial_id)  # it ended before its exploit was applied
        self._undo.pop(trial_id, None)
        if self.synch:
            self._maybe_synch()

    def is_finished(self) -> bool:
        """True once the population is proposed and every trial has ended (PBT decides until then)."""
        return (
            self._proposed and len(self._trials) >= self._population_size
            and all(s.ended for s in self._trials.values())
        )

    # ------------------------------------------------------------------ decisions carried out

    def _budget_after(self, last_perturbation_time: float) -> float:
        if self.synch:
            return self._next_sync
        return next_perturbation_point(last_perturbation_time, self.perturbation_interval, self.burn_in_period)

    def _new_group_id(self) -> str:
        self._group_seq += 1
        return f"{GROUP_ID_PREFIX}-{self._group_seq}"

    def _maybe_synch(self) -> None:
        """Synchronous mode: once every live trial has reached the common point, perturb them all."""
        live = [tid for tid, s in self._trials.items() if not s.ended]
        if not live or not all(self._trials[tid].paused for tid in live):
            return
        lower, upper = self._quantiles()
        middle = [tid for tid in live if tid not in lower and tid not in upper]
        decisions = []
        for trial_id in upper + middle + lower:  # sources are settled before the trials that clone them
            self._trials[trial_id].last_perturbation_time = self._trials[trial_id].last_train_time
            decisions.append((trial_id, self.decide(trial_id)))
        train_times = {tid: s.last_train_time for tid, s in self._trials.items()}
        for trial_id, decision in decisions:
            if decision.action == EXPLOIT:
                train_times[trial_id] = self._trials[decision.source_trial_id].last_train_time  # type: ignore[index]
        self._next_sync = max(self._next_sync + self.perturbation_interval, max(train_times.values()))
        for trial_id, decision in decisions:
            self._carry_out(trial_id, decision, self._next_sync)

    def _carry_out(self, trial_id: str, decision: Perturbation, continue_budget: float) -> None:
        """Queue a promotion (continue) or an exploit request for a trial paused at a perturbation point."""
        self._trials[trial_id].paused = False
        if decision.action == CONTINUE:
            self._promotions[trial_id] = continue_budget
            return
        state, source_id = self._trials[trial_id], decision.source_trial_id
        assert source_id is not None and source_id != trial_id
        source = self._trials[source_id]
        group_id = f"{GROUP_ID_PREFIX}-exploit-{self.num_perturbations}"
        assert source.point_iteration is not None and source.point_time is not None
        new_config, operations = self._new_config(trial_id, source_id, group_id)
        self._undo[trial_id] = _Undo(state=asdict(state), continue_budget=continue_budget, group_id=group_id)
        # Ray: the clone takes over the source's perturbation clock; it restarts at the source's checkpoint.
        state.config = new_config
        state.last_perturbation_time = source.last_perturbation_time
        state.last_train_time = source.last_train_time
        state.checkpoint_iteration = state.checkpoint_time = state.point_iteration = state.point_time = None
        budget = self._budget_after(state.last_perturbation_time)
        state.budget = budget
        request = ExploitRequest(
            trial_id=trial_id, source_trial_id=source_id, source_iteration=source.point_iteration,
            source_time=source.point_time, config=copy.deepcopy(new_config), budget=budget, group_id=group_id,
        )
        self._exploits[trial_id] = request
        self.num_perturbations += 1
        self._log_exploit(trial_id, source_id, new_config, operations)
        if self.log_config:
            self.exploit_log_version += 1
            self.exploit_log.append({
                "group_id": group_id, "trial_id": trial_id, "source_trial_id": source_id,
                "trial_iteration": state.last_iteration,
                "source_iteration": source.point_iteration, "source_config": copy.deepcopy(source.config),
                "new_config": copy.deepcopy(new_config), "operations": operations,
            })

    def _log_exploit(self, trial_id: str, source_id: str, new_config: Mapping[str, Any],
                     operations: Mapping[str, Any]) -> None:
        """Log Ray's two lines of an exploit, in its words: ``[Exploit] Cloning trial <source> (score = ...) into
        trial <trial> (score = ...)`` and ``[Explore] Perturbed the hyperparameter config of trial<trial>:`` with a
        line per mutated key (:func:`_summarize_changes`; Ray's text has no space before the trial id)."""
        name, source = self.scheduler_name, self._trials[source_id]
        exploit_logger.info(
            f"\n\n[{name}] [Exploit] Cloning trial {source_id} (score = {_score(source.last_score)}) into trial "
            f"{trial_id} (score = {_score(self._trials[trial_id].last_score)})\n")
        changes = _summarize_changes(_mutated_params(source.config, self.hyperparam_mutations),
                                    _mutated_params(new_config, self.hyperparam_mutations), operations)
        exploit_logger.info(f"\n\n[{name}] [Explore] Perturbed the hyperparameter config of trial{trial_id}:\n"
                            + (changes or "No hyperparameters mutated."))

    def _at_point(self, trial_id: str, state: _TrialState) -> None:
        """Called when a trial reaches a perturbation point, its score and time updated (a hook for PB2)."""

    def _new_config(self, trial_id: str, source_id: str, group_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The configuration ``trial_id`` continues with after cloning ``source_id`` (Ray's ``_get_new_config``).

        Args:
            trial_id: The bottom-quantile trial that exploits.
            source_id: The top-quantile trial it clones.
            group_id: The exploit's group id (:meth:`_revert` undoes the exploit by it).

        Returns:
            ``(new_config, operations)``: PBT explores the source's configuration (:func:`explore`).
        """
        return explore(
            self._trials[source_id].config, self.hyperparam_mutations, self.resample_probability,
            self.perturbation_factors, self._rng, self.custom_explore_fn,
        )

    def _revert(self, trial_id: str) -> None:
        """Undo an exploit that was not applied: the trial keeps its config and is promoted unchanged."""
        undo = self._undo.pop(trial_id)
        self._exploits.pop(trial_id, None)
        self.exploit_log = [entry for entry in self.exploit_log if entry["group_id"] != undo.group_id]
        self.exploit_log_version += 1
        ended = self._trials[trial_id].ended
        self._trials[trial_id] = _TrialState(**{**undo.state, "paused": False, "ended": ended})
        if not ended:
            self._promotions[trial_id] = undo.continue_budget

    def _withdraw_untaken_exploits(self) -> None:
        """Count the ``next_groups`` calls each pending request has seen; withdraw the ones never taken."""
        for trial_id in list(self._exploits):
            undo = self._undo[trial_id]
            undo.offered += 1
            if undo.offered >= UNTAKEN_CALLS_BEFORE_FALLBACK:
                logger.warning(
                    "PBT: the driver did not take the exploit request of trial %s (take_exploits() was not "
                    "called after next_groups()); the trial continues with its own config", trial_id,
                )
                self._revert(trial_id)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: trials, pending decisions, the random stream and the exploit log."""
        version, internal, gauss = self._rng.getstate()
        return {
            "proposed": self._proposed,
            "population_size": self._population_size,
            "group_seq": self._group_seq,
            "next_sync": self._next_sync,
            "num_perturbations": self.num_perturbations,
            "num_checkpoints": self.num_checkpoints,
            "rng": [version, list(internal), gauss],
            "trials": {tid: asdict(s) for tid, s in self._trials.items()},
            "promotions": dict(self._promotions),
            "exploits": [asdict(r) for r in self._exploits.values()],
            "undo": {tid: asdict(u) for tid, u in self._undo.items()},
            "exploit_log": copy.deepcopy(self.exploit_log),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self._proposed = bool(state["proposed"])
        self._population_size = int(state["population_size"])
        self._group_seq = int(state["group_seq"])
        self._next_sync = float(state["next_sync"])
        self.num_perturbations = int(state["num_perturbations"])
        self.num_checkpoints = int(state.get("num_checkpoints", 0))  # (a state saved before 2026-12-01 has none)
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
        self._trials = {tid: _TrialState(**s) for tid, s in state["trials"].items()}
        self._promotions = {tid: float(b) for tid, b in state["promotions"].items()}
        self._exploits = {r["trial_id"]: ExploitRequest(**r) for r in state["exploits"]}
        self._undo = {tid: _Undo(**u) for tid, u in state["undo"].items()}
        self.exploit_log = copy.deepcopy(list(state["exploit_log"]))
        self.exploit_log_version += 1
