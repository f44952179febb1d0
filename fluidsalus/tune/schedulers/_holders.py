"""Ray Tune's trial schedulers as configuration holders.

Each class has the signature and defaults of its ``ray.tune.schedulers`` namesake (Ray 2.x) and only keeps
its arguments. Ray's schedulers act on a search algorithm's trials; fluidsalus's searchers do both jobs, so
at ``Tuner.fit()`` the scheduler, the search algorithm, the ``param_space`` and ``metric``/``mode`` are
combined into one :mod:`fluidsalus.searchers` searcher (see :mod:`fluidsalus.tune._translate`).

The arguments are checked when the scheduler is built, by building the fluidsalus searcher it maps onto
over a placeholder space, so a bad value fails at once with the engine's message under the Ray class's name,
for example ``AsyncHyperBandScheduler: reduction_factor must be > 1 (got 1)``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.tune._config import MetricModeHolder, check_metric, check_mode
from fluidsalus.tune._domains import translate_ray_values

__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "DistributeResources",
    "DistributeResourcesToTopJob",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PB2",
    "PopulationBasedTraining",
    "PopulationBasedTrainingReplay",
    "ResourceChangingScheduler",
    "TrialScheduler",
]

#: Placeholder space, metric and mode used to check a scheduler's arguments with the engine's own checks.
_PROBE_SPACE: dict[str, Any] = {"_": 0}
_PROBE_METRIC = "_metric"
_PROBE_MODE = "max"


def _probe(owner: str, engine_name: str, build: Callable[[], Any]) -> None:
    """Build the engine searcher once to check the arguments; its ConfigError is renamed after ``owner``."""
    try:
        build()
    except ConfigError as exc:
        message = str(exc)
        prefix = f"{engine_name}: "
        raise ConfigError(f"{owner}: {message.removeprefix(prefix)}") from None


class TrialScheduler(MetricModeHolder):
    """Base class of the schedulers (``ray.tune.schedulers.TrialScheduler``): holds ``metric`` and ``mode``.

    A scheduler of your own subclasses it as in Ray and overrides ``on_trial_result(tune_controller, trial,
    result)`` to return :attr:`CONTINUE`, :attr:`PAUSE` or :attr:`STOP` (and, if it needs them, ``on_trial_add``,
    ``on_trial_complete``, ``on_trial_error``, ``on_trial_remove``); :mod:`fluidsalus.tune._custom_scheduler`
    runs it.
    """

    CONTINUE = "CONTINUE"  #: Let the trial go on.
    PAUSE = "PAUSE"  #: Ray: pause the trial (fluidsalus lets it go on, with a warning).
    STOP = "STOP"  #: Stop the trial.
    NOOP = "NOOP"  #: No decision.

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(metric, mode)

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        """Told of each new trial."""

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        """Told of a trial that failed for good."""

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        """The decision on a trial's result: :attr:`CONTINUE` (the default), :attr:`PAUSE` or :attr:`STOP`."""
        return self.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any] | None) -> None:
        """Told of a trial that ended, with its last result."""

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        """Told of a trial that ended before it reported."""

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        """Ray's hook to pick the next trial; fluidsalus's planner decides instead, so it is never called."""
        return None

    def debug_string(self) -> str:
        """A line about the scheduler (Ray's hook)."""
        return repr(self)

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """Ray's hook: take ``metric``/``mode`` unless the scheduler already has its own (then False)."""
        return self._take_metric_mode(metric, mode)

    def describe(self) -> dict[str, Any]:
        """The constructor arguments (for messages and docs)."""
        return {"metric": self._metric, "mode": self._mode}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"{type(self).__name__}({args})"


#: Per thread, by ``id(scheduler)``: the built-in rule of the search now calling one of that scheduler's hooks.
_JUDGING = threading.local()


@contextlib.contextmanager
def judging(scheduler: Any, rule: Any) -> Iterator[None]:
    """While a hook of ``scheduler`` (a subclass of a built-in scheduler, run as a scheduler of the user's own) is
    called, its base's hooks answer with ``rule`` (see :class:`_RuleHooks`)."""
    rules: dict[int, Any] = _JUDGING.__dict__.setdefault("rules", {})
    key, before = id(scheduler), rules.get(id(scheduler))
    rules[key] = rule
    try:
        yield
    finally:
        if before is None:
            rules.pop(key, None)
        else:
            rules[key] = before


def _rule(scheduler: Any) -> Any:
    return getattr(_JUDGING, "rules", {}).get(id(scheduler))


