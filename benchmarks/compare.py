"""Run the same sweep under fluidsalus (through each front end), Ray Tune and Optuna, one after another.

    python benchmarks/compare.py --sweep trivial                      # engine overhead only
    python benchmarks/compare.py --sweep digits --tools fluidsalus_optuna,optuna
    python benchmarks/compare.py --sweep digits --json-only           # only the JSON line on stdout
    python benchmarks/compare.py --sweep digits --device cuda         # the digits MLPs on the GPU

Tools:

``fluidsalus``
    fluidsalus's own API: ``fluidsalus.run`` with its ``ASHA`` searcher.
``fluidsalus_tune``
    The Ray Tune script of the ``ray`` tool with its imports changed to ``from fluidsalus import tune``
    (``fluidsalus.tune.schedulers.ASHAScheduler``, ``fluidsalus.tune.search.BasicVariantGenerator``).
``fluidsalus_optuna``
    The Optuna script of the ``optuna`` tool with ``study.optimize(...)`` changed to
    ``fluidsalus.optuna.optimize(study, ...)``: the same study, sampler and pruner.
``ray``, ``optuna``
    Ray Tune 2.60 and Optuna with ``n_jobs=2`` (this machine's cores).

Sweeps:

``trivial``
    64 trials of 10 reports each, with no work at all: it measures each engine's own overhead. Ray is
    started once, before any timing, and shared by the Ray-based tools; ``wall_s`` excludes its start.
    For fluidsalus the script also times every ``fluidsalus.report`` call inside the trainable
    (``report_ms_p50``, ``report_ms_p95``).

``digits``
    81 random configurations of the digits MLP of ``examples/digits_mlp.py``, up to 27 epochs each,
    ``wall_s`` end to end as a user sees it: for every Ray-based tool it includes starting Ray (Ray is
    shut down between tools). Ray Tune and fluidsalus prune with ASHA and Optuna (and
    ``fluidsalus_optuna``, whose study it is) with successive halving, all with grace period 1 and reduction
    factor 3. ``best`` is the best validation accuracy found: the highest last-reported accuracy of any trial.

``--device cuda`` (digits only) trains every trial's model on the machine's GPU (the config key ``device`` of
``examples/digits_mlp.py``). Ray Tune then gets the fractional-GPU pattern its users write to share a GPU:
each trial asks for one CPU and ``1 / cores`` of the GPU, so as many trials share the GPU at once as there
are cores, each in its own process. The fluidsalus Ray Tune script asks for the same; fluidsalus reads the
GPU share as a hint and runs the trials as lanes of one device actor on the GPU. Optuna keeps ``n_jobs=2``
(the setting of the issue's target), its trials threads of one process sharing the GPU.

Each tool's own modules (``optuna``; ``ray.tune``; ``fluidsalus`` with its ``run``, ``fluidsalus.tune`` or
``fluidsalus.optuna``) are imported before its timed region, as a script imports them at its top
(:func:`import_tool`); what the trials import in their own processes is part of the run.

``cpu_s`` is the whole machine's busy CPU time over the same timed region (from ``/proc/stat``; null off
Linux): every process counts, Ray's helpers and the device actors included. On a machine of ``c`` cores a
tool cannot take less wall time than ``cpu_s / c``.

The script prints a table, and as its last line one JSON object::

    {"sweep": ..., "fluidsalus": {"wall_s": ..., "cpu_s": ..., "best": ..., ...}, "fluidsalus_tune": {...}, ...,
     "ray_over_fluidsalus": <Ray Tune wall_s / fluidsalus wall_s>, "optuna_over_fluidsalus": ...,
     "comparisons": {"fluidsalus_optuna": {"ray_over": ..., "optuna_over": ..., "best_minus_ray_pp": ...,
                                           "best_minus_optuna_pp": ...}, ...}}

A tool that was not asked for is ``null``; a tool that failed is ``{"error": "..."}`` (the others still
run, and the exit status is 1). A ratio is ``null`` unless both of its tools ran.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES_DIR = os.path.join(REPO_ROOT, "examples")


def _make_importable(*paths: str) -> None:
    """Let this process and Ray's worker processes import from ``paths``.

    Ray's workers inherit the environment of the process that starts Ray, so ``PYTHONPATH`` reaches them
    as long as it is set before Ray starts; ``sys.path`` covers this process.
    """
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *[p for p in current if p not in paths]])
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)


# fluidsalus (when it is not installed) and the digits example, in the driver and in the trials.
_make_importable(REPO_ROOT, EXAMPLES_DIR)

#: fluidsalus through each of its front ends (its own ``run``, the Ray Tune script with its imports changed, and
#: ``fluidsalus.optuna.optimize``), then the tools it replaces.
FLUIDSALUS_TOOLS = ("fluidsalus", "fluidsalus_tune", "fluidsalus_optuna")
TOOLS = (*FLUIDSALUS_TOOLS, "ray", "optuna")
SWEEPS = ("trivial", "digits")
#: Where the digits trials train (``--device``); the trivial sweep does no work on any device.
DEVICES = ("cpu", "cuda")
#: Seed of every tool's random search. fluidsalus and Ray Tune's BasicVariantGenerator sample the same
#: configurations for the same seed; Optuna's RandomSampler draws different ones from the same space (and
#: with n_jobs=2 not exactly the same ones from run to run).
SEED = 0

# ---- trivial sweep ----
TRIVIAL_TRIALS = 64
TRIVIAL_REPORTS = 10  # reports (iterations) per trial
TRIVIAL_METRIC, TRIVIAL_MODE = "score", "max"
TRIVIAL_X_RANGE = (0.0, 1.0)  # the one hyperparameter, x ~ uniform(0, 1)

# ---- digits sweep ----
DIGITS_TRIALS = 81  # 3**4 configurations
DIGITS_MAX_EPOCHS = 27  # 3**3: the full budget of a trial
DIGITS_METRIC, DIGITS_MODE = "accuracy", "max"
REDUCTION_FACTOR = 3  # of ASHA (Ray Tune) and successive halving (Optuna): keep the best third per rung
MIN_EPOCHS = 1  # ASHA's grace period and successive halving's min_resource: the first rung
OPTUNA_JOBS = 2  # Optuna's n_jobs: threads that run trials at once (this machine's 2 cores)
CPUS_PER_RAY_TRIAL = 1  # Ray Tune: one CPU, hence one torch thread, per trial


def trivial_value(x: float, step: int) -> float:
    """What a trivial trial reports at ``step`` (0-based): rises linearly to ``x`` at the last step."""
    return x * (step + 1) / TRIVIAL_REPORTS


# -----------------------------------------------------------------------------------------------------
# Helpers
# -----------------------------------------------------------------------------------------------------


def ray_trial_resources(device: str) -> dict[str, float]:
    """What each trial of a Ray Tune script asks for: one CPU, and on a GPU a 1/cores share of it."""
    if device == "cpu":
        return {"cpu": CPUS_PER_RAY_TRIAL}
    return {"cpu": CPUS_PER_RAY_TRIAL, "gpu": 1.0 / (os.cpu_count() or 1)}


def ray_init() -> None:
    """Start a local Ray with every core; the same call for every Ray-based tool.

    ``address="local"``: a new cluster of this size even where another Ray runs on the machine (``ray start``, or
    a test's), which a plain ``ray.init`` would join, and refuse for the ``num_cpus`` it is given.
    """
    import ray

    ray.init(address="local", num_cpus=os.cpu_count() or 2, include_dashboard=False, configure_logging=False)


def ray_shutdown() -> None:
    import ray

    release_warm_devices()
    if ray.is_initialized():
        ray.shutdown()


def release_warm_devices() -> None:
    """End the device actors a fluidsalus run keeps warm for the next run of the process: each tool's run starts
    cold, as a user's first run does, and a Ray tool after a fluidsalus one finds every core free."""
    if "fluidsalus.api" in sys.modules:
        import fluidsalus

        fluidsalus.release_devices()


@contextlib.contextmanager
def storage_dir(tool: str) -> Iterator[str]:
    """A temporary folder for one tool's experiment files, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"compare_{tool}_", ignore_cleanup_errors=True) as path:
        yield path


#: Where Linux counts the whole machine's CPU time (first line: user, nice, system, idle, iowait, ...).
PROC_STAT = "/proc/stat"


def machine_busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy (not idle or waiting for I/O) since boot; None off Linux.

    Every process counts (Ray's helpers and device actors as well as this one), which is what a 2-core machine
    has to share.
    """
    try:
        with open(PROC_STAT) as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


class Clock:
    """Wall time and the machine's busy CPU time from its creation to :meth:`stop`."""

    def __init__(self) -> None:
        self.cpu0 = machine_busy_cpu_s()
        self.start = time.perf_counter()

    def stop(self) -> tuple[float, float | None]:
        """``(wall_s, cpu_s)``; ``cpu_s`` is None where the machine's CPU time cannot be read."""
        wall_s = time.perf_counter() - self.start
        cpu1 = machine_busy_cpu_s()
        return wall_s, None if self.cpu0 is None or cpu1 is None else round(cpu1 - self.cpu0, 2)


def summary(wall_s: float, trials: int, iterations: int, best: float, cpu_s: float | None = None,
            **extra: Any) -> dict[str, Any]:
    """One tool's JSON entry."""
    return {
        "wall_s": round(wall_s, 3),
        "cpu_s": cpu_s,  # the whole machine's busy CPU seconds over the same time
        "trials": trials,
        "trials_per_s": round(trials / wall_s, 3) if wall_s > 0 else None,
        "iterations": iterations,  # reports over all trials (epochs trained, for digits)
        "best": best,
        **extra,
    }


def check_no_trial_errors(tool: str, errors: list[Any]) -> None:
    """A sweep whose trials fail measures nothing: make the tool fail, showing the first error."""
    if errors:
        raise RuntimeError(f"{tool}: {len(errors)} trial(s) failed; the first: {errors[0]}")


def optuna_study(direction: str, pruner: Any = None) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        direction=direction, sampler=optuna.samplers.RandomSampler(seed=SEED), pruner=pruner
    )


