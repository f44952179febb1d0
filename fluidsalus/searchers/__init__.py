"""Searchers: algorithms that propose TrialGroups and decide what happens to trials after each result.

One algorithm per private module, re-exported here (the layout of Optuna's ``optuna/pruners``):

- :class:`RandomSearch`: random and grid search (Ray Tune's BasicVariantGenerator);
- :class:`ASHA`: asynchronous successive halving (Ray's AsyncHyperBandScheduler decisions);
- :class:`HyperBand`: synchronous HyperBand, each rung one TrialGroup;
- :class:`BOHB` / :class:`SyncBOHB`: BOHB's KDE model over ASHA / over HyperBand;
- :class:`PBT`: population based training, exploiting through checkpoints;
- :class:`PB2`: population based bandits, PBT whose explore step is a GP bandit;
- :class:`PBTReplay`: one trial trained with a PBT run's schedule of configurations (Ray's policy files);
- :class:`OptunaSearch`: any Optuna sampler through ask/tell, optionally with an Optuna pruner;
- :class:`RepeatSearcher`: another searcher's configurations, each run several times, told the mean;
- :class:`MedianStopping`: another searcher's trials, stopped by the median stopping rule (Ray's
  MedianStoppingRule decisions).
"""

from fluidsalus.searchers._asha import ASHA
from fluidsalus.searchers._base import BaseSearcher, Decision, ExploitRequest
from fluidsalus.searchers._bohb import BOHB, SyncBOHB
from fluidsalus.searchers._hyperband import HyperBand
from fluidsalus.searchers._median_stopping import MedianStopping
from fluidsalus.searchers._optuna import OptunaSearch
from fluidsalus.searchers._pb2 import PB2
from fluidsalus.searchers._pbt import PBT
from fluidsalus.searchers._pbt_replay import PBTReplay
from fluidsalus.searchers._random import RandomSearch
from fluidsalus.searchers._repeat import RepeatSearcher

__all__ = [
    "ASHA",
    "BOHB",
    "PB2",
    "PBT",
    "PBTReplay",
    "BaseSearcher",
    "Decision",
    "ExploitRequest",
    "HyperBand",
    "MedianStopping",
    "OptunaSearch",
    "RandomSearch",
    "RepeatSearcher",
    "SyncBOHB",
]
