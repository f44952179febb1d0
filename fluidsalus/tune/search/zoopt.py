"""``ZOOptSearch`` (``ray.tune.search.zoopt.ZOOptSearch``): ZOOpt's ASRacos as a search algorithm.

ZOOpt (``pip install zoopt``) optimizes without gradients; its ``SRacosTune`` optimizer hands out solutions with
``suggest`` and learns from ``complete``. ``ZOOptSearch`` runs it as Ray's does, through fluidsalus's runner of
search algorithms with a ``suggest`` of their own (:mod:`fluidsalus.tune._custom_search`), so it pairs with no
scheduler, ASHA, HyperBand or the median stopping rule:

- ZOOpt first hands out its initial samples (``points_to_evaluate``, then random ones), waits until they have all
  ended, then keeps up to ``parallel_num`` trials in flight. After ``budget`` solutions the search is over
  (``Searcher.FINISHED``; Ray leaves that to ``num_samples``, which Ray asks to equal ``budget``). ZOOpt answers
  "FINISHED" itself when a sample repeats a solution it has tried; it is then asked again, up to
  :data:`REPEAT_TRIES` times, before the search ends (Ray ends it at once).
- Each trial's last ``metric`` is told to ZOOpt (negated under ``mode="max"``: ZOOpt minimizes). A trial that ends
  without the metric (an error before its first report) is told the worst value, so ZOOpt does not wait for it
  forever.
- The space is ``param_space`` (or ``dim_dict`` as ``tune.*`` domains), converted as Ray converts it:
  ``uniform`` (and ``quniform``: its ``q`` is ZOOpt's precision, and the value is then rounded to a multiple of
  ``q``, which Ray does not do: ZOOpt's precision is a number of decimal places) to a continuous dimension,
  ``randint`` to a discrete one between the bounds (upper excluded), ``choice`` to a grid one. ZOOpt samples
  neither a log scale nor a normal distribution, so ``loguniform``, ``lograndint``, ``randn``, ``sample_from`` and
  ``grid_search`` are a ``ConfigError`` naming the parameter. ``dim_dict`` may also be ZOOpt's own
  ``{name: (ValueType, ...)}``.
- Its state (the optimizer, pickled whole with cloudpickle: ZOOpt's ``Parameter`` holds a lambda, so Ray's plain
  pickle fails there) is saved into Ray's ``searcher-state-<session>.pkl`` in the experiment folder, so a resumed
  run goes on with ZOOpt where it was.

ZOOpt itself decides that the initial samples must all end before it suggests again; when the last of them was
handed out, ``ZOOptSearch`` takes ZOOpt's one "wait" answer at once, while that trial runs. (Taken later, after
the trial ended, ZOOpt would wait for an end that has already come, and the search would stall.)
"""

from __future__ import annotations

import copy
import numbers
import warnings
from collections.abc import Mapping
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.tune.search._own_suggest import OwnSuggestSearcher

__all__ = ["ZOOptSearch"]

#: ZOOpt's precision of a continuous dimension without a ``q`` (Ray's).
DEFAULT_PRECISION = 1e-12
#: The algorithms Ray's ZOOptSearch offers (both are ZOOpt's ``SRacosTune``).
ALGORITHMS = ("asracos", "sracos")
#: What ZOOpt is told of a trial that ended without the metric: the worst value in its minimization.
WORST = float("inf")
#: How many times ZOOpt is asked again when it answers "FINISHED" because its sample repeated a solution it had
#: tried (its state is unchanged then, and in a continuous space a new sample usually succeeds): measured, its
#: first sample after the initial ones repeats one when they were all told the same value.
REPEAT_TRIES = 10


def _zoopt() -> Any:
    try:
        import zoopt
    except ImportError as exc:
        raise ImportError("ZOOptSearch needs the zoopt package: pip install zoopt") from exc
    return zoopt


