"""What a trial prints names the trial: a device process starts each line a trial writes with the trial's name, and
Ray's prefix names the device, not ``_DeviceActor`` (fluidsalus/gpu/output.py, ``gpu.actor._DeviceActor.__repr__``).
"""

from __future__ import annotations

import glob
import io
import os
import sys
import threading
import time

from fluidsalus.gpu.output import Router
from fluidsalus.session import TrialContext, TrialSession, set_session


def _session(name: str) -> TrialSession:
    return TrialSession(TrialContext(trial_id=name, trial_name=name, experiment_name="exp", trial_dir="."),
                        lambda *_: None)


def _tagging_router() -> tuple[Router, io.StringIO]:
    console = io.StringIO()
    router = Router(console)
    router.tags_lines = True
    return router, console


def test_each_line_a_trial_writes_starts_with_its_name_and_is_written_whole() -> None:
    router, console = _tagging_router()
    a, b = _session("train_a_00000"), _session("train_b_00001")

    def write(session: TrialSession | None, text: str) -> None:
        set_session(session)
        try:
            router.write(text)
        finally:
            set_session(None)

    write(a, "epoch 1 ")  # a's line is not finished when b writes a whole one
    write(b, "b's line\n")
    write(a, "done\nsecond\r\nthird")
    write(None, "the device's own line\n")  # outside any trial: as it is
    router.end_trial(a)  # a's unfinished line, as a line of its own
    router.end_trial(b)  # nothing held
    assert console.getvalue() == ("[train_b_00001] b's line\n"
                                  "[train_a_00000] epoch 1 done\n"
                                  "[train_a_00000] second\r\n"
                                  "the device's own line\n"
                                  "[train_a_00000] third\n")


def test_a_router_that_does_not_tag_passes_a_trials_text_as_it_is() -> None:
    """``log_to_file`` alone in a process that is no device (a test's DeviceHost): the console text is unchanged."""
    console = io.StringIO()
    router = Router(console)
    set_session(_session("t"))
    try:
        router.write("as it is")
    finally:
        set_session(None)
    assert console.getvalue() == "as it is"


def test_two_trials_printing_at_once_on_two_lanes_never_mix_their_lines(monkeypatch) -> None:
    from fluidsalus.gpu.host import EV_END, DeviceHost, HostSettings, TrialSpec

    router, console = _tagging_router()
    monkeypatch.setattr(sys, "stdout", router)
    barrier = threading.Barrier(2)

    def f(config):
        barrier.wait()
        for step in range(200):
            print(f"x={config['x']} step {step}")
            thread = threading.Thread(target=print, args=(f"x={config['x']} from its thread {step}",))
            thread.start()  # a thread the trial starts writes as the trial
            thread.join()
        print(f"x={config['x']} left unfinished", end="")

    host = DeviceHost(f, HostSettings("exp", max_lanes=2, capacity_bytes=2**30, trial_estimate=(2**20, 2**20),
                                      profile_memory=False))
    host.submit([TrialSpec(f"t{x}", f"train_t{x}", {"x": x}, "unused") for x in (1, 2)])
    events, deadline = [], time.time() + 30
    while sum(e[0] == EV_END for e in events) < 2:
        assert time.time() < deadline, events
        events += host.poll(0.1)
    assert [e[4] for e in events if e[0] == EV_END] == ["completed", "completed"]
    lines = console.getvalue().splitlines()
    for x in (1, 2):
        mine = [line for line in lines if line.startswith(f"[train_t{x}] ")]
        assert [line for line in mine if "step" in line] == [f"[train_t{x}] x={x} step {s}" for s in range(200)]
        assert len([line for line in mine if "from its thread" in line]) == 200
        assert mine[-1] == f"[train_t{x}] x={x} left unfinished"
    assert len(lines) == 2 * 401


def _prints(config):
    from fluidsalus import tune

    print(f"hello from x={config['x']}")
    print(f"a warning of x={config['x']}", file=sys.stderr)
    tune.report({"pid": os.getpid(), "name": tune.get_context().get_trial_name()})


def _worker_log(pid: int, suffix: str) -> list[str]:
    """The lines of the Ray worker log file (``.out`` or ``.err``) of process ``pid``: what Ray's log forwarding
    brings to the driver's terminal, each line prefixed by Ray with the name the last ``:actor_name:`` line of the
    file gave (``__repr__``)."""
    import ray

    logs = ray._private.worker._global_node.get_logs_dir_path()
    files = glob.glob(os.path.join(logs, f"worker-*-{pid}{suffix}"))
    assert len(files) == 1, files
    with open(files[0]) as file:
        return file.read().splitlines()


