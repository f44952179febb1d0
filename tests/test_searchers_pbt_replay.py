"""PBT policy files and their replay (``fluidsalus/searchers/_pbt_replay.py``, Ray's PopulationBasedTrainingReplay).

- Pure: the files written from an exploit log (each trial's file is the file of the trial it cloned plus its
  own line), read back into the same schedule Ray's own ``PopulationBasedTrainingReplay`` reads (a differential
  test on the same file), bad files are clear errors, and :class:`PBTReplay`'s decisions at each change point.
- A real run on the shared 2-CPU Ray: a ``tune`` PBT run writes the files, and a replay of one trial's file
  trains one trial whose configuration changes exactly where the file says.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import pytest
from _trials import skip_module_unless_installed

from fluidsalus.errors import ConfigError
from fluidsalus.searchers import PBTReplay
from fluidsalus.searchers._pbt_replay import read_policy, write_policy_files

# Not imported here (the tests import Ray's classes they compare with): device processes import this module to run
# its trainable, and ray.tune (with pandas and pyarrow) cost each about 1.5 CPU-s more.
skip_module_unless_installed("ray.tune")


def _entry(trial: str, source: str, step: int, source_config: dict[str, Any], new: dict[str, Any]) -> dict:
    return {"group_id": f"g-{trial}-{step}", "trial_id": trial, "source_trial_id": source, "trial_iteration": step,
            "source_iteration": step, "source_config": source_config, "new_config": new, "operations": {}}


# t2 clones t0 at 4; t1 clones t2 at 8; t0 clones t3 at 8 (a chain that does not go through t1's history).
_LOG = [
    _entry("t2", "t0", 4, {"lr": 0.1}, {"lr": 0.12}),
    _entry("t1", "t2", 8, {"lr": 0.12}, {"lr": 0.096}),
    _entry("t0", "t3", 8, {"lr": 0.4}, {"lr": 0.32}),
]


def test_policy_files_follow_rays_rule_and_read_back_as_ray_reads_them(tmp_path) -> None:
    from ray.tune.schedulers import PopulationBasedTrainingReplay as RayReplay

    written = write_policy_files(str(tmp_path), _LOG)
    assert sorted(os.path.basename(p) for p in written) == ["pbt_global.txt", "pbt_policy_t0.txt",
                                                            "pbt_policy_t1.txt", "pbt_policy_t2.txt"]
    lines = (tmp_path / "pbt_global.txt").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        ["t2", "t0", 4, 4, {"lr": 0.1}, {"lr": 0.12}],
        ["t1", "t2", 8, 8, {"lr": 0.12}, {"lr": 0.096}],
        ["t0", "t3", 8, 8, {"lr": 0.4}, {"lr": 0.32}],
    ]
    # t1's file is t2's (its one exploit) and then t1's own; t0 cloned t3, which had no file.
    assert (tmp_path / "pbt_policy_t1.txt").read_text().splitlines() == lines[:2]
    assert (tmp_path / "pbt_policy_t0.txt").read_text().splitlines() == lines[2:]
    assert read_policy(str(tmp_path / "pbt_policy_t1.txt")) == ({"lr": 0.1}, [(4, {"lr": 0.12}), (8, {"lr": 0.096})])
    # A file whose earlier lines were overwritten by a later exploit of another trial: only the last chain counts.
    broken = tmp_path / "pbt_policy_mixed.txt"
    broken.write_text("\n".join([lines[0], lines[2]]) + "\n")
    assert read_policy(str(broken)) == ({"lr": 0.4}, [(8, {"lr": 0.32})])
    for path in (tmp_path / "pbt_policy_t1.txt", broken, tmp_path / "pbt_policy_t2.txt"):
        ray_replay = RayReplay(str(path))
        assert read_policy(str(path)) == (ray_replay.config, ray_replay._policy)
    assert write_policy_files(str(tmp_path / "none"), []) == []


def test_a_trial_that_clones_a_trial_without_a_file_keeps_its_own_lines_as_in_ray(tmp_path) -> None:
    """Ray copies the cloned trial's policy file over the trial's only where the cloned trial has one, then appends
    the exploit: a trial's second exploit from a trial that never exploited keeps its first line (the file held
    the second line alone). The replay reads the same chain from either file."""
    from ray.tune.schedulers import PopulationBasedTrainingReplay as RayReplay

    log = [_entry("t3", "t1", 6, {"lr": 0.5}, {"lr": 0.6}), _entry("t3", "t1", 9, {"lr": 0.5}, {"lr": 0.4})]
    write_policy_files(str(tmp_path), log)
    lines = (tmp_path / "pbt_global.txt").read_text().splitlines()
    assert (tmp_path / "pbt_policy_t3.txt").read_text().splitlines() == lines
    path = str(tmp_path / "pbt_policy_t3.txt")
    ray_replay = RayReplay(path)
    assert read_policy(path) == (ray_replay.config, ray_replay._policy) == ({"lr": 0.5}, [(9, {"lr": 0.4})])


def test_the_files_follow_the_log_while_the_run_goes_on_and_an_undone_exploit_leaves_no_file(tmp_path) -> None:
    from fluidsalus import space as sp
    from fluidsalus.searchers import PBT
    from fluidsalus.tune._tuner import _PolicyFiles

    pbt = PBT({"lr": sp.uniform(0, 1)}, 4, "m", "max", hyperparam_mutations={"lr": sp.uniform(0, 1)})
    files = _PolicyFiles(pbt, str(tmp_path))
    files.on_step_end()
    assert os.listdir(tmp_path) == []  # no exploit yet
    pbt.exploit_log, pbt.exploit_log_version = list(_LOG), pbt.exploit_log_version + 1
    files.on_step_end()
    assert sorted(os.listdir(tmp_path)) == ["pbt_global.txt", "pbt_policy_t0.txt", "pbt_policy_t1.txt",
                                            "pbt_policy_t2.txt"]
    pbt.exploit_log, pbt.exploit_log_version = _LOG[:1], pbt.exploit_log_version + 1  # two exploits undone
    files.on_step_end()
    assert sorted(os.listdir(tmp_path)) == ["pbt_global.txt", "pbt_policy_t2.txt"]
    assert len((tmp_path / "pbt_global.txt").read_text().splitlines()) == 1


@pytest.mark.parametrize("text, message", [
    ("not json\n", r"line 1 of .* is not JSON"),
    ('["t1", "t0", 4]\n', r"line 1 of .* is not a PBT policy line"),
])
def test_a_bad_policy_file_is_a_clear_error(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "pbt_policy_x.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_policy(str(path))
    with pytest.raises(ConfigError, match="policy_file '.*missing.txt' not found"):
        read_policy(str(tmp_path / "missing.txt"))


def test_replay_plans_from_the_file_or_from_one_param_space_sample(tmp_path) -> None:
    from ray.tune.schedulers import PopulationBasedTrainingReplay as RayReplay

    from fluidsalus import tune
    from fluidsalus.tune._translate import plan

    write_policy_files(str(tmp_path), _LOG)
    policy = str(tmp_path / "pbt_policy_t1.txt")
    with pytest.warns(UserWarning, match="Ray Tune's PopulationBasedTrainingReplay"):
        planned = plan(tune.TuneConfig(scheduler=RayReplay(policy)), {}, class_trainable=True)
    searcher = planned.searcher
    assert isinstance(searcher, PBTReplay) and planned.checkpoint_at_budgets
    assert (searcher.config, searcher.schedule) == ({"lr": 0.1}, [(4, {"lr": 0.12}), (8, {"lr": 0.096})])
    empty = tmp_path / "pbt_policy_empty.txt"
    empty.write_text("")
    replay = tune.schedulers.PopulationBasedTrainingReplay(str(empty))
    searcher = plan(tune.TuneConfig(scheduler=replay), {"lr": tune.uniform(0.5, 0.6), "k": 3}).searcher
    assert searcher.schedule == [] and 0.5 <= searcher.config["lr"] <= 0.6 and searcher.config["k"] == 3
    with pytest.raises(ConfigError, match="records no change, so the trial trains with a param_space sample, and "
                                          "param_space gives 2 configurations"):
        plan(tune.TuneConfig(scheduler=replay), {"lr": tune.grid_search([0.1, 0.2])})
    with pytest.raises(ConfigError, match="PopulationBasedTrainingReplay trains one trial with the replayed "
                                          "configurations; use no search_alg"):
        plan(tune.TuneConfig(scheduler=replay, search_alg=tune.search.optuna.OptunaSearch()), {})


def _result(iteration: int, checkpoint: bool = True) -> dict[str, Any]:
    return {"training_iteration": iteration, **({"checkpoint_dir_name": f"checkpoint_{iteration:06d}"}
                                                 if checkpoint else {})}


def test_replay_pauses_at_each_change_and_restarts_from_its_own_checkpoint(caplog) -> None:
    replay = PBTReplay({"lr": 0.1}, [(2, {"lr": 0.2}), (4, {"lr": 0.3})])
    (group,) = replay.next_groups()
    assert (group.configs, group.budget) == ([{"lr": 0.1}], 2)
    replay.on_trial_add("t", group.group_id, group.configs[0])
    replay.on_result("t", _result(1))
    assert replay.take_exploits() == []
    replay.on_result("t", _result(2))
    (first,) = replay.take_exploits()
    assert (first.trial_id, first.source_trial_id, first.source_iteration, first.config, first.budget) == \
        ("t", "t", 2, {"lr": 0.2}, 4)
    saved = replay.state_dict()
    replay.on_result("t", _result(3))
    replay.on_result("t", _result(4, checkpoint=False))  # restarts from the checkpoint of iteration 3
    (second,) = replay.take_exploits()
    assert (second.source_iteration, second.config, second.budget) == (3, {"lr": 0.3}, None)  # then to its end
    assert replay.next_groups() == [] and not replay.is_finished()
    replay.on_trial_complete("t", _result(6))
    assert replay.is_finished()

    again = PBTReplay({"lr": 0.1}, [(2, {"lr": 0.2}), (4, {"lr": 0.3})])
    again.load_state_dict(json.loads(json.dumps(saved)))
    again.on_result("t", _result(4))
    assert again.take_exploits()[0].config == {"lr": 0.3}

    unsaved = PBTReplay({"lr": 0.1}, [(1, {"lr": 0.2})])
    unsaved.on_trial_add("u", unsaved.next_groups()[0].group_id, {"lr": 0.1})
    with caplog.at_level(logging.WARNING):
        unsaved.on_result("u", _result(1, checkpoint=False))
    assert unsaved.take_exploits() == [] and "without a checkpoint" in caplog.text
    (promoted,) = unsaved.next_groups()  # it keeps its configuration and runs on to its end
    assert (promoted.trial_ids, promoted.budget) == (["u"], None)
    with pytest.raises(ConfigError, match=r"iterations must be >= 0 and not decrease \(got \[4, 2\]\)"):
        PBTReplay({}, [(4, {}), (2, {})])
    # (a number for either was a bare TypeError "'int' object is not iterable": h83's N9)
    with pytest.raises(ConfigError, match=r"^PBTReplay: config must be a dict, the starting configuration \(got int\)"):
        PBTReplay(5, [])  # type: ignore[arg-type]
    for schedule in (5, [("a", {})], [(1, 2)], [(1,)]):
        with pytest.raises(ConfigError, match=r"^PBTReplay: schedule must be a list of \(iteration, config\) pairs, "
                                              r"an int and a dict each \(got "):
            PBTReplay({}, schedule)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# A real PBT run, then a replay of one of its trials
# ---------------------------------------------------------------------------------------------------------

_STEPS = 6


def _climb(config: dict[str, Any]) -> None:
    """Reports ``score`` (grows with ``lr``) and the ``lr`` it trained with, checkpointing every iteration."""
    from fluidsalus import tune

    start, score = 0, 0.0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            start, score = json.load(f)
    for i in range(start + 1, _STEPS + 1):
        score += config["lr"]
        folder = os.path.join(tune.get_context().get_trial_dir(), f"tmp_{i}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump([i, score], f)
        tune.report({"score": score, "lr": config["lr"]}, checkpoint=tune.Checkpoint.from_directory(folder))


def test_a_pbt_run_writes_policy_files_and_a_replay_follows_one(ray_cluster, tmp_path) -> None:
    from ray.tune.schedulers import PopulationBasedTrainingReplay as RayReplay

    from fluidsalus import tune

    pbt = tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=2, quantile_fraction=0.5,
        hyperparam_mutations={"lr": tune.uniform(0.01, 1.0)})
    folder = tmp_path / "pbt"
    seen_during_run: list[bool] = []

    class FileWatch(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            if "@perturbed" in result["experiment_tag"]:  # a result after an exploit: its file is written already
                seen_during_run.append((folder / "pbt_global.txt").is_file())

    grid = tune.Tuner(_climb, param_space={"lr": tune.grid_search([0.01, 0.02, 0.5, 0.6])},
                      tune_config=tune.TuneConfig(scheduler=pbt, metric="score", mode="max"),
                      run_config=tune.RunConfig(name="pbt", storage_path=str(tmp_path), verbose=0,
                                                callbacks=[FileWatch()])).fit()
    assert seen_during_run and all(seen_during_run)
    rows = [json.loads(line) for line in (folder / "pbt_global.txt").read_text().splitlines()]
    assert rows and all(len(row) == 6 for row in rows)  # the bottom half exploited the top half
    ids = {r.trial_id for r in grid}
    assert all(row[0] in ids and row[1] in ids for row in rows)
    # Ray's experiment_tag: "<index>_lr=<first lr>", then "@perturbed[lr=<new lr>]" after an exploit.
    tags = {r.trial_id: list(r.metrics_dataframe["experiment_tag"]) for r in grid}
    first = [0.01, 0.02, 0.5, 0.6]
    for trial_id, seen in tags.items():
        seq = int(trial_id.rsplit("_", 1)[1])
        assert all(tag.split("@")[0] == f"{seq}_lr={first[seq]:.4f}" for tag in seen), seen
    perturbed = [tag for seen in tags.values() for tag in seen if "@" in tag]
    assert perturbed and all(re.fullmatch(r"\d_lr=\d\.\d{4}@perturbed\[lr=\d\.\d{4}\]", t) for t in perturbed)
    for trial_id in {row[0] for row in rows}:  # each exploiting trial has its file, read as Ray reads it
        policy = str(folder / f"pbt_policy_{trial_id}.txt")
        ray_replay = RayReplay(policy)
        assert read_policy(policy) == (ray_replay.config, ray_replay._policy)

    # A replay of a schedule with changes at iterations 2 and 4, through the tune front end.
    policy_file = tmp_path / "pbt_policy_c.txt"
    policy_file.write_text('["a", "b", 2, 2, {"lr": 0.1}, {"lr": 0.2}]\n["c", "a", 4, 4, {"lr": 0.2}, {"lr": 0.3}]\n')
    replay = tune.schedulers.PopulationBasedTrainingReplay(str(policy_file))
    with pytest.warns(UserWarning, match="replaces param_space with the replayed configuration"):
        grid = tune.Tuner(_climb, param_space={"lr": 0.9}, tune_config=tune.TuneConfig(scheduler=replay),
                          run_config=tune.RunConfig(name="replay", storage_path=str(tmp_path), verbose=0)).fit()
    (result,) = grid
    # A change at iteration s restarts from the checkpoint of s: the new rate trains from s + 1 on.
    assert list(result.metrics_dataframe["lr"]) == [0.1, 0.1, 0.2, 0.2, 0.3, 0.3]
    # Each row's config/ columns are the configuration it was reported with, as in Ray's trial frames.
    assert list(result.metrics_dataframe["config/lr"]) == [0.1, 0.1, 0.2, 0.2, 0.3, 0.3]
    assert list(result.metrics_dataframe["training_iteration"]) == list(range(1, _STEPS + 1))
    assert result.config == {"lr": 0.3} and result.metrics["score"] == pytest.approx(1.2)
    # Ray's tags: the trial's own until the first change, then "replay_<policy file>@perturbed[<new config>]"
    assert list(result.metrics_dataframe["experiment_tag"]) == [
        "0", "0", "replay_pbt_policy_c.txt@perturbed[lr=0.2000]", "replay_pbt_policy_c.txt@perturbed[lr=0.2000]",
        "replay_pbt_policy_c.txt@perturbed[lr=0.3000]", "replay_pbt_policy_c.txt@perturbed[lr=0.3000]"]
    paths = [c.path for c, _ in result.best_checkpoints or []]
    assert paths and len(paths) == len(set(paths))  # restarting from its own checkpoint stored no second copy
    with pytest.raises(ConfigError, match="num_samples=2: PopulationBasedTrainingReplay trains exactly one trial"):
        tune.Tuner(_climb, tune_config=tune.TuneConfig(scheduler=replay, num_samples=2)).fit()
