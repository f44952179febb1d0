"""What a trial prints names the trial: a device process starts each line a trial writes with the trial's name, and
Ray's prefix names the device, not ``_DeviceActor`` (fluidsalus/gpu/output.py, ``gpu.actor._DeviceActor.__repr__``).
"""

from __future__ import annotations

import gc
import glob
import io
import os
import re
import sys
import threading
import time
from collections.abc import Callable

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
    from fluidsalus.gpu.host import EV_END

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

    events = _two_trials_in_one_device(f)
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


def _tagged_console(monkeypatch) -> io.TextIOWrapper:
    """A device process's streams in this process, as its host sets them up: ``sys.stdout`` a router over the
    returned console (UTF-8, bytes readable), ``sys.stderr`` one over a string, trials' lines tagged."""
    import types

    from fluidsalus.gpu import output

    console = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    ray_worker = sys.modules.get("ray._private.worker")
    if ray_worker is not None:
        # (Ray's forwarded lines of an earlier test's device processes, which its log thread prints to whatever
        # sys.stdout is when they arrive, stay out of this console: "(fluidsalus cpu:0 pid=...)" lines, two CI runs.
        # Its handler is a partial of print_to_stdstream made when Ray started, which then looks print_worker_logs
        # up: patching print_to_stdstream alone left the lines in)
        monkeypatch.setattr(ray_worker, "print_to_stdstream", lambda data, ignore_prefix: None)
        monkeypatch.setattr(ray_worker, "print_worker_logs", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "stdout", Router(console))
    monkeypatch.setattr(sys, "stderr", Router(io.StringIO()))
    monkeypatch.setattr(sys, "__class__", types.ModuleType)
    monkeypatch.setattr(output, "_TRIAL_STREAMS", {}, raising=False)
    output.tag_trial_lines()
    return console


def test_a_trials_reconfigure_of_its_console_is_its_own(monkeypatch) -> None:
    """``sys.stdout.reconfigure(encoding="ascii", errors="replace")`` in one trial reconfigured the device's console,
    so every other trial's ``print("café")`` wrote ``caf?`` (or raised, under ``errors="strict"``) and read
    ``ascii`` back; under Ray the console is the trial's process's own (h172's A2). The trial's own settings write
    its text (``newline``, ``utf-8-sig`` without a byte order mark on a console written to already) and end with it."""
    from fluidsalus.gpu import output

    console = _tagged_console(monkeypatch)
    a, b, c = _session("train_a"), _session("train_b"), _session("train_c")
    seen: dict[str, object] = {}

    def in_trial(session: TrialSession, do: Callable[[], object]) -> object:
        set_session(session)
        try:
            return do()
        finally:
            set_session(None)

    in_trial(a, lambda: sys.stdout.reconfigure(encoding="ascii", errors="replace", newline="\r\n",
                                               line_buffering=True))
    in_trial(c, lambda: sys.stdout.reconfigure(encoding="ascii"))  # (errors: "strict", as Python's)
    in_trial(a, lambda: print("caf\u00e9 of a"))
    in_trial(b, lambda: print("caf\u00e9 of b"))
    d = _session("train_d")  # (no byte order mark: the console it would have had is written to already)
    in_trial(d, lambda: sys.stdout.reconfigure(encoding="utf-8-sig"))
    in_trial(d, lambda: print("d"))
    try:
        in_trial(c, lambda: print("caf\u00e9 of c"))
    except UnicodeEncodeError:
        seen["c raised"] = True
    for session in (a, b, c):
        seen[session.output_name] = in_trial(session, lambda: (sys.stdout.encoding, sys.stdout.errors,
                                                                sys.stdout.line_buffering))
    a.ended = True
    output.end_trial_output(a)  # its settings end with it
    in_trial(b, lambda: print("caf\u00e9 of b, later"))
    console.flush()
    assert console.buffer.getvalue().decode() == ("[train_a] caf? of a\r\n[train_b] caf\u00e9 of b\n[train_d] d\n"
                                                  "[train_b] caf\u00e9 of b, later\n")
    assert seen == {"c raised": True, "train_a": ("ascii", "replace", True), "train_b": ("utf-8", "strict", False),
                    "train_c": ("ascii", "strict", False)}
    assert a not in sys.stdout._reconfigured
    try:
        in_trial(b, lambda: sys.stdout.reconfigure(encoding="no such codec"))  # refused as the console's would be
    except LookupError:
        pass
    else:
        raise AssertionError("reconfigure(encoding='no such codec') did not raise LookupError")
    sys.stdout.reconfigure(errors="backslashreplace")  # outside any trial: the console's, for the process
    assert console.errors == "backslashreplace"


