"""``HyperOptSearch`` runs the domains Ray's ``HyperOptSearch`` runs and Optuna has no distribution for.

Ray 2.60 converts Tune's ``qloguniform``, ``qlograndint`` (``q > 1``), ``randn`` and ``qrandn`` into HyperOpt's
``hp.qloguniform``, ``hp.normal`` and ``hp.qnormal``; HyperOpt's own ``hp.normal``, ``qnormal``, ``lognormal`` and
``qlognormal`` run in a space of ``hp.*`` expressions. fluidsalus refused them all (a ``SpaceError``, a
``ConfigError``); they are now sampled through a transform of one Optuna parameter
(``fluidsalus/searchers/_transformed.py``), while ``OptunaSearch`` refuses them as Ray's does.
"""

from __future__ import annotations

import math
import statistics
from statistics import NormalDist

import optuna
import pytest

import fluidsalus.tune as tune
from fluidsalus.errors import ConfigError, SpaceError
from fluidsalus.searchers._transformed import QUANTILE_EPS
from fluidsalus.tune import TuneConfig, Tuner
from fluidsalus.tune._translate import plan
from fluidsalus.tune.search.hyperopt import HyperOptSearch
from fluidsalus.tune.search.optuna import OptunaSearch

#: Random draws per distribution check (TPE's ask scans the study's trials: 500 asks take about 1 s).
DRAWS = 500
#: Standard errors a sample statistic may be off by (the draws are seeded: the check is deterministic).
STANDARD_ERRORS = 4.5
#: Tolerance of a sample mean, in standard deviations of the distribution (its standard error is sd / sqrt(n)).
MEAN_TOLERANCE = STANDARD_ERRORS / math.sqrt(DRAWS)
#: Relative tolerance of a sample standard deviation (its standard error is about sd / sqrt(2 n)).
SD_TOLERANCE = STANDARD_ERRORS / math.sqrt(2 * DRAWS)


def _space() -> dict:
    return {"w": tune.randn(2.0, 0.5), "b": tune.qrandn(0.0, 3.0, 0.5), "c": 7,
            "opt": {"lr": tune.qloguniform(1e-4, 1e-1, 1e-4), "n": tune.qlograndint(1, 100, 5)}}


def _on_grid(value: float, q: float) -> bool:
    return math.isclose(value / q, round(value / q), abs_tol=1e-6)


def _check(config: dict) -> None:
    """The keys and types of Ray's HyperOptSearch's configurations, and its ranges and multiples of q."""
    assert set(config) == {"w", "b", "c", "opt"} and set(config["opt"]) == {"lr", "n"} and config["c"] == 7
    assert isinstance(config["w"], float) and isinstance(config["b"], float) and _on_grid(config["b"], 0.5)
    lr, n = config["opt"]["lr"], config["opt"]["n"]
    assert isinstance(lr, float) and 1e-4 <= lr <= 1e-1 and _on_grid(lr, 1e-4)
    assert type(n) is int and 5 <= n <= 100 and n % 5 == 0  # (Ray's can round to 0: see docs/compatibility.md)


def test_tune_domains_optuna_has_none_for_are_sampled_as_hyperopt_samples_them() -> None:
    """They were a SpaceError ("has no Optuna equivalent") where Ray's HyperOptSearch runs them."""
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=DRAWS,
                               search_alg=HyperOptSearch(n_initial_points=DRAWS, random_state_seed=0)),
                    _space()).searcher
    study_sees = {name: (d.low, d.high, d.log) for name, d in searcher._distributions.items()}
    assert study_sees == {"w:quantile": (QUANTILE_EPS, 1 - QUANTILE_EPS, False),
                          "b:quantile": (QUANTILE_EPS, 1 - QUANTILE_EPS, False),
                          "opt/lr": (1e-4, 1e-1, True), "opt/n": (1, 100, True)}
    group = searcher.propose(DRAWS)  # all in TPE's random phase (n_initial_points)
    for config in group.configs:
        _check(config)
    w = [config["w"] for config in group.configs]
    assert statistics.mean(w) == pytest.approx(2.0, abs=MEAN_TOLERANCE * 0.5)
    assert statistics.stdev(w) == pytest.approx(0.5, rel=SD_TOLERANCE)
    b = [config["b"] for config in group.configs]
    assert statistics.mean(b) == pytest.approx(0.0, abs=MEAN_TOLERANCE * 3.0)
    assert statistics.stdev(b) == pytest.approx(3.0, rel=SD_TOLERANCE)  # (+q^2/12 from rounding: 0.2%)
    # the trial's configuration holds the value; the study holds its quantile
    trial = searcher.study.trials[0]
    assert 0 < trial.params["w:quantile"] < 1 and "w" not in trial.params
    assert group.configs[0]["w"] == NormalDist(2.0, 0.5).inv_cdf(trial.params["w:quantile"])
    assert group.configs[0]["opt"]["lr"] == round(trial.params["opt/lr"] / 1e-4) * 1e-4
    assert len({config["opt"]["n"] for config in group.configs}) == 20  # every multiple of 5 in [5, 100]


