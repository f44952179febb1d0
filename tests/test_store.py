"""The experiment store: schema, durability on a killed writer, and clear errors for bad files."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from fluidsalus.errors import StoreError
from fluidsalus.store import (
    DB_FILENAME,
    LOCK_FILENAME,
    READABLE_FROM,
    SCHEMA_VERSION,
    TRIAL_START_EVENT,
    DriverLock,
    EventRow,
    ExperimentStore,
    live_device_processes,
    loads,
)

#: sqlite3's default busy timeout, which a blocking checkpoint waited out.
BUSY_TIMEOUT_S = 5.0


def _new(tmp_path, name="exp"):
    return ExperimentStore.create(str(tmp_path / name), name, {"num_samples": 2}, "acc", "max")


@pytest.mark.parametrize("text", ['{"a": [1, 2.5, null, true], "b": {"c": "\\u00e9"}}', "7", '"x"', "null", "NaN",
                                  ' {"a": 1}', '{"a": 1} ', "1 2", "[1, 2", "", "\ufeff{}", "\t[]\n"])
def test_a_stored_json_text_decodes_as_json_loads_decodes_it(text: str) -> None:
    # (loads decodes what dumps wrote with the decoder's scanner alone, and gives anything else to json.loads)
    try:
        expected: object = ("value", json.loads(text))
    except ValueError as e:
        expected = ("error", type(e), str(e))
    try:
        got: object = ("value", loads(text))
    except ValueError as e:
        got = ("error", type(e), str(e))
    assert repr(got) == repr(expected)  # (repr: a NaN is equal to no NaN)
    if expected[0] == "value":  # (bytes too, which json.loads decodes)
        assert repr(loads(text.encode())) == repr(expected[1])


def test_create_writes_schema_and_experiment_row(tmp_path):
    store = _new(tmp_path)
    exp = store.experiment()
    assert exp["name"] == "exp" and exp["status"] == "RUNNING"
    assert exp["metric"] == "acc" and exp["mode"] == "max" and exp["spec"] == {"num_samples": 2}
    conn = sqlite3.connect(store.db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"experiment", "trials", "results", "events", "checkpoints"} <= tables


def test_round_trip_trials_results_events_checkpoints(tmp_path):
    store = _new(tmp_path)
    store.add_trials([("t0", 0, {"lr": 0.1}), ("t1", 1, {"lr": 0.2, "nested": {"a": 1}})], group_id="g")
    store.add_results([("t0", 0, 1, 1.0, {"acc": 0.5, "nan": float("nan")}), ("t0", 0, 2, 2.0, {"acc": 0.7})])
    store.add_results([("t0", 1, 2, 3.0, {"acc": 0.8})])  # iteration 2 redone in attempt 1
    store.add_events([(1.0, "trial_start", "t0", "cpu:0", {"attempt": 0})])
    store.add_checkpoint("t0", 2, "/x/checkpoint_000002", {"acc": 0.7})
    store.update_trial("t0", status="TERMINATED", last_result={"acc": 0.8}, last_iteration=2)
    trials = store.trials()
    assert [t.trial_id for t in trials] == ["t0", "t1"]
    assert trials[0].status == "TERMINATED" and trials[0].last_result == {"acc": 0.8}
    assert trials[1].config == {"lr": 0.2, "nested": {"a": 1}} and trials[1].group_id == "g"
    latest = store.results("t0")
    assert [(r.iteration, r.attempt, r.metrics["acc"]) for r in latest] == [(1, 0, 0.5), (2, 1, 0.8)]
    assert len(store.results("t0", latest_attempt_only=False)) == 3
    assert store.results("t0")[0].metrics["nan"] != store.results("t0")[0].metrics["nan"]  # NaN kept
    assert store.events("trial_start")[0].data == {"attempt": 0}
    assert store.checkpoints("t0")[0]["iteration"] == 2


def test_a_start_taken_back_leaves_the_trial_never_started_and_the_others_as_they_were(tmp_path):
    """A trial its device began only for it to find nothing to run (the Optuna front end's after a study.stop()):
    no started_at, no trial_start event; the other trials' starts stay."""
    store = _new(tmp_path)
    store.add_trials([("t0", 0, {}), ("t1", 1, {})])
    for trial_id in ("t0", "t1"):
        store.update_trial(trial_id, started_at=1.0)
    store.add_events([(1.0, TRIAL_START_EVENT, "t0", "cpu:0", {"attempt": 0}),
                      (1.0, TRIAL_START_EVENT, "t1", "cpu:1", {"attempt": 0}),
                      (2.0, "trial_end", "t0", "cpu:0", {"attempt": 0, "outcome": "stopped"})])
    store.take_back_start("t0")
    assert [(t.trial_id, t.started_at) for t in store.trials()] == [("t0", None), ("t1", 1.0)]
    assert [e.trial_id for e in store.events(TRIAL_START_EVENT)] == ["t1"]
    assert [e.trial_id for e in store.events("trial_end")] == ["t0"]


def test_a_trials_history_ends_where_its_last_attempt_ended(tmp_path):
    """A trial ran iterations 1-3 (a best score at 3), failed, was retried from its checkpoint of iteration 1 and
    ended at iteration 2: its history is 1 (attempt 0) and 2 (attempt 1). The dead attempt's iteration 3 stayed,
    and its score made the trial the best one while its last result said otherwise (a helper's run against Ray)."""
    store = _new(tmp_path)
    store.add_trials([("t0", 0, {}), ("t1", 1, {}), ("t2", 2, {})])
    store.add_results([("t0", 0, i, float(i), {"score": s}) for i, s in ((1, 10), (2, 20), (3, 100))])
    store.add_results([("t0", 1, 2, 5.0, {"score": 1})])
    # t1: an attempt that reported nothing, then one from scratch that reached iteration 1 only
    store.add_results([("t1", 0, i, float(i), {"score": i}) for i in (1, 2, 3)] + [("t1", 2, 1, 9.0, {"score": 7})])
    store.add_results([("t2", 0, i, float(i), {"score": i}) for i in (1, 2)])  # one attempt: as it was
    latest = [(r.trial_id, r.iteration, r.attempt, r.metrics["score"]) for r in store.results()]
    assert latest == [("t0", 1, 0, 10), ("t0", 2, 1, 1), ("t1", 1, 2, 7), ("t2", 1, 0, 1), ("t2", 2, 0, 2)]
    assert [(r.iteration, r.attempt) for r in store.results("t0")] == [(1, 0), (2, 1)]
    assert len(store.results(latest_attempt_only=False)) == 10  # (every row is kept)


def test_a_store_whose_folder_was_removed_is_written_back_by_its_next_transaction(tmp_path):
    """SQLite goes on writing a deleted file, which left nothing on disk: the next write puts every row back at the
    store's path first, records it, and goes on there."""
    import shutil

    store = _new(tmp_path)
    store.add_trials([("t0", 0, {"lr": 0.1})], group_id="g")
    store.add_results([("t0", 0, 1, 1.0, {"acc": 0.5})])
    shutil.rmtree(tmp_path / "exp")
    store.add_results([("t0", 0, 2, 2.0, {"acc": 0.7})])
    store.set_experiment(status="FINISHED")
    store.close()
    reader = ExperimentStore.open(str(tmp_path / "exp"), readonly=True)
    try:
        assert [r.iteration for r in reader.results("t0")] == [1, 2] and reader.experiment()["status"] == "FINISHED"
        assert [e.data for e in reader.events("store_restored")] == [{"reason": "file deleted"}]
    finally:
        reader.close()


def test_a_store_written_back_while_its_folder_is_still_being_removed_tries_again(tmp_path, monkeypatch):
    """The folder the write-back made was removed again by the removal still under way (a recursive removal from
    a trial's thread): the run failed on sqlite's "unable to open database file" (a full suite run, once)."""
    import shutil
    import sqlite3

    store = _new(tmp_path)
    store.add_trials([("t0", 0, {"lr": 0.1})], group_id="g")
    shutil.rmtree(tmp_path / "exp")
    real, removals = sqlite3.connect, []

    def connect(path, *args, **kwargs):
        if str(path).endswith(".restoring") and not removals:
            removals.append(path)
            shutil.rmtree(tmp_path / "exp")  # the removal's last step, after the write-back made the folder
        return real(path, *args, **kwargs)

    monkeypatch.setattr("fluidsalus.store.sqlite3.connect", connect)
    store.add_results([("t0", 0, 1, 1.0, {"acc": 0.5})])
    monkeypatch.undo()
    store.close()
    assert removals and [r.iteration for r in ExperimentStore.open(str(tmp_path / "exp")).results("t0")] == [1]


def test_numpy_values_are_stored_as_plain_numbers(tmp_path):
    np = pytest.importorskip("numpy")
    store = _new(tmp_path)
    store.add_trials([("t0", 0, {"x": 1})])
    store.add_results([("t0", 0, 1, 1.0, {"acc": np.float32(0.25), "n": np.int64(3), "v": np.arange(2)})])
    assert store.results("t0")[0].metrics == {"acc": 0.25, "n": 3, "v": [0, 1]}


def test_unknown_trial_field_is_refused(tmp_path):
    store = _new(tmp_path)
    store.add_trials([("t0", 0, {})])
    with pytest.raises(ValueError, match="unknown trial fields"):
        store.update_trial("t0", colour="red")
    with pytest.raises(ValueError, match="status must be one of"):
        store.update_trial("t0", status="DONE")


def test_failed_transaction_writes_nothing(tmp_path):
    store = _new(tmp_path)
    store.add_trials([("t0", 0, {})])
    with pytest.raises(RuntimeError), store.transaction():
        store.add_results([("t0", 0, 1, 1.0, {"acc": 1.0})])
        raise RuntimeError("boom")
    assert store.results() == []


def test_create_refuses_existing_store(tmp_path):
    _new(tmp_path).close()
    with pytest.raises(StoreError, match="already exists"):
        _new(tmp_path)


def test_a_create_that_loses_a_race_leaves_the_winners_store_alone(tmp_path, monkeypatch):
    """Two drivers created the same new experiment at once: the one whose check came before the other's create went
    on to write its schema into the other's database, failed on it ("table experiment already exists") and removed
    the other's files, mid-run (a helper's race of 14 pairs). The database file is now claimed atomically."""
    winner = _new(tmp_path)
    winner.add_trials([("t0", 0, {})])
    monkeypatch.setattr("fluidsalus.store.os.path.exists", lambda path: False)  # its check ran before the create
    with pytest.raises(StoreError, match="already exists"):
        _new(tmp_path)
    monkeypatch.undo()
    winner.add_results([("t0", 0, 1, 1.0, {"acc": 1.0})])
    assert [r.metrics["acc"] for r in winner.results()] == [1.0]
    winner.close()
    assert [t.trial_id for t in ExperimentStore.open(winner.db_path).trials()] == ["t0"]


def test_a_store_being_created_is_said_to_be_so_not_to_be_foreign(tmp_path):
    """A reader (ExperimentAnalysis, fluidsalus inspect) that opened a run's store while its driver created it was
    told the file "is not a fluidsalus experiment store" (a helper counted 3,386 such errors over 40 creates)."""
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "experiment.db").write_bytes(b"")  # claimed, nothing written yet
    with pytest.raises(StoreError, match="is empty: an experiment store that its driver is creating"):
        ExperimentStore.open(str(folder))
    import sqlite3

    conn = sqlite3.connect(str(folder / "experiment.db"))  # an SQLite header, no table yet
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="holds no tables yet: an experiment store that its driver is creating"):
        ExperimentStore.open(str(folder))
    conn = sqlite3.connect(str(folder / "experiment.db"))
    conn.execute("CREATE TABLE other (x)")  # someone else's database
    conn.close()
    with pytest.raises(StoreError, match="is an SQLite file but not a fluidsalus experiment store"):
        ExperimentStore.open(str(folder))


