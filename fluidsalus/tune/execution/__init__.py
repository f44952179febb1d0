"""Ray's package path ``ray.tune.execution``, for imports that name ``execution.placement_groups``."""
