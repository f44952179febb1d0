"""The process-global random generators a trial draws from, saved and restored at its lane's switches.

Python's ``random``, NumPy's ``np.random.*`` functions and torch's default generators (CPU, and CUDA once it is
initialised) are per process; the trials of a device are threads of one process. Under Ray each trial is a
process of its own, so a trial that seeds them (``torch.manual_seed(config["seed"])``) has their streams to
itself. On a device of one lane exactly one trial runs at a time, so the device host can give each trial its own
streams: it saves them when the trial gives its lane's turn away and restores them when the trial gets it back
(:class:`fluidsalus.gpu.host.DeviceHost`). A trial's first turn starts from fresh streams, seeded from the
operating system's entropy as a new process's are (torch seeds its default generator so too), never from
another trial's.

Only modules already imported are touched: nothing here imports NumPy or torch.
"""

from __future__ import annotations

import random
import sys
from typing import Any

__all__ = ["RngState", "capture", "restore"]

#: ``{module name: state}`` of the generators a trial left (see :func:`capture`).
RngState = dict[str, Any]

#: Python's own generator: the module-level functions of ``random`` draw from it.
_PYTHON = "random"
_NUMPY = "numpy"
_TORCH = "torch"
_TORCH_CUDA = "torch.cuda"


def capture() -> RngState:
    """The current state of every global generator of an imported module.

    Returns:
        ``{name: state}`` for Python's ``random``, NumPy's legacy global generator (when NumPy is imported), and
        torch's default CPU generator and current CUDA device generator (when torch is imported and, for CUDA,
        initialised).
    """
    state: RngState = {_PYTHON: random.getstate()}
    numpy = sys.modules.get(_NUMPY)
    if numpy is not None and hasattr(numpy, "random"):
        state[_NUMPY] = numpy.random.get_state()
    torch = _torch()
    if torch is not None:
        state[_TORCH] = torch.get_rng_state()
        if torch.cuda.is_initialized():
            state[_TORCH_CUDA] = torch.cuda.get_rng_state()
    return state


def restore(state: RngState | None) -> None:
    """Make ``state`` the global generators' state; a generator ``state`` has nothing for is seeded afresh.

    A trial's first turn restores None: all its generators start fresh, from the OS's entropy. A module that was
    imported after the trial's state was captured starts fresh for it too, so no two trials ever continue the
    same stream (they would draw the same numbers).

    Args:
        state: What :func:`capture` returned when the trial last gave its turn away, or None.
    """
    state = state or {}
    if _PYTHON in state:
        random.setstate(state[_PYTHON])
    else:
        random.seed()
    numpy = sys.modules.get(_NUMPY)
    if numpy is not None and hasattr(numpy, "random"):
        if _NUMPY in state:
            numpy.random.set_state(state[_NUMPY])
        else:
            numpy.random.seed()
    torch = _torch()
    if torch is not None:
        if _TORCH in state:
            torch.set_rng_state(state[_TORCH])
        else:
            torch.random.default_generator.seed()
        if torch.cuda.is_initialized():
            if _TORCH_CUDA in state:
                torch.cuda.set_rng_state(state[_TORCH_CUDA])
            else:
                torch.cuda.seed()


def _torch() -> Any:
    """torch, when it is imported and done importing (a trial may be importing it in another thread)."""
    torch = sys.modules.get(_TORCH)
    if torch is None or not hasattr(torch, "get_rng_state") or not hasattr(torch, "cuda"):
        return None
    return torch
