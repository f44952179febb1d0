"""Errors raised at fluidsalus's public boundary.

Every error that comes from bad user input is a :class:`ConfigError` (a ``ValueError``), and its message
names the field that is wrong and what is allowed, so a user can fix the call without reading our code.
"""

from __future__ import annotations

import contextlib
import functools
import pickle
import sys
from typing import Any


class FluidsalusError(Exception):
    """Base class of every error fluidsalus raises on purpose."""


class ConfigError(FluidsalusError, ValueError):
    """Invalid input to a public function: names the field and the allowed values."""


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong type at a public boundary that mirrors a library raising ``TypeError`` for it
    (Optuna's ``Study.optimize``): ``except TypeError`` and ``except ConfigError`` both catch it."""


class ConfigRuntimeError(ConfigError, RuntimeError):
    """Invalid input at a public boundary that mirrors a library raising ``RuntimeError`` for it (Ray's
    ``ConcurrencyLimiter`` given no ``Searcher``): ``except RuntimeError`` and ``except ConfigError`` both catch it."""


class SpaceError(ConfigError):
    """Invalid search space: names the parameter path and what is allowed."""


class StoreError(FluidsalusError):
    """An experiment store that cannot be opened or used (not a store, newer schema, ...)."""


class SessionError(FluidsalusError, RuntimeError):
    """A session function (``report``, ``get_checkpoint``, ...) was called outside a running trial."""


class CallbackError(FluidsalusError):
    """A run's experiment callback (a ``tune.Callback`` or ``LoggerCallback`` of ``RunConfig(callbacks=[...])``) raised
    in a hook that Ray Tune's controller runs inside a trial event's handler (``on_trial_result``, ``on_trial_save``,
    ``on_trial_recover``, ``on_trial_error``, and a ``LoggerCallback``'s ``log_trial_result`` / ``log_trial_save`` /
    ``log_trial_end(failed=True)`` under them): the run ends with this error, as Ray's with its ``TuneError``
    (``fluidsalus.tune.error.TuneError`` is :class:`FluidsalusError`, so ``except TuneError`` catches it). Its
    message names the callback, the hook and the trial, then gives the callback's traceback (Ray's text is that
    traceback); ``__cause__`` is the callback's exception.

    Attributes:
        callback: The callback's class name.
        hook: The hook that raised (``on_trial_result``, ...).
        trial: The trial's name, or None.
    """

    def __init__(self, message: str, callback: str = "", hook: str = "", trial: str | None = None) -> None:
        super().__init__(message)
        self.callback, self.hook, self.trial = callback, hook, trial

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.callback, self.hook, self.trial)


class TrialError(FluidsalusError):
    """The error of a failed trial (a result's ``error``, ``fail_fast="raise"``'s exception).

    Attributes:
        cause: The exception the trial raised, re-created here as Ray's ``RayTaskError.cause`` is, when its device
            could pickle it and this process can unpickle it; None otherwise (the message still names it).
    """

    cause: BaseException | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # As an exception pickles (its class, args and attributes), but the cause travels as its pickle (see
        # ``trial_error``): a reader that cannot unpickle it still reads the error, without its cause.
        state = {k: v for k, v in self.__dict__.items() if k != "cause"}
        return type(self), self.args, state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        cause = unpickle_exception(state.get("cause_pickle"))
        if cause is not None:
            self.cause = cause


#: Exception types a trial's error may name that are looked up by their bare name (its traceback's last line names
#: them so, ``ValueError: ...``): Python's own, and the running script's (``__main__``).
_BARE_NAME_MODULES = ("builtins", "__main__")


def _exception_type(error_text: str | None) -> type[BaseException] | None:
    """The exception class a trial's error text names in its first line (``ValueError: ...``,
    ``package.module.MyError: ...``), when the driver has it: a built-in, a class of the running script, or one of
    a module already imported here (nothing is imported for it). None otherwise."""
    if not error_text:
        return None
    name = error_text.strip().splitlines()[0].split(":", 1)[0].strip()
    if not name.replace(".", "").replace("_", "").isalnum():
        return None
    module_name, _, qualname = name.rpartition(".")
    candidates = [module_name] if module_name else list(_BARE_NAME_MODULES)
    for candidate in candidates:
        module = sys.modules.get(candidate)
        found: Any = module
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if isinstance(found, type) and issubclass(found, Exception):  # not KeyboardInterrupt & co.
            return found
    return None


@functools.cache
def _typed_trial_error(cause: type[BaseException]) -> type[TrialError] | None:
    """``TrialError`` that is also a ``cause`` (Ray's ``RayTaskError(ValueError)``), or None when Python cannot
    make one (two exception types of incompatible layouts, such as an ``OSError``). As Ray's, an attribute it does
    not have is the cause's (``error.code`` of a ``raise MyError(code=7)``), when the cause came across."""
    try:
        return type(f"TrialError({cause.__name__})", (TrialError, cause), {
            "__init__": _typed_init, "__str__": _typed_str, "__reduce__": _typed_reduce,
            "__getattr__": _typed_getattr, "__module__": __name__, "cause_type": cause})
    except TypeError:
        return None


