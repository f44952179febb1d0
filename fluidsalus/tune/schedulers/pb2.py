"""Ray's module path ``ray.tune.schedulers.pb2``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import PB2

__all__ = ["PB2"]
