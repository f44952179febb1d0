"""One fluidsalus searcher from Ray Tune's (search algorithm, scheduler, param_space, metric/mode).

Ray splits the work in two: a search algorithm proposes configurations and a scheduler stops, pauses or
perturbs trials. fluidsalus's searchers do both and propose TrialGroups, so :func:`plan` combines the pair:

=============================================  ======================================================
search_alg (+ ConcurrencyLimiter)              scheduler                  -> fluidsalus searcher
=============================================  ======================================================
None / BasicVariantGenerator                   None / FIFOScheduler       -> RandomSearch
None / BasicVariantGenerator                   AsyncHyperBandScheduler    -> ASHA
None / BasicVariantGenerator                   HyperBandScheduler         -> HyperBand
None / BasicVariantGenerator                   HyperBandForBOHB           -> HyperBand (warning: bracket order)
TuneBOHB                                       HyperBandForBOHB           -> SyncBOHB
TuneBOHB                                       AsyncHyperBandScheduler    -> BOHB
None / BasicVariantGenerator                   PopulationBasedTraining    -> PBT
None / BasicVariantGenerator                   PB2                        -> PB2
OptunaSearch                                   None / FIFOScheduler       -> OptunaSearch
OptunaSearch                                   AsyncHyperBandScheduler    -> OptunaSearch + SuccessiveHalvingPruner
OptunaSearch                                   HyperBandScheduler         -> OptunaHyperBand (HyperBand over its trials)
any of the FIFO rows                           MedianStoppingRule         -> MedianStopping around that searcher
a fluidsalus BaseSearcher                      None / FIFOScheduler       -> that searcher, as it is
a Searcher subclass of the user's own          None / FIFOScheduler       -> CustomSearch (its suggest())
a Searcher subclass of the user's own          AsyncHyperBandScheduler    -> CustomASHA (ASHA over its trials)
a Searcher subclass of the user's own          HyperBandScheduler         -> CustomHyperBand (its trials in brackets)
any of the FIFO rows                           a scheduler of user's own  -> ScheduledSearch around that searcher
=============================================  ======================================================

``PopulationBasedTrainingReplay`` (with no search algorithm, ``num_samples=1``) becomes one ``PBTReplay`` trial.
A ``ResourceChangingScheduler`` is replaced by its ``base_scheduler`` (with a warning: the planner changes the
trials' resources, and its ``resources_allocation_function`` is not called).
``points_to_evaluate`` (of ``BasicVariantGenerator``, ``TuneBOHB`` or ``OptunaSearch``) work with every pair
(under PopulationBasedTraining they are the first members of the population), and ``num_samples=-1`` with every
pair but those with PopulationBasedTraining (whose population is drawn once and kept fixed); ASHA and HyperBand
then draw from a :class:`~fluidsalus.searchers._random.VariantStream` (:mod:`fluidsalus.tune._streamed`).

Every other pair raises a :class:`~fluidsalus.errors.ConfigError` naming both and the pairs that work. Ray
Tune's own scheduler and search-algorithm objects (an import that was not changed) are first translated into
the fluidsalus.tune holders with a ``UserWarning`` (:mod:`fluidsalus.tune._ray_objects`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import math
import os
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import (
    ASHA,
    BOHB,
    PB2,
    PBT,
    BaseSearcher,
    HyperBand,
    MedianStopping,
    OptunaSearch,
    PBTReplay,
    RandomSearch,
    RepeatSearcher,
    SyncBOHB,
)
from fluidsalus.searchers._random import VariantStream
from fluidsalus.session import callers_stacklevel
from fluidsalus.tune._config import INFINITE_SAMPLES, TuneConfig
from fluidsalus.tune._custom_scheduler import (
    HOOKS,
    BuiltInRule,
    HyperBandRule,
    ScheduledSearch,
    is_custom_scheduler,
)
from fluidsalus.tune._custom_search import (
    CustomASHA,
    CustomHyperBand,
    CustomSearch,
    defined_by_user,
    is_custom_searcher,
)
from fluidsalus.tune._domains import translate_ray_values
from fluidsalus.tune._optuna_hyperband import OptunaHyperBand
from fluidsalus.tune._ray_objects import SUPPORTED_SEARCHERS, adopt_scheduler, adopt_search_alg
from fluidsalus.tune._sample_from import SampleFromResolver
from fluidsalus.tune._streamed import StreamedASHA, StreamedHyperBand
from fluidsalus.tune._tags import SEARCHER, VARIANTS
from fluidsalus.tune.schedulers import PB2 as PB2Holder
from fluidsalus.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    PopulationBasedTrainingReplay,
    ResourceChangingScheduler,
    TrialScheduler,
)
from fluidsalus.tune.search import (
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Repeater,
    SearchAlgorithm,
    Searcher,
    SearchGenerator,
)
from fluidsalus.tune.search._holders import base_answers
from fluidsalus.tune.search._own_suggest import OwnSuggestSearcher
from fluidsalus.tune.search.bohb import TuneBOHB
from fluidsalus.tune.search.optuna import OptunaSearch as OptunaHolder

__all__ = ["MaxBudgetStop", "Plan", "plan"]

logger = logging.getLogger(__name__)

#: The result key Optuna's pruners count steps in (``trial.report(value, training_iteration)``).
OPTUNA_STEP_KEY = "training_iteration"
#: Ray's default study name of an OptunaSearch (used with a storage when no name is given).
DEFAULT_STUDY_NAME = "optuna"

_WORKING_PAIRS = (
    "FIFO/None or BasicVariantGenerator with FIFOScheduler, AsyncHyperBandScheduler, HyperBandScheduler, "
    "HyperBandForBOHB, MedianStoppingRule, PopulationBasedTraining, PB2 or PopulationBasedTrainingReplay; "
    "TuneBOHB with HyperBandForBOHB or AsyncHyperBandScheduler; OptunaSearch with FIFOScheduler, "
    "AsyncHyperBandScheduler, HyperBandScheduler or MedianStoppingRule; "
    "Repeater(OptunaSearch) with FIFOScheduler"
)


@dataclass(frozen=True)
class MaxBudgetStop:
    """Stops a trial once ``result[time_attr] >= max_t`` (ASHA's ``max_t`` when Optuna's pruner replaces it)."""

    time_attr: str
    max_t: float

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        value = result.get(self.time_attr)
        return value is not None and value >= self.max_t


@dataclass
class Plan:
    """What ``Tuner.fit()`` passes to ``fluidsalus.run``.

    Attributes:
        searcher: The one fluidsalus searcher.
        space: The search space it searches (for the run's record).
        metric: The metric (from TuneConfig, the scheduler or the search algorithm), or None.
        mode: The mode, or None.
        max_concurrent_trials: Cap on running trials (TuneConfig, ConcurrencyLimiter, ``max_concurrent``).
        extra_stops: Per-trial stop rules to add to the user's ``stop``.
        checkpoint_at_budgets: A class Trainable must checkpoint at each pause at its budget (PBT's points).
        summary: A one-line description, e.g. ``"ASHAScheduler -> ASHA(max_t=100, ...)"``.
        tags: How Ray would tag the trials (``experiment_tag``, :mod:`fluidsalus.tune._tags`): ``"variants"``
            for ``BasicVariantGenerator`` trials, ``"searcher"`` for a search algorithm's.
        perturbed: The keys PBT mutates (PB2 bounds), shown in a perturbed trial's tag (None: no PBT or PB2).
        replay_tag: ``PopulationBasedTrainingReplay``'s tag (``replay_<policy file name>``), which a replayed
            trial's tag starts with once its config has changed, as in Ray; None otherwise.
        points: ``BasicVariantGenerator``'s ``points_to_evaluate`` (their trials' tags leave their values out).
    """

    searcher: BaseSearcher
    space: dict[str, Any]
    metric: str | None
    mode: str | None
    max_concurrent_trials: int | None = None
    extra_stops: list[Callable[[str, Mapping[str, Any]], bool]] = field(default_factory=list)
    checkpoint_at_budgets: bool = False
    summary: str = ""
    tags: str = SEARCHER
    perturbed: tuple[str, ...] | None = None
    replay_tag: str | None = None
    points: list[dict[str, Any]] | None = None


def _pick(what: str, values: list[tuple[str, Any]]) -> Any:
    """The one value given among ``(source, value)`` pairs; different values are a ConfigError.

    A value is a str, or a list of them (a multi-objective OptunaSearch's metrics and modes).
    """
    given = [(source, value) for source, value in values if value is not None]
    distinct = {repr(value) for _, value in given}
    if len(distinct) > 1:
        shown = ", ".join(f"{source}={value!r}" for source, value in given)
        raise ConfigError(
            f"{what}: given differently to {shown}; give it once (to TuneConfig, or to the scheduler / search "
            "algorithm)"
        )
    return given[0][1] if given else None


def _unwrap(search_alg: Any) -> tuple[Any, list[int]]:
    limits: list[int] = []
    while isinstance(search_alg, (ConcurrencyLimiter, SearchGenerator)):
        if isinstance(search_alg, ConcurrencyLimiter):
            limits.append(search_alg.max_concurrent)
        search_alg = adopt_search_alg(search_alg.searcher)
    return search_alg, limits


def _check_runnable(search_alg: Any) -> None:
    """Refuse a search algorithm written on Ray's low-level ``SearchAlgorithm`` API (``add_configurations``,
    ``next_trial``), which builds Ray's ``Trial`` objects itself: fluidsalus runs ``Searcher`` subclasses only.

    Raises:
        ConfigError: ``search_alg`` subclasses ``SearchAlgorithm`` but is no ``Searcher``,
            ``BasicVariantGenerator`` nor ``Repeater`` (Ray runs it; fluidsalus's AttributeError said nothing of
            why).
    """
    if isinstance(search_alg, SearchAlgorithm) and not isinstance(search_alg, (Searcher, BasicVariantGenerator,
                                                                               Repeater)):
        raise ConfigError(
            f"TuneConfig: search_alg {type(search_alg).__name__} subclasses SearchAlgorithm, Ray's low-level API "
            "(add_configurations/next_trial, which make Ray's Trial objects), which fluidsalus does not run; "
            "subclass tune.search.Searcher instead (suggest(trial_id) -> config, on_trial_complete), or use one "
            f"of {', '.join(SUPPORTED_SEARCHERS)}"
        )


#: Ray's warning (``ray.tune.tune.run``) where it ignores ``max_concurrent_trials``: the search algorithm given is
#: no ``Searcher`` (a ``BasicVariantGenerator`` or ``SearchGenerator`` object) for it to wrap in a
#: ``ConcurrencyLimiter``.
CAP_IGNORED = ("You have passed a `SearchGenerator` instance as the `search_alg`, but `max_concurrent_trials` requires "
               "a `Searcher` instance`. `max_concurrent_trials` will be ignored.")


def _concurrency(tune_config: TuneConfig, limits: list[int], search_alg: Any, given: Any) -> int | None:
    """The cap on trials running at once: the least of ``max_concurrent_trials`` and the limits of the search
    algorithm (its limiters' and its own ``max_concurrent``). As Ray's, ``max_concurrent_trials`` is ignored, with
    Ray's warning (:data:`CAP_IGNORED`), where the search algorithm ``given`` is a ``BasicVariantGenerator`` or
    ``SearchGenerator`` object; its own ``max_concurrent`` still caps.

    Raises:
        ConfigError: ``max_concurrent_trials`` differs from a limit of the search algorithm (Ray's ValueError).
    """
    own = getattr(search_alg, "max_concurrent", 0) or 0
    if isinstance(search_alg, (BasicVariantGenerator, TuneBOHB)) and own:
        limits = [*limits, own]
    cap = tune_config.concurrency_cap
    if cap is not None and isinstance(given, (BasicVariantGenerator, SearchGenerator)):
        logger.warning(CAP_IGNORED)
        cap = None
    if cap is not None and limits and cap != min(limits):
        raise ConfigError(
            f"TuneConfig: max_concurrent_trials={cap} but the search algorithm already limits concurrency to "
            f"{min(limits)} (ConcurrencyLimiter / max_concurrent); set only one of them, as Ray requires"
        )
    values = [*limits, *([cap] if cap is not None else [])]
    return min(values) if values else None


def _merge_space(param_space: dict[str, Any], own: dict[str, Any] | None, owner: str) -> dict[str, Any]:
    """The searched space: ``param_space``, or the search algorithm's own space plus ``param_space``'s constants."""
    if own is None:
        return param_space
    if param_space:
        domains, constants = sp.split_constants(param_space)
        if domains:
            raise ConfigError(
                f"TuneConfig: the search algorithm {owner} was given its own search space, and param_space holds "
                f"parameters to search too ({', '.join(sorted(domains))}); as in Ray, put them all in one place"
            )
        flat_own = sp.flatten_space(own)
        return sp.unflatten({**constants, **flat_own})
    return own


def _need_metric(owner: str, metric: str | None, mode: str | None) -> tuple[str, str]:
    if metric is None or mode is None:
        missing = " and ".join(name for name, value in (("metric", metric), ("mode", mode)) if value is None)
        raise ConfigError(
            f"TuneConfig: {owner} needs a metric and a mode; {missing} not given. Pass them to "
            "TuneConfig(metric=..., mode=...) or to the scheduler / search algorithm"
        )
    return metric, mode


def _finite_samples(num_samples: int, target: str) -> None:
    if num_samples == INFINITE_SAMPLES:
        raise ConfigError(
            f"TuneConfig: num_samples=-1 (sample until stopped) is not supported with {target}: its population "
            "is drawn once and kept fixed; give the population size as num_samples >= 1"
        )


def _describe(searcher: BaseSearcher, names: tuple[str, ...]) -> str:
    args = ", ".join(f"{name}={getattr(searcher, name)!r}" for name in names if hasattr(searcher, name))
    return f"{type(searcher).__name__}({args})"


def _optuna_study(holder: OptunaHolder, mode: str | list[str], pruner: Any, sampler: Any) -> Any:
    """The study of an OptunaSearch that names a storage (None: let fluidsalus's OptunaSearch create one).

    ``mode`` is a list for a multi-objective search: one direction per metric.
    """
    if holder.storage is None:
        return None
    import optuna

    if sampler is None:
        sampler = optuna.samplers.TPESampler(seed=holder.seed)
    return optuna.create_study(
        storage=holder.storage, study_name=holder.study_name or DEFAULT_STUDY_NAME, sampler=sampler,
        pruner=pruner, load_if_exists=True,
        directions=["maximize" if m == "max" else "minimize" for m in ([mode] if isinstance(mode, str) else mode)],
    )


def _optuna(holder: OptunaHolder, space: dict[str, Any], num_samples: int, metric: str | list[str],
            mode: str | list[str], pruner: Any, batch_size: int | None) -> OptunaSearch:
    study = _optuna_study(holder, mode, pruner, holder.sampler)
    return OptunaSearch(
        space, num_samples, metric, mode,
        sampler=None if study is not None else holder.sampler,
        seed=None if (study is not None or holder.sampler is not None) else holder.seed,
        study=study,
        pruner=pruner,
        points_to_evaluate=holder.points_to_evaluate or None,
        evaluated_rewards=holder.evaluated_rewards,
        batch_size=batch_size,
        define_by_run=holder.define_by_run,
        evaluated_points=holder.evaluated_points or None,
        parameter_constraints=holder.parameter_constraints,
        outcome_constraints=holder.outcome_constraints,
        owner=type(holder).__name__,
        hyperopt_domains=holder.samples_hyperopt_domains,
    )


def _sha_pruner(scheduler: AsyncHyperBandScheduler) -> Any:
    import optuna

    owner = "OptunaSearch with AsyncHyperBandScheduler"
    if scheduler.time_attr != OPTUNA_STEP_KEY:
        raise ConfigError(
            f"{owner}: time_attr must be {OPTUNA_STEP_KEY!r} (Optuna's pruner counts steps in it), got "
            f"{scheduler.time_attr!r}"
        )
    if scheduler.brackets != 1:
        raise ConfigError(f"{owner}: brackets must be 1 (Optuna's SuccessiveHalvingPruner is one bracket), got "
                          f"{scheduler.brackets}")
    grace = scheduler.grace_period
    if float(grace) != int(grace) or grace < 1:
        raise ConfigError(f"{owner}: grace_period must be a whole number of iterations >= 1, got {grace!r}")
    return optuna.pruners.SuccessiveHalvingPruner(
        min_resource=int(grace), reduction_factor=int(scheduler.reduction_factor)
        if float(scheduler.reduction_factor).is_integer() else scheduler.reduction_factor,
        min_early_stopping_rate=0,
    )


def _resource_changing_base(scheduler: ResourceChangingScheduler) -> TrialScheduler:
    """The scheduler that decides under a ResourceChangingScheduler, with one warning that the planner, not
    ``resources_allocation_function``, changes the trials' resources."""
    base = scheduler.base_scheduler
    warnings.warn(
        f"fluidsalus.tune: ResourceChangingScheduler runs {type(base).__name__}'s decisions; fluidsalus's planner "
        "changes the trials' resources itself (trials share devices while many run and get the freed devices as "
        "others end, moving only at a checkpoint), so resources_allocation_function "
        f"({scheduler.resources_allocation_function!r}) is not called and get_trial_resources() keeps each "
        "trial's request",
        UserWarning,
        stacklevel=callers_stacklevel(),
    )
    return base


def _set_search_properties(search_alg: Any, metric: str | None, mode: str | None, space: dict[str, Any],
                           spec: dict[str, Any]) -> bool:
    """``search_alg.set_search_properties(metric, mode, space, **spec)``; for a method that takes no ``**spec``
    (written for an older Ray), again without it, as Ray's ``_set_search_properties_backwards_compatible`` does."""
    try:
        return bool(search_alg.set_search_properties(metric, mode, space, **spec))
    except TypeError as e:
        if "set_search_properties() got an unexpected keyword argument" not in str(e):
            raise
        logger.warning("Please update %s.set_search_properties to take Ray's signature set_search_properties(metric, "
                       "mode, config, **spec) -> bool", type(search_alg).__name__)
        return bool(search_alg.set_search_properties(metric, mode, space))


def _plan_custom(search_alg: Any, scheduler: TrialScheduler, space: dict[str, Any], tune_config: TuneConfig,
                 metric: str | None, mode: str | None, cap: int | None, pair: str,
                 n: int | None = None, stop: Any = None) -> Plan:
    """A search algorithm of the user's own (:mod:`fluidsalus.tune._custom_search`), told what Ray tells it, with
    no scheduler, ASHA or HyperBand, making ``n`` trials (None: ``num_samples``).

    As in Ray, ``set_search_properties(metric, mode, config, **spec)`` is called only when ``param_space`` is not
    empty, with Ray's public spec: ``stop`` (the dict of thresholds, ``{}`` for a Stopper or none),
    ``num_samples`` and ``time_budget_s``; a method without ``**spec`` is called without it (Ray's fallback)."""
    name = type(search_alg).__name__
    if _kind(scheduler) not in (FIFOScheduler, AsyncHyperBandScheduler, HyperBandScheduler):
        raise ConfigError(
            f"TuneConfig: {pair}: fluidsalus runs a search algorithm of your own (a Searcher subclass) with no "
            "scheduler (FIFOScheduler), with AsyncHyperBandScheduler/ASHAScheduler or with HyperBandScheduler "
            "only, or under MedianStoppingRule (HyperBandForBOHB is for TuneBOHB, and PopulationBasedTraining and "
            "PB2 draw their configurations themselves)"
        )
    spec = {"stop": dict(stop) if isinstance(stop, Mapping) else {},
            "num_samples": sys.maxsize if tune_config.num_samples == INFINITE_SAMPLES else tune_config.num_samples,
            "time_budget_s": tune_config.time_budget}  # (-1 is passed as sys.maxsize, as Ray passes it)
    answers = base_answers()
    accepted = _set_search_properties(search_alg, tune_config.metric, tune_config.mode, space, spec) if space else True
    if not accepted and sp.split_constants(space)[0]:
        if type(search_alg).set_search_properties is Searcher.set_search_properties:
            why = ("(it keeps Searcher's set_search_properties, which takes nothing and returns False, as Ray's); "
                   "override set_search_properties(metric, mode, config, **spec) to search config and return True, "
                   "as in Ray")
        elif base_answers() > answers:
            # (its override returned super().set_search_properties(...): the base's False, which Ray's ValueError
            # reads as a space of its own; fluidsalus said so too)
            why = ("(its override returned super().set_search_properties(...): the base Searcher's answer, which "
                   "takes nothing and returns False, as Ray's, whose run raises ValueError for it too); return True "
                   "from the override where it searches config, as in Ray")
        else:
            why = "(its own search space is set already); as in Ray, put every parameter in one place"
        raise ConfigError(f"TuneConfig: param_space has parameters to search, but {name}.set_search_properties "
                          f"refused it {why}")
    if cap is not None:
        # Ray's ConcurrencyLimiter tells the searcher its limit, also the one Ray puts around it for
        # max_concurrent_trials (it was told only inside a limiter of the script's: a helper's side-by-side run)
        search_alg.set_max_concurrency(cap)
    n = tune_config.num_samples if n is None else n
    if isinstance(scheduler, AsyncHyperBandScheduler):
        metric, mode = _need_metric(type(scheduler).__name__, metric, mode)
        searcher: BaseSearcher = CustomASHA(
            search_alg, space, n, metric, mode, max_concurrent=cap, time_attr=scheduler.time_attr,
            max_t=scheduler.max_t, grace_period=scheduler.grace_period, reduction_factor=scheduler.reduction_factor,
            brackets=scheduler.brackets, stop_last_trials=scheduler.stop_last_trials)
        target = "CustomASHA"
    elif isinstance(scheduler, HyperBandScheduler):
        metric, mode = _need_metric(type(scheduler).__name__, metric, mode)
        searcher = CustomHyperBand(
            search_alg, space, n, metric, mode, max_concurrent=cap, time_attr=scheduler.time_attr,
            max_t=scheduler.max_t, reduction_factor=scheduler.reduction_factor,
            stop_last_trials=scheduler.stop_last_trials)
        target = "CustomHyperBand"
    else:
        searcher = CustomSearch(search_alg, space, n, max_concurrent=cap)
        target = "CustomSearch"
        metric = metric if isinstance(metric, str) else None
        mode = mode if isinstance(mode, str) else None
    kind = "your own Searcher" if defined_by_user(search_alg, "suggest") else "its own suggest"
    return Plan(searcher, space, metric, mode, cap, tags=SEARCHER,
                summary=f"{name} ({kind}) + {type(scheduler).__name__} -> {target}(num_samples={n}, "
                        f"max_concurrent={searcher.max_concurrent})")


def _plan_judged(who: str, tune_config: TuneConfig, param_space: Mapping[str, Any] | None, class_trainable: bool,
                 metric: Any, mode: Any) -> Plan:
    """The plan of the search algorithm alone (no scheduler), whose trials ``who`` then judges result by result.

    Raises:
        ConfigError: The search algorithm's searcher decides on its trials itself.
    """
    inner = _plan(dataclasses.replace(tune_config, scheduler=None, metric=metric, mode=mode), param_space,
                  class_trainable)
    judged = inner.searcher.inner if isinstance(inner.searcher, SampleFromResolver) else inner.searcher
    if not isinstance(judged, (RandomSearch, OptunaSearch, CustomSearch, RepeatSearcher)):
        raise ConfigError(f"TuneConfig: {who} runs over random or grid search, OptunaSearch, a Repeater or a search "
                          f"algorithm of your own; {type(judged).__name__} decides on its trials itself")
    return inner


def _tell_search_properties(scheduler: Any, tune_config: TuneConfig) -> None:
    """Tell a scheduler of the user's own TuneConfig's metric and mode, as Ray does (``set_search_properties``).

    Raises:
        ConfigError: The scheduler has its own and TuneConfig gives them too (Ray refuses it).
    """
    if not scheduler.set_search_properties(tune_config.metric, tune_config.mode):
        raise ConfigError(f"TuneConfig: metric/mode given to TuneConfig and to {type(scheduler).__name__}, which has "
                          "its own; give them in one place, as Ray requires")


def _plan_scheduled(scheduler: Any, tune_config: TuneConfig, param_space: Mapping[str, Any] | None,
                    class_trainable: bool) -> Plan:
    """A scheduler of the user's own (:mod:`fluidsalus.tune._custom_scheduler`) over the trials the search
    algorithm makes with no scheduler."""
    name = type(scheduler).__name__
    _tell_search_properties(scheduler, tune_config)
    metric = tune_config.metric or getattr(scheduler, "metric", None)
    mode = tune_config.mode or getattr(scheduler, "mode", None)
    inner = _plan_judged(f"{name} (your own scheduler)", tune_config, param_space, class_trainable, metric, mode)
    rule, how = _built_in_rule(scheduler, inner)
    searcher = ScheduledSearch(inner.searcher, scheduler, rule=rule)
    if rule is not None:
        inner = replace(inner, metric=rule.searcher.metric, mode=rule.searcher.mode)
    return replace(inner, searcher=searcher, summary=f"{name} (your own scheduler{how}) over {inner.summary}")


def _built_in_rule(scheduler: Any, inner: Plan) -> tuple[BuiltInRule | None, str]:
    """For a subclass of ASHAScheduler or MedianStoppingRule (that overrides hooks): the searcher the plain class
    maps onto, as the rule its base hooks answer with (a ``super().on_trial_result(...)``, as in Ray), and the
    words for the plan's summary. HyperBand's decisions are made per bracket, not per result: a subclass of
    HyperBandScheduler that asks its base is planned by :func:`_plan_hyperband_rule`; one of PBT (...) has no rule
    (its ``super()`` answers CONTINUE)."""
    base = _kind(scheduler)
    if base not in (AsyncHyperBandScheduler, MedianStoppingRule):
        return None, ""
    name = base.__name__
    if isinstance(getattr(inner.searcher, "metric", None), list):
        raise ConfigError(f"TuneConfig: {name} decides on one metric, and the search is multi-objective "
                          f"(metric={inner.searcher.metric!r}); use no scheduler")
    metric, mode = _need_metric(type(scheduler).__name__, inner.metric, inner.mode)
    if base is AsyncHyperBandScheduler:
        judged = inner.searcher.inner if isinstance(inner.searcher, SampleFromResolver) else inner.searcher
        rule = BuiltInRule.asha(metric, mode, getattr(judged, "seed", None),
                                time_attr=scheduler.time_attr, max_t=scheduler.max_t,
                                grace_period=scheduler.grace_period, reduction_factor=scheduler.reduction_factor,
                                brackets=scheduler.brackets, stop_last_trials=scheduler.stop_last_trials)
    else:
        rule = BuiltInRule.median(metric, mode, time_attr=scheduler.time_attr, grace_period=scheduler.grace_period,
                                  min_samples_required=scheduler.min_samples_required,
                                  hard_stop=scheduler.hard_stop)
    return rule, f", super() answers {name}'s rule"


def _asks_its_base(scheduler: TrialScheduler, hook: str) -> bool:
    """Whether ``scheduler``'s ``hook`` runs its built-in base's: the subclass does not override it, or its
    override names the hook (``super().on_trial_result(...)``, ``HyperBandScheduler.on_trial_result(self, ...)``);
    read from the override's code, as the call cannot be seen before the run."""
    if not defined_by_user(scheduler, hook):
        return True

    def names(code: types.CodeType) -> set[str]:  # (with those of nested functions, lambdas, comprehensions)
        found = set(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                found |= names(const)
        return found

    def named_in(value: Any, seen: set[int]) -> bool:  # (a decorator's wrapper: the function it wraps)
        value = getattr(value, "__func__", value)
        if id(value) in seen or not callable(value):
            return False
        seen.add(id(value))
        value = inspect.unwrap(value)
        code = getattr(value, "__code__", None)
        if code is None:
            return False
        if hook in names(code):
            return True
        cells = [cell.cell_contents for cell in (getattr(value, "__closure__", None) or ())
                 if not _empty_cell(cell)]
        return any(named_in(cell, seen) for cell in cells)

    # the override, or a helper method of the user's classes it calls (``self._decide(...)`` calling super())
    for cls in type(scheduler).__mro__:
        if cls.__module__.startswith(("ray.", "fluidsalus.")):
            break
        if any(named_in(value, set()) for value in vars(cls).values()):
            return True
    return False


def _empty_cell(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError for an empty cell
    except ValueError:
        return True
    return False


def _plan_hyperband_rule(scheduler: HyperBandScheduler, tune_config: TuneConfig,
                         param_space: Mapping[str, Any] | None, class_trainable: bool, stop: Any) -> Plan:
    """A subclass of HyperBandScheduler whose ``on_trial_result`` calls ``super()``: the plain class's plan (its
    HyperBand runs the trials to the rungs' budgets and stops the halvings' losers, as Ray's does), with the
    subclass's hooks called on it as a scheduler of the user's own, its ``super().on_trial_result(...)``
    answering HyperBand's decision (:class:`~fluidsalus.tune._custom_scheduler.HyperBandRule`)."""
    _tell_search_properties(scheduler, tune_config)  # (before the plain class takes the subclass's metric and mode)
    name = type(scheduler).__name__
    # (the plain class under the subclass's name, with no hook of its own: the plan's messages name the user's
    # scheduler, "MyHyperBand needs a metric and a mode", where they said HyperBandScheduler)
    plain = type(name, (HyperBandScheduler,), {})(
        time_attr=scheduler.time_attr, metric=scheduler.metric, mode=scheduler.mode, max_t=scheduler.max_t,
        reduction_factor=scheduler.reduction_factor, stop_last_trials=scheduler.stop_last_trials)
    planned = _plan(dataclasses.replace(tune_config, scheduler=plain), param_space, class_trainable, stop)
    hyperband: Any = planned.searcher
    while not isinstance(hyperband, HyperBand):  # (under the wrappers: sample_from's, say)
        hyperband = hyperband.inner
    searcher = ScheduledSearch(planned.searcher, scheduler, rule=HyperBandRule(hyperband))
    return replace(planned, searcher=searcher, summary=f"{name} (your own scheduler, super() answers "
                                                       f"HyperBandScheduler's rule) over {planned.summary}")


def _plan_median(rule: MedianStoppingRule, tune_config: TuneConfig, param_space: Mapping[str, Any] | None,
                 class_trainable: bool) -> Plan:
    """Ray's MedianStoppingRule (:class:`~fluidsalus.searchers.MedianStopping`) over the trials the search
    algorithm makes with no scheduler."""
    search_alg, _ = _unwrap(adopt_search_alg(tune_config.search_alg))
    if isinstance(search_alg, TuneBOHB):
        raise ConfigError(f"TuneConfig: search_alg=TuneBOHB, scheduler=MedianStoppingRule has no fluidsalus "
                          f"equivalent; supported pairs: {_WORKING_PAIRS}")
    metric = _pick("metric", [("TuneConfig.metric", tune_config.metric), ("MedianStoppingRule.metric", rule.metric)])
    mode = _pick("mode", [("TuneConfig.mode", tune_config.mode), ("MedianStoppingRule.mode", rule.mode)])
    inner = _plan_judged("MedianStoppingRule", tune_config, param_space, class_trainable, metric, mode)
    if isinstance(getattr(inner.searcher, "metric", None), list):
        raise ConfigError(f"TuneConfig: MedianStoppingRule decides on one metric, and the search is "
                          f"multi-objective (metric={inner.searcher.metric!r}); use no scheduler")
    metric, mode = _need_metric("MedianStoppingRule", inner.metric, inner.mode)
    if not rule.hard_stop:
        warnings.warn("fluidsalus.tune: MedianStoppingRule(hard_stop=False): Ray pauses a trial the rule would stop "
                      "and resumes it once no other trial waits; fluidsalus shares devices instead of pausing "
                      "trials, so it goes on at once (and, as in Ray, is not judged again)",
                      UserWarning, stacklevel=callers_stacklevel())
    searcher = MedianStopping(inner.searcher, metric, mode, time_attr=rule.time_attr, grace_period=rule.grace_period,
                              min_samples_required=rule.min_samples_required, hard_stop=rule.hard_stop)
    return replace(inner, searcher=searcher, metric=metric, mode=mode,
                   summary=f"MedianStoppingRule(time_attr={rule.time_attr!r}, grace_period={rule.grace_period}, "
                           f"min_samples_required={rule.min_samples_required}, hard_stop={rule.hard_stop}) -> "
                           f"MedianStopping over {inner.summary}")


def _batched(search_alg: Any) -> bool:
    """Whether a ``ConcurrencyLimiter(batch=True)`` wraps the search algorithm (or the one a Repeater repeats)."""
    search_alg = adopt_search_alg(search_alg, warn=False)  # the plan itself warned about Ray's objects
    while isinstance(search_alg, (ConcurrencyLimiter, SearchGenerator, Repeater)):
        if isinstance(search_alg, ConcurrencyLimiter) and search_alg.batch:
            return True
        search_alg = adopt_search_alg(search_alg.searcher, warn=False)
    return False


def _wait_for_batches(planned: Plan) -> Plan:
    """Make the searcher that asks the search algorithm wait for each batch to end (Ray's
    ``ConcurrencyLimiter(batch=True)``); a searcher that has no such wait (TuneBOHB's, say) runs as it is, with a
    warning."""
    searcher: Any = planned.searcher
    while True:  # the wrappers (median stopping, a scheduler of your own, repeats, HyperBand over Optuna)
        inner = getattr(searcher, "inner", None) or getattr(searcher, "optuna", None)
        if inner is None:
            break
        searcher = inner
    if not isinstance(searcher, (OptunaSearch, CustomSearch, CustomASHA, CustomHyperBand)):
        warnings.warn(f"fluidsalus.tune: ConcurrencyLimiter(batch=True) waits for each batch around OptunaSearch, "
                      f"HyperOptSearch, BayesOptSearch and a search algorithm of your own; {type(searcher).__name__} "
                      "proposes as it does without it", UserWarning, stacklevel=callers_stacklevel())
        return planned
    searcher.wait_for_batch = True
    return replace(planned, summary=f"{planned.summary}, in batches")


def plan(tune_config: TuneConfig, param_space: Mapping[str, Any] | None, *,
         class_trainable: bool = False, stop: Any = None) -> Plan:
    """Combine a TuneConfig's search algorithm and scheduler with ``param_space`` into one fluidsalus searcher.

    Args:
        tune_config: The TuneConfig.
        param_space: The Tuner's ``param_space`` (Ray domains in it are translated, with a warning).
        class_trainable: The trainable is a Trainable subclass (PBT then checkpoints it at every iteration).
        stop: ``RunConfig.stop``: a search algorithm of your own is told it in ``set_search_properties``, as Ray
            tells it (a dict of thresholds; ``{}`` for anything else).

    Returns:
        The :class:`Plan`.

    Raises:
        ConfigError: An unsupported pair, conflicting metric/mode/concurrency, or a bad argument.
    """
    planned = _plan(tune_config, param_space, class_trainable, stop)
    searcher: Any = planned.searcher
    while searcher is not None:  # Ray's HyperBandScheduler keeps its nominal sizes in a partly filled bracket
        if isinstance(searcher, HyperBand):
            searcher.halve_partial_brackets = False
        searcher = getattr(searcher, "inner", None)
    return _wait_for_batches(planned) if _batched(tune_config.search_alg) else planned


def _plan_search_alg(search_alg: Any, repeater: Repeater | None, scheduler: TrialScheduler, space: dict[str, Any],
                     tune_config: TuneConfig, metric: str | None, mode: str | None, cap: int | None, pair: str,
                     limits: list[Any], inner_limits: list[Any], stop: Any) -> Plan:
    """The plan of a search algorithm that suggests the configurations (a Repeater's, one of the user's own, a
    fluidsalus searcher given as it is, TuneBOHB, OptunaSearch), over ``space``."""
    n = tune_config.num_samples
    if repeater is not None:
        return _plan_repeated(repeater, search_alg, scheduler, space, tune_config, metric, mode, cap, pair,
                              inner_limits, stop)
    if is_custom_searcher(search_alg):
        return _plan_custom(search_alg, scheduler, space, tune_config, metric, mode, cap, pair, stop=stop)
    if isinstance(search_alg, BaseSearcher):
        if _kind(scheduler) is not FIFOScheduler:
            raise ConfigError(
                f"TuneConfig: {pair}: a fluidsalus searcher already decides when trials stop; use no scheduler"
            )
        own_metric, own_mode = getattr(search_alg, "metric", None), getattr(search_alg, "mode", None)
        if isinstance(own_metric, list):  # a multi-objective OptunaSearch: the run has no single metric
            own_metric = own_mode = None
        return Plan(search_alg, space, metric or own_metric, mode or own_mode, cap,
                    summary=f"{type(search_alg).__name__} (given as it is)")
    if isinstance(search_alg, TuneBOHB):
        return _plan_bohb(search_alg, scheduler, space, metric, mode, n, cap, pair)
    assert isinstance(search_alg, OptunaHolder)
    return _plan_optuna(search_alg, scheduler, space, metric, mode, n, cap, pair, limits)


#: The schedulers fluidsalus maps onto its searchers, by class (see :func:`_kind`).
_BUILT_IN_SCHEDULERS = (FIFOScheduler, AsyncHyperBandScheduler, HyperBandForBOHB, HyperBandScheduler,
                        MedianStoppingRule, PB2Holder, PopulationBasedTraining, PopulationBasedTrainingReplay,
                        ResourceChangingScheduler)


def _kind(scheduler: TrialScheduler) -> type:
    """The built-in scheduler a scheduler runs as: its class, or for a subclass that adds no hook of its own
    (:func:`is_custom_scheduler` is False) the nearest built-in class it derives from, as Ray runs ``class
    Mine(FIFOScheduler): pass`` as a FIFOScheduler (it was refused as a pair with no equivalent: a helper's
    side-by-side run)."""
    return next((cls for cls in type(scheduler).__mro__ if cls in _BUILT_IN_SCHEDULERS), type(scheduler))


def _plan(tune_config: TuneConfig, param_space: Mapping[str, Any] | None, class_trainable: bool,
          stop: Any = None) -> Plan:
    scheduler: TrialScheduler = adopt_scheduler(tune_config.scheduler) or FIFOScheduler()
    if isinstance(scheduler, ResourceChangingScheduler):
        scheduler = _resource_changing_base(scheduler)
    if is_custom_scheduler(scheduler):
        base = _kind(scheduler)
        if base is HyperBandScheduler and _asks_its_base(scheduler, "on_trial_result"):
            return _plan_hyperband_rule(scheduler, tune_config, param_space, class_trainable, stop)
        # (a subclass of ASHA or the median rule: its super() answers the rule's decisions, see _built_in_rule; one
        # of HyperBand whose on_trial_result does not ask HyperBand never pauses a trial, so HyperBand decides
        # nothing, as in Ray)
        if base not in (FIFOScheduler, AsyncHyperBandScheduler, MedianStoppingRule, HyperBandScheduler) \
                and base in _BUILT_IN_SCHEDULERS:
            hooks = [hook for hook in HOOKS if defined_by_user(scheduler, hook)]
            warnings.warn(
                f"fluidsalus.tune: {type(scheduler).__name__} overrides {', '.join(hooks)} of {base.__name__}, so "
                f"it runs as a scheduler of your own: its hooks decide, and {base.__name__}'s own decisions are not "
                f"made (a super().{hooks[0]}(...) answers CONTINUE). Leave the hooks to {base.__name__}, or write "
                "the whole rule in them", UserWarning, stacklevel=callers_stacklevel())
        return _plan_scheduled(scheduler, tune_config, param_space, class_trainable)
    if isinstance(scheduler, MedianStoppingRule):
        return _plan_median(scheduler, tune_config, param_space, class_trainable)
    space = translate_ray_values(dict(param_space or {}), "param_space")
    sp.validate_space(space, allow_empty=True)
    sp.check_copyable(space, "param_space")
    given = adopt_search_alg(tune_config.search_alg)
    search_alg, limits = _unwrap(given)
    repeater, inner_limits = None, []
    if isinstance(search_alg, Repeater):  # limiters outside it cap trials, those inside it configurations
        repeater = search_alg
        search_alg, inner_limits = _unwrap(adopt_search_alg(repeater.searcher))
    _check_runnable(search_alg)
    cap = _concurrency(tune_config, limits, search_alg, given)
    sources_metric = [("TuneConfig.metric", tune_config.metric), (f"{type(scheduler).__name__}.metric",
                      scheduler.metric)]
    sources_mode = [("TuneConfig.mode", tune_config.mode), (f"{type(scheduler).__name__}.mode", scheduler.mode)]
    if search_alg is not None and not isinstance(search_alg, (BasicVariantGenerator, BaseSearcher)):
        name = type(search_alg).__name__
        # Ray's OptunaSearch (and the algorithms on it), TuneBOHB, NevergradSearch and ZOOptSearch take
        # TuneConfig's metric and mode in place of their own when they search param_space (their
        # set_search_properties), and optimise those; fluidsalus refused the pair
        outside = isinstance(search_alg, OwnSuggestSearcher)
        overridden = bool(space) and (
            (isinstance(search_alg, (OptunaHolder, TuneBOHB)) and search_alg.own_space() is None
             and not isinstance(search_alg.metric, list))
            or (outside and not search_alg.has_space()))
        # A Searcher of the user's own, and a NevergradSearch or ZOOptSearch with a space of its own, keeps its
        # metric and mode, and Ray's run ranks its trials by TuneConfig's (Ray never compares the two; fluidsalus
        # refused a pair that differed)
        own = defined_by_user(search_alg, "suggest") or outside
        for what, sources, theirs, ours in (("metric", sources_metric, search_alg.metric, tune_config.metric),
                                            ("mode", sources_mode, search_alg.mode, tune_config.mode)):
            if (overridden or own) and ours is not None:
                if theirs is not None and theirs != ours:
                    why = (f", as Ray's {name}.set_search_properties replaces it" if overridden else
                           f" for the run's results, as in Ray; {name} keeps its own {what}")
                    warnings.warn(f"fluidsalus.tune: TuneConfig.{what}={ours!r} replaces {name}.{what}={theirs!r}"
                                  f"{why}; give it once", UserWarning, stacklevel=callers_stacklevel())
                continue
            sources.append((f"{name}.{what}", theirs))
    metric = _pick("metric", sources_metric)
    mode = _pick("mode", sources_mode)
    n = tune_config.num_samples
    pair = f"search_alg={type(search_alg).__name__ if search_alg is not None else None}, " \
           f"scheduler={type(scheduler).__name__}"

    suggests = repeater is not None or is_custom_searcher(search_alg) or isinstance(search_alg, BaseSearcher)
    if suggests or (isinstance(search_alg, (TuneBOHB, OptunaHolder))
                    and not isinstance(scheduler, PopulationBasedTrainingReplay)):
        # A search algorithm suggests the configurations: as in Ray's Tuner, it searches the space with a
        # placeholder for each sample_from, and the functions are computed on what it suggests
        taken, functions = sp.take_functions(space)
        planned = _plan_search_alg(search_alg, repeater, scheduler, taken, tune_config, metric, mode, cap, pair,
                                   limits, inner_limits, stop)
        if not functions:
            return planned
        return replace(planned, searcher=SampleFromResolver(planned.searcher, functions),
                       summary=f"{planned.summary}, with sample_from computed on each suggestion")

    if isinstance(scheduler, PopulationBasedTrainingReplay):
        return _plan_replay(scheduler, search_alg, space, metric, mode, n, cap, pair, class_trainable)
    if search_alg is not None and not isinstance(search_alg, BasicVariantGenerator):
        raise ConfigError(f"TuneConfig: search_alg {type(search_alg).__name__} is not supported (a Searcher of "
                          f"your own implements suggest()); use one of {', '.join(SUPPORTED_SEARCHERS)}")

    generator = search_alg if search_alg is not None else BasicVariantGenerator()
    seed = generator.seed()
    target = {FIFOScheduler: "RandomSearch", AsyncHyperBandScheduler: "ASHA", HyperBandScheduler: "HyperBand",
              HyperBandForBOHB: "HyperBand", PopulationBasedTraining: "PBT", PB2Holder: "PB2"}.get(_kind(scheduler))
    if target is None:
        raise ConfigError(f"TuneConfig: {pair} has no fluidsalus equivalent; supported pairs: {_WORKING_PAIRS}")
    constant = generator.constant_grid_search
    if constant and isinstance(scheduler, PopulationBasedTraining):
        raise ConfigError(f"BasicVariantGenerator: constant_grid_search=True is not supported with {target} "
                          "(fluidsalus draws the population without it); remove it")
    points = copy.deepcopy(generator.points_to_evaluate)
    name = type(scheduler).__name__
    if isinstance(scheduler, FIFOScheduler):
        # (the cap also paces the search, as Ray's BasicVariantGenerator(max_concurrent=...) makes a trial only as
        # one ends: a run ended early holds only those, not all num_samples, in its ResultGrid)
        searcher: BaseSearcher = RandomSearch(space, num_samples=n, seed=seed, points_to_evaluate=points,
                                              constant_grid_search=constant, max_concurrent=cap)
        shown = f", points_to_evaluate={len(points)}" if points else ""
        shown += ", constant_grid_search=True" if constant else ""
        return Plan(searcher, space, metric, mode, cap, tags=VARIANTS, points=points,
                    summary=f"{name} -> RandomSearch(num_samples={n}, seed={seed}{shown})")
    if isinstance(scheduler, PopulationBasedTraining):
        _finite_samples(n, target)
    metric, mode = _need_metric(name, metric, mode)
    # ASHA and HyperBand take the points, the endless stream and constant_grid_search through a VariantStream.
    streamed = bool(points) or n == INFINITE_SAMPLES or constant
    extra: dict[str, Any] = {"points_to_evaluate": points, "constant_grid_search": constant} if streamed else {}
    if isinstance(scheduler, AsyncHyperBandScheduler):
        if cap is not None:
            # (the cap paces the search as under FIFO: Ray's BasicVariantGenerator(max_concurrent=...) makes a trial
            # only as one ends, so a run ended early holds only those in its ResultGrid, not all num_samples)
            extra["max_concurrent"] = cap
        searcher = (StreamedASHA if streamed else ASHA)(
            space, n, metric, mode, time_attr=scheduler.time_attr, max_t=scheduler.max_t,
            grace_period=scheduler.grace_period, reduction_factor=scheduler.reduction_factor,
            brackets=scheduler.brackets, stop_last_trials=scheduler.stop_last_trials, seed=seed, **extra)
        names: tuple[str, ...] = ("time_attr", "max_t", "grace_period", "reduction_factor", "brackets",
                                  "stop_last_trials")
    elif isinstance(scheduler, HyperBandScheduler):
        if isinstance(scheduler, HyperBandForBOHB):
            warnings.warn(
                "fluidsalus.tune: HyperBandForBOHB without TuneBOHB runs as fluidsalus's HyperBand, which fills "
                "its brackets from the smallest up (HyperBandForBOHB goes from the largest down); pair it with "
                "TuneBOHB for BOHB",
                UserWarning,
                stacklevel=callers_stacklevel(),
            )
        searcher = (StreamedHyperBand if streamed else HyperBand)(
            space, n, metric, mode, time_attr=scheduler.time_attr, max_t=scheduler.max_t,
            reduction_factor=scheduler.reduction_factor, stop_last_trials=scheduler.stop_last_trials, seed=seed,
            **extra)
        names = ("time_attr", "max_t", "reduction_factor", "stop_last_trials")
    else:
        assert isinstance(scheduler, PopulationBasedTraining)
        engine = PB2 if isinstance(scheduler, PB2Holder) else PBT
        searcher = engine(space, n, metric, mode, seed=seed, points_to_evaluate=points, **scheduler.engine_kwargs())
        searcher.scheduler_name = type(scheduler).__name__  # (its exploit lines name it, as Ray's)
        names = ("time_attr", "perturbation_interval", "quantile_fraction", "synch")
        if engine is PBT:
            names += ("burn_in_period", "resample_probability")
        if points:
            names += ("points_to_evaluate",)
        return Plan(searcher, space, metric, mode, cap, tags=VARIANTS, checkpoint_at_budgets=class_trainable,
                    summary=f"{name} -> {_describe(searcher, names)}", perturbed=scheduler.mutated_keys,
                    points=points)
    return Plan(searcher, space, metric, mode, cap, tags=VARIANTS, summary=f"{name} -> {_describe(searcher, names)}",
                points=points)


def _plan_replay(replay: PopulationBasedTrainingReplay, search_alg: Any, space: dict[str, Any], metric: Any,
                 mode: Any, n: int, cap: int | None, pair: str, class_trainable: bool) -> Plan:
    """One :class:`PBTReplay` trial: the policy file's start and changes, or one sample of ``space`` when the
    file has no change (Ray's rules; a class Trainable checkpoints at every iteration so each change restarts
    where it is)."""
    if search_alg is not None and not (isinstance(search_alg, BasicVariantGenerator)
                                       and not search_alg.points_to_evaluate):
        raise ConfigError(f"TuneConfig: {pair}: PopulationBasedTrainingReplay trains one trial with the replayed "
                          "configurations; use no search_alg")
    if n != 1:
        raise ConfigError(f"TuneConfig: num_samples={n}: PopulationBasedTrainingReplay trains exactly one trial "
                          "(Ray refuses a second one); set num_samples=1")
    config = replay.config
    if replay.schedule:
        if space:
            warnings.warn("fluidsalus.tune: PopulationBasedTrainingReplay replaces param_space with the replayed "
                          "configuration, as Ray does; pass no param_space",
                          UserWarning, stacklevel=callers_stacklevel())
    else:
        seed = search_alg.seed() if isinstance(search_alg, BasicVariantGenerator) else None
        samples = VariantStream(space, 1, seed).take(None) if space else []
        if len(samples) != 1:
            raise ConfigError(
                f"PopulationBasedTrainingReplay: {replay.policy_file!r} records no change, so the trial trains with "
                f"a param_space sample, and param_space gives {len(samples)} configurations; pass a param_space "
                "without grid_search (or do not replay)"
            )
        config = samples[0]
    assert config is not None
    searcher = PBTReplay(config, replay.schedule)
    return Plan(searcher, copy.deepcopy(config), metric, mode, cap, tags=VARIANTS,
                checkpoint_at_budgets=class_trainable,
                replay_tag=f"replay_{os.path.basename(replay.policy_file)}",
                summary=f"PopulationBasedTrainingReplay -> PBTReplay({len(replay.schedule)} changes, at iterations "
                        f"{[step for step, _ in replay.schedule]})")


def _plan_repeated(repeater: Repeater, inner: Any, scheduler: TrialScheduler, space: dict[str, Any],
                   tune_config: TuneConfig, metric: Any, mode: Any, cap: int | None, pair: str,
                   inner_limits: list[int], stop: Any = None) -> Plan:
    """A :class:`RepeatSearcher` around the plan of the repeated search algorithm: ``num_samples`` trials, as in
    Ray (``ceil(num_samples / repeat)`` configurations, the last one run fewer times when ``num_samples`` is not a
    multiple of ``repeat``), ``inner_limits`` or the trial cap over ``repeat`` configurations in flight."""
    custom = is_custom_searcher(inner)
    if not (isinstance(inner, OptunaHolder) or custom) or _kind(scheduler) is not FIFOScheduler:
        raise ConfigError(
            f"TuneConfig: Repeater({pair}): fluidsalus repeats an OptunaSearch or a search algorithm of your own "
            "(possibly in a ConcurrencyLimiter) with no scheduler (FIFOScheduler) only; an early-stopping "
            "scheduler would judge each repeat on its own, which Ray also recommends against"
        )
    if isinstance(metric, list) or isinstance(inner.metric, list):
        raise ConfigError(f"TuneConfig: Repeater averages one metric; {type(inner).__name__} has several "
                          f"({metric or inner.metric!r}); repeat a single-objective search")
    if custom and not isinstance(metric, str):
        raise ConfigError("TuneConfig: Repeater averages the metric, and none was given; set TuneConfig(metric=..., "
                          f"mode=...) or give them to {type(inner).__name__}")
    n = tune_config.num_samples
    configs = n
    if n != INFINITE_SAMPLES:
        configs = math.ceil(n / repeater.repeat)
        if n % repeater.repeat:
            warnings.warn(f"fluidsalus.tune: num_samples={n} is not a multiple of Repeater(repeat={repeater.repeat})"
                          f": the last configuration runs {n % repeater.repeat} of its {repeater.repeat} repeats and "
                          f"{type(inner).__name__} is never told its mean, as in Ray; set num_samples to a multiple "
                          "of repeat, as Ray asks", UserWarning, stacklevel=callers_stacklevel())
    batch = inner_limits or ([math.ceil(cap / repeater.repeat)] if cap is not None else [])
    if custom:
        planned = _plan_custom(inner, scheduler, space, tune_config, metric, mode, min(batch) if batch else None,
                               pair, n=configs, stop=stop)
        planned = replace(planned, max_concurrent_trials=cap)
    else:
        planned = _plan_optuna(inner, scheduler, space, metric, mode, configs, cap, pair, batch)
    assert isinstance(planned.metric, str)
    searcher = RepeatSearcher(planned.searcher, repeater.repeat, planned.metric, repeater.set_index,
                              num_samples=None if n == INFINITE_SAMPLES else n)
    return replace(planned, searcher=searcher,
                   summary=f"Repeater(repeat={repeater.repeat}, set_index={repeater.set_index}) + {planned.summary}"
                           f" ({configs} configurations)")


def _plan_bohb(holder: TuneBOHB, scheduler: TrialScheduler, param_space: dict[str, Any], metric: str | None,
               mode: str | None, n: int, cap: int | None, pair: str) -> Plan:
    space = _merge_space(param_space, holder.own_space(), "TuneBOHB")
    if not isinstance(scheduler, (HyperBandForBOHB, AsyncHyperBandScheduler)):
        raise ConfigError(
            f"TuneConfig: {pair} has no fluidsalus equivalent: TuneBOHB needs HyperBandForBOHB (-> SyncBOHB) or "
            "AsyncHyperBandScheduler (-> BOHB) as its scheduler"
        )
    metric, mode = _need_metric("TuneBOHB", metric, mode)
    model = holder.model_kwargs()
    model["points_to_evaluate"] = copy.deepcopy(holder.points_to_evaluate) or None
    if isinstance(scheduler, HyperBandForBOHB):
        searcher: BaseSearcher = SyncBOHB(
            space, n, metric, mode, time_attr=scheduler.time_attr, max_t=scheduler.max_t,
            reduction_factor=scheduler.reduction_factor, stop_last_trials=scheduler.stop_last_trials,
            seed=holder.seed, **model)
        names: tuple[str, ...] = ("time_attr", "max_t", "reduction_factor", "stop_last_trials")
    else:
        assert isinstance(scheduler, AsyncHyperBandScheduler)
        extra = {"max_concurrent": cap} if cap is not None else {}
        searcher = BOHB(
            space, n, metric, mode, time_attr=scheduler.time_attr, max_t=scheduler.max_t,
            grace_period=scheduler.grace_period, reduction_factor=scheduler.reduction_factor,
            brackets=scheduler.brackets, stop_last_trials=scheduler.stop_last_trials, seed=holder.seed,
            **model, **extra)
        names = ("time_attr", "max_t", "grace_period", "reduction_factor", "brackets", "stop_last_trials")
    return Plan(searcher, space, metric, mode, cap,
                summary=f"TuneBOHB + {type(scheduler).__name__} -> {_describe(searcher, names)}")


def _plan_optuna(holder: OptunaHolder, scheduler: TrialScheduler, param_space: dict[str, Any], metric: str | None,
                 mode: str | None, n: int, cap: int | None, pair: str, limits: list[int]) -> Plan:
    name = type(holder).__name__  # OptunaSearch, or HyperOptSearch (an OptunaSearch with HyperOpt's TPE settings)
    space = holder.prepare_space(_merge_space(param_space, holder.own_space(), name))
    if holder.define_by_run is not None:
        domains, _ = sp.split_constants(space)
        if domains:
            raise ConfigError(
                "TuneConfig: the search algorithm OptunaSearch was given a define-by-run space, and param_space "
                f"holds parameters to search too ({', '.join(sorted(domains))}); as in Ray, suggest them in the "
                "function and keep only constants in param_space"
            )
    metric, mode = _need_metric("OptunaSearch", metric, mode)
    multi = isinstance(metric, list)
    if multi and not isinstance(scheduler, FIFOScheduler):
        raise ConfigError(
            f"TuneConfig: {pair}: OptunaSearch(metric={metric!r}) is a multi-objective search, and "
            f"{type(scheduler).__name__} decides on one metric (or maps onto an Optuna pruner, which is "
            "single-objective); use no scheduler (Ray warns that schedulers may not work correctly with several "
            "objectives)"
        )
    # A search algorithm that proposes in synchronous batches (HEBOSearch) takes the cap as its batch size, as Ray's
    # set_max_concurrency gives it.
    batch = min(limits) if limits else cap if cap is not None else holder.batches
    extra_stops: list[Callable[[str, Mapping[str, Any]], bool]] = []
    if isinstance(scheduler, FIFOScheduler):
        pruner = None
        how = name + (" (define-by-run)" if holder.define_by_run else "")
    elif isinstance(scheduler, AsyncHyperBandScheduler):
        pruner = _sha_pruner(scheduler)
        if scheduler.stop_last_trials:
            extra_stops.append(MaxBudgetStop(scheduler.time_attr, float(scheduler.max_t)))
        how = (f"{name} + AsyncHyperBandScheduler -> OptunaSearch(pruner=SuccessiveHalvingPruner("
               f"min_resource={scheduler.grace_period}, reduction_factor={scheduler.reduction_factor}), "
               f"stop at {scheduler.time_attr} >= {scheduler.max_t})")
    elif _kind(scheduler) is HyperBandScheduler:
        pruner = None  # HyperBand stops the trials; the study's pruner takes no part, as in Ray
        how = (f"{name} + HyperBandScheduler -> OptunaHyperBand(time_attr={scheduler.time_attr!r}, "
               f"max_t={scheduler.max_t}, reduction_factor={scheduler.reduction_factor}, "
               f"stop_last_trials={scheduler.stop_last_trials}) over the study's trials")
    else:
        raise ConfigError(f"TuneConfig: {pair} has no fluidsalus equivalent; supported pairs: {_WORKING_PAIRS}")
    searcher: BaseSearcher = _optuna(holder, space, n, metric, mode, pruner, batch)
    if holder.batches is not None:
        assert isinstance(searcher, OptunaSearch)
        searcher.wait_for_batch = True
        how += f", in batches of {batch}"
    if _kind(scheduler) is HyperBandScheduler:
        assert isinstance(searcher, OptunaSearch) and isinstance(metric, str) and isinstance(mode, str)
        searcher = OptunaHyperBand(searcher, n, metric, mode, max_concurrent=batch, time_attr=scheduler.time_attr,
                                   max_t=scheduler.max_t, reduction_factor=scheduler.reduction_factor,
                                   stop_last_trials=scheduler.stop_last_trials)
    if multi:  # the run has no single metric; ResultGrid.get_best_result needs one named, as in Ray
        return Plan(searcher, space, None, None, cap, extra_stops=extra_stops,
                    summary=f"{how} with metric={metric!r}, mode={mode!r}")
    return Plan(searcher, space, metric, mode, cap, extra_stops=extra_stops, summary=how)