def convert_space(space: Mapping[str, Any], owner: str = "ZOOptSearch") -> dict[str, tuple[Any, ...]]:
    """A ``tune.*`` search space as ZOOpt's ``dim_dict``: ``{"/"-joined path: (ValueType, ...)}``.

    Raises:
        ConfigError: A grid, or a parameter ZOOpt cannot search, named by its path.
    """
    value_type = _zoopt().ValueType
    if sp.has_grid(space):
        raise ConfigError(f"{owner}: grid_search parameters cannot be converted to a ZOOpt search space (as in Ray); "
                          "use tune.choice")
    domains, _constants = sp.split_constants(dict(space))
    out: dict[str, tuple[Any, ...]] = {}
    for path, domain in domains.items():
        if isinstance(domain, sp.Float) and not domain.log:
            out[path] = (value_type.CONTINUOUS, [domain.lower, domain.upper], domain.q or DEFAULT_PRECISION)
        elif isinstance(domain, sp.Integer) and not domain.log:
            if domain.q is not None:
                warnings.warn(f"{owner}: {path}: ZOOpt's discrete dimensions have no step; {domain!r}'s q is dropped, "
                              "as Ray drops it", UserWarning, stacklevel=3)
            out[path] = (value_type.DISCRETE, [domain.lower, domain.upper - 1], True)
        elif isinstance(domain, sp.Categorical):
            out[path] = (value_type.GRID, list(domain.categories))
        else:
            raise ConfigError(f"{owner}: {path} is {domain!r}; ZOOpt searches tune.uniform/quniform/randint/choice "
                              "parameters only (no log scale, no normal distribution), as in Ray")
    return out


