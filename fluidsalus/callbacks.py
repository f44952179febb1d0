"""Driver-side callbacks: told about trial starts, acknowledged results and ended trials.

Callbacks run in the driver process, after the batch they describe has committed to the store, so what a
callback sees is never lost, even if the driver is killed the next instant. Within one batch the starts come
first, then the results and ends in the order they arrived.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class Callback:
    """Subclass and override what you need; every hook is optional."""

    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """Called when the searcher's trial has been made and stored, before it starts (it waits ``PENDING``), in
        the order the trials are made (not for the stored trials a resumed run finds).

        Args:
            trial_id: The trial.
            config: Its configuration.
        """

    def on_trial_status(self, trial_id: str, status: str) -> None:
        """Called when a trial that started is paused or goes on, between its start and its end: ``PAUSED`` (only
        for a searcher that pauses as Ray's scheduler does, ``BaseSearcher.pauses_as_ray``: not ASHA's rung) at the
        result where it reached its budget (after that result's :meth:`on_trial_result`), or when a restart (a
        move, a preemption) leaves it paused off any device; ``RUNNING`` when its searcher promotes it and it resumes
        in place on its device; ``PENDING`` when a paused trial is to start again in a new attempt (promoted while
        paused off any device, a PBT exploit, its turn given to a waiting trial; that attempt's
        :meth:`on_trial_start` follows).

        Args:
            trial_id: The trial.
            status: ``PAUSED``, ``RUNNING`` or ``PENDING``.
        """

    def on_trial_start(self, trial_id: str, config: Mapping[str, Any], attempt: int) -> None:
        """Called when an attempt of a trial has started on a device, with the config it runs.

        Args:
            trial_id: The trial.
            config: Its configuration for this attempt (a PBT exploit starts an attempt with a new one).
            attempt: 0 for the first start; each retry, restore, exploit or restart of an ended trial adds one.
        """

    def on_trial_placed(self, trial_id: str, node_ip: str, pid: int) -> None:
        """Called just before :meth:`on_trial_start`, with where the attempt runs: the IP of its node and the pid
        of the device's process that runs it (rank 0's for a trial on several devices), as Ray's trial location.

        Args:
            trial_id: The trial.
            node_ip: Its node's IP address (Ray's ``node_ip`` result key).
            pid: The process's id (Ray's ``pid`` result key).
        """

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        """Called once per acknowledged result, in order; not again for an iteration the trial runs again after the
        engine restarted it on its own (a move, a preemption, a time slice's turn) from a checkpoint older than its
        last result, which was given the first time (as Ray's trial, never restarted so, reports it once; a
        checkpoint it brings goes to :meth:`on_trial_checkpoint`), nor after a device's death not charged to the trial
        as a failure. A redone result that ends the trial is given (its last). The iterations a retry or an exploit
        runs again are given again, as Ray's retry gives them."""

    def on_trial_checkpoint(self, trial_id: str, iteration: int, checkpoint_dir_name: str) -> None:
        """Called when a trial has saved a checkpoint of an iteration whose result it reported without one (a
        class ``Trainable`` saving where :meth:`checkpoint_requests` asked; an iteration run again after the
        engine's own restart that brings a checkpoint, its result kept from :meth:`on_trial_result`), once it is
        stored.

        Args:
            trial_id: The trial.
            iteration: The iteration (``training_iteration``) the checkpoint is of.
            checkpoint_dir_name: Its folder, in the trial's folder.
        """

    def on_trial_complete(self, trial_id: str, status: str, result: Mapping[str, Any] | None) -> None:
        """Called once when a trial ends (``status`` is TERMINATED or ERROR), with its last result: on its device,
        or off any device when its searcher stops it (or the search ends) while it is queued or paused there (not
        when the run's end ends it there: a time budget, ``stop_all()``, ``fail_fast``; nor one the run's end finds
        prefetched onto a device, not begun: it ends as a queued one)."""

    def on_run_ending(self, reason: str) -> None:
        """Called once when the run begins to end early (``reason``: ``"time_budget"``, ``"fail_fast"`` or
        ``"stop_all"``), before its trials are stopped: those queued or paused off any device end at once without
        :meth:`on_trial_complete` (and so do those prefetched onto a device that have not begun, once their device
        ends them); those running on a device stop at their next report and do get it (Ray Tune's front end,
        ``fluidsalus.tune``, passes it on to its Ray callbacks but keeps those trials ``TERMINATED`` whatever they
        do, as Ray, which ends them without a hook)."""

    def on_step_begin(self) -> None:
        """Called at the start of each pass of the driver's loop (before it takes new trials and waits for
        results), as Ray Tune calls ``on_step_begin`` at each step of its controller."""

    def on_step_end(self) -> None:
        """Called at the end of each pass of the driver's loop, after the results it waited for were handled."""

    def failed_ends(self) -> Iterable[tuple[str, str, str | None, bytes | None]]:
        """Trials whose end this callback could not take, asked since the last call (the executor asks after each
        round of :meth:`on_trial_complete`): ``(trial_id, error text, traceback, pickled exception or None)``. The
        executor records each such trial that ended ``TERMINATED`` as ``ERROR`` with that error (its results and
        checkpoints stay), as Ray Tune fails a trial whose callback's ``on_trial_complete`` raised; the searcher has
        been told of its completion already, as in Ray. Default: none."""
        return ()

    def checkpoint_requests(self) -> Iterable[str]:
        """Trials to checkpoint, asked for since the last call (the executor asks after each batch's hooks), each
        at the iteration of its last result. Only a class ``Trainable`` can be made to save; a function trainable
        checkpoints when it reports one. A class ``Trainable`` run by ``fluidsalus.tune`` with a callback that
        overrides this (or a Ray callback's ``on_trial_result``) waits for the answer after each result and saves
        that iteration (:meth:`on_trial_checkpoint`); otherwise it saves at its next iteration. Default: none."""
        return ()