def _typed_init(self: TrialError, message: str) -> None:
    Exception.__init__(self, message)  # not the cause's __init__, whose arguments are the cause's own


def _typed_str(self: TrialError) -> str:
    return str(self.args[0]) if self.args else ""


def _typed_reduce(self: TrialError) -> tuple[Any, ...]:
    return trial_error, (self.args[0] if self.args else "", getattr(self, "error_text", None),
                         getattr(self, "cause_pickle", None))


def _typed_getattr(self: TrialError, name: str) -> Any:
    cause = self.__dict__.get("cause")
    if cause is None or name.startswith("__"):  # (special names: pickle and copy probe them)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    return getattr(cause, name)


def exception_text(error: BaseException, show: Any = str) -> str:
    """``str(error)`` (or ``show(error)``: ``repr``), or, where the exception's own method raises, what Python's
    traceback shows for it: a user's ``__str__`` that fails must not fail the code that reports the error (a
    trainable raising one hung its run: the device's trial thread died formatting it, and the trial never ended)."""
    try:
        return show(error)
    except Exception:  # noqa: BLE001 - any user's method may fail, in any way
        return f"<exception {getattr(show, '__name__', 'str')}() failed>"


#: Largest pickle of a trial's exception sent to the driver, in bytes (:func:`pickle_exception`'s two). A raised
#: exception's pickle is its type, message and attributes (a few kilobytes at most, its class's code included when
#: the user's script defines it); one this large holds data (a tensor, a batch), which the error's text and
#: traceback describe without the driver receiving it.
MAX_ERROR_PICKLE_BYTES = 1 << 20


def pickle_exception(error: BaseException, partial: bool = False) -> bytes | None:
    """A trial's exception pickled on its device for the driver (a result's ``error.cause``); None when it cannot
    be pickled, or its pickles are larger than :data:`MAX_ERROR_PICKLE_BYTES`.

    It is pickled twice: whole, and as its class, ``args`` and attributes, which re-create it without calling its
    ``__init__`` (Python's pickle of an exception calls ``cls(*args)``, which fails for an ``__init__(self, msg,
    code)`` that passes only ``msg`` on; Ray's ``cause`` is then that ``TypeError``). Ray's cloudpickle, which
    pickled the trainable: a class of the user's script it sent by value unpickles on the driver as that very
    class (cloudpickle tracks such classes per pickler module).

    Args:
        error: The exception.
        partial: When neither pickles, pickle its class with what of it does: its ``args`` (else its message) and
            the attributes that pickle (an error the Optuna front end's driver raised answering a trial's call,
            which the objective and ``catch`` must see by its class: a storage's exception holding a lock).

    Returns:
        The pickle, for :func:`trial_error`'s ``cause_pickle``.
    """
    from ray import cloudpickle  # (here: the lane runtime and this module import without Ray)

    pickles: list[bytes | None] = []
    for whole in (error, (type(error), error.args, getattr(error, "__dict__", {}))):
        try:
            pickles.append(cloudpickle.dumps(whole))
        except Exception:  # noqa: BLE001 - any object may fail to pickle, in any way: the error's text still goes
            pickles.append(None)
    if pickles == [None, None] and partial:
        pickles[1] = _pickle_what_pickles(error)
    if pickles == [None, None]:
        return None
    blob = pickle.dumps(tuple(pickles))
    return blob if len(blob) <= MAX_ERROR_PICKLE_BYTES else None


def _pickle_what_pickles(error: BaseException) -> bytes | None:
    """``error``'s class, its ``args`` (else its message) and those of its attributes that pickle, pickled as
    :func:`pickle_exception`'s parts; None when its class does not pickle."""
    from ray import cloudpickle

    state = {}
    for key, value in (getattr(error, "__dict__", None) or {}).items():
        with contextlib.suppress(Exception):  # (any object may fail to pickle, in any way: it stays behind)
            cloudpickle.dumps(value)
            state[key] = value
    for args in (error.args, (str(error),)):
        with contextlib.suppress(Exception):  # (the args may not pickle: then its message; its class: None)
            blob = cloudpickle.dumps((type(error), args, state))
            # Re-created without the attributes left behind, it must still be shown: a __str__ that reads one of
            # them (as many libraries' errors format themselves) would fail wherever it is shown, and the error is
            # then better sent as its text (None: the caller's TrialError, with the message). Its text may differ
            # (an object's address in it): the class matters more, for ``catch``
            made = unpickle_exception(pickle.dumps((None, blob)))
            if made is None:
                return None
            str(made)  # (raises where its __str__ reads an attribute left behind: then its message, below, or None)
            return blob
    return None


