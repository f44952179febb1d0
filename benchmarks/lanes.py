"""Benchmark of the lane runtime: switch latency, and packing many small PyTorch trials onto one device.

    python benchmarks/lanes.py --device cpu                 # full run (a few minutes on 2 cores)
    python benchmarks/lanes.py --device cpu --json --quick  # N in {1, 2, 4}, fewer steps; JSON last line
    python benchmarks/lanes.py --device cuda --max-lanes 4  # on a GPU machine

**1. Switch latency.** One :class:`~fluidsalus.gpu.host.DeviceHost` in this process on a virtual CPU device
with ``max_lanes=1``: :data:`SWITCH_TRIALS` trials time-slice the one lane, each running
:data:`SWITCH_ITERS` tiny iterations (a small tensor op and a ``fluidsalus.report``). The host emits a lane
event ``"switch"`` with ``latency_ms`` (from the moment the previous holder released the turn to the moment
the next one runs) for every hand-over; the benchmark reports their median and 99th percentile. The driver
polls the host as the device actor does (``poll(0.1)``), so its wake-ups are part of what is measured.

**2. Packing.** N in :data:`NS` (:data:`NS_QUICK` with ``--quick``) trials of one small model (``mlp`` or
``cnn``), each with its own synthetic data created once on the device (:data:`DATA_BATCHES` batches, reused
cyclically), its own learning rate, and SGD with momentum for a fixed number of steps. Modes:

``serial``
    The N trials one after another in this process, with ``--threads`` torch intra-op threads.
``lanes``
    The N trials submitted at once to one DeviceHost on the device. CPU: ``max_lanes`` = cores,
    ``torch_threads=1`` (so at most ``cores`` compute threads), ``capacity_bytes`` what fluidsalus gives one
    virtual CPU device (``virtual_device_capacity(1)``: far more than N trials need), ``trial_estimate``
    measured on one trial before timing (P: parameters, optimizer state and data; T: the peak RSS increase
    of its first step, :func:`fluidsalus.gpu.memory.measure_iteration`); the host then profiles each trial
    itself and re-fits its lane (``profile_memory``, on by default). CUDA: ``cuda:0``, ``max_lanes`` from
    ``--max-lanes``, capacity 90% of the free device memory, P and T measured with
    ``torch.cuda.max_memory_allocated``. Trials call ``fluidsalus.step()`` after every training step and
    ``fluidsalus.report()`` every :data:`REPORT_EVERY` steps.
``processes``
    N OS processes (multiprocessing, spawn) sharing the device, one trial each: what Ray Tune's fractional
    GPUs (or CPUs) do. On CPU each process gets ``max(1, threads // N)`` torch threads (``--threads``,
    default 1: so 1 thread per process, like one lane trial); with ``--threads`` = cores that is the
    ``max(1, cores // N)`` split. Above ``cores`` processes the OS time-slices them, as a GPU driver
    time-slices contexts.
    The processes are started once (``max(NS)`` of them; a phase with N trials uses the first N, the
    others idle blocked); interpreter start, ``import torch`` and a warm-up of a few steps are not timed
    (the workers of a long sweep are long-lived) and are reported as ``startup_s``. The N trials of a
    phase start together, when every one of them is ready.
``fused``
    The upper bound on a GPU (on a CPU, whose core one small model already keeps busy, it need not be):
    the N models stacked with ``torch.func.stack_module_state`` and trained together with ``torch.func.vmap``
    over ``functional_call`` (``--threads`` torch threads), the same number of steps on the same per-trial
    data. The per-trial learning rates are exact: each model's loss is scaled by its learning rate under
    one SGD with ``lr=1`` (for momentum SGD without weight decay that is the same update).

**Threads on CPU.** ``--threads`` (default :data:`CPU_THREADS` = 1) is the intra-op thread count of
``serial`` and ``fused`` and the budget split among the processes. One thread is the default because these
models are too small for intra-op parallelism to pay, and because OpenMP's spin-waiting collapses when a
core is busy elsewhere: on the 2-core machine this was written on, while another process kept one core
busy, the MLP trained 37 steps/s with 2 threads against 1093 with 1. A 2-thread serial baseline would thus
have flattered the other modes by up to 30x. The lanes mode always runs ``torch_threads=1`` per trial.

Every mode's timed region covers building the N models, their data and optimizers, and training them (on
CUDA between ``torch.cuda.synchronize()`` calls). ``samples_per_s`` is the total number of training samples
of all N trials divided by the wall time. Peak memory: on CPU the peak RSS (``VmHWM`` of ``/proc``, reset
before each mode through ``/proc/self/clear_refs``; ``ru_maxrss`` where that is not possible) of this
process, or the sum over the N processes, each including its own Python and torch runtime; on CUDA
``torch.cuda.max_memory_allocated`` (summed over processes; the CUDA context of each process is not
counted). In-process modes sample the peak every :data:`PEAK_SAMPLE_S` because the lane runtime's memory
profiling resets it too.

In the table's notes, ``lanes_opened`` counts the lanes opened over the whole phase (a lane closed and opened
again counts twice), not the lanes open at once; ``per-lane`` is how many trials each lane id ran and
``waited`` how many admissions waited for lane memory.

The script prints a table and, with ``--json``, as its last line one JSON object::

    {"switch_latency_ms_p50": ..., "switch_latency_ms_p99": ..., "device": ..., ...,
     "results": [{"mode": ..., "n": ..., "model": ..., "samples_per_s": ..., "peak_mem_mb": ..., ...}]}
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import multiprocessing as mp
import os
import queue
import resource
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:  # run without installing fluidsalus; spawned workers inherit sys.path
    sys.path.insert(0, REPO_ROOT)

# ---- what is measured ----
NS = (1, 2, 4, 8, 16, 32)  # trials packed at once
NS_QUICK = (1, 2, 4)
MODELS = ("mlp", "cnn")
MODES = ("serial", "lanes", "processes", "fused")
STEPS = 200  # training steps per trial
STEPS_QUICK = 40
REPORT_EVERY = 10  # steps between two fluidsalus.report() calls of a lane trial (k)
WARMUP_STEPS = 3  # untimed steps per model kind, run once per process before timing
DATA_BATCHES = 8  # distinct synthetic batches per trial, created once on the device and reused cyclically
LEARNING_RATES = (0.1, 0.03, 0.01, 0.003)  # trial i uses LEARNING_RATES[i % 4]: a small sweep
MOMENTUM = 0.9
DEFAULT_CUDA_LANES = 4  # --max-lanes default on a GPU
CPU_THREADS = 1  # --threads default: torch intra-op threads of serial/fused, split among processes

# ---- the models (small, as in hyperparameter sweeps of small models) ----
N_CLASSES = 10
MLP_IN = 128  # features of a synthetic sample
MLP_HIDDEN = 256  # width of both hidden layers
MLP_BATCH = 32
CNN_CHANNELS = 3  # a synthetic 3x16x16 image
CNN_SIZE = 16
CNN_WIDTH1 = 16  # channels of the first conv layer
CNN_WIDTH2 = 32  # channels of the second
CNN_BATCH = 16
BATCH = {"mlp": MLP_BATCH, "cnn": CNN_BATCH}

# ---- switch latency ----
SWITCH_TRIALS = 4  # trials time-slicing one lane
SWITCH_ITERS = 250  # reports (iterations) per trial
SWITCH_ITERS_QUICK = 100
SWITCH_TENSOR = 64  # elements of the tiny tensor an iteration adds to

# ---- lanes mode ----
PEAK_SAMPLE_S = 0.005  # how often the peak-memory sampler reads the peak during an in-process mode
CUDA_CAPACITY_FRACTION = 0.9  # CUDA capacity_bytes = this x free device memory
POLL_S = 0.1  # the driver's long-poll, as the device actor's
RUN_TIMEOUT_S = 300.0  # a mode that has not finished by then has hung

MIB = 2**20
EXIT_USAGE = 2


# ------------------------------------------------------------------------------------------- helpers


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss() -> None:
    """Give freed heap back to the OS and reset ``VmHWM`` to the current RSS (where Linux allows it)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_bytes() -> int:
    """Peak RSS of this process since the last :func:`reset_peak_rss` (``ru_maxrss`` without ``/proc``)."""
    kib = _proc_status_kib("VmHWM")
    if kib is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def current_rss_bytes() -> int:
    kib = _proc_status_kib("VmRSS")
    return 0 if kib is None else kib * 1024


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak_mem(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak_rss()


def peak_mem_bytes(device: str) -> int:
    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device))
    return peak_rss_bytes()