def test_an_abandoned_creation_is_an_old_file_with_no_experiment_in_it(tmp_path):
    import sqlite3

    from fluidsalus.store import ABANDONED_CREATE_S, abandoned_create

    later = time.time() + ABANDONED_CREATE_S + 1
    empty, header, store = tmp_path / "empty.db", tmp_path / "header.db", _new(tmp_path)
    empty.write_bytes(b"")
    conn = sqlite3.connect(str(header))
    conn.execute("PRAGMA journal_mode = WAL")  # what the create's first statement leaves: a header, no table
    conn.close()
    store.close()
    assert abandoned_create(str(empty), later) and abandoned_create(str(header), later)
    assert not abandoned_create(str(empty)) and not abandoned_create(str(header))  # recent: maybe under way
    assert not abandoned_create(store.db_path, later) and not abandoned_create(str(tmp_path / "none.db"), later)
    assert sorted(os.listdir(tmp_path / "exp")) == ["experiment.db"]  # it looked without creating -wal and -shm


def test_open_missing_not_sqlite_foreign_and_newer(tmp_path):
    with pytest.raises(StoreError, match="not a fluidsalus experiment"):
        ExperimentStore.open(str(tmp_path / "nothing"))
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / DB_FILENAME).write_text("hello, not a database")
    with pytest.raises(StoreError, match="not an SQLite file"):
        ExperimentStore.open(str(junk))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    sqlite3.connect(foreign / DB_FILENAME).execute("CREATE TABLE t(x)")
    with pytest.raises(StoreError, match="SQLite file but not a fluidsalus"):
        ExperimentStore.open(str(foreign))
    store = _new(tmp_path, "newer")
    store.close()
    conn = sqlite3.connect(os.path.join(tmp_path, "newer", DB_FILENAME))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer fluidsalus"):
        ExperimentStore.open(str(tmp_path / "newer"))


