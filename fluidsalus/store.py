"""The experiment store: one SQLite file per experiment, ``<storage_path>/<name>/experiment.db``.

Only the driver writes to it. It runs in WAL mode, so readers (``fluidsalus inspect``, a notebook) can
read a running experiment without blocking the writer, and every transaction that has committed survives
the driver being killed (the data is in the WAL file before ``COMMIT`` returns). The executor commits a
batch of results *before* it acts on them (the searcher, callbacks, the progress view); that is what
"acknowledged" means, and so no acknowledged result is ever lost.

Tables: ``experiment`` (one row), ``trials``, ``results`` (one row per reported iteration and attempt),
``events`` (placements, starts, stops, failures, lane activity), ``checkpoints``, and ``searcher_calls`` (the
searcher's calls since its state was last saved, for searchers that can be replayed: see
``fluidsalus/trialgroup/searcher_log.py``).

The file carries ``PRAGMA application_id`` (so a stray SQLite file is not mistaken for a store) and
``PRAGMA user_version`` = :data:`SCHEMA_VERSION` (so an older fluidsalus refuses a newer file clearly), and in its
``store_info`` table the lowest schema whose fluidsalus can still read it (:data:`READABLE_FROM`): a newer schema that
only adds tables or columns leaves older versions able to read, though not to write, the stores it writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import math
import os
import re
import shutil
import socket
import sqlite3
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import cloudpickle

from fluidsalus.errors import StoreError

logger = logging.getLogger(__name__)

#: Version of the table layout below. Bump it, and add a migration, whenever the layout changes.
SCHEMA_VERSION = 3
#: ``PRAGMA application_id`` of a fluidsalus store: the bytes "FlSa".
APPLICATION_ID = 0x466C5361
DB_FILENAME = "experiment.db"
#: Suffixes of SQLite's write-ahead log and its shared-memory index beside the database: they exist while a
#: connection has the store open, and the last connection to close removes them (unless it is read-only).
WAL_SUFFIX, SHM_SUFFIX = "-wal", "-shm"
#: The lock file of the driver that runs the experiment (:class:`DriverLock`), beside the store.
LOCK_FILENAME = ".driver.lock"
#: Ray's file in a trial's folder to which each failure of the trial is appended (``ray.air.constants``).
ERROR_FILE = "error.txt"
#: Ray's file in a trial's folder with its last failure pickled (``ray.air.constants``): ``ray.tune.Result.from_path``
#: reads a trial's ``error`` from it.
ERROR_PICKLE_FILE = "error.pkl"
#: Ray's other file names in a trial's folder (``ray.air.constants``), which the Tune front end's loggers write.
PARAMS_FILE = "params.json"
PARAMS_PICKLE_FILE = "params.pkl"
RESULT_FILE = "result.json"
PROGRESS_FILE = "progress.csv"
#: The files the engine and its front ends keep in a trial's folder (beside its checkpoints).
TRIAL_RECORD_FILES = (ERROR_FILE, ERROR_PICKLE_FILE, PARAMS_FILE, PARAMS_PICKLE_FILE, RESULT_FILE, PROGRESS_FILE)
#: Where experiments go when no ``storage_path`` is given; ``FLUIDSALUS_STORAGE_PATH`` overrides it. (Here,
#: not in ``config.py``, so that reading a store, and every device process, does without pydantic.)
DEFAULT_STORAGE_PATH = os.path.join("~", "fluidsalus_results")
#: The longest file or folder name, in bytes, that Linux's file systems take (``NAME_MAX`` in ``<limits.h>``: ext4,
#: XFS, btrfs, tmpfs; macOS's APFS too). An experiment's and a trial's folder name longer than this cannot be made.
NAME_MAX_BYTES = 255
STORAGE_PATH_ENV = "FLUIDSALUS_STORAGE_PATH"
#: Where the Tune front end (``fluidsalus.tune``) puts experiments when ``RunConfig`` has no ``storage_path``: Ray's
#: default (``ray.train.constants.DEFAULT_STORAGE_PATH``). Here, beside fluidsalus's own, so that the command line
#: finds them without importing the front end.
TUNE_DEFAULT_STORAGE_PATH = os.path.join("~", "ray_results")
#: Ray still reads this deprecated variable as the default ``storage_path`` (with a deprecation warning); so does
#: the Tune front end.
RAY_STORAGE_ENV = "RAY_STORAGE"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def default_storage_path() -> str:
    """Where ``fluidsalus.run`` and the Optuna front end put experiments when no ``storage_path`` is given:
    ``$FLUIDSALUS_STORAGE_PATH`` (an empty variable is unset, as in a shell), else ``~/fluidsalus_results``; as
    given (``~`` not expanded)."""
    return os.environ.get(STORAGE_PATH_ENV) or DEFAULT_STORAGE_PATH


def tune_storage_path() -> str:
    """Where the Tune front end puts experiments when ``RunConfig`` has no ``storage_path``: ``$RAY_STORAGE`` as
    given when it is set (Ray still reads it), else Ray's ``~/ray_results``, expanded."""
    return os.environ.get(RAY_STORAGE_ENV) or os.path.expanduser(TUNE_DEFAULT_STORAGE_PATH)


def default_storage_paths() -> list[tuple[str, str]]:
    """The folders experiments go in when no ``storage_path`` is given, absolute, each with what chose it:
    :func:`default_storage_path` (``fluidsalus.run``, the Optuna front end), then :func:`tune_storage_path` (the
    Tune front end). One folder that both name is given once, with both reasons. ``fluidsalus ls`` lists both and
    ``fluidsalus inspect NAME`` looks a name up in both."""
    places = [(default_storage_path(), f"fluidsalus.run's and fluidsalus.optuna's default: ${STORAGE_PATH_ENV} or "
                                       f"{DEFAULT_STORAGE_PATH}"),
              (tune_storage_path(), f"fluidsalus.tune's default: ${RAY_STORAGE_ENV} or {TUNE_DEFAULT_STORAGE_PATH}")]
    out: list[tuple[str, str]] = []
    for path, how in places:
        path = os.path.abspath(os.path.expanduser(path))
        same = [i for i, (seen, _) in enumerate(out) if os.path.realpath(path) == os.path.realpath(seen)]
        if same:  # (both defaults set to one folder: listed once, under both names)
            out[same[0]] = (out[same[0]][0], f"{out[same[0]][1]}; {how}")
        else:
            out.append((path, how))
    return out

_SCHEMA = """
CREATE TABLE experiment (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    metric TEXT,
    mode TEXT,
    spec_json TEXT NOT NULL,
    searcher_state TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    finished_at REAL
);
CREATE TABLE trials (
    trial_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL,
    group_id TEXT,
    budget REAL,
    device TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    num_failures INTEGER NOT NULL DEFAULT 0,
    last_iteration INTEGER NOT NULL DEFAULT 0,
    last_result_json TEXT,
    checkpoint_path TEXT,
    stop_reason TEXT,
    error TEXT,
    traceback TEXT,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    config_pickle BLOB
);
CREATE TABLE results (
    id INTEGER PRIMARY KEY,
    trial_id TEXT NOT NULL REFERENCES trials(trial_id),
    attempt INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    ts REAL NOT NULL,
    metrics_json TEXT NOT NULL
);
CREATE INDEX results_by_trial ON results(trial_id, iteration);
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    trial_id TEXT,
    device TEXT,
    data_json TEXT
);
CREATE INDEX events_by_kind ON events(kind, ts);
CREATE TABLE checkpoints (
    id INTEGER PRIMARY KEY,
    trial_id TEXT NOT NULL REFERENCES trials(trial_id),
    iteration INTEGER NOT NULL,
    path TEXT NOT NULL,
    metrics_json TEXT,
    created_at REAL NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
"""
#: Schema 2's table (``_SCHEMA`` ends with it, and a schema-1 store gets it when opened for writing).
_SEARCHER_CALLS_TABLE = """
CREATE TABLE IF NOT EXISTS searcher_calls (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    data_json TEXT
)"""
_SCHEMA += _SEARCHER_CALLS_TABLE
#: Indices by trial (and path), by name. ``checkpoints_by_trial`` and ``checkpoints_by_path``: retention
#: (``num_to_keep``) reads a trial's checkpoints at each of its checkpoints and marks those it removes by path, and
#: without them each read and each mark went through every checkpoint of the sweep (up to 14 and 13 ms at 50,000).
#: ``events_by_trial``: a trial's events of a kind (its folder's name, read as each trial is first met by
#: the Tune front end's callbacks; its restarts) without going through every trial's (2 ms a read at 5,000 trials).
#: No schema change: a reader does not see an index, so a store of any schema gets them when opened for writing
#: (:meth:`ExperimentStore._migrate`).
_INDICES: dict[str, str] = {
    "checkpoints_by_trial": "CREATE INDEX IF NOT EXISTS checkpoints_by_trial ON checkpoints(trial_id)",
    "checkpoints_by_path": "CREATE INDEX IF NOT EXISTS checkpoints_by_path ON checkpoints(path)",
    "events_by_trial": "CREATE INDEX IF NOT EXISTS events_by_trial ON events(trial_id, kind)",
}
_SCHEMA += "".join(";\n" + statement for statement in _INDICES.values())
#: Schema 3's column: a trial's config pickled, when JSON cannot hold it exactly (a class, a function, a tuple, an
#: object ref), so that a resumed trial gets the objects it began with (:func:`config_pickle`).
_CONFIG_PICKLE_COLUMN = "ALTER TABLE trials ADD COLUMN config_pickle BLOB"
#: What each schema version adds to the one before it: a store opened for writing is brought up to date.
_MIGRATIONS: dict[int, str] = {2: _SEARCHER_CALLS_TABLE, 3: _CONFIG_PICKLE_COLUMN}
#: For each schema, the lowest schema whose fluidsalus can read a store of it: every version so far only added a
#: table (2) or a nullable column (3), which a reader that names its columns passes over. A version that changes
#: what a column means, or removes one, sets its own number here.
READABLE_FROM: dict[int, int] = {1: 1, 2: 1, 3: 1}
#: A table of facts about the file (``key``, ``value``), read before anything else: ``readable_from`` is
#: :data:`READABLE_FROM` of the schema that last wrote it. (Not a schema change: a reader passes over a table it
#: does not know; stores written before it have none, and are read as their schema says.)
_STORE_INFO_TABLE = "CREATE TABLE IF NOT EXISTS store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def _write_store_info(conn: sqlite3.Connection) -> None:
    """Create ``store_info`` if it is missing and set its ``readable_from`` for this schema (inside the caller's
    transaction)."""
    conn.execute(_STORE_INFO_TABLE)
    conn.execute("INSERT OR REPLACE INTO store_info (key, value) VALUES ('readable_from', ?)",
                 (str(READABLE_FROM[SCHEMA_VERSION]),))

