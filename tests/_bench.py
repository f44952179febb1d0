"""Run a script of ``benchmarks/`` as a user does, from the repository root, for the tests of its command line."""

from __future__ import annotations

import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Longest a benchmark's test run may take (their test runs take seconds to a minute on 2 CPUs).
TIMEOUT_S = 120


def run_benchmark(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<script>`` with ``args`` in a subprocess that imports this checkout's fluidsalus.

    Args:
        script: The file name in ``benchmarks/``, e.g. ``"lanes.py"``.
        *args: Its command-line arguments.

    Returns:
        The finished process, with its stdout and stderr as text.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, os.path.join(REPO_ROOT, "benchmarks", script), *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO_ROOT, env=env)