def optuna_best_last_value(study: Any, mode: str) -> float:
    """The best of the trials' last reported values (pruned trials included, as for the other tools)."""
    last = [t.intermediate_values[max(t.intermediate_values)] for t in study.trials if t.intermediate_values]
    return max(last) if mode == "max" else min(last)


def optuna_iterations(study: Any) -> int:
    return sum(len(t.intermediate_values) for t in study.trials)


def tune_modules(front_end: str) -> tuple[Any, Any, Any]:
    """``(tune, tune.schedulers, tune.search)`` of Ray Tune (``"ray"``) or of fluidsalus's drop-in front end.

    A Ray Tune script switches by changing ``from ray import tune`` to ``from fluidsalus import tune`` (and the
    same for ``tune.schedulers``/``tune.search``); the rest of the script is shared code below.
    """
    if front_end == "ray":
        from ray import tune
        from ray.tune import schedulers, search
    else:
        from fluidsalus import tune
        from fluidsalus.tune import schedulers, search
    return tune, schedulers, search


def import_tool(tool: str) -> None:
    """Import ``tool``'s own modules, before its timed region: the tools are run in turn in one process, so
    without this the first fluidsalus tool would pay the import of ``fluidsalus.run`` (fluidsalus imports it
    lazily, on first use) or ``fluidsalus.optuna`` inside its time and the others would not."""
    if tool == "fluidsalus":
        import fluidsalus.api
        import fluidsalus.searchers  # noqa: F401
    elif tool == "fluidsalus_optuna":
        import fluidsalus.optuna  # noqa: F401
    elif tool == "optuna":
        import optuna  # noqa: F401
    else:
        tune_modules(tool)