def _as_if_newer(db_path: str, readable_from: int | None) -> None:
    """Make a store look written by a later fluidsalus: one schema more, a column added, its readable_from set."""
    conn = sqlite3.connect(db_path)
    conn.execute("ALTER TABLE trials ADD COLUMN a_later_column TEXT")
    if readable_from is None:
        conn.execute("DROP TABLE store_info")
    else:
        conn.execute("UPDATE store_info SET value = ? WHERE key = 'readable_from'", (str(readable_from),))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("readable_from, readable", [
    (READABLE_FROM[SCHEMA_VERSION], True),  # a later schema that only adds: this version reads it
    (SCHEMA_VERSION + 1, False),  # one that says this version cannot
    (None, False),  # one that does not say
])
def test_a_later_schema_that_says_this_version_can_read_it_is_read_but_never_written(tmp_path, readable_from,
                                                                                    readable):
    """A newer store was refused even for reading (``fluidsalus ls``), though schema 3 only added a nullable
    column: now each store says the lowest schema that can read it (``store_info``), and a later fluidsalus
    that only adds tables or columns leaves this one able to read its stores (a review's finding at stop 45)."""
    store = _new(tmp_path, "later")
    store.add_trials([("t0", 0, {"x": 1})])
    store.close()
    db_path = os.path.join(tmp_path, "later", DB_FILENAME)
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT value FROM store_info").fetchall() == [(str(READABLE_FROM[SCHEMA_VERSION]),)]
    conn.close()
    _as_if_newer(db_path, readable_from)
    if readable:
        reader = ExperimentStore.open(str(tmp_path / "later"), readonly=True)
        assert [(t.trial_id, t.config) for t in reader.trials()] == [("t0", {"x": 1})]
        reader.close()
    else:
        with pytest.raises(StoreError, match=rf"store schema {SCHEMA_VERSION + 1}; this version reads schema "
                                             rf"{SCHEMA_VERSION} and older\)\. Upgrade fluidsalus"):
            ExperimentStore.open(str(tmp_path / "later"), readonly=True)
    with pytest.raises(StoreError, match="can read this store but not write it" if readable else "and older\\)"):
        ExperimentStore.open(str(tmp_path / "later"))