def test_points_to_evaluate_give_their_values_exactly_and_bad_ones_are_named() -> None:
    """As Ray takes them: in the value space (the inverse CDF of the CDF is not exact; the point's value is)."""
    point = {"w": 7.5, "b": -1.5, "opt": {"lr": 0.0123, "n": 45}}
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=3,
                               search_alg=HyperOptSearch(points_to_evaluate=[point, {"w": 0.1}],
                                                         random_state_seed=1)), _space()).searcher
    configs = searcher.propose(3).configs
    assert configs[0] == {**point, "c": 7} and configs[1]["w"] == 0.1
    _check(configs[2])
    assert searcher.study.trials[0].params["w:quantile"] == pytest.approx(NormalDist(2.0, 0.5).cdf(7.5))
    for bad, message in [({"w": "x"}, r"\['w'\] = 'x' is outside the parameter's range \('x' is not a finite"),
                         ({"opt": {"n": 3}}, r"\['opt/n'\] = 3 is outside the parameter's range \(3 is outside "
                                             r"\[5, 100\]\)"),
                         ({"opt": {"n": 7.5}}, r"\['opt/n'\] = 7.5 .*\(7.5 is not an integer\)")]:
        with pytest.raises(ConfigError, match=r"^HyperOptSearch: points_to_evaluate\[0\]" + message):
            plan(TuneConfig(metric="m", mode="min", search_alg=HyperOptSearch(points_to_evaluate=[bad])), _space())


def test_an_evaluated_point_is_added_with_its_quantile() -> None:
    search = HyperOptSearch(space={"w": tune.randn(), "n": tune.qlograndint(1, 100, 5)}, metric="m", mode="min")
    search.add_evaluated_point({"w": 0.3, "n": 10}, 1.0)
    study = plan(TuneConfig(num_samples=2, search_alg=search), {}).searcher.study
    assert [(t.params, t.value) for t in study.trials] == [({"w:quantile": NormalDist().cdf(0.3), "n": 10.0}, 1.0)]


@pytest.mark.parametrize("domain", [tune.randn(), tune.qrandn(0, 1, 0.5), tune.qlograndint(1, 100, 5)])
def test_optuna_search_still_refuses_them_as_rays_does(domain) -> None:
    with pytest.raises(ConfigError, match=r"^OptunaSearch: parameter 'x': .* has no Optuna equivalent"):
        plan(TuneConfig(metric="m", mode="min", search_alg=OptunaSearch()), {"x": domain})


