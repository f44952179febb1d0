"""Ray's module path ``ray.tune.execution.placement_groups``: ``PlacementGroupFactory`` (a resource request,
read as a hint to the planner; see ``fluidsalus.tune.with_resources``)."""

from fluidsalus.tune._trainable import PlacementGroupFactory

__all__ = ["PlacementGroupFactory"]