def unpickle_exception(blob: bytes | None) -> BaseException | None:
    """The exception :func:`pickle_exception` pickled, or None when there is none or it cannot be re-created here
    (its class is not importable in this process, ...).

    Args:
        blob: What :func:`pickle_exception` returned.

    Returns:
        The exception: unpickled whole, else made from its class, ``args`` and attributes without calling its
        ``__init__``; or None.
    """
    try:
        whole, parts = pickle.loads(blob) if blob is not None else (None, None)
    except Exception:  # noqa: BLE001 - any pickle may fail to load, in any way: the error stays without its cause
        return None
    try:
        error = pickle.loads(whole) if isinstance(whole, bytes) else None
        if isinstance(error, BaseException):
            return error
    except Exception:  # noqa: BLE001 - e.g. an __init__ that takes other arguments than its args: the parts then
        pass
    try:
        cls, args, state = pickle.loads(parts) if isinstance(parts, bytes) else (None, (), {})
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            return None
        error = cls.__new__(cls, *args)
        error.__dict__.update(state)
        return error
    except Exception:  # noqa: BLE001 - a class of its own __new__, or of no __dict__: no cause
        return None


def plural(n: int, word: str, plural: str | None = None) -> str:
    """``1 trial``, ``2 trials`` (for messages); ``plural`` where adding an s is wrong (``switches``)."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def error_summary(error: BaseException | str | None) -> str:
    """The line that says what a trial's error is, as the console, ``fluidsalus inspect`` and ``tune.run``'s
    ``TuneError`` show it: the first line of its device's error text (``ValueError: <message's first line>``).
    The last line, shown before, was a multi-line message's last line without the type, or an exception's note
    (``add_note``) in place of the exception; the whole text and the traceback are in the full error.

    Args:
        error: The error text as the store keeps it, or a :class:`TrialError` (its ``error_text``), or None.

    Returns:
        The line, or ``""`` when there is no text.
    """
    text = getattr(error, "error_text", None) if isinstance(error, BaseException) else error
    if text is None and error is not None:
        text = str(error)
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if lines and lines[0].startswith(_TRACEBACK_HEADER):  # a whole traceback: its exception's line, after the frames
        lines = [line for line in lines[1:] if not line[:1].isspace()] or lines
    return lines[0].strip() if lines else ""


#: The first line of a Python traceback (``traceback.format_exc()``).
_TRACEBACK_HEADER = "Traceback (most recent call last)"


def trial_failure(trial_name: str, error_text: str | None, traceback: str | None,
                  cause_pickle: bytes | None = None) -> TrialError:
    """The error of a trial that failed, as its :class:`~fluidsalus.result.Result` and its folder's ``error.pkl`` give
    it: ``Trial <name> failed: <error>`` and then the traceback (see :func:`trial_error`).

    Args:
        trial_name: The trial as the run's lines name it: the name the run gave it (the Tune front end's
            ``<trainable>_<id>``), else its id.
        error_text: The trial's error as its device recorded it (``ValueError: ...``).
        traceback: The error's traceback, where one was recorded.
        cause_pickle: The exception the trial raised, as its device pickled it, where it could.
    """
    return trial_error(f"Trial {trial_name} failed: {error_text}\n{traceback or ''}".rstrip(), error_text,
                       cause_pickle)


def trial_error(message: str, error_text: str | None, cause_pickle: bytes | None = None) -> TrialError:
    """The error of a failed trial, as a :class:`TrialError` that is also an instance of the exception the trial
    raised when the driver has that type (``isinstance(result.error, ValueError)`` holds, as it does for Ray's
    ``RayTaskError(ValueError)``); a plain :class:`TrialError` otherwise. Its ``cause`` is that exception, when
    ``cause_pickle`` gives it.

    Args:
        message: The error's message.
        error_text: The trial's error as its device recorded it (``ValueError: ...``), which names the type.
        cause_pickle: The exception, as its device pickled it (kept with the error, which pickles with it).
    """
    cause = unpickle_exception(cause_pickle)
    cause_type = type(cause) if isinstance(cause, Exception) else _exception_type(error_text)
    cls = (_typed_trial_error(cause_type) if cause_type is not None and not issubclass(cause_type, TrialError)
           else None)
    error: TrialError | None = None
    if cls is not None:
        try:
            error = cls(message)
        except Exception:  # noqa: BLE001 - a type of its own __new__ (ExceptionGroup's, a user's): a plain one
            error = None
    if error is None:
        error = TrialError(message)
    error.error_text = error_text  # type: ignore[attr-defined]
    if cause_pickle is not None:
        error.cause_pickle = cause_pickle  # type: ignore[attr-defined]
    if cause is not None:
        error.cause = cause
    return error