def test_hyperopts_own_normals_are_sampled_through_their_quantile() -> None:
    """``hp.normal``/``qnormal``/``lognormal``/``qlognormal`` were a ConfigError ("Optuna has no normal
    distribution")."""
    hp = pytest.importorskip("hyperopt").hp
    search = HyperOptSearch(space={"a": hp.normal("a", 1, 2), "b": hp.qnormal("b", 0, 3, 0.5),
                                   "c": {"d": hp.lognormal("logd", 0, 0.5)}, "e": hp.qlognormal("e", 1, 0.5, 1)},
                            points_to_evaluate=[{"a": 9.25, "c": {"d": 2.5}, "e": 0.0}])
    space = search.hyperopt_space
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(search.points_to_evaluate[0])
    first = space(study.ask())
    assert (first["a"], first["c"]["d"], first["e"]) == (9.25, 2.5, 0.0) and _on_grid(first["b"], 0.5)
    configs, trial = [], None
    for _ in range(DRAWS):
        trial = study.ask()
        configs.append(space(trial))
    assert set(trial.params) == {"a:quantile", "b:quantile", "logd:quantile", "e:quantile"}
    assert configs[-1]["a"] == NormalDist(1, 2).inv_cdf(trial.params["a:quantile"])
    a, b = [c["a"] for c in configs], [c["b"] for c in configs]
    assert statistics.mean(a) == pytest.approx(1, abs=MEAN_TOLERANCE * 2) and statistics.stdev(a) == pytest.approx(
        2, rel=SD_TOLERANCE)
    assert statistics.stdev(b) == pytest.approx(3, rel=SD_TOLERANCE) and all(_on_grid(x, 0.5) for x in b)
    logs = [math.log(c["c"]["d"]) for c in configs]  # a lognormal's log is normal
    assert statistics.mean(logs) == pytest.approx(0, abs=MEAN_TOLERANCE * 0.5)
    assert statistics.stdev(logs) == pytest.approx(0.5, rel=SD_TOLERANCE)
    assert all(c["e"] >= 0 and _on_grid(c["e"], 1) for c in configs)
    with pytest.raises(ConfigError, match=r"points_to_evaluate: c/d=-1 cannot be a value of hp.lognormal\('logd'"):
        HyperOptSearch(space={"c": {"d": hp.lognormal("logd", 0, 1)}}, points_to_evaluate=[{"c": {"d": -1}}])


def test_a_tuner_runs_hyperopt_search_over_normals_and_rounded_log_scales(ray_cluster, storage) -> None:
    def objective(config):
        tune.report({"loss": (config["w"] - 2) ** 2 + config["b"] ** 2 + config["opt"]["lr"]})

    point = {"w": 2.25, "b": -1.5, "opt": {"lr": 0.0123, "n": 45}}
    search = HyperOptSearch(metric="loss", mode="min", points_to_evaluate=[point], n_initial_points=3,
                            random_state_seed=0)
    tuner = Tuner(objective, param_space=_space(), tune_config=TuneConfig(num_samples=6, search_alg=search),
                  run_config=tune.RunConfig(storage_path=storage, verbose=0))
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    configs = [result.config for result in grid]
    for config in configs:
        _check(config)
    assert {**point, "c": 7} in configs


def test_a_resumed_search_goes_on_with_its_transformed_parameters() -> None:
    """The saved state holds the study's parameters (the quantiles); a resumed search proposes what the
    uninterrupted one does, values and not quantiles."""
    import json

    from fluidsalus.searchers import OptunaSearch as EngineOptunaSearch

    def make() -> EngineOptunaSearch:
        return EngineOptunaSearch(_space(), 8, "m", "min", seed=3, batch_size=1, hyperopt_domains=True,
                                  points_to_evaluate=[{"w": 7.5}])

    def configs(search: EngineOptunaSearch, first: int, count: int) -> list[dict]:
        out = []
        for index in range(first, first + count):
            (group,) = search.next_groups()
            (config,) = group.configs
            search.on_trial_add(f"t{index}", group.group_id, config)
            search.on_trial_complete(f"t{index}", {"m": config["w"] ** 2, "training_iteration": 1})
            out.append(config)
        return out

    uninterrupted = make()
    before = configs(uninterrupted, 0, 4)
    assert before[0]["w"] == 7.5
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(uninterrupted.state_dict())))
    after = configs(resumed, 4, 4)
    assert after == configs(uninterrupted, 4, 4)
    for config in before + after:
        _check(config)


def test_points_far_in_the_same_tail_keep_their_own_values() -> None:
    """Their quantiles are clipped to the same bound (7.5 and 8.0 are 11 and 12 sd above the mean): the second
    point's value was given to both trials; Ray's HyperOptSearch runs each as given."""
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=4,
                               search_alg=HyperOptSearch(points_to_evaluate=[{"w": 7.5}, {"w": 8.0}, {"w": -30.0},
                                                                             {"w": -40.0}])),
                    {"w": tune.randn(2.0, 0.5)}).searcher
    assert [config["w"] for config in searcher.propose(4).configs] == [7.5, 8.0, -30.0, -40.0]
    assert all(QUANTILE_EPS <= trial.params["w:quantile"] <= 1 - QUANTILE_EPS for trial in searcher.study.trials)


