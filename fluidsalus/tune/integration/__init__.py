"""Ray Tune's training-library callbacks (``ray.tune.integration``).

- :mod:`fluidsalus.tune.integration.xgboost`: ``TuneReportCheckpointCallback`` for ``xgboost.train`` and
  ``xgboost.cv``;
- :mod:`fluidsalus.tune.integration.lightgbm`: ``TuneReportCheckpointCallback`` for ``lightgbm.train`` and
  ``lightgbm.cv``.

Each reports the library's evaluation results after every boosting round with :func:`fluidsalus.tune.report`, and
saves the model as a checkpoint every ``frequency`` rounds and at the end, as Ray's do. Importing one needs its
library (``pip install xgboost`` or ``lightgbm``), as in Ray. Ray's integrations for Keras, MLflow, Weights &
Biases, Comet and PyTorch Lightning are not provided.
"""
