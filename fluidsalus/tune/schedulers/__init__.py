"""Trial schedulers with Ray Tune's names and signatures (``ray.tune.schedulers``).

- :class:`FIFOScheduler`: run every trial to the end (the default);
- :class:`AsyncHyperBandScheduler` / :class:`ASHAScheduler`: asynchronous successive halving;
- :class:`HyperBandScheduler`: synchronous HyperBand;
- :class:`HyperBandForBOHB`: HyperBand for BOHB (with ``TuneBOHB``);
- :class:`MedianStoppingRule`: median stopping (through Optuna's ``MedianPruner``);
- :class:`PopulationBasedTraining`: PBT.

They hold their arguments; ``Tuner.fit()`` turns each, with the search algorithm, into one fluidsalus
searcher (docs/compatibility.md has the table). The submodules ``async_hyperband``, ``hyperband``,
``hb_bohb``, ``median_stopping_rule``, ``pbt`` and ``trial_scheduler`` exist for imports that name them.
:func:`create_scheduler` builds one from Ray's short names (``"asha"``, ``"hyperband"``, ``"pbt"``, ...), as
``tune.run(scheduler="...")`` does.
"""

from __future__ import annotations

import inspect
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.tune.schedulers._holders import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)

#: Ray's short scheduler names (``ray.tune.schedulers.SCHEDULER_IMPORT``) and the holder each builds; None where
#: fluidsalus has no equivalent.
SCHEDULER_NAMES: dict[str, type[TrialScheduler] | None] = {
    "fifo": FIFOScheduler,
    "async_hyperband": AsyncHyperBandScheduler,
    "asynchyperband": AsyncHyperBandScheduler,
    "median_stopping_rule": MedianStoppingRule,
    "medianstopping": MedianStoppingRule,
    "hyperband": HyperBandScheduler,
    "hb_bohb": HyperBandForBOHB,
    "pbt": PopulationBasedTraining,
    "pbt_replay": None,
    "pb2": None,
    "resource_changing": None,
}


def create_scheduler(scheduler: str, **kwargs: Any) -> TrialScheduler:
    """A scheduler from its short name (``ray.tune.create_scheduler``).

    Args:
        scheduler: One of Ray's names (:data:`SCHEDULER_NAMES`), in any case.
        **kwargs: Arguments of the scheduler; those it does not take are dropped, as in Ray.

    Returns:
        The scheduler.

    Raises:
        ConfigError: An unknown name, or one fluidsalus has no scheduler for.
    """
    name = scheduler.lower() if isinstance(scheduler, str) else scheduler
    if name not in SCHEDULER_NAMES:
        raise ConfigError(f"scheduler must be one of {list(SCHEDULER_NAMES)} (got {scheduler!r})")
    cls = SCHEDULER_NAMES[name]
    if cls is None:
        supported = [n for n, c in SCHEDULER_NAMES.items() if c is not None]
        raise ConfigError(f"scheduler {scheduler!r} is not provided by fluidsalus; use one of {supported}")
    accepted = inspect.signature(cls).parameters
    return cls(**{key: value for key, value in kwargs.items() if key in accepted})


__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "TrialScheduler",
    "create_scheduler",
]
