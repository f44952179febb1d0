"""HyperOpt's own search spaces (``hp.*`` expressions) searched through an Optuna trial, define-by-run.

A HyperOpt space is a graph of ``hyperopt.pyll`` nodes: each ``hp.*`` call is a ``hyperopt_param(label, dist)``
node (wrapped in ``float``/``int``), ``hp.choice`` is a ``switch`` over its options, and nested dicts, lists and
arithmetic are nodes too. :class:`HyperOptSpace` walks that graph on an Optuna trial, as HyperOpt's own sampler
walks it: each ``hyperopt_param`` is one ``trial.suggest_*`` under its label, a ``switch`` suggests its index and
walks only the chosen option (so the space is conditional), and every other node is computed by HyperOpt's own
implementation from its evaluated arguments. The result is the configuration HyperOpt would hand the trainable: its
dicts with their keys sorted (HyperOpt's ``dict`` node), its lists and tuples as tuples (its ``pos_args`` node).

An argument of a distribution may be a parameter itself (``hp.normal("a", 0, hp.uniform("s", 0.1, 1))``): it is
suggested in the trial first, then the distribution with the value drawn, as HyperOpt draws them. A uniform or
randint whose bounds are drawn then has its trial's bounds as its Optuna distribution (Optuna allows a parameter's
bounds to change between trials; TPE fits each suggestion on the current bounds); a normal's quantile keeps its
bounds. Drawn arguments the distribution cannot take are a ``ConfigError`` at that trial's suggestion, and a point
cannot give the value of a normal whose arguments are drawn (its quantile depends on them).

The distributions map onto Optuna's: ``uniform`` and ``loguniform`` (HyperOpt's bounds are of ``log(value)``) to
``suggest_float``, ``quniform``/``qloguniform`` to the same rounded to ``q`` as HyperOpt rounds, ``randint`` to
``suggest_int`` (upper bound excluded), ``choice`` and ``pchoice`` to ``suggest_categorical`` over the option
indices (``pchoice``'s probabilities are not used, with a warning). Optuna has no normal distribution, so
``normal``, ``qnormal``, ``lognormal`` and ``qlognormal`` suggest the value's quantile in (0, 1) under
``<label>:quantile`` and map it through the normal's inverse CDF (``exp`` of it for a lognormal, rounded to ``q``
as HyperOpt rounds): :mod:`fluidsalus.searchers._transformed`. A ``sigma`` of 0 gives ``mu`` every time (as
HyperOpt's random draws); a negative ``sigma``, a ``q <= 0``, and a label named as a normal's ``<label>:quantile``
are refused when the space is built.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

from fluidsalus.errors import ConfigError
from fluidsalus.searchers._transformed import QUANTILE_SUFFIX, GivenValues, TransformedParam, check_step, round_to

__all__ = ["HyperOptSpace", "is_hyperopt_expression"]

#: HyperOpt's normal distributions, each sampled through its quantile, by the kind of transform they are.
_NORMALS = {"normal": "normal", "qnormal": "normal", "lognormal": "lognormal", "qlognormal": "lognormal"}
#: HyperOpt's uniform distributions rounded to ``q``.
_ROUNDED = ("quniform", "qloguniform")
#: The arguments of HyperOpt's distributions in their order, as ``hyperopt.pyll.stochastic`` names them: one given
#: by name (``hp.normal("a", mu=0, sigma=1)``, ``hp.uniformint("n", 1, high=10)``) takes its place among them.
_ARGUMENTS = {"uniform": ("low", "high"), "quniform": ("low", "high", "q"), "loguniform": ("low", "high"),
              "qloguniform": ("low", "high", "q"), "normal": ("mu", "sigma"), "qnormal": ("mu", "sigma", "q"),
              "lognormal": ("mu", "sigma"), "qlognormal": ("mu", "sigma", "q"), "randint": ("low", "high"),
              "categorical": ("p",)}


def is_hyperopt_expression(value: Any) -> bool:
    """Whether ``value`` is, or holds in a dict or list, a HyperOpt ``pyll`` expression."""
    if isinstance(value, dict):
        return any(is_hyperopt_expression(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(is_hyperopt_expression(v) for v in value)
    return type(value).__module__.split(".")[0] == "hyperopt"


def _hyperopt(owner: str) -> Any:
    try:
        import hyperopt.pyll
    except ImportError as exc:
        raise ConfigError(f"{owner}: space holds HyperOpt's own hp.* expressions, which need the hyperopt package "
                          "(pip install hyperopt); or write it with fluidsalus.tune's uniform/loguniform/choice/"
                          "randint/..., which Ray's HyperOptSearch accepts too") from exc
    return hyperopt.pyll


class HyperOptSpace:
    """A HyperOpt space as a define-by-run function: ``space(trial)`` is the trial's whole configuration.

    Args:
        space: A dict whose values may be ``hp.*`` expressions (nested dicts and lists of them too).
        owner: Names the caller in errors.

    Raises:
        ConfigError: hyperopt is not installed, or a label names two parameters.
    """

    #: It returns the trial's whole configuration (``fluidsalus.searchers.OptunaSearch`` adds no parameters).
    returns_whole_config = True

    def __init__(self, space: Mapping[str, Any], owner: str = "HyperOptSearch") -> None:
        self._pyll = _hyperopt(owner)
        self.owner = owner
        self.space = dict(space)
        self.labels: dict[str, Any] = {}  # label -> its hyperopt_param node (a label names one parameter)
        self._given = GivenValues()  # the values points_to_evaluate gave the normal parameters
        self._collect(self.space)
        for label, node in self.labels.items():
            self._check(label, node.pos_args[1])
        #: The labels of the parameters an argument of which is a parameter itself (drawn first in each trial).
        self.drawn_arguments = {label for label, node in self.labels.items() if self._drawn_arguments(node.pos_args[1])}

    def _check(self, label: str, dist: Any) -> None:
        """Refuse, when the space is built, a distribution HyperOpt cannot draw from (a normal's ``sigma < 0``, a
        ``q <= 0``) and a normal whose quantile's name ``<label>:quantile`` is another parameter's label."""
        if dist.name in _NORMALS and label + QUANTILE_SUFFIX in self.labels:
            raise ConfigError(f"{self.owner}: hp.{dist.name}({label!r}, ...) is searched as its quantile, the Optuna "
                              f"parameter '{label}{QUANTILE_SUFFIX}', which is also the label of another parameter "
                              "of the space; rename that label")
        if self._drawn_arguments(dist):
            return  # its arguments are parameters themselves: checked once drawn, in each trial (_suggest)
        try:
            if dist.name in _NORMALS:
                self._normal(label, dist)
            elif dist.name in _ROUNDED:
                check_step(float(self._args(dist)[1]))
        except (TypeError, ValueError) as exc:
            args, _ = self._args(dist)
            given = ", ".join(f"{name}={value!r}" for name, value in zip(_ARGUMENTS[dist.name], args, strict=False))
            raise ConfigError(f"{self.owner}: parameter {label!r}: hp.{dist.name}({label!r}, {given}): {exc}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"space": self.space, "owner": self.owner, "given": self._given}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["space"], state["owner"])  # type: ignore[misc]
        self._given = state.get("given") or GivenValues()

    def _collect(self, value: Any) -> None:
        """Find every parameter, check its distribution, and refuse a label used for two parameters."""
        if isinstance(value, dict):
            for item in value.values():
                self._collect(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self._collect(item)
        elif isinstance(value, self._pyll.Apply):
            for node in self._pyll.dfs(value):
                if node.name != "hyperopt_param":
                    continue
                label = node.pos_args[0].obj
                if label in self.labels and self.labels[label] is not node:
                    raise ConfigError(f"{self.owner}: the label {label!r} names two parameters of the space; HyperOpt "
                                      "needs every label to be unique")
                self.labels[label] = node

    def __call__(self, trial: Any) -> dict[str, Any]:
        return self._value(self.space, trial)

    def _value(self, value: Any, trial: Any) -> Any:
        """``value`` evaluated as HyperOpt evaluates a space: a dict with its keys sorted (its ``dict`` node), a list
        or tuple as a tuple (its ``pos_args`` node), as Ray's HyperOptSearch hands them to the trainable."""
        if isinstance(value, dict):
            return {key: self._value(value[key], trial) for key in _sorted_keys(value)}
        if isinstance(value, (list, tuple)):
            return tuple(self._value(item, trial) for item in value)
        if isinstance(value, self._pyll.Apply):
            return self._node(value, trial)
        return value

    def _node(self, node: Any, trial: Any) -> Any:
        """Evaluate ``node`` on ``trial``: suggest its parameters, walk only the chosen option of a switch."""
        if node.name == "literal":
            return node.obj
        if node.name == "hyperopt_param":
            return self._suggest(node.pos_args[0].obj, node.pos_args[1], trial)
        if node.name == "switch":
            index = self._node(node.pos_args[0], trial)
            return self._node(node.pos_args[1 + int(index)], trial)
        args = [self._node(arg, trial) for arg in node.pos_args]
        kwargs = {name: self._node(arg, trial) for name, arg in node.named_args}
        return self._pyll.scope._impls[node.name](*args, **kwargs)

    def _suggest(self, label: str, dist: Any, trial: Any) -> Any:
        """One ``trial.suggest_*`` for HyperOpt's distribution node ``dist``, named ``label``: its arguments first,
        those that are ``hp.*`` parameters themselves suggested in the trial before it (as HyperOpt draws them)."""
        args, q = self._args(dist, trial)
        if label not in self.drawn_arguments:
            return self._suggest_with(label, dist, args, q, trial)
        try:
            return self._suggest_with(label, dist, args, q, trial)
        except ValueError as exc:  # (drawn arguments Optuna or the transform refuse: low > high, sigma < 0, ...)
            given = ", ".join(f"{name}={value!r}" for name, value in zip(_ARGUMENTS.get(dist.name, ()), args,
                                                                          strict=False))
            raise ConfigError(f"{self.owner}: parameter {label!r}: hp.{dist.name}({label!r}, {given}), with the "
                              f"arguments drawn in trial {trial.number}: {exc}") from exc

    def _suggest_with(self, label: str, dist: Any, args: list[Any], q: Any, trial: Any) -> Any:
        """:meth:`_suggest` once the arguments ``args`` (and ``q``) are known."""
        name = dist.name
        if name in ("uniform", "quniform"):
            low, high = float(args[0]), float(args[1])
            value = trial.suggest_float(label, low, high)
            return round_to(value, q)
        if name in ("loguniform", "qloguniform"):  # HyperOpt's bounds are of log(value)
            value = trial.suggest_float(label, math.exp(args[0]), math.exp(args[1]), log=True)
            return round_to(value, q)
        if name in _NORMALS:  # its quantile, through the inverse CDF (the quantile's bounds are the same whatever
            # the arguments: drawn ones change only the value it maps to)
            param = self._transformed(label, dist, args, q)
            bounds = param.distribution
            return self._given.value(param, trial.suggest_float(param.optuna_name, bounds.low, bounds.high))
        if name == "randint":
            low, high = (0, int(args[0])) if len(args) == 1 else (int(args[0]), int(args[1]))
            return trial.suggest_int(label, low, high - 1)
        if name == "categorical":  # hp.pchoice: its probabilities
            warnings.warn(f"{self.owner}: hp.pchoice({label!r}, ...): Optuna samples the options without their "
                          "probabilities", UserWarning, stacklevel=2)
            return trial.suggest_categorical(label, list(range(len(args[0]))))
        raise ConfigError(f"{self.owner}: the distribution {name!r} of parameter {label!r} has no Optuna equivalent")

    def _drawn_arguments(self, dist: Any) -> bool:
        """Whether an argument of the distribution node ``dist`` is (or holds) a ``hp.*`` parameter, drawn in each
        trial (``hp.normal("a", 0, hp.uniform("s", 0.1, 1))``)."""
        return any(node.name == "hyperopt_param" for arg in (*dist.pos_args, *(a for _, a in dist.named_args))
                   for node in self._pyll.dfs(arg))

    def _args(self, dist: Any, trial: Any = None) -> tuple[list[Any], Any]:
        """A distribution node's evaluated arguments in :data:`_ARGUMENTS`'s order (those given by name in their
        places), and its ``q`` (None if it has none). Arguments that are parameters are suggested in ``trial``
        (None: only when they are not, when the space is built)."""
        args = [self._node(arg, trial) for arg in dist.pos_args]
        kwargs = {name: self._node(arg, trial) for name, arg in dist.named_args}
        names = _ARGUMENTS.get(dist.name, ())
        for name in names[len(args):]:
            if name not in kwargs:
                break
            args.append(kwargs[name])
        q = args[names.index("q")] if "q" in names and len(args) > names.index("q") else kwargs.get("q")
        return args, q

    def _normal(self, label: str, dist: Any) -> TransformedParam:
        """The transformed parameter of ``hp.normal``, ``qnormal``, ``lognormal`` or ``qlognormal`` whose arguments
        are not drawn."""
        args, q = self._args(dist)
        return self._transformed(label, dist, args, q)

    @staticmethod
    def _transformed(label: str, dist: Any, args: list[Any], q: Any) -> TransformedParam:
        return TransformedParam(_NORMALS[dist.name], label, float(args[0]), float(args[1]),
                                q=None if q is None else float(q))

    def point_params(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """A ``points_to_evaluate`` entry as the trial's parameters, by label (Ray's rule for HyperOpt spaces).

        Each key of ``point`` is matched to the space's key of the same path; where the space holds an ``hp.*``
        parameter, the point's value becomes that parameter's: a ``hp.choice`` of plain options takes the option
        itself (its index is what is suggested), any other parameter its value. A list of the space that holds
        parameters takes a list of as many values, position by position (Ray's HyperOptSearch fails on such a point,
        and it was ignored until h253).

        Raises:
            ConfigError: A key the space does not have, or an option a choice does not offer.
        """
        params: dict[str, Any] = {}
        self._point(dict(point), self.space, (), params)
        return params

    def _point(self, point: Mapping[str, Any], space: Any, path: tuple[str, ...], out: dict[str, Any]) -> None:
        for key, value in point.items():
            where = "/".join((*path, key))
            if not isinstance(space, Mapping) or key not in space:
                raise ConfigError(f"{self.owner}: points_to_evaluate: {where} is not a key of the space")
            self._point_value(value, space[key], (*path, key), out)

    def _point_value(self, value: Any, node: Any, path: tuple[str, ...], out: dict[str, Any]) -> None:
        """Put in ``out`` the parameters by which the space's ``node`` (at ``path``) gives the point's ``value``."""
        where = "/".join(path)
        if isinstance(value, Mapping) and isinstance(node, Mapping):
            self._point(value, node, path, out)
            return
        if isinstance(node, (list, tuple)) and is_hyperopt_expression(node):  # its parameters, position by position
            if not isinstance(value, (list, tuple)) or len(value) != len(node):
                raise ConfigError(f"{self.owner}: points_to_evaluate: {where}={value!r} is not a list of "
                                  f"{len(node)} values, as the space's")
            for position, (item, child) in enumerate(zip(value, node, strict=True)):
                self._point_value(item, child, (*path, str(position)), out)
            return
        param = _param_of(node, self._pyll)
        if param is None:
            return  # a constant of the space
        label, dist = param.pos_args[0].obj, param.pos_args[1]
        if node.name == "switch":
            for index, option in enumerate(node.pos_args[1:]):
                matched = self._option_params(value, option)
                if matched is not None:
                    out[label] = index
                    out.update(matched)
                    break
            else:
                raise ConfigError(f"{self.owner}: points_to_evaluate: {where}={value!r} is not one of the "
                                  f"options of hp.choice({label!r}, ...)")
        elif dist.name in _NORMALS and self._drawn_arguments(dist):
            raise ConfigError(f"{self.owner}: points_to_evaluate: {where}: hp.{dist.name}({label!r}, ...) has "
                              "arguments drawn in each trial (hp.* parameters), so a value cannot be given for it "
                              "(it is searched as its quantile, which depends on them); leave it out of the point")
        elif dist.name in _NORMALS:
            try:
                out.update(self._normal_point(label, dist, value))
            except ValueError as exc:
                raise ConfigError(f"{self.owner}: points_to_evaluate: {where}={value!r} cannot be a value of "
                                  f"hp.{dist.name}({label!r}, ...) ({exc})") from exc
        elif dist.name in ("loguniform", "qloguniform", "uniform", "quniform"):
            out[label] = float(value)
        else:
            out[label] = value

    def _option_params(self, value: Any, option: Any) -> dict[str, Any] | None:
        """The parameters that make ``hp.choice``'s ``option`` produce ``value``, or None if it cannot.

        A plain option matches its own value; a dict option matches a dict whose keys it has, with equal constants,
        and its ``hp.*`` entries take the dict's values.
        """
        if option.name == "literal":
            return {} if option.obj == value else None
        if option.name != "dict" or not isinstance(value, Mapping):
            return None
        entries = dict(option.named_args)
        if not set(value) <= set(entries):
            return None
        params: dict[str, Any] = {}
        for key, item in value.items():
            entry = entries[key]
            if entry.name == "literal":
                if entry.obj != item:
                    return None
                continue
            param = _param_of(entry, self._pyll)
            if param is None:
                return None
            label, dist = param.pos_args[0].obj, param.pos_args[1]
            if dist.name not in _NORMALS:
                params[label] = item
                continue
            if self._drawn_arguments(dist):
                return None
            try:
                params.update(self._normal_point(label, dist, item))
            except ValueError:
                return None
        return params

    def _normal_point(self, label: str, dist: Any, value: Any) -> dict[str, float]:
        """A point's ``value`` of a normal parameter as the trial's parameter: its quantile under
        ``<label>:quantile``, the value remembered for that trial (raises :meth:`TransformedParam.param`'s
        ``ValueError``)."""
        param = self._normal(label, dist)
        return {param.optuna_name: self._given.param(param, value)}


def _sorted_keys(value: dict[Any, Any]) -> list[Any]:
    """A dict's keys sorted, as HyperOpt's ``dict`` node sorts them (in their order if they cannot be compared)."""
    try:
        return sorted(value)
    except TypeError:
        return list(value)


def _param_of(node: Any, pyll: Any) -> Any:
    """The ``hyperopt_param`` node ``node`` is (a choice's index, or a parameter in ``float``/``int``), or None."""
    if not isinstance(node, pyll.Apply):
        return None
    if node.name == "switch":
        return node.pos_args[0]
    while node.name in ("float", "int") and node.pos_args:
        node = node.pos_args[0]
    return node if node.name == "hyperopt_param" else None

