"""Ray's ``experiment_tag`` (``fluidsalus/tune/_tags.py``), compared with Ray's own formatting on the same trials.

- ``BasicVariantGenerator`` trials: the configurations Ray's generator makes for a seed come with Ray's
  ``resolved_vars``; Ray tags them ``"<index>_" + format_vars(resolved_vars)``. fluidsalus's RandomSearch makes the
  same configurations, and :class:`Tagger` must give the same tags from the space and the configurations alone.
- Search-algorithm trials: Ray tags them ``"<number>_" + format_vars(<every value of the config>)`` from 1.
- Which of the two a Tuner's plan uses.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from fluidsalus import tune
from fluidsalus.tune._tags import SEARCHER, VARIANTS, Tagger, format_vars
from fluidsalus.tune._translate import plan

rt = pytest.importorskip("ray.tune")


def test_variant_tags_are_rays_for_the_same_configurations() -> None:
    from ray.tune.search.sample import _BackwardsCompatibleNumpyRng
    from ray.tune.search.variant_generator import _flatten_resolved_vars, generate_variants
    from ray.tune.search.variant_generator import format_vars as ray_format_vars

    ray_space = {"a": rt.uniform(0, 1), "g": rt.grid_search([1, 2]), "n": {"d": rt.randint(0, 10), "e": 5},
                 "c": rt.choice(["x y", None]), "k": 7}
    ours = {"a": tune.uniform(0, 1), "g": tune.grid_search([1, 2]), "n": {"d": tune.randint(0, 10), "e": 5},
            "c": tune.choice(["x y", None]), "k": 7}
    rng = _BackwardsCompatibleNumpyRng(42)
    expected, configs, evaluated = [], [], []
    for _ in range(3):  # Ray's _TrialIterator: one generate_variants pass per sample, the counter over all
        for resolved_vars, spec in generate_variants(copy.deepcopy({"config": ray_space}), random_state=rng):
            expected.append(f"{len(expected)}_{ray_format_vars(resolved_vars)}")
            evaluated.append(_flatten_resolved_vars(resolved_vars))
            configs.append(spec["config"])
    searcher = plan(tune.TuneConfig(search_alg=tune.search.BasicVariantGenerator(random_state=42), num_samples=3),
                    ours).searcher
    (group,) = searcher.next_groups()
    assert group.configs == configs  # the same trials, so the same tags are owed
    extras = Tagger(ours, VARIANTS)
    assert [extras(seq, c)["experiment_tag"] for seq, c in enumerate(group.configs)] == expected
    assert expected[0] == "0_a=0.7740,c=x_y,g=1,d=6"  # Ray's: last keys, by path, 4 decimals, "x y" made safe
    assert [extras.evaluated_params(c) for c in group.configs] == evaluated  # Ray's Trial.evaluated_params
    assert evaluated[0] == {"g": 1, "a": 0.7739560485559633, "n/d": 6, "c": "x y"}
    assert Tagger({"k": 7}, VARIANTS)(4, {"k": 7}) == {"experiment_tag": "4"}  # nothing drawn: the index alone


def test_sample_from_values_and_a_points_values_are_not_in_the_tag_as_in_rays_tuner() -> None:
    """Ray's Tuner leaves a sample_from's value out of a variant's tag and evaluated_params, and a trial of a
    points_to_evaluate point leaves out the values the point gave (a point that gives every value is tagged with
    its index alone). The expected tags are what Ray 2.60's Tuner wrote for this space and seed (run side by side,
    scratch script bvg1.py); the configurations are Ray's (the first test checks the generator)."""
    space = {"a": tune.grid_search([1, 2]), "b": tune.uniform(0, 1), "c": tune.sample_from(lambda spec: spec.config.a),
             "d": tune.randint(0, 100)}
    planned = plan(tune.TuneConfig(search_alg=tune.search.BasicVariantGenerator(
        random_state=7, points_to_evaluate=[{"b": 0.5}, {"a": 9, "b": 0.25, "d": 3}]), num_samples=2), space)
    tagger = Tagger(planned.space, planned.tags, points=planned.points)
    configs = planned.searcher.next_groups()[0].configs
    assert [tagger(seq, c)["experiment_tag"] for seq, c in enumerate(configs)] == ["0_a=1,d=94", "1_a=2,d=62", "2"]
    # Ray's Trial.evaluated_params leaves out the same values
    assert [tagger.evaluated_params(c, seq) for seq, c in enumerate(configs)] == [{"a": 1, "d": 94}, {"a": 2, "d": 62},
                                                                                    {}]
    drawn = Tagger(space, VARIANTS)
    assert drawn(0, {"a": 1, "b": 0.77, "c": 1, "d": 43}) == {"experiment_tag": "0_a=1,b=0.7700,d=43"}


