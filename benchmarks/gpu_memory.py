"""Device memory that torch's allocator never sees, and torch's cuBLAS workspaces, on one GPU (needs CUDA).

    python benchmarks/gpu_memory.py                    # the tables, then one JSON line
    python benchmarks/gpu_memory.py --json-only        # only the JSON line

Two measurements behind the device reserve (``fluidsalus.gpu.nvml.context_reserve_bytes``) and the trial streams of
the lane runtime (``fluidsalus.gpu.host.StreamsByHandle``); docs/benchmarks.md has an H200's and an H100's figures.

**1. Outside torch's allocator.** NVML's used memory less ``torch.cuda.memory_reserved()``: the CUDA context, the
kernels loaded into it, and what each thread's cuBLAS handle takes. Read after the context exists, after the main
thread's GEMMs (fp32, bf16, fp16, forward and backward) and a cuDNN convolution, then with N threads alive at once
that ran GEMMs, each on a stream of its own (N in ``--threads``), and with :data:`SHARED_STREAM_THREADS` threads on
one shared stream and the same number one after another on new streams (each thread usually gets the handle the one
before it left; torch releases it when the thread's locals are destroyed): the two tell whether the cost per thread
belongs to its handle or to its stream. Last, :data:`SHARED_STREAM_THREADS` threads alive at once run only a
convolution (cuDNN) on that shared stream: what each thread's cuDNN handle adds.

**2. cuBLAS workspaces.** torch keeps a workspace per (cuBLAS handle, stream) that ran a GEMM, and a finished
thread's handle goes to the next thread. ``--rounds`` rounds of :data:`ROUND_THREADS` threads run GEMMs, first each
on the next stream of torch's pool (as lanes that each open a stream would), then each on its handle's stream
(``StreamsByHandle``, what the lane runtime does in caching mode); ``torch.cuda.memory_allocated()`` after each
round shows whether the workspaces keep growing.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

#: Threads alive at once in part 1 (each with its own handle and stream).
DEFAULT_THREADS = (1, 8, 16, 32)
#: Threads of part 1's handle-or-stream check.
SHARED_STREAM_THREADS = 8
#: Threads per round in part 2.
ROUND_THREADS = 8
#: Rounds of part 2.
DEFAULT_ROUNDS = 12
#: Width of the square GEMMs every thread runs (a Linear layer's forward and backward pass).
GEMM_WIDTH = 256
MIB = 1 << 20


def _gemms(torch: Any, dtype: Any = None, width: int = GEMM_WIDTH, bias: bool = True) -> None:
    dtype = dtype or torch.float32
    layer = torch.nn.Linear(width, width, bias=bias, device="cuda", dtype=dtype)
    x = torch.randn(64, width, device="cuda", dtype=dtype, requires_grad=True)
    layer(x).sum().backward()
    torch.cuda.synchronize()


def _in_threads(bodies: list[Callable[[], None]], together: bool) -> None:
    """Run each body in a thread of its own: all alive at once (``together``) or one after another."""
    if not together:
        for body in bodies:
            t = threading.Thread(target=body)
            t.start()
            t.join()
        return
    done = threading.Barrier(len(bodies) + 1)
    release = threading.Event()

    def hold(body: Callable[[], None]) -> None:
        body()
        done.wait()
        release.wait()  # stay alive (so keep its handle) until every thread has run

    threads = [threading.Thread(target=hold, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    done.wait()
    release.set()
    for t in threads:
        t.join()


def measure(threads: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Run both parts and return their readings (MiB)."""
    import warnings

    import pynvml
    import torch

    from fluidsalus.gpu.host import CUBLAS_NO_CONTEXT_WARNING, StreamsByHandle

    warnings.filterwarnings("ignore", message=CUBLAS_NO_CONTEXT_WARNING)  # a new thread's first handle

    pynvml.nvmlInit()
    nvml_handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    used_before = pynvml.nvmlDeviceGetMemoryInfo(nvml_handle).used

    def outside() -> float:
        torch.cuda.synchronize()
        used = pynvml.nvmlDeviceGetMemoryInfo(nvml_handle).used - used_before
        return (used - torch.cuda.memory_reserved()) / MIB

    def on(stream: Any) -> Callable[[], None]:
        def body() -> None:
            with torch.cuda.stream(stream):
                _gemms(torch)
        return body

    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "outside_mib": {}}
    torch.ones(1, device="cuda")
    out["outside_mib"]["context"] = outside()
    _gemms(torch)
    out["outside_mib"]["main thread GEMMs"] = outside()
    _gemms(torch, torch.bfloat16)
    _gemms(torch, torch.float16, 4 * GEMM_WIDTH)
    _gemms(torch, torch.float32, 16 * GEMM_WIDTH, bias=False)
    torch.nn.functional.conv2d(torch.randn(8, 3, 32, 32, device="cuda"), torch.randn(16, 3, 3, 3, device="cuda"))
    out["outside_mib"]["more GEMM kinds, a convolution"] = outside()
    before = outside()
    shared = torch.cuda.Stream()
    _in_threads([on(shared) for _ in range(SHARED_STREAM_THREADS)], together=True)
    out["per_thread_on_one_stream_mib"] = (outside() - before) / SHARED_STREAM_THREADS
    before = outside()
    _in_threads([on(torch.cuda.Stream()) for _ in range(SHARED_STREAM_THREADS)], together=False)
    out["per_new_stream_threads_in_turn_mib"] = (outside() - before) / SHARED_STREAM_THREADS

    def convolve() -> None:  # cuDNN only, on the shared stream: what a thread's cuDNN handle takes
        with torch.cuda.stream(shared):
            weight = torch.randn(16, 3, 3, 3, device="cuda", requires_grad=True)
            torch.nn.functional.conv2d(torch.randn(8, 3, 32, 32, device="cuda"), weight).sum().backward()
            torch.cuda.synchronize()

    before = outside()
    _in_threads([convolve for _ in range(SHARED_STREAM_THREADS)], together=True)
    out["per_thread_cudnn_mib"] = (outside() - before) / SHARED_STREAM_THREADS
    for n in threads:
        _in_threads([on(torch.cuda.Stream()) for _ in range(n)], together=True)
        out["outside_mib"][f"{n} threads alive"] = outside()

    torch._C._cuda_clearCublasWorkspaces()  # nothing else runs here: part 2 starts from no workspace
    growth: dict[str, list[float]] = {"new pool stream per thread": [], "stream per handle": []}
    for _ in range(rounds):
        _in_threads([on(torch.cuda.Stream()) for _ in range(ROUND_THREADS)], together=True)
        growth["new pool stream per thread"].append(torch.cuda.memory_allocated() / MIB)
    torch._C._cuda_clearCublasWorkspaces()
    streams = StreamsByHandle(torch.cuda.Stream)

    def by_handle() -> None:
        on(streams.stream_for(int(torch.cuda.current_blas_handle())))()

    for _ in range(rounds):
        _in_threads([by_handle for _ in range(ROUND_THREADS)], together=True)
        growth["stream per handle"].append(torch.cuda.memory_allocated() / MIB)
    out["allocated_mib_after_each_round"] = growth
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default=",".join(map(str, DEFAULT_THREADS)),
                        help="comma-separated thread counts of part 1 (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds of part 2 (default %(default)s)")
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    try:
        threads = tuple(int(t) for t in args.threads.split(","))
    except ValueError:
        parser.error(f"--threads: expected whole numbers separated by commas, got {args.threads!r}")
    if any(t < 1 for t in threads) or args.rounds < 1:
        parser.error("--threads and --rounds must be at least 1")
    import torch

    if not torch.cuda.is_available():
        print("gpu_memory.py needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    out = measure(threads, args.rounds)
    if not args.json_only:
        print(f"{out['device']}, torch {out['torch']}")
        print("device memory outside torch's allocator (MiB):")
        for stage, mib in out["outside_mib"].items():
            print(f"  {stage:34s} {mib:9.1f}")
        print(f"  per thread on one shared stream    {out['per_thread_on_one_stream_mib']:9.1f}")
        print(f"  per new stream, threads in turn    {out['per_new_stream_threads_in_turn_mib']:9.1f}")
        print(f"  per thread running a convolution   {out['per_thread_cudnn_mib']:9.1f}")
        print(f"torch.cuda.memory_allocated() after each round of {ROUND_THREADS} threads (MiB):")
        for way, values in out["allocated_mib_after_each_round"].items():
            print(f"  {way:28s} " + " ".join(f"{v:.0f}" for v in values))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
