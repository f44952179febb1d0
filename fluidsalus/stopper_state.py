"""The run's stopper, saved beside the experiment's store, so that a resumed run goes on with its state.

A stopper object (one with ``stop_all()``: ``MaximumIterationStopper``, ``TimeoutStopper``,
``ExperimentPlateauStopper``, ``CombinedStopper``, a stopper of your own) keeps state across results: counts per
trial, the budget left, the top values seen. Ray Tune keeps its stopper in the experiment state it saves, and a
restored experiment goes on with it. Here the driver's copy, which every result reaches, is pickled to
:data:`STOPPER_STATE_FILE` in the experiment's folder with Ray's period (:mod:`fluidsalus._periodic`) and once more
at the run's end, whatever ends it; a resumed run (``fluidsalus.run(resume=True)``, ``Tuner.restore(...).fit()``,
``tune.run(resume=...)``) takes that copy in place of the stopper it is given, when both are of the same kind,
before anything reaches the devices. As in Ray, what a killed driver's stopper saw after its last save is lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from ray import cloudpickle

from fluidsalus._periodic import SavePeriod
from fluidsalus.checkpoint import write_atomically

__all__ = ["STOPPER_STATE_FILE", "StopperSaves", "forget_trials", "restored_stopper"]

logger = logging.getLogger(__name__)

#: The driver's copy of the run's stopper, pickled, in the experiment's folder.
STOPPER_STATE_FILE = "stopper-state.pkl"


def _saves_state(stopper: Any) -> bool:
    """Whether ``stopper`` is a stopper object, whose state a resume takes back (a dict's thresholds and a plain
    function have none the run could hand on)."""
    return stopper is not None and hasattr(stopper, "stop_all")


def _own(stopper: Any) -> Any:
    """The user's stopper: the one a front end's wrapper holds (``.stopper``, with the rules its translation adds:
    ``fluidsalus.tune._tuner.AnyStopWithStopper``), or ``stopper`` itself. Only it is saved and restored: the added
    rules are the resumed run's (ASHA's ``max_t`` under a search algorithm, say), and a wrapper of the saved run
    and none in the resumed one, or the reverse, do not make its stopper another kind."""
    return stopper.stopper if callable(getattr(stopper, "with_stopper", None)) else stopper


def _kind(stopper: Any) -> str:
    """The module and qualified name of the user's stopper's class: two runs whose stoppers are of different kinds
    do not share a state. The name, not the class: a class of the script's own (``__main__``'s, pickled by value)
    comes back a copy, another class object than the one the resumed script defines again."""
    cls = type(_own(stopper))
    return f"{cls.__module__}.{cls.__qualname__}"


class StopperSaves:
    """Saves the driver's copy of the run's stopper to :data:`STOPPER_STATE_FILE` (nothing for a run without a
    stopper object).

    Args:
        experiment_dir: The experiment's folder.
        stopper: The run's stopper: the driver's copy, which the run gives every result.

    Raises:
        ConfigError: If ``TUNE_GLOBAL_CHECKPOINT_S`` is neither ``auto`` nor a number of seconds (only for a stopper
            object: nothing else is saved).
    """

    def __init__(self, experiment_dir: str, stopper: Any) -> None:
        self.path = os.path.join(experiment_dir, STOPPER_STATE_FILE)
        self.stopper = stopper
        # None once nothing is to be saved: no stopper object (a run that saves nothing does not read the period: a
        # plain fluidsalus.run refused a bad one it never used), or a state that could not be saved (warned of once)
        self._period: SavePeriod | None = SavePeriod() if _saves_state(stopper) else None

    def maybe_save(self) -> None:
        """Save if the period says so."""
        if self._period is not None and self._period.due():
            self.save()

    def save(self) -> bool:
        """Save the stopper now.

        Returns:
            Whether it was saved: not without a stopper object, nor once its state could not be pickled (a lock it
            made since the start, say) or written (its folder gone): one warning, and a resume then starts it
            afresh.
        """
        if self._period is None:
            return False
        started = time.monotonic()
        try:
            data = cloudpickle.dumps(_own(self.stopper))
        except Exception as e:  # noqa: BLE001 - pickling fails with any type
            self._period = None
            logger.warning("the stopper's state cannot be saved (%s: %s); a resumed run starts it afresh",
                           type(e).__name__, e)
            return False
        try:
            write_atomically(self.path, data)
        except OSError as e:  # (the folder gone or full: the run goes on, as without the save)
            self._period = None
            logger.warning("the stopper's state cannot be written to %s (%s); a resumed run starts it afresh",
                           self.path, e)
            return False
        self._period.saved(time.monotonic() - started)
        return True


def restored_stopper(experiment_dir: str, given: Any) -> Any:
    """The stopper a resumed run goes on with: the experiment's saved one, when ``given`` is a stopper object of the
    same kind, else ``given``.

    Args:
        experiment_dir: The experiment's folder.
        given: The stopper the resumed run is given (``tuner.pkl``'s for ``Tuner.restore``, which holds the one the
            script built, as it was at the start).

    Returns:
        The stopper to run with.
    """
    path = os.path.join(experiment_dir, STOPPER_STATE_FILE)
    if not os.path.isfile(path):
        return given
    if not _saves_state(given):
        # (Ray's restored controller goes on with its saved stopper whatever the resumed run is given; here the
        # run's own stop rule, or none, replaces it, and says so)
        logger.warning("the experiment ran with a stopper object, saved in %s; this run's stop (%s) replaces it",
                       path, "none" if given is None else type(given).__name__)
        return given
    try:
        with open(path, "rb") as f:
            saved = cloudpickle.load(f)
    except Exception as e:  # noqa: BLE001 - unpickling fails with any type (a class the script no longer has)
        logger.warning("the experiment's saved stopper cannot be read (%s: %s); this run's starts afresh",
                       type(e).__name__, e)
        return given
    if _kind(saved) != _kind(given):
        logger.warning("the experiment ran with another stopper (%s); this run's (%s) starts afresh",
                       type(_own(saved)).__name__, type(_own(given)).__name__)
        return given
    saved = _own(saved)  # (a file a wrapper was saved to, before only the user's stopper was)
    return given.with_stopper(saved) if _own(given) is not given else saved


def forget_trials(stopper: Any, trial_ids: Iterable[str]) -> bool:
    """Make a restored stopper forget what it saw of trials that a resume runs again from scratch as new trials
    (``Tuner.restore(restart_errored=True)``): Ray gives such a trial a new id, which its restored stopper has not
    seen, so ``MaximumIterationStopper`` counts it from 0; fluidsalus keeps the id. The stoppers of
    :mod:`fluidsalus.tune.stopper` that keep state per trial (``MaximumIterationStopper``, ``TrialPlateauStopper``,
    in a ``CombinedStopper`` too) forget it; a stopper of the user's own keeps what it saw (a difference).

    Args:
        stopper: The run's stopper (a front end's wrapper of it too).
        trial_ids: The trials restarted from scratch.

    Returns:
        Whether the stopper forgot anything (then the devices' copies must be made again).
    """
    forget = getattr(_own(stopper), "_forget_trial", None)
    ids = list(trial_ids or ())
    if not callable(forget) or not ids:
        return False
    for trial_id in ids:
        forget(trial_id)
    return True
