"""Any Optuna sampler as a searcher, through ``Study.ask`` / ``Study.tell`` (Ray Tune's ``OptunaSearch``).

The search space is converted with :func:`fluidsalus.space.to_optuna_distributions` (nested keys flattened
with ``"/"``; with ``hyperopt_domains``, the domains Optuna has no distribution for are sampled through a transform
of one Optuna parameter, :mod:`fluidsalus.searchers._transformed`). Each new trial is
``study.ask(distributions)``; its config is the sampled values unflattened,
with the space's constants merged back. Every result is reported to the Optuna trial
(``trial.report(value, training_iteration)``), so pruners and dashboards see learning curves, and the trial is
told its outcome when it ends:

* finished or stopped (stop rule, trainable returned): ``COMPLETE`` with the **last** reported value of
  ``metric``, as Ray's ``OptunaSearch`` does (a NaN value becomes ``FAIL``, as in Optuna's ``tell``);
* stopped by the pruner (``pruner=``): ``PRUNED`` (Optuna records the last intermediate value);
* ended without any value of ``metric``: ``PRUNED``, as Ray does;
* errored: ``FAIL`` (Ray tells ``COMPLETE`` when an errored trial had reported a value; we do not).

**Multi-objective** (``metric`` and ``mode`` lists of the same length, as in Ray): the study has one direction per
metric, a finished trial is told the last value of each metric (``PRUNED`` when one is missing), and nothing is
reported while a trial runs: Optuna's ``trial.report`` and its pruners are single-objective, so a pruner is
refused.

Proposals depend on completed trials, so trials are proposed in small groups: first ``batch_size`` trials,
then one new trial per trial that ends, until ``num_samples`` trials are proposed (never, with
``num_samples=-1``: the run then ends by its time budget or a stopper). At most ``batch_size`` trials are asked
and not yet told at any time, so a sequential sampler such as TPE learns from the finished ones.

**Define-by-run** (``define_by_run=f``, Ray's ``OptunaSearch(space=f)``): each trial is ``study.ask()`` with no
fixed distributions, and ``f(trial)`` is called on it in the driver. ``f`` calls ``trial.suggest_*`` (so the
space may be conditional) and returns None or a dict of constants. The configuration is the space's constants,
then the suggested values, then the returned constants, unflattened at ``"/"``. A function whose
``returns_whole_config`` attribute is True (``HyperOptSearch``'s HyperOpt space) returns the whole configuration,
and the suggested values are not added to it.
"""

from __future__ import annotations

import base64
import copy
import math
import numbers
import pickle
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, distribution_to_json, json_to_distribution
from optuna.pruners import BasePruner, NopPruner
from optuna.samplers import BaseSampler, TPESampler
from optuna.study import StudyDirection
from optuna.trial import TrialState

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError, SpaceError
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.searchers._conditional import (
    ConditionalSpace,
    holds_conditional_choice,
    holds_list_domains,
    hyperopt_value,
)
from fluidsalus.searchers._constraints import FeasibleSampler, LinearInequality, parse_inequalities
from fluidsalus.searchers._transformed import GivenValues, TransformedParam, optuna_distributions
from fluidsalus.store import KeptRecords, dumps
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["DEFAULT_BATCH_SIZE", "OptunaSearch"]

#: Trials asked and not yet told at any time, by default: the first batch, then one per ended trial. Small, so
#: that a sequential sampler learns from most trials, yet enough to keep a few devices busy.
DEFAULT_BATCH_SIZE = 4
#: Prefix of the group ids.
GROUP_ID_PREFIX = "optuna"
#: Result key used as the ``step`` of ``trial.report`` (Ray's choice).
STEP_KEY = "training_iteration"
#: Prefix of the system attribute where Optuna's ``SuccessiveHalvingPruner`` keeps a trial's value at rung ``k``
#: (``completed_rung_<k>``).
SHA_RUNG_ATTR = "completed_rung_"
#: User attribute of each Optuna trial holding the fluidsalus trial id (to find it again after a resume).
TRIAL_ID_ATTR = "fluidsalus_trial_id"
#: User attribute of the trials added from ``evaluated_rewards``: the index of their point.
EVALUATED_POINT_ATTR = "fluidsalus_evaluated_point"
#: User attribute of the trials added from ``evaluated_points``: their index.
ADDED_POINT_ATTR = "fluidsalus_added_point"
#: The states an evaluated point may be told in (Ray's ``add_evaluated_point``: finished, failed or pruned).
ADDED_STATES = ("COMPLETE", "FAIL", "PRUNED")
#: Optuna direction of each mode.
DIRECTIONS = {"min": StudyDirection.MINIMIZE, "max": StudyDirection.MAXIMIZE}
#: A define-by-run function slower than this many seconds gets a warning: it runs in the driver, once per
#: proposal, so training must not happen in it (Ray warns at the same point).
DEFINE_BY_RUN_WARN_S = 1.0

