"""Linear parameter and outcome constraints (Ax's notation) in the Optuna searcher, without Ray.

``fluidsalus/searchers/_constraints.py`` parses them and wraps a sampler so that its proposals satisfy the
parameter constraints; :class:`fluidsalus.searchers.OptunaSearch` sets the outcome constraints' violations on each
finished trial, where Optuna's ``GPSampler`` models them, and replays them on resume.
"""

from __future__ import annotations

import math
import warnings

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

import fluidsalus
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import OptunaSearch
from fluidsalus.searchers._constraints import FeasibleSampler, parse_inequality, snap

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("text, weights, bound", [
    ("x1 + x2 <= 2.0", {"x1": 1.0, "x2": 1.0}, 2.0),
    ("x3 >= x4", {"x3": -1.0, "x4": 1.0}, 0.0),
    ("2*x1 - 0.5*x2 + 1 <= 3", {"x1": 2.0, "x2": -0.5}, 2.0),
    ("l2norm <= 1.25", {"l2norm": 1.25 / 1.25}, 1.25),
    ("-x <= -1e-3", {"x": -1.0}, -1e-3),
    ("model/lr + 1.5e1 * model/wd >= .5", {"model/lr": -1.0, "model/wd": -15.0}, -0.5),
    ("x + y - x <= 1", {"y": 1.0}, 1.0),  # a name that cancels out is dropped
])
def test_a_constraint_is_parsed_into_weights_and_a_bound(text, weights, bound) -> None:
    parsed = parse_inequality(text, "f")
    assert dict(parsed.weights) == weights and math.isclose(parsed.bound, bound) and parsed.text == text


@pytest.mark.parametrize("text, message", [
    ("x1 < 2", r"exactly one '<=' or '>='"),
    ("x1 <= 2 <= 3", r"exactly one '<=' or '>='"),
    ("x1 == 2", r"exactly one '<=' or '>='"),
    ("m1 <= 5%", r"relative to a status-quo configuration"),
    ("2 <= 3", r"names no parameter or metric"),
    ("x1 + + x2 <= 1", r"cannot read 'x1 \+ \+ x2 <= 1' at '\+ \+ x2'"),
    ("x1 x2 <= 1", r"cannot read .* at 'x2'"),
    (" <= 1", r"has an empty side"),
    (3, r"each constraint must be a str"),
])
def test_a_malformed_constraint_is_refused_naming_it(text, message) -> None:
    with pytest.raises(ConfigError, match=rf"^f: .*{message}"):
        parse_inequality(text, "f")


def test_snap_puts_a_value_on_the_distributions_grid_towards_the_given_side() -> None:
    ints = IntDistribution(0, 10)
    assert snap(ints, 3.7) == 4 and snap(ints, 3.7, towards=0) == 3 and snap(ints, 3.2, towards=10) == 4
    assert snap(ints, 12.0) == 10 and snap(ints, -1.0) == 0
    stepped = FloatDistribution(0.0, 1.0, step=0.25)
    assert snap(stepped, 0.6) == 0.5 and snap(stepped, 0.6, towards=1.0) == 0.75
    assert snap(FloatDistribution(0.0, 1.0), 1.5) == 1.0


SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(1e-3, 1.0, log=True), "n": IntDistribution(0, 10),
         "c": optuna.distributions.CategoricalDistribution(["a", "b"])}
#: A thin region: about 4 % of the box of x, y and n.
THIN = ["x + y <= 0.3", "x + 0.1*n <= 0.5"]


def _holds(params: dict) -> bool:
    return params["x"] + params["y"] <= 0.3 + 1e-9 and params["x"] + 0.1 * params["n"] <= 0.5 + 1e-9


@pytest.mark.parametrize("make", [lambda: optuna.samplers.RandomSampler(seed=1),
                                  lambda: optuna.samplers.TPESampler(seed=1, n_startup_trials=5)],
                         ids=["random", "tpe"])
