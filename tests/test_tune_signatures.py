"""Signatures: every name a Ray Tune script touches has Ray's parameter names, kinds and defaults (checked against
the installed Ray with ``inspect.signature``).

Kept apart from tests/test_tune_frontend.py: building the pairs imports Ray's and fluidsalus's integrations, and
Lightning's import alone takes about 5 s. The trainables of the front-end tests are pickled by reference to their
module, so every device actor of every run there would import this too.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect

import pytest

rt = pytest.importorskip("ray.tune")
from fluidsalus import tune  # noqa: E402

_TOP_LEVEL = [
    "Tuner", "TuneConfig", "RunConfig", "CheckpointConfig", "FailureConfig", "report", "get_checkpoint",
    "get_context", "Checkpoint", "with_resources", "with_parameters", "Stopper", "Callback", "Trainable",
    "PlacementGroupFactory", "uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn", "randint",
    "qrandint", "lograndint", "qlograndint", "choice", "grid_search", "sample_from", "run", "ExperimentAnalysis",
    "create_scheduler", "create_searcher", "Experiment", "run_experiments", "CLIReporter", "JupyterNotebookReporter",
    "SyncConfig", "ResumeConfig", "register_trainable",
]
_ANALYSIS_METHODS = ["get_all_configs", "dataframe", "get_best_checkpoint", "get_best_trial", "get_best_config",
                     "get_last_checkpoint"]
_SCHEDULERS = ["ASHAScheduler", "AsyncHyperBandScheduler", "HyperBandScheduler", "HyperBandForBOHB",
               "FIFOScheduler", "MedianStoppingRule", "PopulationBasedTraining"]
_STOPPERS = ["CombinedStopper", "ExperimentPlateauStopper", "FunctionStopper", "MaximumIterationStopper",
             "NoopStopper", "TimeoutStopper", "TrialPlateauStopper"]
_CALLBACK_HOOKS = ["setup", "on_trial_start", "on_trial_result", "on_trial_complete", "on_trial_error",
                   "on_experiment_end", "on_step_begin", "on_step_end", "on_checkpoint", "on_trial_save",
                   "on_trial_restore", "on_trial_recover"]
_TRAINABLE_METHODS = ["setup", "step", "save_checkpoint", "load_checkpoint", "cleanup", "reset_config", "train",
                      "save", "restore", "stop", "get_config", "export_model", "_export_model", "resource_help"]


def _ray_pairs() -> list[tuple[str, object, object]]:
    import ray.train as ray_train
    import ray.train._internal.session as ray_train_v1_session
    import ray.tune.registry as ray_registry
    import ray.tune.schedulers as ray_schedulers
    import ray.tune.schedulers.pb2 as ray_pb2
    import ray.tune.search as ray_search
    import ray.tune.stopper as ray_stopper
    from ray.tune.integration import pytorch_lightning as ray_lightning
    from ray.tune.search.bohb import bohb_search as ray_bohb
    from ray.tune.search.optuna import OptunaSearch as RayOptunaSearch

    from fluidsalus import train as fluidsalus_train
    from fluidsalus.tune.integration import pytorch_lightning as our_lightning
    from fluidsalus.tune.search.bohb import TuneBOHB
    from fluidsalus.tune.search.optuna import OptunaSearch

    pairs = [(name, getattr(tune, name), getattr(rt, name)) for name in _TOP_LEVEL]
    for method in ("restore", "can_restore", "fit", "get_results"):
        pairs.append((f"Tuner.{method}", getattr(tune.Tuner, method), getattr(rt.Tuner, method)))
    pairs += [(name, getattr(tune.schedulers, name), getattr(ray_schedulers, name)) for name in _SCHEDULERS]
    pairs += [(name, getattr(tune.search, name), getattr(ray_search, name))
              for name in ("BasicVariantGenerator", "ConcurrencyLimiter", "Searcher")]
    pairs += [("OptunaSearch", OptunaSearch, RayOptunaSearch), ("TuneBOHB", TuneBOHB, ray_bohb.TuneBOHB)]
    pairs += [("PB2", tune.schedulers.PB2, ray_pb2.PB2)]
    # Ray's integration modules import their library: without it (the GPU image lacks both) they are left out.
    for library in (lib for lib in ("xgboost", "lightgbm") if importlib.util.find_spec(lib) is not None):
        ours = importlib.import_module(f"fluidsalus.tune.integration.{library}")
        theirs = importlib.import_module(f"ray.tune.integration.{library}")
        pairs += [(f"integration.{library}.TuneReportCheckpointCallback{method}",
                   getattr(ours.TuneReportCheckpointCallback, attr), getattr(theirs.TuneReportCheckpointCallback, attr))
                  for method, attr in (("", "__init__"), (".get_model", "get_model"))]
    pairs += [(f"integration.pytorch_lightning.{name}", getattr(our_lightning, name).__init__,
               getattr(ray_lightning, name).__init__)
              for name in ("TuneCallback", "TuneReportCheckpointCallback", "TuneReportCallback")]
    pairs += [("registry.get_trainable_cls", tune.registry.get_trainable_cls, ray_registry.get_trainable_cls)]
    pairs += [(name, getattr(tune.stopper, name), getattr(ray_stopper, name)) for name in _STOPPERS]
    pairs += [(f"Callback.{h}", getattr(tune.Callback, h), getattr(rt.Callback, h)) for h in _CALLBACK_HOOKS]
    pairs += [(f"Trainable.{m}", getattr(tune.Trainable, m), getattr(rt.Trainable, m)) for m in _TRAINABLE_METHODS]
    pairs += [(f"ResultGrid.{m}", getattr(tune.ResultGrid, m), getattr(rt.ResultGrid, m))
              for m in ("get_best_result", "get_dataframe")]
    pairs += [("Result.from_path", tune.Result.from_path, rt.Result.from_path)]
    pairs += [(f"ExperimentAnalysis.{m}", getattr(tune.ExperimentAnalysis, m), getattr(rt.ExperimentAnalysis, m))
              for m in _ANALYSIS_METHODS]
    # Ray Train V1's report: the one a Tune function could call (Ray 2.60's default V2 refuses it there).
    pairs += [("train.report", fluidsalus_train.report, ray_train_v1_session.report)]
    pairs += [(f"train.{name}", getattr(fluidsalus_train, name), getattr(ray_train, name))
              for name in ("get_checkpoint", "get_context", "SyncConfig")]
    return pairs


def _public_parameters(obj: object) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(obj).parameters.values() if not p.name.startswith("_") and p.name != "self"]


def _is_private_sentinel(value: object) -> bool:
    """Ray marks deprecated arguments with private sentinel defaults (``_MISSING = object()``)."""
    return type(value) is object


@pytest.mark.parametrize("name, ours, theirs", _ray_pairs(), ids=lambda v: v if isinstance(v, str) else "")
def test_signature_matches_ray(name: str, ours: object, theirs: object) -> None:
    mine, ray_params = _public_parameters(ours), _public_parameters(theirs)
    assert [(p.name, p.kind) for p in mine] == [(p.name, p.kind) for p in ray_params], name
    for a, b in zip(mine, ray_params, strict=True):
        if _is_private_sentinel(b.default):
            assert a.default is not inspect.Parameter.empty, f"{name}.{a.name} needs a default"
            continue
        # An enum default (ResumeConfig's) is compared by its value: Ray's enum class is not ours.
        mine_default, ray_default = (getattr(d, "value", d) for d in (a.default, b.default))
        assert mine_default == ray_default, f"{name}.{a.name}: default {a.default!r}, Ray's is {b.default!r}"