def test_a_point_choosing_a_dict_option_gives_its_normal_its_value() -> None:
    """The option's ``hp.normal`` is suggested as its quantile: the point gave the value under the label, which
    no suggestion reads, so the trial ran a random draw."""
    hp = pytest.importorskip("hyperopt").hp
    search = HyperOptSearch(space={"opt": hp.choice("opt", [{"kind": "a", "x": hp.normal("x", 0, 1)},
                                                            {"kind": "b", "y": hp.uniform("y", 0, 1)}])},
                            points_to_evaluate=[{"opt": {"kind": "a", "x": 0.5}}, {"opt": {"kind": "b", "y": 0.25}}])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    configs = []
    for point in search.points_to_evaluate:
        study.enqueue_trial(point)
        configs.append(search.hyperopt_space(study.ask()))
    assert configs == [{"opt": {"kind": "a", "x": 0.5}}, {"opt": {"kind": "b", "y": 0.25}}]


def test_a_key_named_as_a_normals_quantile_is_refused() -> None:
    """Both were the Optuna parameter ``"w:quantile"``: one overwrote the other, and the configs lost a key."""
    with pytest.raises(ConfigError, match=r"^HyperOptSearch: parameter 'w': randn.* Optuna parameter 'w:quantile', "
                                          r"which is also a key of the space"):
        plan(TuneConfig(metric="m", mode="min", search_alg=HyperOptSearch()),
             {"w": tune.randn(), "w:quantile": tune.uniform(0, 1)})


def _hyperopt_configs(space: dict, count: int, points: list[dict] | None = None) -> list[dict]:
    """The first ``count`` configurations a seeded HyperOptSearch over HyperOpt's own ``space`` proposes."""
    search = HyperOptSearch(space=space, metric="m", mode="min", points_to_evaluate=points, random_state_seed=0)
    return plan(TuneConfig(num_samples=count, search_alg=search), {}).searcher.propose(count).configs


def test_a_normal_with_sigma_0_is_always_its_mean_as_hyperopt_draws_it() -> None:
    """They raised a StatisticsError at the first suggestion. HyperOpt's random draws (``fmin`` with
    ``rand.suggest``, and Ray's HyperOptSearch until its TPE fails on them) are ``mu`` each time (``exp(mu)`` for
    a lognormal), rounded to ``q``; a point's values are run as given, as Ray runs them."""
    hp = pytest.importorskip("hyperopt").hp
    space = {"a": hp.normal("a", 1, 0), "b": hp.lognormal("b", 0, 0), "c": hp.qnormal("c", 1.3, 0, 0.5),
             "d": hp.qlognormal("d", 1, 0, 1)}
    configs = _hyperopt_configs(space, 6, points=[{"a": 5.0}, {"a": 6.0, "c": 2.0}])
    assert configs[:2] == [{"a": 5.0, "b": 1.0, "c": 1.5, "d": 3.0}, {"a": 6.0, "b": 1.0, "c": 2.0, "d": 3.0}]
    assert configs[2:] == [{"a": 1.0, "b": 1.0, "c": 1.5, "d": 3.0}] * 4


@pytest.mark.parametrize(("dist", "message"), [
    (lambda hp: hp.normal("a", 1, -1), r"parameter 'a': hp.normal\('a', mu=1, sigma=-1\): sigma must be >= 0 "),
    (lambda hp: hp.lognormal("a", 0, -0.5), r"parameter 'a': hp.lognormal\('a', mu=0, sigma=-0.5\): sigma must be "
                                            r">= 0 "),
    (lambda hp: hp.qnormal("a", 0, 1, 0), r"parameter 'a': hp.qnormal\('a', mu=0, sigma=1, q=0\): q must be a "
                                          r"finite number > 0, got 0.0$"),
    (lambda hp: hp.qlognormal("a", 0, 1, -1), r"parameter 'a': hp.qlognormal\('a', mu=0, sigma=1, q=-1\): q must"),
    (lambda hp: hp.quniform("a", 0, 1, 0), r"parameter 'a': hp.quniform\('a', low=0, high=1, q=0\): q must"),
    (lambda hp: hp.choice("c", [{"x": hp.qloguniform("x", 0, 1, 0.0)}, 1]),
     r"parameter 'x': hp.qloguniform\('x', low=0, high=1, q=0.0\): q must"),
])
def test_a_negative_sigma_or_a_q_not_above_0_is_refused_when_the_search_is_built(dist, message) -> None:
    """They failed at the first suggestion (StatisticsError, ZeroDivisionError), naming nothing. HyperOpt fails on
    a negative sigma ("scale < 0") and gives NaN for q = 0; a negative q it rounds as |q|, refused here as
    fluidsalus's quniform/qrandn refuse it."""
    hp = pytest.importorskip("hyperopt").hp
    with pytest.raises(ConfigError, match="^HyperOptSearch: " + message):
        HyperOptSearch(space={"a": dist(hp)}, metric="m", mode="min")


