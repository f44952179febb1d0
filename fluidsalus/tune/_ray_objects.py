"""Ray Tune's own scheduler and search-algorithm objects, translated into fluidsalus.tune's holders.

A script that changed ``from ray import tune`` but kept ``from ray.tune.schedulers import ASHAScheduler``
passes Ray's object. Its constructor arguments are read back from the object (Ray keeps them in private
attributes) and the equal fluidsalus.tune holder is built, with a ``UserWarning`` that names both. Classes
with no fluidsalus equivalent (HyperOptSearch, ...) raise a :class:`~fluidsalus.errors.ConfigError` that names
them and lists what is supported.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.searchers import BaseSearcher
from fluidsalus.session import callers_stacklevel
from fluidsalus.tune._custom_scheduler import is_custom_scheduler
from fluidsalus.tune._custom_search import is_custom_searcher
from fluidsalus.tune.schedulers import (
    PB2,
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
from fluidsalus.tune.schedulers.resource_changing_scheduler import DistributeResources, DistributeResourcesToTopJob
from fluidsalus.tune.search import (
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Repeater,
    SearchAlgorithm,
    SearchGenerator,
)
from fluidsalus.tune.search.bohb import TuneBOHB
from fluidsalus.tune.search.optuna import OptunaSearch

__all__ = ["adopt_scheduler", "adopt_search_alg", "is_ray_object"]

_SUPPORTED_SCHEDULERS = ("FIFOScheduler", "AsyncHyperBandScheduler/ASHAScheduler", "HyperBandScheduler",
                         "HyperBandForBOHB", "MedianStoppingRule", "PopulationBasedTraining", "PB2",
                         "PopulationBasedTrainingReplay", "ResourceChangingScheduler",
                         "a TrialScheduler subclass of your own")
SUPPORTED_SEARCHERS = ("BasicVariantGenerator", "ConcurrencyLimiter", "Repeater", "SearchGenerator", "TuneBOHB",
                        "OptunaSearch", "HyperOptSearch (import it from fluidsalus.tune.search.hyperopt)",
                        "BayesOptSearch (import it from fluidsalus.tune.search.bayesopt)",
                        "AxSearch (import it from fluidsalus.tune.search.ax)",
                        "HEBOSearch (import it from fluidsalus.tune.search.hebo)",
                        "NevergradSearch (import it from fluidsalus.tune.search.nevergrad)",
                        "ZOOptSearch (import it from fluidsalus.tune.search.zoopt)",
                        "a Searcher subclass of your own")
#: Ray search algorithms that fluidsalus provides but cannot translate from Ray's object (Ray keeps only a
#: converted space): the import to use instead.
_IMPORT_INSTEAD = {"HyperOptSearch": "from fluidsalus.tune.search.hyperopt import HyperOptSearch",
                   "BayesOptSearch": "from fluidsalus.tune.search.bayesopt import BayesOptSearch",
                   "AxSearch": "from fluidsalus.tune.search.ax import AxSearch",
                   "HEBOSearch": "from fluidsalus.tune.search.hebo import HEBOSearch",
                   "NevergradSearch": "from fluidsalus.tune.search.nevergrad import NevergradSearch",
                   "ZOOptSearch": "from fluidsalus.tune.search.zoopt import ZOOptSearch"}


def is_ray_object(value: Any) -> bool:
    """Whether ``value``'s class (or a base class) comes from Ray."""
    return any(cls.__module__.startswith("ray.") for cls in type(value).__mro__)


#: Ray base classes whose subclasses of the user's own run as they are (a search algorithm or a scheduler of
#: their own), with the test that they have code of their own and the import to suggest.
_RUN_AS_IS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "Searcher": (is_custom_searcher, "from fluidsalus.tune.search import Searcher"),
    "TrialScheduler": (is_custom_scheduler, "from fluidsalus.tune.schedulers import TrialScheduler"),
    "FIFOScheduler": (is_custom_scheduler, "from fluidsalus.tune.schedulers import TrialScheduler"),
}


def _users_subclass(field: str, value: Any, name: str, warn: bool) -> bool:
    """Whether ``value`` is the user's own subclass of Ray's class ``name`` that runs as it is (warned about).

    Raises:
        ConfigError: A subclass of the user's own of another Ray class: translating its Ray base would drop
            its code.
    """
    if type(value).__module__.startswith("ray."):
        return False
    runs, module = _RUN_AS_IS.get(name, (None, ""))
    if runs is not None and runs(value):
        if warn:
            warnings.warn(f"fluidsalus.tune: {field} {type(value).__name__} subclasses Ray Tune's {name}; fluidsalus "
                          f"runs it as it is. Change the import to `{module}`.",
                          UserWarning, stacklevel=callers_stacklevel())
        return True
    raise ConfigError(
        f"{field} is {type(value).__name__}, a subclass of Ray Tune's {name} with code of its own, which "
        "fluidsalus cannot run; use the fluidsalus.tune class (or a fluidsalus.searchers searcher) instead"
    )


def _ray_class_name(value: Any) -> str:
    for cls in type(value).__mro__:
        if cls.__module__.startswith("ray."):
            return cls.__name__
    return type(value).__name__


