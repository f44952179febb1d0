"""``pbt_function`` (``ray.tune.examples.pbt_function``): the toy learning-rate problem of Ray's PBT examples.

Ray's ``pb2_example.py`` imports it from there, so with its imports changed it finds this one. It is written for
fluidsalus with the same contract: it reads ``config["lr"]`` and ``config["checkpoint_interval"]`` (default 1),
reports ``mean_accuracy``, ``cur_lr`` and ``optimal_lr`` at each step, checkpoints every
``checkpoint_interval`` steps (and resumes from its checkpoint), and reports ``done`` once the accuracy passes
:data:`TARGET_ACCURACY`.

The problem: the learning rate that makes the most progress depends on the accuracy reached, rising from
:data:`LR_LOW` to :data:`LR_HIGH` while the accuracy climbs to :data:`PEAK_ACCURACY`, then falling back. A learning
rate within a factor :data:`TOLERANCE` of the best one gains up to :data:`MAX_GAIN` per step, the more the closer
it is; a larger one loses accuracy. No constant learning rate reaches the target quickly: a schedule (what PBT and
PB2 find) does.
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
from typing import Any

from fluidsalus import tune

__all__ = ["optimal_lr", "pbt_function"]

#: Accuracy at which the best learning rate peaks, and the accuracy that ends the trial.
PEAK_ACCURACY = 100.0
TARGET_ACCURACY = 2 * PEAK_ACCURACY
#: Range of the best learning rate.
LR_LOW, LR_HIGH = 0.001, 0.01
#: Learning rates within this factor of the best one make progress.
TOLERANCE = 3.0
#: Largest expected accuracy gain of one step (at the best learning rate).
MAX_GAIN = 1.0
#: Standard deviation of the noise added to each step's accuracy.
NOISE = 1.0
#: The checkpoint file.
_CHECKPOINT_FILE = "checkpoint.json"


def optimal_lr(accuracy: float) -> float:
    """The learning rate that makes the most progress at ``accuracy`` (a triangle between the bounds)."""
    rise = min(accuracy, TARGET_ACCURACY - accuracy) / PEAK_ACCURACY
    return LR_LOW + (LR_HIGH - LR_LOW) * min(1.0, max(0.0, rise))


def _step(lr: float, accuracy: float, rng: random.Random) -> float:
    """The accuracy after one step at ``lr``."""
    best = optimal_lr(accuracy)
    distance = abs(math.log(lr / best)) / math.log(TOLERANCE)  # 0 at the best lr, 1 at the tolerance
    if distance < 1.0:
        accuracy += MAX_GAIN * (1.0 - distance) * 2.0 * rng.random()
    elif lr > best:
        accuracy -= (distance - 1.0) * rng.random()
    return max(0.0, accuracy + rng.gauss(0.0, NOISE))


def pbt_function(config: dict[str, Any]) -> None:
    """Train the toy problem with ``config["lr"]`` until the accuracy passes :data:`TARGET_ACCURACY`."""
    lr = float(config["lr"])
    interval = int(config.get("checkpoint_interval", 1))
    rng = random.Random()
    accuracy, step = 0.0, 1
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, _CHECKPOINT_FILE)) as f:
            state = json.load(f)
        accuracy, step = float(state["acc"]), int(state["step"]) + 1
    while True:
        accuracy = _step(lr, accuracy, rng)
        metrics = {"mean_accuracy": accuracy, "cur_lr": lr, "optimal_lr": optimal_lr(accuracy),
                   "done": accuracy > TARGET_ACCURACY}
        if step % interval == 0:
            with tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, _CHECKPOINT_FILE), "w") as f:
                    json.dump({"acc": accuracy, "step": step}, f)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)
        if metrics["done"]:
            return
        step += 1