def test_a_trials_error_handler_that_prints_and_a_stuck_writer_hang_no_trial(monkeypatch) -> None:
    """A trial's own error handler that prints (``codecs.register_error``) under its ``reconfigure(errors=...)``
    deadlocked the device's console: its text was converted under the router's lock, which the handler's print
    asked for again; Ray prints the note, then ``caf?``. And while a trial's writer is stuck holding that lock,
    another trial that holds no text still ends (its end took the lock at every trial's end) (h189's A1, A2)."""
    import codecs

    from fluidsalus.gpu import output

    console = _tagged_console(monkeypatch)

    def noisy(error: UnicodeError) -> tuple[str, int]:
        print("note")
        return "?", error.end  # type: ignore[attr-defined]

    codecs.register_error("fluidsalus_test_noisy", noisy)
    a, b = _session("train_a"), _session("train_b")

    def trial_a() -> None:
        set_session(a)
        try:
            sys.stdout.reconfigure(encoding="ascii", errors="fluidsalus_test_noisy")
            print("caf\u00e9")
        finally:
            set_session(None)

    thread = threading.Thread(target=trial_a, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the trial's print hung"
    console.flush()
    assert console.buffer.getvalue().decode() == "[train_a] note\n[train_a] caf?\n"
    with sys.stdout._lines:  # a writer stuck holding the lock: a trial that holds no text still ends
        ended = threading.Thread(target=output.end_trial_output, args=(b,), daemon=True)
        b.ended = True
        ended.start()
        ended.join(10)
        assert not ended.is_alive(), "the trial's end waited for another trial's writer"


def test_a_line_a_thread_of_the_trial_leaves_unfinished_as_the_trial_ends_is_written() -> None:
    """A trial's thread that wrote ``"line\\ntail"`` just as the trial ended held ``tail`` for ever: the trial's end
    had found nothing held (h159's R4). As under Ray, where the process's exit flushes it, it is the trial's last
    line: whether the trial's end comes while the thread writes its line, or after it saw the trial running."""
    class SlowConsole(io.StringIO):  # its write of the thread's line lasts until the trial has ended
        def write(self, text: str) -> int:
            if threading.current_thread() is thread and text.endswith("line\n"):
                writing.set()
                deadline = time.time() + 10
                while not a.ended and time.time() < deadline:
                    time.sleep(0.01)
                time.sleep(0.2)  # (the trial's end goes on meanwhile)
            return super().write(text)

    console, writing = SlowConsole(), threading.Event()
    router = Router(console)
    router.tags_lines = True
    a = _session("train_a")
    thread = threading.Thread(target=_written, args=(router, a, "line\ntail"))
    thread.start()
    assert writing.wait(10)
    a.ended = True
    router.end_trial(a)
    thread.join()
    b = _session("train_b")  # its thread saw the trial running and wrote once its end had passed
    b.ended = True
    router.end_trial(b)
    router._write_lines(b, "b's line\nb's tail")
    assert console.getvalue() == "[train_a] line\n[train_a] tail\n[train_b] b's line\n[train_b] b's tail\n"
    assert not router._partial


def _two_trials_in_one_device(f: Callable[[dict], None]) -> list:
    """Run trials ``t1`` and ``t2`` (``{"x": 1}``, ``{"x": 2}``) of ``f`` side by side, in two lanes of one device
    host in this process, to their ends; return the host's events in order."""
    from fluidsalus.gpu.host import EV_END, DeviceHost, HostSettings, TrialSpec

    host = DeviceHost(f, HostSettings("exp", max_lanes=2, capacity_bytes=2**30, trial_estimate=(2**20, 2**20),
                                      profile_memory=False))
    host.submit([TrialSpec(f"t{x}", f"train_t{x}", {"x": x}, "unused") for x in (1, 2)])
    events, deadline = [], time.time() + 30
    while sum(e[0] == EV_END for e in events) < 2:
        assert time.time() < deadline, events
        events += host.poll(0.1)
    return events


def _device_streams(monkeypatch) -> tuple[io.StringIO, io.StringIO]:
    """This process's streams as a device process has them (``tag_trial_lines``) over two consoles, put back after
    the test."""
    import types

    from fluidsalus.gpu import output

    console, errors = _Console(), _Console()
    monkeypatch.setattr(sys, "stdout", Router(console))
    monkeypatch.setattr(sys, "stderr", Router(errors))
    monkeypatch.setattr(sys, "__class__", types.ModuleType)  # (put back first: the streams after it, plainly)
    monkeypatch.setattr(output, "_TRIAL_STREAMS", {}, raising=False)
    output.tag_trial_lines()
    return console, errors


#: The driver's thread that prints the lines Ray's log forwarding brings (``ray._private.worker.connect``).
_RAY_PRINTS_LOGS = "ray_print_logs"


class _Console(io.StringIO):
    """A console that keeps what this process writes but the lines Ray's log forwarding prints there for an earlier
    test's device process (``(fluidsalus cpu:0 pid=N) ...``: the driver's :data:`_RAY_PRINTS_LOGS` thread prints them
    to ``sys.stdout`` as they come, each in two writes, its text and then ``"\\n"``, between which a trial's whole
    line could land: the line then began with Ray's prefix, and :func:`_own_lines` left the trial's text out)."""

    def write(self, text: str) -> int:
        if threading.current_thread().name == _RAY_PRINTS_LOGS:
            return len(text)
        return super().write(text)


def _own_lines(console: io.StringIO) -> list[str]:
    """The lines of ``console`` but those Ray's log forwarding printed there for an earlier test's device process
    (``(fluidsalus cpu:0 pid=N) ...``, coloured or not), which a :class:`_Console` never gets from Ray's thread; this
    leaves out those the driver printed itself (what Ray's log forwarding had left when it stopped)."""
    return [line for line in console.getvalue().splitlines() if not re.match(r"(\x1b\[\d+m)?\(", line)]


def test_a_line_ray_forwards_to_the_tests_console_does_not_take_a_trials_line_with_it(monkeypatch) -> None:
    """``_own_lines`` of the device streams' console when Ray's log forwarding prints a line there in two writes and
    a trial's line comes between them: the trial's line is kept."""
    console, _ = _device_streams(monkeypatch)
    forwarded, printed = threading.Event(), threading.Event()

    def ray_prints() -> None:  # (print_worker_logs: print(line, file=sys.stdout))
        sys.stdout.write("(fluidsalus cpu:0 pid=1) an earlier test's line")
        forwarded.set()
        assert printed.wait(10)
        sys.stdout.write("\n")

    thread = threading.Thread(target=ray_prints, name=_RAY_PRINTS_LOGS)
    thread.start()
    assert forwarded.wait(10)
    _written(sys.stdout, _session("train_a"), "a's line\n")
    printed.set()
    thread.join()
    assert _own_lines(console) == ["[train_a] a's line"]


def test_a_trials_redirect_stdout_is_its_own_and_the_other_trials_keep_the_console(monkeypatch) -> None:
    """``contextlib.redirect_stdout(buffer)`` in one trial caught what the device's other trials printed meanwhile
    (``sys.stdout`` is the process's; under Ray each trial has a process), and a trial that replaced
    ``sys.stdout`` for good took the device's console with it (h151's B5, h159's R6)."""
    import contextlib
    import logging

    from fluidsalus.gpu.host import EV_END

    console, errors = _device_streams(monkeypatch)
    handler = logging.StreamHandler()  # made before the trials: it holds the router, as under Ray the first stream
    logger = logging.getLogger("test_trial_output.redirect")
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "propagate", False)
    redirected, printed = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def f(config):
        if config["x"] == 1:
            buffer, error_buffer = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(error_buffer):
                seen["is_buffer"] = sys.stdout is buffer and sys.stderr is error_buffer
                print("x=1 captured")
                thread = threading.Thread(target=print, args=("x=1's thread captured",))
                thread.start()  # a thread the trial starts writes where the trial does
                thread.join()
                logger.warning("x=1 logged to the console")
                redirected.set()
                assert printed.wait(10)
            seen["captured"], seen["errors"] = buffer.getvalue(), error_buffer.getvalue()
            print("x=1 after its redirect")
            sys.stdout = io.StringIO()  # replaced and never put back: the trial's until its end
        else:
            assert redirected.wait(10)
            seen["x=2 sees"] = sys.stdout
            print("x=2 printed while x=1 redirected")
            printed.set()

    events = _two_trials_in_one_device(f)
    assert [e[4] for e in events if e[0] == EV_END] == ["completed", "completed"], events
    print("the device's line after the trials")
    assert seen["is_buffer"] is True and isinstance(seen["x=2 sees"], Router)
    assert seen["captured"] == "x=1 captured\nx=1's thread captured\n" and seen["errors"] == ""
    assert _own_lines(console) == ["[train_t2] x=2 printed while x=1 redirected",
                                   "[train_t1] x=1 after its redirect",
                                   "the device's line after the trials"]
    assert _own_lines(errors) == ["[train_t1] x=1 logged to the console"]


