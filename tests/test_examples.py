"""The README's first command runs examples/quickstart.py: it must train for real and print the best config."""

from __future__ import annotations

import importlib
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


def test_quickstart_smoke_test_prints_best_config_and_accuracy_under_the_environments_storage_path(tmp_path,
                                                                                                    ray_cluster):
    """Without --storage-path it wrote to ./fluidsalus_results whatever FLUIDSALUS_STORAGE_PATH said, so
    `fluidsalus ls` did not find it (one sweep checks both: each costs 20 s on 2 cores)."""
    # The script joins the suite's Ray through RAY_ADDRESS, as it joins a cluster of `ray start` (fluidsalus connects
    # where the script has no ray.init): a Ray start and shutdown of its own cost seconds of the suite's two cores,
    # and the quickstart's sweep, store and printout are the same. fluidsalus starting Ray in a driver of its own is
    # shown by test_searchers_pbt.py::test_an_exploit_shows_rays_lines_on_the_console_of_a_run_that_started_ray.
    # --device cpu: the suite's Ray declares no GPU (conftest), so its actors see none; where torch sees none, as on
    # CI, it is what the default (auto) picks anyway, and the usage checks of --device are the tests below.
    env = {**_env(), "FLUIDSALUS_STORAGE_PATH": str(tmp_path / "results"),
           "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py"), "--smoke-test",
                          "--name", "here", "--device", "cpu"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy = re.search(r"accuracy\D*([01]\.\d+)", out.stdout)
    assert accuracy and float(accuracy.group(1)) > ABOVE_CHANCE, out.stdout
    assert "config" in out.stdout.lower()
    assert os.path.exists(tmp_path / "results" / "here" / "experiment.db")
    assert not os.path.exists(tmp_path / "fluidsalus_results")


def _quickstart_usage_error(monkeypatch, capsys, *args: str) -> str:
    """Parse ``args`` as quickstart.py's command line in this process (its usage checks come before any sweep, and
    a subprocess would spend seconds importing torch and fluidsalus again); return the usage error it prints."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples"))
    monkeypatch.setattr(sys, "argv", ["quickstart.py", *args])
    quickstart = importlib.import_module("quickstart")
    with pytest.raises(SystemExit) as exit_info:
        quickstart.parse_args()
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_quickstart_refuses_a_count_below_one(monkeypatch, capsys):
    """--epochs 0 ran a sweep of no iterations and ended with a RuntimeError's traceback."""
    for option in ("--epochs", "--num-samples"):
        assert f"{option} must be >= 1 (got 0)" in _quickstart_usage_error(monkeypatch, capsys, option, "0")


def test_quickstart_refuses_cuda_where_torch_sees_no_gpu(monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    assert "--device cuda: torch sees no CUDA GPU" in _quickstart_usage_error(monkeypatch, capsys, "--device", "cuda")
