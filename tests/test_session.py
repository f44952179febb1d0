"""The session API inside and outside a trial."""

from __future__ import annotations

import fractions
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import fluidsalus
from fluidsalus.checkpoint import Checkpoint, persist_checkpoint, write_atomically
from fluidsalus.errors import ConfigError, SessionError
from fluidsalus.session import AUTO_RESULT_KEYS, SharedTurn, StopTrial, TrialContext, TrialSession, set_session


def _session(tmp_path, **kwargs):
    got: list[dict] = []
    ctx = TrialContext("t0", "f_t0", "exp", str(tmp_path / "t0"))
    return TrialSession(ctx, lambda result, paused, prompt: got.append(result), **kwargs), got


@pytest.mark.parametrize("call", [
    lambda: fluidsalus.report({"x": 1}),
    fluidsalus.get_checkpoint,
    fluidsalus.get_context,
])
def test_outside_a_trial_raises_a_clear_error(call):
    with pytest.raises(SessionError, match=r"outside a trial.*fluidsalus.run"):
        call()


def test_report_adds_ray_fields_and_counts_iterations(tmp_path):
    session, got = _session(tmp_path)
    set_session(session)
    try:
        fluidsalus.report({"acc": 0.5})
        fluidsalus.report({"acc": 0.6})
    finally:
        set_session(None)
    assert [r["training_iteration"] for r in got] == [1, 2]
    assert [r["acc"] for r in got] == [0.5, 0.6]
    for key in ("time_this_iter_s", "time_total_s", "timestamp", "trial_id", "date", "pid", "hostname"):
        assert key in got[0], key
    assert set(got[0]) >= AUTO_RESULT_KEYS  # every key Ray fills in, as Ray fills them
    assert got[0]["checkpoint_dir_name"] is None  # no checkpoint with this result
    assert isinstance(got[0]["node_ip"], str) and got[0]["node_ip"].count(".") == 3
    assert got[1]["time_total_s"] >= got[0]["time_total_s"] >= 0
    assert got[0]["trial_id"] == "t0" and got[1]["done"] is False


def test_restart_continues_iteration_and_time_counters(tmp_path):
    session, got = _session(tmp_path, start_iteration=5, time_total_offset=100.0)
    session.report({"acc": 1})
    assert got[0]["training_iteration"] == 6
    assert got[0]["iterations_since_restore"] == 1
    assert got[0]["time_total_s"] >= 100.0


def test_running_totals_of_timesteps_and_episodes_as_ray_fills_them(tmp_path):
    """A result with timesteps_this_iter (episodes_this_iter) gets Ray's timesteps_total (episodes_total) and
    timesteps_since_restore; a restart from a checkpoint continues the totals of the checkpoint's result, and a
    total the trainable reports itself stands. They were never filled in: stop={"timesteps_total": N} stopped
    nothing and ASHA(time_attr="timesteps_total") failed the run."""
    session, got = _session(tmp_path)
    session.report({"acc": 1})  # no increment: no totals, as in Ray
    session.report({"timesteps_this_iter": 10, "episodes_this_iter": 2})
    session.report({"timesteps_this_iter": 5})
    session.report({"timesteps_this_iter": 5, "timesteps_total": 99})
    assert "timesteps_total" not in got[0] and "timesteps_since_restore" not in got[0]
    assert [r.get("timesteps_total") for r in got[1:]] == [10, 15, 99]
    assert [r.get("episodes_total") for r in got[1:]] == [2, 2, 2]
    assert [r.get("timesteps_since_restore") for r in got[1:]] == [10, 15, 20]
    (tmp_path / "ck").mkdir()
    session.report({"x": 1}, checkpoint=fluidsalus.Checkpoint.from_directory(str(tmp_path / "ck")))
    assert session.checkpoint_totals == {"timesteps_total": 20, "episodes_total": 2}
    restarted, again = _session(tmp_path, start_iteration=5, result_totals=session.checkpoint_totals)
    restarted.report({"timesteps_this_iter": 1, "episodes_this_iter": 1})
    assert again[0]["timesteps_total"] == 21 and again[0]["episodes_total"] == 3
    assert again[0]["timesteps_since_restore"] == 1


def test_a_result_stands_when_the_save_at_its_end_fails(tmp_path):
    """A class Trainable without save_checkpoint under checkpoint_at_end: the last result is delivered, then the
    save's error fails the trial, as in Ray (the result was lost)."""

    def broken_save():
        raise NotImplementedError("save_checkpoint() must be implemented")

    session, got = _session(tmp_path, should_stop=lambda r: r["training_iteration"] >= 2)
    session.report({"a": 1}, at_end=broken_save)
    with pytest.raises(NotImplementedError):
        session.report({"a": 2}, at_end=broken_save)
    assert [r["a"] for r in got] == [1, 2]