class PeakMemory:
    """Peak memory of this process over a ``with`` block: ``.bytes`` afterwards.

    A thread also reads the peak (``VmHWM`` on CPU, ``torch.cuda.max_memory_allocated`` on CUDA) every
    :data:`PEAK_SAMPLE_S` and keeps the largest value: the lane runtime's memory profiling resets that peak
    (``/proc/self/clear_refs``, ``torch.cuda.reset_peak_memory_stats``) at iteration boundaries, so the value
    read at the end alone would miss the peaks before its last reset.
    """

    def __init__(self, device: str) -> None:
        self.device = device
        self.bytes = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if device.startswith("cuda"):
            torch.cuda.init()  # the sampler thread queries the allocator of an initialised device

    def _sample(self) -> None:
        while not self._done.wait(PEAK_SAMPLE_S):
            self.bytes = max(self.bytes, peak_mem_bytes(self.device))

    def __enter__(self) -> PeakMemory:
        reset_peak_mem(self.device)
        self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.bytes = max(self.bytes, peak_mem_bytes(self.device))


# --------------------------------------------------------------------------------------- one trial


def make_model(kind: str) -> nn.Module:
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(MLP_IN, MLP_HIDDEN), nn.ReLU(),
            nn.Linear(MLP_HIDDEN, MLP_HIDDEN), nn.ReLU(),
            nn.Linear(MLP_HIDDEN, N_CLASSES),
        )
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(CNN_CHANNELS, CNN_WIDTH1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(CNN_WIDTH1, CNN_WIDTH2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(CNN_WIDTH2 * (CNN_SIZE // 4) ** 2, N_CLASSES),
        )
    raise ValueError(f"unknown model {kind!r}")


def make_data(kind: str, index: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The trial's synthetic data, on the device: ``DATA_BATCHES`` batches of inputs and labels."""
    gen = torch.Generator(device=device)
    gen.manual_seed(index)
    shape = (MLP_IN,) if kind == "mlp" else (CNN_CHANNELS, CNN_SIZE, CNN_SIZE)
    x = torch.randn((DATA_BATCHES, BATCH[kind], *shape), generator=gen, device=device)
    y = torch.randint(0, N_CLASSES, (DATA_BATCHES, BATCH[kind]), generator=gen, device=device)
    return x, y


def learning_rate(index: int) -> float:
    return LEARNING_RATES[index % len(LEARNING_RATES)]


def train_trial(kind: str, index: int, steps: int, device: str,
                on_report: Callable[[int, float], None] | None = None,
                on_step: Callable[[], None] | None = None) -> int:
    """Build one trial's model, data and optimizer on ``device`` and train it; return the samples trained.

    Every ``REPORT_EVERY`` steps the loss is read (``.item()``, a device sync on CUDA) and passed to
    ``on_report``, in every mode, as a trial of a sweep reports its progress; ``on_step`` runs after the
    other steps.
    """
    model = make_model(kind).to(device)
    x, y = make_data(kind, index, device)
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate(index), momentum=MOMENTUM)
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[s % DATA_BATCHES]), y[s % DATA_BATCHES])
        loss.backward()
        opt.step()
        if (s + 1) % REPORT_EVERY == 0 or s + 1 == steps:
            value = loss.item()
            if on_report is not None:
                on_report(s + 1, value)
        elif on_step is not None:
            on_step()
    return steps * BATCH[kind]


# ------------------------------------------------------------------------------------------- modes


def run_serial(kind: str, n: int, steps: int, device: str) -> dict[str, Any]:
    with PeakMemory(device) as peak:
        t0 = time.perf_counter()
        samples = sum(train_trial(kind, i, steps, device) for i in range(n))
        sync(device)
        wall = time.perf_counter() - t0
    return {"samples": samples, "wall_s": wall, "peak_mem": peak.bytes}


def _fused_trial_group(kind: str, n: int, device: str) -> tuple[Any, ...]:
    import copy

    models = [make_model(kind).to(device) for _ in range(n)]
    params, buffers = torch.func.stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    data = [make_data(kind, i, device) for i in range(n)]
    x = torch.stack([d[0] for d in data], dim=1)  # [DATA_BATCHES, n, batch, ...]
    y = torch.stack([d[1] for d in data], dim=1)
    del data, models
    lrs = torch.tensor([learning_rate(i) for i in range(n)], device=device)
    return base, params, buffers, x, y, lrs


def run_fused(kind: str, n: int, steps: int, device: str) -> dict[str, Any]:
    with PeakMemory(device) as peak:
        t0 = time.perf_counter()
        train_fused(kind, n, steps, device)
        sync(device)
        wall = time.perf_counter() - t0
    return {"samples": n * steps * BATCH[kind], "wall_s": wall, "peak_mem": peak.bytes}


def train_fused(kind: str, n: int, steps: int, device: str) -> None:
    """The N trials of ``kind`` as one stacked model, trained with vmap (see the module doc)."""
    base, params, buffers, x, y, lrs = _fused_trial_group(kind, n, device)

    def forward(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], xb: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(base, (p, b), (xb,))

    batched = torch.func.vmap(forward)
    # lr=1 with each model's loss scaled by its own learning rate: momentum SGD per model, exactly.
    opt = torch.optim.SGD(list(params.values()), lr=1.0, momentum=MOMENTUM)
    batch = BATCH[kind]
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        out = batched(params, buffers, x[s % DATA_BATCHES])  # [n, batch, classes]
        per_model = F.cross_entropy(out.reshape(n * batch, N_CLASSES), y[s % DATA_BATCHES].reshape(n * batch),
                                    reduction="none").view(n, batch).mean(dim=1)
        (per_model * lrs).sum().backward()
        opt.step()
        if (s + 1) % REPORT_EVERY == 0 or s + 1 == steps:
            per_model.detach().cpu()  # every trial's loss, as the other modes read theirs


def measure_trial_estimate(kind: str, device: str) -> tuple[int, int]:
    """(P, T) of one trial, measured before timing: what ``trial_estimate`` of the lanes mode is set to."""
    model = make_model(kind).to(device)
    x, y = make_data(kind, 0, device)
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate(0), momentum=MOMENTUM)

    def one_step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[0]), y[0]).backward()
        opt.step()

    if device.startswith("cuda"):
        from fluidsalus.gpu.memory import persistent_bytes

        one_step()  # momentum buffers exist from the first step on: persistent
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        one_step()
        torch.cuda.synchronize()
        t = max(0, torch.cuda.max_memory_allocated() - before)
        p = persistent_bytes([model], [opt], [x, y])
        return p, t
    from fluidsalus.gpu.memory import measure_iteration, tensor_bytes

    measured = measure_iteration(one_step, [model], [opt])
    return measured.p + tensor_bytes([x, y]), measured.t


