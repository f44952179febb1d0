"""benchmarks/long_sweep.py runs end to end (a short sweep) and prints the JSON its readers rely on; bad arguments
are usage errors."""

from __future__ import annotations

import json
import subprocess

import pytest
from _bench import run_benchmark

EXIT_USAGE = 2  # argparse's
TRIALS = 12


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("long_sweep.py", *args)


def test_a_short_sweep_runs_every_trial_under_every_tool(ray_cluster):
    # --address: the script joins the suite's Ray (2 CPUs, as the one it starts): a Ray start and shutdown of its
    # own cost about 5 CPU-s of the suite's two cores, and what the JSON shows of the three tools is the same.
    proc = _run("--trials", str(TRIALS), "--step-s", "0.001", "--json-only",
                "--address", ray_cluster.get_runtime_context().gcs_address)
    assert proc.returncode == 0, (f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
                                  f"stderr:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["reports"] == 9 and out["step_s"] == 0.001
    assert [(r["tool"], r["trials"], r["trials_run"]) for r in out["runs"]] == [
        ("fluidsalus", TRIALS, TRIALS), ("optuna", TRIALS, TRIALS), ("fluidsalus_optuna", TRIALS, TRIALS)]
    for run in out["runs"]:
        assert run["wall_s"] > 0 and run["ms_per_trial"] == round(1000 * run["wall_s"] / TRIALS, 2)
        assert 0 < run["best"] <= 1  # x * 9 / 9 with x in [0, 1]
    assert out["runs"][0]["driver_cpu_s"] > 0 and out["runs"][2]["driver_cpu_s"] > 0
    assert "driver_cpu_s" not in out["runs"][1]  # Optuna's own run has no driver apart from its threads


@pytest.mark.parametrize("args, message", [
    (("--trials", "ten"), "comma-separated integers"),
    (("--trials", "0"), ">= 1"),
    (("--tools", "ray"), "unknown ['ray']"),
    (("--step-s", "-1"), "--step-s must be >= 0"),
])
def test_bad_arguments_are_usage_errors(args, message):
    proc = _run(*args)
    assert proc.returncode == EXIT_USAGE and message in proc.stderr, proc.stderr
