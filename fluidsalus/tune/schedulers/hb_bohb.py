"""Ray's module path ``ray.tune.schedulers.hb_bohb``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import HyperBandForBOHB

__all__ = ["HyperBandForBOHB"]
