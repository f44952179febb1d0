"""Randomised sweeps through the real engine, checked against what each trial's configuration implies.

Each test draws a run (random search or ASHA, lane policy, devices, trials per core, retries, checkpoint
retention) and a space of trials that report for a few iterations, checkpoint every few, fail a planned number
of times at a planned iteration (markers on disk count the failures, so restarts see them) and, in some runs,
kill their own device process once. Whatever the timing, the results must say exactly what the configurations imply:

- every row of a trial's history is its own (its tag and score) and its iteration is the one the trial counted,
  restored from its checkpoint after a failure or a device's death: no gaps, no repeats, no row of a neighbour;
- a trial errors exactly when its planned failures outnumber ``max_failures`` (and it got that far), with the
  planned error; only a device's death may hide a failure (the trial's error dies with the process before it is
  sent, and the restart is the death's, not counted), at most one per death the trial lived through; every
  other trial of a random search runs all its iterations;
- a trial's latest checkpoint is the one of its last checkpointed iteration.

The same for ``fluidsalus.optuna.optimize``: objectives that complete, return NaN, are pruned by themselves or by
the study's pruner, raise an exception in ``catch`` or one that is not; each study's trials must end in the state
their outcome implies, with their own values, steps and user attributes, and none may be left running.
"""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
import time
from collections import Counter
from typing import Any

import optuna
import pytest

import fluidsalus
import fluidsalus.optuna as fluidsalus_optuna
from fluidsalus.searchers import ASHA
from fluidsalus.store import ExperimentStore

#: The longest trial, in iterations (also ASHA's ``max_t``).
MAX_ITERS = 8
#: Seeds of the drawn runs, each a few seconds. These five cover random search and ASHA, one and two devices,
#: retries from none to unlimited, trials that fail for good, and device deaths (in 3, 13 and 21). More:
#: ``FLUIDSALUS_CHAOS_SEEDS=0,1,2,...`` (24 seeds passed when this was written).
SEEDS = [int(s) for s in os.environ.get("FLUIDSALUS_CHAOS_SEEDS", "0,3,13,21,23").split(",")]


def chaos_trainable(config: dict[str, Any]) -> None:
    """Report ``iters`` iterations; fail ``fails`` times at ``fail_at``; kill the device once at ``die_at``."""
    tag, marks = config["tag"], config["marks"]
    start = 0
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is not None:
        with open(os.path.join(checkpoint.path, "state.json")) as f:
            start = json.load(f)["i"]
    config_file = os.path.join(marks, f"config_{tag}.json")
    if not os.path.exists(config_file):
        with open(config_file + ".tmp", "w") as f:
            json.dump({k: v for k, v in config.items() if k != "marks"}, f)
        os.replace(config_file + ".tmp", config_file)
    for i in range(start, config["iters"]):
        time.sleep(config["dt"])
        iteration = i + 1
        if iteration == config["die_at"] and not os.path.exists(os.path.join(marks, f"died_{tag}")):
            open(os.path.join(marks, f"died_{tag}"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # the device process dies with every trial it runs
        if iteration == config["fail_at"]:
            failed = sum(1 for name in os.listdir(marks) if name.startswith(f"failed_{tag}_"))
            if failed < config["fails"]:
                open(os.path.join(marks, f"failed_{tag}_{failed}"), "w").close()
                raise RuntimeError(f"planned failure {failed} of trial {tag}")
        checkpoint = None
        if config["ckpt_every"] and iteration % config["ckpt_every"] == 0:
            folder = tempfile.mkdtemp()
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"i": iteration}, f)
            checkpoint = fluidsalus.Checkpoint.from_directory(folder)
        fluidsalus.report({"score": config["q"] * iteration, "counted": iteration, "tag": tag}, checkpoint=checkpoint)