def optimize(front_end: str, study: Any, objective: Callable[[Any], float], n_trials: int, storage: str) -> None:
    """``study.optimize(objective, n_trials, n_jobs=2)``, or the same through ``fluidsalus.optuna.optimize``.

    fluidsalus ignores ``n_jobs`` (its lanes decide how many trials run at once) and starts Ray itself when
    it is not running: that start is inside the caller's timed region, as a user waits for it.
    """
    if front_end == "optuna":
        study.optimize(objective, n_trials=n_trials, n_jobs=OPTUNA_JOBS)
    else:
        import fluidsalus.optuna

        fluidsalus.optuna.optimize(study, objective, n_trials=n_trials, n_jobs=OPTUNA_JOBS, storage_path=storage)


# -----------------------------------------------------------------------------------------------------
# trivial: engine overhead
# -----------------------------------------------------------------------------------------------------


def fluidsalus_trivial_trainable(config: dict[str, Any]) -> None:
    """Reports TRIVIAL_REPORTS times; each report carries how long the previous ``report`` call took."""
    import fluidsalus

    prev_report_ms = None
    for step in range(TRIVIAL_REPORTS):
        metrics = {TRIVIAL_METRIC: trivial_value(config["x"], step)}
        if prev_report_ms is not None:
            metrics["prev_report_ms"] = prev_report_ms
        start = time.perf_counter()
        fluidsalus.report(metrics)
        prev_report_ms = (time.perf_counter() - start) * 1e3


