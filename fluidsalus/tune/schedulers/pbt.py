"""Ray's module path ``ray.tune.schedulers.pbt``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import PopulationBasedTraining

__all__ = ["PopulationBasedTraining"]
