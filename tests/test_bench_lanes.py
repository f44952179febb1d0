"""benchmarks/lanes.py runs end to end on CPU (``--quick``) and prints the JSON its readers rely on."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess

import pytest
from _bench import REPO_ROOT, run_benchmark

#: N values and steps of the test's run: ``--quick`` narrowed further, since each N of the ``processes`` mode starts
#: N Python processes that import torch (the whole ``--quick`` run took 22 s of the suite's 10 minutes).
TEST_NS = {2}
TEST_STEPS = 10
MODES = {"serial", "lanes", "processes", "fused"}
MODELS = {"mlp", "cnn"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("lanes.py", *args)


def test_quick_cpu_run_prints_the_json_summary_last():
    proc = _run("--device", "cpu", "--json", "--quick", "--ns", ",".join(map(str, sorted(TEST_NS))),
                "--steps", str(TEST_STEPS))
    assert proc.returncode == 0, (f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
                                  f"stderr:\n{proc.stderr[-3000:]}")
    last = proc.stdout.strip().splitlines()[-1]
    out = json.loads(last)

    p50 = out["switch_latency_ms_p50"]
    assert isinstance(p50, (int, float)) and math.isfinite(p50) and p50 > 0

    results = out["results"]
    assert isinstance(results, list) and results
    for r in results:
        assert {"mode", "n", "model", "samples_per_s", "peak_mem_mb"} <= set(r), r
        assert r["mode"] in MODES and r["model"] in MODELS
        assert r["samples_per_s"] > 0, r
        assert r["peak_mem_mb"] > 0, r
    seen = {(r["model"], r["n"], r["mode"]) for r in results}
    assert seen == {(model, n, mode) for model in MODELS for n in TEST_NS for mode in MODES}
    assert all(not r["errors"] for r in results if r["mode"] == "lanes")


def test_cuda_without_a_gpu_is_a_clear_usage_error(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    # (in this process: the check comes before any work, and a subprocess spent seconds importing torch again)
    spec = importlib.util.spec_from_file_location("bench_lanes", os.path.join(REPO_ROOT, "benchmarks", "lanes.py"))
    lanes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lanes)
    assert lanes.main(["--device", "cuda", "--json"]) == 2
    err = capsys.readouterr().err
    assert "cuda" in err and "not available" in err
