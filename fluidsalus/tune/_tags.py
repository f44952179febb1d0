"""Ray Tune's ``experiment_tag`` result key: a trial's index and the values that make it what it is.

Ray writes it into every result (and into its default trial folder names):

- for trials of ``BasicVariantGenerator`` (random and grid search, and the schedulers that draw from it: ASHA,
  HyperBand, PBT, PB2), ``"<index>_<vars>"`` with the 0-based index of the trial and the values drawn for the
  space's domains and grid searches (and for those inside the grid value or ``choice`` category the trial got, as
  Ray's ``resolved_vars`` hold them: :func:`resolved_values`), or ``"<index>"`` when the space has none. As in Ray,
  a ``sample_from``'s value is not among them, and neither is a value a ``points_to_evaluate`` point gave (a trial
  of a point that gives every value is ``"<index>"``);
- for trials of a search algorithm (OptunaSearch, TuneBOHB, Repeater, ...), ``"<number>_<vars>"`` with the
  1-based number of the trial and every value of its configuration.

``<vars>`` is ``key=value`` for each value, by the value's path in the configuration, joined by commas, where
``key`` is the last part of the path, a float is written with four decimals and any other value as text with
each run of characters other than letters, digits, ``_`` and ``-`` made one ``_`` (and ``_`` trimmed at the
ends), so a tag is safe in a folder name.

After each PBT or PB2 exploit (whether or not the configuration changed), a trial's tag is its first tag followed by
``@perturbed[<vars>]`` with the new values of the mutated (or bounded) keys, as in Ray. The first tag is
remembered for the run, and a resumed run takes it back from each trial's last stored result
(:meth:`Tagger.restore`), so a trial perturbed before the resume keeps its first tag and stays perturbed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fluidsalus import space as sp
from fluidsalus.searchers._random import apply_point, check_points

__all__ = ["PARAMS_FILE", "PERTURBED_MARK", "SEARCHER", "TAG_KEY", "VARIANTS", "Tagger", "format_vars"]

#: Ray's result key.
TAG_KEY = "experiment_tag"
#: Trials drawn by ``BasicVariantGenerator``: 0-based index, the drawn values only.
VARIANTS = "variants"
#: Trials suggested by a search algorithm: 1-based number, every value of the configuration.
SEARCHER = "searcher"
#: The file beside ``tuner.pkl`` that keeps :meth:`Tagger.describe` (plain JSON, read without unpickling anything),
#: and under ``"stop"`` the run's ``stop`` when it is a dict (Ray's ``Trial.stopping_criterion``).
PARAMS_FILE = "tune_params.json"
#: What follows a trial's first tag once PBT or PB2 changed its configuration (Ray's ``@perturbed[...]``).
PERTURBED_MARK = "@perturbed["
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")
_FLOAT_FORMAT = "{:.4f}"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return _FLOAT_FORMAT.format(value)
    return _UNSAFE.sub("_", str(value)).strip("_")


def format_vars(values: Mapping[tuple[Any, ...], Any]) -> str:
    """``key=value,...`` for configuration values by path, ordered by path (Ray's ``format_vars``).

    Args:
        values: Path in the configuration (a tuple of keys) -> value.

    Returns:
        The text, safe in a folder name.
    """
    try:
        ordered = sorted(values.items())
    except TypeError:  # paths that mix keys of different types (list indices and names)
        ordered = sorted(values.items(), key=lambda item: tuple(str(part) for part in item[0]))
    return ",".join(f"{_text(path[-1])}={_text(value)}" for path, value in ordered)


def _leaves(config: Mapping[str, Any], path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    for key, value in config.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, (*path, key))
        else:
            yield (*path, key), value


def _joined(path: tuple[Any, ...]) -> str:
    return "/".join(str(part) for part in path)


def _at(config: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        config = config[part]
    return config


def _values_at(config: Mapping[str, Any], paths: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Any]:
    """The value at each path that ``config`` has (a define-by-run branch, say, may lack a drawn key)."""
    values = {}
    for path in paths:
        try:
            values[path] = _at(config, path)
        except (KeyError, IndexError, TypeError):
            continue
    return values


def _point_runs(space: Mapping[str, Any], points: Sequence[Mapping[str, Any]] | None
                ) -> list[tuple[int, set[tuple[Any, ...]]]]:
    """For each of ``BasicVariantGenerator``'s points, in order: how many trials it makes (one per grid point it
    leaves open) and the paths it gives values for. Empty when there are none, or when a point's count cannot be
    known before its draws (a draw that makes grids): its trials' tags then name every drawn value."""
    runs = []
    for assignments in check_points(space, points, "BasicVariantGenerator"):
        count = sp.count_variants(apply_point(space, assignments), 1)
        if count is None:
            return []
        runs.append((count, {tuple(path) for path, _ in assignments}))
    return runs