def _lane_trainable(config: dict[str, Any]) -> None:
    import fluidsalus

    def report(step: int, loss: float) -> None:
        fluidsalus.report({"loss": loss, "step": step})

    train_trial(config["model"], config["index"], config["steps"], config["device"],
                on_report=report, on_step=fluidsalus.step)


def drain(host: Any, n_ends: int, timeout_s: float = RUN_TIMEOUT_S) -> list[tuple[Any, ...]]:
    """Poll the host until ``n_ends`` trials have ended; all events, in order."""
    from fluidsalus.gpu.host import EV_END

    events: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + timeout_s
    ends = 0
    while ends < n_ends:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n_ends - ends} of {n_ends} trials did not end within {timeout_s:.0f} s")
        batch = host.poll(POLL_S)
        ends += sum(1 for e in batch if e[0] == EV_END)
        events += batch
    return events


@contextlib.contextmanager
def restored_threads() -> Any:
    """DeviceHost(torch_threads=...) sets OMP/MKL_NUM_THREADS in os.environ and torch's thread count for the
    whole process; put both back afterwards so the other modes (and spawned workers) are not affected."""
    saved_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    saved_threads = torch.get_num_threads()
    try:
        yield
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        torch.set_num_threads(saved_threads)


def run_lanes(kind: str, n: int, steps: int, device: str, max_lanes: int,
              estimate: tuple[int, int]) -> dict[str, Any]:
    from fluidsalus.gpu.host import EV_END, EV_LANE, OUT_COMPLETED, DeviceHost, HostSettings, TrialSpec

    p, t = estimate
    if device.startswith("cuda"):
        capacity = int(torch.cuda.mem_get_info()[0] * CUDA_CAPACITY_FRACTION)
        torch_threads = None
    else:
        from fluidsalus.gpu.device import virtual_device_capacity

        capacity = virtual_device_capacity(1)  # what fluidsalus gives one virtual CPU device on this machine
        torch_threads = 1
    with restored_threads(), tempfile.TemporaryDirectory(prefix="bench_lanes_") as tmp, \
            PeakMemory(device) as peak:
        settings = HostSettings("bench-lanes", device=device, max_lanes=max_lanes, capacity_bytes=capacity,
                                trial_estimate=(p, t), torch_threads=torch_threads)
        specs = [TrialSpec(trial_id=f"t{i}", trial_name=f"{kind}_{i}", trial_dir=os.path.join(tmp, f"t{i}"),
                           config={"model": kind, "index": i, "steps": steps, "device": device})
                 for i in range(n)]
        t0 = time.perf_counter()
        host = DeviceHost(_lane_trainable, settings)
        host.submit(specs)
        try:
            events = drain(host, n)
            sync(device)
            wall = time.perf_counter() - t0
        finally:
            host.shutdown(timeout_s=10.0)
    ends = [e for e in events if e[0] == EV_END]
    errors = [f"{e[1]}: {e[5]}" for e in ends if e[4] != OUT_COMPLETED]
    completed = sum(1 for e in ends if e[4] == OUT_COMPLETED)
    lane_kinds = [e[4] for e in events if e[0] == EV_LANE]
    lane_of: dict[str, int] = {}  # each trial's last lane (lane_admit detail: [lane, p, t])
    for e in events:
        if e[0] == EV_LANE and e[4] == "lane_admit":
            lane_of[e[1]] = e[5]["detail"][0]
    per_lane = {lane: sum(1 for v in lane_of.values() if v == lane) for lane in set(lane_of.values())}
    switches = [e[5]["latency_ms"] for e in events if e[0] == EV_LANE and e[4] == "switch"]
    return {
        "samples": completed * steps * BATCH[kind],
        "wall_s": wall,
        "peak_mem": peak.bytes,
        "errors": errors,
        "lanes_opened": lane_kinds.count("lane_open"),
        "trials_per_lane": [per_lane[k] for k in sorted(per_lane)],
        "waited": lane_kinds.count("lane_wait"),
        "switches": len(switches),
        "switch_ms_p50": round(percentile(switches, 50), 4) if switches else None,
        "lane_events": {k: lane_kinds.count(k) for k in sorted(set(lane_kinds))},
    }


