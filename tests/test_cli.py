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
        assert re.split(r"\s{2,}", row)[:3] == ["killed", "RUNNING", "2 (1 pending, 1 running)"]  # its driver lives
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
    assert main(["ls"]) == 0
    assert capsys.readouterr().out == f"no experiments in {tmp_path / 'not_yet'} (no run has written there yet)\n"


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
