"""benchmarks/compare.py refuses a ``--device`` it cannot use, with a usage error that says why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "benchmarks", "compare.py")
TIMEOUT_S = 120
EXIT_USAGE = 2  # argparse's


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=REPO_ROOT, env=env)


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
