"""Random and grid search over a search space (Ray Tune's BasicVariantGenerator semantics).

Besides :class:`RandomSearch`, this module holds what every searcher that draws configurations "the Ray way"
shares:

* :func:`point_assignments` checks one entry of ``points_to_evaluate`` against the space and returns the values
  it fixes (Ray's rules: a key the space does not have is an error; a value outside its domain, or different
  from the constant it replaces, is used anyway, with a warning);
* :class:`VariantStream` yields the configurations lazily: first each point with the parameters it leaves out
  drawn from the space (a point over a grid gives one configuration per remaining grid point), then the
  regular samples. One random generator draws everything, in that order, as Ray's ``BasicVariantGenerator``
  does, so an integer seed gives Ray's configurations. Each point counts as one of ``num_samples``; points
  beyond ``num_samples`` still run (Ray's rule).
"""

from __future__ import annotations

import copy
import math
import numbers
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError, SpaceError
from fluidsalus.searchers._base import BaseSearcher, check_saved_state
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["ENDLESS_FIRST_BATCH", "RandomSearch", "VariantStream", "apply_point", "point_assignments"]

#: With ``num_samples=-1`` (an endless search), the first batch of fresh trials: enough to keep every lane of
#: a few devices busy; afterwards one new trial is proposed for each trial that ends. Searchers that keep a
#: number of trials live (ASHA, BOHB) use it as that number when no concurrency cap is given.
ENDLESS_FIRST_BATCH = 16

#: A key path inside a configuration.
Path = tuple[str, ...]


def _path_text(path: Path) -> str:
    return sp.PATH_SEPARATOR.join(path)


def _nested_point(owner: str, index: int, point: Any) -> dict[str, Any]:
    """A point as a nested dict; ``"/"``-joined keys (as Optuna and TuneBOHB take them) are unflattened."""
    if not isinstance(point, Mapping):
        raise ConfigError(f"{owner}: points_to_evaluate[{index}] must be a dict, got {type(point).__name__}")
    if any(isinstance(key, str) and sp.PATH_SEPARATOR in key for key in point):
        try:
            return sp.unflatten(dict(point))
        except ConfigError as exc:
            raise ConfigError(f"{owner}: points_to_evaluate[{index}]: {exc}") from exc
    return dict(point)


def _value_fits(target: Any, value: Any) -> bool:
    """Whether a point's ``value`` is one that ``target`` (a domain, grid or constant) could produce."""
    if isinstance(target, sp.Float):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and target.lower <= value <= target.upper
    if isinstance(target, sp.Integer):
        low, high, step = target.inclusive_bounds()
        return isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer() \
            and low <= value <= high and (int(value) - low) % step == 0
    if isinstance(target, sp.Categorical):
        return any(value == category for category in target.categories)
    if isinstance(target, dict) and sp.GRID_SEARCH_KEY in target and len(target) == 1:
        return any(value == choice for choice in target[sp.GRID_SEARCH_KEY])
    if isinstance(target, sp.Domain):  # randn, sample_from: anything goes
        return True
    return bool(target == value)


#: What an unknown key's message tells the user to do, unless the searcher says otherwise.
DEFAULT_UNKNOWN_KEY_HINT = "add it to param_space"


