"""Live progress: silent at verbose=0, rate-limited, a rich view on a terminal and plain lines elsewhere."""

from __future__ import annotations

import io
import re
import time

import numpy as np
import pytest

from fluidsalus.progress import LIVE_REFRESH_S, PLAIN_INTERVAL_S, PLAIN_PREFIX, Progress, format_duration, format_metric


def snapshot(elapsed=12.5, done=5, budget=None, total=12, best=0.93123):
    return {
        "elapsed_s": elapsed,
        "trials": {"PENDING": 2, "RUNNING": 3, "PAUSED": 1, "TERMINATED": done, "ERROR": 1},
        "stopped": 2,
        "best": best,
        "devices": [{"device": "cpu:0", "lanes": 2, "computing": 1}, {"device": "cpu:1", "lanes": 1, "computing": 1}],
        "total_trials": total,
        "iterations_done": 40,
        "iterations_budget": budget,
    }


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verbose_0_is_silent():
    out = Tty()
    p = Progress(0, "acc", "max", 10, stream=out)
    p.update(snapshot())
    p.close()
    assert out.getvalue() == "" and p.draws == 0


def test_plain_lines_are_periodic_off_a_terminal():
    out, clock = io.StringIO(), Clock()
    p = Progress(1, "acc", "max", None, stream=out, clock=clock)
    assert not p.live  # a StringIO is not a terminal
    p.update(snapshot(elapsed=1.0))  # 6 of 12 trials ended (5 done, 1 errored) in 1 s: 1 s to go
    clock.t = PLAIN_INTERVAL_S / 2
    p.update(snapshot(elapsed=2.0))  # too soon: not drawn
    clock.t = PLAIN_INTERVAL_S
    p.update(snapshot(elapsed=6.0))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(line.startswith(PLAIN_PREFIX) for line in lines)
    assert lines[0] == (f"{PLAIN_PREFIX} 1.0s | trials of 12: 1 error, 3 running, 5 terminated, 2 of them stopped, "
                        "3 waiting, 1 of them paused | best acc=0.93123 (max) | lanes cpu:0 1/2, cpu:1 1/1 | ETA 1.0s")
    clock.t = PLAIN_INTERVAL_S + 1
    p.update(snapshot(elapsed=7.0, done=11))
    p.close()  # draws the last state, which was not shown yet
    p.close()  # idempotent
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "11 terminated" in lines[-1] and "7.0s" in lines[-1]


def test_eta_from_the_iteration_budget_and_unknown_budget():
    p = Progress(1, "loss", "min", None, stream=io.StringIO())
    facts = p.facts(snapshot(elapsed=10.0, budget=160))
    assert facts["fraction"] == pytest.approx(0.25) and facts["eta_s"] == pytest.approx(30.0)
    line = p.line(snapshot(elapsed=10.0, budget=160, total=None))
    assert "iterations 40/160" in line and "ETA 30.0s" in line and "trials:" in line
    unknown = p.line({"elapsed_s": 3.0, "trials": {"RUNNING": 1}, "best": None})
    assert "ETA" not in unknown and "best loss=-" in unknown
    assert p.facts({})["running"] == 0  # a partial snapshot is read as empty, never an error


def test_live_view_on_a_terminal_is_rate_limited():
    out, clock = Tty(), Clock()
    p = Progress(1, "acc", "max", 12, stream=out, clock=clock)
    assert p.live
    for i in range(1000):  # many cheap updates within one refresh interval: one draw
        p.update(snapshot(elapsed=i * 1e-4))
    assert p.draws == 1
    clock.t = LIVE_REFRESH_S
    p.update(snapshot(elapsed=20.0, done=6))
    assert p.draws == 2
    p.close()
    text = out.getvalue()
    for fragment in ("fluidsalus", "1 error", "3 running", "6 terminated, 2 of them stopped", "3 waiting",
                     "best acc=0.93123 (max)", "cpu:0", "cpu:1", "lanes open", "computing", "elapsed 20.0s",
                     "ETA 14.3s"):  # 7 of 12 trials ended in 20 s
        assert fragment in text, fragment
    assert "\x1b[" in text  # drawn in place by rich (cursor movement, colours)