def _read(value: Any, attr: str) -> Any:
    if not hasattr(value, attr):
        raise ConfigError(
            f"cannot read {attr} from Ray's {type(value).__name__} (a Ray version fluidsalus does not know); "
            f"use fluidsalus.tune's {type(value).__name__} instead"
        )
    return getattr(value, attr)


def _asha(value: Any) -> AsyncHyperBandScheduler:
    brackets = _read(value, "_brackets")
    rungs = brackets[0]._rungs if brackets else []
    grace_period = rungs[-1][0] if rungs else _read(value, "_max_t")
    return AsyncHyperBandScheduler(
        time_attr=_read(value, "_time_attr"), metric=_read(value, "_metric"), mode=_read(value, "_mode"),
        max_t=_read(value, "_max_t"), grace_period=grace_period,
        reduction_factor=_read(value, "_reduction_factor"), brackets=len(brackets),
        stop_last_trials=_read(value, "_stop_last_trials"),
    )


def _hyperband(cls: type[HyperBandScheduler]) -> Callable[[Any], HyperBandScheduler]:
    def build(value: Any) -> HyperBandScheduler:
        return cls(time_attr=_read(value, "_time_attr"), metric=_read(value, "_metric"), mode=_read(value, "_mode"),
                   max_t=_read(value, "_max_t_attr"), reduction_factor=_read(value, "_eta"),
                   stop_last_trials=_read(value, "_stop_last_trials"))

    return build


def _median(value: Any) -> MedianStoppingRule:
    return MedianStoppingRule(
        time_attr=_read(value, "_time_attr"), metric=_read(value, "_metric"), mode=_read(value, "_mode"),
        grace_period=_read(value, "_grace_period"), min_samples_required=_read(value, "_min_samples_required"),
        min_time_slice=_read(value, "_min_time_slice"), hard_stop=_read(value, "_hard_stop"),
    )


def _pbt(value: Any) -> PopulationBasedTraining:
    names = ("time_attr", "metric", "mode", "perturbation_interval", "burn_in_period", "hyperparam_mutations",
             "quantile_fraction", "resample_probability", "perturbation_factors", "custom_explore_fn",
             "log_config", "require_attrs", "synch")
    return PopulationBasedTraining(**{name: _read(value, f"_{name}") for name in names})


def _pb2(value: Any) -> PB2:
    names = ("time_attr", "metric", "mode", "perturbation_interval", "hyperparam_bounds", "quantile_fraction",
             "log_config", "require_attrs", "synch", "custom_explore_fn")
    return PB2(**{name: _read(value, f"_{name}") for name in names})


def _allocation(value: Any) -> Any:
    """Ray's DistributeResources(ToTopJob) as fluidsalus's holder; any other callable as it is."""
    names = ("add_bundles", "increase_by", "increase_by_times", "reserve_resources")
    ray_name = _ray_class_name(value) if value is not None and is_ray_object(value) else None
    if ray_name == "DistributeResourcesToTopJob":
        return DistributeResourcesToTopJob(**{n: _read(value, n) for n in (*names, "metric", "mode")})
    if ray_name == "DistributeResources":
        return DistributeResources(**{n: _read(value, n) for n in names})
    return value


def _resource_changing(value: Any) -> ResourceChangingScheduler:
    return ResourceChangingScheduler(adopt_scheduler(_read(value, "_base_scheduler"), warn=False),
                                     _allocation(_read(value, "_resources_allocation_function")))


_SCHEDULERS: dict[str, Callable[[Any], TrialScheduler]] = {
    "FIFOScheduler": lambda value: FIFOScheduler(),
    "AsyncHyperBandScheduler": _asha,
    "HyperBandScheduler": _hyperband(HyperBandScheduler),
    "HyperBandForBOHB": _hyperband(HyperBandForBOHB),
    "MedianStoppingRule": _median,
    "PopulationBasedTraining": _pbt,
    "PB2": _pb2,
    "PopulationBasedTrainingReplay": lambda value: PopulationBasedTrainingReplay(_read(value, "policy_file")),
    "ResourceChangingScheduler": _resource_changing,
}


def _basic_variant(value: Any) -> BasicVariantGenerator:
    state = _read(value, "_random_state")
    rng = getattr(state, "_rng", state)
    return BasicVariantGenerator(points_to_evaluate=_read(value, "_points_to_evaluate"),
                                 max_concurrent=_read(value, "max_concurrent"),
                                 constant_grid_search=_read(value, "_constant_grid_search"), random_state=rng)


def _limiter(value: Any) -> ConcurrencyLimiter:
    return ConcurrencyLimiter(adopt_search_alg(_read(value, "searcher"), warn=False),
                              max_concurrent=_read(value, "max_concurrent"), batch=_read(value, "batch"))


def _repeater(value: Any) -> Repeater:
    return Repeater(adopt_search_alg(_read(value, "searcher"), warn=False), repeat=_read(value, "repeat"),
                    set_index=_read(value, "_set_index"))


