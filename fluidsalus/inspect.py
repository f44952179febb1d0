"""``fluidsalus.inspect(path)``: an experiment's goodput report, for notebooks and for ``fluidsalus inspect``.

The store is opened read-only (:func:`open_readonly`), so a running experiment can be inspected without
disturbing its writer, and nothing on disk changes. The figures are defined in ``docs/goodput.md`` and computed
by :mod:`fluidsalus.goodput`.

    report = fluidsalus.inspect("~/fluidsalus_results/my_sweep")
    report.devices            # a pandas DataFrame, one row per device
    report.totals             # the same figures for the whole cluster (a dict)
    report.plot("sweep.png")  # lane timeline per device and goodput over time
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from fluidsalus import goodput as gp
from fluidsalus.errors import StoreError, error_summary, plural
from fluidsalus.progress import LIVE_WORDS, counts_text, format_metric, format_metric_column
from fluidsalus.store import (
    DB_FILENAME,
    ERROR,
    ERROR_AFTER_STOP_EVENT,
    FINAL_STATUSES,
    PAUSED,
    PENDING,
    RUNNING,
    TERMINATED,
    TRIAL_RESTART_EVENT,
    TRIAL_STATUSES,
    DriverLock,
    EventRow,
    TrialRow,
    default_storage_paths,
    finite,
    open_readonly,
    restart_words,
    trial_names_of,
    written_by_ray,
)
from fluidsalus.trialgroup.dispatch import REFUSED_MIN_DEVICES, REFUSED_NO_CHECKPOINT, REFUSED_PAUSED

if TYPE_CHECKING:
    import pandas as pd

#: How ``fluidsalus ls`` and the report's header show a ``RUNNING`` experiment whose driver is gone
#: (:meth:`~fluidsalus.store.DriverLock.holder_gone`): killed before it could end the experiment.
DRIVER_GONE = "DRIVER GONE"
#: What the report's header and ``fluidsalus ls`` add about such an experiment.
DRIVER_GONE_HINT = (f"{DRIVER_GONE}: the experiment's driver was killed before it could end it; run it again with "
                    "resume=True (or Tuner.restore) to continue")


def shown_status(status: str, experiment_dir: str) -> str:
    """An experiment's status as ``fluidsalus ls`` and the report's header show it: the stored one, except
    :data:`DRIVER_GONE` for a ``RUNNING`` experiment whose driver is gone.

    Args:
        status: The stored status (``RUNNING``, ``FINISHED``, ``ERROR`` or ``INTERRUPTED``).
        experiment_dir: The experiment's folder (its lock file names its driver), or its ``experiment.db``.

    Returns:
        The status to show.
    """
    folder = os.path.dirname(experiment_dir) if os.path.isfile(experiment_dir) else experiment_dir
    return DRIVER_GONE if status == RUNNING and DriverLock.holder_gone(folder) else status


#: Version of the JSON layout of :meth:`Report.to_dict`; bumped when a field changes meaning or goes away.
JSON_SCHEMA_VERSION = 1
#: The trial outcome (``stop_reason``) of a trial the searcher or the stop rule ended early.
STOPPED_OUTCOME = "stopped"
#: Errored trials the table lists, one line each (the JSON lists them all): enough to see whether the trials failed
#: for one reason or for several, without a sweep of hundreds of failures filling the screen.
ERRORS_SHOWN = 10
#: How an ``error_after_stop`` record's stop is named (its ``stop`` in the JSON), by the record's ``moved``: None,
#: the device's record of a trial that met its stop rule; False, a stop of the driver's that ended the trial (its
#: scheduler's or searcher's, the run's end); True, one that restarts it (its ``restart`` says why).
AFTER_STOP_KINDS: dict[bool | None, str] = {None: "stop_rule", False: "stop", True: "restart"}
#: The ``stop`` of an ``error_after_stop`` record whose ``after_raise`` is true: the trial failed after
#: ``fail_fast="raise"``'s failure ended the run, before the run's stop reached it (Ray raised that failure at once and
#: never saw this one), whatever its ``moved`` says.
AFTER_RAISE_KIND = "after_raise"
#: Trials the table's "costliest trials" section lists, most compute first (the JSON's ``trials`` has every one):
#: enough to find the trials that cost most, few enough to read at a glance.
TRIALS_SHOWN = 5
#: What the planner line says of each reason a planned change (a move, a preemption) was held back
#: (``plan_refused``; the planner's ``REFUSED_*`` reasons), so that an idle device's cause reads plainly.
REFUSED_REASONS = {
    REFUSED_NO_CHECKPOINT: "a trial with no checkpoint to restart from",
    REFUSED_PAUSED: "a trial paused at its budget",
    REFUSED_MIN_DEVICES: "fewer devices than the trial's workers",
}
#: Held-back changes of the planner (``plan_refused``) the table lists, one line each (the JSON's ``planner.held_back``
#: has them all): the first ones explain a device left idle at the time.
HELD_BACK_SHOWN = 5
#: Devices the ``idle by cause`` line names per cause, most idle first (the JSON has every device's split).
IDLE_DEVICES_SHOWN = 2
#: Idle seconds below which a cause is left off the ``idle by cause`` line (it would print as 0.00s); so is a method
#: of the ``driver`` cause.
IDLE_SHOWN_MIN_S = 0.005
#: Methods the ``idle by cause`` line names in its ``driver`` cause, most waited for first (the JSON's
#: ``idle_driver`` has them all).
IDLE_METHODS_SHOWN = 4
#: The lines under the table that say what its columns hold (docs/goodput.md, "The table", says it at length).
TABLE_LEGEND = (
    "BUSY: share of the device's time at least one lane computed an iteration, reported or cut short by a failure "
    "(wasted work included; see help('fluidsalus.goodput')); SLOTS: busy lane-seconds / (slots x device-seconds);",
    "ITERS, USEFUL, WASTED: iterations reported, kept, and redone later; WASTED_S, WASTE%: compute seconds of wasted "
    "work (iterations redone later or cut short by a failure) and their share of the device's busy lane-seconds;",
    "IT/S and GOODPUT: all and useful iterations per device-second; LANES: peak open lanes.",
)
#: Columns of :attr:`Report.trials` (and of each entry of the JSON's ``trials``).
TRIAL_COLUMNS = ("trial_id", "status", "stop_reason", "device", "attempts", "failures", "iteration", "reported",
                 "useful", "wasted", "cut_short", "compute_s", "useful_s", "wasted_s", "waste_causes", "queued_s",
                 "queued_waits", "metric", "error", "config")
#: The searcher an experiment's spec names (``spec["searcher"]``) when ``fluidsalus.optuna.optimize`` ran it: the
#: report and ``fluidsalus ls`` then name its trials by their Optuna number and state too, as Optuna's log does.
OPTUNA_SEARCHER = "_StudyDriver"
#: Result keys of the Optuna front end (``fluidsalus.optuna.KEY_NUMBER``, ``KEY_STATE``): each report's result and
#: the trial's end carry its Optuna number, the end its state (``COMPLETE``, ``PRUNED``).
OPTUNA_NUMBER_KEY, OPTUNA_STATE_KEY = "optuna_number", "optuna_state"
#: Event the Optuna front end stores for each trial it started once ``optimize`` ends (data ``number``, ``state``:
#: the study's word, ``FAIL`` too, and the number of a trial that failed before its first report).
OPTUNA_TRIAL_EVENT = "optuna_trial"
#: The Optuna state of a trial whose objective raised (the front end ends it ``ERROR`` in the experiment).
OPTUNA_FAIL = "FAIL"
#: The Optuna states a trial ends in (``optuna.trial.TrialState.is_finished``).
OPTUNA_FINAL_STATES = ("COMPLETE", "PRUNED", OPTUNA_FAIL)
#: Columns :attr:`Report.trials` (and each entry of the JSON's ``trials``) adds for an experiment of the Optuna
#: front end: the trial's Optuna number and state (None where the store has neither: a trial that never started).
OPTUNA_TRIAL_COLUMNS = (OPTUNA_NUMBER_KEY, OPTUNA_STATE_KEY)
#: A trial that waited at least this long to start (``queued_s``, all its waits) counts on the ``queued`` line: a start
#: takes some milliseconds (placement, the device taking it) even with a place free.
QUEUED_SHOWN_MIN_S = 0.1

# Plot settings.
#: Figure width, inches.
PLOT_WIDTH_IN = 13.0
#: Height of one lane row of the timeline, inches, and the fixed part of each device's panel.
PLOT_LANE_ROW_IN, PLOT_DEVICE_BASE_IN = 0.45, 0.9
#: Height of the goodput-over-time panel, of the title and legend band, and of the bottom margin, inches.
PLOT_GOODPUT_IN, PLOT_HEADER_IN, PLOT_FOOTER_IN = 2.6, 1.3, 0.6
#: Resolution of the PNG.
PLOT_DPI = 110
#: Height of a busy bar within its lane row (1 = the whole row).
PLOT_BAR_HEIGHT = 0.7
#: A trial's number is written into its bar when the bar is at least this fraction of the time axis wide.
PLOT_LABEL_MIN_FRACTION = 0.012
#: Box behind a trial's number, so that it stays readable on hatching.
PLOT_LABEL_BOX = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.75}
#: Headroom above the highest goodput-over-time value (the panel's legend sits above the panel, not in it).
PLOT_GOODPUT_HEADROOM = 1.1
#: Runs of lane ids (``0-3``) a timeline row's label names before "+N more" (N: the lanes left out; a row shows every
#: lane that was never open beside another one of its rows).
PLOT_ROW_LANES_SHOWN = 2
#: Consecutive iterations of one trial in one lane are drawn as one bar when the gap between them is below
#: this fraction of the time axis (the gap is then invisible anyway; a longer one, e.g. a pause, stays visible).
PLOT_MERGE_GAP_FRACTION = 0.002
#: Colours: one per trial (cycled), lane open but idle, wasted work and goodput.
PLOT_TRIAL_CMAP = "tab20"
PLOT_IDLE_COLOR = "#e6e6e6"
PLOT_WASTE_COLOR = "#d62728"
#: Hatching of wasted work on the timeline (its colour is dark so that it shows on every trial colour).
PLOT_WASTE_HATCH, PLOT_HATCH_COLOR = "xxxx", "#222222"
PLOT_GOODPUT_COLOR = "#2ca02c"
PLOT_THROUGHPUT_COLOR = "#555555"
#: Shading of a device's time waiting for the driver (idle cause ``driver``), over its whole panel, and its opacity:
#: light enough that the grey of an open lane shows through.
PLOT_DRIVER_COLOR, PLOT_DRIVER_ALPHA = "#9467bd", 0.35
#: Marker style per timeline marker kind: (matplotlib marker, colour, label).
PLOT_MARKERS = {
    gp.MARK_FAILURE: ("X", "#d62728", "failure"),
    gp.MARK_OOM: ("*", "#ff7f0e", "out of memory"),
    gp.MARK_EXPLOIT: ("D", "#1f77b4", "PBT exploit (restart)"),
}


@dataclass(frozen=True)
class OptunaTrial:
    """A trial's Optuna number and state (``COMPLETE``, ``PRUNED``, ``FAIL``), each None where the store has none
    (a running trial's state; a trial that never started)."""

    number: int | None
    state: str | None

    @property
    def label(self) -> str:
        """``Optuna trial 11``, as Optuna's log names it (``Optuna trial -`` without a number)."""
        return f"Optuna trial {'-' if self.number is None else self.number}"


def is_optuna_experiment(experiment: Mapping[str, Any]) -> bool:
    """Whether ``fluidsalus.optuna.optimize`` ran the experiment (its stored spec names :data:`OPTUNA_SEARCHER`)."""
    spec = experiment.get("spec")
    return isinstance(spec, Mapping) and spec.get("searcher") == OPTUNA_SEARCHER


def optuna_trials(trials: Iterable[TrialRow], events: Iterable[EventRow]) -> dict[str, OptunaTrial]:
    """Each trial's Optuna number and state: from its last result (the end's, or a running trial's last report:
    its number), then from the :data:`OPTUNA_TRIAL_EVENT` events ``optimize`` stores as it ends (the study's own
    word, a ``FAIL`` too). Only for an experiment of the Optuna front end (:func:`is_optuna_experiment`)."""
    out: dict[str, OptunaTrial] = {}
    for t in trials:
        last = t.last_result or {}
        number, state = last.get(OPTUNA_NUMBER_KEY), last.get(OPTUNA_STATE_KEY)
        out[t.trial_id] = OptunaTrial(number if isinstance(number, int) and not isinstance(number, bool) else None,
                                      state if isinstance(state, str) else None)
    for ev in events:
        data = ev.data or {}
        if ev.kind != OPTUNA_TRIAL_EVENT or ev.trial_id is None:
            continue
        number, state = data.get("number"), data.get("state")
        known = out.get(ev.trial_id, OptunaTrial(None, None))
        out[ev.trial_id] = OptunaTrial(number if isinstance(number, int) else known.number,
                                       state if isinstance(state, str) else known.state)
    return out


def optuna_words(trials: Iterable[TrialRow], known: Mapping[str, OptunaTrial]) -> dict[str, str]:
    """For an experiment of the Optuna front end, the word its trials are counted under (``fluidsalus ls`` and the
    report's header): the Optuna state the study ended each in (``complete``, ``pruned``, ``fail``: "20 (14 complete,
    6 pruned)", as the study counts them), and ``fail`` for one the engine ended ``ERROR`` before ``optimize``
    stored the study's state (the front end ends a FAIL trial so: it said ``error`` while the study ran, ``fail``
    once it ended); ``known``: :func:`optuna_trials`. A trial a SystemExit left RUNNING in the study keeps its
    engine word (``unfinished`` in an experiment no driver runs, as every other front end's)."""
    words = {trial_id: t.state.lower() for trial_id, t in known.items() if t.state in OPTUNA_FINAL_STATES}
    return {**{t.trial_id: OPTUNA_FAIL.lower() for t in trials if t.status == ERROR}, **words}


def trial_counts_text(trials: Sequence[TrialRow], live: bool, words: Mapping[str, str] | None = None) -> str:
    """``2 running, 2 terminated, 1 waiting``: the trials by status, as ``fluidsalus ls`` and the report's header
    both count them: Ray Tune's words (``terminated``, ``error``, ``running``), ``waiting`` for pending and paused
    trials while a driver runs the experiment (``live``), ``unfinished`` for those of an experiment no driver runs
    (a resume continues them); ``words`` gives a trial's own word instead (an Optuna study's: :func:`optuna_words`).
    Empty for no trials."""
    counts: dict[str, int] = {}
    for t in trials:
        if t.status in FINAL_STATUSES or live:
            shown = LIVE_WORDS.get(t.status, t.status.lower())
        else:
            shown = "unfinished"
        shown = (words or {}).get(t.trial_id, shown)
        counts[shown] = counts.get(shown, 0) + 1
    # (terminated trials that never began, as a time budget leaves those it finds queued: "8 terminated" alone
    # read as eight trials run; paused ones among the waiting, as the progress line's "3 waiting, 1 of them paused")
    never = sum(1 for t in trials if t.status == TERMINATED and t.started_at is None)
    paused = sum(1 for t in trials if t.status == PAUSED) if live else 0
    return counts_text(counts, {LIVE_WORDS[TERMINATED]: {"never started": never},
                                LIVE_WORDS[PAUSED]: {"paused": paused}})


def sessions_text(sessions: Sequence[tuple[float, float]], within: bool = False) -> str:
    """``14.0s (2 sessions)``: the time an experiment ran, its sessions' lengths summed
    (:meth:`~fluidsalus.store.ExperimentStore.sessions`: a resumed one's time interrupted left out), with how many
    sessions when it was resumed (``14.0s in 2 sessions`` ``within`` parentheses already); ``fluidsalus ls``'s
    DURATION, the report's header and its plot's title."""
    seconds = sum(end - start for start, end in sessions)
    if len(sessions) < 2:
        return f"{seconds:.1f}s"
    return f"{seconds:.1f}s in {len(sessions)} sessions" if within else f"{seconds:.1f}s ({len(sessions)} sessions)"


class NoResultsError(StoreError):
    """The experiment exists but has no results yet: there is nothing to account for."""


class WindowError(ValueError):
    """The window asked for does not overlap the run (it starts at or after the run's end, or before its start)."""


@dataclass
class BestTrial:
    """The best trial by the experiment's metric and mode, judged on each trial's last result (as ``ls``)."""

    trial_id: str
    metric: str
    mode: str
    value: float | int
    iteration: int
    status: str
    config: dict[str, Any]


@dataclass(frozen=True)
class PlannerSummary:
    """What the planner decided over the whole run (never cut to a window), from the store's events.

    Attributes:
        moves: Moves and resizes decided (``plan_move``).
        restarts_for_moves: Trials restarted on their new devices (``trial_restart`` with reason ``move``).
        preemptions: Trials sent back to the queue (``plan_preempt``).
        refused: Planned changes that were not carried out, by reason (``plan_refused``).
        move_cost_s: The move cost the executor measured last (``move_cost``); None when it measured no move
            (the planner then went by what trial starts cost, or by its prior).
        moves_measured: The moves that estimate came from.
        resize_cost_s: The data-parallel resize cost the executor measured last; None when it measured none (a
            resize then costs what a move costs).
        resizes_measured: The resizes that estimate came from.
        withdrawals: Trials taken back from a device before they began and placed again (``trial_restart`` with
            reason ``withdrawn``: a planned move or preemption of a trial without a checkpoint that had not begun).
        late_devices: Devices the run started without (``device_waiting``: their resources were taken when it
            began), each with the seconds until it joined, or None if it never did.
        turns: Places given up to a trial behind (``trial_restart`` with reason ``turn``: PBT's turns).
        lost_devices: Devices whose actor died, or never started, and could not be started again (``device_lost``:
            their node is gone, say), each with the first line of Ray's error; the run went on without them.
        joined_devices: Devices started on nodes that joined the cluster during the run, each with how: ``moved``
            (in place of one lost with its node: ``device_moved``), ``added`` (``device_added``), or ``added,
            moved`` (added, then moved on when that node left too).
        held_back: Each planned change that was held back (``plan_refused``), in time order: ``ts`` (absolute),
            ``trial_id``, ``action`` (``move``, ``preempt``, ...), ``reason``, ``from`` (the trial's device then,
            or None: older stores, a trial on none) and ``to`` (the devices the plan gave it).
    """

    moves: int
    restarts_for_moves: int
    preemptions: int
    refused: dict[str, int]
    move_cost_s: float | None
    moves_measured: int
    resize_cost_s: float | None = None
    resizes_measured: int = 0
    withdrawals: int = 0
    late_devices: dict[str, float | None] = field(default_factory=dict)
    turns: int = 0
    lost_devices: dict[str, str] = field(default_factory=dict)
    joined_devices: dict[str, str] = field(default_factory=dict)
    held_back: list[dict[str, Any]] = field(default_factory=list)


def planner_summary(events: Iterable[EventRow]) -> PlannerSummary:
    """Count the planner's decisions and read the last measured move cost.

    Args:
        events: The experiment's events, in store order.

    Returns:
        The summary.
    """
    moves = restarts = preemptions = measured = resizes = withdrawals = turns = 0
    refused: dict[str, int] = {}
    held_back: list[dict[str, Any]] = []
    cost: float | None = None
    resize_cost: float | None = None
    waiting_since: dict[str, float] = {}
    late: dict[str, float | None] = {}
    lost: dict[str, str] = {}
    joined: dict[str, str] = {}
    for ev in events:
        data = ev.data or {}
        if ev.kind == "device_lost" and ev.device is not None:
            lost[ev.device] = str(data.get("error") or "").strip().splitlines()[0] if data.get("error") else ""
        elif ev.kind == "device_start" and ev.device is not None:
            lost.pop(ev.device, None)  # (started again: a resumed run's, or on a node that joined)
        elif ev.kind in ("device_moved", "device_added") and ev.device is not None:
            how = "moved" if ev.kind == "device_moved" else "added"
            joined[ev.device] = "added, moved" if how == "moved" and joined.get(ev.device) == "added" else how
        if ev.kind == "device_waiting" and ev.device is not None:
            waiting_since[ev.device], late[ev.device] = ev.ts, None
        elif ev.kind == "device_start" and data.get("joined") and ev.device in waiting_since:
            late[ev.device] = ev.ts - waiting_since.pop(ev.device)
        elif ev.kind == "plan_move":
            moves += 1
        elif ev.kind == TRIAL_RESTART_EVENT and data.get("reason") == "move":
            restarts += 1
        elif ev.kind == TRIAL_RESTART_EVENT and data.get("reason") == "withdrawn":
            withdrawals += 1
        elif ev.kind == TRIAL_RESTART_EVENT and data.get("reason") == "turn":
            turns += 1
        elif ev.kind == "plan_preempt":
            preemptions += 1
        elif ev.kind == "plan_refused":
            reason = str(data.get("reason"))
            refused[reason] = refused.get(reason, 0) + 1
            to = data.get("to")
            held_back.append({"ts": ev.ts, "trial_id": ev.trial_id, "action": str(data.get("action") or "change"),
                              "reason": reason, "from": data.get("from"),
                              "to": [str(d) for d in to] if isinstance(to, (list, tuple)) else []})
        elif ev.kind == "move_cost":
            count, resize_count = data.get("samples"), data.get("resize_samples", 0)
            if isinstance(count, int) and count > 0 and finite(data.get("move_cost_s")):
                cost, measured = float(data["move_cost_s"]), count
            if isinstance(resize_count, int) and resize_count > 0 and finite(data.get("resize_cost_s")):
                resize_cost, resizes = float(data["resize_cost_s"]), resize_count
    return PlannerSummary(moves, restarts, preemptions, dict(sorted(refused.items())), cost, measured,
                          resize_cost, resizes, withdrawals, dict(sorted(late.items())), turns,
                          dict(sorted(lost.items())), dict(sorted(joined.items())),
                          sorted(held_back, key=lambda h: h["ts"]))


#: Decimals of the seconds since the first device start that the JSON and DataFrames give (microseconds): epoch
#: seconds hold about 0.24 us of float resolution, so ``--start 3.9`` came back as ``3.9000000953674316``.
SINCE_DECIMALS = 6


def _since(ts: float, t0: float) -> float:
    """Seconds from ``t0`` to ``ts``, to the microsecond."""
    return round(ts - t0, SINCE_DECIMALS)


def resolve_experiment(path: str | os.PathLike[str]) -> str:
    """An experiment folder, its ``experiment.db``, or a bare experiment name under a default storage path.

    A bare name (no path separator) that is not an existing path is looked up in the folders runs go in when no
    ``storage_path`` is given (:func:`fluidsalus.store.default_storage_paths`): ``$FLUIDSALUS_STORAGE_PATH`` or
    ``~/fluidsalus_results`` (``fluidsalus.run``, the Optuna front end), and ``$RAY_STORAGE`` or ``~/ray_results``
    (the Tune front end).

    Raises:
        StoreError: A bare name found in none of these places (the message names each, so a wrong
            ``$FLUIDSALUS_STORAGE_PATH`` shows), or in more than one (it names both experiments' folders).
    """
    text = os.path.expanduser(os.fspath(path))
    if os.path.exists(text) or os.sep in text:
        return text
    places = default_storage_paths()
    found = [os.path.join(root, text) for root, _ in places
             if os.path.exists(os.path.join(root, text, DB_FILENAME))]
    if len(found) == 1:
        return found[0]
    if found:
        raise StoreError(f"{text!r} names an experiment in more than one storage path: {' and '.join(found)}; "
                         "give its folder")
    ray = [os.path.join(root, text) for root, _ in places if written_by_ray(os.path.join(root, text))]
    if ray:  # (a folder Ray Tune wrote in ~/ray_results: inspect() says so, naming it)
        return ray[0]
    where = "; ".join(f"{root!r} ({how})" for root, how in places)
    raise StoreError(f"{text!r} is not a fluidsalus experiment: no such folder in {os.getcwd()!r}, nor an "
                     f"experiment of that name in the storage path{'s' if len(places) > 1 else ''} {where}; "
                     "`fluidsalus ls` lists them")


#: The first bytes of every SQLite database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


def _fmt_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.2f}{unit}"
    return f"{int(value)}B"


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _short(trial_id: str) -> str:
    """The trial's number within its experiment (``ab12c_00007`` -> ``7``), or the whole id if it has none."""
    tail = trial_id.rsplit("_", 1)[-1]
    return str(int(tail)) if tail.isdigit() else trial_id


