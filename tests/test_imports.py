"""What importing fluidsalus pulls in: each check runs in a fresh interpreter, where nothing is imported yet."""

from __future__ import annotations

import subprocess
import sys


def run_fresh(code: str) -> None:
    """Run ``code`` in a new Python process and fail with its error output if it fails."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_simulator_and_the_pure_modules_import_without_ray():
    """``import fluidsalus.sim`` runs the package's ``__init__`` first: that must not import Ray (``run`` is loaded
    on first use), while ``from fluidsalus import run`` still gives the Ray-backed entry point."""
    run_fresh("import sys\n"
              "import fluidsalus.sim.cli, fluidsalus.trialgroup.planner, fluidsalus.searchers, fluidsalus.goodput\n"
              "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))[:5]\n"
              "import fluidsalus\n"
              "assert 'run' in dir(fluidsalus) and 'ray' not in sys.modules\n"
              "from fluidsalus import run\n"
              "import fluidsalus.api\n"
              "assert run is fluidsalus.api.run and 'ray' in sys.modules\n")


def test_a_device_process_imports_neither_pydantic_nor_the_front_ends():
    """Every device actor pays its own imports (on two cores, against the run's wall time): the actor, its host,
    the session and ``import fluidsalus`` (which a trainable's module runs) must not pull in the driver's input
    validation (pydantic), optuna or pandas. ``fluidsalus.inspect`` is still the function."""
    run_fresh("import sys\n"
              "import fluidsalus.gpu.actor, fluidsalus.gpu.host, fluidsalus.session, fluidsalus\n"
              "heavy = sorted(m for m in ('pydantic', 'optuna', 'pandas') if m in sys.modules)\n"
              "assert not heavy, heavy\n"
              "assert fluidsalus.inspect.__name__ == 'inspect' and callable(fluidsalus.inspect)\n"
              "from fluidsalus.config import DEFAULT_STORAGE_PATH, STORAGE_PATH_ENV\n"
              "assert STORAGE_PATH_ENV == 'FLUIDSALUS_STORAGE_PATH' and 'pydantic' in sys.modules\n")


#: Test modules whose functions run as trainables on device actors, which import them, without ``ray.tune``
#: (test_tune_interrupt: a test's driver subprocess imports it).
DEVICE_IMPORTED_TEST_MODULES = ("test_tune_frontend", "test_tune_run", "test_tune_gaps", "test_tune_reporter",
                                "test_tune_search_via_optuna", "test_tune_stoppers", "test_searchers_pbt_replay",
                                "test_tune_callback_state", "test_tune_interrupt")


#: Test modules whose trainables run on device actors, with the libraries each imports only in the tests and
#: trainables that use them (at its top they cost each pytest-xdist process that collects it, and each device
#: process that runs any of its trainables, 1.5-4 CPU-s: nevergrad brings pandas).
LAZY_LIBRARY_TEST_MODULES = {"test_tune_integration": ("sklearn", "lightgbm", "xgboost", "lightning"),
                             "test_tune_search_nevergrad": ("nevergrad", "ray.tune", "pandas", "pyarrow"),
                             "test_tune_search_zoopt": ("zoopt", "ray.tune", "pandas", "pyarrow")}


def test_the_tune_test_modules_that_device_actors_import_leave_ray_tune_and_pandas_out():
    """A device actor imports the test module of each trainable it runs, so the module's top-level imports are paid
    by every device process its runs start: ``ray.tune`` (and pandas, pyarrow with it) cost each one about 1.5
    CPU-s. These modules read it through ``_trials.LazyRayTune``, at a test's first use, in the test's process.
    The modules of :data:`LAZY_LIBRARY_TEST_MODULES` leave the libraries listed there out: they import them in the
    tests and trainables that use them (a module that skips itself where its library is not installed is passed
    over there)."""
    import os

    tests = os.path.dirname(os.path.abspath(__file__))
    run_fresh(f"import sys\nsys.path.insert(0, {tests!r})\n"
              f"import fluidsalus.gpu.actor\nfor name in {DEVICE_IMPORTED_TEST_MODULES!r}:\n    __import__(name)\n"
              "heavy = sorted(m for m in ('ray.tune', 'pandas', 'pyarrow') if m in sys.modules)\n"
              "assert not heavy, heavy\n"
              f"import pytest\nfor name, libraries in {LAZY_LIBRARY_TEST_MODULES!r}.items():\n"
              "    try:\n        __import__(name)\n"
              "    except pytest.skip.Exception:\n        continue\n"  # (a library it needs is not installed)
              "    heavy = sorted(m for m in libraries if m in sys.modules)\n"
              "    assert not heavy, (name, heavy)\n")
