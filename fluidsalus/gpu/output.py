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

A trial that replaces ``sys.stdout`` or ``sys.stderr`` (``contextlib.redirect_stdout(buffer)``, ``sys.stdout =
Logger(sys.stdout)``) replaces it for itself (its threads, and those it started), as under Ray, where the trial owns
its process: the device's other trials keep writing through the router. ``sys`` is a module, and a module's
attributes cannot be per thread, so a device process gives ``sys`` a class of its own (:class:`_Sys`, which Python
allows for any module) whose ``stdout`` and ``stderr`` properties are what Python code reads and assigns: an
assignment from a trial's thread is recorded for the trial, one from outside any trial replaces the stream for the
process, as before. Code written in C (``print`` without ``file=``, a traceback Python prints) reads the module's
own dictionary and bypasses the properties, so that holds a :class:`_TrialStreams`, which writes to the calling
trial's stream if it replaced it, else to the router. Python code never sees the ``_TrialStreams``: it reads the
router (or its trial's own stream), so a stream that wraps the one it read (``Logger(sys.stdout)``) writes to the
router and not back to itself, and a ``logging`` handler made before a trial's ``redirect_stderr`` keeps writing
to the console, as under Ray. A trial's replacement ends with the trial, and so do the settings a trial gives the
router (``sys.stdout.reconfigure(encoding=...)``: :class:`_OwnSettings`), which are its own as well. Simpler ways
do not work: the router cannot tell a trial's ``print`` from that of a stream that wraps the router, and
``sys.stdout = x`` writes the module's dictionary, which no hook of a plain module sees (a module's ``__setattr__``
is not called). The cost: reading any attribute of ``sys`` from Python takes about 0.05 us more (Python's fast path
for plain modules no longer applies).