def test_a_pause_whose_save_is_not_implemented_fails_the_trial_only_if_the_verdict_ends_it_there(tmp_path):
    """A class Trainable without save_checkpoint paused at its budget (ASHA's rung, under the Tuner's default
    checkpoint_at_end): its save raised there, the result went out as not paused, and the searcher's promotion of
    a RUNNING trial ended the whole run (FluidsalusError). Now, as Ray's save at the end: a promoted trial goes on,
    and one the verdict ends at the pause fails with the save's error; a save the searcher needs at its pauses
    (PBT's, end_save_at_pause=False) fails the trial there."""
    import threading
    import time

    def broken_save():
        raise NotImplementedError("save_checkpoint() must be implemented")

    def pause(session, got, **kwargs):
        outcome: dict[str, BaseException] = {}

        def report():
            try:
                session.report({"a": 1}, at_end=broken_save, **kwargs)
            except BaseException as e:  # noqa: BLE001 - recorded for the test
                outcome["error"] = e

        thread = threading.Thread(target=report, daemon=True)
        thread.start()
        for _ in range(500):
            if got or outcome:
                break
            time.sleep(0.01)
        return thread, outcome

    session, got = _session(tmp_path, budget=1, should_stop=lambda r: r["training_iteration"] >= 3)
    thread, outcome = pause(session, got, end_save_at_pause=True)
    session.resume(None)  # promoted: it goes on
    thread.join(5)
    assert not thread.is_alive() and outcome == {} and [r["a"] for r in got] == [1]
    session.report({"a": 2}, at_end=broken_save)
    with pytest.raises(NotImplementedError):
        session.report({"a": 3}, at_end=broken_save, end_save_at_pause=True)  # its true end
    assert [r["a"] for r in got] == [1, 2, 3]

    stopped, seen = _session(tmp_path, budget=1)
    thread, outcome = pause(stopped, seen, end_save_at_pause=True)
    stopped.request_stop()  # the verdict ends it at the pause
    thread.join(5)
    assert isinstance(outcome.get("error"), NotImplementedError) and [r["a"] for r in seen] == [1]

    needed, kept = _session(tmp_path, budget=1)
    thread, outcome = pause(needed, kept)  # PBT's save at its point
    thread.join(5)
    assert isinstance(outcome.get("error"), NotImplementedError) and [r["a"] for r in kept] == [1]

    # The run's end (its time budget, stop_all(), Ctrl-C) is no verdict on the trial: Ray saves checkpoint_at_end
    # only for a trial that is done, so a paused one, or a running one stopped at its next report, is only
    # stopped (each failed with the save's error).
    ending, held = _session(tmp_path, budget=1)
    thread, outcome = pause(ending, held, end_save_at_pause=True)
    ending.request_stop(no_verdict=True)
    thread.join(5)
    assert isinstance(outcome.get("error"), StopTrial) and [r["a"] for r in held] == [1]
    running, ran = _session(tmp_path)
    running.request_stop(no_verdict=True)
    with pytest.raises(StopTrial):
        running.report({"a": 1}, at_end=broken_save, end_save_at_pause=True)
    assert [r["a"] for r in ran] == [1]
    ruled, ruled_seen = _session(tmp_path, should_stop=lambda r: True)  # the stop rule ends it too: it is done
    ruled.request_stop(no_verdict=True)
    with pytest.raises(NotImplementedError):
        ruled.report({"a": 1}, at_end=broken_save, end_save_at_pause=True)


def test_stop_rule_delivers_the_result_then_stops(tmp_path):
    session, got = _session(tmp_path, should_stop=lambda r: r["training_iteration"] >= 2)
    session.report({"a": 1})
    with pytest.raises(StopTrial):
        session.report({"a": 2})
    assert [r["done"] for r in got] == [False, True]


def test_a_stored_checkpoint_and_an_atomically_written_file_have_the_modes_plain_ones_would(tmp_path):
    """Stored checkpoints were 0700 (a TemporaryDirectory's mode, or mkdtemp's) and tuner.pkl 0600 (mkstemp's), where
    Ray's are 0755 and 0644 under a umask of 022: unreadable to another user or job on shared storage (a helper's)."""
    import tempfile

    umask = os.umask(0o022)
    try:
        session, _ = _session(tmp_path)
        with tempfile.TemporaryDirectory() as src:  # (mode 0700)
            open(os.path.join(src, "w.txt"), "w").close()
            session.report({"a": 1}, checkpoint=fluidsalus.Checkpoint.from_directory(src))
        assert os.stat(session.checkpoint.path).st_mode & 0o777 == 0o755
        write_atomically(str(tmp_path / "state.pkl"), b"x")
        assert os.stat(tmp_path / "state.pkl").st_mode & 0o777 == 0o644
    finally:
        os.umask(umask)


def test_checkpoint_is_copied_into_the_trial_folder(tmp_path):
    session, got = _session(tmp_path)
    src = tmp_path / "mine"
    src.mkdir()
    (src / "state.txt").write_text("42")
    session.report({"a": 1}, checkpoint=fluidsalus.Checkpoint.from_directory(src))
    (src / "state.txt").write_text("changed after report")  # the trainable may reuse its folder
    persisted = session.checkpoint
    assert persisted is not None and persisted.path == str(tmp_path / "t0" / "checkpoint_000001")
    with persisted.as_directory() as d:
        assert open(os.path.join(d, "state.txt")).read() == "42"
    assert got[0]["checkpoint_dir_name"] == "checkpoint_000001"


def test_a_checkpoint_attached_after_its_result_is_that_iterations_and_the_driver_is_told(tmp_path):
    told: list[tuple[int, str]] = []
    session, got = _session(tmp_path, checkpoint_sink=lambda iteration, name: told.append((iteration, name)),
                            start_iteration=4, time_total_offset=10.0)
    session.report({"a": 1})
    assert got[0]["checkpoint_dir_name"] is None and session.checkpoint_at == (4, 10.0)
    src = tmp_path / "mine"
    src.mkdir()
    (src / "state.txt").write_text("5")
    session.attach_checkpoint(fluidsalus.Checkpoint.from_directory(src))
    assert told == [(5, "checkpoint_000005")]
    assert session.checkpoint is not None and session.checkpoint.path == str(tmp_path / "t0" / "checkpoint_000005")
    assert session.checkpoint_at == (5, got[0]["time_total_s"])  # a restart resumes from it
    with pytest.raises(TypeError, match="expected a fluidsalus.Checkpoint"):
        session.attach_checkpoint(str(src))  # type: ignore[arg-type]


