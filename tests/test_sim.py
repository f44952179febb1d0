"""The simulator: hand-computed runs, determinism, every planner finishing, traces and the CLI (all fast)."""

from __future__ import annotations

import json
import re

import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.sim import (
    PLANNERS,
    Hardware,
    RunSpec,
    Simulation,
    TrialRecord,
    Workload,
    bench,
    compare,
    generate_workload,
    load_trace,
    make_strategy,
    save_trace,
    simulate,
)
from fluidsalus.sim.cli import main
from fluidsalus.sim.model import best_dp_factor, colocated_speed, dp_factor
from fluidsalus.sim.searchers import make_searcher
from fluidsalus.sim.strategies import RayGpuPool

GIB = 2**30

#: A cost-free cluster: no interference, start-up, move, driver latency, context or all-reduce cost.
FREE = dict(context_bytes=0, interference=0.0, startup_s=0.0, move_s=0.0, comm_fraction=0.0, driver_latency_s=0.0)


def record(**kw) -> TrialRecord:
    values = dict(sec_per_iter=10.0, demand=0.5, p_bytes=GIB // 2, t_bytes=GIB // 2, serial_fraction=1.0,
                  data_parallel=False, curve_params=(0.9, 0.1, 0.5))
    values.update(kw)
    return TrialRecord(**values)


def test_model_formulas():
    assert colocated_speed(1.0, 0.5, 1, 0.03) == 1.0
    assert colocated_speed(1.0, 2.0, 4, 0.0) == 0.5  # oversubscribed twice: half speed
    assert colocated_speed(1.0, 1.0, 3, 0.1) == pytest.approx(0.81)
    assert colocated_speed(0.8, 0.9, 2, 0.0) == 0.8  # an MPS share caps it
    assert dp_factor(0.5, 1, 0.05) == 1.0
    assert dp_factor(0.5, 4, 0.0) == 0.625
    assert dp_factor(0.2, 2, 0.05) == pytest.approx(0.2 + 0.4 + 0.05)
    for serial in (0.0, 0.05, 0.3, 0.9, 1.0):
        for comm in (0.0, 0.001, 0.02, 0.05, 0.5):
            for gpus in (1, 2, 7, 64, 1000):
                brute = min(dp_factor(serial, k, comm) for k in range(1, gpus + 1))
                assert best_dp_factor(serial, gpus, comm) == brute, (serial, comm, gpus)


def test_makespan_ordering_on_a_hand_computed_case():
    # 4 identical trials of 2 iterations at 10 s, each keeping half a GPU busy, on 2 GPUs of one node:
    # - one_per_gpu: two waves of 20 s -> 40 s (completion times 20, 20, 40, 40: mean 30).
    # - fractional_2 and waterfill: two trials per GPU, demands sum to 1, full speed -> 20 s.
    # - fractional_4 / _8: Ray's best fit packs all four onto GPU 0 (demands sum to 2: half speed) -> 40 s.
    # - fluid_heuristic: a 0.6 and a 0.4 share per GPU; the 0.4 share runs at 0.4 / 0.5 = 0.8 -> 25 s.
    hw = Hardware(gpus=2, gpus_per_node=2, slots=4, **FREE)
    results = compare(RunSpec("random", 4, 0, hw, max_t=2), Workload((record(),)))
    makespan = {name: r.makespan_s for name, r in results.items()}
    assert makespan == pytest.approx({"waterfill": 20.0, "one_per_gpu": 40.0, "fractional_2": 20.0,
                                      "fractional_4": 40.0, "fractional_8": 40.0, "fluid_heuristic": 25.0})
    assert results["one_per_gpu"].mean_jct_s == pytest.approx(30.0)
    assert results["fluid_heuristic"].mean_jct_s == pytest.approx(22.5)
    # Utilisation: useful work is 8 iterations * 0.5 * 10 s = 40 GPU-seconds.
    assert results["waterfill"].utilisation == pytest.approx(1.0)
    assert results["one_per_gpu"].utilisation == pytest.approx(0.5)
    assert results["fluid_heuristic"].utilisation == pytest.approx(0.8)