def test_a_stream_a_trial_wraps_around_sys_stdout_gets_each_write_once(monkeypatch) -> None:
    """``sys.stdout = Tee(sys.stdout)`` in a trial: ``print`` reaches the router through the trial's stream, and the
    stream's writes to what it wraps do not come back to it."""
    console, _ = _device_streams(monkeypatch)
    copies: list[str] = []

    class Tee:
        def __init__(self, stream):
            self.stream = stream

        def write(self, text):
            copies.append(text)
            return self.stream.write(text)

        def flush(self):
            self.stream.flush()

    a = _session("train_a_00000")
    set_session(a)
    try:
        original = sys.stdout
        sys.stdout = Tee(original)
        print("printed")
        sys.stdout.write("written\n")
        sys.stdout = original  # put back: the trial's own stream ends
        print("plain")
    finally:
        set_session(None)
    assert copies == ["printed", "\n", "written\n"]
    assert _own_lines(console) == ["[train_a_00000] printed", "[train_a_00000] written", "[train_a_00000] plain"]


def test_a_write_of_what_is_not_text_raises_the_streams_type_error() -> None:
    """``sys.stdout.write(None)`` in a trial raised the router's ``AttributeError`` (h159's R8)."""
    router, console = _tagging_router()
    for bad in (None, 42, b"bytes\n"):
        try:
            _written(router, _session("t"), bad)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:
            raise AssertionError(f"write({bad!r}) did not raise TypeError")
    assert console.getvalue() == ""


