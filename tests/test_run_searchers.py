"""Searchers through the real engine (Ray device actors): PBT's exploits, Optuna's ask/tell."""

from __future__ import annotations

import json
import os

import optuna
import pytest
from _trials import restarted_after_running

import fluidsalus
from fluidsalus import goodput
from fluidsalus.inspect import inspect
from fluidsalus.searchers import PBT, OptunaSearch
from fluidsalus.store import ExperimentStore

pytestmark = pytest.mark.usefixtures("ray_cluster")


def pbt_trainable(config):
    """score grows by lr per step, for ``config.get("steps", 8)`` steps; the state (step, score) is checkpointed
    every ``config.get("every", 1)`` steps, and read at the start unless ``config["reads"]`` is False."""
    step, score = 0, 0.0
    ckpt = fluidsalus.get_checkpoint() if config.get("reads", True) else None
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
        step, score = state["step"], state["score"]
    while step < config.get("steps", 8):
        step += 1
        score += config["lr"]
        d = os.path.join(fluidsalus.get_context().get_trial_dir(), f"s{step}")
        os.makedirs(d, exist_ok=True)
        json.dump({"step": step, "score": score}, open(os.path.join(d, "state.json"), "w"))
        every = config.get("every", 1)
        fluidsalus.report({"score": score, "lr": config["lr"]},
                          checkpoint=fluidsalus.Checkpoint.from_directory(d) if step % every == 0 else None)


def test_pbt_exploits_restart_trials_from_a_better_trials_checkpoint(storage):
    space = {"lr": fluidsalus.grid_search([0.1, 0.2, 0.3, 1.0])}
    searcher = PBT(space, num_samples=1, metric="score", mode="max", time_attr="training_iteration",
                   perturbation_interval=2, hyperparam_mutations={"lr": [0.1, 0.2, 0.3, 1.0]},
                   quantile_fraction=0.25, seed=0)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, metric="score", mode="max", storage_path=storage,
                          name="pbt", verbose=0)
    assert len(grid) == 4 and grid.num_errors == 0
    reader = ExperimentStore.open(os.path.join(storage, "pbt"), readonly=True)
    exploits = [e for e in reader.events("trial_restart") if e.data["reason"] == "exploit"]
    assert exploits, "the bottom trial never exploited"
    worst = min(grid, key=lambda r: r.metrics_dataframe["score"].iloc[0])  # lr=0.1 at the start
    history = worst.metrics_dataframe
    # After an exploit the worst trial continues from the source's state: its score jumps above what
    # lr=0.1 alone could reach, and its iterations go on from the source's (they may jump, never go back).
    iterations = list(history["training_iteration"])
    assert iterations == sorted(set(iterations))
    # Its state at the end: its last result, or the checkpoint it cloned when that came later. A source at its
    # last report (iteration 8, its end not yet seen by PBT) leaves it nothing to run, so no result follows the
    # clone (seen once in CI).
    last_iteration, last_score = iterations[-1], history["score"].iloc[-1]
    latest = reader.checkpoints(worst.trial_id)[-1]
    if latest["iteration"] > last_iteration:
        last_iteration, last_score = latest["iteration"], latest["metrics"]["score"]
    assert last_score > 0.1 * last_iteration + 1e-9
    for exploit in (e for e in exploits if e.trial_id == worst.trial_id):
        later = [i for i in iterations if i > exploit.data["from_iteration"]]
        assert not later or later[0] == exploit.data["from_iteration"] + 1
        assert later or exploit.data["from_iteration"] == 8  # no result after a clone only when nothing was left
    # Every trial ends TERMINATED. A trial that cloned a source already at iteration 8 has nothing left to
    # run, as in Ray Tune, so its last result may be earlier than 8.
    assert all(r.status == "TERMINATED" and r.metrics["training_iteration"] <= 8 for r in grid)
    assert all(e.data["from_iteration"] % 2 == 0 for e in exploits)  # only at perturbation points


def quadratic(config):
    fluidsalus.report({"loss": (config["x"] - 0.3) ** 2})


