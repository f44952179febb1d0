"""``ray.tune.logger.wandb`` for a script whose imports were changed (``from fluidsalus.tune.logger.wandb import
WandbLoggerCallback``): Ray's own ``WandbLoggerCallback``, from ``ray.air.integrations.wandb``. It runs here as it
is (docs/compatibility.md, "W&B").
"""

from ray.air.integrations.wandb import WandbLoggerCallback

__all__ = ["WandbLoggerCallback"]