#: The kinds of a node of :func:`draw_tree` (plain JSON, so that ``tune_params.json`` keeps it): a value drawn from a
#: domain (``"draw"``), a ``choice`` (``"choice"``) or a grid search (``"grid"``), each with ``"of"`` (the choice's
#: categories or the grid's values, as nodes of their own) when one of those holds a draw; inside such a value a
#: dict (``"dict"``, its ``"items"`` as ``[key, node]`` pairs), a list or tuple (``"list"``), a constant
#: (``"const"``, its ``"value"``), a ``sample_from`` (``"fn"``) or any other object (``"any"``). A grid search whose
#: values are plain (:func:`is_plain`) keeps them (``"values"``): a choice category that holds it shows it so
#: (:func:`_as_drawn`).
_DRAW_KINDS = frozenset({"draw", "choice", "grid"})
_JSON_SCALARS = (str, int, float, bool, type(None))


def _node(value: Any) -> dict[str, Any]:
    """The :func:`draw_tree` node of a value of the space (see :data:`_DRAW_KINDS`)."""
    if isinstance(value, sp.Function):
        return {"kind": "fn"}
    if isinstance(value, sp.Categorical) or sp._is_grid(value):
        kind = "choice" if isinstance(value, sp.Categorical) else "grid"
        options = list(value.categories) if kind == "choice" else list(value[sp.GRID_SEARCH_KEY])
        node: dict[str, Any] = {"kind": kind}
        if kind == "grid" and is_plain(options):
            node["values"] = options
        alternatives = [_node(option) for option in options]
        if any(draws_in(alternative) for alternative in alternatives):
            node["of"] = alternatives
        elif not any(isinstance(option, (Mapping, list, tuple)) for option in options):
            node["scalar"] = True  # (its values are no dict or list: one of those came from another option)
        return node
    if isinstance(value, sp.Domain):
        return {"kind": "draw"}
    if isinstance(value, dict):
        if not all(isinstance(key, _JSON_SCALARS) for key in value):
            return {"kind": "any"}
        return {"kind": "dict", "items": [[key, _node(item)] for key, item in value.items()]}
    if isinstance(value, (list, tuple)):
        if all(type(item) in _JSON_SCALARS for item in value):
            return constant_list_node(list(value))
        return {"kind": "list", "items": [_node(item) for item in value]}
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)) and not getattr(value, "shape", ()):
        value = value.item()  # a NumPy scalar: the trial gets a plain number
    if isinstance(value, _JSON_SCALARS):
        return {"kind": "const", "value": value}
    return {"kind": "any"}


#: The longest list of plain values ``tune_params.json`` keeps whole in a :func:`draw_tree` node (a list that tells
#: a grid's values or a choice's categories apart); a longer one is written as its length and a sample of its values
#: (:func:`_written`), so that the file does not grow with a large constant (a 100,000-number list inside a grid
#: value made it 3.5 MB). In memory a list is one node, compared in one step (element by element, tagging 2,000
#: trials took 320 s against 30 s).
CONSTANT_LIST_KEPT = 64


def is_plain(value: Any) -> bool:
    """Whether ``value`` is plain JSON that ``tune_params.json`` keeps as it is: a string, number, bool or None, or
    a list or tuple (of at most :data:`CONSTANT_LIST_KEPT` items) or a dict of string keys, of such values."""
    if isinstance(value, (list, tuple)):
        return len(value) <= CONSTANT_LIST_KEPT and all(is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and is_plain(item) for key, item in value.items())
    return type(value) in _JSON_SCALARS