def test_optuna_search_drives_a_real_study_through_the_engine(storage):
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))
    searcher = OptunaSearch({"x": fluidsalus.uniform(0, 1)}, num_samples=12, metric="loss", mode="min",
                            study=study)
    grid = fluidsalus.run(quadratic, searcher=searcher, metric="loss", mode="min", storage_path=storage,
                          name="opt", verbose=0)
    assert len(grid) == 12
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 12
    assert study.best_value == pytest.approx(grid.get_best_result().metrics["loss"])


def _fast_curve(config):
    for _ in range(20):
        fluidsalus.report({"v": config["x"]})  # no work between reports: a stop sent later arrives too late


def test_a_trial_the_pruner_prunes_ends_at_the_step_it_was_judged_at(storage):
    """A pruned trial ran on until the STOP reached it, a report or more later: all 20 steps when its steps cost
    nothing, and Optuna recorded it pruned at step 20 (a helper's native run). Under a pruner each result now
    waits for its verdict, as Optuna's should_prune() answers before the next step."""
    searcher = OptunaSearch({"x": fluidsalus.uniform(0, 1)}, num_samples=8, metric="v", mode="max",
                            seed=0, pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1))
    grid = fluidsalus.run(_fast_curve, searcher=searcher, storage_path=storage, name="pruned", verbose=0)
    ran_to = {r.trial_id: r.metrics["training_iteration"] for r in grid}
    pruned = [t for t in searcher.study.trials if t.state == optuna.trial.TrialState.PRUNED]
    judged_at = {t.user_attrs["fluidsalus_trial_id"]: max(t.intermediate_values) for t in pruned}
    assert any(step < 20 for step in judged_at.values())  # (one that started before the pruner woke may be late)
    assert all(ran_to[trial_id] == step for trial_id, step in judged_at.items()), (judged_at, ran_to)


def curve(config):
    for step in range(1, 28):
        fluidsalus.report({"acc": config["q"] * (1 - 0.5 ** step)})


@pytest.mark.parametrize("make", [
    lambda space: fluidsalus.searchers.ASHA(space, num_samples=1, metric="acc", mode="max", max_t=27,
                                            grace_period=1, reduction_factor=3),
    lambda space: fluidsalus.searchers.HyperBand(space, num_samples=1, metric="acc", mode="max", max_t=27,
                                                 reduction_factor=3),
], ids=["asha", "hyperband"])
def test_successive_halving_searchers_stop_trials_exactly_at_rungs(storage, make):
    # Best first: asynchronous successive halving always promotes a trial that is the best so far at its rung, so
    # trials that reach each rung in increasing order of quality (the grid's order when the devices happen to run
    # them one after another) would all go to max_t; in decreasing order the later ones are stopped.
    space = {"q": fluidsalus.grid_search([i / 12 for i in range(12, 0, -1)])}
    grid = fluidsalus.run(curve, searcher=make(space), metric="acc", mode="max", storage_path=storage,
                          verbose=0)
    assert len(grid) == 12 and grid.num_errors == 0
    ends = sorted(r.metrics["training_iteration"] for r in grid)
    assert set(ends) <= {1, 3, 9, 27}  # every trial ends on a rung: no overshoot past a decision point
    assert ends.count(27) >= 1 and ends.count(27) < 12  # the best went all the way, most were stopped early
    best = grid.get_best_result()
    assert best.config["q"] == 1.0 and best.metrics["training_iteration"] == 27
    assert not restarted_after_running(grid.experiment_path)  # promotions resumed trials in place


def test_a_trial_whose_result_meets_the_stop_rule_at_its_budget_is_not_promoted(storage):
    """Its result at the perturbation point also meets the stop rule: it ends there, and PBT's promotion of it
    is ignored instead of failing the run (Ray's pbt_function example hits exactly this)."""
    space = {"lr": fluidsalus.grid_search([0.1, 0.2, 0.3, 1.0])}
    searcher = PBT(space, num_samples=1, metric="score", mode="max", time_attr="training_iteration",
                   perturbation_interval=4, hyperparam_mutations={"lr": [0.1, 0.2, 0.3, 1.0]}, seed=0)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, stop={"training_iteration": 4}, metric="score",
                          mode="max", storage_path=storage, name="pbtstop", verbose=0)
    assert grid.num_errors == 0 and all(r.metrics["training_iteration"] == 4 for r in grid)


