"""Ray's module path ``ray.tune.schedulers.resource_changing_scheduler``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import (
    DistributeResources,
    DistributeResourcesToTopJob,
    ResourceChangingScheduler,
)

__all__ = ["DistributeResources", "DistributeResourcesToTopJob", "ResourceChangingScheduler"]
