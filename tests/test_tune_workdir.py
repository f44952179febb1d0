"""Each trial works in its own folder, as under Ray Tune (``RAY_CHDIR_TO_TRIAL_DIR``; fluidsalus/tune/_workdir.py)."""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings

import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.tune import _workdir
from fluidsalus.tune._workdir import chdir_to_trial_dir, trial_working_directory

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own directory is Linux's")


def test_the_switch_reads_rays_variable_and_names_it_on_a_bad_value() -> None:
    assert chdir_to_trial_dir({}) is True
    assert chdir_to_trial_dir({"RAY_CHDIR_TO_TRIAL_DIR": "1"}) is True
    assert chdir_to_trial_dir({"RAY_CHDIR_TO_TRIAL_DIR": "0"}) is False
    with pytest.raises(ConfigError, match=r"RAY_CHDIR_TO_TRIAL_DIR must be 0 .* or 1 .*; got 'no'"):
        chdir_to_trial_dir({"RAY_CHDIR_TO_TRIAL_DIR": "no"})


def test_rays_deprecated_argument_is_refused_naming_the_variable_as_ray_refuses_it() -> None:
    from fluidsalus import tune

    with pytest.raises(ConfigError, match=r"TuneConfig: chdir_to_trial_dir is deprecated \(Ray refuses it too\); "
                                          r"set the RAY_CHDIR_TO_TRIAL_DIR environment variable instead"):
        tune.TuneConfig(chdir_to_trial_dir=False)


@needs_linux
def test_threads_work_in_their_own_folders_and_the_threads_they_start_share_them(tmp_path) -> None:
    start = os.getcwd()
    both_in, seen = threading.Barrier(2), {}

    def trial(name: str) -> None:
        with trial_working_directory(str(tmp_path / name)) as changed:
            both_in.wait()  # both threads are in their folders at the same time
            with open("model.txt", "w") as f:
                f.write(name)
            child = threading.Thread(target=lambda: seen.__setitem__(f"{name} child", os.getcwd()))
            child.start()
            child.join()
            seen[name] = (changed, os.getcwd())
            both_in.wait()
        seen[f"{name} after"] = os.getcwd()

    threads = [threading.Thread(target=trial, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("a", "b"):
        assert seen[name] == (True, str(tmp_path / name))
        assert seen[f"{name} child"] == str(tmp_path / name)
        assert seen[f"{name} after"] == start
        assert (tmp_path / name / "model.txt").read_text() == name
    assert os.getcwd() == start and not os.path.exists(os.path.join(start, "model.txt"))


def test_where_a_thread_cannot_have_its_own_folder_nothing_moves_and_one_warning_says_why(tmp_path,
                                                                                           monkeypatch) -> None:
    def refuse() -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(_workdir, "_unshare_fs", refuse)
    monkeypatch.setattr(_workdir, "_unsupported", None)
    monkeypatch.setattr(_workdir, "_warned", False)
    start = os.getcwd()
    with pytest.warns(UserWarning, match=r"trials keep the working directory .*unshare\(CLONE_FS\) failed: .*"
                                         r"Operation not permitted.*get_trial_dir\(\)"):
        with trial_working_directory(str(tmp_path / "t")) as changed:
            assert not changed and os.getcwd() == start
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: no warning
        with trial_working_directory(str(tmp_path / "t")) as changed:
            assert not changed
    assert not (tmp_path / "t").exists()


def _write_model(config):
    import fluidsalus

    with open("model.txt", "w") as f:  # a relative path, as many Ray Tune scripts write
        f.write(str(config["x"]))
    time.sleep(0.2)  # a neighbour in the same device writes its model.txt meanwhile
    return {"x_read_back": int(open("model.txt").read()), "cwd": os.getcwd(),
            "trial_dir": fluidsalus.get_context().get_trial_dir()}


@needs_linux
@pytest.mark.parametrize("chdir", [True, False], ids=["chdir", "switched_off"])
def test_trials_sharing_a_device_write_a_relative_path_each_into_its_own_folder(tmp_path, monkeypatch,
                                                                                chdir) -> None:
    from fluidsalus.gpu.host import EV_END, EV_RESULT, DeviceHost, HostSettings, TrialSpec
    from fluidsalus.tune._trainable import TrialEntry

    device_dir = tmp_path / "device"
    device_dir.mkdir()
    monkeypatch.chdir(device_dir)  # the device process's working directory
    entry = TrialEntry(_write_model, {}, None, None, "write_model", chdir=chdir)
    host = DeviceHost(entry, HostSettings("exp", max_lanes=2, capacity_bytes=2**30, trial_estimate=(2**20, 2**20),
                                          profile_memory=False))
    try:
        host.submit([TrialSpec(f"t{x}", f"t{x}", {"x": x}, str(tmp_path / f"t{x}")) for x in (1, 2)])
        events, deadline = [], time.time() + 20
        while sum(e[0] == EV_END for e in events) < 2:
            assert time.time() < deadline, events
            events += host.poll(0.1)
    finally:
        host.shutdown(timeout_s=5.0)
    results = {e[1]: e[4] for e in events if e[0] == EV_RESULT}
    assert [e[4] for e in events if e[0] == EV_END] == ["completed", "completed"]
    if chdir:
        for x in (1, 2):
            assert results[f"t{x}"]["cwd"] == results[f"t{x}"]["trial_dir"] == str(tmp_path / f"t{x}")
            assert results[f"t{x}"]["x_read_back"] == x
            assert (tmp_path / f"t{x}" / "model.txt").read_text() == str(x)
        assert not (device_dir / "model.txt").exists()
    else:  # as under Ray with RAY_CHDIR_TO_TRIAL_DIR=0: both wrote one file, and both read the last one's model
        assert {r["cwd"] for r in results.values()} == {str(device_dir)}
        assert len({r["x_read_back"] for r in results.values()}) == 1
        assert not (tmp_path / "t1" / "model.txt").exists()
    assert os.getcwd() == str(device_dir)


@needs_linux
def test_a_tuners_trials_each_write_a_relative_path_into_their_own_folders(ray_cluster, storage) -> None:
    """Four trials on the two one-core devices of the test session's Ray: two share each device's process."""
    from fluidsalus import tune

    grid = tune.Tuner(_write_model, param_space={"x": tune.grid_search([1, 2, 3, 4])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert len(grid) == 4 and not grid.errors
    for result in grid:
        assert result.metrics["cwd"] == result.metrics["trial_dir"] == result.path
        assert result.metrics["x_read_back"] == result.config["x"]
        assert open(os.path.join(result.path, "model.txt")).read() == str(result.config["x"])
