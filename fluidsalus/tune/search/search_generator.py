"""Ray's module path ``ray.tune.search.search_generator``, for imports that name it: SearchGenerator."""

from fluidsalus.tune.search._holders import SearchGenerator

__all__ = ["SearchGenerator"]