def draw_run(seed: int, marks: str, storage: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The ``fluidsalus.run`` arguments and the search space of run ``seed``."""
    rng = random.Random(seed)
    space = {
        "tag": fluidsalus.randint(0, 10**9),
        "iters": fluidsalus.randint(1, MAX_ITERS + 1),
        "dt": fluidsalus.uniform(0.0, 0.02),
        "fail_at": fluidsalus.randint(1, MAX_ITERS + 1),
        "fails": fluidsalus.choice([0, 0, 1, 2, 3]),
        "ckpt_every": fluidsalus.choice([0, 1, 2, 3]),
        # a device dies in half of the runs: one trial in ten kills its process once
        "die_at": fluidsalus.choice([0] * 9 + [rng.randint(1, MAX_ITERS)]) if seed % 2 else 0,
        "q": fluidsalus.uniform(0.0, 1.0),
        "marks": marks,
    }
    devices = rng.choice([1, 2])
    kwargs: dict[str, Any] = dict(
        verbose=0, storage_path=storage, devices=devices, cpus_per_device=2 // devices,
        max_failures=rng.choice([0, 1, 2, -1]), lane_policy=rng.choice(["fifo", "fair", "rr", "pack", "srtf"]),
        checkpoint_num_to_keep=rng.choice([None, 1, 2]),
        # two trials per core in a third of the runs (a generator of its own keeps the other draws as they were)
        cpus_per_trial=random.Random(f"lanes {seed}").choice([None, None, 0.5]),
    )
    samples = rng.randint(12, 24)
    if seed % 4 >= 2:
        kwargs["searcher"] = ASHA(space, num_samples=samples, metric="score", mode="max", max_t=MAX_ITERS,
                                  grace_period=1, reduction_factor=rng.choice([2, 3]), seed=seed)
        return kwargs, None
    kwargs.update(num_samples=samples, metric="score", mode="max", seed=seed)  # (a searcher takes its own seed)
    return kwargs, space


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_sweep_keeps_every_result_and_ends_every_trial_as_its_config_implies(ray_cluster, tmp_path,
                                                                                      seed):
    marks = str(tmp_path / "marks")
    os.makedirs(marks)
    kwargs, space = draw_run(seed, marks, str(tmp_path / "results"))
    grid = fluidsalus.run(chaos_trainable, space, **kwargs)

    configs = {}
    for name in os.listdir(marks):
        if name.startswith("config_") and name.endswith(".json"):
            with open(os.path.join(marks, name)) as f:
                config = json.load(f)
            configs[config["tag"]] = config
    assert len(grid) == len(configs), "every trial the searcher made ran and has a result"
    limit = kwargs["max_failures"]
    # A device that dies takes the events its trials had not sent yet: a failure raised just before its
    # neighbour killed the process reaches the driver as that death, which is not the trial's failure and not
    # counted against max_failures. Such a trial may fail one more time per death it lived through.
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        deaths = Counter(e.trial_id for e in store.events("trial_restart") if e.data["reason"] == "device_died")
    finally:
        store.close()
    for result in grid:
        if result.config is None:  # it never started: Ray's Result has no config then either
            assert result.error is not None
            tag = int(str(result.error).split("of trial ")[1].split()[0])
            history: list[int] = []
        elif result.metrics_dataframe.empty:  # it started and failed before its first report: config, no rows
            assert result.error is not None
            tag, history = result.config["tag"], []
        else:
            tag = result.config["tag"]
            frame = result.metrics_dataframe
            history = [int(v) for v in frame["training_iteration"]]
            assert list(frame["tag"]) == [tag] * len(history), "a row of another trial"
            assert [int(v) for v in frame["counted"]] == history, "iteration not restored from the checkpoint"
            assert list(frame["score"]) == pytest.approx([result.config["q"] * i for i in history])
        config = configs[tag]
        assert history == list(range(1, len(history) + 1)), f"trial {tag}: gaps or repeats in {history}"
        fails_for_good = config["fails"] > 0 and config["fail_at"] <= config["iters"] and limit != -1 and (
            config["fails"] > limit)
        if result.error is not None:
            assert fails_for_good, f"trial {tag}: {result.error}"
            failure = int(str(result.error).split("planned failure ")[1].split()[0])
            assert limit <= failure <= limit + deaths[result.trial_id], f"trial {tag}: {result.error}"
            assert len(history) == config["fail_at"] - 1
        elif space is not None:  # random search runs every trial to its end
            lost = deaths[result.trial_id]  # at most this many failures went unseen
            assert not fails_for_good or config["fails"] <= limit + lost, f"trial {tag} should have failed: {config}"
            assert len(history) == config["iters"]
        else:  # ASHA may stop a trial early: then before its failure
            assert not fails_for_good or len(history) < config["fail_at"], f"trial {tag}: {config}, {history}"
        checkpointed = [i for i in history if config["ckpt_every"] and i % config["ckpt_every"] == 0]
        if checkpointed and result.checkpoint is not None:
            with open(os.path.join(result.checkpoint.path, "state.json")) as f:
                assert json.load(f)["i"] == checkpointed[-1]
        elif checkpointed:
            pytest.fail(f"trial {tag} checkpointed at {checkpointed} but has no checkpoint")


# --------------------------------------------------------------------------------------------------- Optuna

#: Seeds of the drawn studies: in-memory, SQLite and journal storages, each pruner, with and without an
#: objective that raises an exception ``catch`` does not name.
OPTUNA_SEEDS = [int(s) for s in os.environ.get("FLUIDSALUS_CHAOS_OPTUNA_SEEDS", "13,16,20,22").split(",")]
#: What an objective does, drawn by the study's sampler.
KINDS = ["ok", "ok", "prune", "caught", "nan", "raise"]


class Caught(Exception):
    """The exception the studies name in ``catch``."""


def chaos_objective(trial: Any) -> float:
    x = trial.suggest_float("x", -5, 5)
    steps = trial.suggest_int("steps", 1, 8)
    kind = trial.suggest_categorical("kind", KINDS)
    for step in range(steps):
        time.sleep(0.005)
        trial.report((x - 1) ** 2 + step * 0.01, step)
        if kind == "prune" and step == steps // 2:
            raise optuna.TrialPruned()
        if trial.should_prune():
            raise optuna.TrialPruned()
    trial.set_user_attr("steps", steps)
    if kind == "caught":
        raise Caught("caught")
    if kind == "raise":
        raise ValueError("not caught")
    return float("nan") if kind == "nan" else (x - 1) ** 2


def draw_study(seed: int, folder: str) -> optuna.Study:
    rng = random.Random(seed)
    kind = rng.choice(["memory", "sqlite", "journal"])
    storage: Any = None
    if kind == "sqlite":
        storage = f"sqlite:///{folder}/study.db"
    elif kind == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        storage = JournalStorage(JournalFileBackend(f"{folder}/journal.log"))
    sampler = rng.choice([optuna.samplers.RandomSampler(seed=seed), optuna.samplers.TPESampler(seed=seed)])
    pruner = rng.choice([optuna.pruners.NopPruner(), optuna.pruners.MedianPruner(n_startup_trials=2),
                         optuna.pruners.SuccessiveHalvingPruner()])
    return optuna.create_study(storage=storage, sampler=sampler, pruner=pruner)


@pytest.mark.parametrize("seed", OPTUNA_SEEDS)
def test_a_random_study_ends_every_trial_in_the_state_its_objective_implies(ray_cluster, tmp_path, seed):
    study = draw_study(seed, str(tmp_path))
    n_trials = random.Random(seed).randint(5, 40)
    told: list[int] = []
    raised: ValueError | None = None
    try:
        fluidsalus_optuna.optimize(study, chaos_objective, n_trials=n_trials, catch=(Caught,),
                                   callbacks=[lambda s, frozen: told.append(frozen.number)],
                                   storage_path=str(tmp_path / "results"))
    except ValueError as e:
        raised = e
    trials = study.get_trials(deepcopy=False)
    states = optuna.trial.TrialState
    assert all(t.state != states.RUNNING for t in trials), "a trial was left running"
    # as in Optuna, a trial whose exception optimize raises reaches no callback
    assert sorted(told) == [t.number for t in trials if not (t.params["kind"] == "raise" and t.state == states.FAIL)]
    if raised is None:
        assert len(trials) == n_trials
    else:
        assert str(raised) == "not caught"
        assert any(t.params["kind"] == "raise" and t.state == states.FAIL for t in trials)
    pruning = not isinstance(study.pruner, optuna.pruners.NopPruner)
    for t in trials:
        kind = t.params["kind"]
        steps = sorted(t.intermediate_values)
        assert steps == list(range(len(steps))), f"trial {t.number}: steps {steps}"
        if t.state == states.COMPLETE:
            assert kind == "ok" and t.value == (t.params["x"] - 1) ** 2
            assert t.user_attrs == {"steps": t.params["steps"]}
        elif t.state == states.PRUNED:
            assert kind == "prune" or pruning, f"trial {t.number} ({kind}) pruned without a pruner"
            assert t.value == t.intermediate_values[steps[-1]], "a pruned trial's value is its last report"
        else:
            assert t.state == states.FAIL and kind in ("caught", "nan", "raise"), f"trial {t.number}: {kind}"