def test_a_pbt_population_larger_than_its_places_takes_turns_by_progress(storage):
    """Ray's PBT pauses a trial at a perturbation point while others wait and runs the least advanced one, so
    its population moves on together; here a promoted trial gives its place to a queued trial behind it (it
    restarts from its checkpoint at its turn). Before, the two running trials ran on and the rest waited for
    their ends, so trials cloned donors many points ahead of them."""
    interval = 2
    lrs = [0.1, 0.2, 0.3, 0.4, 0.5, 1.0]
    searcher = PBT({"lr": fluidsalus.grid_search(lrs), "steps": 12}, num_samples=1, metric="score", mode="max",
                   time_attr="training_iteration", perturbation_interval=interval,
                   hyperparam_mutations={"lr": lrs}, seed=0)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, metric="score", mode="max", storage_path=storage,
                          name="turns", max_concurrent_trials=2, verbose=0)
    assert len(grid) == 6 and grid.num_errors == 0
    reader = ExperimentStore.open(os.path.join(storage, "turns"), readonly=True)
    results = sorted(reader.results(latest_attempt_only=False), key=lambda r: r.ts)
    first: dict[str, float] = {}
    for r in results:
        first.setdefault(r.trial_id, r.ts)
    ahead = [r for r in results if r.iteration > 2 * interval]
    # Every trial had its first turn before any trial went past its second perturbation point.
    assert len(first) == 6 and ahead and max(first.values()) < ahead[0].ts
    turns = [e for e in reader.events("trial_restart") if e.data["reason"] == "turn"]
    assert turns, "no trial gave its place to one behind it"
    assert all(e.data["from_iteration"] % interval == 0 for e in turns)  # from its checkpoint at its point
    report = inspect(os.path.join(storage, "turns"))
    assert report.planner.turns == len(turns) and f"{len(turns)} places given up in turn" in report.render_table()
    # A turn loses nothing: no iteration is wasted but those an exploit rewound.
    _, summary = goodput.from_store(reader)
    assert set(summary.totals.wasted) <= {"exploit"}


def test_a_trial_that_never_reads_its_checkpoints_keeps_its_place_at_its_points(storage):
    """A turn restarts a trial from its checkpoint, which a trainable that only saves never reads: it started
    over from step 0 while its training_iteration went on from the checkpoint's (a helper's PBT check). Such a
    trial keeps its place, as it is never moved; its exploits restart it as Ray's do."""
    lrs = [0.1, 0.2, 0.3, 0.4, 0.5, 1.0]
    searcher = PBT({"lr": fluidsalus.grid_search(lrs), "steps": 12, "reads": False}, num_samples=1,
                   metric="score", mode="max", time_attr="training_iteration", perturbation_interval=2,
                   hyperparam_mutations={"lr": lrs}, seed=0)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, metric="score", mode="max", storage_path=storage,
                          name="noread", max_concurrent_trials=2, verbose=0)
    assert len(grid) == 6 and grid.num_errors == 0
    reader = ExperimentStore.open(os.path.join(storage, "noread"), readonly=True)
    restarts = reader.events("trial_restart")
    assert not [e for e in restarts if e.data["reason"] == "turn"]
    exploited = {e.trial_id for e in restarts if e.data["reason"] == "exploit"}
    for result in grid:
        if result.trial_id not in exploited:  # ran from step 0 to its end in one go: score = lr x iterations
            assert result.metrics["score"] == pytest.approx(result.config["lr"] * 12), result.trial_id
            assert result.metrics["training_iteration"] == 12