def _jsonable(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # (most of a report: as they are, at once)
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class Report:
    """An experiment's goodput report: per device, totals, lanes, trials and a timeline.

    Objects: :attr:`device_stats` (``goodput.DeviceStats`` list), :attr:`total_stats`, :attr:`lane_stats`,
    :attr:`best`, :attr:`planner` (:class:`PlannerSummary`), :attr:`activity` (the parsed events). DataFrames
    (pandas, built on first use): :attr:`devices`, :attr:`lanes`, :attr:`trials`, :attr:`timeline`,
    :attr:`waste`, :attr:`switches`.
    """

    def __init__(self, path: str, experiment: dict[str, Any], trial_rows: list[TrialRow], activity: gp.Activity,
                 summary: gp.Goodput, bin_s: float | None = None, planner: PlannerSummary | None = None,
                 saved_iterations: Mapping[str, int] | None = None,
                 first_starts: Mapping[str, float] | None = None,
                 queue_waits: Mapping[str, Sequence[tuple[float, float]]] | None = None,
                 optuna: Mapping[str, OptunaTrial] | None = None,
                 sessions: Sequence[tuple[float, float]] | None = None,
                 names: Mapping[str, str] | None = None,
                 after_stop: Sequence[EventRow] | None = None) -> None:
        self.path = path
        #: The store's ``error_after_stop`` events (:data:`~fluidsalus.store.ERROR_AFTER_STOP_EVENT`), in time order:
        #: errors trials raised as a stop unwound them, which failed no trial (:attr:`errors_after_stop`).
        self.after_stop = list(after_stop or ())
        #: The names the run gave its trials, by id (:meth:`~fluidsalus.store.ExperimentStore.trial_names`: the Tune
        #: front end's ``<trainable>_<id>`` or ``trial_name_creator``'s); a trial not in it is named by its id.
        self.names = dict(names or {})
        #: The experiment's sessions, ``(start, end)`` each (:meth:`~fluidsalus.store.ExperimentStore.sessions`: its
        #: creation and each resume to the last thing that session recorded); None: one, from its creation to its end.
        self.sessions = None if sessions is None else list(sessions)
        #: Each trial's Optuna number and state (:func:`optuna_trials`) for an experiment of the Optuna front end;
        #: None for any other.
        self.optuna = None if optuna is None else dict(optuna)
        #: Each trial's first ``trial_start`` (absolute seconds; trials that never started are left out).
        self.first_starts = dict(first_starts or {})
        #: Each trial's waits to start, ``(since, start)`` (:func:`goodput.queue_waits`); a trial not here waited
        #: from its creation to its first start only.
        self.queue_waits = {tid: list(w) for tid, w in (queue_waits or {}).items()}
        #: Each trial's iteration of its latest checkpoint (trials without one are left out).
        self.saved_iterations = dict(saved_iterations or {})
        self.planner = planner if planner is not None else planner_summary(())
        self.experiment = experiment
        self.trial_rows = trial_rows
        self.activity = activity
        self.summary = summary
        self.timeline_bins = gp.timeline(activity, bin_s, (summary.start, summary.end))
        self._frames: dict[str, pd.DataFrame] = {}

    def __repr__(self) -> str:
        t = self.total_stats
        return (f"<Report {self.name} ({self.status}): {plural(len(self.device_stats), 'device')}, "
                f"{plural(len(self.trial_rows), 'trial')}, goodput {_fmt(t.goodput, '.3g')} of "
                f"{_fmt(t.throughput, '.3g')} iterations per device-second>")

    def __str__(self) -> str:
        return self.render_table()

    # ------------------------------------------------------------------ objects

    @property
    def name(self) -> str:
        return str(self.experiment["name"])

    @property
    def status(self) -> str:
        return str(self.experiment["status"])

    @cached_property
    def driver_gone(self) -> bool:
        """Whether the experiment is ``RUNNING`` in the store but its driver is gone (killed before it could end
        it: :meth:`~fluidsalus.store.DriverLock.holder_gone`); its trials run no more until it is resumed. Read
        once per report (the lock file and ``/proc/locks``), as the report is a snapshot."""
        return shown_status(self.status, self.path) == DRIVER_GONE

    @property
    def live(self) -> bool:
        """Whether a driver runs the experiment now (``RUNNING`` in the store, and its driver not gone)."""
        return self.status == RUNNING and not self.driver_gone

    def named(self, trial_id: str, within: bool = False) -> str:
        """How the report names a trial, as the run's lines and its errored-trials table name it: the name the run
        gave it (:attr:`names`: ``train_5356d_00011``), else its id; with its id too where the name does not hold it
        (``lr=0.1 (5356d_00011)``: the id finds its folder and its ``--json`` row), and for an experiment of the
        Optuna front end its Optuna number (``5356d_00011 (Optuna trial 11)``, as Optuna's log names it;
        ``5356d_00011, Optuna trial 11`` ``within`` parentheses already)."""
        name = self.names.get(trial_id, trial_id)
        known = None if self.optuna is None else self.optuna.get(trial_id)
        notes = [*(() if trial_id in name else (trial_id,)),
                 *(() if known is None or known.number is None else (known.label,))]
        if not notes:
            return name
        return f"{name}, {', '.join(notes)}" if within else f"{name} ({', '.join(notes)})"

    @property
    def device_stats(self) -> list[gp.DeviceStats]:
        return self.summary.devices

    @property
    def total_stats(self) -> gp.DeviceStats:
        return self.summary.totals

    @property
    def lane_stats(self) -> list[gp.LaneStats]:
        return self.summary.lanes

    @property
    def totals(self) -> dict[str, Any]:
        """The totals row as a dict (same keys as a row of :attr:`devices`)."""
        return asdict(self.summary.totals)

    @property
    def session_spans(self) -> list[tuple[float, float]]:
        """:attr:`sessions`, or, for a report built without them, one session from the experiment's creation to
        ``finished_at`` (or to the last thing recorded while it runs)."""
        if self.sessions is not None:
            return self.sessions
        exp = self.experiment
        end = exp["finished_at"] or max(exp["updated_at"] or exp["created_at"], self.activity.end or 0.0)
        return [(exp["created_at"], max(exp["created_at"], end))]

    @property
    def duration_s(self) -> float:
        """Wall time of the experiment: to ``finished_at``, or to the last thing recorded while it runs (a resumed
        run's time interrupted included: :attr:`ran_s` leaves it out)."""
        exp = self.experiment
        end = exp["finished_at"] or max(exp["updated_at"] or exp["created_at"], self.activity.end or 0.0)
        return max(0.0, end - exp["created_at"])

    @property
    def ran_s(self) -> float:
        """The time the experiment ran: its sessions' lengths summed (a resumed run's time interrupted left out), as
        ``fluidsalus ls``'s DURATION, the header and the plot's title give it."""
        return sum(end - start for start, end in self.session_spans)

    @property
    def duration_text(self) -> str:
        """:attr:`ran_s` as the header and the plot's title show it, in parentheses: ``14.0s in 2 sessions``
        (``fluidsalus ls``: ``14.0s (2 sessions)``)."""
        return sessions_text(self.session_spans, within=True)

    @property
    def trial_counts(self) -> dict[str, int]:
        """Trials per status (every status present, 0 when none)."""
        counts = dict.fromkeys(TRIAL_STATUSES, 0)
        for t in self.trial_rows:
            counts[t.status] = counts.get(t.status, 0) + 1
        return counts

    @property
    def unsaved_iterations(self) -> int:
        """Iterations the unfinished trials ran since their latest checkpoints: counted useful now, they are run
        again if the experiment is resumed (and wasted then, cause ``resume``), or lost if it is not."""
        return sum(max(0, t.last_iteration - self.saved_iterations.get(t.trial_id, 0)) for t in self.trial_rows
                   if t.status not in (TERMINATED, ERROR))

    @property
    def stopped(self) -> int:
        """Trials the searcher or the stop rule ended (an ASHA trial that reached max_t, a trial at a stop rule's
        training_iteration too): the others ran until their trainable returned. Trials that never started are not
        counted (a run ended by ``fail_fast`` or its time budget ends those too), as the run's progress line counts."""
        return sum(1 for t in self.trial_rows if t.status == TERMINATED and t.stop_reason == STOPPED_OUTCOME
                   and t.started_at is not None)

    @property
    def errors(self) -> list[dict[str, str | None]]:
        """Each errored trial's id and error (the exception's last line, as the table shows it, the error as its
        device recorded it, and its traceback where one was recorded), in the order the trials were created."""
        out = []
        for t in self.trial_rows:
            if t.status != ERROR:
                continue
            text = (t.error or "").strip()
            out.append({"trial_id": t.trial_id, "error": error_summary(text) or "no error text", "text": text,
                        "traceback": t.traceback})
        return out

    @property
    def errors_after_stop(self) -> list[dict[str, Any]]:
        """Each error a trial raised as a stop unwound it (the store's ``error_after_stop`` events, in time order),
        which failed no trial, as in Ray Tune, which stops the trial's actor and never sees it: the trial's id, when
        (``ts``, and ``ts_s`` after the first device start), its ``attempt``, the error's type and first line
        (``error``), the error as recorded (``text``), its ``traceback``, which ``stop`` unwound it
        (:data:`AFTER_STOP_KINDS`: ``stop_rule``, ``stop`` or ``restart``; :data:`AFTER_RAISE_KIND` for one that
        came after ``fail_fast="raise"``'s failure, before the run's stop reached the trial) and the ``restart``'s
        reason (a
        ``trial_restart`` reason; None for another stop, or a record from before the reason was kept)."""
        t0 = self.activity.start or self.experiment["created_at"]
        out = []
        for ev in self.after_stop:
            data = ev.data or {}
            text = str(data.get("error") or "").strip()
            out.append({"trial_id": ev.trial_id, "ts": ev.ts, "ts_s": _since(ev.ts, t0), "attempt": data.get("attempt"),
                        "error": error_summary(text) or "no error text", "text": text,
                        "traceback": data.get("traceback"),
                        "stop": AFTER_RAISE_KIND if data.get("after_raise") else AFTER_STOP_KINDS.get(data.get("moved"),
                                                                                                      "stop"),
                        "restart": data.get("restart")})
        return out

    @property
    def best(self) -> BestTrial | None:
        """The best trial by its last result, or None without a metric or a finite value."""
        metric, mode = self.experiment["metric"], self.experiment["mode"]
        if not metric or mode not in ("min", "max"):
            return None
        scored = [(t.last_result[metric], t) for t in self.trial_rows
                  if t.last_result is not None and finite(t.last_result.get(metric))]
        if not scored:
            return None
        value, trial = (max if mode == "max" else min)(scored, key=lambda x: x[0])
        # (an int as it is: float() showed 1152921504606846977 as 1.15292e+18 where ls and the summary give it whole)
        return BestTrial(trial.trial_id, metric, mode, value if isinstance(value, int) else float(value),
                         trial.last_iteration, trial.status, trial.config)

    # ------------------------------------------------------------------ DataFrames

    def _frame(self, key: str, rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> pd.DataFrame:
        if key not in self._frames:
            import pandas as pd

            self._frames[key] = pd.DataFrame(rows, columns=list(columns) if columns else None)
        return self._frames[key]

    @property
    def devices(self) -> pd.DataFrame:
        """One row per device: every field of :class:`goodput.DeviceStats` (``wasted`` as a dict)."""
        return self._frame("devices", [asdict(d) for d in self.device_stats],
                           [f for f in gp.DeviceStats.__dataclass_fields__])

    @property
    def lanes(self) -> pd.DataFrame:
        """One row per lane: open and busy seconds, occupancy, iterations, trials, peak capacity."""
        return self._frame("lanes", [asdict(lane) for lane in self.lane_stats],
                           [f for f in gp.LaneStats.__dataclass_fields__])

    @cached_property
    def trial_table(self) -> list[dict[str, Any]]:
        """One dict per trial, in the order the trials were created (the rows of :attr:`trials` and the JSON's
        ``trials``), over the whole run (a window does not cut it): status, stop reason, device, attempts,
        failures (Ray's count: the retried ones and the one that ended it), iterations reported, useful and
        wasted (redone later), iterations a failure cut short, compute seconds (``compute_s``: device time, a
        data-parallel trial's on each of its devices) split into ``useful_s`` and ``wasted_s`` (redone or cut
        short), the causes of its waste, how long it waited to start (``queued_s``: from its creation to its first
        ``trial_start``, and from each restart, a retry, a preemption, a PBT turn, to its next one:
        :func:`goodput.queue_waits`; counting only time some device was up, so neither the devices' start nor the
        gap between a resumed run's sessions; None if it never started) and how many starts it waited for
        (``queued_waits``), its last metric, error and config."""
        per: dict[str, dict[str, Any]] = defaultdict(lambda: {"reported": 0, "useful": 0, "wasted": 0, "cut_short": 0,
                                                              "compute_s": 0.0, "useful_s": 0.0, "wasted_s": 0.0,
                                                              "waste_causes": set()})
        for s in self.activity.spans:
            row = per[s.trial_id]
            row["compute_s"] += s.end - s.start  # (device time: a data-parallel trial's on each of its devices)
            row["useful_s" if s.useful else "wasted_s"] += s.end - s.start
            if s.waste_cause is not None:
                row["waste_causes"].add(s.waste_cause)
            if s.counted:
                row["reported"] += 1
                row["useful" if s.useful else "wasted"] += 1
            elif s.partial:
                row["cut_short"] += 1
        metric = self.experiment["metric"]
        up = gp.merge_intervals((e.start, e.end) for eps in self.activity.epochs.values() for e in eps)
        rows = []
        for t in self.trial_rows:
            last = (t.last_result or {}).get(metric) if metric else None
            mine = per[t.trial_id]
            first = self.first_starts.get(t.trial_id)
            waits = self.queue_waits.get(t.trial_id, [] if first is None else [(t.created_at, first)])
            rows.append({
                "trial_id": t.trial_id, "status": t.status, "stop_reason": t.stop_reason, "device": t.device,
                "attempts": t.attempt + 1, "failures": t.num_failures + (t.status == ERROR),
                "iteration": t.last_iteration,
                **{k: mine[k] for k in ("reported", "useful", "wasted", "cut_short", "compute_s", "useful_s",
                                         "wasted_s")},
                "waste_causes": sorted(mine["waste_causes"]),
                "queued_s": None if first is None else sum(gp.covered(up, a, b) for a, b in waits),
                "queued_waits": 0 if first is None else len(waits),
                "metric": last if finite(last) else None, "error": t.error, "config": t.config,
            })
            if self.optuna is not None:  # (its number and state, as Optuna's log names the trial)
                known = self.optuna.get(t.trial_id, OptunaTrial(None, None))
                rows[-1].update({OPTUNA_NUMBER_KEY: known.number, OPTUNA_STATE_KEY: known.state})
        return rows

    @property
    def trials(self) -> pd.DataFrame:
        """One row per trial (:attr:`trial_table`): status, device, attempts, failures, iterations reported, useful
        and wasted, cut short, compute time and its useful and wasted seconds, waste causes, time queued before its
        first start, metric, error, config."""
        return self._frame("trials", self.trial_table,
                           TRIAL_COLUMNS + (OPTUNA_TRIAL_COLUMNS if self.optuna is not None else ()))

    def costliest_trials(self, n: int | None = None) -> list[dict[str, Any]]:
        """The ``n`` (default :data:`TRIALS_SHOWN`) trials with the most compute seconds (:attr:`trial_table` rows;
        ties in creation order); trials that computed nothing are left out."""
        n = TRIALS_SHOWN if n is None else n
        ranked = sorted((r for r in self.trial_table if r["compute_s"] > 0), key=lambda r: -r["compute_s"])
        return ranked[:n]

    @property
    def timeline(self) -> pd.DataFrame:
        """Goodput over time: one row per (bin, device) plus ``device == "total"`` rows; times from run start."""
        t0 = self.activity.start or 0.0
        rows = [{**asdict(b), "start_s": _since(b.start, t0), "end_s": _since(b.end, t0)} for b in self.timeline_bins]
        return self._frame("timeline", rows, [*gp.TimelineBin.__dataclass_fields__, "start_s", "end_s"])

    @property
    def waste(self) -> pd.DataFrame:
        """Wasted iterations and their compute seconds, per device and cause."""
        rows = [{"device": d.device, "cause": cause, "iterations": w.iterations, "partial": w.partial,
                 "seconds": w.seconds} for d in self.device_stats for cause, w in sorted(d.wasted.items())]
        return self._frame("waste", rows, ["device", "cause", "iterations", "partial", "seconds"])

    @property
    def switches(self) -> pd.DataFrame:
        """Every lane switch: time, device, lane, the trial that got the turn and the one that gave it, latency."""
        rows = [asdict(s) for s in self.activity.switches]
        return self._frame("switches", rows, [f for f in gp.Switch.__dataclass_fields__])

    # ------------------------------------------------------------------ output

    def to_dict(self) -> dict[str, Any]:
        """The machine-readable report (the ``--json`` output); see ``docs/goodput.md`` for the schema."""
        exp = self.experiment
        t0 = self.activity.start or exp["created_at"]
        best = self.best
        return _jsonable({
            "schema_version": JSON_SCHEMA_VERSION,
            "experiment": {
                "name": exp["name"], "path": os.path.abspath(self.path), "status": exp["status"],
                "error": exp["error"], "driver_gone": self.driver_gone,
                "metric": exp["metric"], "mode": exp["mode"], "created_at": exp["created_at"],
                "finished_at": exp["finished_at"], "duration_s": self.duration_s, "ran_s": self.ran_s,
                "sessions": len(self.session_spans),
                "trials": self.trial_counts, "trials_total": len(self.trial_rows), "stopped": self.stopped,
                "unsaved_iterations": self.unsaved_iterations,
            },
            "window": {"start": self.summary.start, "end": self.summary.end,
                       "start_s": _since(self.summary.start, t0), "end_s": _since(self.summary.end, t0)},
            "devices": [asdict(d) for d in self.device_stats],
            "totals": asdict(self.total_stats),
            "lanes": [asdict(lane) for lane in self.lane_stats],
            "best": None if best is None else {**asdict(best), **(
                {} if self.optuna is None else {OPTUNA_NUMBER_KEY: self.optuna.get(
                    best.trial_id, OptunaTrial(None, None)).number})},
            "errors": self.errors,
            "errors_after_stop": self.errors_after_stop,
            "planner": {**asdict(self.planner),  # (each held-back change also when, as the table says it)
                        "held_back": [{**h, "ts_s": _since(h["ts"], t0)} for h in self.planner.held_back]},
            "timeline": [{**asdict(b), "start_s": _since(b.start, t0), "end_s": _since(b.end, t0)}
                         for b in self.timeline_bins
                         if b.device == gp.TOTAL_DEVICE],
            "trials": self.trial_table,
        })

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, default=str)

    def render_table(self) -> str:
        """The human-readable report: a header, the per-device table with totals, waste, and the best trial."""
        exp = self.experiment
        # (in the words ``fluidsalus ls`` counts them in: Ray Tune's, an Optuna study's states for its trials; it said
        # "done" and "errored" where ls said "terminated" and "error")
        words = None if self.optuna is None else optuna_words(self.trial_rows, self.optuna)
        counts = trial_counts_text(self.trial_rows, self.live, words)
        trials = plural(len(self.trial_rows), "trial") + (f" ({counts})" if counts else "")
        if self.optuna is None:  # (an Optuna study's "pruned" says it)
            trials += f", {self.stopped} stopped by the search or a stop rule"
        status = DRIVER_GONE if self.driver_gone else exp["status"]
        head = f"experiment {exp['name']} ({status}, {self.duration_text}): {trials}"
        if status == DRIVER_GONE:
            head += f"\n{DRIVER_GONE_HINT}"
        if exp["error"]:  # why the experiment ended in error (a callback's exception, a rule it broke, ...)
            head += f"\nended by: {error_summary(exp['error'])}"
        unsaved = self.unsaved_iterations
        if unsaved and not self.live:  # (a live run's trials are always past their latest checkpoint)
            head += (f"\nunfinished trials ran {plural(unsaved, 'iteration')} since their latest checkpoints: "
                     "counted useful, they are run again if the experiment is resumed")
        t0 = self.activity.start
        window = ("no device started" if t0 is None else  # (a run interrupted while Ray started, say)
                  f"window {self.summary.start - t0:.2f}s .. {self.summary.end - t0:.2f}s from the first device "
                  f"start; {self.total_stats.device_seconds:.2f} device-seconds")
        # A NODE column when the devices ran on more than one node (the address of each one's last actor)
        nodes = len({d.node for d in self.device_stats}) > 1
        header = ("DEVICE", *(("NODE",) if nodes else ()), "BUSY", "SLOTS", "ITERS", "USEFUL", "WASTED", "WASTED_S",
                  "WASTE%", "IT/S", "GOODPUT", "SAMPLES/S", "LANES", "SWITCHES", "SW_P50", "SW_P99", "RESERVED", "USED",
                  "GPU%")
        rows = []
        for d in [*self.device_stats, self.total_stats]:
            rows.append((
                d.device, *((d.node or "-",) if nodes else ()), _fmt(d.busy_fraction, ".0%"),
                _fmt(d.slot_occupancy, ".0%"), str(d.iterations),
                str(d.useful_iterations), str(d.wasted_iterations), f"{d.wasted_s:.2f}s",
                _fmt(d.wasted_fraction, ".0%"), _fmt(d.throughput, ".2f"), _fmt(d.goodput, ".2f"),
                _fmt(d.samples_per_s, ".1f"), str(d.lanes_peak), str(d.switches),
                _fmt(d.switch_latency_ms_p50, ".2f", "ms"), _fmt(d.switch_latency_ms_p99, ".2f", "ms"),
                _fmt_bytes(d.reserved_peak_bytes), _fmt_bytes(d.used_peak_bytes), _fmt(d.gpu_util_mean_pct, ".0f"),
            ))
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = [head, window, ""]
        for i, row in enumerate([header, *rows]):
            if i == len(rows):  # the totals row
                lines.append("  ".join("-" * w for w in widths))
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines.append("")
        lines += TABLE_LEGEND
        waste = self.total_stats.wasted
        if waste:
            parts = [f"{cause} {w.iterations} it" + (f" + {w.partial} cut short" if w.partial else "")
                     + f" ({w.seconds:.2f}s)" for cause, w in sorted(waste.items())]
            lines.append("wasted by cause: " + ", ".join(parts))
        else:
            lines.append("wasted by cause: none")
        lines.append(self._idle_line())
        lines.append(self._queued_line())
        lines += self._costliest_lines()
        lines.append(self._planner_line())
        lines += self._held_back_lines()
        if self.planner.late_devices:
            late = [f"{name} never started" if after is None else f"{name} joined after {after:.2f}s"
                    for name, after in self.planner.late_devices.items()]
            lines.append("devices the run started without (their resources were taken): " + ", ".join(late))
        if self.planner.lost_devices:
            lost = [f"{name} ({error})" if error else name for name, error in self.planner.lost_devices.items()]
            lines.append("devices lost (their actor died or did not start, and could not be started again; the run "
                         "went on without them): " + ", ".join(lost))
        if self.planner.joined_devices:
            said = {"moved": "in place of one lost with its node", "added": "new",
                    "added, moved": "new, then moved on when that node left too"}
            joined = [f"{name} ({said.get(how, how)})" for name, how in self.planner.joined_devices.items()]
            lines.append("devices started on nodes that joined during the run: " + ", ".join(joined))
        errors = self.errors
        if errors:
            lines.append(f"errored trials ({len(errors)}):")
            lines += [f"  {self.named(str(e['trial_id']))}: {e['error']}" for e in errors[:ERRORS_SHOWN]]
            if len(errors) > ERRORS_SHOWN:
                lines.append(f"  ... and {len(errors) - ERRORS_SHOWN} more (--json lists them all)")
        lines += self._after_stop_lines()
        best = self.best
        if best is None:
            lines.append("best trial: -")
        else:
            shown = best.status.lower() if best.status in FINAL_STATUSES or self.live else "unfinished"  # (as ls)
            state = None if self.optuna is None else self.optuna.get(best.trial_id, OptunaTrial(None, None)).state
            shown = shown if state is None else state.lower()  # (Optuna's word for it: complete)
            lines.append(f"best trial: {self.named(best.trial_id)} {best.metric}={format_metric(best.value)} "
                         f"({best.mode}) at iteration {best.iteration}, {shown}, config {best.config}")
        return "\n".join(lines)

    def _after_stop_lines(self) -> list[str]:
        """The errors trials raised as a stop unwound them (:attr:`errors_after_stop`), one line each up to
        :data:`ERRORS_SHOWN`, named as the errored trials: the error, and which stop it came in (the words of the
        run's warning of it; a restart's reason as the warning names it, :func:`~fluidsalus.store.restart_words`).
        The store kept them and the report showed none (a helper's review)."""
        after = self.errors_after_stop
        if not after:
            return []
        raised = " or after fail_fast='raise''s failure," if any(e["stop"] == AFTER_RAISE_KIND for e in after) else ""
        lines = [f"errors after a stop ({len(after)}; raised as the stop unwound the trial,{raised} they failed no "
                 "trial, as in Ray Tune):"]
        for e in after[:ERRORS_SHOWN]:
            how = {"stop_rule": "after the result its stop rule ended it at",
                   "stop": "as its stop (its scheduler's or searcher's, or the run's end) unwound it",
                   "restart": f"as a stop to restart it ({restart_words(e['restart'])}) unwound it",
                   AFTER_RAISE_KIND: "after fail_fast='raise''s failure ended the run, before its stop reached it: "
                                     "as in Ray Tune, which raised that failure at once and never saw this one"
                   }[e["stop"]]
            lines.append(f"  {self.named(str(e['trial_id']))}: {e['error']} (at {e['ts_s']:.2f}s, {how})")
        if len(after) > ERRORS_SHOWN:
            lines.append(f"  ... and {len(after) - ERRORS_SHOWN} more (--json lists them all)")
        return lines

    def _idle_line(self) -> str:
        """``idle by cause: no_trial 4.38s (cpu:1 4.32s, cpu:2 0.06s), startup 0.14s, ...``: the totals' idle split,
        largest first, each with the devices idlest for it when more than one device was (docs/goodput.md, "Idle by
        cause"); ``driver`` first names the calls waited for: ``driver 3.09s (suggest 2.70s, should_prune 0.39s;
        cpu:1 1.60s, cpu:0 1.49s)``."""
        parts = []
        for cause, seconds in sorted(self.total_stats.idle.items(), key=lambda x: -x[1]):
            if seconds < IDLE_SHOWN_MIN_S:
                continue
            by_device = sorted(((d.idle.get(cause, 0.0), d.device) for d in self.device_stats
                                if d.idle.get(cause, 0.0) >= IDLE_SHOWN_MIN_S), key=lambda x: -x[0])
            # (while the run goes on, a device's time after its last turn is mostly the iteration in progress)
            name = f"{cause}/in progress" if cause == gp.IDLE_STOPPED and self.live else cause
            part = f"{name} {seconds:.2f}s"
            inner = []
            if cause == gp.IDLE_DRIVER:  # which calls the devices waited for: suggest 2.90s, should_prune 0.40s
                methods = [(m, s) for m, s in self.total_stats.idle_driver.items() if s >= IDLE_SHOWN_MIN_S]
                said = [f"{m} {s:.2f}s" for m, s in methods[:IDLE_METHODS_SHOWN]]
                if len(methods) > IDLE_METHODS_SHOWN:
                    said.append(f"+{len(methods) - IDLE_METHODS_SHOWN} more")
                if said and [m for m, _ in methods] != [gp.DRIVER_METHOD_UNKNOWN]:  # (a store before waits were named)
                    inner.append(", ".join(said))
            if len(self.device_stats) > 1 and by_device:
                shown = [f"{device} {s:.2f}s" for s, device in by_device[:IDLE_DEVICES_SHOWN]]
                if len(by_device) > IDLE_DEVICES_SHOWN:
                    shown.append(f"+{len(by_device) - IDLE_DEVICES_SHOWN} more")
                inner.append(", ".join(shown))
            if inner:
                part += f" ({'; '.join(inner)})"
            parts.append(part)
        return "idle by cause: " + (", ".join(parts) if parts else "none")

    def _queued_line(self) -> str:
        """``queued: 6 of 8 trials waited for their first start, mean 2.08s, max 3.16s (a9c90_00006)``: the trials
        that waited at least :data:`QUEUED_SHOWN_MIN_S` (``queued_s``: every wait to start, the first and those
        after a restart) over the whole run, their mean and longest wait; ``waited to start (their first starts and
        16 restarts)`` when some of those trials also waited to restart (``queued_waits``). It stays once the run
        ended (the header's "waiting" counts only the trials waiting now). Trials that never started (``queued_s``
        None) are counted after it, with the longest of their waits up to their end (or the run's): ``; 6 never
        started (waited up to 4.29s)`` (``not started yet (waiting ...)`` while the run goes on); it said ``queued:
        none`` for a run interrupted with 6 of its 10 trials still queued."""
        rows = [r for r in self.trial_table if r["queued_s"] is not None and r["queued_s"] >= QUEUED_SHOWN_MIN_S]
        queued = [(r["queued_s"], r["trial_id"]) for r in rows]
        parts = []
        if queued:
            longest, who = max(queued)
            mean = sum(w for w, _ in queued) / len(queued)
            restarts = sum(max(0, r["queued_waits"] - 1) for r in rows)  # (waits after a retry, a preemption, ...)
            what = (f"to start (their first starts and {plural(restarts, 'restart')})" if restarts else
                    "for their first start")
            parts.append(f"{len(queued)} of {plural(len(self.trial_rows), 'trial')} waited {what}, "
                         f"mean {mean:.2f}s, max {longest:.2f}s ({self.named(who, within=True)})")
        never = self._never_started()
        if never:
            longest = max(never)
            some = f"{len(never)}" if queued else f"{len(never)} of {plural(len(self.trial_rows), 'trial')}"
            upto = "up to " if len(never) > 1 else ""
            parts.append(f"{some} not started yet (waiting {upto}{longest:.2f}s)" if self.live else
                         f"{some} never started (waited {upto}{longest:.2f}s)")
        return "queued: " + ("; ".join(parts) if parts else "none")

    def _never_started(self) -> list[float]:
        """The waits of the trials that never started (no ``trial_start``): from their creation to their end, or to
        the run's end (its last device time) for those that did not end, counting only time a device was up, as
        ``queued_s`` does."""
        up = gp.merge_intervals((e.start, e.end) for eps in self.activity.epochs.values() for e in eps)
        end = self.activity.end
        waits = []
        for t in self.trial_rows:
            if t.trial_id in self.first_starts:
                continue
            until = t.finished_at if t.finished_at is not None else end
            waits.append(0.0 if until is None else gp.covered(up, t.created_at, until))
        return waits

    def _held_back_lines(self) -> list[str]:
        """The planner's held-back changes, one line each up to :data:`HELD_BACK_SHOWN`: which trial, from and to which
        devices, when, and why (``planner.held_back``)."""
        held = self.planner.held_back
        if not held:
            return []
        t0 = self.activity.start or self.experiment["created_at"]
        shown = held[:HELD_BACK_SHOWN]
        count = (f"{len(held)}" if len(held) == len(shown) else
                 f"first {len(shown)} of {len(held)}; --json lists them all")
        lines = [f"changes held back ({count}):"]
        for h in shown:
            where = (f" from {h['from']}" if h["from"] else "") + (f" to {', '.join(h['to'])}" if h["to"] else "")
            lines.append(f"  {h['ts'] - t0:.2f}s: {h['action']} of {self.named(h['trial_id'])}{where}: "
                         f"{REFUSED_REASONS.get(h['reason'], h['reason'])}")
        return lines

    def _costliest_lines(self) -> list[str]:
        """The "costliest trials" section: the :data:`TRIALS_SHOWN` trials with the most compute, as a small table, each
        trial named as the report's other lines name it (:meth:`named`)."""
        top = self.costliest_trials()
        if not top:
            return []
        metric = self.experiment["metric"]
        header = ("TRIAL", *(("OPTUNA #",) if self.optuna is not None else ()), "DEVICE", "COMPUTE", "USEFUL_S",
                  "WASTED_S", "ITERS", "STATUS", metric or "METRIC")
        rows = []
        # (one format for the column, as Ray's table: 6 significant digits, 1.23457e+06 for 1234567 beside 0.5)
        values = format_metric_column(["-" if r["metric"] is None else r["metric"] for r in top])
        for r, value in zip(top, values, strict=True):
            wasted = f"{r['wasted_s']:.2f}s" + (f" ({', '.join(r['waste_causes'])})" if r["waste_causes"] else "")
            notes = [f"{r['wasted']} redone"] if r["wasted"] else []
            notes += [f"+{r['cut_short']} cut short"] if r["cut_short"] else []
            iters = str(r["reported"]) + (f" ({', '.join(notes)})" if notes else "")
            status = r["status"] + (f" ({r['stop_reason']})" if r["stop_reason"] == STOPPED_OUTCOME else "")
            optuna: tuple[str, ...] = ()
            if self.optuna is not None:  # its Optuna number, and Optuna's state where the study gave one
                number, state = r.get(OPTUNA_NUMBER_KEY), r.get(OPTUNA_STATE_KEY)
                optuna = ("-" if number is None else str(number),)
                status = state or status
            # named as the errored trials and the best trial below (an Optuna study's by id: OPTUNA # has its number)
            trial = r["trial_id"] if self.optuna is not None else self.named(r["trial_id"])
            rows.append((trial, *optuna, r["device"] or "-", f"{r['compute_s']:.2f}s",
                         f"{r['useful_s']:.2f}s", wasted, iters, status, value))
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        shown = (f"top {len(top)} of {len(self.trial_rows)}" if len(top) < len(self.trial_rows)
                 else f"all {len(self.trial_rows)}")
        lines = [f"costliest trials ({shown} by compute seconds over the whole run; --json lists every trial):"]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                  for row in [header, *rows]]
        return lines

    def _planner_line(self) -> str:
        p = self.planner
        cost = ("no move measured" if p.move_cost_s is None else
                f"{p.move_cost_s * 1e3:.1f}ms measured over {plural(p.moves_measured, 'move')}")
        if p.resize_cost_s is not None:
            resizes = plural(p.resizes_measured, "resize")
            cost += f"; resize cost: {p.resize_cost_s * 1e3:.1f}ms measured over {resizes}"
        refused = ", ".join(f"{n} ({REFUSED_REASONS.get(reason, reason)})" for reason, n in p.refused.items()) \
            or "none"
        turns = f", {plural(p.turns, 'place')} given up in turn" if p.turns else ""
        return (f"planner: {plural(p.moves, 'move')} ({p.restarts_for_moves} restarted), "
                f"{plural(p.preemptions, 'preemption')}, {plural(p.withdrawals, 'withdrawal')}{turns}, "
                f"changes held back: {refused}; move cost: {cost}")

    def plot(self, path: str | os.PathLike[str]) -> str:
        """Draw the lane timeline of each device and goodput over time into one file, in the format its suffix names
        (``.png``, ``.pdf``, ``.svg``, ...: matplotlib's ``savefig``); returns its path."""
        return plot_report(self, path)