def test_searcher_tags_number_from_one_and_show_the_whole_config() -> None:
    from ray.tune.search.variant_generator import _resolve_nested_dict
    from ray.tune.search.variant_generator import format_vars as ray_format_vars

    configs: list[dict[str, Any]] = [{"lr": 0.001234, "opt": {"name": "adam/w", "betas": [0.9, 0.99]}, "k": None},
                                     {"lr": 1e-5, "opt": {"name": "sgd", "betas": []}, "k": 3}]
    extras = Tagger({"lr": tune.loguniform(1e-5, 1)}, SEARCHER)
    for seq, config in enumerate(configs):
        assert extras(seq, config)["experiment_tag"] == f"{seq + 1}_{ray_format_vars(_resolve_nested_dict(config))}"
    assert extras(0, configs[0])["experiment_tag"] == "1_k=None,lr=0.0012,betas=0_9_0_99,name=adam_w"
    assert format_vars({(0, "x"): 1, ("a",): 2}) == "x=1,a=2"  # paths of mixed key types sort as text
    # evaluated_params: what the search algorithm chose (Ray: flatten_dict of its suggestion), not the constants
    assert extras.evaluated_params(configs[0]) == {"lr": 0.001234}
    own = Tagger({"k": 3}, SEARCHER)  # a search algorithm of your own with its own space: its whole suggestion
    assert own.evaluated_params(configs[1]) == {"lr": 1e-5, "opt/name": "sgd", "opt/betas": [], "k": 3}
    # PBT: a mutated key the space lacks is sampled at the start and shown, as Ray's PBT adds it; one the space
    # holds as a constant is not (pbt_example.py's "lr").
    pbt = Tagger({"lr": 0.1, "w": tune.choice([1, 2])}, VARIANTS, perturbed=["lr", "momentum"])
    assert pbt.evaluated_params({"lr": 0.1, "w": 2, "momentum": 0.8}) == {"w": 2, "momentum": 0.8}


def test_a_plan_says_how_ray_would_tag_its_trials() -> None:
    from fluidsalus.tune.search.optuna import OptunaSearch

    space = {"x": tune.uniform(0, 1)}
    assert plan(tune.TuneConfig(), space).tags == VARIANTS
    assert plan(tune.TuneConfig(scheduler=tune.schedulers.ASHAScheduler(), metric="x", mode="max"),
                space).tags == VARIANTS
    assert plan(tune.TuneConfig(search_alg=OptunaSearch(), metric="x", mode="max"), space).tags == SEARCHER