def _as_drawn(node: Mapping[str, Any], value: Any) -> Any:
    """A choice category's value as Ray's resolved values hold it (whence its ``evaluated_params`` and tag): Ray
    draws the category before it expands the grid searches in it, so each grid search inside the category is as
    the space wrote it (``{"c": {"g": {"grid_search": [1, 2]}}}``, tag ``c=g_grid_search_1_2,g=1``); the rest is
    the trial's value (a domain inside the category too, whose unresolved object Ray shows). A grid search of
    values that are not :func:`is_plain` is its trial's value too."""
    kind = node.get("kind")
    if kind == "dict" and isinstance(value, Mapping):
        inner = dict(node["items"])
        return {key: _grid_as_written(inner[key], item) if key in inner else item for key, item in value.items()}
    if kind == "list" and isinstance(value, (list, tuple)) and len(value) == len(node["items"]):
        items = [_grid_as_written(item, element) for item, element in zip(node["items"], value, strict=True)]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # (a namedtuple: by position)
    return value


def _grid_as_written(node: Mapping[str, Any], value: Any) -> Any:
    """A value inside a choice category (:func:`_as_drawn`): a grid search as the space wrote it when its node keeps
    its values, the values inside a dict or list in turn, any other value as it is."""
    if node.get("kind") == "grid" and "values" in node:
        return {sp.GRID_SEARCH_KEY: node["values"]}
    return _as_drawn(node, value)


def constant_list_node(values: list[Any]) -> dict[str, Any]:
    """The :func:`draw_tree` node of a list or tuple of plain values: one node, compared in one step (a long one
    is shortened only where it is written down: :func:`_written`)."""
    return {"kind": "const", "value": values}


#: How many values of a long list constant :func:`_written` keeps, spread over it.
_SAMPLED = 16


