"""Trainables: :func:`with_parameters`, :func:`with_resources`, the class API :class:`Trainable`, and the
one picklable entry point (:class:`TrialEntry`) that the device actors call for every trial.

* ``with_parameters(trainable, **kwargs)`` keeps the objects; at ``fit()`` each is put in Ray's object store
  once per run, and every trial gets its own copy with ``ray.get`` on its device (as in Ray).
* ``with_resources(trainable, resources)`` records a resource request. fluidsalus places trials itself
  (several per device, in lanes), so the request is a *hint*: it is what ``get_context().get_trial_resources()``
  returns inside the trial, and a fractional ``gpu`` is never a hard share of a GPU.
* A :class:`Trainable` subclass (``setup``/``step``/``save_checkpoint``/``load_checkpoint``/``cleanup``) runs
  as a function trainable: one ``report`` per ``step()``, ``"done": True`` ends it, and it checkpoints as
  ``CheckpointConfig(checkpoint_frequency=..., checkpoint_at_end=...)`` asks (at every iteration under
  population based training, whose exploits restart trials from checkpoints). ``checkpoint_at_end`` covers
  every ending, as in Ray: the session saves the trainable with the result that ends the trial.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import functools
import inspect
import json
import logging
import math
import numbers
import os
import pickle
import shutil
import site
import sys
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.distributed._common import DATA_PARALLEL_ATTR
from fluidsalus.errors import ConfigError
from fluidsalus.session import DATE_FORMAT, HOSTNAME, StopTrial, TrialResources, callable_name, node_ip

logger = logging.getLogger(__name__)

__all__ = [
    "ClassOptions",
    "PlacementGroupFactory",
    "Prepared",
    "Trainable",
    "TrialEntry",
    "adopt_ray_class",
    "adopt_ray_trainable",
    "trainable_name",
    "with_parameters",
    "with_resources",
]

#: File of a class trainable's checkpoint that holds the dict ``save_checkpoint`` returned.
DICT_CHECKPOINT_FILE = "_dict_checkpoint.pkl"
#: File in which a class trainable's checkpoint held its counters until 2026-11-30, still read from checkpoints
#: that have it. Ray's checkpoint folder holds only what ``save_checkpoint`` wrote (a ``load_checkpoint`` that
#: read every file of its folder met this one): the counters now come from the store in a trial, and from the
#: object ``save()`` returned in direct use, as Ray's come from the result its ``save()`` returns.
STATE_FILE = "_trainable_state.json"
#: The attribute of the :class:`Checkpoint` that :meth:`Trainable.save` returns that carries its counters
#: ``(iteration, time_total)`` (Ray's ``save()`` returns them in its result object).
COUNTERS_ATTR = "_trainable_counters"
#: Result keys a class trainable's ``step()`` may set to steer the loop (Ray's).
DONE_KEY, SHOULD_CHECKPOINT_KEY = "done", "should_checkpoint"
TIME_THIS_ITER_KEY = "time_this_iter_s"
#: What ``get_auto_filled_metrics(debug_metrics_only=True)`` keeps (Ray's ``DEBUG_METRICS``, less the
#: ``experiment_id`` fluidsalus does not have).
_DEBUG_METRICS = frozenset({"trial_id", "date", "timestamp", "pid", "hostname", "node_ip", "config"})
#: The keys ``Trainable.train()`` fills in after ``step()`` as Ray's does (``done`` and ``training_iteration``
#: besides); in a trial the session fills in its own instead (``fluidsalus.session.report``), and Ray's
#: ``config`` key stays out of the stored results (``Result.config`` holds it).
TRAIN_FILLED_KEYS: tuple[str, ...] = (
    "trial_id", "date", "timestamp", TIME_THIS_ITER_KEY, "time_total_s", "pid", "hostname", "node_ip", "config",
    "time_since_restore", "iterations_since_restore",
)
#: Resource names that are spelled in upper case in Ray's placement groups.
_RESOURCE_ALIASES = {"CPU": "cpu", "GPU": "gpu"}
#: The resources with_resources names itself (Ray's ``resource_dict_to_pg_factory`` keys); any other key is a
#: Ray custom resource.
STANDARD_RESOURCES = ("cpu", "gpu", "memory")
#: Ray's key for a dict of custom resources inside a resource dict.
CUSTOM_RESOURCES_KEY = "custom_resources"
#: Keys that are almost surely a misspelt standard resource (Ray would take them as custom resources that no
#: node has, and the trial would never start): refused, naming the key meant.
_MISSPELT_RESOURCES = {"cpus": "cpu", "num_cpus": "cpu", "CPUs": "cpu", "gpus": "gpu", "num_gpus": "gpu",
                       "GPUs": "gpu", "mem": "memory"}
#: Smallest fraction of a resource Ray can express (its fixed-point resource unit).
RESOURCE_PRECISION = 1e-4


#: The recipe for a class of an installed package that subclasses Ray's ``Trainable`` (docs/migrating.md): a function
#: trainable that makes it in the trial's folder (``storage``: else Ray's ``Trainable`` makes a folder of its own
#: in ``~/ray_results`` for each) and reports each ``step()``.
LIBRARY_TRAINABLE_RECIPE = (
    "`def train(config): algo = {name}(config=config, storage=tune.get_context().get_storage()); "
    "for _ in range(steps): tune.report(algo.step())`"
)


def _is_trainable_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, Trainable)


#: Ray Tune's package, whose own trainables (``ray.tune.utils.mock_trainable.MyTrainableClass``) are translated into
#: fluidsalus's twin at the same path under ``fluidsalus.tune`` (:func:`adopt_ray_class`).
_RAY_TUNE_PACKAGE = "ray.tune."


def _ray_twin(value: Any) -> type | None:
    """fluidsalus's :class:`Trainable` at the module path and name of ``value``, a class of Ray Tune's own package
    (``ray.tune.utils.mock_trainable.MyTrainableClass`` -> ``fluidsalus.tune.utils.mock_trainable``'s); None for
    anything else (a class of the user's, Ray's without a twin)."""
    module = getattr(value, "__module__", None)
    if not isinstance(value, type) or not isinstance(module, str) or not module.startswith(_RAY_TUNE_PACKAGE):
        return None
    import importlib

    try:
        twin = getattr(importlib.import_module("fluidsalus" + module[len("ray"):]), value.__qualname__, None)
    except ImportError:
        return None
    return twin if _is_trainable_class(twin) else None


def adopt_ray_class(value: Any, where: str) -> Any:
    """``value`` checked as a trainable (:func:`_check_base`), Ray Tune's own ``Trainable`` class that fluidsalus
    ships a twin of translated into it, with a ``UserWarning`` that names the import to change (Ray's examples
    import ``MyTrainableClass`` from ``ray.tune.utils.mock_trainable``). Needs only the class: called before Ray
    starts.

    Raises:
        ConfigError: A trainable that cannot run (:func:`_check_base`).
    """
    twin = _ray_twin(value)
    if twin is None:
        _check_base(value, where)
        return value
    from fluidsalus.session import callers_stacklevel

    # (Not prefixed with `where`: given at the script's line, it named a call the script did not make, such as
    # tune.run's own with_resources for resources_per_trial.)
    warnings.warn(
        f"fluidsalus.tune: {value.__name__} is Ray Tune's ({value.__module__}); it was translated into "
        f"fluidsalus's. Change the import to `from {twin.__module__} import {value.__name__}`.",
        UserWarning,
        stacklevel=callers_stacklevel(),
    )
    return twin


def _is_installed(module_name: str) -> bool:
    """Whether the module was loaded from a folder of installed packages (``site-packages``): a library's code,
    whose imports the script's author cannot change."""
    path = getattr(sys.modules.get(module_name), "__file__", None)
    if not isinstance(path, str):
        return False
    folders = {sysconfig.get_path(name) for name in ("purelib", "platlib")} | set(site.getsitepackages()) \
        | {site.getusersitepackages()}
    path = os.path.realpath(path)
    return any(path.startswith(os.path.join(os.path.realpath(folder), "")) for folder in folders if folder)


def _described(cls: type) -> str:
    """A class named with where it comes from, for a refusal: ``Algo (from somelib.algos, an installed package)``
    or ``Algo (defined in my_models)``."""
    if _is_installed(cls.__module__):
        return f"{cls.__name__} (from {cls.__module__}, an installed package)"
    return f"{cls.__name__} (defined in {cls.__module__})"


def _refuse_ray_subclass(value: type, ray_base: type, where: str) -> NoReturn:
    """Refuse ``value``, a class that subclasses ``ray_base`` (the first of Ray's classes in its MRO), with advice
    about the import that made it Ray's: that of the class whose own base is Ray's (the *owner*: ``value`` itself,
    or a class ``value`` subclasses, maybe an installed package's, whose import the user cannot change).

    Raises:
        ConfigError: Always.
    """
    owner = next((cls for cls in value.__mro__ if ray_base in cls.__bases__), value)
    twin = _ray_twin(ray_base)
    subject = f"{_described(value)} subclasses Ray's {ray_base.__name__}"
    if twin is not None:
        subject += f" ({ray_base.__module__})"
    if owner is not value:
        subject += f" through {_described(owner)}"
    if _is_installed(owner.__module__):  # (a library's: no import of the user's to change)
        raise ConfigError(
            f"{where}: {subject}, which fluidsalus cannot run as a trainable; the import to change is the package's, "
            "not yours. Run it from a function trainable of yours that makes it and reports each step: "
            f"{LIBRARY_TRAINABLE_RECIPE.format(name=value.__name__)}, with `from fluidsalus import tune` "
            "(docs/migrating.md)"
        )
    module = sys.modules.get(owner.__module__)
    place = f" in {module.__file__}" if isinstance(getattr(module, "__file__", None), str) else ""
    if twin is not None:  # (a subclass of Ray's MyTrainableClass: the import to change is that one)
        raise ConfigError(
            f"{where}: {subject}; fluidsalus runs function trainables and fluidsalus.tune.Trainable subclasses. "
            f"Change `from {ray_base.__module__} import {ray_base.__name__}`"
            f"{place} to `from {twin.__module__} import {ray_base.__name__}`"
        )
    target = "it" if owner is value else owner.__name__
    raise ConfigError(
        f"{where}: {subject}; fluidsalus runs function trainables and fluidsalus.tune.Trainable subclasses. Make "
        f"{target} subclass fluidsalus.tune.Trainable: change `from ray.tune import Trainable`{place} to "
        "`from fluidsalus.tune import Trainable` (Ray Train trainers such as TorchTrainer are not supported)"
    )


def _check_base(value: Any, where: str) -> None:
    if isinstance(value, str):
        raise ConfigError(
            f"{where}: trainable {value!r} is a name; {where} takes the function (or fluidsalus.tune.Trainable "
            "subclass) itself (Tuner, tune.run and tune.Experiment also take a name given to "
            "tune.register_trainable)"
        )
    if isinstance(value, type):
        if issubclass(value, Trainable):
            return
        if value.__module__.startswith("ray."):  # Ray's own class, with no fluidsalus twin (see adopt_ray_class)
            raise ConfigError(
                f"{where}: {value.__name__} is Ray's own class ({value.__module__}), which fluidsalus has no "
                "equivalent of; fluidsalus runs function trainables and fluidsalus.tune.Trainable subclasses "
                "(Ray Train trainers such as TorchTrainer are not supported)"
            )
        ray_base = next((cls for cls in value.__mro__ if cls.__module__.startswith("ray.")), None)
        if ray_base is not None:
            _refuse_ray_subclass(value, ray_base, where)
        raise ConfigError(f"{where}: the class {value.__name__} is not a fluidsalus.tune.Trainable subclass")
    if type(value).__module__.startswith("ray.train") or hasattr(value, "as_trainable"):
        raise ConfigError(
            f"{where}: {type(value).__name__} (a Ray Train trainer) is not supported; pass a function trainable"
        )
    if not callable(value):
        raise ConfigError(f"{where}: trainable must be a function f(config) or a Trainable subclass "
                          f"(got {type(value).__name__})")


def trainable_name(trainable: Any) -> str:
    """The name an experiment is named after (a function's or class's ``__name__``)."""
    return callable_name(trainable.base if isinstance(trainable, Prepared) else trainable)


def _check_resources(resources: Any) -> dict[str, float] | Callable[[dict[str, Any]], Any]:
    if callable(resources) and not isinstance(resources, Mapping) and not hasattr(resources, "bundles"):
        return resources
    return normalize_resources(resources, keeps_task_cpus=True)


def task_cpus(resources: Any) -> float:
    """The CPUs of a placement group factory's bundles after the first: what Ray keeps for the tasks and actors a
    trial starts (``fluidsalus.run(task_cpus_per_trial=...)``). 0 for anything else (checked by the caller)."""
    bundles = getattr(resources, "bundles", None)
    if bundles is None or isinstance(resources, Mapping):
        return 0.0
    return sum(float(v) for b in bundles[1:] for k, v in dict(b).items()
               if _RESOURCE_ALIASES.get(str(k), str(k)) == "cpu")


def task_gpu_bundle(resources: Any) -> tuple[int, float] | None:
    """The first bundle after the first of a placement group factory that asks for GPUs, as ``(index, gpus)``:
    GPUs Ray keeps for the tasks and actors a trial starts, which fluidsalus cannot keep (:data:`TASK_GPUS_ERROR`).
    None for a factory without one, or anything else."""
    bundles = getattr(resources, "bundles", None)
    if bundles is None or isinstance(resources, Mapping):
        return None
    for index, bundle in enumerate(bundles[1:], start=1):
        gpus = sum(float(v) for k, v in dict(bundle).items() if _RESOURCE_ALIASES.get(str(k), str(k)) == "gpu"
                   and isinstance(v, numbers.Real) and not isinstance(v, bool))
        if gpus > 0:
            return index, gpus
    return None


def check_task_gpus(bundle: tuple[int, float] | None, where: str) -> None:
    """Refuse a placement group factory whose bundles after the first ask for GPUs (:func:`task_gpu_bundle`).

    Args:
        bundle: ``(index, gpus)`` of the first such bundle, or None (nothing to refuse).
        where: What gave the factory, for the message (``"with_resources"``, ...).

    Raises:
        ConfigError: Naming the bundle and what to do instead (:data:`TASK_GPUS_ERROR`).
    """
    if bundle is not None:
        raise ConfigError(TASK_GPUS_ERROR.format(where=where, index=bundle[0], gpu=bundle[1]))


def _check_amount(key: str, value: Any) -> float:
    """One amount of a resource request, checked with Ray's rules."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"with_resources: resources[{key!r}] must be a number >= 0 (got {value!r})")
    amount = float(value)
    if 0 < amount < RESOURCE_PRECISION:
        raise ConfigError(f"with_resources: resources[{key!r}] = {value!r} is finer than Ray's precision; use 0 or "
                          f"a number >= {RESOURCE_PRECISION}")
    if _RESOURCE_ALIASES.get(key, key) == "gpu" and amount > 1 and not amount.is_integer():
        raise ConfigError(f"with_resources: resources[{key!r}] = {value!r}: a GPU request above 1 must be a whole "
                          "number of GPUs (a fraction of one GPU, such as 0.25, is fine), as in Ray")
    return amount


#: Said when a function of the config returns a placement group factory with CPUs in bundles after the first
#: (Ray's way to keep cores for the tasks and actors a trial starts) beyond those the run kept: a fixed one keeps
#: them (``task_cpus``), and a function's answer for the space's first configuration (``probe_task_cpus``), but
#: another answer is known only at its trial's start, after the devices took the cores.
EXTRA_BUNDLES_WARNING = (
    "fluidsalus.tune: the PlacementGroupFactory that a function of the config (or a Trainable's "
    "default_resource_request) returned for this trial keeps more cores for the Ray tasks or actors the trial "
    "starts than the run kept (it asked the function once, with the search space's first configuration, before "
    "its device actors took the cores). Such a task that asks for a CPU waits until one is free. Pass a fixed "
    "PlacementGroupFactory to with_resources, or start the tasks with num_cpus=0.")
#: Refused (a ConfigError) for a placement group factory with GPUs in a bundle after the first: Ray keeps those GPUs
#: for the tasks and actors a trial starts, but the run's device actors hold every GPU of the cluster (one per GPU),
#: so such a task would wait for a GPU as long as the run lasts.
TASK_GPUS_ERROR = (
    "{where}: the PlacementGroupFactory's bundles[{index}] asks for {gpu:g} GPU(s) for the Ray tasks and actors "
    "each trial starts (Ray keeps the bundles after the first for them); fluidsalus cannot keep GPUs free for them "
    "(its device actors hold every GPU of the cluster), so such a task would wait for ever. Put the GPUs in the "
    "first bundle, the trial's own (the trial then runs on a GPU device and uses it itself), or start those tasks "
    "with num_gpus=0; a trial that trains on several GPUs: fluidsalus.distributed.data_parallel.")
#: Said once per run when every trial asks for resources other than CPUs and GPUs (custom resources, ``memory``):
#: recorded, but not reserved.
UNSCHEDULED_RESOURCES_WARNING = (
    "fluidsalus.tune: each trial asks for {keys}, which fluidsalus records (get_trial_resources()) but does not "
    "reserve: its device actors ask Ray only for CPUs and GPUs, so such a request neither limits how many trials "
    "run at once nor places them on the nodes that have it, where Ray does both (and waits for ever where no node "
    "has it). Trials are admitted by the memory they are measured to use (lanes), not by a memory request; to "
    "limit the trials at once, use TuneConfig(max_concurrent_trials=...).")
#: Said once per run when every trial asks for a GPU and the Ray cluster has none.
NO_GPU_WARNING = (
    "fluidsalus.tune: each trial asks for {gpu:g} GPU, but the Ray cluster has no GPU: the trials run on virtual "
    "CPU devices, where Ray would wait for a GPU for ever (did the GPU nodes fail to join the cluster?).")
#: The request keys the device actors reserve from Ray; any other a trial asks for is only recorded.
SCHEDULED_RESOURCES = ("cpu", "gpu")


def unscheduled_resources(request: Mapping[str, float] | None) -> list[str]:
    """The keys of a checked request (:func:`normalize_resources`) with a positive amount that the run does not
    reserve (not in :data:`SCHEDULED_RESOURCES`: ``memory`` and custom resources), sorted."""
    return sorted(key for key, amount in (request or {}).items() if key not in SCHEDULED_RESOURCES and amount > 0)


#: Said when a trial asks for more than one GPU.
MANY_GPUS_WARNING = (
    "fluidsalus.tune: each trial asks for {gpu:g} GPUs, but runs on one device (its CUDA_VISIBLE_DEVICES holds "
    "one GPU; it is not kept from other trials), where Ray would give it {gpu:g} GPUs, or wait for them for ever "
    "if no node has as many. A trial that trains on several GPUs: fluidsalus.distributed.data_parallel.")


def normalize_resources(resources: Any, keeps_task_cpus: bool = False) -> dict[str, float]:
    """A resource request as ``{name: amount}``: a dict, or a placement group factory's bundles summed.

    ``CPU``/``GPU`` become ``cpu``/``gpu``; the entries of Ray's ``custom_resources`` dict become keys of their
    own. Amounts follow Ray's rules: numbers ``>= 0``, no finer than :data:`RESOURCE_PRECISION`, and a ``gpu``
    above 1 a whole number.

    Args:
        resources: A dict such as ``{"cpu": 1, "gpu": 0.25}``, or a placement group factory (``.bundles``).
        keeps_task_cpus: Whether the run keeps the CPUs of a factory's later bundles free (a fixed request of
            ``with_resources``: :func:`task_cpus`); if not, such CPUs warn (:data:`EXTRA_BUNDLES_WARNING`).

    Returns:
        The request, with ``cpu``, ``gpu`` and ``memory`` under those names.

    Raises:
        ConfigError: Not a dict / placement group factory, a misspelt standard key (``gpus``, ``num_gpus``,
            ...), or a bad amount; the message names the key and what is allowed.
    """
    bundles = getattr(resources, "bundles", None)
    if bundles is not None and not isinstance(resources, Mapping):
        if not keeps_task_cpus and len(bundles) > 1 and any(_RESOURCE_ALIASES.get(str(k), str(k)) == "cpu" and v
                                                            for b in bundles[1:] for k, v in dict(b).items()):
            warnings.warn(EXTRA_BUNDLES_WARNING, UserWarning, stacklevel=3)
        total: dict[str, float] = {}
        for index, bundle in enumerate(bundles):
            for key, value in dict(bundle).items():
                name = str(key)
                total[name] = total.get(name, 0.0) + _check_amount(f"bundles[{index}].{name}", value)
        resources = total
    if not isinstance(resources, Mapping):
        raise ConfigError(
            "with_resources: resources must be a dict such as {'cpu': 1, 'gpu': 0.5}, a placement group factory "
            f"or a function of the config returning one (got {type(resources).__name__})"
        )
    entries = dict(resources)
    custom = entries.pop(CUSTOM_RESOURCES_KEY, None)
    if custom is not None:
        if not isinstance(custom, Mapping):
            raise ConfigError(f"with_resources: resources[{CUSTOM_RESOURCES_KEY!r}] must be a dict of custom "
                              f"resource name -> amount (got {type(custom).__name__})")
        entries.update(custom)
    out: dict[str, float] = {}
    for key, value in entries.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"with_resources: resource names must be non-empty strings (got {key!r})")
        if key in _MISSPELT_RESOURCES:
            raise ConfigError(
                f"with_resources: resources has the key {key!r}; did you mean {_MISSPELT_RESOURCES[key]!r}? The "
                f"standard keys are {', '.join(map(repr, STANDARD_RESOURCES))} (any other key is a custom resource)"
            )
        name = _RESOURCE_ALIASES.get(key, key)
        out[name] = out.get(name, 0.0) + _check_amount(key, value)
    return out


def _keep_data_parallel(base: Any, wrapper: Any) -> None:
    """Give ``wrapper`` the ``fluidsalus.distributed.data_parallel`` declaration of the trainable it wraps, which
    the engine reads from the trainable it runs: a data-parallel trainable given to ``Tuner``/``tune.run`` (also
    through ``with_parameters``/``with_resources``) ran on one device."""
    declared = getattr(base, DATA_PARALLEL_ATTR, None)
    if declared is not None:
        setattr(wrapper, DATA_PARALLEL_ATTR, declared)


class Prepared:
    """A trainable with parameters and/or a resource request attached (what the two wrappers return).

    Calling it runs the trainable in this process with the parameters (no Ray needed); ``Tuner.fit()`` turns
    it into a :class:`TrialEntry` that fetches them from Ray's object store.
    """

    def __init__(self, base: Any, parameters: Mapping[str, Any] | None = None,
                 resources: dict[str, float] | Callable[[dict[str, Any]], Any] | None = None,
                 task_cpus: float = 0.0, task_gpus: tuple[int, float] | None = None) -> None:
        self.base = base
        self.parameters = dict(parameters or {})
        self.resources = resources
        self.task_cpus = task_cpus  # the CPUs of a fixed placement group factory's later bundles (task_cpus)
        self.task_gpus = task_gpus  # its first later bundle with GPUs, refused at fit() (task_gpu_bundle)
        self.__name__ = trainable_name(base)
        self.__doc__ = getattr(base, "__doc__", None)
        self.__wrapped__ = base
        _keep_data_parallel(base, self)

    def __call__(self, config: dict[str, Any]) -> Any:
        if _is_trainable_class(self.base):
            raise TypeError("a Trainable class runs under Tuner.fit(); it cannot be called directly")
        return self.base(config, **self.parameters)

    def __repr__(self) -> str:
        return (f"Prepared({self.__name__}, parameters={sorted(self.parameters)}, "
                f"resources={self.resources!r})")


def with_parameters(trainable: Any, **kwargs: Any) -> Prepared:
    """Pass large objects to a trainable once per run (``ray.tune.with_parameters``).

    The trainable is called as ``trainable(config, **kwargs)`` (a Trainable class gets them in ``setup``). At
    ``Tuner.fit()`` every object is put in Ray's object store once, and each trial gets it with ``ray.get``
    on its device.

    Args:
        trainable: A function ``f(config, **kwargs)``, or a :class:`Trainable` subclass whose ``setup`` takes
            the keyword arguments.
        **kwargs: The objects.

    Returns:
        The trainable with its parameters attached.
    """
    trainable = adopt_ray_trainable(trainable, "with_parameters")
    if isinstance(trainable, Prepared):
        return Prepared(trainable.base, {**trainable.parameters, **kwargs}, trainable.resources, trainable.task_cpus,
                        trainable.task_gpus)
    return Prepared(trainable, kwargs)


def with_resources(trainable: Any, resources: Any) -> Prepared:
    """Attach a resource request to a trainable (``ray.tune.with_resources``).

    fluidsalus reads it as a hint: the request is checked now (a function's result, at each trial's start), and
    each trial records it (``get_context().get_trial_resources()``, ``Trainable.trial_resources``). The engine
    does not reserve it: its planner places trials several to a device, in lanes sized by measured memory, so a
    fractional ``gpu`` is not a hard share of a GPU, and a ``gpu`` request runs on virtual CPU devices where
    there is no GPU.

    Args:
        trainable: A function or :class:`Trainable` subclass.
        resources: ``{"cpu": 1, "gpu": 0.5, "memory": ..., "custom_resources": {...}}`` (``CPU``/``GPU`` too),
            a placement group factory (its bundles are summed, and the CPUs of those after the first are kept
            free for the Ray tasks and actors each trial starts, as Ray keeps them: :func:`task_cpus`; GPUs there
            are refused at ``fit()``: :data:`TASK_GPUS_ERROR`), or a function ``f(config)`` that returns one of
            these for each trial.

    Returns:
        The trainable with the request attached.

    Raises:
        ConfigError: A bad request (see :func:`normalize_resources`), or a trainable that cannot run.
    """
    checked = _check_resources(resources)
    kept, gpu_bundle = task_cpus(resources), task_gpu_bundle(resources)
    trainable = adopt_ray_trainable(trainable, "with_resources")
    if isinstance(trainable, Prepared):
        return Prepared(trainable.base, trainable.parameters, checked, kept, gpu_bundle)
    return Prepared(trainable, None, checked, kept, gpu_bundle)


def gpu_hint(resources: dict[str, float] | Callable[[dict[str, Any]], Any] | None) -> float | None:
    """The planner's hint from a ``with_resources`` request: its ``gpu``, when it names one for every trial.

    Args:
        resources: The checked request (a dict), a function of the config, or None.

    Returns:
        ``resources["gpu"]`` when it is a dict with a positive ``gpu``; None for no request, no ``gpu``, or a
        function (its answer differs per trial and is known only as each trial starts).
    """
    if not isinstance(resources, Mapping):
        return None
    gpu = resources.get("gpu")
    return float(gpu) if gpu is not None and gpu > 0 else None


def cpu_request(resources: dict[str, float] | Callable[[dict[str, Any]], Any] | None,
                kept_for_tasks: float = 0.0) -> float | None:
    """The cores every trial of a ``with_resources`` request asks for itself: the planner's lane count.

    Args:
        resources: The checked request (a dict), a function of the config, or None.
        kept_for_tasks: The request's CPUs kept for the trial's tasks (:func:`task_cpus`), not its own.

    Returns:
        ``resources["cpu"]`` less ``kept_for_tasks`` when that is positive and the request is a dict
        (``fluidsalus.run(cpus_per_trial=...)``); None for no request, no ``cpu`` or none left, or a function
        (known only as each trial starts).
    """
    if not isinstance(resources, Mapping):
        return None
    cpu = resources.get("cpu")
    own = float(cpu) - kept_for_tasks if cpu is not None else 0.0
    return own if own >= RESOURCE_PRECISION else None


# ---------------------------------------------------------------------------------------------------------
# The class API
# ---------------------------------------------------------------------------------------------------------


class Trainable:
    """The class trainable API (``ray.tune.Trainable``): override ``setup``, ``step``, ``save_checkpoint``,
    ``load_checkpoint`` and ``cleanup``.

    ``step()`` returns one iteration's metrics (``{"done": True}`` ends the trial). ``save_checkpoint(dir)``
    writes files into ``dir`` and returns None, or returns a dict that fluidsalus stores;
    ``load_checkpoint`` then gets the directory, or that dict.

    Args:
        config: The trial's configuration (kept as ``self.config``; ``setup`` gets a copy).
        storage: Accepted for Ray's signature; unused.
    """

    def __init__(self, config: dict[str, Any] | None = None, storage: Any = None) -> None:
        self.config = dict(config or {})
        self._iteration = 0
        self._time_total = 0.0
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0
        self._restored = False
        self._last_result: dict[str, Any] | None = None
        setup_kwargs = getattr(self, "_fluidsalus_setup_kwargs", {})
        self.setup(copy.deepcopy(self.config), **setup_kwargs)

    # ------------------------------------------------------------------ user hooks

    def setup(self, config: dict[str, Any]) -> None:
        """Initialise the trial (called once, with a copy of ``config``)."""

    def step(self) -> dict[str, Any]:
        """Run one iteration and return its metrics."""
        raise NotImplementedError(f"{type(self).__name__}.step() must be implemented")

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        """Write the state into ``checkpoint_dir`` (return None), or return it as a dict."""
        raise NotImplementedError(f"{type(self).__name__}.save_checkpoint() must be implemented to checkpoint")

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        """Restore from what ``save_checkpoint`` wrote (the directory) or returned (the dict)."""
        raise NotImplementedError(f"{type(self).__name__}.load_checkpoint() must be implemented to restore")

    def cleanup(self) -> None:
        """Release resources when the trial ends."""

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Ray's actor reuse hook; fluidsalus never calls it."""
        return False

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """The resource request of a trial with ``config`` (Ray's hook): override it to return a dict such as
        ``{"cpu": 1, "gpu": 0.5}`` or a ``PlacementGroupFactory``. It is used, as Ray uses it, when the class
        is not wrapped by ``with_resources``, and recorded as that trial's hint (``trial_resources``).

        Returns:
            None here: no request.
        """
        return None

    @classmethod
    def resource_help(cls, config: dict[str, Any]) -> str:
        """A help text about this trainable's resources (Ray's hook, for a message of the trainable's own): ``""``
        here. fluidsalus does not call it."""
        return ""

    def _export_model(self, export_formats: list[str], export_dir: str) -> dict[str, Any]:
        """Export the model in each of ``export_formats`` into ``export_dir`` (Ray's hook: override it).

        Returns:
            Format -> what was exported (the path, say); ``{}`` here.
        """
        return {}

    def export_model(self, export_formats: list[str] | str, export_dir: str | None = None) -> dict[str, Any]:
        """Export the model as :meth:`_export_model` does, as Ray's ``Trainable.export_model``: one format may be
        given as a str, and ``export_dir`` defaults to :attr:`logdir` (the trial's folder). Nothing calls it but
        the trainable itself (Ray 2.60's Tune neither: ``export_formats`` is accepted and unused).

        Returns:
            :meth:`_export_model`'s answer.
        """
        if isinstance(export_formats, str):
            export_formats = [export_formats]
        return self._export_model(list(export_formats), export_dir or self.logdir)

    # ------------------------------------------------------------------ the loop's API (Ray's names)

    def train(self) -> dict[str, Any]:
        """Run ``step()`` once and count the iteration.

        Returns:
            ``step()``'s dict with Ray's keys filled in, as Ray's ``Trainable.train()`` returns it:
            ``done`` (False unless given) and ``training_iteration`` (the count unless given), then
            :data:`TRAIN_FILLED_KEYS` (``time_this_iter_s`` is the step's own value when it gave one).
        """
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"{type(self).__name__}.step() must return a dict, got {type(result).__name__}")
        result = dict(result)
        self._iteration += 1
        self._iterations_since_restore += 1
        given = result.get(TIME_THIS_ITER_KEY)
        seconds = float(given) if isinstance(given, (int, float)) else time.time() - start
        self._time_total += seconds
        self._time_since_restore += seconds
        result.setdefault(DONE_KEY, False)
        result.setdefault("training_iteration", self._iteration)
        result.update(self.get_auto_filled_metrics(time_this_iter=seconds, timestamp=result.get("timestamp")))
        self.log_result(result)
        self._last_result = result
        return result

    def get_auto_filled_metrics(self, now: datetime.datetime | None = None, time_this_iter: float | None = None,
                                timestamp: int | None = None, debug_metrics_only: bool = False) -> dict[str, Any]:
        """The keys :meth:`train` fills into each result (Ray's method of the same name).

        Args:
            now: The time of the result (default: now).
            time_this_iter: The iteration's seconds.
            timestamp: The result's own ``timestamp``, kept when given.
            debug_metrics_only: Only the keys that need no iteration (Ray's ``DEBUG_METRICS``).

        Returns:
            ``trial_id``, ``date``, ``timestamp``, ``time_this_iter_s``, ``time_total_s``, ``pid``, ``hostname``,
            ``node_ip``, ``config``, ``time_since_restore`` and ``iterations_since_restore``.
        """
        now = now or datetime.datetime.now()
        filled = {"trial_id": self.trial_id, "date": now.strftime(DATE_FORMAT),
                  "timestamp": timestamp if timestamp else int(now.timestamp()), TIME_THIS_ITER_KEY: time_this_iter,
                  "time_total_s": self._time_total, "pid": os.getpid(), "hostname": HOSTNAME, "node_ip": node_ip(),
                  "config": self.config, "time_since_restore": self._time_since_restore,
                  "iterations_since_restore": self._iterations_since_restore}
        if debug_metrics_only:
            return {key: value for key, value in filled.items() if key in _DEBUG_METRICS}
        return filled

    def log_result(self, result: dict[str, Any]) -> None:
        """Called by :meth:`train` with each filled-in result; override it to log results your way (Ray's
        hook). The default does nothing."""

    def get_current_ip_pid(self) -> tuple[str, int]:
        """This node's IP address and this process's id."""
        return node_ip(), os.getpid()

    def get_state(self) -> dict[str, Any]:
        """The counters a checkpoint restores (Ray's ``get_state``): iteration, total time, last result."""
        return {"iteration": self._iteration, "time_total": self._time_total, "last_result": self._last_result}

    def reset(self, new_config: dict[str, Any], storage: Any = None) -> bool:
        """Take a new config in place (Ray calls this to reuse an actor): ``self.config`` becomes it, then
        :meth:`reset_config`, then the counters start again, in Ray's order.

        Returns:
            ``reset_config``'s answer; on False the counters are left as they were.
        """
        self.config = dict(new_config)
        if not self.reset_config(dict(new_config)):
            return False
        self._iteration, self._time_total, self._time_since_restore = 0, 0.0, 0.0
        self._iterations_since_restore, self._restored = 0, False
        return True

    def save(self, checkpoint_dir: str | None = None) -> Checkpoint:
        """Save a checkpoint into ``checkpoint_dir`` (a new temporary folder if None)."""
        target = checkpoint_dir or tempfile.mkdtemp(prefix="fluidsalus_trainable_")
        os.makedirs(target, exist_ok=True)
        try:
            state = self.save_checkpoint(target)
            if isinstance(state, dict):
                with open(os.path.join(target, DICT_CHECKPOINT_FILE), "wb") as f:
                    pickle.dump(state, f)
            elif state is not None and not isinstance(state, str):
                raise TypeError(f"{type(self).__name__}.save_checkpoint() must return None or a dict, "
                                f"got {type(state).__name__}")
            elif isinstance(state, str) and os.path.normpath(state) != os.path.normpath(target):
                # Ray's rule and words (a file in the folder, as older Ray took, was passed on as the folder here)
                raise ValueError("The returned checkpoint path from `save_checkpoint` must be None or the same as "
                                 f"the provided path argument. Got {state} != {target}")
        except BaseException:
            if checkpoint_dir is None:  # the temporary folder made for it goes with the failed save (h171's F2)
                shutil.rmtree(target, ignore_errors=True)
            raise
        checkpoint = Checkpoint.from_directory(target)
        setattr(checkpoint, COUNTERS_ATTR, (self._iteration, self._time_total))
        return checkpoint

    def restore(self, checkpoint_path: Checkpoint | str) -> None:
        """Restore from a checkpoint that :meth:`save` made (a :class:`Checkpoint` or its folder).

        As in Ray, the counters (``iteration``, ``time_total_s``) come back with the object ``save()`` returned;
        from a folder alone they start at 0 (in a trial the session sets them from the store)."""
        path = checkpoint_path.path if isinstance(checkpoint_path, Checkpoint) else os.fspath(checkpoint_path)
        counters = getattr(checkpoint_path, COUNTERS_ATTR, None)
        state_file = os.path.join(path, STATE_FILE)
        if counters is None and os.path.exists(state_file):  # (a checkpoint saved before 2026-11-30)
            with open(state_file) as f:
                state = json.load(f)
            counters = (int(state.get("iteration", 0)), float(state.get("time_total", 0.0)))
        self._iteration, self._time_total = counters if counters is not None else (0, 0.0)
        dict_file = os.path.join(path, DICT_CHECKPOINT_FILE)
        if os.path.exists(dict_file):
            with open(dict_file, "rb") as f:
                self.load_checkpoint(pickle.load(f))
        else:
            self.load_checkpoint(path)
        self._restored = True
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0

    def stop(self) -> None:
        """End the trial: calls ``cleanup()``."""
        self.cleanup()

    def get_config(self) -> dict[str, Any]:
        """The trial's configuration."""
        return self.config

    @property
    def iteration(self) -> int:
        """Iterations done so far (counting those before a restore)."""
        return self._iteration

    @property
    def training_iteration(self) -> int:
        """Ray's alias of :attr:`iteration`."""
        return self._iteration

    @property
    def trial_id(self) -> str:
        """The trial's id (``"default"`` outside a trial, as in Ray)."""
        return self._context_value("get_trial_id", "default")

    @property
    def trial_name(self) -> str:
        """The trial's name (``"default"`` outside a trial)."""
        return self._context_value("get_trial_name", "default")

    @property
    def logdir(self) -> str:
        """The trial's folder (the current folder outside a trial)."""
        return self._context_value("get_trial_dir", os.getcwd())

    @property
    def trial_resources(self) -> TrialResources:
        """The trial's recorded resources (empty outside a trial): a dict that also reads like Ray's
        ``PlacementGroupFactory`` (:class:`fluidsalus.session.TrialResources`)."""
        return self._context_value("get_trial_resources", TrialResources())

    @staticmethod
    def _context_value(method: str, default: Any) -> Any:
        from fluidsalus.errors import SessionError
        from fluidsalus.session import get_context

        try:
            return getattr(get_context(), method)()
        except SessionError:
            return default


