"""``RunConfig(log_to_file=...)``: what a trial prints also goes to files in its folder, as in Ray.

Ray runs one trial per actor process and swaps that process's ``sys.stdout``/``sys.stderr`` for a tee of the
console and the file. A fluidsalus device process runs several trials at once, one thread each, so the swap is
per trial: the first trial that logs to a file replaces the process's streams with a :class:`_Router`, which
writes everything to the stream it replaced (the console, through Ray's log forwarding, as before) and a
trial's text also to that trial's file. A trial's text is what its own thread and the threads it started write
(they belong to it: ``fluidsalus.session.inherit_sessions_in_started_threads``). Output written below Python (C
extensions writing to file descriptor 1 or 2, logging handlers that kept the old stream), and that of threads a
trial did not start (a pool shared between trials), reach the console only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from fluidsalus.errors import ConfigError
from fluidsalus.session import current_session

#: Ray's file names for ``log_to_file=True``.
STDOUT_FILE, STDERR_FILE = "stdout", "stderr"
_STREAMS = ("stdout", "stderr")
_LOCK = threading.Lock()


def log_files(log_to_file: Any) -> tuple[str | None, str | None]:
    """The (stdout, stderr) file names, relative to a trial's folder, for a ``log_to_file`` value (Ray's rules).

    Args:
        log_to_file: False or None (no files), True (``stdout`` and ``stderr``), one file name for both, or a
            pair ``(stdout_file, stderr_file)`` whose entries may be None.

    Raises:
        ConfigError: Any other value, naming the field and what it may be.
    """
    if log_to_file is None or log_to_file is False:
        return None, None
    if log_to_file is True:
        return STDOUT_FILE, STDERR_FILE
    if isinstance(log_to_file, str) and log_to_file:
        return log_to_file, log_to_file
    if isinstance(log_to_file, Sequence) and not isinstance(log_to_file, str) and len(log_to_file) == 2 and all(
            name is None or (isinstance(name, str) and name) for name in log_to_file):
        return log_to_file[0], log_to_file[1]
    raise ConfigError(f"RunConfig: log_to_file must be True, False, a file name or a pair (stdout_file, "
                      f"stderr_file) of file names or None (got {log_to_file!r})")


def _owner() -> object:
    """Whose files a write goes to: the calling thread's trial (shared by the threads the trial started: see
    ``fluidsalus.session.inherit_sessions_in_started_threads``), or, outside any trial, the thread itself."""
    session = current_session()
    return session if session is not None else threading.current_thread()


class _Router:
    """A process's ``sys.stdout`` or ``sys.stderr``: writes go to the stream it replaced and, from a trial (or
    thread) that has one, to its file too (Ray's ``Tee``; under Ray one trial owns the whole process)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.files: dict[object, TextIO] = {}

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        file = self.files.get(_owner())
        if file is not None:
            with contextlib.suppress(ValueError):  # closed: a thread of the trial wrote as the trial ended
                file.write(text)
        return written

    def flush(self) -> None:
        self.stream.flush()
        file = self.files.get(_owner())
        if file is not None:
            with contextlib.suppress(ValueError):
                file.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty(), fileno(), ... of the stream it replaced
        return getattr(self.stream, name)


def _router(name: str) -> _Router:
    with _LOCK:
        current = getattr(sys, name)
        if not isinstance(current, _Router):
            current = _Router(current)
            setattr(sys, name, current)
        return current


@contextlib.contextmanager
def trial_output(folder: str, stdout_file: str | None, stderr_file: str | None) -> Iterator[None]:
    """While the block runs, the ``print`` output (and ``sys.stderr`` writes) of the calling thread's trial (its
    thread and the threads it starts), or outside a trial of the calling thread, also go to the files.

    Args:
        folder: The trial's folder; relative file names are taken from it. A resumed trial appends.
        stdout_file: File for ``sys.stdout``, or None.
        stderr_file: File for ``sys.stderr`` (the same name as ``stdout_file``: one file for both), or None.
    """
    opened: dict[str, TextIO] = {}
    routes: list[tuple[_Router, TextIO | None]] = []
    owner = _owner()
    try:
        for stream, name in zip(_STREAMS, (stdout_file, stderr_file), strict=True):
            if not name:
                continue
            path = os.path.join(folder, os.path.expanduser(name))
            if path not in opened:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                opened[path] = open(path, "a", buffering=1)  # noqa: SIM115 - closed below; line-buffered
            router = _router(stream)
            routes.append((router, router.files.get(owner)))
            router.files[owner] = opened[path]
        yield
    finally:
        for router, previous in reversed(routes):
            if previous is None:
                router.files.pop(owner, None)
            else:
                router.files[owner] = previous
        for file in opened.values():
            file.close()