def fluidsalus_trivial() -> dict[str, Any]:
    import fluidsalus

    with storage_dir("fluidsalus") as storage:
        clock = Clock()
        grid = fluidsalus.run(
            fluidsalus_trivial_trainable,
            config={"x": fluidsalus.uniform(*TRIVIAL_X_RANGE)},
            num_samples=TRIVIAL_TRIALS,
            metric=TRIVIAL_METRIC,
            mode=TRIVIAL_MODE,
            storage_path=storage,
            seed=SEED,
            verbose=0,
        )
        wall_s, cpu_s = clock.stop()
        check_no_trial_errors("fluidsalus", grid.errors)
        report_ms = [
            ms
            for result in grid
            if result.metrics_dataframe is not None and "prev_report_ms" in result.metrics_dataframe
            for ms in result.metrics_dataframe["prev_report_ms"].dropna()
        ]
        return summary(
            wall_s,
            cpu_s=cpu_s,
            trials=len(grid),
            iterations=sum(int(r.metrics.get("training_iteration", 0)) for r in grid if r.metrics),
            best=grid.get_best_result().metrics[TRIVIAL_METRIC],
            report_ms_p50=round(statistics.median(report_ms), 4) if report_ms else None,
            report_ms_p95=round(statistics.quantiles(report_ms, n=20)[-1], 4) if len(report_ms) > 1 else None,
        )


def ray_trivial_trainable(config: dict[str, Any]) -> None:
    from ray import tune

    for step in range(TRIVIAL_REPORTS):
        tune.report({TRIVIAL_METRIC: trivial_value(config["x"], step)})


def fluidsalus_tune_trivial_trainable(config: dict[str, Any]) -> None:
    """:func:`ray_trivial_trainable` with its import changed, as a Ray Tune user switching would do."""
    from fluidsalus import tune

    for step in range(TRIVIAL_REPORTS):
        tune.report({TRIVIAL_METRIC: trivial_value(config["x"], step)})


def tune_trivial(front_end: str) -> dict[str, Any]:
    """The Ray Tune script of the trivial sweep, on ``ray.tune`` or (imports changed) ``fluidsalus.tune``."""
    tune, _, search = tune_modules(front_end)
    trainable = ray_trivial_trainable if front_end == "ray" else fluidsalus_tune_trivial_trainable
    with storage_dir(front_end) as storage:
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": CPUS_PER_RAY_TRIAL}),
            tune_config=tune.TuneConfig(
                num_samples=TRIVIAL_TRIALS,
                metric=TRIVIAL_METRIC,
                mode=TRIVIAL_MODE,
                search_alg=search.BasicVariantGenerator(random_state=SEED),
            ),
            param_space={"x": tune.uniform(*TRIVIAL_X_RANGE)},
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        )
        clock = Clock()
        results = tuner.fit()
        wall_s, cpu_s = clock.stop()
        check_no_trial_errors(front_end, results.errors)
        return summary(
            wall_s,
            cpu_s=cpu_s,
            trials=len(results),
            iterations=sum(int(r.metrics.get("training_iteration", 0)) for r in results if r.metrics),
            best=results.get_best_result().metrics[TRIVIAL_METRIC],
        )