def test_done_trials_that_never_started_are_counted_beside_the_stopped_ones():
    """A time budget that ends a run with trials still queued ends them TERMINATED, as Ray's status line counts
    them ("8 TERMINATED"): "8 terminated" alone read as eight trials run. Both views say how many never started,
    in the words of ``fluidsalus ls``."""
    snap = {**snapshot(done=8), "never_started": 6}
    line = Progress(1, "acc", "max", 12, stream=io.StringIO()).line(snap)
    assert "1 error, 3 running, 8 terminated, 2 of them stopped, 6 of them never started, 3 waiting" in line
    assert "never started" not in Progress(1, "acc", "max", 12, stream=io.StringIO()).line(snapshot())
    out, clock = Tty(), Clock()
    live = Progress(1, "acc", "max", 12, stream=out, clock=clock)
    live.update(snap)
    live.close()
    shown = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue()).split())  # (wrapped at its width)
    assert "8 terminated, 2 of them stopped, 6 of them never started" in shown


def test_update_is_cheap():
    p = Progress(1, "acc", "max", 12, stream=io.StringIO())
    snap = snapshot()
    p.update(snap)
    start = time.perf_counter()
    for _ in range(20000):
        p.update(snap)
    assert time.perf_counter() - start < 0.5
    assert p.draws == 1


def test_format_duration():
    assert format_duration(None) == "-" and format_duration(float("inf")) == "-"
    assert format_duration(42.04) == "42.0s" and format_duration(185) == "3m05s"
    assert format_duration(7620) == "2h07m"


def test_a_metric_just_below_a_whole_number_is_not_shown_as_that_number():
    """``best accuracy=1`` for 0.99999999 (6 significant digits) read as a perfect score: Ray Tune prints
    0.99999999. Other values keep 6 significant digits."""
    assert format_metric(0.99999999) == "0.99999999" and format_metric(2.9999999) == "2.9999999"
    assert format_metric(1) == "1" and format_metric(1.0) == "1" and format_metric(0.5) == "0.5"
    assert format_metric(0.123456789) == "0.123457" and format_metric(-0.99999999) == "-0.99999999"
    progress = Progress(1, "accuracy", "max", None, stream=io.StringIO(), live=False)
    assert "best accuracy=0.99999999 (max)" in progress.line({"best": 0.99999999})


def test_a_metric_is_shown_as_rays_table_shows_it_with_only_the_digits_its_fraction_needs():
    """Ray's table shows an integer in full and a float in 6 significant digits; a fraction that 6 digits would
    round away onto a whole number gets the fewest more digits that show it (123456.7 was printed in full by repr,
    an int of 1e6 or more as a float, one above 2**53 with the wrong digits, a float32 with float64's noise:
    h148's F2)."""
    assert format_metric(123456.7) == "123456.7" and format_metric(999999.5) == "999999.5"
    assert format_metric(1234567.5) == "1234567.5" and format_metric(123456.789) == "123456.8"
    assert format_metric(1234567) == "1234567" and format_metric(np.int64(1234567)) == "1234567"
    assert format_metric(2**53 + 1) == "9007199254740993"
    assert format_metric(np.float32(0.9999999)) == "0.9999999" and format_metric(np.float32(0.25)) == "0.25"
    # a whole float, and one too large to have a fraction, keep Ray's 6 digits
    assert format_metric(1234567.0) == "1.23457e+06" and format_metric(1.2345678e20) == "1.23457e+20"
    assert [format_metric(v) for v in (float("nan"), float("inf"), -float("inf"), True, 1e-300)] == [
        "nan", "inf", "-inf", "1", "1e-300"]


def test_a_column_of_metrics_is_shown_in_one_format_as_rays_table_shows_a_column():
    """A table's column mixed forms (``1.23457e+06`` for 1234567.0 beside ``1234567.5``: h148's F2, h156's note):
    ``format_metric_column`` gives a column one format, as Ray's table (tabulate) does: integers alone in full;
    with a float, every number in 6 significant digits (``1`` for 0.99999999, as Ray's); another kind of value as
    it is."""
    from fluidsalus.progress import format_metric_column

    assert format_metric_column([1234567.0, 1234567.5, 0.99999999, 3]) == ["1.23457e+06", "1.23457e+06", "1", "3"]
    assert format_metric_column([1234567.0, 0.5]) == ["1.23457e+06", "0.5"]  # (Ray's table: the same)
    assert format_metric_column([3, 2**53 + 1, 7]) == ["3", "9007199254740993", "7"]
    assert format_metric_column([0.123456789, 0.99999999]) == ["0.123457", "1"]
    assert format_metric_column(["-", float("nan"), 0.5, float("inf")]) == ["-", "nan", "0.5", "inf"]
    assert format_metric_column([]) == []
    for value in (1234567.0, 1234567.5, 0.123456789, 0.99999999, 7, "x"):  # (one value, fractions: format_metric's)
        assert format_metric_column([value], fractions=True) == [format_metric(value)]


