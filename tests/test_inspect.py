"""``fluidsalus inspect`` and ``fluidsalus.inspect()``: a real sweep (one, shared), the plot, JSON, bad input."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import math
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

import fluidsalus
from fluidsalus import goodput as gp
from fluidsalus.cli import EXIT_USAGE, main
from fluidsalus.inspect import (
    PLOT_DPI,
    PLOT_WIDTH_IN,
    NoResultsError,
    PlannerSummary,
    Report,
    WindowError,
    _row_label,
    inspect,
)
from fluidsalus.store import DB_FILENAME, SCHEMA_VERSION, ExperimentStore, open_untouched

#: Iterations each trial of the shared sweep reports, and the one (0-based) where a failing trial fails once.
ITERS, FAIL_AT = 6, 3
#: Trials of the shared sweep: a grid over how a trial fails, twice.
FAILS, SAMPLES = ["none", "error", "oom", "none"], 2
#: Keys every device entry (and the totals) of ``--json`` must have.
REQUIRED_KEYS = {"device", "busy_fraction", "throughput", "goodput", "lanes_peak", "switches",
                 "switch_latency_ms_p50"}


def _trainable(config):
    """Checkpoints every second iteration; a failing trial raises once at FAIL_AT, then resumes."""
    flag = os.path.join(fluidsalus.get_context().get_trial_dir(), "failed_once")
    start = 0
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is not None:
        with open(os.path.join(checkpoint.path, "it")) as f:
            start = int(f.read())
    for i in range(start, ITERS):
        time.sleep(0.01)
        if i == FAIL_AT and config["fail"] != "none" and not os.path.exists(flag):
            open(flag, "w").close()
            if config["fail"] == "oom":
                raise MemoryError("simulated out of memory")
            raise RuntimeError("simulated failure")
        saved = None
        if i % 2 == 1:
            folder = tempfile.mkdtemp()
            with open(os.path.join(folder, "it"), "w") as f:
                f.write(str(i + 1))
            saved = fluidsalus.Checkpoint.from_directory(folder)
        fluidsalus.report({"acc": config["x"] * (i + 1), "num_samples": 32}, checkpoint=saved)


@pytest.fixture(scope="module")
def sweep(ray_cluster, tmp_path_factory):
    """One real sweep through Ray, shared by every test here: 8 trials, 2 retried after an error, 2 after OOM."""
    storage = str(tmp_path_factory.mktemp("inspect") / "results")
    fluidsalus.run(_trainable, {"x": fluidsalus.uniform(0.1, 1), "fail": fluidsalus.grid_search(FAILS)},
                   num_samples=SAMPLES, metric="acc", mode="max", storage_path=storage, name="sweep",
                   max_failures=1, verbose=0, cpus_per_device=2)  # one device: the figures below are its own
    return os.path.join(storage, "sweep")


def _files(folder):
    """Name -> sha256 of every file in ``folder`` (the name alone for the WAL index ``-shm``, which every
    reader of a live store updates: it is shared memory, not data)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                out[name] = "" if name.endswith("-shm") else hashlib.sha256(f.read()).hexdigest()
    return out


def _oom_readmissions(experiment: str) -> int:
    store = open_untouched(experiment)  # (the read-only tests here check that reading makes no file)
    try:
        return len(store.events("oom_readmit"))
    finally:
        store.close()


def test_report_of_a_real_sweep(sweep):
    report = inspect(sweep)
    assert isinstance(report, Report) and report.status == "FINISHED"
    assert report.trial_counts["TERMINATED"] == len(FAILS) * SAMPLES
    t = report.total_stats
    failing = SAMPLES * 2  # "error" and "oom", twice each
    # Each failing trial redoes the one iteration reported after its last checkpoint, and loses the one it was in.
    assert t.useful_iterations == len(FAILS) * SAMPLES * ITERS
    assert t.iterations == t.useful_iterations + failing
    # An out-of-memory error with no other trial on the device is an ordinary failure, retried under max_failures
    # (whether the other trials still ran then is the machine's timing): as many OOM re-admissions as the store has
    oom = _oom_readmissions(sweep)
    assert 0 <= oom <= SAMPLES
    expected = {gp.WASTE_RETRY: (failing - oom, failing - oom), gp.WASTE_OOM: (oom, oom)}
    assert {k: (w.iterations, w.partial) for k, w in t.wasted.items()} == {k: v for k, v in expected.items() if v[0]}
    kinds = sorted(m.kind for m in report.activity.markers)
    assert kinds == sorted([gp.MARK_FAILURE] * (failing - oom) + [gp.MARK_OOM] * oom)
    [device] = report.device_stats
    assert device.device == "cpu:0" and 1 <= device.lanes_peak <= device.slots
    assert device.switches > 0 and device.switch_latency_ms_p50 > 0
    assert 0 < device.busy_fraction <= 1 and device.goodput < device.throughput
    assert device.samples == 32 * t.iterations
    assert device.reserved_peak_bytes >= device.used_peak_bytes > 0
    best = report.best
    assert best is not None and best.value == max(r.metric for r in report.trials.itertuples())
    # The same figures as DataFrames.
    assert list(report.devices["device"]) == ["cpu:0"] and report.devices.loc[0, "iterations"] == t.iterations
    assert len(report.trials) == len(FAILS) * SAMPLES and report.trials["useful"].sum() == t.useful_iterations
    assert set(report.waste["cause"]) == {gp.WASTE_RETRY} | ({gp.WASTE_OOM} if oom else set())
    assert (report.timeline["device"] == gp.TOTAL_DEVICE).any() and len(report.lanes) >= 1
    assert len(report.switches) == device.switches


def test_plot_of_a_real_sweep(sweep, tmp_path):
    image = pytest.importorskip("matplotlib.image")
    png = tmp_path / "sweep.png"
    assert main(["inspect", sweep, "--plot", str(png)]) == 0
    assert png.stat().st_size > 20_000
    pixels = image.imread(str(png))
    height, width = pixels.shape[:2]
    assert width == round(PLOT_WIDTH_IN * PLOT_DPI) and height > 500
    colours = {tuple(p) for p in (pixels[::4, ::4, :3] * 255).astype(int).reshape(-1, 3)}
    assert len(colours) > 50  # bars of many trials, markers, lines: not a blank canvas


