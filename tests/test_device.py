"""Device planning from Ray's resources (pure)."""

from __future__ import annotations

import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.device import (
    DeviceSpec,
    as_run_plans,
    device_cores,
    devices_of_joined_nodes,
    lanes_for,
    plan_devices,
    replacements_for_lost,
)


@pytest.mark.parametrize(("cpus", "expected"), [(1, [("cpu:0", 1)]), (2, [("cpu:0", 1), ("cpu:1", 1)]),
                                                (3, [("cpu:0", 1), ("cpu:1", 1), ("cpu:2", 1)])])
def test_default_is_one_virtual_cpu_device_per_core(cpus, expected):
    assert [(d.name, d.slots) for d in plan_devices({"CPU": cpus})] == expected
    assert all(d.kind == "cpu" for d in plan_devices({"CPU": cpus}))


@pytest.mark.parametrize(("cpus", "expected"), [(1, [("cpu:0", 1)]), (2, [("cpu:0", 2)]), (3, [("cpu:0", 2)]),
                                                (8, [("cpu:0", 2), ("cpu:1", 2), ("cpu:2", 2), ("cpu:3", 2)])])
def test_devices_of_two_cores_at_least_one(cpus, expected):
    assert [(d.name, d.slots) for d in plan_devices({"CPU": cpus}, cpus_per_device=2)] == expected


def test_explicit_device_count_and_size():
    devices = plan_devices({"CPU": 2}, devices=2, cpus_per_device=1)
    assert [(d.name, d.slots, d.index) for d in devices] == [("cpu:0", 1, 0), ("cpu:1", 1, 1)]
    assert [d.slots for d in plan_devices({"CPU": 4}, devices=2)] == [1, 1]  # the default size
    assert [d.slots for d in plan_devices({"CPU": 4}, devices=2, cpus_per_device=2)] == [2, 2]


def test_one_device_per_gpu_with_an_even_share_of_cpus():
    devices = plan_devices({"CPU": 16, "GPU": 4})
    assert [(d.name, d.kind, d.slots) for d in devices] == [(f"cuda:{i}", "cuda", 4) for i in range(4)]
    assert len(plan_devices({"CPU": 16, "GPU": 4}, devices=2)) == 2


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(devices=3, cpus_per_device=1), r"3 virtual CPU device\(s\) x 1 CPU\(s\) each needs 3 CPUs.*has 2"),
    (dict(devices=0), "devices: must be >= 1"),
    (dict(cpus_per_device=0), "cpus_per_device: must be >= 1"),
])
def test_impossible_requests_name_the_setting(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        plan_devices({"CPU": 2}, **kwargs)


def test_more_gpu_devices_than_gpus():
    with pytest.raises(ConfigError, match=r"devices=3: the Ray cluster has only 2 GPU"):
        plan_devices({"CPU": 8, "GPU": 2}, devices=3)


@pytest.mark.parametrize(("cluster", "kwargs", "expected"), [
    # (slots, cores) of each device
    ({"CPU": 2}, dict(cpus_per_trial=0.5), [(2, 1), (2, 1)]),          # Ray: two trials per core
    ({"CPU": 2}, dict(cpus_per_trial=0.1), [(10, 1), (10, 1)]),        # 1 / 0.1 is 10 in Ray's units
    ({"CPU": 2}, dict(cpus_per_trial=0.3), [(3, 1), (3, 1)]),          # floor(1 / 0.3)
    ({"CPU": 2}, dict(cpus_per_trial=1), [(1, 1), (1, 1)]),            # the default
    ({"CPU": 4}, dict(cpus_per_trial=1.5), [(1, 2), (1, 2)]),          # devices of the whole cores one trial asks
    ({"CPU": 4}, dict(cpus_per_trial=2), [(1, 2), (1, 2)]),
    ({"CPU": 4}, dict(cpus_per_trial=3), [(1, 3)]),
    ({"CPU": 2}, dict(cpus_per_trial=4), [(1, 2)]),                    # more than a node has: all its cores
    ({"CPU": 4}, dict(cpus_per_trial=0.5, cpus_per_device=2), [(4, 2), (4, 2)]),
    ({"CPU": 4}, dict(cpus_per_trial=2, devices=1), [(1, 2)]),
    ({"CPU": 16, "GPU": 2}, dict(cpus_per_trial=2), [(4, 8), (4, 8)]),   # a GPU's cores are its node share
    ({"CPU": 16, "GPU": 2}, dict(cpus_per_trial=0.5), [(16, 8), (16, 8)]),
    ({"CPU": 16, "GPU": 2}, dict(cpus_per_trial=32), [(1, 8), (1, 8)]),
])
def test_cpus_per_trial_sets_the_trials_a_device_runs_at_once(cluster, kwargs, expected):
    devices = plan_devices(cluster, **kwargs)
    assert [(d.slots, d.cpus) for d in devices] == expected
    assert [d.index for d in devices] == list(range(len(expected)))


def test_a_device_reserves_its_cores_and_runs_one_trial_per_core_by_default():
    assert [(d.slots, d.cpus) for d in plan_devices({"CPU": 4}, cpus_per_device=2)] == [(2, 2), (2, 2)]
    assert (lanes_for(3, None), lanes_for(3, 0.75), lanes_for(1, 1.0001), lanes_for(1, 0.0001)) == (3, 4, 1, 10_000)


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "1"])
def test_a_bad_cpus_per_trial_is_refused_naming_it(value):
    with pytest.raises(ConfigError, match="cpus_per_trial: must be a number > 0 or None"):
        plan_devices({"CPU": 2}, cpus_per_trial=value)


