"""Ray Tune's own session functions inside a device process: ``ray.tune.report`` reaches the fluidsalus trial.

A script moved to fluidsalus changes its imports (``from fluidsalus import tune``), but a helper module of the
user's may still call Ray's ``ray.tune.report``, ``ray.tune.get_checkpoint`` or ``ray.tune.get_context``. Ray's
functions look up one process-wide session (``ray.train._internal.session.get_session()``), and without it
they warn and do nothing: the trial would end with no result at all. In a device process no Ray Tune session
ever exists, so the device actor installs a :class:`RaySessionBridge` in its place. The bridge forwards each
call to the fluidsalus trial that runs in the calling thread (lanes run several trials as threads of one
process), warns once per function that the import should change (sent to the driver, which gives it once per
run: :func:`fluidsalus.session.warn_user`), and is falsy in any other thread, where Ray's own "meant to only be
called inside a function that is executed by a Tuner" warning stays.

The bridge is installed when the trainable's code imports Ray's session module: at once if unpickling the
trainable imported it, else by a finder that waits for the import (:func:`install_now_or_on_import`), so a trial
that imports ``ray.tune`` (or Ray's MLflow or W&B integration) only inside its function is covered too. A device
process never imports ``ray.tune`` for it.

``get_context().get_storage()`` answers Ray's own ``StorageContext`` for the trial's folders (:func:`trial_storage`).
Not forwarded: Ray Train's own API (``ray.train.report`` under Ray Train V2, the default of Ray 2.60, raises in
a Tune function under Ray too) and datasets (``get_dataset_shard``).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any

from fluidsalus import session as _session
from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError, SessionError

#: Ray's module that holds the process-wide session every ``ray.tune`` / ``ray.train`` V1 function reads.
RAY_SESSION_MODULE = "ray.train._internal.session"


#: Modules whose functions pass a call of Ray's session functions on to the bridge: the bridge's own and Ray's
#: wrappers (``ray.tune.report`` -> ``ray.train._internal.session``'s wrapper -> the bridge; ``get_context()``'s
#: getters). Above them is the code that made the call: the user's (which warns) or Ray's own (which does not).
_PASSING_ON = frozenset({__name__, RAY_SESSION_MODULE, "ray.tune.context", "ray.train.context",
                         "ray.tune.trainable.trainable_fn_utils"})


class RaySessionBridge:
    """Stands in for Ray's process-wide trial session; every call goes to the calling thread's fluidsalus trial.

    The attribute names are those Ray's session functions read (``report``, ``loaded_checkpoint``,
    ``trial_name``, ...).
    """

    def __bool__(self) -> bool:
        """True only in a thread that runs a fluidsalus trial (elsewhere Ray warns, as it does without Tune)."""
        return _session.current_session() is not None

    def _trial(self, ray_name: str, ours: str) -> _session.TrialSession:
        """The calling thread's trial; the first call of each Ray function from the user's code warns, at the user's
        line (the first frame above the bridge and Ray's functions that pass the call on to it,
        :data:`_PASSING_ON`). A call from Ray's own code does not warn: the user has no import to change there
        (``ray.air.integrations.mlflow.setup_mlflow`` calls ``ray.tune.get_context()``; Ray's ``setup_wandb`` reads
        the session's ``trial_id`` itself, one frame nearer the bridge, and its read was taken for the user's: a
        warning named fluidsalus's own trial entry as the line to change)."""
        frame, level = sys._getframe(1), 2  # (level: the stacklevel a warning given here would name frame with)
        while frame is not None and frame.f_globals.get("__name__") in _PASSING_ON:
            frame, level = frame.f_back, level + 1
        caller = (frame.f_globals.get("__name__") or "") if frame is not None else "ray"
        if not (caller == "ray" or caller.startswith("ray.")):  # Sent to the driver, which gives it once per run
            _session.warn_user(f"{ray_name} was called inside a fluidsalus trial: it is forwarded to {ours}. "
                               "Change the import to `from fluidsalus import tune` (an import left unchanged?).",
                               stacklevel=level)
        current = _session.current_session()
        if current is None:  # Ray's wrapper checked truthiness in this thread a moment ago
            raise SessionError(f"{ray_name} called outside a fluidsalus trial")
        return current

    def report(self, metrics: dict[str, Any], checkpoint: Any = None) -> None:
        """``ray.tune.report(metrics, checkpoint=...)``: Ray's Checkpoint becomes a fluidsalus one (same folder)."""
        trial = self._trial("ray.tune.report", "fluidsalus.tune.report")
        trial.report(metrics, None if checkpoint is None else _as_fluidsalus_checkpoint(checkpoint))

    @property
    def loaded_checkpoint(self) -> Any:
        """``ray.tune.get_checkpoint()``: the trial's checkpoint as Ray's own ``Checkpoint`` class."""
        checkpoint = self._trial("ray.tune.get_checkpoint", "fluidsalus.tune.get_checkpoint").resume_checkpoint()
        if checkpoint is None:
            return None
        from ray.tune import Checkpoint as RayCheckpoint  # imported already: the bridge exists because Ray's is

        return RayCheckpoint.from_directory(checkpoint.path)

    def _context(self, ray_name: str) -> _session.TrialContext:
        return self._trial(f"ray.tune.get_context().{ray_name}", "fluidsalus.tune.get_context()").context

    @property
    def trial_name(self) -> str:
        return self._context("get_trial_name").trial_name

    @property
    def trial_id(self) -> str:
        return self._context("get_trial_id").trial_id

    @property
    def run_id(self) -> str:
        return self._context("get_run_id").trial_id

    @property
    def experiment_name(self) -> str:
        return self._context("get_experiment_name").experiment_name

    @property
    def trial_dir(self) -> str:
        return self._context("get_trial_dir").trial_dir

    @property
    def trial_resources(self) -> _session.TrialResources:
        return self._context("get_trial_resources").get_trial_resources()

    @property
    def storage(self) -> Any:
        """``ray.tune.get_context().get_storage()``: Ray's ``StorageContext`` of the trial (:func:`_storage_class`);
        it was an ``AttributeError``."""
        return self._context("get_storage").get_storage()

    @property
    def metadata(self) -> dict[str, Any]:
        return {}

    #: A Ray Tune function's session has no Ray Train ranks (``ray.train.report`` then goes to ``ray.tune.report``).
    world_rank = None
    local_rank = None
    node_rank = None
    world_size = None
    local_world_size = None


def trial_storage(trial_dir: str) -> Any:
    """Ray's ``StorageContext`` of the trial whose folder is ``trial_dir`` (:func:`_storage_class`), for
    ``get_context().get_storage()``: Ray's own class, so a trial's code that writes through its
    ``storage_filesystem`` to its ``trial_fs_path`` (Ray's recipe for a trial's artifacts) runs as under Ray."""
    experiment_dir = os.path.dirname(trial_dir)  # (the executor puts each trial's folder in the experiment's)
    return _storage_class()(storage_path=os.path.dirname(experiment_dir),
                            experiment_dir_name=os.path.basename(experiment_dir),
                            trial_dir_name=os.path.basename(trial_dir))


@functools.cache
def _storage_class() -> type:
    """Ray's ``StorageContext`` whose paths are the fluidsalus trial's folders, on the local filesystem.

    Ray's answers ``storage_filesystem``, ``storage_fs_path``, ``experiment_fs_path``, ``trial_fs_path``,
    ``experiment_dir_name`` and ``trial_dir_name`` from the experiment's and trial's folders as they are. Its local
    paths, ``trial_working_directory`` (the trial's working directory) and the ``*_driver_staging_path`` ones
    (``get_trial_dir()`` is the trial's), are folders under Ray's session folder that Ray copies to storage; a
    fluidsalus trial works in its folder in the experiment, so they are those folders here. Made on first use: a
    device process imports Ray's storage module only when a trial asks for it (Ray's session module imports it).
    """
    from ray.train._internal.storage import StorageContext

    class TrialStorage(StorageContext):
        @property
        def trial_working_directory(self) -> str:
            return str(self.trial_fs_path)

        @property
        def trial_driver_staging_path(self) -> str:
            return str(self.trial_fs_path)

        @property
        def experiment_driver_staging_path(self) -> str:
            return str(self.experiment_fs_path)

    return TrialStorage


def _as_fluidsalus_checkpoint(checkpoint: Any) -> Checkpoint:
    """Ray's ``Checkpoint`` (a folder on a filesystem) as a fluidsalus one; only local folders can be copied."""
    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    path = getattr(checkpoint, "path", None)
    filesystem = getattr(checkpoint, "filesystem", None)
    kind = getattr(filesystem, "type_name", "local")
    if not isinstance(path, str) or kind != "local":
        raise ConfigError(f"ray.tune.report(checkpoint=...): expected a Checkpoint of a local folder, got "
                          f"{type(checkpoint).__name__} (path={path!r}, filesystem={kind!r})")
    return Checkpoint(path)


def install_if_ray_is_imported(bridge: RaySessionBridge, module_name: str = RAY_SESSION_MODULE) -> bool:
    """Put ``bridge`` in place of Ray's process-wide session, if the process imported Ray's session module.

    Args:
        bridge: The bridge (one per device process).
        module_name: The module that holds the session (Ray's; another only in tests).

    Returns:
        True when the bridge is in place (now or before); False when Ray's session module is not imported, or
        a real Ray session already runs in this process (then nothing changes).
    """
    module = sys.modules.get(module_name)
    if module is None:
        return False
    current = getattr(module, "_session", None)
    if current is bridge:
        return True
    if current is not None:
        return False
    module._session = bridge
    return True


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Puts the bridge in place right after Ray's session module is imported, by whatever imports it and when.

    It finds nothing itself: it asks the finders after it for the module's spec and wraps the loader's
    ``exec_module``, so the module runs as always and the bridge is set in it before anyone can read it.
    """

    def __init__(self, bridge: RaySessionBridge, module_name: str) -> None:
        self.bridge, self.module_name = bridge, module_name

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != self.module_name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = getattr(spec.loader, "exec_module", None)
        if exec_module is None:
            return spec
        bridge, module_name = self.bridge, self.module_name

        def exec_then_install(module: types.ModuleType) -> None:
            exec_module(module)
            install_if_ray_is_imported(bridge, module_name)

        spec.loader.exec_module = exec_then_install  # type: ignore[union-attr, method-assign]
        return spec


def install_now_or_on_import(bridge: RaySessionBridge, module_name: str = RAY_SESSION_MODULE) -> bool:
    """Put ``bridge`` in place of Ray's session now if its module is imported, else as soon as it is.

    The device process never imports Ray's session module for this (importing ``ray.tune`` takes a second): a
    finder at the front of ``sys.meta_path`` waits for the trainable's code to import it, at its unpickling or
    inside a trial, and installs the bridge then. A real Ray session in the process is left alone.

    Args:
        bridge: The bridge (one per device process).
        module_name: The module that holds the session (Ray's; another only in tests).

    Returns:
        True when the bridge is in place now; False when it waits for the import (or a real session runs).
    """
    if module_name in sys.modules:
        return install_if_ray_is_imported(bridge, module_name)
    if not any(isinstance(f, _InstallOnImport) and f.module_name == module_name for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport(bridge, module_name))
    return False
