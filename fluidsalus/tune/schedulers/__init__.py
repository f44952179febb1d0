"""Trial schedulers with Ray Tune's names and signatures (``ray.tune.schedulers``).

- :class:`FIFOScheduler`: run every trial to the end (the default);
- :class:`AsyncHyperBandScheduler` / :class:`ASHAScheduler`: asynchronous successive halving;
- :class:`HyperBandScheduler`: synchronous HyperBand;
- :class:`HyperBandForBOHB`: HyperBand for BOHB (with ``TuneBOHB``);
- :class:`MedianStoppingRule`: median stopping (Ray's rule, :class:`~fluidsalus.searchers.MedianStopping`);
- :class:`PopulationBasedTraining`: PBT;
- :class:`PB2` (also ``schedulers.pb2.PB2``): population based bandits;
- :class:`PopulationBasedTrainingReplay`: one trial trained with a PBT run's schedule of configurations;
- :class:`ResourceChangingScheduler`: another scheduler's decisions; fluidsalus's planner changes the trials'
  resources itself, so its ``resources_allocation_function`` is kept but not called.

They hold their arguments; ``Tuner.fit()`` turns each, with the search algorithm, into one fluidsalus
searcher (docs/compatibility.md has the table). The submodules ``async_hyperband``, ``hyperband``,
``hb_bohb``, ``median_stopping_rule``, ``pbt``, ``pb2``, ``resource_changing_scheduler`` and ``trial_scheduler``
exist for imports that name them.
:func:`create_scheduler` builds one from Ray's short names (``"asha"``, ``"hyperband"``, ``"pbt"``, ...), as
``tune.run(scheduler="...")`` does.
"""

from __future__ import annotations

from typing import Any

from fluidsalus.tune._config import build_with_known, by_short_name
from fluidsalus.tune.schedulers._holders import (
    PB2,
    ASHAScheduler,
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

#: Ray's short scheduler names (``ray.tune.schedulers.SCHEDULER_IMPORT``) and the holder each builds; None where
#: fluidsalus has no equivalent.
SCHEDULER_NAMES: dict[str, type[TrialScheduler]] = {
    "fifo": FIFOScheduler,
    "async_hyperband": AsyncHyperBandScheduler,
    "asynchyperband": AsyncHyperBandScheduler,
    "median_stopping_rule": MedianStoppingRule,
    "medianstopping": MedianStoppingRule,
    "hyperband": HyperBandScheduler,
    "hb_bohb": HyperBandForBOHB,
    "pbt": PopulationBasedTraining,
    "pbt_replay": PopulationBasedTrainingReplay,
    "pb2": PB2,
    "resource_changing": ResourceChangingScheduler,
}


def create_scheduler(scheduler: str, **kwargs: Any) -> TrialScheduler:
    """A scheduler from its short name (``ray.tune.create_scheduler``).

    Args:
        scheduler: One of Ray's names (:data:`SCHEDULER_NAMES`), in any case.
        **kwargs: Arguments of the scheduler; those it does not take are dropped, as in Ray.

    Returns:
        The scheduler.

    Raises:
        ConfigError: An unknown name.
    """
    return build_with_known(by_short_name("scheduler", scheduler, SCHEDULER_NAMES), kwargs)


__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PB2",
    "PopulationBasedTraining",
    "PopulationBasedTrainingReplay",
    "ResourceChangingScheduler",
    "TrialScheduler",
    "create_scheduler",
]
