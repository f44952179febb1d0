"""Ray's module path ``ray.tune.experiment.trial``: ``Trial``, the view of a trial that callbacks get."""

from fluidsalus.tune.callback import TrialInfo as Trial

__all__ = ["Trial"]