def test_json_output(sweep, capsys):
    assert main(["inspect", sweep, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema_version"] == 1 and out["experiment"]["status"] == "FINISHED"
    assert out["experiment"]["trials"]["TERMINATED"] == len(FAILS) * SAMPLES
    assert out["devices"] and all(REQUIRED_KEYS <= set(d) for d in out["devices"])
    assert REQUIRED_KEYS <= set(out["totals"]) and out["totals"]["device"] == "total"
    assert out["totals"]["iterations"] == sum(d["iterations"] for d in out["devices"])
    assert set(out["totals"]["wasted"]) == {"retry", "oom"}
    assert out["best"]["metric"] == "acc" and out["timeline"] and out["lanes"]


def test_table_output_and_ls(sweep, capsys):
    assert main(["inspect", sweep]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("experiment sweep (FINISHED")
    header = next(line for line in lines if line.startswith("DEVICE"))
    assert header.split()[:10] == ["DEVICE", "BUSY", "SLOTS", "ITERS", "USEFUL", "WASTED", "WASTED_S", "WASTE%",
                                   "IT/S", "GOODPUT"]
    assert any(line.startswith("cpu:0") for line in lines) and any(line.startswith("total") for line in lines)
    oom = _oom_readmissions(sweep)
    assert (f"oom {oom} it + {oom} cut short" in out or not oom) and "best trial:" in out
    assert main(["ls", os.path.dirname(sweep)]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.startswith("sweep") and "FINISHED" in row and "8 (8 terminated)" in row and "acc=" in row
    assert row.rstrip().endswith("s")


def test_inspect_and_ls_read_only(sweep, capsys):
    before = _files(sweep)
    assert main(["inspect", sweep, "--json"]) == 0
    assert main(["ls", os.path.dirname(sweep)]) == 0
    capsys.readouterr()
    assert _files(sweep) == before
    assert DB_FILENAME + "-wal" not in before  # the finished run closed its store: no SQLite files were added


def test_by_name_under_the_storage_path_and_a_window(sweep, monkeypatch):
    monkeypatch.setenv("FLUIDSALUS_STORAGE_PATH", os.path.dirname(sweep))
    # (not the real ~/ray_results, where a name may be too)
    monkeypatch.setenv("RAY_STORAGE", os.path.join(os.path.dirname(sweep), "no_ray_results"))
    whole = inspect("sweep")
    half = whole.total_stats.device_seconds / 2
    first = inspect("sweep", window=(0, half))
    second = inspect("sweep", window=(half, None))
    assert first.total_stats.device_seconds == pytest.approx(half)
    assert first.total_stats.iterations + second.total_stats.iterations == whole.total_stats.iterations


# ---------------------------------------------------------------------------------------------- without Ray


def _store(tmp_path, name="exp"):
    store = ExperimentStore.create(str(tmp_path / name), name, {}, "acc", "max")
    store.add_trials([("t0", 0, {"x": 1})])
    store.add_events([(10.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
                      (10.5, "trial_start", "t0", "cpu:0", {"attempt": 0}),
                      (10.5, "lane_open", None, "cpu:0", {"lane": 0, "capacity": 100}),
                      (10.5, "lane_admit", "t0", "cpu:0", {"detail": [0, 50, 50], "attempt": 0})])
    return store


def test_a_running_experiment_is_read_without_disturbing_its_writer(tmp_path):
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    with store.transaction():  # the writer is mid-transaction: the reader sees what was committed
        store.add_results([("t0", 0, 2, 12.0, {"acc": 2, "time_this_iter_s": 1.0})])
        report = inspect(store.experiment_dir)
        assert report.status == "RUNNING" and report.total_stats.iterations == 1
        assert report.total_stats.device_seconds == pytest.approx(1.0)  # up to the last thing recorded
        report.plot(tmp_path / "running.png")  # a lane still open draws to the last activity
    store.add_results([("t0", 0, 3, 13.0, {"acc": 3, "time_this_iter_s": 1.0})])  # the writer goes on
    assert inspect(store.experiment_dir).total_stats.iterations == 3
    store.close()
    assert (tmp_path / "running.png").stat().st_size > 0


def test_the_report_counts_the_planners_decisions_and_its_measured_move_cost(tmp_path, monkeypatch):
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    report = inspect(store.experiment_dir)
    assert report.planner == PlannerSummary(0, 0, 0, {}, None, 0)
    assert ("planner: 0 moves (0 restarted), 0 preemptions, 0 withdrawals, changes held back: none; move cost: no "
            "move measured") in report.render_table()
    store.add_events([
        (11.0, "plan_move", "t0", "cpu:0", {"attempt": 0, "action": "move", "to": ["cpu:1"]}),
        (11.1, "trial_restart", "t0", "cpu:0", {"attempt": 1, "reason": "move"}),
        (11.2, "trial_restart", "t0", "cpu:1", {"attempt": 2, "reason": "retry"}),
        (11.3, "plan_preempt", "t0", "cpu:1", {"attempt": 2}),
        (11.35, "plan_withdraw", "t0", "cpu:1", {"attempt": 2, "action": "preempt", "to": []}),
        (11.36, "trial_restart", "t0", "cpu:1", {"attempt": 3, "reason": "withdrawn"}),
        (11.4, "plan_refused", "t0", None, {"reason": "no checkpoint"}),  # (as older stores wrote it)
        (11.5, "plan_refused", "t0", None, {"reason": "no checkpoint", "action": "move", "from": "cpu:1",
                                            "to": ["cpu:0"]}),
        (11.6, "plan_refused", "t0", None, {"reason": "paused", "action": "preempt", "from": "cpu:1", "to": []}),
        (11.7, "move_cost", "t0", "cpu:1", {"seconds": 0.02, "move_cost_s": 0.02, "samples": 1}),
        (11.8, "move_cost", "t0", "cpu:1", {"seconds": 0.04, "move_cost_s": 0.026, "samples": 2}),
        (11.9, "move_cost", "t0", "cpu:1", {"kind": "resize", "seconds": 0.5, "move_cost_s": 0.026, "samples": 2,
                                            "resize_cost_s": 0.5, "resize_samples": 1}),
    ])
    report = inspect(store.experiment_dir)
    held_back = [
        {"ts": 11.4, "trial_id": "t0", "action": "change", "reason": "no checkpoint", "from": None, "to": []},
        {"ts": 11.5, "trial_id": "t0", "action": "move", "reason": "no checkpoint", "from": "cpu:1", "to": ["cpu:0"]},
        {"ts": 11.6, "trial_id": "t0", "action": "preempt", "reason": "paused", "from": "cpu:1", "to": []}]
    assert report.planner == PlannerSummary(1, 1, 1, {"no checkpoint": 2, "paused": 1}, 0.026, 2, 0.5, 1, 1,
                                            held_back=held_back)
    assert report.to_dict()["planner"] == {"moves": 1, "restarts_for_moves": 1, "preemptions": 1,
                                           "refused": {"no checkpoint": 2, "paused": 1}, "move_cost_s": 0.026,
                                           "moves_measured": 2, "resize_cost_s": 0.5, "resizes_measured": 1,
                                           "withdrawals": 1, "late_devices": {}, "turns": 0, "lost_devices": {},
                                           "joined_devices": {},  # (ts_s: when, as the table says it)
                                           "held_back": [{**h, "ts_s": pytest.approx(h["ts"] - 10.0)}
                                                         for h in held_back]}
    assert ("planner: 1 move (1 restarted), 1 preemption, 1 withdrawal, changes held back: 2 (a trial with no "
            "checkpoint to restart from), 1 (a trial paused at its budget); move cost: "
            "26.0ms measured over 2 moves; resize cost: 500.0ms measured over 1 resize") in report.render_table()
    assert "started without" not in report.render_table()
    # which change, of which trial, from and to which device, when (h104's F10: "refused: no checkpoint 1" said
    # neither what nor where, though it was why a device sat idle)
    lines = report.render_table().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("planner:"))
    assert lines[at + 1:at + 5] == [
        "changes held back (3):",
        "  1.40s: change of t0: a trial with no checkpoint to restart from",
        "  1.50s: move of t0 from cpu:1 to cpu:0: a trial with no checkpoint to restart from",
        "  1.60s: preempt of t0 from cpu:1: a trial paused at its budget"]
    monkeypatch.setattr(sys.modules["fluidsalus.inspect"], "HELD_BACK_SHOWN", 2)
    lines = inspect(store.experiment_dir).render_table().splitlines()
    assert lines[at + 1:at + 4] == ["changes held back (first 2 of 3; --json lists them all):",
                                    "  1.40s: change of t0: a trial with no checkpoint to restart from",
                                    "  1.50s: move of t0 from cpu:1 to cpu:0: a trial with no checkpoint to restart "
                                    "from"]
    assert lines[at + 4].startswith("best trial:")
    store.close()


def test_the_report_names_the_devices_a_run_started_without_and_when_each_joined(tmp_path):
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    store.add_events([
        (10.0, "device_waiting", None, "cpu:1", {"actor": "a1"}),
        (10.0, "device_waiting", None, "cpu:2", {"actor": "a2"}),
        (13.25, "device_start", None, "cpu:1", {"kind": "cpu", "slots": 1, "joined": True}),
    ])
    report = inspect(store.experiment_dir)
    assert report.planner.late_devices == {"cpu:1": 3.25, "cpu:2": None}
    assert ("devices the run started without (their resources were taken): cpu:1 joined after 3.25s, "
            "cpu:2 never started") in report.render_table()
    store.close()


def test_the_report_names_the_devices_a_run_lost_and_those_nodes_that_joined_gave_it(tmp_path):
    """A node's death took two devices for good, and the report showed them as ordinary devices: nothing said
    that the run went on without them (a helper's two-node run)."""
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    gone = "The actor is not schedulable: The node specified via NodeAffinitySchedulingStrategy doesn't exist"
    store.add_events([
        (10.0, "device_start", None, "cpu:2", {"kind": "cpu", "slots": 1}),
        (10.0, "device_start", None, "cpu:3", {"kind": "cpu", "slots": 1}),
        (11.3, "device_died", None, "cpu:2", {"error": "The actor died because its node has died."}),
        (11.31, "device_lost", None, "cpu:2", {"error": gone + "\n(more of Ray's words)"}),
        (11.32, "device_lost", None, "cpu:3", {"error": gone}),
        (19.0, "device_moved", None, "cpu:3", {"from_node": "gone", "node_id": "back", "slots": 1}),
        (20.0, "device_start", None, "cpu:3", {"kind": "cpu", "slots": 1}),  # on a node that joined: not lost
        (21.0, "device_added", None, "cpu:4", {"node_id": "new", "slots": 1}),
        (21.0, "device_added", None, "cpu:5", {"node_id": "new", "slots": 1}),
        (30.0, "device_moved", None, "cpu:5", {"from_node": "new", "node_id": "newer", "slots": 1}),
    ])
    report = inspect(store.experiment_dir)
    assert report.planner.lost_devices == {"cpu:2": gone}
    assert report.to_dict()["planner"]["lost_devices"] == {"cpu:2": gone}
    assert (f"devices lost (their actor died or did not start, and could not be started again; the run went on "
            f"without them): cpu:2 ({gone})") in report.render_table()
    assert report.planner.joined_devices == {"cpu:3": "moved", "cpu:4": "added", "cpu:5": "added, moved"}
    assert ("devices started on nodes that joined during the run: cpu:3 (in place of one lost with its node), "
            "cpu:4 (new), cpu:5 (new, then moved on when that node left too)") in report.render_table()
    store.close()


def test_the_report_lists_each_errored_trials_error_up_to_a_limit(tmp_path):
    """Why trials failed, in the report itself (the Optuna front end's error points there): one line each, the
    error's type and first line (the exception's, below a traceback), up to ``ERRORS_SHOWN``; the JSON has every
    one."""
    from fluidsalus.inspect import ERRORS_SHOWN

    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    assert "errored trials" not in inspect(store.experiment_dir).render_table()
    failed = [f"f{i}" for i in range(ERRORS_SHOWN + 2)]
    store.add_trials([(tid, i + 1, {"x": i}) for i, tid in enumerate(failed)])
    for i, tid in enumerate(failed):
        store.update_trial(tid, status="ERROR", error=f"Traceback (most recent call last):\n  ...\nValueError: bad {i}")
    report = inspect(store.experiment_dir)
    table = report.render_table().splitlines()
    start = table.index(f"errored trials ({len(failed)}):")
    assert table[start + 1:start + 2 + ERRORS_SHOWN] == [*(f"  f{i}: ValueError: bad {i}" for i in range(ERRORS_SHOWN)),
                                                        "  ... and 2 more (--json lists them all)"]
    errors = report.to_dict()["errors"]
    assert [e["trial_id"] for e in errors] == failed and errors[-1]["error"] == f"ValueError: bad {len(failed) - 1}"
    assert errors[0]["text"].startswith("Traceback") and errors[0]["text"].endswith("ValueError: bad 0")
    # and why the experiment itself ended in error, which the store kept and neither showed (a helper's test)
    assert "ended by:" not in report.render_table() and report.to_dict()["experiment"]["error"] is None
    store.set_experiment(status="ERROR", error="RuntimeError: a callback broke\nTraceback ...")
    report = inspect(store.experiment_dir)
    assert "\nended by: RuntimeError: a callback broke\n" in report.render_table()
    assert report.to_dict()["experiment"]["error"].startswith("RuntimeError: a callback broke")
    store.close()


def test_the_report_shows_the_errors_trials_raised_as_a_stop_unwound_them(tmp_path, capsys):
    """The store recorded each error a trial raised as a stop unwound it (``error_after_stop``: no failure of the
    trial, as in Ray Tune), and ``inspect`` showed none of them, in its text or its JSON (a helper's review; h202's
    ``t3_inspect.py``). They follow the errored trials now, named as those, with the stop they came in (a restart's
    reason as the run's warning words it), and the JSON has each with its traceback."""
    from fluidsalus.store import RESTART_WORDS

    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    assert "errors after a stop" not in inspect(store.experiment_dir).render_table()
    assert inspect(store.experiment_dir).to_dict()["errors_after_stop"] == []
    store.add_trials([("t1", 1, {"x": 2}), ("t2", 2, {"x": 3})])
    store.add_events([
        (11.5, "error_after_stop", "t0", "cpu:0", {"error": "RuntimeError: cleanup failed", "traceback": "Tb 0",
                                                   "attempt": 0}),
        (12.0, "error_after_stop", "t1", "cpu:0", {"error": "OSError: disk", "traceback": "Tb 1", "moved": False,
                                                   "attempt": 0}),
        (12.5, "error_after_stop", "t2", "cpu:0", {"error": "ValueError: x\nmore", "traceback": None, "moved": True,
                                                   "restart": "turn", "attempt": 1})])
    store.close()
    assert main(["inspect", store.experiment_dir]) == 0
    out = capsys.readouterr().out
    assert ("errors after a stop (3; raised as the stop unwound the trial, they failed no trial, as in Ray Tune):\n"
            "  t0: RuntimeError: cleanup failed (at 1.50s, after the result its stop rule ended it at)\n"
            "  t1: OSError: disk (at 2.00s, as its stop (its scheduler's or searcher's, or the run's end) unwound it)\n"
            f"  t2: ValueError: x (at 2.50s, as a stop to restart it ({RESTART_WORDS['turn']}) unwound it)\n") in out
    assert main(["inspect", store.experiment_dir, "--json"]) == 0
    after = json.loads(capsys.readouterr().out)["errors_after_stop"]
    assert [(e["trial_id"], e["stop"], e["restart"], e["ts_s"], e["attempt"]) for e in after] == [
        ("t0", "stop_rule", None, 1.5, 0), ("t1", "stop", None, 2.0, 0), ("t2", "restart", "turn", 2.5, 1)]
    assert after[0]["error"] == "RuntimeError: cleanup failed" and after[0]["traceback"] == "Tb 0"
    assert after[2]["error"] == "ValueError: x" and after[2]["text"] == "ValueError: x\nmore"


def test_an_error_after_fail_fast_raises_failure_is_shown_as_that_not_as_one_a_stop_unwound(tmp_path, capsys):
    """A trial that fails after ``fail_fast="raise"``'s failure, before the run's stop reached it, is recorded as an
    ``error_after_stop`` with ``after_raise`` (and ``moved`` False). ``inspect`` listed it as raised "as its stop
    (its scheduler's or searcher's, or the run's end) unwound it", ``stop: "stop"`` in the JSON: no stop had reached
    it (a review of h220)."""
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    store.add_events([(11.5, "error_after_stop", "t0", "cpu:0", {"error": "RuntimeError: b fails", "traceback": "Tb",
                                                                "moved": False, "after_raise": True, "attempt": 0})])
    store.close()
    assert main(["inspect", store.experiment_dir]) == 0
    out = capsys.readouterr().out
    assert ("errors after a stop (1; raised as the stop unwound the trial, or after fail_fast='raise''s failure, they "
            "failed no trial, as in Ray Tune):\n  t0: RuntimeError: b fails (at 1.50s, after fail_fast='raise''s "
            "failure ended the run, before its stop reached it: as in Ray Tune, which raised that failure at once and "
            "never saw this one)\n") in out
    assert main(["inspect", store.experiment_dir, "--json"]) == 0
    assert [e["stop"] for e in json.loads(capsys.readouterr().out)["errors_after_stop"]] == ["after_raise"]


def _bad(path, capsys):
    code = main(["inspect", str(path)])
    captured = capsys.readouterr()
    assert code == EXIT_USAGE and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("fluidsalus: ")
    assert "Traceback" not in captured.err
    return captured.err


def test_a_bare_name_found_nowhere_names_where_it_was_looked_for(tmp_path, capsys, monkeypatch):
    """It said "'my_sweep' is not a fluidsalus experiment (no experiment.db found)", naming neither the working
    folder nor the storage path it had looked in (a docs audit: a wrong $FLUIDSALUS_STORAGE_PATH did not show)."""
    monkeypatch.setenv("FLUIDSALUS_STORAGE_PATH", str(tmp_path / "results"))
    monkeypatch.setenv("RAY_STORAGE", str(tmp_path / "ray_results"))
    monkeypatch.chdir(tmp_path)
    err = _bad("my_sweep", capsys)
    assert f"no such folder in {str(tmp_path)!r}" in err and f"storage paths {str(tmp_path / 'results')!r} (" in err
    assert f"; {str(tmp_path / 'ray_results')!r} (fluidsalus.tune's default" in err  # (where Tune's runs go)


def test_bad_input_gives_one_line_and_exit_2_and_changes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "is not a fluidsalus experiment" in _bad(empty, capsys)
    assert os.listdir(empty) == []

    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert "not a fluidsalus experiment store" in _bad(text, capsys)

    newer = _store(tmp_path, "newer")
    newer.add_results([("t0", 0, 1, 11.0, {"acc": 1})])
    newer.close()
    conn = sqlite3.connect(tmp_path / "newer" / DB_FILENAME)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")  # a later schema this version cannot read
    conn.execute("UPDATE store_info SET value = ? WHERE key = 'readable_from'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    before = _files(tmp_path / "newer")
    assert "newer fluidsalus" in _bad(tmp_path / "newer", capsys)
    assert _files(tmp_path / "newer") == before

    fresh = _store(tmp_path, "fresh")
    before = _files(tmp_path / "fresh")
    assert "has no results yet" in _bad(tmp_path / "fresh", capsys)
    assert _files(tmp_path / "fresh") == before
    with pytest.raises(NoResultsError):
        inspect(tmp_path / "fresh")
    fresh.close()


def test_a_run_that_ended_without_results_shows_its_errored_trials(tmp_path, capsys):
    """A run whose every trial failed before its first report is the one whose errors people want to read: it was
    refused as "no results yet; inspect it again once a trial has reported"."""
    store = _store(tmp_path, "failed")
    trace = 'Traceback (most recent call last):\n  File "train.py", line 3, in f\nRuntimeError: boom\n'
    store.update_trial("t0", status="ERROR", error="RuntimeError: boom", traceback=trace, finished_at=10.6)
    store.set_experiment(status="FINISHED", finished_at=10.7)
    store.close()
    assert main(["inspect", str(tmp_path / "failed")]) == 0
    out = capsys.readouterr().out
    assert "experiment failed (FINISHED" in out and "errored trials (1):\n  t0: RuntimeError: boom" in out
    assert "1 trial (1 error), 0 stopped by the search or a stop rule" in out
    # The JSON has the traceback too (its "text" was said to be the whole error: it is the error as recorded)
    assert json.loads(inspect(tmp_path / "failed").to_json())["errors"] == [
        {"trial_id": "t0", "error": "RuntimeError: boom", "text": "RuntimeError: boom", "traceback": trace}]


def test_the_trials_an_interrupted_run_left_are_unfinished_not_running(tmp_path, capsys):
    store = _store(tmp_path, "cut")
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1})])
    store.update_trial("t0", status="RUNNING", last_result={"acc": 1}, last_iteration=1)
    store.set_experiment(status="INTERRUPTED", finished_at=11.5)
    store.close()
    assert main(["inspect", str(tmp_path / "cut")]) == 0
    out = capsys.readouterr().out
    assert "s): 1 trial (1 unfinished), 0 stopped" in out
    # Its trials wait for a resume, as ExperimentAnalysis shows them (PENDING): the best line said "running", the
    # JSON RUNNING. The text says "unfinished", as the header and `fluidsalus ls` do (it said "pending")
    assert "at iteration 1, unfinished" in out
    report = inspect(str(tmp_path / "cut"))
    assert report.best.status == "PENDING" and [t.status for t in report.trial_rows] == ["PENDING"]
    assert json.loads(report.to_json())["best"]["status"] == "PENDING"


def test_a_plot_that_cannot_be_written_is_the_only_output(tmp_path, capsys):
    """The report was printed before the plot failed (a helper's `--plot /proc/x.png`): the one line came after a
    whole table. The plot is drawn first."""
    pytest.importorskip("matplotlib")
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1})])
    store.close()
    too_long = str(tmp_path / ("x" * 300 + ".png"))  # its folder exists; writing it fails (ENAMETOOLONG)
    assert main(["inspect", str(tmp_path / "exp"), "--plot", too_long]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("fluidsalus: inspect: cannot write") and err.count("\n") == 1


def test_bad_options_exit_2(tmp_path, capsys):
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1})])
    store.close()
    path = str(tmp_path / "exp")
    assert main(["inspect", path, "--plot", str(tmp_path / "no" / "such" / "x.png")]) == EXIT_USAGE
    assert main(["inspect", path, "--start", "3", "--end", "1"]) == EXIT_USAGE
    assert main(["inspect", path, "--bin", "0"]) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("fluidsalus: inspect:") for line in err)
    # Each was accepted: a plot that is no PNG (a traceback, or a <name>.png written beside a folder), a bin too
    # narrow to mean anything, a negative start, and a window that starts after the run (shown inverted).
    for option, message in ((["--plot", str(tmp_path / "x.txt")], "is not a file name ending in a suffix matplotlib"),
                            (["--plot", str(tmp_path)], "is not a file name ending in a suffix matplotlib"),
                            (["--bin", "0.001"], "--bin must be at least 0.05 seconds"),
                            (["--start", "-5"], "--start is seconds after the first device started: >= 0"),
                            (["--start", "100"], "the window starts at 100.00s, at or after the run's end (it lasted "
                                                 "1.00s)"),
                            # (a docs audit: accepted when an end was given, as "0.00 device-seconds")
                            (["--start", "5", "--end", "10"], "the window starts at 5.00s, at or after the run's "
                                                              "end (it lasted 1.00s)")):
        assert main(["inspect", path, *option]) == EXIT_USAGE
        captured = capsys.readouterr()
        assert captured.out == "" and message in captured.err and captured.err.count("\n") == 1
    assert not os.path.exists(str(tmp_path) + ".png")