# Trial statuses, as Ray Tune names them.
PENDING = "PENDING"
RUNNING = "RUNNING"
PAUSED = "PAUSED"  # reached its group's budget; resident on its device, waiting for the searcher
TERMINATED = "TERMINATED"
ERROR = "ERROR"
TRIAL_STATUSES = (PENDING, RUNNING, PAUSED, TERMINATED, ERROR)
FINAL_STATUSES = frozenset({TERMINATED, ERROR})
#: The event that names a trial's folder when it is not the trial id, and the trial itself when the run's
#: ``trial_name`` function named it (``data``: ``{"dirname": ...}``, ``{"name": ...}`` or both).
TRIAL_DIRNAME_EVENT = "trial_dirname"
#: The event of an attempt's start on its device (``data``: ``attempt``): its first turn on its lane.
TRIAL_START_EVENT = "trial_start"
#: The event of a trial's restart on a new attempt (``data``: ``attempt``, ``reason``, ``from_iteration``, ...; for a
#: restart with a new configuration, PBT's exploit, also ``config`` and the ``previous_config`` it replaced).
TRIAL_RESTART_EVENT = "trial_restart"
#: The event of an error a trial raised as a stop unwound it, which did not fail it (as in Ray Tune, which stops the
#: trial's actor and never sees it; ``gpu.host.LANE_ERROR_AFTER_STOP``; ``data``: ``attempt``, ``error``,
#: ``traceback``, and for a stop of the driver's ``moved``: whether the trial goes on with a restart, whose reason is
#: ``restart``, kept since 2026-12-01); one of a trial that met its stop rule, which its device tells, has no ``moved``;
#: one of a trial that failed after ``fail_fast="raise"``'s failure (Ray raises that one at once and never sees a
#: later one) has ``moved`` False and ``after_raise`` True; ``fluidsalus inspect`` lists them.
ERROR_AFTER_STOP_EVENT = "error_after_stop"
# Restart reasons (the executor's ``_Restart.reason``, and the ``reason`` of ``trial_restart`` events) set by the
# planner and the executor.
RESTART_RETRY = "retry"  # it failed, and max_failures allows another attempt: from its last checkpoint
RESTART_MOVE = "move"  # a MOVE or RESIZE: restart from its checkpoint on the planner's new devices
RESTART_PREEMPT = "preempted"  # its memory went to another trial: checkpoint, back to the queue
RESTART_WITHDRAWN = "withdrawn"  # its device gave it back before it began: back to the queue, nothing lost
RESTART_TURN = "turn"  # promoted while a trial behind it waited (BaseSearcher.takes_turns): back to the queue
RESTART_DEVICE_DIED = "device_died"  # its device actor died: from its checkpoint, where the next plan puts it
RESTART_EXPLOIT = "exploit"  # PBT's exploit: from the source's checkpoint, with a new configuration
#: Each restart reason in words: the driver's warning for an error a trial raised as the stop that restarts it
#: unwound it, and ``fluidsalus inspect``'s line for its ``error_after_stop`` record, name the restart so (the warning
#: named "a move, a preemption, PBT's exploit" whatever the restart was, a time slice's turn or a device's death too).
RESTART_WORDS: dict[str, str] = {
    RESTART_MOVE: "a move or resize to other devices",
    RESTART_PREEMPT: "a preemption: its memory went to another trial",
    RESTART_WITHDRAWN: "its device gave it back before it began",
    RESTART_TURN: "a turn: it gave its place up to a trial behind it",
    RESTART_DEVICE_DIED: "the death of a device it ran on",
    RESTART_EXPLOIT: "PBT's exploit",
}


def restart_words(reason: str | None) -> str:
    """A restart's reason in words (:data:`RESTART_WORDS`); one it does not know as it is, and None (a record from
    before the reason was kept) as "a restart"."""
    if reason is None:
        return "a restart"
    return RESTART_WORDS.get(reason, reason)


#: The searcher was told a trial's end at the result a stop rule ended it at, before the trial's end reached the
#: driver (``data``: ``attempt``): stored with that result, so that a resumed run does not tell it again.
SEARCHER_TOLD_END_EVENT = "searcher_told_end"
#: The searcher stopped a trial paused on its device (``collect_stops``: HyperBand's rung settled), before the trial's
#: end reached the driver (``data``: ``attempt``): stored with the searcher's state that no longer holds that stop, so
#: that a resumed run ends the trial, which its searcher will not stop again (``fluidsalus.api.end_decided_trials``).
SEARCHER_STOP_EVENT = "searcher_stop"
#: A trial that ended ``TERMINATED`` was made ``ERROR`` because a run's callback raised at its end (Ray Tune fails
#: such a trial; ``data``: ``attempt``, ``hook``, ``error``).
CALLBACK_ERROR_EVENT = "callback_error"
#: The event of a store written back after its file was deleted during a run
#: (:meth:`ExperimentStore.write_back_if_removed`).
STORE_RESTORED_EVENT = "store_restored"

_TRIAL_COLUMNS = frozenset(
    {
        "status",
        "group_id",
        "budget",
        "device",
        "attempt",
        "num_failures",
        "last_iteration",
        "last_result_json",
        "checkpoint_path",
        "stop_reason",
        "error",
        "traceback",
        "started_at",
        "finished_at",
    }
)


