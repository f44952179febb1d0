"""A checkpoint is a directory, as in Ray Tune (``ray.tune.Checkpoint``).

A trainable writes files into a directory of its own and passes ``Checkpoint.from_directory(dir)`` to
:func:`fluidsalus.report`. The engine copies the directory into the experiment folder
(``<experiment>/<trial_id>/checkpoint_<iteration>``) before the result is acknowledged, so the trainable may
delete or reuse its directory as soon as ``report`` returns. ``get_checkpoint()`` later hands back a
:class:`Checkpoint` that points at the persisted copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.store import TRIAL_RECORD_FILES

_METADATA_FILE = ".metadata.json"
#: Prefix of the folder a checkpoint is copied into before it is renamed into place.
STAGING_PREFIX = ".incoming_"
#: Put before the folder name of a copy of another trial's checkpoint, which a PBT exploit resumes from
#: (``persist_checkpoint``'s ``prefix``).
EXPLOIT_CHECKPOINT_PREFIX = "exploited_"
#: Names of the trial's persisted checkpoints in its folder (``checkpoint_<iteration>``, and an exploit's copy).
PERSISTED_NAME = re.compile(rf"(?:{EXPLOIT_CHECKPOINT_PREFIX})?checkpoint_\d{{6,}}")
#: A URI's ``scheme://`` (RFC 3986's scheme syntax), as Ray reads a checkpoint's path as a URI when it has one.
URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: The one URI scheme a checkpoint's path may have: a local file (``file:///abs/dir``, with no host or ``localhost``).
FILE_SCHEME, LOCAL_HOSTS = "file", ("", "localhost")


def _local_path(path: str) -> str:
    """``path`` as a local path: a ``file://`` URI's path (percent-escapes decoded, as Ray's ``Checkpoint`` resolves
    it; kept as given, every later use of the checkpoint failed with FileNotFoundError), any other path as given.

    Raises:
        ConfigError: ``path`` is a URI of another scheme (``s3://``, ``gs://``: fluidsalus has no remote storage),
            or a ``file://`` URI that names a host.
    """
    match = URI_SCHEME.match(path)
    if match is None:
        return path
    parts = urllib.parse.urlsplit(path)
    if match.group(1).lower() != FILE_SCHEME:
        raise ConfigError(f"Checkpoint: path {path!r} is a {match.group(1)!r} URI; a fluidsalus checkpoint is a "
                          "local or mounted directory: give its path (or a file:// URI)")
    if parts.netloc not in LOCAL_HOSTS:
        raise ConfigError(f"Checkpoint: path {path!r} names the host {parts.netloc!r}; a file:// URI must be local "
                          "(file:///absolute/dir)")
    return urllib.parse.unquote(parts.path)


class Checkpoint:
    """A directory of files that captures a trial's state (``ray.tune.Checkpoint``, which
    ``fluidsalus.tune.Checkpoint`` is: every checkpoint fluidsalus hands out, in a trial or in a result, is this
    class).

    Args:
        path: The directory. It must exist when the checkpoint is reported (as in Ray, not before).
        filesystem: Ray's pyarrow filesystem of ``path``; must be None (a fluidsalus checkpoint is a local or
            mounted directory).

    Raises:
        ConfigError: A ``filesystem`` was given, or ``path`` is a URI other than a local ``file://`` one (whose path
            is taken, as Ray resolves it).
    """

    def __init__(self, path: str | os.PathLike[str], filesystem: Any = None) -> None:
        if filesystem is not None:
            raise ConfigError("Checkpoint: filesystem is not supported by fluidsalus; use a local or mounted path")
        self.path = _local_path(os.fspath(path))

    @property
    def filesystem(self) -> Any:
        """The checkpoint's filesystem, as Ray's attribute: always pyarrow's local one (``pyarrow.fs``, which
        Ray installs), since a fluidsalus checkpoint is a local or mounted directory. Ray's W&B logger reads
        it before it uploads a checkpoint, and Ray's idiom ``pyarrow.fs.copy_files(checkpoint.path, ...,
        source_filesystem=checkpoint.filesystem)`` copies one out.

        Raises:
            AttributeError: pyarrow is not installed (plain ``ray`` does not pull it in; ``ray[tune]`` does), so
                that ``hasattr(checkpoint, "filesystem")`` is False there, as for an object without it.
        """
        try:
            from pyarrow import fs
        except ImportError:
            raise AttributeError("Checkpoint.filesystem is pyarrow's LocalFileSystem, and pyarrow is not installed "
                                 "(pip install pyarrow, or ray[tune])") from None
        return fs.LocalFileSystem()

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """Create a checkpoint from a directory, as Ray's: the directory need only exist when the checkpoint is
        reported (a trainable may make it after this call).

        Args:
            path: The directory holding the checkpoint's files.

        Returns:
            A checkpoint that refers to ``path`` (nothing is copied yet).
        """
        return cls(path)

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the checkpoint's files into ``path`` (``~`` expanded, as Ray does; a new temporary directory if
        None). A symbolic link whose target is missing is left out, as Ray's copy leaves it.

        Returns:
            The directory the files were copied into.
        """
        target = (os.path.normpath(os.path.expanduser(os.fspath(path))) if path is not None
                  else tempfile.mkdtemp(prefix="fluidsalus_ckpt_"))
        os.makedirs(target, exist_ok=True)
        shutil.copytree(self.path, target, dirs_exist_ok=True, ignore_dangling_symlinks=True)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Give a local directory with the checkpoint's files, for reading.

        The checkpoint already is a local directory, so this yields it without copying. Do not write to it.
        """
        yield self.path

    def get_metadata(self) -> dict[str, Any]:
        """Return the metadata dict stored with the checkpoint (empty if none)."""
        file = Path(self.path) / _METADATA_FILE
        if not file.exists():
            return {}
        return json.loads(file.read_text())

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        """Replace the checkpoint's metadata with ``metadata`` (must be JSON-serialisable)."""
        (Path(self.path) / _METADATA_FILE).write_text(json.dumps(metadata))

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the checkpoint's metadata."""
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    def __repr__(self) -> str:
        return f"Checkpoint(filesystem=local, path={self.path})"  # Ray's form (a local folder)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and os.path.abspath(self.path) == os.path.abspath(other.path)

    def __hash__(self) -> int:
        return hash(os.path.abspath(self.path))