def test_hyperopt_arguments_given_by_name_are_read_as_hyperopt_reads_them() -> None:
    """``hp.normal("a", mu=1, sigma=0.1)``, ``hp.uniformint("n", 1, high=10)`` (Ray's own style) and the like run in
    Ray's HyperOptSearch; they raised an IndexError (at the first suggestion, and for a normal or a q-distribution
    when the search was built), and a ``q <= 0`` given by name was shown against the wrong argument."""
    hp = pytest.importorskip("hyperopt").hp
    space = {"u": hp.uniform("u", low=2, high=3), "l": hp.loguniform("l", low=-3, high=0),
             "n": hp.normal("n", mu=1, sigma=0.1), "m": hp.qlognormal("m", 0, sigma=1, q=2),
             "i": hp.uniformint("i", 1, high=10), "r": hp.randint("r", low=2, high=5)}
    for config in _hyperopt_configs(space, 20):
        assert 2 <= config["u"] <= 3 and math.exp(-3) <= config["l"] <= 1 and 0 <= config["m"] and config["m"] % 2 == 0
        assert abs(config["n"] - 1) < 0.8 and type(config["i"]) is int and 1 <= config["i"] <= 10
        assert 2 <= config["r"] <= 4
    with pytest.raises(ConfigError, match=r"parameter 'a': hp.quniform\('a', low=0, high=10, q=0\): q must"):
        HyperOptSearch(space={"a": hp.quniform("a", low=0, high=10, q=0)})
    with pytest.raises(ConfigError, match=r"parameter 'a': hp.qnormal\('a', mu=0, sigma=-1, q=1\): sigma must"):
        HyperOptSearch(space={"a": hp.qnormal("a", mu=0, sigma=-1, q=1)})


def test_a_hyperopt_label_named_as_a_normals_quantile_is_refused() -> None:
    """Both were the Optuna parameter ``"a:quantile"``: the normal's value was computed from the uniform's draw."""
    hp = pytest.importorskip("hyperopt").hp
    with pytest.raises(ConfigError, match=r"^HyperOptSearch: hp.normal\('a', ...\) is searched as its quantile, the "
                                          r"Optuna parameter 'a:quantile', which is also the label of another"):
        HyperOptSearch(space={"a": hp.normal("a", 0, 1), "b": {"c": hp.uniform("a:quantile", 0, 1)}})


