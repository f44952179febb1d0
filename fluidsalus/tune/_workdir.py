"""Each trial works in its own folder, as under Ray Tune (``RAY_CHDIR_TO_TRIAL_DIR``).

Ray Tune runs every trial in a process of its own and, unless ``RAY_CHDIR_TO_TRIAL_DIR=0``, changes that
process's working directory to a folder of the trial's, so that a relative path a trainable writes
(``torch.save(model, "model.pt")``) is that trial's file and no other's. A fluidsalus device runs several trials
as threads of one process, and a process has one working directory. On Linux a thread can have its own:
``unshare(CLONE_FS)`` gives the calling thread a private copy of the filesystem context it shared with the rest
of the process (working directory, root, umask), and the threads it starts afterwards share that copy. So a
trial's thread, and the threads the trial starts, work in the trial's folder while the neighbours work in
theirs, and the process's other threads keep the directory the device started in. A trial that calls
``os.chdir`` moves only itself.

Where a thread cannot have a directory of its own (not Linux, or a sandbox whose seccomp profile refuses
``unshare``), the trials keep the device's working directory, as under Ray with ``RAY_CHDIR_TO_TRIAL_DIR=0``,
and the device process warns once.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping

from fluidsalus.errors import ConfigError

#: Ray's switch: ``0`` leaves the working directory alone, ``1`` (the default) changes into the trial's folder.
CHDIR_ENV = "RAY_CHDIR_TO_TRIAL_DIR"
#: The directory trials started in, which Ray keeps in the environment (deprecated in Ray, still set).
ORIGINAL_DIR_ENV = "TUNE_ORIG_WORKING_DIR"
#: ``CLONE_FS`` from ``<sched.h>``: unshare the working directory, root and umask.
CLONE_FS = 0x00000200

_lock = threading.Lock()
_unsupported: str | None = None  # why threads of this process cannot have their own directory, once known
_warned = False


def chdir_to_trial_dir(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether trials change into their folders: Ray's ``RAY_CHDIR_TO_TRIAL_DIR`` (default ``1``).

    Raises:
        ConfigError: The variable is set to something other than an integer, naming it and its values.
    """
    value = environ.get(CHDIR_ENV, "1")
    try:
        return bool(int(value))
    except ValueError:
        raise ConfigError(f"{CHDIR_ENV} must be 0 (trials keep the working directory) or 1 (each trial works in "
                          f"its folder, the default; any integer but 0 reads as 1, as in Ray); got {value!r}") from None


def chdir_argument_error(owner: str) -> ConfigError:
    """The error for Ray's deprecated ``chdir_to_trial_dir`` argument (of ``TuneConfig`` or ``tune.run``), which Ray
    2.60 refuses too: the environment variable :data:`CHDIR_ENV` took its place."""
    return ConfigError(f"{owner}: chdir_to_trial_dir is deprecated (Ray refuses it too); set the {CHDIR_ENV} "
                       "environment variable instead (0 keeps the working directory; 1, the default, runs each trial "
                       "in its folder)")


def _unshare_fs() -> None:
    """``unshare(CLONE_FS)`` for the calling thread. Raises OSError where it is refused or missing."""
    unshare = getattr(os, "unshare", None)  # Python 3.12+ on Linux
    if unshare is not None:
        unshare(CLONE_FS)
        return
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, f"unshare(CLONE_FS) is Linux's; this is {sys.platform}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_FS) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def own_working_directory() -> str | None:
    """Give the calling thread a working directory of its own (the same directory, for now).

    Returns:
        None when it has one now; otherwise why it cannot (the same answer for every later call).
    """
    global _unsupported
    if _unsupported is not None:
        return _unsupported
    try:
        _unshare_fs()
    except (OSError, AttributeError) as e:
        with _lock:
            _unsupported = f"unshare(CLONE_FS) failed: {e}"
        return _unsupported
    return None


@contextlib.contextmanager
def trial_working_directory(path: str) -> Iterator[bool]:
    """Run the block in ``path`` (created if missing): the calling thread's working directory, and that of the
    threads it starts, and no other thread's; the thread's previous directory again afterwards.

    Where the thread cannot have a directory of its own, nothing changes, and the first call in the process warns.

    Args:
        path: The trial's folder (absolute).

    Yields:
        Whether the block runs in ``path``.
    """
    global _warned
    previous = os.getcwd()
    reason = own_working_directory()
    if reason is not None:
        with _lock:
            warn, _warned = not _warned, True
        if warn:
            warnings.warn(f"fluidsalus.tune: trials keep the working directory {previous} ({reason}): the trials "
                          "of a device share a process, whose threads cannot have directories of their own here. "
                          "Write into tune.get_context().get_trial_dir() instead of relative paths",
                          UserWarning, stacklevel=3)
        yield False
        return
    os.environ.setdefault(ORIGINAL_DIR_ENV, previous)
    os.makedirs(path, exist_ok=True)
    os.chdir(path)
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):  # the previous directory may be gone; the thread is ending anyway
            os.chdir(previous)
