"""TrialGroups and the driver loop that runs them on device actors."""

from fluidsalus.trialgroup.trial import Trial, TrialGroup

__all__ = ["Trial", "TrialGroup"]