def test_a_choice_whose_options_hold_parameters_is_searched_as_rays_hyperopt_search_converts_it() -> None:
    """It was a SpaceError ("holds domains ..., which Optuna's CategoricalDistribution cannot express"). Ray's
    HyperOptSearch converts it to ``hp.choice("x", [{"a": hp.uniform("x/a", 0, 1), "k": 1}, {"b": 2},
    hp.normal("x/2", 2, 0.5)])``: only the chosen option's parameters are drawn, under those labels."""
    space = {"x": tune.choice([{"a": tune.uniform(0, 1), "k": 1}, {"b": 2}, tune.randn(2.0, 0.5)]),
             "c": tune.uniform(0, 1), "k": 3}
    points = [{"x": {"b": 2}}, {"x": {"a": 0.25}}, {"x": 7.5, "c": 0.5}]
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=60,
                               search_alg=HyperOptSearch(points_to_evaluate=points, random_state_seed=0)),
                    space).searcher
    configs = searcher.propose(60).configs
    assert [config["x"] for config in configs[:3]] == [{"b": 2}, {"a": 0.25, "k": 1}, 7.5] and configs[2]["c"] == 0.5
    options = []
    for config, trial in zip(configs, searcher.study.trials, strict=True):
        assert list(config) == ["x", "c", "k"] and config["k"] == 3 and 0 <= config["c"] <= 1
        x, option = config["x"], trial.params["x"]
        options.append(option)
        if option == 0:
            assert set(x) == {"a", "k"} and x["k"] == 1 and x["a"] == trial.params["x/a"] and 0 <= x["a"] <= 1
            assert set(trial.params) == {"x", "x/a", "c"}
        elif option == 1:
            assert x == {"b": 2} and set(trial.params) == {"x", "c"}
        else:
            assert isinstance(x, float) and set(trial.params) == {"x", "x/2:quantile", "c"}
    assert set(options[3:]) == {0, 1, 2}  # each option drawn
    with pytest.raises(ConfigError, match=r"^HyperOptSearch: points_to_evaluate\[0\]: 'x' = \{'a': 3.0\} is not a "
                                          r"value any option of choice"):
        plan(TuneConfig(metric="m", mode="min", search_alg=HyperOptSearch(points_to_evaluate=[{"x": {"a": 3.0}}])),
             space)
    with pytest.raises(SpaceError, match=r"^HyperOptSearch: parameter 'x/a': two options of a choice hold a "
                                         r"parameter under this key"):
        plan(TuneConfig(metric="m", mode="min", search_alg=HyperOptSearch()),
             {"x": tune.choice([{"a": tune.uniform(0, 1)}, {"a": tune.randint(0, 5)}])})
    search = HyperOptSearch(space=space, metric="m", mode="min")  # (Ray's HyperOptSearch takes no evaluated points)
    search.add_evaluated_point({"x": {"b": 2}, "c": 0.5}, 1.0)
    with pytest.raises(ConfigError, match=r"^HyperOptSearch: evaluated points cannot be added to a space with a "
                                          r"choice whose options hold parameters"):
        plan(TuneConfig(num_samples=2, search_alg=search), {})


def test_a_rounded_log_scale_in_a_conditional_space_is_drawn_on_its_log_scale() -> None:
    """A ``qloguniform`` or ``qlograndint`` (``q > 1``) anywhere in a space with such a choice was asked as a uniform
    over its bounds (a median lr of 0.49 for ``qloguniform(1e-4, 1, 1e-4)``, h236's qlog_in_conditional.py), where Ray's
    ``hp.qloguniform`` and the flat space draw it log-uniformly."""
    space = {"lr": tune.qloguniform(1e-4, 1, 1e-4),
             "x": tune.choice([{"n": tune.qlograndint(1, 10000, 5)}, {"b": 2}])}
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=40,
                               search_alg=HyperOptSearch(random_state_seed=0)), space).searcher
    searcher.propose(40)
    log_scales = {name: (d.low, d.high, d.log) for t in searcher.study.trials for name, d in t.distributions.items()
                  if name in ("lr", "x/n")}
    assert log_scales == {"lr": (1e-4, 1.0, True), "x/n": (1.0, 10000.0, True)}


def test_a_chosen_options_dicts_have_their_keys_sorted_as_rays_and_the_rest_keeps_the_spaces_order() -> None:
    """Ray's Tuner gives ``{"z": 1, "x": {"b": {"c": 3, "y": 2}, "k": 1, "m": 0.38}, "o": {...}}`` for this space
    (h236's ray_tuner_order.py): HyperOpt's ``dict`` node sorts the keys of a chosen option's dicts, and the rest
    of the configuration is the space's, in its order. The option's dicts kept the space's order until h236."""
    space = {"z": 1, "x": tune.choice([{"m": tune.uniform(0, 1), "k": 1, "b": {"y": 2, "c": 3}}, 5]),
             "o": {"s": tune.uniform(0, 1), "e": 2}}
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=12, search_alg=HyperOptSearch(random_state_seed=0)),
                    space).searcher
    configs = [c for c in searcher.propose(12).configs if c["x"] != 5]
    assert configs and all(list(c) == ["z", "x", "o"] and list(c["o"]) == ["s", "e"] for c in configs)
    assert all(list(c["x"]) == ["b", "k", "m"] and list(c["x"]["b"]) == ["c", "y"] for c in configs)


