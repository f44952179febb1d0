"""``MyTrainableClass`` (``ray.tune.utils.mock_trainable``): the toy class trainable of Ray's examples.

Its reward follows ``height * tanh(timestep / width)`` (``width`` and ``height`` from the config, 1 when
absent), reported as ``episode_reward_mean``. ``sleep`` seconds are slept per step. With ``mock_error`` set it
fails on purpose after its first step, once (or at every step after a restore too, with
``persistent_error``), to exercise failure handling.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from fluidsalus.tune._trainable import Trainable

__all__ = ["MOCK_ERROR_KEY", "MOCK_TRAINABLE_NAME", "MyTrainableClass", "register_mock_trainable"]

#: The name :func:`register_mock_trainable` registers the class under, as Ray's module names it.
MOCK_TRAINABLE_NAME = "mock_trainable"
#: Config key that makes the trainable fail on purpose.
MOCK_ERROR_KEY = "mock_error"
#: The checkpoint file.
_CHECKPOINT_FILE = "checkpoint"


class MyTrainableClass(Trainable):
    """A trainable whose learning curve is a sigmoid set by the dummy hyperparameters ``width`` and ``height``."""

    def setup(self, config: dict[str, Any]) -> None:
        self._sleep_s = float(config.get("sleep", 0))
        self._fail = bool(config.get(MOCK_ERROR_KEY, False))
        self._fail_always = bool(config.get("persistent_error", False))
        self.timestep = 0
        self.restored = False

    def step(self) -> dict[str, Any]:
        if self._fail and self.timestep > 0 and (self._fail_always or not self.restored):
            raise RuntimeError(f"Failing on purpose at timestep {self.timestep}")
        if self._sleep_s > 0:
            time.sleep(self._sleep_s)
        self.timestep += 1
        value = math.tanh(self.timestep / self.config.get("width", 1)) * self.config.get("height", 1)
        return {"episode_reward_mean": value}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, _CHECKPOINT_FILE), "w") as f:
            json.dump({"timestep": self.timestep}, f)

    def load_checkpoint(self, checkpoint: Any) -> None:
        with open(os.path.join(checkpoint, _CHECKPOINT_FILE)) as f:
            self.timestep = json.load(f)["timestep"]
        self.restored = True


def register_mock_trainable() -> None:
    """Register :class:`MyTrainableClass` as :data:`MOCK_TRAINABLE_NAME` (``tune.register_trainable``), as Ray's
    module does, so a script may name it ``"mock_trainable"`` in ``Tuner`` or ``tune.run``."""
    from fluidsalus.tune.registry import register_trainable

    register_trainable(MOCK_TRAINABLE_NAME, MyTrainableClass)