def test_a_trials_printed_lines_reach_rays_log_with_the_trials_name_and_the_devices(ray_cluster, storage) -> None:
    from fluidsalus import tune

    grid = tune.Tuner(_prints, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert len(grid) == 2 and not grid.errors
    for result in grid:
        name, pid, x = result.metrics["name"], result.metrics["pid"], result.config["x"]
        assert name.startswith("_prints_")  # Ray's trial name: <trainable>_<trial id>
        for suffix, line in ((".out", f"[{name}] hello from x={x}"), (".err", f"[{name}] a warning of x={x}")):
            text = _worker_log(pid, suffix)  # written before the trial's end
            assert line in text
            names = [t for t in text if t.startswith(":actor_name:")]
            assert names[-1].startswith(":actor_name:fluidsalus cpu:"), names


def test_an_optuna_objectives_lines_carry_its_optuna_trial_number(ray_cluster, storage) -> None:
    import optuna

    import fluidsalus.optuna

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        print(f"objective x={x}")
        trial.set_user_attr("pid", os.getpid())
        return x

    fluidsalus.optuna.optimize(study, objective, n_trials=3, storage_path=storage)
    for trial in study.trials:
        assert f"[trial {trial.number}] objective x={trial.params['x']}" in _worker_log(trial.user_attrs["pid"], ".out")


def _written(router: Router, session: TrialSession, *texts: str) -> None:
    set_session(session)
    try:
        for text in texts:
            router.write(text)
    finally:
        set_session(None)


def test_a_line_ends_at_a_line_feed_only_as_rays_log_forwarding_reads_it() -> None:
    """A form feed, ``\\u2028`` or a progress bar's ``\\r`` inside a line got the trial's name before the rest of it
    (``str.splitlines`` split there), and ``print("abc\\r")`` made a tagged empty line (h151's B3)."""
    router, console = _tagging_router()
    a = _session("train_a_00000")
    _written(router, a, "abc\r", "\n", "page\x0cbreak\u2028here\n", " 10%\r 20%\r", "100%\n")
    router.writelines(["not in a trial\n"])
    set_session(a)
    try:
        router.writelines(["one\n", "two\n"])  # (it bypassed the router: no name, not in the trial's file)
    finally:
        set_session(None)
    assert console.getvalue() == ("[train_a_00000] abc\r\n"
                                  "[train_a_00000] page\x0cbreak\u2028here\n"
                                  "[train_a_00000]  10%\r[train_a_00000]  20%\r[train_a_00000] 100%\n"
                                  "not in a trial\n"
                                  "[train_a_00000] one\n[train_a_00000] two\n")


def test_an_unfinished_line_the_console_cannot_encode_fails_the_write_not_the_trials_end() -> None:
    """``print("caf\\udce9", end="")`` (a lone surrogate) was held, and its write at the trial's end raised in the
    trial's clean-up, so the trial's end was never sent and the run hung (h151's A0). The write raises at once now,
    as the console's own does, and a trial's end writes what it holds whatever it is."""
    from fluidsalus.gpu.output import end_trial_output

    console = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    router = Router(console)
    router.tags_lines = True
    a = _session("train_a_00000")
    try:
        _written(router, a, "caf\udce9")
    except UnicodeEncodeError:
        pass
    else:
        raise AssertionError("the write of text the console cannot encode did not raise")
    _written(router, a, "held ")
    router._partial[a].append("\udce9")  # (held all the same: the end must still go through)
    end_trial_output(a)  # does not raise
    assert a not in router._partial


def test_a_thread_writing_after_its_trial_ended_writes_through() -> None:
    """A thread the trial started wrote an unfinished line after the trial's end: it was held for ever (h151's A2)."""
    router, console = _tagging_router()
    a = _session("train_a_00000")
    a.ended = True
    _written(router, a, "late, unfinished")
    assert console.getvalue() == "late, unfinished" and a not in router._partial


def test_a_progress_bars_updates_are_written_as_they_come_with_one_name() -> None:
    """An unfinished line holding ``\\r`` (tqdm, ``print(..., end="\\r")``) was held until its final ``\\n``, so a
    progress bar showed nothing until it ended (Ray forwards each update; h159's R0). Another trial's line ends
    it first, so no name lands mid-line. A trial that reconfigures its console (``errors="backslashreplace"``)
    prints what that takes (the router had kept the console's first setting: h159's R1)."""
    router, console = _tagging_router()
    a, b = _session("train_a_00000"), _session("train_b_00001")
    _written(router, a, " 10%\r")
    assert console.getvalue() == "[train_a_00000]  10%\r"
    _written(router, a, " 20%\r")
    _written(router, b, "b's line\n")
    _written(router, a, "100%\n")
    assert console.getvalue() == ("[train_a_00000]  10%\r[train_a_00000]  20%\r\n"
                                  "[train_b_00001] b's line\n"
                                  "[train_a_00000] 100%\n")
    wrapped = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    router = Router(wrapped)
    router.tags_lines = True
    wrapped.reconfigure(errors="backslashreplace")
    _written(router, a, "caf\udce9")  # (no UnicodeEncodeError: the console takes it now)
    router.end_trial(a)
    wrapped.flush()
    assert wrapped.buffer.getvalue() == b"[train_a_00000] caf\\udce9\n"
