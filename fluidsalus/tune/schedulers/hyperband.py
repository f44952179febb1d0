"""Ray's module path ``ray.tune.schedulers.hyperband``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import HyperBandScheduler

__all__ = ["HyperBandScheduler"]