@pytest.mark.parametrize(("cores", "own", "tasks", "expected"), [
    (8, 1, 2, 2),       # Ray runs 8 // 3 = 2 trials at once: the devices hold their 2 own cores, 6 stay free
    (16, 0.5, 0.5, 8),  # 16 trials at once, half a core each of their own
    (16, None, 1, 8),   # no request of its own: one core, as a device runs one trial per core
    (8, 2, 2, 4),
    (2, 1, 2, 1),       # a trial fits nowhere by Ray's count (Ray waits for ever): one runs, the other core is free
    (1, 1, 1, 1),       # no core to leave: the devices need one
    (0, 1, 1, 0),       # a node without CPUs has no CPU device
])
def test_each_node_leaves_the_cores_its_trials_keep_for_their_tasks_to_ray(cores, own, tasks, expected):
    """A PlacementGroupFactory's bundles after the first keep cores for the Ray tasks a trial starts, as Ray keeps
    them; the devices held every core, so such a task waited for ever (a helper's side-by-side run)."""
    assert device_cores(cores, own, tasks) == expected


def test_the_devices_of_a_run_whose_trials_keep_cores_for_tasks_hold_only_their_own():
    assert [(d.slots, d.cpus) for d in plan_devices({"CPU": 8}, cpus_per_trial=1, task_cpus_per_trial=2)] == \
        [(1, 1), (1, 1)]
    assert [(d.slots, d.cpus) for d in plan_devices({"CPU": 16}, cpus_per_trial=0.5, task_cpus_per_trial=0.5)] == \
        [(2, 1)] * 8
    # per node: a GPU node's devices share the cores its trials keep for themselves
    nodes = {"a": {"CPU": 16, "GPU": 2}, "b": {"CPU": 4}}
    assert [(d.name, d.cpus, d.node_id) for d in plan_devices(nodes, cpus_per_trial=1, task_cpus_per_trial=4)] == \
        [("cuda:0", 1, "a"), ("cuda:1", 1, "a")]
    assert [(d.cpus, d.node_id) for d in plan_devices({"a": {"CPU": 8}, "b": {"CPU": 4}}, cpus_per_trial=1,
                                                      task_cpus_per_trial=3)] == [(1, "a"), (1, "a"), (1, "b")]
    # a GPU device holds a core at least: no more GPU devices than the cores the trials keep for themselves (4
    # devices took all 4 cores and ran 4 trials where Ray runs 2 and keeps 2 cores for their tasks: a review)
    gpus = plan_devices({"CPU": 4, "GPU": 4}, cpus_per_trial=1, task_cpus_per_trial=1)
    assert [(d.name, d.cpus) for d in gpus] == [("cuda:0", 1), ("cuda:1", 1)]
    with pytest.raises(ConfigError, match="task_cpus_per_trial: must be a number >= 0"):
        plan_devices({"CPU": 2}, task_cpus_per_trial=-1)


def test_devices_that_cpus_per_trial_sized_and_that_do_not_fit_say_so():
    with pytest.raises(ConfigError, match=r"3 virtual CPU device\(s\) x 2 CPU\(s\) each needs 6 CPUs.*"
                                          r"\(cpus_per_trial=1.5 makes devices of 2 cores\)"):
        plan_devices({"CPU": 4}, devices=3, cpus_per_trial=1.5)


def _node_plan(node_id, resources):
    return plan_devices({node_id: resources})


