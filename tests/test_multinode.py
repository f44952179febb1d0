"""Several nodes: per-node device planning (pure) and a real sweep over a two-node Ray cluster.

The cluster test runs in a subprocess, because the test session shares one small Ray (tests/conftest.py) and a
process can be connected to only one cluster. The subprocess starts ``ray.cluster_utils.Cluster`` with two
nodes, runs ``fluidsalus.run(..., address=cluster.address)`` and always shuts the cluster down.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from _trials import pretend_ray_is

import fluidsalus
from fluidsalus.config import RunSpec, build
from fluidsalus.errors import ConfigError
from fluidsalus.gpu.device import DeviceSpec, plan_devices
from fluidsalus.store import ExperimentStore

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Trials of the cluster sweep, and reports each: enough that both nodes' devices get trials.
CLUSTER_TRIALS = 8
CLUSTER_REPORTS = 3
#: Longest the cluster subprocess may run (two raylets start in ~12 s on a busy 2-core machine).
CLUSTER_TIMEOUT_S = 180.0
#: Time the subprocess gets after SIGINT to shut its cluster down before it is killed.
SHUTDOWN_GRACE_S = 30.0
#: How long the cluster sweep's trials wait for every device to have started one (a run goes on without a device
#: that is slow to start, and it joins later; on a loaded machine it may join after a short sweep has ended).
ALL_DEVICES_WAIT_S = 60.0

# ---------------------------------------------------------------------------------------------- pure planning

#: A one-parameter search space for the runs that must fail before any trial starts.
SPACE = {"x": fluidsalus.uniform(0, 1)}
TWO_CPU_NODES = {"head": {"CPU": 4.0, "memory": 8e9}, "worker": {"CPU": 3.0}}


def _cells(devices: list[DeviceSpec]) -> list[tuple[str, str | None, int]]:
    return [(d.name, d.node_id, d.slots) for d in devices]


def test_virtual_cpu_devices_never_span_nodes_and_are_numbered_across_them():
    # 2-core devices: 4 cores -> two devices; 3 cores -> one device (its third core is left over).
    assert _cells(plan_devices(TWO_CPU_NODES, cpus_per_device=2)) == [
        ("cpu:0", "head", 2), ("cpu:1", "head", 2), ("cpu:2", "worker", 2)]
    assert [d.index for d in plan_devices(TWO_CPU_NODES, cpus_per_device=2)] == [0, 1, 2]
    # Each device knows how many of the run's devices share its node: they split that node's memory.
    assert [d.node_devices for d in plan_devices(TWO_CPU_NODES, cpus_per_device=2)] == [2, 2, 1]
    assert [d.node_devices for d in plan_devices(TWO_CPU_NODES, devices=3, cpus_per_device=1)] == [2, 2, 1]
    # One core per device (the default): every core of both nodes.
    assert [d.node_id for d in plan_devices(TWO_CPU_NODES)] == ["head"] * 4 + ["worker"] * 3
    # A node with fewer cores than a device gets one device of all its cores; a node with none gets nothing.
    small = {"big": {"CPU": 4.0}, "small": {"CPU": 1.0}, "no_cpu": {"CPU": 0.0, "memory": 1e9}}
    assert _cells(plan_devices(small, cpus_per_device=2)) == [
        ("cpu:0", "big", 2), ("cpu:1", "big", 2), ("cpu:2", "small", 1)]


def test_a_smaller_device_count_is_dealt_round_robin_over_the_nodes():
    assert _cells(plan_devices(TWO_CPU_NODES, devices=2)) == [("cpu:0", "head", 1), ("cpu:1", "worker", 1)]
    assert _cells(plan_devices(TWO_CPU_NODES, devices=2, cpus_per_device=2)) == [
        ("cpu:0", "head", 2), ("cpu:1", "worker", 2)]
    # Three 2-core devices: the worker holds only one, so the head takes the other two.
    assert _cells(plan_devices(TWO_CPU_NODES, devices=3, cpus_per_device=2)) == [
        ("cpu:0", "head", 2), ("cpu:1", "head", 2), ("cpu:2", "worker", 2)]
    # Without cpus_per_device, devices take the largest size up to the default (1 core) that fits.
    assert _cells(plan_devices(TWO_CPU_NODES, devices=5)) == [
        ("cpu:0", "head", 1), ("cpu:1", "head", 1), ("cpu:2", "head", 1), ("cpu:3", "worker", 1),
        ("cpu:4", "worker", 1)]


def test_one_gpu_device_per_gpu_of_every_node_with_that_nodes_share_of_cores():
    nodes = {"a": {"CPU": 16.0, "GPU": 2.0}, "cpu_only": {"CPU": 64.0}, "b": {"CPU": 6.0, "GPU": 3.0}}
    devices = plan_devices(nodes)
    assert [(d.name, d.kind, d.node_id, d.slots) for d in devices] == [
        ("cuda:0", "cuda", "a", 8), ("cuda:1", "cuda", "a", 8),
        ("cuda:2", "cuda", "b", 2), ("cuda:3", "cuda", "b", 2), ("cuda:4", "cuda", "b", 2)]
    # Fewer devices: dealt round-robin, and each takes its node's cores shared by that node's devices only.
    assert _cells(plan_devices(nodes, devices=3)) == [("cuda:0", "a", 8), ("cuda:1", "a", 8), ("cuda:2", "b", 6)]
    assert _cells(plan_devices(nodes, devices=2, cpus_per_device=3)) == [("cuda:0", "a", 3), ("cuda:1", "b", 3)]


def test_a_single_resources_mapping_is_one_unpinned_node():
    assert _cells(plan_devices({"CPU": 4.0}, cpus_per_device=2)) == [("cpu:0", None, 2), ("cpu:1", None, 2)]
    assert {d.node_id for d in plan_devices({"CPU": 8.0, "GPU": 2.0})} == {None}


@pytest.mark.parametrize(("nodes", "kwargs", "message"), [
    # 3 + 3 cores hold only two 2-core devices, though 6 cores would be enough for three on one node.
    ({"a": {"CPU": 3.0}, "b": {"CPU": 3.0}}, dict(devices=3, cpus_per_device=2),
     r"3 virtual CPU device\(s\) x 2 CPU\(s\) each needs 6 CPUs, but the Ray cluster has 6 split over nodes "
     r"\(a: 3, b: 3\), and a device never spans nodes"),
    (TWO_CPU_NODES, dict(devices=8), r"8 virtual CPU device\(s\) x 1 CPU\(s\) each needs 8 CPUs.* has 7\. "),
    ({"a": {"CPU": 0.0}, "b": {"memory": 1.0}}, {}, r"needs 1 CPUs, but the Ray cluster has 0"),
    ({"a": {"CPU": 8.0, "GPU": 1.0}, "b": {"CPU": 8.0, "GPU": 1.0}}, dict(devices=3),
     r"devices=3: the Ray cluster has only 2 GPU"),
    ({"a": {"CPU": 8.0, "GPU": 1.0}, "b": {"CPU": 2.0, "GPU": 2.0}}, dict(cpus_per_device=2),
     r"cpus_per_device=2 x 2 GPU devices on node b needs 4 CPUs; node b has 2"),
])
def test_impossible_per_node_requests_say_why(nodes, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        plan_devices(nodes, **kwargs)


@pytest.mark.parametrize("address", ["auto", "local", "10.0.0.1:6379", "ray://head:10001", "[::1]:6379"])
def test_address_forms_ray_accepts_are_valid(address):
    assert build(RunSpec, address=address).address == address


@pytest.mark.parametrize("address", ["", "head", "head:0", "head:65536", "http://head:6379", "a b:1", 6379])
def test_a_bad_address_is_a_config_error_naming_it(address):
    with pytest.raises(ConfigError, match=r"^address: "):
        build(RunSpec, address=address)


def test_run_with_an_unreachable_address_fails_fast_and_writes_nothing(tmp_path, monkeypatch):
    # Ray itself would retry an unreachable head for minutes; run() checks the address with one TCP connection
    # first. Ray is made to look uninitialised, and ray.init must not be reached.
    from fluidsalus import api

    def no_init(**kwargs):
        raise AssertionError(f"ray.init was called with {kwargs}")

    pretend_ray_is(monkeypatch, lambda: False)
    monkeypatch.setattr(api.ray, "init", no_init)
    port = _unused_port()
    started = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^address: no Ray cluster answers at '127.0.0.1:{port}'"):
        fluidsalus.run(lambda c: None, SPACE, address=f"127.0.0.1:{port}", storage_path=str(tmp_path), name="x",
                       verbose=0)
    assert time.monotonic() - started < api.ADDRESS_CONNECT_TIMEOUT_S + 1
    assert not (tmp_path / "x").exists()


def test_an_address_other_than_the_connected_clusters_is_refused(ray_cluster, tmp_path):
    connected = ray_cluster.get_runtime_context().gcs_address
    other_port = int(connected.rsplit(":", 1)[1]) % 65535 + 1
    with pytest.raises(ConfigError, match=rf"^address: this process is already connected to .*{connected}"):
        fluidsalus.run(lambda c: None, SPACE, address=f"127.0.0.1:{other_port}", storage_path=str(tmp_path),
                       name="x", verbose=0)
    assert not (tmp_path / "x").exists()


def _slow_ray_init(monkeypatch) -> dict[str, Any]:
    """A fake Ray start for ``fluidsalus.api``: slow enough for another thread to look meanwhile, failing as Ray's
    second ``ray.init`` does. Returns its state: ``initialised``, and ``inits`` (how many times it started)."""
    from fluidsalus import api

    state: dict[str, Any] = {"initialised": False, "inits": 0}

    def slow_init(**kwargs):
        time.sleep(0.2)  # Ray takes seconds: long enough for the other thread to look meanwhile
        if state["initialised"]:
            raise AssertionError("Perhaps you called ray.init twice by accident?")
        state["initialised"], state["inits"] = True, state["inits"] + 1

    pretend_ray_is(monkeypatch, lambda: state["initialised"])
    monkeypatch.setattr(api.ray, "init", slow_init)
    return state


def test_runs_started_at_once_from_two_threads_initialise_ray_once(monkeypatch):
    """Two runs (two Optuna studies, say) started together from two threads both found Ray not initialised, and the
    second ``ray.init`` failed ("Perhaps you called ray.init twice by accident?"): the check and the init are one
    step now (``api._CONNECT_LOCK``)."""
    import threading

    from fluidsalus import api

    state = _slow_ray_init(monkeypatch)
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            api._connect(None)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=connect) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and state["inits"] == 1


def test_two_tuners_fitted_at_once_from_two_threads_initialise_ray_once(monkeypatch, tmp_path):
    """``Tuner.fit`` checked ``ray.is_initialized()`` and called ``ray.init`` outside ``api._CONNECT_LOCK``, so two
    fits started at once from two threads both started Ray and the second failed ("Perhaps you called ray.init
    twice by accident?", h214's ``two_tuners.py``). The fit is stopped right after Ray's start (its entry)."""
    import threading

    from fluidsalus import tune
    from fluidsalus.tune import _tuner

    state = _slow_ray_init(monkeypatch)

    class Started(Exception):
        pass

    def no_entry(*args, **kwargs):
        raise Started

    monkeypatch.setattr(_tuner, "make_entry", no_entry)
    errors: list[BaseException] = []

    def fit(index: int) -> None:
        try:
            tune.Tuner(lambda config: None, run_config=tune.RunConfig(storage_path=str(tmp_path), name=f"t{index}",
                                                                      verbose=0)).fit()
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=fit, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [type(e) for e in errors] == [Started, Started] and state["inits"] == 1


def test_ray_init_gives_the_ray_loggers_handlers_back_also_when_it_fails(monkeypatch):
    """Ray 2.60's ``ray.init(configure_logging=False)`` clears the ``ray`` logger's handlers, the one ``import ray``
    set included, so no ``ray.*`` line of the run (PBT's exploit lines) was shown (h204's F3). fluidsalus keeps
    ``configure_logging=False`` (Ray leaves the script's level and format alone) and puts the handlers back, also
    when the connection fails and the script goes on after the ConfigError; not when the call set its own (Ray's
    ``LoggingConfig`` replaces them under Ray Tune too)."""
    from fluidsalus import api

    ray_logger = logging.getLogger("ray")
    scripts = logging.NullHandler()
    ray_logger.addHandler(scripts)
    before, calls = list(ray_logger.handlers), []

    def failing_init(**kwargs):
        calls.append(kwargs)
        ray_logger.handlers.clear()  # (what Ray's does with configure_logging=False)
        raise ConnectionError("nothing answers")

    pretend_ray_is(monkeypatch, lambda: False)
    monkeypatch.setattr(api.ray, "init", failing_init)
    try:
        with pytest.raises(ConfigError, match="^address: cannot connect to a Ray cluster"):
            api._connect(None)
        assert ray_logger.handlers == before and calls[0]["configure_logging"] is False
        rays = logging.NullHandler()

        def init_with_a_logging_config(**kwargs):
            ray_logger.handlers[:] = [rays]  # (what Ray's LoggingConfig does: its handler in place of the others)

        monkeypatch.setattr(api.ray, "init", init_with_a_logging_config)
        api._connect(None)
        assert ray_logger.handlers == [rays]
    finally:
        ray_logger.handlers[:] = before
        ray_logger.removeHandler(scripts)


def _unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------------- two-node cluster

#: Two-node clusters as ``[(CPUs, GPUs) of the head, (CPUs, GPUs) of the worker]``, and the devices expected on
#: them as ``(name, node: 0 head / 1 worker, slots)``. The GPUs are only declared to Ray (``num_gpus``), which
#: assigns them to actors as it would real ones; torch then runs the trials on the CPU.
LAYOUTS = {
    # One device per GPU of every node; a device's cores are its node's cores over its node's GPUs. (Virtual CPU
    # devices on two nodes are the node-loss test's: one two-node cluster less, about 10 s of the suite.)
    "gpus": ([(2, 1), (2, 2)], [("cuda:0", 0, 2), ("cuda:1", 1, 1), ("cuda:2", 1, 1)]),
}

_CLUSTER_SCRIPT = """
import json, os, time

import ray
from ray.cluster_utils import Cluster

import fluidsalus
from fluidsalus.gpu.actor import cluster_nodes
from fluidsalus.gpu.device import plan_devices

# On its timeout the test sends SIGINT: the KeyboardInterrupt runs the finally below, which shuts the cluster down.
NODES, TRIALS, REPORTS, STORAGE = {nodes!r}, {trials}, {reports}, {storage!r}
DEVICES, MARKS, WAIT_S = {devices}, {marks!r}, {wait_s}


def trainable(config):
    # Where the trial's thread really runs, and the GPUs Ray gave its device's actor.
    node, gpus = ray.get_runtime_context().get_node_id(), [str(g) for g in ray.get_gpu_ids()]
    # Each device's process marks that it ran a trial; after its first report a trial waits until every device
    # has (one deadline for all), so that the sweep lasts until a device that was slow to start has joined.
    open(os.path.join(MARKS, str(os.getpid())), "w").close()
    for i in range(REPORTS):
        time.sleep(0.05)
        fluidsalus.report({{"loss": config["x"] + i, "node": node, "gpus": gpus}})
        while i == 0 and len(os.listdir(MARKS)) < DEVICES and time.time() < DEADLINE:
            time.sleep(0.05)


(head_cpus, head_gpus), (worker_cpus, worker_gpus) = NODES
cluster = Cluster(initialize_head=True,
                  head_node_args={{"num_cpus": head_cpus, "num_gpus": head_gpus, "include_dashboard": False}})
print(json.dumps({{"address": cluster.address}}), flush=True)  # first, so the test finds its raylets even on failure
try:
    cluster.add_node(num_cpus=worker_cpus, num_gpus=worker_gpus)
    cluster.wait_for_nodes()
    os.makedirs(MARKS)
    DEADLINE = time.time() + WAIT_S  # the trainable is pickled by value, with this global
    started = time.monotonic()
    grid = fluidsalus.run(trainable, {{"x": fluidsalus.uniform(0, 1)}}, num_samples=TRIALS, metric="loss",
                          mode="min", address=cluster.address, storage_path=STORAGE, name="two_nodes", verbose=0)
    print(json.dumps({{
        "run_s": time.monotonic() - started,
        "head": ray.get_runtime_context().get_node_id(),
        "nodes": list(cluster_nodes()),
        "plan": [[d.name, d.node_id, d.slots] for d in plan_devices(cluster_nodes())],
        "errors": grid.num_errors,
    }}), flush=True)
finally:
    ray.shutdown()
    cluster.shutdown()
"""


def _raylets_of(address: str) -> list[int]:
    """Process ids of the raylets still serving the cluster whose GCS is at ``address``."""
    out = subprocess.run(["pgrep", "-f", f"raylet/raylet .*--gcs-address={address} "], capture_output=True,
                         text=True)
    return [int(p) for p in out.stdout.split()]


def _run_cluster_script(tmp_path: Path, nodes: list[tuple[int, int]], storage: Path, devices: int) -> dict:
    """Run the two-node sweep (``devices`` devices expected) in a subprocess; check that its cluster is gone;
    return its summary."""
    return _run_script(tmp_path, textwrap.dedent(_CLUSTER_SCRIPT).format(
        nodes=nodes, trials=CLUSTER_TRIALS, reports=CLUSTER_REPORTS, storage=str(storage), devices=devices,
        marks=str(tmp_path / "devices_that_ran_a_trial"), wait_s=ALL_DEVICES_WAIT_S))


def _run_script(tmp_path: Path, text: str) -> dict:
    """Run a cluster script (its first line of output names the cluster, its last is its summary) in a
    subprocess; check that its cluster is gone; return the summary."""
    script = tmp_path / "cluster_script.py"
    script.write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=CLUSTER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=SHUTDOWN_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    lines = stdout.strip().splitlines()
    address = json.loads(lines[0])["address"] if lines else None
    # The cluster was shut down, even if the sweep failed or timed out: no raylet of it is left.
    assert address is not None and _raylets_of(address) == [], stderr[-4000:]
    assert not timed_out, f"the two-node sweep ran past {CLUSTER_TIMEOUT_S:.0f} s\n{stderr[-4000:]}"
    assert proc.returncode == 0, stderr[-4000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_sweep_on_a_two_node_cluster_runs_on_devices_of_both_nodes(tmp_path, layout):
    node_resources, expected = LAYOUTS[layout]
    storage = tmp_path / "results"
    summary = _run_cluster_script(tmp_path, node_resources, storage, len(expected))
    # Every device's process ran a trial (else the trials waited ALL_DEVICES_WAIT_S for it, in vain).
    assert len(list((tmp_path / "devices_that_ran_a_trial").iterdir())) == len(expected)

    nodes = summary["nodes"]
    assert len(nodes) == 2 and nodes[0] == summary["head"]
    # Each device is pinned to its node, with its node's cores.
    assert summary["plan"] == [[name, nodes[node], slots] for name, node, slots in expected]

    store = ExperimentStore.open(storage / "two_nodes", readonly=True)
    starts = {e.device: e.data for e in store.events("device_start")}
    # Each device's actor reports where Ray put it and what it gave it: the node and resources of the plan.
    assert {device: info["node_id"] for device, info in starts.items()} == {
        name: nodes[node] for name, node, _ in expected}
    for name, _, slots in expected:
        gpu = {"GPU": 1.0} if name.startswith("cuda") else {}
        assert starts[name]["assigned_resources"] == {"CPU": float(slots), **gpu}
        assert len(starts[name]["gpu_ids"]) == len(gpu)
    # Ray gives each GPU of a node to one device only.
    held = [(info["node_id"], gpu) for info in starts.values() for gpu in info["gpu_ids"]]
    assert len(held) == len(set(held))

    trials = store.trials()
    assert len(trials) == CLUSTER_TRIALS and summary["errors"] == 0
    assert all(t.status == "TERMINATED" and t.last_iteration == CLUSTER_REPORTS for t in trials)
    # Every trial ran on the node, and with the GPUs, of the device it was placed on; both nodes ran trials.
    for t in trials:
        seen = {(r.metrics["node"], tuple(r.metrics["gpus"])) for r in store.results(t.trial_id)}
        assert seen == {(starts[t.device]["node_id"], tuple(starts[t.device]["gpu_ids"]))}
    assert {starts[t.device]["node_id"] for t in trials} == set(nodes)
    store.close()


# ------------------------------------------------------------------------------------------- a node's death

_NODE_LOSS_SCRIPT = """
import json, os, threading, time

import ray
from ray.cluster_utils import Cluster

import fluidsalus
from fluidsalus.store import ExperimentStore

# (12 trials: the devices hold 8 at the start, one running and one queued each; those left wait for new devices)
TRIALS, REPORTS, STORAGE, MARKS, WAIT_S = 12, 4, {storage!r}, {marks!r}, {wait_s}
os.makedirs(MARKS)


def trainable(config):
    node = ray.get_runtime_context().get_node_id()
    start = 0
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is not None:
        with open(os.path.join(checkpoint.path, "i")) as f:
            start = int(f.read())
    for i in range(start, REPORTS):
        time.sleep(0.05)
        folder = os.path.join(MARKS, f"ckpt_{{os.getpid()}}_{{time.time_ns()}}")
        os.makedirs(folder)
        with open(os.path.join(folder, "i"), "w") as f:
            f.write(str(i + 1))
        fluidsalus.report({{"loss": config["x"] + i, "node": node}},
                          checkpoint=fluidsalus.Checkpoint.from_directory(folder))
        # After its first report a trial waits until the driver has stored a result from each node that joins after
        # the worker's death (or the deadline): so the run still has trials when their devices join.
        while os.path.exists(os.path.join(MARKS, "waiting")) and time.time() < DEADLINE:
            time.sleep(0.05)


cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 2, "include_dashboard": False}})
print(json.dumps({{"address": cluster.address}}), flush=True)  # first, so the test finds its raylets even on failure
try:
    worker = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    open(os.path.join(MARKS, "waiting"), "w").close()
    DEADLINE = time.time() + WAIT_S  # the trainable is pickled by value, with this global
    box = {{}}

    def sweep():
        box["grid"] = fluidsalus.run(trainable, {{"x": fluidsalus.uniform(0, 1)}}, num_samples=TRIALS,
                                     metric="loss", mode="min", address=cluster.address, storage_path=STORAGE,
                                     name="node_loss", verbose=0)

    # The nodes of the results the driver has stored. (A mark the trainable wrote once report() returned on a node
    # was no proof: the result may still be on its way to the driver when the node is removed, or belong to an
    # attempt the driver gave up on as the new devices joined, whose later events it drops by design.)
    def stored_nodes():
        if not os.path.exists(os.path.join(STORAGE, "node_loss", "experiment.db")):
            return set()
        store = ExperimentStore.open(os.path.join(STORAGE, "node_loss"), readonly=True)
        try:
            return {{r.metrics["node"] for r in store.results(latest_attempt_only=False)}}
        finally:
            store.close()

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    while worker.node_id not in stored_nodes() and time.time() < DEADLINE:
        time.sleep(0.1)
    cluster.remove_node(worker)
    back = cluster.add_node(num_cpus=2)  # as the worker's node coming back: a new node id
    more = cluster.add_node(num_cpus=2)  # and one more
    while not {{back.node_id, more.node_id}} <= stored_nodes() and time.time() < DEADLINE:
        time.sleep(0.1)
    os.remove(os.path.join(MARKS, "waiting"))
    thread.join()
    store = ExperimentStore.open(os.path.join(STORAGE, "node_loss"), readonly=True)
    print(json.dumps({{
        "worker": worker.node_id, "new": sorted([back.node_id, more.node_id]), "errors": box["grid"].num_errors,
        "head": ray.get_runtime_context().get_node_id(),
        "first_starts": {{d: [e.data for e in store.events("device_start") if e.device == d][0]
                          for d in ("cpu:0", "cpu:1", "cpu:2", "cpu:3")}},
        "moved": [[e.device, e.data["from_node"], e.data["node_id"]] for e in store.events("device_moved")],
        "added": [[e.device, e.data["node_id"]] for e in store.events("device_added")],
        "died": [[e.device, e.data.get("node_died", False)] for e in store.events("device_died")],
        "trials": [[t.status, t.num_failures, sorted(r.iteration for r in store.results(t.trial_id))]
                   for t in store.trials()],
        "nodes": sorted({{r.metrics["node"] for r in store.results(latest_attempt_only=False)}}),
        # (what the planner and the executor did, for the message of a failed assertion)
        "plans": [[e.kind, e.trial_id, e.device, e.data] for kind in ("plan_move", "plan_preempt", "trial_restart")
                  for e in store.events(kind)],
    }}), flush=True)
    store.close()
finally:
    ray.shutdown()
    cluster.shutdown()
"""


def test_the_devices_of_a_node_that_died_start_again_on_a_node_that_joins_and_a_new_node_adds_its_own(tmp_path):
    """A node's death took its devices for good: a node added back (under a new id) was never used, nor was a node
    added while none was lost, and the run ran its queue on half its devices (a helper's two-node runs; Ray Tune
    places trials on such nodes). The lost devices now start again on the first node that joins, the other gets
    devices of its own, and the trials of the dead node resume from their checkpoints, none failed."""
    summary = _run_script(tmp_path, textwrap.dedent(_NODE_LOSS_SCRIPT).format(
        storage=str(tmp_path / "results"), marks=str(tmp_path / "marks"), wait_s=ALL_DEVICES_WAIT_S))
    worker, new = summary["worker"], summary["new"]
    # The run began with one 1-core virtual CPU device per core of each node, each pinned to its node, with its
    # node's cores, and no GPU.
    assert {device: (info["node_id"], info["assigned_resources"], info["gpu_ids"])
            for device, info in summary["first_starts"].items()} == {
        "cpu:0": (summary["head"], {"CPU": 1.0}, []), "cpu:1": (summary["head"], {"CPU": 1.0}, []),
        "cpu:2": (worker, {"CPU": 1.0}, []), "cpu:3": (worker, {"CPU": 1.0}, [])}
    (moved_to,) = {node for _, _, node in summary["moved"]}
    assert sorted(summary["moved"]) == [["cpu:2", worker, moved_to], ["cpu:3", worker, moved_to]]
    (added_to,) = {node for _, node in summary["added"]}
    assert sorted(summary["added"]) == [["cpu:4", added_to], ["cpu:5", added_to]]
    assert sorted([moved_to, added_to]) == new
    assert sorted(summary["died"]) == [["cpu:2", True], ["cpu:3", True]]  # its node's death: no trial charged
    # trials ran on the dead node and on both new ones
    assert set(new) | {worker} <= set(summary["nodes"]), (new, worker, summary["nodes"], summary["plans"])
    assert summary["errors"] == 0
    assert summary["trials"] == [["TERMINATED", 0, [1, 2, 3, 4]]] * 12  # no failure, no result lost
