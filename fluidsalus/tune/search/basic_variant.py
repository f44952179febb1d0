"""Ray's module path ``ray.tune.search.basic_variant``, for imports that name it: BasicVariantGenerator."""

from fluidsalus.tune.search._holders import BasicVariantGenerator

__all__ = ["BasicVariantGenerator"]