def test_a_value_that_would_round_onto_a_whole_number_does_not_widen_its_column():
    """One such value gave its whole column the digits that show its fraction, up to 17 (``0.9999999999999999``
    beside ``0.3333333333333333``: h174's D2). Ray's table shows it in the column's 6 digits (``1``,
    ``ray_tab_bools.py`` in h182's notes); with ``fractions`` (``ls``'s BEST column, a best value as the summary
    shows it) that value alone keeps its fraction."""
    from fluidsalus.progress import format_metric_column

    column = [1 - 2**-53, 1 / 3, 2 / 3, 0.123456789]
    assert format_metric_column(column) == ["1", "0.333333", "0.666667", "0.123457"]
    assert format_metric_column(column, fractions=True) == ["0.9999999999999999", "0.333333", "0.666667",
                                                            "0.123457"]
    assert format_metric_column([0.99999999, 1234567.5, 7], fractions=True) == ["0.99999999", "1234567.5", "7"]


def test_a_bool_is_shown_as_rays_table_shows_it():
    """A bool beside floats printed ``True`` (Ray's table: ``1``), and ``format_metric`` showed NumPy's ``True`` as
    ``True`` where it shows Python's as ``1`` (h174's B3). As Ray's table (tabulate): beside a float a bool is its
    number; a column of Python bools ``True``/``False``; a NumPy bool as its text (below)."""
    from fluidsalus.progress import format_metric_column

    assert format_metric_column([True, 0.5, False]) == ["1", "0.5", "0"]
    assert format_metric_column([True, False, "", None]) == ["True", "False", "", "None"]
    assert [format_metric(v) for v in (True, np.True_, np.False_)] == ["1", "1", "0"]


def test_a_column_shows_numpy_values_as_rays_cli_reporter_gives_them_to_tabulate():
    """Ray's ``CLIReporter`` hands tabulate a number as it is and a NumPy bool (no ``numbers.Number``) as its text,
    and tabulate takes only Python's ints as ints: ``[True, np.int64(3)]`` is ``1, 3`` in Ray's table (it read
    ``True, 3``), ``[np.True_, True]`` ``True, True`` (``1, True``), an ``np.int64`` column ``1.23457e+06``
    (``1234567``: h188's F6, ``i1_tabulate.py`` in h195's notes). A single value (the progress line, the run's
    summary) keeps a NumPy int in full, as Ray's best-trial line does."""
    from fluidsalus.progress import format_metric_column

    assert format_metric_column([True, np.int64(3)]) == ["1", "3"]
    assert format_metric_column([np.True_, True]) == ["True", "True"] and format_metric_column([np.True_]) == ["True"]
    assert format_metric_column([np.False_, 3]) == ["False", "3"]
    assert format_metric_column([np.True_, 0.5]) == ["True", "0.5"]  # (Ray's table: a ValueError from tabulate)
    assert format_metric_column([np.int64(1234567), 5]) == ["1.23457e+06", "5"]
    assert format_metric_column([3, 2**53 + 1, np.int64(7)]) == ["3", "9.0072e+15", "7"]
    assert format_metric_column([np.int32(7), np.int32(8)]) == ["7", "8"]
    assert format_metric(np.int64(1234567)) == "1234567" and format_metric(np.int64(2**53 + 1)) == "9007199254740993"


def test_an_integer_too_large_for_a_float_is_shown_in_full_in_a_column_with_a_float():
    """``float()`` of an int above ~1e308 raised ``OverflowError`` (h174's D3; Ray's tabulate raises it too)."""
    from fluidsalus.progress import format_metric_column

    assert format_metric_column([10**400, 0.5]) == [str(10**400), "0.5"]
    assert format_metric(10**400) == str(10**400)