@dataclass(frozen=True)
class ClassOptions:
    """When a class :class:`Trainable` checkpoints.

    Attributes:
        checkpoint_frequency: Every this many iterations (0: never).
        checkpoint_at_end: When the trial ends: here when the trainable ends itself (``"done": True``); a stop
            rule's or a scheduler's ending is found by the session at the report (:func:`run_trainable_class`).
        at_budgets: With each result that pauses the trial at its budget, as ``checkpoint_at_end`` does too:
            population based training clones a trial from its checkpoint at its last perturbation point, and
            restarts it from there (an exploit, a turn). It used to be at every iteration, so that
            ``num_to_keep`` kept only the last few iterations and a source's point was often gone when a bottom
            trial came to clone it.
        checkpoint_verdicts: After each result that carries no checkpoint, wait for the driver to say whether a
            callback asked for one (Ray's ``result["should_checkpoint"] = True``), and save that iteration then,
            as Ray saves the state of the result itself. Set when the run has a callback that could ask; without
            it a request is honoured at the trial's next iteration, and a trial never waits for the driver.
    """

    checkpoint_frequency: int = 0
    checkpoint_at_end: bool = False
    at_budgets: bool = False
    checkpoint_verdicts: bool = False

    def wants(self, iteration: int, result: Mapping[str, Any], done: bool) -> bool:
        """Whether to checkpoint after ``iteration``."""
        return bool(
            result.get(SHOULD_CHECKPOINT_KEY)
            or (self.checkpoint_frequency and iteration % self.checkpoint_frequency == 0)
            or (done and self.checkpoint_at_end)
        )