def test_devices_lost_with_their_node_start_again_on_a_node_that_joined_keeping_their_names():
    """A node removed and added back (under a new id) was never used again: its devices stayed lost and the run
    ran its queue on half its devices (a helper's two-node runs; Ray Tune places trials on the node)."""
    lost = [DeviceSpec("cpu:2", "cpu", 2, 1, "gone", 2), DeviceSpec("cpu:3", "cpu", 3, 1, "gone", 2)]
    moved = replacements_for_lost(lost, {"back": {"CPU": 2}}, {}, _node_plan)
    assert [(old.name, new.name, new.index, new.node_id, new.slots) for old, new in moved] == [
        ("cpu:2", "cpu:2", 2, "back", 1), ("cpu:3", "cpu:3", 3, "back", 1)]
    # never more devices than the run lost: a larger node gives as many as were lost
    assert len(replacements_for_lost(lost[:1], {"big": {"CPU": 8}}, {}, _node_plan)) == 1
    # a smaller node takes what it can hold; the rest wait for another
    assert [new.name for _, new in replacements_for_lost(lost, {"small": {"CPU": 1}}, {}, _node_plan)] == ["cpu:2"]
    # a node holds its plan less the devices the run has there: a device lost a moment after another that moved
    # there still finds the place left (a review: each node was planned once)
    assert [new.name for _, new in replacements_for_lost(lost[1:], {"back": {"CPU": 2}}, {"back": ["cpu"]},
                                                         _node_plan)] == ["cpu:3"]
    assert replacements_for_lost(lost[1:], {"back": {"CPU": 2}}, {"back": ["cpu", "cpu"]}, _node_plan) == []
    # a node the run cannot plan (no core: a head node of num_cpus=0) takes none, and the run goes on (it failed)
    assert [new.node_id for _, new in replacements_for_lost(lost[:1], {"none": {"CPU": 0}, "ok": {"CPU": 1}}, {},
                                                            _node_plan)] == ["ok"]
    # devices lost on a node still there stay where they are
    failed_to_load = [DeviceSpec("cpu:0", "cpu", 0, 1, "head", 2)]
    assert replacements_for_lost(failed_to_load, {"head": {"CPU": 2}, "new": {"CPU": 2}}, {}, _node_plan) == []
    # a GPU device takes a GPU node's device, not a CPU node's
    gpu = [DeviceSpec("cuda:1", "cuda", 1, 4, "gone", 1)]
    assert replacements_for_lost(gpu, {"cpus": {"CPU": 4}}, {}, _node_plan) == []
    (_, new), = replacements_for_lost(gpu, {"cpus": {"CPU": 4}, "gpus": {"CPU": 8, "GPU": 2}}, {}, _node_plan)
    assert (new.name, new.kind, new.node_id, new.slots) == ("cuda:1", "cuda", "gpus", 4)


def test_a_run_of_the_whole_cluster_gets_devices_on_a_node_that_joins_numbered_on():
    """A node that joined while no device was lost was never used; Ray Tune places trials on it (a helper's run)."""
    added = devices_of_joined_nodes({"new": {"CPU": 2}}, {}, {"cpu"}, _node_plan, first_index=4)
    assert [(d.name, d.index, d.node_id, d.slots) for d in added] == [("cpu:4", 4, "new", 1), ("cpu:5", 5, "new", 1)]
    # less the devices the run has there already (moved there, or added at an earlier check)
    assert [d.name for d in devices_of_joined_nodes({"new": {"CPU": 2}}, {"new": ["cpu"]}, {"cpu"}, _node_plan,
                                                    4)] == ["cpu:4"]
    assert devices_of_joined_nodes({"new": {"CPU": 2}, "none": {"CPU": 0}}, {"new": ["cpu", "cpu"]}, {"cpu"},
                                   _node_plan, 4) == []
    # only devices of the run's kinds: a CPU node adds nothing to a run of GPU devices, a GPU node its GPUs
    nodes = {"cpus": {"CPU": 4}, "gpus": {"CPU": 8, "GPU": 2}}
    assert [(d.name, d.node_id) for d in devices_of_joined_nodes(nodes, {}, {"cuda"}, _node_plan, 2)] == [
        ("cuda:2", "gpus"), ("cuda:3", "gpus")]
    assert devices_of_joined_nodes({"gpus": {"CPU": 8, "GPU": 2}}, {}, {"cpu"}, _node_plan, 2) == []


def test_a_gpu_node_that_joins_a_run_of_cpu_devices_gives_it_cpu_devices():
    """Planned as it is, a GPU node gave only GPU devices, which a run of CPU devices does not take: its cores went
    unused, where Ray Tune places CPU trials there (a helper's run)."""
    gpu_node = {"CPU": 2, "GPU": 1}
    assert as_run_plans(gpu_node, {"cpu"}) == {"CPU": 2}
    assert as_run_plans(gpu_node, {"cuda"}) == gpu_node
    added = devices_of_joined_nodes({"g": as_run_plans(gpu_node, {"cpu"})}, {}, {"cpu"}, _node_plan, 4)
    assert [(d.name, d.kind, d.node_id) for d in added] == [("cpu:4", "cpu", "g"), ("cpu:5", "cpu", "g")]
