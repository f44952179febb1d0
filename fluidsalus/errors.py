"""Errors raised at fluidsalus's public boundary.

Every error that comes from bad user input is a :class:`ConfigError` (a ``ValueError``), and its message
names the field that is wrong and what is allowed, so a user can fix the call without reading our code.
"""

from __future__ import annotations


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