def run_trainable_class(cls: type[Trainable], config: dict[str, Any], parameters: Mapping[str, Any],
                        options: ClassOptions) -> None:
    """Run a :class:`Trainable` subclass as a function trainable (inside a trial).

    Each ``step()`` is one report. The trainable is saved with it when the options ask for this iteration; a
    callback's ``should_checkpoint`` is answered right after the report under ``checkpoint_verdicts`` (the save is
    attached to that result), else at the next iteration, when the driver's request has arrived. Under
    ``checkpoint_at_end`` the session saves it with the result that ends the trial, whatever ends it (the
    trainable's ``done``, the stop rule, a scheduler's stop), as Ray does, and with a result that pauses it at a
    rung, where the verdict may end it.
    """
    from fluidsalus.session import _current

    session = _current("report")
    trainable = cls.__new__(cls)
    trainable._fluidsalus_setup_kwargs = dict(parameters)
    cls.__init__(trainable, config)
    saved: list[str] = []  # the temporary folders of this iteration's save, removed once persisted

    def save() -> Checkpoint:
        checkpoint = trainable.save()
        saved.append(checkpoint.path)
        return checkpoint

    try:
        checkpoint = session.resume_checkpoint()
        if checkpoint is not None:
            # the checkpoint's counters, as the store recorded them, in place before load_checkpoint runs (Ray's
            # restore takes them from its result first: a schedule read from self.iteration there restarted at 0)
            setattr(checkpoint, COUNTERS_ATTR, session.checkpoint_at)
            trainable.restore(checkpoint)
        while True:
            result = trainable.train()
            for key in TRAIN_FILLED_KEYS:  # the session fills these in for the trial (train() did, for a caller)
                result.pop(key, None)
            done = bool(result.pop(DONE_KEY, False))
            now = options.wants(trainable.iteration, result, done) or (
                not options.checkpoint_verdicts and session.take_checkpoint_request())
            result.pop(SHOULD_CHECKPOINT_KEY, None)
            if done:  # the trial's last result says so, as Ray's last row does (the report then ends the trial)
                result[DONE_KEY] = True
            try:
                if now:
                    try:
                        checkpoint = save()
                    except Exception as error:
                        # Ray has the result before it saves: the result stands, and the save's error fails the
                        # trial, also one stopped at this result; an error of the report itself (the run's stop
                        # rule or budget key, which fail the run) goes first
                        with contextlib.suppress(StopTrial):
                            session.report(result)
                        raise error
                    session.report(result, checkpoint=checkpoint)
                else:
                    # Under verdicts, the question right after goes with the result (and gives the lane away).
                    session.report(result, at_end=save if options.checkpoint_at_end or options.at_budgets else None,
                                   deferred=options.checkpoint_verdicts and not done,
                                   end_save_at_pause=not options.at_budgets)
                    if options.checkpoint_verdicts and not done:
                        # (a pause at the budget under checkpoint_at_end or at_budgets saved this iteration already)
                        if session.checkpoint_at[0] != session.iteration and session.checkpoint_verdict():
                            session.attach_checkpoint(save())
                        if session.stop_requested.is_set():  # the driver stopped it at this result, as Ray would
                            # (not the run's end: Ray saves checkpoint_at_end only for a trial that is done)
                            if options.checkpoint_at_end and session.checkpoint_at[0] != session.iteration \
                                    and not session.no_verdict:
                                session.attach_checkpoint(save())
                            raise StopTrial()
            finally:
                for path in saved:
                    shutil.rmtree(path, ignore_errors=True)
                saved.clear()
            if done:
                return
    finally:
        try:
            trainable.stop()
        except Exception:  # (logged: as in Ray, cleanup() decides nothing about the trial)
            # Ray's Tune ends the actor whatever its cleanup() raises: a finished trial stays finished, and a
            # trial's own error stays its error (here it failed a finished trial, which max_failures then ran
            # again past its stop rule, and replaced a step()'s error).
            logger.warning("%s.cleanup() raised; the trial's outcome is unchanged", cls.__name__, exc_info=True)


