"""The base of the search algorithms that wrap an outside optimizer with a ``suggest`` of their own
(``NevergradSearch``, ``ZOOptSearch``).

fluidsalus runs them as it runs a ``Searcher`` of the user's own (:mod:`fluidsalus.tune._custom_search`): asked
for one configuration per trial, told of each trial's end, and saved whole into Ray's
``searcher-state-<session>.pkl`` for a resume. What they share lives here: Ray's default metric, the check of
``points_to_evaluate``, the sign that turns a metric into a loss to minimize, and the saving (Ray's errors when
asked too early are the base ``Searcher``'s ``_check_ready``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ray import cloudpickle  # (Ray's: the standalone one names functions pickled by value <dynamic-code>)

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.tune._config import check_metric, check_mode
from fluidsalus.tune.search._holders import Searcher

__all__ = ["DEFAULT_METRIC", "OwnSuggestSearcher"]

#: The metric a searcher given only a mode optimizes (Ray's ``DEFAULT_METRIC``).
DEFAULT_METRIC = "_metric"


class OwnSuggestSearcher(Searcher):
    """A search algorithm around an outside optimizer, run through its own ``suggest``."""

    #: Run as a search algorithm with a ``suggest`` of its own (``_custom_search.is_custom_searcher``).
    RUNS_ITS_OWN_SUGGEST = True

    def _checked_points(self, points: Any) -> list[dict[str, Any]] | None:
        """``points_to_evaluate`` as a list of dicts (None stays None).

        Raises:
            ConfigError: It is not a list of config dicts.
        """
        if points is None:
            return None
        if isinstance(points, (str, bytes)) or not isinstance(points, Sequence) or not all(
                isinstance(point, Mapping) for point in points):
            raise ConfigError(f"{type(self).__name__}: points_to_evaluate must be a list of config dicts, got "
                              f"{type(points).__name__}")
        return [dict(point) for point in points]

    def _point_values(self, point: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
        """A point of ``points_to_evaluate`` (nested or ``"/"``-flattened) as ``{name: value}`` for ``names``.

        Raises:
            ConfigError: The point has no value for some of ``names``.
        """
        flat = sp.flatten_config(point)
        missing = [name for name in names if name not in flat]
        if missing:
            raise ConfigError(f"{type(self).__name__}: points_to_evaluate: {dict(point)!r} has no value for {missing}")
        return {name: flat[name] for name in names}

    def has_space(self) -> bool:
        """Whether it was given its search space itself (then, as Ray's, its ``set_search_properties`` refuses
        ``param_space`` and keeps its own metric and mode)."""
        raise NotImplementedError

    def _take_search_properties(self, metric: str | None, mode: str | None) -> None:
        """Ray's rule where it takes ``param_space``: ``TuneConfig``'s ``metric`` and ``mode``, where given, replace
        its own (Ray 2.60 then optimises ``TuneConfig``'s metric in ``TuneConfig``'s direction)."""
        if metric:
            self._metric = check_metric(type(self).__name__, metric)
        if mode:
            self._mode = check_mode(type(self).__name__, mode)

    def _take_default_metric(self) -> None:
        """With a mode and no metric, optimize Ray's ``"_metric"``."""
        if self._metric is None and self._mode:
            self._metric = DEFAULT_METRIC

    def _loss(self, value: float) -> float:
        """The metric as the loss the outside optimizer minimizes (negated under ``mode="max"``)."""
        return -float(value) if self._mode == "max" else float(value)

    @staticmethod
    def _config(values: Mapping[str, Any]) -> dict[str, Any]:
        """The optimizer's ``{"/"-joined path: value}`` as a nested config of Python values."""
        return sp.unflatten({key: sp.to_python(value) for key, value in values.items()})

    def save(self, checkpoint_path: str) -> None:
        """Pickle the whole search state (the optimizer and what is in flight) to ``checkpoint_path``, with
        cloudpickle: an outside optimizer may hold lambdas (ZOOpt's ``Parameter`` does), which pickle refuses."""
        with open(checkpoint_path, "wb") as file:
            cloudpickle.dump(self.__dict__, file)

    def restore(self, checkpoint_path: str) -> None:
        """Take back what :meth:`save` wrote."""
        with open(checkpoint_path, "rb") as file:
            self.__dict__.update(cloudpickle.load(file))
