"""Ray's module path ``ray.tune.schedulers.trial_scheduler``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import FIFOScheduler, TrialScheduler

__all__ = ["FIFOScheduler", "TrialScheduler"]