def read_error_file(path: str | None) -> str | None:
    """Ray's ``Trial.get_error()``: the text of a trial's ``error.txt``.

    Args:
        path: The file (a trial's ``error_file``), or None when the trial never failed.

    Returns:
        Every failure of the trial, appended, or None when there is no file.
    """
    if path is None or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _to_jsonable(value: Any) -> Any:
    """Turn numpy/torch scalars and other foreign objects into JSON-friendly Python values."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item):
        try:
            return _to_jsonable(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _to_jsonable(tolist())
    return repr(value)


#: Separators of the store's JSON: no spaces. A searcher's whole state can be large (ASHA's is 1.26 MB at 10,000
#: trials), and this is 16 % faster and 10 % smaller than json's default.
JSON_SEPARATORS = (",", ":")


def dumps(value: Any) -> str:
    """JSON-encode a result or config. NaN and infinities are kept (Python's json reads them back)."""
    try:
        return json.dumps(value, allow_nan=True, separators=JSON_SEPARATORS)
    except TypeError:
        return json.dumps(_to_jsonable(value), allow_nan=True, separators=JSON_SEPARATORS)


class KeptRecords:
    """A JSON object of records by key (a searcher's trials, in its ``state_json``), in which a record that no
    longer changes is encoded once and kept: a state written with every batch then costs the changing records'
    encoding and a join, not the whole history's."""

    def __init__(self) -> None:
        self._kept: dict[str, str] = {}

    def encode(self, keys: Iterable[str], record: Callable[[str], Any], final: Callable[[str], bool]) -> str:
        """The JSON object ``{key: record(key) for key in keys}``.

        Args:
            keys: The keys, in order.
            record: A key's record (asked only for keys not kept).
            final: Whether a key's record no longer changes: its encoding is then kept.

        Returns:
            The JSON text.
        """
        parts = []
        for key in keys:
            text = self._kept.get(key)
            if text is None:
                text = f"{dumps(key)}:{dumps(record(key))}"
                if final(key):
                    self._kept[key] = text
            parts.append(text)
        return "{" + ",".join(parts) + "}"

    def forget(self, key: str) -> None:
        """Encode ``key``'s record again next time (it changed after all)."""
        self._kept.pop(key, None)

    def clear(self) -> None:
        self._kept.clear()

    def __iter__(self) -> Iterator[str]:
        """The keys whose encoding is kept."""
        return iter(self._kept)


#: The decoder of :func:`loads`'s usual case (a text :func:`dumps` wrote: one JSON value, no white space around it).
_DECODER = json.JSONDecoder()


def loads(text: str | None) -> Any:
    """A stored JSON text decoded (None for none), as ``json.loads`` decodes it.

    What :func:`dumps` wrote is decoded by the decoder's scanner alone: ``json.loads`` also looks for white space
    before and after the value with two regular expressions, half of the time it took to decode a store's rows
    (``fluidsalus inspect``). Any other text (white space around its value, more than one value, no JSON, not a
    str) is given to ``json.loads``, which decodes it or raises as it did.
    """
    if text is None:
        return None
    if type(text) is str:
        try:
            value, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError:
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


def config_pickle(config: Mapping[str, Any]) -> bytes | None:
    """A trial's config pickled (cloudpickle: a class or function of the script by value), when its JSON
    (:func:`dumps`) does not give it back as it is: a class, a function or an object JSON writes as its repr, a
    tuple (a list in JSON). None when the JSON does, or when it cannot be pickled (the JSON is all there is)."""
    if _json_exact(dict(config)):
        return None
    try:
        return cloudpickle.dumps(dict(config))
    except Exception:  # noqa: BLE001 - a config the run could copy but not pickle: its JSON stays
        return None


def _json_exact(value: Any) -> bool:
    """Whether JSON gives ``value`` back as it is, by type (a JSON round trip compared with ``==`` took
    ``np.array([1.0])`` for ``[1.0]`` and ``torch.tensor(1.0)`` for ``1.0``, and compared a large array element by
    element: a review's finding)."""
    kind = type(value)
    if value is None or kind in (str, bool, int) or isinstance(value, float):  # (a NumPy float is a float)
        return True
    if kind is list:
        return all(_json_exact(v) for v in value)
    if kind is dict:
        return all(type(k) is str and _json_exact(v) for k, v in value.items())
    return False


@dataclass
class TrialRow:
    """One row of the ``trials`` table, decoded."""

    trial_id: str
    seq: int
    config: dict[str, Any]
    status: str
    group_id: str | None
    budget: float | None
    device: str | None
    attempt: int
    num_failures: int
    last_iteration: int
    last_result: dict[str, Any] | None
    checkpoint_path: str | None
    stop_reason: str | None
    error: str | None
    traceback: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None


@dataclass
class ResultRow:
    trial_id: str
    attempt: int
    iteration: int
    ts: float
    metrics: dict[str, Any]


@dataclass
class EventRow:
    ts: float
    kind: str
    trial_id: str | None
    device: str | None
    data: dict[str, Any] | None


def _check_sqlite_file(db_path: str) -> None:
    try:
        with open(db_path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise StoreError(f"cannot read experiment store {db_path!r}: {e.strerror}") from None
    if not head:
        raise StoreError(f"{db_path!r} is empty: an experiment store that its driver is creating (try again in a "
                         "moment), or whose creation was cut short")
    if head != _SQLITE_MAGIC:
        raise StoreError(f"{db_path!r} is not a fluidsalus experiment store (it is not an SQLite file)")


#: Tries of :meth:`ExperimentStore.write_back_if_removed` while the experiment's folder keeps vanishing (a
#: recursive removal still under way removed the folder it had made again: the run failed on sqlite's "unable to
#: open database file"), and the wait between them.
WRITE_BACK_ATTEMPTS = 5
WRITE_BACK_RETRY_S = 0.1


#: Age after which an ``experiment.db`` that holds no table is taken for a creation cut short (its driver killed
#: between claiming the file and committing the schema), which a new run may replace. A creation takes
#: milliseconds; a driver that is still creating it is never this slow.
ABANDONED_CREATE_S = 60.0


def abandoned_create(db_path: str, now: float | None = None) -> bool:
    """Whether ``db_path`` is what a creation cut short left: an empty file, or an SQLite file with no table and no
    fluidsalus id, untouched for :data:`ABANDONED_CREATE_S`. Neither a run (the name is taken) nor a resume (there
    is no experiment in it) could use it.

    Args:
        db_path: An ``experiment.db``.
        now: The time to judge its age at (default: now).
    """
    try:
        info = os.stat(db_path)
    except OSError:
        return False
    if (now if now is not None else time.time()) - info.st_mtime < ABANDONED_CREATE_S:
        return False
    if info.st_size == 0:
        return True
    try:
        with open(db_path, "rb") as f:
            if f.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                return False
        # (changing no byte beside it: immutable when no write-ahead log is there, a plain read-only open would
        # create empty -wal and -shm files; readonly_shm beside a killed driver's -wal/-shm, whose -shm a plain
        # read-only reader rewrites: a refused resume left it changed)
        conn = sqlite3.connect(_untouched_uri(db_path), uri=True)
        try:
            conn.execute("BEGIN")  # (one snapshot, as ExperimentStore.open reads them)
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False
    return app_id == 0 and tables == 0


def remove_store_files(db_path: str) -> None:
    """Remove a store's database file and SQLite's files beside it (those that exist)."""
    for suffix in ("", WAL_SUFFIX, SHM_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.remove(db_path + suffix)


#: The line a driver writes into :data:`LOCK_FILENAME`: its pid and host (see :meth:`DriverLock.acquire`).
_LOCK_LINE = re.compile(r"pid (\d+) on (\S+), since ")


def _flock_held(path: str) -> bool:
    """Whether a process of this kernel holds a ``flock`` on ``path`` (``/proc/locks`` lists it by device and
    inode, for every pid namespace); False when that cannot be read."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(" FLOCK " in line and key in line.split() for line in text.splitlines())


class DriverLock:
    """The one driver that runs an experiment: an exclusive ``flock`` on :data:`LOCK_FILENAME` in its folder.

    The lock goes with the process (the kernel drops it when the driver exits or is killed), so a run resumed
    after a crash takes it at once, while a second driver started on a running experiment (``resume=True`` from
    another terminal) is refused instead of running its trials a second time beside the first. The file says
    who holds it, for the refusal's message.
    """

    def __init__(self, fd: int, previous: str = "", path: str | None = None, made: bool = False,
                 previous_bytes: bytes = b"", times: tuple[int, int] | None = None) -> None:
        self._fd: int | None = fd
        self.previous = previous  # what the file said before this driver took it (the last driver's line)
        self._path = path  # the lock file, and whether acquire made it and what it held (for put_back)
        self._made = made
        self._previous_bytes = previous_bytes
        # (for put_back: the access and modification times, in ns, of the file, or of its folder when acquire
        # made the file)
        self._times = times

    @property
    def previous_pid(self) -> int | None:
        """The pid of the driver that held the lock before this one and did not let it go (its line was still
        there: it was killed, or is a driver of another machine whose lock this file system does not share),
        or None."""
        match = _LOCK_LINE.match(self.previous)
        return int(match.group(1)) if match is not None else None

    @classmethod
    def acquire(cls, experiment_dir: str) -> DriverLock:
        """Take the experiment's lock.

        Raises:
            StoreError: Another driver holds it (the message says which, as it wrote), or the file cannot be made.
        """
        path = os.path.join(experiment_dir, LOCK_FILENAME)
        while True:
            made, folder_times = False, None
            try:
                try:
                    fd = os.open(path, os.O_RDWR)
                except FileNotFoundError:
                    folder_times = _times(experiment_dir)  # (as they were before the file is made)
                    try:
                        fd, made = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
                    except FileExistsError:
                        continue  # (another driver made it just now: open its file)
            except OSError as e:
                raise StoreError(f"cannot create the experiment's lock file {path!r}: {e.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "a driver that wrote nothing"
                os.close(fd)  # (a file made here, in a race with the holder's, is its: it stays)
                raise StoreError(f"the experiment at {experiment_dir} is being run by another driver ({holder}); "
                                 "wait for it to end, or stop it, before running it again") from None
            try:  # (a refused driver's put_back may have removed the file this fd opened: lock the one at path)
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        times = folder_times if made else _times(fd)
        previous_bytes = os.pread(fd, 4096, 0)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        return cls(fd, previous_bytes.decode("utf-8", "replace").strip(), path, made, previous_bytes, times)

    def release(self, put_back: bool = False) -> None:
        """Let the experiment go (idempotent).

        Args:
            put_back: Leave the lock file as :meth:`acquire` found it (a refused resume changes nothing in the
                experiment's folder): its bytes written back (a killed driver's line, which
                :meth:`holder_gone` reads) and its access and modification times set back, or the file removed
                when :meth:`acquire` made it and the folder's times set back. Otherwise it is emptied: the
                experiment is let go.
        """
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                if put_back and self._made and self._path is not None:
                    os.remove(self._path)  # (while the flock is held: a driver that opens it after makes its own)
                    if self._times is not None:  # (the folder's mtime moved with the file's making and removal)
                        os.utime(os.path.dirname(self._path), ns=self._times)
                else:
                    os.ftruncate(fd, 0)
                    if put_back and self._previous_bytes:
                        os.pwrite(fd, self._previous_bytes, 0)
                    if put_back and self._times is not None:
                        os.utime(fd, ns=self._times)
            os.close(fd)  # (closing the only descriptor drops the flock)

    @staticmethod
    def holder_gone(experiment_dir: str) -> bool:
        """Whether the driver the lock file names is known to be gone without letting the experiment go.

        A driver killed without its clean-up (SIGKILL, the kernel's out-of-memory killer, a crash) leaves its
        experiment ``RUNNING`` in the store and its line in the lock file (a driver that ends empties it). This
        tells such an experiment from one that runs, without touching the lock (taking it, even for a moment,
        could refuse a driver starting then): the file names this machine, no process of this kernel holds a
        ``flock`` on it (``/proc/locks``; a live driver in another pid namespace, such as a container that shares
        the host's name, still holds it), and no process has the pid the file names.

        Args:
            experiment_dir: The experiment's folder.

        Returns:
            True when the file names a process of this machine that no longer exists, or is empty and nobody
            holds its lock; False when it names one that does (or whose pid another process took since), one of
            another machine, or something else, or when there is no lock file.
        """
        path = os.path.join(experiment_dir, LOCK_FILENAME)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return False
        if not text.strip():
            # Emptied: the last driver let the experiment go without setting its status (a second Ctrl-C while
            # it flushed, a store it could no longer write), unless a driver took the lock a moment ago and has
            # not written its line yet, which it then holds.
            return not _flock_held(path)
        match = _LOCK_LINE.match(text)
        if match is None or match.group(2) != socket.gethostname():
            return False
        if _flock_held(path):  # (held by a live process of this kernel, whatever its pid namespace)
            return False
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            return True
        except OSError:  # (PermissionError: it exists, as another user's)
            return False
        return False


def _times(path_or_fd: str | int) -> tuple[int, int] | None:
    """The access and modification times (ns) of a path or an open file, for ``os.utime(..., ns=...)``; None
    when it cannot be read."""
    try:
        info = os.stat(path_or_fd)
    except OSError:
        return None
    return info.st_atime_ns, info.st_mtime_ns


#: How long a driver that resumes an experiment whose last driver was killed (SIGKILL, a crash) waits for that
#: driver's device processes on this machine to end before it runs trials itself. Ray ends a dead driver's actors
#: by itself, about 2 s after the driver (measured: a helper killed the driver of a two-device sweep, whose
#: devices ran 15 more iterations in 1.9 s and wrote checkpoint folders no store recorded); until then they would
#: run the same trials beside the resumed ones, in the same folders. This leaves a loaded machine fifteen times
#: that. Past it the driver warns and goes on (it never kills them: they may be the devices of a live driver of
#: another machine whose lock this file system does not share).
KILLED_DRIVER_DEVICES_WAIT_S = 30.0

#: How often that wait looks again.
KILLED_DRIVER_DEVICES_POLL_S = 0.1


def _boot_time() -> float | None:
    """When this machine booted (``btime`` of ``/proc/stat``), or None where there is no ``/proc``."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def process_started_at(pid: int, boot: float | None = None) -> float | None:
    """When process ``pid`` of this machine started (epoch seconds, to a second: the boot time's resolution), or
    None when there is no such live process (a zombie is not live) or ``/proc`` cannot tell.

    Args:
        pid: The process.
        boot: The boot time, if read already.
    """
    boot = _boot_time() if boot is None else boot
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after ``pid (comm)``: field 3 (state) on
    if boot is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks since boot


def live_device_processes(events: Iterable[EventRow], hostname: str | None = None) -> list[int]:
    """The device processes that ``device_start`` events name on this machine and that still run.

    A process counts when its pid is alive and it started before its event (to the second): a pid taken by
    another process since started after.

    Args:
        events: The store's ``device_start`` events (their data carry the device actor's ``pid`` and
            ``hostname``).
        hostname: This machine's name (default: ``socket.gethostname()``).

    Returns:
        Their pids, each once, in the events' order.
    """
    hostname = socket.gethostname() if hostname is None else hostname
    boot = _boot_time()
    out: list[int] = []
    for e in events:
        data = e.data or {}
        pid = data.get("pid")
        if not isinstance(pid, int) or data.get("hostname") != hostname or pid in out or pid == os.getpid():
            continue
        started = process_started_at(pid, boot)
        if started is not None and started <= e.ts + 1.0:
            out.append(pid)
    return out


def wait_for_killed_drivers_devices(store: ExperimentStore,
                                    timeout_s: float = KILLED_DRIVER_DEVICES_WAIT_S) -> list[int]:
    """Wait until the device processes of an experiment's killed driver on this machine have ended
    (:data:`KILLED_DRIVER_DEVICES_WAIT_S`), saying so in the log; warn when some outlive the wait. Its devices
    are those of the ``device_start`` events since the experiment's last ``resume`` event (its own).

    Args:
        store: The experiment's store.
        timeout_s: The most seconds to wait.

    Returns:
        The pids still running at the end (empty when every one ended).
    """
    resumes = store.events("resume")  # the last driver's devices started after its resume (or from the start)
    since = resumes[-1].ts if resumes else -math.inf
    events = [e for e in store.events("device_start") if e.ts >= since]
    pids = live_device_processes(events)
    if not pids:
        return []
    logger.warning("waiting for %d device process%s of the experiment's killed driver to end (pid %s); Ray ends "
                   "them shortly after their driver", len(pids), "" if len(pids) == 1 else "es",
                   ", ".join(map(str, pids)))
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        time.sleep(KILLED_DRIVER_DEVICES_POLL_S)
        pids = live_device_processes(events)
    if pids:
        logger.warning("%d device process%s of the experiment's killed driver still run%s after %.0f s (pid %s): "
                       "they may run its trials beside this run's until they end", len(pids),
                       "" if len(pids) == 1 else "es", "s" if len(pids) == 1 else "", timeout_s,
                       ", ".join(map(str, pids)))
    return pids


def open_readonly(path: str | os.PathLike[str]) -> ExperimentStore:
    """Open a store for reading without changing anything on disk.

    While the experiment runs (its write-ahead log ``experiment.db-wal`` exists) this is
    ``ExperimentStore.open(path, readonly=True)``: a WAL reader sees every committed transaction and never
    blocks the writer. A store nobody has open has no ``-wal`` file, and a plain read-only open would create an
    empty ``-wal`` and ``-shm`` beside it; it is then opened with SQLite's ``immutable=1``, which reads the
    database file alone and creates nothing.

    Raises:
        StoreError: As :meth:`ExperimentStore.open`: not an experiment, not a store, or a newer schema.
    """
    db_path = resolve_db_path(path)
    idle = os.path.isfile(db_path) and not os.path.exists(db_path + WAL_SUFFIX)
    return ExperimentStore.open(path, readonly=True, immutable=idle)


def _untouched_uri(db_path: str) -> str:
    """The URI of a read-only connection to ``db_path`` that changes no byte beside it and makes no file: SQLite's
    ``immutable=1`` when no write-ahead log is there (a plain read-only open would create empty ``-wal`` and
    ``-shm`` files); with one (a killed driver's, or a running driver's), ``readonly_shm=1``, which reads the log
    without writing its shared-memory index (a plain read-only reader writes its read marks and, after a crash,
    rebuilds the index there). A ``-wal`` without its ``-shm`` leaves only the plain read-only open, which makes
    the ``-shm``."""
    uri = "file:" + os.path.abspath(db_path) + "?mode=ro"
    if not os.path.exists(db_path + WAL_SUFFIX):
        return uri + "&immutable=1"
    return uri + "&readonly_shm=1" if os.path.exists(db_path + SHM_SUFFIX) else uri


def open_untouched(path: str | os.PathLike[str], writable: bool = False) -> ExperimentStore:
    """Open a store for reading without changing a byte of its folder, nor making a file there, whoever else has
    it open or left it (:func:`_untouched_uri`): what a resume reads to decide whether it may go on, so that a
    refused resume leaves the experiment as it was.

    Args:
        path: The experiment folder or the database file.
        writable: Also refuse, as a writer's :meth:`ExperimentStore.open` would, a store this version can read but
            not write (a newer schema whose ``readable_from`` it meets): a resume, which will write it, is refused
            on this view, before it starts anything (it was refused only when the writer opened it, after Ray's
            start).

    Raises:
        StoreError: As :meth:`ExperimentStore.open`: not an experiment, not a store, or a newer schema (with
            ``writable``, one this version cannot write).
    """
    return ExperimentStore.open(path, readonly=True, untouched=True, writable=writable)


def unused_name(storage: str, name: str) -> str:
    """An experiment name free in ``storage``: ``name``, else ``name_2``, ``name_3``, ... (the first whose folder does
    not exist). For the names fluidsalus makes itself (``<trainable>_<date>``), which two runs of one second share.

    Args:
        storage: The folder the experiment goes in.
        name: The name wanted.
    """
    fresh, count = name, 1
    while os.path.exists(os.path.join(storage, fresh)):
        count += 1
        fresh = f"{name}_{count}"
    return fresh


def written_by_ray(path: str | os.PathLike[str]) -> bool:
    """Whether Ray Tune wrote the experiment folder ``path`` (its ``experiment_state`` file is there)."""
    try:
        names = os.listdir(path)
    except OSError:  # (no readable folder)
        return False
    return any(name.startswith("experiment_state") for name in names)


def resolve_db_path(path: str | os.PathLike[str]) -> str:
    """Map an experiment folder or a path to its ``experiment.db`` onto the database file path."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return os.path.join(p, DB_FILENAME)
    return p


def _readable_from(conn: sqlite3.Connection, version: int) -> int:
    """The lowest schema that can read the store (its ``store_info``), or ``version`` when it does not say."""
    try:
        row = conn.execute("SELECT value FROM store_info WHERE key = 'readable_from'").fetchone()
    except sqlite3.OperationalError:  # no such table: written before it, or by a version without it
        return version
    try:
        return int(row[0]) if row is not None else version
    except (TypeError, ValueError):
        return version

_P = ParamSpec("_P")
_T = TypeVar("_T")


def unreadable(db_path: str, error: sqlite3.DatabaseError) -> StoreError:
    """The error of a store SQLite cannot read past its header: a page damaged after the store was opened (a torn
    write, a bad sector, a copy cut short), a table dropped by another tool, or a lock held elsewhere. Readers
    (``fluidsalus ls``, ``ExperimentAnalysis``, ``ResultGrid.read``, a resume) got SQLite's bare error, which named
    neither the store nor what was wrong with it."""
    what = "cannot be read" if isinstance(error, sqlite3.OperationalError) else "is damaged"
    return StoreError(f"the experiment store {db_path!r} {what} ({error})")


def _where(equal: Mapping[str, Any], *always: str) -> tuple[str, tuple[Any, ...]]:
    """A reader's ``WHERE`` clause (with its leading space; ``""`` for none) and its arguments: each column of
    ``equal`` whose value is not None equal to that value (the readers' optional ``trial_id`` and ``kind``), and
    each of the conditions ``always`` (``deleted = 0``)."""
    clauses = [f"{column} = ?" for column, value in equal.items() if value is not None]
    clauses += always
    return (" WHERE " + " AND ".join(clauses) if clauses else "",
            tuple(value for value in equal.values() if value is not None))


def trial_names_of(events: Iterable[EventRow]) -> dict[str, str]:
    """The names a run's ``trial_name`` function gave its trials (the ``"name"`` of their
    :data:`TRIAL_DIRNAME_EVENT`), by trial id, from the store's events in their order (all of them, or those of that
    kind: :meth:`ExperimentStore.trial_names`, or a reader that has read them all already); a trial it did not name
    is not in it."""
    return {e.trial_id: str(e.data["name"]) for e in events
            if e.kind == TRIAL_DIRNAME_EVENT and e.trial_id and e.data and "name" in e.data}


def _reads(method: Callable[Concatenate[ExperimentStore, _P], _T]) -> Callable[Concatenate[ExperimentStore, _P], _T]:
    """An :class:`ExperimentStore` read: SQLite's errors out of it become :func:`unreadable`'s StoreError."""

    @functools.wraps(method)
    def read(self: ExperimentStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:  # (OperationalError included: "no such table: trials")
            raise unreadable(self.db_path, e) from e

    return read


def remove_folder(path: str) -> None:
    """Remove a folder the store no longer lists (a checkpoint's), for :meth:`ExperimentStore.after_commit`: one
    already gone is fine; one that cannot be removed raises, so that the clean-up warns of it (``rmtree``'s
    ``ignore_errors`` left it on disk without a word)."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass


def _run_after_commit(action: Callable[[], None]) -> None:
    """Run one action of :meth:`ExperimentStore.after_commit`; one that fails is logged, not raised: its rows are
    committed already, so the failure cannot undo them, and the actions after it (other folders to remove) still run
    (a raise dropped them, leaving their folders on disk, and ended the run over a file it could not remove)."""
    try:
        action()
    except Exception as e:  # noqa: BLE001 (any failure of a clean-up: it is reported, the run goes on)
        logger.warning("could not clean up after a store write (%s): %s: %s; the store is up to date, the files it no "
                       "longer lists may be left on disk", _describe_action(action), type(e).__name__, e)


def _describe_action(action: Callable[[], None]) -> str:
    """A clean-up action in words: the function and the path it acts on, where it is a ``functools.partial``."""
    func, args = (action.func, action.args) if isinstance(action, functools.partial) else (action, ())
    if isinstance(func, types.MethodType):  # (a bound method, ``Path(p).unlink``: its path)
        args = (func.__self__, *args)
    return f"{getattr(func, '__qualname__', repr(func))}({', '.join(map(str, args))})"


class ExperimentStore:
    """Reads and (from the driver only) writes one experiment's SQLite file.

    Use :meth:`create` for a new experiment and :meth:`open` for an existing one.
    """

    def __init__(self, conn: sqlite3.Connection, db_path: str, readonly: bool) -> None:
        self._conn = conn
        self.db_path = db_path
        self.readonly = readonly
        self._in_tx = False
        self._after_commit: list[Callable[[], None]] = []  # see after_commit

    @property
    def experiment_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.db_path))

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, experiment_dir: str, name: str, spec: Mapping[str, Any], metric: str | None,
               mode: str | None) -> ExperimentStore:
        """Create the experiment folder and a new, empty store in it.

        Raises:
            StoreError: If a store already exists there.
        """
        db_path = os.path.join(experiment_dir, DB_FILENAME)
        os.makedirs(experiment_dir, exist_ok=True)
        try:  # claimed at once: of two drivers creating the same experiment, one gets it and the other this error
            os.close(os.open(db_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            raise StoreError(f"an experiment store already exists at {db_path!r}") from None
        try:
            conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)  # (an empty file: new)
        except BaseException:
            os.remove(db_path)
            raise
        try:
            cls._configure(conn)
            now = time.time()
            conn.execute("BEGIN")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO experiment (id, name, status, metric, mode, spec_json, created_at, updated_at)"
                " VALUES (1, ?, 'RUNNING', ?, ?, ?, ?, ?)",
                (name, metric, mode, dumps(dict(spec)), now, now),
            )
            _write_store_info(conn)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            remove_store_files(db_path)  # this store's own files: it claimed the database file
            raise
        return cls(conn, db_path, readonly=False)

    @classmethod
    def open(cls, path: str | os.PathLike[str], readonly: bool = False, immutable: bool = False,
             untouched: bool = False, writable: bool = False) -> ExperimentStore:
        """Open an existing store, given its experiment folder or its ``experiment.db``.

        A writer first reads the file's header on a connection that changes nothing (:func:`_untouched_uri`), and
        connects for writing (which makes the ``-wal``/``-shm`` files, brings an older schema up to date and
        rewrites the checkpoint paths of a moved experiment) only once it holds a store this version can write: a
        store it refuses is left as it was.

        Args:
            path: The experiment folder or the database file.
            readonly: Open without any write access (safe on a running experiment).
            immutable: With ``readonly``, read the database file alone (SQLite's ``immutable=1``) and create no
                ``-wal``/``-shm`` files: only for a store that no process has open.
            untouched: With ``readonly``, change no byte beside the store and make no file
                (:func:`open_untouched`).
            writable: With ``readonly``, refuse a store this version could not write, as a writer's open does.

        Raises:
            StoreError: If there is no store there, the file is not a fluidsalus store, or it was written
                by a newer fluidsalus.
        """
        db_path = resolve_db_path(path)
        if not os.path.exists(db_path):
            raise StoreError(f"{os.fspath(path)!r} is not a fluidsalus experiment (no {DB_FILENAME} found)")
        _check_sqlite_file(db_path)
        if not readonly:  # (what a writer would refuse, refused before it connects: see above)
            cls._connect_checked(db_path, _untouched_uri(db_path), writing=True)[0].close()
        if readonly:
            uri = _untouched_uri(db_path) if untouched else \
                "file:" + os.path.abspath(db_path) + "?mode=ro" + ("&immutable=1" if immutable else "")
        else:
            uri = None
        conn, version = cls._connect_checked(db_path, uri, writing=not readonly or writable)
        store = cls(conn, db_path, readonly=readonly)
        if not readonly:
            try:
                cls._configure(conn)
                cls._migrate(conn, version)
                store._relocate()
            except sqlite3.DatabaseError as e:  # (a page past the header damaged: the checkpoints table's, say)
                conn.close()
                raise unreadable(db_path, e) from e
            except BaseException:
                conn.close()
                raise
        return store

    @staticmethod
    def _connect_checked(db_path: str, uri: str | None, writing: bool) -> tuple[sqlite3.Connection, int]:
        """Connect to ``db_path`` (a read-write connection when ``uri`` is None) and check its header: a
        fluidsalus store of a schema this version can read (and, when ``writing``, write).

        Returns:
            The connection and the store's schema version.

        Raises:
            StoreError: It is not one (the connection is closed).
        """
        try:
            if uri is not None:
                conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            else:
                conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        except sqlite3.OperationalError as e:
            raise StoreError(f"could not open the experiment store {db_path!r}: {e}") from None
        try:
            # (in one read transaction: a creation that commits between two reads made a store being created
            # look like a foreign file, "an SQLite file but not a fluidsalus experiment store": the review's race)
            conn.execute("BEGIN")
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                readable_from = _readable_from(conn, version) if version > SCHEMA_VERSION else version
            finally:
                conn.execute("COMMIT")
        except sqlite3.OperationalError as e:  # the file is a database, but SQLite cannot read it now
            conn.close()
            raise StoreError(f"could not open the experiment store {db_path!r}: {e}") from None
        except sqlite3.DatabaseError as e:
            conn.close()
            raise StoreError(f"{db_path!r} is not a fluidsalus experiment store ({e})") from None
        if app_id != APPLICATION_ID:
            conn.close()
            if app_id == 0 and tables == 0:  # (the create's transaction sets the id with the schema: not committed
                # yet, or cut short)
                raise StoreError(f"{db_path!r} holds no tables yet: an experiment store that its driver is "
                                 "creating (try again in a moment), or whose creation was cut short")
            raise StoreError(f"{db_path!r} is an SQLite file but not a fluidsalus experiment store")
        if version > SCHEMA_VERSION and (writing or readable_from > SCHEMA_VERSION):
            conn.close()
            reads = f"reads schema {SCHEMA_VERSION} and older"
            if readable_from <= SCHEMA_VERSION:
                reads += ", and can read this store but not write it"
            raise StoreError(
                f"{db_path!r} was written by a newer fluidsalus (store schema {version}; this version "
                f"{reads}). Upgrade fluidsalus to open it."
            )
        return conn, version

    def here(self, path: str | None) -> str | None:
        """A checkpoint path the store recorded, where it is now.

        A checkpoint is ``<trial folder>/<checkpoint folder>`` in the experiment's folder, recorded as an absolute
        path. When the experiment's folder was moved or copied (to another disk, to a laptop), the same two
        folders under this store's folder are the checkpoint, as Ray finds the checkpoints of a moved experiment.

        Args:
            path: The recorded path, or None.

        Returns:
            The path under this store's experiment folder when that folder holds it, else ``path`` unchanged.
        """
        if not path:
            return path
        moved = os.path.join(self.experiment_dir, os.path.basename(os.path.dirname(path)), os.path.basename(path))
        return moved if moved != path and os.path.isdir(moved) else path

    def _relocate(self) -> None:
        """Rewrite the recorded checkpoint paths of a moved or copied experiment (:meth:`here`), so a run that
        continues it keeps its checkpoints and its retention finds them."""
        rows = self._conn.execute("SELECT id, path FROM checkpoints").fetchall()
        moved = [(new, row_id) for row_id, path in rows if (new := self.here(path)) != path]
        trials = self._conn.execute("SELECT trial_id, checkpoint_path FROM trials WHERE checkpoint_path IS NOT NULL")
        moved_trials = [(new, trial_id) for trial_id, path in trials.fetchall() if (new := self.here(path)) != path]
        if moved or moved_trials:
            with self.transaction():
                self._conn.executemany("UPDATE checkpoints SET path = ? WHERE id = ?", moved)
                self._conn.executemany("UPDATE trials SET checkpoint_path = ? WHERE trial_id = ?", moved_trials)

    @staticmethod
    def _migrate(conn: sqlite3.Connection, version: int) -> None:
        """Bring a store written by an older fluidsalus up to :data:`SCHEMA_VERSION`, in one transaction (and give
        one of this schema that an earlier version of it wrote its ``store_info``)."""
        if version >= SCHEMA_VERSION:
            missing = {name for name in ("store_info", *_INDICES)
                       if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is None}
            if missing:
                try:
                    conn.execute("BEGIN")
                    if "store_info" in missing:
                        _write_store_info(conn)
                    for name in missing & set(_INDICES):
                        conn.execute(_INDICES[name])
                    conn.execute("COMMIT")
                except sqlite3.OperationalError:  # (a store busy elsewhere: a later opening adds them)
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
            return
        conn.execute("BEGIN")
        try:
            for to in range(version + 1, SCHEMA_VERSION + 1):
                conn.execute(_MIGRATIONS[to])
            for statement in _INDICES.values():
                conn.execute(statement)
            _write_store_info(conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def _configure(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: a committed transaction survives a killed process (it is in the WAL file);
        # only an OS crash or power loss can drop the last transactions. FULL would fsync every batch.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")

    def close(self) -> None:
        """Close the connection. A writer first copies the write-ahead log into the database file (a ``PASSIVE``
        checkpoint, which waits for no one), so ``experiment.db`` alone holds every row even when a reader that
        closes later keeps the ``-wal`` file (SQLite folds the log in at the last close only, and a read-only
        connection cannot). A reader in the middle of a read keeps the frames after its snapshot in the log."""
        with contextlib.suppress(sqlite3.Error):
            if not self.readonly and not self._in_tx:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()

    @classmethod
    def fold_log(cls, path: str | os.PathLike[str]) -> None:
        """Remove the ``-wal`` and ``-shm`` files a reader that closed after the run's writer left beside the store
        (a read-only connection cannot): a writer connection opened and closed folds them in when it is the last
        one, as SQLite does at a last close; while another process has the store open, nothing changes. Nothing
        is done while a driver runs the experiment (its :class:`DriverLock` is held).

        Args:
            path: The experiment folder or the database file.
        """
        db_path = resolve_db_path(path)
        if not os.path.exists(db_path + WAL_SUFFIX):
            return
        try:
            lock = DriverLock.acquire(os.path.dirname(db_path))
        except StoreError:
            return  # a driver runs it: its own close folds the log in
        try:
            with contextlib.suppress(StoreError, sqlite3.Error, OSError):
                cls.open(db_path).close()
        finally:
            lock.release()

    def write_back_if_removed(self) -> bool:
        """Write the store back to its path if its file was deleted (its experiment folder removed while a run
        writes it), and go on writing there. Every :meth:`transaction` checks this first (a ``stat``), and records
        a :data:`STORE_RESTORED_EVENT` when it wrote the store back.

        SQLite keeps writing a deleted file through the open connection, so a run whose folder was removed ended
        "successfully" with nothing left on disk. The open connection still holds every row: they are copied to a
        new file at the same path (SQLite's online backup), which the store then writes.

        Returns:
            True when the file was missing and has been written back.
        """
        if self.readonly or self._in_tx or os.path.exists(self.db_path):
            return False
        staging = f"{self.db_path}.restoring"
        for attempt in range(WRITE_BACK_ATTEMPTS):
            os.makedirs(self.experiment_dir, exist_ok=True)
            try:
                copy = sqlite3.connect(staging)
                try:
                    self._conn.backup(copy)
                finally:
                    copy.close()
                os.replace(staging, self.db_path)
                break
            except (sqlite3.OperationalError, OSError):
                if attempt == WRITE_BACK_ATTEMPTS - 1 or os.path.isdir(self.experiment_dir):
                    raise
                time.sleep(WRITE_BACK_RETRY_S)  # the folder went again (its removal was still under way): again
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._conn = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False)
        self._configure(self._conn)
        logger.warning("the store %s was deleted while it was written (its experiment folder removed?): what it "
                       "held is written back there, and writing goes on; deleted checkpoints and other files are lost",
                       self.db_path)
        return True

    def __enter__(self) -> ExperimentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one transaction; it commits (is durable) when the block exits normally.

        Raises:
            StoreError: SQLite could not write (a full disk, a file it cannot write): the transaction is rolled
                back, and the message names the store.
        """
        if self.readonly:
            raise StoreError(f"{self.db_path!r} was opened read-only")
        if self._in_tx:
            yield
            return
        restored = self.write_back_if_removed()
        # A Ctrl-C's KeyboardInterrupt is raised as a call returns: the BEGIN and the COMMIT are in the try, and
        # ``committing`` tells a COMMIT that took from one that did not (a KeyboardInterrupt raised as the BEGIN
        # returned left a transaction open that no one rolled back: the interrupted run could not be marked
        # INTERRUPTED, every later write failing with "cannot start a transaction within a transaction").
        committing = False
        try:
            self._conn.execute("BEGIN")
            self._in_tx = True
            if restored:
                self._conn.execute("INSERT INTO events (ts, kind, trial_id, device, data_json) VALUES (?, ?, ?, ?, ?)",
                                   (time.time(), STORE_RESTORED_EVENT, None, None, dumps({"reason": "file deleted"})))
            yield
            committing = True
            self._conn.execute("COMMIT")
        except BaseException as e:
            if committing and not isinstance(e, sqlite3.Error) and not self._conn.in_transaction:
                # (the COMMIT took; a Ctrl-C landed as it returned: what it removes goes, then the Ctrl-C)
                self._in_tx = False
                self._run_after_commits()
                raise
            self._after_commit.clear()  # (what the rolled-back writes recorded stays: its folders too)
            with contextlib.suppress(sqlite3.Error):  # (SQLite may have rolled back already)
                self._conn.execute("ROLLBACK")
            # (a read inside the write raises unreadable()'s StoreError, SQLite's error its cause: the advice
            # below was lost for it)
            if isinstance(e, StoreError) and isinstance(e.__cause__, sqlite3.OperationalError):
                e = e.__cause__
            if isinstance(e, sqlite3.OperationalError):
                raise StoreError(f"could not write the experiment store {self.db_path!r}: {e} (nothing of this "
                                 "write was kept; if the disk is full, free space, then run the experiment again "
                                 "with resume=True: what was written before is kept)") from e
            raise
        finally:
            self._in_tx = False
        self._run_after_commits()

    def _run_after_commits(self) -> None:
        """Run (and forget) the actions :meth:`after_commit` queued for the transaction that committed."""
        done, self._after_commit = self._after_commit, []
        for action in done:
            _run_after_commit(action)

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the current transaction commits (at once outside one), never if it rolls back: what
        removes files the transaction's rows stop listing (checkpoint folders it marks deleted), so a rollback, a
        Ctrl-C's ``KeyboardInterrupt`` inside it say, leaves the rows and their files as they were (the folders
        went, and the restored rows named folders that were gone: a resume lost the iterations since the last one
        that was left)."""
        if self._in_tx:
            self._after_commit.append(action)
        else:
            _run_after_commit(action)

    def set_experiment(self, **fields: Any) -> None:
        """Update the experiment row (``status``, ``error``, ``finished_at``, ``searcher_state``, ...)."""
        allowed = {"status", "error", "finished_at", "searcher_state", "spec_json", "metric", "mode"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"unknown experiment fields {sorted(unknown)}")
        fields["updated_at"] = time.time()
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction():
            self._conn.execute(f"UPDATE experiment SET {cols} WHERE id = 1", tuple(fields.values()))

    def add_trials(self, trials: Iterable[tuple[str, int, Mapping[str, Any]]], group_id: str | None = None,
                   budget: float | None = None) -> None:
        """Insert new PENDING trials given as ``(trial_id, seq, config)``."""
        now = time.time()
        rows = [(tid, seq, dumps(dict(cfg)), PENDING, group_id, budget, now, config_pickle(cfg))
                for tid, seq, cfg in trials]
        with self.transaction():
            self._conn.executemany(
                "INSERT INTO trials (trial_id, seq, config_json, status, group_id, budget, created_at, config_pickle)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def update_trial(self, trial_id: str, **fields: Any) -> None:
        """Set columns of one trial. ``last_result`` (a dict) is encoded to ``last_result_json``."""
        if "last_result" in fields:
            fields["last_result_json"] = dumps(fields.pop("last_result"))
        unknown = set(fields) - _TRIAL_COLUMNS
        if unknown:
            raise ValueError(f"unknown trial fields {sorted(unknown)}")
        if "status" in fields and fields["status"] not in TRIAL_STATUSES:
            raise ValueError(f"status must be one of {TRIAL_STATUSES}, got {fields['status']!r}")
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction():
            self._conn.execute(f"UPDATE trials SET {cols} WHERE trial_id = ?", (*fields.values(), trial_id))

    def take_back_start(self, trial_id: str) -> None:
        """Record that a trial never started after all: its ``started_at`` and ``trial_start`` events go. For a trial
        whose device began it only for its trainable to find nothing to run (the Optuna front end's trial whose start
        found the optimisation over: the study has no trial for it), so it counts, as one the run's end stops before
        its first turn, among the trials that never started (``ls``, the final line, ``inspect``'s queue waits)."""
        with self.transaction():
            self._conn.execute("UPDATE trials SET started_at = NULL WHERE trial_id = ?", (trial_id,))
            self._conn.execute("DELETE FROM events WHERE kind = ? AND trial_id = ?", (TRIAL_START_EVENT, trial_id))

    def mark_checkpoints_deleted(self, paths: Sequence[str]) -> None:
        """Record that checkpoint folders were removed (retention); they are no longer offered for restore."""
        with self.transaction():
            self._conn.executemany("UPDATE checkpoints SET deleted = 1 WHERE path = ?", [(p,) for p in paths])

    def update_trial_config(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """Replace a trial's config (PBT's exploit restarts a trial with a new one)."""
        with self.transaction():
            self._conn.execute("UPDATE trials SET config_json = ?, config_pickle = ? WHERE trial_id = ?",
                               (dumps(dict(config)), config_pickle(config), trial_id))

    def add_results(self, rows: Sequence[tuple[str, int, int, float, Mapping[str, Any]]]) -> None:
        """Insert results given as ``(trial_id, attempt, iteration, ts, metrics)``."""
        with self.transaction():
            self._conn.executemany(
                "INSERT INTO results (trial_id, attempt, iteration, ts, metrics_json) VALUES (?, ?, ?, ?, ?)",
                [(t, a, i, ts, dumps(m)) for t, a, i, ts, m in rows],
            )

    def add_events(self, rows: Sequence[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]]
                   ) -> None:
        """Insert events given as ``(ts, kind, trial_id, device, data)``."""
        with self.transaction():
            self._conn.executemany(
                "INSERT INTO events (ts, kind, trial_id, device, data_json) VALUES (?, ?, ?, ?, ?)",
                [(ts, k, t, d, None if data is None else dumps(data)) for ts, k, t, d, data in rows],
            )

    def add_checkpoint(self, trial_id: str, iteration: int, path: str, metrics: Mapping[str, Any]) -> None:
        with self.transaction():
            self._conn.execute(
                "INSERT INTO checkpoints (trial_id, iteration, path, metrics_json, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (trial_id, iteration, path, dumps(metrics), time.time()),
            )

    def add_searcher_calls(self, rows: Sequence[tuple[str, str, Any]]) -> None:
        """Append searcher calls given as ``(kind, trial_id, data)`` (see ``trialgroup/searcher_log.py``)."""
        with self.transaction():
            self._conn.executemany("INSERT INTO searcher_calls (kind, trial_id, data_json) VALUES (?, ?, ?)",
                                   [(kind, tid, dumps(data)) for kind, tid, data in rows])

    def set_searcher_state(self, state: str) -> None:
        """Save the searcher's whole state (JSON text) and drop the calls logged before it."""
        with self.transaction():
            self.set_experiment(searcher_state=state)
            self._conn.execute("DELETE FROM searcher_calls")

    # ------------------------------------------------------------------ reading

    @_reads
    def sessions(self) -> list[tuple[float, float]]:
        """The experiment's sessions, ``(start, end)`` each: the first from its creation, then one from each
        ``resume`` event (a resume of an interrupted run, or of one whose driver was killed). A session that a
        later one followed ends at the last thing it recorded (an event or a result: its devices' stop, as a
        rule); the last one at ``finished_at``, or, while it runs (or its driver is gone), at ``updated_at`` or
        the last thing recorded, the later. Their lengths summed are the time the experiment ran, without the time
        it sat interrupted between them (``fluidsalus ls``'s DURATION)."""
        exp = self._conn.execute("SELECT created_at, updated_at, finished_at FROM experiment WHERE id = 1").fetchone()
        if exp is None:
            raise StoreError(f"{self.db_path!r} has no experiment row (the store is damaged)")
        created, updated, finished = exp
        starts = [created] + [ts for (ts,) in self._conn.execute(
            "SELECT ts FROM events WHERE kind = 'resume' ORDER BY id")]

        def last_record(since: float, before: float) -> float | None:
            ends = [self._conn.execute(f"SELECT MAX(ts) FROM {table} WHERE ts >= ? AND ts < ?",
                                       (since, before)).fetchone()[0] for table in ("events", "results")]
            return max((e for e in ends if e is not None), default=None)

        out = []
        for start, following in zip(starts, [*starts[1:], math.inf], strict=True):
            if following == math.inf:
                end = finished or max(updated or start, last_record(start, following) or start)
            else:
                end = last_record(start, following) or start
            out.append((start, max(start, end)))
        return out

    @_reads
    def experiment(self) -> dict[str, Any]:
        row = self._conn.execute(
            "SELECT name, status, metric, mode, spec_json, searcher_state, error, created_at, updated_at,"
            " finished_at FROM experiment WHERE id = 1"
        ).fetchone()
        if row is None:
            raise StoreError(f"{self.db_path!r} has no experiment row (the store is damaged)")
        keys = ("name", "status", "metric", "mode", "spec", "searcher_state", "error", "created_at",
                "updated_at", "finished_at")
        out = dict(zip(keys, row, strict=True))
        out["spec"] = loads(out["spec"])
        return out

    @_reads
    def trials(self, trial_id: str | None = None) -> list[TrialRow]:
        """The trials in creation order, decoded; with ``trial_id``, only that one (an index lookup: a caller that
        wants one trial at each of many events decoded every row each time, which made a sweep of failing trials
        quadratic)."""
        where, args = _where({"trial_id": trial_id})
        cur = self._conn.execute(
            "SELECT trial_id, seq, config_json, status, group_id, budget, device, attempt, num_failures,"
            " last_iteration, last_result_json, checkpoint_path, stop_reason, error, traceback, created_at,"
            " started_at, finished_at FROM trials" + where + " ORDER BY seq", args
        )
        out = []
        for r in cur.fetchall():
            out.append(TrialRow(r[0], r[1], loads(r[2]), r[3], r[4], r[5], r[6], r[7], r[8], r[9], loads(r[10]),
                                self.here(r[11]), *r[12:]))
        return out

    @_reads
    def configs(self) -> dict[str, dict[str, Any]]:
        """The configs of the trials whose config JSON does not hold exactly (:func:`config_pickle`), as they were
        given, by trial id. A config that does not unpickle here (its class's module is not importable, say) is
        left out, with a warning: its JSON is all there is. Empty for a store of schema 2 opened read-only."""
        try:
            rows = self._conn.execute(
                "SELECT trial_id, config_pickle FROM trials WHERE config_pickle IS NOT NULL").fetchall()
        except sqlite3.OperationalError:  # (no such column: an older store, read-only)
            return {}
        out: dict[str, dict[str, Any]] = {}
        for trial_id, blob in rows:
            try:
                out[trial_id] = cloudpickle.loads(blob)
            except Exception as e:  # noqa: BLE001 - e.g. a class of a module this process cannot import
                logger.warning("the config of trial %s cannot be unpickled here (%s: %s); its JSON is used", trial_id,
                               type(e).__name__, e)
        return out

    @_reads
    def results(self, trial_id: str | None = None, latest_attempt_only: bool = True) -> list[ResultRow]:
        """Results in order. With ``latest_attempt_only``, the trial's current history: an iteration redone after a
        failure or a restore shows once, from its latest attempt, and an earlier attempt's rows from where a later
        attempt began are gone even where that attempt ended sooner (a trial retried from an older checkpoint that
        then ended kept the dead attempt's later rows, whose best score chose it as the best trial, as Ray's
        last result would not)."""
        where, args = _where({"trial_id": trial_id})
        sql = "SELECT trial_id, attempt, iteration, ts, metrics_json FROM results" + where
        sql += " ORDER BY trial_id, iteration, attempt"
        rows = [ResultRow(r[0], r[1], r[2], r[3], loads(r[4])) for r in self._conn.execute(sql, args)]
        if not latest_attempt_only:
            return rows
        began: dict[tuple[str, int], int] = {}  # (trial, attempt) -> its first iteration
        for row in rows:  # (in iteration order: the first seen is the attempt's first)
            began.setdefault((row.trial_id, row.attempt), row.iteration)
        superseded_from: dict[tuple[str, int], float] = {}  # (trial, attempt) -> where a later attempt began
        earliest_later: dict[str, float] = {}
        for trial, attempt in sorted(began, reverse=True):  # each trial's latest attempt first
            superseded_from[(trial, attempt)] = earliest_later.get(trial, math.inf)
            earliest_later[trial] = min(superseded_from[(trial, attempt)], began[(trial, attempt)])
        return [row for row in rows if row.iteration < superseded_from[(row.trial_id, row.attempt)]]

    @_reads
    def trial_seqs(self, trial_id: str | None = None) -> dict[str, int]:
        """Each trial's creation index (``seq``), without decoding the rest of its row; with ``trial_id``, that
        trial's alone."""
        where, args = _where({"trial_id": trial_id})
        return {row[0]: int(row[1]) for row in self._conn.execute("SELECT trial_id, seq FROM trials" + where, args)}

    @_reads
    def trial_dirs(self, trial_id: str | None = None) -> dict[str, str]:
        """Each trial's folder: ``<experiment>/<trial_id>``, or the name a :data:`TRIAL_DIRNAME_EVENT` gave it.

        Args:
            trial_id: Only this trial's (a caller that meets trials one at a time: reading every trial's each time
                made a sweep whose searcher creates its trials as it goes quadratic).

        Returns:
            Trial id -> absolute folder, for every trial of the store (or the one asked for, if the store has it).
        """
        names = {e.trial_id: str(e.data["dirname"]) for e in self.events(TRIAL_DIRNAME_EVENT, trial_id)
                 if e.trial_id and e.data and "dirname" in e.data}
        where, args = _where({"trial_id": trial_id})
        folder = self.experiment_dir
        return {row[0]: os.path.join(folder, names.get(row[0], row[0]))
                for row in self._conn.execute("SELECT trial_id FROM trials" + where + " ORDER BY seq", args)}

    @_reads
    def trials_stored_after(self, mark: int = 0) -> tuple[int, dict[str, int], dict[str, str]]:
        """The creation index (:meth:`trial_seqs`) and folder (:meth:`trial_dirs`) of each trial stored since
        ``mark``, read in one query, and the mark to pass the next time.

        For a reader that meets trials as a run makes them (the Tune front end's callbacks, which name each trial's
        view when a searcher adds it): it reads each trial once whether a batch of thousands was made at once or one
        at a time, where a read per trial (three queries) cost about 0.4 ms a trial, 2 s before the first start of a
        5,000-trial sweep, and a read of every trial at each one was quadratic.

        Args:
            mark: 0 for every trial, or the mark the last call returned: only the trials stored since then.

        Returns:
            ``(mark, seqs, folders)``: the mark (the trials table's last row number read; ``mark`` if none is new),
            then trial id -> ``seq`` and trial id -> absolute folder for those trials, as :meth:`trial_seqs` and
            :meth:`trial_dirs` give them.
        """
        # (one statement, one snapshot: a trial and its folder's event are stored in one transaction; each trial's
        # events come by the events_by_trial index, in the order they were written: its last dirname wins)
        rows = self._conn.execute(
            "SELECT trials.rowid, trials.trial_id, trials.seq, events.data_json FROM trials LEFT JOIN events"
            " ON events.trial_id = trials.trial_id AND events.kind = ? WHERE trials.rowid > ?"
            " ORDER BY trials.rowid, events.id", (TRIAL_DIRNAME_EVENT, mark)).fetchall()
        seqs: dict[str, int] = {}
        names: dict[str, str] = {}
        for number, trial_id, seq, data_json in rows:
            mark = max(mark, number)
            seqs[trial_id] = int(seq)
            data = loads(data_json)
            if trial_id and data and "dirname" in data:
                names[trial_id] = str(data["dirname"])
        folder = self.experiment_dir
        return mark, seqs, {trial_id: os.path.join(folder, names.get(trial_id, trial_id)) for trial_id in seqs}

    @_reads
    def trial_names(self) -> dict[str, str]:
        """The names a run's ``trial_name`` function gave its trials (the ``"name"`` of their
        :data:`TRIAL_DIRNAME_EVENT`), by trial id; a trial it did not name is not in it."""
        return trial_names_of(self.events(TRIAL_DIRNAME_EVENT))

    @_reads
    def events(self, kind: str | None = None, trial_id: str | None = None) -> list[EventRow]:
        """The events in the order they were written; only those of ``kind`` and of ``trial_id``, when given."""
        where, args = _where({"kind": kind, "trial_id": trial_id})
        sql = "SELECT ts, kind, trial_id, device, data_json FROM events" + where + " ORDER BY id"
        return [EventRow(r[0], r[1], r[2], r[3], loads(r[4])) for r in self._conn.execute(sql, args)]

    @_reads
    def searcher_calls(self) -> list[tuple[str, str, Any]]:
        """The searcher calls logged since its state was last saved, in order, as ``(kind, trial_id, data)``
        (none in a store of schema 1 opened read-only)."""
        try:
            rows = self._conn.execute("SELECT kind, trial_id, data_json FROM searcher_calls ORDER BY id").fetchall()
        except sqlite3.OperationalError:  # no such table: a read-only store of schema 1
            return []
        return [(r[0], r[1], loads(r[2])) for r in rows]

    @_reads
    def checkpoints(self, trial_id: str | None = None, include_deleted: bool = False) -> list[dict[str, Any]]:
        where, args = _where({"trial_id": trial_id}, *(() if include_deleted else ("deleted = 0",)))
        sql = "SELECT trial_id, iteration, path, metrics_json, created_at, deleted FROM checkpoints" + where
        sql += " ORDER BY id"
        return [
            {"trial_id": r[0], "iteration": r[1], "path": self.here(r[2]), "metrics": loads(r[3]), "created_at": r[4]}
            for r in self._conn.execute(sql, args)
        ]

    @_reads
    def count(self, table: str) -> int:
        if table not in {"trials", "results", "events", "checkpoints"}:
            raise ValueError(f"unknown table {table!r}")
        return int(self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def finite(value: Any) -> bool:
    """True for a real number that is neither NaN nor infinite (an int always: one above ~1e308, too large for a
    float, made ``math.isfinite`` raise ``OverflowError``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)