def test_a_tuner_runs_hyperopt_search_over_a_choice_whose_options_hold_parameters(ray_cluster, storage) -> None:
    def objective(config):
        tune.report({"loss": config["opt"]["lr"] if "lr" in config["opt"] else 1.0})

    space = {"opt": tune.choice([{"name": "sgd", "lr": tune.loguniform(1e-4, 1e-1)}, {"name": "adam"}])}
    search = HyperOptSearch(metric="loss", mode="min", points_to_evaluate=[{"opt": {"name": "adam"}}],
                            n_initial_points=2, random_state_seed=0)
    grid = Tuner(objective, param_space=space, tune_config=TuneConfig(num_samples=5, search_alg=search),
                 run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert len(grid) == 5 and grid.num_errors == 0
    configs = [result.config for result in grid]
    assert {"opt": {"name": "adam"}} in configs
    assert all(c["opt"] == {"name": "adam"} or (c["opt"]["name"] == "sgd" and 1e-4 <= c["opt"]["lr"] <= 1e-1)
               for c in configs)


def test_domains_inside_lists_are_searched_under_rays_labels_and_every_list_comes_back_a_tuple() -> None:
    """Ray's HyperOptSearch runs ``{"l": [tune.choice([32, 64]), tune.uniform(0, 1), 1]}``: its conversion labels the
    list's domains ``l/0``, ``l/1`` and HyperOpt hands back every list of the space as a tuple, constant or not,
    nested ones too, the dicts inside them with sorted keys (``{'l': (64, 0.84, 1)}``, h253's ref.py). fluidsalus
    refused it ("domains and grid searches inside a list cannot be flattened"); OptunaSearch still does (Ray's fails
    on it with a TypeError)."""
    space = {"l": [tune.choice([32, 64]), tune.uniform(0, 1), 1], "z": 0,
             "d": {"n": [[tune.randint(0, 5), 2], {"b": tune.randn(0, 1), "a": 1}], "c": [1, 2], "e": 3}}
    points = [{"l": [64, 0.25, 1]}, {"l/1": 0.5, "d/n/0/0": 3}]
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=8,
                               search_alg=HyperOptSearch(points_to_evaluate=points, random_state_seed=0)),
                    space).searcher
    configs = searcher.propose(8).configs
    assert configs[0]["l"] == (64, 0.25, 1) and configs[1]["l"][1] == 0.5 and configs[1]["d"]["n"][0][0] == 3
    for config, trial in zip(configs, searcher.study.trials, strict=True):
        assert set(trial.params) == {"l/0", "l/1", "d/n/0/0", "d/n/1/b:quantile"}
        assert list(config) == ["l", "z", "d"] and list(config["d"]) == ["n", "c", "e"]
        (size, share, one), (pair, normal) = config["l"], config["d"]["n"]
        assert size in (32, 64) and 0 <= share <= 1 and one == 1 and share == trial.params["l/1"]
        assert type(pair) is tuple and pair[1] == 2 and pair[0] == trial.params["d/n/0/0"]
        assert list(normal) == ["a", "b"] and isinstance(normal["b"], float) and config["d"]["c"] == (1, 2)
    with pytest.raises(ConfigError, match=r"points_to_evaluate\[0\]: 'l/3' is not a position of the list at 'l'"):
        plan(TuneConfig(metric="m", mode="min", search_alg=HyperOptSearch(points_to_evaluate=[{"l/3": 1}])), space)
    with pytest.raises(SpaceError, match=r"^OptunaSearch: parameter 'l': domains and grid searches inside a list"):
        plan(TuneConfig(metric="m", mode="min", search_alg=OptunaSearch()), {"l": [tune.uniform(0, 1)]})


def test_a_flat_spaces_constant_lists_come_back_tuples_as_from_rays_hyperopt_search() -> None:
    """Ray's gives ``{'c': (1, 2), 'x': 0.21, 'e': ()}`` for ``{"c": [1, 2], "x": tune.uniform(0, 1), "e": []}``
    (HyperOpt evaluates the whole space); fluidsalus gave the lists. A point may still give the constant as a list."""
    space = {"c": [1, 2], "x": tune.uniform(0, 1), "e": [], "d": {"k": [{"b": 1, "a": [2]}]}}
    searcher = plan(TuneConfig(metric="m", mode="min", num_samples=2,
                               search_alg=HyperOptSearch(points_to_evaluate=[{"c": [1, 2], "x": 0.5}])),
                    space).searcher
    for config in searcher.propose(2).configs:
        assert config["c"] == (1, 2) and config["e"] == () and config["d"] == {"k": ({"a": (2,), "b": 1},)}
        assert list(config["d"]["k"][0]) == ["a", "b"]