def trivial_objective(trial: Any) -> float:
    """The trivial sweep as an Optuna objective (module level, so fluidsalus can pickle it to its devices)."""
    x = trial.suggest_float("x", *TRIVIAL_X_RANGE)
    value = 0.0
    for step in range(TRIVIAL_REPORTS):
        value = trivial_value(x, step)
        trial.report(value, step)
    return value


def optuna_trivial(front_end: str = "optuna") -> dict[str, Any]:
    """The Optuna script of the trivial sweep: ``study.optimize`` or ``fluidsalus.optuna.optimize``."""
    study = optuna_study("maximize" if TRIVIAL_MODE == "max" else "minimize")
    with storage_dir(front_end) as storage:
        clock = Clock()
        optimize(front_end, study, trivial_objective, TRIVIAL_TRIALS, storage)
        wall_s, cpu_s = clock.stop()
    return summary(
        wall_s,
        cpu_s=cpu_s,
        trials=len(study.trials),
        iterations=optuna_iterations(study),
        best=optuna_best_last_value(study, TRIVIAL_MODE),
    )


# -----------------------------------------------------------------------------------------------------
# digits: the MLP of examples/digits_mlp.py
# -----------------------------------------------------------------------------------------------------


def digits_module() -> Any:
    """``examples/digits_mlp.py``, imported on first use (it needs torch, scikit-learn and fluidsalus)."""
    import digits_mlp

    return digits_mlp


def run_fluidsalus_digits(storage: str, device: str) -> Any:
    """The fluidsalus digits sweep: ASHA with the same settings as Ray Tune's ASHAScheduler above."""
    import fluidsalus
    from fluidsalus.searchers import ASHA

    d = digits_module()
    space = {**d.SEARCH_SPACE, "epochs": DIGITS_MAX_EPOCHS, "device": device}
    asha = ASHA(space, num_samples=DIGITS_TRIALS, metric=DIGITS_METRIC, mode=DIGITS_MODE, max_t=DIGITS_MAX_EPOCHS,
                grace_period=MIN_EPOCHS, reduction_factor=REDUCTION_FACTOR, seed=SEED)
    return fluidsalus.run(
        d.digits_trainable,
        searcher=asha,
        metric=DIGITS_METRIC,
        mode=DIGITS_MODE,
        storage_path=storage,
        verbose=0,
    )


def fluidsalus_digits(device: str) -> dict[str, Any]:
    digits_module()  # import outside the timed region, as for the other tools
    ray_shutdown()  # fluidsalus starts Ray itself: that is part of what a user waits for
    with storage_dir("fluidsalus") as storage:
        try:
            clock = Clock()
            grid = run_fluidsalus_digits(storage, device)
            wall_s, cpu_s = clock.stop()
        finally:
            ray_shutdown()
        check_no_trial_errors("fluidsalus", grid.errors)
        return summary(
            wall_s,
            cpu_s=cpu_s,
            trials=len(grid),
            iterations=sum(int(r.metrics.get("training_iteration", 0)) for r in grid if r.metrics),
            best=grid.get_best_result(scope="last").metrics[DIGITS_METRIC],
        )


def tune_digits_space(front_end: str, device: str) -> dict[str, Any]:
    """``digits_mlp.SEARCH_SPACE`` with the front end's sampling functions, keys in the same order, on ``device``."""
    tune, _, _ = tune_modules(front_end)
    d = digits_module()
    space = {
        "lr": tune.loguniform(*d.LR_RANGE),
        "momentum": tune.uniform(*d.MOMENTUM_RANGE),
        "hidden": tune.choice(d.HIDDEN_CHOICES),
        "layers": tune.choice(d.LAYERS_CHOICES),
        "batch_size": tune.choice(d.BATCH_SIZE_CHOICES),
        "optimizer": d.SEARCH_SPACE["optimizer"],
        "epochs": DIGITS_MAX_EPOCHS,
        "seed": d.SEARCH_SPACE["seed"],
    }
    assert list(space) == list(d.SEARCH_SPACE), "tune_digits_space is out of step with SEARCH_SPACE"
    return {**space, "device": device}


