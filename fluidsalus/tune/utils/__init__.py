"""Helpers with Ray Tune's module paths and signatures (``ray.tune.utils``).

- :func:`flatten_dict`, :func:`merge_dicts`, :func:`deep_update`, :func:`unflattened_lookup`: Ray's dict helpers,
  with Ray's results and errors for the same input (``tests/test_tune_utils.py`` compares them with Ray's);
- :func:`date_str`: the time stamp Ray puts in experiment names;
- :func:`validate_save_restore`: checks that a class ``Trainable`` resumes correctly from its own checkpoint;
- :func:`wait_for_gpu`: Ray's wait for a GPU's memory to be freed, which fluidsalus's admission rule makes
  unnecessary on a trial's GPU;
- :func:`diagnose_serialization`: finds the variables that keep a function trainable from being shipped.

``mock_trainable.MyTrainableClass`` is the toy class trainable Ray's examples import. Ray's ``UtilMonitor`` and
``warn_if_slow`` are not provided.
"""

from __future__ import annotations

import copy
import datetime
import inspect
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fluidsalus.session import DATE_FORMAT

__all__ = ["date_str", "deep_update", "diagnose_serialization", "flatten_dict", "merge_dicts", "unflattened_lookup",
           "validate_save_restore", "wait_for_gpu"]

#: Ray's key delimiter of flattened dicts.
DELIMITER = "/"
#: Iterations :func:`validate_save_restore` trains before it saves (Ray's check trains three).
_VALIDATE_ITERATIONS = 3
#: What :func:`unflattened_lookup` returns when the key is missing and no ``default`` was given.
_NO_DEFAULT = object()


def date_str() -> str:
    """The current local time as Ray stamps experiment names: ``YYYY-MM-DD_HH-MM-SS``."""
    return datetime.datetime.now().strftime(DATE_FORMAT)


def flatten_dict(dt: dict[str, Any], delimiter: str = DELIMITER, prevent_delimiter: bool = False,
                 flatten_list: bool = False) -> dict[str, Any]:
    """Nested dicts (and lists, with ``flatten_list``) as one level of ``delimiter``-joined keys.

    The input is left as it is. An empty nested dict (or list) leaves no key, as in Ray. Keys come in Ray's
    order, one level at a time: the plain values of a level keep their places, and the flattened keys of its
    dicts follow them (``{"a": 1, "n": {"x": 2}, "b": 3}`` gives ``a, b, n/x``), which is the column order of
    Ray's ``results_df``.

    Args:
        dt: The dict.
        delimiter: What joins the keys.
        prevent_delimiter: Raise if a key already holds ``delimiter``.
        flatten_list: Flatten lists too, by index.

    Returns:
        The flat dict (of ``dt``'s type).

    Raises:
        ValueError: ``prevent_delimiter`` and a key holds the delimiter (Ray's error).
    """

    def nested(value: Any) -> bool:
        return isinstance(value, dict) or (flatten_list and isinstance(value, list))

    def check(key: Any) -> None:
        if prevent_delimiter and delimiter in key:
            raise ValueError(f"Found delimiter `{delimiter}` in key when trying to flatten array. Please avoid "
                             "using the delimiter in your specification.")

    out = copy.copy(dt)
    for key in out:
        check(key)
    while any(nested(value) for value in out.values()):
        level: dict[str, Any] = {}
        for key, value in out.items():
            if isinstance(value, dict):
                for sub, child in value.items():
                    check(sub)
                    level[f"{key}{delimiter}{sub}"] = child
            elif nested(value):
                level.update((f"{key}{delimiter}{i}", child) for i, child in enumerate(value))
        done = [key for key, value in out.items() if nested(value)]
        out.update(level)
        for key in done:
            del out[key]
    return out


