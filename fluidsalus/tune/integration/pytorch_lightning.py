"""The PyTorch Lightning callbacks of Ray Tune (``ray.tune.integration.pytorch_lightning``).

Pass :class:`TuneReportCheckpointCallback` in ``callbacks`` of a ``lightning.pytorch.Trainer`` inside a trainable:
at the end of each validation (or the Lightning hooks named by ``on``) it reports the trainer's
``callback_metrics`` (what the module logged with ``self.log``) through ``fluidsalus.tune.report``, with the trainer
saved as a checkpoint by ``trainer.save_checkpoint``, so a scheduler can stop the trial between epochs and a
restarted trial can resume with ``Trainer.fit(..., ckpt_path=...)``. Lightning's sanity check is not reported.
It needs ``lightning`` (or the older ``pytorch_lightning`` package), as Ray's does.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from typing import Any

try:
    from lightning.pytorch import Callback, Trainer
except ModuleNotFoundError:  # the package's older name, as Ray falls back to it
    from pytorch_lightning import Callback, Trainer

from fluidsalus.errors import ConfigError
from fluidsalus.tune.integration import _report_callback as _base

__all__ = ["TuneCallback", "TuneReportCallback", "TuneReportCheckpointCallback"]

logger = logging.getLogger(__name__)

#: The Lightning hooks a callback may report on: every ``on_*`` method of Lightning's ``Callback``.
ALLOWED_HOOKS = frozenset(name for name, _ in inspect.getmembers(Callback, predicate=inspect.isfunction)
                          if name.startswith("on_"))
#: Hooks that would call themselves: saving the checkpoint runs Lightning's ``on_save_checkpoint``.
_RECURSIVE_HOOKS = frozenset({"on_save_checkpoint"})


def _hook(name: str) -> Any:
    """The method Lightning calls for the hook ``name``: it handles the event when ``name`` was chosen."""

    def hook(self: TuneCallback, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        if name in self._on:
            # by keyword, as Ray calls it, so that a subclass written for Ray (``_handle(self, trainer,
            # pl_module)``) works; with the module Lightning passed (Ray's keyword-only parameter gets None)
            self._handle(trainer=trainer, pl_module=args[0] if args else kwargs.get("pl_module"))

    hook.__name__ = name
    return hook


class TuneCallback(Callback):
    """Base of Tune's Lightning callbacks: runs :meth:`_handle` on the hooks named by ``on``.

    Args:
        on: A hook name less its ``on_`` (``"validation_end"``, ``"train_epoch_end"``, ...), or a list of them.

    Raises:
        ConfigError: A name that is not one of Lightning's callback hooks, listing them.
    """

    def __init__(self, on: str | list[str] = "validation_end") -> None:
        names = [on] if isinstance(on, str) else list(on) if isinstance(on, (list, tuple)) else None
        if names is None or not all(isinstance(name, str) for name in names):
            raise ConfigError(f"{type(self).__name__}: on must be a hook name or a list of them, got {on!r}")
        allowed = sorted(hook[len("on_"):] for hook in ALLOWED_HOOKS - _RECURSIVE_HOOKS)
        bad = [name for name in names if f"on_{name}" not in ALLOWED_HOOKS or f"on_{name}" in _RECURSIVE_HOOKS]
        if bad:
            raise ConfigError(f"{type(self).__name__}: on={bad} is not a Lightning hook it can report on; allowed "
                              f"(less their on_): {allowed}")
        self._on = frozenset(f"on_{name}" for name in names)

    def _handle(self, trainer: Trainer, pl_module: Any = None) -> None:
        """What the callback does at each hook named by ``on`` (Ray's signature).

        Args:
            trainer: The Lightning trainer.
            pl_module: The module being trained, where the hook gives it.
        """
        raise NotImplementedError


for _name in ALLOWED_HOOKS:
    setattr(TuneCallback, _name, _hook(_name))


class TuneReportCheckpointCallback(TuneCallback):
    """Reports the trainer's logged metrics, and a checkpoint of it, on each chosen hook (Ray's signature).

    Args:
        metrics: What to report: None reports every metric the module logged; a str or a list reports those; a
            dict ``{name to report: logged name}`` renames them. A metric not logged (yet) is left out with a
            warning; a hook with none of them reports nothing.
        filename: The checkpoint's file name in its folder (``trainer.save_checkpoint``'s format).
        save_checkpoints: False reports the metrics only.
        on: The hook(s) to report on, less their ``on_``.
    """

    def __init__(self, metrics: _base.Metrics = None, filename: str = "checkpoint", save_checkpoints: bool = True,
                 on: str | list[str] = "validation_end") -> None:
        super().__init__(on=on)
        owner = type(self).__name__
        self._metrics = _base.check_metrics(owner, metrics)
        _base.check_filename(owner, filename)
        self._filename = filename
        self._save_checkpoints = bool(save_checkpoints)
        self._warned: set[str] = set()

    def _report_dict(self, trainer: Trainer) -> dict[str, Any]:
        logged = trainer.callback_metrics
        if self._metrics is None:
            return {key: _number(value) for key, value in logged.items()}
        out: dict[str, Any] = {}
        for key, name in self._metrics.items():
            if name in logged:
                out[key] = _number(logged[name])
            elif name not in self._warned:
                self._warned.add(name)
                logger.warning("%s: metric %r is not in trainer.callback_metrics (logged: %s); it is left out",
                               type(self).__name__, name, sorted(logged))
        return out

    def _handle(self, trainer: Trainer, pl_module: Any = None) -> None:
        if trainer.sanity_checking:
            return
        metrics = self._report_dict(trainer)
        if metrics:
            _base.report(metrics, trainer.save_checkpoint if self._save_checkpoints else None, self._filename)


class TuneReportCallback(TuneReportCheckpointCallback):
    """Deprecated in Ray: a :class:`TuneReportCheckpointCallback` that saves no checkpoints (with a warning)."""

    def __init__(self, metrics: _base.Metrics = None, on: str | list[str] = "validation_end") -> None:
        warnings.warn("`fluidsalus.tune.integration.pytorch_lightning.TuneReportCallback` is deprecated, as in Ray. "
                      "Use `TuneReportCheckpointCallback` instead.", FutureWarning, stacklevel=2)
        super().__init__(metrics=metrics, save_checkpoints=False, on=on)


def _number(value: Any) -> Any:
    """A logged value as a Python number (Lightning keeps them as one-element tensors)."""
    return value.item() if hasattr(value, "item") else value