def test_waterfill_grows_a_lone_data_parallel_trial_one_measured_step_at_a_time():
    # One data-parallel trial, 100 iterations of 10 s alone, serial fraction 0.5, on 4 free GPUs. Unmeasured, the
    # planner assumes Amdahl with serial 0.5 and probes one step per measurement: iterations 1-2 on 2 GPUs
    # (7.5 s), 3-4 on 3 GPUs (6.667 s), then 96 on 4 GPUs (6.25 s) = 628.33 s; one_per_gpu: 1000 s.
    hw = Hardware(gpus=4, gpus_per_node=4, slots=4, **FREE)
    wl = Workload((record(demand=1.0, serial_fraction=0.5, data_parallel=True),))
    results = compare(RunSpec("random", 1, 0, hw, max_t=100), wl, ["waterfill", "one_per_gpu"])
    assert results["waterfill"].makespan_s == pytest.approx(15 + 2 * 10 * (0.5 + 0.5 / 3) + 96 * 6.25)
    assert results["waterfill"].moves == 2
    # No planner can beat 100 iterations at the best width, 4 GPUs: 100 * 10 * (0.5 + 0.5 / 4) = 625 s.
    assert results["waterfill"].extra["critical_path_bound_s"] == pytest.approx(625.0)
    assert results["one_per_gpu"].extra["critical_path_bound_s"] == pytest.approx(625.0)
    assert results["one_per_gpu"].makespan_s == pytest.approx(1000.0)
    # Without the trainable's data-parallel flag it gets one GPU.
    single = Workload((record(demand=1.0, serial_fraction=0.5, data_parallel=False),))
    assert simulate(RunSpec("random", 1, 0, hw, max_t=100), single, "waterfill").makespan_s == pytest.approx(1000.0)


def test_static_packing_runs_out_of_memory_and_retries_while_waterfill_checks():
    # Trials of 5 GiB on 16 GiB GPUs with 0.3 GiB contexts: three fit a GPU, fractional_4 puts four there.
    hw = Hardware(gpus=1, gpus_per_node=1, slots=4, context_bytes=300 * 2**20, interference=0.0,
                  startup_s=1.0, move_s=1.0, driver_latency_s=0.0)
    wl = Workload((record(p_bytes=2 * GIB, t_bytes=3 * GIB, demand=0.2),))
    results = compare(RunSpec("random", 8, 0, hw, max_t=3), wl, ["waterfill", "fractional_4"])
    assert results["fractional_4"].ooms > 0
    assert results["waterfill"].ooms == 0
    for r in results.values():
        assert r.trials == 8 and r.iterations == 8 * 3


@pytest.mark.parametrize("searcher", ["asha", "bohb"])
def test_every_planner_finishes_every_trial(searcher):
    hw = Hardware(gpus=4, gpus_per_node=2, slots=4)
    wl = generate_workload(40, 3, hw.gpu_memory)
    for planner in PLANNERS:
        s, max_it = make_searcher(searcher, 40, 3, wl.metric, wl.mode, hw.gpus)
        sim = Simulation(make_strategy(planner), wl, s, max_it, hw, target=wl.default_target(max_it))
        result = sim.run()
        assert result.trials == 40
        assert all(t.ended_at is not None for t in sim.trials.values()), planner
        assert s.is_finished()
        assert result.makespan_s == pytest.approx(max(t.ended_at for t in sim.trials.values()))
        assert 0 < result.utilisation <= 1
        assert result.sim_iterations_per_s > 0  # measured (its value depends on the machine)
        assert all(lm_empty(dev) for dev in sim.devices)


def lm_empty(dev) -> bool:
    return dev.lm is None or (not dev.lm.lanes() and not dev.lm.waiting)


def test_runs_are_deterministic_for_a_seed():
    hw = Hardware(gpus=4, gpus_per_node=4)
    wl = generate_workload(30, 7, hw.gpu_memory)
    spec = RunSpec("asha", 30, 7, hw)
    first = {k: {f: v for f, v in r.figures().items() if f not in ("sim_wall_s", "sim_iterations_per_s")}
             for k, r in compare(spec, wl).items()}
    second = {k: {f: v for f, v in r.figures().items() if f not in ("sim_wall_s", "sim_iterations_per_s")}
              for k, r in compare(spec, wl).items()}
    assert first == second
    assert generate_workload(30, 7) == generate_workload(30, 7)
    assert generate_workload(30, 7) != generate_workload(30, 8)


def test_time_to_target():
    hw = Hardware(gpus=1, gpus_per_node=1, **FREE)
    # The curve reaches 0.5 after iteration 3 (recorded trace): with 10 s iterations, at t = 30 s.
    wl = Workload((record(curve=(0.1, 0.3, 0.5, 0.6), curve_params=None),))
    result = simulate(RunSpec("random", 1, 0, hw, max_t=4, target=0.5), wl, "one_per_gpu")
    assert result.time_to_target_s == pytest.approx(30.0)
    assert result.best == 0.6
    assert simulate(RunSpec("random", 1, 0, hw, max_t=4, target=0.9), wl, "one_per_gpu").time_to_target_s is None