def test_report_rejects_bad_arguments(tmp_path):
    session, _ = _session(tmp_path)
    with pytest.raises(TypeError, match="metrics must be a dict"):
        session.report([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a fluidsalus.Checkpoint"):
        session.report({"a": 1}, checkpoint="/tmp")  # type: ignore[arg-type]


def test_return_values_are_reported_like_ray_tune(tmp_path):
    session, got = _session(tmp_path)
    session.report_return_value({"acc": 0.9})
    session.report_return_value(3)
    session.report_return_value(None)
    session.report_return_value(np.float32(0.5))
    session.report_return_value(fractions.Fraction(1, 4))  # (stored as a string when kept as it came)
    assert got[0]["acc"] == 0.9 and len(got) == 4 and type(got[3]["_metric"]) is float
    assert got[1]["_metric"] == 3 and type(got[1]["_metric"]) is int  # as it came, as Ray's (it was 3.0)
    assert got[2]["_metric"] == 0.5
    with pytest.raises(ValueError, match="single number or a dict"):
        session.report_return_value("text")


def test_checkpoint_helpers(tmp_path, monkeypatch):
    later = fluidsalus.Checkpoint.from_directory(tmp_path / "later")  # as in Ray: it must exist when reported
    assert later.path == str(tmp_path / "later")
    src = tmp_path / "c"
    src.mkdir()
    (src / "f").write_text("x")
    ckpt = fluidsalus.Checkpoint.from_directory(src)
    ckpt.set_metadata({"epoch": 3})
    ckpt.update_metadata({"lr": 0.1})
    assert ckpt.get_metadata() == {"epoch": 3, "lr": 0.1}
    out = ckpt.to_directory(tmp_path / "copy")
    assert open(os.path.join(out, "f")).read() == "x"
    import pyarrow.fs

    assert isinstance(ckpt.filesystem, pyarrow.fs.LocalFileSystem)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # (plain ray does not install it)
    assert not hasattr(ckpt, "filesystem")  # an AttributeError naming pyarrow, not a ModuleNotFoundError
    with pytest.raises(AttributeError, match="pyarrow is not installed"):
        ckpt.filesystem  # noqa: B018
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    out = ckpt.to_directory("~/restored")  # ~ expanded, as Ray's (it made a folder named "~")
    assert out == str(tmp_path / "home" / "restored") and open(os.path.join(out, "f")).read() == "x"


def test_a_file_uri_is_the_checkpoints_local_path_and_other_uris_are_refused(tmp_path):
    """``Checkpoint("file:///abs/dir")`` kept the URI as its path, so every later use failed with FileNotFoundError;
    Ray resolves it to the directory. A remote URI names what fluidsalus accepts instead of failing later."""
    folder = tmp_path / "a dir"
    folder.mkdir()
    (folder / "w.txt").write_text("1")
    uri = folder.as_uri()  # file:///.../a%20dir
    checkpoint = Checkpoint(uri)
    assert checkpoint.path == str(folder)
    with checkpoint.as_directory() as d:
        assert (Path(d) / "w.txt").read_text() == "1"
    assert Checkpoint.from_directory(f"file://localhost{folder}").path == str(folder)
    with pytest.raises(ConfigError, match=r"'s3://bucket/key' is a 's3' URI; a fluidsalus checkpoint is a local"):
        Checkpoint("s3://bucket/key")
    with pytest.raises(ConfigError, match=r"names the host 'host'; a file:// URI must be local"):
        Checkpoint("file://host/x")


def test_a_checkpoint_with_a_dangling_link_is_stored_without_it_as_rays_is(tmp_path):
    """A stale link in a checkpoint folder (a framework's ``latest`` whose target was deleted) failed every report
    of the trial with ``shutil.Error``, and each attempt left a half-filled staging folder: Ray's copy leaves the
    link out. A copy that fails for another reason leaves no staging folder either."""
    src = tmp_path / "c"
    src.mkdir()
    (src / "state.json").write_text("{}")
    os.symlink(tmp_path / "gone", src / "latest")
    trial_dir = tmp_path / "trial"
    stored = persist_checkpoint(Checkpoint.from_directory(src), str(trial_dir), 1)
    assert sorted(os.listdir(stored)) == ["state.json"]
    assert sorted(os.listdir(Checkpoint(src).to_directory(tmp_path / "out"))) == ["state.json"]
    with pytest.raises(FileNotFoundError):
        persist_checkpoint(Checkpoint.from_directory(tmp_path / "never_made"), str(trial_dir), 2)
    assert sorted(os.listdir(trial_dir)) == ["checkpoint_000001"]  # (no .incoming_* left)


def test_a_reported_done_is_kept_and_ends_the_trial_as_in_ray(tmp_path):
    seen = []
    session, got = _session(tmp_path, should_stop=lambda r: seen.append(r["done"]) or r["done"] is True)
    session.report({"a": 1})
    with pytest.raises(StopTrial):
        session.report({"a": 2, "done": True})
    assert seen == [False, True]  # stop={"done": True} sees the trainable's own done
    assert [r["done"] for r in got] == [False, True]


@pytest.mark.parametrize(("value", "by_rule"), [(5, True), (1, False)])
def test_a_driver_stop_still_lets_the_stop_rule_see_the_result(tmp_path, value, by_rule):
    """The driver stopped the trial (a move, say) at the same report where the run's stop rule is met: the trial
    is finished by the rule, which the host tells the driver, so that the move does not restart it."""
    s, got = _session(tmp_path, should_stop=lambda result: result["v"] >= 3)
    s.request_stop()
    with pytest.raises(StopTrial):
        s.report({"v": value})
    assert got[0]["done"] is True and s.stopped_by_rule is by_rule


def test_a_report_made_as_a_stop_unwinds_the_trial_is_dropped_as_in_ray(tmp_path):
    """A trainable that reports again in a ``finally:`` (or Lightning's ``on_exception`` hook) as the stop unwinds
    it: Ray drops that report. It was stored, one iteration past the scheduler's stop, and could be the best
    result (a helper's side by side under ASHA)."""
    s, got = _session(tmp_path)
    s.report({"loss": 1.0})
    s.request_stop()
    with pytest.raises(StopTrial):
        s.report({"loss": 0.5})
    checkpoint_dir = tmp_path / "late"
    checkpoint_dir.mkdir()
    try:
        s.report({"loss": 0.4})
    except StopTrial:  # (as a trainable's ``except BaseException:`` or ``finally:`` sees it)
        assert s.report({"loss": -100.0}, checkpoint=fluidsalus.Checkpoint.from_directory(str(checkpoint_dir))) is None
    # Outside the stop's unwinding (the trial's own thread after a thread it started was stopped) it stops the
    # caller: dropping every report let a `while True: report()` loop run for ever (a review's finding)
    with pytest.raises(StopTrial):
        s.report({"loss": -200.0})
    assert [r["loss"] for r in got] == [1.0, 0.5] and s.iteration == 2

def test_write_atomically_replaces_the_whole_file_or_leaves_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "state.pkl"
    write_atomically(str(target), b"old")
    write_atomically(str(target), "new text")
    assert target.read_text() == "new text"

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(str(target), b"lost")
    assert target.read_text() == "new text" and os.listdir(tmp_path) == ["state.pkl"]  # no staging file left


def _started_in_trial(tmp_path, name):
    """Start a thread named ``name`` in a trial; return what the trial got from the thread's report."""
    import threading

    session, got = _session(tmp_path)
    set_session(session)
    try:
        thread = threading.Thread(target=lambda: fluidsalus.report({"x": 1}), name=name)
        thread.start()
        thread.join()
    finally:
        set_session(None)
    return [r["x"] for r in got]


@pytest.mark.parametrize("tool_first", [True, False])
def test_inheriting_wraps_thread_start_once_and_keeps_another_tools_wrapper(tmp_path, monkeypatch, tool_first):
    """A tool that wraps ``Thread.start`` (a debugger, say) before or after the host installs inheritance still
    sees every start, once; a thread started in a trial reports to it; a second host changes nothing."""
    import threading

    from fluidsalus import session as session_module

    true_start = session_module._thread_start if session_module._inheriting else threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", true_start)  # this process as a fresh device process
    monkeypatch.setattr(session_module, "_thread_start", true_start)
    monkeypatch.setattr(session_module, "_inheriting", False)
    starts = []

    def install_tool():
        wrapped = threading.Thread.start

        def tool_start(self):
            starts.append(self.name)
            wrapped(self)

        threading.Thread.start = tool_start  # monkeypatch restores the attribute at the end

    if tool_first:
        install_tool()
    session_module.inherit_sessions_in_started_threads()
    if not tool_first:
        install_tool()
    session_module.inherit_sessions_in_started_threads()  # a second host in the process
    assert _started_in_trial(tmp_path, "child") == [1]
    assert starts == ["child"]


def test_threads_a_trial_started_are_listed_while_they_run(tmp_path, monkeypatch):
    """What a device checks before it serves another run (``_DeviceActor.reset``): a thread a trial left running."""
    import threading

    from fluidsalus import session as session_module

    true_start = session_module._thread_start if session_module._inheriting else threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", true_start)  # this process as a fresh device process
    monkeypatch.setattr(session_module, "_thread_start", true_start)
    monkeypatch.setattr(session_module, "_inheriting", False)
    monkeypatch.setattr(session_module, "_trial_threads", __import__("weakref").WeakSet())
    session_module.inherit_sessions_in_started_threads()
    release = threading.Event()
    outside = threading.Thread(target=release.wait, name="not-a-trials")
    outside.start()  # started in no trial: not listed
    session, _ = _session(tmp_path)
    set_session(session)
    try:
        lingering = threading.Thread(target=release.wait, name="left-running")
        lingering.start()
        done = threading.Thread(target=lambda: None, name="ended")
        done.start()
        done.join()
    finally:
        set_session(None)
    assert session_module.trial_threads_alive() == ["left-running"]
    release.set()
    lingering.join()
    outside.join()
    assert session_module.trial_threads_alive() == []


def test_a_checkpoint_of_the_trials_own_folder_leaves_out_its_earlier_checkpoints(tmp_path):
    """A trial works in its own folder, so ``Checkpoint.from_directory(".")`` names it (or a folder above it): the
    persisted copy holds the trial's files but not its earlier checkpoints or a staging folder. Before, each
    checkpoint held every earlier one, and its size doubled at each report."""
    trial_dir = tmp_path / "exp" / "trial_0"
    (trial_dir / "checkpoint_000001").mkdir(parents=True)
    (trial_dir / "checkpoint_000001" / "model.txt").write_text("old")
    (trial_dir / "exploited_checkpoint_000001").mkdir()  # a PBT exploit's copy of another trial's (the review)
    (trial_dir / ".incoming_abc").mkdir()
    (trial_dir / "model.txt").write_text("new")
    (trial_dir / "result.json").write_text("{}\n")  # the trial's records (the Tune front end's loggers)
    (trial_dir / "sub" / "checkpoint_000009").mkdir(parents=True)  # the user's own folder of that name is kept
    path = persist_checkpoint(Checkpoint.from_directory(str(trial_dir)), str(trial_dir), 2)
    assert sorted(os.listdir(path)) == ["model.txt", "sub"] and os.listdir(os.path.join(path, "sub"))
    # The experiment's folder, with the trial's inside it: the trial's folder is copied without them too.
    path = persist_checkpoint(Checkpoint.from_directory(str(tmp_path / "exp")), str(trial_dir), 3)
    assert sorted(os.listdir(os.path.join(path, "trial_0"))) == ["model.txt", "sub"]


def test_a_trainables_name_is_its_own_lambda_for_a_lambda_and_its_types_for_an_unhashable_callable():
    """A callable object need not be hashable: the name was cached by the trainable (a decorator slipped onto it),
    and an object with ``__eq__`` and no ``__hash__`` raised TypeError."""
    from fluidsalus.session import callable_name

    class Objective:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Objective)

        def __call__(self, config: dict) -> None:
            return None

    assert callable_name(lambda config: None) == "lambda"
    assert callable_name(Objective()) == "Objective"
    assert callable_name(_session) == "_session"


def test_a_checkpoint_saved_into_a_stored_checkpoints_folder_warns(tmp_path):
    """A trainable whose working directory is its trial's folder and that saves into ``checkpoint_<i-1:06d>``
    (Ray's naming) wrote iteration 3's files into the stored checkpoint of iteration 2, without a word (a helper's
    side-by-side run: Ray's working directory is elsewhere)."""
    trial_dir = tmp_path / "trial"
    src = tmp_path / "c"
    src.mkdir()
    (src / "state").write_text("2")
    stored = persist_checkpoint(Checkpoint.from_directory(src), str(trial_dir), 2)
    (trial_dir / "checkpoint_000002" / "state").write_text("3")  # what the trainable did at iteration 3
    with pytest.warns(UserWarning, match="is the folder checkpoint_000002 of the trial's folder .*: fluidsalus "
                                         "stored iteration 2's checkpoint there, and files written into it change"):
        persist_checkpoint(Checkpoint.from_directory(stored), str(trial_dir), 3)
    (trial_dir / "checkpoint_000000").mkdir()
    with pytest.warns(UserWarning, match="a name of fluidsalus's stored checkpoints"):
        persist_checkpoint(Checkpoint.from_directory(trial_dir / "checkpoint_000000"), str(trial_dir), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        persist_checkpoint(Checkpoint.from_directory(src), str(trial_dir), 4)  # (a folder elsewhere: no word)


# ------------------------------------------------------------------ a trial's turn shared by its threads


class _HostTurns:
    """A host's turn handle that records what it was asked; ``grant`` holds an ``acquire`` until the test sets it."""

    def __init__(self) -> None:
        self.log: list[object] = []
        self.grant = threading.Event()
        self.grant.set()

    def acquire(self) -> None:
        self.log.append("acquire")
        assert self.grant.wait(5.0)

    def release(self, verdict: bool = False) -> None:
        self.log.append(("release", verdict))

    def boundary(self, may_switch: bool = True) -> None:
        self.log.append("boundary")

    def step(self) -> None:
        self.log.append("step")


def _in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _still_waits(thread: threading.Thread) -> bool:
    thread.join(0.2)
    return thread.is_alive()


def test_threads_away_at_once_give_the_turn_up_once_and_the_last_one_back_takes_it_for_all():
    """Threads of one trial in driver calls at once (h205's F4): the host sees one release and one acquire, and a
    thread back before the last waits for the turn as a lone thread waits for it after its call."""
    host = _HostTurns()
    turn = SharedTurn(host)
    turn.release()
    turn.release(verdict=True)  # the second one away only tells the host that it waits for a verdict
    turn.release()
    first_back = _in_thread(turn.acquire)
    assert _still_waits(first_back)
    second_back = _in_thread(turn.acquire)
    assert _still_waits(second_back) and turn.away == 1 and not turn.held
    turn.acquire()  # the last one back takes the turn, for all
    first_back.join(5.0)
    second_back.join(5.0)
    assert not first_back.is_alive() and not second_back.is_alive()
    assert host.log == [("release", False), ("release", True), "acquire"]
    assert turn.held and turn.away == 0


def test_a_thread_stepping_away_while_another_takes_the_turn_back_gives_it_up_after_that():
    """A call that begins while the last thread back waits for the turn waits for that, then gives the turn up
    again (giving it up before would take the trial off the lane's ready list: the taker would wait for ever)."""
    host = _HostTurns()
    turn = SharedTurn(host)
    turn.release()
    host.grant.clear()  # the lane's turn is a neighbour's for a while
    taker = _in_thread(turn.acquire)
    deadline = time.time() + 5.0
    while "acquire" not in host.log:
        assert time.time() < deadline
        time.sleep(0.01)
    leaving = _in_thread(turn.release)
    assert _still_waits(leaving) and host.log == [("release", False), "acquire"]
    host.grant.set()
    taker.join(5.0)
    leaving.join(5.0)
    assert not taker.is_alive() and not leaving.is_alive()
    assert host.log == [("release", False), "acquire", ("release", False)] and turn.away == 1
    turn.acquire()
    assert host.log[-1] == "acquire" and turn.held


def test_a_boundary_waits_for_the_threads_away_and_one_that_leaves_lets_another_take_the_turn():
    """A report (boundary) or step of one thread while another waits for the driver waits until the trial holds
    its turn again; a thread stopped where it was away (a pause the verdict ends) leaves without the turn, and the
    next thread that needs it takes it."""
    host = _HostTurns()
    turn = SharedTurn(host)
    turn.release()
    at_boundary = _in_thread(turn.boundary)
    at_step = _in_thread(turn.step)
    assert _still_waits(at_boundary) and _still_waits(at_step) and host.log == [("release", False)]
    turn.leave()  # stopped while away: it takes nothing back
    at_boundary.join(5.0)
    at_step.join(5.0)
    assert not at_boundary.is_alive() and not at_step.is_alive()
    assert host.log[:2] == [("release", False), "acquire"] and sorted(map(str, host.log[2:])) == ["boundary", "step"]
    assert turn.held and turn.away == 0


def test_a_take_back_that_fails_wakes_the_threads_that_wait_for_it():
    """The host cannot give the turn back (the trial's function returned while two of its threads were in driver
    calls, so the trial left its lane): the last thread back gets the host's error, and the one back before it,
    which waited for it, tries itself and gets the error too, as a lone caller does, instead of waiting for ever."""
    host = _HostTurns()

    def gone() -> None:
        host.log.append("acquire")
        raise KeyError("t0")

    host.acquire = gone  # type: ignore[method-assign]
    turn = SharedTurn(host)
    turn.release()
    turn.release()
    errors: list[BaseException] = []

    def first_back() -> None:
        try:
            turn.acquire()
        except KeyError as e:
            errors.append(e)

    waiter = _in_thread(first_back)
    assert _still_waits(waiter)
    with pytest.raises(KeyError):
        turn.acquire()  # the last one back
    waiter.join(5.0)
    assert not waiter.is_alive() and len(errors) == 1
    assert host.log == [("release", False), "acquire", "acquire"] and not turn.held


def test_a_thread_back_early_is_not_starved_by_another_that_calls_the_driver_back_to_back():
    """The first thread back waits for the last one back to take the turn, not for the trial to hold it when it
    wakes: the last one back that steps away again at once (a call right after its call) does not make it wait
    for that call too. Before, a thread waited 300 ms (a hundred of its neighbour's calls) for one call of 3 ms."""
    host = _HostTurns()
    turn = SharedTurn(host)
    turn.release()
    turn.release()
    first_back = _in_thread(turn.acquire)
    assert _still_waits(first_back)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)  # (the waiter cannot run between the take-back and the next call below)
    try:
        turn.acquire()  # the last one back takes the turn for both ...
        turn.release()  # ... and calls the driver again at once
    finally:
        sys.setswitchinterval(interval)
    first_back.join(5.0)
    assert not first_back.is_alive()
    assert host.log == [("release", False), "acquire", ("release", False)]
    assert turn.away == 1 and not turn.held
    at_boundary = _in_thread(turn.boundary)  # a report now waits for the next take-back, as before
    assert _still_waits(at_boundary)
    turn.acquire()
    at_boundary.join(5.0)
    assert not at_boundary.is_alive() and host.log[-2:] == ["acquire", "boundary"]


class _MeetingMetrics(Mapping):
    """Metrics whose copy into the result (``dict(metrics)`` reads ``keys()``) first waits, up to the barrier's
    timeout, for the other reports made with ``meeting``: reports that run at once meet there; one at a time, the
    first waits it out alone."""

    def __init__(self, meeting: threading.Barrier, **metrics) -> None:
        self.metrics, self.meeting = metrics, meeting

    def __getitem__(self, key):
        return self.metrics[key]

    def __iter__(self):
        return iter(self.metrics)

    def __len__(self) -> int:
        return len(self.metrics)

    def keys(self):
        try:
            self.meeting.wait()
        except threading.BrokenBarrierError:
            pass
        return self.metrics.keys()


def test_threads_of_a_trial_that_report_at_once_get_an_iteration_each_in_order(tmp_path):
    """Two threads of one trial reported at once: both results could carry the same ``training_iteration`` (the
    second report counted its iteration while the first built its result from the count). Ray's function
    trainable takes one report at a time (each waits for its result's ``train()`` call), so each gets its own
    iteration; here too, and the driver gets them in that order, none lost."""
    session, got = _session(tmp_path)
    meeting = threading.Barrier(2, timeout=0.5)  # (one report at a time: the first waits it out, alone)

    def reporter(name: str) -> threading.Thread:
        def report() -> None:
            set_session(session)
            session.report(_MeetingMetrics(meeting, who=name))

        return _in_thread(report)

    threads = [reporter("a"), reporter("b")]
    for thread in threads:
        thread.join(10.0)
    assert not any(thread.is_alive() for thread in threads)
    assert [r["training_iteration"] for r in got] == [1, 2]
    assert [r["iterations_since_restore"] for r in got] == [1, 2] and sorted(r["who"] for r in got) == ["a", "b"]
    assert session.iteration == 2


class _StandInClock:
    """Stands in for the session module's ``time``: ``time()`` returns ``now``, which the test sets. ``on_next_read``
    runs a function once, in the thread that reads the clock next, before the reading is taken."""

    def __init__(self) -> None:
        self.now = 0.0
        self.on_next_read: dict[int, object] = {}
        self.readers: list[int] = []  # the threads that read it, in order

    def time(self) -> float:
        hook = self.on_next_read.pop(threading.get_ident(), None)
        if hook is not None:
            hook()
        self.readers.append(threading.get_ident())
        return self.now


def _until(condition) -> None:
    deadline = time.time() + 5.0
    while not condition():
        assert time.time() < deadline
        time.sleep(0.01)


def _timed_session(tmp_path, monkeypatch, **kwargs):
    """A session whose clock is a :class:`_StandInClock` (at 0 when the trial starts), with a lane turn that
    threads share (the host's stand-in), so that a driver call and a step take the trial away from its turn."""
    clock = _StandInClock()
    monkeypatch.setattr(fluidsalus.session, "time", clock)
    session, got = _session(tmp_path, turns=_HostTurns(), **kwargs)
    session.start_clock()
    return session, got, clock


def test_a_threads_return_from_the_driver_and_anothers_report_at_once_lose_neither_update(tmp_path, monkeypatch):
    """Thread A comes back from a driver call (away from 1 to 4) just as thread B reports (at 2): A took its time
    away off the iteration clock unlocked, reading the clock's start before B's report reset it and writing it after,
    so B's reset was lost and the next iteration counted time already counted (``[2, 3]``: 5 s of iterations in
    6 s with 3 s away). Now each update is one step: 1 s (A away from 1), then 2 s (from 2 to 6 less 2 s away)."""
    session, got, clock = _timed_session(tmp_path, monkeypatch)

    def b_reports_at_2() -> None:
        clock.now = 2.0
        reporter = _in_thread(lambda: session.report({"who": "b"}))
        reporter.join(5.0)
        assert not reporter.is_alive()
        clock.now = 4.0

    def driver(method, args, label):
        # A's next reading of the clock is the one that ends its time away: B reports just before it is taken.
        clock.on_next_read[threading.get_ident()] = b_reports_at_2
        return "answer"

    session._caller = driver
    clock.now = 1.0
    assert session.call("ask") == "answer"
    clock.now = 6.0
    session.report({"who": "b"})
    assert [r["time_this_iter_s"] for r in got] == [1.0, 2.0]
    assert [r["time_total_s"] for r in got] == [1.0, 3.0]


def test_a_report_while_another_thread_waits_for_the_driver_counts_no_time_twice_or_below_zero(tmp_path, monkeypatch):
    """Thread A waits for the driver from 1 to 10; thread B reports at 5 and at 12. The trial was away from its turn
    from 1 to 10, once: B's iterations are 1 s and 2 s. A's whole absence came off the iteration after B's report
    (``time_this_iter_s`` -7, or 5 then 2 s: time away counted in the first)."""
    session, got, clock = _timed_session(tmp_path, monkeypatch)
    answer = threading.Event()

    def driver(method, args, label):
        assert answer.wait(5.0)
        return "answer"

    session._caller = driver
    clock.now = 1.0
    caller = _in_thread(lambda: session.call("ask"))
    _until(lambda: caller.ident in clock.readers)  # (A has stepped away, reading the clock)
    clock.now = 5.0
    reporter = _in_thread(lambda: session.report({"who": "b"}))  # (its boundary waits for A's return)
    _until(lambda: bool(got))
    clock.now = 10.0
    answer.set()
    caller.join(5.0)
    reporter.join(5.0)
    assert not caller.is_alive() and not reporter.is_alive()
    clock.now = 12.0
    session.report({"who": "b"})
    assert [r["time_this_iter_s"] for r in got] == [1.0, 2.0]
    assert got[-1]["time_total_s"] == 3.0


def test_threads_away_at_once_take_that_time_off_the_iteration_once(tmp_path, monkeypatch):
    """Threads A and C of a trial wait for the driver at once (A from 1, C from 3; both back at 8: A's call is
    answered at 6 but A waits for the trial's turn, which C, the last one back, takes at 8): the trial was away from
    1 to 8, so B's report at 10 is an iteration of 3 s. Each thread took its own time away off it: 7 + 5 s, and the
    iteration came out at -2 s."""
    session, got, clock = _timed_session(tmp_path, monkeypatch)
    answers = {"a": threading.Event(), "c": threading.Event()}
    session._caller = lambda method, args, label: answers[method].wait(5.0)

    def away(who: str, at: float) -> threading.Thread:
        clock.now = at
        thread = _in_thread(lambda: session.call(who))
        _until(lambda: thread.ident in clock.readers)  # (it has stepped away, reading the clock)
        return thread

    a = away("a", 1.0)
    c = away("c", 3.0)
    clock.now = 6.0
    answers["a"].set()
    assert _still_waits(a)  # (for the turn, which the last one back takes)
    clock.now = 8.0
    answers["c"].set()
    a.join(5.0)
    c.join(5.0)
    assert not a.is_alive() and not c.is_alive()
    clock.now = 10.0
    session.report({"who": "b"})
    assert [r["time_this_iter_s"] for r in got] == [3.0]


@pytest.mark.parametrize("first", ["call back", "step back"])
def test_a_step_that_waits_for_a_calls_return_takes_that_time_off_once_whichever_is_told_first(
        tmp_path, monkeypatch, first):
    """Thread A waits for the driver from 1 to 8; thread S reaches a ``fluidsalus.step()`` at 3, which waits for
    the trial's turn, taken back at 8 by A. The trial was away from 1 to 8, once: the report at 10 is an iteration
    of 3 s. A step tells the clock of its wait after the fact: told after A's return, which had taken the spell
    off already, it took its own part of it off again (5 s more: ``time_this_iter_s`` came out at 0, -2 before
    the clock had a lock)."""
    session, got, clock = _timed_session(tmp_path, monkeypatch)
    answer = threading.Event()
    session._caller = lambda method, args, label: answer.wait(5.0)
    clock.now = 1.0
    a = _in_thread(lambda: session.call("ask"))
    _until(lambda: a.ident in clock.readers)  # (A has stepped away, reading the clock)
    clock.now = 3.0
    s = _in_thread(session.step)
    _until(lambda: s.ident in clock.readers)  # (S's step began, and waits for the trial's turn)
    assert _still_waits(s)
    clock.now = 8.0
    # The one told second reads the clock once the other has ended (so after it told the clock).
    later, earlier = (s, a) if first == "call back" else (a, s)
    clock.on_next_read[later.ident] = lambda: earlier.join(5.0)
    answer.set()
    a.join(5.0)
    s.join(5.0)
    assert not a.is_alive() and not s.is_alive()
    clock.now = 10.0
    session.report({"who": "b"})
    assert [r["time_this_iter_s"] for r in got] == [3.0]


def _who_session(tmp_path, **settings) -> tuple[TrialSession, list[str]]:
    """A trial session whose sink logs each result as ``<who><training_iteration>``, and that log."""
    log: list[str] = []
    ctx = TrialContext("t0", "f_t0", "exp", str(tmp_path / "t0"))
    return TrialSession(
        ctx, lambda result, paused, prompt: log.append(f"{result['who']}{result['training_iteration']}"),
        **settings), log


def _reporter(session: TrialSession, outcomes: dict[str, str], who: str) -> threading.Thread:
    """A thread that reports ``{"who": who}`` once and notes in ``outcomes`` whether it returned or was stopped."""
    def report() -> None:
        try:
            session.report({"who": who})
            outcomes[who] = "returned"
        except StopTrial:
            outcomes[who] = "stopped"

    return _in_thread(report)


@pytest.mark.parametrize("stops", [True, False], ids=["stopped", "goes on"])
@pytest.mark.parametrize("waits_for", ["pause", "verdict"])
def test_a_report_while_another_threads_result_waits_for_its_decision_waits_for_it(tmp_path, waits_for, stops):
    """Thread A's result reaches the trial's budget (a rung: it pauses) or waits for the searcher's verdict on it;
    thread B reports meanwhile. B's result was delivered at once: past the budget the planner paused the trial at,
    or after the result the driver stopped the trial at. Under Ray 2.60 B's report waits for the next ``train()``
    call, which follows the scheduler's decision on A's result, and a stop or pause there ends the actor and drops
    B's result (SD: /work/scratch_h233/sbs). Here B's report waits for the decision: a stop drops it and stops B
    as a report of a stopped trial; a trial that goes on takes it next (iteration 2)."""
    answer = threading.Event()
    session, log = _who_session(tmp_path, **({"budget": 1} if waits_for == "pause" else {"verdict_from": 1}))

    def driver(method, args, label):  # the searcher's verdict, once the test gives it
        log.append(f"verdict asked on {args[0]}")
        if args[0] == 1:
            assert answer.wait(5.0)
            return stops
        return False

    session._caller = driver
    outcomes: dict[str, str] = {}
    a = _reporter(session, outcomes, "a")
    _until(lambda: session._pausing if waits_for == "pause" else "verdict asked on 1" in log)
    b = _reporter(session, outcomes, "b")
    assert _still_waits(b) and log[0] == "a1" and "b2" not in log  # (delivered at once, before)
    log.append("decided")
    if waits_for == "verdict":
        answer.set()
    elif stops:
        session.request_stop()
    else:
        session.resume(None)
    a.join(5.0)
    b.join(5.0)
    assert not a.is_alive() and not b.is_alive()
    if stops:
        assert outcomes == {"a": "stopped", "b": "stopped"} and "b2" not in log and session.iteration == 1
    else:
        assert outcomes == {"a": "returned", "b": "returned"} and "decided" in log[:log.index("b2")]


def test_a_report_behind_a_verdict_wait_the_hosts_shutdown_ends_is_dropped(tmp_path):
    """Thread A waits for the verdict on its result when the device host shuts down (the run's end, Ctrl-C): the
    host's ``shutdown`` stops the trial and answers the calls waiting with a ``StopTrial``. Thread B's report, which
    waited for A's, was then taken and delivered (``done=True``, a result past the trial's end) as that
    ``StopTrial`` did not mark the trial stopped; it is dropped now, as behind any other stop."""
    answer = threading.Event()
    session, log = _who_session(tmp_path, verdict_from=1)

    def driver(method, args, label):  # (gpu.host.DeviceHost._call once shutdown answered it)
        log.append("verdict asked")
        assert answer.wait(5.0)
        raise StopTrial()

    session._caller = driver
    outcomes: dict[str, str] = {}
    a = _reporter(session, outcomes, "a")
    _until(lambda: "verdict asked" in log)
    b = _reporter(session, outcomes, "b")
    assert _still_waits(b)
    session.request_stop(no_verdict=True)  # (DeviceHost.shutdown, before it answers the calls)
    answer.set()
    a.join(5.0)
    b.join(5.0)
    assert not a.is_alive() and not b.is_alive()
    assert outcomes == {"a": "stopped", "b": "stopped"} and log == ["a1", "verdict asked"] and session.stopped
