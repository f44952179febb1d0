"""How a process whose Ray fluidsalus started ends after Ctrl-C or SIGTERM: as Python (and Optuna) end it.

Starting Ray in a process changes how the process ends on a signal, whoever runs in it (a bare ``ray.init()``
does the same; measured with Ray 2.60 and Python 3.11, h234):

- **Ctrl-C.** Python ends a script whose ``KeyboardInterrupt`` nothing caught by killing itself with SIGINT once
  it is finalized, so its exit status is 130 (128 + SIGINT) to a shell, ``-2`` to ``subprocess``. With Ray started,
  its exit handler (``ray.shutdown`` at exit) makes that status 1, as a plain error's; shutting Ray down before the
  exception reaches the top level keeps 130, but an exception hook or an exit handler that shuts it down after
  that does not: CPython keeps "the interrupt went uncaught" in a flag that each top-level run of code
  (``PyRun_String``) sets anew, and Ray's shutdown imports Cython modules whose start runs code so (h239).
- **SIGTERM.** Python leaves SIGTERM to the system: the process ends at once with status 143 (128 + SIGTERM).
  ``ray.init`` sets a handler of its own (``sys.exit(15)``, which unwinds the run as an error) and Ray's core
  worker a crash handler over it, which aborts the process (134, a crash report on stderr), so one SIGTERM
  ends the process one way or the other depending on where it lands.

So when fluidsalus starts Ray itself (:func:`fluidsalus.api.init_ray`: ``fluidsalus.run``,
``fluidsalus.optuna.optimize``, the Tune front end's ``fit``), :func:`ray_started` puts SIGTERM's handler back
as it was before Ray's start, and :func:`exit_as_interrupted` (an exit handler, registered once) makes a process
that is exiting because of a ``KeyboardInterrupt`` nothing caught end as Python would have: it shuts Ray down
there (which ends the run's actors and the local Ray's processes; Ray's own exit handler, a moment later, then
has nothing to do) and sets CPython's flag again, so the other exit handlers run (each once, in their order),
the interpreter is finalized (open files flushed and closed) and CPython itself ends the process by SIGINT. (It
ran the other exit handlers itself and killed the process: a handler registered after Ray's start ran twice,
and a file the script left open lost what it had not flushed, h239.) The run itself has already recorded its
interruption (``INTERRUPTED`` in its store) when the exception left it. A script that starts Ray itself
(``ray.init()``) keeps Ray's ways, as does an interactive session (``python -i``, IPython, Jupyter: there the
interrupt does not end the process).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["exit_as_interrupted", "mark_uncaught_interrupt", "ray_started"]

#: ``Py_file_input`` of CPython's C API (Python.h): the start symbol of a module's code, for ``PyRun_StringFlags``.
PY_FILE_INPUT = 257

#: The code run to set CPython's "uncaught KeyboardInterrupt" flag again (see :func:`mark_uncaught_interrupt`).
_RAISE_INTERRUPT = b"raise KeyboardInterrupt"

#: The signals whose handling Ray's start changes and that are put back after it.
RESTORED_SIGNALS: tuple[int, ...] = (signal.SIGTERM,) if hasattr(signal, "SIGTERM") else ()

_registered = False
_registered_lock = threading.Lock()


@contextlib.contextmanager
def ray_started() -> Iterator[None]:
    """Around fluidsalus's own ``ray.init``: SIGTERM's handler is put back as it was before (in the main thread,
    the only one that can set handlers; Ray sets none from another), and :func:`exit_as_interrupted` is registered
    as an exit handler (once per process, after ``import ray`` registered Ray's, so it runs before Ray's)."""
    main = threading.current_thread() is threading.main_thread()
    before: dict[int, Any] = {signum: signal.getsignal(signum) for signum in RESTORED_SIGNALS} if main else {}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:  # (None: set outside Python, cannot be put back)
                signal.signal(signum, handler)
        _register()


def _register() -> None:
    global _registered
    with _registered_lock:
        if not _registered:
            atexit.register(exit_as_interrupted)
            _registered = True


def in_ipython() -> bool:
    """Whether an IPython shell (a terminal's, a Jupyter kernel's) runs the process; IPython imported by a script
    (``IPython.display``, or a library that uses it) is not one (it was taken for one, and such a script ended with
    status 1 after a Ctrl-C again, h239). Read as Ray reads it (``ray.widgets.util``): without importing IPython."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    if get_ipython is None:
        return False
    try:
        return get_ipython() is not None
    except Exception:  # noqa: BLE001 - a broken IPython: taken for a shell, which leaves the process as Ray ends it
        return True


def uncaught_keyboard_interrupt() -> bool:
    """Whether the interpreter is exiting because of a ``KeyboardInterrupt`` nothing caught (Python keeps the
    uncaught exception in ``sys.last_exc``, ``sys.last_value`` before 3.12), outside an interactive session
    (``python -i``, ``code.interact``, IPython and Jupyter, which keep the last exception they showed there too)."""
    if sys.flags.interactive or hasattr(sys, "ps1") or in_ipython():
        return False
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return isinstance(last, KeyboardInterrupt)


def mark_uncaught_interrupt() -> bool:
    """Set CPython's "the program ended by an uncaught ``KeyboardInterrupt``" flag again, which makes it end the
    process by SIGINT once it is finalized: CPython sets it where code it runs at the top level
    (``PyRun_StringFlags``) raises ``KeyboardInterrupt``, so a top-level run of ``raise KeyboardInterrupt`` sets it
    (the exception is caught here; nothing is printed). False where it cannot (another interpreter, no ``ctypes``
    C API): the process then ends as Ray makes it end."""
    if sys.implementation.name != "cpython" or not hasattr(ctypes, "pythonapi"):
        return False
    try:
        # (a prototype of its own: the shared ctypes.pythonapi.PyRun_StringFlags keeps whatever types others set)
        run = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object,
                                ctypes.c_void_p)(("PyRun_StringFlags", ctypes.pythonapi))
        namespace: dict[str, Any] = {"__builtins__": __builtins__}
        run(_RAISE_INTERRUPT, PY_FILE_INPUT, namespace, namespace, None)
    except KeyboardInterrupt:
        return True
    except Exception:  # noqa: BLE001 - an exit handler must not fail: the process ends as Ray makes it end
        return False
    return False


def exit_as_interrupted() -> None:
    """Exit handler: after a ``KeyboardInterrupt`` nothing caught, shut Ray down now (what Ray's own exit handler,
    which runs after this one, would do) and set CPython's interrupt flag again after it
    (:func:`mark_uncaught_interrupt`), so that the process ends by SIGINT once the other exit handlers ran and the
    interpreter is finalized, as Python ends it without Ray (exit status 130); else nothing. (So Ray is down before
    the exit handlers registered between ``import ray`` and fluidsalus's start of Ray run, where at a plain exit
    they run before Ray's shutdown: the flag must be set after it.)"""
    if not uncaught_keyboard_interrupt():
        return
    atexit.unregister(exit_as_interrupted)
    ray = sys.modules.get("ray")
    if ray is not None:
        with contextlib.suppress(Exception):  # (as Ray's own handler's: a failed shutdown must not hide the end)
            ray.shutdown(_exiting_interpreter=True)  # (the argument Ray's own exit handler passes)
    mark_uncaught_interrupt()