def test_a_window_from_python_is_checked_as_the_command_lines(tmp_path):
    store = _store(tmp_path)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1})])
    store.close()
    for window, message in (((-1, 2), "the window's start is seconds after the first device started: >= 0, got -1"),
                            ((0, -2), "the window's end is seconds after the first device started: >= 0, got -2"),
                            ((5, 10), "the window starts at 5.00s, at or after the run's end"),
                            ((0.5, 0.2), "the window starts at 0.50s, at or after its end, 0.20s")):
        with pytest.raises(WindowError, match=re.escape(message)):
            inspect(str(tmp_path / "exp"), window=window)
    clipped = inspect(str(tmp_path / "exp"), window=(0.5, 10))
    assert clipped.total_stats.iterations == 1
    assert "window 0.50s .. 1.00s" in clipped.render_table()  # (it showed the end asked for, 10.00s)


def test_window_bounds_in_the_json_carry_no_float_noise_of_epoch_seconds(tmp_path):
    """``--start 3.9`` came back as ``3.9000000953674316`` (t0 + 3.9 - t0 in epoch seconds: a helper's check)."""
    t0 = 1_764_000_000.123
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("t0", 0, {"x": 1})])
    store.add_events([(t0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
                      (t0, "trial_start", "t0", "cpu:0", {"attempt": 0}),
                      (t0, "lane_open", None, "cpu:0", {"lane": 0, "capacity": 100}),
                      (t0, "lane_admit", "t0", "cpu:0", {"detail": [0, 50, 50], "attempt": 0})])
    store.add_results([("t0", 0, i, t0 + i, {"acc": i, "time_this_iter_s": 1.0}) for i in range(1, 9)])
    store.set_experiment(status="FINISHED", finished_at=t0 + 8.5)
    store.close()
    window = json.loads(inspect(str(tmp_path / "exp"), window=(3.9, 4.7)).to_json())["window"]
    assert (window["start_s"], window["end_s"]) == (3.9, 4.7)


def test_devices_on_several_nodes_show_their_node(tmp_path):
    """Neither the table nor the JSON said which node a device ran on, though its device_start records it (a
    helper's multi-node run). One node: no NODE column."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("t0", 0, {"x": 1}), ("t1", 1, {"x": 2})])
    events = []
    for device, node, trial in (("cpu:0", "10.0.0.1", "t0"), ("cpu:1", "10.0.0.2", "t1")):
        events += [(10.0, "device_start", None, device, {"kind": "cpu", "slots": 1, "node_ip": node}),
                   (10.5, "trial_start", trial, device, {"attempt": 0}),
                   (10.5, "lane_open", None, device, {"lane": 0, "capacity": 100}),
                   (10.5, "lane_admit", trial, device, {"detail": [0, 50, 50], "attempt": 0})]
    store.add_events(events)
    store.add_results([(t, 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5}) for t in ("t0", "t1")])
    store.set_experiment(status="FINISHED", finished_at=12.0)
    store.close()
    report = inspect(str(tmp_path / "exp"))
    assert [d.node for d in report.device_stats] == ["10.0.0.1", "10.0.0.2"] and report.total_stats.node is None
    table = report.render_table().splitlines()
    header = next(line for line in table if line.startswith("DEVICE"))
    assert header.split()[:2] == ["DEVICE", "NODE"]
    assert next(line for line in table if line.startswith("cpu:1")).split()[:2] == ["cpu:1", "10.0.0.2"]
    assert [d["node"] for d in json.loads(report.to_json())["devices"]] == ["10.0.0.1", "10.0.0.2"]
    one = _store(tmp_path, "one")  # one device (its device_start names no node)
    one.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    one.close()
    header = next(line for line in inspect(str(tmp_path / "one")).render_table().splitlines()
                  if line.startswith("DEVICE"))
    assert "NODE" not in header.split()


def test_a_run_that_ended_before_any_device_started_says_so(tmp_path):
    """Its window was shown from the epoch: "window -1795931592.20s .. -1795931592.20s" (a docs audit)."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.set_experiment(status="INTERRUPTED", finished_at=time.time())
    store.close()
    text = inspect(str(tmp_path / "exp")).render_table()
    assert "no device started" in text and "window" not in text.splitlines()[1]


def test_console_script_exit_code(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fluidsalus.cli", "inspect", str(tmp_path / "nope")],
                          capture_output=True, text=True)
    assert done.returncode == EXIT_USAGE and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "is not a fluidsalus experiment" in done.stderr


def test_an_interrupted_run_says_how_many_of_its_useful_iterations_a_resume_runs_again(tmp_path):
    """Iterations past an unfinished trial's latest checkpoint are useful until a resume runs them again (then
    wasted, cause resume): an interrupted run showed 100% goodput and no word of them (a helper's check)."""
    store = _store(tmp_path)
    store.add_results([("t0", 0, i, 10.5 + i, {"acc": i}) for i in range(1, 8)])
    store.add_checkpoint("t0", 5, str(tmp_path / "exp" / "t0" / "checkpoint_000005"), {"acc": 5})
    store.update_trial("t0", status="RUNNING", last_iteration=7, last_result={"acc": 7})
    store.set_experiment(status="INTERRUPTED", finished_at=18.0)
    store.close()
    report = inspect(str(tmp_path / "exp"))
    assert report.unsaved_iterations == 2 and report.to_dict()["experiment"]["unsaved_iterations"] == 2
    assert "unfinished trials ran 2 iterations since their latest checkpoints" in report.render_table()
    assert "at iteration 7, unfinished, config" in report.render_table()  # as ls says it (it said "running")
    assert report.total_stats.useful_iterations == 7  # (useful until a resume redoes them)


def test_a_live_run_does_not_warn_of_iterations_a_resume_would_run_again(tmp_path):
    """A running trial is always past its latest checkpoint: every inspect of a healthy live run warned that a
    resume would run those iterations again (a helper's check). The JSON keeps the count."""
    from fluidsalus.store import DriverLock

    store = _store(tmp_path)
    store.add_results([("t0", 0, i, 10.5 + i, {"acc": i}) for i in range(1, 4)])
    store.update_trial("t0", status="RUNNING", last_iteration=3, last_result={"acc": 3})
    lock = DriverLock.acquire(store.experiment_dir)  # its driver runs it
    try:
        report = inspect(str(tmp_path / "exp"))
        assert not report.driver_gone and report.unsaved_iterations == 3
        assert "since their latest checkpoints" not in report.render_table()
    finally:
        lock.release()
        store.close()
    assert "unfinished trials ran 3 iterations" in inspect(str(tmp_path / "exp")).render_table()  # driver gone


def test_the_plot_leaves_out_bins_without_device_time():
    """The gap between the two parts of a resumed run has no device time: it was drawn as zero goodput over the
    gap's seconds, not as no data (a helper's audit)."""
    from fluidsalus.goodput import TimelineBin
    from fluidsalus.inspect import goodput_steps

    bins = [TimelineBin(100.0, 110.0, "total", 20.0, 40, 30, 18.0, 9.0, 2.0, 1.5),
            TimelineBin(110.0, 120.0, "total", 0.0, 0, 0, 0.0, 0.0, None, None),  # the gap
            TimelineBin(120.0, 130.0, "total", 20.0, 0, 0, 0.0, 0.0, 0.0, 0.0)]  # devices up, nothing done
    xs, thr, good = goodput_steps(bins, 100.0)
    assert xs == [0.0, 10.0, 20.0, 30.0]
    assert thr[0] == 2.0 and math.isnan(thr[1]) and thr[2] == 0.0
    assert good[0] == 1.5 and math.isnan(good[1]) and good[2] == 0.0


def test_the_plots_rows_are_named_by_their_lanes_and_its_legend_hides_no_curve(tmp_path):
    """The timeline labelled its first row "lane 1" (the lanes are numbered from 0 in Report.lanes and the JSON,
    and a row shows every lane never open beside another), and the goodput panel's legend sat on its curves
    (h104's F13). cpu:0: lanes 0 and 1 one after the other (one row), lane 2 beside lane 1 (a second row)."""
    pytest.importorskip("matplotlib")
    from fluidsalus.inspect import report_figure

    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("t0", 0, {"x": 0}), ("t1", 1, {"x": 1}), ("t2", 2, {"x": 2})])
    events = [(10.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 2})]
    for trial, lane, start, end in (("t0", 0, 10.0, 11.0), ("t1", 1, 11.0, 12.0), ("t2", 2, 11.0, 12.0)):
        events += [(start, "trial_start", trial, "cpu:0", {"attempt": 0}),
                   (start, "lane_open", None, "cpu:0", {"lane": lane, "capacity": 100}),
                   (start, "lane_admit", trial, "cpu:0", {"detail": [lane, 50, 50], "attempt": 0}),
                   (end, "trial_end", trial, "cpu:0", {"attempt": 0, "outcome": "completed"}),
                   (end, "lane_close", None, "cpu:0", {"lane": lane})]
    store.add_events(events)
    store.add_results([(t, 0, 1, end, {"acc": 1, "time_this_iter_s": 1.0}) for t, end in
                       (("t0", 11.0), ("t1", 12.0), ("t2", 12.0))])
    store.set_experiment(status="FINISHED", finished_at=12.0)
    store.close()
    fig = report_figure(inspect(str(tmp_path / "exp")))
    fig.canvas.draw()
    device, goodput = fig.axes
    assert [t.get_text() for t in device.get_yticklabels()] == ["lanes 0-1", "lane 2"]
    # runs of ids, then how many lanes more (h117's F7: "+3" counted the runs left out, 12 lanes here)
    assert _row_label([0, 1, 2, 5, 7, 8, 9, 11, 13, 14, 15, 16, 17, 19, 20]) == "lanes 0-2, 5, +11 more"
    assert _row_label([3]) == "lane 3" and _row_label([0, 3]) == "lanes 0, 3"
    legend = goodput.get_legend()
    assert legend is not None
    # the legend box lies above the panel's plotting area, so no curve runs under it
    assert legend.get_window_extent().y0 >= goodput.get_window_extent().y1 - 1


