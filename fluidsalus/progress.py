"""Live progress of a run: a compact ``rich`` view on a terminal, a periodic plain line elsewhere.

The executor builds one :class:`Progress` per run and calls :meth:`Progress.update` with a snapshot dict
whenever it likes (every loop turn is fine: ``update`` only stores the snapshot and redraws at most once per
refresh interval), then :meth:`Progress.close` at the end. The snapshot contract::

    {
        "elapsed_s": float,                      # since the run started
        "trials": {"PENDING": n, "RUNNING": n, "PAUSED": n, "TERMINATED": n, "ERROR": n},
        "stopped": n,                            # TERMINATED early by the searcher or the stop rule, once started
        "never_started": n,                      # TERMINATED without ever starting (the run's end, a stop)
        "best": int | float | None,              # best of the trials' last values of the metric (an int in full)
        "devices": [{"device": "cpu:0", "lanes": n_lanes_open, "computing": n}],
        "total_trials": int | None,              # when the searcher knows it
        "iterations_done": int,
        "iterations_budget": int | None,         # when the budget is known
    }

Missing keys are read as empty or unknown, so a partial snapshot never breaks a run.

- ``verbose=0``: silent.
- ``verbose>=1`` on a terminal (``stream.isatty()``): a ``rich.live.Live`` view that redraws in place, at most
  every :data:`LIVE_REFRESH_S`: the trials counted in ``fluidsalus ls``'s words (:data:`LIVE_WORDS`: running,
  waiting, terminated, of them stopped or never started, error), the best of the trials' last
  values of the metric (as the best result is judged), lanes in use per device, elapsed time, and the ETA when the
  budget (iterations or trials) is known.
- ``verbose>=1`` elsewhere (a log file, CI): the same facts as one plain line every :data:`PLAIN_INTERVAL_S`.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import numpy as np

#: Least time between two redraws of the live view, seconds. Twice a second looks live and costs nothing.
LIVE_REFRESH_S = 0.5
#: Time between two plain progress lines off a terminal, seconds: often enough to follow, rare enough to read.
PLAIN_INTERVAL_S = 5.0
#: Width of the completion bar of the live view, characters.
BAR_WIDTH = 30
#: Prefix of every plain progress line.
PLAIN_PREFIX = "[fluidsalus]"
#: The trials' part of the progress line before the first trial is counted.
NO_TRIALS_YET = "none yet"


def format_duration(seconds: float | None) -> str:
    """``42.0s``, ``3m05s``, ``2h07m``; ``-`` for None or a non-finite value."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


#: The word a trial is counted under while a driver runs it, by status: Ray Tune's (``terminated``, ``error``,
#: ``running``), ``waiting`` for a pending or paused one; the progress line, the run's summary, ``fluidsalus ls`` and
#: ``inspect`` count in these words (:func:`counts_text`).
LIVE_WORDS = {"PENDING": "waiting", "PAUSED": "waiting", "RUNNING": "running", "TERMINATED": "terminated",
              "ERROR": "error"}
#: The live view's colour of each word trials are counted under (:data:`LIVE_WORDS`).
COUNT_STYLES = {"running": "cyan", "waiting": "yellow", "terminated": "green", "error": "red"}
#: For each word trials are counted under, how many of them are in a state worth naming: ``{"terminated":
#: {"never started": 6}}`` (:func:`count_parts`).
OfThem = Mapping[str, Mapping[str, int]]


def count_parts(counts: Mapping[str, int], of_them: OfThem | None = None) -> list[tuple[str, str]]:
    """``[("error", "1 error"), ("terminated", "8 terminated, 6 of them never started")]``: each word counted (not
    0), sorted, with how many of its trials are in a state worth naming (``of_them``: word -> {state: count}, a 0
    left out): "8 terminated" alone read as eight trials run. :func:`counts_text` joins them."""
    parts = []
    for word, n in sorted(counts.items()):
        if n:
            details = "".join(f", {k} of them {state}" for state, k in (of_them or {}).get(word, {}).items() if k)
            parts.append((word, f"{n} {word}{details}"))
    return parts


