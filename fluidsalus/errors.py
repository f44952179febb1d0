"""Errors raised at fluidsalus's public boundary.

Every error that comes from bad user input is a :class:`ConfigError` (a ``ValueError``), and its message
names the field that is wrong and what is allowed, so a user can fix the call without reading our code.
"""

from __future__ import annotations

import functools
import sys
from typing import Any


class FluidsalusError(Exception):
    """Base class of every error fluidsalus raises on purpose."""


class ConfigError(FluidsalusError, ValueError):
    """Invalid input to a public function: names the field and the allowed values."""


class SpaceError(ConfigError):
    """Invalid search space: names the parameter path and what is allowed."""


class StoreError(FluidsalusError):
    """An experiment store that cannot be opened or used (not a store, newer schema, ...)."""


class SessionError(FluidsalusError, RuntimeError):
    """A session function (``report``, ``get_checkpoint``, ...) was called outside a running trial."""


class TrialError(FluidsalusError):
    """Raised by :meth:`ResultGrid` helpers to carry the error of a failed trial."""


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
    make one (two exception types of incompatible layouts, such as an ``OSError``)."""
    try:
        return type(f"TrialError({cause.__name__})", (TrialError, cause), {
            "__init__": _typed_init, "__str__": _typed_str, "__reduce__": _typed_reduce,
            "__module__": __name__, "cause_type": cause})
    except TypeError:
        return None


def _typed_init(self: TrialError, message: str) -> None:
    Exception.__init__(self, message)  # not the cause's __init__, whose arguments are the cause's own


def _typed_str(self: TrialError) -> str:
    return str(self.args[0]) if self.args else ""


def _typed_reduce(self: TrialError) -> tuple[Any, ...]:
    return trial_error, (self.args[0] if self.args else "", getattr(self, "error_text", None))


def trial_failure(trial_id: str, error_text: str | None, traceback: str | None) -> TrialError:
    """The error of a trial that failed, as its :class:`~fluidsalus.result.Result` and its folder's ``error.pkl`` give
    it: ``Trial <id> failed: <error>`` and then the traceback (see :func:`trial_error`).

    Args:
        trial_id: The trial.
        error_text: The trial's error as its device recorded it (``ValueError: ...``).
        traceback: The error's traceback, where one was recorded.
    """
    return trial_error(f"Trial {trial_id} failed: {error_text}\n{traceback or ''}".rstrip(), error_text)


def trial_error(message: str, error_text: str | None) -> TrialError:
    """The error of a failed trial, as a :class:`TrialError` that is also an instance of the exception the trial
    raised when the driver has that type (``isinstance(result.error, ValueError)`` holds, as it does for Ray's
    ``RayTaskError(ValueError)``); a plain :class:`TrialError` otherwise.

    Args:
        message: The error's message.
        error_text: The trial's error as its device recorded it (``ValueError: ...``), which names the type.
    """
    cause = _exception_type(error_text)
    cls = _typed_trial_error(cause) if cause is not None and not issubclass(cause, TrialError) else None
    error = cls(message) if cls is not None else TrialError(message)
    error.error_text = error_text  # type: ignore[attr-defined]
    return error
