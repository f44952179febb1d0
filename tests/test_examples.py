"""The README's first command runs examples/quickstart.py: it must train for real and print the best config."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Chance level on digits is 0.1; a few epochs of a working MLP get far above it.
ABOVE_CHANCE = 0.5


def _env() -> dict[str, str]:
    """This environment, with the checkout first on the path (and whatever PYTHONPATH already held)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def test_quickstart_smoke_test_prints_best_config_and_accuracy(tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "quickstart.py"), "--smoke-test",
         "--storage-path", str(tmp_path)],
        capture_output=True, text=True, env=_env(), timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy = re.search(r"accuracy\D*([01]\.\d+)", out.stdout)
    assert accuracy and float(accuracy.group(1)) > ABOVE_CHANCE, out.stdout
    assert "config" in out.stdout.lower()
    experiments = [d for d in os.listdir(tmp_path) if os.path.isdir(tmp_path / d)]
    assert len(experiments) == 1 and os.path.exists(tmp_path / experiments[0] / "experiment.db")


def test_quickstart_refuses_a_count_below_one_and_takes_the_storage_path_of_the_environment(tmp_path):
    """--epochs 0 ran a sweep of no iterations and ended with a RuntimeError's traceback; without --storage-path
    it wrote to ./fluidsalus_results whatever FLUIDSALUS_STORAGE_PATH said, so `fluidsalus ls` did not find it."""
    for option in ("--epochs", "--num-samples"):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py"), option, "0"],
                             capture_output=True, text=True, env=_env(), timeout=120)
        assert out.returncode == 2 and f"{option} must be >= 1 (got 0)" in out.stderr, out.stderr[-2000:]
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py"), "--smoke-test",
                          "--name", "here"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env={**_env(), "FLUIDSALUS_STORAGE_PATH": str(tmp_path / "results")})
    assert out.returncode == 0, out.stderr[-3000:]
    assert os.path.isdir(tmp_path / "results" / "here") and not os.path.exists(tmp_path / "fluidsalus_results")


def test_quickstart_refuses_cuda_where_torch_sees_no_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "quickstart.py"), "--device", "cuda"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert out.returncode == 2 and "--device cuda: torch sees no CUDA GPU" in out.stderr, out.stderr[-2000:]