def goodput_steps(bins: Sequence[gp.TimelineBin], t0: float) -> tuple[list[float], list[float], list[float]]:
    """The plot's steps of throughput and goodput over time: the bins' edges in seconds after ``t0``, then each
    bin's throughput and goodput; NaN (not drawn) for a bin without device time, such as the gap between the two
    parts of a resumed run (it was drawn as zero goodput)."""
    xs = [b.start - t0 for b in bins] + [bins[-1].end - t0] if bins else []
    thr = [math.nan if b.throughput is None else b.throughput for b in bins]
    good = [math.nan if b.goodput is None else b.goodput for b in bins]
    return xs, thr, good


def inspect(path: str | os.PathLike[str], window: tuple[float | None, float | None] | None = None,
            bin_s: float | None = None) -> Report:
    """The goodput report of an experiment, running or finished, read without writing anything.

    Args:
        path: The experiment folder, its ``experiment.db``, or an experiment name under the storage path.
        window: Restrict the figures to ``(start, end)`` seconds after the first device started; None for either
            end means the start or the end of the run (default: the whole run).
        bin_s: Width of the timeline bins in seconds (default: the run cut into ``goodput.DEFAULT_TIMELINE_BINS``).

    Raises:
        StoreError: The path is not an experiment, or the store is from a newer fluidsalus.
        NoResultsError: The experiment is running (its driver lives) and has no results yet.
        WindowError: ``window`` starts at or after its end or the run's, or either bound is negative.
    """
    resolved = resolve_experiment(path)
    if not os.path.exists(os.path.join(resolved, DB_FILENAME)) and written_by_ray(resolved):
        # (it said only "no experiment.db found", where ExperimentAnalysis names Ray's folder as such)
        raise StoreError(f"{resolved!r} is not a fluidsalus experiment (no {DB_FILENAME} found). Ray Tune "
                         "wrote this folder (its experiment_state file is there): fluidsalus inspects the experiments "
                         "it ran itself, from their store; read this one with Ray's ExperimentAnalysis.")
    with open_readonly(resolved) as store:
        exp = store.experiment()
        live = shown_status(exp["status"], resolved) == RUNNING  # (its driver runs it)
        if store.count("results") == 0 and live:  # (a run that ended, or whose driver is gone, shows its errors)
            raise NoResultsError(f"experiment {exp['name']!r} at {os.fspath(path)!r} has no results yet; "
                                 "inspect it again once a trial has reported")
        trials = store.trials()
        if not live:
            # No driver runs it (interrupted, or its driver killed): a trial it was running waits for a resume,
            # as ExperimentAnalysis and Ray's saved state show it (the report showed it running)
            trials = [dataclasses.replace(t, status=PENDING) if t.status == RUNNING else t for t in trials]
        saved = {c["trial_id"]: int(c["iteration"]) for c in store.checkpoints()}  # (in order: the latest wins)
        events = store.events()
        activity = gp.build_activity(store.results(latest_attempt_only=False), events, exp["finished_at"])
        sessions = store.sessions()
    names = trial_names_of(events)  # (from the events read: store.trial_names() would read them again)
    absolute = None
    if window is not None:
        t0 = activity.start or exp["created_at"]
        start, end = window
        for name, value in (("start", start), ("end", end)):
            if value is not None and not value >= 0:
                raise WindowError(f"the window's {name} is seconds after the first device started: >= 0, got {value}")
        lasted = (activity.end or t0) - t0
        first = start or 0.0
        if end is not None and first >= end:
            raise WindowError(f"the window starts at {first:.2f}s, at or after its end, {end:.2f}s")
        if first >= lasted:
            raise WindowError(f"the window starts at {first:.2f}s, at or after the run's end (it lasted "
                              f"{lasted:.2f}s)")
        absolute = (t0 + first, t0 + (lasted if end is None else min(end, lasted)))  # (shown clipped to the run)
    first_starts: dict[str, float] = {}
    for ev in events:
        if ev.kind == "trial_start" and ev.trial_id is not None:
            first_starts[ev.trial_id] = min(ev.ts, first_starts.get(ev.trial_id, ev.ts))
    waits = gp.queue_waits(events, {t.trial_id: t.created_at for t in trials})
    optuna = optuna_trials(trials, events) if is_optuna_experiment(exp) else None
    after_stop = [ev for ev in events if ev.kind == ERROR_AFTER_STOP_EVENT]
    return Report(resolved, exp, trials, activity, gp.summarize(activity, absolute), bin_s, planner_summary(events),
                  saved, first_starts, waits, optuna, sessions, names, after_stop)