def counts_text(counts: Mapping[str, int], of_them: OfThem | None = None) -> str:
    """``1 error, 8 terminated, 6 of them never started``: trials counted by word (:func:`count_parts`), as the
    progress line, the run's summary, ``fluidsalus ls`` and ``inspect`` give them; empty for none."""
    return ", ".join(text for _, text in count_parts(counts, of_them))


#: Significant digits a metric is shown with (the progress line, the run's summary, ``fluidsalus ls`` and ``inspect``).
METRIC_DIGITS = 6
#: Significant digits that give back any float exactly (``repr``'s most): where adding digits always stops.
FLOAT_EXACT_DIGITS = 17


def format_metric(value: Any) -> str:
    """A metric's value as Ray Tune's progress table shows it: an integer in full (``1234567``), a float in
    :data:`METRIC_DIGITS` significant digits (``0.912346``, ``1.23457e+06``), a bool, Python's or NumPy's, as its
    number (``1``: Ray's table reads NumPy's so). A float that is not whole but would round onto a whole number at
    :data:`METRIC_DIGITS` (``0.99999999`` read ``1``, a perfect score it is not; ``123456.7`` read ``123457``) gets
    the fewest more digits that show its fraction (``0.99999999``, ``123456.7``), as Ray's best-trial line shows it.
    A NumPy value is read as its Python number (a ``float32``'s digits are its own: ``0.9999999``). A column of
    values: :func:`format_metric_column`."""
    whole = isinstance(value, (numbers.Integral, np.bool_))  # (a NumPy int in full too, not as a table's float)
    return format_metric_column([int(value) if whole else value], fractions=True)[0]


def format_metric_column(values: Sequence[Any], *, fractions: bool = False) -> list[str]:
    """Metric values shown in one column of a table, in one format, as Ray's table formats a column (tabulate, given
    each value as Ray's ``CLIReporter`` gives it): Python ints and bools alone in full (a bool as it is, ``True``);
    with another real number among them (a float, a NumPy int: tabulate takes only Python's as ints), every number
    as a float in :data:`METRIC_DIGITS` significant digits (``0.99999999`` reads ``1``, as in Ray's table;
    ``1.23457e+06`` for 1234567 beside 0.5 or as an ``np.int64``; a bool as its number, ``1``); a value of another
    kind (a string) as it is, a NumPy bool too (``True``: it is no ``numbers.Number``, and Ray's table gets its
    text). ``fractions``: a value that would round onto a whole number it is not keeps the digits that show its
    fraction, as :func:`format_metric` shows a single value (that value only: the column's other numbers keep
    their :data:`METRIC_DIGITS`)."""
    if all(type(v) in (int, bool) for v in values if isinstance(v, numbers.Real)):  # (float() lost digits > 2**53)
        return [str(v) for v in values]
    return [_float_text(v, _fraction_digits(v) if fractions else METRIC_DIGITS) if isinstance(v, numbers.Real)
            else str(v) for v in values]


def is_table_number(value: Any) -> bool:
    """A value Ray's table takes as a number or a bool in a column of numbers: a real number, a NumPy bool too
    (which ``numbers.Real`` does not take; Ray's table gets its text, ``True``, which tabulate reads as a bool)."""
    return isinstance(value, (numbers.Real, np.bool_))


def _fraction_digits(value: Any) -> int:
    """The fewest significant digits, :data:`METRIC_DIGITS` or more, that do not round a value that is not whole
    onto a whole number (:data:`FLOAT_EXACT_DIGITS` show any fraction); a whole value (an integer) takes
    :data:`METRIC_DIGITS`."""
    if isinstance(value, numbers.Integral) or float(value).is_integer():  # (nan and inf are not whole)
        return METRIC_DIGITS
    return next(d for d in range(METRIC_DIGITS, FLOAT_EXACT_DIGITS + 1)
                if not float(f"{float(value):.{d}g}").is_integer())


def _float_text(value: Any, digits: int) -> str:
    """A number as a float in ``digits`` significant digits; an integer too large for a float in full (tabulate's
    ``float()`` raised ``OverflowError`` there)."""
    try:
        return f"{float(value):.{digits}g}"
    except OverflowError:
        return str(int(value))


