"""NVML sampling: silent where there is no GPU; sampling and the ring bound with a fake pynvml."""

from __future__ import annotations

import sys
import time
import types

import pytest

import fluidsalus
from fluidsalus.errors import ConfigError
from fluidsalus.gpu import nvml
from fluidsalus.gpu.nvml import (
    CUBLAS_HANDLE_BYTES,
    CUDA_CONTEXT_RESERVE_BYTES,
    CUDNN_HANDLE_BYTES,
    RESERVE_ENV,
    GpuSample,
    NvmlSampler,
    context_reserve_bytes,
    device_free_memory,
    nvml_device_for_cuda,
)

GIB = 1 << 30
MIB = 1 << 20
#: How long the threaded test waits for samples before failing.
WAIT_S = 5.0


class FakeNvml(types.ModuleType):
    """The few pynvml functions the sampler uses, over a scripted device."""

    class NVMLError(Exception):
        pass

    def __init__(self, *, init_fails=False, devices=1):
        super().__init__("pynvml")
        self.init_fails = init_fails
        self.devices = devices
        self.inits = 0
        self.shutdowns = 0
        self.reads = 0
        self.fail_reads = False

    def nvmlInit(self):
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= self.devices:
            raise self.NVMLError("Invalid Argument")
        return ("h", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("h", uuid)

    def nvmlDeviceGetUtilizationRates(self, handle):
        if self.fail_reads:
            raise self.NVMLError("GPU is lost")
        self.reads += 1
        return types.SimpleNamespace(gpu=self.reads % 101, memory=7)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=3 * GIB, total=80 * GIB, free=77 * GIB)


@pytest.fixture
def fake(monkeypatch):
    mod = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


def test_no_gpu_here_records_nothing_and_raises_nothing():
    # this machine has the pynvml package but no NVML library (or a GPU, if it has one: skip then)
    probe = NvmlSampler(0, 0.01, start=False)
    has_gpu = probe.available
    probe.stop()
    if has_gpu:
        pytest.skip("this machine has a GPU")
    s = NvmlSampler(0, 0.01)
    time.sleep(0.05)
    assert not s.available
    assert s.samples() == [] and s.latest() is None and s.sample_once() is None
    s.stop()
    s.stop()
    assert device_free_memory(0) is None


def test_missing_package_is_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with NvmlSampler(0, 0.01) as s:
        assert not s.available and s.samples() == []
    assert device_free_memory(0) is None


def test_init_failure_and_missing_device(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_fails=True))
    assert not NvmlSampler(0, 0.01).available
    mod = FakeNvml(devices=1)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    s = NvmlSampler(3, 0.01)
    assert not s.available and mod.shutdowns == mod.inits == 1
    assert device_free_memory(3) is None


def test_sampling_and_ring_bound(fake):
    clock = iter(range(100)).__next__
    s = NvmlSampler(0, 1.0, ring_size=4, start=False, clock=clock)
    assert s.available
    for _ in range(6):
        s.sample_once()
    got = s.samples()
    assert len(got) == 4  # bounded: the two oldest were dropped
    assert [x.ts for x in got] == [2, 3, 4, 5]
    assert got[-1] == s.latest() == GpuSample(5, 6, 7, 3 * GIB, 80 * GIB)
    fake.fail_reads = True
    assert s.sample_once() is None and s.errors == 1 and len(s.samples()) == 4
    s.stop()
    assert fake.shutdowns == 1 and not s.available
    assert s.sample_once() is None and len(s.samples()) == 4  # still readable after stop


def test_background_thread_samples_until_stopped(fake):
    s = NvmlSampler(0, 0.001, ring_size=5)
    deadline = time.monotonic() + WAIT_S
    while fake.reads < 10 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert fake.reads >= 10
    assert len(s.samples()) == 5
    s.stop()
    reads = fake.reads
    time.sleep(0.02)
    assert fake.reads == reads  # the thread is gone


def test_device_free_memory_subtracts_the_reserve(fake, monkeypatch):
    monkeypatch.delenv(RESERVE_ENV, raising=False)
    # the trial's cuBLAS and cuDNN handles and autograd's
    one_thread = CUDA_CONTEXT_RESERVE_BYTES + 2 * (CUBLAS_HANDLE_BYTES + CUDNN_HANDLE_BYTES)
    assert device_free_memory(0) == 77 * GIB - one_thread
    assert device_free_memory(0, reserve_bytes=0) == 77 * GIB
    assert device_free_memory(0, reserve_bytes=100 * GIB) == 0
    assert device_free_memory("GPU-1234") == 77 * GIB - one_thread
    assert device_free_memory(0, max_threads=16) == 77 * GIB - (1 * GIB + 17 * 74 * MIB)
    assert fake.inits == fake.shutdowns == 5