def ray_digits_trainable(config: dict[str, Any]) -> None:
    import torch
    from ray import tune

    torch.set_num_threads(CPUS_PER_RAY_TRIAL)
    for result in digits_module().train_epochs(config):
        tune.report(result)


def fluidsalus_tune_digits_trainable(config: dict[str, Any]) -> None:
    """:func:`ray_digits_trainable` with its import changed, as a Ray Tune user switching would do."""
    import torch

    from fluidsalus import tune

    torch.set_num_threads(CPUS_PER_RAY_TRIAL)
    for result in digits_module().train_epochs(config):
        tune.report(result)


def tune_digits(front_end: str, device: str) -> dict[str, Any]:
    """The Ray Tune script of the digits sweep, on ``ray.tune`` or (imports changed) ``fluidsalus.tune``."""
    tune, schedulers, search = tune_modules(front_end)
    trainable = ray_digits_trainable if front_end == "ray" else fluidsalus_tune_digits_trainable
    ray_shutdown()
    with storage_dir(front_end) as storage:
        try:
            clock = Clock()
            ray_init()
            tuner = tune.Tuner(
                tune.with_resources(trainable, ray_trial_resources(device)),
                tune_config=tune.TuneConfig(
                    num_samples=DIGITS_TRIALS,
                    metric=DIGITS_METRIC,
                    mode=DIGITS_MODE,
                    search_alg=search.BasicVariantGenerator(random_state=SEED),
                    scheduler=schedulers.ASHAScheduler(
                        time_attr="training_iteration",
                        max_t=DIGITS_MAX_EPOCHS,
                        grace_period=MIN_EPOCHS,
                        reduction_factor=REDUCTION_FACTOR,
                    ),
                ),
                param_space=tune_digits_space(front_end, device),
                run_config=tune.RunConfig(storage_path=storage, verbose=0),
            )
            results = tuner.fit()
            wall_s, cpu_s = clock.stop()
        finally:
            ray_shutdown()
        check_no_trial_errors(front_end, results.errors)
        return summary(
            wall_s,
            cpu_s=cpu_s,
            trials=len(results),
            iterations=sum(int(r.metrics.get("training_iteration", 0)) for r in results if r.metrics),
            best=results.get_best_result(scope="last").metrics[DIGITS_METRIC],
        )


def optuna_digits_config(trial: Any, device: str) -> dict[str, Any]:
    """``digits_mlp.SEARCH_SPACE`` through Optuna's suggest API, mapped by hand, on ``device``."""
    d = digits_module()
    config = {
        "lr": trial.suggest_float("lr", *d.LR_RANGE, log=True),
        "momentum": trial.suggest_float("momentum", *d.MOMENTUM_RANGE),
        "hidden": trial.suggest_categorical("hidden", d.HIDDEN_CHOICES),
        "layers": trial.suggest_categorical("layers", d.LAYERS_CHOICES),
        "batch_size": trial.suggest_categorical("batch_size", d.BATCH_SIZE_CHOICES),
        "optimizer": d.SEARCH_SPACE["optimizer"],
        "epochs": DIGITS_MAX_EPOCHS,
        "seed": d.SEARCH_SPACE["seed"],
    }
    assert list(config) == list(d.SEARCH_SPACE), "optuna_digits_config is out of step with SEARCH_SPACE"
    return {**config, "device": device}


def digits_objective(trial: Any, device: str = "cpu") -> float:
    """The digits sweep as an Optuna objective with pruning (module level, so fluidsalus can pickle it)."""
    import optuna

    accuracy = 0.0
    for result in digits_module().train_epochs(optuna_digits_config(trial, device)):
        accuracy = result[DIGITS_METRIC]
        trial.report(accuracy, result["epoch"])
        if trial.should_prune():
            raise optuna.TrialPruned()
    return accuracy


