"""benchmarks/compare.py refuses a ``--device`` it cannot use, with a usage error that says why."""

from __future__ import annotations

import subprocess

import pytest
from _bench import run_benchmark

EXIT_USAGE = 2  # argparse's


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("compare.py", *args)


def test_the_trivial_sweep_has_no_device():
    proc = _run("--sweep", "trivial", "--device", "cuda")
    assert proc.returncode == EXIT_USAGE
    assert "--device cuda: only the digits sweep trains on a device" in proc.stderr


def test_cuda_without_a_gpu_is_a_usage_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = _run("--sweep", "digits", "--device", "cuda", "--tools", "optuna")
    assert proc.returncode == EXIT_USAGE
    assert "sees no CUDA GPU here" in proc.stderr and "Traceback" not in proc.stderr
