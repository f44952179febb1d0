"""A device process's ``sys.stdout`` and ``sys.stderr``: whose trial wrote a line, and the trials' own log files.

Ray runs one trial per actor process, so Ray's log forwarding names the trial's process on each line it brings to
the driver's terminal (``(train pid=N) ...``). A fluidsalus device runs several trials at once, one thread each, in
one process, whose lines Ray prefixes with the device (``(fluidsalus cpu:0 pid=N)``: ``_DeviceActor.__repr__``).
So a device process replaces its streams with a :class:`Router` that starts each line a trial writes with the
trial's name (``[train_8f2c1_00001] ...``); a trial's text is what its own thread and the threads it started write
(they belong to it: ``fluidsalus.session.inherit_sessions_in_started_threads``). A trial's line is written whole,
once it ends (or the trial ends), so lines two trials write at once are never mixed. The router also tees a
trial's text to its files (``RunConfig(log_to_file=...)``: :mod:`fluidsalus.tune._output`).

Writes outside any trial (the device's own, a thread pool shared between trials) pass through as they are. Output
written below Python (C extensions writing to file descriptor 1 or 2, logging handlers that kept the old stream)
passes by the router: it carries no trial name and goes to no trial's file.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, TextIO

from fluidsalus.session import TrialSession, current_session

#: The process's streams a router replaces.
STREAMS = ("stdout", "stderr")
_LOCK = threading.Lock()


def trial_tag(session: TrialSession) -> str:
    """What starts each line a trial writes to the console: its name (``get_context().get_trial_name()``, or what
    its front end named it by: ``TrialSession.output_name``)."""
    return f"[{session.output_name}] "


def owner_of(session: TrialSession | None) -> object:
    """Whose files a write goes to: the calling thread's trial, or outside any trial the thread itself."""
    return session if session is not None else threading.current_thread()


class Router:
    """A process's ``sys.stdout`` or ``sys.stderr``: writes go to the stream it replaced, and from a trial (or
    thread) that has one, to its file too (Ray's ``Tee``; under Ray one trial owns the whole process).

    Attributes:
        stream: The stream it replaced (the console, through Ray's log forwarding).
        files: Each trial's (or thread's) file, see :func:`fluidsalus.tune._output.trial_output`.
        tags_lines: Whether each line a trial writes to ``stream`` starts with :func:`trial_tag` (a device
            process's streams: :func:`tag_trial_lines`).
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.files: dict[object, TextIO] = {}
        self.tags_lines = False
        self._partial: dict[TrialSession, list[str]] = {}  # a trial's text after its last line break, in pieces
        self._lines = threading.Lock()  # a trial's lines reach the stream whole

    def write(self, text: str) -> int:
        session = current_session()
        if session is None or not self.tags_lines:
            written = self.stream.write(text)
        else:
            written = self._write_lines(session, text)
        file = self.files.get(owner_of(session))
        if file is not None:  # (after the console: a line-buffered file's write may let another thread run)
            with contextlib.suppress(ValueError):  # closed: a thread of the trial wrote as the trial ended
                file.write(text)
        return written

    def _write_lines(self, session: TrialSession, text: str) -> int:
        """Write the trial's text to the stream, each of its lines whole and tagged; hold what follows the last
        line break until the trial's next write (or its end)."""
        lines = text.splitlines(keepends=True)
        tail = lines.pop() if lines and lines[-1].splitlines()[0] == lines[-1] else None  # no line break yet
        with self._lines:
            held = self._partial.pop(session, [])
            if lines:
                lines[0] = "".join(held) + lines[0]
                held = []
                tag = trial_tag(session)
                self.stream.write("".join(tag + line for line in lines))
            if tail is not None:
                held.append(tail)
            if held:
                self._partial[session] = held
        return len(text)

    def end_trial(self, session: TrialSession) -> None:
        """Write what the trial wrote after its last line break, if anything, as a line of its own."""
        if session not in self._partial:  # (a trial that printed whole lines, or nothing, pays no more)
            return
        with self._lines:
            held = self._partial.pop(session, None)
            if held is not None:
                self.stream.write(f"{trial_tag(session)}{''.join(held)}\n")
                self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()
        file = self.files.get(owner_of(current_session()))
        if file is not None:
            with contextlib.suppress(ValueError):
                file.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty(), fileno(), ... of the stream it replaced
        return getattr(self.stream, name)


def router(name: str) -> Router:
    """The :class:`Router` that is ``sys.<name>`` (``"stdout"`` or ``"stderr"``), put there if it is not yet."""
    with _LOCK:
        current = getattr(sys, name)
        if not isinstance(current, Router):
            current = Router(current)
            setattr(sys, name, current)
        return current


def tag_trial_lines() -> None:
    """Start each line a trial of this process writes to ``sys.stdout`` or ``sys.stderr`` with the trial's name
    (a device process, once: ``gpu.actor._DeviceActor``)."""
    for name in STREAMS:
        router(name).tags_lines = True


def end_trial_output(session: TrialSession) -> None:
    """At a trial's end: the line it left unfinished, if any, is written. (Its whole lines were written as they
    came; a Ray worker's streams write through at once, so Ray's log forwarding, which reads the process's log files,
    finds them there.)"""
    for name in STREAMS:
        stream = getattr(sys, name)
        if isinstance(stream, Router):
            stream.end_trial(session)