def test_the_plot_shades_a_devices_time_waiting_for_the_driver(tmp_path):
    """The figure had no mark for a device waiting for the driver (idle cause ``driver``), the largest cause of an
    Optuna study with a slow sampler: its panel is shaded there (one collection, ``gid="driver_idle"``), and the
    legend names it. cpu:0 (10 -> 12): t0's lane opens at 10, t0 waits for its ``suggest`` [10.2, 10.6] and
    computes [10.6, 11.5]."""
    pytest.importorskip("matplotlib")
    from fluidsalus.inspect import report_figure

    store = _store(tmp_path)  # cpu:0 from 10.0, t0's lane open from 10.5
    store.add_events([(10.2, "driver_wait", "t0", "cpu:0", {"waits": [[0.0, 0.4]], "methods": ["optuna.suggest"],
                                                           "calls": {"optuna.suggest": 1}, "attempt": 0})])
    store.add_results([("t0", 0, 1, 11.5, {"acc": 1, "time_this_iter_s": 0.9})])
    store.set_experiment(status="FINISHED", finished_at=12.0)
    store.close()
    report = inspect(str(tmp_path / "exp"))
    assert report.device_stats[0].idle_driver == pytest.approx({"suggest": 0.4})
    line = next(x for x in report.render_table().splitlines() if x.startswith("idle by cause:"))
    assert "driver 0.40s (suggest 0.40s)," in line  # (one device: no device named)
    fig = report_figure(report)
    fig.canvas.draw()
    device = fig.axes[0]
    [shade] = [c for c in device.collections if c.get_gid() == "driver_idle"]
    [box] = [p.get_extents() for p in shade.get_paths()]
    assert (box.x0, box.x1) == pytest.approx((0.2, 0.6))  # seconds since the device started
    assert "waiting for the driver" in [t.get_text() for t in fig.legends[0].get_texts()]
    # a store written before waits were named, whose event held calls of two methods: the JSON says "unknown", the
    # line names no method (it would say nothing more)
    old = _store(tmp_path, "old")
    old.add_events([(10.2, "driver_wait", "t0", "cpu:0", {"waits": [[0.0, 0.4]], "attempt": 0,
                                                         "calls": {"optuna.start": 1, "optuna.suggest": 1}})])
    old.add_results([("t0", 0, 1, 11.5, {"acc": 1, "time_this_iter_s": 0.9})])
    old.set_experiment(status="FINISHED", finished_at=12.0)
    old.close()
    before = inspect(str(tmp_path / "old"))
    assert before.to_dict()["totals"]["idle_driver"] == pytest.approx({gp.DRIVER_METHOD_UNKNOWN: 0.4})
    assert "driver 0.40s, " in next(x for x in before.render_table().splitlines() if x.startswith("idle by cause:"))
    # a device that never waited for the driver has no shade
    assert not [c for c in report_figure(inspect(_failing_store(tmp_path / "other"))).axes[0].collections
                if c.get_gid() == "driver_idle"]


