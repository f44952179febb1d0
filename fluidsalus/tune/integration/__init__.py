"""Ray Tune's training-library callbacks (``ray.tune.integration``).

- :mod:`fluidsalus.tune.integration.xgboost`: ``TuneReportCheckpointCallback`` for ``xgboost.train`` and
  ``xgboost.cv``;
- :mod:`fluidsalus.tune.integration.lightgbm`: ``TuneReportCheckpointCallback`` for ``lightgbm.train`` and
  ``lightgbm.cv``;
- :mod:`fluidsalus.tune.integration.pytorch_lightning`: ``TuneReportCheckpointCallback`` for a Lightning
  ``Trainer``.

The boosting callbacks report the library's evaluation results after every boosting round with
:func:`fluidsalus.tune.report`, and save the model as a checkpoint every ``frequency`` rounds and at the end; the
Lightning callback reports the trainer's logged metrics with a checkpoint of the trainer at the end of each
validation; all as Ray's do. Importing one needs its library (``pip install xgboost``, ``lightgbm`` or
``lightning``), as in Ray. Ray's integrations for Keras, MLflow, Weights & Biases and Comet are not provided.
"""
