"""Ray's module path ``ray.tune.schedulers.median_stopping_rule``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import MedianStoppingRule

__all__ = ["MedianStoppingRule"]