# ---------------------------------------------------------------------------------------------- plot


def device_title(d: gp.DeviceStats) -> str:
    """The title of a device's panel in the plot: ``cpu:0: busy 99%, 5 iterations (0 redone), 3.01s wasted (38% of
    its compute: retry 3.01s), ...``: its waste in seconds too, as the table's ``WASTED_S`` and ``WASTE%`` (a
    device whose waste was all cut-short iterations said "(0 wasted)")."""
    median = "" if d.switch_latency_ms_p50 is None else f" (median {d.switch_latency_ms_p50:.2f} ms)"
    by_seconds = sorted(d.wasted.items(), key=lambda x: -x[1].seconds)
    causes = ", ".join(f"{cause} {w.seconds:.2f}s" for cause, w in by_seconds)
    return (f"{d.device}: busy {_fmt(d.busy_fraction, '.0%')}, {plural(d.iterations, 'iteration')} "
            f"({d.wasted_iterations} redone), {d.wasted_s:.2f}s wasted ({_fmt(d.wasted_fraction, '.0%')} of its "
            f"compute{': ' + causes if causes else ''}), {plural(d.switches, 'switch', 'switches')}{median}, "
            f"at most {plural(d.lanes_peak, 'lane')} open, {_fmt_bytes(d.reserved_peak_bytes)} reserved at peak")


