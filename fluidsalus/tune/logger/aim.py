"""``ray.tune.logger.aim`` for a script whose imports were changed (``from fluidsalus.tune.logger.aim import
AimLoggerCallback``): Ray's own ``AimLoggerCallback``, from ``ray.tune.logger.aim``. fluidsalus does not run it: a
run given it raises a ConfigError naming it.
"""

from ray.tune.logger.aim import AimLoggerCallback

__all__ = ["AimLoggerCallback"]
