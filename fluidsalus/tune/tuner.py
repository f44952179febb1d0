"""Ray's module path ``ray.tune.tuner``: ``Tuner``."""

from fluidsalus.tune._tuner import Tuner

__all__ = ["Tuner"]