def _process_worker(rank: int, kinds: list[str], device: str, commands: Any, results: Any, go: list[Any]) -> None:
    """One long-lived worker process: warms up, then trains one trial per command when its phase starts."""
    try:
        torch.set_num_threads(1)
        if device.startswith("cuda"):
            torch.cuda.set_device(0)
        for kind in kinds:  # warm-up: first-call costs (kernels, allocator) are not part of the timing
            train_trial(kind, rank, WARMUP_STEPS, device)
        sync(device)
        results.put(("ready", rank))
        while (command := commands.get()) is not None:
            phase, kind, steps, threads = command
            torch.set_num_threads(threads)
            reset_peak_mem(device)
            results.put(("armed", rank))
            go[phase].wait()
            start = time.monotonic()
            samples = train_trial(kind, rank, steps, device)
            sync(device)
            end = time.monotonic()
            results.put(("done", rank, start, end, samples, peak_mem_bytes(device)))
    except BaseException:  # noqa: BLE001 - report to the parent, which fails the mode
        results.put(("error", rank, traceback.format_exc()))


class ProcessPool:
    """``size`` spawned worker processes for the ``processes`` mode, started (and warmed up) once.

    A phase runs one trial in each of the first N workers; the others idle (blocked, no CPU). All N start
    training when the phase's event is set, after every one of them has reported that it is ready.
    """

    def __init__(self, size: int, kinds: list[str], device: str, phases: int) -> None:
        ctx = mp.get_context("spawn")
        self.device = device
        self.results = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(size)]
        self.go = [ctx.Event() for _ in range(phases)]
        self.phase = 0
        t0 = time.monotonic()
        self.procs = [ctx.Process(target=_process_worker, args=(r, kinds, device, self.commands[r], self.results,
                                                                  self.go), daemon=True) for r in range(size)]
        for proc in self.procs:
            proc.start()
        self._collect("ready", size)
        self.startup_s = time.monotonic() - t0

    def _collect(self, kind: str, count: int) -> list[tuple[Any, ...]]:
        got: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(got) < count:
            try:
                item = self.results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"processes: no {kind!r} within {RUN_TIMEOUT_S:.0f} s") from None
            if item[0] == "error":
                raise RuntimeError(f"processes: worker {item[1]} failed:\n{item[2]}")
            assert item[0] == kind, item
            got.append(item)
        return got

    def run(self, kind: str, n: int, steps: int, threads: int) -> dict[str, Any]:
        """N trials of ``kind``, one in each of the first N workers, started together."""
        phase, self.phase = self.phase, self.phase + 1
        for rank in range(n):
            self.commands[rank].put((phase, kind, steps, threads))
        self._collect("armed", n)
        self.go[phase].set()
        done = self._collect("done", n)
        return {
            "samples": sum(item[4] for item in done),
            "wall_s": max(item[3] for item in done) - min(item[2] for item in done),
            "peak_mem": sum(item[5] for item in done),
            "startup_s": round(self.startup_s, 3),
            "threads_per_process": threads,
        }

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)


