"""Ray's module path ``ray.tune.schedulers.pbt``, for imports that name it."""

from fluidsalus.tune.schedulers._holders import PopulationBasedTraining, PopulationBasedTrainingReplay

__all__ = ["PopulationBasedTraining", "PopulationBasedTrainingReplay"]