def test_an_exploit_at_a_trials_last_iteration_leaves_a_result_whose_metrics_are_its_checkpoints(storage):
    """Synchronous PBT exploits the bottom trial at its last iteration: its new attempt restores the copy of the top
    trial's checkpoint and has nothing left to run. Its result kept its own last metrics beside the new config and
    the copied checkpoint (score 0.4 against a checkpoint of 4.0: ranked by a score neither gave, h263); as Ray's
    restore makes the checkpoint's result the trial's last, its metrics are now the checkpoint's."""
    searcher = PBT({"lr": fluidsalus.grid_search([0.1, 1.0]), "steps": 4}, num_samples=1, metric="score",
                   mode="max", time_attr="training_iteration", perturbation_interval=4, synch=True,
                   hyperparam_mutations={"lr": [0.1, 1.0]}, quantile_fraction=0.5, seed=0)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, metric="score", mode="max", storage_path=storage,
                          name="last", verbose=0)
    assert grid.num_errors == 0
    reader = ExperimentStore.open(os.path.join(storage, "last"), readonly=True)
    try:
        assert [e.data["reason"] for e in reader.events("trial_restart")] == ["exploit"]
    finally:
        reader.close()
    for result in grid:
        with open(os.path.join(result.checkpoint.path, "state.json")) as f:
            state = json.load(f)
        assert (result.metrics["score"], result.metrics["training_iteration"], result.metrics["trial_id"]) == (
            pytest.approx(state["score"]), state["step"], result.trial_id), result.trial_id
    assert grid.get_best_result().metrics["score"] == pytest.approx(4.0)


def test_num_to_keep_leaves_no_folder_of_a_line_an_exploit_abandoned_on_disk(storage):
    """An exploited trial's own checkpoint of the exploit's iteration, and those of later iterations its new
    attempt did not write again, were only marked deleted in the store: with num_to_keep=1 their folders stayed
    on disk for good, listed nowhere (Ray keeps num_to_keep; a helper's PBT check)."""
    lrs = [0.1, 0.2, 0.3, 0.4, 0.5, 1.0]
    searcher = PBT({"lr": fluidsalus.grid_search(lrs), "steps": 12}, num_samples=1, metric="score", mode="max",
                   time_attr="training_iteration", perturbation_interval=2, hyperparam_mutations={"lr": lrs},
                   quantile_fraction=0.5, seed=1)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, metric="score", mode="max", storage_path=storage,
                          name="keep1", max_concurrent_trials=2, checkpoint_num_to_keep=1, verbose=0)
    assert grid.num_errors == 0
    reader = ExperimentStore.open(os.path.join(storage, "keep1"), readonly=True)
    assert any(e.data["reason"] == "exploit" for e in reader.events("trial_restart"))
    for result in grid:
        live = {row["path"] for row in reader.checkpoints(result.trial_id)}
        assert 1 <= len(live) <= 2  # the best and the latest
        gone = [row["path"] for row in reader.checkpoints(result.trial_id, include_deleted=True)
                if row["path"] not in live]
        assert not [path for path in gone if os.path.isdir(path)], result.trial_id


def test_a_trial_rewound_by_an_exploit_keeps_no_checkpoint_of_its_abandoned_line(storage):
    """An exploit restarts a trial from another trial's checkpoint: the copy replaces the trial's own checkpoint
    of that iteration, and the new attempt writes the folders of the later iterations again. The store's rows of
    the abandoned line used to stay, naming the new folders with their old metrics (a restore or retention then
    acted on the wrong state, and once deleted a folder the new attempt was writing)."""
    lrs = [0.1, 0.2, 0.3, 0.4, 0.5, 1.0]
    searcher = PBT({"lr": fluidsalus.grid_search(lrs), "steps": 12}, num_samples=1, metric="score", mode="max",
                   time_attr="training_iteration", perturbation_interval=2, hyperparam_mutations={"lr": lrs},
                   quantile_fraction=0.5, seed=1)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, metric="score", mode="max", storage_path=storage,
                          name="lines", max_concurrent_trials=2, verbose=0)
    assert grid.num_errors == 0
    reader = ExperimentStore.open(os.path.join(storage, "lines"), readonly=True)
    assert any(e.data["reason"] == "exploit" for e in reader.events("trial_restart"))
    for result in grid:
        rows = reader.checkpoints(result.trial_id)
        assert len({row["path"] for row in rows}) == len(rows), result.trial_id
        for row in rows:  # each row names a folder that holds the state of its metrics
            state = json.load(open(os.path.join(row["path"], "state.json")))
            assert (state["step"], state["score"]) == (row["iteration"], pytest.approx(row["metrics"]["score"]))


