"""Device planning from Ray's resources (pure)."""

from __future__ import annotations

import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.device import plan_devices


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