# ----------------------------------------------------------------------------------- switch latency


def _switch_trainable(config: dict[str, Any]) -> None:
    import fluidsalus

    x = torch.zeros(SWITCH_TENSOR)
    for i in range(config["iters"]):
        x.add_(1.0)
        fluidsalus.report({"i": i})


def measure_switch_latency(iters: int) -> dict[str, Any]:
    """Switch latencies on a virtual CPU device with one lane that SWITCH_TRIALS trials time-slice."""
    from fluidsalus.gpu.host import EV_END, EV_LANE, OUT_COMPLETED, DeviceHost, HostSettings, TrialSpec

    with restored_threads(), tempfile.TemporaryDirectory(prefix="bench_switch_") as tmp:
        settings = HostSettings("bench-switch", device="cpu", max_lanes=1, capacity_bytes=2**30,
                                trial_estimate=(MIB, MIB), torch_threads=1)
        host = DeviceHost(_switch_trainable, settings)
        host.submit([TrialSpec(trial_id=f"s{i}", trial_name=f"switch_{i}", trial_dir=os.path.join(tmp, f"s{i}"),
                               config={"iters": iters}) for i in range(SWITCH_TRIALS)])
        try:
            events = drain(host, SWITCH_TRIALS)
        finally:
            host.shutdown(timeout_s=10.0)
    bad = [e for e in events if e[0] == EV_END and e[4] != OUT_COMPLETED]
    if bad:
        raise RuntimeError(f"switch latency: a trial failed: {bad[0][5]}")
    lat = [e[5]["latency_ms"] for e in events if e[0] == EV_LANE and e[4] == "switch"]
    if not lat:
        raise RuntimeError("switch latency: the host recorded no switch")
    return {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat), "count": len(lat)}