def test_trace_round_trip_json_and_csv(tmp_path):
    wl = generate_workload(5, 1)
    path = tmp_path / "trace.json"
    save_trace(wl, str(path), iterations=4, hardware={"gpu_memory": 8 * GIB})
    loaded = load_trace(str(path))
    assert len(loaded.records) == 5 and loaded.hardware == {"gpu_memory": 8 * GIB}
    assert [r.value(3) for r in loaded.records] == pytest.approx([r.value(3) for r in wl.records])
    assert loaded.records[0].demand == wl.records[0].demand
    csv_path = tmp_path / "trace.csv"
    csv_path.write_text("trial,iteration,sec_per_iter,metric,demand\n"
                        "a,1,2.0,0.1,0.3\na,2,4.0,0.2,0.3\nb,1,1.0,0.5,\n")
    traced = load_trace(str(csv_path))
    a, b = traced.records
    assert a.sec_per_iter == (2.0, 4.0) and a.base_time(2) == 4.0 and a.base_time(9) == 4.0
    assert a.curve == (0.1, 0.2) and a.demand == 0.3 and b.demand == 1.0  # a missing demand fills the GPU
    hw = Hardware(gpus=1, gpus_per_node=1, **FREE)
    result = simulate(RunSpec("random", 2, 0, hw, max_t=2), traced, "one_per_gpu")
    assert result.makespan_s == pytest.approx(2.0 + 4.0 + 1.0 + 1.0)


def test_bad_traces_are_rejected(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ConfigError, match="fluidsalus-sim-trace"):
        load_trace(str(bad))
    bad.write_text(json.dumps({"format": "fluidsalus-sim-trace", "trials": [{"curve": [0.1]}]}))
    with pytest.raises(ConfigError, match="sec_per_iter"):
        load_trace(str(bad))


@pytest.mark.parametrize(("rows", "match"), [
    ("t,1,2.0,nan", r"trial 't': TrialRecord: curve\[0\] \(the metric after iteration 1\) is nan"),
    ("t,3,2.0,0.5\nt,1,2.0,0.2", r"trial 't': its rows must give iterations 1, 2, ..., n once each, got \[1, 3\]"),
    ("t,1,2.0,0.5\nt,1,2.0,0.6", r"once each, got \[1, 1\]"),
    ("t,1,2.0,0.5,maybe", r"data_parallel must be one of true, yes, 1, false, no, 0 .*got 'maybe'"),
])
def test_a_csv_trace_with_a_bad_metric_gap_repeat_or_flag_is_refused_naming_the_trial(tmp_path, rows, match):
    path = tmp_path / "trace.csv"
    path.write_text("trial,iteration,sec_per_iter,metric" + (",data_parallel" if "maybe" in rows else "") + "\n"
                    + rows + "\n")
    with pytest.raises(ConfigError, match=match):
        load_trace(str(path))


def test_a_trace_is_not_saved_under_a_csv_name_load_trace_would_read_as_csv(tmp_path):
    with pytest.raises(ConfigError, match="saved as JSON"):
        save_trace(generate_workload(2, 0), str(tmp_path / "trace.csv"), iterations=2)
    assert not (tmp_path / "trace.csv").exists()


@pytest.mark.parametrize(("field", "value"), [("startup_s", float("inf")), ("move_s", float("nan")),
                                              ("driver_latency_s", -1.0), ("context_bytes", -1), ("slots", 0)])
def test_hardware_refuses_a_non_finite_or_negative_field_by_name(field, value):
    with pytest.raises(ConfigError, match=f"Hardware: .*{field}"):
        Hardware(**{field: value})


def test_ray_pool_packs_best_fit_within_a_node():
    pool = RayGpuPool(gpus=4, per_node=2)
    quarter = 30  # of 120 units per GPU
    # Best fit packs GPU 0 of node 0 while the node stays under the 0.5 spread threshold (3 quarters: 37.5%);
    # the 4th would bring it to 50%, so the hybrid policy takes the emptier node 1 (best fit: GPU 2).
    assert [pool.allocate(quarter) for _ in range(5)] == [0, 0, 0, 2, 2]
    # Whole GPUs: node 1 would be at 75% and node 0 at 87.5%: the less utilised node wins.
    assert pool.allocate(120) == 3
    assert pool.allocate(120) == 1
    assert pool.allocate(120) is None
    pool.free(1, 120)
    assert pool.allocate(120) == 1


def _ray_reference_allocate(free_units, nodes, node_used, units):
    """Ray's rule as a plain scan of every GPU of every node (what RayGpuPool must decide)."""
    best = None
    for node, gpus in enumerate(nodes):
        gpu, left = None, 121
        for g in gpus:
            if free_units[g] >= units and free_units[g] - units < left:
                gpu, left = g, free_units[g] - units
        if gpu is None:
            continue
        util = (node_used[node] + units) / (len(gpus) * 120)
        score = 0.0 if util < 0.5 else util
        if best is None or score < best[0]:
            best = (score, node, gpu)
    return None if best is None else best[2]


