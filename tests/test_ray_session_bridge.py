"""Ray's own ``ray.tune.report`` / ``get_checkpoint`` / ``get_context`` called from a fluidsalus trial (an import
left unchanged) reach the trial: fluidsalus/gpu/ray_session.py."""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
import warnings

import pytest

from fluidsalus.gpu.host import (
    EV_END,
    EV_LANE,
    EV_RESULT,
    LANE_WARNING,
    OUT_COMPLETED,
    OUT_ERRORED,
    DeviceHost,
    HostSettings,
    TrialSpec,
)
from fluidsalus.gpu.ray_session import (
    RAY_SESSION_MODULE,
    RaySessionBridge,
    install_if_ray_is_imported,
    install_now_or_on_import,
)

ray_tune = pytest.importorskip("ray.tune")
ray_session = pytest.importorskip(RAY_SESSION_MODULE)

WAIT_S = 20.0


@pytest.fixture
def bridge():
    """A bridge in place of Ray's session in this process, and Ray's own state back afterwards."""
    before = ray_session._session
    ray_session._session = None
    made = RaySessionBridge()
    assert install_if_ray_is_imported(made)
    yield made
    ray_session._session = before


def _run(trainable, tmp_path, checkpoint_path=None):
    host = DeviceHost(trainable, HostSettings("exp", max_lanes=1, capacity_bytes=2**30,
                                              trial_estimate=(2**20, 2**20), profile_memory=False))
    spec = TrialSpec(trial_id="t0", trial_name="f_t0", config={"x": 2}, trial_dir=str(tmp_path / "t0"),
                     checkpoint_path=checkpoint_path)
    host.submit([spec])
    events, deadline = [], time.time() + WAIT_S
    while not any(e[0] == EV_END for e in events):
        assert time.time() < deadline, f"timed out; events so far: {events}"
        events += host.poll(0.1)
    return events


def _sent_warnings(events, caught):
    """The warnings the trial sent to the driver (``LANE_WARNING`` events, given there once per run); none was given
    in the device process (Ray forwarded it from there after the run's summary, once per device: h134's F3)."""
    assert not [w for w in caught if "fluidsalus" in str(w.message)], [str(w.message) for w in caught]
    return [e[5] for e in events if e[0] == EV_LANE and e[4] == LANE_WARNING]


def _forwarded(sent):
    """The Ray functions the sent warnings name."""
    return sorted(d["message"].split(" was called")[0] for d in sent if "fluidsalus trial" in d["message"])


def _ray_style_trainable(config):
    """A function trainable written for Ray Tune: Ray's report, checkpoint and context."""
    start = 0
    checkpoint = ray_tune.get_checkpoint()
    if checkpoint is not None:
        assert isinstance(checkpoint, ray_tune.Checkpoint)
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            start = json.load(f)["step"] + 1
    name = ray_tune.get_context().get_trial_name()
    for step in range(start, 3):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            ray_tune.report({"score": config["x"] * step, "name": name},
                            checkpoint=ray_tune.Checkpoint.from_directory(folder))