# --------------------------------------------------------------------------------------------- main


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput (the slower middle one of an even count)."""
    ranked = sorted(runs, key=lambda m: m["samples"] / m["wall_s"] if m["wall_s"] > 0 else 0.0)
    return ranked[(len(ranked) - 1) // 2]


def row(mode: str, n: int, kind: str, steps: int, measured: dict[str, Any]) -> dict[str, Any]:
    wall = measured.pop("wall_s")
    samples = measured.pop("samples")
    peak = measured.pop("peak_mem")
    return {
        "mode": mode,
        "n": n,
        "model": kind,
        "samples_per_s": round(samples / wall, 1) if wall > 0 else 0.0,
        "peak_mem_mb": round(peak / MIB, 1),
        "wall_s": round(wall, 3),
        "steps": steps,
        "batch": BATCH[kind],
        **measured,
    }


def print_table(results: list[dict[str, Any]]) -> None:
    by_key = {(r["model"], r["n"], r["mode"]): r for r in results}
    header = f"{'model':<5} {'N':>3}  {'mode':<9} {'samples/s':>11} {'x serial':>8} {'of fused':>8} " \
             f"{'peak MB':>9} {'wall s':>7}  notes"
    print(header)
    print("-" * len(header))
    for r in results:
        serial = by_key.get((r["model"], r["n"], "serial"))
        fused = by_key.get((r["model"], r["n"], "fused"))
        speedup = r["samples_per_s"] / serial["samples_per_s"] if serial and serial["samples_per_s"] else None
        eff = r["samples_per_s"] / fused["samples_per_s"] if fused and fused["samples_per_s"] else None
        notes = []
        if r["mode"] == "lanes":
            notes.append(f"lanes_opened={r['lanes_opened']} per-lane={r['trials_per_lane']} switches={r['switches']}")
            if r.get("switch_ms_p50") is not None:
                notes.append(f"switch p50={r['switch_ms_p50']:.3f}ms")
            if r["waited"]:
                notes.append(f"waited={r['waited']}")
            if r["errors"]:
                notes.append(f"ERRORS={len(r['errors'])}")
        if r["mode"] == "processes":
            notes.append(f"threads/proc={r['threads_per_process']}")
        print(f"{r['model']:<5} {r['n']:>3}  {r['mode']:<9} {r['samples_per_s']:>11,.0f} "
              f"{'' if speedup is None else f'{speedup:.2f}x':>8} {'' if eff is None else f'{eff:.0%}':>8} "
              f"{r['peak_mem_mb']:>9,.0f} {r['wall_s']:>7.2f}  {' '.join(notes)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--quick", action="store_true", help=f"N in {NS_QUICK}, {STEPS_QUICK} steps per trial")
    parser.add_argument("--max-lanes", type=int, default=None,
                        help=f"lanes of the lanes mode (default: cores on cpu, {DEFAULT_CUDA_LANES} on cuda)")
    parser.add_argument("--threads", type=int, default=CPU_THREADS,
                        help="CPU: torch threads of serial and fused, split among the processes (default 1)")
    parser.add_argument("--ns", default=None, help=f"comma-separated N values (default: {','.join(map(str, NS))})")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=None, help="training steps per trial")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of every (model, N, mode); the one with the median samples/s is reported")
    args = parser.parse_args(argv)
    for name in ("max_lanes", "threads", "steps", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1, got {value}")

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("error: --device cuda requested but torch.cuda is not available "
                  f"(torch {torch.__version__}); use --device cpu", file=sys.stderr)
            return EXIT_USAGE
        device = "cuda:0"
        torch.cuda.set_device(0)
    else:
        device = "cpu"
        torch.set_num_threads(args.threads)
    ns = tuple(int(v) for v in args.ns.split(",")) if args.ns else (NS_QUICK if args.quick else NS)
    kinds = [k for k in args.models.split(",") if k]
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            parser.error(f"--modes: unknown mode {m!r} (known: {', '.join(MODES)})")
    for k in kinds:
        if k not in MODELS:
            parser.error(f"--models: unknown model {k!r} (known: {', '.join(MODELS)})")
    steps = args.steps or (STEPS_QUICK if args.quick else STEPS)
    cores = os.cpu_count() or 1
    max_lanes = args.max_lanes or (DEFAULT_CUDA_LANES if device != "cpu" else cores)
    t_all = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_all:6.1f}s] {msg}", file=sys.stderr, flush=True)

    load_before = os.getloadavg()
    # the trial estimates of the lanes mode, measured first: the first iteration of a model in a process is
    # the coldest, the one whose RSS increase is closest to its true ephemeral memory on CPU
    estimates = {kind: measure_trial_estimate(kind, device) for kind in kinds}

    # 1. switch latency (always on a virtual CPU device)
    switch = measure_switch_latency(SWITCH_ITERS_QUICK if args.quick else SWITCH_ITERS)
    log(f"switch latency: p50 {switch['p50']:.3f} ms, p99 {switch['p99']:.3f} ms over {switch['count']} switches")

    # warm-up: first-call costs of every kernel are not part of any timing
    for kind in kinds:
        train_trial(kind, 0, WARMUP_STEPS, device)
        if "fused" in modes:
            run_fused(kind, 2, WARMUP_STEPS, device)
    baseline_mb = current_rss_bytes() / MIB if device == "cpu" else 0.0

    # 2. packing
    measured: dict[tuple[str, int, str], dict[str, Any]] = {}
    pool = None
    startup_s = None
    if "processes" in modes:
        log(f"starting {max(ns)} worker processes")
        pool = ProcessPool(max(ns), kinds, device, phases=len(ns) * len(kinds) * args.repeats)
        startup_s = round(pool.startup_s, 3)
        log(f"worker processes ready after {startup_s:.1f} s (untimed)")
    try:
        for n in ns:
            for kind in kinds:
                for mode in modes:
                    log(f"N={n}: {kind} {mode}")
                    runs = []
                    for _ in range(args.repeats):
                        if mode == "serial":
                            runs.append(run_serial(kind, n, steps, device))
                        elif mode == "lanes":
                            runs.append(run_lanes(kind, n, steps, device, max_lanes, estimates[kind]))
                        elif mode == "processes":
                            threads = max(1, args.threads // n) if device == "cpu" else 1
                            runs.append(pool.run(kind, n, steps, threads))  # type: ignore[union-attr]
                        else:
                            runs.append(run_fused(kind, n, steps, device))
                    best = measured[(kind, n, mode)] = median_run(runs)
                    # each figure as it is measured, so a run cut short still shows what it got
                    log(f"N={n}: {kind} {mode}: {best['samples'] / best['wall_s']:,.0f} samples/s")
    finally:
        if pool is not None:
            pool.close()
    results = [row(mode, n, kind, steps, measured[(kind, n, mode)])
               for kind in kinds for n in ns for mode in modes if (kind, n, mode) in measured]

    load_after = os.getloadavg()
    threads_note = f"{args.threads} torch thread(s) for serial/fused, " if device == "cpu" else ""
    print(f"device {device} ({cores} cores, torch {torch.__version__}, {threads_note}{steps} steps per trial, "
          f"report every {REPORT_EVERY} steps, lanes: max_lanes={max_lanes}); 1-min load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print("initial trial estimates of the lanes mode (P, T): " + ", ".join(f"{k}=({p / MIB:.2f} MiB, {t / MIB:.2f} MiB)"
                                                                   for k, (p, t) in estimates.items())
          + ("; the host then profiles each trial itself" if device == "cpu" else ""))
    if device == "cpu":
        print(f"peak MB is the peak RSS (absolute) of the process(es); this process idles at {baseline_mb:.0f} MB")
    if startup_s is not None:
        print(f"processes mode: {max(ns)} worker processes started and warmed up in {startup_s:.1f} s (not timed)")
    print(f"switch latency (1 lane, {SWITCH_TRIALS} trials, virtual CPU device): p50 {switch['p50']:.3f} ms, "
          f"p99 {switch['p99']:.3f} ms, max {switch['max']:.3f} ms over {switch['count']} switches")
    print()
    print_table(results)
    errors = [e for r in results for e in r.get("errors", [])]
    if errors:
        print(f"\n{len(errors)} lane trial(s) failed; the first: {errors[0]}")
    log("done")
    if args.json:
        print(json.dumps({
            "switch_latency_ms_p50": round(switch["p50"], 4),
            "switch_latency_ms_p99": round(switch["p99"], 4),
            "switches": switch["count"],
            "device": device,
            "cores": cores,
            "steps": steps,
            "report_every": REPORT_EVERY,
            "repeats": args.repeats,
            "max_lanes": max_lanes,
            "threads": args.threads if device == "cpu" else None,
            "load_avg_1min": [round(load_before[0], 2), round(load_after[0], 2)],
            "processes_startup_s": startup_s,
            "trial_estimates": {k: list(v) for k, v in estimates.items()},
            "results": results,
        }))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
