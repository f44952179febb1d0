"""BOHB: the NumPy KDE model (encoding, densities, proposals), BOHB and SyncBOHB end to end through the pure
driver, state round trips, bad input, and a reduced search-quality check on multi-fidelity Hartmann-6."""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
import sys
from collections import Counter

import numpy as np
import pytest
from test_searchers_asha_hyperband import (
    Recorder,
    _expected_finals,
    assert_round_trip_continues_the_same_search,
    curve,
)

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._bohb import BOHB, BOHBModel, KernelDensity, SpaceEncoder, SyncBOHB
from fluidsalus.testing import drive

SPACE = {"a": sp.uniform(0.0, 1.0), "b": sp.uniform(0.0, 1.0), "fixed": 7}
MIXED = {
    "lr": sp.loguniform(1e-4, 1e-1),
    "width": sp.qrandint(16, 256, 16),
    "layers": sp.randint(1, 5),
    "drop": sp.quniform(0.0, 0.5, 0.1),
    "act": sp.choice(["relu", "tanh", "gelu"]),
    "model": {"depth": sp.lograndint(1, 100), "name": "mlp"},
}


# --------------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------------


def test_encoder_round_trips_configurations_and_decodes_any_vector_into_the_space():
    encoder = SpaceEncoder("BOHB", MIXED)
    assert encoder.paths == ["lr", "width", "layers", "drop", "act", "model/depth"]
    assert list(encoder.kinds) == [0, 0, 0, 0, 3, 0]
    rng = np.random.default_rng(0)
    for _ in range(200):
        config = encoder.sample(rng)
        assert config["model"]["name"] == "mlp"
        decoded = encoder.decode(np.array(encoder.encode(config)))
        assert decoded["width"] == config["width"] and decoded["layers"] == config["layers"]
        assert decoded["act"] == config["act"] and decoded["model"]["depth"] == config["model"]["depth"]
        assert math.isclose(decoded["lr"], config["lr"], rel_tol=1e-9)
        assert math.isclose(decoded["drop"], config["drop"], abs_tol=1e-9)
    for vector in rng.uniform(-0.2, 1.2, size=(200, 6)):
        vector[4] = rng.integers(0, 3)
        config = encoder.decode(vector)
        assert 1e-4 <= config["lr"] <= 1e-1 and config["width"] in range(16, 257, 16)
        assert config["layers"] in (1, 2, 3, 4) and 1 <= config["model"]["depth"] <= 99
        assert min(abs(config["drop"] - 0.1 * k) for k in range(6)) < 1e-9
    # Integers own equal shares of the unit interval: randint(1, 5) -> 1, 2, 3, 4 at 1/8, 3/8, 5/8, 7/8.
    coordinates = [encoder.encode({**encoder.sample(rng), "layers": k})[2] for k in (1, 2, 3, 4)]
    assert coordinates == [0.125, 0.375, 0.625, 0.875]


def test_kernel_density_is_statsmodels_normal_reference_product_kernel():
    data = np.array([[0.1, 0.0], [0.4, 1.0], [0.5, 1.0], [0.9, 2.0]])
    kde = KernelDensity(data, np.array([0, 3]), min_bandwidth=1e-3)
    n, d = data.shape
    expected_bw = 1.06 * data.std(axis=0) * n ** (-1 / (d + 4))
    assert kde.bw[0] == pytest.approx(expected_bw[0])
    assert kde.bw[1] == pytest.approx(min(expected_bw[1], 2 / 3))  # clipped where the kernel is uniform
    point = np.array([0.45, 1.0])
    h0, h1 = kde.bw
    gauss = np.exp(-0.5 * ((point[0] - data[:, 0]) / h0) ** 2) / (math.sqrt(2 * math.pi) * h0)
    aitchison = np.where(data[:, 1] == point[1], 1 - h1, h1 / 2)
    assert kde.pdf(point[None, :])[0] == pytest.approx(np.mean(gauss * aitchison))
    assert KernelDensity(np.zeros((3, 1)), np.array([0]), min_bandwidth=0.05).bw[0] == 0.05