#: The modes a plain ``open()`` and ``os.makedirs()`` ask for, before the umask: ``tempfile`` makes its files 0600
#: and folders 0700, so a stored checkpoint and ``tuner.pkl`` were unreadable to anyone else on shared storage.
PLAIN_FILE_MODE, PLAIN_DIR_MODE = 0o666, 0o777
#: Where Linux shows a process's umask without changing it (``Umask:`` line, since Linux 4.7).
PROC_STATUS = "/proc/self/status"


def _umask() -> int:
    """The process's umask: read from :data:`PROC_STATUS` where it can be, else by setting and restoring it."""
    with contextlib.suppress(OSError, ValueError):
        with open(PROC_STATUS) as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _as_plainly_made(path: str, mode: int) -> None:
    """Give ``path`` the permissions it would have had if made with a plain ``open()`` / ``os.makedirs()`` (``mode``
    less the umask), as Ray's copies get, instead of ``tempfile``'s private ones or a private source's."""
    os.chmod(path, mode & ~_umask())


def write_atomically(path: str, data: bytes | str) -> None:
    """Write a whole file under a temporary name in its folder, then rename it into place, so a crash leaves
    either the old file or the new one, never half of one.

    Args:
        path: The file.
        data: Its new contents (text is written as UTF-8).
    """
    folder, name = os.path.split(path)
    handle, staging = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder or ".")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        _as_plainly_made(staging, PLAIN_FILE_MODE)
        os.replace(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)


def _engine_folders_of(trial_dir: str) -> Callable[[str, list[str]], set[str]]:
    """A ``copytree`` ignore function that leaves out the trial's persisted checkpoints, staging folders and
    record files (``store.TRIAL_RECORD_FILES``: ``result.json``, ...) when the copied directory is, or holds, the
    trial's folder.

    A trial works in its own folder (docs/compatibility.md, "The working directory"), so
    ``Checkpoint.from_directory(".")`` names it: without this, each checkpoint held every earlier one (its size
    doubled at each report), the folder being written into and the trial's growing result files, which Ray's
    working directory (a staging folder) does not hold.
    """
    trial_dir = os.path.realpath(trial_dir)

    def ignore(folder: str, names: list[str]) -> set[str]:
        if os.path.realpath(folder) != trial_dir:
            return set()
        return {name for name in names if PERSISTED_NAME.fullmatch(name) or name.startswith(STAGING_PREFIX)
                or name in TRIAL_RECORD_FILES}

    return ignore