class _RuleHooks(TrialScheduler):
    """The hooks of a built-in scheduler whose rule decides on each result (ASHA, the median rule), for a subclass
    of the user's own that overrides some of them and calls ``super()``, as a Ray script does.

    Such a subclass runs as a scheduler of the user's own (:mod:`fluidsalus.tune._custom_scheduler`) with the
    searcher the plain class maps onto as its rule (``BuiltInRule``): ``super().on_trial_result(...)`` answers
    the rule's decision on the result it is given (``STOP``, ``CONTINUE``, or ``PAUSE`` for the median rule
    without ``hard_stop``), and the other hooks tell the rule of the trial's life, as Ray's do. The subclass's
    answer is final: a ``CONTINUE`` where ``super()`` said ``STOP`` lets the trial go on, as in Ray. Outside a
    run (no rule), the hooks decide nothing (``CONTINUE``).

    HyperBand's rule (``HyperBandRule``) is the run's search itself: its trials run to the rungs' budgets and its
    halving stops trials, and ``super().on_trial_result(...)`` answers the decision it made on the result
    (``PAUSE`` at a rung's budget, ``STOP`` or ``CONTINUE``); there only the subclass's ``STOP`` changes it.
    """

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        rule = _rule(self)
        if rule is not None:
            rule.add(trial.trial_id)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        rule = _rule(self)
        return self.CONTINUE if rule is None else rule.judge(trial.trial_id, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any] | None) -> None:
        rule = _rule(self)
        if rule is not None:
            rule.complete(trial.trial_id, result)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        rule = _rule(self)
        if rule is not None:
            rule.complete(trial.trial_id, None, error=True)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        rule = _rule(self)
        if rule is not None:
            rule.complete(trial.trial_id, None, error=True)


class FIFOScheduler(TrialScheduler):
    """Runs every trial to the end (``ray.tune.schedulers.FIFOScheduler``): plain random/grid search."""

    def __init__(self) -> None:
        super().__init__()

    def debug_string(self) -> str:
        """Ray's line: ``Using FIFO scheduling algorithm.``"""
        return "Using FIFO scheduling algorithm."

    def describe(self) -> dict[str, Any]:
        return {}