def test_a_hyperopt_space_gives_tuples_for_its_lists_and_its_dicts_keys_sorted_as_ray() -> None:
    """Ray's HyperOptSearch over ``{"l": [hp.choice("a", [32, 64]), hp.uniform("b", 0, 1), 1], "c": [1, 2],
    "t": (hp.uniform("u", 0, 1), 3)}`` gives ``{'c': (1, 2), 'l': (32, 0.17, 1), 't': (0.76, 3)}`` (HyperOpt's
    ``pos_args`` and ``dict`` nodes); fluidsalus gave the lists, in the space's key order. A point's values for the
    parameters in a list were ignored (Ray's fails on them: h253's ray_points.py); they are run."""
    hp = pytest.importorskip("hyperopt").hp
    space = {"l": [hp.choice("a", [32, 64]), hp.uniform("b", 0, 1), 1], "c": [1, 2], "t": (hp.uniform("u", 0, 1), 3),
             "d": {"y": 1, "x": [{"q": 2, "p": 1}]}}
    configs = _hyperopt_configs(space, 4, points=[{"l": [64, 0.5, 1], "t": (0.25, 3)}])
    assert configs[0]["l"] == (64, 0.5, 1) and configs[0]["t"] == (0.25, 3)  # (the point's list was ignored)
    for config in configs:
        assert list(config) == ["c", "d", "l", "t"] and config["c"] == (1, 2) and config["t"][1] == 3
        assert config["l"][0] in (32, 64) and config["l"][2] == 1 and type(config["l"]) is tuple
        assert config["d"] == {"x": ({"p": 1, "q": 2},), "y": 1} and list(config["d"]) == ["x", "y"]
    with pytest.raises(ConfigError, match=r"points_to_evaluate: l=\[64\] is not a list of 3 values"):
        HyperOptSearch(space=space, metric="m", mode="min", points_to_evaluate=[{"l": [64]}])


def test_a_hyperopt_parameter_whose_arguments_are_parameters_draws_them_first() -> None:
    """``hp.normal("a", 0, hp.uniform("s", 0.1, 1))`` raised an AttributeError at the first suggestion (its arguments
    were evaluated without the trial). HyperOpt draws ``s`` first, then ``a`` with that sigma (Ray's HyperOptSearch
    does so for its random trials, then its TPE fails on such a space: h253's hpnested_ray.py); here each argument is
    suggested in the trial before the parameter, and Optuna's TPE models on (a uniform's drawn bounds are the
    trial's own distribution; a normal's quantile keeps its bounds). A point cannot give such a normal's value."""
    hp = pytest.importorskip("hyperopt").hp
    space = {"a": hp.normal("a", 0, hp.uniform("s", 0.1, 1)), "b": hp.uniform("b", 0, hp.uniform("hi", 1, 2)),
             "n": hp.randint("n", 1, hp.choice("top", [3, 10]))}
    search = HyperOptSearch(space=space, metric="m", mode="min", n_initial_points=3, random_state_seed=0)
    searcher = plan(TuneConfig(num_samples=12, search_alg=search), {}).searcher
    for _ in range(12):
        config, trial = searcher.propose(1).configs[0], searcher.study.trials[-1]
        params = trial.params  # (the study is told each value, so TPE models from the fourth trial on)
        assert set(params) == {"s", "a:quantile", "hi", "b", "top", "n"} and 0.1 <= params["s"] <= 1
        assert config["a"] == pytest.approx(NormalDist(0, params["s"]).inv_cdf(params["a:quantile"]))
        assert 0 <= config["b"] == params["b"] <= params["hi"] and trial.distributions["b"].high == params["hi"]
        assert 1 <= config["n"] < (3, 10)[params["top"]]
        searcher.study.tell(trial.number, config["a"] ** 2 + config["b"])
    with pytest.raises(ConfigError, match=r"^HyperOptSearch: points_to_evaluate: a: hp.normal\('a', ...\) has "
                                          r"arguments drawn in each trial"):
        HyperOptSearch(space=space, metric="m", mode="min", points_to_evaluate=[{"a": 0.5}])
    with pytest.raises(ConfigError, match=r"^HyperOptSearch: parameter 'b': hp.uniform\('b', low=0, high=-1.\d+\), "
                                          r"with the arguments drawn in trial 0: "):
        _hyperopt_configs({"b": hp.uniform("b", 0, hp.uniform("hi", -2, -1))}, 1)