def test_a_store_of_this_schema_without_store_info_gets_it_when_opened_for_writing(tmp_path):
    """Schema-3 stores written before ``store_info`` existed get it at their next opening for writing."""
    _new(tmp_path, "before").close()
    db_path = os.path.join(tmp_path, "before", DB_FILENAME)
    conn = sqlite3.connect(db_path)
    conn.execute("DROP TABLE store_info")
    conn.commit()
    conn.close()
    ExperimentStore.open(str(tmp_path / "before"), readonly=True).close()  # a reader changes nothing
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'store_info'").fetchone() is None
    conn.close()
    ExperimentStore.open(str(tmp_path / "before")).close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT key, value FROM store_info").fetchall() == [
        ("readable_from", str(READABLE_FROM[SCHEMA_VERSION]))]
    conn.close()


def test_a_store_of_schema_1_is_read_as_it_is_and_brought_up_to_date_when_opened_for_writing(tmp_path):
    store = _new(tmp_path, "old")
    store.add_trials([("t0", 0, {"x": 1})])
    store.set_experiment(searcher_state='{"drawn":1}')
    store.close()
    conn = sqlite3.connect(os.path.join(tmp_path, "old", DB_FILENAME))
    conn.execute("DROP TABLE searcher_calls")  # what fluidsalus wrote before schema 2
    conn.execute("ALTER TABLE trials DROP COLUMN config_pickle")  # and before schema 3
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    reader = ExperimentStore.open(str(tmp_path / "old"), readonly=True)
    assert reader.searcher_calls() == [] and [t.trial_id for t in reader.trials()] == ["t0"]
    assert reader.configs() == {}
    reader.close()
    writer = ExperimentStore.open(str(tmp_path / "old"))
    writer.add_searcher_calls([("result", "t0", {"acc": 0.5})])
    assert writer.searcher_calls() == [("result", "t0", {"acc": 0.5})]
    writer.set_searcher_state('{"drawn":2}')  # the whole state replaces the calls logged before it
    assert writer.searcher_calls() == [] and writer.experiment()["searcher_state"] == '{"drawn":2}'
    assert [t.config for t in writer.trials()] == [{"x": 1}]
    writer.add_trials([("t1", 1, {"x": (1, 2)})])  # schema 3's column
    assert writer.configs() == {"t1": {"x": (1, 2)}}
    writer.close()
    conn = sqlite3.connect(os.path.join(tmp_path, "old", DB_FILENAME))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    conn.close()


def test_readonly_reader_sees_committed_rows_while_writer_is_open(tmp_path):
    writer = _new(tmp_path)
    writer.add_trials([("t0", 0, {})])
    writer.add_results([("t0", 0, 1, 1.0, {"acc": 0.5})])
    reader = ExperimentStore.open(str(tmp_path / "exp"), readonly=True)
    assert len(reader.results()) == 1
    writer.add_results([("t0", 0, 2, 2.0, {"acc": 0.6})])
    assert len(reader.results()) == 2
    with pytest.raises(StoreError, match="read-only"):
        reader.add_events([(1.0, "x", None, None, None)])


def test_the_database_file_alone_holds_every_row_once_the_writer_closed_before_a_reader(tmp_path):
    """A reader that closes after the writer kept the rows in ``experiment.db-wal`` (SQLite folds the log in at the
    last close only, and a read-only connection cannot): the Tune front end's callbacks left a 4 KiB
    ``experiment.db`` that, copied alone, was no store. The writer folds the log in as it closes, and
    :meth:`ExperimentStore.fold_log` removes the files the reader left."""
    import shutil

    writer = _new(tmp_path)
    writer.add_trials([("t0", 0, {})])
    writer.add_results([("t0", 0, 1, 1.0, {"acc": 0.5})])
    reader = ExperimentStore.open(str(tmp_path / "exp"), readonly=True)
    assert len(reader.results()) == 1
    writer.close()
    reader.close()
    db = tmp_path / "exp" / DB_FILENAME
    (tmp_path / "copy").mkdir()
    shutil.copy(db, tmp_path / "copy" / DB_FILENAME)  # the database file alone, as a user copies it
    with ExperimentStore.open(str(tmp_path / "copy"), readonly=True, immutable=True) as copy:
        assert [r.metrics["acc"] for r in copy.results()] == [0.5]
    assert os.path.exists(f"{db}-wal")  # (the reader, closing last, cannot remove the log)
    lock = DriverLock.acquire(str(tmp_path / "exp"))  # a driver runs it: fold_log leaves it alone
    ExperimentStore.fold_log(str(tmp_path / "exp"))
    assert os.path.exists(f"{db}-wal")
    lock.release()
    ExperimentStore.fold_log(str(tmp_path / "exp"))
    assert sorted(os.listdir(tmp_path / "exp")) == sorted([DB_FILENAME, LOCK_FILENAME])