def test_the_plots_legend_names_only_what_the_figure_shows(tmp_path):
    """The legend listed every mark the figure can draw: "waiting for the driver" under a run no device of which
    waited for the driver (a helper's review, h132), out-of-memory and PBT-exploit markers under a sweep with
    neither. It names what the panels show: a failed and retried trial's run has its failure and its wasted
    iteration, no driver shade, no out-of-memory star, no exploit, no switch; a trial that waited for its
    ``suggest`` has the driver's shade and nothing wasted."""
    pytest.importorskip("matplotlib")
    from fluidsalus.inspect import report_figure

    def legend(path, goodput_panel=False):
        fig = report_figure(inspect(path))
        shown = fig.axes[-1].get_legend() if goodput_panel else fig.legends[0]
        return [t.get_text() for t in shown.get_texts()]

    failing = _failing_store(tmp_path / "failing")
    assert legend(failing) == [
        "lane open, idle", "trial computes (colour, number = trial)", "wasted (redone or cut short)", "failure"]
    assert legend(failing, goodput_panel=True) == [  # (its waste is a cut-short second: no iteration redone)
        "all iterations (throughput)", "useful iterations (goodput)"]
    redone = _store(tmp_path, "redone")  # t0's iteration 1 is redone after a retry from scratch
    redone.add_events([(11.0, "trial_restart", "t0", "cpu:0", {"reason": "retry", "attempt": 1, "from_iteration": 0,
                                                              "error": "RuntimeError: boom"}),
                       (11.0, "trial_start", "t0", "cpu:0", {"attempt": 1})])
    redone.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5}),
                        ("t0", 1, 1, 11.5, {"acc": 1, "time_this_iter_s": 0.5})])
    redone.set_experiment(status="FINISHED", finished_at=12.0)
    redone.close()
    assert legend(str(tmp_path / "redone"), goodput_panel=True) == [
        "all iterations (throughput)", "useful iterations (goodput)", "wasted"]
    store = _store(tmp_path)
    store.add_events([(10.2, "driver_wait", "t0", "cpu:0", {"waits": [[0.0, 0.4]], "methods": ["optuna.suggest"],
                                                           "calls": {"optuna.suggest": 1}, "attempt": 0})])
    store.add_results([("t0", 0, 1, 11.5, {"acc": 1, "time_this_iter_s": 0.9})])
    store.set_experiment(status="FINISHED", finished_at=12.0)
    store.close()
    assert legend(str(tmp_path / "exp")) == [
        "lane open, idle", "waiting for the driver", "trial computes (colour, number = trial)"]
    assert legend(str(tmp_path / "exp"), goodput_panel=True) == [  # (nothing wasted: no waste drawn)
        "all iterations (throughput)", "useful iterations (goodput)"]


def _failing_store(tmp_path, extra_trials=0):
    """cpu:0: t0 reports iteration 1 (0.5 s), fails 1 s into iteration 2 (retried from its checkpoint at 1, so
    nothing is redone: only the cut-short second is wasted) and reports iteration 2 (0.5 s). cpu:1: t1 reports 2
    iterations of 0.25 s, then ``extra_trials`` more trials, the i-th one iteration of 0.1 * (i + 1) s."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    extra = [f"x{i}" for i in range(extra_trials)]
    store.add_trials([("t0", 0, {"x": 0}), ("t1", 1, {"x": 1}), *((t, i + 2, {"x": i}) for i, t in enumerate(extra))])
    events = []
    for device, trial in (("cpu:0", "t0"), ("cpu:1", "t1")):
        events += [(10.0, "device_start", None, device, {"kind": "cpu", "slots": 1}),
                   (10.0, "trial_start", trial, device, {"attempt": 0}),
                   (10.0, "lane_open", None, device, {"lane": 0, "capacity": 100}),
                   (10.0, "lane_admit", trial, device, {"detail": [0, 50, 50], "attempt": 0})]
    events += [(11.5, "trial_restart", "t0", "cpu:0", {"reason": "retry", "attempt": 1, "from_iteration": 1,
                                                       "error": "RuntimeError: boom"}),
               (11.5, "trial_start", "t0", "cpu:0", {"attempt": 1}),
               (11.5, "lane_admit", "t0", "cpu:0", {"detail": [0, 50, 50], "attempt": 1})]
    events += [(11.0, "trial_start", t, "cpu:1", {"attempt": 0}) for t in extra]
    store.add_events(events)
    store.add_results([("t0", 0, 1, 10.5, {"acc": 1, "time_this_iter_s": 0.5}),
                       ("t0", 1, 2, 12.0, {"acc": 2, "time_this_iter_s": 0.5}),
                       ("t1", 0, 1, 10.25, {"acc": 3, "time_this_iter_s": 0.25}),
                       ("t1", 0, 2, 10.5, {"acc": 4, "time_this_iter_s": 0.25}),
                       *((t, 0, 1, 11.0 + 0.1 * (i + 1), {"acc": 0, "time_this_iter_s": 0.1 * (i + 1)})
                         for i, t in enumerate(extra))])
    store.update_trial("t0", status="TERMINATED", stop_reason="completed", last_iteration=2, last_result={"acc": 2},
                       attempt=1, num_failures=1, device="cpu:0")
    store.update_trial("t1", status="TERMINATED", stop_reason="stopped", last_iteration=2, last_result={"acc": 4},
                       device="cpu:1")
    store.set_experiment(status="FINISHED", finished_at=12.0)
    store.close()
    return str(tmp_path / "exp")


def _row(table, name):
    header = next(line for line in table.splitlines() if line.startswith("DEVICE")).split()
    return dict(zip(header, next(line for line in table.splitlines() if line.startswith(name + " ")).split(),
                    strict=True))


def test_each_device_shows_the_seconds_it_wasted_in_the_table_json_and_plot(tmp_path):
    """cpu:0 lost 1 s of its 2 s of compute to an iteration a failure cut short: the table showed WASTED 0 (it
    counts redone reports) and the plot "(0 wasted)" (h104's F2). Its seconds and their share of its compute are
    in the table (WASTED_S, WASTE%), the JSON (wasted_s, wasted_fraction) and the plot's panel title."""
    from fluidsalus.inspect import device_title

    report = inspect(_failing_store(tmp_path))
    table = report.render_table()
    cpu0, cpu1, total = _row(table, "cpu:0"), _row(table, "cpu:1"), _row(table, "total")
    assert (cpu0["WASTED"], cpu0["WASTED_S"], cpu0["WASTE%"]) == ("0", "1.00s", "50%")
    assert (cpu1["WASTED"], cpu1["WASTED_S"], cpu1["WASTE%"]) == ("0", "0.00s", "0%")
    assert (total["WASTED_S"], total["WASTE%"]) == ("1.00s", "40%")  # of 2.5 lane-seconds of compute
    out = report.to_dict()
    assert [d["wasted_s"] for d in out["devices"]] == [pytest.approx(1.0), 0.0]
    assert out["devices"][0]["wasted_fraction"] == pytest.approx(0.5) and out["totals"]["wasted_s"] == 1.0
    assert out["devices"][0]["wasted_iterations"] == 0 and out["devices"][0]["wasted"]["retry"]["partial"] == 1
    title = device_title(report.device_stats[0])
    assert "2 iterations (0 redone), 1.00s wasted (50% of its compute: retry 1.00s)" in title
    assert "(0 wasted)" not in title


def test_the_legend_says_busy_includes_cut_short_iterations(tmp_path):
    """BUSY is any iteration's turn time, a cut-short one's too (cpu:0 is busy 100% with 1 s of its 2 s cut short);
    the legend said "computes a reported iteration" (h104's F8)."""
    table = inspect(_failing_store(tmp_path)).render_table()
    assert _row(table, "cpu:0")["BUSY"] == "100%"
    assert "reported iteration" not in table
    assert "BUSY: share of the device's time at least one lane computed an iteration, reported or cut short" in table
    assert "WASTED_S, WASTE%: compute seconds of wasted work" in table


def test_the_costliest_trials_are_in_the_text_and_every_trial_in_the_json(tmp_path):
    """"Which trials cost most" was only in Python (``report.trials``; h104's F6): the text lists the
    ``TRIALS_SHOWN`` trials with the most compute, with useful and wasted seconds and status; the JSON has a
    ``trials`` entry per trial."""
    from fluidsalus.inspect import TRIAL_COLUMNS, TRIALS_SHOWN

    report = inspect(_failing_store(tmp_path, extra_trials=TRIALS_SHOWN))
    lines = report.render_table().splitlines()
    start = lines.index(f"costliest trials (top {TRIALS_SHOWN} of {TRIALS_SHOWN + 2} by compute seconds over the "
                        "whole run; --json lists every trial):")
    header, *rows = lines[start + 1:start + 2 + TRIALS_SHOWN]
    assert header.split() == ["TRIAL", "DEVICE", "COMPUTE", "USEFUL_S", "WASTED_S", "ITERS", "STATUS", "acc"]
    assert rows[0].split() == ["t0", "cpu:0", "2.00s", "1.00s", "1.00s", "(retry)", "2", "(+1", "cut", "short)",
                               "TERMINATED", "2"]
    # then x4 (0.5 s), t1 (0.5 s, created before x4: ties go in creation order), x3 (0.4 s), x2 (0.3 s)
    assert [r.split()[0] for r in rows[1:]] == ["t1", f"x{TRIALS_SHOWN - 1}", "x3", "x2"]
    assert rows[1].split()[5:] == ["2", "TERMINATED", "(stopped)", "4"]
    assert not lines[start + 2 + TRIALS_SHOWN].startswith("  ")  # no more than TRIALS_SHOWN
    trials = report.to_dict()["trials"]
    assert [t["trial_id"] for t in trials] == ["t0", "t1", *(f"x{i}" for i in range(TRIALS_SHOWN))]
    assert all(list(t) == list(TRIAL_COLUMNS) for t in trials) and list(report.trials.columns) == list(TRIAL_COLUMNS)
    t0 = trials[0]
    assert (t0["reported"], t0["wasted"], t0["cut_short"], t0["waste_causes"]) == (2, 0, 1, ["retry"])
    assert (t0["compute_s"], t0["useful_s"], t0["wasted_s"]) == (pytest.approx(2.0), pytest.approx(1.0),
                                                                 pytest.approx(1.0))
    assert json.loads(report.to_json())["trials"][0]["config"] == {"x": 0}


def test_the_docs_show_the_table_and_say_what_each_column_holds(tmp_path):
    """docs/goodput.md documented the JSON but never showed the table nor its columns (h104's F12)."""
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "goodput.md")
    if not os.path.exists(docs):
        pytest.skip("no docs/ beside the tests (an installed package)")
    with open(docs) as f:
        text = f.read()
    assert "### The table" in text and "costliest trials (" in text
    table = inspect(_failing_store(tmp_path)).render_table()
    header = next(line for line in table.splitlines() if line.startswith("DEVICE")).split()
    for column in [*header, "NODE"]:
        assert re.search(rf"^\| (`[^`|]+`, )*`{re.escape(column)}`[ ,]", text, re.M), column  # a row of the table
    assert "| `TRIALS_SHOWN` of the module `fluidsalus.inspect` | 5 |" in text


