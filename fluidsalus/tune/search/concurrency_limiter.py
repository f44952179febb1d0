"""Ray's module path ``ray.tune.search.concurrency_limiter``, for imports that name it: ConcurrencyLimiter."""

from fluidsalus.tune.search._holders import ConcurrencyLimiter

__all__ = ["ConcurrencyLimiter"]