class AsyncHyperBandScheduler(_RuleHooks):
    """Asynchronous successive halving (``ray.tune.schedulers.AsyncHyperBandScheduler`` / ``ASHAScheduler``).

    Maps onto :class:`fluidsalus.searchers.ASHA`, which makes Ray's decisions result for result; paired with
    an ``OptunaSearch`` it becomes Optuna's ``SuccessiveHalvingPruner`` (see docs/compatibility.md). In a
    subclass that overrides hooks, ``super().on_trial_result(...)`` answers ASHA's decision (:class:`_RuleHooks`).

    Args:
        time_attr: Result key budgets are measured in (monotonic).
        metric: Result key to optimise (or give it to ``TuneConfig``).
        mode: ``"min"`` or ``"max"``.
        max_t: Largest budget; trials stop there (``stop_last_trials``).
        grace_period: First milestone; no trial is stopped before it.
        reduction_factor: Rung spacing; about ``1/reduction_factor`` of the trials pass each rung.
        brackets: Number of brackets.
        stop_last_trials: Stop trials that reach ``max_t``.
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: int = 100,
        grace_period: int = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
    ) -> None:
        super().__init__(metric, mode)
        self.time_attr = time_attr
        self.max_t = max_t
        self.grace_period = grace_period
        self.reduction_factor = reduction_factor
        self.brackets = brackets
        self.stop_last_trials = stop_last_trials
        from fluidsalus.searchers import ASHA

        _probe(type(self).__name__, ASHA._owner, lambda: ASHA(
            _PROBE_SPACE, 1, _PROBE_METRIC, _PROBE_MODE, time_attr=time_attr, max_t=max_t,
            grace_period=grace_period, reduction_factor=reduction_factor, brackets=brackets,
            stop_last_trials=stop_last_trials, seed=0))

    def describe(self) -> dict[str, Any]:
        return {"time_attr": self.time_attr, **super().describe(), "max_t": self.max_t,
                "grace_period": self.grace_period, "reduction_factor": self.reduction_factor,
                "brackets": self.brackets, "stop_last_trials": self.stop_last_trials}


#: Ray's alias.
ASHAScheduler = AsyncHyperBandScheduler


class HyperBandScheduler(_RuleHooks):
    """Synchronous HyperBand (``ray.tune.schedulers.HyperBandScheduler``).

    Maps onto :class:`fluidsalus.searchers.HyperBand` (Ray's bracket sizes and promotions). In a subclass whose
    ``on_trial_result`` calls ``super()``, that call answers HyperBand's decision (:class:`_RuleHooks`).

    Args:
        time_attr: Result key budgets are measured in.
        metric: Result key to optimise.
        mode: ``"min"`` or ``"max"``.
        max_t: Largest budget (``>= 1``).
        reduction_factor: Ray's ``eta`` (``> 1``).
        stop_last_trials: Stop trials at the last rung's budget.
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: int = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
    ) -> None:
        super().__init__(metric, mode)
        self.time_attr = time_attr
        self.max_t = max_t
        self.reduction_factor = reduction_factor
        self.stop_last_trials = stop_last_trials
        from fluidsalus.searchers import HyperBand

        _probe(type(self).__name__, HyperBand._owner, lambda: HyperBand(
            _PROBE_SPACE, 1, _PROBE_METRIC, _PROBE_MODE, time_attr=time_attr, max_t=max_t,
            reduction_factor=reduction_factor, stop_last_trials=stop_last_trials, seed=0))

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any] | None) -> None:
        """As Ray's: the trial leaves its bracket through ``self.on_trial_remove``, so a subclass that overrides
        that hook is told of every trial that ends, not only of those stopped while they waited."""
        self.on_trial_remove(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        """As Ray's: through ``self.on_trial_remove`` (see :meth:`on_trial_complete`)."""
        self.on_trial_remove(tune_controller, trial)

    def describe(self) -> dict[str, Any]:
        return {"time_attr": self.time_attr, **super().describe(), "max_t": self.max_t,
                "reduction_factor": self.reduction_factor, "stop_last_trials": self.stop_last_trials}


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand for BOHB (``ray.tune.schedulers.HyperBandForBOHB``): brackets from the largest down.

    With :class:`fluidsalus.tune.search.bohb.TuneBOHB` it maps onto :class:`fluidsalus.searchers.SyncBOHB`.
    Without it (random configurations), onto :class:`fluidsalus.searchers.HyperBand`, whose brackets are
    filled from the smallest up (a warning says so).
    """


class MedianStoppingRule(_RuleHooks):
    """Median stopping (``ray.tune.schedulers.MedianStoppingRule``).

    Maps onto :class:`fluidsalus.searchers.MedianStopping` around the search algorithm's trials, with Ray's
    decisions: from ``grace_period`` on, a trial whose best value is strictly worse than the median of the other
    trials' running means at its time is stopped. ``min_time_slice`` is not used (fluidsalus never pauses a trial
    to let others run), and with ``hard_stop=False`` the trial goes on at once instead of pausing. See
    docs/compatibility.md. In a subclass that overrides hooks, ``super().on_trial_result(...)`` answers the
    rule's decision (:class:`_RuleHooks`).

    Args:
        time_attr: The result key time is measured in (monotonic).
        metric: Result key to optimise.
        mode: ``"min"`` or ``"max"``.
        grace_period: No trial is stopped, and no value counts in a running mean, before this time.
        min_samples_required: Running means of other trials needed to decide.
        min_time_slice: Ray's pausing granularity; not used.
        hard_stop: False: a trial the rule would stop goes on (Ray pauses it until no trial waits).
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: int = 0,
        hard_stop: bool = True,
    ) -> None:
        super().__init__(metric, mode)
        owner = type(self).__name__
        if not isinstance(time_attr, str) or not time_attr:
            raise ConfigError(f"{owner}: time_attr must be a result key (got {time_attr!r})")
        if isinstance(grace_period, bool) or not isinstance(grace_period, (int, float)) or grace_period < 0:
            raise ConfigError(f"{owner}: grace_period must be a number >= 0 (got {grace_period!r})")
        if isinstance(min_samples_required, bool) or not isinstance(min_samples_required, int) \
                or min_samples_required < 1:
            raise ConfigError(f"{owner}: min_samples_required must be an int >= 1 (got {min_samples_required!r})")
        if isinstance(min_time_slice, bool) or not isinstance(min_time_slice, (int, float)) or min_time_slice < 0:
            raise ConfigError(f"{owner}: min_time_slice must be a number >= 0 (got {min_time_slice!r})")
        if not isinstance(hard_stop, bool):
            raise ConfigError(f"{owner}: hard_stop must be True or False (got {hard_stop!r})")
        self.time_attr = time_attr
        self.grace_period = grace_period
        self.min_samples_required = min_samples_required
        self.min_time_slice = min_time_slice
        self.hard_stop = hard_stop

    def describe(self) -> dict[str, Any]:
        return {"time_attr": self.time_attr, **super().describe(), "grace_period": self.grace_period,
                "min_samples_required": self.min_samples_required, "min_time_slice": self.min_time_slice,
                "hard_stop": self.hard_stop}