def test_the_docs_code_fences_close_on_a_line_of_their_own():
    """h117's F5: docs/goodput.md closed a code block with "``` The `costliest trials` section ...": no closing fence
    in CommonMark (a closing fence carries nothing after it), so ~130 lines of the page rendered inside out."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pages = [os.path.join(root, "README.md"), *sorted(glob.glob(os.path.join(root, "docs", "*.md")))]
    pages = [p for p in pages if os.path.exists(p)]
    if not pages:
        pytest.skip("no docs/ beside the tests (an installed package)")
    for page in pages:
        with open(page) as f:
            text = f.read()
        fence = None  # the opening fence's backticks while inside a code block
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r"^ {0,3}(`{3,})(.*)$", line)
            if m is None:
                continue
            if fence is None:
                fence = m.group(1)
            elif len(m.group(1)) >= len(fence):
                assert not m.group(2).strip(), f"{page}:{n}: text after a closing fence: {line!r}"
                fence = None
        assert fence is None, f"{page}: a code block is never closed"


def test_the_report_says_why_each_device_was_idle(tmp_path, capsys):
    """inspect gave each device's BUSY share and nothing on where the rest of its time went (h104's F3). cpu:0
    computes [10.5, 12]; cpu:1's trial computes [11, 11.5] (its lane open from 10.5), ends at 11.75 and nothing else
    runs there."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([("t0", 0, {"x": 1}), ("t1", 1, {"x": 2})])
    events = []
    for device, trial, end in (("cpu:0", "t0", 12.0), ("cpu:1", "t1", 11.75)):
        events += [(10.0, "device_start", None, device, {"kind": "cpu", "slots": 1}),
                   (10.5, "trial_start", trial, device, {"attempt": 0}),
                   (10.5, "lane_open", None, device, {"lane": 0, "capacity": 100}),
                   (10.5, "lane_admit", trial, device, {"detail": [0, 50, 50], "attempt": 0}),
                   (end, "trial_end", trial, device, {"attempt": 0, "outcome": "completed"}),
                   (end, "lane_close", None, device, {"lane": 0})]
    store.add_events(events)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5}),
                       ("t0", 0, 2, 12.0, {"acc": 2, "time_this_iter_s": 1.0}),
                       ("t1", 0, 1, 11.5, {"acc": 1, "time_this_iter_s": 0.5})])
    store.set_experiment(status="FINISHED", finished_at=12.0)
    store.close()
    path = str(tmp_path / "exp")
    assert main(["inspect", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("wasted by cause:"))
    assert lines[at + 1] == ("idle by cause: no_trial 1.25s (cpu:1 0.75s, cpu:0 0.50s), startup 0.50s (cpu:1 0.50s), "
                             "after_report 0.25s (cpu:1 0.25s)")
    data = json.loads(inspect(path).to_json())
    one = data["devices"][1]
    assert one["device"] == "cpu:1" and one["idle_s"] == pytest.approx(1.5)
    assert one["idle"] == pytest.approx({gp.IDLE_DRIVER: 0.0, gp.IDLE_NO_TRIAL: 0.75, gp.IDLE_STARTUP: 0.5,
                                         gp.IDLE_AFTER_REPORT: 0.25, gp.IDLE_STOPPED: 0.0, gp.IDLE_BETWEEN_TURNS: 0.0})
    assert data["totals"]["idle_s"] == pytest.approx(2.0) and sum(data["totals"]["idle"].values()) == pytest.approx(2.0)
    assert data["totals"]["idle"][gp.IDLE_NO_TRIAL] == pytest.approx(1.25)
    assert "idle_s" in inspect(path).devices.columns  # the DataFrame has them too
    # one device: the causes alone, no device named
    one_device = _store(tmp_path, "one")
    one_device.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    one_device.close()
    line = next(x for x in inspect(str(tmp_path / "one")).render_table().splitlines() if x.startswith("idle by"))
    assert line == "idle by cause: no_trial 0.50s"


def test_a_live_runs_time_after_its_last_turn_is_shown_as_in_progress(tmp_path):
    """While the run goes on, a device's idle time after its last turn (cause ``stopped``) is mostly the iteration
    being computed: the line says so; once the driver is gone it is the stop's."""
    from fluidsalus.store import DriverLock

    store = _store(tmp_path)  # cpu:0 from 10.0, t0's lane open from 10.5
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 0.5})])
    store.add_events([(11.5, "memory", "t0", "cpu:0", {"attempt": 0})])  # activity at 11.5, no report since 11
    lock = DriverLock.acquire(store.experiment_dir)
    try:
        report = inspect(str(tmp_path / "exp"))
        assert report.live
        line = next(x for x in report.render_table().splitlines() if x.startswith("idle by"))
        assert line == "idle by cause: no_trial 0.50s, stopped/in progress 0.50s"
        assert report.total_stats.idle[gp.IDLE_STOPPED] == pytest.approx(0.5)
    finally:
        lock.release()
        store.close()
    line = next(x for x in inspect(str(tmp_path / "exp")).render_table().splitlines() if x.startswith("idle by"))
    assert line == "idle by cause: no_trial 0.50s, stopped 0.50s"


