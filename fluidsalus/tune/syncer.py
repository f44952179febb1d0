"""Ray's module path ``ray.tune.syncer``, for imports that name it: ``SyncConfig`` (accepted and ignored: the
store and checkpoints are written under ``storage_path`` directly, so there is nothing to sync)."""

from fluidsalus.tune._config import SyncConfig

__all__ = ["SyncConfig"]
