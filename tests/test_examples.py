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


def test_quickstart_refuses_cuda_where_torch_sees_no_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "quickstart.py"), "--device", "cuda"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert out.returncode == 2 and "--device cuda: torch sees no CUDA GPU" in out.stderr, out.stderr[-2000:]