def test_a_writer_closes_at_once_while_a_reader_is_in_the_middle_of_a_read(tmp_path):
    """A TRUNCATE checkpoint at close waited out SQLite's busy timeout (5 s) for a reader in the middle of a read,
    and held up other writers meanwhile (a review); the close's checkpoint waits for no one."""
    import time

    writer = _new(tmp_path)
    writer.add_trials([(f"t{i}", i, {}) for i in range(50)])
    reader = sqlite3.connect(writer.db_path, timeout=BUSY_TIMEOUT_S)
    rows = reader.execute("SELECT trial_id FROM trials")
    rows.fetchone()  # a read transaction stays open while the cursor has rows left
    started = time.monotonic()
    writer.close()
    assert time.monotonic() - started < BUSY_TIMEOUT_S / 2
    reader.close()


def test_every_committed_result_survives_a_killed_writer(tmp_path):
    """A writer process is SIGKILLed mid-stream: every result it committed (and then announced) is there."""
    exp = tmp_path / "killed"
    script = textwrap.dedent(
        f"""
        import sys, time
        from fluidsalus.store import ExperimentStore
        store = ExperimentStore.create({str(exp)!r}, "killed", {{}}, None, None)
        store.add_trials([("t0", 0, {{}})])
        i = 0
        while True:
            i += 1
            store.add_results([("t0", 0, i, time.time(), {{"i": i}})])
            print(i, flush=True)  # announced only after COMMIT returned
        """
    )
    path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": path})
    announced = 0
    for line in proc.stdout:  # type: ignore[union-attr]
        announced = int(line)
        if announced >= 200:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = ExperimentStore.open(str(exp), readonly=False)
    stored = {r.iteration for r in store.results()}
    assert set(range(1, announced + 1)) <= stored


def test_a_write_that_sqlite_refuses_is_a_store_error_naming_the_store_and_is_rolled_back(tmp_path):
    """A full disk raised SQLite's own OperationalError ("database or disk is full"), naming nothing; it is a
    StoreError naming the store and what to do, and the store is still usable once there is room."""
    store = _new(tmp_path)
    store.add_trials([("t0", 0, {"lr": 0.1})], group_id="g")
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # as full as a full disk
    with pytest.raises(StoreError, match=r"could not write the experiment store .*experiment\.db.*full.*resume=True"):
        store.add_results([("t0", 0, i, float(i), {"acc": "x" * 10_000}) for i in range(50)])
    assert store.results("t0") == []  # rolled back whole
    store._conn.execute(f"PRAGMA max_page_count = {10 * pages + 1000}")
    store.add_results([("t0", 0, 1, 1.0, {"acc": 0.5})])
    assert [r.iteration for r in store.results("t0")] == [1]
    store.close()


def test_a_lock_file_naming_a_gone_pid_is_not_gone_while_a_process_holds_its_lock(tmp_path):
    """A driver in another pid namespace (a container sharing the host's name) writes a pid this machine's
    processes do not have: ``ls`` showed its running experiment as DRIVER GONE (a review's script under
    ``unshare --pid``). The lock itself tells: a process of this kernel holds it."""
    import socket

    lock = DriverLock.acquire(str(tmp_path))
    try:
        with open(os.path.join(tmp_path, LOCK_FILENAME), "w") as f:  # as that driver wrote it: its namespace's pid
            f.write(f"pid 4000000 on {socket.gethostname()}, since 2026-11-29 12:00:00\n")
        assert not DriverLock.holder_gone(str(tmp_path))
    finally:
        lock.release()
    with open(os.path.join(tmp_path, LOCK_FILENAME), "w") as f:  # nobody holds it now, and no such pid lives
        f.write(f"pid 4000000 on {socket.gethostname()}, since 2026-11-29 12:00:00\n")
    assert DriverLock.holder_gone(str(tmp_path))


def test_an_emptied_lock_file_is_gone_unless_a_process_holds_its_lock(tmp_path):
    """A driver that let the experiment go (it empties the file) without setting its status (a second Ctrl-C while
    it flushed) left it RUNNING, and ``ls`` showed it RUNNING for ever: a review's finding."""
    lock = DriverLock.acquire(str(tmp_path))
    try:
        open(os.path.join(tmp_path, LOCK_FILENAME), "w").close()  # taken, its line not written yet
        assert not DriverLock.holder_gone(str(tmp_path))
    finally:
        lock.release()
    assert open(os.path.join(tmp_path, LOCK_FILENAME)).read() == ""  # as a driver leaves it
    assert DriverLock.holder_gone(str(tmp_path))


