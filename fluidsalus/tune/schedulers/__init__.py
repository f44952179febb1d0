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
"""

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

__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "TrialScheduler",
]