def test_model_waits_for_enough_points_and_uses_the_largest_budget_that_has_them():
    encoder = SpaceEncoder("BOHB", {"x": sp.uniform(0, 1), "y": sp.uniform(0, 1)})
    model = BOHBModel(encoder)
    assert model.min_points_in_model == 3  # dim + 1
    rng = np.random.default_rng(1)
    for _ in range(5):
        model.observe(1, list(rng.random(2)), float(rng.random()), 1.0)
    assert model.model_budget() is None  # good and bad sets need more points than dimensions
    for _ in range(20):
        model.observe(1, list(rng.random(2)), float(rng.random()), 1.0)
    for _ in range(4):
        model.observe(9, list(rng.random(2)), float(rng.random()), 1.0)
    assert model.model_budget() == 1.0
    for _ in range(4):
        model.observe(9, list(rng.random(2)), float(rng.random()), 1.0)
    assert model.model_budget() == 9.0
    assert BOHBModel(encoder, min_points_in_model=1).min_points_in_model == 3  # raised to dim + 1


def test_model_proposals_concentrate_where_the_good_points_are():
    encoder = SpaceEncoder("BOHB", {"x": sp.uniform(0, 1), "y": sp.uniform(0, 1), "c": sp.choice(["p", "q", "r"])})

    def loss(config):
        return (config["x"] - 0.2) ** 2 + (config["y"] - 0.7) ** 2 + (0 if config["c"] == "q" else 0.5)

    def distance(configs):
        return np.mean([math.hypot(c["x"] - 0.2, c["y"] - 0.7) for c in configs])

    for seed in (1, 2, 3):
        model, flipped = BOHBModel(encoder, random_fraction=0.0), BOHBModel(encoder, random_fraction=0.0)
        rng = np.random.default_rng(seed)
        for _ in range(100):
            config = encoder.sample(rng)
            model.observe(3, encoder.encode(config), loss(config), 1.0)
            flipped.observe(3, encoder.encode(config), loss(config), -1.0)  # maximise the same values
        proposals = [model.propose(np.random.default_rng([seed, k])) for k in range(100)]
        assert all(from_model for _, from_model in proposals)
        configs = [config for config, _ in proposals]
        random_configs = [encoder.sample(rng) for _ in range(100)]
        assert distance(configs) < 0.6 * distance(random_configs)
        assert Counter(c["c"] for c in configs)["q"] > 90
        far = [flipped.propose(np.random.default_rng([seed, k]))[0] for k in range(100)]
        assert distance(far) > distance(random_configs) and Counter(c["c"] for c in far)["q"] < 20


def test_random_fraction_one_never_uses_the_model():
    searcher = BOHB(SPACE, 30, "score", "max", max_t=9, reduction_factor=3, random_fraction=1.0,
                    max_concurrent=2, seed=0)
    drive(searcher, curve, max_iterations=20, parallel=2)
    assert searcher.proposals_from_model == 0


# --------------------------------------------------------------------------------------------------------
# BOHB (asynchronous) and SyncBOHB end to end
# --------------------------------------------------------------------------------------------------------


def test_async_bohb_end_to_end_proposes_from_the_model_within_max_concurrent():
    recorder = Recorder(BOHB(MIXED, 60, "score", "min", max_t=27, reduction_factor=3, max_concurrent=4, seed=3))

    def loss(config, iteration):
        return abs(math.log10(config["lr"]) + 2) + config["drop"] + 1 / iteration

    result = drive(recorder, loss, max_iterations=100, parallel=4, seed=3)
    searcher = recorder.inner
    assert len(result.trials) == 60 and recorder.max_live <= 4 and searcher.is_finished()
    assert searcher.proposals_from_model > 10
    assert {t.iteration for t in result.trials.values()} <= {1, 3, 9, 27}
    assert all(t.restarts == 0 and t.end_reason == "stopped" for t in result.trials.values())
    assert searcher.model.observations(1) == 60 and searcher.model.observations(27) >= 1


