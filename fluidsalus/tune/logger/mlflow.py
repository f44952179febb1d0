"""``ray.tune.logger.mlflow`` for a script whose imports were changed (``from fluidsalus.tune.logger.mlflow import
MLflowLoggerCallback``): Ray's own ``MLflowLoggerCallback``, from ``ray.air.integrations.mlflow``. It runs here as
it is (docs/compatibility.md, "MLflow").
"""

from ray.air.integrations.mlflow import MLflowLoggerCallback

__all__ = ["MLflowLoggerCallback"]
