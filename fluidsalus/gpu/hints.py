"""Hints added to a trial's error where a library's own message hides that the trials of a device share a process.

Ray Tune gives every trial a process of its own; fluidsalus runs the trials of a device as threads of one
process (docs/lanes.md). A library with one state per process can therefore fail a trial because of what a
neighbour did, with a message that names only the library's own state. Each entry of
:data:`SHARED_PROCESS_ERRORS` is a fragment of such a message and what to do about it (docs/compatibility.md).
"""

from __future__ import annotations

#: (fragment of the error text, hint): the errors that trials sharing a process cause one another.
SHARED_PROCESS_ERRORS: tuple[tuple[str, str], ...] = (
    # W&B 0.19+: wandb.init(reinit=True), which Ray's setup_wandb passes, finishes every other run of the process,
    # so a neighbour's init finishes this trial's run, and its next log raises wandb's UsageError.
    ("is finished. The call to",
     "another trial on this device may have finished this trial's W&B run: the trials of a device share a "
     "process, and wandb.init(reinit=True), which Ray's setup_wandb passes, finishes the process's other runs; "
     "pass reinit=\"create_new\" to setup_wandb and log through the run it returns (docs/compatibility.md, "
     "\"W&B\")"),
)


def shared_process_hint(error: str, max_lanes: int) -> str | None:
    """What to do about an error that a neighbour in the device's process may have caused, or None.

    Args:
        error: The trial's error text (``"<type>: <message>"``).
        max_lanes: The device's trial slots: with one, a trial has no neighbour while it runs.

    Returns:
        The hint of the first entry of :data:`SHARED_PROCESS_ERRORS` whose fragment is in ``error``, or None.
    """
    if max_lanes < 2:
        return None
    return next((hint for fragment, hint in SHARED_PROCESS_ERRORS if fragment in error), None)