def test_sync_bohb_runs_hyperband_brackets_largest_first_each_rung_one_group():
    max_t, eta = 9, 3
    recorder = Recorder(SyncBOHB(SPACE, 17 * 2, "score", "max", max_t=max_t, reduction_factor=eta, seed=4))
    result = drive(recorder, curve, max_iterations=100, parallel=4, seed=4)
    searcher = recorder.inner
    brackets = searcher.bracket_summary()
    assert [b["s"] for b in brackets] == [2, 1, 0, 2, 1, 0]  # HyperBandForBOHB's order, two bands
    assert all(b["done"] for b in brackets) and searcher.is_finished()
    # One group per rung, with the rung's full size, one bracket at a time.
    assert [(len(g.configs) + len(g.trial_ids), g.budget) for g in recorder.groups[:3]] == [(9, 1), (3, 3), (1, 9)]
    bracket_of = {tid: int(t.group_id.split("-")[1][1:]) for tid, t in result.trials.items()}
    order = [bracket_of[tid] for tid, _, _ in result.decisions]
    assert order == sorted(order)
    assert Counter(t.iteration for t in result.trials.values()) == _expected_finals(max_t, eta, bands=2)
    assert searcher.proposals_from_model > 0  # later brackets are proposed by the model


def _bohb(seed):
    return BOHB(SPACE, 40, "score", "max", max_t=27, reduction_factor=3, max_concurrent=4, min_points_in_model=4,
                seed=seed)


def _sync_bohb(seed):
    return SyncBOHB(SPACE, 40, "score", "min", max_t=9, reduction_factor=3, seed=seed)


def test_bohb_state_round_trip_continues_the_same_search():
    assert_round_trip_continues_the_same_search(_bohb, max_iterations=100, parallel=4, seed=5)


def test_sync_bohb_state_round_trip_continues_the_same_search():
    assert_round_trip_continues_the_same_search(_sync_bohb, max_iterations=100, parallel=4, seed=6)


# --------------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [BOHB, SyncBOHB])
@pytest.mark.parametrize("kwargs, message", [
    ({"top_n_percent": 0}, "top_n_percent must be in (0, 100) (got 0)"),
    ({"top_n_percent": 100}, "top_n_percent must be in (0, 100) (got 100)"),
    ({"random_fraction": -0.1}, "random_fraction must be in [0, 1] (got -0.1)"),
    ({"random_fraction": 1.5}, "random_fraction must be in [0, 1] (got 1.5)"),
    ({"bandwidth_factor": 0}, "bandwidth_factor must be > 0 (got 0)"),
    ({"min_bandwidth": 0.0}, "min_bandwidth must be > 0 (got 0.0)"),
    ({"num_candidates": 0}, "num_candidates must be >= 1 (got 0)"),
    ({"min_points_in_model": 0}, "min_points_in_model must be >= 1 (got 0)"),
    ({"reduction_factor": 1}, "reduction_factor must be > 1 (got 1)"),
    ({"mode": "best"}, "mode must be 'min' or 'max' (got 'best')"),
    ({"space": {}}, "space: the search space is empty"),
    ({"space": {"c": 1}}, "space must hold at least one domain"),
    ({"space": {"x": sp.randn()}}, "parameter 'x': randn(mean=0.0, sd=1.0) cannot be modelled"),
    ({"space": {"x": sp.sample_from(lambda: 1)}}, "parameter 'x': sample_from"),
    ({"space": {"x": sp.grid_search([1, 2])}}, "parameter 'x': grid_search cannot be modelled"),
    ({"space": {"x": sp.choice([{"y": sp.uniform(0, 1)}, 2])}}, "parameter 'x': choice"),
])
def test_bohb_rejects_impossible_parameters(cls, kwargs, message):
    args = {"space": SPACE, "num_samples": 4, "metric": "score", "mode": "max", **kwargs}
    with pytest.raises(ConfigError) as info:
        cls(**args)
    assert str(info.value).startswith(f"{cls.__name__}: {message}")


# --------------------------------------------------------------------------------------------------------
# Search quality (a reduced benchmarks/search_quality.py)
# --------------------------------------------------------------------------------------------------------


def _benchmark_module():
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks", "search_quality.py")
    spec = importlib.util.spec_from_file_location("search_quality", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_reduced_search_quality_bohb_and_asha_beat_random_search_at_the_same_budget():
    bench = _benchmark_module()
    results = bench.compare([0, 1, 2, 3], asha_trials=200, bohb_trials=120, sync_bohb_trials=120,
                            random_trials=80, max_budget=27)

    def mean_regret(name):
        return statistics.fmean(o.regret for o in results[name])

    for method in ("asha", "bohb", "sync-bohb"):
        assert mean_regret(method) < mean_regret(f"random@{method}") - 0.3, method