# ---------------------------------------------------------------------------------------------------------
# What the device actors run
# ---------------------------------------------------------------------------------------------------------


def _load_entry(base: Any, refs_blob: bytes, resources: Any, options: ClassOptions | None, name: str,
                log_files: tuple[str | None, str | None] = (None, None), chdir: bool = False,
                kept_for_tasks: float = 0.0) -> TrialEntry:
    import ray

    entry = TrialEntry(base, ray.cloudpickle.loads(refs_blob), resources, options, name, log_files, chdir)
    entry.kept_for_tasks = kept_for_tasks
    return entry


class TrialEntry:
    """The picklable function every trial of a ``Tuner.fit()`` runs.

    It records the trial's resource request, fetches the ``with_parameters`` objects from Ray's object store
    and calls the trainable (a :class:`Trainable` subclass runs through :func:`run_trainable_class`), in the
    trial's folder as its working directory when ``chdir`` is set (:mod:`fluidsalus.tune._workdir`).

    Object references are pickled with Ray's own pickler (``ray.cloudpickle``), which registers their owner, so
    the device actors can fetch them; a plain ``cloudpickle`` of a reference cannot be resolved there.

    Args:
        base: The function or Trainable subclass.
        refs: Parameter name -> ``ray.ObjectRef``.
        resources: The resource request (a dict, a function of the config, or None).
        options: Checkpointing of a Trainable subclass (None for functions).
        name: The trainable's name.
        log_files: ``RunConfig.log_to_file`` as (stdout, stderr) file names in the trial's folder (None: none).
        chdir: Run the trainable with the trial's folder as its working directory (Ray's
            ``RAY_CHDIR_TO_TRIAL_DIR``, read on the driver).
    """

    def __init__(self, base: Any, refs: Mapping[str, Any], resources: Any, options: ClassOptions | None,
                 name: str, log_files: tuple[str | None, str | None] = (None, None), chdir: bool = False) -> None:
        self.base = base
        self.refs = dict(refs)
        self.resources = resources
        self.options = options
        self.__name__ = name
        self.log_files = log_files
        self.chdir = chdir
        # The cores the run keeps free per trial for the tasks it starts, when a function of the config gives its
        # requests (:func:`probe_task_cpus`): a trial's later bundles within them warn of nothing.
        self.kept_for_tasks = 0.0
        functools.update_wrapper(self, base, assigned=("__doc__",), updated=())
        _keep_data_parallel(base, self)

    def __reduce__(self) -> tuple[Any, ...]:
        import ray

        return (_load_entry, (self.base, ray.cloudpickle.dumps(self.refs), self.resources, self.options,
                              self.__name__, self.log_files, self.chdir, self.kept_for_tasks))

    def _record_resources(self, config: dict[str, Any]) -> None:
        from fluidsalus.errors import SessionError
        from fluidsalus.session import get_context

        if self.resources is None:
            return
        request = self.resources(config) if callable(self.resources) else self.resources
        if request is None:  # a default_resource_request with nothing to ask for
            return
        # (a factory whose later bundles ask for GPUs fails its trial: its tasks would wait for ever)
        check_task_gpus(task_gpu_bundle(request), f"the resource request of {callable_name(self.resources)}")
        kept = 0 < task_cpus(request) <= self.kept_for_tasks + RESOURCE_PRECISION
        with contextlib.suppress(SessionError):
            get_context().resources = normalize_resources(request, keeps_task_cpus=kept)

    def __call__(self, config: dict[str, Any]) -> Any:
        if self.log_files == (None, None) and not self.chdir:
            return self._run(config)
        from fluidsalus.session import get_context
        from fluidsalus.tune._output import trial_output
        from fluidsalus.tune._workdir import trial_working_directory

        trial_dir = get_context().get_trial_dir()
        with contextlib.ExitStack() as stack:
            if self.chdir:
                stack.enter_context(trial_working_directory(trial_dir))
            if self.log_files != (None, None):
                stack.enter_context(trial_output(trial_dir, *self.log_files))
            return self._run(config)

    def _run(self, config: dict[str, Any]) -> Any:
        import ray

        self._record_resources(config)
        parameters = {name: ray.get(ref) for name, ref in self.refs.items()}
        if _is_trainable_class(self.base):
            return run_trainable_class(self.base, config, parameters, self.options or ClassOptions())
        return self.base(config, **parameters)