def deep_update(original: dict[str, Any], new_dict: dict[str, Any], new_keys_allowed: bool = False,
                allow_new_subkey_list: list[str] | None = None,
                override_all_if_type_changes: list[str] | None = None,
                override_all_key_list: list[str] | None = None) -> dict[str, Any]:
    """Update ``original`` in place with ``new_dict``, nested dicts key by key (Ray's rules).

    Args:
        original: The dict updated (and returned).
        new_dict: The new values.
        new_keys_allowed: Whether ``new_dict`` may add keys ``original`` lacks (else an ``Exception``, as Ray
            raises).
        allow_new_subkey_list: Top-level keys under which new sub-keys are allowed.
        override_all_if_type_changes: Top-level keys whose whole dict is replaced when its ``"type"`` changes.
        override_all_key_list: Keys whose whole value is replaced, never merged.

    Returns:
        ``original``.
    """
    allowed, by_type = allow_new_subkey_list or [], override_all_if_type_changes or []
    whole = override_all_key_list or []
    for key, value in new_dict.items():
        if key not in original and not new_keys_allowed:
            raise Exception(f"Unknown config parameter `{key}` ")
        old = original.get(key)
        if not (isinstance(old, dict) and isinstance(value, dict)) or key in whole:
            original[key] = value
        elif key in by_type and "type" in value and "type" in old and value["type"] != old["type"]:
            original[key] = value
        else:
            deep_update(old, value, True if key in allowed else new_keys_allowed, override_all_key_list=whole)
    return original