def test_ray_tune_report_checkpoint_and_context_reach_the_trial_with_one_warning_each(bridge, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = _run(_ray_style_trainable, tmp_path)
    end = next(e for e in events if e[0] == EV_END)
    assert end[4] == OUT_COMPLETED, end[5:]
    results = [e[4] for e in events if e[0] == EV_RESULT]
    assert [r["score"] for r in results] == [0, 2, 4]
    assert {r["name"] for r in results} == {"f_t0"}
    kept = sorted(os.listdir(tmp_path / "t0"))
    assert [d for d in kept if d.startswith("checkpoint_")], kept  # each report's folder was copied in
    sent = _sent_warnings(events, caught)
    assert _forwarded(sent) == ["ray.tune.get_checkpoint", "ray.tune.get_context().get_trial_name", "ray.tune.report"]
    assert {(d["filename"], d["module"], d["category"]) for d in sent} == {(__file__, __name__, UserWarning)}


def _rays_checkpoint_to_fluidsalus_report(config):
    """``from fluidsalus import tune`` changed, ``from ray.tune import Checkpoint`` left (Ray's own
    ``hyperband_function_example.py`` so changed by a helper: every trial failed)."""
    from fluidsalus import tune

    for step in range(2):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune.report({"score": step}, checkpoint=ray_tune.Checkpoint.from_directory(folder))


def test_rays_checkpoint_given_to_fluidsalus_report_is_translated_with_a_warning_naming_the_import(tmp_path):
    """It failed the trial: ``TypeError: report(checkpoint=...): expected a fluidsalus.Checkpoint, got
    Checkpoint``, naming neither Ray nor the import (Ray's own report, forwarded, took it)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = _run(_rays_checkpoint_to_fluidsalus_report, tmp_path)
    end = next(e for e in events if e[0] == EV_END)
    assert end[4] == OUT_COMPLETED, end[5:]
    assert len([d for d in os.listdir(tmp_path / "t0") if d.startswith("checkpoint_")]) == 2
    ours = [d for d in _sent_warnings(events, caught) if "Ray's Checkpoint" in d["message"]]
    assert len(ours) == 1 and "from fluidsalus.tune import Checkpoint" in ours[0]["message"]  # once per trial
    assert ours[0]["filename"] == __file__  # the user's report() (it named fluidsalus/session.py)


#: A helper of Ray's own (as ``ray.air.integrations.mlflow.setup_mlflow`` is): its module's name starts with "ray.".
#: ``experiment()`` reads the session itself, as Ray's ``setup_wandb`` does (it warned, naming fluidsalus's trial
#: entry as the line to change: the user's line was looked for a fixed number of frames up).
_RAYS_OWN_HELPER = compile("def trial_id():\n    return ray_tune.get_context().get_trial_id()\n"
                           "def experiment():\n    return ray_session.get_session().experiment_name\n",
                           "<ray helper>", "exec")


def test_rays_own_code_reads_the_context_without_a_warning_to_change_an_import(bridge, tmp_path):
    helpers = {"__name__": "ray.air.integrations.helper", "ray_tune": ray_tune, "ray_session": ray_session}
    exec(_RAYS_OWN_HELPER, helpers)  # noqa: S102 - a module of Ray's, in small

    def trainable(config):
        ray_tune.report({"id": helpers["trial_id"](), "name": ray_tune.get_context().get_trial_name(),
                         "experiment": helpers["experiment"]()})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = _run(trainable, tmp_path)
    assert [(e[4]["id"], e[4]["name"], e[4]["experiment"]) for e in events if e[0] == EV_RESULT] == [
        ("t0", "f_t0", "exp")]
    # the user's own calls still warn; the helper's call through Ray's code does not
    assert _forwarded(_sent_warnings(events, caught)) == ["ray.tune.get_context().get_trial_name", "ray.tune.report"]


def test_a_restarted_trial_gets_its_checkpoint_as_rays_checkpoint_class(bridge, tmp_path):
    _run(_ray_style_trainable, tmp_path / "a")
    folders = sorted(d for d in os.listdir(tmp_path / "a" / "t0") if d.startswith("checkpoint_"))
    path = str(tmp_path / "a" / "t0" / folders[0])  # the checkpoint of step 0
    events = _run(_ray_style_trainable, tmp_path / "b", checkpoint_path=path)
    assert [e[4]["score"] for e in events if e[0] == EV_RESULT] == [2, 4]  # resumed at step 1


def test_a_checkpoint_on_another_filesystem_fails_the_trial_saying_why(bridge, tmp_path):
    class Remote:
        path = "bucket/folder"

        class filesystem:  # noqa: N801 - stands in for a pyarrow filesystem
            type_name = "s3"

    def trainable(config):
        ray_tune.report({"score": 1}, checkpoint=Remote())

    end = next(e for e in _run(trainable, tmp_path) if e[0] == EV_END)
    assert end[4] == OUT_ERRORED
    assert "expected a Checkpoint of a local folder" in end[5] and "filesystem='s3'" in end[5]


def _writes_an_artifact_through_rays_storage(config):
    """Ray's recipe for a trial's own files: ``get_context().get_storage()``'s filesystem and ``trial_fs_path``."""
    from pathlib import Path

    from ray.train._internal.storage import StorageContext

    from fluidsalus import tune

    for storage in (ray_tune.get_context().get_storage(), tune.get_context().get_storage()):
        assert isinstance(storage, StorageContext)
        with storage.storage_filesystem.open_output_stream(Path(storage.trial_fs_path, "artifact.txt").as_posix()) as f:
            f.write(b"hello")
        ray_tune.report({key: str(getattr(storage, key)) for key in (
            "storage_fs_path", "experiment_dir_name", "trial_dir_name", "experiment_fs_path", "trial_fs_path",
            "trial_working_directory", "trial_driver_staging_path", "experiment_driver_staging_path")})


def test_rays_get_storage_answers_rays_storage_context_of_the_trials_folders(bridge, tmp_path):
    """``ray.tune.get_context().get_storage()`` was ``AttributeError: 'RaySessionBridge' object has no attribute
    'storage'`` (h140 F5), and fluidsalus's own ``get_context()`` had no ``get_storage``."""
    experiment = tmp_path / "exp"
    experiment.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = _run(_writes_an_artifact_through_rays_storage, experiment)
    end = next(e for e in events if e[0] == EV_END)
    assert end[4] == OUT_COMPLETED, end[5:]
    trial = str(experiment / "t0")
    expected = {"storage_fs_path": str(tmp_path), "experiment_dir_name": "exp", "trial_dir_name": "t0",
                "experiment_fs_path": str(experiment), "trial_fs_path": trial, "trial_working_directory": trial,
                "trial_driver_staging_path": trial, "experiment_driver_staging_path": str(experiment)}
    assert [{k: e[4][k] for k in expected} for e in events if e[0] == EV_RESULT] == [expected, expected]
    assert (experiment / "t0" / "artifact.txt").read_bytes() == b"hello"
    assert "ray.tune.get_context().get_storage" in _forwarded(_sent_warnings(events, caught))


def test_outside_a_trial_the_bridge_is_falsy_and_rays_own_warning_stays(bridge):
    assert not bridge
    with pytest.warns(UserWarning, match="meant to only be called inside a function"):
        ray_session.get_trial_name()  # Ray's wrapper decides by the session's truth value


def test_the_bridge_leaves_a_real_ray_session_alone():
    before = ray_session._session
    try:
        ray_session._session = sentinel = object()
        assert not install_if_ray_is_imported(RaySessionBridge())
        assert ray_session._session is sentinel
    finally:
        ray_session._session = before


def test_a_tuner_runs_a_trainable_that_calls_rays_report(ray_cluster, storage):
    from fluidsalus import tune

    tuner = tune.Tuner(_ray_style_trainable, param_space={"x": tune.grid_search([1, 3])},
                       tune_config=tune.TuneConfig(metric="score", mode="max"),
                       run_config=tune.RunConfig(name="bridge", storage_path=storage, verbose=0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = tuner.fit()
    # The warnings to change the import reach the driver, once per run (two trials, two devices), at the user's
    # line: given in the device process, they reached the terminal only through Ray's log forwarding, after the run
    # (or never, when the script ended at once), once per device (h134's F3)
    forwarded = sorted(str(w.message).split(" was called")[0] for w in caught if "fluidsalus trial" in str(w.message))
    assert forwarded == ["ray.tune.get_checkpoint", "ray.tune.get_context().get_trial_name", "ray.tune.report"]
    assert {w.filename for w in caught if "fluidsalus trial" in str(w.message)} == {__file__}
    assert not grid.errors
    assert sorted(r.metrics["score"] for r in grid) == [2, 6]
    best = grid.get_best_result()
    assert best.config["x"] == 3 and best.checkpoint is not None
    with best.checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
        assert json.load(f) == {"step": 2}


def test_a_trial_warning_under_an_error_filter_is_raised_once_the_run_has_ended(ray_cluster, storage):
    """Under ``python -W error`` (or pytest's ``filterwarnings = error``) the driver's ``warn_explicit`` raised
    in the middle of the run, which then ended as an engine error, half run (Ray Tune's trials warn in their
    own processes, and its run finishes): the run now finishes and is stored, then ``fit()`` raises it."""
    from fluidsalus import tune
    from fluidsalus.store import ExperimentStore

    tuner = tune.Tuner(_ray_style_trainable, param_space={"x": tune.grid_search([1, 3])},
                       tune_config=tune.TuneConfig(metric="score", mode="max"),
                       run_config=tune.RunConfig(name="strict", storage_path=storage, verbose=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="was called"):
            tuner.fit()
    store = ExperimentStore.open(os.path.join(storage, "strict"), readonly=True)
    try:
        assert store.experiment()["status"] == "FINISHED"
        assert sorted(row.status for row in store.trials()) == ["TERMINATED", "TERMINATED"]
    finally:
        store.close()


def test_the_bridge_is_put_in_place_when_a_trial_first_imports_rays_session_module(tmp_path, monkeypatch):
    # A stand-in for Ray's session module, not imported yet: the device process waits for the trainable to import
    # it (inside a trial, say) instead of importing it itself.
    name = "fs_test_fake_ray_session"
    (tmp_path / f"{name}.py").write_text("_session = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the finder goes with the test
    made = RaySessionBridge()
    assert install_now_or_on_import(made, name) is False and name not in sys.modules
    assert install_now_or_on_import(made, name) is False  # one finder, however often it is called
    assert sum(type(f).__name__ == "_InstallOnImport" for f in sys.meta_path) == 1
    module = importlib.import_module(name)
    try:
        assert module._session is made  # in place as the import returned
        assert install_now_or_on_import(made, name) is True
    finally:
        sys.modules.pop(name, None)