def _redirects(config):
    """Trial 0 redirects its stdout while trial 1, on the same device, prints; files in ``config["sync"]`` keep
    them in step (the two trials are threads of one process, which a test cannot reach)."""
    import contextlib
    import pathlib

    from fluidsalus import tune

    sync = pathlib.Path(config["sync"])

    def wait_for(name: str) -> None:
        deadline = time.time() + 30
        while not (sync / name).exists():
            assert time.time() < deadline, f"no {name}: the two trials did not run at once"
            time.sleep(0.02)

    captured = ""
    if config["i"] == 0:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            print("NOISY from trial 0")
            (sync / "redirected").touch()
            wait_for("printed")
        captured = buffer.getvalue()
    else:
        wait_for("redirected")
        print("LINE of trial 1 while trial 0 redirected", flush=True)
        (sync / "printed").touch()
    tune.report({"pid": os.getpid(), "name": tune.get_context().get_trial_name(), "captured": captured})


def test_two_trials_on_one_device_where_one_redirects_stdout(ray_cluster, storage, tmp_path, capsys) -> None:
    import fluidsalus

    grid = fluidsalus.run(_redirects, {"i": fluidsalus.grid_search([0, 1]), "sync": str(tmp_path)}, devices=1,
                          cpus_per_device=2, cpus_per_trial=1, storage_path=storage, verbose=0)
    assert len(grid) == 2 and not grid.errors
    by_i = {result.config["i"]: result.metrics for result in grid}
    assert by_i[0]["pid"] == by_i[1]["pid"]  # one device process
    assert by_i[0]["captured"] == "NOISY from trial 0\n"
    line = f"[{by_i[1]['name']}] LINE of trial 1 while trial 0 redirected"
    log = _worker_log(by_i[1]["pid"], ".out")
    assert line in log and not any("NOISY" in text for text in log)
    console, deadline = "", time.time() + 30  # (and on the driver's console once Ray forwards it, not in a later test)
    while line not in console:
        assert time.time() < deadline, console
        time.sleep(0.1)
        console += capsys.readouterr().out
    assert "NOISY" not in console


