"""Ray Tune's module paths that scripts import from exist under ``fluidsalus.tune`` with the same names, so a
script runs with ``ray.tune`` rewritten to ``fluidsalus.tune`` in its imports."""

from __future__ import annotations

import importlib

import pytest

#: (module under ray.tune / fluidsalus.tune, names a script imports from it).
PATHS = [
    ("experiment", ["Experiment", "Trial"]),
    ("experiment.trial", ["Trial"]),
    ("execution.placement_groups", ["PlacementGroupFactory"]),
    ("trainable", ["Trainable", "with_parameters"]),
    ("result_grid", ["ResultGrid"]),
    ("tune_config", ["TuneConfig", "ResumeConfig"]),
    ("tuner", ["Tuner"]),
    ("error", ["TuneError"]),
    ("search", ["BasicVariantGenerator", "ConcurrencyLimiter", "Repeater", "SearchGenerator", "Searcher",
                "grid_search", "UNDEFINED_METRIC_MODE", "UNDEFINED_SEARCH_SPACE", "UNRESOLVED_SEARCH_SPACE"]),
    ("search.basic_variant", ["BasicVariantGenerator"]),
    ("search.concurrency_limiter", ["ConcurrencyLimiter"]),
    ("search.repeater", ["Repeater", "TRIAL_INDEX"]),
    ("search.searcher", ["Searcher", "ConcurrencyLimiter"]),
    ("search.search_generator", ["SearchGenerator"]),
    ("search.search_algorithm", ["SearchAlgorithm"]),
    ("context", ["TuneContext", "get_context"]),
    ("syncer", ["SyncConfig"]),
    ("search.sample", ["Categorical", "Domain", "Float", "Function", "Integer", "choice", "loguniform", "randint",
                       "sample_from", "uniform"]),
    ("schedulers.resource_changing_scheduler", ["ResourceChangingScheduler", "DistributeResources",
                                                "DistributeResourcesToTopJob"]),
    ("utils", ["flatten_dict", "merge_dicts", "deep_update", "unflattened_lookup", "date_str", "wait_for_gpu",
               "validate_save_restore", "diagnose_serialization"]),
    ("logger", ["pretty_print", "LoggerCallback", "CSVLoggerCallback", "JsonLoggerCallback"]),
    ("search.nevergrad", ["NevergradSearch"]),
    ("search.zoopt", ["ZOOptSearch"]),
    ("integration.xgboost", ["TuneReportCheckpointCallback", "TuneReportCallback"]),
    ("integration.lightgbm", ["TuneReportCheckpointCallback", "TuneReportCallback"]),
    ("integration.pytorch_lightning", ["TuneCallback", "TuneReportCheckpointCallback", "TuneReportCallback"]),
]


@pytest.mark.parametrize("module, names", PATHS, ids=[m for m, _ in PATHS])
def test_rays_module_path_exists_with_the_same_names(module, names) -> None:
    if module.startswith("integration."):  # Ray's integration module imports its library (the GPU image lacks some)
        pytest.importorskip(module.split(".")[1])
    ray_module = importlib.import_module(f"ray.tune.{module}")
    ours = importlib.import_module(f"fluidsalus.tune.{module}")
    assert [n for n in names if not hasattr(ray_module, n)] == []  # the table names what Ray has
    assert [n for n in names if not hasattr(ours, n)] == []


def test_the_paths_name_the_same_objects_as_the_package() -> None:
    from fluidsalus.searchers._repeat import TRIAL_INDEX
    from fluidsalus.tune import search
    from fluidsalus.tune.search.repeater import TRIAL_INDEX as ray_named
    from fluidsalus.tune.search.searcher import Searcher

    assert Searcher is search.Searcher and ray_named == TRIAL_INDEX == "__trial_index__"


def test_a_callback_typed_with_rays_trial_class_gets_the_trial_view() -> None:
    from fluidsalus.tune.callback import TrialInfo
    from fluidsalus.tune.experiment import Trial

    assert Trial is TrialInfo
    trial = Trial("t1", {"x": 1}, trainable_name="train")
    assert str(trial) == "train_t1" and trial.config == {"x": 1}


def test_the_searcher_message_templates_take_rays_placeholders() -> None:
    """A search algorithm of your own formats them as Ray's searchers do."""
    from fluidsalus.tune.search import UNDEFINED_METRIC_MODE, UNDEFINED_SEARCH_SPACE, UNRESOLVED_SEARCH_SPACE

    assert "MySearch" in UNRESOLVED_SEARCH_SPACE.format(par="space", cls="MySearch")
    assert "'space'" in UNDEFINED_SEARCH_SPACE.format(cls="MySearch", space="'space'")
    message = UNDEFINED_METRIC_MODE.format(cls="MySearch", metric=None, mode="max")
    assert "metric (None)" in message and "mode (max)" in message


def test_tune_error_is_an_attribute_of_the_package_as_in_ray() -> None:
    """``except tune.error.TuneError`` after a bare ``from ray import tune`` (a callback's error ends a run with it):
    Ray's package imports its ``error`` module; ours did not, so the name failed unless something else imported it
    (checked in a fresh interpreter: this session's other tests may have imported it)."""
    import os
    import subprocess
    import sys

    import fluidsalus

    code = "from fluidsalus import tune; assert tune.error.TuneError is tune.TuneError"
    root = os.path.dirname(os.path.dirname(os.path.abspath(fluidsalus.__file__)))  # (this checkout's package)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