def point_assignments(space: Mapping[str, Any], point: Any, owner: str, index: int,
                      unknown_key_hint: str = DEFAULT_UNKNOWN_KEY_HINT) -> list[tuple[Path, Any]]:
    """The values one entry of ``points_to_evaluate`` fixes, as ``(key path, value)`` pairs.

    A nested dict in the point descends into the same nested dict of the space; any other value replaces what
    the space holds at that key (a domain, a grid search, a constant or a whole sub-dict).

    Args:
        space: The search space.
        point: The point: a (possibly partial) configuration, nested or with ``"/"``-joined keys.
        owner: The search algorithm's name, for messages.
        index: The point's position in ``points_to_evaluate``, for messages.
        unknown_key_hint: The end of the message about a key the space does not have: what to do about it.

    Returns:
        The assignments, in the point's key order.

    Raises:
        ConfigError: The point is not a dict, or sets a key the space does not have (the message names it and
            the keys the space has there).

    Warns:
        UserWarning: A value outside its parameter's domain, or different from the constant it replaces (it is
            used anyway, as in Ray).
    """
    out: list[tuple[Path, Any]] = []

    def walk(space_node: Mapping[str, Any], point_node: Mapping[str, Any], path: Path) -> None:
        for key, value in point_node.items():
            child = (*path, key)
            if key not in space_node:
                where = f" under '{_path_text(path)}'" if path else ""
                raise ConfigError(
                    f"{owner}: points_to_evaluate[{index}] sets '{_path_text(child)}', which is not a key of the "
                    f"search space (keys{where}: {sorted(map(str, space_node))}); {unknown_key_hint}"
                )
            target = space_node[key]
            is_grid = isinstance(target, dict) and sp.GRID_SEARCH_KEY in target and len(target) == 1
            if isinstance(value, Mapping) and isinstance(target, dict) and target and not is_grid:
                walk(target, value, child)
                continue
            if not (isinstance(target, dict) and not is_grid) and not _value_fits(target, value):
                what = "the value" if not isinstance(target, (sp.Domain, dict)) else "the domain"
                warnings.warn(
                    f"{owner}: points_to_evaluate[{index}] sets '{_path_text(child)}' to {value!r}, which is not "
                    f"within {what} of the search space ({target!r}); it is used as given",
                    UserWarning,
                    stacklevel=4,
                )
            out.append((child, copy.deepcopy(value)))

    walk(space, _nested_point(owner, index, point), ())
    return out


def _set_path(config: dict[str, Any], path: Path, value: Any) -> None:
    node = config
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[path[-1]] = value


def apply_point(config: Mapping[str, Any], assignments: Sequence[tuple[Path, Any]]) -> dict[str, Any]:
    """A deep copy of ``config`` (a space or a configuration) with the point's values set.

    Args:
        config: The space or configuration.
        assignments: What :func:`point_assignments` returned.

    Returns:
        The new dict.
    """
    out = copy.deepcopy(dict(config))
    for path, value in assignments:
        _set_path(out, path, copy.deepcopy(value))
    return out


class VariantStream:
    """Configurations of a space drawn lazily: the points first, then ``num_samples`` minus the points samples.

    ASHA, HyperBand and BOHB draw from it too (without points, it yields what
    :func:`fluidsalus.space.iter_variants` yields for the same seed). Only the number drawn is state:
    :meth:`restore` draws the same configurations again.

    Args:
        space: The search space.
        num_samples: Samples (times the grid), ``>= 1``, or ``-1`` for an endless stream.
        seed: Seed of the one generator that draws every value; the same seed gives the same configurations.
        points: Checked points (:func:`point_assignments` of each), run first, in order.
        constant_grid_search: Draw the random values once per sample for every grid point
            (:func:`fluidsalus.space.iter_variants`).
    """

    def __init__(self, space: Mapping[str, Any], num_samples: int, seed: int | None,
                 points: Sequence[Sequence[tuple[Path, Any]]] = (), constant_grid_search: bool = False) -> None:
        self._space = copy.deepcopy(dict(space))
        self._num_samples = num_samples
        self._seed = seed
        self._points = [list(p) for p in points]
        self._constant = constant_grid_search
        self._iter: Iterator[dict[str, Any]] = self._generate()
        self._ahead: list[dict[str, Any]] = []
        self.drawn = 0

    def _generate(self) -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng(self._seed)
        for assignments in self._points:
            # The fixed values replace the domains, then the rest of the space resolves as one sample.
            yield from sp._variant_stream(apply_point(self._space, assignments), 1, rng, self._constant)
        if self._num_samples == sp.INFINITE_SAMPLES:
            remaining = sp.INFINITE_SAMPLES
        else:
            remaining = max(self._num_samples - len(self._points), 0)
        if remaining:
            yield from sp._variant_stream(copy.deepcopy(self._space), remaining, rng, self._constant)

    def has_more(self) -> bool:
        """Whether another configuration can be drawn (draws one ahead if needed)."""
        if not self._ahead:
            try:
                self._ahead.append(next(self._iter))
            except StopIteration:
                return False
        return True

    def take(self, count: int | None) -> list[dict[str, Any]]:
        """Draw up to ``count`` configurations (fewer when the stream ends; None: all that are left)."""
        if count is None and self._num_samples == sp.INFINITE_SAMPLES:
            raise ConfigError("an endless stream (num_samples=-1) cannot hand out all its configurations at once")
        out: list[dict[str, Any]] = []
        while (count is None or len(out) < count) and self.has_more():
            out.append(self._ahead.pop())
        self.drawn += len(out)
        return out

    def restore(self, drawn: int) -> None:
        """Start again from the seed and skip the ``drawn`` configurations already handed out."""
        self._iter, self._ahead, self.drawn = self._generate(), [], 0
        self.take(drawn)


