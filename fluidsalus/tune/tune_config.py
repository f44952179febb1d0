"""Ray's module path ``ray.tune.tune_config``: ``TuneConfig`` and ``ResumeConfig``."""

from fluidsalus.tune._config import ResumeConfig, TuneConfig

__all__ = ["ResumeConfig", "TuneConfig"]