def test_text_the_console_cannot_take_under_log_to_file_is_logged_as_rays_tee_does(caplog) -> None:
    """Under ``RunConfig(log_to_file=...)`` Ray's ``Tee`` catches a stream's ``ValueError`` (a lone surrogate's
    ``UnicodeEncodeError``), logs it and goes on; the router raised it into the trial, which failed (h159's R2).
    Without ``log_to_file`` it raises at the write, as Ray's plain stream does
    (``test_an_unfinished_line_the_console_cannot_encode_fails_the_write_not_the_trials_end``)."""
    console = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    router = Router(console)
    router.tags_lines = True
    a = _session("train_a_00000")
    router.files[a] = file = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with caplog.at_level("WARNING", logger="fluidsalus.gpu.output"):
        _written(router, a, "before\n", "file name caf\udce9\n", "held caf\udce9", "after\n")
    console.flush()
    file.flush()
    assert console.buffer.getvalue() == b"[train_a_00000] before\n[train_a_00000] after\n"
    assert file.buffer.getvalue() == b"before\nafter\n"
    warnings = [r.getMessage() for r in caplog.records if "ValueError when calling 'write' on stream" in r.getMessage()]
    assert len(warnings) == 4 and all("caf\\udce9" in w for w in warnings), warnings  # console and file, twice


def test_the_traceback_of_an_exception_a_trials_thread_lets_out_is_the_trials_output(monkeypatch) -> None:
    """``threading.excepthook`` prints it after the thread's ``run`` returned, when the thread had left its trial
    (``session._start_in_trial``): it had no name, and missed the trial's ``redirect_stderr`` (under Ray it is the
    trial's process's stderr)."""
    import contextlib

    from fluidsalus.session import inherit_sessions_in_started_threads

    _, errors = _device_streams(monkeypatch)
    inherit_sessions_in_started_threads()
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # Python's, not pytest's (a warning)

    def boom() -> None:
        raise ValueError("boom in a thread of the trial")

    def thread_of(session: TrialSession) -> None:
        set_session(session)
        try:
            thread = threading.Thread(target=boom)
            thread.start()
            thread.join()
        finally:
            set_session(None)

    thread_of(_session("train_a_00000"))
    buffer = io.StringIO()
    b = _session("train_b_00001")
    set_session(b)
    try:
        with contextlib.redirect_stderr(buffer):
            thread_of(b)
    finally:
        set_session(None)
    assert "[train_a_00000] ValueError: boom in a thread of the trial" in _own_lines(errors)
    assert "ValueError: boom in a thread of the trial" in buffer.getvalue()
    assert not any("train_b" in line for line in _own_lines(errors))


def test_sys_of_a_device_process_still_pickles_by_name(monkeypatch) -> None:
    """A device process's ``sys`` has a class of its own (per-trial streams); cloudpickle looks a module's reducer up
    by its exact type, so a function using ``sys`` (a Ray task a trial starts) could not be shipped."""
    import pickle

    import cloudpickle

    _device_streams(monkeypatch)

    def version() -> str:
        return sys.version

    assert pickle.loads(pickle.dumps(sys)) is sys
    assert cloudpickle.loads(cloudpickle.dumps(sys)) is sys
    assert cloudpickle.loads(cloudpickle.dumps(version))() == sys.version


