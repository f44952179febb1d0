"""Ray's module path ``ray.tune.result_grid``: ``ResultGrid``."""

from fluidsalus.result import ResultGrid

__all__ = ["ResultGrid"]
