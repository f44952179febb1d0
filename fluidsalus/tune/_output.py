"""``RunConfig(log_to_file=...)``: what a trial prints also goes to files in its folder, as in Ray.

Ray runs one trial per actor process and swaps that process's ``sys.stdout``/``sys.stderr`` for a tee of the
console and the file. A fluidsalus device process runs several trials at once, one thread each, so the swap is
per trial: the process's streams are a :class:`fluidsalus.gpu.output.Router` (a device process's always are), which
writes everything to the stream it replaced (the console, through Ray's log forwarding) and a trial's text also to
that trial's file. A trial's text is what its own thread and the threads it started write (they belong to it:
``fluidsalus.session.inherit_sessions_in_started_threads``). Output written below Python (C extensions writing to
file descriptor 1 or 2, logging handlers that kept the old stream), and that of threads a trial did not start (a
pool shared between trials), reach the console only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.output import STREAMS, Router, owner_of, router
from fluidsalus.session import current_session

#: Ray's file names for ``log_to_file=True``.
STDOUT_FILE, STDERR_FILE = "stdout", "stderr"


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
    routes: list[tuple[Router, TextIO | None]] = []
    owner = owner_of(current_session())
    try:
        for stream, name in zip(STREAMS, (stdout_file, stderr_file), strict=True):
            if not name:
                continue
            path = os.path.join(folder, os.path.expanduser(name))
            if path not in opened:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                opened[path] = open(path, "a", buffering=1)  # noqa: SIM115 - closed below; line-buffered
            route = router(stream)
            routes.append((route, route.files.get(owner)))
            route.files[owner] = opened[path]
        yield
    finally:
        for route, previous in reversed(routes):
            if previous is None:
                route.files.pop(owner, None)
            else:
                route.files[owner] = previous
        for file in opened.values():
            file.close()