#: A define-by-run search space: called with the asked ``optuna.Trial``; returns None or constants.
DefineByRun = Callable[[optuna.Trial], "Mapping[str, Any] | None"]


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_int(name: str, value: Any, low: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ConfigError(f"OptunaSearch: {name} must be an int >= {low} (got {value!r})")
    return int(value)


def _objectives(metric: Any, mode: Any) -> tuple[list[str], list[StudyDirection]]:
    """The metrics and the study's directions: one of each, or lists of the same length (multi-objective)."""
    if isinstance(metric, str) or isinstance(mode, str):
        if not isinstance(metric, str) or not metric:
            raise ConfigError(f"OptunaSearch: metric must be the name of a result key, got {metric!r} (a "
                              "multi-objective search takes a list of metrics and a list of modes)")
        if not isinstance(mode, str) or mode not in DIRECTIONS:  # (a list raised "unhashable type: 'list'")
            raise ConfigError(f"OptunaSearch: mode must be one of {sorted(DIRECTIONS)} (got {mode!r}; a "
                              "multi-objective search takes a list of metrics and a list of modes)")
        return [metric], [DIRECTIONS[mode]]
    metrics = list(metric) if isinstance(metric, Sequence) else []
    modes = list(mode) if isinstance(mode, Sequence) else mode
    if not metrics or not all(isinstance(m, str) and m for m in metrics) or len(set(metrics)) != len(metrics):
        raise ConfigError(f"OptunaSearch: metric must be a result key or a list of distinct result keys, got "
                          f"{metric!r}")
    if not isinstance(modes, list) or len(modes) != len(metrics) or not all(
            isinstance(m, str) and m in DIRECTIONS for m in modes):
        raise ConfigError(f"OptunaSearch: with metric={metrics!r}, mode must be a list of {len(metrics)} values, "
                          f"each one of {sorted(DIRECTIONS)}, got {mode!r}")
    return metrics, [DIRECTIONS[m] for m in modes]


#: System attributes the state leaves out of a trial's: ``fixed_params``, which ``study.ask`` sets for a trial asked
#: with fixed parameters (``enqueue_trial``), as this searcher asks every trial (the state's ``params`` stand for
#: them, and a resumed trial is asked with them again), and the outcome constraints (``constraints``, Optuna 5's
#: ``constraints:<name>``), which the state holds as the trial's ``constraints`` (given back as
#: ``create_trial(constraints=...)``: given twice, Optuna warned at each resume).
UNSAVED_ATTRS = frozenset({"fixed_params", "constraints"})
#: Prefixes of system attribute names the state leaves out, as :data:`UNSAVED_ATTRS`.
UNSAVED_ATTR_PREFIXES = ("constraints:",)


class OptunaSearch(BaseSearcher):
    """Propose configurations with an Optuna sampler (TPE by default) and tell Optuna every outcome.

    Args:
        space: The search space (fluidsalus/Ray domains, ``grid_search`` as a categorical, nested dicts).
            ``randn`` and ``sample_from`` have no Optuna equivalent and are refused. With ``define_by_run`` it
            may hold only constants. A callable is taken as ``define_by_run`` (with no constants).
        num_samples: Trials to run, ``>= 1``, or ``-1`` to propose trials until the run is stopped.
        metric: The result key to optimise, or a list of keys for a multi-objective search.
        mode: ``"min"`` or ``"max"``, or a list of them, one per metric.
        sampler: An ``optuna.samplers.BaseSampler``; default ``TPESampler(seed=seed)``.
        seed: Seed of the default sampler (ignored, with a warning, when ``sampler`` is given, as in Ray).
        study: An existing ``optuna.Study`` to fill (its storage, name and sampler are kept); default a new
            in-memory study. Its directions must match ``mode``. Configure its sampler with
            ``optuna.create_study`` rather than ``sampler=``.
        pruner: An ``optuna.pruners.BasePruner`` (``MedianPruner``, ``SuccessiveHalvingPruner``,
            ``HyperbandPruner``, ...). Each result is reported to it and a trial it prunes is stopped and told
            ``PRUNED``. Without it nothing is pruned (as in Ray), even if ``study`` has a pruner of its own;
            with it and ``study``, it becomes ``study.pruner``. Single-objective only.
        points_to_evaluate: Configurations (nested or ``"/"``-flattened, possibly partial) to run first, in
            order; the sampler fills in missing parameters.
        evaluated_rewards: Values already known for ``points_to_evaluate`` (a list of values per point for a
            multi-objective search): the points are added to the study as finished trials instead of being run
            (they do not count against ``num_samples``).
        batch_size: Trials asked and not yet told at any time (default :data:`DEFAULT_BATCH_SIZE`).
        define_by_run: A function ``f(trial)`` that calls ``trial.suggest_*`` and returns None or a dict of
            constants (see the module docstring). ``evaluated_rewards`` cannot be used with it (as in Ray).
        evaluated_points: Results obtained elsewhere, added to the study as finished trials before anything is
            asked (Ray's ``add_evaluated_point``): dicts with ``parameters`` (every parameter of the space, nested
            or flattened), ``value`` (None for a failed one), ``state`` (one of :data:`ADDED_STATES`) and
            ``intermediate_values`` (a list, or None).
        parameter_constraints: Linear inequalities over float and int parameters in Ax's notation
            (``["x1 + x2 <= 2.0", "x3 >= x4"]``): every configuration proposed satisfies them (the sampler is
            wrapped in a :class:`~fluidsalus.searchers._constraints.FeasibleSampler`), and so must every point
            of ``points_to_evaluate``. Not with a define-by-run space.
        outcome_constraints: Linear inequalities over result keys (``["l2norm <= 1.25"]``): each trial told
            ``COMPLETE`` gets the violation of each (its last result's left side minus the bound; ``<= 0`` is
            feasible) as an Optuna constraint (``Trial.set_constraint``, named by the inequality's text), which
            Optuna's ``GPSampler`` models. A trial whose last result lacks one of those keys, or holds a value
            that is not a finite number, is told ``FAIL`` (Ray's ``AxSearch`` abandons such a trial). Needs
            Optuna 5.
        owner: The search algorithm that the space's errors name (the Tune front end's class the user built:
            ``HyperOptSearch``, ``AxSearch``, ... which run as this one).
        hyperopt_domains: Sample the domains Optuna has no distribution for as HyperOpt samples them (Ray's
            ``HyperOptSearch``): ``randn``/``qrandn`` through their quantile (an Optuna parameter
            ``<key>:quantile``), ``qloguniform`` and ``qlograndint`` (``q > 1``) log-uniformly, then rounded to
            ``q`` (:mod:`fluidsalus.searchers._transformed`). A trial's configuration holds the values, and
            ``points_to_evaluate`` give values too. A ``choice`` whose options hold domains, and a space with
            domains inside a list, are searched define-by-run, as the space Ray's ``HyperOptSearch`` converts them to
            (:mod:`fluidsalus.searchers._conditional`); the space's lists come back tuples, as from Ray's. False
            (Optuna's rules): they are refused.

    Raises:
        ConfigError: A parameter is invalid, or the space has a parameter Optuna cannot express (the message
            names it).
    """

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str | Sequence[str],
        mode: str | Sequence[str],
        sampler: BaseSampler | None = None,
        seed: int | None = None,
        study: optuna.Study | None = None,
        pruner: BasePruner | None = None,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
        evaluated_rewards: Sequence[float] | Sequence[Sequence[float]] | None = None,
        batch_size: int | None = None,
        define_by_run: DefineByRun | None = None,
        evaluated_points: Sequence[Mapping[str, Any]] | None = None,
        parameter_constraints: Sequence[str] | None = None,
        outcome_constraints: Sequence[str] | None = None,
        *,
        owner: str = "OptunaSearch",
        hyperopt_domains: bool = False,
    ) -> None:
        #: The search algorithm its errors about the space and the points name.
        self.owner = owner
        if callable(space) and not isinstance(space, Mapping) and define_by_run is None:
            space, define_by_run = {}, space
        if not isinstance(space, Mapping):
            raise ConfigError(f"OptunaSearch: space must be a dict (the search space), got {type(space).__name__}")
        if define_by_run is not None and not callable(define_by_run):
            raise ConfigError(f"OptunaSearch: define_by_run must be None or a function f(trial) -> dict | None, got "
                              f"{type(define_by_run).__name__}")
        self.define_by_run = define_by_run
        #: The parameters sampled through a transform (``hyperopt_domains``), by the configuration's key.
        self._transformed: dict[str, TransformedParam] = {}
        self._given = GivenValues()  # the values points_to_evaluate gave them
        # (HyperOpt's: a constant list of the space comes back a tuple, as from Ray's HyperOptSearch)
        self._hyperopt_constants = hyperopt_domains
        #: A space with a choice whose options hold parameters, or with domains inside a list (``hyperopt_domains``),
        #: searched define-by-run as Ray's HyperOptSearch searches it; None otherwise.
        self._conditional: ConditionalSpace | None = None
        try:
            if define_by_run is None and hyperopt_domains and (holds_list_domains(space)
                                                                or holds_conditional_choice(space)):
                self._conditional = self.define_by_run = define_by_run = ConditionalSpace(space, owner)
                space = {}  # (the function returns the whole configuration)
            domains, self._constants = sp.split_constants(dict(space))
            self._order = list(sp.flatten_space(dict(space)))  # a config's keys come in the space's order, as in Ray
            if define_by_run is not None:
                if domains:
                    raise ConfigError(
                        f"{owner}: with a define-by-run function the space may hold only constants; it holds "
                        f"parameters to search too ({', '.join(sorted(domains))}). Suggest them in the function"
                    )
                self._distributions: dict[str, BaseDistribution] = {}
            elif hyperopt_domains:
                self._distributions, self._transformed = optuna_distributions(dict(space))
            else:
                self._distributions = sp.to_optuna_distributions(dict(space))
        except SpaceError as exc:
            raise SpaceError(f"{owner}: {exc}") from exc
        if num_samples != sp.INFINITE_SAMPLES:
            num_samples = _check_int("num_samples", num_samples, 1)
        self.num_samples = int(num_samples)
        self._metrics, self._directions = _objectives(metric, mode)
        if sampler is not None and not isinstance(sampler, BaseSampler):
            raise ConfigError(
                f"OptunaSearch: sampler must be an optuna.samplers.BaseSampler, got {type(sampler).__name__}"
            )
        if pruner is not None and not isinstance(pruner, BasePruner):
            raise ConfigError(
                f"OptunaSearch: pruner must be an optuna.pruners.BasePruner, got {type(pruner).__name__}"
            )
        if pruner is not None and len(self._metrics) > 1:
            raise ConfigError(
                f"OptunaSearch: a pruner cannot be used with a multi-objective search (metric={metric!r}): "
                "Optuna's pruners and trial.report are single-objective; remove the pruner (or the scheduler "
                "that maps onto one)"
            )
        if seed is not None:
            _check_int("seed", seed, 0)
            if sampler is not None or study is not None:
                warnings.warn(
                    f"OptunaSearch: seed is ignored because a {'sampler' if sampler is not None else 'study'} was "
                    "given; seed the sampler itself",
                    stacklevel=2,
                )
        self.batch_size = DEFAULT_BATCH_SIZE if batch_size is None else _check_int("batch_size", batch_size, 1)
        #: Ray's ``ConcurrencyLimiter(batch=True)``: no new trial is asked until every trial asked so far is told.
        self.wait_for_batch = False
        self.space = dict(space)
        self.metric = metric if isinstance(metric, str) else list(metric)
        self.mode = mode if isinstance(mode, str) else list(mode)
        self.seed = seed
        self.parameter_constraints = self._parameter_constraints(parameter_constraints)
        self.outcome_constraints = parse_inequalities(outcome_constraints, "OptunaSearch: outcome_constraints")
        if self.outcome_constraints and not hasattr(optuna.trial.Trial, "set_constraint"):
            raise ConfigError(f"OptunaSearch: outcome_constraints need Optuna 5 or later (Trial.set_constraint); "
                              f"this is Optuna {optuna.__version__}")
        self._points = self._check_points(points_to_evaluate)
        self.study = self._make_study(study, sampler, pruner)
        self._prune = pruner is not None
        # Under a pruner each result waits for its verdict, as Optuna's should_prune() answers before the next step:
        # a pruned trial ends at the step the pruner judged (it ran on a report or more, all of them when fast)
        self.verdict_from: float | None = 0.0 if self._prune else None
        if evaluated_rewards is not None:
            if define_by_run is not None:
                raise ConfigError("OptunaSearch: evaluated_rewards cannot be used with a define-by-run space (as in "
                                  "Ray): give points_to_evaluate alone, or the space as a dict")
            self._add_evaluated(evaluated_rewards)
            self._points = []
        if evaluated_points:
            if self._conditional is not None:
                raise ConfigError(f"{owner}: evaluated points cannot be added to a space with a choice whose options "
                                  "hold parameters or with parameters inside a list (it is searched define-by-run, "
                                  "and Ray's HyperOptSearch takes no evaluated points)")
            if define_by_run is not None:
                raise ConfigError("OptunaSearch: evaluated points cannot be added to a define-by-run search (as in "
                                  "Ray): give the space as a dict")
            self._add_points(evaluated_points)
        self._asked = 0
        self._group_seq = 0
        self._unassigned: dict[str, deque[optuna.Trial]] = {}
        self._trials: dict[str, optuna.Trial] = {}  # running (or finished in this process)
        self._params: dict[str, dict[str, Any]] = {}  # every trial's flat parameters
        self._intermediate: dict[str, dict[int, float]] = {}
        self._pruned: set[str] = set()
        # trial id -> (TrialState name, value; multi-objective: the list of values)
        self._told: dict[str, tuple[str, float | list[float] | None]] = {}
        self._returned: dict[int, dict[str, Any]] = {}  # Optuna trial number -> constants define_by_run returned
        self._trial_distributions: dict[str, dict[str, str]] = {}  # define-by-run: trial id -> JSON distributions
        self._told_json = KeptRecords()  # told trials' parts of state_json, encoded once
        self._sampler_unpicklable = False  # warned once that the sampler cannot be saved (_sampler_state)
        self._sampler_saved: tuple[int, str | None] | None = None  # (asks then, the pickle): _sampler_state
        self._constraint_values: dict[str, dict[str, float]] = {}  # trial id -> outcome constraint -> violation
        self._replayed_attrs: dict[str, dict[str, Any]] = {}  # trial id -> system attributes a state gave back

    # ------------------------------------------------------------------ construction helpers

    def _make_study(
        self, study: optuna.Study | None, sampler: BaseSampler | None, pruner: BasePruner | None
    ) -> optuna.Study:
        directions = self._directions
        if study is None:
            return optuna.create_study(
                sampler=self._feasible(sampler if sampler is not None else TPESampler(seed=self.seed)),
                pruner=pruner if pruner is not None else NopPruner(),
                directions=directions,
            )
        if not isinstance(study, optuna.Study):
            raise ConfigError(f"OptunaSearch: study must be an optuna.Study, got {type(study).__name__}")
        if sampler is not None:
            raise ConfigError(
                "OptunaSearch: pass either study or sampler, not both (give the sampler to optuna.create_study)"
            )
        if list(study.directions) != directions:
            raise ConfigError(
                f"OptunaSearch: study.directions is {[d.name for d in study.directions]} but mode={self.mode!r} "
                f"asks for {[d.name for d in directions]}; make them agree"
            )
        if pruner is not None:
            study.pruner = pruner
        study.sampler = self._feasible(study.sampler)
        return study

    def _parameter_constraints(self, texts: Sequence[str] | None) -> list[LinearInequality]:
        """Parse ``parameter_constraints`` against the space's float and int parameters."""
        if texts is not None and self.define_by_run is not None:
            raise ConfigError("OptunaSearch: parameter_constraints need the space as a dict (a define-by-run "
                              "function decides its parameters itself); check them in the function instead")
        transformed = {param.optuna_name for param in self._transformed.values()}
        numeric = [name for name, d in self._distributions.items() if name not in transformed
                   and isinstance(d, (optuna.distributions.FloatDistribution, optuna.distributions.IntDistribution))]
        return parse_inequalities(texts, "OptunaSearch: parameter_constraints", numeric,
                                  "float or int parameter")

    def _feasible(self, sampler: BaseSampler) -> BaseSampler:
        """``sampler``, wrapped so that its proposals satisfy the parameter constraints (if there are any)."""
        if not self.parameter_constraints or isinstance(sampler, FeasibleSampler):
            return sampler
        return FeasibleSampler(sampler, self._distributions, self.parameter_constraints, self.seed)

    def _check_points(self, points: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
        """Flatten and validate ``points_to_evaluate``; return them as flat parameter dicts."""
        if points is None:
            return []
        if isinstance(points, Mapping) or not isinstance(points, Sequence):
            raise ConfigError(
                f"{self.owner}: points_to_evaluate must be a list of configs, got {type(points).__name__}"
            )
        flat_points = []
        for index, point in enumerate(points):
            if not isinstance(point, Mapping):
                raise ConfigError(
                    f"{self.owner}: points_to_evaluate[{index}] must be a dict, got {type(point).__name__}"
                )
            if self._conditional is not None:
                point = self._conditional.point_params(index, point)
            flat: dict[str, Any] = {}
            for key, value in self._flatten_point(index, point).items():
                if key in self._constants:
                    if value != self._constants[key]:
                        raise ConfigError(
                            f"{self.owner}: points_to_evaluate[{index}]['{key}'] = {value!r} but the space fixes "
                            f"it to the constant {self._constants[key]!r}"
                        )
                    continue
                if self.define_by_run is not None:  # the function decides which parameters exist
                    flat[key] = value
                    continue
                if key in self._transformed:
                    transformed = self._transformed[key]
                    try:
                        flat[transformed.optuna_name] = self._given.param(transformed, value)
                    except ValueError as exc:
                        raise ConfigError(f"{self.owner}: points_to_evaluate[{index}]['{key}'] = {value!r} is outside "
                                          f"the parameter's range ({exc})") from exc
                    continue
                distribution = self._distributions.get(key)
                if distribution is None:
                    raise ConfigError(
                        f"{self.owner}: points_to_evaluate[{index}] has '{key}', which is not a parameter of the "
                        f"space (parameters: {self._parameter_keys()})"
                    )
                if not self._contains(distribution, value):
                    raise ConfigError(
                        f"{self.owner}: points_to_evaluate[{index}]['{key}'] = {value!r} is outside the "
                        f"parameter's range {distribution}"
                    )
                flat[key] = value
            self._check_point_constraints(index, flat)
            flat_points.append(flat)
        return flat_points

    def _parameter_keys(self) -> list[str]:
        """The configuration's keys of the space's parameters, sorted (a transformed one's, not its Optuna name)."""
        names = {param.optuna_name: key for key, param in self._transformed.items()}
        return sorted(names.get(name, name) for name in self._distributions)

    def _encoded(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Flat values by the configuration's keys as the study's parameters (a transformed one's Optuna
        parameter in place of its value), and the keys whose values a transformed parameter cannot take."""
        encoded, bad = dict(params), []
        for key, transformed in self._transformed.items():
            if key in encoded:
                value = encoded.pop(key)
                try:
                    encoded[transformed.optuna_name] = self._given.param(transformed, value)
                except ValueError:
                    bad.append(key)
        return encoded, bad

    def _decoded(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The study's parameters as values by the configuration's keys (the inverse of :meth:`_encoded`)."""
        decoded = dict(params)
        for key, transformed in self._transformed.items():
            if transformed.optuna_name in decoded:
                decoded[key] = self._given.value(transformed, decoded.pop(transformed.optuna_name))
        return decoded

    def _check_point_constraints(self, index: int, flat: Mapping[str, Any]) -> None:
        """A point to evaluate gives every parameter the constraints name, and satisfies them."""
        for inequality in self.parameter_constraints:
            missing = sorted(set(inequality.weights) - set(flat))
            if missing:
                raise ConfigError(f"{self.owner}: points_to_evaluate[{index}] leaves {missing} to the sampler, but "
                                  f"parameter_constraints {inequality.text!r} names them; give their values")
            if not inequality.holds(flat):
                raise ConfigError(f"{self.owner}: points_to_evaluate[{index}] = {dict(flat)!r} breaks "
                                  f"parameter_constraints {inequality.text!r}")

    def _flatten_point(self, index: int, point: Mapping[str, Any]) -> dict[str, Any]:
        """A point given nested (``{"model": {"lr": 0.1}}``) or flattened (``{"model/lr": 0.1}``), flattened."""
        try:
            return sp.flatten_config(point)
        except SpaceError as exc:
            raise ConfigError(f"{self.owner}: points_to_evaluate[{index}]: {exc}") from exc

    @staticmethod
    def _contains(distribution: BaseDistribution, value: Any) -> bool:
        try:
            return bool(distribution._contains(distribution.to_internal_repr(value)))
        except (TypeError, ValueError):
            return False

    def _add_evaluated(self, rewards: Sequence[Any]) -> None:
        if not self._points:
            raise ConfigError(f"{self.owner}: evaluated_rewards needs points_to_evaluate (the points they belong to)")
        if isinstance(rewards, (str, bytes)) or not isinstance(rewards, Sequence) or len(rewards) != len(
            self._points
        ):
            raise ConfigError(
                f"{self.owner}: evaluated_rewards must be a list with one value per point of points_to_evaluate "
                f"({len(self._points)}), got {rewards!r}"
            )
        width = len(self._metrics)
        for index, reward in enumerate(rewards):
            if width == 1 and not _is_real(reward):
                raise ConfigError(f"{self.owner}: evaluated_rewards[{index}] must be a number, got {reward!r}")
            if width > 1 and (not isinstance(reward, Sequence) or len(reward) != width
                              or not all(_is_real(v) for v in reward)):
                raise ConfigError(f"{self.owner}: evaluated_rewards[{index}] must be a list of {width} numbers, one "
                                  f"per metric {self._metrics}, got {reward!r}")
        present = {
            ft.user_attrs[EVALUATED_POINT_ATTR] for ft in self.study.get_trials(deepcopy=False)
            if EVALUATED_POINT_ATTR in ft.user_attrs
        }
        for index, (point, reward) in enumerate(zip(self._points, rewards, strict=True)):
            if index in present:
                continue  # a persistent study reopened by a resumed run already holds it
            self.study.add_trial(optuna.trial.create_trial(
                params=point, distributions={k: self._distributions[k] for k in point},
                user_attrs={EVALUATED_POINT_ATTR: index}, **self._value_kwargs(reward),
            ))

    def _add_points(self, points: Sequence[Mapping[str, Any]]) -> None:
        """Add ``evaluated_points`` to the study as finished trials (once: a reopened persistent study has them)."""
        present = {
            ft.user_attrs[ADDED_POINT_ATTR] for ft in self.study.get_trials(deepcopy=False)
            if ADDED_POINT_ATTR in ft.user_attrs
        }
        for index, point in enumerate(points):
            given = self._flatten_point(index, point["parameters"])
            params, bad = self._encoded(given)
            if bad:
                raise ConfigError(f"{self.owner}: evaluated point {index}: {bad} outside the space "
                                  f"({ {key: given[key] for key in bad} })")
            missing = sorted(set(self._parameter_keys()) - set(self._decoded(params)))
            if missing:
                raise ConfigError(f"{self.owner}: evaluated point {index}: parameters has no value for {missing} "
                                  "(an evaluated point gives every parameter of the space)")
            outside = [key for key, value in params.items()
                       if key in self._distributions and not self._contains(self._distributions[key], value)]
            if outside:
                raise ConfigError(f"{self.owner}: evaluated point {index}: {outside} outside the space "
                                  f"({ {key: params[key] for key in outside} })")
            if point["state"] not in ADDED_STATES:
                raise ConfigError(f"{self.owner}: evaluated point {index}: state must be one of {list(ADDED_STATES)}, "
                                  f"got {point['state']!r}")
            if index in present:
                continue
            state = TrialState[point["state"]]
            value = None if state == TrialState.FAIL else point["value"]
            intermediate = dict(enumerate(point.get("intermediate_values") or [])) or None
            self.study.add_trial(optuna.trial.create_trial(
                params={key: params[key] for key in self._distributions}, distributions=dict(self._distributions),
                state=state, intermediate_values=intermediate, user_attrs={ADDED_POINT_ATTR: index},
                **self._value_kwargs(value),
            ))

    def _value_kwargs(self, value: Any) -> dict[str, Any]:
        """``create_trial``'s argument for a told value: ``value`` (one objective) or ``values`` (several)."""
        if value is None:
            return {}
        if len(self._metrics) == 1:
            return {"value": float(value)}
        return {"values": [float(v) for v in value]}

    # ------------------------------------------------------------------ searcher interface

    def _ask(self, params: Mapping[str, Any] | None) -> optuna.Trial:
        """Ask the study for a trial; ``params`` (flat, possibly partial) are fixed through the queue.

        With a define-by-run space the trial is asked without distributions and the function is run on it.
        """
        if params:
            self.study.enqueue_trial(dict(params))
        if self.define_by_run is None:
            return self.study.ask(self._distributions)
        trial = self.study.ask()
        self._returned[trial.number] = self._run_define_by_run(trial)
        return trial

    def _run_define_by_run(self, trial: optuna.Trial) -> dict[str, Any]:
        """Call the define-by-run function on ``trial``; return the constants it returned (checked)."""
        assert self.define_by_run is not None
        started = time.monotonic()
        returned = self.define_by_run(trial)
        took = time.monotonic() - started
        if took > DEFINE_BY_RUN_WARN_S:
            warnings.warn(
                f"OptunaSearch: the define-by-run function took {took:.1f} s; it runs in the driver for every "
                "proposal, so do the training in the trainable, not in it",
                UserWarning,
                stacklevel=4,
            )
        if returned is None:
            return {}
        if not isinstance(returned, Mapping) or not all(isinstance(key, str) for key in returned):
            raise ConfigError(
                "OptunaSearch: the define-by-run function must return None or a dict with str keys (constants "
                f"to add to the configuration); it returned {type(returned).__name__}"
                + (f" with keys {list(returned)}" if isinstance(returned, Mapping) else "")
            )
        return copy.deepcopy(dict(returned))

    def _config(self, trial: optuna.Trial) -> dict[str, Any]:
        returned = self._returned.get(trial.number, {})
        # A function that builds the whole configuration (a HyperOpt space) says so; its parameters' names are
        # labels, not keys of the configuration.
        params = {} if getattr(self.define_by_run, "returns_whole_config", False) else self._decoded(trial.params)
        constants = copy.deepcopy(self._constants)
        if getattr(self, "_hyperopt_constants", False):  # (a searcher pickled before h253 has none)
            constants = {key: hyperopt_value(value) for key, value in constants.items()}
        merged = {**constants, **params, **copy.deepcopy(returned)}
        ordered = {key: merged[key] for key in self._order if key in merged}
        return sp.unflatten({**ordered, **merged})

    def next_groups(self) -> list[TrialGroup]:
        """One group of new trials, as many as free batch slots and the remaining samples allow.

        Returns:
            A list with at most one TrialGroup (no budget: trials run to their end).
        """
        if self.wait_for_batch and self.in_flight:
            return []
        group = self.propose(self.batch_size - self.in_flight)
        return [] if group is None else [group]

    @property
    def in_flight(self) -> int:
        """Trials asked and not yet told."""
        return self._asked - len(self._told)

    def propose(self, count: int) -> TrialGroup | None:
        """Ask the study for up to ``count`` new trials, whatever the batch size (a scheduler that groups
        trials itself, such as HyperBand filling a bracket, calls this instead of :meth:`next_groups`).

        Args:
            count: How many at most; fewer when ``num_samples`` runs out.

        Returns:
            A TrialGroup of the new trials (no budget), or None when there are none.
        """
        if self.num_samples != sp.INFINITE_SAMPLES:
            count = min(count, self.num_samples - self._asked)
        if count <= 0:
            return None
        trials = []
        for _ in range(count):
            point = self._points[self._asked] if self._asked < len(self._points) else None
            trials.append(self._ask(point))
            self._asked += 1
        group_id = f"{GROUP_ID_PREFIX}-{self._group_seq}"
        self._group_seq += 1
        self._unassigned[group_id] = deque(trials)
        return TrialGroup(group_id=group_id, configs=[self._config(t) for t in trials])

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        queue = self._unassigned.get(group_id)
        if not queue:
            return
        trial = queue.popleft()
        if not queue:
            del self._unassigned[group_id]
        trial.set_user_attr(TRIAL_ID_ATTR, trial_id)
        self._trials[trial_id] = trial
        self._params[trial_id] = dict(trial.params)
        self._intermediate[trial_id] = {}
        if self.define_by_run is not None:
            self._returned.pop(trial.number, None)
            self._trial_distributions[trial_id] = {
                name: distribution_to_json(d) for name, d in trial.distributions.items()
            }

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        """Report the value to the Optuna trial; STOP when the pruner prunes it.

        Returns:
            ``Decision.STOP`` for a pruned trial, otherwise ``Decision.CONTINUE``.
        """
        trial = self._trials.get(trial_id)
        if len(self._metrics) > 1:
            return Decision.CONTINUE  # Optuna has no intermediate values for several objectives
        value, step = result.get(self._metrics[0]), result.get(STEP_KEY)
        if trial is None or trial_id in self._told or not _is_real(value) or not _is_real(step):
            return Decision.CONTINUE
        reported = self._intermediate[trial_id]
        if int(step) in reported:
            return Decision.CONTINUE  # a restarted attempt reports a step again: Optuna keeps the first
        trial.report(float(value), int(step))
        reported[int(step)] = float(value)
        if self._prune and trial.should_prune():
            self._pruned.add(trial_id)
            return Decision.STOP
        return Decision.CONTINUE

    def successive_halving_lines(self, grace_period: float, max_t: float, reduction_factor: float,
                                 stopped_at_max_t: Iterable[str] = ()) -> str | None:
        """Ray's ``AsyncHyperBandScheduler.debug_string()`` for the ASHA this search runs as Optuna's
        ``SuccessiveHalvingPruner`` (fluidsalus.tune's ``OptunaSearch`` + ``ASHAScheduler``), from the study's true
        state; None when the study's pruner is no ``SuccessiveHalvingPruner``::

            Using AsyncHyperBand: num_stopped=6
            Bracket: Iter 4.000: -0.51 | Iter 2.000: -1.16 | Iter 1.000: -3.02

        ``num_stopped`` counts this search's trials the pruner stopped and those of ``stopped_at_max_t`` (a stop
        rule ends them there, and this search only learns their end: Ray's ASHA counts them). Each rung is Ray's
        milestone (:func:`~fluidsalus.searchers._asha.asha_milestones`: the pruner's rung ``k`` is reached at
        ``grace_period * reduction_factor ** k``) with the cutoff the pruner used at its latest decision there: of
        the values the study's trials recorded at the rung (``completed_rung_<k>``, every trial of the study, as
        the pruner compares them), the worst that is promoted (the ``len // reduction_factor``-th best, the best
        while there are fewer), as a reward (negated for ``minimize``, as Ray shows it); None before any value.

        Args:
            grace_period: The scheduler's ``grace_period`` (the pruner's ``min_resource``).
            max_t: The scheduler's ``max_t``.
            reduction_factor: The scheduler's ``reduction_factor``.
            stopped_at_max_t: The trials stopped at ``max_t`` (with ASHA's ``stop_last_trials``).
        """
        from optuna.pruners import SuccessiveHalvingPruner

        from fluidsalus.searchers._asha import asha_lines, asha_milestones, bracket_line

        if not isinstance(self.study.pruner, SuccessiveHalvingPruner) or len(self._metrics) > 1:
            return None
        stopped = self._pruned | set(stopped_at_max_t)
        milestones = asha_milestones(grace_period, max_t, reduction_factor, 0)
        frozen = self.study.get_trials(deepcopy=False)
        minimize = self.study.direction == StudyDirection.MINIMIZE
        rungs: list[tuple[float, float | None]] = []
        for index, milestone in enumerate(milestones):
            key = f"{SHA_RUNG_ATTR}{len(milestones) - 1 - index}"
            values = sorted(float(t.system_attrs[key]) for t in frozen if key in t.system_attrs)
            if not values:
                rungs.append((milestone, None))
                continue
            kept = max(int(len(values) // reduction_factor) - 1, 0)  # (Optuna's promotable index)
            cutoff = values[kept] if minimize else values[-(kept + 1)]
            rungs.append((milestone, -cutoff if minimize else cutoff))
        return asha_lines(len(stopped), [bracket_line(rungs)])

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        """Tell the study the trial's outcome (see the module docstring for the states)."""
        trial = self._trials.get(trial_id)
        if trial is None or trial_id in self._told:
            return
        values = [result.get(m) for m in self._metrics] if result else [None]
        if error:
            frozen = self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        elif trial_id in self._pruned or any(v is None for v in values):
            frozen = self.study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
        elif not self._set_constraints(trial_id, trial, result or {}):
            frozen = self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        else:
            frozen = self.study.tell(trial, values[0] if len(values) == 1 else values, skip_if_finished=True)
        if len(self._metrics) == 1:
            self._told[trial_id] = (frozen.state.name, frozen.value)
        else:
            self._told[trial_id] = (frozen.state.name, None if frozen.values is None else list(frozen.values))

    def _set_constraints(self, trial_id: str, trial: optuna.Trial, result: Mapping[str, Any]) -> bool:
        """Set each outcome constraint's violation on ``trial`` from its last ``result``.

        Returns:
            False (nothing set, with a warning) when the result lacks a key the constraints name or holds a
            value that is not a finite number: the trial is then told ``FAIL``.
        """
        if not self.outcome_constraints:
            return True
        names = sorted({name for c in self.outcome_constraints for name in c.weights})
        bad = [name for name in names if not _is_real(result.get(name)) or not math.isfinite(result[name])]
        if bad:
            warnings.warn(f"OptunaSearch: trial {trial_id} is told FAIL: its last result has no finite number for "
                          f"{bad}, which outcome_constraints name", UserWarning, stacklevel=3)
            return False
        violations = {c.text: c.violation(result) for c in self.outcome_constraints}
        for text, violation in violations.items():
            trial.set_constraint(text, violation)
        self._constraint_values[trial_id] = violations
        return True

    def is_finished(self) -> bool:
        """True once ``num_samples`` trials are proposed (never with ``num_samples=-1``)."""
        return self.num_samples != sp.INFINITE_SAMPLES and self._asked >= self.num_samples

    @property
    def endless(self) -> bool:
        """Whether ``num_samples`` is -1 (propose until the run is stopped)."""
        return self.num_samples == sp.INFINITE_SAMPLES

    def optuna_trial(self, trial_id: str) -> optuna.Trial | None:
        """The Optuna trial behind a fluidsalus trial (None for an unknown id)."""
        return self._trials.get(trial_id)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs: every proposed trial's parameters, intermediate values and outcome, and the
        sampler as it is now (its random generators' state: :meth:`_sampler_state`).

        The Optuna study itself is not in it. :meth:`load_state_dict` replays the finished trials into the
        study when they are not there (an in-memory study), and asks running trials again.

        Returns:
            A JSON-serialisable dict.
        """
        return {
            "asked": self._asked,
            "group_seq": self._group_seq,
            "trials": {trial_id: self._record(trial_id) for trial_id in self._params},
            "unassigned": {gid: [dict(t.params) for t in queue] for gid, queue in self._unassigned.items()},
            "sampler": self._sampler_state(),
        }

    def _sampler_state(self) -> str | None:
        """The study's sampler, pickled (base64 text), or None when it cannot be pickled.

        A seeded sampler draws from its own random generators. Rebuilt from its seed on resume, it would draw
        the sequence again from the start and propose the configurations the run already has (TPE's first
        ``n_startup_trials`` are random draws). Ray saves its whole ``OptunaSearch`` with the sampler in it; so is
        the sampler here, with every state this searcher writes (about 11 KB and 0.25 ms for a TPESampler). It
        draws only when a trial is asked, so the pickle is made again only after an ask: the states written for
        the results in between reuse it.
        """
        if self._sampler_saved is not None and self._sampler_saved[0] == self._asked:
            return self._sampler_saved[1]
        try:
            text: str | None = base64.b64encode(pickle.dumps(self.study.sampler)).decode("ascii")
        except Exception as e:  # noqa: BLE001 - a sampler of the user's own that cannot be pickled
            if not self._sampler_unpicklable:
                self._sampler_unpicklable = True
                warnings.warn(f"OptunaSearch: the sampler {type(self.study.sampler).__name__} cannot be pickled "
                              f"({e}): a resumed run starts it afresh, and a seeded one may propose "
                              "configurations again", stacklevel=2)
            text = None
        self._sampler_saved = (self._asked, text)
        return text

    def _record(self, trial_id: str) -> dict[str, Any]:
        """One trial's part of :meth:`state_dict`."""
        state, value = self._told.get(trial_id, (None, None))
        record = {
            "params": dict(self._params[trial_id]),
            "intermediate_values": {str(step): v for step, v in self._intermediate[trial_id].items()},
            "state": state,
            "value": value,
            "pruned": trial_id in self._pruned,
        }
        if trial_id in self._trial_distributions:  # define-by-run: each trial has its own parameters
            record["distributions"] = dict(self._trial_distributions[trial_id])
        if trial_id in self._constraint_values:
            record["constraints"] = dict(self._constraint_values[trial_id])
        attrs = self._system_attrs(trial_id)
        if attrs:
            record["system_attrs"] = attrs
        return record

    def _system_attrs(self, trial_id: str) -> dict[str, Any]:
        """The trial's system attributes in the study: what its pruner and sampler keep there (the successive
        halving pruner's ``completed_rung_<k>`` values: without them a resumed trial was judged at rung 0 again,
        its next value against other trials' values of other steps). A trial replayed from a state keeps the ones
        it was given back, a running one reads them from the study."""
        trial = self._trials.get(trial_id)
        if trial is None:
            return dict(self._replayed_attrs.get(trial_id, {}))
        attrs = self.study._storage.get_trial_system_attrs(trial._trial_id)
        return {key: value for key, value in attrs.items()
                if key not in UNSAVED_ATTRS and not key.startswith(UNSAVED_ATTR_PREFIXES)}

    def state_json(self) -> str:
        """:meth:`state_dict` as JSON text, with each finished trial's part encoded once and kept.

        The state holds every trial's parameters and intermediate values, and it is written with every batch of
        results (an Optuna study is not replayable), so encoding it whole each time made a long sweep's driver
        spend most of its time in ``json.dumps`` (1,000 trials: 8.7 of 15.7 s). A told trial's part no longer
        changes; only the running trials' parts are encoded again.

        Returns:
            The same JSON object ``dumps(self.state_dict())`` encodes.
        """
        trials = self._told_json.encode(self._params, self._record, lambda trial_id: trial_id in self._told)
        unassigned = {gid: [dict(t.params) for t in queue] for gid, queue in self._unassigned.items()}
        return (f'{{"asked":{dumps(self._asked)},"group_seq":{dumps(self._group_seq)},'
                f'"trials":{trials},"unassigned":{dumps(unassigned)},"sampler":{dumps(self._sampler_state())}}}')

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, into this searcher's study.

        Finished trials found in the study (by their ``fluidsalus_trial_id`` user attribute, e.g. a persistent
        study) are kept; the others are added with ``study.add_trial(create_trial(...))``, so the sampler
        learns from them again (their trial numbers and timestamps are new). A trial that was running is
        asked again with the same parameters and its intermediate values re-reported (a stale RUNNING copy in
        a persistent study is told ``FAIL``): the resumed run continues it from its checkpoint.
        """
        existing = {
            ft.user_attrs[TRIAL_ID_ATTR]: ft for ft in self.study.get_trials(deepcopy=False)
            if TRIAL_ID_ATTR in ft.user_attrs
        }
        self._asked = int(state["asked"])
        self._group_seq = int(state["group_seq"])
        self._trials, self._params, self._intermediate, self._pruned, self._told = {}, {}, {}, set(), {}
        self._unassigned, self._returned, self._trial_distributions = {}, {}, {}
        self._constraint_values = {}
        self._told_json.clear()
        self._sampler_saved = None
        self._replayed_attrs = {}
        for trial_id, record in state["trials"].items():
            params = dict(record["params"])
            self._params[trial_id] = params
            attrs = record.get("system_attrs") or {}  # (a state saved before 2026-11-30 has none)
            if attrs:
                self._replayed_attrs[trial_id] = dict(attrs)
            intermediate = {int(step): float(v) for step, v in record["intermediate_values"].items()}
            if record["pruned"]:
                self._pruned.add(trial_id)
            old = existing.get(trial_id)
            if "distributions" in record:
                self._trial_distributions[trial_id] = dict(record["distributions"])
            if record["state"] is not None:
                constraints = record.get("constraints")
                if constraints is not None:
                    self._constraint_values[trial_id] = dict(constraints)
                if old is None:
                    self.study.add_trial(optuna.trial.create_trial(
                        state=TrialState[record["state"]], params=params,
                        distributions=self._distributions_of(record, params),
                        intermediate_values=intermediate, user_attrs={TRIAL_ID_ATTR: trial_id},
                        system_attrs=dict(attrs),
                        **self._value_kwargs(record["value"]),
                        **({} if constraints is None else {"constraints": dict(constraints)}),
                    ))
                self._told[trial_id] = (record["state"], record["value"])
                self._intermediate[trial_id] = intermediate
                continue
            if old is not None and old.state == TrialState.RUNNING:
                self.study.tell(old.number, state=TrialState.FAIL, skip_if_finished=True)
            trial = self._ask(params)
            self._returned.pop(trial.number, None)
            trial.set_user_attr(TRIAL_ID_ATTR, trial_id)
            if self.define_by_run is not None:
                self._trial_distributions[trial_id] = {
                    name: distribution_to_json(d) for name, d in trial.distributions.items()
                }
            for step, value in sorted(intermediate.items()):
                trial.report(value, step)
            # What its pruner kept (its rungs), where the new ask did not set its own (the sampler's attributes)
            asked = self.study._storage.get_trial_system_attrs(trial._trial_id)
            for key, value in attrs.items():
                if key not in asked:
                    self.study._storage.set_trial_system_attr(trial._trial_id, key, value)
            self._trials[trial_id], self._intermediate[trial_id] = trial, intermediate
        for group_id, records in state["unassigned"].items():
            self._unassigned[group_id] = deque(self._ask(params) for params in records)
        self._load_sampler(state.get("sampler"))

    def _load_sampler(self, text: str | None) -> None:
        """Put back the sampler :meth:`_sampler_state` saved (after the replay above, which asked the running
        trials again with fixed parameters), so that it goes on drawing where it was. A state of another kind of
        sampler than this run's (the script changed it), or one that cannot be read, is not used."""
        if text is None:
            return
        try:
            sampler = pickle.loads(base64.b64decode(text))
        except Exception as e:  # noqa: BLE001 - written by another version of the sampler's package, say
            warnings.warn(f"OptunaSearch: the saved sampler cannot be read ({e}); the run goes on with a new one",
                          stacklevel=2)
            return
        if type(sampler) is type(self.study.sampler):
            self.study.sampler = sampler
            self._sampler_saved = (self._asked, text)

    def _distributions_of(self, record: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, BaseDistribution]:
        """The distributions of a saved trial: its own (define-by-run) or the space's."""
        saved = record.get("distributions")
        if saved is not None:
            return {name: json_to_distribution(text) for name, text in saved.items()}
        return {k: self._distributions[k] for k in params}
