"""Searchers: algorithms that propose TrialGroups and decide what happens to trials after each result.

One algorithm per private module, re-exported here (the layout of Optuna's ``optuna/pruners``).
"""

from fluidsalus.searchers._base import BaseSearcher, Decision, ExploitRequest
from fluidsalus.searchers._optuna import OptunaSearch
from fluidsalus.searchers._pbt import PBT
from fluidsalus.searchers._random import RandomSearch

__all__ = ["PBT", "BaseSearcher", "Decision", "ExploitRequest", "OptunaSearch", "RandomSearch"]
