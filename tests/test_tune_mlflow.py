"""Ray's own MLflow integration (``ray.air.integrations.mlflow``, an import a script keeps) under fluidsalus.tune.

``MLflowLoggerCallback`` runs in the driver as a Ray callback object, on fluidsalus's trial views; ``setup_mlflow``
runs in a trial, where it reads the trial's context through the bridge of fluidsalus/gpu/ray_session.py. Both
write to a real MLflow tracking store (SQLite), read back here with MLflow's client.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("mlflow")
pytest.importorskip("ray.air.integrations.mlflow")

from _trials import trials_that_shared_a_device  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402 - only with MLflow installed

#: The value of ``x`` whose trial raises, so that its run ends FAILED.
FAILING_X = 3


def _steps(config):
    from fluidsalus import tune

    for step in range(2):
        tune.report({"score": config["x"] * step, "note": "text"})
    if config["x"] == FAILING_X:
        raise ValueError("this trial fails after its two results")


def _runs_by_x(client: MlflowClient, experiment_name: str) -> dict[int, object]:
    experiment = client.get_experiment_by_name(experiment_name)
    assert experiment is not None, f"no MLflow experiment {experiment_name!r}"
    runs = client.search_runs([experiment.experiment_id])
    by_x = {int(run.data.params["x"]): run for run in runs}
    assert len(by_x) == len(runs), "two runs have the same x"
    return by_x


def test_rays_mlflow_logger_callback_logs_each_trial_to_its_own_run(ray_cluster, storage, tmp_path) -> None:
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    from fluidsalus import tune

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # artifacts default to ./mlruns (the working directory); keep them in the test's folder
    MlflowClient(uri).create_experiment("fs", artifact_location=(tmp_path / "artifacts").as_uri())
    callback = MLflowLoggerCallback(tracking_uri=uri, experiment_name="fs", save_artifact=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = tune.Tuner(_steps, param_space={"x": tune.grid_search([1, 2, FAILING_X])},
                          run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[callback])).fit()
    assert not [w for w in caught if "MLflowLoggerCallback" in str(w.message)]  # it runs as it is: no translation
    assert len(grid) == 3 and len(grid.errors) == 1
    client = MlflowClient(uri)
    runs = _runs_by_x(client, "fs")
    assert sorted(runs) == [1, 2, FAILING_X]
    by_x = {result.config["x"]: result for result in grid}
    for x, run in runs.items():
        # one run per trial, named after it; the metrics at Ray's steps (training_iteration); not the text
        assert run.info.run_name == run.data.tags["trial_name"]
        assert run.info.run_name == f"_steps_{by_x[x].metrics['trial_id']}"  # str(trial): Ray's trial name
        history = client.get_metric_history(run.info.run_id, "score")
        assert [(m.step, m.value) for m in history] == [(1, 0.0), (2, float(x))]
        assert "note" not in run.data.metrics
        assert run.info.status == ("FAILED" if x == FAILING_X else "FINISHED")
        # save_artifact=True: the trial's folder (Ray's files the default loggers wrote) is the run's artifacts
        assert {"params.json", "result.json"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
        assert run.info.artifact_uri.startswith((tmp_path / "artifacts").as_uri())
    assert len({run.info.run_name for run in runs.values()}) == 3


def _with_setup_mlflow(config):
    from ray.air.integrations.mlflow import setup_mlflow

    from fluidsalus import tune

    mlflow = setup_mlflow(config, tracking_uri=config["uri"], experiment_name=config["experiment"])
    for step in range(3):
        mlflow.log_metrics({"loss": config["x"] * 10 + step}, step=step)
        tune.report({"loss": config["x"] * 10 + step})


def test_setup_mlflow_in_trials_that_share_a_device_logs_each_to_its_own_run(ray_cluster, storage, tmp_path) -> None:
    from fluidsalus import tune

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # the store's tables exist before the trials open it; artifacts would go to ./mlruns otherwise
    MlflowClient(uri).create_experiment("fs_setup", artifact_location=(tmp_path / "artifacts").as_uri())
    xs = [1, 2, 3, 4]
    grid = tune.Tuner(
        tune.with_resources(_with_setup_mlflow, {"cpu": 0.5}),  # a hint: two trials share each device
        param_space={"x": tune.grid_search(xs), "uri": uri, "experiment": "fs_setup"},
        run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert not grid.errors, [str(e)[-2000:] for e in grid.errors]
    assert trials_that_shared_a_device(grid.experiment_path), "no two trials ran at once on one device"
    client = MlflowClient(uri)
    runs = _runs_by_x(client, "fs_setup")
    assert sorted(runs) == xs
    for x, run in runs.items():
        # MLflow's active run is per thread: each trial thread's metrics are in its own run, none in another's
        history = client.get_metric_history(run.info.run_id, "loss")
        assert [(m.step, m.value) for m in history] == [(step, float(x * 10 + step)) for step in range(3)]
        assert run.data.params["experiment"] == "fs_setup"  # setup_mlflow logs the config as the run's params
