"""How a process whose Ray fluidsalus started ends after Ctrl-C or SIGTERM: as Python (and Optuna) end it.

Starting Ray in a process changes how the process ends on a signal, whoever runs in it (a bare ``ray.init()``
does the same; measured with Ray 2.60 and Python 3.11, h234):

- **Ctrl-C.** Python ends a script whose ``KeyboardInterrupt`` nothing caught by killing itself with SIGINT once
  it is finalized, so its exit status is 130 (128 + SIGINT) to a shell, ``-2`` to ``subprocess``. With Ray started,
  its exit handler (``ray.shutdown`` at exit) makes that status 1, as a plain error's; shutting Ray down before the
  exception reaches the top level keeps 130, but an exception hook or an exit handler that shuts it down after
  that does not (Python forgets the interrupt).
- **SIGTERM.** Python leaves SIGTERM to the system: the process ends at once with status 143 (128 + SIGTERM).
  ``ray.init`` sets a handler of its own (``sys.exit(15)``, which unwinds the run as an error) and Ray's core
  worker a crash handler over it, which aborts the process (134, a crash report on stderr), so one SIGTERM
  ends the process one way or the other depending on where it lands.

So when fluidsalus starts Ray itself (:func:`fluidsalus.api.init_ray`: ``fluidsalus.run``,
``fluidsalus.optuna.optimize``, the Tune front end's ``fit``), :func:`ray_started` puts SIGTERM's handler back
as it was before Ray's start, and :func:`exit_as_interrupted` (an exit handler, registered once) ends a process
that is exiting because of a ``KeyboardInterrupt`` nothing caught as Python would have: the other exit handlers
run (Ray's shutdown among them, which ends the run's actors and the local Ray's processes), then the process kills
itself with SIGINT. The run itself has already recorded its interruption (``INTERRUPTED`` in its store) when the
exception left it. A script that starts Ray itself (``ray.init()``) keeps Ray's ways, as does an
interactive session (``python -i``, IPython, Jupyter: there the interrupt does not end the process).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["exit_as_interrupted", "ray_started"]

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


def uncaught_keyboard_interrupt() -> bool:
    """Whether the interpreter is exiting because of a ``KeyboardInterrupt`` nothing caught (Python keeps the
    uncaught exception in ``sys.last_exc``, ``sys.last_value`` before 3.12), outside an interactive session
    (``python -i``, ``code.interact``, IPython and Jupyter, which keep the last exception they showed there too)."""
    if sys.flags.interactive or hasattr(sys, "ps1") or "IPython" in sys.modules:
        return False
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return isinstance(last, KeyboardInterrupt)


def exit_as_interrupted() -> None:
    """Exit handler: after a ``KeyboardInterrupt`` nothing caught, run the other exit handlers now (Ray's
    shutdown among them) and end the process by SIGINT, as Python ends it without Ray (exit status 130); else
    nothing."""
    if not uncaught_keyboard_interrupt():
        return
    atexit.unregister(exit_as_interrupted)
    run_others = getattr(atexit, "_run_exitfuncs", None)  # (CPython's; the others run before the process ends)
    if run_others is None:
        return  # (where it is missing, the process ends as Ray makes it end)
    run_others()  # (the handlers registered before this one: Ray's, logging's, the script's own)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # (a stream closed or replaced by the script)
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(128 + signal.SIGINT)  # (as Python, where the signal could not end the process)