def test_a_trial_that_detaches_or_closes_its_stdout_leaves_the_console_to_the_other_trials(monkeypatch) -> None:
    """``sys.stdout = io.TextIOWrapper(sys.stdout.detach(), encoding="utf-8")`` (or over ``sys.stdout.buffer``), or
    ``sys.stdout.close()``, in one trial detached or closed the device's console under its other trials (and a
    later run's, on a warm device): their prints raised ValueError. Under Ray the console is the trial's own."""
    import types

    from fluidsalus.gpu import output

    console = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", line_buffering=True)
    monkeypatch.setattr(sys, "stdout", Router(console))
    monkeypatch.setattr(sys, "stderr", Router(io.StringIO()))
    monkeypatch.setattr(sys, "__class__", types.ModuleType)
    monkeypatch.setattr(output, "_TRIAL_STREAMS", {}, raising=False)
    output.tag_trial_lines()
    for how in ("detach", "buffer", "close"):
        a = _session(f"train_{how}")
        set_session(a)
        try:
            if how == "close":
                sys.stdout.close()
            else:
                raw = sys.stdout.detach() if how == "detach" else sys.stdout.buffer
                sys.stdout = io.TextIOWrapper(raw, encoding="utf-8", line_buffering=True)
                print(f"{how}: the trial's own wrapper")
        finally:
            a.ended = True
            set_session(None)
            output.end_trial_output(a)  # (its wrapper goes: freed, it must not close the console)
        b = _session("train_b")
        set_session(b)
        try:
            print(f"after {how}")
        finally:
            set_session(None)
            output.end_trial_output(b)
    console.flush()
    assert console.buffer.getvalue().decode().splitlines() == [
        "detach: the trial's own wrapper", "[train_b] after detach", "buffer: the trial's own wrapper",
        "[train_b] after buffer", "[train_b] after close"]


def test_a_stream_a_trial_leaves_over_the_consoles_descriptor_does_not_close_it_at_the_trials_end(
        monkeypatch, tmp_path) -> None:
    """``sys.stdout = os.fdopen(sys.stdout.fileno(), "w", buffering=1)`` left in place: freed at the trial's end, it
    closed the console's descriptor under the device's other trials (OSError EBADF), and the next file opened got
    its number, and their text."""
    import gc
    import types

    from fluidsalus.gpu import output

    console = open(tmp_path / "console", "w", buffering=1)  # noqa: SIM115 - closed below
    monkeypatch.setattr(sys, "stdout", Router(console))
    monkeypatch.setattr(sys, "stderr", Router(io.StringIO()))
    monkeypatch.setattr(sys, "__class__", types.ModuleType)
    monkeypatch.setattr(output, "_TRIAL_STREAMS", {}, raising=False)
    monkeypatch.setattr(output, "_LEFT_BY_TRIALS", [], raising=False)
    output.tag_trial_lines()
    a = _session("train_a")
    set_session(a)
    try:
        sys.stdout = os.fdopen(sys.stdout.fileno(), "w", buffering=1)
        print("a's own stream")
    finally:
        a.ended = True
        set_session(None)
        output.end_trial_output(a)
    gc.collect()
    b = _session("train_b")
    set_session(b)
    try:
        with open(tmp_path / "data", "w") as data:
            data.write("DATA\n")
            print("b's line")
    finally:
        set_session(None)
        output.end_trial_output(b)
    console.close()
    assert (tmp_path / "data").read_text() == "DATA\n"
    assert (tmp_path / "console").read_text() == "a's own stream\n[train_b] b's line\n"


def test_a_stream_a_thread_of_an_ended_trial_puts_in_place_goes_with_the_thread(monkeypatch) -> None:
    """A thread a trial started that assigns ``sys.stdout`` after the trial ended (a library's worker that silences
    itself) kept the ended trial's session for the device process's life, and every later print of any trial took
    the look-up's path (h172's A3): the stream is the thread's while it lives, then goes."""
    import gc
    import types
    import weakref

    from fluidsalus.gpu import output

    console = io.StringIO()
    monkeypatch.setattr(sys, "stdout", Router(console))
    monkeypatch.setattr(sys, "stderr", Router(io.StringIO()))
    monkeypatch.setattr(sys, "__class__", types.ModuleType)
    monkeypatch.setattr(output, "_TRIAL_STREAMS", {}, raising=False)
    output.tag_trial_lines()
    a = _session("train_a")
    a.ended = True  # (its end: the host's end_trial_output ran before the thread's assignment)
    output.end_trial_output(a)
    own = io.StringIO()

    def late(session: TrialSession) -> None:
        set_session(session)  # (a thread the trial started has its session to its end)
        sys.stdout = own
        print("the thread's own line")

    thread = threading.Thread(target=late, args=(a,))
    thread.start()
    thread.join()
    ended = weakref.ref(a)
    del a, thread
    gc.collect()
    print("the device's line")
    assert own.getvalue() == "the thread's own line\n" and console.getvalue() == "the device's line\n"
    assert ended() is None
    assert not output._TRIAL_STREAMS["stdout"].replaced