def _bohb(value: Any) -> TuneBOHB:
    return TuneBOHB(space=_read(value, "_space") or None, bohb_config=_read(value, "_bohb_config"),
                    metric=_read(value, "_metric"), mode=_read(value, "_mode"),
                    points_to_evaluate=_read(value, "_points_to_evaluate"), seed=_read(value, "_seed"),
                    max_concurrent=_read(value, "_max_concurrent"))


def _optuna(value: Any) -> OptunaSearch:
    storage = _read(value, "_storage")
    return OptunaSearch(space=_read(value, "_space") or None, metric=_read(value, "_metric"),
                        mode=_read(value, "_mode"), points_to_evaluate=_read(value, "_points_to_evaluate") or None,
                        sampler=_read(value, "_sampler"),
                        study_name=_read(value, "_study_name") if storage is not None else None,
                        storage=storage, seed=_read(value, "_seed"),
                        evaluated_rewards=_read(value, "_evaluated_rewards"))


def _search_generator(value: Any) -> SearchGenerator:
    return SearchGenerator(adopt_search_alg(_read(value, "searcher"), warn=False))


_SEARCHERS: dict[str, Callable[[Any], SearchAlgorithm]] = {
    "SearchGenerator": _search_generator,
    "BasicVariantGenerator": _basic_variant,
    "ConcurrencyLimiter": _limiter,
    "Repeater": _repeater,
    "TuneBOHB": _bohb,
    "OptunaSearch": _optuna,
}


def _warn(field: str, ray_name: str, ours: Any, module: str) -> None:
    warnings.warn(
        f"fluidsalus.tune: {field} is Ray Tune's {ray_name}; it was translated into {ours!r}. Change "
        f"the import to `from {module} import {type(ours).__name__}`.",
        UserWarning,
        stacklevel=callers_stacklevel(),
    )


def adopt_scheduler(value: Any, field: str = "TuneConfig.scheduler", warn: bool = True) -> Any:
    """``TuneConfig.scheduler`` as a fluidsalus.tune scheduler (Ray's own are translated with a warning).

    Args:
        value: The scheduler given.
        field: Where it was given, for the messages.
        warn: Whether to warn about a Ray object translated (or a subclass of Ray's run as it is); False for one
            translated again, or inside another that warns for the whole object (a warning filter around the call
            was not thread-safe: it silenced every thread's warnings of the category, h232).

    Raises:
        ConfigError: Not a scheduler, or a Ray scheduler with no fluidsalus equivalent.
    """
    if value is None or isinstance(value, TrialScheduler):
        return value
    if is_ray_object(value):
        name = _ray_class_name(value)
        build = _SCHEDULERS.get(name)
        if _users_subclass(field, value, name, warn=warn):
            return value
        if build is None:
            raise ConfigError(
                f"{field} is Ray Tune's {name}, which fluidsalus has no equivalent for; supported: "
                f"{', '.join(_SUPPORTED_SCHEDULERS)}"
            )
        ours = build(value)  # (one warning, for the whole object: its parts are translated with warn=False)
        if warn:
            _warn(field, name, ours, "fluidsalus.tune.schedulers")
        return ours
    raise ConfigError(
        f"{field} must be None or one of fluidsalus.tune.schedulers' {', '.join(_SUPPORTED_SCHEDULERS)} "
        f"(got {type(value).__name__})"
    )


def adopt_search_alg(value: Any, warn: bool = True) -> Any:
    """``TuneConfig.search_alg`` as a fluidsalus.tune search algorithm (Ray's own translated with a warning).

    A fluidsalus :class:`~fluidsalus.searchers.BaseSearcher` is returned as it is.

    Raises:
        ConfigError: Not a search algorithm, or a Ray one with no fluidsalus equivalent.
    """
    if value is None or isinstance(value, (SearchAlgorithm, BaseSearcher)):
        return value
    if is_ray_object(value):
        name = _ray_class_name(value)
        build = _SEARCHERS.get(name)
        if _users_subclass("TuneConfig.search_alg", value, name, warn):
            return value
        if build is None and name in _IMPORT_INSTEAD:
            raise ConfigError(f"TuneConfig: search_alg is Ray Tune's {name}; change its import to "
                              f"`{_IMPORT_INSTEAD[name]}` (its arguments are not readable back from Ray's object)")
        if build is None:
            raise ConfigError(
                f"TuneConfig: search_alg is Ray Tune's {name}, which fluidsalus has no equivalent for; supported: "
                f"{', '.join(SUPPORTED_SEARCHERS)}"
            )
        ours = build(value)  # (one warning, for the whole object: its parts are translated with warn=False)
        if warn:
            module = {"TuneBOHB": "fluidsalus.tune.search.bohb", "OptunaSearch": "fluidsalus.tune.search.optuna"}
            _warn("TuneConfig.search_alg", name, ours, module.get(name, "fluidsalus.tune.search"))
        return ours
    raise ConfigError(
        f"TuneConfig: search_alg must be None, one of fluidsalus.tune.search's {', '.join(SUPPORTED_SEARCHERS)} "
        f"or a fluidsalus.searchers searcher (got {type(value).__name__})"
    )