class PopulationBasedTraining(TrialScheduler):
    """Population based training (``ray.tune.schedulers.PopulationBasedTraining``).

    Maps onto :class:`fluidsalus.searchers.PBT` (Ray's quantiles, explore and exploit rules). Exploits restart
    a trial from another trial's checkpoint, so the trainable must report checkpoints at its perturbation
    points, as in Ray.

    Args:
        time_attr: Result key perturbation intervals are measured in.
        metric: Result key to optimise.
        mode: ``"min"`` or ``"max"``.
        perturbation_interval: Interval between perturbations, in ``time_attr``.
        burn_in_period: No perturbation before this, in ``time_attr``.
        hyperparam_mutations: Per key: a list of values, a domain or a callable to resample from.
        quantile_fraction: Share of the population in the top and bottom quantiles (``[0, 0.5]``).
        resample_probability: Chance of resampling a value instead of perturbing it.
        perturbation_factors: Factors a numeric value is multiplied by when perturbed.
        custom_explore_fn: Called on each explored config.
        log_config: Keep a log of every exploit.
        require_attrs: Require ``time_attr`` and ``metric`` in every result.
        synch: Synchronous PBT: perturb the whole population at once.
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: Mapping[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: Sequence[float] = (1.2, 0.8),
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
    ) -> None:
        super().__init__(metric, mode)
        owner = type(self).__name__
        self.time_attr = time_attr
        self.perturbation_interval = perturbation_interval
        self.burn_in_period = burn_in_period
        self.hyperparam_mutations = (
            None if hyperparam_mutations is None else translate_ray_values(hyperparam_mutations, owner)
        )
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self.perturbation_factors = perturbation_factors
        self.custom_explore_fn = custom_explore_fn
        self.log_config = log_config
        self.require_attrs = require_attrs
        self.synch = synch
        from fluidsalus.searchers import PBT

        _probe(owner, "PBT", lambda: PBT({}, 1, _PROBE_METRIC, _PROBE_MODE, **self.engine_kwargs()))

    @property
    def mutated_keys(self) -> tuple[str, ...]:
        """The top-level keys an exploit changes (Ray shows them in a perturbed trial's ``experiment_tag``)."""
        return tuple(self.hyperparam_mutations or ())

    def engine_kwargs(self) -> dict[str, Any]:
        """The arguments of :class:`fluidsalus.searchers.PBT` besides space, num_samples, metric and mode."""
        return {
            "time_attr": self.time_attr, "perturbation_interval": self.perturbation_interval,
            "burn_in_period": self.burn_in_period, "hyperparam_mutations": self.hyperparam_mutations,
            "quantile_fraction": self.quantile_fraction, "resample_probability": self.resample_probability,
            "perturbation_factors": self.perturbation_factors, "custom_explore_fn": self.custom_explore_fn,
            "log_config": self.log_config, "require_attrs": self.require_attrs, "synch": self.synch,
        }

    def describe(self) -> dict[str, Any]:
        kwargs = self.engine_kwargs()
        return {"time_attr": kwargs.pop("time_attr"), **super().describe(), **kwargs}


class PB2(PopulationBasedTraining):
    """Population Based Bandits (``ray.tune.schedulers.pb2.PB2``): PBT whose explore step is a GP bandit.

    Maps onto :class:`fluidsalus.searchers.PB2` (NumPy only: scikit-learn is not needed). As with
    :class:`PopulationBasedTraining`, exploits restart a trial from another trial's checkpoint.

    Args:
        time_attr: Result key perturbation intervals are measured in.
        metric: Result key to optimise.
        mode: ``"min"`` or ``"max"``.
        perturbation_interval: Interval between perturbations, in ``time_attr``.
        hyperparam_bounds: Per key ``[low, high]`` (or a nested dict of those): the hyperparameters PB2 selects.
        quantile_fraction: Share of the population in the top and bottom quantiles (``[0, 0.5]``).
        log_config: Keep a log of every exploit.
        require_attrs: Require ``time_attr`` and ``metric`` in every result.
        synch: Synchronous mode: perturb the whole population at once.
        custom_explore_fn: Called on each configuration PB2 selects.
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: Mapping[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        TrialScheduler.__init__(self, metric, mode)
        self.time_attr = time_attr
        self.perturbation_interval = perturbation_interval
        self.hyperparam_bounds = hyperparam_bounds
        self.quantile_fraction = quantile_fraction
        self.log_config = log_config
        self.require_attrs = require_attrs
        self.synch = synch
        self.custom_explore_fn = custom_explore_fn
        from fluidsalus.searchers import PB2 as EnginePB2

        _probe("PB2", "PB2", lambda: EnginePB2({}, 1, _PROBE_METRIC, _PROBE_MODE, **self.engine_kwargs()))

    @property
    def mutated_keys(self) -> tuple[str, ...]:
        """The top-level keys PB2 selects (Ray passes ``hyperparam_bounds`` as PBT's mutations)."""
        return tuple(self.hyperparam_bounds or ())

    def engine_kwargs(self) -> dict[str, Any]:
        """The arguments of :class:`fluidsalus.searchers.PB2` besides space, num_samples, metric and mode."""
        return {
            "time_attr": self.time_attr, "perturbation_interval": self.perturbation_interval,
            "hyperparam_bounds": self.hyperparam_bounds, "quantile_fraction": self.quantile_fraction,
            "log_config": self.log_config, "require_attrs": self.require_attrs, "synch": self.synch,
            "custom_explore_fn": self.custom_explore_fn,
        }


class PopulationBasedTrainingReplay(TrialScheduler):
    """Replays one trial's schedule from a PBT run (``ray.tune.schedulers.PopulationBasedTrainingReplay``).

    Maps onto :class:`fluidsalus.searchers.PBTReplay`: a single trial starts with the configuration the
    trial's policy file began from and changes it at the iterations the file records, each time restarting from
    its own latest checkpoint. A fluidsalus PBT (or PB2) run with ``log_config=True`` writes the policy files,
    ``pbt_policy_<trial_id>.txt``, in its experiment folder, as Ray does; Ray's own files are read too.

    Args:
        policy_file: The policy file of the trial to replay.

    Raises:
        ConfigError: The file is missing or is not a PBT policy file (a ValueError, as Ray raises).
    """

    def __init__(self, policy_file: str) -> None:
        from fluidsalus.searchers._pbt_replay import read_policy

        super().__init__()
        self.policy_file = os.path.expanduser(str(policy_file))
        #: The configuration the replay starts from (None for an empty policy file) and the change points.
        self.config, self.schedule = read_policy(self.policy_file)

    def describe(self) -> dict[str, Any]:
        return {"policy_file": self.policy_file}


class DistributeResources:
    """Ray's default resource allocation function (``ray.tune.schedulers.resource_changing_scheduler``), held.

    In Ray it spreads the cluster's free CPUs and GPUs over the running trials, restarting each trial from its
    checkpoint with the larger request. fluidsalus's water-filling planner already gives trials the devices that
    other trials leave free, by measurement (docs/compatibility.md, "ResourceChangingScheduler"), so this object
    only keeps its arguments and is never called during a run.

    Args:
        add_bundles: Ray: put free resources in new bundles (True) or grow the trial's bundle (False).
        increase_by: Ray: the unit a trial grows by (resource name -> amount).
        increase_by_times: Ray: the most units a trial grows by (< 1: no limit).
        reserve_resources: Ray: resources kept back from resized trials (resource name -> amount).

    Raises:
        ConfigError: An argument of the wrong type or a negative amount.
    """

    def __init__(
        self,
        add_bundles: bool = False,
        increase_by: Mapping[str, float] | None = None,
        increase_by_times: int = -1,
        reserve_resources: Mapping[str, float] | None = None,
    ) -> None:
        owner = type(self).__name__
        if not isinstance(add_bundles, bool):
            raise ConfigError(f"{owner}: add_bundles must be True or False (got {add_bundles!r})")
        if isinstance(increase_by_times, bool) or not isinstance(increase_by_times, int):
            raise ConfigError(f"{owner}: increase_by_times must be an int (got {increase_by_times!r})")
        self.add_bundles = add_bundles
        self.increase_by = _amounts(owner, "increase_by", increase_by)
        self.increase_by_times = increase_by_times
        self.reserve_resources = _amounts(owner, "reserve_resources", reserve_resources)

    def describe(self) -> dict[str, Any]:
        """The constructor arguments (for messages and docs)."""
        return {"add_bundles": self.add_bundles, "increase_by": self.increase_by,
                "increase_by_times": self.increase_by_times, "reserve_resources": self.reserve_resources}

    def __call__(self, tune_controller: Any, trial: Any, result: Mapping[str, Any], scheduler: Any) -> None:
        """Ray's call; fluidsalus never makes it (its planner decides each trial's devices)."""
        raise ConfigError(f"{type(self).__name__}: fluidsalus does not call resource allocation functions; its "
                          "planner gives trials the devices other trials leave free")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"{type(self).__name__}({args})"


class DistributeResourcesToTopJob(DistributeResources):
    """Ray's allocation function that gives the free resources to the best trial first, held like
    :class:`DistributeResources` (never called by fluidsalus).

    Args:
        add_bundles: As :class:`DistributeResources`.
        increase_by: As :class:`DistributeResources`.
        increase_by_times: As :class:`DistributeResources`.
        reserve_resources: As :class:`DistributeResources`.
        metric: Ray: the result key that ranks the trials (default: the scheduler's).
        mode: Ray: ``"min"`` or ``"max"`` (default: the scheduler's).
    """

    def __init__(
        self,
        add_bundles: bool = False,
        increase_by: Mapping[str, float] | None = None,
        increase_by_times: int = -1,
        reserve_resources: Mapping[str, float] | None = None,
        metric: str | None = None,
        mode: str | None = None,
    ) -> None:
        super().__init__(add_bundles, increase_by, increase_by_times, reserve_resources)
        self.metric = check_metric(type(self).__name__, metric)
        self.mode = check_mode(type(self).__name__, mode)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "metric": self.metric, "mode": self.mode}


def _amounts(owner: str, field: str, value: Mapping[str, float] | None) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for k, v in value.items()):
        raise ConfigError(f"{owner}: {field} must be a dict of resource name -> amount >= 0 (got {value!r})")
    return {k: float(v) for k, v in value.items()}