class ZOOptSearch(OwnSuggestSearcher):
    """Search with ZOOpt's ASRacos (Ray's ``ZOOptSearch``, with Ray's signature).

    Args:
        algo: ``"asracos"`` or ``"sracos"`` (any case): both run ZOOpt's ``SRacosTune``, as in Ray.
        budget: How many solutions ZOOpt evaluates in all (required).
        dim_dict: The space: ``tune.*`` domains or ZOOpt's own ``{name: (ValueType, ...)}``. None:
            ``param_space`` of the ``Tuner``.
        metric: The result key to optimize; with only a mode, ``"_metric"``.
        mode: ``"min"`` or ``"max"``.
        points_to_evaluate: Configs ZOOpt starts from (each gives every parameter).
        parallel_num: How many trials ZOOpt keeps in flight after its initial samples.
        **kwargs: Passed on to ZOOpt's optimizer, as in Ray.

    Raises:
        ImportError: zoopt is not installed.
        ConfigError: A bad argument, named.
    """

    def __init__(self, algo: str = "asracos", budget: int | None = None, dim_dict: dict[str, Any] | None = None,
                 metric: str | None = None, mode: str | None = None,
                 points_to_evaluate: list[dict[str, Any]] | None = None, parallel_num: int = 1,
                 **kwargs: Any) -> None:
        _zoopt()
        super().__init__(metric=metric, mode=mode)
        owner = type(self).__name__
        if not isinstance(algo, str) or algo.lower() not in ALGORITHMS:
            raise ConfigError(f"{owner}: algo must be one of {list(ALGORITHMS)}, got {algo!r}")
        if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1:
            raise ConfigError(f"{owner}: budget must be an int >= 1 (how many solutions ZOOpt evaluates; set "
                              f"num_samples to it), got {budget!r}")
        if isinstance(parallel_num, bool) or not isinstance(parallel_num, numbers.Integral) or parallel_num < 1:
            raise ConfigError(f"{owner}: parallel_num must be an int >= 1, got {parallel_num!r}")
        points = self._checked_points(points_to_evaluate)
        if dim_dict is not None and not isinstance(dim_dict, Mapping):
            raise ConfigError(f"{owner}: dim_dict must be a dict or None, got {type(dim_dict).__name__}")
        self._algo = algo.lower()
        self._budget = int(budget)
        self._parallel_num = int(parallel_num)
        self._kwargs = dict(kwargs)
        self._points_to_evaluate = copy.deepcopy(points)
        self._dim_dict: dict[str, Any] | None = None
        self._steps: dict[str, float] = {}  # path -> q of a quniform parameter, whose values are rounded to it
        self._keys: list[str] = []
        self._optimizer: Any = None
        self._handed_out = 0
        self._live: dict[str, Any] = {}
        if dim_dict:
            own = all(isinstance(v, tuple) for v in dim_dict.values())  # ZOOpt's own dimensions
            self._dim_dict = dict(dim_dict) if own else convert_space(dim_dict, owner)
            self._steps = {} if own else _steps(dim_dict)
            self._set_up()

    def _set_up(self) -> None:
        """Build ZOOpt's optimizer over ``_dim_dict``, with ``points_to_evaluate`` as its first samples."""
        zoopt = _zoopt()
        from zoopt.algos.opt_algorithms.racos.sracos import SRacosTune

        assert self._dim_dict is not None
        self._take_default_metric()
        self._keys = list(self._dim_dict)
        init_samples = None
        if self._points_to_evaluate:
            init_samples = [zoopt.Solution(x=list(self._point_values(point, self._keys).values()))
                            for point in self._points_to_evaluate]
        parameter = zoopt.Parameter(budget=self._budget, init_samples=init_samples)
        self._optimizer = SRacosTune(dimension=zoopt.Dimension2([self._dim_dict[key] for key in self._keys]),
                                     parameter=parameter, parallel_num=self._parallel_num, **self._kwargs)
        self._train_size = parameter.get_train_size()

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """As Ray's: with a ``dim_dict`` of its own, False (its own metric and mode are kept); else search
        ``config`` with ``TuneConfig``'s ``metric``/``mode`` in place of its own, where given, and True."""
        if self.has_space():
            return False
        self._take_search_properties(metric, mode)
        self._dim_dict = convert_space(config, type(self).__name__)
        self._steps = _steps(config)
        if not self._dim_dict:
            return True
        self._set_up()
        return True

    def has_space(self) -> bool:
        return bool(self._dim_dict)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """ZOOpt's next solution as a config, None while it waits for trials to end, or ``FINISHED``."""
        self._check_ready(self._optimizer is not None, "dim_dict")
        if self._handed_out >= self._budget:
            return self.FINISHED
        for _ in range(REPEAT_TRIES):
            solution = self._optimizer.suggest()
            if not (isinstance(solution, str) and solution == "FINISHED"):
                break
        else:
            return self.FINISHED  # ZOOpt found no solution it had not tried, REPEAT_TRIES times over
        if solution is None:
            return None
        self._live[trial_id] = solution
        self._handed_out += 1
        if self._handed_out == self._train_size:
            # ZOOpt's one "wait until the initial samples have ended", taken while the last of them runs (see the
            # module docstring).
            self._optimizer.suggest()
        values = dict(zip(self._keys, solution.get_x(), strict=True))
        for key, q in self._steps.items():  # ZOOpt's precision is decimal places: round to the domain's q
            values[key] = round(values[key] / q) * q
        return self._config(values)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Tell ZOOpt the trial's last metric (the worst value if it has none)."""
        solution = self._live.pop(trial_id, None)
        if solution is None:
            return
        value = result.get(self._metric) if result else None
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        self._optimizer.complete(solution, self._loss(value) if real else WORST)

    def describe(self) -> dict[str, Any]:
        return {"algo": self._algo, "budget": self._budget, "dim_dict": self._dim_dict, "metric": self._metric,
                "mode": self._mode, "parallel_num": self._parallel_num}


def _steps(space: Mapping[str, Any]) -> dict[str, float]:
    """``{path: q}`` of the space's ``quniform`` parameters."""
    domains, _ = sp.split_constants(dict(space))
    return {path: float(d.q) for path, d in domains.items() if isinstance(d, sp.Float) and d.q is not None}
