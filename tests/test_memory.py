"""Memory estimates on CPU: P from real torch modules and optimizers, T from peak RSS, EMA smoothing."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from fluidsalus.gpu.memory import (  # noqa: E402
    DEFAULT_EMA_ALPHA,
    Ema,
    MemoryEstimate,
    PeakRss,
    measure_iteration,
    module_bytes,
    optimizer_state_bytes,
    persistent_bytes,
    tensor_bytes,
)

F32 = 4  # bytes per float32
I64 = 8  # bytes per int64
MIB = 1 << 20
#: Size of the temporary the T test allocates: large enough to stand out of RSS noise, small enough to be fast.
TEMP_MIB = 64
#: What a measured temporary may fall short of TEMP_MIB: pages the allocator had resident already, and pages other
#: threads of the process give back inside the measured window (1.5 MiB on a GPU machine under pytest -n 8).
RSS_SLACK_MIB = 4
HAS_PROC = os.path.exists("/proc/self/status")


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))


def test_p_of_a_module_is_its_parameter_and_buffer_bytes():
    model = small_model()
    params = (10 * 5 + 5) + (5 + 5) + (5 * 2 + 2)  # linear, batchnorm weight+bias, linear
    buffers_f32 = 5 + 5  # running mean and var
    assert module_bytes(model) == (params + buffers_f32) * F32 + I64  # + num_batches_tracked
    assert module_bytes(torch.nn.Linear(3, 4, bias=False)) == 12 * F32


def test_adam_state_after_one_step_adds_twice_the_parameters():
    model = small_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    assert optimizer_state_bytes(opt) == 0  # Adam creates its state lazily
    model(torch.randn(8, 10)).sum().backward()
    opt.step()
    param_bytes = tensor_bytes(model.parameters())
    steps = [s["step"] for s in opt.state.values()]
    step_bytes = sum(t.element_size() * t.nelement() for t in steps)
    assert optimizer_state_bytes(opt) == 2 * param_bytes + step_bytes
    assert persistent_bytes([model], [opt]) == module_bytes(model) + 2 * param_bytes + step_bytes


def test_shared_tensors_count_once():
    a = torch.zeros(100)
    assert tensor_bytes([a, a, a.view(10, 10), a[:50]]) == 100 * F32
    assert tensor_bytes([a, torch.zeros(100)]) == 200 * F32
    # tied weights: the same parameter in two modules
    enc, dec = torch.nn.Linear(4, 6, bias=False), torch.nn.Linear(6, 4, bias=False)
    dec.weight = torch.nn.Parameter(enc.weight.t())  # a new Parameter sharing enc.weight's storage
    both = torch.nn.ModuleList([enc, dec])
    assert module_bytes(both) == 24 * F32
    assert persistent_bytes([enc, dec]) == 24 * F32
    assert tensor_bytes([torch.empty(0), torch.empty(3, device="meta")]) == 0


def test_sparse_tensors_count_values_and_indices():
    s = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (1000,), check_invariants=True)
    assert tensor_bytes([s]) == 2 * F32 + 2 * I64


@pytest.mark.skipif(not HAS_PROC, reason="T from RSS needs /proc")
def test_t_is_the_peak_rss_increase_minus_new_persistent_state():
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.Adam(model.parameters())

    def step():
        tmp = torch.ones(TEMP_MIB * MIB // F32)  # touched: resident
        model(torch.randn(4, 64)).sum().backward()
        opt.step()
        return float(tmp[0])

    m = measure_iteration(step, [model], [opt])
    assert m.result == 1.0
    assert m.p == persistent_bytes([model], [opt])
    assert m.rss is not None and m.rss.exact
    assert m.t >= (TEMP_MIB - RSS_SLACK_MIB) * MIB  # at least the temporary
    assert m.t < 4 * TEMP_MIB * MIB


@pytest.mark.skipif(not HAS_PROC, reason="T from RSS needs /proc")
def test_peak_rss_probe_reports_an_increase():
    with PeakRss() as probe:
        block = torch.ones(TEMP_MIB * MIB // F32)
        del block
    assert probe.result is not None
    assert probe.result.increase >= (TEMP_MIB - RSS_SLACK_MIB) * MIB


def test_ema():
    e = Ema(0.5)
    assert e.value is None
    assert e.update(10) == 10
    assert e.update(20) == 15
    assert e.update(15) == 15 and e.samples == 3
    assert Ema().alpha == DEFAULT_EMA_ALPHA
    with pytest.raises(ValueError, match="alpha"):
        Ema(0)


def test_memory_estimate_rises_at_once_and_decays_slowly():
    est = MemoryEstimate(p=1000, t=1000)  # an initial guess
    est.update(100, None)  # a boundary that could not measure T (not alone): P only, and no sample of T
    assert (est.p, est.t, est.samples, est.t_samples) == (100, 1000, 1, 0)
    est.update(100, 50)  # the first measurement of T replaces the guess, however many boundaries came first
    assert (est.p, est.t, est.samples, est.t_samples) == (100, 50, 2, 1)
    est.update(120, 80)  # larger: taken at once
    assert (est.p, est.t) == (120, 80)
    est.update(120, 0)  # smaller: decays by alpha
    assert est.t == round(80 * (1 - DEFAULT_EMA_ALPHA))
    assert (est.samples, est.t_samples) == (4, 3)