def test_a_perturbed_trial_keeps_its_first_tag_and_shows_the_mutated_values() -> None:
    extras = Tagger({"lr": tune.uniform(0, 1), "k": 1}, VARIANTS, perturbed=("lr", "missing"))
    assert extras(3, {"lr": 0.25, "k": 1}) == {"experiment_tag": "3_lr=0.2500"}
    assert extras.tag_of(3, {"lr": 0.25, "k": 1}) == "3_lr=0.2500"  # a reader's look is no exploit
    # Asked again: an exploit, perturbed as Ray tags it even when the explored value is the old one (it was not)
    assert extras(3, {"lr": 0.25, "k": 1}) == {"experiment_tag": "3_lr=0.2500@perturbed[lr=0.2500]"}
    assert extras(3, {"lr": 0.3, "k": 1}) == {"experiment_tag": "3_lr=0.2500@perturbed[lr=0.3000]"}
    explore_fn_only = Tagger({"lr": tune.uniform(0, 1)}, VARIANTS, perturbed=())  # PBT with custom_explore_fn alone
    explore_fn_only(0, {"lr": 0.01})
    assert explore_fn_only(0, {"lr": 0.02}) == {"experiment_tag": "0_lr=0.0100@perturbed[]"}  # Ray's, as it was not
    from ray.tune.schedulers.pbt import _make_experiment_tag

    assert _make_experiment_tag("3_lr=0.2500", {"lr": 0.3, "k": 1}, {"lr": None}) == "3_lr=0.2500@perturbed[lr=0.3000]"
    assert extras(3, {"lr": 0.36, "k": 1}) == {"experiment_tag": "3_lr=0.2500@perturbed[lr=0.3600]"}  # not piled
    plain = Tagger({"lr": tune.uniform(0, 1)}, VARIANTS)
    plain(0, {"lr": 0.5})
    assert plain(0, {"lr": 0.7}) == {"experiment_tag": "0_lr=0.5000"}  # no PBT: the first tag stays
    assert plan(tune.TuneConfig(scheduler=tune.schedulers.PopulationBasedTraining(
        hyperparam_mutations={"lr": tune.uniform(0, 1)}), metric="m", mode="max"), {"lr": 0.1}).perturbed == ("lr",)
    assert plan(tune.TuneConfig(scheduler=tune.schedulers.PB2(hyperparam_bounds={"lr": [0.1, 0.2]}), metric="m",
                                mode="max"), {"lr": 0.1}).perturbed == ("lr",)  # PB2: its bounds' keys


def test_a_replayed_trial_is_tagged_after_its_policy_file_once_its_config_changes() -> None:
    from ray.tune.schedulers.pbt import _make_experiment_tag

    extras = Tagger({"lr": 0.1, "opt": {"m": 0.9}}, VARIANTS, replay="replay_pbt_policy_00001.txt")
    assert extras(0, {"lr": 0.1, "opt": {"m": 0.9}}) == {"experiment_tag": "0"}
    new = {"lr": 0.3, "opt": {"m": 0.8}}
    assert extras(0, new) == {"experiment_tag": _make_experiment_tag("replay_pbt_policy_00001.txt", new, new)}