def make_entry(trainable: Any, options: ClassOptions | None,
               log_files: tuple[str | None, str | None] = (None, None),
               chdir: bool = False) -> tuple[TrialEntry, list[Any]]:
    """The :class:`TrialEntry` of a user's trainable; the ``with_parameters`` objects are put in Ray now.

    Ray must be initialised. ``log_files`` and ``chdir`` are the entry's (see :class:`TrialEntry`). Returns the
    entry and the object references (keep them alive for the run).
    """
    import ray

    prepared = trainable if isinstance(trainable, Prepared) else Prepared(trainable)
    _check_base(prepared.base, "Tuner")
    refs = {name: ray.put(value) for name, value in prepared.parameters.items()}
    is_class = _is_trainable_class(prepared.base)
    entry = TrialEntry(prepared.base, refs, run_request(prepared), options if is_class else None, prepared.__name__,
                       log_files, chdir)
    return entry, list(refs.values())


@contextlib.contextmanager
def _generators_kept() -> Any:
    """Leave Python's and NumPy's global random generators as they were: a ``sample_from`` in the space draws from
    them, and a draw made before the run (to ask a resource function) must not change the run's own draws (a
    review: with ``np.random.seed(0)``, a resource function changed a run's configurations)."""
    import random

    import numpy as np

    states = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])


