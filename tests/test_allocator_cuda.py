"""The lane allocator as PyTorch's CUDA allocator (GPU only; skipped without CUDA).

The pluggable allocator must be installed before a process's first CUDA allocation, so each check runs in a
fresh Python subprocess that prints its observations as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20

SCRIPT = textwrap.dedent(
    """
    import json
    import threading

    import torch

    from fluidsalus.gpu import allocator as fa

    MiB = 1 << 20
    OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    dev = fa.install_cuda_allocator()
    assert fa.install_cuda_allocator() is not None  # idempotent
    lane = dev.create_lane(64 * MiB, device=0)
    dev.assign(1, lane)
    dev.assign(2, lane)
    dev.set_tag_cap(1, 8 * MiB)
    stats = dev.lane_stats(lane)
    base, capacity = stats.base, stats.capacity
    out = {"base": base, "capacity": capacity}
    keep = []

    def alloc(tag, mib, key):
        fa.set_thread_tag(tag)
        try:
            t = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            out[key] = {"ok": True, "ptr": t.data_ptr(), "sum": int(t.sum().item()),
                        "live": dev.tag_stats(tag)[0]}
            keep.append(t)
        except OOM as e:
            out[key] = {"ok": False, "oom": True, "msg": str(e)}
        except Exception as e:  # noqa: BLE001
            out[key] = {"ok": False, "oom": False, "type": type(e).__name__, "msg": str(e)}

    def run(*args):
        th = threading.Thread(target=alloc, args=args)
        th.start()
        th.join()

    untagged_before = dev.tag_stats(fa.NO_TAG)[0]
    run(1, 4, "t1_small")         # tag 1: 4 MiB, under its 8 MiB cap
    run(1, 16, "t1_over_cap")     # tag 1: would pass its cap -> torch's OOM, in that thread only
    run(2, 16, "t2_same_lane")    # tag 2, same lane: unaffected
    run(2, 64, "t2_over_lane")    # tag 2: past the lane's capacity -> OOM
    out["t1"] = dev.tag_info(1).__dict__
    out["t2"] = dev.tag_info(2).__dict__
    out["untagged_delta"] = dev.tag_stats(fa.NO_TAG)[0] - untagged_before

    # freeing a tensor gives its bytes back to the tag at once
    keep.clear()
    torch.cuda.synchronize()
    out["after_free"] = [dev.tag_stats(1)[0], dev.tag_stats(2)[0]]

    # backward runs on PyTorch's device threads (no tag) but on the forward's stream: the stream binding
    # keeps its allocations on the trial's account
    stream = torch.cuda.Stream()
    dev.bind_stream(stream.cuda_stream, lane)
    dev.set_lane_tag(lane, 2)

    def train():
        fa.set_thread_tag(2)
        with torch.cuda.stream(stream):
            model = torch.nn.Linear(256, 256).cuda()
            x = torch.randn(512, 256, device="cuda")
            model(x).square().sum().backward()
            stream.synchronize()
            keep.append(model)

    untagged_before = dev.tag_stats(fa.NO_TAG)[0]
    dev.reset_peak(2)
    th = threading.Thread(target=train)
    th.start()
    th.join()
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in keep[-1].parameters())
    out["backward"] = {"untagged_delta": dev.tag_stats(fa.NO_TAG)[0] - untagged_before,
                       "tag2_live": dev.tag_stats(2)[0], "grad_bytes": grad_bytes}
    print("RESULT " + json.dumps(out))
    """
)


def run_script() -> dict:
    import fluidsalus

    # the child imports the same fluidsalus as this process (a checkout with an in-place build, or an install)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(fluidsalus.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.fixture(scope="module")
def result() -> dict:
    return run_script()


def in_lane(r: dict, ptr: int) -> bool:
    return r["base"] <= ptr < r["base"] + r["capacity"]


def test_tensor_allocation_is_tagged_and_counted(result):
    small = result["t1_small"]
    assert small["ok"], small
    assert small["sum"] == 4 * MiB  # the memory works
    assert in_lane(result, small["ptr"])
    # the tensor, plus at most small buffers PyTorch keeps (none expected for empty/fill_/sum)
    assert 4 * MiB <= small["live"] < 5 * MiB
    assert result["untagged_delta"] == 0


def test_tag_cap_raises_torch_oom_for_that_tag_only(result):
    over = result["t1_over_cap"]
    assert not over["ok"] and over["oom"], over
    assert "tag 1" in over["msg"] and "cap" in over["msg"]
    same_lane = result["t2_same_lane"]
    assert same_lane["ok"] and in_lane(result, same_lane["ptr"]), same_lane
    assert result["t1"]["failures"] == 1 and 4 * MiB <= result["t1"]["live"] < 5 * MiB
    assert result["t1"]["peak"] <= 8 * MiB


def test_lane_cap_raises_torch_oom(result):
    over = result["t2_over_lane"]
    assert not over["ok"] and over["oom"], over
    assert "lane full" in over["msg"]
    assert result["after_free"] == [0, 0]


def test_backward_pass_is_charged_to_the_lanes_tag(result):
    backward = result["backward"]
    assert backward["untagged_delta"] == 0, backward
    assert backward["tag2_live"] >= backward["grad_bytes"] > 0
