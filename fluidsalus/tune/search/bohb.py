"""``TuneBOHB`` (``ray.tune.search.bohb.TuneBOHB``) as a configuration holder.

fluidsalus's BOHB is built in (no hpbandster or ConfigSpace needed). With
:class:`~fluidsalus.tune.schedulers.HyperBandForBOHB` it maps onto :class:`fluidsalus.searchers.SyncBOHB`
(BOHB's model over synchronous HyperBand, Falkner et al.); with
:class:`~fluidsalus.tune.schedulers.AsyncHyperBandScheduler` onto :class:`fluidsalus.searchers.BOHB` (the
model over ASHA).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.tune._domains import translate_ray_values
from fluidsalus.tune.search._holders import Searcher

__all__ = ["BOHB_CONFIG_KEYS", "TuneBOHB"]

#: ``bohb_config`` keys (hpbandster's ``BOHB`` configuration generator) -> fluidsalus BOHB/SyncBOHB argument.
BOHB_CONFIG_KEYS: dict[str, str] = {
    "min_points_in_model": "min_points_in_model",
    "top_n_percent": "top_n_percent",
    "num_samples": "num_candidates",
    "random_fraction": "random_fraction",
    "bandwidth_factor": "bandwidth_factor",
    "min_bandwidth": "min_bandwidth",
}


class TuneBOHB(Searcher):
    """BOHB's model-based proposals (``ray.tune.search.bohb.TuneBOHB``).

    Args:
        space: The search space as a dict of fluidsalus domains (Ray's converts it to a ConfigSpace). None:
            use ``param_space``. A ``ConfigSpace.ConfigurationSpace`` is refused: fluidsalus does not depend
            on ConfigSpace.
        bohb_config: hpbandster's BOHB settings: ``min_points_in_model``, ``top_n_percent``, ``num_samples``
            (candidates per proposal), ``random_fraction``, ``bandwidth_factor``, ``min_bandwidth``.
        metric: The result key to optimise.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configurations to propose first, in order; each counts as one of ``num_samples``
            (as in Ray). A partial point gets the parameters it leaves out from a regular proposal (Ray's
            TuneBOHB would pass it on partial).
        seed: Seed of the model's proposals and random draws.
        max_concurrent: Trials running at once (0: no cap).
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        bohb_config: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        seed: int | None = None,
        max_concurrent: int = 0,
    ) -> None:
        super().__init__(metric, mode)
        owner = type(self).__name__
        if space is not None and not isinstance(space, Mapping):
            raise ConfigError(
                f"{owner}: space must be None or a dict of fluidsalus domains; a {type(space).__name__} (such as "
                "a ConfigSpace.ConfigurationSpace) is not supported, because fluidsalus's BOHB does not use "
                "ConfigSpace. Write the space with tune.uniform/tune.choice/..."
            )
        config = dict(bohb_config or {})
        unknown = sorted(set(config) - set(BOHB_CONFIG_KEYS))
        if unknown:
            raise ConfigError(
                f"{owner}: bohb_config keys {unknown} are not known; allowed: {sorted(BOHB_CONFIG_KEYS)}"
            )
        if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0):
            raise ConfigError(f"{owner}: seed must be None or an int >= 0 (got {seed!r})")
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, numbers.Integral) or max_concurrent < 0:
            raise ConfigError(f"{owner}: max_concurrent must be an int >= 0 (0: no cap) (got {max_concurrent!r})")
        self.space = None if space is None else translate_ray_values(dict(space), f"{owner}.space")
        self.bohb_config = config
        self.points_to_evaluate = list(points_to_evaluate or [])
        self.seed = seed
        self.max_concurrent = int(max_concurrent)

    def own_space(self) -> dict[str, Any] | None:
        return self.space or None

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """Ray's hook: take ``metric``/``mode`` unless it has its own (then False); ``Tuner.fit()`` gives it
        ``param_space`` (and TuneConfig's metric and mode take the place of its own there, as in Ray)."""
        return self._take_metric_mode(metric, mode)

    def model_kwargs(self) -> dict[str, Any]:
        """``bohb_config`` as fluidsalus BOHB/SyncBOHB keyword arguments."""
        return {BOHB_CONFIG_KEYS[key]: value for key, value in self.bohb_config.items()}

    def describe(self) -> dict[str, Any]:
        return {"space": self.space, "bohb_config": self.bohb_config, **super().describe(),
                "points_to_evaluate": self.points_to_evaluate, "seed": self.seed,
                "max_concurrent": self.max_concurrent}
