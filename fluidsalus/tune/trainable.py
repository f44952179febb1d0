"""Ray's module path ``ray.tune.trainable``: ``Trainable`` and ``with_parameters``."""

from fluidsalus.tune._trainable import Trainable, with_parameters

__all__ = ["Trainable", "with_parameters"]