def test_live_device_processes_are_those_of_this_machine_started_before_their_event_and_still_running():
    """What a resume after a killed driver waits for (``tests/test_run.py::test_a_resume_after_a_killed_driver_
    waits_for_its_device_processes_to_end``): a pid a ``device_start`` event names, on this machine, whose process
    started before the event (a pid taken since by another process started after it) and has not ended."""
    import socket

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.05)
    now = time.time()

    def event(ts: float, pid: int = proc.pid, host: str = socket.gethostname()) -> EventRow:
        return EventRow(ts, "device_start", None, "cpu:0", {"pid": pid, "hostname": host})

    try:
        assert live_device_processes([event(now), event(now)]) == [proc.pid]  # (each once)
        assert live_device_processes([event(now - 3600)]) == []  # the pid was taken since
        assert live_device_processes([event(now, host="elsewhere")]) == []
        assert live_device_processes([event(now, pid=os.getpid())]) == []  # (this process: not a device's)
        assert live_device_processes([EventRow(now, "device_start", None, "cpu:0", None)]) == []
        proc.kill()
        time.sleep(0.2)  # a zombie until it is waited for: ended
        assert live_device_processes([event(now)]) == []
    finally:
        proc.kill()
        proc.wait()
    assert live_device_processes([event(now)]) == []


class _Model:
    def __init__(self, width: int = 1) -> None:
        self.width = width


def _activation(x: float) -> float:
    return max(x, 0.0)


def test_configs_that_json_cannot_hold_are_kept_as_given(tmp_path):
    """A resumed trial got its config from the JSON, where a class or a function is its repr and a tuple a list:
    config["cls"]() failed after Tuner.restore (a helper's side-by-side run; Ray keeps them pickled)."""
    store = _new(tmp_path)
    store.add_trials([("plain", 0, {"lr": 0.1, "layers": [1, 2], "name": "a"}),
                      ("objects", 1, {"cls": _Model, "act": _activation, "shape": (3, 4), "lr": 0.1})])
    assert store.configs() == {"objects": {"cls": _Model, "act": _activation, "shape": (3, 4), "lr": 0.1}}
    assert [t.config["shape"] for t in store.trials() if t.trial_id == "objects"] == [[3, 4]]  # the JSON, as before
    # by type, not by a JSON round trip compared with ==, which took an array of one value for a list (a review)
    store.add_trials([("array", 2, {"w": np.array([1.0])}), ("numpy_float", 3, {"lr": np.float64(0.5)})])
    kept = store.configs()
    assert set(kept) == {"objects", "array"} and isinstance(kept["array"]["w"], np.ndarray)
    store.update_trial_config("array", {"w": 1.0})
    store.update_trial_config("plain", {"lr": 0.2, "cls": _Model})  # an exploit's new config
    store.update_trial_config("objects", {"lr": 0.3})
    assert store.configs() == {"plain": {"lr": 0.2, "cls": _Model}}
    store.close()


def _folder_bytes(folder) -> dict[str, bytes]:
    """Every file under ``folder`` (the lock file too) and its bytes."""
    return {os.path.relpath(os.path.join(root, name), folder): open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(folder) for name in names}


def _truncated(db_path: str) -> None:
    os.truncate(db_path, os.path.getsize(db_path) // 2)


def test_a_writer_that_refuses_a_store_leaves_its_folder_as_it_was(tmp_path):
    """A writer's open of a store damaged past its first bytes connected for writing before it refused: the store
    got ``-wal``/``-shm`` files beside it (h83's N8, a refused restore). (A newer schema's refusal made none.)"""
    store = _new(tmp_path)
    store.add_trials([(f"t{i}", i, {"x": i}) for i in range(200)])  # (pages enough that half of them is cut)
    store.close()
    _truncated(store.db_path)
    before = _folder_bytes(tmp_path / "exp")
    with pytest.raises(StoreError, match=r"is not a fluidsalus experiment store \(database disk image is malformed\)"):
        ExperimentStore.open(str(tmp_path / "exp"))
    assert _folder_bytes(tmp_path / "exp") == before


def test_an_untouched_view_of_a_killed_writers_store_reads_its_log_and_changes_no_byte(tmp_path):
    """A resume reads a killed driver's store (its ``-wal`` and ``-shm`` left) to check it: SQLite's plain read-only
    reader rewrote the ``-shm`` (its recovery and read marks), and a writer folded the log in and removed both."""
    store = _new(tmp_path)
    store.close()
    script = (f"from fluidsalus.store import ExperimentStore; import os\n"
              f"s = ExperimentStore.open({str(tmp_path / 'exp')!r})\n"
              "s.add_events([(1.0, 'late', None, None, None)]); os._exit(0)")
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.environ.get("PYTHONPATH", "")])})
    before = _folder_bytes(tmp_path / "exp")
    assert DB_FILENAME + "-wal" in before and DB_FILENAME + "-shm" in before
    from fluidsalus.store import open_untouched
    with open_untouched(tmp_path / "exp") as view:
        assert [e.kind for e in view.events()] == ["late"]  # (only in the log)
    assert _folder_bytes(tmp_path / "exp") == before