def _lane_rows(lives: list[gp.LaneLife], epoch_end: dict[tuple[str, int], float]) -> dict[tuple[int, int], int]:
    """Give each lane of one device a display row: lanes whose lives do not overlap share a row."""
    free_at: list[float] = []
    rows: dict[tuple[int, int], int] = {}
    for life in sorted(lives, key=lambda x: (x.opened_at, x.lane)):
        end = life.closed_at if life.closed_at is not None else epoch_end.get((life.device, life.epoch), life.opened_at)
        row = next((i for i, t in enumerate(free_at) if t <= life.opened_at), None)
        if row is None:
            row = len(free_at)
            free_at.append(end)
        else:
            free_at[row] = end
        rows[(life.epoch, life.lane)] = row
    return rows


def _bars(spans: list[gp.Span], merge_gap: float) -> list[tuple[float, float, gp.Span]]:
    """Consecutive spans of one trial attempt in one lane, with equal usefulness, joined into bars."""
    bars: list[tuple[float, float, gp.Span]] = []
    for s in sorted(spans, key=lambda x: x.start):
        if bars:
            b0, b1, first = bars[-1]
            same = (first.trial_id, first.attempt, first.useful) == (s.trial_id, s.attempt, s.useful)
            if same and s.start - b1 <= merge_gap:
                bars[-1] = (b0, max(b1, s.end), first)
                continue
        bars.append((s.start, s.end, s))
    return bars