def optuna_digits(front_end: str, device: str) -> dict[str, Any]:
    """The Optuna script of the digits sweep: ``study.optimize`` or ``fluidsalus.optuna.optimize``."""
    import optuna
    import torch

    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=MIN_EPOCHS, reduction_factor=REDUCTION_FACTOR)
    study = optuna_study("maximize" if DIGITS_MODE == "max" else "minimize", pruner=pruner)
    threads = torch.get_num_threads()
    if front_end == "optuna":
        torch.set_num_threads(1)  # trials run as threads of this process: one torch thread each
    else:
        ray_shutdown()  # fluidsalus starts Ray itself: that is part of what a user waits for
    try:
        with storage_dir(front_end) as storage:
            clock = Clock()
            optimize(front_end, study, functools.partial(digits_objective, device=device), DIGITS_TRIALS, storage)
            wall_s, cpu_s = clock.stop()
    finally:
        torch.set_num_threads(threads)
        if front_end != "optuna":
            ray_shutdown()
    return summary(
        wall_s,
        cpu_s=cpu_s,
        trials=len(study.trials),
        iterations=optuna_iterations(study),
        best=optuna_best_last_value(study, DIGITS_MODE),
    )


# -----------------------------------------------------------------------------------------------------
# Driver
# -----------------------------------------------------------------------------------------------------

#: Each sweep's runner per tool, called with the ``--device`` (the trivial sweep runs on none).
RUNNERS: dict[str, dict[str, Callable[[str], dict[str, Any]]]] = {
    "trivial": {
        "fluidsalus": lambda device: fluidsalus_trivial(),
        "fluidsalus_tune": lambda device: tune_trivial("fluidsalus_tune"),
        "fluidsalus_optuna": lambda device: optuna_trivial("fluidsalus_optuna"),
        "ray": lambda device: tune_trivial("ray"),
        "optuna": lambda device: optuna_trivial(),
    },
    "digits": {
        "fluidsalus": fluidsalus_digits,
        "fluidsalus_tune": lambda device: tune_digits("fluidsalus_tune", device),
        "fluidsalus_optuna": lambda device: optuna_digits("fluidsalus_optuna", device),
        "ray": lambda device: tune_digits("ray", device),
        "optuna": lambda device: optuna_digits("optuna", device),
    },
}


def run_tools(sweep: str, tools: list[str], device: str = "cpu") -> dict[str, dict[str, Any] | None]:
    """Run ``sweep`` under each tool in turn; a failing tool gets ``{"error": ...}``."""
    entries: dict[str, dict[str, Any] | None] = {tool: None for tool in TOOLS}
    # For the trivial sweep Ray's start is not part of any tool's time: start it once, before timing.
    shared_ray = sweep == "trivial" and any(tool != "optuna" for tool in tools)
    try:
        if shared_ray:
            ray_init()
        for tool in tools:
            print(f"\n=== {sweep}: {tool} ===", flush=True)
            try:
                import_tool(tool)
                entries[tool] = RUNNERS[sweep][tool](device)
                print(f"{tool}: {entries[tool]}", flush=True)
            except Exception as e:  # noqa: BLE001 - report any failure and go on with the next tool
                traceback.print_exc()
                entries[tool] = {"error": f"{type(e).__name__}: {e}"}
            release_warm_devices()
    finally:
        ray_shutdown()
    return entries


def ratio(entries: dict[str, dict[str, Any] | None], tool: str, ours: str = "fluidsalus") -> float | None:
    """``tool``'s wall time over ``ours``'s, or None unless both ran."""
    mine, theirs = entries.get(ours), entries.get(tool)
    if not mine or not theirs or "wall_s" not in mine or "wall_s" not in theirs or mine["wall_s"] <= 0:
        return None
    return round(theirs["wall_s"] / mine["wall_s"], 3)


def best_gap_pp(entries: dict[str, dict[str, Any] | None], tool: str, ours: str) -> float | None:
    """``ours``'s best minus ``tool``'s, in percentage points (digits: accuracy), or None unless both ran."""
    mine, theirs = entries.get(ours), entries.get(tool)
    if not mine or not theirs or "best" not in mine or "best" not in theirs:
        return None
    return round(100.0 * (mine["best"] - theirs["best"]), 2)


