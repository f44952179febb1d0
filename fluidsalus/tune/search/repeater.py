"""Ray's module path ``ray.tune.search.repeater``, for imports that name it: Repeater and TRIAL_INDEX."""

from fluidsalus.searchers._repeat import TRIAL_INDEX
from fluidsalus.tune.search._holders import Repeater

__all__ = ["TRIAL_INDEX", "Repeater"]