class Progress:
    """Shows a run's progress; see the module docstring.

    Args:
        verbose: 0 silent; 1 or more shows progress.
        metric: The metric the best value is of (None: no best shown).
        mode: ``"min"`` or ``"max"`` (shown beside the best value).
        total_trials: Trials the run will have, when known (a snapshot's ``total_trials`` overrides it).
        stream: Where to write (default ``sys.stdout``).
        live: Force the live view (True) or plain lines (False); default: live when ``stream`` is a terminal.
        refresh_s: Least time between two redraws of the live view.
        plain_interval_s: Time between two plain lines.
        clock: Monotonic clock, for tests.
    """

    def __init__(self, verbose: int, metric: str | None, mode: str | None, total_trials: int | None, *,
                 stream: TextIO | None = None, live: bool | None = None, refresh_s: float = LIVE_REFRESH_S,
                 plain_interval_s: float = PLAIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.verbose = verbose
        self.metric = metric
        self.mode = mode
        self.total_trials = total_trials
        self._stream = stream if stream is not None else sys.stdout
        if live is None:
            isatty = getattr(self._stream, "isatty", None)
            live = bool(isatty()) if callable(isatty) else False
        self.live = live
        self._interval = refresh_s if live else plain_interval_s
        self._clock = clock
        self._snapshot: Mapping[str, Any] | None = None
        self._pending = False  # an update came since the last draw
        self._last_draw = -math.inf
        self._live_view: Any = None  # rich.live.Live, started on the first draw
        self._closed = False
        self.draws = 0

    # ------------------------------------------------------------------ public

    def update(self, snapshot: Mapping[str, Any]) -> None:
        """Take the run's current state; redraw if the refresh interval has passed. Cheap: no I/O otherwise."""
        if self.verbose <= 0 or self._closed:
            return
        self._snapshot = snapshot
        self._pending = True
        now = self._clock()
        if now - self._last_draw >= self._interval:
            self._last_draw = now
            self._draw(snapshot)

    def close(self) -> None:
        """Draw the final state (if not drawn yet) and stop the live view. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.verbose <= 0:
            return
        if self._snapshot is not None and self._pending:
            self._draw(self._snapshot)
        if self._live_view is not None:
            self._live_view.stop()
            self._live_view = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ facts

    def facts(self, snap: Mapping[str, Any]) -> dict[str, Any]:
        """The figures shown, from a snapshot (missing keys read as empty or unknown)."""
        trials = snap.get("trials") or {}
        count = {k: int(trials.get(k, 0) or 0) for k in ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR")}
        total = snap.get("total_trials")
        if total is None:
            total = self.total_trials
        finished = count["TERMINATED"] + count["ERROR"]
        done, budget = snap.get("iterations_done"), snap.get("iterations_budget")
        fraction = None
        if budget and done is not None:
            fraction = min(1.0, done / budget)
        elif total:
            fraction = min(1.0, finished / total)
        elapsed = float(snap.get("elapsed_s") or 0.0)
        eta = None
        if fraction is not None and fraction >= 1.0:
            eta = 0.0
        elif fraction:
            eta = elapsed * (1.0 - fraction) / fraction
        best = snap.get("best")
        # (an int stays whole, as format_metric shows it in full; float() lost digits above 2**53)
        best_ok = ((isinstance(best, int) and not isinstance(best, bool))
                   or (isinstance(best, float) and math.isfinite(best)))
        words: dict[str, int] = {}
        for status, n in count.items():
            words[LIVE_WORDS[status]] = words.get(LIVE_WORDS[status], 0) + n
        return {
            "elapsed_s": elapsed, "eta_s": eta, "fraction": fraction, "total": total, "counts": words,
            "running": count["RUNNING"], "paused": count["PAUSED"], "stopped": int(snap.get("stopped") or 0),
            "never_started": int(snap.get("never_started") or 0),
            "best": best if best_ok else None, "devices": list(snap.get("devices") or []),
            "iterations_done": done, "iterations_budget": budget,
        }

    @staticmethod
    def _count_parts(f: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The trials counted as ``fluidsalus ls`` counts them (:func:`count_parts`): ``2 running, 8 terminated, 2
        of them stopped, 6 of them never started`` (stopped by the search or a stop rule once started; never
        started: a time budget ended the run with them queued), ``3 waiting, 1 of them paused``."""
        return count_parts(f["counts"], {
            LIVE_WORDS["TERMINATED"]: {"stopped": f["stopped"], "never started": f["never_started"]},
            LIVE_WORDS["PAUSED"]: {"paused": f["paused"]}})

    def _best_text(self, best: float | None) -> str:
        if not self.metric:
            return ""
        mode = f" ({self.mode})" if self.mode else ""
        return f"best {self.metric}={format_metric(best)}{mode}" if best is not None else f"best {self.metric}=-"

    def line(self, snap: Mapping[str, Any]) -> str:
        """The plain progress line of a snapshot."""
        f = self.facts(snap)
        of = f" of {f['total']}" if f["total"] else ""
        counted = ", ".join(text for _, text in self._count_parts(f)) or NO_TRIALS_YET
        parts = [f"{PLAIN_PREFIX} {format_duration(f['elapsed_s'])}", f"trials{of}: {counted}"]
        best = self._best_text(f["best"])
        if best:
            parts.append(best)
        if f["devices"]:
            parts.append("lanes " + ", ".join(
                f"{d.get('device', '?')} {d.get('computing', 0)}/{d.get('lanes', 0)}" for d in f["devices"]))
        if f["iterations_budget"]:
            parts.append(f"iterations {f['iterations_done'] or 0}/{f['iterations_budget']}")
        if f["eta_s"] is not None:
            parts.append(f"ETA {format_duration(f['eta_s'])}")
        return " | ".join(parts)

    # ------------------------------------------------------------------ drawing

    def _draw(self, snap: Mapping[str, Any]) -> None:
        self._pending = False
        self.draws += 1
        if self.live and self._draw_live(snap):
            return
        print(self.line(snap), file=self._stream, flush=True)

    def _draw_live(self, snap: Mapping[str, Any]) -> bool:
        """Redraw the rich view; False when rich is not installed (plain lines are used instead)."""
        try:
            from rich.console import Console
            from rich.live import Live
        except ImportError:
            self.live = False
            return False
        renderable = self.renderable(snap)
        if self._live_view is None:
            console = Console(file=self._stream, force_terminal=True)
            self._live_view = Live(renderable, console=console, auto_refresh=False, transient=False)
            self._live_view.start(refresh=True)
        else:
            self._live_view.update(renderable, refresh=True)
        return True

    def renderable(self, snap: Mapping[str, Any]) -> Any:
        """The rich renderable of the live view for a snapshot."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        f = self.facts(snap)
        head = Table.grid(padding=(0, 2))
        head.add_row(
            Text("fluidsalus", style="bold"),
            Text(f"elapsed {format_duration(f['elapsed_s'])}"),
            Text(f"ETA {format_duration(f['eta_s'])}" if f["eta_s"] is not None else "ETA -"),
            ProgressBar(total=1.0, completed=f["fraction"] or 0.0, width=BAR_WIDTH)
            if f["fraction"] is not None else Text(""),
            Text(f"{f['fraction']:.0%}" if f["fraction"] is not None else ""),
        )
        of = f" of {f['total']}" if f["total"] else ""
        trials = Text()
        trials.append(f"trials{of}: ", style="bold")
        counted = self._count_parts(f)
        for i, (word, text) in enumerate(counted):
            trials.append(", " if i else "")
            trials.append(text, style=COUNT_STYLES.get(word, ""))
        if not counted:
            trials.append(NO_TRIALS_YET)
        parts: list[Any] = [head, trials]
        facts = Text(self._best_text(f["best"]), style="bold magenta")
        if f["iterations_budget"]:
            facts.append(f"{'   ' if facts else ''}iterations {f['iterations_done'] or 0}/{f['iterations_budget']}",
                         style="")
        if facts:
            parts.append(facts)
        if f["devices"]:
            table = Table(box=None, padding=(0, 2), show_edge=False, header_style="bold")
            table.add_column("device")
            table.add_column("lanes open", justify="right")
            table.add_column("computing", justify="right")
            for d in f["devices"]:
                table.add_row(str(d.get("device", "?")), str(d.get("lanes", 0)), str(d.get("computing", 0)))
            parts.append(table)
        return Group(*parts)
