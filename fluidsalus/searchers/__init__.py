"""Searchers: algorithms that propose TrialGroups and decide what happens to trials after each result.

One algorithm per private module, re-exported here (the layout of Optuna's ``optuna/pruners``).
"""

from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.searchers._random import RandomSearch

__all__ = ["BaseSearcher", "Decision", "RandomSearch"]
