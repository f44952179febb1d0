"""``ray.tune.logger.comet`` for a script whose imports were changed (``from fluidsalus.tune.logger.comet import
CometLoggerCallback``): Ray's own ``CometLoggerCallback``, from ``ray.air.integrations.comet``. fluidsalus does not
run it: a run given it raises a ConfigError naming it.
"""

from ray.air.integrations.comet import CometLoggerCallback

__all__ = ["CometLoggerCallback"]