def check_points(space: Mapping[str, Any], points: Any, owner: str,
                 unknown_key_hint: str = DEFAULT_UNKNOWN_KEY_HINT) -> list[list[tuple[Path, Any]]]:
    """Check ``points_to_evaluate`` against ``space`` (see :func:`point_assignments`).

    Args:
        space: The search space.
        points: None or a list of dicts.
        owner: The search algorithm's name, for messages.
        unknown_key_hint: See :func:`point_assignments`.

    Returns:
        The assignments of each point.

    Raises:
        ConfigError: ``points`` is not a list of dicts, or a point sets a key the space does not have.
    """
    if points is None:
        return []
    if isinstance(points, Mapping) or not isinstance(points, Sequence) or isinstance(points, (str, bytes)):
        raise ConfigError(f"{owner}: points_to_evaluate must be None or a list of dicts, got "
                          f"{type(points).__name__}")
    return [point_assignments(space, point, owner, index, unknown_key_hint) for index, point in enumerate(points)]


def count_trials(space: Mapping[str, Any], num_samples: int,
                 points: Sequence[Mapping[str, Any]] = ()) -> int | None:
    """How many configurations a :class:`VariantStream` of ``space`` yields: each point's grid, then the grid
    ``num_samples - len(points)`` times (Ray's ``BasicVariantGenerator`` count, its ``total_samples``).

    Args:
        space: The search space.
        num_samples: Samples per grid point (``-1``: endless).
        points: The points to evaluate first (their assignments, as :func:`check_points` gives them).

    Returns:
        The count, or None when a draw makes grids (a grid inside a ``choice``). An endless search counts as
        ``sys.maxsize`` samples, as Ray runs it (``num_samples=-1`` becomes ``sys.maxsize``): a count of at least
        ``sys.maxsize`` means endless.
    """
    if num_samples == sp.INFINITE_SAMPLES:
        num_samples = sys.maxsize
    total = 0
    for assignments in points:
        count = sp.count_variants(apply_point(space, assignments), 1)
        if count is None:
            return None
        total += count
    remaining = max(num_samples - len(points), 0)
    rest = sp.count_variants(space, remaining) if remaining else 0
    return None if rest is None else total + rest