def test_a_trial_has_its_tag_from_its_start_in_callbacks_and_folder_names(ray_cluster, storage) -> None:
    started: dict[str, str] = {}
    evaluated: dict[str, dict[str, Any]] = {}

    class Starts(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            started[trial.trial_id] = trial.experiment_tag  # Ray's Trial has it before any result
            evaluated[trial.trial_id] = trial.evaluated_params

    def train(config):
        tune.report({"score": config["x"]})

    grid = tune.Tuner(
        train, param_space={"x": tune.grid_search([1, 2]), "k": 5},
        tune_config=tune.TuneConfig(trial_dirname_creator=lambda trial: f"t_{trial.experiment_tag}"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[Starts()])).fit()
    tags = {r.metrics["trial_id"]: r.metrics["experiment_tag"] for r in grid}
    assert sorted(tags.values()) == ["0_x=1", "1_x=2"] and started == tags
    assert sorted(evaluated.values(), key=str) == [{"x": 1}, {"x": 2}]  # the grid's values, not the constant k
    assert sorted(os.path.basename(r.path) for r in grid) == ["t_0_x=1", "t_1_x=2"]


def test_a_resumed_run_keeps_each_trials_first_tag_and_its_perturbation() -> None:
    space = {"lr": tune.uniform(0, 1), "k": 1}
    before = Tagger(space, VARIANTS, perturbed=("lr",))
    before(0, {"lr": 0.25, "k": 1})
    perturbed = before(0, {"lr": 0.3, "k": 1})["experiment_tag"]
    plain = before(1, {"lr": 0.5, "k": 1})["experiment_tag"]
    resumed = Tagger(space, VARIANTS, perturbed=("lr",))
    resumed.restore(0, perturbed, {"lr": 0.3, "k": 1})
    resumed.restore(1, plain, {"lr": 0.5, "k": 1})
    assert resumed(0, {"lr": 0.3, "k": 1})["experiment_tag"] == "0_lr=0.2500@perturbed[lr=0.3000]"
    assert resumed(1, {"lr": 0.5, "k": 1})["experiment_tag"] == "1_lr=0.5000"  # not perturbed: plain
    assert resumed(1, {"lr": 0.6, "k": 1})["experiment_tag"] == "1_lr=0.5000@perturbed[lr=0.6000]"
    assert resumed(0, {"lr": 0.4, "k": 1})["experiment_tag"] == "0_lr=0.2500@perturbed[lr=0.4000]"


def test_a_taggers_description_gives_the_same_evaluated_params() -> None:
    """What the Tuner writes beside tuner.pkl (``tune_params.json``: plain JSON, read without unpickling) gives an
    ``ExperimentAnalysis`` of the folder the run's own ``evaluated_params``: the drawn paths (nested ones too, not a
    sample_from's), a point's given values left out, the keys PBT samples, a search algorithm's whole suggestion."""
    import json

    space = {"a": tune.grid_search([1, 2]), "b": tune.uniform(0, 1), "c": tune.sample_from(lambda spec: spec.config.a),
             "n": {"d": tune.randint(0, 100), "k": 4}}
    planned = plan(tune.TuneConfig(search_alg=tune.search.BasicVariantGenerator(
        random_state=7, points_to_evaluate=[{"b": 0.5}, {"a": 9, "b": 0.25, "n": {"d": 3}}]), num_samples=2), space)
    configs = planned.searcher.next_groups()[0].configs
    taggers = [Tagger(planned.space, planned.tags, points=planned.points),
               Tagger({"lr": 0.1, "w": tune.choice([1, 2])}, VARIANTS, perturbed=["lr", "momentum"]),
               Tagger({"k": 3}, SEARCHER)]
    for tagger in taggers:
        again = Tagger.from_description(json.loads(json.dumps(tagger.describe())))
        for seq, config in enumerate([*configs, {"lr": 0.1, "w": 2, "momentum": 0.8}]):
            assert again.evaluated_params(config, seq) == tagger.evaluated_params(config, seq)
    assert [taggers[0].evaluated_params(c, seq) for seq, c in enumerate(configs)][:2] == [
        {"a": 1, "n/d": configs[0]["n"]["d"]}, {"a": 2, "n/d": configs[1]["n"]["d"]}]


def _nested_draws_space(module: Any) -> dict[str, Any]:
    """A space with draws inside grid values and choice categories, built with Ray's or fluidsalus's functions."""
    return {"z": module.uniform(0, 1), "b": module.grid_search([1, 2]), "a": module.grid_search(["x"]),
            "m": {"n": module.choice([3, 4]), "g": module.grid_search([5])}, "k": 7, "d": module.randint(0, 3),
            "gd": module.grid_search([{"lr": module.uniform(0, 1), "h": module.grid_search([8, 9])}, {"lr": 0.1}]),
            "cd": module.choice([{"k": module.randint(1, 5)}, [module.uniform(2, 3), 1]]),
            "l": [module.loguniform(1e-3, 1), {"q": module.choice([1, 2])}]}


def test_evaluated_params_and_tags_hold_the_draws_inside_grid_values_and_choice_categories_in_rays_order() -> None:
    """Ray's ``resolved_vars`` (whence ``Trial.evaluated_params`` and the ``experiment_tag``) of the same variants:
    level by level, each level's domains in the space's order, then its grid searches by path, then the draws a
    chosen grid value or choice category holds (``gd/lr``, ``gd/h``, ``cd/0``). They were left out (only ``gd`` and
    ``cd``), and the grids came first, in the space's order. Ray's value at a choice whose category holds domains
    keeps the unresolved domain objects (and its tag their repr, with an address): ours is the trial's value there.
    """
    import json

    from ray.tune.search.sample import Domain as RayDomain
    from ray.tune.search.sample import _BackwardsCompatibleNumpyRng
    from ray.tune.search.variant_generator import _flatten_resolved_vars, generate_variants
    from ray.tune.search.variant_generator import format_vars as ray_format_vars

    def holds_domain(value: Any) -> bool:
        values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        return any(isinstance(item, RayDomain) for item in values)

    rng = _BackwardsCompatibleNumpyRng(3)
    expected, configs = [], []
    for _ in range(2):
        for resolved_vars, spec in generate_variants(copy.deepcopy({"config": _nested_draws_space(rt)}),
                                                     random_state=rng):
            expected.append((_flatten_resolved_vars(resolved_vars), ray_format_vars(
                {path: value for path, value in resolved_vars.items() if not holds_domain(value)})))
            configs.append(spec["config"])
    searcher = plan(tune.TuneConfig(search_alg=tune.search.BasicVariantGenerator(random_state=3), num_samples=2),
                    _nested_draws_space(tune)).searcher
    (group,) = searcher.next_groups()
    assert group.configs == configs and len(configs) == 12
    tagger = Tagger(_nested_draws_space(tune), VARIANTS)
    again = Tagger.from_description(json.loads(json.dumps(tagger.describe())))  # what tune_params.json keeps
    for seq, (config, (rays, rays_tag)) in enumerate(zip(configs, expected, strict=True)):
        ours = tagger.evaluated_params(config, seq)
        assert list(ours) == list(rays)  # the same keys, in Ray's order
        assert ours == {key: config["cd"] if key == "cd" else value for key, value in rays.items()}
        assert again.evaluated_params(config, seq) == ours
        tag = tagger(seq, config)["experiment_tag"]
        assert tag.replace(f"cd={_clean(config['cd'])},", "") == f"{seq}_{rays_tag}"
    assert list(tagger.evaluated_params(configs[0], 0))[:6] == ["z", "m/n", "d", "cd", "l/0", "l/1/q"]


def _rays_variants(space: Any, seed: int, samples: int = 1) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """Ray's variants of ``space`` (``space(ray.tune)``) for ``seed`` and ``num_samples=samples``: each one's config,
    ``evaluated_params`` and tag's values."""
    from ray.tune.search.sample import _BackwardsCompatibleNumpyRng
    from ray.tune.search.variant_generator import _flatten_resolved_vars, generate_variants
    from ray.tune.search.variant_generator import format_vars as ray_format_vars

    rng = _BackwardsCompatibleNumpyRng(seed)
    return [(spec["config"], _flatten_resolved_vars(resolved_vars), ray_format_vars(resolved_vars))
            for _ in range(samples)
            for resolved_vars, spec in generate_variants({"config": space(rt)}, random_state=rng)]


def _grids_in_categories_space(module: Any) -> dict[str, Any]:
    """Grid searches inside choice categories (in a dict, in a grid value, in a list, beside a constant)."""
    return {"c": module.choice([{"g": module.grid_search([1, 2]), "u": 0.5},
                                {"g": module.grid_search([{"h": module.grid_search(["p", "q"])}, 3])},
                                [module.grid_search(["x", "y"]), 1], 5]),
            "z": module.uniform(0, 1), "b": module.grid_search([True, False])}


def test_a_namedtuple_choice_category_holding_a_draw_resolves() -> None:
    """A namedtuple category holding a domain or a grid search: its value was rebuilt from a generator, which a
    namedtuple cannot take (``P.__new__() missing 1 required positional argument``), and ``fit()`` raised; Ray runs
    it (h150's F1)."""
    from collections import namedtuple

    from fluidsalus.tune._tags import draw_tree, resolved_values

    pair = namedtuple("pair", "a b")
    for space, config, shown in [
            ({"c": tune.choice([pair(tune.uniform(0, 1), 3)])}, {"c": pair(0.5, 3)}, pair(0.5, 3)),
            ({"c": tune.choice([pair(tune.grid_search([1, 2]), 3)])}, {"c": pair(1, 3)},
             pair({"grid_search": [1, 2]}, 3))]:
        def value_at(path: tuple, config: dict = config) -> object:
            for part in path:
                config = config[part]
            return config

        values = resolved_values(draw_tree(space), value_at)
        assert values[("c",)] == shown and type(values[("c",)]) is pair


def test_a_grid_search_inside_a_choice_category_is_shown_as_written_in_the_tag_and_evaluated_params_as_in_ray() -> None:
    """Ray draws a choice's category before it expands the grid searches in it, so its resolved value there (the
    trial's ``evaluated_params["c"]`` and the tag's ``c=...``, whence its folder name) keeps the grid search as the
    space wrote it: ``0_c=g_grid_search_1_2_u_0_5,g=1,...``. Ours was the trial's value (``c=g_1_u_0_5``)."""
    import json

    from fluidsalus.api import _describe_space
    from fluidsalus.tune._tags import resolved_values
    from fluidsalus.tune.analysis import _value_at_key, stored_draw_tree

    rays = _rays_variants(_grids_in_categories_space, 3, samples=3)
    space = _grids_in_categories_space(tune)
    searcher = plan(tune.TuneConfig(search_alg=tune.search.BasicVariantGenerator(random_state=3), num_samples=3),
                    space).searcher
    (group,) = searcher.next_groups()
    assert group.configs == [config for config, _, _ in rays]
    tagger = Tagger(space, VARIANTS)
    again = Tagger.from_description(json.loads(json.dumps(tagger.describe())))  # what tune_params.json keeps
    tree = stored_draw_tree(_describe_space(space))  # a fluidsalus.run folder's
    shown = set()
    for seq, (config, evaluated, tag) in enumerate(rays):
        ours = tagger.evaluated_params(config, seq)
        assert list(ours.items()) == list(evaluated.items())
        assert again.evaluated_params(config, seq) == ours
        stored = {"/".join(map(str, path)): value
                  for path, value in resolved_values(tree, lambda path, c=config: _value_at_key(c, path)).items()}
        # (the store's run spec describes the space by reprs, which cut the second category short: "[...]")
        cut = isinstance(config["c"], dict) and "u" not in config["c"]
        assert stored == ({**ours, "c": config["c"]} if cut else ours)
        assert tagger(seq, config)["experiment_tag"] == f"{seq}_{tag}"
        shown.add(_clean(ours["c"]))
    assert {"g_grid_search_1_2_u_0_5", "g_grid_search_h_grid_search_p_q_3", "grid_search_x_y_1"} <= shown


def test_a_search_space_with_keys_other_than_strings_below_the_top_runs_as_in_ray(ray_cluster, storage) -> None:
    """Ray takes ``{"n": {2: ..., 1: ...}}`` (keys that are no strings, below the top level) and its trials' configs
    keep those keys; fluidsalus refused the space (``SpaceError: search space key 2 at 'n' must be a string``). The
    same configs, ``evaluated_params`` and tags as Ray's; the trials' folders and results carry the tags."""
    def space_of(module: Any) -> dict[str, Any]:
        return {"n": {2: module.choice([1, 2]), 1: module.grid_search([5, 6]), 0.5: 7},
                "g": module.grid_search([{3: module.uniform(0, 1)}, {1.5: module.randint(0, 9)}])}

    rays = _rays_variants(space_of, 7)
    tagger = Tagger(space_of(tune), VARIANTS)
    for seq, (config, evaluated, tag) in enumerate(rays):
        assert list(tagger.evaluated_params(config, seq).items()) == list(evaluated.items())
        assert tagger(seq, config)["experiment_tag"] == f"{seq}_{tag}"
    started: dict[str, Any] = {}

    class Starts(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            started[trial.experiment_tag] = (trial.config, trial.evaluated_params)

    def train(config):
        tune.report({"score": config["n"][1]})

    grid = tune.Tuner(train, param_space=space_of(tune),
                      tune_config=tune.TuneConfig(search_alg=tune.search.BasicVariantGenerator(random_state=7)),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[Starts()])).fit()
    assert started == {f"{seq}_{tag}": (config, evaluated) for seq, (config, evaluated, tag) in enumerate(rays)}
    assert sorted((r.config for r in grid), key=str) == sorted((config for config, _, _ in rays), key=str)
    assert all(r.metrics["experiment_tag"] in os.path.basename(r.path) for r in grid)
    assert sorted(r.metrics["experiment_tag"] for r in grid) == sorted(started)
    assert grid.get_best_result("score", "max").config["n"][1] == 6
    analysis = tune.ExperimentAnalysis(grid.experiment_path)
    assert sorted(((t.experiment_tag, t.config, t.evaluated_params) for t in analysis.trials), key=str) == sorted(
        ((tag, config, evaluated) for tag, (config, evaluated) in started.items()), key=str)


def test_a_draw_inside_a_dict_option_is_not_taken_for_a_plain_domain_option_and_large_constants_stay_small() -> None:
    """A plain domain option fitted any value, a dict too, and a tie went to the first option: for
    ``grid_search([{"x": uniform}, {"x": choice([{"y": uniform}])}])`` Ray's ``g/x/y`` was lost (only ``g``, ``g/x``).
    And a grid value holding a long list of constants was kept element by element in ``tune_params.json`` and
    compared so for every trial (a 100,000-number list: 320 s to tag 2,000 trials, a 3.5 MB file)."""
    import json

    space = {"g": tune.grid_search([{"x": tune.uniform(0, 1)}, {"x": tune.choice([{"y": tune.uniform(0, 1)}])}]),
             "c": tune.choice([tune.uniform(0, 1), {"y": tune.uniform(0, 1)}])}
    tagger = Tagger(space, VARIANTS)
    config = {"g": {"x": {"y": 0.25}}, "c": {"y": 0.5}}
    ours = tagger.evaluated_params(config, 1)
    assert list(ours) == ["c", "g", "g/x", "c/y", "g/x/y"]  # (Ray's generate_variants, same space and values)
    assert ours == {"c": {"y": 0.5}, "g": {"x": {"y": 0.25}}, "c/y": 0.5, "g/x": {"y": 0.25}, "g/x/y": 0.25}
    big = list(range(100_000))
    space = {"g": tune.grid_search([{"w": big, "lr": tune.uniform(0, 1)}, {"w": [1, 2], "lr": 0.1}])}
    tagger = Tagger(space, VARIANTS)
    assert len(json.dumps(tagger.describe())) < 1_000
    again = Tagger.from_description(json.loads(json.dumps(tagger.describe())))
    for described in (tagger, again):
        assert described.evaluated_params({"g": {"w": big, "lr": 0.5}}, 0) == {"g": {"w": big, "lr": 0.5},
                                                                             "g/lr": 0.5}
        assert described.evaluated_params({"g": {"w": [1, 2], "lr": 0.1}}, 1) == {"g": {"w": [1, 2], "lr": 0.1}}


@pytest.mark.parametrize("length", [64, 65, 100_000])
def test_options_told_apart_by_a_long_constant_list_and_a_choice_of_plain_values_keep_rays_draws(length) -> None:
    """Two grid values that differ only by a list of constants longer than ``tune_params.json`` keeps whole: the
    trial's option is still found by it (with the list described as "any", the option without a draw won: Ray's
    ``g/lr`` was lost), also read back from the file; and a ``choice`` of plain values fits no dict (it did, and
    Ray's ``h/x/y`` was lost). Ray's ``generate_variants`` gives ``['g', 'g/lr']`` and ``['g']``, and
    ``['h', 'h/x', 'h/x/y']`` for the dict."""
    import json

    big = list(range(length))
    space = {"g": tune.grid_search([{"w": big, "lr": tune.uniform(0, 1)}, {"w": [x + 1 for x in big], "lr": 0.1}]),
             "h": tune.grid_search([{"x": tune.choice([1, 2])}, {"x": tune.choice([{"y": tune.uniform(0, 1)}])}])}
    tagger = Tagger(space, VARIANTS)
    described = json.dumps(tagger.describe())
    assert len(described) < 2_000
    again = Tagger.from_description(json.loads(described))
    drawn = {"g": {"w": big, "lr": 0.5}, "h": {"x": {"y": 0.25}}}
    constant = {"g": {"w": [x + 1 for x in big], "lr": 0.1}, "h": {"x": 1}}
    for which in (tagger, again):
        assert list(which.evaluated_params(drawn, 3)) == ["g", "h", "g/lr", "h/x", "h/x/y"]
        assert list(which.evaluated_params(constant, 0)) == ["g", "h", "h/x"]


def _clean(value: Any) -> str:
    from ray.tune.search.variant_generator import _clean_value

    return _clean_value(value)


def test_a_grid_value_or_category_without_draws_is_preferred_when_the_trials_value_fits_both() -> None:
    """``grid_search([{"lr": tune.uniform(0, 1)}, {"lr": 0.1}])``: a trial of ``{"lr": 0.1}`` is the constant
    value's (Ray: ``{"g": {"lr": 0.1}}``, no ``g/lr``); a drawn one has ``g/lr`` too, as in Ray."""
    tagger = Tagger({"g": tune.grid_search([{"lr": tune.uniform(0, 1)}, {"lr": 0.1}])}, VARIANTS)
    assert tagger.evaluated_params({"g": {"lr": 0.1}}, 1) == {"g": {"lr": 0.1}}
    assert tagger.evaluated_params({"g": {"lr": 0.25}}, 0) == {"g": {"lr": 0.25}, "g/lr": 0.25}
    assert tagger(0, {"g": {"lr": 0.25}})["experiment_tag"] == "0_g=lr_0_25,lr=0.2500"  # Ray's tag of that trial
    # an object the description cannot hold fits any value, so a category described exactly is preferred to it; a
    # NumPy number of the space is the plain number the trial gets
    import numpy as np

    objects = Tagger({"d": tune.choice([{(1, 2): tune.randint(0, 3)}, {"x": np.int64(3), "y": tune.randn()}])},
                     VARIANTS)
    assert objects.evaluated_params({"d": {"x": 3, "y": 0.5}}, 0) == {"d": {"x": 3, "y": 0.5}, "d/y": 0.5}


def test_a_stored_space_description_gives_the_same_evaluated_params_as_the_space() -> None:
    """A folder without ``tune_params.json`` (``fluidsalus.run``'s): the draws of the space its store describes
    (each value's repr) are read as the space's own, nested ones and Ray's order included (they were the top-level
    keys only, in the space's order)."""
    from fluidsalus.api import _describe_space
    from fluidsalus.tune._tags import resolved_values
    from fluidsalus.tune.analysis import _value_at_key, stored_draw_tree

    space = _nested_draws_space(tune)
    tree = stored_draw_tree(_describe_space(space))
    tagger = Tagger(space, VARIANTS)
    searcher = plan(tune.TuneConfig(search_alg=tune.search.BasicVariantGenerator(random_state=5)), space).searcher
    (group,) = searcher.next_groups()
    for seq, config in enumerate(group.configs):
        read = {"/".join(map(str, path)): value
                for path, value in resolved_values(tree, lambda path, c=config: _value_at_key(c, path)).items()}
        ours = tagger.evaluated_params(config, seq)
        assert list(read.items()) == list(ours.items())