@pytest.mark.parametrize("held_before", ["", "pid 999999 on elsewhere, since 2025-01-01 00:00:00\n", None])
def test_a_lock_put_back_leaves_its_file_as_it_was(tmp_path, held_before):
    """A refused resume took the driver lock: the file then held nothing (a killed driver's line, which
    ``holder_gone`` reads, was lost) or was made anew in an experiment that had none."""
    path = tmp_path / LOCK_FILENAME
    if held_before is not None:
        path.write_text(held_before)
    lock = DriverLock.acquire(str(tmp_path))
    assert path.read_text().startswith(f"pid {os.getpid()} ")
    lock.release(put_back=True)
    assert (path.read_text() if path.exists() else None) == held_before


@pytest.mark.parametrize("held_before", ["", "pid 999999 on elsewhere, since 2025-01-01 00:00:00\n", None],
                         ids=["emptied", "killed-driver", "no-lock-file"])
def test_a_lock_put_back_leaves_the_files_and_the_folders_times_as_they_were(tmp_path, held_before):
    """The lock file was put back with a new mtime (and an experiment without one had its folder's mtime moved by
    the file made and removed): a refused resume left its mark on what ``ls -lt`` and a backup's scan see (h125's
    b). A lock let go without put_back is the driver's: its file gets a new mtime."""
    path = tmp_path / LOCK_FILENAME
    if held_before is not None:
        path.write_text(held_before)
    long_ago = time.time() - 3600
    for each in (tmp_path, *([path] if held_before is not None else [])):
        os.utime(each, (long_ago, long_ago))
    times = {each: (os.stat(each).st_atime_ns, os.stat(each).st_mtime_ns) for each in (tmp_path, path)
             if each.exists()}
    lock = DriverLock.acquire(str(tmp_path))
    lock.release(put_back=True)
    assert {each: (os.stat(each).st_atime_ns, os.stat(each).st_mtime_ns) for each in (tmp_path, path)
            if each.exists()} == times
    DriverLock.acquire(str(tmp_path)).release()  # (a driver's own release: the file shows its time)
    assert os.stat(path).st_mtime > long_ago + 60


def test_a_read_that_fails_inside_a_write_keeps_the_writes_advice(tmp_path):
    """A read inside a transaction that SQLite could not do said only "cannot be read": the transaction's own
    message (nothing kept, what to do) was lost (h92's review)."""
    store = _new(tmp_path)
    other = sqlite3.connect(store.db_path)
    other.execute("DROP TABLE events")
    other.close()
    with pytest.raises(StoreError, match=r"could not write the experiment store .*: no such table: events \(nothing "
                                         r"of this write was kept; .* resume=True"):
        with store.transaction():
            store.add_trials([("t0", 0, {"x": 1})])
            store.events()
    assert store.trials() == []
    store.close()


def test_a_driver_that_locked_a_lock_file_just_removed_locks_the_new_one(tmp_path, monkeypatch):
    """A refused resume removes the lock file it made (put_back). A driver that opened that file just before, and
    locked it just after, held the lock of a deleted file, and a third driver made a new file and held the lock
    too: two drivers ran one experiment (h101's F1). The second one now locks the file that is at the path."""
    import fcntl

    from fluidsalus import store as st

    first = DriverLock.acquire(str(tmp_path))  # a resume about to be refused: the lock file is its
    real_flock = fcntl.flock

    def refused_between_open_and_lock(fd: int, op: int) -> None:
        monkeypatch.setattr(st.fcntl, "flock", real_flock)
        first.release(put_back=True)  # removes the file the second driver opened
        real_flock(fd, op)

    monkeypatch.setattr(st.fcntl, "flock", refused_between_open_and_lock)
    second = DriverLock.acquire(str(tmp_path))
    assert os.path.exists(tmp_path / LOCK_FILENAME)
    with pytest.raises(StoreError, match="being run by another driver"):
        DriverLock.acquire(str(tmp_path))
    second.release()


def test_checkpoint_retention_removes_folders_only_once_its_rows_are_committed(tmp_path):
    """Checkpoint retention deleted folders inside the transaction that marked them deleted: a Ctrl-C raised in it
    (a PBT exploit's requeue) rolled the rows back to list folders that were gone, and the resume went back to the
    last one left, losing the iterations since (h160's F1). The folders now go once the rows are committed."""
    import types

    import pytest

    from fluidsalus.trialgroup.executor import Executor

    store = _new(tmp_path)
    store.add_trials([("t0", 0, {})], group_id="g")
    folders = []
    for iteration in (5, 10, 15):
        folder = tmp_path / f"checkpoint_{iteration:06d}"
        folder.mkdir()
        folders.append(folder)
        store.add_checkpoint("t0", iteration, str(folder), {"acc": iteration})
    executor = types.SimpleNamespace(  # (what _retain_checkpoints reads of the executor)
        settings=types.SimpleNamespace(checkpoint_num_to_keep=1, checkpoint_score_attribute=None,
                                       checkpoint_score_order="max"),
        store=store, _unlisted={})
    trial = types.SimpleNamespace(trial_id="t0")
    with pytest.raises(KeyboardInterrupt), store.transaction():
        Executor._retain_checkpoints(executor, trial)  # type: ignore[arg-type]
        raise KeyboardInterrupt  # (the first Ctrl-C, wherever the driver is)
    assert [c["iteration"] for c in store.checkpoints("t0")] == [5, 10, 15]
    assert all(folder.is_dir() for folder in folders)  # (the rows list them: they are there)
    with store.transaction():
        Executor._retain_checkpoints(executor, trial)  # type: ignore[arg-type]
        assert all(folder.is_dir() for folder in folders)  # (not before the commit)
    assert [c["iteration"] for c in store.checkpoints("t0")] == [15]
    assert [folder.is_dir() for folder in folders] == [False, False, True]


