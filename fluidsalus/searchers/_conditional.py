"""A Tune space with a ``choice`` whose options hold domains, or with domains inside a list, searched define-by-run
as Ray's ``HyperOptSearch`` searches it.

Ray's ``HyperOptSearch`` converts ``tune.choice([{"a": tune.uniform(0, 1)}, {"b": 2}])`` at key ``x`` into HyperOpt's
``hp.choice("x", [{"a": hp.uniform("x/a", 0, 1)}, {"b": 2}])``: a conditional space, in which only the chosen
option's parameters are drawn. Optuna's ``CategoricalDistribution`` holds only plain values, so such a space is
searched define-by-run (:class:`ConditionalSpace` is called on each asked ``optuna.Trial``), with Ray's labels as
the names of the Optuna parameters:

- the choice at key path ``p``: the parameter ``p``, a ``CategoricalDistribution`` over the option indices
  ``0 .. n - 1`` (HyperOpt's ``hp.choice`` draws an index too);
- a parameter at key ``k`` of a dict option: ``p/k`` (nested: ``p/k/k2``), whichever option holds it, so that two
  options may not hold a parameter under the same key (HyperOpt refuses the label twice: ``DuplicateLabel``);
- an option that is a domain (``choice([tune.uniform(0, 1), 5])``): ``p/<index>``; a list option that holds
  domains: ``p/<index>/<position>`` (its value is a list; Ray's is a dict keyed by position);
- a domain inside a list or tuple of the space (``{"l": [tune.choice([32, 64]), tune.uniform(0, 1), 1]}``, which
  a flat space cannot name): its key path with the position, ``l/0``, ``l/1`` (nested: ``l/0/1``), Ray's label (its
  ``parse_spec_vars`` walks lists and tuples; Ray's ``OptunaSearch`` fails on such a space, and fluidsalus's refuses
  it with a ``SpaceError``);
- any other domain, wherever it is: its key path, with the distribution it has in a space without such a choice
  (:func:`fluidsalus.space.to_optuna_distribution`, or its transform, :mod:`fluidsalus.searchers._transformed`).

The configuration keeps the space's key order, except in the value of a chosen option and in lists, whose dicts
have their keys sorted as Ray's (HyperOpt's ``dict`` node sorts them). Every list and tuple of the space, constant or
holding domains, comes back a tuple, as from Ray's ``HyperOptSearch`` (HyperOpt's ``pos_args`` node makes a tuple of
a list); a list option of a choice that holds domains is a tuple too, where Ray's gives a dict keyed by position.

Pure logic: no Ray, no study.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError, SpaceError
from fluidsalus.searchers._transformed import QUANTILE_SUFFIX, GivenValues, TransformedParam, from_domain

__all__ = ["ConditionalSpace", "holds_conditional_choice", "holds_list_domains", "hyperopt_value"]


def _is_conditional(value: Any) -> bool:
    """Whether ``value`` is a ``choice`` one of whose options holds a domain (or a grid)."""
    return isinstance(value, sp.Categorical) and any(sp.holds_domains(option) for option in value.categories)


def holds_conditional_choice(space: Mapping[str, Any]) -> bool:
    """Whether ``space`` has a ``choice`` (at any depth of its dicts) one of whose options holds a domain."""
    return any(_is_conditional(domain) for domain in sp.split_constants(dict(space))[0].values())


def holds_list_domains(value: Any) -> bool:
    """Whether ``value`` (a space) has, in its dicts, a list or tuple that holds a domain or a grid search."""
    if isinstance(value, Mapping):
        return any(holds_list_domains(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sp.holds_domains(value)
    return False


def _join(label: str, key: Any) -> str:
    return f"{label}{sp.PATH_SEPARATOR}{key}" if label else str(key)


def _option_label(label: str, index: int, option: Any) -> str:
    """The label under which option ``index`` of the choice ``label`` names what it holds (Ray's)."""
    return label if isinstance(option, Mapping) else _join(label, index)


class ConditionalSpace:
    """A Tune space as a define-by-run function: ``space(trial)`` is the trial's whole configuration.

    Args:
        space: A search space (fluidsalus domains, nested dicts, constants) with a conditional ``choice``.
        owner: Names the search algorithm in the errors about points.

    Raises:
        SpaceError: A domain that has no Optuna distribution nor transform, a grid search in a choice's option,
            or a name that two parameters would have; the message names it.
    """

    #: It returns the trial's whole configuration (``fluidsalus.searchers.OptunaSearch`` adds no parameters).
    returns_whole_config = True

    def __init__(self, space: Mapping[str, Any], owner: str = "HyperOptSearch") -> None:
        self.space = dict(space)
        self.owner = owner
        #: The plain parameters' distributions and the transformed parameters, by label.
        self.distributions: dict[str, BaseDistribution] = {}
        self.transformed: dict[str, TransformedParam] = {}
        self._names: dict[str, str] = {}  # Optuna parameter name -> the label of the parameter it is
        self._given = GivenValues()  # the values points_to_evaluate gave the transformed parameters
        self._collect(self.space, "")

    def _collect(self, value: Any, label: str) -> None:
        """Find every parameter of every option, each with its distribution; refuse a name used twice."""
        if isinstance(value, Mapping):
            if sp.GRID_SEARCH_KEY in value and len(value) == 1:
                raise SpaceError(f"parameter '{label}': a grid search in an option of a choice or in a list cannot "
                                 "be searched (as in Ray's HyperOptSearch); use tune.choice")
            for key, item in value.items():
                self._collect(item, _join(label, key))
        elif isinstance(value, (list, tuple)):
            for position, item in enumerate(value):
                self._collect(item, _join(label, position))
        elif _is_conditional(value):
            self._add(label, label, CategoricalDistribution(tuple(range(len(value.categories)))))
            for index, option in enumerate(value.categories):
                self._collect(option, _option_label(label, index, option))
        elif isinstance(value, sp.Domain):
            transformed = from_domain(label, value)
            if transformed is None:
                self._add(label, label, sp.to_optuna_distribution(label, value))
            else:
                self._add(label, transformed.optuna_name, transformed.distribution)
                self.transformed[label] = transformed

    def _add(self, label: str, name: str, distribution: BaseDistribution) -> None:
        other = self._names.get(name)
        if other == label:
            raise SpaceError(f"parameter '{label}': two options of a choice hold a parameter under this key, and "
                             "HyperOpt needs every label to be unique (Ray's HyperOptSearch fails with "
                             "DuplicateLabel); rename one")
        if other is not None:
            raise SpaceError(f"parameters '{other}' and '{label}' would both be the Optuna parameter '{name}' (a "
                             f"normal is searched as its quantile, '<key>{QUANTILE_SUFFIX}'); rename one")
        self._names[name] = label
        if name == label:
            self.distributions[label] = distribution

    # ------------------------------------------------------------------ a trial's configuration

    def __call__(self, trial: Any) -> dict[str, Any]:
        return self._value(self.space, "", trial)

    def _value(self, value: Any, label: str, trial: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: self._value(item, _join(label, key), trial) for key, item in value.items()}
        if isinstance(value, (list, tuple)):  # a tuple, its dicts' keys sorted, as HyperOpt evaluates a list
            return tuple(_sorted_dicts(self._value(item, _join(label, position), trial))
                         for position, item in enumerate(value))
        if _is_conditional(value):
            index = trial.suggest_categorical(label, list(range(len(value.categories))))
            option = value.categories[index]
            return _sorted_dicts(self._value(option, _option_label(label, index, option), trial))
        if isinstance(value, sp.Domain):
            transformed = self.transformed.get(label)
            if transformed is not None:  # (a rounded log scale is asked on its log scale, as the flat space asks it)
                param = _suggest(trial, transformed.optuna_name, transformed.distribution)
                return self._given.value(transformed, param)
            return _suggest(trial, label, self.distributions[label])
        return sp.to_python(copy.deepcopy(value))

    # ------------------------------------------------------------------ points to evaluate

    def point_params(self, index: int, point: Mapping[str, Any]) -> dict[str, Any]:
        """A ``points_to_evaluate`` entry (nested or ``"/"``-flattened, possibly partial) as the trial's Optuna
        parameters, by name: a conditional choice's value is matched to the first option that can produce it
        (an option's dict may leave out keys), whose index it gives, and its parameters take the value's.

        Raises:
            ConfigError: A key the space does not have, a value no option of a choice produces, a value outside
                its parameter's range, or one that differs from the space's constant; the message names it.
        """
        try:
            nested = sp.unflatten(sp.flatten_config(point))
        except SpaceError as exc:
            raise ConfigError(f"{self.owner}: points_to_evaluate[{index}]: {exc}") from exc
        params: dict[str, Any] = {}
        try:
            self._point(nested, self.space, "", params)
        except ValueError as exc:
            raise ConfigError(f"{self.owner}: points_to_evaluate[{index}]: {exc}") from exc
        return params

    def _point(self, value: Any, node: Any, label: str, out: dict[str, Any]) -> None:
        """Put in ``out`` the parameters that make ``node`` (at ``label``) produce ``value``; raise ValueError
        naming the label when it cannot."""
        if isinstance(node, Mapping):
            if not isinstance(value, Mapping):
                raise ValueError(f"'{label}' = {value!r} is not a dict of the space's keys {list(node)}")
            for key, item in value.items():
                if key not in node:
                    raise ValueError(f"'{_join(label, key)}' is not a key of the space")
                self._point(item, node[key], _join(label, key), out)
        elif isinstance(node, (list, tuple)) and sp.holds_domains(node):
            if isinstance(value, Mapping):  # by position, some of them: {"l/1": 0.5} (Ray's labels), unflattened
                for key, item in value.items():
                    position = _position(key, len(node))
                    if position is None:
                        raise ValueError(f"'{_join(label, key)}' is not a position of the list at '{label}' (0 to "
                                         f"{len(node) - 1})")
                    self._point(item, node[position], _join(label, position), out)
                return
            if not isinstance(value, (list, tuple)) or len(value) != len(node):
                raise ValueError(f"'{label}' = {value!r} is not a list of {len(node)} values")
            for position, (item, child) in enumerate(zip(value, node, strict=True)):
                self._point(item, child, _join(label, position), out)
        elif _is_conditional(node):
            for index, option in enumerate(node.categories):
                params: dict[str, Any] = {}
                try:
                    self._point(value, option, _option_label(label, index, option), params)
                except ValueError:
                    continue
                out[label] = index
                out.update(params)
                return
            raise ValueError(f"'{label}' = {value!r} is not a value any option of {node!r} can take")
        elif isinstance(node, sp.Domain):
            transformed = self.transformed.get(label)
            if transformed is not None:
                try:
                    out[transformed.optuna_name] = self._given.param(transformed, value)
                except ValueError as exc:
                    raise ValueError(f"'{label}' = {value!r} is outside the parameter's range ({exc})") from exc
                return
            distribution = self.distributions[label]
            if not _contains(distribution, value):
                raise ValueError(f"'{label}' = {value!r} is outside the parameter's range {distribution}")
            out[label] = value
        elif _as_lists(value) != _as_lists(node):
            raise ValueError(f"'{label}' = {value!r} but the space fixes it to {node!r}")


def _as_lists(value: Any) -> Any:
    """``value`` with its tuples made lists (a point may give a constant list as the tuple a config holds)."""
    if isinstance(value, (list, tuple)):
        return [_as_lists(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _as_lists(item) for key, item in value.items()}
    return value


def hyperopt_value(value: Any) -> Any:
    """A constant of the space as Ray's ``HyperOptSearch`` gives it: its lists and tuples tuples (HyperOpt's
    ``pos_args``), the dicts inside them with their keys sorted (HyperOpt's ``dict`` node); other dicts keep their
    order (Ray's Tuner merges the suggestion into the space's dicts)."""
    if isinstance(value, Mapping):
        return {key: hyperopt_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_sorted_dicts(hyperopt_value(item)) for item in value)
    return value


def _position(key: Any, length: int) -> int | None:
    """The list position a point's key names (``1`` or ``"1"``), or None if it names none of ``0 .. length - 1``."""
    if isinstance(key, bool):
        return None
    if isinstance(key, str) and key.isdigit():
        key = int(key)
    return key if isinstance(key, int) and 0 <= key < length else None


def _sorted_dicts(value: Any) -> Any:
    """``value`` with the keys of its dicts (at any depth) sorted, as the value of a chosen option comes from Ray's
    ``HyperOptSearch`` (HyperOpt's ``dict`` node sorts its keys); a dict whose keys cannot be compared keeps its
    order."""
    if isinstance(value, dict):
        try:
            keys = sorted(value)
        except TypeError:
            keys = list(value)
        return {key: _sorted_dicts(value[key]) for key in keys}
    if isinstance(value, list):
        return [_sorted_dicts(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_sorted_dicts(item) for item in value)
    return value


def _contains(distribution: BaseDistribution, value: Any) -> bool:
    try:
        return bool(distribution._contains(distribution.to_internal_repr(value)))
    except (TypeError, ValueError):
        return False


def _suggest(trial: Any, name: str, distribution: BaseDistribution) -> Any:
    """``trial.suggest_*`` for ``distribution`` under ``name``."""
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, list(distribution.choices))
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step,
                                 log=distribution.log)
    return trial.suggest_float(name, distribution.low, distribution.high,  # type: ignore[attr-defined]
                               step=distribution.step, log=distribution.log)  # type: ignore[attr-defined]