class RandomSearch(BaseSearcher):
    """Samples ``num_samples`` configurations (times every grid point) as one TrialGroup of fresh trials.

    With ``points_to_evaluate``, those configurations run first (a partial point gets the parameters it leaves
    out from the space); each counts as one of ``num_samples``, and all of them run even when there are more
    points than samples (Ray's ``BasicVariantGenerator`` rules).

    With ``num_samples=-1`` (Ray Tune's "until stopped") the stream never ends: a first batch of
    :data:`ENDLESS_FIRST_BATCH`, then one new configuration per trial that ends. The run then ends by its
    time budget or a stopper's ``stop_all()``.

    With ``max_concurrent``, at most that many of its trials are live (proposed and not yet ended) at once, and
    each trial that ends makes room for the next configuration, as Ray's ``BasicVariantGenerator(max_concurrent=...)``
    creates its trials (the Tune front end passes ``max_concurrent_trials`` as it): a run that its time budget or
    ``stop_all()`` ends early holds only the trials it made, not every one of ``num_samples``. The configurations and
    their order are the same as without it.

    Args:
        space: The search space (constants, domains such as ``uniform(0, 1)``, ``grid_search([...])``).
        num_samples: Samples per grid point, as in Ray Tune (>= 1, or -1 for endless).
        seed: Seed of the sampler; the same seed gives the same configurations (Ray's, for the same
            ``random_state``).
        points_to_evaluate: Configurations to run first (nested dicts, possibly partial).
        constant_grid_search: Draw the random values once per sample and keep them for every grid point (Ray's
            ``BasicVariantGenerator(constant_grid_search=True)``).
        max_concurrent: None: every configuration goes out in the first :meth:`next_groups` (an endless search:
            as said above). An int: at most that many trials live at once; more are proposed as others end.

    Raises:
        ConfigError: ``space`` is not a dict, ``num_samples`` is not an int >= 1 or -1, ``seed`` is not None or
            an int >= 0, ``constant_grid_search`` is not a bool, ``max_concurrent`` is not None or an int >= 1, or
            a point is not a dict or sets a key the space does not have.
    """

    replayable = True  # its decisions depend on its state and the results alone (see BaseSearcher)

    def __init__(self, space: Mapping[str, Any], num_samples: int = 1, seed: int | None = None,
                 points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
                 constant_grid_search: bool = False, max_concurrent: int | None = None) -> None:
        if not isinstance(space, Mapping):  # (dict(5) raised a bare TypeError: "'int' object is not iterable")
            raise ConfigError(f"RandomSearch: space must be a dict of the search space (constants, domains such as "
                              f"uniform(0, 1), grid_search([...])); got {type(space).__name__}")
        if not isinstance(constant_grid_search, bool):  # (bool() took any value: "x" was True)
            raise ConfigError(f"RandomSearch: constant_grid_search must be True or False (got "
                              f"{constant_grid_search!r})")
        self.space = dict(space)
        try:  # (a bad count made a run that never ended: nothing to propose, and never finished)
            self.num_samples = sp.check_num_samples(num_samples)
            self.seed = sp.check_seed(seed)
        except SpaceError as e:
            raise ConfigError(f"RandomSearch: {e}") from None
        if max_concurrent is not None and (isinstance(max_concurrent, bool)
                                           or not isinstance(max_concurrent, numbers.Integral) or max_concurrent < 1):
            raise ConfigError(f"RandomSearch: max_concurrent must be None or an int >= 1 (got {max_concurrent!r})")
        self.constant_grid_search = constant_grid_search
        self.max_concurrent = None if max_concurrent is None else int(max_concurrent)
        self._points = check_points(self.space, points_to_evaluate, "RandomSearch")
        self.points_to_evaluate = [copy.deepcopy(dict(p)) for p in points_to_evaluate or []]
        self._proposed = 0  # configurations proposed so far
        self._ended = 0  # of those, trials told ended (on_trial_complete), each once
        # Ids of the trials added (on_trial_add) and not yet ended, while ends pace the search (_paced_by_ends): an
        # end is counted only for one of them, as Ray's BasicVariantGenerator counts its live trial ids, so the end
        # of a trial a restore runs again (Tuner.restore(restart_errored=True), whose first end was counted) frees
        # no room a second time. None: loaded from a state saved before they were kept (every end counts).
        self._live: set[str] | None = set()
        self._owed = ENDLESS_FIRST_BATCH  # endless mode without max_concurrent: configurations to propose next
        self._stream: VariantStream | None = None
        self._unpaced = False  # loaded from a state saved before max_concurrent paced the search (load_state_dict)

    @property
    def total_samples(self) -> int | None:
        """How many configurations the search runs (:func:`count_trials`: None when a draw makes grids)."""
        return count_trials(self.space, self.num_samples, self._points)

    def _config_stream(self) -> VariantStream:
        """The configurations, past those proposed already (a resumed search skips them)."""
        if self._stream is None:
            self._stream = VariantStream(self.space, self.num_samples, self.seed, self._points,
                                         self.constant_grid_search)
            self._stream.restore(self._proposed)
        return self._stream

    def _room(self) -> int | None:
        """How many new configurations may go out now (None: all that are left)."""
        if self.max_concurrent is not None and not self._unpaced:
            return self.max_concurrent - (self._proposed - self._ended)
        return self._owed if self.endless else None

    def next_groups(self) -> list[TrialGroup]:
        room = self._room()
        if (room is not None and room <= 0) or self.is_finished():
            return []
        configs = self._config_stream().take(room)
        if not configs:
            return []
        if (self.max_concurrent is None or self._unpaced) and self.endless:
            self._owed = 0
        group = TrialGroup(group_id=f"variants-{self._proposed}", configs=configs)
        self._proposed += len(configs)
        return [group]

    def _paced_by_ends(self) -> bool:
        """Whether trial ends make room for more configurations (a cap, or an endless stream)."""
        return self.max_concurrent is not None or self.endless

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        if self._live is not None and self._paced_by_ends():  # (else ends change nothing: no ids kept)
            self._live.add(trial_id)

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        if self._live is not None and self._paced_by_ends():
            if trial_id not in self._live:  # (an end told again: a trial a restore runs again, or one never added)
                return
            self._live.discard(trial_id)
        self._ended += 1
        if self.endless:
            self._owed += 1

    def is_finished(self) -> bool:
        if self.endless:
            return False
        if self._stream is None and self._proposed > 0:
            # (without drawing every configuration proposed again, as a resumed run's first call would)
            if self.max_concurrent is None or self._unpaced:
                return True  # everything went out in the first next_groups
            total = self.total_samples
            if total is not None:
                return self._proposed >= total
        return not self._config_stream().has_more()

    @property
    def endless(self) -> bool:
        """Whether ``num_samples`` is -1 (an endless stream)."""
        return self.num_samples == sp.INFINITE_SAMPLES

    def state_dict(self) -> dict[str, Any]:
        if self._unpaced:  # (a run saved before "ended" goes on as it began, in its format)
            return {"proposed": self._proposed, "owed": self._owed}
        state: dict[str, Any] = {"proposed": self._proposed, "ended": self._ended, "owed": self._owed}
        if self._live is not None and self._paced_by_ends():
            state["live"] = sorted(self._live)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # ("owed" and "ended" came later: a state saved before them has "proposed" alone, and a search that
        # proposed all its configurations at once; a subclass may save more fields)
        check_saved_state(state, type(self).__name__, required=("proposed",))
        self._proposed = int(state["proposed"])
        self._ended = int(state.get("ended", self._proposed))
        # A state saved before "ended" was kept comes from a search that did not pace its trials (its endless
        # stream went out 16 first, then one per end: its logged calls replay only so, and its live trials are not
        # known): it goes on unpaced.
        self._unpaced = "ended" not in state
        self._owed = int(state.get("owed", ENDLESS_FIRST_BATCH))
        # ("live" came later still: a paced state saved before it does not say which trials are live, so every end
        # counts, as it did then)
        live = state.get("live")
        self._live = {str(t) for t in live} if isinstance(live, list) else None if self._paced_by_ends() else set()
        self._stream = None  # (drawn again past the configurations proposed)
