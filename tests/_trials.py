"""What a finished experiment's store says about where and when its trials ran, and what Ray has free, for tests."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from fluidsalus.store import ExperimentStore


def restarted_after_running(experiment_path: str) -> set[str]:
    """The trials that were restarted after they had run: every ``trial_restart`` but a withdrawal (a prefetched
    trial given back before it began, placed again; docs/architecture.md, "Prefetch").

    Args:
        experiment_path: The experiment's folder.
    """
    store = ExperimentStore.open(experiment_path, readonly=True)
    return {e.trial_id for e in store.events("trial_restart") if (e.data or {}).get("reason") != "withdrawn"}


#: A trial's resources under which two trials of one device compute at once (:func:`sharing_tune_config`).
SHARING_RESOURCES = {"cpu": 0.5}


def sharing_tune_config(max_t: int) -> Any:
    """A ``TuneConfig`` under which two trials run at once in each device's process, for the tests of what
    trials sharing a process must not share (W&B and MLflow runs), with the trainable under
    :data:`SHARING_RESOURCES`.

    Each device computes ``floor(cores / cpu)`` trials at once: two of half a CPU on a one-core device. (ASHA's
    pauses at each rung once let the trial prefetched behind a one-CPU trial begin; in a run's tail the driver now
    holds it through them, docs/architecture.md "A pause, while another device would idle".) The trainable reports
    the same ``tie`` in every result, so ASHA stops none early. ``max_t`` must exceed the trainable's reports, so
    that none is stopped at its last.

    Args:
        max_t: ASHA's largest budget.
    """
    from fluidsalus import tune

    return tune.TuneConfig(metric="tie", mode="max", scheduler=tune.schedulers.ASHAScheduler(
        max_t=max_t, grace_period=1, reduction_factor=2))


def trials_that_shared_a_device(experiment_path: str) -> list[tuple[str, str]]:
    """The pairs of trials that ran at the same time on the same device (from their start and end events).

    Args:
        experiment_path: The experiment's folder.

    Returns:
        Each pair once, as (trial id, trial id) in sorted order.
    """
    store = ExperimentStore.open(experiment_path, readonly=True)
    spans = {e.trial_id: [e.device, e.ts, float("inf")] for e in store.events("trial_start")}
    for e in store.events("trial_end"):
        if e.trial_id in spans:  # (a trial the run's end ended before it started has an end and no start)
            spans[e.trial_id][2] = e.ts
    return [(a, b) for a in sorted(spans) for b in sorted(spans)
            if a < b and spans[a][0] == spans[b][0] and spans[a][1] < spans[b][2] and spans[b][1] < spans[a][2]]


def cpus_free_within(cpus: float, timeout_s: float) -> bool:
    """Whether Ray has ``cpus`` cores free within ``timeout_s`` seconds (an ended actor gives its cores back
    within a second or so)."""
    import ray

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if ray.available_resources().get("CPU", 0.0) >= cpus:
            return True
        time.sleep(0.05)
    return False


def began_on_the_freed_device(experiment_path: str) -> bool:
    """Whether the experiment's one withdrawal (a prefetched trial given back before it began) sent that trial to
    another device, where it began, with no move refused: a device that freed in the run's tail got the trial held
    behind a neighbour's pause or verdict wait (docs/architecture.md, "A pause, while another device would idle").

    Args:
        experiment_path: The experiment's folder.
    """
    store = ExperimentStore.open(experiment_path, readonly=True)
    try:
        refused, withdrawn = store.events("plan_refused"), store.events("plan_withdraw")
        devices = {e.trial_id: e.device for e in store.events("trial_start")}
    finally:
        store.close()
    if refused or len(withdrawn) != 1:
        return False
    moved = withdrawn[0]
    return moved.device != devices[moved.trial_id] == moved.data["to"][0]


#: Longest a trial of :func:`start_devices_warm` waits for trials to have run in every device's process: far more
#: than an actor's start on a loaded 2-core machine (1-5 s), less than the run's ``ACTOR_START_TIMEOUT_S``.
DEVICES_UP_WAIT_S = 60.0


def _waits_for_every_device(config: dict[str, Any]) -> None:
    """Marks its process in ``config["marks"]``, then waits until ``config["devices"]`` processes have, or until
    ``config["deadline"]``."""
    import fluidsalus

    open(os.path.join(config["marks"], str(os.getpid())), "w").close()
    while len(os.listdir(config["marks"])) < config["devices"] and time.time() < config["deadline"]:
        time.sleep(0.05)
    fluidsalus.report({"pid": os.getpid()})


def start_devices_warm(folder: str, devices: int, cpus_per_device: float) -> None:
    """Leave this process ``devices`` warm device actors of ``cpus_per_device`` cores, each up: the next run of
    that shape begins on all of its devices at once (``Executor._start_devices`` takes warm actors without
    waiting), as a test of how the planner spreads trials over devices needs.

    A run goes on without a new actor that has not come up within as long again as the first took (and beside a
    warm actor within twice that one's first start), and joins it later: on a loaded 2-core machine the second
    came up after the test's few trials had all run on the first device. Here a short run's trials each wait until
    trials have run in every device's process, so that the run ends, and parks its actors, only once all are up.

    Args:
        folder: Where the short run keeps its experiment and marks (a test's ``tmp_path`` or storage).
        devices: How many devices.
        cpus_per_device: Each device's cores, as the next run asks.
    """
    import fluidsalus

    marks = os.path.join(folder, "devices_up_marks")
    os.makedirs(marks)
    grid = fluidsalus.run(_waits_for_every_device, {"i": fluidsalus.grid_search(list(range(2 * devices))),
                                                    "marks": marks, "devices": devices,
                                                    "deadline": time.time() + DEVICES_UP_WAIT_S},
                          devices=devices, cpus_per_device=cpus_per_device, storage_path=folder, name="devices_up",
                          verbose=0)
    assert grid.num_errors == 0 and len({r.metrics["pid"] for r in grid}) == devices, "a device never came up"


class StopAllAfter:
    """A Ray-style Stopper (``fluidsalus.tune.Stopper``'s two methods) that stops no trial by itself and ends the run
    once the driver's copy has seen ``n`` results."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def __call__(self, trial_id: str, result: dict) -> bool:
        self.seen += 1
        return False

    def stop_all(self) -> bool:
        return self.seen >= self.n


def study_told(path: str) -> dict[float, tuple[str, float | None]]:
    """Each trial's (state, value) that the stored Optuna searcher of the experiment at ``path`` told its study, by
    the trial's ``config["x"]``."""
    from fluidsalus.store import loads

    reader = ExperimentStore.open(path, readonly=True)
    try:
        xs = {row.trial_id: row.config["x"] for row in reader.trials()}
        state = loads(reader.experiment()["searcher_state"])
    finally:
        reader.close()
    return {xs[tid]: (r["state"], r["value"]) for tid, r in state["trials"].items() if r["state"] is not None}


def patch_ray(monkeypatch: Any, target: Any, name: str, value: Any) -> None:
    """``monkeypatch.setattr(target, name, value)`` on a part of Ray the warm pool uses (``ray.kill``,
    ``ray.is_initialized``, the executor module's ``ray``), after ending the device actors this process keeps warm.

    The pool's watcher thread calls Ray every quarter second while actors are parked, patched or not: with
    ``ray.kill`` recording instead of killing, or a stand-in ``ray`` without ``is_initialized``, it let every parked
    actor go without ending it, and they held the cores of the suite's Ray for good: every later run in another
    process (``RAY_ADDRESS`` of the suite's Ray) waited 120 s for its devices and failed.

    Args:
        monkeypatch: The test's ``monkeypatch`` fixture (the patch is undone with it).
        target: The object patched (a module, say).
        name: Its attribute.
        value: What it holds meanwhile.
    """
    import fluidsalus

    fluidsalus.release_devices()
    monkeypatch.setattr(target, name, value)


def pretend_ray_is(monkeypatch: Any, initialised: Callable[[], bool]) -> None:
    """Patch ``ray.is_initialized`` (the one module every part of fluidsalus reads) with ``initialised``
    (:func:`patch_ray`: after ending the device actors this process keeps warm; while Ray looks shut down, the warm
    pool's watcher lets every parked actor go without killing it: its actors ended with Ray, it reasons).

    Args:
        monkeypatch: The test's ``monkeypatch`` fixture (the patch is undone with it).
        initialised: What ``ray.is_initialized()`` returns meanwhile.
    """
    import ray

    patch_ray(monkeypatch, ray, "is_initialized", initialised)


class LazyModule:
    """A module for a test module's tests, imported at the first attribute read (through ``pytest.importorskip``: a
    test that reads it is skipped where the module is missing) rather than with the test module.

    A device actor imports the module of every trainable it runs (cloudpickle pickles a module's functions by
    reference), so a test module's top-level imports are paid again by each device process its runs start.
    ``ray.tune`` brings pandas and pyarrow with it: imported at the top of ``tests/test_tune_frontend.py``, it
    made each new device process of that module spend 3.9-4.2 CPU-s on its imports instead of 2.4-2.6; nevergrad
    (pandas too) cost 2-4 CPU-s more (``tests/test_imports.py`` checks that these modules no longer import them).
    A test module whose every test needs the library calls :func:`skip_module_unless_installed` too.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # (copy, pickle and introspection probe dunders: not the module's attributes)
            raise AttributeError(name)
        import pytest

        return getattr(pytest.importorskip(self.__dict__["_name"]), name)


class LazyRayTune(LazyModule):
    """``ray.tune``, imported at the first attribute read (:class:`LazyModule`)."""

    def __init__(self) -> None:
        super().__init__("ray.tune")


def skip_module_unless_installed(*names: str) -> None:
    """Skip the calling test module, as ``pytest.importorskip`` at its top would, where any of ``names`` is not
    installed, without importing them (their import is left to the tests: :class:`LazyModule`)."""
    import importlib.util

    import pytest

    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # (a parent package is missing)
            found = False
        if not found:
            pytest.skip(f"could not import {name!r}: not installed", allow_module_level=True)