def _sampled(values: Sequence[Any]) -> list[list[Any]]:
    """``[index, value]`` of :data:`_SAMPLED` elements spread over ``values`` (its first and last too)."""
    n = len(values)
    picks = sorted({0, n - 1, *(i * (n - 1) // (_SAMPLED - 1) for i in range(_SAMPLED))})
    return [[i, values[i]] for i in picks]


def _written(node: Mapping[str, Any]) -> dict[str, Any]:
    """``node`` as :meth:`Tagger.describe` writes it: a list constant longer than :data:`CONSTANT_LIST_KEPT` as
    its length and a sample of its values (``"const_sample"``), so that ``tune_params.json`` stays small."""
    kind = node.get("kind")
    if kind == "const" and isinstance(node.get("value"), list) and len(node["value"]) > CONSTANT_LIST_KEPT:
        return {"kind": "const_sample", "len": len(node["value"]), "sample": _sampled(node["value"])}
    out = dict(node)
    if "of" in node:
        out["of"] = [_written(option) for option in node["of"]]
    if kind == "dict":
        out["items"] = [[key, _written(item)] for key, item in node["items"]]
    elif kind == "list":
        out["items"] = [_written(item) for item in node["items"]]
    return out


def draws_in(node: Mapping[str, Any], path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The draws a value's node holds (not inside them), by path below it, depth first in its order."""
    kind = node.get("kind")
    if kind in _DRAW_KINDS:
        return [(path, dict(node))]
    if kind == "dict":
        return [found for key, item in node["items"] for found in draws_in(item, (*path, key))]
    if kind == "list":
        return [found for index, item in enumerate(node["items"]) for found in draws_in(item, (*path, index))]
    return []


def draw_tree(space: Mapping[str, Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The grid searches and domains of a space (not its ``sample_from`` functions, whose values Ray's Tuner leaves
    out of a variant's resolved values), by path, depth first in the space's order, each as a node of
    :data:`_DRAW_KINDS`: what :func:`resolved_values` reads a trial's configuration by. (The space's constants are
    not walked, and inside a grid value or a choice category a list of plain values is one node: a large one costs
    little.)"""
    out: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        if isinstance(value, dict):
            if sp._is_grid(value):
                out.append((path, _node(value)))
                return
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if not isinstance(item, _JSON_SCALARS):  # (a long list of numbers is walked quickly)
                    walk(item, (*path, index))
        elif isinstance(value, sp.Domain) and not isinstance(value, sp.Function):
            out.append((path, _node(value)))

    walk(dict(space), ())
    return out


def _matches(node: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` can have come out of ``node`` (a grid's value or a choice's category)."""
    kind = node.get("kind")
    if kind in ("choice", "grid") and "of" in node:
        return any(_matches(option, value) for option in node["of"])
    if kind in ("choice", "grid") and node.get("scalar"):
        return not isinstance(value, (Mapping, list, tuple))
    if kind == "const_sample":  # (a long list constant, as tune_params.json keeps it)
        return (isinstance(value, (list, tuple)) and len(value) == node["len"]
                and all(value[i] == v for i, v in node["sample"]))
    if kind == "dict":
        return (isinstance(value, Mapping) and len(value) == len(node["items"])
                and all(key in value and _matches(item, value[key]) for key, item in node["items"]))
    if kind == "list":
        return (isinstance(value, (list, tuple)) and len(value) == len(node["items"])
                and all(_matches(item, element) for item, element in zip(node["items"], value, strict=True)))
    if kind == "draw":  # (a domain draws a number or a string: not a dict or a list, which another option gave)
        return not isinstance(value, (Mapping, list, tuple))
    if kind == "const":
        if isinstance(node["value"], list):  # a list or tuple of plain values (JSON keeps a tuple as a list)
            return isinstance(value, (list, tuple)) and list(value) == node["value"]
        try:
            return bool(value == node["value"])
        except Exception:  # noqa: BLE001 - an object whose == does not give a bool (an array)
            return False
    return True  # a draw, a sample_from, any other object


def _unknowns(node: Mapping[str, Any]) -> int:
    """How many values of an option are objects its node does not describe (``"any"``: they fit every value)."""
    kind = node.get("kind")
    if kind == "any":
        return 1
    items = [item for _, item in node["items"]] if kind == "dict" else node["items"] if kind == "list" else []
    return sum(_unknowns(item) for item in items)


def _chosen(options: Sequence[Mapping[str, Any]], value: Any) -> Mapping[str, Any] | None:
    """The option (a grid value, a choice category) the trial's ``value`` came out of: of those it can have come
    out of, the one that fits it best (the fewest objects its node does not describe), then the one with the fewest
    draws (``{"lr": 0.1}`` rather than ``{"lr": tune.uniform(0, 1)}`` for ``{"lr": 0.1}``); None when none fits."""
    fitting = [option for option in options if _matches(option, value)]
    return min(fitting, key=lambda option: (_unknowns(option), len(draws_in(option)))) if fitting else None


def _path_order(path: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((isinstance(part, str), part if isinstance(part, (int, str)) else str(part)) for part in path)


def resolved_values(tree: Sequence[tuple[tuple[Any, ...], Mapping[str, Any]]], value_at: Any,
                    skip: frozenset[tuple[Any, ...]] = frozenset()) -> dict[tuple[Any, ...], Any]:
    """Ray's ``resolved_vars`` of a variant (``BasicVariantGenerator``'s, whence ``Trial.evaluated_params`` and the
    ``experiment_tag``), read from the trial's configuration: level by level as Ray's ``_generate_variants_internal``
    resolves the space, each level's domains in the space's order (depth first), then its grid searches by path,
    then the draws the values of this level hold (a grid value or a choice category with domains or grids in it:
    ``{"g": {"lr": 0.5}, "g/lr": 0.5}`` for ``{"g": tune.grid_search([{"lr": tune.uniform(0, 1)}, ...])}``).

    Args:
        tree: :func:`draw_tree` of the space.
        value_at: ``value_at(path)``: the configuration's value at a path, or raises ``KeyError``, ``IndexError``
            or ``TypeError`` when it has none (a define-by-run branch may lack a drawn key).
        skip: Paths of the first level not drawn (given by a ``points_to_evaluate`` point).

    Returns:
        Path -> value, in Ray's order.
    """
    out: dict[tuple[Any, ...], Any] = {}
    level = [((index,), tuple(path), node) for index, (path, node) in enumerate(tree) if tuple(path) not in skip]
    while level:
        domains = sorted((entry for entry in level if entry[2].get("kind") != "grid"), key=lambda entry: entry[0])
        grids = sorted((entry for entry in level if entry[2].get("kind") == "grid"),
                       key=lambda entry: _path_order(entry[1]))
        deeper = []
        for order, path, node in [*domains, *grids]:
            try:
                value = value_at(path)
            except (KeyError, IndexError, TypeError):
                continue
            option = _chosen(node["of"], value) if "of" in node else None
            out[path] = _as_drawn(option, value) if option is not None and node.get("kind") == "choice" else value
            if option is not None:
                deeper.extend(((*order, index), (*path, *below), inner)
                              for index, (below, inner) in enumerate(draws_in(option)))
        level = deeper
    return out


class Tagger:
    """The engine's ``result_extras(seq, config)`` that adds Ray's ``experiment_tag`` to a trial's results.

    Args:
        space: The run's search space (for :data:`VARIANTS`: which values were drawn).
        kind: :data:`VARIANTS` or :data:`SEARCHER`.
        perturbed: PBT's ``hyperparam_mutations`` keys (PB2's ``hyperparam_bounds`` keys; None: no PBT): when a
            trial is asked for again (an exploit), its tag is its first one plus ``@perturbed[...]`` of these keys.
        replay: ``PopulationBasedTrainingReplay``'s tag (``replay_<policy file name>``): when the trial is asked
            for again (a change point), its tag is this plus ``@perturbed[...]`` of every key of the new config,
            as Ray's replay names it.
        points: ``BasicVariantGenerator``'s ``points_to_evaluate`` (for :data:`VARIANTS`), whose trials come
            first: the values a point gives are left out of its trials' tags, as in Ray.

    Attributes:
        latest: The tag of the last call (the engine asks for a new trial's extras just before it names the
            trial's folder, so a ``trial_dirname_creator`` can read the trial's tag here).
    """

    def __init__(self, space: Mapping[str, Any], kind: str, perturbed: Sequence[str] | None = None,
                 replay: str | None = None, points: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.kind, self.replay = kind, replay
        self.perturbed = tuple(perturbed) if perturbed is not None else None
        # (Ray leaves a sample_from's value out of a variant's resolved values: its tag and evaluated_params)
        self._drawn = [path for path in sp.drawn_paths(space) if not isinstance(_at(space, path), sp.Function)]
        # (Ray's resolved values of a variant: also the draws inside a grid's value or a choice's category)
        self._tree: list[tuple[tuple[Any, ...], dict[str, Any]]] | None = draw_tree(space) if kind == VARIANTS else None
        self._point_runs = _point_runs(space, points) if kind == VARIANTS else []
        # PBT/PB2 sample these at the start
        self._filled = [key for key in self.perturbed or () if key not in space]
        self._first: dict[int, str] = {}  # seq -> its first tag
        self._tags: dict[int, str] = {}  # seq -> its tag now
        self._resumed: set[int] = set()  # trials a resumed run knows the tags of before the engine asks (restore)
        self.latest = ""

    def __call__(self, seq: int, config: Mapping[str, Any]) -> dict[str, str]:
        """``{"experiment_tag": tag}`` for the trial created ``seq``-th (from 0), now with ``config``.

        The engine asks once when it creates the trial (or a resumed run takes it over), and again at each
        exploit of PBT or PB2 and at each change point of a PBT replay: Ray then tags the trial as perturbed,
        whether or not the explored values differ from the old ones (``@perturbed[]`` when nothing is mutated but
        by a ``custom_explore_fn``). Other readers use :meth:`tag_of`.
        """
        if seq not in self._first:
            tag = self._first[seq] = self._tag(seq, config)
        elif seq in self._resumed:  # the resumed run's first ask: the tag the trial had
            self._resumed.discard(seq)
            tag = self._tags[seq]
        elif self.replay is not None:
            tag = f"{self.replay}{PERTURBED_MARK}{format_vars({(key,): config[key] for key in config})}]"
        elif self.perturbed is not None:
            values = {(key,): config[key] for key in self.perturbed if key in config}
            tag = f"{self._first[seq]}{PERTURBED_MARK}{format_vars(values)}]"
        else:
            tag = self._tags[seq]
        self._tags[seq] = self.latest = tag
        return {TAG_KEY: tag}

    def tag_of(self, seq: int, config: Mapping[str, Any]) -> str:
        """The trial's tag now, without counting as an ask (its first tag if the engine has not asked yet)."""
        return self._tags[seq] if seq in self._tags else self._tag(seq, config)

    def evaluated_params(self, config: Mapping[str, Any], seq: int | None = None) -> dict[str, Any]:
        """Ray's ``Trial.evaluated_params`` of a trial with ``config``: the values the search chose, by their paths
        joined with ``/``, in Ray's order (:func:`resolved_values`). Those are the space's grid searches and domains
        (with the draws inside the grid value or choice category the trial got), and the keys PBT or PB2 sampled
        because the space lacks them; for a search algorithm of your own whose space is not in ``param_space``
        (none is drawn there), every value of ``config``.

        Args:
            config: The trial's configuration as it was created.
            seq: The trial's creation index, if known: a ``points_to_evaluate`` point's values are left out, as
                Ray leaves them out.

        Returns:
            Path -> value.
        """
        if not self._drawn and not self._filled:
            return {} if self.kind == VARIANTS else {_joined(path): value for path, value in _leaves(config)}
        given = self._given_by_point(seq) if seq is not None else set()
        chosen = self._resolved(config, given)
        chosen.update(_values_at(config, [(key,) for key in self._filled if (key,) not in chosen]))
        return {_joined(path): value for path, value in chosen.items()}

    def _resolved(self, config: Mapping[str, Any], given: set[tuple[Any, ...]]) -> dict[tuple[Any, ...], Any]:
        """The values drawn for the trial, by path, in Ray's order (:func:`resolved_values`); a search algorithm's
        (or the description of an older run, which kept only the paths): the values at the drawn paths."""
        if self._tree is None:
            return _values_at(config, [path for path in self._drawn if path not in given])
        return resolved_values(self._tree, lambda path: _at(config, path), frozenset(given))

    def describe(self) -> dict[str, Any]:
        """What :meth:`evaluated_params` needs of the run, as plain JSON (paths as lists): the Tuner writes it beside
        ``tuner.pkl`` (:data:`PARAMS_FILE`), so that an ``ExperimentAnalysis`` read from the folder gives its trials
        Ray's ``evaluated_params`` (:meth:`from_description`)."""
        return {"version": 2, "kind": self.kind, "drawn": [list(path) for path in self._drawn],
                **({"tree": [[list(path), _written(node)] for path, node in self._tree]} if self._tree is not None
                   else {}),
                "filled": list(self._filled),
                "points": [[count, sorted((list(path) for path in given), key=str)]
                           for count, given in self._point_runs]}

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> Tagger:
        """A tagger that answers :meth:`evaluated_params` as the run's did, from :meth:`describe`'s dict.

        Raises:
            KeyError, TypeError, ValueError: Not such a dict.
        """
        tagger = cls({}, str(description["kind"]))
        tagger._drawn = [tuple(path) for path in description["drawn"]]
        tree = description.get("tree")  # (version 1, of an older fluidsalus: the drawn paths only)
        tagger._tree = [(tuple(path), dict(node)) for path, node in tree] if tree is not None else None
        tagger._filled = list(description["filled"])
        tagger._point_runs = [(int(count), {tuple(path) for path in given}) for count, given in description["points"]]
        return tagger

    def restore(self, seq: int, stored_tag: str, config: Mapping[str, Any]) -> None:
        """A resumed run: the trial created ``seq``-th had ``stored_tag`` on its last stored result and now has
        ``config``. It keeps its first tag, and a trial perturbed before the resume stays perturbed.

        Args:
            seq: The trial's creation index.
            stored_tag: The ``experiment_tag`` of its last stored result.
            config: Its configuration now.
        """
        self._first[seq] = stored_tag.partition(PERTURBED_MARK)[0]
        self._tags[seq] = stored_tag
        self._resumed.add(seq)

    def _given_by_point(self, seq: int) -> set[tuple[Any, ...]]:
        """The paths whose values the ``points_to_evaluate`` point of the ``seq``-th trial gave (none: no point's)."""
        first = 0
        for count, given in self._point_runs:
            if seq < first + count:
                return given
            first += count
        return set()

    def _tag(self, seq: int, config: Mapping[str, Any]) -> str:
        if self.kind == VARIANTS:
            drawn = self._resolved(config, self._given_by_point(seq))
            index = str(seq)
        else:
            drawn = dict(_leaves(config))
            index = str(seq + 1)
        return f"{index}_{format_vars(drawn)}" if drawn else index
