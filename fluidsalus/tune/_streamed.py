"""ASHA and HyperBand fed by a :class:`~fluidsalus.searchers._random.VariantStream`, for the Tune front end.

Ray's schedulers take their trials from ``BasicVariantGenerator``, so ``points_to_evaluate``, ``num_samples=-1``
and ``constant_grid_search`` work with them. fluidsalus's :class:`~fluidsalus.searchers.ASHA` and
:class:`~fluidsalus.searchers.HyperBand` draw their configurations through a replaceable stream
(``_config_stream``, their hook for subclasses); these subclasses hand them a stream that yields the points
first and, with ``num_samples=-1``, never ends. An endless ASHA keeps at most ``max_concurrent`` trials live
(:data:`~fluidsalus.searchers._random.ENDLESS_FIRST_BATCH` when the run sets no cap), and an endless HyperBand
keeps at most ``max_concurrent_brackets`` brackets unfinished (:data:`ENDLESS_BRACKETS` when unset), so each
proposes new trials as others end until the run's time budget or a stopper ends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import ASHA, HyperBand
from fluidsalus.searchers._random import ENDLESS_FIRST_BATCH, VariantStream, check_points, count_trials

__all__ = ["ENDLESS_BRACKETS", "StreamedASHA", "StreamedHyperBand"]

#: An endless HyperBand without ``max_concurrent_brackets`` keeps this many brackets unfinished: the next
#: bracket's first rung fills the devices while the previous bracket's last, small rungs run.
ENDLESS_BRACKETS = 2


def _samples(owner: str, num_samples: Any) -> int:
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or (
            num_samples < 1 and num_samples != sp.INFINITE_SAMPLES):
        raise ConfigError(f"{owner}: num_samples must be an int >= 1, or {sp.INFINITE_SAMPLES} to sample until the "
                          f"run is stopped (got {num_samples!r})")
    return num_samples


class _Streamed:
    """What both classes add: the samples check, the endless cap and the variant stream with the points.

    Attributes:
        _cap_key: The parent's argument that caps live work, set when the run is endless and the user set none.
        _cap_default: Its value then.
    """

    replayable = True  # the stream is restored by the count drawn, as the parents' own

    _cap_key: str
    _cap_default: int

    def __init__(self, space: Mapping[str, Any], num_samples: int, metric: str, mode: str, *,
                 points_to_evaluate: list[dict[str, Any]] | None = None, constant_grid_search: bool = False,
                 **kwargs: Any) -> None:
        samples = _samples(self._owner, num_samples)  # type: ignore[attr-defined]
        endless = samples == sp.INFINITE_SAMPLES
        if endless and kwargs.get(self._cap_key) is None:
            kwargs[self._cap_key] = self._cap_default
        # The parent counts samples only in its config stream, which this class replaces.
        super().__init__(space, 1 if endless else samples, metric, mode, **kwargs)  # type: ignore[call-arg]
        self.num_samples = samples
        self.points_to_evaluate = list(points_to_evaluate or [])
        self._points = check_points(self.space, points_to_evaluate, "BasicVariantGenerator")  # type: ignore
        self.constant_grid_search = constant_grid_search

    @property
    def total_samples(self) -> int | None:
        """Ray's count: each point's grid, then the grid ``num_samples - len(points)`` times (None: endless)."""
        return count_trials(self.space, self.num_samples, self._points)  # type: ignore[attr-defined]

    def _config_stream(self) -> Any:
        if self._stream is None:  # type: ignore[has-type]
            self._stream = VariantStream(self.space, self.num_samples, self.seed, self._points,  # type: ignore
                                         self.constant_grid_search)
        return self._stream


class StreamedASHA(_Streamed, ASHA):
    """:class:`~fluidsalus.searchers.ASHA` with ``points_to_evaluate`` and ``num_samples=-1``.

    Args:
        space: The search space.
        num_samples: Samples (times the grid), or -1 to sample until the run is stopped.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configurations (possibly partial) to run first; each counts as one sample.
        **kwargs: ASHA's other arguments (``max_concurrent`` caps the live trials).
    """

    _cap_key, _cap_default = "max_concurrent", ENDLESS_FIRST_BATCH


class StreamedHyperBand(_Streamed, HyperBand):
    """:class:`~fluidsalus.searchers.HyperBand` with ``points_to_evaluate`` and ``num_samples=-1``.

    Args:
        space: The search space.
        num_samples: Samples (times the grid), or -1 to sample until the run is stopped.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configurations (possibly partial) to run first, in the first brackets; each counts
            as one sample.
        **kwargs: HyperBand's other arguments.
    """

    _cap_key, _cap_default = "max_concurrent_brackets", ENDLESS_BRACKETS