def test_the_reserve_grows_with_the_threads_that_may_hold_a_cublas_handle(monkeypatch):
    monkeypatch.delenv(RESERVE_ENV, raising=False)
    assert context_reserve_bytes(1) == 1 * GIB + 2 * (64 + 10) * MIB
    assert context_reserve_bytes(16) == 1 * GIB + 17 * (64 + 10) * MIB
    # the figures measured on an H200 and an H100 (docs/benchmarks.md): 1,855 and 1,930 MiB outside torch's
    # allocator with 16 live threads, 2,881 and 2,956 MiB with 32: the reserve covers them
    assert context_reserve_bytes(16) >= 1930 * MIB
    assert context_reserve_bytes(32) >= 2956 * MIB
    assert context_reserve_bytes(0) == context_reserve_bytes(1)


def test_the_reserve_variable_replaces_the_whole_reserve(monkeypatch):
    monkeypatch.setenv(RESERVE_ENV, str(4 * GIB))
    assert context_reserve_bytes(16) == 4 * GIB
    monkeypatch.setenv(RESERVE_ENV, " 0 ")
    assert context_reserve_bytes(16) == 0
    monkeypatch.setenv(RESERVE_ENV, "")
    assert context_reserve_bytes(1) == CUDA_CONTEXT_RESERVE_BYTES + 2 * (CUBLAS_HANDLE_BYTES + CUDNN_HANDLE_BYTES)


@pytest.mark.parametrize("bad", ["4GiB", "-1", "1.5"])
def test_a_bad_reserve_variable_is_refused_naming_it(monkeypatch, bad):
    monkeypatch.setenv(RESERVE_ENV, bad)
    with pytest.raises(ConfigError, match=rf"FLUIDSALUS_CUDA_RESERVE_BYTES='{bad}': expected a byte count"):
        context_reserve_bytes(4)


def test_run_refuses_a_bad_reserve_variable_before_it_starts_anything(monkeypatch, tmp_path):
    monkeypatch.setenv(RESERVE_ENV, "lots")

    def trainable(config):
        fluidsalus.report({"x": 1})

    with pytest.raises(ConfigError, match="FLUIDSALUS_CUDA_RESERVE_BYTES='lots'"):
        fluidsalus.run(trainable, config={"lr": 0.1}, num_samples=1, storage_path=str(tmp_path), name="never",
                       verbose=0)
    assert not (tmp_path / "never").exists()


def test_cuda_index_maps_through_cuda_visible_devices():
    assert nvml_device_for_cuda(1, env={}) == 1
    assert nvml_device_for_cuda(0, env={"CUDA_VISIBLE_DEVICES": "3,5"}) == 3
    assert nvml_device_for_cuda(1, env={"CUDA_VISIBLE_DEVICES": "3, 5"}) == 5
    assert nvml_device_for_cuda(0, env={"CUDA_VISIBLE_DEVICES": "GPU-ab12"}) == "GPU-ab12"
    assert nvml_device_for_cuda(4, env={"CUDA_VISIBLE_DEVICES": "3"}) == 4


def test_bad_arguments():
    with pytest.raises(ValueError, match="interval_s"):
        NvmlSampler(0, 0)
    with pytest.raises(ValueError, match="ring_size"):
        NvmlSampler(0, 1.0, ring_size=0)
    assert nvml.DEFAULT_RING_SIZE >= 1 and nvml.DEFAULT_INTERVAL_S > 0


@pytest.mark.parametrize("code", nvml.LIBRARY_ALLOC_FAILURES)
def test_a_library_allocation_failure_gets_a_hint_naming_the_reserve(monkeypatch, code):
    monkeypatch.delenv(RESERVE_ENV, raising=False)
    hint = nvml.reserve_hint(f"RuntimeError: CUDA error: {code} when calling `something`", 16)
    assert hint is not None and "2282 MiB on this device" in hint and RESERVE_ENV in hint
    assert str(context_reserve_bytes(16)) in hint


def test_other_errors_get_no_reserve_hint():
    assert nvml.reserve_hint("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", 16) is None
    assert nvml.reserve_hint("ValueError: bad config", 1) is None
