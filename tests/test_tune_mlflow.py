"""Ray's own MLflow integration (``ray.air.integrations.mlflow``, an import a script keeps) under fluidsalus.tune.

``MLflowLoggerCallback`` runs in the driver as a Ray callback object, on fluidsalus's trial views; ``setup_mlflow``
runs in a trial, where it reads the trial's context through the bridge of fluidsalus/gpu/ray_session.py. Both
write to a real MLflow tracking store (SQLite), read back here with MLflow's client.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import pytest
from _trials import SHARING_RESOURCES, sharing_tune_config, trials_that_shared_a_device

# Found, not imported: importing MLflow takes seconds, which every run of the suite would pay at collection.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs mlflow (the test extra)")

#: The value of ``x`` whose trial raises, so that its run ends FAILED.
FAILING_X = 3


def _with_setup_mlflow(config):
    from ray.air.integrations.mlflow import setup_mlflow

    from fluidsalus import tune

    mlflow = setup_mlflow(config, tracking_uri=config["uri"], experiment_name="fs_setup")
    for step in range(2):
        mlflow.log_metrics({"loss": config["x"] * 10 + step}, step=step)
        tune.report({"score": config["x"] * step, "note": "text", "tie": 0.0})
    if config["x"] == FAILING_X:
        raise ValueError("this trial fails after its two results")


def _runs_by_x(client: Any, experiment_name: str) -> dict[int, Any]:
    experiment = client.get_experiment_by_name(experiment_name)
    assert experiment is not None, f"no MLflow experiment {experiment_name!r}"
    runs = client.search_runs([experiment.experiment_id])
    by_x = {int(run.data.params["x"]): run for run in runs}
    assert len(by_x) == len(runs), "two runs have the same x"
    return by_x


def test_rays_mlflow_callback_and_setup_mlflow_log_each_trial_to_its_own_run(ray_cluster, storage,
                                                                             tmp_path) -> None:
    from mlflow.tracking import MlflowClient
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    from fluidsalus import tune
    from fluidsalus.tune.logger import mlflow as rewritten  # Ray's old path, ray.tune.logger.mlflow, rewritten

    assert rewritten.MLflowLoggerCallback is MLflowLoggerCallback

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    # The store's tables and both experiments exist before the run (trials that create them at once would race,
    # under Ray too); their artifacts go to the test's folder, not to ./mlruns (MLflow's default).
    for name in ("fs", "fs_setup"):
        client.create_experiment(name, artifact_location=(tmp_path / name).as_uri())
    callback = MLflowLoggerCallback(tracking_uri=uri, experiment_name="fs", save_artifact=True)
    xs = [1, 2, FAILING_X, 4]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = tune.Tuner(
            tune.with_resources(_with_setup_mlflow, SHARING_RESOURCES),
            param_space={"x": tune.grid_search(xs), "uri": uri},
            tune_config=sharing_tune_config(max_t=3),
            run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[callback])).fit()
    assert not [w for w in caught if "MLflowLoggerCallback" in str(w.message)]  # it runs as it is: no translation
    assert len(grid) == 4 and [e for e in grid.errors if "fails after its two results" not in str(e)] == []
    assert len(grid.errors) == 1
    assert trials_that_shared_a_device(grid.experiment_path), "no two trials ran at once on one device"
    by_x = {result.config["x"]: result for result in grid}

    # MLflowLoggerCallback, in the driver: one run per trial, named after it, Ray's steps, its end, its folder
    runs = _runs_by_x(client, "fs")
    assert sorted(runs) == xs
    for x, run in runs.items():
        assert run.info.run_name == run.data.tags["trial_name"]
        assert run.info.run_name == f"_with_setup_mlflow_{by_x[x].metrics['trial_id']}"  # str(trial)
        history = client.get_metric_history(run.info.run_id, "score")
        assert [(m.step, m.value) for m in history] == [(1, 0.0), (2, float(x))]  # at training_iteration
        assert "note" not in run.data.metrics  # not a number
        assert run.info.status == ("FAILED" if x == FAILING_X else "FINISHED")
        # save_artifact=True: the trial's folder (Ray's files the default loggers wrote) is the run's artifacts
        assert {"params.json", "result.json"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
        assert run.info.artifact_uri.startswith((tmp_path / "fs").as_uri())

    # setup_mlflow, in the trials: MLflow's active run is per thread, so each trial thread's metrics are in its
    # own run and in no other, though two trials ran at once in each device's process
    runs = _runs_by_x(client, "fs_setup")
    assert sorted(runs) == xs
    for x, run in runs.items():
        history = client.get_metric_history(run.info.run_id, "loss")
        assert [(m.step, m.value) for m in history] == [(step, float(x * 10 + step)) for step in range(2)]
        assert run.data.params["uri"] == uri  # setup_mlflow logs the config as the run's parameters
