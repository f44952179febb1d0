"""``fluidsalus.tune.integration``: Ray Tune's XGBoost and LightGBM callbacks, on real boosting runs.

The pure parts (which metrics a round reports, the argument checks) are tested directly; the callbacks themselves
run inside trials of a real ``Tuner`` on the shared test Ray, where each round's report and checkpoint land in the
experiment. Ray's own ``xgboost_example.py`` and ``lightgbm_example.py`` run in ``tests/test_tune_examples.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from _trials import LazyModule, skip_module_unless_installed

import fluidsalus.tune as tune
from fluidsalus.errors import ConfigError
from fluidsalus.tune.integration import _report_callback

# Found, not imported: scikit-learn, LightGBM and XGBoost (with fluidsalus's modules for them, which import them)
# are imported where a test or a trainable uses them. Imported here, they cost each pytest-xdist process that
# collects this module 3-4 CPU-s, the one that runs none of its tests too, and each device process that runs its
# Lightning trainable, which needs none of them.
skip_module_unless_installed("lightgbm", "xgboost")
_INTEGRATION = {library: LazyModule(f"fluidsalus.tune.integration.{library}") for library in ("xgboost", "lightgbm")}


#: Rows of the breast cancer data (shipped with scikit-learn) the trials train on: enough for a real split.
_TRAIN_ROWS = 400


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    import sklearn.datasets

    x, y = sklearn.datasets.load_breast_cancer(return_X_y=True)
    return x[:_TRAIN_ROWS], y[:_TRAIN_ROWS], x[_TRAIN_ROWS:], y[_TRAIN_ROWS:]


def test_a_round_reports_the_last_value_of_each_metric_under_set_dash_metric() -> None:
    evals = {"train": {"logloss": [0.6, 0.5]}, "test": {"logloss": [0.7, 0.65], "error": [0.2, 0.1]}}
    assert _report_callback.report_dict("CB", evals, None, None) == {
        "train-logloss": 0.5, "test-logloss": 0.65, "test-error": 0.1}
    chosen = _report_callback.check_arguments("CB", ["test-error"], "m", 0, None)
    assert _report_callback.report_dict("CB", evals, chosen, None) == {"test-error": 0.1}
    renamed = _report_callback.check_arguments("CB", {"loss": "test-logloss"}, "m", 0, None)
    assert _report_callback.report_dict("CB", evals, renamed, lambda d: {**d, "twice": 2 * d["loss"]}) == {
        "loss": 0.65, "twice": 1.3}
    assert _report_callback.check_arguments("CB", "test-error", "m", 0, None) == {"test-error": "test-error"}
    assert _report_callback.check_arguments("CB", [], "m", 0, None) is None  # Ray: an empty list reports all


def test_a_metric_the_round_did_not_evaluate_is_an_error_listing_the_ones_it_did() -> None:
    chosen = _report_callback.check_arguments("CB", {"loss": "eval-logloss"}, "m", 0, None)
    with pytest.raises(KeyError, match=r"\['eval-logloss'\] were not evaluated.*\['test-error', 'test-logloss'\]"):
        _report_callback.report_dict("CB", {"test": {"logloss": [0.7], "error": [0.2]}}, chosen, None)


@pytest.mark.parametrize("kwargs, message", [
    ({"frequency": -1}, r"frequency must be an int >= 0.*-1"),
    ({"frequency": 1.5}, r"frequency must be an int >= 0.*1\.5"),
    ({"frequency": True}, r"frequency must be an int >= 0.*True"),
    ({"filename": "a/model.ubj"}, r"filename must be a file name without a folder.*'a/model.ubj'"),
    ({"filename": ""}, r"filename must be a file name"),
    ({"metrics": 3}, r"metrics must be None, a str, a list of str or a dict of str to str, got int"),
    ({"metrics": {"loss": 3}}, r"metrics must name metrics by str, got 'loss': 3"),
    ({"results_postprocessing_fn": "mean"}, r"results_postprocessing_fn must be None or a callable, got str"),
])
@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_bad_arguments_are_refused_naming_the_argument(library, kwargs, message) -> None:
    with pytest.raises(ConfigError, match=rf"TuneReportCheckpointCallback: {message}"):
        _INTEGRATION[library].TuneReportCheckpointCallback(**kwargs)


def test_lightgbm_rounds_are_named_as_ray_names_them_under_train_and_cv() -> None:
    from lightgbm.callback import CallbackEnv

    from fluidsalus.tune.integration import lightgbm as tune_lightgbm

    def env(results: list) -> CallbackEnv:
        return CallbackEnv(model=None, params={}, iteration=0, begin_iteration=0, end_iteration=1,
                           evaluation_result_list=results)

    assert tune_lightgbm.evaluation(env([("eval", "binary_logloss", 0.4, False)])) == {
        "eval": {"binary_logloss": 0.4}}
    assert tune_lightgbm.evaluation(env([("valid", "auc", 0.9, True, 0.01)])) == {
        "valid": {"auc-mean": 0.9, "auc-stdv": 0.01}}
    assert tune_lightgbm.evaluation(env([])) == {}


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_the_removed_tune_report_callback_raises_as_in_ray(library) -> None:
    with pytest.raises(DeprecationWarning, match="TuneReportCheckpointCallback"):
        _INTEGRATION[library].TuneReportCallback()


def _train_xgboost(config: dict) -> None:
    import xgboost

    from fluidsalus.tune.integration import xgboost as tune_xgboost

    x, y, vx, vy = _data()
    xgboost.train({"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "max_depth": 2},
                  xgboost.DMatrix(x, label=y), num_boost_round=config["rounds"],
                  evals=[(xgboost.DMatrix(vx, label=vy), "test")], verbose_eval=False,
                  callbacks=[tune_xgboost.TuneReportCheckpointCallback(
                      metrics={"loss": "test-logloss"}, frequency=config["frequency"])])


def _train_xgboost_cv(config: dict) -> None:
    import xgboost

    from fluidsalus.tune.integration import xgboost as tune_xgboost

    x, y, _, _ = _data()
    xgboost.cv({"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 2},
               xgboost.DMatrix(x, label=y), num_boost_round=config["rounds"], nfold=3, verbose_eval=False,
               callbacks=[tune_xgboost.TuneReportCheckpointCallback(
                   results_postprocessing_fn=lambda d: {key: mean for key, (mean, _std) in d.items()})])


def _fit(trainable, param_space: dict, storage: str, name: str, metric: str = "loss") -> tune.ResultGrid:
    tuner = tune.Tuner(trainable, param_space=param_space,
                       tune_config=tune.TuneConfig(metric=metric, mode="min"),
                       run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0))
    grid = tuner.fit()
    assert grid.num_errors == 0, grid.errors
    return grid


def test_xgboost_reports_every_round_and_checkpoints_every_frequency_rounds_and_at_the_end(
        ray_cluster, storage) -> None:
    import xgboost

    from fluidsalus.tune.integration import xgboost as tune_xgboost

    grid = _fit(_train_xgboost, {"rounds": 5, "frequency": tune.grid_search([2, 5])}, storage, "xgb")
    by_frequency = {r.config["frequency"]: r for r in grid}
    every_2, every_5 = by_frequency[2], by_frequency[5]
    # Every 2 rounds: rounds 2 and 4 carry checkpoints, and the 5th round's booster is saved at the end with the
    # 5th round's metrics, reported once more (as Ray's callback does).
    history = every_2.metrics_dataframe
    assert list(history["training_iteration"]) == [1, 2, 3, 4, 5, 6]
    assert "test-error" not in history.columns and history["loss"].iloc[-1] == history["loss"].iloc[-2]
    assert sorted(m["training_iteration"] for _, m in every_2.best_checkpoints) == [2, 4, 6]
    # Every 5 rounds: the last round's checkpoint is the final one, so there is no extra report.
    assert list(every_5.metrics_dataframe["training_iteration"]) == [1, 2, 3, 4, 5]
    assert [m["training_iteration"] for _, m in every_5.best_checkpoints] == [5]
    for result in (every_2, every_5):
        booster = tune_xgboost.TuneReportCheckpointCallback.get_model(result.checkpoint)
        assert booster.num_boosted_rounds() == 5
        _, _, vx, vy = _data()
        predicted = booster.predict(xgboost.DMatrix(vx)) > 0.5
        assert (predicted == vy).mean() > 0.8


def test_xgboost_cv_reports_the_folds_metrics_and_saves_no_checkpoint(ray_cluster, storage) -> None:
    grid = _fit(_train_xgboost_cv, {"rounds": 3}, storage, "xgb_cv", metric="test-logloss")
    (result,) = list(grid)
    history = result.metrics_dataframe
    assert list(history["training_iteration"]) == [1, 2, 3]
    assert history["test-logloss"].is_monotonic_decreasing and "train-logloss" in history.columns
    assert result.checkpoint is None


def _train_lightgbm(config: dict) -> None:
    import lightgbm

    from fluidsalus.tune.integration import lightgbm as tune_lightgbm

    x, y, vx, vy = _data()
    lightgbm.train({"objective": "binary", "metric": ["binary_logloss"], "verbose": -1, "num_leaves": 4},
                   lightgbm.Dataset(x, label=y), num_boost_round=config["rounds"],
                   valid_sets=[lightgbm.Dataset(vx, label=vy)], valid_names=["eval"],
                   callbacks=[tune_lightgbm.TuneReportCheckpointCallback(
                       {"loss": "eval-binary_logloss"}, frequency=config["frequency"])])


def test_lightgbm_reports_every_round_and_checkpoints_every_frequency_rounds_and_at_the_last(
        ray_cluster, storage) -> None:
    from fluidsalus.tune.integration import lightgbm as tune_lightgbm

    grid = _fit(_train_lightgbm, {"rounds": 4, "frequency": tune.grid_search([0, 3])}, storage, "lgb")
    by_frequency = {r.config["frequency"]: r for r in grid}
    assert list(by_frequency[0].metrics_dataframe["training_iteration"]) == [1, 2, 3, 4]
    assert [m["training_iteration"] for _, m in by_frequency[0].best_checkpoints] == [4]
    assert sorted(m["training_iteration"] for _, m in by_frequency[3].best_checkpoints) == [3, 4]
    for result in by_frequency.values():
        assert set(result.metrics_dataframe.columns) >= {"loss"}
        booster = tune_lightgbm.TuneReportCheckpointCallback.get_model(result.checkpoint)
        assert booster.current_iteration() == 4


# ---------------------------------------------------------------- PyTorch Lightning


def test_a_lightning_callback_refuses_a_hook_lightning_does_not_have() -> None:
    from fluidsalus.tune.integration.pytorch_lightning import TuneReportCheckpointCallback

    with pytest.raises(ConfigError, match=r"on=\['validation_ends'\] is not a Lightning hook it can report on; "
                                          r"allowed \(less their on_\): \[.*'train_epoch_end'.*'validation_end'"):
        TuneReportCheckpointCallback(on=["train_epoch_end", "validation_ends"])
    with pytest.raises(ConfigError, match=r"on=\['save_checkpoint'\]"):  # saving the checkpoint would call it again
        TuneReportCheckpointCallback(on="save_checkpoint")
    with pytest.raises(ConfigError, match=r"metrics must be None, a str, a list of str or a dict"):
        TuneReportCheckpointCallback(metrics=1)


def test_the_deprecated_lightning_report_callback_warns_and_saves_no_checkpoint() -> None:
    from fluidsalus.tune.integration.pytorch_lightning import TuneReportCallback

    with pytest.warns(FutureWarning, match="TuneReportCallback` is deprecated"):
        callback = TuneReportCallback({"loss": "val_loss"})
    assert callback._save_checkpoints is False


def _train_lightning(config: dict) -> None:
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from fluidsalus.tune.integration.pytorch_lightning import TuneReportCheckpointCallback

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, _index):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, _index):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=config["lr"])

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16)
    trainer = pl.Trainer(max_epochs=config["epochs"], accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         callbacks=[TuneReportCheckpointCallback({"loss": "val_loss", "missing": "val_acc"},
                                                                 filename="model.ckpt")])
    checkpoint = tune.get_checkpoint()
    with (checkpoint.as_directory() if checkpoint else _no_folder()) as folder:
        trainer.fit(Regression(), data, data, ckpt_path=f"{folder}/model.ckpt" if folder else None)


class _no_folder:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _stop_the_slow_learner(_trial_id: str, result: dict) -> bool:
    return result["config"]["lr"] < 1e-3 and result["training_iteration"] >= 2


def test_lightning_reports_each_validation_with_a_checkpoint_and_a_stop_ends_it_between_epochs(
        ray_cluster, storage) -> None:
    import torch

    # One trial at a time: both run in one device process, which imports Lightning once (about 5 CPU-s), where
    # two at once imported it in each device's process; what the test checks is each trial's own reports.
    tuner = tune.Tuner(_train_lightning, param_space={"lr": tune.grid_search([0.05, 1e-6]), "epochs": 4},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
                       run_config=tune.RunConfig(storage_path=storage, name="ptl", verbose=0,
                                                 stop=_stop_the_slow_learner))
    grid = tuner.fit()
    assert grid.num_errors == 0, grid.errors
    by_lr = {r.config["lr"]: r for r in grid}
    learned = by_lr[0.05]
    # one report per epoch's validation (Lightning's sanity check is not one), each with the trainer's checkpoint
    assert list(learned.metrics_dataframe["training_iteration"]) == [1, 2, 3, 4]
    assert learned.metrics_dataframe["loss"].is_monotonic_decreasing and "missing" not in learned.metrics
    assert sorted(m["training_iteration"] for _, m in learned.best_checkpoints) == [1, 2, 3, 4]
    with learned.checkpoint.as_directory() as folder:
        saved = torch.load(f"{folder}/model.ckpt", weights_only=False)
    assert saved["epoch"] == 3 and "layer.weight" in saved["state_dict"]
    # the trial stopped after its 2nd epoch ends there, not as an error (its report raises out of Lightning's loop)
    assert by_lr[1e-6].metrics["training_iteration"] == 2


def test_a_training_function_run_on_its_own_trains_to_its_end_and_warns_once_as_in_ray(monkeypatch) -> None:
    """Debugging the training function without a Tuner: Ray's ``tune.report`` and ``get_checkpoint`` warn once
    each and return None, so the booster trains to its last round; fluidsalus's raised ``SessionError`` at the
    first round (a helper's side by side)."""
    import warnings

    from fluidsalus import session
    from fluidsalus.errors import SessionError

    monkeypatch.setattr(tune, "_WARNED_OUTSIDE", set())
    monkeypatch.setattr(session, "_inheriting", False)  # (no device host in this process: a plain script)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train_xgboost({"rounds": 4, "frequency": 2})  # reports 4 rounds, 2 with a checkpoint
        assert tune.get_checkpoint() is None and tune.get_checkpoint() is None
    assert [str(w.message) for w in caught] == [
        f"`{name}` is meant to only be called inside a function that is executed by a Tuner or Trainer. "
        "Returning `None`." for name in ("report", "get_checkpoint")]
    with pytest.raises(SessionError, match="outside a trial"):  # fluidsalus's own API still says so
        import fluidsalus

        fluidsalus.report({"loss": 1.0})
    # In a device process, a thread no trial started is still told (its report would be lost)
    monkeypatch.setattr(session, "_inheriting", True)
    with pytest.raises(SessionError, match="outside a trial"):
        tune.report({"loss": 1.0})


def test_a_lightning_callback_written_for_ray_gets_the_trainer_and_the_module_by_keyword() -> None:
    """A subclass of Ray's ``TuneCallback`` defines ``_handle(self, trainer, pl_module)``; fluidsalus called
    ``_handle(trainer)``, a TypeError at the first hook (a helper's test)."""
    pytest.importorskip("lightning")
    from fluidsalus.tune.integration.pytorch_lightning import TuneCallback

    seen: list[tuple[object, object]] = []

    class Mine(TuneCallback):
        def _handle(self, trainer, pl_module):
            seen.append((trainer, pl_module))

    callback = Mine(on=["validation_end", "train_batch_end"])
    callback.on_validation_end("trainer", "module")
    callback.on_train_batch_end("trainer", "module", {"loss": 1.0}, "batch", 0)
    callback.on_train_epoch_end("trainer", "module")  # not one of its hooks
    assert seen == [("trainer", "module"), ("trainer", "module")]
