"""Ray's module path ``ray.tune.search.search_algorithm``, for imports that name it: SearchAlgorithm."""

from fluidsalus.tune.search._holders import SearchAlgorithm

__all__ = ["SearchAlgorithm"]
