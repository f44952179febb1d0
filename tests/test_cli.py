"""The ``fluidsalus`` console script: ``ls`` and ``run``, and exit code 2 with one line for bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import fluidsalus
from fluidsalus.cli import DESCRIPTION, EXIT_USAGE, main


def _objective(config):
    for i in range(3):
        fluidsalus.report({"acc": config["x"] * (i + 1)})


@pytest.mark.usefixtures("ray_cluster")
def test_ls_lists_experiments_with_status_counts_best_and_duration(storage, capsys):
    fluidsalus.run(_objective, {"x": fluidsalus.grid_search([0.1, 0.3])}, metric="acc", mode="max",
                   storage_path=storage, name="first", verbose=0)
    os.makedirs(os.path.join(storage, "not_an_experiment"))
    assert main(["ls", storage]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["EXPERIMENT", "STATUS", "TRIALS", "BEST", "DURATION"]
    assert len(out) == 2  # the folder without a store is not listed
    row = out[1]
    assert row.startswith("first") and "FINISHED" in row and "2 (2 terminated)" in row
    assert "acc=0.9" in row and row.rstrip().endswith("s")
    # An experiment's own folder lists that experiment (it said "no experiments").
    assert main(["ls", os.path.join(storage, "first")]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [row]


def test_a_running_experiment_whose_driver_was_killed_shows_as_driver_gone(tmp_path, capsys):
    """A driver SIGKILLed mid-run leaves its experiment RUNNING in the store: ``ls`` and ``inspect`` showed it
    as running for ever. Its lock file names a process that no longer exists: they say so, and how to go on."""
    import json
    import re
    import signal
    import textwrap

    from fluidsalus.inspect import DRIVER_GONE

    exp = tmp_path / "killed"
    script = textwrap.dedent(
        f"""
        import time
        from fluidsalus.store import DriverLock, ExperimentStore
        store = ExperimentStore.create({str(exp)!r}, "killed", {{}}, "acc", "max")
        lock = DriverLock.acquire(store.experiment_dir)
        store.add_trials([("t0", 0, {{}}), ("t1", 1, {{}})])
        store.update_trial("t0", status="RUNNING")
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": path})
    try:
        assert proc.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
        assert main(["ls", str(tmp_path)]) == 0
        (row,) = capsys.readouterr().out.splitlines()[1:]
        assert re.split(r"\s{2,}", row)[:3] == ["killed", "RUNNING", "2 (1 running, 1 waiting)"]  # its driver lives
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert main(["ls", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.split(r"\s{2,}", out.splitlines()[1])[:3] == ["killed", DRIVER_GONE, "2 (2 unfinished)"]
    assert "resume=True" in out  # (its trials run no more: a resume continues them)
    assert main(["inspect", str(exp)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"experiment killed ({DRIVER_GONE}") and "2 unfinished" in out and "resume=True" in out
    assert main(["inspect", str(exp), "--json"]) == 0
    experiment = json.loads(capsys.readouterr().out)["experiment"]
    assert experiment["status"] == "RUNNING" and experiment["driver_gone"] is True  # (the stored status stays)


def test_python_dash_m_fluidsalus_is_the_command_line(tmp_path):
    """Without the console script on PATH (a checkout not installed): it said "'fluidsalus' is a package and cannot
    be directly executed"."""
    path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "fluidsalus", "ls", str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path}, timeout=120)
    assert done.returncode == 0 and "no experiments" in done.stdout, done.stderr
    done = subprocess.run([sys.executable, "-m", "fluidsalus", "ls", str(tmp_path / "nope")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": path}, timeout=120)
    assert done.returncode == EXIT_USAGE and done.stderr.startswith("fluidsalus: ")


def test_version_prints_the_packages_version(capsys):
    """There was no ``fluidsalus --version`` (a helper's install check)."""
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"fluidsalus {fluidsalus.__version__}\n"


def test_ls_on_a_missing_folder_exits_2_with_one_line(tmp_path, capsys):
    assert main(["ls", str(tmp_path / "nope")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a folder" in err


def test_ls_before_the_first_run_lists_nothing(tmp_path, capsys, monkeypatch):
    """The storage path that no run has made yet is no usage error (it exited 2: "is not a folder")."""
    monkeypatch.setenv("FLUIDSALUS_STORAGE_PATH", str(tmp_path / "not_yet"))
    monkeypatch.setenv("RAY_STORAGE", str(tmp_path / "nor_this"))
    assert main(["ls"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"no experiments in {tmp_path / 'not_yet'} (") and out.count("\n") == 1
    assert f", nor in {tmp_path / 'nor_this'} (" in out and out.count("; no run has written there yet)") == 2


def test_ls_of_an_empty_storage_path_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    """``fluidsalus ls ""`` listed the default folder, as if no folder was given (h83's N1)."""
    monkeypatch.setenv("FLUIDSALUS_STORAGE_PATH", str(tmp_path))
    assert main(["ls", ""]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "ls: STORAGE_PATH is empty" in captured.err


def test_ls_empty_folder(tmp_path, capsys):
    assert main(["ls", str(tmp_path)]) == 0
    assert "no experiments" in capsys.readouterr().out


def test_ls_names_an_unreadable_store_under_the_table(tmp_path, capsys):
    """Its whole error stood in the BEST column, which made the table as wide as the error (a helper's audit)."""
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "experiment.db").write_bytes(b"not a database at all" * 10)
    assert main(["ls", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table, _, below = out.partition("\nunreadable:\n")
    assert table.splitlines()[1].split() == ["broken", "UNREADABLE", "-", "-", "-"]
    assert below.startswith("  broken: ") and len(below.strip().splitlines()) == 1



#: SQLite's page size of a store fluidsalus creates (its default; the first page holds the header).
_PAGE_BYTES = 4096


def _store_damaged_at(folder, damage: str) -> str:
    """A finished experiment's store in ``folder`` whose header page is intact and whose ``trials`` table is
    damaged: its page garbled (a torn write, a bad sector), or the table dropped by another tool."""
    import sqlite3

    from fluidsalus.store import DB_FILENAME, ExperimentStore

    store = ExperimentStore.create(str(folder), folder.name, {}, "acc", "max")
    store.add_trials([(f"t{i}", i, {"x": i}) for i in range(3)])
    store.set_experiment(status="FINISHED")
    store.close()
    db = os.path.join(str(folder), DB_FILENAME)
    with sqlite3.connect(db) as conn:
        if damage == "dropped":
            conn.execute("DROP TABLE trials")
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'trials'").fetchone() or (0,)
    conn.close()
    if damage == "garbled":
        data = bytearray(open(db, "rb").read())
        for i in range((root - 1) * _PAGE_BYTES, root * _PAGE_BYTES, 2):
            data[i] ^= 0xA5
        open(db, "wb").write(bytes(data))
    return db


@pytest.mark.parametrize(("damage", "reason"), [("garbled", r"is damaged \(database disk image is malformed\)"),
                                                ("dropped", r"cannot be read \(no such table: trials\)")])
def test_a_store_damaged_past_its_header_is_named_by_ls_and_by_every_reader(tmp_path, capsys, damage, reason):
    """``ls`` ended with SQLite's traceback for the whole folder, and the readers raised SQLite's bare error,
    which named neither the store nor what was wrong (h83's N6)."""
    import re

    from fluidsalus.errors import StoreError
    from fluidsalus.result import ResultGrid
    from fluidsalus.store import ExperimentStore
    from fluidsalus.tune import ExperimentAnalysis

    (tmp_path / "good").mkdir()
    ExperimentStore.create(str(tmp_path / "good"), "good", {}, "acc", "max").close()
    db = _store_damaged_at(tmp_path / "damaged", damage)
    assert main(["ls", str(tmp_path)]) == 0
    table, _, below = capsys.readouterr().out.partition("\nunreadable:\n")
    assert [line.split()[:2] for line in table.splitlines()[1:]] == [["damaged", "UNREADABLE"], ["good", "RUNNING"]]
    assert re.fullmatch(rf"  damaged: the experiment store {re.escape(repr(db))} {reason}\n", below)
    for read in (ResultGrid.read, ExperimentAnalysis, lambda path: ExperimentStore.open(path).trials()):
        with pytest.raises(StoreError, match=rf"the experiment store {re.escape(repr(db))} {reason}"):
            read(str(tmp_path / "damaged"))


def test_output_to_a_reader_that_went_away_ends_quietly(tmp_path):
    """``fluidsalus ls | head``: once ``head`` has read its lines and gone, writing fails with EPIPE. That printed
    a ``BrokenPipeError`` traceback (and Python's "Exception ignored" at exit); now the command ends at once, with
    no output on stderr and a shell's exit status for SIGPIPE."""
    from fluidsalus.cli import EXIT_BROKEN_PIPE

    script = (
        "import os, sys\n"
        "from fluidsalus.cli import main\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)  # stdout: a pipe nobody reads any more\n"
        f"sys.exit(main(['ls', {str(tmp_path)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (EXIT_BROKEN_PIPE, "")


def test_run_unknown_target_exits_2_and_names_examples(capsys):
    assert main(["run", "no_such_example_or_module"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "is not an example, a .py file or an importable module" in err and "quickstart" in err
    assert main(["run"]) == EXIT_USAGE  # (argparse said "required: target, args": args is optional)
    assert capsys.readouterr().err == ("fluidsalus: run: name what to run: an example (quickstart), "
                                       "path/to/script.py, or package.module\n")


def test_run_a_script_whose_fluidsalus_input_is_bad_says_so_in_one_line(tmp_path, capsys):
    """`fluidsalus run quickstart --name <an existing one>` ended with the ConfigError's traceback (a helper's
    check): a ConfigError out of the script is one line and exit 2, as the CLI's own errors."""
    script = tmp_path / "bad.py"
    script.write_text("from fluidsalus.errors import ConfigError\n"
                      "raise ConfigError(\"name: an experiment named 'x' already exists\")\n")
    assert main(["run", str(script)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == "fluidsalus: run: name: an experiment named 'x' already exists\n"


def test_run_a_folder_by_its_main_and_refuses_one_without(tmp_path, capsys):
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "__main__.py").write_text("import sys\nprint('ran', sys.argv[1:])\n")
    for target in (str(folder), str(folder) + os.sep):  # "no such file" for the second
        out = subprocess.run([sys.executable, "-m", "fluidsalus.cli", "run", target, "-k"],
                             capture_output=True, text=True, check=True)
        assert out.stdout == "ran ['-k']\n"
    (tmp_path / "empty").mkdir()
    assert main(["run", str(tmp_path / "empty")]) == EXIT_USAGE
    assert "is a folder without a __main__.py" in capsys.readouterr().err


def test_run_of_a_package_without_main_or_a_file_that_is_not_python_is_one_line(tmp_path, capsys):
    """Both ended in a traceback (runpy's ImportError, the file's SyntaxError)."""
    folder = tmp_path / "plain_folder"
    folder.mkdir()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:  # (a bare folder name in the working directory was "a package without a __main__ module")
        assert main(["run", "plain_folder"]) == EXIT_USAGE
    finally:
        os.chdir(cwd)
    assert capsys.readouterr().err == ("fluidsalus: run: 'plain_folder' is a folder without a __main__.py; name a "
                                       ".py file in it\n")
    assert main(["run", "fluidsalus.tune"]) == EXIT_USAGE
    assert capsys.readouterr().err == ("fluidsalus: run: 'fluidsalus.tune' is a package without a __main__ module; "
                                       "name one of its modules (package.module)\n")
    text = tmp_path / "notes.txt"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert main(["run", str(text)]) == EXIT_USAGE
    assert capsys.readouterr().err == f"fluidsalus: run: {str(text)!r} is not a Python file: invalid syntax (line 1)\n"
    # A Python file with a typo, or a module the script imports with one, keeps Python's report: it shows where.
    typo = tmp_path / "typo.py"
    typo.write_text("print(\n")
    with pytest.raises(SyntaxError):
        main(["run", str(typo)])
    (tmp_path / "broken_mod.py").write_text("def f(:\n")
    script = tmp_path / "uses.py"
    script.write_text("import broken_mod\n")
    with pytest.raises(SyntaxError):
        main(["run", str(script)])


def test_run_a_script_passes_arguments(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\n")
    out = subprocess.run([sys.executable, "-m", "fluidsalus.cli", "run", str(script), "--x", "1"],
                         capture_output=True, text=True, check=True)
    assert "args ['--x', '1']" in out.stdout


def test_an_unknown_option_is_named_by_its_subcommands_usage_and_help_is_plain_text(capsys):
    """``inspect X --bogus`` printed the top-level usage, which lists no option of ``inspect``; ``--help`` showed the
    module docstring's first line with its reST markup (a helper's audit)."""
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", "somewhere", "--bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: fluidsalus inspect [-h] [--json]") and "unrecognized arguments: --bogus" in err
    # one given before the subcommand is the top level's (`fluidsalus --bogus ls` named ls's usage)
    with pytest.raises(SystemExit):
        main(["--bogus", "ls"])
    err = capsys.readouterr().err
    assert err.startswith("usage: fluidsalus [-h]") and "unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert DESCRIPTION.split()[0] in out and "``" not in out


# ------------------------------------------------------------------------- the default places, without Ray


def _stored(root, name, statuses=("TERMINATED",), finished=True):
    """An experiment ``root/name`` with a trial of each of ``statuses`` (acc 0.5), finished or running."""
    from fluidsalus.store import ExperimentStore

    store = ExperimentStore.create(os.path.join(root, name), name, {}, "acc", "max")
    store.add_trials([(f"t{i}", i, {"x": i}) for i in range(len(statuses))])
    created = store.experiment()["created_at"]
    for i, status in enumerate(statuses):
        store.update_trial(f"t{i}", status=status, last_result={"acc": 0.5}, started_at=created)
    if finished:
        store.set_experiment(status="FINISHED", finished_at=store.experiment()["created_at"] + 1.0)
    return store


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home folder of its own, with neither storage variable set: the default places are ``home/...``."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FLUIDSALUS_STORAGE_PATH", raising=False)
    monkeypatch.delenv("RAY_STORAGE", raising=False)
    return tmp_path / "home"


def test_the_tune_front_ends_default_storage_path_is_a_place_ls_lists(home, monkeypatch):
    """``fluidsalus ls`` and ``inspect NAME`` take the Tune front end's default from the code ``RunConfig`` uses:
    ``~/ray_results``, or ``$RAY_STORAGE`` (they knew only ``~/fluidsalus_results``)."""
    from fluidsalus import tune
    from fluidsalus.store import default_storage_paths

    assert [p for p, _ in default_storage_paths()] == [str(home / "fluidsalus_results"), str(home / "ray_results")]
    assert tune.RunConfig().storage_path == str(home / "ray_results")
    monkeypatch.setenv("RAY_STORAGE", str(home / "elsewhere"))
    with pytest.warns(UserWarning, match="RAY_STORAGE"):
        assert tune.RunConfig().storage_path == str(home / "elsewhere")
    assert tune.Experiment("exp", _objective).path == str(home / "elsewhere" / "exp")  # (it said ~/ray_results/exp)
    assert [p for p, _ in default_storage_paths()][1] == str(home / "elsewhere")
    monkeypatch.setenv("FLUIDSALUS_STORAGE_PATH", str(home / "elsewhere"))  # one folder named twice: listed once
    ((path, how),) = default_storage_paths()
    assert path == str(home / "elsewhere") and "$FLUIDSALUS_STORAGE_PATH" in how and "$RAY_STORAGE" in how


def test_ls_without_a_folder_lists_both_default_places_each_under_its_folder(home, capsys):
    """A Tune front-end run goes to ``~/ray_results``, as Ray's: ``fluidsalus ls`` said "no experiments in
    ~/fluidsalus_results (no run has written there yet)" (h134's F1). Each place that exists is listed under its
    name, its columns aligned with the other's."""
    assert main(["ls"]) == 0  # neither exists yet: the one line names both
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"no experiments in {home / 'fluidsalus_results'} (")
    assert f"nor in {home / 'ray_results'} (" in out and out.count("no run has written there yet") == 2
    _stored(str(home / "ray_results"), "hyperband_test").close()
    assert main(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()  # (the place no run made is left out)
    assert out[0].startswith(f"{home / 'ray_results'} (fluidsalus.tune's default: $RAY_STORAGE or ")
    assert out[1].split() == ["EXPERIMENT", "STATUS", "TRIALS", "BEST", "DURATION"] and len(out) == 3
    assert out[2].split()[:2] == ["hyperband_test", "FINISHED"]
    _stored(str(home / "fluidsalus_results"), "a_much_longer_experiment_name").close()
    assert main(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{home / 'fluidsalus_results'} (fluidsalus.run's and fluidsalus.optuna's default: ")
    assert out[2].startswith("a_much_longer_experiment_name  FINISHED") and out[3] == ""
    assert out[4].startswith(f"{home / 'ray_results'} (") and len(out) == 7
    assert out[6].index("FINISHED") == out[2].index("FINISHED")  # one width for both tables
    (home / "fluidsalus_results" / "a_much_longer_experiment_name" / "experiment.db").unlink()
    assert main(["ls"]) == 0  # a place that exists with nothing in it says so
    assert capsys.readouterr().out.splitlines()[0].endswith("~/fluidsalus_results): no experiments")


def test_inspect_finds_a_bare_name_in_either_default_place_and_refuses_one_in_both(home, tmp_path, capsys,
                                                                                     monkeypatch):
    """``fluidsalus inspect hyperband_test`` after a Tune front-end run said it was "not a fluidsalus experiment",
    naming only ``~/fluidsalus_results`` (h134's F1)."""
    monkeypatch.chdir(tmp_path)
    _stored(str(home / "ray_results"), "hyperband_test").close()
    _stored(str(home / "fluidsalus_results"), "sweep").close()
    for name in ("hyperband_test", "sweep"):
        assert main(["inspect", name]) == 0
        assert capsys.readouterr().out.startswith(f"experiment {name} (FINISHED")
    assert main(["inspect", "nope"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no such folder in {str(tmp_path)!r}" in err
    assert f"{str(home / 'fluidsalus_results')!r} (" in err and f"{str(home / 'ray_results')!r} (" in err
    _stored(str(home / "ray_results"), "sweep").close()
    assert main(["inspect", "sweep"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "more than one storage path" in err and err.count("\n") == 1
    assert str(home / "fluidsalus_results" / "sweep") in err and str(home / "ray_results" / "sweep") in err


def test_ls_says_waiting_as_inspect_and_the_progress_line_do(tmp_path, capsys):
    """``ls`` said "1 pending" where ``inspect`` and the progress line say "1 waiting" (h134's F8); a paused
    trial waits too, as they count it."""
    from fluidsalus.store import DriverLock

    store = _stored(str(tmp_path), "live", ("RUNNING", "PENDING", "PAUSED", "TERMINATED"), finished=False)
    lock = DriverLock.acquire(store.experiment_dir)  # (its driver lives: this process)
    store.add_results([("t0", 0, 1, store.experiment()["created_at"] + 1.0, {"acc": 0.5})])
    try:
        assert main(["ls", str(tmp_path)]) == 0
        row = capsys.readouterr().out.splitlines()[1]
        assert "4 (1 running, 1 terminated, 2 waiting, 1 of them paused)" in row and "pending" not in row
        assert main(["inspect", store.experiment_dir]) == 0  # (the header counts them in ls's words)
        assert "4 trials (1 running, 1 terminated, 2 waiting, 1 of them paused)" in capsys.readouterr().out
    finally:
        lock.release()
        store.close()


def test_ls_duration_of_a_resumed_run_leaves_out_the_time_it_sat_interrupted(tmp_path, capsys):
    """A run interrupted after 4.8 s and resumed for 32.7 s showed 57.4 s, its creation to its end (h134's F8):
    DURATION sums its sessions, each from its creation or resume to the last thing it recorded."""
    store = _stored(str(tmp_path), "resumed", finished=False)
    t0 = store.experiment()["created_at"]
    store.add_events([(t0 + 1.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
                      (t0 + 4.0, "device_stop", None, "cpu:0", None),  # interrupted here
                      (t0 + 100.0, "resume", None, None, {"unfinished": 1}),
                      (t0 + 101.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1})])
    store.add_results([("t0", 0, 1, t0 + 3.0, {"acc": 0.5}), ("t0", 0, 2, t0 + 108.0, {"acc": 0.5})])
    store.set_experiment(status="FINISHED", finished_at=t0 + 110.0)
    assert store.sessions() == [(t0, t0 + 4.0), (t0 + 100.0, t0 + 110.0)]
    store.close()
    assert main(["ls", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("  14.0s (2 sessions)")


def test_inspect_plot_writes_the_formats_matplotlib_writes_by_their_suffix(tmp_path, capsys):
    """``--plot x.svg`` was refused ("is not a file name ending in .png", h134's F8): matplotlib writes svg and
    pdf too. A suffix it cannot write is refused with the ones it can."""
    pytest.importorskip("matplotlib")
    store = _stored(str(tmp_path), "exp", finished=False)
    t0 = store.experiment()["created_at"]
    store.add_events([(t0 + 1.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
                      (t0 + 1.5, "trial_start", "t0", "cpu:0", {"attempt": 0}),
                      (t0 + 1.5, "lane_open", None, "cpu:0", {"lane": 0, "capacity": 100}),
                      (t0 + 1.5, "lane_admit", "t0", "cpu:0", {"detail": [0, 50, 50], "attempt": 0})])
    store.add_results([("t0", 0, 1, t0 + 2.0, {"acc": 0.5, "time_this_iter_s": 0.5})])
    store.set_experiment(status="FINISHED", finished_at=t0 + 3.0)
    store.close()
    for name, head in (("plot.svg", b"<?xml"), ("plot.pdf", b"%PDF"), ("plot.PNG", b"\x89PNG")):
        assert main(["inspect", store.experiment_dir, "--plot", str(tmp_path / name)]) == 0
        assert capsys.readouterr().out.endswith(f"plot written to {tmp_path / name}\n")
        assert (tmp_path / name).read_bytes().startswith(head)
    for name in ("plot.txt", "plot", "plot.pgf"):  # (pgf needs LaTeX installed)
        assert main(["inspect", store.experiment_dir, "--plot", str(tmp_path / name)]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a file name ending in a suffix matplotlib writes: .png, " in err
        allowed = err.split("matplotlib writes: ")[1]
        assert ".pdf" in allowed and ".svg" in allowed and ".pgf" not in allowed and not (tmp_path / name).exists()


def test_inspect_plot_in_a_format_this_machine_cannot_write_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    """A suffix matplotlib knows but the installed Pillow cannot write (``.avif``, ``.webp`` with an old Pillow)
    ended in a traceback and exit 1."""
    pytest.importorskip("matplotlib")
    inspect_module = sys.modules["fluidsalus.inspect"]  # (the package's ``inspect`` is the function)

    def no_codec(self, path):
        raise KeyError("AVIF")

    monkeypatch.setattr(inspect_module.Report, "plot", no_codec)
    store = _stored(str(tmp_path), "exp")
    store.close()
    assert main(["inspect", store.experiment_dir, "--plot", str(tmp_path / "plot.png")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "in that format here (KeyError: 'AVIF'); write a .png, .pdf or .svg" in err


# ------------------------------------------------------------------------- ls and inspect say the same (h143)


def _header(capsys, folder) -> str:
    """The first line of ``fluidsalus inspect FOLDER``."""
    assert main(["inspect", folder]) == 0
    return capsys.readouterr().out.splitlines()[0]


def _ls_row(capsys, root, name) -> str:
    assert main(["ls", root]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"{name} "))


def test_ls_and_inspect_count_the_trials_in_one_vocabulary_live_and_after_the_run(tmp_path, capsys):
    """``ls`` said ``terminated``/``error`` where ``inspect``'s header said ``done``/``errored``; an Optuna study's
    failed trial was ``error`` while ``optimize`` ran and ``fail`` once it ended (h138's D6). Both now count in
    Ray Tune's words (Optuna's states for a study's trials), the same text live and after the run."""
    from fluidsalus.inspect import OPTUNA_SEARCHER, OPTUNA_TRIAL_EVENT
    from fluidsalus.store import DriverLock, ExperimentStore

    root = str(tmp_path)
    store = _stored(root, "plain", ("TERMINATED", "ERROR"))
    store.close()
    counts = "2 (1 error, 1 terminated)"
    assert counts in _ls_row(capsys, root, "plain")
    assert "): 2 trials (1 error, 1 terminated), 0 stopped by the search or a stop rule" in _header(
        capsys, store.experiment_dir)
    store = ExperimentStore.create(os.path.join(root, "study"), "study", {"searcher": OPTUNA_SEARCHER}, "v", "min")
    store.add_trials([(f"o{i}", i, {"x": i}) for i in range(3)])
    t0 = store.experiment()["created_at"]
    store.update_trial("o0", status="TERMINATED", started_at=t0,
                       last_result={"v": 1.0, "optuna_number": 0, "optuna_state": "COMPLETE"})
    store.update_trial("o1", status="ERROR", started_at=t0, error="ValueError: x",
                       last_result={"v": 2.0, "optuna_number": 1})  # (FAIL: the study's word comes at the end)
    store.update_trial("o2", status="RUNNING", started_at=t0, last_result={"v": 3.0, "optuna_number": 2})
    store.add_results([(f"o{i}", 0, 1, t0 + 1.0, {"v": float(i)}) for i in range(3)])
    lock = DriverLock.acquire(store.experiment_dir)  # (its driver lives: this process)
    try:
        live = "3 (1 complete, 1 fail, 1 running)"
        assert live in _ls_row(capsys, root, "study")
        assert _header(capsys, store.experiment_dir).endswith(f"): 3 trials {live[2:]}")
    finally:
        lock.release()
    store.update_trial("o2", status="TERMINATED", last_result={"v": 3.0, "optuna_number": 2, "optuna_state": "PRUNED"})
    store.add_events([(t0 + 2.0, OPTUNA_TRIAL_EVENT, tid, None, {"number": n, "state": state})
                      for tid, n, state in (("o0", 0, "COMPLETE"), ("o1", 1, "FAIL"), ("o2", 2, "PRUNED"))])
    store.set_experiment(status="FINISHED", finished_at=t0 + 2.0)
    store.close()
    ended = "3 (1 complete, 1 fail, 1 pruned)"
    assert ended in _ls_row(capsys, root, "study")
    assert _header(capsys, store.experiment_dir).endswith(f"): 3 trials {ended[2:]}")


def test_ls_says_how_many_folders_ray_tune_wrote_it_left_out(home, capsys):
    """``ls`` skipped the experiments Ray Tune wrote in ``~/ray_results`` without a word (h138's F1): a user
    thought their runs lost. Under the folder, one line says how many and where to read them."""
    ray_results = home / "ray_results"
    for name in ("ray_a", "ray_b"):
        (ray_results / name).mkdir(parents=True)
        (ray_results / name / "experiment_state-2026-11-30_16-00-00.json").write_text("{}")
    (ray_results / "not_an_experiment").mkdir()  # (neither fluidsalus's nor Ray's: not counted)
    said = "(2 folders Ray Tune wrote, not listed: fluidsalus lists the experiments it ran, from their store; read "
    assert main(["ls", str(ray_results)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"no experiments in {ray_results}",
                                                    said + "those with Ray's ExperimentAnalysis)"]
    assert main(["ls"]) == 0  # (no fluidsalus experiment in either default place)
    assert capsys.readouterr().out.splitlines()[1] == f"{ray_results}: {said}those with Ray's ExperimentAnalysis)"
    _stored(str(ray_results), "ours").close()
    assert main(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{ray_results} (") and out[2].startswith("ours ") and out[3].startswith(said)


def test_ls_of_an_experiment_folder_ray_tune_wrote_says_so(home, capsys):
    """``ls`` of Ray's own experiment folder said only "no experiments in ..." (h148's F7), where ``inspect`` of it
    names it as Ray's: ``ls`` says so too, and how to read it."""
    folder = home / "ray_results" / "ray_a"
    folder.mkdir(parents=True)
    (folder / "experiment_state-2026-11-30_16-00-00.json").write_text("{}")
    assert main(["ls", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{folder}: an experiment folder Ray Tune wrote (its experiment_state file is there), not listed: fluidsalus "
        "lists the experiments it ran, from their store; read this one with Ray's ExperimentAnalysis"]


def test_ls_without_a_folder_names_a_default_place_that_is_a_file_and_lists_the_other(home, capsys, monkeypatch):
    """A ``$RAY_STORAGE`` that names a file made ``ls`` exit 2 for everything, the experiments of
    ``~/fluidsalus_results`` unlisted (h138's D1)."""
    home.mkdir()
    (home / "afile").write_text("")
    monkeypatch.setenv("RAY_STORAGE", str(home / "afile"))
    assert main(["ls"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"no experiments in {home / 'fluidsalus_results'} (fluidsalus.run's and fluidsalus.optuna's default: "
        f"$FLUIDSALUS_STORAGE_PATH or ~/fluidsalus_results; no run has written there yet), nor in {home / 'afile'} "
        "(fluidsalus.tune's default: $RAY_STORAGE or ~/ray_results; not a folder, skipped)")
    _stored(str(home / "fluidsalus_results"), "sweep").close()
    assert main(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("sweep ") and out[-1] == (
        f"{home / 'afile'} (fluidsalus.tune's default: $RAY_STORAGE or ~/ray_results): not a folder, skipped")


def test_inspect_gives_a_resumed_runs_duration_as_ls_does(tmp_path, capsys):
    """The header and the plot's title gave a resumed run's creation to its end (110 s), where ``ls`` sums its
    sessions (14 s); the JSON keeps that wall time as ``duration_s`` (its schema's meaning) and adds ``ran_s``."""
    import json

    from fluidsalus.inspect import inspect, report_figure

    store = _stored(str(tmp_path), "resumed", finished=False)
    t0 = store.experiment()["created_at"]
    store.add_events([(t0 + 1.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1}),
                      (t0 + 4.0, "device_stop", None, "cpu:0", None),
                      (t0 + 100.0, "resume", None, None, {"unfinished": 1}),
                      (t0 + 101.0, "device_start", None, "cpu:0", {"kind": "cpu", "slots": 1})])
    store.add_results([("t0", 0, 1, t0 + 3.0, {"acc": 0.5}), ("t0", 0, 2, t0 + 108.0, {"acc": 0.5})])
    store.set_experiment(status="FINISHED", finished_at=t0 + 110.0)
    store.close()
    assert _ls_row(capsys, str(tmp_path), "resumed").endswith("  14.0s (2 sessions)")
    assert _header(capsys, store.experiment_dir).startswith("experiment resumed (FINISHED, 14.0s in 2 sessions): ")
    assert main(["inspect", store.experiment_dir, "--json"]) == 0
    experiment = json.loads(capsys.readouterr().out)["experiment"]
    assert (experiment["duration_s"], experiment["ran_s"], experiment["sessions"]) == (110.0, 14.0, 2)
    pytest.importorskip("matplotlib")
    assert report_figure(inspect(store.experiment_dir))._suptitle.get_text().startswith(
        "resumed (FINISHED, 14.0s in 2 sessions, 1 trial): ")


def test_ls_and_inspect_show_a_best_value_just_below_1_as_below_1(tmp_path, capsys):
    """``acc=1`` for 0.99999999 (6 significant digits) read as a perfect score; Ray prints 0.99999999."""
    store = _stored(str(tmp_path), "almost")
    store.update_trial("t0", last_result={"acc": 0.99999999})
    store.close()
    assert "acc=0.99999999" in _ls_row(capsys, str(tmp_path), "almost")
    assert main(["inspect", store.experiment_dir]) == 0
    assert "best trial: t0 acc=0.99999999 (max)" in capsys.readouterr().out


def test_ls_and_inspect_show_an_integer_best_in_full() -> None:
    """``inspect``'s best-trial line made the metric a float: ``score=1.15292e+18`` where ``ls``, the summary and
    the progress line give 1152921504606846977 (h163's F3)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        store = _stored(folder, "whole")
        store.update_trial("t0", last_result={"acc": 2**60 + 1})
        store.close()
        from fluidsalus.inspect import inspect

        best = inspect(store.experiment_dir).best
        assert best is not None and best.value == 2**60 + 1 and isinstance(best.value, int)


def test_ls_and_inspect_read_an_integer_best_too_large_for_a_float(tmp_path, capsys):
    """``math.isfinite`` of an int above ~1e308 raised ``OverflowError``: ``ls`` and ``inspect`` of an experiment
    whose best is one failed (h148's and h156's note). It is compared as Python's int and shown in full."""
    store = _stored(str(tmp_path), "huge", statuses=("TERMINATED", "TERMINATED"))
    store.update_trial("t1", last_result={"acc": 10**400})
    store.close()
    assert f"acc={10**400}" in _ls_row(capsys, str(tmp_path), "huge")
    assert main(["inspect", store.experiment_dir]) == 0
    assert f"best trial: t1 acc={10**400} (max)" in capsys.readouterr().out


def test_ls_shows_each_best_value_the_same_whatever_else_is_listed(tmp_path, capsys):
    """``ls``'s BEST column was formatted as one column (h182): an experiment's integer best read ``1234567`` listed
    alone and ``1.23457e+06`` beside another's float (h202's ``t2_ls_best.py``). Each value now reads as the run's
    summary and ``inspect`` show it (``format_metric``), whatever the other rows hold: an integer in full, a float in
    6 digits, one that would round onto a whole number it is not with its fraction."""
    expected = {"a_int": "acc=1234567", "b_float": "acc=0.123457", "c_almost": "acc=0.99999999"}
    acc = {"a_int": 1234567, "b_float": 0.123456789, "c_almost": 0.99999999}
    for name in expected:
        store = _stored(str(tmp_path), name)
        store.update_trial("t0", last_result={"acc": acc[name]})
        store.close()
        # (given an experiment's own folder, ls lists that one alone)
        assert _ls_row(capsys, store.experiment_dir, name).split()[-2] == expected[name]
    assert main(["ls", str(tmp_path)]) == 0
    best = {line.split()[0]: line.split()[-2] for line in capsys.readouterr().out.splitlines()[1:]}
    assert best == expected


def test_inspect_names_the_errored_and_the_best_trial_as_the_run_named_them(tmp_path, capsys):
    """``inspect``'s errored-trials list and best-trial line named trials by id (``5f029_00003``) where the run's
    lines, its errored-trials table and the ``fail_fast="raise"`` error name them ``train_5f029_00003`` (h167's
    note). They give the run's name now, with the id where the name does not hold it (it finds the folder)."""
    from fluidsalus.store import TRIAL_DIRNAME_EVENT

    store = _stored(str(tmp_path), "named", statuses=("TERMINATED", "ERROR", "ERROR"))
    store.update_trial("t1", error="ValueError: boom")
    store.update_trial("t2", error="ValueError: bang")
    t0 = store.experiment()["created_at"]
    store.add_events([(t0, TRIAL_DIRNAME_EVENT, "t0", None, {"dirname": "train_t0_0", "name": "train_t0"}),
                      (t0, TRIAL_DIRNAME_EVENT, "t1", None, {"dirname": "train_t1_1", "name": "lr=0.1"})])
    store.close()
    assert main(["inspect", store.experiment_dir]) == 0
    out = capsys.readouterr().out
    assert "errored trials (2):\n  lr=0.1 (t1): ValueError: boom\n  t2: ValueError: bang\n" in out
    assert "best trial: train_t0 acc=0.5 (max)" in out