def carried_request(trainable: Any, space: Mapping[str, Any] | None = None) -> str | None:
    """What gives a trainable its own resource request, for ``tune.run``'s refusal of ``resources_per_trial``
    beside it (Ray's TuneError): ``"with_resources"`` (ours or Ray Tune's), ``"default_resource_request"`` (a
    Trainable subclass's own, when it answers a request for the space's first configuration: Ray refuses only
    then), or None when it carries none."""
    if isinstance(trainable, Prepared):
        if trainable.resources is not None:
            return "with_resources"
        trainable = trainable.base
    if getattr(trainable, "_resources", None) is not None and not isinstance(trainable, type):
        return "with_resources"  # Ray Tune's own (translated at fit())
    if _is_trainable_class(trainable) and _overrides_resource_request(trainable):
        from fluidsalus.space import iter_variants

        try:
            with _generators_kept():
                config = next(iter(iter_variants(dict(space or {}), 1, seed=0)), {})
                answer = trainable.default_resource_request(config)
        except Exception:  # noqa: BLE001 - its trials fail with it, as in Ray
            return None
        return "default_resource_request" if answer is not None else None
    return None


def run_request(trainable: Any) -> dict[str, float] | Callable[[dict[str, Any]], Any] | None:
    """The resource request a run's trials get: ``with_resources``'s (a dict or a function of the config), else a
    Trainable subclass's own ``default_resource_request`` (a bound classmethod), else None (Ray's default)."""
    prepared = trainable if isinstance(trainable, Prepared) else Prepared(trainable)
    if prepared.resources is None and _is_trainable_class(prepared.base) \
            and _overrides_resource_request(prepared.base):
        return prepared.base.default_resource_request  # type: ignore[no-any-return]  # pickled by reference
    return prepared.resources