class _InterruptedAfter:
    """A store connection that raises a Ctrl-C's ``KeyboardInterrupt`` as the statement ``after`` returns, once: where
    Python raises it for a SIGINT that arrives while SQLite runs the statement."""

    def __init__(self, conn: sqlite3.Connection, after: str) -> None:
        self._conn, self._after = conn, after

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        cursor = self._conn.execute(sql, *args)
        if sql == self._after:
            self._after = ""
            raise KeyboardInterrupt
        return cursor

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


def test_a_ctrl_c_as_a_transactions_begin_returns_leaves_the_store_writable(tmp_path):
    """A Ctrl-C whose ``KeyboardInterrupt`` was raised as the BEGIN returned left that transaction open: the run's
    INTERRUPTED status (and every later write) then failed with SQLite's "cannot start a transaction within a
    transaction", and the interrupted experiment stayed RUNNING (CI saw it once in
    ``test_an_interrupted_driver_resumes_to_the_results_of_an_uninterrupted_run[ctrl_c]``). The open transaction is
    rolled back now."""
    store = _new(tmp_path)
    conn = store._conn
    store._conn = _InterruptedAfter(conn, "BEGIN")  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        store.add_trials([("t0", 0, {})], group_id="g")
    store._conn = conn
    assert not conn.in_transaction
    store.set_experiment(status="INTERRUPTED")
    store.close()
    reader = ExperimentStore.open(str(tmp_path / "exp"), readonly=True)
    assert reader.experiment()["status"] == "INTERRUPTED"
    assert reader.trials() == []  # (the interrupted write kept nothing)


def test_a_ctrl_c_as_a_transactions_commit_returns_keeps_the_write_and_runs_its_clean_up(tmp_path):
    """A ``KeyboardInterrupt`` raised as the COMMIT returned: the write is committed, so what it queued to run after
    the commit (removing folders its rows stop listing) runs before the Ctrl-C goes on (it was dropped, leaving the
    folders on disk)."""
    from pathlib import Path

    store = _new(tmp_path)
    gone = tmp_path / "checkpoint_000001"
    gone.mkdir()
    conn = store._conn
    store._conn = _InterruptedAfter(conn, "COMMIT")  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt), store.transaction():
        store.add_trials([("t0", 0, {})], group_id="g")
        store.after_commit(Path(gone).rmdir)
    store._conn = conn
    assert not gone.exists()
    assert [t.trial_id for t in store.trials()] == ["t0"]
    store.set_experiment(status="INTERRUPTED")  # (the store is not left inside a transaction)
    assert store.experiment()["status"] == "INTERRUPTED"


def test_an_after_commit_action_that_fails_is_logged_and_the_others_still_run(tmp_path, caplog):
    """The actions :meth:`ExperimentStore.after_commit` queues run once the rows are committed: one that raised (a
    folder it could not remove) dropped the ones after it, leaving their folders on disk, and its error came out of
    ``transaction()`` after a commit it could not undo. Each action runs now; a failure is a warning naming it."""
    import functools
    import logging
    from pathlib import Path

    store = _new(tmp_path)
    kept = tmp_path / "not_a_folder"
    kept.write_text("a file: rmtree refuses it")
    gone = tmp_path / "checkpoint_000002"
    gone.mkdir()
    with caplog.at_level(logging.WARNING, logger="fluidsalus.store"), store.transaction():
        store.after_commit(functools.partial(os.rmdir, kept))  # (NotADirectoryError)
        store.after_commit(Path(gone).rmdir)
    assert not gone.exists()
    assert kept.exists()
    assert f"could not clean up after a store write (rmdir({kept}))" in caplog.text
    assert "NotADirectoryError" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fluidsalus.store"):
        store.after_commit(Path(tmp_path / "missing").rmdir)  # (outside a transaction: at once, the same way)
    assert f"(Path.rmdir({tmp_path / 'missing'}))" in caplog.text


def test_a_checkpoint_folder_that_cannot_be_removed_is_warned_of(tmp_path, caplog):
    """Checkpoint folders the store stops listing were removed with ``rmtree(ignore_errors=True)``: one that could
    not be removed stayed on disk without a word (h172's C1). ``remove_folder`` lets its error reach the clean-up,
    which warns of it; a folder already gone is no error."""
    import functools
    import logging

    from fluidsalus.store import remove_folder

    store = _new(tmp_path)
    not_a_folder = tmp_path / "checkpoint_000001"
    not_a_folder.write_text("rmtree refuses a file")
    with caplog.at_level(logging.WARNING, logger="fluidsalus.store"), store.transaction():
        store.after_commit(functools.partial(remove_folder, str(tmp_path / "gone")))
        store.after_commit(functools.partial(remove_folder, str(not_a_folder)))
    assert caplog.text.count("could not clean up") == 1
    assert f"remove_folder({not_a_folder})" in caplog.text