def test_a_trial_gives_its_place_up_only_from_a_checkpoint_at_its_point(storage):
    """A turn restarts the trial from its checkpoint, so a trial whose last checkpoint is older than its
    perturbation point keeps its place (nothing is run twice): with checkpoints every 3 iterations and points
    every 2, trials give their places up only at the points 6 and 12 (12 is the trainable's end, which PBT does
    not know: the trial restarts there and ends, as Ray's resumes and ends)."""
    lrs = [0.1, 0.2, 0.3, 0.4, 0.5, 1.0]
    searcher = PBT({"lr": fluidsalus.grid_search(lrs), "steps": 12, "every": 3}, num_samples=1, metric="score",
                   mode="max", time_attr="training_iteration", perturbation_interval=2,
                   hyperparam_mutations={"lr": lrs}, seed=0)
    grid = fluidsalus.run(pbt_trainable, searcher=searcher, metric="score", mode="max", storage_path=storage,
                          name="sparse", max_concurrent_trials=2, verbose=0)
    assert len(grid) == 6 and grid.num_errors == 0
    reader = ExperimentStore.open(os.path.join(storage, "sparse"), readonly=True)
    turns = [e for e in reader.events("trial_restart") if e.data["reason"] == "turn"]
    assert turns and {e.data["from_iteration"] for e in turns} <= {6, 12}
    results = reader.results(latest_attempt_only=False)
    for turn in turns:  # each turn resumes from the last result of the attempt it ends: nothing is run twice
        ended = [r.iteration for r in results if r.trial_id == turn.trial_id and r.attempt == turn.data["attempt"] - 1]
        assert ended and max(ended) == turn.data["from_iteration"]
    # Only exploits redo iterations. (A trial that gave its place up at 6, ran 7 and 8 and then exploited a source
    # whose checkpoint at its last point was 3 redoes 4..8: all the exploit's, though the turn came between its
    # first reports of 4..6 and their redo; goodput named the turn for them, and this failed now and then.)
    _, summary = goodput.from_store(reader)
    assert set(summary.totals.wasted) <= {"exploit"}


def reports_its_score_now_and_then(config):
    """Twelve iterations; the score only at every third."""
    for step in range(1, 13):
        fluidsalus.report({"score": config["lr"] * step} if step % 3 == 0 else {"other": step})


def test_pbt_with_require_attrs_false_runs_a_sparse_metric_when_the_strict_check_is_off(storage, monkeypatch):
    """As in Ray Tune, every result must have the run's metric unless TUNE_DISABLE_STRICT_METRIC_CHECKING=1;
    then PBT's ``require_attrs=False`` skips the results without it (the check used to be always on, so such a
    script could not run)."""
    def searcher() -> PBT:
        return PBT({"lr": fluidsalus.grid_search([0.1, 0.5])}, num_samples=1, metric="score", mode="max",
                   time_attr="training_iteration", perturbation_interval=3, hyperparam_mutations={"lr": [0.1, 0.5]},
                   require_attrs=False, seed=0)

    with pytest.raises(fluidsalus.ConfigError, match="TUNE_DISABLE_STRICT_METRIC_CHECKING=1"):
        fluidsalus.run(reports_its_score_now_and_then, searcher=searcher(), storage_path=storage, name="strict",
                       verbose=0)
    monkeypatch.setenv("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    grid = fluidsalus.run(reports_its_score_now_and_then, searcher=searcher(), storage_path=storage, name="lenient",
                          verbose=0)
    assert grid.num_errors == 0 and sorted(r.metrics["training_iteration"] for r in grid) == [12, 12]