def comparisons(entries: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, float | None]]:
    """For each fluidsalus front end that ran: how much faster than Ray Tune and Optuna, and the best's gap."""
    return {
        ours: {
            "ray_over": ratio(entries, "ray", ours),
            "optuna_over": ratio(entries, "optuna", ours),
            "best_minus_ray_pp": best_gap_pp(entries, "ray", ours),
            "best_minus_optuna_pp": best_gap_pp(entries, "optuna", ours),
        }
        for ours in FLUIDSALUS_TOOLS
        if entries.get(ours) and "wall_s" in entries[ours]  # type: ignore[operator]
    }


def print_table(sweep: str, entries: dict[str, dict[str, Any] | None], device: str = "cpu") -> None:
    columns = ("tool", "wall_s", "cpu_s", "trials", "trials/s", "iterations", "best", "wall / fluidsalus")
    rows = []
    for tool, entry in entries.items():
        if entry is None:
            continue
        if "error" in entry:
            rows.append((tool, f"FAILED: {entry['error']}"))
            continue
        rel = 1.0 if tool == "fluidsalus" else ratio(entries, tool)
        rows.append((
            tool,
            f"{entry['wall_s']:.2f}",
            "-" if entry.get("cpu_s") is None else f"{entry['cpu_s']:.1f}",
            str(entry["trials"]),
            f"{entry['trials_per_s']:.2f}",
            str(entry["iterations"]),
            f"{entry['best']:.4f}",
            "-" if rel is None else f"{rel:.2f}x",
        ))
    # A failed tool's row is (tool, message): its message may run past the columns without widening them.
    widths = [max([len(columns[i]), *(len(r[i]) for r in rows if len(r) == len(columns) or i == 0)])
              for i in range(len(columns))]
    print(f"\nSweep: {sweep}" + (f" (trials on {device})" if device != "cpu" else ""))
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip())
    for ours, c in comparisons(entries).items():
        shown = [f"{k} {v}" for k, v in c.items() if v is not None]
        if shown:
            print(f"{ours}: " + ", ".join(shown))
    ours = entries.get("fluidsalus")
    if ours and ours.get("report_ms_p50") is not None:
        print(f"fluidsalus.report(): p50 {ours['report_ms_p50']:.4f} ms, p95 {ours['report_ms_p95']:.4f} ms")


def parse_tools(text: str) -> list[str]:
    tools = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        raise argparse.ArgumentTypeError(f"choose from {','.join(TOOLS)}; got {text!r}")
    return list(dict.fromkeys(tools))


def main() -> int:
    parser = argparse.ArgumentParser(description="Compare fluidsalus, Ray Tune and Optuna on one sweep.")
    parser.add_argument("--sweep", choices=SWEEPS, required=True)
    parser.add_argument("--tools", type=parse_tools, default=list(TOOLS),
                        help=f"comma-separated subset of {','.join(TOOLS)} (default: all)")
    parser.add_argument("--json-only", action="store_true",
                        help="print only the JSON line on stdout (everything else goes to stderr)")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="where the digits trials train (default cpu); cuda needs a GPU")
    args = parser.parse_args()
    if args.device != "cpu":
        if args.sweep != "digits":
            parser.error(f"--device {args.device}: only the digits sweep trains on a device")
        import torch

        if not torch.cuda.is_available():
            parser.error(f"--device {args.device}: torch {torch.__version__} sees no CUDA GPU here")

    progress = sys.stderr if args.json_only else sys.stdout
    with contextlib.redirect_stdout(progress):
        entries = run_tools(args.sweep, args.tools, args.device)
        print_table(args.sweep, entries, args.device)
    out = {
        "sweep": args.sweep,
        "device": args.device,
        **entries,
        "ray_over_fluidsalus": ratio(entries, "ray"),
        "optuna_over_fluidsalus": ratio(entries, "optuna"),
        "comparisons": comparisons(entries),
    }
    print(json.dumps(out), flush=True)
    return 1 if any(e is not None and "error" in e for e in entries.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