def persist_checkpoint(checkpoint: Checkpoint, trial_dir: str, iteration: int, prefix: str = "") -> str:
    """Copy a reported checkpoint into the trial's folder of the experiment.

    The copy is written under a temporary name and renamed into place, so a crash never leaves a
    half-copied ``checkpoint_<iteration>`` directory that a resume could mistake for a whole one.

    Args:
        checkpoint: The checkpoint the trainable reported.
        trial_dir: ``<experiment>/<trial_id>``.
        iteration: The ``training_iteration`` of the result the checkpoint belongs to.
        prefix: Put before the folder's name (``<prefix>checkpoint_<iteration>``): a copy of another trial's
            checkpoint (a PBT exploit) then never replaces the trial's own of that iteration.

    Returns:
        The path of the persisted copy.
    """
    final = os.path.join(trial_dir, f"{prefix}checkpoint_{iteration:06d}")
    source = os.path.abspath(checkpoint.path)
    if source == os.path.abspath(final):
        return final
    name = os.path.basename(source)
    if os.path.dirname(source) == os.path.abspath(trial_dir) and PERSISTED_NAME.fullmatch(name):
        # The trainable saved into a folder of the trial's own folder (its working directory) named as stored
        # checkpoints are (Ray's names look the same, checkpoint_<index>, and a trainable may copy them): an
        # earlier iteration's stored checkpoint then holds this iteration's files, which nothing here can undo.
        stored = int(name.rsplit("_", 1)[1])
        what = (f"fluidsalus stored iteration {stored}'s checkpoint there, and files written into it change that "
                "checkpoint"
                if not name.startswith(EXPLOIT_CHECKPOINT_PREFIX) and 1 <= stored < iteration
                else "a name of fluidsalus's stored checkpoints (checkpoint_<iteration>)")
        warnings.warn(f"the checkpoint reported at iteration {iteration} is the folder {name} of the trial's folder "
                      f"(its working directory): {what}; save checkpoints into a folder of another name, or a "
                      "tempfile.TemporaryDirectory()", UserWarning, stacklevel=3)
    os.makedirs(trial_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=trial_dir)
    try:  # (a link to a missing file is left out, as Ray's copy does: it failed every report of the trial)
        shutil.copytree(checkpoint.path, staging, dirs_exist_ok=True, ignore=_engine_folders_of(trial_dir),
                        ignore_dangling_symlinks=True)
        _as_plainly_made(staging, PLAIN_DIR_MODE)  # (copytree gave it the source's mode: a TemporaryDirectory's 0700)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # (a failed copy left a half-filled staging folder per attempt)
        raise
    if os.path.exists(final):
        with contextlib.suppress(FileNotFoundError):  # (gone meanwhile: nothing left to replace)
            shutil.rmtree(final)
    os.replace(staging, final)
    return final


def remove_staging_folders(trial_dirs: Iterable[str]) -> list[str]:
    """Remove the staging folders (:data:`STAGING_PREFIX`) that copies cut short left in trials' folders.

    A process killed while it copied a checkpoint in (a killed driver's device process, which Ray ends shortly
    after its driver; the driver itself, copying an exploit's source) leaves its staging folder behind. No
    checkpoint is ever taken from one, but each held up to a whole checkpoint's size for good. Call this only while
    nothing copies checkpoints into these folders (a resume, once the killed driver's devices have ended).

    Args:
        trial_dirs: The trials' folders (one that does not exist is skipped).

    Returns:
        The staging folders removed.
    """
    removed: list[str] = []
    for folder in trial_dirs:
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            if name.startswith(STAGING_PREFIX):
                path = os.path.join(folder, name)
                shutil.rmtree(path, ignore_errors=True)
                if not os.path.exists(path):
                    removed.append(path)
    return removed