A write that comes while its own thread is in the middle of the router's write (a garbage collection that runs there
calls an object's ``__del__`` that prints: tqdm's progress bars do) waited for the router's lock, which that thread
held, for ever; it is written once the write in progress is done, right after it (:meth:`Router.write`).
"""

from __future__ import annotations

import codecs
import contextlib
import importlib
import io
import logging
import os
import re
import sys
import threading
import types
import weakref
from typing import Any, TextIO

from fluidsalus.session import TrialSession, current_session

#: The process's streams a router replaces.
STREAMS = ("stdout", "stderr")
_LOCK = threading.Lock()
_get_ident = threading.get_ident  # (where a write is deferred, and where deferred writes are written)
_ROUTERS: weakref.WeakSet[Router] = weakref.WeakSet()  # every router made: end_trial_output finds them all
_log = logging.getLogger(__name__)


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
        # A trial's lines reach the stream whole. Re-entrant: a write that comes from the thread that holds it (a
        # __del__ that prints, run by a collection in the middle of its write) must not wait for it (see write).
        self._lines = threading.RLock()
        self._writing = False  # a thread holds _lines to write (_write_lines, _holding): its own writes are deferred
        self._deferred: dict[int, list[str]] = {}  # by thread: what it wrote meanwhile, written next (_defer)
        self._open: TrialSession | None = None  # whose unfinished line (written up to a "\r") the stream is on
        self._reconfigured: dict[TrialSession, _OwnSettings] = {}  # sys.stdout.reconfigure(...) of a trial: its own
        _ROUTERS.add(self)

    def write(self, text: str) -> int:
        """Write ``text`` as the calling thread's trial's (tagged, teed to its file), or as it is outside any trial.

        A write from a thread in the middle of its own write here (a garbage collection there ran an object's
        ``__del__`` that prints) is deferred: it is written, as any write (to the console and the trial's file), right
        after the write in progress, in the order such writes came (one that fails then is logged, not raised here:
        :meth:`_write_deferred`). It waited for ever for the router's lock, which its thread held; and it may not
        simply go through, as the write in progress has the trial's held text in hand. The cost on every write: one
        attribute's truth test here, and two more in the locked write."""
        if not isinstance(text, str):  # (the stream's own error: TypeError, not the router's AttributeError)
            return self.stream.write(text)
        if self._writing and self._lines._is_owned():  # type: ignore[attr-defined]  # (RLock's, as Condition uses)
            return self._defer(text)
        try:
            session = current_session()
            file = self.files.get(owner_of(session))
            try:
                if session is None or session.ended or not self.tags_lines:  # (a thread still writing after its trial)
                    if self._open is not None and self.tags_lines:  # (a trial's line left open at a "\r": ended first)
                        with self._holding():
                            if self._open is not None:
                                self.stream.write("\n")
                                self._open = None
                    written = self.stream.write(text)
                else:
                    written = self._write_lines(session, text)
            except ValueError as error:  # (UnicodeEncodeError: text the console cannot take, a lone surrogate)
                if file is None:
                    raise
                _not_written(self.stream, text, error)  # log_to_file: Ray's Tee logs it and goes on
                written = len(text)
            if file is not None:  # (after the console: a line-buffered file's write may let another thread run)
                try:
                    file.write(text)
                except UnicodeError as error:
                    _not_written(file, text, error)
                except ValueError:  # closed: a thread of the trial wrote as the trial ended
                    pass
            return written
        finally:
            if self._deferred:  # (an empty dict's truth test on every other write)
                self._write_deferred()

    def _defer(self, text: str) -> int:
        """A write of a thread in the middle of its own write here: kept for :meth:`_write_deferred`, which that
        thread calls once its write is done."""
        self._deferred.setdefault(_get_ident(), []).append(text)
        return len(text)

    def _write_deferred(self) -> None:
        """Write what the calling thread wrote while it held the lock, first come first written (one that comes
        meanwhile, from one of these writes, goes after them). One that fails (text the console cannot encode) is
        reported as Python reports an error in a ``__del__``, and the next ones are written: its error is not the
        error of the write whose end writes it (it failed that write, of the trial's own text, which had gone
        through)."""
        ident = _get_ident()
        texts = self._deferred.get(ident)
        if texts is None:
            return
        try:
            while texts:
                text = texts.pop(0)
                try:
                    self.write(text)
                except Exception as error:  # noqa: BLE001 - reported, as a __del__'s error is (see above)
                    _deferred_not_written(text, error)
        finally:
            if not texts and self._deferred.get(ident) is texts:
                del self._deferred[ident]

    @contextlib.contextmanager
    def _holding(self) -> Any:
        """The router's lock, held to write (the calling thread's writes meanwhile are deferred: :meth:`write`). The
        hot path, :meth:`_write_lines`, does the same inline."""
        with self._lines:
            self._writing = True
            try:
                yield
            finally:
                self._writing = False

    def _write_lines(self, session: TrialSession, text: str) -> int:
        """Write the trial's text to the stream, each of its lines whole and tagged; hold what follows the last
        line break until the trial's next write (or its end; a thread's write that meets the trial's end holds
        nothing). A trial that reconfigured the stream gets its text written as its settings write it."""
        if self._reconfigured:  # (a trial's own reconfigure: an empty dict's truth test on every other print)
            own = self._reconfigured.get(session)
            if own is not None and own.converts:  # (not under self._lines: the trial's codec or error handler
                # may print, as under Ray; its own lock, re-entrant, orders its threads' conversions)
                text = own.as_written(text, getattr(self.stream, "encoding", None))
        # (lines end at "\n" only, as Ray's log forwarding reads them: a "\r" of a progress bar, a form feed or
        # "\u2028" inside a line got a trial's name before the rest of it)
        lines = text.split("\n")
        tail = lines.pop() or None  # (after the last line break: held until the trial's next write, or its end)
        lines = [line + "\n" for line in lines]
        shown = None  # an unfinished line with a "\r" (a progress bar's updates): written now, as Ray shows it
        if tail is not None and "\r" in tail:
            shown, tail = tail, None
        encoding = getattr(self.stream, "encoding", None)  # (read at each write: a trial may reconfigure() it)
        if tail is not None and encoding:  # held text the stream cannot take fails here, as the write would
            tail.encode(encoding, getattr(self.stream, "errors", None) or "strict")
        with self._lines:
            self._writing = True  # (this thread's writes meanwhile are deferred: see write)
            try:
                held = self._partial.pop(session, [])
                if session.ended and (tail is not None or shown is not None):  # (a thread of the trial wrote as
                    # it ended: its end_trial ran, or waits for this lock, and holds nothing of it: the rest is written
                    # as its line)
                    lines.append(f"{shown if shown is not None else tail}\n")
                    shown = tail = None
                pieces = lines + ([shown] if shown is not None else [])
                if pieces:
                    pieces[0] = "".join(held) + pieces[0]
                    tag = trial_tag(session)
                    # (each write names the trial, an open line's too: Ray's log monitor publishes each chunk it
                    # reads as a line; and each redraw after a "\r")
                    try:
                        self.stream.write(self._lead_locked(session, pieces[0] == "\n")
                                          + _redraws_named(pieces[0], tag)
                                          + "".join(tag + _redraws_named(piece, tag) for piece in pieces[1:]))
                    except BaseException:
                        if held:  # the text before this write is not lost with it
                            self._partial[session] = held
                        raise
                    held = []
                    self._open = session if shown is not None else None
                if tail is not None:
                    held.append(tail)
                if held:
                    self._partial[session] = held
                if session.ended and (held or self._open is session):  # (stored, then checked: the trial's end
                    # marks it ended before its look at _partial and _open, made without this lock, so one of the two
                    # writes the rest, once)
                    self._end_locked(session)
            finally:
                self._writing = False
        return len(text)

    def _lead_locked(self, session: TrialSession, bare_end: bool) -> str:
        """What goes before a trial's text: the end of another trial's line left open at a ``\r``, then the
        trial's name; nothing before the bare end (``bare_end``) of the trial's own open line."""
        if bare_end and self._open is session:
            return ""
        return ("\n" if self._open not in (None, session) else "") + trial_tag(session)

    def end_trial(self, session: TrialSession) -> None:
        """Write what the trial wrote after its last line break, if anything, as a line of its own; its own settings
        of the stream (``reconfigure``) end with it."""
        self._reconfigured.pop(session, None)  # (a reconfigure that stores them after this checks session.ended)
        if session not in self._partial and self._open is not session:  # (nothing held: no lock, which a stuck
            # writer of another trial may hold; a thread of this trial that holds text after this look sees
            # session.ended, set before the call, and writes it itself: _write_lines)
            return
        try:
            with self._holding():
                self._end_locked(session)
        finally:
            if self._deferred:  # (what a __del__ printed during it)
                self._write_deferred()

    def _end_locked(self, session: TrialSession) -> None:
        """:meth:`end_trial`'s write of the trial's held text, under the lock."""
        held = self._partial.pop(session, None)
        if held is not None or self._open is session:
            lead = self._lead_locked(session, held is None)
            self._open = None
            text = f"{lead}{''.join(held or [])}\n"
            try:
                self.stream.write(text)
            except UnicodeEncodeError:  # text the stream cannot encode (a lone surrogate): shown escaped
                encoding = getattr(self.stream, "encoding", None) or "utf-8"
                self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
            self.stream.flush()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.stream.flush()
        file = self.files.get(owner_of(current_session()))
        if file is not None:
            with contextlib.suppress(ValueError):
                file.flush()

    def _in_trial(self) -> bool:
        """Whether the caller is a trial of a device process, whose other trials share this console."""
        return bool(self.__dict__.get("tags_lines")) and current_session() is not None

    def detach(self) -> Any:
        """A trial's ``sys.stdout.detach()`` (``io.TextIOWrapper(sys.stdout.detach(), encoding=...)``) gets the
        console's buffer, which it cannot close; the console stays attached for the device's other trials."""
        if self._in_trial():
            return _SharedBuffer(self.stream.buffer)
        return self.stream.detach()

    def close(self) -> None:
        """From a trial: nothing (the console is the device's other trials' too; under Ray the trial's own)."""
        if self._in_trial():
            self.flush()
            return
        self.stream.close()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty(), fileno(), ... of the stream it replaced
        if name.startswith("__") or name == "stream":  # (half-built: copy.copy, pickle)
            raise AttributeError(name)
        if name == "buffer" and self._in_trial():  # (a trial's wrapper over it must not close it when freed)
            return _SharedBuffer(self.stream.buffer)
        if name == "reconfigure" and self._in_trial():
            getattr(self.stream, name)  # (AttributeError where the stream has none, as before)
            return self._reconfigure
        if name in _OwnSettings.READ and self.__dict__.get("_reconfigured"):  # (the trial's own, if it has them)
            own = self._reconfigured.get(current_session())  # type: ignore[arg-type]
            if own is not None:
                return getattr(own.wrapper, name)
        return getattr(self.stream, name)

    def _reconfigure(self, **settings: Any) -> None:
        """A trial's ``sys.stdout.reconfigure(...)``: the calling trial's own settings (its writes' ``encoding``,
        ``errors`` and ``newline``; ``line_buffering`` and ``write_through`` read back), the console stays the
        device's other trials' (under Ray the process, and so the console, is the trial's own). Outside any trial it
        is the console's, for the process, as before; from a thread of a trial that has ended it is judged and kept
        by no one (what such a thread writes passes as the device's own text)."""
        session = current_session()
        if session is None or not self.tags_lines:
            return self.stream.reconfigure(**settings)  # type: ignore[no-any-return]
        with self._lines:
            own = self._reconfigured.setdefault(session, _OwnSettings(self.stream))
        with own.lock:  # (not under self._lines: a codec's look-up may print)
            own.reconfigure(self.stream, **settings)  # (raises as the console's: LookupError, ValueError, ...)
        if session.ended:  # (stored, then checked: a trial's end drops them without the lock: none kept past it)
            self._reconfigured.pop(session, None)
        return None


class _SharedBuffer:
    """The console's binary buffer as a trial of a device process gets it: writes pass; ``close()`` and
    ``detach()`` (a trial's ``TextIOWrapper`` over it, closed or freed at the trial's end) only flush it."""

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer

    @property
    def closed(self) -> bool:
        return bool(self._buffer.closed)

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self._buffer.flush()

    def detach(self) -> Any:
        self.close()
        return self._buffer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_buffer":
            raise AttributeError(name)
        return getattr(self._buffer, name)


class _OwnSettings:
    """A trial's own ``reconfigure`` of the console it shares with the device's other trials: a text stream of its
    own, over bytes, with the console's settings and then the trial's, through which the trial's text goes before
    the console; what the console writes is what the trial's stream would have written, as Ray's log forwarding
    reads the trial's console (``decode(..., "replace")``): ``"café"`` under ``encoding="ascii",
    errors="replace"`` is ``"caf?"``, and a write the trial's settings cannot encode raises their error.

    Attributes:
        wrapper: The trial's stream (Python's ``reconfigure`` judges the settings): its ``encoding``, ``errors``,
            ``line_buffering`` and ``write_through`` are what the trial reads back.
        converts: Whether the trial's text must go through ``wrapper``: its encoding or errors are not the
            console's, or it gave a ``newline`` (``reconfigure(line_buffering=True)`` alone keeps a print's cost).
    """

    #: The settings a trial reads back as its own after its reconfigure (``sys.stdout.encoding``).
    READ = frozenset({"encoding", "errors", "line_buffering", "write_through"})

    #: What the bytes under ``wrapper`` always begin with: a stream past its start writes no byte order mark when
    #: it becomes ``utf-8-sig`` or ``utf-16``, as the trial's console (a Ray worker's log file, appended to) does not.
    BEFORE = b"\n"

    def __init__(self, console: Any) -> None:
        self._bytes = io.BytesIO(self.BEFORE)
        self._bytes.seek(len(self.BEFORE))
        self.wrapper = io.TextIOWrapper(self._bytes, encoding=getattr(console, "encoding", None) or "utf-8",
                                        errors=getattr(console, "errors", None) or "strict",
                                        newline="\n",  # (no translation of its own: the console does its own)
                                        line_buffering=bool(getattr(console, "line_buffering", False)),
                                        write_through=bool(getattr(console, "write_through", False)))
        self.converts = False
        self.lock = threading.RLock()  # (re-entrant: an error handler of the trial's may print through it)

    def reconfigure(self, console: Any, **settings: Any) -> None:
        self.wrapper.reconfigure(**settings)
        encoding = getattr(console, "encoding", None) or self.wrapper.encoding
        self.converts = (self.converts or "newline" in settings
                         or self.wrapper.errors != (getattr(console, "errors", None) or "strict")
                         or codecs.lookup(self.wrapper.encoding).name != codecs.lookup(encoding).name)

    def as_written(self, text: str, console_encoding: str | None) -> str:
        """``text`` as the trial's stream writes it (encoded, newlines translated), read back as the console's
        text."""
        with self.lock:
            self.wrapper.write(text)  # (UnicodeEncodeError under the trial's errors: the write raises it)
            self.wrapper.flush()
            written = self._bytes.getvalue()[len(self.BEFORE):]
            self._bytes.seek(len(self.BEFORE))
            self._bytes.truncate()
        return written.decode(console_encoding or self.wrapper.encoding, "replace")


def _not_written(stream: Any, text: str, error: ValueError) -> None:
    """Warn as Ray's ``Tee`` (``RunConfig(log_to_file=...)``) does of a write to one of its streams that raised
    ``ValueError``, which it does not raise (``ray.tune.utils.util.Tee``); ``ascii()`` so that the warning's own
    write cannot fail the same way."""
    if getattr(_warning, "on", False):  # (the warning's own write failed the same way: Ray's Tee stops here too)
        return
    _warning.on = True
    try:
        _log.warning("ValueError when calling 'write' on stream (%s). args: (%s,) kwargs: {} (%s)", ascii(stream),
                     ascii(text), ascii(str(error)))
    finally:
        _warning.on = False


_warning = threading.local()  # whether this thread is logging a write that failed (see _not_written)


def _deferred_not_written(text: str, error: Exception) -> None:
    """A deferred write (:meth:`Router._write_deferred`) that raised: logged with its traceback, as Python gives an
    exception raised in a ``__del__`` to ``sys.unraisablehook`` (``Exception ignored in: ...``) instead of raising
    it in the code the garbage collection interrupted; ``ascii()`` so that the log's own write cannot fail the same
    way."""
    _log.warning("Exception ignored in a write made in the middle of another write of its thread (an object's "
                 "__del__ that printed, in a garbage collection), written after it: text %s", ascii(text),
                 exc_info=(type(error), error, error.__traceback__))


def _redraws_named(piece: str, tag: str) -> str:
    """``piece`` with ``tag`` after each ``\r`` that text follows (a progress bar's redraw names its trial)."""
    return _REDRAW.sub("\r" + tag, piece) if "\r" in piece else piece


_REDRAW = re.compile(r"\r(?=[^\r\n])")


class _TrialStreams:
    """What ``sys.__dict__`` holds as ``stdout`` (``stderr``) in a device process, for code written in C (``print``
    without ``file=``): the calling trial's own stream where the trial replaced it, else the router.

    Attributes:
        router: The process's :class:`Router`.
        replaced: The stream each trial put in the router's place (``sys.stdout = ...`` from one of its threads).
            Weak: a trial's entry goes at its end (:func:`end_trial_output`), and one that a thread of an ended
            trial made afterwards (a library's worker that silences itself) goes with the thread, whose session it
            was; it kept the ended session, and every later print of the process on the look-up's path.
    """

    def __init__(self, router: Router) -> None:
        self.router = router
        self.replaced: weakref.WeakKeyDictionary[TrialSession, Any] = weakref.WeakKeyDictionary()

    def target(self) -> Any:
        """The calling thread's stream: its trial's own, or the router."""
        if not self.replaced.data:  # (no trial replaced it: the common case, without a session look-up; .data,
            # the plain dict under it, as a WeakKeyDictionary's own len() is a Python call per print)
            return self.router
        session = current_session()
        return self.router if session is None else self.replaced.get(session, self.router)

    def write(self, text: str) -> int:
        stream = self.target() if self.replaced.data else self.router  # (every print: the common case without a call)
        if stream is None:  # (sys.stdout = None: print writes nothing, as Python's print to None)
            return len(text)
        return stream.write(text)  # type: ignore[no-any-return]

    def flush(self) -> None:
        stream = self.target()
        if stream is not None:
            stream.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno(), ... of the calling thread's stream
        return getattr(self.target(), name)


_LEFT_BY_TRIALS: list[Any] = []  # streams over the console's descriptors trials left in place at their end


def _on_console_descriptor(stream: Any) -> bool:
    """Whether ``stream`` writes to the descriptor of a console the routers write to (1 or 2 in a Ray worker)
    itself: freeing it may close that console."""
    consoles = {1, 2}
    for route in list(_ROUTERS):
        with contextlib.suppress(Exception):
            consoles.add(route.stream.fileno())
    try:
        return stream.fileno() in consoles
    except Exception:  # noqa: BLE001 - no descriptor (StringIO's UnsupportedOperation), or a stream of any kind
        return False


_TRIAL_STREAMS: dict[str, _TrialStreams] = {}  # sys.__dict__'s, by stream name, in a device process


def _held(name: str) -> Any:
    """``sys.<name>`` as the module's dictionary holds it (what ``print`` writes to)."""
    return vars(sys)[name]


def _read(name: str) -> Any:
    """``sys.<name>`` as Python code reads it: the calling trial's own stream, or the router."""
    held = _held(name)
    return held.target() if isinstance(held, _TrialStreams) else held


def _assign(name: str, stream: Any) -> None:
    """``sys.<name> = stream``: for the calling thread's trial only, or outside any trial for the process."""
    streams = _TRIAL_STREAMS.get(name)
    if streams is not None and stream is streams.router:  # (the router read back: it goes back behind the trials')
        stream = streams
    held = _held(name)
    session = current_session()
    if session is not None and isinstance(held, _TrialStreams):
        if stream is held:  # (a trial restores what it read: its own replacement ends)
            held.replaced.pop(session, None)
        else:
            held.replaced[session] = stream
    else:
        vars(sys)[name] = stream


class _Sys(types.ModuleType):
    """The class of a device process's ``sys`` module: ``sys.stdout`` and ``sys.stderr`` are per trial."""

    stdout = property(lambda self: _read("stdout"), lambda self, stream: _assign("stdout", stream))
    stderr = property(lambda self: _read("stderr"), lambda self, stream: _assign("stderr", stream))

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """Pickled by name, as a plain module is (cloudpickle looks a module's reducer up by its exact type, so a
        trial's Ray task whose function uses ``sys`` could not be shipped)."""
        return importlib.import_module, (self.__name__,)


def router(name: str) -> Router:
    """The :class:`Router` that is ``sys.<name>`` (``"stdout"`` or ``"stderr"``), put there if it is not yet."""
    with _LOCK:
        held = _held(name)
        current = held.router if isinstance(held, _TrialStreams) else held
        if not isinstance(current, Router):
            current = Router(current)
            vars(sys)[name] = current  # (for the process, even when a trial's thread asks first)
        return current


def tag_trial_lines() -> None:
    """Start each line a trial of this process writes to ``sys.stdout`` or ``sys.stderr`` with the trial's name,
    and make a trial's replacement of either its own (a device process, once: ``gpu.actor._DeviceActor``)."""
    for name in STREAMS:
        route = router(name)
        route.tags_lines = True
        with _LOCK:
            if not isinstance(_held(name), _TrialStreams):
                vars(sys)[name] = _TRIAL_STREAMS[name] = _TrialStreams(route)
    sys.__class__ = _Sys


def end_trial_output(session: TrialSession) -> None:
    """At a trial's end: the streams it put in place of ``sys.stdout``/``sys.stderr`` are its no more, and the line it
    left unfinished, if any, is written. (Its whole lines were written as they came; a Ray worker's streams write
    through at once, so Ray's log forwarding, which reads the process's log files, finds them there.)"""
    for streams in _TRIAL_STREAMS.values():
        left = streams.replaced.pop(session, None)
        if left is not None:
            with contextlib.suppress(Exception):
                left.flush()
            if _on_console_descriptor(left):
                # (kept for the process's life, as the process keeps it under Ray: freed here, a stream over the
                # console's descriptor, os.fdopen(sys.stdout.fileno()), would close it under the device's other
                # trials, and the next file opened would get its number and the console's text; any other stream,
                # a StringIO holding what it caught, is let go)
                _LEFT_BY_TRIALS.append(left)
    for route in list(_ROUTERS):  # (not only sys.stdout's: a trial may have redirected it meanwhile)
        try:
            route.end_trial(session)
        except Exception:  # noqa: BLE001 - a trial's end must be sent whatever its text was
            route._partial.pop(session, None)


def _after_fork_in_child() -> None:
    """A child forked while another thread held a router's lock (a DataLoader worker) must still print."""
    for route in list(_ROUTERS):
        route._lines = threading.RLock()
        route._writing = False
        route._deferred = {}
        route._partial.clear()
        route._open = None


os.register_at_fork(after_in_child=_after_fork_in_child)