def trial_placement_group_factory(request: Any, config: Mapping[str, Any]) -> PlacementGroupFactory:
    """A trial's resource request as Ray's ``trial.placement_group_factory``: one bundle, the request as the trial
    records it (``get_context().get_trial_resources()``: a factory's bundles summed).

    Args:
        request: The run's request (:func:`run_request`): a dict, a function of the config, or None.
        config: The trial's configuration (a function is asked with it, on the driver, as Ray asks it).

    Returns:
        The factory; Ray's default request (one CPU) for None, or for a function that raises or answers
        something that is no request for this configuration (that trial fails with that error at its start).
    """
    if callable(request) and not isinstance(request, Mapping):
        try:
            request = request(dict(config))
        except Exception:  # noqa: BLE001 - the trial itself fails with it; a callback's view must not
            request = None
    try:
        resources = {} if request is None else normalize_resources(request, keeps_task_cpus=True)
    except ConfigError:
        resources = {}
    return PlacementGroupFactory(TrialResources(resources).bundles)


#: The search space's first configurations a function of the config is asked with before the devices start
#: (:func:`probe_request`): the first for the cores its factory keeps for the trial's tasks, and, when the answers
#: for all of them agree, a request the run counts as a fixed one (a function that ignores its config).
PROBE_CONFIGURATIONS = 2


def probe_request(entry: TrialEntry, space: Mapping[str, Any]) -> tuple[float, dict[str, float] | None]:
    """What a function of the config (``with_resources(f)``, a Trainable's ``default_resource_request``) that gives
    each trial's request tells the run before its devices start.

    Ray keeps the CPUs of a placement group factory's bundles after the first for the Ray tasks and actors a trial
    starts. A fixed factory's are known before the devices start (:func:`task_cpus`); a function's only at each
    trial's start, once the device actors hold every core, so such a task waited for a core as long as the run
    lasted. And a fixed request's ``cpu`` and ``gpu`` set how many trials run at once (:func:`cpu_request`,
    :func:`gpu_hint`), where a function's set nothing: a constant ``default_resource_request`` of two CPUs ran a
    trial per core, where Ray runs one per two. So the function is asked now with the space's first
    :data:`PROBE_CONFIGURATIONS` configurations (seed 0), as Ray asks it for each trial: its later bundles' CPUs in
    the first answer are kept for every trial (a trial whose own request keeps more is warned of at its start), and
    when every answer is the same request, it is counted as a fixed one.

    Args:
        entry: The run's trainable.
        space: The search space.

    Returns:
        ``(task_cpus, constant)``: the CPUs of the first answer's later bundles, and the answers' request when they
        all agree (``{}`` for None: no request), else None. ``(0.0, None)`` when the request is not a function, the
        space has no configuration to ask with, or the function raises or answers no request for the first one (it
        is asked again, per trial, as before).

    Raises:
        ConfigError: The first answer is a factory whose later bundles ask for GPUs (:data:`TASK_GPUS_ERROR`).
    """
    from fluidsalus.space import iter_variants

    if not callable(entry.resources):
        return 0.0, None
    answers: list[Any] = []
    try:
        with _generators_kept():
            for config in iter_variants(dict(space), PROBE_CONFIGURATIONS, seed=0):
                answers.append(entry.resources(config))
                if len(answers) == PROBE_CONFIGURATIONS:
                    break
    except Exception:  # noqa: BLE001 - a function that needs what only a trial's config has: as before
        if not answers:
            return 0.0, None
        answers.append(_NO_ANSWER)  # (the later configuration's: not the same request)
    if not answers:
        return 0.0, None
    first = answers[0]
    check_task_gpus(task_gpu_bundle(first), f"the resource request of {callable_name(entry.resources)} (asked "
                                            "with the search space's first configuration)")
    try:
        requests = [{} if answer is None else normalize_resources(answer, keeps_task_cpus=True)
                    if answer is not _NO_ANSWER else None for answer in answers]
    except ConfigError:  # (its trial fails with it at its start, as before)
        return task_cpus(first), None
    same = requests[0] is not None and all(request == requests[0] for request in requests) \
        and all(task_cpus(answer) == task_cpus(first) for answer in answers)
    return task_cpus(first), requests[0] if same else None


#: Stands for an answer the function raised on, in :func:`probe_request`.
_NO_ANSWER = object()


def probe_task_cpus(entry: TrialEntry, space: Mapping[str, Any]) -> float:
    """The cores to keep free per trial for the Ray tasks and actors it starts, when a function of the config gives
    each trial's request: :func:`probe_request`'s first answer."""
    return probe_request(entry, space)[0]