class _CollectingConsole(io.StringIO):
    """A console whose next write first runs a garbage collection, as an allocation in the router's write may."""

    collect = False

    def write(self, text: str) -> int:
        if self.collect:
            self.collect = False
            gc.collect()
        return super().write(text)


def test_a_del_that_prints_during_the_routers_own_write_is_written_after_it_not_deadlocked() -> None:
    """An object's ``__del__`` that prints (tqdm's progress bar closes itself so), run by a garbage collection in the
    middle of the router's write of a trial's line, asked for the router's lock its own thread held, and the trial
    hung for ever. Its text is written right after the write in progress, in order, nothing lost; and the same at
    the trial's end, whose held line the host writes (in no trial: its text untagged)."""
    router, _ = _tagging_router()
    console = router.stream = _CollectingConsole()
    trial = _session("train_t")

    class Bar:
        def __init__(self, name: str) -> None:
            self.me, self.name = self, name  # a cycle: only the collector frees it

        def __del__(self) -> None:
            router.write(f"{self.name} closed\n")

    def in_trial() -> None:
        set_session(trial)
        try:
            router.write("epoch 1 ")  # held until its line ends
            Bar("bar 1")
            console.collect = True
            router.write("done\n")
            router.write("epoch 2\ntail")
        finally:
            set_session(None)

    enabled = gc.isenabled()
    gc.disable()  # (only the console's collection frees a Bar)
    try:
        thread = threading.Thread(target=in_trial, daemon=True)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "the trial's write deadlocked on the router's lock"
        trial.ended = True
        Bar("bar 2")
        console.collect = True
        ending = threading.Thread(target=router.end_trial, args=(trial,), daemon=True)  # (the host's thread)
        ending.start()
        ending.join(10)
        assert not ending.is_alive(), "the trial's end deadlocked on the router's lock"
    finally:
        if enabled:
            gc.enable()
    assert console.getvalue() == ("[train_t] epoch 1 done\n[train_t] bar 1 closed\n[train_t] epoch 2\n"
                                  "[train_t] tail\nbar 2 closed\n")


class _AsciiCollectingConsole(_CollectingConsole):
    """A collecting console that cannot take text outside ASCII (its write raises, as an ASCII terminal's does)."""

    def write(self, text: str) -> int:
        if self.collect:
            self.collect = False
            gc.collect()
        text.encode("ascii")
        return io.StringIO.write(self, text)


def test_a_del_whose_deferred_print_fails_is_reported_not_raised_by_the_trials_own_print(caplog) -> None:
    """A ``__del__`` whose print fails (text the console cannot encode) ran during the router's write of a trial's
    line: its deferred write raised its error out of the trial's own print, which had gone through (a trial failed on
    another object's ``__del__``). Python gives a ``__del__``'s error to ``sys.unraisablehook`` and goes on: here it is
    logged, and the other deferred writes are written."""
    router, _ = _tagging_router()
    console = router.stream = _AsciiCollectingConsole()
    trial = _session("train_t")
    raised: list[BaseException] = []

    class Bar:
        def __init__(self, text: str) -> None:
            self.me, self.text = self, text  # a cycle: only the collector frees it

        def __del__(self) -> None:
            router.write(self.text)

    def in_trial() -> None:
        set_session(trial)
        try:
            Bar("bar \udcff closed\n")
            Bar("bar 2 closed\n")
            console.collect = True
            router.write("done\n")
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            raised.append(e)
        finally:
            set_session(None)

    enabled = gc.isenabled()
    gc.disable()  # (only the console's collection frees a Bar)
    try:
        with caplog.at_level("WARNING", logger="fluidsalus.gpu.output"):
            thread = threading.Thread(target=in_trial, daemon=True)
            thread.start()
            thread.join(10)
    finally:
        if enabled:
            gc.enable()
    assert not thread.is_alive() and raised == []
    assert console.getvalue() == "[train_t] done\n[train_t] bar 2 closed\n"
    logged = [r for r in caplog.records if "Exception ignored in a write made in the middle" in r.getMessage()]
    assert len(logged) == 1 and ascii("bar \udcff closed\n") in logged[0].getMessage()
    assert logged[0].exc_info is not None and logged[0].exc_info[0] is UnicodeEncodeError
    assert not router._deferred