@pytest.mark.parametrize("units", [120, 60, 30, 15])
def test_ray_pool_decides_as_a_scan_of_every_gpu(units):
    import random

    rng = random.Random(units)
    pool = RayGpuPool(gpus=21, per_node=4)  # a short last node
    held: list[int] = []
    for _ in range(3000):
        if held and rng.random() < 0.45:
            pool.free(held.pop(rng.randrange(len(held))), units)
            continue
        expected = _ray_reference_allocate(list(pool.free_units), pool.nodes, list(pool.node_used), units)
        got = pool.allocate(units)
        assert got == expected
        if got is not None:
            held.append(got)


def test_fluid_heuristic_takes_an_empty_gpus_big_share_first_then_the_lowest_free_share():
    from fluidsalus.sim.strategies import FluidHeuristicStrategy

    class _Sim:
        hardware = type("H", (), {"gpus": 3})()

    strategy = FluidHeuristicStrategy()
    strategy.bind(_Sim())  # type: ignore[arg-type]
    taken = []
    for _ in range(6):
        gpu, which = strategy._slot()
        strategy._set(gpu, which, True)
        taken.append((gpu, which))
    assert taken == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert strategy._slot() is None
    strategy._set(1, 0, False)  # GPU 1's big share frees: the only free share
    assert strategy._slot() == (1, 0)
    strategy._set(1, 1, False)  # GPU 1 is empty again: its big share before any half-used GPU's
    strategy._set(2, 1, False)
    assert strategy._slot() == (1, 0)
    strategy._set(1, 0, True)
    assert strategy._slot() == (1, 1)  # GPU 1 and GPU 2 half-used: the lower one's free share


def test_bench_measures_iterations_per_second():
    figures = bench(Hardware(gpus=4, gpus_per_node=4), trials=8, max_t=5, planners=("one_per_gpu", "waterfill"))
    assert figures["iterations"] == 2 * 8 * 5
    assert figures["sim_iterations_per_s"] > 0 and set(figures["per_planner"]) == {"one_per_gpu", "waterfill"}


