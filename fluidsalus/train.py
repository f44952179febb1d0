"""The ``ray.train`` names a Ray Tune script uses: change ``from ray import train, tune`` to
``from fluidsalus import train, tune``.

Ray Tune scripts written for Ray 2.7 to 2.9 report from their function trainables with ``train.report(...)``
and configure runs with ``train.RunConfig``, ``train.CheckpointConfig``, ``train.FailureConfig`` and
``train.SyncConfig``. Ray 2.60
runs them only with its old Ray Train (``RAY_TRAIN_V2_ENABLED=0``, where ``ray.train.report`` inside a Tune
function forwards to ``ray.tune.report`` with a deprecation warning); its default Ray Train V2 raises there.
This module gives those names their Ray 2.7-2.9 meaning on fluidsalus: each is the :mod:`fluidsalus.tune` object
of the same name, and :func:`report` (with Ray Train V1's signature) forwards to :func:`fluidsalus.tune.report`.

Ray Train itself (``TorchTrainer`` and the other trainers, ``ScalingConfig``, ``DataConfig``,
``get_dataset_shard``, ...) is not provided: asking for one of those names raises an ``AttributeError`` that
says so. A data-parallel trial uses :mod:`fluidsalus.distributed` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fluidsalus.checkpoint import Checkpoint as _EngineCheckpoint
from fluidsalus.tune import (
    Checkpoint,
    CheckpointConfig,
    FailureConfig,
    Result,
    RunConfig,
    SyncConfig,
    get_checkpoint,
    get_context,
)
from fluidsalus.tune import TuneContext as TrainContext
from fluidsalus.tune import report as _tune_report

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "Result",
    "RunConfig",
    "SyncConfig",
    "TrainContext",
    "get_checkpoint",
    "get_context",
    "report",
]


def report(metrics: Mapping[str, Any], *, checkpoint: _EngineCheckpoint | None = None,
           checkpoint_dir_name: str | None = None) -> None:
    """Report one iteration's metrics, and optionally a checkpoint (``ray.train.report`` in a Tune function).

    Args:
        metrics: The metrics of this iteration.
        checkpoint: A :class:`Checkpoint` of the trial's state after this iteration.
        checkpoint_dir_name: Ignored, as Ray ignores it in a Tune function: fluidsalus names a trial's
            checkpoint folders ``checkpoint_<iteration>``.
    """
    _tune_report(metrics, checkpoint=checkpoint)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"fluidsalus.train has no {name!r}: it has the names a Ray Tune function trainable uses "
        f"({', '.join(__all__)}). "
        "Ray Train's trainers and their configs (TorchTrainer, ScalingConfig, DataConfig, get_dataset_shard, ...) "
        "are not provided; run the training function with fluidsalus.tune.Tuner, and use fluidsalus.distributed for "
        "a data-parallel trial"
    )