def _overrides_resource_request(cls: type) -> bool:
    """Whether a Trainable subclass defines its own ``default_resource_request`` (not ours or Ray's default)."""
    def func(owner: Any) -> Any:
        return getattr(getattr(owner, "default_resource_request", None), "__func__", None)

    defaults = {func(Trainable)} | {func(base) for base in cls.__mro__ if base.__module__.startswith("ray.")}
    return func(cls) is not None and func(cls) not in defaults


def is_class_trainable(trainable: Any) -> bool:
    """Whether ``trainable`` (possibly wrapped) is a :class:`Trainable` subclass."""
    base = trainable.base if isinstance(trainable, Prepared) else trainable
    return _is_trainable_class(base)


class PlacementGroupFactory:
    """A resource request as bundles (``ray.tune.PlacementGroupFactory``), for :func:`with_resources`.

    fluidsalus sums the bundles into one request and records it as a hint, and keeps the CPUs of the bundles after
    the first free for the Ray tasks and actors each trial starts, as Ray does (see :func:`with_resources`); GPUs
    in those bundles are refused at ``fit()`` (:data:`TASK_GPUS_ERROR`).

    Args:
        bundles: A list of ``{resource: amount}`` dicts.
        strategy: Ray's placement strategy; accepted and not used.
    """

    def __init__(self, bundles: list[dict[str, float]], strategy: str = "PACK", *args: Any, **kwargs: Any) -> None:
        if not isinstance(bundles, (list, tuple)) or not all(isinstance(b, Mapping) for b in bundles):
            raise ConfigError(f"PlacementGroupFactory: bundles must be a list of dicts (got {bundles!r})")
        self.bundles = [dict(b) for b in bundles]
        self.strategy = strategy

    @property
    def required_resources(self) -> dict[str, float]:
        """The bundles summed, with Ray's key names (``CPU``, ``GPU``), as Ray's factory answers."""
        return TrialResources(normalize_resources(self, keeps_task_cpus=True)).required_resources

    @property
    def head_bundle_is_empty(self) -> bool:
        """Whether the first bundle (the trial's own) asks for nothing, as Ray's factory answers."""
        return not self.bundles or not any(self.bundles[0].values())

    @property
    def head_cpus(self) -> float:
        """The CPUs of the first bundle (0 for an empty one), as Ray's factory answers."""
        if self.head_bundle_is_empty:
            return 0.0
        return float(sum(v for k, v in self.bundles[0].items() if _RESOURCE_ALIASES.get(str(k), str(k)) == "cpu"))

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self.bundles!r}, strategy={self.strategy!r})"


#: Module of Ray's ``with_parameters``/``with_resources``.
_RAY_TRAINABLE_UTIL = "ray.tune.trainable.util"
#: Name of the function Ray's ``with_parameters`` returns for a function trainable.
_RAY_WRAPPER_NAME = "inner"
#: Qualified names of the subclasses Ray's ``with_parameters`` and ``with_resources`` make of a class trainable
#: (their ``__name__`` is the wrapped class's).
_RAY_PARAMETERS_CLASS = "with_parameters.<locals>._Inner"
_RAY_RESOURCES_CLASS = "with_resources.<locals>.ResourceTrainable"


def _parameters_of(closure: Mapping[str, Any]) -> dict[str, Any]:
    """The objects Ray's ``with_parameters`` keeps, read back from its wrapper's closure (its registry of object
    references, under ``prefix + key``)."""
    registry, prefix = closure["parameter_registry"], closure["prefix"]
    return {key: registry.get(prefix + key) for key in closure["keys"]}


def _unwrap_ray_wrappers(trainable: Any) -> tuple[Any, dict[str, Any], Any, list[str]]:
    """What Ray's ``with_parameters`` / ``with_resources`` wrapped: ``(base, parameters, Ray's resource request or
    None, names of the wrappers found)``. A function's wrappers are a closure (``with_parameters``) and a
    ``_resources`` attribute (``with_resources``); a class's are subclasses made in ``ray.tune.trainable.util``,
    one per call, whose ``setup`` / ``default_resource_request`` hold the objects / the request in their closure
    (the outermost request is the one Ray asks, as the outermost subclass's method overrides the others)."""
    parameters: dict[str, Any] = {}
    ray_resources: Any = None
    translated: list[str] = []
    base = trainable
    if not isinstance(trainable, type):
        code = getattr(trainable, "__code__", None)
        if getattr(trainable, "__module__", None) == _RAY_TRAINABLE_UTIL and code is not None \
                and code.co_name == _RAY_WRAPPER_NAME:
            closure = inspect.getclosurevars(trainable).nonlocals
            base, parameters = closure["trainable"], _parameters_of(closure)
            translated.append("with_parameters")
        ray_resources = getattr(trainable, "_resources", None)
        if ray_resources is not None:
            translated.append("with_resources")
        return base, parameters, ray_resources, translated
    while base.__module__ == _RAY_TRAINABLE_UTIL and base.__qualname__ in (_RAY_PARAMETERS_CLASS,
                                                                            _RAY_RESOURCES_CLASS):
        if base.__qualname__ == _RAY_PARAMETERS_CLASS:
            parameters = {**_parameters_of(inspect.getclosurevars(base.setup).nonlocals), **parameters}
            name = "with_parameters"
        else:
            if ray_resources is None:
                ray_resources = inspect.getclosurevars(base.default_resource_request).nonlocals["pgf"]
            name = "with_resources"
        if name not in translated:
            translated.append(name)
        base = base.__bases__[0]
    return base, parameters, ray_resources, translated


def adopt_ray_trainable(trainable: Any, where: str = "Tuner") -> Any:
    """A trainable wrapped by Ray's own ``with_parameters`` / ``with_resources``, as fluidsalus's wrappers.

    Ray's ``with_parameters`` keeps the objects in a registry of object references that only Ray's trial
    runner can pickle, and ``with_resources`` sets a ``_resources`` attribute on a function (a class gets a
    subclass: :func:`_unwrap_ray_wrappers`). The objects and the request are read back on the driver and attached
    with :class:`Prepared`, with a ``UserWarning``. Ray Tune's own class trainables that fluidsalus ships a twin of
    become the twin (:func:`adopt_ray_class`), wrapped or not. fluidsalus's own wrapper inside Ray's (a script
    that imports both) is merged with them as Ray merges its own: the objects of both (the outer's win), and Ray's
    ``with_resources`` request over the inner one, else the inner one (Ray's ``with_parameters`` keeps the request
    of what it wraps). Anything else is returned as it is, once checked: a trainable that cannot run (a subclass
    of Ray's ``Trainable``) is refused here, before Ray starts.

    Args:
        trainable: What the script passed.
        where: The entry point that took it, for the messages of a refusal.

    Raises:
        ConfigError: A trainable that cannot run (:func:`_check_base`).
    """
    base, parameters, ray_resources, translated = _unwrap_ray_wrappers(trainable)
    if isinstance(base, Prepared):  # fluidsalus's wrapper inside Ray's (a half-migrated script): merged
        _check_base(base.base, where)
        if not translated:
            return base
        inner, base = base, base.base
        parameters = {**inner.parameters, **parameters}  # (the outer's win, as fluidsalus's own wrappers nest)
    else:
        inner = None
        base = adopt_ray_class(base, where)
        if not translated:
            return base
    if ray_resources is not None:  # Ray's with_resources overrides the request inside it, as in Ray
        resources, kept, gpu_bundle = _check_resources(ray_resources), task_cpus(ray_resources), \
            task_gpu_bundle(ray_resources)
    elif inner is not None:  # Ray's with_parameters keeps the wrapped trainable's request (its `_resources`)
        resources, kept, gpu_bundle = inner.resources, inner.task_cpus, inner.task_gpus
    else:
        resources, kept, gpu_bundle = None, 0.0, None
    from fluidsalus.session import callers_stacklevel

    warnings.warn(
        f"fluidsalus.tune: the trainable was wrapped by Ray Tune's {' and '.join(translated)}; it was translated "
        "into fluidsalus.tune's. Change `from ray import tune` to `from fluidsalus import tune`.",
        UserWarning,
        stacklevel=callers_stacklevel(),
    )
    return Prepared(base, parameters, resources, kept, gpu_bundle)