def test_every_proposal_of_a_wrapped_sampler_satisfies_the_constraints_and_they_spread(make) -> None:
    constraints = [parse_inequality(t, "f") for t in THIN]
    study = optuna.create_study(sampler=FeasibleSampler(make(), SPACE, constraints, seed=0))
    for _ in range(40):
        trial = study.ask(SPACE)
        assert _holds(trial.params), trial.params
        study.tell(trial, -(trial.params["x"] + trial.params["y"]))  # pushes towards the boundary
    xs = {round(t.params["x"], 6) for t in study.trials}
    assert len(xs) >= 30  # not one repaired point over and over
    assert {t.params["c"] for t in study.trials} == {"a", "b"}  # an unconstrained parameter is the sampler's


def test_a_gaussian_process_proposal_outside_the_constraints_moves_onto_their_boundary() -> None:
    from optuna.samplers import GPSampler

    space = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
    constraints = [parse_inequality("x + y <= 0.5", "f")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = FeasibleSampler(GPSampler(seed=0, n_startup_trials=5), space, constraints, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(12):
        trial = study.ask(space)
        assert trial.params["x"] + trial.params["y"] <= 0.5 + 1e-9
        study.tell(trial, trial.params["x"] + trial.params["y"])  # best on the boundary x + y = 0.5
    assert study.best_value > 0.45


def test_the_reference_point_satisfies_the_constraints_and_impossible_ones_are_refused() -> None:
    constraints = [parse_inequality(t, "f") for t in THIN]
    sampler = FeasibleSampler(optuna.samplers.RandomSampler(), SPACE, constraints)
    assert _holds(sampler.reference) and isinstance(sampler.reference["n"], int)
    with pytest.raises(ConfigError, match=r"no configuration within the parameters' bounds satisfies all of "
                                          r"\['x >= 0.5', 'x \+ y <= 0.4'\]"):
        FeasibleSampler(optuna.samplers.RandomSampler(), SPACE,
                        [parse_inequality("x >= 0.5", "f"), parse_inequality("x + y <= 0.4", "f")])
    with pytest.raises(ConfigError, match=r"names 'c', which is no float or int parameter"):
        FeasibleSampler(optuna.samplers.RandomSampler(), SPACE, [parse_inequality("c <= 1", "f")])


def test_repair_keeps_a_feasible_point_and_moves_an_infeasible_one_to_the_boundary_towards_the_reference() -> None:
    space = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
    sampler = FeasibleSampler(optuna.samplers.RandomSampler(), space, [parse_inequality("x + y <= 1", "f")])
    assert sampler.repair({"x": 0.2, "y": 0.3}) == {"x": 0.2, "y": 0.3}
    ref = sampler.reference
    assert ref["x"] + ref["y"] < 1.0  # inside, not on the boundary
    moved = sampler.repair({"x": 1.0, "y": 1.0})
    assert math.isclose(moved["x"] + moved["y"], 1.0, rel_tol=1e-9)  # on the boundary, not inside it
    # on the segment from the point to the reference
    t = (moved["x"] - ref["x"]) / (1.0 - ref["x"])
    assert math.isclose(moved["y"], ref["y"] + t * (1.0 - ref["y"]), rel_tol=1e-9)


# ---------------------------------------------------------------------------------------------------------- searcher

def _searcher(**kwargs) -> OptunaSearch:
    space = {"x": fluidsalus.uniform(0.0, 1.0), "y": fluidsalus.uniform(0.0, 1.0), "k": 3}
    return OptunaSearch(space, 4, "score", "max", sampler=optuna.samplers.RandomSampler(seed=0), **kwargs)


def _run(searcher: OptunaSearch, results: list[dict | None]) -> list[dict]:
    group = searcher.next_groups()[0]
    configs = []
    for index, config in enumerate(group.configs):
        searcher.on_trial_add(f"t{index}", group.group_id, config)
        configs.append(config)
    for index, result in enumerate(results):
        searcher.on_trial_complete(f"t{index}", result)
    return configs


def test_the_searchers_proposals_satisfy_its_parameter_constraints() -> None:
    searcher = OptunaSearch({"x": fluidsalus.uniform(0.0, 1.0), "y": fluidsalus.uniform(0.0, 1.0)}, 30, "s", "max",
                            sampler=optuna.samplers.RandomSampler(seed=3), batch_size=30,
                            parameter_constraints=["x + y <= 0.2", "x >= y"])
    configs = searcher.next_groups()[0].configs
    assert len(configs) == 30 and all(c["x"] + c["y"] <= 0.2 + 1e-9 and c["x"] >= c["y"] - 1e-9 for c in configs)


def test_each_finished_trial_gets_its_outcome_constraints_violations_and_a_resume_replays_them() -> None:
    searcher = _searcher(outcome_constraints=["l2 <= 1.25", "a + 2*b >= 1"])
    with pytest.warns(UserWarning, match=r"trial t3 is told FAIL: its last result has no finite number for \['b'\]"):
        _run(searcher, [{"score": 1.0, "l2": 1.0, "a": 1.0, "b": 0.5}, {"score": 2.0, "l2": 2.0, "a": 0.0, "b": 0.0},
                        None, {"score": 3.0, "l2": 1.0, "a": 1.0, "b": float("nan")}])
    trials = searcher.study.get_trials()
    assert trials[0].constraints == {"l2 <= 1.25": -0.25, "a + 2*b >= 1": -1.0}  # feasible: both <= 0
    assert trials[1].constraints == {"l2 <= 1.25": 0.75, "a + 2*b >= 1": 1.0}
    assert trials[0].state == TrialState.COMPLETE and trials[1].state == TrialState.COMPLETE
    assert trials[2].state == TrialState.PRUNED and trials[3].state == TrialState.FAIL  # no result; NaN
    resumed = _searcher(outcome_constraints=["l2 <= 1.25", "a + 2*b >= 1"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (with the trials' system attributes, each constraint was given twice and
        resumed.load_state_dict(searcher.state_dict())  # Optuna warned "The constraint value is ignored ...")
    replayed = {t.user_attrs["fluidsalus_trial_id"]: t for t in resumed.study.get_trials()}
    assert replayed["t0"].constraints == trials[0].constraints and replayed["t1"].constraints == trials[1].constraints


def test_a_gaussian_process_learns_the_outcome_constraint() -> None:
    from optuna.samplers import GPSampler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = GPSampler(seed=0, n_startup_trials=6)
    searcher = OptunaSearch({"x": fluidsalus.uniform(0.0, 1.0)}, 20, "score", "max", sampler=sampler, batch_size=1,
                            outcome_constraints=["x_out <= 0.4"])
    for index in range(20):
        group = searcher.next_groups()[0]
        searcher.on_trial_add(f"t{index}", group.group_id, group.configs[0])
        x = group.configs[0]["x"]
        searcher.on_trial_complete(f"t{index}", {"score": x, "x_out": x})  # the best feasible x is 0.4
    late = [t.params["x"] for t in searcher.study.trials[10:]]
    assert sum(abs(x - 0.4) < 0.1 for x in late) >= 7, late  # it searches next to the constraint's boundary
    best_feasible = max(t.value for t in searcher.study.trials if all(v <= 0 for v in t.constraints.values()))
    assert 0.35 < best_feasible <= 0.4


@pytest.mark.parametrize("kwargs, message", [
    ({"parameter_constraints": ["x + z <= 1"]}, r"parameter_constraints: 'x \+ z <= 1' names 'z', which is no float "
                                                r"or int parameter of the search space; it has \['x', 'y'\]"),
    ({"parameter_constraints": ["x + y <= 0.5"], "points_to_evaluate": [{"x": 0.4, "y": 0.4}]},
     r"points_to_evaluate\[0\] = \{'x': 0.4, 'y': 0.4\} breaks parameter_constraints 'x \+ y <= 0.5'"),
    ({"parameter_constraints": ["x + y <= 0.5"], "points_to_evaluate": [{"x": 0.4}]},
     r"points_to_evaluate\[0\] leaves \['y'\] to the sampler"),
    ({"parameter_constraints": "x <= 1"}, r"parameter_constraints: must be None or a list of str"),
    ({"outcome_constraints": ["m <= 5%"]}, r"outcome_constraints: 'm <= 5%' is relative"),
])
def test_bad_constraints_are_refused_naming_the_argument(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=rf"OptunaSearch: {message}"):
        _searcher(**kwargs)


def test_parameter_constraints_need_a_space_given_as_a_dict() -> None:
    with pytest.raises(ConfigError, match=r"parameter_constraints need the space as a dict"):
        OptunaSearch({}, 2, "s", "max", define_by_run=lambda trial: None, parameter_constraints=["x <= 1"])
