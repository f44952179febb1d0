"""The suite's measured seconds per test file, which ``tests/conftest.py`` orders the files by (longest first).

``make test`` runs the suite in pytest-xdist processes, each of which takes whole files (``--dist loadfile``) as it
becomes free. A long file that starts last keeps one process busy after the others have ended: the 3 tests of
``test_examples.py`` (about 50 s) ran near the end, as xdist's own order goes by the number of tests per file. The
files are given out longest first instead (the longest-processing-time rule), by the seconds a run measured.

Run ``make test-seconds`` after the suite changes much: it runs the suite with a JUnit report and writes
``tests/file_seconds.json`` from it (this module's :func:`main`, which also takes several reports and averages
them). A file missing from it goes first (it may be long).
"""

from __future__ import annotations

import json
import math
import os
import sys
import xml.etree.ElementTree as ElementTree

#: Where the measured seconds are kept, beside this module.
SECONDS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_seconds.json")


def load(path: str = SECONDS_PATH) -> dict[str, float]:
    """The measured seconds per test file (``tests/test_x.py``), or none when the file is missing."""
    try:
        with open(path) as f:
            return {str(name): float(seconds) for name, seconds in json.load(f).items()}
    except FileNotFoundError:
        return {}


def order_key(seconds: dict[str, float]):
    """The sort key of a collected item: its file's measured seconds, longest first; an unmeasured file first."""

    def key(item) -> float:
        return -seconds.get(item.nodeid.split("::", 1)[0], math.inf)

    return key


def from_junit(report_path: str) -> dict[str, float]:
    """Sum a JUnit XML report's test times per file (pytest writes ``classname`` as ``tests.test_x``)."""
    totals: dict[str, float] = {}
    for case in ElementTree.parse(report_path).getroot().iter("testcase"):
        name = case.get("classname", "").split(".")
        module = [part for part in name if part.startswith("test_")]
        if not module:
            continue
        path = "/".join(name[:name.index(module[0]) + 1]) + ".py"
        totals[path] = totals.get(path, 0.0) + float(case.get("time") or 0.0)
    return totals


def main(argv: list[str]) -> int:
    """``python tests/_file_seconds.py REPORT.xml [...]``: write :data:`SECONDS_PATH` from JUnit reports (a file's
    seconds are the mean over the reports; one run's figures vary by a third from the next's)."""
    if not argv:
        print("usage: python tests/_file_seconds.py REPORT.xml [REPORT.xml ...]", file=sys.stderr)
        return 2
    runs = [from_junit(path) for path in argv]
    if not all(runs):
        print(f"{argv[runs.index({})]}: no test times in it", file=sys.stderr)
        return 1
    names = {name for run in runs for name in run}
    totals = {name: sum(run.get(name, 0.0) for run in runs) / len(runs) for name in names}
    with open(SECONDS_PATH, "w") as f:
        json.dump({k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}, f, indent=0)
        f.write("\n")
    print(f"wrote {SECONDS_PATH}: {len(totals)} files, {sum(totals.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
