"""Shared fixtures. One real, small Ray (2 CPUs) is started once per test session and shared."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

#: CPUs of the shared test Ray: the size of this project's CI machine.
TEST_RAY_CPUS = 2

# A plain ``ray.init()`` (a script the suite runs in a subprocess, such as the quickstart; a run that starts Ray
# itself) joins the cluster named in /tmp/ray/ray_current_cluster, which ``ray.cluster_utils.Cluster`` writes: under
# two pytest processes, the quickstart joined another test's two-node cluster with its fake GPUs and died with it
# when that test shut it down ("its node has died", a CI run). Every Ray the suite starts is its own unless a test
# names another (the fixture below, a test that passes an address or sets RAY_ADDRESS for its subprocess).
os.environ["RAY_ADDRESS"] = "local"

# The property tests (hypothesis) draw new examples on every run, so that a developer's runs keep exploring; CI
# (``.ci/run`` sets HYPOTHESIS_PROFILE=ci) draws the same ones each time, so that its verdict is the code's, not
# the draw's (a CI run once failed on an example no earlier run had drawn). An example one run finds goes into
# the test as a plain case.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files in order of their measured seconds, longest first (``tests/_file_seconds.py``): pytest-xdist
    gives each free process the next whole file, and a long one given out last kept one process busy alone."""
    import _file_seconds

    items.sort(key=_file_seconds.order_key(_file_seconds.load()))


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    if not ray.is_initialized():
        # "local": always a fresh cluster of its own, even on a machine where `ray start` left one running
        # (a plain ray.init() would join that one and refuse num_cpus).
        # num_gpus=0: the suite's runs get virtual CPU devices on every machine, a GPU workstation too (with the
        # GPU, a run's default devices are its GPUs: devices=2 would need two). The GPU checks start their own
        # processes (tests/test_allocator_cuda.py).
        ray.init(address="local", num_cpus=TEST_RAY_CPUS, num_gpus=0, include_dashboard=False,
                 configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def storage(tmp_path):
    return str(tmp_path / "results")