def merge_dicts(d1: dict[str, Any], d2: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``d1`` updated with ``d2`` (nested dicts merged, new keys allowed)."""
    return deep_update(copy.deepcopy(d1), d2, True, [])


def unflattened_lookup(flat_key: str, lookup: Mapping[str, Any] | Sequence[Any], delimiter: str = DELIMITER,
                       **kwargs: Any) -> Any:
    """``lookup[flat_key]`` if present, else the nested value at ``flat_key``'s parts (``"a/0/b"`` is
    ``lookup["a"][0]["b"]``).

    Args:
        flat_key: The key, or the ``delimiter``-joined path.
        lookup: A dict (or list) to look in.
        delimiter: What joins the parts.
        **kwargs: ``default=``: returned for a missing key instead of raising.

    Raises:
        KeyError: A missing key and no ``default`` (an index out of range raises IndexError, as in Ray).
    """
    default = kwargs.get("default", _NO_DEFAULT)
    if flat_key in lookup:
        return lookup[flat_key]  # type: ignore[index]
    node: Any = lookup
    for part in flat_key.split(delimiter):
        try:
            if isinstance(node, Mapping):
                node = node[part]
            elif isinstance(node, Sequence):
                node = node[int(part)]
            else:
                raise KeyError(part)
        except KeyError:
            if default is _NO_DEFAULT:
                raise
            return default
    return node


def validate_save_restore(trainable_cls: type, config: dict[str, Any] | None = None, num_gpus: int = 0) -> bool:
    """Check that a class ``Trainable`` resumes correctly: train one instance three iterations, save it, restore a
    second instance from that checkpoint and train it twice; its iterations must be 4 and 5.

    Ray runs the two instances as actors; here they run in this process (``num_gpus`` is accepted for Ray's
    signature: the instances see the process's devices), so Ray need not be started.

    Args:
        trainable_cls: The ``Trainable`` subclass.
        config: Its config.
        num_gpus: Ray's GPUs per instance; unused.

    Returns:
        True.

    Raises:
        AssertionError: The round trip lost the iteration count (Ray's check).
    """
    first, second = trainable_cls(config=config), trainable_cls(config=config)
    folder = None
    try:
        result: dict[str, Any] = {}
        for _ in range(_VALIDATE_ITERATIONS):
            result = first.train()
        assert result.get("training_iteration"), \
            "Validation will not pass because it requires `training_iteration` to be returned."
        checkpoint = first.save()
        folder = checkpoint.path
        second.restore(checkpoint)
        for expected in (_VALIDATE_ITERATIONS + 1, _VALIDATE_ITERATIONS + 2):
            result = second.train()
            assert result["training_iteration"] == expected, (
                f"{trainable_cls.__name__} restored from a checkpoint of iteration {_VALIDATE_ITERATIONS} reported "
                f"training_iteration {result['training_iteration']} (expected {expected})")
    finally:
        first.stop()
        second.stop()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    return True


def wait_for_gpu(gpu_id: int | str | None = None, target_util: float = 0.01, retry: int = 20, delay_s: int = 5,
                 gpu_memory_limit: float | None = None) -> bool:
    """Ray's wait until the trial's GPU has freed its memory (``memoryUtil <= target_util``), called at the start of
    a trainable so that a trial does not start on memory the previous one still holds.

    fluidsalus runs several trials on one GPU at once, so its memory is never nearly all free while neighbours run,
    and waiting for that would never end. What the wait was for is already done: the lane runtime admits a trial
    onto its device only when its memory fits next to the others' (``sum(P) + max(T) <= C``,
    docs/lanes.md). So on a trial's GPU this returns True at once.

    Args:
        gpu_id: Accepted for Ray's signature (an int, or a str ordinal or UUID); the trial's own GPU is the one.
        target_util: Unused (see above).
        retry: Unused.
        delay_s: Unused.
        gpu_memory_limit: Deprecated in Ray; unused.

    Returns:
        True.

    Raises:
        ValueError: ``gpu_id`` is neither None, an int nor a str (Ray's check).
        RuntimeError: Not called in a trial that runs on a GPU (Ray raises this when ``ray.get_gpu_ids()`` is
            empty).
    """
    from fluidsalus.session import current_session

    if gpu_id is not None and not isinstance(gpu_id, (int, str)):
        raise ValueError(f"gpu_id ({type(gpu_id)}) must be type str/int.")
    session = current_session()
    device = session.context.get_device() if session is not None else None
    if device is None or not device.startswith("cuda"):
        where = "outside a trial" if device is None else f"in a trial on device {device!r}"
        raise RuntimeError(f"No GPU ids found: wait_for_gpu was called {where}. Did you set Tune resources correctly?")
    return True


def _serializes(value: Any) -> str | None:
    """None when cloudpickle (how fluidsalus ships a trainable to its devices) takes ``value``, else the error."""
    from ray import cloudpickle

    try:
        cloudpickle.dumps(value)
    except Exception as e:  # noqa: BLE001 - any error is a reason it cannot be shipped, which is what is asked
        return f"{type(e).__name__}: {e}"
    return None


def diagnose_serialization(trainable: Callable[..., Any]) -> bool | set[str]:
    """Find what keeps a function trainable from being shipped to the devices (``ray.tune.utils``'s function).

    fluidsalus ships a trainable to its device processes with cloudpickle. This tries that on ``trainable``; when
    it fails, it tries each global and nonlocal variable the function uses (``inspect.getclosurevars``) and prints
    each check, as Ray's does, so that a variable such as a lock or an open file can be moved into the function.

    Args:
        trainable: The function passed to ``Tuner``.

    Returns:
        True when ``trainable`` serializes; otherwise the names of the variables that do not (an empty set when
        none of them is the cause, or when ``trainable`` is not a function, whose scope cannot be inspected).
    """
    print(f"Trying to serialize {trainable}...")
    error = _serializes(trainable)
    if error is None:
        print("Serialization succeeded!")
        return True
    print(f"Serialization failed: {error}")
    if not inspect.isfunction(trainable) and not inspect.ismethod(trainable):
        print(f"{trainable} is not a function, so its scope cannot be inspected")
        return set()
    print(f"Inspecting the scope of the trainable by running `inspect.getclosurevars({trainable})`...")
    closure = inspect.getclosurevars(trainable)
    failed: set[str] = set()
    for kind, variables in (("global", closure.globals), ("nonlocal", closure.nonlocals)):
        if not variables:
            continue
        print(f"Detected {len(variables)} {kind} variables. Checking serializability...")
        for name, value in variables.items():
            problem = _serializes(value)
            print(f"   {value}[name='{name}']... {'PASSED' if problem is None else 'FAILED'}")
            if problem is not None:
                print(f"   {problem}")
                failed.add(name)
    if failed:
        print(f"Variable(s) {failed} was found to be non-serializable. Consider either removing the "
              "instantiation/imports of these objects or moving them into the scope of the trainable.")
    else:
        print("Nothing was found to have failed the diagnostic test, though serialization did not succeed.")
    return failed
