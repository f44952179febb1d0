"""RunConfig(log_to_file=...): each trial's output also goes to files in its folder (fluidsalus/tune/_output.py)."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.tune._output import log_files, trial_output


def test_log_files_reads_rays_values_and_names_the_field_on_bad_ones() -> None:
    assert log_files(False) == log_files(None) == (None, None)
    assert log_files(True) == ("stdout", "stderr")
    assert log_files("both.log") == ("both.log", "both.log")
    assert log_files(("out.txt", None)) == ("out.txt", None)
    for bad in (3, ("a", "b", "c"), ("a", 1), ""):
        with pytest.raises(ConfigError, match="RunConfig: log_to_file must be True, False, a file name"):
            log_files(bad)


def test_each_thread_writes_its_own_files_and_the_console_still_gets_everything(tmp_path, capsys) -> None:
    barrier = threading.Barrier(2)

    def trial(name: str, files: tuple[str | None, str | None]) -> None:
        folder = tmp_path / name
        with trial_output(str(folder), *files):
            for step in range(3):
                barrier.wait()  # the two threads print in turns
                print(f"{name} out {step}")
                print(f"{name} err {step}", file=sys.stderr)

    threads = [threading.Thread(target=trial, args=("a", ("stdout", "stderr"))),
               threading.Thread(target=trial, args=("b", ("both.log", "both.log")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("outside")  # after the block: the console only
    assert (tmp_path / "a" / "stdout").read_text().splitlines() == ["a out 0", "a out 1", "a out 2"]
    assert (tmp_path / "a" / "stderr").read_text().splitlines() == ["a err 0", "a err 1", "a err 2"]
    assert (tmp_path / "b" / "both.log").read_text().splitlines() == [
        "b out 0", "b err 0", "b out 1", "b err 1", "b out 2", "b err 2"]
    captured = capsys.readouterr()
    assert sorted(captured.out.splitlines()) == sorted([f"{n} out {i}" for n in "ab" for i in range(3)] + ["outside"])
    assert len(captured.err.splitlines()) == 6


def test_the_threads_a_trial_starts_write_to_its_files_and_a_shared_pools_do_not(tmp_path, capsys) -> None:
    """A trial's text is that of its own thread and of the threads it starts (each belongs to the trial), as
    under Ray, where the trial owns its process; a pool made before the trial belongs to no trial."""
    from concurrent.futures import ThreadPoolExecutor

    import fluidsalus
    from fluidsalus.gpu.host import EV_END, DeviceHost, HostSettings, TrialSpec

    shared = ThreadPoolExecutor(max_workers=1)
    shared.submit(print, "the pool starts its thread outside any trial").result()

    def f(config):
        with trial_output(fluidsalus.get_context().get_trial_dir(), "stdout", "stderr"):
            print("from the trial")
            thread = threading.Thread(target=lambda: print("from its thread", file=sys.stderr))
            thread.start()
            thread.join()
            shared.submit(print, "from the shared pool").result()

    host = DeviceHost(f, HostSettings("exp", max_lanes=1, capacity_bytes=2**30, trial_estimate=(2**20, 2**20),
                                      profile_memory=False))
    try:
        host.submit([TrialSpec("t0", "t0", {}, str(tmp_path / "t0"))])
        events, deadline = [], time.time() + 10
        while not any(e[0] == EV_END for e in events):
            assert time.time() < deadline, events
            events += host.poll(0.1)
    finally:
        shared.shutdown()
    assert [e[4] for e in events if e[0] == EV_END] == ["completed"]
    assert (tmp_path / "t0" / "stdout").read_text() == "from the trial\n"
    assert (tmp_path / "t0" / "stderr").read_text() == "from its thread\n"
    captured = capsys.readouterr()  # the console still gets everything
    assert captured.out.splitlines() == ["the pool starts its thread outside any trial", "from the trial",
                                         "from the shared pool"]
    assert captured.err == "from its thread\n"


def _chatty(config):
    from fluidsalus import tune

    for step in range(3):
        print(f"trial x={config['x']} step {step}")
        print(f"warning x={config['x']}", file=sys.stderr)
        time.sleep(0.05)  # the two trials run at once on the two lanes
        tune.report({"step": step})


def test_a_run_with_log_to_file_writes_each_trials_output_into_its_folder(ray_cluster, storage) -> None:
    from fluidsalus import tune

    grid = tune.Tuner(_chatty, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, log_to_file=True)).fit()
    assert len(grid) == 2 and not grid.errors
    for result in grid:
        x = result.config["x"]
        assert open(os.path.join(result.path, "stdout")).read().splitlines() == [
            f"trial x={x} step {step}" for step in range(3)]
        assert open(os.path.join(result.path, "stderr")).read().splitlines() == [f"warning x={x}"] * 3
