"""Ray's module path ``ray.tune.schedulers.async_hyperband``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import ASHAScheduler, AsyncHyperBandScheduler

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]