def test_cli_last_line_is_the_json_of_every_planner(capsys):
    assert main(["--gpus", "4", "--trials", "24", "--searcher", "asha", "--json", "--seed", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    figures = json.loads(lines[-1])
    assert list(figures) == list(PLANNERS)
    for values in figures.values():
        assert values["makespan_s"] > 0 and "time_to_target_s" in values and "mean_jct_s" in values
        assert "utilisation" in values and values["sim_iterations_per_s"] > 0
    assert any("speed-up" in line for line in lines)


def test_cli_reports_bad_input(capsys, tmp_path):
    assert main(["--planners", "nope", "--gpus", "2", "--trials", "4"]) == 2
    assert "unknown" in capsys.readouterr().err
    assert main(["--planners", " , ", "--gpus", "2", "--trials", "4"]) == 2
    assert "--planners: none given; choose from waterfill" in capsys.readouterr().err
    assert main(["--trace", str(tmp_path / "missing.json"), "--gpus", "2"]) == 2


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--seed", "-1", "must be >= 0, got -1"), ("--startup-s", "inf", "must be a finite number, got inf"),
    ("--target", "nan", "must be a finite number"), ("--gpus", "0", "must be >= 1"),
    ("--interference", "0.6", "must be <= 0.5, got 0.6"), ("--max-concurrent-brackets", "0", "must be >= 1"),
    ("--gpu-memory-gib", "0", "must be > 0"), ("--trials", "x", "'x' is not an integer"),
])
def test_cli_refuses_a_bad_number_naming_the_option(capsys, option, value, says):
    with pytest.raises(SystemExit) as exit_:
        main(["--gpus", "2", "--trials", "4", option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: {says}" in capsys.readouterr().err


def test_cli_bench_refuses_the_options_of_a_run_it_would_ignore(capsys):
    with pytest.raises(SystemExit):
        main(["--bench", "--trials", "5", "--planners", "waterfill"])
    err = capsys.readouterr().err
    assert "--bench measures the engine on its own workload" in err and "it does not take --trials, --planners" in err


def test_cli_saves_the_trace_only_after_the_run_and_refuses_a_csv_name_before_it(capsys, tmp_path):
    assert main(["--gpus", "2", "--trials", "4", "--save-trace", str(tmp_path / "t.csv")]) == 2
    assert "saved as JSON" in capsys.readouterr().err and not (tmp_path / "t.csv").exists()
    with pytest.raises(SystemExit):
        main(["--gpus", "2", "--trials", "4", "--lane-policy", "bogus", "--save-trace", str(tmp_path / "t.json")])
    assert "argument --lane-policy: invalid choice: 'bogus'" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
    assert main(["--gpus", "2", "--trials", "4", "--searcher", "hyperband", "--max-concurrent-brackets", "1",
                 "--save-trace", str(tmp_path / "t.json"), "--planners", "waterfill", "--max-t", "3"]) == 0
    assert len(load_trace(str(tmp_path / "t.json")).records) == 4


def test_fast_lane_policy_keys_choose_as_the_policies_do():
    # The engine picks a lane's next trial with SIM_POLICY_KEYS instead of building TrialViews; on random ready
    # sets (ties in ready time included) each key picks the trial that fluidsalus.gpu.policies.choose picks.
    import random

    from fluidsalus.gpu.policies import choose, get_policy
    from fluidsalus.sim.engine import SIM_POLICY_KEYS, SimTrial

    rng = random.Random(0)
    for name, key in SIM_POLICY_KEYS.items():
        policy = get_policy(name)
        for _ in range(200):
            ready = []
            for i in rng.sample(range(50), rng.randint(2, 6)):
                t = SimTrial(f"t{i:02d}", i, record(), None, 0.0)
                t.ready_since = float(rng.randint(0, 3))
                t.arrival = rng.randint(0, 9)
                t.used_s = float(rng.randint(0, 3))
                t.lane_iterations = rng.randint(0, 3)
                t.iteration = t.lane_iterations + rng.randint(0, 3)
                ready.append(t)
            views = [Simulation.view(t) for t in ready]
            assert min(ready, key=key).tid == choose(policy, views), name


@pytest.mark.parametrize("searcher", ["asha", "bohb", "bohb-async"])
def test_cached_demand_views_stay_fresh(searcher):
    # The engine caches each trial's TrialDemand and drops the cache wherever a field it depends on changes;
    # check_views compares every cached demand with a freshly built one at every plan.
    from fluidsalus.sim.strategies import WaterfillStrategy

    hw = Hardware(gpus=8, gpus_per_node=4, slots=4)
    wl = generate_workload(60, 5, hw.gpu_memory)
    s, max_it = make_searcher(searcher, 60, 5, wl.metric, wl.mode, hw.gpus)
    result = Simulation(WaterfillStrategy(check_views=True), wl, s, max_it, hw).run()
    assert result.trials == 60 and result.extra["plans"] > 0


def test_waterfill_is_told_what_the_executor_measures():
    # Two trials whose memory fits one GPU only as one shared lane (a 3 GiB GPU; P = 0.5 GiB, T = 2 GiB: the
    # first lane takes 2.5 GiB, the second trial joins it by the Salus rule): they take turns, 10 s iterations
    # each. As the executor does, the planner is told each iteration's time since the trial's previous report
    # (its turn's wait included: 20 s once both run) and the number of trials computing on the GPU (2).
    from fluidsalus.sim.strategies import WaterfillStrategy

    seen: list[tuple[str, float, int, int]] = []

    class Recording(WaterfillStrategy):
        def observe(self, trial, duration, devices, colocated):
            seen.append((trial.tid, round(duration, 6), devices, colocated))
            super().observe(trial, duration, devices, colocated)

    hw = Hardware(gpus=1, gpus_per_node=1, slots=2, gpu_memory=3 * GIB, **FREE)
    wl = Workload((record(p_bytes=GIB // 2, t_bytes=2 * GIB),))
    s, max_it = make_searcher("random", 2, 0, wl.metric, wl.mode, hw.gpus, max_t=3)
    sim = Simulation(Recording(), wl, s, max_it, hw)
    result = sim.run()
    assert result.makespan_s == pytest.approx(60.0)
    assert len(sim.devices[0].lm.lanes()) == 0 and result.iterations == 6
    assert seen[:2] == [("t00000", 10.0, 1, 2), ("t00001", 20.0, 1, 2)]
    assert all(duration == 20.0 and colocated == 2 for _, duration, _, colocated in seen[2:4])


def test_a_synthetic_trial_fits_its_gpu_with_the_cuda_context(capsys):
    """The workload clipped a trial's P + T to 90% of the GPU but not of what the CUDA context leaves: on a 2 GiB GPU
    a trial of 1.8 GiB never fitted beside the 300 MiB context, and the baseline planners retried it for ever (a
    helper's check; waterfill stopped with "nothing can run")."""
    for planner in ("one_per_gpu", "waterfill"):
        assert main(["--gpus", "1", "--trials", "1", "--gpu-memory-gib", "2", "--planners", planner, "--json"]) == 0
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_srtf_lanes_are_told_the_measured_time_per_iteration_as_the_device_host_does():
    """The simulator's srtf was fifo: its views had no sec_per_iter, so every trial looked unprofiled (a tester's
    F-SIM-4). The view is now the device host's (DeviceHost._view): time and iterations since the trial joined its
    lane, their ratio, and the iterations left to its budget."""
    from fluidsalus.sim.engine import SimTrial
    from fluidsalus.sim.strategies import WaterfillStrategy

    hw = Hardware(gpus=1, gpus_per_node=1, **FREE)
    wl = Workload((record(),))
    s, max_it = make_searcher("asha", 2, 0, wl.metric, wl.mode, hw.gpus, max_t=10)
    sim = Simulation(WaterfillStrategy(), wl, s, max_it, hw, lane_policy="srtf")
    slow, quick = SimTrial("slow", 0, record(), 10, 0.0), SimTrial("quick", 1, record(), 10, 0.0)
    slow.ready_since, quick.ready_since = 0.0, 1.0  # fifo takes slow
    for trial, per_iter in ((slow, 10.0), (quick, 1.0)):
        trial.iteration = trial.lane_iterations = 2
        trial.used_s = 2 * per_iter
    view = Simulation.view(quick)
    assert (view.sec_per_iter, view.remaining_iterations, view.iterations) == (1.0, 8, 2)
    assert sim.pick([slow, quick]) is quick  # 8 s left against 80 s
    slow.lane_iterations, slow.used_s = 0, 0.0  # moved: unprofiled on its new lane, so it goes first
    assert Simulation.view(slow).sec_per_iter is None and sim.pick([slow, quick]) is slow
    slow.lane_iterations, slow.used_s = 2, 20.0
    slow.budget = quick.budget = None  # open-ended (the host knows no max_iterations): both last, then fifo
    assert sim.pick([slow, quick]) is slow

    def run(policy: str) -> tuple:
        hw = Hardware(gpus=4)
        wl = generate_workload(60, 0, hw.gpu_memory - hw.context_bytes)
        r = simulate(RunSpec("asha", 60, 0, hw, lane_policy=policy), wl, "waterfill")
        return r.makespan_s, r.mean_jct_s, r.iterations

    assert run("srtf") != run("fifo")


@pytest.mark.parametrize("planner", ["one_per_gpu", "fractional_4", "waterfill"])
def test_a_trace_trial_larger_than_a_gpu_is_refused_at_once_naming_it(capsys, tmp_path, monkeypatch, planner):
    """A static planner retried such a trial's out-of-memory start for ever (about 4 minutes, to MAX_EVENTS) and
    waterfill stalled with "nothing can run" (a tester's F-SIM-1); the guard on events is lowered here so that the
    old behaviour fails fast."""
    import fluidsalus.sim.engine as engine

    monkeypatch.setattr(engine, "MAX_EVENTS", 100_000)
    path = str(tmp_path / "big.json")
    save_trace(Workload((record(), record(p_bytes=6 * GIB, t_bytes=6 * GIB))), path, 3)
    assert main(["--trace", path, "--gpus", "2", "--gpu-memory-gib", "4", "--planners", planner]) == 2
    out, err = capsys.readouterr()
    assert "big.json: trial record 1 needs P + T = 12.00 GiB but a GPU leaves 3.71 GiB" in err
    assert "--gpu-memory-gib" in err and "1 of the 2 records" in err and out == ""
    hw = Hardware(gpus=1, gpu_memory=4 * GIB)
    s, max_it = make_searcher("random", 2, 0, "accuracy", "max", 1, max_t=3)
    with pytest.raises(ConfigError, match="trial record 1 needs"):
        Simulation(make_strategy(planner), load_trace(path), s, max_it, hw)


def test_a_trace_runs_on_its_own_gpus_and_trials_unless_the_options_say_otherwise(capsys, tmp_path):
    """--gpus defaulted to 64 and --trials to 1000, so a trace's recorded device count was never used and its
    records were cycled (a tester's F-SIM-3)."""
    path = str(tmp_path / "t.json")
    save_trace(Workload(tuple(record(sec_per_iter=float(i + 1)) for i in range(5))), path, 3,
               Hardware(gpus=3, gpus_per_node=3, **FREE).to_dict())

    def run(*options: str) -> tuple[str, dict]:
        assert main(["--trace", path, "--planners", "waterfill", "--searcher", "random", "--json", *options]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        return lines[0], json.loads(lines[-1])["waterfill"]

    header, figures = run()
    assert "random, 5 trials on 3 GPUs" in header and figures["trials"] == 5
    header, figures = run("--gpus", "2", "--trials", "7")
    assert "random, 7 trials on 2 GPUs" in header and figures["trials"] == 7
    assert main(["--planners", "one_per_gpu", "--searcher", "random", "--max-t", "1"]) == 0
    assert capsys.readouterr().out.startswith("# random, 1000 trials on 64 GPUs")


def test_table_columns_never_run_together():
    """At --interference 0.99 a makespan of 6.3e12 s printed as "63033914669702667035400041163460987322":
    makespan, ttt and JCT in one word (a tester's F-SIM-6; the option now stops at 0.5)."""
    from fluidsalus.sim.cli import _table
    from fluidsalus.sim.engine import SimResult

    huge = SimResult("waterfill", 6.3e12, 1.2e12, 4.1e12, 0.0001, 50, 1052, None, 25_863_974, 3, 7, 1.0, 1e7)
    normal = SimResult("one_per_gpu", 2207.4, None, 678.0, 0.122, 50, 1052, 0.9, 0, 0, 50, 0.01, 210319.0)
    head, *rows = _table({"waterfill": huge, "one_per_gpu": normal}).splitlines()
    assert [row.split() for row in rows] == [
        ["waterfill", "6.3e+12", "1.2e+12", "4.1e+12", "0.000", "2.59e+07", "3", "1052", "10000000"],
        ["one_per_gpu", "2207", "-", "678", "0.122", "0", "0", "1052", "210319"]]
    assert len(rows[1]) == len(head)


def test_cli_nits_lane_policy_brackets_and_a_small_gpu(capsys):
    """A tester's F-SIM-7: a bad --lane-policy was refused as "lane_policy: ..." after the run's header was
    printed; --max-concurrent-brackets was silently ignored by asha, random and bohb-async; a 0.5 GiB GPU was
    shown as "0 GiB"."""
    with pytest.raises(SystemExit) as exit_:
        main(["--gpus", "2", "--trials", "4", "--lane-policy", "foo"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "" and "argument --lane-policy: invalid choice: 'foo'" in err
    for searcher in ("asha", "random", "bohb-async"):
        with pytest.raises(SystemExit):
            main(["--gpus", "2", "--trials", "4", "--searcher", searcher, "--max-concurrent-brackets", "2"])
        out, err = capsys.readouterr()
        assert out == "" and "--max-concurrent-brackets: only --searcher bohb or hyperband run brackets" in err
        with pytest.raises(ConfigError, match="only bohb, hyperband run brackets"):
            make_searcher(searcher, 4, 0, "accuracy", "max", 2, brackets=2)
    assert main(["--gpus", "1", "--trials", "2", "--gpu-memory-gib", "0.5", "--planners", "one_per_gpu",
                 "--searcher", "random", "--max-t", "1"]) == 0
    assert "on 1 GPUs (0.5 GiB, 8 slots)" in capsys.readouterr().out


def test_sim_compare_draws_the_workload_as_the_cli_does(monkeypatch, capsys):
    """benchmarks/sim_compare.py clipped trials to the GPU's memory, the CLI to what the CUDA context leaves."""
    import importlib
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.syspath_prepend(os.path.join(root, "benchmarks"))
    sim_compare = importlib.import_module("sim_compare")
    drawn = []

    def recording(n, seed, gpu_memory):
        drawn.append(gpu_memory)
        return generate_workload(n, seed, gpu_memory)

    monkeypatch.setattr(sim_compare, "generate_workload", recording)
    monkeypatch.setattr(sys, "argv", ["sim_compare.py", "--gpus", "2", "--trials", "4", "--seeds", "0",
                                      "--searchers", "random,hyperband", "--max-concurrent-brackets", "1"])
    assert sim_compare.main() == 0
    hw = Hardware(gpus=2)
    assert drawn == [hw.gpu_memory - hw.context_bytes] * 2
    assert set(json.loads(capsys.readouterr().out.strip().splitlines()[-1])) == {"random", "hyperband"}


def _trace_file(tmp_path, name: str, **fields) -> str:
    """A one-trial JSON trace with ``fields`` over a valid document (``trials`` and ``hardware`` replaced whole)."""
    doc = {"format": "fluidsalus-sim-trace", "version": 1, "metric": "accuracy", "mode": "max",
           "trials": [{"sec_per_iter": 2.0, "curve": [0.1, 0.2]}], **fields}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(("fields", "says"), [
    ({"trials": [1, 2]}, r"trials\[0\]: must be an object of trial fields .*got int 1"),
    ({"trials": ["abc"]}, r"trials\[0\]: must be an object of trial fields .*got str 'abc'"),
    ({"trials": [{"sec_per_iter": 2.0, "curve": [0.1], "p_bytes": float("inf")}]},
     r"trials\[0\]: p_bytes and t_bytes must be finite numbers of bytes, got inf"),
    ({"hardware": [1, 2]}, r"'hardware' must be an object of Hardware fields, got list"),
    ({"hardware": {"gpus": "4"}}, r"hardware.gpus must be an integer, got '4'"),
    ({"hardware": {"gpus": 2.5}}, r"hardware.gpus must be an integer, got 2.5"),
    ({"hardware": {"gpu_memory": "16GB"}}, r"hardware.gpu_memory must be an integer, got '16GB'"),
    ({"hardware": {"slots": 1.5}}, r"hardware.slots must be an integer, got 1.5"),
    ({"hardware": {"startup_s": float("nan")}}, r"hardware.startup_s must be a finite number, got nan"),
    ({"hardware": {"gpus": 0}}, r"hardware: Hardware: gpus must be >= 1, got 0"),
    ({"mode": "maximize"}, r"Workload: mode must be 'max' or 'min'"),
])
def test_a_malformed_trace_is_refused_naming_the_file_and_field_not_with_a_traceback(capsys, tmp_path, fields,
                                                                                     says):
    """A tester's (h71) A1: these crashed with AttributeError, OverflowError, TypeError (exit 1)."""
    path = _trace_file(tmp_path, "bad.json", **fields)
    with pytest.raises(ConfigError, match=f"^{re.escape(path)}: .*{says}"):
        load_trace(path)
    assert main(["--trace", path, "--planners", "one_per_gpu"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: ")


def test_a_trace_that_is_not_text_or_has_an_infinite_csv_cell_is_refused(tmp_path):
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=r"binary.json: not a text file \(UTF-8\)"):
        load_trace(str(binary))
    csv_path = tmp_path / "inf.csv"
    csv_path.write_text("trial,iteration,sec_per_iter,metric,p_bytes\na,1,2.0,0.5,inf\n")
    with pytest.raises(ConfigError, match=r"inf.csv: trial 'a': p_bytes and t_bytes must be finite"):
        load_trace(str(csv_path))


def test_a_traces_interference_is_held_to_the_command_lines_range(capsys, tmp_path):
    """A tester's (h71) A2: 0.99 in a trace's hardware got past --interference's 0.5 and a 50-trial run went on for
    minutes; --interference given on the command line replaces it."""
    path = _trace_file(tmp_path, "interf.json", hardware={"gpus": 2, "interference": 0.99})
    assert main(["--trace", path, "--planners", "one_per_gpu"]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}: hardware.interference 0.99 is above the command line's 0.5" in err
    assert "give --interference" in err
    assert main(["--trace", path, "--planners", "one_per_gpu", "--interference", "0.1"]) == 0


def test_unknown_trace_fields_and_versions_are_reported(capsys, tmp_path):
    """A tester's (h71) B4: a misspelt optional field silently took its default (demand 1.0: fills its GPU)."""
    path = _trace_file(tmp_path, "typo.json", version=99, hardware={"gpuz": 4},
                       trials=[{"sec_per_iter": 2.0, "curve": [0.1], "demnad": 0.1}])
    with pytest.warns(UserWarning) as caught:
        workload = load_trace(path)
    messages = " | ".join(str(w.message) for w in caught)
    assert "trace version 99" in messages and "hardware fields ['gpuz']" in messages
    assert "trial fields ['demnad'] (first in trials[0])" in messages
    assert workload.records[0].demand == 1.0
    assert main(["--trace", path, "--planners", "one_per_gpu"]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "['demnad']" in err
    csv_path = tmp_path / "extra.csv"
    csv_path.write_text("trial,iteration,sec_per_iter,metric,demnad\na,1,2.0,0.5,0.1\n")
    with pytest.warns(UserWarning, match=r"columns \['demnad'\] are not trace columns"):
        load_trace(str(csv_path))


def test_a_saved_replay_trace_runs_to_its_recorded_budgets(capsys, tmp_path):
    """A tester's (h71) B2: `sim --trace` of a `sim.trace --save` trace ran ASHA's max_t 100 past every recorded
    curve (630 iterations against the run's 114)."""
    trials = [{"sec_per_iter": [1.0] * n, "curve": [0.1 * i for i in range(1, n + 1)], "iterations_run": n,
               "budgets": budgets} for n, budgets in ((16, [1.0, 4.0, 16.0]), (4, [1.0, 4.0]), (1, [1.0]))]
    path = _trace_file(tmp_path, "saved.json", trials=trials)
    assert load_trace(path).max_budget == 16
    assert main(["--trace", path, "--planners", "one_per_gpu", "--json"]) == 0
    out = capsys.readouterr().out
    assert "# --max-t 16: the largest budget" in out
    assert main(["--trace", path, "--planners", "one_per_gpu", "--max-t", "2"]) == 0
    assert "--max-t" not in capsys.readouterr().out.splitlines()[0]
    assert load_trace(_trace_file(tmp_path, "plain.json")).max_budget is None


def test_the_priority_lane_policy_is_refused_since_sim_trials_have_no_priority(capsys):
    """A tester's (h71) B3: --lane-policy priority ran exactly as fifo without a word."""
    with pytest.raises(SystemExit) as exit_:
        main(["--gpus", "2", "--trials", "4", "--lane-policy", "priority"])
    assert exit_.value.code == 2
    assert "--lane-policy priority: simulated trials have no priority" in capsys.readouterr().err
