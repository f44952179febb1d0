"""Search algorithms with Ray Tune's names (``ray.tune.search``).

- :class:`BasicVariantGenerator`: random and grid search (the default);
- :class:`ConcurrencyLimiter`: caps the trials running at once;
- :class:`~fluidsalus.tune.search.bohb.TuneBOHB`: BOHB (``from fluidsalus.tune.search.bohb import TuneBOHB``);
- :class:`~fluidsalus.tune.search.optuna.OptunaSearch`: Optuna's samplers
  (``from fluidsalus.tune.search.optuna import OptunaSearch``).

They hold their arguments; ``Tuner.fit()`` turns them, with the scheduler, into one fluidsalus searcher.
"""

from fluidsalus.tune.search._holders import BasicVariantGenerator, ConcurrencyLimiter, SearchAlgorithm, Searcher

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "SearchAlgorithm", "Searcher"]