def plot_report(report: Report, path: str | os.PathLike[str]) -> str:
    """Draw ``report`` into ``path`` (its suffix names the format: PNG, PDF, SVG, ...) from matplotlib's Agg canvas
    (:func:`report_figure`); returns the path."""
    out = os.fspath(path)
    report_figure(report).savefig(out, dpi=PLOT_DPI)
    return out


def _row_label(lanes: Sequence[int]) -> str:
    """A timeline row's label: the ids of the lanes it showed, as ``Report.lanes`` and the JSON number them, runs
    of consecutive ids joined, then how many more lanes it showed (``lane 0``, ``lanes 0-3``, ``lanes 0, 3``,
    ``lanes 0-2, 5, +3 more``: 7, 9 and 11, say). It said ``lane 1``
    for the first row, whatever lanes it held (lane 0, or lanes 0 to 3 of a trial retried three times)."""
    ids = sorted(set(lanes))
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    shown = ", ".join(parts[:PLOT_ROW_LANES_SHOWN])
    more = sum(b - a + 1 for a, b in runs[PLOT_ROW_LANES_SHOWN:])  # the lanes left out (it counted their runs)
    return ("lane " if len(ids) == 1 else "lanes ") + shown + (f", +{more} more" if more > 0 else "")


def report_figure(report: Report) -> Any:
    """Draw ``report`` on a bare matplotlib ``Figure`` (on the Agg canvas) and return it.

    One panel per device: a row per lane position (lanes that never coexist share a row), a grey bar while a
    lane is open (memory reserved) and a coloured bar per trial while it holds the lane's turn (its number
    written in when there is room); cross-hatched bars are iterations redone later or cut short by a failure
    (wasted); a purple shade over the panel is the device's time waiting for the driver (idle cause
    ``driver``); small triangles mark switches; crosses, stars and diamonds mark failures, out-of-memory
    re-admissions and PBT exploits. The legend above them names only the marks the panels show. The bottom panel
    shows all and useful iterations per device-second over time, the gap between them shaded as waste.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    act = report.activity
    t0 = act.start or report.experiment["created_at"]
    t_end = max(act.end or t0, t0) - t0
    x_range = max(t_end, gp.MIN_TIMELINE_BIN_S)
    devices = act.devices
    epoch_end = {(d, e.index): e.end for d, eps in act.epochs.items() for e in eps}
    rows_of: dict[str, dict[tuple[int, int], int]] = {}
    n_rows: dict[str, int] = {}
    for device in devices:
        rows_of[device] = _lane_rows([x for x in act.lanes if x.device == device], epoch_end)
        unlaned = any(s.device == device and s.lane is None for s in act.spans)
        n_rows[device] = max([*rows_of[device].values(), -1]) + 1 + int(unlaned)
    heights = [PLOT_DEVICE_BASE_IN + PLOT_LANE_ROW_IN * max(1, n_rows[d]) for d in devices] + [PLOT_GOODPUT_IN]
    # A bare Figure on the Agg canvas: no pyplot, so a notebook's backend and open figures are left alone.
    total_in = sum(heights) + PLOT_HEADER_IN + PLOT_FOOTER_IN
    fig = Figure(figsize=(PLOT_WIDTH_IN, total_in), dpi=PLOT_DPI)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights, top=1 - PLOT_HEADER_IN / total_in,
                            bottom=PLOT_FOOTER_IN / total_in, left=0.08, right=0.98, hspace=0.45)
    axes = [fig.add_subplot(grid[i]) for i in range(len(heights))]
    for ax in axes[1:]:
        ax.sharex(axes[0])
    cmap = matplotlib.colormaps[PLOT_TRIAL_CMAP]
    seq = {t.trial_id: t.seq for t in report.trial_rows}
    stats = {d.device: d for d in report.device_stats}

    def color(trial_id: str) -> Any:
        return cmap(seq.get(trial_id, abs(hash(trial_id))) % cmap.N)

    def label(trial_id: str) -> str:  # an Optuna study's trials by their Optuna number, as its log names them
        known = None if report.optuna is None else report.optuna.get(trial_id)
        return _short(trial_id) if known is None or known.number is None else str(known.number)

    shown: set[str] = set()  # what the device panels show (the legend's keys below): the legend names only those
    for ax, device in zip(axes, devices, strict=False):
        rows = rows_of[device]
        nothing_row = n_rows[device] - 1

        def row_of(epoch: int, lane: int | None, rows: dict[tuple[int, int], int] = rows,
                   fallback: int = nothing_row) -> int:
            return fallback if lane is None else rows.get((epoch, lane), fallback)

        for life in (x for x in act.lanes if x.device == device):
            end = life.closed_at if life.closed_at is not None else epoch_end.get((device, life.epoch), life.opened_at)
            ax.barh(row_of(life.epoch, life.lane), end - life.opened_at, left=life.opened_at - t0, height=0.9,
                    color=PLOT_IDLE_COLOR, edgecolor="none", zorder=1)
            shown.add("lane")
        by_lane: dict[tuple[int, int | None], list[gp.Span]] = defaultdict(list)
        for s in act.spans:
            if s.device == device:
                by_lane[(s.epoch, s.lane)].append(s)
        for (epoch, lane), spans in by_lane.items():
            y = row_of(epoch, lane)
            for b0, b1, s in _bars(spans, PLOT_MERGE_GAP_FRACTION * x_range):
                kwargs: dict[str, Any] = {"color": color(s.trial_id), "edgecolor": "white", "linewidth": 0.4}
                shown.add("trial")
                if not s.useful:  # the hatch takes the edge colour; a zero-width edge keeps the bar's outline
                    kwargs.update(hatch=PLOT_WASTE_HATCH, edgecolor=PLOT_HATCH_COLOR, linewidth=0)
                    shown.add("wasted")
                ax.barh(y, b1 - b0, left=b0 - t0, height=PLOT_BAR_HEIGHT, zorder=2, **kwargs)
                if (b1 - b0) >= PLOT_LABEL_MIN_FRACTION * x_range:
                    ax.text((b0 + b1) / 2 - t0, y, label(s.trial_id), ha="center", va="center", fontsize=7,
                            zorder=3, color="black", bbox=PLOT_LABEL_BOX)
        waits = gp.idle_intervals(act, device)[gp.IDLE_DRIVER]  # (idle: no busy bar of the device under it)
        if waits:
            ax.broken_barh([(a - t0, b - a) for a, b in waits], (-0.5, max(1, n_rows[device])),
                           facecolors=PLOT_DRIVER_COLOR, alpha=PLOT_DRIVER_ALPHA, edgecolor="none", zorder=1.5,
                           gid="driver_idle")
            shown.add("driver")
        sw = [(s.ts - t0, row_of(s.epoch, s.lane)) for s in act.switches if s.device == device]
        if sw:
            ax.scatter([x for x, _ in sw], [y + PLOT_BAR_HEIGHT / 2 for _, y in sw], marker="v", s=10,
                       color="black", zorder=4, linewidths=0)
            shown.add("switch")
        for kind, (marker, mcolor, _) in PLOT_MARKERS.items():
            pts = [(m.ts - t0, row_of(m.epoch, m.lane)) for m in act.markers if m.device == device and m.kind == kind]
            if pts:
                ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker, s=90, color=mcolor,
                           edgecolors="black", linewidths=0.6, zorder=5)
                shown.add(kind)
        held: dict[int, list[int]] = defaultdict(list)  # row -> the ids of the lanes it showed
        for (_, lane), row in rows.items():
            held[row].append(lane)
        labels = [_row_label(held[i]) for i in range(len(set(rows.values())))]
        if n_rows[device] > len(labels):
            labels.append("no lane")
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylim(len(labels) - 0.5 if labels else 0.5, -0.5)
        d = stats.get(device)
        ax.set_title(device if d is None else device_title(d), fontsize=9, loc="left")
        ax.grid(axis="x", color="#cccccc", linewidth=0.5)
        ax.tick_params(axis="x", labelbottom=False)

    ax = axes[-1]
    bins = [b for b in report.timeline_bins if b.device == gp.TOTAL_DEVICE]
    if bins:
        xs, thr, good = goodput_steps(bins, t0)
        ax.stairs(thr, xs, color=PLOT_THROUGHPUT_COLOR, linewidth=1.2, label="all iterations (throughput)")
        ax.stairs(good, xs, color=PLOT_GOODPUT_COLOR, linewidth=1.8, label="useful iterations (goodput)")
        if any(t > g for t, g in zip(thr, good, strict=True)):  # (a NaN bin, not drawn, compares false)
            ax.stairs(thr, xs, baseline=good, fill=True, color=PLOT_WASTE_COLOR, alpha=0.3, label="wasted")
        drawn = [v for v in (*thr, *good) if not math.isnan(v)]
        ax.set_ylim(0, max([*drawn, 0.0]) * PLOT_GOODPUT_HEADROOM or 1.0)
    ax.set_xlabel("seconds since the first device started")
    ax.set_ylabel("iterations / device-s")
    ax.set_title("goodput over time (all devices)", fontsize=9, loc="left")
    ax.grid(color="#cccccc", linewidth=0.5)
    # above the panel, right of its title: inside it, the box hid the curves it names (a resumed run's second part)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, fontsize=8, frameon=False, borderaxespad=0.2)
    ax.set_xlim(0, x_range)

    tot = report.total_stats
    fig.suptitle(
        f"{report.name} ({report.status}, {report.duration_text}, {plural(len(report.trial_rows), 'trial')}): "
        f"goodput {_fmt(tot.goodput, '.2f')} of {_fmt(tot.throughput, '.2f')} iterations per device-second, "
        f"busy {_fmt(tot.busy_fraction, '.0%')}, {plural(tot.switches, 'switch', 'switches')}",
        fontsize=11, y=1 - 0.15 / total_in)
    keyed = [
        ("lane", Patch(facecolor=PLOT_IDLE_COLOR, label="lane open, idle")),
        ("driver", Patch(facecolor=PLOT_DRIVER_COLOR, alpha=PLOT_DRIVER_ALPHA, label="waiting for the driver")),
        ("trial", Patch(facecolor=cmap(0), edgecolor="white", label="trial computes (colour, number = "
                        + ("Optuna trial)" if report.optuna is not None else "trial)"))),
        ("wasted", Patch(facecolor="white", hatch=PLOT_WASTE_HATCH, edgecolor=PLOT_HATCH_COLOR, linewidth=0,
                         label="wasted (redone or cut short)")),
        ("switch", Line2D([], [], marker="v", linestyle="none", color="black", markersize=5, label="switch")),
    ] + [(kind, Line2D([], [], marker=m, linestyle="none", color=c, markeredgecolor="black", markersize=9,
                       label=lab)) for kind, (m, c, lab) in PLOT_MARKERS.items()]
    handles = [handle for key, handle in keyed if key in shown]
    if handles:
        fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, 1 - 0.55 / total_in))
    return fig