class ResourceChangingScheduler(TrialScheduler):
    """Changes live trials' resources around another scheduler (``ray.tune.schedulers.ResourceChangingScheduler``).

    In Ray it wraps ``base_scheduler`` and, after each result, asks ``resources_allocation_function`` for the
    trial's new request, restarting the trial from its checkpoint to apply it. fluidsalus's water-filling planner
    does that job for every run: trials share devices while many run, and as trials end the others get the freed
    devices to themselves (a data-parallel trial more devices, where its measured scaling helps), moving only at a
    checkpoint. So ``Tuner.fit()`` runs ``base_scheduler``'s decisions under the planner, warns once that
    ``resources_allocation_function`` is not called, and ``get_context().get_trial_resources()`` keeps showing
    each trial's request.

    Args:
        base_scheduler: The scheduler that decides (None: ``FIFOScheduler``). Ray's own is translated.
        resources_allocation_function: Ray's callable (default :class:`DistributeResources`), or None; kept,
            not called.

    Raises:
        ConfigError: ``base_scheduler`` is not a scheduler (or is another ResourceChangingScheduler), or
            ``resources_allocation_function`` is not callable.
    """

    def __init__(
        self,
        base_scheduler: TrialScheduler | None = None,
        resources_allocation_function: Callable[..., Any] | None = DistributeResources(),  # noqa: B008 (Ray's)
    ) -> None:
        from fluidsalus.tune._ray_objects import adopt_scheduler

        super().__init__()
        owner = type(self).__name__
        base = adopt_scheduler(base_scheduler, field=f"{owner}.base_scheduler") or FIFOScheduler()
        if isinstance(base, ResourceChangingScheduler):
            raise ConfigError(f"{owner}: base_scheduler must not be another ResourceChangingScheduler")
        if resources_allocation_function is not None and not callable(resources_allocation_function):
            raise ConfigError(f"{owner}: resources_allocation_function must be None or a callable "
                              f"(got {type(resources_allocation_function).__name__})")
        self.base_scheduler = base
        self.resources_allocation_function = resources_allocation_function

    @property
    def metric(self) -> str | None:
        """The base scheduler's metric (as Ray's)."""
        return self.base_scheduler.metric

    @property
    def mode(self) -> str | None:
        """The base scheduler's mode."""
        return self.base_scheduler.mode

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """Ray's hook, passed to the base scheduler."""
        return self.base_scheduler.set_search_properties(metric, mode, **spec)

    def describe(self) -> dict[str, Any]:
        return {"base_scheduler": self.base_scheduler,
                "resources_allocation_function": self.resources_allocation_function}
