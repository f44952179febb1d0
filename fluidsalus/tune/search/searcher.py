"""Ray's module path ``ray.tune.search.searcher``, for imports that name it: Searcher (and ConcurrencyLimiter)."""

from fluidsalus.tune.search._holders import ConcurrencyLimiter, Searcher

__all__ = ["ConcurrencyLimiter", "Searcher"]
