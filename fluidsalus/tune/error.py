"""Ray's module path ``ray.tune.error``: ``TuneError`` (fluidsalus's :class:`~fluidsalus.errors.FluidsalusError`,
the base of every error fluidsalus raises)."""

from fluidsalus.errors import FluidsalusError as TuneError

__all__ = ["TuneError"]