def test_the_report_says_how_long_trials_waited_for_their_first_start_after_the_run(tmp_path):
    """Queue waits showed only live, as the header's "N waiting" (h104's F7): once a run ended nothing said that 6 of
    its 8 trials had queued. Each trial's ``queued_s`` runs from its creation to its first ``trial_start``, counting
    only time a device was up (not the devices' start, nor the gap of a resumed run); the ``queued`` line sums up
    those that waited at least ``QUEUED_SHOWN_MIN_S``. One device (10 -> 14, one slot): t0 starts at once; t1,
    made before the device started, at 11 (1 s queued); t2 at 12.5 after a retry of its own start (its first start
    counts: 2.5 s); t3 never starts."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([(f"t{i}", i, {"x": i}) for i in range(4)])
    events = [(10.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1})]
    for trial, start, end in (("t0", 10.0, 11.0), ("t1", 11.0, 12.5), ("t2", 12.5, 14.0)):
        events += [(start, "trial_start", trial, "cpu:0", {"attempt": 0}),
                   (end, "trial_end", trial, "cpu:0", {"attempt": 0, "outcome": "completed"})]
    events.append((13.0, "trial_start", "t2", "cpu:0", {"attempt": 1}))
    store.add_events(events)
    store.add_results([("t0", 0, 1, 11.0, {"acc": 1, "time_this_iter_s": 1.0}),
                       ("t1", 0, 1, 12.5, {"acc": 1, "time_this_iter_s": 1.5}),
                       ("t2", 0, 1, 14.0, {"acc": 1, "time_this_iter_s": 1.0})])
    store.set_experiment(status="FINISHED", finished_at=14.0)
    store.close()
    with sqlite3.connect(str(tmp_path / "exp" / DB_FILENAME)) as db:  # (the store stamps trials with the clock)
        db.executemany("UPDATE trials SET created_at = ? WHERE trial_id = ?",
                       [(10.0, "t0"), (9.0, "t1"), (10.0, "t2"), (10.0, "t3")])
    db.close()
    report = inspect(str(tmp_path / "exp"))
    queued = {r["trial_id"]: r["queued_s"] for r in report.trial_table}
    assert queued == {"t0": 0.0, "t1": pytest.approx(1.0), "t2": pytest.approx(2.5), "t3": None}
    assert list(report.trials["queued_s"])[:3] == [0.0, pytest.approx(1.0), pytest.approx(2.5)]
    assert report.to_dict()["trials"][2]["queued_s"] == pytest.approx(2.5)
    lines = report.render_table().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("idle by cause:"))
    # t3 never started: its wait up to the run's end (4 s of device time) is said too (h117's F6: "queued: none" for
    # a run interrupted with 6 of its 10 trials still queued)
    assert lines[at + 1] == ("queued: 2 of 4 trials waited for their first start, mean 1.75s, max 2.50s (t2); "
                             "1 never started (waited 4.00s)")
    assert "queued: none" in inspect(_failing_store(tmp_path / "other")).render_table()


def _queue_store(path, events, created, finished_at, status="FINISHED"):
    """A store of trials ``created`` ({trial: created_at}) with ``events``, one result per trial at its last start."""
    store = ExperimentStore.create(str(path), "exp", {}, "acc", "max")
    store.add_trials([(tid, i, {"x": i}) for i, tid in enumerate(created)])
    store.add_events(events)
    starts = {e[2]: e[0] for e in events if e[1] == "trial_start"}
    store.add_results([(tid, 0, 1, ts + 0.5, {"acc": 1, "time_this_iter_s": 0.5}) for tid, ts in starts.items()])
    store.set_experiment(status=status, finished_at=finished_at)
    store.close()
    with sqlite3.connect(str(path / DB_FILENAME)) as db:  # (the store stamps trials with the clock)
        db.executemany("UPDATE trials SET created_at = ? WHERE trial_id = ?", [(c, t) for t, c in created.items()])
    db.close()
    return inspect(str(path))


def test_queued_s_counts_the_waits_after_a_restart_too(tmp_path):
    """``queued_s`` counted only a trial's wait for its first start, not its waits in the queue after a retry or a
    preemption (:func:`goodput.queue_waits`). One device (10 -> 16): t0 starts at 10, fails at 11 and is retried,
    but t1 (created at 10) took the place at 11; t0 waits until t1 ends at 13. t0 waited twice (0 s and 2 s),
    t1 once (1 s)."""
    dev = "cpu:0"
    events = [(10.0, "device_start", None, dev, {"kind": "cpu", "slots": 1}),
              (10.0, "trial_start", "t0", dev, {"attempt": 0}),
              (11.0, "trial_restart", "t0", dev, {"attempt": 1, "reason": "retry", "from_iteration": 0}),
              (11.0, "trial_start", "t1", dev, {"attempt": 0}),
              (13.0, "trial_end", "t1", dev, {"attempt": 0, "outcome": "completed"}),
              (13.0, "trial_start", "t0", dev, {"attempt": 1}),
              (16.0, "trial_end", "t0", dev, {"attempt": 1, "outcome": "completed"})]
    report = _queue_store(tmp_path / "retry", events, {"t0": 10.0, "t1": 10.0}, 16.0)
    rows = {r["trial_id"]: r for r in report.trial_table}
    assert rows["t0"]["queued_s"] == pytest.approx(2.0) and rows["t0"]["queued_waits"] == 2
    assert rows["t1"]["queued_s"] == pytest.approx(1.0) and rows["t1"]["queued_waits"] == 1
    assert list(report.trials["queued_waits"]) == [2, 1]
    assert report.to_dict()["trials"][0]["queued_s"] == pytest.approx(2.0)
    line = next(x for x in report.render_table().splitlines() if x.startswith("queued:"))
    assert line == ("queued: 2 of 2 trials waited to start (their first starts and 1 restart), mean 1.50s, "
                    "max 2.00s (t0)")
    # A resumed run: t0, retried at 11.5 as the first session ends (its device stops at 12), restarts at 22 in the
    # second session (its device back at 21): 0.5 + 1 s of device time, not the gap between the sessions. t1,
    # computing when the run was interrupted, waits again from the resume to its start at 21.5 (0.5 s).
    events = [(10.0, "device_start", None, dev, {"kind": "cpu", "slots": 2}),
              (10.0, "trial_start", "t0", dev, {"attempt": 0}), (10.0, "trial_start", "t1", dev, {"attempt": 0}),
              (11.5, "trial_restart", "t0", dev, {"attempt": 1, "reason": "retry", "from_iteration": 0}),
              (12.0, "device_stop", None, dev, {}), (20.0, "resume", None, None, {"unfinished": 2}),
              (21.0, "device_start", None, dev, {"kind": "cpu", "slots": 2}),
              (21.5, "trial_start", "t1", dev, {"attempt": 0}), (22.0, "trial_start", "t0", dev, {"attempt": 1})]
    report = _queue_store(tmp_path / "resumed", events, {"t0": 10.0, "t1": 10.0}, 23.0)
    assert [(r["queued_s"], r["queued_waits"]) for r in report.trial_table] == [
        (pytest.approx(1.5), 2), (pytest.approx(0.5), 2)]


def _fails_once(config):
    """Fails in its second iteration of its first attempt (a marker file in its folder), then runs 3 iterations."""
    flag = os.path.join(fluidsalus.get_context().get_trial_dir(), "failed_once")
    for i in range(3):
        time.sleep(0.05)
        if config["x"] == 0 and i == 1 and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("fails once")
        fluidsalus.report({"acc": i})


def test_a_retried_trials_queued_s_counts_its_wait_to_restart(ray_cluster, tmp_path):
    """A real retry (``max_failures=1``): the retried trial waits twice, for its first start and for its restart
    (from its ``trial_restart`` to its next ``trial_start``), and ``queued_s`` counts both."""
    storage = str(tmp_path / "results")
    fluidsalus.run(_fails_once, {"x": fluidsalus.grid_search([0, 1])}, devices=1, max_concurrent_trials=1,
                   max_failures=1, storage_path=storage, name="retry", metric="acc", mode="max", verbose=0)
    path = os.path.join(storage, "retry")
    store = open_untouched(path)
    try:
        created = {t.trial_id: t.created_at for t in store.trials()}
        events = [e for e in store.events() if e.kind in ("trial_start", "trial_restart")]
    finally:
        store.close()
    report = inspect(path)
    up = gp.merge_intervals((e.start, e.end) for eps in report.activity.epochs.values() for e in eps)
    retried = next(r for r in report.trial_table if r["attempts"] == 2)
    mine = [e for e in events if e.trial_id == retried["trial_id"]]
    assert [e.kind for e in mine] == ["trial_start", "trial_restart", "trial_start"]
    expected = gp.covered(up, created[retried["trial_id"]], mine[0].ts) + gp.covered(up, mine[1].ts, mine[2].ts)
    assert retried["queued_waits"] == 2 and retried["queued_s"] == pytest.approx(expected, abs=1e-6)
    other = next(r for r in report.trial_table if r["attempts"] == 1)
    assert other["queued_waits"] == 1


def test_the_queued_line_counts_trials_that_never_started(tmp_path):
    """h117's F6: an interrupted run whose queued trials never started said ``queued: none``. One device (10 -> 14):
    t0 starts at once, t1 and t2 never start (t2 ended unstarted at 12: its wait ends there)."""
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "acc", "max")
    store.add_trials([(f"t{i}", i, {"x": i}) for i in range(3)])
    store.add_events([(10.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
                      (10.0, "trial_start", "t0", "cpu:0", {"attempt": 0})])
    store.add_results([("t0", 0, 1, 14.0, {"acc": 1, "time_this_iter_s": 4.0})])
    store.set_experiment(status="INTERRUPTED", finished_at=14.0)
    store.close()
    with sqlite3.connect(str(tmp_path / "exp" / DB_FILENAME)) as db:  # (the store stamps trials with the clock)
        db.executemany("UPDATE trials SET created_at = ?, finished_at = ? WHERE trial_id = ?",
                       [(10.0, None, "t0"), (10.0, None, "t1"), (10.0, 12.0, "t2")])
    db.close()
    report = inspect(str(tmp_path / "exp"))
    assert [r["queued_s"] for r in report.trial_table] == [0.0, None, None]
    line = next(x for x in report.render_table().splitlines() if x.startswith("queued:"))
    assert line == "queued: 2 of 3 trials never started (waited up to 4.00s)"


#: Seconds the call handler of ``test_a_device_waiting_for_the_driver_...`` takes to answer (a slow sampler).
SLOW_ANSWER_S = 0.3


def _asks_a_slow_driver(config):
    """Asks the driver once before its first report and once between its two reports."""
    from fluidsalus.session import call_driver

    call_driver("suggest")
    for _ in range(2):
        time.sleep(0.05)
        fluidsalus.report({"acc": config["x"]})
        call_driver("should_prune")


def test_a_device_waiting_for_the_driver_is_idle_for_the_driver(ray_cluster, tmp_path, capsys):
    """A slow Optuna sampler left devices 59 % idle with nothing said (h104's s12): the wait showed as startup and
    between_turns. Each answered call is a ``driver_wait`` event of its device, and the driver's slow answers are
    ``driver_busy`` events; inspect puts that time under ``driver``, first on the idle line."""
    slow = {"suggest": SLOW_ANSWER_S, "should_prune": SLOW_ANSWER_S / 3}

    def handler(trial_id, method, args):
        time.sleep(slow[method])

    storage = str(tmp_path / "results")
    fluidsalus.run(_asks_a_slow_driver, {"x": fluidsalus.grid_search([1, 2])}, call_handler=handler, devices=1,
                   max_concurrent_trials=1, storage_path=storage, name="slow", metric="acc", mode="max", verbose=0)
    path = os.path.join(storage, "slow")
    store = open_untouched(path)
    try:
        waits, busy = store.events("driver_wait"), store.events("driver_busy")
    finally:
        store.close()
    # 2 trials x (suggest + 2 should_prune), each waited at least its answer; a trial's waits go as one event per
    # DRIVER_WAITS_HELD_S (1 s; each trial's three calls take 0.5 s), not one per call (h117's F3)
    assert all(e.device == "cpu:0" for e in waits) and len(waits) <= 4
    calls = [method for e in waits for method, n in e.data["calls"].items() for _ in range(n)]
    assert sorted(calls) == ["should_prune"] * 4 + ["suggest"] * 2
    spans = sorted(wait for e in waits for _, wait in e.data["waits"])
    assert len(spans) == 6 and spans[0] >= SLOW_ANSWER_S / 3 - 0.01 and spans[-2] >= SLOW_ANSWER_S - 0.01
    # The driver's slow answers held no placement back: one trial at a time (max_concurrent_trials=1), the other
    # queued, so they are no driver_busy events (h117's F1: they were, with ``more`` true, and counted as driver
    # idle on any device without a trial). (An ask of the searcher that took 1 ms on a busy machine may be one.)
    assert [e.data["what"] for e in busy if e.data["what"] != "searcher"] == []
    report = inspect(path)
    [device] = report.device_stats
    # one device, one trial at a time: it waited through every answer (6 x at least 0.1 s, 2 of them 0.3 s)
    assert device.idle[gp.IDLE_DRIVER] >= 2 * SLOW_ANSWER_S + 4 * SLOW_ANSWER_S / 3 - 0.05
    assert device.idle[gp.IDLE_DRIVER] > device.idle_s / 2
    assert main(["inspect", path]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("idle by cause:"))
    assert line.startswith("idle by cause: driver ")


#: Seconds the slow sampler and pruner of ``test_the_driver_idle_names_the_calls_an_optuna_study_waited_for`` take.
SLOW_SAMPLE_S, SLOW_PRUNE_S = 0.2, 0.05


def _pruned_objective(trial):
    """Three steps of 50 ms, each reported and followed by ``should_prune``."""
    import optuna

    x = trial.suggest_float("x", -1.0, 1.0)
    for step in range(3):
        time.sleep(0.05)
        trial.report(x * x + step, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x * x


def test_the_driver_idle_names_the_calls_an_optuna_study_waited_for(ray_cluster, tmp_path, capsys):
    """The ``driver`` idle cause did not say which calls the devices waited for (a slow sampler's ``suggest`` or a
    slow pruner's ``should_prune``), though the events counted them, and a ``should_prune`` carrying the trial's
    reports was counted as ``optuna.after_reports``. A real study (a sampler that takes 0.2 s a draw, a median
    pruner 0.05 s a decision): each wait names the objective's call, and ``idle_driver`` (the JSON, the
    ``idle by cause`` line) splits the driver's time by it."""
    import optuna

    from fluidsalus import optuna as fo

    class SlowSampler(optuna.samplers.RandomSampler):
        def sample_independent(self, study, trial, name, dist):
            time.sleep(SLOW_SAMPLE_S)
            return super().sample_independent(study, trial, name, dist)

    class SlowPruner(optuna.pruners.MedianPruner):
        def prune(self, study, trial):
            time.sleep(SLOW_PRUNE_S)
            return super().prune(study, trial)

    study = optuna.create_study(sampler=SlowSampler(seed=0), pruner=SlowPruner(n_startup_trials=0,
                                                                               n_warmup_steps=0))
    storage = str(tmp_path / "results")
    fo.optimize(study, _pruned_objective, n_trials=4, storage_path=storage, name="pruned", devices=1,
                max_concurrent_trials=1, verbose=0)  # (one trial at a time: each of its waits idles the device)
    path = os.path.join(storage, "pruned")
    store = open_untouched(path)
    try:
        waits = store.events("driver_wait")
    finally:
        store.close()
    methods = [m for e in waits for m in e.data["methods"]]
    assert len(methods) == sum(len(e.data["waits"]) for e in waits)
    assert methods.count("optuna.suggest") == 4 and "optuna.should_prune" in methods
    assert "optuna.after_reports" not in methods  # (the call that carried the reports is named by its own method)
    assert sum(n for e in waits for n in e.data["calls"].values()) == len(methods)
    report = inspect(path)
    [device] = report.device_stats
    split = device.idle_driver
    assert sum(split.values()) == pytest.approx(device.idle[gp.IDLE_DRIVER])
    assert split["suggest"] >= 4 * SLOW_SAMPLE_S * 0.9 and split["should_prune"] >= SLOW_PRUNE_S
    assert set(split) <= {"start", "suggest", "should_prune", "report", "finish"}
    assert report.to_dict()["totals"]["idle_driver"] == pytest.approx(split)
    assert main(["inspect", path]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("idle by cause:"))
    shown = re.match(r"idle by cause: driver [0-9.]+s \(([^)]*)\)", line)
    assert shown is not None, line
    assert [p.split()[0] for p in shown.group(1).split(", ")][:2] == list(split)[:2]  # largest first
    assert f"suggest {split['suggest']:.2f}s" in shown.group(1)


def _fails_at_once(config):
    raise RuntimeError("fails at once")


@pytest.mark.parametrize("fail_fast", [True, "raise"])
def test_trials_a_fail_fast_end_left_unstarted_are_not_counted_stopped(tmp_path, fail_fast):
    """inspect said '5 stopped by the search or a stop rule' where the run's progress line said none: the trials
    the run's end (fail_fast) ended before they began (h106's F4). Under ``"raise"`` the store keeps them unfinished
    (``PENDING``, for a resume to run, as Ray's saved state has them)."""
    storage = str(tmp_path / "results")
    kwargs = dict(storage_path=storage, name="ff", fail_fast=fail_fast, max_concurrent_trials=1, verbose=0)
    with pytest.raises(fluidsalus.TrialError) if fail_fast == "raise" else contextlib.nullcontext():
        fluidsalus.run(_fails_at_once, {"x": fluidsalus.grid_search([1, 2, 3, 4])}, **kwargs)
    report = inspect(os.path.join(storage, "ff"))
    left = "PENDING" if fail_fast == "raise" else "TERMINATED"
    assert report.trial_counts["ERROR"] == 1 and report.trial_counts[left] == 3 and report.stopped == 0


def _optuna_store(tmp_path, searcher="_StudyDriver"):
    """An experiment as ``fluidsalus.optuna.optimize`` records one, on a study that held 3 trials before: o0 is
    Optuna's trial 3 (COMPLETE, the best), o1 its trial 4 (FAIL before any report: no result carries its number,
    the ``optuna_trial`` event does), o2 its trial 5 (PRUNED after a report). ``searcher`` is the spec's."""
    from fluidsalus.inspect import OPTUNA_TRIAL_EVENT

    path = tmp_path / "results" / "study"
    store = ExperimentStore.create(str(path), "study", {"searcher": searcher}, "optuna_value", "min")
    store.add_trials([("o0", 0, {"x": 0.5}), ("o1", 1, {"x": 0.9}), ("o2", 2, {"x": 0.7})])
    events = [(10.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
              (10.0, "lane_open", None, "cpu:0", {"lane": 0, "capacity": 100})]
    for i, trial in enumerate(("o0", "o1", "o2")):
        events += [(10.0 + i, "trial_start", trial, "cpu:0", {"attempt": 0}),
                   (10.0 + i, "lane_admit", trial, "cpu:0", {"detail": [0, 50, 50], "attempt": 0})]
    events += [(13.0, OPTUNA_TRIAL_EVENT, trial, None, {"number": n, "state": s})
               for trial, n, s in (("o0", 3, "COMPLETE"), ("o1", 4, "FAIL"), ("o2", 5, "PRUNED"))]
    store.add_events(events)
    end0 = {"optuna_number": 3, "optuna_state": "COMPLETE", "optuna_value": 0.25, "time_this_iter_s": 0.5}
    report2 = {"optuna_number": 5, "optuna_step": 0, "optuna_intermediate_value": 9.0, "time_this_iter_s": 0.3}
    end2 = {"optuna_number": 5, "optuna_state": "PRUNED", "time_this_iter_s": 0.1}
    store.add_results([("o0", 0, 1, 10.5, end0), ("o2", 0, 1, 12.3, report2), ("o2", 0, 2, 12.4, end2)])
    store.update_trial("o0", status="TERMINATED", stop_reason="completed", last_iteration=1, last_result=end0,
                       device="cpu:0")
    store.update_trial("o1", status="ERROR", stop_reason="errored", error="ValueError: boom", device="cpu:0")
    store.update_trial("o2", status="TERMINATED", stop_reason="stopped", last_iteration=2, last_result=end2,
                       device="cpu:0")
    store.set_experiment(status="FINISHED", finished_at=13.0)
    store.close()
    return str(path)


def test_an_optuna_studys_trials_are_named_by_their_optuna_number_and_state(tmp_path, capsys):
    """An experiment of ``fluidsalus.optuna.optimize`` named its trials only by fluidsalus ids (``5356d_00011``)
    where Optuna's log says "Trial 11 pruned", and showed a PRUNED trial as TERMINATED (h134's F7): the costliest
    trials show the Optuna number and state, the errored and best trials their Optuna number, the header the
    study's counts, the JSON's trials ``optuna_number`` and ``optuna_state``, the plot's bars the number, and
    ``fluidsalus ls`` counts the trials by Optuna state."""
    from fluidsalus.inspect import OPTUNA_TRIAL_COLUMNS, TRIAL_COLUMNS, report_figure

    path = _optuna_store(tmp_path)
    report = inspect(path)
    table = report.render_table()
    lines = table.splitlines()
    assert lines[0].endswith("): 3 trials (1 complete, 1 fail, 1 pruned)")  # (as ls counts them, below)
    start = next(i for i, line in enumerate(lines) if line.startswith("costliest trials"))
    header, *rows = (line.split() for line in lines[start + 1:start + 4])  # (o1 computed nothing)
    assert header == ["TRIAL", "OPTUNA", "#", "DEVICE", "COMPUTE", "USEFUL_S", "WASTED_S", "ITERS", "STATUS",
                      "optuna_value"]
    assert {r[0]: (r[1], r[-2]) for r in rows} == {"o0": ("3", "COMPLETE"), "o2": ("5", "PRUNED")}
    assert "  o1 (Optuna trial 4): ValueError: boom" in lines
    assert lines[-1].startswith("best trial: o0 (Optuna trial 3) optuna_value=0.25 (min) at iteration 1, complete,")
    out = report.to_dict()
    assert [(t["trial_id"], t["optuna_number"], t["optuna_state"]) for t in out["trials"]] == [
        ("o0", 3, "COMPLETE"), ("o1", 4, "FAIL"), ("o2", 5, "PRUNED")]
    assert out["best"]["optuna_number"] == 3
    assert list(report.trials.columns) == [*TRIAL_COLUMNS, *OPTUNA_TRIAL_COLUMNS]
    texts = {t.get_text() for ax in report_figure(report).axes for t in ax.texts}
    assert {"3", "5"} <= texts and "0" not in texts  # (o0's and o2's bars; o1 computed nothing reported)
    assert main(["ls", str(tmp_path / "results")]) == 0
    assert "3 (1 complete, 1 fail, 1 pruned)" in capsys.readouterr().out
    # a store written before optimize stored its trials' numbers (no optuna_trial event): what the results carry
    store = ExperimentStore.open(path)
    store._conn.execute("DELETE FROM events WHERE kind = 'optuna_trial'")
    store._conn.commit()
    store.close()
    old = inspect(path)
    assert [(t["optuna_number"], t["optuna_state"]) for t in old.trial_table] == [(3, "COMPLETE"), (None, None),
                                                                                   (5, "PRUNED")]
    assert "  o1: ValueError: boom" in old.render_table().splitlines()
    # another front end's experiment has none of it
    other = inspect(_optuna_store(tmp_path / "other", searcher="RandomSearcher"))
    assert other.optuna is None and "OPTUNA" not in other.render_table() and "Optuna" not in other.render_table()
    assert all(list(t) == list(TRIAL_COLUMNS) for t in other.to_dict()["trials"])
    assert "optuna_number" not in other.to_dict()["best"]


def test_a_folder_ray_tune_wrote_is_named_as_such(tmp_path, capsys):
    """``fluidsalus inspect`` of a folder Ray Tune wrote said only "no experiment.db found", where
    ``ExperimentAnalysis`` says Ray wrote it (h134's F8)."""
    (tmp_path / "experiment_state-2026-11-29_01-31-01.json").write_text("{}")
    err = _bad(tmp_path, capsys)
    assert "no experiment.db found" in err
    assert err.rstrip("\n").endswith("Ray Tune wrote this folder (its experiment_state file is there): fluidsalus "
                                     "inspects the experiments it ran itself, from their store; read this one with "
                                     "Ray's ExperimentAnalysis.")
    assert "Ray Tune" not in _bad(tmp_path / "nothing", capsys)


def test_a_bare_name_of_a_folder_ray_tune_wrote_in_ray_results_is_named_as_such(tmp_path, capsys, monkeypatch):
    """``fluidsalus inspect raysweep`` of Ray Tune's own run in ``~/ray_results`` said the name was found nowhere
    (only a store is looked for by name); it names the folder and says Ray wrote it."""
    monkeypatch.setenv("FLUIDSALUS_STORAGE_PATH", str(tmp_path / "results"))
    monkeypatch.setenv("RAY_STORAGE", str(tmp_path / "ray_results"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ray_results" / "raysweep").mkdir(parents=True)
    (tmp_path / "ray_results" / "raysweep" / "experiment_state-2026-11-29_01-31-01.json").write_text("{}")
    err = _bad("raysweep", capsys)
    assert f"{str(tmp_path / 'ray_results' / 'raysweep')!r} is not a fluidsalus experiment" in err
    assert "Ray Tune wrote this folder" in err


def test_the_costliest_trials_metric_column_has_one_format(tmp_path):
    """The column mixed forms, each value formatted alone: ``1.23457e+06`` (1234567.0) beside ``1234567.5`` (h148's
    F2). One format for the column now, as Ray's table formats a column (``format_metric_column``: 6 significant
    digits, as Ray's, since h182; h167's kept 1234567.5's fraction and widened the column for it)."""
    store = _store(tmp_path)
    store.add_trials([("t1", 1, {"x": 2}), ("t2", 2, {"x": 3})])
    for i, (trial_id, value) in enumerate((("t0", 1234567.0), ("t1", 1234567.5), ("t2", 3))):
        store.add_results([(trial_id, 0, 1, 11.0 + i, {"acc": value, "time_this_iter_s": 0.5})])
        store.update_trial(trial_id, status="TERMINATED", last_result={"acc": value})
    lines = inspect(store.experiment_dir).render_table().splitlines()
    store.close()
    start = next(i for i, line in enumerate(lines) if line.startswith("costliest trials"))
    assert {line.split()[0]: line.split()[-1] for line in lines[start + 2:start + 5]} == {
        "t0": "1.23457e+06", "t1": "1.23457e+06", "t2": "3"}


def test_the_costliest_trials_name_each_trial_as_the_reports_other_lines(tmp_path):
    """The TRIAL column gave ids (``65b28_00000``) where the best trial's line and the errored trials a few lines
    below name the same trial ``train_65b28_00000`` (h188's F8): it names each trial as they do (``Report.named``:
    its id too where the name does not hold it)."""
    from fluidsalus.store import TRIAL_DIRNAME_EVENT

    store = _store(tmp_path)
    store.add_trials([("t1", 1, {"x": 2})])
    store.add_events([(10.0, TRIAL_DIRNAME_EVENT, "t0", None, {"dirname": "train_t0_0", "name": "train_t0"}),
                      (10.0, TRIAL_DIRNAME_EVENT, "t1", None, {"dirname": "lr_1", "name": "lr=0.1"})])
    for i, trial_id in enumerate(("t0", "t1")):
        store.add_results([(trial_id, 0, 1, 11.0 + i, {"acc": i, "time_this_iter_s": 0.5})])
        store.update_trial(trial_id, status="TERMINATED", last_result={"acc": i})
    lines = inspect(store.experiment_dir).render_table().splitlines()
    store.close()
    start = next(i for i, line in enumerate(lines) if line.startswith("costliest trials"))
    assert sorted(line.split("  ")[1].strip() for line in lines[start + 2:start + 4]) == ["lr=0.1 (t1)", "train_t0"]
    assert any(line.startswith("best trial: lr=0.1 (t1) acc=1") for line in lines)
