"""Trainables by name (``ray.tune.registry``): ``tune.register_trainable(name, f)`` then ``Tuner(name)``,
``tune.run(name)``, ``tune.Experiment(name, run=...)`` or ``run_experiments({"exp": {"run": name}})``.

Ray keeps its registry in its cluster so that every worker can look a name up; a fluidsalus trial never needs
to, since the driver resolves the name to the registered object when the Tuner, run or Experiment is built and
ships that object to the devices. The registry is therefore a plain dict of this process. Ray's built-in
RLlib names (``"PPO"``, ...) are not registered: RLlib is not provided.
"""

from __future__ import annotations

import threading
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.tune._trainable import adopt_ray_trainable

__all__ = ["get_trainable_cls", "register_trainable", "registered_names", "resolve_trainable"]

_TRAINABLES: dict[str, Any] = {}
_LOCK = threading.Lock()


def register_trainable(name: str, trainable: Any, warn: bool = True) -> None:
    """Register a trainable under a name (``ray.tune.register_trainable``).

    Args:
        name: The name. Registering a name again replaces the earlier trainable, as in Ray.
        trainable: A function ``f(config)``, a :class:`~fluidsalus.tune.Trainable` subclass, or either one
            wrapped by ``with_parameters`` / ``with_resources``.
        warn: Accepted for Ray's signature (Ray's backwards-compatibility heuristics it switches have no
            counterpart here).

    Raises:
        ConfigError: If ``name`` is not a non-empty str, or ``trainable`` cannot be run (the message says why).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"register_trainable: name must be a non-empty str (got {name!r})")
    # (Ray Tune's own MyTrainableClass, and Ray's with_parameters/with_resources, become fluidsalus's, with a warning)
    trainable = adopt_ray_trainable(trainable, "register_trainable")
    with _LOCK:
        _TRAINABLES[name] = trainable


def registered_names() -> list[str]:
    """The names registered so far, sorted."""
    with _LOCK:
        return sorted(_TRAINABLES)


def get_trainable_cls(trainable_name: str) -> Any:
    """The trainable registered under ``trainable_name`` (``ray.tune.registry.get_trainable_cls``).

    Raises:
        ConfigError: (a ``TuneError``, as Ray's) If nothing is registered under that name; the message lists
            the registered names.
    """
    with _LOCK:
        found = _TRAINABLES.get(trainable_name)
    if found is None:
        raise ConfigError(
            f"Unknown trainable: {trainable_name!r}. Registered: {registered_names()}. Register it first with "
            "tune.register_trainable(name, trainable), or pass the function or Trainable class itself (RLlib's "
            "algorithms are not provided by fluidsalus)"
        )
    return found


def resolve_trainable(value: Any) -> Any:
    """``value`` itself, or the trainable registered under it when it is a str."""
    return get_trainable_cls(value) if isinstance(value, str) else value
