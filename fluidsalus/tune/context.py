"""Ray's module path ``ray.tune.context``, for imports that name it: ``TuneContext`` and ``get_context``."""

from fluidsalus.tune import TuneContext, get_context

__all__ = ["TuneContext", "get_context"]
