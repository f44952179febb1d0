"""benchmarks/gpu_memory.py: its refusals everywhere; on a GPU, a quick real run (its figures: docs/benchmarks.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_memory  # noqa: E402


@pytest.mark.parametrize(("argv", "message"), [
    (["--threads", "1,x"], "--threads: expected whole numbers separated by commas, got '1,x'"),
    (["--threads", "0"], "--threads and --rounds must be at least 1"),
    (["--rounds", "0"], "--threads and --rounds must be at least 1"),
])
def test_bad_arguments_are_refused_naming_them(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_memory.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_a_gpu_it_says_it_needs_one(capsys):
    assert gpu_memory.main([]) == 2
    assert "gpu_memory.py needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_workspaces_stop_growing_with_a_stream_per_handle(capsys):
    assert gpu_memory.main(["--threads", "1,4", "--rounds", "4", "--json-only"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["outside_mib"]["4 threads alive"] >= out["outside_mib"]["context"] > 0
    by_handle = out["allocated_mib_after_each_round"]["stream per handle"]
    assert by_handle[-1] == pytest.approx(by_handle[0], abs=1.0)  # the same handles meet the same streams
